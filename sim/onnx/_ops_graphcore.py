"""PopART's own ONNX ops (the ``ai.graphcore`` domain, ``builder.aiGraphcore.*``), as a model built with PopART's
builder holds them when saved to an ONNX file (``builder.getModelProto()``).

Each is read as PopART's op creator reads it (popart ``willow/src/op/*.cpp``: the attribute names and defaults) and
priced as the ops PopART's Opx runs, most of them as the default domain's op of the same meaning: ``Gelu`` (popnn's
tanh GELU), ``GeluErf`` (popops' GELU_ERF vertex, the exact GELU), ``Swish``, ``Expm1``, ``Log1p``, ``Atan2``,
``Fmod`` / ``Remainder``, ``Round`` /
``NearbyInt``, the ``Bitwise*`` ops, ``DepthToSpace``, ``GroupNormalization``; ``Detach`` (no gradient) and ``Nop``,
``PrintTensor`` (identities); ``Scale`` (attribute ``scale``); ``ScaledAdd`` (``scale0 X + scale1 Y``, the scales
attributes or tensors); ``Subsample`` (a copy of every ``strides``-th element); ``Reverse`` (a copy along
``dimensions``); ``TensorRemap`` (a copy into its consumers' layout); ``ShapedDropout`` (a dropout in training); the
losses ``IdentityLoss`` (``reduction`` "Sum", "Mean" or "None"), ``L1`` (``lambda`` times the reduced absolute
values) and ``Nll`` (NllOp of probabilities, or of log-probabilities with ``inputIsLogProbability``,
``ignoreIndex``); ``DynamicSlice`` / ``DynamicUpdate`` / ``DynamicZero`` / ``DynamicAdd`` (popops' dynamic slice and
update of ``sizes`` along ``axes``, from an offset tensor); ``Ctc`` (popnn's CTC loss) and ``CtcBeamSearchDecoder``
(its beam search decoder); ``ScatterReduce`` (popops' multiUpdate of elements or, index broadcast, of slices),
``GroupedGather`` (a multiSlice of the groups' tables), ``Init`` (a zero fill, or no work), ``SequenceSlice`` (an
update of the whole destination), the ``Replicated*`` collectives over PopART's replica grouping attribute, and the
FP8 scale casts ``Pow2ScaleThenCast`` / ``CastThenPow2Scale`` (one cast each).
``MultiConv`` is a convolution's (``_ops_layers``), ``Call`` control flow (``_ops_control_flow``). The rest of the
domain has no rule: an error names it.
"""

from __future__ import annotations

import math

from ..cost import ctc_beam
from ..errors import GraphError
from . import _ops_elementwise, _ops_layers, _ops_tensor
from ._context import OpContext

#: PopART's loss reductions (willow/src/op/loss.cpp reductionTypeFromString) as sim's
REDUCTIONS = {"Sum": "sum", "Mean": "mean", "None": "none"}


def _required(ctx: OpContext, name: str):
    """Attribute ``name``, which PopART's op creator reads with no default (a node without it fails there)."""
    value = ctx.attr(name)
    if value is None:
        raise GraphError(f"{ctx.desc}: it has no {name!r} attribute, which PopART's {ctx.op_type}Op requires")
    return value


def _reduction(ctx: OpContext) -> str:
    """A loss's ``reduction`` as sim names it (PopART's LossOp::reductionTypeFromString)."""
    value = _required(ctx, "reduction")
    if value not in REDUCTIONS:
        raise GraphError(f"{ctx.desc}: reduction {value!r}: PopART reads \"Sum\", \"Mean\" or \"None\"")
    return REDUCTIONS[value]


def _reduce_all(ctx: OpContext, x: str, shape: tuple, dtype: str, reduction: str) -> str:
    """``x`` summed or averaged over all its elements (a loss's reduction), or ``x`` itself for "none"."""
    if reduction == "none":
        return ctx.op("identity", [x], shapes=[shape], dtypes=[dtype])
    kind = "reduce_sum" if reduction == "sum" else "reduce_mean"
    return ctx.op(kind, [x], {"axes": list(range(len(shape))), "keepdims": False}, shapes=[()], dtypes=[dtype])


def _identity_loss(ctx: OpContext):
    """IdentityLossOp: the input reduced, as a loss PopART trains on."""
    return _reduce_all(ctx, ctx.input(0), ctx.shape(0), ctx.dtype(0), _reduction(ctx))


