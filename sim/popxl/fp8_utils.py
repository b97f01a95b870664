"""PopXL's host-side FP8 conversions (``popxl.fp8_utils``): user data to PopXL's one-byte FP8 arrays and back.

The formats are Graphcore's (the FP8 formats PopART's ``convertFromFloat*ToFloat8AsUInt8`` implement):
``float8_143`` has 4 exponent bits with bias 8 and 3 mantissa bits, ``float8_152`` 5 exponent bits with
bias 16 and 2 mantissa bits; both keep denormals and have no infinities, and the one NaN is the byte
0x80 (the sign bit alone). The largest values are 240 (143) and 57,344 (152). A value is multiplied by
``2 ** log2_scale`` first and rounded to the nearest representable one, ties to even. The simulator
computes no device values; these run on the host, so a script's data reaches its streams as PopXL's would.
"""

from __future__ import annotations

import numpy as np

from . import dtypes

#: (exponent bits, mantissa bits, exponent bias) of each format
_FORMATS = {"float8_143": (4, 3, 8), "float8_152": (5, 2, 16)}
_NAN = 0x80


def _format(dtype) -> tuple[str, int, int, int]:
    name = getattr(dtype, "name", None)
    if name not in _FORMATS:
        raise RuntimeError(f"dtype {dtype} not currently supported: give popxl.float8_143 or popxl.float8_152")
    return (name, *_FORMATS[name])


def _check_scale(log2_scale) -> int:
    if isinstance(log2_scale, bool) or not isinstance(log2_scale, (int, np.integer)) or not -32 <= log2_scale < 32:
        raise RuntimeError(f"log2_scale {log2_scale!r} not currently supported: an int in [-32, 32)")
    return int(log2_scale)


def host_pow2scale_cast_to_fp8(src, dtype=None, log2_scale: int = 0, nan_on_overflow: bool = True) -> np.ndarray:
    """``cast(src * 2**log2_scale, dtype)`` on the host: a numpy array of PopXL's FP8 structured dtype
    (one byte an element). ``src`` float16, float32 or float64 (a torch tensor is converted); a value
    beyond the format's range becomes NaN with ``nan_on_overflow``, else the largest value of its sign."""
    name, exp_bits, man_bits, bias = _format(dtype)
    scale = _check_scale(log2_scale)
    if hasattr(src, "detach"):  # a torch tensor
        src = src.detach().cpu().numpy()
    src = np.asarray(src)
    if src.dtype not in (np.float16, np.float32, np.float64):
        raise RuntimeError(f"src.dtype {src.dtype} not currently supported: float16, float32 or float64")
    x = src.astype(np.float64) * 2.0 ** scale
    sign = np.signbit(x)
    a = np.abs(x)
    min_exp = 1 - bias  # the exponent of the smallest normal value, and of the denormals' quantum
    largest = (2.0 - 2.0 ** -man_bits) * 2.0 ** ((1 << exp_bits) - 1 - bias)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.maximum(np.floor(np.log2(np.where(a > 0, a, 1.0))), min_exp)
        quantum = 2.0 ** (exponent - man_bits)
        q = np.round(a / quantum) * quantum  # numpy rounds half to even
    overflow = q > largest
    q = np.minimum(q, largest)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.maximum(np.floor(np.log2(np.where(q > 0, q, 1.0))), min_exp)
    normal = q >= 2.0 ** min_exp
    field = np.where(normal, e + bias, 0).astype(np.int64)
    mantissa = np.where(normal, q / 2.0 ** e - 1.0, q / 2.0 ** min_exp) * (1 << man_bits)
    byte = (field << man_bits) | np.rint(np.nan_to_num(mantissa)).astype(np.int64)
    byte = np.where(sign & (byte != 0), byte | 0x80, byte)
    bad = np.isnan(x) | (overflow & bool(nan_on_overflow))
    byte = np.where(bad, _NAN, byte).astype(np.uint8)
    return byte.reshape(src.shape).astype(np.dtype([(name, "u1")]))


def host_pow2scale_cast_from_fp8(src: np.ndarray, dtype=None, log2_scale: int = 0) -> np.ndarray:
    """``cast(src, dtype) * 2**log2_scale`` on the host: PopXL's FP8 array back to float16, float32 or
    float64 (0x80 is NaN)."""
    fields = getattr(np.asarray(src).dtype, "names", None) or ()
    if len(fields) != 1 or fields[0] not in _FORMATS:
        raise RuntimeError(f"src.dtype {np.asarray(src).dtype} not currently supported: PopXL's FP8 arrays "
                           "(popxl.fp8_utils.host_pow2scale_cast_to_fp8)")
    out = {dtypes.float16.name: np.float16, dtypes.float32.name: np.float32,
           dtypes.float64.name: np.float64}.get(getattr(dtype, "name", None))
    if out is None:
        raise RuntimeError(f"dtype {dtype} not currently supported: popxl.float16, float32 or float64")
    scale = _check_scale(log2_scale)
    exp_bits, man_bits, bias = _FORMATS[fields[0]]
    byte = np.asarray(src)[fields[0]].astype(np.int64)
    field = (byte >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = (byte & ((1 << man_bits) - 1)) / (1 << man_bits)
    value = np.where(field > 0, (1.0 + mantissa) * 2.0 ** (field - bias), mantissa * 2.0 ** (1 - bias))
    value = np.where(byte & 0x80, -value, value) * 2.0 ** scale
    value = np.where(byte == _NAN, np.nan, value)
    return value.astype(out)


__all__ = ["host_pow2scale_cast_from_fp8", "host_pow2scale_cast_to_fp8"]
