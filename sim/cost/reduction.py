"""popops::reduce as popops plans and runs it: stages, tiles, workers, vertex cycles.

A reduction of a tensor over some of its dimensions is seen, as popops sees it
(``lib/popops/reduction/Reduction.cpp :: mangleTo2D``), as a 2-D ``[rows, columns]`` view: the
reduced dimensions are the rows, the kept ones the columns (one output per column). The input
is laid out as poputil lays out a new tensor (``mapTensorLinearly``: grains of the 64-bit vector,
at least 128 bytes a tile, contiguous chunks on successive tiles), so each tile holds some
columns, several values of each. popops (poplibs 8dcde1ec, ``reduceFirstDim2D``) then runs:

1. *on tile*: if a column spans one tile only, one compute set reduces each tile's values to the
   output (no exchange, the output on the input's tiles); otherwise, if a tile holds several
   values of a column, a compute set reduces them to one partial per column and tile
   (``inputToIntermediateNoExchange``), in the accumulation type (fp32 for ADD / SQUARE_ADD of
   fp16, else the input's type);
2. *intermediate stages* (``calculateNextStep``, ``intermediateToIntermediate``): while the
   columns' partials are spread over too many tiles (``2·√tiles`` or more sources, or fewer than
   3/4 of the tiles hold partials) and there are more than 64 partials per output, the columns
   are cut into pieces of a grain, each piece's partials split in groups of at least 2 and 64
   values (``calculateSplit``), each group exchanged to a tile and reduced there;
3. *to output* (``intermediateToOutput``): the output is laid out linearly (grains of the
   accumulation type's vector, at least 4 vectors a tile), each output tile receives every
   partial of its outputs and reduces them.

Every compute set splits a tile's work over its workers (``worker_threads`` of the IPU config) as ``connectReductions`` does (output
columns in grains, ``splitOutputRegionsForWorkers``; a reduction left with workers free is split
by rows into two on-tile compute sets, ``splitTwoStageReductionsBetweenWorkers``), and a
worker's cycles are ``reduction/CycleEstimationFunctions.cpp``'s (strided and default vertices).
Those are thread cycles: a tile's compute set lasts ``workers ×`` its busiest worker
(docs/reference/poplibs-costs.md, conventions). The estimator constants are in
``configs/_vector-ops.toml`` ``[reduce_vertex]``, with the one fitted value: the fixed cycles a
reduce call costs beyond its planned steps (``call_fixed_cycles``, charged by the op's cost rule).
Cycles are tile cycles, bytes are bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .vector import whole_number_table

ACCUMULATING = ("add", "square_add")  # popops ops that accumulate in fp32 (opBenefitsFromHigherIntermediatePrecision)
#: popops' LOG_ADD, log(exp(a) + exp(b)) (popnn's CTC loss reduces with it): no vectorised vertex; an
#: assembler log-add in the strided vertex only, a scalar C++ one in every other
LOG_ADD = "log_add"
_KEYS = ("entry", "strided_fixed", "strided_per_outer_loop", "default_fixed", "default_per_region",
         "fetch_ptr", "continuous_fixed", "continuous_per_output", "approx_vertex_overhead", "approx_min_cycles_per_split", "sources_factor",
         "stage_threshold", "min_piece_size", "call_fixed_cycles", "log_add_strided_float", "log_add_strided_half",
         "log_add_cpp", "cpp_fixed", "cpp_per_region", "cpp_per_element")


@lru_cache(maxsize=1)
def constants() -> dict[str, int]:
    """The ``[reduce_vertex]`` table of ``configs/_vector-ops.toml``."""
    return whole_number_table("reduce_vertex", _KEYS)


# --- worker cycles of one reduce vertex (reduction/CycleEstimationFunctions.cpp) ----------------

def _vector_width(nbytes: int) -> int:
    """Elements of ``nbytes`` bytes in a 64-bit vector (Target::getVectorWidth)."""
    return max(1, 8 // nbytes)


def _op_vector_width(nbytes: int, op: str) -> int:
    """Elements one accumulating vector op handles (accVectorWidth: 8 halves, 4 floats) for ADD
    and SQUARE_ADD; the plain vector width for MAX / MIN / MUL."""
    return 2 * _vector_width(nbytes) if op in ACCUMULATING else _vector_width(nbytes)


def strided_cycles(outputs: int, rows: int, stride: int, in_bytes: int, op: str) -> int:
    """Thread cycles of a STRIDED_REDUCE vertex: ``rows`` rows of ``outputs`` columns, rows
    ``stride`` elements apart; ``7 + 17 + 6·ceil(outputs/e) + rows·outputs/e`` with ``e`` the
    gcd of the elements a 64-bit load brings and the stride (getCyclesEstimateForReduce); a
    LOG_ADD's vector op (two floats or four halves) takes its assembler log-add's cycles."""
    c = constants()
    if op == LOG_ADD:
        width, per_op = (2, c["log_add_strided_float"]) if in_bytes >= 4 else (4, c["log_add_strided_half"])
    else:
        width, per_op = _op_vector_width(in_bytes, op), 1
    per_loop = math.gcd(min(width, _vector_width(in_bytes)), stride)
    return (c["entry"] + c["strided_fixed"] + math.ceil(outputs / per_loop) * c["strided_per_outer_loop"]
            + per_op * rows * outputs // per_loop)


def continuous_cycles(outputs: int, partials: int, in_bytes: int, op: str) -> int:
    """Thread cycles of an ALL_REGIONS_CONTINUOUS vertex: ``outputs`` single-element outputs, each
    from ``partials`` contiguous values (getCycleEstimateReduceAllRegionsContinuous). As at
    poplibs 8dcde1ec, the estimator is handed the vertex's ``numOutputsM1`` field as its output
    count, so one output costs only the fixed cycles."""
    c = constants()
    m1 = outputs - 1
    if op == LOG_ADD:  # the scalar C++ log-add, one partial a loop
        per_loop, per_op = 1, c["log_add_cpp"]
    else:
        per_loop, per_op = min(_op_vector_width(in_bytes, op), _vector_width(in_bytes)), 1
    return (per_op * m1 * (partials // per_loop) + (2 if partials & 1 else 0) + c["continuous_per_output"] * m1
            + c["continuous_fixed"])


def default_cycles(outputs: int, partials: int, in_bytes: int, out_bytes: int, op: str) -> int:
    """Thread cycles of the vectorised default Reduce vertex: one output region of ``outputs``
    elements from ``partials`` partials of the same width (getCyclesEstimateForReduce, the
    vectorisedOp branch, no update); a LOG_ADD takes the estimator's other branch, the C++
    vertex's: a scalar log-add and its loop for every partial element."""
    c = constants()
    if op == LOG_ADD:
        per_element = c["cpp_per_element"] + c["log_add_cpp"] + (in_bytes != out_bytes)
        return c["entry"] + c["cpp_fixed"] + c["cpp_per_region"] + partials * outputs * per_element
    acc = op in ACCUMULATING
    vw = _op_vector_width(in_bytes, op)
    load_width = min(vw, _vector_width(in_bytes))
    out_vw = _vector_width(out_bytes)

    def store(width):
        return 2 * min(width, out_vw) + acc

    checks = max(0, math.ceil(math.log2(vw)))
    loops, rest = divmod(outputs, vw)
    cycles = c["entry"] + c["default_fixed"] + c["default_per_region"] + 2 * checks
    cycles += loops * ((5 if acc else 3) + store(vw) + 1) + loops * partials * (c["fetch_ptr"] + 3)
    cycles += partials * loops * ((2 if acc else 0) + 2 + vw // load_width + 3)
    for i in range(checks):
        bit = 1 << i
        if rest & bit:
            cycles += (4 if acc else 2) + store(bit) + partials * (c["fetch_ptr"] + 3)
            cycles += partials * (2 + bit // min(bit, _vector_width(in_bytes)) + 3)
    return cycles


# --- how a tile's reductions are split over its workers (ReductionConnection.cpp) --------------

def _ops_per_cycle(outputs: int, out_bytes: int, op: str) -> int:
    """opsPerCycle: the vector width (doubled for ADD) if the output is one vector or less, else
    the widest power of two dividing it."""
    vw = _op_vector_width(out_bytes, op)
    w = vw
    while w:
        if outputs == w:
            return vw
        w //= 2
    w = vw
    while w:
        if outputs % w == 0:
            return w
        w //= 2
    return 1


def _row_splits(pieces: list[int], rows: int, out_bytes: int, op: str, workers: int) -> list[int]:
    """How many workers each reduction's rows are split over, the workers the reductions leave
    free given one at a time to the costliest while that lowers its approximate cycles
    (splitTwoStageReductionsBetweenWorkers); all ones if the costliest is not made cheaper."""
    c = constants()
    over = c["approx_vertex_overhead"]
    work = [math.ceil(p * rows / _ops_per_cycle(p, out_bytes, op)) for p in pieces]
    approx = [over + w for w in work]
    max_split = [min(rows // 2, a // c["approx_min_cycles_per_split"]) for a in approx]
    splits = [1] * len(pieces)
    one_stage = max(approx)
    for _ in range(max(0, workers - len(pieces))):
        i = approx.index(max(approx))
        if splits[i] + 1 >= max_split[i]:
            break
        after = 2 * over + work[i] // (splits[i] + 1)
        if after >= approx[i]:
            break
        approx[i], splits[i] = after, splits[i] + 1
    return splits if max(approx) != one_stage else [1] * len(pieces)


@dataclass
class TileWork:
    """One tile's reduction in one step: ``columns`` outputs, each from ``rows`` values (the
    same number for every column), the values of a column ``stride`` elements apart."""

    columns: int
    rows: int
    stride: int
    #: each column's values are one contiguous run (an inner reduction, whole rows on the tile):
    #: popops' ALL_REGIONS_CONTINUOUS vertex (ReductionConnection.cpp getReductionVertexSpecialisation,
    #: allRegionsContinuous: one output per region, the same number of contiguous partials each)
    contiguous: bool = False


def tile_cycles(work: TileWork, in_bytes: int, out_bytes: int, op: str, workers: int) -> tuple[list[int], int]:
    """(tile cycles of each compute set, vertices) of one tile's reduction: its columns split in
    grains over the ``workers`` (the IPU's worker threads) (one vertex per piece, a worker each); with workers left over, the
    rows of the costliest pieces split too, then a second compute set adds the split pieces'
    partials."""
    grain = _op_vector_width(in_bytes, op)  # findGrainSizeForOp
    grains = math.ceil(work.columns / grain)
    per_piece = math.ceil(grains / workers) * grain
    pieces = [min(per_piece, work.columns - i) for i in range(0, work.columns, per_piece)]

    def vertex(cols, rows, stride, ib, contiguous=False):
        # getReductionVertexSpecialisation: the strided vertex when the outputs fill whole
        # 32-bit words and the partials of a row whole 64-bit words (isStridedReduction)
        if cols == 1 or contiguous:  # one output per run of contiguous values (allRegionsContinuous)
            return continuous_cycles(cols, rows, ib, op)
        if (cols * ib) % 8 == 0 and (cols * out_bytes) % 4 == 0:
            return strided_cycles(cols, rows, stride, ib, op)
        return default_cycles(cols, rows, ib, out_bytes, op)

    splits = _row_splits(pieces, work.rows, out_bytes, op, workers)
    if max(splits) > 1:  # connectTwoStageReductions: rows split over workers, then their partials added
        acc_bytes = max(in_bytes, 4) if op in ACCUMULATING else in_bytes
        first = max(vertex(p, math.ceil(work.rows / k), work.stride, in_bytes, work.contiguous)
                    for p, k in zip(pieces, splits))
        second = max(vertex(p, k, p, acc_bytes) for p, k in zip(pieces, splits) if k > 1)
        return [workers * first, workers * second], sum(splits) + sum(k > 1 for k in splits)
    cycles = max(vertex(p, work.rows, work.stride, in_bytes, work.contiguous) for p in pieces)
    return [workers * cycles], len(pieces)


# --- the stages ---------------------------------------------------------------------------------

@dataclass
class Stage:
    """One step of the plan: an exchange (bytes into the busiest receiving tile; 0 for none)
    then ``compute`` (tile cycles of each compute set, busiest tile) on ``tiles`` tiles."""

    name: str
    tiles: int
    compute: list[int]
    exchange_bytes: int = 0
    exchange_total: int = 0  # bytes moved over all tiles
    vertices: int = 0


@dataclass
class ReducePlan:
    """The stages popops runs for one reduction."""

    stages: list[Stage] = field(default_factory=list)
    input_tiles: int = 0

    @property
    def compute_sets(self) -> int:
        return sum(len(s.compute) for s in self.stages)

    @property
    def compute_cycles(self) -> int:
        return sum(sum(s.compute) for s in self.stages)

    @property
    def exchange_phases(self) -> int:
        return sum(1 for s in self.stages if s.exchange_bytes)

    def describe(self) -> str:
        return "; ".join(f"{s.name} on {s.tiles} tiles" for s in self.stages)


def linear_chunk(elements: int, itemsize: int, tiles: int, min_bytes: int = 128) -> int:
    """Elements per tile of poputil's linear mapping (``splitRegions``: grains of the 64-bit
    vector, at least ``min_bytes`` a tile)."""
    grain = _vector_width(itemsize)
    min_grains = math.ceil(math.ceil(min_bytes / itemsize) / grain)
    return max(math.ceil(math.ceil(elements / grain) / tiles), min_grains) * grain


EXACT_ELEMENTS = 1 << 16  # above this, the layout's statistics come from a sample of tiles and columns
SAMPLE = 96  # tiles (and columns) sampled, evenly spaced, for a larger tensor


@dataclass(frozen=True)
class LayoutStats:
    """What popops' plan needs of the linear layout of the 2-D view: the busiest tile's columns
    and values per column, the most tiles any column spans, the (tile, column) pairs holding
    values (the partials an on-tile stage leaves) and whether a tile holds several values of a
    column."""

    columns: int
    rows: int
    spread: int
    pairs: int
    multi: bool


def _column_of(shape: tuple, axes: tuple, flat: np.ndarray) -> np.ndarray:
    """The 2-D view's column (the kept dimensions' index, row-major) of each flat index."""
    col = np.zeros_like(flat)
    rest = flat.copy()
    scale = 1
    for i in range(len(shape) - 1, -1, -1):
        rest, digit = np.divmod(rest, shape[i])
        if i not in axes:
            col += digit * scale
            scale *= shape[i]
    return col


def _tile_columns(shape: tuple, axes: tuple, chunk: int, tiles_: np.ndarray, n: int):
    """(tile, column, values) per pair held by the given tiles, element by element."""
    starts = tiles_ * chunk
    sizes = np.minimum(chunk, n - starts)
    flat = np.repeat(starts, sizes) + (np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes))
    tile_of = np.repeat(tiles_, sizes)
    col = _column_of(shape, axes, flat)
    width = int(col.max()) + 1
    pairs, counts = np.unique(tile_of * width + col, return_counts=True)
    return pairs // width, pairs % width, counts


def _blocks(shape: tuple, axes: tuple) -> list[tuple[int, bool]]:
    """The layout's dimensions as (elements, reduced) blocks, outermost first: dimensions of size 1
    dropped (their index is always 0) and neighbours of one kind merged (a run of kept dimensions
    indexes the column row-major, as one dimension of their product would)."""
    blocks: list[tuple[int, bool]] = []
    for i, size in enumerate(shape):
        if size == 1:
            continue
        reduced = i in axes
        if blocks and blocks[-1][1] == reduced:
            blocks[-1] = (blocks[-1][0] * size, reduced)
        else:
            blocks.append((size, reduced))
    return blocks


def _tile_column_counts(shape: tuple, axes: tuple, starts: np.ndarray, sizes: np.ndarray):
    """(distinct columns, most values of one column) of each tile holding the flat elements
    ``starts[i]`` to ``starts[i] + sizes[i] - 1`` (sizes at least 1), in closed form, as
    :func:`_tile_columns` counts them element by element; None for a layout of more than two
    blocks (:func:`_blocks`), which is left to that.

    With one block the column is 0 (all reduced) or the element itself (all kept). Reduced
    then kept (``K`` columns): the column is the element modulo ``K``, so ``L`` consecutive
    elements hold ``min(L, K)`` columns, at most ``ceil(L / K)`` values of one. Kept then
    reduced (``R`` values a column): the column is the element divided by ``R``, so the tile
    holds the columns of its first to its last element, at most ``R`` values of one but at its
    ends, where it holds the part of the column from its first element or up to its last."""
    blocks = _blocks(shape, axes)
    kinds = tuple(reduced for _, reduced in blocks)
    if kinds in ((), (True,)):
        return np.ones_like(sizes), sizes
    if kinds == (False,):
        return sizes, np.ones_like(sizes)
    if kinds == (True, False):
        k = blocks[1][0]
        return np.minimum(sizes, k), -(-sizes // k)
    if kinds == (False, True):
        r = blocks[1][0]
        first, last = starts // r, (starts + sizes - 1) // r
        head = np.minimum(sizes, (first + 1) * r - starts)  # of the first column (all of it when one)
        tail = np.where(last > first, starts + sizes - last * r, 0)  # of the last, when another
        middle = np.where(last - first >= 2, r, 0)  # of each whole column between them
        return last - first + 1, np.maximum(np.maximum(head, tail), middle)
    return None


@lru_cache(maxsize=1024)
def layout_stats(shape: tuple, axes: tuple, chunk: int) -> LayoutStats:
    """:class:`LayoutStats` of ``shape`` laid out in chunks of ``chunk`` elements: exact up to
    :data:`EXACT_ELEMENTS` elements; beyond, from :data:`SAMPLE` evenly spaced tiles (the busiest
    tile's columns, the pairs per tile) and columns (a column's tiles: its first element's offset
    plus the reduced dimensions' offsets, the same for every column). Cached (a pure function of
    hashable arguments; plan_reduce asks again for each op and type of one layout)."""
    n = math.prod(shape)
    used = math.ceil(n / chunk)
    out_n = n // math.prod(shape[a] for a in axes)
    exact = n <= EXACT_ELEMENTS
    sample = np.arange(used) if exact else np.unique(np.linspace(0, used - 1, SAMPLE).astype(np.int64))
    sizes = np.minimum(chunk, n - sample * chunk)  # elements of each sampled tile
    counted = None if exact else _tile_column_counts(shape, axes, sample * chunk, sizes)
    if counted is None:
        t_of, c_of, cnt = _tile_columns(shape, axes, chunk, sample, n)
        per_tile_cols = np.bincount(t_of, minlength=used)[sample]
        per_tile_vals = np.bincount(t_of, weights=cnt, minlength=used)[sample]
        multi = bool(cnt.max() > 1)
    else:  # the sampled tiles' counts without listing their elements
        per_tile_cols, most = counted
        per_tile_vals = sizes.astype(float)  # every value of the tile
        multi = bool(most.max() > 1)
    busiest = int(np.argmax(per_tile_vals))
    cols = int(per_tile_cols[busiest])
    rows = math.ceil(per_tile_vals[busiest] / cols)
    if exact:
        spread = int(np.bincount(c_of, minlength=out_n).max())
        pairs = int(per_tile_cols.sum())
    else:
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        kept = [i for i in range(len(shape)) if i not in axes]
        picks = np.unique(np.linspace(0, out_n - 1, SAMPLE).astype(np.int64))
        bases = [sum(int(d) * strides[i] for d, i in zip(np.unravel_index(int(c), [shape[i] for i in kept]), kept))
                 for c in picks]
        outer = np.zeros(1, dtype=np.int64)  # the offsets of the reduced axes but the innermost
        for a in axes[:-1]:
            outer = (outer[:, None] + np.arange(shape[a], dtype=np.int64) * strides[a]).ravel()
        spread = max(_chunks_spanned(outer, strides[axes[-1]], shape[axes[-1]], chunk, base) for base in bases)
        pairs = math.ceil(per_tile_cols.mean() * used)
    return LayoutStats(cols, rows, spread, pairs, multi)


def _chunks_spanned(outer: np.ndarray, step: int, count: int, chunk: int, base: int) -> int:
    """How many chunks of ``chunk`` elements hold the column whose first element is at ``base``.

    The column's elements are ``base`` + ``outer`` (the offsets of its reduced axes but the
    innermost, increasing) + ``k * step`` for ``k < count`` (the innermost reduced axis). With
    ``step <= chunk`` a run along that axis steps at most one chunk at a time, so it covers every
    chunk from its first element's to its last's; the runs start in order and end in order, so
    the chunks they cover are the sum of their spans less the overlap of each with the one before.
    """
    if step > chunk:  # a run may skip chunks: count the chunks of every element
        every = (outer[:, None] + np.arange(count, dtype=np.int64) * step).ravel()
        held = (base + every) // chunk  # non-decreasing
        return 1 + int(np.count_nonzero(held[1:] != held[:-1]))
    lo = (base + outer) // chunk
    hi = (base + outer + (count - 1) * step) // chunk
    return int((hi - lo + 1).sum() - np.maximum(0, hi[:-1] - lo[1:] + 1).sum())


def _inner_run(shape: tuple, axes: tuple) -> int:
    """Consecutive elements of one column in memory: the product of the trailing reduced dims."""
    run = 1
    for i in range(len(shape) - 1, -1, -1):
        if i not in axes:
            break
        run *= shape[i]
    return run


@lru_cache(maxsize=4096)
def plan_reduce(shape: tuple, axes: tuple, itemsize: int, op: str, tiles: int, workers: int) -> ReducePlan:
    """popops' plan of ``reduce(in, axes, op)`` for an input of ``shape`` (``itemsize``-byte
    elements, linearly laid out) on ``tiles`` tiles of ``workers`` worker threads each; the
    output has the input's type."""
    axes = tuple(sorted(set(a % len(shape) for a in axes)))
    n = math.prod(shape)
    out_n = n // math.prod(shape[a] for a in axes) if axes else n
    acc_bytes = 4 if op in ACCUMULATING and itemsize < 4 else itemsize
    chunk = linear_chunk(n, itemsize, tiles)
    plan = ReducePlan(input_tiles=math.ceil(n / chunk))
    stats = layout_stats(tuple(shape), axes, chunk)
    run = _inner_run(shape, axes)
    cols_b, rows_b = stats.columns, stats.rows  # the busiest tile's columns and values per column
    if stats.spread == 1:
        work = TileWork(cols_b, rows_b, cols_b * run if run == 1 else run, contiguous=1 < run and rows_b <= run)
        compute, v = tile_cycles(work, itemsize, itemsize, op, workers)
        plan.stages.append(Stage("on tile to output", plan.input_tiles, compute, vertices=v * plan.input_tiles))
        return plan
    part_bytes = itemsize
    partial_tiles = plan.input_tiles
    if stats.multi:  # a tile holds several values of a column: reduce them on the tile first
        work = TileWork(cols_b, rows_b, cols_b if run == 1 else run, contiguous=1 < run and rows_b <= run)
        compute, v = tile_cycles(work, itemsize, acc_bytes, op, workers)
        plan.stages.append(Stage("on tile", plan.input_tiles, compute, vertices=v * plan.input_tiles))
        part_bytes = acc_bytes
    return _across_tiles(plan, stats.spread, stats.pairs, out_n, partial_tiles, part_bytes, itemsize, acc_bytes,
                         op, tiles, workers)


def plan_reduce_partials(sources: int, outputs: int, itemsize: int, op: str, tiles: int, workers: int) -> ReducePlan:
    """popops' plan of ``reduce(in, {0}, op)`` for an input of ``sources`` rows of ``outputs``
    values, one row on each of ``sources`` tiles (results a compute set left on the tiles that made
    them, such as popops::histogram's per-vertex counts): the partials reduced across the tiles,
    the output in the input's type."""
    acc_bytes = 4 if op in ACCUMULATING and itemsize < 4 else itemsize
    plan = ReducePlan(input_tiles=sources)
    return _across_tiles(plan, sources, sources * outputs, outputs, sources, itemsize, itemsize, acc_bytes, op,
                         tiles, workers)


def _across_tiles(plan: ReducePlan, sources: int, total: int, out_n: int, partial_tiles: int, part_bytes: int,
                  itemsize: int, acc_bytes: int, op: str, tiles: int, workers: int) -> ReducePlan:
    """``plan`` with the stages that reduce ``total`` partials (``part_bytes`` each) of ``out_n``
    outputs held on ``partial_tiles`` tiles, each output's on ``sources`` tiles: intermediate stages
    while they are spread too wide, then the exchange to the linearly laid out output."""
    c = constants()
    while True:
        straight = sources < c["sources_factor"] * math.sqrt(tiles) and partial_tiles > tiles * 3 // 4
        if straight or total <= out_n * c["stage_threshold"]:
            break
        # intermediateToIntermediate: pieces of one grain of columns, each piece's partials in
        # groups reduced on successive tiles (calculateSplit)
        grain = _op_vector_width(part_bytes, op)
        piece = min(grain, out_n)
        ideal = max(1, total // tiles)
        split = max(1, sources * piece // ideal)
        if sources * piece // split < c["min_piece_size"]:
            split = max(1, sources * piece // c["min_piece_size"])
        if sources // split < 2:
            split = max(1, sources // 2)
        group = max(2, math.ceil(sources / split))
        groups = math.ceil(sources / group)
        pieces = math.ceil(out_n / piece)
        new_part = 4 if op in ACCUMULATING else part_bytes
        work = TileWork(piece, group, piece)
        compute, v = tile_cycles(work, part_bytes, new_part, op, workers)
        used = min(tiles, pieces * groups)
        per_tile = math.ceil(pieces * groups / tiles)
        plan.stages.append(Stage("intermediate", used, [x * per_tile for x in compute],
                                 exchange_bytes=per_tile * group * piece * part_bytes,
                                 exchange_total=sources * out_n * part_bytes, vertices=v * pieces * groups))
        sources, partial_tiles, total, part_bytes = groups, used, groups * out_n, new_part
    # intermediateToOutput: the output laid out linearly in the accumulation type's grains
    out_chunk = linear_chunk(out_n, acc_bytes, tiles, min_bytes=4 * 8)
    out_tiles = math.ceil(out_n / out_chunk)
    work = TileWork(out_chunk, sources, out_chunk)
    compute, v = tile_cycles(work, part_bytes, itemsize, op, workers)
    plan.stages.append(Stage("to output", out_tiles, compute, exchange_bytes=out_chunk * sources * part_bytes,
                             exchange_total=out_n * sources * part_bytes, vertices=v * out_tiles))
    return plan


__all__ = ["LOG_ADD", "plan_reduce", "plan_reduce_partials", "ReducePlan", "Stage", "TileWork", "tile_cycles", "strided_cycles",
           "default_cycles",
           "continuous_cycles", "linear_chunk", "layout_stats", "LayoutStats", "constants"]
