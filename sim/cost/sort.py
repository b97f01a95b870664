"""popops' bitonic top-k and sort, as Poplar runs them since SDK 2.4.

Every sort PopTorch and PopART run (``torch.sort``/``argsort``/``topk``/``median``: PopART's
TopK and Sort ops, ``popops::topKWithPermutation``) is poplibs' bitonic network
(``lib/popops/BitonicTopK.cpp`` ``topKImpl``; the per-row heap sort it replaced is dead code
since poplibs e8178585, SDK 2.4). The ``b`` rows of ``n`` keys are sorted together: the keys are
viewed as ``[n, b]`` (rows interleaved), so a row distance ``d`` is a flat distance ``d * b``.

The network runs ``ceil(log2 n)`` merge steps; merge step ``m`` compares at distance
``min(2^m, k')`` and then re-sorts at half the distance down to 1 (``k' = 2^ceil(log2 k)``).
Once the sorted runs reach ``k'`` every merge keeps the better half of each ``2k'`` block, so a
top-k with a small ``k`` shrinks the data it works on. Each step is one Copy (the keys and their
indices rearranged so that both elements of every comparison lie on one tile) and one compute
set: ``ceil(C / tiles)`` comparisons on each of ``ceil(C / that)`` tiles, one
``CompareAndSwapAtDistanceKeyVal`` MultiVertex per tile (``BitonicTopK.cpp`` ``allocate`` and
``compareAndSwapAtDistance``). Half keys are cast to float before and back after; the indices
are filled in first (``TopK.cpp`` ``topKWithPermutation``: an iota).

Costs: the vertex's estimator (``popopsCycleEstimators.cpp``
``CompareAndSwapKeyValueCycleEstimate``, worst case: every pair swapped), constants in
``configs/_vector-ops.toml`` ``[compare_and_swap]``. Modelled, not read off the source: each
worker's comparisons are one worklist entry (two when a tile holds more than one comparison: a
run starting inside a block), one change of order per worker, and the data a step moves off its
tile (all of it on a merge step whose distance reaches past the tile's comparisons, half of it
on a re-sort step, none while the distance stays within a tile).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache

from ..errors import ConfigError
from ..hardware.system import IPU
from .exchange import exchange_cycles
from .vector import INDEX_BYTES, VECTOR_OPS_FILE, codelet

_VERTEX_KEYS = ("overhead", "per_worklist_entry", "first_inner", "inner", "first_outer", "outer")
_KEY_BYTES = 4  # half keys are sorted as float (BitonicTopK.cpp topKImpl casts them); the indices sorted
# with them are UNSIGNED_INT, INDEX_BYTES each (TopK.cpp createTopKInput)


@dataclass(frozen=True)
class SortCost:
    """The busiest tile of each part of a sort, in tile cycles, and what the parts are."""
    compute_cycles: int  # every compute set's busiest tile, summed
    launch_cycles: int  # the part of compute_cycles that does not shrink with the work
    exchange_cycles: int  # every step's copy, its busiest tile, set-up included
    compute_sets: int
    exchange_phases: int
    comparisons: int
    exchange_bytes: int  # bytes received, all tiles and steps
    tiles_used: int
    temp_bytes_per_tile: int
    steps: int  # compare-and-swap steps


@lru_cache(maxsize=1)
def _constants() -> dict:
    """``[compare_and_swap]`` of ``configs/_vector-ops.toml``: the supervisor's cycles and each
    key type's worker constants (assembly float key-value vertex, C++ integer one)."""
    with open(VECTOR_OPS_FILE, "rb") as f:
        table = tomllib.load(f).get("compare_and_swap", {})
    for key_type in ("float", "int"):
        entry = table.get(key_type)
        if not isinstance(entry, dict) or any(not isinstance(entry.get(k), int) or entry[k] < 0
                                               for k in _VERTEX_KEYS):
            raise ConfigError(f"{VECTOR_OPS_FILE}: [compare_and_swap] {key_type} must give whole numbers >= 0 "
                              f"for {', '.join(_VERTEX_KEYS)}; restore it from the project's copy")
    if not isinstance(table.get("supervisor"), int):
        raise ConfigError(f"{VECTOR_OPS_FILE}: [compare_and_swap] supervisor must be a whole number of cycles")
    return table


