"""sim.onnx on what torch.onnx.export writes for torchvision's models and torch.nn's layers (built here, no
downloads): each imports, simulates the same way every time, trains from its loss, and prices the network
as sim.poptorch prices the module where PopART runs the exported ops as PopTorch lowers the module's."""

from __future__ import annotations

import collections
import contextlib
import copy
import io
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import sim  # noqa: E402
import sim.onnx  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402


_SCHEMAS = None  # torchvision's C ops declared here when its extension cannot load (kept alive)


def _import_torchvision():
    """torchvision, or a skip. A torchvision wheel built for a CUDA torch cannot load its C extension next to
    the CPU torch, and then fails at import registering fake kernels for two of its ops (``torchvision::nms``,
    ``qnms``); the models need neither, so their schemas are declared and the import retried."""
    global _SCHEMAS
    try:
        import torchvision
        return torchvision
    except ImportError:
        pytest.skip("torchvision is not installed")
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    _SCHEMAS = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        with contextlib.suppress(RuntimeError):
            _SCHEMAS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    try:
        import torchvision
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"torchvision does not import: {e}")
    return torchvision


@pytest.fixture(scope="module")
def tv():
    return _import_torchvision()


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def export(module, args, **kw) -> bytes:
    """The module as torch's TorchScript exporter writes it (opset 17 unless given), quietly."""
    buf = io.BytesIO()
    kw.setdefault("opset_version", 17)
    names = kw.pop("input_names", ["x", "y"][:len(args)])
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(args), buf, dynamo=False, input_names=names, **kw)
    return buf.getvalue()


def trained_like(module):
    """A copy of ``module`` with its parameters moved off their initial values (no bit-identical clones for
    the exporter to merge, no all-zero biases), as a trained model's are."""
    module = copy.deepcopy(module)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return module


