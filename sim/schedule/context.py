"""What every schedule shares: the context of one compilation and the items it is built from.

A schedule (single IPU, pipelined, sharded, phased) turns stages into program items for each
simulated replica. Replica ``r`` runs on IPUs ``r*k .. r*k+k-1``; the replicas simulated are
those sharing one host link (the others behave the same, by symmetry), and their items are
interleaved step by step so that they contend for the link as real replicas do.
"""

from __future__ import annotations


from dataclasses import dataclass, field

import numpy as np

from . import replicated_ops
from .collectives import per_position, per_tensor
from ..cost import OpCost
from ..errors import OptionsError
from ..graph.ir import HOST_CALL, IO_TILE_COPY, REMOTE_KINDS, Graph, Op
from ..hardware.system import System
from .hostio import host_transfers, io_tile_copy_steps
from ..options import Options, OutputMode, OverlapMode
from ..program import Compute, IpuCopy, OpSteps, RemoteCopy, Repeat, Sequence, StreamCopy, Sync, leaves
from .stages import StageWork
from .stash import restored_tensors, stash_op_cost, stashed_tensors
from ..hardware.topology import replica_ipus, sync_cycles


#: op kinds that are program items of their own, not compute: the part of a stage they make
OWN_ITEMS = {**{kind: "remote" for kind in REMOTE_KINDS}, IO_TILE_COPY: "io_copy", HOST_CALL: "host_call"}


