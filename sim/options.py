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

from .errors import OptionsError


class OutputMode(enum.IntEnum):
    """Which outputs are returned to the host (PopTorch ``OutputMode``)."""

    Final = 0
    All = 1
    Sum = 2
    EveryN = 3
    Default = 4


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionsError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


class _Training:
    def __init__(self, owner: "Options"):
        self._owner = owner
        self.gradient_accumulation = 1

    def gradientAccumulation(self, steps: int) -> "Options":
        """Micro-batches whose gradients are summed before one weight update."""
        self.gradient_accumulation = _positive_int("Training.gradientAccumulation", steps)
        self._owner._record("Training.gradientAccumulation", steps)
        return self._owner


class Options:
    """The PopTorch options the simulator understands (see the module docstring)."""

    #: options this class models; anything else recorded is reported as unmodelled
    MODELLED = {"deviceIterations", "replicationFactor", "Training.gradientAccumulation",
                "outputMode", "enableSyntheticData", "setAvailableMemoryProportion",
                "logCycleCount"}

    def __init__(self):
        self.device_iterations = 1
        self.replication_factor = 1
        self.output_mode = OutputMode.Default
        self.output_return_period = 1
        self.synthetic_data = False
        self.available_memory_proportion: dict[int, float] = {}
        self.log_cycle_count = False
        self.random_seed: int | None = None
        self.set_options: dict[str, object] = {}
        self.Training = _Training(self)

    def _record(self, name: str, value) -> None:
        self.set_options[name] = value

    # --- setters (PopTorch names) -------------------------------------------------------
    def deviceIterations(self, device_iterations: int) -> "Options":
        """Micro-batch loops (times gradient accumulation) run per call, without the host."""
        self.device_iterations = _positive_int("deviceIterations", device_iterations)
        self._record("deviceIterations", device_iterations)
        return self

    def replicationFactor(self, replication_factor: int) -> "Options":
        self.replication_factor = _positive_int("replicationFactor", replication_factor)
        self._record("replicationFactor", replication_factor)
        return self

    def outputMode(self, output_mode: OutputMode, output_return_period: int | None = None) -> "Options":
        """Which outputs come back: All, Final, Sum, EveryN (with its period) or Default."""
        if not isinstance(output_mode, OutputMode):
            raise OptionsError(f"outputMode expects a sim.OutputMode, got {output_mode!r}")
        if output_mode == OutputMode.EveryN:
            if output_return_period is None:
                raise OptionsError("OutputMode.EveryN needs output_return_period")
            self.output_return_period = _positive_int("output_return_period", output_return_period)
        elif output_return_period is not None:
            raise OptionsError("output_return_period is only valid with OutputMode.EveryN")
        self.output_mode = output_mode
        self._record("outputMode", output_mode.name)
        return self

    def enableSyntheticData(self, enabled: bool) -> "Options":
        """No host IO: inputs are made on the device, outputs are not sent back."""
        self.synthetic_data = bool(enabled)
        self._record("enableSyntheticData", bool(enabled))
        return self

    def setAvailableMemoryProportion(self, proportions: dict) -> "Options":
        """Per-IPU share of tile memory matmuls/convs may use as temporaries: {"IPU0": 0.3}."""
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
        """Options that were set but have no effect on the simulation."""
        return {k: v for k, v in self.set_options.items() if k not in self.MODELLED}

    def clone(self) -> "Options":
        new = copy.deepcopy(self)
        new.Training._owner = new
        return new

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

    def __repr__(self) -> str:
        return f"Options({self.set_options})"
