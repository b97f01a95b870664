"""Phased execution (serial and parallel), as PopART runs it.

The forward phases ``0 .. N-1`` run one after another; in training the backward phases mirror
them: the backward of phase ``p`` runs in phase ``2N-2-p`` (the last forward phase and its
backward share a phase), or ``2N-1-p`` with ``useSeparateBackwardPhase`` (``N``: PopART's
``executionPhaseSettings.phases`` when sim.popart gives it, ``phase_count``). Within a phase its
stages run at the same time, each on its IPU.

Weights live in streaming memory and are loaded before each phase that uses them (and stored
after the weight update). Activations that a later phase on the same IPU needs stay on chip
(``Liveness.AlwaysLive``) or are stored to streaming memory after the forward pass and loaded
back for the backward (the ``OffChip...`` liveness settings); activations a phase on another
IPU needs are copied there at the end of the phase.

Without gradient accumulation a weight's optimizer step runs in the backward phase that completes
its gradient (:func:`_updates_in_phases`); with it, after the micro-batches.

Serial phased: all phases on one group of IPUs, so loads wait for the previous phase. Parallel
phased: phases alternate between IPU groups (``Phase.ipus``), and the loads of the next phase
are issued before the current phase computes, so one group loads while the other computes.

With IO tiles, a TensorLocations class whose ``useIOTilesToLoad`` is set (PopART's ``loadTileSet`` IO)
moves through them: its loads run on the IO tiles' own lane (during the phase before under PopART's
Preload IO schedule, once the phase before has ended under OnDemand) and are copied to the compute
tiles as their phase begins; its stores are copied out at the phase's end and stored from the IO
tiles while the next phase runs.
"""

from __future__ import annotations

from collections import defaultdict

from ..graph.ir import Graph, Op
from ..errors import OptionsError
from ..program import Compute, IpuCopy, RemoteCopy, Repeat, Sequence, leaves
from .context import Context, device_iteration_loop
from .hostio import io_tile_copy_steps
from .stages import StageWork
from ..strategy import Liveness

_ALWAYS_LIVE = ("weight", "constant", "state", "accumulator")
#: the TensorLocations class of each role a phase loads from streaming memory (activations: "activation")
_LOCATION_OF_ROLE = {"weight": "weight", "constant": "weight", "state": "optimizer", "accumulator": "accumulator"}


def _through_io_tiles(ctx: Context, kind: str) -> bool:
    """Whether the off-chip tensors of TensorLocations class ``kind`` move through the IO tiles
    (``useIOTilesToLoad``, PopART's ``loadTileSet`` IO: its RemoteLoad and RemoteStore run on the IO tiles, and
    an IoTileCopy moves the data to or from the compute tiles; streamingmemoryopinserter.cpp)."""
    locations = ctx.options.TensorLocations
    return bool(locations.num_io_tiles) and locations.locations[kind].io_tiles_to_load


def phase_of(strategy, op: Op, forward_phases: int) -> int:
    """The phase an op runs in under the phased ``strategy`` (backward ops mirror their forward op's phase)."""
    if op.pass_ == "forward":
        return op.phase
    separate = getattr(strategy, "separate_backward_phase", False)
    phases = getattr(strategy, "phase_count", None) or forward_phases
    return (2 * phases - 1 if separate else 2 * phases - 2) - op.phase


def forward_phases(g: Graph) -> int:
    """The forward phases of a phased model's graph."""
    return len({op.phase for op in g.ops if op.pass_ == "forward"})


def split_phases(ctx: Context) -> list[dict[int, StageWork]]:
    """Per phase, the work of each IPU (within a replica)."""
    N, strategy = forward_phases(ctx.g), ctx.options.execution_strategy
    phases: list[dict[int, StageWork]] = defaultdict(dict)
    for op in ctx.g.ops:
        if op.pass_ != "update":
            t = phase_of(strategy, op, N)
            work = phases[t].setdefault(op.ipu, StageWork(t, op.ipu, op.phase))
            work.ops.append(op)
    return [phases[t] for t in sorted(phases)]


