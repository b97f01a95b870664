"""Vector-unit model: element-wise ops, reductions, gathers and optimizer updates.

A vector op is laid out as poputil lays out a new tensor (``calcLinearTileMapping``: at least
128 bytes per tile, in grains of the 64-bit vector), and each tile runs one codelet per compute
set on the elements it owns; the busiest tile sets the time. What a codelet costs comes from
``configs/_vector-ops.toml`` (after poplibs' cycle estimators): a fixed cost per compute set
(supervisor launch, worker prologues) and cycles per element by precision. Cycles are tile
cycles of the IPU clock.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import ConfigError, UnsupportedOpError
from ..hardware.configs import CONFIG_DIR
from ..hardware.system import IPU

VECTOR_OPS_FILE = CONFIG_DIR / "_vector-ops.toml"
MIN_BYTES_PER_TILE = 128  # poputil calcLinearTileMapping: the least a tile is given of a new tensor


#: bytes of an index or offset popops and poplar keep as an UNSIGNED_INT (slice offsets, sort
#: indices, a pipeline stash's position)
INDEX_BYTES = 4

#: worker contexts of a tile (every IPU generation in configs/: poplar Target::getNumWorkerContexts)
WORKERS = 6


@dataclass(frozen=True)
class Codelet:
    """Cost of one op kind's codelets on a tile (see ``configs/_vector-ops.toml``)."""

    fixed: float  # cycles per compute set, whatever the size
    fp16: float  # cycles per element, 2-byte operands
    fp32: float  # cycles per element, 4-byte operands
    sets: int = 1  # compute sets the op runs as
    per_run: float = 0  # cycles per contiguous run of one repeated operand element (outer broadcast)
    int32: float | None = None  # cycles per element on 32-bit integer operands, where popops' rate differs
    per_run_misaligned: float = 0  # per_run for a run that is not a whole number of 64-bit vectors (0: per_run)
    mixed: float | None = None  # cycles per element of float data with a half operand, where popops' rate differs

    def per_element(self, itemsize: int, integer: bool = False) -> float:
        if integer and self.int32 is not None:
            return self.int32
        return self.fp16 if itemsize <= 2 else self.fp32

    def run_cycles(self, run: int, itemsize: int, on_tile: int | None = None) -> float:
        """Cycles a tile spends on each contiguous ``run`` of elements sharing one broadcast element (its
        ``on_tile`` elements of it where a tile holds less), beyond :meth:`per_element`; 0 without
        ``per_run``. popops' outer broadcast (ElementWise.cpp) gives runs shorter than the workers'
        vectors a worker each (ByRow: one outer loop a run) and longer ones to every worker a sixth each
        (ByColumn: six outer loops a run, each worker's share rounded up to whole 64-bit vectors); a run
        that is not a whole number of vectors takes the misaligned loop."""
        if not self.per_run or not run:
            return 0.0
        vector = 8 // itemsize  # elements of a 64-bit vector
        outer = self.per_run_misaligned if run % vector and self.per_run_misaligned else self.per_run
        if run < WORKERS * vector:
            return outer
        piece = min(run, on_tile or run)
        rate = self.per_element(itemsize)
        share = math.ceil(math.ceil(piece / WORKERS) / vector) * vector
        return WORKERS * (outer + rate * share) - rate * piece


@lru_cache(maxsize=1)
def codelet_table() -> dict[str, Codelet]:
    """Every op kind's :class:`Codelet`, from ``configs/_vector-ops.toml``."""
    with open(VECTOR_OPS_FILE, "rb") as f:
        data = tomllib.load(f)
    table = {}
    for kind, entry in data.get("codelets", {}).items():
        try:
            c = Codelet(**entry)
        except TypeError as e:
            raise ConfigError(f"{VECTOR_OPS_FILE}: codelets.{kind}: {e}") from None
        values = (c.fixed, c.fp16, c.fp32, c.per_run, c.per_run_misaligned) + tuple(
            v for v in (c.int32, c.mixed) if v is not None)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in values) or c.sets < 1:
            raise ConfigError(f"{VECTOR_OPS_FILE}: codelets.{kind} = {entry!r}: fixed, fp16 and fp32 "
                              "must be numbers >= 0 (per_run, per_run_misaligned, int32 and mixed too) and sets a "
                              "whole number >= 1")
        table[kind] = c
    return table


