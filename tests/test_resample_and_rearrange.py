"""Bilinear upsampling (PopTorch's UpsampleBilinear2d custom op, sim/cost/bilinear.py); pixel
shuffle / ONNX DepthToSpace and SpaceToDepth (PopART's reshape, transpose, reshape); F.unfold,
Tensor.unfold and F.fold (PopTorch's im2col and col2im)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

import sim  # noqa: E402
import sim.onnx  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402
from sim.cost import op_cost  # noqa: E402
from sim.cost.bilinear import FORWARD_STEPS, grad_vertex_cycles  # noqa: E402
from sim.poptorch._ops_layers import poptorch_bilinear_shape  # noqa: E402
from sim.cost.vector import codelet  # noqa: E402
from sim.graph.ir import GraphBuilder  # noqa: E402

MK2 = sim.load_system("ipu-mk2").ipu
TILES = 1472


class Head(nn.Module):
    """A convolution, then ``up`` on its output, then a sum (the loss in training)."""

    def __init__(self, up, channels):
        super().__init__()
        self.conv, self.up = nn.Conv2d(channels, channels, 3, padding=1), up

    def forward(self, x):
        return poptorch.identity_loss(self.up(self.conv(x)), "sum")


def _graph(up, x, training=False):
    model = Head(up, x.shape[1])
    if training:
        m = poptorch.trainingModel(model, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    else:
        m = poptorch.inferenceModel(model)
    m(x)
    return m.executable.graph


def _costs(in_shape, scale, dtype="float16"):
    n, c, hi, wi = in_shape
    b = GraphBuilder("up", dtype)
    y = b.op("upsample_bilinear", [b.input("x", in_shape)], [(n, c, hi * scale, wi * scale)], {"scale": scale})[0]
    b.op("upsample_bilinear_grad", [y], [in_shape], {"scale": scale})
    return [op_cost(op, b.graph, MK2, TILES) for op in b.graph.ops]


# --- bilinear upsampling -----------------------------------------------------------------------

def test_bilinear_upsampling_is_poptorchs_custom_op_and_trains():
    up = lambda t: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=True)  # noqa: E731
    g = _graph(up, torch.randn(2, 8, 6, 6), training=True)
    (fwd,) = [op for op in g.ops if op.kind == "upsample_bilinear"]
    assert g.tensors[fwd.outputs[0]].shape == (2, 8, 12, 12)
    assert fwd.attrs["align_corners"] is True and fwd.attrs["scale"] == 2
    (grad,) = [op for op in g.ops if op.kind == "upsample_bilinear_grad"]
    assert grad.inputs[0] in {t for op in g.ops if op.pass_ == "backward" for t in op.outputs}
    assert g.tensors[grad.outputs[0]].shape == (2, 8, 6, 6)
    # an output size whose height and width scale alike is taken, fractional scales too (6 -> 9, 10 -> 15)
    sized = _graph(lambda t: F.interpolate(t, size=(9, 15), mode="bilinear"), torch.randn(1, 8, 6, 10))
    (op,) = [op for op in sized.ops if op.kind == "upsample_bilinear"]
    assert sized.tensors[op.outputs[0]].shape == (1, 8, 9, 15) and op.attrs["scale"] == 1.5


def test_a_size_poptorchs_one_scale_factor_cannot_make_is_refused():
    """upsampleBilinear2dHandler passes the height's scale alone, as std::to_string's six decimals, and the custom
    op scales both axes by it in float: (9, 15) from 6 x 6 would come out 9 x 9, and 7 from 3 (2.333333) 6."""
    assert poptorch_bilinear_shape((1, 8, 6, 6), 1.5) == (1, 8, 9, 9)
    assert poptorch_bilinear_shape((1, 8, 3, 3), 7 / 3) == (1, 8, 6, 6)
    assert poptorch_bilinear_shape((1, 8, 5, 5), 2.0) == (1, 8, 10, 10)
    with pytest.raises(sim.UnsupportedOpError, match=r"the height's.*gives \(9, 9\), not torch's shape"):
        _graph(lambda t: F.interpolate(t, size=(9, 15), mode="bilinear"), torch.randn(1, 8, 6, 6))
    with pytest.raises(sim.UnsupportedOpError, match=r"\(2.333333\).*gives \(6, 6\)"):
        _graph(lambda t: F.interpolate(t, size=(7, 7), mode="bilinear"), torch.randn(1, 8, 3, 3))


@pytest.mark.parametrize("call, match", [
    (lambda t: F.interpolate(t, scale_factor=1.5, mode="bilinear"), "whole-number bilinear scale factors"),
    (lambda t: F.interpolate(t, scale_factor=(2, 3), mode="bilinear"), "uniform bilinear upsampling only"),
    (lambda t: F.interpolate(t, scale_factor=2, mode="bilinear", antialias=True), "anti-aliased"),
    (lambda t: F.interpolate(t.flatten(2), scale_factor=2, mode="linear"), "mode 'linear'"),
    (lambda t: F.pixel_unshuffle(t, 2), "registers pixel_shuffle only"),
    (lambda t: F.unfold(t[0], 3), "im2col takes"),
])
def test_what_poptorch_refuses_is_refused(call, match):
    with pytest.raises(sim.UnsupportedOpError, match=match):
        _graph(call, torch.randn(1, 8, 6, 6))


def test_bilinear_forward_is_one_map_of_four_weighted_neighbours():
    """One popops::map over the output spread linearly: the largest step's fixed cost, four multiplies
    and three adds an element; each tile receives its elements' four neighbours and their weights."""
    fwd, _ = _costs((4, 16, 32, 32), 2)
    n = 4 * 16 * 64 * 64
    per_tile = math.ceil(n / TILES)
    steps = [codelet(s) for s in FORWARD_STEPS]
    assert FORWARD_STEPS.count("mul") == 4 and FORWARD_STEPS.count("add") == 3
    assert fwd.compute_cycles == math.ceil(max(c.fixed for c in steps) + per_tile * sum(c.per_element(2) for c in steps))
    assert fwd.supersteps == 1 and fwd.tiles_used == TILES
    pixels = math.ceil(per_tile / (4 * 16)) + 1
    assert fwd.exchange_bytes == 4 * (per_tile + pixels) * 2 * TILES
    assert fwd.flops == 8 * n


