"""What the op rules of :mod:`sim.poptorch` share: emitting graph ops of given shapes, fused
element-wise expressions (``map``), constants, and scalar operands.

Rules get an :class:`~sim.poptorch._mapping.OpContext`; a graph value is a tensor name (an
activation), a :class:`~sim.poptorch._values.Lazy` (a parameter or constant not yet placed), or
``None`` (not a tensor).
"""

from __future__ import annotations

import copy

import torch
from torch.utils import _pytree as pytree

from ..cost.expressions import chain_ops
from ._values import Lazy, sim_dtype, sim_shape


def is_tensor(s) -> bool:
    """A graph value that is a tensor (an activation, parameter or constant)."""
    return isinstance(s, (str, Lazy))


def first_tensor(value):
    """The first torch tensor in a (nested) value, or None."""
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            return leaf
    return None


def emit(ctx, kind: str, inputs: list, shape, dtype, attrs: dict | None = None, name: str | None = None) -> str:
    """One graph op of ``kind`` with one output of ``shape`` and ``dtype`` (a sim or torch dtype)."""
    if isinstance(dtype, torch.dtype):
        dtype = sim_dtype(dtype)
    return ctx.builder.op(kind, [ctx.t(i) for i in inputs], [sim_shape(shape)], attrs, name=name or kind,
                          out_dtypes=[dtype])[0]


def per_channel(ctx, v, rank: int, name: str) -> str:
    """A (C,) vector viewed as (1, C, 1, ...) for a rank-``rank`` (N, C, ...) tensor, so that it broadcasts
    over the batch and the field (and its gradient reduces them), not over the last axis as a bare (C,) would."""
    return emit(ctx, "reshape", [v], (1, ctx.shape(v)[0]) + (1,) * (rank - 2), ctx.cap.g.tensors[ctx.t(v)].dtype,
                name=name)


def channel_bias(ctx, y: str, bias, name: str = "add") -> str:
    """``y`` (N, C, ...) plus a convolution's bias (C,), viewed per channel (:func:`per_channel`) as the
    layer adds it."""
    view = per_channel(ctx, bias, len(ctx.cap.g.tensors[y].shape), "bias_per_channel")
    return ctx.op("add", [y, view], name=name)


def emit_map(ctx, steps: list[str], inputs: list, grad: list | None = None, output=None,
             name: str | None = None, shape=None, dtype=None, repeat: int = 1) -> str:
    """A fused element-wise expression (popops::map) chaining the codelets ``steps``.

    ``grad``: per input, the codelets of its gradient (None: no gradient flows to it);
    ``output``: the real result it makes (default: the op's), or ``shape`` and ``dtype``.
    """
    attrs = {"steps": list(steps), "op": ctx.key}
    if grad is not None:
        attrs["grad"] = [list(g) if g else None for g in grad]
    if repeat != 1:
        attrs["repeat"] = int(repeat)
    if shape is not None:
        return emit(ctx, "map", inputs, shape, dtype, attrs, name or ctx.key)
    return ctx.op("map", inputs, attrs, output=output, name=name or ctx.key)


def emit_chain(ctx, entries, named: dict, shape, dtype, result: bool = False) -> str:
    """Emit a chain of single ops written as :data:`sim.cost.expressions.DECOMPOSED` writes them, each of ``shape``
    and ``dtype`` (an op of constants only one element, a ``compare`` bool): an operand named in ``named`` is
    that graph value, an index an earlier op's result, any other label a one-element constant. ``result``: the
    last op makes the rule's own output. Returns the last op's output."""
    ops, made = chain_ops(entries, tuple(named)), []
    for i, (kind, operands, attrs, constant) in enumerate(ops):
        inputs = [made[a] if isinstance(a, int) else named[a] if a in named else const(ctx, (1,), dtype, a)
                  for a in operands]
        if result and i == len(ops) - 1:
            made.append(ctx.op(kind, inputs, dict(attrs) or None))
        else:
            made.append(emit(ctx, kind, inputs, (1,) if constant else shape,
                             torch.bool if kind == "compare" else dtype, dict(attrs) or None, kind))
    return made[-1]


