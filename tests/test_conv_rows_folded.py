"""A convolution whose input channels do not fill the AMP's input-channel group: poplin also offers
AMP vertex types with fewer input channels a group, each conv unit's weights spanning 2 or 4 kernel
rows (ConvVertexType.cpp getConvVertexAMPCandidates, getConvUnitWeightHeight), which pad neither the
channels nor the input (no rearrangement before the pass) and pay a dearer weight load per kernel
position (PerformanceEstimation.hpp getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat).
The hardware check of the plan is in tests/test_calibration.py (lbm-graphcore's blur on Mk1)."""

from dataclasses import replace

import numpy as np
import pytest

from sim import load_system
from sim.cost.amp import (ConvShape, amp_mode, conv_input_factor, kernel_hits, nx1_vertex_cycles,
                          padded_partials_rearranged, plan_matmul, plan_rows_folded)

MK1 = load_system("ipu-mk1-c2").ipu
MK2 = load_system("ipu-mk2").ipu


def _plans(ipu, cin, kernel, itemsize=2, h=302, w=499, cout=4):
    """(the pass planned with whole channel groups, (the plan kept, the convolution it runs)) of a
    batch-1 'same' convolution of ``cin`` channels over an ``h x w`` field."""
    pad = (kernel - 1) // 2
    conv = ConvShape(kernel, kernel, 1, w, cin, 1, h, row_hits=kernel_hits(h, kernel, h, pad),
                     col_hits=kernel_hits(w, kernel, w, pad))
    padded = padded_partials_rearranged(ipu, itemsize, 4, 1, cout, h * w, cin * kernel * kernel)
    whole = plan_matmul(1, h * w, cin * kernel * kernel, cout, itemsize, True, ipu, ipu.tiles, 0.6,
                        conv=conv, partials_bytes=4, rearranged=padded)
    return whole, plan_rows_folded(whole, conv, 1, h * w, cout, itemsize, ipu, ipu.tiles, 0.6, 4, padded)


@pytest.mark.parametrize("ipu", [MK1, MK2], ids=["mk1", "mk2"])
def test_four_fp16_channels_run_four_to_a_group_over_four_kernel_rows(ipu):
    """A 3x3 blur of 4 fp16 channels: the kernel's 3 rows padded to one group of 4, so 3 kernel positions of
    one folded group instead of the expanded width's, and no input rearranged; the planner's estimate
    of it is the lower."""
    whole, (plan, conv) = _plans(ipu, 4, 3)
    assert (plan.unit_rows, plan.group_channels, plan.vertex) == (4, 4, "nx1")
    assert (conv.kernel_h, conv.kernel_w, conv.in_channels, conv.folded_from.kernel_h) == (1, 3, 16, 3)
    assert plan.estimate < whole.estimate and plan.total_cycles < whole.total_cycles
    assert "4 input channels a group over 4 kernel rows" in plan.describe()


def test_fp32_channels_fold_in_the_fp32_group_of_eight():
    """fp32's conv units take 8 weights: 4 channels over 2 kernel rows, or 2 over 4 (two floats are one
    64-bit load); the planner keeps the cheaper, cheaper than whole groups."""
    whole, (plan, conv) = _plans(MK1, 4, 3, itemsize=4)
    assert plan.unit_rows in (2, 4) and plan.group_channels * plan.unit_rows == 8
    assert plan.estimate <= whole.estimate


@pytest.mark.parametrize("cin, kernel", [(16, 3), (32, 3), (4, 1)])
def test_whole_groups_and_one_row_kernels_stay_as_planned(cin, kernel):
    """Channels that fill their groups, or a kernel of one row, have nothing to fold."""
    whole, (plan, conv) = _plans(MK2, cin, kernel)
    assert plan is whole and conv.unit_rows == 1 and conv.folded_from is None


def test_the_weights_over_four_rows_load_at_64_bits_and_pay_the_heights_extra():
    """Per kernel position and output pass: 15 + 3 extra cycles at one row, 46 + 3 at two, 60 + 3 at four;
    at four rows the coefficients load 64 bits a cycle even with use128BitConvUnitLoad (8 fp32-partial
    conv units x 32 B: 32 cycles, not 16)."""
    mode, wide = amp_mode(MK2, 2, 4), replace(MK2, conv_unit_load_bits=128)
    one = ConvShape(1, 3, 1, 128, 16, 1, 1)

    def cycles(ipu, rows):
        conv = replace(one, unit_rows=rows)
        return float(nx1_vertex_cycles(ipu, mode, conv, 1, 128, 48, 8)[0])
    # 3 kernel positions x 1 output pass each
    assert cycles(MK2, 2) - cycles(MK2, 1) == 3 * (49 - 18)
    assert cycles(MK2, 4) - cycles(MK2, 1) == 3 * (63 - 18)
    assert cycles(wide, 4) - cycles(wide, 1) == 3 * (63 - 18 + 32 - 16)


def test_a_folded_convolution_reads_the_convolutions_own_input_patch():
    """The tile's input bytes per im2col byte: the folded form's im2col rows count 16 folded channels a
    kernel position, of which 4 are real over the padded rows; the patch it receives is the 4-channel
    3-row one the convolution reads."""
    conv = ConvShape(3, 3, 1, 499, 4, 1, 302)
    folded = conv.rows_folded(4, 4, 16)
    m = np.array([124.0, 400.0])
    real = conv_input_factor(conv, m) * m * 4 * 9  # input elements of the patch
    assert np.allclose(conv_input_factor(folded, m) * m * 16 * 3, real)
