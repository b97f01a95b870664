"""PopART on the simulator: its builder and sessions, and its option enums (``import popart`` under
``ipusim script`` gets this package).

A PopART program builds an ONNX model with :class:`Builder` (:mod:`sim.popart.builder`) and runs it with an
:class:`InferenceSession` or :class:`TrainingSession` (:mod:`sim.popart.session`), which simulate each
``run`` on the chosen IPU system; docs/popart.md lists what is modelled.

PopTorch scripts set PopART session options through ``opts._Popart.set(name, value)`` and take
the values from PopART's enums (``popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized``,
``popart.RecomputationType.Pipeline``, ...). Those enums are here with PopART's values
(graphcore/popart ``willow/include/popart/sessionoptions.hpp``, ``recompute.hpp``,
``tensorlocation.hpp``, ...) and the names its Python binding gives them (``python/popart/popart_core/
popart.cpp``: ``RecomputationType.NoRecompute``, ``MergeVarUpdateType.Off``), so such a script imports and
sets its options; what each option does in the simulation is ``sim.poptorch``'s (docs/poptorch.md lists the
options and their status). The sessions take the same enums.

The builder and sessions need the onnx package (the onnx extra); they are imported on first use, so a
PopTorch script's ``import popart`` needs only the enums. A name of PopART's API that is not here raises
:class:`NotModelledError`, an ``AttributeError`` that names what is.
"""

from __future__ import annotations

from enum import IntEnum

from ..errors import UnsupportedOpError
from ..options import comm_group


class NotModelledError(UnsupportedOpError, AttributeError):
    """A name of PopART's own API, which the simulator has no front end for."""


#: each enum's members in value order from 0 (PopART's C++ order), and other names of those values
#: in PopART's Python binding
_MEMBERS = {
    "AccumulateOuterFragmentSchedule": ("Scheduler", "Serial", "OverlapCycleOptimized", "OverlapMemoryOptimized"),
    "AdamMode": ("Adam", "AdamNoBias", "AdaMax", "Lamb", "LambNoBias"),  # adam.hpp
    "AdaptiveMode": ("AdaGrad", "RMSProp", "CenteredRMSProp", "AdaDelta"),  # adaptive.hpp
    "CollectiveOperator": ("Add", "Mean", "Mul", "Min", "Max", "LogicalAnd", "LogicalOr", "SquareAdd", "Local"),
    "CommGroupType": ("All", "Consecutive", "Orthogonal", "Ungrouped"),  # commgroup.hpp
    "DataType": ("UINT8", "INT8", "FLOAT8_143", "FLOAT8_152", "UINT16", "INT16", "INT32", "INT64", "UINT32", "UINT64",
                 "BOOL", "FLOAT", "FLOAT16", "BFLOAT16", "DOUBLE", "COMPLEX64", "COMPLEX128", "STRING",
                 "UNDEFINED"),  # datatype.hpp
    "DeviceConnectionType": ("Always", "OnDemand", "Never"),  # devicemanager.hpp
    "SyncPattern": ("Full", "SinglePipeline", "ReplicaAndLadder"),  # devicemanager.hpp
    "InitType": ("NoInit", "Zero"),  # op/init.hpp
    "RecomputeType": ("Undefined", "Checkpoint", "Recompute", "Recomputed"),  # op.hpp
    "ReductionType": ("Sum", "Mean", "NoReduction"),  # op/loss.hpp
    "ScatterReduction": ("Sum", "Max", "Min", "Mul", "NoReduction"),  # op/scatterreduce.hpp (C++'s None)
    "SGDAccumulatorAndMomentum": ("Combined", "Separate"),  # sgd.hpp
    "WeightDecayMode": ("Decay", "L2Regularization"),  # optimizer.hpp
    "AutodiffStitchStrategy": ("RecomputeMinimal", "RecomputeAllNonInputs", "AddFwdOutputs", "SafeAddFwdOutputs"),
    "BatchSerializationBatchSchedule": ("Scheduler", "Isomorphic", "OverlapOnIo", "OverlapOnCompute"),
    "BatchSerializationMethod": ("UnrollDynamic", "UnrollStatic", "Loop"),
    "BatchSerializationTransformContext": ("Fwd", "Bwd"),
    "ExchangeStrategy": ("JustInTime", "OverlapInnerLoop", "OverlapLoops", "OverlapStep"),  # op/exchange/exchange.hpp
    "ExecutionPhaseIOSchedule": ("Preload", "OnDemand"),
    "ExecutionPhaseSchedule": ("Interleaving", "Batch", "BatchClusteredIO"),
    "GradientTensorTrackingMethod": ("AllNonViewChangingGradientTensors", "ConvAndMatmulGradients",
                                     "GradientsOfUserSpecifiedTensors"),
    "Instrumentation": ("Outer", "Inner"),
    "MeanReductionStrategy": ("Running", "Post"),
    "MergeVarUpdateType": ("Off", "All", "AutoLoose", "AutoTight"),  # Off: C++'s None
    "RecomputationType": ("NoRecompute", "Standard", "NormOnly", "Pipeline", "RecomputeAll"),  # NoRecompute: None
    "ReplicatedStreamMode": ("Broadcast", "Replicate"),  # replicatedstreammode.hpp
    "ReplicatedTensorSharding": ("Off", "On"),
    "SubgraphCopyingStrategy": ("OnEnterAndExit", "JustInTime"),
    "SyntheticDataMode": ("Off", "Zeros", "RandomNormal", "RandomUniform"),
    "TensorStorage": ("OnChip", "OffChip"),
    "TileSet": ("Compute", "IO", "Undefined"),
    "VariableRetrievalMode": ("OnePerGroup", "AllReduceReplicas", "AllReplicas"),  # variablesettings.hpp
    "VirtualGraphMode": ("Off", "Manual", "Auto", "ExecutionPhases"),
}
_ALIASES = {"BatchSerializationTransformContext": {"Forward": 0, "Backward": 1}}

