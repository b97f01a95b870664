"""A torch module run through ``sim.poptorch`` for one call, shared by the recurrent-lowering tests."""
from __future__ import annotations

import torch
import torch.nn as nn

import sim.poptorch as poptorch

#: op kinds that only view their input (no compute set of their own)
VIEWS = {"reshape", "slice", "concat"}


class WithLoss(nn.Module):
    """``inner``'s (output, state) and an identity loss of their sums: the module trains both."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *xs):
        y, h = self.inner(*xs)
        return y, poptorch.identity_loss(y.sum() + h.sum(), reduction="none")


def inference(net, xs: tuple):
    """(the inference model, its outputs, its cycleCount()) of one call of ``net`` on ``xs``."""
    model = poptorch.inferenceModel(net, poptorch.Options().logCycleCount(True))
    out = model(*xs)
    return model, out, model.cycleCount()


def training(net, xs: tuple):
    """(the training model, its cycleCount()) of one SGD call of ``net`` on ``xs``."""
    model = poptorch.trainingModel(net, poptorch.Options().logCycleCount(True),
                                   optimizer=torch.optim.SGD(net.parameters(), lr=0.01))
    model(*xs)
    return model, model.cycleCount()


def compute_ops(model, pass_: str = "forward") -> list:
    """The ops of ``pass_`` in the model's graph that are not views."""
    return [op for op in model.executable.graph.ops if op.pass_ == pass_ and op.kind not in VIEWS]
