"""Run options, with PopTorch's ``Options`` names and semantics.

``sim.Options`` is the part of ``poptorch.Options`` the simulator models. Setters return the
object so calls chain, as in PopTorch::

    opts = sim.Options().deviceIterations(4).logCycleCount(True)
    opts.Training.gradientAccumulation(8)

Every option that is set is recorded in :attr:`Options.set_options`. An option the simulator
accepts without modelling its effect is listed by :meth:`Options.unmodelled` so that a run's
report can say so ("accepted, no modelled effect").
"""

from __future__ import annotations

import copy
import enum
import math
import os
from dataclasses import dataclass

from .errors import OptionsError, show_number
from .strategy import SyncPattern, _Strategy

#: "0": sim.poptorch's calls return zeros of the outputs' shapes instead of running the model on the CPU
#: (``poptorch.Options.computeOutputsOnCpu``; ``ipusim script --no-cpu-outputs`` sets it)
CPU_OUTPUTS_ENV_VAR = "IPUSIM_CPU_OUTPUTS"


def cpu_outputs(options) -> bool:
    """Whether calls compute the model's outputs on the CPU: PopTorch's ``Options.computeOutputsOnCpu``, else
    :data:`CPU_OUTPUTS_ENV_VAR` ("1" or unset: yes, "0": no; another value is an ``OptionsError``)."""
    if getattr(options, "cpu_outputs", None) is not None:
        return options.cpu_outputs
    value = os.environ.get(CPU_OUTPUTS_ENV_VAR, "1").strip()
    if value not in ("0", "1"):
        raise OptionsError(f"environment variable {CPU_OUTPUTS_ENV_VAR}={value!r}: set it to 0 (calls return zeros "
                           "instead of running the model on the CPU) or 1 (the default: real outputs), or unset it")
    return value == "1"


class OptionsAssertionError(OptionsError, AssertionError):
    """An option value PopTorch refuses with an ``assert`` (a wrong type, ``numIOTiles`` out of range):
    an :class:`~sim.errors.OptionsError` that is also the ``AssertionError`` PopTorch raises."""


class OptionsValueError(OptionsError, ValueError):
    """An option value PopTorch refuses with a ``ValueError`` (``inputReplicaGrouping``'s checks): an
    :class:`~sim.errors.OptionsError` that is also that ``ValueError``."""


class OutputMode(enum.IntEnum):
    """Which outputs are returned to the host (PopTorch ``OutputMode``)."""

    Final = 0  # PopTorch's values (python/enums.py)
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class OverlapMode(enum.IntEnum):
    """How a host stream overlaps compute when IO tiles are used (PopTorch ``OverlapMode``)."""

    NoOverlap = 0
    OverlapAccumulationLoop = 1
    OverlapDeviceIterationLoop = 2


class PipelineCopies(enum.Enum):
    """How a pipeline cycle runs its stages' inter-IPU copies (the simulator's own option).

    ``Merged``: PopART and PopTorch put every stage's copies in one function called once per
    cycle ("merged across pipelineStages", popart ``PopPrograms::addPipelineCycle``), so the
    links carry them at once. ``PerStage``: TensorFlow's IPU pipelines wrap each stage's copies
    in a Poplar function of their own and call them one after another (graphcore/tensorflow
    ``pipeline_visitor.cc``: ``inter_ipu_copy_sequences_[stage]``, ``to_function``; its copy
    combiner never joins copies of different stages, which depend on each other)."""

    Merged = "merged"
    PerStage = "per_stage"


class CommGroupType(enum.IntEnum):
    """How replicas are grouped for a collective or a variable (PopTorch ``CommGroupType``)."""

    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


def _group_type_name(group_type) -> str:
    name = getattr(group_type, "name", group_type)
    key = str(name).strip().lower()
    aliases = {"nogrouping": "none", "ungrouped": "none", "no_grouping": "none"}
    key = aliases.get(key, key)
    if key not in ("all", "consecutive", "orthogonal", "none"):
        raise OptionsError(f"unknown replica grouping {group_type!r}; known: All, Consecutive, Orthogonal, "
                           "NoGrouping")
    return key


def comm_group(replicas: int, group_type="all", group_size: int | None = None) -> tuple[int, int]:
    """``(stride, group_size)`` of PopTorch / PopART's ``CommGroupType`` with ``group_size``.

    ``All``: one group of every replica (the size is ignored). ``Consecutive``: groups of
    ``group_size`` consecutive replicas. ``Orthogonal``: groups of ``group_size`` replicas
    ``m = replicas / group_size`` apart, ``{0, m, 2m, ...}, {1, m+1, ...}`` (PopART's
    ``commgroup.hpp``; the groups cut across the consecutive blocks of ``m``). ``NoGrouping``:
    every replica alone. With 8 replicas, Orthogonal with group size 2 is ``{0,4} {1,5} {2,6}
    {3,7}``, that is PopXL's ``replica_grouping(stride=4, group_size=2)``.
    """
    kind = _group_type_name(group_type)
    if kind == "all":
        return 1, replicas
    if kind == "none":
        return 1, 1
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1 \
            or replicas % group_size:
        raise OptionsError(f"replica group size {group_size!r} must be a whole number that divides the "
                           f"{replicas} replicas")
    if kind == "consecutive":
        return 1, group_size
    return replicas // group_size, group_size


class ReductionType(enum.IntEnum):
    """How gradients are reduced over accumulation steps and replicas."""

    Sum = 0
    Mean = 1
    NoReduction = 2


#: micro-batches one call may run (deviceIterations x gradientAccumulation x replicationFactor)
MAX_MICRO_BATCHES_PER_CALL = 10**6
_WHY_MAX_MICRO_BATCHES = (
    "the simulator keeps a host timestamp per micro-batch, tensor and replica, as PopTorch's perf "
    "counters do, so a larger call takes minutes and gigabytes; the run is periodic, so simulate fewer "
    "and scale the time")


