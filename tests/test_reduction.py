"""popops::reduce as popops plans and prices it (sim/cost/reduction.py): the linear layout, the
stages and the reduce vertices. Cycles worked by hand from the estimators of poplibs 8dcde1ec
(the docstrings show the arithmetic); the bert_reduce_0 plan end to end is in
tests/test_poplibs_benchmarks.py."""

from __future__ import annotations

import pytest

from sim import Graph, Op, load_system
from sim.cost import op_cost
from sim.cost.reduction import continuous_cycles, default_cycles, linear_chunk, plan_reduce, strided_cycles


def test_linear_layout_and_strided_vertex():
    # 1,000 halves: grains of 4, at least 64 a tile -> 16 tiles of 64 (poputil splitRegions)
    assert linear_chunk(1000, 2, 1472) == 64
    assert linear_chunk(802816, 2, 1472) == 548
    # 8 outputs, 10 rows, fp32 partials: 7 + 17 + 6 * 4 + 80 / 2
    assert strided_cycles(8, 10, 8, 4, "add") == 88


def test_default_and_continuous_vertices_worked_by_hand():
    """Default vertex, 4 fp32 outputs from 16 fp32 partials (ADD): 7 + 26 + 24 + 2*log2(4) = 61;
    one vector loop 5 + (2*min(4, 2) + 1) + 1 = 11; per partial 7 + 3 = 10 fetching and
    2 + 2 + 4/2 + 3 = 9 accumulating: 61 + 11 + 16 * 19 = 376. The continuous vertex is handed
    numOutputsM1: one output costs 10 + 7 = 17; 3 outputs of 65 halves 2*(65 // 4) + 2 (odd) +
    12*2 + 17 = 75."""
    assert default_cycles(4, 16, 4, 4, "add") == 376
    assert continuous_cycles(1, 64, 4, "add") == 17
    assert continuous_cycles(3, 65, 2, "add") == 75


def test_log_add_vertices_worked_by_hand():
    """popops' LOG_ADD (getCycleEstimateForReduceVertex at 8dcde1ec): the strided vertex has an
    assembler log-add, 23 cycles per f32v2 (12 per f16v4): 8 fp32 outputs of 10 rows,
    7 + 17 + 6 * 4 + 23 * 80 / 2 = 968; every other vertex a scalar C++ log-add of 20 cycles, the
    default vertex 7 + 16 + 10 and 2 + 20 + 3 + 1 per partial element: 33 + 26 * 64 = 1697 for 4
    outputs of 16 partials (27 an element when the output type differs); the continuous vertex
    20 per partial of each output but the last (numOutputsM1): 20 * 2 * 65 + 2 + 12 * 2 + 17 = 2643."""
    assert strided_cycles(8, 10, 8, 4, "log_add") == 968
    assert strided_cycles(8, 10, 8, 2, "log_add") == 7 + 17 + 6 * 2 + 12 * 80 // 4
    assert default_cycles(4, 16, 4, 4, "log_add") == 1697
    assert default_cycles(4, 16, 4, 2, "log_add") == 33 + 27 * 64
    assert continuous_cycles(3, 65, 4, "log_add") == 2643


def test_log_add_reductions_cost_their_scalar_vertices():
    """The same plan's stages for ADD and LOG_ADD, the LOG_ADD compute sets about 20 cycles an
    element dearer (a scalar C++ log-add against a vectorised add)."""
    add, log_add = (plan_reduce((201, 13500), (0,), 4, op, 1472, 6) for op in ("add", "log_add"))
    assert [s.name for s in add.stages] == [s.name for s in log_add.stages]
    assert log_add.compute_cycles > 8 * add.compute_cycles


def test_reduce_of_a_column_on_one_tile_needs_no_exchange():
    # [64, 8] over dim 1: each row's 8 values on one tile: one compute set, no exchange
    plan = plan_reduce((64, 8), (1,), 2, "add", 1472, 6)
    assert [s.name for s in plan.stages] == ["on tile to output"] and plan.exchange_phases == 0


def test_broadcast_gradient_reduces_the_broadcast_dimensions():
    ipu = load_system("ipu-mk2").ipu
    g = Graph("b")
    g.add_tensor("dy", (32, 128, 768), "float16", "activation")
    g.add_tensor("db", (768,), "float16", "activation")
    cost = op_cost(Op("r", "reduce_sum", ["dy"], ["db"], {"axes": "broadcast"}), g, ipu, ipu.tiles)
    same = op_cost(Op("r", "reduce_sum", ["dy"], ["db"], {"axes": [0, 1]}), g, ipu, ipu.tiles)
    assert cost.compute_cycles == same.compute_cycles and cost.exchange_cycles == same.exchange_cycles
    assert "popops reduce (add)" in cost.plan


@pytest.mark.parametrize("kind", ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_mean"])
def test_every_reduce_kind_is_planned(kind):
    ipu = load_system("ipu-mk2").ipu
    g = Graph("k")
    g.add_tensor("x", (64, 1000), "float32", "activation")
    g.add_tensor("y", (64,), "float32", "activation")
    cost = op_cost(Op("r", kind, ["x"], ["y"], {"axes": [1]}), g, ipu, ipu.tiles)
    assert cost.compute_cycles > 0 and cost.supersteps >= 1


def test_chunks_spanned_counts_the_chunks_of_a_column_as_brute_force_does():
    """The run-interval count of a column's chunks (used beyond EXACT_ELEMENTS) equals counting
    every element's chunk, for runs that step within a chunk and runs that skip chunks."""
    import itertools

    import numpy as np

    from sim.cost.reduction import _chunks_spanned
    rng = np.random.default_rng(7)
    for _ in range(200):
        shape = tuple(int(d) for d in rng.integers(1, 9, size=4))
        axes = tuple(sorted(rng.choice(4, size=int(rng.integers(1, 4)), replace=False).tolist()))
        chunk = int(rng.integers(1, 40))
        strides = [int(np.prod(shape[i + 1:])) for i in range(4)]
        outer = np.zeros(1, dtype=np.int64)
        for a in axes[:-1]:
            outer = (outer[:, None] + np.arange(shape[a]) * strides[a]).ravel()
        kept = [i for i in range(4) if i not in axes]
        for digits in itertools.product(*(range(shape[i]) for i in kept)):
            base = sum(d * strides[i] for d, i in zip(digits, kept))
            elements = [base + sum(k * strides[a] for k, a in zip(ks, axes))
                        for ks in itertools.product(*(range(shape[a]) for a in axes))]
            want = len({e // chunk for e in elements})
            assert _chunks_spanned(outer, strides[axes[-1]], shape[axes[-1]], chunk, base) == want