for _name, _members in _MEMBERS.items():
    globals()[_name] = IntEnum(_name, [(m, i) for i, m in enumerate(_members)]
                               + list(_ALIASES.get(_name, {}).items()), module=__name__)

ENUMS = sorted(_MEMBERS)

#: the builder's and sessions' names, by module (imported on first use: they need onnx)
_LAZY = {"builder": ("Builder", "TensorInfo", "DATA_TYPES", "InputSettings"),
         "session": ("InferenceSession", "TrainingSession", "SessionOptions", "DataFlow", "AnchorReturnType",
                     "Patterns", "InputShapeInfo", "PyStepIOCallback",
                     "PyStepIO", "PyWeightsIO", "DeviceManager", "DeviceInfo", "SGD", "ConstSGD", "Adam", "Adaptive",
                     "ClipNormSettings", "TensorLocation", "TensorLocationSettings",
                     "AccumulateOuterFragmentSettings", "OutOfMemoryException", "OutOfMemoryError")}
#: names a module defines under another name (``popart.OutOfMemoryError`` is the session's OutOfMemoryStatus: the
#: simulator's own OutOfMemoryError is the exception's base)
_DEFINED_AS = {"OutOfMemoryError": "OutOfMemoryStatus"}
defaultAiOnnxOpset = 10  # graphcoreoperators.hpp
defaultAiGraphcoreOpset = 1
#: PopART's reserved tensor-name prefixes (tensornames.hpp)
reservedGradientPrefix, reservedAccumPrefix, reservedAcclPrefix = "Gradient___", "Accum___", "Accl___"
reservedAccl1Prefix, reservedAccl2Prefix, reservedStepPrefix = "Accl1___", "Accl2___", "Step___"


class CommGroup:
    """PopART's CommGroup: ``CommGroup(CommGroupType.Consecutive, replicaGroupSize)``."""

    def __init__(self, type=0, replicaGroupSize: int = 0):  # noqa: A002 - PopART's argument name
        self.type, self.replicaGroupSize = globals()["CommGroupType"](int(type)), int(replicaGroupSize)


