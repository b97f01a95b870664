"""``popxl.ops.negative_log_likelihood`` as a module, as PopXL has it
(``from popxl.ops.negative_log_likelihood import REDUCTION_TYPE``)."""

from __future__ import annotations

from typing import Literal

from ._core import nll_loss_with_softmax_grad
from ._select import nll_loss

REDUCTION_TYPE = Literal["mean", "sum", "none"]

__all__ = ["REDUCTION_TYPE", "nll_loss", "nll_loss_with_softmax_grad"]
