"""Rules for ONNX's element-wise ops: arithmetic (a multiply by a constant scalar is PopART's
Scale; a divide by one is popops' DIVIDE), popops' unary codelets and map expressions (activations
included), comparisons and logical ops, Where, Clip, Max/Min, Sum/Mean, casts, Identity, Dropout, the
trigonometric ops PopART's ONNX pass rewrites (and Cosh, its CoshOpPattern), and poprand's random
generators. :data:`RULES` holds them by op type."""

from __future__ import annotations

import numpy as np

from ..cost.expressions import DECOMPOSED, EXPRESSIONS, ISINF_STEPS, chain_ops
from ..errors import GraphError
from ._context import OpContext
from ._values import _broadcast


def _scalar(ctx: OpContext, i: int):
    """Input ``i`` as a Python float when it is a one-element constant, else None."""
    v = ctx.value(i)
    if v is None or np.asarray(v).size != 1:
        return None
    return float(np.asarray(v).reshape(-1)[0])


def _scalar_const(ctx: OpContext, label: str) -> str:
    imp = ctx._imp
    name = imp.g.unique_tensor_name(f"{ctx.name}/{label}")
    imp.g.add_tensor(name, (1,), ctx.dtype(0), "constant")
    return name


def _binary(kind: str):
    def rule(ctx: OpContext):
        out = _broadcast(ctx.shape(0), ctx.shape(1))
        if kind == "mul":  # by a constant scalar: one scale op, as PopART's Scale
            for i in (1, 0):
                c = _scalar(ctx, i)
                if c is not None:
                    return ctx.op("scale", [ctx.input(1 - i)], {"factor": c}, shapes=[out],
                                  dtypes=[ctx.dtype(1 - i)])
        # a Div by a constant stays a divide: PopART's DivOpx is popops' DIVIDE of the one-element constant (no
        # PopART pattern makes it a multiply), as sim.poptorch prices torch's x / c and the zoo BERT's divide_scores
        return ctx.op(kind, [ctx.input(0), ctx.input(1)], shapes=[out],
                      dtypes=[ctx.dtype(1) if ctx.value(0) is not None else ctx.dtype(0)])
    return rule


def _unary(kind: str, **attrs):
    def rule(ctx: OpContext):
        return ctx.op(kind, [ctx.input(0)], dict(attrs), shapes=[ctx.shape(0)])
    return rule


def _gelu(ctx: OpContext):
    """Gelu (opset 20): the tanh form (``approximate="tanh"``) as popnn's GELU, PopART's Gelu; the exact one (the
    default, "none") as PopART runs the exact GELU, its GeluErf (popops' GELU_ERF vertex)."""
    form = ctx.attr("approximate", "none")
    if form not in ("none", "tanh"):
        raise GraphError(f"{ctx.desc}: approximate {form!r}: ONNX's Gelu takes \"none\" or \"tanh\"")
    return ctx.op("gelu" if form == "tanh" else "gelu_erf", [ctx.input(0)], shapes=[ctx.shape(0)])


def _swish(ctx: OpContext):
    """Swish (opset 24), ``x * sigmoid(alpha * x)``: at ``alpha`` 1 (the default) PopART's Swish op (ai.graphcore's,
    popnn's SWISH non-linearity), as Gelu is PopART's Gelu; another ``alpha`` as the ops PopART would run for it,
    the scale, the sigmoid and the product."""
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha == 1.0:
        return ctx.op("swish", [ctx.input(0)], shapes=[ctx.shape(0)])
    scaled = ctx.op("scale", [ctx.input(0)], {"factor": alpha}, shapes=[ctx.shape(0)])
    gate = ctx.op("sigmoid", [scaled], shapes=[ctx.shape(0)])
    return ctx.op("mul", [ctx.input(0), gate], shapes=[ctx.shape(0)])


def _expression(steps: list[str], grad: list[str], onnx_op: str):
    """An op PopART runs as one popops map expression (``steps``: its codelets; ``grad``: those of
    its input gradient's expression)."""
    def rule(ctx: OpContext):
        return ctx.op("map", [ctx.input(0)], {"steps": list(steps), "grad": [list(grad)], "onnx_op": onnx_op},
                      shapes=[ctx.shape(0)])
    return rule


