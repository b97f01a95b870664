"""Packed BERT (several sequences per micro-batch row) and attention/FFN placement in the zoo's BERT.

Packed sequences follow Graphcore's packed BERT (Krell et al. 2021; MLPerf v1.0-v2.0): a
block-diagonal attention mask per pack, position ids streamed in, the MLM head on the first
``mask_tokens`` positions, and throughput counted in sequences through ``Graph.samples_per_row``.
``att_ffn_placement`` is MLPerf v1.1/v2.0 BERT's option placing a layer's attention and FFN apart.
"""

import json

import pytest

import models
import sim
from sim.errors import GraphError
from sim.results.report import format_summary

SMALL = dict(micro_batch=2, seq_len=128, num_layers=4, hidden=128, heads=2, vocab=1024, dropout=0.0)
SPLIT = [[1, [2, 1]], [2, [1, 2]], [0, [1, 1]]]  # layer 1: attention on IPU 1, FFN on IPU 2


def packed(**kw):
    return models.get("bert-base", **{**SMALL, "max_sequences_per_pack": 3, **kw})


def test_samples_count_sequences_exactly():
    """samples = micro-batch rows (packs) x the packing factor, in the Run, its JSON and its summary."""
    o = sim.Options().replicationFactor(2).deviceIterations(3)
    o.Training.gradientAccumulation(4)
    run = sim.simulate(packed(packing_factor=2.0), "ipu-pod16", o, training=True, optimizer="lamb")
    assert run.rows == 2 * 3 * 4 * 2
    assert run.samples_per_row == 2.0 and run.samples == 96 and isinstance(run.samples, int)
    assert run.samples_per_second == pytest.approx(96 / run.seconds)
    d = json.loads(json.dumps(run.summary()))
    assert d["samples"] == 96 and d["samples_per_row"] == 2.0
    assert "96 = 48 micro-batch rows x 2 samples per row" in format_summary(run)
    run = sim.simulate(packed(), "ipu-mk2", sim.Options())  # SL128: the PyTorch config's 1.17
    assert run.samples == pytest.approx(2 * 1.17) and run.samples_per_row == 1.17
    plain = sim.simulate(models.get("bert-base", **SMALL), "ipu-mk2", sim.Options())
    assert plain.samples == 2 and plain.samples_per_row == 1.0 and " x " not in format_summary(plain).split(
        "samples ")[1].splitlines()[0]


def test_packed_inputs_mask_and_heads_per_pack():
    g = packed()
    B, S = 2, 128
    assert g.samples_per_row == 1.17
    assert g.inputs == ["input_ids", "input_mask", "token_type_ids", "position_ids", "labels"]
    assert {n: g.tensors[n].shape for n in g.inputs} == {
        "input_ids": (B, S), "input_mask": (B, S), "token_type_ids": (B, S), "position_ids": (B, S),
        "labels": (B, 20 + 3 - 1)}  # PopART's max_lm_predictions: mask_tokens + max_sequences_per_pack - 1
    masks = [op for op in g.ops if op.name.endswith("pack_mask")]
    assert len(masks) == 4  # one per layer, from the streamed (B, S) indices
    for op in masks:
        assert g.tensors[op.outputs[0]].shape == (B, 1, S, S) and g.tensors[op.outputs[0]].dtype == "float16"
        assert [g.tensors[t].shape for t in op.inputs] == [(B, 1, S, 1), (B, 1, 1, S)]
        add = next(o for o in g.ops if op.outputs[0] in o.inputs)
        assert add.name.endswith("attention/mask") and g.tensors[add.outputs[0]].shape == (B, 2, S, S)
    position = next(op for op in g.ops if op.name.endswith("embeddings/position"))
    assert position.inputs[0] == "position_ids" and g.tensors[position.outputs[0]].shape == (B, S, 128)
    sliced = next(op for op in g.ops if op.name.endswith("masked_tokens"))
    assert g.tensors[sliced.outputs[0]].shape == (B, 22, 128)
    g512 = packed(mask_tokens=76, seq_len=512)
    assert g512.tensors["labels"].shape == (B, 76) and g512.samples_per_row == 2.0
    plain = models.get("bert-base", **SMALL)
    assert "position_ids" not in plain.inputs and plain.samples_per_row == 1.0
    assert not any(op.name.endswith("pack_mask") for op in plain.ops)


