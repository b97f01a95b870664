"""The zoo's Conformer: Graphcore's PyTorch Conformer-medium (WeNet), its sizes, its four-IPU
pipeline and its joint CTC and attention loss."""

import pytest

import models
import sim
from sim.errors import GraphError

PIPELINE = [2, 4, 5, 1]  # configs/train.yaml: encoder.encoders__2, __6, __11 begin IPUs 1, 2, 3


def _conformer_medium_parameters(d=256, units=2048, heads=4, kernel=15, vocab=4233, mel=80, enc=12, dec=6):
    """The parameters of WeNet's Conformer-medium counted layer by layer from the example's modules."""
    linear = lambda i, o, bias=True: i * o + (o if bias else 0)  # noqa: E731
    ln = 2 * d
    mel_out = ((mel - 3) // 2 + 1 - 3) // 2 + 1
    front = (1 * d * 9 + d) + (d * d * 9 + d) + linear(d * mel_out, d)
    ffn = linear(d, units) + linear(units, d)
    rel_attention = 4 * linear(d, d) + linear(d, d, bias=False) + 2 * heads * (d // heads)
    conv_module = linear(d, 2 * d, bias=False) + d * kernel + ln + linear(d, d, bias=False)
    block = 2 * ffn + rel_attention + conv_module + 5 * ln
    decoder_block = 2 * 4 * linear(d, d) + ffn + 3 * ln
    heads_and_decoder = ln + linear(d, vocab) + vocab * d + dec * decoder_block + ln + linear(d, vocab)
    return front + enc * block + heads_and_decoder


def test_parameters_and_shapes_are_the_examples():
    g = models.get("conformer-medium")
    assert g.num_parameters() == _conformer_medium_parameters()
    assert [g.tensors[t].shape for t in g.inputs] == [(4, 1220, 80), (4, 48), (4, 48), (4,), (4,)]
    ctc = next(op for op in g.ops if op.kind == "ctc_loss")
    assert g.tensors[ctc.inputs[0]].shape == (304, 4, 4233)  # 1,220 frames subsampled 4x, (T, B, C)
    assert ctc.attrs["reduced_classes"]
    depthwise = [op for op in g.ops if op.kind == "conv2d" and op.attrs["groups"] == 256]
    assert len(depthwise) == 12 and all(tuple(op.attrs["kernel"]) == (1, 15) for op in depthwise)
    # as the example writes them: two RemapCE a block (encoder and decoder), Swish as x * sigmoid(x),
    # the convolution module's pointwise layers as 1 x 1 convolutions, the mask as scores * m + rev
    kinds = [op.kind for op in g.ops]
    assert kinds.count("remap") == 2 * 12 + 2 * 6 and "swish" not in kinds
    pointwise = [op for op in g.ops if op.kind == "conv2d" and op.attrs["kernel"] in (1, (1, 1), [1, 1])]
    assert len(pointwise) == 2 * 12
    assert sum(op.name.endswith("mask_keep") for op in g.ops) == 12 + 2 * 6


def test_pipeline_placement_as_the_example():
    g = models.get("conformer-medium", layers_per_ipu=PIPELINE)
    ipu = {op.name: op.ipu for op in g.ops}
    assert ipu["subsampling/conv0/conv2d"] == 0 and ipu["encoder/block1/remap_out"] == 0
    assert ipu["encoder/block2/remap_in"] == 1 and ipu["encoder/block5/remap_out"] == 1
    assert ipu["encoder/block6/remap_in"] == 2 and ipu["encoder/block10/remap_out"] == 2
    assert ipu["encoder/block11/remap_in"] == 3 and ipu["ctc/loss"] == 3 and ipu["decoder/loss"] == 3
    assert sorted({op.stage for op in g.ops}) == [0, 1, 2, 3]


def test_loss_joins_ctc_and_attention_and_trains_both():
    ex = sim.compile(models.get("conformer-medium", layers_per_ipu=PIPELINE, micro_batch=1), "bow-2000",
                     sim.Options().Training.gradientAccumulation(8), training=True)
    kinds = {op.kind for op in ex.graph.ops}
    assert {"ctc_loss", "softmax_cross_entropy_grad"} <= kinds
    ctc_grad = [op for op in ex.graph.ops if op.name.startswith("ctc/loss") and op.kind == "mul"]
    assert ctc_grad, "the CTC gradient (popnn's, scaled by the loss's weight) reaches the encoder"


@pytest.mark.parametrize("params, param", [(dict(heads=3), "heads"), (dict(kernel=14), "kernel"),
                                           (dict(layers_per_ipu=[2, 4, 5]), "layers_per_ipu")])
def test_bad_parameters_name_the_parameter(params, param):
    with pytest.raises(GraphError, match=param):
        models.get("conformer-medium", **params)
