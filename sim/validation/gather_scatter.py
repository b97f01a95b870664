"""Gather and scatter-add on a Bow IPU: Graphcore's measured cycle counts against the simulator.

Source: graphcore/Gradient-Pytorch-Geometric ``ipu-speed-advantage`` at 820a7249 (its notebook and
``benchmark_util.py``; the rows in ``tests/data/pyg_gather_scatter_bow.csv``, every 20th of
``precomputed_results/ipu/{scatter_add,gather}.csv``). Each row is one PopTorch inference model on
one Bow IPU with synthetic data: ``poptorch.for_loop`` of 10 iterations over the table (``input``,
fp32 [num_inputs, num_features]), the indices and the output, all model buffers, then the sum of
the last output; ``cycles`` is ``cycleCount()`` over 10, averaged over 10 calls. A gather is
``input.index_select(0, index)`` with num_outputs indices (popops multiSlice); a scatter-add is
torch_scatter's sum, ``zeros(num_outputs, F).scatter_add_(0, index expanded over the features,
input)`` with num_inputs indices (popops multiUpdateAdd of rows). The simulator runs the same model
through ``sim.poptorch`` on ``bow-ipu``.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "pyg_gather_scatter_bow.csv"
#: the benchmark's loop length (``Benchmark(num_repeats=10)``)
ITERATIONS = 10
#: size bands of the measured cycles, for the report's table
BANDS = (0, 4_000, 16_000, math.inf)


def rows() -> list[tuple[str, int, int, int, float]]:
    """(op, num_inputs, num_features, num_outputs, measured cycles per iteration) of the data file."""
    with open(DATA) as f:
        lines = [line for line in f if not line.startswith("#")]
    return [(r["op"], int(r["num_inputs"]), int(r["num_features"]), int(r["num_outputs"]), float(r["cycles"]))
            for r in csv.DictReader(lines)]


def _lookup_module():
    import torch

    class Lookup(torch.nn.Module):
        """The loop body: (table, indices, output) -> the same table and indices, and the new output."""

        def __init__(self, op: str, inputs: int, features: int, outputs: int):
            super().__init__()
            self.op, self.outputs = op, outputs
            self.register_buffer("table", torch.randn(inputs, features))
            high, count = (outputs, inputs) if op == "scatter_add" else (inputs, outputs)
            self.register_buffer("index", torch.randint(high, (count,)))
            self.register_buffer("result", self(self.table, self.index, None)[-1])

        def loop_inputs(self):
            return [self.table, self.index, self.result]

        def forward(self, table, index, _):
            if self.op == "gather":
                return table, index, table.index_select(0, index)
            rows = index.unsqueeze(-1).expand_as(table)
            return table, index, torch.zeros(self.outputs, table.shape[1]).scatter_add_(0, rows, table)

    return Lookup


def loop_cycles(body, proportion: float | None = None) -> float:
    """The simulator's cycles per iteration of ``poptorch.for_loop`` of :data:`ITERATIONS` over ``body`` (a
    module whose ``loop_inputs()`` are its carried tensors, the last one its result) on a ``bow-ipu`` with
    synthetic data, then the sum of the result: the benchmarks' model; with ``proportion``, PopTorch's
    ``setAvailableMemoryProportion({"IPU0": proportion})``, which PopTorch sets on every op. The model is
    compiled and its executable run (what a call's ``cycleCount()`` reports); nothing reads the outputs, so
    the capture skips the example's values."""
    import torch

    from .. import poptorch, run_executable

    class Benchmark(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self):
            return torch.sum(poptorch.for_loop(ITERATIONS, self.body, self.body.loop_inputs())[-1])

    options = poptorch.Options().enableSyntheticData(True).logCycleCount(True).simulatedSystem("bow-ipu")
    options.computeOutputsOnCpu(False)  # nothing reads the outputs: captured on shapes and dtypes only
    if proportion is not None:
        options.setAvailableMemoryProportion({"IPU0": proportion})
    model = poptorch.inferenceModel(Benchmark(), options=options)
    model.compile()
    return run_executable(model.executable).cycle_count / ITERATIONS


@lru_cache(maxsize=None)
def simulated_cycles(op: str, inputs: int, features: int, outputs: int, proportion: float | None = None) -> float:
    """The simulator's cycles per iteration of the benchmark's loop (its cycle count over 10), with
    ``proportion`` as :func:`loop_cycles` takes it."""
    import torch

    torch.manual_seed(0)
    return loop_cycles(_lookup_module()(op, inputs, features, outputs), proportion)


def ratios(every: int = 1) -> dict[str, np.ndarray]:
    """Simulated over measured cycles of every ``every``-th row, by op."""
    out: dict[str, list[float]] = {}
    for op, inputs, features, outputs, measured in rows()[::every]:
        out.setdefault(op, []).append(simulated_cycles(op, inputs, features, outputs) / measured)
    return {op: np.array(v) for op, v in out.items()}


def table() -> list[str]:
    """The report's section: per op and band of measured cycles, rows, median and 10-90 % of the ratio."""
    by: dict[tuple[str, int], list[float]] = {}
    for op, inputs, features, outputs, measured in rows():
        band = next(i for i in range(len(BANDS) - 1) if measured < BANDS[i + 1])
        by.setdefault((op, band), []).append(simulated_cycles(op, inputs, features, outputs) / measured)
    names = {0: "< 4k", 1: "4k-16k", 2: "> 16k"}
    lines = ["| op | measured cycles per iteration | rows | median simulated / measured | 10-90 % |",
             "|---|---|---:|---:|---|"]
    for (op, band), values in sorted(by.items()):
        v = np.array(values)
        lines.append(f"| {op} | {names[band]} | {len(v)} | {np.median(v):.2f} | "
                     f"{np.quantile(v, 0.1):.2f} - {np.quantile(v, 0.9):.2f} |")
    return lines
