"""AMP model for matrix multiplication and convolution, with a tile planner.

A (batched) matmul ``G x [M, K] @ [K, N]`` is split over tiles as ``pg x pm x pn x pk`` blocks.
Each tile

1. receives its blocks of the operands in one exchange phase (activations always; a weight laid
   out for the plan only where ``pm > 1`` makes several tiles share one block),
2. runs one AMP vertex per group: ``2 * m * k_padded * n / amp_flops_per_cycle`` cycles plus the
   vertex's fixed cost (K pads to the AMP's input-channel group),
3. if ``pk > 1``, exchanges fp32 partial sums and reduces them on the vector unit.

The planner searches the splits vectorised over numpy arrays and keeps the fastest whose
temporary memory per tile (operand blocks plus partials) fits in
``availableMemoryProportion x SRAM``; if none fits it serialises the op into pieces, which is
Poplar's trade-off of speed for memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..hardware.system import IPU
from .exchange import exchange_cycles
from .opcost import TileProfile
from .vector import spread, tile_cycles

PARTIALS_BYTES = 4  # AMP partial sums are fp32 (PopTorch's default matmul partials type)


@dataclass(frozen=True)
class MatmulPlan:
    """How a matmul is split over tiles and what each phase costs (cycles, bytes per tile)."""

    splits: tuple[int, int, int, int]  # pg, pm, pn, pk
    dims: tuple[int, int, int, int]  # G, M, K, N of one serial piece
    serial: int  # pieces the op is serialised into (1 = not serialised)
    tiles_used: int
    exchange_cycles: int  # operand exchange + partials exchange, all pieces
    compute_cycles: int  # AMP + partials reduction on the busiest tile, all pieces
    supersteps: int  # compute sets, all pieces
    exchange_bytes: int  # bytes received over all tiles, all pieces
    temp_bytes_per_tile: int  # peak temporary bytes on the busiest tile
    fits: bool

    def profile(self, ipu: IPU, tiles: int, itemsize: int, b_is_weight: bool,
                conv: tuple[int, int] | None = None) -> TileProfile:
        """Per-tile compute cycles, bytes in and temporary bytes of this plan (all pieces).

        Blocks are as even as the dimensions allow: the first ``d % p`` blocks of a split
        dimension hold one more row than the others, so tiles are unevenly loaded.
        """
        pg, pm, pn, pk = self.splits
        G, M, K, N = self.dims

        def blocks(d, p):
            return d // p + (np.arange(p) < d % p)
        g, m, n, k = (a.ravel() for a in np.meshgrid(blocks(G, pg), blocks(M, pm), blocks(N, pn),
                                                     blocks(K, pk), indexing="ij"))
        fp16 = itemsize == 2
        rate = ipu.amp_fp16_flops_per_cycle if fp16 else ipu.amp_fp32_flops_per_cycle
        group = ipu.amp_fp16_input_group if fp16 else ipu.amp_fp32_input_group
        k_pad = -(-k // group) * group
        a = g * m * k * itemsize * (conv_input_factor(*conv, m) if conv else 1.0)
        b = g * k * n * itemsize
        compute = g * (np.ceil(2.0 * m * k_pad * n / rate) + ipu.amp_vertex_overhead_cycles)
        recv = a + (b * (1.0 - 1.0 / pm) if b_is_weight else b)
        temp = a + b
        if pk > 1:
            share = np.ceil(g * m * n / pk)
            compute += ipu.vertex_overhead_cycles + np.ceil(pk * share / (ipu.vector_bytes_per_cycle / PARTIALS_BYTES))
            recv = recv + (pk - 1) * share * PARTIALS_BYTES
            temp = temp + g * m * n * PARTIALS_BYTES
        return TileProfile.padded(tiles, compute * self.serial, recv * self.serial, temp)

    def describe(self) -> str:
        pg, pm, pn, pk = self.splits
        s = f"groups/{pg} rows/{pm} cols/{pn} inner/{pk} on {self.tiles_used} tiles"
        return s + (f", serialised x{self.serial}" if self.serial > 1 else "")


def _candidates(dim: int, tiles: int) -> np.ndarray:
    """Split counts worth trying for a dimension: powers of 2, 3 x powers of 2, the divisors
    of the tile count (1472 = 64 x 23 on Mk2), and ``dim`` itself."""
    top = min(dim, tiles)
    vals = {1, top}
    p = 1
    while p <= top:
        vals.add(p)
        if 3 * p <= top:
            vals.add(3 * p)
        p *= 2
    vals.update(d for d in _divisors(tiles) if d <= top)
    return np.array(sorted(vals), dtype=np.int64)


@lru_cache(maxsize=16)
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def plan_matmul(G: int, M: int, K: int, N: int, itemsize: int, b_is_weight: bool, ipu: IPU,
                tiles: int, memory_proportion: float, conv: tuple[int, int] | None = None) -> MatmulPlan:
    """Best plan for ``G x [M,K] @ [K,N]`` with operands of ``itemsize`` bytes.

    ``conv = (kernel, stride)`` marks a convolution lowered to a matmul (M = output positions,
    K = input channels x kernel^2): a tile then receives an input patch, not im2col rows.

    If no serialisation fits the budget, the plan needing the least temporary memory is
    returned (``fits=False``): the budget is a target, and tile memory is checked later.
    """
    budget = memory_proportion * ipu.sram_bytes_per_tile
    best = None
    for serial in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        # serialise along the largest of M and N
        Ms, Ns = (math.ceil(M / serial), N) if M >= N else (M, math.ceil(N / serial))
        plan = _search(G, Ms, K, Ns, itemsize, b_is_weight, ipu, tiles, budget, conv, serial)
        if plan.fits:
            return plan
        if best is None or plan.temp_bytes_per_tile < best.temp_bytes_per_tile:
            best = plan
        if Ms == 1 and Ns == 1:
            break
    return best


def _search(G, M, K, N, itemsize, b_is_weight, ipu: IPU, tiles, budget, conv, serial) -> MatmulPlan:
    fp16 = itemsize == 2
    rate = ipu.amp_fp16_flops_per_cycle if fp16 else ipu.amp_fp32_flops_per_cycle
    group = ipu.amp_fp16_input_group if fp16 else ipu.amp_fp32_input_group
    pg, pm, pn, pk = np.meshgrid(_candidates(G, tiles), _candidates(M, tiles),
                                 _candidates(N, tiles), _candidates(K, tiles), indexing="ij")
    pg, pm, pn, pk = (a.ravel() for a in (pg, pm, pn, pk))
    used = pg * pm * pn * pk
    ok = used <= tiles
    pg, pm, pn, pk, used = pg[ok], pm[ok], pn[ok], pk[ok], used[ok]
    g = -(-G // pg)
    m = -(-M // pm)
    n = -(-N // pn)
    k = -(-K // pk)
    k_pad = -(-k // group) * group
    a_bytes = g * m * k * itemsize * (conv_input_factor(*conv, m) if conv else 1.0)
    b_bytes = g * k * n * itemsize
    b_recv = b_bytes * (1.0 - 1.0 / pm) if b_is_weight else b_bytes
    recv1 = a_bytes + b_recv
    exch1 = np.where(recv1 > 0, ipu.exchange_setup_cycles + np.ceil(recv1 / ipu.exchange_bytes_per_cycle_per_tile), 0)
    amp = g * (np.ceil(2.0 * m * k_pad * n / rate) + ipu.amp_vertex_overhead_cycles)
    # partial-sum reduction over pk tiles: each reducing tile owns 1/pk of the m x n outputs
    out_share = np.ceil(g * m * n / pk)
    recv2 = (pk - 1) * out_share * PARTIALS_BYTES
    exch2 = np.where(pk > 1, ipu.exchange_setup_cycles + np.ceil(recv2 / ipu.exchange_bytes_per_cycle_per_tile), 0)
    vec_per_cycle = ipu.vector_bytes_per_cycle / PARTIALS_BYTES
    red = np.where(pk > 1, ipu.vertex_overhead_cycles + np.ceil(pk * out_share / vec_per_cycle), 0)
    syncs = np.where(pk > 1, 4, 2) * ipu.internal_sync_cycles
    total = exch1 + amp + exch2 + red + syncs
    partials = np.where(pk > 1, g * m * n * PARTIALS_BYTES, 0)
    temp = a_bytes + b_bytes + partials
    fits = temp <= budget
    if fits.any():
        idx_pool = np.flatnonzero(fits)
    else:
        idx_pool = np.array([int(np.argmin(temp))])
    # fastest; ties broken by fewer tiles, then by less memory
    order = np.lexsort((temp[idx_pool], used[idx_pool], total[idx_pool]))
    i = int(idx_pool[order[0]])
    recv_total = (recv1[i] * used[i] + (recv2[i] * used[i] if pk[i] > 1 else 0))
    return MatmulPlan(
        splits=(int(pg[i]), int(pm[i]), int(pn[i]), int(pk[i])),
        dims=(G, M, K, N),
        serial=serial,
        tiles_used=int(used[i]),
        exchange_cycles=int(exch1[i] + exch2[i]) * serial,
        compute_cycles=int(amp[i] + red[i]) * serial,
        supersteps=(2 if pk[i] > 1 else 1) * serial,
        exchange_bytes=int(recv_total) * serial,
        temp_bytes_per_tile=int(temp[i]),
        fits=bool(fits[i]),
    )


def conv_input_factor(kernel: int, stride: int, positions: np.ndarray) -> np.ndarray:
    """Bytes of input patch a tile needs per byte of im2col rows it computes.

    A tile computing a square of ``p`` output positions reads a ``((sqrt(p)-1)*stride + kernel)^2``
    input patch per channel, not ``p * kernel^2`` im2col values.
    """
    side = np.sqrt(np.maximum(positions, 1))
    patch = ((side - 1) * stride + kernel) ** 2
    return np.minimum(1.0, patch / (np.maximum(positions, 1) * kernel * kernel))


__all__ = ["MatmulPlan", "plan_matmul", "conv_input_factor", "spread", "tile_cycles", "exchange_cycles"]
