"""Collectives: algorithm costs against closed forms, topology (GW-Links, hierarchical rings),
replica groups (PopXL / PopTorch semantics), the engine's timing and link contention, and the
``ipusim collective`` command."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from sim.cli.collective import main as collective_main
from sim.cli.collective import parse_bytes
from sim.results.collective import run_collective
from sim.schedule.collectives import (bus_factor, collective_item, comm_group,
                                      comm_group_assignment, groups_of, partition_sync, plan_collective,
                                      replica_group, replica_grouping)
from sim.engine import Engine
from sim.validation import GCL_CROSSOVERS, gcl_crossover
from sim.errors import OptionsError
from sim.hardware.system import load_system
from sim.options import CommGroupType
from sim.program import Compute, IpuCopy, OpSteps, Sequence
from sim.hardware.topology import hops, route

MiB = 2**20


@pytest.fixture(scope="module")
def pod16():
    return load_system("ipu-pod16")


@pytest.fixture(scope="module")
def pod128():
    return load_system("ipu-pod128")


# --- ring all-reduce against the closed form ------------------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_ring_all_reduce_matches_bandwidth_formula(pod16, n):
    """2(N-1)/N * S / link bandwidth + N-1 reduce-scatter and N-1 all-gather steps' fixed time,
    from the config, and each step's sync over the N IPUs, within 5 %."""
    S = 64 * MiB
    link = pod16.ipu_link
    steps = 2 * (n - 1)
    sync_s = pod16.cycles_to_seconds(partition_sync(pod16, n))
    expected_s = (2 * (n - 1) / n * S / link.bytes_per_s
                  + (n - 1) * (link.reduce_step_s + link.gather_step_s + 2 * sync_s))
    result = run_collective(pod16, "all_reduce", S, list(range(n)), "ring")
    assert result.plan.algorithm == "ring"
    assert result.plan.steps == steps
    assert result.seconds == pytest.approx(expected_s, rel=0.05)
    # bus bandwidth (NCCL convention) of a bandwidth-bound ring is close to the link's
    assert result.bus_bandwidth == pytest.approx(link.bytes_per_s, rel=0.05)


def test_bidirectional_ring_halves_the_time_of_large_tensors(pod16):
    ring = plan_collective(pod16, "all_reduce", 256 * MiB, list(range(16)), "ring")
    bidi = plan_collective(pod16, "all_reduce", 256 * MiB, list(range(16)), "bidirectional_ring")
    assert bidi.cycles == pytest.approx(ring.cycles / 2, rel=0.02)
    assert plan_collective(pod16, "all_reduce", 256 * MiB, list(range(16))).algorithm == "bidirectional_ring"
    # with two members the ring already uses both directions: nothing to gain
    two = [plan_collective(pod16, "all_reduce", 64 * MiB, [0, 1], a).cycles for a in ("ring", "bidirectional_ring")]
    assert two[0] == two[1]


@pytest.mark.parametrize("op,steps", [("reduce_scatter", 15), ("all_gather", 15), ("all_to_all", 15)])
def test_ring_reduce_scatter_and_all_gather_move_half_of_all_reduce(pod16, op, steps):
    ar = plan_collective(pod16, "all_reduce", 64 * MiB, list(range(16)), "ring")
    one = plan_collective(pod16, op, 64 * MiB, list(range(16)), "ring")
    assert one.steps == steps
    # an all-reduce is a reduce-scatter then an all-gather; all-to-all steps only copy, as gathers do
    rs, ag = (plan_collective(pod16, o, 64 * MiB, list(range(16)), "ring") for o in ("reduce_scatter", "all_gather"))
    assert rs.cycles + ag.cycles == ar.cycles
    assert one.cycles == (rs.cycles if op == "reduce_scatter" else ag.cycles)
    # a reduce-scatter step costs reduce_step_s - gather_step_s more than an all-gather step
    extra = pod16.seconds_to_cycles(pod16.ipu_link.reduce_step_s) - pod16.seconds_to_cycles(pod16.ipu_link.gather_step_s)
    assert rs.phases[0][1] - ag.phases[0][1] == extra


