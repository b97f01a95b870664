"""How the first copies of a run's prefetched inputs reach the IPU.

PopART's ``Devicex::run`` reconnects the input streams for each run, invalidating their prefetches, and Poplar
calls a stream's ``prefetch()`` only after a transfer of that stream (poplar::StreamCallback). So whatever the
prefetch depth, the run's first copy of each input is fetched on demand: the IPU's copy waits for the host to fill
the buffer, as at depth 1, and the copies ask for the host process's callback thread in the order the IPUs reach
them (every replica's x, then every replica's labels, on one IPU-POD16 host thread). Only later copies run ahead.
So a deeper buffer never delivers a replica's first input later than depth 1 (before 2026-11-30 the first fills
asked for the thread all at once in program order, and the mlp on 4 replicas took 163,910 cycles at depth 2
against 157,814 at depth 1; until 2026-12-02 they were filled from cycle 0, ahead of any demand).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import models
import sim
from sim.engine import Engine
from sim.program import Compute, OpSteps, Repeat, Sequence, StreamCopy, Sync

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


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_runs_first_copy_of_an_input_is_fetched_on_demand(depth):
    """At any depth the first copy of each input is one task on the IPU's path (its host fill, the host sync
    and the transfer: the depth-1 copy's phases), with no host-side task ahead of it, so each ends when it
    ends at depth 1."""
    engine = Engine(sim.load_system("ipu-pod16"))
    tasks = engine.lower(step(depth))
    assert not [t for t in tasks if t.category == "host_prefetch"]
    tl = engine.run(step(depth))
    on_demand = Engine(sim.load_system("ipu-pod16")).run(step(1))
    for name in [f"{n} r{r}" for n in ("x", "labels") for r in range(4)]:
        assert copy_end(tl, name) == copy_end(on_demand, name), name


def test_later_copies_are_prefetched_after_the_first_transfer():
    """A second micro-batch's input is filled ahead by the host (a host-side task) once the stream's first
    transfer is done (Poplar prefetches after a transfer), so with compute between the two copies the
    second copy waits for no fill."""
    engine = Engine(sim.load_system("ipu-pod16"))
    two = Sequence([StreamCopy(0, "x", "to_ipu", X_BYTES, 0, host_sync=True, prefetch=2, fill_ahead=True),
                    busy(0, 200_000),
                    StreamCopy(0, "x", "to_ipu", X_BYTES, 0, host_sync=True, prefetch=2, fill_ahead=True)])
    tasks = engine.lower(two)
    first, prefetch = tasks[0], next(i for i, t in enumerate(tasks) if t.category == "host_prefetch")
    assert first.category == "host_io" and 0 in tasks[prefetch].deps
    rec = engine.run(two).records[0]
    copies = np.flatnonzero(rec.category == "host_io")
    (_, fill), _ = engine.prefetch_phases(StreamCopy(0, "x", "to_ipu", X_BYTES, 0))[0]
    assert rec.end[copies[1]] - rec.start[copies[1]] < fill  # its fill ran during the compute


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_buffering_depth_of_n_lets_the_host_fill_n_copies_ahead(depth):
    """Poplar prefetches up to a stream's bufferingDepth elements before the device reads one
    (poplar::StreamCallback: a buffered stream's prefetch() may be called that many times before a complete();
    graphcore/tensorflow's infeed prefetch_depth is "the number of elements poplar will prefetch"). On a C600, whose
    IPU reads the host's buffer
    over PCIe, with the host's fill slower than a copy and the compute between copies, the fill for copy j starts
    when the host's fill before it has ended and copy j - depth has emptied its buffer: at depth 1 fill and copy take
    turns, from depth 2 the fills run back to back. (Until 2026-12-07 depth N was N - 1 buffers: depth 2 ran as 1.)"""
    copies, nbytes = 8, 4 << 20  # a 4 MiB fill takes 1.2 ms at the host's 3.48 GB/s, its copy 0.27 ms over PCIe
    x = StreamCopy(0, "x", "to_ipu", nbytes, 0, host_sync=True, prefetch=depth, fill_ahead=True)
    run = Sequence([item for _ in range(copies) for item in (replace(x), busy(0, 1_000))])
    rec = Engine(sim.load_system("c600")).run(run).records[0]
    copy_rows, fill_rows = np.flatnonzero(rec.category == "host_io"), np.flatnonzero(rec.category == "host_prefetch")
    assert len(copy_rows) == copies and len(fill_rows) == copies - 1  # the run's first copy is fetched on demand
    for j in range(1, copies):
        freed = rec.end[copy_rows[max(0, j - depth)]]
        previous_fill = rec.end[fill_rows[j - 2]] if j >= 2 else 0
        assert rec.start[fill_rows[j - 1]] == max(freed, previous_fill), j
    if depth > 1:  # the host paces the copies: its fills are back to back
        assert (rec.start[fill_rows[1:]] == rec.end[fill_rows[:-1]]).all()


def test_mlp_on_four_replicas_is_not_slower_with_a_deeper_buffer():
    def cycles(depth):
        opts = sim.Options().replicationFactor(4)
        opts._Popart.set("defaultPrefetchBufferingDepth", depth)
        return sim.simulate(models.get("mlp"), "ipu-pod16", opts).cycle_count

    assert cycles(2) <= cycles(1)


def nested_loops(steps: int, compute: int, micro_batches: int = 12) -> Sequence:
    """``steps`` weight updates (an outer loop) of ``micro_batches`` micro-batches each (an inner loop, long
    enough to be simulated on its own and extrapolated), x streamed in before each micro-batch's compute."""
    micro_batch = Sequence([StreamCopy(0, "x", "to_ipu", X_BYTES, 0, host_sync=True, prefetch=2, fill_ahead=True),
                            busy(0, compute)])
    inner = Repeat(micro_batches, micro_batch, "gradient accumulation", collapse=False)
    return Sequence([Repeat(steps, Sequence([inner, busy(0, 50_000)]), "device iterations", collapse=False)])


@pytest.mark.parametrize("steps", [2, 12])
def test_only_the_runs_first_copy_waits_for_its_fill_not_each_loops(steps):
    """A loop's body simulated on its own (the accumulation loop inside a device iteration) does not start
    its stream cold: the host filled the buffer during the previous iteration's work, as Poplar prefetches after
    every transfer. Before 2026-12-06 each device iteration's first micro-batch waited for a fill on the IPU's
    path (ResNet-50's 3.3 MB of images: 2.4 ms of a Bow Pod16 step)."""
    engine = Engine(sim.load_system("ipu-pod16"))
    (_, fill), _ = engine.prefetch_phases(StreamCopy(0, "x", "to_ipu", X_BYTES, 0))[0]
    one = engine.run(nested_loops(1, 200_000)).total_cycles
    more = Engine(sim.load_system("ipu-pod16")).run(nested_loops(steps, 200_000)).total_cycles
    later_step = (more - one) / (steps - 1)
    assert later_step >= 12 * 200_000 + 50_000
    assert one - later_step >= 0.9 * fill  # the first step alone fetches on demand


def test_a_host_bound_loop_still_makes_every_fill():
    """When the host's fill outlasts the compute between copies, each device iteration still costs a fill per
    micro-batch: the fill for a loop's first copy is made before the loop, once the previous loop has freed a
    buffer and the host's thread."""
    engine = Engine(sim.load_system("ipu-pod16"))
    (_, fill), _ = engine.prefetch_phases(StreamCopy(0, "x", "to_ipu", X_BYTES, 0))[0]
    compute = fill // 4
    one = engine.run(nested_loops(1, compute)).total_cycles
    more = Engine(sim.load_system("ipu-pod16")).run(nested_loops(12, compute)).total_cycles
    assert (more - one) / 11 >= 12 * fill


@pytest.mark.parametrize("params, depth, within", [({"hidden": [4096, 4096]}, 2, 0.0), ({}, 2, 0.01), ({}, 3, 1e-4)])
def test_extrapolated_loops_time_a_run_as_simulating_every_iteration_does(monkeypatch, params, depth, within):
    """The engine's shortcut (a loop's body simulated on its own and extrapolated) gives a run the cycles that
    walking every iteration in one simulation gives: 3 device iterations of 12 micro-batches of an mlp, inputs
    prefetched. Exactly where the IPU paces the loop (4,096-wide layers); within 1 % where the host's fills do
    (the default mlp), as the host's fills after a loop start from the loop's summary (when their buffers and
    the host's thread came free) rather than from every task of it. Before 2026-12-06 the shortcut started each
    device iteration's accumulation loop cold: ResNet-50 MLPerf's M23 at 3 device iterations took 265.4 ms
    against 256.2 walked, the default mlp +3.4 %. With 3 buffers the loop's second copy is filled from the loop's
    start, its buffer freed before the loop (0.002 %; until later that day it waited for the loop's first copy,
    +0.23 %)."""
    def cycles():
        opts = sim.Options().deviceIterations(3)
        opts.Training.gradientAccumulation(12)
        opts._Popart.set("defaultPrefetchBufferingDepth", depth)
        return sim.simulate(models.get("mlp", **params), "ipu-mk2", opts, training=True).cycle_count

    extrapolated = cycles()
    monkeypatch.setattr("sim.engine.STEADY_ITERATIONS", 10_000)
    assert extrapolated == pytest.approx(cycles(), rel=within, abs=0)


FOUR_STAGES = dict(num_layers=4, seq_len=128, micro_batch=8, layers_per_ipu=[1, 1, 1, 1])
TWO_STAGES = dict(num_layers=2, seq_len=128, micro_batch=8, layers_per_ipu=[1, 1])
EMBEDDING_ALONE = dict(num_layers=3, seq_len=384, micro_batch=2, layers_per_ipu=[0, 1, 1, 1])


@pytest.mark.parametrize("params, depth", [(FOUR_STAGES, None), (FOUR_STAGES, 2), (TWO_STAGES, 4),
                                           (EMBEDDING_ALONE, None), (EMBEDDING_ALONE, 2)])
def test_a_pipelines_fills_after_its_main_cycles_are_timed_as_walking_them_times_them(monkeypatch, params, depth):
    """A pipeline's inputs (token ids, types, mask, labels) are filled by one host thread. After the main cycles
    (simulated on their own and extrapolated) each stream's next fill begins once the loop's last copy of it has
    freed a buffer and the thread is free, the thread taking them in the order their buffers came free, as
    walking every cycle does: the same cycles, exactly. Before 2026-12-06 only the thread's first fill after the
    loop began before the loop's end, and only the part on the thread; MLPerf BERT's M3 (8 IPUs) took 213,507
    cycles a step longer than walked, its labels filled after the flush began. With 4 buffers (3 copies ahead)
    the ramp's copies free the buffers of the main cycles' first three copies, and walking fills all three before
    the loop, holding the thread when the labels' first copy (fetched on demand) wants it; until 2026-12-06 (later)
    the shortcut filled the second and third at the loop's start: 101,530 cycles (0.16 %) short."""
    def cycles():
        opts = sim.Options().deviceIterations(2)
        opts.Training.gradientAccumulation(24)
        if depth:
            opts._Popart.set("defaultPrefetchBufferingDepth", depth)
        return sim.simulate(models.get("bert-base", **params), "ipu-m2000", opts, training=True).cycle_count

    extrapolated = cycles()
    monkeypatch.setattr("sim.engine.STEADY_ITERATIONS", 10_000)
    assert extrapolated == cycles()


def two_stages(compute: int, depth: int, cycles: int = 24) -> Sequence:
    """A two-stage pipeline's program: x into IPU 0 from the first cycle, labels into IPU 1 from the second, both
    filled by one host thread, a sync closing each cycle; the main cycles a loop the engine may simulate on its own."""
    def x():
        return StreamCopy(0, "x", "to_ipu", X_BYTES, 0, host_sync=False, prefetch=depth, fill_ahead=True)

    def labels():
        return StreamCopy(1, "labels", "to_ipu", X_BYTES, 1, host_sync=False, prefetch=depth, fill_ahead=True)

    def cycle(*items):
        return Sequence(list(items) + [Sync((0, 1), "external", 100)])

    main = Repeat(cycles - 2, cycle(x(), labels(), busy(0, compute), busy(1, compute)), "main cycles", collapse=False)
    return Sequence([cycle(x(), busy(0, compute)), cycle(x(), labels(), busy(0, compute), busy(1, compute)), main,
                     Sequence([labels(), busy(1, compute)])])


@pytest.mark.parametrize("depth", [3, 4, 5])
def test_fills_made_before_a_loop_for_its_first_copies_do_not_hold_back_its_start(monkeypatch, depth):
    """With the host well ahead of the IPUs (compute 4 fills long), walking the cycles fills the main cycles' first
    copies (up to depth of each stream) as soon as the ramp's copies free their buffers, and some of those fills
    run into the loop's first cycles. The shortcut makes them before the loop too, and the loop does not wait for
    the host's thread to finish them: the same cycles as walking. Had the loop held the thread from its start (a
    draft of 2026-12-06), depth 4 would have come out 0.57 % slower and depth 5 2.45 %."""
    engine = Engine(sim.load_system("ipu-pod16"))
    (_, fill), _ = engine.prefetch_phases(StreamCopy(0, "x", "to_ipu", X_BYTES, 0))[0]
    extrapolated = engine.run(two_stages(4 * fill, depth)).total_cycles
    monkeypatch.setattr("sim.engine.STEADY_ITERATIONS", 10_000)
    assert extrapolated == Engine(sim.load_system("ipu-pod16")).run(two_stages(4 * fill, depth)).total_cycles
