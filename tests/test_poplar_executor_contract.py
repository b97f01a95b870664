"""PopTorch's PoplarExecutor contract for perf counters and latencies (shared DESIGN.md,
"The PoplarExecutor contract"), on a small MLP (inputs x and labels, outputs logits and loss).

* 'input' / 'input_complete': one list per model input, deviceIterations x
  gradientAccumulation x replicationFactor stamps each;
* 'output' / 'output_complete': one list per model output, with Final/Sum 1, All DI x GA,
  EveryN(N) (DI / N) x GA stamps each (times replicationFactor);
* output mode defaults: All for inference, Final for training;
* synthetic data: every list empty and every latency (0.0, 0.0, 0.0);
* latencies (min, max, avg) built per transfer index, start stamps grouped when there are more
  of them than end stamps.
"""

from __future__ import annotations

import pytest

import models
import sim
from sim import OutputMode
from sim.results import perfcounters

MODES = {"All": (OutputMode.All, None), "Final": (OutputMode.Final, None),
         "Sum": (OutputMode.Sum, None), "EveryN(2)": (OutputMode.EveryN, 2)}
DEVICE_ITERATIONS = (1, 2, 4, 10)
KEYS = ("input", "input_complete", "output", "output_complete")
LATENCIES = ("latency", "host_ipu_latency", "compute_latency", "ipu_host_latency")
# Latencies are floats in seconds; the mean of equal durations may differ from them by an ulp.
FLOAT_SLACK = 1e-15


@pytest.fixture(scope="module")
def graph():
    return models.get("mlp", micro_batch=2)


def options(di: int, mode: str | None, ga: int = 1, synthetic: bool = False) -> sim.Options:
    o = sim.Options().deviceIterations(di)
    if mode is not None:
        o.outputMode(*MODES[mode])
    if ga > 1:
        o.Training.gradientAccumulation(ga)
    if synthetic:
        o.enableSyntheticData(True)
    return o


