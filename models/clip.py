"""CLIP (Radford et al. 2021, "Learning Transferable Visual Models From Natural Language Supervision"),
its ViT image encoder and its text encoder scoring a batch of images against a batch of texts, as
OpenAI's ``clip`` package builds it (``clip/model.py``: ``VisionTransformer``, ``Transformer``,
``CLIP.encode_image``, ``encode_text``, ``forward``) and PopRT's CLIP benchmark exports it (one ONNX
graph of ``model(image, text)``).

Inputs, in order: ``images`` ((B, 3, image_size, image_size), the model dtype) and ``text`` (int32,
(texts, context): token ids, each text's end-of-text token the largest id). Outputs: the logits per
image (B, texts) and per text (texts, B). Inference only.

- Image encoder: a ``patch x patch`` convolution with stride ``patch`` (3 -> vision_width, no bias),
  the class token in front, the learnt position embeddings added, a layer norm (``ln_pre``), then
  ``vision_layers`` pre-layernorm residual blocks; the class token's row through ``ln_post`` and the
  projection vision_width -> embed_dim (no bias).
- Text encoder: the token embedding (vocab, text_width) gathered at the ids, the position embeddings
  added, ``text_layers`` blocks with a causal mask (a constant (context, context) added to the scores),
  ``ln_final``; each text's row at its end-of-text token (``x[arange(texts), text.argmax(-1)]``: an
  argmax and one gather of ``texts`` rows) projected text_width -> embed_dim (no bias).
- A block: x + attention(ln_1(x)) (``nn.MultiheadAttention``: one fused QKV projection with bias, the
  output projection with bias), then x + MLP(ln_2(x)): linear 4x wide, QuickGELU (x * sigmoid(1.702 x):
  a scale, a sigmoid and a multiply), linear back.
- Both features divided by their L2 norms; logits = exp(logit_scale) (a constant at inference) x
  image features @ text featuresᵀ, and their transpose per text.

``clip-vit-b-32`` is OpenAI's ``ViT-B/32`` (151.3 M parameters): 224 x 224 images, patch 32, a 768-wide
12-layer image encoder of 12 heads, a 512-wide 12-layer text encoder of 8 heads over 77 tokens, a
49,408-token vocabulary, 512-wide joint features; ``texts`` is how many texts one call scores (100 in
PopRT's benchmark).

``clip-text-vit-l-14`` is the text encoder alone as Hugging Face's ``CLIPTextModel`` builds it
(``modeling_clip.py``; Stable Diffusion v1's ``text_encoder``, ``openai/clip-vit-large-patch14``'s text
tower: 123.06 M parameters): 77 tokens of width 768 through 12 causal layers of 12 heads with three
projections Q, K, V (Q scaled before the scores' matmul), QuickGELU MLPs 4x wide, ``final_layer_norm``;
outputs the last hidden state (B, 77, 768) and the pooled end-of-text rows (B, 768), no projection.
Input: ``input_ids`` (int32, (B, context)).
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import Params, l2_normalised
from .transformer import attention

MODELS = {  # clip/model.py build_model for ViT-B/32 (its state dict's shapes)
    "clip-vit-b-32": dict(micro_batch=1, texts=100, context=77, image_size=224, patch=32, vision_width=768,
                          vision_layers=12, vision_heads=12, text_width=512, text_layers=12, text_heads=8,
                          vocab=49408, embed_dim=512, dtype="float16"),
}
TEXT_MODELS = {  # transformers' CLIPTextConfig of openai/clip-vit-large-patch14
    "clip-text-vit-l-14": dict(micro_batch=1, context=77, text_width=768, text_layers=12, text_heads=12,
                               vocab=49408, dtype="float16"),
}
MODELS.update(TEXT_MODELS)
EPS = 1e-5  # nn.LayerNorm's default, which clip/model.py's LayerNorm keeps
CHANNELS = 3  # RGB images
QUICK_GELU = 1.702  # QuickGELU: x * sigmoid(1.702 x)


def _block(b: GraphBuilder, x: str, heads: int, mask: str | None) -> str:
    """ResidualAttentionBlock: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""
    x = b.add(x, attention(b, b.layernorm(x, EPS, name="ln_1"), heads, mask, name="attn"))
    return b.add(x, _mlp(b, b.layernorm(x, EPS, name="ln_2")))


def _mlp(b: GraphBuilder, x: str) -> str:
    """Linear 4x wide, QuickGELU (x * sigmoid(1.702 x)), linear back."""
    width = b.shape(x)[-1]
    with b.scope("mlp"):
        y = b.linear(x, 4 * width, name="c_fc")
        y = b.mul(y, b.sigmoid(b.scale(y, QUICK_GELU)), name="quick_gelu")
        return b.linear(y, width, name="c_proj")


