"""Torch ops and modules -> sim ops, with their real shapes and dtypes.

One rule per torch op, keyed by name: an fx ``call_function`` target's name (``F.linear`` ->
``"linear"``, ``operator.add`` -> ``"add"``), a ``call_method`` name (``x.view`` -> ``"view"``),
or an ATen op's name under ``torch.export`` (``aten.linear.default`` -> ``"linear"``); the
layers kept whole under fx (``torch.nn.Linear`` and friends) have rules of their own. Shapes
and dtypes are those of the real tensors of the example micro-batch.

Unknown ops raise :class:`sim.UnsupportedOpError` naming the op. Give one a cost with
:func:`register_op`::

    import torch, sim.poptorch as poptorch

    # price torch.hypot (PopTorch has no handler for it) as one element-wise op over its two inputs
    poptorch.register_op(torch.hypot, lambda ctx: ctx.op("add", ctx.inputs))

    # or give an op (here a whole module type, kept as one node) its own cost, like a Poplar
    # codelet with a cycle estimate: vertices, worker cycles per vertex, bytes in per tile
    poptorch.register_op(MyFancyLayer, lambda ctx: ctx.custom(vertices=ctx.numel(), vertex_cycles=20))

The function receives an :class:`OpContext` and returns the graph tensor name(s) of the op's
result (one name, or a tuple/list matching a tuple result).
"""

from __future__ import annotations

import inspect
import math
import re

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from ..errors import UnsupportedOpError
from ..graph.ir import conv_attrs, spatial, spatial_attr
from . import _composite, _handlers, _precision, _state
from ._emit import (adaptive_window, average_pool, batch_of_one, bernoulli, channel_bias, const, emit, emit_map,
                    embedding_flags_refused, tuple_result)
from ._errors import error
from ._values import Lazy, sim_dtype, sim_shape

_REGISTRY: dict = {}  # user rules: callable, module class or name -> fn(ctx)


def register_op(target, fn) -> None:
    """Give ``target`` a sim cost: ``fn(ctx: OpContext)`` emits sim ops and returns the
    result's tensor name(s).

    ``target`` is a function (``torch.hypot``), a ``torch.nn.Module`` subclass
    (kept whole under torch.fx and handed over as ``ctx.module``), an ATen op
    (``torch.ops.aten.hypot.default``), a name (``"hypot"``: any function, method or ATen op of
    that name), or a ``poptorch.custom_op``'s ``"domain::name"`` (or its name alone). A registration
    replaces the built-in rule of the same target.
    """
    if not callable(fn):
        raise TypeError("register_op: fn must be callable")
    _REGISTRY[target] = fn


def custom_op_rule(domain: str, name: str):
    """The rule registered for the custom op ``domain::name`` (or ``name``), or None."""
    return _REGISTRY.get(f"{domain}::{name}") or _REGISTRY.get(name)


def unregister_op(target) -> None:
    """Remove a rule added with :func:`register_op`."""
    _REGISTRY.pop(target, None)


def _is_sym_tensor(s) -> bool:
    return isinstance(s, (str, Lazy))


def _live(s) -> bool:
    """A value on the device at run time: an activation, or a variable (a parameter or buffer of the
    model, trainable or frozen: PopTorch turns PopART's constantWeights off, so nothing computed from
    them is folded)."""
    return isinstance(s, str) or (isinstance(s, Lazy) and (s.role == "weight" or s.variable))


class OpContext:
    """What a rule sees of one torch op.

    ``args``/``kwargs`` are the real arguments (example tensors, ints, …), ``sym_args``/
    ``sym_kwargs`` the same structure with graph tensors in place of tensors (or ``None``),
    ``output`` the real result, ``module`` the layer for a whole-module node, ``builder`` the
    :class:`sim.GraphBuilder` of the graph being built.
    """

    def __init__(self, cap, node, key, desc, args, kwargs, sym_args, sym_kwargs, output, module, aten):
        self.cap = cap
        self.node = node
        self.key = key
        self.desc = desc
        self.args = args
        self.kwargs = kwargs
        self.sym_args = sym_args
        self.sym_kwargs = sym_kwargs
        self.output = output
        self.module = module
        self.aten = aten

    @property
    def builder(self):
        return self.cap.b

    @property
    def inputs(self) -> list[str]:
        """Graph tensors of every tensor argument, in argument order."""
        leaves = pytree.tree_leaves((self.sym_args, self.sym_kwargs), is_leaf=lambda x: isinstance(x, Lazy))
        return [self.cap.tensor(s) for s in leaves if _is_sym_tensor(s)]

    def numel(self) -> int:
        """Elements of the (first) output."""
        out = self._first_tensor(self.output)
        return int(out.numel()) if out is not None else 0

    @staticmethod
    def _first_tensor(value):
        for leaf in pytree.tree_leaves(value):
            if isinstance(leaf, torch.Tensor):
                return leaf
        return None

    # --- arguments --------------------------------------------------------------------------
    def arg(self, i: int, name: str | None = None, default=None):
        """Real argument ``i`` (or keyword ``name``)."""
        if name is not None and name in self.kwargs:
            return self.kwargs[name]
        return self.args[i] if i < len(self.args) else default

    def sarg(self, i: int, name: str | None = None, default=None):
        """Graph value of argument ``i`` (or keyword ``name``)."""
        if name is not None and name in self.sym_kwargs:
            return self.sym_kwargs[name]
        return self.sym_args[i] if i < len(self.sym_args) else default

    def t(self, s) -> str:
        """The graph tensor of a graph value (materialising a parameter or constant)."""
        return self.cap.tensor(s)

    def shape(self, s) -> tuple:
        return self.cap.g.tensors[self.t(s)].shape

    # --- emitting -----------------------------------------------------------------------------
    def op(self, kind: str, inputs: list[str] | None = None, attrs: dict | None = None,
           output=None, name: str | None = None):
        """Add an op of ``kind`` whose outputs have the shapes and dtypes of ``output`` (default:
        the real result); returns the output tensor name, or a tuple for a tuple result."""
        output = self.output if output is None else output
        inputs = self.inputs if inputs is None else [self.t(i) for i in inputs]
        multi = isinstance(output, (tuple, list))
        outs = list(output) if multi else [output]
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        names = self.builder.op(kind, inputs, [sim_shape(o.shape) for o in tensors], attrs,
                                name=name or self.key, out_dtypes=[sim_dtype(o.dtype) for o in tensors])
        if not multi:
            return names[0]
        it = iter(names)
        return tuple(next(it) if isinstance(o, torch.Tensor) else None for o in outs)

    def custom(self, vertices: int, vertex_cycles: float, tiles: int | None = None,
               exchange_bytes_per_tile: float = 0, flops: float = 0.0, inputs: list[str] | None = None):
        """A ``custom`` op priced by its own estimate: ``vertices`` vertices of
        ``vertex_cycles`` worker cycles each, spread over ``tiles`` tiles (default all)."""
        attrs = {"vertices": int(vertices), "vertex_cycles": float(vertex_cycles),
                 "exchange_bytes_per_tile": float(exchange_bytes_per_tile), "flops": float(flops),
                 "op": self.desc}
        if tiles is not None:
            attrs["tiles"] = int(tiles)
        return self.op("custom", inputs, attrs)

    def param(self, attr: str, transposed: bool = False):
        """Parameter ``attr`` of the layer (``ctx.module``) as a graph value: a
        :class:`Lazy`, or the output of the ops that make it (an implicit cast, weight norm);
        ``transposed``: such ops make it in the ``(in, out)`` layout of a linear weight."""
        return _param(self, attr, transposed)

    def norm_params(self, channels: tuple, gamma, beta, dtype: str):
        """A normalisation's scale and shift as graph tensors (constants when it has none)."""
        return _norm_params(self, channels, gamma, beta, dtype)

    def same(self, s):
        """No op: the result is the input (views the simulator treats as free)."""
        return s

    def unsupported(self, why: str = ""):
        raise unsupported(self.desc, self.node, why, registry_key(self.key, self.module))


def registry_key(key: str, module=None) -> str:
    """How to name an op to :func:`register_op`, as an error writes it: a module's class, else the rule key's
    name (any function, method or ATen op of that name)."""
    return f"{type(module).__module__}.{type(module).__qualname__}" if isinstance(module, nn.Module) else repr(key)


def unsupported(desc: str, node, why: str = "", key: str = "<the op>") -> UnsupportedOpError:
    """The error for an op without a rule; ``key`` is what to register its rule under, where known."""
    stack = node.meta.get("nn_module_stack")
    path = re.sub(r"^L\['self'\]\.?|^L__self__\.?", "", str(list(stack.values())[-1][0])) if stack else ""
    path = re.sub(r"^model\.?", "", path)
    where = f" (node {node.name!r}" + (f", in {path!r}" if path else "") + ")"
    reason = f": {why}" if why else ""
    return UnsupportedOpError(
        f"sim.poptorch has no cost for {desc}{where}{reason}. Give it one with "
        f"sim.poptorch.register_op({key}, fn), where fn(ctx) returns ctx.op(<a sim op kind>, "
        "ctx.inputs) or ctx.custom(vertices=..., vertex_cycles=...) (see docs/poptorch.md)")


# --- helpers ------------------------------------------------------------------------------------
def _pair(v, default: int) -> tuple[int, int]:
    """(height, width) of a 2-D kernel, stride or padding as PyTorch takes it: one int, a pair, or
    a one-element / empty sequence (``default`` when None or empty)."""
    if v is None or (isinstance(v, (tuple, list)) and len(v) <= 1):
        return spatial(v[0] if v else default)
    return spatial(v)


def _dims(dim, ndim: int) -> list[int]:
    if dim is None:
        return list(range(ndim))
    if isinstance(dim, (tuple, list)):
        return sorted(int(d) % ndim for d in dim) if ndim else []
    return [int(dim) % ndim] if ndim else []


def _scalar_const(ctx: OpContext, dtype: str) -> str:
    cap = ctx.cap
    saved, cap.b._scopes = cap.b._scopes, []
    name = cap.g.unique_tensor_name(f"{ctx.key}/scalar")
    cap.g.add_tensor(name, (1,), dtype, "constant")
    cap.b._scopes = saved
    return name


# --- rules --------------------------------------------------------------------------------------
def _unary(kind):
    def rule(ctx: OpContext):
        return ctx.op(kind, [ctx.sarg(0, "input")])
    return rule


