"""popxl-addons' ``NamedReplicaGrouping`` (replica groupings by dotted name) and its helpers for the
groups one instance, or one IPU-Link domain, holds."""

from __future__ import annotations

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
