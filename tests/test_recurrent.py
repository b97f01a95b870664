"""popnn's LSTM and GRU layers: one op per layer and pass, priced as popnn's cell loop runs."""

import math

import pytest
import torch
import torch.nn as nn

import sim.poptorch as poptorch
from sim import GraphBuilder
from sim.cost import op_cost, rnn, vector
from sim.cost.opcost import OpCost, TileProfile, in_series
from sim.errors import GraphError
from sim.graph.training import expand_training
from sim.hardware.system import load_system

IPU = load_system("ipu-mk2").ipu
TILES = 1472


def _layer(cell, T=8, B=16, I=256, H=256, training=True):
    G = {"lstm": 4, "gru": 3}[cell]
    b = GraphBuilder("rnn", dtype="float16")
    x, h0 = b.input("x", (T, B, I)), b.input("h0", (B, H))
    c0 = b.input("c0", (B, H)) if cell == "lstm" else None
    wi, wh = b.weight("wi", (I, G * H)), b.weight("wh", (H, G * H))
    bias = b.weight("b", (G * H * (1 if cell == "lstm" else 2),))
    outs = b.recurrent(cell, x, wi, wh, bias, h0, c0)
    b.mse_loss(outs[0], b.input("target", (T, B, H)))
    return expand_training(b.graph) if training else b.graph


def _cost(g, kind):
    op = next(o for o in g.ops if o.kind == kind)
    return op, op_cost(op, g, IPU, TILES)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_layer_is_one_op_each_way_and_training_keeps_its_intermediates(cell):
    inference, training = _layer(cell, training=False), _layer(cell)
    assert [o.kind for o in inference.ops if o.kind.startswith(cell)] == [cell]
    assert [o.kind for o in training.ops if o.kind.startswith(cell)] == [cell, f"{cell}_grad"]
    fwd = next(o for o in training.ops if o.kind == cell)
    saved = training.tensors[fwd.outputs[-1]]
    assert saved.shape == (8, {"lstm": 6, "gru": 4}[cell], 16, 256)  # popnn's fwdIntermediates
    assert len(next(o for o in inference.ops if o.kind == cell).outputs) == len(fwd.outputs) - 1
    # every weight gets its gradient from the one backward op, and an update
    grad = next(o for o in training.ops if o.kind == f"{cell}_grad")
    updated = {o.attrs.get("weight") for o in training.ops if o.pass_ == "update"}
    assert updated == {"wi", "wh", "b"} and len(grad.outputs) == len(fwd.inputs)


@pytest.mark.parametrize("cell, per_step", [("lstm", 9), ("gru", 11)])
def test_each_step_runs_popnns_compute_sets(cell, per_step):
    """Per step forward: rnn::Rnn's loop counter and input slice, the matmul(s), the rearrangement,
    the bias, the gates in one compute set, the cell's products and sums, the output written into its
    sequence (Lstm.cpp / Gru.cpp, Rnn.cpp); in training two more (the intermediates written into
    their sequence and the state copied)."""
    def stepwise(training):
        return [p for p in rnn.forward_parts(cell, 8, 16, 256, 256, training) if p.count == 8 and p.kind != "matmul"]
    assert len(stepwise(False)) == per_step + 1
    assert len(stepwise(True)) == per_step + 3
    # the loop's counter (ForLoopCounter) and its slices and updates of the sequences (DynamicSlice1D)
    assert [p.kind for p in stepwise(False)].count("dynamic_slice") == 2
    assert [p.kind for p in stepwise(True)].count("dynamic_slice") == 3
    assert [p.kind for p in stepwise(True)].count("loop_counter") == 1
    matmuls = [p for p in rnn.forward_parts(cell, 8, 16, 256, 256, False) if p.kind == "matmul"]
    assert [p.shape for p in matmuls] == ([(16, 512, 1024)] if cell == "lstm" else [(16, 256, 768), (16, 256, 768)])


def test_a_steps_slice_is_priced_as_popops_dynamic_slice():
    """getDynamicSlice1DEstimate: 64 halves on a tile, 11 a worker, two 64-bit copies each:
    25 + 6 x (39 + 24 + 2 x 2) = 427 tile cycles; the loop counter's vertex 43."""
    assert vector.dynamic_slice_tile_cycles(64, 2, 6) == 427
    assert vector.loop_counter_cycles() == 43


def test_forward_cost_grows_by_one_step_per_step():
    """The loop body is priced once per step: two more steps cost exactly twice one more."""
    def cycles(T):
        return _cost(_layer("lstm", T=T), "lstm")[1].cycles
    assert cycles(10) - cycles(8) == 2 * (cycles(9) - cycles(8)) > 0


