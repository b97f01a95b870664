"""popops::histogram as PopART's HistogramOp runs it (automatic loss scaling's gradient statistics).

``popops::histogram`` (lib/popops/GatherStatistics.cpp, ``histogramImpl``) runs one compute set:
each tile holding part of the input counts its elements into ``levels + 1`` bins with one vertex
(a tile's single contiguous region) and keeps its counts (fp32) there; the counts are then
``popops::reduce``'d over the tiles to the output and cast to unsigned. A tile's vertex is the
cheaper of the 1-D MultiVertex that splits the data over the workers (``Histogram1D`` by data: its
workers' bins combined by one of them) and the one that splits the bin edges (by limit), as
``chooseVertexType`` picks by their estimates; a region too long for the by-data vertex's repeat
count, or several regions, takes 2-D worker vertices. Worker cycles from poplibs'
``HistogramPerformanceEstimation.cpp`` (``histogram1DByDataEstimate``, ``histogram1DByLimitEstimate``)
and ``popopsCycleEstimators.cpp`` (``Histogram2D``), poplibs 7eac0f26; a tile's cycles are its
workers' times the worker count, as those estimates return them.
"""

from __future__ import annotations

import math
from functools import lru_cache

from .vector import whole_number_table


@lru_cache(maxsize=1)
def _constants() -> dict[str, int]:
    """The ``[histogram]`` table of ``configs/_vector-ops.toml``."""
    return whole_number_table("histogram", ("max_repeat",))


def _tails(elements: int, half: bool, per: int) -> int:
    """A data loop's extra cycles for the elements after its whole 64-bit vectors."""
    return (per if elements & 1 else 0) + (per if half and elements & 2 else 0)


def by_data_cycles(elements: int, bins: int, absolute: bool, half: bool, workers: int, width: int) -> int:
    """Tile cycles of ``Histogram1D`` splitting ``elements`` over the ``workers`` by data
    (``histogram1DByDataEstimate``): each worker counts its share of the ``width``-element vectors
    for every bin edge, worker 0 then combines the bins."""
    per_vector = 3 + absolute
    shares = math.ceil(elements // width / workers)
    loop = (19 if half else 17) + _tails(elements, half, 3 + absolute) + per_vector * shares
    return workers * (23 + (5 if half else 4) + loop * (bins - 1) + 10)


def by_limit_cycles(elements: int, bins: int, absolute: bool, half: bool, workers: int, width: int) -> int:
    """Tile cycles of ``Histogram1D`` splitting the ``bins - 1`` edges over the ``workers``
    (``histogram1DByLimitEstimate``): each worker runs the whole data for each of its edges."""
    per_vector = 3 + absolute
    edges = math.ceil((bins - 1) / workers)
    tail = _tails(elements, half, 3 + absolute) if half else (2 + absolute if elements & 1 else 0)
    loop = (17 if half else 11) + tail + per_vector * (elements // width)
    return workers * (19 + 3 + loop * edges + 8 + 2 * (bins - 1))


def worker_2d_cycles(elements: int, bins: int, absolute: bool, half: bool, width: int) -> int:
    """Cycles of one ``Histogram2D`` worker vertex counting one region of ``elements``
    (``popopsCycleEstimators.cpp``)."""
    tail = _tails(elements, half, 3 + absolute) if half else (2 + absolute if elements & 1 else 0)
    loop = (16 if half else 10) + tail + (3 + absolute) * (elements // width)
    return 7 + (5 if half else 3) + (loop + (6 if half else 5)) * (bins - 1) + 3 + 10 + 2 * (bins - 1)


def histogram_tile_cycles(elements: int, bins: int, itemsize: int, absolute: bool = True,
                          workers: int = 6) -> tuple[int, str]:
    """(tile cycles, vertex) of popops::histogram's compute set on a tile holding ``elements`` of
    ``itemsize`` bytes in one region, counted into ``bins`` bins, as ``chooseVertexType`` picks:
    the 1-D vertex by data when it is the cheaper and the region fits its repeat count, the one by
    limit when that is no dearer (poplar's repeat counter is under 16 bits, so it has no size
    limit: max1DElemsByLimit), else 2-D worker vertices of at most a repeat count of vectors each,
    shared out over the workers."""
    half = itemsize == 2
    width = 8 // itemsize  # elements per 64-bit vector
    longest = _constants()["max_repeat"] * width  # elements one repeat count of vectors covers
    data = by_data_cycles(elements, bins, absolute, half, workers, width)
    limit = by_limit_cycles(elements, bins, absolute, half, workers, width)
    if data < limit and elements < longest * workers:
        return data, "Histogram1D by data"
    if data >= limit:
        return limit, "Histogram1D by limit"
    per_worker = math.ceil(math.ceil(elements / longest) / workers)
    return workers * per_worker * worker_2d_cycles(min(elements, longest), bins, absolute, half, width), \
        "Histogram2D"


__all__ = ["histogram_tile_cycles", "by_data_cycles", "by_limit_cycles", "worker_2d_cycles"]
