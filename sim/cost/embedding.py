"""popops' embedding layer: ``multiSlice`` (the lookup) and ``multiUpdateAdd`` (its gradient's
scatter-add) as popops plans and runs them.

Source: graphcore/poplibs at 8dcde1ec, the commit of the benchmark data this is checked against
(``sim.poplibs_benchmarks``, the ``embedding_*`` rows): ``lib/popops/DynamicSlice.cpp``
(``embedding::plan``, ``multiSlicePlanned``, ``generatePlannedMultiUpdateAdd``,
``generateMultiSliceVerticesOnTile``) and ``lib/popops/popopsCycleEstimators.cpp`` (``multiSlicer``,
``MultiUpdateAdd``). PopART lowers a Gather on axis 0 to ``multiSlice`` and its gradient to a zeroed
dense tensor and ``multiUpdateAdd``, both with such a plan (popart ``popx/op/gatherx.cpp``).

The plan splits the table's columns over ``unsliced`` tiles (in grains of 4 bytes, the atomic
store), its rows (the dictionary) over ``sliced`` tiles and the lookups over ``lookup`` groups of
those tiles; popops picks the split that minimises ten times the persistent bytes of the worst
tile plus its peak temporary bytes. Every tile of a lookup group checks every index of the group:

* the lookup: 6 worker vertices per tile share the group's indices, each costing
  16 + indices x (19 + 3 per 64-bit vector of the tile's columns) worker cycles; a split
  dictionary needs a second stage that picks each index's row among the ``sliced`` candidates;
* the update: one worker vertex per tile (updates cannot be split between workers), costing
  3 + 15 (14 fp32) + indices x (12 (11) + 3 per further 32-bit atom of the tile's columns, or
  20 per column when a half tile has an odd column count); with several lookup groups each group
  adds into its own zeroed fp32 copy of the table, then the copies are reduced, added to the
  table (cast to fp32 and back for fp16) with the scale.

Cycles are tile cycles (a worker vertex's cycles x the 6 worker contexts); bytes are per tile.

That is poplibs 8dcde1ec, kept for the embedding_layer benchmark rows it produced (their ops carry
``poplibs="8dcde1ec"``). Every other lookup and scatter (PopART / PopTorch / PopXL, SDK 3.x) follows
poplibs 7eac0f26 (:func:`plan_embedding_sdk3`, :func:`multi_slice_cycles`, :func:`multi_update_op_cycles`
below): the plan with the fewest estimated cycles, 64-bit grains, MultiVertexes whose workers split a
slice's offsets or an update's rows and step over offsets outside their range cheaply, partials in the
data's type (no fp32 casts unless asked for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .vector import INDEX_BYTES, tile_cycles

#: bytes of one atomic store (poplar ``Target::getAtomicStoreGranularity``, whose value is not public;
#: 4, as generatePlannedMultiUpdateAdd implies: a half update needs sub-word writes exactly when its
#: column count is odd): the plan's column grain is a whole number of them
ATOM_BYTES = 4
#: DynamicSlice.cpp ``minIndicesPerTile``: indices are laid out linearly, at least this many per tile
MIN_INDICES_PER_TILE = 32
#: DynamicSlice.cpp ``slicesBroadcastDestRearrangeThreshold``: the update's slices are rearranged to
#: the plan's layout first when the dictionary is split at least this many ways
SLICES_REARRANGE_THRESHOLD = 4
FLOAT_BYTES = 4


#: the poplibs of the embedding_layer benchmark data (its ops carry ``poplibs=LEGACY_POPLIBS``)
LEGACY_POPLIBS = "8dcde1ec"


@dataclass(frozen=True)
class EmbeddingPlan:
    """popops' ``SlicePlan`` of an embedding table of ``entries`` rows of ``row`` elements looked up
    ``lookups`` times: the splits, and what each tile holds."""

    entries: int
    row: int
    lookups: int
    itemsize: int
    unsliced: int  # column split (unslicedDimSplit)
    sliced: int  # dictionary row split (slicedDimSplit)
    lookup: int  # index groups (lookupSplit)
    grain: int  # columns per grain
    serial: int = 1  # lookups processed one part after another (lookupSerialSplit; SDK 3.x plans only)
    precopy: bool = False  # the base copied once ahead of the serial parts (precopyBaseWhenSerialSlice)
    version: str = LEGACY_POPLIBS  # the poplibs whose planner chose this plan and whose vertices run it

    @property
    def tiles(self) -> int:
        return self.unsliced * self.sliced * self.lookup

    @property
    def columns_per_tile(self) -> int:
        """Columns of the table on a tile (``hElemsPerPartition``)."""
        return math.ceil(self.row / self.unsliced)

    @property
    def rows_per_tile(self) -> int:
        return math.ceil(self.entries / self.sliced)

    @property
    def sdk3(self) -> bool:
        """Planned and run as SDK 3.x popops (7eac0f26), not as :data:`LEGACY_POPLIBS`."""
        return self.version != LEGACY_POPLIBS

    @property
    def lookups_per_serial(self) -> int:
        """Indices of one serial part (``subIndicesPerSerialLookupSplit``)."""
        return math.ceil(self.lookups / self.serial)

    @property
    def lookups_per_group(self) -> int:
        return math.ceil(self.lookups_per_serial / self.lookup)

    @property
    def groups_used(self) -> int:
        """Lookup groups that get indices (``nonEmptyLookupSplits``)."""
        return math.ceil(self.lookups_per_serial / self.lookups_per_group)

    def describe(self) -> str:
        serial = f", {self.serial} serial parts" if self.serial > 1 else ""
        return (f"popops embedding plan: {self.unsliced} column x {self.sliced} row x {self.lookup} lookup "
                f"splits on {self.tiles} tiles{serial}, {self.lookups_per_group} indices per group")


def _splits(n: int, most: int) -> list[int]:
    """Splits ``s <= most`` of ``n`` things that popsolver's ``ceildivConstrainDivisor`` allows: the
    smallest split giving each quotient ``ceil(n / s)`` (``ceil(n / s) * s < n + ceil(n / s)``).
    The splits visited do not depend on ``most``, only where the walk stops, so the list is the
    prefix ``<= most`` of ``_splits(n, n)`` (:func:`_all_splits`)."""
    out, s = [], 1
    while s <= min(n, most):
        q = math.ceil(n / s)
        if q * s < n + q:
            out.append(s)
        s = math.ceil(n / (q - 1)) if q > 1 else n + 1  # the next split with a smaller quotient
    return out


@lru_cache(maxsize=256)
def _all_splits(n: int) -> np.ndarray:
    """``_splits(n, n)`` as an increasing array (read only): ``_splits(n, most)`` is its prefix
    ``np.searchsorted(_all_splits(n), most, "right")`` long."""
    out = np.array(_splits(n, n), dtype=np.int64)
    out.setflags(write=False)
    return out


def _ceil_div(a, b):
    """``ceil(a / b)`` of whole numbers (ints or integer arrays) in integer arithmetic: what
    ``math.ceil(a / b)`` gives for values below 2**53 (its float quotient is then never rounded
    onto a whole number the exact quotient is not)."""
    return -(-a // b)


def _minimum(a, b):
    """``min(a, b)`` of ints, or elementwise when either is an array."""
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


@lru_cache(maxsize=None)
def plan_embedding(entries: int, row: int, lookups: int, itemsize: int, tiles: int,
                   used_for_update: bool = True) -> EmbeddingPlan:
    """popops ``embedding::plan`` (8dcde1ec): the split minimising 10 x (the worst tile's table,
    output, indices and exchange-code bytes) + its peak temporary bytes; among equal goals the
    fewest lookup groups, then dictionary splits, then column splits."""
    grain = math.ceil(math.lcm(ATOM_BYTES, itemsize) / itemsize)
    grain_bytes = grain * itemsize
    grains = math.ceil(row / grain)
    indices_per_tile = max(min(lookups, MIN_INDICES_PER_TILE), math.ceil(lookups / tiles))
    best = None
    for e in _splits(grains, min(grains, tiles)):
        gpt = math.ceil(grains / e)
        for d in _splits(entries, min(math.ceil(entries / 2), tiles // e)):
            dpt = math.ceil(entries / d)
            split_dict = d > 1
            for lk in _splits(lookups, min(lookups, tiles // (e * d))):
                lpt = math.ceil(lookups / lk)
                split_lookups = lk > 1
                base_grains = gpt * dpt
                base_store = math.ceil(base_grains / lk) * grain_bytes
                second = math.ceil(lpt / d)
                out_grains = second * gpt
                out_store = out_grains * grain_bytes
                idx_store = indices_per_tile * INDEX_BYTES
                idx_instrs = math.ceil(lpt / indices_per_tile)
                code = 4 * ((lk if split_lookups else 0) + 2 * idx_instrs + (d if split_dict else 0))
                update_temp = 0
                if used_for_update:
                    cast = (itemsize != FLOAT_BYTES) * out_grains * FLOAT_BYTES  # sic: grains x 4 bytes
                    updates = split_dict * lpt * gpt * grain * FLOAT_BYTES
                    partials = split_lookups * dpt * gpt * grain * FLOAT_BYTES
                    update_temp = max(cast, cast + updates, updates + partials + lpt * INDEX_BYTES,
                                      split_lookups * partials * 2)
                    code += 4 * idx_instrs + (4 * lk if split_lookups else 0)
                first_out = split_dict * lpt * gpt * grain_bytes
                slice_temp = max(split_lookups * base_grains * grain_bytes + first_out + lpt * INDEX_BYTES,
                                 first_out + split_dict * d * second * gpt * grain_bytes + second * INDEX_BYTES)
                goal = 10 * (base_store + out_store + idx_store + code) + max(slice_temp, update_temp)
                key = (goal, lk, d, e)
                if best is None or key < best:
                    best = key
    _, lk, d, e = best
    return EmbeddingPlan(entries, row, lookups, itemsize, e, d, lk, grain)


def slice_worker_cycles(indices: int, columns: int, itemsize: int, data_path_bits: int = 64) -> int:
    """popops ``MultiSlice`` vertex (``multiSlicer``): call overhead, then per index its load,
    compare, branch and multiply and a load and store per vector of the columns (the IPU's data path,
    ``Target::getDataPathWidth``); every index is counted as in range (the estimator's worst case)."""
    vectors = math.ceil(columns / (data_path_bits // (8 * itemsize)))
    return 16 + indices * (19 + 3 * vectors)


def update_worker_cycles(indices: int, columns: int, itemsize: int) -> int:
    """popops ``MultiUpdateAdd`` vertex: size load and exit check, the loop set-up, then per index
    the outer loop and 3 cycles per further atom of the columns (a half vertex with an odd column
    count writes sub-words: 20 per column instead)."""
    if indices == 0:
        return 3
    half = itemsize == 2
    per_index = 12 if half else 11
    atoms = math.lcm(ATOM_BYTES, itemsize) // itemsize
    if half and columns % atoms:
        per_index += columns * 20
    else:
        per_index += (math.ceil(columns / atoms) - 1) * 3
    return 3 + (15 if half else 14) + indices * per_index


def iota_worker_cycles(elements: int, itemsize: int, data_path_bits: int = 64) -> int:
    """popops ``Iota`` vertex of one contiguous region: 10 + 4 + 3 per vector written."""
    return 10 + 4 + 3 * math.ceil(elements / (data_path_bits // (8 * itemsize)))


def offsets_per_worker(indices: int, itemsize: int, workers: int) -> int:
    """Indices per MultiSlice worker vertex (``generateMultiSliceVerticesOnTile``): the indices
    shared over the workers, rounded up to whole 32-bit words."""
    per = math.ceil(indices / workers) if indices else 0
    atoms = ATOM_BYTES // itemsize
    if atoms > 1 and per % atoms:
        per += atoms - per % atoms
    return per


# ---- poplibs 7eac0f26 (github-migration/mk2-main, the SDK 3.x popops) --------------------------------
# Since 8dcde1ec popops plans multiSlice / multiUpdate* to the fewest estimated cycles (3993153b, not the
# fewest bytes), with 64-bit column grains (7f2a0864), a serial split of the indices, and MultiSlice /
# MultiUpdateOp as MultiVertexes whose six workers split the offsets (a slice) or the table's rows (an
# update): a worker steps over the offsets it is not given, at a few cycles each, and copies / adds only
# those in its range (e62a566a, 8d02719d; lib/popops/codelets/MultiSlice.cpp, MultiUpdateOp.cpp,
# MultiSliceUpdateCommon.cpp multiGenericWorkerDivision / multiUpdateOpWorkerDivision).

#: DynamicSlice.cpp SliceOptions: the default availableMemoryProportion, the planner's bound on the
#: worst tile's temporary bytes as a share of the tile's memory (PopART passes none unless the op has one)
SLICE_AVAILABLE_MEMORY_PROPORTION = 0.6
#: ExchangeEstimator.cpp exchangeBytesScalingFactor: the planner's exchange cycles are
#: ceil(bytes x 16 / round(Target::getExchangeBytesPerCycle x 16))
_EXCHANGE_SCALE = 16


def multi_slice_cycles(elems: int, offsets: int, in_range: int, itemsize: int, workers: int,
                       data_path_bits: int = 64, split_single_region: bool = False,
                       is_update: bool = False) -> int:
    """popops ``getMultiSliceCycleEstimate`` (7eac0f26 lib/popops/PerformanceEstimation.cpp:49), tile
    cycles of a MultiSlice (MultiUpdate when ``is_update``) vertex whose worker gets ``offsets`` offsets of
    which ``in_range`` index rows on the tile: 30 (29) prologue cycles, 19 + 2 per vector of ``elems``
    (3 per 4 bytes for bytes) an offset in range, 8 one out of it, all x the worker contexts;
    ``split_single_region`` (one offset) spreads the row's vectors over the workers. Unsorted indices.
    ``elems``, ``offsets`` and ``in_range`` may be integer arrays (one estimate per entry)."""
    if itemsize == 1:
        width, per_vector = 4, 3
    elif itemsize == 2:
        width, per_vector = 2, 2
    else:
        width, per_vector = data_path_bits // (8 * itemsize), 2
    vectors = _ceil_div(elems, width)
    if split_single_region:
        vectors = _ceil_div(vectors, workers)
    core = in_range * (19 + vectors * per_vector) + (offsets - in_range) * 8
    return ((29 if is_update else 30) + core) * workers


def multi_update_op_cycles(elems: int, offsets: int, in_range: int, itemsize: int, workers: int,
                           scaled: bool = True, sub_word_writes: bool = False, operation: str = "add",
                           scale_wider: bool = False) -> int:
    """popops ``getMultiUpdateOpCycleEstimate`` (7eac0f26 PerformanceEstimation.cpp:124), tile cycles of
    a (Scaled)MultiUpdateOp vertex whose worker owns a share of the tile's rows and steps over all
    ``offsets``, ``in_range`` of them in its rows: 3 + 29 (30 for 2-byte data) set-up, + 6 (4 for 2-byte)
    to load a scale, then 11 (12; 13 scaled 2-byte) an offset in range plus 3 per further 32-bit atom of
    ``elems`` (20 per element with sub-word writes; the scaled add of a 64-bit row has its own path:
    8 or 16 fp32, 9 fp16), 5 an offset out of range, all x the worker contexts. Unsorted indices.
    ``elems``, ``offsets`` and ``in_range`` may be integer arrays (one estimate per entry); with no
    offsets (``in_range`` then 0 too) the set-up alone remains."""
    four = itemsize == 4
    # the scaled add of a 64-bit row (bools of ints, arrays of arrays: ``&`` and ``|`` take either)
    row64 = ((elems == 2) | (elems == 4)) if four else (elems == 4) if itemsize == 2 else False
    special = (scaled and operation == "add") & row64
    cycles = 3 + (29 if four else 30) - special
    if scaled:
        cycles += 2 + 2 + 2 * four
    per = (11 if four else 12) + (not four and scaled)
    atom = math.lcm(ATOM_BYTES, itemsize) // itemsize
    if sub_word_writes:
        per += elems * 20
    else:
        general = per + (_ceil_div(elems, atom) - 1) * (3 + scale_wider)
        fast = (16 - 8 * (elems == 2)) if four else (12 if scale_wider else 9)  # 8 or 16 fp32 (2 or 4 elements)
        per = np.where(special, fast, general) if isinstance(special, np.ndarray) else fast if special else general
    return (cycles + per * in_range + 5 * (offsets - in_range)) * workers


def max_elems_per_worker(elems: int, workers: int, grain: int = 1) -> int:
    """DynamicSlice.cpp ``getMultiSliceUpdateOpMaxElemsPerWorker``: a MultiVertex's share per worker, in
    whole grains (a slice's offsets, an update's rows; 32-bit words of narrower data when run);
    ``elems`` may be an integer array."""
    return _ceil_div(_ceil_div(elems, grain), workers) * grain


def in_range_share(offsets: int, rows: int, entries: int) -> int:
    """Of ``offsets`` indices drawn uniformly from ``entries`` rows, those in a range of ``rows``
    (DynamicSlice.cpp constructModel, ``IndicesDistribution::UNIFORM``: the proportion, rounded up);
    ``offsets`` and ``rows`` may be integer arrays."""
    return _minimum(offsets, _ceil_div(offsets * rows, entries)) if entries else offsets


def _planner_exchange(nbytes, bytes_per_cycle: float):
    """popops ``ExchangeEstimator`` (7eac0f26 ExchangeEstimator.cpp getCycles, no bus sharing) of
    ``nbytes``, whole bytes (an int or an integer array)."""
    return _ceil_div(nbytes * _EXCHANGE_SCALE, max(1, round(bytes_per_cycle * _EXCHANGE_SCALE)))


@lru_cache(maxsize=None)
def plan_embedding_sdk3(entries: int, row: int, lookups: int, itemsize: int, tiles: int, ipu,
                        used_for_slice: bool = True, used_for_update: bool = False,
                        operation: str | None = None,
                        memory_proportion: float = SLICE_AVAILABLE_MEMORY_PROPORTION) -> EmbeddingPlan:
    """popops ``embedding::plan`` (7eac0f26 lib/popops/DynamicSlice.cpp constructModel / choosePlan): the
    split with the fewest estimated cycles of the worst tile whose peak temporary bytes fit in
    ``memory_proportion`` of the tile (the availableMemoryProportion option; else the fewest cycles),
    over the column split (64-bit grains), the dictionary split (at most half the rows), the parallel
    and the serial lookup splits (neither for an update without an ``operation``) and, for a slice,
    whether the base is copied once ahead of the serial parts.

    The estimates are poplibs': the slice's two stages (:func:`multi_slice_cycles` with the uniform
    in-range share; the second stage's vertex sized, as poplibs sizes it, by the grains rather than the
    elements of a row) and exchanges; the update's rearrangement of a base not spread perfectly (x 2),
    the zeroed partials, the updates' broadcast, the vertex (:func:`multi_update_op_cycles`, scaled), the
    partials' reduction and the final scaled add; the planner's bias for spreading the base (its bytes
    beyond a perfect spread over every tile, as exchange). poplibs' modelContiguousFill / Cast /
    ScaledAdd and reduction model are priced here with the simulator's own copy / cast / accumulate /
    add codelets. Among equal cycles the fewest serial, then parallel, dictionary and column splits.

    Each serial split's candidates are priced at once (:func:`_sdk3_candidates`, arrays over the
    grid), in the order popops' search runs the serial splits."""
    limit = memory_proportion * ipu.sram_bytes_per_tile
    max_lookup_splits = 1 if used_for_update and operation is None else lookups
    best = {True: None, False: None}  # within the temporary-memory bound, and regardless of it
    for ls in _splits(lookups, max_lookup_splits):
        if best[True] is not None:
            break  # more serial parts only repeat the fixed cycles: the first that fits is the fewest
        lp, d, e, pc, c, t, valid = _sdk3_candidates(entries, row, lookups, itemsize, tiles, ipu, used_for_slice,
                                                     used_for_update, operation, ls)
        for fits, keep in ((True, valid & (t <= limit)), (False, valid)):
            key = _least_key(c, ls, lp, d, e, pc, keep)
            if key is not None and (best[fits] is None or key < best[fits]):
                best[fits] = key
    _, ls, lp, d, e, pc = best[True] or best[False]
    return EmbeddingPlan(entries, row, lookups, itemsize, e, d, lp, _sdk3_grain(row, itemsize, ipu), ls, bool(pc),
                         "7eac0f26")


def _sdk3_grain(row: int, itemsize: int, ipu) -> int:
    """Columns of one grain of an SDK 3.x plan: a 64-bit vector's worth (a whole row if shorter)."""
    return min(row, math.ceil(math.lcm(ipu.data_path_bits // 8, itemsize) / itemsize))


def _least_key(c: np.ndarray, ls: int, lp, d, e, pc, keep: np.ndarray) -> tuple | None:
    """The least ``(cycles, ls, lp, d, e, pc)`` of the candidates ``keep`` marks (Python ints, as
    popops' search compares them), None if it marks none."""
    at = np.flatnonzero(keep)
    if not at.size:
        return None
    at = at[c[at] == c[at].min()]
    i = int(at[np.lexsort((pc[at], e[at], d[at], lp[at]))[0]])  # ls is the same for all
    return int(c[i]), ls, int(lp[i]), int(d[i]), int(e[i]), int(pc[i])


def _repeat_rows(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent, child) of each row when parent ``i`` has ``counts[i]`` children numbered from 0."""
    parent = np.repeat(np.arange(len(counts)), counts)
    child = np.arange(len(parent)) - np.repeat(np.cumsum(counts) - counts, counts)
    return parent, child


def _sdk3_grid(entries: int, grains: int, lookups: int, tiles: int, ls: int, max_lookup_splits: int,
               precopy: bool):
    """The candidate splits of :func:`plan_embedding_sdk3` for ``ls`` serial parts, as arrays
    ``(lp, d, e, pc)``: the column splits ``e``, for each the dictionary splits ``d`` (at most half
    the rows and ``tiles // e``), for each the lookup splits ``lp`` (at most ``tiles // (e d)``) that
    the ceildivConstrainDivisor on the product of the lookup splits allows, and ``pc`` 0 and (with
    ``precopy``) 1."""
    e = _all_splits(grains)
    e = e[:np.searchsorted(e, min(grains, tiles), "right")]
    by_dict = _all_splits(entries)
    parent, child = _repeat_rows(np.searchsorted(by_dict, np.minimum(_ceil_div(entries, 2), tiles // e), "right"))
    e, d = e[parent], by_dict[child]
    by_lookup = _all_splits(_ceil_div(lookups, ls))
    parent, child = _repeat_rows(np.searchsorted(by_lookup, np.minimum(max_lookup_splits, tiles // (e * d)),
                                                 "right"))
    e, d, lp = e[parent], d[parent], by_lookup[child]
    per = _ceil_div(lookups, lp * ls)
    allowed = per * lp * ls < lookups + per
    e, d, lp = e[allowed], d[allowed], lp[allowed]
    pc = np.zeros_like(lp)
    if precopy:  # each split with the base copied once ahead of the serial parts, and without
        lp, d, e, pc = (np.concatenate([a, a]) for a in (lp, d, e, pc))
        pc[len(pc) // 2:] = 1
    return lp, d, e, pc


def _sdk3_candidates(entries: int, row: int, lookups: int, itemsize: int, tiles: int, ipu, used_for_slice: bool,
                     used_for_update: bool, operation: str | None, ls: int):
    """Every candidate of :func:`plan_embedding_sdk3` with ``ls`` serial parts, priced: arrays
    ``(lp, d, e, pc)`` (:func:`_sdk3_grid`), the estimated cycles, the peak temporary bytes of the
    worst tile and whether popops can run it (a slice whose vertices would not cover the output's
    writes is not a candidate). Cycles are tile cycles, bytes are bytes."""
    W = ipu.worker_threads
    xb = ipu.exchange_bytes_per_cycle_per_tile
    grain = _sdk3_grain(row, itemsize, ipu)
    bpg = grain * itemsize
    sub_word = bpg % ATOM_BYTES != 0
    grains = math.ceil(row / grain)
    partial = itemsize  # partialTypeToUse: the data's type unless a partialType option is given
    single = lookups == 1
    max_lookup_splits = 1 if used_for_update and operation is None else lookups
    perfect = math.ceil(entries * grains / tiles) * bpg
    write_cycles = math.ceil(lookups * row * itemsize / (ipu.data_path_bits // 8))

    def ex(nbytes):
        return _planner_exchange(nbytes, xb)

    lp, d, e, pc = _sdk3_grid(entries, grains, lookups, tiles, ls, max_lookup_splits, used_for_slice and ls > 1)
    ugpt = _ceil_div(grains, e)
    elems = ugpt * grain
    dpt = _ceil_div(entries, d)
    split_dict = d > 1
    base_bytes = ugpt * dpt * bpg
    lpt = _ceil_div(lookups, lp * ls)
    split_lk = lp > 1
    second = _ceil_div(lpt, d)
    c = t = np.zeros_like(lp)
    valid = np.ones(len(lp), dtype=bool)
    if used_for_slice:
        base_temp = np.maximum(np.maximum(split_lk * base_bytes, base_bytes - perfect), 0)
        ex0 = ex(base_temp)
        per = _ceil_div(lpt, W)
        comp0 = multi_slice_cycles(elems, per, in_range_share(per, dpt, entries), itemsize, W, ipu.data_path_bits,
                                   single and not sub_word)
        valid = write_cycles <= ls * lp * e * comp0
        per1 = _ceil_div(second, W)
        ex1 = split_dict * ex(d * second * ugpt * bpg)
        whole_words = single & ((ugpt * itemsize) % ATOM_BYTES == 0)  # splitSingleRegion, candidate by candidate
        split_region, whole_region = (multi_slice_cycles(ugpt, per1, in_range_share(per1, dpt, entries), itemsize,
                                                         W, ipu.data_path_bits, split) for split in (True, False))
        comp1 = split_dict * np.where(whole_words, split_region, whole_region)
        c = ls * ((1 - pc) * ex0 + comp0 + ex1 + comp1) + pc * ex0
        first_out = split_dict * lpt * ugpt * bpg
        second_in = split_dict * d * second * ugpt * bpg
        t = np.maximum(base_temp + first_out + lpt * INDEX_BYTES,
                       first_out + second_in + second * INDEX_BYTES + pc * base_temp)
    if used_for_update:
        pe = dpt * ugpt * grain
        storage = _ceil_div(dpt * ugpt, lp) * grain
        spread = np.maximum(base_bytes - perfect, 0)
        u = 2 * ex(spread)
        u = u + split_lk * tile_cycles(pe, FLOAT_BYTES, "copy", ipu)
        u = u + ex(split_dict * lpt * ugpt * grain * partial)
        rows_w = max_elems_per_worker(dpt, W)
        if operation is None:
            u = u + multi_slice_cycles(elems, lpt, in_range_share(lpt, rows_w, entries), partial, W,
                                       ipu.data_path_bits, single and not sub_word, True)
        else:
            u = u + multi_update_op_cycles(elems, lpt, in_range_share(lpt, rows_w, entries), partial, W, True,
                                           sub_word, operation)
            out_bal = _ceil_div(pe, lp)
            apply = (tile_cycles(storage, FLOAT_BYTES, "accumulate", ipu) if operation == "add"
                     else _ceil_div(storage, ipu.data_path_bits // (8 * itemsize)))
            u = u + split_lk * (ex(lp * out_bal * FLOAT_BYTES) + tile_cycles(lp * out_bal, FLOAT_BYTES, "add", ipu)
                                + apply)
        c = c + ls * u
        updates = split_dict * lpt * ugpt * grain * partial
        partials = split_lk * pe * partial
        t = np.maximum(t, spread + np.maximum(np.maximum(updates, updates + partials + lpt * INDEX_BYTES),
                                              split_lk * partials * 2))
    return lp, d, e, pc, c, t, valid
