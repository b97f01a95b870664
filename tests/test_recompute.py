"""Recomputation in a training model that is not pipelined, as PopART's autoRecomputation and the
user's marks decide it (sim.schedule.recomputation)."""

import re

import pytest

import models
import sim
from sim.errors import OptionsError
from sim.schedule import recomputation
from sim.strategy import (AutoStage, Liveness, Phase, PipelinedExecution, SerialPhasedExecution, ShardedExecution,
                          Stage)
from sim.validation.memory_statements import checkpointed_lstm


def _options(auto: int | None = 4, explicit: bool = False) -> sim.Options:
    """Synthetic data, PopART's outlining off (the ops' own costs: checkpoints would move its calls), and
    ``autoRecomputation`` ``auto`` (RecomputeAll by default; None: not set)."""
    o = sim.Options().enableSyntheticData(True)
    o._Popart.set("enableOutlining", False)
    if auto is not None:
        o._Popart.set("autoRecomputation", auto)
    if explicit:
        o._Popart.set("explicitRecomputation", True)
    return o


def _stack(checkpoints: bool, layers: int = 8) -> sim.Graph:
    b = sim.GraphBuilder("stack", "float16")
    x = b.input("x", (512, 1024))
    labels = b.input("labels", (512,), "int32")
    h = x
    for i in range(layers):
        with b.scope(f"l{i}"):
            h = b.gelu(b.linear(h, 1024))
        if checkpoints and i % 2 == 1:
            b.checkpoint(h)
    b.softmax_cross_entropy(b.linear(h, 16, name="head"), labels)
    b.output(b.graph.loss)
    return b.graph


def _run(checkpoints: bool, auto: int | None = 4, explicit: bool = False) -> sim.Run:
    return sim.simulate(_stack(checkpoints), "ipu-mk2", _options(auto, explicit), training=True)


def test_checkpoints_trade_compute_for_memory():
    """With RecomputeAll and checkpoints every two layers, the non-checkpoint activations of all but the last
    segment are recomputed: less tile memory, more compute, the extra compute being exactly
    the recomputed forward ops."""
    plain, ckpt = _run(False), _run(True)
    assert ckpt.memory[0]["peak_tile_bytes"] < plain.memory[0]["peak_tile_bytes"]
    stage = ckpt.executable.stages[0]
    recomputed = {op.name for op in stage.recomputed}
    assert recomputed and all(not op.attrs.get("recomputation_checkpoint") for op in stage.recomputed)
    extra = sum(ckpt.executable.costs[n].cycles for n in recomputed)
    assert ckpt.cycle_count - plain.cycle_count == extra
    ops = ckpt.op_trace()
    assert ops["name"].str.endswith("(recompute)").sum() == len(stage.recomputed)


def test_recomputed_segments_run_just_before_their_backward():
    """Each segment is recomputed right before the backward ops of that segment, last first;
    the last segment (after the last checkpoint) is not recomputed."""
    stage = sim.compile(_stack(True), "ipu-mk2", _options(), training=True).stages[0]
    forward, run2 = stage.memory_runs
    recomputed = {id(op) for op in stage.recomputed}

    def segment(op):  # layers l0,l1 | l2,l3 | l4,l5 | l6,l7 | head
        layer = op.name.split("/")[0]
        return 4 if layer == "head" or not layer.startswith("l") else int(layer[1:]) // 2
    blocks, current = [], None
    for i, op in enumerate(run2):
        if id(op) in recomputed:
            if current is None:
                current = (segment(op), i)
        elif current is not None:
            blocks.append((current[0], run2[i]))
            current = None
    assert [seg for seg, _ in blocks] == [3, 2, 1, 0]  # last segment first; segment 4 kept
    by_name = {op.name: op for op in forward}
    for seg, first_backward in blocks:
        assert segment(by_name[first_backward.forward_of]) == seg


def test_only_what_the_backward_pass_reads_is_recomputed():
    """A segment's recomputed copies are the ops whose outputs the backward pass reads and what they
    need; PopART prunes the others. Here the matmul of a linear layer whose bias add is the checkpoint:
    the add's gradient reads no activation, the matmul's reads its input, so the matmul is not recomputed,
    while the second layer's (read by the GELU's gradient) is."""
    b = sim.GraphBuilder("prune", "float16")
    x = b.input("x", (256, 256))
    labels = b.input("labels", (256,), "int32")
    with b.scope("a"):
        h = b.linear(x, 256)  # matmul, then the bias add: the checkpoint
    b.checkpoint(h)
    with b.scope("b"):
        h = b.gelu(b.linear(h, 256))
    b.checkpoint(h)
    b.softmax_cross_entropy(b.linear(h, 16, name="head"), labels)
    b.output(b.graph.loss)
    stage = sim.compile(b.graph, "ipu-mk2", _options(), training=True).stages[0]
    recomputed = {op.name for op in stage.recomputed}
    assert not any(n.startswith("a/") for n in recomputed)
    assert any(n.startswith("b/") and "matmul" in n for n in recomputed)


