"""PopXL tensors: handles to tensors of the simulator's graph, with their shape and dtype.

A :class:`Tensor` names one tensor of the sim :class:`~sim.graph.Graph` its PopXL graph records
into. No values live on it: the simulator prices shapes and dtypes, it computes no numbers.
``popxl.variable``/``popxl.constant`` accept numpy data (and keep it for
``session.get_tensor_data``) but only its shape and dtype reach the simulation.

A tensor's methods and operators (``t.reshape(...)``, ``a + b``, ``t[0]``, ...) are ops of
:mod:`sim.popxl.ops`, which registers them here with :func:`register_tensor_ops` when it is
imported (``import sim.popxl`` imports it): ops build on this module, so it does not import them.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Union

import numpy as np

from . import dtypes
from .context import get_current_context
from .errors import GraphContextError, NotModelledError, PopXLError
from .io_tile_placement import on_io_tiles

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Graph
    from .ir import ReplicaGrouping


#: PopXL's type hints for host data (tensor.py): numpy arrays or nested sequences of numbers
#: (PopXL adds ``torch.Tensor`` when torch is installed; the simulator reads only shapes)
ScalarType = Union[int, float, builtins.bool]
HostTensor = Union[np.ndarray, Iterable[ScalarType]]
host_tensor_types = (np.ndarray, Iterable)
HostScalarTensor = Union[ScalarType, HostTensor]
TensorLike = Union["Tensor", HostScalarTensor]


class TensorSpec:
    """Shape and dtype of a tensor, without a tensor (PopXL ``popxl.TensorSpec``)."""

    def __init__(self, shape: Iterable[int], dtype, meta_shape: Iterable[int] = ()):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtypes.dtype.as_dtype(dtype)
        self.meta_shape = tuple(meta_shape)

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype})"

    def to_dict(self) -> dict:
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}

    def to_tuple(self) -> tuple:
        return self.shape, self.dtype, self.meta_shape

    def __eq__(self, other) -> builtins.bool:
        return isinstance(other, TensorSpec) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))


class Tensor:
    """A tensor of a PopXL graph: ``id`` (its name in the sim graph), ``shape``, ``dtype``."""

    def __init__(self, graph: Graph, sim_name: str | None, shape, dtype: dtypes.dtype,
                 ipu: int | None = None):
        self._graph = graph
        self._sim = sim_name
        self._shape = tuple(int(d) for d in shape)
        self._dtype = dtype
        self._ipu = ipu
        self._meta_shape: tuple[int, ...] = ()  # the unsharded shape of a replica shard (PopXL's meta-shape)

    # --- what it is --------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._sim

    @property
    def name(self) -> str:
        return self._sim.rsplit("/", 1)[-1]

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> dtypes.dtype:
        return self._dtype

    @property
    def rank(self) -> int:
        return len(self._shape)

    @property
    def nelms(self) -> int:
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        return self.nelms * self._dtype.itemsize

    @property
    def ipu(self) -> int:
        return self._ipu or 0

    @property
    def meta_shape(self) -> tuple[int, ...]:
        """The shape of the whole tensor a replica shard is part of (``()`` if not a shard)."""
        return self._meta_shape

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self._shape, self._dtype, self._meta_shape)

    @property
    def ir(self):
        return self._graph.ir

    @property
    def scope(self) -> str:
        """The graph scope part of the tensor's id (PopXL's): empty in the main graph, else the graph's name."""
        return "" if self._graph._main else self._graph.name

    @property
    def tile_set(self) -> str:
        """``"io"`` for a tensor on the IO tiles (a remote load made in ``popxl.io_tiles()``, an IO-tile
        copy to them), else ``"compute"`` (PopXL's ``Tensor.tile_set``)."""
        return "io" if self._sim is not None and on_io_tiles(self._graph.sim_graph, self._sim) else "compute"

    def strides(self, shape=None) -> tuple[int, ...]:
        """Bytes to step along each axis of ``shape`` (the tensor's by default) laid out in row-major
        order, as PopXL's ``Tensor.strides`` (numpy's ``ndarray.strides``)."""
        dims = tuple(int(d) for d in (self._shape if shape is None else shape))
        out, step = [], self._dtype.itemsize
        for d in reversed(dims):
            out.append(step)
            step *= d
        return tuple(reversed(out))

    def diag(self) -> Tensor:
        """The diagonal of a 2-D tensor, as PopXL takes it: every ``(columns + 1)``-th element of the
        flattened tensor."""
        if self.rank != 2:
            raise ValueError("Diag expected a 2d tensor.")
        return self.flatten()[::self._shape[1] + 1]

    def __repr__(self) -> str:
        return f"Tensor[{self.id} {self._dtype.name} {self._shape}]"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other) -> builtins.bool:  # identity, so tensors can key dicts (as in PopXL)
        return self is other

    # numpy must not take a Tensor for a sequence (``np.float32(2) * t`` calls Tensor.__rmul__),
    # nor may a Tensor be iterated: PopXL's settings
    __array_ufunc__ = None
    __iter__ = None
    __contains__ = None

    def __len__(self) -> int:
        if not self._shape:
            raise ValueError("len() of a 0-d tensor")
        return self._shape[0]

    def __bool__(self) -> builtins.bool:
        raise TypeError("A popxl Tensor has no value on the host: it cannot be used as a bool")

    # --- ops as methods and operators (as PopXL's Tensor) ----------------------------------------
    def reshape(self, shape) -> Tensor:
        return _op("reshape")(self, shape)

    reshape_ = reshape

    def flatten(self) -> Tensor:
        return self.reshape((-1,))

    flatten_ = flatten

    def transpose(self, permutation=None) -> Tensor:
        return _op("transpose")(self, permutation)

    transpose_ = transpose

    @property
    def T(self) -> Tensor:
        return self.transpose()

    T_ = T

    def detach_(self) -> Tensor:
        return self.detach()

    def detach(self) -> Tensor:
        return _op("detach")(self)

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        return _op("ipu_copy")(self, destination, source)

    def __getitem__(self, key) -> Tensor:
        """Slicing with ints and slices; a tensor (or host array) of integers gathers along axis 0
        (``ops.gather``), one of booleans keeps the elements where it is True and zeroes the others
        (``ops.where``), as PopXL's ``Tensor.__getitem__``."""
        if isinstance(key, Tensor) or (isinstance(key, np.ndarray) and key.dtype.kind in "biu"):
            index = key if isinstance(key, Tensor) else constant(key)
            if index.dtype.name == "bool":
                return _op("where")(index, self, constant(0, self.dtype))
            if index.dtype.is_int:
                return _op("gather")(self, index)
            raise TypeError(f"a tensor index must hold integers or booleans, got {index.id!r} of {index.dtype.name}")
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > self.rank:
            raise IndexError(f"too many indices for a tensor of rank {self.rank}: {key!r}")
        starts, stops, steps, axes, drop = [], [], [], [], []
        for axis, k in enumerate(key):
            size = self._shape[axis]
            if isinstance(k, builtins.bool) or not isinstance(k, (int, slice)):
                raise NotModelledError(f"indexing a tensor with {k!r} is not modelled: use ints and slices "
                                       "(or ops.gather with an index tensor)")
            if isinstance(k, int):
                i = k + size if k < 0 else k
                if not 0 <= i < size:
                    raise IndexError(f"index {k} is out of range for axis {axis} of size {size}")
                starts.append(i), stops.append(i + 1), steps.append(1), axes.append(axis)
                drop.append(axis)
            elif k != slice(None):  # as written: ops.slice applies numpy's rules (negative steps too)
                starts.append(k.start), stops.append(k.stop), steps.append(1 if k.step is None else k.step)
                axes.append(axis)
        out = _op("slice")(self, starts, stops, steps, axes) if axes else self
        if drop:  # integer indices drop their axes, down to a 0-d tensor, as PopXL's
            out = _op("reshape")(out, [d for a, d in enumerate(out.shape) if a not in drop])
        return out

    def _binary(self, other, fn, reverse=False):
        a, b = (other, self) if reverse else (self, other)
        return _op(fn)(a, b)

    def __add__(self, other):
        return self._binary(other, "add")

    def __radd__(self, other):
        return self._binary(other, "add", True)

    def __sub__(self, other):
        return self._binary(other, "sub")

    def __rsub__(self, other):
        return self._binary(other, "sub", True)

    def __mul__(self, other):
        return self._binary(other, "mul")

    def __rmul__(self, other):
        return self._binary(other, "mul", True)

    def __truediv__(self, other):
        return self._binary(other, "div")

    def __rtruediv__(self, other):
        return self._binary(other, "div", True)

    def __matmul__(self, other):
        return self._binary(other, "matmul")

    def __rmatmul__(self, other):
        return self._binary(other, "matmul", True)

    def __neg__(self):
        return _op("negate")(self)

    def __pow__(self, other):
        return self._binary(other, "pow")

    def __rpow__(self, other):
        return self._binary(other, "pow", True)

    def __mod__(self, other):
        return self._binary(other, "fmod")

    def __rmod__(self, other):
        return self._binary(other, "fmod", True)

    def __invert__(self):
        return _op("logical_not")(self)

    def __and__(self, other):
        return self._binary(other, "logical_and")

    def __rand__(self, other):
        return self._binary(other, "logical_and", True)

    def __or__(self, other):
        return self._binary(other, "logical_or")

    def __ror__(self, other):
        return self._binary(other, "logical_or", True)

    def __iadd__(self, other):
        return _op("add_")(self, other)


