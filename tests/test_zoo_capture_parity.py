"""The zoo's ViT against the same model written in PyTorch and captured through ``sim.poptorch``.

The validation rows run zoo graphs (``models/``) built to mirror the PyTorch code Graphcore's
examples run. Where a row is off (ViT-B/16 pre-training's micro-batch is 45 % dearer on the hardware
than simulated, docs/reference/published-results.md), this pins that the gap is not the zoo leaving
out work PopTorch would compile: the layer as Hugging Face's ``ViTLayer`` writes it (three Q, K, V
projections, heads by view and permute, scores divided by sqrt(head size), GELU, pre-layernorm),
trained through ``sim.poptorch``, is the zoo's graph to the FLOP and to 1 % of its matmul cycles.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import models  # noqa: E402
import sim  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402

HIDDEN, HEADS, FFN, PATCH, IMAGE, LABELS, EPS = 768, 12, 3072, 16, 224, 1000, 1e-6
MICRO_BATCH, LAYERS = 2, 1


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = (torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.dense = torch.nn.Linear(HIDDEN, HIDDEN)
        self.dropout = torch.nn.Dropout(0.1)

    def heads(self, x):
        return x.view(x.shape[0], x.shape[1], HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HIDDEN // HEADS)
        context = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).contiguous()
        return self.dropout(self.dense(context.view(x.shape)))


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.before, self.after = torch.nn.LayerNorm(HIDDEN, eps=EPS), torch.nn.LayerNorm(HIDDEN, eps=EPS)
        self.attention = _Attention()
        self.intermediate, self.output = torch.nn.Linear(HIDDEN, FFN), torch.nn.Linear(FFN, HIDDEN)
        self.dropout = torch.nn.Dropout(0.1)

    def forward(self, x):
        x = x + self.attention(self.before(x))
        return x + self.dropout(self.output(torch.nn.functional.gelu(self.intermediate(self.after(x)))))


class _ViT(torch.nn.Module):
    """ViT-B/16 as Hugging Face's ``ViTForImageClassification`` (fine-tuning: no representation layer)."""

    def __init__(self):
        super().__init__()
        self.patches = torch.nn.Conv2d(3, HIDDEN, PATCH, stride=PATCH)
        self.cls = torch.nn.Parameter(torch.zeros(1, 1, HIDDEN))
        self.positions = torch.nn.Parameter(torch.zeros(1, (IMAGE // PATCH) ** 2 + 1, HIDDEN))
        self.dropout = torch.nn.Dropout(0.1)
        self.layers = torch.nn.ModuleList(_Layer() for _ in range(LAYERS))
        self.norm = torch.nn.LayerNorm(HIDDEN, eps=EPS)
        self.classifier = torch.nn.Linear(HIDDEN, LABELS)

    def forward(self, images, labels):
        x = self.patches(images).flatten(2).transpose(1, 2)
        x = self.dropout(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.positions)
        for layer in self.layers:
            x = layer(x)
        logits = self.classifier(self.norm(x)[:, 0])
        return logits, torch.nn.functional.cross_entropy(logits, labels)


def _by_kind(executable) -> dict[str, tuple[int, float]]:
    """(cycles, FLOPs) of the executable's ops summed by op kind."""
    totals: dict[str, tuple[int, float]] = {}
    for op in executable.graph.ops:
        cost = executable.costs.get(op.name)
        if cost is not None:
            cycles, flops = totals.get(op.kind, (0, 0.0))
            totals[op.kind] = (cycles + cost.cycles, flops + cost.flops)
    return totals


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "POPTORCH_DEFAULT_OPTIONS"):
        monkeypatch.delenv(var, raising=False)


def test_zoo_vit_is_the_pytorch_vit_as_captured():
    torch.manual_seed(0)
    net = _ViT().half()
    options = poptorch.Options().simulatedSystem("bow-ipu").computeOutputsOnCpu(False)
    options.Precision.setPartialsType(torch.half)
    training = poptorch.trainingModel(net, options, poptorch.optim.SGD(net.parameters(), lr=0.01))
    training(torch.randn(MICRO_BATCH, 3, IMAGE, IMAGE).half(), torch.randint(0, LABELS, (MICRO_BATCH,)))
    captured = _by_kind(training.simulation.executable)

    zoo_graph = models.get("vit-base-16", micro_batch=MICRO_BATCH, num_layers=LAYERS)
    zoo_run = sim.simulate(zoo_graph, "bow-ipu", sim.Options().Precision.setPartialsType("half"), training=True,
                           optimizer="sgd")
    zoo = _by_kind(zoo_run.executable)

    def total(by_kind, index):
        return sum(value[index] for value in by_kind.values())

    assert total(captured, 1) == pytest.approx(total(zoo, 1), rel=1e-6)  # the same work
    assert captured["matmul"][0] == pytest.approx(zoo["matmul"][0], rel=0.01)
    for kind in ("conv2d", "conv2d_grad_weight", "layernorm", "layernorm_grad", "softmax", "softmax_grad", "gelu",
                 "gelu_grad", "dropout", "div", "sgd_update"):
        assert captured[kind] == zoo[kind], kind
    # what differs is how the loss is lowered (PopTorch's cross-entropy of int64 labels against the zoo's
    # one softmax cross-entropy op) and the heads' layout copies: within 5 % of the whole
    assert total(captured, 0) == pytest.approx(total(zoo, 0), rel=0.05)
