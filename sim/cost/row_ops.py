"""Softmax, log-softmax, layer norm, their gradients and the losses as poplibs runs them: popops
reductions and element-wise compute sets, each priced as its own popops call.

poplibs does not have one codelet for these ops; it composes them from popops calls, each with
its own compute set(s), on-chip syncs and, for a reduction, its own plan and call overhead
(poplibs commit 8dcde1ec):

* softmax (``lib/popnn/NonLinearity.cpp`` ``softmaxImpl``, SOFTMAX_STABLE, as PopART's
  ``SoftmaxOpx`` calls ``popnn::nonLinearityInPlace``): ``popops::reduce`` MAX over the row, the
  max subtracted (broadcast over the row), ``exp``, ``popops::reduce`` ADD to FLOAT, ``inv`` of
  the sums, their cast to half (half inputs), a broadcast multiply by 1/sum;
* layer norm gradient (:data:`LAYERNORM_GRAD_STEPS`: PopART's ``GroupNormGradOpx``, popnn
  ``groupNormGradients`` / ``groupNormParamGradients``, poplin ``normGradients`` /
  ``normStatisticsGradients``);
* softmax gradient (same file, ``softmaxInputGradientImpl``, PopART's ``SoftmaxGradOpx``):
  ``mul(y, g)``, ``popops::reduce`` ADD over the row, ``mul(y, sum)`` (the sum broadcast),
  ``subInPlace``;
* layer norm (PopART's ``GroupNormOpx``, which MLPerf's and Graphcore's PopART BERT use for every
  layer norm, ``aiGraphcore.groupnormalization`` with one group; ``lib/popnn/GroupNorm.cpp`` then
  ``lib/poplin/Norms.cpp``): ``normStatistics`` (two ``popops::reduceWithOutput`` to FLOAT, ADD
  and SQUARE_ADD, into one list of compute sets, then the ``InverseStdDeviation`` compute set on
  the statistics), ``normWhiten`` (the map ``x - Cast(mean)``, then ``mulInPlace`` by the inverse
  standard deviation, each broadcast over the row), ``normalise`` (``mul`` by gamma, ``addInPlace``
  beta, each broadcast over the rows).

Each element-wise step is laid out as poputil lays out a new tensor (``sim/cost/vector.py``
``spread``) and costs its codelet's fixed cycles plus cycles per element of the tensor's type
(``configs/_vector-ops.toml``); a step broadcasting a statistic or a vector runs popops' broadcast
vertex (the outer one for a per-row statistic, the inner one for a per-column or per-channel
vector that repeats on a tile; ``sim.cost.vector.broadcast_pattern``). A per-row statistic is
received by each tile for the rows it holds a part of (a tile of ``e`` contiguous elements of rows
of ``L`` spans at most ``ceil(e / L) + 1`` rows), a per-column vector (gamma, beta) for the columns
it holds. Batch norm (``statistics="channel"``) runs the layer norm's steps with a statistic per
channel. The reductions are priced by popops' reduction plan (``sim/cost/reduction.py``, through
the ``reduce_cost`` the caller gives). Cycles are tile cycles of the IPU clock; bytes are bytes.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..graph.ir import DTYPE_BYTES
from ..hardware.system import IPU
from .exchange import exchange_cycles
from .opcost import OpCost, TileProfile, _counts
from .vector import CHANNEL_GROUP, broadcast_codelet, codelet, inner_vertex_taken, spread

#: the op kinds priced here
ROW_OP_KINDS = ("softmax", "softmax_grad", "layernorm", "layernorm_grad")

# A step: ("reduce", (operations...), output bytes or None for the input's) -- popops reduce calls
# sharing compute sets; ("map", codelets) -- element-wise over the whole tensor; ("row", (op,),
# statistic bytes or None) -- a binary op with a per-row statistic broadcast, popops' broadcast vertex
# (op one of sim.cost.vector.BROADCAST_OPS, "mul_inplace" for poplibs' mulInPlace); ("rowmap",
# codelets, statistic bytes or None) -- a map expression reading a per-row statistic (a plain
# element-wise vertex); ("col", (op,)) -- a binary op with a per-column vector broadcast; ("stats",
# codelets, bytes) -- element-wise over the per-row statistics only; the losses' ("onehot",), ("total", ...),
# ("all", ...) and ("scalar", ...) below.
#: popnn softmaxImpl, stable (NonLinearity.cpp); the inv and cast run on the row sums
SOFTMAX_STEPS = (("reduce", ("max",), None), ("row", ("sub",), None), ("map", ("exp",)),
                 ("reduce", ("add",), 4), ("stats", ("reciprocal",), 4), ("stats", ("cast",), 4),
                 ("row", ("mul_inplace",), None))
#: popnn softmaxImpl without stableAlgo (SOFTMAX: PopART's enableNonStableSoftmax): no row maximum
SOFTMAX_NONSTABLE_STEPS = SOFTMAX_STEPS[2:]
#: popnn softmaxInputGradientImpl (NonLinearity.cpp)
SOFTMAX_GRAD_STEPS = (("map", ("mul",)), ("reduce", ("add",), None), ("row", ("mul",), None),
                      ("map", ("sub",)))
#: popnn groupNormStatistics / groupNormalise -> poplin normStatistics, normWhiten, normalise (Norms.cpp);
#: the InverseStdDeviation vertex priced as the fused map of its expression (power/n - mean^2 + eps, rsqrt)
LAYERNORM_STEPS = (("reduce", ("add", "square_add"), 4), ("stats", ("mul", "mul", "sub", "add", "rsqrt"), 4),
                   ("row", ("sub",), 4), ("row", ("mul_inplace",), 4), ("col", ("mul",)), ("col", ("add",)))
#: the same with poplin's stable estimator (Norms.cpp normStatisticsImpl, stableAlgo: TensorFlow's
#: norms.use_stable_statistics): the mean's reduction on its own (to the activations' type), the mean
#: subtracted from the activations (a new tensor), then the power's reduction of that; the
#: InverseStdDeviation vertex then skips the mean's square (power/n + eps, rsqrt)
LAYERNORM_STABLE_STEPS = (("reduce", ("add",), None), ("rowmap", ("sub",), None), ("reduce", ("square_add",), 4),
                          ("stats", ("mul", "add", "rsqrt"), 4)) + LAYERNORM_STEPS[2:]
#: PopART's GroupNormGradOpx (popart willow/src/popx/op/groupnormx.cpp): groupNormWhiten again (the row sub
#: and mul), then popnn groupNormGradients -> poplin normGradients (mul by gamma) and normStatisticsGradients
#: (Norms.cpp: normParamGradients' mul and its one reduce of the concatenated [dy * x_hat, dy] per row, the
#: Copy of dy, varGrads' mul by varDelta, meanDelta scaled, added over the row, scaledAddTo(gradient,
#: varGrads), mulInPlace by the inverse standard deviation), then groupNormParamGradients' mul of x_hat and
#: dy (its column reduction for gamma and beta is the graph's own reduce_sum op, both in one)
LAYERNORM_GRAD_STEPS = (("row", ("sub",), 4), ("row", ("mul_inplace",), 4), ("col", ("mul",)), ("map", ("mul",)),
                        ("reduce", ("add", "add"), None), ("map", ("copy",)), ("row", ("mul",), None),
                        ("stats", ("mul",), None), ("row", ("add",), None), ("map", ("scale",)),
                        ("row", ("mul_inplace",), 4), ("map", ("mul",)))
#: poplin normalise with a batch norm's combined scale and shift (popnn BatchNorm.cpp batchNormalise at
#: inference: the running statistics folded into one multiplicand and one addend)
BATCHNORM_INFERENCE_STEPS = (("col", ("mul",)), ("col", ("add",)))
#: popnn logSoftmaxImpl (LogSoftmax.cpp), after PopART's LogSoftmaxOpx clones its input (logsoftmaxx.cpp
#: ``cloneAndGroupImpl``: the input is kept for the gradient): the row maximum subtracted, ``exp`` into a new
#: tensor, its sum to FLOAT, ``Cast(Log(sum))`` on the sums, the log-sum subtracted (always stable)
LOG_SOFTMAX_STEPS = (("map", ("copy",)), ("reduce", ("max",), None), ("row", ("sub",), None), ("map", ("exp",)),
                     ("reduce", ("add",), 4), ("stats", ("log", "cast"), 4), ("row", ("sub",), None))


def _log_softmax_grad(softmax: tuple) -> tuple:
    """PopART's LogSoftmaxGradOpx (logsoftmaxx.cpp): the input cloned, the softmax recomputed from it (popnn's
    ``softmax`` steps: stable unless enableNonStableSoftmax), the gradient's sum over the row, the map
    ``g - p * sum``."""
    return (("map", ("copy",)),) + softmax + (("reduce", ("add",), None), ("rowmap", ("mul", "sub"), None))


LOG_SOFTMAX_GRAD_STEPS = _log_softmax_grad(SOFTMAX_STEPS)

# --- losses, as PopART's NllOpx, NllGradOpx and NlllWithSoftmaxGradDirectOpx run them (popart willow/src/popx/op/
# nllx.cpp, softmaxx.cpp): composed by :func:`loss_steps`. "onehot": popops encodeOneHot (Encoding.cpp: a zero of
# the encoded tensor, one EncodeOneHot vertex a tile for a group of labels, the copy into the tensor PopART
# cloned); "total": a popops reduction of the per-row values to the one loss; "all": of every element to it;
# "scalar": a map on one element (the mean's scale).
#: NllOpx's pick of the label's value: the one-hot times the input, their sum over the row
_NLL_PICK = (("onehot",), ("map", ("mul",)), ("reduce", ("add",), None))
#: ``Log(Max(p, eps))`` of the picked probabilities (not when the input is log-probabilities)
_NLL_LOG = (("stats", ("maximum", "log"), None),)
#: applyMaskInPlaceForIgnoredIndex over the rows: the labels NOT_EQUAL the ignored index, the mask's cast, its
#: multiply (a per-row broadcast over a gradient's rows)
_IGNORE_MASK = (("stats", ("compare",), 4), ("stats", ("cast",), None), ("stats", ("mul",), None))
_IGNORE_MASK_ROWS = _IGNORE_MASK[:2] + (("row", ("mul",), None),)
#: applyScalingInPlaceForMeanReductionWithIgnoreIndex: the mask's sum, its maximum with 1, the scale divided by it
#: (its multiply follows)
_IGNORE_MEAN = (("total", ("add",), None), ("scalar", ("maximum",)), ("scalar", ("div",)))
#: the gradient half of NlllWithSoftmaxGradDirectOpx (the one-hot made by the loss): ``Add(Neg(one-hot), p)``
_NLL_SOFTMAX_GRAD = (("map", ("sub",)),)
#: NllGradOpx on log-probabilities: the one-hot, negated
_NLL_LOG_GRAD = (("onehot",), ("map", ("neg",)))
#: PopTorch's mse_loss (AtenHandlers.gen.cpp mseLossHandler: ``identityloss(mul(sub(x, y), sub(x, y)))``):
#: the difference, its square, IdentityLossOpx's scaled sum of every element
MSE_STEPS = (("map", ("sub",)), ("map", ("mul",)), ("all", ("add",)))
#: its gradient: IdentityLossGradOpx (the loss gradient over the elements, a zero, its broadcast add), the
#: multiply's two input gradients and their sum (the subtraction passes it on)
MSE_GRAD_STEPS = (("scalar", ("div",)), ("map", ("copy",)), ("map", ("add",)), ("map", ("mul",)),
                  ("map", ("mul",)), ("map", ("add",)))
#: PopTorch's l1_loss (AtenHandlers.gen.cpp l1LossHandler: ``identityloss(l1loss(sub(x, y), 1, reduction), none)``,
#: the IdentityLoss an identity): the difference, then L1Opx's ABSOLUTE map and its scaled reduction of every element
L1_STEPS = (("map", ("sub",)), ("map", ("abs",)), ("all", ("add",)))
#: L1GradOpx: the difference's SIGNUM, a map multiplying it by the reduction's scale, one multiplying in the loss's
#: gradient (the subtraction passes it on)
L1_GRAD_STEPS = (("map", ("sign",)), ("map", ("mul",)), ("map", ("mul",)))

STEPS = {"softmax": SOFTMAX_STEPS, "softmax_nonstable": SOFTMAX_NONSTABLE_STEPS, "softmax_grad": SOFTMAX_GRAD_STEPS,
         "layernorm": LAYERNORM_STEPS, "layernorm_grad": LAYERNORM_GRAD_STEPS, "layernorm_stable": LAYERNORM_STABLE_STEPS,
         "batchnorm_inference": BATCHNORM_INFERENCE_STEPS,
         "log_softmax": LOG_SOFTMAX_STEPS, "log_softmax_grad": LOG_SOFTMAX_GRAD_STEPS,
         "log_softmax_grad_nonstable": _log_softmax_grad(SOFTMAX_NONSTABLE_STEPS)}

#: ``reduce_cost(shape, axes, itemsize, operations, tiles)``: the OpCost of popops reductions of
#: ``shape`` over ``axes``, one per operation, sharing compute sets
ReduceCost = Callable[[tuple, tuple, int, tuple, int], OpCost]


def _elementwise_step(n: int, itemsize: int, codelets: tuple, recv_bytes: int, ipu: IPU, tiles: int,
                      run: int = 0):
    """(per-tile compute cycles, tiles used, launch cycles, exchange cycles, bytes per tile) of one
    element-wise compute set over ``n`` elements, one fused vertex per tile (its largest codelet's
    fixed cost, the sum of their per-element cycles, and a codelet's ``per_run`` cycles per
    contiguous ``run`` of one broadcast element), ``recv_bytes`` of a broadcast operand received by
    each working tile first."""
    used, _ = spread(n, itemsize, ipu, tiles)
    cs = [codelet(k) for k in codelets]
    fixed = max(c.fixed for c in cs)
    counts = _counts(n, used)
    runs = np.ceil(counts / run) + 1 if run else 0
    busiest = int(np.max(counts))
    per_tile = np.ceil(fixed + counts * sum(c.per_element(itemsize) for c in cs)
                       + runs * sum(c.run_cycles(run, itemsize, busiest) for c in cs))
    return per_tile, used, math.ceil(fixed), exchange_cycles(recv_bytes, ipu) if recv_bytes else 0, recv_bytes


def _expanded(steps: tuple) -> tuple:
    """``steps`` with each ``("onehot",)`` as popops encodeOneHot's compute sets: the zero of the encoded
    tensor, the EncodeOneHot vertices, the copy into the tensor the caller gave."""
    out = ()
    for step in steps:
        out += (("map", ("copy",)), ("encode", ("encode_one_hot",)), ("map", ("copy",))) if step[0] == "onehot" \
            else (step,)
    return out


def _encode_one_hot_step(rows: int, length: int, itemsize: int, tiles: int):
    """:func:`_elementwise_step`'s values for popops encodeOneHot's compute set (Encoding.cpp): the labels in
    groups of whole vector-width grains over the tiles, each group's row slices over the tiles left (at least 4
    grains each); a vertex costs its fixed cycles plus its per-label cycles for each label of its group."""
    grain = max(1, 8 // itemsize)  # the encoded type's vector width, 64 bits
    label_grains = math.ceil(rows / grain)
    per_group = math.ceil(label_grains / tiles)
    groups = math.ceil(label_grains / per_group)
    slice_grains = math.ceil(length / grain)
    per_slice = max(math.ceil(slice_grains / max(tiles // groups, 1)), 4)
    used = min(tiles, groups * math.ceil(slice_grains / per_slice))
    c = codelet("encode_one_hot")
    labels = min(rows, per_group * grain)
    per_tile = np.full(used, math.ceil(c.fixed + labels * c.per_element(itemsize)))
    return per_tile, used, math.ceil(c.fixed), 0, 0


def row_op_cost(kind: str | tuple, shape: tuple, dtype: str, ipu: IPU, tiles: int, reduce_cost: ReduceCost,
                statistics: str = "row") -> OpCost:
    """The cost of ``kind`` (a key of :data:`STEPS`, or the steps themselves: :func:`loss_steps`) over the
    last dimension of ``shape`` (``dtype`` elements): the steps in order, their cycles, syncs and exchanges
    added (each step its own compute sets).

    ``statistics`` says what a statistic covers and so which of popops' broadcast vertices its
    steps run: ``"row"``, a contiguous run of its row (a softmax or layer norm: the outer vertex;
    a per-column vector, gamma or beta, the inner one); ``"channel"``, a channel of an ``(N, C,
    ...)`` activation over its other dimensions (a batch norm, poplin Norms.cpp), which poplin lays
    out channels innermost, so every broadcast step runs the inner vertex and the reductions
    reduce the outer dimension of ``(positions, C)``; ``"group"``, the rows of ``shape`` (a group
    norm's sample and group) of such an activation, whose statistics poplin expands to its
    channels, so its broadcast steps run the inner vertex too."""
    itemsize = DTYPE_BYTES[dtype]
    per_channel = statistics == "channel"
    if per_channel:
        stats = shape[1] if len(shape) > 1 else 1
        n = math.prod(shape)
        length = n // stats  # elements one statistic covers
        reduced, axes = (length, stats), (0,)
        row_pattern = "inner"
    else:
        length = shape[-1] if shape else 1
        stats = max(1, math.prod(shape[:-1]))
        n = stats * length
        reduced, axes = (stats, length), (1,)
        row_pattern = "inner" if statistics == "group" else "outer"
    compute = exch = sync = sets = launch = setup = moved = 0
    used_max = out_tiles = 0
    profile = np.zeros(tiles)
    recv_profile = np.zeros(tiles)
    names = []
    for step in _expanded(STEPS[kind] if isinstance(kind, str) else kind):
        what = step[0]
        if what in ("reduce", "total", "all"):  # priced on the input type; a row reduction's step[2] records the
            ops = step[1]                      # output type poplibs reduces to, a total's the values' size
            if what == "reduce":
                c = reduce_cost(reduced, axes, itemsize, ops, tiles)
            elif what == "total":
                c = reduce_cost((1, stats), (1,), step[2] or itemsize, ops, tiles)
            else:
                c = reduce_cost((1, n), (1,), itemsize, ops, tiles)
            compute += c.compute_cycles
            exch += c.exchange_cycles
            sync += c.sync_cycles
            sets += c.supersteps
            launch += c.launch_cycles
            setup += c.exchange_setup_cycles
            moved += c.exchange_bytes
            used_max = max(used_max, c.tiles_used)
            if c.profile is not None:
                profile[:len(c.profile.compute)] += c.profile.compute[:tiles]
                recv_profile[:len(c.profile.bytes_in)] += c.profile.bytes_in[:tiles]
            names.append(("reduce " if what == "reduce" else f"reduce {what} ") + "+".join(ops))
            continue
        codelets, run = step[1], 0
        if what == "stats":
            size = step[2] or itemsize
            per_tile, used, fixed, ex, recv = _elementwise_step(stats, size, codelets, 0, ipu, tiles)
        elif what == "scalar":
            per_tile, used, fixed, ex, recv = _elementwise_step(1, 4, codelets, 0, ipu, tiles)
        elif what == "encode":
            per_tile, used, fixed, ex, recv = _encode_one_hot_step(stats, length, itemsize, tiles)
        else:
            used, busiest = spread(n, itemsize, ipu, tiles)
            pattern = row_pattern if what in ("row", "rowmap") else "inner"
            if what in ("row", "rowmap", "col"):
                size = (step[2] or itemsize) if what != "col" else itemsize
                # the statistics or vector elements a tile's elements need
                if per_channel:
                    needed = min(stats, busiest)
                elif what == "col":
                    needed = min(length, busiest)
                else:
                    needed = min(stats, math.ceil(busiest / length) + 1)
                recv = needed * size
                # what repeats on a tile for the inner vertex: a channel group (a batch norm's channels,
                # a group norm's statistics expanded to the channels) or a whole row of columns
                if per_channel:
                    unit = min(stats, CHANNEL_GROUP)
                else:
                    unit = length if what == "col" else CHANNEL_GROUP
                if what == "rowmap" or (pattern == "inner" and busiest < 2 * unit):
                    codelets = tuple(op.removesuffix("_inplace") for op in codelets)  # a plain vertex
                else:
                    if pattern == "inner" and not inner_vertex_taken(itemsize, unit):
                        pattern = "copied"
                    codelets = tuple(broadcast_codelet(op, pattern) for op in codelets)
                    run = length if pattern == "outer" else 0
            else:
                recv = 0
            per_tile, used, fixed, ex, recv = _elementwise_step(n, itemsize, codelets, recv, ipu, tiles, run)
        compute += int(per_tile.max())
        profile[:used] += per_tile
        recv_profile[:used] += recv
        launch += fixed
        sets += 1
        sync += ipu.internal_sync_cycles * (1 + (1 if ex else 0))
        if ex:
            exch += ex
            setup += ipu.exchange_setup_cycles
            moved += recv * used
        used_max = max(used_max, used)
        out_tiles = used
        names.append(f"{what} {'+'.join(codelets)}")
    # tiles_used: the tiles of the result, as the last (element-wise) step lays it out
    label = f"{stats} channels of {length}" if per_channel else f"{stats} rows of {length}"
    return OpCost(int(compute), int(exch), int(sync), sets, float(n * 5), int(moved), int(out_tiles or used_max), 0,
                  f"{label}: " + ", ".join(names),
                  TileProfile(profile, recv_profile, np.zeros(tiles)),
                  launch_cycles=int(launch), exchange_setup_cycles=int(setup))


def loss_steps(kind: str, attrs: dict) -> tuple:
    """The steps of a loss op or its gradient (``kind``: ``softmax_cross_entropy``, ``mse_loss`` or their
    ``_grad``), as PopART runs the ops the front end lowers it to. A cross-entropy's ``attrs`` say which:

    * none: PopART's own cross-entropy (a model built with the zoo's GraphBuilder, ONNX's
      SoftmaxCrossEntropyLoss): a SoftmaxOp (popnn, without the row maximum when ``non_stable``), then NllOp on
      its probabilities; the gradient NlllWithSoftmaxGradDirectOpx's (the NllGrad + SoftmaxGrad pattern);
    * ``probabilities``: the NllOp only, on a softmax the program runs as its own op (PopXL's
      ``nll_loss_with_softmax_grad``), the same gradient;
    * ``log_softmax``: PopTorch's cross_entropy (LossOps.cpp crossEntropyLossHandler): a LogSoftmaxOp, then
      NllOp on log-probabilities; the gradient NllGradOpx then LogSoftmaxGradOpx (no pattern joins them);
    * ``log_probabilities``: an nll_loss of log-probabilities another op made (PopTorch's, ONNX's
      NegativeLogLikelihoodLoss): NllOp and NllGradOpx alone.

    ``ignore_index`` (any value; PopTorch always passes -100) adds NllOpx's masks of the ignored labels and the
    mean over the rest; ``reduction`` ``"sum"`` drops the mean's scale, ``"none"`` the reduction to one loss."""
    grad = kind.endswith("_grad")
    if kind.startswith("mse_loss") and attrs.get("loss") == "l1":
        return L1_GRAD_STEPS if grad else L1_STEPS
    if kind.startswith("mse_loss"):
        return MSE_GRAD_STEPS if grad else MSE_STEPS
    log_input = bool(attrs.get("log_softmax") or attrs.get("log_probabilities"))
    masked = attrs.get("ignore_index") is not None
    reduction = attrs.get("reduction", "mean")
    softmax = SOFTMAX_NONSTABLE_STEPS if attrs.get("non_stable") else SOFTMAX_STEPS
    if grad:
        steps = _NLL_LOG_GRAD if log_input else _NLL_SOFTMAX_GRAD
        steps += _IGNORE_MASK_ROWS if masked else ()
        if reduction == "mean":
            steps += (_IGNORE_MEAN if masked else (("scalar", ("div",)),)) + (("map", ("mul",)),)
        elif reduction == "sum":  # mulInPlace by the loss gradient
            steps += (("map", ("mul",)),)
        return steps + (_log_softmax_grad(softmax) if attrs.get("log_softmax") else ())
    if attrs.get("log_softmax"):
        steps = LOG_SOFTMAX_STEPS
    elif attrs.get("probabilities") or log_input:
        steps = ()
    else:
        steps = softmax
    steps += _NLL_PICK + (() if log_input else _NLL_LOG) + (_IGNORE_MASK if masked else ())
    if reduction == "none":  # handleLossOutNotReducedToScalar: the row values negated
        return steps + (("stats", ("neg",), None),)
    if reduction == "mean" and masked:
        steps += _IGNORE_MASK + _IGNORE_MEAN + (("stats", ("mul",), None),)
    return steps + (("total", ("add",), 4),)


