"""A finished simulation: PoplarExecutor's numbers, the trace, the breakdown and memory."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import perfcounters
from .replicas import replica_rows
from ..compiler.executable import Executable
from ..compiler.memory import CATEGORIES as MEMORY_CATEGORIES
from ..engine import Timeline
from ..program import CATEGORIES, OpSteps
from ..options import OverlapMode

TRACE_COLUMNS = ["ipu", "replica", "represents", "kind", "name", "start", "end", "cycles", "bytes"]
OP_TRACE_COLUMNS = ["ipu", "task", "name", "kind", "start", "end", "exchange", "sync", "compute", "launch",
                    "exchange_setup", "flops", "exchange_bytes"]


def _covered(starts: np.ndarray, ends: np.ndarray) -> int:
    """Cycles covered by the union of the intervals ``[starts[i], ends[i])``."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1]  # a gap before it: a new stretch starts
    first = np.flatnonzero(new)
    return int((np.maximum.reduceat(ends, first) - starts[first]).sum())


class _OnFirstUse:
    """A module imported when one of its names is first used, so ``import sim`` does not load it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


pd = _OnFirstUse("pandas")


#: seconds per host call (session.run, a model call) that Graphcore's published pipelined PopART and
#: PopTorch training runs spend beyond the simulator's time, whatever their replicas, accumulation or
#: system (reports/validation.md, "Packed BERT SL512: time per step": +118 to +184 ms a step of one call
#: on 8-IPU pipelines, MLPerf v1.0-v2.0; [per-call]: 47 ms a call on B42 and 104 ms on B43 at SDK 3.1,
#: below the range, since the simulator's weight update rose to 205 ms on them; optimum-graphcore's
#: IPUTrainer, one weight update a call: about 230 ms on BERT-Large's 4-IPU pipeline (O1) and 165 ms on a
#: 12-layer LM's (O2); "Training on a Pod16 and a Pod64": the line through each BERT pair's step times leaves
#: 143-221 ms a step beyond the simulator's with PopART's bert.py, 484-577 ms with Graphcore's PyTorch BERT,
#: whose step timer also holds its DataLoader's next batch and setOptimizer, while the time a micro-batch is
#: within 2-9 %); not modelled, as no source says what it is, so pipelined training runs and plans state
#: what it would add. Pipelines only: PopTorch's data-parallel ResNet-50 (B14, one IPU a replica, 443 ms a
#: call) lands within 1 % without it
UNMODELLED_CALL_SECONDS = (0.12, 0.58)


def compute_pass(name: str) -> str:
    """What a compute task runs, from its name: forward, backward, recompute, a pipeline stage's
    stash or restore, weight update, io-tile copy (a host stream's move between the IO and compute
    tiles, "IO tiles -> compute tiles: x", or an explicit IO-tile copy, PopXL's ``ops.io_tile_copy``:
    "io-tile copy x"), or compute (anything else, such as gradient clipping)."""
    if name == "weight update":
        return "weight update"
    if name.startswith(("IO tiles", "io-tile copy")):
        return "io-tile copy"
    last = name.rsplit(" ", 1)[-1]
    return last if last in ("forward", "backward", "recompute", "stash", "restore") else "compute"


#: the columns of :attr:`Run.pass_breakdown`: the compute tiles' ops by what they run, then what the
#: IPU spends outside its ops (the categories of :attr:`Run.breakdown`)
PASSES = ("forward", "recompute", "backward", "stash", "restore", "weight update", "io-tile copy", "compute")
PASS_COLUMNS = PASSES + ("sync", "host_io", "remote_io", "inter_ipu", "collective", "idle")


def unmodelled_call_effect(seconds: float) -> str:
    """What :data:`UNMODELLED_CALL_SECONDS` would add to a pipelined training call of ``seconds``: in % of
    the call, or, when it could more than double it, in ms and as how many times the call's time."""
    low, high = UNMODELLED_CALL_SECONDS
    longer = (f"{low / seconds:.0%}-{high / seconds:.0%} longer on hardware" if high <= seconds else
              f"{low * 1e3:.0f}-{high * 1e3:.0f} ms longer on hardware, {(seconds + low) / seconds:,.3g} to "
              f"{(seconds + high) / seconds:,.3g} times as long")
    return (f"Graphcore's published pipelined PopART and PopTorch training runs take {low * 1e3:.0f}-"
            f"{high * 1e3:.0f} ms more per call than the simulator gives them (PopART's and optimum's up to 230, "
            "Graphcore's PyTorch BERT's about 500), whatever their replicas, accumulation or system, a cost no "
            "public source sizes or explains (reports/validation.md, 'Packed BERT SL512: time per step', "
            f"'Training on a Pod16 and a Pod64'); so a call of {seconds * 1e3:,.1f} ms may take {longer}")


