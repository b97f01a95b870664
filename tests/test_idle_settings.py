"""Settings a run has nothing to act on are named in its notes, never silently dropped; model
parameters with nothing to act on are refused; a recomputation checkpoint changes nothing in
inference (PopART outlines it as any other op)."""

from __future__ import annotations

import pytest

import models
import sim
from sim.options import PipelineCopies, TensorLocationSettings
from sim.strategy import AutoStage, ShardedExecution


def _notes(graph, system="ipu-mk2", options=None, training=False) -> list[str]:
    return sim.simulate(graph, system, options or sim.Options(), training=training).executable.notes


def _bert(**params):
    return models.get("bert-base", num_layers=2, micro_batch=2, seq_len=128, **params)


def test_half_partials_on_float32_matmuls_and_without_convolutions():
    o = sim.Options()
    o.Precision.setPartialsType("half")
    notes = _notes(models.get("mlp"), options=o)  # float32 matmuls, no convolution
    assert "partialsTypeMatMuls half: its matmuls are float32, whose partials stay float; no effect" in notes
    assert "convolutions' partialsType half: the model has no convolution; no effect" in notes
    assert not any(n.startswith("partialsTypeMatMuls") for n in _notes(_bert(), options=o))  # fp16 matmuls


def test_stable_norm_on_an_inference_batch_norm():
    o = sim.Options().enableStableNorm(True)
    g = models.get("resnet50", micro_batch=1)
    assert ("enableStableNorm: in inference a batch norm uses its running statistics and computes none, and "
            "the model has no group or layer norm; no effect") in _notes(g, options=o)
    assert not any(n.startswith("enableStableNorm") for n in _notes(_bert(), options=o))  # layer norms


def test_just_in_time_copies_without_outlining():
    o = sim.Options()
    o._Popart.set("subgraphCopyingStrategy", 1)
    o._Popart.set("enableOutlining", False)
    assert ("subgraphCopyingStrategy JustInTime: it places the copies of outlined calls, and outlining is off "
            "(enableOutlining False); no effect") in _notes(_bert(), options=o)
    o._Popart.set("enableOutlining", True)
    assert not any(n.startswith("subgraphCopyingStrategy") for n in _notes(_bert(), options=o))


def test_per_stage_pipeline_copies_without_a_pipeline():
    o = sim.Options().setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
    notes = _notes(_bert(layers_per_ipu=[1, 1]), "ipu-m2000", o.pipelineCopies(PipelineCopies.PerStage))
    assert ("pipelineCopies PerStage: it orders a pipeline cycle's copies, and this run is sharded, without "
            "pipeline cycles; no effect") in notes


def test_stream_callback_threads_for_one_replica_a_process():
    o = sim.Options().streamCallbackThreads(4)
    note = ("streamCallbackThreads 4: each host process feeds one replica, whose input buffers its threads fill "
            "one after another (the simulator shares a process's replicas among its threads); no effect")
    assert note in _notes(models.get("mlp"), options=o)
    two = sim.Options().replicationFactor(2).streamCallbackThreads(4)
    assert not any(n.startswith("streamCallbackThreads") for n in _notes(models.get("mlp"), "ipu-m2000", two))


def test_clearing_the_fully_connected_pass_in_inference():
    o = sim.Options()
    o._Popart.set("enableFullyConnectedPass", False)
    plain = sim.simulate(_bert(), "ipu-mk2", sim.Options())
    cleared = sim.simulate(_bert(), "ipu-mk2", o)
    assert cleared.cycle_count == plain.cycle_count
    assert any(n.startswith("enableFullyConnectedPass False: an inference matmul's INFERENCE_FWD pass")
               for n in cleared.executable.notes)


def test_recomputation_checkpoints_change_nothing_in_inference():
    """A checkpoint marks its op Checkpoint, which PopART's outliner treats as unmarked
    (Op::appendOutlineAttributes compares only Recompute), and inference recomputes nothing: the
    run is the same as without checkpoints, and its notes say so."""
    plain = sim.simulate(_bert(recompute_checkpoint_every_layer=False), "ipu-mk2", sim.Options())
    marked = sim.simulate(_bert(recompute_checkpoint_every_layer=True), "ipu-mk2", sim.Options())
    assert marked.cycle_count == plain.cycle_count
    assert ("recomputation checkpoints: an inference run recomputes nothing, and PopART outlines a checkpoint as "
            "any other op; no effect") in marked.executable.notes
    assert not any(n.startswith("recomputation checkpoints") for n in plain.executable.notes)


@pytest.mark.parametrize("params, key", [
    (dict(checkpoint_dtype="float8"), "checkpoint_dtype"),  # one IPU: no checkpoints
    (dict(checkpoint_last_layer=True), "checkpoint_last_layer"),
    (dict(checkpoint_dtype="float8", recompute_checkpoint_every_layer=True), "checkpoint_dtype"),  # last stage
])
def test_checkpoint_parameters_without_checkpoints_to_act_on_are_refused(params, key):
    with pytest.raises(sim.GraphError, match=rf"parameter {key}=.* has no effect "):
        _bert(**params)
    _bert(checkpoint_dtype="float8", layers_per_ipu=[1, 1])  # checkpoints stashed between stages: taken


