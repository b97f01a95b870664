"""PopART's batch serialisation (``batchSerializationSettings``, sim/compiler/batch_serial.py): which ops run in
pieces, what is sliced, concatenated and summed, what each sharded op costs, and the tile memory it saves.

The expectations are worked from PopART's BatchSerialize transform (willow/src/transforms/batchserialize.cpp,
opsharding.cpp): the batch follows the streamed inputs through the ops that read it; a sharded op runs once a
piece; an output without the batch (a weight's gradient) is the sum of the pieces'.
"""

from __future__ import annotations

import numpy as np
import pytest

import sim
import sim.compiler.executable as compiler
from sim.cost import op_cost
from sim.cost.rules import batch_serial_cost
from sim.errors import OptionsError
from sim.graph.ir import GraphBuilder
from sim.graph.training import graph_to_price
from sim.hardware.system import load_system
from sim.options import BatchSerialization
from sim.strategy import Liveness, Phase, PipelinedExecution, SerialPhasedExecution, Stage, assign

MB, D = 8, 256


def _mlp(norm: str | None = None) -> sim.Graph:
    """x (MB, D) -> linear -> relu [-> batch norm of a 4-D view] -> linear -> MSE loss against y."""
    b = GraphBuilder("mlp")
    x = b.input("x", (MB, D), dtype="float16")
    with b.ipu(0, block="b0"):
        h = b.relu(b.linear(x, D, name="l1"))
    with b.ipu(0, block="b1"):
        if norm == "batchnorm":
            h = b.reshape(b.batchnorm(b.reshape(h, (MB, D, 1, 1)), name="bn"), (MB, D))
        b.mse_loss(b.linear(h, D, name="l2"), b.input("y", (MB, D), dtype="float16"))
    return b.graph


def _options(factor: int, **settings) -> sim.Options:
    o = sim.Options().enableSyntheticData(True)
    o._Popart.set("batchSerializationSettings.factor", factor)
    for key, value in settings.items():
        o._Popart.set(f"batchSerializationSettings.{key}", value)
    return o


def _plan(g: sim.Graph, o: sim.Options, training: bool = True):
    """The placed training graph and its batch serialisation, as the compiler makes them."""
    priced = graph_to_price(g, training, sim.Optimizer("sgd") if training else None, False)
    strategy = assign(priced, o.execution_strategy)
    return priced, compiler.serialise_batches(priced, o, strategy, training)


def test_settings_default_to_popart_s_and_take_enum_members_values_and_names():
    assert sim.Options().batch_serialization() == BatchSerialization(0, frozenset({"ipu", "phase", "stage"}), "Fwd",
                                                                     "UnrollDynamic", "Isomorphic")
    o = _options(4, method=2, transformContext="popart.BatchSerializationTransformContext.Bwd",
                 concatOnExecutionPhaseChange=False, batchSchedule=3)
    assert o.batch_serialization() == BatchSerialization(4, frozenset({"ipu", "stage"}), "Bwd", "Loop",
                                                         "OverlapOnCompute")
    assert o.batch_serialization().overlaps_io and not _options(1, batchSchedule=3).batch_serialization().overlaps_io
    with pytest.raises(OptionsError, match="factor = -1: expected a whole number >= 0"):
        _options(-1).batch_serialization()
    with pytest.raises(OptionsError, match="method = 7: expected one of UnrollDynamic .0., UnrollStatic .1., Loop"):
        _options(2, method=7).batch_serialization()
    assert not _options(2, batchSchedule=3).unmodelled()


def test_a_factor_of_one_serialises_nothing():
    assert _plan(_mlp(), _options(1))[1] is None


