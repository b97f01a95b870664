"""The calibration checks: :class:`Check` (one figure of ``../shared/calibration/hardware.csv``, its
published value copied here with the source, how the simulator reproduces it, the tolerance and
why), the microbenchmarks that reproduce each figure (tile AMP, Poplar tutorial 6, the IPU-M2000's
host link, gateway and IPU-Links, host syncs, PopTorch's host-IO profile) and :data:`CHECKS`; and
:data:`VERTEX_CHECKS`, hardware cycle counts of one elementwise compute set published outside
hardware.csv (:data:`TESSELLATE_BASICS`); :data:`KERNEL_CHECKS`, matmul and softmax kernels' cycles read off
hardware profiles (:data:`PROFILE_KERNELS`); :data:`CONV_HW_CHECKS`, a 4-channel poplin convolution timed on Mk1
hardware (:data:`CONV_HW_SOURCE`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable

import numpy as np

import models

from .. import simulate
from ..cost import op_cost
from ..cost.amp import pass_fixed_cycles
from ..cost.matmul_swap import plan_matmul_none_pass
from ..graph import GraphBuilder
from ..engine import Engine
from ..hardware.system import load_system
from ..options import Options
from ..program import Compute, IpuCopy, OpSteps, RemoteCopy, Repeat, Sequence, StreamCopy, Sync, leaves
from ..strategy import ShardedExecution


@dataclass(frozen=True)
class Check:
    """One published figure and the simulator's value for it."""

    name: str  # the row of hardware.csv
    what: str
    published: float
    unit: str
    tolerance: float  # relative
    kind: str  # "predicted", "fitted" (a constant was fitted to it) or "measured constant"
    why: str  # the reason for the tolerance
    simulate: Callable[[], float]

    def simulated(self) -> float:
        return float(self.simulate())

    def error(self) -> float:
        return self.simulated() / self.published - 1.0


# --- how each figure is reproduced ------------------------------------------------------------
def amp_tile_tflops(n: int) -> float:
    """Bow tile AMP: every tile runs [n,16] x [16,16] fp16 on its own data (TFLOP/s)."""
    g = models.get("amp-tile", n=n)
    ipu = load_system("bow-ipu").ipu
    cost = op_cost(g.ops[0], g, ipu, ipu.tiles)
    # the sweep times the vertex alone, not the program around a matmul pass (its fixed cycles)
    vertex = cost.compute_cycles - pass_fixed_cycles()
    return ipu.tiles * 2 * n * 16 * 16 / (vertex / ipu.clock_hz) / 1e12


@lru_cache(maxsize=1)
def tut6():
    """Poplar tutorial 6 (matrix-vector, host streaming) on one Mk2 IPU: a Poplar program, its streams its own
    (no PopART StepIO)."""
    return simulate(models.get("tut6-matvec"), "ipu-mk2", Options().stepIOCallbacks(False))


def tut6_host_exchange() -> float:
    """Cycles the tutorial's host-to-IPU copies spend moving data into the tiles (StreamCopyMid)."""
    run = tut6()
    engine = Engine(run.executable.system)
    return sum(engine.prefetch_phases(c)[1][-1][1] for c in leaves(run.executable.program)
               if isinstance(c, StreamCopy) and c.direction == "to_ipu")


def _stream(ipu: int, nbytes: int, direction: str = "to_ipu") -> StreamCopy:
    return StreamCopy(ipu, f"s{ipu}", direction, nbytes, 0)


def m2000_host_link_shared(nbytes: int = 256 * 2**20) -> float:
    """Four IPUs of an IPU-M2000 stream at once over their one host link (bytes/s on the link). Each
    IPU's buffers are filled by a thread of its own: the measured 7.06 GB/s over four IPUs is twice
    what one thread fills (``host_prepare_bytes_per_s``), so the tool cannot be filling them in turn."""
    system = load_system("ipu-m2000")
    engine = Engine(system)
    total = engine.run(Sequence([replace(_stream(i, nbytes), host_thread=(i, 0)) for i in range(4)])).total_cycles
    host, device = engine.prefetch_phases(_stream(0, nbytes))
    overhead = host[0][1] + device[0][1] + device[1][1]  # first fill + sync, last device transfer
    return 4 * nbytes / system.cycles_to_seconds(total - overhead)


def m2000_gateway_to_host(nbytes: int = 256 * 2**20) -> float:
    """The IPU-to-host copy's host-link phase (bytes/s)."""
    system = load_system("ipu-m2000")
    wire = Engine(system).prefetch_phases(_stream(0, nbytes, "from_ipu"))[0][0][1]
    return nbytes / system.cycles_to_seconds(wire)


