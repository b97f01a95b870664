"""Replicated tensor sharding over a sharding domain smaller than the replicas.

PopART splits a sharded tensor over the replicas of its ``shardingDomain`` (a CommGroup). When
that is smaller than the replicas, each gradient is reduce-scattered within the domain, its
shard all-reduced across the domains (the complementary group: StreamingMemoryOpInserter,
getComplementCommGroupWithSuperSet), the optimizer updates its 1/domain shard and the weights are
all-gathered within the domain. PopTorch sets CommGroup(Consecutive, local replicas) whenever
several processes run (popart_compiler Compiler.cpp), as the MLPerf BERT script does under poprun.
(sim/options.py ``Options.sharding_domain``, sim/schedule/context.py ``Context.weight_update``.)
"""

from __future__ import annotations

import math

import pytest

import sim
import sim.poptorch as poptorch
from sim.errors import OptionsError
from sim.options import CommGroupType, TensorLocationSettings
from tests.test_outer_fragment_collectives import _calls, _graph, _weight_update

KEY = sim.Options.SHARDING_DOMAIN_KEYS["optimizer"]


def _options(domain=None, replicas: int = 4) -> sim.Options:
    """``replicas`` replicas of a 2-IPU BERT pipeline, LAMB state sharded over ``domain``."""
    o = sim.Options().replicationFactor(replicas).enableSyntheticData(True)
    o.Training.gradientAccumulation(6)
    o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True)
                                        .minElementsForReplicatedTensorSharding(0))  # every tensor, small ones too
    if domain is not None:
        o._Popart.set(KEY, domain)
    return o


def test_domain_defaults_to_all_replicas_and_follows_the_comm_group():
    assert _options().sharding_domain("optimizer") == (1, 4)
    assert _options((CommGroupType.Consecutive, 2)).sharding_domain("optimizer") == (1, 2)
    assert _options((CommGroupType.Orthogonal, 2)).sharding_domain("optimizer") == (2, 2)
    assert _options((CommGroupType.All, 0)).sharding_domain("optimizer") == (1, 4)
    assert _options((CommGroupType.NoGrouping, 0)).sharding_domain("optimizer") == (1, 1)
    assert KEY not in {k.removeprefix("_Popart.") for k in _options((CommGroupType.Consecutive, 2)).unmodelled()}


def test_several_poptorch_processes_shard_over_each_process_replicas():
    o = poptorch.Options().replicationFactor(4)
    o.Distributed.configureProcessId(1, 2)
    assert o.total_replicas() == 8
    assert o.sharding_domain("optimizer") == (1, 4)  # Compiler.cpp: CommGroup(Consecutive, replicatedGraphCount)
    one = poptorch.Options().replicationFactor(4)
    one.Distributed.disable()
    assert one.sharding_domain("optimizer") == (1, 4)


@pytest.mark.parametrize("value", [(CommGroupType.Consecutive, 3), "Consecutive", (CommGroupType.Consecutive,)])
def test_a_domain_that_does_not_divide_the_replicas_or_is_not_a_pair_is_an_error(value):
    with pytest.raises(OptionsError, match="shardingDomain"):
        _options(value).sharding_domain("optimizer")


@pytest.fixture(scope="module")
def runs():
    g = _graph()
    return {name: sim.simulate(g, "ipu-pod16", _options(domain), training=True, optimizer="lamb")
            for name, domain in (("all", None), ("consecutive", (CommGroupType.Consecutive, 2)),
                                 ("orthogonal", (CommGroupType.Orthogonal, 2)))}


def _weights(ex) -> list[int]:
    return [t.nbytes for t in ex.graph.tensors.values() if t.role == "weight"]


def test_state_is_split_over_the_domain(runs):
    for name, (stride, size) in (("all", (1, 4)), ("consecutive", (1, 2)), ("orthogonal", (2, 2))):
        states = [t for t in runs[name].executable.graph.tensors.values() if t.role == "state"]
        assert states and {(t.shard_stride, t.shards) for t in states} == {(stride, size)}, name


def test_reduce_scatter_and_all_gather_stay_in_the_domain_and_shards_are_all_reduced_across(runs):
    for name in ("consecutive", "orthogonal"):
        ex = runs[name].executable
        seq = _weight_update(ex)
        for op in ("reduce_scatter", "all_gather"):
            calls = _calls(seq, op)
            assert sum(n for _, n in calls) == len(_weights(ex))  # one per weight
            assert {c.group_size for c, _ in calls} == {2}
        shards = [(c, n) for c, n in _calls(seq, "all_reduce") if c.name.startswith("gradient shard")]
        assert sum(n for _, n in shards) == len(_weights(ex))
        assert {c.group_size for c, _ in shards} == {2}
        # each shard all-reduce carries half a gradient
        assert sorted(c.nbytes for c, n in shards for _ in range(n)) == sorted(math.ceil(b / 2) for b in _weights(ex))
        norms = [c for c, _ in _calls(seq, "all_reduce") if c.name.startswith("LAMB norm")]
        assert norms and {c.group_size for c in norms} == {2}


def test_all_replicas_need_no_shard_all_reduce(runs):
    seq = _weight_update(runs["all"].executable)
    assert {c.group_size for c, _ in _calls(seq, "reduce_scatter")} == {4}
    assert not [c for c, _ in _calls(seq, "all_reduce") if c.name.startswith("gradient shard")]


def test_a_smaller_domain_keeps_more_state_per_ipu(runs):
    def state_bytes(run):
        return sum(m.by_role.get("state", 0) for m in run.executable.memory.values())
    assert state_bytes(runs["consecutive"]) > state_bytes(runs["all"])
