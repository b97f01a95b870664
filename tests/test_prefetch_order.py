"""The order in which a host process's stream-callback thread makes the first fills of prefetched inputs.

With a prefetch depth of 2 or more the host side of an input stream runs ahead of the IPU, so at the start of
a run every replica's first fill of every input asks for the one callback thread at once. Served in program
order (replica 0's x, its labels, replica 1's x, ...) the last replica's x waited for every earlier replica's
labels (the fixed host latency each, about 6.6k cycles even for 64 bytes), and a deeper buffer made the call
slower than depth 1 (the mlp on 4 replicas of an IPU-POD16: 157,814 cycles at depth 1, 163,910 at depth 2).
The thread now serves them as the IPUs need them, every replica's x before any labels (the order of the
demand-driven fills of depth 1): depth 2 takes 157,524 cycles there.
"""

from __future__ import annotations

import numpy as np
import pytest

import models
import sim
from sim.engine import Engine
from sim.program import Compute, OpSteps, Sequence, StreamCopy

X_BYTES, LABEL_BYTES = 50_176, 64  # the mlp's input and labels for a micro-batch


def busy(ipu: int, cycles: int = 20_000) -> Compute:
    steps = OpSteps(("work",), ("compute",), np.array([0]), np.array([cycles]), np.array([0]), np.array([0.0]),
                    np.array([0]))
    return Compute(ipu, f"work on IPU {ipu}", steps)


def step(depth: int, replicas: int = 4) -> Sequence:
    """One step on ``replicas`` single-IPU replicas: x then labels from the host, then compute."""
    items = [StreamCopy(r, f"{name} r{r}", "to_ipu", nbytes, k, host_sync=k == 0, replica=r, prefetch=depth,
                        fill_ahead=True)
             for r in range(replicas) for k, (name, nbytes) in enumerate((("x", X_BYTES), ("labels", LABEL_BYTES)))]
    return Sequence(items + [busy(r) for r in range(replicas)])


def simulated(depth: int, replicas: int = 4):
    return Engine(sim.load_system("ipu-pod16")).run(step(depth, replicas))


def copy_end(tl, name: str) -> int:
    """When the IPU's copy of ``name`` ends (its data is on the tiles)."""
    rec = tl.records[0]
    rows = np.flatnonzero((rec.category == "host_io") & (rec.name == name))
    assert len(rows) == 1, name
    return int(rec.end[rows[0]])


@pytest.mark.parametrize("depth", [2, 3])
def test_a_deeper_buffer_does_not_deliver_the_last_replicas_input_later(depth):
    shallow, deep = simulated(1), simulated(depth)
    # the thread fills every replica's x before any labels, as at depth 1
    assert copy_end(deep, "x r3") <= copy_end(shallow, "x r3")
    assert deep.total_cycles <= shallow.total_cycles


def test_the_thread_fills_each_replicas_first_stream_before_the_second():
    engine = Engine(sim.load_system("ipu-pod16"))
    tl = engine.run(step(2))
    rec = tl.records[0]
    host = {name: int(end) for name, end, cat in zip(rec.name, rec.end, rec.category) if cat == "host_prefetch"}
    # host side of a copy: the fill on the callback thread, then the host link
    (_, fill_x), (_, wire_x) = engine.prefetch_phases(StreamCopy(0, "x", "to_ipu", X_BYTES, 0))[0]
    (_, fill_labels), _ = engine.prefetch_phases(StreamCopy(0, "labels", "to_ipu", LABEL_BYTES, 1))[0]
    # the four x fills back to back, then the labels
    assert [host[f"x r{r}"] for r in range(4)] == [(r + 1) * fill_x + wire_x for r in range(4)]
    assert host["labels r0"] > 4 * fill_x + fill_labels > host["x r3"] - wire_x


def test_one_replica_and_depth_one_keep_program_order():
    from sim.engine import fill_order

    engine = Engine(sim.load_system("ipu-pod16"))
    one = engine.lower(step(2, replicas=1))
    assert [t.first_fill for t in one if t.first_fill is not None] == [0, 1]
    assert fill_order(one) == list(range(len(one)))
    shallow = engine.lower(step(1))
    assert all(t.first_fill is None for t in shallow)
    assert fill_order(shallow) == list(range(len(shallow)))
    four = engine.lower(step(2))
    firsts = [i for i, t in enumerate(four) if t.first_fill is not None]
    # program order is replica-major; the fills start stream-major
    assert [four[i].name for i in fill_order(four) if i in firsts] == [f"{n} r{r}" for n in ("x", "labels")
                                                                         for r in range(4)]


def test_mlp_on_four_replicas_is_not_slower_with_a_deeper_buffer():
    def cycles(depth):
        opts = sim.Options().replicationFactor(4)
        opts._Popart.set("defaultPrefetchBufferingDepth", depth)
        return sim.simulate(models.get("mlp"), "ipu-pod16", opts).cycle_count

    assert cycles(2) <= cycles(1)
