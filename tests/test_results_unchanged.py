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
    # PopART's prefetch refilling an input's one buffer while the IPU computes
 'pipeline_training': {'cycle_count': 17205474,
                       'trace': '852e205cb0056ff6',
                       'op_trace': 'a4b84c1fc30591d5',
                       'perf_counters': '97b4bec571b1656b',
                       'latency': '(0.012985263396226415, 0.012985263396226415, 0.012985263396226415)',
                       'compute_latency': '(0.01256954716981132, 0.01256954716981132, 0.01256954716981132)',
                       'breakdown': '4eed2462bebe5f4e'},
 'pipeline_inference_prefetch': {'cycle_count': 3596063,
                                 'trace': '3564bc22767b2b74',
                                 'op_trace': 'f951a9d4c72ad229',
                                 'perf_counters': '84d31be21d9f7bb9',
                                 'latency': '(0.0013151101886792452, 0.0016030686792452833, '
                                            '0.0014909067924528303)',
                                 'compute_latency': '(0.0002747328301886793, 0.0005122158490566039, '
                                                    '0.00043413396226415097)',
                                 'breakdown': 'ca69e2a98673ebcb'},
 'pipeline_replicas': {'cycle_count': 41770733,
                       'trace': 'fde1a587d38b882e',
                       'op_trace': 'bc7432e63fc37788',
                       'perf_counters': 'ba3da3165fcc2847',
                       'latency': '(0.02053122943396226, 0.03152496075471698, 0.02602809509433962)',
                       'compute_latency': '(0.019100008301886788, 0.03110876150943396, 0.025104384905660374)',
                       'breakdown': 'd9a88ee24916c1f7'},
 'deep_pipeline': {'cycle_count': 30597100,
                   'trace': '2353689992095e78',
                   'op_trace': '529dbac18796b1ef',
                   'perf_counters': 'a4cc95a58887e73a',
                   'latency': '(0.023091849056603775, 0.023091849056603775, 0.023091849056603775)',
                   'compute_latency': '(0.021500781886792455, 0.021500781886792455, 0.021500781886792455)',
                   'breakdown': '2e222601a9538fc1'},
 'io_tiles_overlap': {'cycle_count': 3356874,
                      'trace': 'bd18f6ab2f69847c',
                      'op_trace': '585cb6436d6af29c',
                      'perf_counters': '60b818acfe386bd3',
                      'latency': '(0.00018402867924528302, 0.0002745018867924532, 0.0002689283396226415)',
                      'compute_latency': '(0.00012365584905660377, 0.0002356083018867927, '
                                         '0.0002289607924528302)',
                      'breakdown': '44891cf51ae857c5'},
 'replicas_prefetch': {'cycle_count': 285460,
                       'trace': 'bd28061192e73d97',
                       'op_trace': '619c8e1c2a7171a9',
                       'perf_counters': 'a25954ec85d92efa',
                       'latency': '(2.5292830188679223e-05, 2.529283018867925e-05, 2.529283018867924e-05)',
                       'compute_latency': '(1.7544150943396217e-05, 1.7544150943396244e-05, '
                                          '1.754415094339622e-05)',
                       'breakdown': 'b200064ec5bd79a2'},
 'off_chip_rts': {'cycle_count': 96854074,
                  'trace': 'c00ab2cf8614b457',
                  'op_trace': '2dbb1dadc168fbe2',
                  'perf_counters': 'bba73d286b3319d8',
                  'latency': '(0.036782292830188676, 0.07309729358490566, 0.05493979320754717)',
                  'compute_latency': '(0.03638656150943396, 0.07268109433962264, 0.054533827924528294)',
                  'breakdown': '7c75ca0e0bc60466'}}


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
