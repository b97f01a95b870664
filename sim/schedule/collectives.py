"""Collectives across replicas (GCL-style): algorithms, their steps and what they cost.

A collective over ``N`` members on tensors of ``S`` bytes runs as steps. In a step every
member sends one chunk over the edges the algorithm uses, so a step lasts as long as its
slowest edge: the link latency (once per IPU-Link hop, or a GW-Link's where the edge leaves
the POD) plus the chunk over the edge's bandwidth, after GCL's fixed step time and a sync over every
IPU of the partition (:func:`partition_sync`). An IPU-Link direction carries one edge at a
time; a chassis' GW-Links are shared by every edge leaving the chassis in that step (and by
``concurrent`` collectives running at once). Algorithms:

``ring``                one direction round the ring; all-reduce = reduce-scatter then
                        all-gather, ``2(N-1)`` steps of ``S/N``; reduce-scatter, all-gather and
                        all-to-all ``N-1`` steps of ``S/N``
``bidirectional_ring``  two rings in opposite directions, each on half the data: the same steps
                        with chunks of ``S/2N`` (links carry both directions at once); with two
                        members it is the ring
``meet_in_middle``      GCL's meet-in-the-middle ring: ``N`` fragments of ``S/N``, half of each
                        member's sent half way round the ring clockwise and half anticlockwise,
                        so a reduce-scatter or all-gather is ``floor(N/2)`` steps of ``S/N`` in
                        both directions (for even ``N`` the last step uses one direction) and an
                        all-reduce twice that: fewer steps than the rings, larger fragments
``broadcast``           all-reduce only, GCL's method for small tensors: every member's whole
                        tensor is sent to all the others, half way round the ring each way
                        (``floor(N/2)`` steps of ``S`` in both directions), and each member reduces
                        what it received locally
``hierarchical``        members in several PODs: a reduce-scatter inside each POD over IPU-Links
                        (bidirectional rings or meet-in-the-middle, the cheaper), the shards
                        reduced across PODs over GW-Links (one ring per shard, all at once), an
                        all-gather inside each POD: GCL's "three-phase collective operations" for
                        groups that span several IPU-Link domains (GCL release notes, SDK 3.0.0)

The methods are GCL's (GCL user guide, ``gcl/Collectives.hpp`` option ``method``:
clockwise_ring, bidirectional_ring_pair, meet_in_middle_ring, broadcast; the fragment counts are
its own, as are those of poplibs' ``ReplicatedCollectives.cpp`` before the code moved to GCL,
887b9d3a); its quad_directional_ring (a torus's mirrored and non-mirrored rings) is not modelled.
``auto`` (GCL's default) picks the fastest of those that apply, as GCL picks by tensor size and
topology: broadcast for small tensors, meet-in-the-middle for medium ones and many members, the
bidirectional ring pair for large ones, and the hierarchical one across PODs.

Replica groups follow PopXL's ``replica_grouping(stride, group_size)`` (:func:`replica_grouping`
gives its ``assignment``) and PopTorch / PopART's ``CommGroupType`` (:func:`comm_group`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from ..errors import OptionsError
from ..options import comm_group
from ..hardware.system import System
from ..program import Collective, Repeat, Sequence
from ..hardware.topology import crosses_gw_link, hops, route, sync_cycles

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
ALGORITHMS = ("ring", "bidirectional_ring", "meet_in_middle", "broadcast", "hierarchical")

Edge = tuple[int, int]


def normalize_op(op: str) -> str:
    """``"all-reduce"``, ``"AllReduce"`` or ``"all_reduce"`` -> ``"all_reduce"``."""
    key = op.strip().lower().replace("-", "_")
    aliases = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
               "alltoall": "all_to_all"}
    key = aliases.get(key, key)
    if key not in OPS:
        raise OptionsError(f"unknown collective {op!r}; known: {', '.join(o.replace('_', '-') for o in OPS)}")
    return key


def bus_factor(op: str, n: int) -> float:
    """NCCL's bus-bandwidth factor: bytes each link carries per byte of the tensor.

    ``2(N-1)/N`` for all-reduce; ``(N-1)/N`` for reduce-scatter, all-gather and all-to-all.
    """
    op = normalize_op(op)
    if n < 2:
        return 0.0
    return (2 if op == "all_reduce" else 1) * (n - 1) / n


@dataclass(frozen=True)
class CollectivePlan:
    """A priced collective.

    ``phases`` are ``(steps, cycles per step)``; ``edges`` are the directed IPU pairs
    ``(src, dst)`` whose links the steps use (the ring edges, both directions when the
    algorithm uses both).
    """

    op: str
    algorithm: str
    group_size: int
    nbytes: int
    phases: tuple[tuple[int, int], ...]
    edges: tuple[Edge, ...] = ()
    partition_ipus: int = 0  # the IPUs from IPU 0 whose chassis the edges' routes wrap round

    @property
    def cycles(self) -> int:
        return sum(n * c for n, c in self.phases)

    @property
    def steps(self) -> int:
        return sum(n for n, _ in self.phases)

    @property
    def both_directions(self) -> bool:
        """Do the steps use the links in both directions round the ring?"""
        return self.algorithm not in ("ring", "none") and self.group_size > 2

    def seconds(self, system: System) -> float:
        return system.cycles_to_seconds(self.cycles)


# --- edges and steps --------------------------------------------------------------------------

def _ring_edges(members: list[int], both: bool = False) -> list[Edge]:
    """Directed edges of the ring through ``members`` in order (and back, with ``both``)."""
    n = len(members)
    if n < 2:
        return []
    forward = [(members[i], members[(i + 1) % n]) for i in range(n)]
    if n == 2:
        return forward  # 0 -> 1 and 1 -> 0 already use both directions
    return forward + [(b, a) for a, b in forward] if both else forward


def _step_cycles(system: System, edges: list[Edge], nbytes: float, concurrent: int = 1,
                 reduces: bool = False, sync: int = 0, partition: int = 0) -> int:
    """Cycles of one step in which each edge carries ``nbytes``.

    Every step pays GCL's fixed step time beyond its link latency (``ipu_link.reduce_step_s``
    for a step that reduces what it received, ``gather_step_s`` for one that only copies it)
    and ``sync``, the cycles of the sync its cross-replica copy waits for (:func:`partition_sync`).
    An edge that leaves the POD uses its chassis' GW-Links, shared by every edge leaving that
    chassis in the step and by ``concurrent`` collectives; other edges use an IPU-Link direction
    and pay its latency once per hop round the ring of the chassis of the ``partition`` (its IPUs
    from IPU 0: :func:`~sim.hardware.topology.hops`).
    """
    if not edges:
        return 0
    ipu_link = system.ipu_link
    fixed = system.seconds_to_cycles(ipu_link.reduce_step_s if reduces else ipu_link.gather_step_s) + sync
    overhead = max(0, fixed - ipu_link.latency_cycles)  # the step's own cost, its first hop's latency aside
    most_hops, most_leaving = _edge_extremes(system, tuple(edges), partition)
    worst = 0
    if most_leaving:  # every edge carries the same bytes: the most shared GW-Link edge is the slowest
        link = system.gw_link
        worst = link.latency_cycles + system.seconds_to_cycles(nbytes * most_leaving * max(1, concurrent)
                                                               / link.bytes_per_s)
    if most_hops:  # and the IPU-Link edge of the most hops
        worst = max(worst, ipu_link.latency_cycles * most_hops
                    + system.seconds_to_cycles(nbytes / ipu_link.bytes_per_s))
    return overhead + worst


@lru_cache(maxsize=4096)
def _edge_extremes(system: System, edges: tuple[Edge, ...], partition: int) -> tuple[int, int]:
    """(most IPU-Link hops of an edge that stays in its POD, most edges leaving one chassis over its
    GW-Links): all a step's time depends on of its edges (0 where there is no such edge)."""
    leaving = Counter(system.chassis_of(a) for a, b in edges if crosses_gw_link(system, a, b))
    most_hops = max((max(1, hops(system, a, b, partition)) for a, b in edges if not crosses_gw_link(system, a, b)),
                    default=0)
    return most_hops, max(leaving.values(), default=0)


