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
    # GCL's collective methods and their fitted step times
 'pipeline_training': {'cycle_count': 17224262,
                       'trace': '8d8c73a15056eb96',
                       'op_trace': '4889262a8f9addd1',
                       'perf_counters': '1de258b59b7e7f04',
                       'latency': '(0.012999443018867924, 0.012999443018867924, 0.012999443018867924)',
                       'compute_latency': '(0.01258487396226415, 0.01258487396226415, 0.01258487396226415)',
                       'breakdown': '36833a4d96a892f1'},
 'pipeline_inference_prefetch': {'cycle_count': 3605400,
                                 'trace': '983ca846f2270685',
                                 'op_trace': 'da63e2de63599522',
                                 'perf_counters': '5364a26087928589',
                                 'latency': '(0.001317182641509434, 0.0016091162264150944, '
                                            '0.001495181886792453)',
                                 'compute_latency': '(0.0002753094339622642, 0.0005154354716981131, '
                                                    '0.00043632660377358485)',
                                 'breakdown': '3e8824fd8f639017'},
 'pipeline_replicas': {'cycle_count': 42297089,
                       'trace': 'e8f92ceb277b5685',
                       'op_trace': '0a486786342a46ce',
                       'perf_counters': 'cd0e126cb7933d3d',
                       'latency': '(0.020795205283018866, 0.03192221056603774, 0.026358707924528303)',
                       'compute_latency': '(0.019365854339622637, 0.03150715849056604, 0.02543650641509434)',
                       'breakdown': 'abe5bc6830e30233'},
 'deep_pipeline': {'cycle_count': 30621940,
                   'trace': 'afe56ca20bc4f9f4',
                   'op_trace': 'd121e960f79f26c8',
                   'perf_counters': '67a9428f5dfbed04',
                   'latency': '(0.023110596226415096, 0.023110596226415096, 0.023110596226415096)',
                   'compute_latency': '(0.021524117735849058, 0.021524117735849058, 0.021524117735849058)',
                   'breakdown': 'b6bf3221c7ea596c'},
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
 'off_chip_rts': {'cycle_count': 97993494,
                  'trace': 'e2bbe31eaff2f6c3',
                  'op_trace': '7c5f531e56d02355',
                  'perf_counters': 'a547698e76914e6f',
                  'latency': '(0.03721226264150943, 0.07395723320754717, 0.055584747924528305)',
                  'compute_latency': '(0.03681767849056604, 0.07354218113207547, 0.055179929811320756)',
                  'breakdown': 'b589aa6af58f7414'}}


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
