"""``popxl.RemoteBuffer``: buffers of tensors in streaming memory.

As PopXL's: ``remote_buffer(tensor_shape, tensor_dtype, entries)`` is ``entries`` slots, each one
tensor of that shape and dtype, held in the streaming memory (DDR behind the gateway) of every
replica. ``ops.remote_load`` / ``ops.remote_store`` copy one slot to or from the tiles
(:mod:`sim.popxl.ops.remote`): a :class:`~sim.program.RemoteCopy` between the compute before and
after it, priced at the system's streaming-memory bandwidth per IPU and latency
(``[streaming_memory]`` of the system's config). ``replica_sharded_buffer`` holds one shard a
replica of a tensor split over ``shard_over`` replicas: slots of ``ceil(elements / shard_over)``
elements, flat, with the whole tensor's shape as the buffer's ``meta_shape``.

Every buffer lives in streaming memory whether or not the program reads it; the session checks
that each IPU's buffers fit the streaming memory the system gives it (:func:`check_fits`) and
says in the run's notes how much they take.
"""

from __future__ import annotations

import math

from ..errors import OptionsError, OutOfMemoryError
from . import dtypes
from .context import get_current_context
from .errors import GraphContextError, PopXLError
from .tensor import Tensor, Variable, _shape_and_dtype


class RemoteBuffer:
    """Slots for ``entries`` tensors of ``tensor_shape`` and ``tensor_dtype`` in streaming memory.

    ``remote_buffer_id`` numbers the Ir's buffers from 1, as PopXL does. ``entries`` may be
    changed until the session is made; ``meta_shape`` is the unsharded shape of a buffer of
    replica-sharded tensors (``()`` otherwise).
    """

    def __init__(self, tensor_shape, tensor_dtype, entries: int = 1):
        _check_entries(entries)
        ir = get_current_context().graph.ir
        ir.main_graph._check_open()
        self._ir = ir
        self._tensor_shape = tuple(int(d) for d in tensor_shape)
        self._tensor_dtype = dtypes.dtype.as_dtype(tensor_dtype)
        self._entries = entries
        self._meta_shape: tuple[int, ...] = ()
        self._shard_over: int | None = None  # replicas a replica_sharded_buffer's tensors are split over
        self._remote_buffer_id = len(ir._remote_buffers) + 1
        self._variables: dict[int, object] = {}  # slot -> the remote variable placed there
        self._ipus: set[int] = set()  # IPUs whose ops load or store it
        ir._remote_buffers.append(self)

    @property
    def remote_buffer_id(self) -> int:
        return self._remote_buffer_id

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        return self._tensor_shape

    @property
    def tensor_dtype(self) -> dtypes.dtype:
        return self._tensor_dtype

    @property
    def entries(self) -> int:
        return self._entries

    @entries.setter
    def entries(self, value: int) -> None:
        _check_entries(value)
        self._ir.main_graph._check_open()
        if self._variables and max(self._variables) >= value:
            raise ValueError(f"RemoteBuffer[id={self.remote_buffer_id}]: cannot shrink to {value} entries: "
                             f"slot {max(self._variables)} holds variable {self._variables[max(self._variables)].id!r}")
        self._entries = value

    @property
    def meta_shape(self) -> tuple[int, ...]:
        return self._meta_shape

    @meta_shape.setter
    def meta_shape(self, shape) -> None:
        self._meta_shape = tuple(int(d) for d in shape)

    @property
    def entry_nbytes(self) -> int:
        """Bytes of one slot."""
        return math.prod(self._tensor_shape) * self._tensor_dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of streaming memory the buffer takes on each replica (all its slots)."""
        return self.entry_nbytes * self._entries

    def validate_tensor_matches_buffer(self, t, num_shards: int = 1) -> None:
        """Raise ``ValueError`` unless ``t`` has the buffer's dtype and its slot shape (its
        ``meta_shape`` when ``num_shards`` > 1)."""
        shape = self._tensor_shape if num_shards == 1 else self._meta_shape
        if tuple(t.shape) != shape or t.dtype != self._tensor_dtype:
            raise ValueError(f"tensor {t.id!r} ({t.dtype.name} {tuple(t.shape)}) does not fit "
                             f"RemoteBuffer[id={self.remote_buffer_id}], whose slots hold {self._tensor_dtype.name} "
                             f"{shape}")

    def _check_offset(self, offset: int, where: str) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"{where}: offset must be an int or a popxl Tensor, got {offset!r}")
        if not 0 <= offset < self._entries:
            raise ValueError(f"{where}: offset {offset} is outside RemoteBuffer[id={self.remote_buffer_id}], "
                             f"which has {self._entries} entries (0 to {self._entries - 1}); make it with more "
                             "entries or set its .entries")

    def __repr__(self) -> str:
        meta = f", meta_shape={self._meta_shape}" if self._meta_shape else ""
        return (f"RemoteBuffer[id={self.remote_buffer_id}, {self._tensor_dtype.name} {self._tensor_shape} "
                f"x {self._entries}{meta}]")


def _check_entries(entries) -> None:
    if isinstance(entries, bool) or not isinstance(entries, int) or entries < 1:
        raise ValueError(f"a remote buffer needs a whole number of entries >= 1, got {entries!r}")


def remote_buffer(tensor_shape, tensor_dtype, entries: int = 1) -> RemoteBuffer:
    """A remote buffer of the current graph's Ir."""
    return RemoteBuffer(tensor_shape, tensor_dtype, entries)


