"""Where IPUs sit and how they reach each other: replicas, chassis, PODs, links and syncs.

Numbering follows Poplar: the IPUs of a replica are consecutive, replica ``r`` with ``k`` IPUs
per replica uses IPUs ``r*k .. r*k+k-1``. A chassis (IPU-M2000, Bow-2000, C2 card) holds
``ipus_per_chassis`` IPUs; ``chassis_per_pod`` chassis form one IPU-Link domain (a POD64);
larger systems join PODs with GW-Links.

Routing choice (documented in docs/design.md): IPUs of one chassis reach each other in one
IPU-Link hop; between chassis of one POD the hops are the distance along the ring of the
partition's chassis (the POD's IPU-Links form a torus, so the last chassis neighbours the first;
a partition of fewer chassis is a ladder whose ring goes up one side and back down the other, so
its last chassis neighbours its first too); between PODs a transfer crosses a GW-Link. Poplar
routes multi-hop copies through the intermediate IPUs, so a copy between non-neighbours is
allowed and pays one link latency per hop.
"""

from __future__ import annotations

import math

from ..errors import OptionsError
from .system import System


def replica_ipus(replica: int, ipus_per_replica: int) -> list[int]:
    """The IPUs of ``replica``."""
    return list(range(replica * ipus_per_replica, (replica + 1) * ipus_per_replica))


def check_fits(system: System, ipus_per_replica: int, replicas: int, auto_round: bool) -> int:
    """IPUs the run needs (rounded up to a power of two when ``auto_round``); error if too many."""
    need = ipus_per_replica * replicas
    if need & (need - 1):
        if not auto_round:
            raise OptionsError(
                f"the model needs {ipus_per_replica} IPU(s) per replica x {replicas} replica(s) = "
                f"{need} IPUs, which is not a power of two; use a power-of-two split or set "
                "autoRoundNumIPUs(True) to round up")
        need = 1 << (need - 1).bit_length()
    if need > system.num_ipus:
        raise OptionsError(
            f"the run needs {need} IPUs ({ipus_per_replica} per replica x {replicas} replicas) but "
            f"system {system.name!r} has {system.num_ipus}; choose a larger system "
            "(ipusim systems lists them) or fewer replicas")
    return need


def domain_chassis(system: System) -> int:
    """Chassis in one IPU-Link domain (a POD64, or the whole system when it is smaller)."""
    layout = system.layout
    return max(1, min(layout.chassis_per_pod, -(-layout.num_ipus // layout.ipus_per_chassis)))


def ring_chassis(system: System, pod: int, partition_ipus: int = 0) -> int:
    """Chassis of ``pod`` in the ring its IPU-Link routes wrap round: the POD's IPU-Link domain
    (:func:`domain_chassis`), or, for a partition of ``partition_ipus`` IPUs from IPU 0 that holds
    fewer of the POD's chassis, those chassis (0: the whole domain): a ladder of chassis of several
    IPUs closes a ring up one side and down the other. Chassis of one IPU each (PCIe cards cabled in a
    ring, ``c600-x8``) have no second side: a partition's routes wrap round the whole ring."""
    whole = domain_chassis(system)
    if partition_ipus <= 0 or system.layout.ipus_per_chassis == 1:
        return whole
    layout = system.layout
    held = partition_ipus - pod * layout.chassis_per_pod * layout.ipus_per_chassis
    return max(1, min(whole, -(-held // layout.ipus_per_chassis)))


def hops(system: System, a: int, b: int, partition_ipus: int = 0) -> int:
    """IPU-Link hops from IPU ``a`` to IPU ``b`` (0 for the same IPU) in a partition of
    ``partition_ipus`` IPUs from IPU 0 (0: the whole system).

    The chassis a partition holds in a POD are joined in a ring (the POD64's IPU-Links form a
    2D torus, IPU-POD64 datasheet; in a smaller ladder a ring goes up one side and comes back
    down the other, which costs the same), so the distance between two chassis wraps around:
    the first and the last chassis of the partition in a POD are neighbours.
    """
    if a == b:
        return 0
    ca, cb = system.chassis_of(a), system.chassis_of(b)
    if ca == cb:
        return 1
    d = abs(ca - cb)
    if system.pod_of(a) == system.pod_of(b):
        d = min(d, ring_chassis(system, system.pod_of(a), partition_ipus) - d)
    return d


def route(system: System, a: int, b: int, partition_ipus: int = 0) -> list[tuple[int, int]]:
    """The directed IPU-Link hops ``(from, to)`` a transfer from ``a`` to ``b`` takes in a
    partition of ``partition_ipus`` IPUs from IPU 0 (0: the whole system).

    Inside a chassis: the direct link. Between chassis of one POD: the shorter way round the
    ring of the partition's chassis (forward on a tie), through the IPU at ``a``'s position in
    each chassis on the way, the last hop into ``b``; ``len(route) == hops(a, b)``. Between PODs:
    one edge ``(a, b)`` over the GW-Links.
    """
    if a == b:
        return []
    ca, cb = system.chassis_of(a), system.chassis_of(b)
    if ca == cb or crosses_gw_link(system, a, b):
        return [(a, b)]
    per = system.layout.ipus_per_chassis
    pod = system.pod_of(a)
    C = ring_chassis(system, pod, partition_ipus)
    base = pod * system.layout.chassis_per_pod
    la, lb = ca - base, cb - base
    forward, backward = (lb - la) % C, (la - lb) % C
    step, n = (1, forward) if forward <= backward else (-1, backward)
    path, c = [a], la
    for _ in range(n - 1):
        c = (c + step) % C
        path.append((base + c) * per + a % per)
    path.append(b)
    return list(zip(path, path[1:]))


def crosses_gw_link(system: System, a: int, b: int) -> bool:
    """Does a transfer from ``a`` to ``b`` leave the POD (IPU-Link domain)?"""
    return system.pod_of(a) != system.pod_of(b)


def sync_cycles(system: System, num_ipus: int) -> int:
    """Cycles of one barrier over ``num_ipus`` IPUs.

    One IPU: an on-chip sync. Several: the poplibs test model of a global sync, a base hop plus
    one per ``ipus_per_chassis`` IPUs of span (a ladder of chassis).
    """
    ipu = system.ipu
    if num_ipus <= 1:
        return ipu.internal_sync_cycles
    span_hops = num_ipus / system.layout.ipus_per_chassis
    return ipu.external_sync_cycles + math.ceil(ipu.external_sync_cycles_per_hop * span_hops)
