"""poplibs' single-layer IPUModel2 benchmarks (sim/poplibs_benchmarks.py) and the matmul/conv cost
components they ground: the weight-update rearrangement and the fixed cycles of a pass.

The rows within 5 % of Poplar's estimate are held there. The whole table simulates in a few
seconds (each row is a one-IPU graph of three or four ops, cached per row).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim import load_system, poplibs_benchmarks as pb
from sim.cost.amp import pass_fixed_cycles, plan_matmul, rearrangement

TOLERANCE = 0.05
# the IPUModel2 rows within 5 % (127 of 173 on 2026-11-23; 129 of 182 since the 9 depthwise rows came on
# 2026-11-28: the depthwise convolution is priced on the vector unit, not as poplin plans it with its
# SLIC / VMAC vertices, plus the pass's fixed cycles; the comments say when rows came and left): held there
WITHIN = (
    "bert_ffn1_384x1024x4096", "bert_ffn1_512x1024x4096",
    # bert_grouped_12x128x64x128 and bert_grouped_16x128x64x128 left (+0.2 -> +6.7 %, +0.3 -> +6.3 %) when
    # the fully connected backward pass began paying poplin's weight transpose (fullyConnectedWeightTranspose,
    # tests/test_fc_weight_transpose.py): Poplar runs that compute set in these rows too (one 16x16 fp16
    # block per tile is 768 cycles by popops' Transpose estimator, plus its sync: 6.5 % of the row), so
    # the earlier agreement relied on the rest of the simulated row over-estimating these small layers
    # by as much (as the fixed cost per pass does for every small fc row: the 1000x5 rows are +10..+33 %)
    "bert_kqv_128x768x2304", "bert_proj_128x1024x1024",
    "bert_proj_384x1024x1024", "bert_proj_384x768x768", "bert_proj_512x768x768", "fc_layer_1440x200x400",
    # fc_layer_16_1000_5_float and fc_layer_1_1000_1000_half left (+1.0 -> +5.4 %, +3.1 -> +5.1 %) when the
    # fc tool's passes began to be planned as poplin plans FC_TRAINING (sim/cost/amp.py plan_fc_training,
    # tests/test_fc_joint_plan.py): separately planned, the weight update's result is rearranged into the
    # weights' layout (ConvModel.cpp addTransformCycleEstimate, rearrangeOutput for FC_TRAINING_WU when not
    # joint), and 1000x1000 picks the joint plan (ConvPlan.cpp createPlan); their earlier agreement came
    # from pricing the passes as independent matmuls with free layouts
    # the fp32 AMP and HMAC vertices as poplibs prices them (tests/test_fp32_vertices.py) brought these
    # in (-17, -13, -13 % before); fc_layer_8_1000_1000_float left (-2 % -> +14 %: Poplar plans batch 8
    # cheaper than batch 1, 14,738 against 15,360 cycles, which one plan for both cannot follow)
    # fc_layer_1_1000_1000_float and fc_layer_4_1000_1000_float left (+1.7 -> +8.9 %, +3.3 -> +10.4 %) with
    # the weight transpose: 8x8 fp32 blocks, 11 a tile, are 1,014 cycles by popops' Transpose2d estimator
    # (plus a sync) that Poplar's rows include; the passes' fp32 vertices as the simulator plans them
    # (unswapped operands, one output position per tile) carried that much too much before
    "fc_layer_16_1000_1000_float", "gemm_1000x256x20000", "gemm_1000x512x10000", "gemm_1000x512x20000",
    "gemm_1000x512x30000", "gemm_200x256x20000", "gemm_200x256x30000", "gemm_200x512x10000",
    "gemm_200x512x30000", "gemm_200x64x20000", "gemm_200x64x30000", "gemm_600x256x20000",
    "gemm_600x256x30000", "gemm_600x512x30000", "gemm_600x64x20000", "inception_tr_bs4_i10_a1x1",
    "inception_tr_bs4_i10_c1x1", "inception_tr_bs4_i10_d1x1", "inception_tr_bs4_i1_a1x1",
    "inception_tr_bs4_i1_c3x3a", "inception_tr_bs4_i1_c3x3b",
    "inception_tr_bs4_i2_a1x1", "inception_tr_bs4_i2_b1x1", "inception_tr_bs4_i3_a1x1",
    "inception_tr_bs4_i3_b1x1", "inception_tr_bs4_i5_a1x1", "inception_tr_bs4_i5_b1x1",
    "inception_tr_bs4_i6_b1x1", "inception_tr_bs4_i9_a1x1",
    "inception_tr_bs4_i9_c1x1", "inception_tr_bs4_layer8", "mobilenet_conv_pw_12_1", "mobilenet_conv_pw_13_1", "mobilenet_conv_pw_3_1", "mobilenet_conv_pw_4_1", "mobilenet_conv_pw_6_1",
    "mobilenet_conv_pw_7_1", "resnet50_tr_bs4_bm128L0A2", "resnet50_tr_bs4_bm128L1A0",
    "resnet50_tr_bs4_bm256L0A2", "resnet50_tr_bs4_bm256L0_projection",
    "resnet50_tr_bs4_bm256L1A0", "resnet50_tr_bs4_bm512L0A0",
    # resnet50_tr_bs4_bm512L0A1 left (+4.4 % -> +5.6 %) when the conv weight update began paying
    # for its expanded (im2col) input: for a 7x7 field poplin likely plans the weight update
    # without expanding both dimensions, a plan the simulator does not offer (tests/test_conv_passes.py)
    "resnet50_tr_bs4_bm512L0A2", "resnet50_tr_bs4_bm64L0", "resnet50_tr_bs4_bm64L0_projection",
    "resnet50_tr_bs4_bm64L1A0", "vgg16_tr_bs4_v4L0", "vgg16_tr_bs4_v5L0",
    # within since the conv passes follow poplin's plans more closely (the weight update's expanded
    # input, the strided 1x1 kernel's expansion and deferred dilation; tests/test_conv_passes.py)
    # within (+499 % before) since the backward pass may swap its operands as poplin's does
    # (tests/test_conv_swap.py)
    "alexnet_tr_bs4_layer4", "inception_tr_bs4_i1_b5x5", "inception_tr_bs4_layer10", "inception_tr_bs4_layer3",
    "inception_tr_bs4_layer5", "resnet50_tr_bs4_bm128L0A1",
    "resnet50_tr_bs4_bm512L0_projection", "vgg16_tr_bs4_v2L0", "vgg16_tr_bs4_v2L1",
    # within (-10.0 % -> -2.7 %) since the backward pass of a 4-channel stem rearranges its weights and
    # output padded to the partial-channel group (poplin padPartialChannels; tests/test_conv_passes.py)
    "mobilenet_conv1_1",
    # within since the fully connected backward pass pays poplin's weight transpose
    # (sim/cost/amp.py fc_weight_transpose; -4.6, -3.3, -4.2, -4.9 % from -7.8, -6.1, -5.6, -5.4 %)
    "bert_grouped_12x384x64x384", "bert_grouped_16x512x64x512",
    "bert_ffn2_512x4096x1024",
    # popops reductions (reduce_op) within 5 % with the reduction plan of sim/cost/reduction.py
    "bert_reduce_0", "bert_reduce_2", "bert_reduce_3", "resnet50_tr_bs1_bm128L0A0_reduce",
    "resnet50_tr_bs1_bm64L0A0_reduce",
    # non-square kernels (Inception-v3's factorised 1xN / Nx1), expressible since conv2d takes (kh, kw)
    "inception_tr_bs4_i5_b1x7", "inception_tr_bs4_i5_c1x7b", "inception_tr_bs4_i6_b1x7",
    "inception_tr_bs4_i6_c1x7b", "inception_tr_bs4_i7_b7x1",
    "inception_tr_bs4_i9_ba1x3", "inception_tr_bs4_i9_bb3x1",
    # within since a matmul's or conv's passes follow poplin's plans more closely (2026-11-23): the fc
    # tool's passes planned jointly as FC_TRAINING (tests/test_fc_joint_plan.py), a backward pass with
    # swapped operands (tests/test_conv_swap.py), the field split per dimension
    # (tests/test_conv_passes.py) and poplin's partials reduction (sim/cost/conv_reduce.py). Left then
    # (over-predicted, all but one of them previously within 5 % by an old plan poplin cannot make, as
    # the 46-way flattened field split of bm64L0A1, or an older reduction rate):
    # fc_layer_8_1000_5_half +6.1%, gemm_600x256x10000 +7.4%, inception_tr_bs4_i6_b7x1 +5.1%,
    # mobilenet_conv_pw_2_1 +5.3%, resnet50_tr_bs4_bm64L0A1 +7.1%
    "bert_ffn1_128x1024x4096", "bert_ffn1_128x768x3072", "bert_ffn1_384x768x3072", "bert_ffn1_512x768x3072",
    "bert_ffn2_384x3072x768", "bert_ffn2_384x4096x1024",     "bert_kqv_128x1024x3072", "bert_kqv_384x1024x3072", "bert_kqv_384x768x2304", "bert_kqv_512x1024x3072",
    "bert_kqv_512x768x2304", "gemm_200x512x20000", "gemm_600x512x10000",
    "mobilenet_conv_pw_5_1", "resnet50_tr_bs4_bm128L0_projection", "vgg16_tr_bs4_v3L1",
    # within since the backward pass of a strided kxk convolution runs on dX's field, zDeltas dilated by
    # the stride (poplin getGradientParams; tests/test_conv_dilated_bwd.py): -8.1, -7.6, -11.8, -5.9 % before
    "inception_tr_bs4_i4_a3x3", "inception_tr_bs4_i4_b3x3b",
    # inception_tr_bs4_layer1 (-0.5 -> -5.6 %) and resnet50_tr_bs4_cnv (-0.5 -> -9.6 %) left on 2026-12-05, when
    # a forward convolution of 4 input channels began running poplin's AMP vertex type of 4 channels a group
    # over 4 kernel rows (tests/test_conv_rows_folded.py): cheaper than the expanded width it ran before, as
    # a 4-channel blur timed on Mk1 hardware runs (reports/validation.md, lbm-graphcore), where Poplar's
    # IPUModel charges these stems more (as it does the vgg16 and alexnet stems, -16 / -11 % before)
    # within since general_matrix_multiply's matmul is planned as poplin's NONE_MATMUL (operands swapped)
    # and its scaledAddTo runs over the product's layout (tests/test_gemm_none_pass.py):
    # +7.3, +7.7, +7.0, +11.9, +7.4, +7.6 % before
    "gemm_1000x256x10000", "gemm_1000x256x30000", "gemm_1000x64x20000", "gemm_1000x64x30000",
    "gemm_600x256x10000", "gemm_600x64x30000",
    # within since a separately planned fc backward pass exchanges its transposed weights from the forward
    # layout (B, session 24: Convolution.cpp fullyConnectedWeightTranspose, tests/test_fc_transposed_weights.py):
    # -5.2, -5.1 % -> -4.6, -3.6 %
    "bert_ffn2_512x3072x768",
    # within since a convolution's reduction is split over tiles in whole input-channel grains times the
    # kernel's outer dimension (alexnet: then cheapest expanded) and its field split may fill the tiles
    # (C, session 24: ConvModel.cpp constructModel; amp.conv_inner_block, tests/test_conv_inner_split.py):
    # -9.8, -9.0, -5.2, +7.3, +7.1 % -> -1.1, -1.6, -4.9, +2.0, -1.1 %
    "alexnet_tr_bs4_layer11", "inception_tr_bs4_i10_b1x1", "inception_tr_bs4_i1_b1x1",
    "resnet50_tr_bs4_bm64L0A1",
    # stride-1 depthwise layers (2026-11-28) once each pass is planned with poplin's SLIC and VMAC vertex
    # estimates (sim/cost/depthwise.py; -1.6 and -13.7 % when priced on the vector unit: -3.1, -3.2 %);
    # mobilenet_depthwise_2 went from -2.0 to -5.3 %; both left again with the exchange efficiency below
    # within since an on-chip exchange moves its data at 0.87 of the 4-byte width, fitted jointly with the
    # pass's fixed cycles (1634 -> 1100) on the IPUModel2 rows (2026-11-28, configs/ipu-mk2.toml
    # exchange_efficiency; plans still chosen at poplin's full rate): the fixed part came down and the
    # part that grows with a layer's bytes went up. Left: conv_5x200_1_in_100_out_bs1440 +6.2 %,
    # fc_layer_80_1324_100 -12.2 %, inception_tr_bs4_i1_db1x1 -5.3 %, inception_tr_bs4_i7_b1x7 +5.0 %,
    # mobilenet_depthwise -6.8 %, mobilenet_depthwise_4 -9.6 %, resnet50_tr_bs1_cnv_reduce +5.9 %,
    # resnet50_tr_bs4_bm256L0A0 -6.0 %, vgg16_tr_bs4_v4L1 +5.4 %
    "bert_ffn2_128x4096x1024",
    "bert_grouped_12x128x64x128", "bert_grouped_16x128x64x128", "bert_proj_512x1024x1024",
    "fc_layer_1_1000_1000_float", "fc_layer_4_1000_5_float", "fc_layer_4_1000_5_half",
    "gemm_200x256x10000",
    "gemm_200x64x10000", "gemm_600x512x20000", "inception_tr_bs4_i9_d1x1",
    "mobilenet_depthwise_6",
    # within (+5.04 -> +4.99 %) since the fp16 AMP vertex's fixed cycles split as poplibs' estimate does:
    # each (input, output) group pair pays the weight load of its conv units (sim/cost/amp.py
    # amp_pair_cycles) and the Bow sweep then fixes the vertex's own overhead at 133, 32 less; with fp32
    # partials (these rows) that is 32 cycles less per vertex call. Left then: alexnet_tr_bs4_layer7
    # -4.97 -> -5.06 %, bert_grouped_16x384x64x384 -4.84 -> -5.08 %, bert_proj_128x768x768 -4.73 -> -5.08 %.
    # inception_tr_bs4_i7_b1x7, within since, left when plans were chosen on poplin's estimate (below)
    # popnn layers (added 2026-11-29 with popnn's fullyConnectedPass on the layers' matmuls,
    # tests/test_rnn_benchmarks.py): -3.3 and -2.5 %; with the GRU's update a step at a time and the
    # step loop's counter, slices and updates (rnn::Rnn), these at +1.3 / +1.5 % and four more
    "lstm_8_25_1024_1024_float", "gru_8_25_1024_1024_float", "lstm_16_25_1024_1024_half",
    "gru_8_25_1024_1024_float_train",
    # lstm_16_25_1024_1024_half_train left (-1.3 -> +7.6 %) when the benchmarks' LSTM updated its weights a
    # step at a time, as their poplibs (8dcde1ec) does, instead of current poplibs' cadence (2026-12-04), and
    # came back (-4.2 %) when a joint fully connected plan's weight update over one input-channel group (the
    # batch of 16) writes its fp16 result from the AMP (sim/cost/amp.py _fc_joint_plans; 2026-12-05), which
    # took gru_16_25_1024_1024_half_train out (-2.9 -> -9.9 %: its two update matmuls a step)
    "lstm_16_25_1024_1024_half_train",
    # popnn's CTC loss (added 2026-11-29 with its program's loops compiled once and popops' LOG_ADD
    # reductions, tests/test_ctc_benchmarks.py): +4.7 %
    "ctc_loss_t_1200_l_480_c_5_bs_1_float_float",
    # popops' embedding layer as it plans and runs it (added 2026-11-29 with sim/cost/embedding.py,
    # tests/test_embedding.py): +3.3 %, +0.6 %; embedding_vlarge -5.4 %
    "embedding_small", "embedding_vlarge_large_indices",
    # poplibs' octave convolutions, planned as one poplin multi-convolution per pass in parallel (added
    # 2026-11-29 with sim/cost/multiconv.py, tests/test_multiconv.py): +0.8, +2.8, -3.2, +1.8, +4.0, -1.3,
    # -2.0, -4.9 %
    "oct_resnet50_tr_bs4_bm128L0A0_a25", "oct_resnet50_tr_bs4_bm256L0A1_a25", "oct_resnet50_tr_bs4_bm512L1A0_a25",
    # matmul passes as poplin plans them (2026-11-30: padded channels rearranged, the separate forward and
    # backward passes swapped or not, the weight update's operands rearranged into its layout, the
    # fp16-partials AMP when one input-channel group is reduced; sim/cost/amp.py matmul_padding, swap_or_not;
    # the IPUModel2 rows' sum of squared errors 1.34 -> 1.09) brought these in (-8.2 -> -1.1 %, -5.1 -> -1.6 %,
    # -5.1 -> -4.3 %, -12.9 -> -4.7 %). Left then: bert_ffn2_128x3072x768 -4.3 -> -5.5 %,
    # oct_resnet50_tr_bs4_bm64L0_projection_a25 -4.9 -> -5.0 %, fc_layer_4_1000_1000_float +0.7 -> +6.0 % and
    # fc_layer_16_1000_5_half +3.6 -> +7.0 % (a batch of 4 and 5 outputs padded to the groups; poplin offers
    # HMAC and OuterProduct vertices there that the simulator does not in fp16, docs/reference/poplibs-costs.md 1.1)
    "bert_grouped_12x512x64x512", "bert_grouped_16x384x64x384",
    # fp16 HMAC beside the AMP (sim/cost/amp.py hmac_vertex_cycles, [hmac_fp16]; the 1x1 form poplin runs with
    # fp32 partials), which takes any channel count, so a batch of 1 needs no padding, with plans chosen on
    # poplin's own estimate, no syncs and no exchange set-ups (docs/reference/poplibs-costs.md 1.1; the
    # IPUModel2 rows' sum of squared errors 1.095 -> 1.041): fc_layer_1_1000_1000_half +20.9 -> +0.3 %,
    # fc_layer_8_1000_1000_half -5.2 -> -1.3 % (planned separately, as poplin does). Left then, their new plans
    # those poplin's estimate prefers: fc_layer_16_1000_5_half +7.0 % (its forward pass the AMP plan on 1,260
    # tiles poplin also picks, not HMAC), inception_tr_bs4_i7_b1x7 +5.0 -> +6.5 %,
    # oct_resnet50_tr_bs4_bm64L0A1_a25 -2.0 -> -5.6 %, resnet50_tr_bs4_bm256L0A1 +3.1 -> +5.6 %
    # fc_layer_1_1000_1000_half left (-2.3 -> -5.1 %) when the HMAC plans' tiles took poplin's channel groups
    # (sim/cost/amp.py hmac_in_group: ceil(1000 / 7) = 143 rounded to the fp16 grain, 144, beats 5 groups
    # of 200); poplin's own plan for it is a joint HMAC plan the simulator does not have
    "fc_layer_8_1000_1000_half",
    # the HMAC estimate's first term per worker and kernel position, 16 less the retention savings
    # (getConvPartialHorizontalMacCycleEstimate, at 8dcde1ec as at 7eac0f26), which the simulator had
    # left out: 96 cycles per output channel on a fp32 tile. fc_layer_16_1000_5_float -6.3 -> -4.1 %;
    # left: fc_layer_8_1000_5_float -2.0 -> +10.2 % (with fc_layer_1_1000_5_float +15.2 -> +21.9 %,
    # the fp32 1000x5 rows' open difference, docs/reference/poplibs-costs.md 1.8)
    # within since single_conv_layer's graph-function copies are modelled (its forward convolution, and a
    # backward one of the same canonical parameters, copy their arguments in and their result out:
    # sim/poplibs_benchmarks.py conv_graph) and the pass's fixed cycles refitted 1100 -> 990 (2026-12-04).
    # Left then: bert_proj_128x768x768 -4.3 -> -5.5 %, fc_layer_16_1000_5_float -4.1 -> -7.8 %,
    # fc_layer_80_1324_100 -4.7 -> -6.9 %, inception_tr_bs4_i6_c7x1b +4.6 -> +5.9 %,
    # inception_tr_bs4_i8_a3x3 +4.6 -> +5.0 %, mobilenet_conv_pw_2_1 +3.6 -> +5.2 %,
    # oct_resnet50_tr_bs4_bm64L0_projection_a25 -4.9 -> -5.4 % "fc_layer_16_1000_5_half", "fc_layer_1_1000_5_half", "fc_layer_4_1000_1000_float",
    "inception_tr_bs4_i1_db1x1", "mobilenet_depthwise", "mobilenet_depthwise_2",
    # within since the nx1 vertex counts a tile's kernel positions from the reduction's split (input-channel
    # grains times kernel rows, ConvModel.cpp constructModel) and its busiest worker's worklist entries as
    # partitionConvPartialByWorker cuts the positions (ConvUtilInternal.cpp; the slowest worker in
    # getConvPartialnx1SupervisorInnerLoopCycleEstimate) (2026-12-04, sim/cost/amp.py tile_kernel_positions,
    # worker_entries). Left then: alexnet_tr_bs4_layer7 -4.8 -> -5.7 %, alexnet_tr_bs4_layer9 +0.5 -> -5.8 %,
    # inception_tr_bs4_i8_b3x3 -2.6 -> -5.3 %
    "inception_tr_bs4_i6_b7x1", "resnet50_tr_bs4_bm256L0A1",
    "oct_resnet50_tr_bs4_bm128L0A1_a25",
    # within since an nx1 plan's compute set waits for its slowest tile, whose block may be one position
    # smaller than the planner's largest and cut into more worklist entries (2026-12-04, sim/cost/rules.py
    # _from_plan; the IPUModel2 rows' sum of squared errors 1.092 -> 1.038). Left then:
    # inception_tr_bs4_i6_c7x1a +4.4 -> +6.7 %, inception_tr_bs4_i7_b1x7 +2.1 -> +5.3 %,
    # inception_tr_bs4_i8_a3x3 +3.5 -> +5.4 %
    "alexnet_tr_bs4_layer9", "inception_tr_bs4_i5_b7x1", "inception_tr_bs4_i8_b3x3",
    # within since a convolution's passes split their channels over the tiles in whole grains, every split
    # poplin's constructModel can make and only those (2026-12-04, sim/cost/amp.py _grain_candidates,
    # _conv_reduction_candidates; with the plans' tiles waiting for the slowest, the IPUModel2 rows' sum of
    # squared errors 1.036 -> 1.011). Left then: inception_tr_bs4_i6_c7x1b +3.8 -> +6.1 % (its earlier forward
    # plan split 160 channels, 20 grains, over 24 tiles, which poplin cannot), oct_resnet50_tr_bs4_bm64L0_a25
    # +4.5 -> +5.4 %, oct_resnet50_tr_bs4_bm128L0_projection_a25 -3.5 -> -5.5 % (multi-convolution members)
    "inception_tr_bs4_i6_c7x1a", "inception_tr_bs4_i8_a3x3", "oct_resnet50_tr_bs4_bm64L0A1_a25",
    "oct_resnet50_tr_bs4_bm64L0_projection_a25", "resnet50_tr_bs4_bm512L1A0",
    # popnn's pooling planned and run as PoolPlan.cpp and getPoolingCycles (2026-12-04, sim/cost/pooling.py), with
    # pooling_layer's max pools added (-58 .. -84 % at the old per-element rate), and the octave convolutions' 2x2
    # average pools (oct rows' mean error -4.1 -> -1.0 %). Left then: oct_resnet50_tr_bs4_bm128L0A2_a25 +2.7 -> +6.7 %,
    # _bm256L0A2_a25 +4.2 -> +7.0 %, _bm256L1A0_a25 +2.6 -> +6.3 % (the tool's --pool-optimize-for-speed lets popnn
    # run an average pool as a convolution when poplin's estimate is cheaper, which the simulator does not)
    "inception_tr_bs1_pool1", "inception_tr_bs1_pool2", "inception_tr_bs1_i1_dmaxpool", "inception_tr_bs1_i2_dmaxpool",
    "inception_tr_bs1_i3_dmaxpool", "inception_tr_bs1_i4_cmaxpool", "inception_tr_bs1_i5_dmaxpool",
    "inception_tr_bs1_i6_dmaxpool", "inception_tr_bs1_i10_dmax_pool", "oct_resnet50_tr_bs4_bm128L0_projection_a25",
    "oct_resnet50_tr_bs4_bm512L0A0_a25", "oct_resnet50_tr_bs4_bm512L0A2_a25",
)


def test_every_row_of_the_data_file_is_a_benchmark_or_listed_as_not_expressible():
    published = pb.published()
    assert set(published) == set(pb.BENCHES) | set(pb.NOT_EXPRESSIBLE)
    assert len(pb.rows()) == len(pb.BENCHES) == 227
    assert not pb.NOT_EXPRESSIBLE  # non-square kernels (Inception's 1x7 / 7x1, the 5x200) are expressed
    # spot values copied from poplibs at 8dcde1ec
    assert published["fc_layer_1_1000_5_half"] == (6902, 528900)
    assert published["gemm_1000x512x30000"] == (506247, 621957560)
    assert published["vgg16_tr_bs4_v2L1"] == (762367, 506955822)
    assert published["bert_reduce_4"] == (2587, 1125576)
    assert published["resnet50_tr_bs1_cnv_reduce"] == (3040, 2040736)


def test_tools_build_the_passes_poplibs_runs():
    fc = pb.graph(pb.BENCHES["bert_grouped_12x128x64x128"])
    assert [op.kind for op in fc.ops] == ["matmul", "matmul", "matmul", "accumulate"]
    assert fc.tensors["weights"].shape == (12, 64, 128)
    # bert_proj's arguments are batch h, inputs h, outputs s (poplibs' CMakeLists)
    proj = pb.BENCHES["bert_proj_128x768x768"].params
    assert (proj["batch"], proj["inputs"], proj["outputs"]) == (768, 768, 128)
    conv = pb.graph(pb.BENCHES["resnet50_tr_bs4_bm64L0A1"])
    assert [op.kind for op in conv.ops] == ["conv2d", "transpose", "conv2d_grad_input", "conv2d_grad_weight",
                                            "accumulate"]
    assert conv.tensors["fwd/conv2d"].shape == (4, 64, 56, 56)
    gemm = pb.graph(pb.BENCHES["gemm_200x64x10000"])
    assert [op.kind for op in gemm.ops] == ["matmul", "accumulate"]


@pytest.mark.parametrize("name", WITHIN)
def test_row_within_five_percent_of_poplar(name):
    row = next(r for r in pb.rows() if r.name == name)
    assert row.simulated() == pytest.approx(row.cycles, rel=TOLERANCE)


def test_rows_within_five_percent_do_not_fall():
    assert len(pb.within(TOLERANCE)) >= len(WITHIN) == 163


def test_reduce_op_builds_one_reduction_on_the_tools_tiles():
    bench = pb.BENCHES["bert_reduce_3"]
    g = pb.graph(bench)
    assert [op.kind for op in g.ops] == ["reduce_sum"]
    op = g.ops[0]
    assert op.attrs["axes"] == [1, 3] and op.attrs["operation"] == "square_add"
    assert g.tensors[op.outputs[0]].shape == (16, 8) and g.tensors["input"].dtype == "float16"
    assert pb.graph(pb.BENCHES["bert_reduce_0"]).ops[0].kind == "reduce_max"
    # --tiles-per-ipu: an IPUModel2 of that many tiles, nothing else changed; without it, all 1,472
    small, full = pb.system(bench), pb.system(pb.BENCHES["bert_reduce_4"])
    assert (small.ipu.tiles, full.ipu.tiles) == (1024, 1472)
    assert small.ipu == full.ipu.__class__(**{**full.ipu.__dict__, "tiles": 1024})
    assert len(pb.simulated_run(bench).tile_compute(0)) == 1024
    assert pb._family("bert_reduce_3") == "reduce" and pb._family("bert_ffn1_128x768x3072") == "bert"
    reduce_rows = [r for r in pb.rows() if r.bench.tool == "reduce" and abs(r.error()) <= TOLERANCE]
    assert len(reduce_rows) >= 5  # resnet50_tr_bs1_cnv_reduce +5.9 % since the exchange efficiency


def test_with_tiles_rejects_more_tiles_than_the_ipu_has():
    from sim import ConfigError, load_system
    with pytest.raises(ConfigError, match="tiles per IPU = 2000 is out of range"):
        load_system("ipu-mk2").with_tiles(2000)
    assert load_system("ipu-mk2").with_tiles(1472) == load_system("ipu-mk2")


def test_bert_reduce_0_plan_worked_by_hand():
    """[16,4,16,32,8] fp16 MAX over dims 1 and 3 on 1,024 tiles (popops at 8dcde1ec).

    Layout: 262,144 halves in grains of 4 over 1,024 tiles: 256 a tile = 8 columns (d4) x 32
    rows (d3), each column on 4 tiles (d1). On tile: the 8 columns split in 2 grains of 4 over
    the workers; splitting rows does not pay (30 + 4*32/4 = 62 approximate cycles; split in two,
    2*30 + 16 = 76); a strided vertex 7 + 17 + 6*ceil(4/4) + 32*4/4 = 62 thread cycles, x 6 =
    372 tile cycles. 4 sources < 2*sqrt(1024) and every tile holds partials: straight to output.
    Output: 2,048 halves linearly, at least 4 vectors (16) a tile: 128 tiles, each receiving 4
    partials x 16 x 2 B = 128 B (37 cycles at 0.87 x 4 B a cycle); 4 pieces of 4 columns, strided 7 + 17 + 6 + 4*4/4 = 34, x 6 = 204.
    """
    from sim.cost import op_cost
    from sim.cost.reduction import constants, plan_reduce
    plan = plan_reduce((16, 4, 16, 32, 8), (1, 3), 2, "max", 1024, 6)
    assert [(s.name, s.tiles, s.compute, s.exchange_bytes) for s in plan.stages] == [
        ("on tile", 1024, [372], 0), ("to output", 128, [204], 128)]
    bench = pb.BENCHES["bert_reduce_0"]
    ipu = pb.system(bench).ipu
    g = pb.graph(bench)
    cost = op_cost(g.ops[0], g, ipu, ipu.tiles)
    fixed = constants()["call_fixed_cycles"]
    assert cost.compute_cycles == 372 + 204 + fixed
    assert cost.exchange_cycles == ipu.exchange_setup_cycles + math.ceil(128 / ipu.exchange_rate) == 137
    assert cost.sync_cycles == 3 * ipu.internal_sync_cycles  # two compute sets, one exchange
    assert pb.simulated_cycles(bench) == 372 + 204 + fixed + 137 + 270


def test_reduction_splits_rows_over_free_workers_and_adds_their_partials():
    """ADD of fp16 8 columns x 32 rows on a tile (bert_reduce_1): the 8 columns are one grain (8
    halves for ADD), 5 workers free; the rows split 6 ways (approximate cycles 30 + 8*32/4 = 94
    fall to 2*30 + 64/6 = 70), each worker strided over ceil(32/6) = 6 rows: 7 + 17 + 6*2 +
    6*8/4 = 48; then the 6 fp32 partials of 8 added: 7 + 17 + 6*4 + 6*8/2 = 72; x 6 each."""
    from sim.cost.reduction import TileWork, tile_cycles
    assert tile_cycles(TileWork(8, 32, 8), 2, 4, "add", 6) == ([6 * 48, 6 * 72], 7)


def test_pass_fixed_cycles_are_charged_once_per_pass():
    ipu = load_system("ipu-mk2").ipu
    fixed = pass_fixed_cycles()
    assert fixed == 990
    plan = plan_matmul(1, 1, 1000, 5, 2, True, ipu, ipu.tiles, 0.6)
    assert plan.pass_fixed == fixed
    assert plan.total_cycles >= fixed and plan.launch_cycles >= fixed
    # a serialised plan pays it once, not per piece; the busiest tile carries it
    big = plan_matmul(1, 16384, 4096, 4096, 2, True, ipu, ipu.tiles, 0.05)
    assert big.serial > 1 and big.pass_fixed == fixed
    profile = big.profile(ipu, ipu.tiles, 2, True)
    assert profile.compute.max() >= fixed


def test_weight_update_rearrangement_follows_poplins_transform_estimate():
    ipu = load_system("ipu-mk2").ipu
    exch, copy, nbytes = rearrangement(ipu, 1_000_000, 1000, 2)
    # ceildiv(elements, usedTiles) = 1000 per tile: 2000 bytes at 0.87 x 4 B/cycle after the set-up,
    # and bytes x 5 / (4 x min(memcpy, 2)) = 1.25 cycles per element
    assert nbytes == 2000
    assert exch == ipu.exchange_setup_cycles + math.ceil(2000 / ipu.exchange_rate) == 675
    assert copy == 1250
    # a weight-update matmul pays it; the same matmul without it does not
    plain = plan_matmul(1, 1000, 64, 1000, 2, False, ipu, ipu.tiles, 0.6)
    wu = plan_matmul(1, 1000, 64, 1000, 2, False, ipu, ipu.tiles, 0.6, rearranged=64_000)
    assert wu.total_cycles > plain.total_cycles
    assert wu.exchange_phases == plain.exchange_phases + 1
    assert wu.supersteps == plain.supersteps + 1
    used = wu.tiles_used
    assert wu.rearranged == 64_000 and math.ceil(64_000 / used) * 2 <= wu.exchange_bytes / used


def test_conv_weight_update_rearranges_both_activations():
    from sim.cost import op_cost
    row = pb.BENCHES["resnet50_tr_bs4_bm64L0"]
    g = pb.graph(row)
    ipu = load_system("ipu-mk2").ipu
    wu = next(op for op in g.ops if op.kind == "conv2d_grad_weight")
    cost = op_cost(wu, g, ipu, ipu.tiles)
    assert "groups/" in cost.plan
    per_tile = np.ceil(2 * 4 * 64 * 56 * 56 / cost.tiles_used)
    assert cost.exchange_bytes >= per_tile * 2 * cost.tiles_used
