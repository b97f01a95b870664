"""Execution strategies: how a model's blocks map to stages, IPUs and phases (PopTorch names).

A *block* is a named group of ops (``Op.block``, set by ``poptorch.Block``/``BeginBlock`` or
the zoo's placement). A :class:`Stage` is one or more blocks that run on one IPU; a strategy
orders stages:

* :class:`PipelinedExecution`: stages form a pipeline (the default when a model uses several
  IPUs);
* :class:`ShardedExecution`: the same stages, but one IPU works at a time;
* :class:`SerialPhasedExecution` / :class:`ParallelPhasedExecution`: stages grouped into
  phases that run one after another, loading what they need from streaming memory.

:func:`assign` writes the resolved ``stage``, ``ipu`` and ``phase`` onto every op.
"""

from __future__ import annotations

import enum

from .errors import OptionsError
from .graph.ir import Graph


class AutoStage(enum.IntEnum):
    """How stages are numbered when none are given: by IPU, or a new one per block change."""

    SameAsIpu = 0
    AutoIncrement = 1


class SyncPattern(enum.IntEnum):
    """Which IPUs sync together (PopTorch ``SyncPattern``)."""

    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class Liveness(enum.IntEnum):
    """Where phased execution keeps tensors between phases (PopTorch ``Liveness``)."""

    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class Stage:
    """One or more blocks that run on one IPU."""

    def __init__(self, *block_ids: str):
        if not all(isinstance(b, str) for b in block_ids):
            raise OptionsError(f"Stage: block ids must be strings, got {block_ids!r}")
        self.blocks = tuple(block_ids)
        self._ipu: int | None = None
        self._stage_id: int | None = None
        self._phase_id: int | None = None

    def ipu(self, ipu: int) -> "Stage":
        """Run this stage on ``ipu``."""
        if not isinstance(ipu, int) or ipu < 0:
            raise OptionsError(f"Stage.ipu: expected an IPU index >= 0, got {ipu!r}")
        self._ipu = ipu
        return self

    def __repr__(self) -> str:
        return f"Stage{self.blocks}" + (f".ipu({self._ipu})" if self._ipu is not None else "")


class Phase:
    """Stages that run at the same time, each on its own IPU."""

    def __init__(self, *args):
        if args and all(isinstance(a, Stage) for a in args):
            self.stages = list(args)
        elif all(isinstance(a, str) for a in args):
            self.stages = [Stage(*args)]
        else:
            raise OptionsError("Phase: arguments must all be Stages or all be block ids (strings)")

    def stage(self, idx: int) -> Stage:
        return self.stages[idx]

    def ipus(self, *ipus: int) -> "Phase":
        """One IPU per stage of the phase."""
        if len(ipus) != len(self.stages):
            raise OptionsError(f"Phase contains {len(self.stages)} stages but {len(ipus)} IPUs were given")
        for stage, ipu in zip(self.stages, ipus):
            stage.ipu(ipu)
        return self


class _Strategy:
    name = "strategy"

    def __init__(self):
        self.block_map: dict[str, Stage] = {}

    def stage(self, block_id: str) -> Stage:
        if block_id not in self.block_map:
            raise OptionsError(f"unknown block {block_id!r}; known: {list(self.block_map)}")
        return self.block_map[block_id]


class PipelinedExecution(_Strategy):
    """Stages run as a pipeline. Arguments: stages, block ids, lists of block ids, or one AutoStage."""

    name = "pipelined"

    def __init__(self, *args):
        super().__init__()
        self.auto_stage = AutoStage.SameAsIpu
        if len(args) == 1 and isinstance(args[0], AutoStage):
            self.auto_stage = args[0]
            return
        for stage_id, arg in enumerate(args):
            if isinstance(arg, Stage):
                stage = arg
            elif isinstance(arg, str):
                stage = Stage(arg)
            elif isinstance(arg, (list, tuple)):
                stage = Stage(*arg)
            else:
                raise OptionsError(f"{type(self).__name__}: argument {arg!r} is not a Stage or block id")
            stage._stage_id = stage_id
            for block in stage.blocks:
                if block in self.block_map:
                    raise OptionsError(f"block {block!r} is associated with more than one stage")
                self.block_map[block] = stage


class ShardedExecution(PipelinedExecution):
    """The same stages as a pipeline, but only one IPU works at a time."""

    name = "sharded"


class _PhasedExecution(_Strategy):
    serial = True

    def __init__(self, *phases):
        super().__init__()
        if len(phases) == 1 and isinstance(phases[0], list) and phases[0] and all(
                isinstance(p, Phase) for p in phases[0]):
            phases = tuple(phases[0])
        if not phases:
            raise OptionsError("phased execution needs the phases to be given explicitly")
        self.liveness = Liveness.AlwaysLive
        self.separate_backward_phase = False
        #: PopART's executionPhaseSettings.phases when set (sim.popart); None: the ops' forward phases
        self.phase_count: int | None = None
        self.phases: list[Phase] = []
        for phase_id, arg in enumerate(phases):
            phase = arg if isinstance(arg, Phase) else Phase(*(arg if isinstance(arg, (list, tuple)) else [arg]))
            self.phases.append(phase)
            for stage in phase.stages:
                stage._phase_id = phase_id
                for block in stage.blocks:
                    if block in self.block_map:
                        raise OptionsError(f"block {block!r} is associated with more than one stage")
                    self.block_map[block] = stage

    def phase(self, phase: int) -> Phase:
        return self.phases[phase]

    def useSeparateBackwardPhase(self, use: bool = True):
        """Backward phases do not share the last forward phase."""
        self.separate_backward_phase = bool(use)
        return self


