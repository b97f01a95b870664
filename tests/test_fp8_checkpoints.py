"""BERT's 8-bit activation checkpoints (``checkpoint_dtype="float8"``), as MLPerf v2.0 POD16 runs them.

The source (training_results_v2.0 Graphcore ``bert_model.py`` ``Bert.checkpoint``) casts each
checkpoint but the last stage's to an 8-bit float, checkpoints that, and casts it back, so the
pipeline stashes one byte per element instead of two.
"""

from dataclasses import replace

import pytest

import models
import sim
from sim import validation as v
from sim.errors import GraphError

SMALL = dict(micro_batch=2, seq_len=128, num_layers=4, hidden=128, heads=2, vocab=1024, dropout=0.0,
             max_sequences_per_pack=3, packing_factor=2.0)
#: IPU 1 holds layers 0 and 1, so layer 0's checkpoint is inside a stage and stashed there
TWO_ON_IPU1 = [[1, [2, 2]], [2, [1, 1]], [3, [1, 1]]]
CHECKPOINT_ELEMENTS = 2 * 128 * 128  # micro-batch x seq_len x hidden


def bert(placement, checkpoint_dtype):
    return models.get("bert-base", **SMALL, att_ffn_placement=placement, checkpoint_dtype=checkpoint_dtype)


def checkpoints(g):
    return [(op.name, g.tensor(op.outputs[0]).dtype) for op in g.ops if op.attrs.get("recomputation_checkpoint")]


def test_each_checkpoint_is_an_8_bit_copy_but_the_last_stage_s():
    # layers 2 and 3 end on IPU 0 with the MLM head: the last stage, whose checkpoint is not stashed
    g = bert([[1, [1, 1]], [2, [1, 1]], [0, [2, 2]]], "float8")
    assert checkpoints(g) == [("encoder/layer0/checkpoint_to_fp8", "float8"),
                              ("encoder/layer1/checkpoint_to_fp8", "float8"),
                              ("encoder/layer2/ffn_norm/layernorm", "float16")]
    # the layer after an 8-bit checkpoint reads the fp16 copy cast back
    back = next(op for op in g.ops if op.name == "encoder/layer0/checkpoint_from_fp8")
    assert g.tensor(back.outputs[0]).dtype == "float16"
    assert checkpoints(bert([[1, [1, 1]], [2, [1, 1]], [0, [2, 2]]], None)) == [
        (f"encoder/layer{i}/ffn_norm/layernorm", "float16") for i in range(3)]


def test_the_stash_holds_one_byte_per_checkpoint_element():
    o = sim.Options()
    o.Training.gradientAccumulation(16)
    stash = {}
    for dtype in (None, "float8"):
        run = sim.simulate(bert(TWO_ON_IPU1, dtype), "ipu-m2000", o, training=True, optimizer="lamb")
        stash[dtype] = {ipu: m["by_role"]["stash"] for ipu, m in run.memory.items()}
    saved = {ipu: stash[None][ipu] - stash["float8"][ipu] for ipu in stash[None]}
    # only IPU 1 stashes a checkpoint (layer 0's): every stashed copy shrinks by one byte per element
    assert {ipu for ipu, s in saved.items() if s} == {1}
    copies, rest = divmod(saved[1], CHECKPOINT_ELEMENTS)
    assert rest == 0 and copies >= 2


def test_bad_checkpoint_dtype_names_the_choices():
    with pytest.raises(GraphError, match="checkpoint_dtype") as e:
        bert(TWO_ON_IPU1, "int8")
    assert "'float8'" in str(e.value)


def test_mlperf_pod16_8_bit_checkpoints_relieve_its_fullest_tile():
    """M17's configuration with the config's FLOAT8 checkpoints fits with room; with fp16 ones (LAMB's state in
    fp16 as the config keeps it, lamb_accl_dtype) IPU 2's fullest tile, where the stashed checkpoints of the
    micro-batches in flight are live, is at 98 % of the tile (it was a few kB over until a call's copies ran
    one copy codelet, 2026-12-04, and 99 % until a layer's matmul passes shared their codelets): beyond the 94 %
    any configuration that ran on hardware reaches here, so the run says it may not fit. The 8-bit checkpoints
    take more than 30 kB off that tile, as the source has them make the configuration fit."""
    row = v.PUBLISHED_BY_ID["M17"]
    assert dict(row.setup.params)["checkpoint_dtype"] == "float8" and row.setup.state_dtype == "float16"
    setup = row.setup
    run = sim.simulate(setup.graph(), setup.system, setup.options(), training=True, optimizer=setup.sim_optimizer())
    float8 = run.memory[2]
    fp16 = replace(setup, params=tuple((k, val) for k, val in setup.params if k != "checkpoint_dtype"))
    wide = sim.simulate(fp16.graph(), fp16.system, fp16.options(), training=True, optimizer=fp16.sim_optimizer())
    half = wide.memory[2]
    assert half["peak_tile_bytes"] > 0.97 * half["tile_capacity_bytes"]
    assert float8["peak_tile_bytes"] + 30_000 < half["peak_tile_bytes"]
    [note] = [n for n in wide.executable.notes if n.startswith("fullest tile near capacity")]
    assert "IPU 2 98%" in note and "may not fit" in note
