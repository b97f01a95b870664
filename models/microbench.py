"""Microbenchmarks with published hardware figures, built as graphs.

``tut6-matvec``  Poplar tutorial 6, optimised version: a fp32 ``rows x cols`` matrix times a
                 vector. The matrix rows are cut into ``col_split`` segments; one C++ dot-product
                 vertex per (row, segment) writes a partial sum; one reduce vertex per row adds
                 the partials. Host streams: the vector and the matrix in, the result out.
                 ``col_split`` from 1 to ``cols``; ``tiles`` above the IPU's are capped to them
                 where the graph is compiled, with a note.
``amp-tile``     The tessellate-ipu peak-FLOPS notebook: every tile runs one AMP matmul
                 ``[n, 16] x [16, 16]`` in fp16 (fp16 partials) on data already on the tile;
                 ``tiles`` from 1 to 1,472 (:data:`MAX_TILES`).
``io-bound``     A loop in which the IPU gets data from the host, processes it and sends it
                 back, as in the PopTorch user guide's host-IO profiles: ``x (batch, width)``
                 fp16 through ``layers`` x (linear + relu), the last activation streamed out.
                 The guide does not say which model it profiled; the defaults put the
                 unbuffered cycles per iteration near its figure (host IO about a third).
                 ``overlap=True`` marks both streams OverlapDeviceIterationLoop.

The tutorial's vertices are plain C++ loops, not vectorised codelets, so they are ``custom``
ops priced per vertex: ``vertex_base_cycles + cycles_per_mac x elements`` worker cycles.
``vertex_base_cycles = 5`` is the tutorial's own cycle estimate; ``cycles_per_mac = 4`` is our
estimate of a scalar fp32 loop (two loads, a multiply and an add per element), not fitted.
"""

from __future__ import annotations

import math

from sim.graph import Graph, GraphBuilder
from sim.options import OverlapMode

from ._common import Params

#: the most tiles ``amp-tile``'s ``tiles`` may name: those of the largest IPU in configs/ (Mk2, Bow and
#: C600: 1,472; Mk1: 1,216). Its tiles are the leading axis of one batched matmul, which any IPU would
#: price spread over its own tiles, so a count above every IPU's is refused when the model is built,
#: before the system is known.
MAX_TILES = 1472

MODELS = {
    "tut6-matvec": dict(rows=10000, cols=1000, col_split=7, tiles=1472, vertex_base_cycles=5,
                        cycles_per_mac=4),
    "amp-tile": dict(n=16, tiles=1472),
    "io-bound": dict(batch=32, width=896, layers=28, overlap=False),
}


def build(name: str, p: Params) -> Graph:
    return {"tut6-matvec": _tut6, "amp-tile": _amp_tile, "io-bound": _io_bound}[name](p)


def _tut6(p: Params) -> Graph:
    # tiles is not bounded here: the custom ops carry it, and compiling for an IPU with fewer tiles caps
    # them to the IPU's with a note (sim.cost.rules._custom)
    rows, cols, split, tiles = p.int("rows"), p.int("cols"), p.int("col_split"), p.int("tiles")
    if split > cols:
        p.fail("col_split", f"expected an integer from 1 to cols={cols}: each of the col_split segments of a "
                            "row must hold at least one of its columns")
    base, per_mac = p.int("vertex_base_cycles", 0), p.int("cycles_per_mac")
    b = GraphBuilder("tut6-matvec", "float32")
    vector = b.input("inputVector", (cols,))
    matrix = b.input("inputMatrix", (rows, cols))
    segment = math.ceil(cols / split)
    # the stream lands the matrix in stream order; the exchange moves each tile's segments
    # into place, and every tile also receives the vector segments its vertices read
    matrix_share = rows * cols * 4 / tiles
    partials = b.op("custom", [matrix, vector], [(rows, split)], name="mulCS", attrs=dict(
        vertices=rows * split, vertex_cycles=base + per_mac * segment, tiles=tiles,
        exchange_bytes_per_tile=matrix_share + cols * 4, flops=2.0 * rows * cols))[0]
    out = b.op("custom", [partials], [(rows,)], name="reduceCS", attrs=dict(
        vertices=rows, vertex_cycles=base + per_mac * split, tiles=tiles,
        exchange_bytes_per_tile=math.ceil(rows / tiles) * split * 4, flops=float(rows * split)))[0]
    b.output(out)
    return b.graph


def _amp_tile(p: Params) -> Graph:
    n, tiles = p.int("n"), p.int("tiles")
    if tiles > MAX_TILES:
        p.fail("tiles", f"expected an integer from 1 to {MAX_TILES}, the tiles of one IPU ({MAX_TILES:,} on the "
                        "largest IPU in configs/: Mk2, Bow, C600; Mk1 has 1,216): each tile runs one AMP matmul")
    b = GraphBuilder("amp-tile", "float16")
    x = b.constant("x", (tiles, n, 16))
    w = b.weight("w", (tiles, 16, 16))
    b.output(b.matmul(x, w, partials_type="half"))  # the notebook's vertex accumulates in fp16
    b.graph.tiles_asked = tiles  # on an IPU with fewer compute tiles the products share tiles, with a note
    return b.graph


def _io_bound(p: Params) -> Graph:
    width = p.int("width")
    b = GraphBuilder("io-bound", "float16")
    x = b.input("x", (p.int("batch"), width))
    h = x
    for i in range(p.layers("layers")):
        h = b.relu(b.linear(h, width, name=f"l{i}"))
    b.output(h)
    if p.flag("overlap"):
        for name in (x, h):
            b.set_overlap(name, OverlapMode.OverlapDeviceIterationLoop)
    return b.graph