def _updates_in_phases(ctx: Context, phases: list[dict[int, StageWork]]) -> dict[int, list[Op]]:
    """The weight updates that run inside a phase, by position in ``phases``; the rest stay in
    ``ctx.updates``, run after the step.

    Without gradient accumulation PopART runs a weight's optimizer ops in the execution phase that
    completes its gradient (the backward phase of its first forward user), among that phase's remote
    loads and stores (StreamingMemoryOpInserter::setPriority orders them within the phase), so a
    weight's gradient lives only in that phase and a weight loaded there is updated without a second
    load. With accumulation they are the accumulate outer fragment, after the micro-batches; gradient
    clipping by a global norm needs every gradient first, so both run after the step."""
    if not ctx.training or ctx.options.Training.gradient_accumulation > 1 or any(
            op.attrs.get("clip") in ("norm", "global") or op.phase is None for op in ctx.updates):
        return {}
    position = {works[next(iter(works))].index: i for i, works in enumerate(phases)}
    N, inside, after = forward_phases(ctx.g), defaultdict(list), []
    for op in ctx.updates:
        i = position.get(phase_of(ctx.options.execution_strategy, op, N))
        if i is not None and op.ipu in phases[i]:
            inside[i].append(op)
        else:
            after.append(op)
    for i, ops in inside.items():
        for ipu, work in phases[i].items():
            mine = [op for op in ops if op.ipu == ipu]
            if mine:
                work.memory_runs = [work.ops + mine]
    ctx.updates = after
    return inside


