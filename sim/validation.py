"""Validation: the simulator against published hardware figures.

Each :class:`Check` names a figure of ``../shared/calibration/hardware.csv`` (its published
value is copied here, with the source, so the checks run without that file), how the simulator
reproduces it, the tolerance and why, and whether a constant was fitted to it (then the check
only guards the fit) or the model predicts it. ``tests/test_calibration.py`` holds the model to
the tolerances; ``python -m sim.validation`` writes the table to ``reports/validation.md``.

End to end: :data:`END_TO_END` (published throughputs held at 30 %) and the held-out rows of
``docs/reference/published-results.md`` (:data:`PUBLISHED_ROWS`, :data:`SCALING`): each a zoo model
configured as the row's source configures the run; those within 30 % when added (or within 25 %
since, :data:`PROMOTED`) are asserted at 30 %, the others are tracked in the report;
:data:`NOT_EXPRESSIBLE` lists the rows the zoo cannot run yet, and why.

Memory: :data:`MEMORY_ROWS` (poplibs' published IPUModel2 memory of single fully connected layers;
:data:`EMBEDDING_MEMORY_ROWS`, of its embedding layers),
:data:`KERAS_DENSE_ROWS` (a published PopVision profile of one Keras Dense layer, category by
category: the program-memory code constants are fitted to it) and :data:`MEMORY_FITS`
(configurations Graphcore publishes as fitting); asserted only once within their tolerance.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

import models

from . import compile as compile_graph
from . import poplibs_benchmarks, simulate
from .compiler.memory import IpuMemory
from .cost import op_cost
from .cost.amp import pass_fixed_cycles
from .engine import Engine
from .errors import OutOfMemoryError
from .graph import Graph, GraphBuilder
from .graph.training import Optimizer
from .hardware.system import load_system
from .options import CommGroupType, Options, OutputMode, OverlapMode, PipelineCopies, TensorLocationSettings
from .program import Compute, IpuCopy, OpSteps, Repeat, Sequence, StreamCopy, Sync, leaves
from .schedule.collectives import partition_sync, plan_collective
from .schedule.replicated_ops import NORM_COLLECTIVE_SUFFIX
from .strategy import AutoStage, ShardedExecution

REPORT = Path(__file__).resolve().parent.parent / "reports" / "validation.md"


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
    """Poplar tutorial 6 (matrix-vector, host streaming) on one Mk2 IPU."""
    return simulate(models.get("tut6-matvec"), "ipu-mk2")


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


# --- end to end: published throughputs, never used to fit anything ------------------------------
PERFORMANCE_RESULTS = "graphcore.ai/performance-results (Bow Pod training table, pre-SDK 2.5 rows)"


@lru_cache(maxsize=None)
def resnet50_training(system: str, replicas: int, global_batch: int, amp: float, micro_batch: int = 20,
                      replicas_per_process: int = 2) -> float:
    """ResNet-50 training as Graphcore's TF1 ResNet-50 config runs it (:func:`_resnet_e2e`), images/s."""
    setup = _resnet_e2e(system, replicas, global_batch, amp, micro_batch, replicas_per_process)
    return simulate(setup.graph(), system, setup.options(), training=True,
                    optimizer=setup.sim_optimizer()).samples_per_second


_E2E_WHY = ("published by Graphcore for another software stack and data pipeline; a guard against "
            "regressions, not a fit: nothing was tuned to it")
END_TO_END = [
    Check("resnet50_bow_pod16", "ResNet-50 training, Bow Pod16, batch 1,920", 42029, "images/s", 0.3,
          "end to end", _E2E_WHY, lambda: resnet50_training("bow-pod16", 16, 1920, 0.15)),
    Check("resnet50_bow_pod64", "ResNet-50 training, Bow Pod64, batch 2,560", 145287, "images/s", 0.3,
          "end to end", _E2E_WHY, lambda: resnet50_training("bow-pod64", 64, 2560, 0.145, replicas_per_process=4)),
    Check("bert_large_ph1_bow_pod16", "BERT-Large phase 1 (SL128), Bow Pod16, GBS 65,536", 5179, "sequences/s", 0.3,
          "end to end", _E2E_WHY, lambda: PUBLISHED_BY_ID["B10"].simulated()),
    Check("bert_large_ph1_bow_pod64", "BERT-Large phase 1 (SL128), Bow Pod64, GBS 65,536", 19353, "sequences/s", 0.3,
          "end to end", _E2E_WHY, lambda: PUBLISHED_BY_ID["B12"].simulated()),
]


# --- held-out published measurements (docs/reference/published-results.md) ---------------------
# Every row is a published hardware measurement, the zoo model configured as the row's source
# configures the run. None was used to set anything. A row within 30 % when it was added is
# asserted at 30 % by tests/test_calibration.py (a regression guard); the others are tracked in
# reports/validation.md only. Nothing here may be changed to make a row match: fix the model.
PUBLISHED = "docs/reference/published-results.md"
PUBLISHED_TOLERANCE = 0.30
PUBLISHED_WHY = ("within 30 % when the row was added, so held there as a regression guard; not a fit "
                 "(another software stack and data pipeline, nothing tuned to it)")


def _params(**params) -> tuple:
    """Model parameters as a hashable tuple (lists become tuples)."""
    def frozen(v):  # nested lists too (att_ffn_placement)
        return tuple(frozen(x) for x in v) if isinstance(v, (list, tuple)) else v
    return tuple((k, frozen(v)) for k, v in params.items())


def _show(value) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Setup:
    """A zoo model run as a published measurement was: the model's parameters, the system, and the
    PopTorch options the source's configuration sets."""

    model: str
    params: tuple  # (name, value) pairs for models.get (see _params)
    system: str
    replicas: int = 1  # replicationFactor
    accumulation: int = 1  # Training.gradientAccumulation
    device_iterations: int = 1
    amp: tuple = ()  # availableMemoryProportion of IPU0, IPU1, ... of one replica
    half_partials: bool = True  # Precision.setPartialsType("half")
    optimizer_off_chip: bool = False  # optimizer state in streaming memory
    rts: bool = False  # optimizer state sharded over the replicas
    training: bool = True
    optimizer: str = "sgd"
    state_dtype: str | tuple = "float32"  # Optimizer.state_dtype: one dtype, or one per state (m, v)
    synthetic: bool = False  # enableSyntheticData: no host IO
    io_tiles: int = 0  # TensorLocations.numIOTiles
    overlap_io: bool = False  # every host stream overlapped (OverlapDeviceIterationLoop), ShardedExecution
    sharded: bool = False  # ShardedExecution(AutoStage.AutoIncrement): the IPUs run one after another, no pipeline
    prefetch_depth: int = 1  # _Popart defaultPrefetchBufferingDepth
    output_mode: str = ""  # outputMode as an OutputMode member name ("All", "Sum", ...); "": the default
    merged_collectives: tuple = ()  # collective kinds merged into one call ("all_reduce", ...): PopART's
    # replicatedCollectivesSettings, or graphcore/tensorflow combining them (maximum_*_buffer_size)
    sharding_domain: int = 0  # RTS over groups of this many consecutive replicas (PopART's shardingDomain); 0: all
    accum_dtype: str = ""  # the gradient accumulators' dtype (PopTorch accum_type, PopART accumType); "": the weights'
    clip_norm: float = 0.0  # gradients clipped to this global norm (PopART ClipNormSettings, max_grad_norm); 0: none
    pytorch_bert_groups: bool = False  # the parameter groups of Graphcore's PyTorch BERT (pytorch_bert_groups)
    poplin_options: tuple = ()  # (name, value) pairs set in PopART's matmulOptions and convolutionOptions
    auto_loss_scaling: bool = False  # Training.setAutomaticLossScaling(True)
    per_stage_copies: bool = False  # a TensorFlow pipeline: each stage's inter-IPU copies one after another
    stable_norm: bool = False  # enableStableNorm (TensorFlow's norms.use_stable_statistics)
    non_stable_softmax: bool = False  # PopART's enableNonStableSoftmax (PopRT's enable_non_stable_softmax)
    clear_pass_type: bool = False  # enableFullyConnectedPass off (TensorFlow's matmuls.clear_pass_type)
    combined_accum: bool = False  # momentum SGD's velocity as the gradient accumulator (SGD use_combined_accum)
    processes: int = 1  # host processes (PopRun instances) feeding the replicas, each one callback thread

    def graph(self):
        g = models.get(self.model, **{k: list(v) if isinstance(v, tuple) else v for k, v in self.params})
        if self.overlap_io:  # as poptorch.set_overlap_for_input/output in the user's model
            for name in [*g.inputs, *g.outputs]:
                g.overlap[name] = int(OverlapMode.OverlapDeviceIterationLoop)
        return g

    def options(self) -> Options:
        o = Options().replicationFactor(self.replicas).deviceIterations(self.device_iterations)
        if self.accumulation > 1:
            o.Training.gradientAccumulation(self.accumulation)
        if self.half_partials:
            o.Precision.setPartialsType("half")
        if self.amp:
            o.setAvailableMemoryProportion({f"IPU{i}": p for i, p in enumerate(self.amp)})
        if self.optimizer_off_chip or self.rts:
            o.TensorLocations.setOptimizerLocation(
                TensorLocationSettings().useOnChipStorage(not self.optimizer_off_chip)
                .useReplicatedTensorSharding(self.rts))
        if self.synthetic:
            o.enableSyntheticData(True)
        if self.io_tiles:
            o.TensorLocations.numIOTiles(self.io_tiles)
        if self.overlap_io:
            o.setExecutionStrategy(ShardedExecution())
        if self.sharded:
            o.setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
        if self.prefetch_depth > 1:
            o._Popart.set("defaultPrefetchBufferingDepth", self.prefetch_depth)
        if self.output_mode:
            o.outputMode(OutputMode[self.output_mode])
        for kind in self.merged_collectives:
            o._Popart.set(f"replicatedCollectivesSettings.{Options.MERGE_KEYS[kind]}", True)
        if self.sharding_domain:
            o._Popart.set(Options.SHARDING_DOMAIN_KEYS["optimizer"], (CommGroupType.Consecutive, self.sharding_domain))
        if self.poplin_options:
            o.set_poplin_options(dict(self.poplin_options))
        if self.auto_loss_scaling:
            o._Popart.set("automaticLossScalingSettings.enabled", True)
        if self.per_stage_copies:
            o.pipelineCopies(PipelineCopies.PerStage)
        if self.stable_norm:
            o.enableStableNorm(True)
        if self.non_stable_softmax:
            o._Popart.set("enableNonStableSoftmax", True)
        if self.clear_pass_type:
            o._Popart.set("enableFullyConnectedPass", False)
        if self.processes > 1:
            o.hostProcesses(self.processes)
        return o

    def sim_optimizer(self) -> Optimizer | None:
        if not self.training:
            return None
        groups = _pytorch_bert_groups(self) if self.pytorch_bert_groups else {}
        return Optimizer(self.optimizer, self.state_dtype, self.accum_dtype or None, self.clip_norm or None,
                         combined_accum=self.combined_accum, **groups)

    def describe(self) -> str:
        parts = [f"`{self.system}`", f"`{self.model}` " + ", ".join(f"{k}={_show(v)}" for k, v in self.params)]
        if self.training:
            parts.append(f"training, RF {self.replicas}, GA {self.accumulation}")
        else:
            parts.append(f"inference, RF {self.replicas}, deviceIterations {self.device_iterations}")
        if self.amp:
            parts.append("AMP {" + ", ".join(f"IPU{i}: {p:g}" for i, p in enumerate(self.amp)) + "}")
        parts.append("half partials" if self.half_partials else "float partials")
        if self.training:
            where = ("off chip" if self.optimizer_off_chip else "on chip") + (" + RTS" if self.rts else "")
            if self.rts and self.sharding_domain:
                where += f" over groups of {self.sharding_domain} replicas"
            parts.append(f"{self.sim_optimizer().describe()}, optimizer state {where}"
                         + (", automatic loss scaling" if self.auto_loss_scaling else ""))
        parts.append("synthetic data" if self.synthetic else "real data (host IO" + (
            f", {self.processes} host processes)" if self.processes > 1 else ")"))
        if self.io_tiles:
            parts.append(f"{self.io_tiles} IO tiles" + (", all streams overlapped (ShardedExecution)"
                                                        if self.overlap_io else ""))
        if self.prefetch_depth > 1:
            parts.append(f"prefetch depth {self.prefetch_depth}")
        if self.output_mode:
            parts.append(f"outputMode {self.output_mode}")
        if self.merged_collectives:
            parts.append(" and ".join(k.replace("_", "-") + "s" for k in self.merged_collectives) + " merged")
        if self.sharded:
            parts.append("ShardedExecution")
        if self.per_stage_copies:
            parts.append("each stage's inter-IPU copies one after another (TensorFlow)")
        if self.stable_norm:
            parts.append("enableStableNorm")
        if self.non_stable_softmax:
            parts.append("enableNonStableSoftmax")
        if self.clear_pass_type:
            parts.append("enableFullyConnectedPass off")
        if self.poplin_options:
            parts.append("poplin options " + ", ".join(f"{k}={v}" for k, v in self.poplin_options))
        return "; ".join(parts)


def pytorch_bert_groups(graph, optimizer: str) -> dict[str, tuple[str, ...]]:
    """The per-weight settings of Graphcore's PyTorch BERT optimizer (graphcore/examples
    nlp/bert/pytorch/optimization.py ``get_optimizer``, SDK 3.1 c0239af): biases without weight
    decay or LAMB's trust ratio (``max_weight_norm`` 0), other 1-D weights without weight decay,
    both made constant (``markAsConstant``). Hugging Face names a LayerNorm's beta ``bias``; the
    zoo names it ``beta``."""
    one_d = [w.name for w in graph.weights() if len(w.shape) == 1]
    biases = [n for n in one_d if n.endswith("bias") or n.endswith("/beta")]
    return {"no_weight_decay": tuple(one_d), "no_trust_ratio": tuple(biases) if optimizer == "lamb" else ()}


@lru_cache(maxsize=None)
def _pytorch_bert_groups(setup: Setup) -> dict[str, tuple[str, ...]]:
    return pytorch_bert_groups(setup.graph(), setup.optimizer)


@lru_cache(maxsize=None)
def _simulated(setup: Setup) -> tuple[float, dict[str, float], float] | OutOfMemoryError:
    """One simulated call of ``setup``, kept small: (samples per second, seconds per weight update
    on the first IPU by breakdown line: the call's over its device iterations, and of the
    ``collective`` line the weight update's: all but the distributed norms' statistics), or the
    simulator's out-of-memory error. The report's sections share it, so each setup is simulated once."""
    try:
        run = simulate(setup.graph(), setup.system, setup.options(), training=setup.training,
                       optimizer=setup.sim_optimizer())
    except OutOfMemoryError as e:
        return e
    scale = run.executable.system.ipu.clock_hz * setup.device_iterations
    first = run.breakdown.iloc[0]
    trace = run.trace
    ipu = run.breakdown.index[0]
    update = trace[(trace.ipu == ipu) & (trace.kind == "collective")
                   & ~trace.name.str.endswith(NORM_COLLECTIVE_SUFFIX)]
    return (run.samples_per_second, {line: float(first[line]) / scale for line in first.index},
            float(update.cycles.sum()) / scale)


def _outcome(setup: Setup) -> float | OutOfMemoryError:
    """Samples per second of one simulated call, or the simulator's out-of-memory error."""
    value = _simulated(setup)
    return value if isinstance(value, OutOfMemoryError) else value[0]


def _oom_text(e: OutOfMemoryError) -> str:
    return (f"OOM in the simulator: IPU {e.ipu} short by {e.shortfall_bytes:,} bytes per tile"
            + (f" at {e.op}" if e.op else ""))


@dataclass(frozen=True)
class Row:
    """One published measurement of :data:`PUBLISHED` and the simulator's value for it."""

    id: str  # the row id in PUBLISHED ("I1 bs8": row I1 at batch 8)
    source: str  # the source's table tag and the row id, e.g. "MLP v1.0 M5"
    what: str
    published: float
    unit: str
    setup: Setup
    asserted: bool  # within 30 % when added, or since (PROMOTED): tests/test_calibration.py holds it there
    notes: tuple = ()  # where the run departs from the source's configuration: DEPARTURES keys or text

    def outcome(self) -> float | OutOfMemoryError:
        return _outcome(self.setup)

    def simulated(self) -> float:
        value = self.outcome()
        if isinstance(value, OutOfMemoryError):
            raise value
        return value


