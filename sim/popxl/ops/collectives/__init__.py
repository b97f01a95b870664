"""``popxl.ops.collectives``: collectives across replicas, over a ``ReplicaGrouping``.

Each becomes a collective op of the simulated graph (``sim/replicated_ops.py``), run between
the compute before and after it over the replicas of each group, and priced over the group's
ring on the system's links (``sim/collectives.py``). ``group=None`` means every replica. The
reduction (``op='add'``, ``'mean'``, ...) does not change the time, except ``'local'``: a
reduce-scatter with it (and ``replica_sharded_slice`` / ``replicated_slice``, which PopXL builds
on it) only slices each replica's own tensor. Applied to an autodiff gradient, a collective is
recorded on the gradient and becomes the gradient collective of the weight it updates in the
simulated weight update (:mod:`sim.popxl.transforms.autodiff`).
"""

from __future__ import annotations

import math

from ...context import get_current_context
from ...errors import PopXLError, not_modelled
from ...tensor import GradTensor, Tensor
from ...transforms import from_gradient
from .._core import reshape, slice, transpose

OPS = ("add", "mean", "mul", "min", "max", "and", "or", "square_add", "local")


def _grouping(t: Tensor, group, op: str, where: str) -> tuple:
    g = get_current_context().graph
    g._own(t, where)
    if op not in OPS:
        raise ValueError(f"{where}: op must be one of {', '.join(OPS)}, got {op!r}")
    if group is None:
        return g, 1, None
    if getattr(group, "_ir", None) is not g.ir:
        raise PopXLError(f"{where}: the group must come from this Ir's replica_grouping(...)")
    return g, group.stride, group.group_size


#: collectives whose result is one member's flat share of the tensor
_SHARDING = ("replicated_reduce_scatter", "replica_sharded_slice")


def _span(group, ir) -> tuple[int, int]:
    """(stride, group size) of a collective over ``group`` (every replica when None)."""
    return (group.stride, group.group_size) if group is not None else (1, ir.replication_factor)


