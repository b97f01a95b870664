"""RoFormer-V2 (Su et al.: RoFormer's rotary position embedding, V2's bias-free, scale-free variant) as a
sequence classifier, as JunnYu's ``roformer`` package builds ``RoFormerForSequenceClassification`` with
``norm_type="rms_norm"`` (``src/roformer/modeling_roformer.py``) and PopRT's RoformerV2 benchmark exports
it (``torch.onnx.export`` of the whole model, opset 13).

Inputs, in order: ``input_ids``, ``token_type_ids`` and ``attention_mask`` (int32, (B, seq_len): PopRT's
benchmark feeds int64 converted to int32). Output: the logits (B, num_labels). Inference only.

- Embeddings: the word embedding (vocab, hidden) and the token-type embedding (type_vocab, hidden)
  gathered and added, then ``Norm``; no position embedding (the positions are rotary).
- ``Norm`` (the ``rms_norm`` branch): ``x / sqrt(mean(x²) + eps)`` over the hidden dimension, with no
  gain or bias: a square, a mean, an add, a square root and a divide.
- The attention mask ``(1 - mask[:, None, None, :]) * -10000`` (a cast, a subtract and a scale, once),
  added to every layer's scores.
- A post-norm layer: three projections Q, K, V without bias; Q and K rotated by the sinusoidal
  positions (``apply_rotary``: the even and odd features ``x[..., 0::2]``, ``x[..., 1::2]``, then
  ``x1·cos - x2·sin`` and ``x2·cos + x1·sin`` stacked and flattened back: four multiplies, a
  subtract, an add and a concatenation, the strided slices views; the sin and cos tables constants);
  the scores scaled by ``1/sqrt(head_dim)`` (``pre_scale``: the scale moved onto Q before the matmul,
  as PopRT's ``pre_scale`` pass does), the mask added, softmax, the context, the output projection
  without bias, the residual add and ``Norm``; then the FFN (dense without bias, ``relu``, dense
  without bias), the residual add and ``Norm``.
- The classification head on the first token: dense (with bias), ``relu`` (the config's
  ``hidden_act``), dense to ``num_labels`` (with bias).

``roformer-v2-small`` is ``junnyu/roformer_v2_chinese_char_small`` (Zhuiyi's
chinese_roformer-v2-char_L-6_H-384_A-6): vocabulary 12,000, 2 token types, 6 layers of width 384 and 6
heads, FFN 1,536 (PaddleNLP's ``roformer_v2_chinese_char_small`` configuration holds the same sizes,
``hidden_act`` relu and ``use_bias`` False).
"""

from __future__ import annotations

import math

from sim.graph import Graph, GraphBuilder

from ._common import Params

MODELS = {
    "roformer-v2-small": dict(micro_batch=1, seq_len=128, vocab=12000, type_vocab=2, hidden=384, num_layers=6,
                              heads=6, intermediate=1536, num_labels=2, pre_scale=False, dtype="float16"),
}
EPS = 1e-12  # RoFormerConfig's layer_norm_eps, which Norm takes (PopRT's fp16 conversion raises it to 1e-7)
MASK_VALUE = -10000.0  # get_extended_attention_mask: masked positions' additive score


def _norm(b: GraphBuilder, x: str, name: str) -> str:
    """``x / sqrt(mean(x²) + eps)`` over the last dimension, without gain or bias."""
    with b.scope(name):
        power = b.reduce(b.mul(x, x, name="square"), [-1], "reduce_mean", keepdims=True, name="mean")
        rms = b.unary("sqrt", b.add(power, b.constant("eps", (1,)), name="add_eps"), name="sqrt")
        return b.div(x, rms, name="divide")