def test_checkpoints_alone_recompute_nothing():
    """PopTorch's default for a model that is not pipelined is autoRecomputation None: its checkpoints mark
    nothing Recompute, so nothing is recomputed (Graphcore's CNN example warns "Recomputation is not enabled,
    while recomputation checkpoints are provided"); the run says so and how to recompute."""
    plain, ckpt = _run(False, auto=None), _run(True, auto=None)
    assert not any(s.recomputed for s in ckpt.executable.stages)
    assert ckpt.cycle_count == plain.cycle_count
    assert any(n.startswith("recomputation checkpoints: with autoRecomputation None") for n in ckpt.all_notes)


def _chain() -> sim.Graph:
    """Eight linear layers without bias, each with a ReLU, widths 64, 8, 64, 64, 8, 64, 64, 64 over 16 rows of
    fp16, then a head and the loss: 18 forward ops in a chain, each output read by the next op only."""
    b = sim.GraphBuilder("chain", "float16")
    h = b.input("x", (16, 64))
    labels = b.input("labels", (16,), "int32")
    for i, width in enumerate([64, 8, 64, 64, 8, 64, 64, 64]):
        h = b.relu(b.linear(h, width, bias=False, name=f"m{i}"), name=f"r{i}")
    b.softmax_cross_entropy(b.linear(h, 16, bias=False, name="head"), labels)
    b.output(b.graph.loss)
    return b.graph


def test_decreasing_intervals_are_poplars():
    """PopART's getDecreasingIntervals: K = floor(0.75 (floor(sqrt(2N)) - 1)), intervals K, K-1, ..., 1, then 1s."""
    assert recomputation.decreasing_intervals(1) == [(0, 1)]
    assert recomputation.decreasing_intervals(18)[:3] == [(0, 3), (3, 5), (5, 6)]
    assert recomputation.decreasing_intervals(25)[:4] == [(0, 4), (4, 7), (7, 9), (9, 10)]
    assert recomputation.decreasing_intervals(25)[-1] == (24, 25)


def test_standard_keeps_the_smallest_live_set_of_each_interval():
    """Standard (PopART's annotateStandard) on the chain: 18 ops, intervals [0,3), [3,5), then one op each. In a
    chain an op's live set is itself; [0,3) holds m0 (2,048 B), r0 (2,048 B), m1 (256 B): m1 is kept; [3,5) holds
    r1 (256 B) and m2 (2,048 B): r1 is kept; every later op is an interval of its own and kept. So m0, r0 and m2
    are marked; r0 is recomputed for the backward ops that read it (m1's gradient, r0's), and m0 to make it; m2's
    output is read by r2 alone, which is kept, so m2 is not rerun."""
    g = _chain()
    assert recomputation.marked(g, 1, False) == {"m0/matmul", "r0", "m2/matmul"}
    run = sim.simulate(_chain(), "ipu-mk2", _options(auto=1), training=True)
    stage = run.executable.stages[0]
    assert [op.name for op in stage.recomputed] == ["m0/matmul", "r0"]
    plain = sim.simulate(_chain(), "ipu-mk2", _options(auto=None), training=True)
    assert run.cycle_count - plain.cycle_count == sum(run.executable.costs[op.name].cycles for op in stage.recomputed)


def test_norm_only_recomputes_the_norms():
    """NormOnly (annotateNormOnly): the norms on the path to the loss, PopART's isNorm ops, and nothing else."""
    g = models.get("bert-base", num_layers=2, micro_batch=2)
    marks = recomputation.marked(g, 2, False)
    norms = {op.name for op in g.ops if op.pass_ == "forward" and op.kind == "layernorm"}
    assert marks == norms and len(norms) == 6  # the embeddings', two a layer and the MLM head's


def test_recompute_all_keeps_the_tail_unless_explicit():
    """RecomputeAll recomputes every op but the checkpoints; without explicitRecomputation the ops between the
    last checkpoint and the loss are kept (allCheckpointAfterLastCheckpoint), with it they are recomputed too."""
    implicit, explicit = _run(True), _run(True, explicit=True)
    head = [op.name for op in explicit.executable.stages[0].recomputed if op.name.startswith("head")]
    assert head and not any(op.name.startswith("head") for op in implicit.executable.stages[0].recomputed)
    assert explicit.cycle_count > implicit.cycle_count


