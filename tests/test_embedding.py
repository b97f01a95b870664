"""popops' embedding layer (sim/cost/embedding.py): the plan popops' embedding::plan picks, the
MultiSlice / MultiUpdateAdd vertex estimates, and the op costs built from them (poplibs 8dcde1ec)."""

import math

import pytest

import sim.poplibs_benchmarks as pb
from sim import GraphBuilder, load_system
from sim.cost import op_cost
from sim.cost.embedding import (_splits, in_range_share, max_elems_per_worker, multi_slice_cycles,
                                multi_update_op_cycles, offsets_per_worker, plan_embedding, plan_embedding_sdk3,
                                slice_worker_cycles, update_worker_cycles)

MK2 = load_system("ipu-mk2").ipu


def test_splits_are_the_smallest_split_of_each_quotient():
    """popsolver ceildivConstrainDivisor: 100 grains split 11 ways is 10 a tile, as 10 ways gives."""
    assert _splits(100, 100) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 15, 17, 20, 25, 34, 50, 100]
    assert _splits(100, 16) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 15]


@pytest.mark.parametrize("entries, lookups, tiles, expected", [
    # a small table and many indices: 14 lookup groups, each a full copy of the table's columns
    (1000, 21600, 1472, (100, 1, 14)),
    # a large table: spread over rows and columns, one lookup group
    (100000, 1440, 1472, (100, 14, 1)),
    (100000, 11520, 1472, (100, 14, 1)),
    (1000, 21600, 1216, (100, 1, 12)),  # the Mk1 IPU's 1,216 tiles
])
def test_plan_of_poplibs_embedding_benchmarks(entries, lookups, tiles, expected):
    """fp16 rows of 200: grains of 2 halves (one 4-byte atom), 100 a row; the planner's goal
    (10 x persistent bytes + peak temporary bytes on the worst tile) is lowest with one grain a tile."""
    plan = plan_embedding(entries, 200, lookups, 2, tiles)
    assert (plan.unsliced, plan.sliced, plan.lookup) == expected
    assert plan.grain == 2 and plan.columns_per_tile == 2 and plan.tiles <= tiles


def test_a_lookup_alone_is_planned_for_slicing():
    """PopART plans a Gather for slicing only (usedForUpdate false) and its gradient for the update;
    without the update's fp32 copies of the table in the goal, the small table spreads over more
    lookup groups. A large table's plan is the same either way."""
    assert [(p.unsliced, p.sliced, p.lookup) for p in (plan_embedding(1000, 200, 21600, 2, 1472, False),
                                                        plan_embedding(100000, 200, 1440, 2, 1472, False))] == [
        (50, 1, 29), (100, 14, 1)]
    b = GraphBuilder("lookup", "float16")
    ids = b.input("ids", (21600,), dtype="int32")
    table = b.weight("table", (1000, 200))
    b.output(b.embedding(ids, table))
    # a graph's own lookup is planned by the SDK 3.x popops (7eac0f26: the fewest estimated cycles, 64-bit
    # grains of 4 halves); the 8dcde1ec memory-goal plan above was asserted here before
    assert "17 column x 1 row x 86 lookup" in op_cost(b.graph.ops[0], b.graph, MK2, MK2.tiles).plan


def test_vertex_estimates_worked_by_hand():
    # MultiSlice: 16 + n x (19 + 3 x 64-bit vectors); 2 halves are one vector, 200 floats 100
    assert slice_worker_cycles(10, 2, 2) == 16 + 10 * (19 + 3)
    assert slice_worker_cycles(10, 200, 4) == 16 + 10 * (19 + 3 * 100)
    # MultiUpdateAdd: 3 + 15 (14 fp32) + n x (12 (11) + 3 per atom after the first)
    assert update_worker_cycles(10, 2, 2) == 3 + 15 + 10 * 12
    assert update_worker_cycles(10, 8, 4) == 3 + 14 + 10 * (11 + 7 * 3)
    # a half tile with an odd column count writes sub-words: 20 cycles a column
    assert update_worker_cycles(10, 3, 2) == 3 + 15 + 10 * (12 + 3 * 20)
    assert update_worker_cycles(0, 2, 2) == 3
    # offsets over 6 workers, whole 32-bit words of halves
    assert offsets_per_worker(1440, 2, 6) == 240 and offsets_per_worker(1543, 2, 6) == 258
    assert offsets_per_worker(1543, 4, 6) == 258 and offsets_per_worker(7, 2, 6) == 2


