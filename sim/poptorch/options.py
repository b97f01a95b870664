"""``poptorch.Options``: the whole PopTorch option surface on top of :class:`sim.Options`.

:class:`Options` subclasses :class:`sim.Options` (deviceIterations, replicationFactor,
Training.gradientAccumulation, outputMode, TensorLocations, execution strategies, … keep the
simulator's own implementation) and adds every remaining PopTorch setter and the ``Precision``,
``Distributed`` and ``Jit`` groups. A setter the simulator does not model is accepted, recorded
in :attr:`Options.set_options` and listed by :meth:`Options.unmodelled`, which the run's notes
report as "accepted, no modelled effect". One option is the simulator's own:
:meth:`Options.simulatedSystem` picks the system to simulate.

As in PopTorch, the options given to ``inferenceModel``/``trainingModel`` are frozen (any
later setter raises ``AttributeError("Can't modify frozen Options")``); :meth:`Options.clone`
returns an unfrozen copy.
"""

from __future__ import annotations

import ast
import copy
import importlib
import json
import logging
import os
from pathlib import Path

from .. import options as _sim_options
from ..errors import OptionsError
from ..options import TensorLocationSettings
from ..strategy import (ParallelPhasedExecution, Phase, PipelinedExecution, SerialPhasedExecution,
                        ShardedExecution, Stage)
from . import _system, enums
from ._options_dict import OptionsDictMixin

_FROZEN = "Can't modify frozen Options"
logger = logging.getLogger("poptorch")

#: what the PopTorch front end itself models on top of what sim.compile reads
_FRONT_END_MODELLED = {
    "simulatedSystem",  # the system that is simulated
    "computeOutputsOnCpu",  # whether a call runs the model on the CPU for its outputs
    "connectionType", "useOfflineIpuTarget",  # when the executor attaches, or refuses to run
    "Distributed.configureProcessId",  # DataLoader partitioning, the system size
    "Training.accumulationAndReplicationReductionType",  # gradient scaling of the CPU step
    "inputReplicaGrouping",  # the batch size a call expects
    "anchorTensor",  # getAnchoredTensor of gradients and updated weights
}
#: options sim.compile reads (see sim/compiler.py); sim.Options.MODELLED may lag behind them
_READ_BY_COMPILER = {
    "setExecutionStrategy", "syncPattern", "autoRoundNumIPUs", "TensorLocations.numIOTiles",
    "TensorLocations.setWeightLocation", "TensorLocations.setOptimizerLocation",
    "TensorLocations.setAccumulatorLocation",
}


def _check_type(option: str, value, expected: type) -> None:
    """PopTorch's check of a value its ``OptionsDict`` stores: of the default value's type."""
    if not isinstance(value, expected):
        raise AssertionError(f"Unexpected type {type(value)} for option {option}. Expected {expected}")


class ConfigFileError(Exception):
    """A line of an options file given to :meth:`Options.loadFromFile` is not valid."""


class _Frozen:
    """Refuses attribute writes once the owning :class:`Options` is frozen."""

    def _root(self):
        return self.__dict__.get("_owner", self)

    def __setattr__(self, name, value):
        root = self._root()
        if root is not None and root.__dict__.get("_frozen", False):
            raise AttributeError(_FROZEN)
        object.__setattr__(self, name, value)

    def _check_frozen(self) -> None:
        if self._root().__dict__.get("_frozen", False):
            raise AttributeError(_FROZEN)


