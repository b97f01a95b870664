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



EXPECTED = {  # recorded with the engine before the speed work; re-recorded for the matmul/conv pass costs
    # and for Adam/LAMB's two phases and LAMB's norms
 'pipeline_training': {'cycle_count': 16045958,
                       'trace': 'fcfe492fb9823b56',
                       'op_trace': 'dfa88aa3bb50c6d1',
                       'perf_counters': 'df15ca24ef4416e7',
                       'latency': '(0.012110156981132075, 0.012110156981132075, 0.012110156981132075)',
                       'compute_latency': '(0.01165755320754717, 0.01165755320754717, 0.01165755320754717)',
                       'breakdown': '4a8e7aa0457eddc0'},
 'pipeline_inference_prefetch': {'cycle_count': 3475132,
                                 'trace': '36924ebde026a1f8',
                                 'op_trace': '7ecb7ec67878dfe3',
                                 'perf_counters': '5734a0260fbf1b38',
                                 'latency': '(0.0012671011320754715, 0.001552101886792453, '
                                            '0.0014460852830188678)',
                                 'compute_latency': '(0.0002637999999999998, 0.0004890943396226415, '
                                                    '0.00041480547169811316)',
                                 'breakdown': '210c4f74eb5e159b'},
 'pipeline_replicas': {'cycle_count': 33697826,
                       'trace': '1634816c8d2df5ab',
                       'op_trace': '1608bf98717f0cba',
                       'perf_counters': '47e03bc3ceb7e7bc',
                       'latency': '(0.016442476981132076, 0.025432200754716982, 0.02093733886792453)',
                       'compute_latency': '(0.015063269433962266, 0.02497911396226415, 0.020021191698113207)',
                       'breakdown': '7f15d7efe58360b4'},
 'deep_pipeline': {'cycle_count': 28561580,
                   'trace': '7da056124983ea47',
                   'op_trace': '8f24d896df5cfb1f',
                   'perf_counters': '2c44f0d38fdf3ad3',
                   'latency': '(0.02155560754716981, 0.02155560754716981, 0.02155560754716981)',
                   'compute_latency': '(0.019816990188679245, 0.019816990188679245, 0.019816990188679245)',
                   'breakdown': '0f1943a6ac6faddc'},
 'io_tiles_overlap': {'cycle_count': 3406714,
                      'trace': '956d0a777bfc18c5',
                      'op_trace': '43e0d94157606148',
                      'perf_counters': 'b535b644e5aaadfe',
                      'latency': '(0.00018590943396226415, 0.00027826339622641534, 0.0002736456981132076)',
                      'compute_latency': '(0.0001255366037735849, 0.00021789056603773599, '
                                         '0.00021327286792452828)',
                      'breakdown': '5126267009b512fe'},
 'replicas_prefetch': {'cycle_count': 284663,
                       'trace': 'fdab5f19bc0577c0',
                       'op_trace': 'b1844018726717ac',
                       'perf_counters': '224d927f3a981346',
                       'latency': '(2.4691320754716974e-05, 2.4691320754717e-05, 2.4691320754716974e-05)',
                       'compute_latency': '(1.694264150943394e-05, 1.6942641509433968e-05, '
                                          '1.6942641509433954e-05)',
                       'breakdown': '714f5ede0649cf16'},
 'off_chip_rts': {'cycle_count': 91368434,
                  'trace': '3bef6f2eea2fe080',
                  'op_trace': '71b5fa9b670842b0',
                  'perf_counters': '96ff158b5b4be24c',
                  'latency': '(0.034722473962264154, 0.0689571879245283, 0.051839830943396226)',
                  'compute_latency': '(0.03426938716981132, 0.06850410113207547, 0.051386744150943395)',
                  'breakdown': '536276a58f0304bd'}}


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
