"""The held-out published measurements of ``docs/reference/published-results.md``: :class:`Row`,
:data:`PUBLISHED_ROWS` (each a zoo model configured as the row's source configures the run, with
its notes), the notes they name (:data:`DEPARTURES`), the rows promoted to asserted since
(:data:`PROMOTED`), :data:`PUBLISHED_BY_ID`, PopRT's published out-of-memory points
(:data:`MEMORY_POINTS`) and the rows the zoo cannot run yet (:data:`NOT_EXPRESSIBLE`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import OutOfMemoryError
from .runner import _outcome
from .setups import (MLPERF_V11_LAMB_STATE, MLPERF_V20_LAMB_STATE, TF1_CNN_IO_TILES, Setup, _bert_train,
                     _bytemlperf_clip_text, _bytemlperf_resnet, _bytemlperf_swin_large, _clip_infer, _conformer_train,
                     _e5_infer, _effnet_train, _gpt2_decode, _gpt2_train, _optimum_lm_train, _optimum_squad_train,
                     _packed_bert, _resnet_infer, _resnet_train, _roformer_infer, _resnext_train, _squad_infer,
                     _squad_train, _swin_infer, _swin_train, _tutorial_squad_train, _unet_train, _vit_infer, _vit_train)


# --- held-out published measurements (docs/reference/published-results.md) ---------------------
# Every row is a published hardware measurement, the zoo model configured as the row's source
# configures the run. None was used to set anything. A row within 30 % when it was added is
# asserted at 30 % by tests/test_calibration.py (a regression guard); the others are tracked in
# reports/validation.md only. Nothing here may be changed to make a row match: fix the model.
PUBLISHED = "docs/reference/published-results.md"
PUBLISHED_TOLERANCE = 0.30
PUBLISHED_WHY = ("within 30 % when the row was added, so held there as a regression guard; not a fit "
                 "(another software stack and data pipeline, nothing tuned to it)")


@dataclass(frozen=True)
class Row:
    """One published measurement of :data:`PUBLISHED` and the simulator's value for it."""

    id: str  # the row id in PUBLISHED ("I1 bs8": row I1 at batch 8)
    source: str  # the source's table tag and the row id, e.g. "MLP v1.0 M5"
    what: str
    published: float
    unit: str
    setup: Setup
    asserted: bool  # within 30 % when added, or since (PROMOTED): tests/test_calibration.py holds it there
    notes: tuple = ()  # where the run departs from the source's configuration: DEPARTURES keys or text

    def outcome(self) -> float | OutOfMemoryError:
        return _outcome(self.setup)

    def simulated(self) -> float:
        value = self.outcome()
        if isinstance(value, OutOfMemoryError):
            raise value
        return value


