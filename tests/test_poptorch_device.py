"""sim.poptorch presents the IPU device to the model's code, as PopTorch traces it on ``ipu:0``.

PopTorch 3 moves the inputs, parameters and buffers to ``torch.device("ipu:0")`` before tracing
(python/_poplar_executor.py) and Graphcore's code branches on it (TGN's ``cos_fp16``: float16 on the IPU,
float32 elsewhere; PopTorch's ``isOnIpu``). The capture (torch.fx and torch.export) and the CPU run of
the outputs both see ``ipu:0``; an ``ipu`` device handed back to torch is the CPU's.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def cos_fp16(value):
    """TGN's time encoding (gnn/tgn/pytorch/tgn_modules.py): float16 with a range reduction on the IPU."""
    if value.device.type == "ipu":
        return torch.remainder(value, 2 * math.pi).to(torch.float16).cos()
    return value.to(torch.float32).cos().to(torch.float16)


class TimeEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 8).half()

    def forward(self, t):
        return poptorch.identity_loss(cos_fp16(self.lin(t)), reduction="sum")


def _ops(model):
    return [op.kind for op in model.executable.graph.ops if op.pass_ == "forward"]


@pytest.mark.parametrize("training", [False, True])
def test_a_branch_on_the_device_takes_the_ipu_branch_in_capture_and_outputs(training):
    torch.manual_seed(0)
    t = (torch.rand(16, 1) * 100).half()
    net = TimeEncoder()
    if training:
        model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.0))
    else:
        model = poptorch.inferenceModel(net)
    got = model(t)
    kinds = _ops(model)
    assert "remainder" in kinds and "cast" not in kinds  # the IPU branch: float16 throughout
    assert any("sees ipu:0" in n for n in model.executable.notes)
    with torch.no_grad():  # the outputs are the IPU branch's (torch's remainder then cos, in float16)
        expected = torch.remainder(net.lin(t), 2 * math.pi).cos().sum()
    torch.testing.assert_close(got.float(), expected.float())
    assert cos_fp16(torch.ones(1)).dtype == torch.float16 and torch.ones(1).device.type == "cpu"  # torch's own
    from torch._subclasses.fake_tensor import FakeTensor
    assert FakeTensor.__dict__["device"].fget.__module__.startswith("torch.")  # torch.export's fake tensors restored


class Reads(nn.Module):
    """Device reads that do not branch: torch.fx captures them; a tensor made on the input's device."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        if isinstance(x, torch.Tensor):  # not torch.fx's proxy
            self.seen.append((x.device, x.is_cpu, self.lin.weight.device))
        pad = torch.zeros_like(x, device=x.device) + torch.ones(4).to(x.device)
        return self.lin(x) + pad


def test_device_reads_see_ipu0_and_tensors_made_on_it_are_on_the_cpu():
    net = Reads()
    model = poptorch.inferenceModel(net)
    x = torch.randn(3, 4)
    got = model(x)
    with torch.no_grad():
        torch.testing.assert_close(got, net.lin(x) + 1)
    assert "graph captured with torch.fx" in model.executable.notes
    ipu = torch.device("ipu", 0)
    assert net.seen and all(s == (ipu, False, ipu) for s in net.seen)
    net.seen.clear()
    net(x)  # plain torch afterwards: the CPU
    assert net.seen == [(torch.device("cpu"), True, torch.device("cpu"))]
