"""The SimPy engine: runs a :class:`~sim.program.Sequence` on a model of the hardware.

Lowering turns the program into tasks. Each task waits for the tasks it depends on (program
order on each *lane* it runs on: an IPU's compute tiles, its IO tiles, the host's side of a
stream), holds the resources it needs (compute tiles, IO tiles, a host link, an IPU-Link
direction, streaming memory) and lasts a number of cycles; the engine runs one SimPy process
per task, so tasks that share a resource queue for it (FIFO) and independent ones overlap.

Loops are not simulated iteration by iteration when they need not be:

* a :class:`~sim.program.Repeat` whose iterations cannot overlap (``collapse=True``) is
  simulated once; it becomes one task of ``count x`` the body's length and its records are
  tiled. Identical bodies are simulated once per run.
* a Repeat whose iterations do overlap (prefetching, IO tiles) is simulated for
  ``STEADY_ITERATIONS + 1`` iterations; from then on each iteration is the previous one
  shifted by the steady-state period (:func:`steady_period`: the slowest lane's), so the rest
  are extrapolated, not simulated.

A :class:`~sim.program.Parallel` (the stages of a pipeline cycle, each on its own IPU) is one
task per group of IPUs that start together, not a task per step: its records are kept, and a
later task waits for the end of the IPUs it runs on (a *lane end*, the group's start plus the
IPU's cycles).

Tasks on one lane run one after another, so a resource whose holders all share a lane is never
contended: an IPU's compute tiles (held only by tasks on its lane), its streaming memory, its IO
tiles, a link only one IPU's copies use. Only contended resources are requested from SimPy; a
task that holds resources but none contended makes one zero-delay step where its requests were
granted, so events at equal times keep their order. So a pipeline of ``P`` stages costs SimPy
events in proportion to its cycles, not to cycles x stages.

The result is a :class:`Timeline`: the total, task records (columnar, with repeats kept as
offsets and expanded on demand), stream-copy events for the perf counters, and busy cycles
per IPU per category.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import takewhile

import numpy as np
import simpy

from .errors import IpuSimError, show_number
from .hardware.system import System
from .hardware.topology import crosses_gw_link, route
from .virtual_clock import real_perf_counter
from .program import (CATEGORIES, Collective, Compute, IpuCopy, Parallel, RemoteCopy, Repeat, Sequence,
                      StreamCopy, Sync, ipus_of, leaves)

STEADY_ITERATIONS = 8  # iterations simulated before an overlapping loop is extrapolated
MAX_CYCLES = 2**62  # the simulated time must fit the int64 cycle arrays with room for sums
COLLECTIVE_PHASES = 32  # resource-holding groups of steps per phase of a collective
HOST_CALLBACKS = "host_callbacks"  # a host process's stream-callback thread, which fills input buffers
COPIES = ("host_io", "host_io_overlapped")  # the categories of stream copies' device-side tasks
UNUSED_FILL = "unused_fill"  # a fill made after a loop for a copy that never came (no time, no record)


def stream_key(s: StreamCopy) -> tuple:
    """A stream of one replica's IPU in one direction: its copies share (and refill) its buffers."""
    return s.ipu, s.replica, s.stream, s.direction


def _busy():
    return defaultdict(lambda: defaultdict(int))


@dataclass
class Records:
    """Columnar task records; each row also occurs at every offset in ``offsets``.

    ``tag`` is the iteration of the enclosing simulated loop a row belongs to (0 outside one).
    ``ipus`` holds, per row, every IPU whose tiles the task holds (a sync, an inter-IPU copy or
    a collective takes part on each of them); ``ipu`` is the first of them.
    """

    ipu: np.ndarray
    category: np.ndarray  # object array of str
    name: np.ndarray  # object array of str
    start: np.ndarray  # cycles, relative to the offsets
    end: np.ndarray
    nbytes: np.ndarray
    detail: list  # per row: OpSteps for compute tasks, the (src, dst, bytes) transfers of inter-IPU copies, else None
    offsets: np.ndarray  # cycles
    tag: np.ndarray
    ipus: np.ndarray  # object array of tuples of IPU indices

    def select(self, mask: np.ndarray, offsets: np.ndarray) -> "Records":
        return Records(self.ipu[mask], self.category[mask], self.name[mask], self.start[mask], self.end[mask],
                       self.nbytes[mask], [d for d, m in zip(self.detail, mask) if m], offsets, self.tag[mask],
                       self.ipus[mask])


@dataclass
class StreamEvents:
    """Stream-copy events: one row per copy, with the same offset scheme as :class:`Records`."""

    direction: np.ndarray  # object array: "to_ipu" / "from_ipu"
    stream: np.ndarray
    replica: np.ndarray
    start: np.ndarray
    end: np.ndarray
    offsets: np.ndarray
    tag: np.ndarray

    def select(self, mask: np.ndarray, offsets: np.ndarray) -> "StreamEvents":
        return StreamEvents(self.direction[mask], self.stream[mask], self.replica[mask], self.start[mask],
                            self.end[mask], offsets, self.tag[mask])


@dataclass
class Timeline:
    """What one simulation produced. Times in cycles."""

    total_cycles: int
    records: list[Records] = field(default_factory=list)
    streams: list[StreamEvents] = field(default_factory=list)
    busy: dict = field(default_factory=_busy)  # ipu -> category -> cycles
    busy_by_tag: dict = field(default_factory=lambda: defaultdict(_busy))
    resources: set = field(default_factory=set)  # every resource a task held, requested or not
    events: int = 0  # SimPy events processed, summed over sub-simulations
    event_seconds: float = 0.0  # wall seconds of SimPy's event loop processing them (for the benchmark)
    iteration_starts: list = field(default_factory=list)  # of a tagged (loop) simulation
    lane_iteration_starts: dict = field(default_factory=dict)  # lane -> the same on that lane (None: no task)
    last_copies: dict = field(default_factory=dict)  # input stream (stream_key) -> its last copy's end
    last_fills: dict = field(default_factory=dict)  # host thread -> when its last fill of an input buffer ended
    fill_bound: bool = False  # whether an input copy (a loop's inside included) waited for its buffer's fill

    def place(self, offsets: np.ndarray, tag: int, rows_tag: int | None = None):
        """Records and streams of this timeline at each of ``offsets``, tagged ``tag``.

        With ``rows_tag``, only the rows of that iteration of this timeline are placed.
        """
        def shift(chunk):
            mask = np.ones(len(chunk.start), bool) if rows_tag is None else chunk.tag == rows_tag
            new = chunk.select(mask, (offsets[:, None] + chunk.offsets[None, :]).ravel())
            new.tag = np.full(len(new.start), tag)
            return new
        recs = [r for r in map(shift, self.records) if len(r.start)]
        strs = [s for s in map(shift, self.streams) if len(s.start)]
        return recs, strs