class WithLoss(torch.nn.Module):
    """The model's logits and its cross-entropy loss (SoftmaxCrossEntropyLoss in the export)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        out = self.model(x)
        return out, torch.nn.functional.cross_entropy(out, y)


def poptorch_cycles(module, *args) -> int:
    model = poptorch.inferenceModel(module, poptorch.Options().logCycleCount(True))
    model(*args)
    return model.cycleCount()


def onnx_cycles(data, **kw) -> int:
    return sim.simulate(sim.onnx.load(data, **kw), "ipu-mk2").cycle_count


# --- torchvision's models ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def classifiers(tv):
    """Small torchvision classifiers with their inputs: (model, images)."""
    torch.manual_seed(0)
    vit = tv.models.VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=32,
                                      mlp_dim=64, num_classes=10)
    return {"resnet18": (tv.models.resnet18(num_classes=10), torch.randn(2, 3, 32, 32)),
            "mobilenet_v3_small": (tv.models.mobilenet_v3_small(num_classes=10), torch.randn(2, 3, 32, 32)),
            "shufflenet_v2_x0_5": (tv.models.shufflenet_v2_x0_5(num_classes=10), torch.randn(2, 3, 32, 32)),
            "vit": (vit, torch.randn(2, 3, 32, 32))}


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5", "vit"])
def test_torchvision_models_import_simulate_the_same_and_train(classifiers, name):
    model, x = classifiers[name]
    model = trained_like(model).eval()
    data = export(model, [x])
    runs = [onnx_cycles(data) for _ in range(2)]
    assert runs[0] == runs[1] > 0
    net = WithLoss(model).train()
    y = torch.zeros(x.shape[0], dtype=torch.long)
    train = export(net, [x, y], training=torch.onnx.TrainingMode.TRAINING, output_names=["logits", "loss"])
    g = sim.onnx.load(train)
    assert g.loss is not None  # the SoftmaxCrossEntropyLoss, found on its own
    run = sim.simulate(g, "ipu-mk2", training=True, optimizer="sgd")
    assert run.cycle_count > runs[0]


def test_a_network_with_batch_norm_prices_as_sim_poptorch(classifiers):
    """ResNet-18 exported with its BatchNormalizations (no constant folding, which would fold them into the
    convolutions) is the network PopTorch lowers from the module: the same ops, the same cycles."""
    model, x = classifiers["resnet18"]
    model = trained_like(model).eval()
    assert onnx_cycles(export(model, [x], do_constant_folding=False)) == poptorch_cycles(model, x)


def _weights_transposed_by_an_op(g):
    return [op.name for op in g.ops if op.kind == "transpose" and g.tensors[op.inputs[0]].role == "weight"]


def test_a_weight_a_transpose_node_reads_is_stored_in_the_layout_its_matmul_reads(classifiers):
    """torch's Linear on a 3-D input and MultiheadAttention's in_proj_weight export as Transpose(W) -> MatMul
    when the exporter does not fold constants (training=TRAINING, do_constant_folding=False). PopART inplaces
    the Transpose into a view (TransposeInplaceOpx) and lays the weight out for the matmul through it
    (TransposeOpx's CanUnwind), as a Gemm's transB: no copy of the weight each step; sim.poptorch too stores
    the weight in its matmul's layout. A weight also read untransposed keeps one transpose."""
    model, x = classifiers["vit"]
    model = trained_like(model).eval()
    data = export(model, [x], do_constant_folding=False, opset_version=20)  # opset 20: GELU is one op
    g = sim.onnx.load(data)
    assert not _weights_transposed_by_an_op(g)
    ours, theirs = sim.simulate(g, "ipu-mk2").cycle_count, poptorch_cycles(model, x)
    # left: torch's ONNX attention scales q and k by a Mul (scale) where sim.poptorch divides (torch 2.0's)
    assert abs(ours / theirs - 1) < 0.01
    net = WithLoss(model).train()
    y = torch.zeros(2, dtype=torch.long)
    train = sim.onnx.load(export(net, [x, y], training=torch.onnx.TrainingMode.TRAINING, opset_version=20,
                                 output_names=["logits", "loss"]), loss="loss")
    assert not _weights_transposed_by_an_op(train)
    assert sim.simulate(train, "ipu-mk2", training=True, optimizer="sgd").cycle_count > ours


def test_a_linear_on_a_sequence_reads_its_weight_without_a_copy():
    """The same without torchvision: torch's Linear on a 3-D input exported unfolded is Transpose(W) -> MatMul,
    priced as sim.poptorch prices the layer; a weight read both transposed and as it is keeps one transpose."""
    mlp = trained_like(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))).eval()
    seq = torch.randn(2, 8, 32)
    data = export(mlp, [seq], do_constant_folding=False)
    assert collections.Counter(n.op_type for n in onnx.load_from_string(data).graph.node)["Transpose"] == 2
    assert onnx_cycles(data) == poptorch_cycles(mlp, seq)

    # a weight read transposed and as it is: one transpose, made once
    w = nh.from_array(np.ones((16, 16), np.float32), "w")
    nodes = [h.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), h.make_node("MatMul", ["x", "wt"], ["a"]),
             h.make_node("Transpose", ["w"], ["wt2"], perm=[1, 0]), h.make_node("MatMul", ["a", "wt2"], ["b"]),
             h.make_node("MatMul", ["b", "w"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "t", [h.make_tensor_value_info("x", T.FLOAT, [4, 16])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [4, 16])], [w]),
                     opset_imports=[h.make_opsetid("", 17)])
    g = sim.onnx.load(m)
    assert [op.kind for op in g.ops] == ["transpose", "matmul", "matmul", "matmul"]
    assert sim.simulate(g, "ipu-mk2").cycle_count > 0


# --- recurrent layers --------------------------------------------------------------------------------------
class _Recurrent(torch.nn.Module):
    def __init__(self, cell, **kw):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(32, 64, batch_first=True, **kw)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


