"""The zoo's U-Net: Graphcore's TensorFlow 2 medical-segmentation model, its four-IPU pipeline and
TensorFlow's stage-by-stage passing of the skip connections."""

import pytest

import models
import sim
from sim.errors import GraphError

TF_SPLIT = ["encoder_block_2", "decoder_block_0", "decoder_block_2"]  # model_utils.set_pipeline_stages


def _unet_parameters(base=64, classes=2):
    """Two 3x3 convolutions with bias per block, 2x2 transposed convolutions with bias, a 1x1 head."""
    filters, total, cin = [base * 2 ** i for i in range(5)], 0, 1
    for c in filters:
        total += cin * c * 9 + c + c * c * 9 + c
        cin = c
    for c in reversed(filters[:-1]):
        total += cin * c * 4 + c + 2 * c * c * 9 + c + c * c * 9 + c
        cin = c
    return total + base * classes + classes


def test_parameters_and_shapes_are_the_papers():
    g = models.get("unet")
    assert g.num_parameters() == _unet_parameters() == 31_030_658
    assert [g.tensors[t].shape for t in g.inputs] == [(1, 1, 572, 572), (1, 2, 388, 388)]
    assert g.tensors[g.outputs[0]].shape == (1, 2, 388, 388)
    ups = [op for op in g.ops if op.kind == "conv2d_grad_input"]  # the 2x2 stride-2 transposed convolutions
    assert [g.tensors[op.outputs[0]].shape[1:] for op in ups] == [(512, 56, 56), (256, 104, 104), (128, 200, 200),
                                                                  (64, 392, 392)]


def test_pipeline_split_as_the_example():
    g = models.get("unet", split_points=TF_SPLIT)
    ipu = {op.name: op.ipu for op in g.ops}
    assert ipu["encoder_block_1/maxpooling"] == 0 and ipu["encoder_block_2/conv_0/conv2d"] == 1
    assert ipu["decoder_block_0/transpose/conv2d_grad_input"] == 1 and ipu["decoder_block_0/concat"] == 2
    assert ipu["decoder_block_2/transpose/conv2d_grad_input"] == 2 and ipu["head/conv/conv2d"] == 3
    # pipelined, the crop is CentralCropIpu's copy; on one IPU tf.image.central_crop's view
    assert {op.kind for op in g.ops if op.name.endswith("/crop")} == {"copy"}
    assert not [op for op in models.get("unet").ops if op.name.endswith("/crop")]


def _forward_sends(params):
    s = dict(split_points=TF_SPLIT, **params)
    ex = sim.compile(models.get("unet", **s), "bow-2000",
                     sim.Options().Training.gradientAccumulation(8), training=True)
    return [stage.sends for stage in ex.stages[:3]]


def test_pass_through_sends_the_skips_stage_by_stage():
    fp16 = 2
    crops = {0: 64 * 392 ** 2, 1: 128 * 200 ** 2, 2: 256 * 104 ** 2, 3: 512 * 56 ** 2}
    pooled, up0, up2 = 128 * 140 ** 2, 512 * 56 ** 2, 128 * 200 ** 2
    passed = _forward_sends(dict(pass_through=True))
    assert passed == [{1: fp16 * (crops[0] + crops[1] + pooled)},
                      {2: fp16 * (crops[0] + crops[1] + crops[2] + crops[3] + up0)},
                      {3: fp16 * (crops[0] + crops[1] + up2)}]
    # PopART copies each tensor straight to the stage that reads it
    direct = _forward_sends(dict(pass_through=False))
    assert direct == [{1: fp16 * pooled, 3: fp16 * (crops[0] + crops[1])},
                      {2: fp16 * (crops[2] + crops[3] + up0)},
                      {3: fp16 * up2}]


def test_bad_image_size_is_named():
    with pytest.raises(GraphError, match="image_size"):
        models.get("unet", image_size=570)
