"""Depthwise convolutions as poplin plans them (sim/cost/depthwise.py).

The vertex values are poplibs' estimators (lib/poplin/PerformanceEstimation.hpp at 7eac0f26) worked
by hand for one tile: 16 conv groups, a 3x3 kernel, a 1x14x14 output field, fp16 inputs, 6 workers
(docs/reference/poplibs-costs.md 1.11). They are exact: the estimators are integer arithmetic.
"""

import sim
from sim.cost.amp import pass_fixed_cycles
from sim.cost.depthwise import plan_depthwise, slic_vertex_cycles, vmac_vertex_cycles, worker_rows
from sim.graph.ir import GraphBuilder
from sim.hardware.system import load_system

MK2 = load_system("ipu-mk2").ipu


def test_workers_take_even_ranges_of_the_flattened_field_cut_at_rows():
    # 196 outputs: boundaries 0, 32, 65, 98, 130, 163, 196 over rows of 14
    rows = worker_rows(1, 14, 14, 6)
    assert rows[0] == [(14, 2), (4, 1)]
    assert rows[1] == [(10, 1), (14, 1), (9, 1)]
    assert rows[2] == [(5, 1), (14, 2)]
    assert rows[3:] == rows[:3]
    assert sum(n * c for w in worker_rows(3, 5, 7, 6) for n, c in w) == 105
    assert worker_rows(1, 1, 2, 6)[0] == []  # a worker with nothing to do


def test_slic_vertex_is_poplins_estimate():
    # fp32 partials, 2 chains: 28 + 79 + 364 + 4 x 1098 + 8 x 1128
    assert slic_vertex_cycles(1, 14, 14, 4, 3, 3, 1, 4, 2, 6) == 13887
    # fp16 partials: 4 chains (ipu2's 16 conv units) and 2 chains (ipu1's 8, the merging variant)
    assert slic_vertex_cycles(1, 14, 14, 4, 3, 3, 1, 2, 4, 6) == 8799
    assert slic_vertex_cycles(1, 14, 14, 4, 3, 3, 1, 2, 2, 6) == 15868
    # output stride 2 on a 7x7 output
    assert slic_vertex_cycles(1, 7, 7, 4, 3, 3, 2, 4, 2, 6) == 8799
    # fp16 partials on 4 chains also take 8 or 16 conv groups a group: a weight load and a worker pass per 4
    assert slic_vertex_cycles(1, 14, 14, 2, 3, 3, 1, 2, 4, 6, group=8) == 8092
    assert slic_vertex_cycles(1, 14, 14, 1, 3, 3, 1, 2, 4, 6, group=16) == 8129


def test_vmac_vertex_is_poplins_estimate():
    assert vmac_vertex_cycles(14, 14, 1, 3, 3, 4, 1, 4, 6) == 47785
    assert vmac_vertex_cycles(14, 14, 1, 3, 3, 4, 1, 2, 6) == 42444
    assert vmac_vertex_cycles(14, 14, 1, 3, 3, 2, 1, 2, 6, group=8) == 38104
    assert vmac_vertex_cycles(14, 14, 1, 3, 3, 1, 1, 2, 6, group=16) == 37905


def test_wider_groups_only_with_fp16_partials_and_slic_only_on_four_chains():
    mk1 = load_system("ipu-mk1-c2").ipu
    shape = dict(batch=4, groups=256, in_hw=(28, 28), out_hw=(28, 28), kernel=(3, 3), stride=1, padding=(1, 1),
                 itemsize=2, memory_proportion=0.6)
    assert all(plan_depthwise(p, **shape, partials_bytes=4, ipu=MK2, tiles=MK2.tiles).group == 4
               for p in ("fwd", "bwd", "wu"))
    half = {p: plan_depthwise(p, **shape, partials_bytes=2, ipu=MK2, tiles=MK2.tiles) for p in ("fwd", "wu")}
    assert half["wu"].group in (4, 8, 16) and half["fwd"].total_cycles > 0
    # ipu1's 8 half-half conv units give SLIC 2 chains and 4 groups only
    fwd = plan_depthwise("fwd", **shape, partials_bytes=2, ipu=mk1, tiles=mk1.tiles)
    assert fwd.vertex == "vmac" or fwd.group == 4


