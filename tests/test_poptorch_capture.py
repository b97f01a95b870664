"""sim.poptorch: capturing torch models into sim graphs (ops, shapes, dtypes, annotations),
the unknown-op error and its registration API, and agreement with the zoo's graphs."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import models  # noqa: E402
import sim  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    """The tests expect the default system choice and a single process."""
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def forward_ops(model):
    return [op for op in model.executable.graph.ops if op.pass_ == "forward"]


def kinds(model):
    return [op.kind for op in forward_ops(model)]


# --- agreement with the zoo ------------------------------------------------------------------------
class ZooMLP(nn.Module):
    """models.get("mlp") as a torch module: two hidden Linear+ReLU layers, a classifier, CE loss."""

    def __init__(self, sizes=(784, 256, 256, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-2], sizes[1:-1]))
        self.classifier = nn.Linear(sizes[-2], sizes[-1])
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels):
        for layer in self.layers:
            x = torch.relu(layer(x))
        logits = self.classifier(x)
        return logits, self.loss(logits, labels)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("micro_batch, di", [(16, 4), (8, 1)])
def test_linear_stack_cycle_count_agrees_with_the_zoo_mlp(training, micro_batch, di):
    opts = poptorch.Options().deviceIterations(di).logCycleCount(True)
    wrap = poptorch.trainingModel if training else poptorch.inferenceModel
    model = wrap(ZooMLP(), opts)
    model(torch.randn(micro_batch * di, 784), torch.randint(0, 10, (micro_batch * di,)))
    zoo = sim.Options().deviceIterations(di)
    if training:
        zoo.outputMode(sim.OutputMode.Final)
    graph = models.get("mlp", micro_batch=micro_batch, dtype="float32")
    for op in graph.ops:  # the zoo's loss is PopART's own; PopTorch lowers F.cross_entropy to LogSoftmax and Nll
        if op.kind == "softmax_cross_entropy":
            op.attrs.update(log_softmax=True, ignore_index=-100, reduction="mean")
    run = sim.simulate(graph, "ipu-mk2", zoo, training=training, optimizer="sgd")
    assert model.cycleCount() == pytest.approx(run.cycle_count, rel=0.01)
    assert kinds(model) == [op.kind for op in run.executable.graph.ops if op.pass_ == "forward"]


# --- ops, shapes and dtypes ----------------------------------------------------------------------------
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, bias=False)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(2)
        self.drop = nn.Dropout(0.1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)
        self.ln = nn.LayerNorm(10)

    def forward(self, x, y):
        x = F.relu(self.bn(self.conv1(x)))
        x = self.avg(self.pool(torch.tanh(self.conv2(x))))
        x = self.gap(self.drop(x)).flatten(1)
        x = self.ln(self.fc(x))
        return F.softmax(x, dim=-1), F.nll_loss(F.log_softmax(x, dim=1), y)


def test_cnn_layers_become_sim_ops_with_real_shapes():
    torch.manual_seed(0)
    net = CNN()
    model = poptorch.trainingModel(net, poptorch.Options().deviceIterations(2))
    xs, ys = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    probs, loss = model(xs, ys)
    assert probs.shape == (2, 10) and loss.shape == ()
    # the bias is added per channel, through a (1, C, 1, 1) view of it
    assert kinds(model) == ["conv2d", "reshape", "add", "batchnorm", "relu", "conv2d", "tanh", "maxpool", "avgpool",
                            "dropout", "avgpool", "reshape", "matmul", "add", "layernorm", "softmax",
                            "softmax", "softmax_cross_entropy"]
    g = model.executable.graph
    conv2 = next(op for op in g.ops if op.name == "conv2/conv2d")
    assert conv2.attrs == {"kernel": 3, "stride": 2, "padding": 0, "groups": 1}
    assert g.tensors[conv2.outputs[0]].shape == (2, 16, 7, 7)
    assert g.tensors["conv2.weight"].shape == (16, 8, 3, 3) and g.tensors["conv2.weight"].role == "weight"
    assert g.tensors["fc.weight"].shape == (16, 10)  # stored (in, out) for x @ W
    assert g.tensors["bn.running_mean"].role == "constant"
    assert g.inputs == ["x", "y"] and g.tensors["y"].dtype == "int32"
    assert g.loss == g.outputs[1]


def test_inference_runs_the_module_in_eval_mode_and_restores_it():
    torch.manual_seed(0)
    net = CNN()
    net.train()
    xs, ys = torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,))
    before = net.bn.running_mean.clone()
    out = poptorch.inferenceModel(net)(xs, ys)
    assert net.training and net.bn.training
    torch.testing.assert_close(net.bn.running_mean, before)  # capture and inference leave it alone
    net.eval()
    torch.testing.assert_close(out[0], net(xs, ys)[0])


def test_elementwise_views_reductions_and_scalars():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.w = nn.Parameter(torch.randn(16, 16))

        def forward(self, ids, x):
            e = self.emb(ids)  # (B, S, 16)
            h = (e @ self.w) * 0.5 + 1.0 - x.unsqueeze(1) / 2
            h = torch.cat([h, F.gelu(h)], dim=-1).permute(0, 2, 1).contiguous()
            h = torch.sigmoid(h[:, :8, :]).transpose(1, 2)
            a, b = h.split(4, dim=-1)
            s = torch.bmm(a, b.transpose(1, 2)).mean(dim=(1, 2)) + h.sum()
            return F.dropout(torch.exp(-s), 0.3, training=False), h.reshape(h.shape[0], -1)

    m = M()
    ids, xs = torch.randint(0, 50, (4, 5)), torch.randn(4, 16)
    model = poptorch.inferenceModel(m, poptorch.Options().deviceIterations(2))
    out = model(ids, xs)
    ref = m(ids, xs)
    torch.testing.assert_close(out[0], ref[0])
    torch.testing.assert_close(out[1], ref[1])
    got = kinds(model)
    for kind in ("gather", "matmul", "scale", "add", "sub", "concat", "gelu", "transpose", "slice",
                 "sigmoid", "reduce_mean", "reduce_sum", "exp", "reshape"):
        assert kind in got, kind
    assert "dropout" not in got  # F.dropout(training=False) is an identity
    g = model.executable.graph
    assert g.tensors["emb.weight"].shape == (50, 16) and g.tensors["w"].role == "weight"


def test_half_precision_model():
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).half()
    model = poptorch.inferenceModel(net, poptorch.Options().deviceIterations(2).logCycleCount(True))
    xs = torch.randn(4, 8).half()
    out = model(xs)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, net(xs))
    g = model.executable.graph
    assert {t.dtype for t in g.tensors.values()} == {"float16"}
    fp32 = poptorch.inferenceModel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)),
                                   poptorch.Options().deviceIterations(2).logCycleCount(True))
    fp32(xs.float())
    assert model.executable.graph.tensors[g.inputs[0]].nbytes * 2 == fp32.executable.graph.tensors[
        fp32.executable.graph.inputs[0]].nbytes


def test_mse_loss_inference():
    class Reg(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def forward(self, x, t):
            y = self.fc(x)
            return y, F.mse_loss(y, t), nn.L1Loss()(y, t)

    m = Reg()
    xs, ts = torch.randn(6, 4), torch.randn(6, 1)
    out = poptorch.inferenceModel(m, poptorch.Options().deviceIterations(3))(xs, ts)
    assert out[1].shape == (3,)
    torch.testing.assert_close(out[1], torch.stack([F.mse_loss(m.fc(a), b) for a, b in zip(xs.split(2), ts.split(2))]))


# --- torch.export when fx cannot trace -----------------------------------------------------------------
class ShapeBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x, y):
        if x.shape[0] > 1:  # Python control flow on a shape: torch.fx cannot trace it
            x = x * 2
        with poptorch.Block("only", ipu_id=0):
            logits = self.fc(x)
        return logits, F.cross_entropy(logits, y)


def test_torch_export_captures_what_fx_cannot():
    torch.manual_seed(0)
    net = ShapeBranch()
    model = poptorch.trainingModel(net, poptorch.Options().deviceIterations(2).logCycleCount(True),
                                   torch.optim.SGD(net.parameters(), lr=0.5))
    xs, ys = torch.randn(4, 8), torch.randint(0, 4, (4,))
    losses = [float(model(xs, ys)[1]) for _ in range(4)]
    assert "graph captured with torch.export" in model.executable.notes
    assert losses[-1] < losses[0]
    assert kinds(model) == ["scale", "matmul", "add", "softmax_cross_entropy"]
    assert [op.block for op in forward_ops(model)] == [None, "only", "only", "only"]
    assert model.cycleCount() > 0


# --- annotations ---------------------------------------------------------------------------------------
class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.enc = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 4)
        poptorch.BeginBlock(self.enc, "encoder", ipu_id=1)

    @poptorch.BlockFunction("head", ipu_id=1)
    def classify(self, x):
        return self.head(x)

    def forward(self, x, y):
        with poptorch.NameScope("stem"):
            x = self.embed(x)
        x = self.enc(x)
        logits = self.classify(x)
        return logits, F.cross_entropy(logits, y)


def test_blocks_name_scopes_and_pipelining():
    o = poptorch.Options().deviceIterations(2).logCycleCount(True)
    o.Training.gradientAccumulation(4)
    model = poptorch.trainingModel(Blocks(), o)
    model(torch.randn(16, 8), torch.randint(0, 4, (16,)))
    ops = forward_ops(model)
    assert [(op.block, op.ipu) for op in ops] == [
        (None, 0), (None, 0), ("encoder", 1), ("encoder", 1), ("encoder", 1), ("encoder", 1),
        ("encoder", 1), ("head", 1), ("head", 1), ("head", 1)]
    assert ops[0].name.startswith("stem/embed/")
    assert model.executable.strategy == "pipelined"
    assert model.executable.ipus_per_replica == 2
    assert model.executable.system.name == "ipu-m2000"
    poptorch.removeBlocks(model.model)
    assert not any(type(h).__name__ == "_BlockHook" for m in model.model.modules()
                   for h in m._forward_pre_hooks.values())


class BranchyBlocks(Blocks):
    """Blocks with Python control flow on a shape, which torch.fx cannot trace (torch.export can)."""

    def forward(self, x, y):
        if x.shape[0] > 1:
            x = x * 2
        return super().forward(x, y)


class Wrapped(nn.Module):
    """Annotated layers one level down, under an attribute named ``model``, as Graphcore's ViT
    pre-training module holds its VisionTransformer (examples vision/vit/pytorch
    models/pipeline_model.py: ``self.model``)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.model = inner

    def forward(self, x, y):
        return self.model(x, y)


@pytest.mark.parametrize("inner, method", [(Blocks, "torch.fx"), (BranchyBlocks, "torch.export")])
def test_blocks_under_an_attribute_named_model(inner, method):
    o = poptorch.Options().deviceIterations(2)
    o.Training.gradientAccumulation(4)
    model = poptorch.trainingModel(Wrapped(inner()), o)
    model.compile(torch.randn(16, 8), torch.randint(0, 4, (16,)))
    assert f"graph captured with {method}" in model.executable.notes
    placed = [(op.block, op.ipu) for op in forward_ops(model) if op.block is not None]
    assert placed[0] == ("encoder", 1) and placed[-1] == ("head", 1)
    assert model.executable.ipus_per_replica == 2


