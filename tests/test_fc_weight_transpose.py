"""The weight transpose of a fully connected backward pass (sim/cost/amp.py fc_weight_transpose).

poplin's matMul with fullyConnectedPass TRAINING_BWD transposes the weights block by block on the
tiles holding them before the convolution (lib/poplin/Convolution.cpp fullyConnectedWeightTranspose,
lib/popops/Rearrange.cpp addTransposeVertices). The expected values are worked by hand from the
estimators of lib/popops/popopsCycleEstimators.cpp at poplibs 8dcde1ec.
"""

from __future__ import annotations

import pytest

from sim import load_system, poplibs_benchmarks as pb
from sim.cost import op_cost
from sim.cost.amp import fc_weight_transpose, plan_fc_training, transpose_block_cycles


def test_half_blocks_run_the_supervisor_transpose():
    # 12 blocks of 16x16 halves: the busiest of 6 workers takes 2; TransposeWorkerCycles
    # 29 + 2 x (18 + 4 x (12 + 4 x (4 - 2))) + 1 (unpack) = 226; the supervisor
    # 7 + 6 x (226 + 1 - 7) = 1327
    assert transpose_block_cycles(16, 16, 12, 2) == 1327
    # one block: the Transpose worker vertex alone, 6 x (29 + 98 + 1) tile cycles
    assert transpose_block_cycles(16, 16, 1, 2) == 6 * 128
    # up to four 4x4 blocks: the worker, 17 + 20 + 4 x (3 - 2) + 1 = 42 thread cycles
    assert transpose_block_cycles(4, 4, 3, 2) == 6 * 42
    # 8 rows of 4 columns (the Nx4 case): 27 + 5 x (15 + 20 + 4 x (2 - 2)) + 1 = 203, x 6 workers' share of 30
    assert transpose_block_cycles(8, 4, 30, 2) == 7 + 6 * (203 + 1 - 7)


def test_float_blocks_split_over_workers_as_transpose2d():
    # 11 blocks of 8x8 floats: ceil(11/6) = 2 per worker, the fast float path
    # 27 + 2 x (11 + 4 x (6 + 3 x 3)) = 169 thread cycles
    assert transpose_block_cycles(8, 8, 11, 4) == 6 * 169
    # odd sides take the slow path: 13 + 1 x (8 + 3 x (5 + 5 x 2)) = 66
    assert transpose_block_cycles(5, 3, 1, 4) == 6 * 66
    assert transpose_block_cycles(16, 16, 0, 2) == 0


def test_group_sizes_follow_the_planned_input_channel_grouping():
    # bert_ffn2 4096 x 1024 fp16: 16x16 blocks (gcd with 16), 16,384 of them, 12 on the busiest of 1,472 tiles
    assert fc_weight_transpose(1, 4096, 1024, 2, 1472) == transpose_block_cycles(16, 16, 12, 2)
    # 1000 x 1000: gcd(16, 1000) = 8, 8x8 blocks: 15,625 over 1,408 tiles, 12 each
    assert fc_weight_transpose(1, 1000, 1000, 2, 1408) == transpose_block_cycles(8, 8, 12, 2)
    # fp32 groups by 8
    assert fc_weight_transpose(1, 1000, 1000, 4, 1472) == transpose_block_cycles(8, 8, 11, 4)
    # 5 outputs: a group size of 1, poplin takes a view (useCopyImpl): nothing to run
    assert fc_weight_transpose(1, 1000, 5, 2, 512) == 0


def test_backward_matmul_of_a_weight_pays_the_transpose_the_others_do_not():
    ipu = load_system("ipu-mk2").ipu
    g = pb.graph(pb.BENCHES["bert_ffn2_128x4096x1024"])
    costs = {op.name: op_cost(op, g, ipu, ipu.tiles) for op in g.ops}
    # Bwd: dY (128, 1024) @ Wᵀ (1024, 4096)
    plans, joint = plan_fc_training(1, 128, 4096, 1024, 2, ipu, ipu.tiles, 0.6)
    plan = plans["bwd"]
    extra = fc_weight_transpose(1, 4096, 1024, 2, plan.tiles_used)
    assert extra > 0
    assert costs["Bwd"].compute_cycles == plan.compute_cycles + int(extra)
    assert costs["Bwd"].supersteps == plan.supersteps + 1
    # planned apart from the forward pass, the transposed weights then move to this plan's layout: one
    # more exchange phase (tests/test_fc_transposed_weights.py)
    assert costs["Bwd"].sync_cycles == (plan.sync_points + 2) * ipu.internal_sync_cycles
    # the forward pass and the weight update have no transpose
    assert not joint and costs["Fwd"].compute_cycles == plans["fwd"].compute_cycles
    # the busiest tile of the profile carries it
    profile = plan.profile(ipu, ipu.tiles, 2, True)
    assert pytest.approx(profile.compute.max() + int(extra), abs=1) == \
        costs["Bwd"].profile.compute.max()
