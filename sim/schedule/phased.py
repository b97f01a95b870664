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

In training, the forward ops PopART marks Recompute (:func:`sim.schedule.recomputation.marked_phased`)
run again in the backward phase mirroring their forward phase, before the backward ops that read them
(PopART's ExplicitRecompute: one clone per op, in phase ``2N-2-p``), so a later phase reads only what
they are made from: the phase's inputs and its checkpoints (:func:`_recompute`).

Without gradient accumulation a weight's optimizer step runs in the backward phase that completes
its gradient (:func:`_updates_in_phases`); with it, after the micro-batches.

Serial phased: all phases on one group of IPUs, so loads wait for the previous phase. Parallel
phased: phases alternate between IPU groups (``Phase.ipus``), and the loads of the next phase
are issued before the current phase computes, so one group loads while the other computes.

With IO tiles, what a phase loads and stores may move through them (:mod:`sim.schedule.phase_io`).
"""

from __future__ import annotations

from collections import defaultdict

from ..graph.ir import Graph, Op
from ..program import Compute, IpuCopy, RemoteCopy, Repeat, Sequence, leaves
from .context import Context, device_iteration_loop
from .phase_io import LOCATION_OF_ROLE, PhaseTraffic
from .stages import StageWork, recompute_marked
from ..strategy import Liveness

_ALWAYS_LIVE = ("weight", "constant", "state", "accumulator")


def phase_of(strategy, op: Op, forward_phases: int) -> int:
    """The phase an op runs in under the phased ``strategy`` (backward ops mirror their forward op's phase)."""
    if op.pass_ == "forward":
        return op.phase
    separate = getattr(strategy, "separate_backward_phase", False)
    phases = getattr(strategy, "phase_count", None) or forward_phases
    return (2 * phases - 1 if separate else 2 * phases - 2) - op.phase


def activations_off_chip(strategy) -> bool:
    """Whether the phased ``strategy`` stores the activations a later phase reads in streaming memory (its
    liveness is not AlwaysLive)."""
    return strategy.liveness != Liveness.AlwaysLive


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
    if ctx.training and ctx.recomputed:
        _recompute(ctx.recomputed, phases)
    return [phases[t] for t in sorted(phases)]


def _recompute(marks: frozenset[str], phases: dict[int, dict[int, StageWork]]) -> None:
    """Rerun the ``marks`` ops of each forward phase in its backward phase, on the same IPU, before the
    backward ops reading them (:func:`~sim.schedule.stages.recompute_marked`); the phase of a forward op's
    recomputation is that of its backward ops (PopART's ExplicitRecompute: ``2N-2-p``, the mirror phase)."""
    for works in phases.values():
        for ipu, work in works.items():
            backward = [op for op in work.ops if op.pass_ == "backward"]
            forward = phases.get(backward[0].phase, {}).get(ipu) if backward else None
            if forward is not None:
                recompute_marked(work, marks, forward)


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
            if mine:  # after the phase's last run (its backward ops, with what they recompute)
                runs = work.memory_runs or [work.ops]
                work.memory_runs = [*runs[:-1], runs[-1] + mine]
    ctx.updates = after
    return inside


def _flows(ctx: Context, phases: list[dict[int, StageWork]]):
    """Host streams, cross-IPU sends and same-IPU carries between phases.

    Returns (sends per phase: list of (src ipu, dst ipu, bytes); carried: for each activation a
    later phase on the same IPU reads, ``(phase that makes it, ipu, the later phases reading it)``;
    streamed per (phase, ipu): the off-chip weights, state and accumulators loaded for it). A tensor
    counts once however many ops read it.
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
    streamed: dict[tuple[int, int], set[str]] = {}
    seen_input, received = set(), set()
    for t, works in enumerate(phases):
        for ipu, w in works.items():
            weights, made = set(), set()
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
                    if name in made:  # made earlier in the phase (recomputed there, say)
                        continue
                    src = where.get(name)
                    if src is None or src[0] == t:
                        continue
                    if src[1] == ipu:
                        carried.setdefault(name, (src[0], ipu, set()))[2].add(t)
                    elif (name, ipu) not in received:  # copied once to each IPU reading it
                        received.add((name, ipu))
                        sends[src[0]].append((src[1], ipu, tensor.nbytes))
                made.update(op.outputs)
            streamed[(t, ipu)] = {n for n in weights if g.tensors[n].location == "off_chip"}
            again = {id(op) for op in w.recomputed}  # a recomputed output went to the host in its forward phase
            w.host_outputs = [o for op in w.ops if id(op) not in again for o in op.outputs if o in g.outputs]
    return sends, carried, streamed


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


def build(ctx: Context) -> Sequence:
    """The program of a phased model for one call."""
    phases = split_phases(ctx)
    sends, carried, streamed = _flows(ctx, phases)
    strategy = ctx.options.execution_strategy
    off_chip = activations_off_chip(strategy)
    parallel = not strategy.serial
    if off_chip and not parallel:
        ctx.notes.append(
            f"Liveness.{strategy.liveness.name}: the activations a later phase needs are stored after their "
            "phase and loaded before the phase that needs them, each load after the previous phase's compute "
            "(OffChipAfterFwdNoOverlap's order); the overlap of loads with compute that OffChipAfterFwd allows "
            "and the wider phase spacing of OffChipAfterEachPhase are not modelled")
    ctx.stages = [w for works in phases for w in works.values()]  # for memory and host outputs
    updates = _updates_in_phases(ctx, phases)
    traffic = PhaseTraffic(ctx, phases)
    for key, names in streamed.items():  # the weights (RTS: a shard each), state and accumulators
        for name in names:
            tensor = ctx.g.tensors[name]
            shard = tensor.nbytes // tensor.shards
            traffic.move(key, LOCATION_OF_ROLE[tensor.role], shard, shard, "load")
    if off_chip:  # each carried tensor stored once after the phase making it, loaded before each reading it
        for name, (src, ipu, readers) in carried.items():
            tensor = ctx.g.tensors[name]
            phases[src][ipu].hold.add(name)  # live until stored, at the end of its phase
            traffic.move((src, ipu), "activation", tensor.nbytes, tensor.live_bytes, "store")
            for t in readers:
                traffic.move((t, ipu), "activation", tensor.nbytes, tensor.live_bytes, "load")
    else:
        _keep_on_chip(ctx, phases, carried)
    traffic.check()

    def after_phase(t: int, works) -> list:
        def make(r):
            ipus = ctx.ipus(r)
            items = [item for ipu in works for item in traffic.store_items(r, t, ipu)]
            transfers = tuple((ipus[s], ipus[d], b) for s, d, b in sends.get(t, []))
            if transfers:
                items.append(IpuCopy(transfers, f"phase {t} copy"))
            sync = ctx.replica_sync(r, f"phase {t} sync")
            return items + ([sync] if sync else [])
        return ctx.for_replicas(make)

    def micro_batch(with_outputs: bool) -> Sequence:
        seq = Sequence(name="micro-batch")
        traffic.start()
        pending = traffic.load_items(0)
        seq.items += traffic.io_load_items(0, "Preload")
        ended: dict[int, object] = {}  # device IPU -> the last item of the phase before on its compute tiles
        for t, works in enumerate(phases):
            stages = list(works.values())
            first = len(seq.items)
            seq.items += pending
            seq.items += traffic.io_load_items(t, "OnDemand", ended)  # PopART's OnDemand: in its phase
            seq.items += traffic.copies_in(t)
            seq.items += traffic.loads_behind(t)
            pending = traffic.load_items(t + 1) if t + 1 < len(phases) else []
            if t + 1 < len(phases):  # Preload: in the phase before, on the IO tiles while this phase computes
                seq.items += traffic.io_load_items(t + 1, "Preload", ended)
            if parallel:  # the next phase's group loads while this one computes
                seq.items += pending
                pending = []
            seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "to_ipu"))
            for w in stages:  # weights loaded as shards, whole again before the phase computes
                seq.items += ctx.gather_weight_shards(w.ipu, streamed[(t, w.ipu)])
            seq.items += ctx.stages_items(stages, load_weights=False)  # loaded above, per phase
            seq.items += traffic.copies_behind(t)
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
