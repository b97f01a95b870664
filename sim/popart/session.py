"""PopART's sessions on the simulator: ``InferenceSession``, ``TrainingSession`` and what they take.

A session imports its model (``fnModel``: a :class:`~sim.popart.builder.Builder`'s ``getModelProto()``, an
ONNX file or its bytes) with :func:`sim.onnx.load`, streaming the ``DataFlow``'s anchors to the host (its
outputs), and compiles it in ``prepareDevice()`` for the system that holds the device's IPUs (``system=``, an
ipusim keyword; else ``IPUSIM_SYSTEM``; else the smallest Mk2 system). ``run(stepio)`` simulates one call:
``batchesPerStep`` steps, each ``accumulationFactor`` micro-batches on every replica, as PopART's
``Session::run`` runs them. An InferenceSession's anchors are computed on the CPU with ONNX's reference
evaluator (and :mod:`sim.popart.reference_ops`); otherwise the arrays are zeros, and the notes say why. The
simulation is :attr:`simulation` (a :class:`sim.Run`), its cycles ``getCycleCount()`` (with
``instrumentWithHardwareCycleCounter``, as PopART), its report ``getSummaryReport()``. Out of tile memory
is PopART's ``OutOfMemoryException`` (or kept in a ``popart.OutOfMemoryError`` given as ``err``);
``compileAndExport`` / ``saveExecutable`` write the simulator's executable and ``loadExecutable`` reads it back.
The device's ``SyncPattern`` and the inputs' ``InputSettings`` (an overlapped exchange strategy) are the run's.

What each setting becomes (PopART's names, ``willow/include/popart/sessionoptions.hpp``):

* ``DataFlow(batchesPerStep, anchors)``: ``batchesPerStep`` is the call's device iterations; the anchors are the
  model's outputs, returned as their ``AnchorReturnType`` says (All, Final, Sum, EveryN);
* ``enableReplicatedGraphs`` / ``replicatedGraphCount``: the replicas; ``enableGradientAccumulation`` /
  ``accumulationFactor``: the micro-batches a weight update (training only, as PopART);
* ``virtualGraphMode`` Manual: ops on the IPUs ``builder.virtualGraph`` gave them, run one IPU at a time in
  program order, or with ``enablePipelining`` as a pipeline of the ops' ``pipelineStage`` (else their IPU); Auto:
  the same, on the IPUs PopART's AutoVirtualGraph split gives them (:func:`~sim.popart.placement.
  auto_virtual_graphs`, ``virtualGraphSplitRatios``); ExecutionPhases: the ops' ``executionPhase`` as phased
  execution (``executionPhaseSettings`` phases and stages: :func:`~sim.popart.placement.phased_strategy`), the
  activations between phases on or off chip as ``activationTensorLocationSettings`` says, weights, optimizer
  state and accumulators on chip unless their settings say OffChip (PopART's default); Off puts every op on
  IPU 0;
* ``enableDistributedReplicatedGraphs``: this process is one PopDist instance of ``globalReplicationFactor``;
* ``autoRecomputation`` (PopART's default None, a pipeline's too), ``explicitRecomputation``, ``numIOTiles``,
  ``syntheticDataMode``, ``partialsTypeMatMuls``,
  ``convolutionOptions`` / ``matmulOptions``, ``defaultPrefetchBufferingDepth``, ``enableOutlining``,
  ``outlineThreshold``, ``aliasZeroCopy``, ``enableStableNorm``, ``enableFullyConnectedPass``,
  ``enableNonStableSoftmax``, ``subgraphCopyingStrategy``, ``accumulateOuterFragmentSettings``,
  ``replicatedCollectivesSettings``, ``automaticLossScalingSettings.enabled``, the tensor location settings of
  weights, optimizer state and accumulators (off chip, replicated tensor sharding): as the same option of
  :class:`sim.Options` (PopTorch hands them to PopART by these names);
* any other option set: accepted, and named in the run's notes as having no modelled effect.

Optimizers (``SGD``, ``ConstSGD``, ``Adam``, ``Adaptive``) become the simulator's update
(:class:`sim.Optimizer`), their state and accumulator types its dtypes; ``updateOptimizerFromHost`` costs
PopART's OptimizerFromHost program (:func:`sim.optimizer_write_seconds`) on the script's clock.
"""

from __future__ import annotations

import collections
import copy
import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import compile as sim_compile
from .. import optimizer_write_seconds, rng_state_copy_seconds, run_executable, variable_copy_seconds
from ..compiler.memory import ONNX_REMEDIES, reworded
from ..errors import GraphError, OptionsError, OutOfMemoryError, UnsupportedOpError
from ..graph.training import Optimizer as SimOptimizer
from ..hardware.system import choose_system
from ..options import CPU_OUTPUTS_ENV_VAR, InstanceOptions, Options, OutputMode, OverlapMode, cpu_outputs
from ..options import TensorLocationSettings as SimLocationSettings
from ..results.report import format_summary, write_bytes
from ..schedule.hostio import rng_state_words
from ..strategy import AutoStage, PipelinedExecution, ShardedExecution, SyncPattern
from ..virtual_clock import device_call, frozen
from . import NotModelledError, VariableSettings
from .builder import (EXCHANGE_STRATEGY, REPLICATED_STREAM_MODE, TILE_SET, VARIABLE_SETTINGS, Builder,
                      unmodelled_annotations)
from .placement import auto_virtual_graphs, phased_strategy
from .reference_ops import OPS as REFERENCE_OPS

# --- data flow --------------------------------------------------------------------------------

#: the out-of-memory remedies as a PopART session says them: an ONNX model's, and its batch serialisation
_REMEDIES = {**ONNX_REMEDIES, "a smaller micro-batch": "a smaller micro-batch or more batch serialisation "
                                                       "(batchSerializationSettings.factor)"}
#: PopART's AnchorReturnTypeId names (dataflow.hpp) and the output mode each is
_RETURN_TYPES = {"FINAL": OutputMode.Final, "EVERYN": OutputMode.EveryN, "ALL": OutputMode.All,
                 "SUM": OutputMode.Sum}


class AnchorReturnType:
    """How an anchor comes back: ``AnchorReturnType("All")``, ``("Final")``, ``("Sum")`` or ``("EveryN", n)``,
    each optionally followed by the stream's TileSet and ExchangeStrategy (dataflow.hpp's two constructors)."""

    def __init__(self, artString: str, *args):
        key = str(artString).upper()
        if key not in _RETURN_TYPES:
            raise ValueError(f"Invalid anchor return type ID supplied: {artString!r} (PopART's: All, Final, Sum, "
                             "EveryN)")
        returnPeriod, args = (args[0], args[1:]) if key == "EVERYN" and args else (0, args)
        if key == "EVERYN" and (not isinstance(returnPeriod, int) or returnPeriod <= 0):
            raise ValueError("Must specify a positive return period for anchor return type EveryN")
        if len(args) > 2:
            raise TypeError(f"AnchorReturnType({artString!r}, ...): too many arguments")
        self._key, self._period = key, int(returnPeriod)
        self.tile_set, self.exchange_strategy = (int(getattr(a, "value", a)) for a in (tuple(args) + (0, 0))[:2])

    def tileSet(self) -> int:
        return self.tile_set

    def exchangeStrategy(self) -> int:
        return self.exchange_strategy

    def id(self) -> str:
        return {"FINAL": "Final", "EVERYN": "EveryN", "ALL": "All", "SUM": "Sum"}[self._key]

    def rp(self) -> int:
        return self._period

    @property
    def mode(self) -> OutputMode:
        return _RETURN_TYPES[self._key]

    def __eq__(self, other) -> bool:
        return isinstance(other, AnchorReturnType) and (self._key, self._period) == (other._key, other._period)

    def __repr__(self) -> str:
        return f"AnchorReturnType({self.id()!r}{f', {self._period}' if self._key == 'EVERYN' else ''})"


class DataFlow:
    """``DataFlow(batchesPerStep, {tensor: AnchorReturnType})``, or ``DataFlow(batchesPerStep, [tensors],
    AnchorReturnType)``: the steps of a call and the tensors streamed back to the host."""

    def __init__(self, batchesPerStep: int, anchors=None, art: AnchorReturnType | None = None):
        if isinstance(batchesPerStep, bool) or not isinstance(batchesPerStep, int) or batchesPerStep < 1:
            raise ValueError(f"DataFlow: batchesPerStep {batchesPerStep!r} must be a whole number >= 1")
        self._bps = batchesPerStep
        anchors = anchors or {}
        if isinstance(anchors, dict):
            self._anchors = dict(anchors)
        else:
            self._anchors = {t: art or AnchorReturnType("All") for t in anchors}
        for t, a in self._anchors.items():
            if not isinstance(a, AnchorReturnType):
                raise TypeError(f"DataFlow: anchor {t!r} needs a popart.AnchorReturnType, got {a!r}")

    def batchesPerStep(self) -> int:
        return self._bps

    def setBatchesPerStep(self, batchesPerStep: int) -> None:
        self.__init__(batchesPerStep, self._anchors)

    def anchors(self) -> list[str]:
        return list(self._anchors)

    def nAnchors(self) -> int:
        return len(self._anchors)

    def isAnchored(self, tensorId: str) -> bool:
        return tensorId in self._anchors

    def art(self, tensorId: str) -> AnchorReturnType:
        if tensorId not in self._anchors:
            raise KeyError(f"anchor {tensorId!r} not found in the DataFlow")
        return self._anchors[tensorId]


class PyStepIO:
    """A call's input arrays (tensor id -> array) and the anchor arrays its run fills."""

    def __init__(self, inputs: dict, outputs: dict):
        self.inputs, self.outputs = dict(inputs), dict(outputs)
        self.runtime_asserts = True

    def enableRuntimeAsserts(self, b: bool) -> None:
        self.runtime_asserts = bool(b)


