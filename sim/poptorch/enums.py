"""PopTorch's enums.

The ones the simulator itself understands are the simulator's own classes, re-exported
(:mod:`sim.options`, :mod:`sim.strategy`); the rest are PopTorch's remaining enums, accepted
by the options and annotations that take them.
"""

from __future__ import annotations

import enum

from ..options import CommGroupType, OutputMode, OverlapMode, ReductionType
from ..strategy import AutoStage, Liveness, SyncPattern


class MeanReductionStrategy(enum.IntEnum):
    """When the mean of accumulated and replicated gradients divides (Running, Post, PostAndLoss)."""

    Running = 0
    Post = 1
    PostAndLoss = 2


class ConnectionType(enum.IntEnum):
    """When the executor attaches to the (simulated) IPUs: Always, OnDemand or Never."""

    Always = 0
    OnDemand = 1
    Never = 2


class VariableRetrievalMode(enum.IntEnum):
    """How a replica-grouped variable is read back: one value per group or per replica."""

    OnePerGroup = 0
    AllReplicas = 2


class MatMulSerializationMode(enum.Enum):
    """Which dimension ``serializedMatMul`` splits."""

    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class HalfFloatCastingBehavior(enum.IntEnum):
    """How ops mixing float16 and float32 operands are cast."""

    FloatDowncastToHalf = 0
    HalfUpcastToFloat = 1
    Default = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` reads its dataset (all run synchronously in the simulator)."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


class SharingStrategy(enum.IntEnum):
    """How an asynchronous data loader shares data with its worker process."""

    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class MultiConvPlanType(enum.IntEnum):
    """How a ``MultiConv`` runs its convolutions."""

    Parallel = 0
    Serial = 1


__all__ = ["OutputMode", "OverlapMode", "CommGroupType", "ReductionType", "AutoStage", "Liveness",
           "SyncPattern", "MeanReductionStrategy", "ConnectionType", "VariableRetrievalMode",
           "MatMulSerializationMode", "HalfFloatCastingBehavior", "DataLoaderMode",
           "SharingStrategy", "MultiConvPlanType"]
