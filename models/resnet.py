"""ResNet-50 (He et al. 2015), torchvision's v1.5 layout (stride on the 3x3 conv), NCHW, and
ResNeXt-101 32x4d (Xie et al. 2017): the same bottleneck blocks, [3, 4, 23, 3] of them, whose 3x3
convolution has ``groups`` groups of ``width_per_group`` channels per 64 of the stage's width
(``resnext101``: 32 groups of 4, so 128 channels in the first stage), with group norm
(``norm="group"``, ``norm_groups`` 32) as Graphcore's TF1 example builds it.

Inputs, in order: ``images`` ((B, 3, image_size, image_size), model dtype) and ``labels``
(int32, (B,)). Outputs: the logits and the loss. ``with_loss=False`` (an inference deployment,
as PopRT runs the exported classifier) leaves out the labels and the loss: logits only; with it,
``norm="folded"`` folds each batch norm into its convolution as the exported ONNX model has it
(``torch.onnx.export`` of an ``eval()`` model fuses Conv + BatchNormalization): a bias per channel.

Stem (7x7/2 conv, batchnorm, ReLU, 3x3/2 maxpool), bottleneck blocks [3, 4, 6, 3] named
"layer1/0" … "layer4/2", global average pool, fully connected layer, softmax cross-entropy.

``recompute_checkpoints`` lists recomputation checkpoints (PopTorch's ``recomputationCheckpoint``):
blocks, whose outputs are checkpoints (``"blocks"`` for every bottleneck block), and ops inside a
block (``"layer4/0/conv1"``; a block's ``conv1`` ... ``bn3``, ``downsample/conv``, ``downsample/bn``
and ``add``, its residual add before the ReLU) or in the classifier (``"classifier/avgpool"``,
``"classifier/fc"``); ``"graphcore"`` is Graphcore's PyTorch ResNet-50 config's list
(:data:`GRAPHCORE_PYTORCH_CHECKPOINTS`; resnet50 only). With PopART's autoRecomputation RecomputeAll
(or in a pipeline) the ops between checkpoints are recomputed in the backward pass instead of keeping
their activations, as Graphcore's ResNet-50 training configs do to fit micro-batch 18 on one IPU.

``eight_bit_io`` streams the images as uint8 and casts them on the IPU (Graphcore's configs:
``eight_bit_io: true``, ``normalization_location: ipu``), halving the host traffic of fp16.

``fp8_convs`` runs every convolution but the stem's in FP8, as PopRT's ``--precision fp8`` with
``fp8_skip_op_names`` naming the 7x7 stem convolution and the classifier's Gemm converts an
fp16 ResNet-50 (graphcore/PopRT examples/resnet50): each such convolution casts its fp16 input to
FP8 (a cast per convolution, as the converter inserts one before each), keeps its weights in FP8
and returns fp16. It needs an IPU with FP8 (the ``c600`` system) and ``dtype="float16"``.

``bn_span`` > 1 is Graphcore's TF1 CNNs' ``--BN-span`` (``BN_span: 2`` in their MLPerf ResNet-50
configs, logged as ``model_bn_span`` 2 x the micro-batch): in training each batch norm's
statistics span that many adjacent replicas (TensorFlow's
``number_of_distributed_batch_norm_replicas``, run by poplibs' distributed batch norm), so every
batch norm and its gradient all-reduce two per-channel vectors over each group of replicas
(:mod:`sim.schedule.replicated_ops`). The replica count must be a multiple of it.

``split_points`` lists the blocks where a new IPU starts (as Graphcore's CNN examples'
``--pipeline-splits``): ``["layer2/0", "layer3/0"]`` puts the stem and layer1 on IPU 0, layer2
on IPU 1, layer3, layer4 and the classifier on IPU 2. "layer2.0" is accepted for "layer2/0".
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement, image_inputs, normaliser, split_points

_COMMON = dict(image_size=224, num_classes=1000, split_points=None, recompute_checkpoints=None, eight_bit_io=False,
               with_loss=True, dtype="float16", fp8_convs=False, norm="batch", norm_groups=32, bn_span=1)
MODELS = {
    "resnet50": dict(micro_batch=4, **_COMMON, groups=1, width_per_group=64),
    # ResNeXt-101 32x4d as Graphcore's TF1 example builds it (Models/resnext.py set_defaults: 32 groups of
    # 4 channels; group norm of 32 groups unless --batch-norm is given)
    "resnext101": dict(micro_batch=6, **dict(_COMMON, norm="group"), groups=32, width_per_group=4),
}
DEPTHS = {"resnet50": (3, 4, 6, 3), "resnext101": (3, 4, 23, 3)}
WIDTHS, STRIDES = (64, 128, 256, 512), (1, 2, 2, 2)
#: the ops of a bottleneck block that can be checkpoints, by their names in the block
BLOCK_OPS = ("conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "downsample/conv", "downsample/bn", "add")
#: Graphcore's PyTorch ResNet-50 checkpoints (examples vision/cnns/pytorch/train/configs.yml ``resnet50``,
#: ``recompute_checkpoints``, torch.fx names) in the zoo's names: the residual adds ``add``, ``add_1`` ...
#: ``add_12`` but ``add_4``, ``add_8`` and ``add_10`` (blocks layer1/0 to layer3/5 in order), every
#: convolution, batch norm and add of layer4, the average pool and the classifier
GRAPHCORE_PYTORCH_CHECKPOINTS = (
    *(f"{blk}/add" for blk in ("layer1/0", "layer1/1", "layer1/2", "layer2/0", "layer2/2", "layer2/3", "layer3/0",
                               "layer3/2", "layer3/4", "layer3/5")),
    *(f"layer4/{j}/{op}" for j in range(3) for op in BLOCK_OPS if j == 0 or not op.startswith("downsample")),
    "classifier/avgpool", "classifier/fc")


def bottleneck(b: GraphBuilder, x: str, width: int, stride: int, fp8: bool = False, groups: int = 1,
               width_per_group: int = 64, norm=None, checkpoints: frozenset[str] = frozenset()) -> str:
    """1x1 reduce, 3x3 (strided; ``groups`` groups of ``width_per_group x width / 64`` channels in
    all: ResNeXt's cardinality), 1x1 expand to ``4 x width``, each normalised (``norm``; batch norm
    by default); projection shortcut. With ``fp8`` each convolution casts its input to FP8 first
    (its weights and result follow). The ops named in ``checkpoints`` (of :data:`BLOCK_OPS`) are
    recomputation checkpoints."""
    cin, cout = b.shape(x)[1], 4 * width
    inner = width * groups * width_per_group // 64
    norm = norm or (lambda t, name: b.batchnorm(t, name=name))

    def kept(t: str, name: str) -> str:
        return b.checkpoint(t) if name in checkpoints else t

    def conv(t, channels, kernel, stride=1, padding=0, groups=1, name="conv"):
        t = b.cast(t, "float8", name=f"{name}/to_fp8") if fp8 else t
        return kept(b.conv2d(t, channels, kernel, stride, padding, groups=groups, name=name), name)

    def normed(t, name):
        return kept(norm(t, name), name)

    y = b.relu(normed(conv(x, inner, 1, name="conv1"), "bn1"))
    y = b.relu(normed(conv(y, inner, 3, stride, 1, groups=groups, name="conv2"), "bn2"))
    y = normed(conv(y, cout, 1, name="conv3"), "bn3")
    if stride != 1 or cin != cout:
        x = normed(conv(x, cout, 1, stride, name="downsample/conv"), "downsample/bn")
    return b.relu(kept(b.add(y, x), "add"))


def build(name: str, p: Params) -> Graph:
    size, classes = p.int("image_size", minimum=32), p.int("num_classes")
    blocks = [(f"layer{i + 1}/{j}", w, s if j == 0 else 1)
              for i, (n, w, s) in enumerate(zip(DEPTHS[name], WIDTHS, STRIDES)) for j in range(n)]
    groups, per_group = p.int("groups"), p.int("width_per_group")
    order = [blk for blk, _, _ in blocks]
    splits = split_points(p, order, lambda s: s.replace(".", "/"))  # "layer2.0" is "layer2/0"

    if p["recompute_checkpoints"] == "graphcore" and name != "resnet50":
        p.fail("recompute_checkpoints", "\"graphcore\" is Graphcore's PyTorch ResNet-50 config's list; give the "
               f"checkpoints of {name} as names")
    presets = {"blocks": list(order), "graphcore": list(GRAPHCORE_PYTORCH_CHECKPOINTS)}
    checkpoints = presets.get(p["recompute_checkpoints"]) if isinstance(p["recompute_checkpoints"], str) else None
    if checkpoints is None:
        checkpoints = p.items("recompute_checkpoints", 'block and op names, or the string "blocks" for every block '
                              'or "graphcore" for Graphcore\'s PyTorch config')
    named = set(order) | {f"{blk}/{op}" for blk in order for op in BLOCK_OPS} | {"classifier/avgpool", "classifier/fc"}
    bad = [c for c in checkpoints if not isinstance(c, str) or c.replace(".", "/") not in named]
    if bad:
        p.fail("recompute_checkpoints", f"{bad[0]!r} is not a block or an op of one: expected \"blocks\", "
               f"\"graphcore\" or a list of block names ({order[0]} ... {order[-1]}), of a block's ops "
               f"({order[-1]}/conv1; {', '.join(BLOCK_OPS)}), classifier/avgpool or classifier/fc")
    checkpoints = {c.replace(".", "/") for c in checkpoints}

    fp8 = p.flag("fp8_convs")
    if fp8 and p.dtype() != "float16":
        p.fail("fp8_convs", "converts a dtype='float16' model (PopRT's --precision fp8); give dtype='float16'")
    b = GraphBuilder(name, p.dtype())
    place = Placement(b, bool(splits))
    norm = normaliser(b, p)
    images, labels = image_inputs(b, p, size)

    ipu = 0
    with place.on(ipu, "stem"), b.scope("stem"):
        x = b.relu(norm(b.conv2d(images, 64, 7, 2, 3, name="conv1"), "bn1"))
        x = b.maxpool(x, 3, 2, 1)
    for blk, width, stride in blocks:
        ipu += blk in splits
        with place.on(ipu, blk), b.scope(blk):
            inside = frozenset(c.removeprefix(blk + "/") for c in checkpoints if c.startswith(blk + "/"))
            x = bottleneck(b, x, width, stride, fp8, groups, per_group, norm, inside)
            if blk in checkpoints:
                b.checkpoint(x)
    with place.on(ipu, "classifier"), b.scope("classifier"):
        pooled = b.global_avgpool(x)
        pooled = b.checkpoint(pooled) if "classifier/avgpool" in checkpoints else pooled
        logits = b.linear(pooled, classes, name="fc")
        logits = b.checkpoint(logits) if "classifier/fc" in checkpoints else logits
        if labels is not None:
            b.output(logits, b.softmax_cross_entropy(logits, labels))
        else:
            b.output(logits)
    return b.graph
