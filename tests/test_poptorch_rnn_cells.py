"""sim.poptorch: ``nn.GRUCell``, ``nn.LSTMCell`` and ``nn.RNNCell`` (TGN's memory update is a GRUCell).

PopTorch has no handler of its own for these: ATen's cell ops are CompositeImplicitAutograd, so they
reach PopART as the linears, gate slices and element-wise ops ATen's RNN.cpp builds them from. The
simulator prices them as those ops, under torch.fx (the module kept whole) and torch.export (ATen's
``gru_cell`` / ``lstm_cell`` / ``rnn_tanh_cell`` / ``rnn_relu_cell``), and computes torch's numbers.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


CELLS = {
    "gru": lambda: nn.GRUCell(6, 4),
    "lstm": lambda: nn.LSTMCell(6, 4),
    "rnn_tanh": lambda: nn.RNNCell(6, 4),
    "rnn_relu": lambda: nn.RNNCell(6, 4, nonlinearity="relu", bias=False),
}
#: ATen's ops per step: (element-wise ops after the two linears' matmuls and bias adds)
ELEMENTWISE = {
    "gru": {"add": 4, "sigmoid": 2, "tanh": 1, "mul": 2, "sub": 1},  # r, z, n, then (h - n) * z + n
    "lstm": {"add": 2, "sigmoid": 3, "tanh": 2, "mul": 3},  # gates summed; cy = f*c + i*g; hy = o*tanh(cy)
    "rnn_tanh": {"add": 1, "tanh": 1},
    "rnn_relu": {"add": 1, "relu": 1},
}


class Net(nn.Module):
    """Two steps of a cell (its state carried), summed as the loss."""

    def __init__(self, make, export=False, state=True):
        super().__init__()
        self.cell, self.export, self.state = make(), export, state

    def forward(self, x, h, c):
        if self.export and x.shape[0] > 0:  # Python control flow on a shape: torch.fx cannot trace it
            x = x * 1
        lstm = isinstance(self.cell, nn.LSTMCell)
        s = ((h, c) if lstm else h) if self.state else None
        for _ in range(2):
            s = self.cell(x, s)
        return poptorch.identity_loss(s[0] + s[1] if lstm else s, reduction="sum")


def _inputs(batch=3):
    g = torch.Generator().manual_seed(1)
    shape = (batch,) if batch else ()
    return [torch.randn(*shape, 6, generator=g), torch.randn(*shape, 4, generator=g),
            torch.randn(*shape, 4, generator=g)]


def _forward_ops(model):
    return [op for op in model.executable.graph.ops if op.pass_ == "forward"]


@pytest.mark.parametrize("method", ["torch.fx", "torch.export"])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_a_cell_is_atens_linears_and_gates_and_computes_as_torch(cell, method):
    torch.manual_seed(0)
    net = Net(CELLS[cell], export=method == "torch.export")
    xs = _inputs()
    with torch.no_grad():
        expected = net(*xs)
    model = poptorch.inferenceModel(net)
    got = model(*xs)
    torch.testing.assert_close(got, expected)
    assert f"graph captured with {method}" in model.executable.notes
    ops = _forward_ops(model)
    kinds = [op.kind for op in ops]
    biased = cell != "rnn_relu"
    # per step: x @ W_ih^T and h @ W_hh^T, each (batch, gates * hidden), plus their biases
    matmuls = [op for op in ops if op.kind == "matmul"]
    gates = {"gru": 3, "lstm": 4}.get(cell, 1) * 4
    assert len(matmuls) == 4
    assert all(model.executable.graph.tensors[op.outputs[0]].shape == (3, gates) for op in matmuls)
    for kind, n in ELEMENTWISE[cell].items():
        per_step = n + (2 if biased and kind == "add" else 0)
        assert kinds.count(kind) == 2 * per_step + (1 if kind == "add" and cell == "lstm" else 0), kind
    assert model.simulation.cycle_count > 0


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_a_cell_trains_as_torch(cell):
    xs = _inputs()
    torch.manual_seed(0)
    reference = Net(CELLS[cell])
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(*xs).backward()
    opt.step()
    torch.manual_seed(0)
    net = Net(CELLS[cell])
    trained = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    trained(*xs)
    for (name, p), q in zip(net.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), msg=name)
    backward = [o for o in trained.executable.graph.ops if o.pass_ == "backward" and o.kind == "matmul"]
    assert backward  # the linears' gradients are priced


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_an_unbatched_cell_without_a_state_starts_from_zeros(cell):
    torch.manual_seed(0)
    net = Net(CELLS[cell], state=False)
    xs = _inputs(batch=0)
    with torch.no_grad():
        expected = net(*xs)
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(*xs), expected)
    graph = model.executable.graph
    first = next(op for op in _forward_ops(model) if op.kind == "matmul")
    assert graph.tensors[first.outputs[0]].shape[0] == 1  # one row, as ATen's cell sees it
