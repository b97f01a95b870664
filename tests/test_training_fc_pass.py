"""Graphs give each weight's matmuls poplin's ``fullyConnectedPass``, as the frameworks do.

PopART sets TRAINING_FWD / TRAINING_BWD / TRAINING_WU on a training IR's matmuls by phase
(willow/src/popx/op/matmulx.cpp ``appendPoplarOptionsForOp``, ``enableFullyConnectedPass`` on by
default); graphcore/tensorflow sets it from each dot's classification (``GetMatMulOptionsForInst``).
``expand_training`` marks the forward matmul of each weight and its two gradients, so the three are
costed as poplin plans them (sim/cost/amp.py ``plan_fc_training``). At inference the forward
matmul gets INFERENCE_FWD (PopART's inference IR; TensorFlow's forward-only graph), planned with the
operands swapped when poplin's estimate prefers it (sim/cost/matmul_swap.py).
"""

from __future__ import annotations

import pytest

from sim import compile as compile_graph, load_system
from sim.cost.amp import plan_fc_training, plan_matmul
from sim.cost.matmul_swap import plan_matmul_none_pass
from sim.cost.rules import op_cost
from sim.errors import UnsupportedOpError
from sim.graph.ir import GraphBuilder
from sim.graph.training import expand_training, mark_fully_connected_passes
from models.transformer import attention, tied_projection


def _layer():
    b = GraphBuilder("fc", "float16")
    x = b.input("x", (2, 64, 256))
    y = b.linear(x, 1024, bias=False, name="fc")
    a = attention(b, y, heads=4)
    b.softmax_cross_entropy(b.linear(a, 8, bias=False, name="head"), b.input("labels", (2, 64), "int32"))
    return b.graph


def _passes(g):
    return {op.name: op.attrs.get("fully_connected_pass") for op in g.ops if op.kind == "matmul"}


def test_each_weight_matmul_and_its_gradients_carry_the_pass():
    g = expand_training(_layer(), "sgd")
    passes = _passes(g)
    assert passes["fc/matmul"] == "TRAINING_FWD"
    assert passes["fc/matmul/grad_b"] == "TRAINING_WU"
    # the input x needs no gradient: no backward pass of the first layer
    assert "fc/matmul/grad_a" not in passes
    assert passes["head/matmul"] == "TRAINING_FWD"
    assert passes["head/matmul/grad_a"] == "TRAINING_BWD"
    assert passes["head/matmul/grad_b"] == "TRAINING_WU"
    # attention's matmuls multiply two activations: left unmarked, planned as plain matmuls
    assert {n: p for n, p in passes.items() if "scores" in n or "context" in n} \
        and all(p is None for n, p in passes.items() if "scores" in n or "context" in n)


def test_the_forward_graph_is_left_as_it_was():
    fwd = _layer()
    expand_training(fwd, "sgd")
    assert all(p is None for p in _passes(fwd).values())


def test_marked_matmuls_cost_what_the_fc_training_plan_gives():
    ipu = load_system("bow-ipu").ipu
    g = expand_training(_layer(), "sgd")
    fwd = next(op for op in g.ops if op.name == "head/matmul")
    plans, _ = plan_fc_training(1, 128, 1024, 8, 2, ipu, ipu.tiles, 0.6, 4)
    cost = op_cost(fwd, g, ipu, ipu.tiles)
    assert cost.compute_cycles == plans["fwd"].compute_cycles


# --- inference: INFERENCE_FWD (PopART's inference IR, TensorFlow's forward-only graph) -------------

def test_inference_marks_each_weight_matmul_inference_fwd_and_leaves_attention_plain():
    g = _layer()
    mark_fully_connected_passes(g, training=False)
    passes = _passes(g)
    assert passes["fc/matmul"] == passes["head/matmul"] == "INFERENCE_FWD"
    assert all(p is None for n, p in passes.items() if "scores" in n or "context" in n)
    fwd = _layer()
    ex = compile_graph(fwd, "ipu-mk2")  # the compiler marks its own copy
    assert all(p is None for p in _passes(fwd).values())
    assert _passes(ex.graph)["fc/matmul"] == "INFERENCE_FWD"


