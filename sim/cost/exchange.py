"""On-chip exchange: cycles to move bytes between the tiles of one IPU.

Each tile sends and receives at most ``ipu.exchange_bytes_per_cycle_per_tile`` bytes per cycle
(the exchange's data width), and on average ``ipu.exchange_rate``, the fraction
``exchange_efficiency`` of it (fitted to poplibs' single-layer benchmarks). An exchange phase
lasts as long as its busiest tile plus a fixed set-up cost. Broadcasts cost the receivers, not
the sender (the exchange fabric multicasts).
"""

from __future__ import annotations

import math

from ..hardware.system import IPU


def exchange_cycles(max_bytes_per_tile: float, ipu: IPU) -> int:
    """Cycles of one exchange phase whose busiest tile moves ``max_bytes_per_tile`` bytes."""
    if max_bytes_per_tile <= 0:
        return 0
    return ipu.exchange_setup_cycles + math.ceil(max_bytes_per_tile / ipu.exchange_rate)
