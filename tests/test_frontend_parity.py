"""The same computation through sim.poptorch, sim.onnx and sim.popxl gets the same ops, as PopTorch,
PopART and PopXL run it (each test names the PopART / PopTorch behaviour it follows)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import sim  # noqa: E402
import sim.onnx  # noqa: E402
import sim.popxl as popxl  # noqa: E402
import sim.popxl.ops as ops  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


class _Divide(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x / 8.0)


def test_onnx_div_by_a_constant_is_popops_divide_as_in_poptorch():
    """PopART's DivOpx is popops' DIVIDE of the one-element constant; no PopART pattern (willow/src/patterns)
    or ONNX pass makes a Div by a constant a Scale. PopTorch lowers ``x / 8.0`` to the same Div, so the ONNX
    model and the PyTorch module get the same op and the same cycles (a Mul by a constant stays a scale)."""
    nodes = [h.make_node("Div", ["x", "c"], ["d"], name="div"), h.make_node("Relu", ["d"], ["y"], name="relu"),
             h.make_node("Mul", ["y", "c"], ["z"], name="mul")]
    graph = h.make_graph(nodes, "div", [h.make_tensor_value_info("x", T.FLOAT, [4, 4, 128, 128])],
                         [h.make_tensor_value_info("z", T.FLOAT, [4, 4, 128, 128])],
                         [nh.from_array(np.array(8.0, np.float32), "c")])
    g = sim.onnx.load(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    assert [op.kind for op in g.ops] == ["div", "relu", "scale"]
    assert g.tensors[g.ops[0].inputs[1]].role == "constant"

    model = poptorch.inferenceModel(_Divide(), poptorch.Options().logCycleCount(True))
    model(torch.randn(4, 4, 128, 128))
    ours = sim.simulate(sim.onnx.load(h.make_model(h.make_graph(
        nodes[:2], "div", graph.input, [h.make_tensor_value_info("y", T.FLOAT, [4, 4, 128, 128])],
        graph.initializer), opset_imports=[h.make_opsetid("", 17)])), "ipu-mk2")
    assert [op.kind for op in model.executable.graph.ops] == ["div", "relu"]
    assert ours.cycle_count == model.cycleCount()


class _Picks(torch.nn.Module):
    """A fused QKV projection split as torch's MultiheadAttention does (``proj[0], proj[1], proj[2]``)
    or as timm's ViT does (``unbind(0)``)."""

    def __init__(self, unbind: bool):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)
        self.unbind = unbind

    def forward(self, x):
        p = self.qkv(x).unflatten(-1, (3, 32)).permute(2, 0, 1, 3)
        q, k, v = p.unbind(0) if self.unbind else (p[0], p[1], p[2])
        return poptorch.identity_loss((q * k * v).sum(), "none")


@pytest.mark.parametrize("unbind", [False, True])
def test_poptorch_picked_pieces_get_one_concatenated_gradient(unbind):
    """PopTorch lowers ``aten::select`` (an integer index) and ``unbind`` to PopART Slices of one position
    and Squeezes; each SliceGrad is a pad, and PopART's PadSum joins the pads of disjoint regions into one
    concatenation: no adds of full-size zero-padded gradients (what sim.onnx gives the exported Gathers)."""
    net = _Picks(unbind)
    model = poptorch.trainingModel(net, poptorch.Options(), poptorch.optim.SGD(net.parameters(), lr=0.01))
    model(torch.randn(2, 4, 32))
    g = model.executable.graph
    pads = [op for op in g.ops if op.kind == "pad"]
    assert len(pads) == 1 and sorted(pads[0].attrs["regions"]) == [(0, 1), (1, 2), (2, 3)]
    assert not [op.name for op in g.ops if op.kind == "add" and op.name.endswith("/sum")]
    model.destroy()


def _popxl_classifier(training: bool):
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((16, 64), popxl.float32, "x")
        lbl_h2d = popxl.h2d_stream((16,), popxl.int32, "labels")
        x, labels = ops.host_load(x_h2d), ops.host_load(lbl_h2d)
        w = popxl.variable(np.zeros((64, 10), np.float32), name="w")

        class Net(popxl.Module):
            def build(self, t):
                self.w = popxl.graph_input((64, 10), popxl.float32, "w")
                return t @ self.w

        net = Net()
        fwd = ir.create_graph(net, x)
        bwd = popxl.transforms.autodiff(fwd) if training else None
        call = ops.call_with_info(fwd, x, inputs_dict={net.w: w})
        probs = ops.softmax(call.outputs[0], axis=-1)
        loss, dx = ops.nll_loss_with_softmax_grad(probs, labels)
        if training:
            bcall = ops.call_with_info(bwd.graph, dx, inputs_dict=bwd.inputs_dict(call))
            ops.scaled_add_(w, bwd.fwd_parent_ins_to_grad_parent_outs(call, bcall)[w], b=-0.01)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
    return popxl.Session(ir, "ipu_hw")


def test_popxl_nll_loss_with_softmax_grad_runs_no_softmax_gradient():
    """PopXL's nll_loss_with_softmax_grad is PopART's NlllWithSoftmaxGradDirectOp: it returns dE/dx for
    ``probs = softmax(x)`` (probs - onehot), which the program feeds to the logits' grad graph; no softmax
    gradient runs. The forward softmax the program wrote is still priced."""
    trained = _popxl_classifier(True).executable.graph
    kinds = [op.kind for op in trained.ops]
    assert "softmax_grad" not in kinds and kinds.count("softmax") == 1
    backward = [op.kind for op in trained.ops if op.pass_ == "backward"]
    assert backward[:2] == ["softmax_cross_entropy_grad", "matmul"]
    loss = next(op for op in _popxl_classifier(False).executable.graph.ops if op.kind == "softmax_cross_entropy")
    assert loss.inputs[0].endswith("matmul")  # the probabilities' softmax input: the logits
