"""Op rules: creating, indexing, scattering, padding and rearranging tensors.

Constants (``fill``) fold into graph constants, as PopART folds them. ``gather`` and
``take_along_dim`` are element-wise gathers and the ``scatter`` family element-wise scatters
(ONNX GatherElements / ScatterElements: popops multiSlice / multiUpdate of single elements), but
where PopTorch vectorises them (``index_put`` by one index vector, ``scatter_add`` of an expanded
index vector): whole slices (a ``scatter_elements`` with ``slices``); ``bincount`` scatters ones. Padding and ``roll``, ``meshgrid``, ``cartesian_prod`` are views
(popops::pad concatenates views of the input and constants, ``popops/Padder.cpp``).
``tensordot``, ``einsum`` and ``cdist`` are the matmul and element-wise ops they are made of;
``pixel_shuffle`` a transpose between two reshapes (PopART's DepthToSpace); ``F.unfold`` and
``Tensor.unfold`` views of their windows, ``F.fold`` a scatter-add (PopTorch's im2col and col2im).
"""

from __future__ import annotations

import math

import torch

from ._emit import const, emit, emit_map, fold, is_tensor, operand, tensor_args
from ._values import Lazy


def _fill(ctx):
    return fold(ctx)


def _bincount(ctx):
    """Counts of each value: ones scattered (added) into a zeroed table of the output's size."""
    idx, weights = ctx.sarg(0, "input"), ctx.sarg(1, "weights")
    out = ctx.output
    n = ctx.args[0].numel()
    src = ctx.t(weights) if is_tensor(weights) else const(ctx, (n,), out.dtype, "ones")
    return ctx.op("scatter_elements", [idx, const(ctx, out.shape, out.dtype, "zeros"), src], {"reduce": "sum"})


def _bucketize(ctx):
    """The bucket of each element: one comparison (and count) per boundary, fused."""
    x, b = ctx.sarg(0, "input"), ctx.sarg(1, "boundaries")
    rb = ctx.arg(1, "boundaries")
    inputs = [x] + ([b] if is_tensor(b) else [])
    return emit_map(ctx, ["compare", "add"], inputs, [None] * len(inputs), repeat=max(1, rb.numel()))


def _gather(ctx):
    """gather(input, dim, index) / take_along_dim(input, indices, dim) as PopTorch's gatherHandler lowers them
    (TensorOps.cpp; takeAlongDimHandler calls it): the gathered axis moved innermost and the input flattened
    (views), each index plus its row's offset in the flattened input (a constant; one int32 add the index's size),
    then PopART's Gather of single elements from the flattened input (``gather_elements``)."""
    if ctx.key == "take_along_dim":
        x, idx = ctx.sarg(0, "input"), ctx.sarg(1, "indices")
        dim = ctx.arg(2, "dim")
        if dim is None:  # over the flattened input
            x = emit(ctx, "reshape", [x], (ctx.args[0].numel(),), ctx.args[0].dtype, name="flatten")
            dim = 0
    else:
        x, idx, dim = ctx.sarg(0, "input"), ctx.sarg(2, "index"), ctx.arg(1, "dim")
    index = ctx.cap.g.tensors[ctx.t(idx)]
    axis = int(dim) % max(len(index.shape), 1)
    offsets = const(ctx, tuple(1 if i == axis else d for i, d in enumerate(index.shape)) or (1,), index.dtype,
                    "row_offsets")
    flat = emit(ctx, "add", [idx, offsets], index.shape, index.dtype, name="plus_row_offsets")
    return ctx.op("gather_elements", [flat, x], {"axis": int(dim)})


def _index_select(ctx):
    """index_select(input, dim, index): whole slices looked up (popops multiSlice)."""
    return ctx.op("gather", [ctx.sarg(2, "index"), ctx.sarg(0, "input")], {"axis": int(ctx.arg(1, "dim"))})


def _index(ctx):
    """ATen's index (``x[:, idx]`` under torch.export): a lookup by the index tensor."""
    x = ctx.sarg(0, "self")
    leading = leading_index(ctx, x, ctx.args[1], ctx.sym_args[1])
    if leading is not None:
        return leading
    idx = [s for s in tensor_args(ctx) if s is not x]
    return ctx.op("gather", [idx[0], x], {"op": "index"})


