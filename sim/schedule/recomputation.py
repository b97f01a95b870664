"""Which forward ops a training run recomputes for its backward pass, and where the copies run.

PopART marks each forward op Recompute (its outputs are dropped after the forward pass and made again
for the backward pass) or keeps it. In a run that is not pipelined, the marks come from the user or
from ``autoRecomputation`` (PopART's RecomputationType; willow/src/recompute.cpp ``autoAnnotate``,
applied to the ops that lead to the loss, ``toLoss``, when ``executionPhaseSettings.phases < 2``;
ir.cpp):

* None (0, PopART's default, and PopTorch's for a model that is not pipelined): the ops the user
  marks Recompute (PopART's ``recomputeOutputInBackwardPass``: :attr:`sim.graph.ir.Op.recompute`). A
  recomputation checkpoint alone (PopTorch's ``recomputationCheckpoint``, PopART's
  ``checkpointOutput``) marks nothing, so nothing is recomputed;
* Standard (1, ``annotateStandard``): the forward schedule is cut into intervals of decreasing
  length (``getDecreasingIntervals``, willow/src/intervals.cpp); in each, the set of ops whose outputs
  are still to be read after one op runs (its live set) with the fewest bytes is kept, and every
  other op is recomputed;
* NormOnly (2, ``annotateNormOnly``): the batch, group and layer norms (``Op::isNorm``);
* RecomputeAll (4, ``annotateRecomputeAll``): every op but the checkpoints; without
  ``explicitRecomputation`` the ops between the last checkpoint and the loss are kept
  (``allCheckpointAfterLastCheckpoint``).

In phased execution (``executionPhaseSettings.phases`` >= 2) PopART's StreamingMemory transform marks
instead: with any type but None, every forward op the user left unmarked (neither Recompute nor
Checkpoint) is marked Recompute (:func:`marked_phased`); each is run again in the backward phase
mirroring its forward phase (ExplicitRecompute's context ``2 * phases - 2 - phase``).

PopART refuses Pipeline (3) on a run that is not pipelined, and user marks beside an automatic type
(:func:`marked`). A pipeline's recomputation is its own (:mod:`sim.schedule.stages`); PopART's (implicit)
pipelining refuses user marks unless ``explicitRecomputation`` clones them first (:func:`check_pipeline`),
and then reruns them in the backward stages that read them.

Before each backward op, the marked ops making what it reads, walking back to kept tensors, run
again, each once (popx/irlowering.cpp ``FindRequiredRecomputes``): :func:`rerun`.
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import OptionsError
from ..graph.ir import REMOTE_KINDS, Graph, Op
from ..options import RECOMPUTATION_TYPES as TYPES
from .replicated_ops import KINDS as COLLECTIVE_KINDS

#: the ops PopART's ``Op::isNorm`` is true of (a layer norm is PopART's GroupNormOp of one group)
NORM_KINDS = ("batchnorm", "groupnorm", "layernorm")
#: ops with a side effect, which PopART never recomputes (``Op::canRecompute``)
SIDE_EFFECT_KINDS = frozenset(REMOTE_KINDS) | frozenset(COLLECTIVE_KINDS)


def is_checkpoint(op: Op) -> bool:
    """Whether every output of ``op`` is a recomputation checkpoint (:attr:`Op.checkpointed`), so nothing
    recomputes it: an op with an output that is not (an LSTM's sequence beside its checkpointed state) is
    recomputed where that output is read."""
    kept_outputs = op.checkpointed
    return bool(kept_outputs) and kept_outputs >= set(op.outputs)


def has_checkpoint(op: Op) -> bool:
    """Whether ``op`` makes a recomputation checkpoint (any of its outputs)."""
    return bool(op.checkpointed)


def kept(ops) -> set[str]:
    """The recomputation checkpoints ``ops`` make: tensors kept from the forward pass, where recomputation
    stops walking back."""
    return {t for op in ops for t in op.checkpointed}


def user_marks(g: Graph) -> list[str]:
    """Names of the forward ops the model marks Recompute (PopART's ``recomputeOutputInBackwardPass``), in
    the model's order."""
    return [op.name for op in g.ops if op.pass_ == "forward" and op.recompute]


def marked(g: Graph, auto: int, explicit: bool) -> set[str]:
    """Names of the forward ops PopART marks Recompute in a training run that is not pipelined, with
    ``autoRecomputation`` ``auto`` (a number of :data:`TYPES`) and ``explicitRecomputation``
    ``explicit``. Raises :class:`OptionsError` where PopART refuses the settings."""
    user = user_marks(g)
    if auto == 0:
        return set(user)
    if user:
        raise _mixture(auto, user, "set autoRecomputation to None (0) to recompute the marked ops, or drop the marks")
    if auto == 3:
        raise OptionsError(
            "autoRecomputation Pipeline (3) on a training run that is not pipelined: PopART refuses it (\"Invalid "
            "RecomputationType::Pipeline in autoAnnotate when using implicit pipelining\"); use RecomputeAll (4) to "
            "recompute between the recomputation checkpoints, Standard (1) or NormOnly (2), or None (0)")
    forward, producer = _to_loss(g)
    if auto == 1:
        return _standard(g, forward)
    if auto == 2:
        return {op.name for op in forward if op.kind in NORM_KINDS}
    recompute = {op.name for op in forward if not is_checkpoint(op) and op.kind not in SIDE_EFFECT_KINDS}
    if not explicit:  # allCheckpointAfterLastCheckpoint: walk back from the loss through recomputed ops, to
        # the checkpoints (PopART's Checkpoint identities, which are not Recompute, stop it)
        stop = kept(forward)
        todo = [producer[t] for t in _loss_op_inputs(g, producer) if t in producer and t not in stop]
        while todo:
            op = todo.pop()
            if op.name in recompute:
                recompute.discard(op.name)
                todo += [producer[t] for t in op.inputs if t in producer and t not in stop]
    return recompute


def _mixture(auto: int, user: list[str], remedy: str) -> OptionsError:
    """PopART's refusal of the ops ``user`` marked Recompute beside ``autoRecomputation`` ``auto`` (ir.cpp, below
    2 execution phases), with what to do instead."""
    return OptionsError(
        f"autoRecomputation {TYPES[auto]} with {len(user)} op(s) the model marks Recompute ({user[0]!r} first): "
        f"PopART refuses it (\"A mixture of auto and manual recomputation is not supported\"); {remedy}")


def marked_phased(g: Graph, auto: int) -> set[str]:
    """Names of the forward ops PopART marks Recompute in phased execution: the ops the model marks, and
    with ``autoRecomputation`` ``auto`` other than None every other forward op but the checkpoints
    (transforms/streamingmemory.cpp, pass 1: "Recompute everything else (fwd) not set by the user";
    IPU copies and random seeds, which the simulator has no ops for, excepted there). ``auto``'s type does
    not matter, and user marks beside it are accepted (ir.cpp refuses the mixture only below 2 phases)."""
    automatic = {op.name for op in g.ops if op.pass_ == "forward" and not is_checkpoint(op)
                 and op.kind not in SIDE_EFFECT_KINDS} if auto else set()
    return set(user_marks(g)) | automatic


def check_pipeline(g: Graph, auto: int, explicit: bool, explicit_pipelining: bool = False) -> set[str]:
    """PopART's refusals of a pipeline's recomputation settings, in its order (ir.cpp, then
    transforms/pipeline.cpp; SDK 2.1 to the last release), as :class:`OptionsError`: ops the model marks
    Recompute beside an automatic type (ir.cpp's mixture check), ``autoRecomputation`` Pipeline with
    ``explicitRecomputation`` (``autoAnnotate`` takes it only with explicit pipelining), and marked ops with
    neither (``Pipeline::apply``, implicit pipelining only: "user annotation for recomputation is not
    allowed"). With ``explicitRecomputation`` (or explicit pipelining) and None PopART accepts the marks, cloned
    into the backward stages that read them: their names are returned (``sim.schedule.stages`` reruns them
    there). Checkpoints are accepted throughout."""
    user = user_marks(g)
    if user and auto:
        raise _mixture(auto, user, "a pipeline recomputes its stages with autoRecomputation alone: drop the marks, "
                                   "or keep them as checkpoints")
    if explicit and auto == 3 and not explicit_pipelining:
        raise OptionsError(
            "explicitRecomputation with autoRecomputation Pipeline (3, PopTorch's default for a pipeline): PopART "
            "refuses it (\"Invalid RecomputationType::Pipeline in autoAnnotate when using implicit pipelining\"); "
            "drop explicitRecomputation, as Graphcore's examples do for their pipelines, or set autoRecomputation "
            "to None (0), Standard (1), NormOnly (2) or RecomputeAll (4)")
    if user and not explicit and not explicit_pipelining:
        raise OptionsError(
            f"{len(user)} op(s) the model marks Recompute ({user[0]!r} first) in a pipeline: PopART refuses it "
            "(\"When pipelining is enabled, user annotation for recomputation is not allowed\"); drop the marks "
            "(recomputeOutputInBackwardPass, __recompute_output_in_backward_pass 2) and let autoRecomputation "
            "recompute the pipeline's stages (Pipeline (3), PopTorch's default for a pipeline), keep a mark as a "
            "checkpoint (RecomputeType.Checkpoint), or set explicitRecomputation")
    return set(user)


def _losses(g: Graph) -> list[str]:
    return [t for t in [g.loss, *g.micro_batch_losses] if t is not None]


def _loss_op_inputs(g: Graph, producer: dict[str, Op]) -> list[str]:
    """The inputs of the ops making the losses (PopART's loss ops: on the path to and from the loss)."""
    return [t for loss in _losses(g) if loss in producer for t in producer[loss].inputs]


def _to_loss(g: Graph) -> tuple[list[Op], dict[str, Op]]:
    """(the forward ops with a path to a loss, PopART's ``toLoss``, in schedule order: every forward op when
    the graph names no loss; the forward op making each forward tensor)."""
    forward = [op for op in g.ops if op.pass_ == "forward"]
    producer = {t: op for op in forward for t in op.outputs}
    losses = _losses(g)
    if not losses:
        return forward, producer
    reach, todo = set(), [producer[t] for t in losses if t in producer]
    while todo:
        op = todo.pop()
        if op.name not in reach:
            reach.add(op.name)
            todo += [producer[t] for t in op.inputs if t in producer]
    return [op for op in forward if op.name in reach], producer


def decreasing_intervals(n: int) -> list[tuple[int, int]]:
    """PopART's ``getDecreasingIntervals(N)``: ``[start, end)`` intervals covering ``0 .. n-1``, of
    lengths K, K-1, ..., 1 and then 1 each, K being three quarters of ``floor(sqrt(2n)) - 1``."""
    if n == 1:
        return [(0, 1)]
    size = int((int(math.sqrt(2.0 * n)) - 1) * 0.75)
    out, start = [], 0
    while start + size <= n and size > 0:
        out.append((start, start + size))
        start, size = start + size, size - 1
    out += [(i, i + 1) for i in range(start, n)]
    return out


def _standard(g: Graph, forward: list[Op]) -> set[str]:
    """PopART's ``annotateStandard`` on ``forward`` (the toLoss ops in schedule order)."""
    if not forward:
        return set()
    producer = {t: op.name for op in forward for t in op.outputs}
    waiting = {op.name: sorted({producer[t] for t in op.inputs if t in producer}) for op in forward}
    readers = {op.name: 0 for op in forward}
    for names in waiting.values():
        for name in names:
            readers[name] += 1
    out_bytes = {op.name: sum(g.tensors[t].nbytes for t in op.outputs) for op in forward}
    live: dict[str, None] = {}  # insertion-ordered set
    live_sets, live_bytes = [], []
    for op in forward:
        for name in waiting[op.name]:
            readers[name] -= 1
            if readers[name] == 0:
                live.pop(name, None)
        live[op.name] = None
        live_sets.append(tuple(live))
        live_bytes.append(sum(out_bytes[name] for name in live))
    kept: set[str] = set()
    for start, end in decreasing_intervals(len(forward)):
        best = min(range(start, end), key=lambda i: (live_bytes[i], i))
        kept.update(live_sets[best])
    return {op.name for op in forward if op.name not in kept and op.kind not in SIDE_EFFECT_KINDS}


def rerun(ops: list[Op], recomputable: dict[str, Op]) -> tuple[list[Op], list[Op]]:
    """(``ops`` with the recomputed copies inserted, the copies): before each op, a copy of every op of
    ``recomputable`` (a tensor's maker, for the tensors made again rather than kept) making what it
    reads, walking back through ``recomputable`` to kept tensors; each op is recomputed once, the copies
    in their forward order (PopART's ``FindRequiredRecomputes``)."""
    order: dict[int, int] = {}  # the recomputable ops' forward order
    for op in recomputable.values():
        order.setdefault(id(op), len(order))
    available: set[str] = set()
    copies, out = [], []
    for op in ops:
        need, todo = {}, [t for t in op.inputs if t in recomputable and t not in available]
        while todo:
            f = recomputable[todo.pop()]
            if id(f) not in need:
                need[id(f)] = f
                todo += [t for t in f.inputs if t in recomputable and t not in available]
        for f in sorted(need.values(), key=lambda f: order[id(f)]):
            copy = dataclasses.replace(f)
            copies.append(copy)
            out.append(copy)
            available.update(f.outputs)
        out.append(op)
    return out, copies


def notes(g: Graph, auto: int, strategy: str, marks: set[str], explicit: bool = False) -> list[str]:
    """What a training run's recomputation settings do where the run alone would not say it: checkpoints or a
    type that recompute nothing, phased execution's marks, and a pipeline's automatic type beside
    ``explicitRecomputation`` (``explicit``), which is not modelled as PopART runs it; ``auto`` its
    ``autoRecomputation`` number, ``strategy`` its execution strategy, ``marks`` the ops :func:`marked` or
    :func:`marked_phased` gave (empty for a pipeline)."""
    forward = [op for op in g.ops if op.pass_ == "forward"]
    user = len(user_marks(g))
    if strategy.endswith("phased"):
        if auto:
            return [f"autoRecomputation {TYPES[auto]} in phased execution: PopART marks the {len(marks)} forward ops "
                    "that are not recomputation checkpoints Recompute (its StreamingMemory transform, whatever the "
                    "type), and each runs again in the backward phase of its forward phase where an op there reads it"]
        if any(has_checkpoint(op) for op in forward) and not user:
            return ["recomputation checkpoints in phased execution with autoRecomputation None (PopTorch's and "
                    "PopART's default): nothing is recomputed, so a later phase reads every activation it needs "
                    "from the forward phases; any other type (opts._Popart.set(\"autoRecomputation\", 1)) "
                    "recomputes each phase's ops but the checkpoints in its backward phase"]
        return []
    if strategy == "pipelined":  # any automatic type recomputes every stage's ops; check_pipeline takes user marks
        if explicit and auto in (1, 2, 4):  # check_pipeline refuses Pipeline (3) beside explicitRecomputation
            return [f"not modelled: explicitRecomputation with autoRecomputation {TYPES[auto]} in a pipeline: PopART "
                    f"marks the forward ops {TYPES[auto]} chooses (ir.cpp autoAnnotate) and clones them into the "
                    "backward stages that read them (ExplicitRecompute) before its pipeline transform; the simulator "
                    "recomputes every forward stage from its stashed inputs instead, as with the type alone"]
        return []
    if marks:
        return []
    if auto:
        return [f"autoRecomputation {TYPES[auto]} marks no op of this model for recomputation; no effect"]
    if any(has_checkpoint(op) for op in forward):
        return ["recomputation checkpoints: with autoRecomputation None (PopTorch's default for a model that is not "
                "pipelined, PopART's always) PopART recomputes nothing, so every activation the backward pass "
                "reads is kept; RecomputeAll (opts._Popart.set(\"autoRecomputation\", 4), ipusim's "
                "--auto-recomputation recompute-all) recomputes between the checkpoints, Standard (1) lets PopART "
                "choose what to keep"]
    return []