# --- the ops behind the methods and operators ------------------------------------------------------

_OPS: dict[str, Callable[..., Tensor]] = {}


def register_tensor_ops(**ops: Callable[..., Tensor]) -> None:
    """Register the ops of :mod:`sim.popxl.ops` that Tensor's methods and operators call, by
    name (``reshape``, ``add``, ...); ``sim.popxl.ops`` does so when it is imported."""
    _OPS.update(ops)


def _op(name: str) -> Callable[..., Tensor]:
    try:
        return _OPS[name]
    except KeyError:
        raise PopXLError(f"a popxl Tensor method or operator needs ops.{name}, which is not registered: "
                         "import sim.popxl (it imports sim.popxl.ops, which registers its ops)") from None


class Variable(Tensor):
    """A variable (a weight: role ``weight`` in the sim graph), made by :func:`variable`."""

    def __init__(self, *args, data=None, replica_grouping=None, retrieval_mode="one_per_group", **kw):
        super().__init__(*args, **kw)
        self._data = data
        self.replica_grouping = replica_grouping
        self.retrieval_mode = retrieval_mode

    @property
    def shape_on_host(self) -> tuple[int, ...]:
        rg = self.replica_grouping
        if rg is not None and rg.num_groups > 1:
            return (rg.num_groups,) + self.shape
        return self.shape

    @property
    def shape_on_replica(self) -> tuple[int, ...]:
        """The shape on one replica: the host shape without its leading group axis (PopXL's)."""
        return self.shape


