"""Host stream copies and the syncs each sync pattern puts around them.

``SyncPattern.Full``: every host transfer syncs all IPUs of the replica, so the others wait
while one IPU talks to the host. ``SinglePipeline``: an IPU syncs with the host on its own.
``ReplicaAndLadder``: IPUs alternate in two groups (even and odd IPUs of the replica); a
transfer syncs only its group, so the other group keeps computing.
"""

from __future__ import annotations

from .graph import Graph
from .program import StreamCopy, Sync
from .strategy import SyncPattern
from .topology import sync_cycles


def sync_group(pattern: SyncPattern, ipu: int, replica_ipus: list[int]) -> list[int]:
    """The IPUs a host transfer on ``ipu`` syncs with."""
    if pattern == SyncPattern.Full:
        return list(replica_ipus)
    if pattern == SyncPattern.ReplicaAndLadder:
        return [i for i in replica_ipus if (i - replica_ipus[0]) % 2 == (ipu - replica_ipus[0]) % 2]
    return [ipu]


def host_transfers(g: Graph, system, pattern: SyncPattern, replica_ipus: list[int],
                   per_ipu: dict[int, list[str]], direction: str, replica: int,
                   stream_index: dict[str, int], io_tiles: bool = False) -> list:
    """Program items copying the tensors in ``per_ipu`` (IPU -> tensor names) to or from the host.

    The first copy on each IPU opens the host exchange (one host sync per IPU per step); copies
    that sync a group of IPUs are bracketed by barriers over that group.
    """
    items = []
    for ipu, names in per_ipu.items():
        if not names:
            continue
        group = sync_group(pattern, ipu, replica_ipus)
        barrier = Sync(tuple(group), "external", sync_cycles(system, len(group)), "host sync") if len(group) > 1 else None
        if barrier:
            items.append(barrier)
        for k, name in enumerate(names):
            items.append(StreamCopy(ipu, name, direction, g.tensors[name].nbytes, stream_index[name],
                                    host_sync=(k == 0), replica=replica, io_tiles=io_tiles))
        if barrier:
            items.append(Sync(barrier.ipus, barrier.scope, barrier.cycles, "host sync end"))
    return items
