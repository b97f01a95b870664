"""Mk2 -> Bow: what is priced in tile cycles scales with the clock, what is priced in seconds
(host IO, IPU-Link collectives) does not.

The Bow IPU is the Mk2 GC200 tile design at 1.85 GHz instead of 1.325 GHz, behind the same
gateway, host link and IPU-Links (configs/bow-ipu.toml): one run on ipu-pod16 and on bow-pod16
must spend the same cycles on compute, vertex launch and exchange, and the same seconds on host
IO and the gradient all-reduce (sim.validation's "Mk2 -> Bow" section rests on this).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import models
import sim
from sim import validation


def _run(system: str):
    o = sim.Options().replicationFactor(4)
    o.Precision.setPartialsType("half")
    o.Training.gradientAccumulation(2)
    o._Popart.set("replicatedCollectivesSettings.mergeAllReduceCollectives", True)  # as the ResNet configs
    graph = models.get("resnet50", micro_batch=2, recompute_checkpoints="blocks", eight_bit_io=True)
    return sim.simulate(graph, system, o, training=True, optimizer="sgd_momentum")


@pytest.fixture(scope="module")
def runs():
    return _run("ipu-pod16"), _run("bow-pod16")


def test_clocks_are_the_datasheets(runs):
    mk2, bow = (r.executable.system.ipu.clock_hz for r in runs)
    assert (mk2, bow) == (1.325e9, 1.85e9)


def test_tile_cycle_lines_take_the_same_cycles(runs):
    mk2, bow = (r.breakdown.iloc[0] for r in runs)
    for line in validation.CLOCK_LINES:
        assert mk2[line] > 0 and mk2[line] == bow[line], line


def test_seconds_lines_take_the_same_seconds(runs):
    (mk2, bow), clocks = ((r.breakdown.iloc[0] for r in runs), [r.executable.system.ipu.clock_hz for r in runs])
    for line in ("host_io", "collective"):
        a, b = mk2[line] / clocks[0], bow[line] / clocks[1]
        assert a > 0 and b == pytest.approx(a, rel=1e-4), line  # cycles are rounded up per phase


def test_step_seconds_add_up_to_the_call_over_its_weight_updates():
    setup = replace(validation._pair_setup("M5"), params=validation._params(
        micro_batch=2, recompute_checkpoints="blocks", eight_bit_io=True), replicas=4, processes=2, accumulation=2)
    # M5's call runs the weight updates of a fifth of an epoch, as the TF1 script does
    assert setup.device_iterations == 1_281_167 // 1920 // 5 == 133
    lines, per_ipu = validation.step_seconds(setup)
    run = sim.simulate(setup.graph(), setup.system, setup.options(), training=True,
                       optimizer=setup.sim_optimizer())
    assert sum(lines.values()) * 133 == pytest.approx(run.seconds, rel=1e-12)
    assert per_ipu == pytest.approx(run.samples_per_second / 4, rel=1e-12)
    # the TF1 rows run the host side ahead, the host link included (depth 2); depth 1 puts the host's
    # buffer fill and the host link back on the IPU's path
    assert setup.prefetch_depth == validation.TF1_PREFETCH_DEPTH == 2
    waiting, slower = validation.step_seconds(setup, 1)
    assert waiting["host_io"] > lines["host_io"] and slower < per_ipu
