"""Two settings Graphcore's TensorFlow examples use, as PopTorch and PopART name them:

* Options.enableStableNorm (PopART's enableStableNorm; TF's norms.use_stable_statistics): poplin's
  stable estimator for every batch, group and layer norm (lib/poplin/Norms.cpp normStatisticsImpl
  with stableAlgo); the distributed batch norm's two all-reduces are in
  tests/test_distributed_batchnorm.py;
* _Popart.set("enableFullyConnectedPass", False) (TF's matmuls.clear_pass_type): no matmul gets
  poplin's fullyConnectedPass (graphcore/tensorflow GetMatMulOptionsForInst)."""
import json

import pytest

import models
import sim
import sim.poptorch as poptorch
from cli_run import cli
from sim import GraphBuilder, Options
from sim.cost.matmul_swap import plan_matmul_none_pass
from sim.cost.row_ops import LAYERNORM_STABLE_STEPS, LAYERNORM_STEPS, row_op_cost
from sim.cost.rules import _row_reduce_cost
from sim.errors import OptionsError


def _norms_graph():
    """A conv, a group norm of 4 groups, a layer norm over the last axis and a batch norm, then a loss."""
    b = GraphBuilder("norms", "float16")
    x = b.input("x", (2, 8, 16, 16))
    y = b.conv2d(x, 16, 3, 1, 1, name="conv")
    y = b.group_norm(y, 4, name="gn")
    y = b.layernorm(y, name="ln")
    y = b.batchnorm(y, name="bn")
    y = b.reshape(y, (2, 16 * 16 * 16))
    logits = b.linear(y, 10, name="fc")
    b.graph.loss = b.softmax_cross_entropy(logits, b.input("labels", (2,), "int32"))
    b.output(b.graph.loss)
    return b.graph


def _compile(stable: bool, training: bool = True):
    return sim.compile(_norms_graph(), "ipu-mk2", Options().enableStableNorm(stable), training=training)


def _op(ex, name):
    return next(op for op in ex.graph.ops if op.name == name)


def test_the_option_marks_every_forward_norm_and_nothing_else():
    graph = _norms_graph()
    ex = sim.compile(graph, "ipu-mk2", Options().enableStableNorm(True), training=True)
    marked = sorted(op.name for op in ex.graph.ops if op.attrs.get("stable_statistics"))
    assert marked == ["bn/batchnorm", "gn/groupnorm", "ln/layernorm"]
    assert not any(op.attrs.get("stable_statistics") for op in graph.ops)  # the user's graph is untouched
    assert not any(op.attrs.get("stable_statistics") for op in _compile(False).graph.ops)