def leading_index(ctx, x, reals, syms):
    """``x[i0, i1, ...]`` with two or more index tensors on the leading dims (CLIP's
    ``x[arange(B), text.argmax(-1)]``), as PopTorch's index handler lowers it: one flat index
    (``i0 * n1 + i1``, the index tensors broadcast) into ``x`` viewed with those dims as one, then
    one lookup of its broadcast shape; None for any other index."""
    reals, syms = list(reals), list(syms)
    while reals and (reals[-1] is None or reals[-1] == slice(None) or reals[-1] is Ellipsis):
        reals.pop()
        syms.pop()
    if len(reals) < 2 or not all(isinstance(r, torch.Tensor) for r in reals):
        return None
    shape = tuple(ctx.args[0].shape)
    k = len(reals)
    if k > len(shape):
        return None
    steps = ["mul", "add"] * (k - 1)
    flat_index = emit_map(ctx, steps, syms, shape=torch.broadcast_shapes(*(r.shape for r in reals)),
                          dtype=torch.int32, name="flat_index")
    flat = emit(ctx, "reshape", [x], (math.prod(shape[:k]),) + shape[k:], ctx.args[0].dtype, name="index_rows")
    return ctx.op("gather", [flat_index, flat], {"op": "index"}, name="index")


def _scatter(ctx):
    """scatter / scatter_add / scatter_reduce / index_reduce: element by element into a copy of
    the input (``src`` may be a number); a scatter_add or scatter_reduce whose index is an expanded
    vector, and an index_reduce (its index is always a vector), update whole slices
    (:func:`_expanded_index`); scatter_reduce and index_reduce as PopTorch lowers their reductions
    (:func:`_scatter_reduce`)."""
    x = ctx.sarg(0, "input")
    index_reduce = ctx.key.startswith("index_reduce")
    if index_reduce:
        dim, idx, src, rsrc = ctx.arg(1, "dim"), ctx.sarg(2, "index"), ctx.sarg(3, "source"), ctx.arg(3, "source")
        reduce = ctx.arg(4, "reduce")
    else:
        dim, idx = ctx.arg(1, "dim"), ctx.sarg(2, "index")
        src = ctx.sarg(3, "src") if "value" not in ctx.kwargs else ctx.sym_kwargs["value"]
        rsrc = ctx.arg(3, "src") if "value" not in ctx.kwargs else ctx.kwargs["value"]
        reduce = ctx.arg(4, "reduce", "add" if "add" in ctx.key else None)
    out = ctx.output
    s = operand(ctx, src, rsrc, out.dtype, "src")
    attrs = {"axis": int(dim), "reduce": str(reduce)}
    vector = _expanded_index(ctx, int(dim) % out.dim(), rsrc)
    if vector is not None:  # the vector itself is the index: the expansion is never made
        idx = emit(ctx, "reshape", [vector], (ctx.shape(vector)[int(dim) % out.dim()],), "int32", name="index_vector")
        attrs["slices"] = True
    elif index_reduce:  # PopTorch's indexReduceHandler always enables index broadcast (OtherOps.cpp)
        attrs["slices"] = True
    if index_reduce or ctx.key.rstrip("_") == "scatter_reduce":
        include_self = bool(ctx.arg(5, "include_self", True))
        return _scatter_reduce(ctx, idx, x, s, tuple(rsrc.shape), attrs, include_self)
    return ctx.op("scatter_elements", [idx, x, s], attrs)