def _binary(kind):
    def rule(ctx: OpContext):
        a, b = ctx.sarg(0, "input"), ctx.sarg(1, "other")
        if ctx.key == "rsub":
            a, b = b, a
        ra, rb = (ctx.arg(0, "input"), ctx.arg(1, "other")) if ctx.key != "rsub" else (ctx.arg(1), ctx.arg(0))
        if _is_sym_tensor(a) and _is_sym_tensor(b):
            return ctx.op(kind, [a, b])
        tensor, scalar = (a, rb) if _is_sym_tensor(a) else (b, ra)
        tensor_first = _is_sym_tensor(a)
        if isinstance(scalar, torch.Tensor):
            scalar = float(scalar)
        if kind == "mul":
            return ctx.op("scale", [tensor], {"factor": float(scalar)})
        # the rest read the scalar as a constant, a division too: PopTorch lowers aten::div to PopART's Div
        # (AtenHandlers.gen.cpp divHandler), which no PopART pattern makes a multiply, so popops divides by it
        const = _scalar_const(ctx, sim_dtype(ctx.output.dtype))
        ins = [tensor, const] if tensor_first else [const, tensor]
        return ctx.op(kind, ins)
    return rule


def _neg(ctx: OpContext):
    return ctx.op("scale", [ctx.sarg(0)], {"factor": -1.0})


def _view(ctx: OpContext):
    x = ctx.sarg(0, "input")
    if not _is_sym_tensor(x):
        return None
    if tuple(ctx.output.shape) == tuple(ctx.args[0].shape):
        return x if ctx.key in ("contiguous", "alias", "lift_fresh", "clone_view") else ctx.op("identity", [x])
    return ctx.op("reshape", [x])


def _identity(ctx: OpContext):
    return ctx.sarg(0, "input")


def _detach(ctx: OpContext):
    return ctx.op("detach", [ctx.sarg(0, "input")])


def _clone(ctx: OpContext):
    """``x.clone()``: PopTorch's cloneHandler makes a PopART Identity, which the PostNRepl pattern removes
    (willow/src/patterns/postnrepl.cpp): a view, no copy."""
    return ctx.op("identity", [ctx.sarg(0, "input")])


def _copy_into(ctx: OpContext):
    """``dst.copy_(src)``: under torch.export a buffer updated in forward (CLIP's feature queue) is
    written back so: a copy of ``src`` into the buffer (kept as an in-place update: map_node)."""
    src = ctx.sarg(1, "src")
    if not _is_sym_tensor(src):
        return ctx.sarg(0)
    return ctx.op("copy", [src], name="buffer_write")


def _cast(ctx: OpContext):
    x = ctx.sarg(0, "input")
    if not isinstance(ctx.output, torch.Tensor):
        return None
    src = ctx.args[0]
    if isinstance(src, torch.Tensor) and sim_dtype(src.dtype) == sim_dtype(ctx.output.dtype):
        return x
    return ctx.op("cast", [x], {"to": sim_dtype(ctx.output.dtype)})


def _transpose(ctx: OpContext):
    x = ctx.sarg(0, "input")
    src = ctx.args[0]
    n = src.dim()
    key = ctx.key.rstrip("_")  # t_, transpose_, swapaxes_: in place, the same view
    if key in ("t", "T", "numpy_T"):
        perm = list(range(n))[::-1]
    elif key in ("permute",):
        dims = ctx.args[1:] if len(ctx.args) > 2 or not isinstance(ctx.arg(1, "dims"), (list, tuple)) \
            else ctx.arg(1, "dims")
        perm = [int(d) % n for d in dims]
    else:  # transpose / swapaxes / movedim of two dims
        d0, d1 = int(ctx.arg(1)) % n, int(ctx.arg(2)) % n
        perm = list(range(n))
        if key == "movedim":
            perm.pop(d0)
            perm.insert(d1, d0)
        else:
            perm[d0], perm[d1] = perm[d1], perm[d0]
    moved = [p for i, p in enumerate(perm) if p != i]
    if n < 2 or all(src.shape[p] == 1 for p in moved):
        return ctx.op("reshape", [x])
    if isinstance(x, Lazy) and x.role == "weight" and perm == list(range(n - 2)) + [n - 1, n - 2]:
        # a weight transposed (GPT-2's SerializedLinear: x @ W.t()): the weight in the matmul's layout,
        # a real transpose only if the model also reads it untransposed (Capture.weight)
        return ctx.cap.weight(x, transposed=True)
    if _is_weight(ctx, x) and not isinstance(x, Lazy):  # weights concatenated, then transposed: a view
        return _weight_view(ctx, ctx.op("reshape", [x], {"perm": perm}, name="transpose"))
    return ctx.op("transpose", [x], {"perm": perm})


def _repeat(ctx: OpContext):
    """``Tensor.repeat`` and ``repeat_interleave`` with a whole-number count: a broadcast view of the input.
    PopTorch's repeatHandler (TensorOps.cpp) makes a Reshape, an Expand and a Reshape (no Tile), and torch's
    repeat_interleave composite an unsqueeze, an expand, a clone (PopTorch's Identity, removed) and a flatten;
    PopART runs each in place, views of the input (ExpandInplaceOpx broadcasts it). Its gradient sums the
    copies back (``sim.graph.training``: a reshape that grows)."""
    if ctx.key == "repeat_interleave" and isinstance(ctx.arg(1, "repeats"), (torch.Tensor, torch.fx.Proxy)):
        ctx.unsupported("repeat_interleave with a tensor of repeat counts (an output shape that depends on "
                        "values) has no rule; give a whole-number count")
    return ctx.op("reshape", [ctx.sarg(0, "input")], name="repeat")


def _getattr(ctx: OpContext):
    attr = ctx.arg(1)
    if attr in ("T", "mT", "H", "mH"):
        ctx.key = "t"
        return _transpose(ctx)
    if attr in ("data", "real"):
        return ctx.sarg(0)
    obj, real = ctx.sarg(0), ctx.args[0]
    if isinstance(obj, (tuple, list)) and isinstance(real, tuple) and hasattr(real, attr):
        # a named result (torch.return_types: topk, sort, max/min/median with dim): .values, .indices
        field = getattr(real, attr)
        return next(o for o, r in zip(obj, real) if r is field)
    ctx.unsupported(f"attribute {attr!r}")


def _linear(ctx: OpContext, x=None, w=None, bias=None, transposed=False):
    """``x @ W^T + b``; ``transposed``: ``w`` is already ``W^T``. A 1-D ``x`` is a row, as in
    torch (the graph's matmul is 2-D)."""
    if x is None:
        x, w, bias = ctx.sarg(0, "input"), ctx.sarg(1, "weight"), ctx.sarg(2, "bias")
    if transposed:
        wt = ctx.t(w)
    elif isinstance(w, Lazy):
        wt = ctx.cap.weight(w, transposed=True)  # stored (in, out) for x @ W, as the zoo does
    else:
        src = ctx.t(w)
        shape = ctx.shape(w)
        wt = ctx.builder.op("transpose", [src], [shape[:-2] + (shape[-1], shape[-2])], {"perm": [1, 0]},
                            name="weight_t", out_dtypes=[ctx.cap.g.tensors[src].dtype])[0]
    y = _matmul(ctx, x, wt)
    if _is_sym_tensor(bias):
        y = ctx.op("add", [y, bias], name="add")
    return y


def _matmul(ctx: OpContext, a=None, b=None, attrs=None):
    if a is None:
        a, b = ctx.sarg(0, "input"), ctx.sarg(1, "other")
        if ctx.key == "__rmatmul__":
            a, b = b, a
    ta, tb = ctx.t(a), ctx.t(b)
    sa, sb = ctx.shape(a), ctx.shape(b)
    dt = ctx.cap.g.tensors[ta].dtype
    if len(sa) == 1:
        ta = ctx.builder.op("reshape", [ta], [(1,) + sa], name="as_row", out_dtypes=[dt])[0]
        sa = (1,) + sa
    if len(sb) == 1:
        tb = ctx.builder.op("reshape", [tb], [sb + (1,)], name="as_column",
                            out_dtypes=[ctx.cap.g.tensors[tb].dtype])[0]
        sb = sb + (1,)
    batch = torch.broadcast_shapes(torch.Size(sa[:-2]), torch.Size(sb[:-2]))
    shape = tuple(batch) + (sa[-2], sb[-1])
    out = ctx.builder.op("matmul", [ta, tb], [shape], attrs, name="matmul",
                         out_dtypes=[sim_dtype(ctx.output.dtype)])[0]
    if shape != sim_shape(ctx.output.shape):
        out = ctx.op("reshape", [out])
    return out


def _attention(ctx: OpContext):
    """scaled_dot_product_attention as torch's math decomposition, which PopTorch lowers op by op: q and k^T
    each scaled by the square root of the scale, q @ k^T, (+ mask), softmax, (dropout), @ v. torch 2.0's
    ``_scaled_dot_product_attention_math`` (PopTorch 3.4's torch) divides both by ``E ** 0.25`` (popops
    DIVIDE by a constant: PopART's Div); torch 2.1's, which takes ``scale=``, multiplies by its square root."""
    q, k, v = ctx.sarg(0, "query"), ctx.sarg(1, "key"), ctx.sarg(2, "value")
    rq, rk = ctx.args[0], ctx.args[1]
    mask = ctx.sarg(3, "attn_mask")
    dropout_p = float(ctx.arg(4, "dropout_p", 0.0) or 0.0)
    b = ctx.builder
    dt = sim_dtype(rq.dtype)
    L, S, E = rq.shape[-2], rk.shape[-2], rq.shape[-1]
    key_shape = tuple(rk.shape)
    if ctx.arg(7, "enable_gqa", False) and rq.dim() >= 3 and rk.shape[-3] != rq.shape[-3]:
        # torch 2.5's grouped-query attention (not in PopTorch 3.4's torch): its math path repeats each key
        # and value head for the query heads sharing it (repeat_interleave along dim -3), a broadcast view each
        # as _repeat makes it
        key_shape = key_shape[:-3] + (rq.shape[-3],) + key_shape[-2:]
        value_shape = tuple(ctx.args[2].shape[:-3]) + (rq.shape[-3],) + tuple(ctx.args[2].shape[-2:])
        k = b.op("reshape", [ctx.t(k)], [key_shape], name="repeat", out_dtypes=[dt])[0]
        v = b.op("reshape", [ctx.t(v)], [value_shape], name="repeat", out_dtypes=[sim_dtype(ctx.args[2].dtype)])[0]
    if ctx.arg(5, "is_causal", False) and not _is_sym_tensor(mask):
        # torch's SDPA builds the causal bias from constants (a lower-triangular mask filled with -inf),
        # which PopTorch folds into one constant (L, S) tensor: added to the scores as a mask is
        mask = b.constant(f"{ctx.node.name}_causal_mask", (L, S), dt)
    batch = tuple(torch.broadcast_shapes(rq.shape[:-2], key_shape[:-2]))
    perm = list(range(len(key_shape)))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    kt = b.op("transpose", [ctx.t(k)], [tuple(key_shape[:-2]) + (E, S)], {"perm": perm},
              name="key_t", out_dtypes=[dt])[0]
    scale = ctx.arg(6, "scale")

    def scaled(x, shape, name):
        if scale is None:
            return b.op("div", [x, _scalar_const(ctx, dt)], [shape], name=name, out_dtypes=[dt])[0]
        return b.op("scale", [x], [shape], {"factor": math.sqrt(float(scale))}, name=name, out_dtypes=[dt])[0]
    q = scaled(ctx.t(q), tuple(rq.shape), "query_scale")
    kt = scaled(kt, tuple(key_shape[:-2]) + (E, S), "key_scale")
    scores = b.op("matmul", [q, kt], [batch + (L, S)], name="scores", out_dtypes=[dt])[0]
    if _is_sym_tensor(mask):
        scores = b.op("add", [scores, ctx.t(mask)], [batch + (L, S)], name="mask", out_dtypes=[dt])[0]
    probs = b.op("softmax", [scores], [batch + (L, S)], {"axis": -1}, name="softmax", out_dtypes=[dt])[0]
    if dropout_p:
        probs = b.op("dropout", [probs], [batch + (L, S)], {"p": dropout_p}, name="dropout", out_dtypes=[dt])[0]
    return ctx.op("matmul", [probs, v], name="context")


