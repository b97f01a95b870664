"""popxl-addons' ops: the losses ``cross_entropy`` and ``cross_entropy_with_grad``, made of PopXL's ops
as popxl-addons makes them (a softmax over the last axis, then PopXL's negative log-likelihood),
``host_load`` / ``host_store`` (:mod:`..streams`), the strided collectives
(:mod:`.replicated_strided_collectives`) and ``grad_reduce_square_add`` (:mod:`.grad_reduce_square_add`)."""

from __future__ import annotations

from ... import popxl
from ...popxl import ops
from ..streams import host_load, host_store
from . import replicated_strided_collectives
from .grad_reduce_square_add import grad_reduce_square_add

__all__ = ["cross_entropy", "cross_entropy_with_grad", "grad_reduce_square_add", "host_load", "host_store",
           "replicated_strided_collectives"]


def cross_entropy(x: popxl.Tensor, labels: popxl.Tensor, ignore_index: int | None = None,
                  reduction: str = "mean") -> popxl.Tensor:
    """The cross-entropy loss of the logits ``x`` (..., classes) against integer ``labels``."""
    return ops.nll_loss(ops.softmax(x, axis=-1), labels, ignore_index=ignore_index, reduction=reduction)


def cross_entropy_with_grad(x: popxl.Tensor, labels: popxl.Tensor, loss_scaling=1, ignore_index: int | None = None,
                            reduction: str = "mean"):
    """(loss, the gradient that starts the backward pass): the loss the simulated training
    differentiates (``ops.nll_loss_with_softmax_grad`` of the softmax of ``x``); ``loss_scaling``
    scales the gradient only."""
    if not isinstance(loss_scaling, popxl.Tensor):
        loss_scaling = popxl.constant(loss_scaling, popxl.float32)
    return ops.nll_loss_with_softmax_grad(ops.softmax(x, axis=-1), labels, loss_grad=loss_scaling,
                                          ignore_index=ignore_index, reduction=reduction)
