"""What an op costs: cycles, bytes and the per-tile vectors behind them.

An :class:`OpCost` is in cycles of the IPU clock and bytes; its :class:`TileProfile` holds one
entry per compute tile, so load imbalance stays visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class TileProfile:
    """Per-tile vectors of one op (one entry per compute tile): compute cycles, bytes received
    and temporary bytes. The op's compute time is the busiest tile's. ``copies`` is the part of
    ``compute`` that call copies added to the op run (None: none)."""

    compute: np.ndarray
    bytes_in: np.ndarray
    temp: np.ndarray
    copies: np.ndarray | None = None

    @staticmethod
    def padded(tiles: int, compute, bytes_in, temp) -> "TileProfile":
        """Vectors for the first tiles (as many as ``compute`` has entries; ``bytes_in`` and ``temp`` each one
        value for all of them or one each), zero on the idle rest."""
        n = len(np.atleast_1d(compute))
        if n > tiles:
            raise ValueError(f"a profile of {n} tiles padded to {tiles}")

        def pad(v):
            out = np.zeros(tiles)
            v = np.asarray(v, dtype=float)
            out[:n] = v if v.ndim == 0 or v.shape == (n,) else np.broadcast_to(v, (n,))
            return out
        return TileProfile(pad(compute), pad(bytes_in), pad(temp))

    @staticmethod
    def uniform(tiles: int, used: int, compute: float, bytes_in: float = 0, temp: float = 0) -> "TileProfile":
        return TileProfile.padded(tiles, np.full(max(used, 1), float(compute)), bytes_in, temp)


def _counts(total: int, used: int) -> np.ndarray:
    """``total`` items over ``used`` tiles as evenly as possible (the first tiles get one more)."""
    used = max(1, used)
    return total // used + (np.arange(used) < total % used)


@dataclass(frozen=True)
class OpCost:
    """Cost of one op on one IPU. Cycles are IPU clock cycles, bytes are bytes.

    ``cycles = exchange_cycles + compute_cycles + sync_cycles``: the op's exchange phases, the
    compute sets on the busiest tile (BSP: the slowest tile sets the pace) and the on-chip
    barriers between them. ``launch_cycles`` and ``exchange_setup_cycles`` are the parts of
    compute and exchange that do not shrink with the work (the breakdown shows them apart).
    """

    compute_cycles: int
    exchange_cycles: int
    sync_cycles: int
    supersteps: int  # compute sets
    flops: float
    exchange_bytes: int  # bytes received over all tiles
    tiles_used: int
    temp_bytes_per_tile: int  # peak temporary memory on the busiest tile
    plan: str = ""
    profile: TileProfile | None = field(default=None, compare=False, repr=False)
    launch_cycles: int = 0  # the fixed part of compute_cycles: vertex launches and prologues
    exchange_setup_cycles: int = 0  # the fixed part of exchange_cycles: one set-up per phase
    # (compute sets, exchange set-up cycles) of the op's program when it runs parts in a loop, each
    # part compiled once (None: every compute set and exchange phase it runs is in its program)
    program_extent: tuple[int, int] | None = None
    codelets: tuple = ()  # keys of the distinct codelets it runs (empty: one per compute set of its program)
    copy_sets: int = 0  # of its compute sets, those of call copies added to it (sim.compiler.outlining.with_copy)
    relaid_cycles: int = 0  # the part of the cycles copying operands into a matmul's layout (amp.relaid_operands)
    # a matmul or convolution pass no plan of which fits availableMemoryProportion (amp.memory_bounds)
    over_memory_budget: bool = False
    # bytes of constants each tile it works on holds for its vertices (popnn's pooling worklists), always live
    constant_bytes_per_tile: int = 0

    @property
    def cycles(self) -> int:
        return self.compute_cycles + self.exchange_cycles + self.sync_cycles

    def tile_profile(self, tiles: int) -> TileProfile:
        """Its :attr:`profile`, or, without one, its work spread evenly over its first ``tiles_used``
        tiles (at most ``tiles``)."""
        if self.profile is not None:
            return self.profile
        return TileProfile.uniform(tiles, min(self.tiles_used, tiles), self.compute_cycles,
                                   self.exchange_bytes / max(self.tiles_used, 1), self.temp_bytes_per_tile)


FREE = OpCost(0, 0, 0, 0, 0.0, 0, 0, 0, "view: no data moves")


def in_series(parts: list[tuple[OpCost, int]], tiles: int, plan: str) -> OpCost:
    """One op that runs each ``(cost, times)`` of ``parts`` one after another (a loop of compute
    sets and matmuls): cycles, compute sets, FLOPs and bytes add up, the tile vectors add up
    weighted by the times, and the temporary memory is the largest part's. The program holds each
    part once, however many times the loop runs it (``program_extent``). A part without a tile
    profile works evenly on its first ``tiles_used`` tiles."""
    parts = [(c, n) for c, n in parts if n > 0]

    def total(field: str) -> int:
        return sum(getattr(c, field) * n for c, n in parts)

    profiles = [c.tile_profile(tiles) for c, _ in parts]

    def vector(field: str) -> np.ndarray:
        out = np.zeros(tiles)
        for profile, (_, n) in zip(profiles, parts):
            out += getattr(profile, field) * n
        return out

    temp = np.zeros(tiles)
    for profile in profiles:
        temp = np.maximum(temp, profile.temp)
    return OpCost(total("compute_cycles"), total("exchange_cycles"), total("sync_cycles"), total("supersteps"),
                  float(sum(c.flops * n for c, n in parts)), total("exchange_bytes"),
                  max((c.tiles_used for c, _ in parts), default=0),
                  max((c.temp_bytes_per_tile for c, _ in parts), default=0), plan,
                  TileProfile(vector("compute"), vector("bytes_in"), temp),
                  launch_cycles=total("launch_cycles"), exchange_setup_cycles=total("exchange_setup_cycles"),
                  program_extent=(sum(c.supersteps for c, _ in parts), sum(c.exchange_setup_cycles for c, _ in parts)),
                  constant_bytes_per_tile=sum(c.constant_bytes_per_tile for c, _ in parts))
