"""``popxl.ops.call`` as a module, as PopXL has it (``from popxl.ops.call import CallSiteInfo``);
the package's ``call`` is the function."""

from __future__ import annotations

from ._core import CallSiteInfo, call, call_with_info

__all__ = ["CallSiteInfo", "call", "call_with_info"]
