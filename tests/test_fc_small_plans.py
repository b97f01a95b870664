"""poplin's joint fully connected plan splits its dimensions in whole grains (sim/cost/amp.py
``_fc_joint_plans``): the forward pass's input channels (I) in grains of the vertex's input-channel
group (ConvModel.cpp ``constructModel``: ``inChanGrains = ceil(inChans / inChanGrainSize)``) and its
field (O, after the operand swap) in grains of the same size (ConvPlan.cpp ``createPlan``: a joint
plan's ``fieldGrainSize.back() = convVertexType.inChansPerGroup``). So the tiny layers of poplibs' fc
bench (1,000 inputs, 5 outputs) run on at most ceil(1000 / 16) = 63 tiles in fp16."""

import numpy as np
import pytest

from sim import load_system
from sim.cost.amp import _fc_joint_plans, plan_fc_training

IPU = load_system("ipu-mk2").ipu
BUDGET = 0.6 * IPU.sram_bytes_per_tile


@pytest.mark.parametrize("B, I, O, itemsize, grain", [
    (1, 1000, 5, 2, 16), (16, 1000, 5, 2, 16), (16, 1000, 5, 4, 8),
    (16, 1324, 100, 2, 16), (1440, 100, 200, 2, 16), (4, 1000, 1000, 2, 16)])
def test_joint_grid_splits_inputs_and_outputs_in_whole_grains(B, I, O, itemsize, grain):
    plans = _fc_joint_plans(1, B, I, O, itemsize, 4, IPU, IPU.tiles, BUDGET)
    _, po, pb, pi = plans["fwd"].splits  # the swapped forward pass: rows = O, cols = B, inner = I
    assert pb == 1
    assert pi <= -(-I // grain) and po <= -(-O // grain)


def test_thousand_by_five_layer_uses_one_tile_per_input_grain():
    # fp16: 1000 inputs are 63 grains of 16; the 5 outputs one grain, never split
    plans = _fc_joint_plans(1, 16, 1000, 5, 2, 4, IPU, IPU.tiles, BUDGET)
    assert plans["fwd"].splits == (1, 1, 1, 63)
    assert {p.tiles_used for p in plans.values()} == {63}
    # fp32: grains of 8, so 125 tiles
    plans = _fc_joint_plans(1, 16, 1000, 5, 4, 4, IPU, IPU.tiles, BUDGET)
    assert plans["fwd"].splits == (1, 1, 1, 125)


def test_whole_grains_price_the_busiest_tile():
    """A tile holds whole grains: 100 inputs (7 grains of 16) over 7 tiles leave 16 inputs on the
    busiest tile, not ceil(100 / 7) = 15; the joint plan is priced on that block."""
    from sim.cost.amp import _plan_at, matmul_padding

    plans = _fc_joint_plans(1, 1440, 100, 200, 2, 4, IPU, IPU.tiles, BUDGET)
    splits = plans["fwd"].splits
    assert splits == (1, 13, 1, 7)
    # the 100 input channels are padded to 112: the input and the weights rearranged
    padded = matmul_padding(16, 8, 1, 200, 100, 1440, False)[0]
    assert padded == 200 * 112 + 112 * 1440
    grained = _plan_at(1, 200, 100, 1440, splits, 2, 4, True, IPU, padded, block=(1, 16, 16, 1440))
    assert plans["fwd"].total_cycles == grained.total_cycles
    assert grained.total_cycles > _plan_at(1, 200, 100, 1440, splits, 2, 4, True, IPU, padded).total_cycles


@pytest.mark.parametrize("batch", [8, 16])
def test_thousand_by_five_layers_are_planned_separately(batch):
    """Five outputs are short of the partial-channel group (8) and the batch of the input-channel group
    (16): every pass of the joint plan pays padded operands rearranged (sim/cost/amp.py
    matmul_padding), so the separate passes win, the backward pass and the weight update spread over
    1,000 tiles or more (poplibs' TotalMemory of these rows, 0.6-0.7 MB, is that spread: a plan on
    63 tiles would leave most tiles without code or vertex state)."""
    plans, joint = plan_fc_training(1, batch, 1000, 5, 2, IPU, IPU.tiles, 0.6)
    assert not joint
    assert plans["bwd"].tiles_used >= 1000 and plans["wu"].tiles_used >= 1000
    assert plans["fwd"].splits[3] == 63  # the forward pass reduces its 1,000 inputs in whole grains of 16
    # K = batch <= 16 and nothing to reduce: the weight update writes fp16 partials (poplibs 9235f683)
    assert plans["wu"].partials_bytes == 2 and plans["wu"].splits[3] == 1
    assert np.all([p.fits for p in plans.values()])
