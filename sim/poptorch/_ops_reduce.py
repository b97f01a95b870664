"""Op rules: reductions, norms, statistics, sorting and scans.

popops::reduce prices every reduction the same way per element (``reduce_sum``, ``reduce_mean``,
``reduce_max``, ``reduce_min``, ``reduce_prod``); statistics are the ops PopTorch builds them
from (``var`` = mean, subtract, square, mean; ``logsumexp`` = max, subtract, exp, sum, log,
add); sorting (``sort``, ``topk``, ``argsort``, ``median``) is popops' bitonic top-k network;
``cumsum`` is the matmul with a triangular constant that PopART's ``CumSumOpx`` does, and
``cumprod`` the chain of multiplies of PopTorch's ``cumprodHandler``.
"""

from __future__ import annotations

import math

import torch

from ._emit import const, emit, emit_map, is_tensor
from ._ops_pointwise import rsqrt_inputs
from ._values import sim_dtype


def _dims(dim, ndim: int) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, (list, tuple)):
        return sorted(int(d) % ndim for d in dim)
    return [int(dim) % ndim]


def _reduced(shape, dims, keep) -> tuple:
    if keep:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _reduce_to(ctx, kind, x, dims, keep, shape, dtype, name=None, output=None):
    attrs = {"axes": list(dims), "keepdims": bool(keep)}
    if output is not None:
        return ctx.op(kind, [x], attrs, output=output, name=name or kind)
    return emit(ctx, kind, [x], _reduced(shape, dims, keep) or (1,), dtype, attrs, name or kind)


def _reduce(kind):
    """A plain reduction over ``dim`` (all dims by default)."""
    def rule(ctx):
        x, rx = ctx.sarg(0, "input"), ctx.args[0]
        dim = ctx.arg(1, "dim")
        if isinstance(dim, torch.dtype):
            dim = None
        keep = ctx.arg(2, "keepdim", False)
        keep = bool(keep) if not isinstance(keep, torch.dtype) else False
        return ctx.op(kind, [x], {"axes": _dims(dim, rx.dim()), "keepdims": keep}, name=kind)
    return rule


def _extreme(kind, elementwise):
    """max/min: of two tensors (element-wise), of a tensor, or along a dim (values, indices)."""
    reduce_rule = _reduce(kind)

    def rule(ctx):
        other = ctx.arg(1, "other")
        if isinstance(other, torch.Tensor):
            a, b = ctx.sarg(0, "input"), ctx.sarg(1, "other")
            return ctx.op(elementwise, [ctx.t(a), ctx.t(b)] if is_tensor(b) else [a, b])
        if isinstance(ctx.output, (tuple, list)) and ctx.args[0].dim() > 0:
            return _top_one(ctx, kind == "reduce_min")
        return reduce_rule(ctx)
    return rule


def _top_one(ctx, negate: bool):
    """``max(x, dim)`` / ``min(x, dim)`` with their indices: PopTorch's minMaxWithIndicesHandler (ReduceOps.cpp), a
    TopK of k 1 (the input negated before and the values after for ``min``), its UINT32 indices cast to INT32."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    values, indices = ctx.output[0], ctx.output[1]
    if negate:
        x = emit(ctx, "scale", [x], rx.shape, rx.dtype, {"factor": -1.0}, "neg")
    axis = int(ctx.arg(1, "dim")) % rx.dim()
    top, index = ctx.op("sort", [x], {"axis": axis, "op": "topk", "k": 1}, name="topk")
    if negate:
        top = emit(ctx, "scale", [top], values.shape, values.dtype, {"factor": -1.0}, "neg_values")
    return top, emit(ctx, "cast", [index], indices.shape, indices.dtype, name="indices")


def _count_nonzero(ctx):
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    nz = emit_map(ctx, ["compare"], [x], [None], shape=rx.shape, dtype=torch.int32, name="nonzero")
    return ctx.op("reduce_sum", [nz], {"axes": _dims(ctx.arg(1, "dim"), rx.dim()), "keepdims": False})


def _logsumexp(ctx):
    """``logsumexp``: PopTorch's reduceHandler makes PopART's ReduceLogSumExp, whose opx (reducelogsumexpx.cpp)
    runs a MAX reduction, one map ``exp(x - max)``, an ADD reduction and one map ``log(sum) + max``, as the ONNX
    importer prices ReduceLogSumExp."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    dims = _dims(ctx.arg(1, "dim"), rx.dim())
    keep = bool(ctx.arg(2, "keepdim", False))
    shape, dt = tuple(rx.shape), rx.dtype
    m = _reduce_to(ctx, "reduce_max", x, dims, True, shape, dt, "max")
    e = emit_map(ctx, ["sub", "exp"], [x, m], [["exp", "mul"], None], name="exp", shape=shape, dtype=dt)
    s = _reduce_to(ctx, "reduce_sum", e, dims, True, shape, dt, "sum")
    y = emit_map(ctx, ["log", "add"], [s, m], [["div"], None], name="log", shape=_reduced(shape, dims, True), dtype=dt)
    return y if keep else ctx.op("reshape", [y])


