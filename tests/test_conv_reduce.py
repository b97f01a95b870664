"""poplin's reduction of matmul/convolution partials (sim/cost/conv_reduce.py): the stage plan of
ConvReducePlan.cpp, the tiles and outputs of ConvReduce.cpp's sections and the ReduceAdd estimate
of PerformanceEstimation.hpp (poplibs 8dcde1ec), with values worked by hand from those sources."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from sim import load_system
from sim.cost.amp import partials_reduction
from sim.cost.conv_reduce import (conv_partials_reduction, multi_stage_plan, reduce_add_cycles,
                                  single_input_fits)

MK2 = load_system("ipu-mk2").ipu
MK1 = load_system("ipu-mk1-c2").ipu
VERTEX = (MK2.worker_threads, MK2.data_path_bits)  # 6 workers, 64-bit loads


@pytest.mark.parametrize("depth, plan", [(1, ()), (2, ()), (15, ()), (16, (4,)), (23, (5,)), (48, (7,)),
                                         (124, (11,)), (200, (35, 6))])
def test_stage_plan_is_poplins(depth, plan):
    """getMultiStageReducePlan: one stage below 16, then the depths with the fewest messages
    (23: 5 + 23/5 = 9.6 beats 4 + 23/4 = 9.75; 200: 35 then 6)."""
    assert multi_stage_plan(depth) == plan


def test_reduce_add_estimate_both_forms():
    # 144 fp32 partial outputs to fp16: 36 accumulator loops, 6 a worker
    # single input, 14 exchanged rows: 6 * (20 + (2*14 + 7) * 6) + 33
    assert int(reduce_add_cycles(144, 14, False, True, True, *VERTEX)) == 1413
    # general form, 15 rows: 6 * (32 + (3*15 + 6) * 6)
    assert int(reduce_add_cycles(144, 15, False, True, False, *VERTEX)) == 2028
    # 10 outputs (not whole vectors): 3 loops, none a full worker's, the ragged rest 2*3 + 13
    assert int(reduce_add_cycles(10, 3, False, True, False, *VERTEX)) == 6 * (32 + 2 * 3 + 13)
    # fp32 result: one more cycle a loop
    assert int(reduce_add_cycles(144, 15, True, True, False, *VERTEX)) == 6 * (32 + (3 * 15 + 7) * 6)


def test_single_input_check_against_a_sixteenth_of_the_tile():
    """checkPartialsSizeForSingleInputReduce with 32 KiB memory elements: a Mk2 tile (624 KiB,
    1/16 = 39,936 bytes) takes up to one element of exchanged partials; a Mk1 tile (256 KiB) none."""
    assert single_input_fits(32 * 1024, 624 * 1024, MK2.memory_element_bytes)
    assert not single_input_fits(32 * 1024 + 1, 624 * 1024, MK2.memory_element_bytes)
    assert not single_input_fits(1, 256 * 1024, MK1.memory_element_bytes)


def test_sections_split_the_block_in_channel_grains():
    """2048 outputs held by 23 tiles: stage 1 reduces 5 rows on 4 tiles a section (512 outputs
    each, 4 rows received), stage 2 the 5 results on all 23 (12 grains of 8 = 96 outputs)."""
    stages = conv_partials_reduction(np.array([2048]), np.array([23]), 4, 2, 8, MK2)
    (got1, cyc1, fix1), (got2, cyc2, fix2) = stages
    # single input (whole vectors, 8 KiB exchanged): 2 cycles a row, 4 rows exchanged
    assert (int(got1[0]), int(cyc1[0])) == (4 * 512 * 4, 6 * (20 + (2 * 4 + 8) * 22) + 33)
    assert (int(got2[0]), int(cyc2[0])) == (4 * 96 * 4, 6 * (20 + (2 * 4 + 7) * 4) + 33)
    assert int(fix1[0]) == int(fix2[0]) == 6 * 20 + 33
    # on a Mk1 tile the general form: 3 cycles a row, all 5 rows
    mk1 = conv_partials_reduction(np.array([2048]), np.array([23]), 4, 2, 8, MK1)
    assert int(mk1[0][1][0]) == 6 * (32 + (3 * 5 + 7) * 22)


def test_amp_partials_reduction_sums_the_stages():
    exch, compute, stages, recv, fixed = partials_reduction(MK2, np.array([2048, 2048, 2048]),
                                                            np.array([1, 15, 23]), 4)
    assert list(stages) == [0, 1, 2]
    assert list(compute) == [0, 1413, 6 * (20 + 16 * 22) + 33 + 6 * (20 + 15 * 4) + 33]
    assert list(recv) == [0, 14 * 144 * 4, 4 * 512 * 4 + 4 * 96 * 4]
    setup, bw = MK2.exchange_setup_cycles, MK2.exchange_rate
    # each stage's exchange: its set-up and its bytes at the exchange rate, rounded up per phase
    assert list(exch) == [0, setup + math.ceil(14 * 144 * 4 / bw),
                          2 * setup + math.ceil(8192 / bw) + math.ceil(1536 / bw)] == [0, 2418, 2997]
    assert list(fixed) == [0, 153, 306]


def test_fast_reduce_loads_interleaved_partials_at_twice_the_width():
    """enableFastReduce (getReduceCycleEstimate's constrainPartials): the single-input form loads
    2 x 64 bits a cycle, so fp32 partials take 1 cycle a row, not 2; the general form is unchanged."""
    assert int(reduce_add_cycles(144, 14, False, True, True, *VERTEX, True)) == 6 * (20 + (1 * 14 + 7) * 6) + 33
    assert int(reduce_add_cycles(144, 15, False, True, False, *VERTEX, True)) == 2028


def test_fast_reduce_takes_the_single_input_form_whatever_the_partials_size():
    """On a Mk1 tile (the general form above, the partials over 1/16 of the tile) enableFastReduce
    runs the single-input vertex at 1 cycle a row, 4 rows exchanged."""
    fast = replace(MK1, fast_reduce=True)
    (got, cycles, fixed), _ = conv_partials_reduction(np.array([2048]), np.array([23]), 4, 2, 8, fast)
    assert int(cycles[0]) == 6 * (20 + (1 * 4 + 8) * 22) + 33 and int(fixed[0]) == 6 * 20 + 33


def test_without_multi_stage_reduce_every_depth_is_one_stage():
    """enableMultiStageReduce off: 23 partials reduced in one stage, 22 rows received by each tile."""
    one = replace(MK2, multi_stage_reduce=False)
    assert multi_stage_plan(200, False) == ()
    (stage,) = conv_partials_reduction(np.array([2048]), np.array([23]), 4, 2, 8, one)
    assert int(stage[0][0]) == 22 * 96 * 4  # 2048 outputs over 23 tiles in grains of 8: 96 each
    exch, compute, stages, recv, fixed = partials_reduction(one, np.array([2048]), np.array([23]), 4)
    assert list(stages) == [1] and list(recv) == [22 * 96 * 4]
