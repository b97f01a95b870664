"""The workloads of the published measurements: :class:`Setup` (a zoo model, the system and the
PopTorch options a source's configuration sets) and the builders that configure one model family as
Graphcore's examples, MLPerf submissions or PopRT benchmarks run it (``_resnet_train``,
``_bert_train``, ``_packed_bert``, ``_vit_train``, ``_swin_train``, ``_gpt2_train``, ...), with the
constants they share (:data:`TF1_PREFETCH_DEPTH`, :data:`TF1_RESNET_CHECKPOINTS`,
:func:`tf1_steps_per_call`, :func:`pytorch_bert_groups`, ...). Nothing here is simulated."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import models

from ..graph.training import Optimizer
from ..options import (RECOMPUTATION_TYPES, CommGroupType, Options, OutputMode, OverlapMode, PipelineCopies,
                       TensorLocationSettings)
from ..strategy import AutoStage, ShardedExecution


def _params(**params) -> tuple:
    """Model parameters as a hashable tuple (lists become tuples)."""
    def frozen(v):  # nested lists too (att_ffn_placement)
        return tuple(frozen(x) for x in v) if isinstance(v, (list, tuple)) else v
    return tuple((k, frozen(v)) for k, v in params.items())


def _show(value) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Setup:
    """A zoo model run as a published measurement was: the model's parameters, the system, and the
    PopTorch options the source's configuration sets."""

    model: str
    params: tuple  # (name, value) pairs for models.get (see _params)
    system: str
    replicas: int = 1  # replicationFactor
    accumulation: int = 1  # Training.gradientAccumulation
    device_iterations: int = 1
    amp: tuple = ()  # availableMemoryProportion of IPU0, IPU1, ... of one replica
    half_partials: bool = True  # Precision.setPartialsType("half")
    optimizer_off_chip: bool = False  # optimizer state in streaming memory
    rts: bool = False  # optimizer state sharded over the replicas
    training: bool = True
    optimizer: str = "sgd"
    state_dtype: str | tuple = "float32"  # Optimizer.state_dtype: one dtype, or one per state (m, v)
    synthetic: bool = False  # enableSyntheticData: no host IO
    io_tiles: int = 0  # TensorLocations.numIOTiles
    overlap_io: bool = False  # every host stream overlapped (OverlapDeviceIterationLoop); ShardedExecution unless TF's
    sharded: bool = False  # ShardedExecution(AutoStage.AutoIncrement): the IPUs run one after another, no pipeline
    prefetch_depth: int = 1  # _Popart defaultPrefetchBufferingDepth
    output_mode: str = ""  # outputMode as an OutputMode member name ("All", "Sum", ...); "": the default
    merged_collectives: tuple = ()  # collective kinds merged into one call ("all_reduce", ...): PopART's
    # replicatedCollectivesSettings, or graphcore/tensorflow combining them (maximum_*_buffer_size)
    sharding_domain: int = 0  # RTS over groups of this many consecutive replicas (PopART's shardingDomain); 0: all
    accum_dtype: str = ""  # the gradient accumulators' dtype (PopTorch accum_type, PopART accumType); "": the weights'
    clip_norm: float = 0.0  # gradients clipped to this global norm (PopART ClipNormSettings, max_grad_norm); 0: none
    pytorch_bert_groups: bool = False  # the parameter groups of Graphcore's PyTorch BERT (pytorch_bert_groups)
    poplin_options: tuple = ()  # (name, value) pairs set in PopART's matmulOptions and convolutionOptions
    auto_loss_scaling: bool = False  # Training.setAutomaticLossScaling(True)
    per_stage_copies: bool = False  # a TensorFlow pipeline: each stage's inter-IPU copies one after another
    graph_functions: bool = False  # TensorFlow's cached graph functions' copies (Options.cachedGraphFunctions)
    poprt: bool = False  # run by PopRT's runtime (its own host streams: Options.stepIOCallbacks off)
    stable_norm: bool = False  # enableStableNorm (TensorFlow's norms.use_stable_statistics)
    non_stable_softmax: bool = False  # PopART's enableNonStableSoftmax (PopRT's enable_non_stable_softmax)
    clear_pass_type: bool = False  # enableFullyConnectedPass off (TensorFlow's matmuls.clear_pass_type)
    combined_accum: bool = False  # momentum SGD's velocity as the gradient accumulator (SGD use_combined_accum)
    processes: int = 1  # host processes (PopRun instances) feeding the replicas, each one callback thread
    # (schedule, excluded IPUs) of PopART's accumulateOuterFragmentSettings as the source sets them (the
    # weight update's schedule across a replica's IPUs); (): PopART's default, Serial
    outer_fragment: tuple = ()
    just_in_time: bool = False  # PopART's subgraphCopyingStrategy JustInTime (outlined calls' copies next to their ops)
    outlining: bool = True  # PopART's enableOutlining (False: no op sequence becomes a call of a shared subgraph)
    outline_threshold: float = 0.0  # PopART's outlineThreshold (PopRT's outline_threshold); 0: PopART's default
    # PopART's TiedGather and TiedGatherAccumulate patterns (Graphcore's PyTorch BERT and GPT-2 ipu_options.py
    # setPatterns; PopART's bert.py through its custom patterns): a tied embedding's rows added into its accumulator
    tied_gather: bool = False
    # PopART's autoRecomputation (RecomputationType number) and explicitRecomputation as the source sets them
    # for a model that is not pipelined; -1: not set (PopTorch's default: None)
    auto_recomputation: int = -1
    explicit_recomputation: bool = False

    def graph(self):
        g = models.get(self.model, **{k: list(v) if isinstance(v, tuple) else v for k, v in self.params})
        if self.overlap_io:  # as poptorch.set_overlap_for_input/output in the user's model
            for name in [*g.inputs, *g.outputs]:
                g.overlap[name] = int(OverlapMode.OverlapDeviceIterationLoop)
        return g

    def options(self) -> Options:
        o = Options().replicationFactor(self.replicas).deviceIterations(self.device_iterations)
        if self.accumulation > 1:
            o.Training.gradientAccumulation(self.accumulation)
        if self.half_partials:
            o.Precision.setPartialsType("half")
        if self.amp:
            o.setAvailableMemoryProportion({f"IPU{i}": p for i, p in enumerate(self.amp)})
        if self.optimizer_off_chip or self.rts:
            o.TensorLocations.setOptimizerLocation(
                TensorLocationSettings().useOnChipStorage(not self.optimizer_off_chip)
                .useReplicatedTensorSharding(self.rts))
        if self.synthetic:
            o.enableSyntheticData(True)
        if self.io_tiles:
            o.TensorLocations.numIOTiles(self.io_tiles)
        if self.overlap_io and not self.graph_functions:  # PopTorch's condition; TensorFlow's pipelines overlap too
            o.setExecutionStrategy(ShardedExecution())
        if self.sharded:
            o.setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
        if self.prefetch_depth > 1:
            o._Popart.set("defaultPrefetchBufferingDepth", self.prefetch_depth)
        if self.output_mode:
            o.outputMode(OutputMode[self.output_mode])
        for kind in self.merged_collectives:
            o._Popart.set(f"replicatedCollectivesSettings.{Options.MERGE_KEYS[kind]}", True)
        if self.sharding_domain:
            o._Popart.set(Options.SHARDING_DOMAIN_KEYS["optimizer"], (CommGroupType.Consecutive, self.sharding_domain))
        if self.poplin_options:
            o.set_poplin_options(dict(self.poplin_options))
        if self.auto_loss_scaling:
            o._Popart.set("automaticLossScalingSettings.enabled", True)
        if self.per_stage_copies:
            o.pipelineCopies(PipelineCopies.PerStage)
        if self.graph_functions:
            o.cachedGraphFunctions(True)
        if self.graph_functions or self.poprt:  # TensorFlow's infeeds, PopRT's runtime: not PopART's StepIO
            o.stepIOCallbacks(False)
        if self.stable_norm:
            o.enableStableNorm(True)
        if self.non_stable_softmax:
            o._Popart.set("enableNonStableSoftmax", True)
        if self.clear_pass_type:
            o._Popart.set("enableFullyConnectedPass", False)
        if self.processes > 1:
            o.hostProcesses(self.processes)
        if self.just_in_time:
            o._Popart.set("subgraphCopyingStrategy", "JustInTime")
        if not self.outlining:
            o._Popart.set("enableOutlining", False)
        if self.outline_threshold:
            o._Popart.set("outlineThreshold", self.outline_threshold)
        if self.tied_gather:
            o._Popart.set("patterns", {"TiedGather": True, "TiedGatherAccumulate": True})
        if self.outer_fragment:
            schedule_key, excluded_key = Options.OUTER_FRAGMENT_KEYS
            o._Popart.set(schedule_key, self.outer_fragment[0])
            o._Popart.set(excluded_key, [str(ipu) for ipu in self.outer_fragment[1]])
        if self.auto_recomputation >= 0:
            o._Popart.set("autoRecomputation", self.auto_recomputation)
        if self.explicit_recomputation:
            o._Popart.set("explicitRecomputation", True)
        return o

    def sim_optimizer(self) -> Optimizer | None:
        if not self.training:
            return None
        groups = _pytorch_bert_groups(self) if self.pytorch_bert_groups else {}
        return Optimizer(self.optimizer, self.state_dtype, self.accum_dtype or None, self.clip_norm or None,
                         combined_accum=self.combined_accum, **groups)

    def describe(self) -> str:
        parts = [f"`{self.system}`", f"`{self.model}` " + ", ".join(f"{k}={_show(v)}" for k, v in self.params)]
        if self.training:
            parts.append(f"training, RF {self.replicas}, GA {self.accumulation}")
        else:
            parts.append(f"inference, RF {self.replicas}, deviceIterations {self.device_iterations}")
        if self.amp:
            parts.append("AMP {" + ", ".join(f"IPU{i}: {p:g}" for i, p in enumerate(self.amp)) + "}")
        parts.append("half partials" if self.half_partials else "float partials")
        if self.training:
            where = ("off chip" if self.optimizer_off_chip else "on chip") + (" + RTS" if self.rts else "")
            if self.rts and self.sharding_domain:
                where += f" over groups of {self.sharding_domain} replicas"
            parts.append(f"{self.sim_optimizer().describe()}, optimizer state {where}"
                         + (", automatic loss scaling" if self.auto_loss_scaling else ""))
        parts.append("synthetic data" if self.synthetic else "real data (host IO" + (
            f", {self.processes} host processes)" if self.processes > 1 else ")"))
        if self.io_tiles:
            parts.append(f"{self.io_tiles} IO tiles" + (", all streams overlapped (ShardedExecution)"
                                                        if self.overlap_io else ""))
        if self.prefetch_depth > 1:
            parts.append(f"prefetch depth {self.prefetch_depth}")
        if self.output_mode:
            parts.append(f"outputMode {self.output_mode}")
        if self.merged_collectives:
            parts.append(" and ".join(k.replace("_", "-") + "s" for k in self.merged_collectives) + " merged")
        if self.sharded:
            parts.append("ShardedExecution")
        if self.per_stage_copies:
            parts.append("each stage's inter-IPU copies one after another (TensorFlow)")
        if self.graph_functions:
            parts.append("cached graph functions (TensorFlow)")
        if self.stable_norm:
            parts.append("enableStableNorm")
        if self.non_stable_softmax:
            parts.append("enableNonStableSoftmax")
        if self.clear_pass_type:
            parts.append("enableFullyConnectedPass off")
        if not self.outlining:
            parts.append("enableOutlining off")
        if self.poplin_options:
            parts.append("poplin options " + ", ".join(f"{k}={v}" for k, v in self.poplin_options))
        if self.auto_recomputation >= 0:
            parts.append(f"autoRecomputation {RECOMPUTATION_TYPES[self.auto_recomputation]}"
                         + (", explicitRecomputation" if self.explicit_recomputation else ""))
        return "; ".join(parts)


