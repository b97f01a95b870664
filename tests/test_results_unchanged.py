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
    # PopART's one collective per tensor in the weight update, softmax and layer norm as their popops calls,
    # PopART's prefetch refilling an input's one buffer while the IPU computes,
    # the exchange efficiency (0.87 of the 4-byte width) and the pass's fixed cycles fitted with it (1100),
    # GCL's collective methods and their fitted step times,
    # every pipeline cycle copying all stages' sends (PopART's addPipelineCycle)
 'pipeline_training': {'cycle_count': 17246168,
                       'trace': 'dbab3775331f9a2a',
                       'op_trace': '15a594486c870a01',
                       'perf_counters': 'a52ed28fba20ad36',
                       'latency': '(0.013015975849056604, 0.013015975849056604, 0.013015975849056604)',
                       'compute_latency': '(0.01260140679245283, 0.01260140679245283, 0.01260140679245283)',
                       'breakdown': 'cfac74f8e68ca1f6'},
 'pipeline_inference_prefetch': {'cycle_count': 3605400,
                                 'trace': 'dfe8e24d05e87ef4',
                                 'op_trace': '1da86b8074672a3c',
                                 'perf_counters': 'ec2345c8cfebb509',
                                 'latency': '(0.001317182641509434, 0.0016091162264150944, '
                                            '0.001495181886792453)',
                                 'compute_latency': '(0.0002753290566037735, 0.0005154354716981131, '
                                                    '0.00043633150943396217)',
                                 'breakdown': 'cecd4254f3ca4257'},
 'pipeline_replicas': {'cycle_count': 42329948,
                       'trace': '9d6328c238cf29d3',
                       'op_trace': '1035f723b86776a0',
                       'perf_counters': 'ff6ce1a2f5049944',
                       'latency': '(0.02081173811320755, 0.03194700981132076, 0.026379373962264155)',
                       'compute_latency': '(0.019382387169811322, 0.03153195773584906, 0.02545717245283019)',
                       'breakdown': 'de24d93c76136788'},
 'deep_pipeline': {'cycle_count': 30633205,
                   'trace': 'e386eb5215ec97cc',
                   'op_trace': '3a5c6e368b15a63a',
                   'perf_counters': '8d5e8505b3ed5ae6',
                   'latency': '(0.02311909811320755, 0.02311909811320755, 0.02311909811320755)',
                   'compute_latency': '(0.02153261962264151, 0.02153261962264151, 0.02153261962264151)',
                   'breakdown': '42441e8802d2a17c'},
 'io_tiles_overlap': {'cycle_count': 3135554,
                      'trace': '19712d670d73dd83',
                      'op_trace': '54735a3d93e3a666',
                      'perf_counters': '50f58d900c9d2b5b',
                      'latency': '(0.00017567698113207548, 0.000257747924528302, 0.00025259701886792455)',
                      'compute_latency': '(0.00011530415094339623, 0.00021885433962264163, '
                                         '0.00021262947169811323)',
                      'breakdown': '32e62509f2c594b5'},
 'replicas_prefetch': {'cycle_count': 284078,
                       'trace': '00d740a6deb1cdaa',
                       'op_trace': 'f13550c725a3f8ce',
                       'perf_counters': '2a2f2cc9eafd86cb',
                       'latency': '(2.4249811320754697e-05, 2.4249811320754724e-05, 2.4249811320754724e-05)',
                       'compute_latency': '(1.650113207547169e-05, 1.6501132075471718e-05, '
                                          '1.6501132075471694e-05)',
                       'breakdown': '703e9b7c3b905576'},
 'off_chip_rts': {'cycle_count': 98015400,
                  'trace': '60687f1cd53ce4fe',
                  'op_trace': '861959ecb03e3ea7',
                  'perf_counters': 'a24016c3f4c8cf14',
                  'latency': '(0.03722052905660377, 0.07397376603773585, 0.05559714754716981)',
                  'compute_latency': '(0.03682594490566038, 0.07355871396226416, 0.05519232943396227)',
                  'breakdown': '12e120e05e9580b6'}}


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
    gives op_trace(expand=True), which is the trace of every run. Without prefetched inputs both
    loops collapse, so each op is one row repeated 50 x 4 times; with them (the default) the loops
    run their steady state, and the listing still does not grow with the iterations."""
    o = sim.Options().deviceIterations(50)
    o.Training.gradientAccumulation(4)
    o._Popart.set("enablePrefetchDatastreams", False)
    run = sim.simulate(models.get("mlp", micro_batch=8), "ipu-mk2", o, training=True)
    compact, every = run.op_trace(), run.op_trace(expand=True)
    assert list(compact.columns) == list(every.columns) + ["repeats"]
    assert compact["repeats"].sum() == len(every) and compact["repeats"].max() == 50 * 4
    assert (compact["compute"] * compact["repeats"]).sum() == every["compute"].sum()
    first = every.drop_duplicates(["task", "name"])  # each op's first run
    assert first["start"].tolist() == compact.drop_duplicates(["task", "name"])["start"].tolist()
    more = sim.simulate(models.get("mlp", micro_batch=8), "ipu-mk2", o.deviceIterations(500), training=True)
    assert len(more.op_trace()) == len(compact)  # does not grow with device iterations
    o._Popart.set("enablePrefetchDatastreams", True)
    steady = [len(sim.simulate(models.get("mlp", micro_batch=8), "ipu-mk2", o.deviceIterations(n),
                               training=True).op_trace()) for n in (50, 500)]
    assert steady[0] == steady[1]


if __name__ == "__main__":  # re-record EXPECTED after a deliberate change of costs
    import pprint
    pprint.pprint({name: digests(case()) for name, case in cases().items()}, width=110, sort_dicts=False)
