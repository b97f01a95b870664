"""The ops of ``popxl.ops`` other than its collectives and variable updates.

Each op checks its inputs (they must be tensors of the graph being built; shapes must agree)
and adds the matching op of the simulator's graph, whose cost model prices it. Names,
signatures and defaults follow PopXL; arguments that change numerics only (seeds, partials
types, reduction kinds) are accepted and have no effect on the simulated time.
:mod:`sim.popxl.ops` re-exports them; :mod:`sim.popxl.ops.var_updates` builds on
``_as_tensor`` and ``_inplace``.
"""

from __future__ import annotations

import builtins
import math
import numbers
from collections.abc import Iterable, Sequence

import numpy as np

from ...errors import GraphError
from ...graph.ir import spatial_attr, transposed_conv_attrs, undilated_padding
from .. import dtypes, transforms
from ..context import get_current_context
from ..errors import ForeignTensorError, NotModelledError
from ..graph import Graph
from ..streams import DeviceToHostStream, HostToDeviceStream
from ..tensor import Constant, GradTensor, Tensor


def _graph(where: str, *tensors) -> Graph:
    """The graph being built, after checking that ``tensors`` belong to it."""
    g = get_current_context().graph
    for t in tensors:
        g._own(t, where)
    return g


def _as_tensor(g: Graph, x, like: Tensor, where: str) -> Tensor:
    """``x`` as a tensor of ``g``: a tensor as is, a Python/numpy scalar as a constant."""
    if isinstance(x, Tensor):
        return g._own(x, where)
    if isinstance(x, (numbers.Number, np.generic)) or (isinstance(x, np.ndarray) and x.ndim == 0):
        name = g._new_tensor("scalar", (), like.dtype, "constant")
        return Tensor(g, name, (), like.dtype, get_current_context().ipu)
    if isinstance(x, np.ndarray):
        name = g._new_tensor("constant", x.shape, like.dtype, "constant")
        return Tensor(g, name, x.shape, like.dtype, get_current_context().ipu)
    raise TypeError(f"{where}: expected a popxl Tensor or a number, got {type(x).__name__}")


def _name(g: Graph, base: str) -> str:
    return g._scoped(base)


def _out(g: Graph, sim_name: str, dtype: dtypes.dtype | None = None) -> Tensor:
    return g._wrap(sim_name, dtype)


# --- host IO ----------------------------------------------------------------------------------

def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """The next value of ``h2d_stream``: an input of the simulated graph (one host stream copy
    per host transfer)."""
    if not isinstance(h2d_stream, HostToDeviceStream):
        raise TypeError(f"ops.host_load expects a popxl.HostToDeviceStream (popxl.h2d_stream), got "
                        f"{h2d_stream!r}")
    g = _graph("ops.host_load")
    _own_stream(g, h2d_stream, "ops.host_load")
    return _out(g, g._host_load(h2d_stream, name), h2d_stream.dtype)


def _own_stream(g: Graph, stream, where: str) -> None:
    """PopXL's ``check_in_graph`` of a stream: one made in another Ir is a ``ValueError``."""
    if stream._ir is not None and stream._ir is not g.ir:
        raise ForeignTensorError(f"{where}: stream {stream.name!r} was made in another Ir ({stream._ir}) than "
                                 f"{g.ir}; make the stream in this Ir's main graph")


def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Send ``t`` to the host: an output of the simulated graph."""
    if not isinstance(d2h_stream, DeviceToHostStream):
        raise TypeError(f"ops.host_store expects a popxl.DeviceToHostStream (popxl.d2h_stream), got "
                        f"{d2h_stream!r}")
    g = _graph("ops.host_store", t)
    _own_stream(g, d2h_stream, "ops.host_store")
    if t.shape != d2h_stream.shape or t.dtype != d2h_stream.dtype:
        raise ValueError(f"ops.host_store: tensor {t.id!r} ({t.dtype.name} {t.shape}) does not match stream "
                         f"{d2h_stream.name!r} ({d2h_stream.dtype.name} {d2h_stream.shape})")
    g._host_store(d2h_stream, t._sim)


# --- dense algebra ----------------------------------------------------------------------------

#: PopXL's FP8 dtypes
_FP8 = (dtypes.float8_143, dtypes.float8_152)


def matmul(lhs: Tensor, rhs: Tensor, available_memory_proportion: float | None = None,
           output_type=None, partials_type=None, *, serialise_mode=None, serialise_factor: int = 1) -> Tensor:
    """``lhs @ rhs`` with numpy's rules (1-D operands and broadcast batch dimensions); PopXL's
    arguments in its order (``partials_type`` a dtype or ``"float"``/``"half"``), then the
    simulator's own keyword-only ``serialise_mode`` / ``serialise_factor`` (noted, not modelled)."""
    _refuse_unscaled_fp8("matmul", "MatMulOp", lhs, rhs)
    return _matmul("ops.matmul", lhs, rhs, available_memory_proportion, serialise_mode, serialise_factor,
                   output_type, _partials(partials_type))


def _partials(partials_type) -> str | None:
    """``"float"`` / ``"half"`` (or None) from a PopXL dtype or a string."""
    if partials_type is None or partials_type in ("float", "half"):
        return partials_type
    dt = dtypes.dtype.as_dtype(partials_type)
    if dt not in (dtypes.float32, dtypes.float16):
        raise TypeError(f"ops.matmul: partials_type must be popxl.float32 or popxl.float16, got {dt.name}")
    return "float" if dt == dtypes.float32 else "half"


def matmul_pow2scaled(lhs: Tensor, rhs: Tensor, log2_scale: Tensor,
                      available_memory_proportion: float | None = None) -> Tensor:
    """``(lhs @ rhs) * 2**log2_scale`` of FP8 operands (``popxl.float8_143`` / ``float8_152``) into
    float16, with half partials as PopXL sets them: the quarter AMP of an IPU with FP8 (the
    ``c600`` system). The scale is applied by the vertex and costs nothing extra."""
    if lhs.dtype not in _FP8 or rhs.dtype not in _FP8:
        raise TypeError("Scaled matmul operands must be of dtype popxl.float8_143 or popxl.float8_152")
    _check_log2_scale(log2_scale)
    _graph("ops.matmul_pow2scaled", lhs, rhs, log2_scale)
    return _matmul("ops.matmul_pow2scaled", lhs, rhs, available_memory_proportion, None, 1, None, "half")


def pow2scale_cast_to_fp8(t: Tensor, log2_scale: Tensor, data_type) -> Tensor:
    """``cast(t * 2**log2_scale, data_type)`` to FP8: one cast, as fast as half to float (poplibs
    popops PerformanceEstimation.cpp: "casting quarter to/from half performs the same")."""
    dt = dtypes.dtype.as_dtype(data_type)
    if dt not in _FP8:
        raise TypeError(f"Data type {dt} not supported for pow2scale_cast_to_fp8")
    _check_log2_scale(log2_scale)
    _graph("ops.pow2scale_cast_to_fp8", t, log2_scale)
    return cast(t, dt)


