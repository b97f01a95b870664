"""Memory as a user sees it: the arrays a run hands out, the out-of-memory advice and margins, and
``ipusim plan``'s reasons (each test a defect found and fixed)."""

import numpy as np
import pytest

import models
import sim
from sim.compiler.memory import CATEGORIES, IpuMemory, check_tile_memory


def _memory(ipu=0, peak=2000, capacity=1000, parts=None, **context) -> IpuMemory:
    """A 4-tile IPU whose tiles all peak at ``peak`` bytes, holding ``parts`` on the fullest one."""
    parts = parts or {"activations": peak * 0.5, "temporaries": peak * 0.3, "weights": peak * 0.2}
    tile_parts = {c: np.full(4, float(parts.get(c, 0.0))) for c in CATEGORIES}
    return IpuMemory(ipu, capacity, np.zeros(4), np.full(4, peak), "op", {}, dict(parts), "op",
                     "op 'op' (matmul, forward pass)", None, tile_parts, **context)


def _advice(memories: dict[int, IpuMemory], margin: float = 0.0) -> tuple[str, sim.OutOfMemoryError]:
    with pytest.raises(sim.OutOfMemoryError) as info:
        check_tile_memory(memories, margin)
    return str(info.value).split(" Try: ")[1], info.value


def test_tile_memory_arrays_cannot_change_the_run_behind_its_back():
    """``run.tile_memory(0, "weights") *= 1000`` changed the run's memory table, and
    ``run.tile_memory(0)[:] = 0`` its peak (0 bytes, fullest tile 0): the arrays were the run's own."""
    run = sim.simulate(models.get("mlp"), "ipu-mk2")
    peak, table = run.memory[0]["peak_tile_bytes"], run.memory_table().copy()
    weights = run.tile_memory(0, "weights")
    weights *= 1000  # a copy: the caller's to change
    with pytest.raises(ValueError):
        run.tile_memory(0)[:] = 0  # read-only: an error, not a silently emptied run
    assert run.memory[0]["peak_tile_bytes"] == peak and run.memory_table().equals(table)
    assert run.tile_memory(0).max() == peak


def test_phased_advice_names_the_phase_and_the_liveness_not_layers_per_ipu():
    """A phase short of memory was told to move layers (layers_per_ipu, which phased execution refuses)
    and, with its weights and optimizer state off chip, was not told to recompute nor to send its
    activations off chip between phases (--liveness off-chip-after-fwd, which makes BERT-Large mb 16 fit).
    Recomputation there is autoRecomputation's (PopART's StreamingMemory), not more checkpoints'."""
    advice, _ = _advice({0: _memory(op_kind="matmul", op_pass="forward", run_label="phase 25", amp_governed=True,
                                    training=True)})
    assert "layers_per_ipu" not in advice and advice.startswith("less of the model in phase 25")
    assert "--liveness off-chip-after-fwd" in advice
    # checkpoints do nothing there without autoRecomputation, and any type recomputes all but the checkpoints
    assert "recomputation of each phase in its backward phase (autoRecomputation Standard" in advice
    assert "recomputation checkpoints (" not in advice and "more recomputation checkpoints" not in advice
    advice, _ = _advice({0: _memory(op_kind="matmul", op_pass="backward", run_label="phase 25", amp_governed=True,
                                    training=True, recomputes=True)})
    assert "recomputation of each phase" not in advice and "more recomputation checkpoints" not in advice


def test_weight_update_advice_does_not_offer_micro_batch_or_recomputation():
    """At a weight-update op the activations are the gradients, whatever the micro-batch; the op's
    temporaries (an Adam update) do not follow availableMemoryProportion either."""
    parts = {"weights": 300, "optimizer_state": 800, "activations": 400, "temporaries": 200}
    advice, _ = _advice({0: _memory(parts=parts, op_kind="adam_update", op_pass="update",
                                    run_label="weight update", training=True)})
    assert "micro-batch" not in advice and "recomputation" not in advice
    assert "availableMemoryProportion" not in advice and "optimizer state off chip" in advice


