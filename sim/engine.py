"""The SimPy engine: runs a :class:`~sim.program.Sequence` on a model of the hardware.

Lowering turns the program into tasks. Each task waits for the tasks it depends on (program
order on each IPU it runs on), holds the resources it needs (an IPU's compute tiles, a host
link, an IPU-Link direction) and lasts a number of cycles; the engine runs one SimPy process
per task, so tasks that share a resource queue for it (FIFO) and independent ones overlap.

A :class:`~sim.program.Repeat` whose iterations cannot overlap (``collapse=True``) is
simulated once and its timing repeated: the body becomes one task of ``count x`` its length, and
its records are tiled, not re-simulated. Identical bodies are simulated once per run.

The result is a :class:`Timeline`: the total, task records (columnar, with repeats kept as
offsets and expanded on demand), stream-copy events for the perf counters, and busy cycles per
IPU per category.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import simpy

from .hardware import System
from .program import (Collective, Compute, IpuCopy, RemoteCopy, Repeat, Sequence, StreamCopy,
                      Sync, ipus_of)


@dataclass
class Records:
    """Columnar task records; each row also occurs at every offset in ``offsets``."""

    ipu: np.ndarray
    category: np.ndarray  # object array of str
    name: np.ndarray  # object array of str
    start: np.ndarray  # cycles, relative to the chunk
    end: np.ndarray
    nbytes: np.ndarray
    detail: list  # per row: OpSteps for compute tasks, else None
    offsets: np.ndarray  # cycles


@dataclass
class StreamEvents:
    """Stream-copy events: one row per copy, with the same offset scheme as :class:`Records`."""

    direction: np.ndarray  # object array: "to_ipu" / "from_ipu"
    stream: np.ndarray
    replica: np.ndarray
    start: np.ndarray
    end: np.ndarray
    offsets: np.ndarray


@dataclass
class Timeline:
    """What one simulation produced. Times in cycles."""

    total_cycles: int
    records: list[Records] = field(default_factory=list)
    streams: list[StreamEvents] = field(default_factory=list)
    busy: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    resources: set = field(default_factory=set)
    events: int = 0  # SimPy events processed, summed over sub-simulations

    def shifted(self, offsets: np.ndarray) -> tuple[list[Records], list[StreamEvents]]:
        """This timeline's records placed at each of ``offsets``."""
        recs = [Records(r.ipu, r.category, r.name, r.start, r.end, r.nbytes, r.detail,
                        (offsets[:, None] + r.offsets[None, :]).ravel()) for r in self.records]
        strs = [StreamEvents(s.direction, s.stream, s.replica, s.start, s.end,
                             (offsets[:, None] + s.offsets[None, :]).ravel()) for s in self.streams]
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
    macro: tuple | None = None  # (count, sub-timeline) for a collapsed repeat

    @property
    def cycles(self) -> int:
        """Cycles the task lasts when it never waits for a resource."""
        return sum(c for _, c in self.phases)


