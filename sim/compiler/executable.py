"""Compiler: Graph + Options + System -> an :class:`Executable` (program, costs, memory).

Steps: check the options; add the backward pass and optimizer update for training
(:mod:`sim.graph.training`); resolve stages, IPUs and phases from the execution strategy
(:mod:`sim.strategy`); place replicas on the system (:mod:`sim.hardware.topology`); price every op
(:mod:`sim.cost`); split the graph into stages (:mod:`sim.schedule.stages`); build the program of one
call with the strategy's schedule (:mod:`sim.schedule.pipeline`,
:mod:`sim.schedule.sharded`, :mod:`sim.schedule.phased`);
check tile memory (:mod:`sim.compiler.memory`). Host stream copies are left out with synthetic data.
"""

from __future__ import annotations

import os
import time
from functools import partial
from dataclasses import dataclass, field, replace

from ..schedule import phased, pipeline, recomputation, replicated_ops, sharded
from ..cost import OpCost, multiconv, op_cost
from ..cost.row_ops import runs_popnn_softmax
from ..cost.rules import Signatures
from ..errors import ConfigError, GraphError, OptionsError, show_number
from ..graph.ir import Graph
from ..graph import workload
from ..hardware.system import System, interned, load_system
from .memory import IpuMemory, analyse_ipu, check_tile_memory, near_capacity_notes
from . import batch_serial, graph_functions, loops, outlining, outplace, row_layouts
from .program_memory import program_memory
from ..options import CONVOLUTION_KINDS, Options, OutputMode, OverlapMode, PipelineCopies
from ..schedule.hostio import io_tile_buffer_check
from ..program import Sequence
from ..schedule.context import Context
from ..schedule.stages import StageWork, split_stages
from ..strategy import PipelinedExecution, ShardedExecution, SyncPattern, assign
from ..hardware.topology import check_fits
from ..graph.loss_scaling import add_automatic_loss_scaling
from ..graph.training import (Optimizer, graph_to_price, merge_norms, place_global_norm,
                              sparse_accumulate_tied_gathers)

#: identity at inference, unless the program itself asks for it (attrs explicit); so is an op a model marks
#: ``training_only`` (the ops of timm's DropPath, which eval mode skips)
_INFERENCE_NOOPS = {"dropout"}
#: ops that run differently at inference: batch norm applies its running statistics (a
#: per-channel scale and shift) instead of computing the batch's
_INFERENCE_MODE = {"batchnorm"}
MAX_OP_CYCLES = 2**50  # one op's cycles; a call repeats an op at most ~2^20 times (engine.MAX_CYCLES is 2^62)
_BUILDERS = {"single": pipeline.build, "pipelined": pipeline.build, "sharded": sharded.build,
             "serial_phased": phased.build, "parallel_phased": phased.build}


