"""PopART's enableNonStableSoftmax (_Popart.set; PopRT's enable_non_stable_softmax): every softmax runs
popnn's SOFTMAX instead of SOFTMAX_STABLE (popart willow/src/popx/op/softmaxx.cpp; poplibs
lib/popnn/NonLinearity.cpp softmaxImpl without stableAlgo): no reduction of the row maximum and no
subtraction of it. A log-softmax stays stable (popnn::logSoftmaxInPlace)."""
import json

import pytest

import models
import sim
import sim.poptorch as poptorch
from cli_run import cli
from sim import GraphBuilder, Options
from sim.cost.row_ops import SOFTMAX_NONSTABLE_STEPS, SOFTMAX_STEPS, row_op_cost
from sim.cost.rules import _row_reduce_cost
from sim.errors import OptionsError

NON_STABLE = Options()._Popart.set("enableNonStableSoftmax", True)


def _graph():
    """Attention-like scores through a softmax, then a classifier through a log-softmax and a loss."""
    b = GraphBuilder("softmaxes", "float16")
    x = b.input("x", (4, 12, 64, 64))
    p = b.softmax(x, -1, name="attention")
    y = b.linear(b.reshape(p, (4, 12 * 64 * 64)), 10, name="fc")
    log_p = b.op("softmax", [y], [(4, 10)], {"axis": -1, "log": True}, name="log_softmax")[0]
    b.output(log_p)
    return b.graph


def test_the_steps_are_the_stable_ones_without_the_maximum():
    assert SOFTMAX_STEPS[:2] == (("reduce", ("max",), None), ("row", ("sub",), None))
    assert SOFTMAX_NONSTABLE_STEPS == SOFTMAX_STEPS[2:]
    assert SOFTMAX_NONSTABLE_STEPS[0] == ("map", ("exp",))


def test_the_option_marks_each_softmax_but_not_a_log_softmax():
    graph = _graph()
    ex = sim.compile(graph, "ipu-mk2", NON_STABLE, training=False)
    marked = sorted(op.name for op in ex.graph.ops if op.attrs.get("non_stable"))
    assert marked == ["attention"]
    assert not any(op.attrs.get("non_stable") for op in graph.ops)  # the user's graph is untouched
    cost = ex.costs["attention"]
    ipu = ex.system.ipu
    expected = row_op_cost("softmax_nonstable", (4 * 12 * 64, 64), "float16", ipu, ex.tiles, _row_reduce_cost(ipu))
    assert (cost.compute_cycles, cost.exchange_cycles, cost.sync_cycles, cost.supersteps) == (
        expected.compute_cycles, expected.exchange_cycles, expected.sync_cycles, expected.supersteps)
    assert cost.plan.startswith("3072 rows of 64: map exp, reduce add")
    base = sim.compile(graph, "ipu-mk2", Options(), training=False)
    stable = base.costs["attention"]
    assert stable.plan.startswith("3072 rows of 64: reduce max, row broadcast_outer, map exp")
    # two popops calls fewer: the maximum's reduction and its subtraction
    assert cost.supersteps < stable.supersteps and cost.cycles < stable.cycles
    assert ex.costs["log_softmax"] == base.costs["log_softmax"]


def test_the_option_takes_a_bool_is_modelled_and_says_when_it_acts_on_nothing():
    with pytest.raises(OptionsError, match=r"_Popart.set\('enableNonStableSoftmax', 1\): expected True or False"):
        Options()._Popart.set("enableNonStableSoftmax", 1)
    opts = poptorch.Options()
    opts._Popart.set("enableNonStableSoftmax", True)
    assert opts.non_stable_softmax and "_Popart.enableNonStableSoftmax" not in opts.unmodelled()
    assert not any("enableNonStableSoftmax" in n for n in sim.compile(_graph(), "ipu-mk2", NON_STABLE).notes)
    b = GraphBuilder("no_softmax", "float16")
    b.output(b.relu(b.input("x", (16, 64))))
    notes = sim.compile(b.graph, "ipu-mk2", NON_STABLE).notes
    assert "enableNonStableSoftmax: the model has no softmax but log-softmaxes, which stay stable; no effect" in notes


def test_the_cli_flag_sets_the_option(capsys):
    argv = ["run", "--model", "bert-base", "--num-layers", "1", "--micro-batch", "2", "--json"]
    cycles = {}
    for flag in ((), ("--non-stable-softmax",)):
        code, out, err = cli(capsys, *argv, *flag)
        assert code == 0, err
        cycles[bool(flag)] = json.loads(out)["cycle_count"]
    run = sim.simulate(models.get("bert-base", num_layers=1, micro_batch=2), "ipu-mk2", NON_STABLE)
    assert cycles[True] == run.cycle_count < cycles[False]
