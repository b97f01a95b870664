"""Conformer (Gulati et al. 2020) speech recognition trained with a joint CTC and attention loss,
as Graphcore's PyTorch example builds it (graphcore/examples ``speech/conformer/pytorch``, SDK 3.2:
WeNet's Conformer, ``configs/train.yaml``'s "Conformer-medium").

Inputs, in order: ``features`` ((B, max_frames, mel_bins) fbank frames, the model dtype; the
example's generated data fills every frame), ``targets_in`` and ``targets_out`` (int32,
(B, max_tokens): the decoder's input with <sos> and its labels with <eos>), ``feature_lengths``
and ``target_lengths`` (int32, (B,)). Outputs: the loss, ``(1 - ctc_weight) * attention +
ctc_weight * CTC``.

- Global CMVN in float32 (``GlobalMVN``: ``(x - mean) * istd`` per mel bin), then the cast to fp16.
- ``Conv2dSubsampling4``: two 3 x 3 stride-2 convolutions (1 -> d, d -> d, bias, ReLU) over
  (frames, mel bins), the (d, mel') channels of each frame flattened and projected to ``d``;
  frames 1220 -> 304. The relative positional encoding scales by sqrt(d) and adds the table
  (dropout ``positional_dropout``); its position embedding (1, T, d) feeds every block.
- Encoder blocks (macaron): x + 0.5 FFN(LN x); x + MHSA(LN x) with relative positions (WeNet's
  ``RelPositionMultiHeadedAttention`` without ``rel_shift``: Q + u against K and Q + v against the
  projected positions, two score matmuls added); x + Conv(LN x); x + 0.5 FFN(LN x); LN. FFNs are
  d -> ``linear_units`` -> d with Swish; the convolution module is a pointwise convolution to
  2d, GLU, a depthwise 1-D convolution of ``kernel`` taps, LayerNorm (the example's change from
  batch norm), Swish and a pointwise convolution. Each block starts with the example's ``RemapCE``
  custom op in training (a copy of the block's input into a new tile layout, grain 16), built as a
  copy. Dropout ``dropout`` after each FFN, attention and convolution module, as WeNet.
- CTC branch: linear d -> vocab, log-softmax, CTC (popnn, ``enableReducedClassesInLabel``).
- Decoder: the targets' embedding (vocab x d) with positional encoding, ``decoder_blocks``
  pre-LN blocks (causal self-attention, attention over the encoder output, ReLU FFN), LN and the
  output linear d -> vocab. The label-smoothing loss (KL divergence to the smoothed one-hot) is
  built as one softmax cross-entropy over the (B x tokens, vocab) logits: its gradient is the
  same work (a softmax less a smoothed one-hot).
- ``layers_per_ipu`` (e.g. [2, 4, 4, 2]: the SDK 2.6 example's pipeline ``encoder.encoders__2``,
  ``__6``, ``__10`` on IPUs 1, 2, 3; SDK 3.2's ``__11`` gives [2, 4, 5, 1]) places the encoder blocks; the front end is on IPU 0, the
  CTC branch, decoder and losses on the last block's IPU. The example sets no recomputation
  checkpoint, so a pipelined stage recomputes from its stashed inputs.

Not built: the ops that make the padding masks from the lengths on the IPU (the masks are constants
added to the scores); the CTC loss's division by the batch (a scalar).
"""

from __future__ import annotations

import math

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement
from .transformer import layer_ipus

MODELS = {
    "conformer-medium": dict(micro_batch=4, max_frames=1220, mel_bins=80, max_tokens=48, d_model=256, heads=4,
                             linear_units=2048, encoder_blocks=12, decoder_blocks=6, kernel=15, vocab=4233,
                             dropout=0.1, positional_dropout=0.1, ctc_weight=0.3, layers_per_ipu=None,
                             dtype="float16"),
}
LN_EPS = 1e-5  # WeNet's LayerNorm (torch default eps); layer_norm.py
SUBSAMPLING = 4  # Conv2dSubsampling4: two stride-2 convolutions


def _subsampled(n: int) -> int:
    """Length after one unpadded 3 x 3 stride-2 convolution."""
    return (n - 3) // 2 + 1


