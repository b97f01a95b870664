"""Vector-unit model: element-wise ops, row reductions, gathers and optimizer updates.

A vector op spreads its elements over tiles (never fewer than a grain per tile); the busiest
tile sets the time. Costs per 64-bit vector of each op kind come from
``configs/_vector-ops.toml`` (cycles per vector), the vector width from the IPU config.
"""

from __future__ import annotations

import math
import tomllib
from functools import lru_cache

from ..errors import ConfigError, UnsupportedOpError
from ..hardware.configs import CONFIG_DIR
from ..hardware.system import IPU

VECTOR_OPS_FILE = CONFIG_DIR / "_vector-ops.toml"


@lru_cache(maxsize=1)
def vector_op_table() -> tuple[dict[str, float], dict[str, float]]:
    """(cycles per vector by op kind, per-tile overheads) from ``configs/_vector-ops.toml``."""
    with open(VECTOR_OPS_FILE, "rb") as f:
        data = tomllib.load(f)
    table = data.get("cycles_per_vector", {})
    for k, v in table.items():
        if not isinstance(v, (int, float)) or v <= 0:
            raise ConfigError(f"{VECTOR_OPS_FILE}: cycles_per_vector.{k} = {v!r} must be a number > 0")
    return dict(table), dict(data.get("per_tile_overhead_cycles", {}))


def cycles_per_vector(kind: str) -> float:
    table, _ = vector_op_table()
    if kind not in table:
        raise UnsupportedOpError(
            f"the vector model has no cost for {kind!r}; add it to {VECTOR_OPS_FILE.name} "
            f"(known: {', '.join(sorted(table))})")
    return table[kind]


def grain_elements(itemsize: int, ipu: IPU) -> int:
    """Fewest elements worth putting on a tile: one vector for each worker thread."""
    return max(1, int(ipu.vector_bytes_per_cycle // itemsize) * ipu.worker_threads)


def spread(elements: int, itemsize: int, ipu: IPU, tiles: int) -> tuple[int, int]:
    """(tiles used, elements on the busiest tile) when ``elements`` are spread evenly."""
    grain = grain_elements(itemsize, ipu)
    used = max(1, min(tiles, math.ceil(elements / grain)))
    return used, math.ceil(elements / used)


def tile_cycles(elements_on_tile: int, itemsize: int, kind: str, ipu: IPU) -> int:
    """Compute cycles of one tile working on ``elements_on_tile`` elements of ``kind``."""
    vectors = math.ceil(elements_on_tile * itemsize / ipu.vector_bytes_per_cycle)
    return ipu.vertex_overhead_cycles + math.ceil(vectors * cycles_per_vector(kind))


def row_tile_cycles(rows_on_tile: int, row_elements: int, itemsize: int, kind: str, ipu: IPU) -> int:
    """Compute cycles of a tile that owns ``rows_on_tile`` whole rows of a row-wise op."""
    _, overheads = vector_op_table()
    vectors = math.ceil(row_elements * itemsize / ipu.vector_bytes_per_cycle)
    per_row = overheads.get("row", 0) + math.ceil(vectors * cycles_per_vector(kind))
    return ipu.vertex_overhead_cycles + rows_on_tile * per_row