def _l1(ctx: OpContext):
    """L1Op: ``lambda`` times the absolute values, reduced (L1Opx: popops' absolute, then the reduction, scaled)."""
    xs, dt, reduction = ctx.shape(0), ctx.dtype(0), _reduction(ctx)
    magnitude = ctx.op("abs", [ctx.input(0)], shapes=[xs], dtypes=[dt], result=False, suffix="abs")
    out = xs if reduction == "none" else ()
    if reduction != "none":
        kind = "reduce_sum" if reduction == "sum" else "reduce_mean"
        magnitude = ctx.op(kind, [magnitude], {"axes": list(range(len(xs))), "keepdims": False}, shapes=[out],
                           dtypes=[dt], result=False, suffix=kind)
    return ctx.op("scale", [magnitude], {"factor": float(_required(ctx, "lambda"))}, shapes=[out], dtypes=[dt])


def _nll(ctx: OpContext):
    """NllOp: the negative log of each row's label probability (of log-probabilities with
    ``inputIsLogProbability``), ignoring ``ignoreIndex``, reduced; PopART's NllOpx as the default domain's
    NegativeLogLikelihoodLoss prices it."""
    s = ctx.shape(0)
    reduction = _reduction(ctx)
    log = bool(int(ctx.attr("inputIsLogProbability", 0)))
    attrs = {"loss": "nll", "reduction": reduction} | ({"log_probabilities": True} if log else {"probabilities": True})
    if ctx.attr("ignoreIndex") is not None:
        attrs["ignore_index"] = int(ctx.attr("ignoreIndex"))
    out = () if reduction != "none" else s[:-1]  # NllOp: the classes on the last axis, one loss a label
    return ctx.op("softmax_cross_entropy", [ctx.input(0), ctx.input(1)], attrs, shapes=[out], dtypes=[ctx.dtype(0)],
                  outputs=[0])


def _scale(ctx: OpContext):
    return ctx.op("scale", [ctx.input(0)], {"factor": float(ctx.attr("scale", 1.0))}, shapes=[ctx.shape(0)],
                  dtypes=[ctx.dtype(0)])


def _scaled_add(ctx: OpContext):
    """ScaledAddOp: ``scale0 X + scale1 Y``, the scales attributes or the inputs A and B: popops' scaledAdd, one
    pass over the elements, priced as an add (as sim.popxl prices ``ops.scaled_add``)."""
    return ctx.op("add", [ctx.input(0), ctx.input(1)], {"onnx_op": "ScaledAdd"},
                  shapes=[_ops_elementwise._broadcast(ctx.shape(0), ctx.shape(1))], dtypes=[ctx.dtype(0)])


