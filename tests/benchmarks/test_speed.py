"""Benchmarks: the simulator's speed as ratios measured in the same process (not timed unit tests).

The same measurements as ``ipusim bench`` (:mod:`sim.cli.bench`):

* a pipeline 8 times deeper (one model on 64 IPUs instead of 8: 129 pipeline stages instead of
  17) costs at most 8 times as much to build and simulate;
* ``Run.op_trace()`` at 10000 device iterations costs at most twice what it costs at 10, and
  stays small in memory (it lists repeated work once);
* tracing a ``poptorch.for_loop`` of 64 iterations costs at most 3 times as much as one of 4 (its body
  is traced twice, the other iterations written out; traced one by one, 64 cost some 12 times 4);
* capturing six large Linear layers without their values (``computeOutputsOnCpu(False)``) costs at most
  half of capturing them with their values (measured 0.17x);
* the engine's event loop processes SimPy events at least half as fast as bare SimPy processes
  the same kinds of events (processes waiting for their predecessors, zero and nonzero
  timeouts), the two measured turn about.

    python -m pytest -s -n 0 tests/benchmarks/test_speed.py   # -n 0: in one process, so -s shows their output
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim.cli import bench


def _in_fresh_interpreter(call: str, key: str) -> dict:
    """``sim.cli.bench``'s ``call`` run in a fresh interpreter, its rows by ``key``: in the test session's,
    whose heap the other tests have filled, the garbage collector's passes weigh on the bigger of two runs
    more than on the smaller one."""
    code = f"import json; from sim.cli import bench; print(json.dumps(bench.{call}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {row[key]: row for row in json.loads(out.strip().splitlines()[-1])}


@pytest.fixture(scope="module")
def depth():
    """The pipeline-depth benchmark at 8 and 64 IPUs (best of 3 each), in a fresh interpreter."""
    return _in_fresh_interpreter("pipeline_depth(depths=(8, 64), repeats=3)", "ipus")


@pytest.mark.benchmark
def test_a_pipeline_eight_times_deeper_costs_at_most_eight_times_as_much(depth):
    ratio = depth[64]["cost_s"] / depth[8]["cost_s"]
    print(f"\npipeline of 64 IPUs ({depth[64]['stages']} stages) / 8 IPUs ({depth[8]['stages']} stages): "
          f"{ratio:.2f}x to build and simulate; SimPy events {depth[64]['simpy_events']} / {depth[8]['simpy_events']}")
    assert ratio <= 8
    assert depth[64]["simpy_events"] <= 8 * depth[8]["simpy_events"]  # events linear in depth


@pytest.fixture(scope="module")
def iterations():
    """The device-iterations benchmark at 10 and 10000 (best of 7 each), in a fresh interpreter (the
    bigger run's trace allocates more)."""
    return _in_fresh_interpreter("device_iterations(counts=(10, 10000), repeats=7)", "device_iterations")


@pytest.mark.benchmark
def test_op_trace_does_not_grow_with_device_iterations(iterations):
    ratio = iterations[10000]["op_trace_s"] / iterations[10]["op_trace_s"]
    print(f"\nop_trace at 10000 / 10 device iterations: {ratio:.2f}x, {iterations[10000]['op_trace_peak_mb']:.1f} MB")
    assert ratio <= 2
    assert iterations[10000]["op_trace_rows"] == iterations[10]["op_trace_rows"]
    assert iterations[10000]["op_trace_peak_mb"] < 200


@pytest.mark.benchmark
def test_a_loop_sixteen_times_longer_traces_in_at_most_three_times_as_long():
    pytest.importorskip("torch")
    rows = _in_fresh_interpreter("loop_capture(counts=(4, 64), repeats=5)", "iterations")
    ratio = rows[64]["trace_s"] / rows[4]["trace_s"]
    print(f"\nfor_loop of 64 / 4 iterations: {ratio:.2f}x to trace ({rows[64]['method']})")
    assert rows[64]["method"] == rows[4]["method"] == "torch.export"
    assert rows[64]["nodes"] - rows[4]["nodes"] == 60 * 5  # every iteration in the graph: 5 nodes each
    assert ratio <= 3


@pytest.mark.benchmark
def test_a_capture_without_values_costs_at_most_half_of_one_with_them():
    pytest.importorskip("torch")
    rows = _in_fresh_interpreter("capture_values(repeats=3)", "values")
    ratio = rows[False]["capture_s"] / rows[True]["capture_s"]
    print(f"\ncapture without values / with: {ratio:.2f}x ({rows[False]['capture_s']:.2f} s, "
          f"{rows[True]['capture_s']:.2f} s)")
    assert rows[False]["ops"] == rows[True]["ops"]
    assert ratio <= 0.5


def test_engine_event_loop_keeps_up_with_bare_simpy():
    row = bench.event_loop(bench.depth_workload(64), repeats=5)
    print(f"\nengine event loop {row['event_loop_events_per_s']:,.0f} events/s = "
          f"{row['event_loop_vs_bare_dag']:.0%} of bare SimPy on the same kinds of events "
          f"({row['bare_dag_events_per_s']:,.0f}/s)")
    assert row["event_loop_vs_bare_dag"] >= 0.5


def test_import_sim_loads_neither_pandas_nor_matplotlib():
    """``import sim`` stays quick: pandas and matplotlib load where a result view needs them."""
    code = "import sys, sim; print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
