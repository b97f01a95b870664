"""Benchmarks of the simulator's own speed, each as a ratio to a baseline measured in the same run.

Run ``ipusim bench`` (or ``python -m sim.cli.bench``). Wall times depend on the machine; the
ratios much less, so they are what to compare across machines (and what
``tests/benchmarks/test_speed.py`` guards):

* engine: SimPy events per second in the engine's event loop, as a fraction of bare SimPy
  running the same kinds of events (:func:`bare_dag_rate`: processes that wait for their
  predecessors, then a zero and a nonzero timeout), measured turn about with it; and over the
  whole simulation (building the task graph and the records included), as a fraction of bare
  SimPy timeouts per second (:func:`raw_simpy_rate`);
* pipeline depth: building the program of a pipelined model and simulating it, for one model
  (BERT, 64 layers) on d = 1, 8, 16, 32, 64 IPUs (2d + 1 pipeline stages in training), as a
  multiple of d = 1;
* device iterations: :meth:`Run.op_trace` and the results (perf counters, the four latencies,
  the summary) at 10, 1000 and 10000 device iterations, as multiples of 1 device iteration,
  with the op trace's peak memory;
* loop capture (with torch installed): tracing a ``poptorch.for_loop`` of 64 iterations with torch.export
  (sim.poptorch's capture), as a multiple of 4 iterations: the body is traced twice whatever the count;
* capture values (with torch installed): capturing a model whose calls return no outputs
  (``computeOutputsOnCpu(False)``: the traced graph runs on shapes and dtypes), as a multiple of capturing
  it with the example's values computed;
* import: ``import sim`` in a fresh interpreter, as a multiple of ``import numpy``;
* workloads: three whole simulations (compile and simulate), as raw-event equivalents (wall
  time x raw SimPy rate: how many bare SimPy timeouts the machine could have processed).

Times are the best of ``repeats`` runs, in seconds unless a column says ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import gc
import time
import tracemalloc

import simpy

import models

from .. import OutOfMemoryError, Options, compile, load_system, run_executable
from ..options import TensorLocationSettings

DEPTHS = (1, 8, 16, 32, 64)  # IPUs of the pipeline-depth benchmark
DEVICE_ITERATIONS = (1, 10, 1000, 10000)
LOOP_ITERATIONS = (4, 64)  # for_loop counts of the loop-capture benchmark


def raw_simpy_rate(events: int = 200_000) -> float:
    """Bare SimPy timeouts processed per second (one process yielding timeouts)."""
    env = simpy.Environment()

    def ticker():
        for _ in range(events):
            yield env.timeout(1)

    env.process(ticker())
    t0 = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - t0)


def bare_dag_rate(tasks: int = 4000) -> float:
    """Bare SimPy events processed per second for the engine's mix of events: ``tasks``
    processes, each waiting for its two predecessors (``all_of``), then yielding a zero and a
    one-cycle timeout (about 5 events per process, as the engine's tasks make)."""
    env = simpy.Environment()
    done: list[simpy.Process] = []

    def task(i: int):
        if i >= 2:
            yield env.all_of([done[i - 1], done[i - 2]])
        yield env.timeout(0)
        yield env.timeout(1)

    for i in range(tasks):
        done.append(env.process(task(i)))
    events, t0 = 0, time.perf_counter()
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            break
        events += 1
    return events / (time.perf_counter() - t0)


def _best(repeats: int, fn):
    """(least wall seconds over ``repeats`` calls of ``fn``, the last call's result). Each call starts from a
    collected heap (the previous result dropped first), so what ran before does not time its garbage here."""
    best, result = float("inf"), None
    for _ in range(repeats):
        result = None
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def depth_workload(ipus: int, system: str = "ipu-pod64"):
    """The pipeline-depth benchmark's executable: BERT training (64 layers, hidden 256,
    micro-batch 1, sequence 128, gradient accumulation 4 x ``ipus``), 64 / ``ipus`` layers per IPU."""
    graph = models.get("bert-base", micro_batch=1, seq_len=128, num_layers=64, hidden=256, heads=4,
                       layers_per_ipu=[64 // ipus] * ipus if ipus > 1 else None)
    options = Options()
    options.Training.gradientAccumulation(4 * ipus)
    return compile(graph, system, options, training=True)


def event_loop(ex, repeats: int = 3) -> dict:
    """The engine's event loop on ``ex`` against :func:`bare_dag_rate`, measured turn about
    (``repeats`` times each, the best of each counting) so that both see the machine alike."""
    loop_s, dag = float("inf"), 0.0
    for _ in range(repeats):
        run = run_executable(ex)
        loop_s = min(loop_s, run.timeline.event_seconds)
        dag = max(dag, bare_dag_rate())
    events = run.timeline.events
    return {"simpy_events": events, "event_loop_events_per_s": events / loop_s,
            "bare_dag_events_per_s": dag, "event_loop_vs_bare_dag": events / loop_s / dag}


def pipeline_depth(depths=DEPTHS, repeats: int = 3, system: str = "ipu-pod64") -> list[dict]:
    """One row per depth d: BERT training (64 layers, hidden 256, micro-batch 1, sequence 128,
    gradient accumulation 4d) on d IPUs, 64/d layers each. ``schedule_s`` is building the
    program (``Executable.timings``), ``simulate_s`` running it; ``cost_s`` their sum."""
    rows = []
    for d in depths:
        compile_s, schedule_s = float("inf"), float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            ex = depth_workload(d, system)
            compile_s = min(compile_s, time.perf_counter() - t0)
            schedule_s = min(schedule_s, ex.timings["schedule"])
        runs = [run_executable(ex) for _ in range(repeats)]
        simulate_s = min(run.wall_seconds for run in runs)
        rows.append({"ipus": d, "stages": len(ex.stages), "compile_s": compile_s, "schedule_s": schedule_s,
                     "simulate_s": simulate_s, "cost_s": schedule_s + simulate_s,
                     "simpy_events": runs[0].timeline.events,
                     "event_loop_s": min(run.timeline.event_seconds for run in runs)})
    base = rows[0]["cost_s"]
    for row in rows:
        row["cost_vs_first"] = row["cost_s"] / base
    return rows


def _di_workload(device_iterations: int):
    """BERT-base training, 12 layers pipelined over 4 IPUs, micro-batch 1, sequence 128, GA 16."""
    options = Options().deviceIterations(device_iterations)
    options.Training.gradientAccumulation(16)
    graph = models.get("bert-base", micro_batch=1, seq_len=128, num_layers=12, layers_per_ipu=[3, 3, 3, 3])
    return compile(graph, "ipu-m2000", options, training=True, optimizer="adam")


def device_iterations(counts=DEVICE_ITERATIONS, repeats: int = 3) -> list[dict]:
    """One row per device-iteration count: simulate, op_trace() (time and peak traced memory)
    and the results (perf counters, the four latencies, the summary), each computed afresh."""
    rows = []
    for n in counts:
        ex = _di_workload(n)
        simulate_s, run = _best(repeats, lambda: run_executable(ex))
        run.op_trace()  # the first call imports pandas; time the later ones
        op_trace_s, ops = _best(repeats, run.op_trace)
        tracemalloc.start()
        run.op_trace()
        op_trace_mb = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()

        def results():
            fresh = run_executable(ex)  # new Run: nothing cached
            t0 = time.perf_counter()
            fresh.perf_counters, fresh.latency, fresh.host_ipu_latency, fresh.compute_latency
            fresh.ipu_host_latency, fresh.summary()
            return time.perf_counter() - t0
        results_s = min(results() for _ in range(repeats))
        rows.append({"device_iterations": n, "simulate_s": simulate_s, "op_trace_s": op_trace_s,
                     "op_trace_rows": len(ops), "op_trace_peak_mb": op_trace_mb, "results_s": results_s,
                     "stamps_per_input": len(run.perf_counters["input"][0])})
    for key in ("simulate_s", "op_trace_s", "results_s"):
        for row in rows:
            row[key.replace("_s", "_vs_first")] = row[key] / rows[0][key]
    return rows


def loop_capture(counts=LOOP_ITERATIONS, repeats: int = 3) -> list[dict]:
    """One row per count n: ``sim.poptorch``'s trace (torch.export: the model branches on a shape, which
    torch.fx cannot trace) of a ``poptorch.for_loop`` of n iterations over a matmul, a ReLU and two scalar
    ops on [32, 32] fp32, with its iterations written out (``trace_s``), and the graph nodes it holds."""
    import torch

    from ..poptorch import _capture, _mapping, for_loop

    class Looped(torch.nn.Module):
        def __init__(self, count: int):
            super().__init__()
            self.w, self.count = torch.nn.Parameter(torch.randn(32, 32)), count

        def forward(self, x):
            if x.shape[0] > 1:
                x = x * 1.0
            return for_loop(self.count, lambda t: [torch.relu(t @ self.w) * 0.5 + 1.0], [x])[0]

    rows = []
    for n in counts:
        adapter, flat, _ = _capture._adapter(Looped(n), (torch.randn(32, 32),), {})
        trace_s, (gm, method, _) = _best(repeats, lambda: _capture._trace(adapter, flat, _mapping.leaf_types()))
        rows.append({"iterations": n, "method": method, "trace_s": trace_s, "nodes": len(gm.graph.nodes)})
    for row in rows:
        row["trace_vs_first"] = row["trace_s"] / rows[0]["trace_s"]
    return rows


def capture_values(repeats: int = 3) -> list[dict]:
    """One row with values computed and one without: ``sim.poptorch``'s capture (trace and interpretation) of
    six Linear(1024, 1024) layers and their GELUs on a [4096, 1024] fp32 micro-batch, the traced graph run on
    the example's values (what a call returning its outputs needs) or on shapes and dtypes only
    (``computeOutputsOnCpu(False)``), and the graph ops it makes."""
    import torch

    from ..poptorch import _capture

    model = torch.nn.Sequential(*[layer for _ in range(6) for layer in (torch.nn.Linear(1024, 1024), torch.nn.GELU())])
    x = torch.randn(4096, 1024)
    rows = []
    for values in (True, False):
        capture_s, captured = _best(repeats, lambda values=values: _capture.capture(model, (x,), {}, values=values))
        rows.append({"values": values, "capture_s": capture_s, "ops": len(captured.graph.ops)})
    rows[1]["capture_vs_values"] = rows[1]["capture_s"] / rows[0]["capture_s"]
    return rows


def import_time(repeats: int = 3) -> dict:
    """Seconds of ``import sim`` and of ``import numpy`` in fresh interpreters (best of ``repeats``)."""
    def seconds(module: str) -> float:
        code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
        return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                        check=True).stdout) for _ in range(repeats))
    sim_s, numpy_s = seconds("sim"), seconds("numpy")
    return {"import_sim_s": sim_s, "import_numpy_s": numpy_s, "sim_vs_numpy": sim_s / numpy_s}