class PyStepIOCallback:
    """A call's data through callbacks, as PopART's: ``input(id, prefetch) -> array``, ``input_complete(id)``,
    ``output(id) -> array`` (filled), ``output_complete(id)``, each once a micro-batch and replica."""

    def __init__(self, input_callback, input_complete_callback, output_callback, output_complete_callback):
        self.input, self.input_complete = input_callback, input_complete_callback
        self.output, self.output_complete = output_callback, output_complete_callback


class Patterns:
    """PopART's graph patterns: ``Patterns()`` (the default level), ``Patterns([names])``,
    ``enablePattern(name, on)``. The simulator models TiedGather and TiedGatherAccumulate (the embedding's
    gather in the tied projection's layout, as PopTorch's); the others set are named in the run's notes."""

    def __init__(self, patterns=None):
        self.set: dict[str, bool] = {}
        if isinstance(patterns, (list, tuple)):
            self.set = dict.fromkeys(map(str, patterns), True)
        self.enableRuntimeAsserts = True

    def enablePattern(self, name: str, enabled: bool) -> "Patterns":
        self.set[str(name)] = bool(enabled)
        return self

    def isPatternEnabled(self, name: str) -> bool:
        return self.set.get(str(name), False)


class InputShapeInfo:
    """PopART's shapes for inputs a model does not size; the simulator needs static shapes in the model, so an
    entry given here is refused by the session."""

    def __init__(self):
        self.infos: dict = {}

    def add(self, tensorId: str, info) -> None:
        self.infos[tensorId] = info

    def get(self, tensorId: str):
        return self.infos[tensorId]

    def has(self, tensorId: str) -> bool:
        return tensorId in self.infos


class PyWeightsIO:
    """Weight id -> the array ``readWeights`` fills or ``writeWeights`` reads."""

    def __init__(self, weights: dict):
        self.weights = dict(weights)


# --- session options ------------------------------------------------------------------------


class _Settings:
    """A PopART settings struct (an attribute bag): its fields and their defaults."""

    def __init__(self, **defaults):
        object.__setattr__(self, "_defaults", dict(defaults))
        for k, v in defaults.items():
            object.__setattr__(self, k, copy.deepcopy(v))

    def __setattr__(self, name, value):
        if name not in self._defaults:
            raise AttributeError(f"{type(self).__name__} has no field {name!r} (its fields: "
                                 f"{', '.join(self._defaults)})")
        object.__setattr__(self, name, value)

    def changed(self) -> dict:
        """Fields that differ from their defaults."""
        return {k: getattr(self, k) for k, d in self._defaults.items() if _differs(getattr(self, k), d)}


def _differs(value, default) -> bool:
    if isinstance(value, _Settings):
        return bool(value.changed())
    return not (value == default and type(value) is type(default)) and not (
        isinstance(default, int) and getattr(value, "value", None) == default)


class AccumulateOuterFragmentSettings(_Settings):
    def __init__(self, schedule=None, excludedVirtualGraphs=None):
        super().__init__(schedule=1, excludedVirtualGraphs=[])  # Serial, none (sessionoptions.hpp)
        if schedule is not None:
            self.schedule = schedule
        if excludedVirtualGraphs is not None:
            self.excludedVirtualGraphs = list(excludedVirtualGraphs)


class TensorLocation(_Settings):
    """Where a class of tensors lives: ``storage`` (TensorStorage OnChip / OffChip), ``replicatedTensorSharding``
    (ReplicatedTensorSharding Off / On), tile sets, ``shardingDomain`` (a CommGroup)."""

    def __init__(self, storage=None, replicatedTensorSharding=None, **fields):
        super().__init__(storage=0, loadTileSet=0, storageTileSet=0, replicatedTensorSharding=0, shardingDomain=None)
        given = {"storage": storage, "replicatedTensorSharding": replicatedTensorSharding, **fields}
        for k, v in given.items():
            if v is not None:
                setattr(self, k, v)


class TensorLocationSettings(_Settings):
    def __init__(self, location=None, minElementsForOffChip=None, minElementsForReplicatedTensorSharding=None):
        super().__init__(location=TensorLocation(), minElementsForOffChip=2,
                         minElementsForReplicatedTensorSharding=8192)  # sessionoptions.hpp
        if location is not None and not isinstance(location, TensorLocation):  # a TensorStorage given alone
            location = TensorLocation(storage=location)
        for k, v in (("location", location), ("minElementsForOffChip", minElementsForOffChip),
                     ("minElementsForReplicatedTensorSharding", minElementsForReplicatedTensorSharding)):
            if v is not None:
                setattr(self, k, v)


#: SessionOptions fields -> defaults (sessionoptions.hpp); the simulator reads those of :meth:`Session._options`
_FIELDS = dict(
    batchesPerStep=None, enableReplicatedGraphs=False, replicatedGraphCount=1, enableGradientAccumulation=False,
    accumulationFactor=1, enablePipelining=False, virtualGraphMode=0, autoRecomputation=0, numIOTiles=0,
    syntheticDataMode=0, instrumentWithHardwareCycleCounter=False, hardwareInstrumentations=None,
    enableOutlining=True, outlineThreshold=1.0, aliasZeroCopy=False, enablePrefetchDatastreams=True,
    defaultBufferingDepth=1, defaultPrefetchBufferingDepth=1, partialsTypeMatMuls="", enableStableNorm=False,
    enableFullyConnectedPass=True, enableNonStableSoftmax=False, subgraphCopyingStrategy=0, constantWeights=True,
    enableStochasticRounding=False, engineOptions={}, convolutionOptions={}, matmulOptions={}, lstmOptions={},
    reportOptions={}, gclOptions={}, enableEngineCaching=False, cachePath="session_cache", logDir="",
    enableDistributedReplicatedGraphs=False, globalReplicationFactor=1, globalReplicaOffset=0, groupHostSync=False,
    mergeVarUpdate=0, mergeVarUpdateMemThreshold=1000000, enableFloatingPointChecks=False,
    accumulationAndReplicationReductionType=1, meanAccumulationAndReplicationReductionStrategy=1,
    explicitRecomputation=False, enableExplicitMainLoops=False, useHostCopyOps=False, decomposeGradSum=False,
    rearrangeAnchorsOnHost=True, rearrangeStreamsOnHost=False, enableMergeExchange=True, delayVarUpdates=True,
    kahnTieBreaker="greedy", timeLimitScheduler=1e9, swapLimitScheduler=int(1e9), strictOpVersions=True,
    disableGradAccumulationTensorStreams=False, disableOptimizerStateTensorStreams=False, compileEngine=True,
    customCodelets=[], updatableNamedBuffers=[], enableLoadAndOffloadRNGState=False, ensureFp32LossScaleTensor=False,
    enableSupportedDataTypeCasting=True, groupNormStridedChannelGrouping=False, stashAllTensorsInferencePipeline=False,
    enableVariablesCaching=True, opxAliasChecking=False, opxModifyChecking=False, exportPoplarComputationGraph=False,
    exportPoplarVertexGraph=False, dotChecks=[], enableOutliningCopyCostPruning=True, outlineSequenceBreakCost=10000.0,
    virtualGraphSplitRatios=[], bufferingDepthMap={}, prefetchBufferingDepthMap={},
    transitiveClosureOptimizationThreshold=100000, firstDotOp=0, finalDotOp=10000, dotOpNames=False,
    separateCallOpPdfs=True, _enableRngStateManagement=False, scheduleNonWeightUpdateGradientConsumersEarly=False,
    customCodeletCompileFlags="", serializedPoprithmsShiftGraphsDir="", serializedPoprithmsAnnealGraphsDir="",
    enableEfficientOverlapIOTopoCons=False, enableInplaceAmbiguityChecking=False,
    createImplicitPipeliningFwdOnlyProgram=False, throwIfLog2ScaleTensorNotInRange=True,
    enableConstantFoldingOfMultipleConsumers=True, useLoopCandidateCreator=False, _tensorLocationSettingsOverride={},
)


class SessionOptions:
    """PopART's session options: the fields of ``sessionoptions.hpp`` with its defaults; setting a field that does
    not exist is an AttributeError, as in PopART's binding."""

    def __init__(self):
        for k, v in _FIELDS.items():
            object.__setattr__(self, k, copy.deepcopy(v))
        object.__setattr__(self, "accumulateOuterFragmentSettings", AccumulateOuterFragmentSettings())
        object.__setattr__(self, "automaticLossScalingSettings", _Settings(
            enabled=False, binEdgeLocation=0.125, thresholdUpperCountProportion=1e-7, updatePeriod=1,
            toTrackTensors=[], gradientTensorTrackingMethod=0))
        object.__setattr__(self, "replicatedCollectivesSettings", _Settings(
            prepareScheduleForMergingCollectives=False, mergeAllReduceCollectives=False,
            mergeReduceScatterCollectives=False, mergeAllGatherCollectives=False))
        object.__setattr__(self, "executionPhaseSettings", _Settings(
            phases=0, stages=2, weightIOSchedule=0, activationIOSchedule=0, optimizerStateIOSchedule=0,
            accumulatorIOSchedule=0, schedule=0))
        object.__setattr__(self, "batchSerializationSettings", _Settings(
            factor=0, concatOnVirtualGraphChange=True, concatOnExecutionPhaseChange=True,
            concatOnPipelineStageChange=True, transformContext=0, method=0, batchSchedule=1))
        for which in ("activation", "weight", "optimizerState", "accumulator"):
            object.__setattr__(self, f"{which}TensorLocationSettings", TensorLocationSettings())
        object.__setattr__(self, "experimentalSettings", _Settings(customTransformApplierSettings={}))

    def __setattr__(self, name, value):
        if not hasattr(self, name):
            raise AttributeError(f"'popart.SessionOptions' object has no attribute {name!r}")
        object.__setattr__(self, name, value)

    def changed(self) -> dict:
        """The fields set to something other than PopART's default (nested settings by ``field.sub``)."""
        out = {}
        for k, v in vars(self).items():
            if isinstance(v, _Settings):
                out.update({f"{k}.{sub}": val for sub, val in v.changed().items()})
            elif k in _FIELDS and _differs(v, _FIELDS[k]):
                out[k] = v
        return out