def test_begin_block_twice_is_an_error():
    layer = nn.Linear(2, 2)
    poptorch.BeginBlock(layer, "a")
    with pytest.raises(poptorch.Error, match="module has already been assigned to a block."):
        poptorch.BeginBlock(layer, "b")


def test_explicit_stages():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

        def forward(self, x):
            poptorch.Block.useAutoId()
            with poptorch.Block():
                x = self.a(x)
            with poptorch.Block():
                return self.b(x)

    o = poptorch.Options().deviceIterations(4).setExecutionStrategy(
        poptorch.PipelinedExecution(poptorch.Stage("0").ipu(0), poptorch.Stage("1").ipu(1)))
    model = poptorch.inferenceModel(Two(), o)
    model(torch.randn(4, 8))
    assert [(op.block, op.stage, op.ipu) for op in forward_ops(model)] == [
        ("0", 0, 0), ("0", 0, 0), ("1", 1, 1), ("1", 1, 1)]


def test_annotation_functions_on_the_cpu_and_in_the_graph(capsys):
    class A(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            h = poptorch.set_available_memory(self.fc(x), 0.3)
            h = poptorch.recomputationCheckpoint(h)
            h = poptorch.ipu_print_tensor(poptorch.nop(h), "h")
            w = poptorch.serializedMatMul(h, self.fc.weight, poptorch.MatMulSerializationMode.OutputChannels, 2)
            outs = poptorch.for_loop(3, lambda t: torch.relu(t) * 0.5, [w])
            return outs[0], poptorch.identity_loss(outs[0], "sum"), poptorch.isRunningOnIpu()

    m = A()
    xs = torch.randn(2, 8)
    cpu = m(xs)
    assert cpu[2] is False
    torch.testing.assert_close(poptorch.identity_loss(xs, "mean"), xs.mean())
    with pytest.raises(AssertionError, match="Unsupported reduction type!"):
        poptorch.identity_loss(xs, "max")
    model = poptorch.inferenceModel(m)
    capsys.readouterr()
    out = model(xs)
    assert capsys.readouterr().out.count("h:") == 1  # printed by the run, not by the capture
    torch.testing.assert_close(out[0], cpu[0])
    torch.testing.assert_close(out[1], cpu[1])
    g = model.executable.graph
    fc = next(op for op in g.ops if op.name == "fc/add")
    assert fc.attrs["recomputation_checkpoint"] and "available_memory_proportion" not in fc.attrs
    # the proportion reaches the layer's matmul, as PopTorch sets it on the layer's one PopART op
    assert next(op for op in g.ops if op.name == "fc/matmul").attrs["available_memory_proportion"] == 0.3
    assert [op.kind for op in g.ops].count("matmul") == 3  # fc's, and the serialised one's 2 pieces
    assert [op.kind for op in g.ops].count("relu") == 3  # the loop is unrolled
    assert g.loss == g.outputs[1]


@pytest.mark.parametrize("bias", [True, False])
def test_set_available_memory_on_a_layers_output_reaches_its_matmul_or_convolution(bias):
    """nn.Conv2d and nn.Linear are captured as the convolution or matmul, then an add of the bias:
    the proportion set on the layer's output plans the convolution or matmul, with or without a bias."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(64, 64, 3, padding=1, bias=bias), nn.Linear(32, 32, bias=bias)

        def forward(self, x, y):
            return (poptorch.set_available_memory(self.conv(x), 0.05),
                    poptorch.set_available_memory(self.fc(y), 0.05))

    model = poptorch.inferenceModel(M())
    model(torch.randn(1, 64, 16, 16), torch.randn(2, 8, 32))
    amp = {op.kind: op.attrs.get("available_memory_proportion") for op in model.executable.graph.ops}
    assert amp["conv2d"] == amp["matmul"] == 0.05
    assert amp.get("add") is None


def test_stochastic_depth_is_the_input_at_inference_and_a_sample_mask_in_training():
    """torchvision.ops.stochastic_depth (fx-wrapped, kept whole by the capture): nothing at inference;
    in training a dropout of a (N, 1, 1, 1) mask and its product with the input."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):
            y = x + stochastic_depth(self.conv(x), 0.2, "row", self.training)
            return poptorch.identity_loss((y ** 2).mean(), "none") if self.training else y

    x = torch.randn(4, 8, 16, 16)
    inference = poptorch.inferenceModel(M().eval())
    inference(x)
    assert kinds(inference) == ["conv2d", "reshape", "add", "add"]  # the bias's per-channel view
    m = M().train()
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    training(x)
    ops = {op.kind: op for op in forward_ops(training)}
    assert kinds(training)[:6] == ["conv2d", "reshape", "add", "dropout", "mul", "add"]
    g = training.executable.graph
    assert g.tensors[ops["dropout"].outputs[0]].shape == (4, 1, 1, 1) and ops["dropout"].attrs["p"] == 0.2


@pytest.mark.parametrize("make, shape, mask", [
    (lambda: nn.Dropout2d(0.25), (4, 8, 6, 6), (4, 8, 1, 1)),
    (lambda: nn.Dropout1d(0.25), (4, 8, 6), (4, 8, 1)),
    (lambda: nn.Dropout3d(0.25), (4, 8, 3, 3, 3), (4, 8, 1, 1, 1)),
    (lambda: FunctionalDropout2d(), (4, 8, 6, 6), (4, 8, 1, 1)),
])
def test_channel_dropout_is_popart_s_shaped_dropout(make, shape, mask):
    """PopTorch lowers torch's feature dropout to PopART's ShapedDropout: a mask of N x C (and
    singletons) multiplying the input, not a dropout of every element; nothing at inference."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop, self.fc = make(), nn.Linear(shape[-1], shape[-1])

        def forward(self, x):
            y = self.fc(self.drop(x))
            return poptorch.identity_loss((y ** 2).mean(), "none") if self.training else y

    x = torch.randn(*shape)
    m = M().train()
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    training(x)
    g = training.executable.graph
    drop = next(op for op in forward_ops(training) if op.kind == "dropout")
    assert g.tensors[drop.outputs[0]].shape == mask and drop.attrs["p"] == 0.25
    masking = next(op for op in forward_ops(training) if drop.outputs[0] in op.inputs)
    assert masking.kind == "mul" and [g.tensors[t].shape for t in masking.inputs] == [shape, mask]
    inference = poptorch.inferenceModel(M().eval())
    inference(x)
    assert "dropout" not in kinds(inference)


@pytest.mark.parametrize("make, noise", [(lambda: nn.AlphaDropout(0.2), (4, 8, 6)),
                                         (lambda: nn.FeatureAlphaDropout(0.2), (4, 8, 1))])
def test_alpha_dropout_is_aten_s_composite_as_poptorch_s_dispatcher_lowers_it(make, noise):
    """PopTorch has no alpha-dropout handler: ATen's composite reaches it as a bernoulli noise (uniform,
    compare, cast), four scalar maps and ``input x noise + b``; the feature form's noise is N x C x 1;
    nothing at inference."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop, self.fc = make(), nn.Linear(6, 6)

        def forward(self, x):
            y = self.fc(self.drop(x))
            return poptorch.identity_loss((y ** 2).mean(), "none") if self.training else y

    x = torch.randn(4, 8, 6)
    m = M().train()
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    training(x)
    g = training.executable.graph
    drop = [op for op in forward_ops(training) if op.name.startswith("drop/")]
    assert [op.kind for op in drop] == ["random_uniform", "compare", "cast", "add", "mul", "add", "mul", "mul",
                                        "add"]
    assert g.tensors[drop[0].outputs[0]].shape == noise and g.tensors[drop[-1].outputs[0]].shape == (4, 8, 6)
    inference = poptorch.inferenceModel(M().eval())
    inference(x)
    assert "random_uniform" not in kinds(inference)


class FunctionalDropout2d(nn.Module):
    def forward(self, x):
        return F.dropout2d(x, 0.25, self.training)


@pytest.mark.parametrize("layer, shape, expected", [
    # torch's composites as PopTorch's dispatcher sees them (its own ops, or PopTorch's handler)
    (lambda: nn.Softmin(-1), (4, 8), ["scale", "softmax"]),
    (lambda: nn.LogSigmoid(), (4, 8), ["sigmoid", "log"]),
    (lambda: nn.Tanhshrink(), (4, 8), ["tanh", "sub"]),
    (lambda: Composite(lambda x: torch.outer(x[0], x[1])), (4, 8), ["slice", "slice", "reshape", "reshape", "mul"]),
    (lambda: Composite(lambda x: torch.diff(x, n=2, dim=1)), (4, 8), ["slice", "slice", "sub"] * 2),
    (lambda: nn.ChannelShuffle(2), (4, 8, 3, 3), ["reshape", "transpose", "reshape"]),
    (lambda: nn.LocalResponseNorm(3), (4, 8, 3, 3), ["mul", "reshape", "pad", "avgpool", "reshape", "map", "div"]),
])
def test_composites_are_the_ops_poptorch_sees(layer, shape, expected):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.layer = nn.Linear(shape[-1], shape[-1]), layer()

        def forward(self, x):
            y = self.layer(self.fc(x))
            return y, poptorch.identity_loss((y ** 2).mean(), "none")

    m = M()
    x = torch.randn(*shape)
    want = m(x)[0]
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.0))
    got = training(x)[0]
    torch.testing.assert_close(got, want)
    after_linear = kinds(training)[kinds(training).index("matmul") + 2:]  # the linear's matmul and bias add
    assert after_linear[:len(expected)] == expected
    assert training.simulation.seconds > 0