def _largest_bert_large_that_fits(system: str, options: Options) -> tuple[int, object]:
    """BERT-large training with as many layers as fit on one IPU (24 down to 1); an
    :class:`~sim.OutOfMemoryError` naming the system and ``--system`` when not even one layer fits."""
    for layers in (24, 16, 12, 10, 8, 6, 4, 3, 2, 1):
        graph = models.get("bert-large", micro_batch=1, seq_len=128, num_layers=layers)
        try:
            return layers, compile(graph, system, options, training=True)
        except OutOfMemoryError as e:
            error = e
    name = getattr(system, "name", system)
    raise OutOfMemoryError(
        f"the bench workload 'bert-large training' does not fit on one IPU of system {name!r} even with a "
        f"single layer; give ipusim bench a --system whose IPU holds it (default: ipu-mk2). {error}",
        ipu=error.ipu, op=error.op, shortfall_bytes=error.shortfall_bytes, shortfalls=error.shortfalls,
        where=error.where, margin=error.margin, margin_bytes=error.margin_bytes)


def workloads(system: str = "ipu-mk2"):
    """(label, build-and-compile function) for each whole-simulation workload."""
    def bert():
        o = Options()
        o.Training.gradientAccumulation(16)
        layers, ex = _largest_bert_large_that_fits(system, o)
        return f"bert-large training, {layers} layers, mb 1, seq 128, GA 16", ex

    def resnet():
        ex = compile(models.get("resnet50", micro_batch=4), system, Options().deviceIterations(16))
        return "resnet50 inference, mb 4, 16 device iterations", ex

    def bert_pod16():
        o = Options().replicationFactor(4)
        o.Training.gradientAccumulation(16)
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True))
        graph = models.get("bert-large", micro_batch=2, seq_len=128, layers_per_ipu=[3, 7, 7, 7])
        ex = compile(graph, "ipu-pod16", o, training=True, optimizer="lamb")
        return "bert-large training on ipu-pod16: 4 replicas x 4-stage pipeline, GA 16, LAMB + RTS", ex

    return [bert, resnet, bert_pod16]