def _addmm(ctx: OpContext):
    """addmm / baddbmm / addmv: ``beta * input + alpha * (a @ b)``, as PopTorch lowers them: addmm a Gemm, which
    PopART's ONNX pass makes MatMul, Scale by each factor (an identity, removed, for 1) and Add; baddbmm (BlasOps.cpp
    baddbmmHandler) MatMul, Mul by alpha, Mul of the input by beta and Add whatever the factors (a Mul by a
    constant 1 stays); addmv (addmvHandler) the same, without the input's term when beta is 0. The result has the
    product's shape."""
    bias, a, b = ctx.sarg(0), ctx.sarg(1), ctx.sarg(2)
    beta, alpha = ctx.arg(3, "beta", 1), ctx.arg(4, "alpha", 1)
    y = _matmul(ctx, a, b)
    if ctx.key in ("baddbmm", "addmv"):  # addmvHandler: the same, but a factor of 0 leaves its term out
        y = ctx.op("scale", [y], {"factor": float(alpha)}, name="alpha")
        if ctx.key == "addmv" and beta == 0:
            return y
        bias = ctx.op("scale", [bias], {"factor": float(beta)}, output=ctx.args[0], name="beta")
        return ctx.op("add", [y, bias], name="add")
    if alpha != 1:
        y = ctx.op("scale", [y], {"factor": float(alpha)}, name="alpha")
    if beta == 0:  # torch ignores the input then
        return y
    if beta != 1:
        bias = ctx.op("scale", [bias], {"factor": float(beta)}, output=ctx.args[0], name="beta")
    return ctx.op("add", [y, bias], name="add")


