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
    # Adam/LAMB's two phases and LAMB's norms, popops' reduction plan, the fc backward weight transpose
'pipeline_training': {'cycle_count': 16533316,
                       'trace': 'a07d77f5a7df6259',
                       'op_trace': '3f09c9a25b155916',
                       'perf_counters': '7d2ec02363773245',
                       'latency': '(0.012477974339622642, 0.012477974339622642, 0.012477974339622642)',
                       'compute_latency': '(0.012025370566037736, 0.012025370566037736, '
                                          '0.012025370566037736)',
                       'breakdown': '160dcfc4d50cc32a'},
 'pipeline_inference_prefetch': {'cycle_count': 3475132,
                                 'trace': '36924ebde026a1f8',
                                 'op_trace': '7ecb7ec67878dfe3',
                                 'perf_counters': '5734a0260fbf1b38',
                                 'latency': '(0.0012671011320754715, 0.001552101886792453, '
                                            '0.0014460852830188678)',
                                 'compute_latency': '(0.0002637999999999998, 0.0004890943396226415, '
                                                    '0.00041480547169811316)',
                                 'breakdown': '210c4f74eb5e159b'},
 'pipeline_replicas': {'cycle_count': 34457969,
                       'trace': '4d84f42f64c437a5',
                       'op_trace': 'fb73104659f78d3e',
                       'perf_counters': '6aab39b6f5a1e64a',
                       'latency': '(0.01681983924528302, 0.02600589358490566, 0.02141286641509434)',
                       'compute_latency': '(0.015392855094339623, 0.02555280679245283, 0.020472830943396227)',
                       'breakdown': '813617ff42a9f2b8'},
 'deep_pipeline': {'cycle_count': 29557035,
                   'trace': '59d5c6f362792a12',
                   'op_trace': 'fa8ab0c86042acf2',
                   'perf_counters': '2c253c8cb0bb9890',
                   'latency': '(0.02230689433962264, 0.02230689433962264, 0.02230689433962264)',
                   'compute_latency': '(0.020568276981132075, 0.020568276981132075, 0.020568276981132075)',
                   'breakdown': 'a844406fe86cc027'},
 'io_tiles_overlap': {'cycle_count': 3406714,
                      'trace': '956d0a777bfc18c5',
                      'op_trace': '43e0d94157606148',
                      'perf_counters': 'b535b644e5aaadfe',
                      'latency': '(0.00018590943396226415, 0.00027826339622641534, 0.0002736456981132076)',
                      'compute_latency': '(0.0001255366037735849, 0.00021789056603773599, '
                                         '0.00021327286792452828)',
                      'breakdown': '5126267009b512fe'},
 'replicas_prefetch': {'cycle_count': 285107,
                       'trace': '7fa89047fed1f2be',
                       'op_trace': '0af4da0de6b5b437',
                       'perf_counters': '010a7f6c28522ca4',
                       'latency': '(2.502641509433961e-05, 2.502641509433964e-05, 2.5026415094339622e-05)',
                       'compute_latency': '(1.727773584905659e-05, 1.7277735849056605e-05, '
                                          '1.7277735849056605e-05)',
                       'breakdown': '16f54b2128c91222'},
 'off_chip_rts': {'cycle_count': 91855792,
                  'trace': '02bd5458f4f7745c',
                  'op_trace': 'da9b33bf81c46fc9',
                  'perf_counters': 'b592506f1aea4e88',
                  'latency': '(0.03490638264150943, 0.06932500528301887, 0.05211569396226415)',
                  'compute_latency': '(0.0344532958490566, 0.06887191849056604, 0.05166260716981132)',
                  'breakdown': 'e9bab16b514691bd'}}


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