def test_the_batch_follows_the_inputs_and_a_weight_s_gradient_is_summed_over_the_pieces():
    g, plan = _plan(_mlp(), _options(4))
    assert plan.pieces["x"] == (2, D) and plan.pieces["y"] == (2, D)
    forward = [op for op in g.ops if op.pass_ == "forward"]
    assert all(op.name in plan.ops for op in forward)  # matmuls, bias adds, relu, the loss: all shardable
    assert not any(op.name in plan.ops for op in g.ops if op.pass_ == "update")
    weight_grads = {op.name: op.outputs for op in g.ops if op.pass_ == "backward"
                    and any(g.tensors[o].grad_of in ("l1/weight", "l2/weight") for o in op.outputs)}
    assert len(weight_grads) == 2
    for name, outputs in weight_grads.items():
        assert plan.summed[name] == outputs and name in plan.ops
        assert not any(o in plan.pieces for o in outputs)  # no batch in a weight's gradient
    loss = next(op for op in forward if op.kind == "mse_loss")
    assert plan.summed[loss.name] == loss.outputs  # the loss of the micro-batch: the pieces' summed
    first = next(op for op in forward if op.kind == "matmul")
    assert plan.sliced[first.name] == ["x"]  # a piece cut from the streamed input each time
    assert not any(plan.concatenated.values())  # one context, every reader sharded, the loss not batched


def test_a_sharded_op_costs_its_piece_times_the_factor_with_its_slices_and_sums():
    g, plan = _plan(_mlp(), _options(4))
    ipu, tiles = load_system("ipu-mk2").ipu, 1472
    costs = compiler.price_ops(g, load_system("ipu-mk2"), _options(4), True, tiles, pieces=plan)
    relu = next(op for op in g.ops if op.kind == "relu")
    piece = op_cost(relu, plan.piece_view(op=relu, g=g), ipu, tiles)
    assert costs[relu.name].cycles == 4 * piece.cycles
    assert costs[relu.name].temp_bytes_per_tile == piece.temp_bytes_per_tile
    grad = next(name for name, outs in plan.summed.items() if g.tensors[outs[0]].grad_of == "l2/weight")
    op = next(o for o in g.ops if o.name == grad)
    piece = op_cost(op, plan.piece_view(op, g), ipu, tiles, 0.6, "float")
    weight = g.tensors["l2/weight"]
    assert costs[grad] == batch_serial_cost(piece, 4, [], [(weight.shape, weight.dtype)], ipu, tiles)
    first = next(op for op in g.ops if op.kind == "matmul")
    piece = op_cost(first, plan.piece_view(first, g), ipu, tiles, 0.6, "float")
    sliced = batch_serial_cost(piece, 4, [(2 * D, "float16")], [], ipu, tiles)
    assert costs[first.name] == sliced and sliced.cycles > 4 * piece.cycles  # the dynamic slices of x
    unsplit = compiler.price_ops(g, load_system("ipu-mk2"), _options(4), True, tiles)
    assert costs[first.name].cycles > unsplit[first.name].cycles  # four small matmuls cost more than one


def test_a_forward_activation_the_backward_pass_reads_keeps_every_piece():
    g, plan = _plan(_mlp(), _options(4))
    relu = next(op for op in g.ops if op.kind == "relu")
    assert g.tensors[relu.outputs[0]].batch_slices == 1  # read by the backward pass: all four pieces live
    dys = [t for t in g.tensors.values() if t.grad_of == relu.outputs[0]]
    assert dys and all(t.batch_slices == 4 for t in dys)  # a gradient made and read in the backward pass
    g, plan = _plan(_mlp(), _options(4), training=False)
    assert g.tensors[next(op for op in g.ops if op.kind == "relu").outputs[0]].batch_slices == 4


def test_an_op_popart_cannot_shard_reads_the_concatenation_and_its_reader_slices_again():
    g, plan = _plan(_mlp("batchnorm"), _options(2))
    bn = next(op for op in g.ops if op.kind == "batchnorm")
    assert bn.name not in plan.ops
    made = next(op for op in g.ops if bn.inputs[0] in op.outputs)  # the reshape before it (a view)
    assert plan.concatenated[made.name] == [bn.inputs[0]]
    after = next(op for op in g.ops if bn.outputs[0] in op.inputs)
    assert plan.sliced[after.name] == [bn.outputs[0]]
    assert "not split (PopART cannot shard them): batchnorm, batchnorm_grad" in plan.describe(g)