class _TrainingOptions(OptionsDictMixin, _Frozen, _sim_options._Training):
    """``Options.Training``: options of training models (setters return this object)."""

    def __init__(self, owner: "Options"):
        super().__init__(owner)
        self.meanAccumulationAndReplicationReductionStrategy = enums.MeanReductionStrategy.Post

    def gradientAccumulation(self, gradient_accumulation: int) -> "_TrainingOptions":
        """Micro-batches whose gradients are reduced before one weight update (default 1)."""
        super().gradientAccumulation(gradient_accumulation)
        return self

    @property
    def accumulation_and_replication_reduction_type(self):
        """PopTorch's name of the value ``accumulationAndReplicationReductionType`` sets."""
        return self.reduction_type

    def accumulationAndReplicationReductionType(self, reduction_type) -> "_TrainingOptions":
        """Mean (default) or Sum of the gradients over accumulation steps and replicas."""
        if not isinstance(reduction_type, enums.ReductionType) or \
                reduction_type == enums.ReductionType.NoReduction:
            raise ValueError("accumulationAndReplicationReductionType must be set to "
                             "poptorch.ReductionType.Mean or poptorch.ReductionType.Sum")
        super().accumulationAndReplicationReductionType(reduction_type)
        return self

    def accumulationReductionType(self, reduction_type) -> "_TrainingOptions":
        """Deprecated spelling of :meth:`accumulationAndReplicationReductionType`."""
        return self.accumulationAndReplicationReductionType(reduction_type)

    def setMeanAccumulationAndReplicationReductionStrategy(self, strategy) -> "_TrainingOptions":
        """When the mean divides (``MeanReductionStrategy``): the CPU step's numbers follow it (Running keeps
        each gradient's running mean in the accumulator's dtype; Post and PostAndLoss sum, then divide); the
        simulated cycles do not (PopART's accumulate scales as it adds, at the same cost)."""
        if not isinstance(strategy, enums.MeanReductionStrategy):  # PopTorch's OptionsDict type assert
            raise AssertionError(f"Unexpected type {type(strategy)} for option "
                                 "meanAccumulationAndReplicationReductionStrategy: expected a "
                                 f"poptorch.MeanReductionStrategy, got {strategy!r}")
        self.meanAccumulationAndReplicationReductionStrategy = strategy
        self._owner._record("Training.setMeanAccumulationAndReplicationReductionStrategy", strategy.name)
        return self

    _ipusim_dict_prefix = "Training."

    def _dict_values(self) -> dict:
        """PopTorch's names (python/options.py ``_TrainingOptions``)."""
        return {"gradient_accumulation": self.gradient_accumulation,
                "accumulation_and_replication_reduction_type": self.reduction_type,
                "meanAccumulationAndReplicationReductionStrategy":
                    self.meanAccumulationAndReplicationReductionStrategy}

    def _dict_setters(self) -> dict:
        return {"gradient_accumulation": self.gradientAccumulation,
                "accumulation_and_replication_reduction_type": self.accumulationAndReplicationReductionType,
                "meanAccumulationAndReplicationReductionStrategy":
                    self.setMeanAccumulationAndReplicationReductionStrategy}

    def setAutomaticLossScaling(self, enabled: bool) -> "_TrainingOptions":
        self._owner._Popart._set_quiet("automaticLossScalingSettings.enabled", enabled)
        self._owner._record("Training.setAutomaticLossScaling", bool(enabled))
        return self

    def setConvolutionDithering(self, enabled: bool) -> "_TrainingOptions":
        """Accepted, no modelled effect. As PopTorch's, it replaces the whole ``convolutionOptions``
        map with ``{"enableConvDithering": enabled}``, so a convolution partials type set before
        (``Precision.setPartialsType``) is float again."""
        self._owner._Popart.set("convolutionOptions", {"enableConvDithering": enabled})
        self._owner._record("Training.setConvolutionDithering", bool(enabled))
        return self


class _TensorLocationOptions(_Frozen, _sim_options._TensorLocations):
    """``Options.TensorLocations``: IO tiles and where each class of tensor lives."""

    def numIOTiles(self, num_tiles: int) -> "_TensorLocationOptions":
        """Tiles given to host IO: an even number from 32 to 192 (PopTorch's limits)."""
        self._check_frozen()
        return super().numIOTiles(num_tiles)

    def _set(self, kind: str, location) -> "_TensorLocationOptions":
        """Keep a copy of ``location``: PopTorch stores its values (``location.toDict()``), so a
        later change to the settings object does not reach these options."""
        self._check_frozen()
        if isinstance(location, TensorLocationSettings):
            location = copy.copy(location)
        return super()._set(kind, location)


class _PopartOptions(_Frozen, _sim_options._Popart):
    """``Options._Popart``: PopART session options by name (advanced; setters return this).

    Two keys have an option of their own and are routed to it:
    ``instrumentWithHardwareCycleCounter`` (``logCycleCount``) and ``syntheticDataMode``
    (``enableSyntheticData``, non-zero = on).
    """

    _ROUTED = {"instrumentWithHardwareCycleCounter": "logCycleCount",
               "syntheticDataMode": "enableSyntheticData"}

    def __init__(self, owner: "Options"):
        super().__init__(owner)
        self.values["instrumentWithHardwareCycleCounter"] = False
        self.values["rearrangeAnchorsOnHost"] = False

    @property
    def options(self) -> dict:
        """The PopART options set so far (PopTorch's ``_Popart.options``)."""
        return self.values

    def _set_quiet(self, key: str, value) -> None:
        """Store a value an option of its own has already recorded."""
        self._check_frozen()
        self.values[key] = value

    def set(self, key: str, value) -> "_PopartOptions":
        self._check_frozen()
        routed = self._ROUTED.get(key)
        if routed == "logCycleCount":
            self._owner.logCycleCount(bool(value))
        elif routed == "enableSyntheticData":
            self._owner.enableSyntheticData(bool(value))
        else:
            super().set(key, value)
        return self

    def setEngineOptions(self, engine_options: dict) -> "_PopartOptions":
        return self.set("engineOptions", dict(engine_options))

    def setPatterns(self, patterns: dict, level: int = 2) -> "_PopartOptions":
        if not isinstance(level, int) or not isinstance(patterns, dict):  # PopTorch's asserts
            raise AssertionError("setPatterns expects a dict of pattern names and an int level")
        self.set("patterns_level", level)
        return self.set("patterns", dict(patterns))


