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
  shifted by the steady-state period, so the rest are extrapolated, not simulated.

The result is a :class:`Timeline`: the total, task records (columnar, with repeats kept as
offsets and expanded on demand), stream-copy events for the perf counters, and busy cycles
per IPU per category.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import simpy

from .errors import IpuSimError, show_number
from .hardware.system import System
from .hardware.topology import crosses_gw_link, route
from .program import (Collective, Compute, IpuCopy, RemoteCopy, Repeat, Sequence, StreamCopy, Sync,
                      ipus_of)

STEADY_ITERATIONS = 8  # iterations simulated before an overlapping loop is extrapolated
MAX_CYCLES = 2**62  # the simulated time must fit the int64 cycle arrays with room for sums
COLLECTIVE_PHASES = 32  # resource-holding groups of steps per phase of a collective


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
    detail: list  # per row: OpSteps for compute tasks, else None
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
    resources: set = field(default_factory=set)
    events: int = 0  # SimPy events processed, summed over sub-simulations
    iteration_starts: list = field(default_factory=list)  # of a tagged (loop) simulation

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


@dataclass
class Task:
    """One node of the task graph: waits for ``deps``, holds resources, lasts its phases."""

    deps: list[int]
    hold: list[tuple]  # resources held for the whole task
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

    @property
    def cycles(self) -> int:
        """Cycles the task lasts when it never waits for a resource."""
        return sum(c for _, c in self.phases)


