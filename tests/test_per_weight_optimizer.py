"""Per-weight optimizer values as PopART compiles them: a constant weight decay of 0 drops the
updater's ``wd * w`` term, a constant LAMB max weight norm of 0 drops the weight's two norms and
its trust ratio (adamdecompose.cpp ``use_lamb``); PopTorch derives both from parameter groups."""

import pytest
import torch

import sim
import sim.popxl as popxl
import sim.poptorch as poptorch
from sim.cost.rules import ADAM_DECAY_STEPS, ADAM_UPDATER_STEPS, adam_sets, op_cost
from sim.errors import OptionsError
from sim.graph.training import Optimizer, expand_training
from sim.results.report import format_summary

from test_optimizers import mlp

BIASES = ("s0/l0/bias", "s0/l1/bias")


def _update_kinds(g, weight):
    return [op.kind for op in g.ops if op.pass_ == "update" and op.attrs.get("weight") == weight]


def test_lamb_without_trust_ratio_updates_those_weights_as_adam():
    g = expand_training(mlp(), Optimizer("lamb", no_trust_ratio=BIASES), accumulate=True)
    for w in (w.name for w in g.weights()):
        assert _update_kinds(g, w) == (["adam_update"] if w in BIASES
                                       else ["adam_updater", "reduce_sum", "reduce_sum", "lamb_update"])


def test_no_weight_decay_drops_the_updaters_decay_term_and_its_cycles():
    ipu = sim.load_system("ipu-mk2").ipu
    plain = expand_training(mlp(), "lamb", accumulate=True)
    nodecay = expand_training(mlp(), Optimizer("lamb", no_weight_decay=("s0/l0/weight",)), accumulate=True)
    ins = lambda g, op: [(g.tensors[t].shape, g.tensors[t].dtype, g.tensors[t].role) for t in op.inputs]  # noqa: E731
    for w in ("s0/l0/weight", "s0/l1/weight"):
        a, b = (next(op for op in g.ops if op.kind == "adam_updater" and op.attrs["weight"] == w)
                for g in (plain, nodecay))
        decayed = w != "s0/l0/weight"
        assert ("weight_decay" not in b.attrs) is decayed
        updater = adam_sets("adam_updater", ins(nodecay, b), b.attrs.get("weight_decay", True))[-1][0]
        assert updater == (ADAM_UPDATER_STEPS if decayed else ADAM_UPDATER_STEPS[:-len(ADAM_DECAY_STEPS)])
        ca, cb = op_cost(a, plain, ipu, ipu.tiles), op_cost(b, nodecay, ipu, ipu.tiles)
        assert (cb.compute_cycles == ca.compute_cycles) is decayed
        assert cb.compute_cycles <= ca.compute_cycles


def test_a_step_without_norms_or_decay_is_cheaper_and_described():
    o = sim.Options().enableSyntheticData(True)
    runs = [sim.simulate(mlp((3,)), "ipu-mk2", o, training=True, optimizer=opt)
            for opt in (Optimizer("lamb"), Optimizer("lamb", no_weight_decay=BIASES, no_trust_ratio=BIASES))]
    assert runs[1].cycle_count < runs[0].cycle_count
    assert "lamb (no weight decay on 2 weights; no trust ratio on 2 weights)" in format_summary(runs[1])
    assert "lamb (" not in format_summary(runs[0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="adam", no_trust_ratio=("w",)), "no_trust_ratio is a setting of lamb only"),
    (dict(name="sgd_momentum", no_weight_decay=("w",)), "no_weight_decay is a setting of adam, adamw, lamb only"),
    (dict(name="lamb", no_weight_decay=(3,)), "expected weight names"),
    (dict(name="lamb", no_trust_ratio=5), "expected weight names"),
])
def test_bad_per_weight_settings_are_refused(kwargs, match):
    with pytest.raises(OptionsError, match=match):
        Optimizer(**kwargs)


def test_unknown_weight_names_are_refused_with_the_graphs_names():
    with pytest.raises(OptionsError, match=r"no_trust_ratio names 'encoder.bias', not weights of graph 'mlp'.*s0/l0/bias"):
        expand_training(mlp(), Optimizer("lamb", no_trust_ratio=("encoder.bias",)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(32, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)

    def forward(self, x, y):
        out = self.fc2(self.norm(self.fc1(x)))
        return out, torch.nn.functional.cross_entropy(out, y)


def _bert_groups(model):
    """Graphcore's PyTorch BERT groups (nlp/bert/pytorch/optimization.py): biases without weight
    decay or LAMB's trust ratio, other 1-D weights without weight decay, the rest decayed."""
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if "bias" in n], "weight_decay": 0, "max_weight_norm": 0},
            {"params": [p for n, p in named if "bias" not in n and p.dim() == 1], "weight_decay": 0},
            {"params": [p for n, p in named if p.dim() > 1], "weight_decay": 0.01}]


