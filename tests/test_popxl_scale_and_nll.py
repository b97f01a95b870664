"""Front ends priced alike, round 4: what PopART makes of a torch.onnx dynamo export's merged initializers,
PopXL's ``x * 0.5`` as one scale, PopXL's loss on probabilities as its NLL part only."""

from __future__ import annotations

import sys
from pathlib import Path

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
from sim.cost.rules import op_cost  # noqa: E402
from sim.graph.ir import GraphBuilder  # noqa: E402
from sim.hardware.system import load_system  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_frontend_parity import _popxl_classifier  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


# --- 1. ONNX: one initializer read by two nodes ---------------------------------------------------

def _two_layernorm_affines(shared: bool):
    """Two hand-written layer-norm affines ``x * g + b``; ``shared``: one ``g`` and one ``b`` read by both, as
    torch.onnx.export(dynamo=True) writes two parameters of equal values (onnxscript's optimizer runs onnx_ir's
    DeduplicateInitializersPass over initializers of up to 1,024 elements: LayerNorm gains of ones, biases of
    zeros)."""
    ones, zeros = np.ones(256, np.float32), np.zeros(256, np.float32)
    names = [("g", "b"), ("g", "b")] if shared else [("g1", "b1"), ("g2", "b2")]
    nodes, x = [], "x"
    for i, (g, b) in enumerate(names):
        nodes += [h.make_node("Mul", [x, g], [f"m{i}"]), h.make_node("Add", [f"m{i}", b], [f"a{i}"])]
        x = f"a{i}"
    nodes += [h.make_node("ReduceMean", [x], ["loss"], keepdims=0)]
    inits = {n: nh.from_array(ones if n.startswith("g") else zeros, n) for pair in names for n in pair}
    graph = h.make_graph(nodes, "ln", [h.make_tensor_value_info("x", T.FLOAT, [4, 128, 256])],
                         [h.make_tensor_value_info("loss", T.FLOAT, [])], list(inits.values()))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_onnx_initializer_read_twice_trains_as_one_weight_as_popart():
    """PopART makes each ONNX initializer one Variable tensor in training (willow/src/ir.cpp: ``addVarInit``
    per initializer), so an initializer two nodes read is one weight, one update, its gradients summed. That is
    what the dynamo export's merged initializers become: the importer follows the file, the file has one weight
    fewer than the torch module (the TorchScript exporter's training-mode export and sim.poptorch keep both)."""
    runs = {}
    for shared in (False, True):
        g = sim.onnx.load(_two_layernorm_affines(shared), loss="loss")
        assert len(g.weights()) == (2 if shared else 4)
        run = sim.simulate(g, "ipu-mk2", training=True, optimizer="sgd")
        runs[shared] = [op.kind for op in run.executable.graph.ops]
    assert runs[False].count("sgd_update") - runs[True].count("sgd_update") == 2
    assert runs[True].count("add") - runs[False].count("add") == 2  # each shared weight's two gradients summed


# --- 2. PopXL: a tensor times a Python number ---------------------------------------------------------

def _popxl_times_half(how: str) -> popxl.Session:
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((16, 1024), popxl.float16, "x")
        x = ops.host_load(s)
        m = {"x*0.5": lambda: x * 0.5, "0.5*x": lambda: 0.5 * x, "np": lambda: x * np.float16(0.5),
             "constant": lambda: ops.mul(x, popxl.constant(0.5, popxl.float16))}[how]()
        y = ops.relu_(m)  # in place, as PopART's inplacing pass runs the ONNX and PyTorch Relu (PopXL runs none)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    return popxl.Session(ir, "ipu_hw")


class _Half(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * 0.5)


