"""Sharded execution: the model's stages run one after another, one IPU at a time.

Per micro-batch, the forward stages run in order (IPU 0 -> N) with a copy to the next stage's
IPU after each, then the backward stages in reverse (N -> 0); activations stay where they were
made (no recomputation). The optimizer update runs on all IPUs in parallel after the
accumulation loop.
"""

from __future__ import annotations

from ..program import IpuCopy, Repeat, Sequence
from .context import Context, device_iteration_loop


def _micro_batch(ctx: Context, with_outputs: bool) -> Sequence:
    seq = Sequence(name="micro-batch")
    for s in ctx.stages:
        seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, [s], "to_ipu"))
        seq.items += ctx.stages_items([s])
        if with_outputs:
            seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, [s], "from_ipu"))

        def copy(r):
            ipus = ctx.ipus(r)
            transfers = tuple((ipus[s.ipu], ipus[ctx.stages[d].ipu], nbytes) for d, nbytes in sorted(s.sends.items())
                              if ipus[s.ipu] != ipus[ctx.stages[d].ipu])
            return [IpuCopy(transfers, f"shard copy after stage {s.index}")] if transfers else []
        seq.items += ctx.for_replicas(copy)
    seq.items += [i for i in ctx.for_replicas(lambda r: [ctx.replica_sync(r, "micro-batch sync")]) if i]
    return seq


def build(ctx: Context) -> Sequence:
    """The program of a sharded model for one call."""
    def step(with_outputs: bool) -> Sequence:
        if not ctx.training:
            return _micro_batch(ctx, with_outputs)
        s = Sequence(name="weight-update step")
        s.add(Repeat(ctx.options.Training.gradient_accumulation, _micro_batch(ctx, with_outputs),
                     "gradient accumulation", ctx.collapse_accumulation))
        s.add(ctx.weight_update())
        return s

    return device_iteration_loop(ctx, step)
