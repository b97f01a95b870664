"""Gradient clipping by global norm as PopART compiles it (``Optimizer(clip_norm=...)``, PopART's
``ClipNormSettings.clipAllWeights``, PopTorch's ``max_grad_norm``): a norm per gradient, the
global norm and clip factor on one IPU, the factor back to every IPU, and each gradient scaled
by it before its update (willow/src/transforms/clipweightgradientsbynorm.cpp)."""

from __future__ import annotations

import math

import pytest

import models
import sim
from sim.errors import OptionsError
from sim.graph.training import Optimizer, expand_training
from sim.options import TensorLocationSettings
from sim.program import Collective, Compute, IpuCopy, Repeat, Sequence
from tests.test_outer_fragment_collectives import _weight_update


def _bert(layers_per_ipu=(1, 1)):
    return models.get("bert-base", micro_batch=1, num_layers=sum(layers_per_ipu), layers_per_ipu=list(layers_per_ipu),
                      seq_len=16, hidden=64, heads=4, vocab=1000)


def _options(replicas=1, rts=False, merged=False) -> sim.Options:
    o = sim.Options().replicationFactor(replicas).enableSyntheticData(True)
    o.Training.gradientAccumulation(6)
    if rts:
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True))
    if merged:
        o._Popart.set("replicatedCollectivesSettings.mergeAllReduceCollectives", True)
    return o


def _clip_norm_calls(seq: Sequence) -> int:
    """How many clip-norm all-reduce calls the weight update makes (over all IPU positions)."""
    calls = 0
    for item in seq.items:
        body, count = (item.body.items[0], item.count) if isinstance(item, Repeat) else (item, 1)
        if isinstance(body, Collective) and body.name.startswith("clip norm"):
            calls += count
    return calls


def test_the_graph_gets_a_norm_and_a_scale_per_gradient_and_four_global_ops():
    g = expand_training(_bert(), Optimizer("lamb", clip_norm=1.0), accumulate=True)
    updates = [op for op in g.ops if op.pass_ == "update"]
    weights = [t.name for t in g.weights()]
    norms = [op for op in updates if op.attrs.get("clip") == "norm"]
    scales = [op for op in updates if op.attrs.get("clip") == "scale"]
    made = [op for op in updates if op.attrs.get("clip") == "global"]
    assert len(norms) == len(scales) == len(weights)
    assert [op.kind for op in made] == ["map", "sqrt", "maximum", "div"]
    assert made[0].attrs["steps"] == ["add"] * (len(weights) - 1)  # SumOpx: one map adding every norm
    assert set(made[0].inputs) == {op.outputs[0] for op in norms}
    for op in norms:  # ReduceSumSquare of the accumulated gradient to one value, in its dtype
        grad = g.tensors[op.inputs[0]]
        assert (op.kind, op.attrs["operation"], grad.role) == ("reduce_sum", "square_add", "accumulator")
        assert g.tensors[op.outputs[0]].shape == (1,) and g.tensors[op.outputs[0]].dtype == grad.dtype
    factor = made[-1].outputs[0]
    for op in scales:  # in place, by the factor
        assert op.kind == "mul" and op.inputs == [op.outputs[0], factor]
    # every norm before the global ops, every scale after them and before its weight's update
    index = {op.name: i for i, op in enumerate(g.ops)}
    assert max(index[op.name] for op in norms) < min(index[op.name] for op in made)
    assert max(index[op.name] for op in made) < min(index[op.name] for op in scales)
    for op in scales:
        update = next(u for u in updates if u.kind == "adam_updater" and u.attrs["weight"] == op.attrs["weight"])
        assert index[op.name] < index[update.name] and op.outputs[0] in update.inputs


def test_without_a_clip_norm_the_graph_is_unchanged():
    plain = expand_training(_bert(), Optimizer("lamb"), accumulate=True)
    infinite = expand_training(_bert(), Optimizer("lamb", clip_norm=math.inf), accumulate=True)
    assert [op.name for op in plain.ops] == [op.name for op in infinite.ops]
    assert not any("clip" in op.attrs for op in plain.ops)


@pytest.mark.parametrize("given", [0, -1.0, math.nan, "big"])
def test_a_clip_norm_must_be_a_positive_number(given):
    with pytest.raises(OptionsError, match="clip norm .*expected a number > 0"):
        Optimizer("sgd", clip_norm=given)


def test_describe_names_the_clip_norm():
    assert Optimizer("lamb", "float16", clip_norm=100).describe() == \
        "lamb (state float16; gradients clipped to global norm 100)"
    assert Optimizer("sgd", clip_norm=math.inf).describe() == "sgd"