class Composite(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def stochastic_depth(input, p, mode, training=True):
    """torchvision.ops.stochastic_depth's signature and arithmetic (torchvision is not a test dependency)."""
    if not training or p == 0.0:
        return input
    size = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
    return input * torch.empty(size, dtype=input.dtype).bernoulli_(1.0 - p).div_(1.0 - p)


torch.fx.wrap("stochastic_depth")  # as torchvision wraps it, so the capture keeps it whole


def test_repeat_and_repeat_interleave_are_broadcast_views_of_the_input():
    """PopTorch's repeatHandler: Reshape, Expand, Reshape, run in place by PopART (ExpandInplaceOpx broadcasts the
    input); torch's repeat_interleave: unsqueeze, expand, clone (an Identity, removed), flatten. No copy."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            return y.repeat(1, 3, 1) + y.repeat_interleave(3, dim=1)

    m = M()
    x = torch.randn(2, 4, 8)
    model = poptorch.inferenceModel(m)
    torch.testing.assert_close(model(x), m(x))
    g = model.executable.graph
    assert "copy" not in [op.kind for op in g.ops]
    assert [g.tensors[op.outputs[0]].shape for op in g.ops if op.name.startswith("repeat")] == [(2, 12, 8)] * 2


def test_poptorch_errors_for_bad_annotation_arguments():
    with pytest.raises(poptorch.Error, match="You may only set available memory for torch.tensor values"):
        poptorch.set_available_memory(3, 0.5)
    with pytest.raises(ValueError, match="expects input tensors"):
        poptorch.for_loop(2, lambda t: t, (torch.ones(1),))
    with pytest.raises(poptorch.Error, match="nop must take a torch.tensor argument"):
        poptorch.nop([1])


def test_for_loop_runs_every_iteration_whose_outputs_the_next_does_not_read():
    """A body that ignores what it is given (a benchmark's loop of lookups): PopART's Loop still computes
    it every iteration, so the unrolled iterations are not pruned as unused; and each iteration does the
    Loop's own work (LoopOpx): the output copied back to the body's input, the exit flag's map and the
    iterator's increment."""
    class Lookups(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(64, 16))

        def forward(self, index, out):
            return poptorch.for_loop(10, lambda o: self.table.index_select(0, index), [out])[0]

    model = poptorch.inferenceModel(Lookups())
    model(torch.randint(0, 64, (32,)), torch.zeros(32, 16))
    ops = model.executable.graph.ops
    assert [op.kind for op in ops].count("gather") == 10
    assert sum(1 for op in ops if op.attrs.get("loop_carried")) == 10
    assert sorted(op.attrs["loop_control"] for op in ops if op.attrs.get("loop_control")) == \
        ["exit_update"] * 10 + ["iterator"] * 10

    class PassThrough(Lookups):  # the index passed through unchanged is copied too (LoopOpx, no AliasZeroCopy)
        def forward(self, index, out):
            return poptorch.for_loop(10, lambda i, o: [i, self.table.index_select(0, i)], [index, out])[1]

    model = poptorch.inferenceModel(PassThrough())
    model(torch.randint(0, 64, (32,)), torch.zeros(32, 16))
    ops = model.executable.graph.ops
    carried = [op for op in ops if op.attrs.get("loop_carried")]
    assert len(carried) == 20
    assert len({op.attrs["loop_group"] for op in carried}) == 10  # one group of two an iteration
    assert sum(1 for op in ops if op.attrs.get("loop_control") == "exit_update") == 10


def test_experimental_collectives_cpu_view():
    from sim.poptorch import experimental
    t = torch.arange(4.0)
    assert experimental.all_gather_cross_replica(t, 2).shape == (2, 4)
    torch.testing.assert_close(experimental.all_reduce_cross_replica_sum(t, 4), t * 4)
    assert experimental.all_to_all_single_cross_replica(t, 2).tolist() == [0.0, 1.0, 0.0, 1.0]


# --- unknown ops -------------------------------------------------------------------------------------------
class Swish(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return F.silu(self.fc(x))


class Hypot(nn.Module):  # PopTorch has no handler for hypot, and no rule prices it here
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.hypot(self.fc(x), x)


def test_unknown_op_names_the_op_and_how_to_price_it():
    with pytest.raises(sim.UnsupportedOpError) as e:
        poptorch.inferenceModel(Hypot())(torch.randn(2, 8))
    msg = str(e.value)
    assert "torch.hypot" in msg
    assert "sim.poptorch.register_op" in msg and "ctx.custom(vertices=" in msg


def test_a_branch_on_a_tensor_s_values_is_refused_with_what_to_do():
    """Hugging Face's OPT and BART decide on their attention mask with ``if (mask == 1).all()``: neither
    torch.fx nor torch.export (nor PopTorch, tracing without values) can follow it. The error names the
    model's line."""
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x, mask):
            y = self.fc(x)
            if (mask == 1).all():
                y = y * 2
            return poptorch.identity_loss(y.sum(), "none")

    m = Branchy()
    model = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    with pytest.raises(sim.GraphError, match=r"could not capture the model: .* \(at .*test_poptorch_capture\.py:"
                                             r"\d+ in forward: `if \(mask == 1\)\.all\(\):`\): the model's Python "
                                             r"branches on a tensor's values .*torch\.where"):
        model(torch.randn(2, 4), torch.ones(2, 4))


def test_torch_s_own_python_functions_without_a_rule_run_as_their_torch_ops():
    """F.multilabel_soft_margin_loss and F.lp_pool2d are Python over torch ops, which torch.fx keeps whole
    (they answer __torch_function__) and PopTorch's dispatcher sees one by one: their ATen ops are recorded
    (sim.poptorch._composite) and priced, each named under the function's. A torch function whose body has an
    op without a rule names both (F.grid_sample's aten.grid_sampler_2d)."""
    class Losses(nn.Module):
        def forward(self, x):
            pooled = F.lp_pool2d(x, 2, 2)
            return F.multilabel_soft_margin_loss(pooled.flatten(1), (pooled.flatten(1) > 0).float())

    model = poptorch.inferenceModel(Losses())
    model(torch.randn(2, 3, 8, 8))
    # lp_pool2d: sign(y) relu(|y|) ^ (1/p) of y the average pool of x ^ p times its window; the loss's log-sigmoids
    assert {"pow", "avgpool", "sign", "relu", "sigmoid", "log", "reduce_mean"} <= {
        op.kind for op in model.executable.graph.ops}
    graph = model.executable.graph
    assert {op.kind for op in graph.ops if op.name.startswith("lp_pool2d/")} == {"pow", "avgpool", "sign", "relu",
                                                                                "abs", "mul", "scale"}
    assert "graph captured with torch.fx" in model.simulation.all_notes

    class Sampled(nn.Module):
        def forward(self, x):
            return F.grid_sample(x, torch.zeros(2, 4, 4, 2), align_corners=False)

    with pytest.raises(sim.UnsupportedOpError, match=r"no cost for aten\.grid_sampler_2d.* \(reached from "
                                                     r"torch\.nn\.functional\.grid_sample, whose ops PopTorch's "
                                                     r"dispatcher sees one by one; .*register_op\('grid_sample'"):
        poptorch.inferenceModel(Sampled())(torch.randn(2, 3, 8, 8))


def test_aten_composites_without_a_rule_run_as_the_ops_they_call():
    """torch.kron, torch.isclose and torch.trapezoid are ATen composites (CompositeImplicitAutograd): PopTorch's
    dispatcher never sees them whole, only the ops they call, which are recorded and priced where the call stands,
    named under it; the weights before them train. An ATen kernel PopTorch has no handler for stays refused
    (torch.logit), and so does a composite that reaches one (torch.pdist's aten._pdist_forward), naming both."""
    class Composites(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x, y):
            z = torch.kron(self.fc(x), y)
            close = torch.isclose(x, 2 * x).float().sum()
            return z, poptorch.identity_loss(torch.trapezoid(z).sum() + close + F.relu6(x).sum(), "none")

    m = Composites()
    x, y = torch.randn(4, 4), torch.randn(2, 2)
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    z, _ = training(x, y)
    assert z.shape == (8, 8)
    g = training.executable.graph
    forward = [op for op in g.ops if op.pass_ == "forward"]
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in forward if op.name.startswith("kron/")] == [
        ("reshape", (4, 1, 4, 1)), ("reshape", (1, 2, 1, 2)), ("mul", (4, 2, 4, 2)), ("reshape", (8, 8))]
    assert [op.kind for op in forward if op.name.startswith("relu6/")] == ["clamp"]
    assert {op.kind for op in forward if op.name.startswith("isclose/")} == {"compare", "scale", "abs", "add", "sub",
                                                                             "mul", "logical", "logical_not"}
    assert {op.kind for op in forward if op.name.startswith("trapezoid/")} >= {"add", "sub", "reduce_sum"}
    assert {op.inputs[0] for op in g.ops if op.kind == "sgd_update"} == {"fc.weight", "fc.bias"}

    class Identity(nn.Module):  # composites that return their input: no op
        def forward(self, x):
            return torch.positive(torch.real(x)) * 2

    model = poptorch.inferenceModel(Identity())
    assert torch.equal(model(x), 2 * x)
    assert [op.kind for op in model.executable.graph.ops] == ["scale"]

    class Kernel(nn.Module):
        def forward(self, x):
            return torch.logit(x.sigmoid())

    with pytest.raises(sim.UnsupportedOpError, match=r"no cost for torch\.logit \(node 'logit'\): PopTorch has no "
                                                     r"handler for aten::logit, .*\. Give"):
        poptorch.inferenceModel(Kernel())(torch.randn(4, 4))

    class Distances(nn.Module):
        def forward(self, x):
            return F.pdist(x)

    with pytest.raises(sim.UnsupportedOpError, match=r"no cost for aten\._pdist_forward\.default .*\(reached from "
                                                     r"torch\.pdist, whose ops PopTorch's dispatcher sees one by one; "
                                                     r"sim\.poptorch\.register_op\('pdist', fn\) prices the whole call "
                                                     r"instead\)"):
        poptorch.inferenceModel(Distances())(torch.randn(4, 4))


def test_explicit_composites_run_as_the_ops_their_kernels_call():
    """rot90, deg2rad, rad2deg and dist are CompositeExplicitAutograd: ATen's kernel runs on the IPU ahead of
    PopTorch's fallback, so PopTorch lowers the ops it calls (a flip and a transpose; a multiply by the constant,
    an integer input cast first; the difference's norm), and each is priced as those ops, named under the call."""
    class Explicit(nn.Module):
        def forward(self, x, y, n):
            return (torch.rot90(x, 1, (0, 1)), torch.rot90(x, 2, (0, 1)), torch.rot90(x, -1, (1, 0)),
                    torch.deg2rad(x), torch.rad2deg(n), torch.dist(x, y, 1))

    x, y, n = torch.randn(4, 6), torch.randn(4, 6), torch.arange(24).reshape(4, 6)
    model = poptorch.inferenceModel(Explicit())
    for got, want in zip(model(x, y, n), Explicit()(x, y, n)):
        assert torch.allclose(got, want)
    g = model.executable.graph
    assert [(op.name, op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == [
        ("rot90/reverse", "copy", (4, 6)), ("rot90/transpose", "transpose", (6, 4)),
        ("rot90/reverse_2", "copy", (4, 6)),
        ("rot90/reverse_3", "copy", (4, 6)), ("rot90/transpose_2", "transpose", (6, 4)),
        ("deg2rad/mul", "scale", (4, 6)),
        ("rad2deg/_to_copy", "cast", (4, 6)), ("rad2deg/mul", "scale", (4, 6)),
        ("dist/sub", "sub", (4, 6)), ("dist/abs", "abs", (4, 6)), ("dist/linalg_vector_norm", "reduce_sum", (1,))]
    assert g.tensors[g.ops[6].outputs[0]].dtype == "float32"


@pytest.mark.parametrize("call, says", [
    (lambda x: torch.hypot(x, x), r"torch\.hypot \(node 'hypot'\): PopTorch has no handler for aten::hypot, so its "
                                  r"compiler stops with \"Unsupported ops found in compiled model\"\. Give it one"),
    (lambda x: torch.trace(x), r"no handler for aten::trace, .*; \(x \* torch\.eye\(\*x\.shape\)\)\.sum\(\) is "
                               r"the same\. Give"),
    (lambda x: torch.nonzero(x), r"its output's shape depends on the tensor's values, which PopTorch refuses: \"The "
                                 r"IPU cannot support dynamic output shapes\""),
    (lambda x: torch.argwhere(x), r"aten\.nonzero\.default .*dynamic output shapes.*reached from torch\.argwhere"),
    (lambda x: torch.diagonal(x), r"aten::diagonal makes an as_strided view, which PopTorch's handler refuses "
                                  r"\(\"InternalError: aten::as_strided should have been intercepted earlier\"\); "
                                  r"for a square x"),
    (lambda x: torch.cov(x), r"ATen's composite for aten::cov reads the tensor's values on the host"),
    (lambda x: x.clone().random_(4), r"PopTorch's handler for aten::random_ reads both bounds")])
def test_an_op_without_a_rule_says_whether_poptorch_could_lower_it(call, says):
    """The error of an ATen op without a rule says why PopTorch would not run it either: no handler (its
    compiler's "Unsupported ops found in compiled model"), an output shaped by values, an as_strided view, a
    composite reading values; with what to write instead where there is a plain equivalent."""
    class Net(nn.Module):
        def forward(self, x):
            return call(x)

    with pytest.raises(sim.UnsupportedOpError, match=says):
        poptorch.inferenceModel(Net())(torch.rand(4, 4))


def test_random_is_an_int32_uniform_draw_cast_to_the_tensor_s_type():
    """x.random_(low, high): PopTorch's randomHandler draws int32 uniforms in [low, high - 1] and casts them."""
    class Net(nn.Module):
        def forward(self, x):
            return x.clone().random_(2, 5) * x

    model = poptorch.inferenceModel(Net())
    model(torch.rand(4, 4))
    g = model.executable.graph
    assert [(op.kind, g.tensors[op.outputs[0]].dtype) for op in g.ops] == [
        ("random_uniform", "int32"), ("cast", "float32"), ("mul", "float32")]


def test_every_op_poptorch_lowers_has_a_rule_but_these():
    """sim.poptorch prices every ATen op PopTorch 3.4 has a handler for (sim/poptorch/_handlers.py), except these:
    constants and the values the dispatcher intercepts (folded, or host-side, before any rule); ops only PopTorch's
    TorchScript front end or another device's kernels make; ops the capture meets as something else
    (F.multilabel_soft_margin_loss as torch's Python composite, nll_loss2d inside nll_loss_nd's rule); and
    as_strided, which its handler refuses."""
    from sim.poptorch import _handlers, _mapping
    missing = sorted(n for n in _handlers.HANDLED
                     if not _mapping.RULES.get(n) and not _mapping.RULES.get(n.rstrip("_")))
    assert missing == ["Int", "_local_scalar_dense", "_reshape_alias", "_weight_norm_interface", "arange", "as_strided",
                       "convolution_overrideable", "empty", "empty_strided", "full", "is_complex", "item",
                       "mkldnn_convolution", "multilabel_soft_margin_loss", "nll_loss2d", "nll_loss2d_forward", "ones",
                       "size", "unsafe_chunk", "zeros"]


def test_a_branch_on_values_inside_a_torch_function_names_both_lines():
    """F.gaussian_nll_loss checks its variances on the host (``torch.any(var < 0)``), which no tracer follows:
    the error names the model's call and the line of torch's it stopped at."""
    class Nll(nn.Module):
        def forward(self, x):
            return F.gaussian_nll_loss(x, x.flip(0), x.abs() + 0.1, reduction="none")

    with pytest.raises(sim.GraphError, match=r"at .*test_poptorch_capture\.py:\d+ in forward: `return F\.gaussian_nll"
                                             r".*; inside torch/nn/functional\.py:\d+ in gaussian_nll_loss: "
                                             r"`.*torch\.any\(var < 0\):`\): the model's Python branches"):
        poptorch.inferenceModel(Nll())(torch.randn(8, 4))


def test_a_mixture_of_experts_routed_by_its_values_is_refused_once_with_what_to_do(capsys):
    """Hugging Face's Mixtral skips the experts no token chose (``if`` on a histogram of the routing): torch.fx
    stops at the branch and torch.export at the value it needs. The error says so and what to do; torch's own
    report of the failed export (its logs, the partial graph it prints) stays off stderr."""
    class Routed(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(8, 4)
            self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

        def forward(self, x):
            chosen = self.gate(x).argmax(-1)
            counts = torch.histc(chosen.float(), bins=4, min=0, max=3)
            out = torch.zeros_like(x)
            for e, expert in enumerate(self.experts):
                if counts[e] > 0:
                    rows = torch.where(chosen == e)[0]
                    out[rows] = expert(x[rows])
            return out

    with pytest.raises(sim.GraphError, match=r"control flow.*branches on a tensor's values .*torch\.where"):
        poptorch.inferenceModel(Routed().eval())(torch.randn(6, 8))
    err = capsys.readouterr().err
    assert "def forward" not in err and "GuardOnDataDependentSymNode" not in err


def test_a_model_that_fails_in_plain_pytorch_after_a_loop_over_a_tensor_is_told_so():
    """Graphcore's BERT fine-tuning tutorial checkpoints each layer's outputs with a forward hook that rebuilds
    them as a tuple (written when Hugging Face's layers returned tuples); on a layer that returns a tensor it
    loops over the tensor's rows, which torch.fx cannot follow and torch.export can, and the next layer then
    gets a tuple, which fails in plain PyTorch too. The error says that torch.export's error is the model's
    own, not that the model branches on a value."""
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x).relu()

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(2))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x.sum(dim=-1)

    m = Stack().eval()
    m.layers[0].register_forward_hook(lambda module, inputs, outputs: tuple(
        poptorch.recomputationCheckpoint(y) for y in outputs))
    with pytest.raises(TypeError, match="must be Tensor, not tuple"):
        m(torch.randn(2, 4))  # plain PyTorch: the second layer gets a tuple
    with pytest.raises(sim.GraphError, match=r"torch\.export's error is the model's own: check that the model runs "
                                             r"in plain PyTorch"):
        poptorch.inferenceModel(m)(torch.randn(2, 4))


def test_what_a_model_writes_to_stderr_while_torch_export_traces_it_is_passed_on(capsys):
    """Only torch's report of a failed export is held back: a model's own stderr output while torch.export
    runs it (torch.fx cannot: it branches on a shape) reaches the user."""
    class Talks(nn.Module):
        def forward(self, x):
            if x.shape[0] > 1 and torch.compiler.is_exporting():
                print("exported with two or more rows", file=sys.stderr)
            return x * 2

    poptorch.inferenceModel(Talks())(torch.randn(3, 4))
    assert "exported with two or more rows" in capsys.readouterr().err


def test_torch_activation_checkpointing_runs_and_records_its_ops_once():
    """torch.utils.checkpoint asks its arguments' device (ipu, to the model's code) for a device
    module, which torch has none of: it runs on the CPU the tensors are on, its ops recorded once as
    PopTorch records them, and the notes say it recomputes nothing."""
    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            h = torch.utils.checkpoint.checkpoint(lambda t: self.fc1(t).relu(), x, use_reentrant=False)
            return poptorch.identity_loss(self.fc2(h).sum(), "none")

    m = Checkpointed()
    model = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    loss = model(torch.randn(4, 8))
    assert torch.isfinite(loss).all()
    assert kinds(model).count("matmul") == 2
    assert any(n.startswith("torch.utils.checkpoint.checkpoint: ") for n in model.executable.notes)


class _MaskedSoftmax(torch.autograd.Function):
    """A custom autograd function as Hugging Face's DeBERTa-v2 writes its XSoftmax: a constant made
    inside the forward, a saved output, a hand-written backward."""

    @staticmethod
    def forward(ctx, x, mask):
        out = torch.softmax(x.masked_fill(~mask, torch.tensor(torch.finfo(x.dtype).min)), -1)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        out, = ctx.saved_tensors
        return out * (grad - (grad * out).sum(-1, keepdim=True)), None


class _Scale(torch.autograd.Function):  # the newer form: forward without ctx, setup_context apart
    @staticmethod
    def forward(x):
        return x * 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


@pytest.mark.parametrize("masked, method", [(True, "torch.export"), (False, "torch.fx")])
def test_custom_autograd_functions_are_traced_through_their_forward(masked, method):
    """PopTorch's autograd is PopART's: a custom function's forward ops are recorded and differentiated
    with the rest, by torch.fx or (a forward reading a tensor's dtype) torch.export; its backward is not
    used on the IPU (the CPU numbers still use it)."""
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, mask):
            h = _Scale.apply(self.fc(x))
            probs = _MaskedSoftmax.apply(h, mask) if masked else torch.softmax(h, -1)
            return poptorch.identity_loss(probs.sum(), "none")

    m = Attention()
    model = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    assert torch.isfinite(model(torch.randn(4, 8), torch.rand(4, 8) > 0.3)).all()
    assert "softmax" in kinds(model) and "softmax_grad" in [op.kind for op in model.executable.graph.ops]
    notes = model.executable.notes
    assert f"graph captured with {method}" in notes
    functions = [n for n in notes if n.startswith("torch.autograd.Function")]
    assert len(functions) == 1 + masked and all("its own backward is not used" in n for n in functions)


def test_complex_tensors_are_refused_saying_how_to_write_them():
    class Rotary(nn.Module):
        def forward(self, x):
            z = torch.view_as_complex(x.reshape(4, 4, 2))
            return torch.view_as_real(z * z).sum()

    with pytest.raises(sim.UnsupportedOpError, match="the IPU has no complex types .*with real tensors"):
        poptorch.inferenceModel(Rotary())(torch.randn(4, 8))


def test_packed_sequences_are_refused_by_name():
    """pack_padded_sequence makes both torch.fx and torch.export fail inside torch's rnn helpers: the
    error names packed sequences and what to do, not the tracers' own failures."""
    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True)

        def forward(self, x, lengths):
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            return nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True)[0]

    with pytest.raises(sim.UnsupportedOpError, match="does not support packed sequences .*pass the padded batch"):
        poptorch.inferenceModel(Packed())(torch.randn(3, 5, 8), torch.tensor([5, 3, 2]))