def _positive_int(name: str, value, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        # a value of another type is PopTorch's assert ("Unexpected type"); a count below 1 its backend's error
        kind = OptionsError if isinstance(value, int) and not isinstance(value, bool) else OptionsAssertionError
        raise kind(f"{name} must be a whole number >= 1, got {value!r}")
    if maximum is not None and value > maximum:
        raise OptionsError(f"{name} = {show_number(value)} is more than {show_number(maximum)}, the simulator's "
                           f"limit of micro-batches per call ({_WHY_MAX_MICRO_BATCHES})")
    return value


class _Training:
    def __init__(self, owner: "Options"):
        self._owner = owner
        self.gradient_accumulation = 1
        self.reduction_type = ReductionType.Mean

    def accumulationAndReplicationReductionType(self, reduction_type: ReductionType) -> "Options":
        """Sum or Mean of the gradients over accumulation steps and replicas."""
        if not isinstance(reduction_type, ReductionType) or reduction_type == ReductionType.NoReduction:
            raise OptionsError(f"accumulationAndReplicationReductionType: expected ReductionType.Sum "
                               f"or ReductionType.Mean, got {reduction_type!r}")
        self.reduction_type = reduction_type
        self._owner._record("Training.accumulationAndReplicationReductionType", reduction_type.name)
        return self._owner

    def gradientAccumulation(self, steps: int) -> "Options":
        """Micro-batches whose gradients are summed before one weight update."""
        self.gradient_accumulation = _positive_int("Training.gradientAccumulation", steps,
                                                   MAX_MICRO_BATCHES_PER_CALL)
        self._owner._record("Training.gradientAccumulation", steps)
        return self._owner


def _flag(setter: str, value) -> bool:
    if not isinstance(value, bool):
        raise OptionsAssertionError(f"TensorLocationSettings.{setter} expects True or False, got {value!r}")
    return bool(value)


class TensorLocationSettings:
    """Where one class of tensors lives (PopTorch ``TensorLocationSettings``)."""

    def __init__(self):
        self.on_chip: bool | None = None
        self.replicated_tensor_sharding = False
        # PopART's defaults (sessionoptions.hpp TensorLocationSettings): a tensor of fewer elements
        # stays on chip, and one of fewer than 8192 is not sharded over replicas
        self.min_elements_off_chip = 2
        self.min_elements_rts = 8192
        self.io_tiles_to_load = False
        self.io_tiles_to_store = False

    def useOnChipStorage(self, use: bool | None = True) -> "TensorLocationSettings":
        """True: on chip; False: off chip (streaming memory); None: undefined again (the
        strategy's default, as PopTorch's ``None``)."""
        self.on_chip = None if use is None else _flag("useOnChipStorage", use)
        return self

    def useReplicatedTensorSharding(self, use: bool = True) -> "TensorLocationSettings":
        self.replicated_tensor_sharding = _flag("useReplicatedTensorSharding", use)
        return self

    def minElementsForOffChip(self, min_elements: int) -> "TensorLocationSettings":
        self.min_elements_off_chip = int(min_elements)
        return self

    def minElementsForReplicatedTensorSharding(self, min_elements: int) -> "TensorLocationSettings":
        self.min_elements_rts = int(min_elements)
        return self

    def useIOTilesToLoad(self, use: bool = True) -> "TensorLocationSettings":
        """Accepted; not modelled (the compile's notes say so): off-chip tensors are loaded
        straight to the compute tiles."""
        self.io_tiles_to_load = _flag("useIOTilesToLoad", use)
        return self

    def useIOTilesToStore(self, use: bool = True) -> "TensorLocationSettings":
        """Accepted; not modelled (the compile's notes say so)."""
        self.io_tiles_to_store = _flag("useIOTilesToStore", use)
        return self

    def off_chip(self, numel: int) -> bool:
        """Does a tensor of ``numel`` elements of this class live off chip?"""
        return self.on_chip is False and numel >= self.min_elements_off_chip

    def sharded(self, numel: int) -> bool:
        """Is a tensor of ``numel`` elements of this class sharded over replicas?"""
        return self.replicated_tensor_sharding and numel >= self.min_elements_rts


class _TensorLocations:
    """``Options.TensorLocations``: IO tiles and where each class of tensors lives."""

    def __init__(self, owner: "Options"):
        self._owner = owner
        self.num_io_tiles = 0
        self.locations = {k: TensorLocationSettings() for k in ("activation", "weight", "optimizer", "accumulator")}

    def numIOTiles(self, num_tiles: int) -> "_TensorLocations":
        """Tiles given to host IO instead of compute: an even number from 32 to 192."""
        if isinstance(num_tiles, bool) or not isinstance(num_tiles, int):
            raise OptionsAssertionError(f"numIOTiles expects an int, an even number between 32 and 192 (got "
                                        f"{type(num_tiles).__name__} {num_tiles!r})")
        if not 32 <= num_tiles <= 192 or num_tiles % 2:
            raise OptionsAssertionError(f"numIOTiles must be an even number between 32 and 192 (got {num_tiles!r})")
        self.num_io_tiles = num_tiles
        self._owner._record("TensorLocations.numIOTiles", num_tiles)
        return self

    def _set(self, kind: str, location: TensorLocationSettings) -> "_TensorLocations":
        if not isinstance(location, TensorLocationSettings):
            raise OptionsAssertionError(f"set{kind.capitalize()}Location expects a TensorLocationSettings, "
                                        f"got {location!r}")
        self.locations[kind] = location
        self._owner._record(f"TensorLocations.set{kind.capitalize()}Location", vars(location).copy())
        return self

    def setActivationLocation(self, location):
        return self._set("activation", location)

    def setWeightLocation(self, location):
        return self._set("weight", location)

    def setOptimizerLocation(self, location):
        return self._set("optimizer", location)

    def setAccumulatorLocation(self, location):
        return self._set("accumulator", location)


#: PopART's RecomputationType members, by number
RECOMPUTATION_TYPES = ("None", "Standard", "NormOnly", "Pipeline", "RecomputeAll")


def _recomputation_code(value) -> int | None:
    """PopART's RecomputationType as its number (an enum member, its int, or its name; PopART's Python
    binding names None ``NoRecompute``)."""
    value = getattr(value, "value", value)
    names = {name: i for i, name in enumerate(RECOMPUTATION_TYPES)} | {"NoRecompute": 0}
    return value if isinstance(value, int) else names.get(str(value).rpartition(".")[2])


#: op kinds PopART plans as convolutions (their partials type is ``convolutionOptions``' ``partialsType``)
CONVOLUTION_KINDS = ("conv2d", "conv2d_grad_input", "conv2d_grad_weight")


class _Popart:
    """``Options._Popart``: PopART session options by name (advanced)."""

    def __init__(self, owner: "Options"):
        self._owner = owner
        self.values: dict[str, object] = {}

    #: PopART's buffering-depth options (the second is the newer name of the first)
    BUFFERING_DEPTH_KEYS = ("defaultPrefetchBufferingDepth", "defaultBufferingDepth")
    #: its per-tensor buffering depths, tensor name -> depth (the second is the newer name of the first)
    BUFFERING_DEPTH_MAP_KEYS = ("prefetchBufferingDepthMap", "bufferingDepthMap")
    #: whether the host rearranges a direction's streams (PopART's defaults: inputs no, anchors yes; PopTorch
    #: sets the anchors' off)
    REARRANGED_ON_HOST_KEYS = {"to_ipu": "rearrangeStreamsOnHost", "from_ipu": "rearrangeAnchorsOnHost"}
    #: session options the simulator reads as switches
    BOOL_KEYS = ("enableStableNorm", "enableFullyConnectedPass", "enableNonStableSoftmax")

    def set(self, key: str, value) -> "Options":
        if key in self.BUFFERING_DEPTH_KEYS and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            # PopART's own check, at compile time there (SessionOptions::getBufferingDepth)
            raise OptionsError(f"_Popart.set({key!r}, {value!r}): Unable to support a buffering depth of "
                               f"{value!r} (minimum buffering depth is 1); give a whole number >= 1 "
                               "(1 = no prefetch, the default)")
        if key in self.BUFFERING_DEPTH_MAP_KEYS and not (isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items())):
            raise OptionsError(f"_Popart.set({key!r}, {value!r}): expected a dict of tensor names to buffering "
                               "depths (whole numbers >= 1)")
        if key in (*self.BOOL_KEYS, *self.REARRANGED_ON_HOST_KEYS.values()) and not isinstance(value, bool):
            raise OptionsError(f"_Popart.set({key!r}, {value!r}): expected True or False")
        if key in (*Options.OUTER_FRAGMENT_KEYS, "subgraphCopyingStrategy"):  # checked now, as the compile would
            trial = Options()
            trial._Popart.values[key] = value
            trial.outer_fragment_schedule(), trial.outer_fragment_excluded(), trial.just_in_time_copies()
        self.values[key] = value
        self._owner._record(f"_Popart.{key}", value)
        return self._owner


