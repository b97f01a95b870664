"""A pipeline's stash and restore ops as PopART grows them (StashOpx, RestoreOpx): their cycles,
which stages run them and how often."""

import math

import models
import sim
from sim.cost.vector import dynamic_slice_tile_cycles, tile_cycles
from sim.schedule.stash import INDEX_BYTES, stash_op_cost
from sim.graph.ir import Tensor
from sim.strategy import AutoStage, PipelinedExecution, ShardedExecution

MK2 = sim.load_system("ipu-mk2").ipu


def test_a_stash_moves_the_tensor_on_its_tiles_at_an_index_it_then_advances():
    """One stash of a [4096, 1024] fp16 activation: the index sent to the tensor's tiles (one
    exchange phase), popops' dynamic update of each tile's 2,850 elements, the index's add and
    remainder on one tile; four syncs; nothing moves between tiles but the index."""
    t = Tensor("x", (4096, 1024), "float16", "activation")
    c = stash_op_cost(t, MK2, MK2.tiles)
    per_tile = math.ceil(4096 * 1024 / MK2.tiles)
    move = dynamic_slice_tile_cycles(per_tile, 2, MK2.worker_threads)
    index = tile_cycles(1, INDEX_BYTES, "add", MK2) + tile_cycles(1, INDEX_BYTES, "remainder", MK2)
    assert c.compute_cycles == move + index
    assert c.supersteps == 3 and c.sync_cycles == 4 * MK2.internal_sync_cycles
    assert c.exchange_bytes == INDEX_BYTES * MK2.tiles and c.exchange_setup_cycles == MK2.exchange_setup_cycles
    assert c.tiles_used == MK2.tiles and c.profile.compute[0] == move + index and c.profile.compute[1] == move


def _bert_pipeline(strategy=None):
    g = models.get("bert-base", micro_batch=2, seq_len=128, num_layers=4, layers_per_ipu=[1, 1, 1, 1])
    o = sim.Options().enableSyntheticData(True)
    o.Training.gradientAccumulation(16)
    if strategy is not None:
        o.setExecutionStrategy(strategy)
    return sim.simulate(g, "ipu-m2000", o, training=True, optimizer="sgd")


def test_every_stashing_forward_stage_stashes_and_its_backward_restores_each_micro_batch():
    """On a 4-IPU pipeline (5 forward stages: the MLM head goes back to IPU 0), the forward stages
    with a stash (all but the last) run a stash step every micro-batch, and their backward stages a
    restore step, one op per stashed tensor; the stash and its restore cost the same."""
    run = _bert_pipeline()
    ex = run.executable
    trace = run.trace
    stashing = [s for s in ex.stages if s.stash_depth > 0]
    forward = [s for s in ex.stages if s.forward_stage == s.index]
    assert len(forward) == 5 and stashing == forward[:-1]
    for s in stashing:
        stash = trace[trace.name == f"stage {s.index} stash"]
        backward = next(b for b in ex.stages if b.forward_stage == s.index and b is not s)
        restore = trace[trace.name == f"stage {backward.index} restore"]
        assert len(stash) == len(restore) == 16  # one a micro-batch
        assert stash.cycles.iloc[0] == restore.cycles.iloc[0] > 0
    ops = run.op_trace()
    assert ops.name.str.startswith("stash/").sum() == ops.name.str.startswith("restore/").sum() > 0


def test_sharded_training_keeps_no_stash():
    """Without pipelining (ShardedExecution) a micro-batch's forward and backward run back to back:
    no stash or restore steps."""
    run = _bert_pipeline(ShardedExecution(AutoStage.AutoIncrement))
    assert not run.trace.name.str.contains(" stash| restore").any()


def test_a_block_per_layer_pipelines_as_one_stage_per_ipu_as_popart_merges_them():
    """Graphcore's PyTorch BERT and GPT-2 put every layer in its own block under
    AutoStage.AutoIncrement, one PopTorch stage each; PopART merges consecutive stages on one IPU
    (mergeConsecutivePipelineStages), so the pipeline, its stash and its program are the same as one
    stage per IPU: 3 forward stages here (embedding to layer 1 on IPU 0, layers 2-3 on IPU 1, the head
    back on IPU 0), 5 in all, and GA 5 is enough, as PopTorch counts stages by IPU changes."""
    g = models.get("bert-base", micro_batch=2, seq_len=128, num_layers=4, layers_per_ipu=[2, 2])
    assert len({op.block for op in g.ops if op.pass_ == "forward"}) == 6  # a block per layer
    runs = []
    for strategy in (None, PipelinedExecution(AutoStage.AutoIncrement)):
        o = sim.Options().enableSyntheticData(True)
        o.Training.gradientAccumulation(5)
        if strategy is not None:
            o.setExecutionStrategy(strategy)
        runs.append(sim.simulate(g, "ipu-m2000", o, training=True, optimizer="sgd"))
    assert [len(r.executable.stages) for r in runs] == [5, 5]
    assert runs[0].cycle_count == runs[1].cycle_count
    assert [s.stash_depth for s in runs[0].executable.stages] == [s.stash_depth for s in runs[1].executable.stages]


def test_a_pipeline_that_recomputes_nothing_stashes_every_activation_its_backward_stages_read():
    """autoRecomputation None (PopART's default for a pipeline): each forward stage stashes every tensor it makes
    that its backward stage reads, each micro-batch (transforms/pipeline.cpp: with no recomputation all stash
    candidates are stashed), one stash and one restore op each; the backward stages recompute nothing. So the
    stash holds more than Pipeline's (the stage's inputs and checkpoints) and the run takes fewer cycles."""
    def run(auto):
        o = sim.Options().enableSyntheticData(True).setExecutionStrategy(PipelinedExecution(AutoStage.AutoIncrement))
        o.Training.gradientAccumulation(16)
        o._Popart.set("autoRecomputation", auto)
        g = models.get("bert-base", micro_batch=2, seq_len=128, num_layers=4, layers_per_ipu=[2, 2],
                       recompute_checkpoint_every_layer=True)
        return sim.simulate(g, "ipu-m2000", o, training=True, optimizer="sgd")
    kept, again = run(0), run(3)
    ex = kept.executable
    for s in ex.stages[len(ex.stages) // 2 + 1:]:  # the backward stages with a stash behind them
        forward = ex.stages[s.forward_stage]
        made = {t for op in forward.ops for t in op.outputs}
        read = {t for op in s.ops for t in op.inputs} & made
        assert read and read <= s.restored and not s.recomputed
        assert forward.stashed_bytes == sum(ex.graph.tensors[t].nbytes for t in read)
    ops = kept.op_trace()
    assert ops.name.str.startswith("stash/").sum() > again.op_trace().name.str.startswith("stash/").sum()
    assert kept.memory[0]["peak_tile_parts"]["stash"] > again.memory[0]["peak_tile_parts"]["stash"]
    assert kept.cycle_count < again.cycle_count


def test_sharded_training_keeps_one_micro_batch_of_its_stage_inputs():
    """ShardedExecution runs one micro-batch at a time, so a forward stage's inputs are kept for its backward
    stage once, not as deep as a pipeline's stash would hold them."""
    run = _bert_pipeline(ShardedExecution(AutoStage.AutoIncrement))
    stages = run.executable.stages
    assert [s.stash_depth for s in stages if s.stash_depth] == [1] * (len(stages) // 2)