def runs_popnn_softmax(kind: str, attrs: dict) -> bool:
    """Does an op of ``kind`` run popnn's softmax, the steps PopART's ``enableNonStableSoftmax`` changes
    (``non_stable``): a softmax op (not a log-softmax, which popnn always runs stable), the SoftmaxOp of
    PopART's cross-entropy (:func:`loss_steps`), and the softmax a log-softmax's gradient recomputes
    (:func:`_log_softmax_grad`: a ``log`` softmax's, PopTorch's cross-entropy's)."""
    if kind == "softmax":
        return not attrs.get("log")
    if kind == "softmax_grad":
        return bool(attrs.get("log"))
    if kind == "softmax_cross_entropy":
        return not (attrs.get("probabilities") or attrs.get("log_softmax") or attrs.get("log_probabilities"))
    return kind == "softmax_cross_entropy_grad" and bool(attrs.get("log_softmax"))


def row_op_steps(kind: str, attrs: dict) -> str:
    """The key of :data:`STEPS` an op of ``kind`` (one of :data:`ROW_OP_KINDS`) runs: a layer (or
    group) norm with poplin's stable statistics where the op has them (``Options.enableStableNorm``),
    a softmax without the row maximum where it is marked ``non_stable`` (``enableNonStableSoftmax``),
    popnn's log-softmax and PopART's gradient of it where it is marked ``log`` (the gradient's softmax
    without the row maximum where marked ``non_stable``), any other as its kind."""
    if kind == "layernorm" and attrs.get("stable_statistics"):
        return "layernorm_stable"
    if kind in ("softmax", "softmax_grad") and attrs.get("log"):
        return "log_softmax" if kind == "softmax" else "log_softmax_grad" + ("_nonstable" if attrs.get("non_stable")
                                                                          else "")
    if kind == "softmax" and attrs.get("non_stable"):
        return "softmax_nonstable"
    return kind


