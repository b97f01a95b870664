"""The model zoo: sizes against published figures, FLOPs from op shapes, placement, errors."""

import math
import re

import pytest

import models
from sim.errors import GraphError

# Published parameter counts. Tolerance 1%: BERT's "110M"/"340M" are rounded figures from the
# paper, and our BERT has the MLM head (transform + decoder bias, +0.6M/+1.1M) but no pooler or
# NSP head (-0.6M/-1.1M); with the 30522 vocab BERT-large is 335.2M (Hugging Face: 336M with the
# pooler), so it is compared to 336M. GPT-2 and ResNet-50 are compared to the exact Hugging Face
# / torchvision counts (tied LM head, batchnorm gamma/beta counted, running stats not): exact.
# ViT-B/16 and ViT-L/16 are Hugging Face's ViTForImageClassification with 1,000 labels
# (google/vit-base-patch16-224, google/vit-large-patch16-224): exact. ResNeXt-101 32x4d and
# EfficientNet-B0 / B4 are torchvision's resnext101_32x4d (44.18 M) and the reference
# EfficientNets (5.29 M, 19.34 M): exact.
PUBLISHED = {"bert-base": 110e6, "bert-large": 336e6}
EXACT = {"gpt2-small": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080,
         "gpt2-xl": 1_557_611_200, "resnet50": 25_557_032, "vit-base-16": 86_567_656,
         "vit-large-16": 304_326_632, "resnext101": 44_177_704, "efficientnet-b0": 5_288_548,
         "efficientnet-b4": 19_341_616,
         # OpenAI clip's ViT-B/32 state dict has 151,277,313 values: these and its logit_scale, a constant here
         "clip-vit-b-32": 151_277_312,
         # transformers' CLIPTextModel of openai/clip-vit-large-patch14 (Stable Diffusion v1's text encoder)
         "clip-text-vit-l-14": 123_060_480}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_bert_parameter_count_close_to_published(name):
    assert models.get(name).num_parameters() == pytest.approx(PUBLISHED[name], rel=0.01)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_parameter_count_matches_reference_implementation(name):
    assert models.get(name).num_parameters() == EXACT[name]


def test_gpt2_rounded_published_sizes():
    got = {n: models.get(n).num_parameters() / 1e6 for n in ("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl")}
    for n, published in zip(got, (124, 355, 774, 1558)):
        assert got[n] == pytest.approx(published, rel=0.005)


def matmul_flops(graph) -> int:
    """Forward FLOPs of the matmuls, from op shapes: 2 · (output elements) · (inner dimension)."""
    total = 0
    for op in graph.ops:
        if op.kind == "matmul":
            k = graph.tensor(op.inputs[0]).shape[-1]
            total += 2 * math.prod(graph.tensor(op.outputs[0]).shape) * k
    return total


def test_bert_base_forward_flops():
    B, S, L, H, I, V = 2, 128, 12, 768, 3072, 30522
    g = models.get("bert-base", micro_batch=B, seq_len=S, mask_tokens=None)  # head on every position
    T = B * S
    # Exact: QKV + output projection + FFN per layer, scores and context, MLM transform + decoder.
    exact = L * (2 * T * (4 * H * H + 2 * H * I) + 2 * 2 * B * S * S * H) + 2 * T * H * H + 2 * T * H * V
    assert matmul_flops(g) == exact
    # Rule of thumb 2 · params · tokens, within 5%: it ignores attention's S² term (+2% at S=128)
    # and counts parameters no matmul uses (position/type tables, biases, norms: -0.5%).
    assert matmul_flops(g) == pytest.approx(2 * g.num_parameters() * T, rel=0.05)


def test_mask_tokens_projects_only_masked_positions():
    g = models.get("bert-base", micro_batch=2, mask_tokens=20)
    decoder = next(op for op in g.ops if op.name == "mlm_head/decoder")
    assert g.tensor(decoder.outputs[0]).shape == (2, 20, 30522)
    assert g.tensor("labels").shape == (2, 20)


def ipu_of(graph, prefix):
    return {(op.ipu, op.stage) for op in graph.ops if op.name.startswith(prefix)}


def test_bert_layers_per_ipu_placement():
    g = models.get("bert-base", layers_per_ipu=[0, 4, 4, 4])
    assert ipu_of(g, "embeddings/") == {(0, 0)}
    for i in range(12):
        ipu = 1 + i // 4
        assert ipu_of(g, f"encoder/layer{i}/") == {(ipu, ipu)}
    assert ipu_of(g, "mlm_head/") == {(0, 4)}  # back on IPU 0 with the tied table, last stage
    assert g.ops[-1].kind == "softmax_cross_entropy" and g.ops[-1].ipu == 0
    assert g.ipus_used() == [0, 1, 2, 3]
    assert all(op.ipu is None for op in models.get("bert-base").ops)