class SerialPhasedExecution(_PhasedExecution):
    """Phases run one after another on one group of IPUs."""

    name = "serial_phased"

    def setTensorsLiveness(self, liveness: Liveness) -> "SerialPhasedExecution":
        if not isinstance(liveness, Liveness):
            raise OptionsError(f"setTensorsLiveness expects a Liveness, got {liveness!r}")
        self.liveness = liveness
        return self


class ParallelPhasedExecution(_PhasedExecution):
    """Phases alternate between two groups of IPUs (even and odd)."""

    name = "parallel_phased"
    serial = False

    def sendTensorsOffChipAfterFwd(self, off_chip: bool = True) -> "ParallelPhasedExecution":
        self.liveness = Liveness.OffChipAfterFwd if off_chip else Liveness.AlwaysLive
        return self


def assign(graph: Graph, strategy: _Strategy | None) -> str:
    """Resolve every op's ``stage``, ``ipu`` and ``phase``; returns the strategy's name.

    Backward and update ops follow their forward op. Ops with no block inherit the block of
    the op before them (as ops traced after ``BeginBlock``). Without a strategy, a model on
    several IPUs is pipelined with stages as annotated (or one per IPU), as in PopTorch.
    """
    forward = [op for op in graph.ops if op.pass_ == "forward"]
    if strategy is None or (isinstance(strategy, PipelinedExecution) and not strategy.block_map):
        auto = strategy.auto_stage if strategy is not None else None
        _auto_stages(forward, auto)
        name = strategy.name if strategy is not None else ("pipelined" if len(
            {op.ipu or 0 for op in forward}) > 1 else "single")
    else:
        last_block = None
        for op in forward:
            block = op.block if op.block is not None else last_block
            if block is None:
                raise OptionsError(f"op {op.name!r} is in no block, but the {strategy.name} strategy "
                                   f"places blocks {list(strategy.block_map)}; wrap the model's first "
                                   "layer in a Block")
            last_block = block
            stage = strategy.stage(block)
            if isinstance(strategy, _PhasedExecution):
                op.phase = stage._phase_id
                op.stage = stage._phase_id
            else:
                op.stage = stage._stage_id
            if stage._ipu is not None:
                op.ipu = stage._ipu
            elif op.ipu is None:
                op.ipu = op.stage if not isinstance(strategy, _PhasedExecution) else 0
        name = strategy.name
    by_name = {op.name: op for op in forward}
    first_user = {}
    for op in forward:
        for t in op.inputs:
            first_user.setdefault(t, op)
    for op in graph.ops:
        if op.forward_of:
            src = by_name.get(op.forward_of)
        else:  # accumulators and optimizer updates go with their weight's first user
            src = first_user.get(op.attrs.get("weight")) if op.pass_ != "forward" else None
        if src is not None:
            op.stage, op.ipu, op.phase = src.stage, src.ipu, src.phase
        if op.ipu is None:
            op.ipu = 0
        if op.stage is None:
            op.stage = op.ipu
    if name == PipelinedExecution.name:
        _merge_consecutive_stages(graph)
    return name


def _merge_consecutive_stages(graph: Graph) -> None:
    """PopART's ``mergeConsecutivePipelineStages`` (willow/src/transforms/pipeline.cpp, before its
    check that gradientAccumulation covers the stages): pipeline stages next to each other in stage
    order that run on the same IPU become one. A block per layer under ``AutoStage.AutoIncrement``
    (Graphcore's PyTorch BERT and GPT-2) therefore pipelines as one stage per IPU, as PopTorch counts
    them (``CompilerImpl::numPipelineStages``: one more stage each time the IPU changes); stages that
    come back to an IPU (0, 1, 0) stay apart."""
    ipu_of = {op.stage: op.ipu for op in graph.ops if op.pass_ == "forward"}
    renumber, merged, previous = {}, 0, None
    for stage in sorted(ipu_of):
        if ipu_of[stage] == previous:
            merged += 1
        renumber[stage] = stage - merged
        previous = ipu_of[stage]
    if merged:
        for op in graph.ops:
            op.stage = renumber.get(op.stage, op.stage)


def _auto_stages(forward, auto: AutoStage | None) -> None:
    """Stages when none are listed: keep annotated ones, else by IPU or by block change.

    Under ``AutoStage.AutoIncrement`` PopTorch numbers each new block's stage from 1 and runs a block
    given no ``ipu_id`` on the IPU of its stage's number (python/options.py ``_DefaultStageManager``,
    _options_impl.py ``beginStage``: ``ipu = stage._stage_id`` when neither the stage nor the block names
    one), so blocks A and B without IPUs run on IPUs 1 and 2."""
    if all(op.stage is not None for op in forward) and auto is None:
        return
    if auto == AutoStage.AutoIncrement:
        numbers: dict = {}
        for op in forward:
            if op.block is not None:
                number = numbers.setdefault(op.block, len(numbers) + 1)
                if op.ipu is None:
                    op.ipu = number
    stage, previous = -1, object()
    for op in forward:
        ipu = op.ipu or 0
        if auto == AutoStage.AutoIncrement:
            key = (op.block, ipu)
            if key != previous:
                stage += 1
                previous = key
            op.stage = stage
        elif op.stage is None or auto == AutoStage.SameAsIpu:
            op.stage = ipu
        op.ipu = ipu