def _handle(t: Tensor, kind: str, size: int, grad_of, collectives: tuple) -> GradTensor:
    """The gradient handle ``kind`` over groups of ``size`` leaves of ``t``, carrying ``collectives``:
    the shape of its result (a flat shard, with ``t``'s shape as its meta-shape, for a sharding kind)."""
    sharding = kind in _SHARDING
    shape = ((-(-t.nelms // size),) if sharding else (size * t.nelms,) if kind == "replicated_all_gather"
             else t.shape)
    done = GradTensor(get_current_context().graph, shape, t.dtype, grad_of, f"{kind}({t.id})", collectives)
    done._meta_shape = t.shape if sharding else ()
    return done


def _on_gradient(t: GradTensor, kind: str, group) -> GradTensor:
    """A collective on an autodiff gradient: recorded on the gradient (with the shape its result
    has), and the weight it updates gets it as its gradient collective in the simulated weight
    update (one call over each group)."""
    stride, size = _span(group, get_current_context().graph.ir)
    return _handle(t, kind, size, t._grad_of, t._collectives + ((kind, stride, size, t.nbytes),))


def _on_state(t: Tensor, kind: str, group) -> Tensor:
    """A collective on a variable an autodiff gradient was accumulated into (a gradient accumulator,
    an optimizer moment): recorded with the gradient's collectives, which the weight it updates
    gets in the simulated weight update. One that leaves a shard (a reduce-scatter, a local slice)
    gives a gradient handle of the shard's shape carrying them, as on a gradient itself."""
    ir = t._graph.ir
    stride, size = _span(group, ir)
    ir._state_collectives[t._sim] = ir._state_collectives.get(t._sim, ()) + ((kind, stride, size, t.nbytes),)
    return _handle(t, kind, size, None, ir._state_collectives[t._sim]) if kind in _SHARDING else t


def replicated_all_reduce(t: Tensor, op: str = "add", group=None) -> Tensor:
    """Reduce ``t`` over the replicas of each group; every member gets the result."""
    if isinstance(t, GradTensor):
        return _on_gradient(t, "replicated_all_reduce", group)
    if from_gradient(t):
        return _on_state(t, "replicated_all_reduce", group)
    g, stride, size = _grouping(t, group, op, "ops.collectives.replicated_all_reduce")
    with g._building() as b:
        out = b.replicated_all_reduce(t._sim, stride, size, name=g._scoped("replicated_all_reduce"))
    return g._wrap(out, t.dtype)


def replicated_all_reduce_(t: Tensor, op: str = "add", group=None) -> Tensor:
    """In-place form of :func:`replicated_all_reduce` (the same collective)."""
    return replicated_all_reduce(t, op, group)


def replicated_reduce_scatter(t: Tensor, op: str = "add", group=None,
                              configure_output_for_replicated_tensor_sharding: bool = False) -> Tensor:
    """Reduce ``t`` over each group; member ``i`` keeps the ``i``-th 1/group_size of the flattened
    result (a 1-D tensor)."""
    kind = "replica_sharded_slice" if op == "local" else "replicated_reduce_scatter"  # local: no exchange
    if isinstance(t, GradTensor):
        return _on_gradient(t, kind, group)
    if from_gradient(t):
        return _on_state(t, kind, group)
    g, stride, size = _grouping(t, group, op, "ops.collectives.replicated_reduce_scatter")
    shards = size or g.ir.replication_factor // stride
    if op == "local":  # no reduction: each member keeps its own slice, with no exchange between replicas
        y = _local_shard(t, shards)
        if configure_output_for_replicated_tensor_sharding:
            y._meta_shape = t.shape
        return y
    with g._building() as b:
        out = b.replicated_reduce_scatter(t._sim, shards, stride, size,
                                          name=g._scoped("replicated_reduce_scatter"))
    y = g._wrap(out, t.dtype)
    if configure_output_for_replicated_tensor_sharding:  # a shard of a t-shaped tensor
        y._meta_shape = t.shape
    return y


def replicated_all_gather(t: Tensor, axis: int = 0, group=None, output_shape: str = "auto") -> Tensor:
    """Every member of a group gets the group's ``t``, as PopXL's: ``'concat'`` concatenates the
    members' tensors along ``axis``, ``'new_axis'`` stacks them, ``(group_size, *t.shape)``,
    ``'meta_shape'`` gives the whole tensor a shard belongs to, ``t.meta_shape`` (the shards one
    after another, ``(group_size * t.nelms,)``, for a tensor without one), and ``'auto'`` is
    ``'meta_shape'`` for a shard and ``'concat'`` otherwise."""
    if isinstance(t, GradTensor):
        return _on_gradient(t, "replicated_all_gather", group)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ValueError(f"Axis should be an int. Type: {type(axis)}. Value: {axis}")
    g, stride, size = _grouping(t, group, "add", "ops.collectives.replicated_all_gather")
    if output_shape not in ("auto", "meta_shape", "new_axis", "concat"):
        raise ValueError(f"replicated_all_gather: output_shape must be 'auto', 'meta_shape', 'new_axis' or "
                         f"'concat', got {output_shape!r}")
    if not -max(t.rank, 1) <= axis < max(t.rank, 1):
        raise ValueError(f"replicated_all_gather: axis {axis} is out of range for a tensor of rank {t.rank}")
    axis %= max(t.rank, 1)
    if output_shape == "auto":
        output_shape = "meta_shape" if t.meta_shape else "concat"
    concat = output_shape == "concat" and t.rank
    front = [axis] + [d for d in range(t.rank) if d != axis]
    x = transpose(t, front) if concat and axis else t  # PopXL's _rearrange_input: the axis first
    shards = size or g.ir.replication_factor // stride
    with g._building() as b:
        out = b.replicated_all_gather(x._sim, shards, stride, size, name=g._scoped("replicated_all_gather"))
    y = g._wrap(out, t.dtype)
    if output_shape == "new_axis":
        y = reshape(y, (shards,) + t.shape)
    elif output_shape == "meta_shape" and t.meta_shape:  # the shards' padding dropped, then the whole shape
        whole = math.prod(t.meta_shape)
        y = reshape(slice(y, 0, whole, axis=0) if y.nelms > whole else y, t.meta_shape)
    elif concat:
        y = reshape(y, (shards * x.shape[0],) + x.shape[1:])
        if axis:  # and back (_rearrange_output)
            y = transpose(y, [front.index(d) for d in range(t.rank)])
    return y


def _local_shard(t: Tensor, shards: int) -> Tensor:
    """One member's ``ceil(elements / shards)`` elements of flattened ``t``: which ones depends on the
    replica, the cost does not (a view of the tensor, as the simulator prices slices)."""
    flat = reshape(t, (t.nelms,))
    part = -(-t.nelms // shards)
    return slice(flat, 0, part, axis=0) if part < t.nelms else flat


def replica_sharded_slice(t: Tensor, group=None) -> Tensor:
    """This replica's shard of ``t`` (flattened, ``ceil(elements / group_size)`` elements, with
    ``t``'s shape as its meta-shape): PopXL's reduce-scatter with the ``local`` operator, which
    moves nothing between replicas."""
    if isinstance(t, GradTensor):
        return _on_gradient(t, "replica_sharded_slice", group)
    if from_gradient(t):
        return _on_state(t, "replica_sharded_slice", group)
    g, stride, size = _grouping(t, group, "local", "ops.collectives.replica_sharded_slice")
    y = _local_shard(t, size or g.ir.replication_factor // stride)
    y._meta_shape = t.shape
    if t._sim is not None and t._sim in g.sim_graph.tensors and g.sim_graph.tensors[t._sim].role == "weight":
        g.ir._shard_of[y._sim] = (t._sim, *_span(group, g.ir))  # a weight's shard: its update is the weight's
    return y


def replicated_slice(t: Tensor, axis: int = 0, group=None) -> Tensor:
    """This replica's ``1 / group_size`` of ``t`` along ``axis`` (the axis dropped when that leaves
    one), as PopXL's: a slice on each replica, no exchange between them."""
    g, stride, size = _grouping(t, group, "local", "ops.collectives.replicated_slice")
    members = size or g.ir.replication_factor // stride
    if isinstance(axis, bool) or not isinstance(axis, int) or not -t.rank <= axis < t.rank:
        raise ValueError(f"replicated_slice: axis {axis!r} is not an axis of a tensor of rank {t.rank}")
    axis %= t.rank
    if t.shape[axis] % members:
        raise ValueError(f"replicated_slice: axis {axis} of {t.id!r} has {t.shape[axis]} elements, which "
                         f"{members} replicas cannot split equally")
    part = t.shape[axis] // members
    y = slice(t, 0, part, axis=axis) if members > 1 else t
    return reshape(y, t.shape[:axis] + t.shape[axis + 1:]) if part == 1 and members > 1 else y


SUPPORTED = ("replica_sharded_slice", "replicated_all_reduce", "replicated_all_reduce_", "replicated_reduce_scatter",
             "replicated_all_gather", "replicated_slice")


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl.ops.collectives", name, SUPPORTED, op=True)
