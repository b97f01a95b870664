"""popxl-addons' strided collectives (``popxl_addons.ops.replicated_strided_collectives``): its C++
ops for collectives over a ``ReplicaGrouping`` of any stride, which PopXL's own collectives take
too. Here each is PopXL's collective over the same group (:mod:`sim.popxl.ops.collectives`), priced
over that group's ring as any other."""

from __future__ import annotations

from ...popxl.ops import collectives

__all__ = ["replicated_all_gather_strided", "replicated_all_reduce_strided",
           "replicated_all_reduce_strided_identical_inputs", "replicated_reduce_scatter_strided"]


def replicated_all_gather_strided(t, group=None):
    """Every member of ``group`` (every replica when None) gets the group's ``t``."""
    return collectives.replicated_all_gather(t, group=group)


def replicated_all_reduce_strided(t, op: str = "add", group=None):
    """``t`` reduced over each group; every member gets the result."""
    return collectives.replicated_all_reduce(t, op=op, group=group)


def replicated_all_reduce_strided_identical_inputs(t, op: str = "add", group=None):
    """As :func:`replicated_all_reduce_strided` (popxl-addons' variant whose gradient is an identity)."""
    return collectives.replicated_all_reduce(t, op=op, group=group)


def replicated_reduce_scatter_strided(t, op: str = "add", group=None,
                                      configure_output_for_replicated_tensor_sharding: bool = False):
    """``t`` reduced over each group, member ``i`` keeping the ``i``-th part of the flat result."""
    return collectives.replicated_reduce_scatter(
        t, op=op, group=group,
        configure_output_for_replicated_tensor_sharding=configure_output_for_replicated_tensor_sharding)