def pow2scale_cast_from_fp8(t: Tensor, log2_scale: Tensor, data_type) -> Tensor:
    """``cast(t, data_type) * 2**log2_scale`` from FP8 to float16 or float32: one cast."""
    dt = dtypes.dtype.as_dtype(data_type)
    if dt not in (dtypes.float16, dtypes.float32):
        raise TypeError(f"Data type {dt} not supported for pow2scale_cast_from_fp8")
    _check_log2_scale(log2_scale)
    _graph("ops.pow2scale_cast_from_fp8", t, log2_scale)
    return cast(t, dt)



def _refuse_unscaled_fp8(op: str, popart_op: str, a: Tensor, b: Tensor) -> None:
    """PopART's refusal of FP8 operands without a log2 scale (float8util.cpp), naming the scaled op."""
    if a.dtype in _FP8 or b.dtype in _FP8:
        raise TypeError(f"ops.{op}: FP8 operands ({a.dtype.name}, {b.dtype.name}): a log2 scale input tensor must "
                        f"be provided for FLOAT8 input types (PopART's {popart_op}, float8util.cpp): use "
                        f"ops.{op}_pow2scaled")


def _check_log2_scale(log2_scale: Tensor) -> None:
    """PopXL's checks of an FP8 op's log2 scale (ops/cast.py _check_float8_cast_log2scale_properties)."""
    if log2_scale.rank > 0:
        raise ValueError("Log2 scale argument must be a scalar tensor")
    if log2_scale.dtype != dtypes.int32:
        raise TypeError("Log2 scale tensor must be of type popxl.int32")


def _checked_proportion(where: str, proportion: float | None) -> float | None:
    """An op's own availableMemoryProportion (PopART's per-op setting), checked; None: the default."""
    if proportion is not None and not 0 < proportion <= 1:
        raise ValueError(f"{where}: available_memory_proportion must be in (0, 1], got {proportion}")
    return None if proportion is None else float(proportion)


def _set_proportion(g: Graph, proportion: float | None) -> None:
    """The op just added to ``g`` plans within ``proportion`` of a tile (:func:`_checked_proportion`)."""
    if proportion is not None:
        g.sim_graph.ops[-1].attrs["available_memory_proportion"] = proportion


def _matmul(where: str, lhs: Tensor, rhs: Tensor, available_memory_proportion, serialise_mode,
            serialise_factor, output_type, partials_type: str | None = None) -> Tensor:
    g = _graph(where, lhs, rhs)
    if lhs.dtype != rhs.dtype:
        raise GraphError(f"{where}: operands have different dtypes ({lhs.dtype.name} @ {rhs.dtype.name}); "
                         "cast one of them with ops.cast")
    available_memory_proportion = _checked_proportion(where, available_memory_proportion)
    if serialise_factor not in (1, None) or serialise_mode not in (None, "none"):
        g.ir._note(f"{where} serialisation: accepted, no modelled effect")
    a, b = lhs, rhs
    if a.rank == 1:
        a = reshape(a, (1, a.shape[0]))
    if b.rank == 1:
        b = reshape(b, (b.shape[0], 1))
    with g._building() as bld:
        out = bld.matmul(a._sim, b._sim, name=_name(g, "matmul"), partials_type=partials_type)
    _set_proportion(g, available_memory_proportion)
    y = _out(g, out, dtypes.float16 if lhs.dtype in _FP8 else lhs.dtype)  # FP8 gives float16
    if lhs.rank == 1 or rhs.rank == 1:
        shape = list(y.shape)
        if rhs.rank == 1:
            shape.pop(-1)
        if lhs.rank == 1:
            shape.pop(-1 if rhs.rank == 1 else -2)
        y = reshape(y, shape)  # two vectors: a scalar, as numpy (PopART's MatMulOp::npMatMulOut)
    if output_type is not None and dtypes.dtype.as_dtype(output_type) != lhs.dtype:
        dt = dtypes.dtype.as_dtype(output_type)
        g.sim_graph.tensors[y._sim].dtype = dt.sim_name  # priced at the operands' dtype, stored as dt
        y._dtype = dt
    return y


def _binary(kind: str, lhs, rhs) -> Tensor:
    where = f"ops.{kind}"
    like = lhs if isinstance(lhs, Tensor) else rhs
    if not isinstance(like, Tensor):
        raise TypeError(f"{where}: at least one operand must be a popxl Tensor")
    g = _graph(where)
    if kind == "mul":
        scaled = _times_scalar(g, lhs, rhs, where)
        if scaled is not None:
            return scaled
    a, b = _as_tensor(g, lhs, like, where), _as_tensor(g, rhs, like, where)
    if a.dtype != b.dtype:  # PopART's element-wise ops need one dtype (a Python number takes the tensor's)
        raise TypeError(f"{where}: operands of different dtypes ({a.dtype.name}, {b.dtype.name}); cast one "
                        "with ops.cast")
    with g._building() as bld:
        out = getattr(bld, kind)(a._sim, b._sim, name=_name(g, kind))
    return _out(g, out, like.dtype)


def _scalar_factor(x, like: Tensor) -> float | None:
    """The value of ``x`` when it is one number: a Python or numpy scalar, or a one-element
    ``popxl.constant`` of ``like``'s dtype and no higher rank (so the product keeps ``like``'s shape)."""
    if isinstance(x, Constant):
        data = x._data
        if data is None or x.dtype != like.dtype or x.nelms != 1 or x.rank > like.rank:
            return None
        return float(np.asarray(data).reshape(-1)[0])
    if isinstance(x, Tensor) or isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (numbers.Real, np.integer, np.floating)) or (isinstance(x, np.ndarray) and x.ndim == 0
                                                                   and x.dtype.kind in "iuf"):
        return float(x)
    return None


def _times_scalar(g: Graph, lhs, rhs, where: str) -> Tensor | None:
    """``tensor * number`` (``x * 0.5``, ``ops.mul(x, popxl.constant(0.5))``) as one ``scale``, else None.

    PopXL makes the number a constant of the tensor's dtype and a MulOp (python/popxl/tensor.py ``__mul__``,
    ops/mul.py); PopART's MulOpx runs popops' MULTIPLY of the tensor by that one-element constant
    (popx/op/mulx.cpp), the same popops call as ScaleOpx's (popx/op/scalex.cpp: MULTIPLY by a one-element
    constant). sim.onnx prices ONNX's Mul by a constant scalar and sim.poptorch ``x * 0.5`` as that one scale."""
    for t, other in ((lhs, rhs), (rhs, lhs)):
        factor = _scalar_factor(other, t) if isinstance(t, Tensor) else None
        if factor is not None:
            g._own(t, where)
            if isinstance(other, Tensor):
                g._own(other, where)
            with g._building() as bld:
                return _out(g, bld.scale(t._sim, factor, name=_name(g, "mul")), t.dtype)
    return None


def add(lhs: Tensor, rhs: Tensor) -> Tensor:
    return _binary("add", lhs, rhs)


