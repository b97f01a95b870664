"""poplin's planner where no plan fits availableMemoryProportion (ConvPlan.cpp runPlanner, SDK 1.3 on): the fastest
plan within twice the budget, doubled again until one fits; and convolutions serialised along their channels
only (ConvModel.cpp constructModel: outChanSplit.serial or inChanSplit.serial, never the field)."""

from __future__ import annotations

import math

import pytest

import sim
from sim.cost import op_cost
from sim.cost.amp import ConvShape, memory_bounds, plan_fc_training, plan_matmul
from sim.cost.depthwise import plan_depthwise
from sim.validation.calibration import _blur_graph, conv_budget_rows

MK2 = sim.load_system("ipu-mk2").ipu
MK1 = sim.load_system("ipu-mk1-c2").ipu
SRAM = MK2.sram_bytes_per_tile


def test_the_bound_doubles_until_it_reaches_twice_the_tile_then_there_is_none():
    """runPlanner's do-while: the bound doubled and tried while the last one tried is under twice the tile's
    bytes; then cycles are minimised with no bound."""
    assert memory_bounds(0.6 * SRAM, MK2) == [0.6 * SRAM, 1.2 * SRAM, 2.4 * SRAM, math.inf]
    assert [b / SRAM for b in memory_bounds(0.1 * SRAM, MK2)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, math.inf])


def test_a_matmul_no_plan_of_which_fits_takes_the_fastest_within_the_doubled_bound():
    """[4096, 4096] @ [4096, 4096] fp16 on Mk2: no plan fits below about 8 % of a tile. At 1 % and 2 % the bound
    doubles to 8 % (the plan there, serialised x128), at 3 % to 6 % (x256, slower): a smaller proportion can be
    faster, as in poplin. The least-memory plan (before SDK 1.3) would serialise furthest at every one."""
    plans = {p: plan_matmul(1, 4096, 4096, 4096, 2, True, MK2, MK2.tiles, p) for p in (0.01, 0.02, 0.03, 0.08)}
    assert plans[0.08].fits and plans[0.08].memory_bound == 0
    for p, bound in ((0.01, 0.08), (0.02, 0.08), (0.03, 0.06)):
        assert not plans[p].fits
        assert plans[p].memory_bound == pytest.approx(bound * SRAM)
        assert plans[p].temp_bytes_per_tile <= plans[p].memory_bound
        assert "no plan within the memory budget" in plans[p].describe()
    assert (plans[0.01].serial, plans[0.01].estimate) == (plans[0.08].serial, plans[0.08].estimate) == (128, 3413086)
    assert (plans[0.03].serial, plans[0.03].estimate) == (256, 3598046)


def test_a_fully_connected_layer_no_plan_of_which_fits_is_planned_within_the_doubled_bound():
    """Training a [1024, 4096] x [4096, 4096] layer at 1 %: neither the joint plan nor the separate passes fit;
    each is planned again within 2 % (createPlan's minimizeMemory), and the separate passes kept, needing less
    temporary memory than the joint plan."""
    plans, joint = plan_fc_training(1, 1024, 4096, 4096, 2, MK2, MK2.tiles, 0.01)
    assert not joint
    for p in plans.values():
        assert not p.fits and p.memory_bound == pytest.approx(0.02 * SRAM)
    fitting, _ = plan_fc_training(1, 1024, 4096, 4096, 2, MK2, MK2.tiles, 0.05)
    assert all(p.fits and p.memory_bound == 0 for p in fitting.values())


def test_a_depthwise_convolution_no_plan_of_which_fits_is_the_plan_of_its_doubled_bound():
    """A 3x3 depthwise convolution of 256 channels over 8 x 112 x 112 fp16 on Mk2: its plans need 120 kB a tile
    or more. At 0.15 none fits, and the plan is the fastest within 0.3 (the fastest of all); at 0.19 a slower
    one fits."""
    args = ("fwd", 8, 256, (112, 112), (112, 112), (3, 3), 1, (1, 1), 2, 4, MK2, MK2.tiles)
    over, doubled, tight = (plan_depthwise(*args, p) for p in (0.15, 0.3, 0.19))
    assert (over.fits, doubled.fits, tight.fits) == (False, True, True)
    assert (over.splits, over.total_cycles) == (doubled.splits, doubled.total_cycles) == ((22, 8, 8, 1), 48729)
    assert tight.total_cycles == 53901
    assert "no plan within the memory budget" in over.describe()


def test_a_convolution_is_serialised_along_its_channels():
    """VGG-16's first 3x3 64-channel layer at batch 4 on Mk1, proportion 0.6: two pieces of 32 output channels,
    as poplin's outChanSplit.serial; a 4-channel image cannot be cut (one channel group), so a budget it does
    not fit is doubled instead."""
    vgg = plan_matmul(1, 4 * 224 * 224, 64 * 9, 64, 2, True, MK1, MK1.tiles, 0.6,
                      conv=ConvShape(3, 3, 1, 224, 64, 4, 224))
    assert (vgg.serial, vgg.serial_dim, vgg.fits) == (2, "N", True)
    assert vgg.describe().endswith("serialised x2 over the output channels")
    g = _blur_graph(768, 1024, "float16")
    blur = op_cost(g.ops[0], g, MK1, MK1.tiles, 0.1)
    assert blur.over_memory_budget and "serialised" not in blur.plan


def test_the_blur_sweep_falls_back_where_the_hardware_did():
    """lbm-graphcore's sweep on Mk1 hardware (sim.validation.calibration.CONV_BUDGET_SWEEP): at every
    proportion where the hardware ran its fallback plan (3 times the simulator's time or more), and only
    there, the simulator's planner finds no plan within the budget."""
    rows = {(r["image"], r["dtype"]): (r["hardware"], r["simulated"]) for r in conv_budget_rows()}
    assert rows == {("bricks", "float16"): ([], []), ("bricks", "float32"): ([], []),
                    ("leaf", "float16"): ([0.1], [0.1]), ("leaf", "float32"): ([0.1], [0.1]),
                    ("cheese", "float16"): ([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]),
                    ("cheese", "float32"): ([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4])}


def test_the_run_says_which_ops_no_plan_fits():
    g = _blur_graph(768, 1024, "float16")
    one = sim.load_system("ipu-mk1-c2").one_ipu()
    runs = {p: sim.simulate(g, one, sim.Options().enableSyntheticData(True).setAvailableMemoryProportion({"IPU0": p}))
            for p in (0.1, 0.2)}
    [note] = [n for n in runs[0.1].all_notes if n.startswith("availableMemoryProportion is too small")]
    assert "IPU 0: 1 op (e.g. 'blur/conv2d'" in note
    assert not any(n.startswith("availableMemoryProportion is too small") for n in runs[0.2].all_notes)
    # planned within the doubled bound, the 0.2 plan: the same cycles
    assert runs[0.1].cycle_count == runs[0.2].cycle_count
    assert op_cost(g.ops[0], g, MK1, MK1.tiles, 0.1).over_memory_budget