# Where a run departs from its source's configuration: each row's notes name these keys (the
# report lists them once, under the table), or say it in their own words.
DEPARTURES = {
    "lars": "LARS as the TF1 code runs it (lars_optimizer.py; norms merged into one ReduceMany, as "
            "max_reduce_many_buffer_size 216 does; its momentum in fp16, the weights' dtype at precision 16.16); "
            "IPUOptimizer's weight-decay term added to every gradient is not modelled",
    "tf1-calls": "train.py runs (1,281,167 // GBS) // 5 weight updates per session.run (logs_per_epoch 5 in "
                 "every ResNet-50 MLPerf config; iterations_per_step = log_freq), simulated as one call of as many "
                 "device iterations; the published figure is an epoch's images over its time, 5 such calls with the "
                 "script's work between them, which is not modelled (\"ResNet-50 MLPerf: time per step\" below)",
    "resnet-recompute": "recomputation as TF1 runs the config's pipeline of 7 stages on one IPU (pipeline_splits "
                        "b1/0, b1/2, b2/0, b2/2, b3/0, b3/3 with shards 1): every forward stage but the last is "
                        "recomputed (graphcore/tensorflow pipeline_recomputation.cc), the zoo's checkpoints at "
                        "those 6 block outputs (layer1/0 ... layer3/3), layer3/4 to the head not recomputed",
    "bn-span": "configs.yml BN_span 2 (the logs' model_bn_span is 2 x the micro-batch): each batch norm's "
               "statistics and its gradient sums are all-reduced over pairs of adjacent replicas (TF's "
               "number_of_distributed_batch_norm_replicas, poplibs' distributed batch norm), the zoo's "
               "bn_span=2; the recomputed forward all-reduces its statistics again [U]",
    "stable-norm": "the MLPerf v1.0 configs.yml sets stable_norm: True (TF's norms.use_stable_statistics, PopTorch's "
                   "and PopART's enableStableNorm; v1.1, v2.0 and the examples repo's ResNet-50 MLPerf "
                   "configs do not): poplin's stable estimator, the mean's all-reduce then the power's "
                   "(lib/poplin/Norms.cpp normStatisticsImpl)",
    "tf-stable-norm": "TensorFlow's norms.use_stable_statistics, as the example sets it (PopTorch's and PopART's "
                      "enableStableNorm): each norm reduces its mean, subtracts it, then reduces the "
                      "power (lib/poplin/Norms.cpp normStatisticsImpl, stableAlgo)",
    "tf-clear-pass": "TensorFlow's matmuls.clear_pass_type, as the TF1 BERT's ipu_utils.py sets it (PopART's "
                     "enableFullyConnectedPass off): graphcore/tensorflow gives no matmul a fullyConnectedPass "
                     "(GetMatMulOptionsForInst), so poplin plans each as a plain matmul",
    "effnet": "the TF1 config as models/efficientnet.py builds it; not modelled: the source's drop-connect (a "
              "per-sample random scale of each residual branch), the base config's mixup (alpha 0.2) and cutmix "
              "(element-wise work on the images, a second loss term), conv dithering and the exchange target "
              "'memory'; the Grouped schedule's cycles run as PopART's pipeline cycles, each stage's inter-IPU "
              "copies one after another as TensorFlow calls them (\"tf-copies\"); LARS's norms are merged into "
              "ReduceMany calls as in the MLPerf ResNet-50 rows, though this config sets no "
              "max_reduce_many_buffer_size [U]; the pre-SDK 2.5 rows (B4-B6) are assumed to run the SDK 3.0 "
              "config [U]",
    "resnext": "the TF1 config as models/resnet.py builds resnext101 (torchvision's layout: the stride on "
               "the 3x3 convolution); the SDK 3.0 benchmark's 32 IO tiles (B21; the SDK 2.5 README's commands "
               "give B7's era none) with the infeed and outfeed on them; the Grouped schedule runs as PopART's "
               "pipeline cycles with each stage's inter-IPU copies one after another (\"tf-copies\"); "
               "availableMemoryProportion is the default 0.6 (the config sets none); B7 (pre-SDK 2.5) is "
               "assumed to run the SDK 3.0 config [U]",
    "effnet-pod256": "RF 128 and GA 16 are inferred from the GBS of 6,144 at micro-batch 3 [U]; the config "
                     "lists no Pod256 entry",
    "host-processes": "each host process (PopRun instance) runs its replicas' stream callbacks on one thread, Poplar's "
                      "default (RuntimeOptions streamCallbacks.multiThreadMode singleThread, numWorkerThreads 0: \"the "
                      "main thread will execute all of the callbacks\"), and PopART, PopTorch and TensorFlow's infeeds "
                      "copy each replica's micro-batch into its stream buffer in a callback (popart devicex.cpp "
                      "PrefetchCallback; tensorflow poplar_executor.cc InfeedPrefetchCallback), so a process fills its "
                      "replicas' inputs one after another at host_prepare_bytes_per_s (Options.hostProcesses, "
                      "streamCallbackThreads). The processes are the source's: MLPerf ResNet-50 v1.0 POD16 8 of 2 "
                      "replicas, POD64 16 of 4 (run_and_time.sh INSTANCES); v1.1, v2.0 and the examples' TF1 and "
                      "PyTorch CNN scripts 2 replicas a process; EfficientNet and ResNeXt 1; ViT Pod64 8 of 2; "
                      "Conformer POD64 4 of 4; MLPerf BERT POD128/256 2 / 4 of 8; the other scripts one process for "
                      "all replicas (pre-SDK 2.5 rows B1-B7: the SDK 2.4 README's commands [U])",
    "vit-pretrain": "the loss is lam CE(labels) + (1 - lam) CE(rolled labels); the zoo builds one softmax "
                    "cross-entropy, whose gradient is the same work (a softmax less a mixed one-hot); the second "
                    "term's forward and the on-device accuracy (B x 1,000 values) are left out",
    "vit-not-modelled": "set by the source but not modelled: stochastic rounding; "
                        "scheduleNonWeightUpdateGradientConsumersEarly; "
                        "the per-step host work timed with "
                        "each step (the next batch from the asynchronous DataLoader, scheduler.step(), setOptimizer())",
    "vit-pod64": "poprun with 8 instances of 2 replicas: PopTorch shards the optimizer state over each "
                 "instance's replicas (CommGroup(Consecutive, 2))",
    "unet": "the example's model as models/unet.py builds it (its default 572 x 572 input, 2 classes, dropout 0.5 "
            "at the bottom); not modelled: the metrics computed beside the loss (the Dice accuracy and the "
            "cross-entropy again), the loss scaling (LossScaleOptimizer, 128) and the gradient normaliser's scale "
            "of each gradient, the exchange target 'balanced', Keras' work between executions; the Grouped "
            "schedule runs as PopART's pipeline cycles, each stage's inter-IPU copies one after another and the "
            "crops sent straight to the stage that reads them (\"tf-copies\"); RecomputationMode.Auto run as PopART's pipeline recomputation "
            "(every forward stage but the last recomputed) [U]; the throughput is one execution's 240 images over "
            "its time (PerfCallback)",
    "swin": "Graphcore's port as models/swin.py builds it (each 7 x 7 window padded to 56 tokens, its "
            "RemapCE layout copies); throughput is the call's samples over the time from setOptimizer() to the "
            "call's return (train_swin.py: the DataLoader's next batch is outside it), setOptimizer's write of "
            "the learning rate not modelled; not modelled: stochastic rounding, the loss scaling (1,024), "
            "scheduleNonWeightUpdateGradientConsumersEarly, RemapCE's regrouping after a matmul (priced as its plain "
            "layout copy)",
    "conformer": "the example's model as models/conformer.py builds it (WeNet's Conformer-medium: 12 encoder "
                 "blocks of d 256, 6 decoder blocks, vocabulary 4,233); not modelled: the loss scaling (1,024), "
                 "stochastic rounding (its TiedGather patterns are set and find no tied table; PopART's "
                 "outlineThreshold 10 is run at 1.0: the same calls), the padding masks "
                 "made on the IPU from the lengths (constants here); the example sets no recomputation checkpoint, so "
                 "each pipelined stage recomputes from its stashed inputs; the label-smoothing loss is built as a "
                 "softmax cross-entropy (the same work); throughput is the step's samples over the time from the "
                 "call to setOptimizer()'s return (trainer.py: the DataLoader's next batch and the keys' decoding "
                 "come before the timer), scheduler.step() and setOptimizer() not modelled",
    "conformer-pod4": "the README lists POD4 figures under global batch 16,128 without a script: one replica, GA "
                      "4,032 [U]",
    "conformer-pod64": "poprun with 4 instances of 4 replicas (run_wenet_conformer_globalbs_16128_pod64.sh); without "
                       "RTS the instances change nothing the simulator models",
    "bert-recompute": "recomputation is the zoo's default for a pipelined BERT (a checkpoint after every layer)",
    "attn-dropout": "the config turns attention dropout off (PopART's \"no_attn_dropout\": true in the MLPerf "
                    "v1.0/v1.1 and examples' pretrain JSONs): run with the zoo's attention_dropout=0, its hidden "
                    "dropout 0.1 kept",
    "tf-combine": "graphcore/tensorflow combines the gradient all-reduces up to 10 MiB a call "
                  "(maximum_cross_replica_sum_buffer_size in ipu_utils.py); run as one merged call (the TF1 "
                  "config's reduce-scatter buffer is 0: its RTS reduce-scatters stay one per tensor)",
    "tf-copies": "TensorFlow's pipelines wrap each stage's inter-IPU copies in a Poplar function of their own and "
                 "call them one after another every cycle (graphcore/tensorflow pipeline_visitor.cc "
                 "HandleInterIpuCopy, to_function; its copy combiner joins no copies of different stages, which "
                 "depend on each other), where PopART merges every stage's copies into one call: run with "
                 "pipelineCopies(PerStage); a tensor a later stage reads goes straight to it (the Grouped and "
                 "Sequential schedules' PipelineCommunicationOptimizer turns a pass-through path into a FIFO)",
    "tf2": "TF2 config: optimizer state off chip (its default) without RTS; its MLM head has no transform "
           "layer (use_cls_layer false), the zoo's has one",
    "poprt": "hardware not named next to the figures; run on the C600 (configs/c600.toml: IPU21 at 1.5 GHz, "
             "PCIe Gen4 host link, no gateway) as the README's FP8 runs in the same table need IPU21 "
             "(--ipu_version ipu21, the C600's architecture) and PopRT's utilisation tool defaults to the C600 "
             "(doc section 3) [U]; PopRT's ONNX ResNet-50 takes uint8 images (eight_bit_io) and, exported by "
             "torch.onnx.export from torchvision's eval() model (examples/resnet50/test_resnet.py), has each batch "
             "norm folded into its convolution (the script's node names Conv_5 ... Gemm_126 count 127 nodes, none "
             "a BatchNormalization): the zoo's norm=\"folded\", a bias added per channel",
    "poprt-bps": "batches per step not stated: 100, as the README's run commands",
    "poprt-swin": "RT benchmarks/Swin-Tiny (README and poprt_run.py at 77e7d66, unchanged at 7487d65): ByteMLPerf's Swin-T ONNX model "
                  "(open_swin-Tiny, batch 24; taken to be the original Swin-T, 224 x 224, window 7 [U]); hardware not "
                  "named: run on the C600 as the other PopRT rows (poprt) [U]; throughput is the batch over the mean "
                  "time of 1,500 asynchronous execute calls of one batch each. The Converter pads the attention "
                  "(attention_padding, to a length not stated [U]) and inserts remaps (enable_insert_remap): run as "
                  "the zoo's Swin-T, Graphcore's port, whose windows are padded 49 -> 56 tokens and whose permuted "
                  "tensors are remapped; enable_erf_gelu makes its exact GELU PopART's GeluErf (the zoo's "
                  "gelu=\"erf\"); merge_multi_slice is not modelled, and PopRT's outlining threshold 0.5 is "
                  "run at PopART's 1.0 (the same calls: sim/compiler/outlining.py). "
                  "The script sets no partials type (as I13's [U]): run with half partials; with float partials "
                  "the simulator gives 5,476 images/s (-19.5 %)",
    "poptransformer": "graphcore/PopTransformer's GPT-2 as models/gpt2.py's decode_cache builds it (one "
                      "iteration of the 264-iteration device loop, 264 device iterations with the token kept on "
                      "the IPU); its custom ops priced as the library ops doing their work: NormCE (a layer norm, "
                      "statistics in fp32) as popnn's layer norm, SoftmaxV3 as the non-stable softmax after a "
                      "copy to a linear layout, KVCache as its two on-tile copies of the whole cache, Remap as a "
                      "layout copy. Throughput is the batch over the time per token (benchmark.md's Throughput: "
                      "batch x 264 tokens over the run)",
    "poptransformer-c600": "the same benchmark on 8 C600 cards (benchmark.md's first table: 1.053 / 2.253 / 3.507 / "
                           "4.383 ms a token), run on configs/c600-x8.toml: eight C600s in one server, a ring of "
                           "IPU-Link cables (the sharded model's activations cross them), each card's own PCIe link; "
                           "the cards' figures are the Mk2 ones times the clock ratio 1.5 / 1.325 to within 0.5 %",
    "poprt-vit": "hardware not named: run on the C600 as the other PopRT rows (poprt) [U]; throughput is the batch over "
                 "the mean time of 2,000 asynchronous execute calls of one batch each (poprt_run.py). PopRT's Converter "
                 "passes fused_attention and attention_padding (the attention as one fused op, its 197 tokens padded) "
                 "are not modelled: the simulator prices the attention's matmuls, scale and softmax on 197 tokens; "
                 "its fast layer norm (at batch 8; disable_fast_norm at batch 32) is priced as popnn's; "
                 "enable_erf_gelu makes the model's exact GELU PopART's GeluErf (popops' GELU_ERF vertex, the zoo's "
                 "gelu=\"erf\"). The script "
                 "sets no partials type; PopRT's other scripts opt in to half partials (partials_type 'half', or "
                 "their --half_partial flag), so its default is not stated [U]: run with half partials; with "
                 "Poplar's default float partials (the AMP at half rate, 8 conv units) the simulator gives 1,824 and "
                 "2,368 images/s (-30 %, -24 %)",
    "poprt-depth": "stream_buffering_depth 2, as the benchmark script",
    "poprt-clip": "RT benchmarks/CLIP (README, export_onnx.py, poprt_run.py at 7487d65): OpenAI's CLIP ViT-B/32 "
                  "exported whole, so every call also encodes the same 100 texts of 77 tokens; throughput is the batch "
                  "over the mean time of 100 asynchronous execute calls; hardware not named: run on the C600 as the "
                  "other PopRT rows (poprt) [U]; the Converter's remaps (enable_insert_remap) are not modelled and "
                  "the partials type is not set (half [U])",
    "poprt-roformer": "RT benchmarks/RoformerV2 (README, export_onnx.py, poprt_run.py at 77e7d66): JunnYu's "
                      "RoFormerForSequenceClassification with junnyu/roformer_v2_chinese_char_small (the zoo's "
                      "roformer-v2-small) exported to ONNX at 128 tokens, int64 inputs converted to int32 on the "
                      "host; throughput is the batch over the mean time of 100 asynchronous execute calls of one "
                      "batch each (batches_per_step unset: 1); hardware not named: run on the C600 as the other "
                      "PopRT rows (poprt) [U]; the partials type and availableMemoryProportion are not set (half "
                      "[U], 0.6); at batch 64 and 356 the Converter's matmul_rotary_embedding pass (not modelled: "
                      "the rotary priced as exported, its element-wise ops on the even and odd features) and at 356 "
                      "its pre_scale pass (modelled: the score scale moved onto Q)",
    "bytemlperf": "ByteMLPerf's IPU report (bytedance/ByteMLPerf byte_mlperf/reports/IPU/*/result*.json, a C600 in a "
                  "host with Xeon Gold 6342 CPUs): QPS is the client threads' batches (4 for ResNet-50 and Swin-L, "
                  "3 for CLIP) over the wall time of their synchronous execute() calls of one batch each "
                  "(engine_poprt.py benchmark), the device loop of 128 batches taking a queued request each "
                  "iteration: run as one call of 128 batches; the clients' host threads are not modelled",
    "bytemlperf-clip": "ByteMLPerf's clip-onnx-fp32 is Stable Diffusion's text encoder (model_zoo/clip-onnx-fp32.json: "
                       "sota/stable_diffusion/clip-text-encoder.onnx, outputs last_hidden_state and pooler_output, "
                       "input_ids [B, 77] int32); the version is not named: v1's CLIP ViT-L/14 text tower (123 M "
                       "parameters) is taken, as v2's OpenCLIP-H text tower (23 layers of width 1,024) would need more "
                       "than the C600's peak at the published batch-40 rate [U]; rearrange_anchors_on_host and "
                       "group_host_sync are not modelled",
    "bytemlperf-io": "fp16 images, 301 KB each, from the host: from batch 32 the simulator's rate stops at the "
                     "host's stream-buffer fill (host_prepare_bytes_per_s, 3.48 GB/s, fitted on an IPU-M2000 host "
                     "and carried over to the C600's host), where the published figure needs the host to deliver "
                     "at least 4.1 GB/s (fp16) and 5.7 GB/s (FP8 run) of images: the C600 host's rate is not "
                     "measured (no microbenchmark), so it was not changed for these rows",
    "bytemlperf-fp8": "fp8_skip_op_names keeps only layer1's downsample convolution in fp16 (the stem and the "
                      "classifier in FP8 with the rest); the zoo's fp8_convs keeps the stem in fp16 (as PopRT's "
                      "README runs it, I4) [U]",
    "bytemlperf-swin": "Hugging Face's Swin-L (swin-transformer-large.pt: 384 x 384, window 12, 1,000 classes [U]) "
                       "converted with enable_insert_remap false: run as the zoo's Swin-L, Graphcore's port, whose "
                       "permuted tensors are remapped (models/swin.py); its 144-token windows need no padding; its "
                       "exact GELU runs as PopART's exact GELU (the zoo's gelu=\"erf\": GeluErf or an unfused Erf, "
                       "the interact file names no GELU pass [U])",
    "bytemlperf-swin-fp8": "PopRT's Converter with precision fp8 and no fp8_skip_op_names (the backend's default "
                           "fp8_params [U]): every layer with weights and the patch embedding in FP8, the attention's "
                           "products of activations in fp16 [U] (models/swin.py fp8_matmuls)",
    "poprt-fp8": "RT examples/resnet50 README's row \"first conv and last gemm use fp16\" (PopRT's Converter with "
                 "precision fp8, fp8_params F143,F143,-3,-3, fp8_skip_op_names naming the stem conv and the Gemm; "
                 "the script's default also skips Conv_13, the README's next row): the zoo's fp8_convs, each other "
                 "convolution casting its fp16 input to FP8 with FP8 weights and an fp16 result, on the C600's "
                 "FP8 AMP (poplibs' quarter vertex estimates); the FP8 scales cost nothing",
    "poprt-fp8-io": "from batch 64 the host paces the simulator's real-data rate: per batch of 90 it fills a stream "
                    "buffer in 3.9 ms (host_prepare_bytes_per_s, fitted on an IPU-M2000 host with Poplar tutorial 6 "
                    "and carried over to the C600's host), longer than the IPU's compute of a batch, while the IPU "
                    "copies the other buffer over PCIe to the IO tiles (0.9 ms): about 22.7 k images/s (3.4 GB/s of "
                    "uint8 images), where the published 23.5 k needs at least 3.5 GB/s from the host (PopRT's "
                    "benchmark submits from several host threads, which the simulator does not model). Until "
                    "2026-12-07 the run streamed at depth 1, one buffer filled and then copied in turn: 18.8 k",
    "poprt-depth-readme": "stream_buffering_depth 2: the README's tables do not state the compile options of their "
                          "runs; PopRT's ResNet-50 benchmark script compiles overlapped IO with it "
                          "(benchmarks/resnet50/test_resnet50.py at 77e7d66, row I5), as every benchmark script in "
                          "the repository sets it [U]",
    "poprt-bert": "hardware not named: run on the C600 (configs/c600.toml), as the ResNet-50 rows of the same "
                  "PopRT release [U]. The model is Hugging Face's BertForQuestionAnswering exported to ONNX "
                  "(RT benchmarks/bert/test_bert_*.py: transformers.onnx --feature question-answering), run "
                  "as the zoo's BERT with the squad head; PopRT's fused attention pass is not modelled, its "
                  "erf_gelu_pattern is: the exported model's exact GELU runs as PopART's GeluErf (popops' GELU_ERF "
                  "vertex, the zoo's gelu=\"erf\"); throughput is batch x requests / wall time with 5 host threads, simulated as one "
                  "call of batches-per-step device iterations. Both scripts set poplin's use128BitConvUnitLoad "
                  "(the AMP loads its weights 128 bits a cycle instead of 64), enableFastReduce (the partials "
                  "reduced by the single-input vertex at twice the load width) and enableMultiStageReduce off "
                  "(the partials reduced in one stage), run as such (ConvModel.cpp, poplinCycleEstimators.cpp, "
                  "ConvReduce.cpp); group_host_sync is not modelled",
    "poprt-bert-fp32": "fp16_skip_op_types 'GroupNormalization,Gelu' at batch 128: layer norm and GELU run in "
                       "fp32 there, cast from and back to fp16 (the zoo's fp32_ops)",
    "poprt-i11": "RT examples/bert/test_bertsquad.py: bertsquad-12 (Google's BERT-Base, vocab 30522) at SL 256, "
                 "its layer norms and tanh-form GELU (Pow(x, 3) included) fused into single ops by PopRT's "
                 "layer_norm_pattern and gelu_pattern passes, "
                 "fp16 with GELU and layer norm kept in fp32 (fp16_skip_op_types; the zoo's fp32_ops), half "
                 "partials, 32 IO "
                 "tiles; the script runs one request at a time in a Python loop and hard-codes batch 1 (the other "
                 "batch sizes need a changed script [U]), simulated as one call per batch (its host loop is not "
                 "modelled); hardware not stated (IPU21 per the doc [U]), run on the C600 (configs/c600.toml). "
                 "The README's bert_fp16_with_gelu row (GELU not kept in fp32, as its name suggests [U]) runs "
                 "15-31 % faster at batch 1-8 "
                 "(bs8: 5.07 against 6.62 ms per call), so the fp32 GELU alone costs about 1.5 ms per batch-8 call "
                 "on the hardware, where the simulator's (popnn's GELU estimate in fp32, 10 cycles a vector, which "
                 "poplibs marks 'should be verified', and its two casts) takes 0.17 ms",
    "squad-popart": "PopART configs/squad_large_384.json: ADAM_NO_BIAS run as adam (bias correction is scalar "
                    "work); use_half_optimizer_state keeps the first moment (accl1) in fp16, the second in fp32; "
                    "stochastic rounding is not modelled",
    "pt-options": "graphcore/examples SDK 3.1 (c0239af) nlp/bert/pytorch as run here: outputMode Sum "
                  "(ipu_options.py:61), attention_probs_dropout_prob 0 (configs_pretraining.yml:34; the hidden "
                  "dropout stays 0.1), LAMB state fp32 (enable_half_first_order_momentum False), optimizer state "
                  "off chip with RTS, half partials, matmul_proportion per IPU, recompute_checkpoint_every_layer, "
                  "and optimization.py's parameter groups: biases without weight decay or LAMB's trust ratio "
                  "(max_weight_norm 0, so PopART drops their norms), other 1-D weights without weight decay",
    "pt-not-modelled": "set by the source but not modelled: stochastic rounding (ipu_options.py:96); PopTorch "
                       "converting each call's int64 inputs to int32 on the host before the run "
                       "(poptorch 3.1 PoplarExecutable.cpp:81-85; the graph streams int32); the per-step host "
                       "work timed with each step (scheduler.step() and setOptimizer(), run_pretraining.py:150-153, "
                       "run_squad.py:138-139: the new learning rate written to the IPUs every step); the "
                       "published figure is the mean of 10 per-step throughputs (benchmarks.yml --training-steps 10; "
                       "examples-utils reduces them by their mean), so it includes the first step. The async "
                       "DataLoader (64 workers, AsyncRebatched, pretraining_data.py:244-250) reads ahead of the "
                       "IPU, so the data loading is not on the step's path and is not simulated",
    "pt-pod64": "the Pod64 benchmark (benchmarks.yml pytorch_bert_large_packed_pretrain_real_pod64) runs one "
                "python3 process without poprun: one host drives all 16 replicas (replication_factor 16), one "
                "DataLoader and one host conversion of the inputs for the whole step; the simulator prices host IO "
                "per Bow-2000 host link and the host side of each stream on its own, as if every chassis had its "
                "own host. At these rates the link does not matter (all 16 replicas' inputs are under 140 MB per "
                "step, about 11 ms on one 100 GbE link against 2.5-3.5 s steps)",
    "pt-squad": "run_squad.py reads each step's batch before starting the step's timer (:130-131), so its "
                "synchronous single-process DataLoader (:96-106, no workers) is outside the published figure; "
                "its options otherwise as pt-options (AdamW, first moment fp16, on-chip optimizer state with RTS)",
    "tutorial-squad": "the tutorial times each step from before its PopTorch call to after "
                      "lr_scheduler.step() and setOptimizer(optimizer) (the new learning rate written to the "
                      "IPUs every step), the next batch from its synchronous DataLoader outside the timer, and shows "
                      "256 / that time in its progress bar; the figure is the median of the nine such values its "
                      "stored outputs keep, each an epoch's last step (556.9 to 631.7; the last batch's 204 samples "
                      "are padded to 256, so the step does a full step's work). The run is the tutorial's first "
                      "version (graphcore/tutorials 42bf70f, November 2021, SDK 2.3: its stored warnings match that "
                      "code, not later versions'), on an IPU-POD16, Mk2 as Bow came in March 2022. Not modelled: "
                      "stochastic rounding, the loss scaling (64); the setOptimizer write is not added (the row runs "
                      "the zoo model through sim.simulate, as B43). The tutorial's BERT is Hugging Face's class "
                      "unfused (hf_attention: three Q, K, V matmuls and the scores divided), where Graphcore's "
                      "PyTorch BERT and optimum fuse the QKV matmul; sim.poptorch running the tutorial's loop on "
                      "Hugging Face's own class (transformers 5.25) gives a call within 1 % of the zoo's. Each "
                      "step is 444 ms published and 324 ms simulated, of which IPU 7 (4 layers and the span "
                      "head, the pipeline's slowest stage) is busy 300 ms",
    "optimum": "the notebook's trainer.train(): train_samples_per_second 419.265 = 690 steps of 256 samples over "
               "the 421.3 s of the training loop (the training graph's compilation before it), which holds two "
               "checkpoint saves (steps 300 and 600), a log line every 25 steps and each step's host work (the "
               "learning-rate scheduler, PopTorch's setOptimizer); the machine is not named: an IPU-POD16 of "
               "Mk2 IPU-M2000s assumed (Paperspace, August 2022) [U]. Not modelled: stochastic rounding, the "
               "word embedding's lookup serialised 2 ways (optimum's SerializedEmbedding), PopART's "
               "outlineThreshold 10 (run at 1.0). Each 256-sample step is 611 ms published and 384 ms simulated: "
               "the same per-call gap as the PyTorch BERT rows (per-call)",
    "alcf-resnet": "Graphcore's pytorch_resnet50_train_real_* commands as ALCF ran them (poprun, one instance a "
                   "replica, 14 DataLoader workers, rebatch 256, 20 epochs, no validation; real ImageNet: the host's "
                   "JPEG decoding is not modelled); the figure is the epochs' mean throughput after the first; the "
                   "system's generation is not stated (ALCF's testbed is a Bow Pod64 [U])",
    "alcf-resnet-one": "Graphcore's resnet50-pod4 config (4 replicas, GA 228: resnet50's global batch) as ALCF's user "
                       "guide runs it (poprun --num-instances=1 --num-replicas=4, train.py --epoch 2, the loader's "
                       "default workers; real ImageNet); the figure is epoch 2's printed throughput (epoch 1: "
                       "7,599.7); one host process decodes and feeds the 4 replicas, and its JPEG decoding is not "
                       "modelled: the same replicas with one instance each (A4, SDK 3.0) ran 9,960",
    "alcf-gpt2": "Graphcore's pytorch_gpt2_small_train_gen_pod16 command as ALCF ran it (generated data, a call of "
                 "8 weight updates, 65,536 sequences; the timer holds the call, scheduler.step() and setOptimizer(), "
                 "not the DataLoader); the loss over 128-position slices and RemapCE (--enable-sequence-serialized, "
                 "--remap-logit) as the zoo's loss_chunk and remap_logits; not modelled: wpe on IPU 1, loss scaling "
                 "50,000, AdamW without bias correction",
    "optimum-lm": "the notebook's trainer.train(): train_samples_per_second 951.618 = 720 steps of 256 samples over "
                  "193.7 s (a repeat: 970.343 in 190.0 s), one checkpoint save inside, no evaluation; run on a "
                  "machine not named (a Graphcore developer's, August 2022): an IPU-POD16 of Mk2 IPU-M2000s assumed "
                  "[U]. The notebook's model is torch's TransformerEncoder (post-norm layers, ReLU) with learned "
                  "positions and a tied head with a bias; run as the zoo's GPT-2 small (pre-norm, GELU, causal "
                  "mask), the same matmuls. Not modelled: stochastic rounding, the loss scaling. Each 256-sample step "
                  "is 269 ms published and about 105 ms simulated: the per-call gap (per-call) with a model of a "
                  "third of BERT-Large's weights per IPU",
    "per-call": "B42 (PopART, deviceIterations 4) and B43 (PyTorch, deviceIterations 2) run the same model, "
                "micro-batch, GA and replicas; the line through their call times (samples per call / throughput: "
                "866 and 518 ms) is 174 ms per weight update plus 170 ms per call. The simulator now gives "
                "205-207 ms per weight update for both (171-174 ms when this note was first written) and nothing "
                "per call, so the calls miss 47 ms (B42) and 104 ms (B43): B42's 47 ms added to B43's call would "
                "leave it at +12.5 %, so its deviceIterations 2 explains about half of its larger error. Of the "
                "other 57 ms, the one PyTorch-only cost found is host work inside its timer: run_squad.py:131-140 "
                "times the call, scheduler.step() and setOptimizer(), whose updateOptimizerFromHost streams "
                "each parameter's optimizer scalars (PopTorch makes every parameter of a group an "
                "insertSpecific, poptorch 3.1 CompilerImpl.cpp updateGroups), where PopART's bert.py times "
                "session.run alone and updates its optimizer after the timer (bert.py:622-646). sim.poptorch "
                "prices that write since 2026-11-30 (PopART's OptimizerFromHost: a host stream copy of each "
                "optimizer tensor, PoplarExecutor.optimizer_writes): B43's AdamW (optimization.py: learning "
                "rate, weight decay, eps and loss scaling given, so 5 tensors for each of the zoo model's 295 "
                "weights) writes 1,475 tensors in about 7.4 ms, which leaves about 50 ms a call unexplained; "
                "the rows run the zoo model through sim.simulate and do not add it",
    "packed": "packed sequences (max_sequences_per_pack 3): the zoo's packed BERT, a block-diagonal attention mask "
              "made in every layer from the streamed sequence indices, position ids streamed, the MLM head on the "
              "first mask_tokens positions; samples/s counts sequences, packs x the packing factor "
              "(Graph.samples_per_row)",
    "mlperf-factor": "packing factor 2 (avg_seq_per_pack in the MLPerf configs)",
    "mlperf-step": "the published figure is training only (sequences between evaluations over block_start to "
                   "block_stop; evaluation and start-up excluded); each step is one synchronous session.run "
                   "(batches_per_step 1) followed by the script's host work (updateOptimizerFromHost, the next "
                   "step's data). The line through the step times of M18-M20 (GA 96, 64, 36) puts what every step "
                   "adds at about 200 ms on hardware, more than the simulator's fill, flush, per-tensor reduce-scatters "
                   "and all-gathers and weight update (\"Packed BERT SL512: time per step\" below gives both). The v1.x logs place it inside the "
                   "training call: each eval call of the same training program costs a full step without the host "
                   "work (docs/reference/published-results.md 1.1); what it is has no published size",
    "fp8-checkpoints": "the config's activation_checkpoint_dtype FLOAT8 (bert_model.py Bert.checkpoint): each "
                       "layer's checkpoint goes through an 8-bit float copy (CastToFp8: 3 exponent and 4 mantissa "
                       "bits; CastFromFp8), so the pipeline stashes it in 1 byte per element; with fp16 "
                       "checkpoints the simulator puts IPU 2 out of memory by a few kB, as the source's choice "
                       "implies (tests/test_fp8_checkpoints.py). The custom "
                       "ops cast with popfloat's GfloatCast, whose cycle "
                       "estimators for the 8-bit casts are placeholders (poplibs popfloatCycleEstimators.cpp "
                       "CastHalfToGf8Supervisor returns 1): priced as popops casts, as are their gradients (copies "
                       "of the fp16 gradient in the source); about 0.1 % of a step",
    "nsp": "the config keeps the NSP head (pooler and 2-way classifier on each pack's 3 sequence slots); the zoo's "
           "BERT has none (about 0.01 % of the FLOPs)",
    "emb-serial": "the config serialises the tied vocab projection over the vocabulary (PopART's "
                  "embedding_serialization_vocab_steps: 5 in MLPerf v1.0 and the examples' pre-training configs, 4 "
                  "in MLPerf v1.1 and v2.0; PyTorch's embedding_serialization_factor 2 for BERT-Large): the zoo's "
                  "embedding_serialization, that many matmuls of the table's row blocks; PopART also splits the "
                  "table into as many weights, updated one by one (not modelled: the same work in smaller pieces), "
                  "and the PyTorch model's word-embedding lookup into as many masked lookups (not modelled)",
    "att-ffn": "att_ffn_placement as the config; recomputation checkpoints stay per layer (each layer's FFN "
               "output); the source also checkpoints the attention outputs of its last stage and skips the FFN "
               "output that ends an IPU's run",
    "clip": "the closed config's gradient_clipping_norm (bert_optimizer.py: ClipNormSettings.clipAllWeights): every "
            "gradient's norm, the global norm on one IPU and its factor back, a barrier across the IPUs before the "
            "update; the open configs set none",
    "poprun-rts": "run under poprun, 8 replicas per instance: bert.py then shards the optimizer state over "
                  "each instance's replicas (shardingDomain CommGroup(Consecutive, local replicas), "
                  "set_popdist_args), so each gradient is reduce-scattered over 8 replicas, its shard all-reduced "
                  "across the instances (PopART's complementary group) and the weights all-gathered over 8",
    "pt-gather": "PyTorch gathers the mask_tokens masked positions of each pack; the zoo slices the first "
                 "mask_tokens positions (the same rows projected)",
}