def test_registered_ops_are_priced():
    poptorch.register_op(F.silu, lambda ctx: ctx.op("sigmoid", ctx.inputs[:1]))
    try:
        model = poptorch.inferenceModel(Swish(), poptorch.Options().logCycleCount(True))
        xs = torch.randn(2, 8)
        out = model(xs)
        torch.testing.assert_close(out, F.silu(model.fc(xs)))
        assert kinds(model)[-1] == "sigmoid"
    finally:
        poptorch.unregister_op(F.silu)

    class Fancy(nn.Module):
        def forward(self, x):
            return x.cumsum(1)

    class UsesFancy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fancy = Fancy()

        def forward(self, x):
            return self.fancy(x) * 2

    poptorch.register_op(Fancy, lambda ctx: ctx.custom(vertices=ctx.numel(), vertex_cycles=40))
    try:
        model = poptorch.inferenceModel(UsesFancy(), poptorch.Options().logCycleCount(True))
        model(torch.randn(2, 8))
        custom = next(op for op in forward_ops(model) if op.kind == "custom")
        assert custom.attrs["vertices"] == 16 and custom.attrs["vertex_cycles"] == 40
        assert model.executable.costs[custom.name].compute_cycles > 0
    finally:
        poptorch.unregister_op(Fancy)


