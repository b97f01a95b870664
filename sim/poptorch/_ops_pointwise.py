"""Op rules: element-wise math, comparisons, activations and random generators.

PopTorch lowers these to PopART element-wise ops, which poplibs runs as popops unary, binary
and ternary codelets or, for an expression of several (``elu``, ``softplus``, ``acosh`` …), as
one fused ``popops::map``. Each becomes one graph op: a kind with a codelet of its own in
``configs/_vector-ops.toml`` (``abs``, ``compare``, ``select``, ``random_normal`` …), or a
``map`` listing the codelets it chains (and those of its gradient, for training).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..cost.expressions import DECOMPOSED, EXPRESSIONS
from ._emit import bernoulli, const, emit, emit_chain, emit_map, is_tensor, operand, out_tensor, per_channel, tensor_args

# torch name -> graph kind with a codelet of its own (popops UnaryOpType)
UNARY = {
    "abs": "abs", "absolute": "abs", "ceil": "ceil", "floor": "floor", "round": "round", "sign": "sign",
    "sgn": "sign", "sqrt": "sqrt", "log": "log", "log1p": "log1p", "expm1": "expm1",
    "sin": "sin", "cos": "cos", "asin": "asin", "arcsin": "asin", "erf": "erf",
    "isnan": "isnan", "logical_not": "logical_not", "bitwise_not": "bitwise_not", "invert": "bitwise_not",
    # PopTorch lowers aten::silu to PopART's Swish (AtenHandlers.gen.cpp siluHandler), one popnn
    # non-linearity
    "silu": "swish",
}

ALIASES = {"arccos": "acos", "arctan": "atan", "arccosh": "acosh", "arcsinh": "asinh", "arctanh": "atanh",
           "_threshold": "threshold"}

# torch name -> graph kind of a two-operand op
BINARY = {
    "maximum": "maximum", "minimum": "minimum",
    "remainder": "remainder", "fmod": "remainder", "mod": "remainder", "atan2": "atan2", "arctan2": "atan2",
    "eq": "compare", "ne": "compare", "gt": "compare", "ge": "compare", "lt": "compare", "le": "compare",
    "greater": "compare", "greater_equal": "compare", "less": "compare", "less_equal": "compare",
    "not_equal": "compare", "logical_and": "logical", "logical_or": "logical",
    "bitwise_and": "bitwise", "bitwise_or": "bitwise", "bitwise_xor": "bitwise",
    "and_": "bitwise", "or_": "bitwise", "xor": "bitwise", "__and__": "bitwise", "__or__": "bitwise",
    "__xor__": "bitwise",
}

# torch name -> graph kind of a random generator (poprand)
RANDOM = {
    "rand": "random_uniform", "rand_like": "random_uniform", "uniform": "random_uniform",
    "randint": "random_uniform", "randint_like": "random_uniform",
    "randn": "random_normal", "randn_like": "random_normal", "normal": "random_normal",
    "normal_functional": "random_normal", "bernoulli": "random_bernoulli", "exponential": "random_uniform",
    "randperm": "random_uniform", "random": "random_uniform",
}


def _dtype(ctx):
    out = out_tensor(ctx)
    return out.dtype if out is not None else torch.float32


def _unary(kind):
    def rule(ctx):
        x = ctx.arg(0, "input")
        if kind == "bitwise_not" and isinstance(x, torch.Tensor) and x.dtype == torch.bool:
            return ctx.op("logical_not", [ctx.sarg(0, "input")])
        return ctx.op(kind, [ctx.sarg(0, "input")])
    return rule


def _expression(name):
    steps, grad = EXPRESSIONS[name]

    def rule(ctx):
        return emit_map(ctx, steps, [ctx.sarg(0, "input")], [grad])
    return rule


def _softplus(ctx):
    """PopTorch's TorchSoftplus map (:data:`~sim.cost.expressions.EXPRESSIONS`), with a multiply by beta before
    and a divide after when beta is not 1."""
    steps, grad = EXPRESSIONS["softplus"]
    beta = ctx.module.beta if ctx.module is not None else ctx.arg(1, "beta", 1.0)
    if beta != 1:
        steps, grad = ["mul"] + steps + ["div"], ["mul"] + grad
    return emit_map(ctx, steps, [ctx.sarg(0, "input")], [grad])


def _rrelu(ctx):
    """PopTorch's rreluHandler: at inference where(x < 0, x times the mean slope, x); in training the slopes are
    a RandomUniform of x's shape first."""
    training = bool(ctx.module.training) if ctx.module is not None else \
        bool(ctx.arg(4 if ctx.key == "rrelu_with_noise" else 3, "training", False))
    if not training:
        return _rrelu_inference(ctx)
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    slopes = emit(ctx, "random_uniform", [], rx.shape, rx.dtype, name="uniform")
    negative = emit(ctx, "compare", [x, const(ctx, (1,), rx.dtype, "zero")], rx.shape, torch.bool, {"op": "lt"}, "less")
    return ctx.op("select", [negative, emit(ctx, "mul", [x, slopes], rx.shape, rx.dtype, name="mul"), x])


