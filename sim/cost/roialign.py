"""RoIAlign as PopART runs it: ``RoiAlignOpx`` / ``RoiAlignGradOpx`` (popart ``willow/src/popx/op/roialignx.cpp``,
also ``popxl.ops.roi_align``) call popnn's experimental ``roiAlignFwd`` and ``roiAlignInputGradient``
(poplibs ``lib/popnn/ROIAlign.cpp``), a feature map ``(N, C, H, W)`` pooled over ``R`` boxes into
``(R, C, aH, aW)`` with a ``sr x sr`` grid of samples a bin.

Forward: ``topDataGrid`` ``(R, C, sr, sr, aH, aW)`` is zeroed (popops::fill), then one compute set holds a
``ROIAlignForward`` vertex for every (box, channel, grid point), placed round-robin over the tiles; each reads
its channel's whole map for every image (``[N, H W]``) and writes its ``aH x aW`` samples. popops::reduce sums
the grid (dims 2, 3) and popops::div divides by its ``sr^2`` points.

Backward: ``group`` boxes at a time (enough vertices for every worker of every tile:
``min(R, ceil(workers tiles / (C sr^2)))``), each group one compute set (``R // group + 1`` of them) of a
``ROIAlignBackward`` vertex per (channel, box of the group, grid point), on tile ``(c group + g) % tiles``,
which adds its samples' weighted gradient into its own ``[N, H W]`` slice of ``bottomBuffGrad``
``(N, C, group, sr, sr, H, W)``, zeroed first; popops::reduce sums it over dims 2-4.

The vertices are plain C++ with a placeholder estimate in poplibs, so their worker cycles are the
``[roi_align]`` estimate of ``configs/_vector-ops.toml``. Cycles are tile cycles (the six workers together),
bytes are bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .vector import INDEX_BYTES, whole_number_table

#: a box's coordinates (x1, y1, x2, y2), each vertex's input
BOX = 4


@lru_cache(maxsize=1)
def vertex_cycles() -> dict[str, int]:
    """The ``[roi_align]`` worker cycles: ``fixed`` a vertex, ``per_sample`` a forward sample,
    ``per_sample_grad`` a gradient sample."""
    return whole_number_table("roi_align", ("fixed", "per_sample", "per_sample_grad"))


@dataclass(frozen=True)
class RoiAlignPlan:
    """The vertex compute sets of one pass: each ``compute`` cycles on the busiest tile (``launch`` of them its
    vertices' fixed part), receiving ``exchange_bytes``; ``compute_sets`` with work and ``empty_sets`` without;
    ``buffer_elements`` zeroed on the busiest tile first (popops::fill); ``grid`` the buffer's shape and
    ``axes`` those popops::reduce sums; ``temp_bytes`` on the busiest tile."""

    compute: int
    launch: int
    exchange_bytes: int
    compute_sets: int
    empty_sets: int
    tiles: int
    buffer_elements: int
    grid: tuple
    axes: tuple
    temp_bytes: int
    flops: float
    plan: str


def _tile_cycles(vertices: int, samples: int, per_sample: int, workers: int) -> tuple[int, int]:
    """(cycles, fixed part) of a tile running ``vertices`` vertices of ``samples`` samples on its workers."""
    v = vertex_cycles()
    rounds = math.ceil(vertices / workers)
    return workers * rounds * (v["fixed"] + samples * per_sample), workers * rounds * v["fixed"]


def forward_plan(data_shape: tuple, rois: int, out_hw: tuple, sampling: int, itemsize: int, ipu,
                 tiles: int) -> RoiAlignPlan:
    """``roiAlignFwd``'s fill and vertex compute set (its reduce and division are popops ops priced as such)."""
    n, c, h, w = data_shape
    ah, aw = out_hw
    vertices = rois * c * sampling * sampling
    per_tile = math.ceil(vertices / tiles)
    compute, launch = _tile_cycles(per_tile, ah * aw, vertex_cycles()["per_sample"], ipu.worker_threads)
    maps = min(per_tile, c)  # the channels a tile's vertices read, each channel's map of every image
    received = maps * n * h * w * itemsize + per_tile * BOX * itemsize + rois * INDEX_BYTES  # (the batch indices)
    grid = per_tile * ah * aw
    return RoiAlignPlan(compute, launch, received, 1, 0, min(vertices, tiles), grid,
                        (rois, c, sampling, sampling, ah, aw), (2, 3), received + grid * itemsize,
                        11.0 * vertices * ah * aw,
                        f"{vertices} vertices (box, channel, grid point) on {min(vertices, tiles)} tiles, "
                        f"{per_tile} a tile, each reading its channel's {n} x {h} x {w} map")


def grad_plan(data_shape: tuple, rois: int, out_hw: tuple, sampling: int, itemsize: int, ipu,
              tiles: int) -> RoiAlignPlan:
    """``roiAlignInputGradient``'s fill and vertex compute sets (its reduce is a popops op priced as such)."""
    n, c, h, w = data_shape
    ah, aw = out_hw
    grid = sampling * sampling
    workers = ipu.worker_threads
    group = min(rois, math.ceil(workers * tiles / (c * grid)))
    pairs = math.ceil(c * group / tiles)  # (channel, box of the group) pairs a tile holds
    per_tile = pairs * grid
    compute, launch = _tile_cycles(per_tile, ah * aw, vertex_cycles()["per_sample_grad"], workers)
    received = per_tile * (ah * aw + BOX) * itemsize + rois * INDEX_BYTES
    buffer = pairs * n * grid * h * w
    working = math.ceil(rois / group)
    return RoiAlignPlan(compute, launch, received, working, rois // group + 1 - working, min(c * group, tiles),
                        buffer, (n, c, group, sampling, sampling, h, w), (2, 3, 4), buffer * itemsize + received,
                        12.0 * rois * c * grid * ah * aw,
                        f"{group} boxes a compute set ({working} with work), {per_tile} vertices a tile each, "
                        f"summed from a {n} x {c} x {group} x {sampling} x {sampling} x {h} x {w} buffer")