def _flows(ctx: Context, phases: list[dict[int, StageWork]]):
    """Host streams, cross-IPU sends and same-IPU carries between phases.

    Returns (sends per phase: list of (src ipu, dst ipu, bytes); carried: for each activation a
    later phase on the same IPU reads, ``(phase that makes it, ipu, the later phases reading it)``;
    loads per (phase, ipu): weight bytes; streamed per (phase, ipu): the off-chip weights, state and
    accumulators loaded for it). A tensor counts once however many ops read it.
    """
    g = ctx.g
    where = {}
    for t, works in enumerate(phases):
        for ipu, w in works.items():
            for op in w.ops:
                for o in op.outputs:
                    where.setdefault(o, (t, ipu))
    sends = defaultdict(list)
    carried: dict[str, tuple[int, int, set[int]]] = {}
    loads = defaultdict(int)
    streamed: dict[tuple[int, int], set[str]] = {}
    seen_input, received = set(), set()
    for t, works in enumerate(phases):
        for ipu, w in works.items():
            weights = set()
            for op in w.ops:
                for name in op.inputs:
                    tensor = g.tensors[name]
                    if tensor.role in _ALWAYS_LIVE:
                        weights.add(name)
                        continue
                    if tensor.role == "input":
                        if name not in seen_input:
                            seen_input.add(name)
                            w.host_inputs.append(name)
                        continue
                    src = where.get(name)
                    if src is None or src[0] == t:
                        continue
                    if src[1] == ipu:
                        carried.setdefault(name, (src[0], ipu, set()))[2].add(t)
                    elif (name, ipu) not in received:  # copied once to each IPU reading it
                        received.add((name, ipu))
                        sends[src[0]].append((src[1], ipu, tensor.nbytes))
            streamed[(t, ipu)] = {n for n in weights if g.tensors[n].location == "off_chip"}
            loads[(t, ipu)] = sum(g.tensors[n].nbytes // g.tensors[n].shards for n in streamed[(t, ipu)])
            w.host_outputs = [o for op in w.ops for o in op.outputs if o in g.outputs]
    return sends, carried, loads, streamed


def _keep_on_chip(ctx: Context, phases: list[dict[int, StageWork]], carried) -> None:
    """Tile memory of activations kept on chip between phases (``Liveness.AlwaysLive``): each is
    live from the op that makes it to the last phase reading it. The phases making or reading it
    (all but the last) hold it to their end; the phases of its IPU in between hold its bytes
    throughout."""
    for name, (src, ipu, readers) in carried.items():
        last = max(readers)
        for t in range(src, last):
            work = phases[t].get(ipu)
            if work is None:
                continue
            if t == src or t in readers:
                work.hold.add(name)
            else:
                work.through_bytes += ctx.g.tensors[name].nbytes


def _check_io_tiles(ctx: Context, phases: list[dict[int, StageWork]], held: dict) -> None:
    """The IO tiles hold, during a phase, what it stores through them, what it loads on demand and what the next
    phase preloads (``held``: bytes at once, by (phase, ipu) for stores and (phase, ipu, schedule) for loads; a
    batch-serialised tensor moves a piece at a time); error if that does not fit in their memory (each tile's SRAM
    less Poplar's reserved bytes)."""
    io_tiles = ctx.options.TensorLocations.num_io_tiles
    room = io_tiles * (ctx.system.ipu.sram_bytes_per_tile - ctx.system.ipu.reserved_bytes_per_tile)
    for t, works in enumerate(phases):
        for ipu in works:
            need = int(held[(t, ipu)] + held[(t, ipu, "OnDemand")] + held[(t + 1, ipu, "Preload")])
            if need > room:
                raise OptionsError(
                    f"phase {t} on IPU {ipu}: its stores and loads through the IO tiles need {need:,} bytes there at "
                    f"once, but {io_tiles} IO tiles hold {room:,}; use more IO tiles (numIOTiles, at most 192), "
                    "smaller phases, or load through the compute tiles (useIOTilesToLoad(False), PopART's loadTileSet "
                    "Compute)")


def build(ctx: Context) -> Sequence:
    """The program of a phased model for one call."""
    phases = split_phases(ctx)
    sends, carried, loads, streamed = _flows(ctx, phases)
    strategy = ctx.options.execution_strategy
    off_chip = strategy.liveness != Liveness.AlwaysLive
    parallel = not strategy.serial
    if off_chip and not parallel:
        ctx.notes.append(
            f"Liveness.{strategy.liveness.name}: the activations a later phase needs are stored after their "
            "phase and loaded before the phase that needs them, each load after the previous phase's compute "
            "(OffChipAfterFwdNoOverlap's order); the overlap of loads with compute that OffChipAfterFwd allows "
            "and the wider phase spacing of OffChipAfterEachPhase are not modelled")
    ctx.stages = [w for works in phases for w in works.values()]  # for memory and host outputs
    updates = _updates_in_phases(ctx, phases)
    stored = defaultdict(int)  # (phase, ipu) -> activation bytes stored after it (off chip)
    # through the IO tiles: (phase, ipu, "Preload" | "OnDemand") -> bytes loaded for it; (phase, ipu) -> stored
    io_loads, io_stored = defaultdict(int), defaultdict(int)
    io_held = defaultdict(float)  # the same keys -> bytes on the IO tiles at once (a batch-serialised piece's)
    # (phase, ipu) -> bytes of batch-serialised pieces loaded on demand while the phase's first piece computes
    io_behind = defaultdict(int)
    schedule = {kind: ctx.options.phase_io_schedule(kind) for kind in ctx.options.TensorLocations.locations}
    overlap = ctx.options.batch_serialization().overlaps_io

    def move(key: tuple, kind: str, nbytes: int, piece: float, way: str) -> None:
        """Count ``nbytes`` of TensorLocations class ``kind`` loaded for, or stored after, phase and IPU ``key``
        (``piece``: the bytes of it moved at once)."""
        if not _through_io_tiles(ctx, kind):
            (loads if way == "load" else stored)[key] += nbytes
            return
        at = key + (schedule[kind],) if way == "load" else key
        io_held[at] += piece
        if overlap and way == "load" and schedule[kind] == "OnDemand" and piece < nbytes:
            io_behind[key] += nbytes - int(piece)  # the later pieces: loaded while the first computes
            nbytes = int(piece)
        (io_loads if way == "load" else io_stored)[at] += nbytes
    for key, names in streamed.items():  # the weights, counted in loads by _flows: moved to io_loads if they go so
        for name in names:
            tensor, kind = ctx.g.tensors[name], _LOCATION_OF_ROLE[ctx.g.tensors[name].role]
            if _through_io_tiles(ctx, kind):
                shard = tensor.nbytes // tensor.shards
                loads[key] -= shard
                move(key, kind, shard, shard, "load")
    if off_chip:  # each carried tensor stored once after the phase making it, loaded before each reading it
        for name, (src, ipu, readers) in carried.items():
            tensor = ctx.g.tensors[name]
            phases[src][ipu].hold.add(name)  # live until stored, at the end of its phase
            move((src, ipu), "activation", tensor.nbytes, tensor.live_bytes, "store")
            for t in readers:
                move((t, ipu), "activation", tensor.nbytes, tensor.live_bytes, "load")
    else:
        _keep_on_chip(ctx, phases, carried)
    _check_io_tiles(ctx, phases, io_held)
    landed: dict[tuple, list] = defaultdict(list)  # (phase, replica, ipu) -> its loads on the IO tiles

    def io_load_items(t: int, when: str, ended: dict | None = None) -> list:
        """Phase ``t``'s loads to the IO tiles of schedule ``when``, on their own lane; each after the item
        ``ended`` gives for its IPU (the end of the phase before, for a load in the phase)."""
        def make(r):
            items = []
            for ipu in phases[t]:
                if io_loads[(t, ipu, when)]:
                    device = ctx.ipus(r)[ipu]
                    item = RemoteCopy(device, "load", io_loads[(t, ipu, when)], f"phase {t} load ({when}, IO tiles)",
                                      io_tiles=True, after=(ended[device],) if ended and device in ended else ())
                    landed[(t, r, ipu)].append(item)
                    items.append(item)
            return items
        return ctx.for_replicas(make)

    def io_copy(r: int, ipu: int, nbytes: int, name: str, after: tuple = ()) -> Compute:
        """The on-chip exchange of ``nbytes`` between an IPU's IO tiles and its compute tiles."""
        steps = io_tile_copy_steps(name, nbytes, ctx.system.ipu, ctx.options.TensorLocations.num_io_tiles,
                                   ctx.compute_tiles)
        return Compute(ctx.ipus(r)[ipu], f"io-tile copy {name}", steps, after=after)

    behind: dict[tuple, RemoteCopy] = {}  # (phase, replica, ipu) -> its later pieces' load

    def io_loads_behind(t: int) -> list:
        """Phase ``t``'s later batch-serialised pieces, loaded on the IO tiles while the phase computes
        (batchSchedule OverlapOnIo / OverlapOnCompute)."""
        def make(r):
            for ipu in phases[t]:
                if io_behind[(t, ipu)]:
                    behind[(t, r, ipu)] = RemoteCopy(ctx.ipus(r)[ipu], "load", io_behind[(t, ipu)],
                                                     f"phase {t} load (later pieces, IO tiles)", io_tiles=True)
                    yield behind[(t, r, ipu)]
        return ctx.for_replicas(lambda r: list(make(r)))

    def io_copies_behind(t: int) -> list:
        """The later pieces copied to the compute tiles: the phase ends once they have landed."""
        return ctx.for_replicas(lambda r: [
            io_copy(r, ipu, io_behind[(t, ipu)], f"phase {t} later pieces in", after=(behind[(t, r, ipu)],))
            for ipu in phases[t] if (t, r, ipu) in behind])

    def io_copies_in(t: int) -> list:
        """Phase ``t``'s loaded tensors copied from the IO tiles to the compute tiles once they have landed."""
        def make(r):
            return [io_copy(r, ipu, sum(item.nbytes for item in landed[(t, r, ipu)]), f"phase {t} in",
                    after=tuple(landed[(t, r, ipu)])) for ipu in phases[t] if landed[(t, r, ipu)]]
        return ctx.for_replicas(make)

    def load_items(t: int) -> list:
        def make(r):
            ipus = ctx.ipus(r)
            items = []
            for ipu in phases[t]:
                nbytes = loads[(t, ipu)]
                if nbytes:
                    items.append(RemoteCopy(ipus[ipu], "load", nbytes, f"phase {t} load"))
            return items
        return ctx.for_replicas(make)

    def after_phase(t: int, works) -> list:
        def make(r):
            ipus = ctx.ipus(r)
            items = []
            for ipu in works:
                if stored[(t, ipu)]:
                    items.append(RemoteCopy(ipus[ipu], "store", stored[(t, ipu)], f"phase {t} store activations"))
                if io_stored[(t, ipu)]:  # copied to the IO tiles, then stored from there while the next phase runs
                    out = io_copy(r, ipu, io_stored[(t, ipu)], f"phase {t} out")
                    items += [out, RemoteCopy(ipus[ipu], "store", io_stored[(t, ipu)],
                                              f"phase {t} store activations (IO tiles)", io_tiles=True, after=(out,))]
            transfers = tuple((ipus[s], ipus[d], b) for s, d, b in sends.get(t, []))
            if transfers:
                items.append(IpuCopy(transfers, f"phase {t} copy"))
            sync = ctx.replica_sync(r, f"phase {t} sync")
            return items + ([sync] if sync else [])
        return ctx.for_replicas(make)

    def micro_batch(with_outputs: bool) -> Sequence:
        seq = Sequence(name="micro-batch")
        landed.clear()
        behind.clear()
        pending = load_items(0)
        seq.items += io_load_items(0, "Preload")
        ended: dict[int, object] = {}  # device IPU -> the last item of the phase before on its compute tiles
        for t, works in enumerate(phases):
            stages = list(works.values())
            first = len(seq.items)
            seq.items += pending
            seq.items += io_load_items(t, "OnDemand", ended)  # PopART's OnDemand: in its phase, as it begins
            seq.items += io_copies_in(t)
            seq.items += io_loads_behind(t)
            pending = load_items(t + 1) if t + 1 < len(phases) else []
            if t + 1 < len(phases):  # Preload: in the phase before, on the IO tiles while this phase computes
                seq.items += io_load_items(t + 1, "Preload", ended)
            if parallel:  # the next phase's group loads while this one computes
                seq.items += pending
                pending = []
            seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "to_ipu"))
            for w in stages:  # weights loaded as shards, whole again before the phase computes
                seq.items += ctx.gather_weight_shards(w.ipu, streamed[(t, w.ipu)])
            seq.items += ctx.stages_items(stages, load_weights=False)  # loaded above, per phase
            seq.items += io_copies_behind(t)
            if with_outputs:
                seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "from_ipu"))
            if t in updates:  # its weights' optimizer steps; the off-chip weights this phase loaded are on chip
                seq.add(ctx.weight_update(updates[t], loaded=frozenset().union(
                    *(streamed[(t, w.ipu)] for w in stages))))
            seq.items += after_phase(t, works)
            ended = {item.ipu: item for item in leaves(Sequence(seq.items[first:]))
                     if isinstance(item, (Compute, RemoteCopy)) and not getattr(item, "io_tiles", False)}
        return seq

    def step(with_outputs: bool) -> Sequence:
        if not ctx.training:
            return micro_batch(with_outputs)
        s = Sequence(name="weight-update step")
        s.add(Repeat(ctx.options.Training.gradient_accumulation, micro_batch(with_outputs),
                     "gradient accumulation", ctx.collapse_accumulation))
        if ctx.updates:
            s.add(ctx.weight_update())
        return s

    return device_iteration_loop(ctx, step)