def _operands(ctx):
    """The graph tensors of a two-operand op's operands (a number made a one-element constant) and their dtype;
    None when neither is a tensor."""
    a, b = ctx.sarg(0, "input"), ctx.sarg(1, "other")
    if not is_tensor(a) and not is_tensor(b):
        return None
    ra, rb = ctx.arg(0, "input"), ctx.arg(1, "other")
    dt = ra.dtype if isinstance(ra, torch.Tensor) else rb.dtype
    return operand(ctx, a, ra, dt), operand(ctx, b, rb, dt), dt


def _binary(kind):
    def rule(ctx):
        ops = _operands(ctx)
        if ops is None:
            return None
        a, b, dt = ops
        kind_ = "logical" if kind == "bitwise" and dt == torch.bool else kind
        if ctx.key in _COMPARE_OR_EQUAL:
            return _compare_or_equal(ctx, a, b)
        if ctx.key in _NOT_EQUAL:
            return ctx.op("logical_not", [_bool(ctx, "compare", [a, b], "eq")])
        return ctx.op(kind_, [a, b], {"op": ctx.key})
    return rule


#: >= and <= (geHandler, leHandler: three ops, below) -> their strict comparison
_COMPARE_OR_EQUAL = {"ge": "gt", "greater_equal": "gt", "le": "lt", "less_equal": "lt"}
#: != (PopTorch's neHandler: logical_not(equal(x, y)), two ops)
_NOT_EQUAL = {"ne", "not_equal"}


def _bool(ctx, kind: str, inputs: list, name: str) -> str:
    """One bool-valued op of the rule's output shape."""
    return emit(ctx, kind, inputs, out_tensor(ctx).shape, torch.bool, {"op": name}, name)


def _compare_or_equal(ctx, a: str, b: str) -> str:
    """``x >= y`` / ``x <= y``: PopTorch's geHandler / leHandler (AtenHandlers.gen.cpp) make them
    ``logical_or(greater(x, y), equal(x, y))`` (``less`` for ``<=``), three PopART ops, three popops calls."""
    strict = _bool(ctx, "compare", [a, b], _COMPARE_OR_EQUAL[ctx.key])
    return ctx.op("logical", [strict, _bool(ctx, "compare", [a, b], "eq")], {"op": "logical_or"})


def _decomposed(name):
    """A function PopART gets as several ops (:data:`~sim.cost.expressions.DECOMPOSED`), emitted one by one on the
    input's shape and dtype; the last makes the result."""
    def rule(ctx):
        rx = ctx.args[0]
        return emit_chain(ctx, DECOMPOSED[name], {"x": ctx.sarg(0, "input")}, rx.shape, rx.dtype, result=True)
    return rule


_rrelu_inference = _decomposed("rrelu")


def _floor_divide(ctx):
    """``x // y``: PopTorch's floorDivideHandler, ``floor(div(x, y))``, a Div and a Floor."""
    a, b, dt = _operands(ctx)
    return ctx.op("floor", [emit(ctx, "div", [a, b], out_tensor(ctx).shape, dt, name="div")])


def _pow(ctx):
    """``x ** e``: popops POWER, whatever the exponent. PopTorch lowers ``aten::pow`` to PopART's Pow
    (``AtenHandlers.gen.cpp`` powHandler, the exponent a constant tensor), which PopART runs as
    ``popops::pow`` of the two tensors (``powx.cpp``); poplibs turns a power of 2, 0.5, -1 or 1 into a
    square, square root, reciprocal or copy only for a constant written into a map expression
    (``ElementWiseInternal.cpp`` optimiseBinary), not for a tensor exponent, and PopART has no pattern
    that does."""
    x, e = ctx.sarg(0, "input"), ctx.sarg(1, "exponent")
    rx, re_ = ctx.arg(0, "input"), ctx.arg(1, "exponent")
    dt = _dtype(ctx)
    return ctx.op("pow", [operand(ctx, x, rx, dt), operand(ctx, e, re_, dt, "exponent")])


