"""Where the rows of a matmul's result live, and the ops that work on a slice of them.

poplin lays a matmul's result out as its plan computed it: the rows (all dimensions but the last,
flattened) in ``rows`` equal blocks, each block on its own ``1/rows`` of the tiles the matmul
partitions its output over (the plan's ``rows/N``). A slice of whole rows is a view (PopART's
SliceInplace), so it lives on the blocks it covers only; popops' element-wise ops clone their input's
layout for their result (``poputil::cloneN``), and popnn's softmax / cross-entropy and popops'
reductions run their first stage where the data is. So a chain of such ops on a slice of a matmul's
rows runs on that slice's tiles, not the IPU's: Graphcore's GPT-2 computes its loss over 128-position
slices of the LM head's logits (``train_gpt2.py`` ``--enable-sequence-serialized``), each slice's
cross-entropy on the one row block of the projection's tiles that holds it, which is why the script
copies each slice onto every tile (its ``RemapCE`` op) before the accuracy's argmax.

:func:`narrowed_tiles` follows those layouts through a graph as the compiler prices it. Every other
tensor is taken as spread over all the tiles, as the cost rules price it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from ..cost.rules import ELEMENTWISE_KINDS, LOSS_COST_KINDS, POINTWISE_KINDS
from ..cost.opcost import OpCost, TileProfile
from ..cost.row_ops import ROW_OP_KINDS
from ..graph.ir import Graph, Op

#: op kinds that run where their data (their largest input) lies, and whose result of that input's shape keeps
#: its layout: popops element-wise ops, popnn's softmax and layer norm, the losses and their gradients, and
#: reductions, whose first stage runs on the input's tiles
SAME_LAYOUT_KINDS = (ELEMENTWISE_KINDS | POINTWISE_KINDS | LOSS_COST_KINDS | frozenset(ROW_OP_KINDS)
                     | {"reduce_max", "reduce_sum", "reduce_mean", "reduce_min"})
#: views that keep a tensor's last dimension and the order of its rows
_ROW_VIEWS = frozenset({"reshape", "flatten", "squeeze", "unsqueeze", "identity", "detach"})
#: a matmul plan's row partition, as :class:`sim.cost.amp.MatmulPlan` writes it
_PLAN_ROWS = re.compile(r"^groups/1 rows/(\d+) ")


@dataclass(frozen=True)
class RowLayout:
    """A tensor's rows in ``blocks`` equal blocks, each on its own part of the tiles, all of them
    together on ``share`` (0-1] of the tiles the IPU computes on."""
    blocks: int
    share: float


def _rows(shape: tuple) -> int:
    """The rows of a tensor of ``shape``: all its dimensions but the last, multiplied."""
    return math.prod(shape[:-1]) if len(shape) > 1 else 1


def _matmul_layout(plan: str) -> RowLayout | None:
    """The row layout of a matmul's result from its plan: its row partition, unless its operands were
    swapped (the rows are then the plan's columns) or it is serialised over its rows."""
    m = _PLAN_ROWS.match(plan)
    if m is None or "swapped" in plan or "over the rows" in plan:
        return None
    return RowLayout(int(m.group(1)), 1.0)


def _sliced(layout: RowLayout, op: Op, shape: tuple) -> RowLayout | None:
    """The layout of a slice of whole rows of a tensor of ``shape`` laid out as ``layout``: the
    blocks its rows cover; None when it slices the last dimension or its rows are not one range."""
    axis = op.attrs.get("axis")
    start, stop = op.attrs.get("start"), op.attrs.get("stop")
    if None in (axis, start, stop):
        return None
    axis %= len(shape)
    if axis == len(shape) - 1 or any(d != 1 for d in shape[:axis]) or not 0 <= start < stop <= shape[axis]:
        return None
    inner = math.prod(shape[axis + 1:-1])  # rows per index along the axis
    block = _rows(shape) / layout.blocks
    first, last = int(start * inner // block), int(math.ceil(stop * inner / block))
    covered = max(1, min(layout.blocks, last) - first)
    return RowLayout(covered, layout.share * covered / layout.blocks)


def narrowed_tiles(op: Op, g: Graph, layouts: dict[str, RowLayout], tiles: int) -> int:
    """The tiles ``op`` computes on: ``tiles``, or fewer when it is one of :data:`SAME_LAYOUT_KINDS`
    and its data (its largest input) is a slice of a matmul's rows. Records the row layouts of its
    results in ``layouts`` (all but a matmul's: :func:`record_matmul`), and gives a remap of such a
    slice ``source_tiles``: the tiles that send its copy (the rest of the IPU receives)."""
    if not op.inputs or not op.outputs:
        return tiles
    source = max((g.tensors[i] for i in op.inputs), key=lambda t: t.numel)  # the data, not a scalar or labels
    first, out = layouts.get(source.name), g.tensors[op.outputs[0]]
    if first is None:
        return tiles
    if op.kind == "slice":
        layout = _sliced(first, op, source.shape)
        if layout is not None:
            layouts[out.name] = layout
    elif op.kind in _ROW_VIEWS and out.shape[-1:] == source.shape[-1:]:
        layouts[out.name] = first
    elif op.kind == "concat" and op.attrs.get("axis", 0) % len(out.shape) == len(out.shape) - 1:
        if all(layouts.get(i) == first for i in op.inputs):
            layouts[out.name] = first
    elif op.kind == "remap" and first.share < 1:  # every tile receives its part from the slice's tiles
        op.attrs["source_tiles"] = max(1, round(first.share * tiles))
    elif op.kind in SAME_LAYOUT_KINDS:
        if out.shape == source.shape:
            layouts[out.name] = first
        if first.share < 1:
            return max(1, round(first.share * tiles))
    return tiles


def record_matmul(op: Op, plan: str, layouts: dict[str, RowLayout]) -> None:
    """Record the row layout of matmul ``op``'s result, planned as ``plan``."""
    layout = _matmul_layout(plan)
    if layout is not None and layout.blocks > 1:
        layouts[op.outputs[0]] = layout


def on_first_tiles(cost: OpCost, tiles: int) -> OpCost:
    """``cost``, priced on fewer tiles (:func:`narrowed_tiles`), with its per-tile profile (if it has
    one) widened to the IPU's ``tiles``, zero on those it does not use."""
    p = cost.profile
    if p is None or len(p.compute) >= tiles:
        return cost
    wide = TileProfile.padded(tiles, p.compute, p.bytes_in, p.temp)
    if p.copies is not None:
        wide = replace(wide, copies=np.pad(p.copies, (0, tiles - len(p.copies))))
    return replace(cost, profile=wide)


def narrowed(g: Graph, costs: dict[str, OpCost], tiles: int) -> dict[str, int]:
    """The ops of ``g`` priced on fewer than ``tiles`` tiles (:func:`narrowed_tiles`, with the matmuls'
    plans of ``costs``), by name: the tiles each computes on."""
    layouts: dict[str, RowLayout] = {}
    found = {}
    for op in g.ops:
        n = narrowed_tiles(op, g, layouts, tiles)
        if n < tiles and op.name in costs:
            found[op.name] = n
        if op.kind == "matmul" and op.name in costs:
            record_matmul(op, costs[op.name].plan, layouts)
    return found


def notes(g: Graph, costs: dict[str, OpCost], tiles: int) -> list[str]:
    """What the run says of the ops that ran on a slice of a matmul's rows: per IPU, how many (each op
    once), on how few tiles, their cycles and the costliest."""
    found = narrowed(g, costs, tiles)
    by_ipu: dict[int, list[tuple[int, str, int]]] = {}
    for op in g.ops:
        if op.name in found:
            by_ipu.setdefault(op.ipu, []).append((costs[op.name].cycles, op.name, found[op.name]))
    if not by_ipu:
        return []
    def span(ops) -> str:
        fewest, most = min(n for *_, n in ops), max(n for *_, n in ops)
        return f"{fewest:,}" if fewest == most else f"{fewest:,}-{most:,}"
    each = "; ".join(f"IPU {ipu}: {len(ops)} op{'s' * (len(ops) != 1)} on {span(ops)} of {tiles:,} tiles, "
                     f"{sum(c for c, *_ in ops):,} cycles (the costliest {max(ops)[1]!r})"
                     for ipu, ops in sorted(by_ipu.items()))
    return ["ops on a slice of a matmul's rows run on the tiles that hold those rows, not the whole IPU (the "
            "matmul's plan lays its rows out in blocks; sim/compiler/row_layouts.py): " + each +
            ", each of the graph's ops run once"]