def replica_sharded_buffer(shape, dtype, replica_grouping=None, shard_over: int | None = None,
                           entries: int = 1) -> RemoteBuffer:
    """A buffer for shards of a tensor of ``shape`` split over ``shard_over`` replicas (by default
    all the replicas of a group of ``replica_grouping``, itself by default every replica): flat
    slots of ``ceil(elements / shard_over)`` elements, ``meta_shape`` the tensor's shape (without
    the leading groups dimension when there are several groups), as PopXL's."""
    ir = get_current_context().graph.ir
    grouping = replica_grouping if replica_grouping is not None else ir.replica_grouping()
    if getattr(grouping, "_ir", None) is not ir:
        raise PopXLError("replica_sharded_buffer: replica_grouping must come from this Ir's replica_grouping(...)")
    group_size = grouping.group_size
    shard_over = group_size if shard_over is None else shard_over
    if isinstance(shard_over, bool) or not isinstance(shard_over, int) or shard_over < 1:
        raise ValueError(f"replica_sharded_buffer: shard_over must be a whole number >= 1, got {shard_over!r}")
    if shard_over > group_size:
        raise ValueError(f"replica_sharded_buffer: shard_over={shard_over} is more replicas than a group holds "
                         f"({group_size}: the replica grouping's group size, every replica by default)")
    if group_size % shard_over:
        raise ValueError(f"replica_sharded_buffer: a group of {group_size} replicas does not split into shards "
                         f"over {shard_over}; use a shard_over that divides {group_size}")
    shape = tuple(int(d) for d in shape)
    tensor_shape = shape[1:] if grouping.num_groups > 1 else shape
    buffer = RemoteBuffer((-(-math.prod(tensor_shape) // shard_over),), dtype, entries)
    buffer.meta_shape = tensor_shape
    buffer._shard_over = shard_over
    return buffer


def streaming_bytes_per_ipu(ir) -> dict[int, int]:
    """Bytes of streaming memory the Ir's buffers take on each IPU of a replica: a buffer counts
    on the IPUs whose ops load or store it (split evenly), on IPU 0 when none does."""
    used: dict[int, int] = {}
    for b in ir._remote_buffers:
        ipus = sorted(b._ipus) or [0]
        for i in ipus:
            used[i] = used.get(i, 0) + -(-b.nbytes // len(ipus))
    return used


def check_fits(ir, system) -> list[str]:
    """Raise :class:`~sim.errors.OutOfMemoryError` if an IPU's remote buffers do not fit the
    streaming memory the system gives it; returns the run's note on what they take."""
    if not ir._remote_buffers:
        return []
    used = streaming_bytes_per_ipu(ir)
    room = system.streaming_memory.bytes_per_ipu
    if not room:
        raise OptionsError(f"the program has {len(ir._remote_buffers)} remote buffer(s) ({sum(used.values()):,} "
                           f"bytes) but system {system.name} has no streaming memory; use a system built from "
                           "IPU-M2000s or Bow-2000s (ipu-m2000, ipu-pod16, bow-pod16, ...)")
    over = {ipu: n - room for ipu, n in used.items() if n > room}
    if over:
        ipu = max(over, key=over.get)
        names = ", ".join(repr(b) for b in ir._remote_buffers if ipu in (b._ipus or {0}))
        raise OutOfMemoryError(
            f"out of streaming memory on IPU {ipu} of each replica: its remote buffers ({names}) need "
            f"{used[ipu]:,} bytes but system {system.name} gives each IPU {room:,}; {over[ipu]:,} bytes over. "
            "Use fewer or smaller buffers, or shard them over replicas (replica_sharded_buffer)",
            ipu=ipu, op=None, shortfall_bytes=over[ipu], shortfalls=over)
    return [f"remote buffers: {len(ir._remote_buffers)} in streaming memory, "
            + ", ".join(f"IPU {i} {n:,} bytes" for i, n in sorted(used.items()))
            + f" of each replica (of {room:,} each IPU has)"]


# --- variables in streaming memory ------------------------------------------------------------

class RemoteVariable(Variable):
    """A variable held in a slot of a remote buffer, not in tile memory: it has no tensor in the
    simulated graph, so ops cannot read it; ``ops.remote_load`` of its slot brings it to the tiles.
    Its host data is kept for ``Session.get_tensor_data`` / ``write_variable_data``."""

    def __init__(self, graph, label: str, shape, dtype, buffer: RemoteBuffer, offset: int, shards: int, **kw):
        super().__init__(graph, None, shape, dtype, get_current_context().ipu, **kw)
        self._label = label
        self.remote_buffer = buffer
        self.offset = offset
        self.shards = shards  # replicas one value is split over (1: not sharded)

    @property
    def id(self) -> str:
        return self._label

    @property
    def name(self) -> str:
        return self._label.rsplit("/", 1)[-1]

    def __repr__(self) -> str:
        return (f"RemoteVariable[{self._label} {self.dtype.name} {self.shape} in {self.remote_buffer!r} "
                f"slot {self.offset}]")


def _remote(data, buffer: RemoteBuffer, offset: int, dtype, name, downcast, replica_grouping, retrieval_mode,
            where: str, shards: int, log2_scale=None, nan_on_overflow=None) -> RemoteVariable:
    g = get_current_context().graph
    g._check_open()
    if not g._main:
        raise GraphContextError(f"{where}({name!r}): variables can only be created in the main graph (not in subgraph "
                         f"{g.name!r}); create it in `with ir.main_graph:`")
    if not isinstance(buffer, RemoteBuffer) or buffer._ir is not g.ir:
        raise TypeError(f"{where}: expected a RemoteBuffer of this Ir (popxl.remote_buffer), got {buffer!r}")
    buffer._check_offset(offset, where)
    shp, dt, arr = _shape_and_dtype(data, dtype, downcast, None, where, tuple_is_shape=False, log2_scale=log2_scale,
                                    nan_on_overflow=nan_on_overflow)
    if replica_grouping is not None and replica_grouping.num_groups > 1:
        shp = shp[1:]
    if replica_grouping is None:
        replica_grouping = g.ir.replica_grouping()
    if retrieval_mode not in ("one_per_group", "all_replicas", None):
        raise ValueError(f"{where}: retrieval_mode must be 'one_per_group' or 'all_replicas', got {retrieval_mode!r}")
    if offset in buffer._variables:
        raise PopXLError(f"{where}: slot {offset} of {buffer!r} already holds variable "
                         f"{buffer._variables[offset].id!r}; give this one another offset")
    label = g.ir._remote_label(g._scoped(name or "remote_variable"))
    v = RemoteVariable(g, label, shp, dt, buffer, offset, shards, data=arr, replica_grouping=replica_grouping,
                       retrieval_mode=retrieval_mode or "one_per_group")
    if not (shards == 1 and dt == buffer.tensor_dtype and math.prod(shp) == math.prod(buffer.tensor_shape)):
        # PopXL's remote_variable sets the variable's location without comparing shapes (its loads and stores
        # check theirs): a variable of the slot's elements in another shape (a (1, n) group axis of one group)
        # fills the slot as PopART writes it; one of other elements or dtype could not, and is refused here
        buffer.validate_tensor_matches_buffer(v, shards)
    buffer._variables[offset] = v
    g._made.append(v)
    return v


def remote_variable(data, remote_buffer: RemoteBuffer, offset: int = 0, dtype=None, name: str | None = None,
                    downcast: bool = True, replica_grouping=None, retrieval_mode: str | None = "one_per_group",
                    log2_scale: int | None = None, nan_on_overflow: bool | None = None) -> RemoteVariable:
    """A variable whose value is slot ``offset`` of ``remote_buffer`` (its shape and dtype must be
    the buffer's). ``log2_scale`` and ``nan_on_overflow`` (FP8 data) change values only."""
    return _remote(data, remote_buffer, offset, dtype, name, downcast, replica_grouping, retrieval_mode,
                   "popxl.remote_variable", 1, log2_scale, nan_on_overflow)


def remote_replica_sharded_variable(data, remote_buffer: RemoteBuffer, offset: int = 0, dtype=None,
                                    name: str | None = None, downcast: bool = True, replica_grouping=None,
                                    retrieval_mode: str | None = "one_per_group", log2_scale: int | None = None,
                                    nan_on_overflow: bool | None = None) -> RemoteVariable:
    """A variable split over the replicas, each replica's shard in slot ``offset`` of its
    ``remote_buffer`` (a :func:`replica_sharded_buffer`, or a buffer of flat slots whose
    ``meta_shape`` this sets to the variable's shape, as PopXL does)."""
    where = "popxl.remote_replica_sharded_variable"
    ir = get_current_context().graph.ir
    if ir.replication_factor <= 1:
        raise ValueError(f"{where}: the Ir's replication factor is {ir.replication_factor}; a replica-sharded "
                         "variable needs replication (set ir.replication_factor > 1)")
    shp, _, _ = _shape_and_dtype(data, dtype, downcast, None, where, tuple_is_shape=False)
    full = shp[1:] if replica_grouping is not None and replica_grouping.num_groups > 1 else shp
    if not remote_buffer.meta_shape:
        remote_buffer.meta_shape = full
    elif remote_buffer.meta_shape != tuple(full):
        raise ValueError(f"{where}: {remote_buffer!r} holds shards of {remote_buffer.meta_shape} tensors, not of "
                         f"{tuple(full)}")
    shards = remote_buffer._shard_over or -(-math.prod(full) // math.prod(remote_buffer.tensor_shape))
    if shards < 2:
        raise ValueError(f"{where}: the slots of {remote_buffer!r} hold the whole {tuple(full)} tensor, not a shard "
                         "of it; make the buffer with popxl.replica_sharded_buffer")
    return _remote(data, remote_buffer, offset, dtype, name, downcast, replica_grouping, retrieval_mode, where,
                   shards, log2_scale, nan_on_overflow)


def replica_sharded_variable(data, dtype=None, name: str | None = None, downcast: bool = True,
                             replica_grouping=None, shard_over: int | None = None,
                             retrieval_mode: str | None = "one_per_group", log2_scale: int | None = None,
                             nan_on_overflow: bool | None = None) -> tuple[RemoteVariable, Tensor]:
    """(the whole variable, its shard on the tiles), as PopXL's: the variable goes in a buffer of
    its own and each replica's shard is loaded into tile memory when the weights are written to
    the device (PopXL's WeightsFromHost program), so in the simulation the shard is a weight of
    ``ceil(elements / shard_over)`` elements, always live, and no run loads it. Use the shard in
    the program (``ops.collectives.replicated_all_gather`` rebuilds the whole tensor)."""
    g = get_current_context().graph
    shp, dt, _ = _shape_and_dtype(data, dtype, downcast, None, "popxl.replica_sharded_variable",
                                  tuple_is_shape=False)
    buffer = replica_sharded_buffer(shp, dt, replica_grouping, shard_over)
    var = remote_replica_sharded_variable(data, buffer, 0, dtype, name, downcast, replica_grouping, retrieval_mode,
                                          log2_scale, nan_on_overflow)
    buffer._ipus.add(get_current_context().ipu or 0)
    shard = Tensor(g, g._new_tensor(f"{var.name}_rts", buffer.tensor_shape, dt, "weight"), buffer.tensor_shape, dt,
                   get_current_context().ipu)
    shard._meta_shape = buffer.meta_shape
    g.ir._sharded_weights[shard._sim] = var
    return var, shard


__all__ = ["RemoteBuffer", "RemoteVariable", "remote_buffer", "remote_replica_sharded_variable", "remote_variable",
           "replica_sharded_buffer", "replica_sharded_variable"]