@dataclass
class Run:
    """The result of :func:`sim.simulate`. Cycles are cycles of the IPU clock."""

    executable: Executable
    timeline: Timeline
    wall_seconds: float = 0.0  # how long the simulator itself took
    notes: list[str] = field(default_factory=list)

    #: share of the run (on its busiest IPU) spent in host IO above which a run whose host threads
    #: each fill several replicas' inputs says how to spread that work
    HOST_BOUND_SHARE = 0.2

    def __post_init__(self):
        for note in (self._unmeasured_latency_note(), self._host_fill_note(), self._host_data_note(),
                     self._unmodelled_call_note(), self._held_out_note()):
            if note:
                self.notes.append(note)

    @property
    def all_notes(self) -> list[str]:
        """What the run's report says: its executable's notes (the compile's), then its own."""
        return [*self.executable.notes, *self.notes]

    @cached_property
    def held_out(self) -> dict | None:
        """The simulator's errors on the held-out published measurements of workloads like this one
        (its family, mode and scale: :func:`sim.results.held_out.like`), or None if none is of its kind."""
        from . import held_out
        ex = self.executable
        return held_out.like(ex.family, ex.training, ex.partition_ipus, ex.graph.name)

    def _held_out_note(self) -> str | None:
        """How far the simulator has come out from published measurements of workloads like this one."""
        if self.held_out is None:
            return None
        from . import held_out
        return "validation: " + held_out.describe(self.held_out)

    def _unmodelled_call_note(self) -> str | None:
        """For a pipelined training run: what the per-call time published pipelines have beyond the
        simulator's would add to this call (:func:`unmodelled_call_effect`)."""
        ex = self.executable
        if not ex.training or ex.strategy != "pipelined" or ex.ipus_per_replica < 2 or not self.seconds:
            return None
        return "not modelled: " + unmodelled_call_effect(self.seconds)

    def _host_fill_note(self) -> str | None:
        """When host IO takes a large share of the run and each host thread fills the inputs of
        several replicas in turn: the layout, and the settings that spread it."""
        o = self.executable.options
        if o.synthetic_data or not self.executable.graph.inputs or not self.cycle_count:
            return None
        processes, threads = o.host_processes(), o.stream_callback_threads
        per_thread = -(-o.replicas_per_host_process() // threads)
        host_io = max(self.timeline.busy.get(ipu, {}).get("host_io", 0) for ipu in self.executable.ipus)
        share = host_io / self.cycle_count
        if per_thread < 2 or share < self.HOST_BOUND_SHARE:
            return None
        return (f"host IO is {share:.0%} of the run: {o.total_replicas()} replicas' input buffers are filled by "
                f"{processes} host process{'es' if processes > 1 else ''} with {threads} stream-callback "
                f"thread{'s' if threads > 1 else ''} each, {per_thread} in turn per thread (Poplar's default: one "
                "thread a process); more PopRun instances (hostProcesses, --host-processes) or callback threads "
                "(streamCallbackThreads, --stream-callback-threads) share the work")

    def _host_data_note(self) -> str | None:
        """With real data: what the host's data pipeline (reading, decoding and augmenting the
        samples) does to the throughput at :meth:`~sim.options.Options.hostDataRate`, or, without
        a rate, the samples per second it must deliver a host process for this throughput (the
        simulator prices the host's copies into the stream buffers either way)."""
        o = self.executable.options
        if o.synthetic_data or not self.executable.graph.inputs or not self.samples_per_second:
            return None
        if o.host_data_rate():
            data, call = self.host_data_seconds, self.call_seconds
            if not o.host_data_asynchronous():
                share = (f"it runs between the calls (synchronous), each call's period {data + call:.4g} s: its "
                         f"{call:.4g} s and the samples' {data:.4g} s")
            elif data > call:
                share = (f"it sets the throughput: each call waits {data - call:.4g} s for its samples beyond the "
                         f"{call:.4g} s it runs")
            else:
                share = f"it keeps up, busy {data / call:.0%} of each call's {call:.4g} s"
            return (f"host data pipeline: at {o.host_data_rate():,.0f} samples/s a host process (hostDataRate) it "
                    f"makes the {self.host_data_samples:,.0f} samples the busiest process feeds a call in "
                    f"{data:.4g} s; {share} "
                    "(the calls' cycle counts and latencies are the IPUs', without the wait)")
        per_process = self.samples_per_second * o.num_instances() / o.host_processes()
        return (f"not modelled: the host's data pipeline (reading, decoding and augmenting samples in the "
                f"DataLoader or infeed); this throughput needs {per_process:,.0f} samples/s from each of "
                f"{o.host_processes()} host process{'es' if o.host_processes() > 1 else ''}, and a slower "
                "pipeline sets the throughput instead (give its rate: hostDataRate, --host-data-rate)")

    # --- PoplarExecutor numbers -------------------------------------------------------------
    @property
    def cycle_count(self) -> int:
        """Cycles of the whole run (all device iterations, accumulation and host waits)."""
        return int(self.timeline.total_cycles)

    @property
    def seconds(self) -> float:
        return self.executable.system.cycles_to_seconds(self.cycle_count)

    @property
    def rows(self) -> int:
        """Micro-batch rows processed: micro-batch x deviceIterations x accumulation x replicas."""
        o = self.executable.options
        return (self.micro_batch * o.device_iterations * o.Training.gradient_accumulation
                * o.replication_factor)

    @property
    def samples_per_row(self) -> float:
        """Samples one micro-batch row carries (``Graph.samples_per_row``: 1, or a packed model's
        average sequences per pack)."""
        return float(getattr(self.executable.graph, "samples_per_row", 1.0))

    @property
    def samples(self) -> int | float:
        """Samples processed: :attr:`rows` x :attr:`samples_per_row` (an int when whole; a packed
        model's average makes it fractional)."""
        n = self.rows * self.samples_per_row
        return int(n) if float(n).is_integer() else n

    @property
    def micro_batch(self) -> int:
        """Rows of one micro-batch (``Graph.micro_batch_rows``)."""
        return self.executable.graph.micro_batch_rows()

    @property
    def host_data_samples(self) -> float:
        """Samples a call the busiest host process feeds: its replicas' share of :attr:`samples`."""
        o = self.executable.options
        return self.samples / o.replication_factor * o.replicas_per_host_process()

    @property
    def host_data_seconds(self) -> float:
        """Seconds the busiest host process's data pipeline takes to make :attr:`host_data_samples`
        at :meth:`~sim.options.Options.hostDataRate`; 0 when the rate is not set, the data is
        synthetic or the model has no inputs."""
        o = self.executable.options
        rate = o.host_data_rate()
        if not rate or o.synthetic_data or not self.executable.graph.inputs:
            return 0.0
        return self.host_data_samples / rate

    @property
    def call_seconds(self) -> float:
        """Seconds of one call as a loop of calls pays them: the device's (:attr:`seconds`) and the
        front end's own host work in the call (``Executable.front_end_call_seconds``: PopTorch's or
        PopXL's; 0 through :func:`sim.simulate`)."""
        return self.seconds + self.executable.front_end_call_seconds

    @property
    def call_period_seconds(self) -> float:
        """Seconds from one call's start to the next's in a loop of calls: the call (:attr:`call_seconds`),
        or, when it takes longer, the data pipeline's making of the call's samples (an asynchronous
        pipeline makes the next call's samples while this one runs, as PopTorch's asynchronous
        DataLoader and TensorFlow's infeeds do); a synchronous one runs between the calls, so the
        two add up."""
        if not self.executable.options.host_data_asynchronous():
            return self.call_seconds + self.host_data_seconds
        return max(self.call_seconds, self.host_data_seconds)

    @property
    def samples_per_second(self) -> float:
        """Samples a second in a loop of calls: :attr:`samples` over :attr:`call_period_seconds`."""
        period = self.call_period_seconds
        return self.samples / period if period else 0.0

    @cached_property
    def perf_counters(self) -> dict[str, list[list[float]]]:
        """``getPerfCounters()``: host timestamps (seconds from the run's start) per tensor."""
        return {k: perfcounters.normalize([stamps.tolist() for stamps in per_tensor])
                for k, per_tensor in self._stamps.items()}

    @cached_property
    def _stamps(self) -> dict[str, list[np.ndarray]]:
        """The perf counters as arrays (seconds): per key, one array per input (or output),
        each step-major and replica-minor. Built once per run, without going through lists."""
        ex = self.executable
        g = ex.graph
        result = {k: [np.empty(0) for _ in (g.inputs if k.startswith("input") else g.outputs)]
                  for k in perfcounters.KEYS}
        if ex.options.synthetic_data or not self.timeline.streams:
            return result
        clock = ex.system.ipu.clock_hz
        R = ex.options.replication_factor
        simulated = ex.simulated_replicas
        for direction, (k_start, k_end) in (("to_ipu", ("input", "input_complete")),
                                             ("from_ipu", ("output", "output_complete"))):
            stream, replica, start, end = _expand_streams(self.timeline, direction)
            order = np.lexsort((start, replica, stream))  # stable: by stream, replica, then time
            stream, replica, start, end = stream[order], replica[order], start[order], end[order]
            for s, first, count in zip(*np.unique(stream, return_index=True, return_counts=True)):
                rows = slice(first, first + count)
                replicas, per_replica = np.unique(replica[rows], return_counts=True)
                if len(set(per_replica.tolist())) != 1:
                    raise ValueError(f"stream {s}: the simulated replicas made {per_replica.tolist()} copies")
                # replicas not simulated repeat a simulated one's stamps
                row_of = {int(x): i for i, x in enumerate(replicas)}
                pick = [row_of[simulated[r % len(simulated)]] for r in range(R)]
                for key, stamps in ((k_start, start), (k_end, end)):
                    steps = stamps[rows].reshape(len(replicas), -1)[pick]  # replica x step
                    result[key][int(s)] = steps.T.ravel() / clock  # step-major, replica-minor
        return result

    @cached_property
    def _latencies(self) -> dict[str, tuple[float, float, float]]:
        """The four latencies (min, max, avg) in seconds, computed once from the perf counters."""
        counters = {k: per_tensor or [np.empty(0)] for k, per_tensor in self._stamps.items()}
        return {name: getattr(perfcounters, kind)(counters) for name, kind in self.LATENCIES.items()}

    @property
    def latency(self) -> tuple[float, float, float]:
        """``getLatency()``: round trip (min, max, avg) in seconds."""
        return self._latencies["latency"]

    @property
    def host_ipu_latency(self) -> tuple[float, float, float]:
        return self._latencies["host_ipu_latency"]

    @property
    def compute_latency(self) -> tuple[float, float, float]:
        return self._latencies["compute_latency"]

    @property
    def ipu_host_latency(self) -> tuple[float, float, float]:
        return self._latencies["ipu_host_latency"]

    #: Run attribute -> perfcounters latency
    LATENCIES = {"latency": "round_trip", "host_ipu_latency": "host_to_ipu", "compute_latency": "compute",
                 "ipu_host_latency": "ipu_to_host"}

    def latency_measured(self, name: str = "latency") -> bool:
        """Is latency ``name`` (a key of :attr:`LATENCIES`) measured? Not with synthetic data, nor
        without the host transfers it runs between: then it is PopTorch's (0, 0, 0), not a time."""
        if self.executable.options.synthetic_data:
            return False
        g = self.executable.graph
        streamed = {"input": bool(g.inputs), "output": bool(g.outputs)}
        return all(streamed[key.split("_")[0]] for key in perfcounters.LATENCY_KEYS[self.LATENCIES[name]])

    def _unmeasured_latency_note(self) -> str | None:
        """What the report says when latencies are not measured (and, with synthetic data, the
        time to read instead)."""
        o = self.executable.options
        if o.synthetic_data:
            per_call = self.seconds * 1e3
            return ("latencies not measured: with synthetic data there are no host transfers, so the perf "
                    "counters are empty and getLatency() and the other three latencies return (0, 0, 0), as in "
                    f"PopTorch; the simulated compute time is {per_call:.4f} ms per call "
                    f"({per_call / o.device_iterations:.4f} ms per device iteration)")
        unmeasured = [name for name in self.LATENCIES if not self.latency_measured(name)]
        if unmeasured:
            g = self.executable.graph
            missing = " and ".join(w for w, names in (("no inputs to the IPU", g.inputs),
                                                        ("no outputs to the host", g.outputs)) if not names)
            return (f"{', '.join(unmeasured)} not measured: the model streams {missing}, so there are no "
                    "timestamps to time them by; they read (0, 0, 0)")
        return None

    # --- what hardware cannot tell ------------------------------------------------------------
    @cached_property
    def trace(self) -> pd.DataFrame:
        """One row per task and IPU taking part: ipu, replica, represents, kind, name, start,
        end, cycles, bytes (times in cycles).

        A sync, an inter-IPU copy or a collective has a row on every IPU it involves. ``ipu`` is
        the IPU's index in the system and ``replica`` the replica it belongs to. Replicas are
        symmetric, so only :attr:`Executable.simulated_replicas` are simulated: replica ``r``
        runs what simulated replica ``r % len(simulated)`` runs, and ``represents`` says how many
        replicas each row stands for. :meth:`trace_all_replicas` writes those rows out.
        """
        frames = []
        for r in self.timeline.records:
            n, k = len(r.start), len(r.offsets)
            per_row = np.fromiter((len(p) for p in r.ipus), dtype=np.int64, count=n)
            row = np.repeat(np.arange(n), per_row)  # a row per participating IPU
            ipus = np.fromiter((i for p in r.ipus for i in p), dtype=np.int64, count=int(per_row.sum()))
            m = len(row)
            off = np.repeat(r.offsets, m)
            start = np.tile(r.start[row], k) + off
            end = np.tile(r.end[row], k) + off
            frames.append(pd.DataFrame({
                "ipu": np.tile(ipus, k), "kind": np.tile(r.category[row], k), "name": np.tile(r.name[row], k),
                "start": start, "end": end, "cycles": end - start, "bytes": np.tile(r.nbytes[row], k)}))
        if not frames:
            return pd.DataFrame(columns=TRACE_COLUMNS)
        df = pd.concat(frames, ignore_index=True)
        ex = self.executable
        df["replica"] = df["ipu"] // ex.ipus_per_replica
        df["represents"] = df["replica"].map(self._replicas_represented()).fillna(1).astype(np.int64)
        return df.sort_values(["start", "ipu"], kind="stable").reset_index(drop=True)[TRACE_COLUMNS]

    def _replicas_represented(self) -> dict[int, int]:
        """Simulated replica -> how many replicas (itself included) run what it runs."""
        simulated = self.executable.simulated_replicas
        counts = dict.fromkeys(simulated, 0)
        for r in range(self.executable.replicas):
            counts[simulated[r % len(simulated)]] += 1
        return counts

    def trace_all_replicas(self) -> pd.DataFrame:
        """:attr:`trace` with the rows of every replica written out (``represents`` is 1).

        Replica ``r`` repeats the rows of simulated replica ``r % len(simulated)`` on its own
        IPUs (``ipu = r * ipus_per_replica + position``). Large: rows x replicas.
        """
        ex = self.executable
        simulated = ex.simulated_replicas
        base = self.trace
        index, replica, shift = replica_rows(base["replica"].to_numpy(), simulated, ex.replicas)
        df = base.iloc[index].reset_index(drop=True)
        df["ipu"] = df["ipu"].to_numpy() + shift * ex.ipus_per_replica
        df["replica"] = replica
        df["represents"] = 1
        return df.sort_values(["start", "ipu"], kind="stable").reset_index(drop=True)

    def op_trace(self, expand: bool = False) -> pd.DataFrame:
        """One row per op of the compute tasks, in time order: ipu, task, name, kind, start,
        end, its exchange, sync and compute cycles and the fixed parts of them (``launch`` of
        compute, ``exchange_setup`` of exchange), flops and exchange_bytes. Times in cycles.

        Work the simulation repeats (device iterations, accumulation, a pipeline's main
        cycles) is listed once, at its first run, with ``repeats``: how many times those ops
        ran; so the frame does not grow with device iterations. ``expand=True`` writes every
        run out instead (a row per op per run, no ``repeats`` column).
        """
        pieces = [piece for r in self.timeline.records for piece in [_op_rows(r, expand)] if piece]
        columns = OP_TRACE_COLUMNS + ([] if expand else ["repeats"])
        if not pieces:
            return pd.DataFrame(columns=columns)
        # each chunk's rows are positions in its own (not yet repeated) values: one gather per
        # column, from all chunks' values at once, in time order (a stable sort on the start, as
        # ``sort_values(kind="stable")``; skipped when the rows are in order already)
        heads = np.cumsum([0] + [len(values["cycles"]) for values, _, _ in pieces[:-1]])
        take = np.concatenate([index + h for (_, index, _), h in zip(pieces, heads)])
        start = np.concatenate([starts for _, _, starts in pieces])
        if not np.all(start[1:] >= start[:-1]):
            order = np.argsort(start, kind="stable")
            take, start = take[order], start[order]
        data = {}
        for c in columns:
            if c == "start":
                data[c] = start
            elif c == "end":
                data[c] = start + np.concatenate([values["cycles"] for values, _, _ in pieces])[take]
            else:
                data[c] = np.concatenate([values[c] for values, _, _ in pieces])[take]
        # the arrays are this frame's own: no copy, and no merging them into one block (the
        # same frame, column for column, without a second copy of a large one)
        return pd.DataFrame(data, copy=False)

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        """Cycles per category per IPU; each row adds up to :attr:`cycle_count`. Copies on the IO
        tiles run beside the compute tiles; the time the compute tiles wait, doing nothing, while
        the IO tiles copy counts as that copy's ``remote_io`` or ``host_io``, not ``idle``."""
        waits = self._io_tile_waits()
        rows = {}
        for ipu in self.executable.ipus:
            busy = self.timeline.busy.get(ipu, {})
            row = {c: int(busy.get(c, 0)) for c in CATEGORIES if c != "idle"}
            row["idle"] = self.cycle_count - sum(row.values())
            for category, cycles in waits.get(ipu, {}).items():
                moved = min(cycles, row["idle"])
                row[category] += moved
                row["idle"] -= moved
            rows[ipu] = row
        df = pd.DataFrame.from_dict(rows, orient="index", columns=list(CATEGORIES))
        df.index.name = "ipu"
        return df

    @cached_property
    def pass_breakdown(self) -> pd.DataFrame:
        """Cycles per IPU by what it runs (:data:`PASS_COLUMNS`): its ops by pass (forward,
        recompute, backward, a pipeline stage's stash and restore, the weight update, the compute
        tiles' exchanges with the IO tiles; ``compute``: the rest), each with its own compute sets,
        exchanges, their fixed costs and syncs; then what the IPU spends outside its ops, as
        :attr:`breakdown` counts it: the program's other syncs (pipeline, host and collective syncs),
        host and remote IO, inter-IPU copies, collectives and idle. Each row adds up to
        :attr:`cycle_count`."""
        ops = self.op_trace()
        repeats = ops["repeats"].to_numpy() if "repeats" in ops else 1
        ops = ops.assign(span=(ops["end"] - ops["start"]) * repeats, own_sync=ops["sync"] * repeats)
        by_task = ops.groupby(["ipu", "task"])["span"].sum().reset_index()  # a pass per task, not per op
        by_task["pass_"] = by_task["task"].map({t: compute_pass(t) for t in by_task["task"].unique()})
        spans = by_task.groupby(["ipu", "pass_"])["span"].sum()
        own_sync = ops.groupby("ipu")["own_sync"].sum()
        rows = {}
        for ipu, row in self.breakdown.iterrows():
            out = {p: int(spans.get((ipu, p), 0)) for p in PASSES}
            out["sync"] = int(row["sync"] - own_sync.get(ipu, 0))
            out.update({c: int(row[c]) for c in ("host_io", "remote_io", "inter_ipu", "collective", "idle")})
            rows[ipu] = out
        df = pd.DataFrame.from_dict(rows, orient="index", columns=list(PASS_COLUMNS))
        df.index.name = "ipu"
        return df

    def _io_tile_waits(self) -> dict[int, dict[str, int]]:
        """Per IPU, the cycles its IO tiles copy (remote copies first, then host streams) while its
        compute tiles do nothing (no task of theirs runs); empty when nothing ran on the IO tiles."""
        if not any(busy.get("io_tiles") for busy in self.timeline.busy.values()):
            return {}
        trace = self.trace
        lanes = {"remote_io_overlapped": "remote_io", "host_io_overlapped": "host_io"}
        on_io = trace[trace["kind"].isin(list(lanes))]
        on_compute = trace[~trace["kind"].isin([*lanes, "host_prefetch"])]
        waits: dict[int, dict[str, int]] = {}
        for ipu, io in on_io.groupby("ipu"):
            mine = on_compute[on_compute["ipu"] == ipu]
            starts, ends = mine["start"].to_numpy(), mine["end"].to_numpy()
            covered = _covered(starts, ends)
            for kind, category in lanes.items():
                rows = io[io["kind"] == kind]
                if rows.empty:
                    continue
                starts = np.concatenate([starts, rows["start"].to_numpy()])
                ends = np.concatenate([ends, rows["end"].to_numpy()])
                now = _covered(starts, ends)
                waits.setdefault(int(ipu), {})[category] = now - covered
                covered = now
        return waits

    @property
    def memory(self) -> dict:
        """Per IPU: peak bytes on the fullest tile, capacity, always-live bytes, by role, and
        what the fullest tile holds at its peak (``peak_tile_parts``, as :meth:`memory_table`)."""
        return {ipu: m.summary() for ipu, m in self.executable.memory.items()}

    def memory_table(self) -> pd.DataFrame:
        """Bytes on each IPU's fullest tile at its peak, by category: a row per IPU (within a
        replica; replicas hold the same), columns ``control_code``, ``vertex_code``, ``vertex_state``,
        ``exchange_code``, ``stack`` (what Poplar allocates for the program,
        :mod:`sim.compiler.program_memory`), ``weights``, ``constants``, ``optimizer_state``, ``accumulators`` (gradient
        accumulators), ``stash`` (pipeline stashes), ``activations`` (live at the peak) and
        ``temporaries`` (of the op then running). Each row adds up to that IPU's
        ``peak_tile_bytes``."""
        rows = {ipu: m.breakdown() for ipu, m in self.executable.memory.items()}
        df = pd.DataFrame.from_dict(rows, orient="index", columns=list(MEMORY_CATEGORIES), dtype=np.int64)
        df.index.name = "ipu"
        return df

    def liveness(self, ipu: int | None = None) -> pd.DataFrame:
        """Bytes live at each program point (op) of the compiled schedule, like PopVision's
        liveness report: a row per op of ``ipu`` (an IPU within a replica; None: every IPU,
        one after another), in the order the memory analysis walks them (each run, a pipeline
        stage's pass, a phase or the weight update, in turn).

        Columns: ``ipu``, ``step`` (0, 1, ... per IPU), ``op``, ``run`` (its stage, phase or
        "weight update"; empty when the IPU runs one unnamed program), then in bytes, summed
        over the IPU's compute tiles: ``always_live`` (program memory, weights, constants,
        optimizer state, accumulators and stashes), ``activations`` (live then),
        ``temporaries`` (of the op) and ``total``; and on the fullest tile at that op
        (``tile``, which can change from op to op): ``tile_always_live``,
        ``tile_activations``, ``tile_temporaries`` and ``tile_total``. The parts of each view
        add up to its total; the highest ``tile_total`` of an IPU is its ``peak_tile_bytes``.
        """
        memory = self.executable.memory
        ipus = sorted(memory) if ipu is None else [ipu]
        frames = []
        for i in ipus:
            if i not in memory:
                raise KeyError(f"no memory analysis for IPU {i}: IPUs of a replica are {sorted(memory)}")
            frame = pd.DataFrame(memory[i].liveness.columns())
            frame.insert(0, "ipu", i)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    def tile_memory(self, ipu: int = 0, category: str | None = None) -> np.ndarray:
        """Peak bytes of each compute tile of ``ipu``; with ``category`` (one of
        :data:`sim.compiler.memory.CATEGORIES`, the columns of :meth:`memory_table`) only that
        category's bytes on each tile at the tile's own peak."""
        if ipu not in self.executable.memory:
            raise ValueError(f"no IPU {ipu} in this run: expected one of {sorted(self.executable.memory)}")
        memory = self.executable.memory[ipu]
        return memory.peak if category is None else memory.tile_category(category)

    def tile_compute(self, ipu: int = 0) -> np.ndarray:
        """Compute cycles of each compute tile of ``ipu`` (an IPU of the system, as :attr:`breakdown`'s
        index: those of the simulated replicas) over the run (load balance per tile)."""
        if ipu not in self.executable.ipus:
            raise ValueError(f"no IPU {ipu} simulated in this run: expected one of {list(self.executable.ipus)} (a "
                             "replica not simulated runs what simulated replica r % "
                             f"{len(self.executable.simulated_replicas)} runs)")
        total = np.zeros(self.executable.tiles)
        for r in self.timeline.records:
            for i, ops in enumerate(r.detail):
                if isinstance(ops, OpSteps) and r.ipu[i] == ipu and ops.tile_compute is not None:
                    total += ops.tile_compute * len(r.offsets)
        return total

    @property
    def flops(self) -> float:
        """FLOPs of the run on every replica: each simulated replica's ops counted once for every
        replica it stands for (as :attr:`samples` counts every replica's)."""
        represented, k = self._replicas_represented(), self.executable.ipus_per_replica
        return float(sum(float(ops.flops.sum()) * len(r.offsets) * represented.get(int(ipu) // k, 1)
                         for r in self.timeline.records for ipu, ops in zip(r.ipu, r.detail)
                         if isinstance(ops, OpSteps)))

    def summary(self) -> dict:
        """The numbers of the run as plain Python values (what ``ipusim run --json`` prints)."""
        def lat(name):  # None (null) when not measured: a 0 would read as a measured time
            t = getattr(self, name)
            return {"min": t[0], "max": t[1], "avg": t[2]} if self.latency_measured(name) else None
        ex = self.executable
        return {
            "model": ex.graph.name, "system": ex.system.name, "training": ex.training,
            "run": {"strategy": ex.strategy, "ipus_per_replica": ex.ipus_per_replica,
                    "replication_factor": ex.options.replication_factor,
                    "simulated_replicas": list(ex.simulated_replicas),
                    "device_iterations": ex.options.device_iterations,
                    "gradient_accumulation": ex.options.Training.gradient_accumulation,
                    "output_mode": ex.output_mode.name, "output_return_period": ex.options.output_return_period,
                    "compute_tiles": ex.tiles,
                    "micro_batch": self.micro_batch,
                    "overlap": {t: OverlapMode(m).name for t, m in ex.graph.overlap.items() if m},
                    "optimizer": ex.optimizer or None},
            "model_params": {k: _plain(v) for k, v in ex.graph.params.items()},
            "cycle_count": self.cycle_count, "seconds": self.seconds, "samples": self.samples,
            "samples_per_row": self.samples_per_row, "samples_per_second": self.samples_per_second,
            "call_period_seconds": self.call_period_seconds, "host_data_seconds": self.host_data_seconds,
            "latency": lat("latency"), "compute_latency": lat("compute_latency"),
            "host_ipu_latency": lat("host_ipu_latency"), "ipu_host_latency": lat("ipu_host_latency"),
            "breakdown": {str(ipu): {k: int(v) for k, v in row.items()}
                          for ipu, row in self.breakdown.iterrows()},
            "pass_breakdown": {str(ipu): {k: int(v) for k, v in row.items()}
                               for ipu, row in self.pass_breakdown.iterrows()},
            "memory": {str(k): v for k, v in self.memory.items()},
            "tflops": self.flops / self.seconds / 1e12 if self.seconds else 0.0,
            "notes": self.all_notes,
            "held_out": self.held_out,
            "options": options_dict(ex.options), "system_config": system_dict(ex.system),
            "simulator": {"wall_seconds": self.wall_seconds, "simpy_events": self.timeline.events},
        }

    # --- notebooks and scripts ------------------------------------------------------------------
    def __repr__(self) -> str:
        """One line: model, system, mode, cycles, time and average latency (ms)."""
        ex = self.executable
        mode = "training" if ex.training else "inference"
        lat = f"{self.latency[2] * 1e3:.4f} ms" if self.latency_measured() else "not measured"
        k, r = ex.ipus_per_replica, ex.options.replication_factor
        return (f"<sim.Run {ex.graph.name} on {ex.system.name} ({mode}, {k} IPU{'s' * (k != 1)} x "
                f"{r} replica{'s' * (r != 1)}): {self.cycle_count:,} cycles, "
                f"{self.seconds * 1e3:.4f} ms, latency avg {lat}>")

    def _repr_html_(self) -> str:
        """A small summary table, for Jupyter."""
        from html import escape
        ex = self.executable
        lat = (f"{self.latency[0] * 1e3:.4f} / {self.latency[2] * 1e3:.4f} / {self.latency[1] * 1e3:.4f} ms"
               if self.latency_measured() else "not measured")
        peak = max((m["peak_tile_bytes"] for m in self.memory.values()), default=0)
        rows = [("model", ex.graph.name), ("system", ex.system.name),
                ("mode", "training" if ex.training else "inference"),
                ("IPUs x replicas", f"{ex.ipus_per_replica} x {ex.options.replication_factor}"),
                ("cycles", f"{self.cycle_count:,}"), ("time", f"{self.seconds * 1e3:.4f} ms"),
                ("samples/s", f"{self.samples_per_second:,.1f}"), ("latency min / avg / max", lat),
                ("fullest tile at its peak", f"{peak:,} bytes"), ("notes", str(len(self.all_notes)))]
        body = "".join(f"<tr><th style='text-align:left'>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
        return f"<table class='ipusim-run'>{body}</table>"

    def inter_ipu_transfers(self) -> pd.DataFrame:
        """Every transfer of the inter-IPU copies, as run: a row per (copy, source, destination)
        with ``name``, ``src``, ``dst`` (IPU indices in the system), ``bytes``, and the copy's
        ``start`` and ``end`` (cycles; a merged copy's transfers share its times). In time order."""
        cols: dict[str, list] = {c: [] for c in ("name", "src", "dst", "bytes", "start", "end")}
        for r in self.timeline.records:
            rows = [i for i, d in enumerate(r.detail) if r.category[i] == "inter_ipu" and d]
            if not rows:
                continue
            per = [r.detail[i] for i in rows]
            row = np.repeat(np.array(rows), [len(t) for t in per])
            src, dst, nbytes = (np.array([x[j] for t in per for x in t], dtype=np.int64) for j in range(3))
            k, m = len(r.offsets), len(row)
            off = np.repeat(r.offsets, m)
            for c, v in (("name", np.tile(r.name[row], k)), ("src", np.tile(src, k)), ("dst", np.tile(dst, k)),
                         ("bytes", np.tile(nbytes, k)), ("start", np.tile(r.start[row], k) + off),
                         ("end", np.tile(r.end[row], k) + off)):
                cols[c].append(v)
        if not cols["name"]:
            return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else np.int64) for c in cols})
        df = pd.DataFrame({c: np.concatenate(v) for c, v in cols.items()})
        return df.sort_values(["start", "src", "dst"], kind="stable").reset_index(drop=True)

    def chrome_trace(self, all_replicas: bool | None = None) -> dict:
        """The trace in the Chrome trace-event format (Perfetto, chrome://tracing): see
        :func:`sim.results.chrome_trace.chrome_trace`."""
        from .chrome_trace import chrome_trace
        return chrome_trace(self, all_replicas=all_replicas)


