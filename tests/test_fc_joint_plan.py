"""poplin's planning of a fully connected layer's three training passes (sim/cost/amp.py
plan_fc_training, after ConvPlan.cpp createPlan at poplibs 8dcde1ec)."""

import pytest

from sim import load_system
from sim.cost.amp import (fc_weight_update_rearranged, pass_fixed_cycles, plan_fc_training, plan_matmul, rearrangement,
                          swap_or_not)
from sim.cost.rules import op_cost
from sim.cost.vector import codelet
from sim.errors import UnsupportedOpError
from sim.graph.ir import GraphBuilder
from sim.poplibs_benchmarks import fc_graph

IPU = load_system("ipu-mk2").ipu


def test_joint_plan_shares_one_grid_and_swaps_operands():
    # fc_layer_4_1000_1000_float: joint, as poplin plans it (a reconstruction of ConvPlan.cpp createPlan at
    # 8dcde1ec: joint 9,431 against separate 10,934 cycles); the fp16 layer of that shape is planned
    # separately, its forward pass on HMAC (joint 11,345 against 7,981)
    plans, joint = plan_fc_training(1, 4, 1000, 1000, 4, IPU, IPU.tiles, 0.6)
    assert joint
    assert not plan_fc_training(1, 4, 1000, 1000, 2, IPU, IPU.tiles, 0.6)[1]
    fwd, bwd, wu = plans["fwd"], plans["bwd"], plans["wu"]
    # swapped: the forward pass's positions are the outputs, its channels the batch
    assert fwd.dims == (1, 1000, 1000, 4) and bwd.dims == (1, 1000, 1000, 4) and wu.dims == (1, 1000, 4, 1000)
    _, po, pb, pi = fwd.splits
    assert bwd.splits == (1, pi, pb, po) and wu.splits == (1, po, pi, pb)  # getFullyConnectedBwd/WUPlan
    assert fwd.tiles_used == bwd.tiles_used == wu.tiles_used
    assert all(p.pass_fixed == pass_fixed_cycles() for p in plans.values())


def test_separate_plans_pay_the_weight_update_result_rearrangement():
    plans, joint = plan_fc_training(1, 16, 1000, 5, 4, IPU, IPU.tiles, 0.6)
    assert not joint
    # each pass planned on its own (sim/cost/amp.py), its operands swapped or not: the weight update with
    # both operands rearranged into its layout, here swapped ([5, 16] @ [16, 1000]: poplin tries the swap
    # first and keeps it unless the plain plan is estimated strictly cheaper)
    rearranged = fc_weight_update_rearranged(1, 1000, 16, 5)
    assert rearranged == 1000 * 16 + 16 * 5
    alone, plain = (plan_matmul(1, m, 16, n, 4, True, IPU, IPU.tiles, 0.6, grain_splits=True, rearranged=rearranged)
                    for m, n in ((5, 1000), (1000, 5)))
    assert plans["wu"].dims == (1, 5, 16, 1000) and alone.estimate <= plain.estimate
    exch, copy, _ = rearrangement(IPU, 5000, alone.tiles_used, 4)
    extra = plans["wu"].total_cycles - alone.total_cycles
    assert extra == int(exch) + int(copy) + codelet("copy").fixed + 2 * IPU.internal_sync_cycles
    assert plans["fwd"] == swap_or_not(1, 16, 1000, 5, 4, IPU, IPU.tiles, 0.6, 4)[0]


def test_fc_tool_graph_prices_passes_from_the_layer_plan():
    g = fc_graph(8, 1000, 1000, dtype="float32")
    plans, joint = plan_fc_training(1, 8, 1000, 1000, 4, IPU, IPU.tiles, 0.6)
    fwd = next(op for op in g.ops if op.name == "Fwd")
    c = op_cost(fwd, g, IPU, IPU.tiles)
    assert joint and c.compute_cycles == plans["fwd"].compute_cycles
    assert c.plan == plans["fwd"].describe()


