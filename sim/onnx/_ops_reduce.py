"""Rules for ONNX's reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin as one popops
reduction; ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp with
their maps before and after; ArgMax, ArgMin) and losses (SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss). :data:`RULES` holds them by op type."""

from __future__ import annotations

from ._context import OpContext
from ._ops_tensor import _axes
from ._values import _axis


def _reduce(kind: str):
    def rule(ctx: OpContext):
        s = ctx.shape(0)
        since = 13 if ctx.op_type == "ReduceSum" else 18
        axes = _axes(ctx, 1, since)
        keep = bool(ctx.attr("keepdims", 1))
        if not axes:
            if ctx.attr("noop_with_empty_axes", 0):
                return ctx.input(0)
            axes = list(range(len(s)))
        axes = sorted({_axis(a, len(s)) for a in axes})
        out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
            tuple(d for i, d in enumerate(s) if i not in axes)
        return ctx.op(kind, [ctx.input(0)], {"axes": axes, "keepdims": keep}, shapes=[out])
    return rule


def _reduced_shape(ctx: OpContext, since: int) -> tuple[list[int], bool, tuple[int, ...]]:
    """(axes, keepdims, output shape) of an ONNX reduction (axes an attribute before opset ``since``)."""
    s = ctx.shape(0)
    axes = _axes(ctx, 1, since)
    keep = bool(ctx.attr("keepdims", 1))
    axes = sorted({_axis(a, len(s)) for a in axes}) if axes else list(range(len(s)))
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    return axes, keep, out


def _reduce_composite(ctx: OpContext):
    """ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp as PopART's
    opx run them: ReduceL1 popops abs then a reduce with ADD (reducel1x.cpp); ReduceL2 and ReduceSumSquare a
    reduce with SQUARE_ADD, ReduceL2's then a square root in place (reducel2x.cpp, reducesumsquarex.cpp);
    ReduceLogSum a reduce with ADD then a log in place (reducelogsumx.cpp); ReduceLogSumExp a reduce with MAX,
    the input less it exponentiated, a reduce with ADD, and its log plus the maximum (reducelogsumexpx.cpp).
    The last op of the first four carries ``reduced``: their gradient is their grad opx's
    (:data:`sim.graph.training.REDUCTION_COMPOSITES`)."""
    axes, keep, out = _reduced_shape(ctx, 18)
    xs, dt, op = ctx.shape(0), ctx.dtype(0), ctx.op_type
    attrs = {"axes": axes, "keepdims": keep}
    if op == "ReduceProd":
        return ctx.op("reduce_prod", [ctx.input(0)], attrs, shapes=[out])
    x = ctx.input(0)
    if op == "ReduceLogSumExp":
        kept = tuple(1 if i in axes else d for i, d in enumerate(xs))
        peak = ctx.op("reduce_max", [x], {"axes": axes, "keepdims": True}, shapes=[kept], dtypes=[dt], result=False,
                      suffix="max")
        x = ctx.op("map", [x, peak], {"steps": ["sub", "exp"], "grad": [["exp", "mul"], None]}, shapes=[xs],
                   dtypes=[dt], result=False, suffix="exp")
        s = ctx.op("reduce_sum", [x], attrs, shapes=[out], dtypes=[dt], result=False, suffix="sum")
        return ctx.op("map", [s], {"steps": ["log", "add"], "grad": [["div"]], "onnx_op": op}, shapes=[out],
                      dtypes=[dt])
    if op == "ReduceL1":
        x = ctx.op("abs", [x], shapes=[xs], dtypes=[dt], result=False, suffix="abs")
        return ctx.op("reduce_sum", [x], attrs | {"reduced": "l1"}, shapes=[out], dtypes=[dt])
    if op == "ReduceSumSquare":
        return ctx.op("reduce_sum", [x], attrs | {"operation": "square_add", "reduced": "sum_square"}, shapes=[out],
                      dtypes=[dt])
    square = {"operation": "square_add"} if op == "ReduceL2" else {}
    s = ctx.op("reduce_sum", [x], attrs | square, shapes=[out], dtypes=[dt], result=False, suffix="sum")
    after, reduced = ("sqrt", "l2") if op == "ReduceL2" else ("log", "log_sum")
    return ctx.op(after, [s], {"reduced": reduced, "onnx_op": op}, shapes=[out], dtypes=[dt])


def _arg_extreme(ctx: OpContext):
    """ArgMax / ArgMin: popops' max (min) reduction with the position of the extreme, priced as the
    reduction (as sim.poptorch prices torch.argmax)."""
    xs = ctx.shape(0)
    axis = _axis(ctx.attr("axis", 0), len(xs))
    keep = bool(ctx.attr("keepdims", 1))
    out = tuple(1 if i == axis else d for i, d in enumerate(xs)) if keep else \
        tuple(d for i, d in enumerate(xs) if i != axis)
    return ctx.op("reduce_max", [ctx.input(0)], {"axes": [axis], "keepdims": keep, "onnx_op": ctx.op_type},
                  shapes=[out], dtypes=["int32"])


def _cross_entropy(ctx: OpContext):
    s = ctx.shape(0)
    reduction = ctx.attr("reduction", "mean")
    out = () if reduction in ("mean", "sum") else (s[0],) + s[2:]
    ins = [ctx.input(0), ctx.input(1)] + ([ctx.input(2)] if ctx.has_input(2) else [])
    label = "nll" if ctx.op_type == "NegativeLogLikelihoodLoss" else "cross_entropy"
    # SoftmaxCrossEntropyLoss as PopART's SoftmaxOp and NllOp; NegativeLogLikelihoodLoss as NllOp on the
    # log-probabilities it is given (sim.cost.row_ops.loss_steps); the loss in the scores' type (ONNX's T for both)
    attrs = {"loss": label, "reduction": reduction} | ({"log_probabilities": True} if label == "nll" else {})
    if ctx.attr("ignore_index", None) is not None:
        attrs["ignore_index"] = int(ctx.attr("ignore_index"))
    loss = ctx.op("softmax_cross_entropy", ins, attrs, shapes=[out], dtypes=[ctx.dtype(0)], outputs=[0])
    if len(ctx.node.output) > 1 and ctx.node.output[1]:  # the log-probabilities, when the model uses them
        return [loss, ctx.op("softmax", [ctx.input(0)], {"axis": 1, "log": True}, shapes=[s], outputs=[1])]
    return loss


RULES: dict = {
    "ReduceMean": _reduce("reduce_mean"), "ReduceSum": _reduce("reduce_sum"),
    "ReduceMax": _reduce("reduce_max"), "ReduceMin": _reduce("reduce_min"),
    # losses
    "SoftmaxCrossEntropyLoss": _cross_entropy, "NegativeLogLikelihoodLoss": _cross_entropy,
    # more of PopART's ops
    **{k: _reduce_composite for k in ("ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                      "ReduceLogSumExp")},
    "ArgMax": _arg_extreme, "ArgMin": _arg_extreme,
}
