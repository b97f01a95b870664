"""``popxl.ops.utils``: the checks PopXL's ops (and popxl-addons' ops) run on their inputs."""

from __future__ import annotations

from ..dtypes import dtype
from ..errors import UndefinedValue
from ..tensor import Tensor

__all__ = ["cast_if_needed", "check_in_graph", "check_tensor_ipu_and_tile_set", "convert_optional_float",
           "convert_optional_int", "handle_negative_axis", "UndefinedValue"]


def cast_if_needed(t: Tensor, data_type: dtype) -> Tensor:
    from ._core import cast
    return cast(t, data_type) if t.dtype != data_type else t


def check_in_graph(graph, *args, **tensors: Tensor) -> None:
    """Every keyword argument must be a tensor of ``graph`` (PopXL's TypeError / ValueError)."""
    if args:
        raise TypeError("pass the tensors to check as keyword arguments (name=tensor)")
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"input {name!r} is not a Tensor but a {type(t).__name__}: {t!r}")
        if t._graph is not graph:
            raise ValueError(f"input {name!r} belongs to another graph than {graph.name}, the one being built")


def check_tensor_ipu_and_tile_set(*args, **tensors: Tensor) -> None:
    """The tensors must be on one IPU (tensors made outside ``popxl.ipu`` are skipped, as PopXL
    skips an undefined IPU). Tile sets are not checked: the simulator has one tile set."""
    if args:
        raise TypeError("pass the tensors to check as keyword arguments (name=tensor)")
    placed = [(t._ipu, name) for name, t in tensors.items() if isinstance(t, Tensor) and t._ipu is not None]
    for ipu, name in placed[1:]:
        if ipu != placed[0][0]:
            raise ValueError(f"inputs {placed[0][1]!r} and {name!r} are on different IPUs ({placed[0][0]} and {ipu}); "
                             "copy one to the other's IPU first")


def handle_negative_axis(t: Tensor, axis: int) -> int:
    return len(t.shape) + axis if axis < 0 else axis


def convert_optional_float(v: float | None) -> float | None:
    """PopXL wraps the value for PopART's C++ (``OptionalFloat``); here it stays a Python value."""
    return v


def convert_optional_int(v: int | None) -> int | None:
    return v
