"""Operands laid out by another op are copied into a matmul's or convolution's layout first.

poplin's ``convolutionImpl`` (lib/poplin/Convolution.cpp at poplibs 7eac0f26) copies the input into a
tensor made for the plan when the plan would read it on more than 7 tiles (``kernelSplit x
outChanSplit.parallel``), and the weights when they would be read on more than 7 (``batchSplit x
fieldSplit``); a copy into the layout the operand already has is elided, so an operand made for the
plan (a weight, a graph input) costs nothing (sim/cost/amp.py relaid_operands). Expected values
worked by hand from the plans' splits.
"""

from __future__ import annotations

import math
from dataclasses import replace

from sim import load_system
from sim.cost.amp import (MAX_BROADCAST_DESTS, plan_fc_training, plan_matmul, relaid_operands,
                          with_relaid_operands)
from sim.cost.exchange import exchange_cycles
from sim.cost.rules import _cost

IPU = load_system("bow-pod16").ipu


def _plan(splits, swapped=False):
    plan = plan_matmul(1, 256, 256, 256, 2, True, IPU, IPU.tiles, 0.6)
    return replace(plan, splits=splits, swapped=swapped)


def test_the_input_is_copied_when_read_on_more_than_seven_tiles():
    assert MAX_BROADCAST_DESTS == 7
    # unswapped: the input A is read on pn tiles, the weights B on pm
    assert relaid_operands(_plan((1, 4, 8, 4)), 1000, 500) == 1000
    assert relaid_operands(_plan((1, 4, 7, 4)), 1000, 500) == 0
    assert relaid_operands(_plan((1, 8, 8, 4)), 1000, 500) == 1500
    assert relaid_operands(_plan((1, 8, 2, 4)), 1000, 500) == 500
    # swapped, the input is Bᵀ (read on pn tiles) and the weights Aᵀ (on pm)
    assert relaid_operands(_plan((1, 9, 1, 4), swapped=True), 1000, 500) == 1000
    assert relaid_operands(_plan((1, 1, 9, 4), swapped=True), 1000, 500) == 500
    # an operand made for the plan (0 elements given) is never copied
    assert relaid_operands(_plan((1, 64, 64, 1)), 0, 0) == 0


def test_the_copy_is_one_exchange_phase_of_each_tiles_even_share():
    plan = _plan((1, 4, 92, 4))
    relaid = with_relaid_operands(plan, 1536 * 1024, IPU, 2)
    share = math.ceil(1536 * 1024 / plan.tiles_used) * 2
    assert relaid.exchange_cycles == plan.exchange_cycles + exchange_cycles(share, IPU)
    assert relaid.total_cycles == plan.total_cycles + exchange_cycles(share, IPU) + IPU.internal_sync_cycles
    assert relaid.compute_cycles == plan.compute_cycles
    assert relaid.exchange_phases == plan.exchange_phases + 1
    assert relaid.sync_points == plan.sync_points + 1
    assert relaid.relaid == 1536 * 1024
    # poplin's planner does not see it: the plan's estimate, by which it was chosen, is unchanged
    assert relaid.estimate == plan.estimate
    unpadded = replace(plan, planned_cycles=0)  # an estimate equal to its total cycles
    assert with_relaid_operands(unpadded, 1536 * 1024, IPU, 2).estimate == unpadded.total_cycles
    # each used tile receives and holds its share
    before = plan.profile(IPU, IPU.tiles, 2, True)
    after = relaid.profile(IPU, IPU.tiles, 2, True)
    assert (after.bytes_in[:plan.tiles_used] - before.bytes_in[:plan.tiles_used] == share).all()
    assert (after.temp[:plan.tiles_used] - before.temp[:plan.tiles_used] == share).all()
    assert "1572864 operand elements relaid first" in relaid.describe()
    assert with_relaid_operands(plan, 0, IPU, 2) is plan


