"""Rules for ONNX's data movement: changes of shape only (Reshape, Flatten, Squeeze, Unsqueeze,
Expand: free views), Transpose, Concat, Slice, Split, Gather, ScatterElements, Pad, Tile, Resize,
DepthToSpace and SpaceToDepth, TopK, CumSum, OneHot; and the helpers that read a node's constant int
inputs (shapes, axes). :data:`RULES` holds them by op type."""

from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError
from ._context import OpContext
from ._values import _Value, _axis, _broadcast, _reshape_target, _slice_shape


def _view(ctx: OpContext, shape: tuple[int, ...]):
    """A change of shape only: a free ``reshape`` (the input itself when nothing changes)."""
    if tuple(shape) == ctx.shape(0):
        return ctx.input(0)
    return ctx.op("reshape", [ctx.input(0)], shapes=[shape])


def _const_ints(ctx: OpContext, i: int, what: str) -> list[int]:
    v = ctx.value(i)
    if v is None:
        ctx.unsupported(f"its {what} (input {i}) is computed at run time; the simulator needs static shapes")
    return [int(d) for d in np.asarray(v).reshape(-1)]


def _axes(ctx: OpContext, index: int, since: int) -> list[int] | None:
    """The ``axes`` of a node: an attribute before opset ``since``, input ``index`` after."""
    if ctx.opset < since or ctx.attr("axes") is not None:
        axes = ctx.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    if ctx.has_input(index):
        return _const_ints(ctx, index, "axes")
    return None


def _reshape(ctx: OpContext):
    target = _const_ints(ctx, 1, "target shape")
    try:
        shape = _reshape_target(ctx.shape(0), target, bool(ctx.attr("allowzero", 0)))
    except GraphError as e:
        raise GraphError(f"{ctx.desc}: {e}. If the exporter baked a traced size into the model, give the "
                         "sizes it was exported with (batch_size=, dims=)") from None
    return _view(ctx, shape)


def _flatten(ctx: OpContext):
    s = ctx.shape(0)
    ax = _axis(ctx.attr("axis", 1), len(s), upto_rank=True)
    return _view(ctx, (math.prod(s[:ax]), math.prod(s[ax:])))


def _squeeze(ctx: OpContext):
    s = ctx.shape(0)
    axes = _axes(ctx, 1, 13)
    drop = {i for i, d in enumerate(s) if d == 1} if axes is None else {_axis(a, len(s)) for a in axes}
    return _view(ctx, tuple(d for i, d in enumerate(s) if i not in drop))


def _unsqueeze(ctx: OpContext):
    s = list(ctx.shape(0))
    axes = _axes(ctx, 1, 13) or []
    rank = len(s) + len(axes)
    for a in sorted(_axis(a, rank) for a in axes):
        s.insert(a, 1)
    return _view(ctx, tuple(s))


def _resize(ctx: OpContext):
    """Resize (Upsample) as PopART's ResizeOpx runs it, the output shape from the constant ``sizes``
    (input 3) or ``scales`` (input 2; before opset 11, input 1; Upsample before opset 9, its attribute).
    ``nearest``: a copy of each input element to its outputs, as sim.poptorch prices Upsample's nearest
    mode. ``linear`` (inference only: PopART's ResizeGradOpx refuses it): ``resizeLinear``'s copy of the
    input, then for each resized
    dimension the floor and ceiling neighbours (views) each multiplied by their constant weights along
    that dimension and added. ``cubic`` (PopART's ResizeCubicHelper): sixteen multiply-adds an output
    element, as sim.poptorch prices bicubic upsampling."""
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        ctx.unsupported(f"mode {mode!r}: the nearest, linear and cubic modes have rules")
    xs = ctx.shape(0)
    if ctx.num_inputs > 3 and ctx.has_input(3):
        out = tuple(_const_ints(ctx, 3, "sizes"))
    elif ctx.op_type == "Upsample" and "scales" in ctx._attrs:  # Upsample before opset 9: an attribute
        v = ctx.attr("scales")
        out = tuple(int(np.floor(d * s)) for d, s in zip(xs, np.asarray(v, dtype=float).reshape(-1)))
    else:
        i = 1 if ctx.opset < 11 else 2
        v = ctx.static_value(i)
        if v is None:
            ctx.unsupported("its scales or sizes are computed at run time; the simulator needs static shapes")
        out = tuple(int(np.floor(d * s)) for d, s in zip(xs, np.asarray(v, dtype=float).reshape(-1)))
    if len(out) != len(xs):
        ctx.unsupported(f"output shape {out} does not match the input's rank {len(xs)}")
    if mode == "nearest":  # ResizeOpx: a copy of the input, the output a view of it (resizex.cpp resizeNearest)
        copied = ctx.op("copy", [ctx.input(0)], {"op": "upsample_input"}, shapes=[xs], dtypes=[ctx.dtype(0)],
                        result=False, suffix="copy")
        return ctx.op("reshape", [copied], {"op": "upsample_nearest", "onnx_op": ctx.op_type}, shapes=[out])
    if mode == "cubic":
        return ctx.op("map", [ctx.input(0)], {"steps": ["mul", "add"], "repeat": 16, "grad": [["mul", "add"]],
                                              "onnx_op": ctx.op_type}, shapes=[out])
    dt, cur = ctx.dtype(0), list(xs)
    resized = [d for d in range(len(xs)) if out[d] != xs[d]]
    y = ctx.op("copy", [ctx.input(0)], {"op": "resize_linear"}, shapes=[xs], dtypes=[dt], result=not resized,
               suffix="copy")
    for d in resized:
        cur[d] = out[d]
        weights = ctx.builder.constant(f"{ctx.name}/weights{d}", tuple(out[d] if i == d else 1 for i in range(len(xs))),
                                       dt)
        ceil = ctx.op("mul", [y, weights], shapes=[tuple(cur)], dtypes=[dt], result=False, suffix=f"ceil{d}")
        floor = ctx.op("mul", [y, weights], shapes=[tuple(cur)], dtypes=[dt], result=False, suffix=f"floor{d}")
        last = d == resized[-1]
        y = ctx.op("add", [floor, ceil], shapes=[tuple(cur)], dtypes=[dt], result=last, suffix=f"sum{d}")
    return y


