"""popxl-addons' group-quantised linear layer (``popxl_addons.layers.linear_gq``): weights kept as
4-bit integers in groups with a scale and bias each, decompressed on the IPU by a custom C++ op
(``group_quantize_decompress``) before the matmul. Not modelled: the names import (models import
them whether or not they quantise), and using either raises ``NotModelledError``."""

from __future__ import annotations

from ...popxl.errors import NotModelledError

__all__ = ["LinearGQ", "group_quantize_compress_numpy"]


def _refuse(name: str) -> NotModelledError:
    return NotModelledError(f"popxl_addons.layers.linear_gq.{name} is not modelled by the simulator: group-quantised "
                            "weights need popxl-addons' group_quantize_decompress C++ op; use unquantised layers "
                            "(layers.Linear)")


class LinearGQ:
    def __init__(self, *args, **kwargs):
        raise _refuse("LinearGQ")


def group_quantize_compress_numpy(*args, **kwargs):
    raise _refuse("group_quantize_compress_numpy")