def _scatter_reduce(ctx, idx: str, x: str, src: str, src_shape: tuple, attrs: dict, include_self: bool) -> str:
    """scatter_reduce / index_reduce as PopTorch's ``scatterReduce`` lowers them
    (popart_canonicalization/OtherOps.cpp), each step a PopART ScatterReduce (``scatter_elements``):

    * ``mean`` (``meanScatterReduceHandler``): the counts, ones of ``src``'s shape summed into ones of
      the output's shape, and the sum of ``src`` into the input, then a divide; without
      ``include_self`` the ones and the input are first masked, zeros of ``src``'s shape written
      (reduction none) where the index points;
    * any other reduction without ``include_self``: the reduction's initial value (a constant of
      ``src``'s shape: 0, 1, -inf or +inf) written (reduction none) into the input where the index
      points, then the reduction into that.

    ``src_shape`` is in elements; returns the result's graph tensor."""
    out = ctx.output

    def scatter(values: str, into: str, reduce: str, name: str) -> str:
        return emit(ctx, "scatter_elements", [idx, into, values], tuple(out.shape), out.dtype,
                    dict(attrs, reduce=reduce), name=name)

    if attrs["reduce"] == "mean":
        ones_self = const(ctx, tuple(out.shape), out.dtype, "ones_self")
        ones_src = const(ctx, src_shape, out.dtype, "ones_src")
        if include_self:
            count = scatter(ones_src, ones_self, "sum", "count")
        else:
            zeros_src = const(ctx, src_shape, out.dtype, "zeros_src")
            count = scatter(ones_src, scatter(zeros_src, ones_self, "none", "count_mask"), "sum", "count")
            x = scatter(zeros_src, x, "none", "masked_self")
        return ctx.op("div", [scatter(src, x, "sum", "sum"), count])
    if not include_self:
        x = scatter(const(ctx, src_shape, out.dtype, "init"), x, "none", "masked_self")
    return ctx.op("scatter_elements", [idx, x, src], attrs)


def _expanded_index(ctx, dim: int, src):
    """The index vector of a scatter_add / scatter_reduce whose index is an ``expand`` of it, which
    PopTorch scatters slice by slice: its ``removeScatterAddIndexExpansion``
    (poptorch/source/GNNOptimizations.cpp) drops an index expansion used only by the scatter and shaped
    like ``src`` and enables index broadcast, and PopART's ScatterReduce then updates whole slices when
    the vector's only dimension longer than one is the scatter's (popart willow/src/op/scatterreduce.cpp
    ``checkIndexBroadcasted``; other shapes are its "partial broadcasting" error). torch_scatter's
    ``scatter_sum`` (TGN's message aggregation) expands its index so. None for any other index."""
    if ctx.key.rstrip("_") not in ("scatter_add", "scatter_reduce"):
        return None
    node = ctx.node.kwargs.get("index", ctx.node.args[2] if len(ctx.node.args) > 2 else None)
    if not isinstance(node, torch.fx.Node) or len(node.users) != 1 or not isinstance(src, torch.Tensor):
        return None
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name.split(".")[0] not in ("expand", "expand_as") or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    vector = ctx.cap.sym.get(node.args[0])
    index = ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("index")
    if not is_tensor(vector) or not isinstance(index, torch.Tensor) or tuple(index.shape) != tuple(src.shape):
        return None
    shape = ctx.shape(vector)
    shape = (1,) * (len(src.shape) - len(shape)) + tuple(shape)
    return vector if [d for d, n in enumerate(shape) if n != 1] == [dim] else None


def _vector_dim(indices) -> int | None:
    """PopTorch's ``canVectorizeInDim`` (popart_canonicalization/IndexOps.cpp): the one dimension indexed
    by a 1-D integer tensor of more than one element, every other dimension left whole; else None."""
    dim = None
    for d, index in enumerate(indices):
        if index is None:
            continue
        if dim is not None or not isinstance(index, torch.Tensor):
            return None
        if index.dtype == torch.bool or index.is_floating_point() or index.is_complex():
            return None
        if index.dim() != 1 or index.numel() == 1:
            return None
        dim = d
    return dim


