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


#: each enum's members in value order from 0 (PopART's C++ order), and other names of those values
#: in PopART's Python binding
_MEMBERS = {
    "AccumulateOuterFragmentSchedule": ("Scheduler", "Serial", "OverlapCycleOptimized", "OverlapMemoryOptimized"),
    "AutodiffStitchStrategy": ("RecomputeMinimal", "RecomputeAllNonInputs", "AddFwdOutputs", "SafeAddFwdOutputs"),
    "BatchSerializationBatchSchedule": ("Scheduler", "Isomorphic", "OverlapOnIo", "OverlapOnCompute"),
    "BatchSerializationMethod": ("UnrollDynamic", "UnrollStatic", "Loop"),
    "BatchSerializationTransformContext": ("Fwd", "Bwd"),
    "ExecutionPhaseIOSchedule": ("Preload", "OnDemand"),
    "ExecutionPhaseSchedule": ("Interleaving", "Batch", "BatchClusteredIO"),
    "GradientTensorTrackingMethod": ("AllNonViewChangingGradientTensors", "ConvAndMatmulGradients",
                                     "GradientsOfUserSpecifiedTensors"),
    "Instrumentation": ("Outer", "Inner"),
    "MeanReductionStrategy": ("Running", "Post"),
    "MergeVarUpdateType": ("Off", "All", "AutoLoose", "AutoTight"),  # Off: C++'s None
    "RecomputationType": ("NoRecompute", "Standard", "NormOnly", "Pipeline", "RecomputeAll"),  # NoRecompute: None
    "ReplicatedTensorSharding": ("Off", "On"),
    "SubgraphCopyingStrategy": ("OnEnterAndExit", "JustInTime"),
    "SyntheticDataMode": ("Off", "Zeros", "RandomNormal", "RandomUniform"),
    "TensorStorage": ("OnChip", "OffChip"),
    "TileSet": ("Compute", "IO", "Undefined"),
    "VirtualGraphMode": ("Off", "Manual", "Auto", "ExecutionPhases"),
}
_ALIASES = {"BatchSerializationTransformContext": {"Forward": 0, "Backward": 1}}

for _name, _members in _MEMBERS.items():
    globals()[_name] = IntEnum(_name, [(m, i) for i, m in enumerate(_members)]
                               + list(_ALIASES.get(_name, {}).items()), module=__name__)

ENUMS = sorted(_MEMBERS)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModelledError(f"popart.{name} is PopART's own API, which the simulator does not model; here are only "
                           f"PopART's option enums for PopTorch scripts ({', '.join(ENUMS)}). To simulate a PopART "
                           "model, export it to ONNX and use sim.onnx.load")
