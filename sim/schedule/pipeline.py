"""Pipelined execution as PopART runs it (a single IPU is the one-stage case).

``G`` micro-batches pass through ``P`` stages in ``G + P - 1`` lockstep pipeline cycles:
``P - 1`` fill, ``G - (P - 1)`` main, ``P - 1`` flush. In cycle ``c`` stage ``s`` works on
micro-batch ``c - s``. Each cycle: the host-to-IPU copies of the active stages, the stages'
work (stages on one IPU run one after the other), the IPU-to-host copies, one merged inter-IPU
copy of every stage's sends, then a sync of the replica's IPUs. The copy is the same in every
cycle, fill and flush included: PopART's ``PopPrograms::addPipelineCycle`` always calls the one
function holding all the pipeline's IPU copies, so that they outline across cycles and merge
across stages (willow/src/popx/popprograms.cpp, step 5). Identical consecutive cycles (the main
phase) are one collapsed :class:`~sim.program.Repeat`. Each stage's items are built once and every cycle reuses
them, so building the ``2P - 1`` distinct cycles costs little beyond listing their stages.

Training: ``G = gradientAccumulation`` per weight update; the pipeline fills and flushes once
per update, followed by the gradient all-reduce and the optimizer step, and that repeats
``deviceIterations`` times. Inference: one pipeline over all ``G = deviceIterations``
micro-batches.
"""

from __future__ import annotations

from ..errors import OptionsError
from ..options import OutputMode, PipelineCopies
from ..program import IpuCopy, Parallel, Repeat, Sequence
from .context import Context, device_iteration_loop


def check_depth(ctx: Context) -> None:
    """PopTorch's errors for too few micro-batches to fill the pipeline."""
    P = len(ctx.stages)
    o = ctx.options
    if P < 2:
        return
    if ctx.training and o.Training.gradient_accumulation < P:
        raise OptionsError(
            f"Training.gradientAccumulation ({o.Training.gradient_accumulation}) must be greater than "
            f"or equal to the number of pipeline stages ({P} = 2 x {(P + 1) // 2} forward stages - 1) "
            "when using PipelinedExecution; raise gradientAccumulation or use fewer stages")
    if not ctx.training and o.device_iterations < P:
        raise OptionsError(
            f"deviceIterations ({o.device_iterations}) must be greater than or equal to the number of "
            f"pipeline stages ({P}) for a pipelined inference model; raise deviceIterations")


class _RangeLists:
    """Concatenations of per-stage lists over stage ranges ``first .. last``, each built from the
    previous one: consecutive pipeline cycles differ by a stage at one end, so a cycle costs a
    list copy, not a pass over its stages. Every call returns a new list."""

    def __init__(self, part):
        self.part = part  # stage index -> list
        self.first, self.last, self.value = 0, -1, []

    def __call__(self, first: int, last: int) -> list:
        if (first, last) == (self.first, self.last + 1):
            self.value = self.value + self.part(last)
        elif (first, last) == (self.first + 1, self.last):
            self.value = self.value[len(self.part(self.first)):]
        else:
            self.value = [x for s in range(first, last + 1) for x in self.part(s)]
        self.first, self.last = first, last
        return self.value


