"""The engine on hand-built programs with real parallelism (ipu-m2000: 4 IPUs, one host link).

Pinned here:
* honesty: a run is never shorter than the critical path of its task graph and never longer
  than the serial sum of its tasks (docs/design.md, "Modelling principles");
* ``Repeat(collapse=True)`` is only a speed-up: same total, same trace rows, same breakdown and
  perf counters as the same repeat simulated iteration by iteration;
* the breakdown of every IPU adds up to the total, and its busy cycles are the trace's;
* determinism: same executable, same cycles and trace, bit for bit;
* exact timings of syncs, inter-IPU copies, stream copies (their phases) and host-link sharing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import models
import sim
from sim.engine import Engine, critical_path
from sim.options import OverlapMode
from sim.program import Compute, IpuCopy, OpSteps, Repeat, Sequence, StreamCopy, Sync, ipus_of
from sim.strategy import Phase, SerialPhasedExecution, ShardedExecution, Stage

M2000 = sim.load_system("ipu-m2000")


# --- helpers ---------------------------------------------------------------------------------
def compute(ipu: int, name: str, cycles: list[int]) -> Compute:
    """A compute step whose ops last ``cycles``, split into exchange, sync and compute."""
    total = np.array(cycles, dtype=np.int64)
    exchange = total // 4
    sync = np.minimum(40, total - exchange)
    return Compute(ipu, name, OpSteps(
        names=tuple(f"{name}/op{i}" for i in range(len(total))), kinds=("custom",) * len(total),
        compute=total - exchange - sync, exchange=exchange, sync=sync,
        flops=total.astype(np.float64) * 100, exchange_bytes=exchange * 4))


def body(tag: str, collapse_inner: bool) -> Sequence:
    """One iteration: aligned by a full sync at both ends, with parallel work on 4 IPUs.

    Stream copies on every IPU share host link 0 (ipus_per_link = 4); IPU 2's copy has no host
    sync of its own; syncs over subsets let IPUs 0/1 and 2/3 run apart; an inner repeat on IPUs
    0 and 1 (aligned by its own syncs) runs while IPUs 2 and 3 compute; a merged inter-IPU copy
    goes both ways between IPUs 0 and 1.
    """
    inner = Sequence([
        Sync((0, 1), "external", 60, f"{tag}/inner/sync0"),
        compute(0, f"{tag}/inner/c0", [700, 300]),
        compute(1, f"{tag}/inner/c1", [1100]),
        IpuCopy(((0, 1, 65536),), f"{tag}/inner/copy01"),
        Sync((0, 1), "external", 60, f"{tag}/inner/sync1"),
    ], "inner")
    return Sequence([
        Sync((0, 1, 2, 3), "external", 120, f"{tag}/sync_all0"),
        StreamCopy(0, f"{tag}/in0", "to_ipu", 200_000, 0),
        StreamCopy(1, f"{tag}/in1", "to_ipu", 150_000, 0),
        StreamCopy(2, f"{tag}/in2", "to_ipu", 100_000, 1, host_sync=False),
        StreamCopy(3, f"{tag}/in3", "to_ipu", 50_000, 1),
        compute(0, f"{tag}/c0", [1000, 2000]),
        compute(1, f"{tag}/c1", [5000]),
        compute(2, f"{tag}/c2", [300, 300, 300]),
        compute(3, f"{tag}/c3", [8000, 500]),
        Sync((0, 1), "external", 80, f"{tag}/sync01"),
        Repeat(3, inner, f"{tag}/inner", collapse=collapse_inner),
        compute(2, f"{tag}/c2b", [20000]),
        Sync((2, 3), "external", 80, f"{tag}/sync23"),
        IpuCopy(((0, 1, 1 << 20), (1, 0, 1 << 19)), f"{tag}/copy0_1"),
        IpuCopy(((2, 3, 1 << 18),), f"{tag}/copy2_3"),
        StreamCopy(1, f"{tag}/out1", "from_ipu", 300_000, 0),
        StreamCopy(3, f"{tag}/out3", "from_ipu", 300_000, 1),
        StreamCopy(2, f"{tag}/out2", "from_ipu", 30_000, 0),
        Sync((0, 1, 2, 3), "external", 120, f"{tag}/sync_all1"),
    ], tag)


def program(collapse_outer: bool, collapse_inner: bool, count: int = 4) -> Sequence:
    return Sequence([Repeat(count, body("step", collapse_inner), "steps", collapse=collapse_outer)],
                    "main")


ALL_VARIANTS = [(o, i) for o in (True, False) for i in (True, False)]


@pytest.fixture(scope="module")
def mlp_executable():
    """A real Executable (2 inputs, 2 outputs) whose program the tests replace."""
    return sim.compile(models.get("mlp", micro_batch=2), M2000)


def run_program(executable, prog: Sequence) -> sim.Run:
    return sim.run_executable(dataclasses.replace(executable, program=prog, ipus=[0, 1, 2, 3]))


def names_to_ipus(item, out=None) -> dict[str, set[int]]:
    """Task name -> IPUs it occupies, for every leaf of a program."""
    out = {} if out is None else out
    if isinstance(item, Sequence):
        for sub in item.items:
            names_to_ipus(sub, out)
    elif isinstance(item, Repeat):
        names_to_ipus(item.body, out)
    else:
        out[item.name] = ipus_of(item)
    return out


def sorted_trace(run: sim.Run) -> pd.DataFrame:
    return run.trace.sort_values(["start", "ipu", "name", "end"], kind="stable").reset_index(drop=True)


def c(seconds: float) -> int:
    """Seconds to cycles of the Mk2 clock, rounded up (the simulator's boundary rule)."""
    return math.ceil(seconds * M2000.ipu.clock_hz)


# --- honesty ---------------------------------------------------------------------------------
@pytest.mark.parametrize("collapse_outer, collapse_inner", ALL_VARIANTS)
def test_total_between_critical_path_and_serial_sum(collapse_outer, collapse_inner):
    prog = program(collapse_outer, collapse_inner)
    tasks = Engine(M2000).lower(prog)
    total = Engine(M2000).run(prog).total_cycles
    assert critical_path(tasks) <= total <= sum(t.cycles for t in tasks)


def test_uncollapsed_program_has_contention_and_overlap():
    """Without collapsing, the bounds are strict: copies queue for the shared host link (so the
    run is longer than the critical path) and the IPUs overlap (so it is shorter than serial)."""
    prog = program(False, False)
    tasks = Engine(M2000).lower(prog)
    total = Engine(M2000).run(prog).total_cycles
    assert critical_path(tasks) < total < sum(t.cycles for t in tasks)
    # the task graph: one task per leaf per iteration, each after the previous one on its IPUs
    assert len(tasks) == 4 * (19 - 1 + 3 * 5)
    assert all(d < i for i, t in enumerate(tasks) for d in t.deps)


# --- collapse is exact -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference_run(mlp_executable):
    return run_program(mlp_executable, program(False, False))


@pytest.mark.parametrize("collapse_outer, collapse_inner", ALL_VARIANTS[:-1])
def test_collapsed_repeat_equals_iteration_by_iteration(mlp_executable, reference_run,
                                                        collapse_outer, collapse_inner):
    run = run_program(mlp_executable, program(collapse_outer, collapse_inner))
    assert run.cycle_count == reference_run.cycle_count
    pd.testing.assert_frame_equal(sorted_trace(run), sorted_trace(reference_run))
    pd.testing.assert_frame_equal(run.breakdown, reference_run.breakdown)
    assert run.perf_counters == reference_run.perf_counters


def test_collapsed_repeat_is_one_task_of_count_times_its_body():
    eng = Engine(M2000)
    one = eng.run(Sequence([body("step", True)])).total_cycles
    tasks = eng.lower(program(True, True, count=5))
    assert len(tasks) == 1 and tasks[0].cycles == 5 * one
    assert Engine(M2000).run(program(True, True, count=5)).total_cycles == 5 * one


# --- breakdown -------------------------------------------------------------------------------
@pytest.mark.parametrize("collapse_outer, collapse_inner", ALL_VARIANTS)
def test_breakdown_adds_up_to_total_on_every_ipu(mlp_executable, collapse_outer, collapse_inner):
    prog = program(collapse_outer, collapse_inner)
    run = run_program(mlp_executable, prog)
    bd = run.breakdown
    assert list(bd.index) == [0, 1, 2, 3]
    assert (bd.sum(axis=1) == run.cycle_count).all()
    assert (bd >= 0).all().all()
    # busy cycles are exactly the cycles of the trace rows on the IPU (a sync, copy or
    # collective has a row on every IPU it occupies; the host's side of a stream has none)
    occupies = names_to_ipus(prog)
    trace = run.trace
    assert all(ipu in occupies[name] for ipu, name in zip(trace["ipu"], trace["name"]))
    for ipu in range(4):
        mine = trace[(trace["ipu"] == ipu) & (trace["kind"] != "host_prefetch")]
        assert bd.loc[ipu].drop("idle").sum() == mine["cycles"].sum()
        assert bd.loc[ipu, "host_io"] == mine.loc[mine["kind"] == "host_io", "cycles"].sum()
        assert bd.loc[ipu, "inter_ipu"] == mine.loc[mine["kind"] == "inter_ipu", "cycles"].sum()
    # the timeline itself (busy + idle) adds up the same way
    tl = run.timeline
    for ipu in range(4):
        busy = sum(tl.busy[ipu].values())
        assert 0 < busy <= tl.total_cycles
        assert busy + bd.loc[ipu, "idle"] == tl.total_cycles


def test_breakdown_of_a_compiled_model_adds_up():
    run = sim.simulate(models.get("bert-base", micro_batch=4, num_layers=2), "ipu-mk2",
                       sim.Options().deviceIterations(2))
    assert (run.breakdown.sum(axis=1) == run.cycle_count).all()
    assert (run.breakdown >= 0).all().all()
    assert run.breakdown.loc[0, "host_io"] > 0


@pytest.mark.parametrize("options", ["pipeline", "io tiles", "phased"])
def test_pass_breakdown_splits_the_same_cycles_by_pass(options):
    """Run.pass_breakdown partitions each IPU's cycles by what it runs and adds up to the run's
    cycles: a training pipeline's ops by forward, recompute, backward, stash, restore and weight
    update (the op trace's spans, its repeats counted), beside the program's syncs, IO and copies as
    the category breakdown counts them (a host-IO or inter-IPU column equal to its own); an inference
    run with IO tiles its forward and the compute tiles' exchanges with the IO tiles; phased
    execution likewise."""
    from sim.results.run import PASS_COLUMNS
    o = sim.Options()
    if options == "pipeline":
        g = models.get("bert-base", micro_batch=2, num_layers=4, layers_per_ipu=[0, 2, 1, 1])
        o.Training.gradientAccumulation(16)
        run = sim.simulate(g, "ipu-m2000", o, training=True)
    elif options == "io tiles":  # every stream overlapped on 32 IO tiles, as PopRT runs ResNet-50
        g = models.get("resnet50", micro_batch=2, with_loss=False)
        for name in [*g.inputs, *g.outputs]:
            g.overlap[name] = int(OverlapMode.OverlapDeviceIterationLoop)
        o.deviceIterations(8).TensorLocations.numIOTiles(32)
        run = sim.simulate(g, "ipu-mk2", o.setExecutionStrategy(ShardedExecution()), training=False)
    else:
        g = models.get("bert-base", micro_batch=2, num_layers=2)
        phases = [Phase(Stage(b).ipu(0)) for b in ("embedding", "layer0", "layer1", "head")]
        run = sim.simulate(g, "ipu-m2000", o.setExecutionStrategy(SerialPhasedExecution(*phases)),
                           training=True)
    pb = run.pass_breakdown
    assert list(pb.columns) == list(PASS_COLUMNS) and list(pb.index) == list(run.breakdown.index)
    assert (pb.sum(axis=1) == run.cycle_count).all() and (pb >= 0).all().all()
    for c in ("host_io", "inter_ipu", "collective", "idle"):
        assert (pb[c] == run.breakdown[c]).all()
    if options == "pipeline":
        middle = pb.loc[2]
        assert min(middle[["forward", "recompute", "backward", "stash", "restore", "weight update"]]) > 0
        assert middle["backward"] > middle["forward"] > 0 and middle["recompute"] > 0
    elif options == "io tiles":
        assert pb.loc[0, "forward"] > 0 and pb.loc[0, "io-tile copy"] > 0
        assert pb.loc[0, ["recompute", "backward", "weight update"]].sum() == 0
    else:
        assert pb[["forward", "backward", "weight update"]].gt(0).all(axis=None)
    assert run.summary()["pass_breakdown"]["0"] == {k: int(v) for k, v in pb.loc[0].items()}


# --- determinism -----------------------------------------------------------------------------
def test_two_runs_of_one_compile_are_identical():
    ex = sim.compile(models.get("bert-base", micro_batch=4, num_layers=2), "ipu-mk2",
                     sim.Options().deviceIterations(3))
    a, b = sim.run_executable(ex), sim.run_executable(ex)
    assert a.cycle_count == b.cycle_count
    pd.testing.assert_frame_equal(a.trace, b.trace)
    pd.testing.assert_frame_equal(a.op_trace(), b.op_trace())
    assert a.perf_counters == b.perf_counters


def test_hand_built_program_is_deterministic(mlp_executable):
    a = run_program(mlp_executable, program(False, True))
    b = run_program(mlp_executable, program(False, True))
    assert a.cycle_count == b.cycle_count
    pd.testing.assert_frame_equal(a.trace, b.trace)


def test_a_run_is_the_same_whatever_the_processes_hash_seed():
    """String hashing is randomised per process (PYTHONHASHSEED), so an order taken from a set or a hash
    would change from one process to the next. A replicated pipeline trained with LAMB (stages, stashes,
    inter-IPU copies, the gradient collectives, the optimizer step) gives the same summary, bit for bit,
    in two processes of different seeds: everything but the simulator's own wall time."""
    args = ["run", "--model", "bert-base", "--system", "ipu-pod16", "--training", "--replicas", "2",
            "--gradient-accumulation", "10", "--param", "num_layers=4", "--param", "layers_per_ipu=[1,1,1,1]",
            "--param", "micro_batch=2", "--optimizer", "lamb", "--json"]
    summaries = []
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        summary = json.loads(out.stdout)
        del summary["simulator"]["wall_seconds"]
        summaries.append(summary)
    assert summaries[0] == summaries[1]
    assert summaries[0]["breakdown"]["0"]["collective"] > 0 and summaries[0]["breakdown"]["1"]["inter_ipu"] > 0


# --- device iterations -----------------------------------------------------------------------
@pytest.mark.parametrize("training", [False, True])
def test_doubling_device_iterations_doubles_cycles_when_compute_bound(training):
    """Synthetic data: no host IO, so every device iteration is the same compute.

    Tolerance 1 %: a call may carry a fixed cost that does not repeat per iteration (program
    launch, the final host sync); today the device-iteration loop is exactly count x body.
    """
    graph = models.get("bert-base", micro_batch=4, num_layers=2)
    cycles = {}
    for di in (2, 4):
        run = sim.simulate(graph, "ipu-mk2", sim.Options().deviceIterations(di).enableSyntheticData(True),
                           training=training)
        assert run.breakdown.loc[0, "host_io"] == 0
        assert run.breakdown.loc[0, "compute"] > 0
        cycles[di] = run.cycle_count
    assert cycles[4] == pytest.approx(2 * cycles[2], rel=0.01)


# --- exact timings ---------------------------------------------------------------------------
def test_syncs_over_subsets_wait_for_their_slowest_ipu(mlp_executable):
    prog = Sequence([
        compute(0, "c0", [1000]), compute(1, "c1", [3000]), compute(2, "c2", [500]),
        compute(3, "c3", [2000]),
        Sync((0, 1), "external", 40, "sync01"),
        Sync((2, 3), "external", 70, "sync23"),
        compute(2, "c2b", [100]),
        IpuCopy(((0, 1, 0),), "copy01"),
        Sync((0, 1, 2, 3), "external", 90, "sync_all"),
    ])
    run = run_program(mlp_executable, prog)
    assert sorted(run.trace.loc[run.trace["name"] == "sync_all", "ipu"]) == [0, 1, 2, 3]  # a row per IPU
    rows = run.trace.drop_duplicates("name").set_index("name")
    assert tuple(rows.loc["sync01", ["start", "end"]]) == (3000, 3040)
    assert tuple(rows.loc["sync23", ["start", "end"]]) == (2000, 2070)
    assert tuple(rows.loc["c2b", ["start", "end"]]) == (2070, 2170)
    copy_end = 3040 + M2000.ipu_link.latency_cycles  # 0 bytes: latency only
    assert tuple(rows.loc["copy01", ["start", "end"]]) == (3040, copy_end)
    assert tuple(rows.loc["sync_all", ["start", "end"]]) == (copy_end, copy_end + 90)
    assert run.cycle_count == copy_end + 90
    # IPU 2 waited for IPU 3 at sync23 and for everyone at sync_all: that is idle, not work
    assert run.breakdown.loc[2, "idle"] == run.cycle_count - (500 + 70 + 100 + 90)


def test_merged_ipu_copy_lasts_its_busiest_link_direction(mlp_executable):
    link = M2000.ipu_link
    one_way = link.latency_cycles + c((1 << 20) / link.bytes_per_s)
    prog = Sequence([IpuCopy(((0, 1, 1 << 20), (1, 0, 1 << 19), (2, 3, 1 << 20)), "merged")])
    assert Engine(M2000).lower(prog)[0].cycles == one_way
    assert run_program(mlp_executable, prog).cycle_count == one_way
    # two transfers on one link direction add up
    same_way = Sequence([IpuCopy(((0, 1, 1 << 20), (0, 1, 1 << 20)), "twice")])
    assert Engine(M2000).lower(same_way)[0].cycles == link.latency_cycles + c((2 << 20) / link.bytes_per_s)


def _stream_cycles(direction: str, nbytes: int, host_sync: bool) -> int:
    """A stream copy by hand from the config: host sync + latency + bytes over each rate."""
    hl = M2000.host_link
    fixed = (hl.host_sync_cycles if host_sync else 0) + c(hl.latency_s)
    device = c(nbytes / hl.gateway_to_ipu_bytes_per_s)
    if direction == "to_ipu":
        return fixed + c(nbytes / hl.host_prepare_bytes_per_s) + c(nbytes / hl.host_to_ipu_bytes_per_s) + device
    return fixed + device + c(nbytes / hl.ipu_to_host_bytes_per_s)


@pytest.mark.parametrize("direction", ["to_ipu", "from_ipu"])
@pytest.mark.parametrize("host_sync", [True, False])
@pytest.mark.parametrize("nbytes", [0, 4, 123_457, 40_004_000])
def test_stream_copy_cycles_are_its_phases(mlp_executable, direction, host_sync, nbytes):
    copy = StreamCopy(2, "s", direction, nbytes, 0, host_sync=host_sync)
    expected = _stream_cycles(direction, nbytes, host_sync)
    assert sum(cyc for _, cyc in Engine(M2000).stream_phases(copy)) == expected
    run = run_program(mlp_executable, Sequence([copy]))
    assert run.cycle_count == expected
    assert run.trace.loc[0, "cycles"] == expected
    assert run.breakdown.loc[2, "host_io"] == expected


def test_stream_copies_share_one_host_link_fifo(mlp_executable):
    """Four IPUs behind one link, filled by four host threads: the fills run in parallel, then the
    copies queue for the link."""
    assert M2000.host_link.ipus_per_link == 4
    hl, n = M2000.host_link, 1_000_000
    fill = hl.host_sync_cycles + c(hl.latency_s) + c(n / hl.host_prepare_bytes_per_s)
    wire, device = c(n / hl.host_to_ipu_bytes_per_s), c(n / hl.gateway_to_ipu_bytes_per_s)
    prog = Sequence([StreamCopy(i, f"in{i}", "to_ipu", n, 0, host_thread=(i, 0)) for i in range(4)])
    run = run_program(mlp_executable, prog)
    ends = sorted(run.trace["end"])
    assert ends == [fill + k * wire + device for k in (1, 2, 3, 4)]
    assert (run.trace["start"] == 0).all()
    # filled by one thread (StreamCopy's default, one process's), the fills take turns; a fill is
    # slower than its wire transfer, so each copy finds the link free
    thread_fill = c(hl.latency_s) + c(n / hl.host_prepare_bytes_per_s)
    assert thread_fill > wire
    prog = Sequence([StreamCopy(i, f"in{i}", "to_ipu", n, 0) for i in range(4)])
    ends = sorted(run_program(mlp_executable, prog).trace["end"])
    assert ends == [k * thread_fill + wire + hl.host_sync_cycles + device for k in (1, 2, 3, 4)]
    # the other direction is a separate resource: an IPU->host copy does not queue behind them
    mixed = Sequence([StreamCopy(0, "in", "to_ipu", n, 0), StreamCopy(1, "out", "from_ipu", n, 0)])
    run = run_program(mlp_executable, mixed)
    assert run.cycle_count == max(_stream_cycles("to_ipu", n, True), _stream_cycles("from_ipu", n, True))


def test_ipus_behind_different_host_links_do_not_contend():
    pod16 = sim.load_system("ipu-pod16")
    eng = Engine(pod16)
    assert eng.host_link_of(0) != eng.host_link_of(4)
    n = 1_000_000
    alone = eng.run(Sequence([StreamCopy(0, "a", "to_ipu", n, 0)])).total_cycles
    # each filled by its own host process, so that only the links can make them wait
    apart = eng.run(Sequence([StreamCopy(0, "a", "to_ipu", n, 0),
                              StreamCopy(4, "b", "to_ipu", n, 0, host_thread=(1, 0))])).total_cycles
    shared = eng.run(Sequence([StreamCopy(0, "a", "to_ipu", n, 0),
                               StreamCopy(1, "b", "to_ipu", n, 0, host_thread=(1, 0))])).total_cycles
    assert apart == alone
    assert shared == alone + math.ceil(n / pod16.host_link.host_to_ipu_bytes_per_s * pod16.ipu.clock_hz)


def test_copy_between_pods_crosses_a_gw_link():
    """An IPU copy that leaves the POD is priced with the GW-Link's latency and bandwidth."""
    system = sim.load_system("ipu-pod128")
    engine = Engine(system)
    nbytes = 64 * 2**20
    inside = engine.ipu_copy_cycles(IpuCopy(((0, 1, nbytes),)))
    across = engine.ipu_copy_cycles(IpuCopy(((0, 64, nbytes),)))
    gw, link = system.gw_link, system.ipu_link
    assert inside == link.latency_cycles + system.seconds_to_cycles(nbytes / link.bytes_per_s)
    assert across == gw.latency_cycles + system.seconds_to_cycles(nbytes / gw.bytes_per_s)
