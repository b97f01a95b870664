"""poplin's reduction of a matmul's or convolution's partial sums, as poplin builds and times it.

When poplin splits a matmul's inner dimension (a convolution's input channels and kernel) over
``depth`` tiles, each of them holds a partial sum of the same output block, and poplin reduces
them (``lib/poplin/ConvReduce.cpp :: multiStageGroupedReduce``, poplibs 8dcde1ec):

* the stages: ``getMultiStageReducePlan`` (``ConvReducePlan.cpp``) gives 1, 2 or 3 stages by
  depth (< 16, < 125, more), the intermediate depths minimising the messages a tile receives;
* each stage (``partialGroupedReduce``) cuts the rows (partial sums) into ``D`` sections, its
  output depth, section ``i`` reduced on the ``i``-th ``1/D`` of the group's tiles, each of
  them taking an even share of the output block in grains of the partials' channel group
  (``splitRegions``); it receives the section's rows but the one it holds;
* each of those tiles runs one ``poplin::ReduceAdd`` supervisor vertex, the single-input form
  (its own row apart, the others in one edge) when the outputs fill whole accumulator vectors
  and the exchanged partials occupy less than 1/16 of the tile's memory
  (``checkPartialsSizeForSingleInputReduce``), timed by ``getReduceCycleEstimate``
  (``lib/poplin/PerformanceEstimation.hpp``, called by ``poplinCycleEstimators.cpp``
  ``ReduceAdd``). Intermediate stages write partials, the last the result type.

The IPU's worker threads, data path width and memory element size come from its config
(``worker_threads``, ``data_path_bits``, ``memory_element_bytes``). Cycles are tile cycles (the
vertex estimate is already all the workers' worth), bytes are bytes.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np



def _stages(depth: int, multi_stage: bool = True) -> int:
    """getNumReduceStages: with enableMultiStageReduce (poplin's default) 1, 2 or 3 by depth; without, 1."""
    if not multi_stage:
        return 1
    return 3 if depth >= 125 else 2 if depth >= 16 else 1


def _plan_and_cost(depth: int, stages: int) -> tuple[tuple[int, ...], float]:
    """getMultiStageReducePlanAndCost: (intermediate output depths, messages per tile)."""
    if stages == 1:
        return (), float(depth)
    down = int(depth ** ((stages - 1.0) / stages))
    best = None
    for nxt in (down, down + 1):
        plan, cost = _plan_and_cost(nxt, stages - 1)
        cost += depth / nxt
        if best is None or cost < best[1]:
            best = ((nxt,) + plan, cost)
    return best


@lru_cache(maxsize=1024)
def multi_stage_plan(depth: int, multi_stage: bool = True) -> tuple[int, ...]:
    """The output depth of each intermediate stage poplin reduces ``depth`` partials in (empty:
    one stage straight to the result, as always without ``multi_stage``)."""
    return _plan_and_cost(depth, _stages(depth, multi_stage))[0] if depth > 1 else ()


def reduce_add_cycles(outputs, partials, out_float: bool, partials_float: bool, single_input,
                      workers: int, data_path_bits: int, fast=False):
    """Tile cycles of one ``poplin::ReduceAdd`` vertex: ``outputs`` elements from ``partials``
    rows (its ``numPartials`` field: the exchanged rows only in the single-input form), as
    ``getReduceCycleEstimate`` (arrays allowed), on a tile of ``workers`` worker threads loading
    ``data_path_bits`` at a time. ``fast`` (``enableFastReduce``, single-input form only): the
    partials sit in interleaved memory and load at twice the width (``constrainPartials``)."""
    outputs = np.asarray(outputs, dtype=np.int64)
    partials = np.asarray(partials, dtype=np.int64)
    acc = 4 if partials_float else 8  # accumulator vector width (a power of 2)
    in_path = data_path_bits // (32 if partials_float else 16)  # partials per load
    # single input: a 1- or 2-cycle inner loop per accumulator vector, split over the workers
    s_loop = acc // np.minimum(acc, in_path * (1 + np.asarray(fast, dtype=np.int64)))
    s_over = (8 if out_float else 7) if partials_float else (10 if out_float else 9)
    s_per_worker = -(-(outputs // acc) // workers)
    single = (20 + (s_loop * partials + s_over) * s_per_worker) * workers + 33
    # general form: one more cycle a loop to fetch the next row's pointer, a shorter loop for the rest
    g_loop = acc // min(acc, in_path) + 1
    loops = outputs // acc + _SET_BITS[outputs & (acc - 1)]  # a loop per whole vector, one per set bit of the rest
    per_worker = loops // workers
    rest = loops % workers > 0
    ragged = (outputs & (acc - 1)) > 0
    fixed = 32 + np.where(rest & ragged, 2 * partials + (13 if partials_float else 11), 0)
    per_worker = per_worker + (rest & ~ragged)
    over = (7 if partials_float else 9) if out_float else (6 if partials_float else 8)
    general = (fixed + (g_loop * partials + over) * per_worker) * workers
    return np.where(single_input, single, general)


#: the number of set bits of each value below 8 (the rest of an accumulator vector: 4 or 8 wide)
_SET_BITS = np.array([bin(v).count("1") for v in range(8)], dtype=np.int64)


@lru_cache(maxsize=64)
def _vertex_fixed_cycles(out_float: bool, partials_float: bool, single_input: bool, workers: int,
                         data_path_bits: int, fast) -> int:
    """:func:`reduce_add_cycles` of a vertex with no outputs (its launch and prologue), cached by those
    arguments, all it reads."""
    return int(reduce_add_cycles(0, 0, out_float, partials_float, single_input, workers, data_path_bits, fast))


def single_input_fits(exchanged_bytes, tile_bytes: int, element_bytes: int):
    """checkPartialsSizeForSingleInputReduce: the exchanged partials, rounded up to whole memory
    elements, below 1/16 of the tile's memory."""
    elements = -(-np.asarray(exchanged_bytes, dtype=np.int64) // element_bytes)
    return elements * element_bytes < tile_bytes // 16


def distinct_values(values) -> list[int]:
    """The distinct values of an array of small non-negative integers (split counts, depths), in
    order: a table lookup, not a sort, over arrays of many candidates."""
    values = np.asarray(values, dtype=np.int64).ravel()
    present = np.zeros(int(values.max(initial=0)) + 1, dtype=bool)
    present[values] = True
    return np.flatnonzero(present).tolist()


@lru_cache(maxsize=256)
def _plan_tables(depths: tuple[int, ...], multi_stage: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each of the ``depths`` (increasing) reduction plans (:func:`multi_stage_plan`), as tables indexed by
    depth up to the largest, read only: the rows a stage's section takes and the tiles it is reduced on
    (``[stage, depth]``, 0 and 1 where the depth has no such stage), and the index of its last stage
    (``[depth]``); as many stages as the deepest plan. Cached by the depths and the option, all it reads."""
    plans = {d: multi_stage_plan(d, multi_stage) + (1,) for d in depths if d > 1}
    n_stages = max((len(p) for p in plans.values()), default=0)
    size = (depths[-1] if depths else 0) + 1
    sec_rows = np.zeros((n_stages, size), dtype=np.int64)
    sec_tiles = np.ones((n_stages, size), dtype=np.int64)
    last_stage = np.zeros(size, dtype=np.int64)
    for d, sections in plans.items():
        rows = tiles = d  # one partial sum per tile of the group
        for i, sec in enumerate(sections):
            sec_rows[i, d] = -(-rows // sec)
            sec_tiles[i, d] = max(1, tiles // sec)
            rows = sec
        last_stage[d] = len(sections) - 1
    for a in (sec_rows, sec_tiles, last_stage):
        a.setflags(write=False)
    return sec_rows, sec_tiles, last_stage


def conv_partials_reduction(outputs, depth, partials_bytes: int, out_bytes: int, grain: int, ipu):
    """Per stage of poplin's reduction of ``depth`` partial sums of an ``outputs``-element block
    held by ``depth`` tiles (arrays of the same shape; ``grain``: the partials' channel group):
    a list of (bytes received, compute cycles, fixed compute cycles) on the busiest tile, one entry
    per stage; the fixed cycles are the vertex's with no outputs (its launch and prologue).
    ``ipu`` (:class:`sim.hardware.system.IPU`) gives the tile's memory, workers and data path, and
    poplin's reduction options as the compile set them: ``fast_reduce`` (``enableFastReduce``: the
    single-input form whenever the outputs fill whole accumulator vectors, whatever the partials'
    size, and its faster loads) and ``multi_stage_reduce``."""
    vertex = (ipu.worker_threads, ipu.data_path_bits)
    outputs = np.asarray(outputs, dtype=np.int64)
    depth = np.asarray(depth, dtype=np.int64)
    shape = np.broadcast_shapes(outputs.shape, depth.shape)
    flat_outputs, flat_depth = (np.broadcast_to(a, shape).ravel() for a in (outputs, depth))
    p_float = partials_bytes == 4
    p_grain = 4 if p_float else 8  # partialsGrain: whole accumulator vectors for the single-input form
    sec_rows, sec_tiles, last_stage = _plan_tables(tuple(distinct_values(flat_depth)), ipu.multi_stage_reduce)
    depth_last = last_stage[flat_depth]  # each candidate's last stage
    out = []
    for i in range(len(sec_rows)):
        got, cycles, fixed = (np.zeros(flat_depth.size) for _ in range(3))
        stage_rows = sec_rows[i][flat_depth]
        active, ends = stage_rows > 0, depth_last == i
        for last in (False, True):  # intermediate stages write partials, the last the result type
            at = np.flatnonzero(active & (ends == last))
            if not at.size:
                continue
            rows, tiles, o = stage_rows[at], sec_tiles[i][flat_depth[at]], flat_outputs[at]
            res_bytes = out_bytes if last else partials_bytes
            res_grain = max(grain, 8 // res_bytes)  # partialGroupedReduce: partial chans, >= the result's vector
            per_tile = np.minimum(o, -(-(-(-o // res_grain)) // tiles) * res_grain)
            got[at] = (rows - 1) * per_tile * partials_bytes
            single = (per_tile % p_grain == 0) & (ipu.fast_reduce | single_input_fits(
                got[at], ipu.sram_bytes_per_tile, ipu.memory_element_bytes))
            fast = single if ipu.fast_reduce else False  # never fast without the option
            cycles[at] = reduce_add_cycles(per_tile, rows - single, res_bytes == 4, p_float, single, *vertex, fast)
            base = [_vertex_fixed_cycles(res_bytes == 4, p_float, form, *vertex, form and ipu.fast_reduce)
                    for form in (False, True)]
            fixed[at] = np.where(single, base[1], base[0])
        out.append(tuple(a.reshape(shape) for a in (got, cycles, fixed)))
    return out


__all__ = ["multi_stage_plan", "reduce_add_cycles", "single_input_fits", "conv_partials_reduction", "distinct_values"]
