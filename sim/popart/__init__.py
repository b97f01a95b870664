"""PopART's option enums, as PopTorch scripts use them: ``import popart`` under ``ipusim script``.

PopTorch scripts set PopART session options through ``opts._Popart.set(name, value)`` and take
the values from PopART's enums (``popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized``,
``popart.RecomputationType.Pipeline``, ...). Those enums are here with PopART's values
(graphcore/popart ``willow/include/popart/sessionoptions.hpp``, ``recompute.hpp``,
``tensorlocation.hpp``) and the names its Python binding gives them (``python/popart/popart_core/
popart.cpp``: ``RecomputationType.NoRecompute``, ``MergeVarUpdateType.Off``), so such a script imports and sets its options; what each option does in
the simulation is ``sim.poptorch``'s (docs/poptorch.md lists the options and their status).

PopART's own API (``Builder``, ``TrainingSession``, ``DeviceManager``, ...) is not modelled: asking
for it raises :class:`NotModelledError`, an ``AttributeError`` that names what is here. A PopART
model can be simulated from its ONNX file with ``sim.onnx.load``.
"""

from __future__ import annotations

from enum import IntEnum

from ..errors import UnsupportedOpError


class NotModelledError(UnsupportedOpError, AttributeError):
    """A name of PopART's own API, which the simulator has no front end for."""


class AccumulateOuterFragmentSchedule(IntEnum):
    Scheduler = 0
    Serial = 1
    OverlapCycleOptimized = 2
    OverlapMemoryOptimized = 3


class AutodiffStitchStrategy(IntEnum):
    RecomputeMinimal = 0
    RecomputeAllNonInputs = 1
    AddFwdOutputs = 2
    SafeAddFwdOutputs = 3


class BatchSerializationBatchSchedule(IntEnum):
    Scheduler = 0
    Isomorphic = 1
    OverlapOnIo = 2
    OverlapOnCompute = 3


class BatchSerializationMethod(IntEnum):
    UnrollDynamic = 0
    UnrollStatic = 1
    Loop = 2


class BatchSerializationTransformContext(IntEnum):
    Fwd = 0
    Bwd = 1
    Forward = 0  # the binding's other names for them
    Backward = 1


class ExecutionPhaseIOSchedule(IntEnum):
    Preload = 0
    OnDemand = 1


class ExecutionPhaseSchedule(IntEnum):
    Interleaving = 0
    Batch = 1
    BatchClusteredIO = 2


class GradientTensorTrackingMethod(IntEnum):
    AllNonViewChangingGradientTensors = 0
    ConvAndMatmulGradients = 1
    GradientsOfUserSpecifiedTensors = 2


class Instrumentation(IntEnum):
    Outer = 0
    Inner = 1


class MeanReductionStrategy(IntEnum):
    Running = 0
    Post = 1


class MergeVarUpdateType(IntEnum):
    Off = 0  # PopART's None, named Off in its Python binding
    All = 1
    AutoLoose = 2
    AutoTight = 3


class RecomputationType(IntEnum):
    NoRecompute = 0  # PopART's None, named NoRecompute in its Python binding
    Standard = 1
    NormOnly = 2
    Pipeline = 3
    RecomputeAll = 4


class ReplicatedTensorSharding(IntEnum):
    Off = 0
    On = 1


class SubgraphCopyingStrategy(IntEnum):
    OnEnterAndExit = 0
    JustInTime = 1


class SyntheticDataMode(IntEnum):
    Off = 0
    Zeros = 1
    RandomNormal = 2
    RandomUniform = 3


class TensorStorage(IntEnum):
    OnChip = 0
    OffChip = 1


class TileSet(IntEnum):
    Compute = 0
    IO = 1
    Undefined = 2


class VirtualGraphMode(IntEnum):
    Off = 0
    Manual = 1
    Auto = 2
    ExecutionPhases = 3


ENUMS = sorted(name for name, value in dict(globals()).items()
               if isinstance(value, type) and issubclass(value, IntEnum) and value is not IntEnum)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModelledError(f"popart.{name} is PopART's own API, which the simulator does not model; here are only "
                           f"PopART's option enums for PopTorch scripts ({', '.join(ENUMS)}). To simulate a PopART "
                           "model, export it to ONNX and use sim.onnx.load")
