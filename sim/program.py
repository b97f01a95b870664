"""The structured program the compiler emits and the engine runs.

Like a Poplar program tree: :class:`Sequence` and :class:`Repeat` give structure; the leaves
are steps that occupy hardware:

:class:`Compute`      a run of supersteps (exchange, sync, compute) on one IPU's compute tiles,
                      with no external sync inside; its per-op parts are kept for reports
:class:`StreamCopy`   a host <-> IPU stream copy of one tensor
:class:`Sync`         a barrier over a group of IPUs (external) or with the host
:class:`IpuCopy`      a copy between two IPUs over IPU-Links

Times are cycles of the IPU clock; sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CATEGORIES = ("compute", "exchange", "sync", "host_io", "inter_ipu", "collective", "idle")


@dataclass(frozen=True)
class OpSteps:
    """The ops of a :class:`Compute` step, as parallel arrays (cycles per op)."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    compute: np.ndarray
    exchange: np.ndarray
    sync: np.ndarray
    flops: np.ndarray
    exchange_bytes: np.ndarray

    @property
    def cycles(self) -> np.ndarray:
        return self.compute + self.exchange + self.sync


@dataclass
class Compute:
    """Supersteps on one IPU's compute tiles; ``cycles`` is the sum of its ops' cycles."""

    ipu: int
    name: str
    ops: OpSteps

    @property
    def cycles(self) -> int:
        return int(self.ops.cycles.sum())

    def breakdown(self) -> dict[str, int]:
        return {"compute": int(self.ops.compute.sum()), "exchange": int(self.ops.exchange.sum()),
                "sync": int(self.ops.sync.sum())}


@dataclass
class StreamCopy:
    """A host stream copy of one tensor.

    ``direction`` is ``"to_ipu"`` or ``"from_ipu"``; ``stream`` is the tensor's index among the
    model's inputs (or outputs) in flattened order, which keys the perf counters; ``host_sync``
    says whether this copy opens its step's host exchange (one host sync per step).
    """

    ipu: int
    name: str
    direction: str
    nbytes: int
    stream: int
    host_sync: bool = True
    replica: int = 0


@dataclass
class Sync:
    """A barrier. ``scope`` is ``"external"`` (between IPUs) or ``"host"``."""

    ipus: tuple[int, ...]
    scope: str
    cycles: int
    name: str = "sync"


@dataclass
class IpuCopy:
    """One merged inter-IPU copy: ``transfers`` are ``(src, dst, nbytes)``, all in one step.

    Transfers in opposite directions, or between other pairs, use separate links and overlap.
    """

    transfers: tuple[tuple[int, int, int], ...]
    name: str = "ipu_copy"

    @property
    def nbytes(self) -> int:
        return sum(n for _, _, n in self.transfers)

    @property
    def ipus(self) -> set[int]:
        return {i for s, d, _ in self.transfers for i in (s, d)}


@dataclass
class Sequence:
    items: list = field(default_factory=list)
    name: str = ""

    def add(self, item) -> None:
        if item is not None:
            self.items.append(item)


@dataclass
class Repeat:
    """``body`` run ``count`` times.

    ``collapse`` says the iterations cannot overlap (each ends before the next starts, as
    after a barrier), so the engine may run the body once and repeat its timing.
    """

    count: int
    body: Sequence
    name: str = "repeat"
    collapse: bool = True


def ipus_of(item) -> set[int]:
    """IPUs a program item runs on."""
    if isinstance(item, (Compute, StreamCopy)):
        return {item.ipu}
    if isinstance(item, Sync):
        return set(item.ipus)
    if isinstance(item, IpuCopy):
        return item.ipus
    if isinstance(item, Sequence):
        return set().union(*(ipus_of(i) for i in item.items)) if item.items else set()
    if isinstance(item, Repeat):
        return ipus_of(item.body)
    raise TypeError(f"not a program item: {item!r}")
