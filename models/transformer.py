"""Transformer pieces shared by BERT and GPT-2: attention, FFN, tied LM head, layer placement.

Shapes: activations are (batch, seq, hidden); attention works on (batch, heads, seq, head_dim).
"""

from __future__ import annotations

import math

from sim.graph import GraphBuilder

from ._common import Params


def attention(b: GraphBuilder, x: str, heads: int, mask: str | None = None,
              dropout: float = 0.0, name: str = "attention") -> str:
    """Multi-head self-attention with one fused QKV projection [h, 3h], as Graphcore's BERT.

    ``mask`` is added to the scores (broadcast to (batch, heads, seq, seq)). Returns the output
    projection (after dropout), before the residual add.
    """
    batch, seq, hidden = b.shape(x)
    d = hidden // heads
    with b.scope(name):
        qkv = b.linear(x, 3 * hidden, name="qkv")

        def split(i: int, perm: tuple[int, ...], what: str) -> str:
            t = b.slice(qkv, 2, i * hidden, (i + 1) * hidden, name=what)
            return b.transpose(b.reshape(t, (batch, seq, heads, d)), perm)

        q = split(0, (0, 2, 1, 3), "q")   # (B, heads, S, d)
        k = split(1, (0, 2, 3, 1), "k")   # (B, heads, d, S)
        v = split(2, (0, 2, 1, 3), "v")   # (B, heads, S, d)
        scores = b.scale(b.matmul(q, k, name="scores"), 1.0 / math.sqrt(d))
        if mask is not None:
            scores = b.add(scores, mask, name="mask")
        probs = b.softmax(scores)
        if dropout:
            probs = b.dropout(probs, dropout)
        ctx = b.matmul(probs, v, name="context")  # (B, heads, S, d)
        ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (batch, seq, hidden))
        out = b.linear(ctx, hidden, name="output")
        if dropout:
            out = b.dropout(out, dropout)
    return out


def ffn(b: GraphBuilder, x: str, intermediate: int, dropout: float = 0.0, name: str = "ffn") -> str:
    """Position-wise feed-forward: linear(h→i), GELU, linear(i→h), dropout."""
    hidden = b.shape(x)[-1]
    with b.scope(name):
        y = b.linear(b.gelu(b.linear(x, intermediate, name="fc1")), hidden, name="fc2")
        if dropout:
            y = b.dropout(y, dropout)
    return y


def tied_projection(b: GraphBuilder, x: str, table: str, name: str = "decoder") -> str:
    """Logits = x @ tableᵀ: the LM head tied to the (vocab, hidden) word-embedding table."""
    return b.matmul(x, b.transpose(table, (1, 0), name="table_t"), name=name)


def transformer_params(p: Params, extra_seq_limit: str) -> dict:
    """Check the parameters BERT and GPT-2 share; returns them resolved (intermediate filled in)."""
    hidden, heads = p.int("hidden"), p.int("heads")
    if hidden % heads:
        p.fail("heads", f"must divide hidden={hidden}")
    seq_len = p.int("seq_len")
    if seq_len > p.int(extra_seq_limit):
        p.fail("seq_len", f"must be <= {extra_seq_limit}={p[extra_seq_limit]}")
    num_layers = p.layers("num_layers")
    return dict(micro_batch=p.int("micro_batch"), seq_len=seq_len, num_layers=num_layers,
                hidden=hidden, heads=heads, vocab=p.int("vocab"),
                intermediate=p.int("intermediate", optional=True) or 4 * hidden,
                dropout=p.prob("dropout"), with_head=p.flag("with_head"), dtype=p.dtype(),
                layer_ipu=layer_ipus(p, num_layers), checkpoints=checkpointed_layers(p, num_layers))


def checkpointed_layers(p: Params, num_layers: int) -> set[int]:
    """The layers whose output is a recomputation checkpoint (``recompute_checkpoint_every_layer``).

    As Graphcore's BERT and GPT-2 (``recompute_checkpoint_every_layer: True`` in their configs):
    every layer but the last. ``None`` (the default) means True when ``layers_per_ipu`` puts
    layers on an IPU other than IPU 0, so that the model is pipelined over several IPUs (where
    PopTorch recomputes, ``RecomputationType::Pipeline``), and False otherwise: on one IPU a
    checkpoint would make training recompute, which PopTorch does not do by default.
    """
    on = p["recompute_checkpoint_every_layer"]
    if on is None:
        layer_ipu = layer_ipus(p, num_layers)
        on = layer_ipu is not None and any(layer_ipu)
    else:
        on = p.flag("recompute_checkpoint_every_layer")
    return set(range(num_layers - 1)) if on else set()


def layer_ipus(p: Params, num_layers: int) -> list[int] | None:
    """The IPU of each layer from ``layers_per_ipu`` (e.g. [0, 4, 4, 4]), or None if unset."""
    counts = p.ints("layers_per_ipu", minimum=0, optional=True)
    if counts is None:
        return None
    if sum(counts) != num_layers:
        p.fail("layers_per_ipu", f"must sum to num_layers={num_layers}, sums to {sum(counts)}")
    return [ipu for ipu, n in enumerate(counts) for _ in range(n)]
