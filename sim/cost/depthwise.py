"""Depthwise convolutions (one input and one output channel per conv group) as poplin plans them.

poplin gives such a convolution no AMP vertex of its own (its ``combineConvGroups`` transform, which
makes 4, 8 or 16 of them one AMP-able group with block-diagonal weights, is not modelled: priced, it
costs more than the plans below on 8 of poplibs' 9 MobileNet layers, docs/reference/poplibs-costs.md 1.11):
its vertex candidates (``ConvVertexType.cpp``, poplibs 7eac0f26) for half inputs are SLIC
(``ConvPartial1xNSLIC``: 4 conv groups per group, a window of 4 kernel columns loaded as weights,
the output rows streamed through the conv units) and VMAC
(``ConvPartialVerticalMac``: 4 conv groups per group on the vector unit, each worker accumulating
its own copy of the output, then a reduction over the workers); with fp16 partials also groups of
8 and 16 (SLIC only where the tile has 16 half conv units, 4 chains). The planner prices every
candidate over every split of the conv groups, batch and field over the tiles and keeps the
cheapest (``ConvPlan.cpp createPlan``); the passes are planned separately:

* forward: the convolution as written (SLIC handles an output stride of 2 in the vertex);
* backward: a stride-1 convolution over the forward input's field, the output gradient dilated by
  the forward stride and padded, its zeros written out for SLIC (``ConvModel.cpp`` :871-955);
* weight update: the batch becomes the input channels and the forward output field the kernel,
  dilated by the forward stride (``Convolution.cpp getWeightUpdateParams``); a dilated kernel rules
  SLIC out, so VMAC runs it, its kernel rows split over tiles and their partials reduced.

Vertex cycles follow ``PerformanceEstimation.hpp`` (the ``[slic]`` and ``[vmac]`` tables of
``configs/_conv-vertices.toml``); the exchange of the input rows a tile's window needs beyond its
own, the cast of fp32 partials (the ``cast`` codelet, as after a matmul), the rearrangement of a weight update's
operands and the partials' reduction are priced as for the other convolutions
(:mod:`sim.cost.amp`). Cycles are tile cycles, bytes are bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .amp import _vertex_table, fewest_splits, memory_bounds, partials_reduction, pass_fixed_cycles, rearrangement
from .exchange import exchange_cycles
from .vector import codelet

_SLIC_KEYS = ("weight_load_fixed", "weight_load_per_worker", "outer_fixed", "per_conv_group_group", "per_sub_kernel",
              "loop_stall", "worker_fixed", "worker_per_row", "worker_row_fp32", "row_fixed", "row_short_zeroing",
              "row_short", "row_stride2_fixed", "row_stride2_one", "row_stride2_two", "short_below",
              "chains_fp32_partials", "window_width", "h8_outer_fixed",
              "h8_per_conv_group_group", "h8_per_sub_kernel", "h8_worker_per_row", "h8_worker_tail", "h8_row_extra",
              "h8_short_below", "h8_merge_per_element", "wide_weight_load_per_worker", "wide_per_stride",
              "wide_per_sub_kernel", "wide_per_conv_group_group", "wide_worker_fixed")
_VMAC_KEYS = ("outer_fixed", "per_conv_group_group", "per_in_group", "zero_fixed", "worker_fixed", "worker_per_entry",
              "dot_fixed", "dot_per_tap", "reduce_fixed", "reduce_per_element", "reduce_per_element_per_worker",
              "groups_per_group", "wide_worker_fixed_8", "wide_worker_fixed_16", "wide_worker_per_entry",
              "wide_dot_per_tap")


@lru_cache(maxsize=None)
def _table(section: str, keys: tuple) -> dict:
    """``[section]`` of ``configs/_conv-vertices.toml`` as integers (the estimators are integer arithmetic)."""
    return {key: int(value) for key, value in _vertex_table(section, keys).items()}


def worker_rows(batch: int, height: int, width: int, workers: int) -> list[list[tuple[int, int]]]:
    """Each worker's row pieces as ``(width, count)`` pairs: the tile's ``batch x height x width``
    output elements, flattened, cut into ``workers`` even ranges (``floor(i N / workers)``), each cut
    at row boundaries (``ConvUtilInternal.cpp partitionConvPartialByWorker``)."""
    total = batch * height * width
    out = []
    for i in range(workers):
        start, end = i * total // workers, (i + 1) * total // workers
        pieces = []
        if end > start:
            first_full = -(-start // width)
            last_full = end // width  # rows first_full .. last_full - 1 lie wholly inside
            if first_full > last_full:  # within one row
                pieces.append((end - start, 1))
            else:
                if start % width:
                    pieces.append((first_full * width - start, 1))
                if last_full > first_full:
                    pieces.append((width, last_full - first_full))
                if end % width:
                    pieces.append((end - last_full * width, 1))
        out.append(pieces)
    return out


def _slic_row(n: int, stride: int, zeroing: bool, h8: bool, fp32: bool, t: dict) -> int:
    """Worker cycles of one pass over a row piece of ``n`` outputs."""
    if stride == 2:
        cycles = ((t["row_stride2_one"] if n == 1 else t["row_stride2_two"]) if n < 3
                  else t["row_stride2_fixed"] + 2 * n)
    elif n < (t["h8_short_below"] if h8 else t["short_below"]):
        if zeroing:
            cycles = t["row_short_zeroing"] + (n if n > 1 else 0)
        else:
            cycles = t["row_short_zeroing"] if n == 1 else t["row_short"] + n
    else:
        cycles = t["row_fixed"] + n + (t["h8_row_extra"] if h8 and not zeroing else 0)
    return cycles - (1 if fp32 else 0)


@lru_cache(maxsize=4096)
def slic_inner_cycles(batch: int, height: int, width: int, stride: int, zeroing: bool, chains: int,
                      group: int, fp32: bool, workers: int) -> int:
    """Tile cycles of one pass of the SLIC workers over the tile's output field (``batch x height x
    width`` outputs of ``stride``), with or without implicit zeroing of the partials."""
    t = _table("slic", _SLIC_KEYS)
    h8 = chains == 2 and not fp32
    passes = 1 if chains == 4 else 2
    per_row = (t["h8_worker_per_row"] if h8 else t["worker_per_row"]) + zeroing + (t["worker_row_fp32"] if fp32 else 0)
    busiest, outputs = 0, 0
    for pieces in worker_rows(batch, height, width, workers):
        cycles = t["worker_fixed"] + (t["wide_worker_fixed"] if group > 4 else 0) + (t["h8_worker_tail"] if h8 else 0)
        for n, count in pieces:
            cycles += count * (per_row + passes * _slic_row(n, stride, zeroing, h8, fp32, t))
            outputs += n * count
        busiest = max(busiest, cycles)
    merge = t["h8_merge_per_element"] * (1 + outputs) if h8 and zeroing else 0
    return busiest * workers + merge


@lru_cache(maxsize=65536)
def slic_vertex_cycles(batch: int, height: int, width: int, group_groups: int, kernel_h: int, kernel_w: int,
                       stride: int, partials_bytes: int, chains: int, workers: int, group: int = 4) -> int:
    """Tile cycles of the SLIC vertex on a tile of ``group_groups`` groups of ``group`` conv groups
    and a ``batch x height x width`` output field (``getConvPartialSlicSupervisorOuterLoopCycleEstimate``):
    a preamble, the conv-group-group and sub-kernel supervisor loops (each sub-kernel, 4 kernel
    columns of one kernel row, loads its weights), and per conv group group one implicitly zeroing
    pass of the workers and one more pass per further sub-kernel. As in poplin's estimate, the
    sub-kernel loop is counted once, not per conv group group."""
    t = _table("slic", _SLIC_KEYS)
    fp32 = partials_bytes == 4
    h8 = chains == 2 and not fp32
    sub_kernels = -(-kernel_w // t["window_width"]) * kernel_h
    zeroing = slic_inner_cycles(batch, height, width, stride, True, chains, group, fp32, workers)
    inner = slic_inner_cycles(batch, height, width, stride, False, chains, group, fp32, workers)
    stall = lambda n: t["loop_stall"] * (n - 1) + 1
    per_group = t["h8_per_conv_group_group"] if h8 else t["per_conv_group_group"]
    if group <= 4:
        weight_load = t["weight_load_fixed"] + t["weight_load_per_worker"] * workers
        per_kernel = weight_load + (t["h8_per_sub_kernel"] if h8 else t["per_sub_kernel"])
    else:  # each sub-kernel loads weights for each 4 of the group; the workers make a pass per 4 but the zeroing one
        strides = group // 4
        weight_load = t["weight_load_fixed"] + t["wide_weight_load_per_worker"] * workers
        per_kernel = (weight_load + t["wide_per_stride"]) * strides + stall(strides) + t["wide_per_sub_kernel"]
        per_group += t["wide_per_conv_group_group"]
        inner *= strides
    return ((t["h8_outer_fixed"] if h8 else t["outer_fixed"])
            + per_group * group_groups + stall(group_groups)
            + per_kernel * sub_kernels + stall(sub_kernels)
            + group_groups * zeroing + group_groups * (sub_kernels - 1) * inner)


@lru_cache(maxsize=65536)
def vmac_vertex_cycles(out_h: int, out_w: int, batch: int, kernel_h: int, kernel_w: int, group_groups: int,
                       in_groups: int, partials_bytes: int, workers: int, group: int = 4) -> int:
    """Tile cycles of the VMAC vertex (``getConvPartialVerticalMacSupervisorCycleEstimate`` as
    ``ConvModel.cpp`` calls it): each output element a row of ``kernel_w`` taps per kernel row,
    the rows dealt to the workers (split in ``workers / gcd`` parts), the partials zeroed and,
    after the workers, reduced across them; per conv group group and per input group (the batch
    of a weight update); ``group`` conv groups per group (8 and 16 with fp16 partials only)."""
    t = _table("vmac", _VMAC_KEYS)
    fp32 = partials_bytes == 4
    rows = out_h * out_w * batch
    split = workers // math.gcd(workers, rows)
    most = -(-rows * split // workers)
    whole, part = divmod(most, split)

    if group > 4:  # fp16 partials: 8 groups a pass, two passes for 16
        passes = group // 8
        entry = lambda taps: passes * (t["wide_worker_per_entry"] + t["dot_fixed"] + t["wide_dot_per_tap"] * (taps - 1))
        fixed = t["wide_worker_fixed_8"] if group == 8 else t["wide_worker_fixed_16"]
    else:
        entry = lambda taps: (t["worker_per_entry"] - (0 if fp32 else 2) + t["dot_fixed"]
                              + t["dot_per_tap"] * (taps - 1))
        fixed = t["worker_fixed"] - (0 if fp32 else 1)
    worker = fixed + kernel_h * (whole * entry(kernel_w) + part * entry(-(-kernel_w // split)))
    inner = workers * worker
    elements = out_h * out_w  # ConvModel.cpp: the zeroing and reduction count neither batch nor groups
    zero = t["zero_fixed"] + -(-elements // (2 if fp32 else 4))
    per_worker = -(-elements // workers)
    reduce = (t["reduce_fixed"] + (0 if fp32 else 1)
              + ((t["reduce_per_element"] - (0 if fp32 else 2)
                  + (t["reduce_per_element_per_worker"] if fp32 else 1) * (workers - 1)) * per_worker) // group)
    return (t["outer_fixed"] + (1 if fp32 else 0)
            + group_groups * (zero + t["per_conv_group_group"] + in_groups * (t["per_in_group"] + inner) + reduce))


@dataclass(frozen=True, slots=True)
class DepthwisePlan:
    """One pass of a depthwise convolution as planned: its vertex, its split over the tiles and
    what the busiest tile spends (cycles, bytes), all compute sets and exchanges together."""

    vertex: str  # "slic" or "vmac"
    splits: tuple[int, int, int, int]  # conv group groups, batch, rows, columns (weight update: kernel rows)
    tiles_used: int
    vertex_cycles: int  # the partial-sum vertex
    compute_cycles: int  # vertex + padding copy + cast or reduction + rearrangement copy + the pass's fixed cycles
    launch_cycles: int  # the fixed part of compute_cycles: the vertices' cycles with no work, the pass's fixed cycles
    exchange_cycles: int  # window, weights, rearrangement and reduction exchange, each phase with its set-up
    exchange_phases: int
    compute_sets: int
    received_bytes: int  # over every tile
    temp_bytes_per_tile: int
    fits: bool
    group: int = 4  # conv groups per group the vertex takes (8 and 16 with fp16 partials)

    @property
    def total_cycles(self) -> int:
        return self.compute_cycles + self.exchange_cycles

    def describe(self) -> str:
        g, b, h, w = self.splits
        rows = "kernel rows" if self.vertex == "vmac" and w == 0 else "rows"
        return (f"depthwise {self.vertex.upper()} vertex, groups of {self.group}, "
                f"conv group groups/{g} batch/{b} {rows}/{h}"
                + (f" columns/{w}" if w > 1 else "") + f" on {self.tiles_used} tiles"
                + ("" if self.fits else "; no plan within the memory budget (availableMemoryProportion): planned "
                   "within a doubled bound, as poplin does"))


def _fewest_splits(size: int, limit: int) -> list[int]:
    return fewest_splits(size, limit).tolist()


def _cast(outputs: int, partials_bytes: int, itemsize: int) -> tuple[int, int, int]:
    """(cycles, fixed cycles, compute sets) of casting a tile's fp32 partials to the result type."""
    if partials_bytes <= itemsize:
        return 0, 0, 0
    c = codelet("cast")
    return int(c.fixed + math.ceil(outputs * c.fp16)), int(c.fixed), 1


