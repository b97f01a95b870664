"""Replica-grouped weights (``<model>.W.replicaGrouping``, sim/poptorch/replica_grouping.py): PopTorch's own tests
of them (tests/replicated_graph_test.py), the per-replica graph and the group's gradient all-reduce."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sim.poptorch as poptorch  # noqa: E402
from sim.schedule.collectives import plan_collective  # noqa: E402

TENSOR_SHARDS, DATA_SHARDS = 4, 2


class ModelWithLoss(torch.nn.Module):
    def __init__(self, W_init):
        super().__init__()
        self.W = torch.nn.Parameter(W_init)

    def forward(self, X):
        Z = X @ self.W
        return Z, poptorch.identity_loss(Z**2, reduction="mean")


def _problem():
    random = np.random.RandomState(seed=100)
    X = random.normal(size=(24, 40)).astype(np.float32)
    W = random.normal(size=(40, 56)).astype(np.float32) * (5 * 8)**-0.5
    return X, W


@pytest.mark.parametrize("orthogonal_input", [True, False])
def test_per_replica_variables_train_as_the_whole_problem(orthogonal_input):
    """PopTorch's test_per_replica_variables: the weight split four ways over groups of two replicas and the data
    two ways, trained four SGD steps, gives the whole problem's losses and weights on the CPU (its tolerance)."""
    X, W_init = _problem()
    W = torch.nn.Parameter(torch.tensor(W_init))
    optim = torch.optim.SGD([W], lr=0.01)
    cpu_losses = []
    for _ in range(4):
        optim.zero_grad()
        loss = torch.mean((torch.tensor(X) @ W)**2)
        loss.backward()
        optim.step()
        cpu_losses.append(float(loss.detach()))

    grouped = torch.tensor(W_init.reshape(40, TENSOR_SHARDS, 56 // TENSOR_SHARDS).transpose(1, 0, 2)).contiguous()
    m = ModelWithLoss(grouped)
    input_type, weight_type = poptorch.CommGroupType.Consecutive, poptorch.CommGroupType.Orthogonal
    if orthogonal_input:
        input_type, weight_type = weight_type, input_type
    opts = poptorch.Options().replicationFactor(DATA_SHARDS * TENSOR_SHARDS)
    opts.inputReplicaGrouping(TENSOR_SHARDS, input_type)
    opts.outputMode(poptorch.OutputMode.All)
    pt_m = poptorch.trainingModel(m, optimizer=torch.optim.SGD(m.parameters(), lr=0.01), options=opts)
    pt_m.W.replicaGrouping(weight_type, DATA_SHARDS, poptorch.VariableRetrievalMode.OnePerGroup)
    data = torch.tensor(X).reshape(DATA_SHARDS, 12, 40)
    pt_losses = [float(torch.sum(pt_m(data)[1].detach())) / (DATA_SHARDS * TENSOR_SHARDS) for _ in range(4)]
    np.testing.assert_allclose(cpu_losses, pt_losses, atol=1e-6)
    np.testing.assert_allclose(W.detach().numpy(), m.W.detach().numpy().transpose(1, 0, 2).reshape(40, 56), atol=1e-6)

    # each replica holds its (40, 14) value; its gradient is all-reduced over its group of 2 only
    weight = pt_m.executable.graph.tensors["W"]
    stride = 4 if weight_type == poptorch.CommGroupType.Orthogonal else 1
    assert weight.shape == (40, 14) and weight.grad_collectives == (("all_reduce", stride, 2, 40 * 14 * 4),)
    trace = pt_m.simulation.trace
    reduce = trace[trace.name.str.startswith("gradient all-reduce")]
    system = pt_m.executable.system
    members = [0, stride]
    assert set(reduce.cycles) == {plan_collective(system, "all_reduce", 40 * 14 * 4, members, partition_ipus=8).cycles}


def test_no_grouping_gives_each_replica_its_own_value_and_state():
    """PopTorch's test_per_replica_variables_no_grouping: NoGrouping's value (and AdamW's state) per replica."""
    model = ModelWithLoss(torch.randn(4, 6))
    optimizer = poptorch.optim.AdamW(model.parameters(), 0.1)
    options = poptorch.Options()
    options.replication_factor = 4
    training_model = poptorch.trainingModel(model, options, optimizer=optimizer)
    training_model.W.replicaGrouping(poptorch.CommGroupType.NoGrouping, 0, poptorch.VariableRetrievalMode.OnePerGroup)
    training_model(torch.randn(4, 6))
    for _, v in optimizer.state_dict()["ipu_state"].items():
        assert v.shape[0] == 4
    weight = training_model.executable.graph.tensors["W"]
    assert weight.shape == (6,) and weight.grad_collectives == ()
    training_model.destroy()


def test_all_replicas_values_stay_equal_within_a_group():
    """VariableRetrievalMode.AllReplicas keeps a value per replica, each updated with its whole group's gradient:
    equal values in a group stay equal, and equal to the value per group that OnePerGroup keeps."""
    torch.manual_seed(4)
    per_group = torch.randn(2, 5, 3)
    x = torch.randn(4, 5)
    results = {}
    for mode, init in ((poptorch.VariableRetrievalMode.OnePerGroup, per_group),
                       (poptorch.VariableRetrievalMode.AllReplicas, per_group.repeat_interleave(2, dim=0))):
        model = ModelWithLoss(init.clone())
        tm = poptorch.trainingModel(model, poptorch.Options().replicationFactor(4),
                                    optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        tm.W.replicaGrouping(poptorch.CommGroupType.Consecutive, 2, mode)
        tm(x)
        results[mode] = model.W.detach()
    grouped, every = results.values()
    torch.testing.assert_close(every, grouped.repeat_interleave(2, dim=0))
    assert not torch.equal(grouped, per_group)


def test_inference_runs_each_replica_with_its_groups_value(tmp_path):
    W = torch.stack([torch.eye(3), 2 * torch.eye(3)])  # group 0 the identity, group 1 twice it
    model = ModelWithLoss(W)
    opts = poptorch.Options().replicationFactor(4)
    im = poptorch.inferenceModel(model, opts)
    im.W.replicaGrouping(poptorch.CommGroupType.Consecutive, 2, poptorch.VariableRetrievalMode.OnePerGroup)
    x = torch.ones(4, 3)
    z, _ = im(x)
    assert z.tolist() == [[1.0] * 3, [1.0] * 3, [2.0] * 3, [2.0] * 3]  # replicas 0, 1: group 0; 2, 3: group 1
    assert im.executable.graph.tensors["W"].shape == (3, 3)
    path = tmp_path / "grouped.poptorch"
    im.save(str(path))  # the grouping is the executable's, so a loaded model keeps it
    loaded = poptorch.load(str(path))
    assert loaded(x)[0].tolist() == z.tolist() and loaded.executable.graph.tensors["W"].shape == (3, 3)


def test_bad_groupings_are_errors():
    model = ModelWithLoss(torch.randn(3, 5, 2))
    im = poptorch.inferenceModel(model, poptorch.Options().replicationFactor(4))
    im.W.replicaGrouping(poptorch.CommGroupType.Orthogonal, 2, poptorch.VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match=r"replicaGrouping of 'W': its first dimension must hold one value per "
                                             r"group, 2 groups of 2 replicas \(Orthogonal over 4\), but the "
                                             r"tensor's shape is \(3, 5, 2\)"):
        im(torch.randn(4, 5))
    im = poptorch.inferenceModel(ModelWithLoss(torch.randn(2, 5, 2)), poptorch.Options().replicationFactor(4))
    im.W.replicaGrouping(poptorch.CommGroupType.Consecutive, 3, poptorch.VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match="replicaGrouping of 'W': replica group size 3 must be a whole number"):
        im(torch.randn(4, 5))
    scalar = ModelWithLoss(torch.tensor(1.0))
    im = poptorch.inferenceModel(scalar, poptorch.Options().replicationFactor(2))
    im.W.replicaGrouping(poptorch.CommGroupType.NoGrouping, 0, poptorch.VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match="Scalars cannot be passed as per-replica weight tensor values"):
        im(torch.randn(2))
    model = ModelWithLoss(torch.randn(2, 5, 2))
    opts = poptorch.Options().replicationFactor(4)
    opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useReplicatedTensorSharding(True))
    tm = poptorch.trainingModel(model, opts, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    tm.W.replicaGrouping(poptorch.CommGroupType.Consecutive, 2, poptorch.VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match="replicaGrouping with replicated tensor sharding is not modelled"):
        tm(torch.randn(4, 5))
