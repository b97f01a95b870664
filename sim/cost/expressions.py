"""PopART's one-input element-wise functions, shared by the front ends: those it runs as one fused
``popops::map`` (:data:`EXPRESSIONS`) and those that reach it as several ops (:data:`DECOMPOSED`).

A map is a graph ``map`` op whose ``steps`` are the codelets of the expression PopART's opx builds
(``willow/src/popx/op``; ``configs/_vector-ops.toml``) and whose gradient is a map of the second list's
codelets. Keyed by torch's name of the function (``sim.onnx`` maps the ONNX ops PopART has onto them).
"""

from __future__ import annotations

_SELU_GRAD = ["sign", "sub", "div", "exp", "mul", "mul", "sign", "add", "div", "add", "mul", "mul"]

#: name -> (codelets of the expression, codelets of its gradient)
EXPRESSIONS = {
    # PopART's AtanOpx: asin(x / sqrt(1 + x x)); AtanGradOpx: dy / (1 + x x)
    "atan": (["mul", "add", "sqrt", "div", "asin"], ["mul", "add", "div", "mul"]),
    # SinhOpx: (exp(x) - 1 / exp(x)) / 2; SinhGradOpx: dy (exp(x) + 1 / exp(x)) / 2
    "sinh": (["exp", "exp", "div", "sub", "mul"], ["exp", "exp", "div", "add", "mul", "mul"]),
    # PopTorch's eluHandler and seluHandler make both PopART's Selu (alpha, gamma): SeluOpx maps
    # gamma (max(0, x) + min(0, alpha (exp(x) - 1))), SeluGradOpx
    # dy gamma (alpha exp(x) (1 - sign(x)) / 2 + (1 + sign(x)) / 2)
    "elu": (["exp", "sub", "mul", "minimum", "maximum", "add", "mul"], _SELU_GRAD),
    "selu": (["exp", "sub", "mul", "minimum", "maximum", "add", "mul"], _SELU_GRAD),
    # PopTorch's softplusHandler makes its custom TorchSoftplus (custom_operations/TorchSoftplus.cpp), one map:
    # select(log1p(exp(-|x|)) + max(x, 0), x, x <= threshold), its gradient select(dy sigmoid(x), dy, ...); a beta
    # other than 1 adds a multiply before and a divide after (sim.poptorch's rule)
    "softplus": (["abs", "neg", "exp", "log1p", "maximum", "add", "compare", "select"],
                 ["sigmoid", "mul", "compare", "select"]),
    "softsign": (["abs", "add", "div"], ["abs", "add", "square", "div"]),
    "leaky_relu": (["scale", "compare", "select"], ["compare", "select", "mul"]),
    # PopART's HardSigmoid (PopTorch's hardsigmoidHandler gives alpha 1/6, beta 1/2; ONNX's its own):
    # HardSigmoidComputex maps max(0, min(1, alpha x + beta)) (popx/op/hardsigmoidx.cpp), one generated
    # codelet of a Mul, an Add, a Min and a Max of constants; HardSigmoidGradOpx maps
    # dy * alpha * theta(x + beta/alpha) * theta((1 - beta)/alpha - x), each theta (1 + sign(.)) / 2
    "hardsigmoid": (["mul", "add", "minimum", "maximum"],
                    ["add", "sign", "add", "div", "sub", "sign", "add", "div", "mul", "mul", "mul"]),
}

#: PopART's IsInfx (popx/op/isinfx.cpp), ONNX IsInf and PopXL's ``ops.isinf``: x == x and not
#: isfinite(x), a bool with no gradient (PopTorch has no handler for torch.isinf, so it is not above)
ISINF_STEPS = ["compare", "isfinite", "logical_not", "logical"]


