"""2-D windows with a different height and width: Inception-v3's factorised 1x7 / 7x1 convolutions,
their padding per axis, non-square pools, through the graph builder, the cost rules and the ONNX,
PyTorch and PopXL front ends."""

from __future__ import annotations

import numpy as np
import pytest

import sim
from sim import poplibs_benchmarks as pb
from sim.cost.rules import op_cost
from sim.errors import GraphError
from sim.graph import GraphBuilder, spatial, spatial_attr


def _conv_graph(kernel, padding, stride=1, field=(17, 17), cin=16, cout=32):
    b = GraphBuilder("g", "float16")
    x = b.input("x", (2, cin) + field)
    y = b.conv2d(x, cout, kernel, stride, padding, name="c")
    b.output(y)
    return b.graph, y


def test_spatial_reads_one_int_or_a_pair_and_attributes_keep_a_square_window_as_its_int():
    assert spatial(3) == (3, 3) and spatial((1, 7)) == (1, 7) and spatial([5, 2]) == (5, 2)
    assert spatial_attr((3, 3)) == 3 and spatial_attr((1, 7)) == [1, 7] and spatial_attr(2) == 2
    with pytest.raises(GraphError, match=r"kernel \(1, 2, 3\): give one int or a \(height, width\) pair"):
        spatial((1, 2, 3))


def test_conv2d_takes_a_kernel_and_padding_per_axis():
    g, y = _conv_graph((1, 7), (0, 3))
    op = g.ops[0]
    assert g.tensors[y].shape == (2, 32, 17, 17)  # "same" padding along each axis
    assert g.tensors["c/weight"].shape == (32, 16, 1, 7)
    assert (op.attrs["kernel"], op.attrs["padding"], op.attrs["stride"]) == ([1, 7], [0, 3], 1)
    # a square window keeps the attributes it always had, so square graphs are unchanged
    sq, _ = _conv_graph(3, 1)
    assert (sq.ops[0].attrs["kernel"], sq.ops[0].attrs["padding"]) == (3, 1)
    # unpadded 7x1 on a 17x20 field: 11 rows, 20 columns
    g2, y2 = _conv_graph((7, 1), 0, field=(17, 20))
    assert g2.tensors[y2].shape == (2, 32, 11, 20)


def test_conv2d_refuses_a_stride_that_differs_between_axes():
    with pytest.raises(GraphError, match=r"conv c: stride 1x2 differs along the two axes"):
        _conv_graph(3, 1, stride=(1, 2))


def test_a_1x7_kernel_costs_its_own_multiply_adds_not_a_square_kernels():
    mk2 = sim.load_system("ipu-mk2")
    costs = {}
    for kernel, padding in (((1, 7), (0, 3)), ((7, 1), (3, 0)), (3, 1)):
        g, _ = _conv_graph(kernel, padding)
        costs[str(kernel)] = op_cost(g.ops[0], g, mk2.ipu, mk2.ipu.tiles)
    positions = 2 * 17 * 17
    assert costs["(1, 7)"].flops == costs["(7, 1)"].flops == 2 * positions * 16 * 7 * 32
    assert costs["3"].flops == 2 * positions * 16 * 9 * 32
    assert all(c.cycles > 0 for c in costs.values())


def test_inception_factorised_convolutions_are_poplibs_benchmarks():
    bench = pb.BENCHES["inception_tr_bs4_i5_b1x7"]
    g = pb.graph(bench)
    kinds = {op.kind: op for op in g.ops}
    assert g.tensors["prevAct"].shape == (4, 128, 17, 17)
    assert kinds["conv2d"].attrs["kernel"] == [1, 7] and kinds["conv2d_grad_weight"].attrs["padding"] == [0, 3]
    assert g.tensors["fwd/weight"].shape == (128, 128, 1, 7)
    wide = pb.graph(pb.BENCHES["conv_5x200_1_in_100_out_bs1440"])
    assert wide.tensors["prevAct"].shape == (1440, 1, 15, 200)
    assert wide.tensors[wide.ops[0].outputs[0]].shape == (1440, 100, 11, 1)


def test_onnx_conv_and_pools_keep_their_window_per_axis():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    import sim.onnx

    def load(nodes, inits=()):
        m = h.make_model(h.make_graph(nodes, "t", [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 17, 17])],
                                      [h.make_tensor_value_info("y", T.FLOAT, None)], list(inits)),
                         opset_imports=[h.make_opsetid("", 17)])
        return sim.onnx.load(m)

    w = nh.from_array(np.zeros((8, 8, 1, 7), np.float32), "w")
    g = load([h.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[0, 3, 0, 3])], [w])
    assert (g.ops[0].attrs["kernel"], g.ops[0].attrs["padding"]) == ([1, 7], [0, 3])
    assert g.tensors["y"].shape == (1, 8, 17, 17)
    uneven = load([h.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[0, 3, 0, 2])], [w])  # expandDims
    assert [op.kind for op in uneven.ops] == ["copy", "conv2d", "reshape"] and uneven.tensors["y"].shape == (1, 8, 17, 16)
    pool = load([h.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[3, 1], strides=[2, 1])])
    assert (pool.ops[0].attrs["kernel"], pool.ops[0].attrs["stride"]) == ([3, 1], [2, 1])
    assert pool.tensors["y"].shape == (1, 8, 8, 17)


def test_poptorch_conv2d_with_a_tuple_kernel_is_priced_as_it_is():
    torch = pytest.importorskip("torch")
    import sim.poptorch as poptorch

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 16, (1, 7), padding=(0, 3), bias=False)
    x = torch.randn(2, 8, 17, 17)
    model = poptorch.inferenceModel(conv)
    torch.testing.assert_close(model(x), conv(x), rtol=0, atol=0)
    op = next(o for o in model.executable.graph.ops if o.kind == "conv2d")
    assert (op.attrs["kernel"], op.attrs["padding"]) == ([1, 7], [0, 3])
    assert model.executable.costs[op.name].flops == 2 * (2 * 17 * 17) * 8 * 7 * 16
    assert not any("priced as" in n for n in model.executable.notes)


def test_popxl_conv_takes_a_non_square_kernel_and_padding_per_axis():
    from sim import popxl
    from sim.popxl import ops

    ir = popxl.Ir()
    with ir.main_graph:
        img = popxl.variable((2, 8, 17, 17), popxl.float16)
        y = ops.conv(img, popxl.variable((16, 8, 7, 1), popxl.float16), padding=(3, 0, 3, 0))
        assert y.shape == (2, 16, 17, 17)
        with pytest.raises(popxl.errors.NotModelledError, match="the same padding before and after each axis"):
            ops.conv(img, popxl.variable((16, 8, 7, 1), popxl.float16), padding=(3, 0, 2, 0))
    op = next(o for o in ir.main_graph.sim_graph.ops if o.kind == "conv2d")
    assert (op.attrs["kernel"], op.attrs["padding"]) == ([7, 1], [3, 0])


def test_poptorch_dilated_conv_is_priced_as_the_undilated_kernel_and_noted():
    torch = pytest.importorskip("torch")
    import sim.poptorch as poptorch

    model = poptorch.inferenceModel(torch.nn.Conv2d(4, 4, 3, dilation=2, padding=2))
    model(torch.randn(1, 4, 9, 9))
    assert [n for n in model.executable.notes if "dilated" in n] == [
        "1 convolution(s) with a dilated kernel (e.g. conv2d): priced as the undilated kernel with the padding that "
        "keeps the output field (the same multiply-adds; the wider input window's extra rows and columns are not "
        "exchanged)"]