@dataclass
class Context:
    """Everything a schedule builder needs. IPU indices in stages are within a replica."""

    g: Graph
    system: System
    options: Options
    training: bool
    mode: OutputMode
    costs: dict[str, OpCost]
    stages: list[StageWork]
    updates: list[Op]
    ipus_per_replica: int
    replicas: list[int]  # the simulated replicas
    notes: list[str] = field(default_factory=list)
    collective_algorithm: str = "auto"
    compute_tiles: int = 0
    collapse_accumulation: bool = True  # False when host IO overlaps across micro-batches
    collapse_device: bool = True  # False when host IO overlaps across device iterations
    pipelined: bool = False  # stages run as PopART's pipeline: forward stages stash, backward ones restore
    recomputed: frozenset[str] = frozenset()  # the forward ops PopART marks Recompute (sim.schedule.recomputation)
    _parts: dict = field(default_factory=dict, repr=False)
    _items: dict = field(default_factory=dict, repr=False)  # (id(stage), load_weights) -> (stage, items)
    _host_call_streams: dict = field(default_factory=dict, repr=False)  # a host call's tensor -> its stream (< 0)

    def ipus(self, replica: int) -> list[int]:
        return replica_ipus(replica, self.ipus_per_replica)

    @property
    def partition_ipus(self) -> int:
        """The IPUs the program runs on: every replica's (all instances'), simulated or not."""
        return self.options.total_replicas() * self.ipus_per_replica

    def steps(self, ops: list[Op], label: str = "", share: int | dict[str, int] = 1) -> OpSteps:
        """Per-op cycles of ``ops``; ``share`` > 1 prices a 1/share slice of each (a shard), or per
        op name."""
        priced = [((op.name, op.kind), self.costs[op.name]) for op in ops
                  if op.name in self.costs and self.costs[op.name].cycles > 0]
        shares = np.array([share.get(name, 1) if isinstance(share, dict) else share for (name, _), _ in priced],
                          dtype=np.float64)
        return self._steps_of(priced, label, shares)

    def _steps_of(self, priced: list[tuple[tuple[str, str], OpCost]], label: str = "",
                  shares: np.ndarray | None = None) -> OpSteps:
        """The :class:`OpSteps` of ``((name, kind), cost)`` pairs, each a 1/share slice."""
        if shares is None:
            shares = np.ones(len(priced))

        def col(values, dtype=np.int64):
            a = np.array(values, dtype=np.float64)
            return np.ceil(a / shares).astype(dtype) if dtype is np.int64 else (a / shares)
        return OpSteps(
            names=tuple(name + label for (name, _), _ in priced),
            kinds=tuple(kind for (_, kind), _ in priced),
            compute=col([c.compute_cycles for _, c in priced]),
            exchange=col([c.exchange_cycles for _, c in priced]),
            sync=np.array([c.sync_cycles for _, c in priced], dtype=np.int64),
            flops=col([c.flops for _, c in priced], np.float64),
            exchange_bytes=col([c.exchange_bytes for _, c in priced]),
            launch=col([c.launch_cycles for _, c in priced]),
            exchange_setup=col([c.exchange_setup_cycles for _, c in priced]),
            tile_compute=sum((c.profile.compute / n for (_, c), n in zip(priced, shares) if c.profile is not None),
                             np.zeros(self.compute_tiles)))

    def stage_parts(self, stage: StageWork) -> list[tuple[str, object]]:
        """What a stage runs, in order: ``("compute", (name, OpSteps))`` for runs of ops
        (recomputation, forward, backward), ``("collective", op)`` for collective ops and
        after each distributed norm (:func:`~sim.schedule.replicated_ops.spans_replicas`),
        ``("remote", op)`` for copies to and from remote buffers (``REMOTE_KINDS``) and
        ``("io_copy", op)`` for copies between the IO and compute tiles (``IO_TILE_COPY``) and
        ``("host_call", op)`` for a function run on the host (``HOST_CALL``)."""
        key = id(stage)
        if key not in self._parts:
            self._parts[key] = (stage, self._split_stage(stage))
        return self._parts[key][1]

    def _stash_part(self, stage: StageWork, what: str, tensors: list[str]) -> list[tuple[str, object]]:
        """A pipeline stage's stash (``what`` "stash") or restore ops, one per tensor, as a compute part
        (:mod:`sim.schedule.stash`); none when it keeps no stash."""
        if not tensors:
            return []
        priced = [((f"{what}/{t}", what), stash_op_cost(self.g.tensors[t], self.system.ipu, self.compute_tiles))
                  for t in tensors]
        return [("compute", (f"stage {stage.index} {what}", self._steps_of(priced)))]

    def _split_stage(self, stage: StageWork) -> list[tuple[str, object]]:
        recomputed = set(id(op) for op in stage.recomputed)
        groups = [("forward", [op for op in stage.ops if id(op) not in recomputed and op.pass_ == "forward"], ""),
                  ("recompute", [op for op in stage.ops if id(op) in recomputed], " (recompute)"),
                  ("backward", [op for op in stage.ops if op.pass_ == "backward"], "")]
        pipelined = self.training and self.pipelined
        parts = self._stash_part(stage, "restore", restored_tensors(stage, self.stages)) if pipelined else []
        for what, ops, label in groups:
            chunk: list[Op] = []
            for op in ops + [None]:
                if op is not None and op.kind not in replicated_ops.KINDS and op.kind not in OWN_ITEMS:
                    chunk.append(op)  # a distributed norm computes, then all-reduces its sums
                    if not replicated_ops.spans_replicas(op):
                        continue
                if chunk:
                    parts.append(("compute", (f"stage {stage.index} {what}", self.steps(chunk, label))))
                    chunk = []
                if op is not None and op.kind in OWN_ITEMS:
                    parts.append((OWN_ITEMS[op.kind], op))
                elif op is not None and (self.options.total_replicas() > 1 or replicated_ops.spans_replicas(op)):
                    parts.append(("collective", op))
        if pipelined:
            parts += self._stash_part(stage, "stash", stashed_tensors(stage, self.stages))
        return parts

    def off_chip_traffic(self, stage: StageWork) -> tuple[int, int]:
        """(bytes loaded before, bytes stored after) a stage's run: the off-chip weights and
        gradient accumulators its ops read, and the accumulators they write. Phased execution
        moves its own, phase by phase; the optimizer update moves what it uses."""
        tensors = self.g.tensors
        ops = [op for op in stage.ops if op.pass_ != "update"]

        def off_chip(names, roles):
            return sum(tensors[t].nbytes // tensors[t].shards for t in set(names)
                       if tensors[t].role in roles and tensors[t].location == "off_chip")
        loads = off_chip([t for op in ops for t in op.inputs], ("weight", "accumulator"))
        stores = off_chip([t for op in ops for t in op.outputs], ("accumulator",))
        return loads, stores

    def stages_items(self, stages: list[StageWork], load_weights: bool = True) -> list:
        """The work of ``stages`` on every simulated replica, with its off-chip weights and
        accumulators moved to and from streaming memory around it; a collective op waits for
        all of its group's simulated replicas and runs over the group. Each stage's items are
        built once and reused wherever the stage runs (every cycle of a pipeline)."""
        return [item for stage in stages for item in self.stage_items(stage, load_weights)]

    def stage_items(self, stage: StageWork, load_weights: bool = True) -> list:
        """The items of one stage (see :meth:`stages_items`), built on first use."""
        key = (id(stage), load_weights)
        if key not in self._items:
            self._items[key] = (stage, self._build_stage_items(stage, load_weights))
        return self._items[key][1]

    def _build_stage_items(self, stage: StageWork, load_weights: bool) -> list:
        loads, stores = self.off_chip_traffic(stage) if load_weights else (0, 0)
        items = []
        on_io: set[str] = set()  # tensors on the IO tiles
        latest: dict[tuple, object] = {}  # (replica, lane) -> this stage's latest item there (_io_items)
        if loads:
            items += [RemoteCopy(self.ipus(r)[stage.ipu], "load", loads, f"stage {stage.index} load weights")
                      for r in self.replicas]
            items += self.gather_weight_shards(stage.ipu, [t for op in stage.ops if op.pass_ != "update"
                                                           for t in op.inputs])
        for what, part in self.stage_parts(stage):
            if what == "collective":
                items += replicated_ops.collectives_for(self, part)
                continue
            if what in ("remote", "io_copy"):
                items += self._io_items(stage, part, on_io, latest)
                continue
            if what == "host_call":
                items += self.for_replicas(lambda r: self.host_call_items(r, stage, part))
                continue
            name, steps = part
            for r in self.replicas:
                latest[r, "compute"] = Compute(self.ipus(r)[stage.ipu], name, steps)
                items.append(latest[r, "compute"])
        if stores:
            items += [RemoteCopy(self.ipus(r)[stage.ipu], "store", stores,
                                 f"stage {stage.index} store accumulators") for r in self.replicas]
        return items

    def _io_items(self, stage: StageWork, op: Op, on_io: set, latest: dict) -> list:
        """A remote buffer copy (``REMOTE_KINDS``) or an IO-tile copy (``IO_TILE_COPY``) for each
        simulated replica. A remote copy on the IO tiles (``attrs["io_tiles"]``) runs on their own
        lane, alongside the compute tiles; the IO tiles do one thing at a time, in program order, so
        it waits for the IO-tile copy before it (which uses them too), and an IO-tile copy waits for
        the IO-tile work before it. A copy on the IO tiles whose offset the compute tiles made waits
        for them. ``on_io``: the tensors on the IO tiles; ``latest``: (replica, "compute" | "io" |
        "copy") -> the stage's latest item on the compute tiles, on the IO tiles, and IO-tile copy."""
        items = []
        for r in self.replicas:
            ipu = self.ipus(r)[stage.ipu]

            def waits(*lanes):
                return tuple(latest[r, lane] for lane in lanes if (r, lane) in latest)
            if op.kind == IO_TILE_COPY:
                steps = io_tile_copy_steps(op.name, self.g.tensors[op.inputs[0]].nbytes, self.system.ipu,
                                           self.options.TensorLocations.num_io_tiles, self.compute_tiles)
                item = Compute(ipu, f"io-tile copy {op.name}", steps, after=waits("io"))
                latest[r, "compute"] = latest[r, "copy"] = item
            elif op.attrs.get("io_tiles"):
                from_compute = any(t not in on_io for t in op.inputs)  # the offset, made on the compute tiles
                item = RemoteCopy(ipu, REMOTE_KINDS[op.kind], op.attrs["slot_bytes"], op.name, io_tiles=True,
                                  after=waits("copy", *("compute",) * from_compute))
                latest[r, "io"] = item
            else:
                item = latest[r, "compute"] = RemoteCopy(ipu, REMOTE_KINDS[op.kind], op.attrs["slot_bytes"], op.name)
            items.append(item)
        if op.kind == IO_TILE_COPY and op.attrs.get("to_io") or op.attrs.get("io_tiles"):
            on_io.update(op.outputs)
        return items

    def host_call_items(self, replica: int, stage: StageWork, op: Op) -> list:
        """A host function's call (``HOST_CALL``: PopTorch's ``poptorch.CPU``, a Poplar HostFunction ``Call``) on
        one replica: its inputs streamed to the host, the host running the function (``attrs["host_seconds"]``,
        on the replica's stream-callback thread, before it fills the first output's buffer), its outputs
        streamed back, all on the IPU's path, each direction opening with a host sync and bracketed by the sync
        pattern's barriers as a step's transfers are (:func:`~.hostio.host_transfers`). The copies are not the
        model's streams, so the perf counters do not stamp them."""
        streams = self._host_call_streams
        for name in [*op.inputs, *op.outputs]:
            streams.setdefault(name, -1 - len(streams))
        ipus = self.ipus(replica)
        process, fills, threads = self._host_threads(replica)
        items = []
        for direction, names in (("from_ipu", op.inputs), ("to_ipu", op.outputs)):
            items += host_transfers(self.g, self.system, self.options.sync_pattern, ipus, {ipus[stage.ipu]: names},
                                    direction, replica, streams, host_fills=fills, process=process, threads=threads)
        first_output = True
        for item in items:
            if isinstance(item, StreamCopy):
                item.counted = False
                item.label = f"{op.attrs['id']}: {'input' if item.direction == 'from_ipu' else 'output'} {item.name}"
                if item.direction == "to_ipu" and first_output:
                    item.callback_s, first_output = float(op.attrs.get("host_seconds", 0.0)), False
        return items

    def _host_threads(self, replica: int) -> tuple[int, float, int]:
        """(the host process of ``replica``, the fills its stream-callback threads make for each of the replica's
        copies, the process's threads): each host process's threads fill its replicas' inputs in turn, and a
        simulated replica stands for the process's replicas that are not simulated."""
        per_process = self.options.replicas_per_host_process()
        process = replica // per_process
        simulated = sum(1 for r in self.replicas if r // per_process == process)
        threads = self.options.stream_callback_threads
        # (the fills the busiest process's threads make, spread evenly over its simulated replicas)
        return process, max(1.0, per_process / (simulated * threads)), threads

    def for_replicas(self, make) -> list:
        """``make(replica)`` for every simulated replica, concatenated."""
        return [item for r in self.replicas for item in (make(r) or [])]

    def transfers(self, replica: int, stages: list[StageWork], direction: str) -> list:
        """Host stream copies for ``stages`` (inputs to the IPU, or outputs from it)."""
        if self.options.synthetic_data:
            return []
        ipus = self.ipus(replica)
        per_ipu: dict[int, list[str]] = {}
        for s in stages:
            names = s.host_inputs if direction == "to_ipu" else s.host_outputs
            per_ipu.setdefault(ipus[s.ipu], []).extend(names)
        index = {n: i for i, n in enumerate(self.g.inputs if direction == "to_ipu" else self.g.outputs)}
        process, fills, threads = self._host_threads(replica)
        callback = self.system.host_link.stream_callback_s if self.options.step_io_callbacks else 0.0
        depths = {n: self.options.buffering_depth(n, direction) for names in per_ipu.values() for n in names}
        return host_transfers(self.g, self.system, self.options.sync_pattern, ipus, per_ipu, direction,
                              replica, index, depths,
                              self.options.TensorLocations.num_io_tiles, self.compute_tiles,
                              self.options.prefetch_datastreams(), fills, process, threads, callback)

    def final_outputs(self) -> list:
        """Outputs copied once after the run (OutputMode Final and Sum)."""
        if self.mode not in (OutputMode.Final, OutputMode.Sum):
            return []
        return [item for r in self.replicas for item in self.transfers(r, self.stages, "from_ipu")]

    def replica_sync(self, replica: int, name: str) -> Sync | None:
        ipus = self.ipus(replica)
        if len(ipus) < 2:
            return None
        return Sync(tuple(ipus), "external", sync_cycles(self.system, len(ipus)), name)

    def weight_update(self, updates: list[Op] | None = None, loaded: frozenset[str] = frozenset()) -> Sequence:
        """Gradient collectives across replicas, then each IPU's optimizer update: of ``updates`` (default all
        of :attr:`updates`); off-chip tensors in ``loaded`` are already on chip (phased execution loads a
        weight for its phase) and are not loaded again.

        With replicated tensor sharding (RTS) of the optimizer state the gradients are
        reduce-scattered, each replica updates its 1/R shard, and the new weights are
        all-gathered. A weight whose gradient collectives the program gives itself (PopXL,
        ``Tensor.grad_collectives``) gets those, each over its own groups, instead. Tensors placed
        off chip are loaded from streaming memory before the update and stored after it. Each
        weight has its own collectives, run one after another over the whole replica, unless
        PopART merges that kind (:meth:`collectives`). The IPUs' optimizer steps run side by side or one
        at a time as ``accumulateOuterFragmentSettings`` has them (:meth:`_update_alone`).
        """
        seq = Sequence(name="weight update")
        R = self.options.total_replicas()
        tensors = self.g.tensors
        updates = self.updates if updates is None else updates
        # gradient clipping's norms and global ops run before the updates (:meth:`_clip_by_global_norm`)
        clipping = [op for op in updates if op.attrs.get("clip") in ("norm", "global")]
        by_position = {p: [op for op in updates if op.ipu == p and op.attrs.get("clip") not in ("norm", "global")]
                       for p in range(self.ipus_per_replica)}
        # one gradient per weight updated (every update op names its weight), and whether that weight's
        # update is sharded over replicas (its optimizer state is: PopART shards only tensors of
        # minElementsForReplicatedTensorSharding elements or more, so a run mixes both)
        split: dict[int, dict[str, bool]] = {p: {} for p in by_position}
        for p, ops in by_position.items():
            for op in ops:
                w = _weight_of(op)
                split[p][w] = split[p].get(w, False) or any(tensors[t].shards > 1 for t in op.inputs)
        own = {p: {w: tensors[w].grad_collectives for w in ws if tensors[w].grad_collectives is not None}
               for p, ws in split.items()}  # weights whose gradient collectives the program gives
        grads = {p: {way: [tensors[w].nbytes for w, s in ws.items() if s == way and w not in own[p]]
                     for way in (True, False)} for p, ws in split.items()}
        sharded = {p: any(ws.values()) for p, ws in split.items()}
        domain, across = self._sharding_groups(updates)
        if R > 1:
            seq.items += self.collectives("reduce_scatter", {p: g[True] for p, g in grads.items() if g[True]},
                                          "gradient", domain)
            if across[1] > 1:  # shards of the same part of a tensor, reduced across the domains
                seq.items += self.collectives("all_reduce", {p: [-(-n // domain[1]) for n in g[True]]
                                                             for p, g in grads.items() if g[True]}, "gradient shard",
                                              across)
            seq.items += self.collectives("all_reduce", {p: g[False] for p, g in grads.items() if g[False]},
                                          "gradient")
            seq.items += self._program_gradient_collectives(own)
        if clipping:
            seq.items += self._clip_by_global_norm(clipping, sharded, domain)
        # with RTS each LAMB norm of a sharded weight covers a shard: PopART all-reduces each
        # LambSquare's one fp32 value across the sharding domain
        # (LambSquareOp::configureForReplicatedTensorSharding) before the trust ratio; the norms'
        # all-reduces run between the updates' two phases
        norms = {p: sum(1 for op in ops if op.attrs.get("optimizer") == "lamb" and "norm_of" in op.attrs
                        and split[p][_weight_of(op)])
                 for p, ops in by_position.items() if R > 1}
        norms = {p: n for p, n in norms.items() if n}
        off_chip = {p: ({t for op in ops for t in op.inputs if tensors[t].location == "off_chip" and t not in loaded},
                        {t for op in ops for t in op.outputs if tensors[t].location == "off_chip"})
                    for p, ops in by_position.items()}
        alone = self._update_alone([p for p, ops in by_position.items() if ops],
                                   {p for p, io in off_chip.items() if any(io)}, R, bool(clipping) and self.pipelined)
        tails = []
        for r in self.replicas:
            ipus = self.ipus(r)
            head: dict[int, list] = {}
            tail: dict[int, list] = {}
            for p, ops in by_position.items():
                if not ops:
                    continue
                first, last = head.setdefault(p, []), tail.setdefault(p, [])
                nbytes = {name: sum(tensors[t].nbytes // tensors[t].shards for t in ts)
                          for name, ts in zip(("load", "store"), off_chip[p])}
                if nbytes["load"]:
                    first.append(RemoteCopy(ipus[p], "load", nbytes["load"], "load optimizer inputs"))
                share = {op.name: domain[1] if split[p][_weight_of(op)] else 1 for op in ops}
                if p in norms:
                    first.append(Compute(ipus[p], "weight update",
                                         self.steps([op for op in ops if op.kind != "lamb_update"], share=share)))
                    last.append(Compute(ipus[p], "weight update",
                                        self.steps([op for op in ops if op.kind == "lamb_update"], share=share)))
                else:
                    first.append(Compute(ipus[p], "weight update", self.steps(ops, share=share)))
                if nbytes["store"]:
                    (last if p in norms else first).append(
                        RemoteCopy(ipus[p], "store", nbytes["store"], "store optimizer outputs"))
            seq.items += self._in_turn(r, head, alone)
            tails.append([item for item in self._in_turn(r, tail, alone) + [self.replica_sync(r, "weight update sync")]
                          if item is not None])
            if not norms:
                seq.items += tails.pop()
        seq.items += self.collectives("all_reduce", {p: [4] * n for p, n in norms.items()}, "LAMB norm", domain)
        for tail in tails:
            seq.items += tail
        if R > 1:  # a weight held off chip as shards is stored as its shard; it is gathered where it is read
            gathers = {p: [tensors[w].nbytes for w, s in ws.items() if s and w not in own[p]
                           and not _streamed_shards(tensors[w])] for p, ws in split.items()}
            seq.items += self.collectives("all_gather", {p: g for p, g in gathers.items() if g}, "weight", domain)
        return seq

    def gather_weight_shards(self, ipu: int, names) -> list:
        """The all-gathers of the off-chip weights among ``names`` that are held as shards over replicas
        (their tensor locations' replicated tensor sharding): a replica loads its shard from streaming memory and
        PopART's ReplicatedAllGather makes the whole weight before the ops read it (StreamingMemoryOpInserter),
        over the weights' sharding domain, for the IPU at position ``ipu``."""
        tensors = self.g.tensors
        sharded = sorted(t for t in set(names) if tensors[t].role == "weight" and _streamed_shards(tensors[t]))
        if not sharded:
            return []
        domain = (tensors[sharded[0]].shard_stride, tensors[sharded[0]].shards)
        return self.collectives("all_gather", {ipu: [tensors[t].nbytes for t in sharded]}, "weight shards", domain)

    def _update_alone(self, positions: list[int], off_chip: set[int], replicas: int,
                      clipped_pipeline: bool = False) -> list[int]:
        """The IPU positions of a replica whose part of the weight update (PopART's accumulate outer
        fragment) runs on its own, in virtual graph order, while the replica's other IPUs wait.

        ``accumulateOuterFragmentSettings.schedule`` Serial (PopART's default) orders the fragment's
        ops by virtual graph, and Scheduler bins them by cluster, a weight's collectives and updates
        together (AccumulateOuterFragmentParallelizer::getBinConstraints); the two Overlap schedules
        also bring the IPUs' like remote ops together, to run as one exchange, so their parts run at
        once, all but ``excludedVirtualGraphs``. An IPU's part runs alone only where it holds ops that
        sync the whole replica, which no other IPU's work can pass: its gradients' collectives (more
        than one replica) or its state's streaming memory loads and stores. Graphcore's examples set
        OverlapMemoryOptimized to "parallelize optimizer step update across IPUs"."""
        if self.ipus_per_replica < 2 or len(positions) < 2:
            return []
        schedule = self.options.outer_fragment_schedule(clipped_pipeline)
        ordered = positions if schedule in ("Serial", "Scheduler") else \
            [p for p in positions if p in self.options.outer_fragment_excluded()]
        alone = [p for p in ordered if replicas > 1 or p in off_chip]
        if alone:
            together = "" if schedule.startswith("Overlap") else \
                "; OverlapMemoryOptimized or OverlapCycleOptimized runs them together"
            note = (f"weight update: accumulateOuterFragmentSettings schedule {schedule}: the optimizer steps of "
                    f"IPU{'s' if len(alone) > 1 else ''} {', '.join(map(str, alone))} of each replica run one "
                    "at a time, the replica's other IPUs waiting (their collectives or streaming-memory copies "
                    f"sync the whole replica){together}")
            if note not in self.notes:
                self.notes.append(note)
        return alone

    def _in_turn(self, replica: int, parts: dict[int, list], alone: list[int]) -> list:
        """Items of ``parts`` (IPU position -> its items) with each of ``alone`` between syncs of the
        whole replica, in order, before the other positions' items, which run together."""
        items = []
        for p in alone:
            if parts.get(p):
                items += [self.replica_sync(replica, f"weight update, IPU {p} alone"), *parts[p]]
        if items:
            items.append(self.replica_sync(replica, "weight update, the IPUs together"))
        return items + [item for p, part in parts.items() if p not in alone for item in part]

    def _program_gradient_collectives(self, own: dict[int, dict[str, tuple]]) -> list:
        """The collectives a program applies to its weights' gradients itself (``Tensor.grad_collectives``),
        each over its own replica groups: per kind and grouping, the weights' calls as :meth:`collectives`
        makes them, in the order the program first applies them."""
        calls: dict[tuple, dict[int, list[int]]] = {}
        for p, weights in own.items():
            for collectives in weights.values():
                for kind, stride, size, nbytes in collectives:
                    calls.setdefault((kind, stride, size), {}).setdefault(p, []).append(nbytes)
        return [item for (kind, stride, size), by_position in calls.items()
                for item in self.collectives(kind, by_position, "gradient", (stride, size))]

    def _clip_by_global_norm(self, ops: list[Op], sharded: dict[int, bool], domain: tuple[int, int]) -> list:
        """Gradient clipping's barrier across a replica's IPUs (PopART's ClipWeightGradientsByNorm):
        each IPU reduces its gradients' norms (with RTS of its shards, then all-reduces each
        norm's one value over the sharding domain, as LAMB's norms), copies them to the IPU of the
        global ops (:func:`sim.graph.training.place_global_norm`), which makes the clip factor and
        copies it back; no IPU scales its gradients and updates before the factor arrives."""
        tensors = self.g.tensors
        norms = {p: [op for op in ops if op.attrs["clip"] == "norm" and op.ipu == p]
                 for p in range(self.ipus_per_replica)}
        made = [op for op in ops if op.attrs["clip"] == "global"]
        root = made[0].ipu
        items = [Compute(self.ipus(r)[p], "gradient clipping norms",
                         self.steps(n, share=domain[1] if sharded[p] else 1))
                 for r in self.replicas for p, n in norms.items() if n]
        if self.options.total_replicas() > 1:
            items += self.collectives("all_reduce", {p: [tensors[op.outputs[0]].nbytes for op in n]
                                                     for p, n in norms.items() if n and sharded[p]}, "clip norm", domain)
        factor = tensors[made[-1].outputs[0]].nbytes
        for r in self.replicas:
            ipus = self.ipus(r)
            gather = tuple((ipus[p], ipus[root], sum(tensors[op.outputs[0]].nbytes for op in n))
                           for p, n in norms.items() if n and p != root)
            spread = tuple((ipus[root], ipus[p], factor) for p in range(self.ipus_per_replica) if p != root)
            sync = self.replica_sync(r, "gradient clipping sync")
            items += [IpuCopy(gather, "gradient norms to the global norm")] * bool(gather) + [sync] * bool(gather)
            items.append(Compute(ipus[root], "gradient clipping factor", self.steps(made)))
            items += [IpuCopy(spread, "clip factor to every IPU")] * bool(spread) + [sync] * bool(spread)
        return items

    def _sharding_groups(self, updates: list[Op]) -> tuple[tuple[int, int], tuple[int, int]]:
        """``(stride, size)`` of the replica groups the weight update's sharded tensors are split
        over (their sharding domain; all replicas if none is sharded), and of the groups across
        those that hold the same shard. A domain smaller than the replicas reduce-scatters within
        it, then all-reduces each shard across the domains (the complementary CommGroup:
        StreamingMemoryOpInserter, getComplementCommGroupWithSuperSet)."""
        R = self.options.total_replicas()
        domains = {(self.g.tensors[t].shard_stride, self.g.tensors[t].shards)
                   for op in updates for t in op.inputs if self.g.tensors[t].shards > 1}
        if len(domains) > 1:
            raise OptionsError(f"the weight update's sharded tensors have different sharding domains "
                               f"{sorted(domains)} ((stride, group size)); the simulator models one: give "
                               "weights, optimizer state and accumulators the same shardingDomain")
        stride, size = domains.pop() if domains else (1, R)
        return (stride, size), ((size, R // size) if stride == 1 else (1, stride))

    def collectives(self, op: str, bytes_by_position: dict[int, list[int]], what: str,
                    group: tuple[int, int] | None = None) -> list:
        """The weight update's ``op`` collectives on tensors of ``bytes_by_position`` (each IPU
        position's tensor sizes) over the replica groups ``group`` (``(stride, size)``; None: all
        replicas): one merged call per position, all positions at once, if PopART merges ``op``
        (``replicatedCollectivesSettings``, :meth:`Options.merged_collectives`); else one call per
        tensor, one after another (PopART's default: MergeCollectivesTransform merges only what
        those settings name, willow/src/transforms/mergecollectives.cpp)."""
        if op in self.options.merged_collectives():
            return per_position(self, op, {p: sum(sizes) for p, sizes in bytes_by_position.items()}, what, group)
        return per_tensor(self, op, bytes_by_position, what, group)

    def outputs_every_step(self) -> bool:
        return self.mode in (OutputMode.All, OutputMode.EveryN)


def _streamed_shards(t) -> bool:
    """Whether tensor ``t`` lives off chip as a shard a replica (it is loaded as one and gathered to use)."""
    return t.shards > 1 and t.location == "off_chip"


def _weight_of(op: Op) -> str:
    """The weight an update op belongs to (every one names it; else its first input)."""
    return op.attrs.get("weight", op.inputs[0])


def inner_loop_streams(ctx: Context) -> set[str]:
    """Host streams overlapped within the gradient-accumulation loop only, not across device iterations.

    PopTorch's ``OverlapAccumulationLoop`` is PopART's ``ExchangeStrategy::OverlapInnerLoop``, and
    ``OverlapDeviceIterationLoop`` its ``OverlapLoops``. PopART's OverlapIO transform
    (willow/src/transforms/overlapio.cpp) decomposes the inner loop (gradient accumulation, or the
    device-iteration loop when there is no accumulation) for either, and the outer loop only for
    ``OverlapLoops`` when both loops exist: so an ``OverlapInnerLoop`` stream loads the first
    micro-batch of a device iteration, and stores its last output, inside that iteration. Empty
    unless training with gradient accumulation and several device iterations on IO tiles.
    """
    o = ctx.options
    if not (ctx.training and o.Training.gradient_accumulation > 1 and o.device_iterations > 1
            and o.TensorLocations.num_io_tiles and not o.synthetic_data):
        return set()
    return {name for name, mode in ctx.g.overlap.items() if mode == OverlapMode.OverlapAccumulationLoop}


def with_iteration_boundary(body: Sequence, names: set[str]) -> Sequence:
    """``body`` (one device iteration) whose IO-tile copies of ``names`` stay inside it: a
    zero-cycle barrier on each replica's IPUs first waits for the previous iteration's output
    copies, and the iteration's input copies wait for it (:func:`inner_loop_streams`)."""
    copies = [c for c in leaves(body) if isinstance(c, StreamCopy) and c.io_tiles and c.name in names]
    if not copies:
        return body
    barriers = []
    for replica in sorted({c.replica for c in copies}):
        own = [c for c in copies if c.replica == replica]
        barrier = Sync(tuple(sorted({c.ipu for c in own})), "host", 0, "device-iteration boundary",
                       after=tuple(c for c in own if c.direction == "from_ipu"))
        for c in own:
            if c.direction == "to_ipu":
                c.after = c.after + (barrier,)
        barriers.append(barrier)
    return Sequence(barriers + [body], body.name)


def device_iteration_loop(ctx: Context, step) -> Sequence:
    """``deviceIterations`` runs of ``step(with_outputs)``, honouring OutputMode.EveryN."""
    o = ctx.options
    inner_only = inner_loop_streams(ctx)
    if inner_only:
        step = (lambda build: lambda with_outputs: with_iteration_boundary(build(with_outputs), inner_only))(step)
    main = Sequence(name="main")
    if ctx.mode == OutputMode.EveryN and o.output_return_period > 1:
        n = o.output_return_period
        period = Sequence([Repeat(n - 1, step(False), "steps without outputs", ctx.collapse_device), step(True)],
                          "output period")
        main.add(Repeat(o.device_iterations // n, period, "device iterations", ctx.collapse_device))
    else:
        main.add(Repeat(o.device_iterations, step(ctx.outputs_every_step()), "device iterations",
                        ctx.collapse_device))
    main.items += ctx.final_outputs()
    return main