def _rotary(b: GraphBuilder, x: str, cos: str, sin: str, name: str) -> str:
    """``apply_rotary``: x (B, heads, S, d) rotated pairwise by the positions' angles."""
    batch, heads, seq, d = b.shape(x)
    with b.scope(name):
        pairs = b.reshape(x, (batch, heads, seq, d // 2, 2))
        even, odd = b.slice(pairs, 4, 0, 1, name="even"), b.slice(pairs, 4, 1, 2, name="odd")
        first = b.sub(b.mul(even, cos), b.mul(odd, sin))
        second = b.add(b.mul(odd, cos), b.mul(even, sin))
        return b.reshape(b.concat([first, second], 4, name="stack"), (batch, heads, seq, d))


def _attention(b: GraphBuilder, x: str, heads: int, mask: str, cos: str, sin: str, pre_scale: bool) -> str:
    """RoFormerSelfAttention and RoFormerSelfOutput's projection (no biases)."""
    batch, seq, hidden = b.shape(x)
    d = hidden // heads
    scale = 1.0 / math.sqrt(d)
    with b.scope("attention"):
        def heads_of(what: str) -> str:
            t = b.linear(x, hidden, bias=False, name=what)
            return b.transpose(b.reshape(t, (batch, seq, heads, d)), (0, 2, 1, 3))  # (B, heads, S, d)

        q = _rotary(b, heads_of("query"), cos, sin, "rotary_query")
        k = _rotary(b, heads_of("key"), cos, sin, "rotary_key")
        v = heads_of("value")
        if pre_scale:
            q = b.scale(q, scale, name="pre_scale")
        scores = b.matmul(q, b.transpose(k, (0, 1, 3, 2)), name="scores")
        if not pre_scale:
            scores = b.scale(scores, scale)
        probs = b.softmax(b.add(scores, mask, name="mask"))
        ctx = b.matmul(probs, v, name="context")
        ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (batch, seq, hidden))
        return b.linear(ctx, hidden, bias=False, name="output")


def build(name: str, p: Params) -> Graph:
    B, S = p.int("micro_batch"), p.int("seq_len")
    H, L, heads, inter = p.int("hidden"), p.layers("num_layers"), p.int("heads"), p.int("intermediate")
    if H % heads or (H // heads) % 2:
        p.fail("heads", f"must divide hidden={H} into an even head size (the rotary pairs features)")
    vocab, types, labels = p.int("vocab"), p.int("type_vocab"), p.int("num_labels")
    b = GraphBuilder(name, p.dtype())
    ids = b.input("input_ids", (B, S), "int32")
    token_types = b.input("token_type_ids", (B, S), "int32")
    attention_mask = b.input("attention_mask", (B, S), "int32")

    with b.scope("embeddings"):
        x = b.add(b.embedding(ids, b.weight("word_embeddings", (vocab, H)), name="words"),
                  b.embedding(token_types, b.weight("token_type_embeddings", (types, H)), name="token_types"))
        x = _norm(b, x, "norm")
    with b.scope("mask"):
        keep = b.reshape(b.cast(attention_mask, p.dtype()), (B, 1, 1, S))
        mask = b.scale(b.sub(b.constant("one", (1,)), keep), MASK_VALUE, name="additive")
    # the sinusoidal tables at positions 0..S-1, (1, 1, S, d/2, 1) to broadcast over each pair
    half = (1, 1, S, H // heads // 2, 1)
    cos, sin = b.constant("rotary_cos", half), b.constant("rotary_sin", half)
    for i in range(L):
        with b.scope(f"encoder/layer{i}"):
            x = _norm(b, b.add(x, _attention(b, x, heads, mask, cos, sin, p.flag("pre_scale"))), "attention_norm")
            with b.scope("ffn"):
                y = b.linear(b.relu(b.linear(x, inter, bias=False, name="intermediate")), H, bias=False,
                             name="output")
            x = _norm(b, b.add(x, y), "ffn_norm")
    with b.scope("classifier"):
        first = b.reshape(b.slice(x, 1, 0, 1, name="first_token"), (B, H))
        logits = b.linear(b.relu(b.linear(first, H, name="dense")), labels, name="out_proj")
    b.output(logits)
    return b.graph
