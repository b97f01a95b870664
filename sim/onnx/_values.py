"""What the importer knows of one ONNX tensor (:class:`_Value`), how ONNX element types map
to the simulator's dtypes, and the shape arithmetic the rules and the constant folding share
(broadcasting, negative axes, Reshape's and Slice's output shapes)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto

from ..errors import GraphError


_FLOAT_TYPES = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float32",
                TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "float16"}  # bf16 priced as fp16
_OTHER_TYPES = {TensorProto.INT64: "int32", TensorProto.INT32: "int32", TensorProto.INT16: "int32",
                TensorProto.UINT16: "int32", TensorProto.UINT32: "int32", TensorProto.UINT64: "int32",
                TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.BOOL: "bool",
                # ONNX's 8-bit floats, priced as Poplar's QUARTER (PopART's FLOAT8_143 / FLOAT8_152)
                TensorProto.FLOAT8E4M3FN: "float8", TensorProto.FLOAT8E4M3FNUZ: "float8",
                TensorProto.FLOAT8E5M2: "float8", TensorProto.FLOAT8E5M2FNUZ: "float8"}


def _type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


@dataclass
class _Value:
    """What the importer knows of one ONNX tensor."""

    shape: tuple[int, ...]  # the ONNX shape (may be 0-d)
    dtype: str  # the sim dtype
    sim: str | None = None  # the graph tensor, once materialised
    const: np.ndarray | None = None  # the value, when known at import time
    init: object = None  # an initializer not yet read (TensorProto)
    weight: bool = False  # a trainable initializer
    uses: int = 0  # consumers (nodes and graph outputs)
    name: str = ""
    missing: str = ""  # set for a node output its rule does not model: who made it
    layout: tuple | None = None  # (perm, shape) an initializer is stored in for the one node using it
    #: a constant PopART folds whose values the importer does not compute (over its folding cap)
    folded_unknown: bool = False
    #: a weight's other layouts made for its uses, (perm, shape) -> the graph tensor: one transpose a layout
    views: dict = field(default_factory=dict)

    @property
    def known(self) -> bool:
        """Known at import time and not a weight: foldable."""
        return not self.weight and (self.const is not None or self.init is not None)


def _sim_shape(shape) -> tuple[int, ...]:
    """A sim shape: 0-d tensors are (1,)."""
    shape = tuple(int(d) for d in shape)
    return shape if shape else (1,)


def _broadcast(*shapes) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise GraphError(f"shapes {', '.join(map(str, shapes))} do not broadcast") from None


def _axis(axis: int, rank: int, upto_rank: bool = False) -> int:
    """``axis`` of a tensor of ``rank`` dimensions counted from 0 (ONNX allows ``-rank`` to ``rank - 1``, or to
    ``rank`` with ``upto_rank``: Flatten's, a split point between the dimensions)."""
    high = rank if upto_rank else rank - 1
    if not -rank <= int(axis) <= high:
        raise GraphError(f"axis {int(axis)} is out of range for a tensor of {rank} dimension(s) (ONNX allows "
                         f"{-rank} to {high})")
    return int(axis) + rank if int(axis) < 0 else int(axis)


def _reshape_target(in_shape, target, allowzero: bool = False) -> tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input dim (unless ``allowzero``), -1 is
    inferred."""
    out = [int(in_shape[i]) if (int(d) == 0 and not allowzero) else int(d) for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise GraphError(f"Reshape to {list(target)}: more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(in_shape) // known if known else 0
    if math.prod(out) != math.prod(in_shape):
        raise GraphError(f"Reshape of {tuple(in_shape)} to {list(target)} changes the number of elements")
    return tuple(out)


def _slice_shape(shape, starts, ends, axes, steps) -> tuple[tuple[int, ...], list[tuple[int, int, int, int]]]:
    """Output shape of ONNX Slice and the normalised (axis, start, stop, step) per axis."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else list(steps)
    out, parts = list(shape), []
    for a, s, e, st in zip(axes, starts, ends, steps):
        if int(st) == 0:
            raise GraphError("Slice: a step of 0")
        start, stop, step = slice(int(s), int(max(min(int(e), 2**62), -2**62)), int(st)).indices(shape[a])
        out[a] = len(range(start, stop, step))
        parts.append((a, start, stop, step))
    return tuple(out), parts