#: functions that reach PopART as several ops, each its own popops call and compute set: name -> the ops
#: in order, each ``(graph kind, operand, ...[, attrs])``; an operand is ``"x"`` (the input), the index of
#: an earlier op (its result), or any other string, a one-element constant of the input's type so named.
#: An op of constants only is one element; a ``compare`` is bool. Sources: PopART's ONNX pass
#: (``onnxpasses/nodepatterns/trig.cpp``: Tan, Asinh, Acosh, Acos, Atanh, applied to every graph PopART
#: builds, PopTorch's included; its ``x ** 2`` a Pow of a constant tensor, popops POWER as
#: ``sim.poptorch``'s ``_pow`` says), PopART's CoshOpPattern (``patterns/coshoppattern.cpp``; CoshOp has no
#: opx), and PopTorch's handlers (``AtenHandlers.gen.cpp``: celu, hardshrink, softshrink, threshold,
#: log10, log2, erfc; ``ActivationOps.cpp``: hardswish, mish, rrelu)
DECOMPOSED = {
    "tan": (("sin", "x"), ("cos", "x"), ("div", 0, 1)),
    "asinh": (("pow", "x", "two"), ("add", 0, "one"), ("sqrt", 1), ("add", "x", 2), ("log", 3)),
    "acosh": (("pow", "x", "two"), ("sub", 0, "one"), ("sqrt", 1), ("add", "x", 2), ("log", 3)),
    "acos": (("asin", "x"), ("sub", "half_pi", 0)),
    "atanh": (("add", "one", "x"), ("sub", "one", "x"), ("div", 0, 1), ("log", 2), ("scale", 3, {"factor": 0.5})),
    "cosh": (("exp", "x"), ("scale", "x", {"factor": -1.0}), ("exp", 1), ("add", 0, 2), ("scale", 3, {"factor": 0.5})),
    # add(max(x, 0), min(0, mul(a, expm1(div(x, a)))))
    "celu": (("div", "x", "alpha"), ("expm1", 0), ("mul", "alpha", 1), ("maximum", "x", "zero"),
             ("minimum", "zero", 2), ("add", 3, 4)),
    # where(greater(abs(x), abs(l)), x, 0): abs(l) runs too (PopART's constant folding has no Abs)
    "hardshrink": (("abs", "x"), ("abs", "lambd"), ("compare", 0, 1, {"op": "gt"}), ("select", 2, "x", "zero")),
    # where(less(x, neg(l)), add(x, l), where(greater(x, l), sub(x, l), 0)): neg(l) runs too (no folding of Neg)
    "softshrink": (("scale", "lambd", {"factor": -1.0}), ("compare", "x", 0, {"op": "lt"}), ("add", "x", "lambd"),
                   ("compare", "x", "lambd", {"op": "gt"}), ("sub", "x", "lambd"), ("select", 3, 4, "zero"),
                   ("select", 1, 2, 5)),
    # where(greater(x, threshold), x, value)
    "threshold": (("compare", "x", "threshold", {"op": "gt"}), ("select", 0, "x", "value")),
    # PopTorch's ActivationOps.cpp: hardswishHandler where(|x| > 3, max(x, 0), x (x + 3) / 6); mishHandler
    # x (1 - s²) / (1 + s²), s = sigmoid(-x) (its one a constant of x's shape there, one element here);
    # rreluHandler at inference where(x < 0, x (lower + upper) / 2, x)
    "hardswish": (("maximum", "x", "zero"), ("abs", "x"), ("compare", 1, "three", {"op": "gt"}), ("add", "x", "three"),
                  ("mul", "x", 3), ("div", 4, "six"), ("select", 2, 0, 5)),
    "mish": (("scale", "x", {"factor": -1.0}), ("sigmoid", 0), ("mul", 1, 1), ("sub", "one", 2), ("add", "one", 2),
             ("div", 3, 4), ("mul", "x", 5)),
    "rrelu": (("compare", "x", "zero", {"op": "lt"}), ("mul", "x", "slope"), ("select", 0, 1, "x")),
    "log10": (("log", "x"), ("div", 0, "ln_10")),
    "log2": (("log", "x"), ("div", 0, "ln_2")),
    "erfc": (("erf", "x"), ("sub", "one", 0)),
}


def chain_ops(entries, tensors=("x",)) -> list:
    """A chain of ops written as :data:`DECOMPOSED` writes them (the grad and loss chains of the front ends and the
    autodiff too), each ``(kind, operands, attrs, constants only)``: an operand is a name in ``tensors``, an
    earlier op's index, or a constant's label; an op is of constants only when all its operands are."""
    ops = []
    for entry in entries:
        attrs = entry[-1] if isinstance(entry[-1], dict) else {}
        operands = [a for a in entry[1:] if not isinstance(a, dict)]
        constant = all(ops[a][3] if isinstance(a, int) else a not in tensors for a in operands)
        ops.append((entry[0], operands, attrs, constant))
    return ops