@pytest.mark.parametrize("concat", [True, False])
def test_pieces_are_concatenated_at_a_pipeline_stage_change_unless_told_not_to(concat):
    b = GraphBuilder("two")
    x = b.input("x", (MB, D), dtype="float16")
    with b.ipu(0, block="s0"):
        h = b.relu(b.linear(x, D, name="l1"))
    with b.ipu(1, block="s1"):
        b.output(b.linear(h, D, name="l2"))
    o = _options(2, concatOnPipelineStageChange=concat, concatOnVirtualGraphChange=concat)
    o.setExecutionStrategy(PipelinedExecution("s0", "s1"))
    g, plan = _plan(b.graph, o, training=False)
    relu = next(op for op in g.ops if op.kind == "relu")
    second = next(op for op in g.ops if op.kind == "matmul" and op.ipu == 1)
    assert plan.concatenated[relu.name] == ([relu.outputs[0]] if concat else [])
    assert plan.sliced[second.name] == ([relu.outputs[0]] if concat else [])
    out = g.outputs[0]
    assert plan.concatenated[next(op.name for op in g.ops if out in op.outputs)] == [out]  # returned whole


B, H = 2048, 1024  # a phased model whose activations, not its weights' gradients, fill the tiles


def _phased_graph() -> sim.Graph:
    """(B, D) -> linear D -> gelu -> linear H -> gelu -> linear D -> gelu, a phase each, then the loss's phase."""
    b = GraphBuilder("phased")
    h = b.input("x", (B, D), dtype="float16")
    for i in range(3):
        with b.ipu(0, block=f"p{i}"):
            h = b.gelu(b.linear(h, H if i == 1 else D, name=f"p{i}/l"))
    with b.ipu(0, block="p3"):
        b.mse_loss(h, b.input("y", (B, D), dtype="float16"))
    return b.graph


def _phased(factor: int, liveness: Liveness, **settings) -> sim.Run:
    o = _options(factor, **settings).setExecutionStrategy(SerialPhasedExecution(
        *[Phase(Stage(f"p{i}").ipu(0)) for i in range(4)]).setTensorsLiveness(liveness))
    return sim.simulate(_phased_graph(), "ipu-mk2", o, training=True)


def test_phased_activations_stored_off_chip_live_a_piece_at_a_time_when_phases_do_not_concatenate():
    """The activations a later phase reads are stored piece by piece (concatOnExecutionPhaseChange off, as
    Graphcore's phased BERT sets it): the peak of live activations falls by the factor; with the phases
    concatenating, or the activations kept on chip, every piece stays."""
    def activations(factor, liveness=Liveness.OffChipAfterFwd, concat=False):
        return _phased(factor, liveness, concatOnExecutionPhaseChange=concat).memory[0]["by_role"]["activation_peak"]
    whole = activations(1)
    assert whole == 13_631_488  # pinned: the peak, at the last linear's weight gradient in its backward phase
    # a quarter of it: a piece of every tensor live there but the bias's 512-byte gradient (hence the tolerance)
    assert activations(4) == pytest.approx(whole / 4, rel=1e-3)
    assert activations(4, concat=True) > 0.75 * whole  # the tensors crossing phases whole
    assert activations(4, Liveness.AlwaysLive) > 0.9 * activations(1, Liveness.AlwaysLive)
    run = _phased(4, Liveness.OffChipAfterFwd, concatOnExecutionPhaseChange=False)
    moved = run.trace.set_index("name")["bytes"]
    assert moved["phase 0 store activations"] == 2 * B * D * 2  # the whole of its two tensors, piece by piece
    assert any(n.startswith("batch serialisation: factor 4, method UnrollDynamic") for n in run.all_notes)


def _phased_io(schedule: str) -> sim.Run:
    """:func:`_phased`'s model, its activations stored off chip piece by piece through 128 IO tiles and loaded on
    demand (Graphcore's phased BERT's settings), under batchSchedule ``schedule``."""
    o = _options(4, concatOnExecutionPhaseChange=False, batchSchedule=schedule).setExecutionStrategy(
        SerialPhasedExecution(*[Phase(Stage(f"p{i}").ipu(0)) for i in range(4)]).setTensorsLiveness(
            Liveness.OffChipAfterFwd))
    o.TensorLocations.numIOTiles(128)
    o.TensorLocations.setActivationLocation(sim.options.TensorLocationSettings().useIOTilesToLoad(True))
    o._Popart.set("executionPhaseSettings.activationIOSchedule", "OnDemand")
    return sim.simulate(_phased_graph(), "ipu-mk2", o, training=True)


