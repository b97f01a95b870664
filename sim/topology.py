"""Where IPUs sit and how they reach each other: replicas, chassis, PODs, links and syncs.

Numbering follows Poplar: the IPUs of a replica are consecutive, replica ``r`` with ``k`` IPUs
per replica uses IPUs ``r*k .. r*k+k-1``. A chassis (IPU-M2000, Bow-2000, C2 card) holds
``ipus_per_chassis`` IPUs; ``chassis_per_pod`` chassis form one IPU-Link domain (a POD64);
larger systems join PODs with GW-Links.

Routing choice (documented in docs/design.md): IPUs of one chassis reach each other in one
IPU-Link hop; between chassis of one POD the hops are the distance along the ladder of
chassis; between PODs a transfer crosses a GW-Link. Poplar routes multi-hop copies through
the intermediate IPUs, so a copy between non-neighbours is allowed and pays one link latency
per hop.
"""

from __future__ import annotations

import math

from .errors import OptionsError
from .hardware import System


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


def hops(system: System, a: int, b: int) -> int:
    """IPU-Link hops from IPU ``a`` to IPU ``b`` (0 for the same IPU)."""
    if a == b:
        return 0
    ca, cb = system.chassis_of(a), system.chassis_of(b)
    return 1 if ca == cb else abs(ca - cb)


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
