"""GCL's collective methods against poplibs' measured crossovers: :data:`GCL_CROSSOVERS` (the
tensor sizes above which the bidirectional ring pair beats meet-in-the-middle), the simulator's
crossover (:func:`gcl_crossover`) and the step time each crossover implies
(:func:`gcl_implied_step_seconds`)."""

from __future__ import annotations

from ..hardware.system import load_system
from ..schedule.collectives import plan_collective


#: poplibs' crossovers (bytes per IPU) above which the bidirectional ring pair beats meet-in-the-middle,
#: "determined experimentally", by op and by the largest replica count each applies to (more than 16
#: replicas: meet-in-the-middle always); lib/popops/ReplicatedCollectives.cpp at 887b9d3a^,
#: pickReduceScatterMethod / pickAllGatherMethod (one IPU per replica, no torus). The collectives' fixed
#: step times (configs/ipu-mk2.toml ipu_link.reduce_step_s, gather_step_s) are fitted to them.
GCL_CROSSOVERS = {"reduce_scatter": {4: 1_245_184, 8: 4_980_736, 16: 39_845_888},
                  "all_gather": {4: 622_592, 8: 2_490_368, 16: 19_922_944}}


def gcl_crossover(op: str, replicas: int, system: str = "ipu-pod64") -> int:
    """The smallest tensor (bytes, to 1 %) at which the simulator's bidirectional ring pair is faster
    than its meet-in-the-middle for ``op`` over ``replicas`` consecutive IPUs of ``system``."""
    sysobj, members = load_system(system), list(range(replicas))

    def ring_wins(nbytes: float) -> bool:
        return (plan_collective(sysobj, op, int(nbytes), members, "bidirectional_ring").cycles
                < plan_collective(sysobj, op, int(nbytes), members, "meet_in_middle").cycles)
    low, high = 1.0, 2.0 ** 34
    while high / low > 1.01:
        mid = (low * high) ** 0.5
        low, high = (low, mid) if ring_wins(mid) else (mid, high)
    return int(high)


def gcl_implied_step_seconds(nbytes: int, replicas: int, bytes_per_s: float) -> float:
    """The fixed step time (seconds, its sync included) at which a ring pair (replicas - 1 steps of
    S/2N each way) and meet-in-the-middle (replicas // 2 steps of S/N) take the same time for a tensor
    of ``nbytes`` over links of ``bytes_per_s``: S/8B, S/48B, S/224B for 4, 8, 16 replicas."""
    ring, middle = replicas - 1, replicas // 2
    return nbytes * (middle - ring / 2) / (replicas * bytes_per_s * (ring - middle))
