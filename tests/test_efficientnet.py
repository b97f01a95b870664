"""EfficientNet as Graphcore's TF1 example builds it: its shape (blocks, channels, parameters), the
group convolutions and group norm of the G16 variant, swish, and bad parameters."""

import pytest

import models
import sim
from models.efficientnet import blocks, round_filters
from sim.cost.rules import op_cost
from sim.cost.vector import codelet
from sim.errors import GraphError


def test_parameter_counts_are_the_published_models():
    """EfficientNet-B0 has 5.3 M parameters and B4 19.3 M (Tan and Le 2019, Table 2); the source's
    depthwise build with squeeze-and-excitation gives exactly these counts."""
    assert models.get("efficientnet-b0").num_parameters() == 5_288_548
    assert models.get("efficientnet-b4").num_parameters() == 19_341_616


def test_b4_blocks_and_channels_follow_the_width_and_depth_coefficients():
    spec = blocks("b4", 6)
    assert len(spec) == 32 and len(blocks("b0", 6)) == 16  # ceil(1.8 x repeats) per stage
    assert [name for name, *_ in spec][:3] == ["block1a", "block1b", "block2a"]
    assert spec[0] == ("block1a", 3, 48, 24, 1, 1)  # stage 1: no expansion
    assert spec[2] == ("block2a", 3, 24, 32, 6, 2) and spec[3][-1] == 1  # the stride on a stage's first block
    assert spec[-1] == ("block7b", 3, 448, 448, 6, 1)
    assert (round_filters(32, 1.4), round_filters(1280, 1.4), round_filters(40, 1.4)) == (48, 1792, 56)


def test_g16_variant_has_group_convolutions_of_16_channels_and_group_norm():
    g = models.get("efficientnet-b4", group_dim=16, expand_ratio=4, micro_batch=2)
    conv = next(op for op in g.ops if op.name.startswith("block2a/b/conv"))
    assert g.tensors[conv.inputs[0]].shape[1] == 24 * 4 and conv.attrs["groups"] == 24 * 4 // 16
    norms = [op for op in g.ops if op.kind == "groupnorm"]
    assert norms and {op.attrs["groups"] for op in norms} == {4}
    assert not [op for op in g.ops if op.kind == "batchnorm"]
    assert [op.kind for op in models.get("efficientnet-b0", norm="batch").ops].count("groupnorm") == 0
    depthwise = models.get("efficientnet-b0")
    conv = next(op for op in depthwise.ops if op.name.startswith("block2a/b/conv"))
    assert conv.attrs["groups"] == 16 * 6  # one channel per group


def test_squeeze_and_excitation_and_swish():
    with_se, without = models.get("efficientnet-b0"), models.get("efficientnet-b0", se=False)
    kinds = [op.kind for op in with_se.ops]
    assert kinds.count("reduce_mean") == 16 and kinds.count("sigmoid") == 16
    assert "reduce_mean" not in [op.kind for op in without.ops]
    assert without.num_parameters() < with_se.num_parameters()
    assert kinds.count("swish") == 1 + 16 * 2 + 15 + 1  # stem, each block's conv and SE, each expansion, top


def test_swish_is_one_popnn_non_linearity_and_trains():
    """One vertex per element (popnn SWISH: 5 cycles per 4 halves), its gradient 9 per 4 halves."""
    assert (codelet("swish").fp16, codelet("swish_grad").fp16) == (1.25, 2.25)
    b = sim.GraphBuilder("s", "float16")
    y = b.swish(b.linear(b.input("x", (64, 1024)), 1024))
    b.mse_loss(y, b.input("t", (64, 1024)))
    ex = sim.compile(b.graph, "ipu-mk2", sim.Options().enableSyntheticData(True), training=True)
    kinds = [op.kind for op in ex.graph.ops]
    assert "swish" in kinds and "swish_grad" in kinds
    ipu = ex.system.ipu
    fwd, grad = (next(op for op in ex.graph.ops if op.kind == k) for k in ("swish", "swish_grad"))
    cycles = [op_cost(op, ex.graph, ipu, ipu.tiles).compute_cycles for op in (fwd, grad)]
    assert cycles[0] < cycles[1]  # the gradient's 9 cycles per 4 halves against the forward's 5


def test_pipelined_g16_split_runs_on_two_ipus():
    g = models.get("efficientnet-b4", group_dim=16, expand_ratio=4, split_points=["block4a"], micro_batch=1)
    ipus = {op.ipu for op in g.ops}
    assert ipus == {0, 1}
    assert next(op for op in g.ops if op.name.startswith("block4a/")).ipu == 1
    assert next(op for op in g.ops if op.name.startswith("block3d/")).ipu == 0


@pytest.mark.parametrize("params, match", [
    (dict(norm="layer"), 'expected "batch" .*, "group" .* or "folded"'),
    (dict(split_points=["block9a"]), "expected a list of block names: block1a"),
    (dict(split_points=["block4a", "block2a"]), "distinct and in model order"),
    (dict(group_dim=0), "group_dim"),
    (dict(dropout=1.5), "dropout"),
])
def test_bad_parameters_are_refused(params, match):
    with pytest.raises(GraphError, match=match):
        models.get("efficientnet-b0", **params)


def test_group_norm_needs_whole_groups():
    b = sim.GraphBuilder("g", "float16")
    with pytest.raises(GraphError, match="6 channels do not split into 4 groups"):
        b.group_norm(b.input("x", (1, 6, 4, 4)), 4)


def test_depthwise_convolutions_are_named_in_the_notes_with_what_is_not_modelled():
    o = sim.Options().enableSyntheticData(True)
    notes = sim.compile(models.get("efficientnet-b0", micro_batch=1), "ipu-mk2", o).notes
    assert any(n.startswith("16 depthwise convolution(s)") and "SLIC" in n and "not tried" in n for n in notes)
    g16 = sim.compile(models.get("efficientnet-b0", micro_batch=1, group_dim=16, expand_ratio=4), "ipu-mk2", o)
    assert not any("depthwise" in n for n in g16.notes)