def _moments(ctx, x, rx, dims, correction, keep):
    """(variance, mean) graph tensors with kept dims: mean, subtract, square, mean, Bessel scale."""
    shape, dt = tuple(rx.shape), rx.dtype
    mean = _reduce_to(ctx, "reduce_mean", x, dims, True, shape, dt, "mean")
    d = emit(ctx, "sub", [x, mean], shape, dt, name="centred")
    sq = emit(ctx, "mul", [d, d], shape, dt, name="square")
    var = _reduce_to(ctx, "reduce_mean", sq, dims, True, shape, dt, "mean_square")
    n = math.prod(shape[i] for i in dims)
    if correction:
        var = emit(ctx, "scale", [var], _reduced(shape, dims, True), dt,
                   {"factor": n / max(n - correction, 1)}, "bessel")
    return var, mean


def _correction(ctx) -> float:
    if "correction" in ctx.kwargs and ctx.kwargs["correction"] is not None:
        return float(ctx.kwargs["correction"])
    unbiased = ctx.kwargs.get("unbiased")
    if unbiased is None and len(ctx.args) > 1 and isinstance(ctx.args[1], bool):
        unbiased = ctx.args[1]
    return 1.0 if unbiased is None or unbiased else 0.0


def _statistic(which):
    def rule(ctx):
        x, rx = ctx.sarg(0, "input"), ctx.args[0]
        dim = ctx.kwargs.get("dim", ctx.args[1] if len(ctx.args) > 1 and not isinstance(ctx.args[1], bool) else None)
        keep = bool(ctx.kwargs.get("keepdim", False))
        dims = _dims(dim, rx.dim())
        var, mean = _moments(ctx, x, rx, dims, _correction(ctx), keep)
        shape, dt = tuple(rx.shape), rx.dtype
        stat = emit(ctx, "sqrt", [var], _reduced(shape, dims, True), dt, name="std") if "std" in which else var
        outs = ctx.output if isinstance(ctx.output, (tuple, list)) else (ctx.output,)
        values = [stat] + ([mean] if which.endswith("_mean") else [])
        result = tuple(v if keep else ctx.op("reshape", [v], output=o, name="squeeze")
                       for v, o in zip(values, outs))
        return result if isinstance(ctx.output, (tuple, list)) else result[0]
    return rule


