"""The graph IR: tensors, ops and a builder to write models with.

No numbers are computed here beyond shapes: a :class:`Graph` says *what* runs (op kinds,
tensor shapes and dtypes, the user's annotations); the cost model says how long it takes.

Tensor ``role`` says how a tensor lives:

``input``       fed from the host by a stream copy, once per micro-batch
``weight``      a trainable variable, always live on chip (unless placed off chip)
``constant``    a non-trainable variable (buffers, fixed masks), always live
``activation``  produced by an op, live from its producer to its last consumer
``gradient``    an activation of the backward pass
``accumulator`` a gradient-accumulation buffer, always live in training
``state``       optimizer state (momentum, Adam's m and v), always live in training
"""

from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from ..errors import GraphError, show_number

#: the most elements a tensor may have (see Graph.add_tensor)
MAX_TENSOR_ELEMENTS = 2**40
#: bytes per element; float8 is PopXL's float8_143 / float8_152 (Poplar's QUARTER; the two formats cost
#: the same), which only an IPU with FP8 (ipu21: the C600) multiplies
DTYPE_BYTES = {"float32": 4, "float16": 2, "float8": 1, "int32": 4, "int8": 1, "uint8": 1, "bool": 1}
_DTYPE_ALIASES = {
    "fp32": "float32", "float": "float32", "f32": "float32",
    "fp16": "float16", "half": "float16", "f16": "float16",
    "int": "int32", "i32": "int32", "int64": "int32", "long": "int32",  # IPUs compute int64 as int32
    "fp8": "float8", "float8_143": "float8", "float8_152": "float8", "quarter": "float8",
}
#: the dtypes of indices and integer labels
INTEGER_DTYPES = ("int32", "int8", "uint8")
ROLES = ("input", "weight", "constant", "activation", "gradient", "accumulator", "state")
PASSES = ("forward", "backward", "update")
#: op kinds whose outputs are views of their first input: no work, no memory of their own
#: (``remap_inplace``: a layout op that keeps its input's layout, see :meth:`GraphBuilder.remap`)
VIEW_KINDS = frozenset({"reshape", "slice", "identity", "concat", "detach", "flatten", "squeeze", "unsqueeze",
                        "remap_inplace"})
#: op kinds that copy one slot of a remote buffer (streaming memory) to or from the tiles, and the
#: direction of that copy: the schedule runs each as a RemoteCopy of ``attrs["slot_bytes"]``, not
#: as compute (PopXL's ops.remote_load / remote_store)
REMOTE_KINDS = {"remote_load": "load", "remote_store": "store"}
#: the op kind that copies a tensor between an IPU's IO tiles and its compute tiles (PopART's
#: IoTileCopy): the schedule prices it as that on-chip exchange; ``attrs["to_io"]`` gives the way
IO_TILE_COPY = "io_tile_copy"
#: the op kind that runs a function on the host in the middle of the program (PopTorch's ``poptorch.CPU``:
#: a Poplar HostFunction ``Call``): the schedule runs it as stream copies of its inputs to the host and of
#: its outputs back (:meth:`sim.schedule.context.Context.host_call_items`); ``attrs["id"]`` names it and
#: ``attrs["host_seconds"]`` is the host's time in the function for one replica
HOST_CALL = "host_call"


def _amp_output_dtype(operand_dtype: str) -> str | None:
    """The result dtype of a matmul or convolution of ``operand_dtype`` operands: float16 for FP8
    ones (PopXL's and PopRT's FP8 matmuls and convolutions return float16), else the operands'."""
    return "float16" if operand_dtype == "float8" else None


def canonical_dtype(dtype: str) -> str:
    """Canonical dtype name, raising :class:`GraphError` for one the IPU has no model for."""
    name = _DTYPE_ALIASES.get(str(dtype), str(dtype))
    if name not in DTYPE_BYTES:
        raise GraphError(f"unknown dtype {dtype!r}; supported: {', '.join(DTYPE_BYTES)}")
    return name


@dataclass
class Tensor:
    """A tensor of the graph. ``shape`` is in elements, ``nbytes`` in bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    producer: str | None = None  # name of the op that writes it, None for inputs and variables
    #: "on_chip", "off_chip" (streaming memory) or "io_tiles" (on the IPU's IO tiles, not its compute tiles)
    location: str = "on_chip"
    shards: int = 1  # replicas it is sharded over (replicated tensor sharding)
    shard_stride: int = 1  # replica numbers between two of those replicas (1: consecutive replicas)
    weight_view: bool = False  # a view of weights (GraphBuilder.linear's pieces), an operand priced as a weight
    #: the collectives the program itself applies to a weight's gradient before its update, in order, as
    #: ``(kind, group stride, group size, bytes)`` (PopXL: ``ops.collectives`` on an autodiff gradient);
    #: None: the weight update's default, an all-reduce over every replica
    grad_collectives: tuple | None = None
    #: for a gradient made by training expansion: the tensor it is the gradient of (sim/graph/training.py)
    grad_of: str | None = None
    #: batch-serialised pieces it is made in one at a time, each freed before the next is made, so that a
    #: piece's bytes (``live_bytes``) are live at once (sim/compiler/batch_serial.py); 1: the whole tensor
    batch_slices: int = 1

    @property
    def live_bytes(self) -> float:
        """Bytes of it live at once on its IPU: a piece's when batch-serialised, without sharding."""
        return self.nbytes / self.batch_slices

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def priced_role(self) -> str:
        """The role the cost model sees: a view of weights (``weight_view``) is a weight."""
        return "weight" if self.weight_view else self.role

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]


#: popnn's recurrent cells (``GraphBuilder.recurrent``): gates per cell, and the intermediates of a
#: step kept for the backward pass (Lstm.cpp getFwdIntermediatesToSave: the four gates, tanh of the
#: cell state and the previous cell state; Gru.cpp: the reset and update gates, the candidate and
#: the recurrent candidate term of a reset-after GRU)
RNN_GATES = {"lstm": 4, "gru": 3}
RNN_SAVED = {"lstm": 6, "gru": 4}


@dataclass
class Op:
    """One op: a kind the cost model knows, its tensors, attributes and annotations."""

    name: str
    kind: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    pass_: str = "forward"  # "forward", "backward" or "update"
    ipu: int | None = None  # user annotation: which IPU (or pipeline stage's IPU)
    stage: int | None = None  # pipeline stage, when it differs from the IPU
    phase: int | None = None  # execution phase (phased execution)
    block: str | None = None  # the user's block name
    recompute: bool = False  # recomputed in the backward pass rather than stashed
    forward_of: str | None = None  # for a backward op: the forward op it differentiates

    @property
    def checkpointed(self) -> frozenset[str]:
        """The outputs kept from the forward pass as recomputation checkpoints (:meth:`Graph.checkpoint`):
        every output where its ``recomputation_checkpoint`` attribute is True, else those at the positions
        it lists (positions, not names, so that a copy of the op with its tensors renamed keeps them)."""
        kept = self.attrs.get("recomputation_checkpoint")
        if not kept:
            return frozenset()
        return frozenset(self.outputs if kept is True else (self.outputs[i] for i in kept if i < len(self.outputs)))


