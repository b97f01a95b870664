"""``popxl.utils``: PopXL's host-side helpers that popxl-addons and scripts use."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import dtypes
from .fp8_utils import host_pow2scale_cast_to_fp8  # as PopXL's utils imports it

#: the 32-bit types PopXL stores 64-bit host data as
downcast_np_dtypes = {np.dtype("int64"): np.dtype("int32"), np.dtype("uint64"): np.dtype("uint32"),
                      np.dtype("float64"): np.dtype("float32")}


def to_numpy(x, dtype: dtypes.dtype | None = None, downcast: bool = True, copy: bool = True,
             log2_scale: int | None = None, nan_on_overflow: bool | None = None) -> np.ndarray:
    """``x`` (a numpy array, a torch tensor, nested sequences or a scalar) as a C-ordered numpy
    array of ``dtype`` (or its own type, 64-bit types downcast to 32 when ``downcast``), as PopXL's
    ``to_numpy``. FP8 data made from float16/32/64 values is converted to PopXL's one-byte structured
    type as PopXL converts it (:func:`host_pow2scale_cast_to_fp8`, scaled by ``2**log2_scale``, NaN on
    overflow unless ``nan_on_overflow`` is False): host data, which ``session.get_tensor_data`` returns."""
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor
        x = x.detach().numpy()
    if dtype is not None:
        dtype = dtypes.dtype.as_dtype(dtype)
    if dtype in (dtypes.float8_143, dtypes.float8_152):
        arr = np.asarray(x, order="C")
        if arr.dtype != dtype.as_numpy():
            if arr.dtype not in (np.float16, np.float32, np.float64):
                raise TypeError(f"Type {arr.dtype} is not supported for float8 tensors. Please use float16, float32 "
                                "or float64 types.")
            arr = host_pow2scale_cast_to_fp8(arr, dtype, 0 if log2_scale is None else log2_scale,
                                             True if nan_on_overflow is None else nan_on_overflow)
        return arr.copy() if copy else arr
    if log2_scale is not None:
        raise RuntimeError(f"Non-default value for 'log2scale' is not supported for dtypes that are not "
                           f"popxl.float8_143 or popxl.float8_152 (got {dtype})")
    if nan_on_overflow is not None:
        raise RuntimeError(f"Non-default value for 'nan_on_overflow' is not supported for dtypes that are not "
                           f"popxl.float8_143 or popxl.float8_152 (got {dtype})")
    arr = np.asarray(x, dtype=dtype.as_numpy() if dtype is not None else None, order="C")
    if dtype is None and downcast and arr.dtype in downcast_np_dtypes:
        return np.array(arr, dtype=downcast_np_dtypes[arr.dtype], order="C")
    return arr.copy() if copy and arr is x else arr


def table_to_string(rows: Sequence[Sequence], delimiter: str = " | ", header: bool = True) -> str:
    """``rows`` as a text table, columns padded to their widest entry, the first row underlined
    when ``header`` (PopXL's layout)."""
    widths = [max(map(len, map(str, col))) for col in zip(*rows)]
    out = ""
    for i, row in enumerate(rows):
        line = delimiter.join(f"{c: <{w}}" for c, w in zip(row, widths)) + "\n"
        out += line
        if header and i == 0 and len(rows) > 1:
            out += "-" * len(line) + "\n"
    return out


__all__ = ["host_pow2scale_cast_to_fp8", "table_to_string", "to_numpy"]
