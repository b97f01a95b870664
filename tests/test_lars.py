"""LARS (``--optimizer lars``): the graph it adds, what its ops cost, its state, the CLI."""

import argparse
import json
import math

import numpy as np
import pytest

import models
import sim
from sim.cli import plan as plan_cli
from sim.cli.main import main
from sim.cost.exchange import exchange_cycles
from sim.cost.rules import LARS_ELEMENT_STEPS, LARS_RATIO_STEPS, SGD_STEP, op_cost
from sim.cost.opcost import _counts
from sim.cost.vector import codelet, spread
from sim.graph.ir import Op
from sim.graph.training import LARS_SKIP, Optimizer, expand_training, merge_norms


def small_cnn():
    """conv (no bias) -> batch norm -> relu -> pool -> linear (with bias) -> loss: two weights
    LARS scales (the conv and linear weights), three it skips (gamma, beta, bias)."""
    b = sim.GraphBuilder("cnn", "float16")
    x = b.input("x", (4, 16, 8, 8))
    labels = b.input("labels", (4,), "int32")
    h = b.relu(b.batchnorm(b.conv2d(x, 32, 3, padding=1, bias=False, name="conv")))
    h = b.reshape(b.global_avgpool(h), (4, 32))
    b.softmax_cross_entropy(b.linear(h, 10, name="fc"), labels)
    return b.graph


SCALED = {"conv/weight", "fc/weight"}
SKIPPED = {"bn/gamma", "bn/beta", "fc/bias"}


def test_lars_update_per_scaled_weight_and_momentum_sgd_for_the_skip_list():
    g = expand_training(small_cnn(), "lars", accumulate=True)
    assert {w.name for w in g.weights()} == SCALED | SKIPPED
    updates = {op.attrs["weight"]: op for op in g.ops if op.pass_ == "update" and op.kind != "reduce_sum"}
    assert {w for w, op in updates.items() if op.kind == "lars_update"} == SCALED
    assert {w for w, op in updates.items() if op.kind == "sgd_update"} == SKIPPED
    norms = [op for op in g.ops if op.kind == "reduce_sum" and op.pass_ == "update"]
    assert len(norms) == 2 * len(SCALED)
    for w in SCALED:
        up = updates[w]
        weight, acc, state, norm_w, norm_g = up.inputs
        assert weight == w and g.tensors[acc].role == "accumulator" and g.tensors[state].role == "state"
        assert up.outputs == [w, state]  # the weight and its one momentum, in place
        made = {g.tensors[n].producer: n for n in (norm_w, norm_g)}
        ops = {op.name: op for op in norms}
        assert ops[f"{w}/lars_norm_weight"].inputs == [w] and ops[f"{w}/lars_norm_gradient"].inputs == [acc]
        assert set(made) == {f"{w}/lars_norm_weight", f"{w}/lars_norm_gradient"}
        for name in made:
            assert ops[name].attrs["operation"] == "square_add" and g.tensors[made[name]].shape == (1,)
    for w in SKIPPED:  # momentum SGD: weight, gradient, one state; no norms
        assert len(updates[w].inputs) == 3 and not any(op.attrs["weight"] == w for op in norms)
    assert all(any(s in w for s in LARS_SKIP) for w in SKIPPED)


def test_one_momentum_state_per_weight_as_sgd_momentum():
    lars, sgd = (expand_training(small_cnn(), o) for o in ("lars", "sgd_momentum"))
    states = {name: sorted((t.shape, t.dtype) for t in g.tensors.values() if t.role == "state")
              for name, g in (("lars", lars), ("sgd", sgd))}
    assert states["lars"] == states["sgd"] == sorted((w.shape, "float32") for w in lars.weights())
    assert Optimizer("lars").num_states == 1
    o = sim.Options().enableSyntheticData(True)
    mem = {name: sim.compile(small_cnn(), "ipu-mk2", o, training=True, optimizer=name).memory[0].by_role["state"]
           for name in ("lars", "sgd_momentum")}
    assert mem["lars"] == mem["sgd_momentum"] == 4 * sum(w.numel for w in lars.weights())


def test_norms_of_an_ipu_merge_into_one_reduce_many_read_before_the_updates():
    ex = sim.compile(small_cnn(), "ipu-mk2", sim.Options().enableSyntheticData(True), training=True,
                     optimizer="lars")
    g = ex.graph
    update = [op for op in g.ops if op.pass_ == "update"]
    merged = [op for op in update if op.kind == "reduce_many"]
    assert len(merged) == 1 and not any(op.kind == "reduce_sum" for op in update)
    assert merged[0].attrs["reductions"] == 4 and len(merged[0].outputs) == 4
    assert update.index(merged[0]) < min(i for i, op in enumerate(update) if op.kind == "lars_update")
    for t in merged[0].outputs:
        assert g.tensors[t].producer == merged[0].name
    merge_norms(g)  # idempotent: nothing left to merge
    assert [op.name for op in g.ops if op.pass_ == "update"] == [op.name for op in update]


