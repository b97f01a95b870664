"""Where PopART puts ops the builder did not place: ``VirtualGraphMode`` Auto and ExecutionPhases.

* :func:`auto_virtual_graphs` is PopART's AutoVirtualGraph transform (``willow/src/transforms/
  auto_virtual_graph.cpp``): it splits the forward ops over a replica's IPUs so that each IPU gets an even share
  of a cost, the bytes of the weights and constants an op reads (twice with gradient accumulation: each weight
  has an accumulator), plus in training the bytes of the op's own inputs and outputs its gradient reads. The
  ops are grouped into subgraphs that start at each consumer of a streamed input; a split can fall only on an op
  into which all of its subgraph's data has come together.
* :func:`phased_strategy` turns the ops' ``executionPhase`` annotations into the simulator's phased execution
  (:mod:`sim.schedule.phased`), as PopTorch's phased strategies hand theirs to PopART.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import OptionsError
from ..graph.ir import Graph
from ..graph.training import expand_training
from ..strategy import Liveness, ParallelPhasedExecution, Phase, SerialPhasedExecution, Stage

_WEIGHT_ROLES = ("weight", "constant")


@dataclass
class _Subgraph:
    """Ops that data from one streamed input (or one merging op) reaches, in PopART's sense."""

    candidates: set[int]  # ops (schedule positions) the subgraph's data has reached but not yet passed
    cost: float = 0.0  # bytes, summed over the subgraph's ops so far
    splits: dict[float, int] = field(default_factory=dict)  # cumulative cost -> op where the data has merged
    chosen: set[int] = field(default_factory=set)  # split ops: the ops after each go on the next IPU
    ipu: int = 0
    split_before: bool = False

    def best_split(self, wanted: float) -> int | None:
        """The split op whose cost is nearest ``wanted``, among the first at or above it and the one before
        (``Subgraph::best_split``); it is taken out of the candidates."""
        above = sorted(c for c in self.splits if c >= wanted)
        if not above:
            return None
        key = above[0]
        below = [c for c in self.splits if c < key]
        if below and wanted - max(below) < key - wanted:
            key = max(below)
        return self.splits.pop(key)


def _gradient_reads(graph: Graph) -> dict[str, set[str]]:
    """For each forward op, the tensors of its own inputs and outputs its gradient ops read."""
    g = expand_training(graph)
    forward = {op.name: op for op in graph.ops}
    reads: dict[str, set[str]] = {}
    for op in g.ops:
        fwd = forward.get(op.forward_of) if op.forward_of else None
        if fwd is not None:
            reads.setdefault(fwd.name, set()).update(
                t for t in op.inputs if t in fwd.inputs or t in fwd.outputs)
    return reads