def _conv(ctx: OpContext, x=None, w=None, bias=None, stride=1, padding=0, groups=1, dilation=1):
    if x is None:
        x, w, bias = ctx.sarg(0, "input"), ctx.sarg(1, "weight"), ctx.sarg(2, "bias")
        if ctx.aten and ctx.key == "convolution":
            if ctx.arg(6):
                ctx.unsupported("transposed convolutions have no rule")
            stride, padding, dilation, groups = ctx.arg(3), ctx.arg(4), ctx.arg(5), ctx.arg(8)
        else:
            stride, padding, groups = ctx.arg(3, "stride", 1), ctx.arg(4, "padding", 0), ctx.arg(6, "groups", 1)
            dilation = ctx.arg(5, "dilation", 1)
    wt = ctx.cap.weight(w) if isinstance(w, Lazy) else ctx.t(w)
    wshape = ctx.cap.g.tensors[wt].shape
    if len(wshape) != 4:
        ctx.unsupported("only 2-D convolutions (Conv2d) have a rule")
    kernel = tuple(int(k) for k in wshape[2:])
    if isinstance(padding, str):  # "same": the dilated kernel's half span
        padding = tuple(d * (k - 1) // 2 for k, d in zip(kernel, _pair(dilation, 1))) if padding == "same" else 0
    stride_hw = _pair(stride, 1)
    if stride_hw[0] != stride_hw[1]:
        ctx.unsupported(f"stride {stride_hw[0]}x{stride_hw[1]} differs along the two axes (the simulator's conv2d "
                        "takes one stride)")
    y = ctx.op("conv2d", [x, wt], conv_attrs(kernel, stride_hw[0], _pair(padding, 0), int(groups or 1),
                                             _pair(dilation, 1)), name="conv2d")
    if _is_sym_tensor(bias):
        y = channel_bias(ctx, y, bias)
    return y


def _norm_params(ctx: OpContext, channels: tuple, gamma, beta, dtype):
    """Scale and shift (constants of ones/zeros when the layer has none). One without the other is refused, as
    PopTorch's normalisation handlers refuse it (NormalizationOps.cpp maybeInitializeAffineParamConstants:
    "Either both should be defined, or neither")."""
    if (gamma is None) != (beta is None):
        ctx.unsupported(f"a normalisation with a {'shift' if gamma is None else 'scale'} and no "
                        f"{'scale' if gamma is None else 'shift'} (a LayerNorm with bias=False), which PopTorch's "
                        "normalisation handlers refuse (NormalizationOps.cpp: both or neither): give the layer both, "
                        "or neither and multiply by the weight after it")
    def one(s, label):
        if _is_sym_tensor(s):
            return ctx.t(s)
        saved, ctx.builder._scopes = ctx.builder._scopes, []
        name = ctx.cap.g.unique_tensor_name(f"{ctx.key}/{label}")
        ctx.cap.g.add_tensor(name, channels, dtype, "constant")
        ctx.builder._scopes = saved
        return name
    return one(gamma, "gamma"), one(beta, "beta")


def _batch_norm(ctx: OpContext, x=None, gamma=None, beta=None, stats=()):
    if x is None:
        x = ctx.sarg(0, "input")
        if ctx.node.target is not torch.nn.functional.batch_norm:  # torch/aten order
            gamma, beta, stats = ctx.sarg(1, "weight"), ctx.sarg(2, "bias"), (ctx.sarg(3), ctx.sarg(4))
        else:  # F.batch_norm(input, running_mean, running_var, weight, bias, ...)
            gamma, beta = ctx.sarg(3, "weight"), ctx.sarg(4, "bias")
            stats = (ctx.sarg(1, "running_mean"), ctx.sarg(2, "running_var"))
    for s in stats:
        if isinstance(s, Lazy):
            ctx.t(s)  # running statistics live on the device
    out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
    c = sim_shape(out.shape)[1] if out.dim() > 1 else 1
    g, b = _norm_params(ctx, (c,), gamma, beta, sim_dtype(out.dtype))
    y = ctx.op("batchnorm", [x, g, b], output=out, name="batchnorm")
    if isinstance(ctx.output, (tuple, list)):
        return (y,) + (None,) * (len(ctx.output) - 1)
    return y


def _layer_norm(ctx: OpContext, x=None, gamma=None, beta=None, eps=1e-5):
    if x is None:
        x, gamma, beta = ctx.sarg(0, "input"), ctx.sarg(2, "weight"), ctx.sarg(3, "bias")
        eps = ctx.arg(4, "eps", 1e-5)
    out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
    shape = tuple(ctx.arg(1, "normalized_shape", (out.shape[-1],)) or (out.shape[-1],))
    g, b = _norm_params(ctx, sim_shape(shape), gamma, beta, sim_dtype(out.dtype))
    y = ctx.op("layernorm", [x, g, b], {"eps": float(eps)}, output=out, name="layernorm")
    if isinstance(ctx.output, (tuple, list)):
        return (y,) + (None,) * (len(ctx.output) - 1)
    return y


def _softmax(ctx: OpContext, dim=None):
    x = ctx.sarg(0, "input")
    if dim is None:
        dim = ctx.arg(1, "dim", -1)
    dim = -1 if dim is None else int(dim)
    attrs = {"axis": dim}
    if "log" in ctx.key:
        attrs["log"] = True
    return ctx.op("softmax", [x], attrs, name="log_softmax" if "log" in ctx.key else "softmax")


def _dropout_call(ctx: OpContext, p, training):
    """(input, p) of a dropout call (``p`` and ``training`` from its module, else its arguments);
    p is None when it drops nothing (not training, or p 0)."""
    x = ctx.sarg(0, "input")
    if p is None:
        p = ctx.arg(1, "p", 0.5)
        training = ctx.arg(2, "training" if not ctx.aten else "train", True)
    return x, (float(p) if training and p else None)


def _dropout(ctx: OpContext, p=None, training=None):
    x, p = _dropout_call(ctx, p, training)
    return x if p is None else ctx.op("dropout", [x], {"p": p})


def _masked(ctx: OpContext, x, shape: tuple, p: float):
    """``x`` times a kept-with-probability-1-p mask of ``shape`` scaled by 1 / (1 - p), broadcast (the
    mask priced as a dropout of a tensor of that shape: poprand::shapedDropout's bernoulli and scale)."""
    src = ctx.args[0]
    noise = torch.empty(shape, dtype=src.dtype)
    mask = ctx.op("dropout", [ctx.builder.constant(f"{ctx.node.name}_noise", shape, sim_dtype(src.dtype))],
                  {"p": p}, output=noise, name="mask")
    return ctx.op("mul", [x, mask], name="mul")


def _stochastic_depth(ctx: OpContext):
    """torchvision.ops.stochastic_depth (EfficientNet, ConvNeXt, Swin): the input itself at inference or
    with ``p`` 0; in training each sample (``mode="row"``) or the whole batch (``"batch"``) is kept with
    probability 1 - p and scaled by 1 / (1 - p): a random mask of that shape multiplying the input."""
    x = ctx.sarg(0, "input")
    p, mode, training = float(ctx.arg(1, "p")), ctx.arg(2, "mode"), ctx.arg(3, "training", True)
    if not training or not p:
        return x
    src = ctx.args[0]
    return _masked(ctx, x, (src.shape[0],) + (1,) * (src.dim() - 1) if mode == "row" else (1,) * src.dim(), p)


def _feature_dropout(ctx: OpContext, p=None, training=None):
    """Channel dropout (``dropout1d`` / ``2d`` / ``3d``, aten ``feature_dropout``) as PopTorch lowers it
    (poptorch popart_canonicalization/DropoutOps.cpp ``featureDropoutHandler``): PopART's ShapedDropout
    with a mask of N x C and singleton dimensions after (``poprand::shapedDropout``: a bernoulli mask of
    that shape, scaled, multiplying the input); PopTorch's error below two dimensions."""
    x, p = _dropout_call(ctx, p, training)
    if p is None:
        return x
    src = ctx.args[0]
    if src.dim() < 2:
        raise error("Feature dropout requires at least 2 dimensions in the input")
    return _masked(ctx, x, tuple(src.shape[:2]) + (1,) * (src.dim() - 2), p)


def _alpha_dropout(ctx: OpContext, p=None, training=None):
    """Alpha dropout (``nn.AlphaDropout``, ``FeatureAlphaDropout``; aten ``alpha_dropout`` and
    ``feature_alpha_dropout``), which PopTorch has no handler for: ATen's composite reaches its
    dispatcher as ops it lowers one by one (Dropout.cpp ``_dropout_impl``): a bernoulli noise of the
    input's shape (N x C and singletons after for the feature form) kept with probability 1 - p
    (bernoulliHandler's uniform, compare and cast), ``b = (noise - 1) alpha' a + alpha' a p`` and
    ``noise a`` (four maps by constants: alpha' = 1.7581, a = ((alpha'^2 p + 1)(1 - p))^-1/2), then
    ``input x noise + b``; the input itself at inference."""
    x, p = _dropout_call(ctx, p, training)
    if p is None:
        return x
    src = ctx.args[0]
    shape = tuple(src.shape[:2]) + (1,) * (src.dim() - 2) if "feature" in ctx.key else tuple(src.shape)
    noise = bernoulli(ctx, shape, src.dtype, const(ctx, (1,), src.dtype, "keep"))
    b = noise
    for kind, label in (("add", "minus_one"), ("mul", "alpha_a"), ("add", "alpha_a_p")):
        b = emit(ctx, kind, [b, const(ctx, (1,), src.dtype, label)], shape, src.dtype, name=f"b_{kind}")
    scaled = emit(ctx, "mul", [noise, const(ctx, (1,), src.dtype, "a")], shape, src.dtype, name="noise_a")
    kept_input = emit(ctx, "mul", [x, scaled], tuple(src.shape), src.dtype, name="mul")
    return ctx.op("add", [kept_input, b], name="add")


def _pool(kind):
    def rule(ctx: OpContext, kernel=None, stride=None, padding=0):
        x = ctx.sarg(0, "input")
        src = ctx.args[0]
        out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
        adaptive = ctx.key.startswith("adaptive") or kernel == "adaptive"
        if adaptive:
            kernel, stride = adaptive_window(ctx, tuple(src.shape[-2:]), tuple(out.shape[-2:]))
            padding = 0
        elif kernel is None:
            kernel = ctx.arg(1, "kernel_size")
            stride = ctx.arg(2, "stride") or kernel
            padding = ctx.arg(3, "padding", 0)
        attrs = {"kernel": spatial_attr(_pair(kernel, 1)), "stride": spatial_attr(_pair(stride or kernel, 1)),
                 "padding": spatial_attr(_pair(padding, 0))}
        if kind == "avgpool" and not adaptive:
            return average_pool(ctx, x, out, attrs, _pair(padding, 0))
        y = ctx.op(kind, [x], attrs, output=out, name=kind)
        if isinstance(ctx.output, (tuple, list)):
            return (y,) + (None,) * (len(ctx.output) - 1)
        return y
    return batch_of_one(rule, fields=2)  # an unbatched (C, H, W) input: poolingHandler pools it as (1, C, H, W)


def _embedding(ctx: OpContext, ids=None, table=None):
    m = ctx.module
    if m is not None:
        embedding_flags_refused(ctx, m.sparse, m.scale_grad_by_freq, m.max_norm)
    elif ctx.node.target is torch.nn.functional.embedding:  # (input, weight, padding_idx, max_norm, norm_type,
        # scale_grad_by_freq, sparse)
        embedding_flags_refused(ctx, ctx.arg(6, "sparse", False), ctx.arg(5, "scale_grad_by_freq", False),
                                ctx.arg(3, "max_norm", None))
    else:  # torch.embedding / aten.embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
        embedding_flags_refused(ctx, ctx.arg(4, default=False), ctx.arg(3, default=False))
    if ids is None:
        if ctx.node.target is torch.nn.functional.embedding:  # F.embedding(input, weight)
            ids, table = ctx.sarg(0, "input"), ctx.sarg(1, "weight")
        else:  # torch.embedding / aten.embedding(weight, indices)
            table, ids = ctx.sarg(0, "weight"), ctx.sarg(1, "indices")
    return ctx.op("gather", [ids, table], name="gather")


def _is_weight(ctx: OpContext, s) -> bool:
    """A trainable parameter, or a view of such (``weight_view``)."""
    if isinstance(s, Lazy):
        return s.role == "weight"
    return isinstance(s, str) and ctx.cap.g.tensors[s].priced_role == "weight"


def _weight_view(ctx: OpContext, out: str) -> str:
    """Mark ``out``, a concatenation or transpose of weights, as a view of weights: PopART lays the
    weights out through it for the matmul that reads it (the ops' unwinding), as the zoo's
    ``GraphBuilder.linear`` pieces, so the matmul is a weight's (``fullyConnectedPass``)."""
    ctx.cap.g.tensors[out].weight_view = True
    return out


def _concat(ctx: OpContext):
    """torch.cat / stack: one concat (PopART's Concat). An input with no elements adds nothing to the
    result (torch skips an empty 1-D one whatever the other inputs' shape: Hugging Face's KV cache starts
    as ``torch.tensor([])``), so it is left out, as it holds no data on the device."""
    given = [(s, real) for s, real in zip(ctx.sarg(0, "tensors"), ctx.arg(0, "tensors")) if _is_sym_tensor(s)]
    tensors = [s for s, real in given if not (isinstance(real, torch.Tensor) and real.numel() == 0)]
    if len(tensors) == 1 < len(given) and ctx.key in ("cat", "concat", "concatenate"):
        return tensors[0]  # the one input with elements is the result
    dim = int(ctx.arg(1, "dim", 0) or 0)
    out = ctx.op("concat", tensors, {"axis": dim}, name="concat")
    return _weight_view(ctx, out) if tensors and all(_is_weight(ctx, t) for t in tensors) else out


def _atleast(shape: tuple, helper: str) -> tuple:
    """The shape ATen views a stacking helper's input as (``atleast_1d/2d/3d``, or
    column_stack's column)."""
    n = len(shape)
    if helper in ("vstack", "row_stack"):
        return shape if n >= 2 else (1,) * (2 - n) + shape
    if helper == "dstack":
        return {0: (1, 1, 1), 1: (1,) + shape + (1,), 2: shape + (1,)}.get(n, shape)
    if helper == "column_stack":
        return shape if n >= 2 else (max(1, math.prod(shape)), 1)
    return shape if n >= 1 else (1,)  # hstack


#: the concatenation axis of each of torch's stacking helpers, given its inputs' viewed rank
_STACKS = {"vstack": lambda rank: 0, "row_stack": lambda rank: 0, "column_stack": lambda rank: 1,
           "dstack": lambda rank: 2, "hstack": lambda rank: 0 if rank == 1 else 1}


def _stack_helper(ctx: OpContext):
    """vstack / row_stack / hstack / column_stack / dstack, as ATen composes them: each input
    viewed with the rank the helper gives it (a free reshape) and one concat (PopART's Concat)
    along the helper's axis."""
    pieces = []
    for s, real in zip(ctx.sarg(0, "tensors"), ctx.arg(0, "tensors")):
        if not _is_sym_tensor(s):
            continue
        shape = _atleast(tuple(real.shape), ctx.key)
        if shape != tuple(real.shape):
            t = ctx.t(s)
            s = ctx.builder.op("reshape", [t], [shape], name="atleast", out_dtypes=[ctx.cap.g.tensors[t].dtype])[0]
        pieces.append(s)
    rank = len(ctx.output.shape)
    return ctx.op("concat", pieces, {"axis": _STACKS[ctx.key](rank)}, name="concat")


def _getitem(ctx: OpContext):
    obj, idx = ctx.sarg(0), ctx.arg(1)
    if isinstance(obj, (tuple, list)):
        return obj[idx]
    if isinstance(obj, dict):
        return obj.get(idx)
    if not _is_sym_tensor(obj):
        return None
    index_tensors = [s for s in pytree.tree_leaves(ctx.sym_args[1], is_leaf=lambda v: isinstance(v, Lazy))
                     if _is_sym_tensor(s)]
    if any(isinstance(v, torch.Tensor) and v.dtype == torch.bool for v in pytree.tree_leaves(idx)):
        ctx.unsupported("x[mask] with a boolean mask tensor (its output's shape depends on the mask's values; "
                        "PopTorch compiles static shapes only): keep the shape with torch.where(mask, x, 0) or "
                        "x * mask, or select with indices whose count is fixed")
    if index_tensors:
        if isinstance(idx, tuple):
            from ._ops_tensor import leading_index
            leading = leading_index(ctx, obj, idx, ctx.sym_args[1])
            if leading is not None:
                return leading
        return ctx.op("gather", [index_tensors[0], obj], name="index")
    if tuple(ctx.output.shape) == tuple(ctx.args[0].shape):
        return obj
    shape = tuple(ctx.args[0].shape)
    picked = _picked_axis(idx, shape)
    if picked is not None:
        return _select(ctx, obj, shape, *picked)
    return ctx.op("slice", [obj], {"index": str(idx), **_index_region(idx, shape)}, name="slice")


def _picked_axis(idx, shape: tuple):
    """``(axis, index)`` when ``x[idx]`` picks one position of one axis with an integer and keeps every
    other axis whole (``x[0]``, ``x[:, 1]``, ``x[..., 2, :]``), else None."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if sum(i is Ellipsis for i in idx) > 1 or len(idx) - (Ellipsis in idx) > len(shape):
        return None
    if Ellipsis in idx:
        at = idx.index(Ellipsis)
        idx = idx[:at] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[at + 1:]
    ints = [(d, i) for d, i in enumerate(idx) if isinstance(i, int) and not isinstance(i, bool)]
    rest = [i for i in idx if not (isinstance(i, int) and not isinstance(i, bool))]
    if len(ints) != 1 or any(i != slice(None) for i in rest):
        return None
    return ints[0]


def _select(ctx: OpContext, x, shape: tuple, axis: int, index: int, output=None):
    """``x`` at ``index`` of ``axis``, the axis dropped, as PopTorch lowers ``aten::select`` (and an integer
    index, ``unbind``): a PopART Slice of one position and a Squeeze, both views, here one ``slice`` op. Its
    region lets the backward pass join the picked pieces' gradients into one concatenation, as PopART's PadSum
    does (sim/graph/training.py ``give_slice``; the Squeeze's gradient a free reshape), not a zero pad and an
    add per piece."""
    axis %= len(shape)
    index %= shape[axis]
    attrs = {"index": str(index), "axis": axis, "start": index, "stop": index + 1}
    return ctx.op("slice", [x], attrs, output=output, name="slice")


def _index_region(idx, shape: tuple) -> dict:
    """``{axis, start, stop}`` of ``x[idx]`` when the index slices one axis with step 1 and keeps
    every other whole (``h[..., :64]``, ``h[:, :, 128:]``), as :func:`_split`; else nothing."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if sum(i is Ellipsis for i in idx) > 1 or not all(isinstance(i, slice) or i is Ellipsis for i in idx):
        return {}
    if Ellipsis in idx:
        at = idx.index(Ellipsis)
        idx = idx[:at] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[at + 1:]
    cut = [(d, i) for d, i in enumerate(idx) if i != slice(None)]
    if len(cut) != 1 or len(idx) > len(shape):
        return {}
    axis, piece = cut[0]
    start, stop, step = piece.indices(shape[axis])
    return {"axis": axis, "start": start, "stop": stop} if step == 1 and stop > start else {}


def _split(ctx: OpContext):
    """Slices of ``x``; where a slice keeps ``x``'s rank and its region along one axis is known (the
    pieces of a split or chunk, an ATen slice of step 1, a narrow), the ``axis`` / ``start`` /
    ``stop`` the backward pass needs to assemble the pieces' gradients as PopART's PadSum does
    (one concatenation, sim/graph/training.py ``give_slice``), not a zero pad and an add per piece."""
    x = ctx.sarg(0, "input")
    outs, shape = ctx.output, tuple(ctx.args[0].shape)
    if ctx.key == "select" and isinstance(outs, torch.Tensor) and len(outs.shape) == len(shape) - 1:
        return _select(ctx, x, shape, int(ctx.arg(1, "dim", 0)), int(ctx.arg(2, "index", 0)))
    if ctx.key == "unbind" and not isinstance(outs, torch.Tensor):
        axis = int(ctx.arg(1, "dim", 0))
        return tuple(_select(ctx, x, shape, axis, i, output=o) for i, o in enumerate(outs))
    if isinstance(outs, torch.Tensor):
        return ctx.op("slice", [x], _slice_region(ctx, shape, tuple(outs.shape)), name="slice")
    attrs = [{"piece": i} for i in range(len(outs))]
    ranks_kept = all(len(o.shape) == len(shape) for o in outs)  # not an unbind, which drops the axis
    axis = next((d for d in range(len(shape)) if any(o.shape[d] != shape[d] for o in outs)), None) \
        if ranks_kept else None
    if axis is not None and sum(o.shape[axis] for o in outs) == shape[axis]:
        start = 0
        for a, o in zip(attrs, outs):  # the pieces tile the axis in order
            a.update(axis=axis, start=start, stop=start + o.shape[axis])
            start += o.shape[axis]
    return tuple(Lazy(o, f"{ctx.key}_const", "constant") if o.numel() == 0  # an empty piece: no data
                 else ctx.op("slice", [x], a, output=o, name="slice") for a, o in zip(attrs, outs))


def _slice_region(ctx: OpContext, shape: tuple, out: tuple) -> dict:
    """``{axis, start, stop}`` of a one-output slice that keeps the rank (ATen ``slice`` of step 1,
    ``narrow``), else nothing."""
    if len(out) != len(shape) or ctx.key not in ("slice", "narrow"):
        return {}
    axis = int(ctx.arg(1, "dim", 0)) % len(shape)
    if ctx.key == "slice" and ctx.arg(4, "step", 1) not in (None, 1):
        return {}
    start = ctx.arg(2, "start", 0)
    start = 0 if start is None else int(start)
    start = min(max(start + shape[axis] if start < 0 else start, 0), shape[axis])
    return {"axis": axis, "start": start, "stop": start + out[axis]}


def _reduce(kind):
    def rule(ctx: OpContext):
        x = ctx.sarg(0, "input")
        src = ctx.args[0]
        dim = ctx.arg(1, "dim")
        if isinstance(dim, torch.Tensor):
            ctx.unsupported("the element-wise form has no rule")
        keep = bool(ctx.arg(2, "keepdim", False)) if not isinstance(ctx.arg(2), torch.dtype) else False
        axes = _dims(dim, src.dim())
        return ctx.op(kind, [x], {"axes": axes, "keepdims": keep}, name=kind)
    return rule


#: an unreduced loss's element-wise terms and those of its gradient
_ELEMENTWISE_LOSSES = {"mse": (["sub", "mul"], ["sub", "mul", "scale"]), "l1": (["sub", "abs"], ["sub", "sign", "mul"])}


#: torch's reduction enum (aten's ``int reduction``) by value
_REDUCTIONS = ("none", "mean", "sum")


#: where F.cross_entropy / F.nll_loss (input, target, weight, size_average, ignore_index, reduce, reduction,
#: label_smoothing) and aten's cross_entropy_loss / nll_loss_nd / nll_loss_forward (self, target, weight,
#: reduction, ignore_index, label_smoothing) take each option: (functional, aten) positions
_CE_ARGS = {"weight": (2, 2), "ignore_index": (4, 4), "reduction": (6, 3), "label_smoothing": (7, 5)}


def _ce_arg(ctx: OpContext, name: str, default):
    """An option of a cross-entropy or NLL loss: from its module (``nn.CrossEntropyLoss``, ``nn.NLLLoss``), its
    keywords, or its positional arguments (aten's when the reduction is given as aten's int)."""
    m = ctx.module
    if m is not None and hasattr(m, "ignore_index"):
        return getattr(m, name, default)
    if name in ctx.kwargs:
        return ctx.kwargs[name]
    functional, aten = _CE_ARGS[name]
    i = aten if type(ctx.arg(3)) is int else functional
    value = ctx.args[i] if i < len(ctx.args) else None
    return default if value is None else value


def _nll_lowering(ctx: OpContext, label: str) -> dict:
    """How PopTorch lowers a cross-entropy or NLL loss (popart_canonicalization/LossOps.cpp): cross_entropy as
    a log-softmax, then ``nllloss`` of log-probabilities; nll_loss as that ``nllloss`` alone; both with the
    ignored index (-100 unless given) and the reduction (the attributes :func:`sim.cost.row_ops.loss_steps`
    reads)."""
    if label not in ("cross_entropy", "nll"):
        return {}
    reduction = _ce_arg(ctx, "reduction", "mean")
    if isinstance(reduction, int):
        reduction = _REDUCTIONS[reduction]
    first = {"log_softmax": True} if label == "cross_entropy" else {"log_probabilities": True}
    return first | {"ignore_index": int(_ce_arg(ctx, "ignore_index", -100)), "reduction": str(reduction)}


def _classes_last(ctx: OpContext, ins: list, target_classes: bool = False) -> list:
    """A cross-entropy or NLL loss of an (N, C, d1, ...) input, as PopTorch's nllLossNdHandler (LossOps.cpp) and
    handleSoftmaxOp (SoftmaxOps.cpp) run it: the classes moved last and the rest flattened, (N d1 ..., C) rows
    of C classes (the log-softmax's transposes and the permutation are views once PopART makes them in place), the
    target flattened to match (``target_classes``: a target of probabilities, of the input's shape, permuted
    alike)."""
    rx = ctx.args[0]
    c = rx.shape[1]
    rows = rx.numel() // c
    perm = {"perm": [0, *range(2, rx.dim()), 1]}
    x = emit(ctx, "reshape", [ins[0]], (rows, c), rx.dtype, perm, "classes_last")
    return [x] + [emit(ctx, "reshape", [t], (rows, c) if target_classes else (rows,),
                       ctx.cap.g.tensors[ctx.t(t)].dtype, perm if target_classes else None, "target_flat")
                  for t in ins[1:]]


def _cross_entropy_composite(ctx: OpContext, ins: list, smoothing: float, probabilities: bool):
    """A cross-entropy with label smoothing or with a target of class probabilities, as it reaches PopTorch's
    dispatcher: torch's composite (``aten/src/ATen/native/LossNLL.cpp`` cross_entropy_loss_label_smoothing and
    cross_entropy_loss_prob_target; PopTorch intercepts neither aten::cross_entropy_loss nor its parts but
    nll_loss_forward), one PopART op per aten op. Class indices: the log-softmax, its ``nllloss``, the negated
    sum of each row's log-probabilities with the ignored rows zeroed (``eq``, ``masked_fill``), reduced (the mean
    over the rows not ignored: ``bitwise_not``, its sum cast to int32 by ReduceOps.cpp, a cast for the divide),
    then ``(1 - e) nll + e / C smooth``. Probabilities: the target smoothed to ``(1 - e) p + e / C``, multiplied
    by the log-softmax, summed (over the classes, or all for a reduced loss), negated, and the mean divided by
    the rows. The loss is the last op, so its gradient flows through both terms."""
    rx, out = ctx.args[0], ctx.output
    dt, c = rx.dtype, (rx.shape[1] if rx.dim() > 1 else rx.shape[0])
    rows = rx.numel() // c
    if rx.dim() > 2:
        ins = _classes_last(ctx, ins, target_classes=probabilities)
    lowering = _nll_lowering(ctx, "cross_entropy")
    reduction = lowering["reduction"]
    scalar = (1,)

    def op(kind, inputs, shape, attrs=None, dtype=dt, name=None):
        return emit(ctx, kind, inputs, shape, dtype, attrs, name or kind)

    def by(x, shape, label):  # times a number: PopTorch's mul of a one-element constant
        return op("mul", [x, const(ctx, scalar, dt, label)], shape)
    strided = {"classes_strided": True} if rx.dim() > 2 else {}
    log_p = op("softmax", [ins[0]], (rows, c), {"axis": -1, "log": True} | strided, name="log_softmax")
    row_sum = {"axes": [1], "keepdims": False}
    every = {"axes": [0], "keepdims": False}
    target = ins[1]
    if probabilities:
        if smoothing:
            target = op("add", [by(target, (rows, c), "one_minus_smoothing"),
                                const(ctx, scalar, dt, "smoothing_per_class")], (rows, c))
        terms = op("mul", [log_p, target], (rows, c))
        summed = op("reduce_sum", [terms], (rows,) if reduction == "none" else scalar,
                    row_sum if reduction == "none" else {"axes": [0, 1], "keepdims": False})
        loss = op("scale", [summed], (rows,) if reduction == "none" else scalar, {"factor": -1.0}, name="neg")
        if reduction == "mean":
            loss = op("div", [loss, const(ctx, scalar, dt, "rows")], scalar)
    else:
        shape = (rows,) if reduction == "none" else scalar
        nll = op("softmax_cross_entropy", [log_p, target], shape,
                 {"loss": "nll", "log_probabilities": True} | {k: lowering[k] for k in ("ignore_index", "reduction")}
                 | strided, name="nll_loss")
        smooth = op("scale", [op("reduce_sum", [log_p], (rows,), row_sum)], (rows,), {"factor": -1.0}, name="neg")
        ignored = op("compare", [target, const(ctx, scalar, ctx.cap.g.tensors[ctx.t(target)].dtype, "ignore_index")],
                     (rows,), {"op": "eq"}, torch.bool)
        smooth = op("select", [ignored, const(ctx, scalar, dt, "zero"), smooth], (rows,), name="masked_fill")
        if reduction != "none":
            smooth = op("reduce_sum", [smooth], scalar, every)
        if reduction == "mean":
            kept = op("logical_not", [ignored], (rows,), dtype=torch.bool)
            count = op("reduce_sum", [op("cast", [kept], (rows,), {"to": "int32"}, torch.int32)], scalar, every,
                       torch.int32)
            smooth = op("div", [smooth, op("cast", [count], scalar, {"to": sim_dtype(dt)})], scalar)
        loss = op("add", [by(nll, shape, "one_minus_smoothing"), by(smooth, shape, "smoothing_per_class")], shape)
    y = ctx.op("reshape", [loss], output=out, name="loss")
    ctx.cap.losses.append(y)
    return y


def _loss(kind, label):
    def rule(ctx: OpContext, x=None, target=None):
        if x is None:
            x, target = ctx.sarg(0, "input"), ctx.sarg(1, "target")
        out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
        ins = [x] + ([target] if _is_sym_tensor(target) else [])
        if label in _ELEMENTWISE_LOSSES and out.dim() > 0 and tuple(out.shape) == tuple(ctx.args[0].shape):
            # reduction="none": PopTorch's handler lowers it to its element-wise terms, no loss op
            # (FastPitch masks and reduces its mel loss itself)
            steps, grad = _ELEMENTWISE_LOSSES[label]
            return emit_map(ctx, steps, ins, [grad, grad][:len(ins)], output=out, name="unreduced_loss")
        if label in ("cross_entropy", "nll"):
            if isinstance(_ce_arg(ctx, "weight", None), torch.Tensor):
                ctx.unsupported("Parameter \"weight\" is unsupported for aten::nll_loss_nd (PopTorch's "
                                "nllLossNdHandler, LossOps.cpp, T42695): weigh the classes in the model instead, e.g. "
                                "multiply the per-sample losses (reduction='none') by weight[target]")
            real_target = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs.get("target")
            probabilities = (label == "cross_entropy" and isinstance(real_target, torch.Tensor)
                             and real_target.is_floating_point())
            smoothing = float(_ce_arg(ctx, "label_smoothing", 0.0)) if label == "cross_entropy" else 0.0
            if smoothing or probabilities:
                return tuple_result(ctx, _cross_entropy_composite(ctx, ins, smoothing, probabilities))
            if ctx.args[0].dim() > 2:
                ins = _classes_last(ctx, ins)
        strided = {"classes_strided": True} if label in ("cross_entropy", "nll") and ctx.args[0].dim() > 2 else {}
        y = ctx.op(kind, ins, {"loss": label} | _nll_lowering(ctx, label) | strided, output=out, name="loss")
        ctx.cap.losses.append(y)
        return tuple_result(ctx, y)
    return rule


def _broadcast_tensors(ctx: OpContext):
    outs = []
    syms, reals = ctx.sym_args, ctx.args
    if len(reals) == 1 and isinstance(reals[0], (list, tuple)):  # aten.broadcast_tensors([a, b])
        syms, reals = syms[0], reals[0]
    for s, real, out in zip(syms, reals, ctx.output):
        same = tuple(real.shape) == tuple(out.shape)
        outs.append(s if same else ctx.op("reshape", [s], output=out, name="broadcast"))
    return tuple(outs)


def _constant(ctx: OpContext):
    return _fold(ctx)


def _fold(ctx: OpContext):
    """A result computed from constants only: a constant tensor (as PopART folds it)."""
    def one(v):
        return Lazy(v, f"{ctx.key}_const", "constant") if isinstance(v, torch.Tensor) else None
    return pytree.tree_map(one, ctx.output)


# --- PopTorch annotations -----------------------------------------------------------------------
def _producer(ctx: OpContext, tensor: str):
    return ctx.cap.g.producer_op(tensor)


def _biased_layer(ctx: OpContext, op):
    """The matmul or convolution whose bias ``op`` adds, if it is a layer's bias add (nn.Linear and
    nn.Conv2d are captured as the matmul or convolution, then an add of the bias: PopTorch's
    ``set_available_memory(self.conv(x), p)`` sets the proportion of the layer's one PopART op, which
    the matmul or convolution here is); else ``op``."""
    g = ctx.cap.g
    if op.kind != "add" or len(op.inputs) != 2:
        return op
    bias = _producer(ctx, op.inputs[1])  # a convolution's bias is added through a per-channel view
    bias = bias.inputs[0] if bias is not None and bias.kind == "reshape" else op.inputs[1]
    if g.tensors[bias].role != "weight":
        return op
    src = _producer(ctx, op.inputs[0])
    while src is not None and src.kind == "reshape":  # a 3-D input's matmul runs 2-D between reshapes
        src = _producer(ctx, src.inputs[0])
    return src if src is not None and src.kind in ("matmul", "conv2d") else op


def _annotation(ctx: OpContext, name: str, value, x):
    """Apply a PopTorch annotation to graph value ``x``; returns the annotated value."""
    if name == "identity_loss":
        if value == "none":
            y = x
        else:
            kind = "reduce_sum" if value == "sum" else "reduce_mean"
            y = ctx.op(kind, [x], {"axes": list(range(len(ctx.shape(x)))), "keepdims": False,
                                   "identity_loss": value}, name="identity_loss")
        ctx.cap.explicit_loss = ctx.t(y)
        return y
    if not _is_sym_tensor(x):
        return x
    tensor = ctx.t(x)
    if name == "loop_carry":
        return _loop_carry(ctx, tensor, int(value))
    if name in ("set_overlap_for_input", "set_overlap_for_output"):
        if name == "set_overlap_for_input" and tensor not in ctx.cap.inputs:
            raise error("poptorch.set_overlap_for_input must be applied to an input of the model "
                        f"(here: {ctx.desc}, node {ctx.node.name!r})")
        ctx.cap.overlap[tensor] = getattr(value, "name", value)
        return tensor
    op = _producer(ctx, tensor)
    if name == "set_available_memory" and op is not None:
        _biased_layer(ctx, op).attrs["available_memory_proportion"] = float(value)
    elif name == "recomputation_checkpoint" and op is not None and ctx.node.users:
        # PopTorch's checkpoint is an op of its own, pruned by PopART when nothing reads its result
        # (GPT-2's hook checkpoints each block's unused `present` too): only a used one checkpoints
        ctx.cap.g.checkpoint(tensor)
    return tensor


def _loop_carry(ctx: OpContext, tensor: str, work: int) -> str:
    """One output of a ``poptorch.for_loop`` iteration carried into the next, as PopART's LoopOpx runs
    it (popx/op/loopx.cpp, the same work sim.onnx prices for an ONNX Loop): its copies back to the body's
    input, one op per output marked with the iteration (``loop_group``), which sim.compiler.loops prices
    as the Loop's two merged copies of all of them; with the iteration's first output
    (``_state.LOOP_CONTROL``), the exit flag's popops map (exit |= !cond | i >= M) and the iterator's
    increment."""
    if work & _state.LOOP_CONTROL:
        ctx.cap.loop_iterations = getattr(ctx.cap, "loop_iterations", 0) + 1
        b = ctx.builder
        iterator = b.constant(b.graph.unique_tensor_name("for_loop/iterator"), (1,), "int32")
        exit_flag = b.constant(b.graph.unique_tensor_name("for_loop/exit"), (1,), "bool")
        b.op("logical", [exit_flag, iterator], [(1,)], {"loop_control": "exit_update"}, name="for_loop/exit_update",
             out_dtypes=["bool"])
        b.op("add", [iterator, b.constant(b.graph.unique_tensor_name("for_loop/one"), (1,), "int32")], [(1,)],
             {"loop_control": "iterator"}, name="for_loop/iterator", out_dtypes=["int32"])
    group = f"for_loop/{getattr(ctx.cap, 'loop_iterations', 0)}"
    return ctx.op("copy", [tensor], {"loop_carried": True, "loop_group": group}, name="for_loop/carry")


_CROSS_REPLICA = {"all_reduce_cross_replica_sum": "replicated_all_reduce",
                  "all_gather_cross_replica": "replicated_all_gather",
                  "all_to_all_single_cross_replica": "replicated_all_to_all"}


def _cross_replica_rule(ctx: OpContext):
    """poptorch.experimental's cross-replica ops: a collective over all replicas."""
    return ctx.op(_CROSS_REPLICA[ctx.key], [ctx.sarg(0)], {"group_stride": 1, "group_size": None})


# serializedMatMul's modes: the dimension of LHS [.., M, K] and RHS [.., K, N] each piece slices
# (PopART's LHS = [group, input channels, reducing dim], RHS = [group, reducing dim, output channels])
_SERIAL_DIMS = {"input_channels": (-2, None), "reducing_dim": (-1, -2), "output_channels": (None, -1)}


def _serialized_matmul(ctx: OpContext):
    """``poptorch.serializedMatMul``: PopART's ``SerializeMatMuls`` transform makes ``factor``
    matmuls of slices of the operands (slices are views), then concatenates their outputs (input or
    output channels) or adds them (reducing dim; with ``keep_precision`` and float partials the
    pieces and their sum stay in float32, then one cast back). Each piece is a graph op of its own,
    so it is planned, priced and differentiated as PopART's pieces are (the backward matmuls of the
    pieces are the serialised backward)."""
    a, b = ctx.sarg(0), ctx.sarg(1)
    mode, factor, keep = ctx.arg(2), int(ctx.arg(3, default=0)), bool(ctx.arg(4, default=False))
    mode = getattr(mode, "value", mode)
    if mode == "none" or factor <= 1:
        return _matmul(ctx, a, b)
    sa, sb = ctx.shape(a), ctx.shape(b)
    # PopART's MatMulPattern brings both operands to rank 3 (a missing group dimension is 1, broadcast)
    # before SerializeMatMuls slices them (GPT-2's LM head: [B, S, H] by [H, V])
    if not (2 <= len(sa) <= 3 and 2 <= len(sb) <= 3):
        raise error(f"serializedMatMul: operands of shapes {list(sa)} and {list(sb)}: PopART serialises "
                    "matmuls of rank 2 or 3; reshape them first")
    da, db = _SERIAL_DIMS[mode]
    size = sa[da] if da is not None else sb[db]
    if size % factor:
        raise error(f"serializedMatMul: factor {factor} does not divide the {mode.replace('_', ' ')} "
                    f"dimension ({size}); choose a factor that divides it")
    dt = ctx.cap.g.tensors[ctx.t(a)].dtype
    wide = mode == "reducing_dim" and keep and dt == "float16" and ctx.cap.partials == "float"
    piece_dt = "float32" if wide else sim_dtype(ctx.output.dtype)
    step = size // factor
    out_shape = tuple(torch.broadcast_shapes(torch.Size(sa[:-2]), torch.Size(sb[:-2]))) + (sa[-2], sb[-1])
    pieces = []
    for i in range(factor):
        ins = []
        for x, shape, d in ((a, sa, da), (b, sb, db)):
            if d is None:
                ins.append(ctx.t(x))
                continue
            piece = list(shape)
            piece[d] = step
            ins.append(ctx.builder.op("slice", [ctx.t(x)], [tuple(piece)],
                                      {"axis": len(shape) + d, "start": i * step, "stop": (i + 1) * step},
                                      name=f"serial{i}/slice", out_dtypes=[ctx.cap.g.tensors[ctx.t(x)].dtype])[0])
        shape = list(out_shape)
        if mode != "reducing_dim":
            shape[-2 if mode == "input_channels" else -1] //= factor
        pieces.append(ctx.builder.op("matmul", ins, [tuple(shape)], None, name=f"serial{i}/matmul",
                                     out_dtypes=[piece_dt])[0])
    if mode != "reducing_dim":
        axis = len(out_shape) - (2 if mode == "input_channels" else 1)
        out = ctx.builder.op("concat", pieces, [out_shape], {"axis": axis}, name="serial/concat",
                             out_dtypes=[piece_dt])[0]
    else:
        out = pieces[0]
        for i, p in enumerate(pieces[1:], 1):
            out = ctx.builder.op("add", [out, p], [out_shape], None, name=f"serial{i}/sum", out_dtypes=[piece_dt])[0]
        if wide:
            out = ctx.builder.op("cast", [out], [out_shape], {"to": sim_dtype(ctx.output.dtype)},
                                 name="serial/cast", out_dtypes=[sim_dtype(ctx.output.dtype)])[0]
    if out_shape != sim_shape(ctx.output.shape):
        out = ctx.op("reshape", [out])
    return out


def _annotation_rule(ctx: OpContext):
    key = ctx.key
    if key == "serialized_matmul":
        return _serialized_matmul(ctx)
    value = ctx.arg(1) if len(ctx.args) > 1 else None
    return _annotation(ctx, key, value, ctx.sarg(0))


# --- whole-module rules (layers kept as one node under torch.fx) ----------------------------------
def _param(ctx: OpContext, attr: str, transposed: bool = False):
    """A parameter of the layer as a graph value (``transposed``: a cast of it is made in the
    ``(in, out)`` layout a linear layer's weight is stored in)."""
    if attr == "weight":
        from ._ops_layers import weight_norm
        normed = weight_norm(ctx, transposed)  # g * v / |v| from the trained g and v
        if normed is not None:
            return normed
    p = getattr(ctx.module, attr, None)
    if p is None:
        return None
    lazy = ctx.cap._lazy(p, f"{ctx.node.target}.{attr}")
    target = getattr(ctx, "param_cast", None)  # an implicit cast of the layer's own parameters
    if target is not None and isinstance(p, torch.Tensor) and p.is_floating_point() and p.dtype != target:
        real = p.detach().to(target)
        src = ctx.cap.weight(lazy, transposed=True) if transposed and isinstance(lazy, Lazy) else lazy
        return ctx.op("cast", [src], {"to": sim_dtype(target)}, output=real.t() if src is not lazy else real,
                      name=f"{attr}/implicit_cast")
    return lazy


def _m_linear(ctx):
    w = _param(ctx, "weight", transposed=True)
    return _linear(ctx, ctx.sarg(0), w, _param(ctx, "bias"), transposed=not isinstance(w, Lazy))


def _m_conv(ctx):
    m = ctx.module
    if m.padding_mode != "zeros":
        ctx.cap.notes.append(f"{ctx.desc}: padding_mode {m.padding_mode!r} priced as zero padding")
    return _conv(ctx, ctx.sarg(0), _param(ctx, "weight"), _param(ctx, "bias"), m.stride, m.padding, m.groups,
                 m.dilation)


def _m_batch_norm(ctx):
    stats = (_param(ctx, "running_mean"), _param(ctx, "running_var"))
    return _batch_norm(ctx, ctx.sarg(0), _param(ctx, "weight"), _param(ctx, "bias"), stats)


def _m_layer_norm(ctx):
    return _layer_norm(ctx, ctx.sarg(0), _param(ctx, "weight"), _param(ctx, "bias"), ctx.module.eps)


def _m_softmax(ctx):
    return _softmax(ctx, ctx.module.dim)


def _m_dropout(ctx):
    return _dropout(ctx, ctx.module.p, ctx.module.training)


def _m_feature_dropout(ctx):
    return _feature_dropout(ctx, ctx.module.p, ctx.module.training)


def _m_pool(kind):
    def rule(ctx):
        m = ctx.module
        if "Adaptive" in type(m).__name__:
            return _pool(kind)(ctx, "adaptive")
        return _pool(kind)(ctx, m.kernel_size, m.stride, m.padding)
    return rule


def _m_embedding(ctx):
    return _embedding(ctx, ctx.sarg(0), _param(ctx, "weight"))


def _m_loss(kind, label):
    def rule(ctx):
        return _loss(kind, label)(ctx, ctx.sarg(0), ctx.sarg(1))
    return rule


MODULE_RULES = {
    nn.Linear: _m_linear, nn.Conv2d: batch_of_one(_m_conv), nn.BatchNorm1d: _m_batch_norm,
    nn.BatchNorm2d: _m_batch_norm, nn.LayerNorm: _m_layer_norm, nn.ReLU: _unary("relu"),
    nn.GELU: _unary("gelu"), nn.Tanh: _unary("tanh"), nn.Sigmoid: _unary("sigmoid"),
    nn.Softmax: _m_softmax, nn.LogSoftmax: _m_softmax, nn.Dropout: _m_dropout,
    nn.Dropout1d: _m_feature_dropout, nn.Dropout2d: _m_feature_dropout, nn.Dropout3d: _m_feature_dropout,
    nn.MaxPool2d: _m_pool("maxpool"), nn.AvgPool2d: _m_pool("avgpool"),
    nn.AdaptiveAvgPool2d: _m_pool("avgpool"),
    nn.Embedding: _m_embedding, nn.Flatten: _view, nn.Identity: _identity,
    nn.CrossEntropyLoss: _m_loss("softmax_cross_entropy", "cross_entropy"),
    nn.NLLLoss: _m_loss("softmax_cross_entropy", "nll"),
    nn.MSELoss: _m_loss("mse_loss", "mse"), nn.L1Loss: _m_loss("mse_loss", "l1"),
}
_LOG_SOFTMAX_MODULES = (nn.LogSoftmax,)

RULES = {
    # element-wise
    "add": _binary("add"), "sub": _binary("sub"), "rsub": _binary("sub"), "mul": _binary("mul"),
    "div": _binary("div"), "truediv": _binary("div"), "true_divide": _binary("div"),
    "iadd": _binary("add"), "isub": _binary("sub"), "imul": _binary("mul"), "itruediv": _binary("div"),
    "neg": _neg,
    "relu": _unary("relu"), "gelu": _unary("gelu"), "tanh": _unary("tanh"),
    "sigmoid": _unary("sigmoid"), "exp": _unary("exp"),
    "softmax": _softmax, "_softmax": _softmax, "stochastic_depth": _stochastic_depth, "log_softmax": _softmax, "_log_softmax": _softmax,
    "dropout": _dropout, "native_dropout": _dropout, "feature_dropout": _feature_dropout,
    "dropout1d": _feature_dropout, "dropout2d": _feature_dropout, "dropout3d": _feature_dropout,
    "alpha_dropout": _alpha_dropout, "feature_alpha_dropout": _alpha_dropout,
    # dense algebra
    "linear": _linear, "matmul": _matmul, "mm": _matmul, "bmm": _matmul, "__rmatmul__": _matmul,
    "mv": _matmul, "dot": _matmul,  # BlasOps.cpp: matmulHandler for both
    "addmm": _addmm, "baddbmm": _addmm, "addmv": _addmm, "conv2d": batch_of_one(_conv), "convolution": _conv,
    "scaled_dot_product_attention": _attention,
    # normalisations and pooling
    "batch_norm": _batch_norm, "native_batch_norm": _batch_norm,
    "_native_batch_norm_legit": _batch_norm, "_native_batch_norm_legit_functional": _batch_norm,
    "_native_batch_norm_legit_no_training": _batch_norm,
    "layer_norm": _layer_norm, "native_layer_norm": _layer_norm,
    "max_pool2d": _pool("maxpool"), "_max_pool2d": _pool("maxpool"),
    "max_pool2d_with_indices": _pool("maxpool"), "avg_pool2d": _pool("avgpool"),
    "adaptive_avg_pool2d": _pool("avgpool"), "_adaptive_avg_pool2d": _pool("avgpool"),
    # data movement
    "embedding": _embedding,
    "view": _view, "reshape": _view, "_unsafe_view": _view, "flatten": _view, "unflatten": _view,
    "squeeze": _view, "unsqueeze": _view, "expand": _view, "expand_as": _view, "broadcast_to": _view,
    "view_as": _view,
    "reshape_as": _view, "contiguous": _view, "alias": _view, "lift_fresh": _view,
    "detach": _detach, "clone": _clone, "copy_": _copy_into, "_to_copy": _cast, "to": _cast, "type": _cast,
    "type_as": _cast, "float": _cast, "half": _cast, "double": _cast, "long": _cast, "int": _cast,
    "bool": _cast, "bfloat16": _cast,
    "transpose": _transpose, "t": _transpose, "permute": _transpose, "swapaxes": _transpose,
    "repeat": _repeat, "repeat_interleave": _repeat,
    "swapdims": _transpose, "movedim": _transpose, "numpy_T": _transpose, "getattr": _getattr,
    "broadcast_tensors": _broadcast_tensors, "cat": _concat, "concat": _concat, "concatenate": _concat, "stack": _concat,
    **{name: _stack_helper for name in _STACKS},
    "getitem": _getitem, "__getitem__": _getitem, "slice": _split, "select": _split,
    "narrow": _split, "split": _split, "chunk": _split, "unbind": _split, "tensor_split": _split,
    "split_with_sizes": _split, "index_select": _getitem,
    # reductions
    "mean": _reduce("reduce_mean"), "sum": _reduce("reduce_sum"), "amax": _reduce("reduce_max"),
    "argmax": _reduce("reduce_max"),
    # losses
    "cross_entropy": _loss("softmax_cross_entropy", "cross_entropy"),
    "cross_entropy_loss": _loss("softmax_cross_entropy", "cross_entropy"),
    "nll_loss": _loss("softmax_cross_entropy", "nll"), "nll_loss_nd": _loss("softmax_cross_entropy", "nll"),
    "nll_loss_forward": _loss("softmax_cross_entropy", "nll"),
    "mse_loss": _loss("mse_loss", "mse"), "l1_loss": _loss("mse_loss", "l1"),
    # constants made in the model
    **{k: _constant for k in ("zeros_like", "ones_like", "full_like", "empty_like", "new_zeros",
                              "new_ones", "new_full", "new_empty", "new_tensor", "scalar_tensor")},
    # collectives across replicas (poptorch.experimental)
    **{k: _cross_replica_rule for k in _CROSS_REPLICA},
    # PopTorch's annotations
    **{k: _annotation_rule for k in ("identity_loss", "set_available_memory", "set_overlap_for_input",
                                     "set_overlap_for_output", "recomputation_checkpoint",
                                     "ipu_print_tensor", "nop", "serialized_matmul", "loop_carry")},
}


def _more_rules() -> None:
    """The rest of PopTorch's supported operations: element-wise math and activations,
    reductions and sorting, tensor creation / indexing / padding, and more layers."""
    from . import _ops_layers, _ops_pointwise, _ops_reduce, _ops_tensor
    for module in (_ops_pointwise, _ops_reduce, _ops_tensor, _ops_layers):
        RULES.update(module.RULES)
        MODULE_RULES.update(getattr(module, "MODULE_RULES", {}))
    NEVER_FOLDED.update(_ops_pointwise.NEVER_FOLDED)
    MODULE_RULES[nn.BatchNorm3d] = _m_batch_norm

    def convolution(ctx):  # ATen's convolution: 2-D ones here, the rest (1-D, 3-D, transposed) there
        if ctx.args[0].dim() == 4 and not ctx.arg(6):
            ctx.key = "convolution"
            return _conv(ctx)
        return _ops_layers.conv_any(ctx)
    RULES["convolution"] = RULES["_convolution"] = convolution


def leaf_types() -> tuple:
    """Module types torch.fx keeps as one node: those with a rule, built-in or registered."""
    registered = tuple(k for k in _REGISTRY if isinstance(k, type) and issubclass(k, nn.Module))
    return tuple(MODULE_RULES) + registered


# --- dispatch ----------------------------------------------------------------------------------
def _describe(n, module) -> tuple[str, str, bool]:
    """(rule key, description for messages, is an ATen op)."""
    target = n.target
    if n.op == "call_module":
        t = type(module)
        return t.__name__, f"{t.__module__}.{t.__qualname__} (module {n.target!r})", False
    if n.op == "call_method":
        return str(target), f"torch.Tensor.{target}", False
    if isinstance(target, torch._ops.OpOverload):
        return target._opname, str(target), True
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[-1], str(target), True
    key = getattr(target, "_ipusim_key", None)
    if key:
        return key, f"poptorch.{key}", False
    name = getattr(target, "__name__", str(target))
    try:
        desc = torch.fx.node._get_qualified_name(target)
    except Exception:  # noqa: BLE001
        desc = name
    return name, desc, False


def _has_tensor(value) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value))