def test_reduce_many_of_one_tensor_costs_what_reduce_sum_costs():
    ipu = sim.load_system("ipu-mk2").ipu
    g = sim.Graph("r")
    g.add_tensor("w", (512, 256, 3, 3), "float16", "weight")
    g.add_tensor("s", (1,), "float16", "activation")
    one = op_cost(Op("one", "reduce_sum", ["w"], ["s"], {"axes": [0, 1, 2, 3]}), g, ipu, ipu.tiles)
    many = op_cost(Op("many", "reduce_many", ["w"], ["s"], {}), g, ipu, ipu.tiles)
    assert (many.compute_cycles, many.exchange_cycles, many.sync_cycles) == \
           (one.compute_cycles, one.exchange_cycles, one.sync_cycles)


def _lars_minus_momentum(n, itemsize, ipu):
    """What one lars_update costs beyond momentum SGD's sgd_update on the same weight, from the
    codelets. LARS: the scalar trust ratio (one vertex on one tile), its two fp32 factors sent to
    every tile, the aXPlusbY set and the two ScaledAdds of LARS_ELEMENT_STEPS' sgd_update; momentum
    SGD: the learning rate negated on one tile, its fp32 value sent, the velocity's and the weight's
    ScaledAdds (SGD_STEP). LARS has one compute set, so one sync, more."""
    ratio = math.ceil(max(codelet(k).fixed for k in LARS_RATIO_STEPS)
                      + sum(codelet(k).per_element(4) for k in LARS_RATIO_STEPS))
    scale, sgd = (codelet(k) for k in LARS_ELEMENT_STEPS)
    step = codelet(SGD_STEP)
    used, _ = spread(n, itemsize, ipu, ipu.tiles)
    first = int(_counts(n, used)[0])
    lars = math.ceil(scale.fixed + sgd.sets * sgd.fixed + first * (scale.per_element(itemsize)
                                                                    + sgd.per_element(itemsize))) + ratio
    momentum = 2 * math.ceil(step.fixed + first * step.per_element(itemsize)) + math.ceil(
        step.fixed + step.per_element(4))
    return (lars - momentum + exchange_cycles(8, ipu) - exchange_cycles(4, ipu)
            + ipu.internal_sync_cycles)


def test_lars_step_costs_more_than_momentum_sgd_by_the_norms_and_the_ratio():
    o = sim.Options().enableSyntheticData(True)
    runs = {name: sim.simulate(small_cnn(), "ipu-mk2", o, training=True, optimizer=name)
            for name in ("lars", "sgd_momentum")}
    ex = {name: r.executable for name, r in runs.items()}
    ipu = ex["lars"].system.ipu
    by_weight = {name: {op.attrs["weight"]: op for op in e.graph.ops
                        if op.pass_ == "update" and op.kind.endswith("_update")} for name, e in ex.items()}
    norms = next(op for op in ex["lars"].graph.ops if op.kind == "reduce_many")
    extra = ex["lars"].costs[norms.name].cycles
    for w in SCALED:
        t = ex["lars"].graph.tensors[w]
        diff = (ex["lars"].costs[by_weight["lars"][w].name].cycles
                - ex["sgd_momentum"].costs[by_weight["sgd_momentum"][w].name].cycles)
        assert diff == _lars_minus_momentum(t.numel, 4, ipu)  # fp32 momentum sets the rate
        extra += diff
    for w in SKIPPED:
        assert (ex["lars"].costs[by_weight["lars"][w].name].cycles
                == ex["sgd_momentum"].costs[by_weight["sgd_momentum"][w].name].cycles)
    # one IPU, no replicas, synthetic data: the update runs alone, so the step grows by exactly that
    assert runs["lars"].cycle_count - runs["sgd_momentum"].cycle_count == extra > 0
    trace = runs["lars"].op_trace()
    update_kinds = trace[trace["task"] == "weight update"]["kind"].tolist()
    assert update_kinds.count("reduce_many") == 1 and update_kinds.count("lars_update") == len(SCALED)


