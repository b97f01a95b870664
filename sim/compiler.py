"""Compiler: Graph + Options + System -> an :class:`Executable` (program, costs, memory).

It places ops on IPUs, prices every op with the cost model, checks tile memory, and builds the
structured program PopTorch's executor would run for one call:

* inference: ``deviceIterations`` x (inputs in, forward, outputs out);
* training: ``deviceIterations`` x (``gradientAccumulation`` x (inputs in, forward, backward,
  accumulate, outputs out), optimizer update), with outputs per ``outputMode``.

Host stream copies are left out with synthetic data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cost import OpCost, op_cost
from .errors import GraphError, OptionsError
from .graph import Graph, Op
from .hardware import System, load_system
from .memory import IpuMemory, analyse_ipu
from .options import Options, OutputMode
from .program import Compute, OpSteps, Repeat, Sequence, StreamCopy
from .training import Optimizer, expand_training

_INFERENCE_NOOPS = {"dropout"}  # identity at inference


@dataclass
class Executable:
    """A compiled model: what :func:`sim.simulate` runs."""

    graph: Graph
    system: System
    options: Options
    training: bool
    program: Sequence
    costs: dict[str, OpCost]
    memory: dict[int, IpuMemory]
    ipus: list[int]
    tiles: int  # compute tiles per IPU
    output_mode: OutputMode
    notes: list[str]  # what the run's report must say (unmodelled options, assumptions)

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


def _placement(graph: Graph, system: System) -> list[int]:
    ipus = sorted({op.ipu or 0 for op in graph.ops})
    if ipus and ipus[-1] >= system.num_ipus:
        raise OptionsError(
            f"the model places ops on IPU {ipus[-1]} but system {system.name!r} has "
            f"{system.num_ipus} IPU(s); choose a larger system (e.g. ipu-m2000, ipu-pod16)")
    if len(ipus) > 1:
        raise OptionsError(
            f"the model spans IPUs {ipus}: multi-IPU execution (pipelined, sharded, phased) is "
            "not supported by this version; place every op on IPU 0 (e.g. layers_per_ipu=None)")
    return ipus or [0]


def compile(graph: Graph, system: System | str, options: Options | None = None,
            training: bool = False, optimizer: Optimizer | str = "sgd") -> Executable:
    """Compile ``graph`` for ``system`` with PopTorch-style ``options``."""
    system = load_system(system)
    options = options or Options()
    options.validate(training)
    if options.replication_factor > 1:
        raise OptionsError(
            f"replicationFactor({options.replication_factor}): replication is not supported by "
            "this version; use replicationFactor(1)")
    if not graph.ops:
        raise GraphError(f"graph {graph.name!r} has no ops")
    o = options
    accumulate = o.Training.gradient_accumulation > 1
    g = expand_training(graph, optimizer, accumulate) if training else graph
    ipus = _placement(g, system)
    tiles = system.ipu.tiles
    costs: dict[str, OpCost] = {}
    for op in g.ops:
        if not training and op.kind in _INFERENCE_NOOPS:
            continue
        ipu = op.ipu or 0
        costs[op.name] = op_cost(op, g, system.ipu, tiles, o.memory_proportion(ipu))
    memory = {}
    for ipu in ipus:
        ops = [op for op in g.ops if (op.ipu or 0) == ipu]
        memory[ipu] = analyse_ipu(g, ops, costs, ipu, tiles, system.ipu.sram_bytes_per_tile,
                                  system.ipu.reserved_bytes_per_tile)
    mode = o.resolved_output_mode(training)
    notes = [f"option {k}={v!r}: accepted, no modelled effect" for k, v in o.unmodelled().items()]
    program = _build_program(g, costs, ipus[0], o, training, mode)
    return Executable(g, system, o, training, program, costs, memory, ipus, tiles, mode, notes)


def _steps(ops: list[Op], costs: dict[str, OpCost]) -> OpSteps:
    priced = [(op, costs[op.name]) for op in ops if op.name in costs and costs[op.name].cycles > 0]
    return OpSteps(
        names=tuple(op.name for op, _ in priced),
        kinds=tuple(op.kind for op, _ in priced),
        compute=np.array([c.compute_cycles for _, c in priced], dtype=np.int64),
        exchange=np.array([c.exchange_cycles for _, c in priced], dtype=np.int64),
        sync=np.array([c.sync_cycles for _, c in priced], dtype=np.int64),
        flops=np.array([c.flops for _, c in priced], dtype=np.float64),
        exchange_bytes=np.array([c.exchange_bytes for _, c in priced], dtype=np.int64))


def _copies(graph: Graph, names: list[str], ipu: int, direction: str) -> list[StreamCopy]:
    return [StreamCopy(ipu, name, direction, graph.tensors[name].nbytes, index, host_sync=(index == 0))
            for index, name in enumerate(names)]


def _build_program(g: Graph, costs, ipu: int, o: Options, training: bool, mode: OutputMode) -> Sequence:
    synthetic = o.synthetic_data
    inputs = [] if synthetic else _copies(g, g.inputs, ipu, "to_ipu")
    outputs = [] if synthetic else _copies(g, g.outputs, ipu, "from_ipu")
    per_step_out = mode in (OutputMode.All, OutputMode.EveryN)

    def micro_batch(with_outputs: bool) -> Sequence:
        s = Sequence(name="micro-batch")
        s.items += inputs
        s.add(Compute(ipu, "forward", _steps(g.ops_in("forward"), costs)))
        if training:
            s.add(Compute(ipu, "backward", _steps(g.ops_in("backward"), costs)))
        if with_outputs:
            s.items += outputs
        return s

    def step(with_outputs: bool) -> Sequence:
        """One device iteration."""
        if not training:
            return micro_batch(with_outputs)
        s = Sequence(name="step")
        s.add(Repeat(o.Training.gradient_accumulation, micro_batch(with_outputs), "gradient accumulation"))
        s.add(Compute(ipu, "weight update", _steps(g.ops_in("update"), costs)))
        return s

    main = Sequence(name="main")
    if mode == OutputMode.EveryN and o.output_return_period > 1:
        n = o.output_return_period
        period = Sequence([Repeat(n - 1, step(False), "steps without outputs"), step(True)], "output period")
        main.add(Repeat(o.device_iterations // n, period, "device iterations"))
    else:
        main.add(Repeat(o.device_iterations, step(per_step_out), "device iterations"))
    if not per_step_out:
        main.items += outputs
    return main
