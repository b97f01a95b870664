"""Cross-replica collectives inside a model (PopTorch's experimental helpers).

On the CPU the simulator computes one replica's view, assuming every replica holds the same
tensor (which is what the CPU model has): ``all_gather_cross_replica`` stacks
``replication_factor`` copies, ``all_reduce_cross_replica_sum`` multiplies by
``replication_factor``, and ``all_to_all_single_cross_replica`` returns replica 0's result. In the
simulation each is a collective over all replicas (``sim.replicated_ops``), priced on the
system's links like any other collective.
"""

from __future__ import annotations

import torch

from .annotations import _traceable


@_traceable("all_gather_cross_replica")
def all_gather_cross_replica(x: torch.Tensor, replication_factor: int) -> torch.Tensor:
    """Gather ``x`` from every replica: shape ``(replication_factor, *x.shape)``."""
    return torch.stack([x] * replication_factor)


@_traceable("all_reduce_cross_replica_sum")
def all_reduce_cross_replica_sum(x: torch.Tensor, replication_factor: int,
                                 insert_in_grad_graph: bool = False) -> torch.Tensor:
    """Sum ``x`` over the replicas."""
    return x * replication_factor


@_traceable("all_to_all_single_cross_replica")
def all_to_all_single_cross_replica(x: torch.Tensor, replication_factor: int) -> torch.Tensor:
    """Send chunk ``j`` of ``x`` (split along dim 0) to replica ``j``; replica 0's result."""
    chunk = x.chunk(replication_factor, dim=0)[0]
    return torch.cat([chunk] * replication_factor, dim=0)


__all__ = ["all_gather_cross_replica", "all_reduce_cross_replica_sum", "all_to_all_single_cross_replica"]
