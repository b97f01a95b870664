"""popnn's CTC loss: its vertex estimates, its planner's choice, and the op that prices the plan."""

import math

import pytest

import sim
from sim import GraphBuilder
from sim.cost import ctc
from sim.errors import GraphError
from sim.hardware.system import load_system

IPU = load_system("ipu-mk2").ipu


def test_vertex_cycles_are_popnns_estimates():
    # PerformanceEstimation.hpp: per time step and label symbol, alpha reads/writes 8, two log-adds
    # (16 each) and two log-multiplies (1 each), 2 for control flow; the gradient vertex adds
    # (2 + 1) x 2 reads/writes and two (log-multiply + log-add)
    assert ctc.alpha_cycles(1, 1, False) == 44
    assert ctc.alpha_cycles(3, 5, True) == 44 * 15 + 17
    assert ctc.grad_cycles(1, 1, False) == 44 + 40
    assert ctc.grad_cycles(2, 4, True) == 44 * 8 + 17 + 40 * 8 + 17


@pytest.mark.parametrize("shape", [(4, 30, 6, 12), (13, 25, 9, 7), (2, 17, 20, 40)])
def test_the_plan_is_the_best_of_every_partition(shape):
    """Searching the distinct partition sizes only finds the plan popnn's planner would: the
    least (estimated cycles, temporary memory, tiles) of every partition that fits."""
    B, T, L, C = shape
    tiles, rate = 64, int(IPU.exchange_bytes_per_cycle_per_tile)
    best = None
    for pb in range(1, B + 1):
        for pt in range(1, T + 1):
            for pl in range(1, L + 1):
                for sep in (False, True):
                    if pb * pt * (pl + sep) > tiles or not (ctc._no_empty(T, pt) and ctc._no_empty(L, pl)):
                        continue
                    p = ctc._estimate(B, T, L, C, pb, pt, pl, sep, 2, 4, IPU.worker_threads, rate)
                    if p.temp_bytes <= 0.6 * IPU.sram_bytes_per_tile:
                        k = (p.planner_cycles, p.temp_bytes, p.tiles)
                        best = k if best is None or k < best else best
    plan = ctc.plan_ctc(B, T, L, C, 2, 4, IPU, tiles)
    assert (plan.planner_cycles, plan.temp_bytes, plan.tiles) == best


def test_memory_forces_time_partitions():
    """A large alphabet copied to every tile of a label partition: the planner splits the time."""
    small = ctc.plan_ctc(8, 400, 50, 40, 2, 4, IPU, IPU.tiles)
    large = ctc.plan_ctc(8, 400, 50, 5000, 2, 4, IPU, IPU.tiles)
    assert large.time > small.time and large.temp_bytes <= 0.6 * IPU.sram_bytes_per_tile
    assert small.temp_bytes <= 0.6 * IPU.sram_bytes_per_tile


def _ctc_graph(T, B=8, L=40, C=30, reduction="mean"):
    b = GraphBuilder("ctc", "float16")
    lp = b.softmax(b.linear(b.input("x", (T, B, 16)), C, name="proj"), axis=-1)  # a layer to train
    lengths = [b.input(n, (B,), "int32") for n in ("input_lengths", "target_lengths")]
    b.output(b.ctc_loss(lp, b.input("targets", (B, L), "int32"), *lengths, reduction=reduction))
    return b.graph


def test_the_op_prices_the_plans_loops():
    costs, loops = {}, {}
    for T in (200, 400):
        ex = sim.compile(_ctc_graph(T), "ipu-mk2", sim.Options().enableSyntheticData(True))
        (op,) = [o for o in ex.graph.ops if o.kind == "ctc_loss"]
        costs[T] = ex.costs[op.name]
        plan = ctc.plan_ctc(8, T, 40, 30, 2, 4, IPU, IPU.tiles)
        loops[T] = plan.loops
        assert costs[T].compute_cycles >= plan.loops * plan.serial_runs * (plan.alpha_compute + plan.grad_compute)
    # two loops of one compute set each, then the same tail (the LOG_ADD reductions, the map, the cast)
    assert costs[400].supersteps - 2 * loops[400] == costs[200].supersteps - 2 * loops[200] > 0
    # each loop's body is compiled once: the program does not grow with the time steps
    assert costs[400].program_extent == costs[200].program_extent
    assert costs[200].program_extent[0] == costs[200].supersteps - 2 * loops[200] + 2
    assert {k[0] for k in costs[200].codelets} == {"ctc_alpha", "ctc_grad", "reduce_log_add", "exp+add+exp+sub", "cast"}
    # the wavefront: twice the time steps, about twice the cycles
    assert costs[400].cycles / costs[200].cycles == pytest.approx(2.0, rel=0.1)


def test_a_long_sequence_fits_the_tile():
    """The loops' bodies are in the program once: 1,200 steps of 480 labels (poplibs' own benchmark,
    which Poplar compiled) fit, where one codelet per step did not."""
    g = _ctc_graph(1200, B=1, L=480, C=5)
    ex = sim.compile(g, "ipu-mk2", sim.Options().enableSyntheticData(True))
    (op,) = [o for o in ex.graph.ops if o.kind == "ctc_loss"]
    assert ex.costs[op.name].supersteps > 1200  # two loops of 600 steps
    assert ex.memory[0].by_role["vertex_code"] < 0.01 * IPU.sram_bytes_per_tile * IPU.tiles


def test_training_scales_popnns_gradient():
    g = _ctc_graph(100)
    run = sim.simulate(g, "ipu-mk2", sim.Options().enableSyntheticData(True), training=True)
    ops = run.executable.graph.ops
    (loss,) = [o for o in ops if o.kind == "ctc_loss"]
    (grad,) = [o for o in ops if loss.outputs[1] in o.inputs]
    assert grad.kind == "mul" and run.executable.graph.tensors[grad.outputs[0]].shape == (100, 8, 30)


@pytest.mark.parametrize("args, why", [
    (dict(targets=(8,)), "padded targets"),
    (dict(reduction="max"), "reduction"),
])
def test_bad_arguments_are_named(args, why):
    b = GraphBuilder("ctc", "float16")
    lp = b.input("x", (50, 8, 30))
    t = b.input("t", args.get("targets", (8, 10)), "int32")
    with pytest.raises(GraphError, match=why):
        b.ctc_loss(lp, t, b.input("il", (8,), "int32"), b.input("tl", (8,), "int32"),
                   reduction=args.get("reduction", "mean"))


def test_per_sequence_losses_take_a_per_sequence_gradient():
    g = _ctc_graph(60, reduction="none")
    assert g.tensors[g.loss].shape == (8,)
    ex = sim.compile(g, "ipu-mk2", sim.Options().enableSyntheticData(True), training=True)
    assert math.prod(ex.graph.tensors[g.loss].shape) == 8