def batchnorm_steps(kind: str, attrs: dict) -> str:
    """The key of :data:`STEPS` a ``batchnorm`` or ``batchnorm_grad`` op runs (``statistics="channel"``):
    the running statistics' scale and shift at inference, else a norm's steps (with poplin's
    stable statistics where the op has them, ``Options.enableStableNorm``) or its gradient's."""
    if attrs.get("inference"):
        return "batchnorm_inference"
    if kind == "batchnorm_grad":
        return "layernorm_grad"
    return "layernorm_stable" if attrs.get("stable_statistics") else "layernorm"


def row_op_codelets(kind: str | tuple, dtype: str) -> list[tuple]:
    """Keys of the distinct codelets ``kind``'s steps (a key of :data:`STEPS`, or the steps) run, for the
    program's vertex code: each element-wise step's (fused) codelet keyed as the element-wise op of that name
    keys its own (``(name, dtype, 0)``; a broadcast step's as ``"broadcast <name>"``), each reduction as a
    ``reduce_sum`` op's; a codelet appears once however many steps use it, and is shared with the other ops
    that run it."""
    keys = []
    for step in _expanded(STEPS[kind] if isinstance(kind, str) else kind):
        if step[0] in ("reduce", "total", "all"):
            key = ("reduce_sum", dtype, 0)
        elif step[0] in ("row", "col"):  # popops' broadcast vertices, not the plain element-wise ones
            key = ("broadcast " + "+".join(step[1]), dtype, 0)
        else:
            key = ("+".join(step[1]), dtype, 0)
        if key not in keys:
            keys.append(key)
    return keys