def _plain(value):
    """An option value as plain JSON-able data (enums by name, tuples as lists)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "name") and hasattr(value, "value"):  # an enum member
        return value.name
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def options_dict(options) -> dict:
    """The options the user set (PopTorch names -> values), in the order they were set."""
    return {k: _plain(v) for k, v in options.set_options.items()}


def system_dict(system) -> dict:
    """What tells one system config from another: its name, file, size, IPU and a digest of
    every constant in it (two runs with the same digest ran on identical hardware constants)."""
    import dataclasses
    import hashlib
    import json
    constants = {k: v for k, v in dataclasses.asdict(system).items() if k not in ("path", "description")}
    digest = hashlib.sha256(json.dumps(constants, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"name": system.name, "path": str(system.path), "description": system.description,
            "ipus": system.num_ipus, "generation": system.ipu.generation, "clock_hz": system.ipu.clock_hz,
            "tiles_per_ipu": system.ipu.tiles, "sram_bytes_per_tile": system.ipu.sram_bytes_per_tile,
            "topology": system.layout.topology, "constants_digest": digest}


def _expand_streams(tl: Timeline, direction: str) -> tuple[np.ndarray, ...]:
    """Every stream copy in ``direction`` at every offset: (stream, replica, start, end), times in
    cycles."""
    columns: tuple[list, ...] = ([], [], [], [])
    for s in tl.streams:
        mine = s.direction == direction
        n, k = int(mine.sum()), len(s.offsets)
        off = np.repeat(s.offsets, n)
        for column, values in zip(columns, (np.tile(s.stream[mine], k), np.tile(s.replica[mine], k),
                                            np.tile(s.start[mine], k) + off, np.tile(s.end[mine], k) + off)):
            column.append(values)
    return tuple(np.concatenate(c) for c in columns)


def _op_rows(r, expand: bool) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None:
    """The op-trace rows of one chunk of records: per task row, its ops in order; with
    ``expand``, once per offset (row, then offset, then op), else once at the first offset.

    Returns (the op-trace columns, ``cycles`` and, without ``expand``, ``repeats`` once per op;
    each row's position in them; each row's start in cycles), or None for no ops."""
    rows = [i for i, ops in enumerate(r.detail) if isinstance(ops, OpSteps) and len(ops.names)]
    k = len(r.offsets)
    if not rows or not k:
        return None
    steps = [r.detail[i] for i in rows]
    n = np.array([len(ops.names) for ops in steps])
    cycles = np.concatenate([ops.cycles for ops in steps])
    row = np.repeat(np.arange(len(rows)), n)
    within = np.cumsum(cycles) - cycles  # cycles before each op, counted from the chunk's first op
    first = r.start[rows][row] + within - np.repeat(within[np.cumsum(n) - n], n)
    parts = [ops.parts() for ops in steps]
    values = {"ipu": r.ipu[rows][row], "task": r.name[rows][row],
              "name": np.array([x for ops in steps for x in ops.names], dtype=object),
              "kind": np.array([x for ops in steps for x in ops.kinds], dtype=object),
              **{c: np.concatenate([getattr(ops, c) for ops in steps])
                 for c in ("exchange", "sync", "compute", "flops", "exchange_bytes")},
              **{c: np.concatenate([p[c] for p in parts]) for c in ("launch", "exchange_setup")},
              "cycles": cycles}
    if expand:  # each row's ops once per offset, as they ran
        heads = np.cumsum(n) - n
        index = np.concatenate([np.tile(np.arange(h, h + m), k) for h, m in zip(heads, n)])
        offsets = np.concatenate([np.repeat(r.offsets, m) for m in n])
    else:
        index, offsets = np.arange(len(cycles)), np.full(len(cycles), r.offsets[0])
        values["repeats"] = np.full(len(cycles), k, dtype=np.int64)
    return values, index, first[index] + offsets
