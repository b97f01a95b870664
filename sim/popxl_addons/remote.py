"""popxl-addons' remote-buffer helpers (``remote.py``): a buffer for each named tensor or variable
factory (``named_buffers``, ``named_variable_buffers``, ``create_remote_buffer``; replica-sharded
buffers for sharded tensors), and the loads and stores of a whole set of them (``load_remote`` /
``store_remote`` in the current graph, ``load_remote_graph`` / ``store_remote_graph`` as graphs).

The graphs are built (for their inputs and schedule) and, when called, built again inline in the
caller (:class:`~sim.popxl_addons.graph.InlineBuilder`): the simulated program then sees which of its
tensors come from streaming memory, so optimizer moments loaded this way are off-chip optimizer state
and weights off-chip weights (:mod:`sim.popxl.session`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .. import popxl
from ..popxl import ops
from .dot_tree import DotTree
from .graph import GraphWithNamedArgs, InlineBuilder
from .named_tensors import NamedTensors
from .rts import io_tiles_if, replica_sharded_spec

__all__ = ["NamedRemoteBuffers", "create_remote_buffer", "load_remote", "load_remote_graph", "named_buffers",
           "named_variable_buffers", "store_remote", "store_remote_graph"]


class NamedRemoteBuffers(DotTree):
    """A :class:`DotTree` of ``popxl.RemoteBuffer``."""


def named_buffers(tensors: NamedTensors, entries: int = 1, shard_over=None) -> NamedRemoteBuffers:
    """A buffer of ``entries`` slots for each of ``tensors``, by the same names: slots of a replica
    shard over ``shard_over`` (a ``ReplicaGrouping``) where given, of the tensor otherwise."""
    buffers = {}
    for name, t in tensors.to_dict().items():
        spec = replica_sharded_spec(t, shard_over) if shard_over is not None else t.spec
        buffer = popxl.remote_buffer(spec.shape, spec.dtype, entries)
        buffer.meta_shape = spec.meta_shape
        buffers[name] = buffer
    return NamedRemoteBuffers.from_dict(buffers)


def named_variable_buffers(factories, entries: int = 1, shard_over_dict=True) -> NamedRemoteBuffers:
    """A buffer of ``entries`` slots for each of ``factories`` (``NamedVariableFactories``), by the same
    names. ``shard_over_dict`` says over how many replicas of its replica group each is sharded: a
    mapping of names to counts, one count for all, True (the whole group) or False (none)."""
    buffers = {}
    for name, f in factories.to_dict().items():
        group = f.replica_grouping or popxl.gcg().ir.replica_grouping()
        if isinstance(shard_over_dict, Mapping):
            shard_over = shard_over_dict.get(name)
        elif isinstance(shard_over_dict, bool):
            shard_over = group.group_size if shard_over_dict else 1
        elif isinstance(shard_over_dict, int):
            if not 1 <= shard_over_dict <= group.group_size:
                raise ValueError(f"named_variable_buffers: shard_over_dict {shard_over_dict} is not between 1 and "
                                 f"{name!r}'s replica group size {group.group_size}")
            shard_over = shard_over_dict
        else:
            raise ValueError("named_variable_buffers: shard_over_dict must be a mapping, an int or a bool, got "
                             f"{shard_over_dict!r}")
        spec = popxl.TensorSpec(f.shape, f.dtype, f.meta_shape or ())
        buffers[name] = create_remote_buffer(spec, entries, group, shard_over)
    return NamedRemoteBuffers.from_dict(buffers)


def create_remote_buffer(spec, entries: int = 1, replica_group=None, shard_over: int | None = None):
    """A buffer of ``entries`` slots for tensors of ``spec``: its own slots for a spec of a shard (with
    a meta-shape), replica-sharded slots over ``shard_over`` replicas of ``replica_group`` (by default
    the whole group, every replica by default) when more than one, whole-tensor slots otherwise."""
    replica_group = replica_group or popxl.gcg().ir.replica_grouping()
    shard_over = shard_over or replica_group.group_size
    if spec.meta_shape:
        buffer = popxl.remote_buffer(spec.shape, spec.dtype, entries)
        buffer.meta_shape = spec.meta_shape
        return buffer
    if shard_over > 1:
        if math.prod(spec.shape) % shard_over:
            raise ValueError(f"create_remote_buffer: a tensor of {math.prod(spec.shape)} elements cannot be sharded "
                             f"over {shard_over} replicas")
        shape = (replica_group.num_groups, *spec.shape) if replica_group.num_groups > 1 else spec.shape
        return popxl.replica_sharded_buffer(shape, spec.dtype, replica_group, shard_over, entries)
    return popxl.remote_buffer(spec.shape, spec.dtype, entries)


def load_remote(buffers: NamedRemoteBuffers, entry=0, use_io_tiles: bool = False) -> NamedTensors:
    """Slot ``entry`` (an int or an int32 tensor) of each buffer, loaded in the current graph."""
    with popxl.transforms.merge_exchange(), popxl.in_sequence(False), io_tiles_if(use_io_tiles):
        return NamedTensors.from_dict({name: ops.remote_load(b, entry, name) for name, b in buffers.to_dict().items()})


def store_remote(buffers: NamedRemoteBuffers, tensors: NamedTensors, entry=0, use_io_tiles: bool = False) -> None:
    """Each of ``tensors`` stored into slot ``entry`` of the buffer of the same name."""
    held = buffers.to_dict()
    with popxl.transforms.merge_exchange(), popxl.in_sequence(False), io_tiles_if(use_io_tiles):
        for name, t in tensors.to_dict().items():
            ops.remote_store(held[name], entry, t)


def _unpacked(buffers: NamedRemoteBuffers, entries: int) -> tuple[tuple, tuple]:
    """(the buffers' names, the buffers), each given at least ``entries`` slots."""
    names, held = buffers.unpack()
    for b in held:
        b.entries = max(b.entries, entries)
    return names, held


def load_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1,
                      use_io_tiles: bool = False) -> tuple[GraphWithNamedArgs, list[str]]:
    """(A graph of one input, the slot to load, whose outputs are that slot of each buffer; the
    buffers' names, in output order). Each buffer is given at least ``entries`` slots."""
    names, held = _unpacked(buffers, entries)
    graph = popxl.gcg().ir.create_empty_graph("load_remote")
    with graph, popxl.in_sequence(False), io_tiles_if(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "load_index")
        for name, b in zip(names, held):
            popxl.graph_output(ops.remote_load(b, index, name))

    def inline(inputs, _named):
        (entry,) = inputs
        loaded = load_remote(buffers, entry, use_io_tiles).to_dict()
        return tuple(loaded[name] for name in names)

    return GraphWithNamedArgs(graph, builder=InlineBuilder(inline)), list(names)


def store_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1, use_io_tiles: bool = False) -> GraphWithNamedArgs:
    """A graph whose first input is the slot to store into and whose named inputs (the buffers'
    names) are the tensors stored. Each buffer is given at least ``entries`` slots."""
    names, held = _unpacked(buffers, entries)
    graph = popxl.gcg().ir.create_empty_graph("store_remote")
    args = {}
    with graph, popxl.in_sequence(False), io_tiles_if(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "store_index")
        for name, b in zip(names, held):
            args[name] = popxl.graph_input(b.tensor_shape, b.tensor_dtype, name, meta_shape=b.meta_shape)
            ops.remote_store(b, index, args[name])

    def inline(inputs, named):
        (entry,) = inputs
        store_remote(buffers, NamedTensors.from_dict(named), entry, use_io_tiles)
        return ()

    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args), builder=InlineBuilder(inline))
