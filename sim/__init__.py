"""ipusim: a discrete-event performance simulator for Graphcore IPU systems.

The flow (see docs/design.md): a :class:`Graph` (from the model zoo, the builder, or a front
end) is compiled with PopTorch-style :class:`Options` for a :class:`System` into a program,
which the SimPy engine runs; the :class:`Run` it returns holds what PopTorch's PoplarExecutor
would report (cycle count, latencies, perf counters) plus a trace, a breakdown and memory.
"""

from __future__ import annotations

from .compiler.executable import Executable, compile
from .engine import Engine
from .errors import (ConfigError, GraphError, IpuSimError, OptionsError, OutOfMemoryError,
                     UnsupportedOpError)
from .graph.ir import Graph, GraphBuilder, Op, Tensor
from .hardware.system import System, available_systems, load_system
from .options import Options, OutputMode, PipelineCopies
from .results.run import Run
from .schedule.hostio import optimizer_from_host, rng_state_between_host, variables_between_host
from .virtual_clock import real_perf_counter
from .graph.training import Optimizer

__version__ = "0.1.0"


def run_executable(executable: Executable) -> Run:
    """Simulate a compiled model once."""
    t0 = real_perf_counter()
    timeline = Engine(executable.system).run(executable.program)
    return Run(executable, timeline, wall_seconds=real_perf_counter() - t0)


def optimizer_write_seconds(executable: Executable, tensors_by_ipu: dict[int, int]) -> float:
    """Seconds of PopART's OptimizerFromHost engine run for ``executable``: the host writing
    ``tensors_by_ipu`` optimizer tensors (IPU of a replica -> count) to the IPUs, as it does when
    an optimizer's values change between calls (:func:`sim.schedule.hostio.optimizer_from_host`)."""
    return _host_program_seconds(executable, optimizer_from_host(tensors_by_ipu))


def variable_copy_seconds(executable: Executable, to_device: bool) -> float:
    """Seconds of PopART's WeightsFromHost (``to_device``) or WeightsToHost engine run for ``executable``: its
    weights and optimizer state streamed between the host and a replica's IPUs
    (:func:`sim.schedule.hostio.variables_between_host`); 0 with synthetic data, where PopART streams none."""
    if executable.options.synthetic_data:
        return 0.0
    program = variables_between_host(executable.graph, to_device)
    return _host_program_seconds(executable, program) if program.items else 0.0


def rng_state_copy_seconds(executable: Executable, to_device: bool, ipus: int = 0) -> float:
    """Seconds of PopART's RngStateFromHost (``to_device``) or RngStateToHost engine run for ``executable`` on
    ``ipus`` IPUs a replica (default: those the model uses) (:func:`sim.schedule.hostio.rng_state_between_host`);
    0 with synthetic data, where PopART runs neither."""
    if executable.options.synthetic_data:
        return 0.0
    program = rng_state_between_host(executable.system.ipu, ipus or executable.ipus_per_replica, to_device)
    return _host_program_seconds(executable, program)


def _host_program_seconds(executable: Executable, program) -> float:
    """Seconds of an engine run of ``program`` (a host-transfer program beside the model's) on ``executable``'s
    system."""
    return executable.system.cycles_to_seconds(Engine(executable.system).run(program).total_cycles)


def simulate(graph: Graph, system: System | str = "ipu-mk2", options: Options | None = None,
             training: bool = False, optimizer: Optimizer | str | None = None) -> Run:
    """Compile ``graph`` for ``system`` and simulate one call (all device iterations)."""
    t0 = real_perf_counter()
    run = run_executable(compile(graph, system, options, training, optimizer))
    run.wall_seconds = real_perf_counter() - t0
    return run


__all__ = ["simulate", "compile", "run_executable", "optimizer_write_seconds", "variable_copy_seconds",
           "rng_state_copy_seconds", "load_system", "available_systems",
           "Options", "OutputMode", "PipelineCopies", "Graph", "GraphBuilder", "Op", "Tensor", "System", "Run",
           "Executable",
           "Optimizer", "IpuSimError", "ConfigError", "GraphError", "OptionsError",
           "OutOfMemoryError", "UnsupportedOpError"]
