"""``popxl.RemoteBuffer``: the name exists (popxl-addons annotates its functions with it), but remote
buffers are not modelled: making one raises :class:`~sim.popxl.errors.NotModelledError`.

What modelling them would take: PopXL's ``remote_buffer(shape, dtype, entries)`` is a buffer of
``entries`` tensors in streaming memory; ``ops.remote_load(buffer, offset)`` / ``ops.remote_store``
copy one entry between streaming memory and the tiles (PopART's RemoteLoadOp / RemoteStoreOp, a
Poplar copy to or from a remote buffer, ``offset`` a runtime index); ``remote_variable`` and
``remote_replica_sharded_variable`` put a variable's host value in such a buffer (replica-sharded:
each replica holds 1/n of it, gathered back with a replicated all-gather). The simulator prices
streaming-memory copies only for its own phased execution (``sim/schedule/phased.py``,
``RemoteCopy``), not as ops of a program.
"""

from __future__ import annotations

from .errors import NotModelledError

_WHY = ("remote buffers (streaming memory read and written by ops.remote_load / ops.remote_store) are not "
        "modelled by the simulator's PopXL front end; keep the variables on chip (popxl.variable)")


class RemoteBuffer:
    """PopXL's handle to a buffer in streaming memory (not modelled: making one raises)."""

    def __init__(self, tensor_shape, tensor_dtype, entries: int = 1):
        raise NotModelledError(f"popxl.RemoteBuffer{(tuple(tensor_shape), entries)}: {_WHY}")


def remote_buffer(tensor_shape, tensor_dtype, entries: int = 1) -> RemoteBuffer:
    """Not modelled: raises :class:`NotModelledError`."""
    return RemoteBuffer(tensor_shape, tensor_dtype, entries)


def replica_sharded_buffer(tensor_shape, tensor_dtype, replica_grouping=None, shard_over=None,
                           entries: int = 1) -> RemoteBuffer:
    """Not modelled: raises :class:`NotModelledError`."""
    return RemoteBuffer(tensor_shape, tensor_dtype, entries)


__all__ = ["RemoteBuffer", "remote_buffer", "replica_sharded_buffer"]
