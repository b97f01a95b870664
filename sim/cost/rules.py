"""Cost rules: which model prices each op kind, and the cache that prices identical ops once.

:func:`op_cost` prices an op of a :class:`~sim.graph.Graph` on ``tiles`` compute tiles of an
:class:`~sim.hardware.IPU`. The result, an :class:`OpCost`, is in cycles of the IPU clock and
bytes. Costs are cached by the op's *signature* (kind, shapes, dtypes, attributes, tiles), so
the 24 identical layers of BERT are priced once; the cache's key (:func:`price_key`) leaves out what no
rule reads (an update's weight, names, the inputs' roles where the rule does not read them), so ops
that differ only in those are priced once too.

An op kind the model does not know raises :class:`~sim.errors.UnsupportedOpError`; a custom
op can carry its own cost (kind ``"custom"``, see :func:`_custom`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from functools import lru_cache

import numpy as np

from ..errors import UnsupportedOpError
from ..graph.ir import DTYPE_BYTES, HOST_CALL, IO_TILE_COPY, REMOTE_KINDS, RNN_GATES, VIEW_KINDS, Graph, Op, spatial
from ..hardware.system import IPU
from .amp import (ConvShape, amp_mode, fc_weight_transpose, kernel_hits, padded_partials_rearranged,
                  pass_fixed_cycles, plan_codelets, plan_fc_training, plan_matmul, plan_rows_folded, relaid_operands,
                  with_relaid_operands, with_transposed_weights_moved, with_weight_transpose)
from .bilinear import forward_plan, grad_plan
from . import ctc_beam
from .ctc import plan_ctc
from .histogram import histogram_tile_cycles
from .embedding import (ATOM_BYTES, FLOAT_BYTES, LEGACY_POPLIBS, MIN_INDICES_PER_TILE, SLICES_REARRANGE_THRESHOLD,
                        SLICE_AVAILABLE_MEMORY_PROPORTION, EmbeddingPlan, in_range_share, iota_worker_cycles,
                        max_elems_per_worker, multi_slice_cycles, multi_update_op_cycles, offsets_per_worker,
                        plan_embedding, plan_embedding_sdk3, slice_worker_cycles, update_worker_cycles)
from .depthwise import plan_depthwise
from .pooling import (GRAIN_BYTES, PoolPass, forward_passes, plan_pool, received_bytes, tile_cost, window_reads,
                      worklist_bytes)
from .exchange import exchange_cycles
from .matmul_swap import plan_matmul_none_pass, result_block
from .scaled_add import scaled_add_fixed_cycles, scaled_add_tile_cycles
from .sort import bitonic_sort_cost
from .opcost import FREE, OpCost, TileProfile, _counts, in_series
from .rnn import backward_parts, forward_parts
from .reduction import LOG_ADD, plan_reduce, plan_reduce_partials
from .row_ops import ROW_OP_KINDS, batchnorm_steps, loss_steps, row_op_cost, row_op_steps
from .reduction import constants as reduce_constants
from .roialign import forward_plan as roi_align_forward, grad_plan as roi_align_grad
from .vector import (BROADCAST_OPS, INDEX_BYTES, broadcast_codelet, broadcast_pattern, broadcast_run, codelet,
                     fused_scalar_cycles, index_op_tile_cycles,
                     dynamic_slice_tile_cycles, launch_cycles, loop_counter_cycles, seed_programs_cycles, spread,
                     tile_cycles, uniform_int_cycles)


_VIEWS = VIEW_KINDS | {"pad"}  # popops::pad concatenates views of the input and constants (popops/Padder.cpp)
_UNARY = {"relu", "gelu", "gelu_erf", "tanh", "sigmoid", "swish", "exp", "scale", "dropout", "cast", "copy",
          "relu_grad", "gelu_grad", "gelu_erf_grad", "tanh_grad", "sigmoid_grad", "swish_grad", "accumulate",
          "sgd_update", "mul", "add", "sub", "div",
          "reduce_mean_grad", "reduce_sum_grad"}
#: the kinds priced as one popops element-wise op, each result laid out like its input
ELEMENTWISE_KINDS = frozenset(_UNARY)
#: the losses and their gradients, priced as the popops calls PopART makes (:func:`~sim.cost.row_ops.loss_steps`)
LOSS_COST_KINDS = frozenset({"softmax_cross_entropy", "mse_loss", "softmax_cross_entropy_grad", "mse_loss_grad"})
#: the codelet an op kind runs where it is not its own: a multiply by a constant is PopART's ScaleOp, popops'
#: scalar broadcast (the ``scale`` codelet stays ScaledAdd's, which the composed steps use)
_VECTOR_KIND = {"reduce_mean_grad": "scale", "reduce_sum_grad": "scale", "scale": "broadcast_scalar"}


#: the value types :func:`_freeze` returns as they are
_ATOMS = frozenset({str, int, float, bool, type(None)})


def _freeze(v):
    """``v`` made hashable: a dict as its (key, value) pairs sorted by key, a list or tuple as a tuple, their
    values frozen in turn; anything else as it is."""
    if type(v) in _ATOMS:
        return v
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


#: an op attribute that says where its program comes from, not what it costs (sim.compiler.program_memory)
CODE_OF = "code_of"


def op_signature(op: Op, graph: Graph) -> tuple:
    """Everything about an op that its cost depends on (not its name, nor :data:`CODE_OF`)."""
    tensors = graph.tensors
    ins = tuple([(t.shape, t.dtype, t.priced_role) for t in [tensors[n] for n in op.inputs]])
    outs = tuple([(t.shape, t.dtype) for t in [tensors[n] for n in op.outputs]])
    attrs = sorted((k, _freeze(v)) for k, v in op.attrs.items() if k != CODE_OF)  # _freeze(op.attrs) without it
    return (op.kind, ins, outs, tuple(attrs))


#: op attributes no cost rule reads (no rule under sim/cost looks them up; tests/test_op_signature.py checks it):
#: where an op's program comes from (:data:`CODE_OF`); which weight, optimizer, gradient clip or norm an op
#: belongs to; a recomputation checkpoint; a batch norm's ``replica_group_size`` (its statistics' all-reduce
#: is not part of the op's cost); and what the op's shapes and dtypes already say (a reduction's ``keepdims``,
#: a transpose's ``perm``, a cast's target ``to``) or its cost does not depend on (a scale's ``factor``, a
#: dropout's ``p``)
UNPRICED_ATTRS = frozenset({CODE_OF, "weight", "optimizer", "clip", "clip_norm", "norm_of", "recomputation_checkpoint",
                            "keepdims", "perm", "to", "factor", "p", "replica_group_size", "in_place"})


def price_key(sig: tuple) -> tuple:
    """The key :func:`op_cost` caches an op's cost by: its :func:`op_signature` ``(kind, inputs, outputs,
    attributes)`` without the attributes of :data:`UNPRICED_ATTRS`, with each input's role left empty
    (``""``) when the kind's rule reads only the inputs' shapes and dtypes (:data:`ROLE_FREE_KINDS`), and
    only the kind for a view, remote copy or IO-tile copy (:func:`_cost` prices them free, reading
    nothing). Two ops share it only if every field their rule reads is equal."""
    kind, ins, outs, attrs = sig
    if _is_free(kind):
        return (kind, (), (), ())
    if kind in ROLE_FREE_KINDS:
        ins = tuple((shape, dtype, "") for shape, dtype, _role in ins)
    return (kind, ins, outs, tuple((k, v) for k, v in attrs if k not in UNPRICED_ATTRS))


def reads_plan_options(kind: str) -> bool:
    """Whether the rule of ``kind`` reads the availableMemoryProportion and the partials type: the kinds
    :func:`_rule` plans as AMP matmuls (a matmul, a convolution pass, an accumulate into a matmul's result
    layout, a recurrent layer) and the lookups and scatters popops plans within the proportion
    (:data:`SLICE_PLAN_KINDS`). The others' costs are cached without them."""
    return (kind in AMP_KINDS or kind == "accumulate" or kind.removesuffix("_grad") in RNN_GATES
            or kind in SLICE_PLAN_KINDS)


class Signatures:
    """Each op's :func:`op_signature` in ``graph``, and its :func:`price_key`, each computed once: for the
    compiler's passes from pricing on, when the graph's ops and tensors no longer change (pricing, outlining
    and program memory each read every op's signature). Held by op object (an op is kept while it is held,
    so its id stays its own)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._seen: dict[int, tuple[Op, tuple]] = {}
        self._keys: dict[int, tuple[Op, tuple]] = {}

    def __call__(self, op: Op) -> tuple:
        hit = self._seen.get(id(op))
        if hit is None or hit[0] is not op:
            hit = self._seen[id(op)] = (op, op_signature(op, self.graph))
        return hit[1]

    def price_key(self, op: Op) -> tuple:
        """:func:`price_key` of ``op``'s signature."""
        hit = self._keys.get(id(op))
        if hit is None or hit[0] is not op:
            hit = self._keys[id(op)] = (op, price_key(self(op)))
        return hit[1]


def op_cost(op: Op, graph: Graph, ipu: IPU, tiles: int, memory_proportion: float = 0.6,
            partials: str = "float", signatures: Signatures | None = None) -> OpCost:
    """Cost of ``op`` on ``tiles`` compute tiles of ``ipu``.

    ``partials`` is the matmul/convolution partials type (``"float"``, PopTorch's default, or
    ``"half"``: ``Precision.setPartialsType``); an op's own ``partials_type`` attribute wins.
    ``signatures`` (of ``graph``) gives the op's signature if it has been computed already.
    Priced once per :func:`price_key`, IPU, tiles and, for the kinds that read them
    (:func:`reads_plan_options`), memory proportion and partials type.
    """
    key = signatures.price_key(op) if signatures else price_key(op_signature(op, graph))
    if not reads_plan_options(key[0]):
        memory_proportion, partials = None, None  # read by no rule of this kind: not part of the key
    try:
        return _cost(key, ipu, tiles, memory_proportion, partials)
    except UnsupportedOpError as e:
        raise UnsupportedOpError(f"op {op.name!r} (kind {op.kind!r}): {e}") from None


def _is_free(kind: str) -> bool:
    """Whether :func:`_cost` prices ``kind`` free (the schedule prices its data movement)."""
    return kind in _VIEWS or kind in REMOTE_KINDS or kind in (IO_TILE_COPY, HOST_CALL)


@lru_cache(maxsize=65536)
def _cost(key: tuple, ipu: IPU, tiles: int, memory_proportion: float | None, partials: str | None) -> OpCost:
    """The cost of the op of price key ``key`` (:func:`price_key`); ``memory_proportion`` and ``partials`` are
    None for a kind that does not read them (:func:`reads_plan_options`)."""
    kind, ins, outs, attrs = key
    attrs = dict(attrs)
    if _is_free(kind):  # priced by the schedule (RemoteCopy, hostio.io_tile_copy_steps)
        return FREE
    cost = _rule(kind, ins, outs, attrs, ipu, tiles, memory_proportion, partials)
    if cost.profile is None:
        cost = replace(cost, profile=TileProfile.uniform(tiles, cost.tiles_used, cost.compute_cycles,
                                                         cost.exchange_bytes / max(cost.tiles_used, 1),
                                                         cost.temp_bytes_per_tile))
    return cost


def _partials_bytes(attrs: dict, partials: str) -> int:
    kind = attrs.get("partials_type", partials)
    if kind not in ("float", "half"):
        raise UnsupportedOpError(f"partials type {kind!r}: expected 'float' or 'half'")
    return 4 if kind == "float" else 2


#: operand dtypes poplin plans a matmul or convolution on: its vertex types take half, float or
#: quarter (FP8) inputs (ConvVertexType.cpp getConvVertexTypeCandidates asserts it); FP8 needs an
#: IPU with FP8 AMP (sim/cost/amp.py amp_mode)
AMP_DTYPES = ("float16", "float32", "float8")
#: op kinds poplin plans within availableMemoryProportion
AMP_KINDS = ("matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight")
#: kinds popops runs with an embedding ``SlicePlan`` (multiSlice, multiUpdateOp), which PopART plans with
#: the op's availableMemoryProportion when it has one (popx/op/sliceplanx.cpp createSlicePlanOptions)
SLICE_PLAN_KINDS = ("gather", "embedding_grad", "gather_elements", "scatter_elements")


def _check_amp_operands(kind: str, ins) -> None:
    """poplin's matmul and convolution take two operands of one float type (Convolution.cpp
    verifyInputShapes: "Convolution/MatMul input types must match")."""
    dtypes = [dtype for _, dtype, _ in ins[:2]]
    wrong = [d for d in dtypes if d not in AMP_DTYPES]
    if wrong:
        raise UnsupportedOpError(f"{kind} operands are {' and '.join(dtypes)}; poplin plans matmuls and "
                                 f"convolutions on {', '.join(AMP_DTYPES)} only: cast the operands first")
    if len(set(dtypes)) > 1:
        fp8 = " (FP8 layers are modelled in inference: their backward passes would need FP8 gradients)" \
            if "float8" in dtypes else ""
        raise UnsupportedOpError(f"{kind} operands are {' and '.join(dtypes)}; poplin needs both of one "
                                 f"type (\"Convolution/MatMul input types must match\"): cast one of them{fp8}")


#: PopART LoopOpx's per-iteration maps on its scalars (popx/op/loopx.cpp), as (inputs, fused ops):
#: ``exit |= !cond | i >= M`` over exit, cond, i and M (Or, Or, Not, Gte), and ``i += 1``
_LOOP_CONTROL = {"exit_update": (4, 4), "iterator": (1, 1)}


def _loop_control(role: str, ipu: IPU, tiles: int) -> OpCost:
    """A Loop's exit-flag update or iterator increment: popops fuses a map over scalars into one
    generated vertex on one tile (ExpressionGenerator.cpp), a compute set of its own."""
    inputs, ops = _LOOP_CONTROL[role]
    W = ipu.worker_threads
    return _phases(ipu, fused_scalar_cycles(inputs, ops, W), 0, 1, float(ops), 0, 1, tiles=tiles,
                   launch=fused_scalar_cycles(0, 0, W), plan=f"a fused vertex on one tile: {role}")


