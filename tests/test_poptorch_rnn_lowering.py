"""sim.poptorch: a plain ``nn.RNN`` as PopTorch 3 runs it, and ``nn.Hardsigmoid`` as PopART runs it.

``aten::rnn_tanh.input`` / ``rnn_relu.input`` are CompositeImplicitAutograd, and PopTorch 3's dispatcher
registers only ``lstm.input`` of the recurrent layers on the IPU key
(poptorch/source/dispatch_tracer/RegisterOptionalAtenOps.cpp.inc), so a plain RNN reaches PopART as the ops
of ATen's RNN.cpp, not as RNNOps.cpp's PopART RNNOp (a handler of the removed torch.jit.trace front end). On
a tensor not on the CPU, ATen's ``FullLayer`` runs ``SimpleCell`` on each step's input as it is: per step
``linear_hh(h)``, then ``linear_ih(x_t)``, their ``add_`` and the nonlinearity, the states stacked. The
simulator's rule for the layer must cost exactly what those ops, written out by hand, cost.

PopTorch lowers torch's hardsigmoid to PopART's HardSigmoid (ActivationOps.cpp: alpha 1/6, beta 1/2), which
PopART runs (popx/op/hardsigmoidx.cpp) as one popops map of max(0, min(1, alpha * x + beta)), its gradient as
one map of dy * alpha * theta+ * theta-, each theta (1 + sign(.)) / 2.
"""

from __future__ import annotations

import collections
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402
from poptorch_runs import WithLoss, compute_ops, inference, training  # noqa: E402
from sim.cost import codelet, op_cost  # noqa: E402
from sim.cost.vector import spread  # noqa: E402
from sim.hardware.system import load_system  # noqa: E402

T, B, I, H = 5, 3, 6, 4


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


class Layer(nn.Module):
    """An ``nn.RNN`` (its output and final state); ``export``: a shape test torch.fx cannot trace, so the
    layer is captured by torch.export as ATen's ``rnn_tanh`` / ``rnn_relu``."""

    def __init__(self, batch_first=False, bias=True, nonlinearity="tanh", export=False):
        super().__init__()
        self.rnn = nn.RNN(I, H, batch_first=batch_first, bias=bias, nonlinearity=nonlinearity)
        self.export = export

    def forward(self, x):
        if self.export and x.shape[0] > 0:
            x = x * 1
        return self.rnn(x)


class Written(nn.Module):
    """The same layer as ATen's composite runs it on a device other than the CPU (RNN.cpp
    ``_rnn_impl_with_concat``, ``FullLayer``, ``SimpleCell``), written out op by op."""

    def __init__(self, rnn: nn.RNN):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        r = self.rnn
        if r.batch_first:
            x = x.transpose(0, 1)
        h = torch.zeros(1, x.shape[1], H).unbind(0)[0]  # nn.RNN's zeros state, unbound per layer
        outs = []
        for xt in x.unbind(0):
            pre = F.linear(h, r.weight_hh_l0, getattr(r, "bias_hh_l0", None)).add_(
                F.linear(xt, r.weight_ih_l0, getattr(r, "bias_ih_l0", None)))
            h = torch.tanh(pre) if r.nonlinearity == "tanh" else torch.relu(pre)
            outs.append(h)
        y = torch.stack(outs, 0)
        if r.batch_first:
            y = y.transpose(0, 1)
        return y, torch.stack([h], 0)


def _input(batch_first):
    g = torch.Generator().manual_seed(3)
    return torch.randn(*((B, T, I) if batch_first else (T, B, I)), generator=g)


