"""GPT-2 (Radford et al. 2019) language model, as Graphcore's GPT-2 examples build it.

Inputs, in order: ``input_ids`` and, with the head and ``with_loss``, ``labels`` (int32, (B, S);
the labels are the ids shifted by one, prepared by the data loader). Outputs: the logits of the
last position (what generation reads: (B, 1, vocab); all positions' logits stay on the IPU for the
loss) and the loss (with the head and ``with_loss``), else the final hidden states.
``with_loss=False`` is inference as Graphcore's ``inference_gpt2.py`` runs it: ``input_ids`` in,
no labels and no cross-entropy.

- Pre-layernorm blocks: x + attention(ln_1(x)), then x + FFN(ln_2(x)), and ``ln_f`` at the end.
- Causal attention: a constant (1, 1, S, S) mask (0 / -10000) added to the scores.
- The LM head is tied to ``wte``: logits = ln_f(x) @ wteᵀ, no bias.
- ``vocab`` is GPT-2's 50257 (Graphcore pads it for serialised embeddings; pass e.g. 50264).
  ``embedding_serialization`` (the examples' ``--embedding-serialization-factor``, a
  ``SerializedLinear`` LM head) serialises the projection over the vocabulary
  (``models.transformer.tied_projection``); it must divide ``vocab``.
- ``layers_per_ipu`` places the blocks on consecutive IPUs; as in Graphcore's GPT-2
  (``Embedding --> IPU 0``, ``Layer i --> IPU k``, ``LM_head --> IPU 0``) the embeddings are on
  IPU 0, ``ln_f`` stays with the last block, and the LM head and loss go back to IPU 0 (where
  ``wte`` lives) as the last pipeline stage.
- ``recompute_checkpoint_every_layer``: each block's output is a recomputation checkpoint, the
  last block's too, as Graphcore's ``train_gpt2.py`` marks them; by default (None) on when
  ``layers_per_ipu`` pipelines the blocks over several IPUs (``models.transformer.checkpointed_layers``).
- ``fp32_ops`` (e.g. ``["layernorm", "gelu"]``): those ops run in float32 in a float16 model, cast in
  and out (``models.transformer.fp32_ops``).
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement
from .transformer import attention, ffn, tied_projection, transformer_params

_COMMON = dict(micro_batch=1, seq_len=1024, intermediate=None, vocab=50257, n_positions=1024,
               dropout=0.1, layers_per_ipu=None, with_head=True, with_loss=True, embedding_serialization=1,
               recompute_checkpoint_every_layer=None,
               dtype="float16", fp32_ops=())
MODELS = {
    "gpt2-small": dict(_COMMON, num_layers=12, hidden=768, heads=12),
    "gpt2-medium": dict(_COMMON, num_layers=24, hidden=1024, heads=16),
    "gpt2-large": dict(_COMMON, num_layers=36, hidden=1280, heads=20),
    "gpt2-xl": dict(_COMMON, num_layers=48, hidden=1600, heads=25),
}
EPS = 1e-5  # GPT-2's layer_norm_epsilon


def build(name: str, p: Params) -> Graph:
    c = transformer_params(p, "n_positions", checkpoint_last=True)
    B, S, H, V = c["micro_batch"], c["seq_len"], c["hidden"], c["vocab"]
    drop, layer_ipu = c["dropout"], c["layer_ipu"]

    b = GraphBuilder(name, c["dtype"], fp32_kinds=c["fp32_ops"])
    place = Placement(b, layer_ipu is not None)
    ids = b.input("input_ids", (B, S), "int32")
    with_loss = p.flag("with_loss") and c["with_head"]
    labels = b.input("labels", (B, S), "int32") if with_loss else None
    causal_mask = b.constant("causal_mask", (1, 1, S, S))

    with place.on(0, "embedding"), b.scope("embeddings"):
        wte = b.weight("wte", (V, H))
        positions = b.constant("position_ids", (S,), "int32")
        x = b.add(b.embedding(ids, wte, name="wte_lookup"),
                  b.embedding(positions, b.weight("wpe", (p.int("n_positions"), H)), name="wpe_lookup"))
        if drop:
            x = b.dropout(x, drop)

    last = 0
    for i in range(c["num_layers"]):
        last = layer_ipu[i] if layer_ipu else 0
        with place.on(last, f"layer{i}"), b.scope(f"h{i}"):
            x = b.add(x, attention(b, b.layernorm(x, EPS, name="ln_1"), c["heads"], causal_mask, drop))
            x = b.add(x, ffn(b, b.layernorm(x, EPS, name="ln_2"), c["intermediate"], drop))
            if i in c["checkpoints"]:
                b.checkpoint(x)
    with place.on(last, f"layer{c['num_layers'] - 1}"):
        x = b.layernorm(x, EPS, name="ln_f")

    if not c["with_head"]:
        b.output(x)
        return b.graph
    with place.on(0, "head"), b.scope("lm_head"):
        logits = tied_projection(b, x, wte, serial=c["embedding_serialization"])
        loss = b.softmax_cross_entropy(logits, labels) if with_loss else None
        next_token = b.slice(logits, 1, S - 1, S, name="next_token_logits")
    b.output(next_token, *([loss] if with_loss else []))
    return b.graph