def expected_outputs(mode: str, di: int, ga: int) -> int:
    return {"All": di * ga, "Final": 1, "Sum": 1, "EveryN(2)": di // 2 * ga}[mode]


def check_counters(run: sim.Run, graph, n_in: int, n_out: int) -> None:
    pc = run.perf_counters
    assert set(pc) == set(KEYS)
    assert len(pc["input"]) == len(pc["input_complete"]) == len(graph.inputs)
    assert len(pc["output"]) == len(pc["output_complete"]) == len(graph.outputs)
    for key, n in (("input", n_in), ("input_complete", n_in), ("output", n_out), ("output_complete", n_out)):
        for stamps in pc[key]:
            assert len(stamps) == n, key
            assert all(isinstance(s, float) for s in stamps)
            replicas = run.executable.replicas  # step-major, replica-minor: each replica in time order
            for r in range(replicas):
                mine = stamps[r::replicas]
                assert mine == sorted(mine), f"{key} stamps of replica {r} go back in time"
            assert all(s >= 0 for s in stamps)
    for start, end in (("input", "input_complete"), ("output", "output_complete")):
        for s_list, e_list in zip(pc[start], pc[end]):
            assert all(s <= e for s, e in zip(s_list, e_list)), f"{start} after {end}"
    # every stamp lies inside the run
    last = max(max(lst) for k in KEYS for lst in pc[k])
    assert last <= run.seconds
    assert run.executable.transfers_per_input() == n_in
    assert run.executable.transfers_per_output() == n_out


def check_latencies(run: sim.Run) -> None:
    for name in LATENCIES:
        lo, hi, avg = getattr(run, name)
        assert 0.0 <= lo <= hi, name
        assert lo - FLOAT_SLACK <= avg <= hi + FLOAT_SLACK, name
    assert run.latency[0] > 0.0
    assert run.latency[1] <= run.seconds


# --- list sizes ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("di", DEVICE_ITERATIONS)
def test_inference_counter_sizes(graph, mode, di):
    if mode == "EveryN(2)" and di % 2:
        with pytest.raises(sim.OptionsError, match="multiple of the return period"):
            sim.simulate(graph, "ipu-mk2", options(di, mode))
        return
    run = sim.simulate(graph, "ipu-mk2", options(di, mode))
    check_counters(run, graph, di, expected_outputs(mode, di, 1))
    check_latencies(run)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("di", DEVICE_ITERATIONS)
@pytest.mark.parametrize("ga", [1, 2])
def test_training_counter_sizes(graph, mode, di, ga):
    if mode == "EveryN(2)" and di % 2:
        with pytest.raises(sim.OptionsError, match="multiple of the return period"):
            sim.simulate(graph, "ipu-mk2", options(di, mode, ga), training=True)
        return
    run = sim.simulate(graph, "ipu-mk2", options(di, mode, ga), training=True)
    check_counters(run, graph, di * ga, expected_outputs(mode, di, ga))
    check_latencies(run)


@pytest.mark.parametrize("training, default, n_out", [(False, OutputMode.All, 4), (True, OutputMode.Final, 1)])
def test_default_output_mode(graph, training, default, n_out):
    run = sim.simulate(graph, "ipu-mk2", options(4, None), training=training)
    assert run.executable.output_mode == default
    check_counters(run, graph, 4, n_out)


def test_inference_with_gradient_accumulation_is_an_error(graph):
    with pytest.raises(sim.OptionsError, match="gradientAccumulation"):
        sim.simulate(graph, "ipu-mk2", options(2, None, ga=2))


def test_inputs_are_stamped_step_major():
    """With several inputs, the k-th stamp of every input belongs to the k-th step: all of a
    step's inputs arrive before the next step's first input is requested."""
    g = models.get("mlp", micro_batch=2)
    run = sim.simulate(g, "ipu-mk2", options(4, "All"))
    x, labels = run.perf_counters["input"]
    x_done, labels_done = run.perf_counters["input_complete"]
    for k in range(3):
        assert max(x_done[k], labels_done[k]) <= min(x[k + 1], labels[k + 1])


# --- synthetic data ------------------------------------------------------------------------
@pytest.mark.parametrize("training, ga", [(False, 1), (True, 1), (True, 2)])
@pytest.mark.parametrize("mode", list(MODES))
def test_synthetic_data_gives_empty_counters_and_zero_latencies(graph, training, ga, mode):
    run = sim.simulate(graph, "ipu-mk2", options(4, mode, ga, synthetic=True), training=training)
    pc = run.perf_counters
    assert set(pc) == set(KEYS)
    assert all(stamps == [] for k in KEYS for stamps in pc[k])
    for name in LATENCIES:
        assert getattr(run, name) == (0.0, 0.0, 0.0)
    assert run.cycle_count > 0


def test_counters_before_a_run_are_one_empty_list_per_key():
    assert perfcounters.empty_counters() == {k: [[]] for k in KEYS}
    assert perfcounters.round_trip(perfcounters.empty_counters()) == (0.0, 0.0, 0.0)


# --- the latency rules, by hand --------------------------------------------------------------
HAND = {
    # two inputs, six steps; per step the earliest request is 0.3, 0.1, 2.0, 1.9, 4.0, 4.2
    "input": [[0.4, 0.1, 2.0, 2.5, 4.0, 4.2], [0.3, 0.6, 2.2, 1.9, 4.1, 4.5]],
    # per step the latest arrival is 0.6, 0.8, 2.3, 2.6, 4.3, 4.6
    "input_complete": [[0.5, 0.8, 2.1, 2.6, 4.3, 4.4], [0.6, 0.7, 2.3, 2.0, 4.2, 4.6]],
    # outputs every second step (EveryN(2)): three stamps per output
    "output": [[1.0, 2.7, 5.0], [1.2, 2.9, 4.9]],
    "output_complete": [[1.3, 3.0, 5.2], [1.5, 3.1, 5.1]],
}


def test_latency_groups_start_stamps_when_there_are_fewer_ends():
    # round trip: per-step min of 'input' = [0.3, 0.1, 2.0, 1.9, 4.0, 4.2], groups of 6/3 = 2:
    # earliest of each group [0.1, 1.9, 4.0]; per-index max of 'output_complete' [1.5, 3.1, 5.2]
    lo, hi, avg = perfcounters.latency(HAND, "input", min, "output_complete", max)
    assert (lo, hi, avg) == pytest.approx((1.2, 1.4, (1.4 + 1.2 + 1.2) / 3))
    assert perfcounters.round_trip(HAND) == pytest.approx((1.2, 1.4, 3.8 / 3))
    # host -> IPU: same counts, no grouping: max 'input_complete' - min 'input' per step
    durations = [0.6 - 0.3, 0.8 - 0.1, 2.3 - 2.0, 2.6 - 1.9, 4.3 - 4.0, 4.6 - 4.2]
    assert perfcounters.host_to_ipu(HAND) == pytest.approx(
        (min(durations), max(durations), sum(durations) / 6))
    # compute: max 'input_complete' [0.6, 0.8, 2.3, 2.6, 4.3, 4.6] grouped by 2 -> the group's
    # earliest [0.6, 2.3, 4.3]; max 'output' [1.2, 2.9, 5.0]
    assert perfcounters.compute(HAND) == pytest.approx((0.6, 0.7, (0.6 + 0.6 + 0.7) / 3))
    # IPU -> host: min 'output' [1.0, 2.7, 4.9], max 'output_complete' [1.5, 3.1, 5.2]
    assert perfcounters.ipu_to_host(HAND) == pytest.approx((0.3, 0.5, (0.5 + 0.4 + 0.3) / 3))


def test_latency_with_one_end_stamp_takes_the_earliest_start():
    counters = {"input": [[3.0, 1.0, 2.0]], "input_complete": [[3.5, 1.5, 2.5]],
                "output": [[4.0]], "output_complete": [[6.0]]}
    assert perfcounters.round_trip(counters) == (5.0, 5.0, 5.0)
    assert perfcounters.compute(counters) == (2.5, 2.5, 2.5)


def test_latency_without_end_stamps_is_zero():
    no_outputs = {"input": [[0.1, 0.2]], "input_complete": [[0.15, 0.25]], "output": [[]],
                  "output_complete": [[]]}
    assert perfcounters.round_trip(no_outputs) == (0.0, 0.0, 0.0)
    assert perfcounters.ipu_to_host(no_outputs) == (0.0, 0.0, 0.0)
    assert perfcounters.host_to_ipu(no_outputs) == pytest.approx((0.05, 0.05, 0.05))


def test_latency_rejects_stamps_that_do_not_group():
    counters = {"input": [[0.0, 1.0, 2.0]], "output_complete": [[1.5, 2.5]]}
    with pytest.raises(ValueError, match="do not group"):
        perfcounters.latency(counters, "input", min, "output_complete", max)


# --- replication -----------------------------------------------------------------------------
@pytest.mark.parametrize("system, replicas", [("ipu-m2000", 2), ("ipu-m2000", 4), ("ipu-pod16", 8)])
@pytest.mark.parametrize("mode", ["All", "Final"])
def test_replication_multiplies_counter_lengths(graph, mode, system, replicas):
    """Every list has replicationFactor x the stamps, input lists step-major, replica-minor
    (on a POD16 only the replicas behind one host link are simulated; the rest by symmetry)."""
    o = options(2, mode, ga=2).replicationFactor(replicas)
    run = sim.simulate(graph, system, o, training=True)
    check_counters(run, graph, 2 * 2 * replicas, replicas * expected_outputs(mode, 2, 2))
    check_latencies(run)


def test_replicas_behind_one_host_link_contend(graph):
    """Four replicas on one IPU-M2000 share its host link: the second replica's first input
    completes only after the first's has crossed the link, so the completion stamps of a step differ."""
    run = sim.simulate(graph, "ipu-m2000", options(1, "All").replicationFactor(4))
    first_step = run.perf_counters["input_complete"][0][:4]
    assert len(set(first_step)) == 4
    assert first_step == sorted(first_step)