def _plans(stride, field=56, groups=128, batch=4):
    out = (field + 2 - 3) // stride + 1
    return {p: plan_depthwise(p, batch, groups, (field, field), (out, out), (3, 3), stride, (1, 1), 2, 4, MK2,
                              MK2.tiles, 0.6) for p in ("fwd", "bwd", "wu")}


def test_each_pass_runs_poplins_vertex_for_it():
    plans = _plans(1)
    assert plans["wu"].vertex == "vmac"  # its kernel is the output field: SLIC's window does not apply
    for plan in plans.values():
        assert plan.fits and plan.tiles_used <= MK2.tiles
        assert plan.compute_cycles > plan.vertex_cycles > 0
        # the fixed part: the vertex with no work (its loops, weight loads, worker preambles) and the pass's
        assert pass_fixed_cycles() < plan.launch_cycles < plan.compute_cycles
    # the weight update reduces the partials of the kernel rows and batch split over the tiles
    assert plans["wu"].splits[1] * plans["wu"].splits[2] > 1 and plans["wu"].exchange_phases >= 2


def test_a_strided_backward_pass_runs_over_the_inputs_field():
    # the output gradient is dilated by the stride: the backward pass convolves the 4x larger input field
    plans = _plans(2)
    assert plans["bwd"].vertex_cycles > plans["fwd"].vertex_cycles
    assert plans["bwd"].total_cycles > 1.2 * plans["fwd"].total_cycles


def test_more_work_per_tile_costs_more_and_fp32_has_no_depthwise_vertex():
    small, large = _plans(1, field=14, groups=512), _plans(1, field=112, groups=512)
    assert all(large[p].total_cycles > small[p].total_cycles for p in small)
    assert plan_depthwise("fwd", 1, 32, (8, 8), (8, 8), (3, 3), 1, (1, 1), 4, 4, MK2, MK2.tiles, 0.6) is None


def test_a_depthwise_layer_costs_what_its_plan_says_and_fp32_stays_on_the_vector_unit():
    o = sim.Options().enableSyntheticData(True)
    for dtype, word in (("float16", "depthwise SLIC"), ("float32", "")):
        b = GraphBuilder("dw", dtype)
        x = b.input("x", (4, 64, 28, 28))
        b.output(b.conv2d(x, 64, 3, 1, 1, groups=64, name="dw"))
        cost = sim.compile(b.graph, "ipu-mk2", o).costs["dw/conv2d"]
        assert cost.plan.startswith(word) if word else "SLIC" not in cost.plan


def test_activations_from_another_op_are_regrouped_first():
    # SLIC and VMAC read 4 conv groups at a time: an activation laid out by the op before (channels
    # innermost) is copied into the plan's layout first; a graph input is created in it
    shape = dict(batch=4, groups=128, in_hw=(28, 28), out_hw=(28, 28), kernel=(3, 3), stride=1, padding=(1, 1),
                 itemsize=2, partials_bytes=4, ipu=MK2, tiles=MK2.tiles, memory_proportion=0.6)
    for pass_ in ("fwd", "bwd"):
        laid_out = plan_depthwise(pass_, **shape)
        regrouped = plan_depthwise(pass_, **shape, regroup_input=True)
        assert regrouped.compute_sets == laid_out.compute_sets + 1
        assert regrouped.exchange_phases == laid_out.exchange_phases + 1
        assert regrouped.total_cycles > laid_out.total_cycles
    wu = plan_depthwise("wu", **shape)  # rearranges both operands either way
    assert wu == plan_depthwise("wu", **shape, regroup_input=True)
    o = sim.Options().enableSyntheticData(True)
    b = GraphBuilder("dw2", "float16")
    x = b.input("x", (4, 64, 28, 28))
    y = b.conv2d(x, 64, 3, 1, 1, groups=64, name="dw1")
    b.output(b.conv2d(y, 64, 3, 1, 1, groups=64, name="dw2"))
    costs = sim.compile(b.graph, "ipu-mk2", o).costs
    assert costs["dw2/conv2d"].cycles > costs["dw1/conv2d"].cycles
