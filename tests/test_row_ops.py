"""Softmax, its gradient and layer norm priced as poplibs composes them (sim/cost/row_ops.py):
popops reductions, each with its plan and call overhead, and element-wise compute sets."""

import math

from sim import load_system
from sim.cost import row_ops
from sim.cost.rules import _cost, _freeze
from sim.cost.vector import codelet, spread

IPU = load_system("bow-pod16").ipu
T = IPU.tiles


def cost(kind, ins, outs, attrs=None):
    sig = (kind, tuple((tuple(s), d, "activation") for s, d in ins), tuple((tuple(s), d) for s, d in outs),
           _freeze(attrs or {}))
    return _cost(sig, IPU, T, 0.6, "half")


def test_softmax_is_poplibs_steps():
    """BERT-Large's attention softmax (mbs 8, SL128): popnn softmaxImpl's two popops reductions
    (MAX, then ADD to float), each priced as the reduce op is, plus five element-wise compute sets."""
    rows, L = 8 * 16 * 128, 128
    sm = cost("softmax", [((8, 16, 128, 128), "float16")], [((8, 16, 128, 128), "float16")])
    rmax = cost("reduce_max", [((rows, L), "float16")], [((rows,), "float16")], {"axes": [1]})
    radd = cost("reduce_sum", [((rows, L), "float16")], [((rows,), "float32")], {"axes": [1]})
    exp = cost("exp", [((rows, L), "float16")], [((rows, L), "float16")])
    assert sm.supersteps == rmax.supersteps + radd.supersteps + 5
    # the reductions and the exp are exactly their own ops' compute; the rest are the sub and mul
    # over the rows (each popops' BroadcastVectorOuterByColumn vertex, rows of 128 being at least the six
    # workers' vectors: its fixed cycles, its cycles an element and, for each row piece (the tile's whole
    # rows and the pieces at its two ends), six outer loops of 7 and each worker's 22 halves loaded as 24)
    # and the reciprocal and cast of the sums
    used, busiest = spread(rows * L, 2, IPU, T)
    outer = codelet("broadcast_outer")
    assert (outer.fixed, outer.fp16, outer.per_run) == (101, 0.5, 7)
    per_row = 6 * (7 + 0.5 * 24) - 0.5 * L
    binop = math.ceil(outer.fixed + busiest * outer.fp16 + (math.ceil(busiest / L) + 1) * per_row)
    small = [math.ceil(codelet(k).fixed + math.ceil(rows / spread(rows, 4, IPU, T)[0]) * codelet(k).fp32)
             for k in ("reciprocal", "cast")]
    assert sm.compute_cycles == rmax.compute_cycles + radd.compute_cycles + exp.compute_cycles + 2 * binop + sum(small)
    # each tile receives the max (and 1/sum) of the rows it holds, not a tile's worth of values
    stat_bytes = (math.ceil(busiest / L) + 1) * 2
    assert sm.exchange_cycles == (rmax.exchange_cycles + radd.exchange_cycles
                                  + 2 * (IPU.exchange_setup_cycles + math.ceil(stat_bytes / IPU.exchange_rate)))


def test_layernorm_statistics_share_compute_sets():
    """poplin normStatistics: the ADD and SQUARE_ADD reductions go into one list of compute sets
    (one reduce call's fixed cycles), then InverseStdDeviation and four broadcast element-wise sets."""
    ln = cost("layernorm", [((8, 128, 1024), "float16"), ((1024,), "float16"), ((1024,), "float16")],
              [((8, 128, 1024), "float16")])
    one = cost("reduce_sum", [((1024, 1024), "float16")], [((1024,), "float32")], {"axes": [1]})
    assert ln.supersteps == one.supersteps + 5
    # whitening by the per-row statistics on popops' outer broadcast vertex; gamma and beta (per
    # column) on plain vertices, as a tile holds less than a row (712 of 1,024 elements), so popops
    # finds no repeated vector; with whole rows on a tile they take the inner broadcast vertex
    assert "reduce add+square_add" in ln.plan
    assert ln.plan.endswith("row broadcast_outer, row broadcast_outer, col mul, col add")
    short = cost("layernorm", [((64, 128, 64), "float16"), ((64,), "float16"), ((64,), "float16")],
                 [((64, 128, 64), "float16")])
    assert short.plan.endswith("col broadcast_inner_mul, col broadcast_inner_add")
    # dearer than the one-codelet estimate it replaced (6 sets of 160 cycles + 3.5 cycles an element,
    # a sync each): the extra compute sets, syncs and broadcasts of the popops calls
    old = 6 * 160 + 1024 * 3.5 + 6 * IPU.internal_sync_cycles
    assert ln.cycles > old


