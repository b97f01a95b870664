"""The backward ops the simulator's autodiff makes are those PopART's autodiff and its mandatory grad patterns
make (willow/src/transforms/autodiff, willow/src/patterns, willow/src/popx/op), op for op: each is its own
popops call and compute set, so the count and the tensors each reads are what is pinned here."""

from __future__ import annotations

from sim.graph.ir import GraphBuilder
from sim.graph.training import expand_training


def _backward(build, shape=(4, 16)):
    """The backward ops of a graph: ``build(b, x)`` returns the tensor the mean-squared loss is taken of."""
    b = GraphBuilder("net", "float32")
    x = b.linear(b.input("x", shape), shape[-1], bias=False, name="fc")
    b.mse_loss(build(b, x), b.input("target", shape))
    g = expand_training(b.graph, "sgd")
    return g, [op for op in g.ops if op.pass_ == "backward" and not op.name.startswith(("loss", "fc"))]


def _kinds(ops):
    return [op.kind for op in ops]


def test_three_gradients_of_a_tensor_are_summed_in_one_map_two_in_one_add():
    """GradGrowerSumOp: one SumOp per tensor once its contributions are in; SumToAdd makes two an Add, SumOpx
    runs three or more as one popops::map of adds."""
    def three(b, x):
        return b.add(b.add(b.relu(x), b.tanh(x)), b.sigmoid(x))

    g, _ = _backward(three)
    (summed,) = [op for op in g.ops if op.name.endswith("/sum")]
    assert summed.kind == "map" and summed.attrs["steps"] == ["add", "add"] and len(summed.inputs) == 3

    g, _ = _backward(lambda b, x: b.add(b.relu(x), b.tanh(x)))
    assert [op.kind for op in g.ops if op.name.endswith("/sum")] == ["add"]


def test_relu_tanh_and_sigmoid_gradients_read_the_output_gelu_the_input():
    """ReluGradOp, TanhGradOp and SigmoidGradOp take the forward output (GradOpInType::Out); GeluGradOp the input."""
    for kind in ("relu", "tanh", "sigmoid", "gelu"):
        g, ops = _backward(lambda b, x: b.unary(kind, x, name="act"))
        (grad,) = [op for op in ops if op.kind == f"{kind}_grad"]
        forward = next(op for op in g.ops if op.name == "act")
        assert grad.inputs[1] == (forward.inputs[0] if kind == "gelu" else forward.outputs[0]), kind


def test_a_divisors_gradient_is_poparts_four_ops():
    """DivArg1GradOp pattern: square(b), mul(dy, a), div, neg; the dividend's a div of dy by b."""
    _, ops = _backward(lambda b, x: b.div(x, b.sigmoid(x)))
    assert _kinds(ops)[:5] == ["div", "mul", "mul", "div", "scale"]
    square = ops[1]
    assert square.inputs[0] == square.inputs[1] and ops[4].attrs["factor"] == -1


def test_a_mean_gradient_is_a_copy_a_broadcast_view_and_a_divide():
    """ReduceMeanGradOpx: a copy of dy, broadcast (a view), divided by the count over the input's shape."""
    g, ops = _backward(lambda b, x: b.mul(x, b.reduce(x, [1], "reduce_mean", keepdims=True)))
    copy, view, divide = [op for op in ops if op.name.startswith("reduce_mean") and not op.name.endswith("/sum")]
    assert (copy.kind, view.kind, divide.kind) == ("copy", "reshape", "div")
    assert g.tensors[copy.outputs[0]].shape == (4, 1) and g.tensors[divide.outputs[0]].shape == (4, 16)


def test_where_gradients_cast_the_condition_and_multiply():
    """WhereXGradOpx / WhereYGradOpx: the condition (negated for the second) cast to dy's type, a multiply, and
    popops::reduce over no axes, a copy."""
    def where(b, x):
        cond = b.op("compare", [x, b.constant("zero", (1,))], [(4, 16)], out_dtypes=["bool"])[0]
        return b.op("select", [cond, b.relu(x), b.tanh(x)], [(4, 16)])[0]

    _, ops = _backward(where)
    picked = [op.kind for op in ops if op.name.startswith("select")]
    assert picked == ["cast", "mul", "copy", "logical_not", "cast", "mul", "copy"]


def test_max_gradient_is_poparts_sign_map_and_reduce():
    """MaxArgGradOpx: (sign(x - y) + 1) dy, one map, then a reduce over no axes (a copy)."""
    _, ops = _backward(lambda b, x: b.op("maximum", [b.relu(x), b.tanh(x)], [(4, 16)])[0])
    grads = [op for op in ops if op.name.startswith("maximum")]
    assert [op.kind for op in grads] == ["map", "copy", "map", "copy"]
    assert grads[0].attrs["steps"] == ["sub", "sign", "add", "mul"]


def test_a_batch_norms_gradient_reads_its_saved_statistics():
    b = GraphBuilder("cnn", "float16")
    y = b.relu(b.batchnorm(b.conv2d(b.input("x", (2, 3, 8, 8)), 4, 3, padding=1, name="conv")))
    b.mse_loss(y, b.input("target", (2, 4, 8, 8)))
    g = expand_training(b.graph, "sgd")
    bn = next(op for op in g.ops if op.kind == "batchnorm")
    grad = next(op for op in g.ops if op.kind == "batchnorm_grad")
    assert g.tensors[bn.outputs[1]].shape == (2, 4) and grad.inputs[-1] == bn.outputs[1]
    assert bn.outputs[0] not in {i for op in g.ops if op.pass_ == "backward" for i in op.inputs}


def test_unary_gradients_are_poparts_grad_pattern_ops():
    """SqrtGradOp: scale(y, 2) then div; CosGradOp: sin, mul, neg; ErfxGradOpx: five popops calls."""
    expected = {"sqrt": ["scale", "div"], "cos": ["sin", "mul", "scale"], "log": ["div"],
                "erf": ["square", "scale", "exp", "scale", "mul"], "abs": ["sign", "mul"]}
    for kind, kinds in expected.items():
        g, ops = _backward(lambda b, x: b.unary(kind, x, name="f"))
        grads = [op for op in ops if op.name.startswith("f/")]
        assert [op.kind for op in grads] == kinds, kind
    g, ops = _backward(lambda b, x: b.unary("sqrt", x, name="f"))
    forward = next(op for op in g.ops if op.name == "f")
    assert next(op for op in ops if op.name.startswith("f/")).inputs == forward.outputs


def test_a_power_gradient_is_poparts_pattern():
    """PowArg0GradOp: pow(x, e - 1) (e - 1 folded for a constant e), times e, times dy, where(e == 0, 0, .)."""
    def power(b, x):
        return b.op("pow", [x, b.constant("two", (1,))], [(4, 16)])[0]

    _, ops = _backward(power)
    assert [op.kind for op in ops if op.name.startswith("pow/")] == ["pow", "mul", "mul", "compare", "select"]