def pytorch_bert_groups(graph, optimizer: str) -> dict[str, tuple[str, ...]]:
    """The per-weight settings of Graphcore's PyTorch BERT optimizer (graphcore/examples
    nlp/bert/pytorch/optimization.py ``get_optimizer``, SDK 3.1 c0239af): biases without weight
    decay or LAMB's trust ratio (``max_weight_norm`` 0), other 1-D weights without weight decay,
    both made constant (``markAsConstant``). Hugging Face names a LayerNorm's beta ``bias``; the
    zoo names it ``beta``."""
    one_d = [w.name for w in graph.weights() if len(w.shape) == 1]
    biases = [n for n in one_d if n.endswith("bias") or n.endswith("/beta")]
    return {"no_weight_decay": tuple(one_d), "no_trust_ratio": tuple(biases) if optimizer == "lamb" else ()}


@lru_cache(maxsize=None)
def _pytorch_bert_groups(setup: Setup) -> dict[str, tuple[str, ...]]:
    return pytorch_bert_groups(setup.graph(), setup.optimizer)


#: host buffers of a TF1 infeed, as the simulator counts them (``defaultPrefetchBufferingDepth``):
#: graphcore/tensorflow's ``IPUConfig.optimizations.prefetch_data_streams`` is True by default
#: ("prefetching of data for data streams on the host will be overlapped with execution on the
#: IPU") and an ``IPUInfeedQueue``'s ``prefetch_depth`` defaults to 1 ("prefetches a single entry
#: after it has been read to refill the buffer"): the host fills the next buffer while the IPU
#: runs, the host link's transfer included. The simulator's depth 1 leaves that transfer on the
#: IPU's path (PopART's one prefetched buffer, sessionoptions.hpp enablePrefetchDatastreams), so
#: these rows run at depth 2, the host side two buffers ahead; the second buffer moves no TF1 row,
#: each paced by its IPUs (checked 2026-12-07, when depth N came to mean N buffers ahead, not
#: N - 1). The MLPerf ResNet-50 scripts (v1.0-v2.0
#: ``train.py``: ``IPUInfeedQueue(..., prefetch_depth=opts['prefetch_depth'])``, ``--prefetch-depth``
#: default None; ``ipu_utils.py`` leaves ``prefetch_data_streams`` alone) keep both defaults.
TF1_PREFETCH_DEPTH = 2

#: ImageNet's training images (``standard_imagenet``: Datasets/data.py ``NUM_IMAGES``)
IMAGENET_TRAIN_IMAGES = 1_281_167
#: ``logs_per_epoch`` of every ResNet-50 MLPerf config (MLPerf v1.0-v2.0 and examples 8ae588c
#: ``configs.yml``: ``mk2_resnet50_mlperf_pod16``, which the bs20 and LARS configs extend)
TF1_MLPERF_LOGS_PER_EPOCH = 5


