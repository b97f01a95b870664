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
    # PopART's one collective per tensor in the weight update, softmax and layer norm as their popops calls
 'pipeline_training': {'cycle_count': 17558034,
                       'trace': 'b8d7a2689424f978',
                       'op_trace': 'd5b52b69ef301905',
                       'perf_counters': 'd65881c511346ae1',
                       'latency': '(0.01325134641509434, 0.01325134641509434, 0.01325134641509434)',
                       'compute_latency': '(0.012773855094339624, 0.012773855094339624, '
                                          '0.012773855094339624)',
                       'breakdown': '9fea210f2d60e1f3'},
 'pipeline_inference_prefetch': {'cycle_count': 3596063,
                                 'trace': '3564bc22767b2b74',
                                 'op_trace': 'f951a9d4c72ad229',
                                 'perf_counters': '84d31be21d9f7bb9',
                                 'latency': '(0.0013151101886792452, 0.0016030686792452833, '
                                            '0.0014909067924528303)',
                                 'compute_latency': '(0.0002747328301886793, 0.0005122158490566039, '
                                                    '0.00043413396226415097)',
                                 'breakdown': 'ca69e2a98673ebcb'},
 'pipeline_replicas': {'cycle_count': 42557213,
                       'trace': 'd984a728074aabc6',
                       'op_trace': '793e061c15340f26',
                       'perf_counters': 'e09659a144d7887b',
                       'latency': '(0.020858344905660374, 0.03211853056603774, 0.026488437735849055)',
                       'compute_latency': '(0.019324784150943394, 0.031640556226415095, '
                                          '0.025482670188679245)',
                       'breakdown': '46d093e75f9ec6fa'},
 'deep_pipeline': {'cycle_count': 31654780,
                   'trace': 'bf44da21568486c0',
                   'op_trace': '5a54837f8be2658b',
                   'perf_counters': 'c3bb9a72c89c5881',
                   'latency': '(0.023890098113207546, 0.023890098113207546, 0.023890098113207546)',
                   'compute_latency': '(0.022051930566037735, 0.022051930566037735, 0.022051930566037735)',
                   'breakdown': '570469a1e7b52230'},
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
 'off_chip_rts': {'cycle_count': 97369354,
                  'trace': 'e9dac2d350a5f2e2',
                  'op_trace': 'cd76b8cd93e8461e',
                  'perf_counters': '75363a6e915cf8e3',
                  'latency': '(0.03698697207547169, 0.07348618415094339, 0.05523657811320754)',
                  'compute_latency': '(0.03650899773584905, 0.07300820981132075, 0.0547586037735849)',
                  'breakdown': '7faa2474dfdb6cb8'}}


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