def test_cli_run_and_plan_accept_lars(capsys):
    code = main(["run", "--model", "resnet50", "--param", "micro_batch=1", "--system", "ipu-mk2", "--training",
                 "--optimizer", "lars", "--synthetic-data", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    api = sim.simulate(models.get("resnet50", micro_batch=1), "ipu-mk2",
                       sim.Options().enableSyntheticData(True), training=True, optimizer="lars")
    assert d["cycle_count"] == api.cycle_count
    args = plan_cli.configure(argparse.ArgumentParser()).parse_args(
        ["--model", "resnet50", "--system", "bow-pod16", "--training", "--optimizer", "lars", "--global-batch", "64"])
    assert args.optimizer == "lars"


def test_unknown_optimizer_names_lars_among_the_known():
    with pytest.raises(sim.OptionsError, match="lars"):
        Optimizer("larss")
    assert np.all([Optimizer("lars").update_kind_of(w) == "sgd_update" for w in ("a/bias", "bn/gamma", "bn/beta")])
    assert Optimizer("sgd_momentum").update_kind_of("bn/gamma") == "sgd_update"
    assert Optimizer("lars").update_kind_of("conv/weight") == "lars_update"


def test_lars_with_sharded_state_says_the_norms_all_reduce_is_not_modelled():
    from sim.options import TensorLocationSettings
    o = sim.Options().replicationFactor(2).enableSyntheticData(True)
    o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True)
                                        .minElementsForReplicatedTensorSharding(0))  # every tensor, small ones too
    notes = {name: sim.compile(small_cnn(), "ipu-m2000", o, training=True, optimizer=name).notes
             for name in ("lars", "sgd_momentum")}
    assert any("lars with sharded optimizer state" in n for n in notes["lars"])
    assert not any("lars" in n for n in notes["sgd_momentum"])


def test_plain_sgd_is_one_scaled_add_and_momentum_sgd_two():
    """PopART's SGD0VarUpdate (no momentum) is one ScaledAdd over the weight after the learning
    rate's negation on one tile; with momentum the velocity's ScaledAdd comes first (SGD1/SGD2
    AcclUpdate), so the update is one compute set longer by exactly that set and its sync."""
    ipu = sim.load_system("ipu-mk2").ipu
    g = sim.Graph("u")
    g.add_tensor("w", (512, 256), "float16", "weight")
    g.add_tensor("g", (512, 256), "float16", "gradient")
    g.add_tensor("v", (512, 256), "float32", "state")
    plain = op_cost(Op("plain", "sgd_update", ["w", "g"], ["w"], {"weight": "w"}), g, ipu, ipu.tiles)
    momentum = op_cost(Op("momentum", "sgd_update", ["w", "g", "v"], ["w"], {"weight": "w"}), g, ipu, ipu.tiles)
    step = codelet(SGD_STEP)
    used, _ = spread(512 * 256, 4, ipu, ipu.tiles)  # laid out by its widest operand, as every update
    first = int(_counts(512 * 256, used)[0])
    plain_used, _ = spread(512 * 256, 2, ipu, ipu.tiles)
    plain_first = int(_counts(512 * 256, plain_used)[0])
    lr = math.ceil(step.fixed + step.per_element(4))
    assert plain.supersteps == 2 and momentum.supersteps == 3
    assert plain.compute_cycles == math.ceil(step.fixed + plain_first * step.per_element(2)) + lr
    assert momentum.compute_cycles == 2 * math.ceil(step.fixed + first * step.per_element(4)) + lr
    assert plain.exchange_cycles == momentum.exchange_cycles == exchange_cycles(4, ipu)
    assert momentum.sync_cycles - plain.sync_cycles == ipu.internal_sync_cycles


def test_sgd_zeroes_a_separate_gradient_accumulator_after_the_update():
    """With gradient accumulation into a separate accumulator, PopART zeroes it after the VarUpdate
    (AccumulatorZeroOp, sgd0decompose.cpp / sgd2decompose.cpp): one more compute set, a fill at the
    accumulator's bytes. Momentum SGD whose velocity is the accumulator (SGD1) has none to zero."""
    ipu = sim.load_system("ipu-mk2").ipu
    g = sim.Graph("u")
    g.add_tensor("w", (512, 256), "float16", "weight")
    g.add_tensor("g", (512, 256), "float16", "gradient")
    g.add_tensor("a", (512, 256), "float16", "accumulator")
    g.add_tensor("v", (512, 256), "float32", "state")
    for velocity in ([], ["v"]):
        direct = op_cost(Op("d", "sgd_update", ["w", "g"] + velocity, ["w"], {"weight": "w"}), g, ipu, ipu.tiles)
        accumulated = op_cost(Op("a", "sgd_update", ["w", "a"] + velocity, ["w"], {"weight": "w"}), g, ipu, ipu.tiles)
        used, _ = spread(512 * 256, 4 if velocity else 2, ipu, ipu.tiles)
        fill = codelet("copy")
        assert accumulated.supersteps == direct.supersteps + 1
        assert accumulated.compute_cycles - direct.compute_cycles == math.ceil(
            fill.fixed + int(_counts(512 * 256, used)[0]) * fill.per_element(2))
        assert "the gradient accumulator zeroed" in accumulated.plan and "zeroed" not in direct.plan
