"""popxl-addons' replicated tensor sharding (RTS) helpers: ``replica_sharded_spec``, the reduction
of a tensor into its shards (``reduce_replica_sharded_tensor``: a reduce-scatter over the shard
group, or an all-reduce and a local slice) and back (``gather_replica_sharded_tensor``), and the
graphs that do either to a whole :class:`NamedTensors` (``reduce_replica_sharded_graph``,
``all_gather_replica_sharded_graph``), as popxl-addons' ``rts.py`` has them.

Each graph is built (for its inputs and schedule) and, when called, built again inline in the
caller (:class:`~sim.popxl_addons.graph.InlineBuilder`): the collectives then act on the caller's
tensors, so a reduce-scatter of a gradient accumulator becomes that weight's gradient
reduce-scatter in the simulated weight update."""

from __future__ import annotations

import math
from contextlib import nullcontext

from .. import popxl
from ..popxl import ops
from .graph import GraphWithNamedArgs, InlineBuilder
from .named_tensors import NamedTensors
from .ops.replicated_strided_collectives import (replicated_all_gather_strided, replicated_all_reduce_strided,
                                                 replicated_reduce_scatter_strided)

__all__ = ["all_gather_replica_sharded_graph", "gather_replica_sharded_tensor", "reduce_replica_sharded_graph",
           "reduce_replica_sharded_tensor", "replica_sharded_spec"]


def io_tiles_if(use_io_tiles: bool):
    """``popxl.io_tiles()`` when ``use_io_tiles``, else a context that changes nothing (the helpers'
    ``use_io_tiles`` arguments)."""
    return popxl.io_tiles() if use_io_tiles else nullcontext()


def replica_sharded_spec(t: popxl.Tensor, shard_over) -> popxl.TensorSpec:
    """The spec of one replica's shard of ``t`` over ``shard_over``'s groups: ``t``'s elements over the
    group size, flat, with ``t``'s shape as its meta-shape; ``t``'s own spec when it is a shard already,
    the group has one member or does not divide ``t``."""
    if t.meta_shape or shard_over.group_size == 1 or t.nelms % shard_over.group_size:
        return t.spec
    return popxl.TensorSpec((math.prod(t.shape) // shard_over.group_size,), t.dtype, t.shape)


def reduce_replica_sharded_tensor(t: popxl.Tensor, op: str = "add", replica_group=None, shard_group=None):
    """``t`` reduced with ``op`` over ``replica_group`` (every replica by default) and left sharded
    over ``shard_group`` (by default the replica group): one reduce-scatter when the two groups are
    the same, else an all-reduce then this replica's slice; an all-reduce alone when the shard group
    has one member or does not divide ``t``."""
    ir = popxl.gcg().ir
    replica_group = replica_group or ir.replica_grouping()
    shard_group = shard_group or replica_group
    if shard_group.group_size > 1 and t.nelms % shard_group.group_size == 0:
        if replica_group == shard_group and replica_group.group_size > 1:
            return replicated_reduce_scatter_strided(t, op=op, group=replica_group,
                                                     configure_output_for_replicated_tensor_sharding=True)
        if replica_group.group_size > 1:
            t = replicated_all_reduce_strided(t, op=op, group=replica_group)
        return ops.collectives.replica_sharded_slice(t, group=shard_group)
    return replicated_all_reduce_strided(t, op=op, group=replica_group)


def gather_replica_sharded_tensor(t: popxl.Tensor, use_io_tiles: bool = False, replica_group=None):
    """A shard ``t`` all-gathered into its whole tensor over ``replica_group`` (every replica by
    default; ``t`` unchanged when it is not a shard), on the IO tiles and then copied to the compute
    tiles with ``use_io_tiles``."""
    replica_group = replica_group or popxl.gcg().ir.replica_grouping()
    if t.meta_shape:
        with io_tiles_if(use_io_tiles):
            t = replicated_all_gather_strided(t, group=replica_group)
    return ops.io_tile_copy(t) if use_io_tiles else t


def _per_tensor_graph(kind: str, tensors: NamedTensors, each) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph with a named input for each of ``tensors`` and ``each(name, input)`` as its outputs, in
    their order, called inline (see the module docstring); and those names."""
    ir = popxl.gcg().ir
    graph = ir.create_empty_graph(kind)
    names, inputs = tensors.unpack()
    args = {}
    with graph, popxl.in_sequence(False):
        for name, t in zip(names, inputs):
            args[name] = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape)
            popxl.graph_output(each(name, args[name]))

    def inline(_inputs, named):
        return tuple(each(name, named[name]) for name in names if name in named)

    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args), builder=InlineBuilder(inline)), list(names)


def reduce_replica_sharded_graph(tensors: NamedTensors, op: str = "add", use_io_tiles: bool = False,
                                 shard_groups=None, replica_group=None) -> tuple[GraphWithNamedArgs, list[str]]:
    """(A graph that reduces each of ``tensors`` as :func:`reduce_replica_sharded_tensor` does, their
    shard groups by name from ``shard_groups`` (a ``NamedReplicaGrouping``, else ``replica_group``),
    first copied to the IO tiles with ``use_io_tiles``; the names of its outputs, in order). Bind it to
    the tensors and call it: ``NamedTensors.pack(names, g.bind(ts).call())``."""
    groups = shard_groups.to_dict() if shard_groups else {}

    def each(name, t):
        with io_tiles_if(use_io_tiles):
            return reduce_replica_sharded_tensor(ops.io_tile_copy(t) if use_io_tiles else t, op, replica_group,
                                                 groups.get(name, replica_group))

    return _per_tensor_graph("replica_reduce", tensors, each)


def all_gather_replica_sharded_graph(tensors: NamedTensors, use_io_tiles: bool = False,
                                     replica_groups=None) -> tuple[GraphWithNamedArgs, list[str]]:
    """(A graph that all-gathers each shard of ``tensors`` as :func:`gather_replica_sharded_tensor`
    does, over its group by name from ``replica_groups`` (a ``NamedReplicaGrouping``, else every
    replica); the names of its outputs, in order)."""
    groups = replica_groups.to_dict() if replica_groups else {}

    def each(name, t):
        group = groups.get(name)
        return gather_replica_sharded_tensor(t, use_io_tiles, getattr(group, "const_rg", group))

    return _per_tensor_graph("all_gather", tensors, each)