def test_fully_connected_pass_on_the_wrong_matmul_is_an_error():
    b = GraphBuilder("bad", "float16")
    x, w = b.input("x", (4, 8)), b.weight("w", (8, 16))
    b.op("matmul", [x, w], [(4, 16)], attrs={"fully_connected_pass": "TRAINING_BWD"}, name="mm")
    with pytest.raises(UnsupportedOpError, match="fully_connected_pass 'TRAINING_BWD'"):
        op_cost(b.graph.ops[-1], b.graph, IPU, IPU.tiles)


def test_joint_plan_splits_the_conv_groups_but_never_the_batch():
    """poplin's joint plan partitions the conv groups (Partition::convGroupSplit, which
    getFullyConnectedBwdPlan / getFullyConnectedWUPlan copy) but fixes the forward pass's
    outChanSplit.parallel, the batch after the operand swap, at 1 (ConvModel.cpp constructModel:
    each weight on exactly one tile). BERT's attention matmuls as the fc tool runs them
    (bert_grouped_16x512x64x512: 16 groups, batch 512, 64 in, 512 out)."""
    from sim.cost.amp import _fc_joint_plans, _plan_at

    budget = 0.6 * IPU.sram_bytes_per_tile
    for G, B, I, O in ((16, 512, 64, 512), (1, 4, 1000, 1000), (1, 16, 1000, 5)):
        plans = _fc_joint_plans(G, B, I, O, 2, 4, IPU, IPU.tiles, budget)
        pg, po, pb, pi = plans["fwd"].splits
        assert pb == 1
        assert plans["bwd"].splits == (pg, pi, pb, po) and plans["wu"].splits == (pg, po, pi, pb)
    plans = _fc_joint_plans(16, 512, 64, 512, 2, 4, IPU, IPU.tiles, budget)
    # one group a tile, inputs over 4 and outputs over 16: 512 outputs are 32 grains of 16 (the joint plan's
    # field grain), so 23 tiles would leave the busiest 2 grains as 16 do (tests/test_fc_small_plans.py)
    assert plans["fwd"].splits == (16, 16, 1, 4)
    # the same grid with all 16 groups on every tile costs more
    assert plans["fwd"].total_cycles < _plan_at(16, 512, 64, 512, (1, 16, 1, 4), 2, 4, True, IPU, 0).total_cycles
    # so for this layer the separate plans stay poplin's choice (createPlan)
    assert not plan_fc_training(16, 512, 64, 512, 2, IPU, IPU.tiles, 0.6)[1]


def test_a_joint_weight_update_over_one_input_group_writes_its_fp16_result():
    """getFullyConnectedWUPlan takes the first vertex candidate under the forward pass's groupings, and
    ConvVertexType.cpp lists first the AMP writing the fp16 result when the update's input channels (the
    batch) round up to one conv unit's 16 weights in the forward output grouping of 8: batch 9-16 in fp16
    (nothing reduced, no fp32 partials, no cast); batch 8 rounds to 8, and fp32 has no smaller output."""
    def partials(batch, itemsize):
        plans, joint = plan_fc_training(1, batch, 2048, 4096, itemsize, IPU, IPU.tiles, 0.6)
        assert joint
        return {name: p.partials_bytes for name, p in plans.items()}
    assert partials(16, 2) == partials(12, 2) == {"fwd": 4, "bwd": 4, "wu": 2}
    assert partials(8, 2) == partials(16, 4) == {"fwd": 4, "bwd": 4, "wu": 4}
    # the update's result is the layer's type, so the pass holds no fp32 partials of the product
    wu16 = plan_fc_training(1, 16, 2048, 4096, 2, IPU, IPU.tiles, 0.6)[0]["wu"]
    wu8 = plan_fc_training(1, 8, 2048, 4096, 2, IPU, IPU.tiles, 0.6)[0]["wu"]
    assert wu16.temp_bytes_per_tile < wu8.temp_bytes_per_tile