class _PrecisionOptions(_Frozen):
    """``Options.Precision``: casting and numerics. ``setPartialsType`` is modelled (the AMP
    rate and partials memory of matmuls and convolutions); the others are accepted only."""

    def __init__(self, owner: "Options"):
        self._owner = owner
        self.half_float_casting = enums.HalfFloatCastingBehavior.Default
        self.running_statistics_always_float = True

    def halfFloatCasting(self, half_float_casting) -> "_PrecisionOptions":
        """Deprecated in PopTorch 3: float16 and float32 operands are cast as PyTorch casts
        them (HalfUpcastToFloat), which is what the CPU numbers do. Logs PopTorch's warning."""
        logger.warning("[Deprecated] Do not call options.Precision.halfFloatCasting(): "
                       "HalfUpcastToFloat is now the only supported option and matches PyTorch's "
                       "behaviour so you don't need to explicitly set it.")
        self.half_float_casting = half_float_casting  # PopTorch 3 ignores the value (no check)
        self._owner._record("Precision.halfFloatCasting", getattr(half_float_casting, "name", half_float_casting))
        return self

    def runningStatisticsAlwaysFloat(self, value: bool) -> "_PrecisionOptions":
        """Deprecated in PopTorch 3 (running statistics keep the model's dtype, as in PyTorch)."""
        if not isinstance(value, bool):
            raise ValueError("runningStatisticsAlwaysFloat needs to be set to a bool")
        logger.warning("[Deprecated] Do not call options.Precision.runningStatisticsAlwaysFloat(): "
                       "False is now the only supported option and matches PyTorch's behaviour so "
                       "you don't need to explicitly set it.")
        self.running_statistics_always_float = value
        self._owner._record("Precision.runningStatisticsAlwaysFloat", value)
        return self

    def enableFloatingPointExceptions(self, enabled: bool) -> "_PrecisionOptions":
        if not isinstance(enabled, bool):  # PopTorch's assert
            raise AssertionError("enableFloatingPointExceptions needs to be set to a bool")
        self._owner._Popart._set_quiet("enableFloatingPointChecks", enabled)
        self._owner._record("Precision.enableFloatingPointExceptions", enabled)
        return self

    def enableStochasticRounding(self, enabled: bool) -> "_PrecisionOptions":
        self._owner._Popart._set_quiet("enableStochasticRounding", enabled)
        self._owner._record("Precision.enableStochasticRounding", bool(enabled))
        return self

    def setPartialsType(self, dtype) -> "_PrecisionOptions":
        import torch
        if dtype in (torch.float, torch.float32):
            name = "float"
        elif dtype in (torch.half, torch.float16):
            name = "half"
        else:
            raise ValueError("parameter to setPartialsType should be either torch.float or torch.half")
        self._owner._Popart._set_quiet("partialsTypeMatMuls", name)
        # as PopTorch's setPartialsType, which replaces the whole map: the convolution options set
        # before (use128BitConvUnitLoad, ...) are gone
        self._owner._Popart.set("convolutionOptions", {"partialsType": name})
        self._owner._record("Precision.setPartialsType", name)
        return self


class _DistributedOptions(OptionsDictMixin, _Frozen):
    """``Options.Distributed``: this process's index among the processes of a run.

    The process id and count are read from ``OMPI_COMM_WORLD_RANK`` and
    ``OMPI_COMM_WORLD_SIZE`` by default, as in PopTorch. They decide which part of the dataset
    a ``poptorch.DataLoader`` reads and the size of the simulated system; the simulator runs
    this process's replicas only.
    """

    def __init__(self, owner: "Options"):
        self._owner = owner
        self.num_distributed_processes = 1
        self.distributed_process_id = 0
        self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", _record=False)

    def disable(self) -> "_DistributedOptions":
        """Ignore the environment: one process."""
        self.num_distributed_processes = 1
        self.distributed_process_id = 0
        self._owner._record("Distributed.configureProcessId", (0, 1))
        return self

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str,
                       _record: bool = True) -> "_DistributedOptions":
        """Read the process id and count from these environment variables."""
        pid = int(os.environ.get(var_process_id, "0"))
        num = int(os.environ.get(var_num_processes, "1"))
        if not _record:
            self.distributed_process_id, self.num_distributed_processes = pid, num
            return self
        return self.configureProcessId(pid, num)

    def configureProcessId(self, process_id: int, num_processes: int) -> "_DistributedOptions":
        """Set this process's id and the number of processes."""
        if not (isinstance(process_id, int) and isinstance(num_processes, int)) or \
                num_processes < 1 or not 0 <= process_id < num_processes:
            raise ValueError(f"configureProcessId: process id {process_id!r} must be in "
                             f"[0, {num_processes!r}) and the process count >= 1")
        self.distributed_process_id = process_id
        self.num_distributed_processes = num_processes
        self._owner._record("Distributed.configureProcessId", (process_id, num_processes))
        return self

    _ipusim_dict_prefix = "Distributed."

    def _dict_values(self) -> dict:
        """PopTorch's names (python/options.py ``_DistributedOptions``)."""
        return {"num_distributed_processes": self.num_distributed_processes,
                "distributed_process_id": self.distributed_process_id}

    def _dict_setters(self) -> dict:
        return {"num_distributed_processes": lambda n: self.configureProcessId(self.distributed_process_id, n),
                "distributed_process_id": lambda i: self.configureProcessId(i, self.num_distributed_processes)}

    def set(self, **kwargs) -> None:
        """Both values at once when both are given, so their order does not matter."""
        if {"num_distributed_processes", "distributed_process_id"} <= kwargs.keys():
            super().set(**{k: v for k, v in kwargs.items() if k not in self._dict_values()})
            values = self._dict_values()
            for key in values:  # PopTorch's type checks, then one configureProcessId
                if not isinstance(kwargs[key], type(values[key])):
                    raise AssertionError(f"Unexpected type {type(kwargs[key])} for option {key}. "
                                         f"Expected {type(values[key])}")
            self.configureProcessId(kwargs["distributed_process_id"], kwargs["num_distributed_processes"])
            return
        super().set(**kwargs)

    @property
    def processId(self) -> int:
        return self.distributed_process_id

    @property
    def numProcesses(self) -> int:
        return self.num_distributed_processes