@dataclass(slots=True)
class Task:
    """One node of the task graph: waits for ``deps``, holds resources, lasts its phases."""

    deps: list[int]
    hold: list[tuple]  # resources held for the whole task (requested in sorted order), besides compute tiles
    phases: list[tuple[list[tuple], int]]  # (extra resources, cycles)
    ipu: int
    category: str
    name: str
    nbytes: int = 0
    detail: object = None
    stream: StreamCopy | None = None
    macro: tuple | None = None  # ("tile", count, sub) or ("steady", count, sub, period)
    tag: int = 0
    stream_end: int | None = None  # task whose end is the stream's completion (async host side)
    tiles: tuple[int, ...] = ()  # IPUs whose compute tiles the task holds (only tasks on their lanes do)
    lanes: tuple = ()  # the lanes the task is on (it follows the previous task of each)
    block: Block | None = None  # a Parallel's steps, timed as a whole
    lane_end: tuple | None = None  # (block task, group, cycles): a point of a block that others wait for

    @property
    def cycles(self) -> int:
        """Cycles the task lasts when it never waits for a resource."""
        return sum(c for _, c in self.phases)


def _objects(values) -> np.ndarray:
    """A 1-D object array of ``values`` (tuples stay whole)."""
    return np.fromiter(values, dtype=object, count=len(values))


