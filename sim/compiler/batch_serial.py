"""PopART's batch serialisation (``batchSerializationSettings.factor``): each op that can be split along the
batch runs as ``factor`` pieces, one after another, each on 1/factor of the micro-batch.

How PopART's BatchSerialize transform (willow/src/transforms/batchserialize.cpp, opsharding.cpp) splits the
model, as :func:`serialise` finds it on the simulator's graph:

* **The batch** starts at the streamed inputs (their leading axis; one shorter than the factor is PopART's
  error) and follows the ops that read it: their outputs carry it too, except a reduction over the batch
  axis (a loss), a gradient of a tensor without it (a weight's) and a tensor too small to split. A tensor's
  piece divides its first dimension that the factor divides (PopART's batch axis, 0, or for a reshape the
  outer part of the outermost dimension at least the factor: ReshapeBaseOp::configureShardedOp).
* **The pieces**: an op that can be sharded (``Op::canShard``: :data:`SHARDABLE_KINDS`) and reads the batch
  runs once per piece. It costs ``factor`` times its cost on a piece, with a piece's temporaries
  (:func:`sim.cost.rules.batch_serial_cost`). An output without the batch is the sum of the pieces' partial
  results (``factor - 1`` additions).
* **Slices and concatenations**: a sharded op reading a whole tensor (a streamed input, or the output of an op
  that cannot be sharded) cuts a piece from it each time (a DynamicSlice; a view with UnrollStatic). The pieces
  of a tensor are written into a whole one (a DynamicUpdateSlice each) where an op that cannot be sharded
  reads it, where the model returns it, and where a reader sits in another context: another virtual graph,
  execution phase or pipeline stage, each unless its ``concatOn...Change`` setting is off.
* **Tile memory** (:attr:`sim.graph.ir.Tensor.batch_slices`): a tensor made in pieces and never concatenated
  lives one piece at a time when its readers run in its producer's pass. A forward tensor the backward pass
  reads keeps every piece (the forward pass makes all of them before the backward pass starts), and so does
  one kept on chip for a later execution phase; one stored off chip for a later phase is stored piece by
  piece (the remote stores are sharded too) and loaded piece by piece.

The ``batchSchedule`` OverlapOnIo and OverlapOnCompute overlap one piece's remote loads with another piece's compute
(PopART's DecomposeLoops for the Loop method, the BatchSerialScheduler's order for the unrolled ones): phased
execution loads the later pieces of the activations a phase reads on demand through the IO tiles while the phase
computes (:mod:`sim.schedule.phased`); elsewhere the schedule has no modelled effect, as the run's notes say.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable
from types import SimpleNamespace

from ..cost import OpCost, op_cost
from ..cost.row_ops import ROW_OP_KINDS
from ..cost.rules import ELEMENTWISE_KINDS, LOSS_COST_KINDS, POINTWISE_KINDS, batch_serial_cost
from ..errors import OptionsError
from ..graph.ir import VIEW_KINDS, Graph, Op, _clone
from ..hardware.system import IPU
from ..options import BatchSerialization
from .memory import ALWAYS_LIVE

#: the simulator's op kinds PopART shards (``canShard()`` true: element-wise, cast, concat, dropout, gather and
#: its gradient, group norm (PopART's layer norm), identity, matmul, NLL and its softmax gradient, reductions,
#: reshape, scaled add, slice, softmax, sum, transpose); ``pad`` is a sum of slices' gradients, which
#: PopART's PadSum pattern makes a concat; the optimizer's element-wise kinds run in the weight update, never
#: sharded. Not sharded: convolutions, batch norms, pooling, recurrent layers, CTC, sorts, custom ops.
SHARDABLE_KINDS = (VIEW_KINDS | ELEMENTWISE_KINDS | POINTWISE_KINDS | LOSS_COST_KINDS | frozenset(ROW_OP_KINDS)
                   | {"transpose", "remap", "pad", "map", "matmul", "gather", "embedding_grad", "groupnorm",
                      "groupnorm_grad", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
                      "argmax", "argmin"}) - {"accumulate", "sgd_update"}


@dataclass
class Plan:
    """Which ops run in pieces and what that moves. Shapes are in elements."""

    settings: BatchSerialization
    pieces: dict[str, tuple[int, ...]] = field(default_factory=dict)  # batch-carrying tensor -> a piece's shape
    ops: set[str] = field(default_factory=set)  # the sharded ops
    sliced: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # op -> whole inputs it cuts
    concatenated: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # op -> outputs joined
    summed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # op -> outputs summed

    @property
    def factor(self) -> int:
        return self.settings.factor

    def piece_view(self, op: Op, g: Graph) -> SimpleNamespace:
        """What :func:`sim.cost.op_cost` reads of a graph (its ``tensors``), for ``op``'s tensors, each batch-carrying
        one at its piece's shape."""
        return SimpleNamespace(tensors={n: _clone(g.tensors[n], shape=self.pieces.get(n, g.tensors[n].shape))
                                        for n in op.inputs + op.outputs})

    def cost(self, op: Op, g: Graph, ipu: IPU, tiles: int, memory_proportion: float, partials: str) -> OpCost:
        """The cost of sharded ``op``: its cost on one piece (its tensors at their pieces' shapes), ``factor``
        times, with its slices, concatenations and sums."""
        piece = op_cost(op, self.piece_view(op, g), ipu, tiles, memory_proportion, partials)
        moved = [(math.prod(self.pieces[t]), g.tensors[t].dtype) for t in self.concatenated[op.name]]
        if self.settings.method != "UnrollStatic":  # its pieces are views of the whole tensor
            moved += [(math.prod(self.pieces[t]), g.tensors[t].dtype) for t in self.sliced[op.name]]
        summed = [(g.tensors[t].shape, g.tensors[t].dtype) for t in self.summed[op.name]]
        return batch_serial_cost(piece, self.factor, moved, summed, ipu, tiles)

    def describe(self, g: Graph) -> str:
        """One line for the run's notes."""
        s = self.settings
        split = sum(1 for op in g.ops if op.name in self.ops and op.kind not in VIEW_KINDS)
        whole = sorted({op.kind for op in g.ops if op.name not in self.ops and op.pass_ != "update"
                        and any(t in self.pieces for t in op.inputs)})
        pieces = sum(1 for t in g.tensors.values() if t.batch_slices > 1)
        joins = sum(len(v) for v in self.concatenated.values())
        return (f"batch serialisation: factor {s.factor}, method {s.method}: {split} ops run in {s.factor} pieces "
                f"of the batch each; {pieces} tensors live a piece at a time; {joins} concatenated for their "
                "readers" + (f"; not split (PopART cannot shard them): {', '.join(whole)}" if whole else "")
                + (f"; batchSchedule {s.schedule}: in phased execution the later pieces of the activations a phase "
                   "loads on demand through the IO tiles load while it computes (elsewhere it changes nothing)"
                   if s.overlaps_io else ""))