def _index_put(ctx):
    """index_put / index_put_ (``x[idx] = v``; ``accumulate`` for ``x[idx] += v``) as PopTorch's
    ``indexPutHandler`` lowers it (popart_canonicalization/IndexOps.cpp): with one 1-D integer index on
    one dimension (``canVectorizeInDim``), PopART's ScatterReduce with index broadcast, which
    ``multiUpdate``s whole slices of that dimension (popart popx/op/scatterreduceutilx.cpp
    ``prepMultiUpdateTensors``; lower-rank values expanded first); otherwise ONNX ScatterElements,
    the values written into a copy of the input element by element, as many elements as the indexed
    positions cover (the index tensors' broadcast shape times the dimensions they leave whole);
    with a boolean mask, a select over the input (masked_fill)."""
    x, rx = ctx.sarg(0, "self"), ctx.args[0]
    indices, syms = list(ctx.arg(1, "indices")), list(ctx.sarg(1, "indices"))
    if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
        return emit_map(ctx, ["select"], [x], [["select"]])
    accumulate = bool(ctx.arg(3, "accumulate", False))
    attrs = {"axis": 0, "reduce": "sum" if accumulate else "none"}
    d = _vector_dim(indices)
    if d is not None:
        shape = tuple(rx.shape[:d]) + (indices[d].numel(),) + tuple(rx.shape[d + 1:])
        values = _expanded_values(ctx, ctx.sarg(2, "values"), ctx.arg(2, "values"), shape)
        index = syms[d] if is_tensor(syms[d]) else const(ctx, (shape[d],), "int32", "index")
        return ctx.op("scatter_elements", [index, x, values], dict(attrs, axis=d, slices=True))
    shape = torch.broadcast_shapes(*[i.shape for i in indices if isinstance(i, torch.Tensor)])
    whole = [rx.shape[dd] for dd in range(rx.dim()) if dd >= len(indices) or indices[dd] is None]
    n = max(1, math.prod(shape) * math.prod(whole))
    values = operand(ctx, ctx.sarg(2, "values"), ctx.arg(2, "values"), ctx.output.dtype, "values")
    return ctx.op("scatter_elements", [const(ctx, (n,), "int32", "index"), x, values], attrs)


def _expanded_values(ctx, sym, real, shape: tuple):
    """The values of a vectorised index_put as the ``shape`` of the slices written: PopTorch expands
    values of a lower rank (an Expand, a copy on the device; of a constant, a constant)."""
    dtype = ctx.output.dtype
    if not isinstance(real, torch.Tensor) or not is_tensor(sym):
        return const(ctx, shape, dtype, "values")
    if real.dim() >= len(shape):
        return sym
    if isinstance(sym, Lazy) and sym.role != "weight":  # a constant expanded: folded
        return const(ctx, shape, dtype, "values")
    return emit(ctx, "copy", [sym], shape, real.dtype, name="expand_values")


def _index_fill(ctx):
    """index_fill: a select between the value and the input on the chosen slices."""
    return emit_map(ctx, ["select"], [ctx.sarg(0, "input")], [["select"]])


def _roll(ctx):
    """roll: the two slices of each rolled dim concatenated the other way round (views)."""
    return ctx.op("concat", [ctx.sarg(0, "input")], {"axis": 0, "op": "roll"})


def _one_hot(ctx):
    """one_hot: each index compared with every class (popops encodeOneHot); the number of classes must be
    given, as PopTorch's onehotHandler requires (EmbeddingOps.cpp), not found from the values."""
    if int(ctx.arg(1, "num_classes", -1)) == -1:
        ctx.unsupported("OneHot num classes must be specified and must be constant (PopTorch's onehotHandler): "
                        "give num_classes")
    return emit_map(ctx, ["compare"], [ctx.sarg(0, "input")], [None])


def _pad(ctx):
    """Constant, reflection and replication padding: a view (popops::pad concatenates the
    input with constants or with slices of itself)."""
    x = ctx.sarg(0, "input")
    mode = ctx.arg(2, "mode", "constant") if ctx.key == "pad" else ctx.key
    return ctx.op("pad", [x], {"mode": str(mode)})


def _views(ctx):
    """meshgrid / cartesian_prod / broadcast views: each output a view of the inputs."""
    ins = [ctx.t(s) for s in tensor_args(ctx)]
    if isinstance(ctx.output, (tuple, list)):
        return tuple(ctx.op("reshape", [s], output=o, name="view") for s, o in zip(ins, ctx.output))
    return ctx.op("concat", ins, {"axis": -1, "op": ctx.key})


def _cross(ctx):
    """cross product along a dim of 3: two multiplies and a subtract per element, fused."""
    a, b = ctx.sarg(0, "input"), ctx.sarg(1, "other")
    grad = ["mul", "mul", "sub"]
    return emit_map(ctx, ["mul", "mul", "sub"], [a, b], [grad, grad])