def map_node(cap, n, interp, result):
    """The graph value of fx node ``n`` (emitting its sim ops)."""
    module = interp.fetch_attr(n.target) if n.op == "call_module" else None
    key, desc, aten = _describe(n, module)
    args, kwargs = interp.fetch_args_kwargs_from_env(n)
    sym_args = torch.fx.node.map_arg(n.args, lambda a: cap.sym.get(a))
    sym_kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: cap.sym.get(a))
    ctx = OpContext(cap, n, key, desc, args, kwargs, sym_args, sym_kwargs, result, module, aten)
    if getattr(cap, "cast_to", None) is not None:
        _implicit_casts(ctx, interp)

    rule = _user_rule(n, module, key)
    if rule is None:
        if not _has_tensor(result):
            return None
        if all(leaf.numel() == 0 for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)):
            # nothing but tensors with no elements (a slice of nothing: Phi-3's pass-through part of a
            # fully rotary head): no data on the device, a constant that a concatenation leaves out
            return _marked(ctx, n, _fold(ctx))
        # the values the op reads from other nodes (a str among the plain arguments, such as
        # rounding_mode="trunc", is not a graph tensor)
        leaves = pytree.tree_leaves([cap.sym.get(a) for a in n.all_input_nodes], is_leaf=lambda x: isinstance(x, Lazy))
        trainable_layer = module is not None and isinstance(module, nn.Module) and any(
            p.requires_grad for p in module.parameters(recurse=False))
        if not trainable_layer and not any(_live(s) for s in leaves) and key not in NEVER_FOLDED:
            return _marked(ctx, n, _fold(ctx))
        carried = _carried(ctx, n)
        if carried is not None:
            return carried
        if module is not None:
            rule = next((r for t, r in MODULE_RULES.items() if type(module) is t), None)
            if rule is None:
                rule = next((r for t, r in MODULE_RULES.items() if isinstance(module, t)), None)
            if isinstance(module, _LOG_SOFTMAX_MODULES):
                ctx.key = "log_softmax"
        else:
            rule = RULES.get(key) or (RULES.get(key.rstrip("_")) if key.endswith("_") and not key.startswith("_") else None)
    if rule is None and module is None and n.op in ("call_function", "call_method"):
        # an ATen composite (torch.kron) or torch's Python over torch ops (F.relu6): PopTorch's dispatcher sees the
        # ops it calls
        done, value = _composite.decomposed(cap, n, args, kwargs, sym_args, sym_kwargs, key, desc, map_node)
        if done:
            return _marked(ctx, n, value)
    if rule is None:
        # a Python function torch.fx kept whole (torch.fx.wrap, as torchvision wraps Swin's relative
        # position bias; one of torch's own that answers __torch_function__, as F.gaussian_nll_loss) whose
        # ops could not be recorded on their own (a branch on a value): torch.export records the model's
        # ops one by one, as PopTorch's dispatcher sees them
        kept_whole = module is None and n.op == "call_function" and inspect.isfunction(n.target)
        why = _handlers.reason(key, key in _composite.READS_VALUES) if module is None and not kept_whole else ""
        error = unsupported(desc, n, why, registry_key(key, module))
        error.fx_leaf_function = f"sim.poptorch has no cost for {desc} (node {n.name!r})" if kept_whole else None
        raise error
    made = len(cap.g.ops)
    value = rule(ctx)
    if not n.users and _precision.in_place(key):
        # an in-place update nothing reads afterwards in the graph (torch.export keeps TGN's
        # index_put_ into its memory buffers so): it writes a buffer the next call reads, so pruning
        # must keep it, as a copy_ write-back
        for op in cap.g.ops[made:]:
            op.attrs["buffer_write"] = True
    return _marked(ctx, n, value)


