"""How poplin plans a convolution's passes, as sim/cost/amp.py and sim/cost/rules.py price them:
the weight update's expanded input, the strided 1x1 kernel's expansion and deferred dilation.

Exact values are worked by hand from poplin's estimators (ConvModel.cpp addTransformCycleEstimate,
Convolution.cpp convolutionPostprocess) and the configs' constants.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim import load_system, poplibs_benchmarks as pb
from sim.cost import op_cost
from sim.cost.amp import ConvShape, _tile_costs, deferred_dilation_copy, plan_matmul, plan_rows_folded


@pytest.fixture(scope="module")
def ipu():
    return load_system("ipu-mk2").ipu


def _op(row, kind):
    g = pb.graph(pb.BENCHES[row])
    return g, next(op for op in g.ops if op.kind == kind)


def test_deferred_dilation_copy_is_the_copy_codelet_on_each_tiles_share():
    # dX of resnet50 bm128L0A0: 4 x 256 x 56 x 56 = 3,211,264 fp16 elements on 1,472 tiles:
    # ceil(3211264 / 1472) = 2182 per tile at 0.25 cycles (8 bytes per cycle) + 100 fixed
    assert deferred_dilation_copy(3_211_264, 1472, 2) == 100 + 546
    assert deferred_dilation_copy(3_211_264, 1472, 4) == 100 + 1091  # fp32: 0.5 cycles per element
    assert deferred_dilation_copy(0, 1472, 2) == 0


@pytest.mark.parametrize("row, expected", [
    # 3x3 stride 1, 64 -> 64 on 4 x 56 x 56: im2col 64 x 9 x 12544 plus zDeltas 12544 x 64
    ("resnet50_tr_bs4_bm64L0A1", 64 * 9 * 12544 + 12544 * 64),
    # 1x1 stride 2, 256 -> 128 from 56 x 56: the used quarter of X, 256 x 4 x 28 x 28, plus zDeltas
    ("resnet50_tr_bs4_bm128L0A0", 256 * 3136 + 3136 * 128),
])
def test_weight_update_rearranges_the_expanded_input(ipu, row, expected):
    g, wu = _op(row, "conv2d_grad_weight")
    p = pb.BENCHES[row].params
    positions = 4 * ((p["field"] + 2 * p["padding"] - p["kernel"]) // p["stride"] + 1) ** 2
    plan = plan_matmul(1, p["cin"] * p["kernel"] ** 2, positions, p["cout"], 2, False, ipu, ipu.tiles, 0.6,
                       partials_bytes=4, rearranged=expected, pads_channels=False, channel_grains=True)
    assert plan.rearranged == expected
    cost = op_cost(wu, g, ipu, ipu.tiles)
    assert (cost.compute_cycles, cost.exchange_cycles) == (plan.compute_cycles, plan.exchange_cycles)


def test_a_strided_1x1_kernel_does_not_run_the_1x1_vertex_on_its_field(ipu):
    # canUse1x1Vertex needs the field flattened; a strided dimension cannot be (dimCanBeFlattened)
    g, fwd = _op("resnet50_tr_bs4_bm128L0A0", "conv2d")
    cost = op_cost(fwd, g, ipu, ipu.tiles)
    assert "expanded vertex" in cost.plan or "nx1 vertex" in cost.plan
    g1, fwd1 = _op("resnet50_tr_bs4_bm64L0", "conv2d")  # stride 1: the 1x1 vertex, no rearrangement
    assert "vertex" not in op_cost(fwd1, g1, ipu, ipu.tiles).plan


def test_expanding_a_strided_1x1_kernel_rearranges_both_operands(ipu):
    # a tile holding [100, 256] @ [256, 64] of a stride-2 1x1 conv split rows/2 cols/2: expanding
    # moves 1/pn of its input block (100 x 256 x 2 B / 2) and 1/pm of its weight block
    # (256 x 64 x 2 B / 2) = 41,984 bytes: one more exchange phase (100 set-up + 41984 bytes at the
    # exchange rate, 0.87 x 4 bytes per cycle) and copy compute set (100 fixed + 20,992 elements x
    # 1.25 cycles: getScaleFactorForTransform 5/4 at min(memcpy, 2) bytes per cycle)
    conv = ConvShape(1, 1, 2, 28, 256)
    args = (ipu, 2, 4, True, conv)
    dims = (np.array([1]), np.array([100]), np.array([256]), np.array([64]), 2, 2, 1)
    plain = _tile_costs(*args, "1x1", *dims)
    expanded = _tile_costs(*args, "expanded", *dims)
    assert expanded["exchange"][0] - plain["exchange"][0] == 100 + math.ceil(41984 / ipu.exchange_rate) == 12165
    assert expanded["compute"][0] - plain["compute"][0] == 100 + 26240
    for key in ("compute_sets", "exchange_phases"):
        assert np.ravel(expanded[key])[0] - np.ravel(plain[key])[0] == 1


def test_strided_1x1_backward_pass_copies_the_dilated_result(ipu):
    g, bwd = _op("resnet50_tr_bs4_bm128L0A0", "conv2d_grad_input")
    cost = op_cost(bwd, g, ipu, ipu.tiles)
    conv = ConvShape(1, 1, 1, 28, 128)
    with_copy = plan_matmul(1, 4 * 28 * 28, 128, 256, 2, True, ipu, ipu.tiles, 0.6, conv=conv,
                            dilated_output=4 * 256 * 56 * 56)
    without = plan_matmul(1, 4 * 28 * 28, 128, 256, 2, True, ipu, ipu.tiles, 0.6, conv=conv)
    assert cost.compute_cycles == with_copy.compute_cycles
    assert with_copy.splits == without.splits
    assert with_copy.compute_cycles - without.compute_cycles == deferred_dilation_copy(
        4 * 256 * 56 * 56, with_copy.tiles_used, 2)
    assert with_copy.supersteps == without.supersteps + 1
    # a stride-1 or padded backward pass has nothing deferred
    g1, bwd1 = _op("resnet50_tr_bs4_bm64L0", "conv2d_grad_input")
    plain = plan_matmul(1, 4 * 56 * 56, 64, 64, 2, True, ipu, ipu.tiles, 0.6, conv=ConvShape(1, 1, 1, 56, 64))
    assert op_cost(bwd1, g1, ipu, ipu.tiles).compute_cycles == plain.compute_cycles


def test_padded_partial_channels_rearrange_the_padded_weights_and_output(ipu):
    # ConvModel.cpp addTransformCycleEstimate: output channels per group not a multiple of the
    # partial-channel group (8 on Mk2: min of the conv units, the weights per conv unit and half of
    # 16 units) set rearrangeWeights and rearrangeOutput, both padded to the group
    from sim.cost.amp import padded_partials_rearranged
    # dX of mobilenet_conv1_1: 4 channels padded to 8, 4 x 224 x 224 positions, 32 x 3 x 3 weights each
    assert padded_partials_rearranged(ipu, 2, 4, 1, 4, 4 * 224 * 224, 32 * 9) == 8 * (200_704 + 288)
    assert padded_partials_rearranged(ipu, 2, 2, 1, 4, 10, 6) == 8 * 16  # fp16 partials: 8 of 16 units
    assert padded_partials_rearranged(ipu, 4, 4, 2, 12, 10, 6) == 2 * 16 * 16  # fp32: 12 -> 16
    assert padded_partials_rearranged(ipu, 2, 4, 1, 64, 4 * 224 * 224, 32 * 9) == 0


def test_rgb_stem_backward_pass_pays_the_padded_partials_rearrangement(ipu):
    g, bwd = _op("mobilenet_conv1_1", "conv2d_grad_input")
    cost = op_cost(bwd, g, ipu, ipu.tiles)
    # dX's 4 x 224 x 224 field, split per dimension: zDeltas (112 x 112) dilated by the stride 2 and
    # padded by 3 - 1 - 1 = 1 (tests/test_conv_dilated_bwd.py)
    from sim.cost.amp import kernel_hits
    hits = kernel_hits(224, 3, 112, 1, dilation=2)
    conv = ConvShape(3, 3, 1, 224, 32, 4, 224, row_hits=hits, col_hits=hits, dilation=2)
    args = (1, 4 * 224 * 224, 32 * 9, 4, 2, True, ipu, ipu.tiles, 0.6)
    padded = plan_matmul(*args, conv=conv, rearranged=8 * (4 * 224 * 224 + 32 * 9))
    assert cost.compute_cycles == padded.compute_cycles
    assert padded.total_cycles > plan_matmul(*args, conv=conv).total_cycles
    # a forward pass with 32 output channels has nothing to pad; its 4 input channels run 4 a group over 4 kernel
    # rows where poplin's estimate prefers it (tests/test_conv_rows_folded.py)
    g1, fwd = _op("mobilenet_conv1_1", "conv2d")
    conv1 = ConvShape(3, 3, 2, 112, 4, 4, 112)
    plain = plan_matmul(1, 4 * 112 * 112, 4 * 9, 32, 2, True, ipu, ipu.tiles, 0.6, conv=conv1)
    kept, _ = plan_rows_folded(plain, conv1, 1, 4 * 112 * 112, 32, 2, ipu, ipu.tiles, 0.6, 4)
    assert op_cost(fwd, g1, ipu, ipu.tiles).compute_cycles == kept.compute_cycles


def test_a_kernel_taller_than_one_splits_the_field_per_dimension(ipu):
    """poplin splits the batch and each field dimension separately (no flattenDims for a 3x3
    kernel), so the busiest tile of a 4 x 56 x 56 output field holds whole shares of each: 23 tiles
    (a prime) give 608 positions (4 x 8 rows x 19 columns on 21 tiles), not 12,544 / 23 = 546;
    32 = 4 x 8 splits it exactly."""
    from sim.cost.amp import field_split_positions
    conv = ConvShape(3, 3, 1, 56, 128, 4, 56)
    pos, width = field_split_positions(conv, np.array([1, 4, 23, 32, 46]))
    assert pos.tolist() == [12544, 3136, 608, 392, 304]
    assert width.tolist() == [56, 56, 19, 56, 19]
    # without the field's batch and height the planner splits the positions freely, as before
    free = plan_matmul(1, 12544, 1152, 256, 2, True, ipu, ipu.tiles, 0.6, conv=ConvShape(3, 3, 1, 56, 128))
    split = plan_matmul(1, 12544, 1152, 256, 2, True, ipu, ipu.tiles, 0.6, conv=conv)
    assert split.total_cycles > free.total_cycles
    assert free.splits[1] == 23 and split.splits[1] != 23  # vgg16 v3L0's forward pass