def test_overlapping_batch_schedules_load_a_phase_s_later_pieces_while_it_computes():
    """OverlapOnCompute: a phase's first piece is loaded on demand, the other three while the phase computes
    (PopART's decomposed loop); Isomorphic loads every piece before the phase computes."""
    overlapped, plain = _phased_io("OverlapOnCompute"), _phased_io("Isomorphic")
    t = overlapped.trace.set_index("name")
    first, later = t.loc["phase 1 load (OnDemand, IO tiles)", "bytes"], t.loc["phase 1 load (later pieces, IO tiles)",
                                                                              "bytes"]
    assert first == B * D * 2 // 4 and later == 3 * first  # p0's output, read by p1: a piece, then three
    compute = t[t.kind == "compute"]
    assert t.loc["phase 1 load (later pieces, IO tiles)", "start"] < compute.loc["stage 1 forward", "end"]
    assert t.loc["io-tile copy phase 1 later pieces in", "start"] >= t.loc["phase 1 load (later pieces, IO tiles)",
                                                                           "end"]
    assert not plain.trace.name.str.contains("later pieces").any()
    assert plain.trace.set_index("name").loc["phase 1 load (OnDemand, IO tiles)", "bytes"] == first + later
    assert overlapped.cycle_count < plain.cycle_count


def test_popart_s_errors():
    with pytest.raises(OptionsError, match="Batch axis: 8 is smaller than the batch serialization factor: 16 "
                                           "for tensor x"):
        _plan(_mlp(), _options(16))
    with pytest.raises(OptionsError, match="factor 3 does not divide input 'x'"):
        _plan(_mlp(), _options(3))
    with pytest.raises(OptionsError, match="Loop batch serialization is only supported in "
                                           "BatchSerializationTransformContext::Bwd"):
        _plan(_mlp(), _options(2, method=2))
    assert _plan(_mlp(), _options(2, method=2), training=False)[1].factor == 2  # inference has no LoopGradOp


def test_same_inputs_same_cycles():
    assert _phased(4, Liveness.OffChipAfterFwd).cycle_count == _phased(4, Liveness.OffChipAfterFwd).cycle_count


def test_a_popart_session_s_settings_serialise_its_batch():
    """sim.popart's ``batchSerializationSettings`` (enum members as Graphcore's phased BERT sets them) reach the
    compile: the notes name the pieces, the cycles are those of the same options given to sim.Options, and an
    out-of-memory error suggests more of it."""
    pytest.importorskip("onnx")
    import sim.popart as popart
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [MB, D]), "x")
    w = b.addInitializedInputTensor(np.zeros([D, D], dtype="float16"), "w")
    y = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])])
    opts = popart.SessionOptions()
    opts.batchSerializationSettings.factor = 4
    opts.batchSerializationSettings.method = popart.BatchSerializationMethod.Loop
    opts.batchSerializationSettings.batchSchedule = popart.BatchSerializationBatchSchedule.OverlapOnCompute
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, {y: popart.AnchorReturnType("All")}),
                                   popart.DeviceManager().acquireAvailableDevice(1), userOptions=opts)
    sess.prepareDevice()
    notes = sess.executable.notes
    line = next(n for n in notes if n.startswith("batch serialisation: factor 4, method Loop: 2 ops run in 4 pieces"))
    assert "batchSchedule OverlapOnCompute: in phased execution the later pieces" in line  # and here nothing
    big = popart.Builder()  # 1 GB of activations: more than an IPU holds
    x = big.addInputTensor(popart.TensorInfo("FLOAT16", [16384, 8192]), "x")
    w = big.addInitializedInputTensor(np.zeros([8192, 8192], dtype="float16"), "w")
    y = big.aiOnnx.relu([big.aiOnnx.matmul([x, w])])
    sess = popart.InferenceSession(big.getModelProto(), popart.DataFlow(1, {y: popart.AnchorReturnType("All")}),
                                   popart.DeviceManager().acquireAvailableDevice(1))
    with pytest.raises(popart.OutOfMemoryException, match=r"a smaller micro-batch or more batch serialisation "
                                                          r"\(batchSerializationSettings.factor\)"):
        sess.prepareDevice()
