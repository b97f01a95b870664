"""PopART's own ONNX ops (the ``ai.graphcore`` domain, ``builder.aiGraphcore.*``), as a model built with PopART's
builder holds them when saved to an ONNX file (``builder.getModelProto()``).

Each is read as PopART's op creator reads it (popart ``willow/src/op/*.cpp``: the attribute names and defaults) and
priced as the ops PopART's Opx runs, most of them as the default domain's op of the same meaning: ``Gelu`` (popnn's
GELU, as ``GeluErf``), ``Swish``, ``Expm1``, ``Log1p``, ``Atan2``, ``Fmod`` / ``Remainder``, ``Round`` /
``NearbyInt``, the ``Bitwise*`` ops, ``DepthToSpace``, ``GroupNormalization``; ``Detach`` (no gradient) and ``Nop``,
``PrintTensor`` (identities); ``Scale`` (attribute ``scale``); ``ScaledAdd`` (``scale0 X + scale1 Y``, the scales
attributes or tensors); ``Subsample`` (a copy of every ``strides``-th element); ``Reverse`` (a copy along
``dimensions``); ``TensorRemap`` (a copy into its consumers' layout); ``ShapedDropout`` (a dropout in training); the
losses ``IdentityLoss`` (``reduction`` "Sum", "Mean" or "None"), ``L1`` (``lambda`` times the reduced absolute
values) and ``Nll`` (NllOp of probabilities, or of log-probabilities with ``inputIsLogProbability``,
``ignoreIndex``); ``DynamicSlice`` / ``DynamicUpdate`` / ``DynamicZero`` / ``DynamicAdd`` (popops' dynamic slice and
update of ``sizes`` along ``axes``, from an offset tensor); ``Ctc`` (popnn's CTC loss) and ``CtcBeamSearchDecoder``
(its beam search decoder). ``MultiConv`` is a convolution's (``_ops_layers``), ``Call`` control flow
(``_ops_control_flow``). The rest of the domain (``Init``, the ``Replicated*`` collectives, ``SequenceSlice``,
``ScatterReduce``, ``GroupedGather``, the FP8 scale casts, ...) has no rule: an error names it.
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
    out = () if reduction != "none" else s[:1] + s[2:]
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
        inputs = [ctx.input(i) for i in range(len(ctx.node.input)) if ctx.has_input(i)]
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


_ELEMENTWISE = _ops_elementwise.RULES

RULES: dict = {f"ai.graphcore::{op}": rule for op, rule in {
    "Gelu": _ELEMENTWISE["Gelu"], "GeluErf": _ELEMENTWISE["Gelu"],
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
    "DynamicAdd": _dynamic("update"),
}.items()}
