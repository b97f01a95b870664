"""popxl-addons' batch serialisation: a graph run ``steps`` times in a loop, each step loading its
inputs (from host streams or remote buffers), calling the graph and storing its outputs (to host
streams or remote buffers), as phased execution runs a layer's micro-batches.

Our own code with popxl-addons' names and behaviour (``transforms/batch_serialisation.py``):

* A remote buffer is a matrix of ``steps`` columns (the steps) and rows (a layer's row, the
  ``row_offset`` of a :class:`RemoteHandle`): step ``i`` of the loop called with row index ``n``
  reads and writes entry ``(n + row_offset) * steps + i``; ``row_offset`` None reads and writes
  entry ``i``; a callable maps the row index to the row.
* ``io_mode`` ``"compute"`` copies on the compute tiles; ``"io"`` on the IO tiles, with a copy
  between IO and compute tiles each way; ``"io_overlapped"`` on the IO tiles too, the loads of a
  step issued before the compute of the step before and its stores after the compute of the step
  after (popxl-addons' prologue, loop and epilogue), so IO and compute can overlap.
* :func:`batch_serialise_fwd_and_grad` also stores, in a new buffer each, the forward tensors the
  grad graph reads (its ``Fwd`` inputs, from the explicit grad graph of
  :mod:`sim.popxl.transforms.autodiff`), and loads them in the grad graph's loop.

The loop is written out step by step in the returned graph (the simulator copies a repeat's body
anyway), with the index arithmetic popxl-addons makes as ops on one int32 each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ... import popxl
from ...popxl import ops
from ...popxl.errors import NotModelledError
from ...popxl.transforms.autodiff import ExpectedConnectionType
from ..graph import GraphWithNamedArgs
from ..named_tensors import NamedTensors
from ..remote import create_remote_buffer
from ..rts import gather_replica_sharded_tensor

IO_MODES = ("compute", "io", "io_overlapped")


@dataclass
class RemoteHandle:
    """Where a tensor of a batch-serialised graph is kept: ``buffer``, at row ``row_offset`` (an int,
    None for the first row whatever the row index, or a function of the row index tensor), sharded
    over ``shard_group`` when it has more than one replica."""

    buffer: popxl.RemoteBuffer
    row_offset: int | None | Callable = 0
    shard_group: popxl.ReplicaGrouping | None = None


@dataclass
class BatchSerialResult:
    """The batch-serialised graph (called with the row index, then its passed-through inputs, bound
    by the original graph's names) and where each stored tensor of the original graph went."""

    graph: GraphWithNamedArgs
    stored_buffers: dict = field(default_factory=dict)
    _remap_dict: dict = field(default_factory=dict)

    def remap_tensors(self, ts: NamedTensors) -> NamedTensors:
        """``ts`` (inputs of the original graph) as the inputs of the batch-serialised one."""
        return ts.remap(self._remap_dict)


def batch_serial_buffer(t, steps: int = 1, rows: int = 1, shard_group=None) -> popxl.RemoteBuffer:
    """A remote buffer of ``steps * rows`` entries for tensors like ``t`` (sharded over
    ``shard_group``'s replicas when it has more than one)."""
    shard_over = shard_group.group_size if shard_group is not None else 1
    return create_remote_buffer(t, entries=steps * rows, replica_group=shard_group, shard_over=shard_over)


def _handles(handles: dict) -> dict:
    """``(buffer, row_offset)`` pairs as :class:`RemoteHandle` (popxl-addons takes both)."""
    out = {}
    for t, h in handles.items():
        if isinstance(h, tuple) and len(h) >= 2 and isinstance(h[0], popxl.RemoteBuffer):
            h = RemoteHandle(*h)
        out[t] = h
    return out


def _remote(handle) -> bool:
    return isinstance(handle, RemoteHandle)


def _entry(handle: RemoteHandle, row: popxl.Tensor, step: int, steps: int, rows: int) -> popxl.Tensor:
    """The entry of ``handle``'s buffer that step ``step`` reads or writes, given the row index
    ``row`` (grows the buffer to hold every row, as popxl-addons does)."""
    offset = handle.row_offset
    if offset is None:
        handle.buffer.entries = max(handle.buffer.entries, steps)
        return popxl.constant(step, popxl.int32)
    if callable(offset):
        handle.buffer.entries = max(handle.buffer.entries, steps * rows)
        return offset(row) * steps + step
    handle.buffer.entries = max(handle.buffer.entries, steps * (offset + rows))
    return row * steps + (offset * steps + step)


def _sharded(handle) -> popxl.ReplicaGrouping | None:
    group = handle.shard_group if _remote(handle) else None
    return group if group is not None and group.group_size > 1 else None


def batch_serialise(graph: GraphWithNamedArgs, steps: int, load_handles: dict, store_streams: dict,
                    store_buffers: dict, seed_input=None, rows: int = 1, io_mode: str = "io") -> BatchSerialResult:
    """``graph`` run ``steps`` times: each step loads the inputs in ``load_handles`` (a host stream or
    a remote handle each), calls ``graph`` and stores the inputs or outputs in ``store_streams`` and
    ``store_buffers``. The other inputs are inputs of the returned graph, after its row index (and a
    random seed when ``seed_input`` names the graph's seed input, split for every step)."""
    if io_mode not in IO_MODES:
        raise ValueError(f"Unknown 'io_mode' {io_mode}. Supported: {', '.join(IO_MODES)}")
    if rows < 1:
        raise ValueError("rows must be >0")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"batch_serialise: steps must be a whole number >= 1, got {steps!r}")
    ir = graph.graph.ir
    if io_mode != "compute" and not dict(ir.options.items()).get("numIOTiles", 0):
        raise ValueError("IR must have IO tiles")
    if io_mode == "io_overlapped" and steps < 2:
        io_mode = "io"  # popxl-addons falls back too (it needs a step to overlap with)
    load_handles, store_buffers = _handles(load_handles), _handles(store_buffers)
    inputs, outputs = list(graph.graph.inputs), list(graph.graph.outputs)
    loaded_ts = [t for t in inputs if t in load_handles]
    stored_ts = [t for t in inputs + outputs if (t in store_streams or t in store_buffers)
                 and not (t in load_handles and _remote(load_handles[t]))]
    passed_ts = [t for t in inputs if t is not seed_input and t not in load_handles]
    accumulation = graph._accumulation
    slots = [accumulation.slot(n) for n in [accumulation.COUNTER] + accumulation.names] if accumulation else []
    io = io_mode != "compute"
    tiles = popxl.io_tiles if io else contextlib.nullcontext

    repeat = ir.create_empty_graph(f"{graph.graph.name}_repeat_graph")
    with repeat, popxl.in_sequence():
        row = popxl.graph_input((), popxl.int32, "batch_serial_loop_index")
        seed = popxl.graph_input((2,), popxl.uint32, "batch_serial_random_seed") if seed_input is not None else None
        passed = [popxl.graph_input(t.shape, t.dtype, t.name, by_ref=True, meta_shape=t.meta_shape or None)
                  for t in passed_ts]
        slot_inputs = [popxl.graph_input(s.shape, s.dtype, s.name, by_ref=True) for s in slots]
        if io:
            with tiles():
                row = ops.io_tile_copy(row)
        seeds = ops.split_random_seed(seed, steps) if seed is not None else None

        def load(step: int) -> list:
            with tiles():
                loaded = []
                for t in loaded_ts:
                    handle = load_handles[t]
                    if isinstance(handle, popxl.HostToDeviceStream):
                        loaded.append(ops.host_load(handle, t.name))
                        continue
                    x = ops.remote_load(handle.buffer, _entry(handle, row, step, steps, rows), t.name)
                    group = _sharded(handle)
                    loaded.append(gather_replica_sharded_tensor(x, use_io_tiles=False, replica_group=group)
                                  if group else x)
            return [ops.io_tile_copy(x) for x in loaded] if io else loaded

        def compute(step: int, loaded: list) -> list:
            given = dict(zip(loaded_ts, loaded)) | dict(zip(passed_ts, passed)) | dict(zip(slots, slot_inputs))
            if seeds is not None:
                given[seed_input] = seeds[step]
            info = graph.call_with_info(args=given)
            out = [given[t] if t in given else info.graph_to_parent(t) for t in stored_ts]
            return [ops.io_tile_copy(x) for x in out] if io else out

        def store(step: int, values: list) -> None:
            with tiles():
                for t, x in zip(stored_ts, values):
                    if t in store_streams:
                        ops.host_store(store_streams[t], x)
                    if t in store_buffers:
                        handle = store_buffers[t]
                        group = _sharded(handle)
                        if group:
                            x = ops.collectives.replica_sharded_slice(x, group=group)
                        ops.remote_store(handle.buffer, _entry(handle, row, step, steps, rows), x)

        if io_mode == "io_overlapped":  # load i+1 and store i-1 around the compute of step i
            ahead = load(0)
            behind = None
            for step in range(steps):
                current = ahead
                ahead = load(step + 1) if step + 1 < steps else None
                if behind is not None:
                    store(step - 1, behind)
                behind = compute(step, current)
            store(steps - 1, behind)
        else:
            for step in range(steps):
                store(step, compute(step, load(step)))

    remap = dict(zip(passed_ts, passed)) | dict(zip(slots, slot_inputs))
    named = NamedTensors.from_dict({name: remap[t] for name, t in graph.args.to_dict().items() if t in remap})
    stored_buffers = {}
    for t in stored_ts + [t for t in loaded_ts if t in store_buffers]:
        if t in store_buffers:
            handle = load_handles.get(t)
            stored_buffers[t] = handle if _remote(handle) else store_buffers[t]
    return BatchSerialResult(GraphWithNamedArgs(repeat, named), stored_buffers, remap)