#: ops made from constants that still run on the device: random generators (PopTorch draws
#: them on the IPU at every run; they are not folded into constants)
NEVER_FOLDED: set[str] = set()


def _implicit_casts(ctx: OpContext, interp) -> None:
    """PopTorch's implicit casts of mixed float16/float32 operands (:mod:`._precision`): each
    operand converted gets a graph ``cast``, and the rule sees the converted values."""
    n, module = ctx.node, ctx.module
    if ctx.key in _precision.EXEMPT:
        return
    dtypes = _precision.float_dtypes((ctx.args, ctx.kwargs))
    if module is not None:
        dtypes |= _precision.float_dtypes(list(module.parameters(recurse=False)))
    target = _precision.target_dtype(dtypes, ctx.cap.cast_to)
    if target is None:
        return
    keep = None
    if _precision.in_place(ctx.key) and ctx.args and isinstance(ctx.args[0], torch.Tensor):
        target, keep = ctx.args[0].dtype, n.args[0]  # an in-place op keeps its own dtype
    done: dict = {}

    def cast(a):
        if a not in done:
            v = interp.env[a]
            done[a] = None
            if a is not keep and isinstance(v, torch.Tensor) and v.dtype in _precision.MIXED and v.dtype != target:
                real = v.to(target)
                s = ctx.cap.sym.get(a)
                if isinstance(s, Lazy) and not _live(s):  # a constant: folded in its new type
                    s = Lazy(real, s.name, s.role)
                elif (isinstance(s, str) and ctx.cap.g.tensors[s].role == "constant"
                      and s not in ctx.cap.variables):
                    s = const(ctx, real.shape, real.dtype, "folded_cast")  # GPT-2's causal mask
                elif _is_sym_tensor(s):
                    s = ctx.op("cast", [s], {"to": sim_dtype(target)}, output=real, name="implicit_cast")
                done[a] = (real, s)
        return done[a]

    def real(a):
        c = cast(a)
        return c[0] if c else interp.env[a]

    def sym(a):
        c = cast(a)
        return c[1] if c else ctx.cap.sym.get(a)

    ctx.args = torch.fx.node.map_arg(n.args, real)
    ctx.kwargs = dict(torch.fx.node.map_arg(n.kwargs, real))
    ctx.sym_args = torch.fx.node.map_arg(n.args, sym)
    ctx.sym_kwargs = dict(torch.fx.node.map_arg(n.kwargs, sym))
    if module is not None:
        ctx.param_cast = target


