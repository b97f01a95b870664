"""Composite ops as PopTorch's dispatcher sees them.

An op that ATen implements as a composite of other ops (its ``CompositeImplicitAutograd`` kernel:
``torch.kron``, ``torch.isclose``, ``torch.trapezoid``, ...), like one of torch's own Python functions over
torch ops (``F.relu6``, ``F.lp_pool2d``), never reaches PopTorch's handlers whole: the dispatcher runs the
composite, and PopTorch lowers the ops it calls one by one. Where sim.poptorch has no rule of its own for
such an op, :func:`decomposed` records the ATen ops of the one call (``make_fx`` on tensors without values) and
maps each with the rules the rest of the capture uses. An op that is a kernel, not a composite, records as itself,
and stays without a cost, as PopTorch has no handler for it; so does a function that reads a value (a branch
on the data), which the capture's torch.export fallback then takes."""

from __future__ import annotations

import math

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException,
                                           unset_fake_temporarily)
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.fx.experimental.proxy_tensor import make_fx

from ..errors import UnsupportedOpError


def _leaf(x) -> bool:
    """A pytree leaf of a call's arguments and of their graph values alike (None and tensors included)."""
    return not isinstance(x, (list, tuple, dict))


def _rot90(x, k: int = 1, dims=(0, 1)):
    """aten::rot90's composite kernel (TensorTransformations.cpp): a flip, then a transpose for an odd ``k``."""
    d0, d1 = dims
    turns = k % 4
    if turns == 0:
        return x.clone()
    if turns == 2:
        return x.flip([d0, d1])
    return x.flip([d1 if turns == 1 else d0]).transpose(d0, d1)


def _angle_unit(factor: float, in_place: bool = False):
    """aten::deg2rad / rad2deg's composite kernels (UnaryOps.cpp): a multiply by the constant ``factor``, an
    integer input made the default float type first."""

    def kernel(x):
        if in_place:
            return x.mul_(factor)
        if not (x.is_floating_point() or x.is_complex()):
            x = x.to(torch.get_default_dtype())
        return torch.mul(x, factor)

    return kernel


def _dist(x, y, p=2):
    """aten::dist's composite kernel (ReduceOps.cpp): the norm of the difference."""
    return torch.norm(x - y, p)


_aten = torch.ops.aten
_DEGREE = math.pi / 180

#: ops ATen implements as ``CompositeExplicitAutograd`` kernels over other ops: the kernel runs on the IPU too, ahead
#: of PopTorch's fallback, so PopTorch lowers the ops it calls; make_fx would record the op itself, so each is
#: recorded through its kernel's ops, written out here
EXPLICIT_COMPOSITES = {
    _aten.rot90.default: _rot90,
    _aten.deg2rad.default: _angle_unit(_DEGREE), _aten.deg2rad_.default: _angle_unit(_DEGREE, True),
    _aten.rad2deg.default: _angle_unit(1 / _DEGREE), _aten.rad2deg_.default: _angle_unit(1 / _DEGREE, True),
    _aten.dist.default: _dist,
}

#: the ops whose recording stopped at a read of a tensor's value (a check or a branch on the host)
READS_VALUES: set[str] = set()

#: recorded graphs by call signature (the target and its arguments' shapes, dtypes and plain values): a layer's
#: composite called once a block is recorded once
_GRAPHS: dict = {}


def _composite_graph(n, args, kwargs, key: str):
    """The ATen graph of the call ``n`` makes on ``args`` / ``kwargs`` (placeholders: its tensor arguments in
    pytree order), the arguments' leaves and the tensors' places among them; None when the call records as the
    op itself (a kernel) or cannot be recorded."""
    flat, spec = pytree.tree_flatten((args, kwargs), is_leaf=_leaf)
    where = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
    signature = (n.op, n.target, str(spec), tuple((tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor)
                                                  else repr(v) for v in flat))
    if signature not in _GRAPHS:
        if len(_GRAPHS) >= 1024:  # a long-lived process capturing many models: start again
            _GRAPHS.clear()
        _GRAPHS[signature] = _record(n, flat, spec, where, key)
    graph = _GRAPHS[signature]
    return None if graph is None else (graph, flat, where)


def _record(n, flat: list, spec, where: list[int], key: str):
    """:func:`_composite_graph`'s graph, recorded."""

    def call(*tensors):
        leaves = list(flat)
        for i, t in zip(where, tensors):
            leaves[i] = t
        a, k = pytree.tree_unflatten(leaves, spec)
        if n.op == "call_method":
            return getattr(a[0], n.target)(*a[1:], **k)
        return n.target(*a, **k)

    try:
        with unset_fake_temporarily():
            examples = [torch.empty(flat[i].shape, dtype=flat[i].dtype, device=flat[i].device) for i in where]
            gm = make_fx(call, EXPLICIT_COMPOSITES, tracing_mode="fake")(*examples)
    except (DataDependentOutputException, DynamicOutputShapeException, GuardOnDataDependentSymNode):
        READS_VALUES.add(key)
        return None
    except Exception:  # noqa: BLE001 - not recordable on its own (a Python-side effect): no rule
        return None
    called = [c for c in gm.graph.nodes if c.op == "call_function" and isinstance(c.target, torch._ops.OpOverload)]
    if any(c.target._opname.rstrip("_") == key.rstrip("_") for c in called):
        return None
    return gm  # (no ops at all: a composite that returns its input, as torch.positive or torch.real of a real one)


class _Inline(torch.fx.Interpreter):
    """Runs a composite's ATen graph on the call's own arguments, each op mapped by the capture's rules."""

    def __init__(self, gm, cap, map_node, syms: list):
        super().__init__(gm)
        self.cap, self.map_node, self.syms = cap, map_node, iter(syms)
        self.extra_traceback = False

    def run_node(self, n):
        result = super().run_node(n)
        if n.op == "placeholder":
            self.cap.sym[n] = next(self.syms)
        elif n.op == "get_attr":
            self.cap.sym[n] = self.cap._lazy(result, str(n.target))
        elif n.op == "call_function":
            self.cap.sym[n] = self.map_node(self.cap, n, self, result)
        return result


def decomposed(cap, n, args, kwargs, sym_args, sym_kwargs, key: str, desc: str, map_node):
    """(True, the graph value of call ``n``) mapped op by op through its composite's ATen ops, scoped under
    ``key``; (False, None) when the op is not a composite. An op of the composite without a rule is refused
    naming the composite (``desc``) it was reached from."""
    found = _composite_graph(n, args, kwargs, key)
    if found is None:
        return False, None
    gm, flat, where = found
    sym_leaves = pytree.tree_leaves((sym_args, sym_kwargs), is_leaf=_leaf)
    if len(sym_leaves) != len(flat):
        return False, None
    tensors = [flat[i] for i in where]
    b = cap.b
    scopes = list(b._scopes)
    b._scopes = scopes + [key]
    try:
        _Inline(gm, cap, map_node, [sym_leaves[i] for i in where]).run(*tensors)
    except UnsupportedOpError as inner:
        raise UnsupportedOpError(f"{inner} (reached from {desc}, whose ops PopTorch's dispatcher sees one by one; "
                                 f"sim.poptorch.register_op({key!r}, fn) prices the whole call instead)") from inner
    finally:
        b._scopes = scopes
    (out,) = [c for c in gm.graph.nodes if c.op == "output"]
    return True, torch.fx.node.map_arg(out.args[0], lambda a: cap.sym.get(a))