def _depth_space(ctx: OpContext):
    """DepthToSpace (DCR or CRD mode) and SpaceToDepth as PopART's ONNX pass spells them
    (``onnxpasses/nodepatterns/spacedepth.cpp``): a reshape to six dimensions, a transpose, a reshape
    to the output; the transpose is the one layout change."""
    n, c, h, w = ctx.shape(0)
    r, dt = int(ctx.attr("blocksize")), ctx.dtype(0)
    if ctx.op_type == "SpaceToDepth":
        six, perm, out = (n, c, h // r, r, w // r, r), [0, 3, 5, 1, 2, 4], (n, c * r * r, h // r, w // r)
    elif ctx.attr("mode", "DCR") == "CRD":
        six, perm, out = (n, c // (r * r), r, r, h, w), [0, 1, 4, 2, 5, 3], (n, c // (r * r), h * r, w * r)
    else:
        six, perm, out = (n, r, r, c // (r * r), h, w), [0, 3, 4, 1, 5, 2], (n, c // (r * r), h * r, w * r)
    t = ctx.op("reshape", [ctx.input(0)], shapes=[six], dtypes=[dt], result=False, suffix="blocks")
    moved = tuple(six[p] for p in perm)
    t = ctx.op("transpose", [t], {"perm": perm}, shapes=[moved], dtypes=[dt], result=False, suffix="move")
    return ctx.op("reshape", [t], shapes=[out], dtypes=[dt])


def _topk(ctx: OpContext):
    """TopK: popops' bitonic top-k of each row along ``axis`` with its indices (PopART TopKOpx), as
    sim.poptorch prices ``torch.topk``; K must be a constant."""
    xs = ctx.shape(0)
    axis = _axis(ctx.attr("axis", -1), len(xs))
    k = _const_ints(ctx, 1, "K")[0] if ctx.opset >= 10 else int(ctx.attr("k"))
    out = tuple(k if d == axis else s for d, s in enumerate(xs))
    attrs = {"axis": axis, "op": "topk", "k": k, "onnx_op": "TopK"}
    return ctx.op("sort", [ctx.input(0)], attrs, shapes=[out, out], dtypes=[ctx.dtype(0), "int32"])


def _cumsum(ctx: OpContext):
    """CumSum (PopART CumSumOpx, as sim.poptorch prices ``torch.cumsum``): the scanned axis moved last,
    then a matmul of the rows by a constant (n, n) triangular matrix, and moved back; ``exclusive``
    and ``reverse`` change only the constant."""
    xs = ctx.shape(0)
    axis = _axis(_const_ints(ctx, 1, "axis")[0], len(xs))
    dt, n = ctx.dtype(0), xs[axis]
    perm = list(range(len(xs)))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = tuple(xs[p] for p in perm)
    x = ctx.input(0)
    if perm != sorted(perm):
        x = ctx.op("transpose", [x], {"perm": perm}, shapes=[moved], dtypes=[dt], result=False, suffix="to_last")
    rows = math.prod(moved[:-1])
    flat = ctx.op("reshape", [x], shapes=[(rows, n)], dtypes=[dt], result=False, suffix="rows")
    tri = ctx.builder.constant(f"{ctx.name}/triangular", (n, n), dt)
    y = ctx.op("matmul", [flat, tri], shapes=[(rows, n)], dtypes=[dt], result=False, suffix="scan")
    if perm == sorted(perm):
        return ctx.op("reshape", [y], shapes=[xs], dtypes=[dt])
    y = ctx.op("reshape", [y], shapes=[moved], dtypes=[dt], result=False, suffix="unflatten")
    return ctx.op("transpose", [y], {"perm": perm}, shapes=[xs], dtypes=[dt])


def _expand(ctx: OpContext):
    # a broadcast view: free in Poplar until an op reads it (the consumer pays per element)
    return _view(ctx, _broadcast(ctx.shape(0), tuple(_const_ints(ctx, 1, "shape"))))


def _transpose(ctx: OpContext):
    s = ctx.shape(0)
    perm = [int(p) for p in ctx.attr("perm", list(range(len(s)))[::-1])]
    out = tuple(s[p] for p in perm)
    moved = [p for i, p in enumerate(perm) if p != i]
    if all(s[p] == 1 for p in moved):  # only size-1 dims move: a reshape, no data moves
        return _view(ctx, out)
    if ctx.is_weight(0):
        # a weight transposed (torch's Linear on a 3-D input exports Transpose(W) -> MatMul; so does
        # MultiheadAttention's in_proj_weight): PopART inplaces the Transpose into a view (TransposeInplaceOpx:
        # a dimShuffle) and the weight is laid out for its consumer by unwinding through it (TransposeOpx's
        # CanUnwind), as a Gemm's transB; so the weight is stored transposed when this is its one use, as
        # sim.poptorch stores a weight its matmul reads transposed, and a transpose is made once otherwise
        t = ctx._imp.operand(ctx, 0, out, perm=perm)
        stored = ctx.graph.tensors[t].role == "weight"  # the weight itself, not a transpose made of it
        return _Value(out, ctx.dtype(0), sim=t, weight=stored, name=ctx.node.output[0], layout=(None, out))
    return ctx.op("transpose", [ctx.input(0)], {"perm": perm}, shapes=[out])


def _concat(ctx: OpContext):
    rank = len(ctx.shape(0))
    axis = _axis(ctx.attr("axis"), rank)
    live = [i for i in range(ctx.num_inputs) if ctx.has_input(i) and ctx.shape(i)[axis] > 0]
    out = list(ctx.shape(live[0]))
    out[axis] = sum(ctx.shape(i)[axis] for i in live)
    if len(live) == 1:
        return ctx.input(live[0])
    return ctx.op("concat", [ctx.input(i) for i in live], {"axis": axis}, shapes=[tuple(out)])


def _slice(ctx: OpContext):
    s = ctx.shape(0)
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        starts, ends = _const_ints(ctx, 1, "starts"), _const_ints(ctx, 2, "ends")
        axes = _const_ints(ctx, 3, "axes") if ctx.has_input(3) else None
        steps = _const_ints(ctx, 4, "steps") if ctx.has_input(4) else None
    out, parts = _slice_shape(s, starts, ends, axes, steps)
    if out == s and all(st == 1 for *_, st in parts):
        return ctx.input(0)
    if len(parts) == 1 and parts[0][3] == 1:
        a, start, stop, _ = parts[0]
        attrs = {"axis": a, "start": start, "stop": stop}
    else:
        attrs = {"slices": [list(p) for p in parts]}
    return ctx.op("slice", [ctx.input(0)], attrs, shapes=[out])


def _split(ctx: OpContext):
    s = ctx.shape(0)
    axis = _axis(ctx.attr("axis", 0), len(s))
    n = len(ctx.node.output)
    if ctx.attr("split") is not None:
        sizes = [int(v) for v in ctx.attr("split")]
    elif ctx.opset >= 13 and ctx.has_input(1):
        sizes = _const_ints(ctx, 1, "split sizes")
    else:
        n = int(ctx.attr("num_outputs", n))
        size = math.ceil(s[axis] / n)
        sizes = [min(size, s[axis] - i * size) for i in range(n)]
    outs, start = [], 0
    for i, size in enumerate(sizes):
        shape = s[:axis] + (size,) + s[axis + 1:]
        name = ctx.node.output[i] if i < len(ctx.node.output) else ""
        if name:
            outs.append(ctx.op("slice", [ctx.input(0)], {"axis": axis, "start": start, "stop": start + size},
                               shapes=[shape], outputs=[i]))
        else:
            outs.append(None)
        start += size
    return outs


def stored(ctx: OpContext, i: int) -> bool:
    """Whether input ``i`` is held on the device rather than computed: an initializer, a constant or a weight (a
    lookup table that popops' multiSlice plans)."""
    table = ctx._ins[i]
    return table.init is not None or table.const is not None or (
        table.sim is not None and ctx.graph.tensors[table.sim].role in ("weight", "constant"))


def _gather(ctx: OpContext):
    ds, ids = ctx.shape(0), ctx.shape(1)
    axis = _axis(ctx.attr("axis", 0), len(ds))
    out = ds[:axis] + ids + ds[axis + 1:]
    if axis == 0 and stored(ctx, 0):
        # a lookup in an initializer (or constant): an embedding (multiSlice); a float table is a weight
        return ctx.op("gather", [ctx.input(1), ctx.input(0)], shapes=[out], dtypes=[ctx.dtype(0)])
    idx = ctx.value(1)
    if idx is not None:  # constant indices into a computed tensor
        flat = np.asarray(idx).reshape(-1) % ds[axis]
        if flat.size and np.all(np.diff(flat) == 1):  # one index or a contiguous range: a view
            sliced = ds[:axis] + (int(flat.size),) + ds[axis + 1:]
            attrs = {"axis": axis, "start": int(flat[0]), "stop": int(flat[-1]) + 1}
            if sliced == out:
                return ctx.op("slice", [ctx.input(0)], attrs, shapes=[out])
            y = ctx.op("slice", [ctx.input(0)], attrs, shapes=[sliced], result=False)
            return ctx.op("reshape", [y], shapes=[out])
        return ctx.op("copy", [ctx.input(0)], {"onnx_op": "Gather", "axis": axis}, shapes=[out])
    # computed indices into a computed tensor: data movement, priced as a copy of the result
    return ctx.op("copy", [ctx.input(0), ctx.input(1)], {"onnx_op": "Gather", "axis": axis}, shapes=[out],
                  dtypes=[ctx.dtype(0)])


def _pad(ctx: OpContext):
    """Pad (constant, reflect, edge): popops::pad, a concatenation of views of the input and constants
    (``popops/Padder.cpp``), so a view; the pads from the ``pads`` input (an attribute before opset 11)."""
    xs = ctx.shape(0)
    pads = [int(p) for p in ctx.attr("pads")] if ctx.opset < 11 else _const_ints(ctx, 1, "pads")
    axes = list(range(len(xs)))
    if ctx.opset >= 18 and ctx.has_input(3):
        axes = [_axis(a, len(xs)) for a in _const_ints(ctx, 3, "axes")]
    out = list(xs)
    for j, a in enumerate(axes):
        out[a] += pads[j] + pads[j + len(axes)]
    if min(out) <= 0:
        ctx.unsupported(f"pads {pads} leave an empty output {tuple(out)}")
    return ctx.op("pad", [ctx.input(0)], {"mode": ctx.attr("mode", "constant")}, shapes=[tuple(out)])


def _tile(ctx: OpContext):
    """Tile: PopART's TileOpx, copies of the input written into the larger output (a copy of the
    output's elements, as sim.poptorch prices Tensor.repeat)."""
    reps = _const_ints(ctx, 1, "repeats")
    out = tuple(d * r for d, r in zip(ctx.shape(0), reps))
    return ctx.op("copy", [ctx.input(0)], {"onnx_op": "Tile"}, shapes=[out])


def _elements(ctx: OpContext):
    """ScatterElements (Scatter before opset 11): popops multiUpdate of single elements, as sim.poptorch prices
    the scatter family (GatherElements PopART has no op for: sim/onnx/_ops_not_in_popart.py)."""
    axis = _axis(ctx.attr("axis", 0), len(ctx.shape(0)))
    reduce = ctx.attr("reduction", "none")
    return ctx.op("scatter_elements", [ctx.input(1), ctx.input(0), ctx.input(2)],
                  {"axis": axis, "reduce": "sum" if reduce == "add" else reduce}, shapes=[ctx.shape(0)],
                  dtypes=[ctx.dtype(0)])


def _one_hot(ctx: OpContext):
    """OneHot (PopART's OnehotOpx: popops encodeOneHot): each index compared with every class."""
    xs = ctx.shape(0)
    depth = int(_const_ints(ctx, 1, "depth")[0])
    axis = _axis(ctx.attr("axis", -1), len(xs) + 1)
    out = xs[:axis] + (depth,) + xs[axis:]
    return ctx.op("map", [ctx.input(0)], {"steps": ["compare"], "grad": [None], "onnx_op": "OneHot"}, shapes=[out],
                  dtypes=[ctx.dtype(2)])


RULES: dict = {
    "Gather": _gather, "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze, "Expand": _expand, "Transpose": _transpose, "Concat": _concat,
    "Slice": _slice, "Split": _split, "Resize": _resize, "Upsample": _resize,
    "DepthToSpace": _depth_space, "SpaceToDepth": _depth_space, "TopK": _topk, "CumSum": _cumsum,
    # more of PopART's ops
    "Pad": _pad, "Tile": _tile,
    "ScatterElements": _elements, "Scatter": _elements, "OneHot": _one_hot,
}
