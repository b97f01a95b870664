"""poplibs' single-layer benchmarks on Poplar's IPUModel1 (Mk1 / GC2) against the simulator on one
Mk1 IPU (sim/poplibs_benchmarks.py, target "IpuModel1"), and the ipu1 AMP the Mk1 config carries.

No constant is fitted to these rows; the rows within 5 % of Poplar's estimate are held there.
The whole table simulates in a few seconds (each row a one-IPU graph of a few ops, cached per row).
"""

from __future__ import annotations

import pytest

from sim import load_system, poplibs_benchmarks as pb
from sim.cost.amp import amp_fp32_vertex_cycles, amp_mode

TOLERANCE = 0.05
TARGET = "IpuModel1"
# the IpuModel1 rows within 5 % (122 of 174 on 2026-11-23; 124 of 183 with the 9 depthwise rows of
# 2026-11-28, two of them within; 68 of 160 when the table was added): held there
MK1_WITHIN = (
    # two depthwise layers once each pass is planned with poplin's SLIC and VMAC vertex estimates
    # (2026-11-28, sim/cost/depthwise.py, nothing fitted): -28.9, +18.6 % -> +0.2, +4.2 %
    "mobilenet_depthwise_1",
    # popnn layers (added 2026-11-29, tests/test_rnn_benchmarks.py): -2.4 % and, with the GRU's weight
    # update a step at a time as popnn runs it, -2.9 %. lstm_16_25_1024_1024_half_train (-2.3 %) left
    # the list when its update became current poplibs' cadence, planned within the cadence's memory
    # (+9.9 %: the 2021 row ran it a step at a time); run a step at a time again since 2026-12-04, as the
    # benchmarks' poplibs does, +11.2 %, and +3.5 % since a joint plan's weight update over one input-channel
    # group writes its fp16 result from the AMP (2026-12-05; gru_16_25_1024_1024_half_train +0.2 -> -3.4 %)
    "lstm_8_25_1024_1024_float", "gru_8_25_1024_1024_float_train", "lstm_16_25_1024_1024_half_train",
    # and with the step loop's counter, slices and updates (rnn::Rnn): +0.9 and -2.5 %
    "gru_16_25_1024_1024_half_train", "gru_8_25_1024_1024_float",
    # popnn's CTC loss (added 2026-11-29, tests/test_ctc_benchmarks.py): +4.0 and +0.0 %
    "ctc_loss_t_1200_l_480_c_5_bs_1_float_float", "ctc_loss_t_1200_l_480_c_5_bs_4_float_float",
    # gemm_1000x256x20000 left (+0.3 -> +8.5 %) when matmuls were serialised as poplin does, along the
    # output or input channels with each piece slicing a tile's share of the operand (2026-12-01,
    # sim/cost/amp.py _plan; PopSparse's Bow sweep 50 -> 59 of 65 within 10 %); gemm_600x256x30000
    # went -4.2 -> +4.0 %
    "alexnet_tr_bs4_layer7", "bert_ffn1_512x768x3072", "bert_kqv_384x1024x3072",
    "bert_kqv_512x1024x3072", "fc_layer_1440x200x400",
    "gemm_1000x512x10000", "gemm_200x256x20000",
    "gemm_200x256x30000", "gemm_200x512x10000", "gemm_200x512x20000", "gemm_600x256x10000", "gemm_600x256x20000",
    "gemm_600x512x20000", "gemm_600x512x30000", "inception_tr_bs4_i10_a1x1",
    "inception_tr_bs4_i10_c1x1", "inception_tr_bs4_i10_d1x1", "inception_tr_bs4_i1_a1x1",
    "inception_tr_bs4_i1_c3x3b", "inception_tr_bs4_i1_db1x1", "inception_tr_bs4_i2_a1x1",
    "inception_tr_bs4_i3_a1x1", "inception_tr_bs4_i3_b1x1",
    "inception_tr_bs4_i5_b1x1", "inception_tr_bs4_i9_d1x1",
    "inception_tr_bs4_layer8", "mobilenet_conv_pw_12_1",
    "mobilenet_conv_pw_3_1", "mobilenet_conv_pw_6_1",
    "resnet50_tr_bs4_bm128L1A0", "resnet50_tr_bs4_bm256L0A2", "resnet50_tr_bs4_bm256L1A0",
    "resnet50_tr_bs4_bm64L0", "resnet50_tr_bs4_bm64L1A0", "vgg16_tr_bs4_v2L0",
    "vgg16_tr_bs4_v4L0",
    # within since a convolution's weight-update pass may be serialised along its output channels (C,
    # session 24: outChanSplit.serial, tests/test_conv_wu_serial.py; +5.2, +5.0 % -> +0.9, +2.3 % with the
    # reduction split in grains below)
    "vgg16_tr_bs4_v3L0", "vgg16_tr_bs4_v4L1",
    # within since a convolution's reduction is split over tiles in whole input-channel grains times the
    # kernel's outer dimension and its field split may fill the tiles (C, session 24: ConvModel.cpp
    # constructModel; amp.conv_inner_block, tests/test_conv_inner_split.py): +6.4, -5.2 % -> +3.5, -4.8 %.
    # Left then: inception_tr_bs4_i6_c1x7b +3.8 -> +5.5 %, whose forward plan split its 1x7 kernel's
    # 160 x 7 reduction 8 ways as 140 elements a tile (20 channels x 7), a split poplin cannot make (the
    # innermost kernel dimension is never split, channels go in grains of 16: 2 grains x 7 = 224)
    "inception_tr_bs4_i1_b5x5", "resnet50_tr_bs4_bm512L0_projection",
    # popops reductions (reduce_op): Poplar gives bert_reduce_0..3 the same cycles on both models
    "bert_reduce_0", "bert_reduce_2", "bert_reduce_3", "bert_reduce_4", "resnet50_tr_bs1_bm128L0A0_reduce",
    "resnet50_tr_bs1_bm128L0_reduce", "resnet50_tr_bs1_bm64L0A0_reduce", "resnet50_tr_bs1_cnv_reduce",
    # non-square kernels (Inception-v3's factorised 1xN / Nx1), expressible since conv2d takes (kh, kw)
    "inception_tr_bs4_i5_b1x7", "inception_tr_bs4_i5_b7x1", "inception_tr_bs4_i5_c7x1a",
    "inception_tr_bs4_i7_b7x1", "inception_tr_bs4_i9_ba1x3",
    # within since a matmul's or conv's passes follow poplin's plans more closely (2026-11-23): the fc
    # tool's passes planned jointly as FC_TRAINING (tests/test_fc_joint_plan.py), a backward pass with
    # swapped operands (tests/test_conv_swap.py), the field split per dimension
    # (tests/test_conv_passes.py) and poplin's partials reduction (sim/cost/conv_reduce.py). Left then
    # (over-predicted, all but one of them previously within 5 % by an old plan poplin cannot make, as
    # the 46-way flattened field split of bm64L0A1, or an older reduction rate):
    # alexnet_tr_bs4_layer4 +9.6%, bert_proj_128x768x768 +5.4%, inception_tr_bs4_i1_b5x5 +6.4%,
    # inception_tr_bs4_i6_b1x7 +8.2%, inception_tr_bs4_i6_b7x1 +5.5%, inception_tr_bs4_i9_a1x1
    # +7.4%, inception_tr_bs4_i9_c1x1 +5.3%, inception_tr_bs4_i9_c3x3 +7.5%, mobilenet_conv_pw_2_1
    # +5.7%, mobilenet_conv_pw_4_1 +5.7%, resnet50_tr_bs4_bm64L0A1 +9.6%, vgg16_tr_bs4_v3L0 +5.2%,
    # vgg16_tr_bs4_v4L1 +5.0%
    "bert_ffn1_128x1024x4096", "bert_ffn1_128x768x3072", "bert_ffn1_384x1024x4096",
    "bert_ffn1_384x768x3072", "bert_ffn1_512x1024x4096", "bert_ffn2_384x3072x768",
    "bert_ffn2_384x4096x1024", "bert_ffn2_512x3072x768", "bert_ffn2_512x4096x1024",
    "bert_grouped_12x384x64x384", "bert_grouped_16x384x64x384",
    "bert_kqv_128x768x2304", "bert_kqv_384x768x2304", "bert_kqv_512x768x2304", "bert_proj_128x1024x1024",
    "bert_proj_384x1024x1024", "bert_proj_384x768x768", "bert_proj_512x1024x1024", "bert_proj_512x768x768",
    "gemm_600x512x10000", "inception_tr_bs4_i10_b1x1", "inception_tr_bs4_i5_a1x1", "inception_tr_bs4_i6_b1x1", "inception_tr_bs4_i7_b1x7",
    "mobilenet_conv1_1", "mobilenet_conv_pw_5_1", "mobilenet_conv_pw_7_1", "resnet50_tr_bs4_bm128L0A1",
    "resnet50_tr_bs4_bm128L0_projection", "resnet50_tr_bs4_bm256L0A0", "resnet50_tr_bs4_bm256L0A1",
    "resnet50_tr_bs4_bm256L0_projection", "resnet50_tr_bs4_bm512L0A0", "resnet50_tr_bs4_bm512L0A2",
    "resnet50_tr_bs4_bm512L1A0",
    # within since a kxk backward pass whose dX field is not zDeltas' (a stride, or no padding) runs on dX's
    # field, zDeltas dilated and padded (poplin getGradientParams; tests/test_conv_dilated_bwd.py):
    # -6.6, -6.4, -11.6, -11.9, -6.9, -10.4 % before
    "alexnet_tr_bs4_layer9", "alexnet_tr_bs4_layer11", "inception_tr_bs4_i4_a3x3", "inception_tr_bs4_i4_b3x3b",
    "inception_tr_bs4_i8_a3x3", "inception_tr_bs4_i8_b3x3",
    # within since general_matrix_multiply's matmul is planned as poplin's NONE_MATMUL (operands swapped)
    # and its scaledAddTo runs over the product's layout (tests/test_gemm_none_pass.py):
    # +7.5, +16.4, +12.3, +10.0, +7.9, +8.2, +8.0, +7.0 % before. Left then: gemm_200x256x10000
    # (+3.3 -> -6.1 %) and gemm_600x256x30000 (-4.9 -> -5.9 %), whose agreement came from the unswapped
    # plan, which poplin's planner charges a rearrangement of input, weights and output for this pass
    # (ConvModel.cpp addTransformCycleEstimate) and does not pick, and from the add priced at 0.75 cycles
    # an element spread linearly; over that plan's layout the add alone would put 200x256x10000 at
    # +8.8 % (100 regions of 24 elements a tile). Both now sit with the under-predicted large Mk1 rows.
    "gemm_1000x256x10000", "gemm_1000x64x10000", "gemm_1000x64x30000",
    "gemm_200x64x20000", "gemm_200x64x30000", "gemm_600x64x20000", "gemm_600x64x30000",
    # within since a separately planned fc backward pass exchanges its transposed weights from the forward
    # layout (B, session 24: Convolution.cpp fullyConnectedWeightTranspose, tests/test_fc_transposed_weights.py):
    # -5.7, -5.2, -5.4, -5.8 % -> -4.1, -3.5, -4.7, -4.95 % (fc_layer_1440x100x200 at the edge)
    "bert_ffn2_128x3072x768", "bert_ffn2_128x4096x1024", "bert_grouped_12x512x64x512",
    # within since an on-chip exchange moves its data at 0.87 of the 4-byte width, fitted jointly with the
    # pass's fixed cycles (1634 -> 1100) on the IPUModel2 rows, these IPUModel1 rows held out (2026-11-28,
    # configs/ipu-mk2.toml exchange_efficiency; plans still chosen at poplin's full rate): the fixed part
    # came down and the part that grows with a layer's bytes went up. Left: bert_kqv_128x1024x3072 +6.1 %,
    # fc_layer_1440x100x200 -9.0 %, fc_layer_16x1324x100 -8.7 %, gemm_1000x64x20000 +5.0 %,
    # inception_tr_bs4_i1_b1x1 -6.4 %, inception_tr_bs4_i1_c3x3a +5.7 %, inception_tr_bs4_i6_c7x1b +6.1 %,
    # inception_tr_bs4_layer5 +5.1 %
    "fc_layer_4_1000_1000_float", "gemm_200x256x10000",
    "gemm_200x512x30000", "gemm_200x64x10000", "gemm_600x256x30000", "mobilenet_conv_pw_13_1",
    "mobilenet_depthwise_6",
    # within since the fp16 AMP vertex's fixed cycles split as poplibs' estimate does (sim/cost/amp.py
    # amp_pair_cycles: 32 cycles less per fp32-partials vertex call): +5.19 -> +4.85, +5.02 -> +4.97,
    # +5.03 -> +4.74 %; inception_tr_bs4_i2_b1x1 left (-4.76 -> -5.11 %)
    "bert_proj_128x768x768", "gemm_1000x64x20000",
    # popops' embedding layer (added 2026-11-29, sim/cost/embedding.py): +4.3 %, +0.6 %, -4.9 %
    "embedding_small", "embedding_vlarge_large_indices", "embedding_vlarge",
    # octave convolutions as parallel multi-convolutions (added 2026-11-29, sim/cost/multiconv.py): +2.1,
    # -1.7, -0.4, +1.7, +0.8, -4.1 %
    "oct_resnet50_tr_bs4_bm128L0A0_a25", "oct_resnet50_tr_bs4_bm128L0_projection_a25",
    "oct_resnet50_tr_bs4_bm256L0A2_a25", "oct_resnet50_tr_bs4_bm256L1A0_a25", "oct_resnet50_tr_bs4_bm512L1A0_a25",
    "oct_resnet50_tr_bs4_bm64L0_projection_a25",
    # matmul passes as poplin plans them (2026-11-30, sim/cost/amp.py matmul_padding, swap_or_not; not fitted
    # to these rows): fc_layer_8_1000_1000_half -24.1 -> -3.7 %, 16_1000_1000_half -15.0 -> -0.6 %, 16x1324x100
    # -9.5 -> -2.4 %, bert_grouped_16x512x64x512 -6.3 -> +1.4 %, bert_kqv_128x1024x3072 +6.0 -> +2.8 %,
    # fc_layer_4_1000_5_float +6.0 -> +3.0 %. Left then: fc_layer_16_1000_1000_float +4.0 -> +6.3 %,
    # fc_layer_16_1000_5_float +1.0 -> +5.2 % and fc_layer_1_1000_1000_half +2.5 -> +34.2 % (a batch of 1 padded
    # to the groups: poplin's plan there is HMAC and OuterProduct, which the simulator does not offer in fp16;
    # docs/reference/poplibs-costs.md 1.1)
    "bert_grouped_16x512x64x512", "bert_kqv_128x1024x3072", "fc_layer_16_1000_1000_half",
    "fc_layer_8_1000_1000_half",
    # fp16 HMAC beside the AMP (sim/cost/amp.py hmac_vertex_cycles): +8.8 -> -0.6 %; fc_layer_1_1000_1000_half
    # +34.2 -> +5.7 %, just outside
    "fc_layer_16_1000_5_half",
    # plans chosen on poplin's own estimate, no syncs and no exchange set-ups (docs/reference/poplibs-costs.md
    # 1.1; not fitted to these rows): fc_layer_1440x100x200 -5.3 -> -4.1 %, gru_16_25_1024_1024_half
    # -5.3 -> -4.0 %; with the separate weight update swapped or not, as poplin plans it,
    # fc_layer_16_1000_5_float +5.2 -> +4.7 % came in and fc_layer_1440x100x200 left again (-4.1 -> -5.5 %)
    "gru_16_25_1024_1024_half",
    # left with the HMAC estimate's first term per worker and kernel position, 16 less the retention
    # savings (getConvPartialHorizontalMacCycleEstimate, at 8dcde1ec as at 7eac0f26), which the simulator
    # had left out: fc_layer_4_1000_5_float +2.7 -> +7.8 %, fc_layer_16_1000_5_float +4.7 -> +7.1 %
    # (the fp32 1000x5 rows' open difference, docs/reference/poplibs-costs.md 1.8)
    # within since single_conv_layer's graph-function copies are modelled and the pass's fixed cycles
    # refitted on the IPUModel2 rows 1100 -> 990 (2026-12-04, sim/poplibs_benchmarks.py conv_graph). Left
    # then: fc_layer_16x1324x100 -2.4 -> -5.3 %, fc_layer_4_1000_5_half -4.2 -> -8.3 %, fc_layer_8_1000_5_half
    # -4.8 -> -8.8 %, inception_tr_bs4_i6_c7x1a +4.9 -> +5.2 %, inception_tr_bs4_layer1 +4.2 -> +6.0 %,
    # mobilenet_conv_pw_2_1 +4.7 -> +6.4 %, mobilenet_depthwise +3.2 -> +9.5 %, mobilenet_depthwise_2
    # +0.3 -> +6.2 %, mobilenet_depthwise_4 +0.7 -> +5.6 %, resnet50_tr_bs4_bm128L0A2 +4.1 -> +5.0 %,
    # resnet50_tr_bs4_bm64L0_projection +4.1 -> +5.8 % (the stride-1 depthwise rows' copies, which
    # IPUModel2 shows, IPUModel1 does not)
    "bert_grouped_16x128x64x128", "fc_layer_16_1000_1000_float", "fc_layer_16_1000_5_float",
    "fc_layer_1_1000_1000_half", "fc_layer_4_1000_5_float", "inception_tr_bs4_i2_b1x1",
    "resnet50_tr_bs4_bm128L0A0",
    # within since the nx1 vertex counts a tile's kernel positions from the reduction's split and its busiest
    # worker's worklist entries as poplin cuts them (2026-12-04, sim/cost/amp.py tile_kernel_positions,
    # worker_entries). Left then: inception_tr_bs4_i5_c1x7b -4.0 -> -7.1 %,
    # oct_resnet50_tr_bs4_bm128L0A1_a25 +4.3 -> +6.0 %
    "inception_tr_bs4_i1_c3x3a",
    "inception_tr_bs4_i6_c7x1a", "oct_resnet50_tr_bs4_bm256L0A1_a25",
    # within since an nx1 plan's compute set waits for its slowest tile (2026-12-04, sim/cost/rules.py
    # _from_plan). Left then: inception_tr_bs4_i6_b1x7 +2.1 -> +5.7 %, inception_tr_bs4_i6_c1x7b +4.8 -> +6.2 %,
    # inception_tr_bs4_i6_c7x1b +0.6 -> +5.2 %, inception_tr_bs4_layer3 +3.8 -> +5.8 %
    "inception_tr_bs4_i5_c1x7b", "oct_resnet50_tr_bs4_bm128L0A1_a25",
    # within since a convolution's passes split their channels in whole grains as poplin's constructModel
    # does (2026-12-04, sim/cost/amp.py _grain_candidates). Left then: resnet50_tr_bs4_bm512L0A1 -0.1 ->
    # +6.6 % (the estimate now reaches a full expansion over 36 tiles of 8 grains each, 1.5 % below the nx1
    # plan, which Poplar's TotalMemory, 20 MB above IPUModel2's, suggests poplin picks too, but which the
    # simulator runs ~8 % above its estimate), oct_resnet50_tr_bs4_bm128L1A0_a25 +4.5 -> +5.3 %
    "inception_tr_bs4_i6_b1x7", "inception_tr_bs4_i6_c1x7b", "inception_tr_bs4_i6_c7x1b", "inception_tr_bs4_i9_a1x1",
    "inception_tr_bs4_i9_c1x1",
    # popnn's pooling as PoolPlan.cpp plans it (2026-12-04, sim/cost/pooling.py), pooling_layer's max pools added
    # (-56 .. -87 % before). The octave convolutions' 2x2 average pools cost 1-7 points more:
    # oct_resnet50_tr_bs4_bm64L0A1_a25 +3.8 -> +6.0 %, _bm64L0_a25 +1.8 -> +8.7 % left
    "inception_tr_bs1_pool1", "inception_tr_bs1_pool2", "inception_tr_bs1_i1_dmaxpool", "inception_tr_bs1_i2_dmaxpool",
    "inception_tr_bs1_i3_dmaxpool", "inception_tr_bs1_i4_cmaxpool", "inception_tr_bs1_i5_dmaxpool",
    "inception_tr_bs1_i6_dmaxpool", "inception_tr_bs1_i10_dmax_pool",
    # a convolution serialised along its channels only, as poplin does, and no longer along its field (2026-12-06,
    # sim/cost/amp.py _serial_cuts): vgg16_tr_bs4_v1L1 -3.2 -> -5.0 % left (its forward and backward passes in
    # two pieces of 32 output channels, 4 % faster by poplin's estimate than any unserialised plan that fits)
)