@pytest.mark.parametrize("in_shape, scale, sets", [
    ((4, 16, 32, 32), 2, 1),    # 1,024 pixels: under 6 a tile, elements spread one by one
    ((1, 8, 96, 96), 2, 2),     # 9,216 pixels: 7 a tile, whole pixels, two compute sets
    ((1, 4, 160, 160), 4, 3),   # 25,600 pixels: 18 a tile, three compute sets
])
def test_bilinear_gradient_vertices_and_compute_sets(in_shape, scale, sets):
    """The C++ vertices: per worker region a vertex, per element a float sum of 4 s^2 weighted
    output gradients; the tile's share in one set up to 6 pixels, two up to 12, else three."""
    n, c, hi, wi = in_shape
    _, grad = _costs(in_shape, scale)
    v = grad_vertex_cycles()
    pixels, elements = hi * wi, math.prod(in_shape)
    if pixels / TILES > 6:
        per_tile = math.ceil(pixels / TILES) * n * c
    else:
        per_tile = math.ceil(elements / TILES)
    per_worker = math.ceil(per_tile / sets / 6)
    terms = 4 * scale * scale
    assert grad.supersteps == sets
    assert grad.compute_cycles == sets * 6 * (v["fixed"] + per_worker * (v["per_output"] + terms * v["per_term"]))
    assert grad.flops == 2 * 4 * elements * scale * scale


def test_bilinear_gradient_costs_more_than_its_forward_and_grows_with_the_scale():
    """Per input element, the gradient sums 4 s^2 terms in scalar C++: more work than the forward's
    vectorised map at every scale, and its cost per input element grows with s^2."""
    f2, g2 = _costs((1, 64, 32, 32), 2)
    f4, g4 = _costs((1, 64, 32, 32), 4)
    assert g2.compute_cycles > f2.compute_cycles and g4.compute_cycles > f4.compute_cycles
    assert 3.5 < g4.compute_cycles / g2.compute_cycles < 4.5


# --- pixel shuffle, DepthToSpace, SpaceToDepth -------------------------------------------------

def test_pixel_shuffle_is_depth_to_space_crd():
    g = _graph(nn.PixelShuffle(2), torch.randn(2, 8, 5, 7), training=True)
    ops = [op for op in g.ops if op.pass_ == "forward" and op.kind in ("reshape", "transpose")
           and "bias_per_channel" not in op.name]  # the head convolution's bias view
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in ops] == [
        ("reshape", (2, 2, 2, 2, 5, 7)), ("transpose", (2, 2, 5, 2, 7, 2)), ("reshape", (2, 2, 10, 14))]
    assert ops[1].attrs["perm"] == [0, 1, 4, 2, 5, 3]
    assert "transpose" in {op.kind for op in g.ops if op.pass_ == "backward"}


def _space_depth(op_type, shape, **attrs):
    node = h.make_node(op_type, ["x"], ["y"], name="sd", **attrs)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                         [h.make_tensor_value_info("y", T.FLOAT, None)])
    return sim.onnx.load(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]))