def test_large_table_costs_worked_by_hand():
    """embedding_vlarge_large_indices on Mk2: one lookup group of 11,520 indices; every tile checks
    every index. The lookup: 6 workers of 1,920 indices, 16 + 1920 x 22 = 42,256, x 6 = 253,536 tile
    cycles, then (after the indices are adjusted) the second stage over the 14 dictionary splits:
    ceil(11520 / 14) = 823 indices,
    138 a worker (whole words), 16 + 138 x 22 = 3,052, x 6 = 18,312. The update: one worker with
    all 11,520, 18 + 11520 x 12 = 138,258, x 6 = 829,548."""
    bench = pb.BENCHES["embedding_vlarge_large_indices"]
    g = pb.graph(bench)
    look, update = g.ops
    # the benchmark data are poplibs 8dcde1ec's, so its ops name that poplibs' planner and vertices
    assert (look.kind, update.kind, update.attrs) == ("gather", "embedding_grad",
                                                      {"into_table": True, "poplibs": "8dcde1ec"})
    assert look.attrs == {"plan_for_update": True, "poplibs": "8dcde1ec"}
    assert g.tensors[look.outputs[0]].dtype == "float16"
    lookup_cost = op_cost(look, g, MK2, MK2.tiles)
    update_cost = op_cost(update, g, MK2, MK2.tiles)
    # between the stages, the iota of a partition's 823 positions on 26 tiles (32 a tile: 10 + 4 + 3 x
    # 16 two-index vectors = 62, x 6 = 372) and the map adjusting the indices, 32 a tile, unfused:
    # divide by ceil(100000 / 14) = 7,143 rows (11 + 6 x (20 + 64 x 6)), multiply (11 + 6 x (20 + 6 x 6)),
    # add (11 + 6 x (26 + 7 x 6))
    between = lookup_cost.compute_cycles - 253_536 - 18_312
    assert between == 372 + 2_435 + 347 + 419
    assert update_cost.compute_cycles == 829_548
    assert lookup_cost.supersteps == 6 and update_cost.supersteps == 1  # stage 0, iota, 3 index ops, stage 1
    assert "100 column x 14 row x 1 lookup" in update_cost.plan


def test_embedding_rows_against_poplar():
    """Poplar's IPUModel2 and IPUModel1 cycles of the three embedding_layer benchmarks: within 6 %
    (embedding_vlarge is -3.1 % / -2.6 %; nothing was fitted to them)."""
    for target in pb.TARGETS:
        rows = [r for r in pb.rows(target) if r.bench.tool == "embedding"]
        assert [r.name for r in rows] == ["embedding_small", "embedding_vlarge", "embedding_vlarge_large_indices"]
        for r in rows:
            assert abs(r.error()) < 0.06, (target, r.name, r.error())


def test_a_gradient_zeroes_its_dense_table_first():
    """PopART's GatherGrad: popops::zero of the dense gradient, then multiUpdateAdd (scale 1); the
    benchmark's update adds into the table it is given (into_table) and zeroes nothing."""
    b = GraphBuilder("grad", "float16")
    ids = b.input("ids", (1024,), dtype="int32")
    dy = b.input("dy", (1024, 768))
    grad = b.op("embedding_grad", [ids, dy], [(30522, 768)], name="grad")[0]
    b.output(grad)
    into = GraphBuilder("into", "float16")
    i2 = into.input("ids", (1024,), dtype="int32")
    d2 = into.input("dy", (1024, 768))
    table = into.weight("table", (30522, 768))
    from sim.graph.ir import Op
    into.graph.add_op(Op("upd", "embedding_grad", [i2, d2, table], [table], {"into_table": True}))
    dense = op_cost(b.graph.ops[0], b.graph, MK2, MK2.tiles)
    direct = op_cost(into.graph.ops[0], into.graph, MK2, MK2.tiles)
    assert dense.supersteps == direct.supersteps + 1
    assert dense.compute_cycles > direct.compute_cycles