def m2000_ipu_pair(nbytes: int = 4_096_000 * 1000 // 2) -> float:
    """gc-iputraffictest: IPUs 2 and 3 send to each other at once (bytes/s, both directions)."""
    system = load_system("ipu-m2000")
    tl = Engine(system).run(Sequence([IpuCopy(((2, 3, nbytes), (3, 2, nbytes)))]))
    return 2 * nbytes / system.cycles_to_seconds(tl.total_cycles)


def host_syncs(count: int = 4095, delay_cycles: int = 32 * 5) -> float:
    """gc-hostsynclatencytest: host syncs each followed by a delay (seconds in all)."""
    system = load_system("ipu-mk2")
    delay = OpSteps(("delay",), ("custom",), np.array([delay_cycles]), np.array([0]), np.array([0]),
                    np.array([0.0]), np.array([0]))
    body = Sequence([Sync((0,), "host", system.host_link.host_sync_cycles), Compute(0, "delay", delay)])
    return system.cycles_to_seconds(Engine(system).run(Sequence([Repeat(count, body)])).total_cycles)


def io_bound_cycles(setting: str, iterations: int = 100) -> float:
    """Cycles per iteration of the io-bound microbenchmark: no buffering, prefetch depth 3, or
    depth 3 with 64 IO tiles and OverlapDeviceIterationLoop (ShardedExecution, as PopTorch asks)."""
    o = Options().deviceIterations(iterations)
    if setting != "none":
        o._Popart.set("defaultPrefetchBufferingDepth", 3)
    if setting == "io_tiles":
        o.TensorLocations.numIOTiles(64)
        o.setExecutionStrategy(ShardedExecution())
    graph = models.get("io-bound", overlap=setting == "io_tiles")
    return simulate(graph, "ipu-mk2", o).cycle_count / iterations


def add_compute_set_cycles(elements: int) -> int:
    """Cycles of one compute set adding two fp32 vectors of ``elements`` already on a tile, on a Bow
    IPU: the simulator's price of the op (poplibs' BinaryOp1D estimate and an on-chip sync). The op
    runs on one tile; on more tiles each does the same, at the same time."""
    return _single_op_cost("add", (1, elements), "float32", "bow-ipu", 1).cycles


def accumulate_compute_set_cycles(elements: int) -> int:
    """Cycles of one compute set adding a scaled fp32 vector of ``elements`` into another already on a tile,
    on a Bow IPU: the simulator's price of an ``accumulate`` (popops' scaledAddTo: its vertex and an on-chip
    sync)."""
    return _single_op_cost("accumulate", (1, elements), "float32", "bow-ipu", 1).cycles


def _single_op_cost(kind: str, shape: tuple, dtype: str, system: str, tiles: int | None):
    """The simulator's :class:`~sim.cost.opcost.OpCost` of one ``kind`` op on graph inputs of ``shape`` (two for an
    add or an accumulate, one otherwise) and a result of that shape, on ``tiles`` tiles (None: all) of
    ``system``'s IPU."""
    b = GraphBuilder(kind, dtype)
    ins = [b.input(f"in{i}", shape) for i in range(1 if kind == "softmax" else 2)]
    b.op(kind, ins, [shape], name=kind)
    ipu = load_system(system).ipu
    return op_cost(b.graph.ops[-1], b.graph, ipu, ipu.tiles if tiles is None else tiles)


def _bow_op_seconds(graph, options: Options, kind: str | None = None) -> float:
    """Seconds the ops of ``graph`` (those of ``kind`` if given) take on a Bow IPU, synthetic data."""
    system = load_system("bow-ipu")
    trace = simulate(graph, system, options.enableSyntheticData(True)).op_trace()
    spans = trace.end - trace.start
    return system.cycles_to_seconds(int((spans if kind is None else spans[trace.kind == kind]).sum()))


def dense_matmul_tflops(m: int, k: int, n: int, dtype: str) -> float:
    """One ``poplin::matMul`` [m, k] x [k, n] on a Bow IPU as PopSparse's dense benchmark runs it
    (poplin's default availableMemoryProportion 0.6, no fully connected pass; half partials for
    fp16, float for fp32): TFLOP/s over the matmul's cycles, its exchanges and syncs included."""
    b = GraphBuilder(f"matmul_{m}x{k}x{n}", dtype)
    b.op("matmul", [b.weight("lhs", (m, k)), b.input("rhs", (k, n))], [(m, n)], name="matmul",
         attrs={"fully_connected_pass": "NONE", "available_memory_proportion": 0.6})
    o = Options()
    o.Precision.setPartialsType("half" if dtype == "float16" else "float")
    return 2 * m * k * n / _bow_op_seconds(b.graph, o, "matmul") / 1e12


def decode_attention_us(batch: int, keys: int, heads: int = 32, head_size: int = 128) -> float:
    """SparQ's ``attn-local`` on a Bow IPU: one query token per sequence against ``keys`` cached keys and
    values (fp16, fp32 partials, proportion 0.6): q K^T as a grouped matmul, the scaling, a softmax
    over the keys and the grouped matmul with V (microseconds of the four ops). The cache is an
    activation here, as a model's KV cache is: its layout is not the one poplin would create."""
    rows = batch * heads
    b = GraphBuilder("attn_local", "float16")
    scores = b.op("matmul", [b.input("q", (rows, 1, head_size)), b.input("k_t", (rows, head_size, keys))],
                  [(rows, 1, keys)], name="qk")[0]
    probs = b.op("softmax", [b.op("scale", [scores], [(rows, 1, keys)], name="scale")[0]], [(rows, 1, keys)],
                 name="softmax")[0]
    b.op("matmul", [probs, b.input("v", (rows, keys, head_size))], [(rows, 1, head_size)], name="av")
    return _bow_op_seconds(b.graph, Options()) * 1e6


def blur_conv_us(width: int, height: int, dtype: str, proportion: float = 0.6) -> float:
    """Microseconds of one iteration of lbm-graphcore's poplibs Gaussian blur on one Mk1 IPU
    (``main/GaussianBlurPoplibs.cpp``): a ``poplin::convolution`` of the ``height x width`` 4-channel
    image (batch 1, 4 output channels, 3x3, padding 1, inference, ``use128BitConvUnitLoad``; the input
    made by ``createInput``: a graph input, in the plan's layout) and the copy of its result back into
    the input. ``proportion``: the convolution's availableMemoryProportion (the source's default 0.6)."""
    run = _blur_run(width, height, dtype, proportion)
    return run.cycle_count / run.executable.system.ipu.clock_hz * 1e6


def blur_plan_fits(width: int, height: int, dtype: str, proportion: float) -> bool:
    """Whether the simulator's planner finds a plan of the blur's convolution (:func:`blur_conv_us`) within
    availableMemoryProportion ``proportion`` of a Mk1 tile (False: it plans within a doubled bound)."""
    return not _blur_run(width, height, dtype, proportion).executable.costs["blur/conv2d"].over_memory_budget


@lru_cache(maxsize=None)
def _blur_run(width: int, height: int, dtype: str, proportion: float):
    """The simulated run of the blur (:func:`blur_conv_us`) at availableMemoryProportion ``proportion``, once
    for the checks and the sweep alike."""
    o = Options().enableSyntheticData(True).stepIOCallbacks(False).setAvailableMemoryProportion({"IPU0": proportion})
    o._Popart.set("convolutionOptions", {"use128BitConvUnitLoad": "true"})
    return simulate(_blur_graph(width, height, dtype), load_system("ipu-mk1-c2").one_ipu(), o)


def _blur_graph(width: int, height: int, dtype: str):
    """lbm-graphcore's poplibs Gaussian blur (:func:`blur_conv_us`): the convolution and the copy back."""
    b = GraphBuilder("gaussian_blur", dtype)
    blurred = b.conv2d(b.input("img", (1, 4, height, width)), 4, 3, 1, 1, name="blur")
    b.output(b.op("copy", [blurred], [(1, 4, height, width)], name="copy_back")[0])
    return b.graph


def poptorch_call_seconds() -> float:
    """One warm call of the SpMM notebook's ``DemoDenseModel`` (``torch.matmul`` of a fixed [5, 5] fp32
    matrix and the [5, 4] input) as a PopTorch ``inferenceModel`` on a Bow IPU: the seconds the call
    takes on a script's clock (``sim.virtual_clock``), PopTorch's host work included."""
    import torch

    from .. import poptorch, virtual_clock

    class DenseModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.matrix = torch.ones(5, 5)

        def forward(self, x):
            return torch.matmul(self.matrix, x)

    options = poptorch.Options().simulatedSystem("bow-ipu").computeOutputsOnCpu(False)
    model = poptorch.inferenceModel(DenseModel(), options)
    model(torch.ones(5, 4))  # the notebook's first call compiles and attaches; its second is timed
    before = virtual_clock.totals()[1]
    model(torch.ones(5, 4))
    return virtual_clock.totals()[1] - before


#: the rows of the 26 Criteo 1TB tables (the DLRM notebook's ``day_fea_count.npz``), each capped at 5,000 (its
#: throughput test's hashing trick, ``max_ind_range``)
DLRM_TABLE_ROWS = tuple(min(n, 5000) for n in (
    227605432, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 130229467, 3067956, 405282, 10, 2209, 11938, 155, 4, 976,
    14, 292775614, 40790948, 187188510, 590152, 12973, 108, 36))


def dlrm_items_per_second(training: bool, system: str = "bow-2000") -> float:
    """The CompressedDLRM notebook's hashing-trick DLRM (graphcore-research/notebooks ``compressed_dlrm``: Meta's
    DLRM with the MLPerf Criteo 1TB sizes, fp32) as its ``test_throughput`` runs it through PopTorch on 4 IPUs:
    one device iteration of 512 samples a replica (training: SGD, gradient accumulation 1, outputMode Sum) or 1,024
    (inference) a call, the same batch every call; samples a second over warm calls on a script's clock."""
    import torch

    from .. import poptorch, virtual_clock

    class DLRM(torch.nn.Module):  # 13 dense features and 26 sparse ones, embeddings of 128, dot interaction
        def __init__(self):
            super().__init__()
            def mlp(sizes, last):
                layers = [m for a, b in zip(sizes, sizes[1:]) for m in (torch.nn.Linear(a, b), torch.nn.ReLU())]
                return torch.nn.Sequential(*layers[:-1], last)
            self.bottom = mlp([13, 512, 256, 128], torch.nn.ReLU())
            self.tables = torch.nn.ModuleList(torch.nn.Embedding(n, 128) for n in DLRM_TABLE_ROWS)
            features = len(DLRM_TABLE_ROWS) + 1
            self.top = mlp([features * (features - 1) // 2 + 128, 1024, 1024, 512, 256, 1], torch.nn.Sigmoid())
            pairs = [(i, j) for i in range(features) for j in range(i)]
            self.register_buffer("rows", torch.tensor([i for i, _ in pairs], dtype=torch.int32))
            self.register_buffer("cols", torch.tensor([j for _, j in pairs], dtype=torch.int32))

        def forward(self, dense, ids, labels=None):
            x = self.bottom(dense)
            t = torch.stack([x] + [table(ids[:, k]) for k, table in enumerate(self.tables)], dim=1)
            z = torch.bmm(t, t.transpose(1, 2))[:, self.rows, self.cols]  # each pair's dot product once
            out = self.top(torch.cat([x, z], dim=1))
            return out if labels is None else (out, torch.nn.functional.binary_cross_entropy(out, labels))

    model, per_replica = DLRM(), 512 if training else 1024
    options = poptorch.Options().simulatedSystem(system).computeOutputsOnCpu(False).replicationFactor(4)
    batch = 4 * per_replica
    inputs = [torch.rand(batch, 13), torch.randint(0, 3, (batch, len(DLRM_TABLE_ROWS)))]
    if training:
        options.Training.setMeanAccumulationAndReplicationReductionStrategy(poptorch.MeanReductionStrategy.Running)
        options.outputMode(poptorch.OutputMode.Sum)
        groups = [{"params": model.bottom.parameters()}, {"params": model.top.parameters()},
                  {"params": model.tables.parameters(), "lr": 1.0}]
        runner = poptorch.trainingModel(model, options, poptorch.optim.SGD(groups, lr=1.0))
        inputs.append(torch.randint(0, 2, (batch, 1)).float())
    else:
        runner = poptorch.inferenceModel(model, options)
    runner(*inputs)  # compiles
    before = virtual_clock.totals()[1]
    calls = 3
    for _ in range(calls):
        runner(*inputs)
    return calls * batch / (virtual_clock.totals()[1] - before)


def streaming_read_rate(chunk_bytes: int, chunks: int) -> float:
    """``chunks`` loads of ``chunk_bytes`` each from streaming memory, one after another, on a Bow IPU
    (bytes/s over the whole sequence)."""
    system = load_system("bow-ipu")
    copies = Sequence([RemoteCopy(0, "load", chunk_bytes, f"chunk{i}") for i in range(chunks)])
    return chunks * chunk_bytes / system.cycles_to_seconds(Engine(system).run(copies).total_cycles)


# --- the checks ---------------------------------------------------------------------------------
_AMP_WHY = ("the AMP constants (128 FLOP/cycle fp16.16; 133 cycles per vertex + 197 per channel-group pair, "
            "the pair cost from poplibs: 133 and the 64-cycle weight load of the 16 conv units) are the sweep's "
            "linear fit 4N+330, whose residuals are within 2 %")
CHECKS = [
    *[Check(f"bow_amp_tile_N{n}", f"Bow tile AMP [{n},16]x[16,16] on 1472 tiles", pub, "TFLOP/s", 0.03,
            "fitted", _AMP_WHY, lambda n=n: amp_tile_tflops(n))
      for n, pub in ((16, 55.49), (128, 211.12), (512, 299.78), (2048, 334.94))],
    Check("tut6_matvec_total", "Poplar tutorial 6 on Mk2: total cycles", 25444984, "cycles", 0.01, "fitted",
          "host_prepare_bytes_per_s was fitted to it; the check keeps the rest of the model from drifting",
          lambda: tut6().cycle_count),
    Check("tut6_matvec_compute", "tutorial 6: compute cycles per tile", 28300.3, "cycles", 0.05, "predicted",
          "48 scalar C++ vertices per tile at the tutorial's 5 + 4 cycles per element; the figure is the "
          "average tile, the model the busiest",
          lambda: tut6().breakdown.loc[0, "compute"]),
    Check("tut6_matvec_exchange", "tutorial 6: on-chip exchange cycles", 8743.1, "cycles", 0.15, "predicted",
          "4 bytes/cycle/tile at the exchange efficiency fitted to poplibs' IPUModel2 benchmarks (0.87), and the "
          "bytes each tile receives; exchange set-up costs are estimates",
          lambda: tut6().breakdown.loc[0, "exchange"]),
    Check("tut6_matvec_host_exchange", "tutorial 6: host exchange cycles (StreamCopyMid)", 2641488.4, "cycles",
          0.02, "fitted", "gateway_to_ipu_bytes_per_s was fitted to it", tut6_host_exchange),
    Check("m2000_host_to_gateway", "IPU-M2000: host link shared by 4 IPUs streaming at once", 7.06e9, "B/s", 0.01,
          "measured constant", "the link is one resource for the chassis; fixed costs are excluded",
          m2000_host_link_shared),
    Check("m2000_gateway_to_host", "IPU-M2000: gateway to host", 2.93e9, "B/s", 0.01, "measured constant",
          "unit conversion of the configured rate", m2000_gateway_to_host),
    Check("m2000_ipu_pair_link", "IPU-M2000: IPUs 2 and 3, both directions", 52.9e9, "B/s", 0.02,
          "measured constant", "the two directions are separate link resources; per-copy latency included",
          m2000_ipu_pair),
    Check("host_sync_rate", "4095 host syncs, each then 32 x 5 cycles", 1485e-6, "s", 0.01, "measured constant",
          "the host sync constant was derived from this figure", host_syncs),
    *[Check("overlap_io_profile", f"PopTorch host-IO profile: {what}", pub, "cycles/iteration", 0.25,
            kind, "read off the user guide's figures; the profiled model is not given, the io-bound "
            "microbenchmark was chosen so its unbuffered cycles landed near 255k while the host's fill "
            "of the one buffer was on the IPU's path (before PopART's prefetch refilled it ahead)",
            lambda s=setting: io_bound_cycles(s))
      for setting, what, pub, kind in (
          ("none", "no buffering", 255_000, "workload chosen to match"),
          ("prefetch", "prefetch depth 3", 190_000, "predicted"),
          ("io_tiles", "depth 3 + 64 IO tiles + overlap", 170_000, "predicted"))],
]


#: where :data:`VERTEX_CHECKS` come from
TESSELLATE_BASICS = ("graphcore-research/tessellate-ipu `notebooks/01-tessellate-ipu-tile-api-basics.ipynb` at "
                     "3ab241f3: `tile_map(jax.lax.add_p, lhs, rhs)`, one `popops::BinaryOp1D<ADD,float>` per tile "
                     "(`tessellate_ipu/lax/tile_lax_binary.py`) on data already sharded and replicated there, timed "
                     "on hardware between two `ipu_cycle_count` reads and printed in microseconds at the device's "
                     "tile clock (1.85 GHz: a Bow IPU); less the 45 cycles two successive counts take "
                     "(`tile_interpreter_hw_primitives.py` `ipu_cycle_count_overhead`, measured); and the same "
                     "repository's reference cycles for its `scaled_add` (`tests/lax/test_tile_lax_basic.py`, "
                     "`tests/linalg/test_tile_linalg_jacobi.py`: one `popops::ScaledAddSupervisor<float,float,float,"
                     "false>`, A += scaleB x B with scaleB a one-element tensor, on one tile, between the same two "
                     "counter reads on the hardware; the device not named in the tests), less the same 45")
#: cycles two successive ``ipu_cycle_count`` reads take on a tile (tessellate-ipu
#: ``tile_interpreter_hw_primitives.py`` ``ipu_cycle_count_overhead``, measured), taken off every count it brackets
CYCLE_COUNT_OVERHEAD = 45
#: cycles of a tiny compute set measured on hardware, beside what the simulator prices it at
VERTEX_CHECKS = [
    Check("tessellate_add_fp32", f"Bow: one compute set adding two fp32 vectors of {n:,} elements on a tile ({where})",
          round(us * 1.85e3) - CYCLE_COUNT_OVERHEAD, "cycles", 0.05, "predicted",
          "a single run printed to 4-5 digits; the simulator prices the compute set as poplibs' vertex "
          "estimate (its fixed part and 1.5 cycles an element) plus an on-chip sync, which together "
          "stand for what the hardware spends beyond the workers' loop",
          lambda n=n: add_compute_set_cycles(n))
    for n, where, us in ((10, "the notebook's (3, 5, 2) input on 3 tiles", 0.1783783783783784),
                         (1024, "on 4, 16, 128 and 1,024 tiles alike", 1.0054054054054054))]
VERTEX_CHECKS += [
    Check("tessellate_scaled_add_fp32", f"Mk2 or Bow: one compute set adding a scaled fp32 vector of {n} elements into "
          "another on one tile (popops ScaledAddSupervisor)", raw - CYCLE_COUNT_OVERHEAD, "cycles", 0.2, "predicted",
          "a known gap, held so it does not widen: the cycles an element are the estimator's 1.5 (the hardware's "
          "1.49), the fixed part is poplibs' (scaledArithmeticSupervisorCycleEstimate, 200 with the supervisor) and "
          "about 57 cycles above the hardware's; fitted to these it would move Poplar's IPUModel rows that run the "
          "same vertex out of 5 % (fc_layer_1440x200x400, inception_tr_bs4_i6_c1x7b) and flip a scatter-add's plan "
          "to a dearer one, so it is not", lambda n=n: accumulate_compute_set_cycles(n))
    for n, raw in ((64, 375), (128, 467), (256, 665), (512, 1043))]


def profile_kernel_cycles(groups: int, rows: int, inner: int, cols: int, itemsize: int = 2) -> int:
    """Cycles of the AMP vertex's compute set on the busiest tile of ``groups x [rows, inner] @ [inner, cols]``
    (operands of ``itemsize`` bytes: 2 fp16, 1 FP8; half partials) as the simulator plans it on a C600 at
    inference: poplin's plain / inference pass, operands swapped or not by its estimate,
    availableMemoryProportion 0.6 (sim/cost/matmul_swap.py); the convolution's compute set alone, as a
    profile shows it (no copies, reduction or cast)."""
    ipu = load_system("c600").ipu
    plan, _ = plan_matmul_none_pass(groups, rows, inner, cols, itemsize, ipu, ipu.tiles, 0.6, 2)
    return plan.kernel_cycles


def profile_softmax_cycles(rows: int = 16 * 729, width: int = 736) -> int:
    """The simulator's compute cycles of popnn's stable softmax over ``rows`` fp16 rows of ``width`` on a C600,
    the rows spread evenly over the tiles: the busiest tile's cycles of each of its compute sets (the row
    maximum, the subtraction, exp, the row sum, its reciprocal and cast, the multiplication), summed."""
    return _single_op_cost("softmax", (rows, width), "float16", "c600", None).compute_cycles


#: where :data:`KERNEL_CHECKS` come from
PROFILE_KERNELS = ("osmarks/ipu-stack `docs/SDK_ONNX_PROFILE_ANALYSIS.md` at 3b2cc3f7: its author's reading of two "
                   "PopVision profiles of a PopRT-compiled (SDK 3.4.0) SigLIP So400m/14 vision tower on a C600 (batch "
                   "1, 729 tokens of width 1,152, 16 heads of 72, MLP 4,304): one with FP8 weights cast to fp16 before "
                   "ordinary fp16 matmuls (`ConvPartial1x1Out<half,half,...,16,4,...>`: half partials, 64-bit loads), "
                   "one all FP8 (`ConvPartial1x1Out<quarter,half,...,16,8,...>`, the scores and context too); the "
                   "longest tile's cycles of each matmul's convolution compute set in the first block, its exchanges, "
                   "syncs, casts and reductions apart, and the sum of the scores' softmax's seven compute sets (the "
                   "execution trace's compute sets are measured). PopRT's options for the model are not stated, so "
                   "the planning proportion is poplin's default [U]; the profile shows the grid of one plan only "
                   "(QK^T: 2 x 46 tiles a head, 365 query rows by 16 keys, the keys' 72 channels padded to 80 in "
                   "fp16 and 96 in FP8, which the simulator's plans match)")
#: matmul kernels and a softmax measured on IPU21 hardware, beside the simulator's AMP vertex on its own plan
#: of each matmul and its softmax's compute sets
KERNEL_CHECKS = [
    *(Check("siglip_matmul_kernel", f"C600: {what}, {f'{groups} x ' if groups > 1 else ''}[{rows}, {inner}] x "
            f"[{inner}, {cols}] {dtype}: the AMP compute set on the busiest tile", published, "cycles", 0.15,
            "predicted", "one profile of each precision; the fp16 AMP constants were fitted on a Bow sweep of one "
            "tile's [N,16] x [16,16] (first table), the FP8 ones are poplibs' estimators, none on these; the plan "
            "poplin chose is not published but for QK^T's grid, so a different split of the same work (fp16 PV: "
            "the simulator's is 12 % cheaper) is what the tolerance holds",
            lambda g=groups, m=rows, k=inner, n=cols, size=itemsize: profile_kernel_cycles(g, m, k, n, size))
      for dtype, itemsize, measured in (("fp16", 2, (37277, 8488, 12900, 14153, 48248, 52187)),
                                        ("FP8", 1, (22415, 5502, 7377, 8178, 26425, 28265)))
      for (what, groups, rows, inner, cols), published in zip(
          (("fused QKV projection", 1, 729, 1152, 3456), ("scores QK^T, a head a group", 16, 729, 72, 729),
           ("context PV, a head a group", 16, 729, 729, 72), ("attention output projection", 1, 729, 1152, 1152),
           ("MLP up", 1, 729, 1152, 4304), ("MLP down", 1, 729, 4304, 1152)), measured)),
    Check("siglip_softmax_kernels", "C600: softmax over 16 x 729 fp16 rows of 736 (the keys padded), 8 rows a tile "
          "on 1,458 tiles: its seven compute sets' busiest-tile cycles, summed", 18300, "cycles", 0.15, "predicted",
          "read as 'about 18,300' (the sum of seven compute sets' maxima, not a span); the simulator's seven are "
          "popops' and popnn's estimates of the same steps (reduce max, subtract, exp, reduce add, reciprocal, "
          "cast, multiply)", profile_softmax_cycles),
]


#: where :data:`CONV_HW_CHECKS` come from
CONV_HW_SOURCE = (
    "thorbenlouw/lbm-graphcore at df670f6 (`main/GaussianBlurPoplibs.cpp`, "
    "`experiments/effect-of-mem-on-convolution/results.csv`; GC2 IPUs of 1,216 tiles, by the authors' paper and The "
    "Next Platform's account of it, an SDK of 2020 not stated): a 3x3 Gaussian blur of a 4-channel image as one "
    "`poplin::convolution` (batch 1, 4 output channels, padding 1, INFERENCE_FWD, remapOutputTensor and "
    "use128BitConvUnitLoad on, availableMemoryProportion 0.6 here), then a copy of the result back into the "
    "input, repeated 200 times between two `cycleCount` reads on one IPU, the average of 5 runs over the tile "
    "clock; here the time over 200")
#: the same source's sweep of availableMemoryProportion (``experiments/effect-of-mem-on-convolution``, one IPU;
#: the experiment checked in on 2020-08-22, before SDK 1.3): per image (name, width, height) and precision, the
#: seconds of 200 iterations at proportions 0.1, 0.2, ... (None: the run failed, no reason recorded)
CONV_BUDGET_SWEEP = {
    ("bricks", 499, 302, "float16"): (0.00060595,) * 9,
    ("bricks", 499, 302, "float32"): (0.0016749,) * 9,
    ("leaf", 768, 1024, "float16"): (0.045276,) + (0.0016564,) * 8,
    ("leaf", 768, 1024, "float32"): (0.060271,) + (0.0063728,) * 8,
    ("cheese", 2200, 1122, "float16"): (0.14364, 0.13709, 0.16151) + (0.0044717,) * 5,
    ("cheese", 2200, 1122, "float32"): (0.17731, 0.17731, 0.18564, 0.18564, None, None, None, None)}
#: a poplin convolution of few channels timed on Mk1 hardware, beside the simulator's: the sweep's runs at the
#: source's default proportion, 0.6
CONV_HW_CHECKS = [
    Check("lbm_blur_conv", f"Mk1: 3x3 blur of a {w} x {h} 4-channel {dtype} image, a convolution and its copy "
          "(lbm-graphcore)", CONV_BUDGET_SWEEP[image, w, h, dtype][5] / 200 * 1e6, "us", tolerance, "predicted", why,
          lambda w=w, h=h, dtype=dtype: blur_conv_us(w, h, dtype))
    for image, w, h, dtype, tolerance, why in (
        *((image, w, h, "float32", 0.1,
           "the planner runs 4 channels a group over 2 kernel rows (poplin's AMP candidates with fewer input "
           "channels than a conv unit's weights), no constant fitted; an SDK of 2020 [U]")
          for image, w, h in (("bricks", 499, 302), ("leaf", 768, 1024))),
        *((image, w, h, "float16", 1.2,
           "a known gap, held so it does not widen: 4 channels a group over 4 kernel rows, as in fp32, but to "
           "the vertex the simulator's plan adds the rearrangement of the output into padded partial-channel "
           "groups (HEAD poplin's planner charges it) and the cast of the fp32 partials to fp16, for which the "
           "hardware's time, about the vertex's alone, leaves no room [U]; before the folded channels the "
           "simulator was 2.3-4.1 x the hardware")
          for image, w, h in (("bricks", 499, 302), ("leaf", 768, 1024), ("cheese", 2200, 1122))))]

#: a run at least this many times the simulator's time ran another plan than the simulator's: poplin's
#: fallback when no plan fits the budget, the least-memory plan before SDK 1.3 (where a plan fits, the runs
#: are 0.48-1.02 times the simulator's, as in :data:`CONV_HW_CHECKS`; the others 9-17 times)
FALLBACK_FACTOR = 3


def conv_budget_rows() -> list[dict]:
    """For each image and precision of :data:`CONV_BUDGET_SWEEP`: the proportions it ran at (``ran``), those
    at which the hardware took 3 times the simulator's time or more (``hardware``: its fallback plan,
    :data:`FALLBACK_FACTOR`), and those at which the simulator's planner finds no plan within the budget
    (``simulated``, :func:`blur_plan_fits`)."""
    rows = []
    for (image, width, height, dtype), seconds in CONV_BUDGET_SWEEP.items():
        ran = {round(0.1 * (i + 1), 1): s for i, s in enumerate(seconds) if s is not None}
        slow = [p for p, s in ran.items() if s / 200 * 1e6 >= FALLBACK_FACTOR * blur_conv_us(width, height, dtype, p)]
        rows.append(dict(image=image, width=width, height=height, dtype=dtype, ran=sorted(ran), hardware=slow,
                         simulated=[p for p in sorted(ran) if not blur_plan_fits(width, height, dtype, p)]))
    return rows


#: where :data:`MICROBENCH_CHECKS` come from
MICROBENCH_SOURCES = (
    "graphcore-research/notebooks `sparsity_benchmarks/SpMM.ipynb` at 64da03b5 (PopSparse's demo; the paper's "
    "numbers are from a Bow IPU): a PopTorch `for_loop` of 2,000 dense matmuls W [m, k] @ x [k, n] (half partials, "
    "otherwise defaults: availableMemoryProportion 0.6), wall clock around one call over 2,000, printed as TFLOP/s "
    "of the non-zero work (here times 1/density: the dense FLOP/s), and, in cell 38, one warm call of its tiny "
    "dense demo (loop_count 1) around which it reads time.time(); and graphcore-research/llm-inference-research "
    "`benchmarks.json` (notebooks branch c9ea805; code ipu/sparq_benchmark.cpp on the benchmarks branch at 40f8a8f): "
    "SparQ's `attn-remote` on one Bow IPU (device_clock 1.85 GHz) reads its K and V from streaming memory in chunks "
    "of 128 positions, B MiB each, one after another in a counted loop, and `attn-local` keeps them on chip "
    "(variables mapped linearly over the tiles), host wall clock over a Repeat of the program; and "
    "graphcore-research/notebooks `compressed_dlrm/CompressedDLRM.ipynb` at e74385f (stored outputs; a 2023 "
    "Graphcore research machine with 4 IPUs, not named): Meta's DLRM at the MLPerf Criteo 1TB sizes, fp32, its "
    "26 embedding tables capped at 5,000 rows, through PopTorch with 4 replicas and the notebook's options "
    "(`Experiment.test_throughput`: the same batch passed 5,000 times, wall clock, no DataLoader)")
#: dense matmuls and streaming-memory reads timed on one Bow IPU, beside the simulator's
MICROBENCH_CHECKS = [
    *(Check("popsparse_dense_matmul", f"Bow: dense matmul [{m},{m}] x [{m},{n}] {dtype}, {partials} partials "
            "(SpMM notebook, dense run)", published, "TFLOP/s", 0.15, "predicted",
            "wall clock over a loop of 2,000 (the loop's own steps and one host copy each way included, which "
            "the simulated matmul leaves out); read off the PopSparse paper's plot of the same sweep (to about "
            "3 %), 59 of its 65 points are within 10 % and its largest shapes 7-8 % above the simulator "
            "(docs/reference/published-results.md 5), the gap this tolerance holds from widening",
            lambda m=m, n=n, dtype=dtype: dense_matmul_tflops(m, m, n, dtype))
      for m, n, dtype, partials, published in ((4096, 1024, "float16", "half", 197.7),
                                               (4096, 2048, "float16", "half", 211.0),
                                               (4096, 512, "float32", "float", 52.45))),
    *(Check("sparq_attn_local", f"Bow: decode attention, batch {batch}, {keys:,} cached keys, 32 heads of 128 "
            "(SparQ attn-local: q K^T, scale, softmax, @ V)", us, "us", 0.5, "predicted",
            "a known gap, held so it does not widen: the simulator prices the four ops 25-45 % under the "
            "hardware. poplin's planner (ConvPlan.cpp) would swap the operands of these one-row grouped "
            "matmuls and run them as HMAC vertices, whose estimate is cheaper still; the hardware's time (about "
            "2.6 cycles a cached element a tile a matmul, and some 20k fixed cycles) fits neither plan, and no "
            "profile says which poplin ran",
            lambda batch=batch, keys=keys: decode_attention_us(batch, keys))
      for batch, keys, us in ((1, 1024, 20.82), (1, 16384, 133.73), (16, 1024, 135.28))),
    Check("poptorch_call", "PopTorch: one warm call of an inferenceModel multiplying a [5,5] and a [5,4] fp32 "
          "matrix (SpMM notebook cell 38, dense)", 0.4995, "ms", 0.02, "fitted",
          "host_link.poptorch_call_s was fitted to it (n=1; time.time() around the one call), less the 31 us the "
          "simulator gives the call's device work (its host copies, syncs, its input's StepIO callback and the "
          "matmul's compute set); the check keeps the device side from drifting",
          lambda: poptorch_call_seconds() * 1e3),
    *(Check("dlrm_poptorch_call", f"PopTorch on 4 IPUs: DLRM {what} (hashing trick, tables of at most 5,000 rows, "
            f"fp32), {per_replica:,} samples a replica a call (CompressedDLRM notebook, cell 61)", published,
            "items/s", 0.25, "predicted",
            "5,000 warm calls of one device iteration timed by wall clock, so each holds PopTorch's host work "
            "(poptorch_call_s) and its 4 replicas' input copies, each waiting on PopART's StepIO callback "
            "(stream_callback_s, from PopTorch's host-IO profile, not fitted to this); the machine is not named [U], "
            "simulated on a Bow-2000 (an IPU-M2000 gives 534k and 3.27M: the device's clock moves the rows by "
            "6-9 %)",
            lambda training=training: dlrm_items_per_second(training))
      for what, training, per_replica, published in (("training (SGD)", True, 512, 468515),
                                                    ("inference", False, 1024, 3155996))),
    Check("sparq_streaming_read", "Bow: streaming memory read in 64 MiB chunks one after another (SparQ "
          "attn-remote, B 64, S 8,192: 128 chunks in 1.210 s)", 128 * 64 * 2**20 / 1.210304, "B/s", 0.03,
          "fitted", "streaming_memory.bytes_per_s_per_ipu was fitted to the sweep's time per chunk against its "
          "bytes (B 1-64; 7.11 GB/s and 19 us a chunk for its matmul); a 64 MiB chunk is 99.8 % copy",
          lambda: streaming_read_rate(64 * 2**20, 128)),
]