@pytest.mark.parametrize("op_type, attrs, expected", [
    ("DepthToSpace", {"blocksize": 2}, [((2, 2, 2, 4, 8, 8), None), ((2, 4, 8, 2, 8, 2), [0, 3, 4, 1, 5, 2]),
                                       ((2, 4, 16, 16), None)]),
    ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [((2, 4, 2, 2, 8, 8), None),
                                                      ((2, 4, 8, 2, 8, 2), [0, 1, 4, 2, 5, 3]), ((2, 4, 16, 16), None)]),
    ("SpaceToDepth", {"blocksize": 2}, [((2, 16, 4, 2, 4, 2), None), ((2, 2, 2, 16, 4, 4), [0, 3, 5, 1, 2, 4]),
                                       ((2, 64, 4, 4), None)]),
])
def test_onnx_depth_to_space_and_space_to_depth(op_type, attrs, expected):
    g = _space_depth(op_type, [2, 16, 8, 8], **attrs)
    assert [op.kind for op in g.ops] == ["reshape", "transpose", "reshape"]
    assert [(g.tensors[op.outputs[0]].shape, op.attrs.get("perm")) for op in g.ops] == expected


def test_pixel_shuffle_moves_the_same_data_as_its_onnx_form():
    """sim.poptorch's pixel_shuffle and ONNX DepthToSpace (CRD) of the same fp32 input: the same
    transpose, the same cost."""
    shape = [2, 16, 8, 8]
    onnx = _space_depth("DepthToSpace", shape, blocksize=2, mode="CRD")
    torch_graph = _graph(nn.PixelShuffle(2), torch.randn(*shape))
    (a,) = [op for op in onnx.ops if op.kind == "transpose"]
    (b,) = [op for op in torch_graph.ops if op.kind == "transpose"]
    assert onnx.tensors[a.outputs[0]].shape == torch_graph.tensors[b.outputs[0]].shape
    assert a.attrs["perm"] == b.attrs["perm"]
    cost_a, cost_b = op_cost(a, onnx, MK2, TILES), op_cost(b, torch_graph, MK2, TILES)
    assert cost_a.cycles == cost_b.cycles > 0 and cost_a.exchange_bytes == cost_b.exchange_bytes > 0


# --- unfold and fold ---------------------------------------------------------------------------

def _kinds(g, pass_, kinds):
    return [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops if op.pass_ == pass_ and op.kind in kinds]


def test_unfold_is_views_of_the_padded_input_and_its_gradient_a_scatter_add():
    """PopTorch's im2col: the input padded (the width also up to a whole number of strides: 34 -> 36
    for stride 3), the windows' slices concatenated; views, so the consumer reads them. In training
    the windows' gradient is scatter-added into the padded input, which the run notes."""
    unfold = lambda t: F.unfold(t, 3, padding=1, stride=3)  # noqa: E731
    model = Head(unfold, 8)
    trained = poptorch.trainingModel(model, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    trained(torch.randn(2, 8, 32, 32))
    g = trained.executable.graph
    assert _kinds(g, "forward", ("pad", "concat")) == [("pad", (2, 8, 34, 36)), ("concat", (2, 72, 121))]
    (scatter,) = [op for op in g.ops if op.kind == "scatter_elements"]
    assert scatter.pass_ == "backward"
    assert [g.tensors[t].shape for t in scatter.inputs] == [(2 * 72 * 121,), (2 * 8 * 34 * 36,), (2 * 72 * 121,)]
    assert any("unfold: the windows are views" in n for n in trained.executable.notes)


def test_tensor_unfold_windows_and_their_gradient():
    g = _graph(lambda t: t.unfold(3, 4, 2), torch.randn(1, 8, 6, 10), training=True)
    assert _kinds(g, "forward", ("concat",)) == [("concat", (1, 8, 6, 4, 4))]
    (scatter,) = [op for op in g.ops if op.kind == "scatter_elements"]
    assert g.tensors[scatter.outputs[0]].shape == (1 * 8 * 6 * 10,)


def test_fold_is_a_scatter_add_into_the_image():
    """PopTorch's col2im: the columns viewed as (N, C, k k L), scatter-added into (N, C, H W)."""
    fold = lambda t: F.fold(F.unfold(t, 3, padding=1), (6, 6), 3, padding=1)  # noqa: E731
    g = _graph(fold, torch.randn(2, 8, 6, 6))
    (scatter,) = [op for op in g.ops if op.kind == "scatter_elements"]
    assert [g.tensors[t].shape for t in scatter.inputs] == [(2, 8, 9 * 36), (2, 8, 36), (2, 8, 9 * 36)]
    assert scatter.attrs == {"axis": 2, "reduce": "sum"}