def _piece(shape: tuple[int, ...], factor: int) -> tuple[int, ...] | None:
    """A piece of a tensor of ``shape``: its first dimension that ``factor`` divides (and at least ``factor``)
    divided by it; None if there is none."""
    for i, d in enumerate(shape):
        if d >= factor and d % factor == 0:
            return shape[:i] + (d // factor,) + shape[i + 1:]
    return None


def _reduces_batch(op: Op, g: Graph) -> bool:
    """Whether ``op`` is a reduction over axis 0 of its first input (the batch axis)."""
    if not op.kind.startswith("reduce_") or op.kind.endswith("_grad"):
        return False
    axes = op.attrs.get("axes")
    if axes is None or axes == "all":
        return True
    if isinstance(axes, str):  # "broadcast": summed to the shape of the tensor it is the gradient of
        return False
    rank = len(g.tensors[op.inputs[0]].shape)
    return 0 in {a % rank for a in axes} if rank else True


def _carries_batch(op: Op, out: str, g: Graph, pieces: dict) -> bool:
    """Whether output ``out`` of ``op``, which reads the batch, carries it too."""
    t = g.tensors[out]
    if t.role in ALWAYS_LIVE:
        return False
    if t.grad_of is not None:
        return t.grad_of in pieces
    return not _reduces_batch(op, g)


def serialise(g: Graph, settings: BatchSerialization, training: bool, phase_of: Callable[[Op], int] | None,
              activations_off_chip: bool) -> Plan | None:
    """The batch serialisation of ``g`` (placed: every op has its IPU, stage and phase), marking the tensors
    that live a piece at a time (``batch_slices``); None for a factor of 0 or 1. For a phased model,
    ``phase_of`` gives the phase an op runs in (a backward op's is not its forward op's), and
    ``activations_off_chip`` says whether the activations a later phase reads are stored in streaming memory."""
    N = settings.factor
    if N <= 1:
        return None
    if settings.method == "Loop" and settings.context == "Fwd" and training:
        raise OptionsError("Loop batch serialization is only supported in BatchSerializationTransformContext::Bwd "
                           "due to LoopGradOp missing. (set batchSerializationSettings.transformContext to Bwd, or "
                           "the method to UnrollDynamic)")
    plan = Plan(settings)
    pieces = plan.pieces
    readers: dict[str, list[Op]] = defaultdict(list)
    for op in g.ops:
        for t in dict.fromkeys(op.inputs):
            readers[t].append(op)
    for name in g.inputs:
        t = g.tensors[name]
        if not t.shape or not any(op.kind in SHARDABLE_KINDS for op in readers[name]):
            continue
        if t.shape[0] < N:
            raise OptionsError(f"Batch axis: {t.shape[0]} is smaller than the batch serialization factor: {N} for "
                               f"tensor {name} (give batchSerializationSettings.factor a divisor of the micro-batch)")
        if t.shape[0] % N:
            raise OptionsError(f"batchSerializationSettings.factor {N} does not divide input {name!r}'s batch axis "
                               f"({t.shape[0]}): the pieces must be equal; give a divisor of it")
        pieces[name] = (t.shape[0] // N,) + t.shape[1:]
    for op in g.ops:
        if op.pass_ == "update" or not any(t in pieces for t in op.inputs):
            continue
        sharded = op.kind in SHARDABLE_KINDS
        for out in op.outputs:
            piece = _piece(g.tensors[out].shape, N) if _carries_batch(op, out, g, pieces) else None
            if piece is not None:
                pieces[out] = piece
            elif sharded and g.tensors[out].role not in ALWAYS_LIVE:
                plan.summed[op.name].append(out)
        if sharded:
            plan.ops.add(op.name)
    _joins(g, plan, readers, phase_of, activations_off_chip)
    return plan


def _joins(g: Graph, plan: Plan, readers: dict[str, list[Op]], phase_of: Callable[[Op], int] | None,
           off_chip: bool) -> None:
    """The slices and concatenations of the batch-carrying tensors, and which live a piece at a time."""
    producer = {o: op for op in g.ops for o in op.outputs}
    concat_on = plan.settings.concat_on
    phase = phase_of or (lambda op: op.phase)

    def _context(op: Op) -> tuple:
        """The context whose change concatenates the pieces (batchserialscheduler.cpp
        getBatchSerialTensorContext)."""
        return (op.ipu if "ipu" in concat_on else None, phase(op) if "phase" in concat_on else None,
                op.stage if "stage" in concat_on else None)

    def _one_piece_at_a_time(made: Op, reader: Op) -> bool:
        """Whether ``reader`` frees each piece of what ``made`` makes before the next is made."""
        if phase_of is not None and phase(reader) != phase(made):
            return off_chip  # stored piece by piece after its phase, or every piece kept on chip
        return reader.pass_ == made.pass_

    for name in plan.pieces:
        made = producer.get(name)
        in_pieces = made is not None and made.name in plan.ops
        home = _context(made) if in_pieces else None
        cut_in: set[tuple] = set()
        whole = name in g.outputs
        for r in readers[name]:
            if r.name not in plan.ops:
                whole = whole or in_pieces
                continue
            where = _context(r)
            if in_pieces and where == home:
                continue
            whole = whole or in_pieces
            if where not in cut_in:  # one slice per reading context (serializedTensorMap's consumer context)
                cut_in.add(where)
                plan.sliced[r.name].append(name)
        if in_pieces and whole:
            plan.concatenated[made.name].append(name)
        elif in_pieces and all(_one_piece_at_a_time(made, r) for r in readers[name]):
            g.tensors[name].batch_slices = plan.factor