def _user_rule(n, module, key):
    if not _REGISTRY:
        return None
    if module is not None:
        for t in type(module).__mro__:
            if t in _REGISTRY:
                return _REGISTRY[t]
    target = n.target
    if n.op == "call_function":
        for candidate in (target, getattr(target, "overloadpacket", None)):
            if candidate is not None and candidate in _REGISTRY:
                return _REGISTRY[candidate]
    return _REGISTRY.get(key)


_CARRIED = {"set_available_memory", "set_overlap_for_input", "set_overlap_for_output",
            "recomputation_checkpoint", "ipu_print_tensor", "nop", "loop_carry"}


def _carried(ctx: OpContext, n):
    """Under torch.export an identity-like annotation is a no-op view carrying a mark: apply
    the annotation to the view's input and emit nothing."""
    mark = (n.meta.get("custom") or {}).get(_state.MARK)
    if not mark or ctx.key not in ("view", "alias", "_unsafe_view", "reshape"):
        return None
    name, arg = mark
    if name in _CARRIED or (name == "identity_loss" and arg == "none"):
        return _annotation(ctx, name, arg, ctx.sarg(0))
    return None


def _marked(ctx: OpContext, n, value):
    """Apply an annotation carried by an exported op (identity_loss's reduction)."""
    mark = (n.meta.get("custom") or {}).get(_state.MARK)
    if mark and mark[0] == "identity_loss" and _is_sym_tensor(value):
        ctx.cap.explicit_loss = ctx.t(value)
    return value


_more_rules()
