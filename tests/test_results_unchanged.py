"""Results do not change with the simulator's speed work: a few runs pinned bit for bit.

The digests below were recorded with the engine and pipeline schedule as they were before the
speed work (a task per step, every resource requested from SimPy, the schedule rebuilt per
cycle): cycle counts, the trace, the op trace (every run written out), the perf counters, two
latencies and the breakdown. Each case covers a path the speed work changed: pipelined cycles as
Parallel blocks, lane-private resources not requested, host prefetch (steady-state loops), IO
tiles, replicas sharing a host link, off-chip optimizer state with replicated tensor sharding.

A change to the engine or the schedules must leave them as they are. A change to a cost or a
config value changes them on purpose: re-record them with ``python tests/test_results_unchanged.py``
(it prints the table) and say so in the commit.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import models
import sim
from sim.options import OutputMode, TensorLocationSettings
from sim.strategy import ShardedExecution, SyncPattern


def _bert(n, **kw):
    return models.get("bert-base", micro_batch=1, seq_len=128, num_layers=n, layers_per_ipu=[1] * n, **kw)


def cases():
    """Name -> a function that simulates the case."""
    def pipeline_training():
        o = sim.Options().syncPattern(SyncPattern.SinglePipeline).deviceIterations(2)
        o.Training.gradientAccumulation(10)
        return sim.simulate(_bert(4), "ipu-m2000", o, training=True, optimizer="adam")

    def pipeline_inference_prefetch():
        o = sim.Options().deviceIterations(12).outputMode(OutputMode.EveryN, 3)
        o._Popart.set("defaultPrefetchBufferingDepth", 3)
        return sim.simulate(_bert(4), "ipu-m2000", o)

    def pipeline_replicas():
        o = sim.Options().replicationFactor(2).deviceIterations(3)
        o.Training.gradientAccumulation(10)
        return sim.simulate(_bert(4), "ipu-pod16", o, training=True, optimizer="lamb")

    def deep_pipeline():
        o = sim.Options()
        o.Training.gradientAccumulation(40)
        return sim.simulate(_bert(16), "ipu-pod16", o, training=True)

    def io_tiles_overlap():
        o = sim.Options().deviceIterations(20).setExecutionStrategy(ShardedExecution())
        o.TensorLocations.numIOTiles(32)
        return sim.simulate(models.get("io-bound", overlap=True), "ipu-mk2", o)

    def replicas_prefetch():
        o = sim.Options().replicationFactor(4).deviceIterations(6)
        o._Popart.set("defaultPrefetchBufferingDepth", 3)
        return sim.simulate(models.get("mlp"), "ipu-m2000", o)

    def off_chip_rts():
        o = sim.Options().replicationFactor(2).deviceIterations(2)
        o.Training.gradientAccumulation(10)
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False)
                                               .useReplicatedTensorSharding(True))
        return sim.simulate(_bert(4), "ipu-pod16", o, training=True, optimizer="adam")

    return {f.__name__: f for f in (pipeline_training, pipeline_inference_prefetch, pipeline_replicas, deep_pipeline,
                                     io_tiles_overlap, replicas_prefetch, off_chip_rts)}


def frame_digest(df) -> str:
    """A digest of a DataFrame's column names and values (not of pandas' dtype names)."""
    h = hashlib.sha256()
    for column in df.columns:
        values = df[column].to_numpy()
        h.update(str(column).encode() + b"\0")
        if values.dtype.kind in "iu":
            h.update(values.astype(np.int64).tobytes())
        elif values.dtype.kind == "f":
            h.update(values.astype(np.float64).tobytes())
        else:
            h.update("\x1f".join(map(str, values)).encode())
    return h.hexdigest()[:16]



EXPECTED = {  # recorded with the engine before the speed work
    "pipeline_training": {
        "cycle_count": 14176590, "trace": "68ce53dedf630bfc", "op_trace": "96d4984176014668",
        "perf_counters": "e438925274a48325", "breakdown": "cff7b39a93148330",
        "latency": "(0.01069931320754717, 0.01069931320754717, 0.01069931320754717)",
        "compute_latency": "(0.01026981283018868, 0.01026981283018868, 0.01026981283018868)"},
    "pipeline_inference_prefetch": {
        "cycle_count": 3360110, "trace": "f3ebda279d225279", "op_trace": "ada16b9e7afd5027",
        "perf_counters": "832c9831de9e848d", "breakdown": "edb5cc54711196d1",
        "latency": "(0.0012192709433962263, 0.0015048807547169813, 0.0014028915094339623)",
        "compute_latency": "(0.0002465350943396227, 0.00046436754716981134, 0.0003921549056603774)"},
    "pipeline_replicas": {
        "cycle_count": 30827006, "trace": "d2be7dbc8f45bd73", "op_trace": "a02925fbb4a4b075",
        "perf_counters": "3105bee1e979fd26", "breakdown": "6d7a3f058e3d3ed9",
        "latency": "(0.015034921509433962, 0.023265544150943396, 0.019150232830188678)",
        "compute_latency": "(0.013789469433962264, 0.02283556075471698, 0.01831251509433962)"},
    "deep_pipeline": {
        "cycle_count": 26233150, "trace": "0f06aac830eb6006", "op_trace": "4afaf8e84e2c4536",
        "perf_counters": "1881dace29521f79", "breakdown": "f6d810291db3c99e",
        "latency": "(0.019798301886792453, 0.019798301886792453, 0.019798301886792453)",
        "compute_latency": "(0.018152098113207546, 0.018152098113207546, 0.018152098113207546)"},
    "io_tiles_overlap": {
        "cycle_count": 3173434, "trace": "8704776f8c476322", "op_trace": "fc92d2714c59549a",
        "perf_counters": "f6ab54a608ccda44", "breakdown": "33c28d4818791f09",
        "latency": "(0.00017710641509433963, 0.0002606573584905663, 0.00025647981132075477)",
        "compute_latency": "(0.00011673358490566036, 0.00020028452830188684, 0.00019610698113207547)"},
    "replicas_prefetch": {
        "cycle_count": 279761, "trace": "f28b6789155b3309", "op_trace": "8f3cbef5ce35673b",
        "perf_counters": "f8ae95adcbde8159", "breakdown": "7a1d07877b8b90f1",
        "latency": "(2.099169811320753e-05, 2.0991698113207558e-05, 2.0991698113207548e-05)",
        "compute_latency": "(1.3243018867924525e-05, 1.3243018867924552e-05, 1.324301886792453e-05)"},
    "off_chip_rts": {
        "cycle_count": 89850440, "trace": "9fccb24b06d9e2b1", "op_trace": "e002e710c102ea18",
        "perf_counters": "4070aaf068ecfd5f", "breakdown": "79b5d3d862af3f03",
        "latency": "(0.034149646037735855, 0.0678115320754717, 0.050980589056603784)",
        "compute_latency": "(0.03371966264150944, 0.06738154867924528, 0.05055060566037736)"},
}


def digests(run) -> dict:
    """What a case pins of a run: the cycle count, digests of its frames, two latencies."""
    return {"cycle_count": run.cycle_count, "trace": frame_digest(run.trace),
            "op_trace": frame_digest(run.op_trace(expand=True)),
            "perf_counters": hashlib.sha256(repr(run.perf_counters).encode()).hexdigest()[:16],
            "latency": repr(run.latency), "compute_latency": repr(run.compute_latency),
            "breakdown": frame_digest(run.breakdown)}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_results_are_bit_identical_to_the_recorded_ones(name):
    assert digests(cases()[name]()) == EXPECTED[name]


def test_the_same_inputs_give_the_same_results_bit_for_bit():
    case = cases()["pipeline_replicas"]
    assert digests(case()) == digests(case())


def test_op_trace_lists_repeated_work_once():
    """op_trace() lists each op of repeated work once with ``repeats``; expanding those rows
    gives op_trace(expand=True), which is the trace of every run."""
    o = sim.Options().deviceIterations(50)
    o.Training.gradientAccumulation(4)
    run = sim.simulate(models.get("mlp", micro_batch=8), "ipu-mk2", o, training=True)
    compact, every = run.op_trace(), run.op_trace(expand=True)
    assert list(compact.columns) == list(every.columns) + ["repeats"]
    assert compact["repeats"].sum() == len(every) and compact["repeats"].max() == 50 * 4
    assert (compact["compute"] * compact["repeats"]).sum() == every["compute"].sum()
    first = every.drop_duplicates(["task", "name"])  # each op's first run
    assert first["start"].tolist() == compact.drop_duplicates(["task", "name"])["start"].tolist()
    more = sim.simulate(models.get("mlp", micro_batch=8), "ipu-mk2", o.deviceIterations(500), training=True)
    assert len(more.op_trace()) == len(compact)  # does not grow with device iterations


if __name__ == "__main__":  # re-record EXPECTED after a deliberate change of costs
    import pprint
    pprint.pprint({name: digests(case()) for name, case in cases().items()}, width=110, sort_dicts=False)
