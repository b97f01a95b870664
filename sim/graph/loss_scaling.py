"""Automatic loss scaling as PopART adds it to a training graph.

PopART's ``automaticLossScalingSettings.enabled`` (PopTorch's
``Training.setAutomaticLossScaling(True)``) runs the AutomaticLossScale transform
(popart ``willow/src/transforms/automaticlossscaling.cpp``):

- every gradient tensor it tracks gets a HistogramOp: the counts of its elements' absolute values
  below and above one bin edge (``popops::histogram``, sim/cost/histogram.py). PopART's default
  ``GradientTensorTrackingMethod::AllNonViewChangingGradientTensors`` tracks the fp16 outputs of
  every op on the path from the loss that is no view change, reads no variable (a weight, an
  accumulator or optimizer state: "prevent cycles") and no optimizer tensor (the loss scale the
  loss's gradient reads), and has a consumer (``producesNonViewChangingGradientTensor``); fp32
  gradients are not tracked, and a graph with none to track is PopART's error;
- a SumOp adds the statistics (one ``popops::map`` of a tree of adds), a CastOp makes them fp32
  and, with gradient accumulation, an AddRhsInplaceOp sums them into an accumulator every
  micro-batch;
- once per weight update (the accumulate outer fragment): with replicas, a ReplicatedAllReduceOp of
  the statistics, then the LossScaleUpdateOp (two casts, a multiply, a compare and the If that
  doubles or halves the update factor) and the Mul and Div making the new loss scale and its
  inverse; with accumulation the statistics' accumulator is zeroed.

Here each histogram follows the op that makes its gradient, in that op's pipeline stage; the
statistics are summed where they are made, one sum per stage (PopART's single SumOp takes them all,
copying each stage's 8 bytes to one IPU: those copies are not modelled); the update runs on the
IPU of the loss, its all-reduce of the 8 bytes of statistics with the gradients'.
"""

from __future__ import annotations

from ..errors import OptionsError
from .ir import VIEW_KINDS, Graph, Op

#: op kinds PopART's ops for which are view changes (``isOutplaceViewChange``): never tracked
_VIEW_CHANGES = VIEW_KINDS | {"transpose", "pad"}
#: roles of the tensors PopART holds as variables (a tracked op reads none of them)
_VARIABLES = ("weight", "state", "accumulator")
BIN_EDGES = 1  # binEdgeLocation (0.125 of the fp16 range by default): one edge, two bins


def tracked_gradients(g: Graph) -> list[Op]:
    """The backward ops whose outputs PopART's AllNonViewChangingGradientTensors method tracks."""
    consumed = {t for op in g.ops for t in op.inputs}
    loss_op = _loss_op(g)
    tracked = []
    for op in g.ops:
        if op.pass_ != "backward" or op.kind in _VIEW_CHANGES or op.forward_of == loss_op.name:
            continue  # the loss's gradient reads the loss scale, an optimizer tensor
        if any(g.tensors[t].role in _VARIABLES for t in op.inputs):
            continue
        if all(g.tensors[t].dtype == "float16" for t in op.outputs) and any(t in consumed for t in op.outputs):
            tracked.append(op)
    return tracked


def add_automatic_loss_scaling(g: Graph, accumulate: bool) -> int:
    """Add PopART's automatic loss scaling to the training graph ``g`` (in place): a histogram
    after every tracked gradient op, each stage's statistics summed, cast to fp32 and (with
    ``accumulate``) accumulated, and the loss scale's update in the update pass. Returns the number
    of tensors tracked; an :class:`OptionsError` if there is none (PopART's error for a graph
    without fp16 gradients)."""
    tracked = tracked_gradients(g)
    if not tracked:
        raise OptionsError("Training.setAutomaticLossScaling(True): the model has no fp16 gradient for automatic "
                           "loss scaling to track (PopART: \"No tracked gradient tensors of type fp16 were found\"); "
                           "it tracks fp16 gradients only: train the model in float16, or turn it off")
    loss_op = _loss_op(g)
    order = {op.name: i for i, op in enumerate(g.ops)}
    after: dict[str, list[Op]] = {}  # new ops by the op they follow
    groups: dict[tuple, list[tuple[Op, str]]] = {}
    for op in tracked:
        for i, t in enumerate(op.outputs):
            base = f"{op.name}/histogram" + (f"_{i}" if len(op.outputs) > 1 else "")
            hist = _op(g, base, "histogram", [t], "int32", op, levels=BIN_EDGES, absolute=True)
            after.setdefault(op.name, []).append(hist)
            groups.setdefault((op.ipu, op.stage, op.phase), []).append((op, hist.outputs[0]))
    summed = []
    for members in groups.values():
        last = max((op for op, _ in members), key=lambda op: order[op.name])
        ops = []
        total = members[0][1]
        if len(members) > 1:  # SumOp: one popops::map of a tree of adds
            ops.append(_op(g, f"{last.name}/statistics_sum", "map", [s for _, s in members], "int32", last,
                           steps=["add"] * (len(members) - 1)))
            total = ops[-1].outputs[0]
        ops.append(_op(g, f"{last.name}/statistics_cast", "cast", [total], "float32", last, to="float32"))
        total = ops[-1].outputs[0]
        if accumulate:  # AddRhsInplaceOp into the statistics' accumulator
            acc = g.add_tensor(g.unique_tensor_name(f"{last.name}/statistics_accum"), (BIN_EDGES + 1,), "float32",
                               "accumulator").name
            ops.append(Op(g.unique_op_name(f"{last.name}/statistics_accumulate"), "accumulate", [acc, total], [acc],
                          **_beside(last)))
            total = acc
        after.setdefault(last.name, []).extend(ops)
        summed.append(total)
    g.insert_after(after)
    scale = g.add_tensor(g.unique_tensor_name("loss_scaling/update_factor"), (1,), "float32", "state").name
    # "weight": what the schedule reduces over replicas before the update (the statistics, 8 bytes)
    g.add_op(Op(g.unique_op_name("loss_scaling/update"), "loss_scale_update", summed + [scale], [scale],
                {"accumulated": accumulate, "weight": summed[0]}, pass_="update", ipu=loss_op.ipu,
                stage=loss_op.stage, phase=loss_op.phase, block=loss_op.block))
    return sum(len(op.outputs) for op in tracked)


def _loss_op(g: Graph) -> Op:
    """The op that makes the graph's loss."""
    return next(op for op in g.ops if g.loss in op.outputs)


def _op(g: Graph, base: str, kind: str, inputs: list[str], dtype: str, like: Op, **attrs) -> Op:
    """A backward op in ``like``'s place (its IPU, stage and forward op) making one statistics
    tensor of ``dtype``; not yet in the graph's order."""
    name = g.unique_op_name(base)
    out = g.add_tensor(g.unique_tensor_name(name), (BIN_EDGES + 1,), dtype, "activation", name).name
    return Op(name, kind, inputs, [out], attrs, **_beside(like))


def _beside(op: Op) -> dict:
    """The annotations of a backward op placed with ``op``: its IPU, stage, phase, block and forward op."""
    return dict(pass_="backward", ipu=op.ipu, stage=op.stage, phase=op.phase, block=op.block,
                forward_of=op.forward_of)


__all__ = ["add_automatic_loss_scaling", "tracked_gradients"]
