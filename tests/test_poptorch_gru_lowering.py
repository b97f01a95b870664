"""sim.poptorch: an ``nn.GRU`` as PopTorch 3 runs it, the ops of ATen's composite, step by step.

``aten::gru.input`` is CompositeImplicitAutograd and PopTorch 3's dispatcher registers only ``lstm.input``
of the recurrent layers on the IPU key (poptorch/source/dispatch_tracer/RegisterOptionalAtenOps.cpp.inc),
so a GRU reaches PopART as the ops of ATen's RNN.cpp (``ONE_HIDDEN_RNN(gru, GRUCell)``:
``_rnn_impl_with_concat`` over ``FullLayer``), never as RNNOps.cpp's ``gruHandler`` (a PopART / popnn GRU
op, a handler of the removed torch.jit.trace front end). On a tensor not on the CPU ``FullLayer`` does not
project the whole sequence first: each step is ``GRUCell``'s non-fused path on the step's input as it is
(the fused ``_thnn_fused_gru_cell`` is for CUDA / XPU / PrivateUse1 tensors, not ``DeviceType::IPU``), so
a step is exactly what ``nn.GRUCell`` costs: ``linear_ih(x_t)``, ``linear_hh(h)``, the reset and input
gates' add and sigmoid, the new gate's mul, add and tanh, and ``(h - n) * z + n``. An LSTM, whose
``lstm.input`` PopTorch does intercept, stays one popnn ``lstm`` op.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402
from poptorch_runs import WithLoss, compute_ops, inference, training  # noqa: E402

T, B, I, H = 5, 3, 6, 4
#: GRUCell's element-wise ops a step, after the two linears: r's add and sigmoid, z's add and sigmoid,
#: h_n * r, i_n + that, tanh, then (h - n) * z + n
GATES = ["add", "sigmoid", "add", "sigmoid", "mul", "add", "tanh", "sub", "mul", "add"]


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


class Layer(nn.Module):
    """An ``nn.GRU`` (its output and final state), given a state or not; ``export``: a shape test torch.fx
    cannot trace, so the layer is captured by torch.export as ATen's ``gru.input``."""

    def __init__(self, batch_first=False, bias=True, export=False):
        super().__init__()
        self.gru = nn.GRU(I, H, batch_first=batch_first, bias=bias)
        self.export = export

    def forward(self, x, *h0):
        if self.export and x.shape[0] > 0:
            x = x * 1
        return self.gru(x, *h0)


class Written(nn.Module):
    """The same layer written out as ATen's composite runs it on a device other than the CPU: the steps
    (``unbind``) each through an ``nn.GRUCell`` holding the GRU's own parameters, the states stacked."""

    def __init__(self, gru: nn.GRU):
        super().__init__()
        self.batch_first = gru.batch_first
        self.cell = nn.GRUCell(I, H, bias=gru.bias)
        self.cell.weight_ih, self.cell.weight_hh = gru.weight_ih_l0, gru.weight_hh_l0
        if gru.bias:
            self.cell.bias_ih, self.cell.bias_hh = gru.bias_ih_l0, gru.bias_hh_l0

    def forward(self, x, *h0):
        if self.batch_first:
            x = x.transpose(0, 1)
        h = (h0[0] if h0 else torch.zeros(1, x.shape[1], H)).unbind(0)[0]  # per layer, as ATen unbinds hx
        outs = []
        for xt in x.unbind(0):
            h = self.cell(xt, h)
            outs.append(h)
        y = torch.stack(outs, 0)
        if self.batch_first:
            y = y.transpose(0, 1)
        return y, torch.stack([h], 0)


def _inputs(batch_first, state):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(*((B, T, I) if batch_first else (T, B, I)), generator=g)
    return (x, torch.randn(1, B, H, generator=g)) if state else (x,)


@pytest.mark.parametrize("method", ["torch.fx", "torch.export"])
@pytest.mark.parametrize("state", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_a_gru_is_atens_steps_each_a_grucells_ops(batch_first, bias, state, method):
    """Per step: linear_ih (matmul of x_t (B, I) by W_ih^T (I, 3H), the bias add), linear_hh (matmul of h
    (B, H) by W_hh^T (H, 3H), the bias add), then GRUCell's gates; no popnn ``gru`` op, no matmul of the
    whole sequence before the steps (ATen's CPU-only shortcut). Outputs as torch's, of torch's shapes."""
    torch.manual_seed(0)
    net = Layer(batch_first, bias, export=method == "torch.export").eval()
    xs = _inputs(batch_first, state)
    with torch.no_grad():
        expected = net(*xs)
    model, got, _ = inference(net, xs)
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in expected]
    assert [tuple(t.shape) for t in got] == [(B, T, H) if batch_first else (T, B, H), (1, B, H)]
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])
    assert f"graph captured with {method}" in model.executable.notes
    g = model.executable.graph
    assert not [op for op in g.ops if op.kind in ("gru", "gru_grad")]
    ops = [op for op in compute_ops(model) if op.kind not in ("transpose", "scale")]  # batch_first, x * 1
    linears = ["matmul", "add", "matmul", "add"] if bias else ["matmul", "matmul"]
    assert [op.kind for op in ops] == (linears + GATES) * T
    shapes = [[tuple(g.tensors[t].shape) for t in op.inputs] for op in ops if op.kind == "matmul"]
    assert shapes == [[(B, I), (I, 3 * H)], [(B, H), (H, 3 * H)]] * T
    transposes = [op for op in compute_ops(model) if op.kind == "transpose"]
    assert len(transposes) == (2 if batch_first else 0)  # the input to time-major and the output back