def _lstm_sections(checkpoints: int = 3, **kw) -> sim.Graph:
    """The recomputation-checkpoint tutorial's LSTM (sim.validation.memory_statements.checkpointed_lstm) at a
    quarter of its steps and width: ``checkpoints + 1`` sections, the state checkpointed between them."""
    return checkpointed_lstm(checkpoints, steps=512, batch=16, width=128, units=128, **kw)


def test_a_checkpoint_keeps_a_tensor_and_the_op_making_it_is_recomputed_for_its_other_outputs():
    """A recomputation checkpoint is a tensor, not the op that made it (PopART's checkpointOutput: an Identity of
    the tensor marked Checkpoint, willow/src/builder_impl.cpp). An LSTM whose state (h, c) is checkpointed is
    still recomputed under RecomputeAll where its output sequence and the intermediates popnn keeps are read,
    starting from the checkpointed state: each section's intermediates live only around its own gradient, so
    the peak is lower than with no checkpoint, where the first gradient's recomputation makes every section's
    again."""
    g = _lstm_sections()
    lstm0 = next(op for op in g.ops if op.name == "lstm0")
    assert lstm0.checkpointed == set(lstm0.outputs[1:]) and lstm0.attrs["recomputation_checkpoint"] == (1, 2)
    assert not recomputation.is_checkpoint(lstm0) and recomputation.has_checkpoint(lstm0)
    assert {"lstm0", "lstm1", "lstm2", "lstm3"} <= recomputation.marked(g, 4, explicit=True)
    plain, ckpt = (sim.compile(_lstm_sections(k), "ipu-mk2", _options(explicit=True), training=True)
                   for k in (0, 3))
    again = {op.name for op in ckpt.stages[0].recomputed}
    assert {"lstm0", "lstm1", "lstm2", "lstm3"} <= again
    made_again = {t for op in ckpt.stages[0].recomputed if op.name.startswith("lstm") for t in op.outputs}
    assert all(op.outputs[0] in made_again for op in g.ops if op.name.startswith("lstm") and op.pass_ == "forward")
    live = [max(m.liveness.activations + m.liveness.temporaries) for m in (plain.memory[0], ckpt.memory[0])]
    assert live[1] < 0.8 * live[0]  # summed over the tiles: 54 MB against 74 (each gradient's temporaries remain)


def test_a_pipelined_stage_recomputes_each_lstm_section_from_its_stashed_state():
    """Pipelined, the sections on IPU 0 and the dense layer and loss on IPU 1: the backward stage recomputes the
    last section from the checkpointed state the forward stage stashed, then the one before from the stage's
    input; without the checkpoints the first gradient's recomputation runs every section, first to last."""
    def run(checkpoints: int) -> list:
        g = _lstm_sections(checkpoints, keep_sequence=False)
        for op in g.ops:
            op.ipu = 1 if op.name.startswith(("dense", "loss")) else 0
        o = sim.Options().setExecutionStrategy(PipelinedExecution())
        o.Training.gradientAccumulation(8)
        return sim.compile(g, "ipu-m2000", o, training=True, optimizer="sgd").stages
    plain, ckpt = run(0), run(1)
    assert [op.name for op in plain[2].recomputed] == ["lstm0"] and plain[2].restored == {"x"}
    assert [op.name for op in ckpt[2].recomputed] == ["slice1", "lstm1", "slice0", "lstm0"]
    lstm0 = next(op for op in ckpt[0].ops if op.name == "lstm0")
    assert ckpt[2].restored == {"x"} | lstm0.checkpointed and ckpt[0].stashed_bytes == 2 * 16 * 128 * 4


def test_the_walk_from_the_loss_keeps_what_reaches_it_past_the_checkpoints():
    """Without explicitRecomputation PopART turns back into checkpoints the Recompute ops it reaches walking from
    the loss, stopping at the checkpoints (allCheckpointAfterLastCheckpoint): where the whole output sequence is
    concatenated into the loss every section is reached through its sequence and kept; where only the last
    section's output is, the walk stops at the checkpointed state and the earlier sections are recomputed."""
    lstms = {"lstm0", "lstm1", "lstm2", "lstm3"}
    whole, last = (_lstm_sections(concat=c, keep_sequence=False) for c in (True, False))
    assert not lstms & recomputation.marked(whole, 4, explicit=False)
    assert lstms & recomputation.marked(last, 4, explicit=False) == lstms - {"lstm3"}
    assert lstms <= recomputation.marked(_lstm_sections(), 4, explicit=False)  # the sequence checkpointed


