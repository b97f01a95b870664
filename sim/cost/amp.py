"""AMP model for matrix multiplication and convolution, with a tile planner (after poplin).

A (batched) matmul ``G x [M, K] @ [K, N]`` is planned as poplin plans a 1x1 convolution
(``lib/poplin/MatMul.cpp`` maps M to the batch, K to input and N to output channels, G to conv
groups): split over tiles as ``pg x pm x pn x pk`` blocks. Each tile

1. receives its operand blocks in one exchange phase. As poplin's estimator
   (``ConvModel.cpp :: addExchangeCycleEstimates``) assumes, 1/pn of a tile's input block and
   1/pm of a weight block are already on the tile; two tiles of a supertile receiving the same
   input share the exchange bus (twice the rate when ``pn`` is even). An activation on the right
   (e.g. attention's K or V) is received whole.
2. runs one AMP vertex: a fixed cost, plus per (input-channel group, output-channel group) pair
   a fixed cost and 4 cycles per output position (fp16; 8 in fp32)
   (``getConvPartial1x1SupervisorOuterLoopCycleEstimateHalfFloat``). The groups are the AMP's:
   16 input channels in fp16, 8 in fp32; as many output channels as conv units, which depends on
   the partials type (fp16 in with fp32 partials uses half the units of fp16 partials).
3. if ``pk > 1``, reduces the partial sums over the ``pk`` tiles in 1, 2 or 3 stages by depth
   (``ConvReducePlan.cpp :: getNumReduceStages``: < 16, < 125, more), each an exchange and a
   reduce compute set; the last stage writes the result type.
4. if the partials are wider than the result and nothing was reduced, casts the result.
5. if the op is serialised into pieces (poplin's serial splits), slices each piece's operand
   block and updates its part of the result (two copy compute sets per piece).

Every compute set and exchange phase also costs an on-chip sync. Costs are in tile cycles; the
busiest tile sets the pace. The planner searches the splits vectorised over numpy arrays and
keeps the fastest whose temporary memory per tile (operand blocks plus partials) fits in
``availableMemoryProportion x SRAM``; if none fits it serialises the op into pieces, which is
Poplar's trade-off of speed for memory. See docs/reference/poplibs-costs.md for the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..hardware.system import IPU
from .opcost import TileProfile
from .vector import codelet


@dataclass(frozen=True)
class AmpMode:
    """The AMP configuration of one precision: rate, channel groups, partials width (bytes)."""

    flops_per_cycle: float
    in_group: int
    out_group: int
    partials_bytes: int

    @property
    def cycles_per_position(self) -> float:
        """Cycles per output position of one (input group, output group) pair."""
        return 2.0 * self.in_group * self.out_group / self.flops_per_cycle


def amp_mode(ipu: IPU, itemsize: int, partials_bytes: int) -> AmpMode:
    """The AMP of ``ipu`` for operands of ``itemsize`` bytes and partials of ``partials_bytes``."""
    if itemsize == 2 and partials_bytes == 2:
        return AmpMode(ipu.amp_fp16_flops_per_cycle, ipu.amp_fp16_input_group, ipu.amp_fp16_output_group, 2)
    if itemsize == 2:
        return AmpMode(ipu.amp_fp16_fp32_partials_flops_per_cycle, ipu.amp_fp16_input_group,
                       ipu.amp_fp16_fp32_partials_output_group, 4)
    return AmpMode(ipu.amp_fp32_flops_per_cycle, ipu.amp_fp32_input_group, ipu.amp_fp32_output_group, 4)


def _channel_group_pairs(mode: AmpMode, g, k, n):
    """(input-channel group, output-channel group) pairs of ``g`` groups of ``[., k] @ [k, n]``."""
    return g * np.ceil(k / mode.in_group) * np.ceil(n / mode.out_group)


def amp_vertex_cycles(ipu: IPU, mode: AmpMode, g, m, k, n):
    """Cycles of the AMP vertex of a tile holding ``g`` groups of ``[m,k] @ [k,n]`` (arrays allowed)."""
    work = _channel_group_pairs(mode, g, k, n) * (ipu.amp_pair_overhead_cycles + m * mode.cycles_per_position)
    return np.where(g * m * k * n > 0, ipu.amp_vertex_overhead_cycles + np.ceil(work), 0)


def reduce_stages(depth):
    """Stages poplin reduces ``depth`` partials in (0 when there is nothing to reduce)."""
    depth = np.asarray(depth)
    return np.where(depth <= 1, 0, np.where(depth < 16, 1, np.where(depth < 125, 2, 3)))


def partials_reduction(ipu: IPU, outputs, depth, partials_bytes: int):
    """(exchange cycles, compute cycles, stages, bytes received) per tile of reducing ``depth``
    partial sums of ``outputs`` outputs, held by ``depth`` tiles (arrays). Each stage is one
    exchange phase and one compute set.

    In stage ``i`` of ``s`` every tile combines ``d = depth^(1/s)`` partial sets of the
    ``outputs / d^i`` outputs it then owns: it receives ``d - 1`` of them and adds ``d``. The
    reduce codelet's rate is per (output x partial) (poplin ``getReduceCycleEstimate``).
    """
    outputs = np.asarray(outputs, dtype=float)
    depth = np.asarray(depth, dtype=float)
    stages = reduce_stages(depth)
    red = codelet("reduce_partials")
    per_value = red.per_element(partials_bytes)
    d = np.ceil(depth ** (1.0 / np.maximum(stages, 1)))
    exch = np.zeros(np.broadcast(outputs, depth).shape)
    compute = np.zeros_like(exch)
    recv = np.zeros_like(exch)
    owners = np.ones_like(exch)  # partial sets combined so far
    for i in range(1, 4):
        active = stages >= i
        owners = np.where(active, np.minimum(owners * d, depth), owners)
        share = np.ceil(outputs / owners)
        got = np.where(active, (d - 1) * share * partials_bytes, 0)
        recv += got
        exch += np.where(active, ipu.exchange_setup_cycles + np.ceil(got / ipu.exchange_bytes_per_cycle_per_tile), 0)
        compute += np.where(active, red.fixed + np.ceil(d * share * per_value), 0)
    return exch, compute, stages, recv


@dataclass(frozen=True)
class MatmulPlan:
    """How a matmul is split over tiles and what each phase costs (cycles, bytes per tile)."""

    splits: tuple[int, int, int, int]  # pg, pm, pn, pk
    dims: tuple[int, int, int, int]  # G, M, K, N of one serial piece
    serial: int  # pieces the op is serialised into (1 = not serialised)
    tiles_used: int
    exchange_cycles: int  # operand exchange + partials exchange, all pieces
    compute_cycles: int  # AMP + partials reduction + cast on the busiest tile, all pieces
    supersteps: int  # compute sets, all pieces
    sync_points: int  # on-chip syncs (one before each exchange phase and compute set), all pieces
    exchange_bytes: int  # bytes received over all tiles, all pieces
    temp_bytes_per_tile: int  # peak temporary bytes on the busiest tile
    fits: bool
    total_cycles: int = 0  # exchange + compute + syncs, all pieces
    launch_cycles: int = 0  # the fixed part of compute_cycles (vertex and per-pair overheads)
    exchange_phases: int = 0  # exchange phases, all pieces (each costs the set-up)
    partials_bytes: int = 4

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
        c = _tile_costs(ipu, itemsize, self.partials_bytes, b_is_weight, conv, g, m, k, n, pm, pn, pk)
        return TileProfile.padded(tiles, c["compute"] * self.serial, c["recv"] * self.serial, c["temp"])

    def describe(self) -> str:
        pg, pm, pn, pk = self.splits
        s = f"groups/{pg} rows/{pm} cols/{pn} inner/{pk} on {self.tiles_used} tiles"
        return s + (f", serialised x{self.serial}" if self.serial > 1 else "")


def _tile_costs(ipu: IPU, itemsize: int, partials_bytes: int, b_is_weight: bool, conv, g, m, k, n, pm, pn, pk):
    """Costs of a tile holding ``g`` groups of ``[m,k] @ [k,n]`` blocks of a plan split
    ``pm x pn x pk`` (arrays: one entry per tile or per candidate plan). Cycles and bytes."""
    mode = amp_mode(ipu, itemsize, partials_bytes)
    bw = ipu.exchange_bytes_per_cycle_per_tile
    a_bytes = g * m * k * itemsize * (conv_input_factor(*conv, m) if conv else 1.0)
    b_bytes = g * k * n * itemsize
    a_recv = a_bytes * (1.0 - 1.0 / pn)
    b_recv = b_bytes * (1.0 - 1.0 / pm) if b_is_weight else b_bytes
    a_rate = np.where(pn % 2 == 0, 2 * bw, bw)  # supertile: both tiles take the same input
    recv1 = a_recv + b_recv
    exch1 = np.where(recv1 > 0, ipu.exchange_setup_cycles + np.ceil(a_recv / a_rate + b_recv / bw), 0)
    amp = amp_vertex_cycles(ipu, mode, g, m, k, n)
    launch = np.where(amp > 0, ipu.amp_vertex_overhead_cycles
                      + _channel_group_pairs(mode, g, k, n) * ipu.amp_pair_overhead_cycles, 0)
    outputs = g * m * n
    red_exch, red, red_stages, recv2 = partials_reduction(ipu, outputs, pk, partials_bytes)
    red_fixed = codelet("reduce_partials").fixed * red_stages
    cast_codelet = codelet("cast")
    cast_fixed = cast_codelet.fixed
    needs_cast = (partials_bytes > itemsize) & (np.asarray(pk) <= 1)
    cast = np.where(needs_cast, cast_fixed + np.ceil(outputs * cast_codelet.fp16), 0)
    # partials need their own buffer unless the AMP writes the result itself (nothing to reduce,
    # partials of the result's type); that result is a live activation, counted as such
    separate = (np.asarray(pk) > 1) | (partials_bytes > itemsize)
    exch_phases = np.where(recv1 > 0, 1, 0) + red_stages
    compute_sets = 1 + red_stages + needs_cast
    return {"exchange": exch1 + red_exch, "compute": amp + red + cast,
            "launch": launch + red_fixed + np.where(needs_cast, cast_fixed, 0),
            "exchange_phases": exch_phases, "compute_sets": compute_sets,
            "recv": recv1 + recv2, "temp": a_bytes + b_bytes + np.where(separate, outputs * partials_bytes, 0)}


def _candidates(dim: int, tiles: int) -> np.ndarray:
    """Split counts worth trying for a dimension: every count up to 16, powers of 2, 3 x powers
    of 2, the divisors of the tile count (1472 = 64 x 23 on Mk2), and ``dim`` itself."""
    top = min(dim, tiles)
    vals = {top, *range(1, min(top, 16) + 1)}
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
                tiles: int, memory_proportion: float, conv: tuple[int, int] | None = None,
                partials_bytes: int = 4) -> MatmulPlan:
    """Best plan for ``G x [M,K] @ [K,N]`` with operands of ``itemsize`` bytes and partial sums
    of ``partials_bytes`` (4: fp32, PopTorch's default; 2: ``Precision.setPartialsType(half)``).

    ``conv = (kernel, stride)`` marks a convolution lowered to a matmul (M = output positions,
    K = input channels x kernel^2): a tile then receives an input patch, not im2col rows.

    If no serialisation fits the budget, the plan needing the least temporary memory is
    returned (``fits=False``): the budget is a target, and tile memory is checked later.
    """
    partials_bytes = max(partials_bytes, itemsize)  # fp32 operands always have fp32 partials
    budget = memory_proportion * ipu.sram_bytes_per_tile
    best_fit, least_memory = None, None
    for serial in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        # serialise along the largest of M and N; like poplin's serial splits, a serial plan
        # competes on cycles with the others that fit, so a smaller budget is never faster
        Ms, Ns = (math.ceil(M / serial), N) if M >= N else (M, math.ceil(N / serial))
        plan = _search(G, Ms, K, Ns, itemsize, partials_bytes, b_is_weight, ipu, tiles, budget, conv, serial)
        if plan.fits:
            if best_fit is not None and plan.total_cycles >= best_fit.total_cycles:
                break  # more pieces only add per-piece costs from here
            best_fit = plan
        elif least_memory is None or plan.temp_bytes_per_tile < least_memory.temp_bytes_per_tile:
            least_memory = plan
        if Ms == 1 and Ns == 1:
            break
    return best_fit if best_fit is not None else least_memory


def _search(G, M, K, N, itemsize, partials_bytes, b_is_weight, ipu: IPU, tiles, budget, conv, serial) -> MatmulPlan:
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
    c = _tile_costs(ipu, itemsize, partials_bytes, b_is_weight, conv, g, m, k, n, pm, pn, pk)
    if serial > 1:  # each piece slices its operand block out and updates its part of the result
        piece = codelet("copy")
        copies = 2 * piece.fixed + np.ceil((g * m * k + g * m * n) * piece.per_element(itemsize))
        c["compute"] = c["compute"] + copies
        c["launch"] = c["launch"] + 2 * piece.fixed
        c["compute_sets"] = c["compute_sets"] + 2
    syncs = (c["exchange_phases"] + c["compute_sets"]) * ipu.internal_sync_cycles
    total = c["exchange"] + c["compute"] + syncs
    temp = c["temp"]
    fits = temp <= budget
    idx_pool = np.flatnonzero(fits) if fits.any() else np.array([int(np.argmin(temp))])
    # fastest; ties broken by fewer tiles, then by less memory
    order = np.lexsort((temp[idx_pool], used[idx_pool], total[idx_pool]))
    i = int(idx_pool[order[0]])
    return MatmulPlan(
        splits=(int(pg[i]), int(pm[i]), int(pn[i]), int(pk[i])),
        dims=(G, M, K, N),
        serial=serial,
        tiles_used=int(used[i]),
        exchange_cycles=int(c["exchange"][i]) * serial,
        compute_cycles=int(c["compute"][i]) * serial,
        supersteps=int(c["compute_sets"][i]) * serial,
        sync_points=int(c["exchange_phases"][i] + c["compute_sets"][i]) * serial,
        exchange_bytes=int(c["recv"][i] * used[i]) * serial,
        temp_bytes_per_tile=int(temp[i]),
        fits=bool(fits[i]),
        total_cycles=int(total[i]) * serial,
        launch_cycles=int(c["launch"][i]) * serial,
        exchange_phases=int(c["exchange_phases"][i]) * serial,
        partials_bytes=partials_bytes,
    )


def conv_input_factor(kernel: int, stride: int, positions: np.ndarray) -> np.ndarray:
    """Bytes of input patch a tile needs per byte of im2col rows it computes.

    A tile computing a square of ``p`` output positions reads a ``((sqrt(p)-1)*stride + kernel)^2``
    input patch per channel, not ``p * kernel^2`` im2col values.
    """
    side = np.sqrt(np.maximum(positions, 1))
    patch = ((side - 1) * stride + kernel) ** 2
    return np.minimum(1.0, patch / (np.maximum(positions, 1) * kernel * kernel))


__all__ = ["AmpMode", "MatmulPlan", "amp_mode", "amp_vertex_cycles", "plan_matmul", "conv_input_factor",
           "partials_reduction"]
