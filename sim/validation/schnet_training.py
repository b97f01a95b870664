"""SchNet trained on QM9 on 1-16 Bow IPUs: Graphcore's measured epoch times against the simulator.

Source: graphcore-research/hydronet-gnn at a89c2e4 (``experiments/strong_scaling.ipynb``: the sweep
``qm9-bow`` run by ``sweeps/qm9_packed_scaling.yml``; ``hydronet/bench.py``, ``model.py``,
``dataset_factory.py``; the rows in ``tests/data/hydronet_qm9_scaling_bow.csv``). ``bench.py --dataset
qm9 --use_packing false --module schnet --prefetch_depth 0 --use_async_loader false --merge_all_reduce
false``: PyTorch Geometric 2.3's SchNet (100 hidden channels and filters, 4 interaction blocks, 25
Gaussians, cutoff 6, its ``ShiftedSoftplus``), fp32, whose interaction graph is each atom's 28 nearest
neighbours within the cutoff found on the IPU (``KNNInteractionGraph``: the pairwise distances of the
micro-batch's atoms, masked off the diagonal, across molecules and beyond the cutoff, then ``topk``;
``QM9DatasetFactory.create`` passes k 28), the molecules' energies a fixed-size sum of their atoms'
(``to_fixed_size``) and the loss their mean squared error over the real molecules; a micro-batch is 16
molecules, each padded to 32 atoms (512 atoms, 14,336 edges); a PopTorch ``trainingModel`` with
``poptorch.optim.Adam`` (lr 1e-3), gradient accumulation 2 and device iterations x replicas = 64, so a call
trains on 2,048 molecules and an epoch of 102,400 is 50 calls, fed by a synchronous ``poptorch.DataLoader``.
The figure is an epoch's wall time (``train/self_time``), the host's loading included. The notebook heads
its section "QM9 Packed" while the sweep file passes ``--use_packing false``; the molecules an epoch, an
exact 50 x 2,048, say each call had the same 2,048, as padding gives and packing would not [U].
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "hydronet_qm9_scaling_bow.csv"
#: the run's model and batch: molecules a micro-batch, atoms a padded molecule, neighbours an atom, hidden
#: channels, Gaussians, cutoff (Angstrom), interaction blocks, gradient accumulation, calls an epoch
MOLECULES, ATOMS, NEIGHBOURS, FEATURES, GAUSSIANS, CUTOFF, BLOCKS, ACCUMULATION, CALLS = \
    16, 32, 28, 100, 25, 6.0, 4, 2, 50
#: the replicas the line through the epoch times is fitted over: beyond 16 the time a call stops falling
LINE_REPLICAS = (1, 2, 4, 8, 16)
#: the smallest Bow system that holds the replicas
SYSTEMS = {1: "bow-ipu", 2: "bow-2000", 4: "bow-2000", 8: "bow-pod16", 16: "bow-pod16"}


def rows() -> list[tuple[int, int, float, int]]:
    """(replicas, device iterations, mean epoch seconds, molecules an epoch) of the data file."""
    with open(DATA) as f:
        lines = [line for line in f if not line.startswith("#")]
    return [(int(r["replicas"]), int(r["device_iterations"]), float(r["epoch_seconds"]), int(r["graphs"]))
            for r in csv.DictReader(lines)]


def line(calls: dict[int, float] | None = None) -> tuple[float, float]:
    """(seconds a call the replicas do not share, seconds of the work they share at one replica): the
    least-squares line L + D / replicas through ``calls`` (replicas -> seconds a call; by default the
    measured ones at :data:`LINE_REPLICAS`)."""
    if calls is None:
        calls = {r: s / CALLS for r, _, s, _ in rows() if r in LINE_REPLICAS}
    a = np.array([[1.0, 1.0 / r] for r in calls])
    shared, split = np.linalg.lstsq(a, np.array(list(calls.values())), rcond=None)[0]
    return float(shared), float(split)


def simulated_line() -> tuple[float, float]:
    """:func:`line` through the simulated calls at :data:`LINE_REPLICAS`."""
    return line({r: simulated_call_seconds(r) for r in LINE_REPLICAS})


def _model():
    import torch
    import torch.nn.functional as F

    from .. import poptorch

    class ShiftedSoftplus(torch.nn.Module):
        def forward(self, x):
            return F.softplus(x) - math.log(2.0)

    class Interaction(torch.nn.Module):
        """PyG's InteractionBlock: CFConv (the filter network times the cosine cutoff, lin1, each edge's source
        row times its filter, summed into its target, lin2), the activation, Linear."""

        def __init__(self):
            super().__init__()
            linear = torch.nn.Linear
            self.mlp = torch.nn.Sequential(linear(GAUSSIANS, FEATURES), ShiftedSoftplus(), linear(FEATURES, FEATURES))
            self.lin1, self.lin2 = linear(FEATURES, FEATURES, bias=False), linear(FEATURES, FEATURES)
            self.act, self.lin = ShiftedSoftplus(), linear(FEATURES, FEATURES)

        def forward(self, x, edge_index, edge_weight, edge_attr):
            cutoff = 0.5 * (torch.cos(edge_weight * math.pi / CUTOFF) + 1.0)
            filters = self.mlp(edge_attr) * cutoff.view(-1, 1)
            messages = self.lin1(x).index_select(0, edge_index[0]) * filters
            targets = edge_index[1].unsqueeze(-1).expand_as(messages)
            summed = torch.zeros(x.shape[0], FEATURES).scatter_add_(0, targets, messages)
            return self.lin(self.act(self.lin2(summed)))

    class SchNet(torch.nn.Module):
        """hydronet's ``SchNet`` around PyG's: the molecule of each atom from ``ptr`` (``ptr_to_batch``), the
        k-nearest-neighbour graph, the Gaussian expansion, the blocks, the readout and the loss."""

        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(100, FEATURES, padding_idx=0)
            self.register_buffer("offset", torch.linspace(0.0, CUTOFF, GAUSSIANS))
            self.coeff = -0.5 / (CUTOFF / (GAUSSIANS - 1)) ** 2
            self.blocks = torch.nn.ModuleList(Interaction() for _ in range(BLOCKS))
            self.lin1, self.act = torch.nn.Linear(FEATURES, FEATURES // 2), ShiftedSoftplus()
            self.lin2 = torch.nn.Linear(FEATURES // 2, 1)

        def forward(self, z, pos, ptr, target):
            z = z.int()
            batch = torch.zeros(z.numel(), dtype=torch.int64).index_fill(0, ptr.long(), 1)
            batch[0] = 0
            batch = torch.cumsum(batch, dim=0)
            distances = F.pairwise_distance(pos.unsqueeze(1), pos, eps=0)
            rows = torch.arange(batch.shape[0], dtype=batch.dtype).view(-1, 1)
            mask = (rows == rows.view(1, -1)) | (batch.view(-1, 1) != batch.view(1, -1)) | (distances > CUTOFF)
            weight, index = torch.topk(-distances.masked_fill(mask, CUTOFF), k=NEIGHBOURS)
            edge_index = torch.vstack([index.flatten(), rows.expand_as(index).flatten()])
            edge_weight = -weight.flatten()
            edge_attr = torch.exp(self.coeff * (edge_weight.view(-1, 1) - self.offset.view(1, -1)) ** 2)
            h = self.embedding(z)
            for block in self.blocks:
                h = h + block(h, edge_index, edge_weight, edge_attr)
            h = self.lin2(self.act(self.lin1(h)))
            energy = torch.zeros(MOLECULES, 1).scatter_add_(0, batch.view(-1, 1), h).view(-1)
            loss = F.mse_loss(energy, target, reduction="sum") / (target != 0.0).to(energy.dtype).sum()
            return energy, poptorch.identity_loss(loss, reduction="none")

    return SchNet()


@lru_cache(maxsize=None)
def simulated_call_seconds(replicas: int) -> float:
    """The simulated seconds of one call (2,048 molecules) with ``replicas`` replicas on :data:`SYSTEMS`'s
    system, device iterations 64 / replicas, the molecules' atoms at random positions; the outputs are
    not computed on the CPU (the simulated call is the same)."""
    import torch

    from .. import poptorch

    torch.manual_seed(0)
    model = _model()
    options = poptorch.Options().deviceIterations(64 // replicas).replicationFactor(replicas)
    options.simulatedSystem(SYSTEMS[replicas]).computeOutputsOnCpu(False)
    options.Training.gradientAccumulation(ACCUMULATION)
    training = poptorch.trainingModel(model, options, poptorch.optim.Adam(model.parameters(), lr=1e-3))
    micro_batches = 64 * ACCUMULATION
    atoms = MOLECULES * ATOMS
    z = torch.randint(1, 10, (micro_batches * atoms,), dtype=torch.int32)
    pos = torch.randn(micro_batches * atoms, 3) * 2.0
    ptr = torch.arange(0, atoms, ATOMS, dtype=torch.int32).repeat(micro_batches)  # each molecule's first atom
    training(z, pos, ptr, torch.randn(micro_batches * MOLECULES))
    return float(training.simulation.seconds)


def table() -> list[str]:
    """The report's section: each replica count's measured and simulated seconds a call, then the line
    through each."""
    lines = ["| replicas | measured, a call (ms) | simulated, a call (ms) | simulated / measured |",
             "|---:|---:|---:|---:|"]
    for replicas, _, seconds, _ in rows():
        if replicas in LINE_REPLICAS:
            simulated = simulated_call_seconds(replicas)
            lines.append(f"| {replicas} | {seconds / CALLS * 1e3:.1f} | {simulated * 1e3:.1f} | "
                         f"{simulated / (seconds / CALLS):.2f} |")
    lines += ["", "| line L + D / replicas | L: a call, not shared (ms) | D: shared by the replicas (ms) |",
              "|---|---:|---:|"]
    for name, (shared, split) in (("measured", line()), ("simulated", simulated_line())):
        lines.append(f"| {name} | {shared * 1e3:.1f} | {split * 1e3:.1f} |")
    return lines
