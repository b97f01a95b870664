"""U-Net (Ronneberger et al. 2015) as Graphcore's TensorFlow 2 medical-segmentation example builds
it, NCHW.

Source: graphcore/examples ``vision/unet_medical/tensorflow2`` (``model.py``, ``model_utils.py``,
``losses.py``, ``dataset.py``). Inputs, in order: ``images`` ((B, 1, image_size, image_size)) and
``labels`` ((B, num_classes, out, out), one-hot in the model dtype, as the source's dataset makes
them); outputs: the logits ((B, num_classes, out, out)) and the loss (the logits only with
``with_loss=False``). With the default 572 x 572 input the output is 388 x 388.

* Encoder: five blocks "encoder_block_0" … "encoder_block_4" of two unpadded 3x3 convolutions
  with bias and ReLU, 64, 128, 256, 512 and 1,024 channels (``base_filters`` doubling). The
  first four keep a centre crop of their output for the decoder (392, 200, 104 and 56 pixels
  square at 572) and end with a 2x2 max pool; the last ends with dropout (``drop_rate``).
* Decoder: four steps, each "decoder_block_i/up" (a 2x2 stride-2 transposed convolution with bias
  and ReLU, half the channels) then "decoder_block_i" (the crop concatenated after it, two
  convolutions as the encoder's).
* Head: a 1x1 convolution with bias to ``num_classes``.
* Loss: the source's ``dice_ce_loss`` in float32: the softmax cross-entropy against the one-hot
  labels plus one minus the Dice coefficient of the softmax (per sample and class, over the
  pixels: ``(2 sum(p y) + eps) / (sum(p^2 + y^2) + eps)``).

``split_points`` lists the blocks where a new IPU starts, as the example's pipeline does:
``["encoder_block_2", "decoder_block_0", "decoder_block_2"]`` is its four-IPU split (new stages
after ``encoder_block_1_maxpooling``, ``decoder_block_0_transpose`` and
``decoder_block_2_transpose``, ``model_utils.set_pipeline_stages``). Pipelined, the centre crop
is the example's ``CentralCropIpu`` custom op, which copies the crop into a new tensor so that only
it crosses to later IPUs; on one IPU it is ``tf.image.central_crop``'s view. ``pass_through``
routes a tensor that a later stage needs through every stage in between, as a TensorFlow pipeline
with the Interleaved schedule runs the example's model, which passes the encoder's skip connections
on stage by stage (its README: they "are passed through the pipeline"). With the Grouped and
Sequential schedules TensorFlow's PipelineCommunicationOptimizer turns such a path into a FIFO
and copies the tensor straight to the stage that reads it, as PopART and PopTorch do
(``pass_through=False``, the default).

Not built: the metrics the source computes beside the loss (the Dice accuracy and the
cross-entropy again, element-wise work over the output).
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement, split_points

MODELS = {
    "unet": dict(micro_batch=1, image_size=572, base_filters=64, num_classes=2, drop_rate=0.5,
                 split_points=None, pass_through=False, with_loss=True, dtype="float16"),
}
DEPTH = 5  # encoder blocks
EPS = 1e-6  # losses.py dice_coef_fn


def _double_conv(b: GraphBuilder, x: str, filters: int) -> str:
    for i in range(2):
        x = b.relu(b.conv2d(x, filters, 3, bias=True, name=f"conv_{i}"))
    return x


def _centre_crop(b: GraphBuilder, x: str, size: int, copy: bool) -> str:
    h = b.shape(x)[2]
    start = (h - size) // 2
    y = b.slice(b.slice(x, 2, start, start + size, name="crop_rows"), 3, start, start + size, name="crop_cols")
    return b.unary("copy", y, name="crop") if copy else y


def block_names() -> list[str]:
    """The model's blocks in order (the names ``split_points`` takes)."""
    return ([f"encoder_block_{i}" for i in range(DEPTH)]
            + [n for i in range(DEPTH - 1) for n in (f"decoder_block_{i}/up", f"decoder_block_{i}")] + ["head"])


def _sizes(p: Params, image: int) -> list[int]:
    """The crop sizes: each encoder output's size less what the decoder's convolutions take back."""
    size, outs = image, []
    for i in range(DEPTH):
        size -= 4
        outs.append(size)
        if i < DEPTH - 1:
            if size % 2:
                p.fail("image_size", f"encoder_block_{i}'s output is {size} pixels, odd: the 2x2 max pool and "
                                     "the transposed convolution would not meet; give 572 or another size that "
                                     "stays even (572, 556, 540, ...)")
            size //= 2
    crops, up = [], outs[-1]
    for i in reversed(range(DEPTH - 1)):
        up = up * 2
        crops.append(up)
        up -= 4
        if up <= 0:
            p.fail("image_size", "too small for the decoder's convolutions")
    return list(reversed(crops))


