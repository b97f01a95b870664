"""What every schedule shares: the context of one compilation and the items it is built from.

A schedule (single IPU, pipelined, sharded, phased) turns stages into program items for each
simulated replica. Replica ``r`` runs on IPUs ``r*k .. r*k+k-1``; the replicas simulated are
those sharing one host link (the others behave the same, by symmetry), and their items are
interleaved step by step so that they contend for the link as real replicas do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .collectives import gradient_collectives
from .cost import OpCost
from .graph import Graph, Op
from .hardware import System
from .hostio import host_transfers
from .options import Options, OutputMode
from .program import Compute, OpSteps, Sequence, Sync
from .stages import StageWork
from .topology import replica_ipus, sync_cycles


@dataclass
class Context:
    """Everything a schedule builder needs. IPU indices in stages are within a replica."""

    g: Graph
    system: System
    options: Options
    training: bool
    mode: OutputMode
    costs: dict[str, OpCost]
    stages: list[StageWork]
    updates: list[Op]
    ipus_per_replica: int
    replicas: list[int]  # the simulated replicas
    notes: list[str] = field(default_factory=list)
    collective_algorithm: str = "auto"

    @property
    def io_overlap(self) -> bool:
        return False

    def ipus(self, replica: int) -> list[int]:
        return replica_ipus(replica, self.ipus_per_replica)

    def steps(self, ops: list[Op], label: str = "") -> OpSteps:
        priced = [(op, self.costs[op.name]) for op in ops if op.name in self.costs and self.costs[op.name].cycles > 0]
        return OpSteps(
            names=tuple(op.name + label for op, _ in priced),
            kinds=tuple(op.kind for op, _ in priced),
            compute=np.array([c.compute_cycles for _, c in priced], dtype=np.int64),
            exchange=np.array([c.exchange_cycles for _, c in priced], dtype=np.int64),
            sync=np.array([c.sync_cycles for _, c in priced], dtype=np.int64),
            flops=np.array([c.flops for _, c in priced], dtype=np.float64),
            exchange_bytes=np.array([c.exchange_bytes for _, c in priced], dtype=np.int64))

    def stage_compute(self, replica: int, stage: StageWork) -> list[Compute]:
        """Compute items of one stage: recomputation, forward, backward (those it has)."""
        ipu = self.ipus(replica)[stage.ipu]
        recomputed = set(id(op) for op in stage.recomputed)
        parts = [("recompute", [op for op in stage.ops if id(op) in recomputed], " (recompute)"),
                 ("forward", [op for op in stage.ops if id(op) not in recomputed and op.pass_ == "forward"], ""),
                 ("backward", [op for op in stage.ops if op.pass_ == "backward"], "")]
        items = []
        for what, ops, label in parts:
            if ops:
                items.append(Compute(ipu, f"stage {stage.index} {what}", self.steps(ops, label)))
        return items

    def transfers(self, replica: int, stages: list[StageWork], direction: str) -> list:
        """Host stream copies for ``stages`` (inputs to the IPU, or outputs from it)."""
        if self.options.synthetic_data:
            return []
        ipus = self.ipus(replica)
        per_ipu: dict[int, list[str]] = {}
        for s in stages:
            names = s.host_inputs if direction == "to_ipu" else s.host_outputs
            per_ipu.setdefault(ipus[s.ipu], []).extend(names)
        index = {n: i for i, n in enumerate(self.g.inputs if direction == "to_ipu" else self.g.outputs)}
        return host_transfers(self.g, self.system, self.options.sync_pattern, ipus, per_ipu, direction,
                              replica, index)

    def final_outputs(self) -> list:
        """Outputs copied once after the run (OutputMode Final and Sum)."""
        if self.mode not in (OutputMode.Final, OutputMode.Sum):
            return []
        return [item for r in self.replicas for item in self.transfers(r, self.stages, "from_ipu")]

    def replica_sync(self, replica: int, name: str) -> Sync | None:
        ipus = self.ipus(replica)
        if len(ipus) < 2:
            return None
        return Sync(tuple(ipus), "external", sync_cycles(self.system, len(ipus)), name)

    def weight_update(self) -> Sequence:
        """Gradient collectives across replicas, then each IPU's optimizer update."""
        seq = Sequence(name="weight update")
        if self.options.replication_factor > 1:
            seq.items += gradient_collectives(self)
        for r in self.replicas:
            ipus = self.ipus(r)
            for local in range(self.ipus_per_replica):
                ops = [op for op in self.updates if op.ipu == local]
                if ops:
                    seq.add(Compute(ipus[local], "weight update", self.steps(ops)))
            seq.add(self.replica_sync(r, "weight update sync"))
        return seq

    def outputs_every_step(self) -> bool:
        return self.mode in (OutputMode.All, OutputMode.EveryN)


def device_iteration_loop(ctx: Context, step) -> Sequence:
    """``deviceIterations`` runs of ``step(with_outputs)``, honouring OutputMode.EveryN."""
    from .program import Repeat
    o = ctx.options
    main = Sequence(name="main")
    if ctx.mode == OutputMode.EveryN and o.output_return_period > 1:
        n = o.output_return_period
        period = Sequence([Repeat(n - 1, step(False), "steps without outputs"), step(True)], "output period")
        main.add(Repeat(o.device_iterations // n, period, "device iterations"))
    else:
        main.add(Repeat(o.device_iterations, step(ctx.outputs_every_step()), "device iterations"))
    main.items += ctx.final_outputs()
    return main
