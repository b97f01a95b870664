"""EfficientNet (Tan and Le 2019) as Graphcore's TF1 CNN example builds it, NCHW.

Source: graphcore/examples ``vision/cnns/tensorflow1/training/Models/efficientnet.py``
(``get_default_block_args``, ``round_filters``, ``round_repeats``, ``mb_conv_block_funs``,
``set_defaults``). Inputs, in order: ``images`` ((B, 3, image_size, image_size)) and ``labels``
(int32, (B,)); outputs: the logits and the loss (the logits only with ``with_loss=False``).

* Width and depth: B0 (1.0, 1.0) and B4 (1.4, 1.8); channels rounded to multiples of 8
  (``round_filters``), repeats rounded up (``round_repeats``). Default image sizes 224 and 380.
* Stem: 3x3/2 convolution to ``round_filters(32)``, norm, swish.
* 7 stages of MBConv blocks named "block1a", "block1b", … as the source names them: a 1x1
  expansion to ``in x expand_ratio`` channels (not in stage 1, whose ratio is 1), norm, swish; a
  kxk grouped convolution of ``group_dim`` channels per group (``group_dim=1``: depthwise; the G16
  variant of Graphcore's large-batch configs uses 16 with ``expand_ratio`` 4), stride on the
  first block of a stage, norm, swish; squeeze-and-excitation (``se``: the spatial mean, a 1x1
  convolution with bias to ``max(1, in / 4)`` channels, swish, a 1x1 convolution with bias back,
  sigmoid, a multiply); a 1x1 projection, norm; the residual add where the stride is 1 and the
  channels match. "SAME" padding is the symmetric ``k // 2``, which gives the same output sizes.
* Top: 1x1 convolution to ``round_filters(1280)``, norm, swish, global average pool, dropout
  (``dropout``: 0.2 for B0, 0.4 for B4), the classifier.
* ``norm``: ``"group"`` (the source's default when neither ``--batch-norm`` nor ``--group-norm``
  is given: group norm with ``norm_groups`` 4 groups), ``"batch"``, or ``"folded"`` (batch norm
  folded into the convolutions, as an exported inference model has it: ``with_loss=False`` only).
* ``split_points`` lists the blocks where a new IPU starts (``--pipeline-splits``, e.g.
  ``["block4a"]``); ``eight_bit_io`` streams uint8 images cast on the IPU.

Not built: the source's drop-connect (a per-sample random scale of each residual branch, survival
0.8; a multiply of the branch, small beside it) and its proxy norm (off in the configs).
"""

from __future__ import annotations

import math

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement, image_inputs, normaliser, split_points

_DEFAULTS = dict(micro_batch=3, num_classes=1000, group_dim=1, expand_ratio=6, se=True, norm="group",
                 norm_groups=4, split_points=None, eight_bit_io=False, with_loss=True, dtype="float16")
#: (width, depth, default image size, dropout) of each size, as the source's EFFICIENTNET tables
SIZES = {"b0": (1.0, 1.0, 224, 0.2), "b4": (1.4, 1.8, 380, 0.4)}
MODELS = {f"efficientnet-{size}": dict(_DEFAULTS, image_size=image, dropout=drop)
          for size, (_, _, image, drop) in SIZES.items()}
#: (kernel, repeats, input channels, output channels, expansion (None: the model's), stride) per stage
STAGES = ((3, 1, 32, 16, 1, 1), (3, 2, 16, 24, None, 2), (5, 2, 24, 40, None, 2), (3, 3, 40, 80, None, 2),
          (5, 3, 80, 112, None, 1), (5, 4, 112, 192, None, 2), (3, 1, 192, 320, None, 1))
DEPTH_DIVISOR = 8
EPS = 1e-3  # the source's --norm-epsilon


def round_filters(filters: int, width: float, divisor: int = DEPTH_DIVISOR) -> int:
    """Channels scaled by ``width`` and rounded to a multiple of ``divisor``, never more than 10 %
    below the scaled value (the source's ``round_filters``)."""
    scaled = filters * width
    rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return int(rounded + divisor if rounded < 0.9 * scaled else rounded)