def tf1_steps_per_call(global_batch: int, logs_per_epoch: int = TF1_MLPERF_LOGS_PER_EPOCH) -> int:
    """Weight updates the TF1 CNN ``train.py`` runs in one ``session.run`` (MLPerf v1.0-v2.0 and
    examples 8ae588c ``train_process``): ``iterations_per_epoch = images // global_batch``,
    ``log_freq = iterations_per_epoch // logs_per_epoch`` and ``iterations_per_step = log_freq``,
    as ``--batches-per-step`` (default 1000) is larger; the device loop repeats the step that often
    and the published throughput is an epoch's images over its time, 5 such calls."""
    return max(1, IMAGENET_TRAIN_IMAGES // global_batch // logs_per_epoch)


#: the recomputation checkpoints of the TF1 (MLPerf) ResNet-50 configs: configs.yml ``pipeline_splits``
#: [b1/0/relu, b1/2/relu, b2/0/relu, b2/2/relu, b3/0/relu, b3/3/relu] (v1.0 and v1.1 ``*_bs20`` and
#: ``*_lars``; v2.0 names them stage1/unit1 ... stage3/unit4) with ``shards: 1`` and
#: ``enable_recomputation``: seven pipeline stages on the replica's one IPU, of which graphcore/tensorflow's
#: PipelineRecomputation pass recomputes every forward stage "apart from the last one which does not need
#: recomputation" (passes/pipeline_recomputation.cc), so layer3/4 to the head keep their activations
TF1_RESNET_CHECKPOINTS = ("layer1/0", "layer1/2", "layer2/0", "layer2/2", "layer3/0", "layer3/3")


def _resnet_train(system: str, replicas: int, micro_batch: int, accumulation: int, amp: float,
                  optimizer: str = "sgd_momentum", pytorch: bool = False, tf1_calls: bool = False,
                  stable_norm: bool = False, replicas_per_process: int = 2) -> Setup:
    """ResNet-50 training as the TF1 (MLPerf) and PyTorch (``pytorch``) configs run it: 8-bit
    images, half partials, recomputation (TF1: :data:`TF1_RESNET_CHECKPOINTS`, every segment but the last
    recomputed, as PopART's RecomputeAll does without explicit recomputation; PyTorch: the config's checkpoints,
    ``"graphcore"``, and its ``recompute_mode: manual``, which sets RecomputeAll and
    explicitRecomputation: ``utils/ipu_settings.py`` ``train_settings``), momentum SGD (LARS in the MLPerf
    v1.1 and v2.0 configs; PyTorch: the CNN example's ``sgd_combined``, ``SGD(use_combined_accum=True)``, the
    velocity as the accumulator), one IPU per replica, real data. TF1: the host one input buffer ahead of
    the IPU as its infeeds run (:data:`TF1_PREFETCH_DEPTH`; PyTorch: depth 1), batch norm statistics over pairs of
    replicas (``BN_span: 2`` in every MLPerf ResNet-50 configs.yml, v1.0-v2.0: the zoo's
    ``bn_span``; PyTorch's batch norm is per replica), and the momentum in fp16 (precision 16.16:
    TF creates each optimizer slot in its weight's dtype). The gradient all-reduces are one call: TF1
    combines them up to ``max_cross_replica_buffer_size`` (50 MiB in the MLPerf v1.0-v2.0
    configs.yml, more than ResNet-50's 51.1 MB of fp16 gradients) and the PyTorch config merges them
    (examples 8ae588c ``vision/cnns/pytorch/utils/ipu_settings.py``: ``mergeAllReduceCollectives``).
    ``tf1_calls``: one simulated call runs the weight updates the TF1 script runs per
    ``session.run`` (:func:`tf1_steps_per_call`), as deviceIterations. ``stable_norm``: the MLPerf
    v1.0 configs' ``stable_norm: True`` ([stable-norm]). ``replicas_per_process``: the PopRun
    instances' replicas ([host-processes]: 2 in the MLPerf v1.1/v2.0 and examples' scripts, 4 in MLPerf
    v1.0's POD64)."""
    steps = tf1_steps_per_call(replicas * accumulation * micro_batch) if tf1_calls else 1
    params = dict(micro_batch=micro_batch,
                  recompute_checkpoints="graphcore" if pytorch else TF1_RESNET_CHECKPOINTS,
                  eight_bit_io=True)
    if not pytorch:
        params["bn_span"] = 2
    return Setup("resnet50", _params(**params), system, replicas=replicas, accumulation=accumulation,
                 auto_recomputation=4, explicit_recomputation=pytorch,
                 device_iterations=steps, amp=(amp,), optimizer=optimizer,
                 state_dtype="float32" if pytorch else "float16",
                 prefetch_depth=1 if pytorch else TF1_PREFETCH_DEPTH, merged_collectives=("all_reduce",),
                 stable_norm=stable_norm, combined_accum=pytorch and optimizer == "sgd_momentum",
                 processes=max(1, replicas // replicas_per_process), graph_functions=not pytorch)


def _resnet_e2e(system: str, replicas: int, global_batch: int, amp: float, micro_batch: int = 20,
                replicas_per_process: int = 2) -> Setup:
    """The end-to-end ResNet-50 checks' configuration (:func:`resnet50_training`): the examples repo's
    ``applications/tensorflow/cnns/training/configs.yml`` ``mk2_resnet50_mlperf_pod{16,64}_bs20``
    (SDK 2.4-2.5, 32fc7bd and 187775b, the Bow launch's; the MLPerf v1.0 configs without their
    ``stable_norm``): momentum SGD, the accumulation that makes ``global_batch``,
    ``available_memory_proportion`` ``amp`` (0.15 Pod16, 0.145 Pod64), and ``logs_per_epoch`` 5, so
    ``train.py`` runs ``log_freq`` weight updates per ``session.run`` (:func:`tf1_steps_per_call`)."""
    return _resnet_train(system, replicas, micro_batch, max(1, global_batch // (micro_batch * replicas)), amp,
                         tf1_calls=True, replicas_per_process=replicas_per_process)


#: accumulateOuterFragmentSettings as Graphcore's PyTorch examples set them ("Parallelize optimizer step
#: update across IPUs": nlp/bert/pytorch ipu_options.py, vision/vit/pytorch options.py): OverlapMemoryOptimized,
#: IPU 0 (the embeddings) left out; PopART's bert.py sets the same when the optimizer state is off chip and
#: replicated ("When not replicated SyncPattern.SinglePipeline will provide better overlap"), else leaves
#: PopART's Serial
OVERLAP_BUT_IPU0 = ("OverlapMemoryOptimized", (0,))
#: TensorFlow runs no PopART: its pipeline's resource update is not an accumulate outer fragment, and its
#: IPUs' updates are taken to run together, as before the schedule was modelled [U]
TF_RESOURCE_UPDATE = ("OverlapCycleOptimized", ())


def _popart_bert_fragment(off_chip: bool, replicas: int) -> tuple:
    """PopART bert.py's accumulateOuterFragmentSettings (bert_session_options): OverlapMemoryOptimized
    without IPU 0 for replicated runs with the optimizer state off chip, else PopART's default."""
    return OVERLAP_BUT_IPU0 if off_chip and replicas > 1 else ()


def _bert_train(model: str, system: str, replicas: int, micro_batch: int, accumulation: int,
                layers_per_ipu: list[int], amp: list[float], seq_len: int = 128, mask_tokens: int = 20,
                vocab: int = 30400, rts: bool = True, recompute: bool | None = None,
                attention_dropout: float | None = None, output_mode: str = "",
                merged_collectives: tuple = (), pytorch: bool = False, embedding_serialization: int = 1,
                tensorflow: bool = False, tf1: bool = False, split_qkv: bool = False) -> Setup:
    """BERT pre-training as Graphcore's configs run it: a 4-IPU pipeline, LAMB with the optimizer
    state off chip (with or without RTS), half partials, real data. ``attention_dropout`` and
    ``output_mode`` where the source sets them (the PyTorch configs: 0 and Sum); ``pytorch``: the
    PyTorch example's parameter groups (:func:`pytorch_bert_groups`) and its checkpoint on every layer,
    the last included (the zoo's ``checkpoint_last_layer``); ``embedding_serialization`` the
    config's vocabulary steps of the tied projection; ``tensorflow``: each stage's inter-IPU copies
    one after another ([tf-copies]); ``tf1``: the IPUConfig the TF1 BERT's ipu_utils.py sets for every
    run, stable norm statistics ([tf-stable-norm]) and the matmul pass type cleared ([tf-clear-pass]);
    the TF2 BERT sets neither; ``split_qkv``: the PopART config's three QKV weights (the zoo's
    ``split_qkv``)."""
    params = dict(micro_batch=micro_batch, seq_len=seq_len, layers_per_ipu=layers_per_ipu, vocab=vocab,
                  mask_tokens=mask_tokens)
    if pytorch:
        params["checkpoint_last_layer"] = True
    if embedding_serialization > 1:
        params["embedding_serialization"] = embedding_serialization
    if recompute is not None:
        params["recompute_checkpoint_every_layer"] = recompute
    if attention_dropout is not None:
        params["attention_dropout"] = attention_dropout
    if split_qkv:
        params["split_qkv"] = True
    return Setup(model, _params(**params), system, replicas=replicas, accumulation=accumulation,
                 amp=tuple(amp), optimizer="lamb", optimizer_off_chip=True, rts=rts, output_mode=output_mode,
                 merged_collectives=merged_collectives, pytorch_bert_groups=pytorch, per_stage_copies=tensorflow,
                 stable_norm=tf1, clear_pass_type=tf1, graph_functions=tensorflow,
                 outer_fragment=(TF_RESOURCE_UPDATE if tensorflow else
                                 OVERLAP_BUT_IPU0 if pytorch else _popart_bert_fragment(True, replicas)),
                 just_in_time=not tensorflow, tied_gather=not tensorflow)


def _resnet_infer(batch: int, dtype: str = "float16", synthetic: bool = False, device_iterations: int = 100,
                  io_tiles: int = 32, prefetch_depth: int = 2, fp8: bool = False, eight_bit_io: bool = True) -> Setup:
    """ResNet-50 inference as PopRT runs it on one C600 IPU: the classifier without labels or loss,
    batch norm folded into the convolutions (as the exported ONNX model has it), uint8 images
    normalised on the IPU (``eight_bit_io``; else images of the model's dtype), half partials in fp16, 32 IO
    tiles with every stream overlapped (real data) or synthetic data, streams buffered ``prefetch_depth`` deep
    (PopRT's benchmark scripts' stream_buffering_depth 2); ``fp8``: every convolution but the stem's in FP8."""
    params = dict(micro_batch=batch, eight_bit_io=eight_bit_io, with_loss=False, norm="folded")
    if dtype != "float16":
        params["dtype"] = dtype
    if fp8:
        params["fp8_convs"] = True
    return Setup("resnet50", _params(**params), "c600", poprt=True, device_iterations=device_iterations,
                 half_partials=dtype == "float16", training=False, synthetic=synthetic, io_tiles=io_tiles,
                 overlap_io=bool(io_tiles) and not synthetic, prefetch_depth=prefetch_depth)


def _packed_bert(system: str, replicas: int, micro_batch: int, accumulation: int, amp: list[float],
                 seq_len: int = 512, mask_tokens: int = 78, vocab: int = 30912, packing_factor: float = 2.0,
                 layers_per_ipu: list[int] | None = None, att_ffn: list | None = None, off_chip: bool = False,
                 model: str = "bert-large", prefetch_depth: int = 1, attention_dropout: float | None = None,
                 output_mode: str = "", merged_collectives: tuple = (), sharding_domain: int = 0,
                 clip_norm: float = 0.0, pytorch: bool = False, checkpoint_dtype: str | None = None,
                 embedding_serialization: int = 1, split_qkv: bool = False,
                 state_dtype: str | tuple = "float32") -> Setup:
    """Packed BERT pre-training as Graphcore's PopART (MLPerf, examples) and PyTorch configs run it:
    at most 3 sequences per pack, ``micro_batch`` packs per micro-batch, LAMB with the optimizer
    state sharded over the replicas (on or off chip), half partials, real data; gradients clipped to
    the global norm ``clip_norm`` (0: not clipped); ``pytorch``: the PyTorch example's parameter
    groups (:func:`pytorch_bert_groups`) and its checkpoint on every layer, the last included (the zoo's
    ``checkpoint_last_layer``). ``mask_tokens`` is
    the MLM positions per pack (PopART: the config's mask_tokens + 2); ``prefetch_depth`` is the
    script's ``defaultPrefetchBufferingDepth`` (3 in MLPerf v2.0's bert.py, unset before);
    ``sharding_domain`` the replicas of one poprun instance, over which bert.py shards the optimizer
    state when it runs under poprun (0: one process, sharded over all replicas); ``checkpoint_dtype``
    the config's ``activation_checkpoint_dtype`` ("float8": MLPerf v2.0 POD16's FLOAT8);
    ``embedding_serialization`` the config's vocabulary steps of the tied projection [emb-serial];
    ``split_qkv`` the PopART config's three QKV weights (the zoo's ``split_qkv``); ``state_dtype`` LAMB's
    two moments' dtype, or one per moment (MLPerf's ``lamb_m_dtype`` sets the first, ``lamb_accl_dtype``
    both: bert_optimizer.py accl1_type / accl2_type; fp32 when the config sets neither)."""
    params = dict(micro_batch=micro_batch, seq_len=seq_len, vocab=vocab, mask_tokens=mask_tokens,
                  max_sequences_per_pack=3, packing_factor=packing_factor)
    if pytorch:
        params["checkpoint_last_layer"] = True
    if split_qkv:
        params["split_qkv"] = True
    if embedding_serialization > 1:
        params["embedding_serialization"] = embedding_serialization
    if checkpoint_dtype is not None:
        params["checkpoint_dtype"] = checkpoint_dtype
    if att_ffn is not None:
        params["att_ffn_placement"] = att_ffn
    else:
        params["layers_per_ipu"] = layers_per_ipu
    if attention_dropout is not None:
        params["attention_dropout"] = attention_dropout
    return Setup(model, _params(**params), system, replicas=replicas, accumulation=accumulation, amp=tuple(amp),
                 optimizer="lamb", optimizer_off_chip=off_chip, rts=True, prefetch_depth=prefetch_depth,
                 output_mode=output_mode, merged_collectives=merged_collectives, sharding_domain=sharding_domain,
                 clip_norm=clip_norm, pytorch_bert_groups=pytorch, state_dtype=state_dtype,
                 processes=replicas // sharding_domain if sharding_domain else 1,
                 outer_fragment=OVERLAP_BUT_IPU0 if pytorch else _popart_bert_fragment(off_chip, replicas),
                 just_in_time=True, tied_gather=True)


#: Adam/AdamW state as Graphcore's SQuAD configs keep it: first moment fp16, second fp32 (PyTorch
#: ``enable_half_first_order_momentum``, nlp/bert/pytorch/optimization.py; PopART
#: ``use_half_optimizer_state``, which sets only ``accl1_type``, bert_optimizer/optimizer.py)
_HALF_FIRST_MOMENT = ("float16", "float32")
#: LAMB's state in MLPerf's packed BERT configs (mlcommons training_results): v1.1's POD16 and POD128 JSONs
#: set ``lamb_m_dtype`` FLOAT16 (the first moment; the second stays fp32), v2.0's ``lamb_accl_dtype`` FLOAT16
#: (both moments), bert_optimizer.py 149-166; v1.0's and v1.1's POD64 set neither (fp32)
MLPERF_V11_LAMB_STATE = _HALF_FIRST_MOMENT
MLPERF_V20_LAMB_STATE = "float16"


#: Graphcore's 8-IPU split of BERT-Large's 24 layers for SQuAD (its PopART and PyTorch configs, its PopTorch
#: tutorial)
_SQUAD_LAYERS_PER_IPU = [2, 3, 3, 3, 3, 3, 3, 4]


def _squad_train(replicas: int, vocab: int, device_iterations: int, amp: list[float], optimizer: str,
                 attention_dropout: float | None = None, output_mode: str = "", pytorch: bool = False) -> Setup:
    """BERT-Large SQuAD fine-tuning (SL384) as Graphcore's configs run it: an 8-IPU pipeline
    (layers 2, 3, 3, 3, 3, 3, 3, 4) with the span head on the last IPU, micro-batch 4, GA 32, the
    optimizer state on chip and sharded over the replicas (first moment fp16), half partials;
    ``attention_dropout`` and ``output_mode`` where the source sets them; ``pytorch``: the PyTorch
    example's weight update schedule (:data:`OVERLAP_BUT_IPU0`; PopART's bert.py keeps Serial on chip)."""
    params = dict(micro_batch=4, seq_len=384, layers_per_ipu=_SQUAD_LAYERS_PER_IPU, vocab=vocab, head="squad")
    if attention_dropout is not None:
        params["attention_dropout"] = attention_dropout
    return Setup("bert-large", _params(**params), "bow-pod16", replicas=replicas, accumulation=32,
                 device_iterations=device_iterations, amp=tuple(amp), optimizer=optimizer, rts=True,
                 state_dtype=_HALF_FIRST_MOMENT, output_mode=output_mode,
                 outer_fragment=OVERLAP_BUT_IPU0 if pytorch else (), just_in_time=True)


def _tutorial_squad_train() -> Setup:
    """BERT-Large SQuAD fine-tuning (SL384) as Graphcore's PopTorch tutorial's stored run ran it on an IPU-POD16
    (graphcore/tutorials tutorials/pytorch/tut_finetuning_bert/Fine-tuning-BERT.ipynb at 42bf70f, "November 2021
    update", SDK 2.3): Hugging Face's BertForQuestionAnswering as transformers 4.10 writes it (its attention
    unfused: three Q, K, V matmuls and the scores divided by sqrt(head size), the zoo's ``hf_attention``; hidden
    dropout 0.15, attention dropout 0.1, half partials, the span head on the last IPU) in an 8-IPU pipeline
    (layers 2, 3, 3, 3, 3, 3, 3, 4), a recomputation checkpoint after every layer but the last; micro-batch 2, 2
    replicas, GA 64, one device
    iteration; AMP 0.08 / 0.28 / 0.32 / 0.32 / 0.36 / 0.38 / 0.4 / 0.32; AdamW with fp16 first moment and gradient
    accumulators, its state on chip and sharded over the replicas; anchorMode All; the weight update's
    OverlapMemoryOptimized without IPU 0, JustInTime copies."""
    params = _params(micro_batch=2, seq_len=384, layers_per_ipu=_SQUAD_LAYERS_PER_IPU, vocab=30522,
                     head="squad", dropout=0.15, attention_dropout=0.1, hf_attention=True)
    return Setup("bert-large", params, "ipu-pod16", replicas=2, accumulation=64,
                 amp=(0.08, 0.28, 0.32, 0.32, 0.36, 0.38, 0.4, 0.32), optimizer="adamw", rts=True,
                 state_dtype=_HALF_FIRST_MOMENT, accum_dtype="float16", output_mode="All",
                 outer_fragment=OVERLAP_BUT_IPU0, just_in_time=True)


def _optimum_squad_train() -> Setup:
    """BERT-Large SQuAD fine-tuning (SL384) as optimum-graphcore's introduction notebook runs it through its
    IPUTrainer (huggingface/optimum-graphcore notebooks/introduction_to_optimum_graphcore.ipynb, da03740e,
    optimum 1.1.1): the hub's ``Graphcore/bert-large-ipu`` IPUConfig as the notebook prints it (layers
    [3, 7, 7, 7], matmul proportions 0.15 / 0.18 / 0.2 / 0.25, half partials, AdamW's first moment in fp16, the
    optimizer state off chip with RTS, recomputation every layer, outputMode Final) with per-device batch 1,
    gradient accumulation 64 and ``pod_type`` pod16 (4 replicas); ``IPUConfig.to_options`` sets the weight
    update's OverlapMemoryOptimized without IPU 0 and JustInTime call copies, as the BERT examples do."""
    params = _params(micro_batch=1, seq_len=384, layers_per_ipu=[3, 7, 7, 7], vocab=30522, head="squad")
    return _optimum_train("bert-large", params, (0.15, 0.18, 0.2, 0.25))


def _optimum_lm_train() -> Setup:
    """optimum-graphcore's external-model notebook (notebooks/external_model.ipynb, 2bdcc2aa, optimum 0.3.3.dev0):
    a 12-layer transformer language model of width 768 (12 heads, FFN 3,072, GPT-2's vocabulary, blocks of 128
    tokens, its head tied to the word embedding) trained by the IPUTrainer with the notebook's own IPUConfig:
    layers [0, 4, 4, 4] (embeddings and head on IPU 0), matmul proportion 0.25, half partials, AdamW's first
    moment in fp16, the optimizer state off chip with RTS, recomputation every layer; per-device batch 1,
    gradient accumulation 64, pod16 (4 replicas). Run as the zoo's GPT-2 small at those sizes."""
    params = _params(micro_batch=1, seq_len=128, n_positions=128, layers_per_ipu=[0, 4, 4, 4])
    return _optimum_train("gpt2-small", params, (0.25,) * 4)


def _optimum_train(model: str, params: tuple, amp: tuple) -> Setup:
    """A 4-IPU pipeline trained by optimum-graphcore's IPUTrainer as both notebooks run it: per-device batch 1,
    gradient accumulation 64, pod16 (4 replicas), AdamW with its first moment in fp16, the optimizer state off
    chip with RTS, outputMode Final, half partials, and what ``IPUConfig.to_options`` adds (the weight update's
    OverlapMemoryOptimized without IPU 0, JustInTime copies, the TiedGather patterns)."""
    return Setup(model, params, "ipu-pod16", replicas=4, accumulation=64, amp=amp, optimizer="adam",
                 state_dtype=_HALF_FIRST_MOMENT, optimizer_off_chip=True, rts=True, output_mode="Final",
                 outer_fragment=OVERLAP_BUT_IPU0, just_in_time=True, tied_gather=True)


#: the poplin options of PopRT's BERT benchmark scripts (RT benchmarks/bert/test_bert_{base,large}.py,
#: 77e7d66: CompilerOptions use_128bit_conv_unit_load, enable_fast_reduce True, enable_multi_stage_reduce
#: False), which PopRT passes to poplin's matmul and convolution options
POPRT_BENCHMARK_POPLIN_OPTIONS = (("use128BitConvUnitLoad", "true"), ("enableFastReduce", "true"),
                                  ("enableMultiStageReduce", "false"))


def _squad_infer(model: str, batch: int, seq_len: int, batches_per_step: int, amp: float | None = None,
                 io_tiles: int = 0, benchmark_options: bool = False, fp32_ops: tuple = (),
                 dtype: str = "float16") -> Setup:
    """BERT SQuAD inference as PopRT runs it on one C600 IPU: the span head without positions or loss
    (only the start and end logits come back), fp16 with half partials (``dtype`` "float32": the
    unconverted model, fp32 with float partials), int32 inputs; IO tiles
    overlap every stream when given (``num_io_tiles``); ``benchmark_options``: the compiler options of
    RT ``benchmarks/bert/test_bert_*.py`` (:data:`POPRT_BENCHMARK_POPLIN_OPTIONS`) and its Converter's
    ``erf_gelu_pattern``, which makes the exported model's exact GELU PopART's GeluErf (the zoo's
    ``gelu="erf"``); ``fp32_ops``: the op kinds the Converter's ``fp16_skip_op_types`` keeps in fp32 (the
    zoo's ``fp32_ops``)."""
    params = dict(micro_batch=batch, seq_len=seq_len, head="squad", with_loss=False)
    if benchmark_options:
        params["gelu"] = "erf"
    if fp32_ops:
        params["fp32_ops"] = list(fp32_ops)
    if dtype != "float16":
        params["dtype"] = dtype
    return Setup(model, _params(**params), "c600", poprt=True,
                 device_iterations=batches_per_step, amp=(amp,) if amp else (), training=False,
                 io_tiles=io_tiles, overlap_io=bool(io_tiles), half_partials=dtype == "float16",
                 poplin_options=POPRT_BENCHMARK_POPLIN_OPTIONS if benchmark_options else ())


def _e5_infer() -> Setup:
    """E5-large sentence embeddings as optimum-graphcore's text-embeddings notebook runs them
    (``notebooks/text_embeddings_models``, 8e878e77: ``intfloat/e5-large``, a BERT-Large encoder, in fp16 at
    sequence length 512, mean-pooled and L2-normalised on the IPU; ``config.py``: one IPU per replica,
    layers [24], ``inference_matmul_proportion`` 0.1, micro-batch 2, device iterations 256, 4 replicas) on
    an IPU-M2000 (the notebook does not name the machine [U]), half partials (the hub IPU config it
    starts from [U])."""
    params = _params(micro_batch=2, seq_len=512, vocab=30522, layers_per_ipu=[24], head="mean_pool",
                     with_loss=False, dropout=0.0)
    return Setup("bert-large", params, "ipu-m2000", replicas=4, device_iterations=256, amp=(0.1,), training=False)


def _vit_infer(batch: int) -> Setup:
    """ViT-B/16 inference as PopRT's ViT benchmark runs it on one IPU (RT ``benchmarks/ViT/poprt_run.py``,
    77e7d66): Hugging Face's ``google/vit-base-patch16-224`` classifier in fp16 with fp16 images from
    the host, availableMemoryProportion 1.0, 128 batches per step, stream buffering depth 2, 32 IO tiles
    (PopRT overlaps the streams on them); at batch 32 also ``use_128bit_conv_unit_load``,
    ``enable_fast_reduce`` and ``enable_non_stable_softmax``. The model's exact GELU runs as PopART's GeluErf
    (the Converter's ``enable_erf_gelu``: the zoo's ``gelu="erf"``)."""
    big = batch == 32
    return Setup("vit-base-16", _params(micro_batch=batch, dropout=0.0, with_loss=False, gelu="erf"), "c600",
                 poprt=True,
                 device_iterations=128, amp=(1.0,), training=False, io_tiles=32, overlap_io=True,
                 prefetch_depth=2, non_stable_softmax=big, poplin_options=POPRT_BENCHMARK_POPLIN_OPTIONS[:2] if big else ())


def _gpt2_decode(batch: int, system: str = "ipu-pod16") -> Setup:
    """GPT2-XL greedy generation as graphcore/PopTransformer's benchmark runs it (``examples/gpt2/benchmark.sh``,
    b5a7569: ``layer_per_ipu=[0,6,7,7,7,7,7,7]``, ``max_length`` and ``max_loop`` 264): 8 IPUs one after
    another (virtualGraphMode Manual, no pipeline), the embedding, LM head and top-1 on IPU 0, one session.run
    of a 264-iteration device loop (``models.gpt2`` ``decode_cache``), fp16 weights with PopART's default
    float partials and availableMemoryProportion (no matmul sets either), its custom softmax non-stable,
    and each block given its own outline attribute, so PopART outlines nothing across blocks (run without
    outlining)."""
    params = _params(micro_batch=batch, decode_cache=264, with_loss=False, dropout=0.0,
                     layers_per_ipu=[0, 6, 7, 7, 7, 7, 7, 7])
    return Setup("gpt2-xl", params, system, device_iterations=264, training=False, half_partials=False,
                 synthetic=True, sharded=True, non_stable_softmax=True, outlining=False)


def _swin_infer(batch: int) -> Setup:
    """Swin-T inference as PopRT's Swin-Tiny benchmark runs it on one IPU (RT ``benchmarks/Swin-Tiny/poprt_run.py``,
    77e7d66): ByteMLPerf's Swin-T ONNX model (224 x 224, window 7, 1,000 classes) in fp16 with fp16 images
    from the host, availableMemoryProportion 0.3, 128 batches per step, stream buffering depth 2, 32 IO
    tiles (PopRT overlaps the streams on them). The zoo's Swin-T is Graphcore's PyTorch port: its windows
    padded 49 -> 56 tokens and its tensors remapped after each permute (``models/swin.py``), as PopRT's
    ``attention_padding`` and ``enable_insert_remap`` do to the ONNX graph; its exact GELU runs as PopART's
    GeluErf (``enable_erf_gelu``: the zoo's ``gelu="erf"``)."""
    return Setup("swin-tiny", _params(micro_batch=batch, drop_path=0.0, with_loss=False, gelu="erf"), "c600",
                 poprt=True,
                 device_iterations=128, amp=(0.3,), training=False, io_tiles=32, overlap_io=True, prefetch_depth=2)


def _bytemlperf_resnet(batch: int, fp8: bool = False) -> Setup:
    """ResNet-50 inference as ByteMLPerf's IPU backend runs it on one C600 (bytedance/ByteMLPerf
    ``byte_mlperf/backends/IPU``: ``interact_infos/resnet50-torch-fp32.json``, ``compile_backend_ipu.py``,
    ``engine_poprt.py``): torchvision's ResNet-50 exported to ONNX (batch norms folded), converted by PopRT
    to fp16 with fp16 images from the host (``np.random.randn`` cast to the runner's input type), 64 IO
    tiles with the streams overlapped, 128 batches per step, prefetch and stream buffering depth 2, the
    backend's default half partials and availableMemoryProportion 0.6; ``fp8``: PopRT's FP8 conversion
    (``fp8_configs``: F143 weights and inputs, scales -3), run as the zoo's ``fp8_convs``."""
    return _resnet_infer(batch, device_iterations=128, io_tiles=64, fp8=fp8, eight_bit_io=False)


def _bytemlperf_swin_large(batch: int, fp8: bool = False) -> Setup:
    """Swin-L inference at 384 x 384 as ByteMLPerf's IPU backend runs it on one C600
    (``interact_infos/swin-large-torch-fp32.json``: Hugging Face's Swin-L, window 12, traced and converted
    by PopRT to fp16 without remaps, availableMemoryProportion 0.2, 128 batches per step, prefetch and
    stream buffering depth 2, no IO tiles, the 128-bit conv unit load and fast reduce), run as the zoo's
    Swin-L (Graphcore's port) at that size; ``fp8``: PopRT's FP8 conversion, the zoo's ``fp8_matmuls``. Hugging
    Face's Swin runs the exact GELU, which PopART runs as its GeluErf or, unfused, as an Erf and four cheap
    maps at about the same cost (the zoo's ``gelu="erf"``; the interact file names no GELU pass [U])."""
    params = _params(micro_batch=batch, image_size=384, window=12, drop_path=0.0, with_loss=False, fp8_matmuls=fp8,
                     gelu="erf")
    return Setup("swin-large", params, "c600", poprt=True, device_iterations=128, amp=(0.2,), training=False,
                 prefetch_depth=2,
                 poplin_options=POPRT_BENCHMARK_POPLIN_OPTIONS[:2])


def _bytemlperf_clip_text(batch: int) -> Setup:
    """Stable Diffusion v1's CLIP text encoder as ByteMLPerf's IPU backend runs it on one C600
    (``interact_infos/clip-onnx-fp32.json``, ``model_zoo/clip-onnx-fp32.json``: ``clip-text-encoder.onnx``, int32
    ``input_ids`` of 77 tokens, the last hidden state and the pooled output back), converted by PopRT to fp16,
    32 IO tiles with the streams overlapped, 128 batches per step, prefetch and stream buffering depth 2,
    availableMemoryProportion 0.8, the 128-bit conv unit load and fast reduce, outlining at threshold 5,000,
    the backend's default half partials; run as the zoo's ``clip-text-vit-l-14``."""
    return Setup("clip-text-vit-l-14", _params(micro_batch=batch), "c600", poprt=True, device_iterations=128,
                 amp=(0.8,),
                 training=False, io_tiles=32, overlap_io=True, prefetch_depth=2,
                 poplin_options=POPRT_BENCHMARK_POPLIN_OPTIONS[:2], outline_threshold=5000.0)

def _clip_infer(batch: int) -> Setup:
    """CLIP ViT-B/32 as PopRT's CLIP benchmark runs it on one IPU (RT ``benchmarks/CLIP``, 7487d65:
    ``export_onnx.py``, ``poprt_run.py``): OpenAI's model exported whole (``model(image, text)``), ``batch``
    fp16 images and the same 100 texts of 77 tokens each call, converted to fp16 with remaps inserted, 128
    batches per step, availableMemoryProportion 0.2, the non-stable softmax, prefetch and stream buffering
    depth 2, no IO tiles; the partials type is not set (half, as the other PopRT rows [U])."""
    return Setup("clip-vit-b-32", _params(micro_batch=batch), "c600", poprt=True, device_iterations=128, amp=(0.2,),
                 training=False, prefetch_depth=2, non_stable_softmax=True)



def _roformer_infer(batch: int) -> Setup:
    """RoFormer-V2 small sequence classification as PopRT's RoformerV2 benchmark runs it on one IPU (RT
    ``benchmarks/RoformerV2``, 77e7d66: ``export_onnx.py``, ``poprt_run.py``): ``junnyu/roformer_v2_chinese_char_small``
    exported to ONNX, ``batch`` sequences of 128 int32 tokens, converted to fp16 (with ``pre_scale`` at batch
    356), the compiler's defaults but stream buffering depth 2: one batch per step, no IO tiles,
    availableMemoryProportion 0.6; the partials type is not set (half, as the other PopRT rows [U])."""
    return Setup("roformer-v2-small", _params(micro_batch=batch, pre_scale=batch == 356), "c600", poprt=True,
                 device_iterations=1, training=False, prefetch_depth=2)


#: IO tiles of the TF1 CNN training benchmarks (graphcore/examples de5eb78 ``vision/cnns/tensorflow1/benchmarks.yml``:
#: ``--num-io-tiles 32`` on the EfficientNet-B4 G16 and ResNeXt-101 runs; the SDK 2.5 README_Benchmarks.md gives it to
#: EfficientNet-B4 G16 only). ``ipu_utils.py`` sets ``io_tiles.place_ops_on_io_tiles`` with them, so the infeed and
#: outfeed run on the IO tiles, overlapping compute, pipelined as they are
TF1_CNN_IO_TILES = 32

#: Graphcore's EfficientNet G16 variant (its examples' ``group_dim`` 16 and ``expand_ratio`` 4), as the zoo's parameters
EFFNET_G16 = {"group_dim": 16, "expand_ratio": 4}


def _effnet_train(system: str, replicas: int, accumulation: int) -> Setup:
    """EfficientNet-B4 G16 training as Graphcore's TF1 CNN example runs it (graphcore/examples
    ``vision/cnns/tensorflow1/training``, configs.yml ``efficientnet_b4_g16_large_batch_size_high_throughput``
    and Models/efficientnet.py ``set_defaults``): group convolutions of 16 channels, expansion ratio 4,
    group norm of 4 groups (the model's default), the ImageNet default size 380, micro-batch 3, two IPUs
    per replica split at block4a, availableMemoryProportion 0.4, precision 16.16 with half partials,
    LARS, 8-bit images, recomputation, prefetch depth 3, the gradient all-reduces combined
    ([tf-combine]), each stage's inter-IPU copies one after another ([tf-copies]), stable norm
    statistics (Models/efficientnet.py forces ``stable_norm`` on; [tf-stable-norm]), 32 IO tiles with the
    infeed and outfeed on them (:data:`TF1_CNN_IO_TILES`)."""
    params = _params(micro_batch=3, **EFFNET_G16, split_points=["block4a"], eight_bit_io=True)
    return Setup("efficientnet-b4", params, system, replicas=replicas, accumulation=accumulation, amp=(0.4, 0.4),
                 optimizer="lars", prefetch_depth=3, merged_collectives=("all_reduce",), per_stage_copies=True,
                 graph_functions=True, stable_norm=True, processes=replicas, outer_fragment=TF_RESOURCE_UPDATE,
                 io_tiles=TF1_CNN_IO_TILES, overlap_io=True)


def _effnet_pytorch_train(model: str, micro_batch: int, accumulation: int, amp: float, rts: bool) -> Setup:
    """EfficientNet G16 training as Graphcore's PyTorch CNN example runs it (graphcore/examples 3cc8f81
    ``vision/cnns/pytorch/train``, configs.yml ``efficientnet-b0-g16-gn-pod16`` and ``efficientnet-b4-g16-gn-pod16``,
    benchmarks.yml ``poprun --num-instances=2 --num-replicas=8 --ipus-per-replica=2``): group convolutions of 16
    channels, expansion ratio 4, group norm of 4 groups, two IPUs per replica split at the start of block4a
    (the model's ``blocks/3/0``), so the pipeline recomputes every stage but the last (train_utils.py: "If the
    model is multi stage (pipelined) the recomputation is always enabled"), 8-bit images, half partials,
    RMSProp with momentum (``rmsprop_tf``), its state on chip, sharded over the replicas where ``rts``."""
    params = _params(micro_batch=micro_batch, **EFFNET_G16, split_points=["block4a"], eight_bit_io=True)
    return Setup(model, params, "bow-pod16", replicas=8, accumulation=accumulation, amp=(amp, amp),
                 optimizer="rmsprop_momentum", rts=rts, merged_collectives=("all_reduce",), processes=2)


def _cnn_pytorch_infer(model: str, micro_batch: int, io_tiles: int, **params) -> Setup:
    """A CNN's inference as Graphcore's PyTorch CNN benchmark runs it (graphcore/examples 3cc8f81
    ``vision/cnns/pytorch/inference``: configs.yml ``common`` and benchmarks.yml ``pytorch_*_infer_gen_pod4``,
    ``poprun --num-replicas=4``): one Mk2 IPU a replica, fp16 with half partials, uint8 images normalised on the
    IPU, 128 device iterations, the host's generated data streamed through ``io_tiles`` IO tiles; ``params``
    the model's (its norm: batch norm in inference mode, or the G16 configs' group norm)."""
    return Setup(model, _params(micro_batch=micro_batch, eight_bit_io=True, with_loss=False, **params), "ipu-m2000",
                 replicas=4, device_iterations=128, training=False, io_tiles=io_tiles, overlap_io=True)


def _resnext_train(io_tiles: int) -> Setup:
    """ResNeXt-101 32x4d training as Graphcore's TF1 CNN example runs it (configs.yml
    ``resnext101_16ipus``, Models/resnext.py ``set_defaults``): group norm of 32 groups, micro-batch 6,
    two IPUs per replica split at stage3/unit4 (the zoo's layer3/3), 8 replicas, GA 16, momentum SGD,
    half partials, 8-bit images, recomputation, prefetch depth 4 (the benchmark's), the gradient
    all-reduces combined ([tf-combine]), each stage's inter-IPU copies one after another ([tf-copies]),
    stable norm statistics (the config's ``stable_norm: True``, which Models/resnext.py also forces;
    [tf-stable-norm]); ``io_tiles`` IO tiles with the infeed and outfeed on them (:data:`TF1_CNN_IO_TILES`)."""
    params = _params(micro_batch=6, split_points=["layer3/3"], eight_bit_io=True)
    return Setup("resnext101", params, "bow-pod16", replicas=8, accumulation=16, optimizer="sgd_momentum",
                 prefetch_depth=4, merged_collectives=("all_reduce",), per_stage_copies=True, stable_norm=True,
                 graph_functions=True, processes=8, outer_fragment=TF_RESOURCE_UPDATE, io_tiles=io_tiles,
                 overlap_io=bool(io_tiles))


def _vit_train(system: str, replicas: int, accumulation: int, pretrain: bool, sharding_domain: int = 0) -> Setup:
    """ViT-B/16 training as Graphcore's PyTorch ViT runs it (graphcore/examples 8ae588c
    ``vision/vit/pytorch``, configs.yml and benchmarks.yml): blocks [3, 3, 3, 3] on a 4-IPU pipeline,
    availableMemoryProportion 0.3 on each IPU, the optimizer state on chip and sharded over the
    replicas (``enable_rts``), half partials (args.py default), prefetch depth 2, outputMode All and the
    weight update overlapped across the IPUs but IPU 0 (ipu_options.py, :data:`OVERLAP_BUT_IPU0`),
    generated data streamed from the host. Pre-training (``b16_in1k_pretrain_lamb``,
    ``--byteio true``): micro-batch 8, uint8 images normalised on the IPU, mixup, the representation
    layer, attention-probability dropout 0.1, the dropout after the MLP's GELU, mid-block checkpoints
    in blocks 1, 4, 7 and 10, LAMB with fp32 state and fp32 gradient accumulators (``accum_type``).
    Fine-tuning (``b16_imagenet1k``, Hugging Face's
    ``ViTForImageClassification``): micro-batch 17, fp16 images, device iterations 8, SGD with
    momentum kept in fp16 (``first_order_type``), fp16 gradient accumulators (args.py's ``--accum-type``
    default)."""
    if pretrain:
        params = _params(micro_batch=8, layers_per_ipu=[3, 3, 3, 3], eight_bit_io=True, mixup=True,
                         representation_size=768, attention_dropout=0.1, ffn_act_dropout=True,
                         mid_checkpoints=[1, 4, 7, 10])
        return Setup("vit-base-16", params, system, replicas=replicas, accumulation=accumulation, amp=(0.3,) * 4,
                     optimizer="lamb", rts=True, prefetch_depth=2, output_mode="All",
                     sharding_domain=sharding_domain, accum_dtype="float32",
                     processes=replicas // sharding_domain if sharding_domain else 1, outer_fragment=OVERLAP_BUT_IPU0,
                     just_in_time=True)
    return Setup("vit-base-16", _params(micro_batch=17, layers_per_ipu=[3, 3, 3, 3]), system, replicas=replicas,
                 accumulation=accumulation, device_iterations=8, amp=(0.3,) * 4, optimizer="sgd_momentum",
                 state_dtype="float16", rts=True, prefetch_depth=2, output_mode="All", outer_fragment=OVERLAP_BUT_IPU0,
                 just_in_time=True)


def _unet_train() -> Setup:
    """U-Net training as Graphcore's TensorFlow 2 medical-segmentation example runs it
    (graphcore/examples ``vision/unet_medical/tensorflow2``, benchmarks.yml ``tf2_unet_train_real_pod4``:
    ``--nb-ipus-per-replica 4 --micro-batch-size 1 --gradient-accumulation-count 24 --augment``):
    one replica of four pipeline stages split as ``model_utils.set_pipeline_stages`` does, each
    stage's inter-IPU copies one after another and each crop sent straight to the stage that reads
    it ([tf-copies]: the model passes the crops on stage by stage, which TensorFlow's
    PipelineCommunicationOptimizer turns into FIFOs for the Grouped schedule), availableMemoryProportion
    0.7, 0.3, 0.45, 0.7 and half partials (``parse_args.py`` defaults), recomputation
    (``RecomputationMode.Auto``), momentum SGD with fp16 momentum (``set_floatx('float16')``) kept
    on chip (``offload_weight_update_variables=False``), 240 micro-batches per execution
    (``--steps-per-execution`` default: 10 weight updates), real data through an infeed
    (:data:`TF1_PREFETCH_DEPTH`)."""
    params = _params(micro_batch=1, split_points=["encoder_block_2", "decoder_block_0", "decoder_block_2"])
    return Setup("unet", params, "bow-2000", accumulation=24, device_iterations=10, amp=(0.7, 0.3, 0.45, 0.7),
                 optimizer="sgd_momentum", state_dtype="float16", prefetch_depth=TF1_PREFETCH_DEPTH,
                 per_stage_copies=True, graph_functions=True, outer_fragment=TF_RESOURCE_UPDATE)


def _conformer_train(system: str, replicas: int, accumulation: int, processes: int = 1) -> Setup:
    """Conformer-medium training as Graphcore's PyTorch Conformer ran it for the README's figures
    (graphcore/examples ``speech/conformer/pytorch`` at ``1c4dd6c``, "Refresh examples for SDK2.6",
    the commit that added the figures, which no later commit changed: ``configs/train.yaml`` and the
    scripts ``run_wenet_conformer_globalbs_16128_pod16.sh`` / ``_pod64.sh``): micro-batch 4 of generated
    utterances at the maximum lengths (1,220 frames, 48 tokens), the pipeline ``encoder.encoders__2``,
    ``__6``, ``__10`` on IPUs 1-3 (blocks [2, 4, 4, 2]; SDK 3.0's ``8ae588c``, kept through SDK 3.2's ``2d8b565``,
    moved the last split to ``__11``, [2, 4, 5, 1], and nothing else of the configuration), availableMemoryProportion 0.3 on each
    IPU, half partials, poptorch.optim.Adam with fp16 gradient accumulators (``accum_type`` the model
    dtype) and the global gradient norm clipped at 5 (``max_grad_norm``), its state on chip without RTS,
    outputMode Final and outlineThreshold 10 (``main.py build_ipu_options``), IPU 0 left out of the weight
    update's overlap (``accumulateOuterFragmentSettings.excludedVirtualGraphs``) under the Scheduler schedule
    PopTorch sets when a pipeline's gradients are clipped (popart_compiler Compiler.cpp); GA so that the global
    batch is 16,128."""
    return Setup("conformer-medium", _params(micro_batch=4, layers_per_ipu=[2, 4, 4, 2]), system, replicas=replicas,
                 accumulation=accumulation, amp=(0.3,) * 4, optimizer="adam", accum_dtype="float16", clip_norm=5.0,
                 output_mode="Final", processes=processes, outer_fragment=("Scheduler", (0,)), outline_threshold=10.0,
                 tied_gather=True)


def _swin_train(tiny: bool) -> Setup:
    """Swin training as Graphcore's PyTorch port runs it (graphcore/examples ``vision/swin/pytorch``,
    ``configs/configs.yaml``, ``options.py``, ``optimizer.py``; benchmarks.yml
    ``pytorch_swin_tiny_train_real_pod16`` / ``pytorch_swin_large_finetune_real_pod16``): SWIN_TINY in
    fp32 (PRECISION float, float: fp32 weights, images and partials), micro-batch 4, 4 replicas of the
    pipeline [2, 3, 5, 2], GA 64, drop path 0.2; SWIN_LARGE_224_22K_FINETUNE_1K_FP16_POD16 in fp16
    (``model.half()``, half partials), micro-batch 6, 2 replicas of [2, 3, 4, 4, 4, 4, 2, 1], GA 683, drop
    path 0.2. Both: availableMemoryProportion 0.12 on every IPU (config.py IPU.AMP), AdamW with the
    first moment in fp16 and the second in fp32 and gradient accumulators of the precision's type
    (``accum_type``), the global gradient norm clipped at 5 (TRAIN.CLIP_GRAD), its state on chip without
    RTS (TRAIN.OPTIMIZER.RTS default), buffering depth 3 (``defaultBufferingDepth``), the weight update
    overlapped across the IPUs (``accumulateOuterFragmentSettings`` OverlapMemoryOptimized), outputMode the
    default, images streamed from the host."""
    if tiny:
        params = _params(micro_batch=4, layers_per_ipu=[2, 3, 5, 2], dtype="float32")
        return Setup("swin-tiny", params, "bow-pod16", replicas=4, accumulation=64, amp=(0.12,) * 4,
                     half_partials=False, optimizer="adamw", state_dtype=_HALF_FIRST_MOMENT, accum_dtype="float32",
                     clip_norm=5.0, prefetch_depth=3, outer_fragment=("OverlapMemoryOptimized", ()), just_in_time=True)
    params = _params(micro_batch=6, layers_per_ipu=[2, 3, 4, 4, 4, 4, 2, 1])
    return Setup("swin-large", params, "bow-pod16", replicas=2, accumulation=683, amp=(0.12,) * 8,
                 optimizer="adamw", state_dtype=_HALF_FIRST_MOMENT, accum_dtype="float16", clip_norm=5.0,
                 prefetch_depth=3, outer_fragment=("OverlapMemoryOptimized", ()), just_in_time=True)


def _gpt2_infer(model: str, layers_per_ipu: list[int], replicas: int) -> Setup:
    """GPT-2 inference as Graphcore's PyTorch example benchmarks it on a Bow Pod16 (EX 3cc8f81
    ``nlp/gpt2/pytorch``: ``benchmarks.yml`` ``pytorch_gpt2_*_infer_gen_pod16``, ``inference_gpt2.py``):
    sequence length 1,024, batch 1, one batch per call, ``ShardedExecution(AutoStage.AutoIncrement)``,
    availableMemoryProportion 0.2 on every IPU, half partials, the LM head serialised 4 ways over the
    padded vocabulary. The example returns the argmax of every position's logits; the zoo the last
    position's logits (the same LM head and logits on IPU 0)."""
    params = _params(seq_len=1024, layers_per_ipu=layers_per_ipu, vocab=50272, embedding_serialization=4,
                     with_loss=False)
    return Setup(model, params, "bow-pod16", replicas=replicas, amp=(0.2,) * len(layers_per_ipu), training=False,
                 sharded=True)


def _gpt2_train(model: str, layers_per_ipu: list[int], amp: list[float], replicas: int, accumulation: int,
                rts: bool, seq_len: int = 1024, embedding_serialization: int = 4) -> Setup:
    """GPT-2 pre-training as Graphcore's PyTorch example benchmarks it on a Bow Pod16 (EX 3cc8f81
    ``nlp/gpt2/pytorch``: ``benchmarks.yml``, ``arguments.py``, ``ipu_options.py``, ``tools.py
    get_optimizer``): micro-batch 1, device iterations 8, a checkpoint after every layer, half
    partials, the vocabulary padded to 50,272 (``config/*.json``) and the LM head serialised over it;
    AdamW with fp16 gradient accumulators and first moment, fp32 second moment, its state off chip
    (``--optimizer-state-offchip`` defaults to true) and sharded where the benchmark sets
    ``--replicated-tensor-sharding``; the loss over 128-position slices with each slice's accuracy
    (``--enable-sequence-serialized``, ``--remap-logit``: the zoo's ``loss_chunk`` and ``remap_logits``).
    Not modelled: ``wpe`` on IPU 1 (the zoo keeps both embeddings on IPU 0)."""
    params = _params(seq_len=seq_len, layers_per_ipu=layers_per_ipu, vocab=50272,
                     embedding_serialization=embedding_serialization, loss_chunk=128, remap_logits=True)
    return Setup(model, params, "bow-pod16", replicas=replicas, accumulation=accumulation, device_iterations=8,
                 amp=tuple(amp), optimizer="adamw", state_dtype=_HALF_FIRST_MOMENT, accum_dtype="float16",
                 optimizer_off_chip=True, rts=rts, tied_gather=True)