def test_every_ipumodel1_row_is_a_benchmark_or_listed_as_not_expressible():
    published = pb.published(TARGET)
    assert set(published) == set(pb.MK1_BENCHES) | set(pb.NOT_EXPRESSIBLE)
    assert len(pb.rows(TARGET)) == len(pb.MK1_BENCHES) == 228
    # the same benchmarks as the IpuModel2 table, and the one row only IpuModel1 has
    assert set(published) - set(pb.published()) == {"vgg16_tr_bs4_v1L1"}
    assert set(pb.published()) <= set(published)
    # spot values copied from poplibs at 8dcde1ec (IpuModel1 rows)
    assert published["fc_layer_1_1000_5_half"] == (6824, 462825)
    assert published["gemm_1000x512x30000"] == (940609, 299729126)
    assert published["vgg16_tr_bs4_v1L1"] == (1258656, 359721809)
    assert published["bert_reduce_0"] == (1466, 600904) and pb.published()["bert_reduce_0"][0] == 1466
    assert pb.max_tile_memory(TARGET)["vgg16_tr_bs4_v1L1"] == 328856
    v1l1 = pb.MK1_BENCHES["vgg16_tr_bs4_v1L1"].params
    assert (v1l1["field"], v1l1["kernel"], v1l1["cin"], v1l1["cout"], v1l1["padding"]) == (224, 3, 64, 64, 1)
    assert "vgg16_tr_bs4_v1L1" not in pb.BENCHES