def _heads_attention(b: GraphBuilder, q_in: str, kv: str | None, heads: int, mask: str | None, drop: float,
                     pos: str | None = None, name: str = "attention") -> str:
    """Multi-head attention of ``q_in`` (B, Tq, d) over ``kv`` (B, Tk, d; None: self-attention); with ``pos`` (1, Tk, d)
    WeNet's relative-position form (bias vectors u and v, the positions projected without bias)."""
    kv = q_in if kv is None else kv
    B, Tq, d = b.shape(q_in)
    Tk = b.shape(kv)[1]
    dk = d // heads
    with b.scope(name):
        def split(x: str, T: int, what: str, perm) -> str:
            return b.transpose(b.reshape(b.linear(x, d, name=what), (B, T, heads, dk)), perm)

        q = split(q_in, Tq, "query", (0, 2, 1, 3))     # (B, h, Tq, dk)
        k = split(kv, Tk, "key", (0, 2, 3, 1))         # (B, h, dk, Tk)
        v = split(kv, Tk, "value", (0, 2, 1, 3))       # (B, h, Tk, dk)
        if pos is None:
            scores = b.matmul(q, k, name="scores")
        else:
            p = b.transpose(b.reshape(b.linear(pos, d, bias=False, name="linear_pos"), (1, Tk, heads, dk)),
                            (0, 2, 3, 1))              # (1, h, dk, Tk)
            qu = b.add(q, b.weight("pos_bias_u", (heads, 1, dk)), name="q_bias_u")
            qv = b.add(q, b.weight("pos_bias_v", (heads, 1, dk)), name="q_bias_v")
            scores = b.add(b.matmul(qu, k, name="matrix_ac"), b.matmul(qv, p, name="matrix_bd"))
        scores = b.scale(scores, 1.0 / math.sqrt(dk))
        if mask is not None:
            scores = b.add(scores, mask, name="mask")
        ctx = b.matmul(b.softmax(scores), v, name="context")
        out = b.linear(b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (B, Tq, d)), d, name="output")
        return b.dropout(out, drop) if drop else out


def _ffn(b: GraphBuilder, x: str, units: int, drop: float, act: str, name: str) -> str:
    d = b.shape(x)[-1]
    with b.scope(name):
        y = b.linear(x, units, name="w_1")
        y = b.swish(y) if act == "swish" else b.relu(y)
        if drop:
            y = b.dropout(y, drop)
        y = b.linear(y, d, name="w_2")
        return b.dropout(y, drop) if drop else y


