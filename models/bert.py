"""BERT (Devlin et al. 2018) for masked-LM pre-training, as Graphcore's BERT examples build it.

Inputs, in order: ``input_ids``, ``attention_mask``, ``token_type_ids`` (int32, (B, S)) and,
with the head, ``labels`` (int32, (B, S) or (B, mask_tokens)). Outputs: the MLM logits and the
loss (with the head), else the encoder output.

- Post-layernorm encoder layers: fused QKV attention, residual add, layernorm, FFN (GELU),
  residual add, layernorm (``models.transformer``).
- ``vocab`` defaults to BERT's 30522; Graphcore's examples pad it to 30528 (a multiple of 16
  for the AMP units) — pass ``vocab=30528`` to match them exactly.
- The MLM head is the dense + GELU + layernorm transform, then the projection onto the vocab
  as a matmul with the word-embedding table transposed (tied weights) plus a bias.
  By default (``mask_tokens="auto"``) it follows Graphcore's pre-training examples, which put
  the masked tokens first and project only those (20 at S=128, 76 at S=384, 80 at S=512,
  otherwise 15 % of S rounded up); ``mask_tokens=None`` projects every position (Hugging
  Face's ``BertForMaskedLM``).
- No pooler or next-sentence-prediction head (the loss is MLM only).
- ``recompute_checkpoint_every_layer``: each layer's output but the last is a recomputation
  checkpoint, as in Graphcore's configs; by default (None) on when ``layers_per_ipu`` pipelines
  the layers over several IPUs (``models.transformer.checkpointed_layers``).
- ``layers_per_ipu`` (e.g. ``[0, 4, 4, 4]``) places the encoder layers on consecutive IPUs. As in
  Graphcore's PyTorch BERT (``Embedding --> IPU 0``, ``Encoder i --> IPU k``, ``Classifier -->
  IPU 0``), the embeddings go on IPU 0 and the MLM head and loss go back on IPU 0, where the
  tied embedding table lives, as the last pipeline stage.
"""

from __future__ import annotations

import math

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement
from .transformer import attention, ffn, tied_projection, transformer_params

_COMMON = dict(micro_batch=8, seq_len=128, intermediate=None, vocab=30522, max_positions=512,
               type_vocab=2, mask_tokens="auto", dropout=0.1, layers_per_ipu=None, with_head=True,
               recompute_checkpoint_every_layer=None, dtype="float16")
MODELS = {
    "bert-base": dict(_COMMON, num_layers=12, hidden=768, heads=12),
    "bert-large": dict(_COMMON, num_layers=24, hidden=1024, heads=16),
}
EPS = 1e-12  # BERT's layer_norm_eps
GRAPHCORE_MASK_TOKENS = {128: 20, 384: 76, 512: 80}  # masked positions per sequence in their configs


def build(name: str, p: Params) -> Graph:
    c = transformer_params(p, "max_positions")
    B, S, H, V = c["micro_batch"], c["seq_len"], c["hidden"], c["vocab"]
    if p["mask_tokens"] == "auto":
        p["mask_tokens"] = GRAPHCORE_MASK_TOKENS.get(S, math.ceil(0.15 * S))
    mask_tokens = p.int("mask_tokens", optional=True)
    if mask_tokens is not None and mask_tokens > S:
        p.fail("mask_tokens", f"must be <= seq_len={S}")
    drop, layer_ipu = c["dropout"], c["layer_ipu"]

    b = GraphBuilder(name, c["dtype"])
    place = Placement(b, layer_ipu is not None)
    ids = b.input("input_ids", (B, S), "int32")
    attn_mask = b.input("attention_mask", (B, S), "int32")
    types = b.input("token_type_ids", (B, S), "int32")
    labels = b.input("labels", (B, mask_tokens or S), "int32") if c["with_head"] else None

    with place.on(0, "embedding"), b.scope("embeddings"):
        word_table = b.weight("word_embeddings", (V, H))
        positions = b.constant("position_ids", (S,), "int32")
        x = b.embedding(ids, word_table, name="word")
        x = b.add(x, b.embedding(positions, b.weight("position_embeddings", (p.int("max_positions"), H)),
                                 name="position"))
        x = b.add(x, b.embedding(types, b.weight("token_type_embeddings", (p.int("type_vocab"), H)),
                                 name="token_type"))
        x = b.layernorm(x, EPS)
        if drop:
            x = b.dropout(x, drop)
        # The extended mask (1 - mask) * -10000, broadcast over heads and query positions.
        mask = b.reshape(b.scale(b.cast(attn_mask, c["dtype"]), -10000.0), (B, 1, 1, S))

    for i in range(c["num_layers"]):
        with place.on(layer_ipu[i] if layer_ipu else 0, f"layer{i}"), b.scope(f"encoder/layer{i}"):
            x = b.layernorm(b.add(x, attention(b, x, c["heads"], mask, drop)), EPS, name="attention_norm")
            x = b.layernorm(b.add(x, ffn(b, x, c["intermediate"], drop)), EPS, name="ffn_norm")
            if i in c["checkpoints"]:
                b.checkpoint(x)

    if not c["with_head"]:
        b.output(x)
        return b.graph
    with place.on(0, "head"), b.scope("mlm_head"):
        if mask_tokens is not None:
            x = b.slice(x, 1, 0, mask_tokens, name="masked_tokens")
        x = b.layernorm(b.gelu(b.linear(x, H, name="transform")), EPS)
        logits = b.add(tied_projection(b, x, word_table), b.weight("decoder_bias", (V,)))
        loss = b.softmax_cross_entropy(logits, labels)
    b.output(logits, loss)
    return b.graph
