"""The zoo's ViT (models/vit.py): tokens, placement, the pre-training options, errors, and a
training run of Graphcore's configurations."""

import pytest

import models
from sim.errors import GraphError
from sim.validation import PUBLISHED_BY_ID

PRETRAIN = dict(layers_per_ipu=[3, 3, 3, 3], eight_bit_io=True, mixup=True, representation_size=768,
                attention_dropout=0.1, ffn_act_dropout=True, mid_checkpoints=[1, 4, 7, 10])


def kinds(graph, scope: str) -> list[str]:
    return [op.kind for op in graph.ops if op.name.startswith(scope)]


def test_tokens_are_the_patches_and_the_class_token():
    for size, tokens in ((224, 197), (384, 577)):
        g = models.get("vit-base-16", image_size=size)
        assert g.tensors["embeddings/position_embeddings"].shape == (1, tokens, 768)
        qkv = [op for op in g.ops if op.name.startswith("encoder/layer0/attention/query/")]
        assert g.tensors[qkv[0].outputs[0]].shape == (8, tokens, 768)


def test_attention_has_three_projections_and_the_representation_layer_adds_its_weights():
    g = models.get("vit-base-16")
    assert kinds(g, "encoder/layer0/attention/").count("matmul") == 6  # query, key, value, scores, context, output
    assert models.get("vit-base-16", representation_size=768).num_parameters() == g.num_parameters() + 768 * 769


def test_placement_puts_the_embeddings_with_the_first_blocks_and_the_head_with_the_last():
    g = models.get("vit-base-16", layers_per_ipu=[3, 3, 3, 3])
    where = {op.name: (op.ipu, op.stage) for op in g.ops}
    assert where["embeddings/patch_embeddings/conv2d"] == (0, 0)
    assert where["head/classifier/matmul"] == (3, 3)
    assert {stage for _, stage in where.values()} == {0, 1, 2, 3}


def test_pretraining_options_build_what_the_source_runs():
    g = models.get("vit-base-16", **PRETRAIN)
    assert g.tensors["images"].dtype == "uint8"
    assert g.inputs == ["images", "labels", "mixup_lambda"]
    assert "concat" in kinds(g, "mixup/")  # the micro-batch rolled by one sample
    assert kinds(g, "normalise/").count("cast") == 2  # uint8 -> fp32, normalised, -> fp16
    assert kinds(g, "encoder/layer0/ffn/").count("dropout") == 2  # after the GELU and after fc2
    assert kinds(g, "encoder/layer0/attention/").count("dropout") == 2  # probabilities and output
    checkpoints = [op for op in g.ops if op.attrs.get("recomputation_checkpoint")]
    assert len(checkpoints) == 12 + 4  # every block's output, the last too (as the source), and 4 mid-block


@pytest.mark.parametrize("params, key", [
    (dict(patch=15), "patch"), (dict(heads=7), "heads"), (dict(mid_checkpoints=[12]), "mid_checkpoints"),
    (dict(mixup=True, with_loss=False), "mixup"), (dict(layers_per_ipu=[3, 3, 3]), "layers_per_ipu")])
def test_bad_parameters_name_what_is_wrong(params, key):
    with pytest.raises(GraphError, match=key):
        models.get("vit-base-16", **params)


@pytest.mark.parametrize("rid", ["B22", "B24"])
def test_graphcore_configurations_train_on_a_bow_pod16(rid):
    """The rows run end to end; the held-out report tracks their error (reports/validation.md)."""
    row = PUBLISHED_BY_ID[rid]
    assert row.setup.model == "vit-base-16"
    assert row.simulated() > 0
