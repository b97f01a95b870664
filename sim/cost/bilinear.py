"""Bilinear upsampling as PopTorch runs it: its ``UpsampleBilinear2d`` custom op
(poptorch ``popart_compiler/source/custom_operations/UpsampleBilinear2d.cpp``), a 4-D input
``(N, C, Hi, Wi)`` scaled to ``(N, C, Ho, Wo)``.

Forward (``bilinearMap``): the input's four neighbours of every output pixel are gathered as views
laid out ``(Ho, Wo, N, C)``, with four constant weight tensors ``(Ho, Wo, 1, 1)``, and one popops::map
of ``_1*_2 + _3*_4 + _5*_6 + _7*_8`` writes the output: four multiplies and three adds an element. No
operand can lend the output its layout (the neighbours are broadcast views of the input), so the
output is mapped linearly and each tile receives its elements' four neighbours and their weights.

Backward (``bilinearMapGrads``): the input gradient laid out ``(Hi, Wi, N C)`` linearly over the tiles
(whole pixels when there are more than a tile's workers' worth of pixels a tile), each tile's share
cut into one, two or three compute sets (above 6 and above 12 pixels a tile), and each set's share into
worker regions, one plain C++ vertex a region (``BilinearGradVertex``,
``BilinearGradMultipleVertex``): for each gradient element, a float sum of the weighted output
gradients that reach it, ``4 Ho Wo / (Hi Wi)`` terms on average (16 for a scale factor of 2). The
vertices carry ``setPerfEstimate(vtx, 1)``: poplibs' estimators know nothing of them, so the worker
cycles are the ``[bilinear_grad]`` estimate of ``configs/_vector-ops.toml``.

Cycles are tile cycles (the six workers together), bytes are bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .vector import codelet, spread, whole_number_table

#: the codelets of the forward map's expression, in the order it applies them
FORWARD_STEPS = ("mul", "mul", "add", "mul", "add", "mul", "add")
#: the backward's compute sets by the pixels a tile holds: (most pixels, sets), then 3
_GRAD_SPLITS = ((6, 1), (12, 2))
#: the neighbours (and weights) each output element reads
NEIGHBOURS = 4


@lru_cache(maxsize=1)
def grad_vertex_cycles() -> dict[str, int]:
    """The ``[bilinear_grad]`` worker cycles: ``fixed`` a vertex, ``per_output`` a gradient element,
    ``per_term`` a weighted output gradient added."""
    return whole_number_table("bilinear_grad", ("fixed", "per_output", "per_term"))


@dataclass(frozen=True)
class BilinearPlan:
    """One pass (forward or backward) of the custom op: the busiest tile's ``compute`` cycles over
    ``compute_sets`` compute sets, ``exchange_bytes`` it receives, on ``tiles`` tiles; ``launch`` is
    the fixed part of ``compute``."""

    compute: int
    compute_sets: int
    exchange_bytes: int
    tiles: int
    flops: float
    launch: int
    plan: str


def forward_plan(in_shape, out_shape, itemsize: int, ipu, tiles: int) -> BilinearPlan:
    """The popops::map that writes the output, its elements spread linearly over ``tiles``."""
    n_out = math.prod(out_shape)
    block = out_shape[0] * out_shape[1]  # N C: the elements of one output pixel
    used, per_tile = spread(n_out, itemsize, ipu, tiles)
    steps = [codelet(s) for s in FORWARD_STEPS]
    fixed = max(c.fixed for c in steps)
    compute = math.ceil(fixed + per_tile * sum(c.per_element(itemsize) for c in steps))
    pixels = math.ceil(per_tile / block) + 1  # the pixels a tile's elements touch (one may be cut)
    received = NEIGHBOURS * (per_tile + min(pixels, out_shape[2] * out_shape[3])) * itemsize
    return BilinearPlan(compute, 1, received, used, 2.0 * NEIGHBOURS * n_out, math.ceil(fixed),
                        f"{n_out} elements on {used} tiles, four neighbours gathered and weighted (popops::map)")


def grad_plan(grad_in_shape, grad_out_shape, itemsize: int, ipu, tiles: int) -> BilinearPlan:
    """The C++ vertices that sum the output gradient back into ``grad_in_shape``."""
    n, c, hi, wi = grad_in_shape
    block, pixels = n * c, hi * wi
    n_in, n_out = math.prod(grad_in_shape), math.prod(grad_out_shape)
    workers = ipu.worker_threads
    if pixels / tiles > workers:  # whole pixels a tile (mapTensorLinearly's grain: one pixel)
        pixels_per_tile = math.ceil(pixels / tiles)
        per_tile, used = pixels_per_tile * block, math.ceil(pixels / pixels_per_tile)
    else:
        per_tile = math.ceil(n_in / tiles)
        used = math.ceil(n_in / per_tile)
        pixels_per_tile = math.ceil(per_tile / block)
    sets = next((k for most, k in _GRAD_SPLITS if pixels_per_tile <= most), 3)
    terms = NEIGHBOURS * n_out / n_in  # weighted output gradients per input gradient element
    v = grad_vertex_cycles()
    per_worker = math.ceil(per_tile / sets / workers)
    worker = v["fixed"] + per_worker * (v["per_output"] + terms * v["per_term"])
    compute = sets * workers * math.ceil(worker)
    received = math.ceil(per_tile * n_out / n_in) * itemsize  # the output gradient of the tile's pixels
    return BilinearPlan(compute, sets, received, used, 2.0 * NEIGHBOURS * n_out, sets * workers * v["fixed"],
                        f"{n_in} elements on {used} tiles in {sets} compute set(s), {terms:g} terms each "
                        "(C++ vertices, no poplibs estimate)")
