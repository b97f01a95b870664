"""popxl-addons' ``NamedReplicaGrouping`` (replica groupings by dotted name) and its helpers for the
groups one instance, or one IPU-Link domain, holds."""

from __future__ import annotations

import json
import os

from .. import popxl
from .dot_tree import DotTree


def fill_none_group(rg, none_value):
    """``rg``, or ``none_value`` when it is None."""
    return none_value if rg is None else rg


class NamedReplicaGrouping(DotTree):
    """A :class:`DotTree` of ``popxl.ReplicaGrouping``."""

    @classmethod
    def build_groups(cls, names, value) -> "NamedReplicaGrouping":
        """Every name with the grouping ``value``."""
        names = list(names)
        return cls.pack(names, [value] * len(names))


def is_cross_instance(replica_grouping) -> bool:
    """Does a group span more replicas than one instance (PopDist process) runs?"""
    ir = popxl.gcg().ir
    return replica_grouping.group_size * replica_grouping.stride > ir.instance_replication_factor


def get_instance_replica_grouping(replica_grouping=None):
    """``replica_grouping`` (default every replica) restricted to one instance's replicas: the same
    stride, as many members as the instance holds."""
    ir = popxl.gcg().ir
    grouping = replica_grouping or ir.replica_grouping()
    if grouping.stride > ir.instance_replication_factor:
        raise ValueError("replica grouping stride must be < ir.instance_replication_factor")
    if is_cross_instance(grouping):
        return ir.replica_grouping(stride=grouping.stride, group_size=ir.instance_replication_factor // grouping.stride)
    return grouping


def get_ild_size_from_popdist() -> int:
    """Replicas in one IPU-Link domain: PopDist's ``ipuLinkDomainSize`` target option (in
    ``POPLAR_TARGET_OPTIONS``), else every replica up to 64 (an IPU-POD64's IPU-Links, popxl-addons'
    assumption)."""
    size = json.loads(os.environ.get("POPLAR_TARGET_OPTIONS", "{}")).get("ipuLinkDomainSize")
    return int(size) if size is not None else min(popxl.gcg().ir.replication_factor, 64)


def is_cross_ild(replica_grouping) -> bool:
    """Does a group span more replicas than one IPU-Link domain holds?"""
    return replica_grouping.group_size * replica_grouping.stride > get_ild_size_from_popdist()


def get_ild_replica_grouping(replica_grouping=None):
    """``replica_grouping`` (default every replica) restricted to one IPU-Link domain: the same stride,
    as many members as the domain holds."""
    ir = popxl.gcg().ir
    grouping = replica_grouping or ir.replica_grouping()
    size = get_ild_size_from_popdist()
    if grouping.stride > size:
        raise ValueError("replica grouping stride must be < IPU Link Domain size")
    if is_cross_ild(grouping):
        return ir.replica_grouping(stride=grouping.stride, group_size=size // grouping.stride)
    return grouping