def test_gpt2_layers_per_ipu_placement():
    g = models.get("gpt2-small", seq_len=128, layers_per_ipu=[2, 4, 6])
    expected = [0] * 2 + [1] * 4 + [2] * 6
    for i, ipu in enumerate(expected):
        assert {o for o, _ in ipu_of(g, f"h{i}/")} == {ipu}
    assert ipu_of(g, "embeddings/") == {(0, 0)}
    assert ipu_of(g, "ln_f") == {(2, 2)}
    assert ipu_of(g, "lm_head/") == {(0, 3)}


def test_gpt2_inference_without_loss_streams_only_the_ids():
    """with_loss=False is Graphcore's inference_gpt2.py: input_ids in, the next token's logits
    out; no labels streamed and no cross-entropy over the vocabulary."""
    g = models.get("gpt2-small", seq_len=128, with_loss=False)
    assert g.inputs == ["input_ids"]
    assert "softmax_cross_entropy" not in {op.kind for op in g.ops}
    assert [g.tensors[o].shape for o in g.outputs] == [(1, 1, 50257)]
    trained = models.get("gpt2-small", seq_len=128)
    assert trained.inputs == ["input_ids", "labels"] and len(trained.outputs) == 2


def test_resnext_has_grouped_3x3_convolutions_and_group_norm():
    g = models.get("resnext101", micro_batch=1)
    convs = [op for op in g.ops if op.kind == "conv2d" and op.name.split("/")[-2:-1] == ["conv2"]]
    assert len(convs) == 3 + 4 + 23 + 3 and {op.attrs["groups"] for op in convs} == {32}
    firsts = [op for op in convs if op.name.split("/")[1] == "0"]  # each stage's first block
    assert [g.tensors[op.outputs[0]].shape[1] for op in firsts] == [128, 256, 512, 1024]
    assert {op.kind for op in g.ops} >= {"groupnorm"} and "batchnorm" not in {op.kind for op in g.ops}
    assert {op.attrs["groups"] for op in g.ops if op.kind == "groupnorm"} == {32}
    assert "groupnorm" not in {op.kind for op in models.get("resnet50").ops}  # ResNet-50 keeps batch norm


def test_folded_batch_norm_is_a_bias_per_channel_of_each_convolution():
    """norm="folded": an exported inference ResNet-50 (torch.onnx.export of an eval() model fuses
    each Conv + BatchNormalization): no batch norm, one (1, C, 1, 1) bias added after each of the
    53 convolutions, and cheaper than the batch norms it replaces."""
    import sim
    folded = models.get("resnet50", micro_batch=8, with_loss=False, norm="folded")
    kinds = [op.kind for op in folded.ops]
    assert "batchnorm" not in kinds and kinds.count("conv2d") == 53
    biases = [op for op in folded.ops if op.kind == "add" and "bn" in op.name.split("/")[-2]]
    assert len(biases) == 53
    conv_of = {op.outputs[0]: op for op in folded.ops if op.kind == "conv2d"}
    assert all(b.inputs[0] in conv_of for b in biases)
    assert all(folded.tensors[b.inputs[1]].shape == (1, folded.tensors[b.inputs[0]].shape[1], 1, 1) for b in biases)
    o = sim.Options()
    runs = {norm: sim.simulate(models.get("resnet50", micro_batch=8, with_loss=False, norm=norm), "c600", o)
            for norm in ("batch", "folded")}
    assert runs["folded"].cycle_count < runs["batch"].cycle_count
    with pytest.raises(GraphError, match="with_loss=False"):
        models.get("resnet50", norm="folded")  # training statistics cannot be folded


def test_resnet_split_points_placement():
    g = models.get("resnet50", split_points=["layer2/0", "layer3.0"])
    assert {o for o, _ in ipu_of(g, "stem/")} == {0}
    assert {o for o, _ in ipu_of(g, "layer1/")} == {0}
    assert {o for o, _ in ipu_of(g, "layer2/")} == {1}
    assert {o for o, _ in ipu_of(g, "layer3/")} | {o for o, _ in ipu_of(g, "layer4/")} == {2}
    assert ipu_of(g, "classifier/") == {(2, 2)}
    assert any(op.name.startswith("layer1/0/") for op in g.ops)


