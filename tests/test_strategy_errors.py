"""Findings of a fuzz exploration of run configurations (strategies, locations, host IO)."""

import json

import pytest

import sim
from sim.graph import GraphBuilder
from sim.strategy import Phase, PipelinedExecution, SerialPhasedExecution, ShardedExecution, Stage


def _two_blocks() -> sim.Graph:
    b = GraphBuilder("two-blocks", "float16")
    x = b.input("x", (16, 64))
    with b.ipu(None, block="first"):
        h = b.relu(b.linear(x, 64, name="fc1"))
    with b.ipu(None, block="second"):
        y = b.linear(h, 64, name="fc2")
    b.output(y)
    return b.graph


def test_phases_out_of_model_order_are_named_as_phases():
    """Phases listed against the model's order: the error speaks of phases and how to order them,
    not of pipeline stages and AutoStage (which a phased strategy does not take)."""
    o = sim.Options().setExecutionStrategy(SerialPhasedExecution(Phase("second"), Phase("first")))
    with pytest.raises(sim.OptionsError) as e:
        sim.simulate(_two_blocks(), "ipu-m2000", o)
    message = str(e.value)
    assert "in phase 0" in message and "made in a later phase" in message
    assert "Phases" in message and "AutoStage" not in message and "pipeline stage" not in message


def test_pipeline_stages_out_of_model_order_keep_their_message():
    o = sim.Options().deviceIterations(2).setExecutionStrategy(
        PipelinedExecution(Stage("second").ipu(1), Stage("first").ipu(0)))
    with pytest.raises(sim.OptionsError, match="in pipeline stage 0 .* made in a later stage"):
        sim.simulate(_two_blocks(), "ipu-m2000", o)


def test_overlapped_io_error_names_the_output_mode_in_force():
    """A training run overlapping its host IO without an output mode set fails on PopTorch's message, which
    asks for All or Sum; it also says which mode is in force (Final, training's default, set by no one)."""
    b = GraphBuilder("overlapped", "float16")
    x = b.input("x", (16, 64))
    loss = b.mse_loss(b.linear(x, 64), b.input("target", (16, 64)))
    b.output(loss)
    g = b.graph
    for name in g.inputs + g.outputs:
        g.overlap[name] = int(sim.options.OverlapMode.OverlapDeviceIterationLoop)
    o = sim.Options().setExecutionStrategy(ShardedExecution())
    o.TensorLocations.numIOTiles(32)
    with pytest.raises(sim.OptionsError, match=r"Unsupported output mode for overlapped IO.*OutputMode\.Final, the "
                                               r"default of a training run"):
        sim.simulate(g, "ipu-mk2", o, training=True)
    with pytest.raises(sim.OptionsError, match=r"OutputMode\.Final, as set"):
        sim.simulate(g, "ipu-mk2", o.outputMode(sim.OutputMode.Final), training=True)


def test_phased_execution_runs_on_a_system_without_streaming_memory_with_the_weights_on_chip(capsys):
    """Phased execution puts the weights in streaming memory unless they are placed on chip (as PopTorch); a C600
    has none, so from the command line it runs only with ``--weights on-chip``, which the error names."""
    from sim.cli.main import main as cli
    argv = ["run", "--model", "bert-base", "--param", "num_layers=2", "--system", "c600", "--strategy", "serial-phased",
            "-q", "--json"]
    assert cli(argv) == 2
    assert "--weights on-chip" in capsys.readouterr().err
    assert cli(argv + ["--weights", "on-chip"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == "c600"


def test_weights_sharded_over_one_replica_are_noted_as_no_effect():
    """Replicated tensor sharding of the weights over a single replica shards nothing: the run says so, as it does
    for the optimizer state and the accumulators."""
    from sim.options import TensorLocationSettings
    import models
    o = sim.Options()
    o.TensorLocations.setWeightLocation(TensorLocationSettings().useReplicatedTensorSharding(True))
    run = sim.simulate(models.get("mlp"), "ipu-mk2", o, training=True, optimizer="adam")
    assert any(n.startswith("TensorLocations.setWeightLocation: replicated tensor sharding over 1 replica")
               for n in run.all_notes)
    assert run.cycle_count == sim.simulate(models.get("mlp"), "ipu-mk2", training=True, optimizer="adam").cycle_count
