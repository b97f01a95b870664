"""The cost cache's key (sim.cost.rules.price_key): ops whose costs read the same fields share it and are
priced once; ops that differ in a field their rule reads do not. The op signature itself (which outlining
and program memory compare) keeps every attribute."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.cost import rules
from sim.graph.ir import Graph, Op

MK2 = sim.load_system("ipu-mk2").ipu
TILES = MK2.tiles


def _graph(*tensors) -> Graph:
    """A graph holding ``tensors``, each (name, shape, dtype, role)."""
    g = Graph("g")
    for name, shape, dtype, role in tensors:
        g.add_tensor(name, shape, dtype, role)
    return g


@pytest.fixture
def pricings(monkeypatch):
    """Clears the cost cache and counts the ops the rules then price (by kind)."""
    counts: dict[str, int] = {}
    rule = rules._rule

    def counted(kind, *args):
        counts[kind] = counts.get(kind, 0) + 1
        return rule(kind, *args)
    rules._cost.cache_clear()
    monkeypatch.setattr(rules, "_rule", counted)
    yield counts
    rules._cost.cache_clear()


def _price(g: Graph, ops, proportion: float = 0.6, partials: str = "float") -> list:
    return [rules.op_cost(op, g, MK2, TILES, proportion, partials) for op in ops]


def _same_cost(a, b) -> bool:
    """The two costs are equal field by field, their per-tile vectors (if any) included."""
    if a != b or (a.profile is None) != (b.profile is None):
        return False
    return a.profile is None or all(np.array_equal(getattr(a.profile, f), getattr(b.profile, f))
                                    for f in ("compute", "bytes_in", "temp"))


# --- ops that share a key ------------------------------------------------------------------------
def test_ops_differing_only_in_name_are_priced_once(pricings):
    g = _graph(("a", (64, 256), "float16", "activation"), ("b", (64, 256), "float16", "activation"),
               ("y1", (64, 256), "float16", "activation"), ("y2", (64, 256), "float16", "activation"))
    ops = [Op("first", "gelu", ["a"], ["y1"]), Op("second", "gelu", ["b"], ["y2"])]
    first, second = _price(g, ops)
    assert pricings == {"gelu": 1} and first is second


def test_updates_of_different_weights_share_a_key_and_are_priced_once(pricings):
    # an optimizer's ops name the weight they update ("weight"), which no rule reads: BERT-Large's 24 layers'
    # identical updates, once priced per weight, are priced once
    g = _graph(("acc1", (1024,), "float16", "accumulator"), ("grad1", (1024,), "float16", "gradient"),
               ("acc2", (1024,), "float16", "accumulator"), ("grad2", (1024,), "float16", "gradient"),
               ("out1", (1024,), "float16", "accumulator"), ("out2", (1024,), "float16", "accumulator"))
    ops = [Op("update/gamma", "accumulate", ["acc1", "grad1"], ["out1"], {"weight": "layer0/gamma"}),
           Op("update/beta", "accumulate", ["acc2", "grad2"], ["out2"], {"weight": "layer0/beta"})]
    assert rules.price_key(rules.op_signature(ops[0], g)) == rules.price_key(rules.op_signature(ops[1], g))
    first, second = _price(g, ops)
    assert pricings == {"accumulate": 1} and first is second


def test_unread_attributes_are_left_out_of_the_key(pricings):
    # a gradient clip's and a LAMB norm's bookkeeping (clip, norm_of, optimizer), keepdims, a recomputation
    # checkpoint: the reduction costs the same whatever they say
    g = _graph(("w", (1024, 4096), "float16", "accumulator"), ("n1", (1,), "float16", "activation"),
               ("n2", (1,), "float16", "activation"))
    common = {"axes": (0, 1), "operation": "square_add"}
    ops = [Op("clip/norm", "reduce_sum", ["w"], ["n1"],
              common | {"clip": "norm", "optimizer": "clip", "keepdims": False, "weight": "fc1/weight"}),
           Op("lamb/norm", "reduce_sum", ["w"], ["n2"],
              common | {"norm_of": "weight", "optimizer": "lamb", "recomputation_checkpoint": True})]
    keys = [rules.price_key(rules.op_signature(op, g)) for op in ops]
    assert keys[0] == keys[1] == ("reduce_sum", (((1024, 4096), "float16", ""),), (((1,), "float16"),),
                                  (("axes", (0, 1)), ("operation", "square_add")))
    first, second = _price(g, ops)
    assert pricings == {"reduce_sum": 1} and first is second


def test_element_wise_ops_on_inputs_of_different_roles_are_priced_once(pricings):
    # the element-wise rule reads its inputs' shapes and dtypes, not whether they are activations or gradients
    g = _graph(("x", (3, 512, 1024), "float16", "activation"), ("dx", (3, 512, 1024), "float16", "gradient"),
               ("y", (3, 512, 1024), "float16", "activation"), ("dy", (3, 512, 1024), "float16", "gradient"))
    ops = [Op("fwd/copy", "copy", ["x"], ["y"]), Op("bwd/copy", "copy", ["dx"], ["dy"])]
    first, second = _price(g, ops)
    assert pricings == {"copy": 1} and first is second


def test_ops_that_plan_no_matmul_are_priced_once_across_memory_proportions(pricings):
    # availableMemoryProportion and the partials type reach only the AMP planner's kinds
    g = _graph(("x", (64, 256), "float16", "activation"), ("y", (64, 256), "float16", "activation"))
    op = Op("relu", "relu", ["x"], ["y"])
    first, = _price(g, [op], 0.6, "float")
    second, = _price(g, [op], 0.2, "half")
    assert pricings == {"relu": 1} and first is second


def test_views_are_keyed_by_their_kind():
    g = _graph(("x", (3, 512, 1024), "float16", "activation"), ("y", (3, 512, 16, 64), "float16", "activation"),
               ("z", (1536, 1024), "float16", "activation"))
    a = Op("split_heads", "reshape", ["x"], ["y"])
    b = Op("flatten", "reshape", ["x"], ["z"], {"why": "rows"})
    assert rules.price_key(rules.op_signature(a, g)) == rules.price_key(rules.op_signature(b, g)) \
        == ("reshape", (), (), ())
    assert _price(g, [a])[0] is rules.FREE


# --- ops that do not ------------------------------------------------------------------------------
@pytest.mark.parametrize("change", ["shape", "dtype", "read attribute"])
def test_ops_differing_in_what_the_rule_reads_are_priced_apart(pricings, change):
    shape2 = (1024, 2048) if change == "shape" else (1024, 4096)
    dtype2 = "float32" if change == "dtype" else "float16"
    g = _graph(("x1", (1024, 4096), "float16", "activation"), ("y1", (1024, 4096), "float16", "activation"),
               ("x2", shape2, dtype2, "activation"), ("y2", shape2, dtype2, "activation"))
    attrs2 = {"axis": 0} if change == "read attribute" else {"axis": -1}
    ops = [Op("a", "softmax", ["x1"], ["y1"], {"axis": -1}), Op("b", "softmax", ["x2"], ["y2"], attrs2)]
    assert rules.price_key(rules.op_signature(ops[0], g)) != rules.price_key(rules.op_signature(ops[1], g))
    _price(g, ops)
    assert pricings == {"softmax": 2}


def test_an_update_whose_rule_reads_the_roles_keeps_them():
    # SGD's update tells the weight, the velocity and the gradient apart by their roles
    g = _graph(("w", (1024,), "float16", "weight"), ("v", (1024,), "float16", "state"),
               ("gr", (1024,), "float16", "gradient"), ("a", (1024,), "float16", "accumulator"),
               ("w1", (1024,), "float16", "weight"), ("w2", (1024,), "float16", "weight"))
    momentum = Op("momentum", "sgd_update", ["w", "v", "gr"], ["w1"])
    accumulated = Op("accumulated", "sgd_update", ["w", "a", "gr"], ["w2"])
    keys = [rules.price_key(rules.op_signature(op, g)) for op in (momentum, accumulated)]
    assert keys[0] != keys[1] and [role for _, _, role in keys[0][1]] == ["weight", "state", "gradient"]


def test_a_matmul_is_priced_per_memory_proportion(pricings):
    g = _graph(("x", (2048, 1024), "float16", "activation"), ("w", (1024, 4096), "float16", "weight"),
               ("y", (2048, 4096), "float16", "activation"))
    op = Op("fc", "matmul", ["x", "w"], ["y"])
    _price(g, [op], 0.6)
    _price(g, [op], 0.05)
    assert pricings == {"matmul": 2}


def test_the_op_signature_keeps_every_attribute_but_code_of():
    # outlining and program memory compare op signatures: they keep what the price key leaves out
    g = _graph(("a", (1024,), "float16", "accumulator"), ("gr", (1024,), "float16", "gradient"),
               ("out", (1024,), "float16", "accumulator"))
    op = Op("u", "accumulate", ["a", "gr"], ["out"], {"weight": "gamma", rules.CODE_OF: "layer0/u"})
    kind, ins, outs, attrs = rules.op_signature(op, g)
    assert attrs == (("weight", "gamma"),) and [role for _, _, role in ins] == ["accumulator", "gradient"]


# --- the key's claims, checked against the rules ----------------------------------------------------
def _attribute_reads(key: str) -> list[str]:
    """Lines under sim/cost that look up the attribute ``key`` (``attrs.get("key"``, ``attrs["key"]``,
    ``"key" in attrs``)."""
    pattern = re.compile(rf"""attrs(\.get\(|\[)\s*["']{key}["']|["']{key}["']\s+(not\s+)?in\s+attrs""")
    root = Path(rules.__file__).parent
    return [f"{path.name}:{i}" for path in sorted(root.glob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]


def test_no_rule_reads_an_unpriced_attribute():
    assert {key: _attribute_reads(key) for key in sorted(rules.UNPRICED_ATTRS)} == \
        {key: [] for key in sorted(rules.UNPRICED_ATTRS)}


def test_the_attribute_scan_finds_a_read_attribute():
    assert _attribute_reads("weight_decay") and _attribute_reads("axis")


def _role_free_case(kind: str):
    """(inputs without roles, outputs, attributes) of an op of ``kind`` the rule prices."""
    x, row = ((8, 256), "float16"), ((256,), "float16")
    if kind in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"):
        return [x], [((8, 1), "float16")], {"axes": (1,)}
    if kind == "layernorm":
        return [x, row, row], [x], {}
    if kind == "layernorm_grad":
        return [x, x, row], [x, row, row], {}
    if kind in rules.LOSS_COST_KINDS:
        return [x, ((8,), "int32")], [((1,), "float16")] if not kind.endswith("_grad") else [x], {}
    if kind == "map":
        return [x, row], [x], {"steps": ("mul", "add")}
    if kind == "accumulate":
        return [x, x], [x], {"layout_of_matmul": (1, 8, 64, 256)}
    if kind in ("random_uniform", "random_normal", "random_bernoulli"):
        return [], [x], {}
    if kind in ("add", "sub", "mul", "div", "maximum", "minimum", "pow", "compare", "logical", "bitwise",
                "remainder"):
        return [x, row], [x], {}
    if kind in ("select", "clamp"):
        return [x, x, x], [x], {}
    return [x], [x], {}


def _costs_by_role(kind: str) -> list:
    """An op of ``kind`` priced by its rule with every input given each role in turn (and none)."""
    ins, outs, attrs = _role_free_case(kind)
    return [rules._rule(kind, tuple((shape, dtype, role) for shape, dtype in ins), tuple(outs), dict(attrs), MK2,
                        TILES, 0.6, "float")
            for role in ("activation", "weight", "gradient", "accumulator", "state", "input", "")]


def test_the_role_free_kinds_cost_the_same_whatever_their_inputs_roles():
    differ = [kind for kind in sorted(rules.ROLE_FREE_KINDS)
              if not all(_same_cost(costs[0], c) for costs in [_costs_by_role(kind)] for c in costs[1:])]
    assert differ == []