#: PopART's expressions (willow/src/popx/op): SoftPlusOpx max(x, 0) + log(1 + exp(-|x|)) and its gradient
#: sigmoid(x) times dy; HardSigmoidOpx max(0, min(1, alpha x + beta)) and its gradient, dy where the
#: argument is inside (0, 1); HardSwish (ONNX: x times HardSigmoid(x) at alpha 1/6, beta 1/2) as that
#: expression times x
_SOFTPLUS = _expression(["maximum", "abs", "exp", "add", "log", "add"], ["sigmoid", "mul"], "Softplus")
_HARD_SIGMOID = _expression(["mul", "add", "minimum", "maximum"], ["mul", "add", "compare", "mul"], "HardSigmoid")
#: EluOpx: Selu's expression without gamma; ThresholdedReluOpx: select(0, x, x <= alpha), its gradient dy where
#: x > alpha; ShrinkOpx: select(x + bias, select(x - bias, 0, x > lambd), x < -lambd), its gradient
#: dy (1 + sign(|x| - lambd)) / 2
_ELU = _expression(EXPRESSIONS["selu"][0][:-1], EXPRESSIONS["selu"][1][:-1], "Elu")
_THRESHOLDED_RELU = _expression(["compare", "select"], ["compare", "select", "mul"], "ThresholdedRelu")
_SHRINK = _expression(["add", "sub", "compare", "select", "compare", "select"],
                      ["abs", "sub", "sign", "add", "mul", "mul"], "Shrink")
_HARD_SWISH = _expression(["mul", "add", "minimum", "maximum", "mul"], ["mul", "add", "compare", "mul", "add", "mul"],
                          "HardSwish")


def _compare(ctx: OpContext):
    """A comparison (popops' EQUAL, LESS_THAN, ... binary ops) or a logical op (LOGICAL_AND / OR / XOR,
    LOGICAL_NOT), bool results."""
    out = _broadcast(*[ctx.shape(i) for i in range(ctx.num_inputs)])
    kind = {"Not": "logical_not", "And": "logical", "Or": "logical"}.get(ctx.op_type, "compare")
    return ctx.op(kind, ctx.inputs, {"onnx_op": ctx.op_type}, shapes=[out], dtypes=["bool"])


def _minmax(ctx: OpContext):
    """Element-wise Max / Min of two or more tensors: popops' MAXIMUM / MINIMUM, one binary op per
    further operand (PopART's MaxOpx and MinOpx)."""
    kind = "maximum" if ctx.op_type == "Max" else "minimum"
    ins = ctx.inputs
    y = ins[0]
    shape = ctx.shape(0)
    for i in range(1, len(ins)):
        shape = _broadcast(shape, ctx.shape(i))
        last = i == len(ins) - 1
        y = ctx.op(kind, [y, ins[i]], {"onnx_op": ctx.op_type}, shapes=[shape], result=last,
                   suffix=f"{ctx.op_type.lower()}{i}", dtypes=[ctx.dtype(0)])
    return y


def _where(ctx: OpContext):
    """Where(condition, x, y): popops' Select."""
    out = _broadcast(ctx.shape(0), ctx.shape(1), ctx.shape(2))
    return ctx.op("select", [ctx.input(0), ctx.input(1), ctx.input(2)], {"onnx_op": "Where"}, shapes=[out],
                  dtypes=[ctx.dtype(1) if ctx.value(1) is None else ctx.dtype(2)])


def _neg(ctx: OpContext):
    return ctx.op("scale", [ctx.input(0)], {"factor": -1.0}, shapes=[ctx.shape(0)])


