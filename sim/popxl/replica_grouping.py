"""``popxl.replica_grouping``: the module PopXL keeps :class:`ReplicaGrouping` in (``from
popxl.replica_grouping import ReplicaGrouping``); the class is :class:`sim.popxl.ir.ReplicaGrouping`."""

from __future__ import annotations

from .ir import ReplicaGrouping

__all__ = ["ReplicaGrouping"]