def test_rows_run_on_one_mk1_ipu():
    bench = pb.BENCHES["resnet50_tr_bs4_bm64L0"]
    system = pb.system(bench, TARGET)
    assert system.num_ipus == 1 and system.name == "ipu-mk1-c2 (1 IPU)"
    assert (system.ipu.generation, system.ipu.tiles, system.ipu.sram_bytes_per_tile) == ("mk1", 1216, 262144)
    assert pb.system(pb.BENCHES["bert_reduce_0"], TARGET).ipu.tiles == 1024  # --tiles-per-ipu
    assert pb.system(bench).ipu.generation == "mk2"
    row = next(r for r in pb.rows(TARGET) if r.name == "resnet50_tr_bs4_bm64L0")
    assert row.target == TARGET and row.simulated() == pb.simulated_run(bench, TARGET).cycle_count
    assert len(pb.simulated_run(bench, TARGET).tile_compute(0)) == 1216


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="target 'IpuModel3': expected one of IpuModel2, IpuModel1"):
        pb.published("IpuModel3")
    with pytest.raises(ValueError, match="IpuModel3"):
        pb.system(pb.BENCHES["gemm_200x64x10000"], "IpuModel3")


def test_mk1_amp_has_eight_conv_units_for_every_precision():
    """ipu1 assembles only 8-unit AMP kernels (poplibs lib/poplin/CMakeLists.txt at 8dcde1ec): half
    float 8, half half 8, float float 8; ipu2 adds the 16-unit half-half and float-float kernels."""
    mk1, mk2 = load_system("ipu-mk1-c2").ipu, load_system("ipu-mk2").ipu
    # (itemsize, partials bytes) -> (output group = conv units, FLOP per cycle)
    for ipu, expected in ((mk1, {(2, 2): (8, 64), (2, 4): (8, 64), (4, 4): (8, 16)}),
                          (mk2, {(2, 2): (16, 128), (2, 4): (8, 64), (4, 4): (16, 32)})):
        for (itemsize, partials), (units, flops) in expected.items():
            mode = amp_mode(ipu, itemsize, partials)
            assert (mode.out_group, mode.flops_per_cycle) == (units, flops)
            # 4 cycles per output position in fp16, 8 in fp32 (coreCycles), on both generations
            assert mode.cycles_per_position == (4 if itemsize == 2 else 8)


