"""Mixed float16/float32 operands: the implicit casts PopTorch 3 makes.

An op whose floating-point tensor operands mix float16 and float32 (a float32 input fed to a
``model.half()``, or half data through a float32 layer) runs on the IPU after PopTorch casts its
operands to one type. PopTorch 3 (the dispatcher front end) always follows PyTorch's promotion:
"mixed precision ops are now always upcast to float32, in accordance with normal PyTorch
behaviour" (PopTorch user guide, "16-bit float migration"; ``poptorch/source/ImplicitCasting.cpp``
computes the type with PyTorch's own ``result_type``, and matmul, gemm and add are created with
``ImplicitCast::All``). ``Options.Precision.halfFloatCasting`` is deprecated and changes nothing
("HalfUpcastToFloat is now the only supported option"); PopTorch 2's ``FloatDowncastToHalf``,
which cast such operands to float16, is gone.

PyTorch on the CPU refuses some of these ops outright (``F.linear`` of a float32 input with
float16 weights: "mat1 and mat2 must have the same dtype"), so :func:`implicit_casts` applies the
same casts to the real tensors while the model runs on the CPU (the capture's run and every
call): the CPU result is the IPU's, the float16 weights' values in float32 arithmetic. The capture
emits a graph ``cast`` for each operand it converts (:func:`target_dtype` says to which type).
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

UPCAST = torch.float32
MIXED = {torch.float16, torch.float32}
# calls whose operands legitimately differ in type: conversions and copies take the other
# operand's type on purpose
EXEMPT = {"to", "type", "type_as", "copy_", "new_tensor", "new_zeros", "new_ones", "new_full",
           "new_empty", "set_", "__setitem__", "__getitem__", "masked_scatter_",
           "__get__", "__set__", "detach", "clone", "size", "dim", "numel", "item", "tolist",
           "custom_op"}  # PopTorch builds custom ops with ImplicitCast::None (OpBuilder.cpp createCustomOperation)


def behaviour(options) -> torch.dtype:
    """The dtype mixed float16/float32 operands are cast to: float32 under PopTorch 3, whatever
    ``options.Precision.halfFloatCasting`` says (deprecated there, recorded but not modelled)."""
    return UPCAST


def float_dtypes(values) -> set:
    """The float16/float32 dtypes among the tensors in ``values`` (any nesting)."""
    return {t.dtype for t in pytree.tree_leaves(values)
            if isinstance(t, torch.Tensor) and t.dtype in MIXED}


def target_dtype(dtypes: set, cast_to: torch.dtype | None) -> torch.dtype | None:
    """The dtype operands of ``dtypes`` are cast to, or None when nothing is cast."""
    if cast_to is None or not MIXED <= set(dtypes):
        return None
    return cast_to


def _name(func) -> str:
    """The function's name, an ATen overload's without its overload (``sub_.Tensor``: ``sub_``)."""
    return (getattr(func, "__name__", "") or "").split(".")[0]


#: an augmented assignment (``w -= x``): ``operator.isub`` under torch.fx, ``Tensor.__isub__`` otherwise
_AUGMENTED = {"iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor"}


def in_place(name: str) -> bool:
    """An in-place method (``add_``) or augmented assignment (``w -= x``): it keeps its own dtype,
    the other operands follow it."""
    return (name.endswith("_") and not name.startswith("_")) or name.strip("_") in _AUGMENTED


def cast_values(values, dtype: torch.dtype):
    """``values`` with every float16/float32 tensor in it cast to ``dtype``."""
    def one(t):
        if isinstance(t, torch.Tensor) and t.dtype in MIXED and t.dtype != dtype:
            return t.to(dtype)
        return t
    return pytree.tree_map(one, values)


class _Casts(TorchFunctionMode):
    def __init__(self, cast_to: torch.dtype):
        super().__init__()
        self.cast_to = cast_to

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name not in EXEMPT:
            dtypes = float_dtypes((args, kwargs))
            if MIXED <= dtypes:
                if in_place(name) and args and isinstance(args[0], torch.Tensor):
                    args = (args[0],) + tuple(cast_values(list(args[1:]), args[0].dtype))
                    kwargs = cast_values(kwargs, args[0].dtype)
                else:
                    args, kwargs = cast_values((args, kwargs), self.cast_to)
        return func(*args, **kwargs)


def holds_half(model: torch.nn.Module | None, values=None) -> bool:
    """Does ``model`` (its parameters and buffers) or do ``values`` hold a float16 tensor?"""
    tensors = list(pytree.tree_leaves(values)) if values is not None else []
    if model is not None:
        tensors += list(model.parameters()) + list(model.buffers())
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.float16 for t in tensors)


@contextlib.contextmanager
def implicit_casts(cast_to: torch.dtype | None, model: torch.nn.Module | None = None, values=None):
    """Run the block with PopTorch's implicit casts of mixed float16/float32 operands to
    ``cast_to`` (nothing when ``cast_to`` is None). Given the ``model`` and its inputs
    (``values``), the casts are watched for only when a float16 tensor is among them (torch's
    own dispatch is faster without the watch, and nothing mixes otherwise)."""
    if cast_to is None or (model is not None and not holds_half(model, values)):
        yield
        return
    with _Casts(cast_to):
        yield