# Where a run departs from its source's configuration: each row's notes name these keys (the
# report lists them once, under the table), or say it in their own words.
DEPARTURES = {
    "lars": "LARS as the TF1 code runs it (lars_optimizer.py; norms merged into one ReduceMany, as "
            "max_reduce_many_buffer_size 216 does; its momentum in fp16, the weights' dtype at precision 16.16); "
            "IPUOptimizer's weight-decay term added to every gradient is not modelled",
    "tf1-calls": "train.py runs (1,281,167 // GBS) // 5 weight updates per session.run (logs_per_epoch 5 in "
                 "every ResNet-50 MLPerf config; iterations_per_step = log_freq), simulated as one call of as many "
                 "device iterations; the published figure is an epoch's images over its time, 5 such calls with the "
                 "script's work between them, which is not modelled (\"ResNet-50 MLPerf: time per step\" below)",
    "resnet-recompute": "recomputation as TF1 runs the config's pipeline of 7 stages on one IPU (pipeline_splits "
                        "b1/0, b1/2, b2/0, b2/2, b3/0, b3/3 with shards 1): every forward stage but the last is "
                        "recomputed (graphcore/tensorflow pipeline_recomputation.cc), the zoo's checkpoints at "
                        "those 6 block outputs (layer1/0 ... layer3/3), layer3/4 to the head not recomputed",
    "bn-span": "configs.yml BN_span 2 (the logs' model_bn_span is 2 x the micro-batch): each batch norm's "
               "statistics and its gradient sums are all-reduced over pairs of adjacent replicas (TF's "
               "number_of_distributed_batch_norm_replicas, poplibs' distributed batch norm), the zoo's "
               "bn_span=2; the recomputed forward all-reduces its statistics again [U]",
    "stable-norm": "the MLPerf v1.0 configs.yml sets stable_norm: True (TF's norms.use_stable_statistics, PopTorch's "
                   "and PopART's enableStableNorm; v1.1, v2.0 and the examples repo's ResNet-50 MLPerf "
                   "configs do not): poplin's stable estimator, the mean's all-reduce then the power's "
                   "(lib/poplin/Norms.cpp normStatisticsImpl)",
    "tf-stable-norm": "TensorFlow's norms.use_stable_statistics, as the example sets it (PopTorch's and PopART's "
                      "enableStableNorm): each norm reduces its mean, subtracts it, then reduces the "
                      "power (lib/poplin/Norms.cpp normStatisticsImpl, stableAlgo)",
    "tf-clear-pass": "TensorFlow's matmuls.clear_pass_type, as the TF1 BERT's ipu_utils.py sets it (PopART's "
                     "enableFullyConnectedPass off): graphcore/tensorflow gives no matmul a fullyConnectedPass "
                     "(GetMatMulOptionsForInst), so poplin plans each as a plain matmul",
    "effnet": "the TF1 config as models/efficientnet.py builds it; not modelled: the source's drop-connect "
              "(a per-sample random scale of each residual branch), the base config's mixup (alpha 0.2) and "
              "cutmix (element-wise work on the images, a second loss term), conv dithering, the exchange target "
              "'memory', and its 32 IO tiles (the simulator, as PopTorch, takes no IO tiles with a pipeline); "
              "the Grouped schedule's cycles run as PopART's pipeline cycles, each stage's inter-IPU copies one "
              "after another as TensorFlow calls them (\"tf-copies\"); LARS's norms are merged into ReduceMany "
              "calls as in the MLPerf ResNet-50 rows, though this config sets no max_reduce_many_buffer_size "
              "[U]; the pre-SDK 2.5 rows (B4-B6) are assumed to run the SDK 3.0 config [U]",
    "resnext": "the TF1 config as models/resnet.py builds resnext101 (torchvision's layout: the stride on "
               "the 3x3 convolution); not modelled: the benchmark's 32 IO tiles (the simulator, as PopTorch, "
               "takes no IO tiles with a pipeline); the Grouped schedule runs as PopART's pipeline cycles with "
               "each stage's inter-IPU copies one after another (\"tf-copies\"); "
               "availableMemoryProportion is the default 0.6 (the config sets none); B7 (pre-SDK 2.5) is "
               "assumed to run the SDK 3.0 config [U]",
    "effnet-pod256": "RF 128 and GA 16 are inferred from the GBS of 6,144 at micro-batch 3 [U]; the config "
                     "lists no Pod256 entry",
    "host-processes": "each host process (PopRun instance) runs its replicas' stream callbacks on one thread, Poplar's "
                      "default (RuntimeOptions streamCallbacks.multiThreadMode singleThread, numWorkerThreads 0: \"the "
                      "main thread will execute all of the callbacks\"), and PopART, PopTorch and TensorFlow's infeeds "
                      "copy each replica's micro-batch into its stream buffer in a callback (popart devicex.cpp "
                      "PrefetchCallback; tensorflow poplar_executor.cc InfeedPrefetchCallback), so a process fills its "
                      "replicas' inputs one after another at host_prepare_bytes_per_s (Options.hostProcesses, "
                      "streamCallbackThreads). The processes are the source's: MLPerf ResNet-50 v1.0 POD16 8 of 2 "
                      "replicas, POD64 16 of 4 (run_and_time.sh INSTANCES); v1.1, v2.0 and the examples' TF1 and "
                      "PyTorch CNN scripts 2 replicas a process; EfficientNet and ResNeXt 1; ViT Pod64 8 of 2; "
                      "Conformer POD64 4 of 4; MLPerf BERT POD128/256 2 / 4 of 8; the other scripts one process for "
                      "all replicas (pre-SDK 2.5 rows B1-B7: the SDK 2.4 README's commands [U])",
    "vit-pretrain": "the loss is lam CE(labels) + (1 - lam) CE(rolled labels); the zoo builds one softmax "
                    "cross-entropy, whose gradient is the same work (a softmax less a mixed one-hot); the second "
                    "term's forward and the on-device accuracy (B x 1,000 values) are left out",
    "vit-not-modelled": "set by the source but not modelled: stochastic rounding; accumulateOuterFragmentSettings "
                        "OverlapMemoryOptimized with IPU 0 excluded (the simulator runs each IPU's update in "
                        "parallel); PopART's subgraph copying (JustInTime) and scheduleNonWeightUpdateGradientConsumersEarly; "
                        "the per-step host work timed with "
                        "each step (the next batch from the asynchronous DataLoader, scheduler.step(), setOptimizer())",
    "vit-pod64": "poprun with 8 instances of 2 replicas: PopTorch shards the optimizer state over each "
                 "instance's replicas (CommGroup(Consecutive, 2))",
    "unet": "the example's model as models/unet.py builds it (its default 572 x 572 input, 2 classes, dropout 0.5 "
            "at the bottom); not modelled: the metrics computed beside the loss (the Dice accuracy and the "
            "cross-entropy again), the loss scaling (LossScaleOptimizer, 128) and the gradient normaliser's scale "
            "of each gradient, the exchange target 'balanced', Keras' work between executions; the Grouped "
            "schedule runs as PopART's pipeline cycles, each stage's inter-IPU copies one after another and the "
            "crops sent straight to the stage that reads them (\"tf-copies\"); RecomputationMode.Auto run as PopART's pipeline recomputation "
            "(every forward stage but the last recomputed) [U]; the throughput is one execution's 240 images over "
            "its time (PerfCallback)",
    "swin": "Graphcore's port as models/swin.py builds it (each 7 x 7 window padded to 56 tokens, its "
            "RemapCE layout copies); throughput is the call's samples over the time from setOptimizer() to the "
            "call's return (train_swin.py: the DataLoader's next batch is outside it), setOptimizer's write of "
            "the learning rate not modelled; not modelled: stochastic rounding, the loss scaling (1,024), "
            "accumulateOuterFragmentSettings OverlapMemoryOptimized, PopART's subgraph copying (JustInTime) and "
            "scheduleNonWeightUpdateGradientConsumersEarly, RemapCE's regrouping after a matmul (priced as its plain "
            "layout copy)",
    "conformer": "the example's model as models/conformer.py builds it (WeNet's Conformer-medium: 12 encoder "
                 "blocks of d 256, 6 decoder blocks, vocabulary 4,233); not modelled: the loss scaling (1,024), "
                 "stochastic rounding, PopART's outlineThreshold 10 and its TiedGather patterns, the padding masks "
                 "made on the IPU from the lengths (constants here); the example sets no recomputation checkpoint, so "
                 "each pipelined stage recomputes from its stashed inputs; the label-smoothing loss is built as a "
                 "softmax cross-entropy (the same work); throughput is the step's samples over the time from the "
                 "call to setOptimizer()'s return (trainer.py: the DataLoader's next batch and the keys' decoding "
                 "come before the timer), scheduler.step() and setOptimizer() not modelled",
    "conformer-pod4": "the README lists POD4 figures under global batch 16,128 without a script: one replica, GA "
                      "4,032 [U]",
    "conformer-pod64": "poprun with 4 instances of 4 replicas (run_wenet_conformer_globalbs_16128_pod64.sh); without "
                       "RTS the instances change nothing the simulator models",
    "bert-recompute": "recomputation is the zoo's default for a pipelined BERT (a checkpoint after every layer)",
    "attn-dropout": "the config turns attention dropout off (PopART's \"no_attn_dropout\": true in the MLPerf "
                    "v1.0/v1.1 and examples' pretrain JSONs): run with the zoo's attention_dropout=0, its hidden "
                    "dropout 0.1 kept",
    "tf-combine": "graphcore/tensorflow combines the gradient all-reduces up to 10 MiB a call "
                  "(maximum_cross_replica_sum_buffer_size in ipu_utils.py); run as one merged call (the TF1 "
                  "config's reduce-scatter buffer is 0: its RTS reduce-scatters stay one per tensor)",
    "tf-copies": "TensorFlow's pipelines wrap each stage's inter-IPU copies in a Poplar function of their own and "
                 "call them one after another every cycle (graphcore/tensorflow pipeline_visitor.cc "
                 "HandleInterIpuCopy, to_function; its copy combiner joins no copies of different stages, which "
                 "depend on each other), where PopART merges every stage's copies into one call: run with "
                 "pipelineCopies(PerStage); a tensor a later stage reads goes straight to it (the Grouped and "
                 "Sequential schedules' PipelineCommunicationOptimizer turns a pass-through path into a FIFO)",
    "tf2": "TF2 config: optimizer state off chip (its default) without RTS; its MLM head has no transform "
           "layer (use_cls_layer false), the zoo's has one",
    "poprt": "hardware not named next to the figures; run on the C600 (configs/c600.toml: IPU21 at 1.5 GHz, "
             "PCIe Gen4 host link, no gateway) as the README's FP8 runs in the same table need IPU21 "
             "(--ipu_version ipu21, the C600's architecture) and PopRT's utilisation tool defaults to the C600 "
             "(doc section 3) [U]; PopRT's ONNX ResNet-50 takes uint8 images (eight_bit_io) and, exported by "
             "torch.onnx.export from torchvision's eval() model (examples/resnet50/test_resnet.py), has each batch "
             "norm folded into its convolution (the script's node names Conv_5 ... Gemm_126 count 127 nodes, none "
             "a BatchNormalization): the zoo's norm=\"folded\", a bias added per channel",
    "poprt-bps": "batches per step not stated: 100, as the README's run commands",
    "poprt-vit": "hardware not named: run on the C600 as the other PopRT rows (poprt) [U]; throughput is the batch over "
                 "the mean time of 2,000 asynchronous execute calls of one batch each (poprt_run.py). PopRT's Converter "
                 "passes fused_attention and attention_padding (the attention as one fused op, its 197 tokens padded) "
                 "are not modelled: the simulator prices the attention's matmuls, scale and softmax on 197 tokens; "
                 "its fast layer norm (at batch 8; disable_fast_norm at batch 32) is priced as popnn's. The script "
                 "sets no partials type; PopRT's other scripts opt in to half partials (partials_type 'half', or "
                 "their --half_partial flag), so its default is not stated [U]: run with half partials; with "
                 "Poplar's default float partials (the AMP at half rate, 8 conv units) the simulator gives 1,824 and "
                 "2,368 images/s (-30 %, -24 %)",
    "poprt-depth": "stream_buffering_depth 2, as the benchmark script",
    "poprt-fp8": "RT examples/resnet50 README's row \"first conv and last gemm use fp16\" (PopRT's Converter with "
                 "precision fp8, fp8_params F143,F143,-3,-3, fp8_skip_op_names naming the stem conv and the Gemm; "
                 "the script's default also skips Conv_13, the README's next row): the zoo's fp8_convs, each other "
                 "convolution casting its fp16 input to FP8 with FP8 weights and an fp16 result, on the C600's "
                 "FP8 AMP (poplibs' quarter vertex estimates); the FP8 scales cost nothing",
    "poprt-fp8-io": "from batch 64 the simulator's real-data rate stops at about 18.8 k images/s (2.8 GB/s of uint8 "
                    "images): per batch of 90 the host fills its one stream buffer (3.9 ms at "
                    "host_prepare_bytes_per_s, fitted on an IPU-M2000 host with Poplar tutorial 6 and carried over "
                    "to the C600's host), then the IPU copies it over PCIe to the IO tiles (0.9 ms) before the next "
                    "fill, longer than the IPU's compute of a batch; the published 23.5 k images/s needs at least "
                    "3.5 GB/s from the host (PopRT's benchmark submits from several host threads, which the "
                    "simulator does not model)",
    "poprt-bert": "hardware not named: run on the C600 (configs/c600.toml), as the ResNet-50 rows of the same "
                  "PopRT release [U]. The model is Hugging Face's BertForQuestionAnswering exported to ONNX "
                  "(RT benchmarks/bert/test_bert_*.py: transformers.onnx --feature question-answering), run "
                  "as the zoo's BERT with the squad head; PopRT's fused attention and erf-GELU passes are not "
                  "modelled; throughput is batch x requests / wall time with 5 host threads, simulated as one "
                  "call of batches-per-step device iterations. Both scripts set poplin's use128BitConvUnitLoad "
                  "(the AMP loads its weights 128 bits a cycle instead of 64), enableFastReduce (the partials "
                  "reduced by the single-input vertex at twice the load width) and enableMultiStageReduce off "
                  "(the partials reduced in one stage), run as such (ConvModel.cpp, poplinCycleEstimators.cpp, "
                  "ConvReduce.cpp); group_host_sync is not modelled",
    "poprt-bert-fp32": "fp16_skip_op_types 'GroupNormalization,Gelu' at batch 128: layer norm and GELU run in "
                       "fp32 there, cast from and back to fp16 (the zoo's fp32_ops)",
    "poprt-i11": "RT examples/bert/test_bertsquad.py: bertsquad-12 (Google's BERT-Base, vocab 30522) at SL 256, "
                 "its layer norms and tanh-form GELU (Pow(x, 3) included) fused into single ops by PopRT's "
                 "layer_norm_pattern and gelu_pattern passes, "
                 "fp16 with GELU and layer norm kept in fp32 (fp16_skip_op_types; the zoo's fp32_ops), half "
                 "partials, 32 IO "
                 "tiles; the script runs one request at a time in a Python loop and hard-codes batch 1 (the other "
                 "batch sizes need a changed script [U]), simulated as one call per batch (its host loop is not "
                 "modelled); hardware not stated (IPU21 per the doc [U]), run on the C600 (configs/c600.toml). "
                 "The README's bert_fp16_with_gelu row (GELU not kept in fp32, as its name suggests [U]) runs "
                 "15-31 % faster at batch 1-8 "
                 "(bs8: 5.07 against 6.62 ms per call), so the fp32 GELU alone costs about 1.5 ms per batch-8 call "
                 "on the hardware, where the simulator's (popnn's GELU estimate in fp32, 10 cycles a vector, which "
                 "poplibs marks 'should be verified', and its two casts) takes 0.17 ms",
    "squad-popart": "PopART configs/squad_large_384.json: ADAM_NO_BIAS run as adam (bias correction is scalar "
                    "work); use_half_optimizer_state keeps the first moment (accl1) in fp16, the second in fp32; "
                    "stochastic rounding is not modelled",
    "pt-options": "graphcore/examples SDK 3.1 (c0239af) nlp/bert/pytorch as run here: outputMode Sum "
                  "(ipu_options.py:61), attention_probs_dropout_prob 0 (configs_pretraining.yml:34; the hidden "
                  "dropout stays 0.1), LAMB state fp32 (enable_half_first_order_momentum False), optimizer state "
                  "off chip with RTS, half partials, matmul_proportion per IPU, recompute_checkpoint_every_layer, "
                  "and optimization.py's parameter groups: biases without weight decay or LAMB's trust ratio "
                  "(max_weight_norm 0, so PopART drops their norms), other 1-D weights without weight decay",
    "pt-not-modelled": "set by the source but not modelled: stochastic rounding (ipu_options.py:96); "
                       "accumulateOuterFragmentSettings OverlapMemoryOptimized with IPU 0 excluded "
                       "(ipu_options.py:110-112; the simulator runs each IPU's update in parallel); PopTorch "
                       "converting each call's int64 inputs to int32 on the host before the run "
                       "(poptorch 3.1 PoplarExecutable.cpp:81-85; the graph streams int32); the per-step host "
                       "work timed with each step (scheduler.step() and setOptimizer(), run_pretraining.py:150-153, "
                       "run_squad.py:138-139: the new learning rate written to the IPUs every step); the "
                       "published figure is the mean of 10 per-step throughputs (benchmarks.yml --training-steps 10; "
                       "examples-utils reduces them by their mean), so it includes the first step. The async "
                       "DataLoader (64 workers, AsyncRebatched, pretraining_data.py:244-250) reads ahead of the "
                       "IPU, so the data loading is not on the step's path and is not simulated",
    "pt-pod64": "the Pod64 benchmark (benchmarks.yml pytorch_bert_large_packed_pretrain_real_pod64) runs one "
                "python3 process without poprun: one host drives all 16 replicas (replication_factor 16), one "
                "DataLoader and one host conversion of the inputs for the whole step; the simulator prices host IO "
                "per Bow-2000 host link and the host side of each stream on its own, as if every chassis had its "
                "own host. At these rates the link does not matter (all 16 replicas' inputs are under 140 MB per "
                "step, about 11 ms on one 100 GbE link against 2.5-3.5 s steps)",
    "pt-squad": "run_squad.py reads each step's batch before starting the step's timer (:130-131), so its "
                "synchronous single-process DataLoader (:96-106, no workers) is outside the published figure; "
                "its options otherwise as pt-options (AdamW, first moment fp16, on-chip optimizer state with RTS)",
    "per-call": "B42 (PopART, deviceIterations 4) and B43 (PyTorch, deviceIterations 2) run the same model, "
                "micro-batch, GA and replicas; the line through their call times (samples per call / throughput: "
                "866 and 518 ms) is 174 ms per weight update plus 170 ms per call. The simulator gives 171-174 ms "
                "per weight update and nothing per call, so B43's larger error is its deviceIterations 2: the "
                "same missing per-call time spread over half the samples (as mlperf-step)",
    "packed": "packed sequences (max_sequences_per_pack 3): the zoo's packed BERT, a block-diagonal attention mask "
              "made in every layer from the streamed sequence indices, position ids streamed, the MLM head on the "
              "first mask_tokens positions; samples/s counts sequences, packs x the packing factor "
              "(Graph.samples_per_row)",
    "mlperf-factor": "packing factor 2 (avg_seq_per_pack in the MLPerf configs)",
    "mlperf-step": "the published figure is training only (sequences between evaluations over block_start to "
                   "block_stop; evaluation and start-up excluded); each step is one synchronous session.run "
                   "(batches_per_step 1) followed by the script's host work (updateOptimizerFromHost, the next "
                   "step's data). The line through the step times of M18-M20 (GA 96, 64, 36) puts what every step "
                   "adds at about 200 ms on hardware, more than the simulator's fill, flush, per-tensor reduce-scatters "
                   "and all-gathers and weight update (\"Packed BERT SL512: time per step\" below gives both). The v1.x logs place it inside the "
                   "training call: each eval call of the same training program costs a full step without the host "
                   "work (docs/reference/published-results.md 1.1); what it is has no published size",
    "fp8-checkpoints": "the config's activation_checkpoint_dtype FLOAT8 (bert_model.py Bert.checkpoint): each "
                       "layer's checkpoint goes through an 8-bit float copy (CastToFp8: 3 exponent and 4 mantissa "
                       "bits; CastFromFp8), so the pipeline stashes it in 1 byte per element; with fp16 "
                       "checkpoints the simulator puts IPU 2 out of memory by 9.8 kB. The custom ops cast with popfloat's GfloatCast, whose cycle "
                       "estimators for the 8-bit casts are placeholders (poplibs popfloatCycleEstimators.cpp "
                       "CastHalfToGf8Supervisor returns 1): priced as popops casts, as are their gradients (copies "
                       "of the fp16 gradient in the source); about 0.1 % of a step",
    "nsp": "the config keeps the NSP head (pooler and 2-way classifier on each pack's 3 sequence slots); the zoo's "
           "BERT has none (about 0.01 % of the FLOPs)",
    "emb-serial": "the config serialises the tied vocab projection over the vocabulary (PopART's "
                  "embedding_serialization_vocab_steps: 5 in MLPerf v1.0 and the examples' pre-training configs, 4 "
                  "in MLPerf v1.1 and v2.0; PyTorch's embedding_serialization_factor 2 for BERT-Large): the zoo's "
                  "embedding_serialization, that many matmuls of the table's row blocks; PopART also splits the "
                  "table into as many weights, updated one by one (not modelled: the same work in smaller pieces), "
                  "and the PyTorch model's word-embedding lookup into as many masked lookups (not modelled)",
    "att-ffn": "att_ffn_placement as the config; recomputation checkpoints stay per layer (each layer's FFN "
               "output); the source also checkpoints the attention outputs of its last stage and skips the FFN "
               "output that ends an IPU's run",
    "clip": "the closed config's gradient_clipping_norm (bert_optimizer.py: ClipNormSettings.clipAllWeights): every "
            "gradient's norm, the global norm on one IPU and its factor back, a barrier across the IPUs before the "
            "update; the open configs set none",
    "lamb-fp16": "the config keeps LAMB's first moment (lamb_m_dtype) or accumulators (lamb_accl_dtype) in fp16; "
                 "the zoo keeps all optimizer state in one dtype",
    "poprun-rts": "run under poprun, 8 replicas per instance: bert.py then shards the optimizer state over "
                  "each instance's replicas (shardingDomain CommGroup(Consecutive, local replicas), "
                  "set_popdist_args), so each gradient is reduce-scattered over 8 replicas, its shard all-reduced "
                  "across the instances (PopART's complementary group) and the weights all-gathered over 8",
    "pt-gather": "PyTorch gathers the mask_tokens masked positions of each pack; the zoo slices the first "
                 "mask_tokens positions (the same rows projected)",
}


#: host buffers of a TF1 infeed, as the simulator counts them (``defaultPrefetchBufferingDepth``):
#: graphcore/tensorflow's ``IPUConfig.optimizations.prefetch_data_streams`` is True by default
#: ("prefetching of data for data streams on the host will be overlapped with execution on the
#: IPU") and an ``IPUInfeedQueue``'s ``prefetch_depth`` defaults to 1 ("prefetches a single entry
#: after it has been read to refill the buffer"): the host fills the next buffer while the IPU
#: runs, one buffer ahead, which is depth 2 here. The MLPerf ResNet-50 scripts (v1.0-v2.0
#: ``train.py``: ``IPUInfeedQueue(..., prefetch_depth=opts['prefetch_depth'])``, ``--prefetch-depth``
#: default None; ``ipu_utils.py`` leaves ``prefetch_data_streams`` alone) keep both defaults.
TF1_PREFETCH_DEPTH = 2

#: ImageNet's training images (``standard_imagenet``: Datasets/data.py ``NUM_IMAGES``)
IMAGENET_TRAIN_IMAGES = 1_281_167
#: ``logs_per_epoch`` of every ResNet-50 MLPerf config (MLPerf v1.0-v2.0 and examples 8ae588c
#: ``configs.yml``: ``mk2_resnet50_mlperf_pod16``, which the bs20 and LARS configs extend)
TF1_MLPERF_LOGS_PER_EPOCH = 5