class _JitOptions(_Frozen):
    """``Options.Jit``: how PopTorch captures the model. ``traceModel(True)`` (torch.jit
    tracing) is refused as by PopTorch 3; ``False``, its default, is accepted with a warning
    (the simulator captures with torch.fx / torch.export)."""

    def __init__(self, owner: "Options"):
        self._owner = owner
        self.trace_model = False

    def traceModel(self, trace_model: bool) -> "_JitOptions":
        logger.warning("[Deprecated] Do not call options.Jit.traceModel(): options.Jit.traceModel(False) "
                       "is now the default, and True is no longer supported, therefore this function "
                       "will be removed shortly")
        if trace_model:
            raise ValueError("options.Jit.traceModel(True) is no longer supported")
        self._owner._record("Jit.traceModel", False)
        return self


class Options(OptionsDictMixin, _Frozen, _sim_options.Options):
    """Every option that controls how a model is compiled and run (``poptorch.Options``).

    >>> opts = poptorch.Options().deviceIterations(8).logCycleCount(True)
    >>> opts.Training.gradientAccumulation(4)
    """

    MODELLED = _sim_options.Options.MODELLED | _FRONT_END_MODELLED | _READ_BY_COMPILER

    def num_instances(self) -> int:
        """PopDist instances (``Distributed.numProcesses``): collectives span all of theirs."""
        return self.Distributed.numProcesses

    def instance_index(self) -> int:
        return self.Distributed.processId

    def __init__(self) -> None:
        object.__setattr__(self, "_frozen", False)
        super().__init__()
        self.execution_strategy = PipelinedExecution()  # PopTorch's default
        self.Training = _TrainingOptions(self)
        self.TensorLocations = _TensorLocationOptions(self)
        self._Popart = _PopartOptions(self)
        self.Precision = _PrecisionOptions(self)
        self.Distributed = _DistributedOptions(self)
        self.Jit = _JitOptions(self)
        self.connection_type = enums.ConnectionType.Always
        self.simulated_system: str | None = None
        self.cpu_outputs: bool | None = None  # computeOutputsOnCpu; None: the IPUSIM_CPU_OUTPUTS variable
        self.log_dir = "."
        self.max_repeat_logs = 4  # PopTorch's default
        self.model_name: str | None = None
        self.broadcast_buffers = True
        self.anchored_tensors: dict = {}
        self._show_compilation_progress_bar = True
        self._relax_optimizer_checks = False
        self._module_namescope_enabled = True
        self._source_location_excludes: list[str] = []
        cache = os.environ.get("POPTORCH_CACHE_DIR", "")
        if cache:
            self.enableExecutableCaching(cache)
        if os.environ.get("POPTORCH_IPU_MODEL", "") not in ("", "0"):
            self.useIpuModel(True)
        defaults = os.environ.get("POPTORCH_DEFAULT_OPTIONS", "")
        if defaults.strip():
            try:
                self.from_json(defaults)
            except (ConfigFileError, json.JSONDecodeError) as e:
                raise ConfigFileError(f"environment variable POPTORCH_DEFAULT_OPTIONS: {e}") from None

    def from_json(self, string: str) -> "Options":
        """Set options from a JSON object ``{"name.of.setter": value}``: a list value is the
        setter's arguments, anything else its one argument, and a string such as
        ``"OutputMode.All"`` names an enum value. For example
        ``'{"deviceIterations": 4, "Training.gradientAccumulation": 2, "_Popart.set":
        ["OptionName", 1]}'``. PopTorch applies ``POPTORCH_DEFAULT_OPTIONS`` this way to every
        new ``Options``."""
        values = json.loads(string)
        if not isinstance(values, dict):
            raise ConfigFileError(f"expected a JSON object of setters and values, got {string!r}")
        for option, value in values.items():
            target = self
            for attribute in option.split("."):
                if attribute.startswith("__") or not hasattr(target, attribute):
                    raise ConfigFileError(f"unknown option {option!r}")
                target = getattr(target, attribute)
            if not callable(target):
                raise ConfigFileError(f"{option!r} is not a setter")
            value = _enum_from_string(value)
            args = [_enum_from_string(v) for v in value] if isinstance(value, list) else [value]
            try:
                target(*args)
            except (OptionsError, ValueError, TypeError, AssertionError) as e:
                raise ConfigFileError(f"{option}: {e}") from None
        return self

    # --- freezing -----------------------------------------------------------------------
    def _freeze(self) -> None:
        object.__setattr__(self, "_frozen", True)

    def _record(self, name: str, value) -> None:
        self._check_frozen()
        super()._record(name, value)

    def clone(self) -> "Options":
        """An unfrozen deep copy."""
        return copy.deepcopy(self)

    def __deepcopy__(self, memo):
        """A deep copy is unfrozen, as PopTorch's (``OptionsDict.__deepcopy__``): ``copy.deepcopy`` of the
        options a model froze gives options a script may change for another model."""
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            object.__setattr__(new, k, False if k == "_frozen" else copy.deepcopy(v, memo))
        return new

    # --- the simulator's own option -------------------------------------------------------
    def simulatedSystem(self, name_or_path: str | os.PathLike) -> "Options":
        """Simulate this system (a config name such as ``"ipu-pod16"``, or a TOML path).

        Without it the system comes from the ``IPUSIM_SYSTEM`` environment variable, or is
        the smallest Mk2 system holding IPUs-per-replica x replicas.
        """
        from ..hardware.system import load_system
        load_system(name_or_path)  # fail now, not at the first call
        self.simulated_system = str(name_or_path)
        self._record("simulatedSystem", str(name_or_path))
        return self

    def computeOutputsOnCpu(self, enabled: bool = True) -> "Options":
        """Whether each call computes the model's real outputs on the CPU (the default) or returns zeros of
        their shapes and dtypes without running the model, the weights then left as they are: the
        simulated run is the same either way, and a call of a large model takes seconds instead of the
        CPU's hours. Without it the ``IPUSIM_CPU_OUTPUTS`` environment variable decides ("0": zeros)."""
        if not isinstance(enabled, bool):
            raise ValueError(f"computeOutputsOnCpu takes True or False, not {enabled!r}")
        self.cpu_outputs = enabled
        self._record("computeOutputsOnCpu", enabled)
        return self

    # --- setters PopTorch has and sim.Options implements with checks of its own ------------
    def setAvailableMemoryProportion(self, available_memory_proportion: dict) -> "Options":
        """Per-IPU share of tile memory for the temporaries of matmuls, convolutions, lookups and scatters
        (PopTorch sets it on every op of the IPU): ``{"IPU0": 0.5}``."""
        self._check_frozen()
        for key in available_memory_proportion:
            if not (isinstance(key, str) and key.startswith("IPU")):
                raise AssertionError(
                    "Available memory proportions are expected to be in a dictionary of "
                    f"{{\"IPU0\": 0.5}} where the 0 in IPU is the index of the IPU. Invalid key: {key}")
        # PopTorch replaces the whole map (createOrSet of the new dict): an IPU a later call leaves out
        # is back at the default proportion
        held = self.available_memory_proportion
        self.available_memory_proportion = {}
        try:
            return super().setAvailableMemoryProportion(available_memory_proportion)
        except BaseException:
            self.available_memory_proportion = held
            raise

    def outputMode(self, output_mode, output_return_period: int | None = None) -> "Options":
        """Which outputs return: All, Final, Sum, EveryN (with its period) or Default."""
        if output_mode == enums.OutputMode.EveryN and not (
                isinstance(output_return_period, int) and output_return_period > 0):
            raise AssertionError("EveryN anchor must have output_return_period set to valid "
                                 "positive integer")
        if output_mode != enums.OutputMode.EveryN:
            if output_return_period:
                logger.info("Anchor return period argument ignored with output_mode set to %s", output_mode)
            output_return_period = None  # PopTorch ignores it
        super().outputMode(output_mode, output_return_period)
        if output_mode != enums.OutputMode.EveryN:
            self.output_return_period = 1  # as PopTorch sets it (``output_return_period or 1``)
        return self

    def defaultOutputMode(self) -> bool:
        """Is the output mode still ``Default``?"""
        return self.output_mode == enums.OutputMode.Default

    def logCycleCount(self, log_cycle_count: bool) -> "Options":
        """Let ``cycleCount()`` report the simulated cycles of the latest run."""
        super().logCycleCount(log_cycle_count)
        self._Popart.values["instrumentWithHardwareCycleCounter"] = bool(log_cycle_count)
        return self

    def enableSyntheticData(self, enabled: bool) -> "Options":
        """No host IO: inputs are made on the device and outputs are not sent back."""
        super().enableSyntheticData(enabled)
        self._Popart.values["syntheticDataMode"] = 2 if enabled else 0
        return self

    def randomSeed(self, random_seed: int) -> "Options":
        """Seed the random number generators (PopTorch also seeds torch on the host)."""
        if not isinstance(random_seed, int):
            raise AssertionError("randomSeed expects an int")
        import torch
        torch.manual_seed(random_seed)
        return super().randomSeed(random_seed)

    # --- PopTorch setters the simulator accepts ----------------------------------------------
    def _accept(self, name: str, value, attr: str | None = None) -> "Options":
        if attr is not None:
            setattr(self, attr, value)
        self._record(name, value)
        return self

    def connectionType(self, connection_type) -> "Options":
        """Always (default), OnDemand, or Never (compile only: calling the model is an error)."""
        if not isinstance(connection_type, enums.ConnectionType):
            raise AssertionError(f"connectionType expects a poptorch.ConnectionType, got {connection_type!r}")
        self.connection_type = connection_type
        self._record("connectionType", connection_type.name)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> "Options":
        """Compile for an offline target of ``ipu_version`` (1: Mk1, 2: Mk2, 21: Mk2 with FP8, the
        C600): ``ConnectionType.Never``, and the simulated system is that IPU's (see
        :mod:`sim.poptorch._system`)."""
        if ipu_version not in _system.IPU_VERSIONS:
            raise AssertionError(f"useOfflineIpuTarget: ipu_version {ipu_version!r} is not one of "
                                 f"{sorted(_system.IPU_VERSIONS)} (1 for Mk1, 2 for Mk2, 21 for Mk2 with FP8 support)")
        self.connectionType(enums.ConnectionType.Never)
        return self._accept("useOfflineIpuTarget", ipu_version, "ipu_version")

    def showCompilationProgressBar(self, show: bool = True) -> "Options":
        return self._accept("showCompilationProgressBar", bool(show), "_show_compilation_progress_bar")

    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> "Options":
        return self._accept("relaxOptimizerAttributesChecks", bool(relax), "_relax_optimizer_checks")

    def sourceLocationExcludes(self, excludes: list) -> "Options":
        return self._accept("sourceLocationExcludes", list(excludes), "_source_location_excludes")

    def appendToLocationExcludes(self, *excludes: str) -> "Options":
        return self._accept("appendToLocationExcludes", list(excludes))

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> "Options":
        _check_type("broadcast_buffers", broadcast_buffers, bool)
        return self._accept("broadcastBuffers", broadcast_buffers, "broadcast_buffers")

    def logDir(self, log_dir: str) -> "Options":
        _check_type("log_dir", log_dir, str)
        return self._accept("logDir", log_dir, "log_dir")

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> "Options":
        """Round the IPU count up to a power of two instead of failing."""
        _check_type("auto_round_num_ipus", auto_round_num_ipus, bool)
        return super().autoRoundNumIPUs(auto_round_num_ipus)

    def modelName(self, name: str) -> "Options":
        return self._accept("modelName", str(name), "model_name")

    def enableExecutableCaching(self, path: str | None) -> "Options":
        """PopART's ``cachePath`` and ``enableEngineCaching`` (None: caching off), as PopTorch sets them;
        the simulator keeps no executable cache."""
        if path is not None:
            self._Popart._set_quiet("cachePath", path)
        self._Popart._set_quiet("enableEngineCaching", path is not None)
        return self._accept("enableExecutableCaching", path)

    def useIpuModel(self, use_model: bool) -> "Options":
        return self._accept("useIpuModel", bool(use_model), "_use_model")

    def useIpuId(self, ipu_id: int) -> "Options":
        if not isinstance(ipu_id, int):
            raise AssertionError("useIpuId expects an int")
        return self._accept("useIpuId", ipu_id, "_ipu_id")

    def anchorTensor(self, short_name: str, long_name: str, output_mode=None,
                     output_return_period: int | None = 1) -> "Options":
        self._check_frozen()
        self.anchored_tensors[short_name] = [long_name, output_mode is None, output_mode,
                                             output_return_period]
        return self._accept("anchorTensor", short_name)

    def enableProfiling(self, profile_dir: str | None = None) -> "Options":
        """Poplar's ``autoReport`` engine options, added to ``_Popart`` ``engineOptions`` as PopTorch adds
        them; the simulator writes no profile (``model.simulation`` holds the simulated one)."""
        engine = os.getenv("POPLAR_ENGINE_OPTIONS", default="")
        if any(key in engine for key in ("debug.allowOutOfMemory", "autoReport.directory", "autoReport.all")):
            logger.warning("Profiling setting overridden by environment variable. "
                           "Check content of POPLAR_ENGINE_OPTIONS.")
        self._Popart._set_quiet("engineOptions", {**self._Popart.values.get("engineOptions", {}),
                                                  "debug.allowOutOfMemory": "true",
                                                  "autoReport.directory": profile_dir or ".",
                                                  "autoReport.all": "true"})
        return self._accept("enableProfiling", profile_dir or ".")

    def disableModuleNamescope(self) -> "Options":
        """Op names without the module path (the simulator's op names keep it)."""
        self._module_namescope_enabled = False
        return self._accept("disableModuleNamescope", True)

    def updatableNamedBuffers(self, buffers: list) -> "Options":
        """Buffers ``copyNamedBuffersToDevice`` may copy (a PopART option in PopTorch, so also in
        ``_Popart.options``)."""
        self._Popart.values["updatableNamedBuffers"] = list(buffers)
        return self._accept("updatableNamedBuffers", list(buffers))

    def maxRepeatLogs(self, max_lines: int | None) -> "Options":
        """Cap on repeated log lines (None: no cap, as PopTorch's ``2^64 - 1``; default 4)."""
        if max_lines is not None and (isinstance(max_lines, bool) or not isinstance(max_lines, int)):
            raise AssertionError(f"Unexpected type {type(max_lines)} for option max_repeat_logs. "
                                 "Expected <class 'int'>")
        return self._accept("maxRepeatLogs", (1 << 64) - 1 if max_lines is None else max_lines, "max_repeat_logs")

    # --- PopTorch's OptionsDict interface: set(**kw), createOrSet(**kw), exists, opts("name"), toDict ---
    #: values PopTorch creates only when their setter runs (``createOrSet``), and the attribute holding them
    _CREATED = {"model_name": "model_name", "use_model": "_use_model", "ipu_id": "_ipu_id",
                "ipu_version": "ipu_version", "random_seed": "random_seed"}

    def _dict_values(self) -> dict:
        """PopTorch's names and values (python/options.py ``Options.__init__``: its defaults, then what
        ``createOrSet`` adds); enum values as PopTorch stores them (``output_mode`` and the like as ints)."""
        values = {"replication_factor": self.replication_factor, "input_group_size": self.input_group_size,
                  "input_cgt": self.input_group_type, "broadcast_buffers": self.broadcast_buffers,
                  "device_iterations": self.device_iterations, "log_dir": self.log_dir,
                  "max_repeat_logs": self.max_repeat_logs, "auto_round_num_ipus": self.auto_round_num_ipus,
                  "anchored_tensors": self.anchored_tensors, "output_mode": int(self.output_mode),
                  "output_return_period": self.output_return_period,
                  "connection_type": int(self.connection_type), "sync_pattern": int(self.sync_pattern),
                  "available_memory_proportion": dict(self.available_memory_proportion)}
        for name, attr in self._CREATED.items():
            if getattr(self, attr, None) is not None:
                values[name] = getattr(self, attr)
        return values

    def _set_output_mode(self, mode: int) -> None:
        mode = enums.OutputMode(mode)
        self.outputMode(mode, self.output_return_period if mode == enums.OutputMode.EveryN else None)

    def _set_output_return_period(self, period: int) -> None:
        if self.output_mode == enums.OutputMode.EveryN:
            self.outputMode(self.output_mode, period)
        else:  # PopTorch stores it; only EveryN reads it
            self._check_frozen()
            self.output_return_period = period

    def _set_anchored_tensors(self, anchors: dict) -> None:
        self._check_frozen()
        self.anchored_tensors = {}
        for short, (long_name, _default, mode, period) in anchors.items():
            self.anchorTensor(short, long_name, mode, period)

    def _dict_setters(self) -> dict:
        return {"replication_factor": self.replicationFactor,
                "input_group_size": lambda n: self.inputReplicaGrouping(n, self.input_group_type),
                "input_cgt": lambda t: self.inputReplicaGrouping(self.input_group_size, t),
                "broadcast_buffers": self.broadcastBuffers, "device_iterations": self.deviceIterations,
                "log_dir": self.logDir, "max_repeat_logs": self.maxRepeatLogs,
                "auto_round_num_ipus": self.autoRoundNumIPUs, "anchored_tensors": self._set_anchored_tensors,
                "output_mode": self._set_output_mode, "output_return_period": self._set_output_return_period,
                "connection_type": lambda v: self.connectionType(enums.ConnectionType(v)),
                "sync_pattern": lambda v: self.syncPattern(_sim_options.SyncPattern(v)),
                "available_memory_proportion":
                    lambda d: self.setAvailableMemoryProportion({f"IPU{k}": v for k, v in d.items()}),
                "model_name": self.modelName, "use_model": self.useIpuModel, "ipu_id": self.useIpuId,
                "ipu_version": self.useOfflineIpuTarget, "random_seed": self.randomSeed}

    # PopTorch's readable option values (attributes of its OptionsDict) under their own names
    @property
    def input_cgt(self):
        return self.input_group_type

    @property
    def ipu_id(self):
        return getattr(self, "_ipu_id", None)

    @property
    def use_model(self):
        return getattr(self, "_use_model", None)

    # --- files and dictionaries -----------------------------------------------------------
    def loadFromFile(self, filepath: str | os.PathLike) -> "Options":
        """Set options from a file with one setter call per line, without the ``options.``
        prefix, e.g. ``deviceIterations(8)`` or ``Training.gradientAccumulation(4)``. Lines
        starting with ``#`` are comments. Arguments are Python literals or PopTorch enum
        values (``poptorch.OutputMode.All`` or ``OutputMode.All``)."""
        path = Path(filepath)
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                _apply_line(self, line)
            except ConfigFileError as e:
                raise ConfigFileError(f"{path}:{lineno}: {e}") from None
        return self

    def unmodelled(self) -> dict[str, object]:
        """:meth:`sim.Options.unmodelled`, with ``Training.setConvolutionDithering`` listed once (not
        also as the ``convolutionOptions`` key it sets)."""
        out = super().unmodelled()
        if "Training.setConvolutionDithering" in out:
            out.pop(f"{self.POPLIN_OPTION_MAPS['conv']}.enableConvDithering", None)
        return out

    def toDict(self) -> dict:
        """Every option under PopTorch's names, merged as PopTorch's ``Options.toDict`` merges them for its
        backend (python/options.py): the execution strategy's ``execution_mode`` (and a phased strategy's
        ``separate_backward_phase``, ``tensors_liveness``, ``serial_phases_execution``), the ``_Popart``
        options, these options' values, then the ``Training``, ``Distributed`` and ``TensorLocations``
        values. PopTorch asserts an output mode other than ``Default`` first (its executor picks one before
        it serialises); here the ``Default`` value (4) is returned as it is. The setters called, by their
        own names, are :attr:`set_options`."""
        strategy = self.execution_strategy
        out = {"execution_mode": 2 if isinstance(strategy, (SerialPhasedExecution, ParallelPhasedExecution))
               else 1 if isinstance(strategy, ShardedExecution) else 0}
        if out["execution_mode"] == 2:
            out.update(separate_backward_phase=bool(strategy.separate_backward_phase),
                       tensors_liveness=int(strategy.liveness))
            if isinstance(strategy, SerialPhasedExecution):
                out["serial_phases_execution"] = True
        out.update(self._Popart.values)
        out.update(self._all_values())
        out.update(self.Training._all_values())
        out.update(self.Distributed._all_values())
        if self.TensorLocations.num_io_tiles:
            out["numIOTiles"] = self.TensorLocations.num_io_tiles
        return out

    def __repr__(self) -> str:
        return f"Options({self.set_options})"


