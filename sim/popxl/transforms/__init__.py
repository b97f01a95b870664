"""``popxl.transforms``: ``autodiff`` (the function; :mod:`.autodiff` is also a module, as in
PopXL: ``from popxl.transforms.autodiff import GradGraphInfo``)."""

from __future__ import annotations

from .autodiff import (ExpectedConnection, ExpectedConnectionType, GradGraphInfo, _call_grad_graph,
                       _gradient_update, autodiff, from_gradient)

_NOT_MODELLED = ("io_tile_exchange", "merge_exchange", "decompose_sum")


def __getattr__(name: str):
    if name in _NOT_MODELLED:
        from ..errors import not_modelled
        raise not_modelled("popxl.transforms", name, __all__)
    raise AttributeError(f"module 'sim.popxl.transforms' has no attribute {name!r}")


__all__ = ["ExpectedConnection", "ExpectedConnectionType", "GradGraphInfo", "autodiff"]
