"""GPT-2 greedy generation with a KV cache, as graphcore/PopTransformer runs it (models.gpt2 decode_cache)."""

import pytest

import models
import sim
from sim.errors import GraphError
from sim.validation.setups import _gpt2_decode

SHARDED = [0, 6, 7, 7, 7, 7, 7, 7]


def _decode(batch=1):
    return models.get("gpt2-xl", micro_batch=batch, decode_cache=264, with_loss=False, dropout=0.0,
                      layers_per_ipu=SHARDED)


def test_one_iteration_of_the_loop_on_eight_ipus():
    """The embedding, LM head and top-1 on IPU 0, blocks 0-5 on IPU 1 and 7 an IPU after that,
    ln_f with the last block; a (2, B, 25, 264, 64) cache per block, copied twice on its tiles and once
    across them; the scores over all 264 positions; the parameters those of GPT2-XL alone."""
    g = _decode(batch=8)
    ipu = {op.name: op.ipu for op in g.ops}
    assert ipu["embeddings/wte_lookup"] == 0 and ipu["lm_head/top1"] == 0 and ipu["lm_head/decoder"] == 0
    assert {ipu[n] for n in ipu if n.startswith("h5/")} == {1} and {ipu[n] for n in ipu if n.startswith("h6/")} == {2}
    assert {ipu[n] for n in ipu if n.startswith(("h47/", "ln_f"))} == {7}
    caches = [t for t in g.tensors.values() if t.name.endswith("kv_cache")]
    assert len(caches) == 48 and {t.shape for t in caches} == {(2, 8, 25, 264, 64)}
    kinds = [op.kind for op in g.ops if op.name.startswith("h0/attn/kv_cache/")]
    assert kinds.count("copy") == 2 and kinds.count("remap") == 1
    scores = next(op for op in g.ops if op.name == "h0/attn/scores")
    assert g.tensors[scores.outputs[0]].shape == (8, 25, 1, 264)
    top1 = next(op for op in g.ops if op.name == "lm_head/top1")
    assert top1.kind == "sort" and top1.attrs["k"] == 1 and g.tensors[top1.inputs[0]].shape == (8, 1, 50257)
    assert g.num_parameters() == 1_557_611_200  # the caches are state, not parameters
    assert g.inputs == []  # the ids come from the loop's container on the IPU


def test_decode_refuses_training_and_a_cache_beyond_the_positions():
    with pytest.raises(GraphError, match="decode_cache"):
        models.get("gpt2-xl", decode_cache=264, dropout=0.0)  # with_loss defaults to True
    with pytest.raises(GraphError, match="n_positions"):
        models.get("gpt2-xl", decode_cache=2048, with_loss=False, dropout=0.0)


def test_the_benchmark_setup_runs_the_ipus_in_turn_every_iteration():
    """PopTransformer's configuration: 264 device iterations, no pipeline (each IPU waits for the one
    before), float partials and no outlining; a token of batch 8 costs more than one of batch 1, but
    less than 8 times."""
    setup = _gpt2_decode(1)
    o = setup.options()
    assert setup.device_iterations == 264 and not setup.half_partials and not o.outlining()
    runs = {bs: sim.simulate(_gpt2_decode(bs).graph(), "ipu-pod16", _gpt2_decode(bs).options(), training=False)
            for bs in (1, 8)}
    per_token = {bs: r.seconds / 264 for bs, r in runs.items()}
    assert per_token[1] < per_token[8] < 8 * per_token[1]
    busy = runs[1].breakdown.drop(columns="idle").sum(axis=1)
    assert (busy[1:] > 0).all() and busy.sum() <= runs[1].cycle_count * 1.01  # one IPU at a time