def test_the_zeroed_table_costs_the_rate_fitted_on_the_bow_scatter_sweep():
    """The table a scatter-add (or an embedding's gradient) adds into is zeroed at configs/_vector-ops.toml
    ``table_zero``: 100 + 4.5 cycles an fp32 element on the busiest tile (1.125 cycles a byte, fitted on
    Gradient-Pytorch-Geometric's Bow sweep). 16 updates into 32,768 rows of 256: popops' plan splits the
    columns 64 ways and the rows 23, one lookup group, so each tile zeroes 1,425 rows of 4 columns:
    100 + 4.5 x 5,700 = 25,750 cycles, a compute set (and its sync) more than adding into the table."""
    bow = load_system("bow-ipu").ipu
    plan = plan_embedding_sdk3(32768, 256, 16, 4, bow.tiles, bow, False, True, "add")
    assert (plan.unsliced, plan.sliced, plan.lookup, plan.rows_per_tile, plan.columns_per_tile) == (64, 23, 1, 1425, 4)

    def grad(into: bool):
        b = GraphBuilder("grad", "float32")
        ids, dy = b.input("ids", (16,), dtype="int32"), b.input("dy", (16, 256))
        if into:
            from sim.graph.ir import Op
            table = b.weight("table", (32768, 256))
            b.graph.add_op(Op("upd", "embedding_grad", [ids, dy, table], [table], {"into_table": True}))
        else:
            b.op("embedding_grad", [ids, dy], [(32768, 256)], name="grad")
        return op_cost(b.graph.ops[-1], b.graph, bow, bow.tiles)
    dense, direct = grad(False), grad(True)
    assert dense.compute_cycles - direct.compute_cycles == 100 + 4.5 * 1425 * 4
    assert (dense.supersteps - direct.supersteps, dense.launch_cycles - direct.launch_cycles) == (1, 100)


def test_several_lookup_groups_zero_the_spread_table_and_fill_their_partials_at_copy_rate():
    """With several lookup groups the zeroed table is spread over the groups' tiles too (popops'
    createSliceableTensor: a tile's rows' grains over the 11 groups), while each group's partials,
    which popops fills itself, cost copy's 0.5 cycles an fp32 element (4,096 updates into 4,096 rows
    of 64: 1,024 rows of 2 columns a tile)."""
    from sim.cost.rules import _zero_table
    bow = load_system("bow-ipu").ipu
    plan = plan_embedding_sdk3(4096, 64, 4096, 4, bow.tiles, bow, False, True, "add")
    assert (plan.lookup, plan.rows_per_tile, plan.columns_per_tile, plan.grain) == (11, 1024, 2, 2)
    assert _zero_table(plan, 4, bow, bow.tiles).compute_cycles == 100 + 4.5 * math.ceil(1024 / 11) * 2
    assert _zero_table(plan, 4, bow, bow.tiles, base=False).compute_cycles == 100 + 0.5 * 1024 * 2


def test_small_table_lookups_spread_over_groups():
    """BERT's token-type table (2 rows of 1,024) looked up 4,096 times: the plan copies the table to
    many lookup groups, so each tile handles a few indices rather than all of them."""
    plan = plan_embedding(2, 1024, 4096, 2, MK2.tiles)
    assert plan.lookup > 1 and plan.lookups_per_group == math.ceil(4096 / plan.lookup)
    assert plan.sliced == 1


