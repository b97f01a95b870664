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
   fp32 operands run poplibs' float estimate of the vertex (:func:`amp_fp32_vertex_cycles`), and
   poplin's HMAC vertex is tried beside it (:func:`hmac_vertex_cycles`).
   A convolution with a kernel larger than 1x1 runs poplin's nx1 vertex instead: per
   (input group, output group) a loop over the tile's kernel positions, each with a coefficient
   load and a worklist entry per output row for each of the 6 workers
   (``getConvPartialnx1*CycleEstimate``, constants in ``configs/_conv-vertices.toml``), or, when
   cheaper, the kernel folded into the input channels as poplin's expandDims does (the whole
   kernel, or its width), after a rearrangement of the input over the tiles.
   The nx1 vertex skips (output, kernel position) pairs that meet padding where the ConvShape says
   which (:func:`padding_coverage`); poplin's planner does not, so plans are chosen on its
   padding-blind estimate (``MatmulPlan.planned_cycles``, below).
   A strided 1x1 kernel cannot run the 1x1 vertex on its field (poplin cannot flatten a strided
   dimension): it runs the nx1 vertex or, when cheaper, the 1x1 vertex after its subsampled input
   is rearranged over the tiles; its backward pass copies the dilated result afterwards
   (:func:`deferred_dilation_copy`).
3. if ``pk > 1``, reduces the partial sums over the ``pk`` tiles in 1, 2 or 3 stages by depth
   (``ConvReducePlan.cpp :: getNumReduceStages``: < 16, < 125, more), each an exchange and a
   reduce compute set; the last stage writes the result type.