def test_forward_flops_are_the_matmuls_and_the_cell():
    T, B, I, H = 8, 16, 256, 256
    _, c = _cost(_layer("lstm", T, B, I, H, training=False), "lstm")
    matmul = 2 * T * B * (I + H) * 4 * H
    assert matmul < c.flops < 1.05 * matmul


def test_steps_per_weight_update_follow_popnns_cadence():
    """interleaveWUCadence: the gate gradients of as many steps as fit 10 % of 20 % of a tile, a
    multiple of the 64-bit data path. (8, 16, 256, 256) fp16: the state is 256 grains of 16 over
    1,472 tiles, 32 B a tile, 128 B a step: all 8 steps fit. (1000, 64, 1024, 1024): 3 grains a
    tile, 384 B a step, 33 fit, 32 after rounding to 4 halves."""
    tile = IPU.sram_bytes_per_tile
    assert rnn.lstm_wu_cadence(8, 16, 256, 256, 2, tile, TILES)[0] == 8
    assert rnn.lstm_wu_cadence(1000, 64, 1024, 1024, 2, tile, TILES)[0] == 32
    parts = rnn.backward_parts("lstm", 1000, 64, 1024, 1024, 2, tile, TILES)
    wu = [p for p in parts if p.kind == "matmul" and p.shape[0] == 2048]
    assert [(p.shape, p.count) for p in wu] == [((2048, 32 * 64, 4096), math.ceil(1000 / 32))]


def test_gru_updates_its_weights_a_step_at_a_time():
    """Gru.cpp: interleavedWUIsBeneficial ((64 + 64) x 192 <= 3 x 16 x 64 x 100) puts the update's
    matmuls in the backward loop; otherwise gruWUImpl runs them in a loop of their own after it, still
    a step (the batch's rows) at a time, never once over the whole sequence."""
    def wu(T, B, I, H):
        parts = rnn.backward_parts("gru", T, B, I, H, 2, IPU.sram_bytes_per_tile, TILES)
        return {(p.shape[1], p.count, p.fc_pass) for p in parts if p.kind == "matmul" and p.shape[1] != 3 * H}
    assert wu(100, 16, 64, 64) == {(16, 100, "TRAINING_WU")}
    assert wu(8, 16, 256, 256) == {(16, 8, "TRAINING_WU")}


def test_the_lstm_cadence_plans_its_update_within_its_memory():
    """Lstm.cpp interleaveWUCadence and basicLstmParamUpdate: several steps per update are planned as
    INFERENCE_FWD at what the 20 % left after the kept gate gradients (all 8 steps: 8 x 128 B) is of
    the tile; one step at a time is any TRAINING_WU matmul, at the layer's proportion."""
    tile = IPU.sram_bytes_per_tile
    assert rnn.lstm_wu_cadence(8, 16, 256, 256, 2, tile, TILES) == (8, (int(0.2 * tile) - 8 * 128) / tile)
    (wu,) = [p for p in rnn.backward_parts("lstm", 8, 16, 256, 256, 2, tile, TILES)
             if p.kind == "matmul" and p.shape[0] == 512]
    assert (wu.shape, wu.fc_pass) == ((512, 8 * 16, 1024), "INFERENCE_FWD") and 0.19 < wu.memory_proportion < 0.2
    assert rnn.lstm_wu_cadence(50, 30 * TILES, 64, 16, 2, tile, TILES) == (1, None)


def test_backward_step_is_no_dearer_than_the_unrolled_cells():
    """popnn's backward step: 6 element-wise compute sets and one matmul; the weight update batched
    over the steps. It costs less than a forward step and a half."""
    g = _layer("lstm", T=32)
    _, fwd = _cost(g, "lstm")
    _, bwd = _cost(g, "lstm_grad")
    assert fwd.cycles < bwd.cycles < 1.5 * fwd.cycles


def test_in_series_adds_cycles_and_tile_vectors():
    def part(compute, exchange, temp):
        return OpCost(compute, exchange, 10, 1, 100.0, 64, 2, temp, "",
                      TileProfile.padded(4, [compute, compute / 2], [32, 32], [temp, 0]), launch_cycles=5)
    total = in_series([(part(100, 20, 8), 3), (part(50, 0, 16), 2), (part(1, 1, 99), 0)], 4, "x")
    assert (total.compute_cycles, total.exchange_cycles, total.sync_cycles, total.supersteps) == (400, 60, 50, 5)
    assert total.launch_cycles == 25 and total.flops == 500.0 and total.temp_bytes_per_tile == 16
    assert list(total.profile.compute) == [400, 200, 0, 0] and list(total.profile.temp) == [16, 0, 0, 0]


