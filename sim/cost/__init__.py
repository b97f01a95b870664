"""Cost model: how long one op takes on one IPU and how much tile memory it needs.

``rules`` prices each op kind (:func:`op_cost`); ``amp`` plans matmuls and convolutions on the
AMP units; ``vector`` prices vector-unit work; ``exchange`` on-chip exchange; ``opcost`` holds
the result types. Cycles are IPU clock cycles, bytes are bytes.
"""

from .opcost import FREE, OpCost, TileProfile
from .rules import op_cost, op_signature
from .vector import codelet

__all__ = ["FREE", "OpCost", "TileProfile", "op_cost", "op_signature", "codelet"]