def _priced(model, optimizer):
    tm = poptorch.trainingModel(model, poptorch.Options(), optimizer=optimizer)
    tm(torch.randn(4, 32), torch.randint(0, 4, (4,)))
    return tm


def _settings(tm):
    g = tm._executable.graph
    updates = [op for op in g.ops if op.pass_ == "update" and "weight" in op.attrs]
    return (sorted({op.attrs["weight"] for op in updates if op.attrs.get("weight_decay") is False}),
            sorted({op.attrs["weight"] for op in updates if op.kind == "adam_update"}))


def test_poptorch_groups_with_constant_zeros_set_the_per_weight_values():
    model = Net()
    opt = poptorch.optim.LAMB(_bert_groups(model), lr=1e-3, weight_decay=0, max_weight_norm=None)
    opt.variable_attrs.markAsConstant("weight_decay")
    opt.variable_attrs.markAsConstant("max_weight_norm")
    no_decay, no_ratio = _settings(_priced(model, opt))
    assert no_decay == ["fc1.bias", "fc2.bias", "norm.bias", "norm.weight"]
    assert no_ratio == ["fc1.bias", "fc2.bias", "norm.bias"]


def test_variable_values_keep_the_terms_as_poptorch_compiles_them():
    """An attribute given to the constructor is variable in every group (PopTorch's
    variable_attrs), so PopART keeps its term even where a group's value is 0."""
    model = Net()
    opt = poptorch.optim.LAMB(_bert_groups(model), lr=1e-3, weight_decay=0.01, max_weight_norm=1.0)
    assert _settings(_priced(model, opt)) == ([], [])
    # a torch.optim optimizer has no variable_attrs: constant where the value is PopTorch's constant
    # (Adam's default weight decay 0; AdamW's constant is 1e-2, so its group's 0 is variable)
    model = Net()
    assert _settings(_priced(model, torch.optim.Adam(model.parameters(), lr=1e-3)))[0] == \
        sorted(n for n, _ in model.named_parameters())
    model = Net()
    assert _settings(_priced(model, torch.optim.AdamW(_bert_groups(model)[:2], lr=1e-3)))[0] == []


def test_set_optimizer_cannot_change_a_compiled_constant():
    """The per-weight values are compiled constants: PopART refuses another value (PopTorch's user
    guide, "Constant attributes"), so the priced update cannot change after compilation."""
    model = Net()
    tm = _priced(model, poptorch.optim.LAMB(model.parameters(), lr=1e-3))
    with pytest.raises(poptorch.Error, match=r"Problem with weight decays\. OptimizerValue for tensor fc1\.bias is "
                                             r"not a valid replacement\.Values are constant but do not match\."):
        tm.setOptimizer(poptorch.optim.LAMB(_bert_groups(model), lr=1e-3))


def test_popxl_adam_updater_has_a_decay_term_only_when_weight_decay_is_required():
    ops = popxl.ops
    costs = {}
    for wd in (None, 0.0, 0.01):
        ir = popxl.Ir()
        with ir.main_graph:
            w = popxl.variable(torch.zeros(64, 64).numpy(), popxl.float32, name="w")
            m = popxl.variable(torch.zeros(64, 64).numpy(), popxl.float32, name="m")
            v = popxl.variable(torch.zeros(64, 64).numpy(), popxl.float32, name="v")
            ops.var_updates.adam_updater(m, v, weight=w, weight_decay=wd)
        graph = ir.main_graph._b.graph
        op = next(op for op in graph.ops if op.kind == "adam_updater")
        assert (op.attrs.get("weight_decay") is False) is (wd != 0.01)
        assert ("w" in op.inputs) is (wd == 0.01)
        ipu = sim.load_system("ipu-mk2").ipu
        costs[wd] = op_cost(op, graph, ipu, ipu.tiles).compute_cycles
    assert costs[None] == costs[0.0] < costs[0.01]
    with pytest.raises(ValueError, match="Weight decay requires weight to not be None"):
        ir = popxl.Ir()
        with ir.main_graph:
            m = popxl.variable(torch.zeros(4).numpy(), popxl.float32, name="m")
            ops.var_updates.adam_updater(m, m, weight_decay=0.1)