def test_fp32_vertex_follows_the_targets_conv_units():
    """poplibs' float 1x1 AMP vertex, one position per worker, one input and one output group, worked
    by hand from getConvPartial1x1SupervisorOuterLoop/InnerLoopCycleEstimate: worker 47 + (2 + z),
    tile max(6 x 53, 6 x 53 + 14) = 332 on Mk1 (8 units: zeroCyclesPerGroup z = 4, weight load
    8 x 32 B / 8 B = 32 cycles): 50 + 12 + (10 + 1) + (19 + 7 + 32 + 332) = 463. On Mk2 (16 units:
    z = 8, load 64): worker 57, tile 356, 50 + 12 + (10 + 1) + (19 + 7 + 64 + 356) = 519."""
    mk1 = amp_mode(load_system("ipu-mk1-c2").ipu, 4, 4)
    mk2 = amp_mode(load_system("ipu-mk2").ipu, 4, 4)
    assert amp_fp32_vertex_cycles(mk1, 1, 6, 8, 8)[0] == 463
    assert amp_fp32_vertex_cycles(mk2, 1, 6, 8, 16)[0] == 519


@pytest.mark.parametrize("name", MK1_WITHIN)
def test_ipumodel1_row_within_five_percent_of_poplar(name):
    row = next(r for r in pb.rows(TARGET) if r.name == name)
    assert row.simulated() == pytest.approx(row.cycles, rel=TOLERANCE)


def test_mk1_report_section_lists_every_row_and_a_family_summary():
    lines = pb.mk1_report_section()
    assert lines[1] == "### Mk1 (GC2): the same benchmarks on Poplar's IPUModel1"
    rows = [line for line in lines if line.startswith("| `") and line.endswith(("within |", "outside |"))]
    assert len(rows) == 228
    assert any(line.startswith("| `vgg16_tr_bs4_v1L1` | conv | 1,258,656 |") for line in rows)
    families = {line.split(" | ")[0][2:] for line in lines if line.startswith("| ") and " … " in line}
    assert families == {"gemm", "bert", "fc_layer", "resnet50", "inception", "vgg16", "alexnet", "mobilenet",
                        "reduce", "conv", "oct", "lstm", "gru", "ctc", "embedding", "pool"}
    text = "\n".join(lines)
    within = pb.within(TOLERANCE, TARGET)  # every row simulated once here (the section needs them all)
    assert len(within) >= len(MK1_WITHIN) == 162  # the rows within 5 % do not fall
    assert f"**{len(within)} of 228 rows within 5%.**" in text
    assert "`vgg16_tr_bs4_v2L1`" in text.split("MaxTileMemory exceeds")[1].split("(the IPUModel")[0]
