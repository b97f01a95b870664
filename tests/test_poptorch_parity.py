"""sim.poptorch against PopTorch 3.4's own code (graphcore/poptorch sdk-release-3.4): options that
were accepted and then ignored, checks PopTorch makes, values and shapes it returns.

Each test names the PopTorch (or PopART) source it follows.
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

import sim  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402
from sim.poptorch import MatMulSerializationMode as Serial  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


class SerialMatMul(torch.nn.Module):
    def __init__(self, mode, factor, keep=False, export=False):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(256, 512))
        self.mode, self.factor, self.keep, self.export = mode, factor, keep, export

    def forward(self, x):
        if self.export and x.dim() == 2:  # Python control flow on a shape: torch.fx fails, torch.export captures
            x = x * 1
        return poptorch.serializedMatMul(x, self.w, self.mode, self.factor, self.keep)


def _serial(mode, factor, keep=False, dtype=torch.float32, export=False):
    net = SerialMatMul(mode, factor, keep, export).to(dtype)
    model = poptorch.inferenceModel(net, poptorch.Options().logCycleCount(True))
    x = torch.randn(128, 256, dtype=dtype)
    out = model(x)
    return model, out, x @ net.w


@pytest.mark.parametrize("method", ["torch.fx", "torch.export"])
@pytest.mark.parametrize("mode, kind", [(Serial.InputChannels, "concat"), (Serial.ReducingDim, "add"),
                                        (Serial.OutputChannels, "concat")])
def test_serialized_matmul_is_factor_matmuls_of_slices(mode, kind, method):
    """PopART's SerializeMatMuls (willow/src/transforms/serializematmuls.cpp): ``factor`` matmuls
    of slices of LHS [M, K] / RHS [K, N] (input channels M, reducing dim K, output channels N),
    their outputs concatenated or, for the reducing dim, added. Each piece is its own plan, so
    the serialised matmul costs more cycles than the one matmul. The same when torch.export captures
    the model (Hugging Face's BERT, whose SerializedLinear decoder Graphcore's example serialises)."""
    model, out, expected = _serial(mode, 4, export=method == "torch.export")
    assert f"graph captured with {method}" in model.executable.notes
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)
    ops = model.executable.graph.ops
    assert sum(op.kind == "matmul" for op in ops) == 4
    assert sum(op.kind == kind for op in ops) == (3 if kind == "add" else 1)
    plain, _, _ = _serial(Serial.Disabled, 0)
    assert sum(op.kind == "matmul" for op in plain.executable.graph.ops) == 1
    assert model.cycleCount() > plain.cycleCount()


def test_serialized_matmul_keep_precision_sums_in_float():
    """``keep_precision`` with float partials (PopART's keepPrecision): the pieces of a half
    matmul over the reducing dim and their sum are float32, cast back once."""
    model, _, _ = _serial(Serial.ReducingDim, 2, keep=True, dtype=torch.half)
    g = model.executable.graph
    pieces = [op for op in g.ops if op.kind == "matmul"]
    assert {g.tensors[op.outputs[0]].dtype for op in pieces} == {"float32"}
    assert sum(op.kind == "cast" for op in g.ops) == 1


def test_serialized_matmul_factor_must_divide():
    with pytest.raises(poptorch.Error, match="factor 3 does not divide the output channels dimension"):
        _serial(Serial.OutputChannels, 3)


@pytest.mark.parametrize("version, system", [(1, "ipu-mk1-c2"), (2, "ipu-mk2"), (21, "c600")])
def test_offline_target_version_chooses_the_system(version, system):
    """``useOfflineIpuTarget(ipu_version)``: 1 Mk1, 2 Mk2, 21 Mk2 with FP8 (options.py)."""
    model = poptorch.inferenceModel(torch.nn.Linear(4, 3), poptorch.Options().useOfflineIpuTarget(version))
    model.compile(torch.ones(2, 4))
    assert model.executable.system.name == system
    with pytest.raises(AssertionError, match="ipu_version 3 is not one of"):
        poptorch.Options().useOfflineIpuTarget(3)


class Printed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = poptorch.ipu_print_tensor(self.fc(x), "y", digits=1)
        with poptorch.MultiConv().availableMemoryProportions(0.3):
            y = y * 2
        return y, poptorch.identity_loss(y.sum(), "none")


def test_ipu_print_tensor_prints_its_gradient_and_an_empty_multiconv_changes_nothing(capsys):
    net = Printed()
    model = poptorch.trainingModel(net, poptorch.Options(), torch.optim.SGD(net.parameters(), lr=0.1))
    model(torch.ones(2, 4))
    printed = capsys.readouterr().out
    assert "y: tensor(" in printed
    assert "y gradient: tensor([[2., 2., 2.]," in printed  # d(2y.sum())/dy
    # MultiConv is modelled (tests/test_multiconv.py); with no convolution inside it joins nothing
    assert not any("MultiConv" in n for n in model.executable.notes)
    assert not any("multiconv" in op.attrs for op in model.executable.graph.ops)


def test_multiconv_and_set_available_memory_check_their_arguments():
    """PopTorch's MultiConv setters (ops.py) and PopART's proportion range (0, 1]."""
    with pytest.raises(AssertionError, match="Invalid available memory proportion!"):
        poptorch.MultiConv().availableMemoryProportions(1)
    with pytest.raises(ValueError, match="Invalid partials types"):
        poptorch.MultiConv().partialsTypes(torch.int32)
    poptorch.MultiConv().availableMemoryProportions([0.2, 0.3]).partialsTypes([torch.half, torch.float])

    class Net(torch.nn.Module):
        def forward(self, x):
            return poptorch.set_available_memory(x @ x, 1.5)

    with pytest.raises(poptorch.Error, match=r"availableMemoryProportion must be in \(0,1\], got 1.5"):
        poptorch.inferenceModel(Net())(torch.ones(4, 4))


def test_input_replica_grouping_checks():
    """options.py ``inputReplicaGrouping``: the size divides replicationFactor; NoGrouping is
    groups of one; All is refused. Checked again at the call if replicationFactor changed."""
    with pytest.raises(sim.OptionsError, match="input_group_size 2 must be a factor of replicationFactor"):
        poptorch.Options().inputReplicaGrouping(2, poptorch.CommGroupType.Consecutive)
    with pytest.raises(sim.OptionsError, match="must be CommGroupType.Consecutive, Orthogonal or NoGrouping"):
        poptorch.Options().replicationFactor(4).inputReplicaGrouping(4, poptorch.CommGroupType.All)
    o = poptorch.Options().replicationFactor(4).inputReplicaGrouping(4, poptorch.CommGroupType.NoGrouping)
    assert (o.input_group_size, o.input_cgt) == (1, poptorch.CommGroupType.Consecutive)
    o = poptorch.Options().replicationFactor(4).inputReplicaGrouping(2, poptorch.CommGroupType.Consecutive)
    o.replicationFactor(3)
    with pytest.raises(poptorch.Error, match="input_group_size 2 must be a factor of replicationFactor \\(3\\)"):
        poptorch.inferenceModel(torch.nn.Linear(4, 3), o)(torch.ones(6, 4))


def test_dataloader_freezes_its_options():
    """``DataLoader.__init__`` calls ``options._freeze()``: the batch it makes is sized from them."""
    o = poptorch.Options().deviceIterations(2)
    poptorch.DataLoader(o, torch.utils.data.TensorDataset(torch.ones(16, 4)), batch_size=2)
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        o.deviceIterations(4)


def test_tensor_location_settings_values():
    """``useOnChipStorage(None)`` is undefined again, not off chip; the flags take bools."""
    where = poptorch.TensorLocationSettings().useOnChipStorage(False).useOnChipStorage(None)
    assert where.on_chip is None and not where.off_chip(10 ** 6)
    with pytest.raises(sim.OptionsError, match="useIOTilesToLoad expects True or False"):
        poptorch.TensorLocationSettings().useIOTilesToLoad("yes")


def test_io_tile_loads_are_named_as_not_modelled():
    o = poptorch.Options()
    o.TensorLocations.setWeightLocation(poptorch.TensorLocationSettings().useOnChipStorage(False)
                                        .useIOTilesToLoad(True))
    net = torch.nn.Linear(64, 64)
    model = poptorch.trainingModel(_Loss(net), o,
                                   torch.optim.SGD(net.parameters(), lr=0.1))
    model(torch.ones(2, 64))
    assert any(n.startswith("TensorLocations weight location useIOTilesToLoad: accepted, no modelled effect")
               for n in model.executable.notes)


class _Loss(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return poptorch.identity_loss(self.net(x).square().mean(), "none")


def test_updatable_named_buffers_reach_the_popart_options():
    model = poptorch.inferenceModel(torch.nn.BatchNorm1d(4), poptorch.Options().updatableNamedBuffers(["running_mean"]))
    model(torch.ones(2, 4))
    model.copyNamedBuffersToDevice()  # PopTorch's check reads _Popart.options
    assert model.options._Popart.options["updatableNamedBuffers"] == ["running_mean"]


def test_options_file_takes_chains_and_constructors(tmp_path):
    """PopTorch runs each line as ``options.<line>`` (_options_config.py)."""
    path = tmp_path / "opts.txt"
    path.write_text("deviceIterations(2).replicationFactor(2)\n"
                    "setExecutionStrategy(poptorch.ShardedExecution())\n"
                    "TensorLocations.setWeightLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))\n"
                    "outputMode(OutputMode.Sum)\n")
    o = poptorch.Options().loadFromFile(path)
    assert (o.device_iterations, o.replication_factor) == (2, 2)
    assert isinstance(o.execution_strategy, poptorch.ShardedExecution)
    assert o.TensorLocations.locations["weight"].on_chip is False
    assert o.output_mode == poptorch.OutputMode.Sum
    path.write_text("deviceIterations(__import__('os'))\n")
    with pytest.raises(poptorch.ConfigFileError, match="opts.txt:1: unknown option '__import__'"):
        poptorch.Options().loadFromFile(path)


def test_enum_values_version_and_names_not_provided():
    assert [m.value for m in poptorch.OutputMode] == [0, 1, 2, 3, 4]  # python/enums.py
    assert poptorch.OutputMode(2) is poptorch.OutputMode.All
    assert poptorch.__version__.startswith("3.4.")
    o = poptorch.Options().maxRepeatLogs(None).useIpuId(3)
    assert o.max_repeat_logs == (1 << 64) - 1 and o.exists("ipu_id")
    assert o.Training.accumulation_and_replication_reduction_type == poptorch.ReductionType.Mean


def test_save_makes_its_folder_and_takes_a_folder(tmp_path, caplog):
    """``PoplarExecutor.save``: the destination folder is made; a folder means model.poptorch in it."""
    model = poptorch.inferenceModel(torch.nn.Linear(4, 3))
    model.compile(torch.ones(2, 4))
    model.save(str(tmp_path / "new" / "m.poptorch"))
    assert (tmp_path / "new" / "m.poptorch").is_file()
    with caplog.at_level(logging.WARNING, logger="poptorch"):
        model.save(str(tmp_path / "new"))
    assert (tmp_path / "new" / "model.poptorch").is_file()
    assert "is a directory, saving model to" in caplog.text


def test_executor_attributes_are_the_models():
    """PoplarExecutor has no ``training`` of its own: ``__getattr__`` gives the wrapped module's."""
    net = torch.nn.Linear(4, 3).eval()
    assert poptorch.inferenceModel(net).training is False
    assert poptorch.inferenceModel(net.train()).training is True


def test_a_constant_output_comes_back_once():
    """popartBatchDimForAnchor is 1 for a host-side constant: it is not repeated per micro-batch."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x), torch.tensor([1.0, 2.0])

    y, c = poptorch.inferenceModel(Net(), poptorch.Options().deviceIterations(3))(torch.ones(6, 4))
    assert (tuple(y.shape), tuple(c.shape)) == ((6, 3), (2,))


def test_serialized_matmul_of_a_rank_3_input_by_a_rank_2_weight():
    """GPT-2's LM head: [B, S, H] by [H, V], serialised over the output channels; PopART's MatMulPattern
    brings the weight to rank 3 (group 1) before SerializeMatMuls, so PopTorch accepts it."""
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(256, 64))

        def forward(self, x):
            return poptorch.serializedMatMul(x, self.weight.t(), Serial.OutputChannels, 4)

    net = Head()
    x = torch.randn(2, 32, 64)
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(x), x @ net.weight.t(), rtol=1e-4, atol=1e-3)
    g = model.executable.graph
    pieces = [op for op in g.ops if op.kind == "matmul"]
    assert len(pieces) == 4 and {g.tensors[op.outputs[0]].shape for op in pieces} == {(2, 32, 64)}
