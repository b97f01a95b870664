"""``popxl.ops.collectives.collectives``: the reduction names the collectives take (PopXL's
``CollectiveOps`` and ``to_collective_op``, which popxl-addons' collectives import)."""

from __future__ import annotations

from typing import Literal

CollectiveOps = Literal["add", "mean", "mul", "min", "max", "and", "or", "square_add"]

#: PopXL's reductions (to PopART's CollectiveOperator); the simulator keeps the name: the reduction
#: does not change the time
OP_MAP = {op: op for op in ("add", "mean", "mul", "min", "max", "and", "or", "square_add")}


def to_collective_op(op: CollectiveOps) -> str:
    try:
        return OP_MAP[op]
    except KeyError:
        raise ValueError(f"collective op {op!r} is not one of {sorted(OP_MAP)}") from None


__all__ = ["CollectiveOps", "OP_MAP", "to_collective_op"]
