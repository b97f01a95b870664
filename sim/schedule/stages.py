"""Splitting a placed graph into the stages a schedule runs.

Forward stages come from the ops' ``stage`` annotations (see :mod:`sim.strategy`). In training,
PopART's pipeline has ``2F - 1`` stages: forward stages ``0 .. F-1``, the last merged with its
backward, then backward stages for forward stages ``F-2 .. 0``. A backward stage of a pipelined
model recomputes what its gradient ops need just before they need it (PopART's
``RecomputationType::Pipeline``): forward stages stash their inputs and their recomputation
checkpoints, so a checkpoint per layer means one layer is recomputed at a time. A training run
that is not pipelined recomputes the ops PopART marks Recompute (:mod:`sim.schedule.recomputation`).

A :class:`StageWork` records what one stage runs, which host streams it feeds or drains, and
which tensors it sends to other stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import OptionsError
from ..graph.ir import Graph, Op
from .recomputation import has_checkpoint, is_checkpoint, kept, rerun


@dataclass
class StageWork:
    """One stage of a schedule (IPU indices are within a replica)."""

    index: int
    ipu: int
    forward_stage: int  # the forward stage it runs or differentiates
    ops: list[Op] = field(default_factory=list)  # in run order (recomputed forward ops first)
    recomputed: list[Op] = field(default_factory=list)
    host_inputs: list[str] = field(default_factory=list)
    host_outputs: list[str] = field(default_factory=list)
    sends: dict[int, int] = field(default_factory=dict)  # destination stage index -> bytes
    inputs_bytes: int = 0  # bytes of tensors it receives from other stages or the host
    stash_depth: int = 0  # micro-batches of its inputs (and checkpoints) kept for its backward stage
    # bytes of the tensors it makes that its backward stage restores from the stash, per micro-batch: its
    # checkpoints' outputs when the pipeline recomputes, every activation the backward stage reads when not
    stashed_bytes: int = 0
    hold: set[str] = field(default_factory=set)  # activations it makes or reads that a later phase reads:
    # live to the end of its run (phased execution)
    through_bytes: int = 0  # bytes of activations of earlier phases a later phase reads, live throughout its run
    memory_runs: list[list[Op]] | None = None  # how its ops split into runs for tile memory
    restored: set[str] = field(default_factory=set)  # tensors a backward stage reads from the stash

    @property
    def is_backward(self) -> bool:
        return any(op.pass_ == "backward" for op in self.ops)

    @property
    def held_bytes(self) -> int:
        """Bytes it keeps on its IPU beyond its own run: stashed inputs and the tensors it stashes."""
        return self.stash_depth * (self.inputs_bytes + self.stashed_bytes)


def split_stages(g: Graph, training: bool, recompute: bool = True, final_stage: bool = True,
                 recomputed: frozenset[str] = frozenset(), pipelined: bool = True) -> tuple[list[StageWork], list[Op]]:
    """(stages in pipeline order, update ops) of a placed graph. ``recompute``: a pipelined training
    run's backward stages recompute their forward stages, and with ``final_stage`` (PopART's Pipeline
    type) the last forward stage recomputes between its checkpoints too; without it, a pipeline's
    forward stages stash every activation their backward stages read (:func:`_stash_activations`).
    ``recomputed``: the forward ops PopART marks Recompute, rerun before the backward ops that read them:
    :func:`sim.schedule.recomputation.marked`'s in a training run that is not pipelined, or the user marks a
    pipeline without ``recompute`` accepts (:func:`sim.schedule.recomputation.check_pipeline`). ``pipelined``
    False (one IPU, sharded): one micro-batch is in flight, so a stage keeps nothing for more than one."""
    forward = [op for op in g.ops if op.pass_ == "forward"]
    fwd_ids = sorted({op.stage for op in forward})
    F = len(fwd_ids)
    rank = {s: i for i, s in enumerate(fwd_ids)}
    P = 2 * F - 1 if training else F
    ipu_of = {}
    for op in forward:
        ipu_of.setdefault(rank[op.stage], op.ipu)
    stages = [StageWork(i, ipu_of[min(i, P - 1 - i) if training else i], min(i, P - 1 - i) if training else i)
              for i in range(P)]
    where: dict[str, int] = {}  # op name -> stage index
    by_name = {op.name: op for op in g.ops}
    made_in: dict[str, int] = {}
    for op in forward:
        where[op.name] = rank[op.stage]
        stages[rank[op.stage]].ops.append(op)
        for t in op.inputs:
            if made_in.get(t, -1) > rank[op.stage] and op.phase is not None:  # a phased strategy's phases
                raise OptionsError(
                    f"op {op.name!r} in phase {op.phase} reads {t!r}, made in a later phase; phases run one after "
                    "another, so they must follow the model's order: list the Phases of the SerialPhasedExecution "
                    "or ParallelPhasedExecution in the order the model's blocks run")
            if made_in.get(t, -1) > rank[op.stage]:
                raise OptionsError(
                    f"op {op.name!r} in pipeline stage {op.stage} reads {t!r}, made in a later stage; "
                    "stages must follow the model's order. With AutoStage.SameAsIpu a block placed back on "
                    "an earlier IPU joins that IPU's first stage: give the strategy AutoStage.AutoIncrement "
                    "(PipelinedExecution(AutoStage.AutoIncrement), or ShardedExecution(AutoStage.AutoIncrement) "
                    "for IPUs that run one at a time) or list the stages explicitly")
        for t in op.outputs:
            made_in[t] = rank[op.stage]
    updates = []
    for op in g.ops:
        if op.pass_ == "backward":
            fwd = by_name.get(op.forward_of)  # accumulators have none: they follow their weight's user
            i = rank[fwd.stage if fwd is not None else op.stage]
            where[op.name] = P - 1 - i if training else i
            stages[where[op.name]].ops.append(op)
        elif op.pass_ == "update":
            updates.append(op)
    if training and F > 1 and recompute:
        for s in stages[F:]:
            _recompute_just_in_time(s, stages[s.forward_stage], g)
        if final_stage:
            # the last forward stage, merged with its backward, recomputes between its checkpoints too
            # (PopART's Pipeline::setFinalFwdStageRecomputation: only the ops after its last checkpoint
            # are kept rather than recomputed)
            last = [op for op in stages[F - 1].ops if op.pass_ == "forward"]
            ends = [i for i, op in enumerate(last) if has_checkpoint(op)]
            recompute_marked(stages[F - 1], {op.name for op in last[:ends[-1] + 1] if not is_checkpoint(op)}
                              if ends else set())
    elif training and F > 1 and pipelined:
        for s in stages[F:]:
            _stash_activations(s, stages[s.forward_stage], g, recomputed)
        if recomputed:  # the last forward stage, merged with its backward, reruns its marked ops too
            recompute_marked(stages[F - 1], recomputed)
    elif training and recomputed:
        for s in stages[F - 1:]:
            recompute_marked(s, recomputed, stages[s.forward_stage])
    _flows(g, stages, where, training, F, pipelined)
    return stages, updates


def recompute_marked(stage: StageWork, marks: set[str], forward: StageWork | None = None) -> None:
    """Recomputation in a stage that is not a pipelined backward stage: before each of its backward ops,
    the ops of ``forward`` (default: its own forward ops) named in ``marks`` that make what it reads are
    run again (:func:`~sim.schedule.recomputation.rerun`). A stage running forward and backward ops keeps
    two runs for tile memory: the forward pass, and the backward pass with the recomputed ops."""
    recomputable = _recomputable(forward or stage, marks)
    own = [op for op in stage.ops if op.pass_ == "forward"]
    again, copies = rerun([op for op in stage.ops if op.pass_ != "forward"], recomputable)
    if not copies:
        return
    stage.recomputed, stage.ops = copies, own + again
    if own:
        stage.memory_runs = [own, again]


def _recompute_just_in_time(stage: StageWork, forward: StageWork, g: Graph) -> None:
    """Recomputation in a pipelined backward stage, as PopART does it.

    Before each gradient op, the forward ops making the forward tensors it reads are recomputed
    (PopART's ``FindRequiredRecomputes::getPipelineRecomputeOps``), walking back to tensors
    that are not recomputed: the forward stage's inputs and its checkpoints' outputs, both
    restored from the stash, and weights. With a checkpoint per layer, one layer's activations
    are recomputed just before that layer's gradients, and freed after them. The forward stage
    stashes the checkpoint outputs this stage reads (``stashed_bytes``), and ``restored``
    lists what this stage reads from the stash.
    """
    checkpoints = kept(forward.ops)
    recomputable = {t: op for op in forward.ops for t in op.outputs if t not in checkpoints}
    stage.ops, stage.recomputed = rerun(stage.ops, recomputable)
    reads = {t for op in stage.ops for t in op.inputs}
    _restore(stage, forward, reads & checkpoints, g)


def _stash_activations(stage: StageWork, forward: StageWork, g: Graph, marks: frozenset[str] = frozenset()) -> None:
    """A pipelined backward stage with ``autoRecomputation`` None restores from the stash every tensor its forward
    stage made that it reads: PopART stashes all its stash candidates then (transforms/pipeline.cpp
    ``prepareForStashing``: "If there is no recomputation ... the candidates for stashing will all be stashed"),
    each in its own StashOp and RestoreOp. The forward ops the model marks Recompute (``marks``: a pipeline takes
    them with explicitRecomputation or explicit pipelining, :func:`sim.schedule.recomputation.check_pipeline`)
    run again before the backward ops that read them instead (ExplicitRecompute's clones in the backward
    stage), and what they make is not stashed."""
    made = {t for op in forward.ops if op.pass_ == "forward" for t in op.outputs}
    recomputable = _recomputable(forward, marks)
    if recomputable:
        stage.ops, stage.recomputed = rerun(stage.ops, recomputable)
    again = {t for op in stage.recomputed for t in op.outputs}
    _restore(stage, forward, {t for op in stage.ops for t in op.inputs} & made - again, g)


def _recomputable(forward: StageWork, marks: frozenset[str] | set[str]) -> dict[str, Op]:
    """Each tensor an op of ``forward`` named in ``marks`` makes -> that op (what :func:`rerun` may make again);
    of an op marked for its other outputs, not its recomputation checkpoints. An op whose outputs are all
    checkpoints and is marked all the same (Standard: PopART's annotateStandard marks what it does not keep,
    whatever the user's Checkpoint) makes them again."""
    out = {}
    for op in forward.ops:
        if op.pass_ == "forward" and op.name in marks:
            kept_outputs = frozenset() if is_checkpoint(op) else op.checkpointed
            out.update((t, op) for t in op.outputs if t not in kept_outputs)
    return out


def _restore(stage: StageWork, forward: StageWork, tensors: set[str], g: Graph) -> None:
    """Backward ``stage`` restores ``tensors``, made by its ``forward`` stage, from that stage's stash."""
    forward.stashed_bytes = sum(g.tensors[t].nbytes for t in tensors)
    stage.restored |= tensors


def _flows(g: Graph, stages: list[StageWork], where: dict[str, int], training: bool, F: int,
           pipelined: bool = True) -> None:
    """Host streams, inter-stage sends and stash depths of each stage (one micro-batch when not ``pipelined``)."""
    producer = {}
    for op in g.ops:
        for t in op.outputs:
            producer.setdefault(t, op.name)
    first_consumer: dict[str, int] = {}
    first_reader: dict[str, int] = {}  # weight -> the first forward stage reading it
    received: set[tuple[str, int]] = set()
    always_live = ("weight", "constant", "state", "accumulator")
    outside = {}  # forward stage -> tensors it reads that it does not make (its stashed inputs)
    for s in stages[:F]:
        own = {t for op in s.ops for t in op.outputs}
        outside[s.index] = {t for op in s.ops for t in op.inputs
                            if t not in own and g.tensors[t].role not in always_live}
    for s in stages:
        own = {t for op in s.ops for t in op.outputs}
        for op in s.ops:
            if op.pass_ == "update":
                continue
            for t in op.inputs:
                tensor = g.tensors[t]
                if tensor.role == "weight" and s.index < F:
                    # a weight read on another IPU than its first reader's: PopART's InterIpuCopy copies it there
                    # each run (transforms/interipucopy.cpp; a pipeline refuses it, sim.compiler.executable)
                    src = first_reader.setdefault(t, s.index)
                    if stages[src].ipu != s.ipu and (t, s.index) not in received:
                        received.add((t, s.index))
                        stages[src].sends[s.index] = stages[src].sends.get(s.index, 0) + tensor.nbytes
                        s.inputs_bytes += tensor.nbytes
                    continue
                if tensor.role in always_live or t in own:
                    continue
                if training and s.index >= F and t in outside[s.forward_stage]:
                    s.restored.add(t)  # a backward stage reads its forward stage's inputs from the stash
                    continue
                if tensor.role == "input":
                    src = first_consumer.setdefault(t, s.index)
                    if src == s.index:
                        if t not in s.host_inputs:
                            s.host_inputs.append(t)
                        continue
                else:
                    src = where.get(producer.get(t), s.index)
                    # a backward stage reads what its forward stage made from its own IPU
                    if training and src == s.forward_stage and s.index >= F:
                        continue
                if src != s.index and (t, s.index) not in received:
                    received.add((t, s.index))
                    stages[src].sends[s.index] = stages[src].sends.get(s.index, 0) + tensor.nbytes
                    s.inputs_bytes += tensor.nbytes
        s.inputs_bytes += sum(g.tensors[t].nbytes for t in s.host_inputs)
    for t in g.outputs:
        src = where.get(producer.get(t))
        if src is None:  # an output no op makes (a host input, a variable or a constant stored back): the
            # stage that reads it, or the first
            src = first_consumer.get(t, next((where[op.name] for op in g.ops if t in op.inputs and op.name in where),
                                             0))
        stages[src].host_outputs.append(t)
    if training and F > 1:
        for s in stages[:F - 1]:
            s.stash_depth = (len(stages) - 1 - s.index) - s.index + 1 if pipelined else 1