@pytest.mark.parametrize("method", ["torch.fx", "torch.export"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_a_plain_rnn_is_atens_steps_each_with_both_linears(nonlinearity, batch_first, bias, method):
    """Per step: linear_hh (matmul of h (B, H) by W_hh^T (H, H), the bias add), linear_ih (matmul of x_t
    (B, I) by W_ih^T (I, H), the bias add), their add and the nonlinearity; no matmul of the whole sequence
    (B*T, I) before the steps (ATen's CPU-only shortcut), no concatenated [x_t, h] (PopART's RNNOpx)."""
    torch.manual_seed(0)
    net = Layer(batch_first, bias, nonlinearity, export=method == "torch.export").eval()
    x = _input(batch_first)
    with torch.no_grad():
        expected = net(x)
    model, got, _ = inference(net, (x,))
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])
    assert f"graph captured with {method}" in model.executable.notes
    ops = [op for op in compute_ops(model) if op.kind not in ("transpose", "scale")]  # batch_first, x * 1
    step = ["matmul", "add", "matmul", "add", "add", nonlinearity] if bias else ["matmul", "matmul", "add",
                                                                                   nonlinearity]
    assert [op.kind for op in ops] == step * T
    g = model.executable.graph
    shapes = [[tuple(g.tensors[t].shape) for t in op.inputs] for op in ops if op.kind == "matmul"]
    assert shapes == [[(B, H), (H, H)], [(B, I), (I, H)]] * T
    transposes = collections.Counter(op.kind for op in compute_ops(model))["transpose"]
    assert transposes == (2 if batch_first else 0)  # the input to time-major and the output back


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_a_plain_rnn_costs_what_atens_ops_written_out_cost(batch_first, bias):
    """nn.RNN and the same layer written as ATen's composite: the same compute ops in the same order and the
    same cycles, in inference and in training."""
    torch.manual_seed(0)
    net = Layer(batch_first, bias)
    x = _input(batch_first)
    layer, _, layer_cycles = inference(net, (x,))
    written, _, written_cycles = inference(Written(net.rnn), (x,))
    assert [op.kind for op in compute_ops(layer)] == [op.kind for op in compute_ops(written)]
    assert layer_cycles == written_cycles
    _, layer_train = training(WithLoss(net), (x,))
    _, written_train = training(WithLoss(Written(net.rnn)), (x,))
    assert layer_train == written_train


def test_a_plain_rnn_given_a_state_starts_from_it():
    """An ``hx`` given is the first step's state (a view of it, unbound): the first linear_hh reads it."""
    torch.manual_seed(0)
    rnn = nn.RNN(I, H)
    x, h0 = _input(False), torch.randn(1, B, H)
    model = poptorch.inferenceModel(rnn)
    got = model(x, h0)
    with torch.no_grad():
        expected = rnn(x, h0)
    torch.testing.assert_close(got[1], expected[1])
    g = model.executable.graph
    first = next(op for op in g.ops if op.kind == "matmul")
    producer = {t: op for op in g.ops for t in op.outputs}
    state = producer[first.inputs[0]]
    assert state.kind == "reshape" and g.tensors[state.inputs[0]].shape == (1, B, H)


HARDSIGMOID = ["mul", "add", "minimum", "maximum"]
HARDSIGMOID_GRAD = ["add", "sign", "add", "div", "sub", "sign", "add", "div", "mul", "mul", "mul"]


class Activation(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.lin, self.fn = nn.Linear(16, 16), fn

    def forward(self, x):
        y = self.fn(self.lin(x))
        return y, poptorch.identity_loss(y.sum(), reduction="none")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("form", ["module", "functional"])
def test_hardsigmoid_is_poparts_one_map_and_its_gradient_one_map(form, dtype):
    """PopART's HardSigmoidComputex: Mul, Add, Min, Max of constants in one fused popops map (one compute
    set); HardSigmoidGradOpx: one map of the two thetas' add, sign, add, divide (sub first for theta+)
    and the three multiplies. The forward map costs one vertex and its four codelets' per-element cycles."""
    torch.manual_seed(0)
    net = Activation(nn.Hardsigmoid() if form == "module" else F.hardsigmoid).to(dtype)
    x = torch.randn(8, 16).to(dtype)
    model, _ = training(net, (x,))
    g = model.executable.graph
    maps = [op for op in g.ops if op.kind == "map"]
    assert [(op.pass_, op.attrs["steps"]) for op in maps] == [("forward", HARDSIGMOID),
                                                               ("backward", HARDSIGMOID_GRAD)]
    ipu = load_system("ipu-mk2").ipu
    cost = op_cost(maps[0], g, ipu, ipu.tiles)
    assert cost.supersteps == 1
    itemsize = 2 if dtype == torch.float16 else 4
    _, elements = spread(8 * 16, itemsize, ipu, ipu.tiles)
    steps = [codelet(k) for k in HARDSIGMOID]
    busiest = max(c.fixed for c in steps) + elements * sum(c.per_element(itemsize) for c in steps)
    assert cost.compute_cycles == math.ceil(busiest)