def test_training_without_a_loss_is_an_error():
    with pytest.raises(poptorch.Error, match="no loss"):
        poptorch.trainingModel(nn.Linear(4, 2))(torch.randn(2, 4))


def test_transformer_layer_and_scaled_dot_product_attention():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    model = poptorch.inferenceModel(layer, poptorch.Options().deviceIterations(2))
    xs = torch.randn(4, 5, 32)
    out = model(xs)
    assert layer.training  # restored after the eval-mode run
    layer.eval()
    torch.testing.assert_close(out, layer(xs))
    got = kinds(model)
    assert got.count("layernorm") == 2 and "softmax" in got and got.count("matmul") >= 6

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(32, 96), nn.Linear(32, 4)

        def forward(self, x, y):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4)
            h = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, 32)
            logits = self.out(h).mean(1)
            return logits, F.cross_entropy(logits, y)

    head = Head()
    training = poptorch.trainingModel(head, optimizer=torch.optim.Adam(head.parameters(), lr=0.01))
    xs, ys = torch.randn(4, 6, 32), torch.randint(0, 4, (4,))
    losses = [float(training(xs, ys)[1]) for _ in range(5)]
    assert losses[-1] < losses[0]
    # is_causal: the causal bias, a constant (L, S) mask PopTorch folds from torch's tril, added as a mask is
    # torch 2.0's math decomposition (PopTorch 3.4): q and k^T each divided by E ** 0.25 before the product
    assert "transpose div div matmul add softmax matmul" in " ".join(kinds(training))
    mask = next(op for op in forward_ops(training) if op.kind == "add" and op.name.endswith("mask"))
    assert training.executable.graph.tensors[mask.inputs[1]].shape == (6, 6)


def test_attention_with_a_scale_multiplies_query_and_key_by_its_root():
    """torch 2.1's math path, with ``scale=``: q and k^T each multiplied by sqrt(scale), as both ONNX exporters
    write it (two Muls), not the scores scaled once."""
    class Attend(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, scale=0.25)

    model = poptorch.inferenceModel(Attend())
    model(*(torch.randn(2, 4, 16, 8) for _ in range(3)))
    scales = [op for op in forward_ops(model) if op.kind == "scale"]
    assert [op.attrs["factor"] for op in scales] == [0.5, 0.5]
    g = model.executable.graph
    assert sorted(g.tensors[op.outputs[0]].shape for op in scales) == [(2, 4, 8, 16), (2, 4, 16, 8)]


def _priced_alike(make, xs) -> list:
    """Inference models of ``make(True)`` and ``make(False)``, each returning torch's values on ``xs``, with
    the same op kinds and the same cycle count (the two spell the same computation two ways)."""
    runs = []
    for variant in (True, False):
        torch.manual_seed(0)
        net = make(variant).eval()
        model = poptorch.inferenceModel(net)
        torch.testing.assert_close(model(xs), net(xs))
        runs.append(model)
    assert kinds(runs[0]) == kinds(runs[1])
    assert runs[0].simulation.cycle_count == runs[1].simulation.cycle_count > 0
    return runs


def test_grouped_query_attention_repeats_key_and_value_heads_as_torch_does():
    """``enable_gqa=True`` (torch 2.5; 8 query heads sharing 2 key/value heads): torch's math path repeats each
    key and value head for its query heads, so the run is the one with repeat_interleave written out: the
    same op kinds, the same cycles, torch's values; a training step runs."""
    class Attend(nn.Module):
        def __init__(self, gqa: bool):
            super().__init__()
            self.gqa, self.q, self.kv = gqa, nn.Linear(32, 32), nn.Linear(32, 16)

        def forward(self, x):
            b, s, _ = x.shape
            q = self.q(x).view(b, s, 8, 4).transpose(1, 2)
            k, v = self.kv(x).view(b, s, 2, 2, 4).permute(2, 0, 3, 1, 4)
            if self.gqa:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            k, v = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    xs = torch.randn(2, 6, 32)
    grouped, _ = _priced_alike(Attend, xs)
    assert [op.kind for op in forward_ops(grouped) if op.name.startswith("repeat")] == ["reshape", "reshape"]  # views

    class Loss(Attend):
        def forward(self, x):
            return poptorch.identity_loss(super().forward(x).square(), "mean")

    net = Loss(True)
    training = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    assert float(training(xs)) > 0


def test_concatenating_onto_an_empty_cache_is_the_new_entries_alone():
    """Hugging Face's KV cache (transformers 5: DynamicLayer) starts as ``torch.tensor([])`` and
    concatenates each step's keys and values onto it; torch skips the empty tensor, and so does the
    capture (a constant with no elements holds no data): the same cycles as attention without the cache,
    and torch's values. Before, the empty constant stopped the capture ("every dimension must be > 0")."""
    class Attend(nn.Module):
        def __init__(self, cached: bool):
            super().__init__()
            self.cached, self.qkv = cached, nn.Linear(32, 96)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4)
            if self.cached:
                keys, values = torch.tensor([], dtype=x.dtype), torch.tensor([], dtype=x.dtype)
                k, v = torch.cat([keys, k], dim=-2), torch.cat([values, v], dim=-2)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, 32)

    cached, _ = _priced_alike(Attend, torch.randn(2, 6, 32))
    assert "concat" not in kinds(cached)


def test_slices_and_split_pieces_with_no_elements_hold_no_data():
    """A slice of nothing (Phi-3's pass-through part of a head the rotary embedding covers whole:
    ``x[..., rotary:]``) and a split's empty piece (Mamba's) are constants with no data, which the
    concatenation after them leaves out: the same op kinds and cycles as the model without them, torch's
    values, and a training step as torch's."""
    class Rotate(nn.Module):
        def __init__(self, empty_pieces: bool):
            super().__init__()
            self.empty, self.fc = empty_pieces, nn.Linear(16, 16)

        def forward(self, x):
            h = self.fc(x)
            if not self.empty:
                return torch.cat([h[..., 8:], h[..., :8]], -1) * 2 + h
            rotated, kept = h[..., :16], h[..., 16:]
            a, b, c = torch.split(rotated, [8, 8, 0], -1)
            return torch.cat([b, a, c, kept], -1) * 2 + h

    xs = torch.randn(3, 16)
    _priced_alike(Rotate, xs)

    class Loss(Rotate):
        def __init__(self):
            super().__init__(empty_pieces=True)

        def forward(self, x):
            return poptorch.identity_loss(super().forward(x).square(), "mean")

    torch.manual_seed(0)
    net, reference = Loss(), Loss()
    reference.load_state_dict(net.state_dict())
    expected = reference(xs)
    expected.backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    trained = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    torch.testing.assert_close(trained(xs), expected.detach())
    for p, q in zip(net.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach())


def test_a_branch_on_a_traced_values_type_is_captured_as_the_model_runs():
    """torch.fx traces with proxies, so ``isinstance(state, tuple)`` is False while tracing and the
    fx graph would read the LSTM's last cell state where the model reads its last output. The
    traced graph's outputs are checked against the model's; here they differ, and the model is
    captured with torch.export, which follows the model's branch."""
    class LastState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.fc = torch.nn.LSTM(6, 5), torch.nn.Linear(5, 3)

        def forward(self, x):
            _, state = self.rnn(x)
            h = state[0] if isinstance(state, tuple) else state
            return self.fc(h[-1])

    torch.manual_seed(0)
    model = poptorch.inferenceModel(LastState().eval())
    model(torch.randn(4, 2, 6))
    g = model.executable.graph
    lstm = next(o for o in g.ops if o.kind == "lstm")
    producers = {t: op for op in g.ops for t in op.outputs}
    last_step = next(o for o in g.ops if o.kind == "slice")  # h[-1]
    state = producers[last_step.inputs[0]]  # the reshape of the layer's state output it reads
    assert state.inputs[0] == lstm.outputs[1]  # h_n, not c_n
    assert any("captured with torch.export instead" in n for n in model.executable.notes)


def test_a_branch_on_a_traced_values_type_that_breaks_the_trace_is_captured_as_the_model_runs():
    """The same branch can make the fx graph fail where the model runs (here it would take the
    first row of the logits, and the loss would refuse it): that too is the trace's failure, and
    the model is captured with torch.export; a model that fails itself keeps its own error."""
    class Unwrapping(nn.Module):
        def __init__(self, broken: bool = False):
            super().__init__()
            self.fc, self.broken = nn.Linear(6, 3), broken

        def forward(self, x, y):
            out = self.fc(x)
            if not isinstance(out, torch.Tensor):  # a model returning (logits, aux) elsewhere
                out = out[0]
            return out, F.cross_entropy(out[:, :2] if self.broken else out, y)

    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    m = Unwrapping()
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    training(x, y)
    g = training.executable.graph
    loss = next(op for op in forward_ops(training) if op.kind == "softmax_cross_entropy")
    assert g.tensors[loss.inputs[0]].shape == (4, 3)  # the logits, not their first row
    assert any("fails (ValueError" in n and "captured with torch.export instead" in n
               for n in training.executable.notes)
    m = Unwrapping(broken=True)
    with pytest.raises(IndexError):  # the model's own error: class 2 beyond its two logits
        poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))(x, torch.full((4,), 2))


def relative_bias(table, index):
    """Like torchvision's Swin ``_get_relative_position_bias``: rows of a table, one per pair of
    positions, as a bias per head (fx-wrapped below, as torchvision wraps it)."""
    return table[index].reshape(4, 4, -1).permute(2, 0, 1).unsqueeze(0)


torch.fx.wrap("relative_bias")


def test_a_python_function_fx_keeps_whole_without_a_rule_runs_as_its_torch_ops():
    """torch.fx keeps an fx-wrapped function as one node; PopTorch's dispatcher sees its torch ops: they are
    recorded and priced where the call stands (sim.poptorch._composite), named under the function's, and the
    table they read trains."""
    class Biased(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(7, 2))
            self.register_buffer("index", torch.randint(0, 7, (16,)))
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x) + relative_bias(self.table, self.index)
            return y, poptorch.identity_loss((y ** 2).mean(), "none")

    m = Biased()
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    training(torch.randn(3, 2, 4, 4))
    assert training.executable.graph.tensors  # captured
    assert "graph captured with torch.fx" in training.executable.notes
    g = training.executable.graph
    assert [op.kind for op in g.ops if op.name.startswith("relative_bias/") and op.pass_ == "forward"] == [
        "gather", "reshape", "transpose", "reshape"]
    assert any(op.kind == "sgd_update" and op.inputs[0] == "table" for op in g.ops)


