"""Replicas written out from the simulated ones: the simulator runs some replicas (by symmetry)
and the others repeat them, so a table of every replica takes each simulated replica's rows again."""

from __future__ import annotations

import numpy as np


def replica_rows(owner: np.ndarray, simulated, replicas: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows written out for every replica: replica ``r`` repeats, in order, the rows whose
    ``owner`` (a simulated replica's index) is ``simulated[r % len(simulated)]``; the replicas
    one after another. Returns (the row positions taken, each taken row's replica, and how many
    replicas it is shifted from its source: replica - source), all int64 arrays."""
    rows_of = {s: np.flatnonzero(owner == s) for s in set(simulated)}
    sources = [simulated[r % len(simulated)] for r in range(replicas)]
    counts = [len(rows_of[s]) for s in sources]
    if not sources:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    index = np.concatenate([rows_of[s] for s in sources]).astype(np.int64, copy=False)
    replica = np.repeat(np.arange(replicas, dtype=np.int64), counts)
    return index, replica, replica - np.repeat(np.array(sources, dtype=np.int64), counts)