def test_the_global_ops_run_on_the_ipu_with_the_most_norms_and_copy_the_factor_back():
    """2 IPUs, 1 layer and the embeddings on IPU0, 3 layers and the head on IPU1: IPU1 holds more
    gradients, so it makes the factor (PopART's chooseGlobalNormVgid); IPU0 sends it its norms
    (one fp16 value each) and gets the factor back, before either scales and updates."""
    ex = sim.compile(_bert((1, 3)), "ipu-m2000", _options(), training=True, optimizer=Optimizer("lamb", clip_norm=1.0))
    g = ex.graph
    norms = [op for op in g.ops if op.attrs.get("clip") == "norm"]
    on = {ipu: sum(op.ipu == ipu for op in norms) for ipu in (0, 1)}
    assert on[1] > on[0] > 0
    assert {op.ipu for op in g.ops if op.attrs.get("clip") == "global"} == {1}
    seq = _weight_update(ex)
    names = [getattr(item, "name", "") for item in seq.items]
    gather = next(i for i in seq.items if isinstance(i, IpuCopy) and i.name.startswith("gradient norms"))
    back = next(i for i in seq.items if isinstance(i, IpuCopy) and i.name.startswith("clip factor"))
    assert gather.transfers == ((0, 1, 2 * on[0]),) and back.transfers == ((1, 0, 2),)
    first_update = min(i for i, item in enumerate(seq.items) if isinstance(item, Compute) and item.name == "weight update")
    assert names.index("gradient clipping norms") < names.index(gather.name) < \
        names.index("gradient clipping factor") < names.index(back.name) < first_update


def test_clipping_costs_cycles_and_a_single_ipu_needs_no_copies():
    g = _bert((2,))
    plain = sim.simulate(g, "ipu-mk2", _options(), training=True, optimizer="lamb")
    clipped = sim.simulate(g, "ipu-mk2", _options(), training=True, optimizer=Optimizer("lamb", clip_norm=1.0))
    assert clipped.cycle_count > plain.cycle_count
    assert (clipped.breakdown.sum(axis=1) == clipped.cycle_count).all()  # the extra cycles are in the breakdown
    seq = _weight_update(clipped.executable)
    assert not any(isinstance(item, IpuCopy) for item in seq.items)
    assert [item.name for item in seq.items if isinstance(item, Compute)][:2] == \
        ["gradient clipping norms", "gradient clipping factor"]


@pytest.mark.parametrize("merged, calls", [(False, None), (True, 2)])
def test_with_rts_each_norm_of_a_shard_is_all_reduced(merged, calls):
    """ReduceSumSquareOp::configureForReplicatedTensorSharding: a norm of a shard is all-reduced
    over the sharding domain, one call per norm unless all-reduces are merged (then one per IPU)."""
    g = _bert()
    ex = sim.compile(g, "ipu-pod16", _options(replicas=2, rts=True, merged=merged), training=True,
                     optimizer=Optimizer("lamb", clip_norm=1.0))
    norms = sum(op.attrs.get("clip") == "norm" for op in ex.graph.ops)
    assert _clip_norm_calls(_weight_update(ex)) == (norms if calls is None else calls)
    unsharded = sim.compile(g, "ipu-pod16", _options(replicas=2), training=True,
                            optimizer=Optimizer("lamb", clip_norm=1.0))
    assert _clip_norm_calls(_weight_update(unsharded)) == 0  # the all-reduced gradient is whole on every replica


def test_poptorch_max_grad_norm_compiles_the_clipping():
    torch = pytest.importorskip("torch")
    from sim import poptorch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x, y):
            out = self.fc(x)
            return out, torch.nn.functional.cross_entropy(out, y)

    def model(**kwargs):
        net = Model()
        m = poptorch.trainingModel(net, optimizer=poptorch.optim.AdamW(net.parameters(), lr=1e-3, **kwargs))
        m(torch.randn(2, 8), torch.tensor([0, 1]))
        return m

    clipped = model(max_grad_norm=1.0)
    assert sum(op.attrs.get("clip") == "norm" for op in clipped.executable.graph.ops) == 2  # weight and bias
    assert not any("clip" in op.attrs for op in model().executable.graph.ops)
    with pytest.raises(poptorch.Error, match="Clip norm settings at index 0 do not match"):
        clipped.setOptimizer(poptorch.optim.AdamW(clipped.model.parameters(), lr=1e-3, max_grad_norm=2.0))
    with pytest.raises(poptorch.Error, match="Clip norm settings do not match"):
        clipped.setOptimizer(poptorch.optim.AdamW(clipped.model.parameters(), lr=1e-3))
    with pytest.raises(poptorch.Error, match="cannot be NaN"):
        model(max_grad_norm=math.nan)


def test_the_cli_and_the_summary_name_the_clip_norm(capsys):
    from sim.cli.main import main
    assert main(["run", "--model", "mlp", "--training", "--optimizer", "adamw", "--max-grad-norm", "1"]) == 0
    assert "training (adamw (gradients clipped to global norm 1))" in capsys.readouterr().out.splitlines()[0]
    assert main(["run", "--model", "mlp", "--training", "--max-grad-norm", "0"]) == 2
    assert "--max-grad-norm: optimizer 'sgd': clip norm 0.0: expected a number > 0" in capsys.readouterr().err
    assert main(["run", "--model", "mlp", "--max-grad-norm", "1"]) == 2
    assert "--max-grad-norm only applies with --training" in capsys.readouterr().err
