"""What a rule sees of one ONNX node and how it emits sim ops (:class:`OpContext`), and the
errors for what the simulator cannot model (a node without a cost, an output no rule models)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import onnx
from onnx import numpy_helper

from ..errors import GraphError, UnsupportedOpError
from ..graph.ir import Graph, GraphBuilder
from ._values import _Value

if TYPE_CHECKING:
    from ._importer import _Importer


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


def _unsupported(ctx: OpContext, why: str = "") -> UnsupportedOpError:
    reason = f": {why}" if why else ""
    return UnsupportedOpError(
        f"sim.onnx has no cost for {ctx.desc}{reason}. Give it one with "
        f"sim.onnx.register_op({ctx.op_type!r}, fn), where fn(ctx) returns ctx.op(<a sim op kind>, "
        "ctx.inputs) or ctx.custom(vertices=..., vertex_cycles=...), then load and simulate the model from Python "
        "(sim.onnx.load, sim.simulate; the command line has no way to register one), or replace the node in the "
        "file with ops PopART has (see docs/onnx.md)")
