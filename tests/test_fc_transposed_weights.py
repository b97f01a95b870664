"""The transposed weights of a separately planned fully connected backward pass move to its layout.

poplin's ``fullyConnectedWeightTranspose`` (lib/poplin/Convolution.cpp at poplibs 8dcde1ec) runs
each block's transpose on the tile holding the forward weights but writes it into a tensor made by
``createWeights`` for the backward plan. Planned jointly, both layouts are the same grid; planned
separately they are not, so the blocks are exchanged after the transpose compute set
(sim/cost/amp.py transposed_weights_exchange). Expected values worked by hand.
"""

from __future__ import annotations

import math

import pytest

from sim import load_system, poplibs_benchmarks as pb
from sim.cost import op_cost
from sim.cost.amp import (fc_weight_transpose, plan_fc_training, transposed_weights_exchange,
                          with_weight_transpose)
from sim.cost.exchange import exchange_cycles


def test_exchange_is_the_busiest_tiles_even_share_at_the_exchange_rate():
    ipu = load_system("ipu-mk2").ipu  # 0.87 x 4 bytes per cycle per tile, 100 cycles of set-up
    assert ipu.exchange_rate == pytest.approx(3.48)
    # 4096 x 1024 fp16 weights over 1,472 tiles: ceil(4,194,304 / 1,472) = 2,850 elements, 5,700 bytes
    assert transposed_weights_exchange(ipu, 4096 * 1024, 1472, 1472, 2) == 100 + math.ceil(5700 / 3.48) == 1738
    # the side with fewer tiles sets the pace: 1,344 forward tiles send ceil(2,359,296 / 1,344) = 1,756
    assert transposed_weights_exchange(ipu, 3072 * 768, 1344, 1440, 2) == 100 + math.ceil(3512 / 3.48) == 1110
    assert transposed_weights_exchange(ipu, 0, 1344, 1440, 2) == 0


def test_separate_backward_pass_pays_the_exchange_after_the_transpose():
    ipu = load_system("ipu-mk2").ipu
    g = pb.graph(pb.BENCHES["bert_ffn2_128x4096x1024"])
    plans, joint = plan_fc_training(1, 128, 4096, 1024, 2, ipu, ipu.tiles, 0.6)
    assert not joint and plans["fwd"].tiles_used == 1440
    bwd = {op.name: op_cost(op, g, ipu, ipu.tiles) for op in g.ops}["Bwd"]
    plan = plans["bwd"]
    transposed = with_weight_transpose(plan, fc_weight_transpose(1, 4096, 1024, 2, plan.tiles_used), ipu)
    moved = transposed_weights_exchange(ipu, 4096 * 1024, 1440, plan.tiles_used, 2)
    # the busiest tile sends or receives its even share over the fewer of the two plans' tiles
    assert moved == exchange_cycles(math.ceil(4096 * 1024 / min(1440, plan.tiles_used)) * 2, ipu)
    assert bwd.exchange_cycles == plan.exchange_cycles + moved
    assert bwd.compute_cycles == transposed.compute_cycles
    assert bwd.sync_cycles == (plan.sync_points + 2) * ipu.internal_sync_cycles


def test_a_transpose_taken_as_a_view_moves_nothing_here():
    # 5 outputs: a group size of 1, poplin takes a view (useCopyImpl) and no transpose runs
    ipu = load_system("ipu-mk2").ipu
    g = pb.graph(pb.BENCHES["fc_layer_16_1000_5_half"])
    bwd = {op.name: op_cost(op, g, ipu, ipu.tiles) for op in g.ops}["Bwd"]
    plans, _ = plan_fc_training(1, 16, 1000, 5, 2, ipu, ipu.tiles, 0.6)
    assert fc_weight_transpose(1, 1000, 5, 2, 512) == 0
    assert bwd.exchange_cycles == plans["bwd"].exchange_cycles
