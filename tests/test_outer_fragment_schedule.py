"""PopART's accumulateOuterFragmentSettings: how a pipeline's weight update runs across a replica's
IPUs (sim/schedule/context.py ``Context._update_alone``; PopART sessionoptions.hpp
AccumulateOuterFragmentSchedule, Serial by default; Graphcore's examples set OverlapMemoryOptimized to
"parallelize optimizer step update across IPUs")."""

from __future__ import annotations

import pytest

import models
import sim
import sim.popart as popart
from sim.errors import OptionsError
from sim.options import TensorLocationSettings
from sim.program import Sync
from sim.validation.published import PUBLISHED_BY_ID
from sim.validation.setups import OVERLAP_BUT_IPU0, TF_RESOURCE_UPDATE

SCHEDULE, EXCLUDED = sim.Options.OUTER_FRAGMENT_KEYS


def _run(schedule=None, excluded=None, replicas=2, off_chip=False):
    """A 4-IPU BERT pipeline trained with LAMB."""
    o = sim.Options().replicationFactor(replicas).enableSyntheticData(True)
    o.Training.gradientAccumulation(16)
    if off_chip:
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False))
    if schedule is not None:
        o._Popart.set(SCHEDULE, schedule)
    if excluded is not None:
        o._Popart.set(EXCLUDED, excluded)
    g = models.get("bert-base", micro_batch=1, num_layers=4, layers_per_ipu=[1, 1, 1, 1], seq_len=16, hidden=64,
                   heads=4, vocab=1000)
    return sim.simulate(g, "ipu-pod16", o, training=True, optimizer="lamb")


def _alone(run) -> list[str]:
    """The weight update's syncs that let one IPU run alone."""
    def walk(item):
        if isinstance(item, Sync) and "alone" in item.name:
            yield item.name
        for child in getattr(item, "items", []) or ([item.body] if hasattr(item, "body") else []):
            yield from walk(child)
    return list(walk(run.executable.program))


def test_options_read_popart_names_values_and_enums():
    o = sim.Options()
    assert (o.outer_fragment_schedule(), o.outer_fragment_excluded()) == ("Serial", frozenset())
    for value in (3, "OverlapMemoryOptimized", popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized):
        o._Popart.set(SCHEDULE, value)
        assert o.outer_fragment_schedule() == "OverlapMemoryOptimized"
    o._Popart.set(EXCLUDED, ["0", "2"])
    assert o.outer_fragment_excluded() == {0, 2}
    assert not {f"_Popart.{key}" for key in sim.Options.OUTER_FRAGMENT_KEYS} & set(o.unmodelled())


@pytest.mark.parametrize("key, value", [(SCHEDULE, 4), (SCHEDULE, "Parallel"), (SCHEDULE, True),
                                        (EXCLUDED, ["zero"]), (EXCLUDED, [-1])])
def test_bad_values_are_refused_when_set(key, value):
    o = sim.Options()
    with pytest.raises(OptionsError, match="accumulateOuterFragmentSettings"):
        o._Popart.set(key, value)
    assert key not in o._Popart.values


def test_serial_runs_each_ipus_step_alone_and_overlap_runs_them_together():
    serial, scheduler = _run(), _run(popart.AccumulateOuterFragmentSchedule.Scheduler)
    overlap, but_first = _run(3), _run(3, ["0"])
    # one IPU at a time: a sync of the replica before each IPU's step and one after them, per replica simulated
    assert _alone(serial) == [f"weight update, IPU {p} alone" for p in range(4)]
    assert _alone(scheduler) == _alone(serial) and scheduler.cycle_count == serial.cycle_count
    assert _alone(overlap) == [] and _alone(but_first) == ["weight update, IPU 0 alone"]
    assert serial.cycle_count > but_first.cycle_count > overlap.cycle_count
    notes = [n for n in serial.executable.notes if n.startswith("weight update: accumulateOuterFragmentSettings")]
    assert len(notes) == 1 and "IPUs 0, 1, 2, 3" in notes[0] and "OverlapMemoryOptimized" in notes[0]
    assert not any(n.startswith("weight update: accumulate") for n in overlap.executable.notes)


def test_poptorch_schedules_a_clipped_pipeline_with_the_scheduler():
    """PopTorch sets Scheduler when a pipeline clips its gradients and the schedule is not set (popart_compiler
    Compiler.cpp); it runs the IPUs' steps one at a time as Serial does."""
    assert sim.Options().outer_fragment_schedule(clipped_pipeline=True) == "Scheduler"
    o = sim.Options()
    o._Popart.set(SCHEDULE, "OverlapCycleOptimized")
    assert o.outer_fragment_schedule(clipped_pipeline=True) == "OverlapCycleOptimized"
    o = sim.Options().replicationFactor(2).enableSyntheticData(True)
    o.Training.gradientAccumulation(16)
    g = models.get("bert-base", micro_batch=1, num_layers=4, layers_per_ipu=[1, 1, 1, 1], seq_len=16, hidden=64,
                   heads=4, vocab=1000)
    run = sim.simulate(g, "ipu-pod16", o, training=True, optimizer=sim.Optimizer("lamb", clip_norm=1.0))
    assert any(n.startswith("weight update: accumulateOuterFragmentSettings schedule Scheduler: the optimizer "
                            "steps of IPUs 0, 1, 2, 3") for n in run.executable.notes)


def test_nothing_runs_alone_without_a_sync_of_the_replica():
    # one replica, the state on chip: no collective and no streaming-memory copy in the update
    assert _alone(_run(replicas=1)) == []
    assert _run(replicas=1).cycle_count == _run(3, replicas=1).cycle_count
    # off chip, each IPU's loads and stores sync the replica
    assert _alone(_run(replicas=1, off_chip=True)) == [f"weight update, IPU {p} alone" for p in range(4)]
    assert _run(replicas=1, off_chip=True).cycle_count > _run(3, replicas=1, off_chip=True).cycle_count


def test_validation_rows_set_what_their_sources_set():
    rows = {rid: PUBLISHED_BY_ID[rid].setup.outer_fragment for rid in
            ("B43", "B41", "B40", "B42", "M18", "M1", "B22", "B28", "C5", "B48", "B4")}
    assert rows == {"B43": OVERLAP_BUT_IPU0, "B41": OVERLAP_BUT_IPU0,  # PyTorch BERT ipu_options.py
                    "B40": OVERLAP_BUT_IPU0, "M1": OVERLAP_BUT_IPU0,  # PopART bert.py: off chip, replicated
                    "B42": (), "M18": (),  # bert.py with the state on chip: PopART's Serial
                    "B22": OVERLAP_BUT_IPU0, "B28": ("OverlapMemoryOptimized", ()),  # ViT, Swin
                    "C5": ("Scheduler", (0,)),  # Conformer: clipped, so PopTorch's Scheduler; IPU 0 excluded
                    "B48": TF_RESOURCE_UPDATE, "B4": TF_RESOURCE_UPDATE}  # TensorFlow
    o = PUBLISHED_BY_ID["B43"].setup.options()
    assert (o.outer_fragment_schedule(), o.outer_fragment_excluded()) == ("OverlapMemoryOptimized", {0})
