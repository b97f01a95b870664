"""``popdist.poptorch``: PopTorch options for one instance of a PopRun launch."""

from __future__ import annotations

from .. import poptorch as _poptorch
from . import (checkNumIpusPerReplica, getInstanceIndex, getNumInstances, getNumIpusPerReplica,
               getNumLocalReplicas)


class Options(_poptorch.Options):
    """``poptorch.Options`` with the replication factor set to this instance's replicas and
    ``Distributed`` set to this instance's index among the launch's instances."""

    def __init__(self, ipus_per_replica: int | None = None):
        super().__init__()
        if ipus_per_replica is not None and not checkNumIpusPerReplica(ipus_per_replica):
            raise _poptorch.Error(
                f"The number of IPUs per replica ({ipus_per_replica}) does not match the "
                f"environment (POPDIST_NUM_IPUS_PER_REPLICA={getNumIpusPerReplica()})")
        self.replicationFactor(getNumLocalReplicas())
        self.Distributed.configureProcessId(getInstanceIndex(), getNumInstances())


__all__ = ["Options"]
