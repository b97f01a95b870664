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


# --- BERT with Hugging Face's unfused attention (the zoo's ``hf_attention``) ---------------------------------
B_HIDDEN, B_HEADS, B_FFN, B_VOCAB, B_SEQ, B_EPS = 768, 12, 3072, 30522, 128, 1e-12


class _BertSelfAttention(torch.nn.Module):
    """transformers 4.x ``BertSelfAttention`` + ``BertSelfOutput``: three projections, scores divided by
    sqrt(head size), the extended mask added, softmax, dropout, context, output projection, post-layernorm."""

    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = (torch.nn.Linear(B_HIDDEN, B_HIDDEN) for _ in range(3))
        self.dense = torch.nn.Linear(B_HIDDEN, B_HIDDEN)
        self.norm = torch.nn.LayerNorm(B_HIDDEN, eps=B_EPS)
        self.dropout = torch.nn.Dropout(0.1)

    def heads(self, x):
        return x.view(x.shape[0], x.shape[1], B_HEADS, B_HIDDEN // B_HEADS).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(B_HIDDEN // B_HEADS) + mask
        context = torch.matmul(self.dropout(scores.softmax(-1)), v).permute(0, 2, 1, 3).contiguous()
        return self.norm(x + self.dropout(self.dense(context.view(x.shape))))


class _BertQA(torch.nn.Module):
    """One layer of ``BertForQuestionAnswering`` (transformers 4.x, unfused), its span loss."""

    def __init__(self):
        super().__init__()
        self.words = torch.nn.Embedding(B_VOCAB, B_HIDDEN)
        self.positions = torch.nn.Embedding(512, B_HIDDEN)
        self.types = torch.nn.Embedding(2, B_HIDDEN)
        self.embedding_norm = torch.nn.LayerNorm(B_HIDDEN, eps=B_EPS)
        self.attention = _BertSelfAttention()
        self.intermediate, self.output = torch.nn.Linear(B_HIDDEN, B_FFN), torch.nn.Linear(B_FFN, B_HIDDEN)
        self.ffn_norm = torch.nn.LayerNorm(B_HIDDEN, eps=B_EPS)
        self.dropout = torch.nn.Dropout(0.1)
        self.qa_outputs = torch.nn.Linear(B_HIDDEN, 2)

    def forward(self, ids, mask, types, starts, ends):
        x = self.words(ids) + self.positions(torch.arange(ids.shape[1])) + self.types(types)
        x = self.dropout(self.embedding_norm(x))
        extended = ((1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0)
        x = self.attention(x, extended)
        x = self.ffn_norm(x + self.dropout(self.output(torch.nn.functional.gelu(self.intermediate(x)))))
        start, end = self.qa_outputs(x).split(1, dim=-1)
        start, end = start.squeeze(-1), end.squeeze(-1)
        loss = (torch.nn.functional.cross_entropy(start, starts) + torch.nn.functional.cross_entropy(end, ends)) / 2
        return poptorch.identity_loss(loss, "none"), start, end


def test_zoo_bert_with_hf_attention_is_the_unfused_pytorch_bert_as_captured():
    """Graphcore's PopTorch BERT tutorial (row T1) trains Hugging Face's BERT as transformers 4.x writes it,
    without the fused QKV matmul Graphcore's PyTorch BERT and optimum put in: the zoo's ``hf_attention`` is that
    attention, three Q, K, V matmuls and a divide, to 1.5 % of the captured layer's matmul cycles (a 24-layer
    BERT-Large through Hugging Face's own class, transformers 5.25, comes out within 1.4 % of the zoo per call:
    docs/reference/published-results.md 2.2c)."""
    torch.manual_seed(0)
    net = _BertQA().half()
    options = poptorch.Options().simulatedSystem("ipu-mk2").computeOutputsOnCpu(False)
    options.Precision.setPartialsType(torch.half)
    training = poptorch.trainingModel(net, options, poptorch.optim.SGD(net.parameters(), lr=0.01))
    ids = torch.randint(0, B_VOCAB, (MICRO_BATCH, B_SEQ))
    ones, zeros = torch.ones(MICRO_BATCH, B_SEQ, dtype=torch.long), torch.zeros(MICRO_BATCH, B_SEQ, dtype=torch.long)
    training(ids, ones, zeros, torch.tensor([1, 2]), torch.tensor([3, 4]))
    captured = _by_kind(training.simulation.executable)

    def zoo(hf_attention):
        graph = models.get("bert-base", micro_batch=MICRO_BATCH, seq_len=B_SEQ, num_layers=1, head="squad",
                           hf_attention=hf_attention)
        run = sim.simulate(graph, "ipu-mk2", sim.Options().Precision.setPartialsType("half"), training=True,
                           optimizer="sgd")
        return run.executable

    unfused, fused = zoo(True), zoo(False)
    kinds = {name: [op.kind for op in exe.graph.ops] for name, exe in (("unfused", unfused), ("fused", fused))}
    unfused, fused = _by_kind(unfused), _by_kind(fused)
    assert captured["matmul"][1] == pytest.approx(unfused["matmul"][1], rel=1e-6)  # the same matmul work
    assert captured["matmul"][0] == pytest.approx(unfused["matmul"][0], rel=0.015)
    assert fused["matmul"][0] < 0.95 * unfused["matmul"][0]  # one QKV matmul instead of three
    # three projections (forward, input and weight gradients each) against one; the scores divided, not scaled
    assert kinds["unfused"].count("matmul") == kinds["fused"].count("matmul") + 6
    assert kinds["unfused"].count("div") == 2 and "div" not in kinds["fused"]