def test_resnet_checkpoints_inside_blocks_and_graphcores_list():
    """Checkpoints on a block's output, on ops inside a block and in the classifier; "graphcore" is Graphcore's
    PyTorch ResNet-50 config's 35 (configs.yml: add ... add_12 but add_4, add_8, add_10, layer4's every
    convolution, norm and add, avgpool and fc)."""
    def marked(checkpoints):
        g = models.get("resnet50", micro_batch=1, recompute_checkpoints=checkpoints)
        return [op.name for op in g.ops if op.attrs.get("recomputation_checkpoint")]
    assert marked(["layer2/1", "layer4/0/bn2", "layer1/0/add", "classifier/fc"]) == [
        "layer1/0/add", "layer2/1/relu_3", "layer4/0/bn2/batchnorm", "classifier/fc/add"]  # a block: its last ReLU
    gc = marked("graphcore")
    assert len(gc) == 35 and gc[:3] == ["layer1/0/add", "layer1/1/add", "layer1/2/add"]
    assert "layer2/1/add" not in gc and "layer4/0/downsample/conv/conv2d" in gc and gc[-1] == "classifier/fc/add"
    assert sum(n.startswith("layer4/") for n in gc) == 23
    with pytest.raises(GraphError, match="'layer4/0/relu' is not a block or an op of one"):
        marked(["layer4/0/relu"])
    with pytest.raises(GraphError, match="Graphcore's PyTorch ResNet-50 config's list"):
        models.get("resnext101", micro_batch=1, recompute_checkpoints="graphcore")


@pytest.mark.parametrize("name,params,param", [
    ("bert-base", dict(micro_batch=0), "micro_batch"),
    ("bert-base", dict(foo=1), "foo"),
    ("bert-base", dict(layers_per_ipu=[4, 4]), "layers_per_ipu"),
    ("bert-large", dict(heads=7), "heads"),
    ("bert-base", dict(seq_len=1024), "seq_len"),
    ("bert-base", dict(dtype="int8"), "dtype"),
    ("gpt2-small", dict(dropout=1.5), "dropout"),
    ("gpt2-xl", dict(seq_len=2048), "seq_len"),
    ("resnet50", dict(split_points=["layer9/0"]), "split_points"),
    ("resnet50", dict(split_points=["layer3/0", "layer2/0"]), "split_points"),
    ("resnet50", dict(image_size=8), "image_size"),
    ("resnext101", dict(norm="layer"), "norm"),
    ("resnext101", dict(norm_groups=0), "norm_groups"),
    ("mlp", dict(hidden=[256, 0]), "hidden"),
    ("mlp", dict(hidden=[256], num_layers=3), "num_layers"),
])
def test_invalid_params_raise_graph_error_naming_the_param(name, params, param):
    with pytest.raises(GraphError, match=param) as err:
        models.get(name, **params)
    assert "micro_batch" in str(err.value)  # the valid parameters are listed


def test_unknown_model_lists_known_names():
    with pytest.raises(GraphError, match="bert-base") as err:
        models.get("bert-huge")
    assert "resnet50" in str(err.value)


def test_names_and_describe():
    for n in ("mlp", "bert-base", "bert-large", "gpt2-small", "gpt2-medium", "gpt2-large",
              "gpt2-xl", "resnet50"):
        assert n in models.names()
        assert "micro_batch" in models.describe(n)
    d = models.describe("mlp")
    d["hidden"].append(1)  # a copy: the defaults stay intact
    assert models.describe("mlp")["hidden"] == [256, 256]
    assert models.get("mlp", hidden=128, num_layers=3).num_parameters() == \
        784 * 128 + 128 + 2 * (128 * 128 + 128) + 128 * 10 + 10


@pytest.mark.parametrize("name", ["mlp", "bert-base", "gpt2-small", "resnet50"])
def test_inputs_outputs_and_loss(name):
    g = models.get(name)
    # BERT's MLM training returns its loss only, as Graphcore's scripts anchor it (not the logits)
    assert g.loss == g.outputs[-1] and len(g.outputs) == (1 if name == "bert-base" else 2)
    if name == "bert-base":
        g = models.get(name, with_loss=False)
    logits = g.tensor(g.outputs[0])
    assert logits.shape[-1] == {"mlp": 10, "bert-base": 30522, "gpt2-small": 50257, "resnet50": 1000}[name]
    for t in map(g.tensor, g.inputs):
        is_index = t.name.endswith(("ids", "labels", "mask"))
        assert t.dtype == ("int32" if is_index else g.tensor(g.outputs[0]).dtype)
    if name != "bert-base":
        assert g.tensor("labels").dtype == "int32"


