"""Reading an ONNX model into a :class:`sim.Graph`: :func:`load` and :func:`fixed_batch`, and the
importer behind them (:class:`_Importer`): symbolic dimensions sized, ONNX shape inference, each
node either folded or priced by its rule, PopART's node attributes carried over, the loss chosen."""

from __future__ import annotations

import math
import os
from collections import ChainMap
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper, shape_inference

from ..errors import GraphError, UnsupportedOpError
from ..graph.ir import Graph, GraphBuilder, Op, canonical_dtype
from ._context import OpContext, _not_modelled, _unsupported
from ._folding import _ALWAYS_FOLDED, _fold_numpy
from ._ops_control_flow import subgraphs
from ._ops_not_in_popart import _SEQUENCE_OPS, REFUSALS
from ._registry import RULES, _default_domain, _op_label, _rule_for
from ._values import _FLOAT_TYPES, _OTHER_TYPES, _sim_shape, _type_name, _Value


#: PopART's node attributes -> Op fields
_POPART_ATTRS = {"__ipu_number": "ipu", "__pipeline_stage": "stage", "__execution_phase": "phase"}


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
    def __init__(self, model, batch_size, dtype, dims, name, base_dir, batch_flag=None):
        self.model = model
        #: how the errors name the batch size's flag on the command line (see :func:`load`)
        self.batch_flag = batch_flag
        self.base_dir = base_dir
        self.float_override = None
        if dtype is not None:
            self.float_override = canonical_dtype(dtype)
            if self.float_override not in ("float16", "float32"):
                raise GraphError(f"sim.onnx.load: dtype must be float16 or float32, got {dtype!r}")
        self.opsets = {(imp.domain if imp.domain != "ai.onnx" else ""): imp.version for imp in model.opset_import}
        self.b = GraphBuilder(name, self.float_override or "float32")
        self.g = self.b.graph
        self.env: dict[str, _Value] | ChainMap = {}
        self.scope = ""  # the name prefix of an unrolled loop's iteration or an If's branch
        self.tags: dict = {}  # attributes every op emitted in that scope carries (sim.onnx._ops_control_flow)
        self._subgraph_initializers: dict[str, _Value] = {}  # a loop body's or branch's own initializers
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
        batch = _batch_name(inputs)
        if batch_size is not None:
            for vi in inputs:
                tt = vi.type.tensor_type
                if not (tt.HasField("shape") and tt.shape.dim):
                    continue
                d0 = tt.shape.dim[0]
                if not (d0.HasField("dim_value") and d0.dim_value > 0) and not d0.dim_param:
                    by_batch = True  # an unnamed dynamic leading dimension: the batch
                if batch and any(d.dim_param == batch for d in tt.shape.dim):
                    by_batch = True
                    if batch in dims and int(dims[batch]) != int(batch_size):
                        raise GraphError(
                            f"sim.onnx.load: the batch size {batch_size} and dims[{batch!r}] = {dims[batch]} size the "
                            f"same dimension (input {vi.name!r}'s batch) two ways: give one of them (on the command "
                            f"line, --dim {batch}=N or {self._batch_flag_text()})")
                    dims.setdefault(batch, int(batch_size))
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
                elif i == 0 and batch_size is not None and d.dim_param in ("", batch):
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
            # the batch dimension (a leading one, unnamed or the batch's name) takes batch_size; any other
            # named one, a leading one too (an input led by its sequence), takes dims
            parts = ([f"load(..., batch_size=N) (command line: {self._batch_flag_text('N')}) for a leading (batch) "
                      "dimension"] if any(i == 0 and p in ("", batch) for _, i, p in missing) else [])
            named = sorted({p for _, i, p in missing if p and (i > 0 or p != batch)})
            if named:
                parts.append("dims={" + ", ".join(f"{p!r}: N" for p in named) + "} (command line: "
                             + " ".join(f"--dim {p}=N" for p in named) + ")" + (" for the others" if parts else ""))
            hint = ", ".join(parts)
            unnamed = [(n, i) for n, i, p in missing if not p and i > 0]
            if unnamed:
                n, i = unnamed[0]
                hint += (f"; a dynamic dimension without a name past the first (input {n!r} dim {i}) cannot be "
                         f"sized: re-export the model naming it (torch.onnx.export's dynamic_axes={{{n!r}: {{{i}: "
                         "'seq'}}) or with a fixed size")
            raise GraphError(f"sim.onnx.load: symbolic dimensions need sizes: {what}. Give {hint}")
        if batch_size is not None and not by_batch:
            fixed = {n: s[0] for n, (s, _) in resolved.items() if s}
            if any(d != int(batch_size) for d in fixed.values()):
                raise GraphError(
                    f"sim.onnx.load: batch_size={batch_size}, but the model's inputs have fixed leading "
                    f"dimensions ({', '.join(f'{n}: {d}' for n, d in fixed.items())}); re-export it with a "
                    "dynamic batch axis, or leave batch_size out")
        return resolved

    def _batch_flag_text(self, value: str = "") -> str:
        """The command-line flag that gives the batch size, followed by ``value`` (``--micro-batch N``): the
        front end's own (``batch_flag``), else both front ends' (``ipusim run``'s and ``python -m sim.onnx``'s)."""
        def flag(name: str) -> str:
            return f"{name} {value}".rstrip()
        if self.batch_flag:
            return flag(self.batch_flag)
        return f"{flag('--micro-batch')} in ipusim run, {flag('--batch-size')} in python -m sim.onnx"

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
        for vi in (vi for g in subgraphs(self.model.graph) for vi in list(g.value_info) + list(g.output)):
            # symbolic shapes recorded by the exporter would clash with the sizes given here
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is not None and tt.HasField("shape") and not all(
                    d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
                tt.ClearField("shape")
        try:
            inferred = shape_inference.infer_shapes(light_model(self.model), check_type=False, strict_mode=False,
                                                    data_prop=True)
        except Exception as e:  # noqa: BLE001 - onnx's InferenceError and friends
            raise GraphError(f"sim.onnx.load: ONNX shape inference failed: {e}") from None
        out = {}  # a subgraph's names are unique in the model too (ONNX forbids shadowing)
        for vi in (vi for g in subgraphs(inferred.graph) for vi in list(g.value_info) + list(g.output)):
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
                except (OSError, ValueError, onnx.checker.ValidationError) as e:
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

        An initializer used only here (by one node, in every iteration of a loop's body) is stored
        in that layout (a compile-time choice, as the zoo stores a linear layer's weight (in, out));
        anything else gets a transpose op (or a free reshape when only the view changes); a weight's
        transpose is made once a layout and read by its later uses of that layout."""
        v = ctx._in(i)
        shape = tuple(shape)
        layout = (None if perm is None else tuple(perm), shape)
        if v.sim is not None and v.layout == layout:
            return v.sim
        if v.sim is None and v.init is not None and v.uses == 1:
            self._add_variable(v, _sim_shape(shape), "weight" if v.weight else "constant")
            v.layout = layout
            return v.sim
        if v.weight and layout in v.views:  # a weight read again in a layout made for an earlier use
            return v.views[layout]
        t = self.materialise(v)
        cur = v.shape
        if perm is not None and any(cur[p] != 1 for k, p in enumerate(perm) if p != k):
            t = ctx.op("transpose", [t], {"perm": list(perm)}, shapes=[tuple(cur[p] for p in perm)],
                       result=False, suffix=f"transpose_{i}")
            cur = tuple(cur[p] for p in perm)
        if tuple(cur) != shape:
            t = ctx.op("reshape", [t], shapes=[shape], result=False, suffix=f"view_{i}")
        if v.weight:
            v.views[layout] = t
        return t

    def emit(self, kind, inputs, shapes, dtypes, attrs, op_name, bases, ctx: OpContext) -> list[str]:
        op_name = self.g.unique_op_name(op_name)
        bases = [b if b.startswith(self.scope) else self.scope + b.lstrip("/") for b in bases]
        attrs = {**attrs, **self.tags}
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
        # PopART's RecomputeType (op.hpp): Undefined 0, Checkpoint 1 (kept), Recompute 2, Recomputed 3
        op = Op(op_name, kind, list(inputs), outs, dict(attrs),
                recompute=ann.get("__recompute_output_in_backward_pass", 0) == 2, **placement)
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
        for sub in list(subgraphs(graph))[1:]:  # a node in a loop's body is one use, however many iterations
            for node in sub.node:
                for n in filter(None, node.input):
                    uses[n] = uses.get(n, 0) + 1
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
        self.g.onnx_outputs = {}  # ONNX output name -> (the graph tensor holding it, its ONNX shape)
        for o in graph.output:
            v = self.env.get(o.name)
            if v is None:
                raise GraphError(f"sim.onnx.load: graph output {o.name!r} is not produced by any node")
            t = self.materialise(v)
            self.b.output(t)
            self.g.onnx_outputs[o.name] = (t, tuple(v.shape))
        if not self.g.ops:
            what = ("its graph has no nodes" if not graph.node else
                    f"its {len(graph.node)} node(s) only pass tensors through or compute constants")
            raise GraphError(f"sim.onnx.load: the model has no ops ({what}), so there is nothing to simulate; "
                             "export the model with its computation")
        self._set_loss(loss)
        return self.g

    def run_subgraph(self, graph, bindings: dict[str, _Value], scope: str, tags: dict) -> list[_Value]:
        """The values of ``graph``'s outputs after emitting its nodes (a loop body's iteration, an If's
        branch): its inputs bound to ``bindings``, the enclosing scopes' values visible, its ops
        named under ``scope`` (the full prefix) and given ``tags`` beside the enclosing scopes'."""
        saved = self.env, self.scope, self.tags
        self.env = ChainMap(dict(bindings), self.env)  # the body's values over the enclosing ones, no copy
        self.scope, self.tags = scope, {**saved[2], **tags}
        try:
            for t in graph.initializer:  # one value however many iterations (a name is unique in the model)
                if t.name not in self._subgraph_initializers:
                    dtype = self.sim_dtype(t.data_type, f"initializer {t.name!r}")
                    self._subgraph_initializers[t.name] = _Value(
                        tuple(int(d) for d in t.dims), dtype, init=t, uses=2, name=t.name,
                        weight=t.data_type in _FLOAT_TYPES and math.prod(t.dims) > 1)
                self.env[t.name] = self._subgraph_initializers[t.name]
            for index, node in enumerate(graph.node):
                self._node(index, node)
            missing = [o.name for o in graph.output if o.name not in self.env]
            if missing:
                raise GraphError(f"sim.onnx.load: subgraph {graph.name!r} (under {scope.rstrip('/')!r}) has outputs "
                                 f"{missing} that none of its nodes produces")
            return [self.env[o.name] for o in graph.output]
        finally:
            self.env, self.scope, self.tags = saved

    def _node(self, index: int, node) -> None:
        name = node.name or f"{node.op_type}_{index}"
        name = self.scope + name.lstrip("/") if self.scope else name
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
            _check_attributes(ctx)
            if self._huge_constant(ctx):
                return
            folded = self._fold(ctx)
            if folded is not None:
                for out, arr in zip(node.output, folded):
                    if out:
                        arr = np.asarray(arr)
                        self.env[out] = _Value(tuple(arr.shape), self.np_sim_dtype(arr.dtype, f"{out!r}"),
                                               const=arr, name=out)
                return
        rule = _rule_for(node)
        if rule is None or rule in REFUSALS:
            try:
                error = _unsupported(ctx) if rule is None else rule(ctx)
            except UnsupportedOpError as refused:
                error = refused
            later = [t for t in self._unknown_op_types(index) if t != _op_label(node)]
            if later:  # name the rest too, so one round of register_op covers the model
                error.args = (f"{error.args[0]} Further on, the model also has op types the simulator has no cost "
                              f"for: {', '.join(later)} (unless their inputs are constants, which fold)",)
            raise error
        try:
            result = rule(ctx)
        except GraphError as e:  # a rule's own refusal (an axis out of range, shapes that do not broadcast)
            if ctx.desc in str(e):
                raise
            raise GraphError(f"{ctx.desc}: {e}") from None
        except (IndexError, KeyError, TypeError, ZeroDivisionError, AttributeError) as e:
            if rule is not RULES.get(node.op_type) and rule is not RULES.get(f"{node.domain}::{node.op_type}"):
                raise  # a register_op rule's own error, as it is
            # a node the built-in rule cannot read: an attribute or input ONNX requires missing or out of range
            raise GraphError(f"{ctx.desc}: its attributes or inputs are not a valid {node.op_type} "
                             f"({type(e).__name__}: {e}); check the model with onnx.checker.check_model(model, "
                             "full_check=True)") from e
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        named = [out for out in node.output if out]
        extra = [r for r in results[len(node.output):] if r is not None]
        if extra or any(r is not None and not isinstance(r, _Value)
                        and (not isinstance(r, str) or r not in self.g.tensors) for r in results):
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
            if isinstance(r, _Value):  # a value known at import time, passed on as it is (an If's folded branch)
                self.env[out] = replace(r, name=out)
                continue
            like = next((v for v in ins if v is not None and v.sim == r), None)
            self.env[out] = replace(self.value_of_tensor(r, like), name=out)
            if ctx._attrs.get("__recompute_output_in_backward_pass") == 1:  # PopART's RecomputeType Checkpoint
                self._checkpoint(r)

    def _checkpoint(self, tensor: str) -> None:
        """Keep ``tensor`` from the forward pass for the backward pass: a recomputation checkpoint
        (:meth:`Graph.checkpoint`; PopART's ``checkpointOutput``: an identity whose output is RecomputeType
        Checkpoint, so the tensor it passes on is kept, and what recomputation reruns starts there)."""
        self.g.checkpoint(tensor)

    def _unknown_op_types(self, index: int) -> list[str]:
        """The op types after node ``index`` that neither a rule nor register_op prices (no rule, or one that
        refuses them: an op PopART lacks)."""
        unknown = (_op_label(node) for node in list(self.model.graph.node)[index + 1:]
                   if ((rule := _rule_for(node)) is None or rule in REFUSALS)
                   and not (_default_domain(node) and node.op_type in _ALWAYS_FOLDED))
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
        if op.startswith("Random") or op in _SEQUENCE_OPS or any(math.prod(s) > 1 << 24 for s in shapes):
            return None  # random values differ per run; huge constants are left to the device; a sequence is no tensor
        vals = [None if v is None else self.const_of(v) for v in ins]
        # IEEE results (log of 0, a cast of inf) are the values the model computes, as on the device: no
        # numpy warning for them (T5's relative position buckets take the log of 0 and clamp it after)
        with np.errstate(all="ignore"):
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

    def _huge_constant(self, ctx: OpContext) -> bool:
        """A node of known inputs whose output is over the folding cap (2**24 elements: a causal mask of a
        long sequence, a ConstantOfShape of a large shape), or that reads such an output: its values are
        not computed here, but PopART folds it all the same (its const-expr folding), so each output is a
        constant of the graph, its bytes in memory and no op priced. True if so."""
        node, ins = ctx.node, ctx._ins
        if node.op_type.startswith("Random") or node.op_type in ("Shape", "Size", "Constant"):
            return False
        if any(v is not None and not (v.known or v.folded_unknown) for v in ins) or not any(v is not None for v in ins):
            return False
        shapes = ctx.output_shapes
        if not any(v is not None and v.folded_unknown for v in ins) and \
                not any(s is not None and math.prod(s) > 1 << 24 for s in shapes):
            return False
        for i, out in enumerate(node.output):
            if out:
                dtype = ctx.output_dtype(i)
                if shapes[i] is None or dtype is None:
                    return False
        for i, out in enumerate(node.output):
            if out:
                # a graph constant when a device op reads it (materialise), none when only folding does
                self.env[out] = _Value(tuple(shapes[i]), ctx.output_dtype(i), name=out, folded_unknown=True)
        return True

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


def _check_attributes(ctx: OpContext) -> None:
    """Refuse a standard ONNX node with an attribute its operator does not define at the model's opset (a
    misspelt ``stride`` on a Conv would otherwise be dropped and priced as the default): PopART runs ONNX's
    checker on a model it loads (``BuilderImpl::loadModelProto``), which rejects such an attribute (and passes
    the ``__``-named ones PopART annotates nodes with). Nodes of an op the installed onnx does not know are left
    to their rules."""
    from onnx import defs
    node = ctx.node
    try:
        schema = defs.get_schema(node.op_type, ctx.opset, node.domain)
    except defs.SchemaError:  # an op (or opset) the installed onnx has no schema for
        return
    # the checker passes attributes named "__...": PopART's own annotations (__ipu_number, ...)
    unknown = [a.name for a in node.attribute if a.name not in schema.attributes and not a.name.startswith("__")]
    if unknown:
        known = ", ".join(sorted(schema.attributes)) or "none"
        raise GraphError(f"{ctx.desc}: attribute{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))} "
                         f"{'are' if len(unknown) > 1 else 'is'} not an attribute of {node.op_type} at opset "
                         f"{ctx.opset} (its attributes: {known}); ONNX's checker, which PopART runs on the models it "
                         "loads, refuses the model: correct the attribute's name")


def load(model, batch_size: int | None = None, dtype: str | None = None, *, loss: str | None = None,
         dims: dict | None = None, name: str | None = None, batch_flag: str | None = None) -> Graph:
    """Import an ONNX model as a :class:`sim.Graph`.

    ``model`` is a file path, the serialized bytes, or an ``onnx.ModelProto`` (not modified).
    ``batch_size`` sizes a symbolic leading dimension of the inputs (the micro-batch);
    ``dims`` sizes other symbolic dimensions by name (``{"sequence": 128}``). ``dtype``
    (``"float16"`` or ``"float32"``) sets the dtype of every float tensor; by default the
    model's own. ``loss`` names the tensor to train on (any one-element tensor the model
    computes, as PopART takes any scalar as the final loss); without
    it, a model with exactly one SoftmaxCrossEntropyLoss/NegativeLogLikelihoodLoss output
    trains on that. ``name`` names the graph (default: the file's stem, else the ONNX graph's
    name). ``batch_flag`` is the command-line flag that gives ``batch_size`` in the front end
    calling (``"--micro-batch"`` for ``ipusim run``), which the errors then name; by default
    they name each front end's.

    The graph's ``params`` (a run summary's ``model_params``) record what was given, so that two
    runs can be told apart: ``onnx`` (the file's path as given; none for bytes or a proto),
    ``batch_size``, ``dims``, ``dtype`` and ``loss``, each only when given.
    """
    proto, stem, base_dir = _read(model)
    gname = name or stem or proto.graph.name or "onnx_model"
    graph = _Importer(proto, batch_size, dtype, dims, gname, base_dir, batch_flag).run(loss)
    # the sizes are whole numbers by now (the importer checked them): plain ints, as JSON writes them
    given = {"onnx": str(model) if isinstance(model, (str, os.PathLike)) else None,
             "batch_size": None if batch_size is None else int(batch_size),
             "dims": {str(k): int(v) for k, v in dims.items()} if dims else None, "dtype": dtype, "loss": loss}
    graph.params = {k: v for k, v in given.items() if v is not None}
    return graph


def _batch_name(inputs) -> str | None:
    """The name of ``inputs``' batch dimension: a symbolic dimension whose name holds "batch" (in any
    position: a time-major LSTM's ``(seq, batch)``), else the first input's symbolic leading dimension;
    None when there is neither. Inputs led by another name (an attention mask's ``seq``) are sized as
    any other symbolic dimension."""
    shapes = [vi.type.tensor_type.shape.dim for vi in inputs if vi.type.HasField("tensor_type")]
    named = next((d.dim_param for dims in shapes for d in dims if "batch" in d.dim_param.lower()), None)
    leading = [dims[0].dim_param for dims in shapes if dims and dims[0].dim_param]
    return named or (leading[0] if leading else None)


def batch_dims(model) -> set[str]:
    """The name of ``model``'s batch dimension (:func:`_batch_name`), as a set (empty: none named)."""
    proto, _, _ = _read(model)
    inits = {t.name for t in proto.graph.initializer}
    name = _batch_name([vi for vi in proto.graph.input if vi.name not in inits])
    return {name} if name else set()


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


#: initializer types whose large tensors :func:`light_graph` leaves out (weights, never shape arithmetic)
_WEIGHT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)


def light_graph(graph: onnx.GraphProto, outputs: list[str] | None = None) -> onnx.GraphProto:
    """``graph`` without its weights' values: each float initializer of more than 1,024 elements becomes a typed
    graph input. Shape inference reads initializers' values only to fold shapes (small integer tensors), so it
    infers the same shapes, without copying (and serialising) every weight. ``outputs`` replaces the outputs."""
    heavy = {i.name for i in graph.initializer if i.data_type in _WEIGHT_TYPES
             and np.prod(i.dims, dtype=np.int64) > 1024}
    out = onnx.GraphProto(name=graph.name, doc_string=graph.doc_string)
    out.node.extend(graph.node)
    out.input.extend(graph.input)
    out.input.extend(onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                     for i in graph.initializer if i.name in heavy)
    out.output.extend([onnx.helper.make_empty_tensor_value_info(t) for t in outputs] if outputs is not None
                      else graph.output)
    out.initializer.extend(i for i in graph.initializer if i.name not in heavy)
    out.sparse_initializer.extend(graph.sparse_initializer)
    out.value_info.extend(graph.value_info)
    return out


def light_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its graph as :func:`light_graph` has it (the weights' values left out)."""
    light = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name,
                            producer_version=model.producer_version, domain=model.domain,
                            model_version=model.model_version, doc_string=model.doc_string)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    light.graph.CopyFrom(light_graph(model.graph))
    return light