# PopTorch's enums by name, for enum values written as strings (``"OutputMode.All"``)
_ENUMS = {name: getattr(enums, name) for name in enums.__all__}


def _enum_from_string(value):
    """``"OutputMode.All"`` -> ``enums.OutputMode.All`` (other values unchanged), as PopTorch's
    ``from_json`` reads enum values."""
    if isinstance(value, str) and value.count(".") == 1:
        kind, name = value.split(".")
        cls = _ENUMS.get(kind)
        if cls is not None and hasattr(cls, name):
            return getattr(cls, name)
    return value


def _poptorch_names() -> dict:
    """What ``poptorch.X`` can name in an options file: sim.poptorch's public names (its
    constructors such as ``ShardedExecution`` and ``TensorLocationSettings``, and its enums)."""
    poptorch = importlib.import_module(__package__)  # the package, loaded before this module
    return {name: getattr(poptorch, name) for name in poptorch.__all__ if hasattr(poptorch, name)}


def _evaluate(node: ast.AST, opts: Options, names: dict):
    """The value of ``node``, an expression of an options-file line: Python literals, containers,
    ``poptorch.<public name>`` or a bare enum name, attributes (no dunders) and calls of what those
    reach; a bare name otherwise is an attribute of the options (the line's implicit ``options.``)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_evaluate(e, opts, names) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        return {_evaluate(k, opts, names): _evaluate(v, opts, names) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, opts, names)
    if isinstance(node, ast.Name):
        if node.id == "poptorch":
            return names
        if node.id in _ENUMS:  # OutputMode.All without poptorch.
            return _ENUMS[node.id]
        if node.id == "enums":
            return enums
        if node.id.startswith("__") or not hasattr(opts, node.id):
            raise ConfigFileError(f"unknown option {node.id!r}")
        return getattr(opts, node.id)
    if isinstance(node, ast.Attribute):
        owner = _evaluate(node.value, opts, names)
        if node.attr.startswith("__"):
            raise ConfigFileError(f"unsupported name {node.attr!r}")
        if owner is names:
            if node.attr not in names:
                raise ConfigFileError(f"unknown value 'poptorch.{node.attr}'")
            return names[node.attr]
        if not hasattr(owner, node.attr):
            raise ConfigFileError(f"unknown option or value {ast.unparse(node)!r}")
        return getattr(owner, node.attr)
    if isinstance(node, ast.Call):
        target = _evaluate(node.func, opts, names)
        if not callable(target):
            raise ConfigFileError(f"{ast.unparse(node.func)!r} is not a setter")
        args = [_evaluate(a, opts, names) for a in node.args]
        kwargs = {k.arg: _evaluate(k.value, opts, names) for k in node.keywords}
        try:
            return target(*args, **kwargs)
        except (OptionsError, ValueError, TypeError, AssertionError, AttributeError) as e:
            raise ConfigFileError(f"{ast.unparse(node.func)}: {e}") from None
    raise ConfigFileError(f"unsupported argument {ast.unparse(node)!r}")


def _apply_line(opts: Options, line: str) -> None:
    """One line of an options file, as PopTorch runs it (``options.<line>``): a setter call, which
    may be chained (``deviceIterations(2).replicationFactor(2)``) and take constructed values
    (``setExecutionStrategy(poptorch.ShardedExecution())``)."""
    try:
        tree = ast.parse(line, mode="eval").body
    except SyntaxError as e:
        raise ConfigFileError(f"cannot parse {line!r}: {e.msg}") from None
    if not isinstance(tree, ast.Call):
        raise ConfigFileError(f"expected a setter call such as deviceIterations(1), got {line!r}")
    _evaluate(tree, opts, _poptorch_names())


__all__ = ["Options", "TensorLocationSettings", "ConfigFileError", "Stage", "Phase",
           "PipelinedExecution", "ShardedExecution", "SerialPhasedExecution",
           "ParallelPhasedExecution"]
