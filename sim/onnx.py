"""ONNX models -> sim Graph: ``sim.onnx.load("model.onnx", batch_size=8)``.

The importer reads an ONNX ``ModelProto`` (a file path, its bytes, or the proto), fixes the
symbolic dimensions of the graph inputs (``batch_size`` for a symbolic leading dimension,
``dims={"seq": 128}`` for any other), runs ONNX shape inference, and walks the nodes in order:

* a node whose inputs are all known at import time (initializers that are not weights,
  ``Constant`` nodes, and ``Shape``/``Size`` of any tensor, whose shape is static here) is
  constant-folded with numpy, as PopART folds it: shape subgraphs (``Shape -> Gather ->
  Unsqueeze -> Concat -> Reshape``) cost nothing and appear in no trace;
* every other node goes through a rule (``RULES``, keyed by op type) that emits sim ops of
  kinds the cost model prices (``sim/cost``), with the real shapes and dtypes;
* an op type without a rule raises :class:`sim.UnsupportedOpError` naming the op type and the
  node, and saying how to give it a cost with :func:`register_op`.

Tensors: graph inputs that are not initializers become host-fed inputs, in order; float
initializers with more than one element become weights (trainable), every other initializer
and every folded value a constant (materialised only when a simulated op uses it); graph
outputs become outputs. dtypes follow the model (int64 is int32 on the IPU, float64 float32,
bfloat16 is priced as float16); ``dtype="float16"`` runs every float tensor in half precision.
Node output tensors keep their ONNX names. PopART's node attributes ``__ipu_number``,
``__pipeline_stage``, ``__execution_phase``, ``__recompute_output_in_backward_pass`` and
``__available_memory`` carry over as the op's placement and options.

Give an op type a cost with :func:`register_op`::

    import sim.onnx

    # price com.microsoft's FastGelu as the simulator's gelu (element-wise on its first input)
    sim.onnx.register_op("FastGelu", lambda ctx: ctx.op("gelu", ctx.inputs[:1]))

    # or as a codelet with its own estimate: vertices, worker cycles per vertex
    sim.onnx.register_op("MyOp", lambda ctx: ctx.custom(vertices=ctx.numel(), vertex_cycles=40))

``python -m sim.onnx model.onnx --system ipu-mk2 --batch-size 8`` simulates one call and prints
what ``ipusim run`` prints (see :func:`main`). Details and limits: docs/onnx.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

try:
    import onnx
    from onnx import TensorProto, numpy_helper, shape_inference
except ImportError as _e:  # pragma: no cover - exercised only without the extra
    raise ImportError("sim.onnx needs the onnx package: pip install -e '.[onnx]' (onnx>=1.15)") from _e

from .cost.expressions import EXPRESSIONS
from .errors import GraphError, IpuSimError, OutOfMemoryError, UnsupportedOpError
from .graph.ir import (RNN_GATES, Graph, GraphBuilder, Op, canonical_dtype, conv_attrs, spatial_attr,
                       transposed_conv_attrs)

__all__ = ["RULES", "OpContext", "load", "main", "register_op", "unregister_op"]

# --- registration ---------------------------------------------------------------------------
_REGISTRY: dict[str, object] = {}  # op type -> fn(ctx)


def register_op(op_type: str, fn) -> None:
    """Give ONNX op type ``op_type`` a sim cost: ``fn(ctx: OpContext)`` emits sim ops and
    returns the node's result: one graph tensor name, or a list with one per node output
    (``None`` for an output it does not model).

    The key is the op type whatever its domain (``"FusedMatMul"`` matches
    ``com.microsoft::FusedMatMul``); ``"domain::OpType"`` matches only that domain. A
    registration replaces the built-in rule of the same op type.
    """
    if not callable(fn):
        raise TypeError("register_op: fn must be callable")
    _REGISTRY[str(op_type)] = fn


def unregister_op(op_type: str) -> None:
    """Remove a rule added with :func:`register_op`."""
    _REGISTRY.pop(str(op_type), None)


# --- dtypes ---------------------------------------------------------------------------------
_FLOAT_TYPES = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float32",
                TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "float16"}  # bf16 priced as fp16
_OTHER_TYPES = {TensorProto.INT64: "int32", TensorProto.INT32: "int32", TensorProto.INT16: "int32",
                TensorProto.UINT16: "int32", TensorProto.UINT32: "int32", TensorProto.UINT64: "int32",
                TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.BOOL: "bool"}


def _type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


# --- values ---------------------------------------------------------------------------------
@dataclass
class _Value:
    """What the importer knows of one ONNX tensor."""

    shape: tuple[int, ...]  # the ONNX shape (may be 0-d)
    dtype: str  # the sim dtype
    sim: str | None = None  # the graph tensor, once materialised
    const: np.ndarray | None = None  # the value, when known at import time
    init: object = None  # an initializer not yet read (TensorProto)
    weight: bool = False  # a trainable initializer
    uses: int = 0  # consumers (nodes and graph outputs)
    name: str = ""
    missing: str = ""  # set for a node output its rule does not model: who made it

    @property
    def known(self) -> bool:
        """Known at import time and not a weight: foldable."""
        return not self.weight and (self.const is not None or self.init is not None)


def _sim_shape(shape) -> tuple[int, ...]:
    """A sim shape: 0-d tensors are (1,)."""
    shape = tuple(int(d) for d in shape)
    return shape if shape else (1,)


def _broadcast(*shapes) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise GraphError(f"shapes {', '.join(map(str, shapes))} do not broadcast") from None


def _axis(axis: int, rank: int) -> int:
    return int(axis) + rank if int(axis) < 0 else int(axis)


def _reshape_target(in_shape, target, allowzero: bool = False) -> tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input dim (unless ``allowzero``), -1 is
    inferred."""
    out = [int(in_shape[i]) if (int(d) == 0 and not allowzero) else int(d) for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise GraphError(f"Reshape to {list(target)}: more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(in_shape) // known if known else 0
    if math.prod(out) != math.prod(in_shape):
        raise GraphError(f"Reshape of {tuple(in_shape)} to {list(target)} changes the number of elements")
    return tuple(out)


def _slice_shape(shape, starts, ends, axes, steps) -> tuple[tuple[int, ...], list[tuple[int, int, int, int]]]:
    """Output shape of ONNX Slice and the normalised (axis, start, stop, step) per axis."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else list(steps)
    out, parts = list(shape), []
    for a, s, e, st in zip(axes, starts, ends, steps):
        if int(st) == 0:
            raise GraphError("Slice: a step of 0")
        start, stop, step = slice(int(s), int(max(min(int(e), 2**62), -2**62)), int(st)).indices(shape[a])
        out[a] = len(range(start, stop, step))
        parts.append((a, start, stop, step))
    return tuple(out), parts


def _conv_out(size, k, stride, pad_total, dilation=1, ceil=False) -> int:
    span = size + pad_total - dilation * (k - 1) - 1
    return (math.ceil(span / stride) if ceil else span // stride) + 1


def _pads_2d(ctx: OpContext, h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int]) -> tuple[int, int]:
    """(rows, columns) of symmetric padding from ``pads``/``auto_pad``: the same before and after
    along each axis (or an error naming the pads)."""
    auto = ctx.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return 0, 0
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max((math.ceil(n / s) - 1) * s + k - n, 0) for n, k, s in zip((h, w), kernel, stride)]
        if any(t % 2 for t in totals):
            ctx.unsupported(f"auto_pad={auto} pads {totals[0]} rows and {totals[1]} columns in total here, "
                            "an odd number on one axis (the simulator's conv2d and pools pad each axis the same "
                            "on both sides)")
        return totals[0] // 2, totals[1] // 2
    pads = [int(p) for p in ctx.attr("pads", [0, 0, 0, 0])] or [0, 0, 0, 0]
    if pads[0] != pads[2] or pads[1] != pads[3]:
        ctx.unsupported(f"pads={pads} differ before and after an axis (the simulator's conv2d and pools pad "
                        "each axis the same on both sides)")
    return pads[0], pads[1]


# --- numpy constant folding -----------------------------------------------------------------
def _np_dtype(elem_type: int):
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type)


def _attr_or_input(node_attrs: dict, vals: list, name: str, index: int):
    if name in node_attrs:
        return node_attrs[name]
    if len(vals) > index and vals[index] is not None:
        return [int(v) for v in np.asarray(vals[index]).reshape(-1)]
    return None


def _fold_numpy(op: str, a: dict, v: list, opset: int):
    """A node of constants evaluated with numpy, or None when there is no numpy rule."""
    x = v[0] if v else None
    if op == "Identity":
        return [x]
    if op == "Cast":
        return [np.asarray(x).astype(_np_dtype(a["to"]))]
    if op == "Gather":
        return [np.take(x, np.asarray(v[1]), axis=a.get("axis", 0))]
    if op == "Unsqueeze":
        axes = _attr_or_input(a, v, "axes", 1)
        rank = x.ndim + len(axes)
        out = x
        for ax in sorted(_axis(i, rank) for i in axes):
            out = np.expand_dims(out, ax)
        return [out]
    if op == "Squeeze":
        axes = _attr_or_input(a, v, "axes", 1)
        return [np.squeeze(x, axis=None if axes is None else tuple(_axis(i, x.ndim) for i in axes))]
    if op == "Concat":
        return [np.concatenate([np.atleast_1d(t) if t.ndim == 0 else t for t in v if t is not None],
                               axis=a.get("axis", 0))]
    if op == "Reshape":
        return [np.reshape(x, _reshape_target(x.shape, np.asarray(v[1]).reshape(-1), bool(a.get("allowzero", 0))))]
    if op == "Flatten":
        ax = _axis(a.get("axis", 1), x.ndim)
        return [x.reshape(math.prod(x.shape[:ax]), -1)]
    if op == "Slice":
        if opset < 10:
            starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
        else:
            starts, ends = np.asarray(v[1]).reshape(-1), np.asarray(v[2]).reshape(-1)
            axes = None if len(v) < 4 or v[3] is None else np.asarray(v[3]).reshape(-1)
            steps = None if len(v) < 5 or v[4] is None else np.asarray(v[4]).reshape(-1)
        _, parts = _slice_shape(x.shape, starts, ends, axes, steps)
        index = [slice(None)] * x.ndim
        for ax, s, e, st in parts:
            index[ax] = slice(s, e if e >= 0 else None, st)
        return [x[tuple(index)]]
    if op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    if op == "Expand":
        return [np.broadcast_to(x, _broadcast(x.shape, tuple(np.asarray(v[1]).reshape(-1)))).copy()]
    if op == "ConstantOfShape":
        fill = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        return [np.full(tuple(int(d) for d in np.asarray(x).reshape(-1)), fill.reshape(-1)[0], fill.dtype)]
    if op == "Range":
        return [np.arange(v[0], v[1], v[2]).astype(np.asarray(v[0]).dtype)]
    if op == "Where":
        return [np.where(v[0], v[1], v[2])]
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal, "Less": np.less,
              "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
              "And": np.logical_and, "Or": np.logical_or, "Pow": np.power, "MatMul": np.matmul,
              "Mod": np.fmod if a.get("fmod") else np.mod}
    if op in binary:
        out = binary[op](v[0], v[1])
        return [out.astype(np.asarray(v[0]).dtype) if op in ("Add", "Sub", "Mul", "Pow") else out]
    if op == "Div":
        if np.issubdtype(np.asarray(v[0]).dtype, np.integer):
            return [np.trunc(np.true_divide(v[0], v[1])).astype(np.asarray(v[0]).dtype)]
        return [np.true_divide(v[0], v[1]).astype(np.asarray(v[0]).dtype)]
    if op in ("Max", "Min"):
        f = np.maximum if op == "Max" else np.minimum
        out = v[0]
        for t in v[1:]:
            out = f(out, t)
        return [out]
    unary = {"Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt,
             "Not": np.logical_not, "Exp": np.exp, "Reciprocal": np.reciprocal, "Sign": np.sign}
    if op in unary:
        return [unary[op](x)]
    reduce = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min,
              "ReduceMean": np.mean}
    if op in reduce:
        axes = _attr_or_input(a, v, "axes", 1)
        keep = bool(a.get("keepdims", 1))
        if not axes and a.get("noop_with_empty_axes", 0):
            return [x]
        ax = None if not axes else tuple(_axis(i, x.ndim) for i in axes)
        return [np.asarray(reduce[op](x, axis=ax, keepdims=keep)).astype(x.dtype)]
    return None


# --- the context a rule sees ----------------------------------------------------------------
class OpContext:
    """What a rule sees of one ONNX node, and how it emits sim ops.

    ``node`` is the ``onnx.NodeProto``, ``op_type``/``name``/``domain`` its identity,
    ``builder`` the :class:`sim.GraphBuilder` of the graph being built (its methods add ops
    too). Input ``i`` is described by :meth:`shape`, :meth:`dtype`, :meth:`value` (the numpy
    value when it is known at import time), :meth:`is_weight`, and :meth:`input` (its graph
    tensor, made on first use). Shapes are ONNX shapes (a 0-d tensor has shape ``()``; the
    graph stores it as ``(1,)``).
    """

    def __init__(self, importer: _Importer, node, name: str, ins: list):
        self._imp = importer
        self.node = node
        self.op_type = node.op_type
        self.domain = node.domain or ""
        self.name = name
        self._ins = ins
        self._attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    # --- description --------------------------------------------------------------------
    @property
    def builder(self) -> GraphBuilder:
        return self._imp.b

    @property
    def graph(self) -> Graph:
        return self._imp.g

    @property
    def opset(self) -> int:
        """The opset version of the node's domain."""
        return self._imp.opsets.get(self.domain, self._imp.opsets.get("", 1))

    @property
    def desc(self) -> str:
        op = f"{self.domain}::{self.op_type}" if self.domain not in ("", "ai.onnx") else self.op_type
        return f"ONNX op {op} (node {self.name!r})"

    def attr(self, name: str, default=None):
        """Attribute ``name`` of the node (strings decoded), or ``default``."""
        v = self._attrs.get(name, default)
        if isinstance(v, bytes):
            return v.decode()
        return v

    @property
    def num_inputs(self) -> int:
        return len(self._ins)

    def has_input(self, i: int) -> bool:
        return i < len(self._ins) and self._ins[i] is not None

    def _in(self, i: int) -> _Value:
        if not self.has_input(i):
            raise GraphError(f"{self.desc}: input {i} is missing")
        v = self._ins[i]
        if v.missing:
            raise _not_modelled(v, f"{self.desc} uses it")
        return v

    def shape(self, i: int = 0) -> tuple[int, ...]:
        return self._in(i).shape

    def dtype(self, i: int = 0) -> str:
        return self._in(i).dtype

    def value(self, i: int):
        """The numpy value of input ``i`` when known at import time (None for weights and
        computed tensors)."""
        if not self.has_input(i) or not self._ins[i].known:
            return None
        return self._imp.const_of(self._ins[i])

    def static_value(self, i: int):
        """The numpy value of input ``i`` when it is known at import time or is an initializer (a float
        initializer of several elements is taken as a weight, but an attribute-like input such as
        Resize's scales is one); None otherwise."""
        v = self.value(i)
        if v is None and self.has_input(i) and self._ins[i].init is not None:
            v = numpy_helper.to_array(self._ins[i].init)
        return v

    def is_weight(self, i: int) -> bool:
        return self.has_input(i) and self._ins[i].weight

    def input(self, i: int, role: str | None = None) -> str | None:
        """The graph tensor of input ``i`` (made on first use; None when absent)."""
        if not self.has_input(i):
            return None
        return self._imp.materialise(self._ins[i], role)

    @property
    def inputs(self) -> list[str]:
        """Graph tensors of every present input, in order."""
        return [self.input(i) for i in range(len(self._ins)) if self.has_input(i)]

    @property
    def output_shapes(self) -> list:
        """ONNX shape inference's static shape of each output (None where unknown)."""
        return [self._imp.inferred.get(o, (None, None))[0] if o else None for o in self.node.output]

    def output_shape(self, i: int = 0) -> tuple[int, ...]:
        shape = self.output_shapes[i] if i < len(self.node.output) else None
        if shape is None:
            raise GraphError(
                f"{self.desc}: ONNX shape inference gave no static shape for output {i}; give the "
                "rule explicit shapes (ctx.op(..., shapes=[...])), or static input shapes "
                "(load(..., batch_size=..., dims={...}))")
        return shape

    def output_dtype(self, i: int = 0) -> str | None:
        et = self._imp.inferred.get(self.node.output[i], (None, None))[1] if i < len(self.node.output) else None
        return self._imp.sim_dtype(et, f"output {i} of {self.desc}") if et else None

    def numel(self, i: int = 0) -> int:
        """Elements of output ``i``."""
        return math.prod(self.output_shape(i))

    # --- emitting -----------------------------------------------------------------------
    def op(self, kind: str, inputs: list[str] | None = None, attrs: dict | None = None, *,
           shapes=None, dtypes=None, result: bool = True, outputs: list[int] | None = None,
           suffix: str | None = None):
        """Add one sim op of ``kind``; returns its output tensor name (a list for several).

        ``inputs`` are graph tensor names (default: :attr:`inputs`). With ``result=True``
        (default) the op's outputs are the node's outputs ``outputs`` (indices; default: the
        first ``len(shapes)``, or all): named after them, shaped by ``shapes`` (ONNX shapes;
        default: ONNX shape inference's), typed by ``dtypes`` (default: inference's, else the
        first input's). ``result=False`` adds an intermediate op (``shapes`` required,
        ``suffix`` names it) whose output feeds the rule's later ops.
        """
        imp = self._imp
        n_out = len(self.node.output)
        inputs = self.inputs if inputs is None else list(inputs)
        if result:
            if outputs is None:
                outputs = list(range(len(shapes) if shapes is not None else n_out))
            if shapes is None:
                shapes = [self.output_shape(i) for i in outputs]
            if len(shapes) != len(outputs):
                raise GraphError(f"{self.desc}: {len(shapes)} shapes for outputs {outputs}")
        elif shapes is None:
            raise GraphError(f"{self.desc}: an intermediate op ({kind}) needs shapes=[...]")
        shapes = [tuple(int(d) for d in s) for s in shapes]
        if dtypes is None:
            first = imp.g.tensors[inputs[0]].dtype if inputs else imp.float_dtype("float32")
            dtypes = [(self.output_dtype(outputs[j]) if result else None) or first for j in range(len(shapes))]
        if result:
            for i, s in zip(outputs, shapes):
                inferred = self.output_shapes[i] if i < n_out else None
                if inferred is not None and tuple(inferred) != s:
                    raise GraphError(f"{self.desc}: sim.onnx computed shape {s} for output {i}, ONNX shape "
                                     f"inference {tuple(inferred)}")
            bases = [self.node.output[i] if i < n_out and self.node.output[i] else f"{self.name}:{i}"
                     for i in outputs]
            op_name = self.name
        else:
            label = suffix or kind
            stem = next((o for o in self.node.output if o), self.name)
            bases = [f"{stem}/{label}" + (f":{i}" if len(shapes) > 1 else "") for i in range(len(shapes))]
            op_name = f"{self.name}/{label}"
        names = imp.emit(kind, inputs, shapes, dtypes, attrs or {}, op_name, bases, self)
        return names[0] if len(names) == 1 else names

    def custom(self, vertices: int, vertex_cycles: float, tiles: int | None = None,
               exchange_bytes_per_tile: float = 0, flops: float = 0.0, inputs: list[str] | None = None,
               shapes=None):
        """A ``custom`` op priced by its own estimate: ``vertices`` vertices of
        ``vertex_cycles`` worker cycles each, spread over ``tiles`` tiles (default all)."""
        attrs = {"vertices": int(vertices), "vertex_cycles": float(vertex_cycles),
                 "exchange_bytes_per_tile": float(exchange_bytes_per_tile), "flops": float(flops),
                 "op": f"{self.op_type}"}
        if tiles is not None:
            attrs["tiles"] = int(tiles)
        return self.op("custom", inputs, attrs, shapes=shapes)

    def unsupported(self, why: str = ""):
        raise _unsupported(self, why)


def _not_modelled(v: _Value, where: str) -> UnsupportedOpError:
    return UnsupportedOpError(
        f"sim.onnx: tensor {v.name!r} is {v.missing}, and the simulator's rule does not model it; "
        f"{where}. Give the producer a rule that does with sim.onnx.register_op (see docs/onnx.md)")


#: op types whose outputs are always known at import (shapes, constants)
_ALWAYS_FOLDED = ("Shape", "Size", "Constant")


def _default_domain(node) -> bool:
    return node.domain in ("", "ai.onnx")


def _op_label(node) -> str:
    """``OpType``, or ``domain::OpType`` outside the default ONNX domain."""
    return node.op_type if _default_domain(node) else f"{node.domain}::{node.op_type}"


def _rule_for(node):
    """The rule pricing ``node``: a register_op one (domain-qualified first), else the built-in
    (keyed by op type in the default domain, ``domain::OpType`` in another: PopART's ``ai.graphcore`` ops)."""
    rule = _REGISTRY.get(f"{node.domain}::{node.op_type}") or _REGISTRY.get(node.op_type)
    if rule is not None:
        return rule
    return RULES.get(node.op_type) if _default_domain(node) else RULES.get(f"{node.domain}::{node.op_type}")


def _unsupported(ctx: OpContext, why: str = "") -> UnsupportedOpError:
    reason = f": {why}" if why else ""
    return UnsupportedOpError(
        f"sim.onnx has no cost for {ctx.desc}{reason}. Give it one with "
        f"sim.onnx.register_op({ctx.op_type!r}, fn), where fn(ctx) returns ctx.op(<a sim op kind>, "
        "ctx.inputs) or ctx.custom(vertices=..., vertex_cycles=...) (see docs/onnx.md)")


# --- rules ----------------------------------------------------------------------------------
def _scalar(ctx: OpContext, i: int):
    """Input ``i`` as a Python float when it is a one-element constant, else None."""
    v = ctx.value(i)
    if v is None or np.asarray(v).size != 1:
        return None
    return float(np.asarray(v).reshape(-1)[0])


def _scalar_const(ctx: OpContext, label: str) -> str:
    imp = ctx._imp
    name = imp.g.unique_tensor_name(f"{ctx.name}/{label}")
    imp.g.add_tensor(name, (1,), ctx.dtype(0), "constant")
    return name


def _binary(kind: str):
    def rule(ctx: OpContext):
        out = _broadcast(ctx.shape(0), ctx.shape(1))
        if kind in ("mul", "div"):  # by a constant scalar: one scale op, as PopART's Scale
            for i in ((1, 0) if kind == "mul" else (1,)):
                c = _scalar(ctx, i)
                if c is not None:
                    factor = c if kind == "mul" else (1.0 / c if c else float("inf"))
                    return ctx.op("scale", [ctx.input(1 - i)], {"factor": factor}, shapes=[out],
                                  dtypes=[ctx.dtype(1 - i)])
        return ctx.op(kind, [ctx.input(0), ctx.input(1)], shapes=[out],
                      dtypes=[ctx.dtype(1) if ctx.value(0) is not None else ctx.dtype(0)])
    return rule


def _unary(kind: str, **attrs):
    def rule(ctx: OpContext):
        return ctx.op(kind, [ctx.input(0)], dict(attrs), shapes=[ctx.shape(0)])
    return rule


def _expression(steps: list[str], grad: list[str], onnx_op: str):
    """An op PopART runs as one popops map expression (``steps``: its codelets; ``grad``: those of
    its input gradient's expression)."""
    def rule(ctx: OpContext):
        return ctx.op("map", [ctx.input(0)], {"steps": list(steps), "grad": [list(grad)], "onnx_op": onnx_op},
                      shapes=[ctx.shape(0)])
    return rule


#: PopART's expressions (willow/src/popx/op): SoftPlusOpx max(x, 0) + log(1 + exp(-|x|)) and its gradient
#: sigmoid(x) times dy; HardSigmoidOpx max(0, min(1, alpha x + beta)) and its gradient, dy where the
#: argument is inside (0, 1); HardSwish (ONNX: x times HardSigmoid(x) at alpha 1/6, beta 1/2) as that
#: expression times x
_SOFTPLUS = _expression(["maximum", "abs", "exp", "add", "log", "add"], ["sigmoid", "mul"], "Softplus")
_HARD_SIGMOID = _expression(["mul", "add", "minimum", "maximum"], ["mul", "add", "compare", "mul"], "HardSigmoid")
_HARD_SWISH = _expression(["mul", "add", "minimum", "maximum", "mul"], ["mul", "add", "compare", "mul", "add", "mul"],
                          "HardSwish")


def _compare(ctx: OpContext):
    """A comparison (popops' EQUAL, LESS_THAN, ... binary ops) or a logical op (LOGICAL_AND / OR / XOR,
    LOGICAL_NOT), bool results."""
    out = _broadcast(*[ctx.shape(i) for i in range(ctx.num_inputs)])
    kind = {"Not": "logical_not", "And": "logical", "Or": "logical", "Xor": "logical"}.get(ctx.op_type, "compare")
    return ctx.op(kind, ctx.inputs, {"onnx_op": ctx.op_type}, shapes=[out], dtypes=["bool"])


def _minmax(ctx: OpContext):
    """Element-wise Max / Min of two or more tensors: popops' MAXIMUM / MINIMUM, one binary op per
    further operand (PopART's MaxOpx and MinOpx)."""
    kind = "maximum" if ctx.op_type == "Max" else "minimum"
    ins = ctx.inputs
    y = ins[0]
    shape = ctx.shape(0)
    for i in range(1, len(ins)):
        shape = _broadcast(shape, ctx.shape(i))
        last = i == len(ins) - 1
        y = ctx.op(kind, [y, ins[i]], {"onnx_op": ctx.op_type}, shapes=[shape], result=last,
                   suffix=f"{ctx.op_type.lower()}{i}", dtypes=[ctx.dtype(0)])
    return y


def _where(ctx: OpContext):
    """Where(condition, x, y): popops' Select."""
    out = _broadcast(ctx.shape(0), ctx.shape(1), ctx.shape(2))
    return ctx.op("select", [ctx.input(0), ctx.input(1), ctx.input(2)], {"onnx_op": "Where"}, shapes=[out],
                  dtypes=[ctx.dtype(1) if ctx.value(1) is None else ctx.dtype(2)])


def _neg(ctx: OpContext):
    return ctx.op("scale", [ctx.input(0)], {"factor": -1.0}, shapes=[ctx.shape(0)])


def _reciprocal(ctx: OpContext):
    return ctx.op("div", [_scalar_const(ctx, "one"), ctx.input(0)], shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _sqrt(ctx: OpContext):
    return ctx.op("sqrt", [ctx.input(0)], {"onnx_op": "Sqrt"}, shapes=[ctx.shape(0)])


def _erf(ctx: OpContext):
    # popops' ERF; an exported GELU x * 0.5 * (1 + erf(x / sqrt 2)) stays as its element-wise ops
    return ctx.op("erf", [ctx.input(0)], {"onnx_op": "Erf"}, shapes=[ctx.shape(0)])


def _pow(ctx: OpContext):
    x = ctx.input(0)
    out = _broadcast(ctx.shape(0), ctx.shape(1))
    e = _scalar(ctx, 1)
    if e == 1.0 and out == ctx.shape(0):
        return x
    if e == 2.0:
        return ctx.op("mul", [x, x], shapes=[out])
    if e == 3.0:
        sq = ctx.op("mul", [x, x], shapes=[out], result=False, suffix="square")
        return ctx.op("mul", [sq, x], shapes=[out])
    if e == 0.5:
        return _sqrt(ctx)
    if e == -1.0:
        return _reciprocal(ctx)
    return ctx.op("pow", [x, ctx.input(1)], {"onnx_op": "Pow"}, shapes=[out], dtypes=[ctx.dtype(0)])


def _cast(ctx: OpContext):
    to = ctx.dtype(1) if ctx.op_type == "CastLike" else ctx._imp.sim_dtype(ctx.attr("to"), ctx.desc)
    if to == ctx.dtype(0):
        return ctx.input(0)
    return ctx.op("cast", [ctx.input(0)], {"to": to}, shapes=[ctx.shape(0)], dtypes=[to])


def _identity(ctx: OpContext):
    return ctx.input(0)


def _dropout(ctx: OpContext):
    if ctx.opset >= 12:
        ratio = _scalar(ctx, 1) if ctx.has_input(1) else 0.5
        training = _scalar(ctx, 2) if ctx.has_input(2) else 0.0
        if ctx.has_input(2) and training is None:
            ctx.unsupported("training_mode is computed at run time")
    else:  # opset 7..11: no training flag; an inference graph (PopART runs it as identity)
        ratio, training = float(ctx.attr("ratio", 0.5)), float(not ctx.attr("is_test", 1))
    if not training or not ratio:
        return [ctx.input(0), None]
    return [ctx.op("dropout", [ctx.input(0)], {"p": float(ratio)}, shapes=[ctx.shape(0)]), None]


def _recurrent(ctx: OpContext):
    """ONNX LSTM / GRU as PopART runs them (one popnn layer, ``GraphBuilder.recurrent``): forward
    (a GRU also ``reverse``: PopART reverses the input), the default activations, no clip, no
    peepholes or sequence lengths (PopART refuses peepholes; lstm.cpp); the LSTM's two biases summed
    (lstmx.cpp), the GRU's kept apart when ``linear_before_reset`` (popnn's resetAfter)."""
    cell = ctx.op_type.lower()
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse") or (cell == "lstm" and direction != "forward"):
        ctx.unsupported(f"direction={direction!r} (PopART runs a forward LSTM, a forward or reverse GRU)")
    defaults = {"lstm": ["Sigmoid", "Tanh", "Tanh"], "gru": ["Sigmoid", "Tanh"]}[cell]
    if [a.decode() if isinstance(a, bytes) else a for a in ctx.attr("activations", defaults)] != defaults:
        ctx.unsupported(f"activations={ctx.attr('activations')!r} (popnn's cells run {defaults} only here)")
    for name in ("clip", "input_forget"):
        if ctx.attr(name):
            ctx.unsupported(f"{name}={ctx.attr(name)!r} (not modelled: no clip, no coupled input and forget gates)")
    if int(ctx.attr("layout", 0)):
        ctx.unsupported("layout=1 (batch-major); the simulator takes ONNX's default time-major layout")
    if ctx.has_input(4):
        ctx.unsupported("sequence_lens: variable sequence lengths are not modelled (every step of every sequence runs)")
    if cell == "lstm" and ctx.has_input(7):
        ctx.unsupported("peephole weights P (PopART: 'Popart does not support peephole connections')")
    T, B, I = ctx.shape(0)
    H = int(ctx.attr("hidden_size", ctx.shape(2)[-1]))
    G = RNN_GATES[cell] * H
    reset_after = cell == "gru" and bool(int(ctx.attr("linear_before_reset", 0)))
    x = ctx.input(0)  # reversed, a GRU's input is a view (GruOpx feeds popnn input.reverse(0))
    w_in = ctx._imp.operand(ctx, 1, (I, G), perm=(0, 2, 1))
    w_rec = ctx._imp.operand(ctx, 2, (H, G), perm=(0, 2, 1))
    dt = ctx.dtype(0)
    if not ctx.has_input(3):
        bias = ctx.builder.constant(f"{ctx.name}/bias", (2 * G if reset_after else G,), dt)
    elif reset_after:
        bias = ctx._imp.operand(ctx, 3, (2 * G,))
    else:  # input and recurrent biases summed, as PopART does
        pair = ctx._imp.operand(ctx, 3, (2, G))
        bias = ctx.op("reduce_sum", [pair], {"axes": [0]}, shapes=[(G,)], result=False, suffix="bias")
    states = []
    for i, label in ((5, "h0"), (6, "c0"))[:2 if cell == "lstm" else 1]:
        states.append(ctx._imp.operand(ctx, i, (B, H)) if ctx.has_input(i)
                      else ctx.builder.constant(f"{ctx.name}/{label}", (B, H), dt))
    outs = ctx.builder.recurrent(cell, x, w_in, w_rec, bias, *states, reset_after=reset_after, name=ctx.name)
    # Y (T, 1, B, H), Y_h and Y_c (1, B, H): views of the layer's outputs
    results = [ctx.op("reshape", [outs[0]], shapes=[(T, 1, B, H)], outputs=[0])]
    for k, t in enumerate(outs[1:], start=1):
        if k < len(ctx.node.output) and ctx.node.output[k]:
            results.append(ctx.op("reshape", [t], shapes=[(1, B, H)], outputs=[k]))
        else:
            results.append(None)
    return results


def _matmul_shapes(sa, sb):
    if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:
        raise GraphError(f"inner dimensions do not match: {sa} @ {sb}")
    return _broadcast(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])


def _matmul(ctx: OpContext):
    sa, sb = ctx.shape(0), ctx.shape(1)
    a, b = ctx.input(0), ctx._imp.operand(ctx, 1, sb if len(sb) > 1 else sb + (1,))
    if len(sa) == 1:
        a = ctx.op("reshape", [a], shapes=[(1,) + sa], result=False, suffix="as_row")
    ea, eb = (sa if len(sa) > 1 else (1,) + sa), (sb if len(sb) > 1 else sb + (1,))
    try:
        shape = _matmul_shapes(ea, eb)
    except GraphError as e:
        raise GraphError(f"{ctx.desc}: {e}") from None
    final = shape
    if len(sa) == 1:
        final = final[:-2] + final[-1:]
    if len(sb) == 1:
        final = final[:-1]
    if final == shape:
        return ctx.op("matmul", [a, b], shapes=[shape])
    y = ctx.op("matmul", [a, b], shapes=[shape], result=False)
    return ctx.op("reshape", [y], shapes=[final])


def _gemm(ctx: OpContext):
    sa, sb = ctx.shape(0), ctx.shape(1)
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    m, k = (sa[1], sa[0]) if ta else sa
    k2, n = (sb[1], sb[0]) if tb else sb
    if k != k2:
        raise GraphError(f"{ctx.desc}: inner dimensions do not match: {sa} (transA={ta}) @ {sb} "
                         f"(transB={tb})")
    # a weight operand stored transposed is laid out (in, out) on the IPU, as the zoo's linear
    a = ctx._imp.operand(ctx, 0, (m, k), perm=(1, 0) if ta else None)
    b = ctx._imp.operand(ctx, 1, (k, n), perm=(1, 0) if tb else None)
    has_c = ctx.has_input(2) and beta != 0.0
    steps = 1 + (alpha != 1.0) + has_c
    y = ctx.op("matmul", [a, b], shapes=[(m, n)], result=steps == 1)
    if alpha != 1.0:
        y = ctx.op("scale", [y], {"factor": alpha}, shapes=[(m, n)], result=not has_c, suffix="alpha")
    if has_c:
        c = ctx.input(2)
        if beta != 1.0:
            c = ctx.op("scale", [c], {"factor": beta}, shapes=[ctx.shape(2)], result=False, suffix="beta")
        y = ctx.op("add", [y, c], shapes=[_broadcast((m, n), ctx.shape(2))])
    return y


def _one_stride(ctx: OpContext, dims: int, dilated: bool = False) -> int:
    """The stride of a convolution node with ``dims`` field dimensions: the same along each (the
    simulator's convolutions take one), else a clear refusal; a dilation too unless ``dilated``
    (the rule prices a dilated kernel: :func:`_dilations`)."""
    strides = [int(v) for v in ctx.attr("strides", [1] * dims)]
    if len(set(strides)) > 1:
        ctx.unsupported(f"strides={strides} differ (the simulator's conv2d takes one stride)")
    if not dilated and any(d != 1 for d in ctx.attr("dilations", [1] * dims)):
        ctx.unsupported(f"dilations={list(ctx.attr('dilations'))} (the simulator's transposed convolution has no "
                        "dilation)")
    return strides[0]


def _dilations(ctx: OpContext, dims: int) -> list[int]:
    """The node's kernel dilation per field dimension (1s when it has none)."""
    dilations = [int(v) for v in ctx.attr("dilations", [1] * dims)] or [1] * dims
    if any(d < 1 for d in dilations):
        raise GraphError(f"{ctx.desc}: dilations={dilations}: each must be a whole number >= 1")
    return dilations


def _add_bias(ctx: OpContext, y: str, out, **kw) -> str:
    """``y`` plus the node's bias (input 2: (C,) viewed as (1, C, 1, 1), as the zoo's bias)."""
    return ctx.op("add", [y, ctx._imp.operand(ctx, 2, (1, out[1], 1, 1))], shapes=[out], **kw)


def _conv_field(ctx: OpContext, field, kernel, strides, dilations) -> tuple[int, ...]:
    """A convolution's output field from ONNX's ``auto_pad`` / ``pads`` (each side its own)."""
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return tuple(math.ceil(n / s) for n, s in zip(field, strides))
    pads = [int(p) for p in ctx.attr("pads", [])] if auto != "VALID" else []
    pads = pads or [0] * (2 * len(field))
    return tuple((n + pads[i] + pads[i + len(field)] - d * (k - 1) - 1) // s + 1
                 for i, (n, k, s, d) in enumerate(zip(field, kernel, strides, dilations)))


def _regular_conv(ctx: OpContext, dims: int) -> bool:
    """Can ``conv2d``'s attributes hold this convolution of ``dims`` field dimensions: one stride,
    the same padding before and after each axis?"""
    if len({int(v) for v in ctx.attr("strides", [1] * dims)}) > 1:
        return False
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        field, kernel = ctx.shape(0)[2:], ctx.shape(1)[2:]
        s = int(ctx.attr("strides", [1])[0])
        return all(max((math.ceil(n / s) - 1) * s + k - n, 0) % 2 == 0 for n, k in zip(field, kernel))
    pads = [int(p) for p in ctx.attr("pads", [])] if auto != "VALID" else []
    return not pads or pads[:dims] == pads[dims:]


def _conv_expand_dims(ctx: OpContext):
    """A convolution ``conv2d`` cannot hold (3-D; strides that differ between axes; padding that differs
    before and after an axis) as poplin's expandDims runs it, as sim.poptorch prices such a layer: the
    kernel's positions folded into the input channels (a rearranging ``copy``), then a 1 x 1
    convolution over the output's positions with the layer's multiply-adds."""
    xs, ws = ctx.shape(0), ctx.shape(1)
    (n, c), (co, cig), kernel = xs[:2], ws[:2], tuple(ws[2:])
    dims = len(kernel)
    group = int(ctx.attr("group", 1))
    if cig * group != c:
        raise GraphError(f"{ctx.desc}: weight {ws} with group={group} does not match {c} input channels")
    strides = [int(v) for v in ctx.attr("strides", [1] * dims)]
    out = (n, co) + _conv_field(ctx, xs[2:], kernel, strides, _dilations(ctx, dims))
    positions = math.prod(out[2:])
    expanded = ctx.op("copy", [ctx.input(0)], {"op": "expand_dims", "kernel_shape": list(kernel)},
                      shapes=[(n, c * math.prod(kernel), 1, positions)], result=False, suffix="expand_dims")
    attrs = {"kernel": 1, "stride": 1, "padding": 0, "groups": group, "kernel_shape": list(kernel)}
    y = ctx.op("conv2d", [expanded, ctx._imp.operand(ctx, 1, ws)], attrs, shapes=[(n, co, 1, positions)],
               result=False, suffix="conv")
    if ctx.has_input(2):
        y = _add_bias(ctx, y, (n, co, 1, positions), result=False, suffix="bias")
    return ctx.op("reshape", [y], shapes=[out])


def _conv(ctx: OpContext):
    xs, ws = ctx.shape(0), ctx.shape(1)
    if len(xs) != len(ws) or len(xs) not in (3, 4, 5):
        ctx.unsupported(f"only 1-D, 2-D and 3-D convolutions (NCL / NCHW / NCDHW input, a weight of the same rank) "
                        f"have a rule; input {xs}, weight {ws}")
    if len(xs) == 5 or not _regular_conv(ctx, len(xs) - 2):
        return _conv_expand_dims(ctx)
    if len(xs) == 3:
        return _conv1d(ctx)
    n, c, h, w = xs
    co, cig, kh, kw = ws
    stride, (dh, dw) = _one_stride(ctx, 2, dilated=True), _dilations(ctx, 2)
    group = int(ctx.attr("group", 1))
    if cig * group != c:
        raise GraphError(f"{ctx.desc}: weight {ws} with group={group} does not match {c} input channels")
    ph, pw = _pads_2d(ctx, h, w, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), (stride, stride))
    out = (n, co, _conv_out(h, kh, stride, 2 * ph, dh), _conv_out(w, kw, stride, 2 * pw, dw))
    attrs = conv_attrs((kh, kw), stride, (ph, pw), group, (dh, dw))
    wt = ctx._imp.operand(ctx, 1, ws)
    if not ctx.has_input(2):
        return ctx.op("conv2d", [ctx.input(0), wt], attrs, shapes=[out])
    return _add_bias(ctx, ctx.op("conv2d", [ctx.input(0), wt], attrs, shapes=[out], result=False), out)


def _multiconv(ctx: OpContext):
    """PopART's MultiConv (``ai.graphcore``, ``builder.aiGraphcore.multiconv``): ``numConvs`` 2-D
    convolutions in one poplin multi-convolution (:mod:`sim.cost.multiconv`). As the builder writes
    the node (willow/src/builder.cpp ``AiGraphcoreOpset1::multiconv``): inputs (data, weights, bias
    or "") per convolution; ``strides``, ``pads`` and ``dilations`` flattened, one set per
    convolution; ``availableMemoryProportions`` and ``partialsTypes`` one entry per convolution;
    ``planType``, ``perConvReservedTiles`` and ``cycleBackOff`` for the planner; a dilated kernel
    as :func:`_conv` prices one."""
    n = int(ctx.attr("numConvs", len(ctx.node.output)))
    if n < 1 or len(ctx.node.input) != 3 * n or len(ctx.node.output) != n:
        raise GraphError(f"{ctx.desc}: numConvs {n} needs 3 x {n} inputs (data, weights, bias or \"\" each) and "
                         f"{n} outputs; the node has {len(ctx.node.input)} and {len(ctx.node.output)}")

    def per_conv(name: str, width: int, default: int) -> list[list[int]]:
        flat = [int(v) for v in ctx.attr(name, [])]
        if not flat:
            return [[default] * width for _ in range(n)]
        if len(flat) != n * width:
            raise GraphError(f"{ctx.desc}: {name} has {len(flat)} values, not {width} for each of {n} convolutions")
        return [flat[i * width:(i + 1) * width] for i in range(n)]
    strides, pads, dilations = per_conv("strides", 2, 1), per_conv("pads", 4, 0), per_conv("dilations", 2, 1)
    in_dilations, out_pads = per_conv("inDilations", 2, 1), per_conv("outPads", 4, 0)
    settings = {}
    for attr, key, cast in (("availableMemoryProportions", "available_memory_proportion", float),
                            ("partialsTypes", "partials_type", lambda v: (v.decode() if isinstance(v, bytes)
                                                                         else v).lower())):
        values = [cast(v) for v in ctx.attr(attr, [])]
        if values and len(values) != n:
            raise GraphError(f"{ctx.desc}: {attr} has {len(values)} values for {n} convolutions")
        settings[key] = values
    group = {"multiconv": ctx.name, "multiconv_plan": str(ctx.attr("planType", "parallel")).lower()}
    if ctx.attr("perConvReservedTiles") is not None:
        group["multiconv_reserved_tiles"] = int(ctx.attr("perConvReservedTiles"))
    if ctx.attr("cycleBackOff") is not None:
        group["multiconv_cycle_back_off"] = float(ctx.attr("cycleBackOff"))
    outs = []
    for i in range(n):
        where = f"{ctx.desc}, convolution {i}"
        if len(set(strides[i])) > 1 or min(dilations[i]) < 1 or set(in_dilations[i]) != {1} \
                or set(out_pads[i]) != {0} or pads[i][0] != pads[i][2] or pads[i][1] != pads[i][3]:
            ctx.unsupported(f"{where}: strides {strides[i]}, pads {pads[i]}, dilations {dilations[i]}, inDilations "
                            f"{in_dilations[i]}, outPads {out_pads[i]} (the simulator's conv2d takes one stride, "
                            "the same padding before and after each axis, no input dilation and no output padding)")
        (batch, c, h, w), (co, cig, kh, kw) = ctx.shape(3 * i), ctx.shape(3 * i + 1)
        if c % cig:
            raise GraphError(f"{where}: weight ({co}, {cig}, {kh}, {kw}) does not match {c} input channels")
        stride, (ph, pw), (dh, dw) = strides[i][0], pads[i][:2], dilations[i]
        out = (batch, co, _conv_out(h, kh, stride, 2 * ph, dh), _conv_out(w, kw, stride, 2 * pw, dw))
        attrs = {**conv_attrs((kh, kw), stride, (ph, pw), c // cig, (dh, dw)), **group}
        attrs.update({key: values[i] for key, values in settings.items() if values})
        x, wt = ctx.input(3 * i), ctx._imp.operand(ctx, 3 * i + 1, (co, cig, kh, kw))
        if not ctx.has_input(3 * i + 2):
            outs.append(ctx.op("conv2d", [x, wt], attrs, shapes=[out], outputs=[i]))
            continue
        y = ctx.op("conv2d", [x, wt], attrs, shapes=[out], result=False, suffix=f"conv{i}")
        bias = ctx._imp.operand(ctx, 3 * i + 2, (1, co, 1, 1))
        outs.append(ctx.op("add", [y, bias], shapes=[out], outputs=[i]))
    return outs


def _conv1d(ctx: OpContext):
    """A 1-D Conv as poplin plans it: over its one field dimension, a ``conv2d`` of height 1 with a
    ``1 x k`` kernel here (its planner weighs expandDims, as for any convolution)."""
    (n, c, length), (co, cig, k) = ctx.shape(0), ctx.shape(1)
    stride, (d,) = _one_stride(ctx, 1, dilated=True), _dilations(ctx, 1)
    group = int(ctx.attr("group", 1))
    if cig * group != c:
        raise GraphError(f"{ctx.desc}: weight {(co, cig, k)} with group={group} does not match {c} input channels")
    if ctx.attr("pads", None) is None:  # auto_pad, as a 2-D one of height 1
        _, pad = _pads_2d(ctx, 1, length, (1, d * (k - 1) + 1), (1, stride))
    else:
        pads = [int(p) for p in ctx.attr("pads")]
        if pads[0] != pads[1]:
            ctx.unsupported(f"pads={pads} differ before and after the axis (the simulator's convolutions pad "
                            "each axis the same on both sides)")
        pad = pads[0]
    lout = _conv_out(length, k, stride, 2 * pad, d)
    attrs = conv_attrs((1, k), stride, (0, pad), group, (1, d))
    x = ctx._imp.operand(ctx, 0, (n, c, 1, length))
    wt = ctx._imp.operand(ctx, 1, (co, cig, 1, k))
    y = ctx.op("conv2d", [x, wt], attrs, shapes=[(n, co, 1, lout)], result=False, suffix="conv")
    if ctx.has_input(2):
        y = _add_bias(ctx, y, (n, co, 1, lout), result=False, suffix="bias")
    return ctx.op("reshape", [y], shapes=[(n, co, lout)])


def _conv_transpose_expand_dims(ctx: OpContext):
    """A transposed convolution ``conv2d_grad_input`` cannot hold (1-D or 3-D, strides that differ
    between axes, a dilated kernel) as sim.poptorch prices one: poplin's expandDims over the positions
    of its output (computed over the upsampled input), the kernel folded into the input channels."""
    xs, ws = ctx.shape(0), ctx.shape(1)
    (n, c), (ci, cog), kernel = xs[:2], ws[:2], tuple(ws[2:])
    dims, group = len(kernel), int(ctx.attr("group", 1))
    if ci != c:
        raise GraphError(f"{ctx.desc}: weight {ws} does not match {c} input channels")
    if ctx.output_shapes[0]:
        out = tuple(ctx.output_shapes[0])
    else:  # ONNX's ConvTranspose output size, each side's padding its own
        strides = [int(v) for v in ctx.attr("strides", [1] * dims)]
        extra = [int(v) for v in ctx.attr("output_padding", [0] * dims)]
        pads = [int(p) for p in ctx.attr("pads", [])] or [0] * (2 * dims)
        field = [s * (i - 1) + e + (k - 1) * d + 1 - pads[j] - pads[j + dims]
                 for j, (i, s, e, k, d) in enumerate(zip(xs[2:], strides, extra, kernel, _dilations(ctx, dims)))]
        out = (n, cog * group) + tuple(field)
    positions = math.prod(out[2:])
    expanded = ctx.op("copy", [ctx.input(0)], {"op": "expand_dims", "kernel_shape": list(kernel)},
                      shapes=[(n, c * math.prod(kernel), 1, positions)], result=False, suffix="expand_dims")
    attrs = {"kernel": 1, "stride": 1, "padding": 0, "groups": group, "kernel_shape": list(kernel), "transposed": True}
    y = ctx.op("conv2d", [expanded, ctx._imp.operand(ctx, 1, ws)], attrs, shapes=[(n, out[1], 1, positions)],
               result=False, suffix="conv")
    if ctx.has_input(2):
        y = _add_bias(ctx, y, (n, out[1], 1, positions), result=False, suffix="bias")
    return ctx.op("reshape", [y], shapes=[out])


def _conv_transpose(ctx: OpContext):
    """ConvTranspose (2-D): the input gradient of the convolution mapping its output back to its
    input, as poplin runs it (:meth:`sim.GraphBuilder.conv_transpose2d`); 1-D and 3-D ones, strides
    that differ between axes and dilated kernels by :func:`_conv_transpose_expand_dims`."""
    xs, ws = ctx.shape(0), ctx.shape(1)
    if len(xs) != len(ws) or len(xs) not in (3, 4, 5):
        ctx.unsupported(f"only 1-D, 2-D and 3-D transposed convolutions (a weight of the input's rank) have a rule; "
                        f"input {xs}, weight {ws}")
    if len(xs) != 4 or len({int(v) for v in ctx.attr("strides", [1, 1])}) > 1 \
            or any(d != 1 for d in _dilations(ctx, len(xs) - 2)):
        return _conv_transpose_expand_dims(ctx)
    n, c, h, w = xs
    ci, cog, kh, kw = ws
    group = int(ctx.attr("group", 1))
    if ci != c:
        raise GraphError(f"{ctx.desc}: weight {ws} does not match {c} input channels")
    s, co = _one_stride(ctx, 2), cog * group
    extra = [int(v) for v in ctx.attr("output_padding", [0, 0])]
    full = [(size - 1) * s + k + e for size, k, e in zip((h, w), (kh, kw), extra)]  # the output before cropping
    auto = ctx.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if ctx.attr("output_shape", None) is not None:
        crops = [f - int(o) for f, o in zip(full, list(ctx.attr("output_shape"))[-2:])]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        crops = [f - size * s for f, size in zip(full, (h, w))]
    elif auto == "VALID":
        crops = [0, 0]
    else:
        p4 = [int(v) for v in ctx.attr("pads", [0, 0, 0, 0])] or [0, 0, 0, 0]
        crops = [p4[0] + p4[2], p4[1] + p4[3]]
    # an odd crop is the next even one less an output padding of one: the same convolution
    pads = tuple((t + 1) // 2 for t in crops)
    if any(t < 0 or e + t % 2 >= s for t, e in zip(crops, extra)):
        ctx.unsupported(f"an output of {[f - t for f, t in zip(full, crops)]} from {full} leaves an output "
                        f"padding of stride {s} or more, which a transposed convolution does not have")
    out = (n, co, full[0] - crops[0], full[1] - crops[1])
    attrs = transposed_conv_attrs(n, c, co, (h, w), (kh, kw), s, pads, group)
    wt = ctx._imp.operand(ctx, 1, ws)
    if not ctx.has_input(2):
        return ctx.op("conv2d_grad_input", [ctx.input(0), wt], attrs, shapes=[out])
    return _add_bias(ctx, ctx.op("conv2d_grad_input", [ctx.input(0), wt], attrs, shapes=[out], result=False), out)


def _batchnorm(ctx: OpContext):
    for i in (3, 4):  # running mean and variance: always-live constants, not trained
        ctx.input(i, role="constant")
    y = ctx.op("batchnorm", [ctx.input(0), ctx.input(1), ctx.input(2)],
               {"eps": float(ctx.attr("epsilon", 1e-5))}, shapes=[ctx.shape(0)])
    return [y] + [None] * (len(ctx.node.output) - 1)


def _instancenorm(ctx: OpContext):
    """InstanceNormalization (PopART's InstanceNormOpx: popnn::in, a group norm of one channel a
    group): a norm over each sample's and channel's field, with a scale and bias a channel."""
    xs = ctx.shape(0)
    if len(xs) < 3:
        ctx.unsupported(f"InstanceNormalization of a rank-{len(xs)} input {xs}: expected (N, C, ...)")
    return ctx.op("groupnorm", [ctx.input(0), ctx.input(1), ctx.input(2)],
                  {"groups": int(xs[1]), "eps": float(ctx.attr("epsilon", 1e-5))}, shapes=[xs])


def _layernorm(ctx: OpContext):
    ins = [ctx.input(0), ctx.input(1)] + ([ctx.input(2)] if ctx.has_input(2) else [])
    attrs = {"eps": float(ctx.attr("epsilon", 1e-5))}
    axis = _axis(ctx.attr("axis", -1), len(ctx.shape(0)))
    if axis != len(ctx.shape(0)) - 1:
        attrs["axis"] = axis  # priced over the last dim's rows, the same elements
    y = ctx.op("layernorm", ins, attrs, shapes=[ctx.shape(0)])
    return [y] + [None] * (len(ctx.node.output) - 1)


def _softmax(ctx: OpContext):
    default = -1 if ctx.opset >= 13 else 1
    attrs = {"axis": int(ctx.attr("axis", default))}
    if ctx.op_type == "LogSoftmax":
        attrs["log"] = True  # priced as softmax, as sim.poptorch does
    return ctx.op("softmax", [ctx.input(0)], attrs, shapes=[ctx.shape(0)])


def _nchw(ctx: OpContext) -> tuple[int, int, int, int]:
    """The NCHW input shape of a 2-D pooling node (an error for any other rank)."""
    xs = ctx.shape(0)
    if len(xs) != 4:
        ctx.unsupported(f"only 2-D pooling (NCHW input) has a rule; input {xs}")
    return tuple(xs)


def _pool_nd(ctx: OpContext, kind: str, kernel, strides, out):
    """A 1-D or 3-D pool as sim.poptorch prices MaxPool1d/3d and AvgPool1d/3d: the op with the window's
    and the stride's own volumes (``window``, ``stride_volume``) and the real output shape."""
    window, step = math.prod(kernel), math.prod(strides)
    attrs = {"kernel": max(1, round(math.sqrt(window))), "stride": max(1, round(math.sqrt(step))), "padding": 0,
             "window": int(window), "stride_volume": int(step)}
    return ctx.op(kind, [ctx.input(0)], attrs, shapes=[tuple(out)])


def _pool(kind: str):
    def rule(ctx: OpContext):
        if len(ctx.shape(0)) in (3, 5):
            kernel = [int(k) for k in ctx.attr("kernel_shape")]
            strides = [int(v) for v in ctx.attr("strides", [1] * len(kernel))]
            out = ctx.output_shapes[0] or ctx.shape(0)[:2] + _conv_field(ctx, ctx.shape(0)[2:], kernel, strides,
                                                                         [1] * len(kernel))
            y = _pool_nd(ctx, kind, kernel, strides, out)
            return [y] + [None] * (len(ctx.node.output) - 1)
        n, c, h, w = _nchw(ctx)
        kh, kw = (int(k) for k in ctx.attr("kernel_shape"))
        sh, sw = (int(s) for s in ctx.attr("strides", [1, 1]))
        if any(d != 1 for d in ctx.attr("dilations", [1, 1])):
            ctx.unsupported("dilated pooling has no rule")
        ph, pw = _pads_2d(ctx, h, w, (kh, kw), (sh, sw))
        ceil = bool(ctx.attr("ceil_mode", 0))
        out = ctx.output_shapes[0] if ceil and ctx.output_shapes[0] else \
            (n, c, _conv_out(h, kh, sh, 2 * ph, ceil=ceil), _conv_out(w, kw, sw, 2 * pw, ceil=ceil))
        attrs = {"kernel": spatial_attr((kh, kw)), "stride": spatial_attr((sh, sw)), "padding": spatial_attr((ph, pw))}
        y = ctx.op(kind, [ctx.input(0)], attrs, shapes=[out])
        return [y] + [None] * (len(ctx.node.output) - 1)
    return rule


def _global_pool(kind: str):
    def rule(ctx: OpContext):
        if len(ctx.shape(0)) in (3, 5):
            field = ctx.shape(0)[2:]
            return _pool_nd(ctx, kind, field, field, ctx.shape(0)[:2] + (1,) * len(field))
        n, c, h, w = _nchw(ctx)
        window = spatial_attr((h, w))  # the whole field, read once per output
        return ctx.op(kind, [ctx.input(0)], {"kernel": window, "stride": window, "padding": 0, "global": True},
                      shapes=[(n, c, 1, 1)])
    return rule


def _view(ctx: OpContext, shape: tuple[int, ...]):
    """A change of shape only: a free ``reshape`` (the input itself when nothing changes)."""
    if tuple(shape) == ctx.shape(0):
        return ctx.input(0)
    return ctx.op("reshape", [ctx.input(0)], shapes=[shape])


def _const_ints(ctx: OpContext, i: int, what: str) -> list[int]:
    v = ctx.value(i)
    if v is None:
        ctx.unsupported(f"its {what} (input {i}) is computed at run time; the simulator needs static shapes")
    return [int(d) for d in np.asarray(v).reshape(-1)]


def _axes(ctx: OpContext, index: int, since: int) -> list[int] | None:
    """The ``axes`` of a node: an attribute before opset ``since``, input ``index`` after."""
    if ctx.opset < since or ctx.attr("axes") is not None:
        axes = ctx.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    if ctx.has_input(index):
        return _const_ints(ctx, index, "axes")
    return None


def _reshape(ctx: OpContext):
    target = _const_ints(ctx, 1, "target shape")
    try:
        shape = _reshape_target(ctx.shape(0), target, bool(ctx.attr("allowzero", 0)))
    except GraphError as e:
        raise GraphError(f"{ctx.desc}: {e}. If the exporter baked a traced size into the model, give the "
                         "sizes it was exported with (batch_size=, dims=)") from None
    return _view(ctx, shape)


def _flatten(ctx: OpContext):
    s = ctx.shape(0)
    ax = _axis(ctx.attr("axis", 1), len(s))
    return _view(ctx, (math.prod(s[:ax]), math.prod(s[ax:])))


def _squeeze(ctx: OpContext):
    s = ctx.shape(0)
    axes = _axes(ctx, 1, 13)
    drop = {i for i, d in enumerate(s) if d == 1} if axes is None else {_axis(a, len(s)) for a in axes}
    return _view(ctx, tuple(d for i, d in enumerate(s) if i not in drop))


def _unsqueeze(ctx: OpContext):
    s = list(ctx.shape(0))
    axes = _axes(ctx, 1, 13) or []
    rank = len(s) + len(axes)
    for a in sorted(_axis(a, rank) for a in axes):
        s.insert(a, 1)
    return _view(ctx, tuple(s))


def _resize(ctx: OpContext):
    """Resize (Upsample) as PopART's ResizeOpx runs it, the output shape from the constant ``sizes``
    (input 3) or ``scales`` (input 2; before opset 11, input 1). ``nearest``: a copy of each input
    element to its outputs, as sim.poptorch prices Upsample's nearest mode. ``linear`` (inference only:
    PopART's ResizeGradOpx refuses it): ``resizeLinear``'s copy of the input, then for each resized
    dimension the floor and ceiling neighbours (views) each multiplied by their constant weights along
    that dimension and added. ``cubic`` (PopART's ResizeCubicHelper): sixteen multiply-adds an output
    element, as sim.poptorch prices bicubic upsampling."""
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        ctx.unsupported(f"mode {mode!r}: the nearest, linear and cubic modes have rules")
    xs = ctx.shape(0)
    if ctx.num_inputs > 3 and ctx.has_input(3):
        out = tuple(_const_ints(ctx, 3, "sizes"))
    else:
        i = 1 if ctx.opset < 11 else 2
        v = ctx.static_value(i)
        if v is None:
            ctx.unsupported("its scales or sizes are computed at run time; the simulator needs static shapes")
        out = tuple(int(np.floor(d * s)) for d, s in zip(xs, np.asarray(v, dtype=float).reshape(-1)))
    if len(out) != len(xs):
        ctx.unsupported(f"output shape {out} does not match the input's rank {len(xs)}")
    if mode == "nearest":
        return ctx.op("copy", [ctx.input(0)], {"op": "upsample_nearest", "onnx_op": ctx.op_type}, shapes=[out])
    if mode == "cubic":
        return ctx.op("map", [ctx.input(0)], {"steps": ["mul", "add"], "repeat": 16, "grad": [["mul", "add"]],
                                              "onnx_op": ctx.op_type}, shapes=[out])
    dt, cur = ctx.dtype(0), list(xs)
    resized = [d for d in range(len(xs)) if out[d] != xs[d]]
    y = ctx.op("copy", [ctx.input(0)], {"op": "resize_linear"}, shapes=[xs], dtypes=[dt], result=not resized,
               suffix="copy")
    for d in resized:
        cur[d] = out[d]
        weights = ctx.builder.constant(f"{ctx.name}/weights{d}", tuple(out[d] if i == d else 1 for i in range(len(xs))),
                                       dt)
        ceil = ctx.op("mul", [y, weights], shapes=[tuple(cur)], dtypes=[dt], result=False, suffix=f"ceil{d}")
        floor = ctx.op("mul", [y, weights], shapes=[tuple(cur)], dtypes=[dt], result=False, suffix=f"floor{d}")
        last = d == resized[-1]
        y = ctx.op("add", [floor, ceil], shapes=[tuple(cur)], dtypes=[dt], result=last, suffix=f"sum{d}")
    return y


def _depth_space(ctx: OpContext):
    """DepthToSpace (DCR or CRD mode) and SpaceToDepth as PopART's ONNX pass spells them
    (``onnxpasses/nodepatterns/spacedepth.cpp``): a reshape to six dimensions, a transpose, a reshape
    to the output; the transpose is the one layout change."""
    n, c, h, w = ctx.shape(0)
    r, dt = int(ctx.attr("blocksize")), ctx.dtype(0)
    if ctx.op_type == "SpaceToDepth":
        six, perm, out = (n, c, h // r, r, w // r, r), [0, 3, 5, 1, 2, 4], (n, c * r * r, h // r, w // r)
    elif ctx.attr("mode", "DCR") == "CRD":
        six, perm, out = (n, c // (r * r), r, r, h, w), [0, 1, 4, 2, 5, 3], (n, c // (r * r), h * r, w * r)
    else:
        six, perm, out = (n, r, r, c // (r * r), h, w), [0, 3, 4, 1, 5, 2], (n, c // (r * r), h * r, w * r)
    t = ctx.op("reshape", [ctx.input(0)], shapes=[six], dtypes=[dt], result=False, suffix="blocks")
    moved = tuple(six[p] for p in perm)
    t = ctx.op("transpose", [t], {"perm": perm}, shapes=[moved], dtypes=[dt], result=False, suffix="move")
    return ctx.op("reshape", [t], shapes=[out], dtypes=[dt])


def _topk(ctx: OpContext):
    """TopK: popops' bitonic top-k of each row along ``axis`` with its indices (PopART TopKOpx), as
    sim.poptorch prices ``torch.topk``; K must be a constant."""
    xs = ctx.shape(0)
    axis = _axis(ctx.attr("axis", -1), len(xs))
    k = _const_ints(ctx, 1, "K")[0] if ctx.opset >= 10 else int(ctx.attr("k"))
    out = tuple(k if d == axis else s for d, s in enumerate(xs))
    attrs = {"axis": axis, "op": "topk", "k": k, "onnx_op": "TopK"}
    return ctx.op("sort", [ctx.input(0)], attrs, shapes=[out, out], dtypes=[ctx.dtype(0), "int32"])


def _cumsum(ctx: OpContext):
    """CumSum (PopART CumSumOpx, as sim.poptorch prices ``torch.cumsum``): the scanned axis moved last,
    then a matmul of the rows by a constant (n, n) triangular matrix, and moved back; ``exclusive``
    and ``reverse`` change only the constant."""
    xs = ctx.shape(0)
    axis = _axis(_const_ints(ctx, 1, "axis")[0], len(xs))
    dt, n = ctx.dtype(0), xs[axis]
    perm = list(range(len(xs)))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = tuple(xs[p] for p in perm)
    x = ctx.input(0)
    if perm != sorted(perm):
        x = ctx.op("transpose", [x], {"perm": perm}, shapes=[moved], dtypes=[dt], result=False, suffix="to_last")
    rows = math.prod(moved[:-1])
    flat = ctx.op("reshape", [x], shapes=[(rows, n)], dtypes=[dt], result=False, suffix="rows")
    tri = ctx.builder.constant(f"{ctx.name}/triangular", (n, n), dt)
    y = ctx.op("matmul", [flat, tri], shapes=[(rows, n)], dtypes=[dt], result=False, suffix="scan")
    if perm == sorted(perm):
        return ctx.op("reshape", [y], shapes=[xs], dtypes=[dt])
    y = ctx.op("reshape", [y], shapes=[moved], dtypes=[dt], result=False, suffix="unflatten")
    return ctx.op("transpose", [y], {"perm": perm}, shapes=[xs], dtypes=[dt])


def _expand(ctx: OpContext):
    # a broadcast view: free in Poplar until an op reads it (the consumer pays per element)
    return _view(ctx, _broadcast(ctx.shape(0), tuple(_const_ints(ctx, 1, "shape"))))


def _transpose(ctx: OpContext):
    s = ctx.shape(0)
    perm = [int(p) for p in ctx.attr("perm", list(range(len(s)))[::-1])]
    out = tuple(s[p] for p in perm)
    moved = [p for i, p in enumerate(perm) if p != i]
    if all(s[p] == 1 for p in moved):  # only size-1 dims move: a reshape, no data moves
        return _view(ctx, out)
    return ctx.op("transpose", [ctx.input(0)], {"perm": perm}, shapes=[out])


def _concat(ctx: OpContext):
    rank = len(ctx.shape(0))
    axis = _axis(ctx.attr("axis"), rank)
    live = [i for i in range(ctx.num_inputs) if ctx.has_input(i) and ctx.shape(i)[axis] > 0]
    out = list(ctx.shape(live[0]))
    out[axis] = sum(ctx.shape(i)[axis] for i in live)
    if len(live) == 1:
        return ctx.input(live[0])
    return ctx.op("concat", [ctx.input(i) for i in live], {"axis": axis}, shapes=[tuple(out)])


def _slice(ctx: OpContext):
    s = ctx.shape(0)
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        starts, ends = _const_ints(ctx, 1, "starts"), _const_ints(ctx, 2, "ends")
        axes = _const_ints(ctx, 3, "axes") if ctx.has_input(3) else None
        steps = _const_ints(ctx, 4, "steps") if ctx.has_input(4) else None
    out, parts = _slice_shape(s, starts, ends, axes, steps)
    if out == s and all(st == 1 for *_, st in parts):
        return ctx.input(0)
    if len(parts) == 1 and parts[0][3] == 1:
        a, start, stop, _ = parts[0]
        attrs = {"axis": a, "start": start, "stop": stop}
    else:
        attrs = {"slices": [list(p) for p in parts]}
    return ctx.op("slice", [ctx.input(0)], attrs, shapes=[out])


def _split(ctx: OpContext):
    s = ctx.shape(0)
    axis = _axis(ctx.attr("axis", 0), len(s))
    n = len(ctx.node.output)
    if ctx.attr("split") is not None:
        sizes = [int(v) for v in ctx.attr("split")]
    elif ctx.opset >= 13 and ctx.has_input(1):
        sizes = _const_ints(ctx, 1, "split sizes")
    else:
        n = int(ctx.attr("num_outputs", n))
        size = math.ceil(s[axis] / n)
        sizes = [min(size, s[axis] - i * size) for i in range(n)]
    outs, start = [], 0
    for i, size in enumerate(sizes):
        shape = s[:axis] + (size,) + s[axis + 1:]
        name = ctx.node.output[i] if i < len(ctx.node.output) else ""
        if name:
            outs.append(ctx.op("slice", [ctx.input(0)], {"axis": axis, "start": start, "stop": start + size},
                               shapes=[shape], outputs=[i]))
        else:
            outs.append(None)
        start += size
    return outs


def _gather(ctx: OpContext):
    ds, ids = ctx.shape(0), ctx.shape(1)
    axis = _axis(ctx.attr("axis", 0), len(ds))
    out = ds[:axis] + ids + ds[axis + 1:]
    table = ctx._ins[0]
    stored = table.init is not None or table.const is not None or (
        table.sim is not None and ctx.graph.tensors[table.sim].role in ("weight", "constant"))
    if axis == 0 and stored:
        # a lookup in an initializer (or constant): an embedding (multiSlice); a float table is a weight
        return ctx.op("gather", [ctx.input(1), ctx.input(0)], shapes=[out], dtypes=[ctx.dtype(0)])
    idx = ctx.value(1)
    if idx is not None:  # constant indices into a computed tensor
        flat = np.asarray(idx).reshape(-1) % ds[axis]
        if flat.size and np.all(np.diff(flat) == 1):  # one index or a contiguous range: a view
            sliced = ds[:axis] + (int(flat.size),) + ds[axis + 1:]
            attrs = {"axis": axis, "start": int(flat[0]), "stop": int(flat[-1]) + 1}
            if sliced == out:
                return ctx.op("slice", [ctx.input(0)], attrs, shapes=[out])
            y = ctx.op("slice", [ctx.input(0)], attrs, shapes=[sliced], result=False)
            return ctx.op("reshape", [y], shapes=[out])
        return ctx.op("copy", [ctx.input(0)], {"onnx_op": "Gather", "axis": axis}, shapes=[out])
    # computed indices into a computed tensor: data movement, priced as a copy of the result
    return ctx.op("copy", [ctx.input(0), ctx.input(1)], {"onnx_op": "Gather", "axis": axis}, shapes=[out],
                  dtypes=[ctx.dtype(0)])


def _reduce(kind: str):
    def rule(ctx: OpContext):
        s = ctx.shape(0)
        since = 13 if ctx.op_type == "ReduceSum" else 18
        axes = _axes(ctx, 1, since)
        keep = bool(ctx.attr("keepdims", 1))
        if not axes:
            if ctx.attr("noop_with_empty_axes", 0):
                return ctx.input(0)
            axes = list(range(len(s)))
        axes = sorted({_axis(a, len(s)) for a in axes})
        out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
            tuple(d for i, d in enumerate(s) if i not in axes)
        return ctx.op(kind, [ctx.input(0)], {"axes": axes, "keepdims": keep}, shapes=[out])
    return rule


def _clip(ctx: OpContext):
    """Clip: popops' Clamp of the input between its min and max (PopART's ClipOpx); a bound not given
    is a constant."""
    bounds = [ctx.input(i) if ctx.has_input(i) else _scalar_const(ctx, label) for i, label in ((1, "min"), (2, "max"))]
    return ctx.op("clamp", [ctx.input(0)] + bounds, {"onnx_op": "Clip"}, shapes=[ctx.shape(0)], dtypes=[ctx.dtype(0)])


def _cross_entropy(ctx: OpContext):
    s = ctx.shape(0)
    reduction = ctx.attr("reduction", "mean")
    out = () if reduction in ("mean", "sum") else (s[0],) + s[2:]
    ins = [ctx.input(0), ctx.input(1)] + ([ctx.input(2)] if ctx.has_input(2) else [])
    label = "nll" if ctx.op_type == "NegativeLogLikelihoodLoss" else "cross_entropy"
    # NLL of log-probabilities is priced as the simulator's softmax cross-entropy, as in sim.poptorch
    loss = ctx.op("softmax_cross_entropy", ins, {"loss": label, "reduction": reduction}, shapes=[out],
                  dtypes=["float32"], outputs=[0])
    if len(ctx.node.output) > 1 and ctx.node.output[1]:  # the log-probabilities, when the model uses them
        return [loss, ctx.op("softmax", [ctx.input(0)], {"axis": 1, "log": True}, shapes=[s], outputs=[1])]
    return loss


# --- more of PopART's element-wise, reduction and data-movement ops -------------------------------
#: ONNX ops PopART runs as one popops unary codelet, and the graph kind of that codelet
_UNARY_KINDS = {"Abs": "abs", "Ceil": "ceil", "Floor": "floor", "Round": "round", "Sign": "sign", "Log": "log",
                "Sin": "sin", "Cos": "cos", "Asin": "asin", "IsNaN": "isnan", "IsInf": "isnan",
                "BitwiseNot": "bitwise_not"}
#: ONNX ops PopART runs as one popops map expression, by their name in sim.cost.expressions
_EXPRESSION_OPS = {"Elu": "elu", "Selu": "selu", "Softsign": "softsign", "ThresholdedRelu": "threshold",
                   "Shrink": "softshrink", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh"}


def _named_expression(ctx: OpContext):
    steps, grad = EXPRESSIONS[_EXPRESSION_OPS[ctx.op_type]]
    return _expression(steps, grad, ctx.op_type)(ctx)


def _trig(ctx: OpContext):
    """Tan, Asinh, Acosh, Acos, Atanh as PopART's ONNX pass rewrites them into other ops
    (``onnxpasses/nodepatterns/trig.cpp``), each its own compute set: Tan = Sin / Cos; Asinh =
    log(x + sqrt(x² + 1)), Acosh with x² - 1; Acos = pi/2 - Asin; Atanh = log((1 + x) / (1 - x)) / 2."""
    x, xs, dt, op = ctx.input(0), ctx.shape(0), ctx.dtype(0), ctx.op_type
    steps = []

    def step(kind, ins, last=False, attrs=None):
        steps.append(kind)
        return ctx.op(kind, ins, dict(attrs or {}, onnx_op=op), shapes=[xs], dtypes=[dt], result=last,
                      suffix=f"{kind}{len(steps)}")
    one = _scalar_const(ctx, "one")
    if op == "Tan":
        return step("div", [step("sin", [x]), step("cos", [x])], True)
    if op in ("Asinh", "Acosh"):
        root = step("sqrt", [step("add" if op == "Asinh" else "sub", [step("square", [x]), one])])
        return step("log", [step("add", [x, root])], True)
    if op == "Acos":
        return step("sub", [_scalar_const(ctx, "half_pi"), step("asin", [x])], True)
    ratio = step("div", [step("add", [one, x]), step("sub", [one, x])])
    return step("scale", [step("log", [ratio])], True, {"factor": 0.5})


def _lrn(ctx: OpContext):
    """LRN as PopART's LRNOpx runs it: x squared, a copy of the squares, then for each of the window's
    other ``size - 1`` channel offsets an in-place add of the squares shifted along the channels, one map
    of ``bias + alpha / size * sum`` and one of ``x * scale ^ -beta``."""
    x, xs, dt = ctx.input(0), ctx.shape(0), ctx.dtype(0)
    size, channels = int(ctx.attr("size")), xs[1]
    left = (size - 1) // 2
    square = ctx.op("square", [x], shapes=[xs], dtypes=[dt], result=False, suffix="square")
    total = ctx.op("copy", [square], shapes=[xs], dtypes=[dt], result=False, suffix="sum")
    for i in range(-left, size - left):
        width = channels - abs(i)
        if i == 0 or width <= 0:
            continue
        shifted = (xs[0], width) + tuple(xs[2:])
        total = ctx.op("add", [total, square], shapes=[shifted], dtypes=[dt], result=False, suffix=f"add{i + left}")
    scale = ctx.op("map", [total], {"steps": ["mul", "add"], "grad": [["mul"]]}, shapes=[xs], dtypes=[dt],
                   result=False, suffix="scale")
    return ctx.op("map", [x, scale], {"steps": ["pow", "mul"], "grad": [["pow", "mul"], ["pow", "mul", "mul"]],
                                      "onnx_op": "LRN"}, shapes=[xs], dtypes=[dt])


#: ONNX ops PopART has no op for (none in willow/src/op, no ONNX pass rewrites them)
_NOT_IN_POPART = ("Einsum", "GatherND", "ScatterND", "NonZero", "Compress", "Unique", "Celu", "Mish", "Hardmax",
                  "MeanVarianceNormalization", "EyeLike", "Det", "ReverseSequence", "Trilu", "Range")


def _not_in_popart(ctx: OpContext):
    ctx.unsupported(f"PopART has no {ctx.op_type} op (no op of that type in PopART's willow/src/op, nor an ONNX "
                    "pass that rewrites it), so the model would not compile there"
                    + ("; an output shape that depends on the values cannot be planned either"
                       if ctx.op_type in ("NonZero", "Compress", "Unique") else "")
                    + ("; folded when its inputs are constants" if ctx.op_type in ("Trilu", "Range", "EyeLike") else ""))


def _binary_kind(kind: str):
    """A two-operand op with a popops codelet of its own (Mod: remainder; the bitwise ops)."""
    def rule(ctx: OpContext):
        return ctx.op(kind, [ctx.input(0), ctx.input(1)], {"onnx_op": ctx.op_type},
                      shapes=[_broadcast(ctx.shape(0), ctx.shape(1))], dtypes=[ctx.dtype(0)])
    return rule


def _prelu(ctx: OpContext):
    """PRelu (PopART's PReluOpx): x where positive, else x times the slope, one map; the slope's
    gradient the same selection times x."""
    out = _broadcast(ctx.shape(0), ctx.shape(1))
    return ctx.op("map", [ctx.input(0), ctx.input(1)],
                  {"steps": ["compare", "mul", "select"], "grad": [["compare", "mul", "select"], ["compare", "mul", "select"]],
                   "onnx_op": "PRelu"}, shapes=[out], dtypes=[ctx.dtype(0)])


def _sum_mean(ctx: OpContext):
    """Sum and Mean of several tensors: PopART's SumOpx, one popops map of a balanced tree of adds
    (Mean: then a scale); each input's gradient is the output's (scaled for Mean)."""
    live = [i for i in range(ctx.num_inputs) if ctx.has_input(i)]
    if len(live) == 1:
        return ctx.input(live[0])
    out = _broadcast(*[ctx.shape(i) for i in live])
    steps = ["add"] * (len(live) - 1) + (["scale"] if ctx.op_type == "Mean" else [])
    grad = ["scale"] if ctx.op_type == "Mean" else ["copy"]
    return ctx.op("map", [ctx.input(i) for i in live], {"steps": steps, "grad": [grad] * len(live),
                                                        "onnx_op": ctx.op_type},
                  shapes=[out], dtypes=[ctx.dtype(live[0])])


def _reduced_shape(ctx: OpContext, since: int) -> tuple[list[int], bool, tuple[int, ...]]:
    """(axes, keepdims, output shape) of an ONNX reduction (axes an attribute before opset ``since``)."""
    s = ctx.shape(0)
    axes = _axes(ctx, 1, since)
    keep = bool(ctx.attr("keepdims", 1))
    axes = sorted({_axis(a, len(s)) for a in axes}) if axes else list(range(len(s)))
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    return axes, keep, out


def _reduce_composite(ctx: OpContext):
    """ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp as PopART's
    opx run them: an element-wise map before a popops reduction (|x|, x², and for LogSumExp x minus
    the maximum, exponentiated), the reduction, and one after it (square root, log; the maximum added
    back)."""
    axes, keep, out = _reduced_shape(ctx, 18)
    xs, dt, op = ctx.shape(0), ctx.dtype(0), ctx.op_type
    attrs = {"axes": axes, "keepdims": keep}
    if op == "ReduceProd":
        return ctx.op("reduce_prod", [ctx.input(0)], attrs, shapes=[out])
    x = ctx.input(0)
    if op == "ReduceLogSumExp":
        kept = tuple(1 if i in axes else d for i, d in enumerate(xs))
        peak = ctx.op("reduce_max", [x], {"axes": axes, "keepdims": True}, shapes=[kept], dtypes=[dt], result=False,
                      suffix="max")
        x = ctx.op("map", [x, peak], {"steps": ["sub", "exp"], "grad": [["exp", "mul"], None]}, shapes=[xs],
                   dtypes=[dt], result=False, suffix="exp")
    elif op in ("ReduceL1", "ReduceL2", "ReduceSumSquare"):
        steps, grad = (["abs"], ["sign", "mul"]) if op == "ReduceL1" else (["square"], ["mul", "scale"])
        x = ctx.op("map", [x], {"steps": steps, "grad": [grad]}, shapes=[xs], dtypes=[dt], result=False,
                   suffix=steps[0])
    after = {"ReduceL2": ["sqrt"], "ReduceLogSum": ["log"], "ReduceLogSumExp": ["log", "add"]}.get(op)
    s = ctx.op("reduce_sum", [x], attrs, shapes=[out], dtypes=[dt], result=after is None, suffix="sum")
    if after is None:
        return s
    return ctx.op("map", [s], {"steps": after, "grad": [["div"] if after[0] == "log" else ["div", "scale"]],
                               "onnx_op": op}, shapes=[out], dtypes=[dt])


def _arg_extreme(ctx: OpContext):
    """ArgMax / ArgMin: popops' max (min) reduction with the position of the extreme, priced as the
    reduction (as sim.poptorch prices torch.argmax)."""
    xs = ctx.shape(0)
    axis = _axis(ctx.attr("axis", 0), len(xs))
    keep = bool(ctx.attr("keepdims", 1))
    out = tuple(1 if i == axis else d for i, d in enumerate(xs)) if keep else \
        tuple(d for i, d in enumerate(xs) if i != axis)
    return ctx.op("reduce_max", [ctx.input(0)], {"axes": [axis], "keepdims": keep, "onnx_op": ctx.op_type},
                  shapes=[out], dtypes=["int32"])


def _pad(ctx: OpContext):
    """Pad (constant, reflect, edge): popops::pad, a concatenation of views of the input and constants
    (``popops/Padder.cpp``), so a view; the pads from the ``pads`` input (an attribute before opset 11)."""
    xs = ctx.shape(0)
    pads = [int(p) for p in ctx.attr("pads")] if ctx.opset < 11 else _const_ints(ctx, 1, "pads")
    axes = list(range(len(xs)))
    if ctx.opset >= 18 and ctx.has_input(3):
        axes = [_axis(a, len(xs)) for a in _const_ints(ctx, 3, "axes")]
    out = list(xs)
    for j, a in enumerate(axes):
        out[a] += pads[j] + pads[j + len(axes)]
    if min(out) <= 0:
        ctx.unsupported(f"pads {pads} leave an empty output {tuple(out)}")
    return ctx.op("pad", [ctx.input(0)], {"mode": ctx.attr("mode", "constant")}, shapes=[tuple(out)])


def _tile(ctx: OpContext):
    """Tile: PopART's TileOpx, copies of the input written into the larger output (a copy of the
    output's elements, as sim.poptorch prices Tensor.repeat)."""
    reps = _const_ints(ctx, 1, "repeats")
    out = tuple(d * r for d, r in zip(ctx.shape(0), reps))
    return ctx.op("copy", [ctx.input(0)], {"onnx_op": "Tile"}, shapes=[out])


def _elements(ctx: OpContext):
    """GatherElements and ScatterElements (Scatter before opset 11): popops multiSlice / multiUpdate of
    single elements, as sim.poptorch prices torch.gather and the scatter family."""
    axis = _axis(ctx.attr("axis", 0), len(ctx.shape(0)))
    if ctx.op_type == "GatherElements":
        return ctx.op("gather_elements", [ctx.input(1), ctx.input(0)], {"axis": axis}, shapes=[ctx.shape(1)],
                      dtypes=[ctx.dtype(0)])
    reduce = ctx.attr("reduction", "none")
    return ctx.op("scatter_elements", [ctx.input(1), ctx.input(0), ctx.input(2)],
                  {"axis": axis, "reduce": "sum" if reduce == "add" else reduce}, shapes=[ctx.shape(0)],
                  dtypes=[ctx.dtype(0)])


def _one_hot(ctx: OpContext):
    """OneHot (PopART's OnehotOpx: popops encodeOneHot): each index compared with every class."""
    xs = ctx.shape(0)
    depth = int(_const_ints(ctx, 1, "depth")[0])
    axis = _axis(ctx.attr("axis", -1), len(xs) + 1)
    out = xs[:axis] + (depth,) + xs[axis:]
    return ctx.op("map", [ctx.input(0)], {"steps": ["compare"], "grad": [None], "onnx_op": "OneHot"}, shapes=[out],
                  dtypes=[ctx.dtype(2)])


def _random(ctx: OpContext):
    """RandomNormal / RandomUniform (their shape an attribute), the ...Like forms (the input's shape)
    and Bernoulli: poprand's generators (PopART's RandomNormalOpx, RandomUniformOpx)."""
    kind = {"RandomNormal": "random_normal", "RandomNormalLike": "random_normal", "RandomUniform": "random_uniform",
            "RandomUniformLike": "random_uniform", "Bernoulli": "random_bernoulli"}[ctx.op_type]
    if ctx.op_type in ("RandomNormal", "RandomUniform"):
        shape = tuple(int(d) for d in ctx.attr("shape"))
        return ctx.op(kind, [], {"onnx_op": ctx.op_type}, shapes=[shape],
                      dtypes=[ctx.output_dtype(0) or ctx._imp.float_dtype("float32")])
    return ctx.op(kind, [ctx.input(0)], {"onnx_op": ctx.op_type}, shapes=[ctx.shape(0)],
                  dtypes=[ctx.output_dtype(0) or ctx.dtype(0)])


def _groupnorm(ctx: OpContext):
    """GroupNormalization (opset 18; PopART's GroupNormOpx, popnn's group norm): a norm over each sample's
    group of channels, with a scale and bias (per group in opset 18, per channel from 21)."""
    xs = ctx.shape(0)
    if len(xs) < 3:
        ctx.unsupported(f"GroupNormalization of a rank-{len(xs)} input {xs}: expected (N, C, ...)")
    return ctx.op("groupnorm", [ctx.input(0), ctx.input(1), ctx.input(2)],
                  {"groups": int(ctx.attr("num_groups")), "eps": float(ctx.attr("epsilon", 1e-5))}, shapes=[xs])


RULES: dict = {
    # element-wise
    "Add": _binary("add"), "Sub": _binary("sub"), "Mul": _binary("mul"), "Div": _binary("div"),
    "Relu": _unary("relu"), "Gelu": _unary("gelu"), "Tanh": _unary("tanh"), "Sigmoid": _unary("sigmoid"),
    "Exp": _unary("exp"), "Sqrt": _sqrt, "Erf": _erf, "Pow": _pow, "Neg": _neg, "Reciprocal": _reciprocal,
    "LeakyRelu": _expression(*EXPRESSIONS["leaky_relu"], "LeakyRelu"),
    "Softplus": _SOFTPLUS, "HardSigmoid": _HARD_SIGMOID, "HardSwish": _HARD_SWISH,
    "Clip": _clip, "Where": _where, "Max": _minmax, "Min": _minmax,
    **{k: _compare for k in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And",
                             "Or", "Xor")},
    "Cast": _cast, "CastLike": _cast, "Identity": _identity, "Dropout": _dropout, "LSTM": _recurrent, "GRU": _recurrent,
    # dense algebra
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "ConvTranspose": _conv_transpose,
    "ai.graphcore::MultiConv": _multiconv,
    # normalisations, softmax, pooling
    "BatchNormalization": _batchnorm, "LayerNormalization": _layernorm, "InstanceNormalization": _instancenorm,
    "Softmax": _softmax, "LogSoftmax": _softmax,
    "MaxPool": _pool("maxpool"), "AveragePool": _pool("avgpool"),
    "GlobalAveragePool": _global_pool("avgpool"), "GlobalMaxPool": _global_pool("maxpool"),
    # reductions
    "ReduceMean": _reduce("reduce_mean"), "ReduceSum": _reduce("reduce_sum"),
    "ReduceMax": _reduce("reduce_max"), "ReduceMin": _reduce("reduce_min"),
    # data movement
    "Gather": _gather, "Reshape": _reshape, "Flatten": _flatten, "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze, "Expand": _expand, "Transpose": _transpose, "Concat": _concat,
    "Slice": _slice, "Split": _split, "Resize": _resize, "Upsample": _resize,
    "DepthToSpace": _depth_space, "SpaceToDepth": _depth_space, "TopK": _topk, "CumSum": _cumsum,
    # losses
    "SoftmaxCrossEntropyLoss": _cross_entropy, "NegativeLogLikelihoodLoss": _cross_entropy,
    # more of PopART's ops
    **{k: _unary(kind, onnx_op=k) for k, kind in _UNARY_KINDS.items()},
    **{k: _named_expression for k in _EXPRESSION_OPS},
    "Mod": _binary_kind("remainder"), "BitwiseAnd": _binary_kind("bitwise"), "BitwiseOr": _binary_kind("bitwise"),
    "BitwiseXor": _binary_kind("bitwise"), "PRelu": _prelu, "Sum": _sum_mean, "Mean": _sum_mean,
    **{k: _reduce_composite for k in ("ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                                      "ReduceLogSumExp")},
    "ArgMax": _arg_extreme, "ArgMin": _arg_extreme, "Pad": _pad, "Tile": _tile,
    "GatherElements": _elements, "ScatterElements": _elements, "Scatter": _elements, "OneHot": _one_hot,
    **{k: _random for k in ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli")},
    "GroupNormalization": _groupnorm,
    **{k: _trig for k in ("Tan", "Asinh", "Acosh", "Acos", "Atanh")}, "LRN": _lrn,
    **{k: _not_in_popart for k in _NOT_IN_POPART},
}

#: PopART's node attributes -> Op fields
_POPART_ATTRS = {"__ipu_number": "ipu", "__pipeline_stage": "stage", "__execution_phase": "phase"}


# --- the importer ---------------------------------------------------------------------------
def _read(model) -> tuple[onnx.ModelProto, str | None, Path | None]:
    """(model, default name, directory of external data)."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy, None, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        m = onnx.ModelProto()
        try:
            m.ParseFromString(bytes(model))
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            raise GraphError(f"sim.onnx.load: the bytes are not an ONNX model ({e})") from None
        return m, None, None
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise GraphError(f"sim.onnx.load: no ONNX file at {str(path)!r}")
        if path.stat().st_size == 0:
            raise GraphError(f"sim.onnx.load: {str(path)!r} is empty, not an ONNX model")
        try:
            m = onnx.load(str(path), load_external_data=False)  # weights' bytes are never needed
        except Exception as e:  # noqa: BLE001
            raise GraphError(f"sim.onnx.load: {str(path)!r} is not an ONNX model ({e})") from None
        return m, path.stem, path.parent
    raise TypeError(f"sim.onnx.load: expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")


class _Importer:
    def __init__(self, model, batch_size, dtype, dims, name, base_dir):
        self.model = model
        self.base_dir = base_dir
        self.float_override = None
        if dtype is not None:
            self.float_override = canonical_dtype(dtype)
            if self.float_override not in ("float16", "float32"):
                raise GraphError(f"sim.onnx.load: dtype must be float16 or float32, got {dtype!r}")
        self.opsets = {(imp.domain if imp.domain != "ai.onnx" else ""): imp.version for imp in model.opset_import}
        self.b = GraphBuilder(name, self.float_override or "float32")
        self.g = self.b.graph
        self.env: dict[str, _Value] = {}
        self.onnx_shapes: dict[str, tuple] = {}  # graph tensor -> its ONNX shape
        self.input_shapes = self._resolve_inputs(batch_size, dict(dims or {}))
        self.g.micro_batch = self._micro_batch(batch_size, dict(dims or {}))
        self.inferred = self._infer()

    # --- dtypes and shapes ----------------------------------------------------------------
    def float_dtype(self, native: str) -> str:
        return self.float_override or native

    def sim_dtype(self, elem_type: int, where: str) -> str:
        if elem_type in _FLOAT_TYPES:
            return self.float_dtype(_FLOAT_TYPES[elem_type])
        if elem_type in _OTHER_TYPES:
            return _OTHER_TYPES[elem_type]
        raise GraphError(f"sim.onnx: {where} has element type {_type_name(elem_type)}, which the IPU "
                         "simulator has no model for")

    def np_sim_dtype(self, dt, where: str) -> str:
        return self.sim_dtype(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), where)

    def _resolve_inputs(self, batch_size, dims) -> dict[str, tuple[tuple[int, ...], int]]:
        graph = self.model.graph
        inits = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
        inputs = [vi for vi in graph.input if vi.name not in inits]
        # which dim names the batch size resolves: the symbolic leading dim of each input
        by_batch = False
        for what, size in ([("batch_size", batch_size)] if batch_size is not None else []) + \
                [(f"dims[{k!r}]", v) for k, v in dims.items()]:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
                raise GraphError(f"sim.onnx.load: {what} must be a whole number >= 1, got {size!r}")
        named = {d.dim_param for vi in inputs if vi.type.HasField("tensor_type")
                 for d in vi.type.tensor_type.shape.dim if d.dim_param}
        unknown = sorted(set(dims) - named)
        if unknown:
            raise GraphError(f"sim.onnx.load: dims names {', '.join(map(repr, unknown))}, not a symbolic dimension "
                             f"of the model's inputs ({', '.join(map(repr, sorted(named))) or 'it has none'})")
        if batch_size is not None:
            for vi in inputs:
                tt = vi.type.tensor_type
                if tt.HasField("shape") and tt.shape.dim:
                    d0 = tt.shape.dim[0]
                    if not (d0.HasField("dim_value") and d0.dim_value > 0):
                        by_batch = True
                        if d0.dim_param:
                            dims.setdefault(d0.dim_param, int(batch_size))
        resolved, missing = {}, []
        for vi in inputs:
            if not vi.type.HasField("tensor_type"):
                raise GraphError(f"sim.onnx.load: input {vi.name!r} is not a tensor (sequences and maps "
                                 "have no model)")
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                raise GraphError(f"sim.onnx.load: input {vi.name!r} has no shape (not even a rank); "
                                 "re-export the model with input shapes")
            shape = []
            for i, d in enumerate(tt.shape.dim):
                fixed = d.HasField("dim_value") and d.dim_value > 0
                if fixed:
                    size = int(d.dim_value)
                elif d.dim_param and d.dim_param in dims:
                    size = int(dims[d.dim_param])
                elif i == 0 and batch_size is not None:
                    size = int(batch_size)
                else:
                    size = None
                    missing.append((vi.name, i, d.dim_param))
                shape.append(size)
                if not fixed and size is not None:  # write the size back for shape inference
                    d.Clear()
                    d.dim_value = size
            resolved[vi.name] = (tuple(shape), tt.elem_type)
        if missing:
            what = "; ".join(f"input {n!r} dim {i}" + (f" ({p!r})" if p else "") for n, i, p in missing)
            hint = "load(..., batch_size=N) (command line: --micro-batch / --batch-size N) for a leading (batch) dimension"
            named = sorted({p for _, i, p in missing if p and i > 0})
            if named:
                hint += (", dims={" + ", ".join(f"{p!r}: N" for p in named) + "} (command line: "
                         + " ".join(f"--dim {p}=N" for p in named) + ") for the others")
            raise GraphError(f"sim.onnx.load: symbolic dimensions need sizes: {what}. Give {hint}")
        if batch_size is not None and not by_batch:
            fixed = {n: s[0] for n, (s, _) in resolved.items() if s}
            if any(d != int(batch_size) for d in fixed.values()):
                raise GraphError(
                    f"sim.onnx.load: batch_size={batch_size}, but the model's inputs have fixed leading "
                    f"dimensions ({', '.join(f'{n}: {d}' for n, d in fixed.items())}); re-export it with a "
                    "dynamic batch axis, or leave batch_size out")
        return resolved

    def _micro_batch(self, batch_size, dims) -> int | None:
        """The model's micro-batch: ``batch_size``; else the size given to the one symbolic
        dimension named as a batch (``batch``, ``batch_size``, ``N``...: a name holding "batch");
        else the leading dimension every input of rank >= 1 shares; else None (the first input's)."""
        if batch_size is not None:
            return int(batch_size)
        batch = {int(v) for k, v in dims.items() if "batch" in k.lower()}
        if len(batch) == 1:
            return batch.pop()
        leading = {shape[0] for shape, _ in self.input_shapes.values() if shape}
        return leading.pop() if len(leading) == 1 else None

    def _infer(self) -> dict[str, tuple]:
        if self.model.functions:
            try:
                from onnx import inliner
                self.model = inliner.inline_local_functions(self.model)
            except Exception as e:  # noqa: BLE001
                raise GraphError(f"sim.onnx.load: could not inline the model's local functions ({e})") from None
        for vi in list(self.model.graph.value_info) + list(self.model.graph.output):
            # symbolic shapes recorded by the exporter would clash with the sizes given here
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is not None and tt.HasField("shape") and not all(
                    d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
                tt.ClearField("shape")
        try:
            inferred = shape_inference.infer_shapes(self.model, check_type=False, strict_mode=False,
                                                    data_prop=True)
        except Exception as e:  # noqa: BLE001 - onnx's InferenceError and friends
            raise GraphError(f"sim.onnx.load: ONNX shape inference failed: {e}") from None
        out = {}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            shape = None
            if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                shape = tuple(int(d.dim_value) for d in tt.shape.dim)
            out[vi.name] = (shape, tt.elem_type or None)
        return out

    # --- values ---------------------------------------------------------------------------
    def const_of(self, v: _Value) -> np.ndarray:
        if v.const is None and v.init is not None:
            t = v.init
            if onnx.external_data_helper.uses_external_data(t):
                if self.base_dir is None:
                    raise GraphError(f"sim.onnx: initializer {t.name!r} is stored outside the model and is "
                                     "needed at import time; load the model from its file path")
                t2 = TensorProto()
                t2.CopyFrom(t)
                try:
                    onnx.external_data_helper.load_external_data_for_tensor(t2, str(self.base_dir))
                except (OSError, onnx.checker.ValidationError) as e:
                    raise GraphError(f"sim.onnx: initializer {t.name!r} is needed at import time but its "
                                     f"external data could not be read ({e}); keep the model's data files "
                                     f"beside it in {str(self.base_dir)!r}") from None
                t = t2
            v.const = numpy_helper.to_array(t)
        return v.const

    def materialise(self, v: _Value, role: str | None = None) -> str:
        """The graph tensor of ``v`` (a constant or weight is added on first use)."""
        if v.sim is None:
            if v.missing:
                raise _not_modelled(v, "the model uses it")
            role = role or ("weight" if v.weight else "constant")
            self._add_variable(v, _sim_shape(v.shape), role)
        return v.sim

    def _add_variable(self, v: _Value, shape, role: str) -> None:
        if any(d <= 0 for d in shape):
            raise GraphError(f"sim.onnx: tensor {v.name!r} has an empty shape {tuple(v.shape)}")
        name = self.g.unique_tensor_name(v.name or "const")
        self.g.add_tensor(name, shape, v.dtype, role)
        v.sim = name
        self.onnx_shapes[name] = tuple(v.shape)

    def operand(self, ctx: OpContext, i: int, shape, perm=None) -> str:
        """Input ``i`` in the layout an op wants: ``shape`` after transposing by ``perm``.

        An initializer used only here is stored in that layout (a compile-time choice, as
        the zoo stores a linear layer's weight (in, out)); anything else gets a transpose op
        (or a free reshape when only the view changes)."""
        v = ctx._in(i)
        shape = tuple(shape)
        if v.sim is None and v.init is not None and v.uses == 1:
            self._add_variable(v, _sim_shape(shape), "weight" if v.weight else "constant")
            return v.sim
        t = self.materialise(v)
        cur = v.shape
        if perm is not None and any(cur[p] != 1 for k, p in enumerate(perm) if p != k):
            t = ctx.op("transpose", [t], {"perm": list(perm)}, shapes=[tuple(cur[p] for p in perm)],
                       result=False, suffix=f"transpose_{i}")
            cur = tuple(cur[p] for p in perm)
        if tuple(cur) != shape:
            t = ctx.op("reshape", [t], shapes=[shape], result=False, suffix=f"view_{i}")
        return t

    def emit(self, kind, inputs, shapes, dtypes, attrs, op_name, bases, ctx: OpContext) -> list[str]:
        op_name = self.g.unique_op_name(op_name)
        outs = []
        for base, shape, dt in zip(bases, shapes, dtypes):
            sshape = _sim_shape(shape)
            if any(d <= 0 for d in sshape):
                raise GraphError(f"{ctx.desc}: output {base!r} would have an empty shape {shape}")
            name = self.g.unique_tensor_name(base)
            self.g.add_tensor(name, sshape, dt, "activation", producer=op_name)
            self.onnx_shapes[name] = tuple(shape)
            outs.append(name)
        ann = ctx._attrs
        placement = {}
        for a, f in _POPART_ATTRS.items():
            if a in ann:
                value = ann[a]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise GraphError(f"{ctx.desc}: PopART attribute {a} = {value!r}; expected a whole number "
                                     f">= 0 (the {f} the op runs on / in)")
                placement[f] = value
        op = Op(op_name, kind, list(inputs), outs, dict(attrs),
                recompute=bool(ann.get("__recompute_output_in_backward_pass", 0)), **placement)
        if "__available_memory" in ann:
            proportion = ann["__available_memory"]
            if isinstance(proportion, bool) or not isinstance(proportion, (int, float)) or not 0 < proportion <= 1:
                raise GraphError(f"{ctx.desc}: PopART attribute __available_memory = {proportion!r}; expected "
                                 "a proportion of the tile memory in (0, 1]")
            op.attrs["available_memory_proportion"] = float(proportion)
        self.g.add_op(op)
        return outs

    def value_of_tensor(self, name: str, like: _Value | None) -> _Value:
        """The value of a graph tensor a rule returned."""
        if like is not None and like.sim == name:
            return like
        t = self.g.tensors[name]
        return _Value(self.onnx_shapes.get(name, t.shape), t.dtype, sim=name, name=name)

    # --- the walk -------------------------------------------------------------------------
    def run(self, loss: str | None) -> Graph:
        graph = self.model.graph
        uses: dict[str, int] = {}
        for node in graph.node:
            for n in node.input:
                if n:
                    uses[n] = uses.get(n, 0) + 1
        for o in graph.output:
            uses[o.name] = uses.get(o.name, 0) + 1
        for t in graph.initializer:
            dtype = self.sim_dtype(t.data_type, f"initializer {t.name!r}")
            numel = math.prod(t.dims)
            weight = t.data_type in _FLOAT_TYPES and numel > 1
            self.env[t.name] = _Value(tuple(int(d) for d in t.dims), dtype, init=t, weight=weight,
                                      uses=uses.get(t.name, 0), name=t.name)
        if graph.sparse_initializer:
            raise GraphError("sim.onnx.load: sparse initializers have no model; densify the model first")
        for name, (shape, elem_type) in self.input_shapes.items():
            dtype = self.sim_dtype(elem_type, f"input {name!r}")
            sim_name = self.b.input(name, _sim_shape(shape), dtype)
            self.onnx_shapes[sim_name] = shape
            self.env[name] = _Value(shape, dtype, sim=sim_name, uses=uses.get(name, 0), name=name)
        made: dict[str, str] = {}  # tensor -> the node that writes it (ONNX graphs are SSA)
        defined = set(self.input_shapes) | {t.name for t in graph.initializer}
        for index, node in enumerate(graph.node):
            name = node.name or f"{node.op_type}_{index}"
            for out in filter(None, node.output):
                if out in made or out in defined:
                    raise GraphError(f"sim.onnx.load: node {name!r} ({node.op_type}) writes {out!r}, which "
                                     f"{'node ' + repr(made[out]) if out in made else 'the model'} already "
                                     "defines (an ONNX tensor has one producer); the model is not valid ONNX")
                made[out] = name
            self._node(index, node)
        for o in graph.output:
            v = self.env.get(o.name)
            if v is None:
                raise GraphError(f"sim.onnx.load: graph output {o.name!r} is not produced by any node")
            self.b.output(self.materialise(v))
        if not self.g.ops:
            what = ("its graph has no nodes" if not graph.node else
                    f"its {len(graph.node)} node(s) only pass tensors through or compute constants")
            raise GraphError(f"sim.onnx.load: the model has no ops ({what}), so there is nothing to simulate; "
                             "export the model with its computation")
        self._set_loss(loss)
        return self.g

    def _node(self, index: int, node) -> None:
        name = node.name or f"{node.op_type}_{index}"
        ins = []
        for n in node.input:
            if not n:
                ins.append(None)
                continue
            if n not in self.env:
                raise GraphError(f"sim.onnx.load: node {name!r} ({node.op_type}) uses {n!r} before any node "
                                 "produces it (the graph must be in topological order)")
            ins.append(self.env[n])
        ctx = OpContext(self, node, name, ins)
        if _default_domain(node):
            folded = self._fold(ctx)
            if folded is not None:
                for out, arr in zip(node.output, folded):
                    if out:
                        arr = np.asarray(arr)
                        self.env[out] = _Value(tuple(arr.shape), self.np_sim_dtype(arr.dtype, f"{out!r}"),
                                               const=arr, name=out)
                return
        rule = _rule_for(node)
        if rule is None:
            error = _unsupported(ctx)
            later = [t for t in self._unknown_op_types(index) if t != _op_label(node)]
            if later:  # name the rest too, so one round of register_op covers the model
                error.args = (f"{error.args[0]} Further on, the model also has op types with no rule: "
                              f"{', '.join(later)} (unless their inputs are constants, which fold)",)
            raise error
        result = rule(ctx)
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        named = [out for out in node.output if out]
        extra = [r for r in results[len(node.output):] if r is not None]
        if extra or any(r is not None and (not isinstance(r, str) or r not in self.g.tensors) for r in results):
            raise GraphError(f"{ctx.desc}: its rule returned {result!r}; a rule returns the name of the graph "
                             f"tensor of each of the node's {len(named)} output(s) (from ctx.op), or None for an "
                             "output it does not model")
        for i, out in enumerate(node.output):
            if not out:
                continue
            r = results[i] if i < len(results) else None
            if r is None:  # not modelled: an error if something uses it
                self.env[out] = _Value((), "float32", name=out, missing=f"output {i} of {ctx.desc}")
                continue
            like = next((v for v in ins if v is not None and v.sim == r), None)
            self.env[out] = replace(self.value_of_tensor(r, like), name=out)

    def _unknown_op_types(self, index: int) -> list[str]:
        """The op types after node ``index`` that neither a rule nor register_op prices."""
        unknown = (_op_label(node) for node in list(self.model.graph.node)[index + 1:]
                   if _rule_for(node) is None and not (_default_domain(node) and node.op_type in _ALWAYS_FOLDED))
        return list(dict.fromkeys(unknown))

    def _fold(self, ctx: OpContext):
        """The node's outputs as numpy values when they are known at import time, else None."""
        node, ins = ctx.node, ctx._ins
        op = node.op_type
        if op in ("Shape", "Size"):
            s = ctx.shape(0)
            if op == "Size":
                return [np.array(math.prod(s), dtype=np.int64)]
            start, end = ctx.attr("start", 0), ctx.attr("end", None)
            return [np.array(s[slice(start, end)], dtype=np.int64)]
        if op == "Constant":
            return [self._constant(ctx)]
        if any(v is not None and not v.known for v in ins):
            return None
        shapes = [s for s in ctx.output_shapes if s is not None]
        if op.startswith("Random") or any(math.prod(s) > 1 << 24 for s in shapes):
            return None  # random values differ per run; huge constants are left to the device
        vals = [None if v is None else self.const_of(v) for v in ins]
        try:
            out = _fold_numpy(op, ctx._attrs, vals, ctx.opset)
        except Exception:  # noqa: BLE001 - fall back to onnx's reference implementation
            out = None
        if out is None:
            try:
                from onnx.reference import ReferenceEvaluator
                feeds = {n: v for n, v in zip(node.input, vals) if n}
                out = ReferenceEvaluator(node, opsets=dict(self.opsets)).run(None, feeds)
            except Exception:  # noqa: BLE001 - no reference implementation: simulate it instead
                return None
        return out

    def _constant(self, ctx: OpContext) -> np.ndarray:
        a = ctx._attrs
        if "value" in a:
            return numpy_helper.to_array(a["value"])
        for key, dt in (("value_float", np.float32), ("value_floats", np.float32),
                        ("value_int", np.int64), ("value_ints", np.int64)):
            if key in a:
                return np.array(a[key], dtype=dt)
        ctx.unsupported("only tensor, float and int constants have a rule")

    def _set_loss(self, loss: str | None) -> None:
        losses = [op for op in self.g.ops if op.kind in ("softmax_cross_entropy", "mse_loss")
                  and op.outputs[0] in self.g.outputs]
        if loss is None:
            if len(losses) == 1:
                self.g.loss = losses[0].outputs[0]
            return
        v = self.env.get(loss)
        if v is None or v.sim is None or self.g.tensors[v.sim].producer is None:
            outs = ", ".join(repr(o.name) for o in self.model.graph.output)
            raise GraphError(f"sim.onnx.load: loss={loss!r} is not a tensor computed by the model "
                             f"(its outputs: {outs})")
        shape = self.g.tensors[v.sim].shape
        if math.prod(shape) != 1:  # PopART's Ir::setFinalLoss: "must be a scalar tensor"
            raise GraphError(f"sim.onnx.load: loss={loss!r} has shape {tuple(shape)}; a loss must be a scalar "
                             "(one element), as PopART requires: reduce it first (ReduceMean, ReduceSum)")
        self.g.loss = v.sim


def load(model, batch_size: int | None = None, dtype: str | None = None, *, loss: str | None = None,
         dims: dict | None = None, name: str | None = None) -> Graph:
    """Import an ONNX model as a :class:`sim.Graph`.

    ``model`` is a file path, the serialized bytes, or an ``onnx.ModelProto`` (not modified).
    ``batch_size`` sizes a symbolic leading dimension of the inputs (the micro-batch);
    ``dims`` sizes other symbolic dimensions by name (``{"sequence": 128}``). ``dtype``
    (``"float16"`` or ``"float32"``) sets the dtype of every float tensor; by default the
    model's own. ``loss`` names the tensor to train on (any one-element tensor the model
    computes, as PopART takes any scalar as the final loss); without
    it, a model with exactly one SoftmaxCrossEntropyLoss/NegativeLogLikelihoodLoss output
    trains on that. ``name`` names the graph (default: the file's stem, else the ONNX graph's
    name).
    """
    proto, stem, base_dir = _read(model)
    gname = name or stem or proto.graph.name or "onnx_model"
    return _Importer(proto, batch_size, dtype, dims, gname, base_dir).run(loss)


def fixed_batch(model) -> int | None:
    """The leading dimension every input of ``model`` fixes, if they all fix the same one (a
    model exported without a dynamic batch axis), else None."""
    proto, _, _ = _read(model)
    inits = {t.name for t in proto.graph.initializer}
    leading = set()
    for vi in proto.graph.input:
        dims = vi.type.tensor_type.shape.dim if vi.name not in inits and vi.type.HasField("tensor_type") else ()
        if dims:
            leading.add(dims[0].dim_value if dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None)
    return leading.pop() if len(leading) == 1 and None not in leading else None


# --- command line ---------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .cli.argtypes import name_size, positive_int
    from .graph.training import OPTIMIZERS
    p = argparse.ArgumentParser(prog="python -m sim.onnx", description="Simulate one call of an ONNX model "
                                "on an IPU system and print what `ipusim run` prints.")
    p.add_argument("model", type=Path, help="the .onnx file")
    p.add_argument("--system", default="ipu-mk2", help="system config name or .toml path (default: ipu-mk2)")
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="size of the inputs' symbolic leading (batch) dimension: the micro-batch")
    p.add_argument("--dim", action="append", default=[], type=name_size, metavar="NAME=SIZE",
                   help="size of another symbolic dimension (repeatable)")
    p.add_argument("--dtype", choices=["float16", "float32"], help="dtype of every float tensor (default: the model's)")
    p.add_argument("--device-iterations", type=positive_int, metavar="N", help="[deviceIterations]")
    p.add_argument("--replicas", type=positive_int, metavar="N", help="[replicationFactor]")
    p.add_argument("--training", action="store_true", help="simulate a training step (the model needs a loss)")
    p.add_argument("--loss", metavar="TENSOR", help="the ONNX tensor to train on (default: the model's one loss)")
    p.add_argument("--gradient-accumulation", type=positive_int, metavar="N", help="[Training.gradientAccumulation]")
    p.add_argument("--optimizer", choices=list(OPTIMIZERS), help="optimizer of --training (default: sgd)")
    p.add_argument("--synthetic-data", action="store_true", help="[enableSyntheticData(True)]: no host IO")
    p.add_argument("--json", action="store_true", help="print run.summary() as one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.onnx model.onnx [--system S] [--batch-size N] [--device-iterations N]
    [--json] ...``: import, simulate one call, print the summary; returns the exit code
    (0 success, 2 a usage or simulator error, 3 out of tile memory, 1 a file error)."""
    import sim

    from .results.report import format_summary, to_json

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.optimizer and not args.training:
            parser.error("--optimizer only applies with --training")
        if args.gradient_accumulation and not args.training:
            parser.error("--gradient-accumulation only applies with --training")
        graph = load(args.model, batch_size=args.batch_size, dtype=args.dtype, loss=args.loss,
                     dims=dict(args.dim))
        if args.training and graph.loss is None:
            outs = ", ".join(graph.outputs)
            parser.error(f"--training needs a loss: name it with --loss TENSOR, a one-element tensor the model "
                         f"computes (the model's outputs: {outs})")
        system = sim.load_system(args.system)
        opts = sim.Options()
        if args.device_iterations:
            opts.deviceIterations(args.device_iterations)
        if args.replicas:
            opts.replicationFactor(args.replicas)
        if args.gradient_accumulation:
            opts.Training.gradientAccumulation(args.gradient_accumulation)
        if args.synthetic_data:
            opts.enableSyntheticData(True)
        run = sim.simulate(graph, system, opts, training=args.training,
                           optimizer=(args.optimizer or "sgd") if args.training else None)
        print(to_json(run.summary()) if args.json else format_summary(run))
        return 0
    except SystemExit as e:  # argparse: --help, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except OutOfMemoryError as e:
        print(f"sim.onnx: error: {e}", file=sys.stderr)
        return 3
    except IpuSimError as e:
        print(f"sim.onnx: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sim.onnx: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
