"""Calibration against published hardware figures (../shared/calibration/hardware.csv).

Each test states its tolerance and why. Figures that a constant was fitted to are held tightly
(they check that the fit and the model stay consistent); figures the model predicts from other
constants are held to what such a prediction can promise.
"""

import csv
from pathlib import Path

import numpy as np
import pytest

import models
import sim
from sim.cost import op_cost
from sim.engine import Engine
from sim.program import Compute, IpuCopy, OpSteps, Repeat, Sequence, StreamCopy, Sync, leaves

CSV = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "hardware.csv"
# the figures, so the tests run where shared/ is absent too (values copied from hardware.csv)
FIGURES = {
    "bow_amp_tile_N16": 55.49, "bow_amp_tile_N128": 211.12, "bow_amp_tile_N512": 299.78,
    "bow_amp_tile_N2048": 334.94, "tut6_matvec_total": 25444984, "tut6_matvec_compute": 28300.3,
    "tut6_matvec_exchange": 8743.1, "tut6_matvec_host_exchange": 2641488.4,
    "m2000_host_to_gateway": 7.06e9, "m2000_gateway_to_host": 2.93e9, "m2000_ipu_pair_link": 52.9e9,
    "host_sync_rate": 1485e-6,
}


def figure(name: str) -> float:
    """A figure from hardware.csv when it is present (and checked equal to our copy)."""
    if CSV.exists():
        with open(CSV) as f:
            rows = {r["name"]: r["value"] for r in csv.DictReader(f)}
        if name in rows:
            assert float(rows[name]) == pytest.approx(FIGURES[name]), f"hardware.csv changed {name}"
    return FIGURES[name]


# --- Bow tile AMP sweep (tessellate-ipu peak-FLOPS notebook) --------------------------------
@pytest.mark.parametrize("n", [16, 128, 512, 2048])
def test_bow_amp_tile_sweep(n):
    """Tolerance 3 %: the AMP constants (128 FLOP/cycle, 330 cycles per vertex) reproduce the
    sweep's linear fit 4N+330, whose residuals on these four points are within 2 %."""
    g = models.get("amp-tile", n=n)
    ipu = sim.load_system("bow-ipu").ipu
    cost = op_cost(g.ops[0], g, ipu, ipu.tiles)
    tflops = ipu.tiles * 2 * n * 16 * 16 / (cost.compute_cycles / ipu.clock_hz) / 1e12
    assert tflops == pytest.approx(figure(f"bow_amp_tile_N{n}"), rel=0.03)


# --- Poplar tutorial 6 on Mk2 -----------------------------------------------------------------
@pytest.fixture(scope="module")
def tut6():
    return sim.simulate(models.get("tut6-matvec"), "ipu-mk2")


def test_tut6_total_cycles(tut6):
    """Tolerance 1 %: host_prepare_bytes_per_s was fitted to this total; the check keeps the
    rest of the model (which it absorbs) from drifting."""
    assert tut6.cycle_count == pytest.approx(figure("tut6_matvec_total"), rel=0.01)


def test_tut6_compute_cycles(tut6):
    """Tolerance 5 %: predicted, not fitted: 48 scalar C++ vertices per tile at the tutorial's
    5 + 4 cycles per element, six workers, plus the reduce vertices. The hardware figure is the
    average over tiles; the model gives the busiest tile (48 vs 47.6 vertices)."""
    compute = tut6.breakdown.loc[0, "compute"]
    assert compute == pytest.approx(figure("tut6_matvec_compute"), rel=0.05)


def test_tut6_exchange_cycles(tut6):
    """Tolerance 15 %: predicted from 4 bytes/cycle/tile and the bytes each tile receives
    (its share of the matrix, the vector, the partial sums); set-up costs are estimates."""
    exchange = tut6.breakdown.loc[0, "exchange"]
    assert exchange == pytest.approx(figure("tut6_matvec_exchange"), rel=0.15)


