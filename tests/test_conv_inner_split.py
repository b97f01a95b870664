"""A convolution's reduction and field split over tiles as poplin makes them.

poplin's planner (ConvModel.cpp constructModel, poplibs 8dcde1ec) splits a convolution's reduction as
``inChanSplit.parallel`` over the input-channel grains (``inChansPerGroup``: 16 for the fp16 AMP) times
``kernelSplit`` of every kernel dimension but the innermost ("the implementation doesn't support
splitting the inner-most kernel dimension"), each tile taking ``ceil`` of each; its field and batch
splits are popsolver variables over every value. ``sim.cost.amp.conv_inner_block`` gives the busiest
tile's share of the reduction for a split count (the best factorisation), and the planner also tries the
field split that fills the tiles the other splits leave.
"""

import numpy as np

from sim import poplibs_benchmarks as pb
from sim.cost.amp import ConvShape, _candidates, conv_inner_block
from sim.cost.rules import op_cost


def _k(kh, kw, ci, vertex, pk):
    conv = ConvShape(kh, kw, 1, 8, ci)
    return conv_inner_block(conv, vertex, ci * kh * kw, np.array(pk), 16).tolist()


def test_channels_split_in_whole_grains_and_innermost_kernel_dimension_never_split():
    # 1x7 kernel, 160 channels (10 grains) over 8 tiles: 2 grains x 7 = 224, not 1120 / 8 = 140
    assert _k(1, 7, 160, "nx1", [1, 8, 10]) == [1120, 224, 112]


def test_outer_kernel_dimension_split_with_the_channels():
    # 3x3 kernel, 256 channels (16 grains): 15 tiles = 3 kernel rows x 5 (4 grains) -> 64 x 3 = 192,
    # better than 15 channel splits (2 grains x 9 = 288); 16 tiles: 1 grain x 9 = 144
    assert _k(3, 3, 256, "nx1", [15, 16]) == [192, 144]
    # 7x1 kernel, 128 channels: 7 tiles = the 7 kernel rows, all channels each
    assert _k(7, 1, 128, "nx1", [7]) == [128]


def test_expanded_kernel_splits_with_the_channels():
    # 512 channels x 3x3 folded into 4,608 channels (288 grains) over 23 tiles: 13 grains = 208
    assert _k(3, 3, 512, "expanded", [23]) == [208]
    # the kernel's width folded in (expand_w): 3 x 96 = 288 channels (18 grains), 3 rows; 6 tiles
    # = 3 rows x 2 -> 9 grains x 1 row = 144
    assert _k(3, 3, 96, "expand_w", [6]) == [144]


def test_forward_plan_uses_a_field_split_outside_the_fixed_candidates():
    # resnet50 bm64L0A1 (56x56, 3x3, 64 -> 64, batch 4) on IPUModel2: the field over 61 tiles, filling
    # 61 x 8 x 3 = 1,464 of 1,472 tiles; 61 is none of the fixed candidates
    bench = pb.BENCHES["resnet50_tr_bs4_bm64L0A1"]
    graph, system = pb.graph(bench), pb.system(bench)
    fwd = next(op for op in graph.ops if op.kind == "conv2d")
    cost = op_cost(fwd, graph, system.ipu, system.ipu.tiles)
    assert cost.plan == "groups/1 rows/61 cols/8 inner/3 on 1464 tiles, nx1 vertex"
    assert 61 not in _candidates(4 * 56 * 56, system.ipu.tiles)


def test_the_nx1_vertex_loops_over_the_kernel_positions_of_its_share():
    """A tile's share of the reduction is channel grains x kernel rows (x the whole kernel width): its nx1
    vertex loops over those positions, not k / in_channels of them (getConvPartialnx1SupervisorOuterLoop-
    CycleEstimate: fewer positions, more input-channel groups, each of its own loop)."""
    from sim.cost.amp import tile_kernel_positions
    conv = ConvShape(3, 3, 1, 7, 512)  # resnet50 bm512L0A1: 3x3 kernel, 512 channels, 7-wide rows
    # 48 channels x 9 positions (432), 16 channels x 9 (144), 16 channels x one row (48), all 512 x 9
    assert tile_kernel_positions(conv, np.array([432, 144, 48, 4608]), 16).tolist() == [9, 9, 3, 9]
    # a share with no such factorisation keeps k / in_channels positions (at least one)
    assert tile_kernel_positions(conv, np.array([40]), 16).tolist() == [1]


def test_the_busiest_workers_worklist_entries_follow_poplins_partition():
    """partitionConvPartialByWorker (ConvUtilInternal.cpp) gives worker i the positions [i m / 6, (i + 1) m / 6)
    and an entry per row each range touches; the estimate takes the slowest worker."""
    from sim.cost.amp import worker_entries
    # 49 positions in rows of 7: bounds 0, 8, 16, 24, 32, 40, 49; each worker touches 2 rows, the last
    # has 9 positions (the slowest)
    assert worker_entries(np.array([49]), np.array([7]), 6, 16, 4).tolist() == [2]
    # 12 positions in rows of 2: 2 positions each, one row each
    assert worker_entries(np.array([12]), np.array([2]), 6, 16, 4).tolist() == [1]
    # 8 positions in rows of 8: [0, 1) ... worker 5 takes [6, 8): one row
    assert worker_entries(np.array([8]), np.array([8]), 6, 16, 4).tolist() == [1]
    # 9 positions in rows of 2: bounds 0, 1, 3, 4, 6, 7, 9: worker 1 takes [1, 3) over rows 0 and 1
    assert worker_entries(np.array([9]), np.array([2]), 6, 16, 4).tolist() == [2]