def sub(lhs: Tensor, rhs: Tensor) -> Tensor:
    return _binary("sub", lhs, rhs)


def mul(lhs: Tensor, rhs: Tensor) -> Tensor:
    return _binary("mul", lhs, rhs)


def div(lhs: Tensor, rhs: Tensor) -> Tensor:
    return _binary("div", lhs, rhs)


def _inplace(kind: str, target: Tensor, others: Sequence, where: str, attrs: dict | None = None) -> Tensor:
    """``kind`` writing ``target`` in place (its value changes, its tensor stays)."""
    g = _graph(where, target)
    ins = [_as_tensor(g, x, target, where) for x in others]
    for x in ins:
        if math.prod(x.shape) > target.nelms:
            raise GraphError(f"{where}: {x.id!r} {x.shape} does not broadcast into {target.id!r} {target.shape}")
    g._add_op(kind, [target._sim] + [x._sim for x in ins], [target._sim], attrs, name=kind)
    return target


def add_(lhs: Tensor, rhs) -> Tensor:
    """``lhs += rhs`` in place."""
    return _inplace("add", lhs, [rhs], "ops.add_")


def scaled_add(X: Tensor, Y: Tensor, a: float = 1.0, b: float = 1.0) -> Tensor:
    """``a * X + b * Y``."""
    return _binary("add", X, Y)


def scaled_add_(X: Tensor, Y, a: float = 1.0, b: float = 1.0) -> Tensor:
    """``X = a * X + b * Y`` in place; with an autodiff gradient ``Y`` (or an accumulator of one) it is
    the optimizer update."""
    if transforms.from_gradient(Y):
        return transforms._gradient_update("scaled_add_", X, Y)
    return _inplace("add", X, [Y], "ops.scaled_add_", {"a": a, "b": b})


def negate(t: Tensor) -> Tensor:
    g = _graph("ops.negate", t)
    with g._building() as bld:
        return _out(g, bld.scale(t._sim, -1.0, name=_name(g, "negate")), t.dtype)


# --- element-wise -----------------------------------------------------------------------------

def _unary(kind: str, t: Tensor, **attrs) -> Tensor:
    g = _graph(f"ops.{kind}", t)
    with g._building() as bld:
        return _out(g, bld.unary(kind, t._sim, name=_name(g, kind), **attrs), t.dtype)


def relu(t: Tensor) -> Tensor:
    return _unary("relu", t, in_place=False)


def gelu(t: Tensor) -> Tensor:
    return _unary("gelu", t, in_place=False)


def tanh(t: Tensor) -> Tensor:
    return _unary("tanh", t)


def sigmoid(t: Tensor) -> Tensor:
    return _unary("sigmoid", t, in_place=False)


def exp(t: Tensor) -> Tensor:
    return _unary("exp", t)


def sqrt(t: Tensor) -> Tensor:
    """Element-wise square root (popops UnaryOp SQRT, as the cost model prices it for PopTorch)."""
    return _unary("sqrt", t)


def dropout(t: Tensor, seed_tensor: Tensor | None = None, p: float = 0.5, mask: bool = False) -> Tensor:
    """Dropout with probability ``p`` (the seed only changes numerics)."""
    if not 0 <= p < 1:
        raise ValueError(f"ops.dropout: p must be in [0, 1), got {p!r}")
    g = _graph("ops.dropout", t)
    with g._building() as bld:  # PopXL has no inference mode: the op the program has always runs
        out = bld.dropout(t._sim, p, name=_name(g, "dropout"))
    g.sim_graph.ops[-1].attrs["explicit"] = True
    return _out(g, out, t.dtype)


def cast(t: Tensor, data_type) -> Tensor:
    dt = dtypes.dtype.as_dtype(data_type)
    g = _graph("ops.cast", t)
    with g._building() as bld:
        return _out(g, bld.cast(t._sim, dt.sim_name, name=_name(g, "cast")), dt)


# --- normalisations and reductions ------------------------------------------------------------

def softmax(t: Tensor, axis: int) -> Tensor:
    g = _graph("ops.softmax", t)
    if not -t.rank <= axis < t.rank:
        raise ValueError(f"ops.softmax: axis {axis} is out of range for a tensor of rank {t.rank}")
    with g._building() as bld:
        return _out(g, bld.softmax(t._sim, axis, name=_name(g, "softmax"), in_place=False), t.dtype)


def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-05, *, epsilon: float | None = None) -> Tensor:
    """Normalise over the last dimension, then scale by ``weight`` and shift by ``bias`` (PopXL's
    ``eps``; ``epsilon``, this front end's earlier name, still works)."""
    epsilon = eps if epsilon is None else epsilon
    g = _graph("ops.layer_norm", t, weight, bias)
    h = t.shape[-1]
    for p in (weight, bias):
        if p.nelms != h:
            raise GraphError(f"ops.layer_norm: {p.id!r} has shape {p.shape}, expected ({h},) for input "
                             f"{t.id!r} {t.shape}")
    with g._building() as bld:
        out = bld.op("layernorm", [t._sim, weight._sim, bias._sim], [t.shape], {"eps": epsilon},
                     name=_name(g, "layer_norm"))[0]
    return _out(g, out, t.dtype)