def _where(ctx):
    """``where(condition, a, b)``: popops Select."""
    c, a, b = ctx.sarg(0, "condition"), ctx.sarg(1, "input"), ctx.sarg(2, "other")
    if len(ctx.args) == 1 and "input" not in ctx.kwargs:
        ctx.unsupported("the one-argument form (the indices of non-zero elements) has a shape known "
                        "only at run time; PopTorch needs static shapes")
    rc, ra, rb = ctx.arg(0, "condition"), ctx.arg(1, "input"), ctx.arg(2, "other")
    dt = _dtype(ctx)
    return ctx.op("select", [operand(ctx, c, rc, torch.bool, "condition"), operand(ctx, a, ra, dt),
                             operand(ctx, b, rb, dt)])


def _masked_fill(ctx):
    x, mask, v = ctx.sarg(0, "input"), ctx.sarg(1, "mask"), ctx.sarg(2, "value")
    dt = _dtype(ctx)
    return ctx.op("select", [operand(ctx, mask, ctx.arg(1, "mask"), torch.bool, "mask"),
                             operand(ctx, v, ctx.arg(2, "value"), dt, "value"), x])


def _clamp(ctx):
    """hardtanh (PopTorch's hardtanhHandler: PopART's Clip): popops Clamp. clamp / clip: PopTorch's clampHandler
    makes ``min(max(x, lo), hi)`` (ArithmeticOps.cpp: PopART's Clip takes no integers), a Max then a Min, either
    left out when its bound is."""
    x = ctx.sarg(0, "input")
    hardtanh = ctx.key in ("hardtanh", "hardtanh_") or isinstance(ctx.module, nn.Hardtanh)
    if hardtanh:
        lo, hi = (ctx.module.min_val, ctx.module.max_val) if ctx.module is not None else \
            (ctx.arg(1, "min_val", -1.0), ctx.arg(2, "max_val", 1.0))
        slo = shi = None
    else:
        lo, hi = ctx.arg(1, "min"), ctx.arg(2, "max")
        slo, shi = ctx.sarg(1, "min"), ctx.sarg(2, "max")
    dt = _dtype(ctx)
    if ctx.key in ("clamp_min", "clamp_min_"):
        lo, slo, hi, shi = ctx.arg(1, "min"), ctx.sarg(1, "min"), None, None
    elif ctx.key in ("clamp_max", "clamp_max_"):
        hi, shi, lo, slo = ctx.arg(1, "max"), ctx.sarg(1, "max"), None, None
    if lo is not None and hi is not None:
        if hardtanh:
            return ctx.op("clamp", [x, operand(ctx, slo, lo, dt, "min"), operand(ctx, shi, hi, dt, "max")])
        x = emit(ctx, "maximum", [x, operand(ctx, slo, lo, dt, "min")], out_tensor(ctx).shape, dt, name="max")
        lo = None
    if lo is not None:
        return ctx.op("maximum", [x, operand(ctx, slo, lo, dt, "min")])
    if hi is not None:
        return ctx.op("minimum", [x, operand(ctx, shi, hi, dt, "max")])
    return x


def _addc(ctx):
    """addcdiv / addcmul: PopTorch's addCDivHandler / addCMulHandler, ``add(x, scale(t1 / t2 or t1 * t2, value))``:
    a Div or Mul, a Scale (an identity PopART removes when value is 1) and an Add."""
    x, t1, t2 = ctx.sarg(0, "input"), ctx.sarg(1, "tensor1"), ctx.sarg(2, "tensor2")
    out = out_tensor(ctx)
    value = ctx.arg(3, "value", 1)
    term = emit(ctx, "div" if "div" in ctx.key else "mul", [t1, t2], out.shape, out.dtype, name="product")
    if value != 1:
        term = emit(ctx, "scale", [term], out.shape, out.dtype, {"factor": float(value)}, "scale")
    return ctx.op("add", [x, term])