def _end_of_text_rows(b: GraphBuilder, x: str, ids: str) -> str:
    """``x[arange(B), ids.argmax(-1)]``: one flat index per text, then one gather of B rows."""
    batch, context, width = b.shape(x)
    with b.scope("eot"):
        eot = b.reduce(ids, [-1], "reduce_max", name="argmax")  # priced as the max it searches for
        row = b.add(eot, b.constant("row_offsets", (batch,), "int32"), name="flat_index")
        return b.embedding(row, b.reshape(x, (batch * context, width)), name="gather")


def _build_text(name: str, p: Params) -> Graph:
    """Hugging Face's CLIPTextModel: the last hidden state and the pooled end-of-text rows."""
    B, context = p.int("micro_batch"), p.int("context")
    width, layers, heads, vocab = p.int("text_width"), p.layers("text_layers"), p.int("text_heads"), p.int("vocab")
    if width % heads:
        p.fail("text_heads", f"must divide its width {width}")
    b = GraphBuilder(name, p.dtype())
    ids = b.input("input_ids", (B, context), "int32")
    with b.scope("embeddings"):
        x = b.add(b.embedding(ids, b.weight("token_embedding", (vocab, width))),
                  b.weight("position_embedding", (context, width)))
    causal = b.constant("causal_mask", (1, 1, context, context))  # -inf above the diagonal
    for i in range(layers):
        with b.scope(f"encoder/layers{i}"):
            x = b.add(x, attention(b, b.layernorm(x, EPS, name="layer_norm1"), heads, causal, name="self_attn",
                                   split_qkv=True, pre_scale=True))
            x = b.add(x, _mlp(b, b.layernorm(x, EPS, name="layer_norm2")))
    x = b.layernorm(x, EPS, name="final_layer_norm")
    b.output(x, _end_of_text_rows(b, x, ids))
    return b.graph


def build(name: str, p: Params) -> Graph:
    if name in TEXT_MODELS:
        return _build_text(name, p)
    B, texts, context = p.int("micro_batch"), p.int("texts"), p.int("context")
    size, patch = p.int("image_size"), p.int("patch")
    if size % patch:
        p.fail("patch", f"must divide image_size={size}")
    vw, vl, vh = p.int("vision_width"), p.layers("vision_layers"), p.int("vision_heads")
    tw, tl, th = p.int("text_width"), p.layers("text_layers"), p.int("text_heads")
    for width, heads, what in ((vw, vh, "vision_heads"), (tw, th, "text_heads")):
        if width % heads:
            p.fail(what, f"must divide its width {width}")
    vocab, embed = p.int("vocab"), p.int("embed_dim")
    dtype = p.dtype()
    tokens = (size // patch) ** 2 + 1

    b = GraphBuilder(name, dtype)
    images = b.input("images", (B, CHANNELS, size, size), dtype)
    text = b.input("text", (texts, context), "int32")

    with b.scope("visual"):
        x = b.conv2d(images, vw, patch, patch, name="conv1")
        x = b.transpose(b.reshape(x, (B, vw, tokens - 1)), (0, 2, 1))  # (B, patches, width)
        cls = b.op("copy", [b.weight("class_embedding", (1, 1, vw))], [(B, 1, vw)], name="class_tokens")[0]
        x = b.add(b.concat([cls, x], 1), b.weight("positional_embedding", (1, tokens, vw)))
        x = b.layernorm(x, EPS, name="ln_pre")
        for i in range(vl):
            with b.scope(f"transformer/resblocks{i}"):
                x = _block(b, x, vh, None)
        x = b.reshape(b.slice(x, 1, 0, 1, name="class_token"), (B, vw))
        image = b.matmul(b.layernorm(x, EPS, name="ln_post"), b.weight("proj", (vw, embed)), name="proj")

    with b.scope("text"):
        x = b.embedding(text, b.weight("token_embedding", (vocab, tw)))
        x = b.add(x, b.weight("positional_embedding", (context, tw)))
        causal = b.constant("causal_mask", (1, 1, context, context))  # -inf above the diagonal
        for i in range(tl):
            with b.scope(f"transformer/resblocks{i}"):
                x = _block(b, x, th, causal)
        x = _end_of_text_rows(b, b.layernorm(x, EPS, name="ln_final"), text)
        features = b.matmul(x, b.weight("text_projection", (tw, embed)), name="text_projection")

    with b.scope("logits"):
        image, features = l2_normalised(b, image), l2_normalised(b, features)
        per_image = b.scale(b.matmul(image, b.transpose(features, (1, 0)), name="similarity"), 100.0)
        b.output(per_image, b.transpose(per_image, (1, 0), name="per_text"))
    return b.graph