# an nn.GRU is not one op: PopTorch 3 receives ATen's composite gru.input (tests/test_poptorch_gru_lowering.py)
@pytest.mark.parametrize("module", [lambda: nn.LSTM(6, 5, batch_first=True), lambda: nn.LSTM(6, 5)])
def test_poptorch_layers_run_as_torch_on_one_op(module):
    torch.manual_seed(0)
    layer = module().eval()
    x = torch.randn(3, 4, 6)
    expected = layer(x)
    model = poptorch.inferenceModel(layer)
    got = model(x)
    # torch's float32 tolerances, not bit equality: the two evaluations of the layer may take different
    # vector paths on some CPUs (differences of 3e-8 seen on one machine, none on another)
    torch.testing.assert_close(got[0], expected[0])
    kinds = [o.kind for o in model.executable.graph.ops]
    assert kinds.count("lstm") == 1 and "matmul" not in kinds


def test_wrong_weights_are_named():
    b = GraphBuilder("rnn", dtype="float16")
    x, h0, c0 = b.input("x", (4, 2, 8)), b.input("h0", (2, 5)), b.input("c0", (2, 5))
    wi, wh, bias = b.weight("wi", (8, 15)), b.weight("wh", (5, 20)), b.weight("b", (20,))
    with pytest.raises(GraphError, match=r"w_input \(8, 15\) \(expected \(8, 20\)\)"):
        b.recurrent("lstm", x, wi, wh, bias, h0, c0)
    with pytest.raises(GraphError, match="cell 'rnn'"):
        b.recurrent("rnn", x, wi, wh, bias, h0, c0)


def _onnx_layer(cell, T=10, B=4, I=32, H=64, bias=True, **attrs):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    G = {"LSTM": 4, "GRU": 3}[cell] * H
    inits = [numpy_helper.from_array(np.zeros((1, G, I), np.float32), "W"),
             numpy_helper.from_array(np.zeros((1, G, H), np.float32), "R")]
    if bias:
        inits.append(numpy_helper.from_array(np.zeros((1, 2 * G), np.float32), "B"))
    outs = ["Y", "Y_h"] + (["Y_c"] if cell == "LSTM" else [])
    node = helper.make_node(cell, ["X", "W", "R", "B" if bias else ""], outs, hidden_size=H, **attrs)
    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, B, I])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [T, 1, B, H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("cell, lbr, bias_shape, matmuls", [
    ("LSTM", None, (256,), [(4, 96, 256)]),  # the two biases summed (lstmx.cpp)
    ("GRU", 1, (384,), [(4, 32, 192), (4, 64, 192)]),  # reset-after: both biases, two matmuls
    ("GRU", 0, (192,), [(4, 96, 128), (4, 96, 64)]),  # [x, h] for the gates, [x, r h] for the candidate
])
def test_onnx_layers_are_popnns(cell, lbr, bias_shape, matmuls):
    import sim
    import sim.onnx

    g = sim.onnx.load(_onnx_layer(cell, **({} if lbr is None else {"linear_before_reset": lbr})))
    op = next(o for o in g.ops if o.kind == cell.lower())
    assert g.tensors[op.inputs[3]].shape == bias_shape
    reset_after = op.attrs.get("reset_after", True)
    parts = rnn.forward_parts(cell.lower(), 10, 4, 32, 64, False, reset_after)
    assert [p.shape for p in parts if p.kind == "matmul"] == matmuls
    assert sim.simulate(g, "ipu-mk2").cycle_count > 0


@pytest.mark.parametrize("attrs, inputs, why", [
    ({"direction": "bidirectional"}, (), "direction='bidirectional'"),
    ({"clip": 3.0}, (), "clip=3.0"),
    ({"activations": ["Sigmoid", "Relu", "Tanh"]}, (), "activations="),
    ({}, ("seq",), "sequence_lens"),
])
def test_onnx_layers_popart_cannot_run_are_refused(attrs, inputs, why):
    import sim.onnx
    from sim.errors import UnsupportedOpError

    m = _onnx_layer("LSTM", **attrs)
    if inputs:
        from onnx import TensorProto, helper
        m.graph.node[0].input.append("seq")
        m.graph.input.append(helper.make_tensor_value_info("seq", TensorProto.INT32, [4]))
    with pytest.raises(UnsupportedOpError, match=why):
        sim.onnx.load(m)


def test_a_cadence_rounded_to_nothing_updates_every_step():
    """Fewer steps fit than the 64-bit data path holds: H 16 (one grain) and B = 30 rows a tile
    put 30 x 16 halves a unit, 3,840 B a step of 4 units, on each tile; 3 steps fit in 12,779 B
    (10 % of 20 % of 638,976 B), alignPrev to 4 halves leaves none, and popnn falls back to one
    step per update."""
    assert rnn.lstm_wu_cadence(50, 30 * TILES, 64, 16, 2, IPU.sram_bytes_per_tile, TILES)[0] == 1
    assert rnn.lstm_wu_cadence(50, 7 * TILES, 64, 16, 2, IPU.sram_bytes_per_tile, TILES)[0] == 12  # 14 fit