class StepTable:
    """The steps of Parallels (Compute and RemoteCopy items), priced once: a row per item.

    Columns: ``ipu``, ``category``, ``name``, ``cycles``, ``nbytes``, ``detail`` (OpSteps or
    None), ``ipus`` (``(ipu,)``: the IPUs of the step's trace row) and ``busy`` (cycles per
    breakdown category, a column per :data:`~sim.program.CATEGORIES`).
    """

    def __init__(self, engine: Engine):
        self.engine = engine
        self.row: dict[int, int] = {}  # id(item) -> row, or -1 if the item is not a step
        self.items: list = []  # kept alive so that their ids stay unique
        self.lists: dict[str, list] = {k: [] for k in ("ipu", "category", "name", "cycles", "nbytes", "detail",
                                                       "ipus", "busy")}
        self._arrays: dict[str, np.ndarray] = {}

    def rows(self, items) -> list[int] | None:
        """The rows of ``items``, or None if one of them is not a step."""
        rows = [self.row.get(id(item)) for item in items]
        if None in rows:
            rows = [self._add(item) if r is None else r for item, r in zip(items, rows)]
        return None if -1 in rows else rows

    def _add(self, item) -> int:
        if id(item) in self.row:  # listed twice in one Parallel
            return self.row[id(item)]
        self.items.append(item)
        if isinstance(item, Compute) and not item.after:
            busy = {cat: int(c.sum()) for cat, c in item.ops.parts().items()}
            values = (item.ipu, "compute", item.name, item.cycles, 0, item.ops)
        elif isinstance(item, RemoteCopy):
            cycles = self.engine.remote_cycles(item)
            busy = {"remote_io": cycles}
            values = (item.ipu, "remote_io", item.name, cycles, item.nbytes, None)
        else:
            self.row[id(item)] = -1
            return -1
        values += ((item.ipu,), [busy.get(c, 0) for c in CATEGORIES])
        for column, value in zip(self.lists.values(), values):
            column.append(value)
        self.row[id(item)] = len(self.lists["ipu"]) - 1
        return self.row[id(item)]

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as arrays (rebuilt when rows were added)."""
        n = len(self.lists["ipu"])
        if len(self._arrays.get("ipu", ())) != n:
            lists = self.lists
            self._arrays = {"ipu": np.array(lists["ipu"], dtype=np.int64),
                            "cycles": np.array(lists["cycles"], dtype=np.int64),
                            "nbytes": np.array(lists["nbytes"], dtype=np.int64),
                            "busy": np.array(lists["busy"], dtype=np.int64).reshape(n, len(CATEGORIES)),
                            **{k: _objects(lists[k]) for k in ("category", "name", "detail", "ipus")}}
        return self._arrays


@dataclass
class Block:
    """A lowered :class:`~sim.program.Parallel`. Cycles are relative to a group's start.

    The IPUs whose previous task is the same start together, as group ``k``: when the tasks
    ``entries[k]`` are done; ``lengths[k]`` is the cycles of the group's longest IPU, and
    ``lane_ends[k]`` lists ``(cycles, task)``: the lane-end tasks that later tasks wait for.
    Per row (a step, in program order): ``steps`` (its row in the :class:`StepTable`),
    ``group`` and ``at`` (cycles from the group's start). ``held``: the resources the steps
    hold besides tiles (an IPU's streaming memory), by IPU.
    """

    entries: list[list[int]]
    lengths: list[int]
    lane_ends: list[list[tuple[int, int]]]
    steps: np.ndarray
    group: np.ndarray
    at: np.ndarray
    held: dict[int, list[tuple]]


class Engine:
    """Simulates programs on ``system``."""

    def __init__(self, system: System):
        self.system = system
        self.steps = StepTable(self)
        self._memo: dict[tuple, tuple] = {}
        self._routes: dict[tuple[int, int], tuple] = {}  # (src, dst) -> (hops, the link they cross)
        self._transfers: dict[tuple, tuple] = {}  # (src, dst, nbytes) -> (link resources, cycles alone)
        self._parts: dict[int, tuple] = {}  # id(OpSteps) -> (OpSteps, busy cycles by category)

    # --- costs of the leaves ---------------------------------------------------------------
    def host_link_of(self, ipu: int) -> int:
        return ipu // self.system.host_link.ipus_per_link

    def stream_phases(self, s: StreamCopy) -> list[tuple[list[tuple], int]]:
        """Phases of a stream copy: (resources beyond the IPU's tiles, cycles).

        To the IPU: host sync and request, the host filling the stream buffer, the host link to
        the gateway, then the gateway-to-tiles transfer. From the IPU: the reverse, no fill. Before an
        input's fill the host's stream-callback thread also does its fixed work for each replica's copy
        (``StreamCopy.callback_s``); an output's completion is not charged.
        """
        host, device = self.prefetch_phases(s)
        return host + device if s.direction == "to_ipu" else device + host

    def prefetch_phases(self, s: StreamCopy):
        """(host-side phases, IPU-side phases) of a stream copy.

        The host side (the request, the buffer fill, the host link to the gateway) can run ahead
        of the IPU when inputs are prefetched; the IPU side is the host sync and the
        gateway-to-tiles transfer. Without a gateway (a PCIe card: :attr:`System.has_gateway`)
        the IPU's copy reads the host buffer over the PCIe link itself, so the host side is the
        request and the fill, and the copy crosses the link once, on the IPU side.
        """
        hl = self.system.host_link
        sysm = self.system
        link = [("host_link", self.host_link_of(s.ipu), s.direction)]
        sync = hl.host_sync_cycles if s.host_sync else 0
        latency = sysm.seconds_to_cycles(hl.latency_s)
        device = sysm.seconds_to_cycles(s.nbytes / hl.gateway_to_ipu_bytes_per_s)
        if s.direction == "to_ipu":
            # the process's callback thread serves the copies one at a time, this copy's and those of the
            # replicas it stands for (StreamCopy.host_fills): its callback's own work, then the fill
            callback = sysm.seconds_to_cycles(s.callback_s * s.host_fills)
            prep = sysm.seconds_to_cycles(s.nbytes * s.host_fills / hl.host_prepare_bytes_per_s)
            fill = ([(HOST_CALLBACKS,) + tuple(s.host_thread)], latency + callback + prep)
            if not sysm.has_gateway:
                return [fill], [([], sync), (link, device)]
            wire = sysm.seconds_to_cycles(s.nbytes / hl.host_to_ipu_bytes_per_s)
            return [fill, (link, wire)], [([], sync), ([], device)]
        if not sysm.has_gateway:
            return [], [([], sync + latency), (link, device)]
        wire = sysm.seconds_to_cycles(s.nbytes / hl.ipu_to_host_bytes_per_s)
        return [(link, wire)], [([], sync + latency), ([], device)]

    def prefetch_split(self, s: StreamCopy):
        """(host-side phases, IPU-side phases) of a prefetched copy: :meth:`prefetch_phases`, but with one
        buffer refilled while the IPU computes only the host's fill runs ahead, once the previous copy has
        emptied the buffer, and the link carries the data in the copy."""
        host, device = self.prefetch_phases(s)
        if s.prefetch < 2 and s.direction == "to_ipu":
            return host[:1], device[:1] + host[1:] + device[1:]
        return host, device

    def ipu_copy_links(self, c: IpuCopy) -> dict[tuple[int, int], int]:
        """Bytes on each directed IPU-Link the copy's transfers are routed over."""
        per_link: dict[tuple[int, int], int] = defaultdict(int)
        for src, dst, nbytes in c.transfers:
            for hop in self._route(src, dst)[0]:
                per_link[hop] += nbytes
        return per_link

    def ipu_copy_cycles(self, c: IpuCopy) -> int:
        """The slowest transfer: one link latency per hop of its route plus the busiest link of
        the route's bytes over that link's bandwidth (cut-through: the hops stream together).
        A transfer that leaves the POD crosses a GW-Link, with its latency and bandwidth."""
        return self._ipu_copy(c)[1]

    def _ipu_copy(self, c: IpuCopy) -> tuple[list[tuple], int]:
        """(the link resources a copy holds; its cycles). Each transfer is timed once on its
        own; where transfers share a link, each is timed with the bytes of its busiest link."""
        alone = [self._transfers.get(t) or self._transfer(t) for t in c.transfers]
        links = [link for a in alone for link in a[0]]
        if len(set(links)) == len(links):  # no link carries two transfers
            return links, max((a[1] for a in alone), default=0)
        # a link index per hop, then the bytes on each link and each transfer's busiest link
        index: dict[tuple, int] = {}
        hops = np.array([index.setdefault(link, len(index)) for link in links], dtype=np.int64)
        counts = np.array([len(a[0]) for a in alone], dtype=np.int64)
        per_link = np.zeros(len(index), dtype=np.int64)
        np.add.at(per_link, hops, np.repeat(np.array([t[2] for t in c.transfers], dtype=np.int64), counts))
        busiest = np.maximum.reduceat(per_link[hops], np.cumsum(counts) - counts)
        rates = np.array([a[2] for a in alone])  # bytes per second of each transfer's link
        wire = np.ceil(busiest / rates * self.system.ipu.clock_hz).astype(np.int64)  # seconds_to_cycles
        return list(index), int((np.array([a[3] for a in alone], dtype=np.int64) + wire).max())

    def _transfer(self, transfer: tuple[int, int, int]) -> tuple:
        """One transfer alone: (its link resources, its cycles: a link latency per hop plus its
        bytes over the link's bandwidth, the link's bytes per second, the latency part)."""
        src, dst, nbytes = transfer
        hops, link = self._route(src, dst)
        if not hops:
            raise ValueError(f"an inter-IPU copy from IPU {src} to itself")
        latency = link.latency_cycles * len(hops)
        cycles = latency + self.system.seconds_to_cycles(nbytes / link.bytes_per_s)
        self._transfers[transfer] = ([("ipu_link", a, b) for a, b in hops], cycles, link.bytes_per_s, latency)
        return self._transfers[transfer]

    def _route(self, src: int, dst: int) -> tuple[list[tuple[int, int]], object]:
        """The hops from ``src`` to ``dst`` and the link they cross (an IPU-Link or a GW-Link)."""
        key = (src, dst)
        if key not in self._routes:
            link = self.system.gw_link if crosses_gw_link(self.system, src, dst) else self.system.ipu_link
            self._routes[key] = (route(self.system, src, dst), link)
        return self._routes[key]

    def remote_cycles(self, r: RemoteCopy) -> int:
        mem = self.system.streaming_memory
        return mem.latency_cycles + self.system.seconds_to_cycles(r.nbytes / mem.bytes_per_s_per_ipu)

    # --- lowering --------------------------------------------------------------------------
    def lower(self, seq: Sequence, tagged: bool = False, warm: frozenset = frozenset()) -> list[Task]:
        """The task graph of ``seq``: tasks in program order, deps as indices into the list.

        Program order is kept per lane: an IPU's compute tiles (``ipu``), its IO tiles
        (``("io", ipu)``) and the host side of each prefetched stream. An item may also wait
        for other items (``after``). With ``tagged``, the tasks of ``seq.items[i]`` get tag ``i``.
        A lane whose latest work is in a :class:`Parallel` ends at a point of that block; a task
        waiting for it waits for a lane-end task, one per block group and cycle count.
        ``warm``: pairs of an input stream (:func:`stream_key`) and how many of its first copies the
        enclosing run filled before ``seq`` (a loop's body simulated on its own) starts, as the stream
        flowed before the loop (:meth:`lower`'s ``repeat``).
        """
        tasks: list[Task] = []
        last: dict = {}  # lane -> its latest task, or (block task, group, cycles) for a block's lane
        emitted: dict = {}  # id(program item) -> its latest task
        lane_ends: dict[tuple, int] = {}  # (block task, group, cycles) -> lane-end task
        buffers: dict = defaultdict(list)  # multibuffered stream -> the tasks that free its buffers
        warm_copies = dict(warm)  # input stream -> how many of its first copies were filled before seq
        flowed = set(warm_copies)  # streams transferred before the current item
        pending: dict = {}  # input stream -> the fill made after a loop for its next copy: fill()
        prefilled: dict = {}  # warm input stream -> how many more of its copies were filled before the loop
        tag = 0

        def lane_end(point: tuple) -> int:
            if point not in lane_ends:
                b, k, cycles = point
                lane_ends[point] = len(tasks)
                tasks.append(Task([], [], [], tasks[b].ipu, "lane_end", tasks[b].name, tag=tag, lane_end=point))
                tasks[b].block.lane_ends[k].append((cycles, lane_ends[point]))
            return lane_ends[point]

        def deps_of(lanes, item=None):
            found = {last.get(i) for i in lanes}
            found.update(emitted.get(id(other)) for other in getattr(item, "after", ()))
            found.discard(None)
            deps, points = set(), {}
            for d in found:
                if type(d) is int:
                    deps.add(d)
                else:  # within a block group, only the latest point counts
                    b, k, cycles = d
                    if points.get((b, k), -1) < cycles:
                        points[(b, k)] = cycles
            deps.update(lane_end((b, k, cycles)) for (b, k), cycles in points.items())
            return sorted(deps)

        def emit(task: Task, lanes, item=None) -> int:
            task.tag = tag
            task.lanes = tuple(lanes)
            tasks.append(task)
            for i in lanes:
                last[i] = len(tasks) - 1
            if item is not None:
                emitted[id(item)] = len(tasks) - 1
            return len(tasks) - 1

        def walk(item):
            if isinstance(item, Parallel):
                parallel(item)
            elif isinstance(item, Sequence):
                for sub in item.items:
                    walk(sub)
            elif isinstance(item, Repeat):
                repeat(item)
            elif isinstance(item, Compute):
                emit(Task(deps_of([item.ipu], item), [], [([], item.cycles)], item.ipu, "compute", item.name,
                          detail=item.ops, tiles=(item.ipu,)), [item.ipu], item)
            elif isinstance(item, StreamCopy):
                stream(item)
            elif isinstance(item, RemoteCopy):
                if item.io_tiles:  # on the IO tiles' own lane: compute goes on meanwhile
                    lane = ("io", item.ipu, "remote")
                    emit(Task(deps_of([lane], item), [("streaming_memory", item.ipu), ("io_tiles", item.ipu, "remote")],
                              [([], self.remote_cycles(item))], item.ipu, "remote_io_overlapped", item.name,
                              item.nbytes, tiles=()), [lane], item)
                else:
                    emit(Task(deps_of([item.ipu], item), [("streaming_memory", item.ipu)],
                              [([], self.remote_cycles(item))], item.ipu, "remote_io", item.name, item.nbytes,
                              tiles=(item.ipu,)), [item.ipu], item)
            elif isinstance(item, Collective):
                ipus = sorted(item.ipus)
                emit(Task(deps_of(ipus), [], collective_phases(item), ipus[0], "collective", item.name, item.nbytes,
                          tiles=tuple(ipus)), ipus)
            elif isinstance(item, Sync):
                ipus = sorted(item.ipus)
                emit(Task(deps_of(item.ipus, item), [], [([], item.cycles)], ipus[0], "sync", item.name,
                          tiles=tuple(ipus)), item.ipus, item)
            elif isinstance(item, IpuCopy):
                ipus = sorted(item.ipus)
                links, cycles = self._ipu_copy(item)
                emit(Task(deps_of(ipus), links, [([], cycles)], ipus[0], "inter_ipu", item.name, item.nbytes,
                          detail=item.transfers, tiles=tuple(ipus)), ipus)
            else:
                raise TypeError(f"not a program item: {item!r}")

        def parallel(p: Parallel):
            steps = self.steps.rows(p.items)
            if not steps:  # not independent steps (or none): an ordinary Sequence
                for sub in p.items:
                    walk(sub)
                return
            ipu_of, cycles_of, category_of = (self.steps.lists[c] for c in ("ipu", "cycles", "category"))
            groups: dict = {}  # lanes whose previous task (or block point) is the same start together
            lanes: dict[int, list[int]] = {}  # lane -> [its group, cycles of its steps so far]
            held: dict[int, list[tuple]] = {}
            group, at = [], []
            for step in steps:
                lane = ipu_of[step]
                state = lanes.get(lane)
                if state is None:
                    state = lanes[lane] = [groups.setdefault(last.get(lane), len(groups)), 0]
                group.append(state[0])
                at.append(state[1])
                state[1] += cycles_of[step]
                if category_of[step] == "remote_io":
                    held[lane] = [("streaming_memory", lane)]
            lengths = [0] * len(groups)
            for k, n in lanes.values():
                lengths[k] = max(lengths[k], n)
            entries = [[] if d is None else [d] if type(d) is int else [lane_end(d)] for d in groups]
            block = Block(entries, lengths, [[] for _ in groups], np.array(steps, dtype=np.int64),
                          np.array(group, dtype=np.int64), np.array(at, dtype=np.int64), held)
            b = emit(Task(sorted(set().union(*entries)), [], [([], max(lengths))], ipu_of[steps[0]], "parallel",
                          p.name, tiles=tuple(sorted(lanes)), block=block), [])
            for lane, (k, n) in lanes.items():
                last[lane] = (b, k, n)

        def prefetched(s: StreamCopy) -> bool:
            """Whether the host side of the stream's copies runs ahead of (inputs) or behind (outputs) the IPU: an
            input's when Poplar prefetches it (PopART's enablePrefetchDatastreams, its engine's
            exchange.enablePrefetch: without it Poplar fetches each copy on demand, whatever the depth), an
            output's with a deeper buffer."""
            return s.fill_ahead if s.direction == "to_ipu" else s.prefetch >= 2

        def buffers_ahead(s: StreamCopy) -> int:
            """How many copies of the stream the host side runs ahead of (inputs) or behind (outputs) the IPU: its
            buffering depth, as many as Poplar prefetches before the device reads one (poplar::StreamCallback:
            a buffered stream's prefetch() is called up to that many times before a complete()); one with a
            single buffer refilled while the IPU computes."""
            return max(1, s.prefetch)

        def freed(s: StreamCopy, done: list) -> list:
            """The task whose end frees a buffer for the next copy: an input's fill waits for the copy
            ``prefetch`` copies before it (the run's first copies, for its first transfers), an output's
            copy for the host to take the one as many before it; ``None``: a buffer freed before a loop."""
            back = buffers_ahead(s)
            return [d for d in ([done[-back]] if len(done) >= back else done[:1]) if d is not None]

        def fill(s: StreamCopy, free: list, head: int = 0) -> int:
            """The host's fill of an input buffer (the host side of :meth:`prefetch_split`), on the stream's host
            lane once ``free``; one made after a loop that freed the buffer began ``head`` cycles before the loop's
            end (its phases shortened by as much). A fill made ahead of its copy (``pending``) is taken by that copy."""
            key = stream_key(s)
            if key in pending:
                return pending.pop(key)
            shortened = []
            for extra, cycles in self.prefetch_split(s)[0]:  # the part done before the loop's end is dropped
                shortened.append((extra, max(0, cycles - max(0, head))))
                head -= cycles
            return emit(Task(deps_of([("host", key)]) + free, [], shortened, s.ipu, "host_prefetch",
                             s.label or s.name, s.nbytes), [("host", key)])

        def stream(s: StreamCopy):
            lane = ("io", s.ipu, s.direction) if s.io_tiles else s.ipu
            hold = [("io_tiles", s.ipu, s.direction)] if s.io_tiles else []
            tiles = () if s.io_tiles else (s.ipu,)
            kind = "host_io_overlapped" if s.io_tiles else "host_io"
            label = s.label or s.name  # the stream's name where the front end gives one
            key = stream_key(s)
            done = buffers[key]
            # a run starts with its input streams' prefetches invalidated (PopART's Devicex::run reconnects
            # them), and Poplar prefetches a stream only after a transfer of it (poplar::StreamCallback): so
            # the run's first copy of an input is fetched on demand, on the IPU's path, whatever the depth;
            # later ones run ahead (a deeper buffer) or, with one buffer, refill it while the IPU computes
            first = s.direction == "to_ipu" and not done
            ahead = prefetched(s)
            flowed.add(key)
            if first and key in warm_copies:  # a loop's first copies were filled before the loop (repeat), their
                # buffers freed there
                done.extend([None] * (buffers_ahead(s) - 1))
                prefilled[key] = warm_copies[key] - 1
            elif not ahead or first:
                task = emit(Task(deps_of([lane], s), hold, self.stream_phases(s), s.ipu, kind, label, s.nbytes,
                                 stream=s, tiles=tiles), [lane], s)
                if ahead:
                    done.append(task)
                return
            host_phases, device_phases = self.prefetch_split(s)
            if s.direction == "to_ipu":
                waits = set(deps_of([lane], s))
                if prefilled.get(key):
                    prefilled[key] -= 1
                elif not first:  # a loop's first copy of a stream that flowed before it was filled before the loop
                    waits.add(fill(s, freed(s, done)))
                done.append(emit(Task(sorted(waits), hold, device_phases, s.ipu, kind, label, s.nbytes,
                                      stream=s, tiles=tiles), [lane], s))
            else:
                host_lane = ("host", key)
                device = emit(Task(sorted(set(deps_of([lane], s)) | set(freed(s, done))), hold, device_phases, s.ipu,
                                   kind, label, s.nbytes, stream=s, tiles=tiles), [lane], s)
                host = emit(Task(sorted(set(deps_of([host_lane])) | {device}), [], host_phases, s.ipu,
                                 "host_prefetch", label, s.nbytes), [host_lane])
                tasks[device].stream_end = host
                done.append(host)

        def repeat(r: Repeat):
            if r.count <= 0:
                return
            if not r.collapse and r.count <= STEADY_ITERATIONS + 1:
                for _ in range(r.count):
                    walk(r.body)
                return
            ipus = sorted(ipus_of(r.body))
            lanes = ipus + [("io", i, d) for i in ipus for d in ("to_ipu", "from_ipu")]
            # an input that flowed before the loop is prefetched into the loop's first copy once a buffer is
            # free, as an inline walk would prefetch it: the fill is made here, on the host's thread, before the
            # loop, and the body is simulated with that copy filled (the loop holds the thread while it runs)
            streams = self._stream_keys(r.body)
            warm_body = sorted(k for k, c in streams.items()
                               if k in flowed and c.direction == "to_ipu" and prefetched(c))
            fills = [fill(streams[k], freed(streams[k], buffers[k])) for k in warm_body]
            # with more buffers, walking also fills the loop's next copies before it, each once a copy before
            # the loop frees its buffer. Where the host keeps ahead of the loop (no copy in its body waits for
            # its fill) those fills are made here too, the body starts with those copies filled, and the loop
            # leaves the host's thread and link to them (they may run into its first iterations, whose own
            # fills have time to spare); where the host paces the loop, the body fills them from its start
            ahead = {k: list(takewhile(lambda free: free and tasks[free[0]].category in COPIES,
                                       (freed(streams[k], buffers[k] + [None] * j)
                                        for j in range(1, buffers_ahead(streams[k])))))
                     for k in warm_body}
            copies = 1 if r.collapse else STEADY_ITERATIONS + 1
            sub = self._simulate_memo(r.body, copies, frozenset((k, 1) for k in warm_body))
            early = any(ahead.values()) and not sub.fill_bound
            if early:
                for j in range(max(len(frees) for frees in ahead.values())):
                    for k in warm_body:
                        if j < len(ahead[k]):
                            fill(streams[k], ahead[k][j])
                sub = self._simulate_memo(r.body, copies, frozenset((k, 1 + len(ahead[k])) for k in warm_body))
            if r.collapse:
                macro, cycles = ("tile", r.count, sub), r.count * sub.total_cycles
            else:
                period = steady_period(sub, copies)
                macro, cycles = ("steady", r.count, sub, period), sub.total_cycles + (r.count - copies) * period
            resources = sorted(k for k in sub.resources if not (early and k[0] in (HOST_CALLBACKS, "host_link")))
            loop = emit(Task(sorted(set(deps_of(lanes)) | set(fills)), [k for k in resources if k[0] != "tiles"],
                             [([], cycles)], ipus[0] if ipus else 0, "repeat", r.name, macro=macro,
                             tiles=tuple(k[1] for k in resources if k[0] == "tiles")), lanes)
            for k in streams:  # the loop's copies have freed their buffers by its end
                flowed.add(k)
                buffers[k] = [loop]
            # the fills after the loop are made here, as walking its iterations would make them: each once the
            # loop's last copy of its stream has freed a buffer and its host thread is free, the thread serving
            # them in the order their buffers were freed, after its own last fill in the loop; each is taken by
            # the stream's next copy (one never taken is dropped: lower's end)
            free_at = dict(sub.last_fills)
            for at, k in sorted((sub.last_copies[k], k) for k, c in streams.items()
                                if k in sub.last_copies and prefetched(c)):
                c = streams[k]
                begin = max(free_at.get(tuple(c.host_thread), 0), at)
                free_at[tuple(c.host_thread)] = begin + self.prefetch_split(c)[0][0][1]
                pending[k] = fill(c, [loop], sub.total_cycles - begin)

        if tagged:
            for i, item in enumerate(seq.items):
                tag = i
                walk(item)
        else:
            walk(seq)
        for k in pending.values():  # fills made after a loop for a copy that never came: not made
            tasks[k].phases, tasks[k].category = [], UNUSED_FILL
        return tasks

    # --- simulation ------------------------------------------------------------------------
    def run(self, program: Sequence) -> Timeline:
        """Simulate ``program`` from cycle 0."""
        with _collector_paused():
            return self._simulate(program)

    def _simulate_memo(self, body: Sequence, copies: int, warm: frozenset = frozenset()) -> Timeline:
        """``body`` simulated alone, ``copies`` times in a row (tagged by copy when > 1), the first copies
        of its ``warm`` streams already filled (:meth:`lower`)."""
        key = (id(body), copies, warm)
        if key not in self._memo:
            seq = Sequence([body] * copies) if copies > 1 else body
            self._memo[key] = (self._simulate(seq, copies > 1, warm), body)  # keep body alive: its id stays unique
        return self._memo[key][0]

    def _stream_keys(self, body: Sequence) -> dict:
        """The streams (:func:`stream_key`) a loop's body copies, each with its first copy, once per body."""
        key = ("streams", id(body))
        if key not in self._memo:
            first: dict = {}
            for c in leaves(body):
                if isinstance(c, StreamCopy):
                    first.setdefault(stream_key(c), c)
            self._memo[key] = (first, body)
        return self._memo[key][0]

    def _simulate(self, seq: Sequence, tagged: bool = False, warm: frozenset = frozenset()) -> Timeline:
        tasks = self.lower(seq, tagged, warm)
        env = simpy.Environment()
        resources: dict[tuple, simpy.Resource] = {}
        contended = contention(tasks)
        done: list = [None] * len(tasks)  # per task: its process (an event that fires at its end); a block's
        # stays None (later tasks wait for its lane ends)
        start = np.zeros(len(tasks), dtype=np.int64)
        end = np.zeros(len(tasks), dtype=np.int64)
        group_start: dict[int, list[int]] = {}  # block task -> start of each group

        def res(key):
            if key not in resources:
                resources[key] = simpy.Resource(env, capacity=1)
            return resources[key]

        def check(t: Task, name: str, cycles: int):
            if not env.now + cycles <= MAX_CYCLES:
                raise IpuSimError(
                    f"the run would pass 2^62 cycles (over 100 years of IPU time) at {t.category} task "
                    f"{name!r} of {show_number(cycles)} cycles, beyond what the simulator counts; an option, "
                    "a model size or a system value is far out of range: check them")

        def process(i: int, t: Task):
            # a task holding resources, none of them contended, makes one zero-delay step
            # where the requests would have been granted
            if t.deps:
                yield env.all_of([done[d] for d in t.deps])
            held = [(res(k), res(k).request()) for k in sorted(k for k in t.hold if contended[k])] if t.hold else ()
            for _, req in held:
                yield req
            if not held and (t.hold or t.tiles):
                yield env.timeout(0)
            start[i] = env.now
            for extra, cycles in t.phases:
                reqs = [(res(k), res(k).request()) for k in extra if contended[k]] if extra else ()
                for _, req in reqs:
                    yield req
                if extra and not reqs:
                    yield env.timeout(0)
                if env.now + cycles > MAX_CYCLES:
                    check(t, t.name, cycles)
                if cycles:
                    yield env.timeout(cycles)
                for r, req in reqs:
                    r.release(req)
            for r, req in held:
                r.release(req)
            end[i] = env.now

        def group(i: int, block: Block, k: int):
            """Group ``k`` of a block: its start, then its lane ends in time order."""
            if block.entries[k]:
                yield env.all_of([done[d] for d in block.entries[k]])
            yield env.timeout(0)  # where each step requested its IPU's tiles
            group_start[i][k] = env.now
            if not env.now + block.lengths[k] <= MAX_CYCLES:
                check(tasks[i], self.steps.arrays()["name"][block.steps[block.group == k][0]], block.lengths[k])
            at = 0
            for cycles, m in sorted(block.lane_ends[k]):
                if cycles > at:
                    yield env.timeout(cycles - at)
                    at = cycles
                start[m] = end[m] = env.now
                done[m].succeed()

        for i, t in enumerate(tasks):  # a task's process waits only for earlier tasks
            if t.block is not None:
                group_start[i] = [0] * len(t.block.entries)
                for k in range(len(t.block.entries)):
                    env.process(group(i, t.block, k))
            elif t.lane_end is not None:
                done[i] = env.event()
            else:
                done[i] = env.process(process(i, t))
        events = 0
        clock = real_perf_counter()
        while True:  # env.run(), counting events for the benchmark
            try:
                env.step()
            except simpy.core.EmptySchedule:
                break
            events += 1
        loop_seconds = real_perf_counter() - clock
        for i, starts in group_start.items():
            start[i] = min(starts)
            end[i] = max(s + n for s, n in zip(starts, tasks[i].block.lengths))
        total = int(end.max()) if len(tasks) else 0
        used = set(contended) | {("tiles", ipu) for ipu in set().union(*(t.tiles for t in tasks))}
        tl = self._collect(tasks, start, end, total, used, group_start)
        tl.fill_bound = any(t.macro[2].fill_bound if t.macro else _waited_for_fill(tasks, t, end) for t in tasks)
        tl.events += events
        tl.event_seconds += loop_seconds
        if tagged:
            steps = np.array([t.lane_end is None for t in tasks])
            tags = np.array([t.tag for t in tasks])
            tl.iteration_starts = [int(start[steps & (tags == k)].min()) for k in range(len(seq.items))]
            tl.lane_iteration_starts = _lane_iteration_starts(tasks, start, len(seq.items))
        return tl

    def _collect(self, tasks, start, end, total, used, group_start) -> Timeline:
        """Records, stream events and busy cycles of a simulation: a record per task in task
        order (a block's steps in their program order), then the records of each repeat."""
        tl = Timeline(total_cycles=total, resources=set(used))
        zero = np.zeros(1, dtype=np.int64)
        columns = ("ipu", "category", "name", "start", "end", "nbytes", "detail", "tag", "ipus")
        pieces: list[dict] = []  # runs of records, as arrays per column
        plain: dict[str, list] = {c: [] for c in columns}
        ipu, category, name, starts, ends, nbytes, detail, tags, ipus = plain.values()
        shared: dict[tuple, int] = defaultdict(int)  # (tag, category, IPUs) -> cycles on each of the IPUs
        blocks: dict[int, list] = defaultdict(list)  # tag -> the step-table rows of its blocks

        def flush():
            if ipu:
                pieces.append({c: _objects(v) if c in ("category", "name", "ipus") else
                               list(v) if c == "detail" else np.array(v, dtype=np.int64) for c, v in plain.items()})
                for v in plain.values():
                    v.clear()

        streams, macros = [], []
        for i, t in enumerate(tasks):
            if t.lane_end is not None or t.category == UNUSED_FILL:
                continue
            busy = tl.busy_by_tag[t.tag]
            if t.macro is not None:
                macros.append(i)
            elif t.block is not None:
                flush()
                pieces.append(self._block_records(t, group_start[i]))
                blocks[t.tag].append(t.block.steps)
            else:
                ipu.append(t.ipu)
                category.append(t.category)
                name.append(t.name)
                starts.append(start[i])
                ends.append(end[i])
                nbytes.append(t.nbytes)
                detail.append(t.detail)
                tags.append(t.tag)
                ipus.append(t.tiles or (t.ipu,))
                if t.stream is not None:
                    if t.stream.counted:
                        streams.append(i)
                    if t.stream.direction == "to_ipu":
                        key = stream_key(t.stream)
                        tl.last_copies[key] = max(int(end[i]), tl.last_copies.get(key, 0))
                elif t.category == "host_prefetch" and t.phases:
                    for r in t.phases[0][0]:  # an input's fill (an output's has no callback)
                        if r[0] == HOST_CALLBACKS:
                            tl.last_fills[r[1:]] = max(int(end[i]), tl.last_fills.get(r[1:], 0))
                cycles = int(end[i] - start[i])
                if t.category == "compute":
                    for cat, c in self._busy_parts(t.detail):
                        busy[t.ipu][cat] += c
                elif t.category in ("sync", "inter_ipu", "collective"):
                    shared[t.tag, t.category, t.tiles] += cycles
                elif t.category in ("host_io_overlapped", "remote_io_overlapped"):
                    busy[t.ipu]["io_tiles"] += cycles
                elif t.category != "host_prefetch":
                    busy[t.ipu][t.category] += cycles
        flush()
        by_kind: dict[tuple, list] = defaultdict(list)  # (tag, category) -> [(IPUs, cycles on each)]
        for (tag, kind, members), cycles in shared.items():
            by_kind[tag, kind].append((members, cycles))
        for (tag, kind), parts in by_kind.items():  # each IPU's share, summed with numpy
            members = np.fromiter((i for m, _ in parts for i in m), dtype=np.int64)
            cycles = np.repeat(np.array([c for _, c in parts], dtype=np.int64), [len(m) for m, _ in parts])
            per_ipu = np.zeros(int(members.max()) + 1, dtype=np.int64)
            np.add.at(per_ipu, members, cycles)
            busy = tl.busy_by_tag[tag]
            for i in np.unique(members).tolist():
                busy[i][kind] += int(per_ipu[i])
        table = self.steps.arrays()
        for tag, rows in blocks.items():  # the busy cycles of the blocks' steps, by IPU
            rows = np.concatenate(rows)
            lanes, lane_of = np.unique(table["ipu"][rows], return_inverse=True)
            total = np.zeros((len(lanes), len(CATEGORIES)), dtype=np.int64)
            np.add.at(total, lane_of, table["busy"][rows])
            busy = tl.busy_by_tag[tag]
            for j, c in zip(*np.nonzero(total)):
                busy[int(lanes[j])][CATEGORIES[c]] += int(total[j, c])
        if pieces:
            records = {c: [x for piece in pieces for x in piece[c]] if c == "detail"
                       else np.concatenate([piece[c] for piece in pieces]) for c in columns}
            tl.records.append(Records(**records, offsets=zero))
        if streams:
            tl.streams.append(StreamEvents(
                direction=np.array([tasks[i].stream.direction for i in streams], dtype=object),
                stream=np.array([tasks[i].stream.stream for i in streams]),
                replica=np.array([tasks[i].stream.replica for i in streams]),
                start=start[streams],
                end=end[[tasks[i].stream_end if tasks[i].stream_end is not None else i for i in streams]],
                offsets=zero,
                tag=np.array([tasks[i].tag for i in streams])))
        for i in macros:
            self._place_macro(tl, tl.busy_by_tag[tasks[i].tag], tasks[i], int(start[i]))
        for per_tag in tl.busy_by_tag.values():
            for i, cats in per_tag.items():
                for cat, c in cats.items():
                    tl.busy[i][cat] += c
        return tl

    def _block_records(self, t: Task, group_start: list[int]) -> dict:
        """The records of a block's steps, as arrays per column."""
        block, table = t.block, self.steps.arrays()
        start = np.array(group_start, dtype=np.int64)[block.group] + block.at
        rows = block.steps
        return {"ipu": table["ipu"][rows], "category": table["category"][rows], "name": table["name"][rows],
                "start": start, "end": start + table["cycles"][rows], "nbytes": table["nbytes"][rows],
                "detail": table["detail"][rows].tolist(), "tag": np.full(len(rows), t.tag, dtype=np.int64),
                "ipus": table["ipus"][rows]}

    def _busy_parts(self, ops) -> tuple:
        """((category, cycles), ...) of a compute step's ops, summed once per OpSteps."""
        if id(ops) not in self._parts:
            self._parts[id(ops)] = (ops, tuple((cat, int(c.sum())) for cat, c in ops.parts().items()))
        return self._parts[id(ops)][1]

    def _place_macro(self, tl: Timeline, busy, t: Task, at: int) -> None:
        """Records, streams and busy cycles of a repeated body placed at cycle ``at``."""
        kind, count, sub = t.macro[:3]
        tl.events += sub.events
        tl.event_seconds += sub.event_seconds
        tl.resources |= sub.resources
        if kind == "tile":
            offsets = at + np.arange(count, dtype=np.int64) * sub.total_cycles
            recs, strs = sub.place(offsets, t.tag)
            scale = {None: count}
        else:  # steady: the simulated iterations, then the last one shifted by the period
            period = t.macro[3]
            n = len(sub.iteration_starts)
            recs, strs = sub.place(np.array([at]), t.tag)
            extra = at + np.arange(1, count - n + 1, dtype=np.int64) * period
            more_r, more_s = sub.place(extra, t.tag, rows_tag=n - 1)
            recs, strs = recs + more_r, strs + more_s
            scale = {None: 1, n - 1: 1 + count - n}
        tl.records += recs
        tl.streams += strs
        if None in scale and len(scale) == 1:
            for ipu, cats in sub.busy.items():
                for cat, c in cats.items():
                    busy[ipu][cat] += scale[None] * c
        else:
            for tag, per_tag in sub.busy_by_tag.items():
                factor = scale.get(tag, 1)
                for ipu, cats in per_tag.items():
                    for cat, c in cats.items():
                        busy[ipu][cat] += factor * c


def _lane_iteration_starts(tasks: list[Task], start: np.ndarray, iterations: int) -> dict:
    """Lane -> the first start (cycles) of each iteration's tasks on that lane (None where it has none)."""
    firsts: dict = {}
    for i, t in enumerate(tasks):
        if t.lane_end is not None:
            continue
        for lane in t.lanes:
            row = firsts.setdefault(lane, [None] * iterations)
            if row[t.tag] is None or start[i] < row[t.tag]:
                row[t.tag] = int(start[i])
    return firsts


def _waited_for_fill(tasks: list[Task], t: Task, end: np.ndarray) -> bool:
    """Whether input copy ``t`` began when its buffer's fill ended, after everything else it waited for."""
    if t.category not in COPIES or t.stream.direction != "to_ipu" or not t.deps:
        return False
    fills = [end[d] for d in t.deps if tasks[d].category == "host_prefetch"]
    return bool(fills) and max(fills) > max((end[d] for d in t.deps if tasks[d].category != "host_prefetch"),
                                            default=-1)


def steady_period(sub: Timeline, n: int) -> int:
    """Cycles from one iteration of an overlapping loop to the next once it runs steadily, from the
    last two of its ``n`` simulated iterations: the widest spacing over its lanes. A lane that runs
    ahead of the others, such as input copies into free buffers, shows a shorter spacing until the
    buffers are full, after which the slowest lane paces every lane."""
    spacings = [sub.iteration_starts[n - 1] - sub.iteration_starts[n - 2]]
    for row in sub.lane_iteration_starts.values():
        if row[n - 1] is not None and row[n - 2] is not None:
            spacings.append(row[n - 1] - row[n - 2])
    return max(spacings)


@contextmanager
def _collector_paused():
    """Pause Python's cyclic garbage collector while a run allocates its many short-lived
    objects (tasks, events, processes), which it would otherwise walk over and over; the run's
    garbage is collected after it. The collector is restored even on an error."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def contention(tasks: list[Task]) -> dict[tuple, bool]:
    """Every resource the tasks hold besides compute tiles (keys): may two tasks want it at once?

    Not if all its holders share a lane, since tasks on one lane run one after another: an
    IPU's streaming memory, its IO tiles, a link that only one IPU's copies use. (Compute tiles
    are never contended: only tasks on their IPU's lane hold them.) Only contended resources are
    requested from SimPy.
    """
    common: dict[tuple, set] = {}  # resource -> lanes every holder so far is on

    def hold(keys, lanes: set):
        for k in keys:
            c = common.get(k)
            if c is None:
                common[k] = lanes  # shared, never changed in place
            elif c and not c <= lanes:
                common[k] = c & lanes

    for t in tasks:
        if t.block is not None:
            for lane, keys in t.block.held.items():
                hold(keys, {lane})
        elif t.lane_end is None and (t.hold or any(extra for extra, _ in t.phases)):
            lanes = set(t.lanes)
            hold(t.hold, lanes)
            for extra, _ in t.phases:
                hold(extra, lanes)
    return {k: not lanes for k, lanes in common.items()}


def collective_phases(c: Collective) -> list[tuple[list[tuple], int]]:
    """A collective's steps as engine phases, each holding the ring's links.

    A long ring's steps are grouped, at most ``COLLECTIVE_PHASES`` groups per algorithm
    phase, so a 256-member ring does not cost 510 resource requests; traffic that meets the
    collective on a link then waits for a group of steps rather than for one.
    """
    links = list(c.links)
    out = []
    for n, cycles in c.phases:
        per = -(-n // COLLECTIVE_PHASES)
        full, rest = divmod(n, per)
        out += [(links, cycles * per)] * full + ([(links, cycles * rest)] if rest else [])
    return out


def critical_path(tasks: list[Task]) -> int:
    """Cycles of the longest dependency chain (no resource waits): a lower bound on a run."""
    finish = [0] * len(tasks)
    group_start: dict[int, list[int]] = {}
    for i, t in enumerate(tasks):
        if t.block is not None:
            group_start[i] = [max((finish[d] for d in entry), default=0) for entry in t.block.entries]
            finish[i] = max(s + n for s, n in zip(group_start[i], t.block.lengths))
        elif t.lane_end is not None:
            b, k, cycles = t.lane_end
            finish[i] = group_start[b][k] + cycles
        else:
            finish[i] = max((finish[d] for d in t.deps), default=0) + t.cycles
    return max(finish, default=0)