def test_tut6_host_exchange_cycles(tut6):
    """Tolerance 2 %: gateway_to_ipu_bytes_per_s was fitted to this figure (data moving in
    StreamCopyMid); checks the engine prices the copies' device phase with it."""
    engine = Engine(tut6.executable.system)
    copies = [c for c in leaves(tut6.executable.program) if isinstance(c, StreamCopy)
              and c.direction == "to_ipu"]
    device = sum(engine.prefetch_phases(c)[1][-1][1] for c in copies)
    assert device == pytest.approx(figure("tut6_matvec_host_exchange"), rel=0.02)


def test_tut6_breakdown_is_dominated_by_host_wait(tut6):
    """What the tutorial reports: the run is host-bound (StreamCopyBegin) and compute is < 1 %."""
    b = tut6.breakdown.loc[0]
    assert b["host_io"] / tut6.cycle_count > 0.99
    assert b.sum() == tut6.cycle_count


# --- IPU-M2000 links (Graphcore command-line tools examples) -----------------------------------
def _stream(ipu, nbytes, direction="to_ipu"):
    return StreamCopy(ipu, f"s{ipu}", direction, nbytes, 0)


def test_m2000_host_link_is_shared_by_four_ipus():
    """Tolerance 1 %: four IPUs streaming at once share one host link, so together they reach
    the gc-hosttraffictest host-to-gateway figure, not four times it. The fixed costs (host
    sync, request latency) and host buffer fill are excluded by timing the link phase alone."""
    system = sim.load_system("ipu-m2000")
    nbytes = 256 * 2**20
    engine = Engine(system)
    tl = engine.run(Sequence([_stream(i, nbytes) for i in range(4)]))
    host, ipu_side = engine.prefetch_phases(_stream(0, nbytes))
    fill = host[0][1] + ipu_side[0][1]
    device = ipu_side[1][1]
    # the first IPU's fill overlaps nothing; after it, the link carries 4 x nbytes back to back
    link_seconds = system.cycles_to_seconds(tl.total_cycles - fill - device)
    assert 4 * nbytes / link_seconds == pytest.approx(figure("m2000_host_to_gateway"), rel=0.01)


def test_m2000_gateway_to_host_rate():
    """Tolerance 1 %: the IPU-to-host wire phase runs at the gc-hosttraffictest gateway-to-host figure."""
    system = sim.load_system("ipu-m2000")
    nbytes = 256 * 2**20
    wire = Engine(system).prefetch_phases(_stream(0, nbytes, "from_ipu"))[0][0][1]
    assert nbytes / system.cycles_to_seconds(wire) == pytest.approx(figure("m2000_gateway_to_host"), rel=0.01)


def test_m2000_ipu_pair_traffic():
    """Tolerance 2 %: gc-iputraffictest moves 1000 x 64 KB per tile between IPUs 2 and 3 in
    both directions at once (one merged copy); the directions are separate link resources."""
    system = sim.load_system("ipu-m2000")
    nbytes = 4_096_000 * 1000 // 2  # the example's 4,096,000 KB, half each way
    tl = Engine(system).run(Sequence([IpuCopy(((2, 3, nbytes), (3, 2, nbytes)))]))
    rate = 2 * nbytes / system.cycles_to_seconds(tl.total_cycles)
    assert rate == pytest.approx(figure("m2000_ipu_pair_link"), rel=0.02)


def test_host_sync_latency():
    """Tolerance 1 %: gc-hostsynclatencytest issues 4095 host syncs, each followed by 32 delay
    instructions of 5 cycles; the host sync constant was derived from this figure."""
    system = sim.load_system("ipu-mk2")
    delay = OpSteps(("delay",), ("custom",), np.array([32 * 5]), np.array([0]), np.array([0]),
                    np.array([0.0]), np.array([0]))
    body = Sequence([Sync((0,), "host", system.host_link.host_sync_cycles), Compute(0, "delay", delay)])
    tl = Engine(system).run(Sequence([Repeat(4095, body)]))
    assert system.cycles_to_seconds(tl.total_cycles) == pytest.approx(figure("host_sync_rate"), rel=0.01)
