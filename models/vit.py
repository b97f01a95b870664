"""Vision Transformer (Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words") for image
classification, as Graphcore's PyTorch ViT builds it (graphcore/examples ``vision/vit/pytorch``).

Inputs, in order: ``images`` ((B, 3, image_size, image_size): uint8 with ``eight_bit_io``, else
the model dtype), ``labels`` (int32, (B,)) and, with ``mixup``, ``mixup_lambda`` ((1,), one
coefficient per micro-batch). Outputs: the logits (B, num_labels) and the loss; with
``with_loss=False`` (inference) the logits only.

- Patch embedding: a ``patch x patch`` convolution with stride ``patch`` (3 -> hidden, with bias),
  flattened to (B, patches, hidden); the class token is put in front and the learnt position
  embeddings added ((image_size / patch)^2 + 1 tokens: 197 for B/16 at 224), then dropout.
- Pre-layernorm blocks: x + attention(LN(x)), then x + MLP(LN(x)); Q, K and V are three
  projections (Hugging Face's layout, which both Graphcore models keep); the scores divided by
  sqrt(head_dim) (``models/modules.py`` and Hugging Face alike: a popops divide); LN epsilon 1e-6.
- The encoder's final layernorm, then the class token's row: ``representation_size`` adds the
  pre-logits layer of pre-training (linear + tanh, Graphcore's ``Representation``), then the
  classifier ``hidden -> num_labels`` and the softmax cross-entropy.
- ``dropout`` (``hidden_dropout_prob``, 0.1 in Graphcore's configs) after the embeddings, the
  attention output and the MLP; ``attention_dropout`` (``attention_probs_dropout_prob``: 0 for
  fine-tuning, 0.1 for pre-training) on the attention probabilities; ``ffn_act_dropout`` adds
  the dropout after the GELU of Graphcore's pre-training ``Mlp`` (Hugging Face's has none).
- ``eight_bit_io`` (the examples' ``--byteio``): the images stream as uint8 and are normalised on
  the IPU in fp32 (x / 255, then (x - mean) / std per channel: ``NormalizeToTensor``), then cast
  to fp16.
- ``mixup`` (pre-training): the images are blended with the micro-batch rolled by one sample,
  ``lam * x + (1 - lam) * roll(x)``, on the IPU; the loss is ``lam * CE(labels) + (1 - lam) *
  CE(rolled labels)``, built as one softmax cross-entropy: its gradient with respect to the
  logits is one softmax less a mixed one-hot, the same work; the second term's forward (a
  (B, num_labels) log-softmax gather) and the on-device accuracy are not built (B x num_labels
  values, under 0.1 % of a micro-batch's work).
- ``layers_per_ipu`` (e.g. [3, 3, 3, 3]) places the blocks on consecutive IPUs; the embeddings are
  on IPU 0 (alone with a leading 0) and the final layernorm and the head on the last block's IPU
  (``Embedding --> IPU 0``, ``Head --> IPU 3`` in the examples), so they add no pipeline stage.
- ``recompute_checkpoint_every_layer``: each block's output, the last included, is a recomputation
  checkpoint, as both Graphcore models put one on every layer (``models/pipeline_model.py``); in the
  final pipeline stage PopART then recomputes all the stage's blocks, the forward ops before the
  stage's last checkpoint (``Pipeline::setFinalFwdStageRecomputation``). Default None: on when the
  blocks are pipelined over several IPUs;
  ``mid_checkpoints`` lists blocks that also checkpoint after their attention residual (the
  pre-training model's ``recompute_mid_layers``, [1, 4, 7, 10] in its configs).
- ``gelu``: the GELU's form, ``"tanh"`` (default: popnn's tanh approximation, PopART's Gelu, what PopTorch
  lowers torch's GELU to) or ``"erf"`` (the exact GELU as PopART's GeluErf runs it, popops' GELU_ERF vertex,
  about 8 x the tanh form's cycles in fp16: what PopRT makes of an exported model's erf GELU with its
  ``erf_gelu_pattern`` pass or ``enable_erf_gelu``; ``models._common.gelu_form``).
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement, gelu_form
from .transformer import attention, checkpointed_layers, ffn, layer_ipus

_COMMON = dict(micro_batch=8, image_size=224, patch=16, num_labels=1000, intermediate=None,
               representation_size=None, dropout=0.1, attention_dropout=0.0, ffn_act_dropout=False,
               eight_bit_io=False, mixup=False, layers_per_ipu=None, recompute_checkpoint_every_layer=None,
               mid_checkpoints=None, with_loss=True, dtype="float16", gelu="tanh")
MODELS = {
    "vit-base-16": dict(_COMMON, num_layers=12, hidden=768, heads=12),
    "vit-large-16": dict(_COMMON, num_layers=24, hidden=1024, heads=16),
}
EPS = 1e-6  # the blocks' and the encoder's LayerNorm eps (modules.py Block, Encoder; Hugging Face's ViTConfig)
CHANNELS = 3  # RGB images


def build(name: str, p: Params) -> Graph:
    B, size, patch = p.int("micro_batch"), p.int("image_size"), p.int("patch")
    if size % patch:
        p.fail("patch", f"must divide image_size={size}")
    hidden, heads, layers = p.int("hidden"), p.int("heads"), p.layers("num_layers")
    if hidden % heads:
        p.fail("heads", f"must divide hidden={hidden}")
    intermediate = p.int("intermediate", optional=True) or 4 * hidden
    classes, rep = p.int("num_labels"), p.int("representation_size", optional=True)
    drop, att_drop = p.prob("dropout"), p.prob("attention_dropout")
    act_drop = drop if p.flag("ffn_act_dropout") else 0.0
    layer_ipu = layer_ipus(p, layers)
    checkpoints = checkpointed_layers(p, layers, last=True)
    mid = p.ints("mid_checkpoints", minimum=0, optional=True) or []
    if any(i >= layers for i in mid):
        p.fail("mid_checkpoints", f"block indices must be < num_layers={layers}")
    with_loss, mixup = p.flag("with_loss"), p.flag("mixup")
    if mixup and not with_loss:
        p.fail("mixup", "mixup blends the labels into the loss: it needs with_loss=True")
    dtype = p.dtype()
    tokens = (size // patch) ** 2 + 1

    b = GraphBuilder(name, dtype, gelu=gelu_form(p))
    place = Placement(b, layer_ipu is not None)
    images = b.input("images", (B, CHANNELS, size, size), "uint8" if p.flag("eight_bit_io") else dtype)
    labels = b.input("labels", (B,), "int32") if with_loss else None
    lam = b.input("mixup_lambda", (1,), dtype) if mixup else None

    with place.on(0, "embedding"):
        x = images
        if p.flag("eight_bit_io"):
            with b.scope("normalise"):
                x = b.scale(b.cast(x, "float32"), 1.0 / 255.0)
                # the ImageNet channel means and 1 / standard deviations (dataset/preprocess.py
                # normalization_parameters): constants, only their shapes matter to the cost
                x = b.mul(b.sub(x, b.constant("mean", (1, CHANNELS, 1, 1), "float32")),
                          b.constant("inv_std", (1, CHANNELS, 1, 1), "float32"))
                x = b.cast(x, dtype)
        if mixup:
            with b.scope("mixup"):
                rolled = x if B == 1 else b.concat([b.slice(x, 0, B - 1, B), b.slice(x, 0, 0, B - 1)], 0,
                                                   name="roll")
                x = b.add(rolled, b.mul(b.sub(x, rolled), lam))  # lam x + (1 - lam) roll(x)
        with b.scope("embeddings"):
            x = b.conv2d(x, hidden, patch, patch, bias=True, name="patch_embeddings")
            x = b.transpose(b.reshape(x, (B, hidden, tokens - 1)), (0, 2, 1))  # (B, patches, hidden)
            cls = b.weight("cls_token", (1, 1, hidden))
            x = b.concat([b.op("copy", [cls], [(B, 1, hidden)], name="cls_tokens")[0], x], 1)
            x = b.add(x, b.weight("position_embeddings", (1, tokens, hidden)))
            if drop:
                x = b.dropout(x, drop)

    last = 0
    for i in range(layers):
        last = layer_ipu[i] if layer_ipu else 0
        with place.on(last, f"layer{i}"), b.scope(f"encoder/layer{i}"):
            x = b.add(x, attention(b, b.layernorm(x, EPS, name="attention_norm"), heads, None, drop,
                                   probs_dropout=att_drop, split_qkv=True, divide_scores=True))
            if i in mid:
                b.checkpoint(x)
            x = b.add(x, ffn(b, b.layernorm(x, EPS, name="ffn_norm"), intermediate, drop, act_dropout=act_drop))
            if i in checkpoints:
                b.checkpoint(x)

    with place.on(last, "head"), b.scope("head"):
        x = b.reshape(b.slice(b.layernorm(x, EPS, name="encoder_norm"), 1, 0, 1, name="class_token"),
                      (B, hidden))
        if rep is not None:
            x = b.tanh(b.linear(x, rep, name="representation"))
        logits = b.linear(x, classes, name="classifier")
        if not with_loss:
            b.output(logits)
            return b.graph
        b.output(logits, b.softmax_cross_entropy(logits, labels))
    return b.graph
