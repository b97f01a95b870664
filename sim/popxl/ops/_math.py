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

from ...errors import GraphError
from .. import dtypes
from ..tensor import Tensor
from ._core import _as_tensor, _axes, _graph, _name, _out, _reduce, _unary, add, exp, reshape, sub
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


def ceil(t: Tensor) -> Tensor:
    return _unary("ceil", t)


def floor(t: Tensor) -> Tensor:
    return _unary("floor", t)


def sign(t: Tensor) -> Tensor:
    return _unary("sign", t)


def swish(t: Tensor) -> Tensor:
    """x * sigmoid(x): popnn's SWISH non-linearity (PopART's SwishOp)."""
    return _unary("swish", t)


def geluerf(t: Tensor) -> Tensor:
    """GELU with erf (PopART's GeluErfOp), priced as popnn's GELU."""
    return _unary("gelu", t)


def _to_bool(kind: str, inputs: list[Tensor], shape, where: str) -> Tensor:
    g = _graph(where, *inputs)
    with g._building() as bld:
        out = bld.op(kind, [x._sim for x in inputs], [tuple(shape)], {"op": where.split(".")[-1]},
                     name=_name(g, where.split(".")[-1]), out_dtypes=["bool"])[0]
    return _out(g, out, dtypes.bool)


def logical_not(t: Tensor) -> Tensor:
    return _to_bool("logical_not", [t], t.shape, "ops.logical_not")


def isnan(t: Tensor) -> Tensor:
    return _to_bool("isnan", [t], t.shape, "ops.isnan")


def clip(t: Tensor, min: float | None = float("-inf"), max: float | None = float("inf")) -> Tensor:  # noqa: A002
    """``t`` clamped to [min, max]: popops Clamp (PopART's ClipOp)."""
    if min is not None and max is not None and min > max:
        raise ValueError(f"ops.clip: min {min} is greater than max {max}")
    return _unary("clamp", t)


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


def equal(lhs: Tensor, rhs) -> Tensor:
    _same_dtype("ops.equal", lhs, rhs)
    return _broadcast("compare", [lhs, rhs], "ops.equal", dtypes.bool)


def greater(lhs: Tensor, rhs) -> Tensor:
    _same_dtype("ops.greater", lhs, rhs)
    return _broadcast("compare", [lhs, rhs], "ops.greater", dtypes.bool)


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
    """The sum of squares (PopART's ReduceSumSquare: popops::reduce SQUARE_ADD), as the squares' sum."""
    return _reduce("reduce_sum", _unary("square", t), axis, keepdims, "ops.sumsquare")


def l1(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """The sum of absolute values (PopART's ReduceL1)."""
    return _reduce("reduce_sum", abs(t), axis, keepdims, "ops.l1")


def l2(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """The square root of the sum of squares (PopART's ReduceL2)."""
    return _unary("sqrt", sumsquare(t, axis, keepdims))


def logsum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """log of the sum (PopART's ReduceLogSum)."""
    return log(_reduce("reduce_sum", t, axis, keepdims, "ops.logsum"))


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
