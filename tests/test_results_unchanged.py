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
    # the fp16 AMP vertex's pair cost with its conv units' weight load (amp_pair_cycles) and the vertex overhead refitted
    # PopART's minElementsForReplicatedTensorSharding (8192: smaller tensors unsharded) and BERT's MLM training
    # returning its loss only, as Graphcore's scripts anchor it
    # the gradient of a tensor read through slices as PopART assembles it (SliceGradOp pads, PadSum concatenates)
    # a loss's short rows spread no thinner than poputil's 128 bytes a tile, and its statistics' exchange bytes
    # a dropout's gradient as the dropout it is (PopART's DropoutGradOp reruns poprand::dropout), not a multiply
    # inference matmuls of a weight planned as INFERENCE_FWD (PopART, TensorFlow): operands swapped when poplin prefers
    # the seed programs poprand wraps around every dropout given a seed tensor (getHwSeeds, setSeed, setHwSeeds)
    # and PopART's ModifyRandomSeedOp making each forward dropout's seed
    # a pipeline's stash and restore ops (PopART's StashOpx / RestoreOpx) every micro-batch
    # popops' embedding plan, lookup and scatter-add (sim/cost/embedding.py)
 'pipeline_training': {'cycle_count': 17008295,
                       'trace': 'b7cf1cd0838f3a86',
                       'op_trace': '882a13a84d49413c',
                       'perf_counters': 'a7dca88923198dff',
                       'latency': '(0.012836449056603774, 0.012836449056603774, 0.012836449056603774)',
                       'compute_latency': '(0.012408065660377358, 0.012408065660377358, '
                                          '0.012408065660377358)',
                       'breakdown': '28b9ee14c274e4b2'},
 'pipeline_inference_prefetch': {'cycle_count': 2402375,
                                 'trace': '44543cdd076bee2d',
                                 'op_trace': 'c2936e23e88d5f2a',
                                 'perf_counters': '7efb3fa65d4a1b85',
                                 'latency': '(0.0007280226415094339, 0.0009511335849056604, '
                                            '0.000849822075471698)',
                                 'compute_latency': '(0.00020619018867924538, 0.0004223049056603774, '
                                                    '0.0003510511320754717)',
                                 'breakdown': '9634fa40a7c74885'},
 'pipeline_replicas': {'cycle_count': 42292805,
                       'trace': 'c69581350fe948f3',
                       'op_trace': '18cd01f6f0207e8c',
                       'perf_counters': '58efcd3b44aa686d',
                       'latency': '(0.02061571924528302, 0.03191897735849057, 0.026267348301886796)',
                       'compute_latency': '(0.019128311698113208, 0.031490110943396224, '
                                          '0.025309211320754716)',
                       'breakdown': '95fc8031bb2b9a51'},
 'deep_pipeline': {'cycle_count': 30846712,
                   'trace': '59452cf3277b2eac',
                   'op_trace': 'a5e94390b1d3dfa0',
                   'perf_counters': 'ce591bdbbeaeca1f',
                   'latency': '(0.023280235471698114, 0.023280235471698114, 0.023280235471698114)',
                   'compute_latency': '(0.021639224150943395, 0.021639224150943395, 0.021639224150943395)',
                   'breakdown': 'fbbb73a284dc09ff'},
 'io_tiles_overlap': {'cycle_count': 3087394,
                      'trace': '80a22e0ae2860ffa',
                      'op_trace': '56a42dc3b0a12982',
                      'perf_counters': 'ccd113d6b85fc9fb',
                      'latency': '(0.00017385962264150943, 0.00025411320754717, 0.00024905316981132077)',
                      'compute_latency': '(0.00011348679245283018, 0.00021521962264150953, '
                                         '0.00020908562264150945)',
                      'breakdown': '156f8a3f6959c75d'},
 'replicas_prefetch': {'cycle_count': 283157,
                       'trace': '181fe85d793d6d30',
                       'op_trace': 'c80df5c768235eb1',
                       'perf_counters': 'f72f1bcaf9eac9d9',
                       'latency': '(2.3554716981132056e-05, 2.3554716981132083e-05, 2.355471698113208e-05)',
                       'compute_latency': '(1.580603773584905e-05, 1.5806037735849077e-05, '
                                          '1.5806037735849057e-05)',
                       'breakdown': '5a37474e6e316464'},
 'off_chip_rts': {'cycle_count': 97268453,
                  'trace': 'a659525c1a00e453',
                  'op_trace': '2d59f9c360cafbd5',
                  'perf_counters': 'bd883f2140bb4f88',
                  'latency': '(0.036697404528301884, 0.07341003245283019, 0.055053718490566034)',
                  'compute_latency': '(0.03628900603773585, 0.07298116603773584, 0.05463508603773584)',
                  'breakdown': '7e7fb3fc2299032e'}}


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
