"""Training graphs give each weight's matmuls poplin's ``fullyConnectedPass``, as the frameworks do.

PopART sets TRAINING_FWD / TRAINING_BWD / TRAINING_WU on a training IR's matmuls by phase
(willow/src/popx/op/matmulx.cpp ``appendPoplarOptionsForOp``, ``enableFullyConnectedPass`` on by
default); graphcore/tensorflow sets it from each dot's classification (``GetMatMulOptionsForInst``).
``expand_training`` marks the forward matmul of each weight and its two gradients, so the three are
costed as poplin plans them (sim/cost/amp.py ``plan_fc_training``).
"""

from __future__ import annotations

from sim import load_system
from sim.cost.amp import plan_fc_training
from sim.cost.rules import op_cost
from sim.graph.ir import GraphBuilder
from sim.graph.training import expand_training
from models.transformer import attention


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