class Constant(Tensor):
    """A constant (role ``constant`` in the sim graph), made by :func:`constant`."""

    def __init__(self, *args, data=None, **kw):
        super().__init__(*args, **kw)
        self._data = data


class GradTensor(Tensor):
    """A gradient handed out by a call of an autodiff grad graph.

    It has no tensor in the sim graph: the backward pass is the simulator's training expansion
    (``sim/graph/training.py``). Only ``ops.var_updates`` (and ``ops.scaled_add_``) accept it, and they
    are then taken as the simulator's optimizer update.
    """

    def __init__(self, graph, shape, dtype, of: Tensor | None, label: str, collectives: tuple = ()):
        super().__init__(graph, None, shape, dtype)
        self._grad_of = of
        self._label = label
        #: the collectives applied to it so far: ((kind, group stride, group size, bytes), ...)
        self._collectives = collectives

    @property
    def id(self) -> str:
        return self._label

    @property
    def name(self) -> str:
        return self._label

    def copy_to_ipu(self, destination: int, source: int | None = None) -> "GradTensor":
        """The same handle: the simulated backward pass copies gradients between IPUs itself."""
        return self

    def __repr__(self) -> str:
        return f"GradTensor[{self._label} {self._dtype.name} {self._shape}]"


# --- making tensors --------------------------------------------------------------------------------