def test_in_place_ops_whose_result_is_unused_are_captured_with_torch_export():
    """WeNet's attention (Graphcore's Conformer) transposes q and k in place and uses them after, and
    Graphcore's ViT normalises its images with mul_ / sub_: torch.fx records no mutation, so the
    capture takes torch.export, which sees it; the shapes and the multiply are the model's."""
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k = nn.Linear(32, 32), nn.Linear(32, 32)

        def forward(self, x):
            x = x.clone()
            x.mul_(2.0)
            q, k = self.q(x).view(2, -1, 4, 8), self.k(x).view(2, -1, 4, 8)
            q.transpose_(1, 2)
            k.transpose_(1, 2)
            return torch.matmul(q, k.transpose(-2, -1))

    torch.manual_seed(0)
    net = Attn()
    x = torch.randn(2, 10, 32)
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(x), net(x))
    assert "graph captured with torch.export" in model.executable.notes
    g = model.executable.graph
    scores = next(op for op in g.ops if op.kind == "matmul" and len(g.tensors[op.outputs[0]].shape) == 4)
    assert g.tensors[scores.outputs[0]].shape == (2, 4, 10, 10)
    assert any(op.kind in ("scale", "mul") for op in g.ops)


def test_a_transpose_in_place_whose_result_is_used_is_the_view():
    """x.t_() and x.swapaxes_(0, 1) reached the transpose rule under their in-place names, which it did not know
    (a TypeError): each is the transpose, one op."""
    class InPlace(nn.Module):
        def forward(self, x, y):
            return x.t_() * 2, y.swapaxes_(0, 1) + 1

    x, y = torch.randn(4, 3), torch.randn(2, 5)
    model = poptorch.inferenceModel(InPlace())
    a, b = model(x.clone(), y.clone())
    torch.testing.assert_close(a, x.t() * 2)
    torch.testing.assert_close(b, y.t() + 1)
    g = model.executable.graph
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops if op.kind == "transpose"] == [
        ("transpose", (3, 4)), ("transpose", (5, 2))]


def test_ops_whose_results_nothing_uses_are_pruned_as_popart_prunes_them():
    """Graphcore's BERT OnehotGather makes a one-hot it drops; PopART's Prune removes it, and so does
    the capture, saying so in the notes."""
    class Gather(nn.Module):
        def forward(self, seq, pos):
            F.one_hot(pos, seq.shape[1])  # computed and dropped, as the example does
            return torch.matmul(F.one_hot(pos, seq.shape[1]).to(seq.dtype), seq)

    model = poptorch.inferenceModel(Gather())
    model(torch.randn(4, 16, 8), torch.randint(0, 16, (4, 5)))
    g = model.executable.graph
    assert [op.kind for op in g.ops].count("map") == 1  # one one-hot
    assert any("1 op(s) whose results nothing uses removed" in n for n in model.executable.notes)
    used = {t for op in g.ops for t in op.inputs} | set(g.outputs)
    assert all(set(op.outputs) & used for op in g.ops)