def whole_simulations(rate: float, system: str = "ipu-mk2", repeats: int = 3) -> list[dict]:
    """One row per workload: compile and simulate wall times, SimPy events, raw-event equivalents."""
    rows = []
    for make in workloads(system):
        compile_s, (label, ex) = _best(repeats, make)
        simulate_s, run = _best(repeats, lambda: run_executable(ex))
        rows.append({"workload": label, "system": ex.system.name, "simulated_cycles": run.cycle_count,
                     "compile_s": compile_s, "simulate_s": simulate_s, "simpy_events": run.timeline.events,
                     "raw_event_equivalents": (compile_s + simulate_s) * rate})
    return rows


def run_benchmarks(system: str = "ipu-mk2", repeats: int = 3) -> dict[str, list[dict]]:
    """Every benchmark: table name -> rows."""
    rate = max(raw_simpy_rate() for _ in range(repeats))
    depth = pipeline_depth(repeats=repeats)
    deepest = depth[-1]
    whole_run = deepest["simpy_events"] / deepest["simulate_s"]
    engine = [{"workload": f"pipeline of {deepest['ipus']} IPUs",
               **event_loop(depth_workload(deepest["ipus"]), repeats),
               "raw_simpy_timeouts_per_s": rate, "whole_run_events_per_s": whole_run,
               "whole_run_vs_raw": whole_run / rate}]
    tables = {"engine": engine, "pipeline depth": depth, "device iterations": device_iterations(repeats=repeats)}
    if importlib.util.find_spec("torch") is not None:  # sim.poptorch's capture needs it (the torch extra)
        tables["loop capture"] = loop_capture(repeats=repeats)
        tables["capture values"] = capture_values(repeats=repeats)
    return {**tables, "import": [import_time(repeats)], "workloads": whole_simulations(rate, system, repeats)}


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--system", default="ipu-mk2", help="system of the one-IPU whole-simulation workloads "
                                                            "(default: ipu-mk2; the POD16 workload keeps ipu-pod16)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best counts")
    parser.set_defaults(func=_cmd_bench, subparser=parser)
    return parser


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``bench`` on ``ipusim``'s sub-parsers."""
    return _configure(subparsers.add_parser("bench", help="measure the simulator's own speed",
                                            description=__doc__.splitlines()[0]))


def _cmd_bench(args, parser) -> int:
    import pandas as pd

    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    load_system(args.system)  # an unknown system fails now, not after the other benchmarks
    for name, rows in run_benchmarks(args.system, args.repeats).items():
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            print(f"{name}:")
            print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:,.4g}"))
            print()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ipusim bench", description=__doc__.splitlines()[0])
    args = _configure(parser).parse_args(argv)
    return args.func(args, args.subparser)


if __name__ == "__main__":
    raise SystemExit(main())