def test_small_tensor_is_latency_bound_and_auto_picks_gcl_s_broadcast(pod16):
    members = list(range(16))
    link = pod16.ipu_link
    ring = plan_collective(pod16, "all_reduce", 1024, members, "ring")
    # forced ring: 15 reduce-scatter and 15 all-gather steps, each its fixed time and its sync plus 64 bytes
    fixed = (15 * pod16.seconds_to_cycles(link.reduce_step_s) + 15 * pod16.seconds_to_cycles(link.gather_step_s)
             + 30 * partition_sync(pod16, 16))
    assert ring.cycles == pytest.approx(fixed, rel=0.01)
    # GCL: "broadcast the tensor to all replicas and do the reduce locally; the fastest option for
    # small tensors": every tensor goes half way round the ring each way, 8 steps of the whole KiB
    auto = plan_collective(pod16, "all_reduce", 1024, members)
    assert auto.algorithm == "broadcast" and auto.steps == 8 and auto.both_directions
    assert auto.cycles < ring.cycles / 2
    # latency-dominated: the 1 KiB payload adds less than 10 % to the same steps with 1 byte
    assert auto.cycles <= 1.1 * plan_collective(pod16, "all_reduce", 1, members, "broadcast").cycles
    # large tensors: the bandwidth-optimal rings win again
    assert plan_collective(pod16, "all_reduce", 64 * MiB, members).algorithm.endswith("ring")
    with pytest.raises(OptionsError, match="applies to"):
        plan_collective(pod16, "reduce_scatter", 1024, members, "broadcast")


