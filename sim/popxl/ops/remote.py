"""``ops.remote_load``, ``ops.remote_load_`` and ``ops.remote_store``: copies between one slot
of a remote buffer (streaming memory) and the tiles; ``ops.io_tile_copy``: a copy between an IPU's
IO tiles and its compute tiles.

Each is an op of the simulated graph (kinds ``remote_load`` / ``remote_store``) that the
schedule runs as a :class:`~sim.program.RemoteCopy` of one slot's bytes, between the compute
before and after it (``sim/schedule/context.py``): the IPU waits for it, as for Poplar's copy to
or from a remote buffer. ``offset`` is an int, checked against the buffer's entries, or a scalar
integer tensor (chosen at run time: every slot is the same size, so the time is the same).
"""

from __future__ import annotations

from ...graph.ir import IO_TILE_COPY
from ..context import get_current_context
from ..graph import Graph
from ..remote_buffer import RemoteBuffer
from ..tensor import Tensor
from ._core import _graph
from ..io_tile_placement import on_io_tiles

_INDEX_DTYPES = ("int32", "uint32")


def _check(buffer, g: Graph, where: str) -> RemoteBuffer:
    if not isinstance(buffer, RemoteBuffer):
        raise TypeError(f"{where}: expected a popxl.RemoteBuffer, got {buffer!r}")
    if buffer._ir is not g.ir:
        raise TypeError(f"{where}: {buffer!r} belongs to another Ir")
    buffer._ipus.add(get_current_context().ipu or 0)
    return buffer


def _offset(g: Graph, buffer: RemoteBuffer, offset, where: str) -> tuple[list[str], dict]:
    """(the op's offset input, if a tensor; the op's attributes: made in ``popxl.io_tiles()``, the
    copy runs on the IO tiles)."""
    attrs = {"remote_buffer": buffer.remote_buffer_id, "slot_bytes": buffer.entry_nbytes}
    if get_current_context().io_tiles:
        attrs["io_tiles"] = True
    if isinstance(offset, Tensor):
        g._own(offset, where)
        if offset.nelms != 1 or offset.dtype.name not in _INDEX_DTYPES:
            raise TypeError(f"{where}: a tensor offset must be one int32 or uint32 value, got {offset.id!r} "
                            f"({offset.dtype.name} {offset.shape})")
        return [offset._sim], attrs
    buffer._check_offset(offset, where)
    return [], {**attrs, "offset": offset}


def remote_load(remote_buffer: RemoteBuffer, offset, name: str | None = None) -> Tensor:
    """Slot ``offset`` of ``remote_buffer`` as a new tensor on the tiles (with the buffer's
    ``meta_shape`` when it holds replica shards)."""
    where = "ops.remote_load"
    g = _graph(where)
    buffer = _check(remote_buffer, g, where)
    inputs, attrs = _offset(g, buffer, offset, where)
    with g._building(io_tiles_modelled=True) as b:
        out = b.op("remote_load", inputs, [buffer.tensor_shape], attrs, name=g._scoped(name or "remote_load"),
                   out_dtypes=[buffer.tensor_dtype.sim_name])[0]
    t = g._wrap(out, buffer.tensor_dtype)
    t._meta_shape = buffer.meta_shape
    return t


def remote_load_(remote_buffer: RemoteBuffer, offset, t: Tensor) -> Tensor:
    """Slot ``offset`` of ``remote_buffer`` written into ``t`` (which must have the slot's shape
    and dtype); returns ``t``."""
    where = "ops.remote_load_"
    g = _graph(where, t)
    buffer = _check(remote_buffer, g, where)
    buffer.validate_tensor_matches_buffer(t)
    inputs, attrs = _offset(g, buffer, offset, where)
    g._add_op("remote_load", [t._sim] + inputs, [t._sim], attrs, name="remote_load_")
    return t


def remote_store(remote_buffer: RemoteBuffer, offset, t: Tensor) -> None:
    """``t`` written to slot ``offset`` of ``remote_buffer`` (``t`` must have the slot's shape and
    dtype)."""
    where = "ops.remote_store"
    g = _graph(where, t)
    buffer = _check(remote_buffer, g, where)
    buffer.validate_tensor_matches_buffer(t)
    inputs, attrs = _offset(g, buffer, offset, where)
    g._add_op("remote_store", [t._sim] + inputs, [], attrs, name="remote_store")


def io_tile_copy(t: Tensor) -> Tensor:
    """``t`` copied between the IO tiles and the compute tiles of its IPU: to the compute tiles if
    ``t`` is on the IO tiles (made by a remote load in ``popxl.io_tiles()``, or by an IO-tile copy
    to them), to the IO tiles otherwise; priced as that on-chip exchange over the IO tiles
    (``ir.options.numIOTiles``)."""
    where = "ops.io_tile_copy"
    g = _graph(where, t)
    with g._building(io_tiles_modelled=True) as b:
        out = b.op(IO_TILE_COPY, [t._sim], [t.shape], {"to_io": not on_io_tiles(g.sim_graph, t._sim)},
                   name=g._scoped("io_tile_copy"))[0]
    y = g._wrap(out, t.dtype)
    y._meta_shape = t.meta_shape
    return y


