"""The gradient of a tensor read through slices, as PopART builds it.

PopART's SliceGradOp pads a slice's gradient with zeros to the sliced tensor's shape (a
``popops::pad``: a view of the gradient and constants), and its PadSum pattern (on by default,
willow/src/patterns/padsum.cpp) turns a sum of such pads on one axis whose regions do not overlap
into one concatenation, a view too. So the fused QKV projection of a transformer layer gets its
gradient from the three slices Q, K and V read without any copy or add, and the gradient of a
weight split by ``serializedMatMul`` is assembled from its pieces the same way.
"""

from __future__ import annotations

import models
from sim import load_system
from sim.cost.rules import op_cost
from sim.graph.ir import GraphBuilder
from sim.graph.training import expand_training


def test_fused_qkv_gradient_is_one_pad_of_the_three_slices_and_costs_nothing():
    g = expand_training(models.get("bert-base", micro_batch=2, seq_len=128, num_layers=1), "sgd")
    pads = [op for op in g.ops if op.kind == "pad" and "/attention/" in op.name]
    assert len(pads) == 1
    (pad,) = pads
    assert len(pad.inputs) == 3 and sorted(pad.attrs["regions"]) == [(0, 768), (768, 1536), (1536, 2304)]
    assert not [op for op in g.ops if op.kind == "add" and op.pass_ == "backward" and "/attention/" in op.name
                and op.name.endswith("sum") and pad.outputs[0] in op.inputs]
    # every piece is made before the pad reads it (ops run in list order)
    made = {o: i for i, op in enumerate(g.ops) for o in op.outputs}
    assert all(made[t] < g.ops.index(pad) for t in pad.inputs)
    ipu = load_system("bow-ipu").ipu
    cost = op_cost(pad, g, ipu, ipu.tiles)
    assert cost.compute_cycles == 0 and cost.exchange_cycles == 0


def test_overlapping_slices_are_summed():
    b = GraphBuilder("overlap", "float32")
    x = b.weight("w", (8, 16))
    a = b.slice(x, 1, 0, 10, name="a")
    c = b.slice(x, 1, 6, 16, name="c")  # overlaps a on columns 6..9
    b.mse_loss(b.add(b.relu(a), b.relu(b.slice(c, 1, 0, 10))), b.input("t", (8, 10)))
    g = expand_training(b.graph, "sgd")
    pads = [op for op in g.ops if op.kind == "pad" and op.pass_ == "backward" and op.forward_of in ("a", "c")]
    assert [len(op.inputs) for op in pads] == [1, 1]  # not merged: their regions overlap
    assert any(op.kind == "add" and {p.outputs[0] for p in pads} & set(op.inputs) for op in g.ops)


def test_disjoint_slices_of_one_axis_merge():
    b = GraphBuilder("disjoint", "float32")
    x = b.weight("w", (8, 16))
    parts = [b.relu(b.slice(x, 1, 4 * i, 4 * i + 4, name=f"s{i}")) for i in range(4)]
    y = parts[0]
    for p in parts[1:]:
        y = b.add(y, p)
    b.mse_loss(y, b.input("t", (8, 4)))
    g = expand_training(b.graph, "sgd")
    pads = [op for op in g.ops if op.kind == "pad" and op.pass_ == "backward"]
    assert len(pads) == 1 and len(pads[0].inputs) == 4
    assert sorted(pads[0].attrs["regions"]) == [(0, 4), (4, 8), (8, 12), (12, 16)]
    update = next(op for op in g.ops if op.pass_ == "update")
    assert pads[0].outputs[0] in update.inputs  # the weight's whole gradient
