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
    # Adam/LAMB's two phases and LAMB's norms, and popops' reduction plan with the fp32 AMP vertex
 'pipeline_training': {'cycle_count': 16404918,
                       'trace': '755c730fdc78d59c',
                       'op_trace': '40b75fd35938188d',
                       'perf_counters': '367dc71cb529e20b',
                       'latency': '(0.012381070188679245, 0.012381070188679245, 0.012381070188679245)',
                       'compute_latency': '(0.01192846641509434, 0.01192846641509434, 0.01192846641509434)',
                       'breakdown': 'f793e655eef5956b'},
 'pipeline_inference_prefetch': {'cycle_count': 3475132,
                                 'trace': '36924ebde026a1f8',
                                 'op_trace': '7ecb7ec67878dfe3',
                                 'perf_counters': '5734a0260fbf1b38',
                                 'latency': '(0.0012671011320754715, 0.001552101886792453, '
                                            '0.0014460852830188678)',
                                 'compute_latency': '(0.0002637999999999998, 0.0004890943396226415, '
                                                    '0.00041480547169811316)',
                                 'breakdown': '210c4f74eb5e159b'},
 'pipeline_replicas': {'cycle_count': 34265372,
                       'trace': 'aa11728b0757de2b',
                       'op_trace': '1fab371a491950ef',
                       'perf_counters': 'ded379f8bc06b8ed',
                       'latency': '(0.016723560754716982, 0.025860537358490567, 0.021292049056603774)',
                       'compute_latency': '(0.015310763018867926, 0.025407450566037736, 0.02035910679245283)',
                       'breakdown': '2c2073eb33722b5e'},
 'deep_pipeline': {'cycle_count': 29289250,
                   'trace': '64473fa6804aee3a',
                   'op_trace': '8799b32a5387aad2',
                   'perf_counters': '625e87acc3233266',
                   'latency': '(0.022104792452830188, 0.022104792452830188, 0.022104792452830188)',
                   'compute_latency': '(0.020366175094339623, 0.020366175094339623, 0.020366175094339623)',
                   'breakdown': '5ec6bc012cfea76d'},
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
 'off_chip_rts': {'cycle_count': 91727394,
                  'trace': 'bf39957dd6114c81',
                  'op_trace': '530b73f0ae0ce5f0',
                  'perf_counters': 'e7f5fb4a0b342a22',
                  'latency': '(0.03485793056603774, 0.06922810113207548, 0.05204301584905661)',
                  'compute_latency': '(0.03440484377358491, 0.06877501433962264, 0.05158992905660378)',
                  'breakdown': 'bc82611bb20bcd19'}}


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
