"""sim.poptorch raises compile-time checks as poptorch.Error, lowers torch.atan2 and torch.erfc as
PopTorch does, and exports the simulator's PipelineCopies beside the Options setter taking it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sim  # noqa: E402
from sim import poptorch  # noqa: E402


def _options():
    return poptorch.Options().simulatedSystem("ipu-m2000")


def test_a_pipeline_deeper_than_its_micro_batches_is_a_poptorch_error():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), poptorch.BeginBlock(torch.nn.Linear(4, 4), ipu_id=1))
    model = poptorch.inferenceModel(net, _options())
    with pytest.raises(poptorch.Error, match=r"deviceIterations \(1\) must be greater than or equal to the number "
                                             r"of pipeline stages \(2\)") as info:
        model(torch.randn(2, 4))
    assert isinstance(info.value, sim.OptionsError)  # still the simulator's own error too


class _Trig(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.atan2(self.linear(x), x + 1) + torch.erfc(x)


def test_atan2_and_erfc_are_lowered_and_priced():
    net, x = _Trig(), torch.randn(2, 4)
    expected = net(x)
    model = poptorch.inferenceModel(net, _options())
    assert torch.allclose(model(x), expected)
    ops = model.simulation.executable.graph.ops
    assert [op.kind for op in ops if op.kind == "atan2"] == ["atan2"]
    assert [op.kind for op in ops if op.kind in ("erf", "sub")] == ["erf", "sub"]  # PopTorch's 1 - erf(x), two ops

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _Trig()

        def forward(self, x):
            return poptorch.identity_loss(self.net(x).sum(), "none")
    loss = Loss()
    training = poptorch.trainingModel(loss, _options(), optimizer=poptorch.optim.SGD(loss.parameters(), lr=0.1))
    training(x)
    grads = [op.attrs["steps"] for op in training.simulation.executable.graph.ops
             if op.kind == "map" and op.pass_ == "backward"]
    assert ["square", "square", "add", "div", "mul"] in grads  # d atan2(y, x) / dy = x / (x^2 + y^2)


def test_pipeline_copies_is_exported():
    o = poptorch.Options().pipelineCopies(poptorch.PipelineCopies.PerStage)
    assert o.pipeline_copies is sim.PipelineCopies.PerStage
