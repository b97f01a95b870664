"""Collective ops inside a model (PopXL's ``ops.collectives``, PopTorch's cross-replica ops).

A graph op of kind ``replicated_all_reduce``, ``replicated_reduce_scatter``,
``replicated_all_gather`` or ``replicated_all_to_all`` runs as a :class:`~sim.program.Collective` between the compute of the
ops before and after it, over the replicas of its group. Groups follow PopXL's
``replica_grouping(stride, group_size)``: a group holds ``group_size`` replicas ``stride``
apart; the default (no group size) is every replica.
"""

from __future__ import annotations

from .collectives import plan_collective, replica_grouping
from ..graph.ir import Op
from ..program import Collective

KINDS = {"replicated_all_reduce": "all_reduce", "replicated_reduce_scatter": "reduce_scatter",
         "replicated_all_gather": "all_gather", "replicated_all_to_all": "all_to_all"}


def group_members(rank: int, replicas: int, stride: int = 1, group_size: int | None = None) -> list[int]:
    """The replicas in ``rank``'s group under PopXL's ``replica_grouping(stride, group_size)``."""
    assignment = replica_grouping(replicas, stride, group_size)
    return [r for r, g in enumerate(assignment) if g == assignment[rank]]


def collectives_for(ctx, op: Op) -> list[Collective]:
    """The collectives of ``op``: one per replica group that has simulated members.

    Each spans its group's simulated replicas (a barrier over them); the group's other
    replicas behave the same and are priced into its ring.
    """
    tensors = ctx.g.tensors
    kind = KINDS[op.kind]
    k = ctx.ipus_per_replica
    R = ctx.options.total_replicas()
    nbytes = tensors[op.outputs[0]].nbytes if kind == "all_gather" else tensors[op.inputs[0]].nbytes
    items, seen = [], set()
    for r in ctx.replicas:
        group = tuple(group_members(r, R, op.attrs.get("group_stride", 1), op.attrs.get("group_size")))
        if group in seen:
            continue
        seen.add(group)
        members = [m * k + op.ipu for m in group]
        plan = plan_collective(ctx.system, kind, nbytes, members, ctx.collective_algorithm)
        simulated = [m * k + op.ipu for m in group if m in ctx.replicas]
        links = tuple(("ipu_link", a, b) for a, b in zip(simulated, simulated[1:] + simulated[:1]) if a != b)
        items.append(Collective(tuple(simulated), kind, nbytes, len(members), plan.algorithm, plan.phases,
                                links, op.name))
    return items