def _clone(item, **changes):
    """A shallow copy of a :class:`Tensor` or :class:`Op` with ``changes`` (what ``dataclasses.replace``
    gives, without running ``__init__`` again: a graph copy clones every tensor and op)."""
    new = object.__new__(type(item))
    new.__dict__.update(item.__dict__, **changes)
    return new


def _unused_name(base: str, taken) -> str:
    """``base``, or ``base_2``, ``base_3``, ... : the first not in ``taken``."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


class Graph:
    """A directed acyclic graph of ops in a valid execution order (insertion order)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.inputs: list[str] = []  # host-fed tensors, in the model's flattened order
        self.outputs: list[str] = []  # tensors streamed back to the host, in order
        self.loss: str | None = None
        #: the losses of a program that writes out its micro-batches one after another (a PopXL loop):
        #: each micro-batch's backward pass follows its own loss (sim/graph/training.py)
        self.micro_batch_losses: list[str] = []
        self.training = False
        self.overlap: dict[str, int] = {}  # input/output tensor -> OverlapMode (host IO overlap)
        #: output tensor -> the host stream it is stored to, where the front end names streams apart from
        #: tensors (PopXL's d2h_stream): what the timeline calls its copy
        self.stream_names: dict[str, str] = {}
        #: samples one row of the micro-batch (the first input's leading dimension) carries, which
        #: is what throughput counts: 1 for an ordinary model; a packed BERT row (a pack) holds
        #: ``packing_factor`` sequences on average, so its runs count sequences, not packs
        self.samples_per_row: float = 1.0
        #: rows of one micro-batch (its samples, for an ordinary model), where the front end knows
        #: them (the zoo's ``micro_batch``, an ONNX model's batch dimension, a PyTorch call's
        #: micro-batch); None: the leading dimension of the first input that has one
        self.micro_batch: int | None = None
        #: the parameters the front end was given to build it (the zoo's overrides of its defaults),
        #: recorded so that two runs can be told apart
        self.params: dict = {}
        #: the tiles a microbenchmark lays its work out on, one piece a tile (``amp-tile``'s ``tiles``);
        #: None: the compiler maps the work onto any IPU's tiles
        self.tiles_asked: int | None = None
        #: what the front end says of how it built the graph (a capture's method, what it could not model),
        #: which the run's notes begin with
        self.notes: list[str] = []
        #: each device iteration reads what the one before it made (a generation loop run as device
        #: iterations, the next token staying on the IPU: the zoo's GPT-2 ``decode_cache``), so no iteration
        #: can start before the one before it has finished: a model split over IPUs runs them one after another
        #: (ShardedExecution), never pipelined
        self.carries_iterations = False
        self._op_names: set[str] = set()

    # --- construction -------------------------------------------------------------------
    def add_tensor(self, name: str, shape: Sequence[int], dtype: str, role: str,
                   producer: str | None = None) -> Tensor:
        if name in self.tensors:
            raise GraphError(f"graph {self.name!r}: tensor {name!r} defined twice; give it, or the layer that "
                             "makes it, another name (a layer's name=..., or GraphBuilder.scope)")
        if role not in ROLES:
            raise GraphError(f"tensor {name!r}: unknown role {role!r}; expected one of {ROLES}")
        shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in shape):
            raise GraphError(f"tensor {name!r}: every dimension must be > 0, got shape {shape}")
        if math.prod(shape) > MAX_TENSOR_ELEMENTS:
            raise GraphError(
                f"tensor {name!r}: shape {shape} has {show_number(math.prod(shape))} elements, more than the "
                f"simulator's limit of 2^40 ({MAX_TENSOR_ELEMENTS:,}): the cost model counts a matmul's "
                "multiply-adds in 64-bit integers, which larger tensors overflow (2^40 fp16 elements are "
                "2.2 TB, the tile memory of over 2,000 IPUs); use smaller sizes")
        t = Tensor(name, shape, canonical_dtype(dtype), role, producer)
        self.tensors[name] = t
        return t

    def add_op(self, op: Op) -> Op:
        if op.name in self._op_names:
            raise GraphError(f"graph {self.name!r}: op {op.name!r} defined twice")
        for t in op.inputs:
            if t not in self.tensors:
                raise GraphError(f"op {op.name!r} ({op.kind}): unknown input tensor {t!r}")
        for t in op.outputs:
            if t not in self.tensors:
                raise GraphError(f"op {op.name!r} ({op.kind}): unknown output tensor {t!r}")
        self._op_names.add(op.name)
        self.ops.append(op)
        return op

    def insert_after(self, placements: dict[str, list[Op]]) -> None:
        """Add ops at given places in the execution order: ``placements`` maps an op's name to the
        new ops to run right after it (in list order), each checked as :meth:`add_op` checks it."""
        unknown = set(placements) - {op.name for op in self.ops}
        if unknown:
            raise GraphError(f"graph {self.name!r}: no op {sorted(unknown)[0]!r} to insert after")
        start = len(self.ops)
        try:  # checked and named as add_op does (all or none), then put in place
            for op in (op for ops in placements.values() for op in ops):
                self.add_op(op)
        except GraphError:
            self._op_names.difference_update(op.name for op in self.ops[start:])
            del self.ops[start:]
            raise
        del self.ops[start:]
        self.ops[:] = [x for op in self.ops for x in (op, *placements.get(op.name, ()))]

    def unique_op_name(self, base: str) -> str:
        return _unused_name(base, self._op_names)

    def unique_tensor_name(self, base: str) -> str:
        return _unused_name(base, self.tensors)

    def copy(self) -> "Graph":
        """A copy whose tensors and ops can be changed without touching this graph."""
        new = Graph(self.name)
        new.tensors = {k: _clone(t) for k, t in self.tensors.items()}
        new.ops = [_clone(op, inputs=list(op.inputs), outputs=list(op.outputs), attrs=dict(op.attrs))
                   for op in self.ops]
        new.inputs, new.outputs = list(self.inputs), list(self.outputs)
        new.loss, new.training, new.overlap = self.loss, self.training, dict(self.overlap)
        new.stream_names = dict(self.stream_names)
        new.micro_batch_losses = list(self.micro_batch_losses)
        new.samples_per_row, new.micro_batch, new.params = self.samples_per_row, self.micro_batch, dict(self.params)
        new.tiles_asked, new._op_names = self.tiles_asked, set(self._op_names)
        new.carries_iterations = self.carries_iterations
        new.notes = list(self.notes)
        return new

    # --- queries ------------------------------------------------------------------------
    def micro_batch_rows(self) -> int:
        """Rows of one micro-batch: :attr:`micro_batch`, else the leading dimension of the first
        input that has one, else 1."""
        if self.micro_batch is not None:
            return self.micro_batch
        return next((self.tensors[n].shape[0] for n in self.inputs if self.tensors[n].shape), 1)

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no tensor {name!r}") from None

    def producer_op(self, name: str) -> Op | None:
        """The op that made tensor ``name`` (None for an input, weight or constant)."""
        producer = self.tensor(name).producer
        if producer is None:
            return None
        return next((op for op in reversed(self.ops) if op.name == producer), None)

    def checkpoint(self, name: str) -> Op | None:
        """Make tensor ``name`` a recomputation checkpoint: kept from the forward pass, where recomputation
        starts again (PopART's ``checkpointOutput``, willow/src/builder_impl.cpp: an Identity of the
        tensor whose output is RecomputeType Checkpoint). The checkpoint is the tensor, not the op that
        made it: an op with other outputs (an LSTM's output sequence beside its checkpointed state) is
        still recomputed where they are read. Recorded on that op (:attr:`Op.checkpointed`), which is
        returned (None for an input, weight or constant: nothing to recompute)."""
        op = self.producer_op(name)
        if op is not None:
            kept = op.checkpointed | {name}
            positions = tuple(i for i, t in enumerate(op.outputs) if t in kept)
            op.attrs["recomputation_checkpoint"] = True if kept == set(op.outputs) else positions
        return op

    def weights(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.role == "weight"]

    def num_parameters(self) -> int:
        return sum(t.numel for t in self.weights())

    def ops_in(self, pass_: str) -> list[Op]:
        return [op for op in self.ops if op.pass_ == pass_]

    def ipus_used(self) -> list[int]:
        return sorted({op.ipu or 0 for op in self.ops})

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.ops)} ops, {len(self.tensors)} tensors, "
                f"{self.num_parameters():,} parameters)")


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], where: str) -> tuple[int, ...]:
    n = max(len(a), len(b))
    given = a, b
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise GraphError(f"{where}: shapes {given[0]} and {given[1]} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def _is_whole(value) -> bool:
    """Is ``value`` a whole number (an int or numpy integer, not a bool)?"""
    if isinstance(value, bool):
        return False
    try:
        return operator.index(value) == value
    except TypeError:
        return False


def _whole(where: str, what: str, value, least: int = 0) -> int:
    """``value`` as an int, raising :class:`GraphError` unless it is a whole number >= ``least``."""
    if not _is_whole(value) or value < least:
        raise GraphError(f"{where}: {what} {value!r}: give a whole number >= {least}")
    return int(value)


def _axis(where: str, axis, shape: tuple[int, ...], what: str = "axis") -> int:
    """``axis`` of a tensor of ``shape`` as 0..rank-1 (negative counting from the end, as numpy),
    raising :class:`GraphError` for one that is not a dimension of it."""
    rank = len(shape)
    if not _is_whole(axis) or not -rank <= axis < rank:
        raise GraphError(f"{where}: {what} {axis!r} is not a dimension of a tensor of shape {shape}; "
                         f"give one in {-rank}..{rank - 1}")
    return int(axis) % rank


def _rank(where: str, name: str, shape: tuple[int, ...], rank: int, layout: str) -> None:
    """Raise :class:`GraphError` unless tensor ``name`` has ``rank`` dimensions (``layout``)."""
    if len(shape) != rank:
        raise GraphError(f"{where}: expected a {rank}-D {layout} input, got {name!r} of shape {shape}")


def _window(where: str, kernel, stride, padding) -> None:
    """Raise :class:`GraphError` unless a 2-D window's kernel and stride are >= 1 and its padding >= 0."""
    for value, what, least in ((kernel, "kernel", 1), (stride, "stride", 1), (padding, "padding", 0)):
        if any(v < least for v in spatial(value, f"{where}: {what}")):
            raise GraphError(f"{where}: {what} {value!r}: give whole numbers >= {least}")


def _conv_out(size: int, k: int, stride: int, pad: int, dilation: int = 1) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def undilated_padding(kernel, padding, dilation):
    """``(height, width)`` padding with which the undilated ``kernel`` gives the output field of
    the kernel dilated by ``dilation`` with ``padding`` (at least 0): the geometry the cost model
    prices a dilated convolution by (the same multiply-adds: each output position still meets
    ``kernel`` taps; :func:`sim.graph.ir.GraphBuilder.conv2d`)."""
    return tuple(max(0, p - (d - 1) * (k - 1) // 2)
                 for k, p, d in zip(spatial(kernel), spatial(padding, "padding"), spatial(dilation, "dilation")))


def spatial(value, what: str = "kernel") -> tuple[int, int]:
    """(height, width) of a 2-D window's kernel, stride or padding, given as one int (the same
    for both) or a pair, as PyTorch's ``Conv2d`` takes them (op attributes store a square one as
    its int, :func:`spatial_attr`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value), int(value)
    try:
        h, w = value
        return int(h), int(w)
    except (TypeError, ValueError):
        raise GraphError(f"{what} {value!r}: give one int or a (height, width) pair") from None


def conv_attrs(kernel, stride: int, padding, groups: int, dilation=1) -> dict:
    """A ``conv2d``'s attributes (``kernel``, ``padding`` and ``dilation`` one int or a (height, width)
    pair). A dilated kernel is priced as the undilated one with the padding that keeps the output
    field (:func:`undilated_padding`: the same multiply-adds), its ``dilation`` kept."""
    attrs = {"kernel": spatial_attr(kernel), "stride": stride, "padding": spatial_attr(padding, "padding"),
             "groups": groups}
    if spatial(dilation, "dilation") != (1, 1):
        attrs.update(padding=spatial_attr(undilated_padding(kernel, padding, dilation)),
                     dilation=spatial_attr(dilation, "dilation"))
    return attrs


def transposed_conv_attrs(n: int, in_channels: int, out_channels: int, field_in, kernel, stride: int, padding,
                          groups: int = 1) -> dict:
    """The ``conv2d_grad_input`` attributes of a transposed convolution of ``in_channels`` ->
    ``out_channels`` over an input field ``field_in`` (height, width): those of the convolution it
    is the input gradient of (``out_channels`` -> ``in_channels``, output field ``field_in``)."""
    return {"kernel": spatial_attr(kernel), "stride": int(stride), "padding": spatial_attr(padding, "padding"),
            "groups": int(groups), "n": int(n), "ci": int(out_channels), "co": int(in_channels),
            "ho": int(field_in[0]), "wo": int(field_in[1]), "transposed": True}


def spatial_attr(value, what: str = "kernel"):
    """The op attribute of a kernel, stride or padding: its int when square, else ``[h, w]``."""
    h, w = spatial(value, what)
    return h if h == w else [h, w]


class GraphBuilder:
    """Writes a :class:`Graph` op by op, with shape inference.

    Every method takes and returns tensor *names*. Annotations set with the context managers
    (:meth:`ipu`, :meth:`block`, :meth:`scope`, :meth:`recompute`) apply to every op built
    inside them::

        b = GraphBuilder("mlp")
        x = b.input("x", (16, 784))
        with b.scope("fc1"):
            h = b.relu(b.linear(x, 256))
        b.output(h)
        graph = b.graph
    """

    #: the op kinds a float16 graph can keep in float32 (:meth:`__init__`'s ``fp32_kinds``)
    FP32_KINDS = ("gelu", "layernorm")

    #: :meth:`gelu`'s op kind by the GELU's form: popnn's tanh approximation (PopART's Gelu, what PopTorch
    #: lowers torch's GELU to) or the exact erf form (PopART's GeluErf, popops' GELU_ERF vertex)
    GELU_KINDS = {"tanh": "gelu", "erf": "gelu_erf"}

    def __init__(self, name: str, dtype: str = "float16", fp32_kinds: Sequence[str] = (), gelu: str = "tanh"):
        """``fp32_kinds``: op kinds (of :data:`FP32_KINDS`) that run in float32 on a float16 input,
        cast to float32 before and back to float16 after, their weights in float32: what PopRT's
        Converter does to the ONNX op types it names in ``fp16_skip_op_types`` ("Gelu", and
        "GroupNormalization" for a layer norm once its pattern pass has fused it). ``gelu``: the form
        :meth:`gelu` runs (:data:`GELU_KINDS`)."""
        self.graph = Graph(name)
        self.dtype = canonical_dtype(dtype)
        unknown = sorted(set(fp32_kinds) - set(self.FP32_KINDS))
        if unknown:
            raise GraphError(f"fp32 kinds {unknown}: only {', '.join(self.FP32_KINDS)} can run in float32 "
                             "inside a float16 graph")
        if gelu not in self.GELU_KINDS:
            raise GraphError(f"gelu {gelu!r}: expected one of {', '.join(map(repr, self.GELU_KINDS))}")
        self.fp32_kinds = frozenset(fp32_kinds)
        self.gelu_kind = self.GELU_KINDS[gelu]
        self._scopes: list[str] = []
        self._ipu: int | None = None
        self._stage: int | None = None
        self._phase: int | None = None
        self._block: str | None = None
        self._recompute = False

    # --- annotations --------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    @contextlib.contextmanager
    def ipu(self, ipu: int, stage: int | None = None, phase: int | None = None,
            block: str | None = None) -> Iterator[None]:
        """Place the ops built inside on IPU ``ipu`` (None: unplaced), in pipeline ``stage`` and
        execution ``phase`` when given (whole numbers >= 0)."""
        for what, value in (("ipu", ipu), ("stage", stage), ("phase", phase)):
            if value is not None and (not _is_whole(value) or value < 0):
                raise GraphError(f"GraphBuilder.ipu: {what} {value!r}: give a whole number >= 0 (or None)")
        saved = (self._ipu, self._stage, self._phase, self._block)
        self._ipu, self._stage, self._phase = ipu, stage, phase
        self._block = block if block is not None else saved[3]
        try:
            yield
        finally:
            self._ipu, self._stage, self._phase, self._block = saved

    @contextlib.contextmanager
    def recompute(self, on: bool = True) -> Iterator[None]:
        saved, self._recompute = self._recompute, on
        try:
            yield
        finally:
            self._recompute = saved

    def _name(self, base: str) -> str:
        return "/".join(self._scopes + [base])

    # --- tensors ------------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: str | None = None) -> str:
        t = self.graph.add_tensor(self._name(name), shape, dtype or self.dtype, "input")
        self.graph.inputs.append(t.name)
        return t.name

    def weight(self, name: str, shape: Sequence[int], dtype: str | None = None) -> str:
        return self.graph.add_tensor(self._name(name), shape, dtype or self.dtype, "weight").name

    def constant(self, name: str, shape: Sequence[int], dtype: str | None = None) -> str:
        return self.graph.add_tensor(self._name(name), shape, dtype or self.dtype, "constant").name

    def output(self, *names: str) -> None:
        for n in names:
            self.graph.tensor(n)
            self.graph.outputs.append(n)

    def checkpoint(self, name: str) -> str:
        """A recomputation checkpoint (PopTorch ``recomputationCheckpoint``): ``name`` is kept
        from the forward pass; in training, the ops between checkpoints are recomputed in the
        backward pass instead of keeping their activations."""
        if self.graph.checkpoint(name) is None:
            raise GraphError(f"checkpoint({name!r}): only an op's output can be a checkpoint")
        return name

    def set_overlap(self, name: str, mode) -> str:
        """Let the host stream of input/output ``name`` overlap compute (an OverlapMode)."""
        self.graph.tensor(name)
        self.graph.overlap[name] = int(mode)
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        return self.graph.tensor(name).shape

    def dtype_of(self, name: str) -> str:
        return self.graph.tensor(name).dtype

    # --- generic op ---------------------------------------------------------------------
    def op(self, kind: str, inputs: Sequence[str], out_shapes: Sequence[Sequence[int]],
           attrs: dict | None = None, name: str | None = None,
           out_dtypes: Sequence[str] | None = None) -> list[str]:
        """Add an op of ``kind`` with outputs of the given shapes; returns the output names.

        A ``"custom"`` op carries its own cost in ``attrs``, like a Poplar codelet with a cycle
        estimate: ``vertices`` (how many), ``vertex_cycles`` (worker cycles of one vertex), and
        optionally ``tiles`` (tiles it spreads over; default all), ``exchange_bytes_per_tile``
        (received by each tile before it runs) and ``flops`` (for the reports)."""
        if kind == "custom":
            self._check_custom(self._name(name or kind), attrs or {})
        op_name = self.graph.unique_op_name(self._name(name or kind))
        dtypes = out_dtypes or [self.graph.tensor(inputs[0]).dtype if inputs else self.dtype] * len(out_shapes)
        outs = []
        for i, (shape, dt) in enumerate(zip(out_shapes, dtypes)):
            tname = self.graph.unique_tensor_name(op_name if len(out_shapes) == 1 else f"{op_name}:{i}")
            outs.append(self.graph.add_tensor(tname, shape, dt, "activation", producer=op_name).name)
        self.graph.add_op(Op(op_name, kind, list(inputs), outs, dict(attrs or {}), ipu=self._ipu,
                             stage=self._stage, phase=self._phase, block=self._block,
                             recompute=self._recompute))
        return outs

    @staticmethod
    def _check_custom(where: str, attrs: dict) -> None:
        """Raise :class:`GraphError` unless a custom op's ``attrs`` give it a cost (:meth:`op`)."""
        where = f"custom op {where!r}"
        missing = [k for k in ("vertices", "vertex_cycles") if k not in attrs]
        if missing:
            raise GraphError(f"{where}: attrs need {' and '.join(missing)} (its cost: vertices, and worker "
                             "cycles of one vertex; optionally tiles, exchange_bytes_per_tile, flops)")
        _whole(where, "vertices", attrs["vertices"])
        if "tiles" in attrs:
            _whole(where, "tiles", attrs["tiles"], 1)
        for k in ("vertex_cycles", "exchange_bytes_per_tile", "flops"):
            v = attrs.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) and not _is_whole(v) or not v >= 0:
                raise GraphError(f"{where}: {k} {v!r}: give a number >= 0")

    def _one(self, kind, inputs, shape, attrs=None, name=None, dtype=None) -> str:
        return self.op(kind, inputs, [shape], attrs, name, [dtype] if dtype else None)[0]

    # --- dense algebra ------------------------------------------------------------------
    def matmul(self, a: str, b: str, name: str | None = None, partials_type: str | None = None) -> str:
        """``a @ b`` with numpy broadcasting of the batch dimensions. ``partials_type``
        (``"float"`` or ``"half"``) overrides the run's partials type for this op, as PopART's
        ``Builder.setPartialsType``."""
        sa, sb = self.shape(a), self.shape(b)
        where = f"matmul {self._name(name or 'matmul')}"
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:
            raise GraphError(f"{where}: inner dimensions do not match: {sa} @ {sb}")
        if partials_type not in (None, "float", "half"):
            raise GraphError(f"{where}: partials_type {partials_type!r}: expected 'float' or 'half'")
        batch = _broadcast(sa[:-2], sb[:-2], where)
        attrs = {"partials_type": partials_type} if partials_type else None
        return self._one("matmul", [a, b], batch + (sa[-2], sb[-1]), attrs, name=name,
                         dtype=_amp_output_dtype(self.dtype_of(a)))

    def linear(self, x: str, out_features: int, bias: bool = True, name: str = "linear",
               pieces: Sequence[str] = ()) -> str:
        """A fully connected layer: ``x @ W + b`` with ``W`` of shape (in, out). ``pieces`` (names):
        ``W`` and ``b`` kept as that many tensors each, split evenly along the output features
        (``<piece>_weight``, ``<piece>_bias``), and concatenated (a view) before the one matmul, as
        Graphcore's PopART BERT keeps its QKV weights (``split_qkv``): the same matmul, each piece
        a weight of its own to update."""
        where = f"linear {self._name(name)}"
        if len(self.shape(x)) < 2:
            raise GraphError(f"{where}: expected an input of at least 2 dimensions (..., in_features), got {x!r} "
                             f"of shape {self.shape(x)}")
        _whole(where, "out_features", out_features, 1)
        in_features = self.shape(x)[-1]
        if pieces and out_features % len(pieces):
            raise GraphError(f"linear {self._name(name)}: {out_features} output features do not split into "
                             f"{len(pieces)} pieces")

        def param(what: str, shape: tuple, dtype: str) -> str:
            if not pieces:
                return self.weight(what, shape, dtype)
            part = shape[:-1] + (shape[-1] // len(pieces),)
            view = self.concat([self.weight(f"{p}_{what}", part, dtype) for p in pieces], len(shape) - 1,
                               name=what)
            self.graph.tensors[view].weight_view = True
            return view
        with self.scope(name):
            y = self.matmul(x, param("weight", (in_features, out_features), self.dtype_of(x)))
            if bias:
                y = self.add(y, param("bias", (out_features,), self.dtype_of(y)))
        return y

    def _conv_window(self, where: str, x: str, out_channels: int, groups: int, kernel, stride, padding, extra,
                     extra_name: str) -> tuple:
        """A convolution's checked arguments: ``x``'s NCHW shape, then (height, width) pairs of the
        kernel, stride, padding and ``extra`` (the dilation or the output padding, ``extra_name``);
        refused (a :class:`GraphError` naming ``where``) unless ``x`` is 4-D, the channels divide into
        the groups and the stride is the same along both axes."""
        _rank(where, x, self.shape(x), 4, "NCHW")
        n, c, h, w = self.shape(x)
        _whole(where, "out_channels", out_channels, 1)
        _whole(where, "groups", groups, 1)
        _window(where, kernel, stride, padding)
        if c % groups or out_channels % groups:
            raise GraphError(f"{where}: channels {c}->{out_channels} not divisible by groups {groups}")
        (kh, kw), (sh, sw), (ph, pw), pair = (
            spatial(v, f"{where}: {what}") for v, what in
            ((kernel, "kernel"), (stride, "stride"), (padding, "padding"), (extra, extra_name)))
        if sh != sw:
            raise GraphError(f"{where}: stride {sh}x{sw} differs along the two axes; the cost model takes one "
                             "stride (give the same stride for height and width)")
        return (n, c, h, w), (kh, kw), (sh, sw), (ph, pw), pair

    def conv2d(self, x: str, out_channels: int, kernel, stride=1, padding=0,
               groups: int = 1, bias: bool = False, name: str = "conv", dilation=1) -> str:
        """2-D convolution, NCHW layout. ``kernel``, ``padding`` and ``dilation`` are one int or a
        (height, width) pair (Inception's 1x7 / 7x1 kernels); the stride is the same along both axes.

        A dilated kernel (atrous convolution) is priced as the undilated kernel with the padding
        that keeps the output field (:func:`undilated_padding`): the same multiply-adds, its wider
        input window not exchanged; the op keeps the ``dilation`` attribute and the run's notes
        say so."""
        where = f"conv {self._name(name)}"
        (n, c, h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self._conv_window(
            where, x, out_channels, groups, kernel, stride, padding, dilation, "dilation")
        if dh < 1 or dw < 1:
            raise GraphError(f"{where}: dilation {dh}x{dw}: give whole numbers >= 1")
        ho, wo = _conv_out(h, kh, sh, ph, dh), _conv_out(w, kw, sw, pw, dw)
        if ho <= 0 or wo <= 0:  # checked before the weight is added: a refused op leaves the graph as it was
            raise GraphError(f"{where}: kernel {kh}x{kw} (dilation {dh}x{dw}) too large for input {h}x{w}")
        with self.scope(name):
            wt = self.weight("weight", (out_channels, c // groups, kh, kw), self.dtype_of(x))
            y = self._one("conv2d", [x, wt], (n, out_channels, ho, wo), conv_attrs(kernel, sh, padding, groups, dilation),
                          dtype=_amp_output_dtype(self.dtype_of(x)))
            if bias:
                y = self.add(y, self.weight("bias", (1, out_channels, 1, 1), self.dtype_of(y)))
        return y

    def conv_transpose2d(self, x: str, out_channels: int, kernel, stride=1, padding=0, output_padding=0,
                         groups: int = 1, bias: bool = False, name: str = "conv_transpose") -> str:
        """2-D transposed convolution, NCHW (PyTorch's ``ConvTranspose2d``, Keras' ``Conv2DTranspose``):
        the output is ``(H - 1) x stride - 2 x padding + kernel + output_padding`` high (and wide).

        It is the input gradient of the convolution that maps the output back to ``x``, and poplin
        runs it as one: a convolution over the output's field of ``x`` dilated by the stride, whose
        AMP worklists skip the dilation zeros (``ConvVertices.cpp``: the nx1 vertex's output stride
        is the input dilation). So it is the graph op ``conv2d_grad_input`` of that convolution, its
        weights ``(in_channels, out_channels / groups, kh, kw)`` as PyTorch stores them."""
        where = f"conv_transpose {self._name(name)}"
        (n, c, h, w), (kh, kw), (sh, sw), (ph, pw), (oh, ow) = self._conv_window(
            where, x, out_channels, groups, kernel, stride, padding, output_padding, "output_padding")
        if not (0 <= oh < sh and 0 <= ow < sw):
            raise GraphError(f"{where}: output_padding ({oh}, {ow}) must be smaller than the stride {sh}")
        ho, wo = (h - 1) * sh - 2 * ph + kh + oh, (w - 1) * sw - 2 * pw + kw + ow
        if ho <= 0 or wo <= 0:
            raise GraphError(f"{where}: padding {ph}x{pw} leaves no output from input {h}x{w}")
        with self.scope(name):
            wt = self.weight("weight", (c, out_channels // groups, kh, kw), self.dtype_of(x))
            attrs = transposed_conv_attrs(n, c, out_channels, (h, w), kernel, sh, padding, groups)
            y = self._one("conv2d_grad_input", [x, wt], (n, out_channels, ho, wo), attrs,
                          dtype=_amp_output_dtype(self.dtype_of(x)))
            if bias:
                y = self.add(y, self.weight("bias", (1, out_channels, 1, 1), self.dtype_of(y)))
        return y

    # --- element-wise -------------------------------------------------------------------
    def _binary(self, kind: str, a: str, b: str, name: str | None) -> str:
        shape = _broadcast(self.shape(a), self.shape(b), f"{kind} {self._name(name or kind)}")
        return self._one(kind, [a, b], shape, name=name)

    def add(self, a: str, b: str, name: str | None = None) -> str:
        return self._binary("add", a, b, name)

    def sub(self, a: str, b: str, name: str | None = None) -> str:
        return self._binary("sub", a, b, name)

    def mul(self, a: str, b: str, name: str | None = None) -> str:
        return self._binary("mul", a, b, name)

    def div(self, a: str, b: str, name: str | None = None) -> str:
        return self._binary("div", a, b, name)

    def unary(self, kind: str, x: str, name: str | None = None, **attrs) -> str:
        return self._one(kind, [x], self.shape(x), attrs, name)

    def relu(self, x: str, name: str | None = None) -> str:
        return self.unary("relu", x, name)

    def gelu(self, x: str, name: str | None = None) -> str:
        """GELU in the builder's form (``gelu`` of :meth:`__init__`); ``"gelu"`` in ``fp32_kinds`` keeps either
        in float32."""
        return self._fp32_island("gelu", x, lambda v: self.unary(self.gelu_kind, v, name))

    def tanh(self, x: str, name: str | None = None) -> str:
        return self.unary("tanh", x, name)

    def sigmoid(self, x: str, name: str | None = None) -> str:
        return self.unary("sigmoid", x, name)

    def swish(self, x: str, name: str | None = None) -> str:
        """``x * sigmoid(x)`` (SiLU) as one non-linearity (popnn's SWISH)."""
        return self.unary("swish", x, name)

    def scale(self, x: str, factor: float, name: str | None = None) -> str:
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) and not _is_whole(factor):
            raise GraphError(f"scale {self._name(name or 'scale')}: factor {factor!r}: give a number")
        return self.unary("scale", x, name, factor=factor)

    def dropout(self, x: str, p: float, name: str | None = None) -> str:
        """Dropout with probability ``p`` (0 to 1) of zeroing an element."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise GraphError(f"dropout {self._name(name or 'dropout')}: p {p!r}: give a probability from 0 to 1")
        return self.unary("dropout", x, name, p=p)

    def cast(self, x: str, dtype: str, name: str | None = None) -> str:
        return self._one("cast", [x], self.shape(x), {"to": canonical_dtype(dtype)}, name,
                         canonical_dtype(dtype))

    # --- normalisations and reductions --------------------------------------------------
    def softmax(self, x: str, axis: int = -1, name: str | None = None, **attrs) -> str:
        rank = len(self.shape(x))
        if not isinstance(axis, int) or not -rank <= axis < rank:
            raise GraphError(f"softmax {self._name(name or 'softmax')!r}: axis {axis!r} is not a dimension of {x!r} "
                             f"(shape {self.shape(x)}); give one in {-rank}..{rank - 1}")
        return self._one("softmax", [x], self.shape(x), {"axis": axis, **attrs}, name)

    def layernorm(self, x: str, eps: float = 1e-5, name: str = "layernorm") -> str:
        if not self.shape(x):
            raise GraphError(f"layernorm {self._name(name)}: {x!r} has no dimensions to normalise")
        h = self.shape(x)[-1]
        with self.scope(name):
            def norm(v: str) -> str:
                g = self.weight("gamma", (h,), self.dtype_of(v))
                b = self.weight("beta", (h,), self.dtype_of(v))
                return self._one("layernorm", [v, g, b], self.shape(v), {"eps": eps})
            return self._fp32_island("layernorm", x, norm)

    def _fp32_island(self, kind: str, x: str, build) -> str:
        """``build(x)``, run in float32 between two casts when ``kind`` is one of :attr:`fp32_kinds`
        and ``x`` is float16."""
        if kind not in self.fp32_kinds or self.dtype_of(x) != "float16":
            return build(x)
        return self.cast(build(self.cast(x, "float32", name=f"{kind}_to_fp32")), "float16", name=f"{kind}_to_fp16")

    def batchnorm(self, x: str, name: str = "bn", replica_group_size: int = 1) -> str:
        """Batch norm of NCHW ``x`` over N, H, W per channel. ``replica_group_size`` > 1: in
        training the statistics span that many adjacent replicas (distributed batch norm, as
        TensorFlow's ``number_of_distributed_batch_norm_replicas`` runs poplibs'
        ``distributedBatchNormStatistics`` / ``Gradients``): the schedule adds each group's
        all-reduce of the per-channel sums after the op and after its gradient. How the statistics
        are estimated is the run's (``Options.enableStableNorm``)."""
        if len(self.shape(x)) < 2:
            raise GraphError(f"batchnorm {self._name(name)}: expected an (N, C, ...) input, got {x!r} of shape "
                             f"{self.shape(x)}")
        c = self.shape(x)[1]
        if not isinstance(replica_group_size, int) or isinstance(replica_group_size, bool) or replica_group_size < 1:
            raise GraphError(f"batchnorm {self._name(name)}: replica_group_size must be a whole number >= 1, "
                             f"got {replica_group_size!r}")
        attrs = {"replica_group_size": replica_group_size} if replica_group_size > 1 else None
        with self.scope(name):
            g = self.weight("gamma", (c,), self.dtype_of(x))
            b = self.weight("beta", (c,), self.dtype_of(x))
            self.constant("running_mean", (c,), "float32")
            self.constant("running_var", (c,), "float32")
            return self._one("batchnorm", [x, g, b], self.shape(x), attrs)

    def group_norm(self, x: str, groups: int, eps: float = 1e-5, name: str = "gn") -> str:
        """Group normalisation of NCHW ``x``: statistics over each sample's ``groups`` groups of
        channels, then a per-channel scale (``gamma``) and shift (``beta``), as popnn's group norm."""
        if len(self.shape(x)) < 2:
            raise GraphError(f"group_norm {self._name(name)}: expected an (N, C, ...) input, got {x!r} of shape "
                             f"{self.shape(x)}")
        c = self.shape(x)[1]
        if groups < 1 or c % groups:
            raise GraphError(f"group_norm {self._name(name)}: {c} channels do not split into {groups} groups")
        with self.scope(name):
            g = self.weight("gamma", (c,), self.dtype_of(x))
            b = self.weight("beta", (c,), self.dtype_of(x))
            return self._one("groupnorm", [x, g, b], self.shape(x), {"groups": groups, "eps": eps})

    def reduce(self, x: str, axes: Sequence[int], kind: str = "reduce_sum", keepdims: bool = False,
               name: str | None = None, **attrs) -> str:
        shape = self.shape(x)
        where = f"{kind} {self._name(name or kind)}"
        normalised = [_axis(where, a, shape) for a in axes]
        if len(set(normalised)) != len(normalised):
            raise GraphError(f"{where}: axes {list(axes)} name a dimension of {x!r} (shape {shape}) twice")
        axes = sorted(a % len(shape) for a in axes)
        out = [1 if i in axes else d for i, d in enumerate(shape)] if keepdims else \
              [d for i, d in enumerate(shape) if i not in axes]
        return self._one(kind, [x], tuple(out) or (1,), {"axes": axes, "keepdims": keepdims} | attrs, name)

    # --- pooling ------------------------------------------------------------------------
    def pool(self, x: str, kind: str, kernel, stride, padding=0, name: str | None = None) -> str:
        """A 2-D pooling window; ``kernel``, ``stride`` and ``padding`` one int or a (height, width) pair."""
        where = kind if name is None else f"{kind} {name}"
        _rank(where, x, self.shape(x), 4, "NCHW")
        n, c, h, w = self.shape(x)
        _window(where, kernel, stride, padding)
        (kh, kw), (sh, sw), (ph, pw) = (spatial(v, f"{where}: {what}") for v, what in
                                        ((kernel, "kernel"), (stride, "stride"), (padding, "padding")))
        ho, wo = _conv_out(h, kh, sh, ph), _conv_out(w, kw, sw, pw)
        if ho <= 0 or wo <= 0:
            raise GraphError(f"{where}: kernel {kh}x{kw} with padding {ph}x{pw} too large for input {h}x{w}")
        return self._one(kind, [x], (n, c, ho, wo), {"kernel": spatial_attr(kernel), "stride": spatial_attr(stride),
                                                     "padding": spatial_attr(padding)}, name)

    def maxpool(self, x: str, kernel: int, stride: int, padding: int = 0, name: str | None = None) -> str:
        return self.pool(x, "maxpool", kernel, stride, padding, name)

    def global_avgpool(self, x: str, name: str | None = None) -> str:
        _rank(f"global_avgpool {self._name(name or 'avgpool')}", x, self.shape(x), 4, "NCHW")
        n, c, h, w = self.shape(x)
        return self._one("avgpool", [x], (n, c), {"kernel": h, "stride": h, "padding": 0}, name)

    # --- data movement ------------------------------------------------------------------
    def embedding(self, ids: str, table: str, name: str | None = None) -> str:
        """Gather rows of ``table`` (vocab, hidden) at integer ``ids``."""
        where = f"embedding {self._name(name or 'gather')}"
        if self.dtype_of(ids) not in INTEGER_DTYPES:
            raise GraphError(f"{where}: ids {ids!r} are {self.dtype_of(ids)}; give integer ids "
                             f"({', '.join(INTEGER_DTYPES)})")
        if not self.shape(table):
            raise GraphError(f"{where}: table {table!r} has no rows")
        return self._one("gather", [ids, table], self.shape(ids) + self.shape(table)[1:], name=name,
                         dtype=self.dtype_of(table))

    def reshape(self, x: str, shape: Sequence[int], name: str | None = None) -> str:
        shape = tuple(shape)
        if math.prod(shape) != math.prod(self.shape(x)):
            raise GraphError(f"reshape {self._name(name or 'reshape')}: {self.shape(x)} -> {shape} changes the size")
        return self._one("reshape", [x], shape, name=name)

    def transpose(self, x: str, perm: Sequence[int], name: str | None = None) -> str:
        s = self.shape(x)
        where = f"transpose {self._name(name or 'transpose')}"
        axes = [_axis(where, p, s, "perm entry") for p in perm]
        if sorted(axes) != list(range(len(s))):
            raise GraphError(f"{where}: perm {list(perm)} is not a permutation of the {len(s)} dimensions of {x!r} "
                             f"(shape {s})")
        return self._one("transpose", [x], tuple(s[p] for p in axes), {"perm": list(perm)}, name)

    def remap(self, x: str, inplace: bool = False, name: str | None = None) -> str:
        """``x`` copied into a new tile layout: a Poplar Copy between two mappings of one tensor,
        every tile receiving its share through the exchange (what a layout custom op does, such as
        the RemapCE of Graphcore's Swin port: ``custom_ops/remap_tensor_ce.cpp``). Its gradient is
        remapped the same way. ``inplace``: the forward keeps ``x``'s layout (PopART runs the op in
        place, a view: RemapCE's ``fwd_clone_layout``) and only the gradient is copied."""
        return self._one("remap_inplace" if inplace else "remap", [x], self.shape(x), name=name)

    def concat(self, xs: Sequence[str], axis: int, name: str | None = None) -> str:
        where = f"concat {self._name(name or 'concat')}"
        if not xs:
            raise GraphError(f"{where}: no tensors to concatenate")
        shapes = [self.shape(x) for x in xs]
        a = _axis(where, axis, shapes[0])
        for x, s in zip(xs, shapes):
            if len(s) != len(shapes[0]) or s[:a] + s[a + 1:] != shapes[0][:a] + shapes[0][a + 1:]:
                raise GraphError(f"{where}: {x!r} of shape {s} does not match {xs[0]!r} of shape {shapes[0]} "
                                 f"but along axis {axis}")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return self._one("concat", list(xs), tuple(out), {"axis": axis}, name)

    def slice(self, x: str, axis: int, start: int, stop: int, name: str | None = None) -> str:
        where = f"slice {self._name(name or 'slice')}"
        size = self.shape(x)[_axis(where, axis, self.shape(x))]
        if not (_is_whole(start) and _is_whole(stop) and 0 <= start < stop <= size):
            raise GraphError(f"{where}: [{start!r}:{stop!r}] along axis {axis} of {x!r} (shape {self.shape(x)}): give "
                             f"0 <= start < stop <= {size}")
        out = list(self.shape(x))
        out[axis] = stop - start
        return self._one("slice", [x], tuple(out), {"axis": axis, "start": start, "stop": stop}, name)

    # --- collectives across replicas (PopXL ops.collectives) --------------------------------
    def _replicated(self, kind: str, x: str, shape, group_stride: int, group_size: int | None,
                    name: str | None) -> str:
        where = f"{kind} {self._name(name or kind)}"
        _whole(where, "group_stride", group_stride, 1)
        if group_size is not None:
            _whole(where, "group_size", group_size, 1)
        return self._one(kind, [x], shape, {"group_stride": group_stride, "group_size": group_size}, name)

    def replicated_all_reduce(self, x: str, group_stride: int = 1, group_size: int | None = None,
                              name: str | None = None) -> str:
        """Sum of ``x`` over the replicas of a group (all replicas when ``group_size`` is None).

        Groups are as PopXL's ``replica_grouping(stride, group_size)``: members ``stride`` apart.
        """
        return self._replicated("replicated_all_reduce", x, self.shape(x), group_stride, group_size, name)

    def replicated_reduce_scatter(self, x: str, shards: int, group_stride: int = 1,
                                  group_size: int | None = None, name: str | None = None) -> str:
        """Each of the ``shards`` replicas of a group gets 1/shards of the sum (flattened)."""
        _whole(f"replicated_reduce_scatter {self._name(name or 'replicated_reduce_scatter')}", "shards", shards, 1)
        n = math.prod(self.shape(x))
        return self._replicated("replicated_reduce_scatter", x, (math.ceil(n / shards),), group_stride,
                                group_size, name)

    def replicated_all_gather(self, x: str, shards: int, group_stride: int = 1,
                              group_size: int | None = None, name: str | None = None) -> str:
        """Every replica of a group gets the concatenation of the ``shards`` replicas' ``x``."""
        _whole(f"replicated_all_gather {self._name(name or 'replicated_all_gather')}", "shards", shards, 1)
        return self._replicated("replicated_all_gather", x, (shards * math.prod(self.shape(x)),),
                                group_stride, group_size, name)

    # --- losses -------------------------------------------------------------------------
    def softmax_cross_entropy(self, logits: str, labels: str, name: str = "loss") -> str:
        """Mean cross-entropy of ``logits`` (..., classes) against integer ``labels`` (an element per
        row of ``logits``), or against soft labels (float probabilities of ``logits``' shape)."""
        sl, sb = self.shape(logits), self.shape(labels)
        hard = self.dtype_of(labels) in INTEGER_DTYPES
        if hard and math.prod(sb) != math.prod(sl[:-1]) or not hard and sb != sl:
            raise GraphError(f"softmax_cross_entropy {self._name(name)}: labels {labels!r} ({self.dtype_of(labels)}, "
                             f"shape {sb}) do not fit logits {logits!r} of shape {sl}: give integer labels of shape "
                             f"{sl[:-1] or (1,)} or float probabilities of shape {sl}")
        out = self._one("softmax_cross_entropy", [logits, labels], (1,), name=name, dtype="float32")
        self.graph.loss = out
        return out

    def recurrent(self, cell: str, x: str, w_input: str, w_recurrent: str, bias: str, h0: str,
                  c0: str | None = None, reset_after: bool = True, name: str | None = None) -> list[str]:
        """One popnn LSTM or GRU layer over a time-major sequence ``x`` (T, B, I), as PopART's LSTM
        and GRU ops run it (sim/cost/rnn.py): ``w_input`` (I, gates x H), ``w_recurrent``
        (H, gates x H), ``bias`` (gates x H for an LSTM, its two biases summed; 2 x gates x H for a
        reset-after GRU, input then recurrent: PyTorch's; gates x H for ONNX's default GRU,
        ``reset_after`` False, whose biases sum), initial states ``h0`` (and ``c0``
        for an LSTM) (B, H). Returns the outputs (T, B, H), the last ``h`` and, for an LSTM, the last
        ``c``. Training adds the intermediates popnn keeps for the backward pass."""
        where = f"{cell} {self._name(name or cell)}"
        if cell not in RNN_GATES:
            raise GraphError(f"{where}: cell {cell!r}: expected one of {', '.join(RNN_GATES)}")
        sx, si, sr, sb, sh = (self.shape(t) for t in (x, w_input, w_recurrent, bias, h0))
        if len(sx) != 3:
            raise GraphError(f"{where}: expected a time-major input (T, B, I), got {sx}")
        (T, B, I), H = sx, sh[-1] if sh else 0
        gates = RNN_GATES[cell] * H
        want = {"w_input": (I, gates), "w_recurrent": (H, gates),
                "bias": (gates * (2 if cell == "gru" and reset_after else 1),),
                "h0": (B, H)} | ({"c0": (B, H)} if cell == "lstm" else {})
        got = {"w_input": si, "w_recurrent": sr, "bias": sb, "h0": sh} | (
            {"c0": self.shape(c0) if c0 else None} if cell == "lstm" else {})
        wrong = [f"{k} {got[k]} (expected {v})" for k, v in want.items() if tuple(got[k] or ()) != v]
        if wrong:
            raise GraphError(f"{where}: {'; '.join(wrong)}")
        states = [(B, H)] * (2 if cell == "lstm" else 1)
        inputs = [x, w_input, w_recurrent, bias, h0] + ([c0] if cell == "lstm" else [])
        attrs = {} if cell == "lstm" or reset_after else {"reset_after": False}
        return self.op(cell, inputs, [(T, B, H)] + states, attrs, name or cell)

    def ctc_loss(self, log_probs: str, targets: str, input_lengths: str, target_lengths: str,
                 reduction: str = "mean", reduced_classes: bool = False, name: str = "loss") -> str:
        """CTC loss of ``log_probs`` ``(T, B, C)`` against padded ``targets`` ``(B, L)``, as popnn
        computes it with its gradient (two outputs: the loss, and the gradient of the
        log-probabilities, which the backward pass scales). ``reduction``: ``"mean"`` (each sequence's
        loss over its target length, then the batch mean: PyTorch's and PopART's), ``"sum"`` or
        ``"none"`` (one per sequence). ``reduced_classes``: PopART's ``enableReducedClassesInLabel``."""
        where = f"ctc_loss {self._name(name)}"
        lp, tg = self.shape(log_probs), self.shape(targets)
        if len(lp) != 3 or len(tg) != 2 or tg[0] != lp[1]:
            raise GraphError(f"{where}: expected log_probs (T, B, C) and padded targets (B, L), got {lp} and {tg}")
        if reduction not in ("mean", "sum", "none"):
            raise GraphError(f"{where}: reduction {reduction!r}: expected 'mean', 'sum' or 'none'")
        shape = (lp[1],) if reduction == "none" else (1,)
        out, _ = self.op("ctc_loss", [log_probs, targets, input_lengths, target_lengths], [shape, lp],
                         {"reduction": reduction, "reduced_classes": bool(reduced_classes)}, name,
                         ["float32", self.dtype_of(log_probs)])
        self.graph.loss = out
        return out

    def mse_loss(self, x: str, target: str, name: str = "loss") -> str:
        _broadcast(self.shape(x), self.shape(target), f"mse_loss {self._name(name)}")
        out = self._one("mse_loss", [x, target], (1,), name=name, dtype="float32")
        self.graph.loss = out
        return out