def _tensordot(ctx):
    """tensordot: both operands rearranged to 2-D (contracted dims last / first) and one matmul."""
    a, b = ctx.sarg(0, "a"), ctx.sarg(1, "b")
    ra, rb = ctx.args[0], ctx.args[1]
    dims = ctx.arg(2, "dims", 2)
    if ctx.aten:  # aten.tensordot(self, other, dims_self, dims_other)
        dims = (ctx.arg(2), ctx.arg(3))
    if isinstance(dims, int):
        da, db = list(range(ra.dim() - dims, ra.dim())), list(range(dims))
    else:
        da, db = [int(d) % ra.dim() for d in dims[0]], [int(d) % rb.dim() for d in dims[1]]
    dt = ctx.output.dtype
    keep_a = [i for i in range(ra.dim()) if i not in da]
    keep_b = [i for i in range(rb.dim()) if i not in db]
    K = math.prod(ra.shape[i] for i in da)
    M, N = math.prod(ra.shape[i] for i in keep_a), math.prod(rb.shape[i] for i in keep_b)
    ta = _arranged(ctx, a, keep_a + da, (M, K), "a")
    tb = _arranged(ctx, b, db + keep_b, (K, N), "b")
    y = emit(ctx, "matmul", [ta, tb], (M, N), dt, name="matmul")
    return ctx.op("reshape", [y])


def _einsum(ctx):
    """einsum as it reaches PopTorch's dispatcher, torch's composite (``aten/src/ATen/native/Linear.cpp``; PopTorch
    does not intercept aten::einsum, so its ``EinsumOp.cpp`` does not run): labels summed in one operand only are
    reduced first, then the operands are multiplied left to right, each pair as one batched matmul of the
    permuted, flattened operands (batch labels, kept labels, contracted labels), or a broadcast multiply when
    the pair contracts nothing, and the result permuted to the output's order."""
    eq = str(ctx.arg(0, "equation")).replace(" ", "")
    operands = ctx.sym_args[1] if len(ctx.sym_args) == 2 and isinstance(ctx.sym_args[1], (list, tuple)) \
        else ctx.sym_args[1:]
    reals = ctx.args[1] if len(ctx.args) == 2 and isinstance(ctx.args[1], (list, tuple)) else ctx.args[1:]
    lhs, arrow, rhs = eq.partition("->")
    labels = lhs.split(",")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    widest = max((real.dim() - len(lab) + 3 for lab, real in zip(labels, reals) if "..." in lab), default=0)
    dots = "".join(spare[:widest])  # the ellipsis's dimensions, aligned from the right as torch does
    labels = [lab.replace("...", dots[widest - (real.dim() - len(lab) + 3):]) for lab, real in zip(labels, reals)]
    if not arrow:  # implicit output: the ellipsis, then the labels seen once in alphabetical order
        rhs = dots + "".join(sorted(c for c in set("".join(labels)) - set(dots) if "".join(labels).count(c) == 1))
    rhs = rhs.replace("...", dots)
    if any(len(set(lab)) != len(lab) for lab in labels + [rhs]):
        ctx.unsupported("einsum with a repeated label in one operand (a diagonal or a trace)")
    size = {}
    for lab, real in zip(labels, reals):
        for c, d in zip(lab, real.shape):
            if size.setdefault(c, d) != d:
                ctx.unsupported(f"einsum label {c!r} broadcast between sizes {size[c]} and {d}")
    dt = ctx.output.dtype
    terms = []
    for i, (lab, sym) in enumerate(zip(labels, operands)):
        elsewhere = set(rhs).union(*(set(x) for j, x in enumerate(labels) if j != i))
        alone = [k for k, c in enumerate(lab) if c not in elsewhere]
        t = ctx.t(sym)
        if alone:
            lab_kept = "".join(c for c in lab if c in elsewhere)
            t = emit(ctx, "reduce_sum", [t], tuple(size[c] for c in lab_kept) or (1,), dt,
                     {"axes": alone, "keepdims": False}, f"sum_{i}")
            lab = lab_kept
        terms.append((t, lab))
    t, lab = terms[0]
    for i, (u, ulab) in enumerate(terms[1:], start=1):
        later = set(rhs).union(*(set(x) for _, x in terms[i + 1:]))
        batch = [c for c in lab if c in ulab and c in later]
        summed = [c for c in lab if c in ulab and c not in later]
        left = [c for c in lab if c not in ulab]
        right = [c for c in ulab if c not in lab]
        nb, nl, nk, nr = (math.prod(size[c] for c in g) for g in (batch, left, summed, right))
        a = _arranged(ctx, t, [lab.index(c) for c in batch + left + summed], (nb, nl, nk), f"a{i}")
        b = _arranged(ctx, u, [ulab.index(c) for c in batch + summed + right], (nb, nk, nr), f"b{i}")
        lab = "".join(batch + left + right)
        # nothing contracted (an outer product): torch's sumproduct_pair multiplies the broadcast operands
        kind = "matmul" if summed else "mul"
        y = emit(ctx, kind, [a, b], (nb, nl, nr), dt, name=f"{kind}{i}")
        t = emit(ctx, "reshape", [y], tuple(size[c] for c in lab) or (1,), dt, name=f"product{i}")
    if lab != rhs:
        return ctx.op("transpose", [t], {"perm": [lab.index(c) for c in rhs]})
    return ctx.op("reshape", [t])