def _shape_and_dtype(data, dtype, downcast: builtins.bool, shape, what: str, tuple_is_shape: builtins.bool = True,
                     log2_scale: int | None = None, nan_on_overflow: builtins.bool | None = None):
    """(shape, popxl dtype, data or None) for ``variable``/``constant`` arguments; a tuple of ints
    is a shape where ``tuple_is_shape`` (``variable``'s convenience), else data as in PopXL. FP8 data
    given as floats is converted as PopXL's ``to_numpy`` converts it (``log2_scale``, ``nan_on_overflow``),
    so ``session.get_tensor_data`` returns PopXL's bytes; those two arguments with another dtype are
    PopXL's ``RuntimeError``."""
    if isinstance(data, TensorSpec):
        return data.shape, dtype and dtypes.dtype.as_dtype(dtype) or data.dtype, None
    if data is None or (tuple_is_shape and isinstance(data, tuple) and data and all(
            isinstance(d, int) and not isinstance(d, builtins.bool) for d in data)):
        # a shape (a simulator convenience; PopXL would take a tuple as data)
        shp = tuple(shape if data is None else data)
        if data is None and shape is None:
            raise TypeError(f"{what}: give data (a numpy array or a scalar), a TensorSpec, or shape=...")
        return shp, dtypes.dtype.as_dtype(dtype) if dtype is not None else dtypes.float32, None
    if shape is not None:
        raise TypeError(f"{what}: give data or shape=, not both")
    if isinstance(data, np.memmap):  # PopXL's to_numpy: a memory-mapped array is used as it is, never copied
        if dtype is not None and dtypes.dtype.as_dtype(dtype).as_numpy() != data.dtype:
            raise ValueError(f"When passing a memory-mapped NumPy array, the `dtype` parameter must be None or the "
                             f"same as the array's dtype ({what}: {data.dtype}, not {dtypes.dtype.as_dtype(dtype)})")
        if not (data.flags.c_contiguous and data.flags.aligned):
            raise ValueError(f"When passing a memory-mapped NumPy array, it must already be in C-ordered and aligned "
                             f"form ({what}).")
        if data.dtype in (np.float64, np.int64, np.uint64):
            raise ValueError(f"When passing a memory-mapped NumPy array, the dtype {dtype} is not supported, as it "
                             "requires downcasting the array into a new array with a dtype supported by PopXL "
                             f"({what}: {data.dtype}).")
    fp8 = dtype is not None and dtypes.dtype.as_dtype(dtype) in (dtypes.float8_143, dtypes.float8_152)
    if fp8 and np.asarray(data).dtype == np.uint8:
        fp8 = False  # FP8 bytes as they are (a simulator convenience; PopXL takes its structured FP8 arrays only)
    if fp8 or log2_scale is not None or nan_on_overflow is not None:
        from .utils import to_numpy  # (utils imports this module's dtypes only; here to keep imports one way)
        data = to_numpy(data, dtype, downcast, copy=False, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    arr = np.asarray(data)
    if dtype is None:
        if arr.dtype in (np.float64, np.int64, np.uint64) and not downcast:
            raise TypeError(f"{what}: 64-bit data ({arr.dtype}) with downcast=False: the IPU has no "
                            "64-bit types; pass a 32-bit array or a dtype")
        dt = dtypes.dtype.as_dtype(arr.dtype).downcast()
    else:
        dt = dtypes.dtype.as_dtype(dtype).downcast()
    return tuple(arr.shape), dt, data


def variable(data=None, dtype=None, name: str | None = None, downcast: builtins.bool = True,
             replica_grouping: ReplicaGrouping | None = None,
             retrieval_mode: str | None = "one_per_group", log2_scale: int | None = None,
             nan_on_overflow: builtins.bool | None = None, *, shape=None) -> Variable:
    """A variable of the main graph (a weight of the simulated model).

    ``data`` is a numpy array or scalar (its shape and dtype are used; with a ``replica_grouping``
    of several groups its first dimension is the group), a :class:`TensorSpec`, or - a simulator
    convenience - a tuple of ints taken as the shape (``shape=`` says the same explicitly).
    """
    g = get_current_context().graph
    g._check_open()
    if not g._main:
        raise GraphContextError(f"popxl.variable({name!r}): variables can only be created in the main graph "
                         f"(not in subgraph {g.name!r}); create it in `with ir.main_graph:` and pass it "
                         "to the subgraph as an input")
    shp, dt, arr = _shape_and_dtype(data, dtype, downcast, shape, "popxl.variable", log2_scale=log2_scale,
                                    nan_on_overflow=nan_on_overflow)
    if replica_grouping is not None:
        if arr is not None and replica_grouping.num_groups > 1:
            if not shp or shp[0] != replica_grouping.num_groups:
                raise ValueError(f"popxl.variable({name!r}): with {replica_grouping} the data needs a "
                                 f"leading dimension of num_groups = {replica_grouping.num_groups}, "
                                 f"got shape {shp}")
            shp = shp[1:]
        if replica_grouping.num_groups > 1:  # one group of every replica is the default
            g.ir._note(f"variable {name or 'variable'}: {replica_grouping!r}: accepted, no modelled effect "
                       "(the grouping sets how values are initialised and read)")
    if replica_grouping is None:  # PopXL's default: one group of every replica
        replica_grouping = g.ir.replica_grouping()
    if retrieval_mode not in ("one_per_group", "all_replicas", None):
        raise ValueError(f"popxl.variable: retrieval_mode must be 'one_per_group' or 'all_replicas', "
                         f"got {retrieval_mode!r}")
    sim_name = g._new_tensor(name or "variable", shp, dt, "weight")
    v = Variable(g, sim_name, shp, dt, get_current_context().ipu, data=arr,
                 replica_grouping=replica_grouping, retrieval_mode=retrieval_mode or "one_per_group")
    g._made.append(v)
    return v


def constant(data=None, dtype=None, name: str | None = None, downcast: builtins.bool = True,
             log2_scale: int | None = None, nan_on_overflow: builtins.bool | None = None, *, shape=None) -> Constant:
    """A constant (role ``constant``: always live, never updated). A tuple is data, as in PopXL
    (``shape=`` gives a shape without data). ``log2_scale`` and ``nan_on_overflow`` (FP8 data)
    change values only."""
    g = get_current_context().graph
    g._check_open()
    shp, dt, arr = _shape_and_dtype(data, dtype, downcast, shape, "popxl.constant", tuple_is_shape=False,
                                    log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    sim_name = g._new_tensor(name or "constant", shp, dt, "constant")
    c = Constant(g, sim_name, shp, dt, get_current_context().ipu, data=arr)
    g._made.append(c)
    return c


def graph_input(shape, dtype, name: str | None = None, by_ref: builtins.bool = False,
                meta_shape=None) -> Tensor:
    """An input of the subgraph being built (connected at ``ops.call``/``ops.repeat``)."""
    g = get_current_context().graph
    if g._main:
        raise PopXLError("popxl.graph_input: the main graph has no inputs; use it inside a function "
                         "given to ir.create_graph (host data comes in with ops.host_load)")
    dt = dtypes.dtype.as_dtype(dtype)
    t = Tensor(g, g._new_tensor(name or "input", tuple(shape), dt, "input"), tuple(shape), dt,
               get_current_context().ipu)
    t._meta_shape = tuple(meta_shape or ())
    g._inputs.append(t)
    return t


def graph_output(t: Tensor) -> None:
    """Mark ``t`` as an output of the subgraph being built."""
    g = get_current_context().graph
    if g._main:
        raise PopXLError("popxl.graph_output: the main graph has no outputs; send tensors to the host "
                         "with ops.host_store")
    g._own(t, "popxl.graph_output")
    g._outputs.append(t)
