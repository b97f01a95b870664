"""SchNet's interaction block on a Bow IPU, and gathers, scatter-adds and the block under a small
availableMemoryProportion: Graphcore's measured cycle counts against the simulator.

Source: graphcore-research/hydronet-gnn at a89c2e4 (``hydronet/mpbench.py``; the rows in
``tests/data/hydronet_mpbench_bow.csv``, from ``experiments/bow/`` and ``experiments/bow_amp_0.1/``).
Each row is one PopTorch inference model on one Bow IPU, as ``sim.validation.gather_scatter`` describes
it (the same harness and the same default-proportion gather and scatter-add sweep): a
``poptorch.for_loop`` over the op with all its tensors model buffers, ``cycles`` the cycle count per
iteration. ``schnet_block`` is PyTorch Geometric 2.3's ``InteractionBlock`` (hidden channels and filters
both num_features, 50 Gaussians, cutoff 6) on num_inputs nodes and num_outputs random edges, its
shifted softplus replaced by the repository's ``FastShiftedSoftplus`` (log1p(exp(-|x|)) + max(x, 0) - log 2):
the filter network (Linear 50 -> F, the activation, Linear F -> F) times the cosine cutoff of each edge's
length, the nodes' Linear, each edge's source row gathered (index_select) and multiplied by its filter,
the products scatter-added into their target nodes, then Linear, the activation and Linear; fp32
throughout. ``amp`` 0.1 is the sweep run with ``setAvailableMemoryProportion({"IPU0": 0.1})``, which
PopTorch sets on every op: poplin plans the matmuls and popops the lookups' and scatters' slice plans
within it.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import gather_scatter

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "hydronet_mpbench_bow.csv"
#: GaussianSmearing's count in mpbench's InteractionBlockOp, and the block's cutoff (Angstrom)
GAUSSIANS, CUTOFF = 50, 6.0


def rows() -> list[tuple[str, float | None, int, int, int, float]]:
    """(op, availableMemoryProportion or None for the default, num_inputs, num_features, num_outputs,
    measured cycles per iteration) of the data file."""
    with open(DATA) as f:
        lines = [line for line in f if not line.startswith("#")]
    return [(r["op"], None if r["amp"] == "default" else float(r["amp"]), int(r["num_inputs"]),
             int(r["num_features"]), int(r["num_outputs"]), float(r["cycles"])) for r in csv.DictReader(lines)]


def _block_module():
    import torch

    class ShiftedSoftplus(torch.nn.Module):
        def forward(self, x):
            return torch.log1p(torch.exp(-x.abs())) + torch.clamp_min(x, 0.0) - math.log(2.0)

    class InteractionBlock(torch.nn.Module):
        """The loop body: (nodes, edge index, edge lengths, edge Gaussians, output) -> the same and the block's
        new node features."""

        def __init__(self, nodes: int, features: int, edges: int):
            super().__init__()
            linear = torch.nn.Linear
            self.mlp = torch.nn.Sequential(linear(GAUSSIANS, features), ShiftedSoftplus(), linear(features, features))
            self.lin1, self.lin2 = linear(features, features, bias=False), linear(features, features)
            self.act, self.lin = ShiftedSoftplus(), linear(features, features)
            self.register_buffer("x", torch.randn(nodes, features))
            self.register_buffer("edge_index", torch.randint(nodes, (2, edges)))
            self.register_buffer("edge_weight", torch.empty(edges).uniform_(1.0, CUTOFF))
            self.register_buffer("edge_attr", torch.randn(edges, GAUSSIANS))
            self.register_buffer("out", torch.zeros(nodes, features))

        def loop_inputs(self):
            return [self.x, self.edge_index, self.edge_weight, self.edge_attr, self.out]

        def forward(self, x, edge_index, edge_weight, edge_attr, _):
            cutoff = 0.5 * (torch.cos(edge_weight * math.pi / CUTOFF) + 1.0)
            filters = self.mlp(edge_attr) * cutoff.view(-1, 1)
            messages = self.lin1(x).index_select(0, edge_index[0]) * filters
            targets = edge_index[1].unsqueeze(-1).expand_as(messages)
            summed = torch.zeros(x.shape[0], messages.shape[1]).scatter_add_(0, targets, messages)
            return x, edge_index, edge_weight, edge_attr, self.lin(self.act(self.lin2(summed)))

    return InteractionBlock


@lru_cache(maxsize=None)
def simulated_cycles(op: str, inputs: int, features: int, outputs: int, proportion: float | None = None) -> float:
    """The simulator's cycles per iteration of the row's loop (``gather_scatter``'s harness)."""
    if op != "schnet_block":
        return gather_scatter.simulated_cycles(op, inputs, features, outputs, proportion)
    import torch

    torch.manual_seed(0)
    return gather_scatter.loop_cycles(_block_module()(inputs, features, outputs), proportion)


def block_ratios(every: int = 1) -> np.ndarray:
    """Simulated over measured cycles of every ``every``-th SchNet block row at the default proportion."""
    picked = [r for r in rows() if r[0] == "schnet_block" and r[1] is None][::every]
    return np.array([simulated_cycles(*r[:1], *r[2:5]) / r[5] for r in picked])


def proportion_effects(ops: tuple[str, ...] = ("gather", "scatter_add", "schnet_block"),
                       every: int = 1) -> list[tuple[str, int, int, int, float, float]]:
    """(op, num_inputs, num_features, num_outputs, measured, simulated) ratio of the cycles at the small
    proportion over those at the default, for every ``every``-th row measured at both, of ``ops``."""
    default = {r[0:1] + r[2:5]: r[5] for r in rows() if r[1] is None}
    out = []
    for op, proportion, n, f, e, cycles in [r for r in rows() if r[1] is not None and r[0] in ops][::every]:
        measured = cycles / default[(op, n, f, e)]
        simulated = simulated_cycles(op, n, f, e, proportion) / simulated_cycles(op, n, f, e)
        out.append((op, n, f, e, measured, simulated))
    return out


def table() -> list[str]:
    """The report's section: the blocks' ratios by band of measured cycles, then each row's proportion effect."""
    bands = ((0, 150_000, "< 150k"), (150_000, 400_000, "150k-400k"), (400_000, math.inf, "> 400k"))
    picked = [r for r in rows() if r[0] == "schnet_block" and r[1] is None]
    ratios = block_ratios()
    lines = ["| SchNet block, measured cycles per iteration | rows | median simulated / measured | 10-90 % |",
             "|---|---:|---:|---|"]
    for low, high, name in bands:
        v = np.array([x for x, r in zip(ratios, picked) if low <= r[5] < high])
        if v.size:
            lines.append(f"| {name} | {v.size} | {np.median(v):.2f} | {np.quantile(v, 0.1):.2f} - "
                         f"{np.quantile(v, 0.9):.2f} |")
    lines += ["", "| op | nodes (table rows) | features | edges (lookups) | measured: 0.1 / default | "
              "simulated: 0.1 / default |", "|---|---:|---:|---:|---:|---:|"]
    for op, n, f, e, measured, simulated in proportion_effects():
        lines.append(f"| {op} | {n:,} | {f} | {e:,} | {measured:.2f} | {simulated:.2f} |")
    return lines
