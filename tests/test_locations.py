"""TensorLocations: weights and optimizer state in streaming memory cost load/store traffic."""

import models
import sim
from sim.options import TensorLocationSettings
from sim.program import RemoteCopy, leaves


def _run(weights_off_chip: bool, training: bool = False) -> sim.Run:
    o = sim.Options().deviceIterations(2)
    if weights_off_chip:
        o.TensorLocations.setWeightLocation(TensorLocationSettings().useOnChipStorage(False))
    return sim.simulate(models.get("bert-base", micro_batch=2, num_layers=2), "ipu-mk2", o, training=training)


def test_off_chip_weights_are_loaded_each_time_they_are_used():
    """Off chip, the weights leave tile memory and are loaded from streaming memory every
    micro-batch, at the configured streaming-memory bandwidth."""
    on, off = _run(False), _run(True)
    assert off.memory[0]["peak_tile_bytes"] < on.memory[0]["peak_tile_bytes"]
    assert on.breakdown.loc[0, "remote_io"] == 0
    graph = off.executable.graph
    weight_bytes = sum(t.nbytes for t in graph.weights())
    loads = [c for c in leaves(off.executable.program) if isinstance(c, RemoteCopy)]
    assert sum(c.nbytes for c in loads) == weight_bytes  # once per micro-batch
    system = off.executable.system
    per_load = system.streaming_memory.latency_cycles + system.seconds_to_cycles(
        weight_bytes / system.streaming_memory.bytes_per_s_per_ipu)
    assert off.breakdown.loc[0, "remote_io"] == 2 * per_load  # two device iterations
    assert off.cycle_count == on.cycle_count + 2 * per_load


def test_off_chip_weights_in_training_are_stored_after_the_update():
    run = _run(True, training=True)
    kinds = {(c.direction, c.name) for c in leaves(run.executable.program) if isinstance(c, RemoteCopy)}
    assert ("load", "stage 0 load weights") in kinds
    assert ("store", "store optimizer outputs") in kinds


def test_off_chip_accumulators_move_every_micro_batch():
    """Gradient accumulators in streaming memory are loaded before and stored after each
    micro-batch's backward pass (as well as read by the update)."""
    o = sim.Options()
    o.Training.gradientAccumulation(4)
    o.TensorLocations.setAccumulatorLocation(TensorLocationSettings().useOnChipStorage(False))
    run = sim.simulate(models.get("bert-base", micro_batch=2, num_layers=2), "ipu-mk2", o, training=True)
    accum = sum(t.nbytes for t in run.executable.graph.tensors.values() if t.role == "accumulator")
    stores = [c for c in leaves(run.executable.program) if isinstance(c, RemoteCopy) and c.name.endswith("accumulators")]
    assert [c.nbytes for c in stores] == [accum]  # in the accumulation loop's body, run 4 times
    trace = run.trace
    assert (trace["name"] == stores[0].name).sum() == 4


def test_state_locations_with_nothing_to_act_on_are_noted():
    """RTS over one replica, or any optimizer-state setting in inference, changes nothing; the
    run's notes say so rather than accepting it silently."""
    import models
    import sim
    from sim.options import TensorLocationSettings
    rts = TensorLocationSettings().useReplicatedTensorSharding()
    one = sim.Options()
    one.TensorLocations.setOptimizerLocation(rts)
    notes = sim.simulate(models.get("mlp"), "ipu-mk2", one, training=True, optimizer="adam").executable.notes
    assert "TensorLocations.setOptimizerLocation: replicated tensor sharding over 1 replica shards nothing; " \
           "no effect" in notes
    two = sim.Options().replicationFactor(2)
    two.TensorLocations.setOptimizerLocation(rts)
    assert "TensorLocations.setOptimizerLocation: no optimizer state in inference; no effect" in \
        sim.simulate(models.get("mlp"), "ipu-m2000", two).executable.notes
    assert not [n for n in sim.simulate(models.get("mlp"), "ipu-m2000", two, training=True,
                                        optimizer="adam").executable.notes if "TensorLocations" in n]



def test_settings_with_nothing_to_act_on_are_noted_and_change_nothing():
    """Each setting below has nothing to act on in its run (no optimizer state, no accumulators, no
    norm, one IPU): the cycles are those of the run without it, and a note says so."""
    import models
    import sim
    from sim.options import PipelineCopies, TensorLocationSettings
    from sim.strategy import SyncPattern

    def run(options, system="ipu-mk2", training=True, optimizer="sgd"):
        return sim.simulate(models.get("mlp"), system, options, training=training, optimizer=optimizer)

    plain = run(sim.Options()).cycle_count
    off_chip = sim.Options()
    off_chip.TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False))
    accumulators = sim.Options()
    accumulators.TensorLocations.setAccumulatorLocation(TensorLocationSettings().useOnChipStorage(False))
    cases = [
        (off_chip, "sgd", "TensorLocations.setOptimizerLocation: optimizer sgd keeps no state; no effect"),
        (accumulators, "sgd",
         "TensorLocations.setAccumulatorLocation: gradient accumulation 1 keeps no accumulators; no effect"),
        (sim.Options(), sim.Optimizer("sgd", "float16"), "optimizer sgd keeps no state: its state dtype float16 has no "
                                                         "effect"),
        (sim.Options(), sim.Optimizer("sgd", accum_dtype="float16"),
         "gradient accumulators float16: gradient accumulation 1 keeps no accumulators; no effect"),
        (sim.Options().enableStableNorm(True), "sgd",
         "enableStableNorm: the model has no batch, group or layer norm; no effect"),
        (sim.Options().syncPattern(SyncPattern.ReplicaAndLadder), "sgd",
         "syncPattern ReplicaAndLadder: a replica of one IPU syncs with the host alone under every pattern; no effect"),
        (sim.Options().pipelineCopies(PipelineCopies.PerStage), "sgd",
         "pipelineCopies PerStage: a model on one IPU has no inter-IPU copies; no effect"),
    ]
    for options, optimizer, note in cases:
        r = run(options, optimizer=optimizer)
        assert note in r.executable.notes
        assert r.cycle_count == plain, note
    rounded = run(sim.Options().replicationFactor(3).autoRoundNumIPUs(True), system="ipu-pod16")
    assert ("autoRoundNumIPUs: 1 IPU(s) per replica x 3 replica(s) = 3 IPUs, rounded up to 4; 1 of them idle"
            in rounded.executable.notes)
    # where the setting has something to act on, no such note
    momentum = run(off_chip, optimizer="sgd_momentum").executable.notes
    assert not [n for n in momentum if "keeps no" in n]