@pytest.mark.parametrize("how", ["x*0.5", "0.5*x", "np", "constant"])
def test_popxl_times_a_number_is_one_scale_as_onnx_and_poptorch(how):
    """PopXL's ``x * 0.5`` is a MulOp by a constant of x's dtype (python/popxl/tensor.py ``__mul__``); PopART's
    MulOpx runs popops' MULTIPLY by that one-element constant, the call ScaleOpx makes. sim.onnx prices ONNX's
    Mul by a constant scalar and sim.poptorch ``x * 0.5`` as one ``scale``: PopXL now too, same cycles."""
    session = _popxl_times_half(how)
    g = session.executable.graph
    assert [op.kind for op in g.ops] == ["scale", "relu"] and g.ops[0].attrs["factor"] == 0.5
    with session:
        session.run({s: np.zeros(s.shape, np.float16) for s in session.expected_inputs()})
    nodes = [h.make_node("Mul", ["x", "c"], ["m"]), h.make_node("Relu", ["m"], ["y"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT16, [16, 1024])],
                         [h.make_tensor_value_info("y", T.FLOAT16, [16, 1024])],
                         [nh.from_array(np.array(0.5, np.float16), "c")])
    onnx_model = sim.onnx.load(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    onnx_run = sim.simulate(onnx_model, "ipu-mk2")
    model = poptorch.inferenceModel(_Half().half(), poptorch.Options().logCycleCount(True))
    model(torch.zeros(16, 1024, dtype=torch.float16))
    assert [op.kind for op in model.executable.graph.ops] == ["scale", "relu"]
    assert onnx_run.cycle_count == model.cycleCount()
    # PopXL counts its stream callbacks in its run's host work, not on the IPU's path (sim.popxl.session)
    assert session.cycle_count == sim.simulate(onnx_model, "ipu-mk2", sim.Options().stepIOCallbacks(False)).cycle_count


def test_popxl_product_of_two_tensors_stays_a_mul():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((16, 64), popxl.float32, "x"))
        w = popxl.variable(np.ones((16, 64), np.float32), name="w")
        c = popxl.constant(np.ones((1, 64), np.float32))
        ops.host_store(popxl.d2h_stream((16, 64), popxl.float32, "y"), (x * w) * c)
    assert [op.kind for op in popxl.Session(ir, "ipu_hw").executable.graph.ops] == ["mul", "mul"]


# --- 3. PopXL: the loss on probabilities ---------------------------------------------------------------

def test_popxl_loss_on_probabilities_is_priced_without_a_second_softmax():
    """PopXL's nll_loss_with_softmax_grad is PopART's NlllWithSoftmaxGradDirectOpx (softmaxx.cpp): encodeOneHot,
    the multiply by the probabilities, the row reduce, a log, the reduction to a scalar; no softmax (the
    program's softmax op is its own). Its loss op is marked ``probabilities`` and costs less than the
    cross-entropy of the logits (whose cost holds a softmax), which sim.poptorch's loss keeps."""
    g = _popxl_classifier(True).executable.graph
    loss = next(op for op in g.ops if op.kind == "softmax_cross_entropy")
    assert loss.attrs.get("probabilities") is True
    system = load_system("ipu-mk2")
    ipu = system.ipu
    full = op_cost(loss, g, ipu, ipu.tiles)
    b = GraphBuilder("g", "float32")
    b.softmax_cross_entropy(b.input("x", (16, 10)), b.input("y", (16,), dtype="int32"))
    logits = op_cost(b.graph.ops[0], b.graph, ipu, ipu.tiles)
    assert full.compute_cycles < logits.compute_cycles and full.supersteps < logits.supersteps

    net = torch.nn.Linear(64, 10, bias=False)

    class _Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.loss = net, torch.nn.CrossEntropyLoss()

        def forward(self, x, y):
            out = self.fc(x)
            return out, self.loss(out, y)

    m = _Net()
    model = poptorch.trainingModel(m, poptorch.Options(), poptorch.optim.SGD(m.parameters(), lr=0.01))
    model(torch.randn(16, 64), torch.randint(0, 10, (16,)))
    ptl = next(op for op in model.executable.graph.ops if op.kind == "softmax_cross_entropy")
    assert "probabilities" not in ptl.attrs
    model.destroy()
