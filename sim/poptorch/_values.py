"""Torch values as the sim graph sees them: dtypes and shapes, and parameters not yet placed.

Shared by the capture (:mod:`sim.poptorch._capture`) and the op rules
(:mod:`sim.poptorch._mapping`).
"""

from __future__ import annotations

import torch

from ..errors import GraphError

_TORCH_DTYPES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "float16",
    torch.float64: "float32", torch.int64: "int32", torch.int32: "int32", torch.int16: "int32",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}


def sim_dtype(dtype: torch.dtype) -> str:
    """The sim dtype of a torch dtype (the IPU computes int64 as int32, float64 as float32)."""
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        raise GraphError(f"sim.poptorch: tensors of dtype {dtype} are not supported on the IPU") from None


def sim_shape(shape) -> tuple[int, ...]:
    """A sim shape: 0-d tensors become (1,)."""
    shape = tuple(int(d) for d in shape)
    return shape if shape else (1,)


class Lazy:
    """A parameter, buffer or constant that becomes a graph tensor only when an op uses it."""

    __slots__ = ("value", "name", "role", "variable")

    def __init__(self, value: torch.Tensor, name: str, role: str, variable: bool = False):
        self.value, self.name, self.role = value, name, role
        #: a variable on the device (a parameter or buffer of the model, trainable or not: PopTorch
        #: uploads them all and sets PopART's constantWeights off), so what is computed from it is not
        #: folded into a constant; other tensors the model holds are constants of the graph
        self.variable = variable

    def __repr__(self):
        return f"Lazy({self.name}, {self.role})"