def test_host_processes_must_divide_the_replicas_from_the_command_line(capsys):
    from sim.cli.main import main
    code = main(["run", "--model", "mlp", "--system", "ipu-m2000", "--replicas", "4", "--host-processes", "3"])
    assert code == 2
    assert "hostProcesses(3): PopRun gives every instance the same number of replicas" in capsys.readouterr().err


def test_rts_over_one_replica_is_still_noted():  # the notes kept beside the new ones
    o = sim.Options()
    o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True))
    notes = sim.simulate(_bert(), "ipu-mk2", o, training=True, optimizer="adam").executable.notes
    assert any("replicated tensor sharding over 1 replica shards nothing" in n for n in notes)


def test_reduction_type_and_recomputation_with_nothing_to_act_on():
    o = sim.Options()
    o.Training.accumulationAndReplicationReductionType(sim.options.ReductionType.Sum)
    assert ("Training.accumulationAndReplicationReductionType: an inference run has no gradients to reduce; "
            "no effect") in _notes(models.get("mlp"), options=o)
    assert ("Training.accumulationAndReplicationReductionType: one micro-batch a weight update on one replica to "
            "reduce; no effect") in _notes(models.get("mlp"), options=o, training=True)
    o = sim.Options()
    o._Popart.set("autoRecomputation", 4)
    assert "autoRecomputation: an inference run recomputes nothing; no effect" in _notes(models.get("mlp"), options=o)
    o._Popart.set("autoRecomputation", 2)  # NormOnly: the MLP has no norm
    assert ("autoRecomputation NormOnly marks no op of this model for recomputation; no effect"
            in _notes(models.get("mlp"), options=o, training=True))


def test_default_float32_accumulators_are_not_noted():
    """A plain training run without accumulation says nothing of the accumulators' dtype it was not
    given (float32 is PopTorch's default); float16 set without accumulation is noted."""
    notes = _notes(models.get("mlp"), training=True)
    assert not any(n.startswith("gradient accumulators") for n in notes)


def test_outlining_options_where_no_outlining_runs():
    o = sim.Options()
    o._Popart.set("enableOutlining", False)
    o._Popart.set("outlineThreshold", 10.0)
    o._Popart.set("aliasZeroCopy", True)
    o._Popart.set("explicitRecomputation", True)  # which PopART requires beside it
    notes = _notes(_bert(), options=o)
    assert ("outlineThreshold: it chooses the sequences outlined as calls with copies, and outlining is off "
            "(enableOutlining False); no effect") in notes
    assert ("aliasZeroCopy: it elides the copies of outlined calls and loops, and outlining is off (enableOutlining "
            "False) and the model has no loop; no effect") in notes
    o._Popart.set("enableOutlining", True)  # aliasZeroCopy acts; the threshold then chooses nothing priced
    notes = _notes(_bert(), options=o)
    assert ("outlineThreshold: it chooses the sequences outlined as calls with copies, and aliasZeroCopy elides the "
            "calls' copies; no effect") in notes
    assert not any(n.startswith("aliasZeroCopy") for n in notes)


def test_prefetch_off_with_one_copy_a_call():
    """With one input copy a call the setting changes no cycle (PopART invalidates prefetches every
    run); with four it does, and no note is given."""
    def run(iterations, prefetch):
        o = sim.Options().deviceIterations(iterations)
        o._Popart.set("enablePrefetchDatastreams", prefetch)
        return sim.simulate(models.get("mlp"), "ipu-mk2", o)
    note = ("enablePrefetchDatastreams False: each input stream is copied once a call, and PopART invalidates "
            "prefetched data at every run (Devicex reconnectInputStreams), so there is no next copy to prepare; "
            "no effect")
    assert note in run(1, False).executable.notes
    assert run(1, False).cycle_count == run(1, True).cycle_count
    assert note not in run(4, False).executable.notes
    assert run(4, False).cycle_count > run(4, True).cycle_count


def test_auto_round_with_nothing_to_round():
    o = sim.Options().autoRoundNumIPUs(True)
    assert ("autoRoundNumIPUs: the run's 1 IPU(s) are already a power of two; nothing to round, no effect"
            in _notes(models.get("mlp"), options=o))
    assert not any(n.startswith("autoRoundNumIPUs") for n in _notes(models.get("mlp")))


def test_amp_tile_laid_out_for_more_tiles_than_the_ipu_has():
    note = ("the model lays its work out on 1,472 tiles, one piece a tile, and the IPU computes on 1,216: the "
            "pieces share tiles, up to 2 on one; give tiles=1216 (a zoo microbenchmark: --param tiles=1216) to size "
            "it for this IPU")
    assert note in _notes(models.get("amp-tile"), "ipu-mk1-c2")
    assert not any("lays its work out" in n for n in _notes(models.get("amp-tile", tiles=1216), "ipu-mk1-c2"))
    assert not any("lays its work out" in n for n in _notes(models.get("amp-tile"), "ipu-mk2"))