# --- devices ----------------------------------------------------------------------------------


class DeviceInfo:
    """A device: ``numIpus`` IPUs of the simulated system (hardware, IPU Model, offline or CPU alike)."""

    def __init__(self, num_ipus: int, kind: str, tiles: int | None = None, version: str = "ipu2", pattern=0):
        if isinstance(num_ipus, bool) or not isinstance(num_ipus, int) or num_ipus < 1:
            raise ValueError(f"a device needs a whole number >= 1 of IPUs, got {num_ipus!r}")
        self.numIpus, self.type, self._tiles, self.version = num_ipus, kind, tiles, version
        self.id, self.isAttached = 0, kind == "Ipu"
        self.sync_pattern = SyncPattern(int(getattr(pattern, "value", pattern)))  # the IPUs' sync (the session's)

    @property
    def tilesPerIPU(self) -> int | None:
        return self._tiles

    def attach(self) -> bool:
        self.isAttached = True
        return True

    def tryAttachUntilTimeout(self) -> bool:
        return self.attach()

    def detach(self) -> None:
        self.isAttached = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()

    def __repr__(self) -> str:
        return f"Device(type={self.type} id={self.id} numIpus={self.numIpus} version={self.version})"


def _sync_pattern(value) -> int:
    """A SyncPattern given as PopART's option string (devicemanager.cpp syncPatternFromString), or as the enum."""
    names = {"full": 0, "singlePipeline": 1, "replicaAndLadder": 2}
    if isinstance(value, str) and value not in names:
        raise ValueError(f"Unknown syncPattern setting: {value}")
    return names[value] if isinstance(value, str) else int(getattr(value, "value", value))


class DeviceManager:
    """Devices the simulator stands for: hardware, IPU Model, offline and CPU devices are all simulated as IPU
    hardware of the chosen system (an IPU Model's ``tilesPerIPU`` is not: a note says so)."""

    def acquireAvailableDevice(self, numIpus: int = 1, tilesPerIpu: int = 0, pattern=0, *args, **kwargs) -> DeviceInfo:
        """``pattern`` (SyncPattern) is how the device's IPUs sync, which the session's run follows."""
        return DeviceInfo(numIpus, "Ipu", tilesPerIpu or None, pattern=pattern)

    def tryAcquireAvailableDevice(self, numIpus: int = 1, tilesPerIpu: int = 0, pattern=0, *args,
                                  **kwargs) -> DeviceInfo:
        return self.acquireAvailableDevice(numIpus, tilesPerIpu, pattern)

    def acquireDeviceById(self, id: int, pattern=0, *args, **kwargs) -> DeviceInfo:
        return DeviceInfo(1, "Ipu", pattern=pattern)

    tryAcquireDeviceById = acquireDeviceById

    def createIpuModelDevice(self, options: dict | None = None) -> DeviceInfo:
        o = dict(options or {})
        return DeviceInfo(int(o.get("numIPUs", 1)), "IpuModel", int(o["tilesPerIPU"]) if "tilesPerIPU" in o else None,
                          str(o.get("ipuVersion", "ipu2")))

    def createOfflineIPUDevice(self, options: dict | None = None) -> DeviceInfo:
        o = dict(options or {})
        return DeviceInfo(int(o.get("numIPUs", 1)), "OfflineIpu", int(o["tilesPerIPU"]) if "tilesPerIPU" in o
                          else None, str(o.get("ipuVersion", "ipu2")), _sync_pattern(o.get("syncPattern", "full")))

    def createSimDevice(self, options: dict | None = None) -> DeviceInfo:
        return self.createIpuModelDevice(options)

    def createCpuDevice(self) -> DeviceInfo:
        return DeviceInfo(1, "Cpu")

    def enumerateDevices(self, *args, **kwargs) -> list[DeviceInfo]:
        return [DeviceInfo(1, "Ipu")]

    def setOnDemandAttachTimeout(self, seconds: int) -> None:
        pass


# --- optimizers -------------------------------------------------------------------------------


def _pairs(values: dict | None, known: tuple[str, ...], what: str) -> dict[str, tuple[float, bool]]:
    """``{"defaultLearningRate": (0.1, False), ...}`` as (value, is constant) pairs; a bare number is a
    constant; a key PopART's optimizer does not have is an error."""
    out = {}
    for k, v in (values or {}).items():
        if k not in known:
            raise ValueError(f"Invalid {what} key, {k!r}, in {what} constructor. Valid keys are {', '.join(known)}")
        out[k] = (float(v[0]), bool(v[1])) if isinstance(v, (tuple, list)) else (float(v), True)
    return out


def _float_type(value, default: str | None) -> str | None:
    """A PopART DataType (or its name) as the simulator's dtype; ``default`` for UNDEFINED or None, which PopART
    reads as each weight's own type."""
    name = str(getattr(value, "name", value) or "").upper()
    return {"FLOAT16": "float16", "FLOAT": "float32"}.get(name, default)


def _clip(settings) -> float | None:
    norms = [s.maxNorm for s in settings or []]
    if any(s.weightIds for s in settings or []):
        raise UnsupportedOpError("ClipNormSettings.clipWeights (a norm over some weights) is not modelled; the "
                                 "simulator clips by the norm of all the gradients (ClipNormSettings.clipAllWeights)")
    return min(norms) if norms else None


class ClipNormSettings:
    """``ClipNormSettings.clipAllWeights(maxNorm)`` (modelled) or ``clipWeights(ids, maxNorm)``."""

    def __init__(self, weightIds: list[str], maxNorm: float):
        self.weightIds, self.maxNorm = list(weightIds), float(maxNorm)

    @staticmethod
    def clipAllWeights(maxNorm: float) -> "ClipNormSettings":
        return ClipNormSettings([], maxNorm)

    @staticmethod
    def clipWeights(weightIds: list[str], maxNorm: float) -> "ClipNormSettings":
        return ClipNormSettings(weightIds, maxNorm)


class _Optimizer:
    """One of PopART's optimizers: its values (value, is constant) and what the simulator prices it as."""

    _KEYS: tuple[str, ...] = ()
    _DEFAULTS: dict[str, float] = {}
    #: compound scalars a weight's update reads (popart willow/src/sgd.cpp, adam.cpp, adaptive.cpp
    #: getOptimizerInputs: each a stream tensor unless all the values it is made of are constant)
    _SCALARS: tuple[tuple[str, ...], ...] = ()

    def __init__(self, values, clip_norm_settings):
        self.values = _pairs(values, self._KEYS, type(self).__name__)
        self.specific: dict[str, dict] = {}
        self.clipNormSettings = list(clip_norm_settings or [])

    def insertSpecific(self, weightId: str, values: dict) -> None:
        """A weight's own values, keyed as PopART's (``learningRate``, ``weightDecay``, ...: the defaults' keys
        without ``default``)."""
        named = {(k if k in self._KEYS else "default" + k[:1].upper() + k[1:]): v for k, v in values.items()}
        self.specific[weightId] = _pairs(named, self._KEYS, type(self).__name__)

    def _value(self, key: str, weight: str | None = None) -> tuple[float, bool]:
        return (self.specific.get(weight, {}).get(key) or self.values.get(key)
                or (self._DEFAULTS.get(key, 0.0), True))

    def variable_scalars(self, weight: str | None = None) -> int:
        """Compound scalars of ``weight``'s update that are not constant: the optimizer tensors PopART streams."""
        return sum(any(not self._value(k, weight)[1] for k in keys) for keys in self._SCALARS)

    def simulated(self, weight_dtype: str = "float32") -> SimOptimizer:
        """The simulator's update; ``weight_dtype`` the type of most of the weights' elements, which a state
        of PopART's UNDEFINED type takes."""
        raise NotImplementedError

    def notes(self) -> list[str]:
        """What the simulator prices otherwise than PopART runs it, or not at all."""
        return []


class SGD(_Optimizer):
    """PopART's SGD: ``SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.9, True)})``."""

    _KEYS = ("defaultLearningRate", "defaultWeightDecay", "defaultMomentum", "defaultDampening",
             "defaultVelocityScaling", "lossScaling", "nesterov", "defaultNesterov")
    _DEFAULTS = {"defaultLearningRate": 0.1, "defaultVelocityScaling": 1.0, "lossScaling": 1.0}

    def __init__(self, pyd=None, clip_norm_settings=None, accumulatorAndMomentum=0, accumType=None,
                 accl1Type=None, debugContext=""):
        super().__init__(pyd, clip_norm_settings)
        self.separate = int(getattr(accumulatorAndMomentum, "value", accumulatorAndMomentum)) == 1
        self.accum_type, self.accl1_type = accumType, accl1Type

    @property
    def _SCALARS(self):
        lr, wd, mm, dp, vs, ls = ("defaultLearningRate", "defaultWeightDecay", "defaultMomentum",
                                  "defaultDampening", "defaultVelocityScaling", "lossScaling")
        if not self._momentum():  # SGD0: the scaled learning rate and weight-decay scale factor
            return ((lr, ls, dp), (wd, lr, dp))
        return ((dp, wd, vs), (lr, vs), (mm,), (dp, vs, ls))  # SGD1 / SGD2

    def _momentum(self) -> bool:
        value, const = self._value("defaultMomentum")
        return value != 0 or not const or any(v.get("defaultMomentum", (0, True)) != (0, True)
                                              for v in self.specific.values())

    def simulated(self, weight_dtype: str = "float32") -> SimOptimizer:
        # accumType and accl1Type default to UNDEFINED: each weight's type (sgd.cpp)
        momentum = self._momentum()
        state = _float_type(self.accl1_type, weight_dtype) if momentum and self.separate else "float32"
        return SimOptimizer("sgd_momentum" if momentum else "sgd", state, _float_type(self.accum_type, None),
                            _clip(self.clipNormSettings), combined_accum=momentum and not self.separate)


class ConstSGD(SGD):
    """PopART's ConstSGD: SGD whose values are all constants."""

    def __init__(self, learning_rate: float, weight_decay: float = 0.0, loss_scaling: float = 1.0,
                 clip_norm_settings=None):
        super().__init__({"defaultLearningRate": (learning_rate, True), "defaultWeightDecay": (weight_decay, True),
                          "lossScaling": (loss_scaling, True)}, clip_norm_settings)


