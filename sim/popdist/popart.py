"""``popdist.popart``: PopART session options for one instance of a PopRun launch."""

from __future__ import annotations

from . import getNumLocalReplicas, getNumTotalReplicas, getReplicaIndexOffset


def configureSessionOptions(opts) -> None:
    """Set ``opts`` (a ``popart.SessionOptions``) for this instance: its replicas (``replicatedGraphCount``) of the
    launch's (``globalReplicationFactor``), from its offset (``globalReplicaOffset``), with distributed replicated
    graphs on [U: the fields PopDist's own configureSessionOptions sets, read off how PopART uses them]."""
    opts.enableDistributedReplicatedGraphs = True
    opts.globalReplicationFactor = getNumTotalReplicas()
    opts.globalReplicaOffset = getReplicaIndexOffset()
    local = getNumLocalReplicas()
    opts.enableReplicatedGraphs = local > 1
    opts.replicatedGraphCount = local


__all__ = ["configureSessionOptions"]
