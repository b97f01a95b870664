"""popxl-addons' ``grad_reduce_square_add`` (its C++ ``GradReduceSquareAddOp``): the sum of a
gradient's squares as a float32 scalar, divided by the loss scaling squared, as GPT-style training
takes its global gradient norm.

Its opx is one ``popops::reduce`` of the flattened tensor into float with ``SQUARE_ADD`` and the
scale applied by the reduction itself: the same poplibs call PopART's LambSquareOp makes, so it is
priced as :func:`sim.popxl.ops.lamb_square` (the squares and their reduction to one float)."""

from __future__ import annotations

from ... import popxl
from ...popxl import ops

__all__ = ["grad_reduce_square_add"]


def grad_reduce_square_add(t: popxl.Tensor, loss_scaling=1) -> popxl.Tensor:
    """``sum(t ** 2) / loss_scaling ** 2`` as a float32 scalar (``loss_scaling`` a number or a tensor;
    the division is part of the reduction)."""
    with popxl.name_scope("grad_reduce_square_add"):
        return ops.lamb_square(t)