class _Cycles:
    """Builds pipeline cycles; each stage's items are made once (the schedule's lists for a cycle
    are then concatenations of them, see :class:`_RangeLists`), and each replica's inter-IPU
    copy, all stages' sends, once."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        P = len(ctx.stages)
        self.work = _RangeLists(lambda s: ctx.stage_items(ctx.stages[s]))
        # each replica's copies of a cycle: one merged group, or one group per stage (PipelineCopies)
        per_stage = ctx.options.pipeline_copies is PipelineCopies.PerStage
        self.copies = {r: [tuple(self._sends(r, s)) for s in ctx.stages] if per_stage
                       else [tuple(t for s in ctx.stages for t in self._sends(r, s))] for r in ctx.replicas}
        self.host_outputs = [s for s in range(P) if ctx.stages[s].host_outputs]

    def _sends(self, r: int, s) -> list:
        """The transfers of stage ``s``'s sends on replica ``r``: (source IPU, destination IPU, bytes)."""
        ipus = self.ctx.ipus(r)
        return [(ipus[s.ipu], ipus[self.ctx.stages[d].ipu], nbytes) for d, nbytes in sorted(s.sends.items())
                if ipus[s.ipu] != ipus[self.ctx.stages[d].ipu]]

    def cycle(self, first: int, last: int, outputs: bool) -> Sequence:
        """One pipeline cycle in which the stages ``first .. last`` work, for every simulated
        replica; the stages' work is a :class:`~sim.program.Parallel`, each stage on its own IPU."""
        ctx = self.ctx
        seq = Sequence(name="pipeline cycle")
        stages = ctx.stages[first:last + 1]
        seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "to_ipu"))
        seq.items.append(Parallel(self.work(first, last), "pipeline stages"))
        if outputs:
            seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "from_ipu"))

        def copy_and_sync(r):  # each copy group is an exchange of its own, a sync after it
            return [item for copies in self.copies[r] if copies
                    for item in (IpuCopy(copies, "pipeline copy"), ctx.replica_sync(r, "pipeline sync"))] or \
                [ctx.replica_sync(r, "pipeline sync")]

        seq.items += [i for i in ctx.for_replicas(copy_and_sync) if i is not None]
        return seq


def pipeline_cycles(ctx: Context, G: int, outputs_for, collapse: bool = True) -> Sequence:
    """The ``G + P - 1`` cycles for micro-batches ``0 .. G-1``; runs of equal cycles collapse.

    ``outputs_for(m)`` says whether micro-batch ``m`` copies its outputs to the host. In cycle
    ``c`` the stages ``first .. last`` work (``first = max(0, c - G + 1)``, ``last = min(P - 1, c)``).
    """
    P = len(ctx.stages)
    seq = Sequence(name="pipeline")
    previous, count = None, 0
    cycles = _Cycles(ctx)

    def flush_run():
        if previous is None:
            return
        first, last, out = previous
        body = cycles.cycle(first, last, out)
        seq.add(body if count == 1 else Repeat(count, body, "pipeline main" if last - first + 1 == P else "cycles",
                                               collapse))

    for c in range(G + P - 1):
        first, last = max(0, c - G + 1), min(P - 1, c)
        # outputs leave from the stage that makes them; they follow that stage's micro-batch
        out = any(outputs_for(c - s) for s in cycles.host_outputs if first <= s <= last)
        key = (first, last, out)
        if key == previous:
            count += 1
        else:
            flush_run()
            previous, count = key, 1
    flush_run()
    return seq


def build(ctx: Context) -> Sequence:
    """The program of a pipelined (or single-stage) model for one call."""
    check_depth(ctx)
    o = ctx.options
    if not ctx.training:
        n = o.output_return_period if ctx.mode == OutputMode.EveryN else 1
        every = ctx.mode in (OutputMode.All, OutputMode.EveryN)
        main = Sequence(name="main")
        if len(ctx.stages) == 1:  # no pipeline: the device-iteration loop collapses
            return device_iteration_loop(ctx, lambda out: pipeline_cycles(ctx, 1, lambda m: out))
        main.add(pipeline_cycles(ctx, o.device_iterations, lambda m: every and (m + 1) % n == 0,
                                 ctx.collapse_device))
        main.items += ctx.final_outputs()
        return main

    G = o.Training.gradient_accumulation

    def step(with_outputs: bool) -> Sequence:
        s = Sequence(name="weight-update step")
        s.add(pipeline_cycles(ctx, G, lambda m: with_outputs, ctx.collapse_accumulation))
        s.add(ctx.weight_update())
        return s

    return device_iteration_loop(ctx, step)
