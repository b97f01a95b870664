"""Swin Transformer (Liu et al. 2021, "Hierarchical Vision Transformer using Shifted Windows") for
image classification, as Graphcore's PyTorch port builds it (graphcore/examples
``vision/swin/pytorch``, ``models/swin_transformer.py`` and ``models/build.py``, SDK 3.0).

Inputs, in order: ``images`` ((B, 3, image_size, image_size), the model dtype) and ``targets``
((B, num_labels) float32: the soft labels mixup makes on the host, ``SoftTargetCrossEntropy``).
Outputs: the logits (B, num_labels) and the loss; with ``with_loss=False`` the logits only.

- Patch embedding: a ``patch x patch`` convolution with stride ``patch`` (3 -> embed_dim, with
  bias), flattened and transposed to (B, tokens, C), then a layer norm (``patch_norm``).
- Four stages of ``depths`` blocks at resolutions image_size / patch / 2^i, C x 2^i channels and
  ``heads`` heads; after each stage but the last, patch merging: each 2 x 2 neighbourhood's four
  tokens concatenated (4C), a layer norm and a linear 4C -> 2C without bias.
- A block: x + attn(LN(x)), then x + MLP(LN(x)) (GELU, ratio ``mlp_ratio``), each branch scaled by
  stochastic depth (timm's DropPath: rates rising linearly from 0 to ``drop_path`` over the blocks;
  none with ``with_loss=False``, the inference model, where DropPath is the identity).
  Odd blocks shift the map by window // 2 first (the port's two slice-and-concat pairs instead of
  ``torch.roll``) and back after, and add the shifted windows' mask (-100 across regions) to the
  scores; a stage whose map is no larger than a window uses one unshifted window.
- Window attention on ``window x window`` tokens, padded to a multiple of 8 (49 -> 56: the port's
  ``padding_aligned``): the fused QKV projection (with bias) times its row mask (zero on the pad
  rows), Q scaled by head_dim^-0.5, scores plus the relative position bias (a learnt
  ((2w-1)^2, heads) table gathered at the (w^2, w^2) index, padded) plus the pad mask (-65450 on the
  pad columns), softmax, times the mask zeroing the pad rows and columns, the product with V, the
  output projection, and the pad rows dropped. The port's masks are built for window 7 only; for
  another window they are ones / zeros of shape (1,), still multiplied and added.
- The port's ``RemapCE`` custom op (``custom_ops/remap_tensor_ce.cpp``: a Poplar Copy of the tensor
  into a new tile mapping, grains spread over all tiles) follows the permutes of the window
  partition and reverse, of QKV into heads, of the patch embedding and patch merging, and stands on
  its own before each block, after the shift, around the MLP and after the QKV / output
  projections and the scores: each a layout change through the exchange (``remap``; a permute it
  follows is that op). Its gradient remaps too. Where the port keeps the forward layout
  (``fwd_clone_layout``: PopART runs the op in place) only the backward copies.
- The head: a layer norm, the mean over the tokens (``AdaptiveAvgPool1d``), the classifier
  (num_features -> num_labels), and the soft-target cross-entropy on float32 logits.
- ``layers_per_ipu`` (the configs' ``LAYERS_PER_IPU``, e.g. [2, 3, 5, 2] for the 12 blocks of Swin-T)
  places the blocks on consecutive IPUs (``set_pipeline``: a ``poptorch.BeginBlock`` on every
  block); the patch embedding is on IPU 0 (alone with a leading 0), each patch merging on its stage's
  last block's IPU, the head on the last block's; the blocks are the placement's units ``layer0``,
  ``layer1``, ... (a stage's patch merging goes with its last block). The port sets no recomputation
  checkpoint (``use_recompute`` False), so a pipelined stage recomputes from its stashed inputs;
  ``recompute_checkpoint_every_layer`` (default False; True or False only, not BERT's None) checkpoints
  every block's output but the last, as the zoo's BERT does (what ``ipusim plan`` tries).

- ``fp8_matmuls`` (a ``dtype="float16"`` model) runs the model as PopRT's Converter with ``precision`` fp8
  converts it (ByteMLPerf's Swin-L): every layer with weights, the patch embedding's convolution, the
  attention's QKV and output projections, the MLP, the patch mergings' reductions and the head, casts its
  input to FP8 and keeps its weights in FP8, its result fp16; the attention's two products of activations
  stay fp16. It needs an IPU with FP8 (the ``c600`` system), and half partials for the quarter AMP (with
  float partials poplin casts the FP8 operands to fp16 on the tile).
- ``gelu``: the GELU's form, ``"tanh"`` (default: popnn's tanh approximation, PopART's Gelu, what PopTorch
  lowers torch's GELU to) or ``"erf"`` (the exact GELU as PopART's GeluErf runs it, popops' GELU_ERF vertex,
  about 8 x the tanh form's cycles in fp16: what PopRT makes of an exported model's erf GELU with its
  ``erf_gelu_pattern`` pass or ``enable_erf_gelu``; ``models._common.gelu_form``).

Not built: dropout (the configs' ``DROP_RATE`` and attention dropout are 0).
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement, gelu_form
from .transformer import checkpointed_layers, layer_ipus

_COMMON = dict(micro_batch=4, image_size=224, patch=4, window=7, mlp_ratio=4, num_labels=1000, drop_path=0.2,
               layers_per_ipu=None, recompute_checkpoint_every_layer=False, with_loss=True, dtype="float16",
               fp8_matmuls=False, gelu="tanh")
MODELS = {  # configs/configs.yaml MODEL.SWIN: EMBED_DIM, DEPTHS, NUM_HEADS (WINDOW_SIZE 7, PATCH_SIZE 4)
    "swin-tiny": dict(_COMMON, embed_dim=96, depths=[2, 2, 6, 2], heads=[3, 6, 12, 24]),
    "swin-base": dict(_COMMON, embed_dim=128, depths=[2, 2, 18, 2], heads=[4, 8, 16, 32]),
    "swin-large": dict(_COMMON, embed_dim=192, depths=[2, 2, 18, 2], heads=[6, 12, 24, 48]),
}
EPS = 1e-5  # nn.LayerNorm's default eps, every norm of the port
CHANNELS = 3  # RGB images
ALIGN = 8  # padding_aligned pads a window's tokens to a multiple of 8


def _permute_remap(b: GraphBuilder, x: str, perm: tuple[int, ...]) -> str:
    """A permute followed by RemapCE: one copy into the new layout (PopART's transpose is a view)."""
    return b.transpose(x, perm, name="remap")


def _pad_to(b: GraphBuilder, x: str, axis: int, size: int) -> str:
    """Zeros appended along ``axis`` up to ``size`` (popops::pad: views of the input and a constant)."""
    shape = list(b.shape(x))
    axis %= len(shape)
    if shape[axis] == size:
        return x
    n, shape[axis] = shape[axis], size
    return b.op("pad", [x], [tuple(shape)], {"axis": axis, "regions": [(0, n)]}, name="pad")[0]


def _drop_path(b: GraphBuilder, x: str, rate: float, name: str) -> str:
    """timm 0.4.5's DropPath in training (the port's pinned timm): a per-sample 0/1 mask drawn as
    ``floor(keep + rand(B, 1, 1))``, the branch divided by ``keep`` and multiplied by the mask."""
    if rate <= 0:
        return x
    first = len(b.graph.ops)
    with b.scope(name):
        dtype = b.dtype_of(x)
        uniform = b.op("random_uniform", [], [(b.shape(x)[0], 1, 1)], name="rand", out_dtypes=[dtype])[0]
        mask = b.unary("floor", b.add(uniform, b.constant("keep_prob", (), dtype)))
        out = b.mul(b.scale(x, 1.0 / (1.0 - rate)), mask)
    for op in b.graph.ops[first:]:  # the identity in eval mode: an inference run of this graph prices none of them
        op.attrs["training_only"] = True
    return out


def _dense(b: GraphBuilder, x: str, features: int, fp8: bool, **kwargs) -> str:
    """``b.linear``; with ``fp8`` its input cast to FP8 first (its weights in FP8, its result fp16)."""
    if fp8:
        x = b.cast(x, "float8", name=f"{kwargs.get('name', 'linear')}/to_fp8")
    return b.linear(x, features, **kwargs)


def _window_attention(b: GraphBuilder, x: str, heads: int, window: int, shift_windows: int, fp8: bool) -> str:
    """WindowAttention.forward on ``x`` (B_, N, C), N = window^2; ``shift_windows``: the windows per
    image whose shifted mask is added (0: an unshifted block); ``fp8``: its projections in FP8."""
    B_, N, C = b.shape(x)
    Np, d = -(-N // ALIGN) * ALIGN, C // heads
    # the port's masks exist for window 7 only; otherwise (1,) ones and zeros
    qkv_mask, pad_mask = ((Np, 3 * C), (Np, Np)) if window == 7 else ((1,), (1,))
    with b.scope("attn"):
        x = b.remap(_pad_to(b, x, 1, Np))
        qkv = b.remap(_dense(b, x, 3 * C, fp8, name="qkv"))
        qkv = b.mul(qkv, b.constant("qkv_mask", qkv_mask))
        qkv = b.remap(qkv, inplace=True)
        qkv = _permute_remap(b, b.reshape(qkv, (B_, Np, 3, heads, d)), (2, 0, 3, 1, 4))  # (3, B_, heads, Np, d)
        q, k, v = (b.reshape(b.slice(qkv, 0, i, i + 1), (B_, heads, Np, d)) for i in range(3))
        q = b.remap(b.scale(q, d ** -0.5), inplace=True)
        k_t = b.reshape(k, (B_, heads, d, Np), name="k_transposed")  # k.transpose(-2, -1): a view the matmul reads
        scores = b.remap(b.matmul(q, k_t, name="scores"))
        with b.scope("relative_position_bias"):
            table = b.weight("table", ((2 * window - 1) ** 2, heads))
            bias = b.embedding(b.constant("index", (N * N,), "int32"), table)
            bias = b.transpose(b.reshape(bias, (N, N, heads)), (2, 0, 1))  # .permute(2, 0, 1).contiguous()
            bias = b.remap(_pad_to(b, bias, 2, Np))
            bias = b.remap(_pad_to(b, bias, 1, Np))
        scores = b.add(scores, bias)
        if shift_windows:
            with b.scope("shift_mask"):
                mask = b.constant("mask", (shift_windows, N, N))
                mask = b.remap(_pad_to(b, b.remap(_pad_to(b, mask, 2, Np)), 1, Np))
                per_image = (B_ // shift_windows, shift_windows, heads, Np, Np)
                scores = b.reshape(b.add(b.reshape(scores, per_image),
                                         b.reshape(mask, (1, shift_windows, 1, Np, Np))), (B_, heads, Np, Np))
        scores = b.add(scores, b.constant("mask0", pad_mask))
        probs = b.mul(b.softmax(scores), b.constant("mask1", pad_mask))
        probs = b.remap(probs, inplace=True)
        out = b.matmul(probs, v, name="context")  # (B_, heads, Np, d)
        out = b.reshape(b.transpose(out, (0, 2, 1, 3)), (B_, Np, C))
        out = b.remap(_dense(b, out, C, fp8, name="proj"))
        return b.slice(out, 1, 0, N)


def _block(b: GraphBuilder, x: str, res: int, heads: int, window: int, shift: int, rate: float, mlp: int,
           fp8: bool) -> str:
    """SwinTransformerBlock.forward on ``x`` (B, res^2, C); ``rate``: its stochastic depth (both branches);
    ``fp8``: its linear layers in FP8."""
    B, L, C = b.shape(x)
    shortcut = x
    y = b.reshape(b.layernorm(x, EPS, name="norm1"), (B, res, res, C))
    if shift:  # the port's roll: two slice-and-concat pairs (views), then RemapCE
        y = b.concat([b.slice(y, 1, shift, res), b.slice(y, 1, 0, shift)], 1)
        y = b.remap(b.concat([b.slice(y, 2, shift, res), b.slice(y, 2, 0, shift)], 2))
    n = res // window
    y = _permute_remap(b, b.reshape(y, (B, n, window, n, window, C)), (0, 1, 3, 2, 4, 5))  # window_partition
    y = _window_attention(b, b.reshape(y, (B * n * n, window * window, C)), heads, window,
                          n * n if shift else 0, fp8)
    y = _permute_remap(b, b.reshape(y, (B, n, n, window, window, C)), (0, 1, 3, 2, 4, 5))  # window_reverse
    y = b.reshape(y, (B, res, res, C))
    if shift:  # the reverse roll (views)
        y = b.concat([b.slice(y, 1, res - shift, res), b.slice(y, 1, 0, res - shift)], 1)
        y = b.concat([b.slice(y, 2, res - shift, res), b.slice(y, 2, 0, res - shift)], 2)
    y = b.reshape(b.remap(y), (B, L, C))
    x = b.add(shortcut, _drop_path(b, y, rate, "drop_path_attn"))
    y = b.remap(b.layernorm(x, EPS, name="norm2"), inplace=True)
    with b.scope("mlp"):
        y = _dense(b, b.gelu(_dense(b, y, mlp, fp8, name="fc1")), C, fp8, name="fc2")
    return b.add(x, _drop_path(b, b.remap(y), rate, "drop_path_mlp"))


def _patch_merging(b: GraphBuilder, x: str, res: int, fp8: bool) -> str:
    """PatchMerging.forward: (B, res^2, C) -> (B, (res/2)^2, 2C); ``fp8``: its reduction in FP8."""
    B, _, C = b.shape(x)
    with b.scope("downsample"):
        y = _permute_remap(b, b.reshape(x, (B, res // 2, 2, res // 2, 2, C)), (0, 1, 3, 4, 2, 5))
        y = b.layernorm(b.reshape(y, (B, (res // 2) ** 2, 4 * C)), EPS, name="norm")
        return _dense(b, y, 2 * C, fp8, bias=False, name="reduction")


def build(name: str, p: Params) -> Graph:
    B, size, patch, window = p.int("micro_batch"), p.int("image_size"), p.int("patch"), p.int("window")
    C0, classes, ratio = p.int("embed_dim"), p.int("num_labels"), p.int("mlp_ratio")
    depths, heads = p.ints("depths"), p.ints("heads")
    if len(heads) != len(depths):
        p.fail("heads", f"expected one head count per stage ({len(depths)} stages in depths={depths})")
    if size % patch:
        p.fail("patch", f"must divide image_size={size}")
    res0 = size // patch
    if res0 % 2 ** (len(depths) - 1):
        p.fail("image_size", f"the patch grid ({res0} x {res0}) must halve {len(depths) - 1} times for the "
                             "patch mergings between stages")
    for i, h in enumerate(heads):
        if (C0 * 2 ** i) % h:
            p.fail("heads", f"stage {i} has {C0 * 2 ** i} channels, not a multiple of its {h} heads")
        res = res0 // 2 ** i
        if res > window and res % window:
            p.fail("window", f"stage {i}'s {res} x {res} map is not a whole number of {window} x {window} windows")
    blocks = sum(depths)
    block_ipu = layer_ipus(p, blocks, f"the {blocks} blocks of depths={depths}", first="the patch embedding")
    if p["recompute_checkpoint_every_layer"] is None:  # checkpointed_layers would read None as "when pipelined"
        p.fail("recompute_checkpoint_every_layer", "expected True or False (default False: the port sets no "
                                                   "recomputation checkpoint); None, \"on when pipelined\" in BERT, "
                                                   "GPT-2 and ViT, is not a value of Swin's")
    checkpoints = checkpointed_layers(p, blocks)
    top = p["drop_path"]
    if isinstance(top, bool) or not isinstance(top, (int, float)) or not 0 <= top < 1:
        p.fail("drop_path", "expected a rate in [0, 1)")
    with_loss, dtype, fp8 = p.flag("with_loss"), p.dtype(), p.flag("fp8_matmuls")
    if not with_loss:  # the inference model (eval mode, as PopRT's exported one): DropPath is the identity
        if p.given.get("drop_path", 0) > 0:
            p.fail("drop_path", "stochastic depth only trains: with_loss=False builds the inference model, where "
                                "DropPath is the identity; give drop_path=0 or leave it out")
        top = 0.0
    # torch.linspace(0, drop_path, blocks): each block's rate
    rates = [top * k / (blocks - 1) if blocks > 1 else 0.0 for k in range(blocks)]
    if fp8 and dtype != "float16":
        p.fail("fp8_matmuls", "converts a dtype='float16' model (PopRT's precision fp8); give dtype='float16'")

    b = GraphBuilder(name, dtype, gelu=gelu_form(p))
    place = Placement(b, block_ipu is not None)
    block_ipu = block_ipu or [0] * blocks
    images = b.input("images", (B, CHANNELS, size, size), dtype)
    targets = b.input("targets", (B, classes), "float32") if with_loss else None

    with place.on(0, "patch_embed"), b.scope("patch_embed"):
        x = b.conv2d(b.cast(images, "float8", name="proj/to_fp8") if fp8 else images, C0, patch, patch, bias=True,
                     name="proj")
        x = _permute_remap(b, b.reshape(x, (B, C0, res0 * res0)), (0, 2, 1))
        x = b.layernorm(x, EPS, name="norm")

    k, ipu = 0, 0
    for i, depth in enumerate(depths):
        res = res0 // 2 ** i
        win = min(window, res)  # a map no larger than a window is one unshifted window
        for j in range(depth):
            ipu = block_ipu[k]
            with place.on(ipu, f"layer{k}"), b.scope(f"layers{i}/blocks{j}"):
                shift = win // 2 if j % 2 and res > window else 0
                x = _block(b, b.remap(x), res, heads[i], win, shift, rates[k], ratio * C0 * 2 ** i, fp8)
                if k in checkpoints:
                    b.checkpoint(x)
            k += 1
        if i < len(depths) - 1:
            with place.on(ipu, f"layer{k - 1}"), b.scope(f"layers{i}"):
                x = _patch_merging(b, x, res, fp8)

    with place.on(ipu, "head"), b.scope("head"):
        x = b.reduce(b.layernorm(x, EPS, name="norm"), [1], "reduce_mean", name="avgpool")
        logits = _dense(b, x, classes, fp8, name="head")
        if not with_loss:
            b.output(logits)
            return b.graph
        scores = logits if dtype == "float32" else b.cast(logits, "float32")
        b.output(logits, b.softmax_cross_entropy(scores, targets))
    return b.graph

