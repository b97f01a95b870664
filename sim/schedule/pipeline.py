"""Pipelined execution as PopART runs it (a single IPU is the one-stage case).

``G`` micro-batches pass through ``P`` stages in ``G + P - 1`` lockstep pipeline cycles:
``P - 1`` fill, ``G - (P - 1)`` main, ``P - 1`` flush. In cycle ``c`` stage ``s`` works on
micro-batch ``c - s``. Each cycle: the host-to-IPU copies of the active stages, the stages'
work (stages on one IPU run one after the other), the IPU-to-host copies, one merged inter-IPU
copy, then a sync of the replica's IPUs. Identical consecutive cycles (the main phase) are one
collapsed :class:`~sim.program.Repeat`.

Training: ``G = gradientAccumulation`` per weight update; the pipeline fills and flushes once
per update, followed by the gradient all-reduce and the optimizer step, and that repeats
``deviceIterations`` times. Inference: one pipeline over all ``G = deviceIterations``
micro-batches.
"""

from __future__ import annotations

from ..errors import OptionsError
from ..options import OutputMode
from ..program import IpuCopy, Repeat, Sequence
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


def _cycle(ctx: Context, active: tuple[int, ...], outputs: bool) -> Sequence:
    """One pipeline cycle in which the stages ``active`` work, for every simulated replica."""
    seq = Sequence(name="pipeline cycle")
    stages = [ctx.stages[i] for i in active]
    seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "to_ipu"))
    seq.items += ctx.stages_items(stages)
    if outputs:
        seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "from_ipu"))

    def copy_and_sync(r):
        ipus = ctx.ipus(r)
        transfers = tuple((ipus[s.ipu], ipus[ctx.stages[d].ipu], nbytes)
                          for s in stages for d, nbytes in sorted(s.sends.items())
                          if ipus[s.ipu] != ipus[ctx.stages[d].ipu])
        return [IpuCopy(transfers, "pipeline copy")] * bool(transfers) + [ctx.replica_sync(r, "pipeline sync")]

    seq.items += [i for i in ctx.for_replicas(copy_and_sync) if i is not None]
    return seq


def pipeline_cycles(ctx: Context, G: int, outputs_for, collapse: bool = True) -> Sequence:
    """The ``G + P - 1`` cycles for micro-batches ``0 .. G-1``; runs of equal cycles collapse.

    ``outputs_for(m)`` says whether micro-batch ``m`` copies its outputs to the host.
    """
    P = len(ctx.stages)
    seq = Sequence(name="pipeline")
    previous, count = None, 0

    def flush_run():
        if previous is None:
            return
        body = _cycle(ctx, *previous)
        seq.add(body if count == 1 else Repeat(count, body, "pipeline main" if len(previous[0]) == P else "cycles",
                                               collapse))

    for c in range(G + P - 1):
        active = tuple(s for s in range(P) if 0 <= c - s < G)
        # outputs leave from the stage that makes them; they follow that stage's micro-batch
        out = any(outputs_for(c - s) for s in active if ctx.stages[s].host_outputs)
        key = (active, out)
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
