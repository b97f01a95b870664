"""Collective ops inside a model (PopXL's ``ops.collectives``, PopTorch's cross-replica ops, and
batch norms whose statistics span several replicas).

A graph op of kind ``replicated_all_reduce``, ``replicated_reduce_scatter``,
``replicated_all_gather`` or ``replicated_all_to_all`` runs as a :class:`~sim.program.Collective` between the compute of the
ops before and after it, over the replicas of its group. Groups follow PopXL's
``replica_grouping(stride, group_size)``: a group holds ``group_size`` replicas ``stride``
apart; the default (no group size) is every replica.

A training batch norm (or its gradient) with ``replica_group_size`` k > 1 is a distributed
batch norm over groups of k adjacent replicas: its compute runs as usual and a collective
follows it. poplibs passes two per-channel vectors to the framework's all-reduce callback
(``lib/poplin/Norms.cpp``): the statistics' mean (the activations' type) and power (the partials
type, ``FLOAT`` by default) in ``normStatisticsImpl``, the two gradient sums (the partials type)
in ``normStatisticsGradientsImpl``; with the stable estimator (``stable_statistics``) the mean's
all-reduce, then the power's. poplibs reduces before it normalises; the simulator runs the
collectives after the op, the same time on the IPU.
"""

from __future__ import annotations

from .collectives import plan_collective, replica_grouping
from ..errors import OptionsError
from ..graph.ir import DTYPE_BYTES, Op
from ..program import Collective

KINDS = {"replicated_all_reduce": "all_reduce", "replicated_reduce_scatter": "reduce_scatter",
         "replicated_all_gather": "all_gather", "replicated_all_to_all": "all_to_all"}
#: ops that are a distributed norm when their ``replica_group_size`` is above 1
NORM_KINDS = ("batchnorm", "batchnorm_grad")
PARTIALS_BYTES = 4  # poplin's norms default partialsType, FLOAT
NORM_COLLECTIVE_SUFFIX = "statistics all-reduce"  # a distributed norm's collective is "<op> statistics all-reduce"


def spans_replicas(op: Op) -> bool:
    """Is ``op`` a training batch norm (or its gradient) whose statistics span several replicas?"""
    return (op.kind in NORM_KINDS and op.attrs.get("replica_group_size", 1) > 1
            and not op.attrs.get("inference"))


def _collective_of(ctx, op: Op) -> tuple[str, tuple[int, ...], int, int | None]:
    """(collective, bytes per member of each call in order, group stride, group size) of a
    collective op or a distributed norm."""
    tensors = ctx.g.tensors
    if op.kind in KINDS:
        kind = KINDS[op.kind]
        nbytes = tensors[op.outputs[0]].nbytes if kind == "all_gather" else tensors[op.inputs[0]].nbytes
        return kind, (nbytes,), op.attrs.get("group_stride", 1), op.attrs.get("group_size")
    k, R = op.attrs["replica_group_size"], ctx.options.total_replicas()
    if R % k:
        raise OptionsError(
            f"{op.name}: its batch norm statistics span {k} replicas (replica_group_size, the models' "
            f"bn_span), which must divide the {R} replicas; set replicationFactor to a multiple of {k} "
            "or bn_span to 1")
    x = tensors[op.inputs[1] if op.kind == "batchnorm_grad" else op.inputs[0]]
    channels = x.shape[1]
    if op.kind == "batchnorm_grad":
        return "all_reduce", (channels * 2 * PARTIALS_BYTES,), 1, k
    if op.attrs.get("stable_statistics"):  # the mean's all-reduce, then the power's (Norms.cpp, stableAlgo)
        return "all_reduce", (channels * DTYPE_BYTES[x.dtype], channels * PARTIALS_BYTES), 1, k
    return "all_reduce", (channels * (DTYPE_BYTES[x.dtype] + PARTIALS_BYTES),), 1, k


def group_members(rank: int, replicas: int, stride: int = 1, group_size: int | None = None) -> list[int]:
    """The replicas in ``rank``'s group under PopXL's ``replica_grouping(stride, group_size)``."""
    assignment = replica_grouping(replicas, stride, group_size)
    return [r for r, g in enumerate(assignment) if g == assignment[rank]]


def collectives_for(ctx, op: Op) -> list[Collective]:
    """The collectives of ``op``: one per replica group that has simulated members.

    Each spans its group's simulated replicas (a barrier over them); the group's other
    replicas behave the same and are priced into its ring.
    """
    kind, sizes, stride, size = _collective_of(ctx, op)
    k = ctx.ipus_per_replica
    R = ctx.options.total_replicas()
    name = f"{op.name} {NORM_COLLECTIVE_SUFFIX}" if op.kind in NORM_KINDS else op.name
    items, seen = [], set()
    for r in ctx.replicas:
        group = tuple(group_members(r, R, stride, size))
        if group in seen:
            continue
        seen.add(group)
        members = [m * k + op.ipu for m in group]
        simulated = [m * k + op.ipu for m in group if m in ctx.replicas]
        links = tuple(("ipu_link", a, b) for a, b in zip(simulated, simulated[1:] + simulated[:1]) if a != b)
        for nbytes in sizes:
            plan = plan_collective(ctx.system, kind, nbytes, members, ctx.collective_algorithm,
                                   partition_ipus=ctx.partition_ipus)
            items.append(Collective(tuple(simulated), kind, nbytes, len(members), plan.algorithm, plan.phases,
                                    links, name))
    return items