def _identity(ctx: OpContext):
    """Nop and PrintTensor: the input, unchanged (PrintTensor's printing is the host's)."""
    return ctx.op("identity", [ctx.input(0)], shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _shaped_dropout(ctx: OpContext):
    """ShapedDropoutOp: a dropout whose mask of ``shape`` is broadcast over the input (poprand::shapedDropout), in a
    training session only; kept as a ``dropout`` op, which the compiler runs only in training, priced as a dropout
    of the whole input (its random draws an upper bound: the mask holds ``prod(shape)`` of them)."""
    ratio = float(_required(ctx, "ratio"))
    if not 0 <= ratio < 1:
        raise GraphError(f"{ctx.desc}: ratio {ratio} must be in [0, 1), as PopART's dropout ops check")
    if not ratio:
        return ctx.op("identity", [ctx.input(0)], shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])
    return ctx.op("dropout", [ctx.input(0)], {"p": ratio, "mask_shape": [int(d) for d in _required(ctx, "shape")]},
                  shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _ctc_beam_search(ctx: OpContext):
    """CtcBeamSearchDecoderOp (willow/src/op/ctcbeamsearch.cpp): log-probabilities (T, B, C) and UINT32 lengths (B,)
    in, attributes ``blank`` (0), ``beam_width`` (100) and ``top_paths`` (1); out each path's probability
    (B, top_paths) in the input's type, its length and its labels (B, top_paths, T), UINT32 (int32 here): popnn's
    decoder, ``ctc_beam_search`` (sim/cost/ctc_beam.py)."""
    blank, width, top = (int(ctx.attr(a, d)) for a, d in (("blank", 0), ("beam_width", 100), ("top_paths", 1)))
    problem = ctc_beam.argument_problem(ctx.shape(0), ctx.shape(1), blank, width, top)
    if problem:
        raise GraphError(f"{ctx.desc}: {problem}")
    T, B, _ = ctx.shape(0)
    return ctx.op("ctc_beam_search", [ctx.input(0), ctx.input(1)],
                  {"blank": blank, "beam_width": width, "top_paths": top},
                  shapes=[(B, top), (B, top), (B, top, T)], dtypes=[ctx.dtype(0), "int32", "int32"])


def _remap(ctx: OpContext):
    """TensorRemapOp: the input copied into the tile layout its consumers want (popops' rearrangement), as
    sim.poptorch prices RemapCE."""
    return ctx.op("remap", [ctx.input(0)], shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _detach(ctx: OpContext):
    """DetachOp: the input, through which no gradient flows."""
    return ctx.op("detach", [ctx.input(0)], shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _subsample(ctx: OpContext):
    """SubsampleOp: every ``strides[d]``-th element of each dimension, copied out (SubsampleOpx)."""
    xs = ctx.shape(0)
    strides = [int(s) for s in ctx.attr("strides", [])] or [1] * len(xs)
    if len(strides) != len(xs) or min(strides) < 1:
        raise GraphError(f"{ctx.desc}: strides {strides} must give each of the input's {len(xs)} dimensions a "
                         "stride of 1 or more")
    out = tuple(math.ceil(d / s) for d, s in zip(xs, strides))
    return ctx.op("copy", [ctx.input(0)], {"onnx_op": "Subsample"}, shapes=[out], dtypes=[ctx.dtype(0)])


def _reverse(ctx: OpContext):
    """ReverseOp: the input reversed along ``dimensions``, a copy (as torch.flip)."""
    return ctx.op("copy", [ctx.input(0)], {"onnx_op": "Reverse"}, shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _dynamic(kind: str):
    """DynamicSlice / DynamicUpdate / DynamicZero / DynamicAdd: popops' dynamic slice (a copy of ``sizes``
    elements along ``axes`` from the offset tensor) or update of the input in place of the slice."""
    def rule(ctx: OpContext):
        xs = ctx.shape(0)
        axes, sizes = [int(a) for a in _required(ctx, "axes")], [int(s) for s in _required(ctx, "sizes")]
        if len(axes) != len(sizes) or any(not 0 <= a < len(xs) for a in axes):
            raise GraphError(f"{ctx.desc}: axes {axes} and sizes {sizes} must pair up, each axis one of the "
                             f"input's {len(xs)}")
        if kind == "slice":
            out = tuple(sizes[axes.index(i)] if i in axes else d for i, d in enumerate(xs))
            return ctx.op("copy", [ctx.input(0), ctx.input(1)], {"dynamic_slice": True}, shapes=[out],
                          dtypes=[ctx.dtype(0)])
        inputs = [ctx.input(0)] + ([ctx.input(2)] if ctx.has_input(2) else []) + [ctx.input(1)]  # the update second
        return ctx.op("copy", inputs, {"dynamic_update": True}, shapes=[xs], dtypes=[ctx.dtype(0)])
    return rule


def _ctc(ctx: OpContext):
    """CtcOp: popnn's CTC loss of log-probabilities (T, B, C) against targets (B, L) and the two lengths, reduced
    (``reduction``; ``blank``), as the default domain has none (sim/cost/ctc.py)."""
    reduction = _reduction(ctx)
    batch = ctx.shape(0)[1]
    out = () if reduction != "none" else (batch,)
    return ctx.op("ctc_loss", [ctx.input(i) for i in range(4)], {"reduction": reduction, "reduced_classes": False},
                  shapes=[out], dtypes=[ctx.dtype(0)], outputs=[0])


def _popart_axis(ctx: OpContext, default: int, rank: int) -> int:
    """The ``axis`` attribute in [0, rank), PopART's range error otherwise (ScatterReduceOp, GatherOp setup)."""
    axis = int(ctx.attr("axis", default))
    if not -rank <= axis < rank:
        raise GraphError(f"{ctx.desc}: axis = {axis} is outside the acceptable range [{-rank}, {rank - 1}]")
    return axis % rank


def _scatter_reduce(ctx: OpContext):
    """ScatterReduceOp: ``data`` (input 0) reduced into the output at ``indices`` along ``axis`` (``reduction`` sum,
    max, min, mul or none), into ``initial_values`` where given, else into the output PopART fills with the
    reduction's initial value (its shape the data's with ``axis_size`` along the axis). An index of the data's shape
    scatters element by element; a vector along the axis (index broadcast) moves whole slices, as PopART's vectorised
    path (``checkIndexBroadcasted``) does; popops' multiUpdate either way (``scatter_elements``, as sim.poptorch
    prices PopTorch's scatter_reduce)."""
    data = ctx.shape(0)
    axis_size = int(_required(ctx, "axis_size"))
    if axis_size < 1:
        raise GraphError(f"{ctx.desc}: axis_size = {axis_size} is not valid: must be > 0 (PopART's ScatterReduceOp)")
    axis = _popart_axis(ctx, -1, len(data))
    if int(ctx.attr("group_size", 1)) != 1:
        ctx.unsupported("a grouped ScatterReduce (group_size > 1, popops' grouped multiUpdate) is not modelled")
    reduction = str(ctx.attr("reduction", "sum")).lower()
    if reduction not in ("sum", "max", "min", "mul", "none"):
        raise GraphError(f"{ctx.desc}: reduction {reduction!r}: PopART reads sum, max, min, mul or none")
    index = tuple(ctx.shape(1))
    slices = index != tuple(data)
    if slices and [d for d, n in enumerate(_expanded_indices(ctx, index, data, axis)) if n != 1] != [axis]:
        if int(ctx.attr("enable_index_broadcast", 1)):
            raise GraphError(f"{ctx.desc}: indices of shape {tuple(index)} for data of shape {data}: Partial "
                             "broadcasting of indices is not currently supported (PopART's ScatterReduceOp)")
        ctx.unsupported(f"indices of shape {tuple(index)} expanded to the data's {data} (index broadcast off)")
    out = ctx.shape(2) if ctx.has_input(2) else data[:axis] + (axis_size,) + data[axis + 1:]
    into = ctx.input(2) if ctx.has_input(2) else ctx.builder.constant(f"{ctx.name}/initial", out, ctx.dtype(0))
    return ctx.op("scatter_elements", [ctx.input(1), into, ctx.input(0)],
                  {"axis": axis, "reduce": reduction, **({"slices": True} if slices else {})},
                  shapes=[out], dtypes=[ctx.dtype(0)])


def _expanded_indices(ctx: OpContext, index: tuple, data: tuple, axis: int) -> tuple:
    """The indices' shape as PopART expands it to the data's (scatterreduce.cpp expandIndicesBcastNdShape): a vector
    moved to the axis, then singleton dimensions after it; an error where a dimension exceeds the data's."""
    if len(index) > len(data):
        raise GraphError(f"{ctx.desc}: Invalid rank for indices input. Indices rank {len(index)} must be <= data input "
                         f"rank {len(data)}.")
    expanded = (1,) * axis + index if len(index) == 1 else index
    expanded += (1,) * (len(data) - len(expanded))
    if len(expanded) > len(data) or any(i > d for i, d in zip(expanded, data)):
        raise GraphError(f"{ctx.desc}: Failed to expand 'indices' shape {list(index)} to match 'src' shape "
                         f"{list(data)} using reduction axis = {axis}.")
    return expanded


def _grouped_gather(ctx: OpContext):
    """GroupedGather (GatherOp with ``group_size``): each group's rows of ``data`` (G, ...) at its own ``indices``
    (G, ...) along ``axis`` (not the group's dimension). A lookup in a stored table is popops' grouped multiSlice,
    priced as one multiSlice of the groups' tables stacked (each group's indices into its own rows); from a
    computed tensor, data movement priced as a copy of the result, as the default domain's Gather."""
    data, index = ctx.shape(0), ctx.shape(1)
    axis = _popart_axis(ctx, 0, len(data))
    if axis == 0:
        raise GraphError(f"{ctx.desc}: axis = 0 indicates the dimension of the group (PopART's GatherOp)")
    if not index or index[0] != data[0]:
        raise GraphError(f"{ctx.desc}: indices of shape {tuple(index)} must lead with the data's {data[0]} groups")
    out = data[:axis] + tuple(index[1:]) + data[axis + 1:]
    if axis == 1 and _ops_tensor.stored(ctx, 0):
        groups, rows = data[0], data[1]
        table = ctx.op("reshape", [ctx.input(0)], shapes=[(groups * rows,) + data[2:]], result=False, suffix="table")
        ids = ctx.op("reshape", [ctx.input(1)], shapes=[(math.prod(index),)], dtypes=[ctx.dtype(1)], result=False,
                     suffix="indices")
        rows_out = ctx.op("gather", [ids, table], shapes=[(math.prod(index),) + data[2:]], dtypes=[ctx.dtype(0)],
                          result=False, suffix="multislice")
        return ctx.op("reshape", [rows_out], shapes=[out], dtypes=[ctx.dtype(0)])
    return ctx.op("copy", [ctx.input(0), ctx.input(1)], {"onnx_op": "GroupedGather", "axis": axis}, shapes=[out],
                  dtypes=[ctx.dtype(0)])


def _init(ctx: OpContext):
    """InitOp: a tensor of ``shape`` and ``data_type`` made on the device, zeroed (``init_type`` 0, popops' zero,
    priced as a scale of a broadcast zero as sim.popxl prices ops.init in a subgraph) or left as it is (1, NoInit: a
    tensor and no work)."""
    shape = tuple(int(d) for d in _required(ctx, "shape"))
    dtype = ctx._imp.sim_dtype(int(_required(ctx, "data_type")), ctx.desc)
    init_type = int(_required(ctx, "init_type"))
    if init_type not in (0, 1):
        raise GraphError(f"{ctx.desc}: init_type {init_type}: PopART reads 0 (Zero) or 1 (NoInit)")
    if init_type == 1:
        value = ctx.builder.constant(f"{ctx.name}/uninitialised", shape, dtype)
        return ctx.op("identity", [value], shapes=[shape], dtypes=[dtype])
    zero = ctx.builder.constant(f"{ctx.name}/zero", (), dtype)
    return ctx.op("scale", [zero], {"broadcast": True}, shapes=[shape], dtypes=[dtype])


def _sequence_slice(ctx: OpContext):
    """SequenceSliceOp: ``N[i]`` rows of ``Source`` from ``SourceOffset[i]`` copied into ``Destination`` at
    ``DestinationOffset[i]`` (popops' sequenceSlice; ``zeroUnused`` zeroes the destination's other rows). How many
    rows move is known only at run time: priced as an update of the whole destination, an upper bound."""
    source, dest = ctx.shape(0), ctx.shape(1)
    if source[1:] != dest[1:]:
        raise GraphError(f"{ctx.desc}: Source {source} and Destination {dest} must agree past their first dimension")
    return ctx.op("copy", [ctx.input(1), ctx.input(0), ctx.input(2), ctx.input(3), ctx.input(4)],
                  {"dynamic_update": True, "onnx_op": "SequenceSlice"}, shapes=[dest], dtypes=[ctx.dtype(1)])


#: PopART's replica grouping attribute ([replicas, stride, group size]) and its deprecated CommGroup one ([type, size])
_GROUPING, _COMM_GROUP = "__collectiveReplicaGrouping", "__collectiveCommGroup"


def _replica_group(ctx: OpContext) -> tuple[int, int | None]:
    """(group stride, group size: None for every replica) of a collective, from PopART's attributes (none: all)."""
    grouping, comm = ctx.attr(_GROUPING), ctx.attr(_COMM_GROUP)
    if grouping:
        if len(grouping) != 3:
            raise GraphError(f"{ctx.desc}: {_GROUPING} {list(grouping)}: expected [replicas, stride, group size]")
        return int(grouping[1]), int(grouping[2])
    if comm:
        kind, size = int(comm[0]), int(comm[1])  # popart CommGroupType: All, Consecutive, Orthogonal, Ungrouped
        if kind == 0:
            return 1, None
        if kind == 1:
            return 1, size
        if kind == 3:
            return 1, 1
        ctx.unsupported(f"an Orthogonal {_COMM_GROUP}: its stride is the replication factor over the group size, "
                        "which the ONNX file does not give; write the grouping as "
                        f"{_GROUPING} [replicas, stride, group size]")
    return 1, None


def _replicated(kind: str):
    """ReplicatedAllReduce / ReplicatedReduceScatter / ReplicatedAllGather: a collective over each group of
    replicas (sim's replicated ops, run by the schedule as GCL collectives). A reduce-scatter or all-gather needs its
    group's size for its output's shape, which a model without a grouping attribute leaves to the session's
    replication factor: refused then, naming the attribute."""
    def rule(ctx: OpContext):
        stride, size = _replica_group(ctx)
        x, xs = ctx.input(0), ctx.shape(0)
        if kind == "replicated_all_reduce":
            out = xs
        elif size is None:
            ctx.unsupported(f"its shards are the session's replicas, which the ONNX file does not give: give it "
                            f"{_GROUPING} [replicas, stride, group size]")
        else:
            n = math.prod(xs)
            out = (math.ceil(n / size),) if kind == "replicated_reduce_scatter" else (size * n,)
        return ctx.op(kind, [x], {"group_stride": stride, "group_size": size}, shapes=[out], dtypes=[ctx.dtype(0)])
    return rule


def _pow2_scale_then_cast(ctx: OpContext):
    """Pow2ScaleThenCastOp (pow2scalethencast.cpp): ``cast(x * 2**log2_scale)`` of a FLOAT16 or FLOAT input to
    FP8 (``to`` "FLOAT8_143" or "FLOAT8_152"), the scale a scalar int8 input. Priced as one cast: popops casts
    half to quarter at the speed of half to float (PerformanceEstimation.cpp), as sim.popxl's
    ``pow2scale_cast_to_fp8``."""
    to = _required(ctx, "to")
    to = to.decode() if isinstance(to, bytes) else str(to)
    if to not in ("FLOAT8_143", "FLOAT8_152"):
        raise GraphError(f"{ctx.desc}: to = {to!r}; PopART's Pow2ScaleThenCast casts to FLOAT8_143 or FLOAT8_152")
    if ctx.dtype(0) not in ("float16", "float32"):
        raise GraphError(f"{ctx.desc}: its input is {ctx.dtype(0)}; PopART casts FLOAT16 or FLOAT to FP8")
    return ctx.op("cast", [ctx.input(0)], {"to": "float8"}, shapes=[ctx.shape(0)], dtypes=["float8"])


def _cast_then_pow2_scale(ctx: OpContext):
    """CastThenPow2ScaleOp (castthenpow2scale.cpp): an FP8 input cast to FLOAT16 and scaled by ``2**log2_scale``;
    one cast, as :func:`_pow2_scale_then_cast`."""
    if ctx.dtype(0) != "float8":
        raise GraphError(f"{ctx.desc}: its input is {ctx.dtype(0)}; Casting from FLOAT8 is only supported for "
                         "FLOAT8_143 and FLOAT8_152 input types (PopART's CastThenPow2Scale)")
    return ctx.op("cast", [ctx.input(0)], {"to": "float16"}, shapes=[ctx.shape(0)], dtypes=["float16"])


_ELEMENTWISE = _ops_elementwise.RULES

RULES: dict = {f"ai.graphcore::{op}": rule for op, rule in {
    "Gelu": _ops_elementwise._unary("gelu"), "GeluErf": _ops_elementwise._unary("gelu_erf"),
    "Swish": _ops_elementwise._unary("swish"), "Expm1": _ops_elementwise._unary("expm1"),
    "Log1p": _ops_elementwise._unary("log1p"), "Atan2": _ops_elementwise._binary_kind("atan2"),
    "Fmod": _ops_elementwise._binary_kind("remainder"), "Remainder": _ops_elementwise._binary_kind("remainder"),
    "Round": _ELEMENTWISE["Round"], "NearbyInt": _ELEMENTWISE["Round"],
    **{op: _ELEMENTWISE[op] for op in ("BitwiseNot", "BitwiseAnd", "BitwiseOr", "BitwiseXor")},
    "BitwiseXnor": _ELEMENTWISE["BitwiseXor"],
    "DepthToSpace": _ops_tensor.RULES["DepthToSpace"], "GroupNormalization": _ops_layers.RULES["GroupNormalization"],
    "Detach": _detach, "Nop": _identity, "PrintTensor": _identity, "Scale": _scale, "ScaledAdd": _scaled_add,
    "Subsample": _subsample, "Reverse": _reverse, "TensorRemap": _remap, "ShapedDropout": _shaped_dropout,
    "IdentityLoss": _identity_loss, "L1": _l1, "Nll": _nll, "Ctc": _ctc, "CtcBeamSearchDecoder": _ctc_beam_search,
    "DynamicSlice": _dynamic("slice"), "DynamicUpdate": _dynamic("update"), "DynamicZero": _dynamic("update"),
    "DynamicAdd": _dynamic("update"), "ScatterReduce": _scatter_reduce, "GroupedGather": _grouped_gather,
    "Init": _init, "SequenceSlice": _sequence_slice, "ReplicatedAllReduce": _replicated("replicated_all_reduce"),
    "ReplicatedReduceScatter": _replicated("replicated_reduce_scatter"),
    "ReplicatedAllGather": _replicated("replicated_all_gather"),
    "Pow2ScaleThenCast": _pow2_scale_then_cast, "CastThenPow2Scale": _cast_then_pow2_scale,
}.items()}