def _arranged(ctx, s, perm, shape, label):
    """Graph value ``s`` with its dimensions permuted by ``perm`` and flattened to ``shape``."""
    t = ctx.t(s)
    src = ctx.cap.g.tensors[t]
    if perm != list(range(len(src.shape))):
        t = emit(ctx, "transpose", [t], tuple(src.shape[p] for p in perm), src.dtype, {"perm": perm}, f"{label}_t")
    return emit(ctx, "reshape", [t], shape, src.dtype, name=f"{label}_{len(shape)}d")


def _cdist(ctx):
    """cdist(x1, x2, p): every pair's difference, |.|^p summed over the features, the p-th root
    (p = 2: square, sum, square root)."""
    a, b = ctx.sarg(0, "x1"), ctx.sarg(1, "x2")
    ra, rb = ctx.args[0], ctx.args[1]
    p = float(ctx.arg(2, "p", 2.0))
    batch = tuple(torch.broadcast_shapes(ra.shape[:-2], rb.shape[:-2]))
    P, R, M = ra.shape[-2], rb.shape[-2], ra.shape[-1]
    dt = ctx.output.dtype
    va = emit(ctx, "reshape", [a], tuple(ra.shape[:-2]) + (P, 1, M), dt, name="rows")
    vb = emit(ctx, "reshape", [b], tuple(rb.shape[:-2]) + (1, R, M), dt, name="columns")
    d = emit(ctx, "sub", [va, vb], batch + (P, R, M), dt, name="difference")
    if p == 2:
        sq = emit(ctx, "mul", [d, d], batch + (P, R, M), dt, name="square")
        s = emit(ctx, "reduce_sum", [sq], batch + (P, R), dt, {"axes": [len(batch) + 2], "keepdims": False}, "sum")
        return ctx.op("sqrt", [s])
    ab = emit(ctx, "abs", [d], batch + (P, R, M), dt, name="abs")
    if p == 1:
        return ctx.op("reduce_sum", [ab], {"axes": [len(batch) + 2], "keepdims": False})
    pw = emit(ctx, "pow", [ab, const(ctx, (1,), dt, "p")], batch + (P, R, M), dt, name="pow")
    s = emit(ctx, "reduce_sum", [pw], batch + (P, R), dt, {"axes": [len(batch) + 2], "keepdims": False}, "sum")
    return ctx.op("pow", [s, const(ctx, (1,), dt, "inverse_p")])


def _flip(ctx):
    """flip: PopART's Reverse, a reversed view of the input copied out (``reversex.cpp``)."""
    return ctx.op("copy", [ctx.sarg(0, "input")], name="reverse")


def _pixel_shuffle(ctx):
    """pixel_shuffle(x, r): PopTorch's DepthToSpace in CRD mode (``pixelShuffleHandler``), which
    PopART's ONNX pass (``onnxpasses/nodepatterns/spacedepth.cpp``) spells as a reshape to
    (B, C/r², r, r, H, W), a transpose to (B, C/r², H, r, W, r) and a reshape to the output: one layout
    change through the exchange. Leading dimensions fold into B."""
    rx, r = ctx.args[0], int(ctx.arg(1, "upscale_factor"))
    *lead, C, H, W = rx.shape
    B, c = math.prod(lead), C // (r * r)
    t = emit(ctx, "reshape", [ctx.sarg(0, "input")], (B, c, r, r, H, W), rx.dtype, name="blocks")
    t = emit(ctx, "transpose", [t], (B, c, H, r, W, r), rx.dtype, {"perm": [0, 1, 4, 2, 5, 3]}, "depth_to_space")
    return ctx.op("reshape", [t])


