"""Simulating a :class:`~sim.validation.setups.Setup`: each setup is simulated once
(:func:`_simulated`, cached) and the report's sections read its throughput (:func:`_outcome`), its
seconds per weight update by breakdown line (:func:`step_seconds`), its weight update's
collectives (:func:`update_collective_seconds`), its workload (:func:`workload`) and where its busiest
IPU's time goes (:func:`shares`) from that one run."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

from .. import simulate
from ..errors import OutOfMemoryError
from ..results.held_out import device_shares
from ..schedule.replicated_ops import NORM_COLLECTIVE_SUFFIX
from .setups import Setup


class Simulated(NamedTuple):
    """What the report keeps of one simulated call of a setup (:func:`_simulated`)."""

    samples_per_second: float
    #: seconds per weight update on the first IPU by breakdown line: the call's over its device iterations
    lines: dict[str, float]
    #: of the first IPU's ``collective`` line, the weight update's (all but the distributed norms' statistics)
    update_collective_seconds: float
    #: the workload's family (:mod:`sim.graph.workload`) and the IPUs it runs on
    workload: tuple[str, int]
    #: (fixed costs, exchange) as shares of the busiest IPU's device cycles (:func:`device_shares`)
    shares: tuple[float, float]


@lru_cache(maxsize=None)
def _simulated(setup: Setup) -> Simulated | OutOfMemoryError:
    """One simulated call of ``setup``, kept small (:class:`Simulated`), or the simulator's out-of-memory
    error. The report's sections share it, so each setup is simulated once."""
    try:
        run = simulate(setup.graph(), setup.system, setup.options(), training=setup.training,
                       optimizer=setup.sim_optimizer())
    except OutOfMemoryError as e:
        return e
    scale = run.executable.system.ipu.clock_hz * setup.device_iterations
    first = run.breakdown.iloc[0]
    trace = run.trace
    ipu = run.breakdown.index[0]
    update = trace[(trace.ipu == ipu) & (trace.kind == "collective")
                   & ~trace.name.str.endswith(NORM_COLLECTIVE_SUFFIX)]
    return Simulated(run.samples_per_second, {line: float(first[line]) / scale for line in first.index},
                     float(update.cycles.sum()) / scale, (run.executable.family, run.executable.partition_ipus),
                     device_shares(run.breakdown))


def _outcome(setup: Setup) -> float | OutOfMemoryError:
    """Samples per second of one simulated call, or the simulator's out-of-memory error."""
    value = _simulated(setup)
    return value if isinstance(value, OutOfMemoryError) else value.samples_per_second


def step_seconds(setup: Setup, prefetch_depth: int | None = None) -> tuple[dict[str, float], float]:
    """(seconds per weight update on the first IPU by breakdown line: one call's over its device
    iterations, samples/s per IPU) of ``setup``,
    with its host prefetch depth replaced by ``prefetch_depth`` when given (depth 2: the host
    fills and sends each input buffer while the IPU runs the previous micro-batch)."""
    if prefetch_depth is not None:
        setup = replace(setup, prefetch_depth=prefetch_depth)
    simulated = _simulated_or_raise(setup)
    return simulated.lines, simulated.samples_per_second / setup.replicas


def update_collective_seconds(setup: Setup) -> float:
    """Seconds per weight update the first IPU spends in the weight update's collectives (the
    ``collective`` line less the distributed norms' statistics all-reduces)."""
    return _simulated_or_raise(setup).update_collective_seconds


def workload(setup: Setup) -> tuple[str, int]:
    """(the workload's family: :mod:`sim.graph.workload`, the IPUs it runs on) of ``setup``."""
    return _simulated_or_raise(setup).workload


def shares(setup: Setup) -> tuple[float, float]:
    """(fixed costs, exchange) as shares of the busiest IPU's device cycles in ``setup``'s run
    (:func:`sim.results.held_out.device_shares`)."""
    return _simulated_or_raise(setup).shares


def _simulated_or_raise(setup: Setup) -> Simulated:
    """:func:`_simulated`, raising its out-of-memory error."""
    value = _simulated(setup)
    if isinstance(value, OutOfMemoryError):
        raise value
    return value