def _fc_forward(role):
    ins = (((1536, 1024), "float16", role), ((1024, 4096), "float16", "weight"))
    key = ("matmul", ins, (((1536, 4096), "float16"),), (("fully_connected_pass", "TRAINING_FWD"),))
    return _cost(key, IPU, IPU.tiles, 0.6, "half")


def test_a_fully_connected_layer_copies_an_activation_not_a_graph_input():
    plans, joint = plan_fc_training(1, 1536, 1024, 4096, 2, IPU, IPU.tiles, 0.6, 2)
    fwd = plans["fwd"]
    # the input X is the swapped plan's weights (Xᵀ) or the plain plan's input: read on pm or pn tiles
    dests = fwd.splits[1] if fwd.swapped else fwd.splits[2]
    assert dests > MAX_BROADCAST_DESTS
    made, laid = _fc_forward("input"), _fc_forward("activation")
    share = math.ceil(1536 * 1024 / fwd.tiles_used) * 2
    assert laid.exchange_cycles - made.exchange_cycles == exchange_cycles(share, IPU)
    assert laid.sync_cycles - made.sync_cycles == IPU.internal_sync_cycles
    assert laid.compute_cycles == made.compute_cycles
    assert _fc_forward("gradient").exchange_cycles == laid.exchange_cycles


def test_a_weight_update_is_not_charged_twice():
    ins = (((1536, 1024), "float16", "activation"), ((1536, 4096), "float16", "gradient"))
    key = ("matmul", ins, (((1024, 4096), "float16"),), (("transpose_a", True),))
    # dW = Xᵀ dY: both operands are rearranged into the plan's layout as a weight update's (rearranged),
    # never relaid on top of that
    assert "relaid" not in _cost(key, IPU, IPU.tiles, 0.6, "half").plan


def test_a_convolution_copies_its_input_activation():
    x = ((32, 256, 14, 14), "float16")
    w = ((1024, 256, 1, 1), "float16", "weight")
    attrs = (("kernel", 1),)

    def conv(role):
        return _cost(("conv2d", ((*x, role), w), (((32, 1024, 14, 14), "float16"),), attrs), IPU, IPU.tiles, 0.6,
                     "half")
    made, laid = conv("input"), conv("activation")
    assert "relaid" not in made.plan
    assert f"{32 * 256 * 14 * 14} operand elements relaid first" in laid.plan
    assert laid.exchange_cycles > made.exchange_cycles


def test_the_run_names_the_copies_per_ipu():
    """Two layers trained: the backward pass of the second reads dY (a gradient another op laid out) on 23
    tiles of its swapped plan, so it is copied; the first layer's forward pass reads the graph input on as
    many, which PopART lets the matmul create in its layout, so it is not; the weight updates rearrange
    their operands anyway."""
    import sim
    from sim import GraphBuilder
    from sim.cost import op_cost

    b = GraphBuilder("t", "float16")
    x = b.input("x", (2048, 1024))
    y = b.linear(b.relu(b.linear(x, 4096, name="up")), 1024, name="down")
    b.mse_loss(y, b.input("t", (2048, 1024)))
    ex = sim.compile(b.graph, "ipu-mk2", sim.Options(), training=True)
    mk2 = load_system("ipu-mk2").ipu
    costs = {op.name: op_cost(op, ex.graph, mk2, mk2.tiles) for op in ex.graph.ops if op.kind == "matmul"}
    assert "operands swapped" in costs["up/matmul"].plan and costs["up/matmul"].relaid_cycles == 0
    relaid = costs["down/matmul/grad_a"]
    assert f"{2048 * 1024} operand elements relaid first" in relaid.plan
    assert relaid.relaid_cycles == exchange_cycles(math.ceil(2048 * 1024 / relaid.tiles_used) * 2, mk2) \
        + mk2.internal_sync_cycles
    assert [name for name, c in costs.items() if c.relaid_cycles] == ["down/matmul/grad_a"]
    (note,) = [n for n in ex.notes if n.startswith("poplin's operand copies")]
    assert f"IPU 0: 1 op, {relaid.relaid_cycles:,} cycles" in note
