"""A published PopVision profile of one Keras Dense layer, category by category: the layer as a
graph (:func:`keras_dense_graph`), compiled (:func:`keras_dense_executable`), and
:data:`KERAS_DENSE_ROWS` (:class:`DenseRow`), to three of which the program-memory code constants
are fitted."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from .. import compile as compile_graph
from ..graph import Graph, GraphBuilder
from ..options import Options


# --- memory: a published PopVision profile, category by category -------------------------------------
KERAS_DENSE = ("graphcore/ipu_tensorflow_addons `ipu_tensorflow_addons/keras/experimental/auto_pipeline/utils/"
               "pva_utils_test.py` at 27f07620 (`TEST_CASES_SINGLE_LAYER`, \"As of Poplar version: 3.0.0\"), the "
               "figures read by `pva_utils.py` from the PopVision profile `profiler.py` compiles: "
               "`keras.layers.Dense(1024)` called once on a (16, 4096) fp32 input copied from the host, forward "
               "only, alone on one Mk2 IPU (`ipu2`, pre-compiled)")
#: tolerance of the rows that are predicted, not fitted; the three fitted rows hold to 2 % (the constants
#: are whole bytes, or 0.1 B per step, and the published figures have two or three significant digits)
KERAS_DENSE_TOLERANCE = 0.30
KERAS_DENSE_FITTED_TOLERANCE = 0.02


def keras_dense_graph() -> Graph:
    """The program of :data:`KERAS_DENSE` as a graph: ``dense = input (16, 4096) @ kernel (4096, 1024)
    + bias (1024)`` in fp32, the input from the host and the output to it."""
    b = GraphBuilder("keras_dense", "float32")
    b.output(b.linear(b.input("input", (16, 4096)), 1024, name="dense"))
    return b.graph


@lru_cache(maxsize=None)
def keras_dense_executable():
    """:func:`keras_dense_graph` compiled for one ``ipu-mk2`` (inference, inputs and outputs streamed)."""
    return compile_graph(keras_dense_graph(), "ipu-mk2", Options())


def keras_dense_control_code(ex) -> float:
    """Control code of the layer's programs summed over the tiles (bytes): the simulator's control
    code less its fixed part on every tile, which counts the programs outside the layer."""
    return ex.memory[0].by_role["control_code"] - ex.system.ipu.reserved_bytes_per_tile * ex.tiles


def keras_dense_max_live(ex) -> float:
    """The highest not-always-live bytes summed over the tiles at any op (live activations and the
    op's temporaries): PopVision's largest not-always-live step. The published figure subtracts the
    first step's not-always-live bytes (parameters PopVision does not see as always live), which the
    simulator keeps always live."""
    lv = ex.memory[0].liveness
    return float(max(lv.activations + lv.temporaries))


def keras_dense_cycles(ex) -> int:
    """Cycles of the layer's compute sets and exchanges, each on its busiest tile (the ops'
    compute and exchange cycles; on-chip syncs are programs of their own, which ``pva_utils``
    does not count)."""
    return sum(c.compute_cycles + c.exchange_cycles for c in ex.costs.values())


@dataclass(frozen=True)
class DenseRow:
    """One figure of :data:`KERAS_DENSE` and the simulator's value for it."""

    category: str  # the name in pva_utils_test.py
    published: float  # bytes (cycles for cycleEst)
    how: str  # how pva_utils reads it / how the simulator's value is made
    value: Callable[[object], float]  # the simulator's value from the Executable
    kind: str  # "fitted" (a constant was fitted to it), "sourced" (its constant has another source), "predicted"
    asserted: bool  # within its tolerance when added: tests/test_calibration.py holds it there

    @property
    def tolerance(self) -> float:
        return KERAS_DENSE_FITTED_TOLERANCE if self.kind == "fitted" else KERAS_DENSE_TOLERANCE

    def simulated(self) -> float:
        return float(self.value(keras_dense_executable()))

    @property
    def error(self) -> float:
        return self.simulated() / self.published - 1


def _role(name: str) -> Callable[[object], float]:
    return lambda ex: ex.memory[0].by_role.get(name, 0)


# every figure of the test case; the comment is the simulator's error when the row's `asserted` was set
KERAS_DENSE_ROWS = [
    DenseRow("vertexCode", 3.4 * 2**20, "all tiles' vertexCode / the simulator's vertex code: "
             "`vertex_code_bytes_per_codelet` on each tile per codelet it runs (3 of the matmul on 1472 tiles, "
             "1 of the bias add on 512)", _role("vertex_code"), "fitted", True),  # -0.1%
    DenseRow("internalExchangeCode", 360 * 2**10, "code bytes of the exchanges named after the layer / "
             "`exchange_code_bytes_per_phase` per exchange phase on each receiving tile",
             _role("exchange_code"), "fitted", True),  # +0.3%
    DenseRow("vertexInstanceState", 178 * 2**10, "all tiles' vertexInstanceState / `vertex_state_bytes_per_vertex` "
             "per compute set on each working tile (the AMP supervisor vertex's own fields are 20 B; the fit "
             "adds its edge pointers, worklists and the other vertices of a tile)", _role("vertex_state"), "fitted",
             True),  # +0.0% (-45.9 % at the sourced 20 B)
    DenseRow("controlCode", 100 * 2**10, "control code of the layer's programs and the syncs / "
             "`control_code_bytes_per_step` per compute set and exchange phase on every tile",
             keras_dense_control_code, "fitted", True),  # +0.0%
    DenseRow("maxLive", 9.8 * 2**20, "largest not-always-live step less the first step's / the largest "
             "live activations + temporaries at an op (the input, the output and what the matmul's exchange "
             "brings to each tile, beside its partials)", keras_dense_max_live, "predicted", True),  # +0.1%
    DenseRow("parameter", 16.1 * 2**20, "always-live variables named with a `/` over 256 B, plus the first "
             "step's not-always-live bytes / kernel and bias", _role("weight"), "predicted", True),  # -0.6%
    DenseRow("totalMemory", 32.8 * 2**20, "all tiles' memory excluding gaps / `IpuMemory.total_bytes` (each "
             "tile's peak, summed; the simulator has no gaps)", lambda ex: ex.memory[0].total_bytes, "predicted",
             True),  # -9.1%
    DenseRow("cycleEst", 8700, "the layer's compute sets and exchanges, each its busiest tile's cycle "
             "estimate, summed / the same from the ops' costs (syncs excluded)", keras_dense_cycles, "predicted",
             True),  # +16.9%
]