def bernoulli(ctx, shape, dtype, p: str, result: bool = False) -> str:
    """A draw that is 1 with probability ``p`` (a graph tensor) as PopTorch's bernoulliHandler builds it: a
    uniform draw, a compare with ``p`` and a cast to ``dtype``, three PopART ops; ``result``: the cast makes
    the rule's own output."""
    u = emit(ctx, "random_uniform", [], shape, dtype, name="uniform")
    less = emit(ctx, "compare", [u, p], shape, torch.bool, {"op": "lt"}, "less")
    return ctx.op("cast", [less]) if result else emit(ctx, "cast", [less], shape, dtype, name="noise")


def adaptive_window(ctx, field_in, field_out) -> tuple[tuple, tuple]:
    """(kernel, stride) per field dimension of adaptive average pooling, as PopTorch's
    adaptivePoolingHandler works them out (PoolingOps.cpp: stride in / out, kernel in - (out - 1) stride);
    it refuses an input dimension its output does not divide, whose windows torch sizes one by one."""
    for i, (a, b) in enumerate(zip(field_in, field_out)):
        if a % b:
            ctx.unsupported(f"Input dim {i} ({a}) is not divisible by the corresponding output dim ({b}). The results "
                            "will differ numerically from PyTorch's implementation (PopTorch's adaptivePoolingHandler): "
                            "choose an output size that divides the input, or pad the input")
    strides = tuple(a // b for a, b in zip(field_in, field_out))
    return tuple(a - (b - 1) * s for a, b, s in zip(field_in, field_out, strides)), strides


def average_pool(ctx, x, out, attrs: dict, padding: tuple) -> str:
    """An average pool (avg_pool1d / 2d / 3d) as PopTorch's poolingHandler (PoolingOps.cpp) builds it: with
    ``count_include_pad`` (torch's default) and ``padding`` (per spatial dim), a constant Pad first and the pool
    unpadded; a half (or any non-float) input cast to float, pooled and cast back (PopART's AveragePool takes float
    only). ``attrs`` are the pool's (their ``padding`` dropped once padded)."""
    src = ctx.args[0]
    include = ctx.module.count_include_pad if ctx.module is not None else ctx.arg(5, "count_include_pad", True)
    if include and any(padding):
        k = len(padding)
        shape = tuple(src.shape[:-k]) + tuple(d + 2 * p for d, p in zip(src.shape[-k:], padding))
        x = emit(ctx, "pad", [x], shape, src.dtype, {"mode": "constant"}, "pad")
        attrs = dict(attrs, padding=0)
    if src.dtype == torch.float32:
        return ctx.op("avgpool", [x], attrs, output=out, name="avgpool")
    x = emit(ctx, "cast", [x], ctx.cap.g.tensors[ctx.t(x)].shape, torch.float32, name="to_float")
    pooled = emit(ctx, "avgpool", [x], out.shape, torch.float32, attrs, "avgpool")
    return ctx.op("cast", [pooled], output=out, name="cast_back")


def const(ctx, shape, dtype, label: str) -> str:
    """A constant graph tensor (folded data: mask, table, fill value) of ``shape``."""
    if isinstance(dtype, torch.dtype):
        dtype = sim_dtype(dtype)
    cap = ctx.cap
    saved, cap.b._scopes = cap.b._scopes, []
    name = cap.g.unique_tensor_name(f"{ctx.key}/{label}")
    cap.g.add_tensor(name, sim_shape(shape), dtype, "constant")
    cap.b._scopes = saved
    return name


def operand(ctx, sym, real, dtype, label: str = "scalar") -> str:
    """The graph tensor of an operand: its own tensor, or a one-element constant for a number."""
    if is_tensor(sym):
        return ctx.t(sym)
    shape = tuple(real.shape) if isinstance(real, torch.Tensor) else (1,)
    return const(ctx, shape, dtype, label)


def tensor_args(ctx, live_only: bool = False) -> list:
    """The graph values of the op's tensor arguments, in order (positional, then keyword);
    ``live_only``: those computed on the device (activations, trained weights)."""
    pairs = list(zip(ctx.args, ctx.sym_args)) + [(ctx.kwargs[k], ctx.sym_kwargs.get(k)) for k in ctx.kwargs]
    out = []
    for real, sym in pairs:
        reals = real if isinstance(real, (list, tuple)) else [real]
        syms = sym if isinstance(sym, (list, tuple)) else [sym]
        for r, s in zip(reals, syms):
            if isinstance(r, torch.Tensor) and is_tensor(s):
                if not live_only or isinstance(s, str) or s.role == "weight":
                    out.append(s)
    return out


def out_tensor(ctx):
    """The op's (first) real output tensor."""
    return first_tensor(ctx.output)


def tuple_result(ctx, first: str):
    """A rule's result for an op returning a tuple whose first element is ``first``."""
    if isinstance(ctx.output, (tuple, list)):
        return (first,) + (None,) * (len(ctx.output) - 1)
    return first


def fold(ctx):
    """A result computed from constants only: a constant of the graph (as PopART folds it)."""
    def one(v):
        return Lazy(v, f"{ctx.key}_const", "constant") if isinstance(v, torch.Tensor) else None
    return pytree.tree_map(one, ctx.output)


def embedding_flags_refused(ctx, sparse, scale_grad_by_freq, max_norm=None) -> None:
    """PopTorch refuses an embedding's ``sparse`` and ``scale_grad_by_freq`` ("Unsupported aten::embedding
    operation", EmbeddingOps.cpp) and has no handler for the table renorm ``max_norm`` runs first."""
    flags = [n for n, v in (("sparse", sparse), ("scale_grad_by_freq", scale_grad_by_freq),
                            ("max_norm", max_norm is not None)) if v]
    if flags:
        ctx.unsupported(f"an embedding with {', '.join(flags)} set, which PopTorch does not run either (its "
                        "embedding handlers refuse sparse and scale_grad_by_freq, and it has no handler for the "
                        "renorm of max_norm): leave them at their defaults")


def batch_of_one(rule, fields: int | None = None):
    """``rule`` of a convolution or a pool, also for an unbatched input (``(C, *field)``, which torch's layers take):
    ATen's ``conv2d`` / ``conv_transpose1d`` / ... unsqueeze it to a batch of one before the convolution PopTorch's
    dispatcher sees and squeeze the result, and PopTorch's poolingHandler reshapes it so, so the input is viewed as
    ``(1, C, *field)``, the rule runs on that, and its result is viewed back. ``fields``: the layer's field
    dimensions (default: a convolution's, from its weight)."""
    def wrapped(ctx, *args, **kwargs):
        x = ctx.args[0] if ctx.args else None
        if fields is None:
            weight = getattr(ctx.module, "weight", None) if ctx.module is not None else ctx.arg(1, "weight")
            batched = weight.dim() if isinstance(weight, torch.Tensor) else None
        else:
            batched = fields + 2
        if not (isinstance(x, torch.Tensor) and batched is not None and x.dim() == batched - 1):
            return rule(ctx, *args, **kwargs)
        one = copy.copy(ctx)
        one.args = (x.unsqueeze(0),) + tuple(ctx.args[1:])
        one.sym_args = (emit(ctx, "reshape", [ctx.sarg(0)], (1,) + tuple(x.shape), x.dtype, name="batched"),) + \
            tuple(ctx.sym_args[1:])
        one.output = pytree.tree_map(lambda t: t.unsqueeze(0) if isinstance(t, torch.Tensor) else t, ctx.output)
        result = rule(one, *args, **kwargs)
        many = isinstance(result, tuple)  # (a max pool's values, None for the indices it does not return)
        first = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
        y = ctx.op("reshape", [result[0] if many else result], output=first, name="unbatched")
        return (y,) + result[1:] if many else y
    return wrapped