def test_an_in_place_update_of_a_buffer_is_kept():
    """TGN writes its memory buffers with index_put_ in forward, for the next call to read: under
    torch.export the in-place op's result is read by nothing in the graph, yet the write is kept."""
    class Memory(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("store", torch.zeros(1000, 16))

        def forward(self, idx, v):
            out = self.store[idx].sum() + v.sum()
            self.store.index_put_(indices=(idx,), values=v * 2)
            return out

    model = poptorch.inferenceModel(Memory())
    model(torch.randint(0, 1000, (8,)), torch.randn(8, 16))
    g = model.executable.graph
    assert "graph captured with torch.export" in model.executable.notes
    assert any(op.attrs.get("buffer_write") and op.kind.startswith("scatter") for op in g.ops)


def test_a_buffer_incremented_with_plus_equals_persists_as_poptorch_documents():
    """PopTorch's user guide, "PyTorch buffers" (docs/user_guide/buffers.py): a registered buffer
    incremented with ``self.i += 1`` counts 1, 2 over two calls, and copyWeightsToHost brings 2 back.
    Python runs it as ``self.i = self.i + 1``, which torch.fx traces by assigning its proxy to the
    buffer: the trace must put the user's tensor back."""
    class CounterModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("i", torch.tensor([0.], dtype=torch.float))

        def forward(self):
            self.i += 1
            return self.i

    model = CounterModel()
    pm = poptorch.inferenceModel(model)
    assert pm().tolist() == [1.0] and pm().tolist() == [2.0]
    pm.copyWeightsToHost()
    assert type(model.i) is torch.Tensor and model.i.tolist() == [2.0]
    assert [op.inputs[0] for op in pm.executable.graph.ops if op.kind == "add"] == ["i"]


def test_an_in_place_index_put_of_half_values_into_a_float_buffer():
    """TGN (float16) writes half messages into its float32 message buffer with index_put_: the values
    take the buffer's dtype, as an in-place op's operands do under the implicit casts."""
    class Memory(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("store", torch.zeros(100, 8))

        def forward(self, idx, v):
            self.store.index_put_(indices=(idx,), values=v * 2)
            return v.sum()

    model = poptorch.inferenceModel(Memory())
    model(torch.randint(0, 100, (16,)), torch.randn(16, 8).half())
    g = model.executable.graph
    (write,) = [op for op in g.ops if op.attrs.get("buffer_write")]
    assert {g.tensors[t].dtype for t in write.inputs if g.tensors[t].shape == (16, 8)} == {"float32"}


def test_unbind_along_a_later_axis():
    """TGN unbinds its memory's integer columns (torch.unbind(x, 1)): pieces of a lower rank, no region."""
    class Columns(nn.Module):
        def forward(self, x):
            a, b, c = torch.unbind(x, 1)
            return a * b + c

    model = poptorch.inferenceModel(Columns())
    x = torch.randn(8, 3)
    torch.testing.assert_close(model(x), x[:, 0] * x[:, 1] + x[:, 2])
    assert [op.kind for op in model.executable.graph.ops].count("slice") == 3


@pytest.mark.parametrize("split", [lambda h: torch.split(h, 64, dim=-1), lambda h: h.chunk(3, dim=2),
                                   lambda h: (h[..., :64], h.narrow(2, 64, 64), h[:, :, 128:])],
                         ids=["split", "chunk", "slices"])
def test_pieces_of_a_tensor_get_one_gradient_as_popart_padsum_gives_it(split):
    """Graphcore's BERT splits its fused QKV projection with torch.split: PopART's PadSum assembles the
    three pieces' gradients into one concatenation (a view), with no zero pad and add per piece."""
    class QKV(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x, y):
            q, k, v = split(self.qkv(x))
            return F.mse_loss(q * k + v, y)

    net = QKV()
    model = poptorch.trainingModel(net, poptorch.Options(), torch.optim.SGD(net.parameters(), lr=0.1))
    model.compile(torch.randn(8, 16, 64), torch.randn(8, 16, 64))
    g = model.executable.graph
    (pad,) = [op for op in g.ops if op.kind == "pad"]
    assert sorted(pad.attrs["regions"]) == [(0, 64), (64, 128), (128, 192)]
    full = (8, 16, 192)
    assert not [op for op in g.ops if op.kind == "add" and op.pass_ == "backward"
                and g.tensors[op.outputs[0]].shape == full]


def test_a_weight_made_of_weights_in_the_model_is_priced_as_one_weight():
    """Graphcore's BERT fuses its Q, K and V weights in forward (x @ cat([Wq, Wk, Wv]).T): PopART lays
    the weights out through the concat and transpose for the matmul, which gets its fully connected
    passes, so it costs what one (h, 3h) linear layer's weight costs, with no transpose copies."""
    class Fused(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(256, 256, bias=False) for _ in range(3))

        def forward(self, x, y):
            w = torch.cat((self.q.weight, self.k.weight, self.v.weight), 0)
            return F.mse_loss(x @ torch.transpose(w, -2, -1), y)

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(256, 768, bias=False)

        def forward(self, x, y):
            return F.mse_loss(self.qkv(x), y)

    def matmuls(net):
        net = net.half()
        model = poptorch.trainingModel(net, poptorch.Options(), torch.optim.SGD(net.parameters(), lr=0.1))
        model.compile(torch.randn(4, 64, 256).half(), torch.randn(4, 64, 768).half())
        exe = model.executable
        assert not [op for op in exe.graph.ops if op.kind == "transpose"]
        return sorted((op.attrs.get("fully_connected_pass"), exe.costs[op.name].cycles)
                      for op in exe.graph.ops if op.kind == "matmul")

    fused = matmuls(Fused())
    assert fused == matmuls(Plain())
    assert [p for p, _ in fused] == ["TRAINING_FWD", "TRAINING_WU"]


@pytest.mark.parametrize("method", ["torch.fx", "torch.export"])
def test_torch_ops_poptorch_name_scopes_from_hooks(method):
    """Graphcore's CNN examples name each layer's ops with torch.ops.poptorch.push_name_scope /
    pop_name_scope from forward hooks (vision/cnns/pytorch/models/models.py name_scope_hook)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.head = nn.Linear(8, 8), nn.Linear(8, 4)

        def forward(self, x):
            if method == "torch.export" and x.shape[0] > 1:  # torch.fx cannot trace this
                x = x * 1
            return self.head(torch.relu(self.stem(x)))

    net = Net()
    for name, m in net.named_children():
        m.register_forward_pre_hook(lambda _m, _i, name=name: torch.ops.poptorch.push_name_scope(name))
        m.register_forward_hook(lambda _m, _i, _o: torch.ops.poptorch.pop_name_scope())
    model = poptorch.inferenceModel(net)
    model(torch.randn(4, 8))
    assert f"graph captured with {method}" in model.executable.notes
    names = [op.name for op in model.executable.graph.ops if op.kind == "matmul"]
    assert [n.split("/")[0] for n in names] == ["stem", "head"]


def test_a_layer_outside_the_module_tree_is_traced_through_with_torch_fx():
    """Graphcore's CNN LabelSmoothing keeps its NLLLoss on a plain object, not as a submodule: torch.fx
    traces through it rather than giving up for torch.export."""
    class Smooth:
        def __init__(self):
            self.loss = nn.NLLLoss()

        def __call__(self, out, y):
            return self.loss(out, y) * 0.9

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.losses = nn.Linear(8, 4), [Smooth()]

        def forward(self, x, y):
            lp = torch.log_softmax(self.fc(x), 1)
            return poptorch.identity_loss(sum(loss(lp, y) for loss in self.losses), "none")

    model = poptorch.trainingModel(Net(), poptorch.Options())
    model.compile(torch.randn(4, 8), torch.zeros(4, dtype=torch.long))
    assert "graph captured with torch.fx" in model.executable.notes


def test_a_no_grad_block_in_forward_is_inlined_under_torch_export():
    """A metric computed under torch.no_grad() in forward (Graphcore's CNN training wrapper, DINO's
    teacher): torch.export wraps it in a higher-order op calling a sub-module, whose ops the capture
    copies inline and prices."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x, y):
            if x.shape[0] > 1:  # torch.fx cannot trace this
                x = x * 1
            out = self.fc(x)
            with torch.no_grad():
                acc = (out.argmax(1) == y).float().mean()
            return F.cross_entropy(out, y), acc

    model = poptorch.trainingModel(Net(), poptorch.Options())
    loss, acc = model(torch.randn(4, 8), torch.zeros(4, dtype=torch.long))
    assert "graph captured with torch.export" in model.executable.notes
    kinds_ = [op.kind for op in forward_ops(model)]
    assert "compare" in kinds_ and "reduce_mean" in kinds_


def test_nested_no_grad_and_autocast_blocks_are_inlined_under_torch_export():
    """Hugging Face's LLaMA computes its rotary angles under autocast(enabled=False) inside
    no_grad: torch.export nests one wrapper's sub-module in the other's, and each level is inlined
    (the inner block's sub-module moved to the outer module), its ops priced once."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.register_buffer("freq", torch.rand(8))

        def forward(self, x):
            if x.shape[0] > 1:  # torch.fx cannot trace this
                x = x * 1
            with torch.no_grad():
                with torch.autocast("cpu", enabled=False):
                    angle = (x * self.freq).cos()
            return poptorch.identity_loss((self.fc(x) * angle).sum(), "none")

    m = Net()
    model = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    model(torch.randn(4, 8))
    assert "graph captured with torch.export" in model.executable.notes
    assert kinds(model).count("cos") == 1


def test_a_subclass_of_a_layer_with_its_own_forward_is_traced_through():
    """GPT-2's SerializedLinear(nn.Linear) serialises its matmul in its own forward: torch.fx traces
    that forward instead of pricing the base nn.Linear's rule; the transposed weight it reads is the
    weight in the matmul's layout, no transpose copy."""
    class SerializedLinear(nn.Linear):
        def forward(self, x):
            out = poptorch.serializedMatMul(x, self.weight.t(), poptorch.MatMulSerializationMode.OutputChannels, 4)
            return out + self.bias if self.bias is not None else out

    model = poptorch.inferenceModel(SerializedLinear(64, 256, bias=False))
    model(torch.randn(32, 64))
    g = model.executable.graph
    assert "graph captured with torch.fx" in model.executable.notes
    assert [op.kind for op in g.ops].count("matmul") == 4
    assert "transpose" not in [op.kind for op in g.ops]


def test_a_checkpoint_whose_result_is_unused_checkpoints_nothing():
    """Graphcore's GPT-2 checkpoints every output of a block with a hook, its unused `present` (key,
    value) too: PopTorch's checkpoint is an op PopART prunes when unused, so only the used output
    is a checkpoint."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.kv, self.out = nn.Linear(16, 32), nn.Linear(16, 16)

        def forward(self, x):
            k, v = self.kv(x).split(16, dim=-1)
            return x + self.out(torch.relu(k * v)), (k, v)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.b0, self.b1 = Block(), poptorch.BeginBlock(Block(), ipu_id=1)
            for b in (self.b0, self.b1):
                b.register_forward_hook(lambda m, i, o: tuple(poptorch.recomputationCheckpoint(y) for y in o))

        def forward(self, x):
            return poptorch.identity_loss(self.b1(self.b0(x)[0])[0].pow(2).mean(), "none")

    o = poptorch.Options()
    o.Training.gradientAccumulation(4)
    model = poptorch.trainingModel(Net(), o)
    model.compile(torch.randn(8, 16))
    marked = [op.name for op in model.executable.graph.ops if op.attrs.get("recomputation_checkpoint")]
    assert marked == ["b0/add", "b1/add"]


def test_a_string_argument_is_not_taken_for_a_tensor():
    """DINO's ViT attention reshapes by torch.div(C, heads, rounding_mode="trunc") of shape values: an
    op of constants, folded, though one of its arguments is a string."""
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, 4, torch.div(C, 4, rounding_mode="trunc")).permute(2, 0, 3, 1, 4)
            return (qkv[0] @ qkv[1].transpose(-2, -1)).softmax(-1) @ qkv[2]

    model = poptorch.inferenceModel(Attn())
    x = torch.randn(2, 10, 64)
    torch.testing.assert_close(model(x), model.model(x))
    assert [op.kind for op in model.executable.graph.ops].count("matmul") == 3


def test_traced_and_eager_outputs_a_rounding_apart_agree():
    """The check that torch.fx's graph follows the model's branches takes a rounding difference
    (Graphcore's ResNet-50 loss: one float32 ulp apart in a mean) for agreement, another value for not."""
    from sim.poptorch._capture import _same_values
    x = torch.tensor([-6.9326434, 1.0])
    assert _same_values((x,), (torch.nextafter(x, torch.zeros(2)),))
    assert not _same_values((x,), (x + 1e-3,))
    h = x.half()
    assert _same_values((h,), (torch.nextafter(h, torch.zeros(2, dtype=torch.half)),))
    assert not _same_values((torch.tensor([1, 2]),), (torch.tensor([1, 3]),))


def test_a_buffer_updated_in_forward_is_written_back():
    """CLIP's feature queue: a buffer updated in place in forward, under torch.no_grad(); torch.export
    writes it back with copy_, priced as a copy into the buffer and kept though nothing reads it."""
    class Queue(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.register_buffer("queue", torch.zeros(12, 8))

        @torch.no_grad()
        def enqueue(self, f):
            self.queue.copy_(torch.cat([f, self.queue[:8]], dim=0))

        def forward(self, x):
            f = self.lin(x)
            loss = (f @ torch.cat([f, self.queue], 0).t()).sum()
            self.enqueue(f)
            return poptorch.identity_loss(loss, reduction="none")

    net = Queue()
    model = poptorch.trainingModel(net, poptorch.Options(), poptorch.optim.SGD(net.parameters(), lr=0.1))
    model.compile(torch.randn(4, 8))
    assert "graph captured with torch.export" in model.executable.notes
    writes = [op for op in model.executable.graph.ops if op.attrs.get("buffer_write")]
    assert len(writes) == 1 and writes[0].kind == "copy"


@pytest.mark.parametrize("export", [False, True], ids=["torch.fx", "torch.export"])
def test_indexing_with_two_index_tensors_looks_up_by_both(export):
    """CLIP's pooling x[arange(B), text.argmax(-1)]: one flat index from both tensors into the rows of
    x (B * L of them), as PopTorch's index handler makes it, so the lookup depends on the input's argmax."""
    class EOT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 16)

        def forward(self, text):
            if export and text.shape[0] > 1:  # torch.fx cannot trace this
                text = text * 1
            x = self.emb(text)
            return x[torch.arange(x.shape[0]), text.argmax(dim=-1)]

    net = EOT()
    text = torch.randint(0, 100, (4, 7))
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(text), net(text))
    g = model.executable.graph
    (lookup,) = [op for op in g.ops if op.name.endswith("index") and op.kind == "gather"]
    assert g.tensors[lookup.inputs[0]].shape == (4,) and g.tensors[lookup.inputs[1]].shape == (28, 16)
    assert any(op.kind in ("reduce_max", "argmax", "sort") for op in g.ops)  # the argmax is not pruned


@pytest.mark.parametrize("stop", ["detach", "no_grad", "no_grad_exported"])
def test_no_gradient_flows_back_through_a_detached_value(stop):
    """PopTorch detaches every traced value that does not require grad (AddDetachOperations.cpp), so
    a layer whose output is ``.detach()``-ed, or computed in ``with torch.no_grad():``, gets no weight
    gradient, no update and passes no gradient on; the same model without it gets all three. The
    exported case branches on a shape first, which torch.fx cannot trace."""
    class M(nn.Module):
        def __init__(self, stop):
            super().__init__()
            self.a, self.b, self.stop = nn.Linear(32, 32), nn.Linear(32, 32), stop

        def forward(self, x, y):
            h = self.a(x)
            if self.stop == "detach":
                t = self.b(h).detach()
            elif self.stop is None:
                t = self.b(h)
            else:
                if self.stop == "no_grad_exported" and h.shape[0] > 1:
                    h = h * 1.0
                with torch.no_grad():
                    t = self.b(h)
            return F.mse_loss(h + t, y)

    def b_ops(stop):
        model = poptorch.trainingModel(M(stop), poptorch.Options().enableSyntheticData(True))
        model(torch.randn(8, 32), torch.randn(8, 32))
        return model, sorted(op.name for op in model.executable.graph.ops if op.name.startswith("b"))

    model, ops = b_ops(stop)
    assert ops == ["b/add", "b/matmul"]
    assert ("torch.export" in " ".join(model.executable.notes)) == (stop == "no_grad_exported")
    _, plain = b_ops(None)
    assert {"b.weight/sgd_update", "b/matmul/grad_a", "b/matmul/grad_b"} <= set(plain)


def test_a_boolean_mask_index_is_refused_as_a_data_dependent_shape():
    """x[mask] has as many rows as the mask's true values: PopTorch compiles static shapes, so the
    capture refuses it, saying how to keep the shape, rather than freeze the first call's count."""
    class Select(nn.Module):
        def forward(self, x):
            return x[x.sum(1) > 0] * 2

    with pytest.raises(sim.UnsupportedOpError, match="boolean mask .* torch.where"):
        poptorch.inferenceModel(Select())(torch.ones(4, 6))


@pytest.mark.parametrize("flag", [{"sparse": True}, {"scale_grad_by_freq": True}, {"max_norm": 1.0}])
def test_embedding_flags_poptorch_refuses_are_refused(flag):
    """PopTorch's embedding handlers refuse sparse and scale_grad_by_freq (EmbeddingOps.cpp:
    "Unsupported aten::embedding operation"), and it has no handler for max_norm's renorm."""
    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = nn.Embedding(100, 16, **flag)

        def forward(self, ids):
            return self.e(ids).sum()

    with pytest.raises(sim.UnsupportedOpError, match=next(iter(flag))):
        poptorch.inferenceModel(Lookup())(torch.randint(0, 100, (4, 8)))
    bag = nn.EmbeddingBag(100, 16, mode="sum", **flag)
    with pytest.raises(sim.UnsupportedOpError, match=next(iter(flag))):
        poptorch.inferenceModel(bag)(torch.randint(0, 100, (4, 8)))


def test_an_embedding_bag_s_padding_index_is_refused_as_poptorch_refuses_it():
    """embeddingBagHandler refuses padding_idx ("padding_idx parameter is unsupported"), where the embedding
    handler takes it (its poptorch.custom_ops Embedding)."""
    with pytest.raises(sim.UnsupportedOpError, match="padding_idx parameter is unsupported"):
        poptorch.inferenceModel(nn.EmbeddingBag(100, 16, mode="sum", padding_idx=0))(torch.randint(0, 100, (4, 8)))
    assert poptorch.inferenceModel(nn.EmbeddingBag(100, 16, mode="sum"))(torch.randint(0, 100, (4, 8))).shape == (4, 16)
    assert poptorch.inferenceModel(nn.Embedding(100, 16, padding_idx=0))(torch.randint(0, 100, (4, 8))).shape == \
        (4, 8, 16)


def test_bicubic_upsampling_with_aligned_corners_is_refused_as_poptorch_refuses_it():
    """upsampleHandler (ReshapeOps.cpp) refuses a bicubic upsample with align_corners ("Only support
    align_corners=False."); without it, sixteen multiply-adds an output."""
    class Up(nn.Module):
        def __init__(self, align):
            super().__init__()
            self.align = align

        def forward(self, x):
            return F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=self.align)

    with pytest.raises(sim.UnsupportedOpError, match=r"Only support align_corners=False\."):
        poptorch.inferenceModel(Up(True))(torch.randn(1, 2, 8, 8))
    assert poptorch.inferenceModel(Up(False))(torch.randn(1, 2, 8, 8)).shape == (1, 2, 16, 16)


def test_one_hot_without_its_number_of_classes_is_refused_as_poptorch_refuses_it():
    """onehotHandler (EmbeddingOps.cpp) needs num_classes given: torch finds it from the values, which PopTorch
    cannot ("OneHot num classes must be specified and must be constant.")."""
    class OneHot(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.classes = classes

        def forward(self, x):
            return F.one_hot(x, self.classes).float()

    with pytest.raises(sim.UnsupportedOpError, match="OneHot num classes must be specified"):
        poptorch.inferenceModel(OneHot(-1))(torch.tensor([0, 2, 1]))
    assert poptorch.inferenceModel(OneHot(4))(torch.tensor([0, 2, 1])).shape == (3, 4)


@pytest.mark.parametrize("layer, shape", [(lambda size: nn.AdaptiveAvgPool2d(size), (2, 3, 16, 16)),
                                          (lambda size: nn.AdaptiveAvgPool1d(size[0]), (2, 3, 16))])
def test_adaptive_average_pooling_needs_an_output_that_divides_the_input(layer, shape):
    """adaptivePoolingHandler (PoolingOps.cpp) pools with stride in / out and kernel in - (out - 1) stride, and
    refuses an output that does not divide the input (torch sizes each window apart there)."""
    with pytest.raises(sim.UnsupportedOpError, match=r"Input dim 0 \(16\) is not divisible by the corresponding "
                                                     r"output dim \(5\)"):
        poptorch.inferenceModel(layer((5, 5)))(torch.randn(*shape))
    model = poptorch.inferenceModel(layer((4, 4)))
    model(torch.randn(*shape))
    (pool,) = [op for op in model.executable.graph.ops if op.kind == "avgpool"]
    if len(shape) == 4:
        assert (pool.attrs["kernel"], pool.attrs["stride"]) == (4, 4)
    else:  # a 1-D window priced by its volume
        assert (pool.attrs["window"], pool.attrs["stride_volume"]) == (4, 4)


def test_a_normalisation_with_a_scale_and_no_shift_is_refused_as_poptorch_refuses_it():
    """PopTorch's normalisation handlers take a weight and a bias, or neither (NormalizationOps.cpp
    maybeInitializeAffineParamConstants): a LayerNorm with bias=False has the weight alone."""
    x = torch.randn(4, 32)
    with pytest.raises(sim.UnsupportedOpError, match=r"a scale and no shift \(a LayerNorm with bias=False\)"):
        poptorch.inferenceModel(nn.LayerNorm(32, bias=False))(x)
    for both_or_neither in (nn.LayerNorm(32), nn.LayerNorm(32, elementwise_affine=False)):
        assert poptorch.inferenceModel(both_or_neither)(x).shape == (4, 32)


def test_an_unbatched_input_to_a_2d_pool_is_pooled_as_a_batch_of_one():
    """PoolingOps.cpp poolingHandler: a (C, H, W) input, which torch's 2-D pools take unbatched, is reshaped to
    (1, C, H, W), pooled and viewed back; it reached the cost model as a 3-D pool and crashed (a ValueError).
    The padded average pool's constant pad is of the batched view."""
    class Pools(nn.Module):
        def __init__(self):
            super().__init__()
            self.max, self.avg, self.adaptive = nn.MaxPool2d(2), nn.AvgPool2d(3, 1, padding=1), nn.AdaptiveAvgPool2d(2)

        def forward(self, x):
            return self.max(x), self.avg(x), self.adaptive(x), F.lp_pool2d(x, 2, 2)

    x = torch.rand(8, 6, 6)
    model = poptorch.inferenceModel(Pools())
    for got, want in zip(model(x), Pools()(x)):
        assert got.shape == want.shape
    g = model.executable.graph
    pools = [(op.kind, g.tensors[op.inputs[0]].shape, g.tensors[op.outputs[0]].shape) for op in g.ops
             if op.kind in ("maxpool", "avgpool", "pad")]
    assert pools == [("maxpool", (1, 8, 6, 6), (1, 8, 3, 3)), ("pad", (1, 8, 6, 6), (1, 8, 8, 8)),
                     ("avgpool", (1, 8, 8, 8), (1, 8, 6, 6)), ("avgpool", (1, 8, 6, 6), (1, 8, 2, 2)),
                     ("avgpool", (1, 8, 6, 6), (1, 8, 3, 3))]


def test_an_unbatched_input_to_a_convolution_is_convolved_as_a_batch_of_one():
    """ATen's conv2d / conv1d / conv_transpose2d take an unbatched (C, *field) input and unsqueeze it before the
    convolution PopTorch's dispatcher sees; the rules got the unbatched input and crashed (a ValueError or an
    IndexError). The input is viewed as (1, C, *field), convolved and viewed back, and the layer trains."""
    class Convs(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.conv1d = nn.Conv2d(8, 4, 3), nn.Conv1d(8, 4, 3)
            self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)

        def forward(self, x, s):
            y = self.up(self.conv(x))
            return y, self.conv1d(s), poptorch.identity_loss(y.square().mean() + self.conv1d(s).square().mean(),
                                                             "none")

    m = Convs()
    x, s = torch.rand(8, 10, 10), torch.rand(8, 12)
    training = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
    y, t, _ = training(x, s)
    assert y.shape == (2, 16, 16) and t.shape == (4, 10)
    g = training.executable.graph
    forward = [op for op in g.ops if op.pass_ == "forward"]
    convs = [(op.kind, g.tensors[op.inputs[0]].shape) for op in forward if op.kind.startswith("conv2d")]
    assert convs == [("conv2d", (1, 8, 10, 10)), ("conv2d_grad_input", (1, 4, 8, 8)), ("conv2d", (1, 8, 1, 12)),
                     ("conv2d", (1, 8, 1, 12))]
    assert {op.inputs[0] for op in g.ops if op.kind == "sgd_update"} == {
        "conv.weight", "conv.bias", "conv1d.weight", "conv1d.bias", "up.weight", "up.bias"}


def test_a_cpu_backward_torch_cannot_take_is_an_error_that_says_how_to_simulate_without_it():
    """The CPU's backward pass stands in for the IPU's to update the weights; torch cannot differentiate
    floor_divide, nor a loss no trainable weight reaches: its RuntimeError became the simulator's error, naming
    computeOutputsOnCpu(False), with which the training step simulates."""
    class Floored(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))

        def forward(self, x):
            return poptorch.identity_loss(torch.floor_divide(x * self.w, 2).sum(), "none")

    class Detached(Floored):
        def forward(self, x):
            return poptorch.identity_loss((x * self.w).detach().sum(), "none")

    for net, why in ((Floored, "derivative for aten::floor_divide is not implemented"),
                     (Detached, "the loss does not depend on any trainable weight")):
        m = net()
        with pytest.raises(poptorch.Error, match=f"the CPU's backward pass.* fails: {why}\\. .*"
                                                 r"computeOutputsOnCpu\(False\)"):
            poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))(torch.rand(4, 4))
        opts = poptorch.Options().computeOutputsOnCpu(False)
        m = net()
        model = poptorch.trainingModel(m, opts, optimizer=torch.optim.SGD(m.parameters(), lr=0.1))
        model(torch.rand(4, 4))
        assert model.simulation.cycle_count > 0


