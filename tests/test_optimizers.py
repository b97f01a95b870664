"""Adam and LAMB as PopART runs them: the update's two phases, LAMB's norms, their cost, RTS."""

import math

import sim
from sim.cost.opcost import _counts
from sim.cost.rules import (ADAM_LR_STEPS, LAMB_RATIO_STEPS, adam_sets, op_cost)
from sim.cost.vector import codelet, spread
from sim.graph.ir import GraphBuilder, Op
from sim.graph.training import LAMB_OPS, expand_training
from sim.options import TensorLocationSettings
from sim.program import Collective, Compute, Repeat

D = 256


def mlp(layers_per_ipu=(2,), width=D):
    """``sum(layers_per_ipu)`` linear layers (weight and bias each), IPU ``i`` holding
    ``layers_per_ipu[i]`` of them, then an MSE loss: 2 weights per layer."""
    b = GraphBuilder("mlp", "float16")
    h = b.input("x", (8, width))
    for i, n in enumerate(layers_per_ipu):
        with b.ipu(i, stage=i, block=f"s{i}"):
            for j in range(n):
                h = b.relu(b.linear(h, width, name=f"s{i}/l{j}"))
            if i == len(layers_per_ipu) - 1:
                b.mse_loss(h, b.input("target", (8, width)))
    return b.graph


def _update_ops(g, weight):
    return [op for op in g.ops if op.pass_ == "update" and op.attrs.get("weight") == weight]


def test_lamb_is_phase_one_two_norms_and_phase_two_per_weight():
    g = expand_training(mlp(), "lamb", accumulate=True)
    weights = [w.name for w in g.weights()]
    assert len(weights) == 4
    assert len([op for op in g.ops if op.pass_ == "update"]) == 4 * len(weights)
    for w in weights:
        ops = _update_ops(g, w)
        assert tuple(op.kind for op in ops) == LAMB_OPS
        up, norm_w, norm_r, var = ops
        weight, acc, m, v = up.inputs
        r = up.outputs[-1]
        assert weight == w and g.tensors[acc].role == "accumulator"
        assert [g.tensors[t].role for t in (m, v)] == ["state", "state"] and up.outputs == [m, v, r]
        assert (g.tensors[r].shape, g.tensors[r].dtype) == (g.tensors[w].shape, g.tensors[w].dtype)
        assert norm_w.inputs == [w] and norm_r.inputs == [r]
        for op in (norm_w, norm_r):  # LambSquare: SQUARE_ADD over the whole tensor to one fp32 value
            out = g.tensors[op.outputs[0]]
            assert op.attrs["operation"] == "square_add" and (out.shape, out.dtype) == ((1,), "float32")
        assert var.inputs == [w, r, norm_w.outputs[0], norm_r.outputs[0]] and var.outputs == [w]


def test_adam_is_one_op_per_weight_without_norms():
    g = expand_training(mlp(), "adam", accumulate=True)
    update = [op for op in g.ops if op.pass_ == "update"]
    assert [op.kind for op in update] == ["adam_update"] * 4


def test_lamb_norms_stay_apart_per_ipu_unlike_lars():
    """PopART grows each LambSquareOp as its own popops::reduce: two reductions per weight on the
    IPU of the weight, never merged into a reduceMany."""
    o = sim.Options().enableSyntheticData(True)
    o.Training.gradientAccumulation(4)
    ex = sim.compile(mlp((2, 1)), "ipu-m2000", o, training=True, optimizer="lamb")
    g = ex.graph
    for ipu, weights in ((0, 4), (1, 2)):
        ops = [op for op in g.ops if op.pass_ == "update" and op.ipu == ipu]
        kinds = [op.kind for op in ops]
        assert kinds.count("reduce_sum") == 2 * weights and "reduce_many" not in kinds
        assert kinds.count("adam_updater") == kinds.count("lamb_update") == weights
        assert {op.attrs["weight"].split("/")[0] for op in ops} == {f"s{ipu}"}


def _sets_cycles(sets, first):
    """The first (fullest) tile's cycles of ``sets`` of fused codelets at ``first`` elements."""
    total = 0
    for steps, size in sets:
        cs = [codelet(k) for k in steps]
        total += math.ceil(max(c.fixed for c in cs) + first * sum(c.per_element(size) for c in cs))
    return total


def _scalar_map(steps, ipu):
    g = sim.Graph("s")
    g.add_tensor("x", (1,), "float32", "activation")
    g.add_tensor("y", (1,), "float32", "activation")
    return op_cost(Op("m", "map", ["x"], ["y"], {"steps": list(steps)}), g, ipu, ipu.tiles).compute_cycles


