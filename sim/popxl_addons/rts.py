"""popxl-addons' replicated tensor sharding helpers that need no collective: ``replica_sharded_spec``.
(Its reducing and gathering graphs are not here yet; they are refused by name.)"""

from __future__ import annotations

import math

from .. import popxl
from ..popxl.errors import not_modelled


def replica_sharded_spec(t: popxl.Tensor, shard_over) -> popxl.TensorSpec:
    """The spec of one replica's shard of ``t`` over ``shard_over``'s groups: ``t``'s elements over the
    group size, flat, with ``t``'s shape as its meta-shape; ``t``'s own spec when it is a shard already,
    the group has one member or does not divide ``t``."""
    if t.meta_shape or shard_over.group_size == 1 or t.nelms % shard_over.group_size:
        return t.spec
    return popxl.TensorSpec((math.prod(t.shape) // shard_over.group_size,), t.dtype, t.shape)


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl_addons.rts", name, ["replica_sharded_spec"])
