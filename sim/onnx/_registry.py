"""Which rule prices an ONNX node: the rules added with :func:`register_op` first, else the
built-in rule of the op's family (:data:`RULES`, gathered from the ``_ops_*`` modules: element-wise,
layers, reductions and losses, data movement, control flow, PopART's own ``ai.graphcore`` ops, and the ops PopART
has no op for)."""

from __future__ import annotations

from . import (_ops_control_flow, _ops_elementwise, _ops_graphcore, _ops_layers, _ops_not_in_popart, _ops_reduce,
               _ops_tensor)


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


#: the built-in rules, keyed by op type (``domain::OpType`` outside the default ONNX domain: PopART's
#: ``ai.graphcore`` ops)
RULES: dict = {**_ops_elementwise.RULES, **_ops_layers.RULES, **_ops_reduce.RULES, **_ops_tensor.RULES,
               **_ops_graphcore.RULES, **_ops_not_in_popart.RULES, **_ops_control_flow.RULES}


def _default_domain(node) -> bool:
    return node.domain in ("", "ai.onnx")


def _op_label(node) -> str:
    """``OpType``, or ``domain::OpType`` outside the default ONNX domain."""
    return node.op_type if _default_domain(node) else f"{node.domain}::{node.op_type}"


def _rule_for(node):
    """The rule pricing ``node``: a register_op one (domain-qualified first), else the built-in
    (keyed by op type in the default domain, ``domain::OpType`` in another: PopART's ``ai.graphcore`` ops)."""
    domains = ("", "ai.onnx") if _default_domain(node) else (node.domain,)  # "" and "ai.onnx" are one domain
    rule = next((_REGISTRY[k] for k in (f"{d}::{node.op_type}" for d in domains) if k in _REGISTRY), None) \
        or _REGISTRY.get(node.op_type)
    if rule is not None:
        return rule
    return RULES.get(node.op_type) if _default_domain(node) else RULES.get(f"{node.domain}::{node.op_type}")