def _phases(system, op: str, steps: int, edges: list[Edge], chunk: float, concurrent: int, sync: int,
            partition: int) -> tuple:
    """``(steps, cycles per step)`` of ``op`` run as ``steps`` steps of ``chunk`` bytes per edge
    per phase: an all-reduce is a reduce-scatter phase then an all-gather phase."""
    reduce = (steps, _step_cycles(system, edges, chunk, concurrent, reduces=True, sync=sync, partition=partition))
    gather = (steps, _step_cycles(system, edges, chunk, concurrent, sync=sync, partition=partition))
    return {"all_reduce": (reduce, gather), "reduce_scatter": (reduce,)}.get(op, (gather,))


def _ring(system, op, nbytes, members, concurrent, both, sync, partition):
    n = len(members)
    edges = _ring_edges(members, both)
    split = 2 if both and n > 2 else 1
    return _phases(system, op, n - 1, edges, nbytes / n / split, concurrent, sync, partition), edges


def _meet_in_middle(system, op, nbytes, members, concurrent, sync, partition):
    n = len(members)
    edges = _ring_edges(members, both=True)
    return _phases(system, op, n // 2, edges, nbytes / n, concurrent, sync, partition), edges


def _broadcast(system, nbytes, members, concurrent, sync, partition):
    edges = _ring_edges(members, both=True)
    step = _step_cycles(system, edges, nbytes, concurrent, sync=sync, partition=partition)
    return ((len(members) // 2, step),), edges


def _hierarchical(system, op, nbytes, members, pods, concurrent, sync, partition):
    per_pod = [[m for m in members if system.pod_of(m) == p] for p in pods]
    local = min(len(p) for p in per_pod)
    inner_edges = [e for p in per_pod for e in _ring_edges(p[:local], both=True)]
    # the reduce-scatter (and all-gather) in each POD by the cheaper of the bidirectional ring pair
    # (local - 1 steps of S/2local) and meet-in-the-middle (local // 2 steps of S/local)
    split = 2 if local > 2 else 1
    inner = min((_phases(system, "all_reduce", local - 1, inner_edges, nbytes / local / split, concurrent, sync,
                         partition),
                 _phases(system, "all_reduce", local // 2, inner_edges, nbytes / local, concurrent, sync, partition)),
                key=lambda ph: (sum(n * c for n, c in ph), -ph[0][0]))
    # shard j is reduced across PODs by the j-th member of every POD, all shards at once
    across_edges = [e for j in range(local) for e in _ring_edges([p[j] for p in per_pod])]
    across = _phases(system, op, len(pods) - 1, across_edges, nbytes / local / len(pods), concurrent, sync,
                     partition)
    # reduce-scatter: in each POD, then across; all-gather: across, then in each POD
    phases = {"all_reduce": (inner[0], *across, inner[1]), "reduce_scatter": (inner[0], *across)}.get(
        op, (*across, inner[1]))
    return phases, inner_edges + across_edges


def partition_sync(system: System, partition_ipus: int) -> int:
    """Cycles of the sync each step of a GCL collective waits for: one over the whole partition.

    GCL's collectives are syncful by default (PopART 2.5 passes only ``useSynclessCollectives``,
    default auto, syncful in SDK 2.4's option page; graphcore/tensorflow leaves GCL's options at
    their defaults), and a cross-replica copy syncs the sync group that spans every IPU of the
    partition, whatever the replica group (the IPU's sync groups are the replica's IPUs and all of
    them: PopART user guide 1.3.35, 7.1 "Sync configuration"). So a step of a collective over two
    replicas of a POD256 waits for a sync of all 256 IPUs, priced as every barrier over ``n``
    IPUs (:func:`~sim.hardware.topology.sync_cycles`, the poplibs test model). A partition that
    spans several PODs syncs across the GW-Links that join them (IPU-POD128 datasheet: the POD64s
    joined only by cross-connected GW-Link cables; the switched GW-Links note: "Packetised sync"),
    so its sync also pays a GW-Link's latency (``gw_link.latency_cycles``, as a ring step's edge
    between PODs does)."""
    n = max(1, partition_ipus)
    cycles = sync_cycles(system, n)
    if system.pod_of(n - 1) != system.pod_of(0):
        cycles += system.gw_link.latency_cycles
    return cycles


def plan_collective(system: System, op: str, nbytes: int, members: list[int],
                    algorithm: str = "auto", concurrent: int = 1, partition_ipus: int = 0) -> CollectivePlan:
    """Price ``op`` on tensors of ``nbytes`` over the IPUs ``members`` (in ring order).

    ``concurrent`` is how many such collectives run at once and share each chassis' GW-Links
    (one per IPU position of a multi-IPU replica). ``partition_ipus`` is the number of IPUs the
    program runs on, whose sync every step waits for (:func:`partition_sync`; at least the members).
    """
    op = normalize_op(op)
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise OptionsError(f"unknown collective algorithm {algorithm!r}; known: auto, {', '.join(ALGORITHMS)}")
    members = list(members)
    if len(set(members)) != len(members):
        raise OptionsError(f"collective members must be distinct IPUs, got {members}")
    n = len(members)
    if n < 2 or nbytes <= 0:
        return CollectivePlan(op, "none", n, nbytes, ())
    sync = partition_sync(system, max(n, partition_ipus))
    # the IPUs from IPU 0 whose chassis the routes wrap round (0, none given: the whole system)
    partition = max(partition_ipus, max(members) + 1) if partition_ipus > 0 else 0
    candidates = {"ring": _ring(system, op, nbytes, members, concurrent, False, sync, partition),
                  "bidirectional_ring": _ring(system, op, nbytes, members, concurrent, True, sync, partition)}
    if op != "all_to_all":
        candidates["meet_in_middle"] = _meet_in_middle(system, op, nbytes, members, concurrent, sync, partition)
    if op == "all_reduce":
        candidates["broadcast"] = _broadcast(system, nbytes, members, concurrent, sync, partition)
    pods = sorted({system.pod_of(m) for m in members})
    if len(pods) > 1 and op != "all_to_all":
        candidates["hierarchical"] = _hierarchical(system, op, nbytes, members, pods, concurrent, sync, partition)

    def cost(name):
        return sum(s * c for s, c in candidates[name][0])
    if algorithm == "auto":
        name = min(candidates, key=lambda k: (cost(k), ALGORITHMS.index(k)))
    elif algorithm in candidates:
        name = algorithm
    else:
        where = " in one POD" if algorithm == "hierarchical" and len(pods) == 1 else ""
        raise OptionsError(f"algorithm {algorithm!r} does not apply to {op.replace('_', '-')} over {n} "
                           f"members{where}; it applies to: {', '.join(candidates)}")
    phases, edges = candidates[name]
    return CollectivePlan(op, name, n, nbytes, tuple(p for p in phases if p[0] and p[1]),
                          tuple(dict.fromkeys(edges)), partition)


# --- program items ------------------------------------------------------------------------------

def link_resources(system: System, edges, partition_ipus: int = 0) -> tuple[tuple, ...]:
    """Engine resources of directed edges: every IPU-Link direction on each edge's route in a
    partition of ``partition_ipus`` IPUs (:func:`~sim.hardware.topology.route`).

    Keys are those :class:`~sim.program.IpuCopy` uses (``("ipu_link", src, dst)``), so a copy
    on a link a collective's edge passes through queues behind the step holding it. An edge
    that leaves the POD is one resource, its two ends.
    """
    return tuple(sorted({("ipu_link", x, y) for a, b in edges for x, y in route(system, a, b, partition_ipus)}))


def collective_item(system: System, op: str, nbytes: int, members: list[int], algorithm: str = "auto",
                    concurrent: int = 1, name: str | None = None,
                    partition_ipus: int = 0) -> tuple[Collective, CollectivePlan]:
    """A :class:`~sim.program.Collective` over all of ``members`` holding every link it uses, in a
    program on ``partition_ipus`` IPUs (at least the members: :func:`partition_sync`)."""
    plan = plan_collective(system, op, nbytes, members, algorithm, concurrent, partition_ipus)
    label = name or f"{plan.op.replace('_', '-')} ({plan.algorithm}, {len(members)} members)"
    item = Collective(tuple(members), plan.op, nbytes, len(members), plan.algorithm, plan.phases,
                      link_resources(system, plan.edges, plan.partition_ipus), label)
    return item, plan


def _group_members(ctx, group: tuple[int, int] | None) -> list[int]:
    """Replica 0's group of ``group`` (``(stride, size)``; None: every replica), in ring order."""
    stride, size = group or (1, ctx.options.total_replicas())
    return [j * stride for j in range(size)]


def _position_ring(ctx, position: int, replicas: list[int]) -> tuple[list[int], list[int]]:
    """The IPUs at ``position`` of the group's ``replicas`` (the ring a collective is priced over),
    and those of them the run simulates (the ring whose links it holds)."""
    k = ctx.ipus_per_replica
    return [r * k + position for r in replicas], [r * k + position for r in ctx.replicas if r in replicas]


def per_position(ctx, op: str, bytes_by_position: dict[int, int], what: str,
                 group: tuple[int, int] | None = None) -> list[Collective]:
    """One collective per IPU position of a replica, over the replicas of ``group`` (``(stride,
    size)``, :func:`replica_grouping`; None: all), run at once.

    Each IPU of a replica reduces (or gathers) with the IPUs at the same position in the
    other replicas of its group. The collective is priced over replica 0's group (the others
    run alike at the same time); the simulated replicas of that group hold the links between
    them (as a ring, in the directions the algorithm uses) step by step.
    """
    items = []
    replicas = _group_members(ctx, group)
    for position, nbytes in sorted(bytes_by_position.items()):
        if nbytes <= 0:
            continue
        members, simulated = _position_ring(ctx, position, replicas)
        plan = plan_collective(ctx.system, op, nbytes, members, ctx.collective_algorithm,
                               concurrent=len(bytes_by_position), partition_ipus=ctx.partition_ipus)
        links = link_resources(ctx.system, _ring_edges(simulated, plan.both_directions), plan.partition_ipus)
        items.append(Collective(tuple(simulated), op, nbytes, len(replicas), plan.algorithm, plan.phases, links,
                                f"{what} {op.replace('_', '-')} (IPU {position})"))
    return items


def per_tensor(ctx, op: str, bytes_by_position: dict[int, list[int]], what: str,
               group: tuple[int, int] | None = None) -> list:
    """One collective per tensor (``bytes_by_position``: each IPU position's tensor sizes) over
    the replicas of ``group`` (as :func:`per_position`), one after another, as PopART runs
    collectives it does not merge.

    Each is a GCL call of its own on the ring of its position's IPUs, and each ring step's
    cross-replica copy syncs every IPU of the device (PopART's sync patterns all keep one sync
    group of all IPUs, the one IPU-to-IPU exchanges use: PopART user guide 1.3.35, 7.1 "Sync
    configuration"), so collectives on different IPUs of a replica cannot overlap (only a merged
    call, :func:`per_position`, spans several positions at once). Each item therefore holds
    every simulated IPU; tensors of one size on one position repeat one priced item.
    """
    items = []
    k = ctx.ipus_per_replica
    replicas = _group_members(ctx, group)
    every_ipu = tuple(sorted(r * k + p for r in ctx.replicas for p in range(k)))
    for position, sizes in sorted(bytes_by_position.items()):
        members, simulated = _position_ring(ctx, position, replicas)
        for nbytes, count in sorted(Counter(n for n in sizes if n > 0).items()):
            plan = plan_collective(ctx.system, op, nbytes, members, ctx.collective_algorithm,
                                   partition_ipus=ctx.partition_ipus)
            links = link_resources(ctx.system, _ring_edges(simulated, plan.both_directions), plan.partition_ipus)
            name = f"{what} {op.replace('_', '-')} (IPU {position}, {nbytes} B each)"
            item = Collective(every_ipu, op, nbytes, len(replicas), plan.algorithm, plan.phases, links, name)
            items.append(item if count == 1 else Repeat(count, Sequence([item], name), f"{name} x{count}"))
    return items


# --- replica groups -----------------------------------------------------------------------------

def _check_grouping(replicas: int, stride: int, group_size: int) -> None:
    for name, v in (("replicas", replicas), ("stride", stride), ("group size", group_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise OptionsError(f"replica grouping: {name} must be a whole number >= 1, got {v!r}")
    if replicas % (stride * group_size):
        raise OptionsError(f"replica grouping (stride {stride}, group size {group_size}) does not tile "
                           f"{replicas} replicas: stride x group size must divide the replica count")


def replica_grouping(replicas: int, stride: int = 1, group_size: int | None = None) -> list[int]:
    """PopXL's ``ir.replica_grouping(stride, group_size).assignment`` for ``replicas`` replicas.

    Entry ``r`` is the group of replica ``r``. A group holds ``group_size`` replicas ``stride``
    apart (default group size: ``replicas // stride``); replica ``r`` is in group
    ``r % stride + stride * (r // (stride * group_size))``. With 8 replicas, stride 2 and group
    size 2: ``[0, 1, 0, 1, 2, 3, 2, 3]``.
    """
    size = replicas // stride if group_size is None and isinstance(stride, int) and stride > 0 else group_size
    _check_grouping(replicas, stride, size)
    return [r % stride + stride * (r // (stride * size)) for r in range(replicas)]


def groups_of(assignment: list[int]) -> list[list[int]]:
    """The replicas of each group, in group order, from an assignment list."""
    groups: dict[int, list[int]] = {}
    for r, g in enumerate(assignment):
        groups.setdefault(g, []).append(r)
    return [groups[g] for g in sorted(groups)]


def comm_group_assignment(replicas: int, group_type="all", group_size: int | None = None) -> list[int]:
    """The group of each replica under a ``CommGroupType`` (as :func:`replica_grouping`)."""
    stride, size = comm_group(replicas, group_type, group_size)
    return replica_grouping(replicas, stride, size)


def replica_group(rank: int, replicas: int, group_type="all", group_size: int | None = None) -> list[int]:
    """Replicas in the same group as ``rank`` (PopTorch ``CommGroupType`` semantics)."""
    if not 0 <= rank < replicas:
        raise OptionsError(f"replica {rank} is not one of the {replicas} replicas")
    assignment = comm_group_assignment(replicas, group_type, group_size)
    return [r for r, g in enumerate(assignment) if g == assignment[rank]]
