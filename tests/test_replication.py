"""Training with replication: symmetric replicas, the gradient all-reduce over the full ring,
scaling of ResNet-50 over PODs, and BERT-large with replicated tensor sharding (RTS)."""

from __future__ import annotations

import pytest

import models
import sim
from sim.schedule.collectives import plan_collective
from sim.options import TensorLocationSettings
from sim.program import Collective, leaves


def _resnet(replicas: int, system: str, micro_batch: int = 4, accumulation: int = 1):
    """ResNet-50 with its gradient all-reduces merged into one call, as Graphcore's ResNet configs
    run it (TF1 combining buffers, PyTorch mergeAllReduceCollectives), fed by a host process for
    every 2 replicas (their PopRun instances)."""
    o = sim.Options().replicationFactor(replicas).hostProcesses(max(1, replicas // 2))
    o._Popart.set("replicatedCollectivesSettings.mergeAllReduceCollectives", True)
    o.Training.gradientAccumulation(accumulation)
    return sim.simulate(models.get("resnet50", micro_batch=micro_batch), system, o, training=True,
                        optimizer="sgd_momentum")


@pytest.fixture(scope="module")
def resnet_runs():
    return {R: _resnet(R, f"ipu-pod{R}") for R in (16, 64, 256)}


def test_resnet50_micro_batch_20_fits_one_ipu_only_with_recomputation():
    """The issue's configuration: without recomputation it is out of memory (with its
    shortfall); with a checkpoint after every bottleneck block and availableMemoryProportion
    0.16, as Graphcore's ResNet-50 config (with its recompute_mode manual: RecomputeAll, explicitRecomputation),
    it fits, and recomputing costs compute."""
    o = sim.Options().replicationFactor(16)
    o._Popart.set("autoRecomputation", 4)
    o._Popart.set("explicitRecomputation", True)
    o.setAvailableMemoryProportion({"IPU0": 0.16})  # keys are IPUs of a replica, which has one
    with pytest.raises(sim.OutOfMemoryError, match="short by") as err:
        sim.compile(models.get("resnet50", micro_batch=20), "ipu-pod16", o, training=True, optimizer="sgd_momentum")
    assert err.value.ipu == 0 and err.value.shortfall_bytes > 0
    fits = sim.compile(models.get("resnet50", micro_batch=20, recompute_checkpoints="blocks"), "ipu-pod16", o,
                       training=True, optimizer="sgd_momentum")
    assert fits.memory[0].peak_tile_bytes <= fits.system.ipu.sram_bytes_per_tile
    recomputed = [op for s in fits.stages for op in s.recomputed]
    forward = [op for op in fits.graph.ops if op.pass_ == "forward"]
    # all but the checkpoints and the blocks' residual adds (the ReLU after each reads its own output for its
    # gradient, not the add's: ReluGradOp); with explicit recomputation the last segment is recomputed too
    assert 0.75 * len(forward) < len(recomputed) < len(forward)


def test_replicas_are_simulated_once_per_host_link(resnet_runs):
    for R, run in resnet_runs.items():
        ex = run.executable
        assert ex.simulated_replicas == [0, 1, 2, 3]  # the 4 IPUs behind one host link
        assert set(run.trace.ipu) == {0, 1, 2, 3}
        (allreduce,) = [c for c in leaves(ex.program) if isinstance(c, Collective)]
        assert allreduce.group_size == R and allreduce.op == "all_reduce"
        assert allreduce.ipus == (0, 1, 2, 3)
        assert (run.breakdown.sum(axis=1) == run.cycle_count).all()


def test_gradient_all_reduce_is_priced_over_the_full_ring(resnet_runs):
    for R, run in resnet_runs.items():
        ex = run.executable
        (allreduce,) = [c for c in leaves(ex.program) if isinstance(c, Collective)]
        plan = plan_collective(ex.system, "all_reduce", allreduce.nbytes, list(range(R)))
        assert (allreduce.algorithm, allreduce.phases) == (plan.algorithm, plan.phases)
        rows = run.trace[(run.trace.kind == "collective") & (run.trace.ipu == 0)]
        assert list(rows.cycles) == [plan.cycles]  # uncontended: the engine's time is the plan's
    algorithms = {R: next(c for c in leaves(run.executable.program) if isinstance(c, Collective)).algorithm
                  for R, run in resnet_runs.items()}
    assert algorithms[256] == "hierarchical"  # 4 POD64s


def test_resnet50_throughput_scales_and_all_reduce_share_grows(resnet_runs):
    sps = {R: run.samples_per_second for R, run in resnet_runs.items()}
    share = {R: run.breakdown.loc[0, "collective"] / run.cycle_count for R, run in resnet_runs.items()}
    assert 3.5 * sps[16] < sps[64] <= 4 * sps[16]
    assert 12 * sps[16] < sps[256] <= 16 * sps[16]
    assert 0 < share[16] < share[64] < share[256] < 0.5


def test_gradient_accumulation_amortises_the_all_reduce():
    one = _resnet(64, "ipu-pod64", accumulation=1)
    many = _resnet(64, "ipu-pod64", accumulation=16)
    share = [r.breakdown.loc[0, "collective"] / r.cycle_count for r in (one, many)]
    assert share[1] < share[0] / 8
    assert many.samples_per_second > one.samples_per_second


def test_bow_pods_are_faster_per_replica():
    mk2 = _resnet(64, "ipu-pod64")
    bow = _resnet(64, "bow-pod64")
    assert bow.samples_per_second > mk2.samples_per_second


# --- BERT-large, 4 replicas x 4 pipeline stages, RTS ------------------------------------------

def _bert(rts: bool, layers=(3, 7, 7, 7), **params):
    g = models.get("bert-large", micro_batch=2, seq_len=128, layers_per_ipu=list(layers), num_layers=sum(layers),
                   **params)
    o = sim.Options().replicationFactor(4)
    o.Training.gradientAccumulation(16)
    if rts:
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True))
    return sim.simulate(g, "ipu-pod16", o, training=True, optimizer="lamb")


