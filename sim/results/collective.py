"""One collective timed alone, as ``ipusim collective`` and the collective benchmarks run it.

The collective is planned by :mod:`sim.schedule.collectives` and run by the engine as a program
of one step. Times are cycles and seconds; bandwidths bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import Engine
from ..errors import OptionsError
from ..hardware.system import System, load_system
from ..program import Sequence
from ..schedule.collectives import CollectivePlan, bus_factor, collective_item


@dataclass(frozen=True)
class CollectiveResult:
    """A collective simulated by the engine. Bandwidths in bytes per second."""

    plan: CollectivePlan
    cycles: int  # the engine's
    seconds: float
    system: str

    @property
    def algorithm_bandwidth(self) -> float:
        """``S / t``: the tensor's bytes over the time."""
        return self.plan.nbytes / self.seconds if self.seconds else 0.0

    @property
    def bus_bandwidth(self) -> float:
        """NCCL convention: algorithm bandwidth x :func:`bus_factor`."""
        return self.algorithm_bandwidth * bus_factor(self.plan.op, self.plan.group_size)

    def summary(self) -> dict:
        p = self.plan
        return {"system": self.system, "op": p.op.replace("_", "-"), "bytes": p.nbytes, "replicas": p.group_size,
                "algorithm": p.algorithm, "seconds": self.seconds, "cycles": self.cycles, "steps": p.steps,
                "algorithm_bandwidth": self.algorithm_bandwidth, "bus_bandwidth": self.bus_bandwidth,
                "phases": [list(ph) for ph in p.phases]}


def run_collective(system: System | str, op: str, nbytes: int, members: list[int],
                   algorithm: str = "auto", partition_ipus: int = 0) -> CollectiveResult:
    """Simulate one collective over ``members`` alone: a program of one Collective, run by the engine.
    ``partition_ipus``: the IPUs of the program, whose sync each step waits for (at least the members)."""
    system = load_system(system)
    bad = [m for m in members if not 0 <= m < system.num_ipus]
    if bad:
        ipus = f"{system.num_ipus} IPU{'s' * (system.num_ipus != 1)}"
        raise OptionsError(f"IPU {bad[0]} is not in system {system.name!r}, which has {ipus}")
    item, plan = collective_item(system, op, nbytes, members, algorithm, partition_ipus=partition_ipus)
    timeline = Engine(system).run(Sequence([item], name="collective"))
    cycles = int(timeline.total_cycles)
    return CollectiveResult(plan, cycles, system.cycles_to_seconds(cycles), system.name)
