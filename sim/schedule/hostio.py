"""Host stream copies and the syncs each sync pattern puts around them.

``SyncPattern.Full``: every host transfer syncs all IPUs of the replica, so the others wait
while one IPU talks to the host. ``SinglePipeline``: an IPU syncs with the host on its own.
``ReplicaAndLadder``: IPUs alternate in two groups (even and odd IPUs of the replica); a
transfer syncs only its group, so the other group keeps computing.
"""

from __future__ import annotations

import numpy as np

from ..cost.exchange import exchange_cycles
from ..errors import OptionsError
from ..graph.ir import Graph
from ..program import Compute, OpSteps, Sequence, StreamCopy, Sync
from ..strategy import SyncPattern
from ..hardware.topology import sync_cycles


def sync_group(pattern: SyncPattern, ipu: int, replica_ipus: list[int]) -> list[int]:
    """The IPUs a host transfer on ``ipu`` syncs with."""
    if pattern == SyncPattern.Full:
        return list(replica_ipus)
    if pattern == SyncPattern.ReplicaAndLadder:
        return [i for i in replica_ipus if (i - replica_ipus[0]) % 2 == (ipu - replica_ipus[0]) % 2]
    return [ipu]


def host_transfers(g: Graph, system, pattern: SyncPattern, replica_ipus: list[int],
                   per_ipu: dict[int, list[str]], direction: str, replica: int,
                   stream_index: dict[str, int], depths: dict[str, int] | None = None, io_tiles: int = 0,
                   compute_tiles: int = 0, fill_ahead: bool = False, host_fills: float = 1.0,
                   process: int = 0, threads: int = 1, callback_s: float = 0.0) -> list:
    """Program items copying the tensors in ``per_ipu`` (IPU -> tensor names) to or from the host.

    The first copy on each IPU opens the host exchange (one host sync per IPU per step); copies
    that sync a group of IPUs are bracketed by barriers over that group. Tensors with an
    overlap mode (``Graph.overlap``) go through the IO tiles when there are any: their copy
    runs on the IO tiles, concurrently with compute, and an on-chip copy moves the data
    between the IO tiles and the compute tiles; the IO tiles hold one buffer per stream, so
    the copy of the next step waits until the previous step's data has been moved on.
    ``depths``: each stream's buffering depth by tensor name (1 for a name it leaves out:
    :meth:`~sim.options.Options.buffering_depth`).
    With ``fill_ahead`` (PopART's ``enablePrefetchDatastreams``) the host fills an input's buffer
    for its next copy while the IPU computes. The host ``process``'s ``threads`` stream-callback
    threads make the fills, the streams taking them in turn; ``host_fills`` is the fills a thread
    makes for each copy (the replicas of the process the simulated one stands for), and
    ``callback_s`` the thread's fixed work for each of them (PopART's StepIO callback; 0 for a
    runtime whose per-copy work is not modelled).
    """
    def thread(name: str) -> tuple[int, int]:  # the streams take the process's threads in turn
        return process, stream_index[name] % threads

    def label(name: str) -> str:  # a store named by its stream (an input stored back keeps its load's name)
        return g.stream_names.get(name, "") if direction == "from_ipu" else ""

    depths = depths or {}
    items = []
    for ipu, names in per_ipu.items():
        overlapped = [n for n in names if io_tiles and g.overlap.get(n)]
        plain = [n for n in names if n not in overlapped]
        for name in overlapped:
            nbytes = g.tensors[name].nbytes
            copy = StreamCopy(ipu, name, direction, nbytes, stream_index[name], host_sync=True,
                              replica=replica, io_tiles=True, prefetch=depths.get(name, 1), fill_ahead=fill_ahead,
                              host_fills=host_fills, host_thread=thread(name), callback_s=callback_s,
                              label=label(name))
            move = Compute(ipu, f"IO tiles {'->' if direction == 'to_ipu' else '<-'} compute tiles: {name}",
                           io_tile_copy_steps(name, nbytes, system.ipu, io_tiles, compute_tiles))
            copy.after, move.after = (move,), (copy,)
            items += [copy, move] if direction == "to_ipu" else [move, copy]
        if not plain:
            continue
        group = sync_group(pattern, ipu, replica_ipus)
        barrier = Sync(tuple(group), "external", sync_cycles(system, len(group)), "host sync") if len(group) > 1 else None
        if barrier:
            items.append(barrier)
        for k, name in enumerate(plain):
            items.append(StreamCopy(ipu, name, direction, g.tensors[name].nbytes, stream_index[name],
                                    host_sync=(k == 0), replica=replica, prefetch=depths.get(name, 1),
                                    fill_ahead=fill_ahead, host_fills=host_fills,
                                    host_thread=thread(name), callback_s=callback_s, label=label(name)))
        if barrier:
            items.append(Sync(barrier.ipus, barrier.scope, barrier.cycles, "host sync end"))
    return items


def optimizer_from_host(tensors_by_ipu: dict[int, int], nbytes: int = 4) -> Sequence:
    """PopART's OptimizerFromHost program: a stream copy from the host of each optimizer tensor.

    ``tensors_by_ipu``: how many optimizer tensors (scalars of ``nbytes``: learning rates, weight
    decays, loss scaling, ... of the weights each IPU updates) each IPU of a replica holds. PopART
    builds the program of one ``Copy`` from a host stream per tensor (willow/src/popx/irlowering.cpp,
    ``ir().optimizerTensors()`` into ``streamOptimizerFromHostFragment``) and broadcasts each
    stream to every replica (willow/src/ir.cpp: optimizer tensors' ``ReplicatedStreamMode::Broadcast``),
    so the host fills each stream once, in turn on its callback thread, whatever the replicas; each
    IPU opens its host exchange with one host sync, as a step's input copies do.
    """
    items = []
    for ipu, count in sorted(tensors_by_ipu.items()):
        items += [StreamCopy(ipu, f"optimizer tensor {k}", "to_ipu", nbytes, k, host_sync=(k == 0))
                  for k in range(count)]
    return Sequence(items)