# att_ffn_placement of the MLPerf configs (training_results v1.1 / v2.0, Graphcore .../popart/configs)
_ATT_FFN_V11_POD16 = [[1, [7, 6]], [2, [6, 7]], [3, [7, 6]], [0, [4, 5]]]
_ATT_FFN_V11_POD64 = [[1, [2, 2]], [2, [3, 3]], [3, [4, 3]], [4, [3, 4]], [5, [4, 3]], [6, [3, 4]], [7, [4, 3]],
                      [0, [1, 2]]]
_ATT_FFN_V20_POD64 = [[1, [3, 3]], [2, [3, 3]], [3, [3, 3]], [4, [4, 3]], [5, [3, 4]], [6, [4, 3]], [7, [3, 4]],
                      [0, [1, 1]]]
_ATT_FFN_V20_POD16 = [[1, [3, 3]], [2, [4, 3]], [3, [3, 3]], [4, [3, 4]], [5, [4, 3]], [6, [3, 4]], [7, [4, 3]],
                      [0, [0, 1]]]
_MLPERF = ("packed", "mlperf-factor", "mlperf-step")
# the packed rows within 30 % with room to spare when added (asserted); the others are tracked
_ASSERTED_PACKED = {"B32", "B35", "B38", "B39"}


_LARGE_AMP = [0.15, 0.25, 0.25, 0.25]
_SQUAD_PYTORCH_AMP = [0.08, 0.25, 0.32, 0.32, 0.36, 0.38, 0.40, 0.32]  # configs_squad.yml squad_large_384
_SQUAD_POPART_AMP = [0.1, 0.3, 0.32, 0.34, 0.36, 0.38, 0.4, 0.32]  # popart configs/squad_large_384.json
_I11 = {1: 664, 2: 844, 4: 1068, 8: 1208, 16: 488}  # RT examples/bert README, bert_fp16
_I1 = {1: 3653, 2: 5466, 4: 7438, 8: 9805, 16: 11825, 32: 14240, 64: 16084, 90: 17105, 96: 16790}
_I2 = {1: 3529, 2: 5284, 4: 7030, 8: 9307, 16: 11393, 32: 13593, 64: 15249, 90: 16470}
_I3 = {1: 1796, 2: 2356, 4: 2957, 8: 3377, 16: 3903}
# FP8, the stem convolution and the classifier in fp16: synthetic (I4) and real data with overlapped IO (I12)
_I4 = {1: 4126, 2: 6499, 4: 9334, 8: 13313, 16: 16334, 32: 19667, 64: 22886, 90: 24962, 96: 23695}
_I13 = {8: 2600, 32: 3109}  # RT benchmarks/ViT README, "Tput"
_I23 = {1: 2783.067, 64: 29799.144, 356: 42643.069}  # RT benchmarks/RoformerV2 README, "Tput"
_I16 = {1: 840, 8: 3139, 16: 4043, 24: 4858}  # PT examples/gpt2/benchmark.md, 8x MK2 "Throughput(token/s)"
_I16C = {1: 949, 8: 3550, 16: 4562, 24: 5475}  # the same file, 8x C600 "Throughput(token/s)"
_I12 = {1: 3997, 2: 6314, 4: 8749, 8: 12476, 16: 15554, 32: 18705, 64: 21525, 90: 23500, 96: 22295}
# within 25 % when added (2026-11-23): the larger batches meet the simulator's host-IO cap [poprt-fp8-io]
_ASSERTED_I12 = {1, 2, 4, 8, 16, 32}
# the batch sizes within 30 % with room to spare are asserted (all of them since the rows run on the C600)
_ASSERTED_I1, _ASSERTED_I2, _ASSERTED_I3 = set(_I1), set(_I2), set(_I3)