def test_a_gru_given_a_state_starts_from_it():
    """An ``hx`` given (1, B, H) is the first step's state, a view of it: the first linear_hh reads it, and
    the first step's blend ``h - n`` too."""
    torch.manual_seed(0)
    gru = nn.GRU(I, H)
    x, h0 = _inputs(False, True)
    model = poptorch.inferenceModel(gru)
    got = model(x, h0)
    with torch.no_grad():
        expected = gru(x, h0)
    torch.testing.assert_close(got[1], expected[1])
    g = model.executable.graph
    producer = {t: op for op in g.ops for t in op.outputs}
    matmuls = [op for op in g.ops if op.kind == "matmul"]
    state = producer[matmuls[1].inputs[0]]  # linear_ih first, then linear_hh
    assert state.kind == "reshape" and g.tensors[state.inputs[0]].shape == (1, B, H)
    first_sub = next(op for op in g.ops if op.kind == "sub")
    assert first_sub.inputs[0] == matmuls[1].inputs[0]


def test_an_unbatched_gru_runs_one_row_a_step():
    """An unbatched input (T, I): one row a step, torch's (T, H) output and (1, H) state."""
    torch.manual_seed(0)
    gru = nn.GRU(I, H)
    x = _inputs(False, False)[0][:, 0]
    model, got, _ = inference(gru, (x,))
    with torch.no_grad():
        expected = gru(x)
    assert [tuple(t.shape) for t in got] == [(T, H), (1, H)]
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])
    g = model.executable.graph
    matmuls = [op for op in g.ops if op.kind == "matmul"]
    assert len(matmuls) == 2 * T and "gru" not in {op.kind for op in g.ops}
    assert all(g.tensors[op.outputs[0]].shape == (1, 3 * H) for op in matmuls)


@pytest.mark.parametrize("state", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_a_gru_costs_what_its_steps_written_with_grucell_cost(batch_first, bias, state):
    """nn.GRU of T steps and the same T steps through nn.GRUCell (the GRU's own parameters): the same
    compute ops in the same order and the same cycles, in inference and in training."""
    torch.manual_seed(0)
    net = Layer(batch_first, bias)
    xs = _inputs(batch_first, state)
    layer, got, layer_cycles = inference(net, xs)
    written, wrote, written_cycles = inference(Written(net.gru), xs)
    torch.testing.assert_close(got[0], wrote[0])
    assert [op.kind for op in compute_ops(layer)] == [op.kind for op in compute_ops(written)]
    assert layer_cycles == written_cycles
    layer_train, layer_train_cycles = training(WithLoss(net), xs)
    written_train, written_train_cycles = training(WithLoss(Written(net.gru)), xs)
    for pass_ in ("backward", "update"):
        assert [op.kind for op in compute_ops(layer_train, pass_)] == \
            [op.kind for op in compute_ops(written_train, pass_)], pass_
    assert layer_train_cycles == written_train_cycles


@pytest.mark.parametrize("method", ["torch.fx", "torch.export"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_an_lstm_is_still_one_popnn_op(batch_first, method):
    """PopTorch intercepts ``lstm.input`` whole (RNNOps.cpp's lstmHandler: one PopART LSTM op): one popnn
    ``lstm`` op forward, one ``lstm_grad`` backward, none of ATen's cell ops."""

    class Lstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(I, H, batch_first=batch_first)

        def forward(self, x):
            if method == "torch.export" and x.shape[0] > 0:
                x = x * 1
            y, (h, c) = self.lstm(x)
            return y, poptorch.identity_loss(y.sum() + h.sum() + c.sum(), reduction="none")

    torch.manual_seed(0)
    net = Lstm()
    xs = _inputs(batch_first, False)
    model, _ = training(net, xs)
    assert f"graph captured with {method}" in model.executable.notes
    kinds = [op.kind for op in model.executable.graph.ops]
    assert kinds.count("lstm") == 1 and kinds.count("lstm_grad") == 1
    assert not {"matmul", "sigmoid", "tanh"} & set(kinds)
