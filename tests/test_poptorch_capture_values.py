"""A capture without values (``computeOutputsOnCpu(False)``): the traced graph runs on tensors that carry
shapes and dtypes only (torch's FakeTensorMode), and makes the graph the capture with values makes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sim.poptorch as poptorch  # noqa: E402
from sim.poptorch import _capture  # noqa: E402
from sim.validation import schnet_training  # noqa: E402


class _Small(torch.nn.Module):
    """Layers with buffers, randomness and a recurrence: batch norm, dropout, an embedding, an LSTM."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 16)
        self.lstm = torch.nn.LSTM(16, 16, batch_first=True)
        self.norm = torch.nn.BatchNorm1d(16)
        self.dropout = torch.nn.Dropout(0.1)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, tokens, labels):
        x, _ = self.lstm(self.embedding(tokens))
        logits = self.head(self.dropout(self.norm(x[:, -1])))
        return logits, torch.nn.functional.cross_entropy(logits, labels)


class _Looped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return poptorch.for_loop(3, lambda t: [torch.relu(t @ self.w)], [x])[0].sum()


class _Ctc(torch.nn.Module):
    """A CTC loss, whose torch kernel has no run without values (its shapes depend on the target lengths'
    values): the capture runs it with them."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x, targets):
        log_probs = self.head(x).log_softmax(-1)  # [time, batch, classes]
        lengths = torch.full((x.shape[1],), x.shape[0], dtype=torch.int32)
        return torch.nn.functional.ctc_loss(log_probs, targets, lengths, torch.full((x.shape[1],), 3,
                                                                                     dtype=torch.int32))


def _schnet():
    return schnet_training._model(), (torch.randint(1, 10, (512,), dtype=torch.int32), torch.randn(512, 3) * 2.0,
                                      torch.arange(0, 512, 32, dtype=torch.int32), torch.randn(16))


CASES = {
    "schnet": _schnet,  # pairwise distances, masks, top-k, gathers and scatter-adds
    "small": lambda: (_Small(), (torch.randint(0, 50, (4, 6)), torch.randint(0, 4, (4,)))),
    "loop": lambda: (_Looped(), (torch.randn(8, 8),)),
    "ctc": lambda: (_Ctc(), (torch.randn(12, 2, 8), torch.randint(1, 5, (2, 3), dtype=torch.int32))),
}


def _described(captured) -> tuple:
    g = captured.graph
    ops = [(op.name, op.kind, tuple(op.inputs), tuple(op.outputs), repr(sorted(op.attrs.items())), op.block)
           for op in g.ops]
    tensors = sorted((t.name, tuple(t.shape), t.dtype, t.role) for t in g.tensors.values())
    return ops, tensors, captured.input_names, captured.output_names, captured.loss_output, captured.method


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_capture_without_values_makes_the_graph_a_capture_with_values_makes(case):
    torch.manual_seed(0)
    model, args = CASES[case]()
    model.train()
    with_values = _capture.capture(model, args, {}, values=True)
    without = _capture.capture(model, args, {}, values=False)
    assert _described(without) == _described(with_values)
    shaped = [(t.shape, t.dtype) for t in torch.utils._pytree.tree_leaves(with_values.example_outputs)]
    zeros = torch.utils._pytree.tree_leaves(without.example_outputs)
    assert [(t.shape, t.dtype) for t in zeros] == shaped
    assert all(not t.any() for t in zeros)  # the outputs' values are not computed: zeros of their shapes


def test_a_model_without_cpu_outputs_is_captured_without_values(monkeypatch):
    """computeOutputsOnCpu(False) asks the capture for no values; the default asks for them."""
    asked = []
    capture = _capture.capture

    def recording(*args, **kwargs):
        asked.append(kwargs.get("values"))
        return capture(*args, **kwargs)

    monkeypatch.setattr("sim.poptorch.executor.capture", recording)
    monkeypatch.delenv("IPUSIM_CPU_OUTPUTS", raising=False)
    for on in (True, False):
        net = torch.nn.Linear(4, 2)
        poptorch.inferenceModel(net, poptorch.Options().computeOutputsOnCpu(on))(torch.randn(3, 4))
    assert asked == [True, False]