#: uint32 words of one worker's RNG state, and the states PopART keeps of each (its RngStateLowering's
#: ``rngStateSizePerWorker`` and ``numRngStateTensors``: the generators of identical and of distinct seeds)
RNG_WORDS_PER_WORKER, RNG_STATES = 4, 2


def rng_state_words(ipu, ipus: int) -> int:
    """uint32 words of the RNG state of a replica of ``ipus`` IPUs of type ``ipu``: every worker of every
    tile (RngStateLowering::getCombinedRngStateTensorSize: 2 x tiles x workers x 4)."""
    return RNG_STATES * ipus * ipu.tiles * ipu.worker_threads * RNG_WORDS_PER_WORKER


def rng_state_between_host(ipu, ipus: int, to_ipu: bool) -> Sequence:
    """PopART's RngStateFromHost (``to_ipu``) or RngStateToHost program for a replica of ``ipus`` IPUs: its RNG
    state streamed as one tensor mapped over the replica's tiles (RngStateLowering: ``h2d_rngStateTensor``
    and ``d2h_rngStateTensor``, a stream a replica), each IPU its tiles' share after one host sync."""
    share = rng_state_words(ipu, 1) * 4
    return Sequence([StreamCopy(k, f"rng state {'from' if to_ipu else 'to'} host", "to_ipu" if to_ipu else "from_ipu",
                                share, 0, counted=False) for k in range(ipus)])


#: the roles of the variables PopART streams between the host and the IPUs when the weights are written or
#: read (``TensorType::Variable`` with host data: weights and optimizer state); gradient accumulators are
#: zeroed on the device
HOST_VARIABLE_ROLES = ("weight", "state")


def variables_between_host(g: Graph, to_ipu: bool) -> Sequence:
    """PopART's WeightsFromHost (``to_ipu``) or WeightsToHost program for a replica of ``g``: a stream copy of
    each weight and optimizer state tensor (:data:`HOST_VARIABLE_ROLES`) to or from the IPU of the first op
    that reads it, one host sync an IPU.

    PopART streams a variable to the replicas in ``ReplicatedStreamMode::BROADCAST`` (willow/src/popx/
    irlowering.cpp: "If it is a variable we 'broadcast' the same tensor to all replicants"), so the host
    fills each once, whatever the replicas; reading them back, the host takes one replica's copy [U]. A
    tensor sharded over the replicas (RTS) moves a shard a replica, the replicas' shards side by side [U].
    """
    where: dict[str, int] = {}
    for op in g.ops:
        for t in op.inputs:
            where.setdefault(t, op.ipu or 0)
    items, opened = [], set()
    for name, t in g.tensors.items():
        if t.role not in HOST_VARIABLE_ROLES or name not in where:
            continue
        ipu = where[name]
        items.append(StreamCopy(ipu, f"{'weights from host' if to_ipu else 'weights to host'}: {name}",
                                "to_ipu" if to_ipu else "from_ipu", -(-t.nbytes // t.shards), len(items),
                                host_sync=ipu not in opened))
        opened.add(ipu)
    return Sequence(items)


def io_tile_copy_steps(name: str, nbytes: int, ipu, io_tiles: int, compute_tiles: int) -> OpSteps:
    """The on-chip exchange between IO tiles and compute tiles of ``nbytes`` (one op).

    The busier side sets the time: ``io_tiles`` tiles send (or receive) everything, the
    compute tiles each their share, all at the exchange rate.
    """
    busiest = max(nbytes / io_tiles, nbytes / compute_tiles)
    cycles = exchange_cycles(busiest, ipu)
    return OpSteps((f"io-tile copy {name}",), ("copy",), np.array([0]), np.array([cycles]),
                   np.array([ipu.internal_sync_cycles]), np.array([0.0]), np.array([nbytes]))


def io_tile_buffer_check(g: Graph, names: list[str], ipu, io_tiles: int) -> None:
    """IO tiles hold one buffer of every overlapped stream; error if they do not fit.

    As PopART's overlapped IO (``DecomposeLoopOverlapModel`` in
    ``willow/include/popart/transforms/decomposeloops.hpp``): the next host load lands on the IO
    tiles only after the previous one has been copied to the compute tiles, so each stream has
    one IO-tile buffer, and the PopART user guide sizes IO tiles as all overlapped tensors once
    over the SRAM of a tile. Host prefetch buffers (``defaultPrefetchBufferingDepth``) are in
    host and gateway memory, not on the tiles. Bytes: each IO tile has its SRAM less Poplar's
    reserved bytes.
    """
    need = sum(g.tensors[n].nbytes for n in names)
    room = ipu.sram_bytes_per_tile - ipu.reserved_bytes_per_tile
    if io_tiles and need > io_tiles * room:
        tiles_needed = -(-need // room)
        raise OptionsError(
            f"the overlapped host streams need {need:,} bytes of IO-tile buffers (one per stream: "
            f"{', '.join(names)}) but {io_tiles} IO tiles hold {io_tiles * room:,}; use at least "
            f"{tiles_needed + tiles_needed % 2} IO tiles (numIOTiles, even, at most 192) or overlap fewer streams")
