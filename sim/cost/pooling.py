"""popnn's 2-D pooling as poplibs plans and runs it (graphcore/poplibs lib/popnn at 8dcde1ec: ``Pooling.cpp``,
``PoolPlan.cpp``, ``PoolVertices.cpp``, ``PerformanceEstimation.hpp getPoolingCycles``).

* The planner (``PoolPlan.cpp constructModel``) splits the channel groups, the batch and each output field
  dimension over the tiles (never the kernel) and picks the channels per group (a multiple of the 64-bit
  grain, at most the input's own innermost grouping and 8 grains), minimising for the busiest tile the
  pooling vertex's planning estimate (``poolVertexCycleEstimate``: the tile's outputs dealt to the six
  workers in partial rows, each row a work item per kernel position), plus the bytes the tile reads over
  the exchange's 4 bytes a cycle, plus a quarter of them when the plan regroups the channels. It plans
  again with the preferred grouping (16 halves, 8 floats for a max pool) and keeps that plan when it costs
  less than 4/3 of the first (``getPlan``).
* A forward pool whose every field dimension divides by a stride at least its kernel, with no padding, folds
  the batch and channels into the row (``gatherDimsTransformIn``), so the vertex loops over longer rows.
* The max pool's input gradient first copies the output gradient into the forward output's layout
  (``poolInputGradientImpl``: ``gradsRearranged``), then runs ``MaxPoolingGrad`` on the gradient
  convolution's parameters (the output gradient dilated by the stride: the vertex reads one kernel position
  in ``stride`` of each row), reading the gradient, the forward output and the forward input; an average
  pool's gradient scales the output gradient (``scaleGradient``, a popops multiply) and sum-pools it.
* A pool whose kernel is its whole field without padding is a popops reduction (``poolImpl``
  ``substPoolingWithReduction``; its gradient a broadcast copy), which the caller prices as one.

A pass is priced on a tile in the middle of the field (:func:`tile_cost`): the vertex at the estimator's cycles
on the worklists popnn builds for it (a work item only for kernel positions that read real inputs), one exchange
of the stored elements of its input window, and the planner's regrouping charge. Cycles are tile cycles, bytes
are bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: ``PoolPlan.cpp getPlan``: the channel grain is 8 bytes (a 64-bit vector); ``maxGrainsPerChanGroup`` at most 8
#: grains
GRAIN_BYTES = 8
MAX_GRAINS = 8
#: ``constructModel``: the planner's exchange bytes a cycle (poplar ``Target::getExchangeBytesPerCycle``, a tile's
#: 32-bit exchange port) and the bytes a cycle it charges a regrouping of the channels
PLANNER_EXCHANGE_BYTES_PER_CYCLE = 4
PLANNER_REARRANGE_BYTES_PER_CYCLE = 4
#: ``getPlan``: the grouped plan is kept if it costs under this multiple of the first
GROUPED_PLAN_SLACK = 4 / 3
#: ``getPoolingCycles``: a worker's cycles before its rows (vertex state, the zeroing's split, the pointers'
#: unpacking at the planner's 2 cycles each), its row loop's and its work-item loop's own cycles
WORKER_START = 27
ROW_CYCLES = 13 + 2
ITEM_CYCLES = 20 + 3
#: ``PoolVertices.cpp``: the worklists' entries are UNSIGNED_SHORT constants
WORKLIST_ENTRY_BYTES = 2


@dataclass(frozen=True)
class PoolPass:
    """One pooling vertex pass as the planner sees it: ``batch`` x ``channels`` x the ``out_field`` (rows,
    row length) of the vertex's outputs, ``kernel`` (height, width), ``stride`` (of the outputs over the
    input, ``outputTransform.stride``), ``dilation`` (of the input's rows, ``inputTransform.dilation``: the
    forward stride in a gradient pass), ``max_grad`` for ``MaxPoolingGrad``, ``max_pool`` for a max (not
    sum) vertex, ``det_group``: the input's innermost channel grouping."""

    batch: int
    channels: int
    out_field: tuple[int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    max_pool: bool
    max_grad: bool
    det_group: int
    itemsize: int
    in_field: tuple[int, int] = (0, 0)  # the pass input's rows and row length (a gradient's: undilated)
    pad_lower: tuple[int, int] = (0, 0)  # the input's lower padding in each dimension (after any dilation)


@dataclass(frozen=True)
class PoolTilePlan:
    """The busiest tile of a pooling pass: batch, channel groups of ``chans_per_group`` channels, out rows and
    row length, and the tiles used; ``estimate`` the planner's cycles."""

    batch: int
    chan_groups: int
    chans_per_group: int
    rows: int
    row: int
    tiles: int
    estimate: int
    splits: tuple[int, int]  # the output rows' and row's splits over the tiles


def _loop_costs(p: PoolPass, chan_groups: int, cpg_d: int) -> tuple[int, int, int]:
    """(cycles a worker spends before its first row, a work item's cycles beside its outputs', an output's cycles
    per work item) of ``getPoolingCycles``: each of ``chan_groups`` groups of ``cpg_d`` 64-bit vectors costs 1 + 1,
    4 more from the second (6 in the gradient), and each vector ``2 + rpt + 1``, ``rpt`` being ``4 + 3n`` (max),
    ``5 + 3n`` (sum) or ``7 + 5n`` (max gradient) for ``n + 1`` outputs."""
    rpt_fixed, rpt_per = (7, 5) if p.max_grad else (4, 3) if p.max_pool else (5, 3)
    item = (ITEM_CYCLES + chan_groups * 2 + (chan_groups - 1) * (6 if p.max_grad else 4)
            + chan_groups * cpg_d * (3 + rpt_fixed))
    rows_start = 2 + (1 if p.max_pool else 2) + (10 if p.max_grad else 0) + 10
    return rows_start, item, chan_groups * cpg_d * rpt_per


def _fixed_cycles(chan_groups: int) -> int:
    """The vertex's cycles that do not grow with the work: supervisor 7 + 6, six times a worker's start."""
    return 7 + 6 * (WORKER_START + 4 * chan_groups + 1) + 6


def _vertex(p: PoolPass, batch: int, chan_groups: int, chans_per_group: int, outputs: int,
            worker_rows: list[list[list[int]]]) -> tuple[int, int]:
    """(cycles, the part that does not grow with the work) of ``getPoolingCycles``: supervisor 7 + 6, and six times
    the busiest worker's cycles; ``worker_rows``: each worker's rows, each row the ``numElementsM1`` of its work
    items; ``outputs`` the tile's output positions (the zeroing the workers share)."""
    workers = len(worker_rows)
    cpg_d = max(1, chans_per_group // (GRAIN_BYTES // p.itemsize))
    rows_start, per_item, per_output = _loop_costs(p, chan_groups, cpg_d)
    init_info = outputs // cpg_d
    elems = init_info * cpg_d // workers
    spare = init_info - elems * workers  # unsigned in the estimator: below zero it wraps, so every worker
    busiest = 0
    for w, rows in enumerate(worker_rows):
        cycles = WORKER_START + (4 + elems + (1 if spare < 0 or w < spare else 0)) * chan_groups + 1
        if rows:
            items = sum(len(r) for r in rows)
            cycles += rows_start + len(rows) * ROW_CYCLES + items * per_item + per_output * sum(map(sum, rows))
        busiest = max(busiest, cycles)
    return 7 + 6 * busiest + 6, _fixed_cycles(chan_groups)


def _partial_rows(batch: int, rows: int, row: int, workers: int) -> list[list[tuple[int, int, int]]]:
    """Each worker's partial rows (row of the tile's batch x rows, first and end output of it) of
    ``partitionPartialByContext``: the tile's outputs cut evenly into ``workers`` ranges, each cut at row ends."""
    total = batch * rows * row
    out = []
    for w in range(workers):
        begin, end = w * total // workers, (w + 1) * total // workers
        out.append([(r, max(begin, r * row) - r * row, min(end, (r + 1) * row) - r * row)
                    for r in range(begin // row, (end - 1) // row + 1)] if begin < end else [])
    return out


def planned_vertex_cycles(p: PoolPass, batch, chan_groups: int, chans_per_group: int, rows, row,
                          workers: int) -> np.ndarray:
    """Cycles of one tile's pooling vertex as the planner estimates it (``poolVertexCycleEstimate``): every kernel
    position of every partial row a work item of its outputs' hits (``ceil(length / dilation)``); numpy arrays
    of candidates' batch, channel groups, rows and row lengths (a zero-size tile costs nothing)."""
    batch, chan_groups, rows, row = (np.asarray(v, dtype=np.int64) for v in (batch, chan_groups, rows, row))
    positions = p.kernel[0] * p.kernel[1]
    cpg_d = max(1, chans_per_group // (GRAIN_BYTES // p.itemsize))
    dilation = p.dilation[1]
    rows_start, per_item, per_output = _loop_costs(p, chan_groups, cpg_d)
    total = batch * rows * row
    width = np.maximum(row, 1)
    init_info = total // cpg_d
    elems = init_info * cpg_d // workers
    spare = init_info - elems * workers
    busiest = np.zeros_like(total)
    for w in range(workers):
        begin, end = w * total // workers, (w + 1) * total // workers
        first, last = begin // width, np.maximum(end - 1, 0) // width
        one = first == last
        first_len = np.where(one, end - begin, width - begin % width)
        last_len = np.where(one, 0, (end - 1) % width + 1)
        middle = np.where(one, 0, last - first - 1)
        def m1(length):  # a work item's numElementsM1: the length's hits, less one
            return (length + dilation - 1) // dilation - 1
        hits = m1(first_len) + np.where(one, 0, m1(last_len)) + middle * m1(width)
        partials = last - first + 1
        extra = ((spare < 0) | (w < spare)).astype(np.int64)
        work = rows_start + partials * (ROW_CYCLES + positions * per_item) + per_output * positions * hits
        cycles = WORKER_START + (4 + elems + extra) * chan_groups + 1 + np.where(end > begin, work, 0)
        busiest = np.maximum(busiest, cycles)
    return np.where(total > 0, 7 + 6 * busiest + 6, 0)


def vertex_cycles(p: PoolPass, batch: int, chan_groups: int, chans_per_group: int, rows: int, row: int,
                  workers: int) -> tuple[int, int]:
    """(cycles, their fixed part) of one tile's vertex as the planner estimates it (:func:`planned_vertex_cycles`)."""
    return int(planned_vertex_cycles(p, batch, chan_groups, chans_per_group, rows, row, workers)), _fixed_cycles(
        chan_groups)


def _hits(p: PoolPass, dim: int, first: int, end: int, k: int) -> int:
    """Outputs in [first, end) of dimension ``dim`` that kernel position ``k`` reads a real input for: inside the
    input, not its padding, and not a dilation zero (``getOutputRangeForKernelIndex``)."""
    stride, dilation, pad = p.stride[dim], p.dilation[dim], p.pad_lower[dim]
    last = (p.in_field[dim] - 1) * dilation
    return sum(1 for o in range(first, end)
               if 0 <= o * stride + k - pad <= last and (o * stride + k - pad) % dilation == 0)


def window_reads(p: PoolPass) -> int:
    """The input elements a pass reads over all its outputs, batch and channels: for each output, the kernel
    positions that read a real input (:func:`_hits`), not the padding or the kernel's overhang beyond the field."""
    per_dim = [sum(_hits(p, d, 0, p.out_field[d], k) for k in range(p.kernel[d])) for d in (0, 1)]
    return p.batch * p.channels * per_dim[0] * per_dim[1]


def _out_ranges(out: int, split: int) -> list[tuple[int, int]]:
    """(first output, outputs) of each of ``split`` parts of ``out`` outputs (``getTileOutRange``)."""
    return [((i * out) // split, ((i + 1) * out) // split - (i * out) // split) for i in range(split)]


def _tile_origin(out: int, split: int) -> tuple[int, int]:
    """(first output, outputs) of the part of ``out`` outputs cut into ``split`` (:func:`_out_ranges`) nearest the
    middle that holds the most of them."""
    parts = _out_ranges(out, split)
    most = max(n for _, n in parts)
    return min((part for part in parts if part[1] == most), key=lambda part: abs(part[0] - out // 2))


@lru_cache(maxsize=4096)
def _worker_rows(p: PoolPass, plan: PoolTilePlan, workers: int) -> list[list[list[int]]]:
    """The worklists popnn builds for a tile of ``plan`` in the middle of the field (``createPartitions``,
    ``createWorklists``): each worker's partial rows, each row the ``numElementsM1`` of its work items, one for
    each kernel position with hits (a partial row with none has no list). Cached: a pass's cycles and its
    worklists' bytes read the same lists (not to be modified)."""
    (row0, rows), (x0, row) = (_tile_origin(o, s) for o, s in zip(p.out_field, plan.splits))
    worker_rows = []
    for partials in _partial_rows(plan.batch, rows, row, workers):
        worker_rows.append([])
        for r, begin, end in partials:
            y = row0 + r % rows
            rows_hit = sum(1 for ky in range(p.kernel[0]) if _hits(p, 0, y, y + 1, ky))
            columns = [n - 1 for n in (_hits(p, 1, x0 + begin, x0 + end, kx) for kx in range(p.kernel[1])) if n]
            if rows_hit and columns:
                worker_rows[-1].append(columns * rows_hit)
    return worker_rows


def worklist_bytes(p: PoolPass, plan: PoolTilePlan, workers: int) -> int:
    """Bytes of the constants a tile of ``plan`` holds for its vertex (``PoolVertices.cpp generateVertices``,
    each ``graph.addConstant`` of UNSIGNED_SHORT): ``startPos`` (a short per worker), ``offsetBase`` (two shorts
    per partial row) and each partial row's worklist (three shorts per work item: output offset, input offset,
    ``numElementsM1``). popnn maps each to tile 0, but all tiles' lists (0.6-1.0 MB for poplibs' pooling rows)
    could not fit on one tile, so they are taken to be where their vertex runs, as the rows' TotalMemory bears out.
    The vertex state's descriptors of those lists are not counted."""
    rows = [r for w in _worker_rows(p, plan, workers) for r in w]
    return WORKLIST_ENTRY_BYTES * (workers + 2 * len(rows) + 3 * sum(map(len, rows)))


def tile_cost(p: PoolPass, plan: PoolTilePlan, workers: int) -> tuple[int, int, int, int]:
    """(compute cycles, their fixed part, bytes received, cycles regrouping them) of a tile of ``plan`` in the
    middle of the field: its vertex on the worklists popnn builds (:func:`_worker_rows`: a partial row's work
    item for each kernel position with hits, of its hits); the input window its outputs read (a gradient's
    dilation zeros are not stored), for the max pool's gradient the output gradient's and the forward output's
    windows and the forward input at its outputs; and the planner's regrouping charge (a quarter cycle a byte)
    on those bytes when the channel groups are not the input's."""
    (row0, rows), (x0, row) = (_tile_origin(o, s) for o, s in zip(p.out_field, plan.splits))
    compute, fixed = _vertex(p, plan.batch, plan.chan_groups, plan.chans_per_group, plan.batch * rows * row,
                             _worker_rows(p, plan, workers))
    received = _received(p, plan, row0, rows, x0, row)
    # the regrouping moves the input the tile reads, as stored: the planner's charge on its window, less the
    # padding and the kernel's overhang beyond the field (which the planner counts, getBytesRequiredPerTile)
    regroup = received // PLANNER_REARRANGE_BYTES_PER_CYCLE if p.det_group != plan.chans_per_group else 0
    return compute, fixed, received, regroup


def _window(p: PoolPass, dim: int, first: int, count: int) -> int:
    """The stored input elements of dimension ``dim`` that ``count`` outputs from ``first`` read: inside the
    input, not its padding, and not a dilation zero (a gradient's are not stored)."""
    dilation = p.dilation[dim]
    lo = max(first * p.stride[dim] - p.pad_lower[dim], 0)
    last = (p.in_field[dim] - 1) * dilation  # the dilated input's last element
    hi = min((first + count - 1) * p.stride[dim] + p.kernel[dim] - 1 - p.pad_lower[dim], last)
    return max(0, hi // dilation - (lo - 1) // dilation) if count else 0


def _received(p: PoolPass, plan: PoolTilePlan, row0: int, rows: int, x0: int, row: int) -> int:
    """Bytes a tile of ``plan`` receives for its ``rows`` x ``row`` outputs from (``row0``, ``x0``): the input
    window they read, and for the max pool's gradient also the forward output's window and the forward input at
    the outputs."""
    channels = plan.batch * plan.chan_groups * plan.chans_per_group
    read = _window(p, 0, row0, rows) * _window(p, 1, x0, row) * channels * p.itemsize
    return 2 * read + rows * row * channels * p.itemsize if p.max_grad else read


def received_bytes(p: PoolPass, plan: PoolTilePlan) -> np.ndarray:
    """Bytes each of ``plan``'s tiles receives (:func:`_received`), tile by tile: the output rows and row pieces
    of the field cut as ``getTileOutRange`` cuts them, the same for every channel and batch part. A tile at the
    field's edge reads less of the padding-clipped input than the middle tile :func:`tile_cost` prices."""
    parts = [_out_ranges(out, split) for out, split in zip(p.out_field, plan.splits)]
    grid = np.array([_received(p, plan, r0, rn, x0, xn) for r0, rn in parts[0] for x0, xn in parts[1]])
    return np.tile(grid, max(1, plan.tiles // len(grid)))


def _bytes_per_tile(p: PoolPass, batch: int, chan_groups: int, cpg: int, rows: int, row: int) -> int:
    """``getBytesRequiredPerTile``: the tile's input window (its outputs' rows times the stride plus the kernel's
    overhang), and for the max pool's gradient twice that and the outputs."""
    window = ((rows * p.stride[0] + p.kernel[0] - p.stride[0]) * (row * p.stride[1] + p.kernel[1] - p.stride[1]))
    channels = batch * chan_groups * cpg
    in_bytes = window * channels * p.itemsize
    return 2 * in_bytes + rows * row * channels * p.itemsize if p.max_grad else in_bytes


def _splits(size: int, limit: int) -> list[tuple[int, int]]:
    """(per-tile size, the fewest splits giving it) for every distinct ceil(size / split), split <= limit."""
    out, seen = [], set()
    for split in range(1, min(size, limit) + 1):
        per = math.ceil(size / split)
        if per not in seen:
            seen.add(per)
            out.append((per, math.ceil(size / per)))
    return out


def _plan(p: PoolPass, tiles: int, workers: int, min_channels: int, max_grains: int) -> PoolTilePlan | None:
    """The cheapest plan by the planner's estimate (``constructModel``) with channel groups of at least
    ``min_channels`` and at most ``max_grains`` grains; the output rows and row lengths of each channel and batch
    split are priced together."""
    grain = GRAIN_BYTES // p.itemsize
    best = None
    for grains in range(1, max_grains + 1):
        cpg = grains * grain
        if cpg < min_channels:
            continue
        for cg, cs in _splits(math.ceil(p.channels / cpg), tiles):
            for b, bs in _splits(p.batch, tiles // cs):
                pairs = [(r, rs, x, xs) for r, rs in _splits(p.out_field[0], tiles // (cs * bs))
                         for x, xs in _splits(p.out_field[1], tiles // (cs * bs * rs))]
                r, rs, x, xs = (np.array(v, dtype=np.int64) for v in zip(*pairs))
                # where a split does not divide its dimension, the tile one output shorter too (constructModel)
                compute = np.maximum.reduce([
                    planned_vertex_cycles(p, b, cg, cpg, r, x, workers),
                    np.where(p.out_field[0] % r == 0, 0, planned_vertex_cycles(p, b, cg, cpg, r - 1, x, workers)),
                    np.where(p.out_field[1] % x == 0, 0, planned_vertex_cycles(p, b, cg, cpg, r, x - 1, workers))])
                moved = _bytes_per_tile(p, b, cg, cpg, r, x)
                cost = compute + moved // PLANNER_EXCHANGE_BYTES_PER_CYCLE
                if p.det_group != cpg:
                    cost = cost + moved // PLANNER_REARRANGE_BYTES_PER_CYCLE
                i = int(np.argmin(cost))
                if best is None or cost[i] < best.estimate:
                    best = PoolTilePlan(b, cg, cpg, int(r[i]), int(x[i]), cs * bs * int(rs[i]) * int(xs[i]),
                                        int(cost[i]), (int(rs[i]), int(xs[i])))
    return best


@lru_cache(maxsize=4096)
def plan_pool(p: PoolPass, grouped: PoolPass, tiles: int, workers: int) -> tuple[PoolPass, PoolTilePlan]:
    """(the pass, its plan) ``getPlan`` keeps on ``tiles`` tiles: the cheapest plan of ``p`` with channel groups
    up to the input's grouping, or, if its groups are under the preferred grouping and ``grouped`` (the pass
    as the grouped transform leaves it) has as many channels, the cheapest of ``grouped`` in groups of the
    preferred size when that costs under 4/3 of it."""
    grain = GRAIN_BYTES // p.itemsize
    max_grains = max(1, min(MAX_GRAINS, math.ceil(p.det_group / grain), math.ceil(p.channels / grain)))
    plan = _plan(p, tiles, workers, 1, max_grains)
    preferred = preferred_group(p.itemsize, p.max_pool)
    if plan.chans_per_group < preferred <= grouped.channels:
        alternative = _plan(grouped, tiles, workers, preferred, math.ceil(preferred / grain))
        if alternative is not None and alternative.estimate < plan.estimate * GROUPED_PLAN_SLACK:
            return grouped, alternative
    return p, plan


def forward_passes(batch: int, channels: int, field: tuple[int, int], out_field: tuple[int, int],
                   kernel: tuple[int, int], stride: tuple[int, int], pad_lower: tuple[int, int], det_group: int,
                   itemsize: int, max_pool: bool) -> tuple[PoolPass, PoolPass]:
    """The forward pass as the planner sees it, at the vector-width and at the preferred channel grouping
    (``gatherDimsTransformIn``): where no dimension is padded and each divides by a stride at least its kernel,
    the rows fold into the stride's rows and the batch and channels into the row, leaving groups of that many
    channels (when the batch's channels divide into them)."""
    def one(group: int) -> PoolPass:
        n, c, (h, w), (ho, wo) = batch, channels, field, out_field
        if pad_lower == (0, 0) and all(s >= k and d % s == 0 for s, k, d in zip(stride, kernel, field)):
            w, h = w * (h // stride[0]), stride[0]
            n, c = 1, batch * channels
            if c % group == 0:
                w, c = w * (c // group), group
            ho, wo = (h - kernel[0]) // stride[0] + 1, (w - kernel[1]) // stride[1] + 1
        return PoolPass(n, c, (ho, wo), kernel, stride, (1, 1), max_pool, False, math.gcd(det_group, c), itemsize,
                        (h, w), pad_lower)
    vector = GRAIN_BYTES // itemsize
    return one(vector), one(preferred_group(itemsize, max_pool))


def preferred_group(itemsize: int, max_pool: bool) -> int:
    """``getPreferredChannelGrouping``: 16 halves or 8 floats for a max pool; 16 halves or 4 floats otherwise."""
    return (16 if itemsize == 2 else 8) if max_pool else (16 if itemsize == 2 else 4)
