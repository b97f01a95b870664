"""Automatic loss scaling (sim/graph/loss_scaling.py, sim/cost/histogram.py): which gradients PopART
tracks, popops::histogram's vertex estimates, and what a run with it on adds."""

import pytest

import models
import sim
import sim.poptorch as poptorch
from sim import Options
from sim.cost.histogram import by_data_cycles, by_limit_cycles, histogram_tile_cycles, worker_2d_cycles
from sim.errors import OptionsError
from sim.graph import GraphBuilder
from sim.graph.loss_scaling import tracked_gradients
from sim.graph.training import expand_training


def mlp(dtype="float16"):
    b = GraphBuilder("mlp", dtype)
    x = b.input("x", (16, 64))
    h = b.relu(b.linear(x, 128, name="fc1"))
    y = b.linear(b.reshape(h, (16, 128)), 10, name="fc2")
    b.output(b.softmax_cross_entropy(y, b.input("labels", (16,), "int32")))
    return b.graph


def test_tracked_gradients_are_popart_non_view_changing_fp16_ones():
    g = expand_training(mlp(), "sgd", accumulate=True)
    names = {op.name for op in tracked_gradients(g)}
    # the weights' and biases' gradients and the activation's, not the loss's gradient (it reads the
    # loss scale), not dX of a weight matmul (it reads the weight: a variable), not a view
    assert names == {"fc2/matmul/grad_b", "fc2/add/reduce_bias", "relu/grad", "fc1/matmul/grad_b",
                     "fc1/add/reduce_bias"}
    assert tracked_gradients(expand_training(mlp("float32"), "sgd")) == []  # fp32 gradients are never tracked


def test_histogram_vertex_estimates_worked_by_hand():
    # 712 fp16 elements (178 vectors of 4), 2 bins, absolute values: by data, each of 6 workers 30 vectors
    # at 4 cycles: 23 + 5 + (19 + 4 x 30) + 10 = 177 worker cycles; by limit one worker runs all 178:
    # 19 + 3 + (17 + 4 x 178) + 8 + 2 = 761 (poplibs HistogramPerformanceEstimation.cpp)
    assert by_data_cycles(712, 2, True, True, 6, 4) == 6 * 177
    assert by_limit_cycles(712, 2, True, True, 6, 4) == 6 * 761
    assert histogram_tile_cycles(712, 2, 2) == (6 * 177, "Histogram1D by data")
    # one element: the by-limit vertex is the cheaper (no combining of the workers' bins)
    assert histogram_tile_cycles(1, 2, 2)[1] == "Histogram1D by limit"
    # a tile of more than 4,095 vectors per worker: 2-D worker vertices of 16,380 fp16 elements each
    cycles, vertex = histogram_tile_cycles(200_000, 2, 2)
    assert vertex == "Histogram2D" and cycles == 6 * 3 * worker_2d_cycles(16_380, 2, True, True, 4)


def test_a_run_adds_a_histogram_after_each_tracked_gradient_and_the_update():
    g = models.get("bert-base", micro_batch=2, num_layers=2, seq_len=128)
    base = Options().deviceIterations(1)
    base.Training.gradientAccumulation(4)
    als = Options().deviceIterations(1)
    als.Training.gradientAccumulation(4)
    als._Popart.set("automaticLossScalingSettings.enabled", True)
    plain = sim.simulate(g, "ipu-mk2", base, training=True, optimizer="lamb")
    run = sim.simulate(g, "ipu-mk2", als, training=True, optimizer="lamb")
    ops = run.executable.graph.ops
    index = {op.name: i for i, op in enumerate(ops)}
    hist = [op for op in ops if op.kind == "histogram"]
    producer = {t: op for op in ops for t in op.outputs}
    tracked = tracked_gradients(plain.executable.graph)
    assert len(hist) == sum(len(op.outputs) for op in tracked) > len(tracked) > 50  # one a tensor (norms' pairs)
    for op in hist:  # right after the op making its tensor, one per output in order
        made_by = producer[op.inputs[0]]
        assert index[op.name] == index[made_by.name] + 1 + made_by.outputs.index(op.inputs[0])
    assert sum(op.kind == "loss_scale_update" and op.pass_ == "update" for op in ops) == 1
    assert any("automatic loss scaling" in note for note in run.executable.notes)
    assert "_Popart.automaticLossScalingSettings.enabled" not in als.unmodelled()
    costs = run.executable.costs
    extra = sum(costs[op.name].compute_cycles + costs[op.name].exchange_cycles + costs[op.name].sync_cycles
                for op in hist)
    assert run.cycle_count - plain.cycle_count == pytest.approx(4 * extra, rel=0.05)  # 4 micro-batches


def test_poptorch_option_is_modelled_and_an_fp32_model_is_refused():
    opts = poptorch.Options()
    opts.Training.setAutomaticLossScaling(True)
    assert opts.automatic_loss_scaling() and "Training.setAutomaticLossScaling" not in opts.unmodelled()
    with pytest.raises(OptionsError, match="setAutomaticLossScaling.*fp16"):
        sim.compile(mlp("float32"), "ipu-mk2", Options()._Popart.set("automaticLossScalingSettings.enabled", True),
                    training=True)
    notes = sim.compile(mlp(), "ipu-mk2", Options()._Popart.set("automaticLossScalingSettings.enabled", True)).notes
    assert any("inference model has no gradients" in n for n in notes)


def test_cli_flag(capsys):
    from sim.cli.main import main
    assert main(["run", "--model", "bert-base", "--num-layers", "1", "--micro-batch", "2", "--training",
                 "--auto-loss-scaling"]) == 0
    assert "automatic loss scaling:" in capsys.readouterr().out
    assert main(["run", "--model", "mlp", "--auto-loss-scaling"]) == 2
    assert "--auto-loss-scaling only applies with --training" in capsys.readouterr().err
    assert main(["run", "--model", "mlp", "--training", "--auto-loss-scaling"]) == 2  # an fp32 model: no fp16 gradient
    assert "no fp16 gradient" in capsys.readouterr().err


def test_insert_after_puts_ops_in_place_all_or_none():
    from sim.errors import GraphError
    from sim.graph import Op
    g = mlp()
    first, second = g.ops[0].name, g.ops[1].name
    t = g.add_tensor("extra", (1,), "float32", "activation").name
    g.insert_after({first: [Op("after_first", "copy", [g.ops[0].outputs[0]], [t])]})
    assert [op.name for op in g.ops[:3]] == [first, "after_first", second]
    before = [op.name for op in g.ops]
    u = g.add_tensor("extra2", (1,), "float32", "activation").name
    with pytest.raises(GraphError, match="defined twice"):
        g.insert_after({second: [Op("fine", "copy", [t], [u]), Op("after_first", "copy", [t], [u])]})
    assert [op.name for op in g.ops] == before  # nothing added
    g.insert_after({second: [Op("fine", "copy", [t], [u])]})  # its name was not kept either