def test_popart_refuses_pipeline_recomputation_off_a_pipeline_and_mixed_marks():
    with pytest.raises(OptionsError, match="Invalid RecomputationType::Pipeline"):
        sim.compile(_stack(True), "ipu-mk2", _options(auto=3), training=True)
    g = _chain()
    next(op for op in g.ops if op.name == "r3").recompute = True
    with pytest.raises(OptionsError, match="A mixture of auto and manual recomputation is not supported"):
        sim.compile(g, "ipu-mk2", _options(auto=4), training=True)
    with pytest.raises(OptionsError, match="not a popart.RecomputationType"):
        sim.compile(_chain(), "ipu-mk2", _options(auto=7), training=True)


def test_user_marks_recompute_their_ops():
    """Ops the model marks Recompute (PopART's recomputeOutputInBackwardPass) with autoRecomputation None are
    rerun before the first backward op that reads them, with the marked ops they need (FindRequiredRecomputes
    walks back through them): r4, read by m5's gradient, needs m4, which needs r3; all three run once, in forward
    order, just before that gradient, and m4's gradient later finds r3 made."""
    g = _chain()
    for op in g.ops:
        if op.name in ("r3", "m4/matmul", "r4"):
            op.recompute = True
    stage = sim.compile(g, "ipu-mk2", _options(auto=None), training=True).stages[0]
    assert [op.name for op in stage.recomputed] == ["r3", "m4/matmul", "r4"]
    forward, again = stage.memory_runs
    at = next(i for i, op in enumerate(again) if op.name == "r3")
    assert [op.name for op in again[at:at + 3]] == ["r3", "m4/matmul", "r4"]
    assert again[at + 3].forward_of == "m5/matmul"  # the first backward op reading r4


def _phased(auto: int | None, checkpoint: bool = False, mark: str | None = None) -> tuple[sim.Graph, sim.Run]:
    """Three phases on one IPU, serial, the activations a later phase reads stored off chip: a linear layer
    and a GELU in phase 0 (its linear's output a checkpoint when ``checkpoint``), another in phase 1, the head
    and the loss in phase 2, the op ``mark`` marked Recompute; trained, the backward of phase p runs in
    phase 4 - p."""
    b = sim.GraphBuilder("phases", "float16")
    x, labels = b.input("x", (512, 1024)), b.input("labels", (512,), "int32")
    with b.ipu(0, block="p0"):
        h = b.linear(x, 1024, name="l0")
        if checkpoint:
            b.checkpoint(h)
        h = b.gelu(h, name="g0")
    with b.ipu(0, block="p1"):
        h = b.gelu(b.linear(h, 1024, name="l1"), name="g1")
    with b.ipu(0, block="p2"):
        b.softmax_cross_entropy(b.linear(h, 16, name="head"), labels)
        b.output(b.graph.loss)
    for op in b.graph.ops:
        op.recompute = op.name == mark
    strategy = SerialPhasedExecution(*[Phase(Stage(p).ipu(0)) for p in ("p0", "p1", "p2")])
    o = _options(auto).setExecutionStrategy(strategy.setTensorsLiveness(Liveness.OffChipAfterFwd))
    return b.graph, sim.simulate(b.graph, "ipu-mk2", o, training=True)


def test_phased_training_recomputes_each_phase_in_its_backward_phase():
    """In phased execution PopART's StreamingMemory marks every forward op but the checkpoints Recompute when
    autoRecomputation is not None, whatever its type, and each runs again in the backward phase mirroring its
    forward phase, before the backward ops that read it (ExplicitRecompute): phase 0 then stores only what
    phase 1 reads (g0), not the linear output its GELU's gradient reads; with None nothing is recomputed."""
    g, kept = _phased(None)
    stored = lambda run: run.trace.set_index("name")["bytes"]["phase 0 store activations"]  # noqa: E731
    assert not any(s.recomputed for s in kept.executable.stages)
    assert stored(kept) == g.tensors["g0"].nbytes + g.tensors["l0/add"].nbytes
    for auto in (1, 2, 4):
        _, again = _phased(auto)
        recomputed = {s.index: [op.name for op in s.recomputed] for s in again.executable.stages if s.recomputed}
        assert recomputed == {2: ["head/matmul", "head/add"], 3: ["l1/matmul", "l1/add"], 4: ["l0/matmul", "l0/add"]}
        assert stored(again) == g.tensors["g0"].nbytes
        assert again.breakdown.loc[0, "compute"] > kept.breakdown.loc[0, "compute"]
        assert any(n.startswith(f"autoRecomputation {recomputation.TYPES[auto]} in phased execution") for n in
                   again.executable.notes)
    # a checkpoint keeps its output: phase 0 stores it for its backward phase, which recomputes nothing
    _, checkpointed = _phased(1, checkpoint=True)
    assert not checkpointed.executable.stages[4].recomputed and stored(checkpointed) == stored(kept)
    # which, with None, recomputes nothing: the notes say so and what would
    assert any(n.startswith("recomputation checkpoints in phased execution with autoRecomputation None")
               for n in _phased(None, checkpoint=True)[1].executable.notes)
    # with None, the ops the model marks: the GELU's input is made again from the stored matmul output
    g, marked = _phased(None, mark="l0/add")
    assert [op.name for op in marked.executable.stages[4].recomputed] == ["l0/add"]
    assert stored(marked) == g.tensors["g0"].nbytes + g.tensors["l0/matmul"].nbytes
    # beside an automatic type they are accepted (PopART refuses the mixture only below 2 phases)
    assert _phased(1, mark="l0/add")[1].cycle_count == _phased(1)[1].cycle_count