class VariableSettings:
    """PopART's VariableSettings (variablesettings.cpp): a variable with a value per group of replicas, the
    groups a ``CommGroup`` (``VariableSettings(CommGroup(CommGroupType.Orthogonal, 2))``) or a stride and a
    group size (``VariableSettings(stride, groupSize, mode)``), and how weightsToHost returns it (a
    ``VariableRetrievalMode``: one value per group, or one per replica). ``VariableSettings()`` is one value
    shared by every replica. The host array of ``addInitializedInputTensor`` holds one value per group on a
    leading dimension when there is more than one group."""

    def __init__(self, *args, **kwargs):
        modes = globals()["VariableRetrievalMode"]
        group, mode, stride_size = CommGroup(), modes.OnePerGroup, None
        args = list(args) + [kwargs[k] for k in ("sharedVariableDomain_", "retrievalMode_") if k in kwargs]
        if len(args) == 3 or {"stride", "groupSize"} <= set(kwargs):
            stride, size, mode = (args + [kwargs.get(k) for k in ("stride", "groupSize", "mode")])[:3]
            stride_size = (int(stride), int(size))
        else:
            for a in args:
                if isinstance(a, CommGroup):
                    group = a
                else:
                    mode = modes(int(a))
        self._group, self._mode, self._stride_size = group, modes(int(mode)), stride_size

    def getSharedVariableDomain(self) -> CommGroup:
        return self._group

    def getRetrievalMode(self):
        return self._mode

    def isUsingCommGroup(self) -> bool:
        return self._stride_size is None

    def stride_and_size(self, replicaCount: int) -> tuple[int, int]:
        """(stride, group size) of the groups over ``replicaCount`` replicas (PopXL's replica_grouping form)."""
        if self._stride_size is not None:
            stride, size = self._stride_size
            return stride, size if size else replicaCount
        return comm_group(replicaCount, self._group.type, self._group.replicaGroupSize or None)

    def getRealGroupSize(self, replicaCount: int) -> int:
        return self.stride_and_size(replicaCount)[1]

    def getGroupCount(self, replicaCount: int) -> int:
        return replicaCount // self.getRealGroupSize(replicaCount)

    def returns_every_replica(self) -> bool:
        """Whether weightsToHost returns a value a replica (``VariableRetrievalMode.AllReplicas``)."""
        return self._mode == globals()["VariableRetrievalMode"].AllReplicas

    def numReplicasReturningVariable(self, replicaCount: int) -> int:
        return replicaCount if self.returns_every_replica() else self.getGroupCount(replicaCount)

    def group_of(self, replica: int, replicaCount: int) -> int:
        """The index of the group holding ``replica`` (the row of its value in the host array)."""
        stride, size = self.stride_and_size(replicaCount)
        return replica // (stride * size) * stride + replica % stride

    def shapeOnReplica(self, full_shape, replicaCount: int, name: str = "") -> list[int]:
        groups = self.getGroupCount(replicaCount)
        if groups == 1:
            return list(full_shape)
        if not full_shape or full_shape[0] != groups:
            raise RuntimeError(f"Return mismatch with possibly appended outer dimension "
                               f"({full_shape[0] if full_shape else 'none'}) of Tensor: \"{name}\". should match "
                               f"numGroups: {groups}")
        return list(full_shape[1:])

    def shapeOnHost(self, replicaShape, replicaCount: int) -> list[int]:
        groups = self.getGroupCount(replicaCount)
        return list(replicaShape) if groups == 1 else [groups, *replicaShape]

    def encoded(self) -> str:
        """The settings as the builder records them in the model (``__variable_settings/<id>``)."""
        if self._stride_size is not None:
            return f"stride {self._stride_size[0]} {self._stride_size[1]} {int(self._mode)}"
        return f"group {int(self._group.type)} {self._group.replicaGroupSize} {int(self._mode)}"

    @classmethod
    def decoded(cls, text: str) -> "VariableSettings":
        kind, a, b, mode = text.split()
        if kind == "stride":
            return cls(int(a), int(b), int(mode))
        return cls(CommGroup(int(a), int(b)), int(mode))


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    for module, names in _LAZY.items():
        if name in names:
            import importlib
            value = getattr(importlib.import_module(f"{__name__}.{module}"), _DEFINED_AS.get(name, name))
            globals()[name] = value
            return value
    raise NotModelledError(f"popart.{name} is not modelled by the simulator; sim.popart has PopART's builder and "
                           f"sessions ({', '.join(n for names in _LAZY.values() for n in names)}) and its enums "
                           f"({', '.join(ENUMS)})")
