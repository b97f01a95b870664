"""PopXL's element-wise math, comparisons, reductions and random ops beyond :mod:`._core`'s.

Each is the op PopART grows for it, priced by the cost model as sim.poptorch's: popops unary,
binary and ternary codelets (``abs``, ``pow``, ``compare``, ``select`` ...), popops reductions, poprand
generators and PopART's ModifyRandomSeedOp. Signatures follow PopXL
(graphcore/popart ``python/popxl/python_files/ops``); a reduction PopART builds of several popops
calls (``l2``, ``logsumexp`` ...) is those calls here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ...cost.expressions import ISINF_STEPS
from ...errors import GraphError
from .. import dtypes
from ..errors import NotModelledError
from ..tensor import Constant, GradTensor, Tensor, constant
from ..transforms import _gradient_update
from ._core import (_as_tensor, _axes, _graph, _name, _out, _reduce, _unary, add, exp, matmul, reshape, sub,
                    transpose)
from ._core import max as _reduce_max


# --- element-wise, one input ------------------------------------------------------------------

def abs(t: Tensor) -> Tensor:  # noqa: A001 - PopXL's name
    return _unary("abs", t)


def cos(t: Tensor) -> Tensor:
    return _unary("cos", t)


def sin(t: Tensor) -> Tensor:
    return _unary("sin", t)


def log(t: Tensor) -> Tensor:
    return _unary("log", t)


def log2(t: Tensor) -> Tensor:
    """The base-2 logarithm, as PopXL builds it: ``log(t) / log(2)`` (two logs and a divide)."""
    return log(t) / log(constant(2, t.dtype))


def ceil(t: Tensor) -> Tensor:
    return _unary("ceil", t)


def floor(t: Tensor) -> Tensor:
    return _unary("floor", t)


def sign(t: Tensor) -> Tensor:
    return _unary("sign", t)


def swish(t: Tensor) -> Tensor:
    """x * sigmoid(x): popnn's SWISH non-linearity (PopART's SwishOp)."""
    return _unary("swish", t, in_place=False)


def geluerf(t: Tensor) -> Tensor:
    """GELU with erf (PopART's GeluErfOp): popops' GELU_ERF vertex."""
    return _unary("gelu_erf", t, in_place=False)


def logical_not(t: Tensor) -> Tensor:
    return _broadcast("logical_not", [t], "ops.logical_not", dtypes.bool)


def isnan(t: Tensor) -> Tensor:
    return _broadcast("isnan", [t], "ops.isnan", dtypes.bool)


def clip(t: Tensor, min: float | None = float("-inf"), max: float | None = float("inf")) -> Tensor:  # noqa: A002
    """``t`` clamped to [min, max]: popops Clamp (PopART's ClipOp)."""
    if min is not None and max is not None and min > max:
        raise ValueError(f"ops.clip: min {min} is greater than max {max}")
    return _unary("clamp", t)


clamp = clip  # PopXL's other name for it (ops/clip.py)


def isinf(t: Tensor) -> Tensor:
    """Where ``t`` is infinite, as PopART's IsInfx computes it: one popops map, ``x == x and not
    isfinite(x)``."""
    g = _graph("ops.isinf", t)
    with g._building() as bld:
        out = bld.op("map", [t._sim], [t.shape], {"steps": list(ISINF_STEPS), "op": "isinf"},
                     name=_name(g, "isinf"), out_dtypes=[dtypes.bool.sim_name])[0]
    return _out(g, out, dtypes.bool)


def isfinite(t: Tensor) -> Tensor:
    """``~(isnan(t) | isinf(t))``, the four ops PopXL builds it of (ops/isfinite.py)."""
    return logical_not(logical_or(isnan(t), isinf(t)))


def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """(t + increment) mod modulus, one fused expression (PopART's IncrementModOp, a popops map)."""
    if modulus == 0:
        raise ValueError("ops.increment_mod: the modulus must not be 0")
    g = _graph("ops.increment_mod", t)
    with g._building() as bld:
        out = bld.op("map", [t._sim], [t.shape], {"steps": ["add", "remainder"], "op": "increment_mod"},
                     name=_name(g, "increment_mod"))[0]
    return _out(g, out, t.dtype)


# --- element-wise, several inputs (numpy broadcasting) -----------------------------------------

def _broadcast(kind: str, operands: list, where: str, out_dtype: dtypes.dtype | None = None,
               like: Tensor | None = None) -> Tensor:
    """One op of ``kind`` on ``operands`` (numbers made constants of ``like``'s dtype), its result
    broadcast from them and of ``out_dtype`` (default ``like``'s)."""
    if like is None:
        like = next((x for x in operands if isinstance(x, Tensor)), None)
    if like is None:
        raise TypeError(f"{where}: at least one operand must be a popxl Tensor")
    g = _graph(where)
    ins = [_as_tensor(g, x, like, where) for x in operands]
    try:
        shape = tuple(np.broadcast_shapes(*(x.shape for x in ins)))
    except ValueError:
        raise GraphError(f"{where}: shapes {', '.join(str(x.shape) for x in ins)} do not broadcast") from None
    out_dtype = out_dtype or like.dtype
    with g._building() as bld:
        out = bld.op(kind, [x._sim for x in ins], [shape], {"op": where.split(".")[-1]},
                     name=_name(g, where.split(".")[-1]), out_dtypes=[out_dtype.sim_name])[0]
    return _out(g, out, out_dtype)


def _same_dtype(where: str, lhs, rhs) -> None:
    if isinstance(lhs, Tensor) and isinstance(rhs, Tensor) and lhs.dtype != rhs.dtype:
        raise TypeError(f"{where}: operands of different dtypes ({lhs.dtype.name}, {rhs.dtype.name}); cast one "
                        "with ops.cast")


def pow(t: Tensor, e) -> Tensor:  # noqa: A001 - PopXL's name
    _same_dtype("ops.pow", t, e)
    return _broadcast("pow", [t, e], "ops.pow")


def fmod(lhs: Tensor, rhs) -> Tensor:
    _same_dtype("ops.fmod", lhs, rhs)
    return _broadcast("remainder", [lhs, rhs], "ops.fmod")


def maximum(*ts: Tensor) -> Tensor:
    """The element-wise maximum of the tensors, broadcast (PopART's MaxOpx: popops MAXIMUM of each next
    tensor with the running result)."""
    if not ts:
        raise ValueError("ops.maximum: give at least one tensor")
    out = ts[0]
    for t in ts[1:]:
        _same_dtype("ops.maximum", out, t)
        out = _broadcast("maximum", [out, t], "ops.maximum")
    return out


def equal(lhs: Tensor, rhs) -> Tensor:
    _same_dtype("ops.equal", lhs, rhs)
    return _broadcast("compare", [lhs, rhs], "ops.equal", dtypes.bool)


def greater(input: Tensor, other) -> Tensor:  # PopXL's argument names (ops/greater.py)
    _same_dtype("ops.greater", input, other)
    return _broadcast("compare", [input, other], "ops.greater", dtypes.bool)


def logical_and(lhs: Tensor, rhs) -> Tensor:
    return _broadcast("logical", [lhs, rhs], "ops.logical_and", dtypes.bool)


def logical_or(lhs: Tensor, rhs) -> Tensor:
    return _broadcast("logical", [lhs, rhs], "ops.logical_or", dtypes.bool)


def where(condition: Tensor, lhs, rhs) -> Tensor:
    """``lhs`` where ``condition`` holds, else ``rhs``: popops Select (PopART's WhereOp)."""
    like = lhs if isinstance(lhs, Tensor) else rhs if isinstance(rhs, Tensor) else None
    if not isinstance(condition, Tensor) or condition.dtype != dtypes.bool:
        raise TypeError("ops.where: the condition must be a popxl bool Tensor")
    if like is None:
        raise TypeError("ops.where: lhs or rhs must be a popxl Tensor")
    _same_dtype("ops.where", lhs, rhs)
    return _broadcast("select", [condition, lhs, rhs], "ops.where", like.dtype, like=like)


# --- reductions ----------------------------------------------------------------------------------

def min(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce("reduce_min", t, axis, keepdims, "ops.min")


def prod(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("reduce_prod", t, axis, keepdims, "ops.prod")


def sumsquare(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """The sum of squares (PopART's ReduceSumSquare: popops::reduce SQUARE_ADD; its gradient one map, 2 dy t)."""
    return _reduce("reduce_sum", t, axis, keepdims, "ops.sumsquare", operation="square_add", reduced="sum_square")


def lamb_square(t: Tensor) -> Tensor:
    """The sum of ``t``'s squares as a float32 scalar (PopART's LambSquareOp: popops' SQUARE_ADD
    reduction of every element into float). Of an autodiff gradient (or an updater made from one) it is
    LAMB's norm: the trust ratio of the simulated weight update."""
    if isinstance(t, GradTensor):
        return _gradient_update("lamb_square", None, t)
    g = _graph("ops.lamb_square", t)
    with g._building() as bld:
        squares = bld.unary("square", t._sim, name=_name(g, "square"))
        total = bld.op("reduce_sum", [squares], [(1,)], {"axes": list(range(t.rank)), "keepdims": False},
                       name=_name(g, "lamb_square"), out_dtypes=[dtypes.float32.sim_name])[0]
    return reshape(_out(g, total, dtypes.float32), ())


def l1(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """The sum of absolute values (PopART's ReduceL1: popops abs, a reduce; its gradient one map, dy sign(t))."""
    return _reduce("reduce_sum", abs(t), axis, keepdims, "ops.l1", reduced="l1")


def l2(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """The square root of the sum of squares (PopART's ReduceL2: a reduce with SQUARE_ADD, a square root in place;
    its gradient one map, dy t / l2)."""
    return _unary("sqrt", _reduce("reduce_sum", t, axis, keepdims, "ops.l2", operation="square_add"), reduced="l2")


def logsum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """log of the sum (PopART's ReduceLogSum: a reduce, a log in place; its gradient exp of the output, a divide)."""
    return _unary("log", _reduce("reduce_sum", t, axis, keepdims, "ops.logsum"), reduced="log_sum")


def logsumexp(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(t))) as PopART's ReduceLogSumExp computes it, shifted by the maximum for
    stability: the max, the subtraction, exp, the sum, log and the maximum added back."""
    peak = _reduce_max(t, axis, keepdims=True)
    total = _reduce("reduce_sum", exp(sub(t, peak)), axis, keepdims, "ops.logsumexp")
    peak = peak if keepdims else reshape(peak, total.shape)
    return add(log(total), peak)


# --- views ---------------------------------------------------------------------------------------

def squeeze(t: Tensor, axes: int | Iterable[int] | None = None) -> Tensor:
    """``t`` without its size-1 dimensions (those of ``axes``): a view."""
    dims = [i for i, d in enumerate(t.shape) if d == 1] if axes is None else _axes(t, axes)
    for a in dims:
        if t.shape[a] != 1:
            raise ValueError(f"ops.squeeze: axis {a} of {t.id!r} {t.shape} has size {t.shape[a]}, not 1")
    return reshape(t, [d for i, d in enumerate(t.shape) if i not in dims])


# --- random numbers --------------------------------------------------------------------------------

def _check_seed(seed: Tensor, where: str) -> None:
    if not isinstance(seed, Tensor) or seed.shape != (2,) or seed.dtype != dtypes.uint32:
        raise ValueError(f"{where}: seed Tensor must be shape=(2,) dtype=uint32. Provided {seed}")


def create_random_seed(seed: Tensor, modifier: Tensor) -> Tensor:
    """A new seed from ``seed`` and ``modifier``: PopART's ModifyRandomSeedOp (a one-element draw)."""
    _check_seed(seed, "ops.create_random_seed")
    g = _graph("ops.create_random_seed", seed, modifier)
    with g._building() as bld:
        out = bld.op("modify_random_seed", [seed._sim, modifier._sim], [(2,)], name=_name(g, "modified_seed"),
                     out_dtypes=[dtypes.uint32.sim_name])[0]
    return _out(g, out, dtypes.uint32)


def split_random_seed(seed: Tensor, n: int = 2) -> tuple[Tensor, ...]:
    """``n`` seeds from ``seed``: ``create_random_seed`` with modifiers 0 .. n-1, as PopXL makes them."""
    _check_seed(seed, "ops.split_random_seed")
    if n < 1:
        raise ValueError(f"ops.split_random_seed: n must be at least 1, got {n}")
    g = _graph("ops.split_random_seed", seed)
    modifiers = [_as_tensor(g, np.uint32(i), seed, "ops.split_random_seed") for i in range(n)]
    return tuple(create_random_seed(seed, m) for m in modifiers)


def _random(kind: str, seed: Tensor, shape, dtype, where: str) -> Tensor:
    _check_seed(seed, where)
    dt = dtypes.dtype.as_dtype(dtype)
    if not dt.is_floating_point:
        raise ValueError(f"{where}: dtype must be float16 or float32, got {dt.name}")
    shape = tuple(int(d) for d in shape)
    if math.prod(shape) <= 0:
        raise ValueError(f"{where}: shape {shape} has no elements")
    g = _graph(where, seed)
    with g._building() as bld:
        out = bld.op(kind, [seed._sim], [shape], name=_name(g, kind), out_dtypes=[dt.sim_name])[0]
    return _out(g, out, dt)


def random_uniform(seed_tensor: Tensor, shape, low: float = 0.0, high: float = 1.0,
                   dtype=dtypes.float32) -> Tensor:
    """Uniform random numbers drawn on the IPU (poprand::uniform)."""
    return _random("random_uniform", seed_tensor, shape, dtype, "ops.random_uniform")


def random_normal(seed_tensor: Tensor, shape, mean: float = 0.0, std: float = 1.0,
                  dtype=dtypes.float32) -> Tensor:
    """Normally distributed random numbers drawn on the IPU (poprand::normal)."""
    return _random("random_normal", seed_tensor, shape, dtype, "ops.random_normal")


# --- selection, indices and dynamic slices --------------------------------------------------------

def topk(t: Tensor, k: int, axis: int, largest: bool, sorted: bool,  # noqa: A002 - PopXL's name
         available_memory_proportion: float | None = None) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (smallest) values along ``axis`` and their int32 indices: popops' top-k of each
    row (PopART's TopKOp; priced as sim.poptorch's ``topk``)."""
    if not -t.rank <= axis < t.rank:
        raise ValueError(f"ops.topk: axis {axis} is out of range for a tensor of rank {t.rank}")
    axis %= t.rank
    if not 0 < k <= t.shape[axis]:
        raise ValueError(f"ops.topk: k {k} must be in [1, {t.shape[axis]}] (the size of axis {axis})")
    shape = tuple(k if i == axis else d for i, d in enumerate(t.shape))
    g = _graph("ops.topk", t)
    with g._building() as bld:
        values, indices = bld.op("sort", [t._sim], [shape, shape], {"axis": axis, "op": "topk", "k": int(k)},
                                 name=_name(g, "topk"), out_dtypes=[t.dtype.sim_name, "int32"])
    return _out(g, values, t.dtype), _out(g, indices, dtypes.int32)


def _arg(kind: str, t: Tensor, dim: int, keepdim: bool, where: str) -> Tensor:
    axes = _axes(t, dim)
    shape = [1 if i in axes else d for i, d in enumerate(t.shape)] if keepdim else \
        [d for i, d in enumerate(t.shape) if i not in axes]
    g = _graph(where, t)
    with g._building() as bld:
        out = bld.op(kind, [t._sim], [tuple(shape) or (1,)], {"axes": axes, "keepdims": keepdim},
                     name=_name(g, where.split(".")[-1]), out_dtypes=["int32"])[0]
    out = _out(g, out, dtypes.int32)
    return reshape(out, ()) if not shape else out


def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """The int32 index of the maximum along ``dim``: a popops max reduction keeping its index."""
    return _arg("reduce_max", t, dim, keepdim, "ops.argmax")


def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    return _arg("reduce_min", t, dim, keepdim, "ops.argmin")


def onehot(t: Tensor, num_classes: Tensor, values: Tensor, axis: int) -> Tensor:
    """A one-hot encoding of the indices ``t``, the classes along ``axis`` (popops encodeOneHot: each
    index compared with every class). ``num_classes`` is a graph tensor, whose value sets the output's
    shape: it must be a ``popxl.constant`` made from a number."""
    data = num_classes._data if isinstance(num_classes, Constant) else None
    if data is None or np.size(data) != 1:
        raise GraphError("ops.onehot: the number of classes must be known when the program is built; make "
                         "num_classes with popxl.constant(<int>)")
    classes = int(np.asarray(data).reshape(()))
    rank = t.rank + 1
    if not -rank <= axis < rank:
        raise ValueError(f"ops.onehot: axis {axis} is out of range for the result's rank {rank}")
    shape = list(t.shape)
    shape.insert(axis % rank, int(classes))
    return _one_hot(_graph("ops.onehot", t, num_classes, values), t, tuple(shape), values.dtype)


def _one_hot(g, t: Tensor, shape: tuple, dtype: dtypes.dtype) -> Tensor:
    """The indices ``t`` one-hot encoded into ``shape`` (popops encodeOneHot: each index compared
    with every class)."""
    with g._building() as bld:
        out = bld.op("map", [t._sim], [shape], {"steps": ["compare"], "op": "onehot"}, name=_name(g, "onehot"),
                     out_dtypes=[dtype.sim_name])[0]
    return _out(g, out, dtype)


def _dynamic(where: str, t: Tensor, index: Tensor, axes, sizes) -> tuple[list[int], list[int]]:
    axes, sizes = [int(a) for a in axes], [int(s) for s in sizes]
    if len(axes) != len(sizes) or not axes:
        raise ValueError(f"{where}: axes {axes} and sizes {sizes} must be as long, and not empty")
    if index.nelms != len(axes):  # any shape: PopART's opx reshapes it to one offset an axis (dynamicslicex.cpp)
        raise ValueError(f"{where}: the index must hold {len(axes)} offsets (one per axis); "
                         f"got shape {index.shape}")
    for a, s in zip(axes, sizes):
        if not 0 <= a < t.rank or not 0 < s <= t.shape[a]:
            raise ValueError(f"{where}: a slice of {s} along axis {a} does not fit {t.id!r} {t.shape}")
    return axes, sizes


def dynamic_slice(t: Tensor, index: Tensor, axes, sizes, no_overlap: bool) -> Tensor:
    """A slice at offsets the program computes (popops dynamicSlice): a copy of the slice, as
    sim.poptorch prices ``poptorch.dynamic_slice``."""
    axes, sizes = _dynamic("ops.dynamic_slice", t, index, axes, sizes)
    shape = list(t.shape)
    for a, s in zip(axes, sizes):
        shape[a] = s
    g = _graph("ops.dynamic_slice", t, index)
    with g._building() as bld:
        out = bld.op("copy", [t._sim, index._sim], [tuple(shape)], {"dynamic_slice": True},
                     name=_name(g, "dynamic_slice"))[0]
    return _out(g, out, t.dtype)


def dynamic_update(t: Tensor, index: Tensor, t_update: Tensor, axes, sizes, no_overlap: bool) -> Tensor:
    """``t`` with ``t_update`` written at offsets the program computes (popops dynamicUpdate), out of
    place: a copy of the updated tensor."""
    axes, sizes = _dynamic("ops.dynamic_update", t, index, axes, sizes)
    g = _graph("ops.dynamic_update", t, index, t_update)
    with g._building() as bld:
        out = bld.op("copy", [t._sim, t_update._sim, index._sim], [t.shape], {"dynamic_update": True},
                     name=_name(g, "dynamic_update"))[0]
    return _out(g, out, t.dtype)


def shaped_dropout(t: Tensor, seed_tensor: Tensor, shape: Iterable[int], ratio: float) -> Tensor:
    """Dropout with a mask of ``shape`` broadcast over ``t`` (PopART's ShapedDropoutOp,
    ``poprand::shapedDropout``: a bernoulli mask of that shape, scaled, multiplying ``t``)."""
    _check_seed(seed_tensor, "ops.shaped_dropout")
    if not 0 <= ratio < 1:
        raise ValueError(f"ops.shaped_dropout: ratio must be in [0, 1), got {ratio!r}")
    shape = tuple(int(d) for d in shape)
    try:
        np.broadcast_shapes(shape, t.shape)
    except ValueError:
        raise GraphError(f"ops.shaped_dropout: the mask shape {shape} does not broadcast to {t.id!r} {t.shape}") \
            from None
    g = _graph("ops.shaped_dropout", t, seed_tensor)
    with g._building() as bld:
        mask = bld.op("dropout", [g._new_tensor("ones", shape, t.dtype, "constant")], [shape], {"p": ratio},
                      name=_name(g, "mask"))[0]
        g.sim_graph.ops[-1].attrs["explicit"] = True
        out = bld.mul(t._sim, mask, name=_name(g, "shaped_dropout"))
    return _out(g, out, t.dtype)


def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """The running sum along ``dim`` as PopART computes it (popx/op/cumsumx.cpp): the input as a
    (T, rest) matrix, ``dim`` first, multiplied by a constant T x T triangular matrix."""
    if not -t.rank <= dim < t.rank:
        raise ValueError(f"ops.cumsum: dim {dim} is out of range for a tensor of rank {t.rank}")
    dim %= max(t.rank, 1)
    g = _graph("ops.cumsum", t)
    perm = [dim] + [i for i in range(t.rank) if i != dim]
    moved = transpose(t, perm) if dim else t
    rows = moved.shape[0]
    flat = reshape(moved, [rows, math.prod(moved.shape[1:])])
    triangle = Tensor(g, g._new_tensor("triangular", (rows, rows), t.dtype, "constant"), (rows, rows), t.dtype,
                      flat.ipu)
    summed = reshape(matmul(triangle, flat), moved.shape)
    return transpose(summed, [perm.index(i) for i in range(t.rank)]) if dim else summed


# --- convolutional-network layers ---------------------------------------------------------------

def batch_norm_inference(t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor,
                         epsilon: float = 1e-5, momentum: float = 0.9) -> Tensor:
    """Batch norm with the running statistics (PopART's BatchNormOp at inference, popnn
    ``batchNormalise``: the statistics' combined scale and shift, one multiply and one add)."""
    if t.rank < 2:
        raise ValueError(f"ops.batch_norm_inference: {t.id!r} {t.shape} needs (N, C, ...) dimensions")
    channels = t.shape[1]
    for p in (scale, bias, mean, var):
        if p.shape != (channels,):
            raise GraphError(f"ops.batch_norm_inference: {p.id!r} has shape {p.shape}, expected ({channels},) for "
                             f"{t.id!r} {t.shape}")
    g = _graph("ops.batch_norm_inference", t, scale, bias, mean, var)
    with g._building() as bld:
        out = bld.op("batchnorm", [t._sim, scale._sim, bias._sim, mean._sim, var._sim], [t.shape],
                     {"inference": True, "eps": epsilon}, name=_name(g, "batch_norm"))[0]
    return _out(g, out, t.dtype)


def _pool(kind: str, where: str, t: Tensor, kernel_size, stride, padding, out_pads, dilation, in_dilations,
          auto_pad, ceil_mode) -> Tensor:
    """popnn's 2-D pooling of an (N, C, H, W) tensor; PopXL's other forms are refused by name."""
    kernel = tuple(int(k) for k in kernel_size)
    if t.rank != 4 or len(kernel) != 2:
        raise NotModelledError(f"{where}: only 2-D pooling of (N, C, H, W) tensors is modelled; got {t.id!r} "
                               f"{t.shape} with a kernel of {kernel}")
    stride = tuple(int(s) for s in (stride or (1,) * len(kernel)))  # PopXL: 1 along each axis unless given
    pads = tuple(int(p) for p in (padding or (0, 0, 0, 0)))
    if len(pads) != 4 or pads[:2] != pads[2:]:
        raise NotModelledError(f"{where}: padding {pads} (begin and end of each axis) is modelled only the same "
                               "before and after each axis")
    unmodelled = [name for name, value, default in (("out_pads", out_pads, None), ("in_dilations", in_dilations, None),
                                                     ("ceil_mode", ceil_mode, False))
                  if value not in (default, (), [])]
    if dilation not in (None, (), []) and any(int(d) != 1 for d in dilation):
        unmodelled.append("dilation")
    if auto_pad not in ("not_set", "notset", None):
        unmodelled.append("auto_pad")
    if unmodelled:
        raise NotModelledError(f"{where}: {', '.join(unmodelled)} not modelled; pool with explicit, even padding")
    g = _graph(where, t)
    with g._building() as bld:
        out = bld.pool(t._sim, kind, kernel, stride, pads[:2], name=_name(g, kind))
    return _out(g, out, t.dtype)


def average_pool(t: Tensor, kernel_size, stride=None, padding=None, out_pads=None, dilation=None,
                 in_dilations=None, auto_pad="not_set", ceil_mode: bool = False) -> Tensor:
    return _pool("avgpool", "ops.average_pool", t, kernel_size, stride, padding, out_pads, dilation, in_dilations,
                 auto_pad, ceil_mode)


def max_pool(t: Tensor, kernel_size, stride=None, padding=None, out_pads=None, dilation=None, in_dilations=None,
             auto_pad="not_set", ceil_mode: bool = False, storage_order: str = "row") -> Tensor:
    return _pool("maxpool", "ops.max_pool", t, kernel_size, stride, padding, out_pads, dilation, in_dilations,
                 auto_pad, ceil_mode)


def interpolate(t: Tensor, scale_factor=(1.0, 1.0, 1.0, 1.0), mode: str = "nearest",
                nearest_mode: str = "round_prefer_floor",
                coordinate_transformation_mode: str = "half_pixel") -> Tensor:
    """``t`` resized by ``scale_factor`` (one factor an axis; each output size the floor of size times
    factor), as PopART's ResizeOpx runs it and sim.onnx prices ONNX Resize: ``nearest`` a copy of each
    input element to its outputs; ``linear`` a copy of the input, then for each resized axis its floor
    and ceiling neighbours (views) each multiplied by constant weights along that axis and added;
    ``cubic`` sixteen multiply-adds an output element."""
    where = "ops.interpolate"
    if mode not in ("nearest", "linear", "cubic"):
        raise ValueError(f"{where}: mode must be 'nearest', 'linear' or 'cubic', got {mode!r}")
    scales = [float(s) for s in scale_factor]
    if len(scales) != t.rank or any(s <= 0 for s in scales):
        raise ValueError(f"{where}: scale_factor {tuple(scales)} must be {t.rank} positive factors (one per axis of "
                         f"{t.id!r} {t.shape})")
    shape = tuple(int(math.floor(d * s)) for d, s in zip(t.shape, scales))
    if any(d < 1 for d in shape):
        raise GraphError(f"{where}: scale_factor {tuple(scales)} leaves no output from {t.id!r} {t.shape}")
    g = _graph(where, t)
    with g._building() as bld:
        if mode == "nearest":  # ResizeOpx: a copy of the input, the output a view of it (resizex.cpp resizeNearest)
            copied = bld.op("copy", [t._sim], [t.shape], {"op": "upsample_input"}, name=_name(g, "interpolate/copy"))[0]
            out = bld.op("reshape", [copied], [shape], {"op": "upsample_nearest"}, name=_name(g, "interpolate"))[0]
        elif mode == "cubic":
            out = bld.op("map", [t._sim], [shape], {"steps": ["mul", "add"], "repeat": 16, "grad": [["mul", "add"]]},
                         name=_name(g, "interpolate"))[0]
        else:
            out = bld.op("copy", [t._sim], [t.shape], {"op": "resize_linear"}, name=_name(g, "interpolate/copy"))[0]
            now = list(t.shape)
            for d in [d for d in range(t.rank) if shape[d] != t.shape[d]]:
                now[d] = shape[d]
                weights = g._new_tensor(f"interpolate/weights{d}",
                                        tuple(shape[d] if i == d else 1 for i in range(t.rank)), t.dtype, "constant")
                ceil_, floor_ = (bld.op("mul", [out, weights], [tuple(now)], name=_name(g, f"interpolate/{side}{d}"))[0]
                                 for side in ("ceil", "floor"))
                out = bld.add(floor_, ceil_, name=_name(g, f"interpolate/sum{d}"))
    return _out(g, out, t.dtype)


# PopXL's in-place forms: the same op and price (the simulator does not track which buffer an op writes),
# but for those whose out-of-place form copies its input first (sim/compiler/outplace.py)
increment_mod_, dynamic_update_ = increment_mod, dynamic_update


def geluerf_(t: Tensor) -> Tensor:
    return _unary("gelu_erf", t, in_place=True)


def swish_(t: Tensor) -> Tensor:
    return _unary("swish", t, in_place=True)