def codelet(kind: str) -> Codelet:
    """The codelet of ``kind``; an op kind without one is an :class:`UnsupportedOpError`."""
    table = codelet_table()
    if kind not in table:
        raise UnsupportedOpError(
            f"the vector model has no cost for {kind!r}; add it to {VECTOR_OPS_FILE.name} "
            f"(known: {', '.join(sorted(table))})")
    return table[kind]


def grain_elements(itemsize: int) -> int:
    """Fewest elements a tile is given: 128 bytes' worth (poputil's linear tile mapping)."""
    return max(1, MIN_BYTES_PER_TILE // itemsize)


def spread(elements: int, itemsize: int, ipu: IPU, tiles: int) -> tuple[int, int]:
    """(tiles used, elements on the busiest tile) when ``elements`` are spread evenly."""
    used = max(1, min(tiles, math.ceil(elements / grain_elements(itemsize))))
    return used, math.ceil(elements / used)


def tile_cycles(elements_on_tile, itemsize: int, kind: str, ipu: IPU):
    """Compute cycles of one tile working on ``elements_on_tile`` elements of ``kind``, all of
    the op's compute sets together (an integer array of them for an array of element counts)."""
    return codelet_cycles(codelet(kind), elements_on_tile, itemsize)


def codelet_cycles(c: Codelet, elements_on_tile, itemsize: int):
    """:func:`tile_cycles` of a codelet given whole (one composed for an op, not the table's); of an
    array of element counts, an integer array of one estimate each (the same float arithmetic)."""
    cycles = c.sets * c.fixed + elements_on_tile * c.per_element(itemsize)
    if isinstance(cycles, np.ndarray):
        return np.ceil(cycles).astype(np.int64)
    return math.ceil(cycles)


#: binary op kinds popops runs with a broadcast vertex when an operand is repeated over the other
BROADCAST_OPS = ("add", "sub", "mul", "mul_inplace")


#: elements of a convolution activation's innermost channel group (poplin's AMP output channel
#: groups of 16, configs ``amp_fp16_output_group``): the unit popops finds repeated on a tile when a
#: per-channel vector is broadcast over the activation
CHANNEL_GROUP = 16


def broadcast_run(out_shape: tuple, operand_shape: tuple) -> int:
    """Elements of ``out_shape`` one element of the broadcast ``operand_shape`` covers contiguously
    (the output's dimensions after the operand's last varying one; all of it for a scalar)."""
    operand = (1,) * (len(out_shape) - len(operand_shape)) + tuple(operand_shape)
    varying = [i for i, d in enumerate(operand) if d != 1]
    return math.prod(out_shape[max(varying) + 1:]) if varying else math.prod(out_shape)


def broadcast_pattern(out_shape: tuple, operand_shape: tuple, per_tile: int | None = None,
                      itemsize: int | None = None) -> str | None:
    """How popops finds ``operand_shape`` repeated over ``out_shape`` in a binary op
    (``constructBroadcastBinaryOp``, lib/popops/ElementWise.cpp, which matches the operand against
    each tile's contiguous regions of the output): ``"inner"`` when the operand is a vector laid
    along the output's innermost dimension and repeated over the others (BroadcastVectorInner: a
    bias over the last dimension, a mask over the last dimension repeated over heads and rows, or a
    per-channel vector of an activation of rank 3 or more, whose channels poplin lays out innermost), ``"outer"`` when each operand element covers a
    contiguous run (BroadcastVectorOuterByRow: per-row statistics) or the operand is one element
    (BroadcastScalar, priced alike); None when the operand is not smaller or matches neither
    (a plain binary op reading the broadcast view). With ``per_tile`` (elements on the busiest tile),
    an inner vector must repeat at least twice on the tile (popops wants a pattern's outer factor
    above one), or the op stays a plain one. With ``itemsize`` (bytes of an element), an inner vector
    popops gives no inner vertex (:func:`inner_vertex_taken`) is ``"copied"``."""
    out_shape, operand_shape = tuple(out_shape), tuple(operand_shape)
    if math.prod(operand_shape) >= math.prod(out_shape):
        return None
    if math.prod(operand_shape) == 1:
        return "outer"
    operand = (1,) * (len(out_shape) - len(operand_shape)) + operand_shape
    if len(operand) != len(out_shape) or any(d not in (1, o) for d, o in zip(operand, out_shape)):
        return None  # not a numpy broadcast (an op's own resampling, say)
    varying = [i for i, d in enumerate(operand) if d != 1]
    repeated = [i for i, (d, o) in enumerate(zip(operand, out_shape)) if d == 1 and o > 1]
    if len(out_shape) >= 3 and 1 in varying and set(varying) <= {0, 1} and (len(out_shape) >= 4 or varying == [1]):
        unit = min(out_shape[1], CHANNEL_GROUP)  # per channel (and sample): channels innermost on the tiles
    elif operand[-1] == out_shape[-1] > 1:
        # a vector along the last dimensions, repeated over the dimensions before it (and the same for
        # each index of any leading dimension it varies in: an attention mask per sample)
        unit = math.prod(operand[max(repeated) + 1:])
    elif max(varying) < min(repeated):
        return "outer"
    else:
        return None
    if per_tile is not None and per_tile < 2 * unit:
        return None
    return "inner" if itemsize is None or inner_vertex_taken(itemsize, unit) else "copied"


def inner_vertex_taken(itemsize: int, unit: int) -> bool:
    """Whether popops runs its inner broadcast vertex for an add, subtract or multiply whose repeated
    vector is ``unit`` elements of ``itemsize`` bytes on a tile (``binaryOpBroadcastInnerVector``,
    lib/popops/ElementWise.cpp): not for float data, where broadcasting the operand with copies and
    running the vectorised BinaryOp is taken instead, nor for a half vector that is not whole 64-bit
    vectors (its slow path); those run :data:`COPIED_BROADCAST`."""
    return itemsize == 2 and unit % 4 == 0


#: the codelet of an add, subtract or multiply popops does not give its inner broadcast vertex
#: (:func:`inner_vertex_taken`): each tile copies its part of the repeated operand into a contiguous
#: one (the copies Poplar adds for the plain vertex's broadcast input), then BinaryOp1D runs
COPIED_BROADCAST = "broadcast_copied"


def broadcast_codelet(op: str, pattern: str) -> str:
    """The ``configs/_vector-ops.toml`` codelet of ``op`` (:data:`BROADCAST_OPS`) under ``pattern``
    (:func:`broadcast_pattern`): popops' inner broadcast vertices differ by operation and by
    whether a multiply is in place; the outer and scalar ones cost alike, and a ``"copied"``
    operand runs :data:`COPIED_BROADCAST` whatever the op."""
    if pattern == "outer":
        return "broadcast_outer"
    if pattern == "copied":
        return COPIED_BROADCAST
    return {"add": "broadcast_inner_add", "sub": "broadcast_inner_add", "mul": "broadcast_inner_mul",
            "mul_inplace": "broadcast_inner_mul_inplace"}[op]


def launch_cycles(kind: str) -> int:
    """The fixed part of :func:`tile_cycles`: every compute set's vertex launch and prologue."""
    c = codelet(kind)
    return math.ceil(c.sets * c.fixed)


def whole_number_table(name: str, keys: tuple[str, ...]) -> dict[str, int]:
    """The ``[name]`` table of ``configs/_vector-ops.toml``: ``keys``, each a whole number >= 0, or a
    :class:`ConfigError` naming the file, the table and what is wrong."""
    with open(VECTOR_OPS_FILE, "rb") as f:
        table = tomllib.load(f).get(name, {})
    missing = [k for k in keys if k not in table]
    if missing:
        raise ConfigError(f"{VECTOR_OPS_FILE}: [{name}] lacks {', '.join(missing)}; restore it from the "
                          "project's copy")
    bad = [k for k in keys if isinstance(table[k], bool) or not isinstance(table[k], int) or table[k] < 0]
    if bad:
        raise ConfigError(f"{VECTOR_OPS_FILE}: [{name}] {bad[0]} = {table[bad[0]]!r}: expected a whole "
                          "number >= 0")
    return {k: table[k] for k in keys}


@lru_cache(maxsize=1)
def _loop_constants() -> dict[str, dict[str, int]]:
    """The ``[dynamic_slice]`` and ``[loop_counter]`` tables of ``configs/_vector-ops.toml``."""
    return {"dynamic_slice": whole_number_table("dynamic_slice", ("supervisor", "worker_fixed", "per_sub_element",
                                                                  "per_copy")),
            "loop_counter": whole_number_table("loop_counter", ("vertex",))}


def dynamic_slice_tile_cycles(elements_on_tile, itemsize: int, workers: int):
    """Tile cycles of popops' DynamicSlice1D (or DynamicUpdateSlice1D) taking one slice of a region
    of ``elements_on_tile`` elements (an int, or an array of them): the region split over the
    ``workers``, each copying its share 64 bits at a time (getDynamicSlice1DEstimate)."""
    c = _loop_constants()["dynamic_slice"]
    copies = np.ceil(np.asarray(elements_on_tile) / workers) // max(1, 8 // itemsize)
    cycles = c["supervisor"] + workers * (c["worker_fixed"] + c["per_sub_element"] + c["per_copy"] * copies)
    return int(cycles) if np.ndim(cycles) == 0 else cycles


@lru_cache(maxsize=1)
def _seed_constants() -> dict[str, int]:
    """The ``[random_seed]`` table of ``configs/_vector-ops.toml``."""
    return whole_number_table("random_seed", ("set_seed_supervisor", "set_seed_per_worker", "hw_seeds",
                                              "uniform_int_supervisor", "uniform_int_per_worker",
                                              "uniform_int_per_pair", "uniform_int_per_odd"))


def seed_programs_cycles(workers: int) -> tuple[int, int]:
    """(set-seed, hardware-seeds) cycles on each tile of the compute sets poprand adds around a random
    op given a master seed: SetSeed's estimate, and one of poplar's getHwSeeds / setHwSeeds."""
    c = _seed_constants()
    return c["set_seed_supervisor"] + workers * c["set_seed_per_worker"], c["hw_seeds"]


def uniform_int_cycles(elements: int, workers: int) -> int:
    """Tile cycles of poprand's Uniform vertex drawing ``elements`` INT values (scaled)."""
    c = _seed_constants()
    return (c["uniform_int_supervisor"] + workers * c["uniform_int_per_worker"] + c["uniform_int_per_pair"] * (elements // 2)
            + c["uniform_int_per_odd"] * (elements % 2))


def loop_counter_cycles() -> int:
    """Cycles of the ForLoopCounter vertex a counted loop runs each iteration, on one tile."""
    return _loop_constants()["loop_counter"]["vertex"]


@lru_cache(maxsize=1)
def _index_constants() -> dict[str, int]:
    """The ``[index_arithmetic]`` table of ``configs/_vector-ops.toml``."""
    return whole_number_table("index_arithmetic", ("supervisor", "binary_worker_fixed", "broadcast_worker_fixed",
                                                   "add", "shift_right", "multiply", "divide"))


#: popops' vertex for each index op: BroadcastScalar1D where popops has a scalar vertex for the op
#: (haveScalarBroadcastVertexForOp), else BinaryOp1D
_INDEX_OP_SCALAR = {"add": False, "shift_right": False, "multiply": True, "divide": True}


def index_op_tile_cycles(op: str, elements_on_tile: int, workers: int) -> int:
    """Tile cycles of one popops binary op (``add``, ``shift_right``, ``multiply`` or ``divide``) on
    ``elements_on_tile`` UNSIGNED_INT indices, the tile's ``workers`` sharing them."""
    c = _index_constants()
    fixed = c["broadcast_worker_fixed" if _INDEX_OP_SCALAR[op] else "binary_worker_fixed"]
    return c["supervisor"] + workers * (fixed + c[op] * math.ceil(elements_on_tile / workers))


@lru_cache(maxsize=1)
def _fused_scalar_constants() -> dict[str, int]:
    """The ``[fused_scalar]`` table of ``configs/_vector-ops.toml``."""
    return whole_number_table("fused_scalar", ("vertex", "per_input_op"))


def fused_scalar_cycles(inputs: int, ops: int, workers: int) -> int:
    """Tile cycles of popops' fused codelet of a map over ``inputs`` one-element tensors chaining ``ops``
    operations (one worker vertex)."""
    c = _fused_scalar_constants()
    return workers * (c["vertex"] + c["per_input_op"] * inputs * ops)
