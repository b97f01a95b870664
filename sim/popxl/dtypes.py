"""PopXL's dtypes (``popxl.float16``, ``popxl.float32``, ...), mapped to the simulator's.

Only the size of an element matters to the simulator. 64-bit host types are accepted for data
and downcast to 32 bits (``downcast=True``, PopXL's default), as the IPU has no 64-bit types.
"""

from __future__ import annotations

import builtins

import numpy as np


class dtype:
    """One element type: its PopXL name, its numpy type and the simulator's dtype name."""

    def __init__(self, name: str, numpy_name: str, sim_name: str, is_floating_point: bool):
        self.name = name
        self._numpy = np.dtype(numpy_name)
        self.sim_name = sim_name
        self.is_floating_point = is_floating_point
        self.is_int = not is_floating_point and name != "bool"

    @property
    def itemsize(self) -> int:
        return self._numpy.itemsize

    def as_numpy(self) -> np.dtype:
        return self._numpy

    @classmethod
    def as_dtype(cls, value) -> dtype:
        """A popxl dtype from a popxl dtype, a name ("float16"), a numpy or torch dtype, a Python type
        (``float`` is float32), or an array or tensor (its dtype), as PopXL's ``dtype.as_dtype``; a
        ``ValueError`` when there is none, as PopXL raises."""
        if isinstance(value, dtype):
            return value
        if isinstance(value, str) and value in _BY_NAME:
            return _BY_NAME[value]
        if value is builtins.float:  # PopXL's Python types: float is float32, bool is bool
            return float32
        if value is builtins.bool:
            return bool
        found = _from_numpy_or_torch(value)
        if found is None and hasattr(value, "dtype") and not isinstance(value, type):
            found = _from_numpy_or_torch(value.dtype)  # an array or a tensor
        if found is None:
            raise ValueError(f"There is not a `popxl.dtype` that is compatible with value: {value}, type: "
                             f"{type(value)}. Use popxl.float16, popxl.float32, popxl.int32, popxl.uint32, "
                             "popxl.int8, popxl.uint8 or popxl.bool")
        return found

    @classmethod
    def from_name(cls, name: str) -> dtype:
        """The dtype of that name (PopXL's ``dtype.from_name``)."""
        if isinstance(name, str) and name in _BY_NAME:
            return _BY_NAME[name]
        raise ValueError(f"There is not a `popxl.dtype` that has a name: {name}.")

    def downcast(self) -> dtype:
        """The 32-bit type the IPU uses for a 64-bit host type (itself otherwise)."""
        return {"float64": float32, "int64": int32, "uint64": uint32}.get(self.name, self)

    def __repr__(self) -> str:
        return f"dtype.{self.name}"

    def __eq__(self, other) -> bool:
        return isinstance(other, dtype) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


bool = dtype("bool", "bool", "bool", False)
int8 = dtype("int8", "int8", "int8", False)
uint8 = dtype("uint8", "uint8", "uint8", False)
int32 = dtype("int32", "int32", "int32", False)
uint32 = dtype("uint32", "uint32", "int32", False)  # same size: priced as int32
float16 = dtype("float16", "float16", "float16", True)
float32 = dtype("float32", "float32", "float32", True)
float64 = dtype("float64", "float64", "float32", True)  # host only: downcast to float32
int64 = dtype("int64", "int64", "int32", False)  # host only: downcast to int32
uint64 = dtype("uint64", "uint64", "int32", False)  # host only: downcast to uint32
# PopXL keeps FP8 host data as one byte per element (its np_dtype_float8_*); both formats cost the same
#: PopXL's numpy types of FP8 host data (``popxl.dtypes.np_dtype_float8_143``)
np_dtype_float8_143 = np.dtype([("float8_143", "u1")])
np_dtype_float8_152 = np.dtype([("float8_152", "u1")])
float8_143 = dtype("float8_143", np_dtype_float8_143, "float8", True)
float8_152 = dtype("float8_152", np_dtype_float8_152, "float8", True)
half = float16
float = float32
double = float64  # host only, as float64

_ALL = (bool, int8, uint8, int32, uint32, float16, float32, float64, int64, uint64, float8_143, float8_152)
_BY_NAME = {d.name: d for d in _ALL} | {"half": float16, "float": float32, "double": float64}
_FROM_SIM = {"bool": bool, "int8": int8, "uint8": uint8, "int32": int32, "float16": float16,
             "float32": float32, "float8": float8_143}


def _from_numpy_or_torch(value) -> dtype | None:
    """The dtype of a numpy dtype (or what ``np.dtype`` takes) or a torch dtype, else None."""
    if type(value).__module__ == "torch" and str(value).startswith("torch."):  # torch.int32 -> int32
        return {"half": float16, "float": float32, "double": float64, "long": int64, "int": int32}.get(
            str(value)[len("torch."):], _BY_NAME.get(str(value)[len("torch."):]))
    try:
        np_type = np.dtype(value)
    except (TypeError, ValueError):
        return None
    for d in _ALL:
        if d._numpy == np_type:
            return d
    return None


def from_sim(name: str) -> dtype:
    """The popxl dtype of a simulator dtype name."""
    return _FROM_SIM[name]


__all__ = [
    "bool",
    "double",
    "dtype",
    "float",
    "float16",
    "float32",
    "float64",
    "float8_143",
    "float8_152",
    "half",
    "int8",
    "int32",
    "int64",
    "np_dtype_float8_143",
    "np_dtype_float8_152",
    "uint8",
    "uint32",
    "uint64",
]