class Engine:
    """Simulates programs on ``system``."""

    def __init__(self, system: System):
        self.system = system
        self._memo: dict[tuple, tuple] = {}

    # --- costs of the leaves ---------------------------------------------------------------
    def host_link_of(self, ipu: int) -> int:
        return ipu // self.system.host_link.ipus_per_link

    def stream_phases(self, s: StreamCopy) -> list[tuple[list[tuple], int]]:
        """Phases of a stream copy: (resources beyond the IPU's tiles, cycles).

        To the IPU: host sync and request, the host filling the stream buffer, the host link to
        the gateway, then the gateway-to-tiles transfer. From the IPU: the reverse, no fill.
        """
        host, device = self.prefetch_phases(s)
        return host + device if s.direction == "to_ipu" else device + host

    def prefetch_phases(self, s: StreamCopy):
        """(host-side phases, IPU-side phases) of a stream copy.

        The host side (the request, the buffer fill, the host link) can run ahead of the IPU
        when inputs are prefetched; the IPU side is the host sync and the gateway-to-tiles
        transfer.
        """
        hl = self.system.host_link
        sysm = self.system
        link = [("host_link", self.host_link_of(s.ipu), s.direction)]
        sync = hl.host_sync_cycles if s.host_sync else 0
        latency = sysm.seconds_to_cycles(hl.latency_s)
        device = sysm.seconds_to_cycles(s.nbytes / hl.gateway_to_ipu_bytes_per_s)
        if s.direction == "to_ipu":
            prep = sysm.seconds_to_cycles(s.nbytes / hl.host_prepare_bytes_per_s)
            wire = sysm.seconds_to_cycles(s.nbytes / hl.host_to_ipu_bytes_per_s)
            return [([], latency + prep), (link, wire)], [([], sync), ([], device)]
        wire = sysm.seconds_to_cycles(s.nbytes / hl.ipu_to_host_bytes_per_s)
        return [(link, wire)], [([], sync + latency), ([], device)]

    def ipu_copy_links(self, c: IpuCopy) -> dict[tuple[int, int], int]:
        """Bytes on each directed IPU-Link the copy's transfers are routed over."""
        per_link: dict[tuple[int, int], int] = defaultdict(int)
        for src, dst, nbytes in c.transfers:
            for hop in route(self.system, src, dst):
                per_link[hop] += nbytes
        return per_link

    def ipu_copy_cycles(self, c: IpuCopy) -> int:
        """The slowest transfer: one link latency per hop of its route plus the busiest link of
        the route's bytes over that link's bandwidth (cut-through: the hops stream together).
        A transfer that leaves the POD crosses a GW-Link, with its latency and bandwidth."""
        per_link = self.ipu_copy_links(c)
        slowest = 0
        for src, dst, _ in c.transfers:
            hops = route(self.system, src, dst)
            link = self.system.gw_link if crosses_gw_link(self.system, src, dst) else self.system.ipu_link
            busiest = max(per_link[h] for h in hops)
            slowest = max(slowest, link.latency_cycles * len(hops)
                          + self.system.seconds_to_cycles(busiest / link.bytes_per_s))
        return slowest

    def remote_cycles(self, r: RemoteCopy) -> int:
        mem = self.system.streaming_memory
        return mem.latency_cycles + self.system.seconds_to_cycles(r.nbytes / mem.bytes_per_s_per_ipu)

    # --- lowering --------------------------------------------------------------------------
    def lower(self, seq: Sequence, tagged: bool = False) -> list[Task]:
        """The task graph of ``seq``: tasks in program order, deps as indices into the list.

        Program order is kept per lane: an IPU's compute tiles (``ipu``), its IO tiles
        (``("io", ipu)``) and the host side of each prefetched stream. An item may also wait
        for other items (``after``). With ``tagged``, the tasks of ``seq.items[i]`` get tag ``i``.
        """
        tasks: list[Task] = []
        last: dict = {}
        emitted: dict[int, int] = {}  # id(program item) -> its latest task
        buffers: dict = defaultdict(list)  # multibuffered stream -> the tasks that free its buffers
        tag = 0

        def deps_of(lanes, item=None):
            deps = {last[i] for i in lanes if i in last}
            for other in getattr(item, "after", ()):
                if id(other) in emitted:
                    deps.add(emitted[id(other)])
            return sorted(deps)

        def emit(task: Task, lanes, item=None) -> int:
            task.tag = tag
            tasks.append(task)
            for i in lanes:
                last[i] = len(tasks) - 1
            if item is not None:
                emitted[id(item)] = len(tasks) - 1
            return len(tasks) - 1

        def walk(item):
            if isinstance(item, Sequence):
                for sub in item.items:
                    walk(sub)
            elif isinstance(item, Repeat):
                repeat(item)
            elif isinstance(item, Compute):
                emit(Task(deps_of([item.ipu], item), [("tiles", item.ipu)], [([], item.cycles)], item.ipu,
                          "compute", item.name, detail=item.ops), [item.ipu], item)
            elif isinstance(item, StreamCopy):
                stream(item)
            elif isinstance(item, RemoteCopy):
                emit(Task(deps_of([item.ipu]), [("tiles", item.ipu), ("streaming_memory", item.ipu)],
                          [([], self.remote_cycles(item))], item.ipu, "remote_io", item.name, item.nbytes),
                     [item.ipu])
            elif isinstance(item, Collective):
                ipus = sorted(item.ipus)
                emit(Task(deps_of(ipus), [("tiles", i) for i in ipus], collective_phases(item), ipus[0],
                          "collective", item.name, item.nbytes), ipus)
            elif isinstance(item, Sync):
                emit(Task(deps_of(item.ipus), [("tiles", i) for i in sorted(item.ipus)],
                          [([], item.cycles)], min(item.ipus), "sync", item.name), item.ipus)
            elif isinstance(item, IpuCopy):
                ipus = sorted(item.ipus)
                links = sorted(("ipu_link", s, d) for s, d in self.ipu_copy_links(item))
                emit(Task(deps_of(ipus), [("tiles", i) for i in ipus] + links,
                          [([], self.ipu_copy_cycles(item))], ipus[0], "inter_ipu", item.name,
                          item.nbytes), ipus)
            else:
                raise TypeError(f"not a program item: {item!r}")

        def stream(s: StreamCopy):
            lane = ("io", s.ipu, s.direction) if s.io_tiles else s.ipu
            held = ("io_tiles", s.ipu, s.direction) if s.io_tiles else ("tiles", s.ipu)
            kind = "host_io_overlapped" if s.io_tiles else "host_io"
            if s.prefetch < 2:
                emit(Task(deps_of([lane], s), [held], self.stream_phases(s), s.ipu, kind, s.name, s.nbytes,
                          stream=s), [lane], s)
                return
            # multibuffered: the host side runs ahead of (inputs) or behind (outputs) the IPU,
            # by at most prefetch - 1 buffers
            host_phases, device_phases = self.prefetch_phases(s)
            key = (s.ipu, s.replica, s.stream, s.direction)
            host_lane = ("host", key)
            done = buffers[key]
            free = [done[-(s.prefetch - 1)]] if len(done) >= s.prefetch - 1 else []
            if s.direction == "to_ipu":
                host = emit(Task(deps_of([host_lane]) + free, [], host_phases, s.ipu, "host_prefetch", s.name,
                                 s.nbytes), [host_lane])
                device = emit(Task(sorted(set(deps_of([lane], s)) | {host}), [held], device_phases, s.ipu, kind,
                                   s.name, s.nbytes, stream=s), [lane], s)
                done.append(device)
            else:
                device = emit(Task(sorted(set(deps_of([lane], s)) | set(free)), [held], device_phases, s.ipu,
                                   kind, s.name, s.nbytes, stream=s), [lane], s)
                host = emit(Task(sorted(set(deps_of([host_lane])) | {device}), [], host_phases, s.ipu,
                                 "host_prefetch", s.name, s.nbytes), [host_lane])
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
            if r.collapse:
                sub = self._simulate_memo(r.body, 1)
                macro, cycles = ("tile", r.count, sub), r.count * sub.total_cycles
            else:
                n = STEADY_ITERATIONS + 1
                sub = self._simulate_memo(r.body, n)
                period = sub.iteration_starts[n - 1] - sub.iteration_starts[n - 2]
                macro, cycles = ("steady", r.count, sub, period), sub.total_cycles + (r.count - n) * period
            emit(Task(deps_of(lanes), sorted(sub.resources), [([], cycles)], ipus[0] if ipus else 0,
                      "repeat", r.name, macro=macro), lanes)

        if tagged:
            for i, item in enumerate(seq.items):
                tag = i
                walk(item)
        else:
            walk(seq)
        return tasks

    # --- simulation ------------------------------------------------------------------------
    def run(self, program: Sequence) -> Timeline:
        """Simulate ``program`` from cycle 0."""
        return self._simulate(program)

    def _simulate_memo(self, body: Sequence, copies: int) -> Timeline:
        """``body`` simulated alone, ``copies`` times in a row (tagged by copy when > 1)."""
        key = (id(body), copies)
        if key not in self._memo:
            tl = self._simulate(Sequence([body] * copies), tagged=copies > 1) if copies > 1 else self._simulate(body)
            self._memo[key] = (tl, body)  # keep body alive so its id stays unique
        return self._memo[key][0]

    def _simulate(self, seq: Sequence, tagged: bool = False) -> Timeline:
        tasks = self.lower(seq, tagged)
        env = simpy.Environment()
        resources: dict[tuple, simpy.Resource] = {}
        done = [env.event() for _ in tasks]
        start = np.zeros(len(tasks), dtype=np.int64)
        end = np.zeros(len(tasks), dtype=np.int64)

        def res(key):
            if key not in resources:
                resources[key] = simpy.Resource(env, capacity=1)
            return resources[key]

        def process(i: int, t: Task):
            if t.deps:
                yield env.all_of([done[d] for d in t.deps])
            held = [(res(k), res(k).request()) for k in t.hold]
            for _, req in held:
                yield req
            start[i] = env.now
            for extra, cycles in t.phases:
                reqs = [(res(k), res(k).request()) for k in extra]
                for _, req in reqs:
                    yield req
                if not env.now + cycles <= MAX_CYCLES:
                    raise IpuSimError(
                        f"the run would pass 2^62 cycles (over 100 years of IPU time) at {t.category} task "
                        f"{t.name!r} of {show_number(cycles)} cycles, beyond what the simulator counts; an option, "
                        "a model size or a system value is far out of range: check them")
                if cycles:
                    yield env.timeout(cycles)
                for r, req in reqs:
                    r.release(req)
            for r, req in held:
                r.release(req)
            end[i] = env.now
            done[i].succeed()

        for i, t in enumerate(tasks):
            env.process(process(i, t))
        events = 0
        while True:  # env.run(), counting events for the benchmark
            try:
                env.step()
            except simpy.core.EmptySchedule:
                break
            events += 1
        total = int(end.max()) if len(tasks) else 0
        tl = self._collect(tasks, start, end, total, set(resources))
        tl.events += events
        if tagged:
            tags = np.array([t.tag for t in tasks])
            tl.iteration_starts = [int(start[tags == k].min()) for k in range(len(seq.items))]
        return tl

    def _collect(self, tasks, start, end, total, used) -> Timeline:
        tl = Timeline(total_cycles=total, resources=set(used))
        zero = np.zeros(1, dtype=np.int64)
        plain = [i for i, t in enumerate(tasks) if t.macro is None]
        if plain:
            idx = np.array(plain)
            tl.records.append(Records(
                ipu=np.array([tasks[i].ipu for i in plain]),
                category=np.array([tasks[i].category for i in plain], dtype=object),
                name=np.array([tasks[i].name for i in plain], dtype=object),
                start=start[idx], end=end[idx],
                nbytes=np.array([tasks[i].nbytes for i in plain], dtype=np.int64),
                detail=[tasks[i].detail for i in plain], offsets=zero,
                tag=np.array([tasks[i].tag for i in plain]),
                ipus=_participants([tasks[i] for i in plain])))
        streams = [i for i in plain if tasks[i].stream is not None]
        if streams:
            tl.streams.append(StreamEvents(
                direction=np.array([tasks[i].stream.direction for i in streams], dtype=object),
                stream=np.array([tasks[i].stream.stream for i in streams]),
                replica=np.array([tasks[i].stream.replica for i in streams]),
                start=start[streams],
                end=end[[tasks[i].stream_end if tasks[i].stream_end is not None else i for i in streams]],
                offsets=zero,
                tag=np.array([tasks[i].tag for i in streams])))
        for i, t in enumerate(tasks):
            busy = tl.busy_by_tag[t.tag]
            if t.macro is not None:
                self._place_macro(tl, busy, t, int(start[i]))
                continue
            cycles = int(end[i] - start[i])
            if t.category == "compute":
                for cat, c in t.detail.parts().items():
                    busy[t.ipu][cat] += int(c.sum())
            elif t.category in ("sync", "inter_ipu", "collective"):
                for ipu in {k[1] for k in t.hold if k[0] == "tiles"}:
                    busy[ipu][t.category] += cycles
            elif t.category == "host_io_overlapped":
                busy[t.ipu]["io_tiles"] += cycles
            elif t.category != "host_prefetch":
                busy[t.ipu][t.category] += cycles
        for per_tag in tl.busy_by_tag.values():
            for ipu, cats in per_tag.items():
                for cat, c in cats.items():
                    tl.busy[ipu][cat] += c
        return tl

    def _place_macro(self, tl: Timeline, busy, t: Task, at: int) -> None:
        """Records, streams and busy cycles of a repeated body placed at cycle ``at``."""
        kind, count, sub = t.macro[:3]
        tl.events += sub.events
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


def _participants(tasks: list[Task]) -> np.ndarray:
    """Per task, the IPUs whose tiles it holds (its own IPU when it holds none: host-side work)."""
    out = np.empty(len(tasks), dtype=object)
    for i, t in enumerate(tasks):
        out[i] = tuple(sorted({k[1] for k in t.hold if k[0] == "tiles"})) or (t.ipu,)
    return out


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
    for i, t in enumerate(tasks):
        finish[i] = max((finish[d] for d in t.deps), default=0) + t.cycles
    return max(finish, default=0)
