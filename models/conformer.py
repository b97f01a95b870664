"""Conformer (Gulati et al. 2020) speech recognition trained with a joint CTC and attention loss,
as Graphcore's PyTorch example builds it (graphcore/examples ``speech/conformer/pytorch``, SDK 3.2:
WeNet's Conformer, ``configs/train.yaml``'s "Conformer-medium").

Inputs, in order: ``features`` ((B, max_frames, mel_bins) fbank frames, the model dtype; the
example's generated data fills every frame), ``targets_in`` and ``targets_out`` (int32,
(B, max_tokens): the decoder's input with <sos> and its labels with <eos>), ``feature_lengths``
and ``target_lengths`` (int32, (B,)). Outputs: the loss, ``(1 - ctc_weight) * attention +
ctc_weight * CTC``.

- Global CMVN (``GlobalMVN``: ``(x - mean) * istd`` per mel bin) in the model dtype: its ``x.float()``
  is cast back down by PopTorch's autocast, which the example enables (``model.autocast``).
- ``Conv2dSubsampling4``: two 3 x 3 stride-2 convolutions (1 -> d, d -> d, bias, ReLU) over
  (frames, mel bins), the (d, mel') channels of each frame flattened and projected to ``d``;
  frames 1220 -> 304. The relative positional encoding scales by sqrt(d) (it adds no table;
  dropout ``positional_dropout``); its position embedding (1, T, d) feeds every block.
- Encoder blocks (macaron): x + 0.5 FFN(LN x); x + MHSA(LN x) with relative positions (WeNet's
  ``RelPositionMultiHeadedAttention`` without ``rel_shift``: Q + u against K and Q + v against the
  projected positions, two score matmuls added; the padding mask applied as the example's
  ``attention.py`` does: scores times the 0/1 mask plus (mask - 1) x 1e3, softmax, times the mask);
  x + Conv(LN x); x + 0.5 FFN(LN x); LN. FFNs are d -> ``linear_units`` -> d with Swish, which the
  example writes as ``x * sigmoid(x)`` (two ops); the convolution module runs in (B, d, T): a 1 x 1
  convolution to 2d, GLU, a depthwise 1-D convolution of ``kernel`` taps, LayerNorm over the
  channels (the example's change from batch norm; transposed to normalise and back), Swish and a
  1 x 1 convolution. Each block starts and ends with the example's ``RemapCE`` custom op in training
  (the tensor copied into a new tile layout, grain 16: ``GraphBuilder.remap``), as each decoder block
  does after its self-attention and at its end. Dropout ``dropout`` after each FFN, attention and
  convolution module, as WeNet.
- CTC branch: linear d -> vocab, log-softmax, CTC (popnn, ``enableReducedClassesInLabel``).
- ``ctc_weight`` (the config's ``loss_weight: ctc_weight``, 0.3) from 0 to 1: the example builds both
  branches whatever the weight (its ``Conformer.forward`` computes both losses, returns them beside the
  weighted sum and checks no range, unlike WeNet, which skips a branch of weight 0), so at 0 (attention
  only) and 1 (CTC only) both are still built and priced, as the example runs them.
- Decoder: the targets' embedding (vocab x d) with positional encoding, ``decoder_blocks``
  pre-LN blocks (causal self-attention, attention over the encoder output, ReLU FFN), LN and the
  output linear d -> vocab. The label-smoothing loss (KL divergence to the smoothed one-hot) is
  built as one softmax cross-entropy over the (B x tokens, vocab) logits: its gradient is the
  same work (a softmax less a smoothed one-hot).
- ``layers_per_ipu`` (e.g. [2, 4, 4, 2]: the SDK 2.6 example's pipeline ``encoder.encoders__2``,
  ``__6``, ``__10`` on IPUs 1, 2, 3; SDK 3.0 and later's ``__11`` gives [2, 4, 5, 1]) places the encoder
  blocks; the front end is on IPU 0 (alone with a leading 0, as [0, 4, 4, 4]), the CTC branch, decoder
  and losses on the last block's IPU. The example sets no recomputation
  checkpoint, so a pipelined stage recomputes from its stashed inputs.

Not built: the ops that make the padding masks from the lengths on the IPU (the masks are constants
added to the scores); the CTC loss's division by the batch (a scalar).
"""