class _Precision:
    """``Options.Precision``: the partials type of matmuls and convolutions (``"float"``, the
    default, or ``"half"``: half the AMP's fp32-partials passes, as on hardware)."""

    def __init__(self, owner: "Options"):
        self._owner = owner

    def setPartialsType(self, dtype) -> "Options":
        """``"float"``/``"half"`` (any case), or a dtype whose name ends in float32/float16/half."""
        name = str(dtype).lower().rpartition(".")[2]
        kind = {"float": "float", "float32": "float", "half": "half", "float16": "half"}.get(name)
        if kind is None:
            raise OptionsError(f"Precision.setPartialsType({dtype!r}): the partials type must be float "
                               "(torch.float) or half (torch.half)")
        self._owner._Popart.set("partialsTypeMatMuls", kind)
        self._owner._merge_poplin_options("conv", {"partialsType": kind})  # PopTorch sets both (options.py)
        return self._owner


@dataclass(frozen=True)
class BatchSerialization:
    """PopART's ``batchSerializationSettings`` (:meth:`Options.batch_serialization`): ``factor`` pieces each
    op's batch is split into; ``concat_on``: the changes of context (``"ipu"``, ``"phase"``, ``"stage"``) at
    which the pieces are concatenated again; ``context``: ``"Fwd"`` or ``"Bwd"``
    (BatchSerializationTransformContext); ``method``: ``"UnrollDynamic"``, ``"UnrollStatic"`` or ``"Loop"``;
    ``schedule``: the BatchSerializationBatchSchedule (``"OverlapOnIo"`` and ``"OverlapOnCompute"`` overlap one
    piece's remote copies with another piece's compute)."""

    factor: int
    concat_on: frozenset
    context: str
    method: str
    schedule: str = "Isomorphic"

    @property
    def overlaps_io(self) -> bool:
        """Whether the pieces' remote loads run while earlier pieces compute (PopART's DecomposeLoops for Loop,
        the BatchSerialScheduler's order for the unrolled methods)."""
        return self.factor > 1 and self.schedule in ("OverlapOnIo", "OverlapOnCompute")


