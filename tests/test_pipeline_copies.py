"""How a pipeline cycle runs its stages' inter-IPU copies (``Options.pipelineCopies``).

PopART and PopTorch call one function per cycle holding every stage's copies, so the links carry
them at once (``Merged``); TensorFlow's pipelines call each stage's copies as a function of their
own, one after another (``PerStage``; graphcore/tensorflow pipeline_visitor.cc). Pinned: the
program's copies and syncs per cycle, and that the per-stage cycle's copies take the sum of the
merged ones' parts.
"""

from __future__ import annotations

import pytest

import models
import sim
from sim import OptionsError, PipelineCopies
from sim.engine import Engine
from sim.program import IpuCopy, Repeat, Sequence, leaves


def _main_cycle(exe) -> Sequence:
    """The body of the pipeline's steady-state repeat (every stage working)."""
    def find(item):
        if isinstance(item, Repeat) and item.name == "pipeline main":
            return item.body
        for child in (item.items if isinstance(item, Sequence) else [item.body] if isinstance(item, Repeat) else []):
            found = find(child)
            if found is not None:
                return found
        return None
    return find(exe.program)


def _compiled(mode: PipelineCopies | None):
    g = models.get("bert-base", num_layers=4, seq_len=64, micro_batch=2, layers_per_ipu=[1, 1, 1, 1])
    o = sim.Options().stepIOCallbacks(False)  # both run as TensorFlow's (infeeds: no PopART StepIO)
    o.Training.gradientAccumulation(16)
    if mode is not None:
        o.pipelineCopies(mode)
    return sim.compile(g, "ipu-m2000", o, training=True)


def test_per_stage_copies_run_one_after_another():
    merged, per_stage = _compiled(None), _compiled(PipelineCopies.PerStage)
    copies = {name: [i for i in leaves(_main_cycle(exe)) if isinstance(i, IpuCopy)]
              for name, exe in (("merged", merged), ("per_stage", per_stage))}
    # one merged copy of every stage's sends; per stage, one copy per sending stage, each followed by a sync
    assert len(copies["merged"]) == 1
    assert [t for c in copies["per_stage"] for t in c.transfers] == list(copies["merged"][0].transfers)
    assert len(copies["per_stage"]) == 8  # 5 forward stages (IPUs 0-3, then the tied head on IPU 0) and 4 backward
    cycle = [i for i in leaves(_main_cycle(per_stage))
             if isinstance(i, IpuCopy) or getattr(i, "name", "") == "pipeline sync"]
    assert [type(i).__name__ for i in cycle] == ["IpuCopy", "Sync"] * 8
    # the merged copy lasts as long as its slowest link; one after another they add up, with a sync each
    engine = Engine(merged.system)
    alone = [engine.ipu_copy_cycles(c) for c in copies["per_stage"]]
    assert engine.ipu_copy_cycles(copies["merged"][0]) == max(alone)
    extra_per_cycle = sum(alone) - max(alone) + (len(alone) - 1) * cycle[1].cycles
    cycles = 16 + len(per_stage.stages) - 1  # GA + pipeline stages - 1: every cycle copies every stage's sends
    assert len(per_stage.stages) == 9
    assert sim.run_executable(per_stage).cycle_count - sim.run_executable(merged).cycle_count == \
        cycles * extra_per_cycle


def test_pipeline_copies_option_is_checked_and_reported():
    with pytest.raises(OptionsError, match="pipelineCopies expects a PipelineCopies"):
        sim.Options().pipelineCopies("per_stage")
    o = sim.Options().pipelineCopies(PipelineCopies.PerStage)
    assert o.set_options["pipelineCopies"] == "PerStage" and "pipelineCopies" not in o.unmodelled()
    # a model on one IPU has no inter-IPU copies: the option changes nothing
    g = models.get("mlp", micro_batch=2)
    assert sim.simulate(g, "ipu-m2000", o).cycle_count == sim.simulate(g, "ipu-m2000").cycle_count


def test_pipeline_recomputation_follows_popart_auto_recomputation():
    """PopTorch sets autoRecomputation to Pipeline (3) unless the user sets it; None (0) stashes what the
    backward pass reads instead of recomputing; any other value recomputes the pipeline's stages as Pipeline
    does (PopART's pipeline.cpp), only Pipeline also the last forward stage between its checkpoints."""
    g = models.get("bert-base", num_layers=2, layers_per_ipu=[1, 1], micro_batch=2)

    def run(value):
        o = sim.Options().enableSyntheticData(True)
        o.Training.gradientAccumulation(8)
        if value is not None:
            o._Popart.set("autoRecomputation", value)
        exe = sim.compile(g, "ipu-m2000", o, training=True)
        return exe, sum(len(getattr(s, "recomputed", [])) for s in exe.stages)
    (_, n_default), (pipeline, n_pipeline), (none, n_none) = run(None), run(3), run(0)
    assert n_default == n_pipeline > 0 and n_none == 0
    assert not any("autoRecomputation" in n for n in none.notes + pipeline.notes)
    standard, n_standard = run(1)
    assert n_standard == n_pipeline and not any("autoRecomputation" in n for n in standard.notes)