def _outer(ctx):
    """outer(a, b) (``ger``): torch's composite, a (n, 1) view of a times a (1, m) view of b."""
    a, b = ctx.sarg(0, "input"), ctx.sarg(1, "vec2")
    ra, rb = ctx.args[0], ctx.args[1]
    column = emit(ctx, "reshape", [a], (ra.shape[0], 1), ra.dtype, name="column")
    row = emit(ctx, "reshape", [b], (1, rb.shape[0]), rb.dtype, name="row")
    return ctx.op("mul", [column, row])


def _diff(ctx):
    """diff(x, n, dim, prepend, append): torch's composite, ``n`` times the difference of the slices
    [1:] and [:-1] along ``dim`` (after concatenating ``prepend`` and ``append``)."""
    x, rx = ctx.sarg(0, "input"), ctx.args[0]
    n, dim = int(ctx.arg(1, "n", 1)), int(ctx.arg(2, "dim", -1)) % rx.dim()
    shape = list(rx.shape)
    ends = [(ctx.sarg(k, key), ctx.arg(k, key)) for k, key in ((3, "prepend"), (4, "append"))]
    if any(r is not None for _, r in ends):
        (before, prepend), (after, append) = ends
        parts = ([before] if prepend is not None else []) + [x] + ([after] if append is not None else [])
        shape[dim] += sum(r.shape[dim] for _, r in ends if r is not None)
        x = emit(ctx, "concat", parts, shape, rx.dtype, {"axis": dim, "op": "diff"}, name="joined")
    for k in range(n):
        shape[dim] -= 1
        later = emit(ctx, "slice", [x], shape, rx.dtype, {"axis": dim, "start": 1, "stop": shape[dim] + 1}, "later")
        earlier = emit(ctx, "slice", [x], shape, rx.dtype, {"axis": dim, "start": 0, "stop": shape[dim]}, "earlier")
        x = emit(ctx, "sub", [later, earlier], shape, rx.dtype, name="diff") if k < n - 1 else \
            ctx.op("sub", [later, earlier])
    return x


