"""popxl-addons' variable factories: what a module's named input needs to become a variable of the
main graph (the data that initialises it, its dtype, its replica grouping)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from .. import popxl
from .dot_tree import DotTree
from .named_replica_grouping import NamedReplicaGrouping
from .named_tensors import NamedTensors

#: host bytes of variable data an Ir's factories draw (their ``data_fn``) before they give zeros instead:
#: a tutorial's model is drawn whole; drawing a multi-billion-parameter model's took the simulator minutes
DRAW_BUDGET_BYTES = 64 << 20


class VariableFactory:
    """Makes a variable (``create_var``) or a subgraph input (``create_input``) of one shape and dtype.

    ``data_iter`` returns the initial value (a numpy array or scalar); it is called once here for the
    shape and again by each ``create_var``, so each variable gets fresh data (random initialisers
    differ between them, as they do in popxl-addons). As in popxl-addons it may instead be an
    iterable of values, one taken for each variable (and each group of a grouped one)."""

    def __init__(self, data_iter: Callable[[], np.ndarray] | Iterable, dtype=None, name: str | None = None,
                 by_ref: bool = False, replica_grouping=None, shard_over: int = 1):
        # popxl-addons' names and defaults: ``data_iter``, and the dtype the data's when none is given
        data_fn = data_iter
        if not callable(data_fn):
            if not isinstance(data_fn, Iterable):
                raise TypeError(f"VariableFactory({name!r}): data_iter must be a function returning the initial value "
                                f"(for example functools.partial(np.zeros, shape)) or an iterable of values, got "
                                f"{data_fn!r}")
            data_fn = _Draws(iter(data_fn), name)
        self.data_fn = data_fn
        if isinstance(data_fn, _Draws):
            first = data_fn.peek()
        else:
            try:  # popxl-addons tries the callable once: one that fails is its ValueError
                first = data_fn()
            except Exception as e:
                raise ValueError(f"VariableFactory({name!r}): Passed callable via `data_iter` throws error.") from e
        # no dtype: the data's, 64-bit types as the 32-bit ones the IPU holds them in
        self.dtype = popxl.dtype.as_dtype(dtype if dtype is not None else np.asarray(first).dtype).downcast()
        self.name = name
        self.by_ref = by_ref
        # every replica by default, as popxl-addons (needs the Ir of the graph being built)
        self.replica_grouping = replica_grouping or popxl.gcg().ir.replica_grouping()
        self.shard_over = shard_over
        self.shape = tuple(np.shape(first))
        self.meta_shape = None
        if shard_over > 1:  # a replica shard: flat, its whole tensor's shape the meta-shape
            group = replica_grouping.group_size if replica_grouping is not None else popxl.gcg().ir.replication_factor
            if shard_over > group:
                raise ValueError(f"VariableFactory({name!r}): shard_over={shard_over} is more replicas than its "
                                 f"replica group holds ({group})")
            self.meta_shape, self.shape = self.shape, (math.prod(self.shape) // shard_over,)

    @property
    def replica_sharded(self) -> bool:
        return self.shard_over > 1

    def create_input(self, prefix: str | None = None) -> popxl.Tensor:
        """A named input of the subgraph being built."""
        return popxl.graph_input(self.shape, self.dtype, _join(prefix, self.name), by_ref=self.by_ref,
                                 meta_shape=self.meta_shape)

    def _data(self, empty: bool = False) -> np.ndarray:
        """Fresh data; with a replica grouping of several groups, one draw a group stacked on a new
        first axis, as PopXL takes grouped variables' data. ``empty`` (popxl-addons leaves the data
        uninitialised): zeros, as a read-only view that holds no memory (the simulator computes no
        values, so a multi-gigabyte model's variables need none), without running ``data_fn``."""
        groups = self.replica_grouping.num_groups if self.replica_grouping is not None else 1
        shape = ((groups,) if groups > 1 else ()) + tuple(self.meta_shape or self.shape)
        ir = popxl.gcg().ir
        nbytes = math.prod(shape) * self.dtype.itemsize
        if not empty and ir._drawn_bytes + nbytes > DRAW_BUDGET_BYTES:
            empty = True  # a model bigger than the budget: its values would only fill the host's memory
            ir._note(f"variable data beyond the first {DRAW_BUDGET_BYTES >> 20} MiB an Ir's factories draw is not "
                     "drawn: those variables hold zeros (the simulator computes no values)")
        if empty:
            return np.broadcast_to(np.zeros((), self.dtype.as_numpy()), shape)
        ir._drawn_bytes += nbytes
        draws = [np.asarray(self.data_fn(), dtype=self.dtype.as_numpy()) for _ in range(groups)]
        return np.stack(draws) if groups > 1 else draws[0]

    def create_var(self, prefix: str | None = None, empty: bool = False) -> popxl.Variable:
        """A variable of the main graph holding fresh data (zeros when ``empty``)."""
        return popxl.variable(self._data(empty), self.dtype, _join(prefix, self.name),
                              replica_grouping=self.replica_grouping)

    def create_remote_var(self, buffer: popxl.RemoteBuffer, entry: int = 0, prefix: str | None = None,
                          empty: bool = False) -> popxl.Tensor:
        """A variable held in slot ``entry`` of ``buffer`` (streaming memory), holding fresh data (zeros
        when ``empty``): a replica-sharded one when the buffer holds shards (has a meta-shape), as
        popxl-addons' ``create_remote_tensor``."""
        data = self._data(empty)
        name = _join(prefix, self.name)
        if buffer.meta_shape:
            return popxl.remote_replica_sharded_variable(data, buffer, entry, self.dtype, name,
                                                         replica_grouping=self.replica_grouping)
        return popxl.remote_variable(data, buffer, entry, self.dtype, name, replica_grouping=self.replica_grouping)

    def __repr__(self) -> str:
        return f"VariableFactory({self.name!r}, shape={self.shape}, dtype={self.dtype.name})"


class NamedVariableFactories(DotTree):
    """A :class:`DotTree` of :class:`VariableFactory`."""

    def init(self, prefix: str | None = None, empty: bool = False, memmap_dir: str | None = None,
             read_only_if_exists: bool = False) -> NamedTensors:
        """A variable of the main graph for each factory, by the same names (``prefix.name``), holding
        fresh data (zeros when ``empty``). ``memmap_dir`` (popxl-addons keeps the host data in numpy
        memory maps there) and ``read_only_if_exists`` change where the host keeps the data, not the
        device program, so they are accepted and not used."""
        return NamedTensors.from_dict({name: f.create_var(prefix, empty) for name, f in self.to_dict().items()})

    def init_remote(self, buffers, entry: int = 0, prefix: str | None = None, empty: bool = False,
                    memmap_dir: str | None = None, read_only_if_exists: bool = False) -> NamedTensors:
        """A variable held in the remote buffer of the same name (``buffers``, as
        :func:`~sim.popxl_addons.remote.named_variable_buffers` makes them) for each factory, at slot
        ``entry``, holding fresh data (zeros when ``empty``); made in name order, as popxl-addons makes
        them. ``memmap_dir`` and ``read_only_if_exists`` as for :meth:`init`."""
        held = buffers.to_dict()
        missing = sorted(set(self.to_dict()) - set(held))
        if missing:
            raise KeyError(f"init_remote: no remote buffer named {', '.join(map(repr, missing))} (buffers: "
                           f"{', '.join(sorted(held)) or 'none'})")
        return NamedTensors.from_dict({name: f.create_remote_var(held[name], entry, prefix, empty)
                                       for name, f in sorted(self.to_dict().items())})

    @property
    def replica_groupings(self):
        """Each factory's replica grouping (every replica where it has none), by the same names."""
        every = popxl.gcg().ir.replica_grouping()
        return NamedReplicaGrouping.from_dict({name: f.replica_grouping or every for name, f in self.to_dict().items()})

    def init_zero(self, prefix: str | None = None) -> NamedTensors:
        """A zeroed tensor for each factory in the graph being built (popxl-addons' ``ops.init``). In the
        main graph they are variables of zeros (``init(empty=True)``), so that accumulators made there
        are state the simulated training can keep; in a subgraph (a phase's gradient accumulators)
        each is zeroed on every call and lives only while it is used."""
        return self._init_here(prefix, "zero")

    def init_undef(self, prefix: str | None = None) -> NamedTensors:
        """As :meth:`init_zero`, the tensors left undefined (``ops.init(..., "undef")`` in a subgraph)."""
        return self._init_here(prefix, "undef")

    def _init_here(self, prefix: str | None, init_type: str) -> NamedTensors:
        if popxl.gcg()._main:
            return self.init(prefix, empty=True)
        return NamedTensors.from_dict({name: popxl.ops.init(f.shape, f.dtype, _join(prefix, name), init_type)
                                       for name, f in self.to_dict().items()})


class _Draws:
    """An iterable of values as a ``data_fn``: each call takes the next value; ``peek`` reads the next one
    ahead without taking it (for the factory's shape)."""

    def __init__(self, values: Iterator, name: str | None):
        self._values, self._name = values, name
        self._ahead = [self._next()]

    def _next(self):
        try:
            return next(self._values)
        except StopIteration:
            raise ValueError(f"VariableFactory({self._name!r}): its iterable of values ran out") from None

    def peek(self):
        if not self._ahead:
            self._ahead.append(self._next())
        return self._ahead[0]

    def __call__(self):
        return self._ahead.pop() if self._ahead else self._next()


def _join(prefix: str | None, name: str | None) -> str | None:
    return ".".join(p for p in (prefix, name) if p) or None