@lru_cache(maxsize=65536)
def _rearranged(ipu, elements: int, used: int, itemsize: int) -> tuple[int, int, float]:
    """(exchange cycles, copy cycles, bytes received) per tile of :func:`~sim.cost.amp.rearrangement`."""
    exch, copy, received = rearrangement(ipu, elements, used, itemsize)
    return int(exch), int(copy), float(received)


@lru_cache(maxsize=65536)
def _reduced(ipu, outputs: int, depth: int, partials_bytes: int, out_bytes: int, grain: int) -> tuple[float, ...]:
    """(exchange cycles, compute cycles, stages, bytes received, fixed cycles) of
    :func:`~sim.cost.amp.partials_reduction` for one block."""
    return tuple(float(x) for x in partials_reduction(ipu, outputs, depth, partials_bytes, out_bytes, grain))


def plan_depthwise(pass_: str, batch: int, groups: int, in_hw: tuple[int, int], out_hw: tuple[int, int],
                   kernel: tuple[int, int], stride: int, padding: tuple[int, int], itemsize: int,
                   partials_bytes: int, ipu, tiles: int, memory_proportion: float,
                   regroup_input: bool = False) -> DepthwisePlan | None:
    """The cheapest plan of one pass (``"fwd"``, ``"bwd"`` or ``"wu"``) of a depthwise convolution of
    ``groups`` channels: forward ``batch x in_hw`` to ``out_hw`` by a ``kernel`` of ``stride`` and
    symmetric ``padding``. None where poplin has neither SLIC nor VMAC (inputs other than fp16).

    ``regroup_input``: the forward or backward pass's activations (the input, the output gradient)
    come from another op, laid out for it with the channels innermost; SLIC and VMAC read them in
    blocks of 4 conv groups, so poplin copies them into a tensor laid out for the plan first
    (``Convolution.cpp``: ``rearrangeActs`` when the plan's innermost grouping is not the tensor's
    innermost dimension; the copy is elided only for a tensor created for this convolution, such as
    ``createInput``'s). The weight update rearranges both operands in any case."""
    if itemsize != 2:
        return None
    partials_bytes = max(partials_bytes, itemsize)
    t = _table("slic", _SLIC_KEYS)
    base = _table("vmac", _VMAC_KEYS)["groups_per_group"]  # 4 conv groups per group, SLIC and VMAC alike
    chains = t["chains_fp32_partials"] if partials_bytes == 4 else (4 if ipu.amp_fp16_output_group == 16 else 2)
    # fp16 partials add groups of 8 and 16: VMAC's always, SLIC's on 4 chains (ConvVertexType.cpp; the
    # 2-chain SLIC of 8 or 16 groups the planner lists has no codelet)
    vmac_groups = (base,) if partials_bytes == 4 else (base, 2 * base, 4 * base)
    slic_groups = vmac_groups if chains == 4 else (base,)
    budget = memory_proportion * ipu.sram_bytes_per_tile
    (H, W), (Ho, Wo) = in_hw, out_hw
    # the vertex's output field and stride, and the input rows and columns it reads
    if pass_ == "fwd":
        fh, fw, vstride, src = Ho, Wo, stride, (H, W)
    else:  # the output gradient dilated by the stride, convolved at stride 1 over the input's field
        fh, fw, vstride, src = H, W, 1, (Ho, Wo)
    regrouped = {}  # used tiles -> the regrouping copy's (exchange, copy, bytes received) per tile

    def regroup(used: int) -> tuple[int, int, float]:
        if used not in regrouped:
            regrouped[used] = _rearranged(ipu, batch * groups * src[0] * src[1], used, itemsize)
        return regrouped[used]
    plans = []
    for group in vmac_groups:
        grains = -(-groups // group)
        vertices = [v for v, ok in (("slic", group in slic_groups and vstride <= 2), ("vmac", True)) if ok]
        for sg in _fewest_splits(grains, tiles):
            group_groups = -(-grains // sg)
            if pass_ == "wu":
                plans += _wu_plans(batch, groups, group, group_groups, sg, (H, W), (Ho, Wo), kernel, stride,
                                   itemsize, partials_bytes, ipu, tiles, budget)
                continue
            for sb in _fewest_splits(batch, tiles // sg):
                for sh in _fewest_splits(fh, tiles // (sg * sb)):
                    for sw in _fewest_splits(fw, min(8, tiles // (sg * sb * sh))):
                        b_t, h_t, w_t = -(-batch // sb), -(-fh // sh), -(-fw // sw)
                        for vertex in vertices:
                            plans.append(_field_plan(
                                pass_, vertex, (sg, sb, sh, sw), b_t, h_t, w_t, group, group_groups, src, kernel,
                                stride, padding, vstride, itemsize, partials_bytes, chains, ipu, budget,
                                regroup if regroup_input else None))
    # candidates are DepthwisePlan field tuples (cheap to build); the fastest within the first memory
    # bound any fits, as poplin plans (memory_bounds: the budget, then doubled), ties to less memory then
    # fewer tiles
    total = lambda p: p[4] + p[6]  # compute_cycles + exchange_cycles
    for bound in memory_bounds(budget, ipu):
        fitting = [p for p in plans if p[10] <= bound]
        if fitting:
            return DepthwisePlan(*min(fitting, key=lambda p: (total(p), p[10], p[2])))
    raise AssertionError("a plan with no memory bound always fits")


def _field_plan(pass_, vertex, splits, b_t, h_t, w_t, group, group_groups, src, kernel, stride, padding, vstride,
                itemsize, partials_bytes, chains, ipu, budget, regroup=None) -> tuple:
    """The :class:`DepthwisePlan` fields of a forward or backward pass split ``splits`` (conv group
    groups, batch, rows, columns); with
    ``regroup`` (used tiles -> that copy's cost per tile), after the activations are copied into the
    plan's layout over its tiles."""
    (kh, kw), (sh_in, sw_in) = kernel, src
    sg, sb, sh, sw = splits
    used = sg * sb * sh * sw
    workers = ipu.worker_threads
    groups_t = group_groups * group
    if vertex == "slic":
        cycles = slic_vertex_cycles(b_t, h_t, w_t, group_groups, kh, kw, vstride, partials_bytes, chains, workers,
                                    group)
        # the vertex's fixed part: its cycles with no output (supervisor loops, weight loads, worker preambles)
        vertex_fixed = slic_vertex_cycles(0, h_t, w_t, group_groups, kh, kw, vstride, partials_bytes, chains, workers,
                                          group)
    else:
        cycles = vmac_vertex_cycles(h_t, w_t, b_t, kh, kw, group_groups, 1, partials_bytes, workers, group)
        vertex_fixed = vmac_vertex_cycles(h_t, w_t, 0, kh, kw, group_groups, 1, partials_bytes, workers, group)
    # the source rows and columns the tile's window reads beyond those it holds
    if pass_ == "fwd":
        need = min((h_t - 1) * stride + kh, sh_in), min((w_t - 1) * stride + kw, sw_in)
        own = min(h_t * stride, sh_in), min(w_t * stride, sw_in)
    else:  # a window of the dilated output gradient
        need = min(-(-(h_t - 1 + kh) // stride), sh_in), min(-(-(w_t - 1 + kw) // stride), sw_in)
        own = min(-(-h_t // stride), sh_in), min(-(-w_t // stride), sw_in)
    window = b_t * groups_t * need[0] * need[1]
    halo = b_t * groups_t * (need[0] * need[1] - own[0] * own[1]) if sh * sw > 1 else 0
    weights = groups_t * kh * kw
    received = (halo + (weights if sb * sh * sw > 1 else 0)) * itemsize
    exchange = exchange_cycles(received, ipu)
    outputs = b_t * h_t * w_t * groups_t
    pad = zeros = 0
    if vertex == "slic":  # SLIC reads no padding: the zeros are written out (ConvModel.cpp :871-955)
        wpad = (4 - kw % 4) % 4
        dil = stride if pass_ == "bwd" else 1
        side = (kh - 1 - padding[0], kw - 1 - padding[1]) if pass_ == "bwd" else padding
        field, padded = 1, 1
        for size, extra, p in ((h_t, 0, side[0]), (w_t, wpad, side[1])):
            padded *= (1 + (size + extra - 1) * dil) + 2 * max(p, 0)
            field *= size
        zeros = groups_t * b_t * (padded - field) + groups_t * wpad * kh
        pad = math.ceil(zeros * itemsize / ipu.exchange_bytes_per_cycle_per_tile)  # the planner's rate (full width)
    cast, cast_fixed, cast_sets = _cast(outputs, partials_bytes, itemsize)
    fixed = pass_fixed_cycles()
    sets = 1 + cast_sets + (1 if pad else 0)
    phases = 1 if exchange else 0
    copy = copy_fixed = 0
    if regroup is not None:
        r_exch, r_copy, r_bytes = regroup(used)
        copy_fixed = codelet("copy").fixed
        copy = int(r_copy) + copy_fixed
        exchange, received, phases, sets = exchange + int(r_exch), received + r_bytes, phases + 1, sets + 1
    temp = outputs * partials_bytes + window * itemsize + zeros * itemsize
    return (vertex, splits, used, cycles, int(cycles + pad + cast + copy + fixed),
                         int(vertex_fixed + cast_fixed + copy_fixed + fixed), exchange, phases, sets,
                         int(received * used), int(temp), temp <= budget, group)


def _wu_plans(batch, groups, group, group_groups, sg, in_hw, out_hw, kernel, stride, itemsize, partials_bytes, ipu,
              tiles, budget) -> list[tuple]:
    """:class:`DepthwisePlan` fields of the weight-update plans of one conv group split
    (``group_groups`` groups of ``group`` on a tile):
    the batch (the input channels) and the forward output's rows (the kernel's) split over the
    tiles, their partials reduced."""
    (H, W), (Ho, Wo), (kh, kw) = in_hw, out_hw, kernel
    workers = ipu.worker_threads
    groups_t = group_groups * group
    plans = []
    for sb in _fewest_splits(batch, tiles // sg):
        for sk in _fewest_splits(Ho, tiles // (sg * sb)):
            b_t, k_t = -(-batch // sb), -(-Ho // sk)
            used = sg * sb * sk
            cycles = vmac_vertex_cycles(kh, kw, 1, k_t, Wo, group_groups, b_t, partials_bytes, workers, group)
            vertex_fixed = vmac_vertex_cycles(kh, kw, 0, k_t, Wo, group_groups, b_t, partials_bytes, workers, group)
            # poplin rearranges both operands (the input, the output gradient) into the plan's layout
            r_exch, r_copy, r_bytes = _rearranged(ipu, batch * groups * (H * W + Ho * Wo), used, itemsize)
            halo = b_t * groups_t * max(0, min((k_t - 1) * stride + kh, H) - min(k_t * stride, H)) * W if sk > 1 else 0
            outputs = groups_t * kh * kw
            depth = sb * sk
            red_exch, red, stages, red_recv, red_fixed = _reduced(ipu, outputs, depth, partials_bytes, itemsize, group)
            cast, cast_fixed, cast_sets = _cast(outputs, partials_bytes, itemsize) if depth == 1 else (0, 0, 0)
            copy_fixed = codelet("copy").fixed
            fixed = pass_fixed_cycles()
            exchange = r_exch + exchange_cycles(halo * itemsize, ipu) + int(red_exch)
            phases = 1 + (1 if halo else 0) + int(stages)
            sets = 2 + int(stages) + cast_sets
            temp = b_t * groups_t * (min(k_t * stride + kh, H) * W + k_t * Wo) * itemsize + outputs * partials_bytes
            plans.append((
                "vmac", (sg, sb, sk, 0), used, cycles,
                int(cycles + r_copy + copy_fixed + red + cast + fixed),
                int(vertex_fixed + copy_fixed + red_fixed + cast_fixed + fixed), exchange, phases, sets,
                int((r_bytes + halo * itemsize + red_recv) * used), int(temp), temp <= budget, group))
    return plans