@pytest.mark.parametrize("n", [4, 7, 8, 16])
def test_meet_in_the_middle_sends_n_fragments_half_way_round_each_way(pod16, n):
    """GCL's meet_in_middle_ring: N fragments of S/N, half of each member's sent clockwise and half
    anticlockwise, meeting half way: floor(N/2) steps per reduce-scatter or all-gather."""
    members, S = list(range(n)), 8 * MiB
    rs = plan_collective(pod16, "reduce_scatter", S, members, "meet_in_middle")
    ring = plan_collective(pod16, "reduce_scatter", S, members, "ring")
    assert rs.steps == n // 2 and rs.both_directions
    # a step carries one fragment each way, the ring's chunk: same step time, fewer steps
    assert rs.phases[0][1] == ring.phases[0][1]
    ar = plan_collective(pod16, "all_reduce", S, members, "meet_in_middle")
    ag = plan_collective(pod16, "all_gather", S, members, "meet_in_middle")
    assert ar.steps == 2 * (n // 2) and ar.cycles == rs.cycles + ag.cycles


def test_every_step_waits_for_a_sync_of_the_whole_partition(pod128):
    """A collective over two replicas of a 128-IPU program waits, at each of its steps, for a sync
    over all 128 IPUs (the poplibs test model: 40 + 40 x 128 / 4 cycles), not over its two; the
    128 IPUs span both POD64s, so the sync also crosses the GW-Links (their 5,000-cycle latency)."""
    pair = [0, 1]
    alone = plan_collective(pod128, "all_reduce", 4096, pair, "ring")
    in_pod128 = plan_collective(pod128, "all_reduce", 4096, pair, "ring", partition_ipus=128)
    assert (partition_sync(pod128, 2), partition_sync(pod128, 64)) == (60, 680)  # within one POD64
    assert partition_sync(pod128, 128) == 1320 + pod128.gw_link.latency_cycles == 6320
    assert alone.steps == in_pod128.steps == 2
    assert in_pod128.cycles - alone.cycles == 2 * (6320 - 60)
    # the partition never counts fewer IPUs than the members
    assert plan_collective(pod128, "all_reduce", 4096, pair, "ring", partition_ipus=1).cycles == alone.cycles


def _poplibs_method(op: str, nbytes: int, ranks: int) -> str:
    """poplibs' pick{ReduceScatter,AllGather}Method for one IPU per replica on a ring: meet-in-the-middle
    below the measured crossover of the replica count's range, and always above 16 replicas."""
    limits = GCL_CROSSOVERS[op]
    bound = next((limits[k] for k in sorted(limits) if ranks <= k), None)
    return "meet_in_middle" if bound is None or nbytes < bound else "bidirectional_ring"


def test_the_fitted_step_times_put_the_crossovers_near_poplibs():
    """The step times are the median of the six thresholds' values: at 4 replicas the model crosses
    within 2 % of poplibs, at 8 and 16 within a factor of 2 (a threshold covers 5-8 or 9-16)."""
    for op, by_ranks in GCL_CROSSOVERS.items():
        assert gcl_crossover(op, 4) == pytest.approx(by_ranks[4], rel=0.02)
        for ranks in (8, 16):
            assert 0.5 < gcl_crossover(op, ranks) / by_ranks[ranks] < 2


def test_auto_picks_what_poplibs_measured_faster():
    """The cheapest method by the model is poplibs' on every (op, ranks, size) point of the grid:
    the step times (configs/ipu-mk2.toml reduce_step_s, gather_step_s) were fitted to these
    crossovers, 4, 8 and 16 replicas, and carry over to 32 and 64 (meet-in-the-middle throughout).
    With the link latency alone as the step's fixed cost (0.75 us) the model would turn to the ring
    pair at 2-8x smaller tensors on 17 of the 160 points."""
    pod64 = load_system("ipu-pod64")
    points = [(op, n, 2 ** e) for op in ("reduce_scatter", "all_gather") for n in (4, 8, 16, 32, 64)
              for e in range(12, 28)]
    differ = [(op, n, nb) for op, n, nb in points
              if plan_collective(pod64, op, nb, list(range(n))).algorithm != _poplibs_method(op, nb, n)]
    assert differ == []


# --- across PODs ------------------------------------------------------------------------------

def test_ring_across_gw_links_is_slower_by_the_link_speed_ratio(pod128):
    """Bandwidth-dominated (1 GiB): a 16-member ring with two edges between the POD64s of an
    IPU-POD128 against one inside a POD. The configs give 25 GB/s GW-Links (2 x 100 Gbit/s
    per chassis) and 26.45 GB/s IPU-Links, so the ratio is the config's 1.058, within 1 %."""
    S = 1 << 30
    inside = list(range(0, 16))
    across = list(range(56, 72))  # chassis 14-15 of POD 0 and 16-17 of POD 1
    assert {pod128.pod_of(m) for m in inside} == {0} and {pod128.pod_of(m) for m in across} == {0, 1}
    t_in = run_collective(pod128, "all_reduce", S, inside, "ring").seconds
    t_across = run_collective(pod128, "all_reduce", S, across, "ring").seconds
    ratio = pod128.ipu_link.bytes_per_s / pod128.gw_link.bytes_per_s
    assert ratio == pytest.approx(1.058, abs=0.001)
    assert t_across > t_in
    assert t_across / t_in == pytest.approx(ratio, rel=0.01)


def test_hierarchical_beats_the_flat_ring_across_pods_for_large_tensors(pod128):
    members = list(range(128))
    S = 256 * MiB
    flat = plan_collective(pod128, "all_reduce", S, members, "ring")
    bidi = plan_collective(pod128, "all_reduce", S, members, "bidirectional_ring")
    hier = plan_collective(pod128, "all_reduce", S, members, "hierarchical")
    assert hier.cycles < flat.cycles / 1.8
    assert hier.cycles < bidi.cycles
    # reduce-scatter in each POD (meet-in-the-middle: 32 steps), the all-reduce across the two PODs
    # (a reduce-scatter step and an all-gather step), all-gather in each POD
    assert [n for n, _ in hier.phases] == [32, 1, 1, 32]
    assert plan_collective(pod128, "all_reduce", S, members).algorithm == "hierarchical"
    with pytest.raises(OptionsError, match="one POD"):
        plan_collective(pod128, "all_reduce", S, list(range(64)), "hierarchical")


def test_concurrent_collectives_share_the_gw_links(pod128):
    members = list(range(0, 128, 4))  # one IPU per chassis, both PODs
    one = plan_collective(pod128, "all_reduce", 256 * MiB, members, "ring", concurrent=1)
    four = plan_collective(pod128, "all_reduce", 256 * MiB, members, "ring", concurrent=4)
    assert four.cycles > 3 * one.cycles


# --- topology -----------------------------------------------------------------------------------

def test_routes_follow_the_torus_of_chassis():
    pod64 = load_system("ipu-pod64")
    assert hops(pod64, 0, 1) == 1
    assert hops(pod64, 0, 60) == 1  # first and last chassis of a POD are neighbours
    assert route(pod64, 0, 60) == [(0, 60)]
    assert route(pod64, 1, 13) == [(1, 5), (5, 9), (9, 13)]
    assert len(route(pod64, 0, 32)) == hops(pod64, 0, 32) == 8
    assert route(load_system("ipu-pod128"), 63, 64) == [(63, 64)]  # GW-Link: one edge


def test_a_partition_of_part_of_a_pod_closes_its_ring_as_a_ladder():
    """A partition of 16 IPUs (4 chassis) in a POD64 closes its ring at one hop, as on a POD16;
    in a POD128, a partition of 96 IPUs holds the second POD's first 8 chassis."""
    pod16, pod64, pod128 = (load_system(f"ipu-pod{n}") for n in (16, 64, 128))
    assert hops(pod64, 0, 12) == 3 and hops(pod64, 0, 12, partition_ipus=16) == 1 == hops(pod16, 0, 12)
    assert route(pod64, 12, 0, partition_ipus=16) == [(12, 0)]
    assert hops(pod64, 0, 32, partition_ipus=64) == 8
    assert hops(pod128, 64, 92, partition_ipus=96) == 1 and hops(pod128, 64, 92) == 7
    # so a collective over 16 replicas costs the same on both systems, and 32 replicas cost less than 64
    for nbytes in (1536, 16 * MiB):
        on = {name: plan_collective(system, "all_reduce", nbytes, list(range(r)), partition_ipus=r).cycles
              for name, system, r in (("pod16", pod16, 16), ("pod64", pod64, 16), ("pod64 x32", pod64, 32),
                                      ("pod64 x64", pod64, 64))}
        assert on["pod16"] == on["pod64"] and on["pod64 x32"] < on["pod64 x64"]


# --- replica groups ---------------------------------------------------------------------------

POPXL_EXAMPLES = [  # PopXL ReplicaGrouping.assignment docstring, replication factor 8
    ((1, 8), [0, 0, 0, 0, 0, 0, 0, 0]),
    ((1, 1), [0, 1, 2, 3, 4, 5, 6, 7]),
    ((1, 2), [0, 0, 1, 1, 2, 2, 3, 3]),
    ((2, 2), [0, 1, 0, 1, 2, 3, 2, 3]),
    ((1, 4), [0, 0, 0, 0, 1, 1, 1, 1]),
    ((2, 4), [0, 1, 0, 1, 0, 1, 0, 1]),
]


@pytest.mark.parametrize("args,assignment", POPXL_EXAMPLES)
def test_popxl_replica_grouping_assignment(args, assignment):
    assert replica_grouping(8, *args) == assignment


def test_popxl_default_group_size_and_errors():
    assert replica_grouping(8, 2) == [0, 1] * 4  # group size defaults to replicas / stride
    assert replica_grouping(8) == [0] * 8
    assert groups_of(replica_grouping(8, 2, 2)) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    with pytest.raises(OptionsError, match="divide"):
        replica_grouping(8, 3, 2)
    with pytest.raises(OptionsError):
        replica_grouping(8, 0, 2)


@pytest.mark.parametrize("kind,size,groups", [
    ("consecutive", 2, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("consecutive", 4, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("orthogonal", 2, [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("orthogonal", 4, [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("all", None, [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("none", None, [[r] for r in range(8)]),
])
def test_comm_group_types_with_8_replicas(kind, size, groups):
    assert groups_of(comm_group_assignment(8, kind, size)) == groups
    for g in groups:
        for r in g:
            assert replica_group(r, 8, kind, size) == g


def test_comm_group_accepts_the_poptorch_enum_and_maps_to_popxl():
    assert comm_group(8, CommGroupType.Orthogonal, 2) == (4, 2)
    assert comm_group(8, CommGroupType.Consecutive, 4) == (1, 4)
    assert comm_group(8, CommGroupType.All, 3) == (1, 8)  # size ignored
    assert comm_group(8, CommGroupType.NoGrouping) == (1, 1)
    assert comm_group_assignment(16, CommGroupType.Orthogonal, 4) == [r % 4 for r in range(16)]
    with pytest.raises(OptionsError, match="divides"):
        comm_group(8, "consecutive", 3)


# --- the engine -------------------------------------------------------------------------------

@pytest.mark.parametrize("system,n,algorithm,nbytes", [
    ("ipu-pod16", 16, "ring", 64 * MiB), ("ipu-pod16", 16, "auto", 1024), ("ipu-pod16", 8, "meet_in_middle", MiB),
    ("ipu-pod64", 64, "bidirectional_ring", 64 * MiB), ("ipu-pod128", 128, "hierarchical", 64 * MiB),
])
def test_engine_time_equals_the_plan_when_uncontended(system, n, algorithm, nbytes):
    result = run_collective(system, "all_reduce", nbytes, list(range(n)), algorithm)
    assert result.cycles == result.plan.cycles


def _wait(ipu: int, cycles: int) -> Compute:
    z = np.zeros(1, dtype=np.int64)
    return Compute(ipu, "wait", OpSteps(("wait",), ("custom",), np.array([cycles]), z, z, np.zeros(1), z))


def test_ipu_copy_on_a_ring_link_queues_behind_a_step():
    """Members 0 and 32 of an IPU-POD64 are 8 chassis apart: the ring edge 0 -> 32 passes the
    link 8 -> 12. A copy 8 -> 12 issued in the middle of the first step waits for that step to
    end, and the collective's next step waits for the copy."""
    pod64 = load_system("ipu-pod64")
    item, plan = collective_item(pod64, "all_reduce", 64 * MiB, [0, 32], "ring")
    assert ("ipu_link", 8, 12) in item.links
    (_, step), _ = plan.phases  # a reduce-scatter step, then an all-gather step
    copy = IpuCopy(((8, 12, MiB),), "copy")
    engine = Engine(pod64)
    copy_cycles = engine.ipu_copy_cycles(copy)
    timeline = engine.run(Sequence([item, _wait(8, step // 2), copy]))
    rows = {name: (int(s), int(e)) for rec in timeline.records for name, s, e in zip(rec.name, rec.start, rec.end)}
    assert rows["copy"] == (step, step + copy_cycles)  # after step 1, not after the collective
    assert rows[item.name][1] == plan.cycles + copy_cycles
    # a copy on a link the collective does not use runs alongside
    free = Engine(pod64).run(Sequence([item, _wait(9, step // 2), IpuCopy(((9, 13, MiB),), "copy")]))
    assert free.total_cycles == plan.cycles


# --- ipusim collective ------------------------------------------------------------------------

def test_parse_bytes():
    assert parse_bytes("64MiB") == 64 * MiB
    assert parse_bytes("1GiB") == 1 << 30
    assert parse_bytes("2KiB") == 2048
    assert parse_bytes("100MB") == 100_000_000
    assert parse_bytes("1.5GB") == 1_500_000_000
    assert parse_bytes("3kb") == 3000
    assert parse_bytes("4096") == 4096
    for bad in ("64XB", "", "MiB", "-1", "0", "0.5"):
        with pytest.raises(Exception):
            parse_bytes(bad)


def test_cli_json_is_the_engine_run(capsys):
    argv = ["--system", "ipu-pod64", "--op", "all-reduce", "--bytes", "64MiB", "--replicas", "64", "--json"]
    assert collective_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("seconds", "algorithm", "algorithm_bandwidth", "bus_bandwidth", "op", "bytes", "replicas",
                "steps", "cycles"):
        assert key in out
    result = run_collective("ipu-pod64", "all_reduce", 64 * MiB, list(range(64)))
    assert out["cycles"] == result.cycles and out["algorithm"] == result.plan.algorithm
    assert out["bytes"] == 64 * MiB and out["replicas"] == 64 and out["op"] == "all-reduce"
    assert out["algorithm_bandwidth"] == pytest.approx(out["bytes"] / out["seconds"])
    assert out["bus_bandwidth"] == pytest.approx(out["algorithm_bandwidth"] * 2 * 63 / 64)


def test_cli_steps_wait_for_a_sync_of_every_replicas_ipus(capsys, pod128):
    """Two replicas of 64 IPUs on an IPU-POD128: the collective runs between IPUs 0 and 64, and each of
    its steps waits for a sync of all 128 IPUs, across the GW-Links (partition_sync)."""
    def cycles(k):
        argv = ["--system", "ipu-pod128", "--op", "all-reduce", "--bytes", "1KiB", "--replicas", "2",
                "--ipus-per-replica", str(k), "--algorithm", "ring", "--json"]
        assert collective_main(argv) == 0
        return json.loads(capsys.readouterr().out)
    apart, together = cycles(64), cycles(1)
    assert apart["steps"] == together["steps"] == 2
    assert apart["cycles"] == run_collective(pod128, "all_reduce", 1024, [0, 64], "ring", partition_ipus=128).cycles
    # the members' link aside, the steps' syncs: 128 IPUs over two PODs against 2 IPUs
    assert partition_sync(pod128, 128) - partition_sync(pod128, 2) == 6260


def test_cli_text_and_forced_algorithm(capsys):
    argv = ["--system", "ipu-pod16", "--op", "reduce-scatter", "--bytes", "16MB", "--replicas", "16",
            "--algorithm", "ring"]
    assert collective_main(argv) == 0
    out = capsys.readouterr().out
    assert "ring" in out and " s " in out and "algorithm bandwidth" in out and "bus bandwidth" in out
    assert bus_factor("reduce-scatter", 16) == pytest.approx(15 / 16)


@pytest.mark.parametrize("argv,message", [
    (["--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "64MiB", "--replicas", "64"], "64 replicas.*16 IPUs"),
    (["--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "64 lots", "--replicas", "4"], "--bytes"),
    (["--system", "ipu-pod16", "--op", "all-sum", "--bytes", "1MiB", "--replicas", "4"], "unknown collective"),
    (["--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "1MiB", "--replicas", "0"], "--replicas"),
    (["--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "1MiB", "--replicas", "1"], "at least 2"),
    (["--system", "no-such-pod", "--op", "all-reduce", "--bytes", "1MiB", "--replicas", "4"], "unknown system"),
    (["--system", "ipu-pod16", "--op", "all-gather", "--bytes", "1MiB", "--replicas", "4",
      "--algorithm", "hierarchical"], "does not apply"),
    (["--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "1MiB"], "required"),
])
def test_cli_bad_input_exits_2_with_a_clear_error(capsys, argv, message):
    assert collective_main(argv) == 2
    assert re.search(message, capsys.readouterr().err)


def test_python_dash_m_runs_the_cli():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "sim.cli.collective", "--system", "ipu-pod16", "--op",
                          "all-gather", "--bytes", "1KiB", "--replicas", "4", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["op"] == "all-gather"


def test_cli_on_a_config_of_ones_own(capsys, tmp_path):
    """A POD16 with a third of its chassis missing (12 IPUs) from a file that extends ipu-pod16: reported by
    its own name, not its parent's, and 12 replicas are refused with a replica count that fits (8, not 16)."""
    path = tmp_path / "pod12.toml"
    path.write_text('extends = "ipu-pod16"\n[system]\nnum_ipus = 12\n')
    argv = ["--system", str(path), "--op", "all-reduce", "--bytes", "1MiB", "--json"]
    assert collective_main(argv + ["--replicas", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == "pod12"
    assert collective_main(argv + ["--replicas", "12"]) == 2
    err = capsys.readouterr().err
    assert "use --replicas 8" in err and "16" not in err.split("use --replicas")[1]
    assert collective_main(argv + ["--replicas", "6", "--ipus-per-replica", "2"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("use --replicas 4")
