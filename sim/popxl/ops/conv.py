"""``popxl.ops.conv`` as a module, as PopXL has it (``from popxl.ops.conv import PadType``); the
package's ``conv`` is the function."""

from __future__ import annotations

from typing import Literal

from ._core import conv, conv_pow2scaled, conv_transpose, conv_transpose_pow2scaled

PadType = Literal["not_set", "same_upper", "same_lower", "valid"]

__all__ = ["PadType", "conv", "conv_pow2scaled", "conv_transpose", "conv_transpose_pow2scaled"]
