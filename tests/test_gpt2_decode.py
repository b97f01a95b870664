"""GPT-2 greedy generation with a KV cache, as graphcore/PopTransformer runs it (models.gpt2 decode_cache)."""

import json
import shlex

import pytest

import models
import sim
from sim import planner
from sim.cli import main as cli
from sim.cli import plan as plan_cli
from sim.errors import GraphError
from sim.strategy import AutoStage, ShardedExecution
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


#: a generation loop small enough to plan in seconds
SMALL = dict(num_layers=4, hidden=256, heads=4, vocab=1000, n_positions=64, decode_cache=32, with_loss=False,
             dropout=0.0)


def test_a_pipeline_cannot_run_a_generation_loop_whose_iterations_read_each_others_tokens():
    """Each iteration reads the token, ids and mask the one before wrote (Graph.carries_iterations), so a pipeline,
    which would start an iteration before the one before it finished, is refused with what to do instead; sharded,
    or on one IPU, it runs. A model without such a loop pipelines as before."""
    split = models.get("gpt2-small", **SMALL, layers_per_ipu=[0, 1, 1, 2])
    assert split.carries_iterations and split.copy().carries_iterations
    assert not models.get("gpt2-small", num_layers=4, hidden=256, heads=4, vocab=1000, seq_len=32).carries_iterations
    o = sim.Options().deviceIterations(8)
    with pytest.raises(sim.OptionsError, match="carries tensors from each device iteration to the next.*"
                                               r"ShardedExecution \(--strategy sharded\)"):
        sim.simulate(split, "ipu-m2000", o)
    sharded = sim.Options().deviceIterations(8).setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
    assert sim.simulate(split, "ipu-m2000", sharded).cycle_count > 0
    assert sim.simulate(models.get("gpt2-small", **SMALL), "ipu-mk2", o).cycle_count > 0


def test_a_plan_of_a_generation_loop_runs_its_splits_sharded(capsys):
    """ipusim plan says the loop runs sharded, writes --strategy sharded into the commands of its split
    configurations, bounds them by the IPUs' summed op cycles, and each command runs as planned."""
    space = planner.Space(["ipu-m2000"], global_batch=(4, 4), training=False, device_iterations=8,
                          proportions=[0.6], pipelines=[1, 2, 4], replicas=[1])
    pl = planner.Planner(planner.Model("gpt2-small", dict(SMALL)), space)
    assert pl.sequential and any("runs sharded (--strategy sharded" in n for n in pl.notes)
    table = plan_cli.plan(pl, top=3, workers=1, bar=False, exhaustive=True)
    fits = table[table["status"] == "ok"]
    assert set(fits["pipeline"]) >= {1, 2}
    assert (fits["command"].str.contains("--strategy sharded") == (fits["pipeline"] > 1)).all()
    assert (fits["samples_per_second"] <= fits["bound_samples_per_second"]).all()
    split = fits[fits["pipeline"] > 1].iloc[0]
    assert cli.main(shlex.split(split["command"])[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_per_second"] == split["samples_per_second"]


def test_a_plan_holds_a_generation_loop_to_a_latency_a_token():
    """A generation loop streams nothing an iteration, so its latency in a plan is the time an iteration (a token)
    takes: the call's seconds over its device iterations, never under its latency bound; --max-latency keeps the
    configurations within it."""
    space = dict(global_batch=(4, 4), training=False, device_iterations=8, proportions=[0.6], pipelines=[1, 2],
                 replicas=[1])
    pl = planner.Planner(planner.Model("gpt2-small", dict(SMALL)), planner.Space(["ipu-m2000"], **space))
    assert any(n.startswith("latency: the time one iteration of the generation loop") for n in pl.notes)
    table = plan_cli.plan(pl, top=3, workers=1, bar=False, exhaustive=True)
    fits = table[table["status"] == "ok"]
    assert len(fits) >= 2
    assert (fits["latency_avg_s"] == fits["seconds"] / 8).all()
    assert all(row["latency_avg_s"] >= pl.latency_bound(c)
               for c, (_, row) in zip(pl.candidates, table.iterrows()) if row["status"] == "ok")
    limit = fits["latency_avg_s"].min() * 1.001
    limited = planner.Planner(planner.Model("gpt2-small", dict(SMALL)),
                              planner.Space(["ipu-m2000"], **space, max_latency=limit))
    best = plan_cli.rank(plan_cli.plan(limited, top=3, workers=1, bar=False), limited)
    assert (best["latency_avg_s"] <= limit).all() and len(best) >= 1