def test_a_group_norm_runs_the_stable_steps():
    """The mean's reduction on its own, the mean subtracted (a row broadcast), the power's reduction,
    then the rest as before: priced as row_ops' LAYERNORM_STABLE_STEPS over (samples x groups) rows."""
    base, stable = _compile(False), _compile(True)
    cost = stable.costs["gn/groupnorm"]
    ipu = stable.system.ipu
    expected = row_op_cost("layernorm_stable", (2 * 4, 16 * 16 * 16 // 4), "float16", ipu, stable.tiles,
                           _row_reduce_cost(ipu), statistics="group")
    assert (cost.compute_cycles, cost.exchange_cycles, cost.sync_cycles, cost.supersteps) == (
        expected.compute_cycles, expected.exchange_cycles, expected.sync_cycles, expected.supersteps)
    assert cost.plan.startswith("8 rows of 1024: reduce add, rowmap sub, reduce square_add, stats mul+add+rsqrt")
    assert cost.compute_cycles + cost.exchange_cycles + cost.sync_cycles > sum(
        getattr(base.costs["gn/groupnorm"], k) for k in ("compute_cycles", "exchange_cycles", "sync_cycles"))
    # the gradient does not depend on how the statistics were estimated
    grad = next(op.name for op in stable.graph.ops if op.kind == "groupnorm_grad")
    assert stable.costs[grad] == base.costs[grad]


def test_a_layer_norm_runs_the_stable_steps_in_training_and_inference():
    """A layer norm computes its statistics at inference too, so the option applies there."""
    for training in (True, False):
        base, stable = _compile(False, training), _compile(True, training)
        op = _op(stable, "ln/layernorm")
        rows = 2 * 16 * 16
        expected = row_op_cost("layernorm_stable", (rows, 16), "float16", stable.system.ipu, stable.tiles,
                               _row_reduce_cost(stable.system.ipu))
        assert op.attrs["stable_statistics"] is True
        assert stable.costs["ln/layernorm"].supersteps == expected.supersteps
        assert stable.costs["ln/layernorm"].supersteps > base.costs["ln/layernorm"].supersteps


def test_the_stable_steps_are_the_default_steps_with_the_reduction_split():
    assert LAYERNORM_STABLE_STEPS[:3] == (("reduce", ("add",), None), ("rowmap", ("sub",), None),
                                          ("reduce", ("square_add",), 4))
    assert LAYERNORM_STEPS[0] == ("reduce", ("add", "square_add"), 4)
    assert LAYERNORM_STABLE_STEPS[4:] == LAYERNORM_STEPS[2:]


def test_an_inference_batch_norm_is_unchanged():
    base, stable = _compile(False, training=False), _compile(True, training=False)
    assert stable.costs["bn/batchnorm"] == base.costs["bn/batchnorm"]


def test_the_option_takes_a_bool_and_is_listed_as_modelled():
    with pytest.raises(OptionsError, match=r"_Popart.set\('enableStableNorm', 1\): expected True or False"):
        Options().enableStableNorm(1)
    ex = _compile(True)
    assert not any("enableStableNorm" in n for n in ex.notes)
    # PopTorch's own Options (sim.poptorch) take the same setter, and it is modelled there too
    opts = poptorch.Options().enableStableNorm(True)
    assert opts.stable_norm and "_Popart.enableStableNorm" not in opts.unmodelled()


def test_the_cli_flag_sets_the_option(capsys):
    argv = ["run", "--model", "resnext101", "--micro-batch", "1", "--param", "image_size=64", "--training",
            "--json"]
    cycles = {}
    for flag in ((), ("--stable-norm",)):
        code, out, err = cli(capsys, *argv, *flag)
        assert code == 0, err
        cycles[bool(flag)] = json.loads(out)["cycle_count"]
    graph = models.get("resnext101", micro_batch=1, image_size=64)
    run = sim.simulate(graph, "ipu-mk2", Options().enableStableNorm(True), training=True)
    assert cycles[True] == run.cycle_count > cycles[False]


# --- enableFullyConnectedPass off ------------------------------------------------------------------

def test_cleared_pass_type_plans_every_layer_matmul_as_a_plain_matmul():
    """The fc layer's forward, backward and weight-update matmuls lose their fullyConnectedPass and
    are each priced as poplin's plain matmul (plan_matmul_none_pass); the user's graph is untouched."""
    graph = _norms_graph()
    opts = Options()._Popart.set("enableFullyConnectedPass", False)
    ex = sim.compile(graph, "ipu-mk2", opts, training=True)
    base = sim.compile(graph, "ipu-mk2", Options(), training=True)
    matmuls = [op for op in ex.graph.ops if op.kind == "matmul"]
    assert sorted(op.name for op in matmuls) == ["fc/matmul", "fc/matmul/grad_a", "fc/matmul/grad_b"]
    assert {op.attrs["fully_connected_pass"] for op in matmuls} == {"NONE"}
    assert sorted(op.attrs["fully_connected_pass"] for op in base.graph.ops if op.kind == "matmul") == [
        "TRAINING_BWD", "TRAINING_FWD", "TRAINING_WU"]
    assert not any("fully_connected_pass" in op.attrs for op in graph.ops)
    fwd = _op(ex, "fc/matmul")
    ipu = ex.system.ipu
    plan, _ = plan_matmul_none_pass(1, 2, 16 * 16 * 16, 10, 2, ipu, ex.tiles, 0.6, 4)
    assert ex.costs[fwd.name].plan == plan.describe()
    # marked, the layer is planned separately: its forward pass as a plain matmul is (operands swapped
    # or not), but its weight update adds its result into the weights laid out for the forward pass
    assert ex.costs[fwd.name] == base.costs[fwd.name]
    wu = _op(ex, "fc/matmul/grad_b").name
    assert ex.costs[wu].compute_cycles < base.costs[wu].compute_cycles


def test_the_fully_connected_pass_switch_takes_a_bool_and_the_cli_flag_clears_it(capsys):
    with pytest.raises(OptionsError, match="enableFullyConnectedPass.*expected True or False"):
        Options()._Popart.set("enableFullyConnectedPass", "yes")
    argv = ["run", "--model", "bert-base", "--num-layers", "1", "--micro-batch", "1", "--training", "--json"]
    code, out, err = cli(capsys, *argv, "--no-fully-connected-pass")
    assert code == 0, err
    graph = models.get("bert-base", num_layers=1, micro_batch=1)
    run = sim.simulate(graph, "ipu-mk2", Options()._Popart.set("enableFullyConnectedPass", False), training=True)
    assert json.loads(out)["cycle_count"] == run.cycle_count
    assert run.cycle_count != sim.simulate(graph, "ipu-mk2", Options(), training=True).cycle_count
