"""``popxl.Session``: compile an Ir for a simulated IPU system and run it.

At construction the main graph is compiled (as PopXL compiles at construction) with
``deviceIterations = ir.num_host_transfers`` (over the times it loads each stream, when it writes
its micro-batches out; over a popxl-addons pipeline's steps, which accumulate),
``replicationFactor = ir.replication_factor`` (this instance's), output mode ``All`` (every
``host_store`` reaches the host on every transfer) and, when ops sit on more than one IPU,
``ShardedExecution`` (a PopXL main graph runs its ops in order, one IPU at a time, with copies
between IPUs; PopXL does not pipeline unless the program is written as a pipeline). A program that
``autodiff`` was applied to is compiled for training (:mod:`sim.popxl.transforms`).

``session.run(inputs)`` simulates one call: ``num_host_transfers`` host transfers on every
replica. It returns the output buffers PopXL would, filled with zeros: the simulator computes
times, not values. The simulation is in :attr:`Session.simulation` (a :class:`sim.Run`: cycle
count, perf counters, latencies, trace, breakdown, memory). A run is deterministic, so the
first run's simulation is reused by later runs of the same session.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Self, Union

import numpy as np

from .. import compile as sim_compile
from .. import run_executable
from ..compiler.memory import POPXL_REMEDIES, reworded
from ..errors import GraphError, OptionsError, OutOfMemoryError
from ..graph.ir import REMOTE_KINDS, Op
from ..graph.training import STATE_DTYPES, Optimizer
from ..hardware.system import choose_system
from ..options import InstanceOptions, Options, OutputMode, TensorLocationSettings
from ..schedule import replicated_ops
from ..results.report import format_summary
from ..strategy import AutoStage, PipelinedExecution, ShardedExecution
from ..virtual_clock import device_call, frozen
from . import dtypes
from .errors import NotModelledError, PopXLError, SessionIOError
from .io_tile_placement import place_on_io_tiles
from .ir import Ir
from .remote_buffer import check_fits
from .streams import DeviceToHostStream, HostToDeviceStream
from .tensor import Constant, HostScalarTensor, Variable

DEVICES = ("ipu_hw", "ipu_model", "cpu")

#: PopXL's type hints for ``run``'s buffers (session.py)
d2hStreamBufferMaps = Mapping[DeviceToHostStream, np.ndarray]
h2dStreamBufferMaps = Mapping[HostToDeviceStream, HostScalarTensor]
StreamBufferMaps = Union[h2dStreamBufferMaps, d2hStreamBufferMaps]


def _weights_in_streaming_memory(graph, ir: Ir) -> tuple:
    """(graph, whether optimizer state goes off chip, notes) for a trained program that keeps weights
    or their optimizer moments in remote buffers: each trained weight it loads with ``remote_load``
    becomes one of the simulator's off-chip weights (streaming memory: loaded before the forward
    pass, and with its optimizer state for the update, then stored), the loads and stores of those
    weights and moments leave the program, and moments loaded from remote buffers make the
    optimizer state off chip. The program's own copies are not priced one by one: the weight is
    loaded once more than a program that keeps its first load for the update."""
    held = ir._updated | ir._gradient_state
    loads = [op for op in graph.ops if op.kind == "remote_load" and op.outputs[0] in held
             and op.outputs[0] not in op.inputs]
    if not loads:
        return graph, False, []
    g = graph.copy()
    drop = {op.name for op in loads} | {op.name for op in g.ops if op.kind == "remote_store" and op.inputs[0] in held}
    g.ops = [op for op in g.ops if op.name not in drop]
    g._op_names -= drop
    weights = sorted(op.outputs[0] for op in loads if op.outputs[0] in ir._updated)
    for name in weights:
        t = g.tensors[name]
        t.role, t.producer, t.location = "weight", None, "off_chip"
    moments = sorted(op.outputs[0] for op in loads if op.outputs[0] in ir._gradient_state)
    notes = [f"weights {', '.join(weights)}: loaded from remote buffers and trained, so priced as off-chip weights in "
             "streaming memory (loaded before the forward pass, and again with their optimizer state for the update, "
             "then stored), not as the program's own remote copies"] if weights else []
    if moments:
        notes.append(f"optimizer moments {', '.join(moments)} kept in remote buffers: the simulated optimizer state "
                     "is off chip")
    return g, bool(moments), notes


#: the ops.var_updates functions that accumulate a gradient into each state tensor of the simulated optimizer,
#: in the optimizer's order (sim.graph.training.STATES: Adam's and LAMB's first moment, then second)
MOMENT_UPDATES = {"adam": (("accumulate_moving_average_",), ("accumulate_moving_average_square_",))}
MOMENT_UPDATES["lamb"] = MOMENT_UPDATES["adam"]


def _simulated_optimizer(graph, ir: Ir) -> tuple[Optimizer, list[str]]:
    """(the simulated optimizer of a trained program: ``ir._optimizer``, each state tensor in the dtype of the
    program's moments it stands for (float32 where the program has none), notes). An SGD program that
    accumulates its gradients into a moment of its own (not popxl-addons' running-mean gradient accumulators,
    ``accumulate_mean_``) is momentum SGD, the moment its velocity. Moments of one kind in several dtypes are
    priced in the dtype of most of their elements, with a note."""
    name, kinds = ir._optimizer, MOMENT_UPDATES.get(ir._optimizer, ())
    velocity = {fn for fn in ir._moment_updates.values() if fn != "accumulate_mean_"}
    if name == "sgd" and velocity:
        name, kinds = "sgd_momentum", (tuple(sorted(velocity)),)
    dtypes, notes = [], []
    for fns in kinds:
        elements: dict[str, int] = {}
        for moment, update in ir._moment_updates.items():
            if update in fns and moment in graph.tensors:
                t = graph.tensors[moment]
                elements[t.dtype] = elements.get(t.dtype, 0) + t.numel
        dtype = max(sorted(elements), key=elements.get) if elements else "float32"
        made_by = " / ".join(f"ops.var_updates.{fn}" for fn in fns)
        if dtype not in STATE_DTYPES:
            notes.append(f"the moments {made_by} accumulates are {dtype}: priced as float32, the simulated "
                         "optimizer's state is float16 or float32")
            dtype = "float32"
        elif len(elements) > 1:
            notes.append(f"the moments {made_by} accumulates are of {len(elements)} dtypes "
                         f"({', '.join(sorted(elements))}): all priced as {dtype}, the dtype of most of their elements")
        dtypes.append(dtype)
    return Optimizer(name, tuple(dtypes) if dtypes else "float32"), notes


def _gradient_collectives(graph, ir: Ir) -> tuple[dict[str, tuple], list[str]]:
    """Each trained weight's gradient collectives as the program applies them
    (``sim.graph.Tensor.grad_collectives``), and the run's notes on them.

    A weight the program all-gathers before use (a replica-sharded weight) gets its gradient
    reduce-scattered by the simulated backward pass of that gather, and a weight it updates shard by
    shard (:func:`_replica_sharded_updates`) by the simulated sharded update, so the program's first
    reduce-scatter of its gradient is that one, not another; local slices move nothing. A weight
    updated shard by shard that the program gives no other collective is left to the simulated
    update (no entry)."""
    gathered = {op.inputs[0] for op in graph.ops if op.kind == "replicated_all_gather"}
    out, described = {}, {}
    for w in sorted(ir._updated):
        applied = list(ir._grad_collectives.get(w, ()))
        first = next((i for i, c in enumerate(applied) if c[0] == "replicated_reduce_scatter"), None)
        by_shard = first == 0 and applied[0][1:3] == ir._sharded_updates.get(w)
        through_gather = w in gathered and first is not None and not by_shard
        if through_gather or by_shard:
            del applied[first]
        done = tuple((replicated_ops.KINDS[kind], stride, size, nbytes) for kind, stride, size, nbytes in applied
                     if kind in replicated_ops.KINDS and size > 1)
        if done or not by_shard:
            out[w] = done
        steps = (["reduce-scatter in the backward pass of its all-gather"] * through_gather
                 + ["reduce-scatter of the simulated sharded update"] * by_shard
                 + [f"{kind.replace('_', '-')} over groups of {size}" + (f" {stride} apart" if stride > 1 else "")
                    for kind, stride, size, _ in done])
        described.setdefault(", then ".join(steps) or "none", []).append(w)
    notes = []
    if ir.replication_factor > 1:
        notes = [f"gradient collectives of {', '.join(ws)}, as the program applies them: {what}"
                 + (" (each replica updates its own copy)" if what == "none" else "")
                 for what, ws in described.items()]
    return out, notes


def _replica_sharded_updates(graph, ir: Ir) -> tuple:
    """(graph, the optimizer state's RTS setting and sharding domain or None, notes) for a program that updates
    weights shard by shard (``replica_sharded_slice`` of the weight, the optimizer called on the shard,
    ``ir._sharded_updates``), as popxl-addons' RTS programs do: reduce-scatter each gradient over the
    shard group, update this replica's shard, all-gather the shards and copy them into the weight.

    That is the simulated weight update with replicated tensor sharding of the optimizer state over
    the same group (``sim.schedule.context.weight_update``), so the weight's first reduce-scatter over
    that group leaves the program's own gradient collectives (:func:`_gradient_collectives`), and the
    program's all-gather of the updated shard and its copy into the weight leave the graph: the
    simulated update does both.
    Sharded are the weights of at least as many elements as the smallest the program shards
    (PopART's ``minElementsForReplicatedTensorSharding``)."""
    sharded = {w: group for w, group in ir._sharded_updates.items() if w in ir._updated}
    if not sharded:
        return graph, None, []
    if len(set(sharded.values())) > 1:
        raise NotModelledError(
            f"weights are updated shard by shard over different replica groups ({sharded}): the simulator "
            "shards every weight's optimizer state over one group; shard them all over the same group")
    ((stride, size),) = set(sharded.values())
    replicas = ir.replication_factor
    if stride == 1:
        domain = ("consecutive", size)
    elif stride * size == replicas:
        domain = ("orthogonal", size)
    else:
        raise NotModelledError(
            f"weights are updated shard by shard over replica groups of {size} replicas {stride} apart, which "
            f"neither PopART's Consecutive nor its Orthogonal CommGroup over {replicas} replicas makes")
    smallest = min(graph.tensors[w].numel for w in sharded)
    unsharded = sorted(w for w in ir._updated if w not in sharded and graph.tensors[w].numel >= smallest)
    graph = _without_shard_gathers(graph, set(sharded))
    rts = TensorLocationSettings().useReplicatedTensorSharding(True).minElementsForReplicatedTensorSharding(smallest)
    notes = [f"weights {', '.join(sorted(sharded))}: updated shard by shard over replica groups of {size} (the "
             "program's reduce-scatter, sharded optimizer step, all-gather and copy into the weight), simulated as "
             f"the optimizer state sharded over those groups (replicated tensor sharding of tensors of {smallest:,} "
             "elements or more): the simulated update reduce-scatters, updates each shard and all-gathers"]
    if unsharded:
        notes.append(f"weights {', '.join(unsharded)}: the program updates them whole, but they are as large as the "
                     "sharded ones, so the simulated update shards them too")
    return graph, (rts, domain), notes


def _without_shard_gathers(graph, weights: set[str]):
    """``graph`` without the copies of an all-gathered shard into each of ``weights`` and what only
    they read (the all-gather, its reshapes, the shard's slice of the weight)."""
    drop = {op.name for op in graph.ops if op.kind == "copy" and op.outputs[0] in weights}
    if not drop:
        return graph
    readers: dict[str, set[str]] = {}
    for op in graph.ops:
        for t in op.inputs:
            readers.setdefault(t, set()).add(op.name)
    by_name = {op.name: op for op in graph.ops}
    frontier = [t for name in drop for t in by_name[name].inputs[1:]]
    while frontier:
        op = graph.producer_op(frontier.pop())
        if op is None or op.name in drop or set(op.inputs) & set(op.outputs):  # a variable, or an in-place write
            continue
        if all(readers.get(t, set()) <= drop for t in op.outputs):
            drop.add(op.name)
            frontier += op.inputs
    g = graph.copy()
    g.ops = [op for op in g.ops if op.name not in drop]
    g._op_names -= drop
    return g


def _choose_system(system, ipus: int) -> tuple:
    """(System, why) for a run that reserves ``ipus`` IPUs."""
    return choose_system(ipus, system, "given to Session(system=...)", "pass Session(..., system=...)")


def _micro_batch_rows(graph) -> tuple[int, list[str]]:
    """Rows of one micro-batch as the run reports them (PopXL has none of its own; nothing is priced by
    it) and a note when the host streams disagree: the leading dimension of the streamed inputs of two
    or more dimensions, the largest (a seed, step or learning-rate stream is not the batch), else of
    any streamed input, else 1."""
    shaped = [(graph.tensors[n].shape[0], n) for n in graph.inputs if graph.tensors[n].shape]
    batch_like = [(rows, n) for rows, n in shaped if len(graph.tensors[n].shape) > 1] or shaped
    if not batch_like:
        return 1, []
    rows, name = max(batch_like, key=lambda pair: pair[0])
    if len({r for r, _ in shaped}) < 2:
        return rows, []
    return rows, [f"the summary's micro-batch is the {rows} rows of host stream {name!r}, the largest leading "
                  "dimension of the streams of two or more dimensions (PopXL has no micro-batch; the samples per "
                  "second count these rows, the cycles do not depend on them)"]


class Session:
    """A compiled Ir on a simulated IPU system.

    ``device_desc`` is PopXL's ("ipu_hw", "ipu_model" or "cpu"): all three are simulated as IPU
    hardware. ``weights_to_host_on_exit`` (PopXL's: read the weights back when the session detaches)
    happens outside the runs, so no run's time has it. ``system`` (a simulator extension) names the
    system or its TOML file; without it, ``IPUSIM_SYSTEM`` or the smallest Mk2 system that holds the
    IPUs the program reserves.
    """

    @frozen  # the simulator's compile: no time on the script's clocks (sim.virtual_clock; Poplar's is not simulated)
    def __init__(self, ir: Ir, device_desc: str = "cpu", weights_to_host_on_exit: bool = True, *, system=None):
        if not isinstance(ir, Ir):
            raise TypeError(f"popxl.Session expects a popxl.Ir, got {ir!r}")
        if device_desc not in DEVICES:
            raise ValueError(f"device_desc must be one of {', '.join(map(repr, DEVICES))}, got {device_desc!r}")
        if ir._session is not None:
            raise PopXLError(f"{ir} already belongs to a Session (a session takes ownership of its Ir)")
        graph = ir.main_graph.sim_graph
        if not graph.ops and (graph.outputs or graph.inputs):  # host IO only: the transfers are the program
            graph = _host_io_only(graph)  # (an identity view stands for each host_store's read, each load's write)
        if not graph.ops:
            zero = ir._zero_repeats
            raise PopXLError(f"The Ir {ir.id} has no ops to run: add operations to the main graph "
                             "(`with ir.main_graph:`) before creating the Session"
                             + (f" (ops.repeat({zero[0]}, 0) runs its body no times)" if zero else ""))
        per_body = ir.main_graph._transfers_per_pass()  # an inner loop with host IO, written out in the body
        for name, count in ir.main_graph._io_repeats:
            if count * per_body != ir.num_host_transfers:
                times = f"{count} x {per_body} = {count * per_body}" if per_body > 1 else f"{count}"
                raise OptionsError(
                    f"ops.repeat({name}, {count}) runs its host_load/host_store {times} times per run but "
                    f"ir.num_host_transfers is {ir.num_host_transfers}: PopXL needs them to agree; set "
                    f"ir.num_host_transfers = {count * per_body}")
        if ir._training and graph.loss is None:
            raise GraphError(
                "the program calls an autodiff grad graph, so it is simulated as training, but it has no "
                "loss the simulator can differentiate from: compute it with "
                "ops.nll_loss_with_softmax_grad(probs, labels) in the program")
        streamed_state, streamed_notes, loss_notes = False, [], []
        losses = [op.outputs[0] for op in graph.ops if op.kind == "softmax_cross_entropy"] if ir._training else []
        if len(losses) > 1:  # micro-batches written out in the main graph: a backward pass from each loss
            graph = graph.copy()
            graph.micro_batch_losses = losses
            loss_notes.append(f"{len(losses)} losses in the main graph (its micro-batches written out one after "
                              "another): each micro-batch's backward pass follows its loss, and the weights' "
                              "gradients are summed over them before the update")
        if ir._training:
            graph, streamed_state, streamed_notes = _weights_in_streaming_memory(graph, ir)
        moments = sorted(n for n in ir._gradient_state if not any(n in op.inputs for op in graph.ops))
        optimizer, optimizer_notes = _simulated_optimizer(graph, ir) if ir._training else (None, [])
        fixed = sorted(t.name for t in graph.tensors.values() if t.role == "weight" and t.name not in ir._updated
                       and t.name not in ir._gradient_state) if ir._training else []
        collectives, collective_notes = _gradient_collectives(graph, ir) if ir._training else ({}, [])
        rts = None
        if ir._training:
            graph, rts, rts_notes = _replica_sharded_updates(graph, ir)
            collective_notes += rts_notes
        if moments or fixed or collectives:
            graph = graph.copy()
            for name, done in collectives.items():
                graph.tensors[name].grad_collectives = done
            for name in moments:  # the simulated optimizer keeps this state itself
                del graph.tensors[name]
            for name in fixed:  # no update writes it: its gradient is not needed (PopART prunes it)
                graph.tensors[name].role = "constant"
        recomputed = ir._recomputed_ops if ir._training and not ir._pipeline_steps else set()
        if recomputed:  # recompute_graph from the main graph: its forward call's ops marked Recompute
            graph = graph.copy()
            for op in graph.ops:
                op.recompute = op.recompute or op.name in recomputed
        remote_ops = [op.name for op in graph.ops if op.kind in REMOTE_KINDS]
        if ir._training and remote_ops:
            raise NotModelledError(
                f"the program is trained (it calls an autodiff grad graph) and copies to or from remote buffers "
                f"({', '.join(remote_ops[:3])}{', ...' if len(remote_ops) > 3 else ''}) of tensors that are not its "
                "trained weights or their optimizer moments: the simulator's backward pass cannot place such "
                "copies (of activations, say); keep those tensors on the tiles, or simulate the program without "
                "autodiff (inference)")
        self._ir = ir
        self._device_desc = device_desc
        self.weights_to_host_on_exit = weights_to_host_on_exit
        ipus_per_replica = max(((op.ipu or 0) for op in graph.ops), default=0) + 1
        options = self._options(ipus_per_replica)
        state = rts[0] if rts else TensorLocationSettings()
        if streamed_state:  # the program keeps its optimizer moments in remote buffers
            state.useOnChipStorage(False)
        if streamed_state or rts:
            options.TensorLocations.setOptimizerLocation(state)
        if rts:  # its weights updated shard by shard: the optimizer state sharded over the program's groups
            options._Popart.set(Options.SHARDING_DOMAIN_KEYS["optimizer"], rts[1])
        local = ipus_per_replica * ir.instance_replication_factor
        reserved = 1 << (local - 1).bit_length()
        sys_, why = _choose_system(system, reserved * options.num_instances())
        streaming = check_fits(ir, sys_)
        graph, io_notes = place_on_io_tiles(graph, options.TensorLocations.num_io_tiles, sys_.ipu)
        rows, batch_notes = _micro_batch_rows(graph)
        io_notes += batch_notes
        loads = ir.main_graph._transfers_per_pass()
        if loads > 1 and not ir._pipeline_steps:  # a loop written out: a pass's rows are its micro-batches'
            rows *= loads
            io_notes.append(f"a pass of the main graph loads its streams {loads} times (a loop written out): the "
                            f"summary's micro-batch is the pass's {rows} rows")
        graph.micro_batch = rows  # what the run reports, not what it prices
        try:
            self._executable = sim_compile(graph, sys_, options, ir._training, optimizer)
        except OutOfMemoryError as e:  # its remedies in PopXL's words
            raise reworded(e, POPXL_REMEDIES) from None
        notes = [f"system {sys_.name}: {why}",
                 (f"PopXL program: device {device_desc!r} simulated as IPU hardware; session.run returns "
                  "zero-filled outputs (the simulator computes times, not values)")]
        if ipus_per_replica > 1:
            notes.append(f"ops on {ipus_per_replica} IPUs per replica run one IPU at a time "
                         "(ShardedExecution), in program order, as a PopXL main graph runs")
        if ir._training:
            notes.append(f"trained with the simulator's {optimizer.describe()} update after each host transfer "
                         "(from popxl.transforms.autodiff)")
            notes += optimizer_notes
        if fixed:
            notes.append(f"variables {', '.join(fixed)}: no update of the program writes them, so they are "
                         "not trained: no gradient and no optimizer update of them is priced")
        notes += collective_notes + streamed_notes + loss_notes
        if moments:
            notes.append(f"variables {', '.join(moments)}: gradient moments the updates accumulate, counted "
                         f"as the simulated {optimizer.name} optimizer's state, not as weights")
        fewer = ir.main_graph._fewer_transfers()
        if fewer:
            notes.append(f"streams used fewer times a pass than the {ir.main_graph._transfers_per_pass()} of the "
                         "others: " + ", ".join(f"{name} {n}" for name, n in sorted(fewer.items()))
                         + "; each load or store is one host transfer, so they make only those")
        outside = len(graph.ops) - ir.main_graph._io_ops
        if ir.main_graph._io_repeats and outside:
            notes.append(f"{outside} op(s) of the main graph outside the repeat with host IO are simulated "
                         "once per host transfer too (PopXL runs them once per run)")
        notes += streaming + io_notes
        if ir._sharded_weights:
            notes.append(f"replica-sharded variables {', '.join(v.id for v in ir._sharded_weights.values())}: each "
                         "replica's shard is loaded into tile memory when the weights are written to the device "
                         "(PopXL's WeightsFromHost program), not in a run, so no run pays for the load")
        notes += ir._notes
        notes += [f"ir.options.{k}={v!r}: accepted, no modelled effect"
                  for k, v in ir.options.items() if k not in ir.options.MODELLED]
        link = sys_.host_link
        streams = ir.main_graph._io_count
        per_pass = max(streams.values(), default=1)
        copies = sum(streams.values()) * ir.num_host_transfers / per_pass * ir.instance_replication_factor
        self._host_seconds = link.popxl_run_s + link.popxl_stream_s * copies  # PopXL's own work in a run
        notes.append(f"each session.run also takes {self._host_seconds * 1e3:.3g} ms of host work beside the device's "
                     f"({link.popxl_run_s * 1e3:.3g} ms a run and {link.popxl_stream_s * 1e6:.3g} us for each "
                     f"of its {copies:g} stream loads and stores over its replicas, FITTED: configs): a script's "
                     "timings (ipusim script) and the samples per second count it, the cycle count does not")
        self._executable.notes[:0] = notes
        self._executable.front_end_call_seconds = self._host_seconds
        self._run = None
        self._runs = 0
        self._attached = 0
        ir._session = self

    def _options(self, ipus_per_replica: int) -> Options:
        ir = self._ir
        if ir._use_popdist:
            from .. import popdist
            o = InstanceOptions(popdist.getNumInstances(), popdist.getInstanceIndex())
        else:
            o = Options()
        steps = ir._pipeline_steps
        if steps and ir._training:  # popxl-addons' pipelined_execution: the pipeline's micro-batches accumulate
            o.deviceIterations(self._passes() // steps)
            o.Training.gradientAccumulation(steps)
            o._Popart.set("autoRecomputation", 3 if ir._recompute else 0)
        else:
            o.deviceIterations(self._passes())
        o.replicationFactor(ir.instance_replication_factor)
        o._Popart.set("aliasZeroCopy", True)  # PopXL's Ir sets it (popxl ir.py): its calls' copies are elided
        o._Popart.set("explicitRecomputation", True)  # as PopXL's Ir does, which PopART requires beside the above
        o.outputMode(OutputMode.All)
        o.logCycleCount(True)
        o.auto_round_num_ipus = True  # PopXL reserves the next power of two of IPUs (not the user's setting: unrecorded)
        # the stream callbacks' work is in the run's host work (popxl_stream_s a copy, as fitted), not on the
        # IPU's path
        o.step_io_callbacks = False
        if steps:  # a stage an IPU, as PopART's pipelining runs them
            o.setExecutionStrategy(PipelinedExecution(AutoStage.SameAsIpu))
            o.explicit_pipelining = True  # PopXL's Ir sets useHostCopyOps, enableExplicitMainLoops
        elif ipus_per_replica > 1:  # program order: each change of IPU is the next stage
            o.setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
        values = dict(ir.options.items())
        if values.get("numIOTiles"):
            o.TensorLocations.numIOTiles(values["numIOTiles"])
        if "defaultPrefetchBufferingDepth" in values:
            o._Popart.set("defaultPrefetchBufferingDepth", values["defaultPrefetchBufferingDepth"])
        if not ir._fully_connected_pass:  # popxl-addons' disable_fc_pass
            o._Popart.set("enableFullyConnectedPass", False)
        # the matmuls' partials type and poplin's option maps, as PopART reads them from its SessionOptions
        for key in ("partialsTypeMatMuls", "convolutionOptions", "matmulOptions"):
            if values.get(key):
                o._Popart.set(key, dict(values[key]) if key.endswith("Options") else values[key])
        return o

    def _passes(self) -> int:
        """Micro-batches a run makes: ``num_host_transfers`` over the times the program loads each stream
        (a loop written out in the main graph loads it once a micro-batch; a pipeline's steps are
        micro-batches too, and a run must hold whole passes of them)."""
        ir = self._ir
        loads = ir.main_graph._transfers_per_pass()
        # a pipeline's pass runs its steps, a transfer each; a main graph repeated (repeat_graph) its passes
        whole = loads * (ir._pipeline_steps or 1) * ir.main_graph._repeat_count
        if ir.num_host_transfers % whole:
            raise OptionsError(f"a run of the main graph makes {whole} host transfers (it loads or stores each "
                               f"stream {whole} times{', its pipeline included' if ir._pipeline_steps else ''}"
                               f"{', repeated' if ir.main_graph._repeat_count > 1 else ''}) but "
                               f"ir.num_host_transfers is {ir.num_host_transfers}: set it to a multiple of {whole}")
        return ir.num_host_transfers // loads

    # --- PopXL's surface ---------------------------------------------------------------------
    @property
    def ir(self) -> Ir:
        return self._ir

    @property
    def is_attached(self) -> bool:
        return self._attached > 0

    def __enter__(self) -> Self:
        self._attached += 1
        return self

    def __exit__(self, *exc) -> None:
        self._attached -= 1

    def expected_inputs(self) -> list[HostToDeviceStream]:
        """The host-to-device streams ``run`` needs data for (in load order)."""
        return list(self._ir.main_graph._loads)

    def _expected_outputs(self) -> list[DeviceToHostStream]:
        return list(self._ir.main_graph._stores)

    @property
    def _extra_input_dims(self) -> tuple[int, ...]:
        """(num_host_transfers, replicas) with those of size 1 left out, as PopXL's: the dimensions a
        run's buffers have before each stream's shape."""
        dims = ()
        if self._ir.num_host_transfers > 1:
            dims += (self._ir.num_host_transfers,)
        if self._ir.instance_replication_factor > 1:
            dims += (self._ir.instance_replication_factor,)
        return dims

    def _full_input_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of a stream's buffer for one run: ``shape`` after :attr:`_extra_input_dims`
        (PopXL's private helper, which Graphcore's PopXL tutorials call)."""
        return self._extra_input_dims + tuple(shape)

    def create_host_outputs(self) -> dict:
        """One zero-filled array per d2h stream, of shape (num_host_transfers, replicas, *shape)
        with dimensions of size 1 in the first two left out (PopXL's layout)."""
        return {s: np.zeros(self._extra_input_dims + s.shape, dtype=s.dtype.as_numpy())
                for s in self._expected_outputs()}

    def _validate(self, buffers: dict, expected: list, kind: str) -> None:
        if set(buffers) != set(expected):
            unexpected = {str(s) for s in set(buffers) - set(expected)}
            missing = {str(s) for s in set(expected) - set(buffers)}
            raise SessionIOError(f"Unexpected/Missing {kind}.\n  Unexpected: {unexpected}\n  Missing: {missing}")
        transfers, replicas = self._ir.num_host_transfers, self._ir.instance_replication_factor
        for s, arr in buffers.items():
            shape = np.shape(arr)
            repl_index = data_index = 0
            if transfers > 1:
                repl_index = data_index = 1
                if not shape or shape[0] < transfers:
                    raise SessionIOError(
                        f"Dimension 0 ({shape[0] if shape else None}) for the array provided for {kind} stream "
                        f"{s.tensor_id} is not large enough.\nIt should be at least of size "
                        f"num_host_transfers = {transfers}")
            if replicas > 1:
                data_index += 1
                if len(shape) <= repl_index or shape[repl_index] != replicas:
                    raise SessionIOError(
                        f"Dimension {repl_index} for the array provided for {kind} stream {s.tensor_id} is the "
                        f"wrong size.\nIt should be of size replication_factor = {replicas}")
            if math.prod(shape[data_index:]) == 1 and math.prod(s.shape) == 1:
                continue
            if tuple(shape[data_index:]) != s.shape:
                raise SessionIOError(
                    f"Shape mismatch for {kind} stream {s.tensor_id}:\nStream shape = {s.shape}, therefore "
                    f"expected full global batch shape {self._extra_input_dims + s.shape}. Got array shape = {shape}")

    @frozen  # the simulator's own work: only the run's simulated seconds (its host work included) move the clock
    def run_with_outputs(self, inputs: dict | None = None, outputs: dict | None = None,
                         downcast_inputs: bool = True) -> None:
        """Simulate one run; ``outputs`` (d2h stream -> array) are filled with zeros."""
        inputs, outputs = inputs or {}, outputs or {}
        self._validate(inputs, self.expected_inputs(), "input")
        self._validate(outputs, self._expected_outputs(), "output")
        with device_call() as call:  # on a virtual clock (ipusim script), the run takes the simulated time
            for arr in outputs.values():
                arr[...] = 0
            if self._run is None:
                self._run = run_executable(self._executable)
            call.seconds, call.run = self._run.seconds + self._host_seconds, self._run
            call.host_seconds = self._host_seconds  # PopXL's own work in the run
            call.label = f"popxl Session of Ir {self._ir.id} on {self._executable.system.name}"
        self._runs += 1

    @frozen
    def run(self, inputs: dict | None = None, downcast_inputs: bool = True) -> dict:
        """Simulate one run (``num_host_transfers`` transfers on every replica); returns the output
        buffers (zero-filled) by d2h stream."""
        outputs = self.create_host_outputs()
        self.run_with_outputs(inputs, outputs, downcast_inputs)
        return outputs

    # --- weights (no values are computed) -----------------------------------------------------
    def weights_to_host(self) -> None:
        """Nothing to copy: the simulator keeps no device values."""

    def weights_from_host(self) -> None:
        """Nothing to copy: the simulator keeps no device values."""

    def get_tensor_data(self, tensor):
        return self.get_tensors_data([tensor])[tensor]

    def get_tensors_data(self, tensors) -> dict:
        """The host data a variable or constant was made (or last written) with; zeros when it was
        declared by shape. The simulated program does not change it."""
        out = {}
        for t in tensors:
            if not isinstance(t, (Variable, Constant)):
                raise TypeError(f"{t} is not of type Constant or Variable. get_tensor_data is not supported "
                                "for this type.")
            shape = t.shape_on_host if isinstance(t, Variable) else t.shape
            data = (np.asarray(t._data, dtype=t.dtype.as_numpy()) if t._data is not None
                    else np.zeros(shape, dtype=t.dtype.as_numpy()))
            rg = getattr(t, "replica_grouping", None)
            per_replica = getattr(t, "retrieval_mode", None) == "all_replicas"
            if per_replica and rg is not None and rg._ir.replication_factor > 1:
                # one value per replica: its group's (PopXL's Session.get_tensors_data)
                per_group = data if rg.num_groups > 1 else data[np.newaxis]
                data = np.stack([per_group[g] for g in rg.assignment])
            out[t] = data
        return out

    def write_variable_data(self, tensor: Variable, data) -> None:
        self.write_variables_data({tensor: data})

    def write_variables_data(self, tensors: dict) -> None:
        for t, data in tensors.items():
            if not isinstance(t, Variable):
                raise TypeError(f"Tensor {t.id} is not of type Variable. write_variable_data is not supported "
                                "for this type.")
            if isinstance(data, numbers.Number) and t.dtype in (dtypes.float8_143, dtypes.float8_152):
                raise TypeError(f"Data for variable {t.id} must be passed in as an np.array with dtype "
                                f"{t.dtype.as_numpy()} (see popxl.fp8_utils.host_pow2scale_cast_to_fp8)")
            # a Python number takes the variable's dtype; an array must have it (PopXL's check)
            arr = np.array(data).astype(t.dtype.as_numpy()) if isinstance(data, numbers.Number) else np.asarray(data)
            if arr.dtype != t.dtype.as_numpy():
                raise TypeError(f"The dtype of the input array {arr.dtype} must match the dtype of the tensor "
                                f"{t.id} : {t.dtype.as_numpy()}")
            if arr.shape != t.shape_on_host:
                raise ValueError(f"The shape of the input array {arr.shape} must match the shape of the tensor "
                                 f"{t.id} : {t.shape_on_host}")
            rg = getattr(t, "replica_grouping", None)
            if t.retrieval_mode == "all_replicas" and rg is not None and rg.group_size > 1:  # PopXL's refusal
                raise NotImplementedError(f'Copying to tensor {t.id} with "all_replicas" retrieval mode is not yet '
                                          "supported.")
            t._data = arr

    # --- the simulation ------------------------------------------------------------------------
    @property
    def executable(self):
        """The compiled program (:class:`sim.Executable`)."""
        return self._executable

    @property
    def simulation(self):
        """The :class:`sim.Run` of the latest ``run`` (None before the first)."""
        return self._run

    def _require_run(self, what: str):
        if self._run is None:
            raise PopXLError(f"Please run the session at least once before reading {what}")
        return self._run

    @property
    def cycle_count(self) -> int:
        """Simulated cycles of one run (all host transfers, replica 0)."""
        return self._require_run("cycle_count").cycle_count

    def cycleCount(self) -> int:
        return self.cycle_count

    @property
    def perf_counters(self) -> dict:
        """PopTorch-style ``getPerfCounters()`` of the latest run (host seconds per transfer)."""
        return self._require_run("perf_counters").perf_counters

    def summary(self) -> str:
        """The text report of the latest run (``ipusim run``'s)."""
        return format_summary(self._require_run("the summary"))

    def print_summary(self) -> None:
        print(self.summary())

    def __repr__(self) -> str:
        return (f"Session({self._ir}, {self._device_desc!r}, system={self._executable.system.name!r}, "
                f"runs={self._runs})")


def _host_io_only(graph):
    """A program of host transfers only (``host_load`` alone, ``host_store`` of a loaded tensor or a
    variable), as one the simulator can run: each loaded tensor written and each stored one read through
    an identity (a view, free), so the stream copies are all it prices."""
    graph = graph.copy()
    for name in graph.inputs:  # a host_load read by nothing: its copy is the work
        t, op_name = graph.tensors[name], graph.unique_op_name(f"{name}/host_load_write")
        out = graph.add_tensor(graph.unique_tensor_name(f"{name}/loaded"), t.shape, t.dtype, "activation", op_name)
        graph.add_op(Op(op_name, "identity", [name], [out.name]))
    outputs = []
    for name in graph.outputs:
        t, op_name = graph.tensors[name], graph.unique_op_name(f"{name}/host_store_read")
        out = graph.add_tensor(graph.unique_tensor_name(f"{name}/stored"), t.shape, t.dtype, "activation", op_name)
        graph.add_op(Op(op_name, "identity", [name], [out.name]))
        outputs.append(out.name)
    graph.outputs = outputs
    return graph
