"""A drop-in ``poptorch`` on the simulator: ``import sim.poptorch as poptorch``.

An unmodified PopTorch script runs with only its import line changed: models wrapped with
:func:`inferenceModel`/:func:`trainingModel` are captured from the ``torch.nn.Module``
(``torch.fx``, or ``torch.export`` where fx cannot trace), simulated on an IPU system with
:func:`sim.compile` and :func:`sim.run_executable` (``cycleCount()``, ``getPerfCounters()`` and
the latencies come from that run), and their outputs are computed for real on the CPU.

The names, signatures, defaults and error messages are PopTorch's; what each one does in the
simulator ("modelled" or "accepted, no modelled effect") is listed in docs/poptorch.md.
Requires the ``torch`` extra: ``pip install -e '.[torch]'`` (torch==2.13.0).
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "sim.poptorch needs PyTorch: install the torch extra with pip install -e '.[torch]' "
        "(torch==2.13.0)") from e

import logging as _logging
import os as _os

from . import _poplar_executor, _utils, enums, experimental, optim, profiling
from ._poplar_executor import _OverwriteContextManager
from ._args import ICustomArgParser, registerCustomArgParser
from ._errors import Error, RecoverableError, UnrecoverableError
from ._mapping import OpContext, register_op, unregister_op
from .annotations import (Attribute, BeginBlock, Block, BlockFunction, MultiConv, NameScope, for_loop,
                          identity_loss, ipu_print_tensor, isRunningOnIpu, nop,
                          recomputationCheckpoint, removeBlocks, serializedMatMul,
                          set_available_memory, set_overlap_for_input, set_overlap_for_output)
from .dataloader import AsynchronousDataAccessor, DataLoader
from .enums import (AutoStage, CommGroupType, ConnectionType, DataLoaderMode,
                    HalfFloatCastingBehavior, Liveness, MatMulSerializationMode,
                    MeanReductionStrategy, MultiConvPlanType, OutputMode, OverlapMode,
                    ReductionType, SharingStrategy, SyncPattern, VariableRetrievalMode)
from ..options import PipelineCopies  # the simulator's own Options.pipelineCopies takes it
from ._printing import module_repr, print  # noqa: A004 - PopTorch exports its own print
from .executor import (PoplarExecutor, inferenceModel, load, registerPostCompileHook,
                       registerPreCompileHook, trainingModel)
from .ops import cond, ctc_beam_search_decoder, custom_op, dynamic_slice, dynamic_update
from .host_function import CPU
from .cluster_ops import fps, nearest
from .options import (ConfigFileError, Options, ParallelPhasedExecution, Phase, PipelinedExecution,
                      SerialPhasedExecution, ShardedExecution, Stage, TensorLocationSettings)

__version__ = "3.4.0+ipusim"

logger = _logging.getLogger("poptorch")

#: PopTorch's levels: name -> (its legacy integer, the Python logging level)
_LEVELS = {"TRACE": (0, _logging.DEBUG), "TRACE_ALL": (0, _logging.DEBUG), "DEBUG": (1, _logging.DEBUG),
           "DEBUG_IR": (1, _logging.DEBUG), "INFO": (2, _logging.INFO), "WARN": (3, _logging.WARNING),
           "ERR": (4, _logging.ERROR), "OFF": (6, _logging.CRITICAL + 10)}
_PUBLIC_LEVELS = ("DEBUG", "ERR", "INFO", "OFF", "TRACE", "WARN")


def setLogLevel(level) -> None:
    """How much PopTorch logs (logger ``"poptorch"``): TRACE, DEBUG, INFO, WARN (the default),
    ERR or OFF, or PopTorch's legacy integers 0-4 and 6."""
    if isinstance(level, int) and not isinstance(level, bool):
        for name, (number, _) in _LEVELS.items():
            if number == level:
                return setLogLevel(name)
        raise ValueError("Invalid log level integer")
    if level not in _LEVELS:
        raise ValueError(f"Unknown log level: {level}. Valid values are "
                         f"{', '.join(_PUBLIC_LEVELS[:-1])} and {_PUBLIC_LEVELS[-1]}")
    logger.setLevel(_LEVELS[level][1])
    return None


# PopTorch reads POPTORCH_LOG_LEVEL when it is imported (default WARN)
try:
    setLogLevel(_os.environ.get("POPTORCH_LOG_LEVEL", "WARN") or "WARN")
except ValueError as _e:
    raise ValueError(f"environment variable POPTORCH_LOG_LEVEL: {_e}") from None


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    """False: the simulator runs without IPU hardware."""
    return False


def ipuHardwareVersion() -> int:
    """The generation the simulator targets by default (2: Mk2)."""
    return 2


__all__ = [
    "Options", "TensorLocationSettings", "ConfigFileError", "inferenceModel", "trainingModel",
    "PoplarExecutor", "load", "DataLoader", "AsynchronousDataAccessor", "Block", "BeginBlock",
    "BlockFunction", "removeBlocks", "Stage", "Phase", "AutoStage", "PipelinedExecution",
    "ShardedExecution", "SerialPhasedExecution", "ParallelPhasedExecution", "Liveness",
    "SyncPattern", "OverlapMode", "OutputMode", "ReductionType", "MeanReductionStrategy",
    "ConnectionType", "CommGroupType", "VariableRetrievalMode", "MatMulSerializationMode",
    "HalfFloatCastingBehavior", "DataLoaderMode", "SharingStrategy", "MultiConvPlanType",
    "set_overlap_for_input", "set_overlap_for_output", "set_available_memory",
    "recomputationCheckpoint", "identity_loss", "ipu_print_tensor", "nop", "serializedMatMul",
    "MultiConv", "NameScope", "Attribute", "for_loop", "isRunningOnIpu", "optim", "enums", "experimental",
    "ipuHardwareIsAvailable", "ipuHardwareVersion", "setLogLevel", "logger", "Error",
    "RecoverableError", "UnrecoverableError", "register_op", "unregister_op", "OpContext",
    "CPU", "fps", "nearest", "cond", "ctc_beam_search_decoder", "custom_op", "dynamic_slice", "dynamic_update",
    "ICustomArgParser", "registerCustomArgParser",
    "registerPreCompileHook", "registerPostCompileHook", "profiling", "module_repr", "print", "PipelineCopies",
]