class Adam(_Optimizer):
    """PopART's Adam (``mode`` AdamMode Adam, AdamNoBias, AdaMax, Lamb, LambNoBias; ``weight_decay_mode``
    WeightDecayMode Decay, the default, or L2Regularization)."""

    _KEYS = ("defaultLearningRate", "defaultWeightDecay", "defaultBeta1", "defaultBeta2", "defaultEps",
             "lossScaling", "defaultMaxWeightNorm")
    _DEFAULTS = {"defaultLearningRate": 0.1, "defaultBeta1": 0.9, "defaultBeta2": 0.999, "defaultEps": 1e-6,
                 "lossScaling": 1.0}
    _SCALARS = (("defaultLearningRate",), ("defaultWeightDecay",), ("defaultBeta1",), ("defaultBeta2",),
                ("defaultEps",), ("lossScaling",), ("defaultMaxWeightNorm",), ("lossScaling",))
    _MODES = ("Adam", "AdamNoBias", "AdaMax", "Lamb", "LambNoBias")

    def __init__(self, values=None, mode=0, weight_decay_mode=0, accum_type=None, accl1_type=None, accl2_type=None,
                 clip_norm_settings=None, scaled_optimizer_state=False, debugContext=""):
        if values and "maxWeightNorm" in values:  # PopART's deprecated name of the key (adam.cpp getComplete)
            values = {("defaultMaxWeightNorm" if k == "maxWeightNorm" else k): v for k, v in values.items()}
        super().__init__(values, clip_norm_settings)
        self.mode = self._MODES[int(getattr(mode, "value", mode))]
        self.decay = int(getattr(weight_decay_mode, "value", weight_decay_mode)) == 0
        self.accum_type, self.accl_types = accum_type, (accl1_type, accl2_type)
        self.scaled_state = bool(scaled_optimizer_state)

    def notes(self) -> list[str]:
        out = []
        if self.mode in ("AdamNoBias", "AdaMax", "LambNoBias"):
            like = "LAMB" if self.mode.startswith("Lamb") else "Adam"
            out.append(f"popart.Adam mode {self.mode}: priced as {like} (the same state and update ops; its bias "
                       "correction or norm is a scalar difference)")
        if self.scaled_state:
            out.append("popart.Adam scaled_optimizer_state=True: accepted, no modelled effect")
        return out

    def simulated(self, weight_dtype: str = "float32") -> SimOptimizer:
        # accl1_type and accl2_type default to FLOAT, accum_type to UNDEFINED: each weight's type (popart.cpp, adam.cpp)
        name = "lamb" if self.mode.startswith("Lamb") else ("adamw" if self.decay else "adam")
        states = tuple(_float_type(t, "float32" if t is None else weight_dtype) for t in self.accl_types)
        return SimOptimizer(name, states, _float_type(self.accum_type, None),
                            _clip(self.clipNormSettings))


class Adaptive(_Optimizer):
    """PopART's Adaptive: ``mode`` AdaptiveMode AdaGrad, RMSProp, CenteredRMSProp, AdaDelta (RMSProp and
    CenteredRMSProp, with or without momentum, are modelled)."""

    _KEYS = ("defaultLearningRate", "defaultWeightDecay", "defaultAlpha", "defaultMomentum", "defaultEps",
             "lossScaling")
    _DEFAULTS = {"defaultLearningRate": 0.01, "defaultAlpha": 0.99, "defaultEps": 1e-6, "lossScaling": 1.0}
    _SCALARS = tuple((k,) for k in _KEYS) + (("lossScaling",),)
    _MODES = ("AdaGrad", "RMSProp", "CenteredRMSProp", "AdaDelta")

    def __init__(self, values=None, mode=1, weight_decay_mode=0, accum_type=None, accl1_type="FLOAT",
                 accl2_type="FLOAT", accl3_type=None, rmsprop_tf_variant=False, debugContext=""):
        super().__init__(values, None)
        self.mode = self._MODES[int(getattr(mode, "value", mode))]
        self.accum_type, self.accl1_type, self.tf_variant = accum_type, accl1_type, bool(rmsprop_tf_variant)

    def simulated(self, weight_dtype: str = "float32") -> SimOptimizer:
        if self.mode not in ("RMSProp", "CenteredRMSProp"):
            raise UnsupportedOpError(f"popart.Adaptive with AdaptiveMode.{self.mode} is not modelled; RMSProp and "
                                     "CenteredRMSProp are")
        momentum = "_momentum" if self._value("defaultMomentum") != (0.0, True) else ""
        return SimOptimizer(f"rmsprop{'_centered' if self.mode == 'CenteredRMSProp' else ''}{momentum}",
                            _float_type(self.accl1_type, weight_dtype), _float_type(self.accum_type, None))

    def notes(self) -> list[str]:
        return ["popart.Adaptive rmsprop_tf_variant=True: accepted, no modelled effect"] if self.tf_variant else []


# --- sessions ---------------------------------------------------------------------------------

#: virtualGraphMode values (VirtualGraphMode: Off, Manual, Auto, ExecutionPhases)
_VG_MODES = ("Off", "Manual", "Auto", "ExecutionPhases")
#: options read into sim.Options by the same name (``_Popart.set``)
_SAME_NAME = ("enableOutlining", "outlineThreshold", "aliasZeroCopy", "enablePrefetchDatastreams",
              "defaultBufferingDepth", "defaultPrefetchBufferingDepth", "enableStableNorm",
              "enableFullyConnectedPass", "enableNonStableSoftmax", "subgraphCopyingStrategy")
#: options :meth:`_Session._options` reads itself
_READ = {"batchesPerStep", "enableReplicatedGraphs", "replicatedGraphCount", "enableGradientAccumulation",
         "accumulationFactor", "enablePipelining", "virtualGraphMode", "autoRecomputation", "numIOTiles",
         "syntheticDataMode", "instrumentWithHardwareCycleCounter", "partialsTypeMatMuls", "convolutionOptions",
         "matmulOptions", "constantWeights", "enableDistributedReplicatedGraphs", "globalReplicationFactor",
         "explicitRecomputation",
         "globalReplicaOffset", "executionPhaseSettings.phases", "executionPhaseSettings.stages",
         "virtualGraphSplitRatios", "useHostCopyOps", "enableExplicitMainLoops",
         "enableLoadAndOffloadRNGState",  # read by getRNGState / setRNGState
         *_SAME_NAME}


def _model_bytes(fnModel):
    if isinstance(fnModel, Builder):
        return fnModel.getModelProto()
    return fnModel


#: the methods of PopART's sessions (its Python binding, popart.cpp) that the simulator has no model of
_NOT_MODELLED = frozenset({
    "broadcastWeights", "checkInplacingAmbiguity", "connectStreamToCallback", "getIr", "getModelProto",
    "getReport", "getSerializedGraph", "getTensorIds", "loadEngineAndConnectStreams", "saveVariables",
    "setEngineIsLoaded", "updateExternallySavedTensorLocations"})