def _trunc(ctx):
    """``trunc(x)``: PopTorch's truncHandler drops the fraction by casting to int32 and back, two casts;
    ``frac(x)`` (fracHandler) is then ``x - trunc(x)``, a Sub more."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    whole = emit(ctx, "cast", [x], rx.shape, "int32", name="to_int")
    if ctx.key != "frac":
        return ctx.op("cast", [whole])
    return ctx.op("sub", [x, emit(ctx, "cast", [whole], rx.shape, rx.dtype, name="trunc")])


def _prelu(ctx):
    if ctx.module is not None:
        w = ctx.cap._lazy(ctx.module.weight, f"{ctx.node.target}.weight")
    else:
        w = ctx.sarg(1, "weight")
    rank = ctx.args[0].dim()
    if (ctx.shape(w) or (1,))[0] > 1 and rank > 2:  # torch's PReLU weight scales dim 1, the channels
        w = per_channel(ctx, w, rank, "weight_per_channel")
    return emit_map(ctx, ["mul", "compare", "select"], [ctx.sarg(0, "input"), w],
                    [["compare", "select", "mul"], ["compare", "select", "mul"]])


def _glu(ctx):
    """glu(x, dim) = a * sigmoid(b), a and b the halves of x along dim: two slices (views), a
    sigmoid and a multiply."""
    x = ctx.sarg(0, "input")
    dim = ctx.module.dim if ctx.module is not None else ctx.arg(1, "dim", -1)
    rx = ctx.args[0]
    half = list(rx.shape)
    d = int(dim) % rx.dim()
    half[d] //= 2
    dt = rx.dtype
    a = emit(ctx, "slice", [x], half, dt, {"axis": d, "start": 0, "stop": half[d]}, "first_half")
    b = emit(ctx, "slice", [x], half, dt, {"axis": d, "start": half[d], "stop": 2 * half[d]}, "second_half")
    gate = emit(ctx, "sigmoid", [b], half, dt, name="gate")
    return ctx.op("mul", [a, gate])


def _log_sigmoid(ctx):
    """log(sigmoid(x)): PopTorch's ``logSigmoidHandler`` (AtenHandlers.gen.cpp), a Sigmoid and a Log."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    return ctx.op("log", [emit(ctx, "sigmoid", [x], rx.shape, rx.dtype, name="sigmoid")])


def _tanhshrink(ctx):
    """x - tanh(x): torch's Python definition, which PopTorch's dispatcher sees as a tanh and a sub."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    return ctx.op("sub", [x, emit(ctx, "tanh", [x], rx.shape, rx.dtype, name="tanh")])


def _reciprocal(ctx):
    """``reciprocal(x)``: PopART's Reciprocal, which ReciprocalOpx runs as popops DIVIDE of a constant one by x
    (``reciprocalx.cpp``)."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    return ctx.op("div", [const(ctx, (1,), rx.dtype, "one"), x])


def rsqrt_inputs(ctx, x: str, shape, dtype) -> list[str]:
    """The operands of the divide that ends ``rsqrt(x)``, its square root emitted: PopTorch's rsqrtHandler makes
    it ``reciprocal(sqrt(x))`` (AtenHandlers.gen.cpp), two PopART ops, popops SQRT, then DIVIDE of a constant
    one (as ``_reciprocal``; no pattern fuses them into popops' RSQRT)."""
    return [const(ctx, (1,), dtype, "one"), emit(ctx, "sqrt", [x], shape, dtype, name="sqrt")]


def _rsqrt(ctx):
    """``rsqrt(x)``: a square root and a divide of one (:func:`rsqrt_inputs`)."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    return ctx.op("div", rsqrt_inputs(ctx, x, rx.shape, rx.dtype))


def _square(ctx):
    """``square(x)``: PopTorch's squareHandler makes it ``mul(x, x)`` (AtenHandlers.gen.cpp), not popops' SQUARE."""
    x = ctx.sarg(0, "input")
    return ctx.op("mul", [x, x])


def _isinf(ctx):
    """``isinf(x)``: ATen's composite kernel, ``abs(x) == inf``, which the IPU's dispatcher runs op by op
    (PopTorch has no handler of its own for aten::isinf): popops ABS and EQUAL, a bool result."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    magnitude = emit(ctx, "abs", [x], rx.shape, rx.dtype, name="abs")
    return ctx.op("compare", [magnitude, const(ctx, (1,), rx.dtype, "inf")])