def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-05) -> Tensor:
    """Group normalisation of (N, C, ...): priced as a layer norm over the (N x groups) rows of
    C / groups x spatial elements (the same statistics and normalise passes)."""
    g = _graph("ops.group_norm", t, weight, bias)
    if t.rank < 2:
        raise GraphError(f"ops.group_norm: input {t.id!r} {t.shape} needs a channel dimension (N, C, ...)")
    n, c = t.shape[0], t.shape[1]
    if num_groups < 1 or c % num_groups:
        raise GraphError(f"ops.group_norm: {c} channels do not split into {num_groups} groups")
    for p in (weight, bias):
        if p.nelms != c:
            raise GraphError(f"ops.group_norm: {p.id!r} has shape {p.shape}, expected ({c},)")
    rows = reshape(t, (n * num_groups, t.nelms // (n * num_groups)))
    with g._building() as bld:
        out = bld.op("layernorm", [rows._sim, weight._sim, bias._sim], [rows.shape],
                     {"eps": eps, "groups": num_groups}, name=_name(g, "group_norm"))[0]
    return reshape(_out(g, out, t.dtype), t.shape)


def _axes(t: Tensor, axis) -> list[int]:
    if axis is None:
        return list(range(t.rank))
    axes = [axis] if isinstance(axis, int) else list(axis)
    for a in axes:
        if not -t.rank <= a < t.rank:
            raise ValueError(f"axis {a} is out of range for a tensor of rank {t.rank}")
    return sorted({a % t.rank for a in axes})


def _reduce(kind: str, t: Tensor, axis, keepdims: bool, where: str, **attrs) -> Tensor:
    g = _graph(where, t)
    axes = _axes(t, axis)
    with g._building() as bld:
        out = _out(g, bld.reduce(t._sim, axes, kind, keepdims, name=_name(g, kind), **attrs), t.dtype)
    if not keepdims and len(axes) == t.rank and out.shape != ():
        out = reshape(out, ())  # PopXL: a reduction over every axis is a scalar
    return out


def sum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum over ``axis`` (every axis when None)."""
    return _reduce("reduce_sum", t, axis, keepdims, "ops.sum")


def mean(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("reduce_mean", t, axis, keepdims, "ops.mean")


def max(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("reduce_max", t, axis, keepdims, "ops.max")


reduce_sum = sum
reduce_mean = mean


# --- data movement ----------------------------------------------------------------------------

def reshape(t: Tensor, shape: Iterable[int]) -> Tensor:
    """``t`` with a new shape (one dimension may be -1). A view: no data moves."""
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise ValueError(f"ops.reshape: at most one dimension can be -1, got {shape}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or t.nelms % known:
            raise GraphError(f"ops.reshape: cannot reshape {t.shape} into {shape}")
        shape[shape.index(-1)] = t.nelms // known
    g = _graph("ops.reshape", t)
    with g._building() as bld:
        return _out(g, bld.reshape(t._sim, shape, name=_name(g, "reshape")), t.dtype)


def flatten(t: Tensor) -> Tensor:
    return reshape(t, (-1,))


def transpose(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """``t`` with its dimensions permuted (reversed when no permutation is given)."""
    perm = list(reversed(range(t.rank))) if permutation is None else [int(p) % builtins.max(t.rank, 1) for p in permutation]
    if sorted(perm) != list(range(t.rank)):
        raise ValueError(f"ops.transpose: {list(permutation)} is not a permutation of {t.rank} axes")
    g = _graph("ops.transpose", t)
    with g._building() as bld:
        return _out(g, bld.transpose(t._sim, perm, name=_name(g, "transpose")), t.dtype)


def concat(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    ts = list(ts)
    if not ts:
        raise ValueError("ops.concat needs at least one tensor")
    g = _graph("ops.concat", *ts)
    rank = ts[0].rank
    ax = axis % rank
    for t in ts[1:]:
        if t.rank != rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != ax):
            raise GraphError(f"ops.concat: shapes {[x.shape for x in ts]} differ outside axis {axis}")
        if t.dtype != ts[0].dtype:
            raise TypeError(f"All inputs to a concat operation must have the same type: "
                            f"{[x.dtype.name for x in ts]} (ops.concat: tensors of different dtypes; cast them to one "
                            "with ops.cast)")
    with g._building() as bld:
        return _out(g, bld.concat([t._sim for t in ts], ax, name=_name(g, "concat")), ts[0].dtype)


def split(t: Tensor, splits, axis: int = 0) -> list[Tensor]:
    """``t`` cut along ``axis`` into ``splits`` equal parts (an int) or parts of the given lengths,
    as PopXL's ``ops.split``: slices, views of ``t`` that move no data."""
    axis = axis + t.rank if axis < 0 else axis
    if not 0 <= axis < t.rank:
        raise ValueError(f"ops.split: axis {axis} is out of range for a tensor of rank {t.rank}")
    size = t.shape[axis]
    if isinstance(splits, int):
        if splits < 1 or size % splits:
            raise ValueError(f"ops.split: {splits} equal parts do not divide axis {axis} of length {size}")
        splits = [size // splits] * splits
    splits = [int(n) for n in splits]
    if builtins.sum(splits) != size or builtins.min(splits) < 1:
        raise ValueError(f"ops.split: lengths {splits} do not add up to axis {axis} of length {size}")
    starts = np.cumsum([0] + splits[:-1])
    return [slice(t, int(a), int(a) + n, 1, axis) for a, n in zip(starts, splits)]


def slice(t: Tensor, start=None, stop=None, step=None, axis=None) -> Tensor:
    """A strided slice over one or more axes (numpy's rules for each)."""
    def as_list(v):
        return None if v is None else ([v] if isinstance(v, int) else list(v))
    start, stop, step, axis = map(as_list, (start, stop, step, axis))
    n = len(next((v for v in (start, stop, step, axis) if v is not None), []))
    axes = [a % t.rank for a in axis] if axis is not None else list(range(n))
    start = start or [None] * n
    stop = stop or [None] * n
    step = step or [1] * n
    if not len(axes) == len(start) == len(stop) == len(step):
        raise ValueError("ops.slice: start, stop, step and axis must have the same length")
    shape = list(t.shape)
    spec = []
    for a, s0, s1, st in zip(axes, start, stop, step):
        lo, hi, stp = builtins.slice(s0, s1, st).indices(t.shape[a])
        shape[a] = len(range(lo, hi, stp))
        if shape[a] <= 0:
            raise GraphError(f"ops.slice: the slice {s0}:{s1}:{st} of axis {a} of {t.shape} is empty")
        spec.append((a, lo, hi, stp))
    g = _graph("ops.slice", t)
    with g._building() as bld:
        out = bld.op("slice", [t._sim], [shape], {"slices": spec}, name=_name(g, "slice"))[0]
    return _out(g, out, t.dtype)


def conv(t: Tensor, weight: Tensor, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
         pad_type: str = "not_set", available_memory_proportions: list[float] | None = None,
         partials_types: list[str] | None = None, enable_conv_dithering: list[int] | None = None) -> Tensor:
    """2-D convolution of NCHW ``t`` with ``weight`` (C_out, C_in / groups, kH, kW).

    The cost model takes one stride for both axes and the same padding before and after each axis
    (``padding`` = (h_begin, w_begin, h_end, w_end)); the kernel may be kH x kW; a dilated kernel is
    priced as the undilated one with the padding that keeps the output field (the run's notes say so).
    ``partials_types`` (PopXL's one entry per convolution: ``["half"]`` or ``["float"]``) sets the
    partials as ``Precision.setPartialsType`` does for the whole model; ``available_memory_proportions``
    (one entry) the convolution's own proportion."""
    _refuse_unscaled_fp8("conv", "ConvOp", t, weight)
    partials = _conv_partials("ops.conv", partials_types)
    return _conv("ops.conv", t, weight, stride, padding, dilation, groups, pad_type, available_memory_proportions,
                 enable_conv_dithering, partials)


def conv_pow2scaled(t: Tensor, weight: Tensor, log2_scale: Tensor, stride=(1, 1), padding=(0, 0, 0, 0),
                    dilation=(1, 1), groups: int = 1, pad_type: str = "not_set",
                    available_memory_proportions: list[float] | None = None,
                    enable_conv_dithering: list[int] | None = None) -> Tensor:
    """:func:`conv` of FP8 operands scaled by ``2**log2_scale`` into float16, with half partials as
    PopXL sets them (ops/conv.py): the quarter AMP of an IPU with FP8 (the ``c600`` system); the
    scale is applied by the vertex and costs nothing extra."""
    if t.dtype not in _FP8 or weight.dtype not in _FP8:
        raise TypeError("Scaled conv operands must be of dtype popxl.float8_143 or popxl.float8_152")
    _check_log2_scale(log2_scale)
    _graph("ops.conv_pow2scaled", t, weight, log2_scale)
    return _conv("ops.conv_pow2scaled", t, weight, stride, padding, dilation, groups, pad_type,
                 available_memory_proportions, enable_conv_dithering, "half")


def _conv_partials(where: str, partials_types) -> str | None:
    """PopXL's one partials type per convolution: ``["half"]`` or ``["float"]`` (None: the run's)."""
    if partials_types is None:
        return None
    if len(partials_types) != 1 or partials_types[0] not in ("float", "half"):
        raise ValueError(f"{where}: partials_types {partials_types!r}: expected one entry, 'float' or 'half'")
    return partials_types[0]


def _conv_graph(where: str, t: Tensor, weight: Tensor, what: str) -> Graph:
    """The graph a 2-D convolution of ``t`` and ``weight`` goes into (others are refused by name)."""
    g = _graph(where, t, weight)
    if t.rank != 4 or weight.rank != 4:
        raise NotModelledError(f"{where}: only 2-D {what} (NCHW input, 4-D weight) are modelled")
    return g


def _conv(where: str, t: Tensor, weight: Tensor, stride, padding, dilation, groups: int, pad_type: str,
          available_memory_proportions, enable_conv_dithering, partials: str | None) -> Tensor:
    g = _conv_graph(where, t, weight, "convolutions")
    n, c, h, w = t.shape
    co, cig, kh, kw = weight.shape
    stride, dilation, padding = tuple(stride), tuple(dilation), tuple(padding)
    if len(set(stride)) != 1 or len(padding) != 4 or padding[:2] != padding[2:] or len(dilation) != 2:
        raise NotModelledError(
            f"{where}: stride {stride}, padding {padding}, dilation {dilation}: the cost model takes one stride "
            "for both axes and the same padding before and after each axis")
    if min(dilation) < 1:
        raise ValueError(f"{where}: dilation {dilation}: each must be a whole number >= 1")
    if pad_type not in ("not_set", "valid"):
        raise NotModelledError(f"{where}(pad_type={pad_type!r}): give the padding explicitly")
    if c % groups or co % groups or cig != c // groups:
        raise GraphError(f"{where}: input {t.shape} and weight {weight.shape} do not match for {groups} group(s)")
    s, (ph, pw), (dh, dw) = stride[0], padding[:2], dilation
    ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // s + 1, (w + 2 * pw - dw * (kw - 1) - 1) // s + 1
    if ho <= 0 or wo <= 0:
        raise GraphError(f"{where}: kernel {kh}x{kw} (dilation {dh}x{dw}) is too large for input {h}x{w}")
    attrs = {"kernel": spatial_attr((kh, kw)), "stride": s, "padding": spatial_attr((ph, pw)), "groups": groups}
    if (dh, dw) != (1, 1):  # priced as the undilated kernel with the padding that keeps the output field
        attrs.update(padding=spatial_attr(undilated_padding((kh, kw), (ph, pw), (dh, dw))),
                     dilation=spatial_attr((dh, dw)))
    return _conv_op(g, where, "conv2d", t, weight, (n, co, ho, wo), attrs, available_memory_proportions,
                    enable_conv_dithering, partials)


def conv_transpose(t: Tensor, weight: Tensor, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
                   pad_type: str = "not_set", output_padding=(), output_shape=(),
                   available_memory_proportions: list[float] | None = None, partials_types: list[str] | None = None,
                   enable_conv_dithering: list[int] | None = None) -> Tensor:
    """2-D transposed convolution of NCHW ``t`` with ``weight`` (C_in, C_out / groups, kH, kW), as
    poplin runs it: the input gradient of the convolution mapping its output back to ``t``
    (:meth:`sim.GraphBuilder.conv_transpose2d`). The output is ONNX ConvTranspose's:
    ``(H - 1) * stride + kH + output_padding`` less the padding, or ``output_shape`` (the padding then
    what it takes). One stride for both axes and no dilation."""
    _refuse_unscaled_fp8("conv_transpose", "ConvTransposeOp", t, weight)
    partials = _conv_partials("ops.conv_transpose", partials_types)
    return _conv_transpose("ops.conv_transpose", t, weight, stride, padding, dilation, groups, pad_type,
                           output_padding, output_shape, available_memory_proportions, enable_conv_dithering, partials)


def conv_transpose_pow2scaled(t: Tensor, weight: Tensor, log2_scale: Tensor, stride=(1, 1), padding=(0, 0, 0, 0),
                              dilation=(1, 1), groups: int = 1, pad_type: str = "not_set", output_padding=(),
                              output_shape=(), available_memory_proportions: list[float] | None = None,
                              enable_conv_dithering: list[int] | None = None) -> Tensor:
    """:func:`conv_transpose` of FP8 operands scaled by ``2**log2_scale`` into float16, half partials
    (the quarter AMP of an IPU with FP8), as :func:`conv_pow2scaled`."""
    if t.dtype not in _FP8 or weight.dtype not in _FP8:
        raise TypeError("Scaled conv operands must be of dtype popxl.float8_143 or popxl.float8_152")
    _check_log2_scale(log2_scale)
    _graph("ops.conv_transpose_pow2scaled", t, weight, log2_scale)
    return _conv_transpose("ops.conv_transpose_pow2scaled", t, weight, stride, padding, dilation, groups, pad_type,
                           output_padding, output_shape, available_memory_proportions, enable_conv_dithering, "half")


def _conv_transpose(where: str, t: Tensor, weight: Tensor, stride, padding, dilation, groups: int, pad_type: str,
                    output_padding, output_shape, available_memory_proportions, enable_conv_dithering,
                    partials: str | None) -> Tensor:
    g = _conv_graph(where, t, weight, "transposed convolutions")
    n, c, h, w = t.shape
    ci, cog, kh, kw = weight.shape
    stride, padding, dilation = tuple(stride), tuple(padding), tuple(dilation)
    if len(set(stride)) != 1 or len(padding) != 4 or any(d != 1 for d in dilation):
        raise NotModelledError(f"{where}: stride {stride}, dilation {dilation}: the cost model takes one stride for "
                               "both axes and no dilation")
    if ci != c or c % groups:
        raise GraphError(f"{where}: input {t.shape} and weight {weight.shape} do not match for {groups} group(s)")
    if pad_type not in ("not_set", "valid"):
        raise NotModelledError(f"{where}(pad_type={pad_type!r}): give the padding or the output shape explicitly")
    s, extra = stride[0], list(output_padding) or [0, 0]
    full = [(size - 1) * s + k + e for size, k, e in zip((h, w), (kh, kw), extra)]  # the output before cropping
    if output_shape:
        crops = [f - int(o) for f, o in zip(full, list(output_shape)[-2:])]
    else:
        crops = [0, 0] if pad_type == "valid" else [padding[0] + padding[2], padding[1] + padding[3]]
    if any(x < 0 or e + x % 2 >= s for x, e in zip(crops, extra)):
        raise NotModelledError(f"{where}: an output of {[f - x for f, x in zip(full, crops)]} from {full} leaves an "
                               f"output padding of stride {s} or more, which a transposed convolution does not have")
    out = (n, cog * groups, full[0] - crops[0], full[1] - crops[1])
    if min(out[2:]) <= 0:
        raise GraphError(f"{where}: padding {padding} leaves no output from input {h}x{w}")
    pads = tuple((x + 1) // 2 for x in crops)  # an odd crop: the next even one less an output padding of one
    attrs = transposed_conv_attrs(n, c, out[1], (h, w), (kh, kw), s, pads, groups)
    return _conv_op(g, where, "conv2d_grad_input", t, weight, out, attrs, available_memory_proportions,
                    enable_conv_dithering, partials)


def _conv_op(g: Graph, where: str, kind: str, t: Tensor, weight: Tensor, out_shape: tuple, attrs: dict,
             available_memory_proportions, enable_conv_dithering, partials: str | None) -> Tensor:
    """The convolution op of ``kind`` with PopXL's per-convolution options: its own partials type and
    available-memory proportion (PopART's per-op settings); FP8 operands give float16."""
    if available_memory_proportions is not None:  # PopXL's one entry per convolution of the op
        if len(available_memory_proportions) != 1 or not 0 < available_memory_proportions[0] <= 1:
            raise ValueError(f"{where}: available_memory_proportions {available_memory_proportions!r}: expected one "
                             "entry in (0, 1]")
        attrs["available_memory_proportion"] = float(available_memory_proportions[0])
    if enable_conv_dithering is not None:
        g.ir._note(f"{where}(enable_conv_dithering=...): accepted, no modelled effect (tile balance across "
                   "convolutions is not modelled)")
    if partials:
        attrs["partials_type"] = partials
    out_dtype = dtypes.float16 if t.dtype in _FP8 else t.dtype
    with g._building() as bld:
        y = bld.op(kind, [t._sim, weight._sim], [out_shape], attrs, name=_name(g, where.split(".")[-1]),
                   out_dtypes=[out_dtype.sim_name])[0]
    return _out(g, y, out_dtype)


def init(shape: Iterable[int], dtype, name: str | None = None, init_type: str = "zero",
         meta_shape: Iterable[int] | None = None, replica_grouping=None) -> Tensor:
    """A tensor initialised on the device: in the main graph a constant of the simulated graph; in a
    subgraph (made each call, as gradient accumulators in a phase's graph) the output of a fill of
    the tensor (popops' zeroing, priced as a ``scale`` of each element; ``undef`` is priced the same,
    a small overcount: the simulator has no op that makes a tensor without work) that lives only
    while it is used. ``replica_grouping`` changes nothing here, ``meta_shape`` is kept (the whole
    shape of a replica shard)."""
    g = _graph("ops.init")
    if init_type not in ("zero", "undef"):
        raise ValueError(f"ops.init: init_type must be 'zero' or 'undef', got {init_type!r}")
    dt = dtypes.dtype.as_dtype(dtype)
    shape = tuple(shape)
    if g._main:
        t = Tensor(g, g._new_tensor(name or "init", shape, dt, "constant"), shape, dt, get_current_context().ipu)
    else:
        seed = g._new_tensor(f"{name or 'init'}/value", (), dt, "constant")
        with g._building() as b:
            out = b.op("scale", [seed], [shape], {"broadcast": True}, name=g._scoped(name or "init"))[0]
        t = g._wrap(out, dt)
    t._meta_shape = tuple(meta_shape or ())
    return t


def ipu_copy(t: Tensor, destination: int, source: int | None = None) -> Tensor:
    """``t`` on IPU ``destination``: the simulator inserts the copy between IPUs itself, where an op
    on one IPU reads a tensor made on another."""
    g = _graph("ops.ipu_copy", t)
    if isinstance(destination, bool) or not isinstance(destination, int) or destination < 0:
        raise TypeError(f"ops.ipu_copy: destination must be an IPU index >= 0, got {destination!r}")
    g.ir._note("ops.ipu_copy: the copy between IPUs is the one the simulator inserts where an op reads "
               "a tensor made on another IPU (merged per step, as PopART merges them)")
    copy = Tensor(g, t._sim, t.shape, t.dtype, destination)
    return copy


def detach(t: Tensor) -> Tensor:
    g = _graph("ops.detach", t)
    with g._building() as bld:
        return _out(g, bld.op("detach", [t._sim], [t.shape], name=_name(g, "detach"))[0], t.dtype)


def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    g = _graph("ops.identity", t)
    with g._building() as bld:
        return _out(g, bld.op("identity", [t._sim], [t.shape], name=_name(g, output_name or "identity"))[0], t.dtype)


rename = identity  # PopXL's other name for it (ops/identity.py)


def print_tensor(t: Tensor, title: str | None = None, print_self: bool = True, print_gradient: bool = False,
                 summarise_threshold: int = 1000, edge_items: int = 3, max_line_width: int = 75,
                 digits: int = 8, float_format: str = "auto", separator: str = " ", open_bracket: str = "[",
                 close_bracket: str = "]") -> Tensor:
    """Accepted: the simulator has no values to print (priced as a view)."""
    g = _graph("ops.print_tensor", t)
    g.ir._note("ops.print_tensor: accepted, nothing is printed (the simulator computes no values)")
    return identity(t)


# --- losses (for popxl.transforms.autodiff) ----------------------------------------------------

def _softmax_input(g, probs: str) -> str:
    """The input ``x`` of the softmax over the last axis that made ``probs``, else ``probs``. PopART's
    NlllWithSoftmaxGradDirectOp returns dE/dx for ``probs = softmax(x)`` (probs - onehot), so no
    softmax gradient runs: the simulated loss reads ``x`` and its gradient goes to ``x`` directly (the
    softmax stays, priced as the forward op PopXL runs)."""
    op = g.sim_graph.producer_op(probs)
    if op is None or op.kind != "softmax":
        return probs
    x = op.inputs[0]
    if op.attrs.get("axis", -1) % len(g.sim_graph.tensors[x].shape) != len(g.sim_graph.tensors[x].shape) - 1:
        return probs
    return x


def nll_loss_with_softmax_grad(probs: Tensor, labels: Tensor, loss_grad: float | Tensor = 1,
                               ignore_index: int | None = None, reduction: str = "mean"):
    """(loss, d loss / d probs): the loss of the simulated training (``softmax_cross_entropy`` marked
    ``probabilities``: priced as its negative log-likelihood only, the softmax being the program's own op);
    the gradient is the handle to pass to an autodiff grad graph, or, inside a subgraph (where grad
    graphs run as written), the op computing it. PopXL's order of the last two (SDK 3.x:
    ``ignore_index`` then ``reduction``); the older popart.ir order, a reduction name fourth, is
    taken too."""
    if isinstance(ignore_index, str) and not isinstance(reduction, str):  # popart.ir's (reduction, ignore_index)
        ignore_index, reduction = reduction, ignore_index
    g = _graph("ops.nll_loss_with_softmax_grad", probs, labels)
    if not labels.dtype.is_int:
        raise GraphError(f"ops.nll_loss_with_softmax_grad: labels {labels.id!r} must be integers")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"Not a valid reduction: {reduction}. Must be one of 'mean', 'sum' or 'none'")
    src = probs._sim
    if g._main and not g.ir._explicit_grads:
        src = _softmax_input(g, src)
    with g._building() as bld:
        loss = bld.softmax_cross_entropy(src, labels._sim, name=_name(g, "nll_loss"))
        # PopART's NlllWithSoftmaxGradDirectOpx reads the probabilities: no softmax in the loss, only the NLL part
        # (popx/op/softmaxx.cpp), with its ignored index's masks and its reduction (sim.cost.row_ops.loss_steps);
        # a loss gradient given as a tensor scales as the number does
        lowering = {"probabilities": True, "reduction": reduction} | (
            {} if ignore_index is None else {"ignore_index": int(ignore_index)})
        g.sim_graph.producer_op(loss).attrs.update(lowering)
        g.sim_graph.tensors[loss].dtype = probs.dtype.sim_name  # PopART's NllOp: the loss in the probabilities' type
        if reduction == "none":  # one loss per label (NlllWithSoftmaxGradDirectOp::setup): the loss op's negated
            # row values, copied into the labels' shape
            loss = bld.op("scale", [loss], [tuple(labels.shape)], {"broadcast": True}, name=_name(g, "nll_losses"))[0]
            g.sim_graph.tensors[loss].dtype = probs.dtype.sim_name
    out = _out(g, loss) if reduction == "none" else reshape(_out(g, loss), ())  # PopXL's reduced loss: a scalar
    if g._main and not g.ir._explicit_grads:
        return out, GradTensor(g, probs.shape, probs.dtype, probs, f"d_loss/d_{probs.id}")
    # inside another graph the grad graphs run as written (transforms.autodiff): the gradient as an op
    with g._building() as bld:
        grad = bld.op("softmax_cross_entropy_grad", [probs._sim, labels._sim], [probs.shape], lowering,
                      name=_name(g, "nll_loss_grad"))[0]
    g.sim_graph.ops[-1].forward_of = g.sim_graph.producer_op(loss).name  # a gradient op, run in program order
    return out, _out(g, grad)


# --- calling subgraphs ------------------------------------------------------------------------

class CallSiteInfo:
    """Where a graph was called: the graph, the parent tensors given to it and its outputs."""

    def __init__(self, graph: Graph, parent_inputs: dict, outputs: Sequence[Tensor], parent: Graph | None = None,
                 mapping: dict | None = None):
        self.called_graph = graph
        self._parent_inputs = parent_inputs  # graph input -> parent tensor
        self._outputs = tuple(outputs)
        self._parent = parent  # the calling graph, and what each tensor of the called graph became in it
        self._mapping = dict(mapping or {})

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._outputs

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The parent tensors given to the call, in the order of the graph's inputs."""
        return tuple(self._parent_inputs[t] for t in self.called_graph._inputs if t in self._parent_inputs)

    def set_parent_input_modified(self, subgraph_tensor: Tensor, infer_modified_regions: bool = False) -> None:
        """Accepted: the call writes that parent tensor in place in PopXL; the simulator copies the
        called graph's ops into the caller and prices them the same either way."""
        self.called_graph.ir._note("CallSiteInfo.set_parent_input_modified: accepted, no modelled effect (the "
                                   "called graph's ops are priced the same whether they write in place)")

    def _index(self, idx: int, count: int, what: str) -> int:
        """``idx`` checked against ``count`` (a call's op connects the graph's inputs and outputs in their
        own order, so an index is the same on both sides)."""
        if isinstance(idx, bool) or not isinstance(idx, int) or not -count <= idx < count:
            raise IndexError(f"{what} index {idx!r} out of range: graph {self.called_graph.name!r} has {count}")
        return idx % count

    def graph_to_parent_input_index(self, idx: int) -> int:
        """The call's input index of the called graph's input ``idx`` (PopXL's; the same index here)."""
        return self._index(idx, len(self.called_graph._inputs), "input")

    def parent_to_graph_input_index(self, idx: int) -> int:
        return self._index(idx, len(self.called_graph._inputs), "input")

    def graph_to_parent_output_index(self, idx: int) -> int:
        return self._index(idx, len(self._outputs), "output")

    def parent_to_graph_output_index(self, idx: int) -> int:
        return self._index(idx, len(self._outputs), "output")

    def parent_input(self, idx: int) -> Tensor:
        return self._parent_inputs[self.called_graph._inputs[idx]]

    def parent_output(self, idx: int) -> Tensor:
        return self._outputs[idx]

    def graph_to_parent(self, t: Tensor) -> Tensor:
        if t in self._parent_inputs:
            return self._parent_inputs[t]
        if t in self.called_graph._outputs[:len(self._outputs)]:
            return self._outputs[self.called_graph._outputs.index(t)]
        if self._parent is not None and getattr(t, "_graph", None) is self.called_graph and t._sim in self._mapping:
            return self._parent._wrap(self._mapping[t._sim], t.dtype)  # an output autodiff added after the call
        raise ValueError(f"Tensor {getattr(t, 'name', t)} is not an input or output of the called graph "
                         f"{self.called_graph.name!r}")

    def parent_to_graph(self, t: Tensor) -> Tensor:
        for k, v in self._parent_inputs.items():
            if v is t:
                return k
        for k, v in zip(self.called_graph._outputs, self._outputs):
            if v is t:
                return k
        raise ValueError(f"Tensor {getattr(t, 'name', t)} is not a parent graph input of the call site "
                         f"(graph {self.called_graph.name!r})")


def _parent_inputs(graph: Graph, inputs, inputs_dict) -> dict:
    given = dict(zip(graph._inputs, inputs))
    given.update(inputs_dict or {})
    return given


def call_with_info(graph: Graph, *inputs: Tensor, inputs_dict: dict | None = None,
                   check_inputs: bool = True) -> CallSiteInfo:
    """Call ``graph`` (copy its ops into the current graph) and describe the call."""
    if not isinstance(graph, Graph):
        raise TypeError(f"ops.call: expected a popxl Graph (ir.create_graph), got {graph!r}")
    g = _graph(f"ops.call({graph.name!r})")
    g._last_mapping = {}
    if graph._grad_info is not None:
        outs = transforms._call_grad_graph(g, graph, inputs, inputs_dict)
    else:
        outs = g._call(graph, inputs, inputs_dict, f"ops.call({graph.name!r})")
    return CallSiteInfo(graph, _parent_inputs(graph, inputs, inputs_dict), outs, g, g._last_mapping)


def call(graph: Graph, *inputs: Tensor, inputs_dict: dict | None = None) -> tuple[Tensor, ...]:
    """Call ``graph``; returns its outputs as tensors of the current graph."""
    return call_with_info(graph, *inputs, inputs_dict=inputs_dict).outputs


def repeat_with_info(graph: Graph, repeat_count: int, *inputs: Tensor, inputs_dict: dict | None = None,
                     check_inputs: bool = True) -> CallSiteInfo:
    """Run ``graph`` ``repeat_count`` times, output ``k`` of one iteration feeding input ``k`` of
    the next. In the main graph a body with host IO is the step of one host transfer (see
    ``Session``); any other body is copied ``repeat_count`` times (each of its host loads and stores
    then one more transfer)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"ops.repeat: expected a popxl Graph (ir.create_graph), got {graph!r}")
    g = _graph(f"ops.repeat({graph.name!r})")
    if graph._grad_info is not None:
        raise NotModelledError("ops.repeat of an autodiff grad graph is not modelled: call it with ops.call")
    outs = g._repeat(graph, repeat_count, inputs, inputs_dict)
    return CallSiteInfo(graph, _parent_inputs(graph, inputs, inputs_dict), outs)


def repeat(graph: Graph, repeat_count: int, *inputs: Tensor, inputs_dict: dict | None = None) -> tuple[Tensor, ...]:
    return repeat_with_info(graph, repeat_count, *inputs, inputs_dict=inputs_dict).outputs


class ConditionalSiteInfo:
    """Where ``ops.conditional`` called its two branches: the graphs, the parent tensors given to
    each and the outputs."""

    def __init__(self, then_call: CallSiteInfo | None, else_call: CallSiteInfo | None, outputs: Sequence[Tensor],
                 branches: tuple[Graph, Graph]):
        self._calls = (then_call, else_call)
        self._outputs = tuple(outputs)
        self.called_graph = branches

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._outputs

    def parent_output(self, idx: int) -> Tensor:
        return self._outputs[idx]

    def set_parent_input_modified(self, subgraph_tensor: Tensor, infer_modified_regions: bool = False) -> None:
        """Accepted, as :meth:`CallSiteInfo.set_parent_input_modified`."""
        self.called_graph[0].ir._note("ConditionalSiteInfo.set_parent_input_modified: accepted, no modelled effect")


def conditional_with_info(cond: Tensor, then_branch: Graph, else_branch: Graph, then_inputs=None, else_inputs=None,
                          then_inputs_dict: dict | None = None, else_inputs_dict: dict | None = None,
                          check_inputs: bool = True) -> ConditionalSiteInfo:
    """``then_branch`` if ``cond`` else ``else_branch`` (PopART's IfOp: Poplar's If program runs one
    branch, chosen on the device). The branches must give outputs of the same shapes and dtypes. A
    ``cond`` made with ``popxl.constant`` picks its branch here, which alone is priced; otherwise the
    simulator, which computes no values, prices both branches and an element-wise select of their
    outputs, an upper bound (the run's notes say so), as sim.poptorch prices ``poptorch.cond``."""
    where = "ops.conditional"
    g = _graph(where, cond)
    if cond.nelms != 1 or not (cond.dtype == dtypes.bool or cond.dtype.is_int):
        raise TypeError(f"{where}: cond must be a one-element bool or integer Tensor, got {cond.dtype.name} "
                        f"{cond.shape}")
    for name, branch in (("then_branch", then_branch), ("else_branch", else_branch)):
        if not isinstance(branch, Graph):
            raise TypeError(f"{where}: {name} must be a popxl Graph (ir.create_graph), got {branch!r}")
        if branch._grad_info is not None:
            raise NotModelledError(f"{where}: an autodiff grad graph as a branch is not modelled; call it with "
                                   "ops.call")
    then_out, else_out = then_branch._outputs, else_branch._outputs
    if [(t.shape, t.dtype) for t in then_out] != [(t.shape, t.dtype) for t in else_out]:
        raise GraphError(f"{where}: the branches' outputs differ: then {[(t.shape, t.dtype.name) for t in then_out]}, "
                         f"else {[(t.shape, t.dtype.name) for t in else_out]}; both must give the same shapes and "
                         "dtypes")
    known = cond._data if isinstance(cond, Constant) else None
    if known is not None:  # a constant condition: the branch it picks, alone
        pick_then = bool(np.asarray(known).reshape(-1)[0])
        branch, ins, ins_dict = ((then_branch, then_inputs, then_inputs_dict) if pick_then
                                 else (else_branch, else_inputs, else_inputs_dict))
        info = call_with_info(branch, *(ins or ()), inputs_dict=ins_dict)
        calls = (info, None) if pick_then else (None, info)
        return ConditionalSiteInfo(*calls, info.outputs, (then_branch, else_branch))
    g.ir._note(f"{where}: the branch is chosen on the device; both branches and a select of their outputs are "
               "priced (an upper bound)")
    first = call_with_info(then_branch, *(then_inputs or ()), inputs_dict=then_inputs_dict)
    second = call_with_info(else_branch, *(else_inputs or ()), inputs_dict=else_inputs_dict)
    flag = cond if cond.dtype == dtypes.bool else _as_bool(g, cond)
    outs = []
    for a, b in zip(first.outputs, second.outputs):
        with g._building() as bld:
            picked = bld.op("select", [flag._sim, a._sim, b._sim], [a.shape or (1,)], {"op": "conditional"},
                            name=_name(g, "conditional"), out_dtypes=[a.dtype.sim_name])[0]
        out = _out(g, picked, a.dtype)
        outs.append(reshape(out, ()) if not a.shape else out)
    return ConditionalSiteInfo(first, second, outs, (then_branch, else_branch))


def _as_bool(g: Graph, t: Tensor) -> Tensor:
    with g._building() as bld:
        return _out(g, bld.op("cast", [t._sim], [t.shape or (1,)], name=_name(g, "cond"),
                              out_dtypes=[dtypes.bool.sim_name])[0], dtypes.bool)


def conditional(cond: Tensor, then_branch: Graph, else_branch: Graph, then_inputs=None, else_inputs=None,
                then_inputs_dict: dict | None = None, else_inputs_dict: dict | None = None) -> tuple[Tensor, ...]:
    return conditional_with_info(cond, then_branch, else_branch, then_inputs, else_inputs, then_inputs_dict,
                                 else_inputs_dict).outputs


# PopXL's in-place variants: the same op and price (the simulator does not track which buffer
# an op writes), but for the ops whose out-of-place form copies its input first (PopXL runs no inplacing
# pass: sim/compiler/outplace.py); detach_ and the views' in-place forms are views as well
exp_, tanh_, negate_ = exp, tanh, negate


def relu_(t: Tensor) -> Tensor:
    return _unary("relu", t, in_place=True)


def gelu_(t: Tensor) -> Tensor:
    return _unary("gelu", t, in_place=True)


def sigmoid_(t: Tensor) -> Tensor:
    return _unary("sigmoid", t, in_place=True)


reshape_, flatten_, transpose_, slice_, concat_, detach_ = reshape, flatten, transpose, slice, concat, detach
