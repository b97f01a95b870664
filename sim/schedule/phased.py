"""Phased execution (serial and parallel), as PopART runs it.

The forward phases ``0 .. N-1`` run one after another; in training the backward phases mirror
them: the backward of phase ``p`` runs in phase ``2N-2-p`` (the last forward phase and its
backward share a phase), or ``2N-1-p`` with ``useSeparateBackwardPhase``. Within a phase its
stages run at the same time, each on its IPU.

Weights live in streaming memory and are loaded before each phase that uses them (and stored
after the weight update). Activations that a later phase on the same IPU needs stay on chip
(``Liveness.AlwaysLive``) or are stored to streaming memory after the forward pass and loaded
back for the backward (the ``OffChip...`` liveness settings); activations a phase on another
IPU needs are copied there at the end of the phase.

Serial phased: all phases on one group of IPUs, so loads wait for the previous phase. Parallel
phased: phases alternate between IPU groups (``Phase.ipus``), and the loads of the next phase
are issued before the current phase computes, so one group loads while the other computes.
"""

from __future__ import annotations

from collections import defaultdict

from ..graph.ir import Op
from ..program import IpuCopy, RemoteCopy, Repeat, Sequence
from .context import Context, device_iteration_loop
from .stages import StageWork
from ..strategy import Liveness

_ALWAYS_LIVE = ("weight", "constant", "state", "accumulator")


def phase_of(ctx: Context, op: Op, forward_phases: int) -> int:
    """The phase an op runs in (backward ops mirror their forward op's phase)."""
    strategy = ctx.options.execution_strategy
    if op.pass_ == "forward":
        return op.phase
    separate = getattr(strategy, "separate_backward_phase", False)
    return (2 * forward_phases - 1 if separate else 2 * forward_phases - 2) - op.phase


def split_phases(ctx: Context) -> list[dict[int, StageWork]]:
    """Per phase, the work of each IPU (within a replica)."""
    ops = [op for op in ctx.g.ops if op.pass_ != "update"]
    N = len({op.phase for op in ops if op.pass_ == "forward"})
    phases: list[dict[int, StageWork]] = defaultdict(dict)
    for op in ops:
        t = phase_of(ctx, op, N)
        work = phases[t].setdefault(op.ipu, StageWork(t, op.ipu, op.phase))
        work.ops.append(op)
    return [phases[t] for t in sorted(phases)]


def _flows(ctx: Context, phases: list[dict[int, StageWork]]):
    """Host streams, cross-IPU sends and same-IPU carries between phases.

    Returns (sends per phase: list of (src ipu, dst ipu, bytes), carried bytes per (phase, ipu):
    activations a later phase on the same IPU reads, loads per (phase, ipu): weight bytes).
    """
    g = ctx.g
    where = {}
    for t, works in enumerate(phases):
        for ipu, w in works.items():
            for op in w.ops:
                for o in op.outputs:
                    where.setdefault(o, (t, ipu))
    sends = defaultdict(list)
    carried = defaultdict(int)
    loads = defaultdict(int)
    seen_input = set()
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
                        carried[(src[0], ipu, t)] += tensor.nbytes
                    else:
                        sends[src[0]].append((src[1], ipu, tensor.nbytes))
            loads[(t, ipu)] = sum(g.tensors[n].nbytes for n in weights if g.tensors[n].location == "off_chip")
            w.host_outputs = [o for op in w.ops for o in op.outputs if o in g.outputs]
    return sends, carried, loads


def build(ctx: Context) -> Sequence:
    """The program of a phased model for one call."""
    phases = split_phases(ctx)
    sends, carried, loads = _flows(ctx, phases)
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

    def load_items(t: int) -> list:
        def make(r):
            ipus = ctx.ipus(r)
            items = []
            for ipu in phases[t]:
                nbytes = loads[(t, ipu)] + (sum(b for (_, i, dst), b in carried.items() if dst == t and i == ipu)
                                            if off_chip else 0)
                if nbytes:
                    items.append(RemoteCopy(ipus[ipu], "load", nbytes, f"phase {t} load"))
            return items
        return ctx.for_replicas(make)

    def after_phase(t: int, works) -> list:
        def make(r):
            ipus = ctx.ipus(r)
            items = []
            for ipu in works if off_chip else ():
                keep = sum(b for (src, i, _), b in carried.items() if src == t and i == ipu)
                if keep:
                    items.append(RemoteCopy(ipus[ipu], "store", keep, f"phase {t} store activations"))
            transfers = tuple((ipus[s], ipus[d], b) for s, d, b in sends.get(t, []))
            if transfers:
                items.append(IpuCopy(transfers, f"phase {t} copy"))
            sync = ctx.replica_sync(r, f"phase {t} sync")
            return items + ([sync] if sync else [])
        return ctx.for_replicas(make)

    def micro_batch(with_outputs: bool) -> Sequence:
        seq = Sequence(name="micro-batch")
        pending = load_items(0)
        for t, works in enumerate(phases):
            stages = list(works.values())
            seq.items += pending
            pending = load_items(t + 1) if t + 1 < len(phases) else []
            if parallel:  # the next phase's group loads while this one computes
                seq.items += pending
                pending = []
            seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "to_ipu"))
            seq.items += ctx.stages_items(stages, load_weights=False)  # loaded above, per phase
            if with_outputs:
                seq.items += ctx.for_replicas(lambda r: ctx.transfers(r, stages, "from_ipu"))
            seq.items += after_phase(t, works)
        return seq

    if not off_chip:  # activations kept on chip across phases count against tile memory
        for (src, ipu, _), nbytes in carried.items():
            phases[src][ipu].kept_bytes += nbytes

    def step(with_outputs: bool) -> Sequence:
        if not ctx.training:
            return micro_batch(with_outputs)
        s = Sequence(name="weight-update step")
        s.add(Repeat(ctx.options.Training.gradient_accumulation, micro_batch(with_outputs),
                     "gradient accumulation", ctx.collapse_accumulation))
        s.add(ctx.weight_update())
        return s

    return device_iteration_loop(ctx, step)
