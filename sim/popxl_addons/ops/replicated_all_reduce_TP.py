"""popxl-addons' tensor-parallel all-reduces (``popxl_addons.ops.replicated_all_reduce_TP``, its C++
``ReplicatedAllReduceTPOp``): an all-reduce over a replica group whose forward or backward is an
identity, Megatron's pair of operators around a layer split over replicas.

- ``replicated_all_reduce_identical_inputs``: every member holds the same input, so the forward is an
  identity (popxl-addons has ``OpToIdentityPattern`` replace it) and the gradient an all-reduce;
- ``replicated_all_reduce_identical_grad_inputs``: the forward an all-reduce, the gradient an identity;
- ``replicated_all_reduce``: an all-reduce both ways (PopXL's own).

In the simulated graph the first is an ``identity`` whose gradient is the all-reduce and the second a
``replicated_all_reduce`` whose gradient passes through (``sim/graph/training.py``), each priced as
the simulator's collectives over the group's ring."""

from __future__ import annotations

from ...popxl.ops import collectives

__all__ = ["replicated_all_reduce", "replicated_all_reduce_identical_grad_inputs",
           "replicated_all_reduce_identical_inputs"]


def _tp(t, op: str, group, where: str, forward: str, grad: str):
    g, stride, size = collectives._grouping(t, group, op, where)  # size None: every replica
    attrs = {"group_stride": stride, "group_size": size, "grad": grad}
    with g._building() as b:
        out = b.op(forward, [t._sim], [t.shape], attrs, name=g._scoped(f"replicated_all_reduce_TP_{forward}"))[0]
    return g._wrap(out, t.dtype)


def replicated_all_reduce_identical_inputs(t, op: str = "add", group=None):
    """``t`` unchanged (its copies on the group's members are identical); its gradient all-reduced
    over the group."""
    return _tp(t, op, group, "replicated_all_reduce_identical_inputs", "identity", "replicated_all_reduce")


def replicated_all_reduce_identical_grad_inputs(t, op: str = "add", group=None):
    """``t`` all-reduced over the group; its gradient passed through (identical on every member)."""
    return _tp(t, op, group, "replicated_all_reduce_identical_grad_inputs", "replicated_all_reduce", "identity")


def replicated_all_reduce(t, op: str = "add", group=None):
    """``t`` all-reduced over the group, and its gradient too (PopXL's collective)."""
    return collectives.replicated_all_reduce(t, op=op, group=group)