def _rule(kind, ins, outs, attrs, ipu: IPU, tiles: int, memory_proportion: float, partials: str) -> OpCost:
    if attrs.get("loop_control") in _LOOP_CONTROL:
        return _loop_control(attrs["loop_control"], ipu, tiles)
    if kind in AMP_KINDS:
        _check_amp_operands(kind, ins)
    if kind == "matmul":
        return _matmul(ins, attrs, ipu, tiles, memory_proportion, _partials_bytes(attrs, partials))
    if kind in ("conv2d", "conv2d_grad_input", "conv2d_grad_weight"):
        return _conv(kind, ins, outs, attrs, ipu, tiles, memory_proportion, _partials_bytes(attrs, partials))
    if kind == "custom":
        return _custom(attrs, ipu, tiles)
    if kind in ("transpose", "remap"):  # a copy into a new tile layout (GraphBuilder.remap)
        return _transpose(outs, ipu, tiles, attrs.get("source_tiles"))
    if kind in ROW_OP_KINDS:  # softmax, its gradient, layer norm: poplibs' popops calls (sim/cost/row_ops.py)
        shape, axis = tuple(ins[0][0]), attrs.get("axis", -1)
        # (N d..., C) rows viewed from an (N, C, d...) input (sim.poptorch's classes_last) are strided too
        if kind.startswith("softmax") and (attrs.get("classes_strided") or _strided_rows(shape, axis)):
            # PopTorch's transposes around a softmax over another dim are views (SoftmaxOps.cpp; PopART's
            # TransposeInplace), so popnn's softmax reduces each row where the input lies: a row's elements strided
            # by the dims after the axis, each statistic broadcast along them, as a batch norm's per channel
            length = shape[axis % len(shape)]
            return row_op_cost(row_op_steps(kind, attrs), (length, math.prod(shape) // length), ins[0][1], ipu, tiles,
                               _row_reduce_cost(ipu), statistics="channel")
        return row_op_cost(row_op_steps(kind, attrs), _rows_last(shape, axis), ins[0][1], ipu, tiles,
                           _row_reduce_cost(ipu))
    if kind in LOSS_COST_KINDS:
        shape = tuple(ins[0][0]) or (1,)
        if attrs.get("classes_strided"):  # its classes strided where an (N, C, d...) input lies, as a softmax's
            return row_op_cost(loss_steps(kind, attrs), (shape[-1], math.prod(shape[:-1])), ins[0][1], ipu, tiles,
                               _row_reduce_cost(ipu), statistics="channel")
        return row_op_cost(loss_steps(kind, attrs), shape, ins[0][1], ipu, tiles, _row_reduce_cost(ipu))
    if kind in ("batchnorm", "batchnorm_grad"):
        return _batchnorm(kind, ins, attrs, ipu, tiles)
    if kind in ("maxpool", "avgpool", "maxpool_grad", "avgpool_grad"):
        return _pool(kind, ins, outs, attrs, ipu, tiles)
    if kind in ("gather", "embedding_grad"):
        return _gather(kind, ins, outs, ipu, tiles, attrs, memory_proportion)
    if kind in ("reduce_sum", "reduce_mean", "reduce_max"):
        return _reduce(kind, ins, outs, attrs, ipu, tiles)
    if kind == "accumulate" and "layout_of_matmul" in attrs:
        return _scaled_add_to_matmul(ins, attrs, ipu, tiles, memory_proportion, _partials_bytes(attrs, partials))
    if kind == "dropout":
        return _dropout(ins, outs, attrs, ipu, tiles)
    if kind == "modify_random_seed":  # PopXL's ops.create_random_seed / split_random_seed
        parts = _modify_random_seed(ipu, tiles)
        return in_series(parts, tiles, "PopART's ModifyRandomSeedOp: a one-element draw given the seed plus modifier")
    if kind == "histogram":
        return _histogram(ins, attrs, ipu, tiles)
    if kind == "loss_scale_update":
        return _loss_scale_update(attrs, ipu, tiles)
    if kind == "sgd_update":
        return _sgd(ins, ipu, tiles)
    if kind in _UNARY:
        return _elementwise(kind, ins, outs, ipu, tiles)
    if kind == "lars_update":
        return _lars_update(ins, outs, ipu, tiles)
    if kind in ADAM_KINDS:
        return _adam_family(kind, ins, outs, attrs, ipu, tiles)
    if kind == "reduce_many":
        return _reduce_many(ins, outs, ipu, tiles)
    if kind.removesuffix("_grad") in RNN_GATES:
        return _rnn(kind, ins, attrs, ipu, tiles, memory_proportion)
    more = _more_kinds(kind, ins, outs, attrs, ipu, tiles, memory_proportion)
    if more is not None:
        return more
    raise UnsupportedOpError("the cost model has no rule for this op kind")


def _phases(ipu: IPU, compute: int, exch: int, supersteps: int, flops: float, exch_bytes: int,
            used: int, temp: int = 0, plan: str = "", profile: TileProfile | None = None,
            tiles: int | None = None, launch: int = 0, exchange_phases: int | None = None,
            sync_points: int | None = None) -> OpCost:
    """An OpCost of ``supersteps`` compute sets and ``exchange_phases`` exchanges (default: one
    if there is exchange) with an on-chip sync before each; ``launch`` is the fixed part of
    ``compute``. Without a profile, the work is taken as even over the ``used`` tiles."""
    if exchange_phases is None:
        exchange_phases = 1 if exch else 0
    if sync_points is None:
        sync_points = supersteps + exchange_phases
    if profile is None and tiles:
        profile = TileProfile.uniform(tiles, used, compute, exch_bytes / max(used, 1), temp)
    return OpCost(int(compute), int(exch), int(sync_points * ipu.internal_sync_cycles), supersteps, float(flops),
                  int(exch_bytes), int(used), int(temp), plan, profile, launch_cycles=int(launch),
                  exchange_setup_cycles=int(exchange_phases * ipu.exchange_setup_cycles if exch else 0))


def _broadcast_vertex(kind: str, ins, out_shape, per_tile: int, itemsize: int) -> tuple[str | None, int]:
    """(the popops broadcast codelet, the elements of the output one operand element covers) of a
    binary ``kind`` with an operand repeated over the other (:func:`~sim.cost.vector.broadcast_pattern`
    on the busiest tile's ``per_tile`` elements); (None, 0) for a plain element-wise op. A multiply
    is priced in place, as PopART's inplacing turns it (MulLhsInplace), the repeated operand the one
    left as it is. A divide by one element runs the scalar broadcast vertex."""
    if kind == "div" and len(ins) == 2 and math.prod(ins[1][0]) == 1 < math.prod(out_shape):
        return "broadcast_scalar_div", math.prod(out_shape)  # popops' BroadcastScalar1D DIVIDE
    if kind not in BROADCAST_OPS or len(ins) != 2:
        return None, 0
    small = min(ins, key=lambda x: math.prod(x[0]))[0]
    if kind == "sub" and math.prod(ins[0][0]) < math.prod(ins[1][0]):
        return None, 0  # popops broadcasts a first operand only into a commutative op
    if math.prod(small) == 1:
        return "broadcast_scalar", 0  # BroadcastScalar1D: the elements shared among the workers, no outer loop
    pattern = broadcast_pattern(out_shape, small, per_tile, itemsize)
    if pattern is None:
        return None, 0
    return broadcast_codelet("mul_inplace" if kind == "mul" else kind, pattern), broadcast_run(out_shape, small)


def _elementwise(kind, ins, outs, ipu, tiles) -> OpCost:
    """An element-wise op laid out as a new tensor; an add, subtract or multiply whose operand is
    repeated over the other runs popops' broadcast vertex (:func:`_broadcast_vertex`), its outer
    loop once per contiguous run of one operand element on the busiest tile."""
    out_shape, out_dtype = outs[0]
    itemsize = max(DTYPE_BYTES[out_dtype], max(DTYPE_BYTES[d] for _, d, _ in ins))
    n = math.prod(out_shape)
    used, per_tile = spread(n, itemsize, ipu, tiles)
    # a broadcast operand smaller than the output reaches every tile that needs a part of it
    bcast = sum(min(math.prod(s), per_tile) * DTYPE_BYTES[d] for s, d, _ in ins if math.prod(s) < n)
    exch = exchange_cycles(bcast, ipu)
    # on 32-bit integers popops runs its plain vertices at their integer rates (its vector-broadcast
    # vertices are for half and float only)
    integer = all(d == "int32" for _, d, _ in ins)
    vec_kind, run = (None, 0) if integer else _broadcast_vertex(kind, ins, tuple(out_shape), per_tile, itemsize)
    vec_kind = vec_kind or _VECTOR_KIND.get(kind, kind)
    c = codelet(vec_kind)
    counts = _counts(n, used)
    runs = np.ceil(counts / run) + 1 if c.per_run and run else 0
    # float data with a half operand (an fp16 gradient into a float accumulator) at popops' mixed rate
    mixed = c.mixed is not None and out_dtype == "float32" and any(d == "float16" for _, d, _ in ins)
    per_tile_cycles = np.ceil(c.sets * c.fixed + counts * (c.mixed if mixed else c.per_element(itemsize, integer))
                              + runs * c.run_cycles(run, itemsize, int(np.max(counts))))
    profile = TileProfile.padded(tiles, per_tile_cycles, bcast, 0)
    return _phases(ipu, int(per_tile_cycles.max()), exch, c.sets, n, bcast * used, used,
                   plan=f"{n} elements on {used} tiles" + (f", {vec_kind}" if vec_kind.startswith("broadcast") else ""),
                   profile=profile, launch=launch_cycles(vec_kind))


def _seeded(ipu, tiles, op_on_tiles: OpCost) -> list[tuple[OpCost, int]]:
    """The parts of a poprand op given a master seed tensor: poprand wraps the op's compute set in
    three more on every tile of the IPU (lib/poprand/RandomGen.cpp ``maybeSaveHwSeedsAndSetSeeds``,
    ``maybeRestoreHwSeeds``): the hardware seeds read out, the 8-byte master seed sent to every tile
    and set (``setSeed``: a SetSeed vertex per tile), and, after the op, the saved seeds written back."""
    set_seed, hw_seeds = seed_programs_cycles(ipu.worker_threads)
    seed_bytes = 8  # the master seed, two UNSIGNED_INTs, read by every tile's SetSeed vertex

    def on_every_tile(cycles: int, received: int = 0) -> OpCost:
        return _phases(ipu, cycles, exchange_cycles(received, ipu), 1, 0.0, received * tiles, tiles, tiles=tiles,
                       launch=cycles)
    return [(on_every_tile(hw_seeds), 1), (on_every_tile(set_seed, seed_bytes), 1), (op_on_tiles, 1),
            (on_every_tile(hw_seeds), 1)]


def _on_one_tile(ipu, tiles, cycles: int) -> OpCost:
    """One compute set of ``cycles`` on one tile (a scalar step)."""
    return _phases(ipu, cycles, 0, 1, 0.0, 0, 1, tiles=tiles, launch=cycles)


def _modify_random_seed(ipu, tiles) -> list[tuple[OpCost, int]]:
    """The parts of PopART's ModifyRandomSeedOp, which makes each random op's seed from the step's
    base seed (popx/op/modifyrandomseedx.cpp): ``R + modifier`` (popops::add), a one-element
    ``poprand::uniform`` of INT given that as its seed (so inside the seed save, set and restore of
    :func:`_seeded`), its cast to UNSIGNED_INT (popops::map) and the copy of the new seed."""
    def scalar(kind: str) -> tuple[OpCost, int]:
        return _on_one_tile(ipu, tiles, codelet(kind).fixed), 1
    draw = _on_one_tile(ipu, tiles, uniform_int_cycles(1, ipu.worker_threads))
    return [scalar("add")] + _seeded(ipu, tiles, draw) + [scalar("cast"), scalar("copy")]


def _dropout(ins, outs, attrs, ipu, tiles) -> OpCost:
    """A dropout as PopART runs it: its seed made by a ModifyRandomSeedOp (:func:`_modify_random_seed`),
    then ``poprand::dropout`` given that seed (:func:`_seeded` around the mask-and-scale compute set).
    Its gradient (``seed_from_forward``) is the same dropout of dy on the forward op's seed, so it
    makes no seed of its own (PopART's DropoutGradOp; transforms/randomsetup.hpp)."""
    body = _elementwise("dropout", ins, outs, ipu, tiles)
    parts = ([] if attrs.get("seed_from_forward") else _modify_random_seed(ipu, tiles)) + _seeded(ipu, tiles, body)
    dtype = outs[0][1]
    return replace(in_series(parts, tiles, body.plan + ", seeds saved, set and restored on every tile"),
                   codelets=(("dropout", dtype, 0), ("poprand_set_seed", "", 0), ("hw_seeds", "", 0)))


#: LARS's trust ratio from the two norms, one fused scalar expression (lars_optimizer.py's
#: compute_lr): the square roots of the two sums of squares, eta*|w|, |g| + wd*|w| + eps, the
#: division, the two where(norm > 0) guards, and the two factors of the element-wise step
#: (lr*ratio and lr*ratio*wd)
LARS_RATIO_STEPS = ("sqrt", "sqrt", "mul", "mul", "add", "add", "div", "compare", "select", "compare", "select",
                    "mul", "mul")
#: LARS's element-wise steps after the ratio: one aXPlusbY (lr*ratio*g + lr*ratio*wd*w), then
#: momentum SGD's two ScaledAdds (momentum, weight)
LARS_ELEMENT_STEPS = ("scale", "sgd_update")

#: SGD's update as PopART runs it, each step one popops ScaledAdd over the weight's tiles (``scale``'s
#: codelet): with momentum the velocity ``v <- m v + g`` (SGD1AcclUpdateOpx, the velocity being the
#: only optimizer state), then the weight ``w <- w - lr v`` (VarUpdateOpx); plain SGD only the
#: weight's, ``w <- w - lr g`` (SGD0VarUpdateOpx, willow/src/popx/op/sgd0varupdatex.cpp). The
#: learning rate, a tensor in PopTorch, is negated on one tile first (``popops::neg``) and sent to
#: every tile of the weight. Not modelled: a non-zero weight decay's ``mapInPlace`` of
#: ``w (1 - lr wd)`` in plain SGD (PyTorch's default is 0), and SGD2 (PopTorch's default separate
#: accumulator and velocity, patterns/sgd2decompose.cpp) updating the velocity in two ops
#: (PartialAcclUpdate, then Accumulate) where one is priced
SGD_STEP = "scale"


def _scalar_map(steps: tuple[str, ...], ipu, tiles) -> OpCost:
    """An optimizer's scalar (the learning rate, a trust ratio: one fp32 value) made by a popops
    map of ``steps`` on one tile (:func:`_map`)."""
    return _map((((1,), "float32", "activation"),), (((1,), "float32"),), {"steps": steps}, ipu, tiles)


def _lars_update(ins, outs, ipu, tiles) -> OpCost:
    """One LARS weight update (inputs: weight, gradient, momentum, then the two norms, which are
    ops of their own). The trust ratio is a scalar popops::map on one tile (priced by
    :func:`_map`); its two factors (fp32) are exchanged to every tile of the weight; each of
    those tiles runs :data:`LARS_ELEMENT_STEPS` on the elements it holds, laid out as
    :func:`_elementwise` lays out an update."""
    n = math.prod(outs[0][0])
    itemsize = max(DTYPE_BYTES[d] for _, d, _ in ins[:-2])  # the weight, its gradient, its momentum
    used, _ = spread(n, itemsize, ipu, tiles)
    ratio = _scalar_map(LARS_RATIO_STEPS, ipu, tiles)
    steps = [codelet(k) for k in LARS_ELEMENT_STEPS]
    counts = _counts(n, used)
    per_tile = np.ceil(sum(c.sets * c.fixed + counts * c.per_element(itemsize) for c in steps))
    per_tile[0] += ratio.compute_cycles  # the ratio's tile holds the first (largest) share
    recv = 2 * 4  # lr*ratio and lr*ratio*wd, fp32, to every tile of the weight
    profile = TileProfile.padded(tiles, per_tile, recv, 0)
    sets = 1 + sum(c.sets for c in steps)
    return _phases(ipu, int(per_tile.max()), exchange_cycles(recv, ipu), sets,
                   6.0 * n, recv * used, used,  # aXPlusbY 3 flops an element, the ScaledAdds 2 and 1
                   plan=f"trust ratio on one tile, then {n} elements on {used} tiles",
                   profile=profile, launch=ratio.launch_cycles + sum(launch_cycles(k) for k in LARS_ELEMENT_STEPS))


#: Adam-family update kinds: ``adam_update`` (Adam, AdamW, RMSprop, and LAMB without a trust ratio:
#: both phases in one op), LAMB's ``adam_updater`` (phase 1) and ``lamb_update`` (phase 2)
ADAM_KINDS = ("adam_update", "adam_updater", "lamb_update")
#: phase 1 as PopART decomposes an AdamComboOp (willow/src/patterns/adamdecompose.cpp), one compute
#: set each, element-wise over the weight's tiles. The gradient's unscaling, a ScaleOp
#: (OptimizerDecompose::gradUnscale); the moments, each a fused popops::mapInPlace of
#: ``b*m + (1-b)*g`` and ``b*v + (1-b)*g*g`` (popx/op/accumulatex.cpp, MovingAverage and
#: MovingAverageSquare), by position from the last state (RMSprop's one state is a second moment);
#: the gradient accumulator zeroed (AccumulatorZeroOp, a fill); the updater, AdamUpdaterOpx's one
#: fused popops::map ``m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd*w``, without the ``wd*w`` term
#: (:data:`ADAM_DECAY_STEPS`) when the weight decay is the constant 0 (op attribute
#: ``weight_decay`` False)
ADAM_UNSCALE_STEPS = ("mul",)
ADAM_MOMENT_STEPS = (("mul", "mul", "add"), ("mul", "mul", "mul", "add"))
ADAM_ZERO_STEPS = ("copy",)
ADAM_DECAY_STEPS = ("mul", "add")
ADAM_UPDATER_STEPS = ("div", "div", "sqrt", "add", "div") + ADAM_DECAY_STEPS
#: phase 2, AdamVarUpdateOpx (popx/op/adamvarupdatex.cpp): a scalar popops::map on one tile makes
#: ``-lr`` (PopTorch's learning rate is a tensor) or, for LAMB, ``-lr * min(sqrt(r1sq), mwn) /
#: sqrt(r2sq)`` with its two ``== 0`` guards; its fp32 value goes to every tile of the weight,
#: then ``scaledAddTo(w, r, lr)`` (the ScaledAdd supervisor, ``scale``'s codelet)
ADAM_LR_STEPS = ("scale",)
LAMB_RATIO_STEPS = ("sqrt", "sqrt", "minimum", "div", "compare", "select", "compare", "select", "mul", "scale")
VAR_UPDATE_STEP = "scale"


def _sgd(ins, ipu, tiles) -> OpCost:
    """SGD's update of a weight (:data:`SGD_STEP`): the learning rate negated on one tile and sent
    to every tile of the weight, then the velocity's ScaledAdd when there is a velocity (an input
    of role ``state``: momentum) and the weight's, each at the bytes of the widest operand it reads,
    then, when the gradient is a separate accumulator (gradient accumulation), its zeroing for the
    next step (PopART's AccumulatorZeroOp after the VarUpdate, patterns/sgd0decompose.cpp,
    sgd2decompose.cpp; a fill, as Adam's :data:`ADAM_ZERO_STEPS`)."""
    n = max(math.prod(s) for s, _, _ in ins)
    full = [x for x in ins if math.prod(x[0]) == n]
    weight = next((x for x in full if x[2] == "weight"), full[0])
    velocity = [x for x in full if x[2] == "state"]
    gradient = [x for x in full if x is not weight and x[2] != "state"]
    used, _ = spread(n, max(DTYPE_BYTES[d] for _, d, _ in full), ipu, tiles)  # as _elementwise lays out an update
    accumulator = [x for x in gradient if x[2] == "accumulator"]
    sets = [(SGD_STEP, velocity + gradient)] if velocity else []
    sets.append((SGD_STEP, [weight] + (velocity or gradient)))
    if accumulator:
        sets.append((ADAM_ZERO_STEPS[0], accumulator))
    per_tile = np.zeros(used)
    launch = 0
    for kind, operands in sets:
        step = codelet(kind)
        size = max(DTYPE_BYTES[d] for _, d, _ in operands)
        per_tile += np.ceil(step.fixed + _counts(n, used) * step.per_element(size))
        launch += math.ceil(step.fixed)
    lr = _scalar_map((SGD_STEP,), ipu, tiles)
    per_tile[0] += lr.compute_cycles  # the scalar's tile holds the first (largest) share
    recv = 4  # the fp32 learning rate to every tile of the weight
    profile = TileProfile.padded(tiles, per_tile, recv, 0)
    what = "the velocity's and the weight's ScaledAdds" if velocity else "the weight's ScaledAdd"
    return _phases(ipu, int(per_tile.max()), exchange_cycles(recv, ipu), 1 + len(sets), float(n * len(sets)),
                   recv * used, used, profile=profile, launch=launch + lr.launch_cycles,
                   plan=f"learning rate on one tile, then {n} elements on {used} tiles, {what}"
                   + (", the gradient accumulator zeroed" if accumulator else ""))


def adam_sets(kind: str, ins, weight_decay: bool = True) -> list[tuple[tuple[str, ...], int]]:
    """The element-wise compute sets of an Adam-family op of ``kind`` with inputs ``ins``
    ((shape, dtype, role) each), in order: (the codelets one fused vertex chains, the bytes of
    the element it runs at). Which phase-1 sets run follows the inputs' roles: the gradient
    (role ``gradient`` or ``accumulator``) is unscaled, each ``state`` input is a moment, an
    ``accumulator`` is zeroed; a phase-1 op without them (PopXL's ``adam_updater``, whose moments
    are ops of their own) runs only the updater, whose ``wd*w`` term runs if ``weight_decay``."""
    updater = ADAM_UPDATER_STEPS if weight_decay else ADAM_UPDATER_STEPS[:-len(ADAM_DECAY_STEPS)]
    size = lambda rows: max(DTYPE_BYTES[d] for _, d, _ in rows)  # noqa: E731
    full = [x for x in ins if math.prod(x[0]) > 1] or list(ins)
    grads = [x for x in full if x[2] in ("gradient", "accumulator")]
    states = [x for x in full if x[2] == "state"]
    weights = [x for x in full if x[2] == "weight"] or full[:1]
    sets = []
    if kind != "lamb_update":
        if grads:
            sets.append((ADAM_UNSCALE_STEPS, size(grads[:1])))
        moments = ADAM_MOMENT_STEPS[len(ADAM_MOMENT_STEPS) - len(states):] if states else ()
        for state, steps in zip(states, moments):
            sets.append((steps, size([state] + grads[:1])))
        if any(x[2] == "accumulator" for x in grads):
            sets.append((ADAM_ZERO_STEPS, size([x for x in grads if x[2] == "accumulator"][:1])))
        sets.append((updater, size(states + weights[:1]) if states else size(full)))
    if kind != "adam_updater":  # r has the weight's dtype (AdamUpdaterOpx casts to the weight's type)
        sets.append(((VAR_UPDATE_STEP,), size(full[:2] if kind == "lamb_update" else weights[:1])))
    return sets


def _adam_family(kind, ins, outs, attrs, ipu, tiles) -> OpCost:
    """An Adam-family update on the tiles of its weight: the compute sets of :func:`adam_sets`
    (each a fused popops vertex: its largest codelet's fixed cost, the sum of their per-element
    cycles at that set's element size), laid out as the weight (its states and updater are
    created with its tile mapping), and, in phase 2, the scalar learning-rate map on one tile
    (:data:`ADAM_LR_STEPS`, LAMB's :data:`LAMB_RATIO_STEPS`, priced by :func:`_map`) whose fp32
    value is exchanged to every tile of the weight. ``adam_update`` (both phases) holds the
    updater ``r`` (the weight's bytes on each tile) between them as a temporary; LAMB's phase 1
    makes it as a tensor of the graph."""
    n = max(math.prod(s) for s, _, _ in ins)
    full = [x for x in ins if math.prod(x[0]) == n]
    layout = next((x for x in full if x[2] == "weight"), full[0])  # the states and r take the weight's mapping
    used, _ = spread(n, DTYPE_BYTES[layout[1]], ipu, tiles)
    counts = _counts(n, used)
    sets = adam_sets(kind, ins, attrs.get("weight_decay", True))
    per_tile = np.zeros(used)
    launch = 0
    for steps, size in sets:
        cs = [codelet(k) for k in steps]
        fixed = max(c.fixed for c in cs)
        per_tile += np.ceil(fixed + counts * sum(c.per_element(size) for c in cs))
        launch += math.ceil(fixed)
    supersteps, recv, plan = len(sets), 0, f"{n} elements on {used} tiles, {len(sets)} compute sets"
    temp = 0
    if kind != "adam_updater":
        lr = _scalar_map(LAMB_RATIO_STEPS if kind == "lamb_update" else ADAM_LR_STEPS, ipu, tiles)
        per_tile[0] += lr.compute_cycles  # the scalar's tile holds the first (largest) share
        launch += lr.launch_cycles
        supersteps += 1
        recv = 4  # the fp32 learning rate (times the trust ratio) to every tile of the weight
        plan = f"{'trust ratio' if kind == 'lamb_update' else 'learning rate'} on one tile, then {plan}"
        if kind == "adam_update":
            weight = next((d for _, d, role in ins if role == "weight"), outs[0][1])
            temp = counts * DTYPE_BYTES[weight]
    profile = TileProfile.padded(tiles, per_tile, recv, temp)
    flops = float(n * sum(len(steps) for steps, _ in sets))
    return _phases(ipu, int(per_tile.max()), exchange_cycles(recv, ipu) if recv else 0, supersteps, flops,
                   recv * used, used, temp=int(np.max(temp)) if kind == "adam_update" else 0, plan=plan,
                   profile=profile, launch=launch)


def _rows_last(shape: tuple, axis: int) -> tuple:
    """``shape`` with its row dimension ``axis`` moved last (rows of one element's dims after it: contiguous)."""
    if not shape:
        return shape
    axis %= len(shape)
    return shape[:axis] + shape[axis + 1:] + (shape[axis],)


def _strided_rows(shape: tuple, axis: int) -> bool:
    """Are a row op's rows along ``axis`` strided in memory (dims of more than one element after it)?"""
    return bool(shape) and math.prod(shape[axis % len(shape) + 1:]) > 1


#: roles of the operands the ops that made them laid out (not made for the matmul that reads them)
_LAID_OUT_BY_OP = ("activation", "gradient")
# poplin's fullyConnectedPass values of a training layer's matmuls (MatMul.cpp) and the pass each is
_FC_PASSES = {"TRAINING_FWD": "fwd", "TRAINING_BWD": "bwd", "TRAINING_WU": "wu"}
# the matmul each fully connected pass is, as (A transposed, B transposed, B a weight)
_FC_SHAPES = {"TRAINING_FWD": (False, False, True), "TRAINING_BWD": (False, True, True),
              "TRAINING_WU": (True, False, False), "INFERENCE_FWD": (False, False, True)}


def _matmul(ins, attrs, ipu, tiles, amp, partials_bytes) -> OpCost:
    (sa, da, _), (sb, _, rb) = ins[0], ins[1]
    if len(sa) == 1:  # numpy's rules: a 1-D left operand is a row, a 1-D right operand a column
        sa = (1,) + tuple(sa)
    if len(sb) == 1:
        sb = tuple(sb) + (1,)
    if attrs.get("transpose_a"):
        sa = sa[:-2] + (sa[-1], sa[-2])
    if attrs.get("transpose_b"):
        sb = sb[:-2] + (sb[-1], sb[-2])
    M, K, N = sa[-2], sa[-1], sb[-1]
    # batch dimensions as PopART's MatMulOpx groups them (matmulx.cpp matCombineBroadcastDims): the
    # dimensions both operands have are the groups; one only the left operand has (the right
    # broadcast along it) folds into M, one only the right operand has into N
    rank = max(len(sa), len(sb)) - 2
    ba, bb = (1,) * (rank - len(sa) + 2) + tuple(sa[:-2]), (1,) * (rank - len(sb) + 2) + tuple(sb[:-2])
    G = 1
    for x, y in zip(ba, bb):
        if x == y:
            G *= x
        elif y == 1:
            M *= x
        else:
            N *= y
    itemsize = DTYPE_BYTES[da]
    # a weight-update matmul (A transposed, B not a weight: dW = Xᵀ dY) rearranges its left operand,
    # laid out for the forward pass (poplin FC_TRAINING_WU rearrangeInput; sim/cost/amp.py rearrangement)
    wu = bool(attrs.get("transpose_a")) and rb != "weight"
    fc_pass = attrs.get("fully_connected_pass")
    # a tied projection's right operand, a weight moved to its transposed layout, counts as the weight
    shape = (bool(attrs.get("transpose_a")), bool(attrs.get("transpose_b")), rb == "weight" or bool(attrs.get("tied")))
    if fc_pass not in (None, "NONE") and _FC_SHAPES.get(fc_pass) != shape:
        raise UnsupportedOpError(
            f"fully_connected_pass {fc_pass!r}: expected NONE, or one of {', '.join(_FC_SHAPES)} on a matmul shaped "
            "as that pass (TRAINING_FWD and INFERENCE_FWD: X @ W, TRAINING_BWD: dY @ Wᵀ, TRAINING_WU: Xᵀ @ dY, "
            "W a weight)")

    def relaid(plan):
        # operands laid out by the ops that made them, copied into the plan's layout first where poplin
        # would read them on too many tiles (sim/cost/amp.py relaid_operands); a weight update's both are
        # rearranged anyway
        if wu:
            return plan
        a = G * M * K if ins[0][2] in _LAID_OUT_BY_OP else 0
        b = G * K * N if rb in _LAID_OUT_BY_OP and not attrs.get("tied") else 0
        n = relaid_operands(plan, a, b)
        return with_relaid_operands(plan, n, ipu, itemsize)
    if fc_pass in ("NONE", "INFERENCE_FWD"):
        # poplin's plain matmul (fullyConnectedPass NONE, pass NONE_MATMUL) or an inference layer
        # (INFERENCE_FWD, pass FC_INFERENCE_FWD): the planner tries the operands swapped first and
        # charges the unswapped plan the same rearrangements for both (ConvModel.cpp
        # addTransformCycleEstimate, isMatmulOrFullyConnectedLayer; sim/cost/matmul_swap.py)
        plan, _ = plan_matmul_none_pass(G, M, K, N, itemsize, ipu, tiles, amp, partials_bytes)
        return _from_plan(relaid(plan), 2.0 * G * M * K * N, ipu, tiles, itemsize, True)
    if fc_pass is not None:
        # poplin's matmul option fullyConnectedPass=TRAINING_*: the three passes planned jointly or
        # separately, as ConvPlan.cpp createPlan decides (sim/cost/amp.py plan_fc_training)
        p = _FC_PASSES[fc_pass]
        B, I, O = {"fwd": (M, K, N), "bwd": (M, N, K), "wu": (K, M, N)}[p]
        plans, joint = plan_fc_training(G, B, I, O, itemsize, ipu, tiles, amp, partials_bytes)
        plan = plans[p]
        if joint:  # the swapped pass, both operands laid out by the joint plan
            if p == "bwd":
                plan = with_weight_transpose(plan, fc_weight_transpose(G, N, K, itemsize, plan.tiles_used,
                                                                       ipu.worker_threads), ipu)
            return _from_plan(relaid(plan), 2.0 * G * M * K * N, ipu, tiles, itemsize, True)
    else:
        plan = plan_matmul(G, M, K, N, itemsize, rb == "weight", ipu, tiles, amp, partials_bytes=partials_bytes,
                           rearranged=G * M * K if wu else 0)
    if attrs.get("transpose_b") and rb == "weight":
        # a fully connected backward pass (dX = dY Wᵀ): poplin transposes the weights on their tiles
        # first (TRAINING_BWD, fullyConnectedWeightTranspose; sim/cost/amp.py fc_weight_transpose)
        transpose = fc_weight_transpose(G, N, K, itemsize, plan.tiles_used, ipu.worker_threads)
        plan = with_weight_transpose(plan, transpose, ipu)
        if fc_pass is not None and transpose > 0:
            # planned separately from the forward pass: the transposed blocks are written into a tensor
            # laid out for this plan, away from the forward weights' tiles where the transpose runs
            # (Convolution.cpp fullyConnectedWeightTranspose; sim/cost/amp.py transposed_weights_exchange)
            plan = with_transposed_weights_moved(plan, G * K * N, plans["fwd"].tiles_used, ipu, itemsize)
    return _from_plan(relaid(plan), 2.0 * G * M * K * N, ipu, tiles, itemsize, rb == "weight")


def _scaled_add_to_matmul(ins, attrs, ipu, tiles, amp, partials_bytes) -> OpCost:
    """``accumulate`` into a tensor laid out as a plain matmul's result (attribute
    ``layout_of_matmul``: the matmul's ``(G, M, K, N)``, planned as ``fully_connected_pass`` NONE),
    the matmul's result added: poplibs' general_matrix_multiply ``scaledAddTo(C, 1, A @ B, 1)``, C a
    clone of the result. popops' scaledAddTo over the regions the matmul's plan leaves on each tile
    (sim/cost/scaled_add.py, sim/cost/matmul_swap.py ``result_block``): one compute set, no exchange."""
    layout = attrs["layout_of_matmul"]
    if not (isinstance(layout, tuple) and len(layout) == 4 and all(isinstance(d, int) and d > 0 for d in layout)):
        raise UnsupportedOpError(f"layout_of_matmul {layout!r}: expected the (G, M, K, N) of the matmul whose "
                                 "result the accumulated tensor is laid out as, four positive ints")
    G, M, K, N = layout
    shape, dtype, _ = ins[0]
    if math.prod(shape) != G * M * N:
        raise UnsupportedOpError(f"layout_of_matmul {layout!r}: the accumulated tensor {tuple(shape)} has "
                                 f"{math.prod(shape)} elements, the matmul's result G*M*N = {G * M * N}")
    itemsize = DTYPE_BYTES[dtype]
    plan, swapped = plan_matmul_none_pass(G, M, K, N, itemsize, ipu, tiles, amp, partials_bytes)
    group = amp_mode(ipu, itemsize, max(partials_bytes, itemsize)).out_group
    regions, size = result_block(plan, swapped, group)
    cycles = scaled_add_tile_cycles(regions, size, itemsize, ipu.worker_threads)
    used = plan.tiles_used
    return _phases(ipu, cycles, 0, 1, float(G * M * N), 0, used, tiles=tiles,
                   plan=f"scaledAddTo on {used} tiles, {regions} regions of {size} elements on the busiest",
                   launch=scaled_add_fixed_cycles(regions, size, itemsize, ipu.worker_threads))


def _from_plan(plan, flops, ipu, tiles, itemsize, b_is_weight, conv=None) -> OpCost:
    """The op's cost of a matmul or convolution ``plan``. Its compute set waits for its slowest tile,
    which the planner's largest block (``plan.compute_cycles``) need not be: an nx1 block one position
    smaller may cut into more worklist entries (:func:`sim.cost.amp.worker_entries`)."""
    profile = plan.profile(ipu, tiles, itemsize, b_is_weight, conv)
    compute = max(plan.compute_cycles, math.ceil(profile.compute.max()))
    cost = _phases(ipu, compute, plan.exchange_cycles, plan.supersteps, flops,
                   plan.exchange_bytes, plan.tiles_used, math.ceil(profile.temp.max()), plan.describe(),
                   profile=profile, launch=plan.launch_cycles, exchange_phases=plan.exchange_phases,
                   sync_points=plan.sync_points)
    return replace(cost, relaid_cycles=plan.relaid_cycles, codelets=plan_codelets(plan, itemsize),
                   over_memory_budget=not plan.fits)


def _conv(kind, ins, outs, attrs, ipu, tiles, amp, partials_bytes) -> OpCost:
    """conv2d and its two backward passes, all as AMP matmuls of the same FLOPs."""
    x_shape, dtype, _ = ins[0]
    kh, kw = spatial(attrs.get("kernel", 1))
    stride = spatial(attrs.get("stride", 1), "stride")[0]  # the same along both axes (GraphBuilder.conv2d)
    groups = attrs.get("groups", 1)
    if kind == "conv2d":
        n, ci = x_shape[0], x_shape[1]
        _, co, ho, wo = outs[0][0]
    else:  # backward ops carry the forward shapes in their attributes
        n, ci, co, ho, wo = (attrs[a] for a in ("n", "ci", "co", "ho", "wo"))
    cig, cog = ci // groups, co // groups
    positions = n * ho * wo
    flops = 2.0 * positions * cig * kh * kw * cog * groups
    itemsize = DTYPE_BYTES[dtype]
    if cig == 1 and cog == 1 and groups > 1:  # depthwise: poplin's SLIC and VMAC vertices
        # the forward input's field: the input of the forward pass and weight update, the result of the backward
        field = outs[0][0] if kind == "conv2d_grad_input" else x_shape
        plan = None if len(field) != 4 else plan_depthwise(
            {"conv2d": "fwd", "conv2d_grad_input": "bwd"}.get(kind, "wu"), n, groups, tuple(field[2:]), (ho, wo),
            (kh, kw), stride, spatial(attrs.get("padding", 0), "padding"), itemsize, partials_bytes, ipu, tiles, amp,
            regroup_input=ins[0][2] != "input")  # a graph input is created in the convolution's layout
        if plan is not None:
            cost = _phases(ipu, plan.compute_cycles, plan.exchange_cycles, plan.compute_sets, flops,
                           plan.received_bytes, plan.tiles_used, plan.temp_bytes_per_tile, plan.describe(),
                           tiles=tiles, launch=plan.launch_cycles, exchange_phases=plan.exchange_phases)
            return replace(cost, over_memory_budget=not plan.fits)
    if cig == 1 and groups > 1:  # fp32 depthwise, or a channel multiplier: the vector unit, one MAC per element per tap
        # like every poplin convolution pass, plus the pass's fixed cycles (sim/cost/amp.py pass_fixed_cycles)
        used, per_tile = spread(positions * co, itemsize, ipu, tiles)
        fixed = pass_fixed_cycles()
        compute = tile_cycles(per_tile * kh * kw, itemsize, "mul", ipu) + fixed
        exch = exchange_cycles(per_tile * itemsize * stride * stride, ipu)
        return _phases(ipu, compute, exch, 1, flops, per_tile * itemsize * used, used,
                       launch=launch_cycles("mul") + fixed)
    if kind == "conv2d":
        conv, weight = ConvShape(kh, kw, stride, wo, cig, n, ho), True
        if len(x_shape) == 4 and kh * kw > 1:
            # the nx1 worklists hold, per kernel position, only the outputs it writes: the (output,
            # kernel position) pairs on padding cost nothing at run time (ConvVertices.cpp
            # createPartitions, 8dcde1ec), while poplin's planner partitions the whole tile output
            # for every kernel position (MatmulPlan.planned_cycles is chosen without them)
            ph, pw = spatial(attrs.get("padding", 0), "padding")
            conv = replace(conv, row_hits=kernel_hits(ho, kh, x_shape[2], ph, stride),
                           col_hits=kernel_hits(wo, kw, x_shape[3], pw, stride))
        # output channels short of the partial-channel group: padded weights and output rearranged
        padded = padded_partials_rearranged(ipu, itemsize, partials_bytes, groups, cog, positions, cig * kh * kw)
        plan = plan_matmul(groups, positions, cig * kh * kw, cog, itemsize, True, ipu, tiles, amp, conv=conv,
                           partials_bytes=partials_bytes, rearranged=padded)
        plan, conv = plan_rows_folded(plan, conv, groups, positions, cog, itemsize, ipu, tiles, amp, partials_bytes,
                                      padded)
    elif kind == "conv2d_grad_input":  # dX = dY (*) W^T: positions of the input, K = co*k*k
        full = len(x_shape) == 4
        conv, weight = (ConvShape(kh, kw, 1, x_shape[3], cog, n, x_shape[2]) if full
                        else ConvShape(kh, kw, 1, wo, cog)), True
        # a strided 1x1 kernel's zDeltas are dilated by the stride; poplin defers that dilation
        # until after the convolution (ConvPlan.cpp getDilatePostConvDims, canDeferDilation) and
        # then copies the dilated, zero-filled view of the result into dX (Convolution.cpp
        # convolutionPostprocess)
        deferred = stride > 1 and (kh, kw) == (1, 1) and spatial(attrs.get("padding", 0), "padding") == (0, 0)
        # dX of an RGB stem has 4 channels, short of the partial-channel group: poplin pads the
        # flipped weights' output channels and rearranges them and the padded dX
        # (sim/cost/amp.py padded_partials_rearranged)
        out_shape = outs[0][0]
        padded = padded_partials_rearranged(ipu, itemsize, partials_bytes, groups, cig,
                                            out_shape[0] * math.prod(out_shape[2:]), cog * kh * kw)
        field = n * x_shape[2] * x_shape[3] if full else positions
        if full and kh * kw > 1 and tuple(out_shape[2:]) != (ho, wo):
            # a kxk kernel whose dX field is not zDeltas' (a stride, or less than "same" padding):
            # poplin convolves over dX's field, zDeltas dilated and padded (_grad_input_field).
            # With "same" padding and stride 1 the fields agree and, as the forward pass, the
            # plan stays on zDeltas' field (its padding hits below)
            conv, field = _grad_input_field(out_shape, attrs, cog, ho, wo), n * math.prod(out_shape[2:])
        elif full and kh * kw > 1:
            # "same" padding, stride 1: zDeltas padded by kernel - 1 - padding per side, whose pairs
            # the worklists skip as the forward pass's (createPartitions)
            ph, pw = spatial(attrs.get("padding", 0), "padding")
            conv = replace(conv, row_hits=kernel_hits(x_shape[2], kh, ho, kh - 1 - ph),
                           col_hits=kernel_hits(x_shape[3], kw, wo, kw - 1 - pw))
        plan = plan_matmul(groups, field,
                           cog * kh * kw, cig, itemsize, True, ipu, tiles, amp, conv=conv,
                           partials_bytes=partials_bytes, rearranged=padded,
                           dilated_output=math.prod(outs[0][0]) if deferred else 0)
        if full and stride == 1:
            swapped, swapped_conv = _swapped_grad_input(x_shape, out_shape, attrs, groups, cig, cog, itemsize,
                                                        ipu, tiles, amp, partials_bytes)
            if swapped.estimate < plan.estimate:
                plan, conv = replace(swapped, swapped=True), swapped_conv
    else:  # dW = X^T dY: reduce over positions
        conv, weight = None, False
        # poplin's TRAINING_WU pass rearranges both operands, the input and the output gradient
        # (ConvModel.cpp addTransformCycleEstimate: rearrangeInput, rearrangeWeights). Its input
        # channels are the batch, so it expands the field into them (expandDims): the input it
        # rearranges is the expanded one, one element per (output position, kernel position, input
        # channel) -- the im2col of X, k^2 times X for a stride-1 kxk kernel, a quarter of it for a
        # stride-2 1x1 (addTransformCycleEstimate's inputFieldSizes of the transformed params)
        im2col = groups * cig * kh * kw * positions
        # serialised (a small tile memory: Mk1), poplin splits the output channels co serially
        # (outChanSplit.serial) or the input channels, here the positions (inChanSplit.serial). As in
        # every convolution pass it splits its channels (co, and the positions expanded into its input
        # channels) over the tiles in whole grains (channel_grains; ConvModel.cpp constructModel)
        plan = plan_matmul(groups, cig * kh * kw, positions, cog, itemsize, False, ipu, tiles, amp,
                           partials_bytes=partials_bytes, rearranged=im2col + positions * co, pads_channels=False,
                           channel_grains=True)
    if kind != "conv2d_grad_weight":
        # the input (x, or dy) as the op that made it laid it out, copied into the plan's layout where poplin
        # would read it on too many tiles (sim/cost/amp.py relaid_operands); the weights, and the flipped ones
        # poplin writes for the backward plan, are made in its layout
        x = math.prod(x_shape) if ins[0][2] in _LAID_OUT_BY_OP else 0
        plan = with_relaid_operands(plan, relaid_operands(plan, x, 0), ipu, itemsize)
    return _from_plan(plan, flops, ipu, tiles, itemsize, weight, conv)


def _grad_input_field(dx_shape, attrs, cog, ho, wo) -> ConvShape:
    """The ConvShape of a backward pass ``dX = dY (*) W`` on dX's field, as poplin convolves it
    (``ConvUtil.cpp :: getGradientParams``): zDeltas (``ho x wo``) dilated by the forward stride and
    padded by ``kernel - 1 - padding`` per side, so the output is the forward input's field
    (``H x W``). The nx1 worklists skip the (output, kernel position) pairs meeting a dilation zero
    or padding (:func:`~sim.cost.amp.kernel_hits` with the dilation, :func:`~sim.cost.amp.padding_coverage`)."""
    n, _, H, W = dx_shape
    kh, kw = spatial(attrs.get("kernel", 1))
    ph, pw = spatial(attrs.get("padding", 0), "padding")
    s = spatial(attrs.get("stride", 1), "stride")[0]
    return ConvShape(kh, kw, 1, W, cog, n, H, row_hits=kernel_hits(H, kh, ho, kh - 1 - ph, dilation=s),
                     col_hits=kernel_hits(W, kw, wo, kw - 1 - pw, dilation=s), dilation=s)


def _swapped_grad_input(z_shape, dx_shape, attrs, groups, cig, cog, itemsize, ipu, tiles, amp, partials_bytes):
    """(plan, ConvShape) of a stride-1 backward pass ``dX = dY (*) W`` with its operands swapped.

    poplin's planner tries every convolution pass both ways (``ConvPlan.cpp ::
    getSwapOperandCandidates``: ``{false, true}`` unless a fully connected or joint plan) and keeps
    the cheaper by its estimate. ``swapOperands`` exchanges the batch with the output channels and
    the input field with the kernel, and ``canonicalize`` (``ConvParams.cpp``) cancels the padding
    both then carry: the weights (``kh x kw``) become the field, padded, the zDeltas field
    (``ho x wo``) the kernel, the fwd input channels the batch and the batch the output channels,
    so ``M = cig x H x W``, ``K = cog x ho x wo``, ``N = batch``. Worth it when the batch is large
    and the pass's own output channels few (``conv_5x200_1_in_100_out_bs1440``: 1 channel, batch
    1,440). The padded field leaves most (output, kernel) pairs on padding, which the vertex skips
    (:func:`~sim.cost.amp.padding_coverage`).
    """
    n, _, ho, wo = z_shape
    H, W = dx_shape[2], dx_shape[3]
    kh, kw = spatial(attrs.get("kernel", 1))
    ph, pw = spatial(attrs.get("padding", 0), "padding")
    # output o meets zDeltas index j where the weight index o + p - j is in [0, k)
    conv = ConvShape(ho, wo, 1, W, cog, cig, H, row_hits=kernel_hits(H, ho, kh, ho - 1 - ph),
                     col_hits=kernel_hits(W, wo, kw, wo - 1 - pw), expandable=kh >= ho and kw >= wo)
    padded = padded_partials_rearranged(ipu, itemsize, partials_bytes, groups, n, cig * H * W, cog * ho * wo)
    plan = plan_matmul(groups, cig * H * W, cog * ho * wo, n, itemsize, True, ipu, tiles, amp, conv=conv,
                       partials_bytes=partials_bytes, rearranged=padded)
    return plan, conv


def _custom(attrs, ipu, tiles) -> OpCost:
    """A user-priced op (like a Poplar codelet with its own cycle estimate).

    Attributes: ``vertices`` (count), ``vertex_cycles`` (worker cycles of one vertex),
    ``tiles`` (tiles it spreads over, default all), ``exchange_bytes_per_tile`` (received before
    it runs), ``flops`` (for reports). A tile runs its vertices ``worker_threads`` at a time, and
    a worker issues one instruction every ``worker_threads`` cycles.
    """
    used = min(tiles, int(attrs.get("tiles", tiles)))  # more than the IPU computes on: the run's notes say so
    vertices = int(attrs["vertices"])
    per_tile = math.ceil(vertices / used)
    w = ipu.worker_threads
    compute = ipu.vertex_overhead_cycles + math.ceil(per_tile / w) * w * math.ceil(attrs["vertex_cycles"])
    recv = float(attrs.get("exchange_bytes_per_tile", 0))
    exch = exchange_cycles(recv, ipu)
    return _phases(ipu, compute, exch, 1, attrs.get("flops", 0.0), int(recv * used), used,
                   plan=f"{vertices} vertices, {per_tile} per tile on {used} tiles",
                   launch=ipu.vertex_overhead_cycles)


def _transpose(outs, ipu, tiles, source_tiles: int | None = None) -> OpCost:
    """A copy of the result's elements into a new layout over ``tiles``: each tile receives its share;
    from ``source_tiles`` tiles only (a slice of a matmul's rows, :mod:`sim.compiler.row_layouts`) each of
    those sends its larger share, and the phase lasts as long as the busiest sender."""
    shape, dtype = outs[0]
    itemsize = DTYPE_BYTES[dtype]
    used, per_tile = spread(math.prod(shape), itemsize, ipu, tiles)
    recv = per_tile * itemsize
    busiest = max(recv, math.prod(shape) * itemsize / source_tiles) if source_tiles else recv
    return _phases(ipu, tile_cycles(per_tile, itemsize, "copy", ipu), exchange_cycles(busiest, ipu), 1,
                   0.0, recv * used, used, plan="layout change through the exchange", launch=launch_cycles("copy"))


def _batchnorm(kind, ins, attrs, ipu, tiles) -> OpCost:
    """Batch norm as poplin's Norms.cpp runs it, a statistic per channel over the batch and the field
    (:func:`~sim.cost.row_ops.row_op_cost`, ``statistics="channel"``): in training the statistics'
    reductions, the whitening and ``normalise`` (and, for the gradient, the steps of PopART's norm
    gradient), at inference the running statistics' combined scale and shift (popnn
    ``batchNormalise``: one multiply, one add)."""
    shape, dtype, _ = ins[0]
    return row_op_cost(batchnorm_steps(kind, attrs), tuple(shape), dtype, ipu, tiles, _row_reduce_cost(ipu),
                       statistics="channel")


def _pool(kind, ins, outs, attrs, ipu, tiles) -> OpCost:
    """popnn's pooling and its input gradient. A 2-D window (``kernel``, ``stride``, ``padding``) as popnn plans
    and runs it (:mod:`sim.cost.pooling`); a window that is its whole unpadded field as the popops reduction
    (its gradient a broadcast copy) popnn turns it into. A 1-D or 3-D window (``window`` elements moving by
    ``stride_volume``), whose field the op does not give, is priced as the planner's finest split: one 64-bit
    channel grain of one output a tile at the pooling vertex's 3 (5 for a max pool's gradient) cycles a
    vector a window position, each tile receiving its window."""
    grad = kind.endswith("_grad")
    (in_shape, dtype), out_shape = (outs[0], ins[0][0]) if grad else (ins[0][:2], outs[0][0])
    itemsize = DTYPE_BYTES[dtype]
    max_pool = kind.startswith("max")
    if "window" in attrs:
        return _pool_window(kind, outs[0][0], attrs, itemsize, ipu, tiles)
    n, c, h, w = in_shape
    kernel, stride, padding = (spatial(attrs.get(a, d), a) for a, d in (("kernel", 1), ("stride", 1),
                                                                        ("padding", 0)))
    if kernel == (h, w) and padding == (0, 0):  # popnn: a reduction over the field (its gradient a broadcast)
        if not grad:
            reduce_kind = "reduce_max" if max_pool else "reduce_sum"
            return _reduce(reduce_kind, ((in_shape, dtype, "activation"),), (((n, c), dtype),), {"axes": (2, 3)},
                           ipu, tiles)
        steps = [] if max_pool else [_elementwise("mul", [(out_shape, dtype, "activation")] * 2,
                                                  [(out_shape, dtype)], ipu, tiles)]
        copy = _elementwise("copy", [(in_shape, dtype, "activation")], [(in_shape, dtype)], ipu, tiles)
        return in_series([(step, 1) for step in steps + [copy]], tiles, "the output gradient broadcast over the field")
    fwd_vector, fwd_grouped = forward_passes(n, c, (h, w), tuple(out_shape[2:]), kernel, stride, padding,
                                             attrs.get("chans_per_group", math.gcd(c, 16 if itemsize == 2 else 8)),
                                             itemsize, max_pool)
    fwd, fwd_plan = plan_pool(fwd_vector, fwd_grouped, tiles, ipu.worker_threads)
    if not grad:
        return _pool_pass(fwd, fwd_plan, ipu, tiles, "pool")
    # the gradient convolution: the output gradient dilated by the stride, over the forward input's field
    bwd = PoolPass(n, c, (h, w), kernel, (1, 1), stride, max_pool, max_pool, fwd_plan.chans_per_group, itemsize,
                   tuple(out_shape[2:]), (kernel[0] - 1 - padding[0], kernel[1] - 1 - padding[1]))
    bwd, bwd_plan = plan_pool(bwd, bwd, tiles, ipu.worker_threads)
    pooled = _pool_pass(bwd, bwd_plan, ipu, tiles, "pool gradient")
    if max_pool:  # the output gradient first copied into the forward output's layout (gradsRearranged)
        moved = fwd_plan.batch * fwd_plan.chan_groups * fwd_plan.chans_per_group * fwd_plan.rows * fwd_plan.row
        copy = _phases(ipu, 0, exchange_cycles(moved * itemsize, ipu), 0, 0.0, moved * itemsize * fwd_plan.tiles,
                       fwd_plan.tiles)
        return in_series([(copy, 1), (pooled, 1)], tiles, f"output gradient regrouped; {pooled.plan}")
    # an average pool's output gradient scaled by its windows' sizes first (scaleGradient: a popops multiply)
    scale = _elementwise("mul", [(out_shape, dtype, "activation")] * 2, [(out_shape, dtype)], ipu, tiles)
    return in_series([(scale, 1), (pooled, 1)], tiles, f"output gradient scaled; {pooled.plan}")


def _pool_pass(p: PoolPass, plan, ipu, tiles: int, what: str) -> OpCost:
    """One popnn pooling call's vertex pass of ``plan``: the exchange of each tile's input window (and the
    planner's regrouping charge), one compute set, and what Poplar spends on a library call beyond its planned
    steps: the reduce call's fitted fixed cycles (``[reduce_vertex] call_fixed_cycles``), which poplibs'
    pooling_layer rows, not fitted, bear out (docs/reference/poplibs-costs.md 6.6). Each tile holds its
    vertex's worklists as constants (:func:`sim.cost.pooling.worklist_bytes`)."""
    compute, fixed, received, regroup = tile_cost(p, plan, ipu.worker_threads)
    call = reduce_constants()["call_fixed_cycles"]
    windows = received_bytes(p, plan)  # each tile's own window: the busiest, in the middle, sets the cycles
    profile = TileProfile.padded(tiles, np.full(len(windows), compute + call), windows, windows)
    cost = _phases(ipu, compute + call, exchange_cycles(received, ipu) + regroup, 1,
                   float(window_reads(p)), int(windows.sum()), plan.tiles, temp=received,
                   profile=profile, launch=fixed + call,
                   plan=f"{what}: channel groups of {plan.chans_per_group}, {plan.chan_groups} a tile, batch "
                        f"{plan.batch}, {plan.rows} x {plan.row} outputs a tile on {plan.tiles} tiles")
    return replace(cost, constant_bytes_per_tile=worklist_bytes(p, plan, ipu.worker_threads))


def _pool_window(kind, out_shape, attrs, itemsize, ipu, tiles) -> OpCost:
    """A pool of a 1-D or 3-D window (or its gradient) of ``out_shape`` outputs: :func:`_pool`."""
    out_n = math.prod(out_shape)
    grain = max(1, GRAIN_BYTES // itemsize)
    window, stride = attrs["window"], max(1, attrs.get("stride_volume", 1))
    used = max(1, min(tiles, math.ceil(out_n / grain)))
    per_tile = math.ceil(out_n / used)
    if kind.endswith("_grad"):
        covering = max(1.0, window / stride)
        reads = per_tile * covering
        received = per_tile / stride + (per_tile + per_tile / stride if kind == "maxpool_grad" else 0)
        vec_kind, flops = "pool_grad", out_n * covering
    else:
        reads, received, vec_kind, flops = per_tile * window, per_tile * stride, "pool", out_n * window
    halo = math.ceil(received * itemsize)
    return _phases(ipu, tile_cycles(reads, itemsize, vec_kind, ipu), exchange_cycles(halo, ipu), 1,
                   float(flops), halo * used, used, launch=launch_cycles(vec_kind))


def _gather(kind, ins, outs, ipu, tiles, attrs=None, memory_proportion: float | None = None) -> OpCost:
    """Embedding lookup (``gather``: popops multiSlice) or its gradient (``embedding_grad``: a zeroed
    dense table, then multiUpdateAdd; with ``into_table`` the update adds into the table it is
    given, as poplibs' embedding_layer tool does), as popops plans and runs them:
    ``sim/cost/embedding.py``. ``operation`` ``"max"`` (or ``"mul"``) is popops' multiUpdateMax
    (multiUpdateMul) on the same plan, as PopART's scatter max and min run
    (popx/op/scatterreduceutilx.cpp MaxReductionStrategy). Planned and run as the SDK 3.x popops
    (7eac0f26) does, or as 8dcde1ec does for ops with ``poplibs="8dcde1ec"`` (the embedding_layer
    benchmark rows). The SDK 3.x plan keeps its temporary bytes within ``memory_proportion`` of a tile (the
    op's availableMemoryProportion; None: popops' default). Cycles are IPU cycles."""
    (ids_shape, _, _) = ins[0]
    if kind == "gather":
        table_shape, dtype, _ = ins[1]
    else:
        table_shape, dtype = outs[0]
    itemsize = DTYPE_BYTES[dtype]
    attrs = attrs or {}
    lookups = max(1, math.prod(ids_shape))
    # a lookup along another axis: PopART rolls that axis to the front and flattens the others (a view:
    # popx/op/gatherx.cpp, dimRoll and flatten before multiSlice / multiUpdateAdd)
    axis = int(attrs.get("axis", 0) or 0) % max(1, len(table_shape))
    entries = table_shape[axis] if table_shape else 1
    row = max(1, math.prod(table_shape) // max(1, entries))
    # PopART plans a lookup for slicing only (popx/op/sliceplanx.cpp SlicePlanUsedFor::Slice) and its
    # gradient for the update; poplibs' embedding_layer tool plans both with one update plan
    for_update = attrs.get("plan_for_update", kind != "gather")
    operation = attrs.get("operation", "add")
    if attrs.get("poplibs") == LEGACY_POPLIBS:  # the poplibs of the embedding_layer benchmark data
        plan = plan_embedding(entries, row, lookups, itemsize, tiles, for_update)
    else:  # the SDK 3.x popops (7eac0f26): PopART's SlicePlanUsedFor Slice / UpdateAdd / UpdateMax / UpdateMul
        proportion = SLICE_AVAILABLE_MEMORY_PROPORTION if memory_proportion is None else memory_proportion
        plan = plan_embedding_sdk3(entries, row, lookups, itemsize, tiles, ipu, kind == "gather", for_update,
                                   operation if for_update else None, proportion)
    if kind == "gather":
        codelets = (("multi_slice", dtype, 0),) + ((("iota", "int32", 0), ("index_divide", "int32", 0),
                                                    ("index_multiply", "int32", 0), ("index_add", "int32", 0))
                                                   if plan.sliced > 1 else ())
        return replace(in_series(_embedding_lookup(plan, ipu, tiles), tiles, plan.describe()), codelets=codelets)
    parts = _embedding_update(plan, dtype, ipu, tiles, operation)
    several = plan.groups_used > 1
    if plan.sdk3:  # partials in the data's type (partialTypeToUse): no casts
        codelets = ((f"multi_update_{operation}", dtype, 0),) + (
            (("copy", dtype, 0), (_UPDATE_REDUCE[operation], dtype, 0), (_UPDATE_APPLY[operation], dtype, 0))
            if several else ())
    elif operation != "add":  # the partials in the data's type (no casts), reduced and applied with the op
        codelets = ((f"multi_update_{operation}", dtype, 0),) + (
            (("copy", dtype, 0), (f"reduce_{operation}", dtype, 0), (_UPDATE_APPLY[operation], dtype, 0))
            if several else ())
    elif several:  # the slices and the table cast to fp32 and back, the copies zeroed and reduced
        codelets = (("multi_update_add", "float32", 0), ("cast", dtype, 0), ("cast", "float32", 0),
                    ("copy", "float32", 0), ("reduce_sum", "float32", 0), ("accumulate", "float32", 0))
    else:
        codelets = (("multi_update_add", dtype, 0),)
    if not attrs.get("into_table"):  # the dense gradient is zeroed first (popops::zero)
        parts.insert(0, (_zero_table(plan, itemsize, ipu, tiles), 1))
        codelets += (("table_zero", dtype, 0),)
    return replace(in_series(parts, tiles, plan.describe()), codelets=tuple(dict.fromkeys(codelets)))


def _zero_table(plan: EmbeddingPlan, itemsize: int, ipu, tiles, base: bool = True) -> OpCost:
    """A table laid out by ``plan`` zeroed, ``itemsize`` bytes an element: the table a scatter-add or
    an embedding's gradient adds into (``base``: PopART's popops::zero, ``table_zero``), each tile its
    rows' columns spread over the lookup groups (createSliceableTensor); or one lookup group's
    partials (popops' own fill of them, ``copy``), each tile its rows' columns."""
    held = plan.rows_per_tile * math.ceil(plan.columns_per_tile / plan.grain)
    elements = (math.ceil(held / plan.lookup) if base else held) * plan.grain
    kind = "table_zero" if base else "copy"
    zero = tile_cycles(elements, itemsize, kind, ipu)
    return _phases(ipu, zero, 0, 1, 0.0, 0, plan.tiles, tiles=tiles, launch=launch_cycles(kind))


def _embedding_lookup(plan: EmbeddingPlan, ipu, tiles) -> list[tuple[OpCost, int]]:
    """multiSlicePlanned: each tile receives its group's indices (and, with several lookup groups,
    its part of the table, which is spread over the groups) and copies the rows it holds, six
    worker vertices sharing the indices; a split dictionary adds a second stage: the indices
    adjusted (a popops map), each tile receives every dictionary split's candidates for its share
    of the indices and picks from them."""
    W, it, h = ipu.worker_threads, plan.itemsize, plan.columns_per_tile
    lpt = plan.lookups_per_group
    table_part = plan.rows_per_tile * h * it
    received = lpt * INDEX_BYTES + (table_part - math.ceil(table_part / plan.lookup) if plan.lookup > 1 else 0)
    sdk3 = plan.sdk3
    if sdk3:  # a MultiVertex: each worker its share of the offsets, those of other tiles' rows stepped over
        per = max_elems_per_worker(lpt, W, max(1, ATOM_BYTES // it))
        single = plan.lookups == 1 and (h * it) % ATOM_BYTES == 0  # splitSingleRegion
        cycles = multi_slice_cycles(h, per, in_range_share(per, plan.rows_per_tile, plan.entries), it, W,
                                    ipu.data_path_bits, single)
        launch = multi_slice_cycles(h, 0, 0, it, W, ipu.data_path_bits)
    else:
        cycles = W * slice_worker_cycles(offsets_per_worker(lpt, it, W), h, it, ipu.data_path_bits)
        launch = W * slice_worker_cycles(0, h, it, ipu.data_path_bits)
    flops = float(plan.lookups * plan.row)
    if sdk3 and plan.serial > 1 and plan.precopy and plan.lookup > 1:  # the base copied once, ahead of the parts
        base = table_part - math.ceil(table_part / plan.lookup)
        received -= base
        parts = [(_phases(ipu, 0, exchange_cycles(base, ipu), 0, 0.0, base * plan.tiles, plan.tiles, temp=base,
                          tiles=tiles), 1)]
    else:
        parts = []
    parts.append((_phases(ipu, cycles, exchange_cycles(received, ipu), 1, flops / plan.serial,
                          received * plan.tiles, plan.tiles, temp=received, tiles=tiles, launch=launch), plan.serial))
    if plan.sliced > 1:
        second = math.ceil(lpt / plan.sliced)
        # the second stage's indices: an iota of one partition's positions (laid out like the indices,
        # at least MIN_INDICES_PER_TILE a tile) and a popops map adjusting every index with it
        iota_tiles = math.ceil(second / MIN_INDICES_PER_TILE)
        iota = W * iota_worker_cycles(math.ceil(second / iota_tiles), INDEX_BYTES, ipu.data_path_bits)
        parts.append((_phases(ipu, iota, 0, 1, 0.0, 0, iota_tiles, tiles=tiles,
                              launch=W * iota_worker_cycles(0, INDEX_BYTES)), 1))
        parts += _second_stage_indices(plan, ipu, tiles)
        got = plan.sliced * second * h * it + second * INDEX_BYTES
        if sdk3:  # every offset of the second stage indexes the candidates on its tile
            per = max_elems_per_worker(second, W, max(1, ATOM_BYTES // it))
            cycles = multi_slice_cycles(h, per, per, it, W, ipu.data_path_bits)
        else:
            cycles = W * slice_worker_cycles(offsets_per_worker(second, it, W), h, it, ipu.data_path_bits)
        parts.append((_phases(ipu, cycles, exchange_cycles(got, ipu), 1, 0.0, got * plan.tiles, plan.tiles,
                              temp=got, tiles=tiles, launch=launch), plan.serial))
    return parts


def _second_stage_indices(plan: EmbeddingPlan, ipu, tiles) -> list[tuple[OpCost, int]]:
    """multiSlicePlanned's map ``_2 + (_1 / rowsPerPartition) * _3`` giving the second stage its
    indices: its operands ``_2`` (the iota, repeated) and ``_3`` (constants, repeated) are broadcast
    views, so popops runs it unfused (analyseExpr refuses aliased inputs), one binary op a compute set
    on the indices' tiles (laid out linearly, at least MIN_INDICES_PER_TILE a tile): the divide (a
    shift for a power of two) and the multiply by a scalar read from tile 0, the add of the iota's
    elements sent to every index."""
    W = ipu.worker_threads
    per_tile = min(plan.lookups, max(MIN_INDICES_PER_TILE, math.ceil(plan.lookups / tiles)))
    used = math.ceil(plan.lookups / per_tile)
    rows = math.ceil(plan.entries / plan.sliced)
    divide = "shift_right" if rows & (rows - 1) == 0 else "divide"
    # a scalar vertex reads its one element, BinaryOp1D a copy of its operand for every index
    steps = ((divide, INDEX_BYTES * (per_tile if divide == "shift_right" else 1)),
             ("multiply", INDEX_BYTES), ("add", INDEX_BYTES * per_tile))
    parts = []
    for op, received in steps:
        cycles = index_op_tile_cycles(op, per_tile, W)
        parts.append((_phases(ipu, cycles, exchange_cycles(received, ipu), 1, float(plan.lookups),
                              received * used, used, tiles=tiles, launch=index_op_tile_cycles(op, 0, W)), 1))
    return parts


#: the dense op that applies a multi-update's reduced partials to the table (popops
#: DynamicSlice.cpp ``generatePlannedMultiUpdateOp``: scaledAddTo, maxInPlace, mulInPlace)
_UPDATE_APPLY = {"add": "accumulate", "max": "maximum", "mul": "mul"}
#: the reduction of a multi-update's partials over its lookup groups
_UPDATE_REDUCE = {"add": "reduce_sum", "max": "reduce_max", "mul": "reduce_prod"}


def _embedding_update(plan: EmbeddingPlan, dtype: str, ipu, tiles, operation: str = "add") -> list[tuple[OpCost, int]]:
    """generatePlannedMultiUpdateAdd: the slices rearranged to the plan's layout when they will be
    cast or sent to many dictionary splits; one lookup group adds straight into the table, several
    each add (in fp32) into a zeroed copy of it that are then reduced and added to the table with
    the scale. The update vertex runs on one worker per tile.

    ``operation`` ``"max"`` / ``"mul"``: multiUpdateMax / multiUpdateMul (popops DynamicSlice.cpp
    ``generatePlannedMultiUpdateOp``): no scale, and the partials of several lookup groups stay in the
    data's type (``partialTypeToUse`` widens only ADD), filled with the op's identity, reduced with
    the op and applied with maxInPlace / mulInPlace. The vertex (MultiUpdateOp) is priced with the
    MultiUpdateAdd loop (:func:`update_worker_cycles`): popopsCycleEstimators.cpp prices both with one
    estimate per offset (11 / 12 cycles plus 3 per further atom). Cycles are IPU cycles."""
    W, it, h = ipu.worker_threads, plan.itemsize, plan.columns_per_tile
    lpt, groups = plan.lookups_per_group, plan.groups_used
    add = operation == "add"
    sdk3 = plan.sdk3
    partial = FLOAT_BYTES if add and not sdk3 else it  # SDK 3.x partialTypeToUse: the data's type
    partial_dtype = "float32" if partial == FLOAT_BYTES and it != partial else dtype
    slices = ((plan.lookups, plan.row), dtype, "activation")
    table = ((plan.entries, plan.row), partial_dtype)
    several = groups > 1
    parts = []
    if (several and it != partial) or plan.sliced >= SLICES_REARRANGE_THRESHOLD:
        moved = math.ceil(plan.lookups * plan.row * it / plan.tiles)
        parts.append((_phases(ipu, 0, exchange_cycles(moved, ipu), 0, 0.0, moved * plan.tiles, plan.tiles,
                              temp=moved, tiles=tiles), 1))
    update_size = it
    if several:
        update_size = partial
        if add:  # the scale made the partials' type: a cast, or a Copy of it when the types agree
            # (popops Cast.cpp "Cast is just a copy"; SDK 3.x partials are in the data's type)
            parts.append((_on_one_tile(ipu, tiles, codelet("cast" if it != partial else "copy").fixed), 1))
        if it != partial:
            parts.append((_elementwise("cast", [slices], [((plan.lookups, plan.row), "float32")], ipu, tiles), 1))
        parts.append((_zero_table(plan, partial, ipu, tiles, base=False), 1))  # filled with the op's identity
    got = lpt * (INDEX_BYTES + h * update_size)
    partials = several * plan.rows_per_tile * h * partial  # the group's zeroed copy of the table
    if sdk3:  # a MultiVertex: each worker owns a share of the tile's rows and steps over every offset
        rows = max_elems_per_worker(plan.rows_per_tile, W, max(1, ATOM_BYTES // update_size))
        sub_word = (h * update_size) % ATOM_BYTES != 0
        cycles = multi_update_op_cycles(h, lpt, in_range_share(lpt, rows, plan.entries), update_size, W, add,
                                        sub_word, operation)
        launch = multi_update_op_cycles(h, 0, 0, update_size, W, add, sub_word, operation)
    else:
        cycles = W * update_worker_cycles(lpt, h, update_size)
        launch = W * update_worker_cycles(0, h, update_size)
    parts.append((_phases(ipu, cycles, exchange_cycles(got, ipu), 1, 2.0 * plan.lookups * plan.row / plan.serial,
                          got * plan.tiles, plan.tiles, temp=got + partials, tiles=tiles, launch=launch), plan.serial))
    if several:
        copies = ((groups, plan.entries, plan.row), partial_dtype, "activation")
        parts.append((_reduce(_UPDATE_REDUCE[operation], [copies], [table], {"axes": [0]}, ipu, tiles), 1))
        base = ((plan.entries, plan.row), dtype, "activation")
        if it != partial:
            parts.append((_elementwise("cast", [base], [table], ipu, tiles), 1))
        parts.append((_elementwise(_UPDATE_APPLY[operation], [(table[0], partial_dtype, "activation")] * 2, [table], ipu, tiles), 1))
        if it != partial:
            parts.append((_elementwise("cast", [(table[0], "float32", "activation")], [(table[0], dtype)], ipu,
                                       tiles), 1))
    return parts


#: popops reduction operation of each reduce kind (an op's ``operation`` attribute wins)
_REDUCE_OPERATION = {"reduce_sum": "add", "reduce_mean": "add", "reduce_max": "max", "reduce_min": "max",
                     "reduce_prod": "mul"}


def reduce_axes(in_shape: tuple, out_shape: tuple, axes) -> tuple[int, ...]:
    """The reduced dimensions of ``in_shape``: ``axes`` when it is a list, else (the gradient of a
    broadcast, ``axes="broadcast"``) the dimensions numpy broadcasting added or stretched to go
    from ``out_shape`` to ``in_shape``."""
    if isinstance(axes, (list, tuple)):
        return tuple(sorted({a % len(in_shape) for a in axes})) if in_shape else ()
    lead = len(in_shape) - len(out_shape)
    if lead < 0:
        return tuple(range(len(in_shape)))
    return tuple(range(lead)) + tuple(lead + i for i, d in enumerate(out_shape)
                                      if d == 1 and in_shape[lead + i] != 1)


def _plan_cost(plans: list, ipu, tiles, flops: float, describe: str) -> OpCost:
    """An OpCost of popops reduction plans run together (their stages share compute sets and
    exchanges, stage by stage, on separate tiles), plus the fixed cycles of a reduce call."""
    depth = max(len(p.stages) for p in plans)
    compute = exch = sets = phases = 0
    moved = 0
    for i in range(depth):
        stages = [p.stages[i] for p in plans if i < len(p.stages)]
        width = max(len(s.compute) for s in stages)
        compute += sum(max(s.compute[j] if j < len(s.compute) else 0 for s in stages) for j in range(width))
        sets += width
        got = max(s.exchange_bytes for s in stages)
        if got:
            exch += exchange_cycles(got, ipu)
            phases += 1
            moved += sum(s.exchange_total for s in stages)
    fixed = reduce_constants()["call_fixed_cycles"]
    used = min(tiles, max(p.input_tiles for p in plans))
    launch = fixed + sets * ipu.worker_threads * (reduce_constants()["entry"] + reduce_constants()["strided_fixed"])
    return _phases(ipu, compute + fixed, exch, sets, flops, moved, used, plan=describe, tiles=tiles,
                   launch=min(launch, compute + fixed), exchange_phases=phases)


def _row_reduce_cost(ipu):
    """The ``reduce_cost`` of :func:`~sim.cost.row_ops.row_op_cost`: popops reductions of one
    input, one per operation, in shared compute sets (poplin normStatistics' two reduceWithOutput
    into one list of compute sets; a single reduce otherwise), priced as :func:`_plan_cost`."""
    def cost(shape, axes, itemsize, operations, tiles):
        plans = [plan_reduce(tuple(shape), tuple(axes), itemsize, op, tiles, ipu.worker_threads) for op in operations]
        return _plan_cost(plans, ipu, tiles, float(math.prod(shape) * len(operations)),
                          f"popops reduce ({'+'.join(operations)})")
    return cost


def _reduce(kind, ins, outs, attrs, ipu, tiles) -> OpCost:
    """popops::reduce as popops plans it (sim/cost/reduction.py): an on-tile compute set,
    intermediate stages while the partials are spread too wide, then the partials exchanged to
    the linearly laid out output and reduced there; each compute set split over the workers."""
    shape, dtype, _ = ins[0]
    itemsize = DTYPE_BYTES[dtype]
    n = math.prod(shape)
    axes = reduce_axes(tuple(shape), tuple(outs[0][0]), attrs.get("axes"))
    if n <= 1 or math.prod(shape[a] for a in axes) <= 1:  # nothing to reduce: a copy (or cast)
        return _elementwise("copy", ins, outs, ipu, tiles)
    op = attrs.get("operation", _REDUCE_OPERATION.get(kind, "add"))
    if "channel_axis" in attrs:  # a norm's activations, laid out channels innermost: (positions, C)
        channels = shape[attrs["channel_axis"]]
        shape, axes = (n // channels, channels), (0,)
    if len(outs) > 1:  # one reduce of the outputs' concatenation along the innermost kept dimension
        kept = max(set(range(len(shape))) - set(axes), default=len(shape) - 1)  # (a norm's scale and shift:
        shape = tuple(d * len(outs) if i == kept else d for i, d in enumerate(shape))  # poplin normParamGradients)
        n *= len(outs)
    plan = plan_reduce(tuple(shape), axes, itemsize, op, tiles, ipu.worker_threads)
    joint = f" of {len(outs)} concatenated" if len(outs) > 1 else ""
    return _plan_cost([plan], ipu, tiles, float(n), f"popops reduce ({op}){joint}: {plan.describe()}")


def _histogram(ins, attrs, ipu, tiles) -> OpCost:
    """PopART's HistogramOp (``popops::histogram``, sim/cost/histogram.py): each tile of the input's
    linear layout counts its elements (their absolute values with ``absolute``) into ``levels + 1``
    bins in one compute set, leaving its fp32 counts there; the counts are reduced over those tiles
    (popops' plan for partials held one row a tile) and cast to unsigned."""
    shape, dtype, _ = ins[0]
    itemsize = DTYPE_BYTES[dtype]
    n = math.prod(shape)
    bins = int(attrs.get("levels", 1)) + 1
    absolute = bool(attrs.get("absolute", True))
    used, per_tile = spread(n, itemsize, ipu, tiles)
    cycles, vertex = histogram_tile_cycles(per_tile, bins, itemsize, absolute, ipu.worker_threads)
    fixed, _ = histogram_tile_cycles(0, bins, itemsize, absolute, ipu.worker_threads)
    count = _phases(ipu, cycles, 0, 1, float(n * (1 + absolute)), 0, used, tiles=tiles, launch=min(fixed, cycles),
                    plan=f"{vertex} on {used} tiles")
    plan = plan_reduce_partials(used, bins, 4, "add", tiles, ipu.worker_threads)
    counts = _plan_cost([plan], ipu, tiles, float(used * bins), f"popops reduce (add): {plan.describe()}")
    cast = _elementwise("cast", [((bins,), "float32", "activation")], [((bins,), "int32")], ipu, tiles)
    return in_series([(count, 1), (counts, 1), (cast, 1)], tiles,
                     plan=f"{n} elements into {bins} bins: {vertex} on {used} tiles, counts reduced over them")


#: the one-element popops calls of automatic loss scaling's update, in order (popart
#: popx/op/lossscaleupdatex.cpp: the two bin counts cast to fp32, the lower one scaled, the compare,
#: the If's doubling or halving of the update factor; then the MulOp and DivOp making the loss scale
#: and its inverse): each its own compute set on one tile
_LOSS_SCALE_UPDATE_STEPS = ("cast", "cast", "mul", "compare", "mul", "mul", "div")


def _loss_scale_update(attrs, ipu, tiles) -> OpCost:
    """Automatic loss scaling's update of the loss scale from the summed statistics (once per weight
    update, :data:`_LOSS_SCALE_UPDATE_STEPS`), and with gradient accumulation the statistics'
    accumulator zeroed (AccumulatorZeroOp)."""
    steps = _LOSS_SCALE_UPDATE_STEPS + (("copy",) if attrs.get("accumulated") else ())
    cycles = sum(math.ceil(codelet(k).fixed + codelet(k).per_element(4)) for k in steps)
    return _phases(ipu, cycles, 0, len(steps), float(len(steps)), 0, 1, tiles=tiles, launch=cycles,
                   plan=f"{len(steps)} one-element compute sets on one tile")


def _reduce_many(ins, outs, ipu, tiles) -> OpCost:
    """popops reduceMany: several whole-tensor SQUARE_ADD reductions (input ``i`` to output
    ``i``) in one call, each planned as :func:`_reduce` plans it, their stages sharing compute
    sets and exchanges (each input on its own tiles), the fixed cycles of one call."""
    plans = [plan_reduce((math.prod(shape),), (0,), DTYPE_BYTES[dtype], "square_add", tiles, ipu.worker_threads)
             for shape, dtype, _ in ins]
    flops = float(sum(2 * math.prod(s) for s, _, _ in ins))
    return _plan_cost(plans, ipu, tiles, flops, f"{len(ins)} reductions in one reduceMany")


# --- more op kinds: the rest of PopTorch's supported operations (sim.poptorch) --------------------
#: element-wise kinds with a codelet of their own in configs/_vector-ops.toml (popops unary,
#: binary and ternary ops, poprand generators)
_POINTWISE = {"abs", "ceil", "floor", "round", "trunc", "sign", "sqrt", "rsqrt", "reciprocal", "square",
              "log", "log1p", "expm1", "sin", "cos", "tan", "asin", "erf", "isnan", "logical_not",
              "bitwise_not", "maximum", "minimum", "pow", "remainder", "atan2", "compare", "logical", "bitwise",
              "select", "clamp", "random_uniform", "random_normal", "random_bernoulli"}
#: the kinds priced as one popops element-wise op with a codelet of their own, each result laid out like its input
POINTWISE_KINDS = frozenset(_POINTWISE)


#: the popops multi-update of each scatter reduction that updates whole slices (PopART
#: popx/op/scatterreduceutilx.cpp: Sum multiUpdateAdd, Max multiUpdateMax, Min multiUpdateMax of the
#: negated values, Mul multiUpdateMul); any other (``none``: multiUpdate) is priced as the add
_SCATTER_OPERATION = {"add": "add", "sum": "add", "amax": "max", "max": "max", "amin": "min", "min": "min",
                      "prod": "mul", "multiply": "mul", "mul": "mul"}


def _more_kinds(kind, ins, outs, attrs, ipu, tiles, memory_proportion: float | None = None) -> OpCost | None:
    """Kinds the sim.poptorch front end emits for PopTorch's supported operations; ``None``
    for a kind this does not know either."""
    if kind in _POINTWISE:  # a generator has no input: it is laid out like its output
        return _elementwise(kind, ins or ((outs[0][0], outs[0][1], "activation"),), outs, ipu, tiles)
    if kind == "map":
        return _map(ins, outs, attrs, ipu, tiles)
    if kind in ("reduce_min", "reduce_prod"):
        return _reduce(kind, ins, outs, attrs, ipu, tiles)
    if kind in ("groupnorm", "groupnorm_grad"):
        shape, dtype, _ = ins[0]
        rows = shape[0] * attrs.get("groups", 1)
        # popnn's group norm is the path PopART's layer norm takes (GroupNormOpx): sim/cost/row_ops.py
        return row_op_cost(row_op_steps("layernorm", attrs) if kind == "groupnorm" else "layernorm_grad",
                           (rows, math.prod(shape) // rows), dtype, ipu, tiles, _row_reduce_cost(ipu),
                           statistics="group" if len(shape) >= 3 else "row")
    if kind in ("gather_elements", "scatter_elements"):
        # element by element (ONNX GatherElements / ScatterElements): a table of single
        # elements. gather: ins = [index, data]; scatter: ins = [index, data, updates], writing
        # a copy of data (shaped like the output). With ``slices`` the index is a vector along
        # ``axis`` and each of its entries moves a whole slice: PopART's ScatterReduce with index
        # broadcast (popx/op/scatterreduceutilx.cpp prepMultiUpdateTensors: the axis rolled to the
        # front, the other dims flattened), a multiUpdate of rows, and its gradient's multiSlice
        ids = (math.prod(ins[0][0]),)
        if attrs.get("slices"):  # _gather rolls the axis to the front and flattens the rest
            data, dtype = (ins[1][0], ins[1][1]) if kind == "gather_elements" else outs[0]
            axis = {"axis": attrs.get("axis", 0) % len(data)}
            row = math.prod(data) // max(1, data[axis["axis"]])
            if kind == "gather_elements":
                return _gather("gather", ((ids, "int32", "activation"), (data, dtype, "activation")),
                               (((ids[0], row), dtype),), ipu, tiles, axis, memory_proportion)
            operation = _SCATTER_OPERATION.get(str(attrs.get("reduce", "sum")), "add")
            update = _gather("embedding_grad", ((ids, "int32", "activation"),), ((data, dtype),), ipu, tiles,
                             dict(axis, operation={"min": "max"}.get(operation, operation)), memory_proportion)
            if operation != "min":
                return update
            # popx/op/scatterreduceutilx.cpp MinReductionStrategy::applyReduction: the target negated
            # in place (it holds the initial values), the updates negated, multiUpdateMax, the target
            # negated back (each negation priced as sim.poptorch prices torch.neg: a scale by -1)
            slices = ((ids[0], row), dtype)
            neg_table = _elementwise("scale", [outs[0] + ("activation",)], [outs[0]], ipu, tiles)
            neg_slices = _elementwise("scale", [slices + ("activation",)], [slices], ipu, tiles)
            return replace(in_series([(neg_table, 1), (neg_slices, 1), (update, 1), (neg_table, 1)], tiles,
                                     "negated, " + (update.plan or "multiUpdateMax")),
                           codelets=tuple(dict.fromkeys(update.codelets + (("scale", dtype, 0),))))
        if kind == "gather_elements":
            table, dtype, _ = ins[1]
            return _gather("gather", ((ids, "int32", "activation"), ((math.prod(table), 1), dtype, "activation")),
                           (((ids[0], 1), dtype),), ipu, tiles, None, memory_proportion)
        table, dtype = outs[0]
        return _gather("embedding_grad", ((ids, "int32", "activation"),), (((math.prod(table), 1), dtype),),
                       ipu, tiles, None, memory_proportion)
    if kind == "sort":
        return _sort(ins, outs, attrs, ipu, tiles)
    if kind == "ctc_loss":
        return _ctc(ins, attrs, ipu, tiles)
    if kind == "ctc_beam_search":
        return _ctc_beam_search(ins, attrs, ipu, tiles)
    if kind in ("upsample_bilinear", "upsample_bilinear_grad"):
        return _upsample_bilinear(kind, ins, outs, ipu, tiles)
    if kind in ("roi_align", "roi_align_grad"):
        return _roi_align(kind, ins, outs, attrs, ipu, tiles)
    return None


def _roi_align(kind, ins, outs, attrs, ipu, tiles) -> OpCost:
    """PopART's RoiAlignOpx / RoiAlignGradOpx, popnn's experimental ROIAlign (:mod:`sim.cost.roialign`): its
    buffer zeroed, its vertex compute set(s), popops::reduce of the buffer and, forward, popops::div by the
    grid's points. ``roi_align`` inputs: data (N, C, H, W), boxes (R, 4), batch index (R,); ``roi_align_grad``:
    the output's gradient (R, C, aH, aW), boxes, batch index, data."""
    sampling = int(attrs.get("sampling_ratio", 1))
    rois = ins[1][0][0]
    if kind == "roi_align":
        (data_shape, dtype, _), out_shape = ins[0], tuple(outs[0][0])
        plan = roi_align_forward(tuple(data_shape), rois, out_shape[2:], sampling, DTYPE_BYTES[dtype], ipu, tiles)
    else:
        data_shape, (dy_shape, dtype, _) = ins[3][0], ins[0]
        out_shape = tuple(data_shape)
        plan = roi_align_grad(tuple(data_shape), rois, tuple(dy_shape)[2:], sampling, DTYPE_BYTES[dtype], ipu,
                              tiles)
    fill = _phases(ipu, tile_cycles(plan.buffer_elements, DTYPE_BYTES[dtype], "copy", ipu), 0, 1, 0.0, 0, plan.tiles,
                   tiles=tiles, launch=launch_cycles("copy"))
    vertices = _phases(ipu, plan.compute, exchange_cycles(plan.exchange_bytes, ipu), 1, plan.flops / plan.compute_sets,
                       plan.exchange_bytes * plan.tiles, plan.tiles, temp=plan.temp_bytes, tiles=tiles,
                       launch=plan.launch)
    empty = _phases(ipu, 0, 0, 1, 0.0, 0, 0, tiles=tiles)  # a group's compute set with no box left: its sync
    summed = _reduce("reduce_sum", [(plan.grid, dtype, "activation")], [(out_shape, dtype)],
                     {"axes": list(plan.axes)}, ipu, tiles)
    parts = [(fill, 1), (vertices, plan.compute_sets), (empty, plan.empty_sets), (summed, 1)]
    if kind == "roi_align":
        parts.append((_elementwise("div", [(out_shape, dtype, "activation"), ((1,), dtype, "constant")],
                                   [(out_shape, dtype)], ipu, tiles), 1))
    return in_series(parts, tiles, plan.plan)


def _upsample_bilinear(kind, ins, outs, ipu, tiles) -> OpCost:
    """PopTorch's bilinear upsampling custom op (:mod:`sim.cost.bilinear`): the forward's one
    popops::map, or the gradient's C++ vertices in one to three compute sets."""
    (in_shape, dtype, _), (out_shape, _) = ins[0], outs[0]
    itemsize = DTYPE_BYTES[dtype]
    if kind == "upsample_bilinear":
        p = forward_plan(in_shape, out_shape, itemsize, ipu, tiles)
    else:  # the output's gradient (the larger tensor) in, the input's gradient out
        p = grad_plan(out_shape, in_shape, itemsize, ipu, tiles)
    return _phases(ipu, p.compute, exchange_cycles(p.exchange_bytes, ipu), p.compute_sets, p.flops,
                   p.exchange_bytes * p.tiles, p.tiles, plan=p.plan, tiles=tiles, launch=p.launch)


def _dynamic_slice(elements: int, itemsize: int, ipu: IPU, tiles: int) -> OpCost:
    """One compute set of popops' DynamicSlice1D (or DynamicUpdateSlice1D) moving a slice of ``elements``."""
    used, per_tile = spread(elements, itemsize, ipu, tiles)
    return _phases(ipu, dynamic_slice_tile_cycles(per_tile, itemsize, ipu.worker_threads), 0, 1, 0.0, 0, used,
                   tiles=tiles, launch=dynamic_slice_tile_cycles(0, itemsize, ipu.worker_threads))


def batch_serial_cost(piece: OpCost, factor: int, moved: list[tuple[int, str]], summed: list[tuple[tuple, str]],
                      ipu: IPU, tiles: int) -> OpCost:
    """An op batch-serialised into ``factor`` pieces (PopART's BatchSerialize, :mod:`sim.compiler.batch_serial`):
    ``piece`` (its cost on one piece of the batch) ``factor`` times; per piece, one popops DynamicSlice or
    DynamicUpdateSlice compute set for each ``moved`` ``(elements, dtype)`` (a piece cut from a whole tensor, or
    written into one: ShardingHelper's dynamicShard and dynamicConcat); and ``factor - 1`` additions of each
    ``summed`` ``(shape, dtype)`` output, an output without the batch (a weight's gradient) made as the sum of the
    pieces' partial results (opsharding.cpp: unrollShard adds a SumOp, loopShard accumulates). A view stays
    free. (The Loop method's counter is one per loop of many ops: not priced.)"""
    if not moved and not summed and not piece.cycles:
        return piece
    parts, keys = [(piece, factor)], []
    for elements, dtype in moved:
        parts.append((_dynamic_slice(elements, DTYPE_BYTES[dtype], ipu, tiles), factor))
        keys.append(("dynamic_slice", dtype, 0))
    for shape, dtype in summed:
        add = _elementwise("add", ((shape, dtype, "gradient"),) * 2, ((shape, dtype),), ipu, tiles)
        parts.append((add, factor - 1))
        keys.append(("add", dtype, 0))
    total = in_series(parts, tiles, f"{piece.plan}; batch-serialised: {factor} pieces")
    return replace(total, relaid_cycles=piece.relaid_cycles * factor, over_memory_budget=piece.over_memory_budget,
                   codelets=piece.codelets + tuple(keys) if piece.codelets else ())


def _rnn(kind, ins, attrs, ipu, tiles, amp) -> OpCost:
    """A popnn LSTM or GRU layer over its whole sequence (``lstm``, ``gru``: the forward pass;
    ``lstm_grad``, ``gru_grad``: the backward pass with the weight update): the parts
    ``sim/cost/rnn.py`` lists, each priced as the matmul or element-wise op it is, in series.
    Inputs start ``x`` (T, B, I), the input weights, the recurrent weights (H, gates x H). popnn's
    matmuls keep fp32 partials (its ``partialsType`` default; PopART passes them its own
    ``lstmOptions``, not the matmul partials option), its accumulators the layer's type."""
    cell = kind.removesuffix("_grad")
    (T, B, I), dtype, _ = ins[0]
    H = ins[2][0][0]
    itemsize = DTYPE_BYTES[dtype]
    reset_after = attrs.get("reset_after", True)
    if kind.endswith("_grad"):
        parts = backward_parts(cell, T, B, I, H, itemsize, ipu.sram_bytes_per_tile, tiles, reset_after,
                               step_wu=attrs.get("poplibs") == LEGACY_POPLIBS)
    else:
        parts = forward_parts(cell, T, B, I, H, bool(attrs.get("training")), reset_after)
    priced = []
    for p in parts:
        if p.kind == "matmul":
            c = _rule("matmul", *_rnn_matmul(p, dtype), ipu, tiles, p.memory_proportion or amp, "float")
        elif p.kind == "reduce_sum":
            c = _reduce("reduce_sum", ((p.shape, dtype, "activation"),), (((p.shape[1],), dtype),), {"axes": (0,)},
                        ipu, tiles)
        elif p.kind == "transpose":
            c = _transpose(((p.shape, dtype),), ipu, tiles)
        elif p.kind == "dynamic_slice":
            c = _dynamic_slice(p.shape[0], itemsize, ipu, tiles)
        elif p.kind == "loop_counter":
            c = _phases(ipu, loop_counter_cycles(), 0, 1, 0.0, 0, 1, tiles=tiles, launch=loop_counter_cycles())
        else:
            operands = [((p.shape[0],), dtype, "activation")] + ([((p.broadcast,), dtype, "weight")] if p.broadcast else [])
            if p.kind.startswith("map:"):
                c = _map(operands, (((p.shape[0],), dtype),), {"steps": p.kind[4:].split(",")}, ipu, tiles)
            else:
                c = _elementwise(p.kind, operands, (((p.shape[0],), dtype),), ipu, tiles)
        if p.held:  # the layer's own tensors live beside the part, spread over the layer's tiles
            held = math.ceil(p.held * itemsize / tiles)
            profile = c.tile_profile(tiles)
            c = replace(c, temp_bytes_per_tile=c.temp_bytes_per_tile + held,
                        profile=replace(profile, temp=profile.temp + held))
        priced.append((c, p.count))
    total = in_series(priced, tiles, "")
    what = "backward and weight update" if kind.endswith("_grad") else "forward"
    matmuls = sum(p.count for p in parts if p.kind == "matmul")
    # the codelets of each part's compute sets, shared between parts (and ops) of the same kind
    # (the loop counter's vertex runs on one tile: left out, as the codelets count on all the op's tiles)
    codelets = tuple(sorted({(p.kind.split(":")[0], dtype, j) for p, (c, _) in zip(parts, priced)
                             if p.kind != "loop_counter" for j in range(c.supersteps)}))
    return replace(total, codelets=codelets, plan=f"popnn {cell.upper()} {what} over {T} steps: {matmuls} matmuls, "
                               f"{total.supersteps} compute sets")


def _rnn_matmul(part, dtype) -> tuple:
    """``(ins, outs, attrs)`` of a recurrent layer's matmul ``part`` (the product (M, K) @ (K, N)) as
    the matmul op its ``fullyConnectedPass`` plans: ``X @ W`` forward, ``dY @ Wᵀ`` (W stored
    (N, K)) backward, ``Xᵀ @ dY`` (X stored (K, M)) for the weight update (``X @ W`` too for the
    LSTM cadence's, which popnn plans as INFERENCE_FWD)."""
    M, K, N = part.shape
    if part.fc_pass == "TRAINING_WU":
        ins, attrs = (((K, M), dtype, "activation"), ((K, N), dtype, "activation")), {"transpose_a": True}
    elif part.fc_pass == "TRAINING_BWD":
        ins, attrs = (((M, K), dtype, "activation"), ((N, K), dtype, "weight")), {"transpose_b": True}
    else:
        ins, attrs = (((M, K), dtype, "activation"), ((K, N), dtype, "weight")), {}
    return ins, (((M, N), dtype),), attrs | ({"fully_connected_pass": part.fc_pass} if part.fc_pass else {})


def _map(ins, outs, attrs, ipu, tiles) -> OpCost:
    """popops::map of an expression (``attrs["steps"]``: the codelet kinds it chains, ``repeat``
    times): poplibs fuses the expression into one codelet, so each tile pays one vertex's fixed
    cost (the largest step's) and, per element, the sum of the steps' per-element cycles."""
    out_shape, out_dtype = outs[0]
    itemsize = max([DTYPE_BYTES[out_dtype]] + [DTYPE_BYTES[d] for _, d, _ in ins])
    n = max([math.prod(out_shape)] + [math.prod(s) for s, _, _ in ins])
    used, per_tile = spread(n, itemsize, ipu, tiles)
    bcast = sum(min(math.prod(s), per_tile) * DTYPE_BYTES[d] for s, d, _ in ins if math.prod(s) < n)
    steps = [codelet(s) for s in attrs["steps"]]
    fixed = max(c.fixed for c in steps)
    rate = attrs.get("repeat", 1) * sum(c.per_element(itemsize) for c in steps)
    per_tile_cycles = np.ceil(fixed + _counts(n, used) * rate)
    profile = TileProfile.padded(tiles, per_tile_cycles, bcast, 0)
    return _phases(ipu, int(per_tile_cycles.max()), exchange_cycles(bcast, ipu), 1, n * len(steps),
                   bcast * used, used, plan=f"{n} elements on {used} tiles, {'+'.join(attrs['steps'])}",
                   profile=profile, launch=math.ceil(fixed))


def _ctc(ins, attrs, ipu, tiles) -> OpCost:
    """popnn's CTC loss and gradient (``sim/cost/ctc.py``): log-probabilities ``(T, B, C)`` in, labels
    ``(B, L)``. The program popnn builds (``calcLossAndGradientLogProbabilities``), its parts run one
    after another:

    1. the copies before the loops: the input to every label partition's tiles (the whole alphabet),
       the labels and lengths broadcast, the gradient and the temporaries initialised from a constant;
       priced as one exchange;
    2. ``Repeat(loops, {exchange, alpha/beta compute set})`` and ``Repeat(loops, {exchange, gradient
       compute set})``: the program holds each body once (``OpCost.program_extent``), however many
       times it runs;
    3. the loss and the gradient reduced over the label partitions with popops' LOG_ADD (their
       reductions share compute sets), then the gradient mapped to the logits'
       (``exp(data) - exp(grad + loss)``) and cast to the input's type if it is not float.

    With ``reduced_classes`` (PopART's ``enableReducedClassesInLabel``) the input is first gathered
    down to each label's ``L + 1`` classes, and the gradient scattered back."""
    (T, B, C), dtype, _ = ins[0]
    L = ins[1][0][1] if len(ins[1][0]) > 1 else 1
    in_bytes, partials = DTYPE_BYTES[dtype], 4  # popnn's partialsType defaults to float
    reduced = bool(attrs.get("reduced_classes"))
    classes = L + 1 if reduced else C
    plan = plan_ctc(B, T, L, classes, in_bytes, partials, ipu, tiles)
    b_per, t_per = math.ceil(B / plan.batch), math.ceil(T / plan.time)
    ext_per = 2 * math.ceil(L / plan.label) + 1
    # the copies before the loops, into the busiest tile: its slice of the input (when split over
    # label partitions), of the gradient, and the alpha/beta columns it carries between steps
    setup_bytes = ((plan.data_bytes if plan.label_tiles > 1 else 0) + b_per * t_per * classes * partials
                   + b_per * 3 * ext_per * partials)
    setup = _phases(ipu, 0, exchange_cycles(setup_bytes, ipu), 0, 0.0, plan.tiles * setup_bytes, plan.tiles,
                    tiles=tiles, exchange_phases=1)
    # log-add 6 FLOP (max, subtract, exp, add, log, add), log-multiply 1: 2 of each per extended
    # symbol and step in each recursion, the gradient's product and sum twice more
    per_step = B * (2 * L + 1) / max(plan.time, 1)

    def step(compute: int, received: int, flops: float) -> OpCost:
        # one loop iteration: the columns every sequence of the tile needs, then one compute set
        # (its workers run ``serial_runs`` vertices each, one per sequence)
        return _phases(ipu, plan.serial_runs * compute, exchange_cycles(received, ipu), 1, flops,
                       plan.tiles * received, plan.tiles, plan.temp_bytes, tiles=tiles,
                       launch=min(ipu.vertex_overhead_cycles, plan.serial_runs * compute))

    alpha = step(plan.alpha_compute, plan.alpha_exchange_bytes, per_step * plan.time * (2 * 6 + 2))
    grad = step(plan.grad_compute, plan.grad_exchange_bytes, per_step * plan.time * (2 * 6 + 2 + 2 * 7))
    # the reductions over the label partitions: the gradient (label tiles, T·B·classes) and the loss
    # (B, time x label tiles), LOG_ADD in shared compute sets
    def log_add(shape):
        return plan_reduce(shape, (0,), partials, LOG_ADD, tiles, ipu.worker_threads)
    reductions = [log_add((plan.label_tiles * plan.time, B))]
    if plan.label_tiles > 1:
        reductions.insert(0, log_add((plan.label_tiles, T * B * classes)))
    reduce = _plan_cost(reductions, ipu, tiles, float(plan.label_tiles * T * B * classes), "LOG_ADD reductions")
    n = T * B * classes
    grad_map = _map((((n,), "float32", "activation"), ((B,), "float32", "activation")), (((n,), "float32"),),
                    {"steps": ("exp", "add", "exp", "sub")}, ipu, tiles)
    parts = [(setup, 1), (alpha, plan.loops), (grad, plan.loops), (reduce, 1), (grad_map, 1)]
    if dtype != "float32":  # the loss and the gradient cast to the output type
        parts.append((_elementwise("cast", (((n,), "float32", "activation"),), (((n,), dtype),), ipu, tiles), 1))
    if reduced:  # ctcLossPreProcess's multiSlice and ctcLossPostProcess's multiUpdate of the classes
        moved = math.ceil(T * B * classes * in_bytes / tiles)
        gather = _phases(ipu, 0, exchange_cycles(moved, ipu), 0, 0.0, moved * tiles, tiles, tiles=tiles)
        parts.append((gather, 2))
    total = in_series(parts, tiles, plan.describe())
    codelets = (("ctc_alpha", dtype, 0), ("ctc_grad", dtype, 0), ("reduce_log_add", "float32", 0),
                ("exp+add+exp+sub", "float32", 0)) + ((("cast", dtype, 0),) if dtype != "float32" else ())
    return replace(total, temp_bytes_per_tile=plan.temp_bytes, codelets=codelets)


def _ctc_beam_search(ins, attrs, ipu, tiles) -> OpCost:
    """popnn's CTC beam search decoder (``sim/cost/ctc_beam.py``): log-probabilities ``(T, B, C)`` and the lengths
    ``(B,)`` in; ``attrs``: ``beam_width``, ``top_paths``. Its program, one part after another:

    1. the input copied whole to each of a batch entry's tiles (when it has more than one) and the beams
       initialised from constants (one exchange), the lengths cast, reduced to their maximum and incremented
       (three compute sets);
    2. the loop, ``T`` times: the step's index broadcast (an exchange), the loop's counter, and the step's compute
       sets, each receiving its vertices' inputs first (the program holds the body once);
    3. a vertex per top path tracing its beam back, and the probabilities cast to the input's type."""
    (T, B, C), dtype, _ = ins[0]
    beam, top_paths = int(attrs["beam_width"]), int(attrs["top_paths"])
    workers = ipu.worker_threads
    p = ctc_beam.plan(B, C, beam, workers, tiles)
    temp = ctc_beam.temp_bytes(p, T, C, beam, DTYPE_BYTES[dtype])
    copied = p.entries * T * C * DTYPE_BYTES[dtype] if p.partitions > 1 else 0
    init = copied + p.entries * 2 * beam * ctc_beam.WORD
    setup = _phases(ipu, 3 * ipu.vertex_overhead_cycles, exchange_cycles(init, ipu), 3, 0.0, init * p.tiles, p.tiles,
                    temp, tiles=tiles, launch=3 * ipu.vertex_overhead_cycles)
    index = _phases(ipu, loop_counter_cycles(), exchange_cycles(ctc_beam.WORD, ipu), 1, 0.0,
                    ctc_beam.WORD * p.tiles, p.tiles, tiles=tiles, launch=loop_counter_cycles())

    def compute_set(st: ctc_beam.Step) -> OpCost:
        return _phases(ipu, st.compute, exchange_cycles(st.received, ipu), 1, st.flops, st.received * p.tiles,
                       p.tiles, temp, tiles=tiles, launch=st.launch)
    parts = [(setup, 1), (index, T), *((compute_set(st), T) for st in ctc_beam.loop_steps(p, C, beam, workers)),
             (compute_set(ctc_beam.output_step(p, T, top_paths, workers)), 1)]
    if dtype != "float32":  # the beams' probabilities, float partials, cast to the input's type
        parts.append((_elementwise("cast", (((B, top_paths), "float32", "activation"),), (((B, top_paths), dtype),),
                                   ipu, tiles), 1))
    sorts = " then ".join(f"{st.groups} group(s) ranked in {st.rank} and reduced in {st.reduce}" for st in p.sort)
    total = in_series(parts, tiles, f"CTC beam search of width {beam}: {p.partitions} tiles a batch entry on "
                                    f"{p.tiles} tiles, {T} steps; sorted as {sorts}")
    codelets = (("ctc_generate", dtype, 0), ("ctc_merge", "float32", 0), ("ctc_select", "float32", 0),
                ("ctc_rank", "float32", 0), ("ctc_reduce", "float32", 0), ("ctc_update", "float32", 0),
                ("ctc_output", "float32", 0))
    return replace(total, temp_bytes_per_tile=temp, codelets=codelets)


def _sort(ins, outs, attrs, ipu, tiles) -> OpCost:
    """popops' bitonic top-k / sort of each row along ``attrs["axis"]`` (sort, topk with
    ``attrs["k"]``, argsort, median): ``sim/cost/sort.py``."""
    shape, dtype, _ = ins[0]
    axis = attrs.get("axis", -1) % max(len(shape), 1)
    n = shape[axis] if shape else 1
    rows = math.prod(shape) // max(n, 1)
    k = min(int(attrs.get("k", n)), n)
    c = bitonic_sort_cost(rows, n, k, DTYPE_BYTES[dtype], dtype.startswith(("int", "uint")), ipu, tiles)
    return _phases(ipu, c.compute_cycles, c.exchange_cycles, c.compute_sets, float(c.comparisons),
                   c.exchange_bytes, c.tiles_used, c.temp_bytes_per_tile, tiles=tiles, launch=c.launch_cycles,
                   exchange_phases=c.exchange_phases,
                   plan=f"bitonic top-{k} of {rows} rows of {n}: {c.steps} compare-and-swap steps on up to "
                        f"{c.tiles_used} tiles")


#: kinds whose rule reads its inputs' shapes and dtypes but never their roles (:func:`price_key`): the
#: element-wise ops (:func:`_elementwise`, :func:`_dropout`, an accumulate into a matmul's layout:
#: :func:`_scaled_add_to_matmul`), maps, reductions (:func:`_reduce`), softmax and layer norm rows and losses
#: (:func:`~sim.cost.row_ops.row_op_cost` of the first input's shape and dtype) and layout changes
#: (:func:`_transpose`); not SGD's update, which tells the weight, the velocity and the gradient apart by role.
#: Defined here, after the kind sets it joins.
ROLE_FREE_KINDS = ((ELEMENTWISE_KINDS - {"sgd_update"}) | _POINTWISE | LOSS_COST_KINDS | set(ROW_OP_KINDS)
                   | {"map", "transpose", "remap"} | set(_REDUCE_OPERATION))