def _conv_module(b: GraphBuilder, x: str, kernel: int, drop: float) -> str:
    """Pointwise conv to 2d, GLU, depthwise conv (``kernel`` taps, same padding), LayerNorm over
    the channels, Swish, pointwise conv; on (B, T, d) as WeNet transposes to (B, d, T) and back."""
    B, T, d = b.shape(x)
    with b.scope("conv_module"):
        y = b.linear(x, 2 * d, bias=False, name="pointwise_conv1")  # a 1 x 1 Conv1d
        y = b.mul(b.slice(y, 2, 0, d, name="glu_a"), b.sigmoid(b.slice(y, 2, d, 2 * d, name="glu_b")), name="glu")
        y = b.reshape(b.transpose(y, (0, 2, 1)), (B, d, 1, T))  # Conv1d as a 2-D conv of height 1
        y = b.conv2d(y, d, (1, kernel), 1, (0, (kernel - 1) // 2), groups=d, name="depthwise_conv")
        y = b.transpose(b.reshape(y, (B, d, T)), (0, 2, 1))
        y = b.swish(b.layernorm(y, LN_EPS, name="norm"))
        y = b.linear(y, d, bias=False, name="pointwise_conv2")
        return b.dropout(y, drop) if drop else y


def build(name: str, p: Params) -> Graph:
    B, frames, mel, tokens = p.int("micro_batch"), p.int("max_frames"), p.int("mel_bins"), p.int("max_tokens")
    d, heads, units, kernel = p.int("d_model"), p.int("heads"), p.int("linear_units"), p.int("kernel")
    if d % heads:
        p.fail("heads", f"must divide d_model={d}")
    if kernel % 2 == 0:
        p.fail("kernel", "must be odd (the depthwise convolution pads (kernel - 1) / 2 each side)")
    blocks, dec_blocks, vocab = p.layers("encoder_blocks"), p.layers("decoder_blocks", minimum=0), p.int("vocab")
    drop, pos_drop, ctc_w = p.prob("dropout"), p.prob("positional_dropout"), p.prob("ctc_weight")
    T = _subsampled(_subsampled(frames))
    mel_out = _subsampled(_subsampled(mel))
    if T < 1 or mel_out < 1:
        p.fail("max_frames", f"max_frames and mel_bins must be at least 7 for the {SUBSAMPLING}x subsampling")
    layer_ipu = layer_ipus(p, blocks)
    dtype = p.dtype()

    b = GraphBuilder(name, dtype)
    place = Placement(b, layer_ipu is not None)
    feats = b.input("features", (B, frames, mel))
    targets_in = b.input("targets_in", (B, tokens), "int32")
    targets_out = b.input("targets_out", (B, tokens), "int32")
    feature_lengths = b.input("feature_lengths", (B,), "int32")
    target_lengths = b.input("target_lengths", (B,), "int32")
    # the padding masks (and the decoder's causal one) as additive scores; the example makes them on
    # the IPU from the lengths (a few small ops), here constants
    enc_mask = b.constant("encoder_mask", (B, 1, 1, T))
    dec_mask = b.constant("decoder_mask", (B, 1, tokens, tokens))

    with place.on(layer_ipu[0] if layer_ipu else 0, "frontend"):
        with b.scope("global_cmvn"):
            x = b.cast(feats, "float32")
            x = b.mul(b.sub(x, b.constant("mean", (1, 1, mel), "float32")), b.constant("istd", (1, 1, mel), "float32"))
            x = b.cast(x, dtype)
        with b.scope("subsampling"):
            x = b.reshape(x, (B, 1, frames, mel))
            x = b.relu(b.conv2d(x, d, 3, 2, bias=True, name="conv0"))
            x = b.relu(b.conv2d(x, d, 3, 2, bias=True, name="conv1"))
            x = b.reshape(b.transpose(x, (0, 2, 1, 3)), (B, T, d * mel_out))
            x = b.linear(x, d, name="out")
        with b.scope("pos_enc"):
            x = b.add(b.scale(x, math.sqrt(d)), b.constant("pe", (1, T, d)))
            pos = b.constant("pos_emb", (1, T, d))
            if pos_drop:
                x, pos = b.dropout(x, pos_drop), b.dropout(pos, pos_drop)

    last = 0
    for i in range(blocks):
        last = layer_ipu[i] if layer_ipu else 0
        with place.on(last, f"encoder{i}"), b.scope(f"encoder/block{i}"):
            x = b.op("copy", [x], [b.shape(x)], {"op": "remap"}, name="remap")[0]
            x = b.add(x, b.scale(_ffn(b, b.layernorm(x, LN_EPS, name="norm_ff_macaron"), units, drop, "swish",
                                      "feed_forward_macaron"), 0.5))
            x = b.add(x, _heads_attention(b, b.layernorm(x, LN_EPS, name="norm_mha"), None, heads, enc_mask, drop,
                                          pos=pos, name="self_attn"))
            x = b.add(x, _conv_module(b, b.layernorm(x, LN_EPS, name="norm_conv"), kernel, drop))
            x = b.add(x, b.scale(_ffn(b, b.layernorm(x, LN_EPS, name="norm_ff"), units, drop, "swish",
                                      "feed_forward"), 0.5))
            x = b.layernorm(x, LN_EPS, name="norm_final")

    with place.on(last, "heads"):
        memory = b.layernorm(x, LN_EPS, name="encoder/after_norm")
        with b.scope("ctc"):
            log_probs = b.op("softmax", [b.linear(memory, vocab, name="out")], [(B, T, vocab)],
                             {"axis": -1, "log": True}, name="log_softmax")[0]
            ctc = b.ctc_loss(b.transpose(log_probs, (1, 0, 2)), targets_out, feature_lengths, target_lengths,
                             reduction="sum", reduced_classes=True, name="loss")
        with b.scope("decoder"):
            y = b.embedding(targets_in, b.weight("embed", (vocab, d)))
            y = b.add(b.scale(y, math.sqrt(d)), b.constant("pe", (1, tokens, d)))
            if pos_drop:
                y = b.dropout(y, pos_drop)
            for j in range(dec_blocks):
                with b.scope(f"block{j}"):
                    y = b.add(y, _heads_attention(b, b.layernorm(y, LN_EPS, name="norm1"), None, heads, dec_mask,
                                                  drop, name="self_attn"))
                    y = b.add(y, _heads_attention(b, b.layernorm(y, LN_EPS, name="norm2"), memory, heads, enc_mask,
                                                  drop, name="src_attn"))
                    y = b.add(y, _ffn(b, b.layernorm(y, LN_EPS, name="norm3"), units, drop, "relu",
                                      "feed_forward"))
            logits = b.linear(b.layernorm(y, LN_EPS, name="after_norm"), vocab, name="output_layer")
            att = b.softmax_cross_entropy(b.reshape(logits, (B * tokens, vocab)),
                                          b.reshape(targets_out, (B * tokens,)), name="loss")
        loss = b.add(b.scale(att, 1.0 - ctc_w), b.scale(ctc, ctc_w), name="loss")
    b.graph.loss = loss
    b.output(loss)
    return b.graph