class Options:
    """The PopTorch options the simulator understands (see the module docstring)."""

    #: PopART ``replicatedCollectivesSettings`` keys, by the collective each merges (all off by
    #: default: willow/include/popart/sessionoptions.hpp ReplicatedCollectivesSettings)
    MERGE_KEYS = {"all_reduce": "mergeAllReduceCollectives", "reduce_scatter": "mergeReduceScatterCollectives",
                  "all_gather": "mergeAllGatherCollectives"}

    #: PopART's ``AccumulateOuterFragmentSchedule`` members in value order (sessionoptions.hpp), and the two
    #: ``accumulateOuterFragmentSettings`` keys: how a pipeline's weight update (the accumulate outer
    #: fragment) is scheduled across its IPUs, and the IPUs (virtual graphs) left out of any overlap
    OUTER_FRAGMENT_SCHEDULES = ("Scheduler", "Serial", "OverlapCycleOptimized", "OverlapMemoryOptimized")
    OUTER_FRAGMENT_KEYS = ("accumulateOuterFragmentSettings.schedule",
                           "accumulateOuterFragmentSettings.excludedVirtualGraphs")

    #: PopART's ``batchSerializationSettings`` (sessionoptions.hpp BatchSerializationSettings): its keys
    #: (:mod:`sim.compiler.batch_serial`) and the members of its enums in value order
    BATCH_SERIAL_KEYS = tuple(f"batchSerializationSettings.{key}" for key in (
        "factor", "concatOnVirtualGraphChange", "concatOnExecutionPhaseChange", "concatOnPipelineStageChange",
        "transformContext", "method", "batchSchedule"))
    BATCH_SERIAL_METHODS = ("UnrollDynamic", "UnrollStatic", "Loop")
    BATCH_SERIAL_CONTEXTS = ("Fwd", "Bwd")
    BATCH_SERIAL_SCHEDULES = ("Scheduler", "Isomorphic", "OverlapOnIo", "OverlapOnCompute")
    #: PopART's ``executionPhaseSettings`` IO schedule of each TensorLocations class the phases load
    #: (ExecutionPhaseIOSchedule: Preload, in the phase before; OnDemand, in the phase), and its default
    PHASE_IO_SCHEDULES = {"weight": ("executionPhaseSettings.weightIOSchedule", "Preload"),
                          "activation": ("executionPhaseSettings.activationIOSchedule", "Preload"),
                          "accumulator": ("executionPhaseSettings.accumulatorIOSchedule", "Preload")}

    #: PopART's sharding domain of each tensor class TensorLocations can shard, a ``(CommGroupType,
    #: group size)`` pair (``TensorLocationSettings.location.shardingDomain``, a ``CommGroup``)
    SHARDING_DOMAIN_KEYS = {"weight": "weightTensorLocationSettings.location.shardingDomain",
                            "optimizer": "optimizerStateTensorLocationSettings.location.shardingDomain",
                            "accumulator": "accumulatorTensorLocationSettings.location.shardingDomain"}

    #: PopART's Poplar option maps for poplin (SessionOptions ``convolutionOptions``, ``matmulOptions``),
    #: as set through ``_Popart.set``, and the keys of them the simulator models
    POPLIN_OPTION_MAPS = {"conv": "_Popart.convolutionOptions", "matmul": "_Popart.matmulOptions"}
    MODELLED_POPLIN_KEYS = {"use128BitConvUnitLoad", "enableFastReduce", "enableMultiStageReduce"}

    #: options this class models; anything else recorded is reported as unmodelled
    MODELLED = {"deviceIterations", "replicationFactor", "Training.gradientAccumulation",
                "outputMode", "enableSyntheticData", "setAvailableMemoryProportion",
                "logCycleCount", "randomSeed", "setExecutionStrategy", "syncPattern", "pipelineCopies",
                "cachedGraphFunctions", "stepIOCallbacks", "hostProcesses", "hostDataRate", "streamCallbackThreads",
                "memoryMargin",
                "autoRoundNumIPUs", "TensorLocations.numIOTiles",
                "TensorLocations.setWeightLocation", "TensorLocations.setActivationLocation",
                "TensorLocations.setOptimizerLocation", "TensorLocations.setAccumulatorLocation",
                "_Popart.defaultPrefetchBufferingDepth", "_Popart.defaultBufferingDepth", "_Popart.partialsTypeMatMuls",
                "_Popart.bufferingDepthMap", "_Popart.prefetchBufferingDepthMap", "_Popart.rearrangeStreamsOnHost",
                "_Popart.rearrangeAnchorsOnHost",
                "_Popart.enableOutlining", "_Popart.aliasZeroCopy", "_Popart.outlineThreshold",
                "_Popart.subgraphCopyingStrategy", "_Popart.autoRecomputation", "_Popart.explicitRecomputation",
                "_Popart.enablePrefetchDatastreams", "Precision.setPartialsType",
                "_Popart.enableStableNorm", "_Popart.enableFullyConnectedPass", "_Popart.enableNonStableSoftmax",
                "_Popart.automaticLossScalingSettings.enabled", "Training.setAutomaticLossScaling",
                *(f"_Popart.replicatedCollectivesSettings.{key}" for key in MERGE_KEYS.values()),
                *(f"_Popart.{key}" for key in OUTER_FRAGMENT_KEYS),
                *(f"_Popart.{key}" for key in BATCH_SERIAL_KEYS),
                *(f"_Popart.{key}" for key, _ in PHASE_IO_SCHEDULES.values()),
                *(f"_Popart.{key}" for key in SHARDING_DOMAIN_KEYS.values())}

    def __init__(self):
        self.device_iterations = 1
        self.replication_factor = 1
        self.output_mode = OutputMode.Default
        self.output_return_period = 1
        self.synthetic_data = False
        self.available_memory_proportion: dict[int, float] = {}
        self.log_cycle_count = False
        self.random_seed: int | None = None
        self.execution_strategy: _Strategy | None = None
        self.sync_pattern = SyncPattern.Full
        self.pipeline_copies = PipelineCopies.Merged
        self.graph_functions = False
        self.step_io_callbacks = True
        self.stream_callback_threads = 1
        self._host_processes: int | None = None
        self._host_data_rate: float | None = None
        self._host_data_async = True
        self.auto_round_num_ipus = False
        #: PopART's explicit pipelining (a pipeline with useHostCopyOps and enableExplicitMainLoops: PopXL's, or
        #: a sim.popart session's), set by those front ends: its recomputation checks differ
        #: (sim.schedule.recomputation.check_pipeline)
        self.explicit_pipelining = False
        self.input_group_size = 1
        self.input_group_type = CommGroupType.Consecutive
        self.set_options: dict[str, object] = {}
        self.Training = _Training(self)
        self.TensorLocations = _TensorLocations(self)
        self._Popart = _Popart(self)
        self.Precision = _Precision(self)

    def _record(self, name: str, value) -> None:
        self.set_options[name] = value

    # --- setters (PopTorch names) -------------------------------------------------------
    def deviceIterations(self, device_iterations: int) -> "Options":
        """Micro-batch loops (times gradient accumulation) run per call, without the host."""
        self.device_iterations = _positive_int("deviceIterations", device_iterations, MAX_MICRO_BATCHES_PER_CALL)
        self._record("deviceIterations", device_iterations)
        return self

    def replicationFactor(self, replication_factor: int) -> "Options":
        self.replication_factor = _positive_int("replicationFactor", replication_factor)
        self._record("replicationFactor", replication_factor)
        return self

    def outputMode(self, output_mode: OutputMode, output_return_period: int | None = None) -> "Options":
        """Which outputs come back: All, Final, Sum, EveryN (with its period) or Default."""
        if not isinstance(output_mode, OutputMode):
            raise OptionsAssertionError(f"outputMode expects a sim.OutputMode, got {output_mode!r}")
        if output_mode == OutputMode.EveryN:
            if output_return_period is None:
                raise OptionsError("OutputMode.EveryN needs output_return_period")
            self.output_return_period = _positive_int("output_return_period", output_return_period)
        elif output_return_period is not None:
            raise OptionsError("output_return_period is only valid with OutputMode.EveryN")
        self.output_mode = output_mode
        self._record("outputMode", f"EveryN({self.output_return_period})" if output_mode == OutputMode.EveryN
                     else output_mode.name)
        return self

    def enableSyntheticData(self, enabled: bool) -> "Options":
        """No host IO: inputs are made on the device, outputs are not sent back."""
        self.synthetic_data = bool(enabled)
        self._record("enableSyntheticData", bool(enabled))
        return self

    def setAvailableMemoryProportion(self, proportions: dict) -> "Options":
        """Per-IPU share of tile memory matmuls, convolutions, lookups and scatters may use as temporaries
        (poplin's plans and popops' slice plans): {"IPU0": 0.3}."""
        parsed = {}
        for key, value in proportions.items():
            if not (isinstance(key, str) and key.startswith("IPU") and key[3:].isdigit()):
                raise OptionsError(f"setAvailableMemoryProportion: key {key!r} must look like 'IPU0'")
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise OptionsError(f"setAvailableMemoryProportion: {key} = {value!r} must be in (0, 1]")
            parsed[int(key[3:])] = float(value)
        self.available_memory_proportion.update(parsed)
        self._record("setAvailableMemoryProportion", dict(proportions))
        return self

    def logCycleCount(self, log_cycle_count: bool) -> "Options":
        """Let ``cycleCount()`` report the cycles of the latest run."""
        self.log_cycle_count = bool(log_cycle_count)
        self._record("logCycleCount", bool(log_cycle_count))
        return self

    def setExecutionStrategy(self, strategy: _Strategy) -> "Options":
        """PipelinedExecution, ShardedExecution, SerialPhasedExecution or ParallelPhasedExecution."""
        if not isinstance(strategy, _Strategy):
            raise OptionsAssertionError(f"setExecutionStrategy expects an execution strategy, got {strategy!r}")
        self.execution_strategy = strategy
        self._record("setExecutionStrategy", type(strategy).__name__)
        return self

    def syncPattern(self, sync_pattern: SyncPattern) -> "Options":
        """Full, SinglePipeline or ReplicaAndLadder."""
        if not isinstance(sync_pattern, SyncPattern):
            raise OptionsAssertionError(f"syncPattern expects a SyncPattern, got {sync_pattern!r}")
        self.sync_pattern = sync_pattern
        self._record("syncPattern", sync_pattern.name)
        return self

    def pipelineCopies(self, mode: PipelineCopies) -> "Options":
        """The simulator's own: how a pipeline cycle runs its stages' inter-IPU copies,
        ``PipelineCopies.Merged`` (PopART and PopTorch, the default) or ``PerStage`` (TensorFlow's
        IPU pipelines: each stage's copies one after another)."""
        if not isinstance(mode, PipelineCopies):
            raise OptionsError(f"pipelineCopies expects a PipelineCopies (Merged or PerStage), got {mode!r}")
        self.pipeline_copies = mode
        self._record("pipelineCopies", mode.name)
        return self

    def cachedGraphFunctions(self, enabled: bool = True) -> "Options":
        """The simulator's own: run the program as TensorFlow's IPU backend builds it, each convolution,
        matmul and norm (and a backward convolution's weight transpose) a cached poputil graph function
        (graphcore/tensorflow ``conv_graph_caching.cc``, ``dot_graph_caching.cc``,
        ``norm_graph_caching.cc``), whose every call copies its inputs into the function's parameters and
        its results out (poplibs ``GraphFunction.cpp`` ``VoidFunction::operator()``), and PopART's
        outlining, which TensorFlow does not run, off (:mod:`sim.compiler.graph_functions`). Default off
        (PopART and PopTorch)."""
        if not isinstance(enabled, bool):
            raise OptionsError(f"cachedGraphFunctions expects True or False, got {enabled!r}")
        self.graph_functions = enabled
        self._record("cachedGraphFunctions", enabled)
        return self

    def stepIOCallbacks(self, enabled: bool = True) -> "Options":
        """The simulator's own: the host serves the stream copies through PopART's StepIO, as PopTorch and
        PopART run them (the default): its callback thread does a fixed piece of work before each
        replica's input copy (``[host_link] stream_callback_s`` of the system's config), on the IPU's
        path unless the copy was fetched ahead. Off for a runtime whose work per copy is not measured
        (PopRT's, TensorFlow's infeeds): its copies pay only their request, fill and transfer, and the
        run's notes say so; and for PopXL, whose sessions count theirs in the run's host work."""
        if not isinstance(enabled, bool):
            raise OptionsError(f"stepIOCallbacks expects True or False, got {enabled!r}")
        self.step_io_callbacks = enabled
        self._record("stepIOCallbacks", enabled)
        return self

    def hostProcesses(self, processes: int) -> "Options":
        """The simulator's own: the host processes (PopRun instances) that feed the replicas, each
        running the stream callbacks of its share of them (default: :meth:`num_instances`, one for a
        plain run); it must divide the replicas, as PopRun's instances do (checked by :meth:`validate`).
        Only the host's filling of input buffers depends on it (:meth:`streamCallbackThreads`)."""
        self._host_processes = _positive_int("hostProcesses", processes)
        self._record("hostProcesses", processes)
        return self

    def hostDataRate(self, samples_per_second: float, asynchronous: bool = True) -> "Options":
        """The simulator's own: the samples per second each host process's data pipeline (its
        DataLoader or infeed: reading, decoding, augmenting, collating) delivers, as the pipeline
        timed alone gives it (PopTorch's efficient data-loading tutorial times its DataLoader without
        the IPU this way), in the samples the run counts (a packed model's sequences, not its packs:
        ``Graph.samples_per_row`` of them a micro-batch row). ``asynchronous`` (PopTorch's ``DataLoaderMode.Async``, TensorFlow's
        infeeds): the pipeline makes the next call's samples while a call runs, so a slower one sets
        the pace; False (``DataLoaderMode.Sync``): it runs between the calls, adding its time to
        each. Default: not set, the pipeline keeps up with anything (the run's notes say what it
        would have to deliver)."""
        if (isinstance(samples_per_second, bool) or not isinstance(samples_per_second, (int, float))
                or not math.isfinite(samples_per_second) or samples_per_second <= 0):
            raise OptionsError(f"hostDataRate({samples_per_second!r}): expected the samples per second a host "
                               "process's data pipeline delivers, a number above 0 (say 40000.0)")
        if not isinstance(asynchronous, bool):
            raise OptionsError(f"hostDataRate(..., asynchronous={asynchronous!r}): expected True (the pipeline "
                               "runs ahead of the calls) or False (it runs between them)")
        self._host_data_rate = float(samples_per_second)
        self._host_data_async = asynchronous
        self._record("hostDataRate", samples_per_second if asynchronous else (samples_per_second, False))
        return self

    def host_data_rate(self) -> float | None:
        """:meth:`hostDataRate` (samples per second a host process), or None when not set."""
        return self._host_data_rate

    def host_data_asynchronous(self) -> bool:
        """Whether the host's data pipeline runs ahead of the calls (:meth:`hostDataRate`)."""
        return self._host_data_async

    def memoryMargin(self, fraction: float) -> "Options":
        """The simulator's own: a program fits only if every IPU's fullest tile, raised by
        ``fraction`` (0 to 1; default 0), fits in a tile. Poplar's fullest tile runs 8-15 % above an
        even spread of the same bytes, which the simulator does not model
        (:data:`sim.compiler.memory.FULLEST_TILE_EXCESS`), so a margin of 0.08 keeps a configuration
        only with room for the least of that."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise OptionsError(f"memoryMargin({fraction!r}): expected a fraction from 0 to 1 (0.08: 8 % of a tile)")
        self._memory_margin = float(fraction)
        self._record("memoryMargin", fraction)
        return self

    def memory_margin(self) -> float:
        """:meth:`memoryMargin` (0 unless set)."""
        return getattr(self, "_memory_margin", 0.0)

    def host_processes(self) -> int:
        """Host processes feeding the replicas (:meth:`hostProcesses`, else :meth:`num_instances`)."""
        return self._host_processes or self.num_instances()

    def replicas_per_host_process(self) -> int:
        """Replicas whose input buffers one host process fills (the most any process has)."""
        return -(-self.total_replicas() // self.host_processes())

    def streamCallbackThreads(self, threads: int) -> "Options":
        """Poplar's engine options ``streamCallbacks.multiThreadMode`` and ``numWorkerThreads`` (set
        through ``POPLAR_ENGINE_OPTIONS``): the threads of a host process that run its stream
        callbacks, which copy every input buffer of its replicas. Default 1: Poplar's
        ``singleThread`` with ``numWorkerThreads`` 0, "the main thread will execute all of the
        callbacks" (Poplar API reference, RuntimeOptions); ``collaborative`` with ``auto`` workers
        gives about one a CPU core."""
        self.stream_callback_threads = _positive_int("streamCallbackThreads", threads)
        self._record("streamCallbackThreads", threads)
        return self

    def enableStableNorm(self, enabled: bool) -> "Options":
        """PopTorch's ``enableStableNorm`` (PopART's ``enableStableNorm``; TensorFlow's
        ``norms.use_stable_statistics``): every batch, group and layer norm estimates its statistics
        as poplin's ``normStatistics`` does with ``stableAlgo`` (``lib/poplin/Norms.cpp``; popart
        ``batchnormx.cpp``, ``groupnormx.cpp``): the mean's reduction, the mean subtracted from the
        activations, then the power's reduction, where the default reduces both at once; a
        distributed batch norm all-reduces the mean, then the power. Default: off."""
        self._Popart.set("enableStableNorm", enabled)
        return self

    @property
    def stable_norm(self) -> bool:
        """``enableStableNorm`` (``_Popart``'s ``enableStableNorm``), False by default."""
        return bool(self._Popart.values.get("enableStableNorm", False))

    #: PopART patterns the simulator models when ``_Popart.patterns`` (PopTorch's ``setPatterns``) turns them on
    MODELLED_PATTERNS = ("TiedGather", "TiedGatherAccumulate")

    @property
    def tied_gather_accumulate(self) -> bool:
        """PopART's TiedGather and TiedGatherAccumulate patterns, both on in ``_Popart.patterns`` (off by
        default; Graphcore's PyTorch BERT, GPT-2 and Conformer scripts turn them on, PopART's bert.py
        through its custom patterns): with gradient accumulation a tied embedding's gathered rows are
        added straight into its accumulator (:func:`sim.graph.training.sparse_accumulate_tied_gathers`)."""
        patterns = self._Popart.values.get("patterns")
        return isinstance(patterns, dict) and all(bool(patterns.get(k)) for k in self.MODELLED_PATTERNS)

    @property
    def non_stable_softmax(self) -> bool:
        """PopART's ``enableNonStableSoftmax`` (``_Popart.set``; PopRT's ``enable_non_stable_softmax``),
        False by default: every softmax runs popnn's SOFTMAX instead of SOFTMAX_STABLE (popart
        ``softmaxx.cpp``), without the row maximum's reduction and its subtraction. A log-softmax
        stays stable (``popnn::logSoftmaxInPlace``)."""
        return bool(self._Popart.values.get("enableNonStableSoftmax", False))

    @property
    def fully_connected_pass(self) -> bool:
        """PopART's ``enableFullyConnectedPass`` (default True): matmuls carry poplin's
        ``fullyConnectedPass``. False (TensorFlow's ``matmuls.clear_pass_type``): each is planned as
        poplin's plain matmul."""
        return bool(self._Popart.values.get("enableFullyConnectedPass", True))

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> "Options":
        """Round the IPU count up to a power of two instead of failing."""
        self.auto_round_num_ipus = bool(auto_round_num_ipus)
        self._record("autoRoundNumIPUs", bool(auto_round_num_ipus))
        return self

    def inputReplicaGrouping(self, input_group_size: int, input_group_type: CommGroupType) -> "Options":
        """Replicas in a group of ``input_group_size`` receive the same input data (PopTorch's
        checks: the size divides ``replicationFactor``, set before; ``NoGrouping`` is groups of 1)."""
        if input_group_type == CommGroupType.NoGrouping:
            input_group_size, input_group_type = 1, CommGroupType.Consecutive
        size = _positive_int("inputReplicaGrouping.input_group_size", input_group_size)
        if input_group_type not in (CommGroupType.Consecutive, CommGroupType.Orthogonal):
            raise OptionsValueError("inputReplicaGrouping: the group type must be CommGroupType.Consecutive, "
                                    f"Orthogonal or NoGrouping, got {input_group_type!r}")
        self._check_input_group_size(size)  # before setting, as PopTorch checks
        self.input_group_size, self.input_group_type = size, input_group_type
        self._record("inputReplicaGrouping", (size, input_group_type.name))
        return self

    def check_input_grouping(self) -> None:
        """The input replica groups divide the replicas (checked again when a model is wrapped, in
        case ``replicationFactor`` changed after ``inputReplicaGrouping``)."""
        self._check_input_group_size(self.input_group_size)

    def _check_input_group_size(self, size: int) -> None:
        if self.replication_factor % size:
            raise OptionsValueError(f"inputReplicaGrouping: input_group_size {size} must be a factor of "
                                    f"replicationFactor ({self.replication_factor}); set replicationFactor first")

    def num_instances(self) -> int:
        """Processes (PopDist instances) running this program, each with its own replicas."""
        return 1

    def instance_index(self) -> int:
        """Which of :meth:`num_instances` this process is."""
        return 0

    def total_replicas(self) -> int:
        """Replicas over all instances: what collectives across replicas span."""
        return self.replication_factor * self.num_instances()

    def _popart_bool(self, key: str, default: bool) -> bool:
        """The ``_Popart`` option ``key`` (``default`` when unset), which must be True or False."""
        value = self._Popart.values.get(key, default)
        if not isinstance(value, bool):
            raise OptionsError(f"_Popart {key} = {value!r}: expected True or False")
        return value

    def _popart_enum(self, key: str, names: tuple[str, ...], default: str, enum: str) -> str:
        """The ``_Popart`` option ``key``, one of popart's enum ``enum`` whose members are ``names`` in value
        order, as a name: given as the name, the enum member (``popart.X.Name``, its string) or its value."""
        value = self._Popart.values.get(key, default)
        value = getattr(value, "value", value)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
            return names[value]
        if isinstance(value, str) and value.rpartition(".")[2] in names:
            return value.rpartition(".")[2]
        choices = ", ".join(f"{n} ({i})" for i, n in enumerate(names))
        raise OptionsError(f"_Popart {key} = {value!r}: expected one of {choices}, as popart.{enum}")

    def outer_fragment_schedule(self, clipped_pipeline: bool = False) -> str:
        """How PopART schedules a pipeline's weight update (its accumulate outer fragment) across the
        IPUs: ``accumulateOuterFragmentSettings.schedule`` as an :data:`OUTER_FRAGMENT_SCHEDULES` name,
        an enum member or its value; default ``Serial``, PopART's (sessionoptions.hpp
        AccumulateOuterFragmentSettings: "ensure ops are executed in virtual graph ID order"), or
        ``Scheduler`` for a ``clipped_pipeline``, which PopTorch sets when a pipeline clips its gradients
        and the schedule is not set (popart_compiler Compiler.cpp: Serial "is currently incompatible with
        gradient clipping and pipelining")."""
        return self._popart_enum(self.OUTER_FRAGMENT_KEYS[0], self.OUTER_FRAGMENT_SCHEDULES,
                                 "Scheduler" if clipped_pipeline else "Serial", "AccumulateOuterFragmentSchedule")

    def outer_fragment_excluded(self) -> frozenset[int]:
        """The IPUs of a replica (virtual graph ids) PopART keeps out of the weight update's overlap:
        ``accumulateOuterFragmentSettings.excludedVirtualGraphs``, ids or their strings (PopTorch
        scripts pass ``["0"]``); default none."""
        value = self._Popart.values.get(self.OUTER_FRAGMENT_KEYS[1], [])
        items = [value] if isinstance(value, (int, str)) else value
        try:
            ids = frozenset(int(v) for v in items if not isinstance(v, bool))
        except (TypeError, ValueError):
            ids = None
        if ids is None or len(ids) != len(list(items)) or any(i < 0 for i in ids):
            raise OptionsError(f"_Popart {self.OUTER_FRAGMENT_KEYS[1]} = {value!r}: expected a list of "
                               "virtual graph ids (IPU numbers within a replica, e.g. [\"0\"] or [0])")
        return ids

    def prefetch_datastreams(self) -> bool:
        """PopART ``enablePrefetchDatastreams`` (default on, as PopTorch leaves it): Poplar prepares an
        input stream's data for its next copy while the IPU computes (sessionoptions.hpp)."""
        return self._popart_bool("enablePrefetchDatastreams", True)

    def automatic_loss_scaling(self) -> bool:
        """PopART ``automaticLossScalingSettings.enabled`` (PopTorch ``Training.setAutomaticLossScaling``;
        default off): gradient statistics and the loss scale's update (:mod:`sim.graph.loss_scaling`)."""
        return self._popart_bool("automaticLossScalingSettings.enabled", False)

    def prefetch_depth(self) -> int:
        """Host stream prefetch depth: PopART's ``defaultBufferingDepth``, or its deprecated alias
        ``defaultPrefetchBufferingDepth``, which wins when set (``SessionOptions::getBufferingDepth``
        copies it over the other); default 1."""
        values = self._Popart.values
        old, new = self._Popart.BUFFERING_DEPTH_KEYS
        return int(values[old] if old in values else values.get(new, 1))

    def rearrangements_set(self) -> dict[str, str]:
        """Direction -> option, for each of ``rearrangeStreamsOnHost`` / ``rearrangeAnchorsOnHost`` the user turned
        on (``_Popart.set``; a session's defaults are not counted)."""
        return {direction: key for direction, key in self._Popart.REARRANGED_ON_HOST_KEYS.items()
                if self.set_options.get(f"_Popart.{key}")}

    def buffering_depth(self, tensor: str, direction: str) -> int:
        """The buffering depth of ``tensor``'s host stream (``direction``: ``"to_ipu"`` or ``"from_ipu"``), as
        PopART's ``SessionOptions::getBufferingDepth`` gives it: the tensor's entry in ``bufferingDepthMap`` (its
        deprecated alias ``prefetchBufferingDepthMap`` wins when not empty), else 1 for a stream the host
        rearranges (inputs with ``rearrangeStreamsOnHost``, anchors with ``rearrangeAnchorsOnHost``: PopART lets
        such streams overlap in memory), else :meth:`prefetch_depth`. PopART's errors: a depth below 1, and one
        above 1 for a stream the host rearranges."""
        values = self._Popart.values
        rearranged = bool(values.get(self._Popart.REARRANGED_ON_HOST_KEYS[direction], False))
        old, new = self._Popart.BUFFERING_DEPTH_MAP_KEYS
        depths = values.get(old) or values.get(new) or {}
        depth = depths.get(tensor, 1 if rearranged else self.prefetch_depth())
        if depth < 1:
            raise OptionsError(f"Unable to support a buffering depth of {depth} for tensor {tensor} (minimum "
                               "buffering depth is 1): set its bufferingDepthMap entry to 1 or more")
        if depth > 1 and rearranged:
            raise OptionsError(f"Unable to support a buffering depth >1 for tensor {tensor} because the stream is "
                               "set to rearrange on the host (and PopART allows streams that are rearranged on the "
                               f"host to overlap in memory, making this unsafe): set "
                               f"{self._Popart.REARRANGED_ON_HOST_KEYS[direction]} False, or its depth to 1")
        return depth

    def batch_serialization(self) -> BatchSerialization:
        """PopART's ``batchSerializationSettings`` as set through ``_Popart.set`` (PopART's defaults for those
        not set: factor 0, concatenation on each change of virtual graph, execution phase and pipeline stage,
        transform context Fwd, method UnrollDynamic, schedule Isomorphic). A factor of 0 or 1 serialises nothing."""
        factor_key, ipu_key, phase_key, stage_key, context_key, method_key, schedule_key = self.BATCH_SERIAL_KEYS
        factor = self._Popart.values.get(factor_key, 0)
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 0:
            raise OptionsError(f"_Popart {factor_key} = {factor!r}: expected a whole number >= 0 (the pieces each "
                               "op's batch is split into; 0 or 1: none)")
        concat = frozenset(what for what, key in (("ipu", ipu_key), ("phase", phase_key), ("stage", stage_key))
                           if self._popart_bool(key, True))
        return BatchSerialization(factor, concat,
                                  self._popart_enum(context_key, self.BATCH_SERIAL_CONTEXTS, "Fwd",
                                                    "BatchSerializationTransformContext"),
                                  self._popart_enum(method_key, self.BATCH_SERIAL_METHODS, "UnrollDynamic",
                                                    "BatchSerializationMethod"),
                                  self._popart_enum(schedule_key, self.BATCH_SERIAL_SCHEDULES, "Isomorphic",
                                                    "BatchSerializationBatchSchedule"))

    def phase_io_schedule(self, kind: str) -> str:
        """When phased execution loads TensorLocations class ``kind``'s off-chip tensors through the IO tiles:
        ``"Preload"`` (on the IO tiles during the phase before) or ``"OnDemand"`` (in the phase that reads them),
        PopART's ``executionPhaseSettings`` IO schedule (:data:`PHASE_IO_SCHEDULES`; the optimizer state's is
        not modelled: it is loaded for the weight update, on demand)."""
        if kind not in self.PHASE_IO_SCHEDULES:
            return "OnDemand"
        key, default = self.PHASE_IO_SCHEDULES[kind]
        return self._popart_enum(key, ("Preload", "OnDemand"), default, "ExecutionPhaseIOSchedule")

    def recomputation_type(self, pipelined: bool) -> int:
        """PopART's ``autoRecomputation`` as its number (RecomputationType: None 0, Standard 1, NormOnly 2,
        Pipeline 3, RecomputeAll 4): the value set, else PopTorch's default, Pipeline for a pipelined run
        (popart_compiler Compiler.cpp) and None otherwise (PopART's)."""
        value = self._Popart.values.get("autoRecomputation")
        if value is None:
            return 3 if pipelined else 0
        code = _recomputation_code(value)
        if code not in range(5):
            raise OptionsError(f"autoRecomputation = {value!r}: not a popart.RecomputationType; use None (0), "
                               "Standard (1), NormOnly (2), Pipeline (3) or RecomputeAll (4)")
        return code

    def pipeline_recomputation(self) -> bool:
        """Whether a pipelined training run recomputes its forward stages: any ``autoRecomputation`` but
        None (PopART's Pipeline transform, pipeline.cpp: every pre-loss op it need not stash is
        recomputed); PopTorch's default is Pipeline (:meth:`recomputation_type`)."""
        return self.recomputation_type(pipelined=True) != 0

    def explicit_recomputation(self) -> bool:
        """PopART ``explicitRecomputation`` (default off): the recomputed ops are cloned into the backward
        pass; with RecomputeAll the ops after the last checkpoint are recomputed too
        (:mod:`sim.schedule.recomputation`)."""
        return self._popart_bool("explicitRecomputation", False)

    def outlining(self) -> bool:
        """PopART ``enableOutlining`` (default on, as in PopART's SessionOptions): identical op
        sequences share one program (:mod:`sim.compiler.program_memory`), each call copying what it
        reads and makes (:mod:`sim.compiler.outlining`)."""
        return self._popart_bool("enableOutlining", True)

    def alias_zero_copy(self) -> bool:
        """PopART ``aliasZeroCopy`` (default off, sessionoptions.hpp): when on, the copies into and out
        of called subgraphs that liveness allows are elided; the simulator then prices none."""
        return self._popart_bool("aliasZeroCopy", False)

    def just_in_time_copies(self) -> bool:
        """PopART ``subgraphCopyingStrategy`` (default OnEnterAndExit, 0): with JustInTime (1) a call copies
        each input just before the op that first reads it and each output as soon as the op making it
        ends ("subgraphs may be lowered into multiple Poplar functions", sessionoptions.hpp), so only
        the copies next to one op are merged; a name or an enum member is taken too."""
        return self._popart_enum("subgraphCopyingStrategy", ("OnEnterAndExit", "JustInTime"), "OnEnterAndExit",
                                 "SubgraphCopyingStrategy") == "JustInTime"

    def outline_threshold(self) -> float:
        """PopART ``outlineThreshold`` (default 1.0): the value a repeated sequence must exceed to be
        outlined (:mod:`sim.compiler.outlining`)."""
        value = self._Popart.values.get("outlineThreshold", 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OptionsError(f"_Popart outlineThreshold = {value!r}: expected a number")
        return float(value)

    def merged_collectives(self) -> frozenset[str]:
        """The kinds of cross-replica collective (``all_reduce``, ``reduce_scatter``, ``all_gather``)
        PopART merges into one call per weight update (``_Popart`` ``replicatedCollectivesSettings.
        mergeAllReduceCollectives`` and its two siblings; default: none, each tensor its own)."""
        return frozenset(kind for kind, key in self.MERGE_KEYS.items()
                         if self._popart_bool(f"replicatedCollectivesSettings.{key}", False))

    def sharding_domain(self, kind: str) -> tuple[int, int]:
        """``(stride, group size)`` of the replicas a sharded tensor of class ``kind`` (``weight``,
        ``optimizer``, ``accumulator``) is split over: PopART's ``shardingDomain`` of that class
        where set, else each process's own replicas when several processes run (PopTorch sets
        ``CommGroup(Consecutive, replicatedGraphCount)`` then: popart_compiler Compiler.cpp), else
        all replicas (PopART's default ``CommGroup()``, type All)."""
        key = self.SHARDING_DOMAIN_KEYS[kind]
        value = self._Popart.values.get(key)
        if value is None:
            return (1, self.replication_factor) if self.num_instances() > 1 else (1, self.total_replicas())
        try:
            group_type, size = value
            return comm_group(self.total_replicas(), group_type, size)
        except (TypeError, ValueError, OptionsError) as e:
            raise OptionsError(f"_Popart {key} = {value!r}: expected a (CommGroupType, group size) pair whose "
                               f"group size divides the {self.total_replicas()} replicas ({e})") from None

    def partials_type(self, op_kind: str | None = None) -> str:
        """``"float"`` or ``"half"``: the partials of a matmul (PopART ``partialsTypeMatMuls``) or, for a
        convolution ``op_kind``, of a convolution (``convolutionOptions["partialsType"]``); PopTorch's
        ``Precision.setPartialsType`` sets both; poplin's default is float."""
        if op_kind in CONVOLUTION_KINDS:
            key = self.POPLIN_OPTION_MAPS["conv"]
            held = self.set_options.get(key, {})
            kind = str((held if isinstance(held, dict) else {}).get("partialsType", "float")).lower()
            where = f"{key}['partialsType']"
        else:
            kind = str(self._Popart.values.get("partialsTypeMatMuls", "float")).lower()
            where = "_Popart partialsTypeMatMuls"
        if kind not in ("float", "half"):
            raise OptionsError(f"{where} = {kind!r}: expected 'float' or 'half'")
        return kind

    def randomSeed(self, random_seed: int) -> "Options":
        """Accepted for compatibility: the simulator is deterministic and has no randomness."""
        self.random_seed = int(random_seed)
        self._record("randomSeed", int(random_seed))
        return self

    # --- queries --------------------------------------------------------------------------
    def memory_proportion(self, ipu: int) -> float:
        """availableMemoryProportion of ``ipu`` (PopTorch's default is 0.6)."""
        return self.available_memory_proportion.get(ipu, 0.6)

    def resolved_output_mode(self, training: bool) -> OutputMode:
        """Default means All for inference and Final for training, as in PopTorch."""
        if self.output_mode == OutputMode.Default:
            return OutputMode.Final if training else OutputMode.All
        return self.output_mode

    def unmodelled(self) -> dict[str, object]:
        """Options that were set but have no effect on the simulation; of a Poplar option map
        (:data:`POPLIN_OPTION_MAPS`), each key the simulator does not model, as ``map.key``."""
        out = {}
        for k, v in self.set_options.items():
            if k in self.POPLIN_OPTION_MAPS.values() and isinstance(v, dict):
                modelled = self.MODELLED_POPLIN_KEYS | ({"partialsType"} if k == self.POPLIN_OPTION_MAPS["conv"] else set())
                out.update({f"{k}.{key}": value for key, value in v.items() if key not in modelled})
            elif k == "_Popart.patterns" and isinstance(v, dict):
                out.update({f"{k}.{name}": value for name, value in v.items() if name not in self.MODELLED_PATTERNS})
            elif k not in self.MODELLED:
                out[k] = v
        return out

    def _merge_poplin_options(self, which: str, values: dict) -> None:
        """Set poplin ``values`` (option name: value) in PopART's ``which`` ("conv" or "matmul") option
        map, keeping what the map already holds."""
        key = self.POPLIN_OPTION_MAPS[which]
        held = self.set_options.get(key)
        self._Popart.set(key.removeprefix("_Popart."), {**(held if isinstance(held, dict) else {}), **values})

    def set_poplin_options(self, values: dict) -> "Options":
        """Set poplin ``values`` (option name: value) for matmuls and convolutions alike, in PopART's
        ``matmulOptions`` and ``convolutionOptions`` maps (as PopRT's compiler options do), keeping
        what the maps already hold."""
        for which in self.POPLIN_OPTION_MAPS:
            self._merge_poplin_options(which, values)
        return self

    def poplin_options(self, convolution: bool) -> dict:
        """poplin's options a convolution's (``convolution``) or a matmul's vertices run with, as
        PopART's ``convolutionOptions`` or ``matmulOptions`` (its option maps for poplin) set them:
        the :class:`~sim.hardware.system.IPU` fields ``conv_unit_load_bits`` (128 with
        ``use128BitConvUnitLoad``, else 64), ``fast_reduce`` (``enableFastReduce``, default off) and
        ``multi_stage_reduce`` (``enableMultiStageReduce``, default on)."""
        key = self.POPLIN_OPTION_MAPS["conv" if convolution else "matmul"]
        value = self.set_options.get(key, {})
        if not isinstance(value, dict):
            raise OptionsError(f"{key} = {value!r}: expected a dict of Poplar option names to values, "
                               "as PopART's SessionOptions takes it")

        def flag(name: str, default: bool) -> bool:
            text = str(value.get(name, default)).lower()
            if text not in ("true", "false"):
                raise OptionsError(f"{key}[{name!r}] = {value[name]!r}: expected 'true' or 'false' "
                                   "(poplin's option values)")
            return text == "true"
        return {"conv_unit_load_bits": 128 if flag("use128BitConvUnitLoad", False) else 64,
                "fast_reduce": flag("enableFastReduce", False),
                "multi_stage_reduce": flag("enableMultiStageReduce", True)}

    def clone(self) -> "Options":
        new = copy.deepcopy(self)
        for sub in (new.Training, new.TensorLocations, new._Popart, new.Precision):
            sub._owner = new
        return new

    def check_call_size(self) -> None:
        """The simulator's limit on the micro-batches of one call, over this process's replicas
        (check the replicas against the system first: that error is the clearer one)."""
        per_call = self.device_iterations * self.Training.gradient_accumulation * self.replication_factor
        if per_call > MAX_MICRO_BATCHES_PER_CALL:
            raise OptionsError(
                f"deviceIterations ({self.device_iterations:,}) x gradientAccumulation "
                f"({self.Training.gradient_accumulation:,}) x replicationFactor ({self.replication_factor:,}) "
                f"= {per_call:,} micro-batches per call, more than the simulator's limit of "
                f"{MAX_MICRO_BATCHES_PER_CALL:,} ({_WHY_MAX_MICRO_BATCHES})")

    def validate(self, training: bool) -> None:
        """PopTorch's checks on option combinations."""
        if not training and self.Training.gradient_accumulation > 1:
            raise OptionsError(
                "You must set Training.gradientAccumulation to 1 for inference models "
                f"(got {self.Training.gradient_accumulation}); accumulation only applies to training")
        mode = self.resolved_output_mode(training)
        if mode == OutputMode.EveryN:
            steps = self.device_iterations
            if steps % self.output_return_period:
                raise OptionsError(
                    f"OutputMode.EveryN({self.output_return_period}): deviceIterations "
                    f"({steps}) must be a multiple of the return period")
        processes, replicas = self.host_processes(), self.total_replicas()
        if "hostProcesses" in self.set_options and replicas % processes:
            raise OptionsError(
                f"hostProcesses({processes}): PopRun gives every instance the same number of replicas (its "
                f"--num-replicas must be a multiple of --num-instances), and {processes} does not divide the "
                f"{replicas} replicas; give a divisor of {replicas}")

    def __repr__(self) -> str:
        return f"Options({self.set_options})"


class InstanceOptions(Options):
    """Options of one PopDist instance of ``instances`` (its replicas are ``replicationFactor``; collectives and
    replicated tensor sharding span every instance's), for the front ends without options of their own for it
    (PopXL's ``Ir(replication='popdist')``, PopART's ``enableDistributedReplicatedGraphs``)."""

    def __init__(self, instances: int, index: int):
        super().__init__()
        self._instances, self._index = instances, index

    def num_instances(self) -> int:
        return self._instances

    def instance_index(self) -> int:
        return self._index