def _collective_kinds(run) -> set[str]:
    return {n.split(" (")[0] for n in run.trace[run.trace.kind == "collective"].name}


def test_bert_large_pod16_fits_only_with_rts():
    """The issue's configuration: without RTS the LAMB state does not fit on IPU 0 (nor on the
    others: the error names the IPU short by most)."""
    with pytest.raises(sim.OutOfMemoryError) as err:
        _bert(rts=False)
    run = _bert(rts=True)
    capacity = run.memory[0]["tile_capacity_bytes"]
    assert err.value.shortfalls[0] > 0 and err.value.shortfall_bytes == max(err.value.shortfalls.values())
    assert all(m["peak_tile_bytes"] <= capacity for m in run.memory.values())  # needs > capacity without RTS
    # with RTS each LAMB norm is of a shard: one all-reduce of its fp32 value per norm; the biases
    # and layer norms (under PopART's 8192 elements) are not sharded: their gradients all-reduced
    assert _collective_kinds(run) == {"gradient reduce-scatter", "LAMB norm all-reduce", "weight all-gather",
                                      "gradient all-reduce"}
    assert run.executable.strategy == "pipelined" and run.executable.ipus_per_replica == 4


def test_rts_shards_only_tensors_of_8192_elements_or_more():
    """PopART's default minElementsForReplicatedTensorSharding (8192, sessionoptions.hpp): a smaller
    tensor's state stays whole on every replica and its gradient is all-reduced; setting the minimum
    to 0 shards every tensor."""
    def run(minimum=None):
        g = models.get("bert-base", micro_batch=2, seq_len=32, num_layers=1)
        o = sim.Options().replicationFactor(2)
        where = TensorLocationSettings().useReplicatedTensorSharding(True)
        if minimum is not None:
            where.minElementsForReplicatedTensorSharding(minimum)
        o.TensorLocations.setOptimizerLocation(where)
        return sim.simulate(g, "ipu-m2000", o, training=True, optimizer="lamb")
    default, everything = run(), run(0)
    state = {t.name: t.shards for t in default.executable.graph.tensors.values() if t.role == "state"}
    assert state["embeddings/token_type_embeddings/lamb_state0"] == 1  # 1,536 elements
    assert state["embeddings/word_embeddings/lamb_state0"] == 2
    assert all(t.shards == 2 for t in everything.executable.graph.tensors.values() if t.role == "state")
    assert "gradient all-reduce" in _collective_kinds(default)
    assert "gradient all-reduce" not in _collective_kinds(everything)


def test_rts_lowers_memory_per_tile_and_swaps_the_all_reduce():
    """A smaller vocabulary so both fit: RTS shards the LAMB state over the 4 replicas."""
    off = _bert(rts=False, layers=(1, 2, 2, 2), vocab=8192)
    on = _bert(rts=True, layers=(1, 2, 2, 2), vocab=8192)
    for ipu in range(4):
        assert on.memory[ipu]["peak_tile_bytes"] < off.memory[ipu]["peak_tile_bytes"]
        assert on.memory[ipu]["always_live_bytes"] < off.memory[ipu]["always_live_bytes"]
    assert _collective_kinds(off) == {"gradient all-reduce"}
    assert _collective_kinds(on) == {"gradient reduce-scatter", "LAMB norm all-reduce", "weight all-gather",
                                     "gradient all-reduce"}  # the tensors under 8192 elements
    names = set(on.trace[on.trace.kind == "collective"].name)
    for what in ("gradient reduce-scatter", "weight all-gather"):  # one per tensor on every IPU
        assert all(any(n.startswith(f"{what} (IPU {i}, ") for n in names) for i in range(4))


# --- trace identity: which replica each row stands for ----------------------------------------
def test_trace_says_which_replicas_each_row_stands_for():
    """8 replicas of a 2-IPU pipeline on a POD16: the replicas behind one host link are
    simulated, the others by symmetry. Each trace row names its IPU's replica and how many
    replicas it stands for; the gradient all-reduce has a row on every simulated IPU."""
    o = sim.Options().replicationFactor(8)
    o.Training.gradientAccumulation(6)
    graph = models.get("bert-base", micro_batch=1, num_layers=2, layers_per_ipu=[1, 1])
    run = sim.simulate(graph, "ipu-pod16", o, training=True)
    ex = run.executable
    t = run.trace
    simulated = ex.simulated_replicas
    assert 1 < len(simulated) < 8
    assert set(t["replica"]) == set(simulated)
    assert (t["replica"] == t["ipu"] // 2).all()
    assert (t["represents"] == 8 // len(simulated)).all()
    reduce_rows = t[t["kind"] == "collective"]
    assert set(reduce_rows["ipu"]) == set(ex.ipus)  # every simulated IPU takes part
    first = reduce_rows.groupby("name")["ipu"].apply(sorted).iloc[0]
    assert len(first) > 1
    everyone = run.trace_all_replicas()
    assert set(everyone["replica"]) == set(range(8)) and set(everyone["ipu"]) == set(range(16))
    assert len(everyone) == len(t) * 8 // len(simulated)
    assert (everyone["represents"] == 1).all()