class _Session:
    training = False

    def __getattr__(self, name: str):
        """A PopART session method the simulator does not have is a :class:`NotModelledError` that names the
        ones it has; any other missing name is Python's AttributeError."""
        if name in _NOT_MODELLED:
            have = sorted(n for n in dir(type(self)) if not n.startswith("_") and callable(getattr(type(self), n)))
            raise NotModelledError(f"{type(self).__name__}.{name} is not modelled by the simulator (sim.popart); "
                                   f"its sessions have {', '.join(have)}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @frozen
    def __init__(self, fnModel, dataFlow: DataFlow, deviceInfo: DeviceInfo, inputShapeInfo=None, patterns=None,
                 userOptions: SessionOptions | None = None, name: str = "", *, loss: str | None = None,
                 optimizer: _Optimizer | None = None, system=None):
        from ..onnx import load
        from ..onnx._importer import _read
        if not isinstance(dataFlow, DataFlow):
            raise TypeError(f"dataFlow must be a popart.DataFlow, got {type(dataFlow).__name__}")
        if not isinstance(deviceInfo, DeviceInfo):
            raise TypeError("deviceInfo must be a popart.DeviceInfo (from popart.DeviceManager()), got "
                            f"{type(deviceInfo).__name__}")
        self.dataFlow, self.deviceInfo, self.name = dataFlow, deviceInfo, name or type(self).__name__
        self.options = userOptions if userOptions is not None else SessionOptions()
        if patterns is not None and not isinstance(patterns, Patterns):
            raise TypeError(f"patterns must be a popart.Patterns, got {type(patterns).__name__}")
        self._patterns = patterns
        if inputShapeInfo is not None and getattr(inputShapeInfo, "infos", None):
            raise UnsupportedOpError(f"InputShapeInfo for {', '.join(inputShapeInfo.infos)}: the simulator needs the "
                                     "model's input shapes in the model; give them in addInputTensor (or the ONNX "
                                     "file), or size the file's dimensions with sim.onnx.load(..., dims=...)")
        self._seed = 0
        self._rng_words = None  # the RNG state setRNGState wrote (uint32 words), else drawn from the seed
        self._optimizer = optimizer
        proto, _, _ = _read(_model_bytes(fnModel))
        tensors = {v.name for v in proto.graph.input} | {i.name for i in proto.graph.initializer} | {
            o for n in proto.graph.node for o in n.output}
        anchors = dataFlow.anchors()
        self._missing = [a for a in anchors if a not in tensors]
        if self._missing and not self.training:
            raise GraphError(f"Anchor tensor(s) {', '.join(self._missing)} not in the model: anchor tensors it "
                             f"computes (its tensors include {', '.join(sorted(tensors)[:5])}, ...)")
        del proto.graph.output[:]
        proto.graph.output.extend(helper.make_empty_tensor_value_info(a) for a in anchors if a in tensors)
        self._notes: list[str] = []
        mode = _VG_MODES[int(getattr(self.options.virtualGraphMode, "value", self.options.virtualGraphMode))]
        phases = int(self.options.executionPhaseSettings.phases)
        if mode == "ExecutionPhases" and phases < 2:  # PopART warns and runs without phases (Ir::verify...)
            self._notes.append(f"virtualGraphMode is ExecutionPhases with executionPhaseSettings.phases {phases}: "
                               "phased execution needs 2 or more, so the ops run on their virtual graphs unphased, "
                               "as PopART disables it")
            mode = "Manual"
        elif mode != "ExecutionPhases" and phases > 1:
            raise OptionsError("> 1 execution phases requires VirtualGraphMode::ExecutionPhases (set "
                               "virtualGraphMode, or leave executionPhaseSettings.phases at 0)")
        dropped = {"Off": ("__ipu_number", "__pipeline_stage", "__execution_phase"),
                   "Auto": ("__ipu_number", "__execution_phase"), "Manual": ("__execution_phase",)}.get(mode, ())
        placed = [n for n in proto.graph.node if any(a.name in dropped for a in n.attribute)]
        for n in placed:
            kept = [a for a in n.attribute if a.name not in dropped]
            del n.attribute[:]
            n.attribute.extend(kept)
        if placed:
            what = {"Off": "every op runs on IPU 0 (VirtualGraphMode.Manual uses them)",
                    "Auto": "VirtualGraphMode.Auto places the ops itself",
                    "Manual": "only VirtualGraphMode.ExecutionPhases runs phases"}[mode]
            self._notes.append(f"virtualGraphMode is {mode}: the {', '.join(a.strip('_') for a in dropped)} "
                               f"annotations of {len(placed)} op(s) are ignored; {what}")
        # ops the reference evaluator cannot run (sim.popart.reference_ops has PopART's common ones)
        self._custom_ops = {f"{n.domain}::{n.op_type}" for n in proto.graph.node if n.domain not in ("", "ai.onnx")
                            and not (n.domain == "ai.graphcore" and n.op_type in REFERENCE_OPS)}
        self._input_shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in proto.graph.input}
        self._initial = {i.name: i for i in proto.graph.initializer}  # each weight's host value, for readWeights
        self._grouped = self._grouped_variables(proto)
        self._values_model, self._evaluators = proto, {}
        self._annotations = unmodelled_annotations(proto)
        self._graph = load(proto, loss=loss, name=self.name)
        if self.training and self._graph.loss is None:
            raise GraphError(f"TrainingSession: the loss {loss!r} is not a one-element tensor the model computes")
        self._group_gradients()
        self._strategy = self._place(mode)
        self._ipus = max((op.ipu or 0 for op in self._graph.ops), default=0) + 1
        self._sim_options = self._options(mode)
        self._stream_settings(proto, mode)
        self._system_arg = system
        self._executable = self._run = self._loaded = None
        # what an executable of this session is compiled from (hashed only when one is written or read)
        self._made_from = (sorted((k, repr(v)) for k, v in self.options.changed().items()), self.training,
                           deviceInfo.numIpus, str(system))
        self._runs = 0

    def _local_replicas(self) -> int:
        """This session's replicas, as its options give them (before the simulator's options exist)."""
        return int(self.options.replicatedGraphCount) if self.options.enableReplicatedGraphs else 1

    def _grouped_variables(self, proto) -> dict[str, VariableSettings]:
        """The variables given VariableSettings (``Builder.addInitializedInputTensor``) with more than one group
        over this session's replicas. Each one's initializer in ``proto`` becomes its first group's value, its
        shape on a replica (PopART's ``shapeOnReplica``, which checks the leading dimension: a value per
        group); ``self._initial`` keeps every group's."""
        settings = {p.key.split("/", 1)[1]: VariableSettings.decoded(p.value) for p in proto.metadata_props
                    if p.key.startswith(VARIABLE_SETTINGS + "/")}
        if not settings:
            return {}
        if self.options.enableDistributedReplicatedGraphs:
            raise OptionsError(f"VariableSettings ({', '.join(settings)}) with enableDistributedReplicatedGraphs is "
                               "not modelled: the simulator gives each replica its group's value in one instance's "
                               "run only; run the replicas in one process")
        replicas = self._local_replicas()
        grouped = {}
        for init in proto.graph.initializer:
            vs = settings.get(init.name)
            if vs is None or vs.getGroupCount(replicas) == 1:
                continue
            vs.shapeOnReplica(list(init.dims), replicas, init.name)
            rows = numpy_helper.to_array(init)
            self._initial[init.name] = numpy_helper.from_array(rows, init.name)
            init.CopyFrom(numpy_helper.from_array(rows[0], init.name))
            grouped[init.name] = vs
        return grouped

    def _group_gradients(self) -> None:
        """In training a grouped variable's gradient is all-reduced within its group only (none for groups of
        one: ``Tensor.grad_collectives``), the other groups' values being other variables; the notes say so."""
        if not self._grouped:
            return
        if self.training:
            for name, vs in self._grouped.items():
                stride, size = vs.stride_and_size(self._local_replicas())
                t = self._graph.tensors[name]
                t.grad_collectives = (("all_reduce", stride, size, t.nbytes),) if size > 1 else ()
        self._notes.append(f"VariableSettings: {len(self._grouped)} variable(s) hold a value per group of replicas "
                           f"({', '.join(list(self._grouped)[:3])}): each replica runs with its group's, and in "
                           "training each gradient is all-reduced within its group only")

    def _place(self, mode: str):
        """Place the ops as ``virtualGraphMode`` says (:mod:`sim.popart.placement`); returns the phased strategy
        of ExecutionPhases, else None."""
        so = self.options
        if mode == "Auto":
            auto_virtual_graphs(self._graph, max(1, self.deviceInfo.numIpus // self._local_replicas()), self.training,
                                bool(so.enableGradientAccumulation), so.virtualGraphSplitRatios)
        elif mode == "ExecutionPhases":
            if so.enablePipelining:
                raise OptionsError("enablePipelining with VirtualGraphMode.ExecutionPhases: a model runs either as "
                                   "a pipeline or in phases; turn one of them off")
            storage = so.activationTensorLocationSettings.location.storage
            return phased_strategy(self._graph, int(so.executionPhaseSettings.phases),
                                   int(so.executionPhaseSettings.stages),
                                   activations_off_chip=int(getattr(storage, "value", storage)) == 1)
        return None

    def _options(self, mode: str) -> Options:
        so = self.options
        o = Options()
        if so.enableDistributedReplicatedGraphs:  # this instance's replicas of globalReplicationFactor
            local = int(so.replicatedGraphCount) if so.enableReplicatedGraphs else 1
            total = int(so.globalReplicationFactor)
            if total < local or total % local:
                raise OptionsError(f"globalReplicationFactor {total} must be a multiple of the instance's "
                                   f"replicatedGraphCount {local}")
            o = InstanceOptions(total // local, int(so.globalReplicaOffset) // local)
        o.deviceIterations(self.dataFlow.batchesPerStep())
        self._output_mode(o)
        if so.enableReplicatedGraphs:
            o.replicationFactor(int(so.replicatedGraphCount))
        if so.enableGradientAccumulation:
            if not self.training:
                raise OptionsError("Gradient Accumulation only available when training (enableGradientAccumulation "
                                   "is set on an InferenceSession's options)")
            o.Training.gradientAccumulation(int(so.accumulationFactor))
        if self._strategy is not None:
            o.setExecutionStrategy(self._strategy)
        elif so.enablePipelining:
            if mode == "Off":
                raise OptionsError("Pipelining requires the 'virtualGraphMode' session option to not be "
                                   "VirtualGraphMode::Off: set it to Manual (and give each op its IPU with "
                                   "builder.virtualGraph) or Auto")
            pipeline = PipelinedExecution()
            pipeline.auto_stage = None  # the ops' pipelineStage, else their virtual graph (PopART's default)
            o.setExecutionStrategy(pipeline)
            o.explicit_pipelining = bool(so.useHostCopyOps and so.enableExplicitMainLoops)  # explicitPipeliningEnabled
        elif mode in ("Manual", "Auto") and self._ipus > 1:  # ops on their IPUs in program order, one at a time
            o.setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
        o.auto_round_num_ipus = True  # a replica has the device's IPUs over the replicas (PopART's)
        o.syncPattern(self.deviceInfo.sync_pattern)  # the device's (DeviceManager's acquire ... pattern)
        # PopART's default is None, also for a pipeline (PopTorch's Pipeline default is PopTorch's own)
        o._Popart.set("autoRecomputation", int(getattr(so.autoRecomputation, "value", so.autoRecomputation)))
        if so.explicitRecomputation:
            o._Popart.set("explicitRecomputation", bool(so.explicitRecomputation))
        if so.numIOTiles:
            o.TensorLocations.numIOTiles(int(so.numIOTiles))
        if so.syntheticDataMode:
            o.enableSyntheticData(True)
        o.logCycleCount(bool(so.instrumentWithHardwareCycleCounter))
        if so.partialsTypeMatMuls:
            o._Popart.set("partialsTypeMatMuls", str(so.partialsTypeMatMuls).lower())
        for key, which in (("convolutionOptions", "conv"), ("matmulOptions", "matmul")):
            if getattr(so, key):
                o._merge_poplin_options(which, dict(getattr(so, key)))
        changed = so.changed()
        for key in _SAME_NAME:
            if key in changed:
                value = changed[key]
                o._Popart.set(key, int(getattr(value, "value", value)) if key == "subgraphCopyingStrategy" else value)
        for key, value in changed.items():
            if key.startswith(("accumulateOuterFragmentSettings.", "replicatedCollectivesSettings.merge")) or \
                    key == "automaticLossScalingSettings.enabled":
                o._Popart.set(key, value)
            elif key.startswith(("weightTensorLocationSettings.", "optimizerStateTensorLocationSettings.",
                                 "accumulatorTensorLocationSettings.")):
                continue  # below
            elif key == "activationTensorLocationSettings.location" and self._strategy is not None and \
                    set(value.changed()) <= {"storage", "loadTileSet", "storageTileSet"}:
                continue  # the phases' activations on or off chip (phased_strategy), and their tiles (below)
            elif key not in _READ:
                o._Popart.set(key, value)  # recorded: the run's notes name it if it is not modelled
        if "rearrangeAnchorsOnHost" not in changed:  # PopART's default, on (PopTorch's and sim.Options': off)
            o._Popart.values["rearrangeAnchorsOnHost"] = bool(so.rearrangeAnchorsOnHost)
        for which, setter in (("weight", o.TensorLocations.setWeightLocation),
                              ("optimizerState", o.TensorLocations.setOptimizerLocation),
                              ("accumulator", o.TensorLocations.setAccumulatorLocation)):
            settings = getattr(so, f"{which}TensorLocationSettings")
            if settings.changed() or self._strategy is not None:  # PopART's default (on chip) even when phased
                setter(_location(settings))
            domain = settings.location.shardingDomain
            if domain is not None:
                kind = {"optimizerState": "optimizer"}.get(which, which)
                o._Popart.set(Options.SHARDING_DOMAIN_KEYS[kind], (domain.type, int(domain.replicaGroupSize)))
        if self._strategy is not None:  # the tiles the phases' activations move through (where: the liveness)
            activations = _location(so.activationTensorLocationSettings).useOnChipStorage(None)
            o.TensorLocations.setActivationLocation(activations)
        if self._patterns is not None and self._patterns.set:
            o._Popart.set("patterns", dict(self._patterns.set))
        if so.constantWeights is False and not self.training:
            self._notes.append("constantWeights False: the weights are variables, as the simulator holds them")
        return o

    def _stream_settings(self, proto: onnx.ModelProto, mode: str) -> None:
        """The inputs' InputSettings (the builder's metadata) and the anchors' exchange strategies: an overlapped
        strategy is the stream's OverlapMode (OverlapInnerLoop: the accumulation loop's, OverlapLoops: the
        device-iteration loop's too), with PopART's requirements (Ir::verifyOverlapIOSettings); the tile set and a
        Broadcast stream are named in the notes where the simulation does not follow them."""
        meta = {p.key: p.value for p in proto.metadata_props}
        so, g = self.options, self._graph
        strategies = {name: int(meta.get(f"{EXCHANGE_STRATEGY}/{name}", 0)) for name in g.inputs}
        strategies.update({g.onnx_outputs[a][0]: self.dataFlow.art(a).exchange_strategy
                           for a in self.dataFlow.anchors() if a in g.onnx_outputs})
        overlapped = {name: s for name, s in strategies.items() if s}
        if any(s == 3 for s in overlapped.values()):
            raise OptionsError("ExchangeStrategy::OverlapStep is not yet supported.")
        if overlapped:
            if not (so.useHostCopyOps and so.enableExplicitMainLoops and mode != "Off"):
                raise OptionsError("ExchangeStrategy::OverlapInnerLoop, ExchangeStrategy::OverlapLoops require "
                                   "SessionOptions::useHostCopyOps, SessionOptions::enableExplicitMainLoops, "
                                   "VirtualGraphMode::(Manual, Auto, ExecutionPhases) to be enabled.")
            if not so.numIOTiles:
                raise OptionsError(f"overlapped streams ({', '.join(sorted(overlapped))}) need IO tiles: set "
                                   "SessionOptions.numIOTiles (an even number, 32 or more)")
            if so.enablePipelining:
                raise OptionsError("sim.popart does not model overlapped streams (ExchangeStrategy OverlapInnerLoop, "
                                   "OverlapLoops) in a pipeline: use JustInTime")
            for name, strategy in overlapped.items():
                g.overlap[name] = int(OverlapMode.OverlapAccumulationLoop if strategy == 1
                                      else OverlapMode.OverlapDeviceIterationLoop)
            if self._sim_options.execution_strategy is None:  # one IPU: what PopTorch asks of overlapped IO
                self._sim_options.setExecutionStrategy(ShardedExecution())
        io = [n for n in g.inputs if meta.get(f"{TILE_SET}/{n}") == "1"]
        if io and not so.numIOTiles:
            self._notes.append(f"inputs {', '.join(io)} are on TileSet.IO, but numIOTiles is 0: streamed to the "
                               "compute tiles")
        broadcast = [n for n in g.inputs if meta.get(f"{REPLICATED_STREAM_MODE}/{n}") == "0"]
        if broadcast and self._sim_options.replication_factor > 1:
            self._notes.append(f"inputs {', '.join(broadcast)} are ReplicatedStreamMode.Broadcast: not modelled, "
                               "each replica streams its own copy")

    def _output_mode(self, o: Options) -> None:
        """The anchors' return type as the run's output mode. PopART returns each anchor as its own type says;
        the simulator has one mode a run, so anchors of several types are all streamed as the one of them that
        makes the most transfers (All, then EveryN, then Final or Sum), and a note says so."""
        arts = {a: self.dataFlow.art(a) for a in self.dataFlow.anchors() if a in self._graph.onnx_outputs}
        if not arts:
            return
        rank = {OutputMode.All: 0, OutputMode.EveryN: 1, OutputMode.Sum: 2, OutputMode.Final: 3}
        chosen = min(arts.values(), key=lambda art: (rank[art.mode], art.rp()))
        o.outputMode(chosen.mode, chosen.rp() if chosen.mode == OutputMode.EveryN else None)
        if len({(art.mode, art.rp()) for art in arts.values()}) > 1:
            types = ", ".join(f"{a}: {art.id()}" for a, art in arts.items())
            self._notes.append(f"anchors of several return types ({types}): all are streamed as {chosen.id()}, the "
                               "type that makes the most transfers")

    def _weight_dtype(self) -> str:
        """The dtype of most of the model's weight elements."""
        elements = collections.Counter()
        for t in self._graph.weights():
            elements[t.dtype] += t.numel
        return max(sorted(elements), key=elements.get) if elements else "float32"

    def _require(self, what: str):
        if self._executable is None:
            raise RuntimeError(f"Must call prepareDevice before {what}")

    @frozen
    def prepareDevice(self, loadEngine: bool = True, err: "OutOfMemoryStatus | None" = None) -> None:
        """Compile the model for the system (PopART's Poplar compile), or take the executable ``loadExecutable``
        read. Out of tile memory raises :class:`OutOfMemoryException`, or with ``err`` (a
        ``popart.OutOfMemoryError()``) is kept there, as PopART's binding does."""
        executable = self._compiled(err)
        if executable is None:
            return
        self._executable = executable
        self._update_ipus = {op.inputs[0]: op.ipu or 0 for op in executable.graph.ops if op.pass_ == "update"
                             and op.inputs and executable.graph.tensors[op.inputs[0]].role == "weight"}

    @frozen
    def compileAndExport(self, filename: str, err: "OutOfMemoryStatus | None" = None) -> None:
        """Compile without attaching to the device and write the executable to ``filename`` (whole or not at
        all), for ``loadExecutable``; out of tile memory as :meth:`prepareDevice`."""
        executable = self._compiled(err)
        if executable is not None:
            _write_executable(filename, self._fingerprint(), executable)

    def saveExecutable(self, path: str, savePopartMetadata: bool = True, saveVariables: bool = True) -> None:
        """Write the prepared executable to ``path`` (a file, or a directory to hold ``executable.popef``)."""
        self._require("saveExecutable")
        _write_executable(path, self._fingerprint(), self._executable)

    def loadExecutable(self, filename: str) -> None:
        """Read an executable ``compileAndExport`` or ``saveExecutable`` wrote for this model and these options;
        ``prepareDevice`` then uses it instead of compiling. The file is a Python pickle: load only your own."""
        self._loaded = _read_executable(filename, self._fingerprint())

    def _fingerprint(self) -> str:
        """A hash of what the executable is compiled from: the model without its weights' values, the options
        set, training or not, the device's IPUs and the system asked for."""
        import hashlib
        from ..onnx._importer import light_model
        digest = hashlib.sha256(light_model(self._values_model).SerializeToString(deterministic=True))
        digest.update(repr(self._made_from).encode())
        return digest.hexdigest()

    def _compiled(self, err: "OutOfMemoryStatus | None"):
        """The loaded executable, else the model compiled with the session's notes; None if it did not fit and
        ``err`` took the exception."""
        if self._loaded is not None:
            return self._loaded
        try:
            return self._compile()
        except OutOfMemoryException as e:
            if err is None:
                raise
            err.exception = e
            return None

    def _compile(self):
        o = self._sim_options
        if self._ipus > self._replica_ipus():
            raise OptionsError(f"the model needs {self._ipus} IPU(s) a replica x {o.replication_factor} replica(s) = "
                               f"{self._ipus * o.replication_factor} IPUs, but the device has "
                               f"{self.deviceInfo.numIpus}: acquire a device with that many")
        system, why = choose_system(self.deviceInfo.numIpus, self._system_arg, f"given to {type(self).__name__}("
                                    "system=...)", f"pass {type(self).__name__}(..., system=...)")
        optimizer = self._optimizer.simulated(self._weight_dtype()) if self.training else None
        try:
            executable = sim_compile(self._graph, system, o, self.training, optimizer)
        except OutOfMemoryError as e:
            raise reworded(e, _REMEDIES, OutOfMemoryException) from None
        notes = [f"system {system.name}: {why}",
                 f"PopART {type(self).__name__} on a {self.deviceInfo.type} device of {self.deviceInfo.numIpus} "
                 f"IPU(s), simulated as IPU hardware; {self._values_note()}"]
        if self.training:
            notes += self._optimizer.notes()
        if self.deviceInfo.tilesPerIPU:
            notes.append(f"the device's tilesPerIPU={self.deviceInfo.tilesPerIPU} is not modelled: every IPU has "
                         f"the system's {system.ipu.tiles} tiles")
        if self._missing:
            notes.append(f"anchors {', '.join(self._missing)} are not tensors of the forward model (gradients or "
                         "optimizer state): not streamed in the simulation, their arrays stay zero")
        notes += [f"node attribute {name} ({n} op(s)): accepted, no modelled effect"
                  for name, n in sorted(self._annotations.items())]
        executable.notes[:0] = notes + self._notes
        return executable

    # --- the call -------------------------------------------------------------------------------
    def _replication(self) -> int:
        return self._sim_options.replication_factor

    @property
    def replicationFactor(self) -> int:
        return self._replication()

    @property
    def accumulationFactor(self) -> int:
        return self._sim_options.Training.gradient_accumulation

    def getInfo(self, tensorId: str):
        """The data type and shape of an anchor, an input or a weight (the ONNX shape: a scalar loss is [])."""
        from .builder import TensorInfo
        name, shape = self._graph.onnx_outputs.get(tensorId, (tensorId, None))
        if name not in self._graph.tensors:
            raise GraphError(f"no tensor {tensorId!r} among the session's anchors, inputs and weights")
        t = self._graph.tensors[name]
        return TensorInfo({"float16": "FLOAT16", "float32": "FLOAT", "int8": "INT8", "uint8": "UINT8",
                           "bool": "BOOL"}.get(t.dtype, "INT32"), list(t.shape if shape is None else shape))

    def _host_dims(self, art: AnchorReturnType | None) -> list[int]:
        """The leading dimensions of a host array (PopART's initAnchorArrays and stepio shapes): steps,
        micro-batches, replicas, each left out when 1."""
        bps, acc, rep = self.dataFlow.batchesPerStep(), self.accumulationFactor, self._replication()
        if art is None or art.id() == "All":
            dims = [bps, acc, rep]
        elif art.id() == "EveryN":
            if bps % art.rp():
                raise RuntimeError("Invalid anchor period, is not divisble by batchesPerStep")
            dims = [bps // art.rp(), acc, rep]
        else:
            dims = [rep]
        return [d for d in dims if d != 1]

    def initAnchorArrays(self) -> dict:
        out = {}
        for a in self.dataFlow.anchors():
            if a in self._graph.onnx_outputs:
                info = self.getInfo(a)
                shape, dtype = info.shape(), info.data_type_lcase()
            else:
                shape, dtype = [1], "float32"
            out[a] = np.zeros(self._host_dims(self.dataFlow.art(a)) + shape, dtype=dtype)
        return out

    def _check_inputs(self, stepio: PyStepIO) -> None:
        for name in self._graph.inputs:
            if name not in stepio.inputs:
                raise GraphError(f"No input data for tensor {name!r} in the PyStepIO (its inputs: "
                                 f"{', '.join(stepio.inputs) or 'none'})")
            shape = self._host_dims(None) + list(self._graph.tensors[name].shape)
            got = np.asarray(stepio.inputs[name])
            if got.size != math.prod(shape):
                raise GraphError(f"Unexpected number of input elements for tensor {name!r}: expected an array of shape "
                                 f"{shape} (batchesPerStep, accumulationFactor, replicas, then the tensor's; each "
                                 f"left out when 1), got {list(got.shape)}")

    @frozen
    def run(self, stepio: PyStepIO, debugName: str = "") -> None:
        """Simulate one call; fill the anchor arrays (:meth:`_anchor_values`), or give them to the callbacks."""
        self._require("run")
        callbacks = stepio if isinstance(stepio, PyStepIOCallback) else None
        if callbacks is not None:
            stepio = self._through_callbacks(callbacks)
        if not isinstance(stepio, PyStepIO):
            raise TypeError(f"session.run takes a popart.PyStepIO or PyStepIOCallback, got {type(stepio).__name__}")
        if not self._sim_options.synthetic_data:
            self._check_inputs(stepio)
        with device_call() as call:
            self._anchor_values(stepio)
            if self._run is None:
                self._run = run_executable(self._executable)
            call.seconds, call.run = self._run.seconds, self._run
            call.label = f"popart {type(self).__name__} {self.name!r} on {self._executable.system.name}"
        if callbacks is not None:
            self._return_to_callbacks(stepio, callbacks)
        self._runs += 1

    def _through_callbacks(self, callbacks: PyStepIOCallback) -> PyStepIO:
        """The call's arrays from a PyStepIOCallback: each input's micro-batches asked for in turn (and each
        completed), stacked as a PyStepIO holds them; each anchor's array asked for once a return, filled after
        the run and completed."""
        dims = self._host_dims(None)
        inputs = {}
        for name in self._graph.inputs:
            parts = []
            for _ in range(math.prod(dims)):
                parts.append(np.asarray(callbacks.input(name, False)))
                callbacks.input_complete(name)
            inputs[name] = np.stack(parts).reshape(dims + list(parts[0].shape))
        return PyStepIO(inputs, self.initAnchorArrays())

    def _return_to_callbacks(self, stepio: PyStepIO, callbacks: PyStepIOCallback) -> None:
        for name, arr in stepio.outputs.items():
            art = self.dataFlow.art(name)
            returns = arr.reshape((-1,) + tuple(self.getInfo(name).shape())) if art.id() in ("All", "EveryN") else [arr]
            for value in returns:
                target = callbacks.output(name)
                np.copyto(target, np.asarray(value).reshape(np.shape(target)), casting="unsafe")
                callbacks.output_complete(name)

    def _values_note(self) -> str:
        """How the anchor arrays are filled (:meth:`_anchor_values`)."""
        if self.training:
            return "session.run fills the anchor arrays with zeros (the simulator computes times, not trained values)"
        if not cpu_outputs(self._sim_options):
            return f"session.run fills the anchor arrays with zeros ({CPU_OUTPUTS_ENV_VAR}=0)"
        if self._custom_ops:
            return (f"session.run fills the anchor arrays with zeros: the model has ops "
                    f"({', '.join(sorted(self._custom_ops))}) that ONNX's reference evaluator cannot run")
        return ("session.run computes the anchors on the CPU, micro-batch by micro-batch, with ONNX's reference "
                "evaluator (onnx.reference), in float32 where the model has float16")

    def _anchor_values(self, stepio: PyStepIO) -> None:
        """Fill the anchor arrays: in inference with the model's standard ONNX ops, each micro-batch's values
        from ONNX's reference evaluator, returned as each anchor's return type says; else zeros."""
        for arr in stepio.outputs.values():
            arr[...] = 0
        if self.training or self._custom_ops or self._sim_options.synthetic_data or not cpu_outputs(self._sim_options):
            return
        wanted = [a for a in self.dataFlow.anchors() if a in stepio.outputs and a in self._graph.onnx_outputs]
        steps, reps = self.dataFlow.batchesPerStep(), self._replication()
        feeds = {}
        for name in self._graph.inputs:
            shape = list(self._graph.onnx_outputs.get(name, (None, None))[1] or self._input_shapes[name])
            feeds[name] = np.asarray(stepio.inputs[name]).reshape([steps, reps] + shape)
        values = {a: [] for a in wanted}
        for k in np.ndindex(steps, reps):
            out = self._evaluator(k[1]).run(wanted, {n: f[k] for n, f in feeds.items()})
            for a, v in zip(wanted, out):
                values[a].append(np.asarray(v))
        for a in wanted:
            v = np.stack(values[a]).reshape([steps, reps] + list(values[a][0].shape))
            art = self.dataFlow.art(a)
            if art.id() == "EveryN":
                v = v[art.rp() - 1::art.rp()]
            elif art.id() != "All":
                v = v[-1] if art.id() == "Final" else v.sum(axis=0)
            arr = stepio.outputs[a]
            arr[...] = v.reshape(arr.shape).astype(arr.dtype)

    def _evaluator(self, replica: int):
        """ONNX's reference evaluator of the model with ``replica``'s values of the grouped variables, made once
        for each combination of their groups (PopART's own "__" annotations are not the operators' attributes)."""
        from onnx.reference import ReferenceEvaluator
        reps = self._replication()
        groups = tuple(vs.group_of(replica, reps) for vs in self._grouped.values())
        if groups not in self._evaluators:
            row_of = dict(zip(self._grouped, groups))
            model = onnx.ModelProto()
            model.CopyFrom(self._values_model)
            for node in _nodes(model.graph):
                kept = [a for a in node.attribute if not a.name.startswith("__")]
                del node.attribute[:]
                node.attribute.extend(kept)
            for init in model.graph.initializer:
                if init.name in row_of:
                    row = numpy_helper.to_array(self._initial[init.name])[row_of[init.name]]
                    init.CopyFrom(numpy_helper.from_array(row, init.name))
            self._evaluators[groups] = ReferenceEvaluator(model, new_ops=list(REFERENCE_OPS.values()))
        return self._evaluators[groups]

    # --- weights (the simulator keeps no device values) ----------------------------------------
    def _copy(self, to_device: bool) -> None:
        self._require("copying weights")
        with device_call() as call:
            call.seconds = variable_copy_seconds(self._executable, to_device)
            call.label = (f"popart {type(self).__name__} {self.name!r} (Weights{'From' if to_device else 'To'}Host) on "
                          f"{self._executable.system.name}")

    @frozen
    def weightsFromHost(self) -> None:
        """PopART's WeightsFromHost program, priced (:func:`sim.variable_copy_seconds`)."""
        self._copy(True)

    @frozen
    def weightsToHost(self) -> None:
        self._copy(False)

    def readWeights(self, weightsIo: PyWeightsIO) -> None:
        """Fill each array with its weight's value as the model holds it (or as ``writeWeights`` last wrote it):
        the simulated program does not change values."""
        for name, arr in weightsIo.weights.items():
            value = numpy_helper.to_array(self._weight(name, "readWeights"))
            vs = self._grouped.get(name)
            if vs is not None and vs.returns_every_replica():
                reps = self._replication()
                value = value[[vs.group_of(r, reps) for r in range(reps)]]
            arr[...] = value.reshape(arr.shape)

    def writeWeights(self, weightsIo: PyWeightsIO) -> None:
        for name, arr in weightsIo.weights.items():
            held = self._weight(name, "writeWeights")
            self._initial[name] = numpy_helper.from_array(np.asarray(arr, dtype=numpy_helper.to_array(held).dtype)
                                                          .reshape(tuple(held.dims)), name)

    def _weight(self, name: str, what: str):
        if name not in self._initial:
            raise GraphError(f"{what}: no weight {name!r} in the session's model (its weights: "
                             f"{', '.join(list(self._initial)[:5]) or 'none'})")
        return self._initial[name]

    def resetHostWeights(self, *args, **kwargs) -> None:
        pass

    def modelToHost(self, fn: str) -> None:
        """Write the model with its weights, as the session holds them (the initial values, or those
        ``writeWeights`` gave: training changes no values here), to ``fn``: whole or not at all."""
        model = onnx.ModelProto()
        model.CopyFrom(self._values_model)
        del model.graph.initializer[:]
        model.graph.initializer.extend(self._initial.values())
        write_bytes(fn, model.SerializeToString())

    def setRandomSeed(self, seedValue: int) -> None:
        """The seed of the device's random ops; it changes no cycle (the simulator draws no numbers)."""
        self._seed = int(seedValue)
        self._rng_words = None  # the device's generators start again from the seed

    def getRandomSeed(self) -> int:
        return self._seed

    def _rng_state(self, what: str) -> int:
        """PopART's checks before an RNG state copy; the uint32 words of every replica's state."""
        if not self.options.enableLoadAndOffloadRNGState:
            raise RuntimeError(f"Trying to {what} the RNG state, but the session option enableLoadAndOffloadRNGState "
                               "must be set to True.")
        self._require(f"{what}RNGState")
        return self._replication() * rng_state_words(self._executable.system.ipu, self._replica_ipus())

    def _replica_ipus(self) -> int:
        """The device's IPUs a replica (PopART's DeviceInfo shares the device's tiles among the replicas)."""
        return self.deviceInfo.numIpus // self._replication()

    def _rng_copy(self, to_device: bool) -> None:
        with device_call() as call:
            call.seconds = rng_state_copy_seconds(self._executable, to_device, self._replica_ipus())
            call.label = (f"popart {type(self).__name__} {self.name!r} (RngState{'From' if to_device else 'To'}Host) "
                          f"on {self._executable.system.name}")

    @frozen
    def getRNGState(self) -> list[int]:
        """Every replica's RNG state, side by side (2 generators x 4 uint32 words for each worker of each tile of
        the device's share of a replica, PopART's size), read by PopART's RngStateToHost program, priced. It is
        the state ``setRNGState`` last wrote, else one drawn from the session's seed: the simulated program
        draws no numbers. With synthetic data PopART reads none and returns an empty list."""
        words = self._rng_state("get")
        self._rng_copy(False)
        if self._sim_options.synthetic_data:
            return []
        if self._rng_words is None:
            self._rng_words = np.random.default_rng(self._seed).integers(0, 2 ** 32, words, dtype=np.uint64)
        return [int(w) for w in self._rng_words]

    @frozen
    def setRNGState(self, rngState) -> None:
        """Write every replica's RNG state (``getRNGState``'s layout and size, checked as PopART checks it)
        with PopART's RngStateFromHost program, priced."""
        words = self._rng_state("set")
        state = np.asarray(list(rngState), dtype=np.uint64)
        if state.size != words:
            raise RuntimeError(f"Devicex::setRngStateValue received rngState of size {state.size}; was expecting "
                               f"size {words}")
        self._rng_words = state
        self._rng_copy(True)

    # --- the simulation -------------------------------------------------------------------------
    def getCycleCount(self, id: str = "") -> int:
        if not self.options.instrumentWithHardwareCycleCounter:
            raise RuntimeError("SessionOptions::instrumentWithHardwareCycleCounter must be set to true in order to "
                               "use the cycle counter (getCycleCount)")
        if self._run is None:
            raise RuntimeError("getCycleCount: run the session first")
        return self._run.cycle_count

    @property
    def executable(self):
        return self._executable

    @property
    def simulation(self):
        """The :class:`sim.Run` of the latest ``run`` (None before the first)."""
        return self._run

    def getSummaryReport(self, resetProfile: bool = True) -> str:
        if self._run is None:
            raise RuntimeError("getSummaryReport: run the session first")
        return format_summary(self._run)

    def getAllTensorIds(self) -> list[str]:
        return list(self._graph.tensors)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, runs={self._runs})"


def _nodes(graph):
    """Every node of ``graph`` and of the subgraphs its nodes hold (a call's callee, a loop's body)."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _nodes(sub)


def _location(settings: TensorLocationSettings) -> SimLocationSettings:
    loc = settings.location
    out = SimLocationSettings()
    storage = int(getattr(loc.storage, "value", loc.storage))
    out.useOnChipStorage(storage == 0)
    if int(getattr(loc.replicatedTensorSharding, "value", loc.replicatedTensorSharding)):
        out.useReplicatedTensorSharding(True)
    for tile_set, setter in ((loc.loadTileSet, out.useIOTilesToLoad), (loc.storageTileSet, out.useIOTilesToStore)):
        if int(getattr(tile_set, "value", tile_set)) == 1:  # TileSet.IO
            setter(True)
    out.minElementsForOffChip(int(settings.minElementsForOffChip))
    out.minElementsForReplicatedTensorSharding(int(settings.minElementsForReplicatedTensorSharding))
    return out


class OutOfMemoryException(OutOfMemoryError):
    """PopART's exception for a program that does not fit in tile memory (``popart.OutOfMemoryException``, also
    ``popart.session``'s): the simulator's error, whose message is the memory report, with PopART's accessors."""

    def getSummaryReport(self) -> str:
        return str(self)

    def getProfilePath(self) -> str:
        return ""  # no PopVision profile: the report is the message (session.simulation holds the breakdowns)


class OutOfMemoryStatus:
    """``popart.OutOfMemoryError()``: given to ``prepareDevice(err=...)`` or ``compileAndExport(..., err)``, it
    takes the out-of-memory exception instead of it being raised."""

    def __init__(self):
        self.exception: OutOfMemoryException | None = None

    def isSuccessful(self) -> bool:
        return self.exception is None

    def getSummaryReport(self) -> str:
        return "" if self.exception is None else self.exception.getSummaryReport()

    def getProfilePath(self) -> str:
        return ""


#: the first item of an executable file, naming its format
_EXECUTABLE_FORMAT = "ipusim popart executable 1"


def _write_executable(path: str, fingerprint: str, executable) -> None:
    import os
    import pickle
    target = os.path.join(path, "executable.popef") if os.path.isdir(path) else path
    write_bytes(target, pickle.dumps((_EXECUTABLE_FORMAT, fingerprint, executable)))


def _read_executable(filename: str, fingerprint: str):
    import pickle
    try:
        with open(filename, "rb") as f:
            kind, made_from, executable = pickle.load(f)
    except (OSError, pickle.UnpicklingError, ValueError, TypeError, EOFError) as e:
        raise GraphError(f"loadExecutable({filename!r}): not an executable compileAndExport or saveExecutable "
                         f"wrote ({e})") from None
    if kind != _EXECUTABLE_FORMAT:
        raise GraphError(f"loadExecutable({filename!r}): {kind!r} is not an executable of this simulator")
    if made_from != fingerprint:
        raise GraphError(f"loadExecutable({filename!r}): the executable was compiled from another model, other "
                         "options or another device; compile this session (prepareDevice) instead")
    return executable


class InferenceSession(_Session):
    """``InferenceSession(fnModel, dataFlow, deviceInfo, inputShapeInfo=None, patterns=None, userOptions=None,
    name="inference", *, system=None)``."""

    def __init__(self, fnModel, dataFlow, deviceInfo, inputShapeInfo=None, patterns=None, userOptions=None,
                 name: str = "inference", *, system=None):
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions, name, system=system)


class TrainingSession(_Session):
    """``TrainingSession(fnModel, dataFlow, loss, optimizer, deviceInfo, inputShapeInfo=None, patterns=None,
    userOptions=None, name="training", *, system=None)``."""

    training = True

    def __init__(self, fnModel, dataFlow, loss, optimizer, deviceInfo, inputShapeInfo=None, patterns=None,
                 userOptions=None, name: str = "training", *, system=None):
        if not isinstance(optimizer, _Optimizer):
            raise TypeError("optimizer must be a popart.SGD, ConstSGD, Adam or Adaptive, got "
                            f"{type(optimizer).__name__}")
        if not isinstance(loss, str) or not loss:
            raise TypeError(f"loss must be the id of the loss tensor, got {loss!r}")
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions, name, loss=loss,
                         optimizer=optimizer, system=system)

    @frozen
    def updateOptimizerFromHost(self, optimizer: _Optimizer) -> None:
        """Write ``optimizer``'s values to the IPUs: PopART's OptimizerFromHost program, one stream copy per
        optimizer tensor (each compound scalar that is not constant: one for the default values per weight
        dtype, one per weight given its own values [U: on the IPU of the first update that reads it])."""
        self._require("updateOptimizerFromHost")
        if type(optimizer) is not type(self._optimizer) and not (
                isinstance(optimizer, SGD) and isinstance(self._optimizer, SGD)):
            raise RuntimeError(f"Can not replace optimizer of type {type(self._optimizer).__name__} with new "
                               f"optimizer of type {type(optimizer).__name__}")
        self._optimizer = optimizer
        tensors: dict[tuple, int] = {}
        g = self._executable.graph
        for weight, ipu in sorted(self._update_ipus.items(), key=lambda kv: kv[1]):
            key = ("specific", weight) if weight in optimizer.specific else ("default", g.tensors[weight].dtype)
            tensors.setdefault(key, (ipu, optimizer.variable_scalars(weight)))
        by_ipu = collections.Counter()
        for ipu, count in tensors.values():
            by_ipu[ipu] += count
        by_ipu = {k: v for k, v in by_ipu.items() if v}
        with device_call() as call:
            call.seconds = optimizer_write_seconds(self._executable, by_ipu) if by_ipu else 0.0
            call.label = f"popart TrainingSession {self.name!r} (OptimizerFromHost) on {self._executable.system.name}"
