"""The codelets of PopART's one-input element-wise expressions, shared by the front ends.

PopART runs each as one fused ``popops::map`` (``willow/src/popx/op``; through PopTorch's handlers for
the torch names): a graph ``map`` op whose ``steps`` are these codelets (``configs/_vector-ops.toml``)
and whose gradient is a map of the second list's codelets. Keyed by torch's name of the function
(``sim.onnx`` maps the ONNX ops PopART has onto them).
"""

from __future__ import annotations

#: name -> (codelets of the expression, codelets of its gradient)
EXPRESSIONS = {
    "acos": (["asin", "scale", "add"], ["square", "sub", "rsqrt", "mul", "scale"]),
    "atan": (["square", "add", "rsqrt", "mul", "asin"], ["square", "add", "div"]),
    "acosh": (["square", "sub", "sqrt", "add", "log"], ["square", "sub", "rsqrt", "mul"]),
    "asinh": (["square", "add", "sqrt", "add", "log"], ["square", "add", "rsqrt", "mul"]),
    "atanh": (["add", "sub", "div", "log", "scale"], ["square", "sub", "div"]),
    "cosh": (["exp", "reciprocal", "add", "scale"], ["exp", "reciprocal", "sub", "scale", "mul"]),
    "sinh": (["exp", "reciprocal", "sub", "scale"], ["exp", "reciprocal", "add", "scale", "mul"]),
    "frac": (["trunc", "sub"], ["copy"]),
    # PopTorch's erfc handler (scripts/PopAtenHandlers.py): 1 - erf(x); its gradient -2/sqrt(pi) exp(-x^2) dy
    "erfc": (["erf", "sub"], ["square", "scale", "exp", "mul", "scale"]),
    "log10": (["log", "scale"], ["div", "scale"]),
    "log2": (["log", "scale"], ["div", "scale"]),
    "mish": (["exp", "log1p", "tanh", "mul"],
             ["exp", "log1p", "tanh", "square", "sigmoid", "mul", "mul", "add", "mul"]),
    "softplus": (["scale", "exp", "log1p", "scale", "compare", "select"], ["scale", "sigmoid", "mul"]),
    "softsign": (["abs", "add", "div"], ["abs", "add", "square", "div"]),
    "elu": (["expm1", "scale", "compare", "select"], ["exp", "scale", "compare", "select", "mul"]),
    "celu": (["scale", "expm1", "scale", "compare", "select"], ["scale", "exp", "compare", "select", "mul"]),
    "selu": (["expm1", "scale", "compare", "select", "scale"], ["exp", "scale", "compare", "select", "mul"]),
    "leaky_relu": (["scale", "compare", "select"], ["compare", "select", "mul"]),
    "rrelu": (["scale", "compare", "select"], ["compare", "select", "mul"]),
    "hardshrink": (["abs", "compare", "select"], ["abs", "compare", "select"]),
    "softshrink": (["abs", "compare", "sign", "scale", "sub", "select"], ["abs", "compare", "select"]),
    "threshold": (["compare", "select"], ["compare", "select"]),
    # PopTorch's handler (ActivationOps.cpp): where(|x| > 3, max(x, 0), x (x + 3) / 6)
    "hardswish": (["maximum", "abs", "compare", "add", "mul", "scale", "select"],
                  ["abs", "compare", "scale", "add", "select", "mul"]),
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
