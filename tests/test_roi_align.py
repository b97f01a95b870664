"""RoIAlign as PopART runs it (RoiAlignOp / RoiAlignGradOp: popnn's experimental ROIAlign, sim/cost/roialign.py),
through sim.onnx (RoiAlign-10) and sim.popxl (ops.roi_align): the plan's vertices, compute sets and exchange as
poplibs' lib/popnn/ROIAlign.cpp places them, the op's parts, its gradient, and PopART's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import sim  # noqa: E402
import sim.onnx  # noqa: E402
from sim import popxl  # noqa: E402
from sim.cost import op_cost  # noqa: E402
from sim.cost.roialign import forward_plan, grad_plan, vertex_cycles  # noqa: E402
from sim.graph.ir import GraphBuilder  # noqa: E402
from sim.hardware.system import load_system  # noqa: E402
from sim.popxl import ops  # noqa: E402

MK2 = load_system("ipu-mk2").ipu
TILES = 1472


def test_the_forward_is_one_vertex_a_box_channel_and_grid_point_each_reading_its_channel_map():
    """roiAlignFwd: R C sr^2 vertices round-robin over the tiles, six workers a tile, each aH aW samples; a tile
    receives its vertices' channels' maps of every image, their boxes and the batch indices."""
    v = vertex_cycles()
    p = forward_plan((2, 64, 20, 30), 100, (7, 7), 2, 4, MK2, TILES)
    per_tile = math.ceil(100 * 64 * 4 / TILES)  # 25600 vertices: 18 a tile
    assert per_tile == 18 and p.tiles == TILES
    assert p.compute == 6 * 3 * (v["fixed"] + 49 * v["per_sample"])
    assert p.launch == 6 * 3 * v["fixed"]
    assert p.exchange_bytes == 18 * 2 * 20 * 30 * 4 + 18 * 4 * 4 + 100 * 4
    assert (p.grid, p.axes, p.compute_sets, p.empty_sets) == ((100, 64, 2, 2, 7, 7), (2, 3), 1, 0)
    assert p.buffer_elements == 18 * 49


def test_the_gradient_runs_a_compute_set_a_group_of_boxes():
    """roiAlignInputGradient: group = min(R, ceil(6 tiles / (C sr^2))) boxes a compute set, R // group + 1 sets
    (the last one empty when the group divides R), the (channel, box) pairs on tile (c group + g) % tiles, each
    pair's sr^2 vertices adding into its own slice of the (N, C, group, sr, sr, H, W) buffer."""
    v = vertex_cycles()
    p = grad_plan((2, 64, 20, 30), 276, (7, 7), 2, 4, MK2, TILES)
    group = math.ceil(6 * TILES / (64 * 4))  # 35
    assert group == 35
    assert (p.compute_sets, p.empty_sets) == (math.ceil(276 / 35), 276 // 35 + 1 - math.ceil(276 / 35))
    pairs = math.ceil(64 * 35 / TILES)  # 2
    assert p.compute == 6 * math.ceil(pairs * 4 / 6) * (v["fixed"] + 49 * v["per_sample_grad"])
    assert p.grid == (2, 64, 35, 2, 2, 20, 30) and p.axes == (2, 3, 4)
    assert p.buffer_elements == pairs * 2 * 4 * 20 * 30
    divided = grad_plan((2, 64, 20, 30), 70, (7, 7), 2, 4, MK2, TILES)
    assert (divided.compute_sets, divided.empty_sets) == (2, 1)


def test_the_op_is_its_fill_vertices_reduce_and_divide_in_series():
    b = GraphBuilder("roi", "float32")
    x, r, i = b.input("x", (2, 64, 20, 30)), b.input("r", (100, 4)), b.input("i", (100,), "int32")
    y = b.op("roi_align", [x, r, i], [(100, 64, 7, 7)], {"sampling_ratio": 2})[0]
    b.op("roi_align_grad", [y, r, i, x], [(2, 64, 20, 30)], {"sampling_ratio": 2})
    forward, backward = (op_cost(op, b.graph, MK2, TILES) for op in b.graph.ops)
    plan = forward_plan((2, 64, 20, 30), 100, (7, 7), 2, 4, MK2, TILES)
    assert forward.compute_cycles > plan.compute and forward.supersteps >= 4  # fill, vertices, reduce, divide
    assert forward.temp_bytes_per_tile >= plan.temp_bytes
    assert backward.supersteps >= 1 + 3 + 1  # fill, three groups of 35 (the last with work), the reduce
    assert forward.cycles == op_cost(b.graph.ops[0], b.graph, MK2, TILES).cycles  # deterministic


def _model(attrs: dict, opset: int = 11):
    w = nh.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    boxes = nh.from_array(np.array([[0, 0, 8, 8], [4, 4, 15, 15], [2, 3, 9, 12]], np.float32), "boxes")
    index = nh.from_array(np.array([0, 1, 1], np.int64), "index")
    nodes = [h.make_node("Conv", ["x", "w"], ["f"], pads=[1, 1, 1, 1]),
             h.make_node("RoiAlign", ["f", "boxes", "index"], ["p"], name="roi", **attrs),
             h.make_node("ReduceMean", ["p"], ["loss"], keepdims=0)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 16, 16])],
                         [h.make_tensor_value_info("loss", T.FLOAT, [])], [w, boxes, index])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def test_onnx_roialign_reads_popart_s_defaults_and_trains_the_layers_before_it():
    g = sim.onnx.load(_model({"output_height": 7, "output_width": 7}))
    (op,) = [o for o in g.ops if o.kind == "roi_align"]
    assert g.tensors[op.outputs[0]].shape == (3, 8, 7, 7) and op.attrs["sampling_ratio"] == 1  # PopART's default
    g = sim.onnx.load(_model({"output_height": 4, "output_width": 2, "sampling_ratio": 2}), loss="loss")
    run = sim.simulate(g, "ipu-mk2", sim.Options(), training=True, optimizer="sgd")
    kinds = [(o.kind, o.pass_) for o in run.executable.graph.ops]
    assert kinds == [("conv2d", "forward"), ("roi_align", "forward"), ("reduce_mean", "forward"),
                     ("reduce_mean_grad", "backward"), ("roi_align_grad", "backward"),
                     ("conv2d_grad_weight", "backward"), ("sgd_update", "update")]
    grad = next(o for o in run.executable.graph.ops if o.kind == "roi_align_grad")
    assert run.executable.graph.tensors[grad.outputs[0]].shape == (2, 8, 16, 16)


