"""The structured program the compiler emits and the engine runs.

Like a Poplar program tree: :class:`Sequence` and :class:`Repeat` give structure; the leaves
are steps that occupy hardware:

:class:`Compute`      a run of supersteps (exchange, sync, compute) on one IPU's compute tiles,
                      with no external sync inside; its per-op parts are kept for reports
:class:`StreamCopy`   a host <-> IPU stream copy of one tensor
:class:`Sync`         a barrier over a group of IPUs (external) or with the host
:class:`IpuCopy`      a merged copy between IPUs over IPU-Links
:class:`RemoteCopy`   a load from / store to streaming memory (remote buffers)
:class:`Collective`   a collective (all-reduce, reduce-scatter, ...) across replicas, as steps
                      that each occupy the links of the ring for a number of cycles

:class:`Parallel` is a :class:`Sequence` whose steps are on separate IPUs and share nothing (the
stages of a pipeline cycle), which the engine times as a whole.

Times are cycles of the IPU clock; sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: where an IPU's cycles go. ``launch`` and ``exchange_setup`` are the fixed costs of compute sets
#: (vertex launch and prologues) and of exchange phases, which do not shrink with the work;
#: ``compute`` and ``exchange`` are what is left of them.
CATEGORIES = ("compute", "launch", "exchange", "exchange_setup", "sync", "host_io", "remote_io", "inter_ipu",
              "collective", "idle")


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
    tile_compute: np.ndarray | None = None  # compute cycles of each tile, summed over the ops
    launch: np.ndarray | None = None  # the fixed part of ``compute`` (zeros when None)
    exchange_setup: np.ndarray | None = None  # the fixed part of ``exchange`` (zeros when None)

    @property
    def cycles(self) -> np.ndarray:
        return self.compute + self.exchange + self.sync

    def parts(self) -> dict[str, np.ndarray]:
        """Cycles per op by breakdown category; they add up to :attr:`cycles`."""
        launch = self.launch if self.launch is not None else np.zeros_like(self.compute)
        setup = self.exchange_setup if self.exchange_setup is not None else np.zeros_like(self.exchange)
        return {"compute": self.compute - launch, "launch": launch, "exchange": self.exchange - setup,
                "exchange_setup": setup, "sync": self.sync}


@dataclass
class Compute:
    """Supersteps on one IPU's compute tiles; ``cycles`` is the sum of its ops' cycles."""

    ipu: int
    name: str
    ops: OpSteps
    after: tuple = ()  # other items (e.g. an IO-tile stream copy) whose latest run must end first

    @property
    def cycles(self) -> int:
        return int(self.ops.cycles.sum())


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
    io_tiles: bool = False  # runs on the IPU's IO tiles, concurrently with compute
    prefetch: int = 1  # host buffers of the stream: the host side runs up to this many copies ahead / behind
    fill_ahead: bool = False  # Poplar prefetches an input's buffers while the IPU computes (PopART's prefetch)
    host_fills: float = 1.0  # input buffer fills the host thread makes for this copy (the replicas it stands for)
    host_thread: tuple = (0, 0)  # (host process, stream-callback thread) that fills it
    callback_s: float = 0.0  # that thread's fixed work per replica's copy (PopART's StepIO callback), in seconds
    after: tuple = ()  # other items whose latest run must end first (IO-tile buffer reuse)
    label: str = ""  # what the timeline calls the copy (default: the tensor's name)
    counted: bool = True  # a model input's or output's copy, stamped in the perf counters (a host call's is not)


@dataclass
class Sync:
    """A barrier. ``scope`` is ``"external"`` (between IPUs) or ``"host"``."""

    ipus: tuple[int, ...]
    scope: str
    cycles: int
    name: str = "sync"
    after: tuple = ()  # other items (e.g. IO-tile stream copies) whose latest run must end first


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
class RemoteCopy:
    """A load (``"load"``) from or store (``"store"``) to streaming memory of ``nbytes``.

    On the compute tiles it holds the IPU; with ``io_tiles`` it runs on the IO tiles, concurrently
    with compute, and whatever moves its data to or from the compute tiles waits for it (``after``).
    """

    ipu: int
    direction: str
    nbytes: int
    name: str = "remote"
    io_tiles: bool = False
    after: tuple = ()  # other items whose latest run must end first (the copy of a store's data to the IO tiles)


@dataclass
class Collective:
    """A collective over replicas, priced by :mod:`sim.schedule.collectives`.

    ``ipus`` are the simulated IPUs taking part (replica symmetry: the others are not
    simulated but count in ``group_size``). ``phases`` are ``(steps, cycles per step)``; each
    step holds the ``links`` resources, so other traffic on those links queues behind it.
    """

    ipus: tuple[int, ...]
    op: str
    nbytes: int
    group_size: int
    algorithm: str
    phases: tuple[tuple[int, int], ...]
    links: tuple[tuple, ...] = ()
    name: str = "collective"

    @property
    def cycles(self) -> int:
        return sum(n * c for n, c in self.phases)


@dataclass
class Sequence:
    items: list = field(default_factory=list)
    name: str = ""

    def add(self, item) -> None:
        if item is not None:
            self.items.append(item)


class Parallel(Sequence):
    """Steps on separate IPUs that share nothing, like the stages of one pipeline cycle.

    ``items`` are :class:`Compute` and :class:`RemoteCopy` steps; each IPU runs its own in
    program order, back to back from when its previous step ends, and holds only its own tiles
    and streaming memory, so the IPUs neither wait for nor contend with each other. A plain
    :class:`Sequence` of the same items means the same; the engine times a Parallel as a whole
    (one task per group of IPUs that start together) instead of a task per step. Items of any
    other kind make it an ordinary Sequence; no item elsewhere may name its items in ``after``.
    """


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
    if isinstance(item, (Compute, StreamCopy, RemoteCopy)):
        return {item.ipu}
    if isinstance(item, (Sync, Collective)):
        return set(item.ipus)
    if isinstance(item, IpuCopy):
        return item.ipus
    if isinstance(item, Sequence):
        out: set[int] = set()
        for sub in item.items:
            if type(sub) in _ON_ONE_IPU:  # the common leaves, without a call each
                out.add(sub.ipu)
            else:
                out |= ipus_of(sub)
        return out
    if isinstance(item, Repeat):
        return ipus_of(item.body)
    raise TypeError(f"not a program item: {item!r}")


_ON_ONE_IPU = (Compute, StreamCopy, RemoteCopy)


def leaves(item):
    """Every leaf item of a program, in program order (each Repeat body once)."""
    if isinstance(item, Sequence):
        for sub in item.items:
            yield from leaves(sub)
    elif isinstance(item, Repeat):
        yield from leaves(item.body)
    else:
        yield item