def test_a_weight_computed_by_a_parametrization_or_a_hook_is_computed_on_the_device_and_its_original_trains():
    """A parametrized layer (torch.nn.utils.parametrizations) or one whose forward pre-hook computes its weight
    (the older nn.utils.spectral_norm) was kept whole, its weight read as a constant: nothing computed it and the
    original did not train. PopTorch's dispatcher sees the computation, so the layer is traced through, hooks and
    all: spectral_norm's power iteration and sigma (mv and dot: BlasOps.cpp's matmulHandler) run each call and
    weight_orig trains. The parametrized spectral_norm reaches torch.vdot and orthogonal a tril of a computed
    tensor, which PopTorch has no handler for, and are refused."""
    class Loss(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.m = layer

        def forward(self, x):
            return poptorch.identity_loss(self.m(x).square().mean(), "none")

    net = Loss(nn.utils.spectral_norm(nn.Linear(8, 8)))
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    model(torch.rand(2, 8))
    g = model.executable.graph
    forward = [op.kind for op in g.ops if op.pass_ == "forward"]
    assert forward.count("matmul") == 5 and forward.count("div") == 3  # u, v twice; sigma; W / sigma; the layer
    assert {op.inputs[0] for op in g.ops if op.kind == "sgd_update"} == {"m.weight_orig", "m.bias"}
    for layer, op in ((torch.nn.utils.parametrizations.spectral_norm(nn.Linear(8, 8)), "vdot"),
                      (torch.nn.utils.parametrizations.orthogonal(nn.Linear(8, 8)), "tril")):
        with pytest.raises(sim.UnsupportedOpError, match=f"no cost for aten\\.{op}\\.default .*parametrizations"):
            poptorch.inferenceModel(layer.eval())(torch.rand(2, 8))


def test_mv_dot_and_addmv_are_popart_matmuls():
    """BlasOps.cpp: mv and dot through matmulHandler (a MatMul of the vector viewed as a column or row),
    addmv through addmvHandler (MatMul, Mul by alpha, Mul of the input by beta and Add; beta 0 leaves the input
    out)."""
    class Blas(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(6, 8)), nn.Parameter(torch.rand(6))

        def forward(self, x):
            v = torch.mv(self.w, x)
            return torch.dot(v, v), torch.addmv(self.b, self.w, x, beta=0.5, alpha=2.0), torch.addmv(self.b, self.w, x,
                                                                                                     beta=0)

    net, x = Blas(), torch.rand(8)
    model = poptorch.inferenceModel(net)
    for got, want in zip(model(x), net(x)):
        torch.testing.assert_close(got, want)
    kinds = [op.kind for op in model.executable.graph.ops if op.kind != "reshape"]
    assert kinds == ["matmul", "matmul", "matmul", "scale", "scale", "add", "matmul", "scale"]