def test_softmax_grad_steps():
    g = cost("softmax_grad", [((8, 16, 128, 128), "float16"), ((8, 16, 128, 128), "float16")],
             [((8, 16, 128, 128), "float16")])
    assert [s[0] for s in row_ops.SOFTMAX_GRAD_STEPS] == ["map", "reduce", "row", "map"]
    radd = cost("reduce_sum", [((16384, 128), "float16")], [((16384,), "float16")], {"axes": [1]})
    assert g.supersteps == radd.supersteps + 3


def test_inner_reduction_of_whole_rows_is_all_regions_continuous():
    """A tile holding whole rows of a reduction over the innermost dimension (BERT-Base's layer
    norm statistics: 4,096 rows of 768, about 3 rows a tile) runs popops' ALL_REGIONS_CONTINUOUS
    vertex (ReductionConnection.cpp getReductionVertexSpecialisation), not the default vertex that
    fetches a pointer per partial."""
    from sim.cost.reduction import TileWork, continuous_cycles, tile_cycles
    cont, _ = tile_cycles(TileWork(3, 768, 768, contiguous=True), 2, 2, "add", 6)
    default, _ = tile_cycles(TileWork(3, 768, 768), 2, 2, "add", 6)
    assert sum(cont) < sum(default) / 5
    # one column: the continuous vertex either way (unchanged)
    one, _ = tile_cycles(TileWork(1, 768, 768, contiguous=True), 2, 2, "add", 6)
    assert one == tile_cycles(TileWork(1, 768, 768), 2, 2, "add", 6)[0]
    assert continuous_cycles(3, 768, 2, "add") < continuous_cycles(3, 1536, 2, "add")


def test_layernorm_grad_is_groupnorm_grad_opx():
    """PopART's GroupNormGradOpx: the whitening again, normGradients, normStatisticsGradients (one
    joint reduction of two values per row) and the parameter gradients' product: 11 element-wise
    compute sets and the reduction's."""
    shape = (8, 128, 1024)
    g = cost("layernorm_grad", [(shape, "float16"), (shape, "float16"), ((1024,), "float16")], [(shape, "float16")])
    assert sum(1 for s in row_ops.LAYERNORM_GRAD_STEPS if s[0] != "reduce") == 11
    two = cost("reduce_sum", [((1024, 1024), "float16")], [((1024,), "float16")], {"axes": [1]})
    assert g.supersteps == two.supersteps + 11
    # more than the 7-set, 4.25-cycles-an-element estimate it replaced
    assert g.cycles > 7 * 160 + 1024 * 4.25 + 7 * IPU.internal_sync_cycles


def test_row_op_codelets_are_shared_popops_codelets():
    """The vertex code of a row op: one codelet per distinct step (the layer-norm gradient's five
    row multiplies share two: poplin's mul and mulInPlace), keyed like the ops that run the same
    popops codelet."""
    keys = row_ops.row_op_codelets("layernorm_grad", "float16")
    assert len(keys) == len(set(keys)) == 8
    assert ("broadcast mul_inplace", "float16", 0) in keys
    assert ("reduce_sum", "float16", 0) in keys and ("broadcast mul", "float16", 0) in keys
    assert ("mul", "float16", 0) in keys  # the plain multiply, as a ``mul`` op keys its codelet