PUBLISHED_ROWS = [
    # ResNet-50 training, Mk2 (MLPerf v1.0 / v1.1, TF1.15; throughput from the result logs)
    Row("M5", "MLP v1.0 M5", "ResNet-50 training, Mk2 POD16, GBS 1,920", 27527, "images/s",
        _resnet_train("ipu-pod16", 16, 20, 6, 0.15, tf1_calls=True, stable_norm=True), True,
        ("resnet-recompute", "tf1-calls", "bn-span", "stable-norm")),
    Row("M6", "MLP v1.0 M6", "ResNet-50 training, Mk2 POD64, GBS 2,560", 83404, "images/s",
        _resnet_train("ipu-pod64", 64, 20, 2, 0.14, tf1_calls=True, stable_norm=True, replicas_per_process=4), True,
        ("resnet-recompute", "tf1-calls", "bn-span", "stable-norm")),
    Row("M13", "MLP v1.1 M13", "ResNet-50 training, Mk2 POD16, GBS 3,200", 29543, "images/s",
        _resnet_train("ipu-pod16", 16, 20, 10, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M14", "MLP v1.1 M14", "ResNet-50 training, Mk2 POD64, GBS 3,840", 108011, "images/s",
        _resnet_train("ipu-pod64", 64, 20, 3, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M15", "MLP v1.1 M15", "ResNet-50 training, Mk2 POD128, GBS 5,120", 178212, "images/s",
        _resnet_train("ipu-pod128", 128, 20, 2, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M16", "MLP v1.1 M16", "ResNet-50 training, Mk2 POD256, GBS 10,240", 325997, "images/s",
        _resnet_train("ipu-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    # ResNet-50 training, Bow (MLPerf v2.0; Graphcore's table)
    Row("M23", "MLP v2.0 M23", "ResNet-50 training, Bow Pod16, GBS 3,520", 43127, "images/s",
        _resnet_train("bow-pod16", 16, 22, 10, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M24", "MLP v2.0 M24", "ResNet-50 training, Bow Pod64, GBS 5,120", 146252, "images/s",
        _resnet_train("bow-pod64", 64, 20, 4, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M25", "MLP v2.0 M25", "ResNet-50 training, Bow Pod128, GBS 5,120", 229435, "images/s",
        _resnet_train("bow-pod128", 128, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M26", "MLP v2.0 M26", "ResNet-50 training, Bow Pod256, GBS 10,240", 421575, "images/s",
        _resnet_train("bow-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("B3", "GCN-P B3", "ResNet-50 training, Bow Pod256, GBS 10,240", 425514, "images/s",
        _resnet_train("bow-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("configuration inferred by the doc from MLPerf v1.1's POD256 config [U]", "lars", "resnet-recompute",
         "tf1-calls", "bn-span")),
    Row("B13", "GCN-S30 B13", "ResNet-50 training, Bow Pod16, GBS 3,520 (TF1)", 44059, "images/s",
        _resnet_train("bow-pod16", 16, 22, 10, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("B14", "GCN-S30 B14", "ResNet-50 training, Bow Pod16, GBS 16,416 (PyTorch)", 37061, "images/s",
        _resnet_train("bow-pod16", 16, 18, 57, 0.16, pytorch=True), True,
        ("sgd_combined is momentum SGD with the velocity as the gradient accumulator (train.py: "
         "use_combined_accum=True)", "recomputation: a checkpoint after every block (the config names "
        "35 checkpoint tensors)", "the table says GBS 16,384 [U]")),
    Row("B15", "GCN-S30 B15", "ResNet-50 training, Bow Pod64, GBS 5,120", 153205, "images/s",
        _resnet_train("bow-pod64", 64, 20, 4, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("B16", "GCN-S30 B16", "ResNet-50 training, Bow Pod256, GBS 10,240", 456906, "images/s",
        _resnet_train("bow-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    # BERT pre-training (unpacked), Bow Pod16 / Pod64
    Row("B10", "GCN-P B10", "BERT-Large Ph1 (SL128) PopART, Bow Pod16, mbs 8", 5179, "sequences/s",
        _bert_train("bert-large", "bow-pod16", 4, 8, 2048, [3, 7, 7, 7], _LARGE_AMP, attention_dropout=0.0,
                    embedding_serialization=5, split_qkv=True), True,
        ("bert-recompute", "attn-dropout", "emb-serial")),
    Row("B11", "GCN-P B11", "BERT-Large Ph1 (SL128) TF1, Bow Pod16", 5125, "sequences/s",
        _bert_train("bert-large", "bow-pod16", 4, 8, 2050, [3, 7, 7, 7], _LARGE_AMP, attention_dropout=0.0,
                    merged_collectives=("all_reduce",), tensorflow=True, tf1=True), True,
        ("TF1's Grouped pipeline schedule runs as PopART's pipeline cycles", "tf-copies", "bert-recompute",
         "attn-dropout", "tf-combine", "tf-stable-norm", "tf-clear-pass")),
    Row("B12", "GCN-P B12", "BERT-Large Ph1 (SL128) PopART, Bow Pod64, mbs 8", 19353, "sequences/s",
        _bert_train("bert-large", "bow-pod64", 16, 8, 512, [3, 7, 7, 7], _LARGE_AMP, attention_dropout=0.0,
                    embedding_serialization=5, split_qkv=True), False,
        ("RF 16 assumed by the doc, and the POD16 AMP (the POD64 config is missing) [U]", "bert-recompute",
         "attn-dropout", "emb-serial")),
    Row("B33", "GCN-S31 B33", "BERT-Large Ph1 (SL128) TF2, Bow Pod16", 4528, "sequences/s",
        _bert_train("bert-large", "bow-pod16", 4, 8, 2040, [3, 7, 7, 7], [0.10, 0.19, 0.20, 0.25], rts=False,
                    attention_dropout=0.0, merged_collectives=("all_reduce",), tensorflow=True),
        True, ("tf2", "tf-copies", "bert-recompute", "tf-combine")),
    Row("B44", "GCN-S31 B44", "BERT-Base Ph1 (SL128) PopART, Bow Pod16", 16391, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 32, 512, [0, 4, 4, 4], [0.28] * 4, attention_dropout=0.0,
                    embedding_serialization=5, split_qkv=True), True,
        ("IPU0 holds the embedding only (encoder_start_ipu 1)", "bert-recompute", "attn-dropout", "emb-serial")),
    Row("B45", "GCN-S31 B45", "BERT-Base Ph1 (SL128) TF2, Bow Pod16", 15157, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 32, 510, [0, 4, 4, 4], [0.28, 0.26, 0.28, 0.28], rts=False,
                    attention_dropout=0.0, merged_collectives=("all_reduce",), tensorflow=True),
        True, ("tf2", "tf-copies", "bert-recompute", "tf-combine")),
    Row("B46", "GCN-S33 B46", "BERT-Base Ph1 (SL128) PyTorch, Bow Pod16", 15911, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 32, 512, [0, 4, 4, 4], [0.25] * 4, vocab=30522, recompute=True,
                    attention_dropout=0.0, output_mode="Sum", pytorch=True),
        True, ("vocab, optimizer_state_offchip and recompute_checkpoint_every_layer as the PyTorch config",
               "pt-options", "pt-not-modelled")),
    Row("B47", "GCN-S33 B47", "BERT-Base Ph2 (SL512) PopART, Bow Pod16", 3656, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 8, 512, [0, 4, 4, 4], [0.28] * 4, seq_len=512, mask_tokens=76,
                    attention_dropout=0.0, embedding_serialization=5, split_qkv=True),
        True, ("bert-recompute", "attn-dropout", "emb-serial")),
    Row("B48", "GCN-S33 B48", "BERT-Base Ph2 (SL384) TF2, Bow Pod16", 4387, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 8, 510, [0, 4, 4, 4], [0.28, 0.26, 0.28, 0.28], seq_len=384,
                    mask_tokens=56, rts=False, attention_dropout=0.0,
                    merged_collectives=("all_reduce",), tensorflow=True),
        True, ("tf2", "tf-copies", "bert-recompute", "tf-combine")),
    # BERT-Large packed pre-training, MLPerf (PopART, SL512; throughput from the result logs)
    *[Row(rid, f"MLP v1.0 {rid}", f"BERT-Large MLPerf v1.0 {div}, packed SL512, Mk2 POD16", pub, "sequences/s",
          _packed_bert("ipu-pod16", 4, 2, 192, [0.20, 0.20, 0.25, 0.25], vocab=30400, layers_per_ipu=[3, 7, 7, 7],
                       off_chip=True, attention_dropout=0.0, embedding_serialization=5, split_qkv=True),
          rid in _ASSERTED_PACKED, _MLPERF + ("nsp", "emb-serial", "attn-dropout")
          + (("the open JSON sets GA 96; the log reports GA 192 and GBS 3072, used here [U]",) if div == "open" else ()))
      for rid, div, pub in (("M1", "closed", 1419), ("M2", "open", 1416))],
    *[Row(rid, f"MLP v1.0 {rid}", f"BERT-Large MLPerf v1.0 {div}, packed SL512, Mk2 POD64", pub, "sequences/s",
          _packed_bert("ipu-pod64", 8, 2, 96, [1.0] * 8, vocab=30400, layers_per_ipu=[0, 3, 3, 3, 3, 4, 4, 4],
                       attention_dropout=0.0, embedding_serialization=5),
          rid in _ASSERTED_PACKED, _MLPERF + ("IPU0 holds the embedding only (encoder_start_ipu 1)", "emb-serial", "attn-dropout"))
      for rid, div, pub in (("M3", "closed", 4241), ("M4", "open", 4243))],
    *[Row(rid, f"MLP v1.1 {rid}", f"BERT-Large MLPerf v1.1 {div}, packed SL512, Mk2 POD16, attention/FFN split",
          pub, "sequences/s", _packed_bert("ipu-pod16", 4, 2, 192, [0.23] * 4, att_ffn=_ATT_FFN_V11_POD16,
                                           off_chip=True, attention_dropout=0.0, clip_norm=clip,
                                           embedding_serialization=4, split_qkv=True,
                                           state_dtype=MLPERF_V11_LAMB_STATE),
          rid in _ASSERTED_PACKED,
          _MLPERF + ("att-ffn", "emb-serial", "attn-dropout") + ("clip",) * bool(clip))
      for rid, div, clip, pub in (("M7", "closed", 1.0, 1524), ("M8", "open", 0.0, 1527))],
    *[Row(rid, f"MLP v1.1 {rid}", f"BERT-Large MLPerf v1.1 {div}, packed SL512, Mk2 {pod.upper()}, attention/FFN "
          "split", pub, "sequences/s", _packed_bert(f"ipu-{pod}", rf, 2, 96, [0.20] + [0.25] * 7,
                                                      att_ffn=_ATT_FFN_V11_POD64, attention_dropout=0.0,
                                                      sharding_domain=8 if rf > 8 else 0, clip_norm=clip,
                                                      embedding_serialization=4,
                                                      state_dtype=MLPERF_V11_LAMB_STATE if rf == 16 else "float32"),
          rid in _ASSERTED_PACKED,
          _MLPERF + ("att-ffn", "emb-serial", "attn-dropout") + (("poprun-rts",) if rf == 16 else ())
          + ("clip",) * bool(clip))
      for rid, div, pod, rf, clip, pub in (("M9", "closed", "pod64", 8, 1.0, 4792),
                                           ("M10", "open", "pod64", 8, 0.0, 4896),
                                           ("M11", "closed", "pod128", 16, 100.0, 9028),
                                           ("M12", "open", "pod128", 16, 0.0, 9208))],
    *[Row(rid, f"MLP v2.0 {rid}", f"BERT-Large MLPerf v2.0, packed SL512, Bow {pod}, attention/FFN split", pub,
          "sequences/s", _packed_bert(f"bow-{pod.lower()}", rf, 3, ga, [1.0] * 8, att_ffn=_ATT_FFN_V20_POD64,
                                      prefetch_depth=3, merged_collectives=("all_reduce",),
                                      sharding_domain=8 if rf > 8 else 0, clip_norm=clip,
                                      embedding_serialization=4, state_dtype=MLPERF_V20_LAMB_STATE),
          rid in _ASSERTED_PACKED, _MLPERF + ("att-ffn", "nsp", "emb-serial",
                            "merge_collectives: bert.py sets mergeAllReduceCollectives (the LAMB norms' and the "
                            "shards' all-reduces; RTS reduce-scatters and all-gathers stay one per tensor, as "
                            "SDK 2.5 merges no others)", "clip") + (("poprun-rts",) if rf > 8 else ()))
      for rid, pod, rf, ga, clip, pub in (("M18", "Pod64", 8, 96, 1000.0, 7411), ("M19", "Pod128", 16, 64, 100.0, 12676),
                                          ("M20", "Pod256", 32, 36, 100.0, 19071))],
    Row("M17", "MLP v2.0 M17", "BERT-Large MLPerf v2.0, packed SL512, Bow Pod16, FP8 activation checkpoints", 2304,
        "sequences/s", _packed_bert("bow-pod16", 2, 3, 256, [0.3] * 8, att_ffn=_ATT_FFN_V20_POD16, prefetch_depth=3,
                                    merged_collectives=("all_reduce",), clip_norm=1000.0, checkpoint_dtype="float8",
                                    embedding_serialization=4, state_dtype=MLPERF_V20_LAMB_STATE),
        True, _MLPERF + ("att-ffn", "fp8-checkpoints", "nsp", "emb-serial", "clip")),
    # BERT-Large packed pre-training, Graphcore's table (PopART and PyTorch examples, SDK 3.1-3.3)
    *[Row(rid, f"GCN-S31 {rid}", f"BERT-Large Ph1 packed (SL128) PopART, Bow {pod}", pub, "sequences/s",
          _packed_bert(f"bow-{pod.lower()}", rf, 8, ga, _LARGE_AMP, seq_len=128, mask_tokens=22, vocab=30400,
                       packing_factor=1.17, layers_per_ipu=[3, 7, 7, 7], off_chip=True, attention_dropout=0.0,
                       embedding_serialization=5, split_qkv=True), rid in _ASSERTED_PACKED,
          ("packed", "packing factor 1.17 (the PyTorch config's at SL128): PopART counts the real sequences of "
           "each pack, the dataset's factor is not stated [U]", "nsp", "emb-serial", "attn-dropout"))
      for rid, pod, rf, ga, pub in (("B32", "Pod16", 4, 1712, 6044), ("B35", "Pod64", 16, 428, 22759))],
    *[Row(rid, f"GCN-S31 {rid}", f"BERT-Large Ph2 packed (SL512) PopART, Bow {pod}", pub, "sequences/s",
          _packed_bert(f"bow-{pod.lower()}", rf, 2, ga, [0.16, 0.21, 0.21, 0.21], vocab=30400,
                       layers_per_ipu=[3, 7, 7, 7], off_chip=True, attention_dropout=0.0,
                       embedding_serialization=5, split_qkv=True), rid in _ASSERTED_PACKED,
          ("packed", "packing factor 2.0 (the PyTorch config's at SL512); the table's GBS of 9,600 packs against "
           "16,384 unpacked suggests about 1.7 for this dataset [U]", "nsp", "emb-serial", "attn-dropout"))
      for rid, pod, rf, ga, pub in (("B38", "Pod16", 4, 1200, 2126), ("B40", "Pod64", 16, 300, 7789))],
    *[Row(rid, f"GCN-S31 {rid}", f"BERT-Large Ph{1 if sl == 128 else 2} packed (SL{sl}) PyTorch, Bow {pod}", pub,
          "sequences/s", _packed_bert(f"bow-{pod.lower()}", rf, mbs, ga, amp, seq_len=sl, mask_tokens=mt + 2,
                                      vocab=30522, packing_factor=pf, layers_per_ipu=[3, 7, 7, 7], off_chip=True,
                                      attention_dropout=0.0, output_mode="Sum", pytorch=True,
                                      embedding_serialization=2),
          rid in _ASSERTED_PACKED, ("packed", f"packing factor {pf} (the config's packing_factor; its GA is ceil(GA / {pf}))",
                  f"mask_tokens {mt} + 2 (run_pretraining.py:61-62 adds max_sequences_per_pack - 1 for packed data)",
                  "pt-gather", "nsp", "emb-serial", "pt-options", "pt-not-modelled")
          + (("pt-pod64",) if pod == "Pod64" else ()))
      for rid, sl, pod, rf, mbs, ga, amp, mt, pf, pub in (
          ("B34", 128, "Pod16", 4, 8, 1751, _LARGE_AMP, 20, 1.17, 5592),
          ("B37", 128, "Pod64", 16, 8, 438, [0.14, 0.19, 0.19, 0.19], 20, 1.17, 18494),
          ("B39", 512, "Pod16", 4, 2, 1024, [0.10, 0.15, 0.15, 0.15], 76, 2.0, 1969),
          ("B41", 512, "Pod64", 16, 2, 256, [0.13, 0.19, 0.19, 0.19], 76, 2.0, 6510))],
    # BERT-Large SQuAD fine-tuning, Bow Pod16 (8-IPU pipeline, 2 replicas)
    Row("B42", "GCN-S31 B42", "BERT-Large SQuAD v1.1 fine-tuning (SL384) PopART, Bow Pod16", 1183, "sequences/s",
        _squad_train(2, 30400, 4, _SQUAD_POPART_AMP, "adam"), False, ("squad-popart", "bert-recompute")),
    Row("B43", "GCN-S31 B43", "BERT-Large SQuAD fine-tuning (SL384) PyTorch, Bow Pod16", 989, "sequences/s",
        _squad_train(2, 30522, 2, _SQUAD_PYTORCH_AMP, "adamw", attention_dropout=0.15, output_mode="All",
                     pytorch=True), False,
        ("attention_probs_dropout_prob 0.15 and outputMode All (run_squad.py:51: the loss and both logits come "
         "back every micro-batch) as the source", "pt-not-modelled", "pt-squad", "per-call",
         "GCN-S33 gives 1,009 sequences/s for the same config")),
    # the same fine-tuning as Graphcore's PopTorch tutorial runs it on an IPU-POD16 (its own step timer)
    Row("T1", "TU T1", "BERT-Large SQuAD v1.1 fine-tuning (SL384), Graphcore's PopTorch tutorial, IPU-POD16, GBS 256",
        576.474, "sequences/s", _tutorial_squad_train(), False, ("tutorial-squad", "per-call")),
    # BERT-Large SQuAD fine-tuning through optimum-graphcore's IPUTrainer
    Row("O1", "OG O1", "BERT-Large SQuAD v1.1 fine-tuning (SL384), optimum-graphcore IPUTrainer, IPU-POD16, "
        "GBS 256", 419, "samples/s", _optimum_squad_train(), False, ("optimum",)),
    # ResNet-50 PyTorch training over 2-16 replicas of ALCF's Bow Pod64 (argonne-lcf/ai-testbed-userdocs, SDK 3.0)
    *(Row(rid, f"ALCF {rid}", f"ResNet-50 training (PyTorch), {rf} Bow IPUs, {rf} replicas, real data", pub, "images/s",
          _resnet_train(system, rf, 18, 57, 0.16, pytorch=True, replicas_per_process=1), True,
          ("alcf-resnet", "sgd_combined is momentum SGD with the velocity as the gradient accumulator (train.py: "
           "use_combined_accum=True)"))
      for rid, rf, system, pub in (("A3", 2, "bow-2000", 4798.8), ("A4", 4, "bow-2000", 9959.8),
                                   ("A5", 8, "bow-pod16", 19865.3), ("A6", 16, "bow-pod16", 39057.4))),
    # the same config's 4-replica variant (resnet50-pod4) fed by one PopRun instance (argonne-lcf/user-guides)
    Row("A7", "ALCF A7", "ResNet-50 training (PyTorch), 4 Bow IPUs, 4 replicas fed by one host process, real data "
        "(SDK 3.3)", 8125.8, "images/s", _resnet_train("bow-2000", 4, 18, 228, 0.16, pytorch=True,
                                                        replicas_per_process=4), True,
        ("alcf-resnet-one", "sgd_combined is momentum SGD with the velocity as the gradient accumulator (train.py: "
         "use_combined_accum=True)")),
    # GPT-2 small pre-training, PyTorch, on 16 IPUs of ALCF's Bow Pod64 (argonne-lcf/user-guides)
    *(Row(rid, f"ALCF {rid}", f"GPT-2 small pre-training (SL1024), 16 Bow IPUs, GBS 8,192 (SDK {sdk})", pub,
          "samples/s", _gpt2_train("gpt2-small", [0, 4, 4, 4], [0.15] * 4, 4, 2048, rts=True), False, ("alcf-gpt2",))
      for rid, sdk, pub in (("A1", "3.1", 1064.4), ("A2", "3.3", 1058.8))),
    Row("O2", "OG O2", "12-layer transformer LM (width 768, SL128) trained through optimum-graphcore's IPUTrainer, "
        "IPU-POD16, GBS 256", 952, "samples/s", _optimum_lm_train(), False, ("optimum-lm",)),
    # EfficientNet-B4 G16 training, TF1 (graphcore/examples vision/cnns/tensorflow1/training)
    *[Row(rid, f"{src} {rid}", f"EfficientNet-B4 (G16) training, Bow {pod}", pub, "images/s",
          _effnet_train(f"bow-{pod.lower()}", rf, ga), True,
          ("effnet", "lars", "tf-combine", "tf-copies", "tf-stable-norm") + (("effnet-pod256",) if rf == 128 else ()))
      for rid, src, pod, rf, ga, pub in (("B4", "GCN-P", "Pod16", 8, 256, 8936), ("B5", "GCN-P", "Pod64", 32, 64, 34943),
                                         ("B6", "GCN-P", "Pod256", 128, 16, 117641),
                                         ("B17", "GCN-S30", "Pod16", 8, 256, 9000),
                                         ("B19", "GCN-S30", "Pod64", 32, 64, 34140),
                                         ("B20", "GCN-S30", "Pod256", 128, 16, 122665))],
    # ResNeXt-101 32x4d training, TF1 (graphcore/examples vision/cnns/tensorflow1/training)
    *[Row(rid, f"{src} {rid}", "ResNeXt-101 32x4d training, Bow Pod16, GBS 768", pub, "images/s",
          _resnext_train(io_tiles), True, ("resnext", "tf-combine", "tf-copies", "tf-stable-norm"))
      for rid, src, pub, io_tiles in (("B7", "GCN-P", 12221, 0), ("B21", "GCN-S30", 12277, TF1_CNN_IO_TILES))],
    # ViT-B/16 training, PyTorch (graphcore/examples vision/vit/pytorch, SDK 3.0)
    Row("B22", "GCN-S30 B22", "ViT-B/16 pre-training (LAMB, mixup, 8-bit images), Bow Pod16", 7615, "images/s",
        _vit_train("bow-pod16", 4, 2048, pretrain=True), False, ("vit-pretrain", "vit-not-modelled")),
    Row("B23", "GCN-S30 B23", "ViT-B/16 pre-training (LAMB, mixup, 8-bit images), Bow Pod64", 27868, "images/s",
        _vit_train("bow-pod64", 16, 512, pretrain=True, sharding_domain=2), False,
        ("vit-pretrain", "vit-not-modelled", "vit-pod64")),
    Row("B24", "GCN-S30 B24", "ViT-B/16 fine-tuning (SGD, fp16 images), Bow Pod16", 7319, "images/s",
        _vit_train("bow-pod16", 4, 30, pretrain=False), True, ("vit-not-modelled",)),
    # Swin training, PyTorch (graphcore/examples vision/swin/pytorch, SDK 3.0)
    Row("B28", "GCN-S30 B28", "Swin-Tiny pre-training fp32, Bow Pod16, GBS 1,024", 3779, "images/s",
        _swin_train(tiny=True), True, ("swin",)),
    Row("B29", "GCN-S30 B29", "Swin-Large fine-tuning fp16, Bow Pod16, GBS 8,196", 3279, "images/s",
        _swin_train(tiny=False), True, ("swin",)),
    # U-Net training, TensorFlow 2 (graphcore/examples vision/unet_medical/tensorflow2)
    Row("B30", "GCN-S30 B30", "U-Net (medical segmentation) training, Bow-2000, GBS 24", 151, "images/s",
        _unet_train(), False, ("unet", "tf-copies")),
    # Conformer-medium training, PyTorch (graphcore/examples speech/conformer/pytorch README, global batch 16,128)
    *(Row(f"C{i}", f"EX-CF C{i}", f"Conformer-medium training, {label}, GBS 16,128", pub, "samples/s",
          _conformer_train(system, rf, 16128 // (4 * rf), 4 if rf == 16 else 1), False, ("conformer",) + extra)
      for i, (label, system, rf, pub, extra) in enumerate((
          ("IPU-M2000 (POD4)", "ipu-m2000", 1, 819, ("conformer-pod4",)),
          ("Mk2 POD16", "ipu-pod16", 4, 3163, ()),
          ("Mk2 POD64", "ipu-pod64", 16, 11689, ("conformer-pod64",)),
          ("Bow-2000 (POD4)", "bow-2000", 1, 1126, ("conformer-pod4",)),
          ("Bow Pod16", "bow-pod16", 4, 4302, ()),
          ("Bow Pod64", "bow-pod64", 16, 15815, ("conformer-pod64",))), start=1)),
    # BERT SQuAD inference, one IPU (PopRT)
    Row("I7 bs16", "RT I7 bs16", "BERT-Base SQuAD inference fp16 (SL128), batch 16", 4817, "sequences/s",
        _squad_infer("bert-base", 16, 128, 64, amp=0.4, benchmark_options=True), True,
        ("poprt-bert", "batches per step 64: the script's default (the README's command gives none)")),
    Row("I7 bs128", "RT I7 bs128", "BERT-Base SQuAD inference fp16 (SL128), batch 128", 5672, "sequences/s",
        _squad_infer("bert-base", 128, 128, 64, amp=0.4, benchmark_options=True, fp32_ops=("layernorm", "gelu")), True,
        ("poprt-bert", "batches per step 64: the script's default (the README's command gives none)",
         "poprt-bert-fp32")),
    Row("I9", "RT I9", "BERT-Large SQuAD-head inference fp16 (SL128), batch 18, 256 batches per step", 1473,
        "sequences/s", _squad_infer("bert-large", 18, 128, 256, amp=0.15, benchmark_options=True), True,
        ("poprt-bert", "bert-large-uncased with the question-answering head (untrained head), outlining on "
         "at threshold 10 (run at PopART's 1.0: the same calls, sim/compiler/outlining.py)")),
    *[Row(f"I11 bs{bs}", f"RT I11 bs{bs}", f"BERT-Base SQuAD inference fp16 (SL256, bertsquad-12), batch {bs}",
          pub, "sequences/s", _squad_infer("bert-base", bs, 256, 1, io_tiles=32, fp32_ops=("layernorm", "gelu")),
          False, ("poprt-i11",))
      for bs, pub in _I11.items()],
    # ResNet-50 inference, one IPU (PopRT)
    *[Row(f"I1 bs{bs}", f"RT I1 bs{bs}", f"ResNet-50 inference fp16, batch {bs}, synthetic data", pub,
          "images/s", _resnet_infer(bs, synthetic=True), bs in _ASSERTED_I1, ("poprt", "poprt-bps"))
      for bs, pub in _I1.items()],
    *[Row(f"I2 bs{bs}", f"RT I2 bs{bs}", f"ResNet-50 inference fp16, batch {bs}, real data, overlapped IO",
          pub, "images/s", _resnet_infer(bs), bs in _ASSERTED_I2, ("poprt", "poprt-bps", "poprt-depth-readme"))
      for bs, pub in _I2.items()],
    *[Row(f"I3 bs{bs}", f"RT I3 bs{bs}", f"ResNet-50 inference fp32, batch {bs}, synthetic data", pub,
          "images/s", _resnet_infer(bs, "float32", synthetic=True), bs in _ASSERTED_I3, ("poprt", "poprt-bps"))
      for bs, pub in _I3.items()],
    *[Row(f"I4 bs{bs}", f"RT I4 bs{bs}", f"ResNet-50 inference FP8 (stem conv and classifier fp16), batch {bs}, "
          "synthetic data", pub, "images/s", _resnet_infer(bs, synthetic=True, fp8=True), True,
          ("poprt", "poprt-bps", "poprt-fp8")) for bs, pub in _I4.items()],
    *[Row(f"I12 bs{bs}", f"RT I12 bs{bs}", f"ResNet-50 inference FP8 (stem conv and classifier fp16), batch {bs}, "
          "real data, overlapped IO", pub, "images/s", _resnet_infer(bs, fp8=True), bs in _ASSERTED_I12,
          ("poprt", "poprt-bps", "poprt-fp8", "poprt-depth-readme", "poprt-fp8-io")) for bs, pub in _I12.items()],
    Row("I5", "RT I5", "ResNet-50 inference fp16, batch 80, 128 batches per step, overlapped IO", 15541,
        "images/s", _resnet_infer(80, device_iterations=128), True,
        ("poprt", "poprt-depth")),
    # ViT-B/16 inference, one IPU (PopRT)
    *[Row(f"I13 bs{bs}", f"RT I13 bs{bs}", f"ViT-B/16 inference fp16, batch {bs}, 128 batches per step, overlapped IO",
          pub, "images/s", _vit_infer(bs), bs == 8, ("poprt-vit",))
      for bs, pub in _I13.items()],
    # Swin-T inference, one IPU (PopRT)
    Row("I14", "RT I14", "Swin-T inference fp16, batch 24, 128 batches per step, overlapped IO", 6802, "images/s",
        _swin_infer(24), True, ("poprt-swin",)),
    # ByteMLPerf's IPU backend on one C600 (PopRT)
    *[Row(f"I17 bs{bs}", f"BM I17 bs{bs}", f"ResNet-50 inference fp16, batch {bs}, fp16 images, 4 client threads",
          pub, "images/s", _bytemlperf_resnet(bs), asserted, ("bytemlperf",) + (("bytemlperf-io",) if bs > 4 else ()))
      for bs, pub, asserted in ((4, 7062, True), (32, 13542, False))],
    *[Row(f"I18 bs{bs}", f"BM I18 bs{bs}", f"ResNet-50 inference FP8, batch {bs}, fp16 images, 4 client threads",
          pub, "images/s", _bytemlperf_resnet(bs, fp8=True), asserted,
          ("bytemlperf", "bytemlperf-fp8") + (("bytemlperf-io",) if bs > 4 else ()))
      for bs, pub, asserted in ((4, 7966, True), (32, 18851, False))],
    Row("I19", "BM I19", "Swin-L inference fp16 (384 x 384, window 12), batch 2, 4 client threads", 315, "images/s",
        _bytemlperf_swin_large(2), True, ("bytemlperf", "bytemlperf-swin")),
    Row("I19 fp8", "BM I19 fp8", "Swin-L inference FP8 (384 x 384, window 12), batch 4, 4 client threads", 480,
        "images/s", _bytemlperf_swin_large(4, fp8=True), True,
        ("bytemlperf", "bytemlperf-swin", "bytemlperf-swin-fp8")),
    # CLIP ViT-B/32 inference, one IPU (PopRT)
    *[Row(f"I22 bs{bs}", f"RT I22 bs{bs}", f"CLIP ViT-B/32 inference fp16, batch {bs} against 100 texts, 128 batches "
          "per step", pub, "images/s", _clip_infer(bs), True, ("poprt-clip",))
      for bs, pub in ((32, 2814.468), (56, 4076.631))],
    *[Row(f"I23 bs{bs}", f"RT I23 bs{bs}", f"RoFormer-V2 small sequence classification fp16 (SL128), batch {bs}, "
          "1 batch per step", pub, "sequences/s", _roformer_infer(bs), bs != 1, ("poprt-roformer",))
      for bs, pub in _I23.items()],
    *[Row(f"I24 bs{bs}", f"BM I24 bs{bs}", f"Stable Diffusion's CLIP text encoder (ViT-L/14, 77 tokens) fp16, "
          f"batch {bs}, 128 batches per step, 3 client threads", pub, "sequences/s", _bytemlperf_clip_text(bs),
          bs == 40, ("bytemlperf", "bytemlperf-clip")) for bs, pub in ((4, 2674), (40, 7305))],
    # sentence embeddings, 4 IPUs (optimum-graphcore's text-embeddings notebook)
    Row("I15", "OG I15", "E5-large (BERT-Large encoder) sentence embeddings fp16 (SL512), batch 2, 256 per step, "
        "4 replicas", 865, "sequences/s", _e5_infer(), True,
        ("the notebook names neither the IPU (Mk2 or Bow: 1,472 tiles) nor the partials type: IPU-M2000 and half "
         "partials assumed [U]; with float partials the simulator gives 517, on a Bow-2000 1,136 (half) [U]; "
         "timed around each call of 2,048 sequences, the host's tokenised batches already made",)),
    # GPT2-XL greedy generation on 8 Mk2 IPUs, one after another (PopTransformer)
    *[Row(f"I16 bs{bs}", f"PT I16 bs{bs}", f"GPT2-XL greedy decode with a KV cache of 264, batch {bs}, 8 Mk2 IPUs "
          "sharded (PopTransformer)", pub, "tokens/s", _gpt2_decode(bs), bs != 1, ("poptransformer",))
      for bs, pub in _I16.items()],
    # the same on 8 C600 cards (PopTransformer's benchmark.md, first table)
    *[Row(f"I16c bs{bs}", f"PT I16c bs{bs}", f"GPT2-XL greedy decode with a KV cache of 264, batch {bs}, 8 C600 "
          "cards sharded (PopTransformer)", pub, "tokens/s", _gpt2_decode(bs, "c600-x8"), True,
          ("poptransformer", "poptransformer-c600"))
      for bs, pub in _I16C.items()],
    Row("I6", "RT I6", "ResNet-50 inference fp16, batch 1, 1 batch per step (low latency)", 3119, "images/s",
        _resnet_infer(1, device_iterations=1, io_tiles=0), True,
        ("poprt", "poprt-depth", "no IO tiles (no --enable_overlapio)", "the README's --eightbitio flag "
        "is not in the script: 8-bit input as the doc says [U]")),
]
#: rows tracked when added (outside 30 %, or within it by under 5 points) that model changes have since
#: brought within 25 % (reports of 2026-11-29; I13 bs32, +26.4 -> +19.2 %, of 2026-11-30; I16 bs1, -22.6 %,
#: of 2026-12-01; M18, +24.9 -> +24.7 %, of 2026-12-02; A1 and A2, +37 -> -3 %, of 2026-12-05: the loss over slices of
#: the LM head's rows, of 2026-12-07; I17 bs32, -30.5 -> -15.6 %: a buffering depth of N is N buffers ahead); asserted
#: at 30 % from then on like the rows added within it, so a change that loses the
#: gain fails tests/test_calibration.py. The rows between 25 and 30 % stay tracked: too near the edge for a guard.
PROMOTED = frozenset(("M1", "M2", "M7", "M8", "M25", "M26", "B3", "B12", "B16", "B30", "B34", "B37", "B40",
                      "B42", "B43", "I12 bs64", "I12 bs90", "I12 bs96", "I13 bs32", "I16 bs1", "M18", "A1", "A2",
                      "I17 bs32"))
PUBLISHED_ROWS = [replace(r, asserted=True) if r.id in PROMOTED else r for r in PUBLISHED_ROWS]
PUBLISHED_BY_ID = {r.id: r for r in PUBLISHED_ROWS}


@dataclass(frozen=True)
class MemoryPoint:
    """A batch size at which PopRT reports out of memory (reported, not asserted)."""

    id: str
    source: str
    what: str
    setup: Setup
    unit: str  # of its throughput, were it to fit
    ran: tuple[str, ...]  # rows that ran on hardware beside it (a smaller batch; the same batch otherwise):
    #                       PUBLISHED_BY_ID ids, or memory_fits.MEMORY_FITS ids


MEMORY_POINTS = [
    MemoryPoint("I2 bs96", "RT I2", "ResNet-50 inference fp16, batch 96, real data, overlapped IO", _resnet_infer(96),
                "images/s", ("I2 bs90", "I1 bs96")),
    MemoryPoint("I3 bs32", "RT I3", "ResNet-50 inference fp32, batch 32, synthetic data",
                _resnet_infer(32, "float32", synthetic=True), "images/s", ("I3 bs16",)),
    # RT examples/bert README: its bert_fp16 row (I11) runs batch 16 and is oom at 32; its bert_fp32 row (the
    # unconverted model) runs batch 2 (525 sequences/s) and is oom at 4
    MemoryPoint("I11 bs32", "RT I11", "BERT-Base SQuAD inference fp16 (SL256, bertsquad-12), batch 32",
                _squad_infer("bert-base", 32, 256, 1, io_tiles=32, fp32_ops=("layernorm", "gelu")), "sequences/s",
                ("I11 bs16",)),
    MemoryPoint("I11 fp32 bs4", "RT I11", "BERT-Base SQuAD inference fp32 (SL256, bertsquad-12), batch 4",
                _squad_infer("bert-base", 4, 256, 1, io_tiles=32, dtype="float32"), "sequences/s",
                ("RT I11 fp32 bs2",)),
]

# Rows of PUBLISHED the zoo cannot run as measured yet, and why (listed, never faked).
NOT_EXPRESSIBLE = [
    ("M21, M22", "BERT-Large MLPerf v2.0, PaddlePaddle", "configuration not extracted (mbs, RF, placement unknown)"),
    ("M27", "RNN-T MLPerf v2.0", "no RNN-T / LSTM model in the zoo"),
    ("B18", "EfficientNet-B4 (G16-GN), PyTorch, Bow Pod16", "the measured configuration is unknown: the "
     "table's GBS 1,024 and precision 16.32 are not the PyTorch config's (GBS 2,048, 16.16)"),
    ("B8", "ViT (B/16?), pre-SDK 2.5, Bow Pod64", "the measured configuration is unknown (31,200 images/s, "
     "above the SDK 3.0 pre-training row B23: another task or configuration)"),
    ("B9, B25, B26, B31", "Mini DALL-E, DINO", "not in the zoo"),
    ("B27", "Swin-Base, Bow Pod16", "the measured configuration is unknown: the table's GBS 512 is none of the "
     "port's Swin-Base configs (SWIN_BASE_LINEAR and SWIN_BASE_384: GBS 1,024)"),
    ("B36", "BERT-Large Ph1 TF2, Bow Pod64", "the measured configuration is unknown (the table's GA 520 is not "
     "the repo's 1020)"),
    ("I20", "ByteMLPerf's BERT-Base, ALBERT, RoBERTa and DeBERTa SQuAD inference (C600)", "run through PopRT's "
     "PackRunner (pack_config: requests of random lengths around 172 tokens packed at run time), as I8 and I10"),
    ("I21", "ByteMLPerf's Conformer encoder, CLIP, VideoBERT, RoFormer, Wide & Deep (C600)", "not in the zoo (the "
     "Conformer encoder takes a (3, 64, 512) input of an architecture its report does not describe)"),
    ("I8, I10", "BERT inference, packed (PopRT)", "PopRT's PackRunner packs queued host requests at run time "
     "(first fit, up to max_valid_num 40 / 64 sequences per batch) of random lengths (normal around "
     "--avg_seq_len, clipped), so the sequences per pack are neither fixed nor published; the throughput is "
     "requests over wall time of asynchronous host calls; and the model is the SQuAD span head (I7, I9)"),
    ("H1-H4", "small CNN training, host IO tutorial",
     "not in the zoo (conv + GroupNorm fp32 CNN); hardware not stated"),
    ("U1-U3", "gc-flops, gc-hosttraffictest, gc-iputraffictest", "microbenchmarks, not end to end (U2, U3 are "
     "calibration checks above)"),
]