def test_phase_costs_from_the_codelets():
    """fp16 weight and accumulator, fp32 moments: phase 1 is the unscale (fp16), the two moment maps
    (fp32), the accumulator's zeroing (fp16) and the updater map (fp32); phase 2 the scalar map on
    the first tile and the fp16 scaledAdd. Adam's one op is both phases with the learning-rate map."""
    ipu = sim.load_system("ipu-mk2").ipu
    g = expand_training(mlp(), "lamb", accumulate=True)
    w = "s0/l0/weight"
    up, _, _, var = _update_ops(g, w)
    n = g.tensors[w].numel
    used, _ = spread(n, 2, ipu, ipu.tiles)  # the fp16 weight's layout, for every phase
    first = int(_counts(n, used)[0])
    expected_sets = [(("mul",), 2), (("mul", "mul", "add"), 4), (("mul", "mul", "mul", "add"), 4), (("copy",), 2),
                     (("div", "div", "sqrt", "add", "div", "mul", "add"), 4)]
    ins = lambda op: [(g.tensors[t].shape, g.tensors[t].dtype, g.tensors[t].role) for t in op.inputs]  # noqa: E731
    assert adam_sets("adam_updater", ins(up)) == expected_sets
    assert adam_sets("lamb_update", ins(var)) == [(("scale",), 2)]
    c1, c2 = op_cost(up, g, ipu, ipu.tiles), op_cost(var, g, ipu, ipu.tiles)
    ratio = _scalar_map(LAMB_RATIO_STEPS, ipu)
    assert c1.compute_cycles == _sets_cycles(expected_sets, first)
    assert c2.compute_cycles == _sets_cycles([(("scale",), 2)], first) + ratio
    assert (c1.supersteps, c2.supersteps) == (5, 2) and c1.exchange_cycles == 0 < c2.exchange_cycles
    adam = expand_training(mlp(), "adam", accumulate=True)
    a = op_cost(_update_ops(adam, w)[0], adam, ipu, ipu.tiles)
    assert a.compute_cycles == c1.compute_cycles + c2.compute_cycles - ratio + _scalar_map(ADAM_LR_STEPS, ipu)
    assert a.temp_bytes_per_tile == 2 * first  # the fp16 updater between the phases


def test_lamb_step_costs_adam_plus_norms_and_ratio_and_grows_with_weights():
    """One IPU, synthetic data, no replicas: the weight update runs alone, so the step of LAMB
    exceeds Adam's by exactly the per-op difference; both grow with the weights updated."""
    o = sim.Options().enableSyntheticData(True)
    steps = {}
    for layers in (2, 4):
        runs = {name: sim.simulate(mlp((layers,)), "ipu-mk2", o, training=True, optimizer=name)
                for name in ("lamb", "adam")}
        cost = {name: sum(r.executable.costs[op.name].cycles for op in r.executable.graph.ops if op.pass_ == "update")
                for name, r in runs.items()}
        assert runs["lamb"].cycle_count - runs["adam"].cycle_count == cost["lamb"] - cost["adam"] > 0
        trace = runs["lamb"].op_trace()
        kinds = trace[trace["task"] == "weight update"]["kind"].tolist()
        assert (kinds.count("adam_updater"), kinds.count("reduce_sum"), kinds.count("lamb_update")) == \
               (2 * layers, 4 * layers, 2 * layers)
        steps[layers] = cost
    assert steps[4]["lamb"] > steps[2]["lamb"] and steps[4]["adam"] > steps[2]["adam"]
    assert steps[4]["lamb"] - steps[4]["adam"] > steps[2]["lamb"] - steps[2]["adam"]


def test_lamb_with_rts_all_reduces_each_norm_between_the_phases():
    """With replicated tensor sharding each norm is of a shard; PopART all-reduces each LambSquare's
    fp32 value across the replicas: 2 per weight, 4 bytes each, after phase 1 and the norms and
    before phase 2. The updater is a shard too."""
    o = sim.Options().replicationFactor(2).enableSyntheticData(True)
    o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True)
                                        .minElementsForReplicatedTensorSharding(0))  # every tensor, small ones too
    ex = sim.compile(mlp((2,)), "ipu-m2000", o, training=True, optimizer="lamb")
    (seq,) = [i for i in _items(ex.program) if getattr(i, "name", "") == "weight update" and hasattr(i, "items")]
    repeats = [i for i, item in enumerate(seq.items) if isinstance(item, Repeat) and "LAMB norm" in item.name]
    assert len(repeats) == 1  # one call per norm (PopART merges none by default), one priced item repeated
    rep = seq.items[repeats[0]]
    (coll,) = rep.body.items
    assert isinstance(coll, Collective) and (rep.count, coll.op, coll.nbytes, coll.group_size) == (8, "all_reduce", 4, 2)
    computes = [(i, item) for i, item in enumerate(seq.items) if isinstance(item, Compute)]
    before = [c for i, c in computes if i < repeats[0]]
    after = [c for i, c in computes if i > repeats[0]]
    assert all("lamb_update" not in c.ops.kinds for c in before) and before
    assert all(set(c.ops.kinds) == {"lamb_update"} for c in after) and after
    r = next(t for t in ex.graph.tensors.values() if t.name.endswith("/lamb_updater"))
    assert r.shards == 2
    assert not any("lars" in n for n in ex.notes)
    plain = sim.Options().replicationFactor(2).enableSyntheticData(True)
    ex2 = sim.compile(mlp((2,)), "ipu-m2000", plain, training=True, optimizer="lamb")
    assert not any(isinstance(i, Repeat) and "LAMB" in i.name for i in _items(ex2.program))  # no RTS: no all-reduce


def _items(item):
    """``item`` and everything under it (sequences' items, repeats' bodies)."""
    out = [item]
    for child in getattr(item, "items", []) or ([item.body] if isinstance(item, Repeat) else []):
        out += _items(child)
    return out
