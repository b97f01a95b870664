"""Benchmark: simulating 256 symmetric replicas costs about as much as 16.

Replicas run the same program, so only those behind one host link are simulated; the others
follow by symmetry and the gradient all-reduce is still priced over all of them. Not a timed
assertion: the test checks that 256 replicas simulate no more replicas (and IPUs) than 16, and
prints the wall-time ratio, measured in the same run.

    python -m pytest -s tests/benchmarks/test_replica_scaling.py
"""

from __future__ import annotations

import time

import pytest

import models
import sim


def _simulate(replicas: int, repeats: int = 3):
    graph = models.get("resnet50", micro_batch=4)
    best, run = float("inf"), None
    for _ in range(repeats):
        o = sim.Options().replicationFactor(replicas)
        t0 = time.perf_counter()
        run = sim.simulate(graph, f"ipu-pod{replicas}", o, training=True, optimizer="sgd_momentum")
        best = min(best, time.perf_counter() - t0)
    return run, best


@pytest.mark.benchmark
def test_256_replicas_cost_about_as_much_as_16():
    small, t16 = _simulate(16)
    large, t256 = _simulate(256)
    assert len(large.executable.simulated_replicas) <= len(small.executable.simulated_replicas)
    assert set(large.trace.ipu) <= set(small.trace.ipu)
    assert large.executable.options.replication_factor == 256  # priced over all of them
    print(f"\nResNet-50 training, 1 IPU per replica: 16 replicas {1e3 * t16:.1f} ms, 256 replicas "
          f"{1e3 * t256:.1f} ms wall (ratio {t256 / t16:.2f}); simulated replicas "
          f"{len(small.executable.simulated_replicas)} and {len(large.executable.simulated_replicas)}; "
          f"SimPy events {small.timeline.events} and {large.timeline.events}")