def _ipus(g, part: str) -> list[int]:
    """The IPU of each layer's ``part`` ops (attention or ffn), checking they share one IPU."""
    out = []
    for i in range(4):
        ipus = {op.ipu for op in g.ops if op.name.startswith(f"encoder/layer{i}/{part}/")}
        assert len(ipus) == 1, (i, part, ipus)
        out.append(ipus.pop())
    return out


def test_att_ffn_placement_splits_a_layer():
    g = models.get("bert-base", **SMALL, att_ffn_placement=SPLIT)
    assert _ipus(g, "attention") == [1, 1, 2, 0]
    assert _ipus(g, "ffn") == [1, 2, 2, 0]
    stage = {op.name: op.stage for op in g.ops}
    assert stage["encoder/layer1/attention/qkv/matmul"] == 1 and stage["encoder/layer1/ffn/fc1/matmul"] == 2
    assert {op.ipu for op in g.ops if op.block == "embedding"} == {0}
    assert {(op.ipu, op.stage) for op in g.ops if op.block == "head"} == {(0, 3)}  # with the last layer
    # checkpoints stay per layer: each layer's output but the last, as with layers_per_ipu
    ck = sorted(op.name for op in g.ops if op.attrs.get("recomputation_checkpoint"))
    whole = models.get("bert-base", **SMALL, layers_per_ipu=[0, 2, 1, 1])
    assert ck == sorted(op.name for op in whole.ops if op.attrs.get("recomputation_checkpoint"))
    assert ck == [f"encoder/layer{i}/ffn_norm/layernorm" for i in range(3)]


def test_att_ffn_placement_trains_pipelined():
    """MLPerf v1.1 POD16's shape in small: layers on IPUs 1-3, the last FFN back on IPU 0 with the head."""
    o = sim.Options()
    o.Training.gradientAccumulation(16)
    split = [[1, [2, 1]], [2, [1, 1]], [3, [1, 1]], [0, [0, 1]]]
    run = sim.simulate(packed(att_ffn_placement=split, packing_factor=2.0), "ipu-m2000", o, training=True,
                       optimizer="lamb")
    assert run.executable.ipus_per_replica == 4 and len({s.index for s in run.executable.stages}) >= 5
    assert run.samples == 2 * 16 * 2


@pytest.mark.parametrize("params, words", [
    (dict(att_ffn_placement=[[1, [2, 2]], [0, [1, 1]]]), "must each sum to num_layers=4"),
    (dict(att_ffn_placement=[[1, [1, 2]], [2, [3, 2]]]), "places the FFN of layer 1 before its attention"),
    (dict(att_ffn_placement=[[1, [2, 2]], [1, [2, 2]]]), "both on IPU 1"),
    (dict(att_ffn_placement=[[1, [4]]]), "expected a list of [ipu, [attentions, ffns]]"),
    (dict(att_ffn_placement=SPLIT, layers_per_ipu=[1, 1, 1, 1]), "not both"),
    (dict(max_sequences_per_pack=3, packing_factor=3.5), "from 1 to max_sequences_per_pack=3"),
    (dict(max_sequences_per_pack=3, seq_len=256), "no published packing factor for seq_len=256"),
])
def test_bad_parameters_name_what_is_wrong(params, words):
    with pytest.raises(GraphError, match="invalid parameter") as e:
        models.get("bert-base", **{**SMALL, **params})
    assert words in str(e.value)