def test_sdk3_vertex_estimates_worked_by_hand():
    """popops 7eac0f26 PerformanceEstimation.cpp: MultiSlice (30 + in-range x (19 + 2 per 64-bit vector)
    + out-of-range x 8) x 6 workers; ScaledMultiUpdateOp fp32 (3 + 29 + 6 + in-range x (11 + 3 per
    further atom) + out-of-range x 5) x 6, its 64-bit rows 8 an offset; fp16 scaled 13 an offset."""
    assert multi_slice_cycles(16, 10, 10, 4, 6) == (30 + 10 * (19 + 2 * 8)) * 6
    assert multi_slice_cycles(16, 10, 4, 4, 6) == (30 + 4 * (19 + 16) + 6 * 8) * 6
    assert multi_slice_cycles(16, 1, 1, 4, 6, split_single_region=True) == (30 + 19 + 2 * 2) * 6
    assert multi_update_op_cycles(16, 32, 1, 4, 6) == (3 + 29 + 6 + 1 * (11 + 15 * 3) + 31 * 5) * 6
    assert multi_update_op_cycles(2, 32, 32, 4, 6) == (3 + 28 + 6 + 32 * 8) * 6
    assert multi_update_op_cycles(8, 10, 10, 2, 6) == (3 + 30 + 4 + 10 * (13 + 3 * 3)) * 6
    assert multi_update_op_cycles(8, 10, 10, 2, 6, scaled=False, operation="max") == (3 + 30 + 10 * (12 + 9)) * 6
    # a worker's share: offsets (a slice) or rows (an update) over the 6 workers; the uniform in-range share
    assert max_elems_per_worker(100, 6) == 17 and max_elems_per_worker(7, 6, 2) == 2
    assert in_range_share(32, 17, 32768) == 1 and in_range_share(12, 16, 16) == 12


def test_sdk3_plans_spread_small_problems_over_the_ipu():
    """The SDK 3.x planner minimises cycles: a 16-row fp32 table looked up 8,192 times keeps the table
    whole (no second stage) and spreads the lookups; a scatter-add of 16 rows into 32,768 spreads the
    table's rows (an update cannot split its lookups without partials)."""
    bow = load_system("bow-ipu").ipu
    gather = plan_embedding_sdk3(16, 16, 8192, 4, bow.tiles, bow, True, False, None)
    assert gather.sliced == 1 and gather.lookup > 100 and gather.grain == 2
    scatter = plan_embedding_sdk3(32768, 512, 16, 4, bow.tiles, bow, False, True, "add")
    assert scatter.lookup == 1 and scatter.tiles > 1400


def test_a_split_dictionary_adjusts_its_indices_one_binary_op_a_compute_set():
    """multiSlicePlanned's second-stage indices, ``_2 + (_1 / rows) * _3``, run unfused (two operands
    are broadcast views): a divide, a multiply and an add, each its own compute set on the indices'
    tiles (32 a tile); a partition of a power-of-two rows divides by a shift. popops' estimates: scalar
    vertices 11 + 6 x (20 + per element x 6), BinaryOp1D 11 + 6 x (26 + 7 x 6); the divide's 64 a
    worker's element is fitted (configs/_vector-ops.toml)."""
    from sim.cost.rules import _second_stage_indices
    from sim.cost.vector import index_op_tile_cycles
    bow = load_system("bow-ipu").ipu
    assert index_op_tile_cycles("multiply", 32, 6) == 11 + 6 * (20 + 6 * 6)
    assert index_op_tile_cycles("add", 32, 6) == index_op_tile_cycles("shift_right", 32, 6) == 11 + 6 * (26 + 7 * 6)
    assert index_op_tile_cycles("divide", 32, 6) == 11 + 6 * (20 + 64 * 6)
    for entries, lookups, sliced, divides in ((1024, 128, 11, True), (512, 512, 4, False)):
        plan = plan_embedding_sdk3(entries, 32, lookups, 4, bow.tiles, bow)
        assert plan.sliced == sliced
        steps = _second_stage_indices(plan, bow, bow.tiles)
        assert [c.supersteps for c, _ in steps] == [1, 1, 1]
        assert all(c.tiles_used == lookups // 32 for c, _ in steps)
        first = steps[0][0].compute_cycles
        assert first == index_op_tile_cycles("divide" if divides else "shift_right", 32, 6)
