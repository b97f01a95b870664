"""The held-out rows' errors that runs quote (:mod:`sim.results.held_out`), written from the rows.

``python -m sim.validation`` calls :func:`write` beside the report: every row of
:data:`~sim.validation.published.PUBLISHED_ROWS` the simulator runs, with its workload family, mode,
IPUs and error, and where its busiest IPU's time goes (:data:`~sim.results.held_out.SHARE_COLUMNS`), to
:data:`sim.results.held_out.TABLE`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import OutOfMemoryError
from ..results.held_out import COLUMNS, SHARE_COLUMNS, TABLE
from ..results.report import atomic_write
from .published import PUBLISHED_ROWS
from .runner import _outcome, shares, workload


def table() -> pd.DataFrame:
    """Every held-out row the simulator runs (those out of memory in it are left out), with its
    :data:`~sim.results.held_out.COLUMNS` and :data:`~sim.results.held_out.SHARE_COLUMNS`, simulated now
    (each setup once: :mod:`sim.validation.runner`)."""
    rows = []
    for r in PUBLISHED_ROWS:
        simulated = _outcome(r.setup)
        if isinstance(simulated, OutOfMemoryError):
            continue
        family, ipus = workload(r.setup)
        fixed, exchange = shares(r.setup)
        rows.append((r.id, r.setup.model, family, r.setup.training, ipus, r.published, float(f"{simulated:.6g}"),
                     round(simulated / r.published - 1, 4), round(fixed, 4), round(exchange, 4)))
    return pd.DataFrame(rows, columns=list(COLUMNS + SHARE_COLUMNS))


def write(path: Path = TABLE) -> Path:
    """:func:`table` to ``path``, whole or not at all."""
    frame = table()
    return atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