def test_without_head_outputs_hidden_states():
    g = models.get("gpt2-small", seq_len=64, with_head=False)
    assert g.loss is None and [g.tensor(o).shape for o in g.outputs] == [(1, 64, 768)]
    assert "labels" not in g.inputs


@pytest.mark.parametrize("model, vocab, steps", [("bert-base", 30400, 5), ("gpt2-small", 50264, 8)])
def test_embedding_serialization_splits_the_tied_projection_over_the_vocabulary(model, vocab, steps):
    """embedding_serialization (PopART's embedding_serialization_vocab_steps, the PyTorch examples'
    SerializedLinear): that many matmuls of the table's row blocks, their logits concatenated; in
    training the table's gradient gathers the pieces' gradients in one pad (no adds), beside the
    lookup's gradient."""
    from sim.graph.training import expand_training
    g = models.get(model, seq_len=128, num_layers=1, vocab=vocab, embedding_serialization=steps)
    pieces = [op for op in g.ops if op.kind == "matmul" and "/serial" in op.name]
    assert len(pieces) == steps
    assert {g.tensors[op.outputs[0]].shape[-1] for op in pieces} == {vocab // steps}
    plain = models.get(model, seq_len=128, num_layers=1, vocab=vocab)
    assert [g.tensors[o].shape for o in g.outputs] == [plain.tensors[o].shape for o in plain.outputs]
    t = expand_training(g, "sgd")
    pads = [op for op in t.ops if op.kind == "pad" and "/serial" in op.name]
    assert len(pads) == 1 and len(pads[0].inputs) == steps


def test_embedding_serialization_must_divide_the_vocabulary():
    with pytest.raises(GraphError, match=r"embedding_serialization=7: must divide vocab=30522"):
        models.get("bert-base", embedding_serialization=7)


def test_bert_mean_pool_head_is_a_sentence_embedding():
    """``head="mean_pool"`` (E5, sentence-transformers): the encoder output's mean over the tokens the
    attention mask keeps, L2-normalised, one (B, H) output on the last layer's IPU; no loss to give."""
    g = models.get("bert-base", micro_batch=2, seq_len=128, head="mean_pool", with_loss=False,
                   layers_per_ipu=[6, 6])
    (out,) = g.outputs
    assert g.tensors[out].shape == (2, 768) and g.loss is None
    pool = [op for op in g.ops if op.name.startswith("mean_pool/")]
    assert [op.kind for op in pool] == ["cast", "reshape", "mul", "reduce_sum", "reduce_sum", "div", "mul",
                                        "reduce_sum", "sqrt", "div"]
    assert {op.ipu for op in pool} == {1}
    with pytest.raises(Exception, match="mean_pool head has no loss"):
        models.get("bert-base", micro_batch=2, seq_len=128, head="mean_pool")


def test_clip_text_encoder_as_transformers_builds_it():
    """CLIP ViT-L/14's text tower (CLIPTextModel): 12 causal layers with three projections and Q scaled before the
    scores' matmul, the last hidden state and one pooled end-of-text row per text."""
    g = models.get("clip-text-vit-l-14", micro_batch=4)
    assert [g.tensor(t).shape for t in g.outputs] == [(4, 77, 768), (4, 768)]
    kinds = {op.name: op.kind for op in g.ops}
    assert sum(n.endswith("self_attn/pre_scale") for n in kinds) == 12
    assert not any(n.endswith("self_attn/scale") for n in kinds)
    assert sum(n.endswith(("self_attn/query/matmul", "self_attn/key/matmul", "self_attn/value/matmul"))
               for n in kinds) == 36
    assert [k for n, k in kinds.items() if n.startswith("eot/")] == ["reduce_max", "add", "reshape", "gather"]


def test_roformer_v2_small_as_junnyu_builds_it():
    """RoFormer-V2 small (models/roformer.py): 15,374,210 parameters (word 12,000 x 384 and token-type 2 x 384
    embeddings, 6 bias-free layers of 4 x 384² + 2 x 384 x 1,536, the head's 384² + 384 and 384 x 2 + 2); Q and K
    rotated in every layer, V not; 13 gain-free norms; ``pre_scale`` moves the score scale onto Q."""
    g = models.get("roformer-v2-small", micro_batch=3)
    assert g.num_parameters() == 12000 * 384 + 2 * 384 + 6 * (4 * 384 ** 2 + 2 * 384 * 1536) + 384 ** 2 + 384 + 770
    assert [g.tensor(t).shape for t in g.outputs] == [(3, 2)]
    names = [op.name for op in g.ops]
    assert sum(n.endswith("rotary_query/stack") for n in names) == 6
    assert sum(n.endswith("rotary_key/stack") for n in names) == 6
    assert not any("rotary_value" in n for n in names)
    assert sum(n.endswith("/sqrt") for n in names) == 13
    encoder_weights = [t for op in g.ops if op.name.startswith("encoder/") for t in op.inputs
                       if g.tensor(t).role == "weight"]
    assert len(encoder_weights) == 6 * 6  # Q, K, V, output, and the FFN's two: no biases
    scaled = models.get("roformer-v2-small", pre_scale=True)
    assert [scaled.tensor(op.outputs[0]).shape for op in scaled.ops if op.name.endswith("attention/pre_scale")] == \
        [(1, 6, 128, 64)] * 6
    with pytest.raises(GraphError, match="heads"):
        models.get("roformer-v2-small", heads=5)


def test_clip_scores_a_batch_of_images_against_its_texts():
    """CLIP ViT-B/32 (models/clip.py): 50 image tokens through 12 blocks, 100 x 77 text tokens through 12 causal
    blocks, one end-of-text row per text gathered, and both logits outputs."""
    g = models.get("clip-vit-b-32", micro_batch=4)
    outputs = [g.tensor(t).shape for t in g.outputs]
    assert outputs == [(4, 100), (100, 4)]
    scores = [op for op in g.ops if op.name.endswith("/scores")]
    assert sorted({g.tensor(op.outputs[0]).shape for op in scores}) == [(4, 12, 50, 50), (100, 8, 77, 77)]
    assert sum(op.name.startswith("text/") for op in scores) == 12
    assert [op.kind for op in g.ops if op.name.startswith("text/eot/")] == ["reduce_max", "add", "reshape", "gather"]
    with pytest.raises(GraphError, match="patch"):
        models.get("clip-vit-b-32", patch=30)


@pytest.mark.parametrize("name, params, attentions", [
    ("vit-base-16", {"num_layers": 1}, 1),
    ("conformer-medium", {"encoder_blocks": 1, "decoder_blocks": 1}, 3)])  # the decoder's self and source
def test_attention_scores_divided_as_the_sources_write_them(name, params, attentions):
    """Graphcore's ViT (models/modules.py) and WeNet's Conformer (attention.py) divide the scores by
    sqrt(d_k): a Div of the scores by a one-element constant, not a scale (sim.cost prices the two apart)."""
    g = models.get(name, **params)
    scaled = [op for op in g.ops if op.name.endswith(("attn/scale", "attention/scale"))]
    assert len(scaled) == attentions
    assert all(op.kind == "div" and g.tensors[op.inputs[1]].shape == (1,) for op in scaled)


@pytest.mark.parametrize("name, params, param", [
    ("bert-base", dict(num_layers=1, head="squad", mask_tokens=5), "mask_tokens"),
    ("bert-base", dict(num_layers=1, head="squad", vocab=30528, embedding_serialization=2), "embedding_serialization"),
    ("bert-base", dict(num_layers=1, with_head=False, head="squad"), "head"),
    ("bert-base", dict(num_layers=1, packing_factor=1.5), "packing_factor"),
    ("gpt2-small", dict(num_layers=1, decode_cache=8, with_loss=False, dropout=0.0, seq_len=16), "seq_len"),
    ("gpt2-small", dict(num_layers=1, with_head=False, vocab=50264, embedding_serialization=8),
     "embedding_serialization"),
    ("resnet50", dict(norm_groups=16), "norm_groups"),
    ("efficientnet-b0", dict(norm="batch", norm_groups=8), "norm_groups"),
    ("mlp", dict(hidden=5, num_layers=0), "hidden"),
])
def test_a_parameter_the_model_would_not_use_is_refused(name, params, param):
    """A parameter given a value that the model, as the others build it, ignores is an error naming it."""
    with pytest.raises(GraphError, match=f"parameter {param}=.* has no effect"):
        models.get(name, **params)


def test_a_parameter_given_its_default_where_it_has_no_effect_is_accepted():
    models.get("bert-base", num_layers=1, head="squad", mask_tokens="auto", embedding_serialization=1)
    models.get("resnet50", norm_groups=32)


@pytest.mark.parametrize("name, params, named", [
    ("efficientnet-b0", dict(group_dim=5), "group_dim=5"),  # was: the conv's "not divisible by groups 6"
    ("resnext101", dict(norm_groups=7), "norm_groups=7"),  # was: group_norm stem/bn1's channels
    ("resnet50", dict(norm="group", norm_groups=48), "norm_groups=48"),
    ("conformer-medium", dict(mel_bins=6, encoder_blocks=1), "mel_bins=6"),  # was: named max_frames=1220
])
def test_a_value_that_does_not_fit_the_architecture_is_named(name, params, named):
    with pytest.raises(GraphError, match=named):
        models.get(name, **params)


def test_efficientnet_group_dim_dividing_every_block_or_above_them_builds():
    g = models.get("efficientnet-b0", group_dim=16, expand_ratio=4)
    assert all(op.attrs.get("groups", 1) * 16 == g.tensors[op.inputs[0]].shape[1]
               for op in g.ops if op.name.endswith("b/conv/conv2d"))
    models.get("efficientnet-b0", group_dim=2000)  # larger than every block: dense convolutions
    # Graphcore's B4 G16 (validation rows B4-B6): block1b's 24 channels are one group of 24 (24 // 16 groups)
    g = models.get("efficientnet-b4", group_dim=16, expand_ratio=4, split_points=["block4a"])
    [conv] = [op for op in g.ops if op.name.endswith("block1b/b/conv/conv2d")]
    assert conv.attrs.get("groups", 1) == 1 and g.tensors[conv.inputs[0]].shape[1] == 24


def test_gpt2_decode_cache_of_one_and_positions_below_the_unused_seq_len():
    small = dict(num_layers=1, with_loss=False, dropout=0.0)
    g = models.get("gpt2-small", decode_cache=1, **small)  # was: a (2, 1, 12, 0, 64) slice of the older entries
    assert g.tensors[g.outputs[0]].shape == (1, 1, 1)
    models.get("gpt2-small", decode_cache=8, n_positions=16, **small)  # was: seq_len=1024 must be <= n_positions=16


def test_swin_inference_model_has_no_stochastic_depth():
    """timm's DropPath is the identity in eval mode: with_loss=False (the inference model, as PopRT exports it)
    draws no random mask, whatever the default drop_path; a drop_path given to it is refused."""
    small = dict(depths=[2, 2], heads=[3, 6], image_size=56, micro_batch=1)
    assert any(op.kind == "random_uniform" for op in models.get("swin-tiny", **small).ops)
    inference = models.get("swin-tiny", with_loss=False, **small)
    assert not any(op.kind == "random_uniform" or "drop_path" in op.name for op in inference.ops)
    assert len(models.get("swin-tiny", with_loss=False, drop_path=0.0, **small).ops) == len(inference.ops)
    with pytest.raises(GraphError, match="drop_path"):
        models.get("swin-tiny", with_loss=False, drop_path=0.1, **small)


# --- layers_per_ipu: only IPU 0 may be left without layers -----------------------------------------------------

SMALL_SWIN = dict(depths=[2, 2], heads=[3, 6], image_size=56, micro_batch=1)
SMALL_CONFORMER = dict(micro_batch=1, max_frames=64, encoder_blocks=2, decoder_blocks=1)
#: (model, parameters for 2 layers, the block IPU 0 holds before the layers, the layers' block prefix)
PIPELINED = [("bert-base", dict(num_layers=2, seq_len=16), "embedding", "layer"),
             ("gpt2-small", dict(num_layers=2, seq_len=16), "embedding", "layer"),
             ("vit-base-16", dict(num_layers=2, micro_batch=1), "embedding", "layer"),
             ("swin-tiny", dict(SMALL_SWIN, depths=[1, 1]), "patch_embed", "layer"),
             ("conformer-medium", SMALL_CONFORMER, "frontend", "encoder")]


@pytest.mark.parametrize("name, params, first, layer", PIPELINED)
@pytest.mark.parametrize("counts, entry, kept", [([2, 0], 1, [2]), ([0, 0, 2], 1, [0, 2]), ([1, 0, 1], 1, [1, 1]),
                                                 ([0, 2, 0], 2, [0, 2])])
def test_an_ipu_that_would_hold_nothing_is_refused(name, params, first, layer, counts, entry, kept):
    """A 0 after the first entry of layers_per_ipu leaves an IPU empty: an error naming the parameter, the entry
    and the fix (was: [2, 0] ran on one IPU, [0, 0, 2] failed later for 3 IPUs not being a power of two)."""
    with pytest.raises(GraphError, match=rf"layers_per_ipu=\[.*\]: entry {entry} is 0, so IPU {entry} would hold "
                                         rf"nothing at all; only the first entry may be 0 .*"
                                         rf"layers_per_ipu={re.escape(str(kept))}"):
        models.get(name, layers_per_ipu=counts, **params)


@pytest.mark.parametrize("name, params, first, layer", PIPELINED)
def test_a_leading_zero_leaves_ipu_0_the_part_before_the_layers(name, params, first, layer):
    """layers_per_ipu=[0, ...]: IPU 0 holds what the model puts before its layers (the embeddings, Conformer's
    front end) and no layer, as Graphcore's BERT configs ([0, 4, 4, 4], MLPerf's encoder_start_ipu 1) and the
    planner's splits have it (was, for Conformer: the front end moved to IPU 1 with the first block)."""
    g = models.get(name, layers_per_ipu=[0, 1, 1], **params)
    assert {op.ipu for op in g.ops if op.block == first} == {0}
    layers = [op.ipu for op in g.ops if op.block is not None and op.block.startswith(layer)]
    assert set(layers) == {1, 2}
    assert sorted(g.ipus_used()) == [0, 1, 2]


def test_conformer_front_end_is_on_ipu_0_as_its_docstring_says():
    for counts in ([0, 2], [1, 1], [2]):
        g = models.get("conformer-medium", layers_per_ipu=counts, **SMALL_CONFORMER)
        assert {op.ipu for op in g.ops if op.name.startswith(("global_cmvn/", "subsampling/", "pos_enc/"))} == {0}
        assert "IPU 0" in models.conformer.__doc__ and "alone with a leading 0" in models.conformer.__doc__


# --- list parameters take lists --------------------------------------------------------------------------------

@pytest.mark.parametrize("name, params, param", [
    ("bert-base", dict(num_layers=1, fp32_ops=0), "fp32_ops"),
    ("gpt2-small", dict(num_layers=1, seq_len=16, fp32_ops=False), "fp32_ops"),
    ("bert-base", dict(num_layers=1, fp32_ops=None), "fp32_ops"),  # its default is [], not None
    ("resnet50", dict(split_points=0), "split_points"),
    ("resnet50", dict(split_points=""), "split_points"),
    ("efficientnet-b0", dict(split_points=0), "split_points"),
    ("unet", dict(split_points=0), "split_points"),
    ("resnet50", dict(recompute_checkpoints=0), "recompute_checkpoints"),
    ("resnet50", dict(recompute_checkpoints="layer2/0"), "recompute_checkpoints"),
])
def test_a_list_parameter_given_a_value_that_is_not_a_list_is_refused(name, params, param):
    """A falsy non-list (0, False, "") is not an empty list (was: read as none)."""
    with pytest.raises(GraphError, match=rf"parameter {param}=.*: expected a list of .*\(\[\] for none\)"):
        models.get(name, **params)


@pytest.mark.parametrize("name, params, param", [
    ("bert-base", dict(num_layers=1), "fp32_ops"),
    ("resnet50", dict(micro_batch=1), "split_points"),
    ("resnet50", dict(micro_batch=1), "recompute_checkpoints"),
    ("unet", dict(micro_batch=1), "split_points"),
])
def test_an_explicit_empty_list_is_none(name, params, param):
    default = models.get(name, **params)
    empty = models.get(name, **{param: [], **params})
    assert [(op.kind, op.name, op.ipu) for op in empty.ops] == [(op.kind, op.name, op.ipu) for op in default.ops]


# --- swin's recompute_checkpoint_every_layer is True or False ------------------------------------------------

def test_swin_recompute_checkpoint_every_layer_is_a_flag_as_listed():
    """`ipusim models` lists swin's default as false, as its docstring says; None (BERT's "on when pipelined")
    is refused (was: accepted, checkpointing a pipelined Swin that the listing said would not be)."""
    assert models.describe("swin-tiny")["recompute_checkpoint_every_layer"] is False
    with pytest.raises(GraphError, match="recompute_checkpoint_every_layer=None: expected True or False"):
        models.get("swin-tiny", recompute_checkpoint_every_layer=None, layers_per_ipu=[2, 2], **SMALL_SWIN)
    g = models.get("swin-tiny", layers_per_ipu=[2, 2], **SMALL_SWIN)
    assert not any(op.kind == "checkpoint" for op in g.ops)


# --- conformer's ctc_weight, as the example takes it -----------------------------------------------------------

@pytest.mark.parametrize("weight", [0, 0.0, 0.3, 1, 1.0])
def test_conformer_ctc_weight_from_0_to_1_builds_both_branches_as_the_example(weight):
    """Graphcore's Conformer.forward (speech/conformer/pytorch/src/conformer.py) computes the CTC and the
    attention loss whatever ctc_weight, returns both beside (1 - w) x attention + w x CTC, and checks no
    range: a weight of 1 builds (was: refused) and 0 and 1 still build and price both branches."""
    kinds = {op.kind for op in models.get("conformer-medium", ctc_weight=weight, **SMALL_CONFORMER).ops}
    assert {"ctc_loss", "softmax_cross_entropy"} <= kinds


@pytest.mark.parametrize("weight", [-0.1, 1.5, True, "0.3", None])
def test_conformer_ctc_weight_outside_0_to_1_is_refused(weight):
    with pytest.raises(GraphError, match=r"ctc_weight=.*expected a weight from 0 to 1"):
        models.get("conformer-medium", ctc_weight=weight, **SMALL_CONFORMER)


# --- microbenchmarks' sizes ------------------------------------------------------------------------------------

def test_amp_tile_takes_at_most_the_largest_ipus_tiles():
    from sim.hardware.configs import available_systems
    from sim.hardware.system import load_system
    assert models.microbench.MAX_TILES == max(load_system(n).ipu.tiles for n in available_systems()) == 1472
    assert models.get("amp-tile", tiles=1472).ops and models.get("amp-tile", tiles=1).ops
    with pytest.raises(GraphError, match=r"tiles=5000: expected an integer from 1 to 1472.*largest IPU in configs/"):
        models.get("amp-tile", tiles=5000)


def test_tut6_col_split_at_most_cols():
    models.get("tut6-matvec", cols=7, col_split=7)
    with pytest.raises(GraphError, match=r"col_split=8: expected an integer from 1 to cols=7"):
        models.get("tut6-matvec", cols=7, col_split=8)


@pytest.mark.parametrize("placement, words", [
    ([[2, [2, 2]]], "no entry is on IPU 1, so it would hold nothing at all while IPU 2 is used"),
    ([[1, [1, 1]], [3, [1, 1]]], "no entry is on IPU 2"),
    ([[1, [2, 2]], [2, [0, 0]]], "entry 1 puts no attention and no FFN on IPU 2"),
])
def test_bert_att_ffn_placement_leaving_an_ipu_empty_is_refused(placement, words):
    """MLPerf's att_ffn_placement, as layers_per_ipu: no IPU may hold nothing (was: built on IPUs 0 and 2)."""
    with pytest.raises(GraphError, match=rf"att_ffn_placement=.*{words}"):
        models.get("bert-base", num_layers=2, seq_len=16, att_ffn_placement=placement)
    models.get("bert-base", num_layers=2, seq_len=16, att_ffn_placement=[[1, [2, 1]], [0, [0, 1]]])


def test_bert_hf_attention_and_split_qkv_are_one_or_the_other():
    """``hf_attention`` runs Hugging Face's three Q, K, V matmuls; ``split_qkv`` concatenates their weights into
    PopART BERT's one matmul: asked together, the model says which to drop."""
    with pytest.raises(GraphError, match=r"hf_attention=True: runs three Q, K, V matmuls, while split_qkv "
                                         r"concatenates their weights into one: give one of them"):
        models.get("bert-base", num_layers=1, hf_attention=True, split_qkv=True)


@pytest.mark.parametrize("name, params", [("bert-base", dict(num_layers=2)), ("vit-base-16", dict(num_layers=2)),
                                          ("swin-tiny", dict(depths=[2, 2, 2, 2])), ("gpt2-small", dict(num_layers=2))])
def test_the_gelu_parameter_picks_the_form(name, params):
    """``gelu="erf"``: each GELU is PopART's GeluErf (``gelu_erf``), kept in fp32 with ``fp32_ops`` as the tanh one;
    the default is popnn's tanh GELU; anything else names the choices."""
    def kinds(**more):
        return {op.kind for op in models.get(name, **params, **more).ops if op.kind.startswith("gelu")}
    assert kinds() == {"gelu"}
    assert kinds(gelu="erf") == {"gelu_erf"}
    with pytest.raises(GraphError, match=r"gelu.*expected \"tanh\".*or \"erf\""):
        models.get(name, **params, gelu="exact")
    if name == "bert-base":
        g = models.get(name, **params, gelu="erf", fp32_ops=["gelu"])
        assert {g.tensors[op.inputs[0]].dtype for op in g.ops if op.kind == "gelu_erf"} == {"float32"}