class Engine:
    """Simulates programs on ``system``. ``stream_cycles`` prices stream copies."""

    def __init__(self, system: System):
        self.system = system
        self._memo: dict[int, Timeline] = {}

    # --- costs of the leaves ---------------------------------------------------------------
    def host_link_of(self, ipu: int) -> int:
        return ipu // self.system.host_link.ipus_per_link

    def stream_phases(self, s: StreamCopy) -> list[tuple[list[tuple], int]]:
        """Phases of a stream copy: (resources beyond the IPU's tiles, cycles).

        To the IPU: host sync and request, the host filling the stream buffer, the host link to
        the gateway, then the gateway-to-tiles transfer. From the IPU: the reverse, no fill.
        """
        hl = self.system.host_link
        sysm = self.system
        link = [("host_link", self.host_link_of(s.ipu), s.direction)]
        fixed = (hl.host_sync_cycles if s.host_sync else 0) + sysm.seconds_to_cycles(hl.latency_s)
        device = sysm.seconds_to_cycles(s.nbytes / hl.gateway_to_ipu_bytes_per_s)
        if s.direction == "to_ipu":
            prep = sysm.seconds_to_cycles(s.nbytes / hl.host_prepare_bytes_per_s)
            wire = sysm.seconds_to_cycles(s.nbytes / hl.host_to_ipu_bytes_per_s)
            return [([], fixed + prep), (link, wire), ([], device)]
        wire = sysm.seconds_to_cycles(s.nbytes / hl.ipu_to_host_bytes_per_s)
        return [([], fixed), ([], device), (link, wire)]

    def ipu_copy_cycles(self, c: IpuCopy) -> int:
        """Latency plus the busiest link direction's bytes over its bandwidth."""
        link = self.system.ipu_link
        per_link: dict[tuple[int, int], int] = defaultdict(int)
        for src, dst, nbytes in c.transfers:
            per_link[(src, dst)] += nbytes
        return link.latency_cycles + self.system.seconds_to_cycles(max(per_link.values()) / link.bytes_per_s)

    # --- lowering --------------------------------------------------------------------------
    def remote_cycles(self, r: RemoteCopy) -> int:
        mem = self.system.streaming_memory
        return mem.latency_cycles + self.system.seconds_to_cycles(r.nbytes / mem.bytes_per_s_per_ipu)

    def lower(self, seq: Sequence) -> list[Task]:
        """The task graph of ``seq``: tasks in program order, deps as indices into the list.

        Program order is kept per *lane*: an IPU's compute tiles (``ipu``) and its IO tiles
        (``("io", ipu)``). An item may also wait for other items (``after``).
        """
        tasks: list[Task] = []
        last: dict = {}
        emitted: dict[int, int] = {}  # id(program item) -> its latest task

        def deps_of(lanes, item=None):
            deps = {last[i] for i in lanes if i in last}
            for other in getattr(item, "after", ()):
                if id(other) in emitted:
                    deps.add(emitted[id(other)])
            return sorted(deps)

        def emit(task: Task, lanes, item=None):
            tasks.append(task)
            for i in lanes:
                last[i] = len(tasks) - 1
            if item is not None:
                emitted[id(item)] = len(tasks) - 1

        def walk(item):
            if isinstance(item, Sequence):
                for sub in item.items:
                    walk(sub)
            elif isinstance(item, Repeat):
                if item.count <= 0:
                    return
                if item.collapse:
                    sub = self._simulate_memo(item.body)
                    ipus = sorted(ipus_of(item.body))
                    emit(Task(deps_of(ipus), sorted(sub.resources), [([], item.count * sub.total_cycles)],
                               ipus[0] if ipus else 0, "repeat", item.name, macro=(item.count, sub)), ipus)
                else:
                    for _ in range(item.count):
                        walk(item.body)
            elif isinstance(item, Compute):
                emit(Task(deps_of([item.ipu], item), [("tiles", item.ipu)], [([], item.cycles)], item.ipu,
                          "compute", item.name, detail=item.ops), [item.ipu], item)
            elif isinstance(item, StreamCopy):
                lane = ("io", item.ipu) if item.io_tiles else item.ipu
                held = ("io_tiles", item.ipu) if item.io_tiles else ("tiles", item.ipu)
                emit(Task(deps_of([lane], item), [held], self.stream_phases(item), item.ipu,
                          "host_io_overlapped" if item.io_tiles else "host_io", item.name, item.nbytes,
                          stream=item), [lane], item)
            elif isinstance(item, RemoteCopy):
                emit(Task(deps_of([item.ipu]), [("tiles", item.ipu), ("streaming_memory", item.ipu)],
                          [([], self.remote_cycles(item))], item.ipu, "remote_io", item.name, item.nbytes),
                     [item.ipu])
            elif isinstance(item, Collective):
                ipus = sorted(item.ipus)
                emit(Task(deps_of(ipus), [("tiles", i) for i in ipus],
                          [(list(item.links), c) for n, c in item.phases for _ in range(n)], ipus[0], "collective",
                          item.name, item.nbytes), ipus)
            elif isinstance(item, Sync):
                emit(Task(deps_of(item.ipus), [("tiles", i) for i in sorted(item.ipus)],
                           [([], item.cycles)], min(item.ipus), "sync", item.name), item.ipus)
            elif isinstance(item, IpuCopy):
                ipus = sorted(item.ipus)
                links = sorted({("ipu_link", s, d) for s, d, _ in item.transfers})
                emit(Task(deps_of(ipus), [("tiles", i) for i in ipus] + links,
                          [([], self.ipu_copy_cycles(item))], ipus[0], "inter_ipu", item.name,
                          item.nbytes), ipus)
            else:
                raise TypeError(f"not a program item: {item!r}")

        walk(seq)
        return tasks

    # --- simulation ------------------------------------------------------------------------
    def run(self, program: Sequence) -> Timeline:
        """Simulate ``program`` from cycle 0."""
        return self._simulate(program)

    def _simulate_memo(self, body: Sequence) -> Timeline:
        key = id(body)
        if key not in self._memo:
            self._memo[key] = (self._simulate(body), body)  # keep body alive so its id stays unique
        return self._memo[key][0]

    def _simulate(self, seq: Sequence) -> Timeline:
        tasks = self.lower(seq)
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
        self._events = 0
        while True:  # env.run(), counting events for the benchmark
            try:
                env.step()
            except simpy.core.EmptySchedule:
                break
            self._events += 1
        total = int(end.max()) if len(tasks) else 0
        return self._collect(tasks, start, end, total, set(resources), env)

    def _collect(self, tasks, start, end, total, used, env) -> Timeline:
        tl = Timeline(total_cycles=total, resources=set(used))
        tl.events = self._events
        plain = [i for i, t in enumerate(tasks) if t.macro is None]
        if plain:
            idx = np.array(plain)
            tl.records.append(Records(
                ipu=np.array([tasks[i].ipu for i in plain]),
                category=np.array([tasks[i].category for i in plain], dtype=object),
                name=np.array([tasks[i].name for i in plain], dtype=object),
                start=start[idx], end=end[idx],
                nbytes=np.array([tasks[i].nbytes for i in plain], dtype=np.int64),
                detail=[tasks[i].detail for i in plain],
                offsets=np.zeros(1, dtype=np.int64)))
        streams = [i for i in plain if tasks[i].stream is not None]
        if streams:
            tl.streams.append(StreamEvents(
                direction=np.array([tasks[i].stream.direction for i in streams], dtype=object),
                stream=np.array([tasks[i].stream.stream for i in streams]),
                replica=np.array([tasks[i].stream.replica for i in streams]),
                start=start[streams], end=end[streams], offsets=np.zeros(1, dtype=np.int64)))
        for i, t in enumerate(tasks):
            if t.macro is not None:
                count, sub = t.macro
                offsets = start[i] + np.arange(count, dtype=np.int64) * sub.total_cycles
                recs, strs = sub.shifted(offsets)
                tl.records += recs
                tl.streams += strs
                tl.events += sub.events
                tl.resources |= sub.resources
                for ipu, cats in sub.busy.items():
                    for cat, cycles in cats.items():
                        tl.busy[ipu][cat] += count * cycles
                continue
            cycles = int(end[i] - start[i])
            if t.category == "compute":
                for cat, c in _compute_breakdown(t.detail).items():
                    tl.busy[t.ipu][cat] += c
            elif t.category == "sync":
                for ipu in {k[1] for k in t.hold if k[0] == "tiles"}:
                    tl.busy[ipu]["sync"] += cycles
            elif t.category in ("inter_ipu", "collective"):
                for ipu in {k[1] for k in t.hold if k[0] == "tiles"}:
                    tl.busy[ipu][t.category] += cycles
            elif t.category == "host_io_overlapped":
                tl.busy[t.ipu]["io_tiles"] += cycles
            else:
                tl.busy[t.ipu][t.category] += cycles
        return tl


def _compute_breakdown(ops) -> dict[str, int]:
    return {"compute": int(ops.compute.sum()), "exchange": int(ops.exchange.sum()),
            "sync": int(ops.sync.sum())}


def critical_path(tasks: list[Task]) -> int:
    """Cycles of the longest dependency chain (no resource waits): a lower bound on a run."""
    finish = [0] * len(tasks)
    for i, t in enumerate(tasks):
        finish[i] = max((finish[d] for d in t.deps), default=0) + t.cycles
    return max(finish, default=0)