def build(name: str, p: Params) -> Graph:
    image, base, classes = p.int("image_size", minimum=64), p.int("base_filters"), p.int("num_classes", 2)
    crops = _sizes(p, image)
    order = block_names()
    splits = split_points(p, order)
    ipu_of, ipu = {}, 0
    for blk in order:
        ipu += blk in splits
        ipu_of[blk] = ipu
    pipelined, through = bool(splits), p.flag("pass_through")
    B = p.int("micro_batch")
    b = GraphBuilder(name, p.dtype())
    place = Placement(b, pipelined)
    images = b.input("images", (B, 1, image, image))
    out = crops[0] - 4  # the last decoder block's output
    labels = b.input("labels", (B, classes, out, out)) if p.flag("with_loss") else None
    skips: dict[int, tuple[str, int]] = {}  # decoder step -> (its crop, the IPU holding it now)

    def enter(blk: str):
        """Place ``blk``; with ``pass_through``, first bring the crops a later IPU needs onto this one."""
        if through and pipelined:
            for step, (t, where) in skips.items():
                if where < ipu_of[blk] < ipu_of[f"decoder_block_{step}"]:
                    with place.on(ipu_of[blk], blk), b.scope(f"{blk}/pass_through"):
                        skips[step] = (b.unary("identity", t, name=f"skip_{step}"), ipu_of[blk])
        return place.on(ipu_of[blk], blk)

    x, filters = images, [base * 2 ** i for i in range(DEPTH)]
    for i, f in enumerate(filters):
        blk = f"encoder_block_{i}"
        with enter(blk), b.scope(blk):
            x = _double_conv(b, x, f)
            if i < DEPTH - 1:
                skips[DEPTH - 2 - i] = (_centre_crop(b, x, crops[i], pipelined), ipu_of[blk])
                x = b.maxpool(x, 2, 2, name="maxpooling")
            else:
                x = b.dropout(x, p.prob("drop_rate"), name="dropout")
    for step, f in enumerate(reversed(filters[:-1])):
        with enter(f"decoder_block_{step}/up"), b.scope(f"decoder_block_{step}"):
            x = b.relu(b.conv_transpose2d(x, f, 2, 2, bias=True, name="transpose"))
        blk = f"decoder_block_{step}"
        with enter(blk), b.scope(blk):
            x = _double_conv(b, b.concat([x, skips.pop(step)[0]], axis=1, name="concat"), f)
    with enter("head"), b.scope("head"):
        logits = b.conv2d(x, classes, 1, bias=True, name="conv")
        if labels is None:
            b.output(logits)
            return b.graph
        b.output(logits, _dice_ce_loss(b, logits, labels))
    return b.graph


def _dice_ce_loss(b: GraphBuilder, logits: str, labels: str) -> str:
    """``losses.py dice_ce_loss``: cross-entropy plus Dice loss, in float32; the graph's loss."""
    with b.scope("loss"):
        z, y = b.cast(logits, "float32", name="logits_fp32"), b.cast(labels, "float32", name="labels_fp32")
        n, c, h, w = b.shape(z)
        probs = b.softmax(z, axis=1)
        # softmax_cross_entropy_with_logits against dense labels, the mean over the pixels
        ce = b.reduce(b.mul(y, b.unary("log", probs, name="log_probs"), name="ce_terms"), (0, 1, 2, 3))
        ce = b.scale(ce, -1.0 / (n * h * w), name="ce")
        # dice_coef_fn over the pixels of each sample and class, then 1 - its mean
        inter = b.reduce(b.mul(probs, y, name="intersection_terms"), (2, 3), name="intersection")
        union = b.reduce(b.add(b.mul(probs, probs, name="p2"), b.mul(y, y, name="y2"), name="union_terms"),
                         (2, 3), name="union")
        dice = b.div(b.add(b.scale(inter, 2.0, name="twice"), b.constant("eps", (1,), "float32"), name="num"),
                     b.add(union, b.constant("eps_union", (1,), "float32"), name="den"), name="dice")
        # 1 - the mean: the constant 1 changes neither the work nor the gradient, so it is left out
        dice_loss = b.scale(b.reduce(dice, (0, 1), kind="reduce_mean", name="dice_mean"), -1.0, name="dice_loss")
        loss = b.add(ce, dice_loss, name="loss")
    b.graph.loss = loss
    return loss