from __future__ import annotations

import math
import numbers

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
        scores = b.div(scores, b.constant("sqrt_dk", (1,)), name="scale")  # attention.py: / math.sqrt(self.d_k)
        if mask is not None:  # attention.py: scores *= m; scores += (m - 1) * 1e3; softmax; * m
            keep, rev = mask
            scores = b.add(b.mul(scores, keep, name="mask_keep"), rev, name="mask")
            probs = b.mul(b.softmax(scores), keep, name="mask_probs")
        else:
            probs = b.softmax(scores)
        ctx = b.matmul(probs, v, name="context")
        out = b.linear(b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (B, Tq, d)), d, name="output")
        return b.dropout(out, drop) if drop else out


def _ffn(b: GraphBuilder, x: str, units: int, drop: float, act: str, name: str) -> str:
    d = b.shape(x)[-1]
    with b.scope(name):
        y = b.linear(x, units, name="w_1")
        y = _swish(b, y) if act == "swish" else b.relu(y)
        if drop:
            y = b.dropout(y, drop)
        y = b.linear(y, d, name="w_2")
        return b.dropout(y, drop) if drop else y


def _swish(b: GraphBuilder, x: str) -> str:
    """The example's Swish (``swish.py``): ``x * sigmoid(x)``, two ops."""
    return b.mul(x, b.sigmoid(x), name="swish")