def test_advice_counts_existing_checkpoints_and_every_ipu_short():
    """A pipeline with a checkpoint after every layer was told to add "recomputation checkpoints";
    when every IPU of the replica is short, moving layers between them cannot help."""
    context = dict(op_kind="matmul", op_pass="backward", run_label="pipeline stage 5", amp_governed=True,
                   training=True, checkpoints=7, recomputes=True)
    advice, _ = _advice({i: _memory(i, peak=2000 - i, **context) for i in range(2)})
    assert "more recomputation checkpoints (the IPU has 7)" in advice
    assert advice.startswith("the model over more IPUs") and "less of the model on this IPU" not in advice
    advice, _ = _advice({0: _memory(0, **context), 1: _memory(1, peak=900, **context)})
    assert advice.startswith("less of the model on this IPU")


def test_a_pipeline_stage_that_stashes_without_recomputing_is_told_to_recompute():
    """A pipeline with autoRecomputation None stashes every activation its backward stages read: the stage is
    told about the pipeline's recomputation (Pipeline, PopTorch's default), not RecomputeAll or checkpoints."""
    parts = {"stash": 900, "activations": 400, "temporaries": 300, "weights": 200}
    context = dict(op_kind="matmul", op_pass="forward", run_label="pipeline stage 0", amp_governed=True,
                   training=True, checkpoints=4)
    advice, _ = _advice({0: _memory(parts=parts, **context)})
    assert "recomputation of the pipeline's stages (autoRecomputation Pipeline, --auto-recomputation pipeline" in advice
    assert "RecomputeAll" not in advice and "more recomputation checkpoints" not in advice
    advice, _ = _advice({0: _memory(parts=parts, recomputes=True, **context)})
    assert "recomputation of the pipeline's stages" not in advice and "more recomputation checkpoints" in advice


def test_checkpoints_that_recompute_nothing_are_told_how_to():
    """One IPU with checkpoints whose run recomputes nothing (autoRecomputation None, PopTorch's default off a
    pipeline): more checkpoints would not help; RecomputeAll would."""
    advice, _ = _advice({0: _memory(0, op_kind="matmul", op_pass="backward", training=True, checkpoints=16)})
    assert ("recomputation between the IPU's 16 recomputation checkpoints (autoRecomputation RecomputeAll, "
            "--auto-recomputation recompute-all" in advice and "more recomputation checkpoints" not in advice)


def test_a_small_memory_margin_is_shown_as_given():
    """``{margin:.0%}`` wrote a margin of 0.005 as "0%" and 0.025 as "2%"."""
    _, e = _advice({0: _memory(peak=999)}, margin=0.005)
    assert "with the memory margin of 0.5%" in str(e)
    assert (e.margin, e.shortfall_bytes, e.margin_bytes) == (0.005, 4, 5)  # 999 fits: 1 to spare; 1,004 with it
    _, e = _advice({0: _memory(peak=999)}, margin=0.025)
    assert "with the memory margin of 2.5%" in str(e) and e.where == "op 'op' (matmul, forward pass)"


def test_plan_reason_says_where_and_whether_the_margin_decides():
    """The plan's reason dropped the pass and stage of the op at the peak and did not say that a
    shortfall was the margin's: mlp at micro-batch 120,000 fills 97.6 % of a tile, so it is out of
    memory only with the default 5 % margin."""
    from sim.cli import plan as plan_cli
    row = plan_cli.plan_point(["--model", "mlp", "--micro-batch", "120000", "--memory-margin", "0.05"])
    assert row["status"] == "oom"
    assert "at op 'fc0/matmul' (matmul, forward pass) with the memory margin of 5% (it fits without it" \
        in row["reason"]


def test_plan_always_live_reason_names_what_it_counts(tmp_path):
    """The precheck counts the fixed control code (reserved_bytes_per_tile) of the program memory, not the
    rest of it (which needs the plan), yet said "program memory"; and wrote a 0.5 % margin as "0%"."""
    from sim import planner
    path = tmp_path / "tiny.toml"
    path.write_text('extends = "ipu-m2000"\nname = "m2000-tiny"\ndescription = "1 KiB tiles"\n\n[ipu]\n'
                    "sram_bytes_per_tile = 1024\n")
    pl = planner.Planner(planner.Model("mlp", {"hidden": [2048]}), planner.Space(
        [str(path)], (16, 16), training=True, optimizer="adam", micro_batches=[16], proportions=[0.6],
        memory_margin=0.005))
    status, reason = pl.precheck(pl.candidates[0])
    assert status == "oom" and "fixed control code alone fill" in reason and "program memory" not in reason
    assert "(with the memory margin of 0.5%:" in reason
