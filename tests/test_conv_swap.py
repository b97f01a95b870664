"""The backward pass with its operands swapped (poplin's swapOperands) and the padding its nx1
vertex skips (sim/cost/amp.py kernel_hits, padding_coverage; sim/cost/rules.py _swapped_grad_input)."""

from dataclasses import replace

import numpy as np
import pytest

from sim import load_system, poplibs_benchmarks as pb
from sim.cost import rules
from sim.cost.amp import ConvShape, kernel_hits, padding_coverage, plan_matmul


def test_kernel_hits_count_the_kernel_indices_on_real_input():
    # conv_5x200's swapped backward pass: 15 output rows, an 11-row kernel (the zDeltas field) over
    # the 5 weight rows padded by 10: every output row meets at most 5 of the 11
    assert kernel_hits(15, 11, 5, 10) == (1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 4, 3, 2, 1)
    assert sum(kernel_hits(15, 11, 5, 10)) == 5 * 11  # each weight row meets each zDeltas row once
    assert kernel_hits(17, 3, 17, 1) == (2,) + (3,) * 15 + (2,)  # "same" padding
    assert kernel_hits(8, 3, 17, 0, stride=2) == (3,) * 8  # stride 2, no padding: all on the field
    assert kernel_hits(3, 1, 3, 0) == (1, 1, 1)


def test_padding_coverage_is_the_busiest_tiles_share():
    conv = ConvShape(11, 1, 1, 200, 100, 1, 15, row_hits=kernel_hits(15, 11, 5, 10),
                     col_hits=kernel_hits(200, 1, 200, 0))
    # the whole field: 55 of 15 x 11 pairs; one row: the densest, 5 of 11; 4 rows: 20 of 44
    got = padding_coverage(conv, np.array([3000, 200, 800, 50]))
    assert got == pytest.approx([55 / 165, 5 / 11, 20 / 44, 5 / 11])
    assert padding_coverage(ConvShape(3, 3, 1, 17, 64), np.array([289]))[0] == 1.0  # no hits: all


def test_the_planner_chooses_without_the_padding_and_charges_with_it():
    ipu = load_system("ipu-mk2").ipu
    conv = ConvShape(11, 1, 1, 200, 100, 1, 15, row_hits=kernel_hits(15, 11, 5, 10),
                     col_hits=kernel_hits(200, 1, 200, 0), expandable=False)
    plan = plan_matmul(1, 3000, 1100, 1440, 2, True, ipu, ipu.tiles, 0.6, conv=conv)
    plain = plan_matmul(1, 3000, 1100, 1440, 2, True, ipu, ipu.tiles, 0.6,
                        conv=replace(conv, row_hits=(), col_hits=()))
    assert plan.vertex == "nx1"  # the 5-row field is shorter than the 11-row kernel: not expandable
    assert plan.planned_cycles == plain.planned_cycles == plain.estimate  # chosen as poplin estimates it
    assert plan.splits == plain.splits
    assert plan.total_cycles < 0.7 * plan.planned_cycles  # most kernel rows meet padding


def _grad_input_cost(name):
    bench = pb.BENCHES[name]
    g = pb.graph(bench)
    op = next(o for o in g.ops if o.kind == "conv2d_grad_input")
    ipu = pb.system(bench).ipu
    return rules.op_cost(op, g, ipu, ipu.tiles), g, op, ipu


def test_a_large_batch_one_channel_backward_pass_swaps_its_operands():
    # conv_5x200_1_in_100_out_bs1440: dX has 1 channel, so unswapped the pass fills 1 of the AMP's
    # output channels; swapped, the batch of 1,440 is its output channels
    cost, g, op, ipu = _grad_input_cost("conv_5x200_1_in_100_out_bs1440")
    sig = rules.op_signature(op, g)
    _, ins, outs, attrs = sig
    swapped, _ = rules._swapped_grad_input(ins[0][0], outs[0][0], dict(attrs), 1, 1, 100, 2, ipu, ipu.tiles,
                                           0.6, 4)
    assert swapped.dims == (1, 3000, 1100, 1440)
    assert cost.compute_cycles == swapped.compute_cycles and cost.exchange_cycles == swapped.exchange_cycles
    assert cost.cycles < 110_000  # 1.46 M cycles unswapped (the swapped pass 103,556 on its 11 kernel rows)


def test_a_small_batch_backward_pass_keeps_its_operands():
    # batch 4: swapped, the pass would have 4 output channels; poplin's estimate keeps the plain plan
    cost, g, op, ipu = _grad_input_cost("inception_tr_bs4_i5_c7x1a")
    assert "nx1" in cost.plan or "expand" in cost.plan
    _, ins, outs, attrs = rules.op_signature(op, g)
    swapped, _ = rules._swapped_grad_input(ins[0][0], outs[0][0], dict(attrs), 1, 128, 128, 2, ipu, ipu.tiles,
                                           0.6, 4)
    assert swapped.dims[3] == 4 and swapped.estimate > cost.cycles