def network(n: int, k: int) -> list[tuple[int, int, bool]]:
    """The compare-and-swap steps of a top-``k`` of ``n`` keys a row: ``(distance, keys still
    in play, is a merge step)`` each, in order (``BitonicTopK.cpp`` ``topKImpl``'s loops). Of the
    end of a partial last run trimmed during a re-sort, the part past the run is taken."""
    log_n, log_k = math.ceil(math.log2(n)) if n > 1 else 0, math.ceil(math.log2(k)) if k > 1 else 0
    kp = 1 << log_k
    steps = []
    for m in range(log_n):
        lmd = min(m, log_k)
        md = 1 << lmd
        active = n
        if m + 1 < log_k and (n % (2 * md) == 0 or n % (2 * md) == n % (4 * md)):
            active -= n % (4 * md)
        steps.append((md, active, True))
        if lmd >= log_k and n > kp:  # keep the better k' of every 2k' block
            n = (n // (2 * kp)) * kp + min(n % (2 * kp), kp)
            active = n
        for s in range(lmd):
            d = 1 << (lmd - s - 1)
            steps.append((d, active, False))
            last = (n - 1) % kp + 1
            trimmed = (last - 1) % d + 1
            if lmd + 1 >= log_k and last - trimmed >= k:
                n -= trimmed
                active = n
    return steps


def comparisons_at(active: int, distance: int) -> int:
    """Comparisons of ``active`` keys at ``distance`` (``BitonicTopK.cpp``
    ``numComparisonsAtDistance``)."""
    r = active % (2 * distance)
    return (active // (2 * distance)) * distance + r - min(r, distance)


def _vertex_cycles(per_tile: int, distance: int, v: dict, ipu: IPU) -> tuple[int, int]:
    """(tile cycles, their fixed part) of one CompareAndSwap vertex doing ``per_tile``
    comparisons at flat ``distance``: its busiest worker's entries, inner and outer loops."""
    w = ipu.worker_threads
    per_worker = -(-per_tile // w)
    entries = 1 if per_tile == 1 else min(2, per_worker)
    outer = max(0, -(-per_worker // distance) - entries)
    worker = (v["overhead"] + entries * (v["per_worklist_entry"] + v["first_inner"] + v["first_outer"])
              + (per_worker - entries) * v["inner"] + outer * v["outer"] + 2)
    supervisor = _constants()["supervisor"]
    return supervisor + w * worker, supervisor + w * v["overhead"]


def _cast_cycles(elements: int, itemsize: int) -> int:
    """One cast compute set of ``elements`` on a tile (popops cast, ``configs/_vector-ops.toml``)."""
    c = codelet("cast")
    return math.ceil(c.fixed + elements * c.per_element(itemsize))


def bitonic_sort_cost(rows: int, n: int, k: int, dtype_bytes: int, integer_keys: bool, ipu: IPU,
                      tiles: int) -> SortCost:
    """The top ``k`` of each of ``rows`` rows of ``n`` keys, with their indices (a full sort:
    ``k == n``), on ``tiles`` tiles; ``dtype_bytes`` is the keys' size (2: cast to float and back)."""
    v = _constants()["int" if integer_keys else "float"]
    compute = launch = exch = phases = steps = compared = moved_bytes = temp = 0
    used_most = 1
    if n > 1:
        for distance, active, merge in network(n, k):
            c = comparisons_at(active * rows, distance * rows)
            if c == 0:
                continue
            per_tile = -(-c // tiles)
            used = -(-c // per_tile)
            cycles, fixed = _vertex_cycles(per_tile, distance * rows, v, ipu)
            compute, launch, steps, compared = compute + cycles, launch + fixed, steps + 1, compared + c
            # both elements of each comparison, keys and indices, 4 bytes each
            held = 2 * per_tile * (_KEY_BYTES + INDEX_BYTES)
            moving = 0 if distance * rows < per_tile else held if merge else held // 2
            if moving:
                exch += exchange_cycles(moving, ipu)
                phases += 1
                moved_bytes += moving * used
            temp = max(temp, 2 * held)  # the step's source and destination buffers
            used_most = max(used_most, used)
    per_tile_in = -(-rows * n // used_most)
    # the indices' iota: one worker vertex a worker, 10 + 4 + 3 per pair of elements (Iota's estimator)
    fill = ipu.worker_threads * (14 + 3 * -(-per_tile_in // (2 * ipu.worker_threads)))
    compute, launch, sets = compute + fill, launch + ipu.worker_threads * 10, steps + 1
    if dtype_bytes == 2 and not integer_keys:  # half keys cast to float before, back after
        cast_in, cast_out = _cast_cycles(per_tile_in, 2), _cast_cycles(-(-rows * k // used_most), 2)
        compute, launch, sets = compute + cast_in + cast_out, launch + 2 * codelet("cast").fixed, sets + 2
    return SortCost(compute, launch, exch, sets, phases, compared, moved_bytes, used_most, temp, steps)