def _tied_head():
    b = GraphBuilder("head", "float16")
    b.output(tied_projection(b, b.input("x", (1, 1, 1600)), b.weight("wte", (50257, 1600))))
    return b.graph


def test_a_tied_head_is_marked_at_inference_only_and_planned_swapped():
    """PopART marks every matmul of an inference IR, so a tied LM head (x @ Wᵀ, W the embedding table)
    gets INFERENCE_FWD: GPT2-XL's [1, 1600] x [1600, 50257] decode head is planned with the operands
    swapped (an HMAC plan), 17,653 cycles on a Mk2 IPU against the 128,293 of the plain plan the simulator
    gave it before. In training the head stays a plain matmul (the transposed table's joint plan is not
    modelled)."""
    g = _tied_head()
    mark_fully_connected_passes(g, training=False)
    head = next(op for op in g.ops if op.kind == "matmul")
    assert head.attrs == {"fully_connected_pass": "INFERENCE_FWD", "tied": True}
    ipu = load_system("ipu-mk2").ipu
    assert op_cost(head, g, ipu, ipu.tiles, 0.6, "float").cycles == 17_653
    plan, swapped = plan_matmul_none_pass(1, 1, 1600, 50257, 2, ipu, ipu.tiles, 0.6, 4)
    assert swapped and plan.total_cycles == 17_653
    assert plan_matmul(1, 1, 1600, 50257, 2, False, ipu, ipu.tiles, 0.6, partials_bytes=4).total_cycles == 128_293
    trained = _tied_head()
    mark_fully_connected_passes(trained, training=True)
    assert all(p is None for p in _passes(trained).values())


def test_an_inference_matmul_is_planned_as_poplin_plans_fc_inference_fwd():
    """The Keras Dense(1024) of a (16, 4096) fp32 input (reports/validation.md's PopVision row):
    poplin tries the operands swapped first and charges the unswapped plan the rearrangement of input,
    weights and output, so the swapped plan, 1,024 kernel columns as output positions, wins."""
    ipu = load_system("ipu-mk2").ipu
    b = GraphBuilder("dense", "float32")
    b.output(b.linear(b.input("x", (16, 4096)), 1024, bias=False, name="dense"))
    g = b.graph
    mark_fully_connected_passes(g, training=False)
    op = next(op for op in g.ops if op.kind == "matmul")
    cost = op_cost(op, g, ipu, ipu.tiles, 0.6, "float")
    plan, swapped = plan_matmul_none_pass(1, 16, 4096, 1024, 4, ipu, ipu.tiles, 0.6, 4)
    assert swapped and plan.dims == (1, 1024, 4096, 16)
    assert (cost.compute_cycles, cost.exchange_cycles) == (plan.compute_cycles, plan.exchange_cycles)
    plain = plan_matmul(1, 16, 4096, 1024, 4, True, ipu, ipu.tiles, 0.6, partials_bytes=4)
    assert plan.total_cycles < plain.total_cycles  # what the simulator ran before: 13,883 against 10,349 cycles


def test_inference_fwd_on_a_matmul_of_two_activations_is_refused():
    b = GraphBuilder("mm", "float16")
    x, y = b.input("x", (64, 32)), b.input("y", (32, 16))
    out = b.op("matmul", [x, y], [(64, 16)], attrs={"fully_connected_pass": "INFERENCE_FWD"}, name="mm")[0]
    b.output(out)
    ipu = load_system("ipu-mk2").ipu
    with pytest.raises(UnsupportedOpError, match="INFERENCE_FWD"):
        op_cost(b.graph.ops[0], b.graph, ipu, ipu.tiles)
