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



EXPECTED = {  # recorded with the engine before the speed work; re-recorded for the matmul/conv pass costs,
    # Adam/LAMB's two phases and LAMB's norms, popops' reduction plan, the fc backward weight transpose,
    # poplin's partials reduction, swapped backward passes, the per-dimension field split and the
    # frameworks' fullyConnectedPass on training matmuls and
    # PopART's one collective per tensor in the weight update
 'pipeline_training': {'cycle_count': 16868468,
                       'trace': '28e383f08a75d668',
                       'op_trace': '6f7957ec9ec511a7',
                       'perf_counters': '243c46af2b872ed8',
                       'latency': '(0.012730919245283018, 0.012730919245283018, 0.012730919245283018)',
                       'compute_latency': '(0.01228002716981132, 0.01228002716981132, 0.01228002716981132)',
                       'breakdown': '3cf279c3735c2867'},
 'pipeline_inference_prefetch': {'cycle_count': 3468713,
                                 'trace': '396cbff80be6668a',
                                 'op_trace': '837dfd55165824cf',
                                 'perf_counters': 'c51907e9efc472c2',
                                 'latency': '(0.0012643750943396226, 0.001549645283018868, '
                                            '0.0014438149056603773)',
                                 'compute_latency': '(0.00026303396226415115, 0.00048808, '
                                                    '0.0004138307547169812)',
                                 'breakdown': 'cfa5cbf5016dc54e'},
 'pipeline_replicas': {'cycle_count': 41522864,
                       'trace': '9c3177058fc50024',
                       'op_trace': '2fc501f8434f7a4e',
                       'perf_counters': '510a2e31f73f43b5',
                       'latency': '(0.02037524754716981, 0.031337889811320754, 0.02585656867924528)',
                       'compute_latency': '(0.01891135396226415, 0.030886514716981128, 0.02489893433962264)',
                       'breakdown': 'fea06fe46c5d9571'},
 'deep_pipeline': {'cycle_count': 30258785,
                   'trace': '0de60494d3339104',
                   'op_trace': 'ba8828efb48a8d61',
                   'perf_counters': '19e3b2c3ee0b6bb7',
                   'latency': '(0.022836516981132076, 0.022836516981132076, 0.022836516981132076)',
                   'compute_latency': '(0.02110474641509434, 0.02110474641509434, 0.02110474641509434)',
                   'breakdown': '2596799ebf9aa3d2'},
 'io_tiles_overlap': {'cycle_count': 3356874,
                      'trace': '6066cf4ae9f18554',
                      'op_trace': '585cb6436d6af29c',
                      'perf_counters': '81f21e85a199aafe',
                      'latency': '(0.00018402867924528302, 0.0002745018867924532, 0.0002699782264150943)',
                      'compute_latency': '(0.00012365584905660377, 0.00021412905660377372, '
                                         '0.0002096053962264151)',
                      'breakdown': '44891cf51ae857c5'},
 'replicas_prefetch': {'cycle_count': 285460,
                       'trace': 'bd28061192e73d97',
                       'op_trace': '619c8e1c2a7171a9',
                       'perf_counters': 'a25954ec85d92efa',
                       'latency': '(2.5292830188679223e-05, 2.529283018867925e-05, 2.529283018867924e-05)',
                       'compute_latency': '(1.7544150943396217e-05, 1.7544150943396244e-05, '
                                          '1.754415094339622e-05)',
                       'breakdown': 'b200064ec5bd79a2'},
 'off_chip_rts': {'cycle_count': 96679788,
                  'trace': 'c3ef24ce1aba8507',
                  'op_trace': '7909899186948125',
                  'perf_counters': '8bde9943f883c953',
                  'latency': '(0.036726758490566044, 0.07296575698113208, 0.054846257735849065)',
                  'compute_latency': '(0.03627538339622642, 0.07251438188679246, 0.05439488264150944)',
                  'breakdown': '081f216db2dc7470'}}


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
