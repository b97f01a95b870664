"""Collectives across replicas (GCL-style): algorithms, their steps and what they cost.

A collective over ``N`` members on tensors of ``S`` bytes runs as steps; in every step each
member sends one chunk to its neighbour on the ring, so a step lasts as long as the slowest
ring edge: its latency (one per hop, a GW-Link's when it leaves the POD) plus the chunk over
its bandwidth. Algorithms:

``ring``                one direction; all-reduce = reduce-scatter + all-gather,
                        ``2(N-1)`` steps of ``S/N``; reduce-scatter, all-gather and all-to-all
                        ``N-1`` steps of ``S/N``
``bidirectional_ring``  two rings in opposite directions, each on half the data: the same
                        steps with chunks of ``S/2N`` (links carry both directions at once)
``meet_in_middle``      the two halves of the ring reduce towards each other: ``N/2`` steps of
                        ``S/2`` per direction, then the same back (all-reduce only)
``broadcast_reduce``    every member sends its whole tensor to every other (all-to-all
                        exchange then a local reduce): ``ceil(log2 N)`` steps of ``S``;
                        best for small tensors, where latency dominates
``hierarchical``        when the members span PODs: reduce-scatter inside each POD over
                        IPU-Links, all-reduce of the shards across PODs over GW-Links,
                        all-gather inside each POD

``auto`` (GCL's default) picks the fastest for the size, as GCL picks by size and topology.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import OptionsError
from .hardware import System
from .program import Collective
from .topology import crosses_gw_link, hops

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
ALGORITHMS = ("ring", "bidirectional_ring", "meet_in_middle", "broadcast_reduce", "hierarchical")


@dataclass(frozen=True)
class CollectivePlan:
    """A priced collective. ``phases`` are ``(steps, cycles per step)``."""

    op: str
    algorithm: str
    group_size: int
    nbytes: int
    phases: tuple[tuple[int, int], ...]

    @property
    def cycles(self) -> int:
        return sum(n * c for n, c in self.phases)

    @property
    def steps(self) -> int:
        return sum(n for n, _ in self.phases)


def _edge_cycles(system: System, a: int, b: int, nbytes: float, concurrent: int) -> int:
    """One step's cycles on the edge a -> b carrying ``nbytes``."""
    if crosses_gw_link(system, a, b):
        link = system.gw_link
        bw = link.bytes_per_s / max(1, concurrent)  # the chassis' GW-Links are shared by its rings
        latency = link.latency_cycles
    else:
        link = system.ipu_link
        bw = link.bytes_per_s
        latency = link.latency_cycles * max(1, hops(system, a, b))
    return latency + system.seconds_to_cycles(nbytes / bw)


def _ring_step(system: System, members: list[int], chunk: float, concurrent: int) -> int:
    if len(members) < 2:
        return 0
    edges = zip(members, members[1:] + members[:1])
    return max(_edge_cycles(system, a, b, chunk, concurrent) for a, b in edges)


def _ring_steps(op: str, n: int) -> int:
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def plan_collective(system: System, op: str, nbytes: int, members: list[int],
                    algorithm: str = "auto", concurrent: int = 1) -> CollectivePlan:
    """Price ``op`` on tensors of ``nbytes`` over the IPUs ``members`` (in ring order).

    ``concurrent`` is how many such collectives share each chassis' GW-Links at once.
    """
    if op not in OPS:
        raise OptionsError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise OptionsError(f"unknown collective algorithm {algorithm!r}; known: auto, {', '.join(ALGORITHMS)}")
    n = len(members)
    if n < 2 or nbytes <= 0:
        return CollectivePlan(op, "none", n, nbytes, ())
    candidates = {}
    candidates["ring"] = ((_ring_steps(op, n), _ring_step(system, members, nbytes / n, concurrent)),)
    candidates["bidirectional_ring"] = (
        (_ring_steps(op, n), _ring_step(system, members, nbytes / (2 * n), concurrent)),)
    if op == "all_reduce":
        half = math.ceil(n / 2)
        candidates["meet_in_middle"] = ((2 * half, _ring_step(system, members, nbytes / 2, concurrent)),)
        candidates["broadcast_reduce"] = ((math.ceil(math.log2(n)), _ring_step(system, members, nbytes, concurrent)),)
    pods = sorted({system.pod_of(m) for m in members})
    if len(pods) > 1:
        candidates["hierarchical"] = _hierarchical(system, op, nbytes, members, pods, concurrent)
    if algorithm == "auto":
        name = min(candidates, key=lambda k: (sum(s * c for s, c in candidates[k]), ALGORITHMS.index(k)))
    elif algorithm in candidates:
        name = algorithm
    else:
        raise OptionsError(f"algorithm {algorithm!r} does not apply to {op} over {n} members"
                           + (" in one POD" if algorithm == "hierarchical" else ""))
    return CollectivePlan(op, name, n, nbytes, tuple(p for p in candidates[name] if p[0] and p[1]))


def _hierarchical(system, op, nbytes, members, pods, concurrent):
    per_pod = [[m for m in members if system.pod_of(m) == p] for p in pods]
    local = min(len(p) for p in per_pod)
    inner_rs = (local - 1, max(_ring_step(system, p, nbytes / local, concurrent) for p in per_pod))
    leaders = [p[0] for p in per_pod]  # one shard-holder per POD, for each of the shards in parallel
    across = (_ring_steps("all_reduce" if op == "all_reduce" else op, len(pods)),
              _ring_step(system, leaders, nbytes / local / len(pods), concurrent * local))
    if op == "all_reduce":
        return (inner_rs, across, inner_rs)
    return (inner_rs, across)


def replica_group(rank: int, replicas: int, group_type: str = "all", group_size: int | None = None) -> list[int]:
    """Replicas in the same group as ``rank`` (PopTorch CommGroupType semantics).

    ``all``: every replica. ``consecutive``: groups of ``group_size`` consecutive replicas.
    ``orthogonal``: replicas ``rank mod G`` apart, where ``G = replicas / group_size`` (one from
    each consecutive group). ``none``: the replica alone.
    """
    if group_type == "all":
        return list(range(replicas))
    if group_type == "none":
        return [rank]
    if not group_size or replicas % group_size:
        raise OptionsError(f"replica group size {group_size} must divide the {replicas} replicas")
    if group_type == "consecutive":
        start = rank // group_size * group_size
        return list(range(start, start + group_size))
    if group_type == "orthogonal":
        stride = replicas // group_size
        return list(range(rank % stride, replicas, stride))
    raise OptionsError(f"unknown replica grouping {group_type!r}")


def per_position(ctx, op: str, bytes_by_position: dict[int, int], what: str) -> list[Collective]:
    """One collective per IPU position of a replica, over all replicas, run at once.

    Each IPU of a replica reduces (or gathers) with the IPUs at the same position in the
    other replicas; the simulated ones hold their ring's links while it runs.
    """
    items = []
    k = ctx.ipus_per_replica
    R = ctx.options.replication_factor
    for position, nbytes in sorted(bytes_by_position.items()):
        if nbytes <= 0:
            continue
        members = [r * k + position for r in range(R)]
        plan = plan_collective(ctx.system, op, nbytes, members, ctx.collective_algorithm,
                               concurrent=len(bytes_by_position))
        simulated = [r * k + position for r in ctx.replicas]
        links = tuple(("ipu_link", a, b) for a, b in zip(simulated, simulated[1:] + simulated[:1]) if a != b)
        items.append(Collective(tuple(simulated), op, nbytes, R, plan.algorithm, plan.phases, links,
                                f"{what} {op.replace('_', '-')} (IPU {position})"))
    return items