def _norm(ctx):
    """Vector norms (and the Frobenius norm) as PopTorch's tensorNormHandler and frobeniusnormHandler
    (ReduceOps.cpp) lower them: 1 and 2 as PopART's ReduceL1 and ReduceL2, inf as abs and max, any other p as
    |x|^p summed, to the power 1/p. Matrix 2- and nuclear norms are unsupported, as in PopTorch."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    key = ctx.key
    if key in ("linalg_matrix_norm", "matrix_norm"):
        p = ctx.arg(1, "ord", "fro")
        dim = ctx.arg(2, "dim", (-2, -1))
    elif key in ("linalg_vector_norm", "vector_norm"):
        p, dim = ctx.arg(1, "ord", 2), ctx.arg(2, "dim")
    else:  # torch.norm(input, p, dim) / linalg.norm(input, ord, dim)
        p = ctx.arg(1, "ord" if key == "linalg_norm" else "p", None)
        dim = ctx.arg(2, "dim")
        if p is None:
            p = "fro" if key == "linalg_norm" and dim is None and rx.dim() == 2 else 2
    if p in ("nuc",) or (key in ("linalg_matrix_norm", "matrix_norm") and p in (2, -2)):
        ctx.unsupported(f"the matrix {p} norm (PopTorch supports vector norms and the Frobenius norm)")
    if p == "fro":
        p = 2
    keep = bool(ctx.arg(3, "keepdim", False))
    return _p_norm(ctx, x, float(p), _dims(dim, rx.dim()), keep, tuple(rx.shape), rx.dtype, last=ctx.op)


def _p_norm(ctx, x, p: float, dims, keep: bool, shape, dt, last):
    """The ops of a vector p-norm of ``x`` over ``dims``; ``last(kind, inputs, attrs)`` makes the
    final op (the node's own result, or an intermediate one)."""
    if math.isinf(p):
        a = emit(ctx, "abs", [x], shape, dt, name="abs")
        return last("reduce_max" if p > 0 else "reduce_min", [a], {"axes": dims, "keepdims": keep})
    if p == 2:  # PopART's ReduceL2Opx: a popops reduce with SQUARE_ADD, then a square root in place
        s = emit(ctx, "reduce_sum", [x], _reduced(shape, dims, keep) or (1,), dt,
                 {"axes": list(dims), "keepdims": bool(keep), "operation": "square_add"}, "sum_square")
        return last("sqrt", [s], {"reduced": "l2"})
    if p == 1:  # ReduceL1Opx: popops abs, then a reduce with ADD
        a = emit(ctx, "abs", [x], shape, dt, name="abs")
        return last("reduce_sum", [a], {"axes": dims, "keepdims": keep, "reduced": "l1"})
    a = emit(ctx, "abs", [x], shape, dt, name="abs")
    e = const(ctx, (1,), dt, "p")
    pw = emit(ctx, "pow", [a, e], shape, dt, name="pow")
    s = _reduce_to(ctx, "reduce_sum", pw, dims, keep, shape, dt, "sum")
    # 1 / p a Reciprocal of the constant (PopART's constant folding has no Reciprocal: ces/constexpr.cpp)
    return last("pow", [s, emit(ctx, "reciprocal", [e], (1,), dt, name="inverse_p")], None)


def _normalize(ctx):
    """F.normalize: ``x / max(||x||_p, eps)`` over ``dim``, as PopTorch lowers it
    (linalg_vector_norm, clamp_min, div)."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    p, dim = float(ctx.arg(1, "p", 2.0)), ctx.arg(2, "dim", 1)
    shape, dt = tuple(rx.shape), rx.dtype
    dims = _dims(dim, rx.dim())
    kept = _reduced(shape, dims, True)
    norm = _p_norm(ctx, x, p, dims, True, shape, dt,
                   last=lambda kind, ins, attrs: emit(ctx, kind, ins, kept, dt, attrs, "norm"))
    floor = emit(ctx, "maximum", [norm, const(ctx, (1,), dt, "eps")], kept, dt, name="clamp_min")
    return ctx.op("div", [x, floor])


def _rms_norm(ctx):
    """F.rms_norm (nn.RMSNorm; torch 2.4 and later, so not in PopTorch 3.4's torch 2.0, where a model writes
    it out by hand) as ATen's composite rms_norm decomposes it, op by op as PopTorch lowers them: a half
    input cast to float32, squared (``at::pow`` by 2: popops POWER, as ``_pow``), its mean over the
    normalised dims, plus eps, rsqrt (a square root and a divide of one, ``rsqrt_inputs``), times the input, times
    the weight (cast to float32 with it), back to the input's dtype."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    normalized = ctx.arg(1, "normalized_shape")
    normalized = (normalized,) if isinstance(normalized, int) else tuple(normalized)
    weight, rw = ctx.sarg(2, "weight"), ctx.arg(2, "weight")
    shape, dt = tuple(rx.shape), rx.dtype
    dims = list(range(rx.dim() - len(normalized), rx.dim()))
    kept = _reduced(shape, dims, True)
    up = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    src = ctx.t(x)
    if up != dt:
        src = emit(ctx, "cast", [src], shape, up, {"to": sim_dtype(up)}, "cast")
    square = emit(ctx, "pow", [src, const(ctx, (1,), up, "two")], shape, up, name="square")  # at::pow(x, 2)
    mean = _reduce_to(ctx, "reduce_mean", square, dims, True, shape, up, "mean")
    mean = emit(ctx, "add", [mean, const(ctx, (1,), up, "eps")], kept, up, name="add_eps")
    inverse = emit(ctx, "div", rsqrt_inputs(ctx, mean, kept, up), kept, up, name="rsqrt")  # at::rsqrt
    if not is_tensor(weight) and up == dt:
        return ctx.op("mul", [src, inverse], name="normalise")
    y = emit(ctx, "mul", [src, inverse], shape, up, name="normalise")
    if is_tensor(weight):
        w = ctx.t(weight)
        if rw.dtype != up:
            w = emit(ctx, "cast", [w], tuple(rw.shape), up, {"to": sim_dtype(up)}, "weight_cast")
        if up == dt:
            return ctx.op("mul", [y, w], name="weight")
        y = emit(ctx, "mul", [y, w], shape, up, name="weight")
    return ctx.op("cast", [y], {"to": sim_dtype(dt)}, name="cast_back")


def _cosine_similarity(ctx):
    """F.cosine_similarity as PopTorch lowers it (``DistanceOps.cpp``): the sum of the products
    over ``dim`` divided by max(sqrt(sum of squares of x1 * sum of squares of x2), eps), each sum of squares a
    ReduceSumSquare (a popops reduce with SQUARE_ADD)."""
    a, b, ra, rb = ctx.sarg(0, "x1"), ctx.sarg(1, "x2"), ctx.args[0], ctx.args[1]
    shape, dt = tuple(torch.broadcast_shapes(ra.shape, rb.shape)), ctx.output.dtype
    (d,) = _dims(ctx.arg(2, "dim", 1), len(shape))
    product = emit(ctx, "mul", [a, b], shape, dt, name="product")
    dot = _reduce_to(ctx, "reduce_sum", product, [d], False, shape, dt, "dot")
    squares = []
    for x, rx, label in ((a, ra, "x1"), (b, rb, "x2")):
        dx = d - (len(shape) - rx.dim())
        if dx < 0:
            ctx.unsupported(f"cosine_similarity of {label} broadcast along the reduced dimension")
        squares.append(emit(ctx, "reduce_sum", [x], _reduced(tuple(rx.shape), [dx], False) or (1,), dt,
                            {"axes": [dx], "keepdims": False, "operation": "square_add", "reduced": "sum_square"},
                            f"sum_squares_{label}"))
    reduced = _reduced(shape, [d], False) or (1,)
    both = emit(ctx, "mul", squares, reduced, dt, name="magnitudes")
    floor = emit(ctx, "maximum", [emit(ctx, "sqrt", [both], reduced, dt, name="sqrt"), const(ctx, (1,), dt, "eps")],
                 reduced, dt, name="max_eps")
    return ctx.op("div", [dot, floor])


def _pairwise_distance(ctx):
    """F.pairwise_distance(x1, x2, p, eps, keepdim): the p-norm of ``x1 - x2 + eps`` over the last
    dimension of their broadcast shape, as ATen composes it (``Distance.cpp``: sub, add of eps,
    norm) and as PopTorch lowers it (``DistanceOps.cpp``: the same sub, add and norm)."""
    a, b, ra, rb = ctx.sarg(0, "x1"), ctx.sarg(1, "x2"), ctx.args[0], ctx.args[1]
    p, keep = float(ctx.arg(2, "p", 2.0)), bool(ctx.arg(4, "keepdim", False))
    shape, dt = tuple(torch.broadcast_shapes(ra.shape, rb.shape)), ctx.output.dtype
    d = emit(ctx, "sub", [a, b], shape, dt, name="difference")
    d = emit(ctx, "add", [d, const(ctx, (1,), dt, "eps")], shape, dt, name="plus_eps")
    return _p_norm(ctx, d, p, [len(shape) - 1], keep, shape, dt, last=ctx.op)  # one pair: the whole vector


def _sort(ctx):
    """sort / argsort / topk / msort: popops' bitonic top-k of each row, with its indices."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    if ctx.key == "topk":
        dim = ctx.arg(2, "dim", -1)
        if ctx.arg(4, "sorted", True) is False:
            ctx.unsupported("topk(sorted=False): PopTorch supports only sorted=True")
    elif ctx.key == "msort":
        dim = 0
    else:
        dim = ctx.arg(1, "dim", -1)
        if isinstance(dim, bool):
            dim = -1
    axis = int(dim if dim is not None else -1) % max(rx.dim(), 1)
    attrs = {"axis": axis, "op": ctx.key} | ({"k": int(ctx.arg(1, "k"))} if ctx.key == "topk" else {})
    return ctx.op("sort", [x], attrs)


def _median(ctx):
    """median (and nanmedian): the middle of each sorted row."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    dim = ctx.arg(1, "dim")
    if dim is None:  # of all elements: one row
        x = emit(ctx, "reshape", [x], (rx.numel(),), rx.dtype, name="flatten")
        dim = 0
    return ctx.op("sort", [x], {"axis": int(dim) % max(rx.dim(), 1), "op": ctx.key})


def _cumsum(ctx):
    """PopTorch's cumsumHandler (popart_canonicalization/ConvolutionOps.cpp): the input cast to the
    output's dtype, the scanned dim moved, a 1-D convolution with a kernel of ones in float32 (an
    integer or half cumsum too), cast back. Priced as the same multiply-adds, the rows times a
    triangular float32 constant."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    dim = int(ctx.arg(1, "dim")) % max(rx.dim(), 1)
    shape, dt = tuple(rx.shape) or (1,), ctx.output.dtype
    n = shape[dim]
    perm = list(range(len(shape)))
    perm[dim], perm[-1] = perm[-1], perm[dim]
    moved = tuple(shape[p] for p in perm)
    src = ctx.t(x)
    if rx.dtype != torch.float32:
        src = emit(ctx, "cast", [src], shape, torch.float32, {"to": "float32"}, "cast")
    if perm != sorted(perm):
        src = emit(ctx, "transpose", [src], moved, torch.float32, {"perm": perm}, "to_last")
    rows = math.prod(moved[:-1])
    flat = emit(ctx, "reshape", [src], (rows, n), torch.float32, name="rows")
    tri = const(ctx, (n, n), torch.float32, "triangular")
    y = emit(ctx, "matmul", [flat, tri], (rows, n), torch.float32, name="cumsum_mul")
    y = emit(ctx, "reshape", [y], moved, torch.float32, name="unflatten")
    if perm != sorted(perm):
        y = emit(ctx, "transpose", [y], shape, torch.float32, {"perm": perm}, "back")
    if dt != torch.float32:
        y = emit(ctx, "cast", [y], shape, dt, {"to": sim_dtype(dt)}, "cast_back")
    return ctx.op("reshape", [y], name="cumsum")


def _cumprod(ctx):
    """PopTorch's cumprodHandler: each slice along dim times the running product, in turn."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    dim = int(ctx.arg(1, "dim")) % max(rx.dim(), 1)
    shape, dt = list(rx.shape), ctx.output.dtype
    piece = list(shape)
    piece[dim] = 1
    run = emit(ctx, "slice", [x], piece, dt, {"axis": dim, "start": 0, "stop": 1}, "slice")
    parts = [run]
    for i in range(1, shape[dim]):
        s = emit(ctx, "slice", [x], piece, dt, {"axis": dim, "start": i, "stop": i + 1}, "slice")
        run = emit(ctx, "mul", [run, s], piece, dt, name="mul")
        parts.append(run)
    return ctx.op("concat", parts, {"axis": dim})


RULES = {
    "all": _reduce("reduce_min"), "any": _reduce("reduce_max"), "prod": _reduce("reduce_prod"),
    "amin": _reduce("reduce_min"), "argmin": _reduce("reduce_min"), "nansum": _reduce("reduce_sum"),
    "nanmean": _reduce("reduce_mean"),
    "max": _extreme("reduce_max", "maximum"), "min": _extreme("reduce_min", "minimum"),
    "count_nonzero": _count_nonzero, "logsumexp": _logsumexp,
    "var": _statistic("var"), "std": _statistic("std"), "var_mean": _statistic("var_mean"),
    "std_mean": _statistic("std_mean"), "correction": _statistic("var"),
    "norm": _norm, "linalg_norm": _norm, "linalg_vector_norm": _norm, "linalg_matrix_norm": _norm,
    "vector_norm": _norm, "matrix_norm": _norm, "frobenius_norm": _norm, "normalize": _normalize,
    "rms_norm": _rms_norm,
    "cosine_similarity": _cosine_similarity, "pairwise_distance": _pairwise_distance,
    "sort": _sort, "argsort": _sort, "topk": _sort, "msort": _sort, "median": _median,
    "nanmedian": _median, "cumsum": _cumsum, "cumprod": _cumprod,
}

