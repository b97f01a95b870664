"""fp32 matmul vertices as poplibs prices them (sim/cost/amp.py, configs/_conv-vertices.toml
[amp1x1_fp32] and [hmac_fp32]; [hmac_fp16] for the fp16 HMAC's 1x1 form).

Every expected value below is worked by hand from lib/poplin/PerformanceEstimation.hpp at 7eac0f26
(getConvPartial1x1Supervisor*CycleEstimate*, getConvPartialHorizontalMac*, getDenseDotProductCycles,
estimateZeroSupervisorCycles) with Mk2's fp32 AMP: 16 conv units, 8 input channels per group, a
64-cycle weight load (16 units x 32 bytes / 8 bytes per cycle), 6 workers.
"""

from __future__ import annotations

import pytest

from sim import load_system
from sim.cost.amp import amp_fp32_vertex_cycles, amp_mode, amp_vertex_cycles, hmac_vertex_cycles, plan_matmul

MK2 = load_system("ipu-mk2").ipu


def test_fp32_mode_is_poplins_16_unit_float_amp():
    mode = amp_mode(MK2, 4, 4)
    assert (mode.in_group, mode.out_group, mode.cycles_per_position, mode.float_activations) == (8, 16, 8, True)
    assert not amp_mode(MK2, 2, 4).float_activations and not amp_mode(MK2, 2, 2).float_activations


def test_fp32_amp_one_position_nine_input_groups():
    """m = 1 (one worker busy), k = 72 (9 input groups), n = 11 (1 output group).
    Workers: 47 cycles at n = 1, 57 when zeroing (47 + 2 + 8); 6 x that, or 6 x 0 + 14 for the idle.
    50 + 24 + 8 x (15 + 89 + 282) + (89 + 342) = 3593, of which 9 pairs x 8 cycles x 1 position
    is work."""
    total, fixed = amp_fp32_vertex_cycles(amp_mode(MK2, 4, 4), 1, 1, 72, 11)
    assert (float(total), float(fixed)) == (3593, 3521)
    assert float(amp_vertex_cycles(MK2, amp_mode(MK2, 4, 4), 1, 1, 72, 11)) == 3593


def test_fp32_amp_even_workers_pay_the_imbalance_tag():
    """m = 24 (4 positions per worker), k = 16 (2 input groups), n = 32 (2 output groups).
    Worker 46 + 8 = 54, zeroing 54 + 2 + 32 = 88; all equal, so 6 x w + 14: 338 and 542.
    50 + 24 + (15 + 2 x (89 + 338)) + 2 x (89 + 542) = 2205; work 2 x 2 x 24 x 8 = 768."""
    total, fixed = amp_fp32_vertex_cycles(amp_mode(MK2, 4, 4), 1, 24, 16, 32)
    assert (float(total), float(fixed)) == (2205, 1437)


def test_fp32_amp_pair_costs_far_more_than_its_rate_at_one_position():
    """At one output position per tile a fp32 (input, output) group pair costs ~430 cycles (the
    worker's fixed path and the partials zeroing), not the 8 per position of the rate; fp16 with
    fp32 partials pays 133 + the 32-cycle weight load of its 8 conv units per pair. The same
    [1, 16] @ [16, 16] block (2 fp32 input groups, 2 fp16 output groups): 50 + 24 + (15 + 89 + 282)
    + (89 + 342) = 891 against 133 + 2 x (165 + 4) = 471."""
    f32 = float(amp_vertex_cycles(MK2, amp_mode(MK2, 4, 4), 1, 1, 16, 16))
    f16 = float(amp_vertex_cycles(MK2, amp_mode(MK2, 2, 4), 1, 1, 16, 16))
    assert (f32, f16) == (891, 471)


@pytest.mark.parametrize("g, m, k, n, total, fixed", [
    # 16 even: dot 7 + 8; worker (16 - 0) + 16 + 19 + (7 + 15) = 73; 58 + 6 x 9 + 23 + 15 + (10 + 438)
    # = 598; zeroing 6 x (1 + 14 - 9) = 36
    (1, 1, 16, 1, 634, 586),
    # 5 odd: dot 7 + 1 + 10 = 18 (11 per element); 2 positions on the busiest worker:
    # 51 + 2 x 25 = 101; 112 + 23 + 15 + 2 x (10 + 606) = 1382; zeroing 6 x 6 x 2 = 72
    (1, 7, 5, 2, 1454, 1190),
])
def test_fp32_hmac_vertex(g, m, k, n, total, fixed):
    t, f = hmac_vertex_cycles(g, m, k, n)
    assert (float(t), float(f)) == (total, fixed)


