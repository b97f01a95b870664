"""Transposed convolutions priced as poplin runs them: the input gradient of the convolution that
maps the output back to the input (``conv2d_grad_input``), whose worklists skip the stride's
dilation zeros, in the zoo's builder, sim.poptorch and sim.onnx."""

import pytest

import sim
from sim import GraphBuilder
from sim.errors import GraphError


def _options():
    return sim.Options().enableSyntheticData(True)


def _row(run, kind):
    """The op trace's one row of ``kind``."""
    trace = run.op_trace()
    rows = trace[trace["kind"] == kind]
    assert len(rows) == 1, trace[["name", "kind"]]
    return rows.iloc[0]


def _cost(row):
    return int(row["compute"]), int(row["exchange"]), float(row["flops"])


def transposed_graph(n=2, c=256, h=14, co=128, k=3, s=2, p=1, out_pad=1, from_op=False):
    """A transposed convolution of a graph input, or with ``from_op`` of a ReLU's output (an operand laid
    out by another op, which poplin may copy into the plan's layout first, as a backward pass's dY)."""
    b = GraphBuilder("t", "float16")
    x = b.input("x", (n, c, h, h))
    y = b.conv_transpose2d(b.relu(x) if from_op else x, co, k, s, p, out_pad)
    b.output(y)
    return b.graph, y


def test_output_shape_and_weight_layout_follow_pytorch():
    g, y = transposed_graph(h=14, k=3, s=2, p=1, out_pad=1)
    # (H - 1) x stride - 2 x padding + kernel + output_padding = 26 - 2 + 3 + 1
    assert g.tensors[y].shape == (2, 128, 28, 28)
    (op,) = g.ops
    assert op.kind == "conv2d_grad_input"
    assert g.tensors[op.inputs[1]].shape == (256, 128, 3, 3)  # ConvTranspose2d's (in, out / groups, kh, kw)


def test_priced_as_the_input_gradient_of_the_convolution_it_inverts():
    """The cycles and FLOPs of the backward pass of the strided convolution from the output's shape
    back to the input's: the work of the layer, not of a convolution over the upsampled input."""
    g, _ = transposed_graph(from_op=True)  # its input laid out by an op, as the backward pass's dY
    transposed = _row(sim.simulate(g, options=_options()), "conv2d_grad_input")

    b = GraphBuilder("c", "float16")
    x = b.conv2d(b.input("x", (2, 16, 28, 28)), 128, 1, name="below")  # a layer below, so dX is computed
    z = b.conv2d(x, 256, 3, 2, 1, name="strided")
    b.mse_loss(z, b.input("t", (2, 256, 14, 14)))
    backward = _row(sim.simulate(b.graph, options=_options(), training=True), "conv2d_grad_input")

    assert _cost(transposed) == _cost(backward)
    assert transposed["flops"] == 2 * 2 * 256 * 128 * 9 * 14 * 14  # each input element meets each tap once


def test_trains_with_a_convolution_and_a_weight_gradient():
    b = GraphBuilder("t", "float16")
    x = b.conv2d(b.input("x", (2, 8, 14, 14)), 64, 1, name="below")
    y = b.conv_transpose2d(x, 32, 2, 2, bias=True, name="up")
    b.mse_loss(y, b.input("t", (2, 32, 28, 28)))
    ex = sim.compile(b.graph, "ipu-mk2", _options(), training=True)
    ops = {op.name: op for op in ex.graph.ops}
    dx = ops["up/conv2d_grad_input/grad_input"]
    dw = ops["up/conv2d_grad_input/grad_weight"]
    shape = lambda t: ex.graph.tensors[t].shape  # noqa: E731
    assert dx.kind == "conv2d" and shape(dx.outputs[0]) == (2, 64, 14, 14)
    assert dw.kind == "conv2d_grad_weight" and shape(dw.outputs[0]) == (64, 32, 2, 2)
    assert dx.attrs["stride"] == 2 and dw.attrs["ho"] == 14


@pytest.mark.parametrize("kwargs, why", [
    (dict(stride=2, output_padding=2), "output_padding"),
    (dict(stride=(1, 2)), "stride 1x2"),
    (dict(stride=1, padding=3, kernel=2, h=2), "leaves no output"),
])
def test_bad_arguments_are_named(kwargs, why):
    h = kwargs.pop("h", 14)
    b = GraphBuilder("t", "float16")
    args = dict(kernel=2) | kwargs
    with pytest.raises(GraphError, match=why):
        b.conv_transpose2d(b.input("x", (1, 8, h, h)), 8, **args)


torch = pytest.importorskip("torch")


def _torch_run(module, shape):
    import sim.poptorch as poptorch
    opts = poptorch.Options()
    opts.simulatedSystem("ipu-mk2")
    opts.enableSyntheticData(True)
    model = poptorch.inferenceModel(module.half().eval(), opts)
    out = model(torch.zeros(shape, dtype=torch.half))
    return model.simulation, out


def test_poptorch_conv_transpose2d_matches_the_builder():
    run, out = _torch_run(torch.nn.ConvTranspose2d(256, 128, 3, 2, 1, output_padding=1, bias=False),
                          (2, 256, 14, 14))
    assert tuple(out.shape) == (2, 128, 28, 28)
    g, _ = transposed_graph()
    assert _cost(_row(run, "conv2d_grad_input")) == _cost(_row(sim.simulate(g, options=_options()),
                                                                "conv2d_grad_input"))


def test_poptorch_conv_transpose1d_is_a_2d_one_of_height_one():
    run, out = _torch_run(torch.nn.ConvTranspose1d(64, 32, 4, 2, 1, bias=False), (2, 64, 100))
    assert tuple(out.shape) == (2, 32, 200)
    b = GraphBuilder("t", "float16")
    b.output(b.conv_transpose2d(b.input("x", (2, 64, 1, 100)), 32, (1, 4), 2, (0, 1)))
    assert _cost(_row(run, "conv2d_grad_input")) == _cost(_row(sim.simulate(b.graph, options=_options()),
                                                                "conv2d_grad_input"))


def test_poptorch_dilated_conv_transpose_is_refused_as_popart_refuses_it():
    """PopART's ConvTransposeOp::setup throws for a dilated kernel ("Non default value for dilations is not
    supported."), as PopTorch's supported-ops page says: refused, where it was priced by expandDims."""
    import sim.poptorch as poptorch
    for layer, shape in ((torch.nn.ConvTranspose2d(8, 4, 3, 2, dilation=2), (1, 8, 8, 8)),
                         (torch.nn.ConvTranspose1d(8, 4, 3, 2, dilation=2), (1, 8, 8))):
        with pytest.raises(sim.UnsupportedOpError, match="Non default value for dilations is not supported"):
            poptorch.inferenceModel(layer)(torch.randn(*shape))


onnx = pytest.importorskip("onnx")


def _onnx_model(attrs, out_shape):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.zeros((256, 128, 3, 3), np.float16), "w")
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 256, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, out_shape)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    dict(strides=[2, 2], output_shape=[28, 28]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
])
def test_onnx_conv_transpose_matches_the_builder(attrs):
    import sim.onnx
    g = sim.onnx.load(_onnx_model(attrs, [2, 128, 28, 28]))
    (op,) = [o for o in g.ops if o.kind == "conv2d_grad_input"]
    assert g.tensors[op.outputs[0]].shape == (2, 128, 28, 28)
    ref, _ = transposed_graph()
    assert _cost(_row(sim.simulate(g, options=_options()), "conv2d_grad_input")) == _cost(
        _row(sim.simulate(ref, options=_options()), "conv2d_grad_input"))