@pytest.mark.parametrize("attrs, why", [
    ({"mode": "max"}, r"mode='max': PopART's RoiAlignOp reads no mode and always averages"),
    ({"sampling_ratio": 0, "output_height": 2, "output_width": 2},
     r"sampling_ratio=0: ONNX's adaptive grid .* \"samplingRatio must be greater than 0\""),
    ({"output_width": 2}, r"no output_height: ONNX's default is 1, .* PopART's RoiAlignOp reads 7")])
def test_onnx_roialign_popart_cannot_run_is_refused_saying_why(attrs, why):
    with pytest.raises(sim.UnsupportedOpError, match=why):
        sim.onnx.load(_model(attrs))


def test_popxl_roi_align_is_popart_s_op():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 8, 16, 16), np.float32), name="x")
        boxes = popxl.variable(np.ones((5, 4), np.float32), name="boxes")
        index = popxl.variable(np.zeros(5, np.int32), name="index")
        y = ops.roi_align(x, boxes, index, (4, 4), 0.5, 2)
        assert (y.shape, y.dtype) == ((5, 8, 4, 4), popxl.float32)
        with pytest.raises(TypeError, match="batch_index 'findex' must be int32"):
            ops.roi_align(x, boxes, popxl.variable(np.zeros(5, np.float32), name="findex"), (4, 4), 0.5, 2)
        with pytest.raises(ValueError, match="must be greater than 0"):
            ops.roi_align(x, boxes, index, (4, 4), 0.5, 0)
        d2h = popxl.d2h_stream(y.shape, y.dtype, "out")
        ops.host_store(d2h, y)
    with popxl.Session(ir, "ipu_hw") as s:
        s.run()
    (op,) = [o for o in s.executable.graph.ops if o.kind == "roi_align"]
    assert op.attrs == {"sampling_ratio": 2, "spatial_scale": 0.5}
