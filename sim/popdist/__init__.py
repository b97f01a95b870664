"""PopDist's API on the simulator: run a script "as instance k of n" of a PopRun launch.

PopRun starts each instance with environment variables that PopDist reads; this module reads
the same ones, so setting them by hand (or in a test) makes a script behave as one instance:

==================================  ==============================================
``POPDIST_NUM_TOTAL_REPLICAS``      replicas over all instances (its presence is
                                    what :func:`isPopdistEnvSet` checks)
``POPDIST_NUM_LOCAL_REPLICAS``      replicas of this instance (default 1)
``POPDIST_NUM_IPUS_PER_REPLICA``    IPUs per replica (default 1)
``POPDIST_REPLICA_INDEX_OFFSET``    index of this instance's first replica (default 0)
``POPDIST_LOCAL_INSTANCE_INDEX``    index of this instance on its host (default 0)
``POPDIST_UNIFORM_REPLICAS_PER_INSTANCE``  1 when every instance has as many replicas
``OMPI_COMM_WORLD_RANK`` / ``_SIZE``  this instance's index and the instance count (set
                                    by the mpirun PopRun uses; otherwise derived from
                                    the replica offset and counts)
==================================  ==============================================

PopRun starts the instances with mpirun, so each also has ``OMPI_COMM_WORLD_RANK`` and ``_SIZE``,
which ``poptorch.Options().Distributed`` reads by default: :func:`mpirun_environment` gives them for a
launch described by the ``POPDIST_*`` variables alone (``ipusim script`` sets them for its run), so a
script that makes plain ``poptorch.Options`` is this instance of the launch too. Without ``OMPI_*``
the instance index and count are derived from the replica counts and offset; either way they must be
consistent with them, as PopRun sets them (a ``ValueError`` names the variables otherwise).

There is one process: the collectives (:func:`synchronize`) return at once and
:func:`execute_on_instances` runs the function if this instance is one of those named.
``sim.popdist.poptorch.Options`` sets the replication factor and the process id from the
environment (it needs the torch extra).
"""

from __future__ import annotations

import os


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def isPopdistEnvSet() -> bool:
    """Was this process started by PopRun (is ``POPDIST_NUM_TOTAL_REPLICAS`` set)?"""
    return bool(os.environ.get("POPDIST_NUM_TOTAL_REPLICAS", "").strip())


def getNumTotalReplicas() -> int:
    """Replicas over all instances (1 outside PopRun)."""
    return _env_int("POPDIST_NUM_TOTAL_REPLICAS", 1)


def getNumLocalReplicas() -> int:
    """Replicas of this instance (1 outside PopRun)."""
    return _env_int("POPDIST_NUM_LOCAL_REPLICAS", 1)


def getNumIpusPerReplica() -> int:
    """IPUs per replica (1 outside PopRun)."""
    return _env_int("POPDIST_NUM_IPUS_PER_REPLICA", 1)


def getReplicaIndexOffset() -> int:
    """Index of this instance's first replica among all replicas."""
    return _env_int("POPDIST_REPLICA_INDEX_OFFSET", 0)


def getLocalInstanceIndex() -> int:
    """Index of this instance among those on its host."""
    return _env_int("POPDIST_LOCAL_INSTANCE_INDEX", 0)


def isUniformReplicasPerInstance() -> bool:
    return _env_int("POPDIST_UNIFORM_REPLICAS_PER_INSTANCE", 1) == 1