def _channel_shuffle(ctx):
    """channel_shuffle(x, groups): torch's composite, a reshape to (N, g, C/g, ...), a transpose of the
    two channel axes (one layout change through the exchange) and a reshape back."""
    rx = ctx.args[0]
    g = int(ctx.module.groups if ctx.module is not None else ctx.arg(1, "groups"))
    n, c, *rest = rx.shape
    t = emit(ctx, "reshape", [ctx.sarg(0, "input")], (n, g, c // g, *rest), rx.dtype, name="groups")
    perm = [0, 2, 1] + list(range(3, 3 + len(rest)))
    t = emit(ctx, "transpose", [t], (n, c // g, g, *rest), rx.dtype, {"perm": perm}, "shuffle")
    return ctx.op("reshape", [t])


def _complex(ctx):
    """Complex tensors: the IPU has no complex types and PopTorch none either."""
    ctx.unsupported("the IPU has no complex types (PopTorch supports none): write the complex product with real "
                    "tensors, as (a*c - b*d, a*d + b*c) on the halves or interleaved pairs (a rotary embedding's "
                    "rotation: x * cos + rotate_half(x) * sin)")


def _pixel_unshuffle(ctx):
    """PopTorch has no handler for ``aten::pixel_unshuffle`` (its canonicalisation registers
    pixel_shuffle only), so the model would not compile there."""
    ctx.unsupported("PopTorch has no handler for pixel_unshuffle (it registers pixel_shuffle only); write it "
                    "as x.reshape(B, C, H // r, r, W // r, r).permute(0, 1, 3, 5, 2, 4).reshape(B, C * r * r, "
                    "H // r, W // r)")


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, (int, float)) else (int(v[0]), int(v[1]))


def _windows(ctx, x, out, label: str):
    """``out``, the windows of ``x`` side by side: the slices PopTorch concatenates (views, read by the
    consumer). The gradient sums each window's output gradient back into ``x`` (:mod:`sim.graph.training`)."""
    ctx.cap.notes.append(f"{ctx.desc}: the windows are views; in training their gradient is priced as a "
                         "scatter-add of the output gradient into the input (PopTorch's col2im form), where "
                         "PopART sums one zero-padded gradient per slice it cut")
    return ctx.op("concat", [x], {"axis": -1, "op": label}, output=out)


def _unfold(ctx):
    """F.unfold (``aten::im2col``) as PopTorch's ``im2colHandler`` lowers it: the input zero-padded (its
    width also up to a whole number of strides), then slices of the flattened padded image concatenated
    into (N, C k_h k_w, L); Tensor.unfold (sliding windows along one dimension) as poprithms' Unfolder
    lowers it, slices concatenated. Views either way."""
    if ctx.key == "unfold" and (ctx.aten or (ctx.node is not None and ctx.node.op == "call_method")):
        return _windows(ctx, ctx.sarg(0, "input"), ctx.output, "unfold")
    rx = ctx.args[0]
    if rx.dim() != 4:
        ctx.unsupported(f"a {rx.dim()}-D input: PopTorch's im2col takes (N, C, H, W) only")
    (ph, pw), sw = _pair(ctx.arg(3, "padding", 0)), _pair(ctx.arg(4, "stride", 1))[1]
    n, c, h, w = rx.shape
    width = w + 2 * pw
    padded = emit(ctx, "pad", [ctx.sarg(0, "input")], (n, c, h + 2 * ph, width + (-width) % sw), rx.dtype,
                  {"mode": "constant"}, "pad")
    return _windows(ctx, padded, ctx.output, "im2col")


def _fold(ctx):
    """F.fold (``aten::col2im``) as PopTorch's ``col2imHandler`` lowers it: the columns (N, C k_h k_w, L)
    viewed as (N, C, k_h k_w L) and scatter-added (PopART ScatterReduce, sum) into (N, C, H W) at the
    positions they came from, then viewed as (N, C, H, W)."""
    rx, out = ctx.args[0], ctx.output
    n, c = out.shape[-4] if out.dim() == 4 else 1, out.shape[-3]
    columns = (n, c, rx.numel() // (n * c))
    cols = emit(ctx, "reshape", [ctx.sarg(0, "input")], columns, rx.dtype, name="columns")
    idx = const(ctx, columns, "int32", "positions")
    zeros = const(ctx, (n, c, out.shape[-2] * out.shape[-1]), out.dtype, "zeros")
    summed = emit(ctx, "scatter_elements", [idx, zeros, cols], (n, c, out.shape[-2] * out.shape[-1]), out.dtype,
                  {"axis": 2, "reduce": "sum"}, "scatter_add")
    return ctx.op("reshape", [summed])


def _triangle(ctx):
    """tril / triu of a computed tensor: refused as PopTorch refuses it (``TensorOps.cpp``
    ``triuHandler``); of constants they fold before reaching a rule."""
    ctx.unsupported(f"torch.{ctx.key.rstrip('_')} is only supported within constant expressions, for "
                    "example torch.ones(3, 3).triu_() (PopTorch); build the mask from constants")


RULES = {
    "tril": _triangle, "triu": _triangle, "pixel_shuffle": _pixel_shuffle, "pixel_unshuffle": _pixel_unshuffle,
    "unfold": _unfold, "im2col": _unfold, "fold": _fold, "col2im": _fold,
    "fill": _fill, "fill_": _fill, "zero": _fill, "zero_": _fill, "flip": _flip,
    "bincount": _bincount, "bucketize": _bucketize,
    "gather": _gather, "take_along_dim": _gather, "index_select": _index_select,
    "index": _index,
    "scatter": _scatter, "scatter_add": _scatter, "scatter_reduce": _scatter, "index_reduce": _scatter,
    "index_fill": _index_fill, "index_put": _index_put, "index_put_": _index_put,
    "roll": _roll, "one_hot": _one_hot,
    "pad": _pad, "constant_pad_nd": _pad, "reflection_pad1d": _pad, "reflection_pad2d": _pad,
    "reflection_pad3d": _pad, "replication_pad1d": _pad, "replication_pad2d": _pad, "replication_pad3d": _pad,
    "_pad_circular": _pad, "meshgrid": _views, "cartesian_prod": _views, "cross": _cross,
    "linalg_cross": _cross, "tensordot": _tensordot, "einsum": _einsum, "cdist": _cdist, "_cdist_forward": _cdist,
    "view_as_complex": _complex, "view_as_real": _complex, "complex": _complex, "polar": _complex,
    "outer": _outer, "ger": _outer, "diff": _diff, "channel_shuffle": _channel_shuffle,
    "native_channel_shuffle": _channel_shuffle,
}