def test_lstm_biases_are_added_as_popart_grows_them():
    """PopART's LSTMOpx::growBias (and GRUOpx's, without linear_before_reset) copies the input bias and adds
    the recurrent one in place: one popops ADD, as sim.poptorch adds torch's b_ih and b_hh, not a reduction."""
    torch.manual_seed(0)
    net = trained_like(_Recurrent("LSTM")).eval()
    x = torch.randn(2, 12, 32)
    g = sim.onnx.load(export(net, [x]))
    assert "reduce_sum" not in {op.kind for op in g.ops}
    bias = next(op for op in g.ops if op.name.endswith("/bias"))
    assert bias.kind == "add" and g.tensors[bias.outputs[0]].shape == (256,)
    assert sim.simulate(g, "ipu-mk2").cycle_count == poptorch_cycles(net, x)

    H = 8
    nodes = [h.make_node("GRU", ["x", "w", "r", "b"], ["y"], hidden_size=H, linear_before_reset=0)]
    inits = [nh.from_array(np.ones(s, np.float32), n) for n, s in
             (("w", (1, 3 * H, 4)), ("r", (1, 3 * H, H)), ("b", (1, 6 * H)))]
    gru = sim.onnx.load(h.make_model(h.make_graph(nodes, "gru", [h.make_tensor_value_info("x", T.FLOAT, [5, 2, 4])],
                                                  [h.make_tensor_value_info("y", T.FLOAT, [5, 1, 2, H])], inits),
                                     opset_imports=[h.make_opsetid("", 17)]))
    assert [op.kind for op in gru.ops][:3] == ["slice", "slice", "add"]


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_a_plain_rnn_runs_as_poparts_rnnopx(nonlinearity):
    """nn.RNN exports as ONNX RNN, which PopART runs (op/rnn.cpp, popx/op/rnnx.cpp): the biases added once,
    then per step the input's dynamic slice, one matmul of [x_t, h] by [W, R], the bias, the nonlinearity,
    the state copied and the output written; it trains (RNNGradOp)."""
    torch.manual_seed(0)
    net = trained_like(_Recurrent("RNN", nonlinearity=nonlinearity)).eval()
    x = torch.randn(2, 12, 32)
    g = sim.onnx.load(export(net, [x]))
    steps = [op for op in g.ops if op.name.startswith("/rnn/RNN/") and op.kind == "matmul"]
    assert len(steps) == 12
    assert [tuple(g.tensors[t].shape) for t in steps[0].inputs] == [(2, 96), (96, 64)]  # [x_t, h] @ [W, R]
    assert collections.Counter(op.kind for op in g.ops)[nonlinearity] == 12
    assert sim.simulate(g, "ipu-mk2").cycle_count > 0
    train = WithLoss(net).train()
    y = torch.zeros(2, dtype=torch.long)
    gt = sim.onnx.load(export(train, [x, y], training=torch.onnx.TrainingMode.TRAINING,
                              output_names=["logits", "loss"]), loss="loss")
    assert sim.simulate(gt, "ipu-mk2", training=True, optimizer="sgd").cycle_count > 0

    two_way = trained_like(torch.nn.RNN(8, 8, bidirectional=True)).eval()
    with pytest.raises(sim.UnsupportedOpError, match=r"ONNX op RNN \(node .*direction='bidirectional' \(PopART's "
                                                     r"RNNOp runs the forward direction only"):
        sim.onnx.load(export(two_way, [torch.randn(5, 2, 8)]))


@pytest.mark.parametrize("with_initial_h", [False, True])
def test_an_rnn_without_initial_h_copies_popart_s_zeros_first(with_initial_h):
    """RNNOpx::getInitialH clones and copies a zeros tensor when the node has no initial_h, and grow() then
    copies that into H_prev (cloneNcopy twice); a given initial_h is copied once."""
    H = 8
    ins = ["x", "w", "r", "b", "", "h0"] if with_initial_h else ["x", "w", "r", "b"]
    inits = [nh.from_array(np.ones(s, np.float32), n) for n, s in
             (("w", (1, H, 4)), ("r", (1, H, H)), ("b", (1, 2 * H)), ("h0", (1, 2, H)))]
    m = h.make_model(h.make_graph([h.make_node("RNN", ins, ["y"], hidden_size=H)], "rnn",
                                  [h.make_tensor_value_info("x", T.FLOAT, [5, 2, 4])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [5, 1, 2, H])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    g = sim.onnx.load(m)
    first_step = next(i for i, op in enumerate(g.ops) if op.kind == "matmul")
    copies = [op.name.rsplit("/", 1)[-1] for op in g.ops[:first_step] if op.kind == "copy" and "dynamic_slice"
              not in op.attrs]
    assert copies == (["h_prev"] if with_initial_h else ["initial_h", "h_prev"])


def test_sequence_ops_are_refused_saying_how_to_export():
    """torch.onnx.export(dynamo=True, optimize=False) writes torch.chunk as SplitToSequence and SequenceAt
    (shufflenet_v2's channel split); PopART has no sequence ops, so the model would not compile there, and the
    error says which export avoids them."""
    nodes = [h.make_node("SplitToSequence", ["x", "n"], ["s"], axis=1, name="chunk"),
             h.make_node("SequenceAt", ["s", "i"], ["a"], name="at"), h.make_node("Relu", ["a"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "seq", [h.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2, 4])],
                                  [nh.from_array(np.array([4, 4], np.int64), "n"),
                                   nh.from_array(np.array(0, np.int64), "i")]),
                     opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(sim.UnsupportedOpError, match=r"ONNX op SplitToSequence \(node 'chunk'\): PopART has no "
                                                     r"SplitToSequence op.*optimize=True.*dynamo=False"):
        sim.onnx.load(m)