def blocks(size: str, expand_ratio: int) -> list[tuple[str, int, int, int, int, int]]:
    """(name, kernel, input channels, output channels, expansion, stride) of every MBConv block."""
    width, depth = SIZES[size][:2]
    out = []
    for stage, (kernel, repeats, cin, cout, expand, stride) in enumerate(STAGES, 1):
        cin, cout = round_filters(cin, width), round_filters(cout, width)
        for i in range(math.ceil(depth * repeats)):
            out.append((f"block{stage}{chr(ord('a') + i)}", kernel, cin, cout,
                        expand_ratio if expand is None else expand, stride if i == 0 else 1))
            cin = cout
    return out


def build(name: str, p: Params) -> Graph:
    size = name.rsplit("-", 1)[1]
    width = SIZES[size][0]
    image, classes = p.int("image_size", minimum=32), p.int("num_classes")
    group_dim, expand = p.int("group_dim"), p.int("expand_ratio")
    dropout = p.prob("dropout")
    spec = blocks(size, expand)
    for blk, _, cin, _, ratio, _ in spec:  # each block's grouped convolution: channels // group_dim groups
        mid = cin * ratio
        if mid % max(mid // group_dim, 1):
            p.fail("group_dim", f"{blk}'s grouped convolution has {mid} channels, which {mid // group_dim} groups "
                                f"(its channels // group_dim) do not divide; give a group_dim that leaves every block "
                                "a whole number of channels a group (a divisor of the channels, or one that leaves "
                                "a single group)")
    splits = split_points(p, [blk[0] for blk in spec])

    b = GraphBuilder(name, p.dtype())
    place = Placement(b, bool(splits))
    norm = normaliser(b, p, EPS)
    images, labels = image_inputs(b, p, image)

    ipu = 0
    with place.on(ipu, "stem"), b.scope("block0"):
        x = b.swish(norm(b.conv2d(images, round_filters(32, width), 3, 2, 1, name="conv"), "norm"))
    for blk, kernel, cin, cout, ratio, stride in spec:
        ipu += blk in splits
        with place.on(ipu, blk), b.scope(blk):
            x = mb_conv(b, x, norm, kernel, cin, cout, ratio, stride, group_dim, p.flag("se"))
    with place.on(ipu, "top"), b.scope("top"):
        x = b.swish(norm(b.conv2d(x, round_filters(1280, width), 1, name="conv"), "norm"))
        x = b.global_avgpool(x)
        if dropout:
            x = b.dropout(x, dropout)
        logits = b.linear(x, classes, name="logits")
        if labels is not None:
            b.output(logits, b.softmax_cross_entropy(logits, labels))
        else:
            b.output(logits)
    return b.graph


def mb_conv(b: GraphBuilder, x: str, norm, kernel: int, cin: int, cout: int, expand: int, stride: int,
            group_dim: int, se: bool) -> str:
    """One MBConv block (the source's ``mb_conv_a``, ``mb_conv_b`` and ``mb_conv_c``)."""
    mid = cin * expand
    y = x
    if expand != 1:
        y = b.swish(norm(b.conv2d(y, mid, 1, name="a/conv"), "a/norm"))
    y = b.conv2d(y, mid, kernel, stride, kernel // 2, groups=max(mid // group_dim, 1), name="b/conv")
    y = b.swish(norm(y, "b/norm"))
    if se:
        s = b.reduce(y, [2, 3], "reduce_mean", keepdims=True, name="se/mean")
        s = b.swish(b.conv2d(s, max(1, cin // 4), 1, bias=True, name="se/conv1"))
        s = b.sigmoid(b.conv2d(s, mid, 1, bias=True, name="se/conv2"))
        y = b.mul(y, s, name="se/scale")
    y = norm(b.conv2d(y, cout, 1, name="c/conv"), "c/norm")
    if stride == 1 and cin == cout:
        y = b.add(y, x, name="residual")
    return y