@pytest.mark.parametrize("g, m, k, n, total, fixed", [
    # the 1x1 form with fp32 partials: 16 = 4 x 4, dot 7 - 1 + 4; worker (16 - 15) + 16 + 14 + (2 + 10)
    # = 43; 55 + 6 x (9 + 15) + 23 + 15 + (10 + 258) = 505; zeroing 6 x (1 + 14 - 9) = 36
    (1, 1, 16, 1, 541, 517),
    # 6 even, not a multiple of 4: two loads a step and a warm-up cycle, dot 7 + 1 + 6 - 1 = 13 (7 per
    # element); 2 positions: 31 + 2 x 15 = 61; 199 + 38 + 2 x (10 + 366) = 989; zeroing 6 x 6 x 2 = 72
    (1, 7, 6, 2, 1061, 893),
])
def test_fp16_hmac_vertex(g, m, k, n, total, fixed):
    t, f = hmac_vertex_cycles(g, m, k, n, itemsize=2)
    assert (float(t), float(f)) == (total, fixed)


@pytest.mark.parametrize("g, m, k, n, total, fixed", [
    # fp16 partials (not the 1x1 form), output channels in pairs: one pair, one position; dot of the
    # pair (1 + 2) x 2 + 1 + 3 + 1 = 11, + 16 / 4 - 1 = 14; worker (16 - 6) + 19 + (7 + 14) + 16 = 66;
    # 65 + 6 x (10 + 6) + 23 + 15 + (10 + 396) = 605; zeroing the pair's 2 partials: 6 x (1 + 15 - 10) = 36
    (1, 1, 16, 2, 641, 617),
    # 3 channels make 2 pairs; 6 input channels load 2 a step with a warm-up cycle per channel of the
    # pair: dot 11 + 2 + 3 x 2 - 1 = 18 (8 per position); 2 positions: 45 + 2 x 25 = 95;
    # 65 + 96 + 23 + 15 + 2 x (10 + 570) = 1359; zeroing 14 partials a group, 3 a worker: 6 x 6 x 2 = 72
    (1, 7, 6, 3, 1431, 1239),
])
def test_half_partials_hmac_vertex(g, m, k, n, total, fixed):
    """poplibs' estimate of ConvPartialHorizontalMac<half, half> (PerformanceEstimation.hpp at 7eac0f26:
    getConvPartialHorizontalMacSupervisorCycleEstimate and getDenseDotProductCycles with half partials)."""
    t, f = hmac_vertex_cycles(g, m, k, n, itemsize=2, partials_bytes=2)
    assert (float(t), float(f)) == (total, fixed)


def test_planner_takes_hmac_where_the_amp_would_pad():
    """poplin tries HMAC beside AMP: a [1, 1000] @ [1000, 5] layer runs it in fp32 and fp16 (5 output
    channels, one position: the AMP would pad the channels and rearrange the padded operands); a
    1000-wide fp32 layer stays AMP, as does fp16 with fp16 partials, where the AMP writes fp16 partials
    on all 16 conv units and beats the half-partials HMAC. A product of two activations, one row of
    1000 by 64 columns, runs the half-partials HMAC (output channels in pairs)."""
    tiny = plan_matmul(1, 1, 1000, 5, 4, True, MK2, MK2.tiles, 0.6)
    assert tiny.vertex == "hmac" and "hmac vertex" in tiny.describe()
    assert plan_matmul(1, 1, 1000, 1000, 4, True, MK2, MK2.tiles, 0.6).vertex == "1x1"
    assert plan_matmul(1, 1, 1000, 5, 2, True, MK2, MK2.tiles, 0.6).vertex == "hmac"
    assert plan_matmul(1, 1, 1000, 5, 2, True, MK2, MK2.tiles, 0.6, partials_bytes=2).vertex == "1x1"
    pair = plan_matmul(1, 1, 1000, 64, 2, False, MK2, MK2.tiles, 0.6, partials_bytes=2)
    assert pair.vertex == "hmac" and pair.partials_bytes == 2