@dataclass
class Executable:
    """A compiled model: what :func:`sim.simulate` runs."""

    graph: Graph
    system: System
    options: Options
    training: bool
    program: Sequence
    costs: dict[str, OpCost]
    memory: dict[int, IpuMemory]  # by IPU index within a replica
    ipus: list[int]  # simulated IPUs (all simulated replicas)
    tiles: int  # compute tiles per IPU
    output_mode: OutputMode
    notes: list[str]  # what the run's report must say (unmodelled options, assumptions)
    strategy: str = "single"
    ipus_per_replica: int = 1
    simulated_replicas: list[int] = field(default_factory=lambda: [0])
    stages: list[StageWork] = field(default_factory=list)
    #: wall seconds of each compile step: "graph" (training expansion, placement, checks),
    #: "costs", "stages", "schedule" (building the program), "memory"
    timings: dict[str, float] = field(default_factory=dict)
    #: the optimizer of a training run, as :meth:`Optimizer.describe` says it ("" at inference)
    optimizer: str = ""
    #: seconds of the front end's own host work in each call (PopTorch's ``poptorch_call_s``, a PopXL
    #: Session's run and stream work), which the front end sets: a loop of calls pays it between the
    #: engine runs, so the call period (:attr:`sim.results.run.Run.call_period_seconds`) counts it and
    #: the cycle count does not; 0 for a run through :func:`sim.simulate`
    front_end_call_seconds: float = 0.0

    @property
    def replicas(self) -> int:
        return self.options.replication_factor

    @property
    def family(self) -> str:
        """The kind of workload (:mod:`sim.graph.workload`): "transformer", "convolutional" or "other"."""
        return workload.family(self.graph)

    @property
    def partition_ipus(self) -> int:
        """The IPUs the program runs on: every replica's (all instances'), simulated or not."""
        return self.ipus_per_replica * self.options.total_replicas()

    def transfers_per_input(self) -> int:
        """Perf-counter entries per input tensor: steps x accumulation x replicas."""
        o = self.options
        return o.device_iterations * o.Training.gradient_accumulation * o.replication_factor

    def transfers_per_output(self) -> int:
        """Perf-counter entries per output tensor, from the output mode."""
        o = self.options
        per_replica = {OutputMode.Final: 1, OutputMode.Sum: 1,
                       OutputMode.All: o.device_iterations * o.Training.gradient_accumulation,
                       OutputMode.EveryN: (o.device_iterations // o.output_return_period)
                       * o.Training.gradient_accumulation}[self.output_mode]
        return per_replica * o.replication_factor


def check_overlap(o: Options, g: Graph, training: bool) -> None:
    """PopTorch's checks of overlapped host IO (``set_overlap_for_input/output``), its messages. A TensorFlow
    program (``cachedGraphFunctions``) overlaps its streams by placing its infeeds and outfeeds on the IO tiles
    (``io_tiles.place_ops_on_io_tiles``), pipelined or not, whatever its outfeeds return: it needs the IO tiles
    only."""
    if not any(g.overlap.values()):
        return
    strategy = o.execution_strategy
    pipelined = strategy is None or (isinstance(strategy, PipelinedExecution)
                                     and not isinstance(strategy, ShardedExecution))
    if pipelined and not o.graph_functions:
        raise OptionsError("Overlapped IO is not supported with poptorch.PipelinedExecution. If you are "
                           "using only one IPU, please switch to poptorch.ShardedExecution.")
    if not o.TensorLocations.num_io_tiles:
        raise OptionsError("No IO tiles allocated. You must allocate at least 32 IO tiles using "
                           "poptorch.Options().TensorLocations.numIOTiles.")
    if o.graph_functions:
        return
    mode = o.resolved_output_mode(training)
    if mode not in (OutputMode.All, OutputMode.Sum):
        # PopTorch's message, then the mode in force (a training run's default, Final, is set by no one)
        given = "the default of a training run" if o.output_mode == OutputMode.Default else "as set"
        raise OptionsError("Unsupported output mode for overlapped IO. Please switch output mode to "
                           f"poptorch.OutputMode.All or poptorch.OutputMode.Sum. (The output mode is "
                           f"OutputMode.{mode.name}, {given}.)")


def _drop_phases(g: Graph, strategy: str) -> list[str]:
    """Execution phases an imported model's ops carry (PopART's ``__execution_phase``) run only with a phased
    strategy; under another they are cleared, and a note says so."""
    phased = sum(op.phase is not None for op in g.ops if op.pass_ == "forward")
    if not phased or strategy.endswith("phased"):
        return []
    for op in g.ops:
        op.phase = None
    return [f"{phased} op(s) carry an execution phase (PopART's __execution_phase), but the {strategy} strategy "
            "runs no phases: they are ignored (SerialPhasedExecution or ParallelPhasedExecution runs blocks as "
            "phases; sim.popart runs a model's phases with VirtualGraphMode.ExecutionPhases)"]


def serialise_batches(g: Graph, o: Options, strategy: str, training: bool) -> batch_serial.Plan | None:
    """PopART's batch serialisation of the placed graph ``g`` under ``strategy`` (None without it): only a
    pipeline has pipeline stages to concatenate at; in phased execution an op's phase is the one it runs in
    (:func:`sim.schedule.phased.phase_of`), and the activations a later phase reads are off chip unless the
    liveness is AlwaysLive."""
    settings, phase_of, off_chip = o.batch_serialization(), None, False
    if strategy != "pipelined":
        settings = replace(settings, concat_on=settings.concat_on - {"stage"})
    if strategy.endswith("phased"):
        phase_of = partial(phased.phase_of, o.execution_strategy, forward_phases=phased.forward_phases(g))
        off_chip = phased.activations_off_chip(o.execution_strategy)
    return batch_serial.serialise(g, settings, training, phase_of, off_chip)


def _unused_memory_proportion_ipus(o: Options, ipus_per_replica: int) -> list[str]:
    """A note if setAvailableMemoryProportion names IPUs the model does not run on (within a replica):
    PopTorch looks up the proportion of each op's IPU only and ignores the other keys (Graphcore's
    FastPitch names one per IPU of the whole partition)."""
    unused = sorted(i for i in o.available_memory_proportion if i >= ipus_per_replica)
    if not unused:
        return []
    names = ", ".join(f"IPU{i}" for i in unused)
    have = "IPU0" if ipus_per_replica == 1 else f"IPU0 to IPU{ipus_per_replica - 1}"
    return [f"setAvailableMemoryProportion names {names}, which the model does not use (it runs on {have} "
            "per replica): no effect, as in PopTorch"]


def _check_strategy_options(o: Options, g: Graph, strategy: str, ipus_per_replica: int, training: bool) -> None:
    """PopTorch's checks of option combinations that depend on the strategy."""
    if g.carries_iterations and strategy == "pipelined" and ipus_per_replica > 1:
        raise OptionsError(
            f"graph {g.name!r} carries tensors from each device iteration to the next (a generation loop: the next "
            "token stays on the IPU), so a pipeline, which starts an iteration before the one before it has "
            "finished, cannot run it: use ShardedExecution (--strategy sharded), as PopTransformer does, or one IPU")
    if strategy == "pipelined":
        _check_weights_on_one_ipu(g)
    _check_alias_zero_copy(o, strategy)
    if strategy == "pipelined" and o.explicit_pipelining:
        _check_explicit_pipeline(o, training)
    check_overlap(o, g, training)


def _check_explicit_pipeline(o: Options, training: bool) -> None:
    """PopART's checks of an explicit pipeline (``ExplicitPipelineHelper::compatibilityChecks``, which
    ``Pipeline::applyExplicit`` runs on every one): ``explicitRecomputation`` is required, and no output may be
    returned every N (its counter would advance every pipeline cycle). PopXL's Ir sets the first."""
    if not o.explicit_recomputation():
        raise OptionsError(
            "a pipeline with explicit main loops and host copy ops (explicit pipelining) without "
            "explicitRecomputation: PopART refuses it (\"SessionOption 'explicitRecomputation' must be true.\"); "
            "set explicitRecomputation True, or drop enableExplicitMainLoops and useHostCopyOps")
    if o.resolved_output_mode(training) == OutputMode.EveryN:
        raise OptionsError(
            "outputs returned every N micro-batches (AnchorReturnType EveryN) in an explicit pipeline: PopART "
            "refuses it (\"[Explicit Pipeline] Cannot execute when an anchor has AnchorReturnType 'EveryN'\"); "
            "return All, Final or Sum")


def _check_alias_zero_copy(o: Options, strategy: str) -> None:
    """PopART's refusals of ``aliasZeroCopy`` (``Ir::verifyAliasZeroCopySettings``, SDK 2.6 to the last
    release): not with implicit pipelining (a pipeline without explicit main loops and host copy ops), and
    only with ``explicitRecomputation``, as PopXL's Ir sets them both."""
    if not o.alias_zero_copy():
        return
    if strategy == "pipelined" and not o.explicit_pipelining:
        raise OptionsError(
            "aliasZeroCopy in a pipeline: PopART refuses it (\"Alias zero copy is not supported with implicit "
            "pipelining\"); turn aliasZeroCopy off, or run the pipeline with explicit main loops and host copy ops "
            "(enableExplicitMainLoops and useHostCopyOps, as PopXL does)")
    if not o.explicit_recomputation():
        raise OptionsError(
            "aliasZeroCopy without explicitRecomputation: PopART refuses it (\"Alias zero copy is currently not "
            "supported with implicit recomputation\"); set _Popart explicitRecomputation True beside it (PopXL "
            "sets both), or turn aliasZeroCopy off")


def _weights_on_several_ipus(g: Graph) -> dict[str, dict[int, str]]:
    """Weight -> IPU -> the first forward op reading it there, for each weight read on more than one IPU."""
    readers: dict[str, dict[int, str]] = {}
    for op in g.ops:
        if op.pass_ == "forward":
            for t in op.inputs:
                if g.tensors[t].role == "weight":
                    readers.setdefault(t, {}).setdefault(op.ipu, op.name)
    return {t: where for t, where in readers.items() if len(where) > 1}


def _readers_text(where: dict[int, str]) -> str:
    return ", ".join(f"{name!r} on IPU {ipu}" for ipu, name in sorted(where.items()))


def _check_weights_on_one_ipu(g: Graph) -> None:
    """PopART's pipelining cannot copy a variable between IPUs (transforms/pipeline.cpp,
    ``setIPUCopyPipelineStage``: "All pipeline stages using this tensor should be on the same graph"), so a
    weight read by ops on two IPUs of a pipeline (an LM head tied to the embedding, placed on another IPU)
    fails to compile."""
    shared = _weights_on_several_ipus(g)
    if shared:
        weight, where = next(iter(shared.items()))
        raise OptionsError(
            f"weight {weight!r} is read by ops on {len(where)} IPUs of a pipeline ({_readers_text(where)}); PopART "
            "cannot copy a variable between IPUs when pipelining (\"All pipeline stages using this tensor should be "
            "on the same graph\"): put every op that reads it on one IPU (a tied LM head back on the embedding's IPU, "
            "as Graphcore's BERT and GPT-2 and optimum-graphcore place theirs), untie the weights, or use "
            "ShardedExecution")


def _shared_weight_notes(g: Graph) -> list[str]:
    """Outside a pipeline PopART's InterIpuCopy transform copies a weight read on several IPUs from the first
    of them to the others each run (transforms/interipucopy.cpp: stream, const and variable tensors consumed on
    several IPUs): a copy after the first reader's stage (sim.schedule.stages), held on each IPU that reads it
    (sim.compiler.memory counts an IPU's always-live tensors by what its ops read)."""
    shared = _weights_on_several_ipus(g)
    if not shared:
        return []
    nbytes = sum(g.tensors[t].nbytes * (len(where) - 1) for t, where in shared.items())
    first = next(iter(shared))
    return [f"{len(shared)} weight(s) read on several IPUs ({first!r}: {_readers_text(shared[first])}"
            f"{', ...' if len(shared) > 1 else ''}): PopART copies each from the first IPU to the others every run, "
            f"{nbytes:,} bytes a run, simulated as copies after the first reader's stage, each IPU holding its copy; "
            "putting the ops reading a weight on one IPU (a tied LM head on the embedding's) saves both"]


def compile(graph: Graph, system: System | str, options: Options | None = None,
            training: bool = False, optimizer: Optimizer | str | None = None,
            collective_algorithm: str = "auto") -> Executable:
    """Compile ``graph`` for ``system`` with PopTorch-style ``options``; a training run updates
    its weights with ``optimizer`` (default ``"sgd"``); an inference run has none, and one given
    is noted as having no effect."""
    if not isinstance(training, bool):
        raise OptionsError(f"training={training!r}: expected True or False (a bool); a string such as "
                           "'no' would otherwise count as true")
    if not isinstance(graph, Graph):
        raise GraphError(f"graph={type(graph).__name__}: expected a sim.Graph (models.get(...), a GraphBuilder's "
                         "graph or sim.onnx.load(...))")
    if not isinstance(system, (System, str, os.PathLike)) or system == "":
        raise ConfigError(f"system={system!r}: expected a system name (see sim.available_systems()), a .toml "
                          "path or a sim.System")
    if options is not None and not isinstance(options, Options):
        raise OptionsError(f"options={type(options).__name__}: expected a sim.Options (sim.Options()"
                           ".replicationFactor(2), ...) or None")
    clock = [time.perf_counter()]
    timings: dict[str, float] = {}

    def lap(step: str) -> None:
        clock.append(time.perf_counter())
        timings[step] = clock[-1] - clock[-2]

    system = load_system(system)
    o = options or Options()
    o.validate(training)
    if not graph.ops:
        raise GraphError(f"graph {graph.name!r}: the model has no ops, so there is nothing to simulate; "
                         "build the model's computation into the graph")
    accumulate = o.Training.gradient_accumulation > 1
    opt = (optimizer if isinstance(optimizer, Optimizer) else Optimizer(optimizer or "sgd")) if training else None
    g = graph_to_price(graph, training, opt, accumulate)
    if training and accumulate and o.tied_gather_accumulate:
        sparse_accumulate_tied_gathers(g)
    if o.stable_norm:
        mark_stable_norms(g)
    if o.non_stable_softmax:
        mark_non_stable_softmax(g)
    if not o.fully_connected_pass:
        clear_matmul_passes(g)
    tracked = add_automatic_loss_scaling(g, accumulate) if training and o.automatic_loss_scaling() else 0
    strategy = assign(g, o.execution_strategy)
    unphased = _drop_phases(g, strategy)
    merge_norms(g)  # LARS's norms: one ReduceMany per IPU, stage and phase
    place_global_norm(g)  # gradient clipping's global norm: on the IPU with the most norms
    k = max(op.ipu for op in g.ops) + 1
    if strategy == "pipelined" and len({op.stage for op in g.ops}) == 1:
        strategy = "single"
    R = o.replication_factor
    rounded = check_fits(system, k, o.total_replicas(), o.auto_round_num_ipus)
    o.check_call_size()
    mode = o.resolved_output_mode(training)
    _check_strategy_options(o, g, strategy, k, training)
    io_tile_buffer_check(g, [n for n, m in g.overlap.items() if m], system.ipu, o.TensorLocations.num_io_tiles)
    tiles = system.ipu.tiles - o.TensorLocations.num_io_tiles
    if tiles < 1:
        raise OptionsError(f"TensorLocations.numIOTiles({o.TensorLocations.num_io_tiles}) leaves no compute tiles: "
                           f"an IPU of system {system.name!r} has {system.ipu.tiles} tiles; use fewer IO tiles")
    _apply_locations(g, o, phased=strategy.endswith("phased"))
    _check_streaming_memory(g, system)
    pieces = serialise_batches(g, o, strategy, training)

    lap("graph")
    signatures = Signatures(g)  # the graph changes no more: each op's signature computed once from here
    costs = loops.merge_loop_copies(g, price_ops(g, system, o, training, tiles, signatures, pieces), system.ipu,
                                    tiles, o.alias_zero_copy())
    outlined, called, cloned = {}, {}, {}
    # TensorFlow's program: its graph functions' copies, no PopART outlining; else the ops marked as calls
    costs, called = graph_functions.add_function_copies(g, costs, system.ipu, tiles, o.graph_functions)
    if not o.graph_functions:  # PopART's program: element-wise ops it cannot run in place copy their input first
        costs, cloned = outplace.add_outplace_copies(g, costs, system.ipu, tiles)
        if o.outlining() and not o.alias_zero_copy():
            costs, outlined = outlining.add_call_copies(g, costs, system.ipu, tiles, o.outline_threshold(),
                                                        o.just_in_time_copies(), signatures)
    lap("costs")
    auto = o.recomputation_type(pipelined=strategy == "pipelined")
    explicit = o.explicit_recomputation()
    marks = set()
    if strategy == "pipelined":  # PopART's refusals; the user marks it accepts
        marks = recomputation.check_pipeline(g, auto, explicit, o.explicit_pipelining)
    elif training and strategy in ("single", "sharded"):
        marks = recomputation.marked(g, auto, explicit)
    elif training and strategy.endswith("phased"):
        marks = recomputation.marked_phased(g, auto)
    stages, updates = split_stages(g, training, recompute=strategy == "pipelined" and auto != 0, final_stage=auto == 3,
                                   recomputed=frozenset(marks) if not strategy.endswith("phased") else frozenset(),
                                   pipelined=strategy == "pipelined")
    # the replicas on one host link, over all instances: a PopDist instance's replicas share their
    # IPU-Machine's link with the next instance's (each fed by its own process)
    simulated = list(range(min(o.total_replicas(), max(1, system.host_link.ipus_per_link // k))))
    notes = list(graph.notes) + unphased  # the front end's
    notes += [pieces.describe(g)] if pieces is not None else []
    notes += recomputation.notes(g, auto, strategy, marks, explicit) if training else []
    notes += _shared_weight_notes(g) if strategy == "sharded" else []
    notes += [f"option {key}={v!r}: accepted, no modelled effect" for key, v in o.unmodelled().items()]
    notes += _unused_memory_proportion_ipus(o, k)
    notes += outlining.notes(outlined, o.just_in_time_copies()) + graph_functions.notes(called, o.graph_functions)
    notes += outplace.notes(cloned)
    notes += _relaid_notes(g, costs) + _over_budget_notes(g, costs) + row_layouts.notes(g, costs, tiles)
    if tracked:
        notes.append(f"automatic loss scaling: {tracked} fp16 gradient tensors tracked (PopART's "
                     "AllNonViewChangingGradientTensors), each with a histogram; the statistics' copies between IPUs "
                     "to one sum are not modelled")
    elif o.automatic_loss_scaling() and not training:
        notes.append("automatic loss scaling: an inference model has no gradients; no effect")
    if o.synthetic_data:
        idle = [what for what, set_ in (("a prefetch depth above 1", o.prefetch_depth() > 1),
                                        ("bufferingDepthMap", any(f"_Popart.{k}" in o.set_options
                                                                  for k in o._Popart.BUFFERING_DEPTH_MAP_KEYS)),
                                        ("streams rearranged on the host", bool(o.rearrangements_set())),
                                        ("overlapped host IO (IO tiles)", any(g.overlap.values())),
                                        ("hostProcesses", "hostProcesses" in o.set_options),
                                        ("streamCallbackThreads", "streamCallbackThreads" in o.set_options),
                                        ("hostDataRate", "hostDataRate" in o.set_options))
                if set_]
        if idle:
            notes.append(f"synthetic data: no host transfers run, so {' and '.join(idle)} "
                         f"{'has' if len(idle) == 1 else 'have'} no effect")
    notes += _io_tile_location_notes(o, strategy)
    notes += idle_settings(g, o, opt, k, rounded, strategy)
    if optimizer is not None and not training:
        name = optimizer.name if isinstance(optimizer, Optimizer) else optimizer
        notes.append(f"optimizer {name!r}: an inference run (training=False) updates no weights; no effect")
    crowded = [op for op in g.ops if op.kind == "custom" and op.attrs.get("tiles", 0) > tiles]
    if crowded:
        notes.append(f"custom op {crowded[0].name!r} asks for tiles={crowded[0].attrs['tiles']}, more than the {tiles} "
                     f"the IPU computes on: spread over {tiles}, each tile receiving the exchange_bytes_per_tile given"
                     + (f" ({len(crowded) - 1} more such ops)" if len(crowded) > 1 else "")
                     + f"; give tiles={tiles} (a zoo microbenchmark: --param tiles={tiles}) to size it for this IPU")
    if g.tiles_asked and g.tiles_asked > tiles:
        notes.append(f"the model lays its work out on {g.tiles_asked:,} tiles, one piece a tile, and the IPU computes "
                     f"on {tiles:,}: the pieces share tiles, up to {-(-g.tiles_asked // tiles)} on one; give tiles="
                     f"{tiles} (a zoo microbenchmark: --param tiles={tiles}) to size it for this IPU")
    if any(op.kind == "lars_update" for op in updates) and any(g.tensors[t].shards > 1 for op in updates
                                                                for t in op.inputs):
        notes.append("lars with sharded optimizer state (RTS): each replica's norms cover its shard; the "
                     "cross-replica sum of those partial norms (one value per norm) is not modelled")
    dilated = [op.name for op in g.ops if op.kind == "conv2d" and op.attrs.get("dilation", 1) not in (1, [1, 1])]
    if dilated:
        notes.append(f"{len(dilated)} convolution(s) with a dilated kernel (e.g. {dilated[0]}): priced as the "
                     "undilated kernel with the padding that keeps the output field (the same multiply-adds; the "
                     "wider input window's extra rows and columns are not exchanged)")
    expanded = [op for op in g.ops if op.kind == "conv2d" and "kernel_shape" in op.attrs and op.pass_ == "forward"]
    if expanded:
        example = expanded[0]
        notes.append(f"{len(expanded)} convolution(s) the simulator's conv2d cannot hold (3-D, strides or padding "
                     f"that differ between axes or sides, a dilated 1-D one; e.g. {example.name}, kernel "
                     f"{'x'.join(map(str, example.attrs['kernel_shape']))}): priced as poplin's expandDims runs them, "
                     "the kernel's positions folded into the input channels (a copy), then a 1x1 convolution over "
                     "the output's positions with the layer's multiply-adds"
                     + (" (a transposed one over the positions of its output, computed over the upsampled input)"
                        if any(op.attrs.get("transposed") for op in expanded) else ""))
    notes += _control_flow_notes(g) + _unread_input_notes(g)
    depthwise = [op.name for op in g.ops if op.kind == "conv2d" and op.attrs.get("groups", 1) > 1
                 and g.tensors[op.inputs[0]].shape[1] == op.attrs["groups"]]
    if depthwise:
        notes.append(f"{len(depthwise)} depthwise convolution(s) (one channel per group, e.g. {depthwise[0]}) "
                     "planned with poplin's SLIC (forward, backward) and VMAC (weight update) vertex estimates, "
                     "fp32 ones and those with more than one output channel per group on the vector unit; "
                     "poplin's other candidates (conv groups combined for the AMP, a SLIC weight update, swapped "
                     "operands) are not tried: the simulator comes out 24 % under to 33 % over poplibs' estimates "
                     "of MobileNet's depthwise layers (reports/validation.md, microbenchmarks)")
    if o.num_instances() > 1:
        notes.append(f"process {o.instance_index()} of {o.num_instances()}, {R} replicas each: this "
                     "instance's replicas are simulated with those sharing their host link; "
                     f"collectives span all {o.total_replicas()} replicas, the other instances' by symmetry")
    if len(simulated) > R:
        notes.append(f"replicas 0-{len(simulated) - 1} simulated: they share one host link, this instance's {R} "
                     f"and {len(simulated) - R} of the next instance's, each instance's fed by its own process")
    elif simulated != list(range(R)):
        who = ("replica 0 simulated (no other replica shares its host link)" if len(simulated) == 1
               else f"replicas 0-{len(simulated) - 1} simulated (they share one host link)")
        notes.append(f"{who}; the other {R - len(simulated)} run the same program and share their timings "
                     "by symmetry")
    ctx = Context(g, system, o, training, mode, costs, stages, updates, k, simulated, notes,
                  collective_algorithm, tiles, *_collapsing(g, o), pipelined=(strategy == "pipelined"),
                  recomputed=frozenset(marks))
    lap("stages")
    program = _BUILDERS[strategy](ctx)
    lap("schedule")
    memory = {ipu: _memory(g, ctx, ipu, tiles, system, strategy, signatures) for ipu in range(k)}
    check_tile_memory(memory, o.memory_margin())  # after every IPU is measured: the error names the worst
    notes += near_capacity_notes(memory)
    lap("memory")
    ipus = sorted({r * k + i for r in simulated for i in range(k)})
    return Executable(g, system, o, training, program, costs, memory, ipus, tiles, mode, notes,
                      strategy, k, simulated, ctx.stages, timings, opt.describe() if opt else "")


#: the norms whose training statistics poplin estimates (``normStatistics``): the forward op kinds
STATISTICS_NORMS = ("batchnorm", "groupnorm", "layernorm")


def _io_tile_location_notes(o: Options, strategy: str) -> list[str]:
    """TensorLocations' settings the run does not follow: phased execution moves its phases' weights, activations
    and accumulators through the IO tiles (``useIOTilesToLoad``, sim/schedule/phased.py) when there are some;
    nothing else does, no tensor lives on them (``useIOTilesToStore``), and the activations' place is the phased
    liveness's."""
    notes = []
    phased = strategy.endswith("phased")
    activations = o.TensorLocations.locations["activation"]
    if "TensorLocations.setActivationLocation" in o.set_options and (not phased or activations.on_chip is not None):
        notes.append("TensorLocations.setActivationLocation: only phased execution moves activations off chip, as "
                     "its liveness says (setTensorsLiveness); " + ("of this setting it follows useIOTilesToLoad alone"
                                                                  if phased else "no effect"))
    for kind, where in o.TensorLocations.locations.items():
        in_phases = phased and kind != "optimizer"  # the optimizer state is loaded for the weight update
        if where.io_tiles_to_load and in_phases and not o.TensorLocations.num_io_tiles:
            notes.append(f"TensorLocations {kind} location useIOTilesToLoad: there are no IO tiles (numIOTiles 0), "
                         "so the phases load and store through the compute tiles")
        io = [name for name, used in (("useIOTilesToLoad", where.io_tiles_to_load and not in_phases),
                                      ("useIOTilesToStore", where.io_tiles_to_store)) if used]
        if io:
            notes.append(f"TensorLocations {kind} location {' and '.join(io)}: accepted, no modelled effect "
                         "(outside phased execution's phases, off-chip tensors are loaded to and stored from the "
                         "compute tiles; none lives on the IO tiles)")
    return notes


def _relaid_notes(g: Graph, costs: dict[str, OpCost]) -> list[str]:
    """What the run says of the operands poplin copies into a matmul's or convolution's layout before it
    runs (sim/cost/amp.py ``relaid_operands``): the ops and their cycles per IPU, each op once."""
    counts: dict[int, tuple[int, int]] = {}
    for op in g.ops:
        cycles = getattr(costs.get(op.name), "relaid_cycles", 0)
        if cycles:
            n, total = counts.get(op.ipu, (0, 0))
            counts[op.ipu] = (n + 1, total + cycles)
    if not counts:
        return []
    each = ", ".join(f"IPU {i}: {n} op{'s' * (n != 1)}, {c:,} cycles" for i, (n, c) in sorted(counts.items()))
    return ["poplin's operand copies: a matmul or convolution that would read an operand another op laid out on "
            "more than 7 tiles first copies it into its own layout (Convolution.cpp rearrangeActs / "
            f"rearrangeWeights; part of the op's exchange and sync): {each}, each of the graph's ops run once"]


def _over_budget_notes(g: Graph, costs: dict[str, OpCost]) -> list[str]:
    """What the run says of the matmul and convolution passes no plan of which fits availableMemoryProportion:
    poplin warns ("convolution planner unable to meet memory target") and plans them within a doubled bound
    (sim/cost/amp.py ``memory_bounds``), so their temporaries exceed the proportion. Per IPU, each op once."""
    over: dict[int, list[str]] = {}
    for op in g.ops:
        if getattr(costs.get(op.name), "over_memory_budget", False):
            over.setdefault(op.ipu, []).append(op.name)
    if not over:
        return []
    each = "; ".join(f"IPU {i}: {len(names)} op{'s' * (len(names) != 1)} (e.g. {names[0]!r}; its plan says the bound)"
                     for i, names in sorted(over.items()))
    return ["availableMemoryProportion is too small for some matmul or convolution passes: poplin's planner finds no "
            "plan within it, warns (\"convolution planner unable to meet memory target\") and plans them within twice "
            f"the bound, doubled again until one fits (ConvPlan.cpp runPlanner): {each}"]


def _unread_input_notes(g: Graph) -> list[str]:
    """What the run says of input tensors no op reads and the graph does not return: nothing is streamed
    for them, as PopART removes a stream tensor with no producer and no consumer before it lowers the
    graph (willow/src/tensors.cpp ``Tensors::removeIsolated``), so the host's data for it is not sent."""
    read = {t for op in g.ops for t in op.inputs} | set(g.outputs)
    unread = [name for name in g.inputs if name not in read]
    if not unread:
        return []
    names = ", ".join(repr(n) for n in unread[:5]) + (f" and {len(unread) - 5} more" if len(unread) > 5 else "")
    return [f"input{'s' * (len(unread) > 1)} {names}: read by no op, so nothing is streamed to the IPU for "
            f"{'them' if len(unread) > 1 else 'it'} (PopART removes a stream tensor nothing reads)"]


def _control_flow_notes(g: Graph) -> list[str]:
    """What the run says of an ONNX model's loops and conditionals (sim.onnx unrolls a Loop or Scan
    and, for a condition the device computes, prices both branches of an If)."""
    notes, iterations, bounded, branches = [], {}, set(), []
    for op in g.ops:
        loop = op.attrs.get("onnx_loop")
        if loop is not None and op.attrs.get("loop_control") == "exit_update":
            iterations[loop] = iterations.get(loop, 0) + 1
            if op.attrs.get("data_dependent"):
                bounded.add(loop)
        if op.kind == "select" and "onnx_if" in op.attrs and op.attrs["onnx_if"] not in branches:
            branches.append(op.attrs["onnx_if"])
    for loop, n in iterations.items():
        bound = (", priced at its maximum trip count: its termination condition is computed on the device, so "
                 "this is an upper bound") if loop in bounded else ""
        notes.append(f"ONNX Loop {loop!r}: its body unrolled, {n} iterations (PopART's LoopOp runs it in a poplar "
                     "loop: an exit-flag update, the loop-carried tensors copied to clones and back and the iterator's "
                     "increment an iteration)" + bound)
    for branch in branches:
        notes.append(f"ONNX If {branch!r}: its condition is computed on the device, so both branches are priced, "
                     "then a select of their outputs (the IPU runs only one: an upper bound)")
    return notes


def _no_accumulators(o: Options, optimizer: Optimizer) -> str:
    """Why a training run keeps no gradient accumulators: one micro-batch a step, or an optimizer that
    accumulates into its own state (SGD's combined velocity, PopART's SGD1)."""
    if o.Training.gradient_accumulation == 1:
        return "gradient accumulation 1 keeps no accumulators"
    return f"optimizer {optimizer.name} accumulates the gradients into its own state, no accumulators"


def idle_settings(g: Graph, o: Options, optimizer: Optimizer | None, k: int, rounded: int,
                  strategy: str = "single") -> list[str]:
    """Notes for settings that have nothing to act on in this run (the run is what it would be
    without them): ``g`` is the compiler's graph, ``optimizer`` that of a training run (None at
    inference), ``k`` the IPUs of a replica, ``rounded`` the IPUs the run takes after
    ``autoRoundNumIPUs``, ``strategy`` the execution strategy (``pipelined``, ``sharded``, ...)."""
    training = optimizer is not None
    notes = []
    roles = {t.role for t in g.tensors.values()}
    held = {"optimizer": "state", "accumulator": "accumulator"}
    for kind in ("optimizer", "accumulator"):
        where = o.TensorLocations.locations[kind]
        set_on = where.replicated_tensor_sharding or where.on_chip is False
        setter = f"TensorLocations.set{kind.capitalize()}Location"
        if set_on and not training:
            notes.append(f"{setter}: no {kind} state in inference; no effect")
        elif set_on and held[kind] not in roles:
            why = (_no_accumulators(o, optimizer) if kind == "accumulator"
                   else f"optimizer {optimizer.name} keeps no state")
            notes.append(f"{setter}: {why}; no effect")
        elif where.replicated_tensor_sharding and o.total_replicas() == 1 and training:
            notes.append(f"{setter}: replicated tensor sharding over 1 replica shards nothing; no effect")
    if o.TensorLocations.locations["weight"].replicated_tensor_sharding and o.total_replicas() == 1:
        notes.append("TensorLocations.setWeightLocation: replicated tensor sharding over 1 replica shards nothing; "
                     "no effect")
    if training:
        if "state" not in roles and optimizer.state_dtype != "float32":
            notes.append(f"optimizer {optimizer.name} keeps no state: its state dtype {optimizer.state_dtype} "
                         "has no effect")
        if optimizer.accum_dtype not in (None, "float32") and "accumulator" not in roles:  # float32: the default
            notes.append(f"gradient accumulators {optimizer.accum_dtype}: {_no_accumulators(o, optimizer)}; "
                         "no effect")
    if o.stable_norm and not any(op.kind in STATISTICS_NORMS for op in g.ops):
        notes.append("enableStableNorm: the model has no batch, group or layer norm; no effect")
    elif o.stable_norm and not any(op.kind in STATISTICS_NORMS and (training or op.kind != "batchnorm")
                                   for op in g.ops):
        notes.append("enableStableNorm: in inference a batch norm uses its running statistics and computes none, "
                     "and the model has no group or layer norm; no effect")
    notes += _idle_partials(g, o)
    notes += _idle_outlining_settings(g, o)
    if not o.fully_connected_pass and not training and any(op.kind == "matmul" for op in g.ops):
        notes.append("enableFullyConnectedPass False: an inference matmul's INFERENCE_FWD pass is planned as a "
                     "plain matmul (poplin's NONE_MATMUL) in the simulator either way; no effect")
    if not training and any(op.attrs.get("recomputation_checkpoint") for op in g.ops):
        notes.append("recomputation checkpoints: an inference run recomputes nothing, and PopART outlines a "
                     "checkpoint as any other op; no effect")
    if "Training.accumulationAndReplicationReductionType" in o.set_options and (
            not training or (o.Training.gradient_accumulation == 1 and o.total_replicas() == 1)):
        notes.append("Training.accumulationAndReplicationReductionType: "
                     + ("an inference run has no gradients" if not training else
                        "one micro-batch a weight update on one replica") + " to reduce; no effect")
    if "_Popart.autoRecomputation" in o.set_options and not training:
        notes.append("autoRecomputation: an inference run recomputes nothing; no effect")
    if o.stream_callback_threads > 1 and o.replicas_per_host_process() == 1 and not o.synthetic_data:
        notes.append(f"streamCallbackThreads {o.stream_callback_threads}: each host process feeds one replica, "
                     "whose input buffers its threads fill one after another (the simulator shares a process's "
                     "replicas among its threads); no effect")
    if not o.step_io_callbacks and not o.synthetic_data and (g.inputs or g.outputs):
        notes.append("stepIOCallbacks off: the host serves the streams as a runtime other than PopART's (PopRT's, "
                     "TensorFlow's infeeds), whose own work per copy is not modelled (not measured); each copy "
                     "pays its request, fill and transfer only")
    if o.non_stable_softmax and not any(op.attrs.get("non_stable") for op in g.ops):
        notes.append("enableNonStableSoftmax: the model has no softmax but log-softmaxes, which stay stable; no effect")
    if k == 1 and o.sync_pattern != SyncPattern.Full:
        notes.append(f"syncPattern {o.sync_pattern.name}: a replica of one IPU syncs with the host alone under "
                     "every pattern; no effect")
    if o.pipeline_copies != PipelineCopies.Merged and k == 1:
        notes.append(f"pipelineCopies {o.pipeline_copies.name}: a model on one IPU has no inter-IPU copies; "
                     "no effect")
    elif o.pipeline_copies != PipelineCopies.Merged and strategy != "pipelined":
        notes.append(f"pipelineCopies {o.pipeline_copies.name}: it orders a pipeline cycle's copies, and this "
                     f"run is {strategy}, without pipeline cycles; no effect")
    notes += _idle_weight_update_settings(g, o, training, k)
    if o.tied_gather_accumulate and not training:
        notes.append("TiedGather patterns: they rewrite a training graph's tied embedding gradient; no effect in "
                     "inference")
    elif o.tied_gather_accumulate and o.Training.gradient_accumulation == 1:
        notes.append("TiedGather patterns: modelled with gradient accumulation (TiedGatherAccumulate adds the "
                     "gathered rows into the accumulator); without it, TiedGather's change of the tied weight's "
                     "layout is not modelled")
    if not o.prefetch_datastreams() and not o.synthetic_data and _copies_a_call(o, training) == 1:
        notes.append("enablePrefetchDatastreams False: each input stream is copied once a call, and PopART "
                     "invalidates prefetched data at every run (Devicex reconnectInputStreams), so there is no "
                     "next copy to prepare; no effect")
    for direction, key in ({} if o.synthetic_data else o.rearrangements_set()).items():
        notes.append(f"{key}: the host rearranges the {'inputs' if direction == 'to_ipu' else 'anchors'}' "
                     "streams, so they run at buffering depth 1, as PopART keeps them; the host's rearranging "
                     "of each copy is not timed (no published figure)")
    used = k * o.total_replicas()
    if rounded > used:
        notes.append(f"autoRoundNumIPUs: {k} IPU(s) per replica x {o.total_replicas()} replica(s) = {used} IPUs, "
                     f"rounded up to {rounded}; {rounded - used} of them idle")
    elif o.auto_round_num_ipus and "autoRoundNumIPUs" in o.set_options:
        notes.append(f"autoRoundNumIPUs: the run's {used} IPU(s) are already a power of two; nothing to round, "
                     "no effect")
    return notes


def _copies_a_call(o: Options, training: bool) -> int:
    """How many times a call copies each input stream of a replica: once a micro-batch, so its device
    iterations times (training) its gradient accumulation."""
    return o.device_iterations * (o.Training.gradient_accumulation if training else 1)


def _idle_outlining_settings(g: Graph, o: Options) -> list[str]:
    """Notes for PopART's outlining options where no outlining runs: TensorFlow's graph functions,
    ``enableOutlining`` False, or (for the options about the calls' copies) ``aliasZeroCopy``,
    which elides those copies (:func:`compile`'s call of ``outlining.add_call_copies``);
    ``aliasZeroCopy`` also elides a loop's carried copies (:func:`loops.merge_loop_copies`), so it
    is noted only where ``g`` has none."""
    off = ("TensorFlow's graph functions run no PopART outlining" if o.graph_functions else
           "outlining is off (enableOutlining False)" if not o.outlining() else None)
    copies_gone = off or ("aliasZeroCopy elides the calls' copies" if o.alias_zero_copy() else None)
    notes = []
    if o.just_in_time_copies() and copies_gone:
        notes.append(f"subgraphCopyingStrategy JustInTime: it places the copies of outlined calls, and {copies_gone}; "
                     "no effect")
    if "outlineThreshold" in o._Popart.values and copies_gone:
        notes.append(f"outlineThreshold: it chooses the sequences outlined as calls with copies, and {copies_gone}; "
                     "no effect")
    if o.alias_zero_copy() and off and not any(op.attrs.get("loop_carried") for op in g.ops):
        notes.append(f"aliasZeroCopy: it elides the copies of outlined calls and loops, and {off} and the model "
                     "has no loop; no effect")
    return notes


def _idle_partials(g: Graph, o: Options) -> list[str]:
    """Notes for half partials set where no matmul or convolution takes half or FP8 operands: poplin
    accumulates a float32 product in float whatever ``partialsType`` says (``sim.cost.amp.amp_mode``)."""
    notes = []
    for setting, kinds in (("partialsTypeMatMuls half", ("matmul",)),
                           ("convolutions' partialsType half", CONVOLUTION_KINDS)):
        if o.partials_type(kinds[0]) != "half":
            continue
        ops = [op for op in g.ops if op.kind in kinds]
        if not any(g.tensors[op.inputs[0]].dtype != "float32" for op in ops):
            what = "matmul" if kinds[0] == "matmul" else "convolution"
            has = f"its {what}s are float32, whose partials stay float" if ops else f"the model has no {what}"
            notes.append(f"{setting}: {has}; no effect")
    return notes


def _idle_weight_update_settings(g: Graph, o: Options, training: bool, k: int) -> list[str]:
    """Notes for ``accumulateOuterFragmentSettings`` (the weight update's schedule across a replica's
    ``k`` IPUs) where it has nothing to act on: no update, one IPU, excluded IPUs the replica does not
    have, or no IPU whose part of the update syncs the replica (:meth:`~sim.schedule.context.
    ScheduleContext._update_alone`: collectives over replicas, or streaming-memory copies of state)."""
    schedule_key, excluded_key = Options.OUTER_FRAGMENT_KEYS
    if not {schedule_key, excluded_key} & set(o._Popart.values):
        return []
    setting = "accumulateOuterFragmentSettings"
    if not training:
        return [f"{setting}: no weight update in inference; no effect"]
    if k == 1:
        return [f"{setting}: a replica of one IPU has one optimizer step, nothing to schedule; no effect"]
    notes = []
    beyond = sorted(i for i in o.outer_fragment_excluded() if i >= k)
    if beyond:
        notes.append(f"{setting}.excludedVirtualGraphs {', '.join(map(str, beyond))}: not IPUs of a replica of "
                     f"{k} (0-{k - 1}); ignored")
    roles = {t.role for t in g.tensors.values()}
    off_chip = any(o.TensorLocations.locations[kind].on_chip is False and role in roles
                   for kind, role in (("optimizer", "state"), ("accumulator", "accumulator")))
    if o.total_replicas() == 1 and not off_chip:
        notes.append(f"{setting}: with one replica and the optimizer state on chip no IPU's optimizer step syncs "
                     "the replica (no collectives, no streaming-memory copies), so every schedule runs them alike; "
                     "no effect")
    return notes


def mark_stable_norms(g: Graph) -> None:
    """``Options.enableStableNorm``: every forward norm of ``g`` (the compiler's copy) that
    computes statistics (a batch norm in training, a group or layer norm always) estimates them with
    poplin's stable algorithm: the ``stable_statistics`` attribute the cost rules and the
    distributed batch norm's collectives read (an inference batch norm's fixed statistics ignore it)."""
    for op in g.ops:
        if op.kind in STATISTICS_NORMS and op.pass_ == "forward":
            op.attrs = {**op.attrs, "stable_statistics": True}


def mark_non_stable_softmax(g: Graph) -> None:
    """PopART's ``enableNonStableSoftmax``: every popnn softmax of ``g`` (the compiler's copy, its
    recomputations included) runs popnn's SOFTMAX, without the row maximum (popart ``softmaxx.cpp``):
    a softmax op's, a cross-entropy's SoftmaxOp, and the softmax a log-softmax's gradient recomputes
    (``logsoftmaxx.cpp``); a log-softmax itself (``popnn::logSoftmaxInPlace``) stays stable."""
    for op in g.ops:
        if runs_popnn_softmax(op.kind, op.attrs):
            op.attrs = {**op.attrs, "non_stable": True}


def clear_matmul_passes(g: Graph) -> None:
    """PopART's ``enableFullyConnectedPass`` off (TensorFlow's ``matmuls.clear_pass_type``): every
    matmul of ``g`` (the compiler's copy) that carries a fully connected pass is planned as poplin's
    plain matmul instead (``fully_connected_pass`` NONE)."""
    for op in g.ops:
        if op.kind == "matmul" and op.attrs.get("fully_connected_pass") not in (None, "NONE"):
            op.attrs = {**op.attrs, "fully_connected_pass": "NONE"}


def price_ops(g: Graph, system: System, o: Options, training: bool, tiles: int,
              signatures: Signatures | None = None, pieces: batch_serial.Plan | None = None) -> dict[str, OpCost]:
    """The cost of every op of ``g`` on ``tiles`` compute tiles of ``system``'s IPU, by op name:
    the compiler's pricing step (also what ``sim.planner`` bounds throughput with). ``g`` is
    expanded for training already and is changed in place (ops that run in inference mode are
    marked); dropout and ``training_only`` ops at inference and collective ops (priced by the schedule) get
    no entry.
    ``signatures`` (of ``g``) keeps each op's signature for the passes after; ``pieces``: the batch
    serialisation, whose sharded ops are priced by it."""
    costs: dict[str, OpCost] = {}
    # the IPU as poplin's option maps set its AMP weight loads and partials reduction, for
    # convolutions and for matmuls
    ipus = {conv: interned(replace(system.ipu, **o.poplin_options(conv))) for conv in (False, True)}
    layouts: dict[str, row_layouts.RowLayout] = {}  # where slices of matmul results live (sim/compiler/row_layouts.py)
    for op in g.ops:
        op_tiles = row_layouts.narrowed_tiles(op, g, layouts, tiles)
        if (not training and (op.kind in _INFERENCE_NOOPS and not op.attrs.get("explicit")
                              or op.attrs.get("training_only"))) or op.kind in replicated_ops.KINDS:
            continue  # identity at inference / priced as a collective by the schedule
        if not training and op.kind in _INFERENCE_MODE and not op.attrs.get("batch_statistics"):
            op.attrs["inference"] = True  # g is the caller's own copy (an instance norm keeps its batch statistics)
        proportion = op.attrs.get("available_memory_proportion", o.memory_proportion(op.ipu))  # set_available_memory
        ipu = ipus[op.kind.startswith("conv")]
        if pieces is not None and op.name in pieces.ops:
            costs[op.name] = pieces.cost(op, g, ipu, op_tiles, proportion, o.partials_type(op.kind))
        else:
            costs[op.name] = op_cost(op, g, ipu, op_tiles, proportion, o.partials_type(op.kind), signatures)
        if op_tiles < tiles:
            costs[op.name] = row_layouts.on_first_tiles(costs[op.name], tiles)
        if op.kind == "matmul":
            row_layouts.record_matmul(op, costs[op.name].plan, layouts)
        if not 0 <= costs[op.name].cycles <= MAX_OP_CYCLES:
            raise GraphError(
                f"op {op.name!r} ({op.kind}) costs {show_number(costs[op.name].cycles)} cycles, more than the "
                f"simulator's limit of 2^50 per op (ten days of IPU time), which keeps a run's cycle count "
                "within 64 bits; its sizes or attributes are out of range: check them")
    for members in multiconv.groups([op for op in g.ops if op.name in costs]):
        first = members[0]

        def price(i: int, budget: int, members=members) -> OpCost:
            op = members[i]
            proportion = op.attrs.get("available_memory_proportion", o.memory_proportion(op.ipu))
            return op_cost(op, g, ipus[True], budget, proportion, o.partials_type(op.kind), signatures)
        if first.kind.startswith("conv"):  # re-planned on their tile ranges; None: poplin plans them one by one
            plans = multiconv.parallel_plan(
                [costs[op.name].flops for op in members], price, tiles,
                first.attrs.get("multiconv_reserved_tiles", multiconv.PER_CONV_RESERVED_TILES),
                first.attrs.get("multiconv_cycle_back_off", multiconv.CYCLE_BACK_OFF))
        else:  # a backward multi-convolution's weight transposes: one compute set, as priced
            plans = [(costs[op.name], 0) for op in members]
        if plans is not None:
            for op, cost in zip(members, multiconv.run_side_by_side([op.name for op in members], plans, tiles)):
                costs[op.name] = cost
    return costs


def _collapsing(g: Graph, o: Options) -> tuple[bool, bool]:
    """(accumulation loop may collapse, device-iteration loop may collapse).

    A loop collapses unless host IO overlaps across its iterations: prefetched streams
    (prefetch depth > 1, or PopART's enablePrefetchDatastreams refilling one buffer) or IO-tile
    streams overlapping that loop.
    """
    modes = {OverlapMode(m) for m in g.overlap.values() if m} if o.TensorLocations.num_io_tiles else set()
    prefetch = (o.prefetch_depth() > 1 or o.prefetch_datastreams()) and not o.synthetic_data
    device = prefetch or OverlapMode.OverlapDeviceIterationLoop in modes
    accumulation = device or OverlapMode.OverlapAccumulationLoop in modes
    return not accumulation, not device


def _apply_locations(g: Graph, o: Options, phased: bool) -> None:
    """Mark tensors TensorLocations puts off chip (streaming memory) or shards over replicas.

    Phased execution keeps weights, optimizer state and gradient accumulators in streaming memory
    unless the user placed them on chip explicitly, as PopTorch sets PopART's tensor locations for
    ``ExecutionMode::Phased`` (popart_compiler/source/Compiler.cpp, ``setOptionIfNotSet`` of
    ``location_weight``, ``location_optimizer`` and ``location_accumulator``).
    """
    roles = {"weight": "weight", "state": "optimizer", "accumulator": "accumulator"}
    for t in g.tensors.values():
        kind = roles.get(t.role)
        if not kind:
            continue
        where = o.TensorLocations.locations[kind]
        if where.off_chip(t.numel) or (phased and where.on_chip is None):
            t.location = "off_chip"
        if where.sharded(t.numel):
            t.shard_stride, t.shards = o.sharding_domain(kind)
    for op in g.ops:  # LAMB's updater of a sharded state is a shard too (PopART's RTS domain)
        if op.kind == "adam_updater":
            source = g.tensors[max(op.inputs, key=lambda t: g.tensors[t].shards)]
            for t in op.outputs:
                if g.tensors[t].role == "activation":
                    g.tensors[t].shards, g.tensors[t].shard_stride = source.shards, source.shard_stride


def _check_streaming_memory(g: Graph, system: System) -> None:
    """Tensors placed off chip need streaming memory, which some systems (a C2 card) lack."""
    off_chip = [t.name for t in g.tensors.values() if t.location == "off_chip"]
    if off_chip and not system.streaming_memory.bytes_per_ipu:
        raise OptionsError(
            f"{len(off_chip)} tensor(s) are placed off chip ({off_chip[0]!r} first), but system {system.name!r} has "
            "no streaming memory; keep them on chip (TensorLocations ... useOnChipStorage(True), ipusim run's "
            "--weights on-chip or --optimizer-state on-chip; phased execution puts weights off chip unless told "
            "otherwise) or choose a system with streaming memory")


def _memory(g: Graph, ctx: Context, ipu: int, tiles: int, system: System, strategy: str,
            signatures: Signatures | None = None) -> IpuMemory:
    """Memory of IPU ``ipu`` (within a replica): its stages' runs, stashes and updates, measured
    without raising (:func:`check_tile_memory` then looks at every IPU)."""
    unit = {"pipelined": "pipeline stage", "sharded": "stage", "serial_phased": "phase",
            "parallel_phased": "phase"}.get(strategy)  # a single-IPU model has no stages to name
    runs = [(run, f"{unit} {s.index}" if unit else None, s.restored, s.hold, s.through_bytes)
            for s in ctx.stages if s.ipu == ipu for run in (s.memory_runs or [s.ops])]
    runs.append(([op for op in ctx.updates if op.ipu == ipu], "weight update", set(), set(), 0))
    runs = [run for run in runs if run[0]]
    stash = sum(s.held_bytes for s in ctx.stages if s.ipu == ipu)
    program = program_memory(g, [op for run in runs for op in run[0]], ctx.costs, system.ipu, tiles,
                             outlining=ctx.options.outlining(), signatures=signatures)
    ops, labels, restored, held, through = zip(*runs) if runs else ((),) * 5
    return analyse_ipu(g, list(ops), ctx.costs, ipu, tiles, system.ipu.sram_bytes_per_tile,
                       system.ipu.reserved_bytes_per_tile, stash_bytes=stash, check=False,
                       run_labels=list(labels), restored=list(restored), held=list(held), through=list(through),
                       program=program)