def _launch() -> tuple[int, int]:
    """(this instance's index, the instance count): ``OMPI_COMM_WORLD_RANK`` and ``_SIZE`` where set
    (as PopRun's mpirun sets them), else derived from the replica counts and offset with every instance
    holding ``POPDIST_NUM_LOCAL_REPLICAS`` replicas, as PopRun divides them. Under PopRun's variables the
    two must agree (unless ``POPDIST_UNIFORM_REPLICAS_PER_INSTANCE`` is 0): a ``ValueError`` names the
    variables that do not."""
    total, local, offset = getNumTotalReplicas(), getNumLocalReplicas(), getReplicaIndexOffset()
    popdist = isPopdistEnvSet()
    if popdist and (local < 1 or total < 1):
        raise ValueError(f"POPDIST_NUM_TOTAL_REPLICAS={total} and POPDIST_NUM_LOCAL_REPLICAS={local}: each must be "
                         "1 or more (PopRun gives every instance at least one replica)")
    uniform = popdist and isUniformReplicasPerInstance()
    if uniform and (total % local or offset % local or not 0 <= offset < total):
        raise ValueError(f"the PopDist variables do not describe a PopRun launch: POPDIST_NUM_TOTAL_REPLICAS={total} "
                         f"must be a multiple of POPDIST_NUM_LOCAL_REPLICAS={local}, and "
                         f"POPDIST_REPLICA_INDEX_OFFSET={offset} a multiple of it below the total")
    local = max(1, local)
    rank = _env_int("OMPI_COMM_WORLD_RANK", offset // local)
    size = _env_int("OMPI_COMM_WORLD_SIZE", max(1, total // local))
    if not 0 <= rank < size:
        raise ValueError(f"instance {rank} of {size} (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, or as derived from "
                         "the POPDIST_* replica counts): the rank must be from 0 to the size less 1, as mpirun "
                         "numbers its processes")
    clashes = []
    if uniform and local * size != total:
        clashes.append(f"{size} instance(s) (OMPI_COMM_WORLD_SIZE) of POPDIST_NUM_LOCAL_REPLICAS={local} replica(s) "
                       f"each are {local * size} replicas, against POPDIST_NUM_TOTAL_REPLICAS={total}")
    if uniform and offset != rank * local:
        clashes.append(f"instance {rank} (OMPI_COMM_WORLD_RANK) starts at replica {rank * local}, against "
                       f"POPDIST_REPLICA_INDEX_OFFSET={offset}")
    if clashes:
        raise ValueError(f"the PopDist and mpirun variables disagree: {'; '.join(clashes)}: set them as PopRun would")
    return rank, size


def getNumInstances() -> int:
    """Instances of the launch."""
    return _launch()[1]


def getInstanceIndex() -> int:
    """Index of this instance, in ``[0, getNumInstances())``."""
    return _launch()[0]


def mpirun_environment() -> dict[str, str]:
    """The variables PopRun's mpirun gives each instance that PopTorch reads (``OMPI_COMM_WORLD_RANK``
    and ``OMPI_COMM_WORLD_SIZE``: ``poptorch.Options().Distributed``'s process id and count), for a
    launch described by the ``POPDIST_*`` variables; empty outside PopRun or when they are set already.
    Either way the launch is checked first (``ValueError`` when its variables disagree)."""
    rank, size = _launch()
    if not isPopdistEnvSet() or any(os.environ.get(name, "").strip()
                                    for name in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        return {}
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size)}


def getDeviceId(ipusPerReplica: int = 0) -> int:
    """The device id of this instance's IPUs (the simulator has one virtual device: 0)."""
    return 0


def checkNumIpusPerReplica(expected: int) -> bool:
    """Does the launch's IPUs-per-replica match ``expected`` (always True outside PopRun)?"""
    return not isPopdistEnvSet() or getNumIpusPerReplica() == expected


def init() -> None:
    """Initialise the instances' communication (nothing to do in one process)."""


def finalizeBackend() -> None:
    """Shut down the instances' communication (nothing to do)."""


def synchronize() -> None:
    """Barrier over all instances (returns at once: this process is the only one)."""


def registerCommunicator(*args, **kwargs) -> None:
    """Accepted for compatibility; there is no communicator to register."""


def execute_on_instances(instances, func, *args, **kwargs):
    """Run ``func(*args, **kwargs)`` if this instance is in ``instances``; its result or None."""
    if getInstanceIndex() in set(instances):
        return func(*args, **kwargs)
    return None


__all__ = ["isPopdistEnvSet", "getNumTotalReplicas", "getNumLocalReplicas", "getNumIpusPerReplica",
           "getReplicaIndexOffset", "getLocalInstanceIndex", "isUniformReplicasPerInstance",
           "getNumInstances", "getInstanceIndex", "getDeviceId", "checkNumIpusPerReplica", "init",
           "finalizeBackend", "synchronize", "registerCommunicator", "execute_on_instances"]