def tf1_steps_per_call(global_batch: int, logs_per_epoch: int = TF1_MLPERF_LOGS_PER_EPOCH) -> int:
    """Weight updates the TF1 CNN ``train.py`` runs in one ``session.run`` (MLPerf v1.0-v2.0 and
    examples 8ae588c ``train_process``): ``iterations_per_epoch = images // global_batch``,
    ``log_freq = iterations_per_epoch // logs_per_epoch`` and ``iterations_per_step = log_freq``,
    as ``--batches-per-step`` (default 1000) is larger; the device loop repeats the step that often
    and the published throughput is an epoch's images over its time, 5 such calls."""
    return max(1, IMAGENET_TRAIN_IMAGES // global_batch // logs_per_epoch)


#: the recomputation checkpoints of the TF1 (MLPerf) ResNet-50 configs: configs.yml ``pipeline_splits``
#: [b1/0/relu, b1/2/relu, b2/0/relu, b2/2/relu, b3/0/relu, b3/3/relu] (v1.0 and v1.1 ``*_bs20`` and
#: ``*_lars``; v2.0 names them stage1/unit1 ... stage3/unit4) with ``shards: 1`` and
#: ``enable_recomputation``: seven pipeline stages on the replica's one IPU, of which graphcore/tensorflow's
#: PipelineRecomputation pass recomputes every forward stage "apart from the last one which does not need
#: recomputation" (passes/pipeline_recomputation.cc), so layer3/4 to the head keep their activations
TF1_RESNET_CHECKPOINTS = ("layer1/0", "layer1/2", "layer2/0", "layer2/2", "layer3/0", "layer3/3")


def _resnet_train(system: str, replicas: int, micro_batch: int, accumulation: int, amp: float,
                  optimizer: str = "sgd_momentum", pytorch: bool = False, tf1_calls: bool = False,
                  stable_norm: bool = False, replicas_per_process: int = 2) -> Setup:
    """ResNet-50 training as the TF1 (MLPerf) and PyTorch (``pytorch``) configs run it: 8-bit
    images, half partials, recomputation (TF1: :data:`TF1_RESNET_CHECKPOINTS`; PyTorch: a checkpoint
    after every block), momentum SGD (LARS in the MLPerf v1.1 and v2.0 configs; PyTorch: the CNN
    example's ``sgd_combined``, ``SGD(use_combined_accum=True)``, the velocity as the accumulator),
    one IPU per replica, real data. TF1: the host one input buffer ahead of the IPU as its infeeds
    run (:data:`TF1_PREFETCH_DEPTH`; PyTorch: depth 1), batch norm statistics over pairs of
    replicas (``BN_span: 2`` in every MLPerf ResNet-50 configs.yml, v1.0-v2.0: the zoo's
    ``bn_span``; PyTorch's batch norm is per replica), and the momentum in fp16 (precision 16.16:
    TF creates each optimizer slot in its weight's dtype). The gradient all-reduces are one call: TF1
    combines them up to ``max_cross_replica_buffer_size`` (50 MiB in the MLPerf v1.0-v2.0
    configs.yml, more than ResNet-50's 51.1 MB of fp16 gradients) and the PyTorch config merges them
    (examples 8ae588c ``vision/cnns/pytorch/utils/ipu_settings.py``: ``mergeAllReduceCollectives``).
    ``tf1_calls``: one simulated call runs the weight updates the TF1 script runs per
    ``session.run`` (:func:`tf1_steps_per_call`), as deviceIterations. ``stable_norm``: the MLPerf
    v1.0 configs' ``stable_norm: True`` ([stable-norm]). ``replicas_per_process``: the PopRun
    instances' replicas ([host-processes]: 2 in the MLPerf v1.1/v2.0 and examples' scripts, 4 in MLPerf
    v1.0's POD64)."""
    steps = tf1_steps_per_call(replicas * accumulation * micro_batch) if tf1_calls else 1
    params = dict(micro_batch=micro_batch, recompute_checkpoints="blocks" if pytorch else TF1_RESNET_CHECKPOINTS,
                  eight_bit_io=True)
    if not pytorch:
        params["bn_span"] = 2
    return Setup("resnet50", _params(**params), system, replicas=replicas, accumulation=accumulation,
                 device_iterations=steps, amp=(amp,), optimizer=optimizer,
                 state_dtype="float32" if pytorch else "float16",
                 prefetch_depth=1 if pytorch else TF1_PREFETCH_DEPTH, merged_collectives=("all_reduce",),
                 stable_norm=stable_norm, combined_accum=pytorch and optimizer == "sgd_momentum",
                 processes=max(1, replicas // replicas_per_process))


def _resnet_e2e(system: str, replicas: int, global_batch: int, amp: float, micro_batch: int = 20,
                replicas_per_process: int = 2) -> Setup:
    """The end-to-end ResNet-50 checks' configuration (:func:`resnet50_training`): the examples repo's
    ``applications/tensorflow/cnns/training/configs.yml`` ``mk2_resnet50_mlperf_pod{16,64}_bs20``
    (SDK 2.4-2.5, 32fc7bd and 187775b, the Bow launch's; the MLPerf v1.0 configs without their
    ``stable_norm``): momentum SGD, the accumulation that makes ``global_batch``,
    ``available_memory_proportion`` ``amp`` (0.15 Pod16, 0.145 Pod64), and ``logs_per_epoch`` 5, so
    ``train.py`` runs ``log_freq`` weight updates per ``session.run`` (:func:`tf1_steps_per_call`)."""
    return _resnet_train(system, replicas, micro_batch, max(1, global_batch // (micro_batch * replicas)), amp,
                         tf1_calls=True, replicas_per_process=replicas_per_process)


def _bert_train(model: str, system: str, replicas: int, micro_batch: int, accumulation: int,
                layers_per_ipu: list[int], amp: list[float], seq_len: int = 128, mask_tokens: int = 20,
                vocab: int = 30400, rts: bool = True, recompute: bool | None = None,
                attention_dropout: float | None = None, output_mode: str = "",
                merged_collectives: tuple = (), pytorch: bool = False, embedding_serialization: int = 1,
                tensorflow: bool = False, tf1: bool = False, split_qkv: bool = False) -> Setup:
    """BERT pre-training as Graphcore's configs run it: a 4-IPU pipeline, LAMB with the optimizer
    state off chip (with or without RTS), half partials, real data. ``attention_dropout`` and
    ``output_mode`` where the source sets them (the PyTorch configs: 0 and Sum); ``pytorch``: the
    PyTorch example's parameter groups (:func:`pytorch_bert_groups`); ``embedding_serialization`` the
    config's vocabulary steps of the tied projection; ``tensorflow``: each stage's inter-IPU copies
    one after another ([tf-copies]); ``tf1``: the IPUConfig the TF1 BERT's ipu_utils.py sets for every
    run, stable norm statistics ([tf-stable-norm]) and the matmul pass type cleared ([tf-clear-pass]);
    the TF2 BERT sets neither; ``split_qkv``: the PopART config's three QKV weights (the zoo's
    ``split_qkv``)."""
    params = dict(micro_batch=micro_batch, seq_len=seq_len, layers_per_ipu=layers_per_ipu, vocab=vocab,
                  mask_tokens=mask_tokens)
    if embedding_serialization > 1:
        params["embedding_serialization"] = embedding_serialization
    if recompute is not None:
        params["recompute_checkpoint_every_layer"] = recompute
    if attention_dropout is not None:
        params["attention_dropout"] = attention_dropout
    if split_qkv:
        params["split_qkv"] = True
    return Setup(model, _params(**params), system, replicas=replicas, accumulation=accumulation,
                 amp=tuple(amp), optimizer="lamb", optimizer_off_chip=True, rts=rts, output_mode=output_mode,
                 merged_collectives=merged_collectives, pytorch_bert_groups=pytorch, per_stage_copies=tensorflow,
                 stable_norm=tf1, clear_pass_type=tf1)


def _resnet_infer(batch: int, dtype: str = "float16", synthetic: bool = False, device_iterations: int = 100,
                  io_tiles: int = 32, prefetch_depth: int = 1, fp8: bool = False) -> Setup:
    """ResNet-50 inference as PopRT runs it on one C600 IPU: the classifier without labels or loss,
    batch norm folded into the convolutions (as the exported ONNX model has it), uint8 images
    normalised on the IPU, half partials in fp16, 32 IO tiles with every stream
    overlapped (real data) or synthetic data; ``fp8``: every convolution but the stem's in FP8."""
    params = dict(micro_batch=batch, eight_bit_io=True, with_loss=False, norm="folded")
    if dtype != "float16":
        params["dtype"] = dtype
    if fp8:
        params["fp8_convs"] = True
    return Setup("resnet50", _params(**params), "c600", device_iterations=device_iterations,
                 half_partials=dtype == "float16", training=False, synthetic=synthetic, io_tiles=io_tiles,
                 overlap_io=bool(io_tiles) and not synthetic, prefetch_depth=prefetch_depth)


def _packed_bert(system: str, replicas: int, micro_batch: int, accumulation: int, amp: list[float],
                 seq_len: int = 512, mask_tokens: int = 78, vocab: int = 30912, packing_factor: float = 2.0,
                 layers_per_ipu: list[int] | None = None, att_ffn: list | None = None, off_chip: bool = False,
                 model: str = "bert-large", prefetch_depth: int = 1, attention_dropout: float | None = None,
                 output_mode: str = "", merged_collectives: tuple = (), sharding_domain: int = 0,
                 clip_norm: float = 0.0, pytorch: bool = False, checkpoint_dtype: str | None = None,
                 embedding_serialization: int = 1, split_qkv: bool = False) -> Setup:
    """Packed BERT pre-training as Graphcore's PopART (MLPerf, examples) and PyTorch configs run it:
    at most 3 sequences per pack, ``micro_batch`` packs per micro-batch, LAMB with the optimizer
    state sharded over the replicas (on or off chip), half partials, real data; gradients clipped to
    the global norm ``clip_norm`` (0: not clipped); ``pytorch``: the PyTorch example's parameter
    groups (:func:`pytorch_bert_groups`). ``mask_tokens`` is
    the MLM positions per pack (PopART: the config's mask_tokens + 2); ``prefetch_depth`` is the
    script's ``defaultPrefetchBufferingDepth`` (3 in MLPerf v2.0's bert.py, unset before);
    ``sharding_domain`` the replicas of one poprun instance, over which bert.py shards the optimizer
    state when it runs under poprun (0: one process, sharded over all replicas); ``checkpoint_dtype``
    the config's ``activation_checkpoint_dtype`` ("float8": MLPerf v2.0 POD16's FLOAT8);
    ``embedding_serialization`` the config's vocabulary steps of the tied projection [emb-serial];
    ``split_qkv`` the PopART config's three QKV weights (the zoo's ``split_qkv``)."""
    params = dict(micro_batch=micro_batch, seq_len=seq_len, vocab=vocab, mask_tokens=mask_tokens,
                  max_sequences_per_pack=3, packing_factor=packing_factor)
    if split_qkv:
        params["split_qkv"] = True
    if embedding_serialization > 1:
        params["embedding_serialization"] = embedding_serialization
    if checkpoint_dtype is not None:
        params["checkpoint_dtype"] = checkpoint_dtype
    if att_ffn is not None:
        params["att_ffn_placement"] = att_ffn
    else:
        params["layers_per_ipu"] = layers_per_ipu
    if attention_dropout is not None:
        params["attention_dropout"] = attention_dropout
    return Setup(model, _params(**params), system, replicas=replicas, accumulation=accumulation, amp=tuple(amp),
                 optimizer="lamb", optimizer_off_chip=off_chip, rts=True, prefetch_depth=prefetch_depth,
                 output_mode=output_mode, merged_collectives=merged_collectives, sharding_domain=sharding_domain,
                 clip_norm=clip_norm, pytorch_bert_groups=pytorch,
                 processes=replicas // sharding_domain if sharding_domain else 1)


# att_ffn_placement of the MLPerf configs (training_results v1.1 / v2.0, Graphcore .../popart/configs)
_ATT_FFN_V11_POD16 = [[1, [7, 6]], [2, [6, 7]], [3, [7, 6]], [0, [4, 5]]]
_ATT_FFN_V11_POD64 = [[1, [2, 2]], [2, [3, 3]], [3, [4, 3]], [4, [3, 4]], [5, [4, 3]], [6, [3, 4]], [7, [4, 3]],
                      [0, [1, 2]]]
_ATT_FFN_V20_POD64 = [[1, [3, 3]], [2, [3, 3]], [3, [3, 3]], [4, [4, 3]], [5, [3, 4]], [6, [4, 3]], [7, [3, 4]],
                      [0, [1, 1]]]
_ATT_FFN_V20_POD16 = [[1, [3, 3]], [2, [4, 3]], [3, [3, 3]], [4, [3, 4]], [5, [4, 3]], [6, [3, 4]], [7, [4, 3]],
                      [0, [0, 1]]]
_MLPERF = ("packed", "mlperf-factor", "mlperf-step")
# the packed rows within 30 % with room to spare when added (asserted); the others are tracked
_ASSERTED_PACKED = {"B32", "B35", "B38", "B39"}

#: Adam/AdamW state as Graphcore's SQuAD configs keep it: first moment fp16, second fp32 (PyTorch
#: ``enable_half_first_order_momentum``, nlp/bert/pytorch/optimization.py; PopART
#: ``use_half_optimizer_state``, which sets only ``accl1_type``, bert_optimizer/optimizer.py)
_HALF_FIRST_MOMENT = ("float16", "float32")


def _squad_train(replicas: int, vocab: int, device_iterations: int, amp: list[float], optimizer: str,
                 attention_dropout: float | None = None, output_mode: str = "") -> Setup:
    """BERT-Large SQuAD fine-tuning (SL384) as Graphcore's configs run it: an 8-IPU pipeline
    (layers 2, 3, 3, 3, 3, 3, 3, 4) with the span head on the last IPU, micro-batch 4, GA 32, the
    optimizer state on chip and sharded over the replicas (first moment fp16), half partials;
    ``attention_dropout`` and ``output_mode`` where the source sets them."""
    params = dict(micro_batch=4, seq_len=384, layers_per_ipu=[2, 3, 3, 3, 3, 3, 3, 4], vocab=vocab, head="squad")
    if attention_dropout is not None:
        params["attention_dropout"] = attention_dropout
    return Setup("bert-large", _params(**params), "bow-pod16", replicas=replicas, accumulation=32,
                 device_iterations=device_iterations, amp=tuple(amp), optimizer=optimizer, rts=True,
                 state_dtype=_HALF_FIRST_MOMENT, output_mode=output_mode)


#: the poplin options of PopRT's BERT benchmark scripts (RT benchmarks/bert/test_bert_{base,large}.py,
#: 77e7d66: CompilerOptions use_128bit_conv_unit_load, enable_fast_reduce True, enable_multi_stage_reduce
#: False), which PopRT passes to poplin's matmul and convolution options
POPRT_BENCHMARK_POPLIN_OPTIONS = (("use128BitConvUnitLoad", "true"), ("enableFastReduce", "true"),
                                  ("enableMultiStageReduce", "false"))


def _squad_infer(model: str, batch: int, seq_len: int, batches_per_step: int, amp: float | None = None,
                 io_tiles: int = 0, benchmark_options: bool = False, fp32_ops: tuple = ()) -> Setup:
    """BERT SQuAD inference as PopRT runs it on one C600 IPU: the span head without positions or loss
    (only the start and end logits come back), fp16 with half partials, int32 inputs; IO tiles
    overlap every stream when given (``num_io_tiles``); ``benchmark_options``: the compiler options of
    RT ``benchmarks/bert/test_bert_*.py`` (:data:`POPRT_BENCHMARK_POPLIN_OPTIONS`); ``fp32_ops``: the op
    kinds the Converter's ``fp16_skip_op_types`` keeps in fp32 (the zoo's ``fp32_ops``)."""
    params = dict(micro_batch=batch, seq_len=seq_len, head="squad", with_loss=False)
    if fp32_ops:
        params["fp32_ops"] = list(fp32_ops)
    return Setup(model, _params(**params), "c600",
                 device_iterations=batches_per_step, amp=(amp,) if amp else (), training=False,
                 io_tiles=io_tiles, overlap_io=bool(io_tiles),
                 poplin_options=POPRT_BENCHMARK_POPLIN_OPTIONS if benchmark_options else ())


def _vit_infer(batch: int) -> Setup:
    """ViT-B/16 inference as PopRT's ViT benchmark runs it on one IPU (RT ``benchmarks/ViT/poprt_run.py``,
    77e7d66): Hugging Face's ``google/vit-base-patch16-224`` classifier in fp16 with fp16 images from
    the host, availableMemoryProportion 1.0, 128 batches per step, stream buffering depth 2, 32 IO tiles
    (PopRT overlaps the streams on them); at batch 32 also ``use_128bit_conv_unit_load``,
    ``enable_fast_reduce`` and ``enable_non_stable_softmax``."""
    big = batch == 32
    return Setup("vit-base-16", _params(micro_batch=batch, dropout=0.0, with_loss=False), "c600",
                 device_iterations=128, amp=(1.0,), training=False, io_tiles=32, overlap_io=True,
                 prefetch_depth=2, non_stable_softmax=big, poplin_options=POPRT_BENCHMARK_POPLIN_OPTIONS[:2] if big else ())


def _effnet_train(system: str, replicas: int, accumulation: int) -> Setup:
    """EfficientNet-B4 G16 training as Graphcore's TF1 CNN example runs it (graphcore/examples
    ``vision/cnns/tensorflow1/training``, configs.yml ``efficientnet_b4_g16_large_batch_size_high_throughput``
    and Models/efficientnet.py ``set_defaults``): group convolutions of 16 channels, expansion ratio 4,
    group norm of 4 groups (the model's default), the ImageNet default size 380, micro-batch 3, two IPUs
    per replica split at block4a, availableMemoryProportion 0.4, precision 16.16 with half partials,
    LARS, 8-bit images, recomputation, prefetch depth 3, the gradient all-reduces combined
    ([tf-combine]), each stage's inter-IPU copies one after another ([tf-copies]), stable norm
    statistics (Models/efficientnet.py forces ``stable_norm`` on; [tf-stable-norm])."""
    params = _params(micro_batch=3, group_dim=16, expand_ratio=4, split_points=["block4a"], eight_bit_io=True)
    return Setup("efficientnet-b4", params, system, replicas=replicas, accumulation=accumulation, amp=(0.4, 0.4),
                 optimizer="lars", prefetch_depth=3, merged_collectives=("all_reduce",), per_stage_copies=True,
                 stable_norm=True, processes=replicas)


def _resnext_train() -> Setup:
    """ResNeXt-101 32x4d training as Graphcore's TF1 CNN example runs it (configs.yml
    ``resnext101_16ipus``, Models/resnext.py ``set_defaults``): group norm of 32 groups, micro-batch 6,
    two IPUs per replica split at stage3/unit4 (the zoo's layer3/3), 8 replicas, GA 16, momentum SGD,
    half partials, 8-bit images, recomputation, prefetch depth 4 (the benchmark's), the gradient
    all-reduces combined ([tf-combine]), each stage's inter-IPU copies one after another ([tf-copies]),
    stable norm statistics (the config's ``stable_norm: True``, which Models/resnext.py also forces;
    [tf-stable-norm])."""
    params = _params(micro_batch=6, split_points=["layer3/3"], eight_bit_io=True)
    return Setup("resnext101", params, "bow-pod16", replicas=8, accumulation=16, optimizer="sgd_momentum",
                 prefetch_depth=4, merged_collectives=("all_reduce",), per_stage_copies=True, stable_norm=True,
                 processes=8)


def _vit_train(system: str, replicas: int, accumulation: int, pretrain: bool, sharding_domain: int = 0) -> Setup:
    """ViT-B/16 training as Graphcore's PyTorch ViT runs it (graphcore/examples 8ae588c
    ``vision/vit/pytorch``, configs.yml and benchmarks.yml): blocks [3, 3, 3, 3] on a 4-IPU pipeline,
    availableMemoryProportion 0.3 on each IPU, the optimizer state on chip and sharded over the
    replicas (``enable_rts``), half partials (args.py default), prefetch depth 2, outputMode All
    (ipu_options.py), generated data streamed from the host. Pre-training (``b16_in1k_pretrain_lamb``,
    ``--byteio true``): micro-batch 8, uint8 images normalised on the IPU, mixup, the representation
    layer, attention-probability dropout 0.1, the dropout after the MLP's GELU, mid-block checkpoints
    in blocks 1, 4, 7 and 10, LAMB with fp32 state and fp32 gradient accumulators (``accum_type``).
    Fine-tuning (``b16_imagenet1k``, Hugging Face's
    ``ViTForImageClassification``): micro-batch 17, fp16 images, device iterations 8, SGD with
    momentum kept in fp16 (``first_order_type``), fp16 gradient accumulators (args.py's ``--accum-type``
    default)."""
    if pretrain:
        params = _params(micro_batch=8, layers_per_ipu=[3, 3, 3, 3], eight_bit_io=True, mixup=True,
                         representation_size=768, attention_dropout=0.1, ffn_act_dropout=True,
                         mid_checkpoints=[1, 4, 7, 10])
        return Setup("vit-base-16", params, system, replicas=replicas, accumulation=accumulation, amp=(0.3,) * 4,
                     optimizer="lamb", rts=True, prefetch_depth=2, output_mode="All",
                     sharding_domain=sharding_domain, accum_dtype="float32",
                     processes=replicas // sharding_domain if sharding_domain else 1)
    return Setup("vit-base-16", _params(micro_batch=17, layers_per_ipu=[3, 3, 3, 3]), system, replicas=replicas,
                 accumulation=accumulation, device_iterations=8, amp=(0.3,) * 4, optimizer="sgd_momentum",
                 state_dtype="float16", rts=True, prefetch_depth=2, output_mode="All")


def _unet_train() -> Setup:
    """U-Net training as Graphcore's TensorFlow 2 medical-segmentation example runs it
    (graphcore/examples ``vision/unet_medical/tensorflow2``, benchmarks.yml ``tf2_unet_train_real_pod4``:
    ``--nb-ipus-per-replica 4 --micro-batch-size 1 --gradient-accumulation-count 24 --augment``):
    one replica of four pipeline stages split as ``model_utils.set_pipeline_stages`` does, each
    stage's inter-IPU copies one after another and each crop sent straight to the stage that reads
    it ([tf-copies]: the model passes the crops on stage by stage, which TensorFlow's
    PipelineCommunicationOptimizer turns into FIFOs for the Grouped schedule), availableMemoryProportion
    0.7, 0.3, 0.45, 0.7 and half partials (``parse_args.py`` defaults), recomputation
    (``RecomputationMode.Auto``), momentum SGD with fp16 momentum (``set_floatx('float16')``) kept
    on chip (``offload_weight_update_variables=False``), 240 micro-batches per execution
    (``--steps-per-execution`` default: 10 weight updates), real data through an infeed
    (:data:`TF1_PREFETCH_DEPTH`)."""
    params = _params(micro_batch=1, split_points=["encoder_block_2", "decoder_block_0", "decoder_block_2"])
    return Setup("unet", params, "bow-2000", accumulation=24, device_iterations=10, amp=(0.7, 0.3, 0.45, 0.7),
                 optimizer="sgd_momentum", state_dtype="float16", prefetch_depth=TF1_PREFETCH_DEPTH,
                 per_stage_copies=True)


def _conformer_train(system: str, replicas: int, accumulation: int, processes: int = 1) -> Setup:
    """Conformer-medium training as Graphcore's PyTorch Conformer ran it for the README's figures
    (graphcore/examples ``speech/conformer/pytorch`` at ``1c4dd6c``, "Refresh examples for SDK2.6",
    the commit that added the figures, which no later commit changed: ``configs/train.yaml`` and the
    scripts ``run_wenet_conformer_globalbs_16128_pod16.sh`` / ``_pod64.sh``): micro-batch 4 of generated
    utterances at the maximum lengths (1,220 frames, 48 tokens), the pipeline ``encoder.encoders__2``,
    ``__6``, ``__10`` on IPUs 1-3 (blocks [2, 4, 4, 2]; SDK 3.2's ``2d8b565`` moved the last split to
    ``__11``, [2, 4, 5, 1], and nothing else of the configuration), availableMemoryProportion 0.3 on each
    IPU, half partials, poptorch.optim.Adam with fp16 gradient accumulators (``accum_type`` the model
    dtype) and the global gradient norm clipped at 5 (``max_grad_norm``), its state on chip without RTS,
    outputMode Final (``main.py build_ipu_options``); GA so that the global batch is 16,128."""
    return Setup("conformer-medium", _params(micro_batch=4, layers_per_ipu=[2, 4, 4, 2]), system, replicas=replicas,
                 accumulation=accumulation, amp=(0.3,) * 4, optimizer="adam", accum_dtype="float16", clip_norm=5.0,
                 output_mode="Final", processes=processes)


def _swin_train(tiny: bool) -> Setup:
    """Swin training as Graphcore's PyTorch port runs it (graphcore/examples ``vision/swin/pytorch``,
    ``configs/configs.yaml``, ``options.py``, ``optimizer.py``; benchmarks.yml
    ``pytorch_swin_tiny_train_real_pod16`` / ``pytorch_swin_large_finetune_real_pod16``): SWIN_TINY in
    fp32 (PRECISION float, float: fp32 weights, images and partials), micro-batch 4, 4 replicas of the
    pipeline [2, 3, 5, 2], GA 64, drop path 0.2; SWIN_LARGE_224_22K_FINETUNE_1K_FP16_POD16 in fp16
    (``model.half()``, half partials), micro-batch 6, 2 replicas of [2, 3, 4, 4, 4, 4, 2, 1], GA 683, drop
    path 0.2. Both: availableMemoryProportion 0.12 on every IPU (config.py IPU.AMP), AdamW with the
    first moment in fp16 and the second in fp32 and gradient accumulators of the precision's type
    (``accum_type``), the global gradient norm clipped at 5 (TRAIN.CLIP_GRAD), its state on chip without
    RTS (TRAIN.OPTIMIZER.RTS default), buffering depth 3 (``defaultBufferingDepth``), outputMode the
    default, images streamed from the host."""
    if tiny:
        params = _params(micro_batch=4, layers_per_ipu=[2, 3, 5, 2], dtype="float32")
        return Setup("swin-tiny", params, "bow-pod16", replicas=4, accumulation=64, amp=(0.12,) * 4,
                     half_partials=False, optimizer="adamw", state_dtype=_HALF_FIRST_MOMENT, accum_dtype="float32",
                     clip_norm=5.0, prefetch_depth=3)
    params = _params(micro_batch=6, layers_per_ipu=[2, 3, 4, 4, 4, 4, 2, 1])
    return Setup("swin-large", params, "bow-pod16", replicas=2, accumulation=683, amp=(0.12,) * 8,
                 optimizer="adamw", state_dtype=_HALF_FIRST_MOMENT, accum_dtype="float16", clip_norm=5.0,
                 prefetch_depth=3)


_LARGE_AMP = [0.15, 0.25, 0.25, 0.25]
_SQUAD_PYTORCH_AMP = [0.08, 0.25, 0.32, 0.32, 0.36, 0.38, 0.40, 0.32]  # configs_squad.yml squad_large_384
_SQUAD_POPART_AMP = [0.1, 0.3, 0.32, 0.34, 0.36, 0.38, 0.4, 0.32]  # popart configs/squad_large_384.json
_I11 = {1: 664, 2: 844, 4: 1068, 8: 1208, 16: 488}  # RT examples/bert README, bert_fp16
_I1 = {1: 3653, 2: 5466, 4: 7438, 8: 9805, 16: 11825, 32: 14240, 64: 16084, 90: 17105, 96: 16790}
_I2 = {1: 3529, 2: 5284, 4: 7030, 8: 9307, 16: 11393, 32: 13593, 64: 15249, 90: 16470}
_I3 = {1: 1796, 2: 2356, 4: 2957, 8: 3377, 16: 3903}
# FP8, the stem convolution and the classifier in fp16: synthetic (I4) and real data with overlapped IO (I12)
_I4 = {1: 4126, 2: 6499, 4: 9334, 8: 13313, 16: 16334, 32: 19667, 64: 22886, 90: 24962, 96: 23695}
_I13 = {8: 2600, 32: 3109}  # RT benchmarks/ViT README, "Tput"
_I12 = {1: 3997, 2: 6314, 4: 8749, 8: 12476, 16: 15554, 32: 18705, 64: 21525, 90: 23500, 96: 22295}
# within 25 % when added (2026-11-23): the larger batches meet the simulator's host-IO cap [poprt-fp8-io]
_ASSERTED_I12 = {1, 2, 4, 8, 16, 32}
# the batch sizes within 30 % with room to spare are asserted (all of them since the rows run on the C600)
_ASSERTED_I1, _ASSERTED_I2, _ASSERTED_I3 = set(_I1), set(_I2), set(_I3)

PUBLISHED_ROWS = [
    # ResNet-50 training, Mk2 (MLPerf v1.0 / v1.1, TF1.15; throughput from the result logs)
    Row("M5", "MLP v1.0 M5", "ResNet-50 training, Mk2 POD16, GBS 1,920", 27527, "images/s",
        _resnet_train("ipu-pod16", 16, 20, 6, 0.15, tf1_calls=True, stable_norm=True), True,
        ("resnet-recompute", "tf1-calls", "bn-span", "stable-norm")),
    Row("M6", "MLP v1.0 M6", "ResNet-50 training, Mk2 POD64, GBS 2,560", 83404, "images/s",
        _resnet_train("ipu-pod64", 64, 20, 2, 0.14, tf1_calls=True, stable_norm=True, replicas_per_process=4), True,
        ("resnet-recompute", "tf1-calls", "bn-span", "stable-norm")),
    Row("M13", "MLP v1.1 M13", "ResNet-50 training, Mk2 POD16, GBS 3,200", 29543, "images/s",
        _resnet_train("ipu-pod16", 16, 20, 10, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M14", "MLP v1.1 M14", "ResNet-50 training, Mk2 POD64, GBS 3,840", 108011, "images/s",
        _resnet_train("ipu-pod64", 64, 20, 3, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M15", "MLP v1.1 M15", "ResNet-50 training, Mk2 POD128, GBS 5,120", 178212, "images/s",
        _resnet_train("ipu-pod128", 128, 20, 2, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M16", "MLP v1.1 M16", "ResNet-50 training, Mk2 POD256, GBS 10,240", 325997, "images/s",
        _resnet_train("ipu-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    # ResNet-50 training, Bow (MLPerf v2.0; Graphcore's table)
    Row("M23", "MLP v2.0 M23", "ResNet-50 training, Bow Pod16, GBS 3,520", 43127, "images/s",
        _resnet_train("bow-pod16", 16, 22, 10, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M24", "MLP v2.0 M24", "ResNet-50 training, Bow Pod64, GBS 5,120", 146252, "images/s",
        _resnet_train("bow-pod64", 64, 20, 4, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M25", "MLP v2.0 M25", "ResNet-50 training, Bow Pod128, GBS 5,120", 229435, "images/s",
        _resnet_train("bow-pod128", 128, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("M26", "MLP v2.0 M26", "ResNet-50 training, Bow Pod256, GBS 10,240", 421575, "images/s",
        _resnet_train("bow-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("B3", "GCN-P B3", "ResNet-50 training, Bow Pod256, GBS 10,240", 425514, "images/s",
        _resnet_train("bow-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("configuration inferred by the doc from MLPerf v1.1's POD256 config [U]", "lars", "resnet-recompute",
         "tf1-calls", "bn-span")),
    Row("B13", "GCN-S30 B13", "ResNet-50 training, Bow Pod16, GBS 3,520 (TF1)", 44059, "images/s",
        _resnet_train("bow-pod16", 16, 22, 10, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("B14", "GCN-S30 B14", "ResNet-50 training, Bow Pod16, GBS 16,416 (PyTorch)", 37061, "images/s",
        _resnet_train("bow-pod16", 16, 18, 57, 0.16, pytorch=True), True,
        ("sgd_combined is momentum SGD with the velocity as the gradient accumulator (train.py: "
         "use_combined_accum=True)", "recomputation: a checkpoint after every block (the config names "
        "35 checkpoint tensors)", "the table says GBS 16,384 [U]")),
    Row("B15", "GCN-S30 B15", "ResNet-50 training, Bow Pod64, GBS 5,120", 153205, "images/s",
        _resnet_train("bow-pod64", 64, 20, 4, 0.15, "lars", tf1_calls=True), True,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    Row("B16", "GCN-S30 B16", "ResNet-50 training, Bow Pod256, GBS 10,240", 456906, "images/s",
        _resnet_train("bow-pod256", 256, 20, 2, 0.15, "lars", tf1_calls=True), False,
        ("lars", "resnet-recompute", "tf1-calls", "bn-span")),
    # BERT pre-training (unpacked), Bow Pod16 / Pod64
    Row("B10", "GCN-P B10", "BERT-Large Ph1 (SL128) PopART, Bow Pod16, mbs 8", 5179, "sequences/s",
        _bert_train("bert-large", "bow-pod16", 4, 8, 2048, [3, 7, 7, 7], _LARGE_AMP, attention_dropout=0.0,
                    embedding_serialization=5, split_qkv=True), True,
        ("bert-recompute", "attn-dropout", "emb-serial")),
    Row("B11", "GCN-P B11", "BERT-Large Ph1 (SL128) TF1, Bow Pod16", 5125, "sequences/s",
        _bert_train("bert-large", "bow-pod16", 4, 8, 2050, [3, 7, 7, 7], _LARGE_AMP, attention_dropout=0.0,
                    merged_collectives=("all_reduce",), tensorflow=True, tf1=True), True,
        ("TF1's Grouped pipeline schedule runs as PopART's pipeline cycles", "tf-copies", "bert-recompute",
         "attn-dropout", "tf-combine", "tf-stable-norm", "tf-clear-pass")),
    Row("B12", "GCN-P B12", "BERT-Large Ph1 (SL128) PopART, Bow Pod64, mbs 8", 19353, "sequences/s",
        _bert_train("bert-large", "bow-pod64", 16, 8, 512, [3, 7, 7, 7], _LARGE_AMP, attention_dropout=0.0,
                    embedding_serialization=5, split_qkv=True), False,
        ("RF 16 assumed by the doc, and the POD16 AMP (the POD64 config is missing) [U]", "bert-recompute",
         "attn-dropout", "emb-serial")),
    Row("B33", "GCN-S31 B33", "BERT-Large Ph1 (SL128) TF2, Bow Pod16", 4528, "sequences/s",
        _bert_train("bert-large", "bow-pod16", 4, 8, 2040, [3, 7, 7, 7], [0.10, 0.19, 0.20, 0.25], rts=False,
                    attention_dropout=0.0, merged_collectives=("all_reduce",), tensorflow=True),
        True, ("tf2", "tf-copies", "bert-recompute", "tf-combine")),
    Row("B44", "GCN-S31 B44", "BERT-Base Ph1 (SL128) PopART, Bow Pod16", 16391, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 32, 512, [0, 4, 4, 4], [0.28] * 4, attention_dropout=0.0,
                    embedding_serialization=5, split_qkv=True), True,
        ("IPU0 holds the embedding only (encoder_start_ipu 1)", "bert-recompute", "attn-dropout", "emb-serial")),
    Row("B45", "GCN-S31 B45", "BERT-Base Ph1 (SL128) TF2, Bow Pod16", 15157, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 32, 510, [0, 4, 4, 4], [0.28, 0.26, 0.28, 0.28], rts=False,
                    attention_dropout=0.0, merged_collectives=("all_reduce",), tensorflow=True),
        True, ("tf2", "tf-copies", "bert-recompute", "tf-combine")),
    Row("B46", "GCN-S33 B46", "BERT-Base Ph1 (SL128) PyTorch, Bow Pod16", 15911, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 32, 512, [0, 4, 4, 4], [0.25] * 4, vocab=30522, recompute=True,
                    attention_dropout=0.0, output_mode="Sum", pytorch=True),
        True, ("vocab, optimizer_state_offchip and recompute_checkpoint_every_layer as the PyTorch config",
               "pt-options", "pt-not-modelled")),
    Row("B47", "GCN-S33 B47", "BERT-Base Ph2 (SL512) PopART, Bow Pod16", 3656, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 8, 512, [0, 4, 4, 4], [0.28] * 4, seq_len=512, mask_tokens=76,
                    attention_dropout=0.0, embedding_serialization=5, split_qkv=True),
        True, ("bert-recompute", "attn-dropout", "emb-serial")),
    Row("B48", "GCN-S33 B48", "BERT-Base Ph2 (SL384) TF2, Bow Pod16", 4387, "sequences/s",
        _bert_train("bert-base", "bow-pod16", 4, 8, 510, [0, 4, 4, 4], [0.28, 0.26, 0.28, 0.28], seq_len=384,
                    mask_tokens=56, rts=False, attention_dropout=0.0,
                    merged_collectives=("all_reduce",), tensorflow=True),
        True, ("tf2", "tf-copies", "bert-recompute", "tf-combine")),
    # BERT-Large packed pre-training, MLPerf (PopART, SL512; throughput from the result logs)
    *[Row(rid, f"MLP v1.0 {rid}", f"BERT-Large MLPerf v1.0 {div}, packed SL512, Mk2 POD16", pub, "sequences/s",
          _packed_bert("ipu-pod16", 4, 2, 192, [0.20, 0.20, 0.25, 0.25], vocab=30400, layers_per_ipu=[3, 7, 7, 7],
                       off_chip=True, attention_dropout=0.0, embedding_serialization=5, split_qkv=True),
          rid in _ASSERTED_PACKED, _MLPERF + ("nsp", "emb-serial", "attn-dropout")
          + (("the open JSON sets GA 96; the log reports GA 192 and GBS 3072, used here [U]",) if div == "open" else ()))
      for rid, div, pub in (("M1", "closed", 1419), ("M2", "open", 1416))],
    *[Row(rid, f"MLP v1.0 {rid}", f"BERT-Large MLPerf v1.0 {div}, packed SL512, Mk2 POD64", pub, "sequences/s",
          _packed_bert("ipu-pod64", 8, 2, 96, [1.0] * 8, vocab=30400, layers_per_ipu=[0, 3, 3, 3, 3, 4, 4, 4],
                       attention_dropout=0.0, embedding_serialization=5),
          rid in _ASSERTED_PACKED, _MLPERF + ("IPU0 holds the embedding only (encoder_start_ipu 1)", "emb-serial", "attn-dropout"))
      for rid, div, pub in (("M3", "closed", 4241), ("M4", "open", 4243))],
    *[Row(rid, f"MLP v1.1 {rid}", f"BERT-Large MLPerf v1.1 {div}, packed SL512, Mk2 POD16, attention/FFN split",
          pub, "sequences/s", _packed_bert("ipu-pod16", 4, 2, 192, [0.23] * 4, att_ffn=_ATT_FFN_V11_POD16,
                                           off_chip=True, attention_dropout=0.0, clip_norm=clip,
                                           embedding_serialization=4, split_qkv=True),
          rid in _ASSERTED_PACKED,
          _MLPERF + ("att-ffn", "lamb-fp16", "emb-serial", "attn-dropout") + ("clip",) * bool(clip))
      for rid, div, clip, pub in (("M7", "closed", 1.0, 1524), ("M8", "open", 0.0, 1527))],
    *[Row(rid, f"MLP v1.1 {rid}", f"BERT-Large MLPerf v1.1 {div}, packed SL512, Mk2 {pod.upper()}, attention/FFN "
          "split", pub, "sequences/s", _packed_bert(f"ipu-{pod}", rf, 2, 96, [0.20] + [0.25] * 7,
                                                      att_ffn=_ATT_FFN_V11_POD64, attention_dropout=0.0,
                                                      sharding_domain=8 if rf > 8 else 0, clip_norm=clip,
                                                      embedding_serialization=4),
          rid in _ASSERTED_PACKED,
          _MLPERF + ("att-ffn", "emb-serial", "attn-dropout") + (("lamb-fp16", "poprun-rts") if rf == 16 else ())
          + ("clip",) * bool(clip))
      for rid, div, pod, rf, clip, pub in (("M9", "closed", "pod64", 8, 1.0, 4792),
                                           ("M10", "open", "pod64", 8, 0.0, 4896),
                                           ("M11", "closed", "pod128", 16, 100.0, 9028),
                                           ("M12", "open", "pod128", 16, 0.0, 9208))],
    *[Row(rid, f"MLP v2.0 {rid}", f"BERT-Large MLPerf v2.0, packed SL512, Bow {pod}, attention/FFN split", pub,
          "sequences/s", _packed_bert(f"bow-{pod.lower()}", rf, 3, ga, [1.0] * 8, att_ffn=_ATT_FFN_V20_POD64,
                                      prefetch_depth=3, merged_collectives=("all_reduce",),
                                      sharding_domain=8 if rf > 8 else 0, clip_norm=clip,
                                      embedding_serialization=4),
          rid in _ASSERTED_PACKED, _MLPERF + ("att-ffn", "lamb-fp16", "nsp", "emb-serial",
                            "merge_collectives: bert.py sets mergeAllReduceCollectives (the LAMB norms' and the "
                            "shards' all-reduces; RTS reduce-scatters and all-gathers stay one per tensor, as "
                            "SDK 2.5 merges no others)", "clip") + (("poprun-rts",) if rf > 8 else ()))
      for rid, pod, rf, ga, clip, pub in (("M18", "Pod64", 8, 96, 1000.0, 7411), ("M19", "Pod128", 16, 64, 100.0, 12676),
                                          ("M20", "Pod256", 32, 36, 100.0, 19071))],
    Row("M17", "MLP v2.0 M17", "BERT-Large MLPerf v2.0, packed SL512, Bow Pod16, FP8 activation checkpoints", 2304,
        "sequences/s", _packed_bert("bow-pod16", 2, 3, 256, [0.3] * 8, att_ffn=_ATT_FFN_V20_POD16, prefetch_depth=3,
                                    merged_collectives=("all_reduce",), clip_norm=1000.0, checkpoint_dtype="float8",
                                    embedding_serialization=4),
        True, _MLPERF + ("att-ffn", "fp8-checkpoints", "lamb-fp16", "nsp", "emb-serial", "clip")),
    # BERT-Large packed pre-training, Graphcore's table (PopART and PyTorch examples, SDK 3.1-3.3)
    *[Row(rid, f"GCN-S31 {rid}", f"BERT-Large Ph1 packed (SL128) PopART, Bow {pod}", pub, "sequences/s",
          _packed_bert(f"bow-{pod.lower()}", rf, 8, ga, _LARGE_AMP, seq_len=128, mask_tokens=22, vocab=30400,
                       packing_factor=1.17, layers_per_ipu=[3, 7, 7, 7], off_chip=True, attention_dropout=0.0,
                       embedding_serialization=5, split_qkv=True), rid in _ASSERTED_PACKED,
          ("packed", "packing factor 1.17 (the PyTorch config's at SL128): PopART counts the real sequences of "
           "each pack, the dataset's factor is not stated [U]", "nsp", "emb-serial", "attn-dropout"))
      for rid, pod, rf, ga, pub in (("B32", "Pod16", 4, 1712, 6044), ("B35", "Pod64", 16, 428, 22759))],
    *[Row(rid, f"GCN-S31 {rid}", f"BERT-Large Ph2 packed (SL512) PopART, Bow {pod}", pub, "sequences/s",
          _packed_bert(f"bow-{pod.lower()}", rf, 2, ga, [0.16, 0.21, 0.21, 0.21], vocab=30400,
                       layers_per_ipu=[3, 7, 7, 7], off_chip=True, attention_dropout=0.0,
                       embedding_serialization=5, split_qkv=True), rid in _ASSERTED_PACKED,
          ("packed", "packing factor 2.0 (the PyTorch config's at SL512); the table's GBS of 9,600 packs against "
           "16,384 unpacked suggests about 1.7 for this dataset [U]", "nsp", "emb-serial", "attn-dropout"))
      for rid, pod, rf, ga, pub in (("B38", "Pod16", 4, 1200, 2126), ("B40", "Pod64", 16, 300, 7789))],
    *[Row(rid, f"GCN-S31 {rid}", f"BERT-Large Ph{1 if sl == 128 else 2} packed (SL{sl}) PyTorch, Bow {pod}", pub,
          "sequences/s", _packed_bert(f"bow-{pod.lower()}", rf, mbs, ga, amp, seq_len=sl, mask_tokens=mt + 2,
                                      vocab=30522, packing_factor=pf, layers_per_ipu=[3, 7, 7, 7], off_chip=True,
                                      attention_dropout=0.0, output_mode="Sum", pytorch=True,
                                      embedding_serialization=2),
          rid in _ASSERTED_PACKED, ("packed", f"packing factor {pf} (the config's packing_factor; its GA is ceil(GA / {pf}))",
                  f"mask_tokens {mt} + 2 (run_pretraining.py:61-62 adds max_sequences_per_pack - 1 for packed data)",
                  "pt-gather", "nsp", "emb-serial", "pt-options", "pt-not-modelled")
          + (("pt-pod64",) if pod == "Pod64" else ()))
      for rid, sl, pod, rf, mbs, ga, amp, mt, pf, pub in (
          ("B34", 128, "Pod16", 4, 8, 1751, _LARGE_AMP, 20, 1.17, 5592),
          ("B37", 128, "Pod64", 16, 8, 438, [0.14, 0.19, 0.19, 0.19], 20, 1.17, 18494),
          ("B39", 512, "Pod16", 4, 2, 1024, [0.10, 0.15, 0.15, 0.15], 76, 2.0, 1969),
          ("B41", 512, "Pod64", 16, 2, 256, [0.13, 0.19, 0.19, 0.19], 76, 2.0, 6510))],
    # BERT-Large SQuAD fine-tuning, Bow Pod16 (8-IPU pipeline, 2 replicas)
    Row("B42", "GCN-S31 B42", "BERT-Large SQuAD v1.1 fine-tuning (SL384) PopART, Bow Pod16", 1183, "sequences/s",
        _squad_train(2, 30400, 4, _SQUAD_POPART_AMP, "adam"), False, ("squad-popart", "bert-recompute")),
    Row("B43", "GCN-S31 B43", "BERT-Large SQuAD fine-tuning (SL384) PyTorch, Bow Pod16", 989, "sequences/s",
        _squad_train(2, 30522, 2, _SQUAD_PYTORCH_AMP, "adamw", attention_dropout=0.15, output_mode="All"), False,
        ("attention_probs_dropout_prob 0.15 and outputMode All (run_squad.py:51: the loss and both logits come "
         "back every micro-batch) as the source", "pt-not-modelled", "pt-squad", "per-call",
         "GCN-S33 gives 1,009 sequences/s for the same config")),
    # EfficientNet-B4 G16 training, TF1 (graphcore/examples vision/cnns/tensorflow1/training)
    *[Row(rid, f"{src} {rid}", f"EfficientNet-B4 (G16) training, Bow {pod}", pub, "images/s",
          _effnet_train(f"bow-{pod.lower()}", rf, ga), True,
          ("effnet", "lars", "tf-combine", "tf-copies", "tf-stable-norm") + (("effnet-pod256",) if rf == 128 else ()))
      for rid, src, pod, rf, ga, pub in (("B4", "GCN-P", "Pod16", 8, 256, 8936), ("B5", "GCN-P", "Pod64", 32, 64, 34943),
                                         ("B6", "GCN-P", "Pod256", 128, 16, 117641),
                                         ("B17", "GCN-S30", "Pod16", 8, 256, 9000),
                                         ("B19", "GCN-S30", "Pod64", 32, 64, 34140),
                                         ("B20", "GCN-S30", "Pod256", 128, 16, 122665))],
    # ResNeXt-101 32x4d training, TF1 (graphcore/examples vision/cnns/tensorflow1/training)
    *[Row(rid, f"{src} {rid}", "ResNeXt-101 32x4d training, Bow Pod16, GBS 768", pub, "images/s", _resnext_train(),
          True, ("resnext", "tf-combine", "tf-copies", "tf-stable-norm"))
      for rid, src, pub in (("B7", "GCN-P", 12221), ("B21", "GCN-S30", 12277))],
    # ViT-B/16 training, PyTorch (graphcore/examples vision/vit/pytorch, SDK 3.0)
    Row("B22", "GCN-S30 B22", "ViT-B/16 pre-training (LAMB, mixup, 8-bit images), Bow Pod16", 7615, "images/s",
        _vit_train("bow-pod16", 4, 2048, pretrain=True), False, ("vit-pretrain", "vit-not-modelled")),
    Row("B23", "GCN-S30 B23", "ViT-B/16 pre-training (LAMB, mixup, 8-bit images), Bow Pod64", 27868, "images/s",
        _vit_train("bow-pod64", 16, 512, pretrain=True, sharding_domain=2), False,
        ("vit-pretrain", "vit-not-modelled", "vit-pod64")),
    Row("B24", "GCN-S30 B24", "ViT-B/16 fine-tuning (SGD, fp16 images), Bow Pod16", 7319, "images/s",
        _vit_train("bow-pod16", 4, 30, pretrain=False), True, ("vit-not-modelled",)),
    # Swin training, PyTorch (graphcore/examples vision/swin/pytorch, SDK 3.0)
    Row("B28", "GCN-S30 B28", "Swin-Tiny pre-training fp32, Bow Pod16, GBS 1,024", 3779, "images/s",
        _swin_train(tiny=True), True, ("swin",)),
    Row("B29", "GCN-S30 B29", "Swin-Large fine-tuning fp16, Bow Pod16, GBS 8,196", 3279, "images/s",
        _swin_train(tiny=False), True, ("swin",)),
    # U-Net training, TensorFlow 2 (graphcore/examples vision/unet_medical/tensorflow2)
    Row("B30", "GCN-S30 B30", "U-Net (medical segmentation) training, Bow-2000, GBS 24", 151, "images/s",
        _unet_train(), False, ("unet", "tf-copies")),
    # Conformer-medium training, PyTorch (graphcore/examples speech/conformer/pytorch README, global batch 16,128)
    *(Row(f"C{i}", f"EX-CF C{i}", f"Conformer-medium training, {label}, GBS 16,128", pub, "samples/s",
          _conformer_train(system, rf, 16128 // (4 * rf), 4 if rf == 16 else 1), False, ("conformer",) + extra)
      for i, (label, system, rf, pub, extra) in enumerate((
          ("IPU-M2000 (POD4)", "ipu-m2000", 1, 819, ("conformer-pod4",)),
          ("Mk2 POD16", "ipu-pod16", 4, 3163, ()),
          ("Mk2 POD64", "ipu-pod64", 16, 11689, ("conformer-pod64",)),
          ("Bow-2000 (POD4)", "bow-2000", 1, 1126, ("conformer-pod4",)),
          ("Bow Pod16", "bow-pod16", 4, 4302, ()),
          ("Bow Pod64", "bow-pod64", 16, 15815, ("conformer-pod64",))), start=1)),
    # BERT SQuAD inference, one IPU (PopRT)
    Row("I7 bs16", "RT I7 bs16", "BERT-Base SQuAD inference fp16 (SL128), batch 16", 4817, "sequences/s",
        _squad_infer("bert-base", 16, 128, 64, amp=0.4, benchmark_options=True), True,
        ("poprt-bert", "batches per step 64: the script's default (the README's command gives none)")),
    Row("I7 bs128", "RT I7 bs128", "BERT-Base SQuAD inference fp16 (SL128), batch 128", 5672, "sequences/s",
        _squad_infer("bert-base", 128, 128, 64, amp=0.4, benchmark_options=True, fp32_ops=("layernorm", "gelu")), True,
        ("poprt-bert", "batches per step 64: the script's default (the README's command gives none)",
         "poprt-bert-fp32")),
    Row("I9", "RT I9", "BERT-Large SQuAD-head inference fp16 (SL128), batch 18, 256 batches per step", 1473,
        "sequences/s", _squad_infer("bert-large", 18, 128, 256, amp=0.15, benchmark_options=True), True,
        ("poprt-bert", "bert-large-uncased with the question-answering head (untrained head), outlining on "
         "(not modelled)")),
    *[Row(f"I11 bs{bs}", f"RT I11 bs{bs}", f"BERT-Base SQuAD inference fp16 (SL256, bertsquad-12), batch {bs}",
          pub, "sequences/s", _squad_infer("bert-base", bs, 256, 1, io_tiles=32, fp32_ops=("layernorm", "gelu")),
          False, ("poprt-i11",))
      for bs, pub in _I11.items()],
    # ResNet-50 inference, one IPU (PopRT)
    *[Row(f"I1 bs{bs}", f"RT I1 bs{bs}", f"ResNet-50 inference fp16, batch {bs}, synthetic data", pub,
          "images/s", _resnet_infer(bs, synthetic=True), bs in _ASSERTED_I1, ("poprt", "poprt-bps"))
      for bs, pub in _I1.items()],
    *[Row(f"I2 bs{bs}", f"RT I2 bs{bs}", f"ResNet-50 inference fp16, batch {bs}, real data, overlapped IO",
          pub, "images/s", _resnet_infer(bs), bs in _ASSERTED_I2, ("poprt", "poprt-bps"))
      for bs, pub in _I2.items()],
    *[Row(f"I3 bs{bs}", f"RT I3 bs{bs}", f"ResNet-50 inference fp32, batch {bs}, synthetic data", pub,
          "images/s", _resnet_infer(bs, "float32", synthetic=True), bs in _ASSERTED_I3, ("poprt", "poprt-bps"))
      for bs, pub in _I3.items()],
    *[Row(f"I4 bs{bs}", f"RT I4 bs{bs}", f"ResNet-50 inference FP8 (stem conv and classifier fp16), batch {bs}, "
          "synthetic data", pub, "images/s", _resnet_infer(bs, synthetic=True, fp8=True), True,
          ("poprt", "poprt-bps", "poprt-fp8")) for bs, pub in _I4.items()],
    *[Row(f"I12 bs{bs}", f"RT I12 bs{bs}", f"ResNet-50 inference FP8 (stem conv and classifier fp16), batch {bs}, "
          "real data, overlapped IO", pub, "images/s", _resnet_infer(bs, fp8=True), bs in _ASSERTED_I12,
          ("poprt", "poprt-bps", "poprt-fp8", "poprt-fp8-io")) for bs, pub in _I12.items()],
    Row("I5", "RT I5", "ResNet-50 inference fp16, batch 80, 128 batches per step, overlapped IO", 15541,
        "images/s", _resnet_infer(80, device_iterations=128, prefetch_depth=2), True,
        ("poprt", "poprt-depth")),
    # ViT-B/16 inference, one IPU (PopRT)
    *[Row(f"I13 bs{bs}", f"RT I13 bs{bs}", f"ViT-B/16 inference fp16, batch {bs}, 128 batches per step, overlapped IO",
          pub, "images/s", _vit_infer(bs), bs == 8,
          ("poprt-vit",) + (() if bs == 8 else ("tracked: within 30 % when added, but by under 5 points, as PROMOTED "
                                                 "leaves such rows",)))
      for bs, pub in _I13.items()],
    Row("I6", "RT I6", "ResNet-50 inference fp16, batch 1, 1 batch per step (low latency)", 3119, "images/s",
        _resnet_infer(1, device_iterations=1, io_tiles=0, prefetch_depth=2), True,
        ("poprt", "poprt-depth", "no IO tiles (no --enable_overlapio)", "the README's --eightbitio flag "
        "is not in the script: 8-bit input as the doc says [U]")),
]
#: rows tracked when added (outside 30 %) that model changes have since brought within 25 % (reports of
#: 2026-11-29); asserted at 30 % from then on like the rows added within it, so a change that loses the
#: gain fails tests/test_calibration.py. The rows between 25 and 30 % stay tracked: too near the edge for
#: a guard.
PROMOTED = frozenset(("M1", "M2", "M7", "M8", "M25", "M26", "B3", "B12", "B16", "B30", "B34", "B37", "B40",
                      "B42", "B43", "I12 bs64", "I12 bs90", "I12 bs96"))
PUBLISHED_ROWS = [replace(r, asserted=True) if r.id in PROMOTED else r for r in PUBLISHED_ROWS]
PUBLISHED_BY_ID = {r.id: r for r in PUBLISHED_ROWS}
_END_TO_END_BY_ID = {"B1": END_TO_END[0], "B2": END_TO_END[1]}  # GCN-P B1, B2: already end to end


@dataclass(frozen=True)
class Ratio:
    """How throughput scales between two published runs of one workload: the ratio of the
    simulated throughputs against the ratio of the published ones."""

    name: str
    what: str
    source: str
    numerator: str  # row ids (PUBLISHED_ROWS, or "B1"/"B2" of END_TO_END)
    denominator: str
    asserted: bool

    @staticmethod
    def _row(row_id: str):
        return _END_TO_END_BY_ID.get(row_id) or PUBLISHED_BY_ID[row_id]

    @property
    def published(self) -> float:
        return self._row(self.numerator).published / self._row(self.denominator).published

    def simulated(self) -> float:
        return self._row(self.numerator).simulated() / self._row(self.denominator).simulated()


SCALING = [
    Ratio("resnet50_mk2_v10_16_64", "ResNet-50 training, Mk2 POD16 → POD64 (GBS 1,920 → 2,560)",
          "MLP v1.0 M5 → M6", "M6", "M5", True),
    Ratio("resnet50_mk2_v11_16_64", "ResNet-50 training, Mk2 POD16 → POD64", "MLP v1.1 M13 → M14", "M14", "M13", True),
    Ratio("resnet50_mk2_v11_64_128", "ResNet-50 training, Mk2 POD64 → POD128",
          "MLP v1.1 M14 → M15", "M15", "M14", True),
    Ratio("resnet50_mk2_v11_128_256", "ResNet-50 training, Mk2 POD128 → POD256 (same GA 2, over GW-Links)",
          "MLP v1.1 M15 → M16", "M16", "M15", True),
    Ratio("resnet50_bow_v20_16_64", "ResNet-50 training, Bow Pod16 → Pod64", "MLP v2.0 M23 → M24", "M24", "M23", True),
    Ratio("resnet50_bow_v20_64_128", "ResNet-50 training, Bow Pod64 → Pod128",
          "MLP v2.0 M24 → M25", "M25", "M24", True),
    Ratio("resnet50_bow_v20_128_256", "ResNet-50 training, Bow Pod128 → Pod256 (same GA 2, over GW-Links)",
          "MLP v2.0 M25 → M26", "M26", "M25", True),
    Ratio("resnet50_bow_p_16_64", "ResNet-50 training, Bow Pod16 → Pod64 (end-to-end rows)",
          "GCN-P B1 → B2", "B2", "B1", True),
    Ratio("resnet50_bow_p_64_256", "ResNet-50 training, Bow Pod64 → Pod256", "GCN-P B2 → B3", "B3", "B2", True),
    Ratio("resnet50_bow_s30_16_64", "ResNet-50 training, Bow Pod16 → Pod64", "GCN-S30 B13 → B15", "B15", "B13", True),
    Ratio("resnet50_bow_s30_64_256", "ResNet-50 training, Bow Pod64 → Pod256", "GCN-S30 B15 → B16", "B16", "B15", True),
    Ratio("bert_large_ph1_p_16_64", "BERT-Large Ph1 PopART, Bow Pod16 → Pod64 (mbs 8)", "GCN-P B10 → B12",
          "B12", "B10", True),
    Ratio("vit_base_pretrain_s30_16_64", "ViT-B/16 pre-training, Bow Pod16 → Pod64 (GA 2,048 → 512)",
          "GCN-S30 B22 → B23", "B23", "B22", True),
    *(Ratio(f"conformer_{gen}_{a}_{b}", f"Conformer-medium training, {what} (GBS 16,128)", f"EX-CF C{i} → C{i + 1}",
            f"C{i + 1}", f"C{i}", True)
      for gen, i, a, b, what in (("mk2", 1, 4, 16, "IPU-M2000 → Mk2 POD16"), ("mk2", 2, 16, 64, "Mk2 POD16 → POD64"),
                                 ("bow", 4, 4, 16, "Bow-2000 → Bow Pod16"), ("bow", 5, 16, 64, "Bow Pod16 → Pod64"))),
    Ratio("efficientnet_b4_bow_s30_16_64", "EfficientNet-B4 G16 training, Bow Pod16 → Pod64 (GBS 6,144)",
          "GCN-S30 B17 → B19", "B19", "B17", True),
    Ratio("efficientnet_b4_bow_s30_64_256", "EfficientNet-B4 G16 training, Bow Pod64 → Pod256 (GBS 6,144)",
          "GCN-S30 B19 → B20", "B20", "B19", True),
    Ratio("resnet50_mk2_to_bow", "ResNet-50 training, GBS 1,920 on POD16: Mk2 → Bow", "MLP v1.0 M5 → GCN-P B1",
          "B1", "M5", True),
    Ratio("resnet50_infer_fp16_synth_1_90", "ResNet-50 inference fp16 synthetic, batch 1 → 90",
          "RT I1 bs1 → bs90", "I1 bs90", "I1 bs1", True),
    Ratio("resnet50_infer_fp16_real_1_90", "ResNet-50 inference fp16 real data, batch 1 → 90",
          "RT I2 bs1 → bs90", "I2 bs90", "I2 bs1", True),
    Ratio("resnet50_infer_fp8_synth_1_90", "ResNet-50 inference FP8 synthetic, batch 1 → 90",
          "RT I4 bs1 → bs90", "I4 bs90", "I4 bs1", True),
    Ratio("resnet50_infer_fp16_to_fp8_synth_90", "ResNet-50 inference synthetic, batch 90: fp16 → FP8",
          "RT I1 bs90 → I4 bs90", "I4 bs90", "I1 bs90", True),
    Ratio("resnet50_infer_fp32_synth_1_16", "ResNet-50 inference fp32 synthetic, batch 1 → 16",
          "RT I3 bs1 → bs16", "I3 bs16", "I3 bs1", True),
    Ratio("resnet50_infer_latency_to_throughput", "ResNet-50 inference: batch 1, 1 per step → batch 80, 128 per step",
          "RT I6 → I5", "I5", "I6", True),
    Ratio("vit_base_infer_8_32", "ViT-B/16 inference fp16, batch 8 → 32", "RT I13 bs8 → bs32", "I13 bs32", "I13 bs8",
          True),
]

# Batch sizes at which PopRT reports out of memory: does the simulator agree? (reported only)
MEMORY_POINTS = [
    ("I2 bs96", "RT I2", "ResNet-50 inference fp16, batch 96, real data, overlapped IO", _resnet_infer(96)),
    ("I3 bs32", "RT I3", "ResNet-50 inference fp32, batch 32, synthetic data",
     _resnet_infer(32, "float32", synthetic=True)),
]

# Rows of PUBLISHED the zoo cannot run as measured yet, and why (listed, never faked).
NOT_EXPRESSIBLE = [
    ("M21, M22", "BERT-Large MLPerf v2.0, PaddlePaddle", "configuration not extracted (mbs, RF, placement unknown)"),
    ("M27", "RNN-T MLPerf v2.0", "no RNN-T / LSTM model in the zoo"),
    ("B18", "EfficientNet-B4 (G16-GN), PyTorch, Bow Pod16", "the measured configuration is unknown: the "
     "table's GBS 1,024 and precision 16.32 are not the PyTorch config's (GBS 2,048, 16.16)"),
    ("B8", "ViT (B/16?), pre-SDK 2.5, Bow Pod64", "the measured configuration is unknown (31,200 images/s, "
     "above the SDK 3.0 pre-training row B23: another task or configuration)"),
    ("B9, B25, B26, B31", "Mini DALL-E, DINO", "not in the zoo"),
    ("B27", "Swin-Base, Bow Pod16", "the measured configuration is unknown: the table's GBS 512 is none of the "
     "port's Swin-Base configs (SWIN_BASE_LINEAR and SWIN_BASE_384: GBS 1,024)"),
    ("B36", "BERT-Large Ph1 TF2, Bow Pod64", "the measured configuration is unknown (the table's GA 520 is not "
     "the repo's 1020)"),
    ("I8, I10", "BERT inference, packed (PopRT)", "PopRT's PackRunner packs queued host requests at run time "
     "(first fit, up to max_valid_num 40 / 64 sequences per batch) of random lengths (normal around "
     "--avg_seq_len, clipped), so the sequences per pack are neither fixed nor published; the throughput is "
     "requests over wall time of asynchronous host calls; and the model is the SQuAD span head (I7, I9)"),
    ("H1-H4", "small CNN training, host IO tutorial",
     "not in the zoo (conv + GroupNorm fp32 CNN); hardware not stated"),
    ("U1-U3", "gc-flops, gc-hosttraffictest, gc-iputraffictest", "microbenchmarks, not end to end (U2, U3 are "
     "calibration checks above)"),
    ("GPT-2", "GPT-2 (zoo gpt2-*)", "no published IPU throughput found (doc section 6)"),
]


# --- memory: published tile-memory figures ---------------------------------------------------------
# The only published per-IPU memory figures found (searched: PopVision Graph Analyser guide, the
# "Memory and Performance Optimisation on the IPU" guide, graphcore/examples READMEs and configs,
# poptorch/popart docs, poplibs): poplibs' benchmark regression file. Each row is a single fully
# connected layer (fwd + bwd + wu) compiled for IPUModel2 (Mk2: 1,472 tiles of 624 KiB); TotalMemory
# is, as poplibs' tools/bench.py computes it, the always-live bytes summed over tiles plus each
# tile's highest not-always-live bytes, summed over tiles: the definition of IpuMemory.total_bytes.
POPLIBS_MEMORY = ("graphcore/poplibs `tests/benchmark_results.csv` at 8dcde1ec (the parent of 3a650a11, which "
                  "deleted the file; values written by `tools/bench.py`), rows `IpuModel2,default`; the tool is "
                  "`tools/fully_connected_layer.cpp` with `--bias 0 --ignore-data` (fp16 data unless `--data-type=float`, fp32 partials, "
                  "availableMemoryProportion 0.6, Pass ALL)")
MEMORY_TOLERANCE = 0.30
#: program-memory categories a TotalMemory of the fully connected tool does not count: the tool
#: profiles the IPUModel without ``compileIPUCode`` (tools/fully_connected_layer.cpp creates its device
#: with TestDevice's default, false), and the rows it writes stayed byte-identical through poplibs
#: commits that changed the codelets' code (62f17270, 7427517f, for the tools that compile) or removed
#: the tool's worker stack size (94b912b3, which shrank every compiled tool's rows by the stack on every
#: tile); the same layer on 1,216 and 1,472 tiles differs by 1,202 B, so nothing per tile is counted.
#: Vertex state is kept (data the graph compiler lays out; not verified either way)
UNCOMPILED_CODE = ("control_code", "vertex_code", "exchange_code", "stack")
MEMORY_WHY = ("30 %, as the held-out rows: what is compared is tensor data and vertex state, whose layout "
              "and temporaries follow the simulator's matmul plans, not Poplar's (a small layer's plan may "
              "differ, and with it where its partials live and for how long); the program code these rows do "
              "not count is sized by the Keras Dense profile below. A row within 30 % is asserted and guards "
              "against regressions")


@lru_cache(maxsize=None)
def fc_layer_memory(batch: int, inputs: int, outputs: int, dtype: str = "float16", groups: int = 1,
                    system="ipu-mk2") -> IpuMemory:
    """The simulator's memory of poplibs' fully connected layer benchmark
    (:func:`sim.poplibs_benchmarks.fc_graph`) on one Mk2 IPU (``--ignore-data``: no host transfers,
    so synthetic data)."""
    return compile_graph(poplibs_benchmarks.fc_graph(batch, inputs, outputs, groups, dtype), system,
                         Options().enableSyntheticData(True)).memory[0]


@dataclass(frozen=True)
class MemoryRow:
    """One published TotalMemory of :data:`POPLIBS_MEMORY` and the simulator's value for it: the
    benchmark's shape and figure come from :mod:`sim.poplibs_benchmarks` (its data file)."""

    name: str  # the benchmark's name in the CSV
    asserted: bool  # within MEMORY_TOLERANCE: tests/test_calibration.py holds it there

    @property
    def _params(self) -> dict:
        return poplibs_benchmarks.BENCHES[self.name].params

    batch = property(lambda self: self._params["batch"])  # --batch-size
    inputs = property(lambda self: self._params["inputs"])  # --input-size
    outputs = property(lambda self: self._params["outputs"])  # --output-size
    dtype = property(lambda self: self._params["dtype"])  # --data-type
    groups = property(lambda self: self._params["groups"])  # --num-groups

    @property
    def published(self) -> int:
        """TotalMemory, bytes."""
        return poplibs_benchmarks.published()[self.name][1]

    def memory(self) -> IpuMemory:
        return fc_layer_memory(self.batch, self.inputs, self.outputs, self.dtype, self.groups)

    def code_bytes(self) -> int:
        """The simulator's program code summed over the tiles (:data:`UNCOMPILED_CODE`), bytes: what
        the published figure does not count."""
        m = self.memory()
        return int(round(sum(m.tile_category(c).sum() for c in UNCOMPILED_CODE)))

    def simulated(self) -> int:
        """Bytes summed over tiles of each tile's peak (always live + its highest not-always-live),
        less the program code the published figure leaves out (:meth:`code_bytes`)."""
        return self.memory().total_bytes - self.code_bytes()

    @property
    def tensor_bytes(self) -> int:
        """The tool's five tensors (prevAct, zDeltas, nextAct, prevDeltas, weights): bytes both
        sides count, so published − these = code, vertex state, exchange and temporaries."""
        itemsize = 4 if self.dtype == "float32" else 2
        return itemsize * self.groups * (2 * self.batch * (self.inputs + self.outputs) + self.inputs * self.outputs)


# every IpuModel2 fully connected row of the file (their cycles are in sim.poplibs_benchmarks); the
# comment is the simulator's error when the row's `asserted` was set (2026-11-29: the rows compared without
# the program code they do not count, UNCOMPILED_CODE; fc_layer_4_1000_1000_half, asserted at -8.1 % with
# code, is -42.5 % without: its published 15.8 MB, twice the batch-8 row's, holds data the simulator's plan
# does not keep)
MEMORY_ROWS = [
    MemoryRow("bert_ffn1_128x1024x4096", True),  # -8.8%
    MemoryRow("bert_ffn1_512x1024x4096", False),  # +27.2%
    MemoryRow("bert_ffn2_128x4096x1024", True),  # +7.3%
    MemoryRow("bert_kqv_512x1024x3072", True),  # +6.4%
    MemoryRow("bert_kqv_128x768x2304", True),  # -7.9%
    MemoryRow("fc_layer_16_1000_1000_half", False),  # +33.6%
    MemoryRow("bert_ffn1_128x768x3072", True),  # +9.6%
    MemoryRow("bert_ffn1_384x1024x4096", True),  # +9.5%
    MemoryRow("bert_ffn1_384x768x3072", True),  # -24.0%
    MemoryRow("bert_ffn1_512x768x3072", True),  # +3.2%
    MemoryRow("bert_ffn2_128x3072x768", True),  # -3.8%
    MemoryRow("bert_ffn2_384x3072x768", True),  # -18.0%
    MemoryRow("bert_ffn2_384x4096x1024", True),  # +2.2%
    MemoryRow("bert_ffn2_512x3072x768", True),  # +2.7%
    MemoryRow("bert_ffn2_512x4096x1024", True),  # +18.8%
    MemoryRow("bert_grouped_12x128x64x128", True),  # -7.0%
    MemoryRow("bert_grouped_12x384x64x384", True),  # +0.1%
    MemoryRow("bert_grouped_12x512x64x512", True),  # -11.4%
    MemoryRow("bert_grouped_16x128x64x128", True),  # +10.2%
    MemoryRow("bert_grouped_16x384x64x384", True),  # -5.1%
    MemoryRow("bert_grouped_16x512x64x512", True),  # +3.5%
    MemoryRow("bert_kqv_128x1024x3072", True),  # -9.2%
    MemoryRow("bert_kqv_384x1024x3072", True),  # -2.2%
    MemoryRow("bert_kqv_384x768x2304", True),  # -12.5%
    MemoryRow("bert_kqv_512x768x2304", True),  # -16.5%
    MemoryRow("bert_proj_128x1024x1024", True),  # +6.1%
    MemoryRow("bert_proj_128x768x768", True),  # +8.3%
    MemoryRow("bert_proj_384x1024x1024", True),  # -14.3%
    MemoryRow("bert_proj_384x768x768", True),  # +2.4%
    MemoryRow("bert_proj_512x1024x1024", False),  # +36.9%
    MemoryRow("bert_proj_512x768x768", True),  # -0.0%
    MemoryRow("fc_layer_1440x100x200", True),  # +5.1%
    MemoryRow("fc_layer_1440x200x400", True),  # +7.4%
    MemoryRow("fc_layer_16_1000_1000_float", True),  # -4.9%
    MemoryRow("fc_layer_16_1000_5_float", True),  # -1.6%
    MemoryRow("fc_layer_16_1000_5_half", True),  # +1.3%
    MemoryRow("fc_layer_16x1324x100", True),  # +7.6%
    MemoryRow("fc_layer_1_1000_1000_float", True),  # -23.1%
    MemoryRow("fc_layer_1_1000_1000_half", False),  # +95.0%
    MemoryRow("fc_layer_1_1000_5_float", False),  # -83.9%
    MemoryRow("fc_layer_1_1000_5_half", False),  # -82.4%
    MemoryRow("fc_layer_4_1000_1000_float", True),  # -12.2%
    MemoryRow("fc_layer_4_1000_1000_half", False),  # -40.8%
    MemoryRow("fc_layer_4_1000_5_float", False),  # -69.6%
    MemoryRow("fc_layer_4_1000_5_half", False),  # -77.0%
    MemoryRow("fc_layer_80_1324_100", True),  # +0.8%
    MemoryRow("fc_layer_8_1000_1000_float", True),  # -2.8%
    MemoryRow("fc_layer_8_1000_1000_half", True),  # +27.0%
    MemoryRow("fc_layer_8_1000_5_float", False),  # -59.8%
    MemoryRow("fc_layer_8_1000_5_half", False),  # -68.2%
]

# poplibs' embedding_layer rows (sim.poplibs_benchmarks.embedding_graph): the same file's TotalMemory of
# a table planned by popops' embedding plan, its lookup and its scatter-add (sim/cost/embedding.py)
EMBEDDING_MEMORY_ROWS = ["embedding_small", "embedding_vlarge", "embedding_vlarge_large_indices"]


@dataclass(frozen=True)
class EmbeddingMemoryRow:
    """One embedding_layer TotalMemory of the poplibs file and the simulator's bytes for it, held at
    :data:`MEMORY_TOLERANCE` (tests/test_calibration.py)."""

    name: str

    @property
    def published(self) -> int:
        return poplibs_benchmarks.published()[self.name][1]

    def memory(self) -> IpuMemory:
        return poplibs_benchmarks.simulated_run(poplibs_benchmarks.BENCHES[self.name]).executable.memory[0]

    def simulated(self) -> int:
        return self.memory().total_bytes


def _embedding_memory_section() -> list[str]:
    rows = []
    for name in EMBEDDING_MEMORY_ROWS:
        r = EmbeddingMemoryRow(name)
        p = poplibs_benchmarks.BENCHES[name].params
        m = r.memory()
        parts = m.summary()["peak_tile_parts"]
        rows.append(f"| `{name}` | {p['entries']:,} × {p['row']}, {p['lookups']:,} | {r.published:,} B | "
                    f"{r.simulated():,} B | {r.simulated() / r.published - 1:+.1%} | weights {_mb(m.by_role['weight'])} "
                    f"+ program {_mb(m.by_role['reserved'])}; fullest tile: temporaries {parts['temporaries']:,} B, "
                    f"activations {parts['activations']:,} B |")
    return ["", "### Embedding layers", "",
            "The same file's TotalMemory of poplibs' `embedding_layer` benchmarks (an fp16 table laid out by "
            "popops' embedding plan, a lookup of the indices and a scatter-add of as many rows into the "
            "table; `sim.poplibs_benchmarks.embedding_graph`; their cycles are in the microbenchmark tables). "
            "The temporaries are what each tile receives: its lookup group's indices and rows. The small "
            "table is over, likely because the simulator keeps the looked-up rows (the graph's output) and the "
            "deltas live to the end, which Poplar, downloading nothing, need not (not checked). Held at "
            f"{MEMORY_TOLERANCE:.0%} by `tests/test_calibration.py`.", "",
            "| benchmark | table, indices | published TotalMemory | simulated | error | simulated split |",
            "|---|---|---:|---:|---:|---|"] + rows


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


def _keras_dense_section() -> list[str]:
    ex = keras_dense_executable()
    rows = []
    for r in KERAS_DENSE_ROWS:
        unit = "cycles" if r.category == "cycleEst" else "B"
        status = _status(r.asserted, r.error, r.tolerance)
        rows.append(f"| {r.category} | {r.published:,.0f} {unit} | {r.simulated():,.0f} {unit} | {r.error:+.1%} | "
                    f"{r.kind} | {status} | {r.how} |")
    plans = "; ".join(f"`{name}`: {c.plan}" for name, c in ex.costs.items())
    return ["", "### PopVision memory report of a Keras Dense layer", "",
            f"Source: {KERAS_DENSE}. The simulator runs `sim.validation.keras_dense_graph` on one `ipu-mk2` "
            f"with host streams ({plans}). Published figures are in binary units (MiB, KiB) as the test writes "
            "them, shown here in bytes. Three of the program-memory constants are fitted to this profile "
            "(`configs/ipu-mk2.toml`: vertex code per codelet, exchange code per phase, control code per step), "
            "so those rows hold to "
            f"{KERAS_DENSE_FITTED_TOLERANCE:.0%} by construction and guard the fit against plan changes; the "
            f"others are held at {KERAS_DENSE_TOLERANCE:.0%} once within it. A tile's matmul temporaries are the part of "
            "its operand blocks the exchange brings (the rest is resident, as poplin's exchange estimate assumes) "
            "and its partials; poplin's planner bounds the whole blocks. TensorFlow gives the layer's matmul "
            "fullyConnectedPass INFERENCE_FWD, which poplin plans with its operands swapped when that is cheaper "
            "(`sim/cost/matmul_swap.py`): the kernel's 1,024 columns become the output positions and the 16 "
            "input rows the channels, so each tile receives a slice of 16 rows by its inner split's share of "
            "the 4,096 inputs. Planned unswapped (before 2026-11-29) maxLive came out +79 % and cycleEst +58 %.", "",
            "| category | published | simulated | error | kind | status | how it is read / simulated |",
            "|---|---:|---:|---:|---|---|---|"] + rows


# Configurations Graphcore publishes as fitting (compiled, not run): the simulator must fit them too;
# and one its own notes say does not fit. (row id, workload, source, setup, published to fit)
_EXAMPLES_BERT = "graphcore/examples `nlp/bert/pytorch/"


def _squad_large_384(replicas: int) -> Setup:
    """configs_squad.yml squad_large_384: 8-IPU pipeline, the SQuAD span head on the last IPU, AdamW
    with its state on chip and sharded, the first moment in fp16 and the second in fp32
    (``enable_half_first_order_momentum``; nlp/bert/pytorch/optimization.py), vocab 30522 (the
    config's default)."""
    return _squad_train(replicas, 30522, 2, _SQUAD_PYTORCH_AMP, "adamw")


_EXAMPLES_GPT2 = "graphcore/examples `nlp/gpt2/pytorch/benchmarks.yml` "


def _gpt2_infer(model: str, layers_per_ipu: list[int], replicas: int) -> Setup:
    """GPT-2 inference as Graphcore's PyTorch example benchmarks it on a Bow Pod16 (EX 3cc8f81
    ``nlp/gpt2/pytorch``: ``benchmarks.yml`` ``pytorch_gpt2_*_infer_gen_pod16``, ``inference_gpt2.py``):
    sequence length 1,024, batch 1, one batch per call, ``ShardedExecution(AutoStage.AutoIncrement)``,
    availableMemoryProportion 0.2 on every IPU, half partials, the LM head serialised 4 ways over the
    padded vocabulary. The example returns the argmax of every position's logits; the zoo the last
    position's logits (the same LM head and logits on IPU 0)."""
    params = _params(seq_len=1024, layers_per_ipu=layers_per_ipu, vocab=50272, embedding_serialization=4,
                     with_loss=False)
    return Setup(model, params, "bow-pod16", replicas=replicas, amp=(0.2,) * len(layers_per_ipu), training=False,
                 sharded=True)


def _gpt2_train(model: str, layers_per_ipu: list[int], amp: list[float], replicas: int, accumulation: int,
                rts: bool, seq_len: int = 1024, embedding_serialization: int = 4) -> Setup:
    """GPT-2 pre-training as Graphcore's PyTorch example benchmarks it on a Bow Pod16 (EX 3cc8f81
    ``nlp/gpt2/pytorch``: ``benchmarks.yml``, ``arguments.py``, ``ipu_options.py``, ``tools.py
    get_optimizer``): micro-batch 1, device iterations 8, a checkpoint after every layer, half
    partials, the vocabulary padded to 50,272 (``config/*.json``) and the LM head serialised over it;
    AdamW with fp16 gradient accumulators and first moment, fp32 second moment, its state off chip
    (``--optimizer-state-offchip`` defaults to true) and sharded where the benchmark sets
    ``--replicated-tensor-sharding``. Not modelled: ``wpe`` on IPU 1 (the zoo keeps both embeddings on
    IPU 0), the loss serialised over 128-position chunks and the ``RemapCE`` custom op."""
    params = _params(seq_len=seq_len, layers_per_ipu=layers_per_ipu, vocab=50272,
                     embedding_serialization=embedding_serialization)
    return Setup(model, params, "bow-pod16", replicas=replicas, accumulation=accumulation, device_iterations=8,
                 amp=tuple(amp), optimizer="adamw", state_dtype=_HALF_FIRST_MOMENT, accum_dtype="float16",
                 optimizer_off_chip=True, rts=rts)


#: B10's run with the PyTorch config's fused QKV weight (the PopART config splits it: split_qkv)
_PT_B10 = replace(PUBLISHED_BY_ID["B10"].setup,
                  params=tuple(kv for kv in PUBLISHED_BY_ID["B10"].setup.params if kv[0] != "split_qkv"))
MEMORY_FITS = [
    ("GCN-P B10", "BERT-Large phase 1 (SL128), Bow Pod16, micro-batch 8, layers [3, 7, 7, 7]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_large_128 (benchmark "
     "`pytorch_bert_large_pretrain_real_pod16`)", _PT_B10, True),
    ("L128 ALS", "the same with automatic loss scaling, AMP [0.13, 0.2, 0.2, 0.2]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_large_128_ALS",
     replace(_PT_B10, amp=(0.13, 0.20, 0.20, 0.20), auto_loss_scaling=True), True),
    ("L512", "BERT-Large phase 2 (SL512), Bow Pod16, micro-batch 2, layers [3, 7, 7, 7]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_large_512",
     _bert_train("bert-large", "bow-pod16", 4, 2, 2048, [3, 7, 7, 7], [0.10, 0.15, 0.15, 0.15], seq_len=512,
                 mask_tokens=76, embedding_serialization=2), True),
    ("B128", "BERT-Base phase 1 (SL128), Bow Pod16, micro-batch 32, layers [0, 4, 4, 4]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_base_128",
     _bert_train("bert-base", "bow-pod16", 4, 32, 512, [0, 4, 4, 4], [0.25] * 4), True),
    ("B512", "BERT-Base phase 2 (SL512), Bow Pod16, micro-batch 8, layers [0, 4, 4, 4]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_base_512",
     _bert_train("bert-base", "bow-pod16", 4, 8, 512, [0, 4, 4, 4], [0.25] * 4, seq_len=512, mask_tokens=76,
                 embedding_serialization=2),
     True),
    ("SQ8", "BERT-Large SQuAD (SL384), Bow Pod16, 8-IPU pipeline, 2 replicas",
     _EXAMPLES_BERT + "configs_squad.yml` squad_large_384 (benchmark `pytorch_bert_squad_large_pretrain_real_pod16`)",
     _squad_large_384(2), True),
    ("SQ8 R1", "the same with 1 replica (optimizer state not sharded)",
     "the same config's note: \"NB This requires replication_factor=2 to fit\"", _squad_large_384(1), False),
    ("G-S", "GPT-2 small (SL1024), 4-IPU pipeline [0, 4, 4, 4], 4 replicas",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_small_train_gen_pod16`",
     _gpt2_train("gpt2-small", [0, 4, 4, 4], [0.15] * 4, 4, 2048, rts=True), True),
    ("G-M", "GPT-2 medium (SL1024), 8-IPU pipeline [0, 3, 3, 3, 3, 4, 4, 4], 2 replicas",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_medium_train_gen_pod16`",
     _gpt2_train("gpt2-medium", [0, 3, 3, 3, 3, 4, 4, 4], [0.30] + [0.15] * 7, 2, 4096, rts=True), True),
    ("G-L512", "GPT-2 large (SL512), 8-IPU pipeline [1, 5, 5, 5, 5, 5, 5, 5], 2 replicas",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_large_sl512_train_gen_pod16`",
     _gpt2_train("gpt2-large", [1, 5, 5, 5, 5, 5, 5, 5], [0.15, 0.12] + [0.15] * 6, 2, 4096, rts=True, seq_len=512,
                 embedding_serialization=8), True),
    ("G-L", "GPT-2 large (SL1024), 16-IPU pipeline, 1 replica (optimizer state not sharded)",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_large_train_gen_pod16`",
     _gpt2_train("gpt2-large", [0, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 2],
                 [0.15, 0.15, 0.2, 0.2, 0.2, 0.15, 0.15, 0.2, 0.2, 0.15, 0.15, 0.2, 0.2, 0.15, 0.15, 0.2], 1, 8192,
                 rts=False), True),
    ("G-XL I", "GPT-2 XL inference (SL1024), batch 1, 8 IPUs [1, 6, 6, 7, 7, 7, 7, 7], sharded",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_xlarge_infer_gen_pod16`", _gpt2_infer("gpt2-xl", [1, 6, 6, 7, 7, 7, 7, 7], 2),
     True),
    ("G-M I", "GPT-2 medium inference (SL1024), batch 1, 4 IPUs [1, 7, 8, 8], sharded",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_medium_infer_gen_pod16`", _gpt2_infer("gpt2-medium", [1, 7, 8, 8], 4), True),
]


def _statement_rows() -> list[str]:
    """Graphcore's published statements about tile memory, each checked on the simulator."""
    mk2 = load_system("ipu-mk2").ipu
    sram = mk2.sram_bytes_per_tile

    def ffn1(partials: str, amp: float):  # BERT-Large FFN1 at micro-batch 8, SL128
        b = GraphBuilder("ffn1", "float16")
        b.matmul(b.input("x", (1024, 1024)), b.weight("w", (1024, 4096)))
        g = b.graph
        return op_cost(g.ops[-1], g, mk2, mk2.tiles, amp, partials)

    flt, half = ffn1("float", 0.6), ffn1("half", 0.6)
    bounds = {amp: ffn1("float", amp).temp_bytes_per_tile for amp in (0.1, 0.3, 0.6)}
    bound_ok = all(t <= amp * sram for amp, t in bounds.items())

    def bert_l128(amp, recompute=None):
        setup = _bert_train("bert-large", "bow-pod16", 4, 8, 2048, [3, 7, 7, 7], [amp] * 4, recompute=recompute)
        memory = _fits(setup)
        return memory if isinstance(memory, OutOfMemoryError) else memory[1]

    with_ck, without_ck = bert_l128(0.25), bert_l128(0.25, recompute=False)

    def not_always_live(m) -> str:
        if isinstance(m, OutOfMemoryError):
            return "out of memory"
        return f"{(m.peak_tile_bytes - int(m.always_live[m.fullest_tile])) / 1e3:,.0f} kB"

    low, high = bert_l128(0.15), bert_l128(0.25)  # 0.25: the config's own proportion on IPUs 1-3
    always = [None if isinstance(m, OutOfMemoryError) else int(m.always_live.max()) for m in (low, high)]
    more_code = None not in always and always[0] > always[1]
    return [
        "| Using FP16 for the partials reduces the temporary memory of a matmul/convolution by half (of the "
        "partials) | *Memory and Performance Optimisation on the IPU* 5.2 | BERT-Large FFN1 1024×1024×4096 on "
        f"Mk2, AMP 0.6: temporaries {flt.temp_bytes_per_tile:,} B per tile with fp32 partials, "
        f"{half.temp_bytes_per_tile:,} B with fp16 (the partials buffer halves; the planner may re-split) | "
        + ("agrees" if half.temp_bytes_per_tile < flt.temp_bytes_per_tile else "disagrees") + " |",
        "| availableMemoryProportion is the planner's upper bound on a matmul's temporary memory per tile "
        "(disregarded only when nothing fits) | the same guide 5.1; poplibs `ConvPlan.cpp` runPlanner | the "
        "same matmul: " + ", ".join(f"AMP {a}: {t:,} B ≤ {a * sram:,.0f} B" for a, t in bounds.items()) + " | "
        + ("agrees" if bound_ok else "disagrees") + " |",
        "| A recomputation checkpoint after each hidden layer limits the not-always-live memory | graphcore/"
        "examples `nlp/bert/tensorflow2/README.md` | BERT-Large SL128 [3, 7, 7, 7], IPU1's fullest tile: "
        f"not-always-live {not_always_live(with_ck)} with checkpoints, {not_always_live(without_ck)} without | "
        + ("agrees" if isinstance(without_ck, OutOfMemoryError) or (
            not isinstance(with_ck, OutOfMemoryError)
            and with_ck.peak_tile_bytes < without_ck.peak_tile_bytes) else "disagrees") + " |",
        "| Lowering availableMemoryProportion increases always-live memory, as more control code is needed | "
        "graphcore/examples `vision/unet_medical/tensorflow2/README.md` | the same BERT, IPU1: always-live "
        + (f"{always[0]:,} B per tile at AMP 0.15 and {always[1]:,} B at 0.25 (a serialised matmul is "
           "a loop over its pieces: one piece's steps and the loop counter's, `sim.compiler.program_memory`)"
           if None not in always else "out of memory at AMP 0.15 or 0.25") + " | "
        + ("agrees" if more_code else "disagrees") + " |",
    ]


def _fits(setup: Setup) -> dict[int, IpuMemory] | OutOfMemoryError:
    try:
        return compile_graph(setup.graph(), setup.system, setup.options(), training=setup.training,
                             optimizer=setup.sim_optimizer()).memory
    except OutOfMemoryError as e:
        return e


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.1f} MB"


def _memory_section() -> list[str]:
    rows = []
    for r in MEMORY_ROWS:
        m = r.memory()
        error = r.simulated() / r.published - 1
        always = float(m.always_live.sum())
        state = float(m.tile_category("vertex_state").sum())
        split = (f"vertex state {_mb(state)} + weights {_mb(m.by_role.get('weight', 0))} + "
                 f"activations and temporaries {_mb(m.total_bytes - always)}")
        other, published_other = r.simulated() - r.tensor_bytes, r.published - r.tensor_bytes
        rest = f"{_mb(published_other)} vs {_mb(other)} ({other / published_other - 1:+.0%})"
        status = _status(r.asserted, error, MEMORY_TOLERANCE)
        rows.append(f"| `{r.name}` | {r.batch}×{r.inputs}×{r.outputs} | {r.published:,} B | {r.simulated():,} B | "
                    f"{error:+.1%} | {status} | {split} | {_mb(r.code_bytes())} | {_mb(r.tensor_bytes)} | {rest} |")
    fits = []
    for row_id, what, source, setup, published_fits in MEMORY_FITS:
        value = _fits(setup)
        if isinstance(value, OutOfMemoryError):
            shown = _oom_text(value)
        else:
            shown = "fits; fullest tile " + ", ".join(
                f"IPU{i} {m.peak_tile_bytes / m.capacity_per_tile:.0%}" for i, m in sorted(value.items()))
        published = "fits" if published_fits else "out of memory"
        fits.append(f"| {row_id} | {what} | {source} | {published} | {shown} | {setup.describe()} |")
    return ["", "## Memory", "",
            f"Published tile memory, against `IpuMemory.total_bytes` less the program code. Source: {POPLIBS_MEMORY}. "
            "The figure (TotalMemory) is the always-live bytes summed over the tiles plus each tile's highest "
            "not-always-live bytes, summed over the tiles, which is how the simulator sums each tile's peak; "
            "the layer is the graph of `sim.poplibs_benchmarks.fc_graph` on one `ipu-mk2` with synthetic data. "
            "The tool profiles Poplar's IPUModel without compiling IPU code (`compileIPUCode` false, "
            "TestDevice's default), and its rows count no code: they stayed byte-identical through the poplibs "
            "commits that changed codelet code or removed the tools' stack size, which moved the rows of the "
            "tools that do compile, and the same layer on 1,216 and 1,472 tiles differs by 1,202 B. So the "
            "simulator's control code, vertex code, exchange code and stacks (`UNCOMPILED_CODE`, the 'code left "
            "out' column) are subtracted; its vertex state is kept (not verified either way). "
            "Only the total is published, not its split into categories, so the category columns give the "
            "simulator's split and one split both sides share: the tool's five tensors (input, weights, "
            "output and the two gradients, sizes from the shapes) are counted by both, which leaves "
            "vertex state, exchange buffers and temporaries (published, derived) against the "
            "simulator's vertex state and temporaries. The CSV's MaxTileMemory is not compared: it "
            "includes the gaps of the tile's memory layout (about 213 KB even for a 1×1000×5 layer whose "
            "TotalMemory is 0.5 MB), which the simulator does not model. "
            f"Tolerance: {MEMORY_WHY}. The one public per-category figure found is of a single Keras Dense "
            "layer (below); none of a whole model, so the configurations below are published as fitting.", "",
            "| benchmark | M×K×N | published TotalMemory | simulated | error | status | simulated by category "
            "(summed over tiles) | code left out | tensors (both) | the rest: published [derived] vs simulated |",
            "|---|---|---:|---:|---:|---|---|---:|---:|---|"] + rows + [
            "", "The cycles of these layers are in the microbenchmark table of poplibs' IPUModel2 estimates below."] + _embedding_memory_section() + _keras_dense_section() + [
            "", "### Configurations published as fitting", "",
            "Graphcore's configurations that run on hardware, and one its notes say does not fit, compiled "
            "by the simulator; `tests/test_memory.py` asserts each outcome. The SQuAD rows run the zoo's "
            "BERT with the span head on the last IPU (`head=\"squad\"`) and AdamW's first moment in fp16, the "
            "second in fp32, as the config keeps them; the GPT-2 training rows keep AdamW's state off chip, as the "
            "example's `--optimizer-state-offchip` does by default (on chip, neither GPT-2 large run fits).", "",
            "| row | workload | source | published | simulated | configuration |",
            "|---|---|---|---|---|---|"] + fits + [
            "", "### Published statements about memory", "",
            "What Graphcore's documents say of tile memory, each checked on the simulator (no figures are "
            "published with them).", "",
            "| statement | source | simulated | status |", "|---|---|---|---|"] + _statement_rows()


def _rows(checks) -> list[str]:
    out = []
    for c in checks:
        sim_value = c.simulated()
        out.append(f"| {c.what} (`{c.name}`) | {c.published:,.4g} {c.unit} | {sim_value:,.4g} | "
                   f"{sim_value / c.published - 1:+.1%} | {c.tolerance:.0%} | {c.kind} | {c.why} |")
    return out


def report() -> str:
    """The validation table as markdown."""
    lines = ["# Validation against published figures", "",
             "Generated by `python -m sim.validation`; checked by `tests/test_calibration.py`. Figures "
             "from `../shared/calibration/hardware.csv`, each with its source there. *fitted*: a "
             "constant was fitted to the figure (the check guards the fit); *predicted*: the model "
             "predicts it from other constants; *measured constant*: the figure is a config value; "
             "*workload chosen to match*: the workload, not a constant, was picked to land on it.", "",
             "| figure | published | simulated | error | tolerance | kind | why the tolerance |",
             "|---|---:|---:|---:|---:|---|---|"]
    lines += _rows(CHECKS)
    lines += ["", "## End to end", "",
              f"Published training throughputs ({PERFORMANCE_RESULTS}), compared with the simulator on "
              "the zoo's models configured as Graphcore's examples run them (the BERT rows run the "
              "configuration of held-out rows B10 and B12 below). None of these numbers was "
              "used to set any constant.", "",
              "| workload | published | simulated | error | tolerance | kind | why the tolerance |",
              "|---|---:|---:|---:|---:|---|---|"]
    lines += _rows(END_TO_END)
    lines += _published_section()
    lines += _packed_step_section()
    lines += _resnet_step_section()
    lines += _gcl_section()
    lines += _generation_section()
    lines += _memory_section()
    lines += poplibs_benchmarks.report_section()
    lines += poplibs_benchmarks.mk1_report_section()
    return "\n".join(lines) + "\n"


def _status(asserted: bool, error: float | None, tolerance: float = PUBLISHED_TOLERANCE) -> str:
    """Asserted or tracked, from the row's flag and today's error (None: out of memory)."""
    at = f"{tolerance:.0%}".replace("%", " %")
    if error is None:
        return f"asserted at {at}: now OOM, the test fails" if asserted else "tracked, OOM in the simulator"
    within = abs(error) <= tolerance
    if asserted:
        return f"asserted at {at}" if within else f"asserted at {at}: now outside, the test fails"
    return f"tracked; now within {at} (could be asserted)" if within else f"tracked, outside {at}"


#: MLPerf v2.0's packed BERT-Large on Bow Pod64, Pod128 and Pod256: the same work per replica
#: (micro-batch 3, one placement) at GA 96, 64 and 36, so their step times against GA lie on a line
#: whose slope is the time per micro-batch and whose intercept what every step adds whatever its GA
PACKED_STEP_FIT_ROWS = ("M18", "M19", "M20")
#: the packed BERT SL512 MLPerf rows shown with their time per step (one of each configuration)
PACKED_STEP_ROWS = ("M1", "M3", "M7", "M9", "M11", "M17", "M18", "M19", "M20")


def packed_step_seconds(row: Row, samples_per_second: float) -> float:
    """Seconds per weight update of a packed BERT training row at ``samples_per_second``
    (sequences/s): the sequences of one step (packs per micro-batch x packing factor x GA x
    replicas) over the throughput."""
    params = dict(row.setup.params)
    sequences = params["micro_batch"] * params.get("packing_factor", 1.0) * row.setup.accumulation * row.setup.replicas
    return sequences / samples_per_second


def packed_step_line(rows: list[Row], samples_per_second: list[float]) -> tuple[float, float]:
    """(seconds every step adds, seconds per micro-batch): the least-squares line through the
    rows' step times (seconds) against their gradient accumulation counts."""
    if len({r.setup.accumulation for r in rows}) < 2:
        raise ValueError("packed_step_line needs rows with at least two gradient accumulation counts")
    ga = np.array([r.setup.accumulation for r in rows], dtype=float)
    seconds = np.array([packed_step_seconds(r, v) for r, v in zip(rows, samples_per_second)])
    per_micro_batch, per_step = np.polyfit(ga, seconds, 1)
    return float(per_step), float(per_micro_batch)


def _packed_step_section() -> list[str]:
    """The report's "Packed BERT SL512: time per step": published and simulated step times (ms)."""
    by_id = {r.id: r for r in PUBLISHED_ROWS}
    fit_rows = [by_id[i] for i in PACKED_STEP_FIT_ROWS]
    pub_step, pub_mb = packed_step_line(fit_rows, [r.published for r in fit_rows])
    sim_step, sim_mb = packed_step_line(fit_rows, [r.simulated() for r in fit_rows])
    rows = []
    for rid in PACKED_STEP_ROWS:
        r = by_id[rid]
        published, simulated = packed_step_seconds(r, r.published), packed_step_seconds(r, r.simulated())
        ipus = len(r.setup.amp)
        rows.append(f"| {rid} | {r.setup.system} | {ipus} | {r.setup.replicas} | {r.setup.accumulation} | "
                    f"{published * 1e3:,.0f} | {simulated * 1e3:,.0f} | {(published - simulated) * 1e3:+,.0f} |")
    return ["", "### Packed BERT SL512: time per step", "",
            "The MLPerf logs time blocks of training steps between evaluations (`block_start` to `block_stop`), "
            "so the published figures exclude evaluation and start-up but include everything the script does "
            "per step. Step time = sequences per step / throughput. "
            f"{', '.join(PACKED_STEP_FIT_ROWS)} run the same work per replica at GA 96, 64 and 36; the least-squares "
            "line "
            "through their step times splits each step into a part per micro-batch and a part every step adds "
            "(pipeline fill and flush, the gradient reduce-scatters and weight all-gathers, one per tensor and one "
            "after another, the weight update, and the host's work between steps).", "",
            "| line through " + ", ".join(PACKED_STEP_FIT_ROWS) + " | every step adds | per micro-batch |",
            "|---|---:|---:|",
            f"| published | {pub_step * 1e3:,.1f} ms | {pub_mb * 1e3:.3f} ms |",
            f"| simulated | {sim_step * 1e3:,.1f} ms | {sim_mb * 1e3:.3f} ms |", "",
            "Per row: the difference is about the same for every 8-IPU pipeline whatever its GA, replicas or "
            "system, so it is a cost per step that the simulator does not have, not a cost per micro-batch "
            "[mlperf-step]; the 4-IPU pipelines (M1, M7: GA 192) add to it a time per micro-batch the simulator "
            "also underestimates.", "",
            "| row | system | IPUs per replica | replicas | GA | published step (ms) | simulated step (ms) | "
            "difference (ms) |", "|---|---|---:|---:|---:|---:|---:|---:|"] + rows


#: the TF1 ResNet-50 MLPerf rows shown with their time per weight update (v1.1 and v2.0: LARS)
RESNET_STEP_ROWS = ("M13", "M14", "M15", "M16", "M23", "M24", "M25", "M26")
#: ms per weight update over the epochs the script's checkpoints leave alone: the median epoch of each
#: result_*.txt (mlcommons training_results_v1.1 / v2.0, Graphcore/results/*TF1*/resnet) without the
#: epochs holding an eval_start (instance 0 saves a checkpoint there: train.py epochs_per_ckpt 4) and
#: the epochs after them (the next call uploads every variable again, poplar_executor.cc
#: CheckMoveHostToDeviceRequired), over the steps of an epoch, averaged over the runs
RESNET_CLEAN_STEP_MS = {"M13": 108.04, "M14": 35.59, "M15": 27.63, "M16": 29.42,
                        "M23": 81.65, "M24": 34.55, "M25": 21.54, "M26": 22.85}


def _resnet_step_section() -> list[str]:
    """The report's "ResNet-50 MLPerf: time per step": published and simulated weight-update times (ms)."""
    by_id = {r.id: r for r in PUBLISHED_ROWS}
    rows = []
    for rid in RESNET_STEP_ROWS:
        r = by_id[rid]
        images = r.setup.replicas * r.setup.accumulation * dict(r.setup.params)["micro_batch"]
        published, simulated = images / r.published, images / r.simulated()
        clean = RESNET_CLEAN_STEP_MS[rid]
        rows.append(f"| {rid} | {r.setup.system} | {r.setup.replicas} | {r.setup.accumulation} | "
                    f"{r.setup.device_iterations} | {published * 1e3:,.1f} | {clean:,.1f} | {simulated * 1e3:,.1f} | "
                    f"{update_collective_seconds(r.setup) * 1e3:,.2f} | {(published - simulated) * 1e3:+,.1f} | "
                    f"{clean - simulated * 1e3:+,.1f} |")
    return ["", "### ResNet-50 MLPerf: time per step", "",
            "Step time = images per weight update (GBS) / throughput. The published throughput is an epoch's "
            "images over the epoch's time (`epoch_start` to `epoch_stop`), and the TF1 script runs each epoch as "
            "5 `session.run` calls of the steps shown [tf1-calls]; the simulator runs one such call. The same "
            "per-replica work (GA 2 on POD128 and POD256) costs the hardware more per step the more PODs the "
            "program spans, on Mk2 and Bow alike. In the simulator the gradient all-reduce's data adds little for "
            "each POD over the GW-Links, but every step of every collective, the batch norms' statistics "
            "all-reduces over pairs of replicas [bn-span] included, waits for a sync of the whole partition, "
            "which crosses the GW-Links beyond one POD64 (`partition_sync`). The script also saves a checkpoint every 4 "
            "epochs on instance 0 (`train.py` epochs_per_ckpt 4: the saver reads every variable off the IPUs and "
            "the next call uploads them again), which the simulator does not model; on POD128 and POD256 the "
            "median epoch falls among the epochs it slows. *Clean* is the published step over the other epochs "
            "(the logs' median epoch without those holding an `eval_start` and the ones after them, averaged "
            "over the runs).", "",
            "| row | system | replicas | GA | steps per call | published step (ms) | clean (ms) | simulated step "
            "(ms) | of it the gradient all-reduce (ms) | difference (ms) | clean difference (ms) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"] + rows


#: poplibs' crossovers (bytes per IPU) above which the bidirectional ring pair beats meet-in-the-middle,
#: "determined experimentally", by op and by the largest replica count each applies to (more than 16
#: replicas: meet-in-the-middle always); lib/popops/ReplicatedCollectives.cpp at 887b9d3a^,
#: pickReduceScatterMethod / pickAllGatherMethod (one IPU per replica, no torus). The collectives' fixed
#: step times (configs/ipu-mk2.toml ipu_link.reduce_step_s, gather_step_s) are fitted to them.
GCL_CROSSOVERS = {"reduce_scatter": {4: 1_245_184, 8: 4_980_736, 16: 39_845_888},
                  "all_gather": {4: 622_592, 8: 2_490_368, 16: 19_922_944}}


def gcl_crossover(op: str, replicas: int, system: str = "ipu-pod64") -> int:
    """The smallest tensor (bytes, to 1 %) at which the simulator's bidirectional ring pair is faster
    than its meet-in-the-middle for ``op`` over ``replicas`` consecutive IPUs of ``system``."""
    sysobj, members = load_system(system), list(range(replicas))

    def ring_wins(nbytes: float) -> bool:
        return (plan_collective(sysobj, op, int(nbytes), members, "bidirectional_ring").cycles
                < plan_collective(sysobj, op, int(nbytes), members, "meet_in_middle").cycles)
    low, high = 1.0, 2.0 ** 34
    while high / low > 1.01:
        mid = (low * high) ** 0.5
        low, high = (low, mid) if ring_wins(mid) else (mid, high)
    return int(high)


def gcl_implied_step_seconds(nbytes: int, replicas: int, bytes_per_s: float) -> float:
    """The fixed step time (seconds, its sync included) at which a ring pair (replicas - 1 steps of
    S/2N each way) and meet-in-the-middle (replicas // 2 steps of S/N) take the same time for a tensor
    of ``nbytes`` over links of ``bytes_per_s``: S/8B, S/48B, S/224B for 4, 8, 16 replicas."""
    ring, middle = replicas - 1, replicas // 2
    return nbytes * (middle - ring / 2) / (replicas * bytes_per_s * (ring - middle))


def _gcl_section() -> list[str]:
    """The report's "Collectives: GCL's methods against poplibs' measured crossovers"."""
    system = load_system("ipu-mk2")
    link = system.ipu_link
    implied = {op: [(gcl_implied_step_seconds(S, n, link.bytes_per_s) - system.cycles_to_seconds(partition_sync(system, n)))
                    * 1e6 for n, S in by_ranks.items()] for op, by_ranks in GCL_CROSSOVERS.items()}
    rows = []
    for op, by_ranks in GCL_CROSSOVERS.items():
        for ranks, published in by_ranks.items():
            simulated = gcl_crossover(op, ranks)
            rows.append(f"| {op.replace('_', '-')} | {ranks} | {published:,} | {simulated:,} | "
                        f"{simulated / published - 1:+.0%} |")
    return ["", "### Collectives: GCL's methods against poplibs' measured crossovers", "",
            "GCL's bidirectional ring pair moves N-1 chunks of S/2N each way per phase, meet-in-the-middle "
            "floor(N/2) fragments of S/N: the first wins on large tensors, the second on small ones. poplibs "
            "picked between them by tensor size with thresholds \"determined experimentally\" "
            "(`lib/popops/ReplicatedCollectives.cpp` before the code moved to GCL; hardware not stated). The "
            f"simulator's fixed time per ring step (`ipu_link.reduce_step_s` {link.reduce_step_s * 1e6:.2f} µs, "
            f"`gather_step_s` {link.gather_step_s * 1e6:.2f} µs, each step's sync over the partition's IPUs "
            "apart) is fitted to them: each threshold gives the step time at which the two methods' modelled times "
            "meet there, less the sync over its 4, 8 or 16 IPUs "
            f"({min(implied['reduce_scatter']):.1f}-{max(implied['reduce_scatter']):.1f} µs, "
            f"{min(implied['all_gather']):.1f}-{max(implied['all_gather']):.1f} µs), and the median is used. "
            "Each threshold covers a range of replica "
            "counts (up to 4, 5-8, 9-16), shown at its largest; the simulator's crossover at that count:", "",
            "| collective | replicas | poplibs' crossover (bytes) | simulator's crossover (bytes) | "
            "difference |", "|---|---:|---:|---:|---:|"] + rows


def _published_section() -> list[str]:
    rows, counts = [], {"asserted": 0, "tracked": 0, "oom": 0}
    for r in PUBLISHED_ROWS:
        value = r.outcome()
        if isinstance(value, OutOfMemoryError):
            shown, error, err_text = _oom_text(value), None, "—"
            counts["oom"] += 1
        else:
            error = value / r.published - 1
            shown, err_text = f"{value:,.0f}", f"{error:+.1%}"
        counts["asserted" if r.asserted else "tracked"] += 1
        shared = ("host-processes",) if not r.setup.synthetic and r.setup.replicas > 1 else ()
        notes = "; ".join(f"[{n}]" if n in DEPARTURES else n for n in r.notes + shared)
        config = r.setup.describe() + (f". *Notes:* {notes}" if notes else "")
        rows.append(f"| {r.id} | {r.what} | {r.source} | {r.published:,.0f} {r.unit} | {shown} | {err_text} | "
                    f"{_status(r.asserted, error)} | {config} |")
    ratios = []
    for q in SCALING:
        try:
            sim_ratio = q.simulated()
        except OutOfMemoryError as e:
            ratios.append(f"| {q.what} (`{q.name}`) | {q.source} | {q.published:.3f} | {_oom_text(e)} | — | "
                          f"{_status(q.asserted, None)} |")
            continue
        error = sim_ratio / q.published - 1
        ratios.append(f"| {q.what} (`{q.name}`) | {q.source} | {q.published:.3f} | {sim_ratio:.3f} | "
                      f"{error:+.1%} | {_status(q.asserted, error)} |")
    memory = []
    for row_id, source, what, setup in MEMORY_POINTS:
        value = _outcome(setup)
        shown = _oom_text(value) if isinstance(value, OutOfMemoryError) else f"fits ({value:,.0f} images/s)"
        memory.append(f"| {row_id} | {what} | {source} | out of memory | {shown} | {setup.describe()} |")
    lines = ["", "## Held-out published measurements", "",
             f"Rows of `{PUBLISHED}` (published hardware measurements; the tags are the doc's: MLP = MLPerf "
             "Training logs, GCN-P/S30/S31/S33 = Graphcore's performance-results table by SDK, RT = PopRT's "
             "READMEs, EX-CF = the examples' Conformer README), each run on the zoo's model configured as the row's source configures it (the "
             "configuration column; its *notes* say where the zoo cannot follow the source). No constant, config "
             "value or model was changed for them. Rows within 30 % when they were added, and rows that model "
             "changes have brought within 25 % since, are asserted at 30 % by `tests/test_calibration.py`: a regression guard, not a fit (another software stack and "
             "data pipeline, nothing tuned to them); the others are tracked here only. GCN-P B1 and B2 are the "
             "end-to-end rows above, and B10 and B12 are shown there too. "
             f"{len(PUBLISHED_ROWS)} rows: {counts['asserted']} asserted, {counts['tracked']} tracked, "
             f"{counts['oom']} out of memory in the simulator.", "",
             "| row | workload | source | published | simulated | error | status | configuration |",
             "|---|---|---|---:|---:|---:|---|---|"]
    lines += rows
    lines += ["", "Notes named in the table:", ""] + [f"* [{k}] {v}" for k, v in DEPARTURES.items()]
    lines += ["", "### Scaling ratios", "",
              "The ratio of two simulated throughputs against the ratio of the published ones (the rows "
              "above, and B1/B2 of the end-to-end table): scale-out over replicas, batch size in inference, "
              "Mk2 to Bow. Asserted as the rows are: within 30 % when added.", "",
              "| ratio | source | published | simulated | error | status |",
              "|---|---|---:|---:|---:|---|"]
    lines += ratios
    lines += ["", "### Published out-of-memory points", "",
              "Batch sizes at which PopRT reports out of memory, against the simulator (reported, not asserted).",
              "", "| row | workload | source | published | simulated | configuration |",
              "|---|---|---|---|---|---|"]
    lines += memory
    lines += ["", "### Not yet expressible", "",
              "Rows of the doc the zoo cannot run as measured; listed, not approximated.", "",
              "| rows | workload | why |", "|---|---|---|"]
    lines += [f"| {ids} | {what} | {why} |" for ids, what, why in NOT_EXPRESSIBLE]
    return lines


# --- Mk2 -> Bow: which parts of a step scale with the clock ------------------------------------
# The Bow IPU is the Mk2 GC200 tile design clocked at 1.85 GHz instead of 1.325 GHz; the Bow-2000
# keeps the IPU-M2000's gateway, host link, IPU-Links and GW-Links (configs/bow-ipu.toml). So what
# is priced in tile cycles takes the same cycles on both, and what is priced in seconds (host,
# gateway, links, streaming memory) the same seconds.
#: Rows of one workload run on Mk2 and on Bow: (Mk2 row, Bow row). B1 and B2 are the end-to-end
#: rows (the same GBS as M5 and M6); the MLPerf pairs differ in batch, GA and SDK as published.
MK2_TO_BOW = (("M5", "B1"), ("M6", "B2"), ("M13", "M23"), ("M14", "M24"), ("M15", "M25"), ("M16", "M26"))
#: breakdown lines priced in tile cycles only: the same cycles on Mk2 and Bow
CLOCK_LINES = ("compute", "launch", "exchange", "exchange_setup")
#: breakdown lines priced in seconds (host CPU, host link, gateway, IPU-Links): the same seconds
SECONDS_LINES = ("host_io", "remote_io", "inter_ipu", "collective")
#: B1 and B2 (END_TO_END, :func:`resnet50_training`) as Setups
_E2E_SETUPS = {"B1": _resnet_e2e("bow-pod16", 16, 1920, 0.15),
               "B2": _resnet_e2e("bow-pod64", 64, 2560, 0.145, replicas_per_process=4)}


def _pair_setup(row_id: str) -> Setup:
    return _E2E_SETUPS.get(row_id) or PUBLISHED_BY_ID[row_id].setup


def _pair_published(row_id: str) -> float:
    return (_END_TO_END_BY_ID.get(row_id) or PUBLISHED_BY_ID[row_id]).published


def step_seconds(setup: Setup, prefetch_depth: int | None = None) -> tuple[dict[str, float], float]:
    """(seconds per weight update on the first IPU by breakdown line: one call's over its device
    iterations, samples/s per IPU) of ``setup``,
    with its host prefetch depth replaced by ``prefetch_depth`` when given (depth 2: the host
    fills and sends each input buffer while the IPU runs the previous micro-batch)."""
    if prefetch_depth is not None:
        setup = replace(setup, prefetch_depth=prefetch_depth)
    samples_per_second, lines, _ = _simulated_or_raise(setup)
    return lines, samples_per_second / setup.replicas


def update_collective_seconds(setup: Setup) -> float:
    """Seconds per weight update the first IPU spends in the weight update's collectives (the
    ``collective`` line less the distributed norms' statistics all-reduces)."""
    return _simulated_or_raise(setup)[2]


def _simulated_or_raise(setup: Setup) -> tuple[float, dict[str, float], float]:
    """:func:`_simulated`, raising its out-of-memory error."""
    value = _simulated(setup)
    if isinstance(value, OutOfMemoryError):
        raise value
    return value


def _generation_section() -> list[str]:
    mk2, bow = (load_system(s).ipu.clock_hz for s in ("ipu-mk2", "bow-ipu"))
    clock = bow / mk2
    first = _pair_setup(MK2_TO_BOW[0][0])  # M5's configuration, run on Mk2 and on Bow
    on_bow = replace(first, system=first.system.replace("ipu-", "bow-"))
    lines_a, _ = step_seconds(first)
    lines_b, _ = step_seconds(on_bow)
    per_line = []
    for line in [*lines_a, "total"]:
        ta = sum(lines_a.values()) if line == "total" else lines_a[line]
        tb = sum(lines_b.values()) if line == "total" else lines_b[line]
        if not ta and not tb:
            continue
        priced = ("tile cycles" if line in CLOCK_LINES else "seconds" if line in SECONDS_LINES
                  else "both" if line != "total" else "")
        ratio = f"{ta / tb:.3f}" if tb else "—"
        per_line.append(f"| {line} | {priced} | {ta * 1e3:.2f} | {tb * 1e3:.2f} | {ratio} |")
    pairs = []
    for mk2_row, bow_row in MK2_TO_BOW:
        sa, sb = _pair_setup(mk2_row), _pair_setup(bow_row)
        published = (_pair_published(bow_row) / sb.replicas) / (_pair_published(mk2_row) / sa.replicas)
        (_, ra), (lb, rb) = step_seconds(sa), step_seconds(sb)
        (_, pa), (_, pb) = step_seconds(sa, 1), step_seconds(sb, 1)
        fixed = sum(lb[x] for x in SECONDS_LINES) / sum(lb.values())
        pairs.append(f"| {mk2_row} → {bow_row} | {sa.system} → {sb.system} | {published:.3f} | {rb / ra:.3f} | "
                     f"{rb / ra / published - 1:+.1%} | {pb / pa:.3f} | {pb / pa / published - 1:+.1%} | "
                     f"{fixed:.0%} |")
    return ["", "### Mk2 → Bow: what scales with the clock", "",
            f"The Bow IPU is the Mk2 tile design at {bow / 1e9:.3g} GHz instead of {mk2 / 1e9:.4g} GHz (×{clock:.3f}); "
            "the Bow-2000 keeps the IPU-M2000's gateway, host link, IPU-Links and GW-Links "
            "(`configs/bow-ipu.toml`). Lines priced in tile cycles take the same cycles on both, so "
            f"{1 / clock:.1%} of the Mk2 time on Bow; host IO (the host filling the stream buffers, the 100 GbE "
            "host link, the gateway to the tiles) and the all-reduce over IPU-Links are priced in seconds and take "
            "the same time on both; `sync` and `idle` mix the two. So a simulated Bow/Mk2 ratio is at most "
            f"{clock:.3f} and falls with the share of the step in seconds. Seconds per weight update on the "
            "first IPU of "
            f"{MK2_TO_BOW[0][0]}'s configuration, run on `{first.system}` and on `{on_bow.system}`:", "",
            "| line | priced in | Mk2 ms | Bow ms | Mk2 / Bow |", "|---|---|---:|---:|---:|"] + per_line + [
            "", "Every Mk2 → Bow pair, throughput per IPU. The rows run with the host side of each input stream "
                "(buffer fill and host link) one buffer ahead of the IPU, as TF1's infeeds run by default "
                "(`TF1_PREFETCH_DEPTH`: `prefetch_data_streams` on, infeed `prefetch_depth` 1; MLPerf v2.0's "
                "`run_and_time.sh` also sets `streamCallbacks.maxLookahead` to `unlimited`, v1.0 and v1.1 do not); "
                "*without prefetch*: the same runs with the IPU waiting for each whole stream copy. The pairs also "
                "differ in SDK (v1.0: 2.1, v1.1: 2.3, B1/B2: before 2.5, v2.0: 2.5), which the simulator does not "
                "model.", "",
            "| pair | systems | published | simulated | error | without prefetch | error | Bow step in seconds-priced "
            "lines |", "|---|---|---:|---:|---:|---:|---:|---:|"] + pairs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.validation", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPORT, help=f"markdown file (default: {REPORT})")
    args = parser.parse_args(argv)
    from .results.report import atomic_write
    text = report()
    atomic_write(args.output, lambda tmp: Path(tmp).write_text(text))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
