"""poplin's multi-convolution: independent convolutions planned together and run side by side.

``poplin::multiconv::convolution`` (and ``convolutionWeightUpdate``) take several convolutions
that do not depend on each other. With the default plan type, ``parallel``, poplin gives each its
own range of tiles and merges their programs step by step, so they run at the same time
(lib/poplin/MultiConvolution.cpp ``applyMultiPlan``); ``serial`` plans and runs each on all tiles
one after another, as separate convolutions are. PopTorch's ``poptorch.MultiConv`` and PopART's
MultiConv op reach the same planner.

The parallel plan is poplin's ``getParallelMultiPlan`` (lib/poplin/ConvPlan.cpp), with its option
defaults ``perConvReservedTiles`` 50 and ``cycleBackOff`` 0.1:

1. the convolutions are ordered by FLOPs; every one but the largest keeps ``perConvReservedTiles``
   tiles in reserve (fewer when the IPU has too few: tiles / convolutions);
2. the largest is planned for speed on the tiles not in reserve, then re-planned on as few tiles as
   keep it within ``1 + (n - 1) x cycleBackOff`` times that speed: its cycles are the reference;
3. the others, smallest first but for the second largest, each on the tiles after the ones taken
   (less what is still in reserve), on as few tiles as keep it within the reference (the fastest
   plan when none does, which then raises the reference);
4. the second largest on all the tiles left.

Each range starts on a supertile boundary (two tiles share an exchange bus:
``getTilesPerSharedExchangeBus``). When a range would be empty poplin falls back to the serial plan.

The merged program runs step by step, every step as long as its slowest convolution's. Here the
group's exchange, compute and syncs each take as long as the longest member's: between the
longest member's total (a lower bound) and the step-wise sum, which the members' totals do not
resolve. The slowest member carries that time; the others run inside it on their own tiles and
cost no cycles of their own: their plans name the member they run beside. Their program memory is
approximate: each member's compute sets still count as control-code steps (in Poplar the merged
steps are shared) and a zero-time member's exchange code is left out.

Checked on poplibs' ``oct_conv_layer`` rows (octave convolutions: up to four convolutions per
pass; :func:`sim.poplibs_benchmarks.oct_graph`), which no constant was fitted to: planned one by
one the simulator was 10-78 % over Poplar's IPUModel2 cycles on 18 of 20 rows; planned in
parallel, 8 of them are within 5 % and all within 20 % (reports/validation.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from ..errors import GraphError
from .opcost import OpCost, TileProfile

PER_CONV_RESERVED_TILES = 50  # poplin MultiPlanOptions::perConvReservedTiles default (ConvPlan.cpp)
CYCLE_BACK_OFF = 0.1  # poplin MultiPlanOptions::cycleBackOff default (ConvPlan.cpp)
TILES_PER_SUPERTILE = 2  # Poplar getTilesPerSharedExchangeBus (popops ExchangeEstimator.cpp asserts 2)
PLAN_TYPES = ("parallel", "serial")

#: ``price(index, tiles)``: the cost of member ``index`` planned on ``tiles`` tiles
Pricer = Callable[[int, int], OpCost]


def groups(ops) -> list[list]:
    """The parallel multi-convolutions among ``ops``, in graph order: the convolutions whose
    ``multiconv`` attribute names one group, by IPU, kind and pass (the backward and weight-update
    convolutions of a multi-convolution are multi-convolutions of their own, as in poplin and
    PopART), and the weight transposes of a backward one (``transpose`` ops with the attribute:
    poplin puts every member's in one compute set of the shared program tree). Groups of one and
    serial groups (``multiconv_plan`` "serial") are left out."""
    found: dict[tuple, list] = {}
    for op in ops:
        group = op.attrs.get("multiconv")
        if group is None or not (op.kind.startswith("conv") or op.kind == "transpose"):
            continue
        plan_type = op.attrs.get("multiconv_plan", "parallel")
        if plan_type not in PLAN_TYPES:
            raise GraphError(f"op {op.name!r}: multi-convolution plan type {plan_type!r}; expected "
                             f"{' or '.join(PLAN_TYPES)}")
        if plan_type == "parallel":
            found.setdefault((group, op.ipu, op.kind, op.pass_), []).append(op)
    return [members for members in found.values() if len(members) > 1]


def _align(tiles: int) -> int:
    return -(-tiles // TILES_PER_SUPERTILE) * TILES_PER_SUPERTILE


def _fewest_tiles(price: Pricer, i: int, budget: int, limit: float) -> OpCost:
    """Member ``i``'s plan on the fewest of ``budget`` tiles whose cycles stay within ``limit``
    (bisection on the tile budget); the plan on all ``budget`` tiles when none does."""
    best = price(i, budget)
    if best.cycles > limit:
        return best
    low, high = 1, budget  # price(high) is within the limit
    while low < high:
        mid = (low + high) // 2
        if price(i, mid).cycles <= limit:
            high = mid
        else:
            low = mid + 1
    return price(i, high)


def parallel_plan(flops: list[float], price: Pricer, tiles: int, reserved_tiles: int = PER_CONV_RESERVED_TILES,
                  cycle_back_off: float = CYCLE_BACK_OFF) -> list[tuple[OpCost, int]] | None:
    """poplin's parallel multi-plan of the members (their FLOPs, by index) on ``tiles`` tiles,
    with its options ``perConvReservedTiles`` and ``cycleBackOff``: for each member its cost and
    the first tile of its range; None when the tiles run out (poplin then plans them serially)."""
    n = len(flops)
    order = sorted(range(n), key=lambda i: (flops[i], i))  # smallest to largest
    each = reserved_tiles if tiles >= n * reserved_tiles else max(1, tiles // n)
    reserved = (n - 1) * each
    if tiles - reserved <= 0:
        return None
    plans: dict[int, tuple[OpCost, int]] = {}
    largest = order[-1]
    fastest = price(largest, tiles - reserved)
    reference = _fewest_tiles(price, largest, tiles - reserved, fastest.cycles * (1 + (n - 1) * cycle_back_off))
    plans[largest] = (reference, 0)
    start = _align(reference.tiles_used)
    reserved -= each
    limit = reference.cycles
    for i in order[:-2]:
        budget = tiles - start - reserved
        if budget <= 0:
            return None
        cost = _fewest_tiles(price, i, budget, limit)
        plans[i] = (cost, start)
        start += _align(cost.tiles_used)
        reserved -= each
        limit = max(limit, cost.cycles)
    if n > 1:
        if tiles - start <= 0:
            return None
        plans[order[-2]] = (price(order[-2], tiles - start), start)
    return [plans[i] for i in range(n)]


def _placed(profile: TileProfile | None, start: int, tiles: int) -> TileProfile | None:
    """``profile`` moved onto the tiles from ``start`` of an IPU of ``tiles`` tiles."""
    if profile is None:
        return None

    def move(v):
        out = np.zeros(tiles)
        v = np.asarray(v, dtype=float)[:max(0, tiles - start)]
        out[start:start + len(v)] = v
        return out
    return TileProfile(move(profile.compute), move(profile.bytes_in), move(profile.temp))


def run_side_by_side(names: list[str], plans: list[tuple[OpCost, int]], tiles: int) -> list[OpCost]:
    """The members' costs as they run in one merged program, each profile on its tile range.

    The slowest member carries the group's time: its exchange, compute and sync each as long as
    the longest member's (a merged exchange phase or compute set lasts as long as its slowest
    part). The others run within that time on their own tiles and cost no cycles of their own."""
    costs = [c for c, _ in plans]
    slowest = max(range(len(plans)), key=lambda i: (costs[i].cycles, -i))
    by_compute = max(costs, key=lambda c: c.compute_cycles)
    by_exchange = max(costs, key=lambda c: c.exchange_cycles)
    lead = replace(costs[slowest], compute_cycles=by_compute.compute_cycles, launch_cycles=by_compute.launch_cycles,
                   exchange_cycles=by_exchange.exchange_cycles,
                   exchange_setup_cycles=by_exchange.exchange_setup_cycles,
                   sync_cycles=max(c.sync_cycles for c in costs))
    out = []
    for i, (cost, start) in enumerate(plans):
        where = f"multi-convolution (parallel), tiles {start}-{start + cost.tiles_used - 1}"
        profile = _placed(cost.profile, start, tiles)
        if i == slowest:
            out.append(replace(lead, plan=f"{cost.plan}; {where}, the slowest of {len(plans)}", profile=profile))
        else:
            out.append(replace(cost, compute_cycles=0, exchange_cycles=0, sync_cycles=0, launch_cycles=0,
                               exchange_setup_cycles=0, profile=profile,
                               plan=f"{cost.plan}; {where}, runs beside {names[slowest]} "
                                    f"({cost.cycles:,} cycles within its {lead.cycles:,})"))
    return out