def test_popart_refuses_a_pipelines_user_marks_as_it_does():
    """PopART's checks of a pipeline, in its order: user marks beside an automatic type are its mixture; marks
    with None and implicit recomputation are refused by Pipeline::apply, in inference too; explicitRecomputation
    clones them into their backward stages before that check (accepted: rerun there, not stashed), and with
    Pipeline, PopTorch's default for a pipeline, autoAnnotate refuses it. Checkpoints alone are what a pipeline
    takes."""
    g = models.get("bert-base", num_layers=2, layers_per_ipu=[1, 1], micro_batch=2,
                   recompute_checkpoint_every_layer=True)

    def compile_(auto, training=True, explicit=False):
        o = sim.Options().setExecutionStrategy(PipelinedExecution(AutoStage.AutoIncrement))
        o.Training.gradientAccumulation(8 if training else 1)
        if auto is not None:
            o._Popart.set("autoRecomputation", auto)
        o._Popart.set("explicitRecomputation", explicit)
        return sim.compile(g, "ipu-m2000", o, training=training)
    assert compile_(None).options.pipeline_recomputation()  # checkpoints only: fine
    with pytest.raises(OptionsError, match=re.escape(
            "explicitRecomputation with autoRecomputation Pipeline (3, PopTorch's default for a pipeline): PopART "
            "refuses it (\"Invalid RecomputationType::Pipeline in autoAnnotate when using implicit pipelining\")")):
        compile_(None, explicit=True)
    beside = compile_(4, explicit=True)  # taken, but PopART's autoAnnotate and clones before it are not modelled
    assert beside.options.pipeline_recomputation()
    assert any(n.startswith("not modelled: explicitRecomputation with autoRecomputation RecomputeAll in a pipeline")
               for n in beside.notes)
    assert not any("explicitRecomputation with" in n for n in compile_(4).notes)
    next(op for op in g.ops if op.kind == "gelu").recompute = True
    for auto, training in ((0, True), (0, False)):
        with pytest.raises(OptionsError, match=re.escape(
                "1 op(s) the model marks Recompute ('encoder/layer0/ffn/gelu' first) in a pipeline: PopART refuses it "
                "(\"When pipelining is enabled, user annotation for recomputation is not allowed\")")):
            compile_(auto, training)
    with pytest.raises(OptionsError, match="A mixture of auto and manual recomputation is not supported"):
        compile_(None)  # PopTorch's default, Pipeline
    # explicitRecomputation: the GELU reruns in its backward stage before its gradient, and is not stashed
    explicit = compile_(0, explicit=True)
    backward = next(s for s in explicit.stages if s.recomputed)
    gelu = next(op for op in explicit.graph.ops if op.kind == "gelu" and op.recompute)
    assert [op.name for op in backward.recomputed] == [gelu.name] and set(gelu.outputs).isdisjoint(backward.restored)

def test_sharded_training_recomputes_each_stage_from_its_own_forward_ops():
    """ShardedExecution is not pipelined: with RecomputeAll each backward stage reruns, on its IPU, the marked
    ops of its forward stage that its gradient ops read (PopART's FindRequiredRecomputes); without it, nothing."""
    g = models.get("bert-base", num_layers=2, layers_per_ipu=[1, 1], micro_batch=2,
                   recompute_checkpoint_every_layer=True)

    def stages(auto):
        o = _options(auto).setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
        return sim.compile(g, "ipu-m2000", o, training=True).stages
    recomputing = [s for s in stages(4) if s.recomputed]
    assert recomputing and all({op.stage for op in s.recomputed} == {s.forward_stage} for s in recomputing)
    assert not any(s.recomputed for s in stages(None))
