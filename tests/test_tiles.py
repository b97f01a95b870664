"""Tiles are vectors: every op's cost has per-tile compute, bytes-in and temporary memory."""

import math

import numpy as np
import pytest

import models
import sim
from sim.cost import op_cost


@pytest.fixture(scope="module")
def ipu():
    return sim.load_system("ipu-mk2").ipu


def _matmul(m, k, n, dtype="float16"):
    b = sim.GraphBuilder("mm", dtype)
    x = b.input("x", (m, k))
    b.output(b.matmul(x, b.weight("w", (k, n))))
    return b.graph


@pytest.mark.parametrize("shape", [(128, 768, 3072), (1000, 1000, 1000), (37, 513, 97)])
def test_profile_max_is_the_op_cost(ipu, shape):
    """The busiest tile of the profile sets the op's compute cycles and temporary memory (BSP)."""
    g = _matmul(*shape)
    c = op_cost(g.ops[0], g, ipu, ipu.tiles)
    assert len(c.profile.compute) == ipu.tiles
    assert c.profile.compute.max() == c.compute_cycles
    assert math.ceil(c.profile.temp.max()) == c.temp_bytes_per_tile  # whole bytes
    assert (c.profile.compute > 0).sum() == c.tiles_used


def test_uneven_split_is_imbalanced(ipu):
    """A dimension that does not divide by its split leaves some tiles with less work."""
    g = _matmul(37, 513, 97)
    c = op_cost(g.ops[0], g, ipu, ipu.tiles)
    busy = c.profile.compute[c.profile.compute > 0]
    assert busy.min() < busy.max()


def test_run_tile_compute_adds_up(ipu):
    """Per-tile compute over a run: the busiest tile never exceeds the IPU's compute cycles
    (each op's slowest tile is counted there), and every tile does some work."""
    run = sim.simulate(models.get("resnet50", micro_batch=2), "ipu-mk2", sim.Options().deviceIterations(3))
    tiles = run.tile_compute(0)
    assert tiles.shape == (run.executable.tiles,)
    busy = run.breakdown.loc[0, "compute"] + run.breakdown.loc[0, "launch"]  # launch: the fixed part
    assert tiles.max() <= busy
    assert tiles.min() > 0
    assert np.isclose(tiles.max(), busy, rtol=0.05)


def test_io_tiles_shrink_the_vectors():
    """With IO tiles the cost model sees only the compute tiles."""
    o = sim.Options()
    o.TensorLocations.numIOTiles(64)
    run = sim.simulate(_matmul(256, 256, 256), "ipu-mk2", o)
    assert run.executable.tiles == 1472 - 64
    assert run.tile_compute(0).shape == (1408,)