def _reciprocal(ctx: OpContext):
    return ctx.op("div", [_scalar_const(ctx, "one"), ctx.input(0)], shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _sqrt(ctx: OpContext):
    return ctx.op("sqrt", [ctx.input(0)], {"onnx_op": "Sqrt"}, shapes=[ctx.shape(0)])


def _erf(ctx: OpContext):
    # popops' ERF; an exported GELU x * 0.5 * (1 + erf(x / sqrt 2)) stays as its element-wise ops
    return ctx.op("erf", [ctx.input(0)], {"onnx_op": "Erf"}, shapes=[ctx.shape(0)])


def _pow(ctx: OpContext):
    # PopART's PowOpx is popops::pow of the exponent tensor, the POWER vertex whatever its value: no pattern
    # makes a constant 2 a multiply (poplibs specialises 2, 0.5, -1 and 1 only for map-expression constants)
    out = _broadcast(ctx.shape(0), ctx.shape(1))
    return ctx.op("pow", [ctx.input(0), ctx.input(1)], {"onnx_op": "Pow"}, shapes=[out], dtypes=[ctx.dtype(0)])


def _cast(ctx: OpContext):
    to = ctx.dtype(1) if ctx.op_type == "CastLike" else ctx._imp.sim_dtype(ctx.attr("to"), ctx.desc)
    if to == ctx.dtype(0):
        return ctx.input(0)
    return ctx.op("cast", [ctx.input(0)], {"to": to}, shapes=[ctx.shape(0)], dtypes=[to])


def _identity(ctx: OpContext):
    return ctx.input(0)


def _dropout(ctx: OpContext):
    """Dropout. From opset 12 its ``training_mode`` input decides. Before, the node has no flag (opset 6's
    ``is_test`` PopART does not read): PopART's DropoutOp (opsets 6, 7, 10) drops in a training session and is an
    identity in an inference one, so the op is kept for the compiler, which runs it only in training (a PopART
    builder's model, saved at its default opset, trains with its dropout)."""
    if ctx.opset >= 12:
        ratio = _scalar(ctx, 1) if ctx.has_input(1) else 0.5
        training = _scalar(ctx, 2) if ctx.has_input(2) else 0.0
        if ctx.has_input(2) and training is None:
            ctx.unsupported("training_mode is computed at run time")
    else:
        ratio, training = float(ctx.attr("ratio", 0.5)), 1.0
    if not training or not ratio:
        return [ctx.input(0), None]
    return [ctx.op("dropout", [ctx.input(0)], {"p": float(ratio)}, shapes=[ctx.shape(0)]), None]


def _clip(ctx: OpContext):
    """Clip: popops' Clamp of the input between its min and max (PopART's ClipOpx); a bound not given
    is a constant."""
    bounds = [ctx.input(i) if ctx.has_input(i) else _scalar_const(ctx, label) for i, label in ((1, "min"), (2, "max"))]
    return ctx.op("clamp", [ctx.input(0)] + bounds, {"onnx_op": "Clip"}, shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


#: ONNX ops PopART runs as one popops unary codelet, and the graph kind of that codelet
_UNARY_KINDS = {"Abs": "abs", "Ceil": "ceil", "Floor": "floor", "Round": "round", "Sign": "sign", "Log": "log",
                "Sin": "sin", "Cos": "cos", "Asin": "asin", "IsNaN": "isnan",
                "BitwiseNot": "bitwise_not"}
#: ONNX ops PopART runs as one popops map expression, by their name in sim.cost.expressions
_EXPRESSION_OPS = {"Selu": "selu", "Softsign": "softsign", "Atan": "atan", "Sinh": "sinh"}


def _named_expression(ctx: OpContext):
    steps, grad = EXPRESSIONS[_EXPRESSION_OPS[ctx.op_type]]
    return _expression(steps, grad, ctx.op_type)(ctx)


def _decomposed(ctx: OpContext):
    """Tan, Asinh, Acosh, Acos, Atanh (PopART's ONNX pass) and Cosh (its CoshOpPattern), which PopART runs as
    several ops, each its own compute set (:data:`~sim.cost.expressions.DECOMPOSED`)."""
    x, xs, dt, op = ctx.input(0), ctx.shape(0), ctx.dtype(0), ctx.op_type
    ops, made = chain_ops(DECOMPOSED[op.lower()]), []
    for i, (kind, operands, attrs, constant) in enumerate(ops):
        inputs = [x if a == "x" else made[a] if isinstance(a, int) else _scalar_const(ctx, a) for a in operands]
        made.append(ctx.op(kind, inputs, dict(attrs, onnx_op=op), shapes=[(1,) if constant else xs], dtypes=[dt],
                           result=i == len(ops) - 1, suffix=f"{kind}{i + 1}"))
    return made[-1]


def _binary_kind(kind: str):
    """A two-operand op with a popops codelet of its own (Mod: remainder; the bitwise ops)."""
    def rule(ctx: OpContext):
        return ctx.op(kind, [ctx.input(0), ctx.input(1)], {"onnx_op": ctx.op_type},
                      shapes=[_broadcast(ctx.shape(0), ctx.shape(1))], dtypes=[ctx.dtype(0)])
    return rule


def _prelu(ctx: OpContext):
    """PRelu (PopART's PReluOpx): x where positive, else x times the slope, one map; the slope's
    gradient the same selection times x."""
    out = _broadcast(ctx.shape(0), ctx.shape(1))
    return ctx.op("map", [ctx.input(0), ctx.input(1)],
                  {"steps": ["compare", "mul", "select"], "grad": [["compare", "mul", "select"], ["compare", "mul", "select"]],
                   "onnx_op": "PRelu"}, shapes=[out], dtypes=[ctx.dtype(0)])


def _sum_mean(ctx: OpContext):
    """Sum and Mean of several tensors: PopART's SumOpx, one popops map of a balanced tree of adds
    (Mean: then a scale); each input's gradient is the output's (scaled for Mean)."""
    live = [i for i in range(ctx.num_inputs) if ctx.has_input(i)]
    if len(live) == 1:
        return ctx.input(live[0])
    out = _broadcast(*[ctx.shape(i) for i in live])
    steps = ["add"] * (len(live) - 1) + (["scale"] if ctx.op_type == "Mean" else [])
    grad = ["scale"] if ctx.op_type == "Mean" else ["copy"]
    return ctx.op("map", [ctx.input(i) for i in live], {"steps": steps, "grad": [grad] * len(live),
                                                        "onnx_op": ctx.op_type},
                  shapes=[out], dtypes=[ctx.dtype(live[0])])


def _random(ctx: OpContext):
    """RandomNormal / RandomUniform (their shape an attribute), the ...Like forms (the input's shape)
    and Bernoulli: poprand's generators (PopART's RandomNormalOpx, RandomUniformOpx)."""
    kind = {"RandomNormal": "random_normal", "RandomNormalLike": "random_normal", "RandomUniform": "random_uniform",
            "RandomUniformLike": "random_uniform", "Bernoulli": "random_bernoulli"}[ctx.op_type]
    if ctx.op_type in ("RandomNormal", "RandomUniform"):
        shape = tuple(int(d) for d in ctx.attr("shape"))
        return ctx.op(kind, [], {"onnx_op": ctx.op_type}, shapes=[shape],
                      dtypes=[ctx.output_dtype(0) or ctx._imp.float_dtype("float32")])
    return ctx.op(kind, [ctx.input(0)], {"onnx_op": ctx.op_type}, shapes=[ctx.shape(0)],
                  dtypes=[ctx.output_dtype(0) or ctx.dtype(0)])


RULES: dict = {
    "Add": _binary("add"), "Sub": _binary("sub"), "Mul": _binary("mul"), "Div": _binary("div"),
    "Relu": _unary("relu"), "Gelu": _gelu, "Swish": _swish, "Tanh": _unary("tanh"), "Sigmoid": _unary("sigmoid"),
    "Exp": _unary("exp"), "Sqrt": _sqrt, "Erf": _erf, "Pow": _pow, "Neg": _neg, "Reciprocal": _reciprocal,
    "LeakyRelu": _expression(*EXPRESSIONS["leaky_relu"], "LeakyRelu"), "IsInf": _expression(ISINF_STEPS, [], "IsInf"),
    "Elu": _ELU, "ThresholdedRelu": _THRESHOLDED_RELU, "Shrink": _SHRINK,
    "Softplus": _SOFTPLUS, "HardSigmoid": _HARD_SIGMOID, "HardSwish": _HARD_SWISH,
    "Clip": _clip, "Where": _where, "Max": _minmax, "Min": _minmax,
    **{k: _compare for k in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or")},
    "Cast": _cast, "CastLike": _cast, "Identity": _identity, "Dropout": _dropout,
    # more of PopART's ops
    **{k: _unary(kind, onnx_op=k) for k, kind in _UNARY_KINDS.items()},
    **{k: _named_expression for k in _EXPRESSION_OPS},
    "Mod": _binary_kind("remainder"), "BitwiseAnd": _binary_kind("bitwise"), "BitwiseOr": _binary_kind("bitwise"),
    "BitwiseXor": _binary_kind("bitwise"), "PRelu": _prelu, "Sum": _sum_mean, "Mean": _sum_mean,
    **{k: _random for k in ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli")},
    **{k: _decomposed for k in ("Tan", "Asinh", "Acosh", "Acos", "Atanh", "Cosh")},
}