def _conv_module(b: GraphBuilder, x: str, kernel: int, drop: float) -> str:
    """Pointwise conv to 2d, GLU, depthwise conv (``kernel`` taps, same padding), LayerNorm over
    the channels, Swish, pointwise conv, in (B, d, T) as the example runs it (``convolution.py``:
    transposed in and out; the 1 x 1 Conv1d layers are poplin convolutions, here of height 1; its
    ``LayerNorm(dim=-2)`` transposes to normalise the channels and back)."""
    B, T, d = b.shape(x)
    with b.scope("conv_module"):
        y = b.reshape(b.transpose(x, (0, 2, 1)), (B, d, 1, T))  # Conv1d as a 2-D conv of height 1
        y = b.conv2d(y, 2 * d, (1, 1), 1, 0, bias=False, name="pointwise_conv1")
        y = b.mul(b.slice(y, 1, 0, d, name="glu_a"), b.sigmoid(b.slice(y, 1, d, 2 * d, name="glu_b")), name="glu")
        y = b.conv2d(y, d, (1, kernel), 1, (0, (kernel - 1) // 2), groups=d, name="depthwise_conv")
        y = b.transpose(b.layernorm(b.transpose(b.reshape(y, (B, d, T)), (0, 2, 1)), LN_EPS, name="norm"),
                        (0, 2, 1))
        y = _swish(b, b.reshape(y, (B, d, 1, T)))
        y = b.conv2d(y, d, (1, 1), 1, 0, bias=False, name="pointwise_conv2")
        y = b.transpose(b.reshape(y, (B, d, T)), (0, 2, 1))
        return b.dropout(y, drop) if drop else y


def build(name: str, p: Params) -> Graph:
    B, frames, mel, tokens = p.int("micro_batch"), p.int("max_frames"), p.int("mel_bins"), p.int("max_tokens")
    d, heads, units, kernel = p.int("d_model"), p.int("heads"), p.int("linear_units"), p.int("kernel")
    if d % heads:
        p.fail("heads", f"must divide d_model={d}")
    if kernel % 2 == 0:
        p.fail("kernel", "must be odd (the depthwise convolution pads (kernel - 1) / 2 each side)")
    blocks, dec_blocks, vocab = p.layers("encoder_blocks"), p.layers("decoder_blocks", minimum=0), p.int("vocab")
    drop, pos_drop, ctc_w = p.prob("dropout"), p.prob("positional_dropout"), p["ctc_weight"]
    if isinstance(ctc_w, bool) or not isinstance(ctc_w, numbers.Real) or not 0 <= ctc_w <= 1:
        p.fail("ctc_weight", "expected a weight from 0 to 1 (the loss is (1 - ctc_weight) x attention + "
                             "ctc_weight x CTC)")
    T = _subsampled(_subsampled(frames))
    mel_out = _subsampled(_subsampled(mel))
    for key, n in (("max_frames", T), ("mel_bins", mel_out)):
        if n < 1:
            p.fail(key, f"must be at least 7 for the {SUBSAMPLING}x subsampling (two unpadded 3 x 3 stride-2 "
                        "convolutions)")
    layer_ipu = layer_ipus(p, blocks, f"encoder_blocks={blocks}", first="the front end")
    dtype = p.dtype()

    b = GraphBuilder(name, dtype)
    place = Placement(b, layer_ipu is not None)
    feats = b.input("features", (B, frames, mel))
    targets_in = b.input("targets_in", (B, tokens), "int32")
    targets_out = b.input("targets_out", (B, tokens), "int32")
    feature_lengths = b.input("feature_lengths", (B,), "int32")
    target_lengths = b.input("target_lengths", (B,), "int32")
    # the padding masks (and the decoder's causal one), each as the 0/1 mask in the scores' dtype and
    # its (m - 1) * 1e3; the example makes them on the IPU from the lengths (a few small ops), here
    # constants
    enc_mask = (b.constant("encoder_mask", (B, 1, 1, T)), b.constant("encoder_mask_rev", (B, 1, 1, T)))
    dec_mask = (b.constant("decoder_mask", (B, 1, tokens, tokens)),
                b.constant("decoder_mask_rev", (B, 1, tokens, tokens)))

    with place.on(0, "frontend"):
        with b.scope("global_cmvn"):  # in the model dtype: PopTorch's autocast casts its x.float() down
            x = b.mul(b.sub(feats, b.constant("mean", (1, 1, mel))), b.constant("istd", (1, 1, mel)))
        with b.scope("subsampling"):
            x = b.reshape(x, (B, 1, frames, mel))
            x = b.relu(b.conv2d(x, d, 3, 2, bias=True, name="conv0"))
            x = b.relu(b.conv2d(x, d, 3, 2, bias=True, name="conv1"))
            x = b.reshape(b.transpose(x, (0, 2, 1, 3)), (B, T, d * mel_out))
            x = b.linear(x, d, name="out")
        with b.scope("pos_enc"):  # RelPositionalEncoding scales x; the positions go to the blocks
            x = b.scale(x, math.sqrt(d))
            pos = b.constant("pos_emb", (1, T, d))
            if pos_drop:
                x, pos = b.dropout(x, pos_drop), b.dropout(pos, pos_drop)

    last = 0
    for i in range(blocks):
        last = layer_ipu[i] if layer_ipu else 0
        with place.on(last, f"encoder{i}"), b.scope(f"encoder/block{i}"):
            x = b.remap(x, name="remap_in")
            x = b.add(x, b.scale(_ffn(b, b.layernorm(x, LN_EPS, name="norm_ff_macaron"), units, drop, "swish",
                                      "feed_forward_macaron"), 0.5))
            x = b.add(x, _heads_attention(b, b.layernorm(x, LN_EPS, name="norm_mha"), None, heads, enc_mask, drop,
                                          pos=pos, name="self_attn"))
            x = b.add(x, _conv_module(b, b.layernorm(x, LN_EPS, name="norm_conv"), kernel, drop))
            x = b.add(x, b.scale(_ffn(b, b.layernorm(x, LN_EPS, name="norm_ff"), units, drop, "swish",
                                      "feed_forward"), 0.5))
            x = b.remap(b.layernorm(x, LN_EPS, name="norm_final"), name="remap_out")

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
                    y = b.remap(y, name="remap_mid")
                    y = b.add(y, _heads_attention(b, b.layernorm(y, LN_EPS, name="norm2"), memory, heads, enc_mask,
                                                  drop, name="src_attn"))
                    y = b.remap(b.add(y, _ffn(b, b.layernorm(y, LN_EPS, name="norm3"), units, drop, "relu",
                                              "feed_forward")), name="remap_out")
            logits = b.linear(b.layernorm(y, LN_EPS, name="after_norm"), vocab, name="output_layer")
            att = b.softmax_cross_entropy(b.reshape(logits, (B * tokens, vocab)),
                                          b.reshape(targets_out, (B * tokens,)), name="loss")
        loss = b.add(b.scale(att, 1.0 - ctc_w), b.scale(ctc, ctc_w), name="loss")
    b.graph.loss = loss
    b.output(loss)
    return b.graph
