"""The weight update's cross-replica collectives as PopART runs them: one GCL call per tensor,
one after another over the whole replica, unless ``replicatedCollectivesSettings`` merges that
kind into one call (sim/schedule/context.py ``Context.collectives``, sim/schedule/collectives.py
``per_tensor``; PopART's MergeCollectivesTransform, willow/src/transforms/mergecollectives.cpp,
and the sync groups of PopART user guide 1.3.35, 7.1)."""

from __future__ import annotations

import pytest

import models
import sim
from sim.errors import OptionsError
from sim.options import TensorLocationSettings
from sim.program import Collective, Repeat, Sequence
from sim.schedule.collectives import plan_collective
from sim.schedule.stages import split_stages

MERGE = "replicatedCollectivesSettings.merge{}Collectives"


def _options(*merged: str) -> sim.Options:
    """2 replicas of a 2-IPU BERT pipeline, LAMB with its state sharded (RTS)."""
    o = sim.Options().replicationFactor(2).enableSyntheticData(True)
    o.Training.gradientAccumulation(6)
    o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True)
                                        .minElementsForReplicatedTensorSharding(0))  # every tensor, small ones too
    for kind in merged:
        o._Popart.set(MERGE.format(kind), True)
    return o


def _graph():
    return models.get("bert-base", micro_batch=1, num_layers=2, layers_per_ipu=[1, 1], seq_len=16, hidden=64,
                      heads=4, vocab=1000)


def _weight_update(ex) -> Sequence:
    def walk(item):
        if isinstance(item, Sequence) and item.name == "weight update":
            yield item
        for child in getattr(item, "items", []) or ([item.body] if isinstance(item, Repeat) else []):
            yield from walk(child)
    (seq,) = walk(ex.program)
    return seq


def _calls(seq: Sequence, op: str) -> list[tuple[Collective, int]]:
    """(collective, how many times it runs) of kind ``op`` in the weight update."""
    out = []
    for item in seq.items:
        if isinstance(item, Repeat):
            (body,) = item.body.items
            if body.op == op:
                out.append((body, item.count))
        elif isinstance(item, Collective) and item.op == op:
            out.append((item, 1))
    return out


@pytest.fixture(scope="module")
def runs():
    g = _graph()
    return {name: sim.simulate(g, "ipu-pod16", _options(*merged), training=True, optimizer="lamb")
            for name, merged in (("default", ()), ("merged", ("ReduceScatter", "AllGather", "AllReduce")))}


def test_default_is_one_call_per_weight_holding_every_ipu(runs):
    ex = runs["default"].executable
    seq = _weight_update(ex)
    _, updates = split_stages(ex.graph, True, recompute=True)
    weights = {p: [ex.graph.tensors[w].nbytes for w in dict.fromkeys(op.attrs.get("weight", op.inputs[0])
                                                                     for op in updates if op.ipu == p)]
               for p in range(2)}
    assert all(weights.values())
    for op in ("reduce_scatter", "all_gather"):
        calls = _calls(seq, op)
        assert sum(n for _, n in calls) == sum(len(w) for w in weights.values())  # one per weight
        for coll, _ in calls:
            assert coll.ipus == (0, 1, 2, 3)  # every IPU of both replicas waits in its syncs
            # priced over the 2 replicas' IPUs at the position, each step waiting for a sync of all 4
            plan = plan_collective(ex.system, op, coll.nbytes, [coll.ipus[0] % 2, 2 + coll.ipus[0] % 2],
                                   partition_ipus=4)
            assert coll.group_size == 2 and coll.phases == plan.phases
        assert sorted(c.nbytes for c, n in calls for _ in range(n)) == sorted(sum(weights.values(), []))
    norms = _calls(seq, "all_reduce")  # 2 LAMB norms per weight, a call each
    assert sum(n for _, n in norms) == 2 * sum(len(w) for w in weights.values())
    assert {c.nbytes for c, _ in norms} == {4}


def test_unmerged_collectives_never_overlap(runs):
    t = runs["default"].trace
    rows = t[t.kind == "collective"].drop_duplicates("start").sort_values("start")
    assert len(rows) > 10
    assert (rows.start.iloc[1:].to_numpy() >= rows.end.iloc[:-1].to_numpy()).all()


def test_merged_kinds_are_one_call_per_ipu_position(runs):
    ex = runs["merged"].executable
    seq = _weight_update(ex)
    for op in ("reduce_scatter", "all_gather", "all_reduce"):
        calls = _calls(seq, op)
        assert [n for _, n in calls] == [1, 1]
        assert sorted(c.ipus for c, _ in calls) == [(0, 2), (1, 3)]  # positions side by side
    default = _weight_update(runs["default"].executable)
    for op in ("reduce_scatter", "all_gather"):
        assert sum(c.nbytes * n for c, n in _calls(default, op)) == sum(c.nbytes for c, _ in _calls(seq, op))
    assert runs["merged"].cycle_count < runs["default"].cycle_count
    assert "merge" not in " ".join(runs["merged"].executable.notes)  # modelled: not reported as ignored


def test_merge_setting_must_be_a_bool():
    o = _options()
    o._Popart.set(MERGE.format("AllReduce"), "yes")
    with pytest.raises(OptionsError, match="mergeAllReduceCollectives = 'yes': expected True or False"):
        sim.compile(_graph(), "ipu-pod16", o, training=True, optimizer="lamb")
