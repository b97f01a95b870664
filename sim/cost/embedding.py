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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .vector import INDEX_BYTES

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
    def lookups_per_group(self) -> int:
        return math.ceil(self.lookups / self.lookup)

    @property
    def groups_used(self) -> int:
        """Lookup groups that get indices (``nonEmptyLookupSplits``)."""
        return math.ceil(self.lookups / self.lookups_per_group)

    def describe(self) -> str:
        return (f"popops embedding plan: {self.unsliced} column x {self.sliced} row x {self.lookup} lookup "
                f"splits on {self.tiles} tiles, {self.lookups_per_group} indices per group")


def _splits(n: int, most: int) -> list[int]:
    """Splits ``s <= most`` of ``n`` things that popsolver's ``ceildivConstrainDivisor`` allows: the
    smallest split giving each quotient ``ceil(n / s)`` (``ceil(n / s) * s < n + ceil(n / s)``)."""
    out, s = [], 1
    while s <= min(n, most):
        q = math.ceil(n / s)
        if q * s < n + q:
            out.append(s)
        s = math.ceil(n / (q - 1)) if q > 1 else n + 1  # the next split with a smaller quotient
    return out


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