def auto_virtual_graphs(graph: Graph, ipus: int, training: bool, accumulation: bool,
                        split_ratios=()) -> None:
    """Set every op's ``ipu`` as PopART's AutoVirtualGraph does for ``ipus`` IPUs a replica.

    ``split_ratios`` (``virtualGraphSplitRatios``) is each IPU's share of the cost, else an even share.
    Raises :class:`OptionsError` when the graph has too few places to split for that many IPUs.
    """
    ops = graph.ops
    if ipus == 1 or not ops:
        for op in ops:
            op.ipu = 0
        return
    ratios = [float(r) for r in split_ratios]
    if ratios and len(ratios) != ipus:
        raise OptionsError(f"virtualGraphSplitRatios has {len(ratios)} value(s), but a replica has {ipus} IPUs: "
                           "give one share an IPU (or none for even shares)")
    if ratios and (any(not 0 < r < 1 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6):
        raise OptionsError(f"virtualGraphSplitRatios {ratios}: each must be in (0, 1) and they must sum to 1")
    weight_factor = 2.0 if accumulation else 1.0
    reads = _gradient_reads(graph) if training else {}
    tensors = graph.tensors

    def cost(op) -> float:
        """Bytes (PopART's ``costFn``): weights and constants read, then the activations the gradient keeps."""
        seen = {t for t in op.inputs if tensors[t].role in _WEIGHT_ROLES}
        total = weight_factor * sum(tensors[t].nbytes for t in seen)
        return total + sum(tensors[t].nbytes for t in reads.get(op.name, ()) if t not in seen)

    consumers: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for t in dict.fromkeys(op.inputs):
            consumers.setdefault(t, []).append(i)
    subgraphs: list[_Subgraph] = []
    home: dict[int, int] = {}  # op -> its subgraph

    def start(i: int) -> int:
        home.setdefault(i, len(subgraphs))
        subgraphs.append(_Subgraph({i}))
        return home[i]

    for name in graph.inputs:
        for i in consumers.get(name, []):
            start(i)
    total = 0.0
    for i, op in enumerate(ops):
        op_cost = cost(op)
        total += op_cost
        sid = home[i] if i in home else start(i)
        sub = subgraphs[sid]
        sub.cost += op_cost
        if i in sub.candidates:
            sub.candidates.discard(i)
            if not sub.candidates:
                sub.splits.setdefault(sub.cost, i)
        for j in dict.fromkeys(j for t in op.outputs for j in consumers.get(t, [])):
            if j not in home:
                home[j] = sid
                sub.candidates.add(j)
            elif home[j] == sid:
                sub.candidates.add(j)
            elif len(subgraphs[home[j]].candidates) == 1 and subgraphs[home[j]].cost == 0.0:
                subgraphs[home[j]].candidates.discard(j)  # an empty single-op subgraph joins this one
                sub.candidates.add(j)
                home[j] = sid
            else:  # data from two subgraphs meets here: a new subgraph from this op
                home[j] = len(subgraphs)
                subgraphs.append(_Subgraph({j}))
    _assign_ipus(subgraphs, ipus, ratios, total)
    for i, op in enumerate(ops):
        sub = subgraphs[home[i]]
        op.ipu = sub.ipu
        if i in sub.chosen:
            sub.ipu += 1


def _assign_ipus(subgraphs: list[_Subgraph], ipus: int, ratios: list[float], total: float) -> None:
    """Fill the IPUs in turn to their share of ``total``, splitting a subgraph where it crosses a share."""
    used, share, ipu, sid = 0.0, 0.0, 0, 0
    for n in range(1, ipus + 1):
        share = share + ratios[n - 1] if ratios else n / ipus
        budget = share * total
        while sid < len(subgraphs):
            sub = subgraphs[sid]
            over = sub.cost + used > budget and sub.cost > 0  # a zero-cost subgraph always fits
            at_end = sub.cost + used - budget == 0.0
            if over and n != ipus:
                split = sub.best_split(budget - used)
                if split is not None:
                    sub.chosen.add(split)
                    if not sub.split_before:
                        sub.ipu = ipu
                    sub.split_before = True
                    ipu += 1
                    break
                at_end = True
            used += sub.cost
            sid += 1
            if not sub.split_before:
                sub.ipu = ipu
            if at_end and n != ipus and sid != len(subgraphs):
                ipu += 1
                break
    if ipu != ipus - 1:
        raise OptionsError(f"VirtualGraphMode.Auto could not split the model over {ipus} IPUs (it found {ipu} "
                           "place(s) to split): use fewer IPUs, or place the ops with builder.virtualGraph and "
                           "VirtualGraphMode.Manual")


def phased_strategy(graph: Graph, phases: int, stages: int, activations_off_chip: bool):
    """The phased execution of ops annotated with ``executionPhase`` (and ``virtualGraph``).

    ``phases`` and ``stages`` are ``executionPhaseSettings``: a backward op runs in phase ``2 * phases - 2 - p``
    of its forward op's ``p`` (PopART's gradgrowerop.cpp); ``stages`` 1 runs every phase on one group of IPUs
    (serial), 2 alternates the phases between the even and odd IPUs (parallel). An op with no phase takes the
    phase of the op before it (the first ops, of the first annotated op), as PopART's placement inheritance
    takes a neighbour's; an op with no IPU runs on IPU ``phase % stages``. ``activations_off_chip`` (the
    activation tensor location settings' OffChip) stores activations between phases.
    """
    if stages not in (1, 2):
        raise OptionsError(f"executionPhaseSettings.stages {stages}: the simulator runs 1 (every phase on the same "
                           "IPUs) or 2 (phases alternating between even and odd IPUs)")
    ops = graph.ops
    first = next((op.phase for op in ops if op.phase is not None), None)
    if first is None:
        raise OptionsError("VirtualGraphMode.ExecutionPhases, but no op has an execution phase: annotate the ops "
                           "with builder.executionPhase")
    phase = first
    for op in ops:
        phase = op.phase = op.phase if op.phase is not None else phase
        if not 0 <= op.phase < phases:
            raise OptionsError(f"op {op.name!r} is in execution phase {op.phase}, but executionPhaseSettings.phases "
                               f"is {phases}: set phases to at least {op.phase + 1}")
        if op.ipu is None:
            op.ipu = op.phase % stages
        elif op.ipu % stages != op.phase % stages:
            raise OptionsError(f"op {op.name!r}: execution phase {op.phase} and virtual graph {op.ipu} do not match "
                               f"(with {stages} stage(s), phase % stages must equal virtual graph % stages)")
    on: dict[int, set[int]] = {}
    for op in ops:
        op.block = f"phase {op.phase} ipu {op.ipu}"
        on.setdefault(op.phase, set()).add(op.ipu)
    strategy = (SerialPhasedExecution if stages == 1 else ParallelPhasedExecution)(*[
        Phase(*[Stage(f"phase {p} ipu {ipu}").ipu(ipu) for ipu in sorted(on[p])]) if p in on else Phase()
        for p in range(phases)])
    strategy.phase_count = phases
    if activations_off_chip:
        if stages == 1:
            strategy.setTensorsLiveness(Liveness.OffChipAfterFwd)
        else:
            strategy.sendTensorsOffChipAfterFwd(True)
    return strategy
