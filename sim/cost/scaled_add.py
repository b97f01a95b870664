"""popops ``scaledAddTo`` of two tensors with the same tile mapping (``A += b·B``), per tile.

poplibs 8dcde1ec ``lib/popops/ScaledAdd.cpp :: scaledArithmeticConstImpl`` adds one compute set.
On each tile it takes the sorted contiguous regions of ``A`` (intervals of ``A``'s flattened index
space): one region runs one ``ScaledAddSupervisor`` vertex, several are split between the 6
workers in grains of the vector width (``poputil::splitRegionsBetweenWorkers``: grain 4 halves or
2 floats, at least 2 grains a vertex), one ``ScaledAdd2D`` vertex each. A constant scale (the
``float`` overloads) with ``optimizeForSpeed`` off picks ``ScaledAdd2D<T, T, T, true, false>``.

Costs follow ``lib/popops/popopsCycleEstimators.cpp`` at that commit. Its ``ScaledAdd2D``
estimator passes ``memConstrained`` and ``isConstant`` to ``ScaledArithmetic2DCycleEstimate`` in
the opposite order to that function's parameters, so a constant-scale vertex is estimated with
the memory-constrained inner loop (2 cycles a vector, not 3) plus the one cycle of a tensor scale;
Poplar's IPUModel reports that estimate, so it is reproduced here. A worker vertex's cycles are
thread cycles; the tile runs the 6 workers' vertices in turn, 6 tile cycles per thread cycle of
the busiest.
"""

from __future__ import annotations

import math

from .reduction import _vector_width


def split_regions_between_workers(sizes: list[int], grain: int, workers: int,
                                  min_elements: int = 0) -> list[list[int]]:
    """The region pieces (sizes) of each vertex when regions of ``sizes`` elements, in order, are
    split into at most ``workers`` vertices of whole grains (``poputil/Util.cpp ::
    splitRegionsAux``: ``ceil(grains / workers)`` grains a vertex, at least ``min_elements``
    elements, vertex ``v`` taking grains ``[v·g/n, (v+1)·g/n)``)."""
    total = sum(sizes)
    if total == 0:
        return []
    grains = -(-total // grain)
    per = -(-grains // workers)
    if min_elements:
        min_grains = -(-min_elements // grain)
        per = max(per, -(-grains // max(1, grains // min_grains)))
    vertices = -(-grains // per)
    out, item, offset = [], 0, 0
    for v in range(vertices):
        begin = v * grains // vertices * grain
        end = min(total, (v + 1) * grains // vertices * grain)
        left, pieces = end - begin, []
        while left > 0:
            if offset == sizes[item]:
                item, offset = item + 1, 0
            take = min(left, sizes[item] - offset)
            pieces.append(take)
            offset += take
            left -= take
        out.append(pieces)
    return out


def scaled_add_2d_cycles(pieces: list[int], itemsize: int) -> int:
    """Thread cycles of one ``ScaledAdd2D`` vertex (constant scale) over regions of ``pieces``
    elements (``ScaledArithmetic2DCycleEstimate`` as the ``ScaledAdd2D`` estimator calls it:
    9 + 1 fixed; per region 15, plus 5 and 2 a vector if it has a whole vector, plus the
    remainder's cycles: a float 7; halves 4, 6 more for two, 7 more for an odd one)."""
    width = _vector_width(itemsize)
    cycles = 9 + 1
    for size in pieces:
        vectors, rem = divmod(size, width)
        cycles += 15 + (5 if vectors else 0) + 2 * vectors
        if itemsize == 4:
            cycles += 7 if rem else 0
        else:
            cycles += (4 if rem else 0) + (6 if rem >= 2 else 0) + (7 if rem % 2 else 0)
    return cycles


def scaled_add_supervisor_cycles(elements: int, itemsize: int, workers: int) -> int:
    """Tile cycles of one ``ScaledAddSupervisor`` vertex (constant scale, not memory-constrained:
    3 cycles a vector) over one region of ``elements`` (``scaledArithmeticSupervisorCycleEstimate``:
    supervisor 21, 6 more to unpack ``A``'s 64-bit scaled pointer, + 11 + 7 (13 with a remainder)
    + 12; each worker 15 + 6 + 3 per vector after the first + 2 + 1, the remainder's worker 1 more
    and its remainder cycles; ``workers`` x the busiest)."""
    width = _vector_width(itemsize)
    vectors, rem = divmod(elements, width)
    per_worker, extra = divmod(vectors, workers)
    supervisor = 21 + 6 + 11 + (7 if rem == 0 else 13) + 12
    busiest = 0
    for wid in range(workers):
        # poplibs adds a vector only when remainingVectors < 0 (never): every worker takes vectorsPerWorker
        cycles = 15 + (6 + 3 * (per_worker - 1) if per_worker else 0) + 2
        if wid == extra:
            cycles += 1
            if rem:
                cycles += 8 if itemsize == 4 else 5 + (7 if rem >= 2 else 0) + (6 if rem == 3 else 0)
        busiest = max(busiest, cycles + 1)
    return supervisor + workers * busiest


#: the supervisor vertex's ``size`` field is an ``unsigned short`` (elemwiseScaledAddCodelets.cpp)
SUPERVISOR_MAX_ELEMENTS = 65535


def scaled_add_tile_cycles(regions: int, region_elements: int, itemsize: int, workers: int) -> int:
    """Tile cycles of ``scaledAddTo`` on a tile holding ``regions`` regions of ``region_elements``
    elements each (one vertex for one region that fits its ``size`` field, else the workers'
    ``ScaledAdd2D`` vertices; their cap on a region's length, ``max2DInnerElements``, is not
    applied)."""
    if regions <= 0 or region_elements <= 0:
        return 0
    if regions == 1 and region_elements <= SUPERVISOR_MAX_ELEMENTS:
        return scaled_add_supervisor_cycles(region_elements, itemsize, workers)
    width = _vector_width(itemsize)
    vertices = split_regions_between_workers([region_elements] * regions, width, workers, 2 * width)
    return workers * max(scaled_add_2d_cycles(p, itemsize) for p in vertices)


def scaled_add_fixed_cycles(regions: int, region_elements: int, itemsize: int, workers: int) -> int:
    """The part of :func:`scaled_add_tile_cycles` that is not the per-vector loop (the launch)."""
    width = _vector_width(itemsize)
    if regions == 1 and region_elements <= SUPERVISOR_MAX_ELEMENTS:
        loop = 3 * math.floor(region_elements / width / workers) * workers
    else:
        loop = 2 * (regions * region_elements // width)
    return max(0, scaled_add_tile_cycles(regions, region_elements, itemsize, workers) - loop)


__all__ = ["split_regions_between_workers", "scaled_add_2d_cycles", "scaled_add_supervisor_cycles",
           "scaled_add_tile_cycles", "scaled_add_fixed_cycles"]