def _softmin(ctx):
    """softmax(-x): torch's Python definition, a Neg and a Softmax in PopTorch."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    dim = ctx.module.dim if ctx.module is not None else ctx.arg(1, "dim", -1)
    negated = emit(ctx, "scale", [x], rx.shape, rx.dtype, {"factor": -1.0}, name="neg")
    return ctx.op("softmax", [negated], {"axis": -1 if dim is None else int(dim)})


def _random(ctx):
    """A poprand generator, drawn on the device at every run. Its tensor arguments (a mean, a
    probability) are its inputs; ``exponential`` is -log(uniform) / rate, ``randperm`` the
    order of uniform numbers, ``x.random_(low, high)`` an int32 draw cast to ``x``'s type."""
    kind = RANDOM.get(ctx.key.rstrip("_"), "random_uniform")
    if ctx.key.rstrip("_") == "random":  # randomHandler (OtherOps.cpp): an int32 uniform draw, cast to x's type
        if len(ctx.args) < 3 and "to" not in ctx.kwargs:
            ctx.unsupported("PopTorch's handler for aten::random_ reads both bounds, x.random_(low, high) (a uniform "
                            "integer in [low, high - 1]); give both")
        return ctx.op("cast", [emit(ctx, "random_uniform", [], out_tensor(ctx).shape, "int32", name="uniform")])
    inputs = [ctx.t(s) for s in _tensor_args(ctx)]
    out = out_tensor(ctx)
    if ctx.key.rstrip("_") == "exponential":
        u = emit(ctx, "random_uniform", inputs, out.shape, out.dtype, name="uniform")
        return emit_map(ctx, ["log", "scale"], [u], [None])
    if ctx.key == "randperm":
        u = emit(ctx, "random_uniform", [], out.shape, torch.float32, name="uniform")
        return ctx.op("sort", [u], {"axis": 0})
    if kind == "random_bernoulli":
        return bernoulli(ctx, out.shape, out.dtype, inputs[0] if inputs else const(ctx, (1,), out.dtype, "p"),
                         result=True)
    return ctx.op(kind, inputs)


def _tensor_args(ctx) -> list:
    """Live tensor arguments of a generator, in-place target excluded (its values are replaced)."""
    syms = tensor_args(ctx, live_only=True)
    if ctx.key.endswith("_") and ctx.args and isinstance(ctx.args[0], torch.Tensor) and syms \
            and syms[0] is ctx.sym_args[0]:
        syms = syms[1:]
    return syms


def _distribution_sample(ctx):
    """``torch.distributions`` samplers reach here as their ATen generators."""
    return _random(ctx)


RULES = {
    **{name: _unary(kind) for name, kind in UNARY.items()},
    **{name: _expression(name) for name in EXPRESSIONS},
    **{name: _decomposed(name) for name in DECOMPOSED},
    **{alias: (_decomposed if name in DECOMPOSED else _expression)(name) for alias, name in ALIASES.items()},
    **{name: _binary(kind) for name, kind in BINARY.items()},
    "floor_divide": _floor_divide, "div_floor": _floor_divide, "floordiv": _floor_divide,
    "pow": _pow, "float_power": _pow, "where": _where, "masked_fill": _masked_fill,
    "clamp": _clamp, "clip": _clamp, "clamp_min": _clamp, "clamp_max": _clamp, "hardtanh": _clamp,
    "addcdiv": _addc, "addcmul": _addc, "trunc": _trunc, "fix": _trunc, "frac": _trunc,
    "prelu": _prelu, "_prelu_kernel": _prelu, "glu": _glu,
    "rrelu_with_noise": _rrelu, "rrelu": _rrelu, "softplus": _softplus,
    "log_sigmoid": _log_sigmoid, "logsigmoid": _log_sigmoid, "log_sigmoid_forward": _log_sigmoid,
    "tanhshrink": _tanhshrink, "softmin": _softmin, "isinf": _isinf, "square": _square,
    "reciprocal": _reciprocal, "rsqrt": _rsqrt,
    **{name: _random for name in RANDOM},
}

MODULE_RULES = {
    nn.ELU: _expression("elu"), nn.CELU: _decomposed("celu"), nn.SELU: _expression("selu"),
    nn.SiLU: _unary("swish"), nn.Mish: _decomposed("mish"), nn.Softplus: _softplus,
    nn.Softsign: _expression("softsign"), nn.Hardshrink: _decomposed("hardshrink"),
    nn.Softshrink: _decomposed("softshrink"), nn.LeakyReLU: _expression("leaky_relu"),
    nn.RReLU: _rrelu, nn.Threshold: _decomposed("threshold"), nn.Hardtanh: _clamp,
    nn.PReLU: _prelu, nn.GLU: _glu, nn.Hardswish: _decomposed("hardswish"),
    nn.Hardsigmoid: _expression("hardsigmoid"), nn.LogSigmoid: _log_sigmoid, nn.Tanhshrink: _tanhshrink,
    nn.Softmin: _softmin,
}

#: generators are drawn on the device at every run, never folded into constants
NEVER_FOLDED = set(RANDOM) | {name + "_" for name in RANDOM}