4. if the partials are wider than the result and nothing was reduced, casts the result.
5. if the op is serialised into pieces (poplin's serial splits), slices each piece's operand
   block and updates its part of the result (two copy compute sets per piece).
6. a fully connected backward pass (``dY @ Wᵀ`` of a weight) first transposes the weights on their
   tiles, as poplin's ``fullyConnectedWeightTranspose`` does (:func:`fc_weight_transpose`); planned
   apart from the forward pass, the transposed blocks are then exchanged to its own layout
   (:func:`transposed_weights_exchange`).

Every compute set and exchange phase also costs an on-chip sync, and every exchange phase its
set-up. Costs are in tile cycles; the busiest tile sets the pace. Plans are chosen on poplin's
planning estimate (``MatmulPlan.planned_cycles``), which sums the exchange at the Target's full
rate, the vertices, reductions, casts and transforms, and has neither syncs nor exchange set-ups
(``ConvModel.cpp``, ``ExchangeEstimator.hpp``: bytes over bytes per cycle), so a plan of more phases
is not held back by what they cost at run time. The planner searches the splits vectorised over
numpy arrays and keeps the fastest whose temporary memory per tile (operand blocks plus partials) fits in
``availableMemoryProportion x SRAM``; if none fits it serialises the op into pieces, which is
Poplar's trade-off of speed for memory. See docs/reference/poplibs-costs.md for the sources.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..errors import ConfigError, UnsupportedOpError
from ..hardware.configs import CONFIG_DIR
from ..hardware.system import IPU
from .opcost import TileProfile
from .conv_reduce import conv_partials_reduction, distinct_values
from .exchange import exchange_cycles
from .vector import codelet, dynamic_slice_tile_cycles

CONV_VERTICES_FILE = CONFIG_DIR / "_conv-vertices.toml"

@dataclass(frozen=True)
class AmpMode:
    """The AMP configuration of one precision: rate, channel groups, partials width (bytes)."""

    flops_per_cycle: float
    in_group: int
    out_group: int
    partials_bytes: int
    float_activations: bool = False  # fp32 operands: poplibs' float vertex (amp_fp32_vertex_cycles)
    quarter: bool = False  # FP8 operands on the quarter vertices (amp_quarter_vertex_cycles)
    cast_from_quarter: bool = False  # FP8 operands cast to fp16 on the tile for the fp16 vertex

    @property
    def cycles_per_position(self) -> float:
        """Cycles per output position of one (input group, output group) pair."""
        return 2.0 * self.in_group * self.out_group / self.flops_per_cycle


def amp_mode(ipu: IPU, itemsize: int, partials_bytes: int) -> AmpMode:
    """The AMP of ``ipu`` for operands of ``itemsize`` bytes and partials of ``partials_bytes``
    (1-byte operands are FP8)."""
    if itemsize == 1:
        return _fp8_mode(ipu, partials_bytes)
    if itemsize == 2 and partials_bytes == 2:
        return AmpMode(ipu.amp_fp16_flops_per_cycle, ipu.amp_fp16_input_group, ipu.amp_fp16_output_group, 2)
    if itemsize == 2:
        return AmpMode(ipu.amp_fp16_fp32_partials_flops_per_cycle, ipu.amp_fp16_input_group,
                       ipu.amp_fp16_fp32_partials_output_group, 4)
    return AmpMode(ipu.amp_fp32_flops_per_cycle, ipu.amp_fp32_input_group, ipu.amp_fp32_output_group, 4, True)


def _fp8_mode(ipu: IPU, partials_bytes: int) -> AmpMode:
    """FP8 operands: poplin's quarter vertices with fp16 partials; with fp32 partials, which the
    quarter conv units do not produce, the fp16 vertex on operands cast to fp16 on the tile
    (ConvVertexType.cpp canUseConvolutionInstruction, ConvModel.cpp inputsCastCycles)."""
    if not ipu.amp_fp8_flops_per_cycle:
        raise UnsupportedOpError(f"FP8 (float8) operands need an IPU with FP8 AMP (ipu21: the c600 system); "
                                 f"this {ipu.generation} IPU has none: use float16 operands")
    if partials_bytes == 4:
        return replace(amp_mode(ipu, 2, 4), cast_from_quarter=True)
    q = _quarter_table()
    return AmpMode(ipu.amp_fp8_flops_per_cycle, int(q["in_group"]), int(q["out_group"]), 2, quarter=True)


def _channel_group_pairs(mode: AmpMode, g, k, n):
    """(input-channel group, output-channel group) pairs of ``g`` groups of ``[., k] @ [k, n]``."""
    return g * np.ceil(k / mode.in_group) * np.ceil(n / mode.out_group)


def coeff_load_bytes(load_bits: int = 64) -> float:
    """Bytes of weights the supervisor loads into the conv units per cycle: ``[nx1]
    coeff_load_bytes_per_cycle`` with poplin's default 64-bit loads, twice that with its
    ``use128BitConvUnitLoad`` (``load_bits`` 128: ``ConvModel.cpp`` and ``poplinCycleEstimators.cpp``
    halve the target's rate only when the option is off)."""
    return nx1_constants().coeff_load_bytes_per_cycle * load_bits / 64


def amp_pair_cycles(ipu: IPU, mode: AmpMode) -> float:
    """Fixed cycles of one (input group, output group) pair of the fp16-operand 1x1 AMP vertex:
    ``amp_pair_overhead_cycles`` and the weight load of the mode's conv units (one per output channel
    of the group), ``getConvPartialAmpSupervisorWeightLoadCycleEstimate``: conv units x
    ``weight_bytes_per_conv_unit`` at :func:`coeff_load_bytes` (with 64-bit loads 32 cycles for fp32
    partials' 8 units, 64 for fp16 partials' 16 on Mk2; half that with 128-bit loads)."""
    return (ipu.amp_pair_overhead_cycles
            + mode.out_group * nx1_constants().weight_bytes_per_conv_unit / coeff_load_bytes(ipu.conv_unit_load_bits))


def amp_vertex_cycles(ipu: IPU, mode: AmpMode, g, m, k, n):
    """Cycles of the AMP vertex of a tile holding ``g`` groups of ``[m,k] @ [k,n]`` (arrays allowed)."""
    if mode.float_activations:
        return amp_fp32_vertex_cycles(mode, g, m, k, n, ipu.worker_threads, ipu.conv_unit_load_bits)[0]
    if mode.quarter:
        return amp_quarter_vertex_cycles(mode, g, m, k, n, ipu.worker_threads, ipu.conv_unit_load_bits)[0]
    work = _channel_group_pairs(mode, g, k, n) * (amp_pair_cycles(ipu, mode) + m * mode.cycles_per_position)
    return np.where(g * m * k * n > 0, ipu.amp_vertex_overhead_cycles + np.ceil(work), 0)


def _fp32_worker_cycles(c: dict, n, per_position: float, zero_per_position: int, zeroing: bool):
    """Worker cycles of poplibs' float 1x1 AMP worker on ``n`` output positions (0: no work), at
    ``per_position`` worker cycles per further position (the mode's ``cycles_per_position``)."""
    n = np.asarray(n, dtype=float)
    run = np.where(n == 1, c["worker_one"], np.where(n == 2, c["worker_two"],
                   c["worker_base"] + per_position * np.maximum(n - 3, 0)))
    if zeroing:
        run = run + c["worker_zeroing_fixed"] + zero_per_position * n
    return np.where(n > 0, run, 0.0)


def amp_fp32_vertex_cycles(mode: AmpMode, g, m, k, n, workers: int = 6, load_bits: int = 64):
    """(cycles, fixed cycles) of poplin's ConvPartial1x1Out vertex with fp32 operands and partials
    on a tile holding ``g`` groups of ``[m,k] @ [k,n]`` (arrays allowed), after poplibs'
    ``getConvPartial1x1SupervisorCycleEstimate`` (constants: ``[amp1x1_fp32]`` of
    ``configs/_conv-vertices.toml``).

    The ``m`` output positions are split over the ``workers`` as ``partitionConvPartialByWorker``
    does (``floor(m/6)`` or ``ceil(m/6)`` each). Per conv group, per input-channel group and per
    output group the supervisor loads the weights (conv units x 32 bytes at 8 bytes per cycle) and
    waits for the workers: ``max(6 x busiest, 6 x least busy + 14)`` worker cycles. The first input
    group of each output group also zeroes the partials (8 more worker cycles per position with 16
    conv units), so at one position per tile a fp32 pair costs about 430 cycles, not 8. The fixed
    cycles are everything but 8 cycles per output position per channel-group pair.
    """
    c = _fp32_table()
    nx1 = nx1_constants()
    g, m, k, n = (np.asarray(a, dtype=float) for a in (g, m, k, n))
    ig = np.ceil(k / mode.in_group)
    og = np.ceil(n / mode.out_group)
    loads = mode.out_group * nx1.weight_bytes_per_conv_unit / coeff_load_bytes(load_bits)
    zero_per_position = c["zero_cycles_per_position_16"] if mode.out_group == 16 else c["zero_cycles_per_position_8"]
    busiest, least = np.ceil(m / workers), np.floor(m / workers)

    def inner(zeroing):
        hi = workers * _fp32_worker_cycles(c, busiest, mode.cycles_per_position, zero_per_position, zeroing)
        lo = workers * _fp32_worker_cycles(c, least, mode.cycles_per_position, zero_per_position, zeroing)
        return np.maximum(hi, lo + c["worker_imbalance_tag"])

    pair = c["per_out_group"] + loads
    total = c["supervisor_fixed"] + g * (c["per_conv_group"] + (ig - 1) * (c["per_extra_in_group"] + og * (
        pair + inner(False))) + og * (pair + inner(True)))
    total = np.where(g * m * k * n > 0, total, 0)
    fixed = np.where(total > 0, np.maximum(total - g * ig * og * m * mode.cycles_per_position, 0), 0)
    return total, fixed


def amp_quarter_vertex_cycles(mode: AmpMode, g, m, k, n, workers: int = 6, load_bits: int = 64):
    """(cycles, fixed cycles) of poplin's ConvPartial1x1Out vertex with FP8 operands and fp16
    partials on a tile holding ``g`` groups of ``[m,k] @ [k,n]`` (arrays allowed), after poplibs'
    ``getConvPartial1x1Supervisor*CycleEstimateQuarter`` (constants: ``[amp_quarter]`` of
    ``configs/_conv-vertices.toml``).

    Per conv group and output group the supervisor runs one zeroing pass and one pass per further
    input group, each loading the weights and waiting for the workers, which split the ``m``
    positions as for the fp16 vertex. The fixed cycles are everything but 4 cycles per output
    position per channel-group pair.
    """
    q = _quarter_table()
    g, m, k, n = (np.asarray(a, dtype=float) for a in (g, m, k, n))
    ig = np.ceil(k / mode.in_group)
    og = np.ceil(n / mode.out_group)
    loads = mode.out_group * q["weight_bytes_per_conv_unit"] / coeff_load_bytes(load_bits)

    def worker(p, zeroing):
        run = np.where(p == 1, q["worker_one"], np.where(p == 2, q["worker_two"],
                       q["worker_base"] + mode.cycles_per_position * np.maximum(p - 3, 0)))
        return np.where(p > 0, q["worker_fixed"] + run - (q["worker_zeroing_saving"] if zeroing else 0), 0.0)

    def inner(zeroing):
        hi = workers * worker(np.ceil(m / workers), zeroing)
        lo = workers * worker(np.floor(m / workers), zeroing)
        return np.maximum(hi, lo + q["worker_imbalance_tag"])

    total = q["supervisor_fixed"] + g * (q["per_conv_group"] + og * (
        q["per_out_group"] + q["first_in_group"] + loads + inner(True)
        + (ig - 1) * (q["per_extra_in_group"] + loads + inner(False))))
    total = np.where(g * m * k * n > 0, total, 0)
    fixed = np.where(total > 0, np.maximum(total - g * ig * og * m * mode.cycles_per_position, 0), 0)
    return total, fixed


def quarter_cast_cycles(elements, workers: int = 6):
    """Cycles of casting ``elements`` FP8 operand elements to fp16 on a tile (arrays allowed),
    poplin's ``estimateCastCycles`` as its planner prices the cast before the fp16 vertex."""
    q = _quarter_table()
    per_worker = np.ceil(np.asarray(elements, dtype=float) / workers)
    return np.where(per_worker > 0,
                    (np.ceil(per_worker / q["cast_elements_per_cycle"]) + q["cast_worker_fixed"]) * workers, 0)


def hmac_vertex_cycles(g, m, k, n, itemsize: int = 4, workers: int = 6, partials_bytes: int = 4):
    """(cycles, fixed cycles) of poplin's ConvPartialHorizontalMac vertex with ``itemsize``-byte
    operands and ``partials_bytes``-byte partials (``[hmac_fp32]``: fp32; ``[hmac_fp16]``: fp16 with
    fp32 partials, its 1x1 form; ``[hmac_half]``: fp16 with fp16 partials, output channels in pairs;
    ``configs/_conv-vertices.toml``) on a tile holding ``g`` groups of ``[m,k] @ [k,n]`` (arrays
    allowed), the tile's ``k`` input channels one group.

    Each output-channel group (one channel, or a pair with fp16 partials) is a pass in which the
    busiest worker takes ``ceil(m/6)`` positions, each a ``k``-long dot product
    (getDenseDotProductCycles: the widest power of two up to the activations per 64-bit load that
    divides ``k`` sets the step, a load a cycle at the full width and two below it, plus a warm-up
    cycle per channel of the loop then); then the partials are zeroed (estimateZeroSupervisorCycles).
    The fixed cycles are everything but the dot products' per-element cycles.
    """
    c = _hmac_table(itemsize, partials_bytes)
    g, m, k, n = (np.asarray(a, dtype=float) for a in (g, m, k, n))
    share = np.ceil(m / workers)
    pair = c["out_chans_per_group"]
    out_groups = np.ceil(n / pair)
    full = int(c["elems_per_load"])
    width = np.ones_like(k)
    w = 2
    while w <= full:
        width = np.where(k % w == 0, w, width)
        w *= 2
    per_element = np.where(width >= full, k / width, 2 * k / width + c["dot_channels"])
    worker = c["worker_start"] + c["worker_fixed"] + c["worker_per_entry"] + share * (
        c["worker_per_position"] + c["dot_fixed"] - c["dot_half_saving"] + per_element)
    outer = (c["supervisor_fixed"] + workers * (c["zero_retention"] + c["worker_retention"])
             + g * (c["per_conv_group"] + c["per_in_group"] + out_groups * (c["per_out_group"] + workers * worker)))
    zeroed = np.ceil(m * pair / workers)  # each worker's share of a group's partials
    zero = workers * (np.ceil(zeroed / c["zero_elems_per_cycle"]) + c["zero_worker_fixed"] - c["zero_retention"]) \
        * out_groups * g
    total = np.where(g * m * k * n > 0, outer + zero, 0)
    fixed = np.where(total > 0, total - g * out_groups * workers * share * per_element, 0)
    return total, fixed


def out_channel_grain(vertex: str, mode: AmpMode) -> int:
    """Output channels a convolution plan of ``vertex`` splits over its tiles in whole grains of
    (``getOutChanGrainSizes``: the vertex type's ``partialChansPerGroup``, ConvVertexType.cpp): the AMP's
    conv units, the HMAC's one or two (:func:`hmac_out_group`)."""
    return hmac_out_group(mode.partials_bytes) if vertex == "hmac" else mode.out_group


def hmac_out_group(partials_bytes: int) -> int:
    """Output channels per group of poplin's HMAC vertex: one with fp32 partials, a pair with fp16
    (ConvVertexType.cpp getConvVertexHMACCandidates: partialChansPerGroup)."""
    return 1 if partials_bytes == 4 else 2


_HMAC_KEYS = ("supervisor_fixed", "zero_retention", "per_conv_group", "per_in_group", "per_out_group",
              "worker_fixed", "worker_per_entry", "worker_per_position", "dot_fixed", "zero_worker_fixed",
              "zero_elems_per_cycle", "worker_retention", "elems_per_load", "dot_half_saving", "worker_start",
              "out_chans_per_group", "dot_channels")


@lru_cache(maxsize=None)
def _vertex_table(section: str, keys: tuple) -> dict:
    """``[section]`` of ``configs/_conv-vertices.toml`` as floats, every key in ``keys`` checked."""
    table = _conv_vertices().get(section, {})
    missing = [key for key in keys if key not in table]
    if missing:
        raise ConfigError(f"{CONV_VERTICES_FILE}: [{section}] has no {', '.join(missing)}")
    return {key: float(table[key]) for key in keys}


def _hmac_table(itemsize: int = 4, partials_bytes: int = 4) -> dict:
    """``[hmac_fp32]``, ``[hmac_fp16]`` or ``[hmac_half]``: poplin's HMAC vertex estimate for
    ``itemsize``-byte operands and ``partials_bytes``-byte partials."""
    section = "hmac_fp32" if itemsize == 4 else "hmac_fp16" if partials_bytes == 4 else "hmac_half"
    return _vertex_table(section, _HMAC_KEYS)


_FP32_KEYS = ("supervisor_fixed", "per_conv_group", "per_extra_in_group", "per_out_group", "worker_one",
              "worker_two", "worker_base", "worker_zeroing_fixed",
              "zero_cycles_per_position_16", "zero_cycles_per_position_8", "worker_imbalance_tag")


def _fp32_table() -> dict:
    """``[amp1x1_fp32]``: poplibs' float 1x1 AMP vertex estimate."""
    return _vertex_table("amp1x1_fp32", _FP32_KEYS)


_QUARTER_KEYS = ("in_group", "out_group", "weight_bytes_per_conv_unit", "worker_fixed", "worker_one", "worker_two",
                 "worker_base", "worker_zeroing_saving", "worker_imbalance_tag",
                 "supervisor_fixed", "per_conv_group", "per_out_group", "first_in_group", "per_extra_in_group",
                 "nx1_supervisor_fixed", "nx1_per_conv_group", "nx1_per_out_group", "nx1_per_in_group",
                 "nx1_per_kernel_row", "nx1_first_kernel_column", "nx1_per_kernel_column", "nx1_worker_fixed",
                 "nx1_worker_per_entry", "cast_worker_fixed", "cast_elements_per_cycle")


def _quarter_table() -> dict:
    """``[amp_quarter]``: poplin's FP8 AMP vertex estimates."""
    return _vertex_table("amp_quarter", _QUARTER_KEYS)


@dataclass(frozen=True)
class ConvShape:
    """What the AMP planner needs of a convolution lowered to ``[M, K] @ [K, N]``: the kernel's
    height and width, the stride, the output row width (positions) and the input channels per
    group (so ``K = in_channels x kernel_h x kernel_w``)."""

    kernel_h: int
    kernel_w: int
    stride: int
    width: int
    in_channels: int
    batch: int = 0  # the output field's batch and height (0: unknown, M split freely)
    height: int = 0
    # per output row and per output column, the kernel rows (columns) that meet the real input rather
    # than padding (empty: every one): the nx1 vertex's worklists skip the rest (padding_coverage)
    row_hits: tuple = ()
    col_hits: tuple = ()
    # poplin may fold the kernel into the input channels (expandDims) only along a dimension whose
    # input field is at least the kernel (ConvPlan.cpp getExpandDimsCandidates); False: neither is
    expandable: bool = True
    # the input's dilation (1: none): a strided convolution's backward pass reads zDeltas dilated by
    # the stride, of which a tile's input patch holds only every ``dilation``-th row and column
    dilation: int = 1
    # poplin's convUnitWeightHeight: each conv unit's weights span this many kernel rows of fewer input
    # channels (rows_folded); ``folded_from`` is then the convolution itself, whose input the tile reads
    unit_rows: int = 1
    folded_from: ConvShape | None = None

    @property
    def kernel_positions(self) -> int:
        return self.kernel_h * self.kernel_w

    def rows_folded(self, unit_rows: int, group_channels: int, in_group: int) -> ConvShape:
        """The convolution as the AMP runs it with ``group_channels`` input channels a group and each
        conv unit's ``in_group`` weights spanning ``unit_rows`` kernel rows (poplin's AMP candidates with
        fewer input channels than a conv unit's weights, ``ConvVertexType.cpp ::
        getConvVertexAMPCandidates``, and ``getConvUnitWeightHeight``; the kernel's height padded to a
        multiple of it, ``padKernelSpatialDim``): a ``ceil(kernel_h / unit_rows) x kernel_w`` kernel over
        groups of ``in_group`` folded channels, nothing padded but those rows and the last group. The
        worklists skip no padded rows (``row_hits`` dropped)."""
        return replace(self, kernel_h=-(-self.kernel_h // unit_rows),
                       in_channels=-(-self.in_channels // group_channels) * in_group, row_hits=(),
                       expandable=False, unit_rows=unit_rows, folded_from=self)

    def expanded_width(self) -> ConvShape:
        """The convolution with its kernel's width folded into the input channels (poplin's
        expandDims of the innermost field dimension): a ``kernel_h x 1`` kernel."""
        return replace(self, kernel_w=1, in_channels=self.in_channels * self.kernel_w,
                       col_hits=())  # the folded columns' padding is computed as zeros


@dataclass(frozen=True)
class Nx1Constants:
    """poplin's ConvPartialnx1 vertex estimate constants (``configs/_conv-vertices.toml``)."""

    supervisor_fixed: int
    retention_per_worker: int
    zero_retention_fp32_partials: int
    zero_retention_fp16_partials: int
    zero_loop_per_out_group: int
    loop_stall: int
    per_conv_group: int
    per_in_group: int
    per_out_group: int
    per_kernel_row: int
    per_kernel_position: int
    weight_load_extra: int
    weight_load_extra_rows2: int
    weight_load_extra_rows4: int
    coeff_load_bytes_per_cycle: int
    weight_bytes_per_conv_unit: int
    worker_fixed_fp32_partials: int
    worker_per_entry: int
    worker_entry_fp16: int
    worker_entry_fp32: int
    worker_retention: int
    zero_worker_fixed: int
    zero_elems_per_cycle: int


@lru_cache(maxsize=1)
def _conv_vertices() -> dict:
    with open(CONV_VERTICES_FILE, "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=1)
def nx1_constants() -> Nx1Constants:
    """The nx1 vertex constants, read once from ``configs/_conv-vertices.toml``."""
    try:
        return Nx1Constants(**_conv_vertices()["nx1"])
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{CONV_VERTICES_FILE}: [nx1]: {e}") from None


def rearrange_cycles_per_element(conv: ConvShape, itemsize: int) -> float:
    """Cycles per element of poplin's on-tile reordering before a convolution
    (``[rearrange]`` of ``configs/_conv-vertices.toml``)."""
    table = _conv_vertices().get("rearrange", {})
    granularity = 8 // itemsize  # channels per 64 bits: 2 fp32, 4 fp16, 8 FP8
    key = "copy_cycles_per_element" if conv.in_channels % granularity == 0 else "copy_cycles_per_element_ragged"
    if key not in table:
        raise ConfigError(f"{CONV_VERTICES_FILE}: [rearrange] has no {key}")
    return float(table[key])


def tile_kernel_positions(conv: ConvShape, k, in_group: int) -> np.ndarray:
    """Kernel positions of a tile whose share of the reduction is ``k`` (array) = channels x kernel
    rows x the kernel's width, as poplin splits it (:func:`conv_inner_block`: the input channels in
    grains times the outer kernel dimension; the innermost kernel dimension is never split,
    ``ConvModel.cpp :: constructModel``): the most kernel rows ``kr <= kernel_h`` that leave whole
    grains of ``in_group`` channels (the last grain what is left of ``in_channels``) per row and column
    (of the factorisations giving the same share, the one with the fewest channel groups, which poplin's
    nx1 estimate, ``getConvPartialnx1SupervisorOuterLoopCycleEstimate``, prices lowest: fewer input-group
    loops).
    A share with no such factorisation (not a split poplin makes) keeps ``k / in_channels`` positions."""
    k = np.asarray(k, dtype=float)
    kw = conv.kernel_w
    fallback = np.clip(np.floor(k / conv.in_channels), 1, conv.kernel_positions)
    out = np.zeros_like(k)
    for kr in range(conv.kernel_h, 0, -1):
        span = kr * kw
        ch = k / span
        fits = (out == 0) & (k % span == 0) & (ch <= conv.in_channels) & (k >= span) & \
            ((ch % in_group == 0) | (ch % in_group == conv.in_channels % in_group))
        out = np.where(fits, span, out)
    return np.where(out > 0, out, fallback)


def worker_entries(m, width, workers: int, entry_cycles: float, cycles_per_position: float) -> np.ndarray:
    """Worklist entries of the busiest worker of a tile of ``m`` output positions in rows ``width``
    wide (arrays), as ``ConvUtilInternal.cpp :: partitionConvPartialByWorker`` (poplibs 8dcde1ec) cuts
    the flattened positions: worker ``i`` takes ``[i m / 6, (i + 1) m / 6)`` and has one entry per row
    that range touches; the busiest is the one of most cycles (``entry_cycles`` an entry, its fixed
    cost once the retained state is counted, plus ``cycles_per_position`` per position), as
    ``getConvPartialnx1SupervisorInnerLoopCycleEstimate`` takes the slowest worker."""
    m = np.floor(np.asarray(m, dtype=float))
    width = np.maximum(np.asarray(width, dtype=float), 1)
    best_cost = best = None
    for i in range(workers):
        begin, end = np.floor(i * m / workers), np.floor((i + 1) * m / workers)
        entries = np.where(end > begin, np.floor((end - 1) / width) - np.floor(begin / width) + 1, 0)
        cost = entry_cycles * entries + cycles_per_position * (end - begin)
        if best is None:
            best, best_cost = entries, cost
        else:
            best, best_cost = np.where(cost > best_cost, entries, best), np.maximum(cost, best_cost)
    return np.maximum(best, 1.0)


def nx1_vertex_cycles(ipu: IPU, mode: AmpMode, conv: ConvShape, g, m, k, n):
    """(cycles, fixed cycles) of the ConvPartialnx1 vertex of a tile holding ``g`` groups of
    ``m`` output positions x ``k`` of the ``in_channels x kernel^2`` reduction x ``n`` output
    channels (arrays allowed), after poplin's ``getConvPartialnx1*CycleEstimate``.

    Per (conv group, input group, output group) the supervisor loops over the tile's kernel
    positions; at each it loads the coefficients and the 6 workers run their worklists: a
    worker's share of the tile's output positions, one entry per output row it touches, so
    a narrow field or few positions per tile pays the per-entry cost often. The fixed cycles
    are everything but the 4 (fp16) or 8 (fp32) cycles per output position.
    """
    c = nx1_constants()
    workers = ipu.worker_threads
    g, m, k, n = (np.asarray(a, dtype=float) for a in (g, m, k, n))
    # kernel positions and input-channel groups of the tile's share of the reduction
    kpos = tile_kernel_positions(conv, k, mode.in_group)
    ig = np.ceil(np.ceil(k / kpos) / mode.in_group)
    og = np.ceil(n / mode.out_group)
    krows = np.ceil(kpos / conv.kernel_w)
    # with the weights over 4 kernel rows the coefficients load 64 bits a cycle whatever the option
    load_bits = min(ipu.conv_unit_load_bits, 64) if conv.unit_rows == 4 else ipu.conv_unit_load_bits
    loads = mode.out_group * c.weight_bytes_per_conv_unit / coeff_load_bytes(load_bits)
    weight_load_extra = {1: c.weight_load_extra, 2: c.weight_load_extra_rows2,
                         4: c.weight_load_extra_rows4}[conv.unit_rows]
    # the busiest worker's worklist entries: its share of the positions in rows of the tile's width
    width = np.minimum(conv.width, np.maximum(m, 1))
    entry = c.worker_entry_fp16 if mode.cycles_per_position <= 4 else c.worker_entry_fp32
    entries = worker_entries(m, width, workers, c.worker_per_entry - c.worker_retention + entry,
                             mode.cycles_per_position)
    if conv.dilation > 1:
        # rows of a dilated input: a kernel row meets one output row in ``dilation``, and the
        # worklist of each kernel position holds only the rows it meets (ConvVertices.cpp
        # createPartitions), so a worker has 1/dilation of the entries per kernel position
        entries = entries / conv.dilation
    # padding: at each kernel position the worklists cover only the outputs it writes
    per_position = workers * np.ceil(m * padding_coverage(conv, m) / workers) * mode.cycles_per_position
    zero_rows = workers * np.ceil(np.ceil(m * mode.out_group / workers) / c.zero_elems_per_cycle) * og * g
    if mode.quarter:
        return _nx1_quarter_cycles(g, m, k, n, kpos, ig, og, krows, entries, per_position, zero_rows, workers,
                                   ipu.conv_unit_load_bits)
    fp16_partials = mode.partials_bytes == 2
    worker_fixed = c.worker_fixed_fp32_partials + fp16_partials + \
        entries * (c.worker_per_entry - c.worker_retention + entry)
    # a tile waits for its slowest worker at each kernel position (poplibs adds 9 cycles when the
    # fastest is within 9 of it: left out, as small as the averaging of the worklists above)
    position_fixed = c.per_kernel_position + loads + weight_load_extra + workers * worker_fixed
    inner = krows * c.per_kernel_row + kpos * (position_fixed + per_position)
    zero_retention = c.zero_retention_fp16_partials if fp16_partials else c.zero_retention_fp32_partials
    outer = (c.supervisor_fixed + workers * (c.retention_per_worker + zero_retention)
             + g * (og * c.zero_loop_per_out_group + (og - 1) * c.loop_stall + 1) + (g - 1) * c.loop_stall + 1
             + g * (c.per_conv_group + ig * (c.per_in_group + og * (c.per_out_group + inner))))
    zero = zero_rows + workers * (c.zero_worker_fixed - zero_retention) * og * g
    total = np.where(g * m * k * n > 0, np.ceil(outer + zero), 0)
    fixed = np.where(total > 0, total - g * ig * og * kpos * per_position, 0)
    return total, fixed


def _nx1_quarter_cycles(g, m, k, n, kpos, ig, og, krows, entries, per_position, zero_rows, workers, load_bits=64):
    """(cycles, fixed cycles) of the ConvPartialnx1 vertex with FP8 operands (arrays allowed), after
    poplibs' ``getConvPartialnx1Supervisor*CycleEstimateQuarter`` (``[amp_quarter]`` nx1_*): per
    (conv group, output group, input group) the supervisor walks the tile's kernel rows and columns,
    loading the weights twice per row, and at each kernel position the workers run their worklists
    (``entries`` each, and ``per_position`` cycles of positions, as :func:`nx1_vertex_cycles`, whose
    note on poplibs' 9-cycle tag for the fastest worker holds here too); the partials are zeroed as
    for fp16 (``zero_rows``, no state retained)."""
    q = _quarter_table()
    c = nx1_constants()
    load = q["out_group"] * q["weight_bytes_per_conv_unit"] / coeff_load_bytes(load_bits)
    columns = kpos / krows
    supervisor = krows * (q["nx1_per_kernel_row"] + q["nx1_first_kernel_column"] + 2 * load
                          + (columns - 1) * q["nx1_per_kernel_column"])
    worker = q["nx1_worker_fixed"] + entries * q["nx1_worker_per_entry"]
    inner = supervisor + kpos * (workers * worker + per_position)
    outer = q["nx1_supervisor_fixed"] + g * (q["nx1_per_conv_group"] + og * (
        q["nx1_per_out_group"] + ig * (q["nx1_per_in_group"] + inner)))
    zero = zero_rows + workers * c.zero_worker_fixed * og * g
    total = np.where(g * m * k * n > 0, np.ceil(outer + zero), 0)
    fixed = np.where(total > 0, total - g * ig * og * kpos * per_position, 0)
    return total, fixed


def kernel_hits(out_size: int, kernel: int, in_size: int, pad_lower: int, stride: int = 1,
                dilation: int = 1) -> tuple[int, ...]:
    """Per output index ``o`` of one field dimension of a convolution, the kernel indices ``k`` whose
    input index ``j = o x stride + k - pad_lower`` meets one of the ``in_size`` real inputs: not
    padding and, when the input is dilated by ``dilation`` (``dilation - 1`` zeros between
    neighbours), not a zero (``0 <= j <= (in_size - 1) x dilation``, ``j`` a multiple of ``dilation``).

    With a dilation this is the backward pass of a forward convolution of stride ``dilation``
    (``ConvUtil.cpp :: getGradientParams``: the zDeltas dilated by the stride, padded by
    ``kernel - 1 - padding``); poplin's nx1 worklists cover, per kernel position, only the outputs
    meeting such an input (``ConvVertices.cpp :: createPartitions``, ``getOutputRangeForKernelIndex``
    with the input dilation; along the row the vertex writes every ``dilation``-th output,
    ``outStrideX``)."""
    last = (in_size - 1) * dilation
    hits = []
    for o in range(out_size):
        lo, hi = max(0, o * stride - pad_lower), min(last, o * stride - pad_lower + kernel - 1)
        hits.append(max(0, hi // dilation - -(-lo // dilation) + 1) if hi >= lo else 0)
    return tuple(hits)


@lru_cache(maxsize=256)
def _window_coverage(hits: tuple, kernel: int) -> np.ndarray:
    """``cov[b]``: the largest share of a ``kernel``-long kernel dimension's (output, kernel index)
    pairs that meet real input over ``b`` consecutive outputs (``cov[0]`` unused)."""
    h = np.asarray(hits, dtype=float)
    csum = np.concatenate([[0.0], np.cumsum(h)])
    cov = np.ones(len(h) + 1)
    for b in range(1, len(h) + 1):
        cov[b] = (csum[b:] - csum[:-b]).max() / (b * kernel)
    return cov


def padding_coverage(conv: ConvShape, m) -> np.ndarray:
    """Share of a tile's (kernel position, output position) pairs that the nx1 vertex computes when
    the tile holds ``m`` positions of rows ``conv.width`` wide (arrays), the busiest tile's: the
    vertex's worklists hold, per kernel position, only the outputs that kernel position writes
    (``ConvVertices.cpp :: createPartitions``: ``getOutputRangeForKernelRange`` per kernel position,
    then ``getOutputRangeForKernelIndex`` per worker row), so outputs whose input at that position is
    padding cost nothing. The busiest tile holds the densest block of whole rows (a window of
    ``ceil(m / width)`` rows) or, below one row, the densest ``m`` columns. 1 without hits.

    poplin's planner does not see this (``getConvPartialnx1InnerLoopCycleEstimate`` partitions the
    whole tile output for every kernel position), so plans are chosen without it
    (:attr:`MatmulPlan.planned_cycles`).
    """
    m = np.maximum(np.asarray(m, dtype=float), 1)
    cov = np.ones_like(m)
    if conv.row_hits:
        rows = _window_coverage(conv.row_hits, conv.kernel_h)
        n_rows = len(conv.row_hits)
        cov = cov * rows[np.clip(np.ceil(m / conv.width), 1, n_rows).astype(np.int64)]
    if conv.col_hits:
        cols = _window_coverage(conv.col_hits, conv.kernel_w)
        n_cols = len(conv.col_hits)
        cov = cov * cols[np.clip(np.minimum(m, conv.width), 1, n_cols).astype(np.int64)]
    return cov


def pass_fixed_cycles() -> int:
    """Cycles one matmul or convolution pass costs beyond the steps poplin's planner prices
    (``[pass] fixed_cycles`` of ``configs/_conv-vertices.toml``, fitted to poplibs' single-layer
    IPUModel2 benchmarks: the control code and the compute sets poplin adds around the planned
    ones)."""
    table = _conv_vertices().get("pass", {})
    if "fixed_cycles" not in table:
        raise ConfigError(f"{CONV_VERTICES_FILE}: [pass] has no fixed_cycles")
    return int(table["fixed_cycles"])


_TRANSPOSE_KEYS = ("half_wide_fixed", "half_wide_per_matrix", "half_wide_per_row_quad", "half_per_column_quad",
                   "half_narrow_fixed", "half_narrow_per_matrix", "half_4x4_fixed", "half_4x4_one", "half_unpack",
                   "supervisor_fixed", "supervisor_skipped", "float_fixed", "float_per_matrix", "float_per_row_pair",
                   "float_per_column_pair", "slow_half_fixed", "slow_per_matrix", "slow_per_column",
                   "slow_half_per_row", "slow_float_fixed", "slow_float_per_row", "in_group_half", "in_group_float")


def _half_transpose_worker(c: dict, rows: int, cols: int, matrices: int) -> float:
    """popops TransposeWorkerCycles: worker cycles of the fast half transpose of ``matrices``
    ``rows x cols`` blocks (both multiples of 4), the src pointer's unpacking included."""
    r4, c4 = rows // 4, cols // 4
    if r4 == 1 and c4 == 1:
        base = c["half_4x4_one"] if matrices == 1 else c["half_4x4_fixed"] + c["half_per_column_quad"] * (matrices - 2)
    elif c4 == 1:
        base = c["half_narrow_fixed"] + matrices * (c["half_narrow_per_matrix"] + c["half_per_column_quad"] * (r4 - 2))
    else:
        base = c["half_wide_fixed"] + matrices * (c["half_wide_per_matrix"] + r4 * (
            c["half_wide_per_row_quad"] + c["half_per_column_quad"] * (c4 - 2)))
    return base + c["half_unpack"]


def transpose_block_cycles(rows: int, cols: int, blocks: int, itemsize: int, workers: int = 6) -> float:
    """Tile cycles of popops' transpose of ``blocks`` ``rows x cols`` blocks on one tile
    (``Rearrange.cpp :: addTransposeVertices`` and the estimators of ``popopsCycleEstimators.cpp``
    at 8dcde1ec; constants ``[fc_weight_transpose]`` of ``configs/_conv-vertices.toml``).

    fp16 blocks whose sides are multiples of 4 run the fast codelet: one ``Transpose`` worker
    vertex for a single block (or up to four 4x4 blocks), else one ``TransposeSupervisor`` whose
    busiest worker takes ``ceil(blocks / 6)``: ``7 + 6 x (worker + unpack - 7)``. Otherwise the
    blocks are split over the workers, one ``Transpose2d`` each (fast float path for even sides,
    the slow path for the rest). A worker vertex's cycles are thread cycles: 6 tile cycles each.
    """
    if blocks <= 0:
        return 0.0
    c = _vertex_table("fc_weight_transpose", _TRANSPOSE_KEYS)
    share = math.ceil(blocks / workers)
    if itemsize == 2 and rows % 4 == 0 and cols % 4 == 0:
        if blocks == 1 or (rows == 4 and cols == 4 and blocks <= 4):
            return workers * _half_transpose_worker(c, rows, cols, blocks)
        worker = _half_transpose_worker(c, rows, cols, share)
        return c["supervisor_fixed"] + workers * (worker + c["half_unpack"] - c["supervisor_skipped"])
    if itemsize == 4 and rows % 2 == 0 and cols % 2 == 0 and rows < 512 and rows * (cols - 2) / 2 < 512:
        per = c["float_per_matrix"] + rows / 2 * (c["float_per_row_pair"] + c["float_per_column_pair"] * (cols / 2 - 1))
        return workers * (c["float_fixed"] + share * per)
    fixed, per_row = ((c["slow_half_fixed"], c["slow_half_per_row"]) if itemsize == 2
                      else (c["slow_float_fixed"], c["slow_float_per_row"]))
    return workers * (fixed + share * (c["slow_per_matrix"] + cols * (c["slow_per_column"] + rows * per_row)))


def fc_weight_transpose(G: int, K: int, N: int, itemsize: int, used: int, workers: int = 6) -> float:
    """Tile cycles of the weight transpose poplin runs before a fully connected backward pass
    (``Convolution.cpp :: fullyConnectedWeightTranspose``) for ``G`` groups of ``[K, N]`` weights
    held by ``used`` tiles (the joint plan's): blocks of ``gcd(in group, N) x gcd(in group, K)``
    (``getGroupSizes``: the largest common divisors of the planned input-channel grouping, 16 in
    fp16 and 8 in fp32, and the weight dimensions), spread evenly over the tiles; 0 when a group
    size is 1 (poplin then takes a view, ``useCopyImpl``). One compute set, no exchange (each
    block's transpose is mapped to the tile holding it)."""
    c = _vertex_table("fc_weight_transpose", _TRANSPOSE_KEYS)
    group = int(c["in_group_half"] if itemsize == 2 else c["in_group_float"])
    rows, cols = math.gcd(group, N), math.gcd(group, K)
    if rows == 1 or cols == 1 or G * K * N == 0:
        return 0.0
    blocks = G * math.ceil(K / cols) * math.ceil(N / rows)
    return transpose_block_cycles(rows, cols, math.ceil(blocks / max(used, 1)), itemsize, workers)


def _plan_plus(plan: MatmulPlan, ipu: IPU, *, exchange: int = 0, compute: int = 0, launch: int = 0, sets: int = 0,
               syncs: int = 0, phases: int = 0, nbytes: int = 0, planned: bool = True, **fields) -> MatmulPlan:
    """``plan`` with work added: ``exchange`` / ``compute`` / ``launch`` cycles, ``sets`` compute sets,
    ``syncs`` on-chip syncs, ``phases`` exchange phases of ``nbytes`` bytes in all, added to its total
    (and, but for the syncs, to its planned cycles when it has them and ``planned``); ``fields`` set
    as given."""
    added = exchange + compute + syncs * ipu.internal_sync_cycles
    return replace(plan, exchange_cycles=plan.exchange_cycles + exchange, compute_cycles=plan.compute_cycles + compute,
                   launch_cycles=plan.launch_cycles + launch, supersteps=plan.supersteps + sets,
                   sync_points=plan.sync_points + syncs, exchange_phases=plan.exchange_phases + phases,
                   exchange_bytes=plan.exchange_bytes + nbytes, total_cycles=plan.total_cycles + added,
                   planned_cycles=plan.planned_cycles + exchange + compute if planned and plan.planned_cycles
                   else plan.planned_cycles,
                   **fields)


#: poplin's convolution vertex of each plan vertex (``MatmulPlan.vertex``): the im2col-expanded plan runs the 1x1
#: vertex, the width-expanded one the nx1 vertex (ConvVertexType.cpp, Convolution.cpp createConvPartial*Vertex)
_VERTEX_CODELET = {"1x1": "ConvPartial1x1Out", "expanded": "ConvPartial1x1Out", "nx1": "ConvPartialnx1",
                   "expand_w": "ConvPartialnx1", "hmac": "ConvPartialHorizontalMac"}


def plan_codelets(plan: MatmulPlan, itemsize: int) -> tuple:
    """Keys of the distinct codelets a matmul or convolution pass of ``plan`` runs (``itemsize``-byte operands),
    which a tile keeps once however many passes and compute sets run them (Poplar compiles a codelet's code once
    a tile): the convolution vertex of the operands' and partials' types (:data:`_VERTEX_CODELET`; the forward,
    input-gradient and weight-update passes of a layer share it); popops' reduction of the partials over the tiles
    to the result's type, or else the cast of fp32 partials (the elementwise cast's own codelet); Poplar's copy
    code where an operand or the result moves into another layout; the weight transpose of a backward pass; and a
    serialised plan's dynamic slice, its update (an add into the accumulated partials along K) and the loop
    counter's add."""
    vertex = _VERTEX_CODELET.get(plan.vertex, plan.vertex)
    out_bytes = max(itemsize, 2)
    keys = [(vertex, itemsize, plan.partials_bytes)]
    if plan.reduction_stages:  # the last stage writes the result's type; the stages before it, partials
        keys += [("reduce_partials", plan.partials_bytes, plan.partials_bytes)] * (plan.reduction_stages > 1)
        keys.append(("reduce_partials", plan.partials_bytes, out_bytes, "last"))
    elif plan.partials_bytes > out_bytes:
        keys.append(("cast", "float32", 0))
    if plan.rearranged or plan.dilated_output or plan.output_rearrange:
        keys.append(("copy", "", 0))
    if plan.weight_transpose:
        keys.append(("transpose2d", itemsize, 0))
    if plan.serial > 1:
        keys.append(("dynamic_slice", itemsize, 0))
        update = ("add", plan.partials_bytes, 0) if plan.serial_dim == "K" else ("dynamic_update_slice", out_bytes, 0)
        keys.append(update)
        keys.append(("add", "int32", 0))
    return tuple(keys)


def with_weight_transpose(plan: MatmulPlan, cycles: float, ipu: IPU) -> MatmulPlan:
    """``plan`` preceded by a weight transpose of ``cycles`` tile cycles in its own compute set
    (:func:`fc_weight_transpose`)."""
    if cycles <= 0:
        return plan
    t = int(math.ceil(cycles))
    return _plan_plus(plan, ipu, compute=t, sets=1, syncs=1, weight_transpose=t)


def transposed_weights_exchange(ipu: IPU, elements: int, src_tiles: int, dst_tiles: int, itemsize: int) -> int:
    """Exchange cycles of moving a fully connected layer's transposed weights (``elements``) from the
    forward plan's tiles (``src_tiles``, where the transpose vertices run) to the backward plan's
    layout (``dst_tiles``) when the passes are planned separately.

    ``Convolution.cpp :: fullyConnectedWeightTranspose`` (8dcde1ec) writes the transpose into a new
    tensor made by ``createWeights(graph, bwdPlan, ...)``, laid out for the backward plan, while it
    maps each block's transpose vertex to the tile holding the forward weights
    (``blockTileMapping`` of ``firstInGroup``); ``getGroupSizes`` scores the block sizes on where the
    outputs land (``blockScore``). A joint plan lays both passes' weights out on the same tiles (each
    weight used on one tile), so nothing moves; separate plans lay them out independently, so the
    transposed blocks are exchanged to their tiles after the transpose compute set. The busiest tile
    sends or receives its even share: one exchange phase with its set-up."""
    if elements <= 0:
        return 0
    return exchange_cycles(math.ceil(elements / max(1, min(src_tiles, dst_tiles))) * itemsize, ipu)


def with_transposed_weights_moved(plan: MatmulPlan, elements: int, src_tiles: int, ipu: IPU,
                                  itemsize: int) -> MatmulPlan:
    """``plan`` (a separately planned fully connected backward pass, after
    :func:`with_weight_transpose`) with the transposed weights exchanged from the forward plan's
    ``src_tiles`` to its own layout between the transpose and the matmul
    (:func:`transposed_weights_exchange`): one more exchange phase and its sync. Cycles and bytes."""
    exch = transposed_weights_exchange(ipu, elements, src_tiles, plan.tiles_used, itemsize)
    if exch <= 0:
        return plan
    return _plan_plus(plan, ipu, exchange=exch, phases=1, syncs=1, nbytes=elements * itemsize)


def rearrangement(ipu: IPU, elements, used, itemsize: int):
    """(exchange cycles, copy cycles, bytes received) per tile of rearranging ``elements`` operand
    elements evenly over ``used`` tiles before a matmul or convolution (arrays allowed).

    poplin lays out a weight-update pass's operands for the forward pass, so its planner charges
    a rearrangement of them into the layout the weight-update plan reads
    (``ConvModel.cpp :: addTransformCycleEstimate``: ``rearrangeInput`` and ``rearrangeWeights``
    when ``pass == TRAINING_WU``; ``rearrangeInput`` for ``FC_TRAINING_WU``): each tile receives its
    even share (``ceildiv(elements, usedTiles) x bytes``, at the exchange rate) and reorders it at
    ``bytes x 5 / (4 x min(memcpyBytesPerCycle, bytes))`` cycles (``getScaleFactorForTransform``;
    the ``[rearrange]`` table of ``configs/_conv-vertices.toml``). One exchange phase and one copy
    compute set, each with its set-up.
    """
    table = _conv_vertices().get("rearrange", {})
    if "copy_cycles_per_element" not in table:
        raise ConfigError(f"{CONV_VERTICES_FILE}: [rearrange] has no copy_cycles_per_element")
    per_tile = np.ceil(np.asarray(elements, dtype=float) / np.maximum(used, 1))
    nbytes = per_tile * itemsize
    exch = np.where(per_tile > 0, ipu.exchange_setup_cycles + np.ceil(nbytes / ipu.exchange_rate), 0)
    copy = np.ceil(per_tile * float(table["copy_cycles_per_element"]))
    return exch, copy, nbytes


def planned_rearrangement(ipu: IPU, elements, used, itemsize: int):
    """poplin's planning estimate of :func:`rearrangement` (cycles per tile, arrays allowed): the copy
    and the exchange at the Target's full rate, with no set-up (``ConvModel.cpp ::
    addTransformCycleEstimate``, ``ExchangeEstimator``)."""
    _, copy, nbytes = rearrangement(ipu, elements, used, itemsize)
    return np.ceil(nbytes / ipu.exchange_bytes_per_cycle_per_tile) + copy


def padded_partials_rearranged(ipu: IPU, itemsize: int, partials_bytes: int, groups: int, out_channels: int,
                               out_positions: int, weights_per_out_channel: int) -> int:
    """Elements poplin rearranges over the tiles for a convolution whose output channels per group
    (``out_channels``) are not a multiple of the AMP's partial-channel group (0 when they are).

    ``Convolution.cpp :: convolutionPreprocess`` pads the weights' output channels with zeros up to
    the group, and the planner charges the padded weights and output a rearrangement
    (``ConvModel.cpp :: addTransformCycleEstimate``: ``padPartialChannels`` sets ``rearrangeWeights``
    and ``rearrangeOutput``; each tile exchanges and reorders its even share, :func:`rearrangement`).
    The group is the smallest of poplin's candidates (``ConvVertexType.cpp ::
    getConvVertexAMPCandidates``: the conv units, the weights per conv unit, and half the units when
    there are 16), 8 on Mk2 at every precision. The backward pass of an RGB stem (4 input
    channels, so 4 output channels) pays it: ``groups x 8 x (out_positions + weights_per_out_channel)``
    elements.
    """
    group = partial_channel_group(amp_mode(ipu, itemsize, partials_bytes))
    if out_channels % group == 0:
        return 0
    padded = -(-out_channels // group) * group
    return groups * padded * (out_positions + weights_per_out_channel)


def fc_weight_update_rearranged(G: int, M: int, K: int, N: int) -> int:
    """Operand elements a fully connected weight-update pass ``G x [M,K] @ [K,N]`` rearranges over
    its tiles before it runs: both operands, laid out by the passes that made them. poplin's planner
    charges the input (``ConvModel.cpp :: addTransformCycleEstimate``: ``rearrangeInput`` for
    ``FC_TRAINING_WU``), and at run time ``Convolution.cpp`` rearranges the input and the weights
    alike (``inputRearrangementIsExpensive`` / ``weightRearrangementIsExpensive``: "During the weight
    update pass we change the innermost dimension"), so both then sit in the plan's layout, a share
    of each already on its tile as for any planned operand."""
    return G * M * K + G * K * N


def partial_channel_group(mode: AmpMode) -> int:
    """The smallest partial-channel group of poplin's AMP candidates for ``mode`` (``ConvVertexType.cpp
    :: getConvVertexAMPCandidates``: the conv units, the weights per conv unit, and half the units
    when there are 16): 8 on Mk2 at every precision."""
    units = mode.out_group // 2 if mode.out_group == 16 else mode.out_group
    return min(mode.in_group, units)


def matmul_padding(in_group: int, partial_group: int, G: int, M: int, K: int, N: int, weight_update: bool,
                   mismatch: bool = False) -> tuple[int, int]:
    """(elements rearranged over the tiles, elements only poplin's planner charges) of the pass
    ``G x [M,K] @ [K,N]`` of a matmul (a 1x1 convolution: ``M`` positions, ``K`` input and ``N`` output
    channels) run on a vertex taking input channels in groups of ``in_group`` and producing partials in
    groups of ``partial_group`` (1 and 1 for HMAC, which takes any grouping; an AMP vertex: its mode's
    ``in_group`` and :func:`partial_channel_group`).

    ``ConvModel.cpp :: addTransformCycleEstimate`` (8dcde1ec): input channels short of the vertex's
    input-channel group (``padInChannels``) rearrange the input and the weights; output channels
    short of the partial-channel group (``padPartialChannels``) rearrange the weights and the output
    (``Convolution.cpp :: convolutionPreprocess`` pads them with zeros; the padded operands are
    copied into the plan's layout). Counted in padded channels (poplin's ``numInChanGrains x
    inChanGrainSize``), once per operand: a weight-update pass (``weight_update``) rearranges both
    its operands anyway (:func:`fc_weight_update_rearranged`), so only its output is counted.
    ``mismatch``: the pass runs unswapped while poplin's layout is the swapped one (``swapOperands !=
    isMatmulOrFullyConnectedLayer``): the planner charges the input, the weights and the output as
    rearranged, but the operands are created for the chosen plan, so those not padded are charged to
    the plan's choice only (the second value)."""
    k = -(-K // in_group) * in_group
    n = -(-N // partial_group) * partial_group
    pad_in, pad_out = k != K, n != N
    operands = ((G * M * k, pad_in and not weight_update, mismatch and not weight_update),
                (G * k * n, (pad_in or pad_out) and not weight_update, mismatch and not weight_update),
                (G * M * n, pad_out, mismatch))
    run = sum(e for e, padded, _ in operands if padded)
    planned = sum(e for e, padded, charged in operands if charged and not padded)
    return run, planned


def deferred_dilation_copy(elements, used, itemsize: int):
    """Compute cycles per tile of poplin's copy that applies a dilation deferred until after a
    convolution (arrays allowed): ``elements`` result elements, the dilated and zero-padded view
    of the convolution's output, copied into a new variable spread evenly over ``used`` tiles.

    A strided convolution's backward pass dilates zDeltas by the stride; with a 1x1 kernel and no
    padding poplin convolves the undilated zDeltas and dilates afterwards (``ConvPlan.cpp ::
    getDilatePostConvDims``, ``ConvModel.cpp :: canDeferDilation``); ``Convolution.cpp ::
    convolutionPostprocess`` then copies the dilated view, zeros included, into the result, whose
    mapping follows the nearest non-zero element, so the copy stays on the tiles. Priced as the
    ``copy`` codelet (``configs/_vector-ops.toml``) on each tile's share, in one compute set.
    """
    copy = codelet("copy")
    per_tile = np.ceil(np.asarray(elements, dtype=float) / np.maximum(used, 1))
    return np.where(per_tile > 0, copy.fixed + np.ceil(per_tile * copy.per_element(itemsize)), 0)


def reduce_stages(depth, multi_stage: bool = True):
    """Stages poplin reduces ``depth`` partials in (0 when there is nothing to reduce; at most one
    without ``enableMultiStageReduce``)."""
    depth = np.asarray(depth)
    if not multi_stage:
        return np.where(depth <= 1, 0, 1)
    return np.where(depth <= 1, 0, np.where(depth < 16, 1, np.where(depth < 125, 2, 3)))


def partials_reduction(ipu: IPU, outputs, depth, partials_bytes: int, out_bytes: int = 2, grain: int = 8,
                       planner_exchange: bool = False):
    """(exchange cycles, compute cycles, stages, bytes received, fixed compute cycles) per tile of
    reducing ``depth`` partial sums of ``outputs`` outputs, held by ``depth`` tiles (arrays), to a
    result of ``out_bytes`` elements; ``grain`` is the partials' channel group. Each stage is one
    exchange phase and one compute set, as poplin builds them (``ConvReduce.cpp``,
    :func:`sim.cost.conv_reduce.conv_partials_reduction`: the busiest tile's share of the output
    block and its ``poplin::ReduceAdd`` vertex estimate). With ``planner_exchange``, also the
    exchange cycles at the full width and without set-ups, as poplin's planner prices them (a sixth
    value).
    """
    shape = np.broadcast(np.asarray(outputs), np.asarray(depth)).shape
    exch, planned, compute, recv, fixed = (np.zeros(shape) for _ in range(5))
    for got, cycles, base in conv_partials_reduction(outputs, depth, partials_bytes, out_bytes, grain, ipu):
        active = cycles > 0
        recv += got
        exch += np.where(active, ipu.exchange_setup_cycles + np.ceil(got / ipu.exchange_rate), 0)
        if planner_exchange:
            planned += np.where(active, np.ceil(got / ipu.exchange_bytes_per_cycle_per_tile), 0)
        compute += cycles
        fixed += base
    if planner_exchange:
        return exch, compute, reduce_stages(depth, ipu.multi_stage_reduce), recv, fixed, planned
    return exch, compute, reduce_stages(depth, ipu.multi_stage_reduce), recv, fixed


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
    # poplin's planning estimate of total_cycles, by which plans are chosen: the same but for the
    # padding its nx1 estimate does not see (padding_coverage); 0: equal to total_cycles
    planned_cycles: int = 0
    launch_cycles: int = 0  # the fixed part of compute_cycles (vertex and per-pair overheads)
    # the vertex's compute set alone on the busiest tile, one piece: what a profile shows as the
    # convolution's compute set (no operand copies, reduction or cast)
    kernel_cycles: int = 0
    exchange_phases: int = 0  # exchange phases, all pieces (each costs the set-up)
    partials_bytes: int = 4
    pass_fixed: int = 0  # Poplar's fixed cycles of the pass beyond the planned steps (pass_fixed_cycles)
    weight_transpose: int = 0  # cycles of a fully connected backward pass's weight transpose (fc_weight_transpose)
    output_rearrange: int = 0  # copy cycles per tile of a separate fc weight-update's result moved to the weights' layout
    rearranged: int = 0  # operand elements poplin rearranges over the tiles before the op (one piece)
    dilated_output: int = 0  # result elements copied after the op to apply a deferred dilation (one piece)
    vertex: str = "1x1"  # "1x1"; "nx1" (a convolution's kernel on the tile); "expand_w" (the
    #                      kernel's width folded into the input channels, then nx1); "expanded"
    #                      (the whole kernel folded in: im2col rows exchanged, then 1x1)
    serial_dim: str = ""  # the channels a serialised plan is cut along: "N" (poplin's outChanSplit.serial) or
    #                       "K" (inChanSplit.serial: each piece's partials added into an accumulator); "" if not
    swapped: bool = False  # planned with the operands swapped (poplin's swapOperands): dims is G x [N,K] @ [K,M]
    relaid: int = 0  # operand elements copied into the plan's layout at run time (relaid_operands), all pieces
    relaid_cycles: int = 0  # the part of total_cycles copying them: exchange phases and their syncs
    channel_grains: bool = False  # its channels split over the tiles in whole grains (a convolution's passes)
    reduction_stages: int = 0  # compute sets reducing the partials over the tiles (one piece)
    unit_rows: int = 1  # kernel rows each conv unit's weights span (ConvShape.rows_folded); 1: one row
    group_channels: int = 0  # the input channels of a group when they span several rows
    # where no plan fits the budget: the temporary-memory bound (bytes per tile) poplin planned it within
    # (memory_bounds; math.inf: none); 0 where it fits
    memory_bound: float = 0.0

    @property
    def estimate(self) -> int:
        """poplin's planning estimate of this plan's cycles (planned_cycles, else total_cycles)."""
        return self.planned_cycles or self.total_cycles

    def profile(self, ipu: IPU, tiles: int, itemsize: int, b_is_weight: bool,
                conv: ConvShape | None = None) -> TileProfile:
        """Per-tile compute cycles, bytes in and temporary bytes allocated (the exchanged part of
        the operand blocks and the partials, not the planner's estimate) of this plan (all pieces).

        Blocks are as even as the dimensions allow: the first ``d % p`` blocks of a split
        dimension hold one more row than the others, so tiles are unevenly loaded.
        """
        pg, pm, pn, pk = self.splits
        G, M, K, N = self.dims

        def blocks(d, p):
            return d // p + (np.arange(p) < d % p)
        mode = amp_mode(ipu, itemsize, self.partials_bytes)
        k_blocks = None
        if conv is not None and self.vertex in ("nx1", "expand_w"):  # whole channel grains x kernel rows
            k_blocks = conv_inner_blocks(_vertex_conv(conv, self.vertex), K, pk, mode.in_group)
        if k_blocks is None:
            k_blocks = channel_blocks(K, pk, self.vertex, itemsize, mode.in_group)
        n_blocks = blocks(N, pn)
        if self.channel_grains:  # whole output-channel grains, handed out as poplin hands them out
            n_blocks = grain_channels(N, pn, out_channel_grain(self.vertex, mode))
        g, m, n, k = (a.ravel() for a in np.meshgrid(blocks(G, pg), blocks(M, pm), n_blocks,
                                                     k_blocks, indexing="ij"))
        c = _tile_costs(ipu, itemsize, self.partials_bytes, b_is_weight, conv, self.vertex,
                        g, m, k, n, pm, pn, pk, self.rearranged, self.tiles_used, self.dilated_output)
        if self.serial_dim == "K":
            c["held"] = c["held"] + _reduced_outputs(g, m, n, pk) * self.partials_bytes
        compute = c["compute"] * self.serial + np.where(c["compute"] > 0, self.pass_fixed + self.weight_transpose
                                                                        + self.output_rearrange, 0)
        recv, held = c["recv"] * self.serial, c["held"]
        if self.relaid:  # each tile receives and holds its share of the operands' copies in the plan's layout
            share = _relaid_share(self.relaid, self.tiles_used, itemsize)
            recv, held = recv + share, held + share
        return TileProfile.padded(tiles, compute, recv, held)

    def describe(self) -> str:
        pg, pm, pn, pk = self.splits
        s = f"groups/{pg} rows/{pm} cols/{pn} inner/{pk} on {self.tiles_used} tiles"
        if self.swapped:
            s += ", operands swapped"
        if self.vertex != "1x1":
            s += f", {self.vertex} vertex"
        if self.unit_rows > 1:
            s += f" with {self.group_channels} input channels a group over {self.unit_rows} kernel rows"
        if self.relaid:
            s += f", {self.relaid} operand elements relaid first"
        if self.serial > 1:
            s += f", serialised x{self.serial} over the {dict(N='output', K='input')[self.serial_dim]} channels"
        if self.memory_bound:
            within = "with no bound" if math.isinf(self.memory_bound) else f"within {self.memory_bound:,.0f} B a tile"
            s += f"; no plan within the memory budget (availableMemoryProportion): planned {within}, as poplin does"
        return s


def _reduced_outputs(g, m, n, pk):
    """A tile's share of its block's ``g x m x n`` outputs after the reduction over ``pk`` tiles: what a
    serialised plan's piece writes into the result, or adds into the input-channel pieces' accumulator
    (ConvModel.cpp outputsPerTile; addInPlaceTempBytes is it in the partials' type)."""
    return g * m * n / np.maximum(pk, 1)


def _vertex_conv(conv: ConvShape | None, vertex: str) -> ConvShape | None:
    """The convolution as ``vertex`` runs it: ``expand_w`` has the kernel's width folded into the
    input channels (:meth:`ConvShape.expanded_width`), the others the convolution itself."""
    return conv.expanded_width() if vertex == "expand_w" else conv


def _tile_operands(ipu: IPU, itemsize: int, partials_bytes: int, conv: ConvShape | None, vertex: str, g, m, k, n,
                   pm, pn):
    """(bytes of the A block, bytes of the B block, bytes rearranged before a convolution or None) of a
    tile of a plan (arrays, as :func:`_tile_costs` takes them; ``conv`` as the vertex runs it,
    :func:`_vertex_conv`). An nx1 or 1x1 convolution's tile holds an input patch, the expanded form
    im2col rows. poplin rearranges an expanded input (and its weights) or one whose channels it pads
    over the tiles before the convolution (None: it does not)."""
    mode = amp_mode(ipu, itemsize, partials_bytes)
    # an nx1 or 1x1 convolution receives an input patch; the expanded form receives im2col rows
    patch = conv_input_factor(conv, m) if conv and vertex != "expanded" else 1.0
    a_bytes = g * m * k * itemsize * patch
    b_bytes = g * k * n * itemsize
    expands = vertex in ("expanded", "expand_w")
    pads = vertex != "hmac" and conv is not None and conv.in_channels % mode.in_group  # HMAC: any grouping
    if conv is not None and (expands or pads):
        return a_bytes, b_bytes, a_bytes / pn + (b_bytes / pm if expands else 0)
    return a_bytes, b_bytes, None


def _temp_estimate(a_bytes, b_bytes, moved, outputs, partials_bytes: int):
    """poplin's planning estimate of a tile's temporary bytes (``ConvModel.cpp ::
    addConvTempMemoryEstimate``): its whole input and weight blocks, what is rearranged before the
    op and its partials, counted even where the AMP writes the result itself; the budget bounds it."""
    return a_bytes + b_bytes + moved + outputs * partials_bytes


def _tile_temp(ipu: IPU, itemsize: int, partials_bytes: int, conv: ConvShape | None, vertex: str, g, m, k, n,
               pm, pn, rearranged: float = 0.0, used=1):
    """The ``"temp"`` of :func:`_tile_costs` (same arguments; bytes), without pricing anything."""
    conv = _vertex_conv(conv, vertex)
    a_bytes, b_bytes, moved = _tile_operands(ipu, itemsize, partials_bytes, conv, vertex, g, m, k, n, pm, pn)
    if moved is None:
        moved = 0.0
    if rearranged:
        moved = moved + rearrangement(ipu, rearranged, used, itemsize)[2]
    return _temp_estimate(a_bytes, b_bytes, moved, g * m * n, partials_bytes)


def _tile_costs(ipu: IPU, itemsize: int, partials_bytes: int, b_is_weight: bool, conv: ConvShape | None,
                vertex: str, g, m, k, n, pm, pn, pk, rearranged: float = 0.0, used=1,
                dilated_output: float = 0.0, planned_rearranged: float = 0.0, bound: bool = False):
    """Costs of a tile holding ``g`` groups of ``[m,k] @ [k,n]`` blocks of a plan split
    ``pm x pn x pk`` (arrays: one entry per tile or per candidate plan), run on ``vertex``
    (see :class:`MatmulPlan`), after ``rearranged`` operand elements are rearranged over the
    ``used`` tiles (:func:`rearrangement`) and before ``dilated_output`` result elements are
    copied over them (:func:`deferred_dilation_copy`). ``planned_rearranged`` elements are
    rearranged in poplin's planning estimate only (the ``planner_exchange`` cycles: a copy and its
    exchange at the full rate, :func:`matmul_padding`). Cycles and bytes.

    Every entry is priced on its own (the arrays' entries do not affect each other), so pricing a
    subset of candidates gives each the same costs. With ``bound`` only ``compute`` and
    ``planner_exchange`` are priced, and without the partials' reduction: what it adds to them is
    never negative, so they are then lower bounds of poplin's estimate, used to prune a search."""
    mode = amp_mode(ipu, itemsize, partials_bytes)
    bw, full = ipu.exchange_rate, ipu.exchange_bytes_per_cycle_per_tile  # priced; poplin's planner (ExchangeEstimator)
    conv = _vertex_conv(conv, vertex)
    a_bytes, b_bytes, moved = _tile_operands(ipu, itemsize, partials_bytes, conv, vertex, g, m, k, n, pm, pn)
    a_recv = a_bytes * (1.0 - 1.0 / pn)
    b_recv = b_bytes * (1.0 - 1.0 / pm) if b_is_weight else b_bytes
    shared = np.where(pn % 2 == 0, 2, 1)  # supertile: both tiles take the same input at once
    recv1 = a_recv + b_recv
    operand_phase = np.where(recv1 > 0, 1, 0)  # the operand blocks' exchange (a rearrangement adds its own below)
    exch1 = np.where(recv1 > 0, ipu.exchange_setup_cycles + np.ceil(a_recv / (shared * bw) + b_recv / bw), 0)
    plan1 = np.where(recv1 > 0, np.ceil(a_recv / (shared * full) + b_recv / full), 0)
    if vertex in ("nx1", "expand_w"):
        amp, launch = nx1_vertex_cycles(ipu, mode, conv, g, m, k, n)
    elif vertex == "hmac":
        amp, launch = hmac_vertex_cycles(g, m, k, n, itemsize, ipu.worker_threads, partials_bytes)
    elif mode.float_activations:
        amp, launch = amp_fp32_vertex_cycles(mode, g, m, k, n, ipu.worker_threads, ipu.conv_unit_load_bits)
    elif mode.quarter:
        amp, launch = amp_quarter_vertex_cycles(mode, g, m, k, n, ipu.worker_threads, ipu.conv_unit_load_bits)
    else:
        amp = amp_vertex_cycles(ipu, mode, g, m, k, n)
        launch = np.where(amp > 0, ipu.amp_vertex_overhead_cycles
                          + _channel_group_pairs(mode, g, k, n) * amp_pair_cycles(ipu, mode), 0)
    kernel = amp  # the vertex's compute set alone, before the casts and copies added to it below
    if mode.cast_from_quarter:  # the tile's FP8 input patch and weights cast to fp16 for the vertex
        cast_in = quarter_cast_cycles(a_bytes / itemsize) + quarter_cast_cycles(b_bytes / itemsize)
        amp = amp + cast_in
        launch = launch + np.where(cast_in > 0, 2 * _quarter_table()["cast_worker_fixed"] * ipu.worker_threads, 0)
    # poplin rearranges an expanded input (and its weights) or one whose channels it pads, over
    # the tiles, before the convolution: an exchange phase and a copy compute set
    if moved is not None:
        copy = codelet("copy").fixed
        rearrange = np.ceil(moved / itemsize * rearrange_cycles_per_element(conv, itemsize))
        exch1 = exch1 + ipu.exchange_setup_cycles + np.ceil(moved / bw)
        plan1 = plan1 + np.ceil(moved / full)
        recv1 = recv1 + moved
        amp, launch = amp + copy + rearrange, launch + copy
        extra_sets = 1
    else:
        moved, extra_sets = 0.0, 0
    if rearranged:
        r_exch, r_copy, r_bytes = rearrangement(ipu, rearranged, used, itemsize)
        copy = codelet("copy").fixed
        exch1 = exch1 + r_exch
        plan1 = plan1 + np.ceil(r_bytes / full)
        recv1 = recv1 + r_bytes
        amp, launch = amp + copy + r_copy, launch + copy
        moved = moved + r_bytes
        extra_sets = extra_sets + 1
    if planned_rearranged:
        plan1 = plan1 + planned_rearrangement(ipu, planned_rearranged, used, itemsize)
    if dilated_output:
        post = deferred_dilation_copy(dilated_output, used, itemsize)
        amp, launch = amp + post, launch + codelet("copy").fixed
        extra_sets = extra_sets + 1
    outputs = g * m * n
    out_bytes = max(itemsize, 2)  # an FP8 matmul's result is fp16 (GraphBuilder.matmul)
    cast_codelet = codelet("cast")
    cast_fixed = cast_codelet.fixed
    needs_cast = (partials_bytes > out_bytes) & (np.asarray(pk) <= 1)
    cast = np.where(needs_cast, cast_fixed + np.ceil(outputs * cast_codelet.fp16), 0)
    if bound:
        return {"compute": amp + cast, "planner_exchange": plan1}
    out_group = hmac_out_group(partials_bytes) if vertex == "hmac" else mode.out_group
    red_exch, red, red_stages, recv2, red_fixed, red_plan = partials_reduction(
        ipu, outputs, pk, partials_bytes, out_bytes, out_group, planner_exchange=True)
    # partials need their own buffer unless the AMP writes the result itself (nothing to reduce,
    # partials of the result's type); that result is a live activation, counted as such
    separate = (np.asarray(pk) > 1) | (partials_bytes > out_bytes)
    exch_phases = operand_phase + red_stages + extra_sets
    compute_sets = 1 + red_stages + needs_cast + extra_sets
    partials = np.where(separate, outputs * partials_bytes, 0)
    # the result, counted live over the op by the memory walk, is written only after the partials (by the
    # last reduction or the cast), when the exchanged operand blocks are dead: Poplar's liveness starts a
    # variable at its first write, so the tile's share of it does not sit beside the blocks
    result_first = np.where(separate, outputs * out_bytes / np.maximum(pk, 1), 0)
    # "temp" is poplin's planning estimate (ConvModel.cpp :: addConvTempMemoryEstimate: the tile's
    # whole input and weight blocks plus its partials, counted even where the AMP writes the result
    # itself), which the budget bounds; "held" is what the
    # tile allocates: the part of its blocks the exchange brings (the rest is already resident, as
    # the estimator's exchange assumes) beside its partials, then the partials it receives to reduce
    # beside its share of the result (less that share, which the walk counts as the op's output)
    return {"exchange": exch1 + red_exch, "planner_exchange": plan1 + red_plan, "compute": amp + red + cast,
            "launch": launch + red_fixed + np.where(needs_cast, cast_fixed, 0), "kernel": kernel,
            "exchange_phases": exch_phases, "compute_sets": compute_sets, "reduction_stages": red_stages,
            "recv": recv1 + recv2,
            "temp": _temp_estimate(a_bytes, b_bytes, moved, outputs, partials_bytes),
            "held": partials + np.maximum(np.maximum(recv1 - result_first, recv2), 0)}


@lru_cache(maxsize=1024)
def _candidates(dim: int, tiles: int, grain: int = 0) -> np.ndarray:
    """Split counts worth trying for a dimension: every count up to 16, powers of 2, 3 x powers
    of 2, the divisors of the tile count (1472 = 64 x 23 on Mk2), and ``dim`` itself. With a
    ``grain`` (channels split in whole groups, as poplin splits them), also the fewest tiles that
    leave each tile ``q`` groups, ``ceil(groups / q)`` for ``q`` up to 64: poplin's planner tries
    every split, and these are the ones at which a tile's group count changes. Cached by its three
    arguments, all it reads (the array is read only)."""
    top = min(dim, tiles)
    vals = {top, *range(1, min(top, 16) + 1)}
    if grain:
        groups = -(-dim // grain)
        vals.update(s for s in (-(-groups // q) for q in range(1, 65)) if s <= top)
    p = 1
    while p <= top:
        vals.add(p)
        if 3 * p <= top:
            vals.add(3 * p)
        p *= 2
    vals.update(d for d in _divisors(tiles) if d <= top)
    out = np.array(sorted(vals), dtype=np.int64)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=1024)
def _grain_candidates(dim: int, grain: int, tiles: int) -> np.ndarray:
    """Split counts of ``dim`` channels split in whole grains of ``grain`` over tiles, as poplin's
    planner splits a convolution's channels (``ConvModel.cpp :: constructModel``, 8dcde1ec:
    ``outChanSplit.parallel`` / ``inChanSplit.parallel`` are popsolver variables from 1 to the tiles,
    at most the grains, ``numOutChanGrains`` / ``numInChanGrains``, each tile ``ceil(grains / split)``
    of them, ``ceildivConstrainDivisor``). Not every count: the fewest splits leaving a tile each
    count of grains (:func:`fewest_splits`), each odd one's next count too where that leaves the same
    grains (an even output-channel split broadcasts the input to both tiles of a supertile at once:
    ``ExchangeEstimator.hpp``, ``outChanSplit % tilesPerSuperTile``), and of the usual counts
    (:func:`_candidates`) those poplin can make, at most the grains. Cached (read only)."""
    groups = max(1, -(-dim // grain))
    top = min(groups, tiles)
    change = fewest_splits(groups, top)
    share = -(-groups // change)
    odd = (change % 2 == 1) & (change < top)
    partner = change[odd] + 1
    partner = partner[-(-groups // partner) == share[odd]]
    usual = _candidates(groups, tiles)
    vals = np.union1d(np.union1d(change, partner), usual[usual <= top]).astype(np.int64)
    vals.setflags(write=False)
    return vals


@lru_cache(maxsize=1024)
def _conv_reduction_candidates(channels: int, kernel_rows: int, in_group: int, tiles: int) -> np.ndarray:
    """Counts of tiles a convolution's reduction is split over, as poplin splits it: the input channels
    in whole grains (:func:`_grain_candidates`: ``inChanSplit.parallel``) times the kernel's outer
    dimension (``kernelSplit``, at most its size: "the implementation doesn't support splitting the
    inner-most kernel dimension"), at most the tiles (:func:`conv_inner_block` takes each count's best
    such factorisation). Cached (read only)."""
    c = _grain_candidates(channels, in_group, tiles)
    d = np.arange(1, min(kernel_rows, tiles) + 1, dtype=np.int64)
    p = np.unique((c[:, None] * d[None, :]).ravel())
    p = p[p <= tiles]
    p.setflags(write=False)
    return p


@lru_cache(maxsize=16)
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def plan_matmul(G: int, M: int, K: int, N: int, itemsize: int, b_is_weight: bool, ipu: IPU,
                tiles: int, memory_proportion: float, conv: ConvShape | None = None,
                partials_bytes: int = 4, rearranged: int = 0, dilated_output: int = 0,
                grain_splits: bool = False, mismatch: bool = False, pads_channels: bool = True,
                channel_grains: bool = False) -> MatmulPlan:
    """Best plan for ``G x [M,K] @ [K,N]`` with operands of ``itemsize`` bytes and partial sums
    of ``partials_bytes`` (4: fp32, PopTorch's default; 2: ``Precision.setPartialsType(half)``).

    ``conv`` marks a convolution lowered to a matmul (M = output positions, K = input channels x
    kernel^2). A 1x1 kernel runs the 1x1 vertex on an input patch; a larger one is planned both
    ways poplin can run it and the faster is kept: the nx1 vertex on an input patch (a loop over
    kernel positions, a worklist entry per output row), or the kernel folded into the input
    channels (poplin's expandDims: im2col rows exchanged, then the 1x1 vertex), which pays for
    few input channels such as an RGB stem.

    ``rearranged`` operand elements (all pieces) are first rearranged over the plan's tiles, as
    poplin does for a weight-update pass (:func:`rearrangement`); ``dilated_output`` result
    elements (all pieces) are copied over them afterwards, as poplin does when it defers an input
    dilation until after the convolution (:func:`deferred_dilation_copy`).

    If no plan, serialised or not, fits the budget, poplin plans again within twice the budget, and so on
    (:func:`memory_bounds`; ``fits`` False, ``memory_bound`` the bound it fits): the budget is a target,
    and tile memory is checked later.

    ``grain_splits`` also tries the splits of K and N at which a tile's count of input- or
    output-channel groups changes (:func:`_candidates`; used for poplin's plain matmul,
    sim/cost/matmul_swap.py). ``channel_grains`` (implied by ``conv``; a convolution's weight-update
    pass sets it) splits N and K as poplin splits a convolution's channels: in whole grains of the
    vertex's output- and input-channel groups, each tile ``ceil(grains / split)`` of them, every split
    at which that count changes tried (:func:`_grain_candidates`, :func:`_conv_reduction_candidates`).

    A pass is serialised as poplin serialises a convolution, along its output channels N or its input
    channels K: :func:`_fastest_within`.

    A matmul (``conv`` None, ``pads_channels``) whose channels are short of the vertex's groups also
    rearranges its padded operands (:func:`matmul_padding`; ``rearranged`` is then a weight-update
    pass's operands; a convolution's weight-update pass, which rearranges both its operands anyway,
    passes ``pads_channels`` False); ``mismatch`` marks a fully connected or plain matmul pass
    planned unswapped, which poplin's planner charges a rearrangement of every operand
    (:func:`swap_or_not`).
    """
    partials_bytes = max(partials_bytes, itemsize)  # fp32 operands always have fp32 partials
    plan = _plan(G, M, K, N, itemsize, b_is_weight, ipu, tiles, memory_proportion, conv, partials_bytes,
                 rearranged, dilated_output, grain_splits, mismatch, pads_channels, channel_grains)
    fixed = pass_fixed_cycles()  # the same for every candidate, so it does not change the choice
    return _plan_plus(plan, ipu, compute=fixed, launch=fixed, pass_fixed=fixed)


def memory_bounds(budget: float, ipu: IPU) -> list[float]:
    """The temporary-memory bounds (bytes per tile) poplin plans within, in turn, until a plan fits
    (ConvPlan.cpp runPlanner, poplibs e24ed811, SDK 1.3 on): the ``budget`` (availableMemoryProportion x
    the tile's bytes), then, if no plan fits it, the fastest plan within twice the bound, doubled again
    while the last bound tried is under twice the tile's bytes, and at last the fastest with no bound
    (``math.inf``). Before SDK 1.3 poplin fell back to the plan of least temporary memory instead."""
    bounds, bound = [budget], budget
    while bound < 2 * ipu.sram_bytes_per_tile:
        bound *= 2
        bounds.append(bound)
    return bounds + [math.inf]


def rank(plan: MatmulPlan) -> tuple[float, int]:
    """How poplin orders a pass's candidate plans (vertex types, operands swapped or not): those within
    the budget, then those within the least of :func:`memory_bounds`; then the lowest planning estimate."""
    return plan.memory_bound, plan.estimate


def _plan(G, M, K, N, itemsize, b_is_weight, ipu: IPU, tiles, memory_proportion, conv, partials_bytes,
          rearranged, dilated_output=0, grain_splits=False, mismatch=False, pads_channels=True,
          channel_grains=False) -> MatmulPlan:
    """The fastest plan (:func:`plan_matmul`) within the first of :func:`memory_bounds` any plan fits
    (``fits`` only within the budget itself, ``memory_bound`` the bound otherwise)."""
    budget = memory_proportion * ipu.sram_bytes_per_tile
    for bound in memory_bounds(budget, ipu):
        plan = _fastest_within(G, M, K, N, itemsize, b_is_weight, ipu, tiles, bound, conv, partials_bytes,
                               rearranged, dilated_output, grain_splits, mismatch, pads_channels, channel_grains)
        if plan is not None:
            return plan if bound == budget else replace(plan, fits=False, memory_bound=bound)
    raise AssertionError("a plan with no memory bound always fits")


def _fastest_within(G, M, K, N, itemsize, b_is_weight, ipu: IPU, tiles, budget, conv, partials_bytes,
                    rearranged, dilated_output, grain_splits, mismatch, pads_channels, channel_grains
                    ) -> MatmulPlan | None:
    """The fastest plan whose temporary bytes per tile fit ``budget``, serialised or not; None if none."""
    mode = amp_mode(ipu, itemsize, partials_bytes)
    best = None
    for serial in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        # like poplin's serial splits, a serial plan competes on cycles with the others that fit, so within
        # one bound a smaller one is never faster. poplin serialises channels only, one kind at a time, each at
        # most the channels' grains (ConvModel.cpp constructModel: outChanSplit.serial or
        # inChanSplit.serial; never the field): a pass is cut along N (its output channels) or K (its
        # input channels; a convolution's piece is then a convolution of fewer input channels)
        cuts = _serial_cuts(M, K, N, conv, mode, serial)
        if not cuts:
            break
        plan = min((_search(G, Mp, Kp, Np, itemsize, partials_bytes, b_is_weight, ipu, tiles, budget, piece,
                            serial, math.ceil(rearranged / serial), math.ceil(dilated_output / serial),
                            grain_splits, serial_dim=dim, mismatch=mismatch, pads_channels=pads_channels,
                            channel_grains=channel_grains)
                    for dim, Mp, Kp, Np, piece in cuts),
                   key=lambda p: (not p.fits, p.estimate if p.fits else p.temp_bytes_per_tile))
        if plan.fits:
            if best is not None and plan.estimate >= best.estimate:
                break  # more pieces only add per-piece costs from here
            best = plan
    return best


def _serial_cuts(M: int, K: int, N: int, conv: ConvShape | None, mode: AmpMode, serial: int) -> list[tuple]:
    """(dimension cut, M, K, N of a piece, the piece's convolution) of each way poplin cuts a pass into
    ``serial`` pieces (:func:`_fastest_within`): along N while ``serial`` is at most the output channels'
    groups, along K while at most the input channels' groups (``serial`` 1: the pass whole). A
    convolution's K piece holds whole groups of its input channels, ``ceil(groups / serial)`` of them."""
    if serial == 1:
        return [("N", M, K, N, conv)]
    cuts = []
    if serial <= math.ceil(N / mode.out_group):
        cuts.append(("N", M, K, math.ceil(N / serial), conv))
    if conv is None:
        if serial <= math.ceil(K / mode.in_group):
            cuts.append(("K", M, math.ceil(K / serial), N, None))
    elif serial <= math.ceil(conv.in_channels / mode.in_group):
        channels = min(conv.in_channels, math.ceil(math.ceil(conv.in_channels / mode.in_group) / serial)
                       * mode.in_group)
        piece = replace(conv, in_channels=channels)
        cuts.append(("K", M, channels * conv.kernel_positions, N, piece))
    return cuts


def writes_fp16_result(ipu: IPU, itemsize: int, partials_bytes: int, in_channels: int, in_group: int) -> bool:
    """Whether poplin offers a 1x1 pass of fp16 operands planned with fp32 partials the AMP writing its fp16
    result itself on all its conv units (ConvVertexType.cpp getConvVertexAMPCandidates: "The vertex output
    type can be smaller than the partial type if no reduction is required afterwards", poplibs 9235f683): its
    ``in_channels``, rounded up to the ``in_group`` they are grouped in, are one conv unit's weights, so
    nothing is reduced across tiles."""
    return itemsize == 2 and partials_bytes == 4 and -(-in_channels // in_group) * in_group == ipu.amp_fp16_input_group


def plan_rows_folded(plan: MatmulPlan, conv: ConvShape, G: int, M: int, N: int, itemsize: int, ipu: IPU,
                     tiles: int, memory_proportion: float, partials_bytes: int, rearranged: int = 0
                     ) -> tuple[MatmulPlan, ConvShape]:
    """(plan, the convolution as it runs) of a forward convolution pass ``G x [M, in_channels x kh x kw] @
    [., N]`` whose input channels do not fill the AMP's input-channel group: ``plan`` (the pass planned
    with whole groups, its channels padded or its kernel expanded) or, where poplin's estimate of it is
    lower, the nx1 vertex with fewer input channels a group, each conv unit's weights spanning 2 or 4
    kernel rows (:meth:`ConvShape.rows_folded`; ``getConvVertexAMPCandidates`` tries every input-channel
    grouping the conv units' weights divide into whole 64-bit loads). fp16 and fp32 operands."""
    mode = amp_mode(ipu, itemsize, partials_bytes)
    if itemsize not in (2, 4) or conv.kernel_h < 2 or conv.in_channels % mode.in_group == 0:
        return plan, conv
    best, best_conv = plan, conv
    for unit_rows in (2, 4):
        group = mode.in_group // unit_rows
        if mode.in_group % unit_rows or group * itemsize % 8:  # whole 64-bit loads of a group's channels
            continue
        folded = conv.rows_folded(unit_rows, group, mode.in_group)
        candidate = plan_matmul(G, M, folded.in_channels * folded.kernel_positions, N, itemsize, True, ipu, tiles,
                                memory_proportion, conv=folded, partials_bytes=partials_bytes, rearranged=rearranged)
        if rank(candidate) < rank(best):
            best, best_conv = replace(candidate, unit_rows=unit_rows, group_channels=group), folded
    return best, best_conv


def _search(G, M, K, N, itemsize, partials_bytes, b_is_weight, ipu: IPU, tiles, budget,
            conv: ConvShape | None, serial, rearranged=0, dilated_output=0, grain_splits=False,
            serial_dim="", mismatch=False, pads_channels=True, channel_grains=False) -> MatmulPlan:
    channel_grains = channel_grains or conv is not None  # a convolution's channels split in whole grains
    if conv is not None and conv.kernel_positions == 1 and conv.stride > 1:
        # poplin's 1x1 vertex needs the field flattened, which a strided dimension cannot be
        # (ConvModel.cpp canUse1x1Vertex, dimCanBeFlattened): it expands the strided dimensions
        # (the subsampled input rearranged over the tiles, then the 1x1 vertex) or runs the nx1
        # vertex on the strided field
        vertices = ("nx1", "expanded")
    elif conv is None or conv.kernel_positions == 1:
        # poplin also tries the HMAC vertex (getConvVertexHMACCandidates), which takes any channel count:
        # it beats the AMP on tiny tiles and where the AMP would pad
        vertices = ("1x1",) + (("hmac",) if itemsize in (2, 4) else ())
    else:
        vertices = ("nx1",) if not conv.expandable else \
            ("nx1", "expanded") + (("expand_w",) if conv.kernel_h > 1 and conv.kernel_w > 1 else ())
    candidates = [(vertex, partials_bytes) for vertex in vertices]
    if "1x1" in vertices and writes_fp16_result(ipu, itemsize, partials_bytes, K, ipu.amp_fp16_input_group):
        # with at most one input-channel group and a 1x1 kernel nothing is reduced across tiles, so
        # poplin also tries the AMP writing fp16 partials, the result itself, on all its conv units
        candidates.append(("1x1", 2))
    plans = []
    for vertex, partials in candidates:
        planned_only = 0
        moved = rearranged
        if conv is None and pads_channels:  # a matmul pass: its padded operands, and poplin's charge if unswapped
            mode = amp_mode(ipu, itemsize, partials)
            groups = (1, hmac_out_group(partials)) if vertex == "hmac" else (mode.in_group, partial_channel_group(mode))
            # only a weight-update pass rearranges a matmul's operands before it runs
            padded, planned_only = matmul_padding(*groups, G, M, K, N, bool(rearranged), mismatch)
            moved = rearranged + padded
        plans.append(_search_vertex(G, M, K, N, itemsize, partials, b_is_weight, ipu, tiles, budget, conv,
                                    serial, vertex, moved, dilated_output, grain_splits, serial_dim, planned_only,
                                    inner_split=partials == partials_bytes, channel_grains=channel_grains))
    # a plan that fits beats one that does not; then the fastest, then the first listed
    return min(plans, key=lambda p: (not p.fits, p.estimate if p.fits else p.temp_bytes_per_tile))


def _tile_total(c: dict, ipu: IPU):
    """Cycles of a :func:`_tile_costs` result on its busiest tile: exchange, compute and a sync
    before every exchange phase and compute set."""
    return c["exchange"] + c["compute"] + (c["exchange_phases"] + c["compute_sets"]) * ipu.internal_sync_cycles


def _tile_planned(c: dict):
    """poplin's planning estimate of a :func:`_tile_costs` result: compute and the exchange at the
    Target's full rate, with no set-ups and no syncs (module docstring)."""
    return c["compute"] + c["planner_exchange"]


@lru_cache(maxsize=1024)
def _search_vertex(G, M, K, N, itemsize, partials_bytes, b_is_weight, ipu: IPU, tiles, budget,
                   conv: ConvShape | None, serial, vertex, rearranged=0, dilated_output=0,
                   grain_splits=False, serial_dim="", planned_rearranged=0, inner_split=True,
                   channel_grains=False) -> MatmulPlan:
    """The best plan of one vertex (:func:`_search`); ``inner_split`` False: K is not split over tiles.

    Of the candidates whose temporary bytes fit the ``budget``, the fastest by poplin's estimate, ties
    broken by fewer tiles, then by less memory, then by the splits; if none fits, the least memory,
    ties broken by the splits. Only the candidates that may be the fastest are priced in full
    (:meth:`_Candidates.fastest`), and the chosen one's costs. Cached: the passes of a layer plan
    some of the same matmuls more than once (a pure function of hashable arguments; the plan is
    frozen)."""
    cands = _vertex_candidates(G, M, K, N, itemsize, partials_bytes, b_is_weight, ipu, tiles, conv, serial, vertex,
                               rearranged, dilated_output, grain_splits, serial_dim, planned_rearranged, inner_split,
                               channel_grains)
    temp, used, split_order = cands.temp, cands.used, cands.split_order
    fits = temp <= budget
    if fits.any():
        fastest = cands.fastest(np.flatnonzero(fits))
        pool = fastest.at
        i = int(pool[np.lexsort((split_order[pool], temp[pool], used[pool]))[0]])
        chosen = fastest.take(np.flatnonzero(pool == i))
    else:  # the least memory, then the least splits: the first of a lexsort by (temp, split_order), in one pass
        least = np.flatnonzero(temp == temp.min())
        i = int(least[np.argmin(split_order[least])])
        chosen = cands.estimates(np.array([i]))
    c, total = (chosen.costs, chosen.total) if chosen.costs is not None else cands.costs(chosen.at)
    planned = chosen.planned[0]
    return MatmulPlan(
        splits=(int(cands.pg[i]), int(cands.pm[i]), int(cands.pn[i]), int(cands.pk[i])),
        dims=(G, M, K, N),
        serial=serial,
        tiles_used=int(used[i]),
        exchange_cycles=int(c["exchange"][0]) * serial,
        compute_cycles=int(c["compute"][0]) * serial,
        supersteps=int(c["compute_sets"][0]) * serial,
        sync_points=int(c["exchange_phases"][0] + c["compute_sets"][0]) * serial,
        exchange_bytes=int(c["recv"][0] * used[i]) * serial,
        temp_bytes_per_tile=int(temp[i]),
        fits=bool(fits[i]),
        total_cycles=int(total[0]) * serial,
        planned_cycles=int(planned) * serial,
        launch_cycles=int(c["launch"][0]) * serial,
        kernel_cycles=int(np.atleast_1d(c["kernel"])[0]),
        exchange_phases=int(c["exchange_phases"][0]) * serial,
        reduction_stages=int(np.atleast_1d(c["reduction_stages"])[0]),
        partials_bytes=partials_bytes,
        rearranged=int(rearranged),
        dilated_output=int(dilated_output),
        vertex=vertex,
        channel_grains=channel_grains,
        serial_dim=serial_dim if serial > 1 else "",
    )


@dataclass(frozen=True, eq=False)
class _Candidates:
    """Every candidate split of one vertex's plan (:func:`_vertex_candidates`): the splits ``pg, pm,
    pn, pk``, the tiles used, the tie-break order, the busiest tile's block ``g, m, k, n`` of each and
    poplin's estimate of its temporary bytes (``temp``, bytes: what the budget bounds), arrays, read
    only; and what pricing them needs (the plan's dimensions and options, ``tile_conv`` the
    convolution as a tile of each holds it: its ``width`` an array, one row width per candidate, where
    the field's dimensions are split apart)."""

    G: int
    M: int
    K: int
    N: int
    itemsize: int
    partials_bytes: int
    b_is_weight: bool
    ipu: IPU
    serial: int
    vertex: str
    rearranged: float
    dilated_output: float
    serial_dim: str
    planned_rearranged: float
    pg: np.ndarray
    pm: np.ndarray
    pn: np.ndarray
    pk: np.ndarray
    used: np.ndarray
    split_order: np.ndarray
    g: np.ndarray
    m: np.ndarray
    k: np.ndarray
    n: np.ndarray
    tile_conv: ConvShape | None
    temp: np.ndarray

    def costs(self, at: np.ndarray, conv: ConvShape | None = None, bound: bool = False) -> tuple[dict, np.ndarray]:
        """(:func:`_tile_costs` arrays, cycles on the busiest tile: :func:`_tile_total`) of the
        candidates ``at`` (indices), a piece of a serialised plan included, on ``conv`` (default
        ``tile_conv``); with ``bound``, (lower bounds of the planning estimate's two parts, None):
        :func:`_tile_costs`'s, a serialised plan's slices and adds left out too (never negative)."""
        ipu, itemsize, partials_bytes = self.ipu, self.itemsize, self.partials_bytes
        G, M, K, N = self.G, self.M, self.K, self.N
        g, m, k, n, pm, pn, pk, used = (a[at] for a in (self.g, self.m, self.k, self.n, self.pm, self.pn, self.pk,
                                                        self.used))
        conv = self.tile_conv if conv is None else conv
        if conv is not None and isinstance(conv.width, np.ndarray):  # each candidate's row width
            conv = replace(conv, width=conv.width[at])
        c = _tile_costs(ipu, itemsize, partials_bytes, self.b_is_weight, conv, self.vertex, g, m, k, n, pm, pn, pk,
                        self.rearranged, used, self.dilated_output, self.planned_rearranged, bound)
        if bound:
            return c, None
        if self.serial > 1:
            # poplin cuts a serialised convolution's operands into pieces by a counted loop: each piece
            # dynamically slices its part of the operand it cuts, each tile its own share of the
            # tensor before any broadcast (ConvModel.cpp addDynamicSliceEstimate of inputsPerTile /
            # weightsPerTile: the tensor over the used tiles; Convolution.cpp dynamicSliceWithOutput),
            # and the plan's exchange then brings the blocks. Along the output channels N (poplin's
            # outChanSplit.serial) B's piece is sliced and the piece's outputs written into the
            # result (addDynamicUpdateEstimate of outputsPerTile); along the input channels K
            # (inChanSplit.serial) both operands' pieces, and the piece's partial sums are added into an
            # accumulator of the tile's outputs (addInPlaceEstimate: a BinaryOp1D ADD in the partials'
            # type) that stays live beside the blocks (addInPlaceTempBytes). A convolution's input piece
            # is its field (output positions x stride^2, fewer if dilated) times the piece's channels
            workers, outputs = ipu.worker_threads, _reduced_outputs(g, m, n, pk)
            inputs = G * M * K if conv is None else \
                max(1, G * M * conv.in_channels * conv.stride ** 2 // conv.dilation ** 2)
            pieces = {"N": (G * K * N,), "K": (inputs, G * K * N)}[self.serial_dim]
            for elements in pieces:
                c["compute"] = c["compute"] + dynamic_slice_tile_cycles(np.ceil(elements / used), itemsize, workers)
                c["launch"] = c["launch"] + dynamic_slice_tile_cycles(0, itemsize, workers)
            if self.serial_dim == "K":
                add = codelet("add")
                c["compute"] = c["compute"] + add.fixed + np.ceil(outputs * add.per_element(partials_bytes))
                c["launch"] = c["launch"] + add.fixed
                c["temp"] = c["temp"] + outputs * partials_bytes
                c["held"] = c["held"] + outputs * partials_bytes
            else:
                out_bytes = max(itemsize, 2)
                c["compute"] = c["compute"] + dynamic_slice_tile_cycles(np.ceil(outputs), out_bytes, workers)
                c["launch"] = c["launch"] + dynamic_slice_tile_cycles(0, out_bytes, workers)
            # and the loop's counter is incremented, a one-element addInPlace on one tile (Convolution.cpp
            # cpt.loopPost), a compute set every tile waits for
            counter = codelet("add").fixed
            c["compute"] = c["compute"] + counter
            c["launch"] = c["launch"] + counter
            c["compute_sets"] = c["compute_sets"] + len(pieces) + 2
        return c, _tile_total(c, ipu)

    def planning_conv(self) -> ConvShape | None:
        """The convolution as poplin's planner sees a tile of it: ``tile_conv``, but that the planner
        estimates every kernel position over the whole tile output (padding_coverage) of an
        undilated nx1 convolution with padding; an input dilation it does see
        (PerformanceEstimation.hpp getConvPartialnx1InnerLoopCycleEstimate: partitionConvPartialByWorker
        with the inputDilation, ceil(width / outStrideX) per row), so a dilated convolution is
        planned on its hits."""
        conv = self.tile_conv
        if self.vertex in ("nx1", "expand_w") and (conv.row_hits or conv.col_hits) and conv.dilation == 1:
            return replace(conv, row_hits=(), col_hits=())
        return conv

    def estimates(self, at: np.ndarray, bound: bool = False) -> _Priced:
        """The candidates ``at`` priced as poplin's planner prices them (:func:`_tile_planned`: at the
        Target's full exchange rate, ExchangeEstimator's getExchangeBytesPerCycle, not at the fitted
        efficiency the costs run at; with ``bound``, a lower bound of it, :meth:`costs`), with their
        costs when those are the ones the plan runs (no padding the planner does not see)."""
        conv = self.planning_conv()
        c, total = self.costs(at, conv, bound)
        if conv is self.tile_conv and not bound:
            return _Priced(at, _tile_planned(c), c, total)
        return _Priced(at, _tile_planned(c), None, None)

    def fastest(self, pool: np.ndarray, first: int = 512) -> _Priced:
        """The candidates of ``pool`` (increasing indices) whose planning estimate is the least of the
        pool, priced, in increasing order of index. Of a pool of more than ``first``, only those that
        may be the fastest are priced in full: each one's estimate has a cheaper lower bound
        (:meth:`costs`), so once the ``first`` candidates of least bound are priced, only the others
        whose bound is at most the least estimate found can be among the fastest."""
        if len(pool) <= first:  # bounding them would cost about as much as pricing them
            priced = self.estimates(pool)
        else:
            bound = self.estimates(pool, bound=True).planned
            near = bound <= np.partition(bound, first - 1)[first - 1]
            priced = self.estimates(pool[near])
            rest = ~near & (bound <= priced.planned.min())
            if rest.any():
                priced = _Priced.joined(priced, self.estimates(pool[rest]))
        least = np.flatnonzero(priced.planned == priced.planned.min())
        return priced.take(least[np.argsort(priced.at[least])])


@dataclass(frozen=True)
class _Priced:
    """Candidates ``at`` (indices of a :class:`_Candidates`) priced: poplin's planning estimate of
    each and, when the plan runs those same costs, the :func:`_tile_costs` arrays (a piece of a
    serialised plan included) and the cycles on the busiest tile (else None)."""

    at: np.ndarray
    planned: np.ndarray
    costs: dict | None
    total: np.ndarray | None

    def take(self, rows: np.ndarray) -> _Priced:
        """The candidates at positions ``rows`` (an integer array) of this one."""
        costs = None if self.costs is None else {
            key: np.broadcast_to(v, self.at.shape)[rows] for key, v in self.costs.items()}
        return _Priced(self.at[rows], self.planned[rows], costs, None if self.total is None else self.total[rows])

    @staticmethod
    def joined(a: _Priced, b: _Priced) -> _Priced:
        """The candidates of ``a`` then those of ``b``."""
        costs = None if a.costs is None else {
            key: np.concatenate([np.broadcast_to(a.costs[key], a.at.shape), np.broadcast_to(v, b.at.shape)])
            for key, v in b.costs.items()}
        return _Priced(np.concatenate([a.at, b.at]), np.concatenate([a.planned, b.planned]), costs,
                       None if a.total is None else np.concatenate([a.total, b.total]))


@lru_cache(maxsize=128)
def _vertex_candidates(G, M, K, N, itemsize, partials_bytes, b_is_weight, ipu: IPU, tiles, conv: ConvShape | None,
                       serial, vertex, rearranged, dilated_output, grain_splits, serial_dim, planned_rearranged,
                       inner_split, channel_grains=False) -> _Candidates:
    """Every candidate split of one vertex's plan (:func:`_search_vertex`) with its temporary bytes,
    whatever the memory budget (cached: a sweep of availableMemoryProportion enumerates each candidate
    set once). Read only."""
    mode = amp_mode(ipu, itemsize, partials_bytes)
    cand_g, cand_m = _candidates(G, tiles), _candidates(M, tiles)
    # a convolution pass (or a convolution's weight update, ``channel_grains``) splits its output and input
    # channels in whole grains, as poplin's constructModel does: the output channels in the vertex's
    # partial-channel groups (ConvVertexType.cpp: the AMP's partialChansPerGroup, its conv units;
    # HMAC's, one or two), the input channels in its input-channel groups (the AMP's inChansPerGroup;
    # HMAC takes any grouping, its splits left free) times the kernel's outer dimension
    out_grain = out_channel_grain(vertex, mode) if channel_grains else 0
    in_grain = mode.in_group if channel_grains and vertex != "hmac" else 0
    if out_grain:
        cand_n = _grain_candidates(N, out_grain, tiles)
    else:
        cand_n = _candidates(N, tiles, mode.out_group if grain_splits else 0)
    if not inner_split:
        cand_k = np.array([1])
    elif in_grain and conv is not None:
        cand_k = _conv_reduction_candidates(*_reduction_channels(conv, vertex, K)[:2], in_grain, tiles)
    elif in_grain:
        cand_k = _grain_candidates(K, in_grain, tiles)
    else:
        cand_k = _candidates(K, tiles, mode.in_group if grain_splits else 0)

    def room_left(a, b, c):
        """Every combination of three splits' candidates, and the most tiles left for the fourth."""
        a, b, c = (x.ravel() for x in np.meshgrid(a, b, c, indexing="ij"))
        room = tiles // (a * b * c)
        keep = room >= 1
        return a[keep], b[keep], c[keep], room[keep]
    g3, n3, k3, room = room_left(cand_g, cand_n, cand_k)
    row, col = np.nonzero(cand_m[None, :] <= room[:, None])  # every candidate split that fits the tiles
    parts = [(g3[row], cand_m[col], n3[row], k3[row])]
    # also the splits that fill the tiles the other splits leave (those not already candidates)
    if grain_splits or channel_grains:  # (a convolution's passes split their channels in grains)
        # of M; a convolution's field split takes any value (ConvModel.cpp constructModel: fieldSplit
        # and batchSplit are popsolver variables from 1 to the tiles)
        fill = np.minimum(room, M)
        new = ~np.isin(fill, cand_m)
        parts.append((g3[new], fill[new], n3[new], k3[new]))
    if grain_splits:  # and of N
        g3, m3, k3, room = room_left(cand_g, cand_m, cand_k)
        fill = np.minimum(room, N)
        new = ~np.isin(fill, cand_n)
        parts.append((g3[new], m3[new], fill[new], k3[new]))
    pg, pm, pn, pk = (np.concatenate(a) for a in zip(*parts))
    used = pg * pm * pn * pk
    # ties between plans are broken by the splits, (groups, rows, columns, inner) in order
    split_order = ((pg * (tiles + 1) + pm) * (tiles + 1) + pn) * (tiles + 1) + pk
    g = -(-G // pg)
    m = -(-M // pm)
    # a tile's output channels: whole grains (``ceil(grains / split)`` of them), at most the channels
    n = grain_share(N, out_grain, pn) if out_grain else -(-N // pn)
    if vertex == "hmac":  # one group of channels a tile, padded to the grain (hmac_in_group)
        k = hmac_in_group(K, pk, itemsize)
    elif conv is not None:  # the reduction split as poplin splits it (conv_inner_block)
        k = conv_inner_block(conv, vertex, K, pk, mode.in_group)
    elif in_grain:  # whole grains, ``ceil(grains / split)`` of them, at most the channels
        k = grain_share(K, in_grain, pk)
    else:
        k = -(-K // pk)
    tile_conv = conv
    if vertex in ("nx1", "expand_w") and conv.batch and conv.height and M == conv.batch * conv.height * conv.width:
        # a kernel taller than 1 keeps the field's dimensions apart (no flattenDims): the busiest
        # tile's share of each is rounded up (field_split_positions)
        m, width = field_split_positions(conv, pm)
        tile_conv = replace(conv, width=width)
    temp = _tile_temp(ipu, itemsize, partials_bytes, tile_conv, vertex, g, m, k, n, pm, pn, rearranged, used)
    if serial > 1 and serial_dim == "K":  # the accumulator of the pieces' partial sums (_Candidates.costs)
        temp = temp + _reduced_outputs(g, m, n, pk) * partials_bytes
    for a in (pg, pm, pn, pk, used, split_order, g, m, k, n, temp):
        a.setflags(write=False)
    return _Candidates(G, M, K, N, itemsize, partials_bytes, b_is_weight, ipu, serial, vertex, rearranged,
                       dilated_output, serial_dim, planned_rearranged, pg, pm, pn, pk, used, split_order, g, m, k, n,
                       tile_conv, temp)


def conv_inner_block(conv: ConvShape, vertex: str, K: int, pk, in_group: int) -> np.ndarray:
    """The busiest tile's share of a convolution's reduction ``K`` (input channels x kernel positions)
    split over ``pk`` tiles (array), as poplin splits it (``ConvModel.cpp :: constructModel``, poplibs
    8dcde1ec): the input channels in whole grains of ``in_group`` (``inChanSplit.parallel`` over
    ``numInChanGrains``, each tile ``ceil(grains / split)`` of them) times the kernel's outer
    dimension (``kernelSplit``, ``ceildivConstrainDivisor``; "the implementation doesn't support
    splitting the inner-most kernel dimension"), the best such factorisation ``pk = split x
    kernelSplit``. The expanded vertex has the kernel folded into its channels (``expandDims``), and
    ``expand_w`` the kernel's width. A split poplin cannot make (``K / pk`` elements of a 1x7
    kernel's 160 channels = 20 channels x 7, where poplin gives 2 grains = 32 channels x 7) is never
    priced."""
    pk = np.asarray(pk, dtype=np.int64)
    ci, kh, kw = _reduction_channels(conv, vertex, K)
    block = np.zeros(int(pk.max(initial=0)) + 1, dtype=np.int64)  # by split count
    splits = np.array(distinct_values(pk), dtype=np.int64)
    splits = splits[splits > 0]
    block[splits] = _least_inner_block(splits, ci, kh, kw, in_group)
    return np.minimum(block[pk], K)


def _reduction_channels(conv: ConvShape, vertex: str, K: int) -> tuple[int, int, int]:
    """(input channels, kernel rows, kernel columns) of a convolution's reduction ``K`` as ``vertex``
    runs it: ``expand_w`` has the kernel's width folded into the channels, the expanded vertex the
    whole kernel (``expandDims``), and the 1x1 vertex's kernel is 1x1 (:func:`conv_inner_block`)."""
    if vertex == "nx1":
        return conv.in_channels, conv.kernel_h, conv.kernel_w
    if vertex == "expand_w":
        return conv.in_channels * conv.kernel_w, conv.kernel_h, 1
    return K, 1, 1


def balanced_parts(count: int, split: int) -> np.ndarray:
    """The sizes of ``split`` parts of ``count`` whole units as poplin hands them to its tiles
    (``Convolution.cpp :: iterateTilePartition``: part ``i`` is ``[i count / split, (i + 1) count /
    split)``, rounded down), each ``floor`` or ``ceil`` of ``count / split``."""
    edges = np.arange(split + 1, dtype=np.int64) * count // split
    return np.diff(edges)


def grain_share(channels: int, grain: int, split):
    """The busiest of ``split`` parts (arrays allowed) of ``channels`` handed out in whole grains of ``grain``:
    ``ceil(grains / split)`` grains, at most the channels (:func:`grain_channels`' first part)."""
    return np.minimum(-(-(-(-channels // grain)) // np.asarray(split)) * grain, channels)


def grain_channels(channels: int, split: int, grain: int) -> np.ndarray:
    """The channels of each of ``split`` parts of ``channels`` handed out in whole grains of ``grain``
    (:func:`balanced_parts`), the last grain what is left of the channels."""
    ends = np.minimum(np.cumsum(balanced_parts(-(-channels // grain), split)) * grain, channels)
    return np.diff(ends, prepend=0)


def conv_inner_blocks(conv: ConvShape, K: int, pk: int, in_group: int) -> np.ndarray | None:
    """Each of the ``pk`` tiles' shares of an nx1 convolution's reduction ``K`` (``conv`` as the vertex
    runs it), as poplin splits it: the kernel's outer dimension split ``d`` ways and the input channels
    ``pk / d`` ways in whole grains of ``in_group``, each handed out as :func:`balanced_parts`, with the
    ``d`` the planner's estimate takes (:func:`conv_inner_block`: the least ``ceil`` share). None where
    ``K`` is not ``conv``'s reduction."""
    ci, kh, kw = conv.in_channels, conv.kernel_h, conv.kernel_w
    if ci * kh * kw != K:
        return None
    d = int(np.argmin(_inner_shares(np.array([pk]), ci, kh, kw, in_group)[:, 0])) + 1  # the planner's split
    return (balanced_parts(kh, d)[:, None] * grain_channels(ci, pk // d, in_group)[None, :]).ravel() * kw


def hmac_in_group(K: int, pk, itemsize: int):
    """The input channels per group of poplin's HMAC vertex with ``K`` channels split over ``pk`` tiles
    (arrays allowed), one group a tile: ``ceil(K / pk)`` rounded up to the grain, two fp16 channels
    (ConvVertexType.cpp getConvVertexHMACCandidates tries every group size in grains; the channels
    are padded to whole groups, so every tile with a group runs all of its channels)."""
    grain = hmac_grain(itemsize)
    return -(-(-(-K // np.asarray(pk))) // grain) * grain


def hmac_grain(itemsize: int) -> int:
    """Input channels of the HMAC vertex's grain: two fp16 channels, so no exchange needs padding
    (getConvVertexHMACCandidates), one fp32."""
    return 1 if itemsize == 4 else 2


def channel_blocks(K: int, pk: int, vertex: str, itemsize: int, in_group: int) -> np.ndarray:
    """Each of the ``pk`` tiles' input channels (the reduction ``K``) of a 1x1, expanded or HMAC plan,
    as poplin splits them (``inChanSplit.parallel`` over the input-channel groups, handed out as
    :func:`balanced_parts`): the AMP's groups of ``in_group`` channels; the HMAC's groups of
    :func:`hmac_in_group` channels, one a tile, the last padded to a whole group as poplin pads it."""
    if vertex == "hmac":
        group, grain = int(hmac_in_group(K, pk, itemsize)), hmac_grain(itemsize)
        padded = -(-K // grain) * grain
        return balanced_parts(-(-padded // group), pk) * group
    return grain_channels(K, pk, in_group)


def _least_inner_block(p: np.ndarray, ci: int, kh: int, kw: int, in_group: int) -> np.ndarray:
    """For each split count of ``p`` (an array, each at least 1), the least of the busiest tile's share
    ``min(ceil(grains / (p / d)) x in_group, ci) x ceil(kh / d) x kw`` over the kernel splits ``d``
    (``1..kh``, at most the split count) that divide it (:func:`conv_inner_block`), all at once."""
    return _inner_shares(p, ci, kh, kw, in_group).min(axis=0)


def _inner_shares(p: np.ndarray, ci: int, kh: int, kw: int, in_group: int) -> np.ndarray:
    """The busiest tile's share of :func:`_least_inner_block` for each kernel split ``d = 1 ..`` (rows)
    and split count of ``p`` (columns), the int64 maximum where ``d`` is not a split poplin makes."""
    grains = -(-ci // in_group)
    d = np.arange(1, min(kh, int(p.max(initial=1))) + 1, dtype=np.int64)[:, None]  # the kernel split (<= p)
    # poplin splits the channels at most ``grains`` ways (inChanSplit.parallel <= numInChanGrains)
    divides = (d <= p) & (p % d == 0) & (p // d <= grains)
    channels = np.maximum(p // d, 1)  # the input-channel split (1 where d does not divide: not taken)
    share = np.minimum(-(-grains // channels) * in_group, ci) * -(-kh // d) * kw
    return np.where(divides, share, np.iinfo(np.int64).max)


def fewest_splits(size: int, limit: int) -> np.ndarray:
    """The smallest split count of a dimension of ``size`` for each share a tile can get
    (``ceil(size / split)``), up to ``limit`` splits: of the splits leaving the same share, the
    smallest leaves the most tiles for the other dimensions."""
    p = np.arange(1, max(1, min(size, limit)) + 1)
    share = -(-size // p)
    return p[np.r_[True, share[1:] != share[:-1]]]


@lru_cache(maxsize=1024)
def _field_split_table(batch: int, height: int, width: int, top: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions, row width) of the busiest tile for every count of tiles ``1..top`` the output
    field ``batch x height x width`` is split over: the best ``pb x ph x pw <= count`` split."""
    # the best split has the fewest positions, then the widest rows: the least key below. Of the
    # splits of a dimension that leave a tile the same share, the smallest is as good or better
    # (more tiles left for the row), so only those are tried
    full = batch * height * width
    best = np.full(top + 1, full * (width + 1), dtype=np.int64)  # positions x (width + 1) + (width - row width)
    counts = np.arange(top + 1)
    for pb in fewest_splits(batch, top).tolist():
        ph = fewest_splits(height, top // pb)[:, None]  # every height split at once
        pw = np.clip(counts // (pb * ph), 1, width)
        w = -(-width // pw)
        m = -(-batch // pb) * -(-height // ph) * w
        key = np.where(counts >= pb * ph, m * (width + 1) + (width - w), best)
        best = np.minimum(best, key.min(axis=0))
    pos, narrower = np.divmod(best, width + 1)
    return pos, width - narrower


def field_split_positions(conv: ConvShape, pm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(output positions, row width) of the busiest tile of a convolution whose output field is
    split over ``pm`` tiles (arrays), as poplin splits it: the batch and each field dimension
    separately (``ConvPlan.cpp`` partitions ``batchSplit`` and ``fieldSplit`` per dimension, and a
    tile's share of a dimension is ``ceil(size / split)``), so a split count that does not factor
    into the field's dimensions (a prime such as 23, of Mk2's 1,472 = 64 x 23 tiles) leaves the
    busiest tile more than ``positions / pm``."""
    pm = np.asarray(pm, dtype=np.int64)
    pos, wid = _field_split_table(conv.batch, conv.height, conv.width, int(pm.max()))
    return pos[pm], wid[pm]


def conv_input_factor(conv: ConvShape, positions: np.ndarray) -> np.ndarray:
    """Bytes of input patch a tile needs per byte of im2col rows it computes.

    A tile computing a square of ``p`` output positions reads a
    ``((sqrt(p)-1)*stride + kernel_h) x ((sqrt(p)-1)*stride + kernel_w)`` input patch per
    channel, not ``p * kernel_h * kernel_w`` im2col values. A folded convolution
    (:meth:`ConvShape.rows_folded`) reads the convolution's own patch of its real channels.
    """
    source = conv.folded_from or conv  # a folded convolution reads the convolution's own input patch
    side = np.sqrt(np.maximum(positions, 1))
    patch = ((side - 1) * source.stride + source.kernel_h) * ((side - 1) * source.stride + source.kernel_w)
    if source.dilation > 1:  # a dilated input holds one real element per dilation x dilation of the patch
        patch = patch / source.dilation ** 2
    channels = source.in_channels / conv.in_channels  # of the folded channels, the real ones
    return np.minimum(1.0, patch * channels / (np.maximum(positions, 1) * conv.kernel_positions))


def _fc_pass_dims(B: int, I: int, O: int) -> dict:
    """{pass: (M, K, N, weight update)} of a fully connected layer's three passes as the simulator's
    matmuls: forward ``[B, I] @ [I, O]``, backward ``[B, O] @ [O, I]`` (the weights transposed) and
    weight update ``[I, B] @ [B, O]`` (its operands rearranged, :func:`fc_weight_update_rearranged`)."""
    return {"fwd": (B, I, O, False), "bwd": (B, O, I, False), "wu": (I, B, O, True)}


def _plan_at(G, M, K, N, splits, itemsize, partials_bytes, b_is_weight, ipu: IPU, rearranged: int,
             block: tuple | None = None) -> MatmulPlan:
    """The one-piece 1x1-vertex plan of ``G x [M,K] @ [K,N]`` split ``(pg, pm, pn, pk)`` over the tiles
    (a pass of a joint fully connected plan, whose splits the forward pass fixes). ``block``: the busiest
    tile's ``(g, m, k, n)`` when the splits are in whole grains; default ``ceil(dim / split)`` each."""
    pg, pm, pn, pk = splits
    used = pg * pm * pn * pk
    if block is None:
        g, m, n, k = (np.array([-(-d // p)]) for d, p in ((G, pg), (M, pm), (N, pn), (K, pk)))
    else:
        g, m, k, n = (np.array([int(d)]) for d in block)
    c = _tile_costs(ipu, itemsize, partials_bytes, b_is_weight, None, "1x1", g, m, k, n, np.array([pm]),
                    np.array([pn]), np.array([pk]), rearranged, used)
    total, planned = _tile_total(c, ipu), _tile_planned(c)
    fixed = pass_fixed_cycles()
    return MatmulPlan(splits=tuple(int(x) for x in splits), dims=(G, M, K, N), serial=1, tiles_used=int(used),
                      exchange_cycles=int(c["exchange"][0]), compute_cycles=int(c["compute"][0]) + fixed,
                      supersteps=int(c["compute_sets"][0]),
                      sync_points=int(c["exchange_phases"][0] + c["compute_sets"][0]),
                      exchange_bytes=int(c["recv"][0] * used), temp_bytes_per_tile=int(c["temp"][0]), fits=True,
                      total_cycles=int(total[0]) + fixed, planned_cycles=int(planned[0]) + fixed,
                      launch_cycles=int(c["launch"][0]) + fixed, kernel_cycles=int(np.atleast_1d(c["kernel"])[0]),
                      exchange_phases=int(c["exchange_phases"][0]), partials_bytes=partials_bytes,
                      pass_fixed=fixed, rearranged=int(rearranged),
                      reduction_stages=int(np.atleast_1d(c["reduction_stages"])[0]))


def _fc_joint_plans(G, B, I, O, itemsize, partials_bytes, ipu: IPU, tiles, budget) -> dict | None:
    """{pass: plan} of poplin's joint plan of a fully connected layer, or None if no split fits. Each
    plan is of the pass with its operands swapped (``dims`` M and N exchanged: the transposed product),
    both operands laid out for it (the right one's ``b_is_weight`` is True).

    poplin plans the forward pass with its operands swapped (``ConvPlan.cpp ::
    getSwapOperandCandidates``: joint plans always swap) over a grid of ``pG x pB x pI x pO`` tiles
    (groups, batch, input and output features; ``pB`` is always 1, see below) and derives the other
    passes from it by exchanging splits
    (``getFullyConnectedBwdPlan``: field and input-channel splits; ``getFullyConnectedWUPlan``: input-
    and output-channel splits), so every pass runs on the same grid and reduces a different
    dimension: forward over ``pI``, backward over ``pO``, weight update over ``pB``. The grid
    minimises the three passes' planning estimates (``ConvModel.cpp``: the joint plan's objective
    sums the forward, ``jointPlanBwdEstimates`` and ``jointPlanWuEstimates`` cycles) with every pass's
    temporaries within the budget. One piece (no serial splits)."""
    # the grid also splits the conv groups (Partition::convGroupSplit, a variable of the joint plan that
    # getFullyConnectedBwdPlan / getFullyConnectedWUPlan copy unchanged), so a grouped layer's tile
    # holds ceil(G / pG) groups in every pass
    # the batch is never split (ConvModel.cpp constructModel: a joint plan's forward pass fixes
    # outChanSplit.parallel, the swapped pass's output channels = the batch, at 1, so each weight is
    # used on exactly one tile and no pass needs the weights exchanged)
    # I and O are split in whole grains of the vertex's input-channel group: I is the forward pass's input
    # channels (constructModel: inChanSplit counts ceil(inChans / inChansPerGroup) grains) and O its
    # field, whose grain a joint plan sets to inChansPerGroup (ConvPlan.cpp createPlan: "The innermost
    # grain size becomes the inChansPerGroup in the backward pass"), so neither splits over more tiles
    # than it has grains (a 1000-input layer over at most 63 tiles in fp16) and a tile holds whole grains
    mode = amp_mode(ipu, itemsize, partials_bytes)
    grain = mode.in_group
    i_grains, o_grains = -(-I // grain), -(-O // grain)
    pg, pb, pi, po = (a.ravel() for a in np.meshgrid(_candidates(G, tiles), np.array([1]),
                                                     _candidates(I, tiles, grain), _candidates(O, tiles, grain),
                                                     indexing="ij"))
    used = pg * pb * pi * po
    ok = (used <= tiles) & (pi <= i_grains) & (po <= o_grains)
    pb, pi, po, pg, used = pb[ok], pi[ok], po[ok], pg[ok], used[ok]
    g, b = -(-G // pg), -(-B // pb)
    i, o = np.minimum(-(-i_grains // pi) * grain, I), np.minimum(-(-o_grains // po) * grain, O)
    # (m, k, n, pm, pn, pk) of each swapped pass on the grid: output positions m (the conv's field:
    # O, I, O), reduction k and output channels n (the batch in the forward and backward passes)
    grids = {"fwd": (o, i, b, po, pb, pi), "bwd": (i, o, b, pi, pb, po), "wu": (o, b, i, po, pi, pb)}
    dims = {"fwd": (O, I, B, False), "bwd": (I, O, B, False), "wu": (O, B, I, True)}  # (M, K, N, weight update)
    moved = {}  # operand elements each pass rearranges: the weight update's operands, padded ones
    for name, (M, K, N, wu) in dims.items():
        moved[name] = (fc_weight_update_rearranged(G, M, K, N) if wu else 0) + \
            matmul_padding(grain, partial_channel_group(mode), G, M, K, N, wu)[0]
    partials = {name: partials_bytes for name in grids}
    if writes_fp16_result(ipu, itemsize, partials_bytes, B, partial_channel_group(mode)):
        # the weight update's input channels (the batch) are grouped as the forward pass's output channels
        # (ConvPlan.cpp getFullyConnectedWUPlan takes the first of getConvVertexTypeCandidates, where the
        # half-output candidates come first; getConvTypes then keeps the result half)
        partials["wu"] = 2
    total = np.zeros(len(used))
    fits = np.ones(len(used), dtype=bool)
    for name, (m, k, n, pm, pn, pk) in grids.items():
        # both operands are laid out by the joint plan (1/pm of the right one resident, as for a
        # weight); the weight update still rearranges them (fc_weight_update_rearranged), and a pass
        # whose channels are short of the vertex's groups its padded operands (matmul_padding)
        rearranged = moved[name]
        c = _tile_costs(ipu, itemsize, partials[name], True, None, "1x1", g, m, k, n, pm, pn, pk, rearranged, used)
        total = total + _tile_planned(c)
        fits &= c["temp"] <= budget
    if not fits.any():
        return None
    idx = np.flatnonzero(fits)
    j = int(idx[np.lexsort((used[idx], total[idx]))[0]])
    out = {}
    for name, (m, k, n, pm, pn, pk) in grids.items():
        M, K, N, _ = dims[name]
        out[name] = replace(_plan_at(G, M, K, N, (int(pg[j]), int(pm[j]), int(pn[j]), int(pk[j])), itemsize,
                                     partials[name], True, ipu, moved[name],
                                     block=tuple(np.broadcast_to(a, used.shape)[j] for a in (g, m, k, n))),
                            swapped=True)
    return out


#: the most tiles poplin lets a convolution read an operand laid out by another op on before it copies the
#: operand into the plan's own layout (lib/poplin/Convolution.cpp convolutionImpl at 7eac0f26:
#: inViewMaxBroadcastDests and weightViewMaxBroadcastDests, both 7)
MAX_BROADCAST_DESTS = 7


def relaid_operands(plan: MatmulPlan, a_elements: int, b_elements: int) -> int:
    """Elements of a matmul's or convolution's operands that poplin copies into ``plan``'s layout
    before it runs. ``a_elements`` / ``b_elements``: the left operand's (a convolution's input) and
    the right one's (its weights) elements if the op that made it laid it out, else 0.

    ``Convolution.cpp :: convolutionImpl`` (7eac0f26), at the system level of every pass: the input
    ("acts") is rearranged when it would be broadcast to more than :data:`MAX_BROADCAST_DESTS` tiles
    (``kernelSplit x outChanSplit.parallel``), the weights when they would be (``batchSplit x
    fieldSplit``); the copy goes into a tensor made by ``createInputImpl`` / ``createWeightsImpl`` for
    the plan, and "these copies will be elided if the inputs already use the expected memory layout and
    tile mapping": an operand made for the plan (a weight, a graph input the op creates, as PopART lets
    it) costs nothing. A matmul ``A @ B`` is a 1x1 convolution of input ``A`` and weights ``B``, split
    ``pn`` and ``pm`` ways; swapped (``plan.swapped``), the input is ``Bᵀ`` and the weights ``Aᵀ``. Not
    counted: a convolution's kernel split (folded into the plan's inner split, so the input's
    destinations are a lower bound), and the innermost-grouping rule (an operand whose reduction
    dimension is not contiguous, e.g. attention's V, is rearranged whatever the splits); a weight-update
    pass rearranges both operands anyway (:func:`fc_weight_update_rearranged`)."""
    _, pm, pn, _ = plan.splits
    acts, weights = (b_elements, a_elements) if plan.swapped else (a_elements, b_elements)
    return (acts if pn > MAX_BROADCAST_DESTS else 0) + (weights if pm > MAX_BROADCAST_DESTS else 0)


def _relaid_share(elements: int, tiles_used: int, itemsize: int) -> int:
    """Bytes each of a plan's ``tiles_used`` tiles receives of ``elements`` relaid operand elements."""
    return math.ceil(elements / max(tiles_used, 1)) * itemsize


def with_relaid_operands(plan: MatmulPlan, elements: int, ipu: IPU, itemsize: int) -> MatmulPlan:
    """``plan`` preceded by ``elements`` operand elements copied into its layout
    (:func:`relaid_operands`): a Poplar Copy, one exchange phase with its sync in which each tile
    receives its even share. poplin's planner does not see it, so the plan's estimate is unchanged."""
    if elements <= 0:
        return plan
    share = _relaid_share(elements, plan.tiles_used, itemsize)
    exchange = exchange_cycles(share, ipu)
    return _plan_plus(replace(plan, planned_cycles=plan.estimate), ipu, exchange=exchange, syncs=1, phases=1,
                      nbytes=share * plan.tiles_used, planned=False, relaid=plan.relaid + elements,
                      relaid_cycles=plan.relaid_cycles + exchange + ipu.internal_sync_cycles)


def with_output_rearrangement(plan: MatmulPlan, elements: int, ipu: IPU, itemsize: int) -> MatmulPlan:
    """``plan`` followed by ``elements`` result elements rearranged over its tiles into another
    layout (:func:`rearrangement`: an exchange phase and a copy compute set, each with a sync)."""
    exch, copy, nbytes = rearrangement(ipu, elements, plan.tiles_used, itemsize)
    exch, fixed = int(exch), int(codelet("copy").fixed)
    copy = int(copy) + fixed
    return _plan_plus(plan, ipu, exchange=exch, compute=copy, launch=fixed, sets=1, syncs=2, phases=1,
                      nbytes=int(nbytes) * plan.tiles_used, planned=False,
                      output_rearrange=plan.output_rearrange + copy)


def swap_or_not(G: int, M: int, K: int, N: int, itemsize: int, ipu: IPU, tiles: int, memory_proportion: float,
                partials_bytes: int = 4) -> tuple[MatmulPlan, bool]:
    """(plan, swapped) of a matmul or fully connected pass ``G x [M,K] @ [K,N]`` as poplin chooses
    between its operands swapped (``G x [N,K] @ [K,M]``) and not (``ConvPlan.cpp ::
    getSwapOperandCandidates``: ``{true, false}``, the swapped first, for ``NONE_MATMUL`` and every
    fully connected pass planned on its own): the one that fits, then the lower planning estimate,
    the unswapped one charged its layout mismatch (:func:`matmul_padding`). Both operands are in the
    plan's layout, a share of each on its tile (poplin's exchange estimate discounts both, "because
    of the swap operands transformation")."""
    swapped = plan_matmul(G, N, K, M, itemsize, True, ipu, tiles, memory_proportion,
                          partials_bytes=partials_bytes, grain_splits=True)
    plain = plan_matmul(G, M, K, N, itemsize, True, ipu, tiles, memory_proportion, partials_bytes=partials_bytes,
                        grain_splits=True, mismatch=True)
    return _swapped_first(swapped, plain)


def _swapped_first(swapped: MatmulPlan, plain: MatmulPlan) -> tuple[MatmulPlan, bool]:
    """(plan, swapped) between a pass's two candidates as ``getSwapOperandCandidates`` orders them:
    the swapped one (marked ``swapped``) unless the plain one ranks strictly first (:func:`rank`: it fits
    a smaller memory bound, or the same and is estimated cheaper)."""
    if rank(plain) < rank(swapped):
        return plain, False
    return replace(swapped, swapped=True), True


@lru_cache(maxsize=1024)
def plan_fc_training(G: int, B: int, I: int, O: int, itemsize: int, ipu: IPU, tiles: int,
                     memory_proportion: float, partials_bytes: int = 4) -> tuple[dict, bool]:
    """({"fwd", "bwd", "wu": plan}, joint) of a fully connected layer trained with poplin's
    ``fullyConnectedPass`` options (``G`` groups of batch ``B``, ``I`` inputs, ``O`` outputs), as
    ``ConvPlan.cpp :: createPlan`` decides for ``FC_TRAINING_FWD``: the joint plan
    (:func:`_fc_joint_plans`) against the three passes planned separately, whichever the planner
    estimates faster (``MatmulPlan.estimate``; the separate plans only when strictly faster).

    Planned separately, each pass is planned with its operands swapped and not, as poplin tries both
    (:func:`swap_or_not`; the weight update with both operands rearranged into its layout either
    way), and each pass gets the layout of its own plan, so poplin's estimate charges what the joint
    plan avoids (``ConvModel.cpp :: addTransformCycleEstimate``): the backward pass's input
    rearranged (``FC_TRAINING_BWD && !isJointPlan``) and the weight update's result rearranged
    (``FC_TRAINING_WU && !isJointPlan``), each as :func:`planned_rearrangement` prices it. The weight
    update's result rearrangement is also charged to the chosen separate plan: ``matMulAcc`` adds
    the result into the weights, laid out for the forward pass. The backward input is not: the
    tool creates ``zDeltas`` for the backward plan. The weight transpose before the backward pass
    is the caller's (:func:`fc_weight_transpose`). Plans include the per-pass fixed cycles.
    """
    partials_bytes = max(partials_bytes, itemsize)
    dims = _fc_pass_dims(B, I, O)
    sep = {name: swap_or_not(G, M, K, N, itemsize, ipu, tiles, memory_proportion, partials_bytes)[0]
           for name, (M, K, N, wu) in dims.items() if not wu}
    # the weight update, its operands rearranged into the plan's layout (both, at run time, whichever
    # candidate), swapped or not as the other passes
    M, K, N, _ = dims["wu"]
    wu_rearranged = fc_weight_update_rearranged(G, M, K, N)
    sep["wu"] = _swapped_first(*(plan_matmul(G, m, K, n, itemsize, True, ipu, tiles, memory_proportion,
                                             partials_bytes=partials_bytes, grain_splits=True,
                                             rearranged=wu_rearranged)
                                 for m, n in ((N, M), (M, N))))[0]
    sep["wu"] = with_output_rearrangement(sep["wu"], G * I * O, ipu, itemsize)
    budget = memory_proportion * ipu.sram_bytes_per_tile
    joint = _fc_joint_plans(G, B, I, O, itemsize, partials_bytes, ipu, tiles, budget)
    if joint is None:  # no joint grid fits the budget
        if all(p.fits for p in sep.values()):
            return sep, False
        # nor do the separate passes: poplin plans the joint one again within doubled bounds, as each
        # separate pass was (memory_bounds), and keeps the separate ones if they need less temporary memory
        for bound in memory_bounds(budget, ipu)[1:]:
            joint = _fc_joint_plans(G, B, I, O, itemsize, partials_bytes, ipu, tiles, bound)
            if joint is not None:
                break
        joint = {name: replace(p, fits=False, memory_bound=bound) for name, p in joint.items()}
        if max(p.temp_bytes_per_tile for p in sep.values()) < max(p.temp_bytes_per_tile for p in joint.values()):
            return sep, False
        return joint, True
    # poplin's estimate of the separate plans: the three passes, the backward pass's input and the weight
    # update's result rearranged (the latter is run too, but not part of the pass's own estimate)
    rearranged = (planned_rearrangement(ipu, G * B * O, sep["bwd"].tiles_used, itemsize)
                  + planned_rearrangement(ipu, G * I * O, sep["wu"].tiles_used, itemsize))
    separate = sum(p.estimate for p in sep.values()) + int(rearranged)
    if not all(p.fits for p in sep.values()) or separate >= sum(p.estimate for p in joint.values()):
        return joint, True
    return sep, False

__all__ = ["AmpMode", "ConvShape", "MatmulPlan", "nx1_vertex_cycles", "amp_mode", "amp_pair_cycles",
           "coeff_load_bytes", "amp_vertex_cycles",
           "amp_fp32_vertex_cycles", "hmac_vertex_cycles",
           "plan_matmul", "conv_input_factor", "partials_reduction", "rearrangement", "deferred_dilation_copy",
           "padded_partials_rearranged", "kernel_hits", "padding_coverage",
           "fc_weight_transpose", "transpose_block_cycles", "with_weight_transpose", "plan_fc_training",
           "transposed_weights_exchange", "with_transposed_weights_moved", "conv_inner_block",
           "with_output_rearrangement", "swap_or_not", "matmul_padding", "partial_channel_group",
           "fc_weight_update_rearranged", "relaid_operands", "with_relaid_operands", "memory_bounds", "rank",
           "MAX_BROADCAST_DESTS"]