def test_an_nx1_plans_compute_set_waits_for_its_slowest_tile():
    """resnet50 bm512L0A1's nx1 plan on Mk2: rows of 7 positions, so a tile one position short of the largest
    block can cut into more worklist entries; the op's compute is its slowest tile's, never less."""
    bench = pb.BENCHES["resnet50_tr_bs4_bm512L0A1"]
    g = pb.graph(bench)
    ipu = pb.system(bench).ipu
    op = next(o for o in g.ops if o.kind == "conv2d")
    cost = op_cost(op, g, ipu, ipu.tiles)
    assert "nx1 vertex" in cost.plan
    assert cost.compute_cycles == int(np.ceil(cost.profile.compute.max()))


def test_each_tiles_share_of_an_nx1_reduction_is_whole_grains_times_kernel_rows():
    """The per-tile shares (the profile's, whose slowest tile a plan waits for) split as poplin hands them
    out (Convolution.cpp iterateTilePartition: part i of n grains over s tiles is [i n / s, (i + 1) n / s)):
    512 channels (32 grains) x 3x3 over 11 tiles: 2 grains x 9 on the first tile, 3 x 9 on the other ten
    (4,608 in all; an even split would give 418-419, no whole grains); 160 channels (10 grains) of a 1x7
    kernel over 8: 1 grain x 7 on six tiles, 2 on the fourth and the eighth."""
    from sim.cost.amp import conv_inner_blocks
    shares = conv_inner_blocks(ConvShape(3, 3, 1, 7, 512), 4608, 11, 16)
    assert shares.tolist() == [288] + [432] * 10
    assert conv_inner_blocks(ConvShape(1, 7, 1, 8, 160), 1120, 8, 16).tolist() == ([112] * 3 + [224]) * 2
    # 256 channels x 3x3 over 15 tiles: 3 kernel rows x 5 channel parts of 16 grains (3, 3, 3, 3 and 4)
    assert conv_inner_blocks(ConvShape(3, 3, 1, 8, 256), 2304, 15, 16).tolist() == ([144] * 4 + [192]) * 3
    # the planner's kernel split, not the one whose balanced parts come out least: 100 channels (7 grains,
    # the last 4 channels) x an 11 x 1 kernel over 3 tiles is 3 channel parts of ceil(7 / 3) = 3 grains by
    # poplin's estimate (528) or 3 kernel-row parts of ceil(11 / 3) = 4 rows (400): the rows are split
    assert conv_inner_blocks(ConvShape(11, 1, 1, 200, 100), 1100, 3, 16).tolist() == [300, 400, 400]


def test_matmul_tiles_take_whole_channel_groups():
    """A 1x1 or HMAC plan's per-tile input channels as poplin splits them: the AMP's groups of 16 fp16
    channels handed out balanced (1,000 channels = 63 groups over 14 tiles: 4 or 5 groups, the last 8
    channels); the HMAC's one group a tile of ceil(K / tiles) channels rounded up to the grain, 2 fp16
    channels (1,000 over 7: 144, not 143) and 1 fp32 (1,000 over 14: 72 on every tile, the last padded,
    not 71 on some), the tiles left over without a group."""
    from sim.cost.amp import channel_blocks, hmac_in_group
    amp_blocks = channel_blocks(1000, 14, "1x1", 2, 16)
    assert amp_blocks.tolist() == [64, 80] * 6 + [64, 72] and amp_blocks.sum() == 1000
    assert channel_blocks(1000, 7, "hmac", 2, 16).tolist() == [144] * 7
    assert channel_blocks(1000, 14, "hmac", 4, 16).tolist() == [72] * 14
    assert channel_blocks(5, 8, "hmac", 4, 16).tolist() == [0, 1, 0, 1, 1, 0, 1, 1]
    assert int(hmac_in_group(1000, 7, 2)) == 144 and int(hmac_in_group(1000, 7, 4)) == 143


def test_a_convolutions_tiles_take_whole_output_channel_grains():
    """A convolution's plan splits its output channels in whole grains (poplin's outChanSplit over
    numOutChanGrains), and its per-tile profile hands them out as poplin does: 100 channels in grains of 8
    (13, the last 4 channels) over 6 tiles are 2 grains on five and 3 on the sixth. A plain matmul's plan
    splits them element by element."""
    from sim.cost.amp import grain_channels, plan_matmul
    assert grain_channels(100, 6, 8).tolist() == [16] * 5 + [20]
    ipu = pb.system(pb.BENCHES["resnet50_tr_bs4_bm512L0A1"]).ipu
    conv = plan_matmul(1, 4 * 14 * 14, 256, 100, 2, True, ipu, ipu.tiles, 0.6, conv=ConvShape(1, 1, 1, 14, 256, 4, 14))
    assert conv.channel_grains and not plan_matmul(1, 784, 256, 100, 2, True, ipu, ipu.tiles, 0.6).channel_grains
    pn = conv.splits[2]
    assert -(-100 // pn) <= max(grain_channels(100, pn, 8)) <= -(-13 // pn) * 8
