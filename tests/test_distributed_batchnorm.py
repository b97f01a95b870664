"""Distributed batch norm (the zoo's ``bn_span``, Graphcore's TF1 ``--BN-span``): in training each
batch norm and its gradient all-reduce two per-channel vectors over groups of adjacent replicas
(poplibs ``lib/poplin/Norms.cpp``: the statistics' mean and power, the gradient's two sums)."""

import pytest

import models
import sim
from sim import validation as V
from sim.errors import GraphError, OptionsError
from sim.options import Options
from sim.schedule.collectives import plan_collective

BATCH_NORMS = 53  # ResNet-50: the stem's, 3 per bottleneck block (16) and 4 projection shortcuts
SUFFIX = "statistics all-reduce"


def _run(replicas=4, accumulation=3, training=True, stable=False, auto_recomputation=None, **params):
    g = models.get("resnet50", micro_batch=2, image_size=64, **params)
    o = Options().replicationFactor(replicas).enableStableNorm(stable)
    if auto_recomputation is not None:
        o._Popart.set("autoRecomputation", auto_recomputation)
    if training:
        o.Training.gradientAccumulation(accumulation)
    return sim.simulate(g, "ipu-m2000", o, training=training, optimizer="sgd" if training else None)


def _statistics(run):
    t = run.trace
    return t[(t.kind == "collective") & t.name.str.endswith(SUFFIX)]


def test_each_batch_norm_and_its_gradient_all_reduce_once_per_micro_batch():
    stats = _statistics(_run(bn_span=2))  # 3 micro-batches
    assert stats.groupby("ipu").size().to_dict() == {i: 2 * BATCH_NORMS * 3 for i in range(4)}
    first = stats[stats.ipu == 0]
    assert first.name.str.endswith(f"/batchnorm/grad {SUFFIX}").sum() == BATCH_NORMS * 3
    assert first.name.str.endswith(f"/batchnorm {SUFFIX}").sum() == BATCH_NORMS * 3


def test_recomputed_batch_norms_all_reduce_their_statistics_again():
    stats = _statistics(_run(bn_span=2, recompute_checkpoints="blocks", auto_recomputation=4))  # RecomputeAll
    assert (stats.ipu == 0).sum() == 3 * BATCH_NORMS * 3


def test_bytes_are_two_vectors_per_channel():
    stats = _statistics(_run(bn_span=2))
    first = stats[stats.ipu == 0]
    stem = first[first.name == f"stem/bn1/batchnorm {SUFFIX}"]
    assert set(stem.bytes) == {64 * (2 + 4)}  # mean in fp16, power in fp32 partials
    grads = first[first.name.str.startswith("stem/bn1/batchnorm/grad")]
    assert set(grads.bytes) == {64 * 2 * 4}  # the two gradient sums in fp32 partials


def test_groups_are_adjacent_replicas_and_priced_as_gcl_plans_them():
    run = _run(bn_span=2)
    stats = _statistics(run)
    first = stats[stats.name == f"stem/bn1/batchnorm {SUFFIX}"].sort_values(["start", "ipu"])
    starts = first.groupby("ipu").start.first()
    assert starts[0] == starts[1] and starts[2] == starts[3]
    # each step waits for a sync of the program's 4 IPUs, not of the pair's 2 (partition_sync)
    plan = plan_collective(run.executable.system, "all_reduce", 384, [0, 1], partition_ipus=4)
    assert set(first.cycles) == {plan.cycles}


def test_a_larger_partition_makes_every_pair_wait_longer():
    """The same pair's statistics all-reduce in a program of 8 replicas on an IPU-POD16 waits at its
    step (GCL's broadcast: one step each way for two members) for a sync of 8 IPUs instead of 4:
    120 - 80 cycles more (the poplibs test model, configs/ipu-mk2.toml external_sync_*)."""
    def stem_cycles(replicas):
        g = models.get("resnet50", micro_batch=2, image_size=64, bn_span=2)
        o = Options().replicationFactor(replicas)
        o.Training.gradientAccumulation(1)
        t = _statistics(sim.simulate(g, "ipu-pod16", o, training=True, optimizer="sgd"))
        return set(t[t.name == f"stem/bn1/batchnorm {SUFFIX}"].cycles)
    assert {c + (120 - 80) for c in stem_cycles(4)} == stem_cycles(8)


def test_stable_statistics_all_reduce_the_mean_then_the_power():
    """Options.enableStableNorm (TF's use_stable_statistics, poplin's stableAlgo): each training
    batch norm all-reduces its mean (fp16) and then its power (fp32 partials) where the default
    all-reduces both at once; the gradient's one all-reduce is unchanged."""
    stats = _statistics(_run(bn_span=2, stable=True))  # 3 micro-batches
    first = stats[stats.ipu == 0]
    assert len(first) == 3 * BATCH_NORMS * 3
    stem = first[first.name == f"stem/bn1/batchnorm {SUFFIX}"].sort_values("start")
    assert stem.bytes.tolist() == [64 * 2, 64 * 4] * 3  # the mean, then the power, every micro-batch
    assert first.name.str.endswith(f"/batchnorm/grad {SUFFIX}").sum() == BATCH_NORMS * 3


def test_stable_statistics_cost_one_more_pass_over_the_activations():
    """The stable estimator reduces the mean on its own and subtracts it from the activations
    before their power (Norms.cpp: popops::map _1 - Cast(_2), a plain element-wise vertex): the
    forward batch norm runs row_ops' stable steps per channel, one map pass and one reduction more."""
    from sim.cost.row_ops import row_op_cost
    from sim.cost.rules import _row_reduce_cost
    runs = {stable: _run(replicas=2, accumulation=1, bn_span=1, stable=stable) for stable in (False, True)}
    ex = runs[True].executable
    op = next(o for o in ex.graph.ops if o.name == "stem/bn1/batchnorm")
    base, stable = (runs[k].executable.costs[op.name] for k in (False, True))
    ipu = ex.system.ipu
    shape = ex.graph.tensors[op.inputs[0]].shape
    assert stable == row_op_cost("layernorm_stable", shape, "float16", ipu, ipu.tiles, _row_reduce_cost(ipu),
                                 statistics="channel")
    assert stable.plan.count("reduce") == base.plan.count("reduce") + 1 and "rowmap sub" in stable.plan
    assert stable.cycles > base.cycles


def test_without_a_span_or_at_inference_there_is_none():
    assert _statistics(_run(bn_span=1)).empty
    assert _statistics(_run(bn_span=2, training=False)).empty


def test_it_costs_time():
    assert _run(bn_span=2).cycle_count > _run(bn_span=1).cycle_count


def test_bad_spans_are_refused_with_what_to_do():
    with pytest.raises(OptionsError, match=r"span 2 replicas.*must divide the 1 replicas.*bn_span to 1"):
        _run(replicas=1, bn_span=2)
    with pytest.raises(OptionsError, match=r"must divide the 4 replicas"):
        _run(replicas=4, bn_span=3)
    with pytest.raises(GraphError, match="bn_span"):
        models.get("resnet50", bn_span=0)
    with pytest.raises(GraphError, match="norm=.group.*bn_span=1"):
        models.get("resnet50", norm="group", bn_span=2)


def test_the_tf1_rows_span_two_replicas_and_the_pytorch_row_none():
    tf1 = [r for r in V.PUBLISHED_ROWS if "tf1-calls" in r.notes]
    assert len(tf1) == 14
    assert all(dict(r.setup.params)["bn_span"] == 2 and "bn-span" in r.notes for r in tf1)
    assert "bn_span" not in dict(V.PUBLISHED_BY_ID["B14"].setup.params)