def batch_serialise_fwd_and_grad(forward_graph: GraphWithNamedArgs, gradient_graph: GraphWithNamedArgs,
                                 named_inputs_for_grad_graph: NamedTensors, steps: int, load_handles: dict,
                                 store_streams: dict, store_buffers: dict, seed_input=None, rows: int = 1,
                                 io_mode: str = "io") -> tuple[BatchSerialResult, BatchSerialResult]:
    """:func:`batch_serialise` of a forward graph and of its grad graph. The forward tensors the grad
    graph reads are stored by the forward loop (in a new buffer each, unless ``store_buffers`` or a
    remote load handle already keeps them, or they are among ``named_inputs_for_grad_graph``, which
    become named inputs of the grad graph) and loaded by the grad loop; the gradients it is given
    must have load handles. A ``ReplicaGrouping`` as a value of ``store_buffers`` shards that
    tensor's new buffer over the group."""
    info = gradient_graph.grad_graph_info
    if info.explicit_error is not None:
        raise NotModelledError(f"batch_serialise_fwd_and_grad: the grad graph of {forward_graph.graph.name!r} could "
                               f"not be built as ops ({info.explicit_error})")
    load_handles = _handles(load_handles)
    shard_groups = {t: g for t, g in store_buffers.items() if isinstance(g, popxl.ReplicaGrouping)}
    store_buffers = _handles({t: b for t, b in store_buffers.items() if t not in shard_groups})
    names = {t: name for name, t in named_inputs_for_grad_graph.to_dict().items()}
    grad_inputs = gradient_graph.graph.inputs
    activations = [(i, c.fwd_tensor) for i, c in enumerate(info.expected_inputs)
                   if c.connection_type == ExpectedConnectionType.Fwd]
    for _, t in activations:
        if t in store_buffers or t in names:
            continue
        if t in load_handles and _remote(load_handles[t]):
            store_buffers[t] = load_handles[t]
        else:
            group = shard_groups.get(t)
            store_buffers[t] = RemoteHandle(batch_serial_buffer(t, steps, rows, group), 0, group)
    forward = batch_serialise(forward_graph, steps, load_handles, store_streams, store_buffers, seed_input, rows,
                              io_mode)
    grad_loads, named = {}, {}
    for i, t in activations:
        if t in names:
            named[names[t]] = grad_inputs[i]
        elif t in forward.stored_buffers:
            grad_loads[grad_inputs[i]] = forward.stored_buffers[t]
        else:
            raise RuntimeError(f"Fwd Connection {t} missing. You need to provide it either in forward_variables or "
                               "in load_handles")
    named.update(gradient_graph.args.to_dict())
    gradient_graph.args = NamedTensors.from_dict(named)
    for i, c in enumerate(info.expected_inputs):
        if c.connection_type == ExpectedConnectionType.FwdGrad:
            if grad_inputs[i] not in load_handles:
                raise ValueError(f"FwdGrad input (idx={i} {grad_inputs[i]}) to Gradient graph must have a load_handle "
                                 "specified")
            grad_loads[grad_inputs[i]] = load_handles[grad_inputs[i]]
    gradient = batch_serialise(gradient_graph, steps, grad_loads, store_streams, store_buffers, None, rows, io_mode)
    gradient.graph._grad_graph_info = info
    return forward, gradient


__all__ = ["BatchSerialResult", "RemoteHandle", "batch_serial_buffer", "batch_serialise",
           "batch_serialise_fwd_and_grad"]
