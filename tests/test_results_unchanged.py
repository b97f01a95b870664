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
    # every GCL collective step waiting for a sync over the whole partition (partition_sync)
    # momentum and plain SGD's updates as PopART runs them (the learning rate on one tile, one or two ScaledAdds,
    # a separate gradient accumulator zeroed after them)
    # popops' broadcast vertices for a vector repeated over a tensor (bias adds, the norms' whitening, gamma and
    # beta, softmax's row steps) and batch norm as poplin's norm steps per channel
    # a host process's one stream-callback thread filling its replicas' input buffers in turn
    # matmul passes as poplin plans them: padded channels rearranged, separate fc passes swapped or not, the
    # weight update's operands rearranged, the fp16-partials AMP (sim/cost/amp.py matmul_padding, swap_or_not)
    # fp16 HMAC beside the AMP, and plans chosen on poplin's own estimate (no syncs, no exchange set-ups)
    # the separate weight update swapped or not, and a matmul's result not live beside its operand blocks
    # popnn's GELU and its gradient as their assembly loops run (configs/_vector-ops.toml, CODELET)
    # streaming memory at its measured 7.11 GB/s; popops' multiSlice / multiUpdateOp as SDK 3.x poplibs plans them
    # PopART's outlined calls copying what they read in and what they make out (sim/compiler/outlining.py),
    # like ops matched whatever tensors they name, and repeated layers found without blocks
    # a norm's scale and shift gradients one reduce over all but the channels (poplin normParamGradients)
    # PopART's autodiff: a tensor's gradient parts summed once, a ReLU's gradient reading its output, the
    # reductions', where's, max's, div's and the unary ops' gradients as its grad patterns make them
    # a pipeline's weight update one IPU at a time under PopART's default Serial schedule
    # a tied head's inference matmul planned as INFERENCE_FWD (PopART marks every matmul of an inference IR)
    # a split dictionary's second-stage indices as popops' unfused map (three index ops, the divide fitted)
    # a scatter-add's or embedding gradient's zeroed table at the rate fitted on the Bow scatter sweep (table_zero)
    # a multi-update's scale a Copy when the partials are in its type (popops Cast.cpp), not a cast
    # losses as the PopART ops each front end lowers them to (sim.cost.row_ops.loss_steps)
    # the run's first copy of each input fetched on demand whatever the prefetch depth (prefetches invalidated)
    # PopART's outplace GELU / Swish copying their input first when their gradient reads it (cloneNcopy)
    # operands laid out by another op copied into a matmul's layout when read on more than 7 tiles (relaid)
    # HMAC's per-worker opening term and its fp16-partials form (poplin's estimate and candidates)
    # a recomputation checkpoint outlined as any other op (PopART's Op::appendOutlineAttributes)
    # popops' outer broadcast by column for rows of at least six workers' vectors, the scalar broadcast
    # (and PopART's ScaleOp) as BroadcastScalar1D, ReLU and sigmoid on popops' in-place unary vertex
    # float add/sub/mul of a repeated vector copied then BinaryOp1D (popops takes no inner vertex), swish's
    # fixed cycles, the nx1 worklists skipping padded (output, kernel) pairs in forward / same-padded passes
    # a matmul or convolution pass's fixed cycles refitted (990) with the conv tool's graph-function copies
    # PopART's StepIO callback on the host thread before each replica's input copy (stream_callback_s)
    # a buffering depth of N as N buffers ahead of the IPU, as Poplar prefetches (was N - 1)
    'pipeline_training': {'cycle_count': 19178822,
                          'trace': '8008c60d88059e0b',
                          'op_trace': 'd1aaeddba3f37038',
                          'perf_counters': '5b49d8522c834d01',
                          'latency': '(0.014474582641509434, 0.014474582641509434, 0.014474582641509434)',
                          'compute_latency': '(0.013828704150943397, 0.013828704150943397, '
                                             '0.013828704150943397)',
                          'breakdown': '7c4a5890616fbdc7'},
    'pipeline_inference_prefetch': {'cycle_count': 2674831,
                                    'trace': '43f140951b00a874',
                                    'op_trace': '5103a3c4570bb2a9',
                                    'perf_counters': '477c4143140aaf5a',
                                    'latency': '(0.0007129320754716982, 0.0010093275471698112, '
                                               '0.0009139094339622641)',
                                    'compute_latency': '(0.0002002083018867926, 0.00041173358490566043, '
                                                       '0.00034287377358490576)',
                                    'breakdown': 'e295c015029f8038'},
    'pipeline_replicas': {'cycle_count': 48503752,
                          'trace': 'fb7e4abff41fa0e5',
                          'op_trace': '68d7537ec792c454',
                          'perf_counters': 'ff2c80966325897f',
                          'latency': '(0.02329771094339623, 0.03660648452830189, 0.02995209773584906)',
                          'compute_latency': '(0.021661123018867922, 0.03569905735849056, 0.028680090188679244)',
                          'breakdown': 'f564bf16e1bba570'},
    'deep_pipeline': {'cycle_count': 34666056,
                      'trace': 'ee07a878a00dc712',
                      'op_trace': 'dfce0ecb6b0b7c41',
                      'perf_counters': '69da168b345e32c9',
                      'latency': '(0.02616275924528302, 0.02616275924528302, 0.02616275924528302)',
                      'compute_latency': '(0.024254903396226414, 0.024254903396226414, 0.024254903396226414)',
                      'breakdown': '439ad7adfa4ddfad'},
    'io_tiles_overlap': {'cycle_count': 3598052,
                         'trace': '0e5bae94be67dde3',
                         'op_trace': 'da0253fe755475fc',
                         'perf_counters': '5faf2a5ab796950a',
                         'latency': '(0.00021165509433962264, 0.0002907033962264154, 0.000284728603773585)',
                         'compute_latency': '(0.00013178188679245284, 0.0002518098113207549, '
                                            '0.00024378603773584907)',
                         'breakdown': '251594b84213ece3'},
    'replicas_prefetch': {'cycle_count': 2052490,
                          'trace': '01b2df9ab94589f9',
                          'op_trace': 'ad7e3c970870bc61',
                          'perf_counters': '4f8547e076b09684',
                          'latency': '(9.808150943396233e-05, 0.0004359290566037736, 0.0002520461006289309)',
                          'compute_latency': '(2.147245283018852e-05, 2.147245283018874e-05, '
                                             '2.1472452830188657e-05)',
                          'breakdown': '80d1150fa6e304f6'},
    'off_chip_rts': {'cycle_count': 188640813,
                     'trace': '7d3d995a9559cc4f',
                     'op_trace': '77ce7b978bb76bb8',
                     'perf_counters': '3879eac2efab7708',
                     'latency': '(0.07100268150943395, 0.14237030415094337, 0.10668649283018866)',
                     'compute_latency': '(0.07046544000000002, 0.14146287698113208, 0.10596415849056605)',
                     'breakdown': '250cee4318f2fc79'},
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
