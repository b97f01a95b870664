"""sim.poptorch: options (PopTorch's names, checks and error texts), the system choice, the
DataLoader, and PopDist's environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import sim  # noqa: E402
import sim.popdist as popdist  # noqa: E402
import sim.popdist.poptorch  # noqa: E402,F401
import sim.poptorch as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    """The tests expect the default system choice and a single process."""
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


class Net(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = torch.nn.Linear(width, 4)

    def forward(self, x):
        return self.fc(x)


def x(n, width=8):
    return torch.randn(n, width)


# --- options ------------------------------------------------------------------------------------
def test_options_is_a_sim_options_with_poptorch_groups():
    o = poptorch.Options()
    assert isinstance(o, sim.Options)
    assert o.Training.gradientAccumulation(4) is o.Training  # PopTorch returns the group
    assert o.Training.gradient_accumulation == 4
    assert o.deviceIterations(3) is o and o.device_iterations == 3
    for group in (o.Precision, o.Distributed, o.Jit, o.TensorLocations, o._Popart):
        assert group is not None
    assert isinstance(o.execution_strategy, poptorch.PipelinedExecution)  # PopTorch's default
    assert o.Distributed.numProcesses == 1 and o.Distributed.processId == 0


def test_unmodelled_options_are_recorded_and_reported():
    o = poptorch.Options().deviceIterations(2).broadcastBuffers(False).logDir("/tmp").enableStableNorm(True)
    o.Precision.enableStochasticRounding(True)
    o.Jit.traceModel(False)
    o._Popart.set("someSetting", 3)
    assert set(o.unmodelled()) == {"broadcastBuffers", "logDir", "Precision.enableStochasticRounding",
                                  "Jit.traceModel", "_Popart.someSetting"}
    model = poptorch.inferenceModel(Net(), o)
    model(x(2))
    notes = model.simulation.summary()["notes"]
    assert any("broadcastBuffers" in n and "no modelled effect" in n for n in notes)
    assert not any("deviceIterations" in n for n in notes)
    # enableStableNorm is modelled; this model has no norm for it to act on, which a note says
    assert not any("enableStableNorm" in n and "no modelled effect" in n for n in notes)
    assert "enableStableNorm: the model has no batch, group or layer norm; no effect" in notes


def test_options_are_frozen_once_given_to_a_model_and_clone_unfreezes():
    o = poptorch.Options()
    poptorch.inferenceModel(Net(), o)
    for setter in (lambda: o.deviceIterations(2), lambda: o.Training.gradientAccumulation(2),
                   lambda: o.TensorLocations.numIOTiles(32), lambda: o._Popart.set("a", 1),
                   lambda: o.Precision.enableStochasticRounding(True)):
        with pytest.raises(AttributeError, match="Can't modify frozen Options"):
            setter()
    c = o.clone()
    c.deviceIterations(2)
    assert c.device_iterations == 2 and o.device_iterations == 1
    assert c.Training._owner is c


def test_load_from_file(tmp_path):
    path = tmp_path / "opts.conf"
    path.write_text("# a comment\ndeviceIterations(5)\nTraining.gradientAccumulation(2)\n"
                    "outputMode(poptorch.OutputMode.Sum)\nreplicationFactor(2)\n")
    o = poptorch.Options().loadFromFile(path)
    assert (o.device_iterations, o.Training.gradient_accumulation, o.replication_factor) == (5, 2, 2)
    assert o.output_mode == poptorch.OutputMode.Sum
    path.write_text("deviceIterations(5)\nnoSuchOption(1)\n")
    with pytest.raises(poptorch.ConfigFileError, match=r"opts.conf:2: unknown option 'noSuchOption'"):
        poptorch.Options().loadFromFile(path)


def test_options_type_is_checked():
    with pytest.raises(poptorch.Error, match="Invalid type: 'options' is of type"):
        poptorch.inferenceModel(Net(), sim.Options())


def test_gradient_accumulation_for_inference_is_an_error():
    o = poptorch.Options()
    o.Training.gradientAccumulation(2)
    with pytest.raises(poptorch.Error) as e:
        poptorch.inferenceModel(Net(), o)
    assert e.value.message.startswith(
        "You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it as its "
        "default value (1) when running a poptorch.inferenceModel().")
    assert "Use poptorch.Options().deviceIterations" in e.value.message  # pipelined by default


@pytest.mark.parametrize("tiles", [0, 16, 31, 33, 194, 200])
def test_num_io_tiles_must_be_even_between_32_and_192(tiles):
    with pytest.raises(sim.OptionsError, match="numIOTiles must be an even number between 32 and 192"):
        poptorch.Options().TensorLocations.numIOTiles(tiles)


def test_reduction_type_must_be_sum_or_mean():
    with pytest.raises(ValueError, match="poptorch.ReductionType.Mean or poptorch.ReductionType.Sum"):
        poptorch.Options().Training.accumulationAndReplicationReductionType(poptorch.ReductionType.NoReduction)


def test_every_n_needs_a_period():
    with pytest.raises(AssertionError, match="output_return_period"):
        poptorch.Options().outputMode(poptorch.OutputMode.EveryN)


class Overlapped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = poptorch.set_overlap_for_input(x, poptorch.OverlapMode.OverlapAccumulationLoop)
        return poptorch.set_overlap_for_output(self.fc(x), poptorch.OverlapMode.OverlapAccumulationLoop)


def test_overlapped_io_needs_sharded_execution_io_tiles_and_all_or_sum():
    with pytest.raises(poptorch.Error, match="Overlapped IO is not supported with poptorch.PipelinedExecution. "
                                             "If you are using only one IPU, please switch to "
                                             "poptorch.ShardedExecution."):
        poptorch.inferenceModel(Overlapped())(x(2))
    o = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    with pytest.raises(poptorch.Error, match="No IO tiles allocated. You must allocate at least 32 IO "
                                             "tiles using poptorch.Options\\(\\).TensorLocations.numIOTiles."):
        poptorch.inferenceModel(Overlapped(), o)(x(2))
    o = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    o.TensorLocations.numIOTiles(32)
    o.outputMode(poptorch.OutputMode.Final)
    with pytest.raises(poptorch.Error, match="Unsupported output mode for overlapped IO"):
        poptorch.inferenceModel(Overlapped(), o)(x(2))
    o = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    o.TensorLocations.numIOTiles(32)
    model = poptorch.inferenceModel(Overlapped(), o)
    model(x(2))
    g = model.executable.graph
    assert g.overlap[g.inputs[0]] == poptorch.OverlapMode.OverlapAccumulationLoop
    assert g.overlap[g.outputs[0]] == poptorch.OverlapMode.OverlapAccumulationLoop


class ThreeIpus(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        with poptorch.Block("a", ipu_id=0):
            x = self.a(x)
        with poptorch.Block("b", ipu_id=1):
            x = self.b(x)
        with poptorch.Block("c", ipu_id=2):
            return self.c(x)


def test_ipu_count_must_be_a_power_of_two_unless_auto_rounded():
    model = poptorch.inferenceModel(ThreeIpus(), poptorch.Options().deviceIterations(4))
    with pytest.raises(poptorch.Error) as e:
        model(x(4))
    assert e.value.message == (
        "The model specifies the use of 3 IPUs, however PopTorch must reserve a minimum of 4 in "
        "order to allow the model to run, because PopTorch must reserve a power of 2 or maximum of "
        "64 IPUs per process. Please reconfigure your model to use a different number of IPUs or "
        "set poptorch.Options().autoRoundNumIPUs(True).")
    model = poptorch.inferenceModel(ThreeIpus(), poptorch.Options().deviceIterations(4).autoRoundNumIPUs(True))
    model(x(4))
    assert model.executable.system.name == "ipu-m2000"
    ops = [op for op in model.executable.graph.ops if op.pass_ == "forward"]
    assert [op.block for op in ops] == ["a", "a", "b", "b", "c", "c"]
    assert [op.ipu for op in ops] == [0, 0, 1, 1, 2, 2]


def test_wrong_batch_size_is_poptorchs_error():
    o = poptorch.Options().deviceIterations(2).replicationFactor(2)
    o.Training.gradientAccumulation(3)
    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.fc(x), y)
    model = poptorch.trainingModel(WithLoss(), o)
    with pytest.raises(AssertionError) as e:  # PopTorch's assert in _narrow_tensor
        model(x(10), torch.zeros(10, dtype=torch.long))
    assert str(e.value) == (
        "Invalid batch dimension: In the input torch.Size([10, 8]), the batch dimension (10) must be a "
        "multiple of Options.deviceIterations(2) * (Options.replicationFactor(2) / "
        "Options.inputReplicaGrouping.input_group_size(1)) * Options.Training.gradientAccumulation(3) = 12 "
        "because it is used to calculate the batch size which will be executed on the device in any "
        "given iteration. For a full explanation see the batching semantics page of the documentation.")
    model(x(24), torch.zeros(24, dtype=torch.long))  # a micro-batch of 2


def test_input_replica_grouping_divides_the_batch():
    o = poptorch.Options().replicationFactor(4).inputReplicaGrouping(2, poptorch.CommGroupType.Consecutive)
    net = Net()
    model = poptorch.inferenceModel(net, o)
    data = x(2 * 2)  # micro-batch 2 for each of the 2 groups
    out = model(data)
    ref = net(data).view(2, 2, 4)
    torch.testing.assert_close(out, torch.cat([ref[0], ref[0], ref[1], ref[1]]))  # replicas 0,1 | 2,3


# --- the system ---------------------------------------------------------------------------------
@pytest.mark.parametrize("replicas, system", [(1, "ipu-mk2"), (2, "ipu-m2000"), (4, "ipu-m2000"),
                                              (8, "ipu-pod16"), (16, "ipu-pod16")])
def test_default_system_is_the_smallest_holding_the_run(replicas, system, monkeypatch):
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    model = poptorch.inferenceModel(Net(), poptorch.Options().replicationFactor(replicas))
    model(x(replicas))
    assert model.executable.system.name == system
    assert f"system {system}: the smallest Mk2 system" in model.simulation.summary()["notes"][0]


def test_system_from_environment_and_option(monkeypatch):
    monkeypatch.setenv("IPUSIM_SYSTEM", "bow-pod16")
    model = poptorch.inferenceModel(Net())
    model(x(1))
    assert model.executable.system.name == "bow-pod16"
    assert "IPUSIM_SYSTEM" in model.simulation.summary()["notes"][0]
    model = poptorch.inferenceModel(Net(), poptorch.Options().simulatedSystem("ipu-pod64"))
    model(x(1))
    assert model.executable.system.name == "ipu-pod64"
    assert "simulatedSystem" in model.simulation.summary()["notes"][0]
    with pytest.raises(sim.ConfigError, match="unknown system"):
        poptorch.Options().simulatedSystem("no-such-system")


# --- DataLoader -------------------------------------------------------------------------------------
class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        return torch.full((8,), float(i)), i % 4


def test_dataloader_batches_one_call():
    o = poptorch.Options().deviceIterations(3).replicationFactor(2)
    loader = poptorch.DataLoader(o, Squares(), batch_size=4)
    assert loader.combinedBatchSize == 24
    batches = list(loader)
    assert len(batches) == 4  # 100 // 24, the rest dropped
    xs, ys = batches[0]
    assert xs.shape == (24, 8) and ys.shape == (24,)
    model = poptorch.inferenceModel(Net(), o)
    assert model(xs).shape == (24, 4)


def test_dataloader_partitions_the_dataset_between_processes():
    seen = []
    for pid in range(2):
        o = poptorch.Options().deviceIterations(2)
        o.Distributed.configureProcessId(pid, 2)
        loader = poptorch.DataLoader(o, Squares(), batch_size=5)
        seen.append(torch.cat([b[0][:, 0] for b in loader]).tolist())
    assert seen[0] == [float(i) for i in range(50)]
    assert seen[1] == [float(i) for i in range(50, 100)]
    o = poptorch.Options()
    o.Distributed.configureProcessId(0, 2)
    with pytest.raises(AssertionError, match="randomSeed"):
        poptorch.DataLoader(o, Squares(), shuffle=True)


def test_dataloader_drop_last_false_warns_and_keeps_the_short_batch(caplog):
    # PopTorch 3: a warning, and the last batch is short (drop_last=True drops it)
    loader = poptorch.DataLoader(poptorch.Options().deviceIterations(3), Squares(), batch_size=1,
                                 drop_last=False)
    assert "is not divisible by the number of elements processed per step (3)" in caplog.text
    sizes = [x.shape[0] for x, _ in loader]
    assert sizes == [3] * 33 + [1]
    assert len(poptorch.DataLoader(poptorch.Options().deviceIterations(3), Squares(), batch_size=1)) == 33


def test_asynchronous_data_accessor_iterates_its_loader():
    loader = poptorch.DataLoader(poptorch.Options(), Squares(), batch_size=10)
    accessor = poptorch.AsynchronousDataAccessor(loader)
    assert len(accessor) == 10
    assert [int(x[0, 0]) for x, _ in accessor] == list(range(0, 100, 10))
    accessor.terminate()
    with pytest.raises(AssertionError, match="terminated"):
        iter(accessor)
    # an Async DataLoader iterates through its own accessor; wrapping it again is PopTorch's error
    async_loader = poptorch.DataLoader(poptorch.Options().deviceIterations(2), Squares(), batch_size=5,
                                       mode=poptorch.DataLoaderMode.Async)
    assert [x.shape[0] for x, _ in async_loader] == [10] * 10
    async_loader.terminate()
    with pytest.raises(poptorch.Error, match="already uses an AsynchronousDataAccessor"):
        poptorch.AsynchronousDataAccessor(async_loader)
    # AsyncRebatched: workers read rebatched_worker_size samples, the loader returns whole calls
    rebatched = poptorch.DataLoader(poptorch.Options().deviceIterations(4), Squares(), batch_size=5,
                                    mode=poptorch.DataLoaderMode.AsyncRebatched, rebatched_worker_size=3)
    assert [x.shape[0] for x, _ in rebatched] == [20] * 5 and len(rebatched) == 5


# --- PopDist ----------------------------------------------------------------------------------------
POPRUN = {"POPDIST_NUM_TOTAL_REPLICAS": "8", "POPDIST_NUM_LOCAL_REPLICAS": "2",
          "POPDIST_NUM_IPUS_PER_REPLICA": "1", "POPDIST_REPLICA_INDEX_OFFSET": "4",
          "POPDIST_LOCAL_INSTANCE_INDEX": "0"}


def test_popdist_outside_poprun(monkeypatch):
    for k in list(POPRUN) + ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"]:
        monkeypatch.delenv(k, raising=False)
    assert not popdist.isPopdistEnvSet()
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), popdist.getNumInstances(),
            popdist.getInstanceIndex(), popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica()) == (1, 1, 1, 0, 0, 1)


def test_popdist_instance_k_of_n(monkeypatch):
    for k, v in POPRUN.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    assert popdist.isPopdistEnvSet()
    assert (popdist.getNumInstances(), popdist.getInstanceIndex()) == (4, 2)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")  # mpirun's numbering, with the offset PopRun gives rank 3
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("POPDIST_REPLICA_INDEX_OFFSET", "6")
    assert (popdist.getNumInstances(), popdist.getInstanceIndex()) == (4, 3)
    assert popdist.execute_on_instances({3}, lambda: "ran") == "ran"
    assert popdist.execute_on_instances({0}, lambda: "ran") is None
    popdist.init()
    popdist.synchronize()
    o = sim.popdist.poptorch.Options(ipus_per_replica=1)
    assert isinstance(o, poptorch.Options)
    assert o.replication_factor == 2
    assert (o.Distributed.processId, o.Distributed.numProcesses) == (3, 4)
    with pytest.raises(poptorch.Error, match="IPUs per replica"):
        sim.popdist.poptorch.Options(ipus_per_replica=2)
    model = poptorch.inferenceModel(Net(), o)
    model(x(2))
    assert model.executable.system.name == "ipu-pod16"  # 2 replicas x 4 instances = 8 IPUs
    assert any("process 3 of 4" in n for n in model.simulation.summary()["notes"])


def test_options_read_the_mpi_environment(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    o = poptorch.Options()
    assert (o.Distributed.processId, o.Distributed.numProcesses) == (1, 2)


# --- without torch ------------------------------------------------------------------------------------
def test_import_without_torch_names_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import sim, sim.popdist\n"
            "try:\n    import sim.poptorch\nexcept ImportError as e:\n    print(e)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(__file__)), check=True).stdout
    assert "pip install -e '.[torch]'" in out and "torch==2.13.0" in out


def test_collectives_span_every_instance():
    """4 PopDist instances x 2 replicas: the gradient all-reduce runs over all 8 replicas, so it
    takes longer than over one instance's 2; each call simulates the 4 replicas of the instance's
    IPU-Machine host link, 2 of them the next instance's (fed by its own process)."""
    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 64)

        def forward(self, inputs, target):
            out = self.fc(inputs)
            return out, torch.nn.functional.mse_loss(out, target)

    def collective_cycles(processes):
        o = poptorch.Options().replicationFactor(2)
        o.Distributed.configureProcessId(0, processes)
        net = WithLoss()
        model = poptorch.trainingModel(net, o, poptorch.optim.SGD(net.parameters(), lr=0.1))
        model(x(2, 64), x(2, 64))
        t = model.simulation.trace
        assert model.executable.simulated_replicas == list(range(min(4, 2 * processes)))
        return t[t["kind"] == "collective"]["cycles"].sum()
    assert collective_cycles(4) > collective_cycles(1) > 0


def test_partials_type_is_modelled():
    """Precision.setPartialsType reaches the cost model (not reported as unmodelled)."""
    o = poptorch.Options()
    assert o.partials_type() == "float"
    o.Precision.setPartialsType(torch.half)
    assert o.partials_type() == "half"
    assert "Precision.setPartialsType" not in o.unmodelled()


def test_combined_sgd_accumulates_into_its_velocity_as_the_notes_say():
    """SGD with use_combined_accum (PopART's SGD1, Graphcore's CNN sgd_combined) keeps no gradient
    accumulators at any accumulation: the velocity is the accumulator, and the notes give that reason."""
    net = torch.nn.Linear(8, 4)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.net(x), y)

    o = poptorch.Options()
    o.Training.gradientAccumulation(6)
    opt = poptorch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, use_combined_accum=True,
                             accum_type=torch.float16)
    model = poptorch.trainingModel(M(), o, opt)
    model.compile(torch.randn(12, 8), torch.zeros(12, dtype=torch.long))
    notes = [n for n in model.executable.notes if n.startswith("gradient accumulators")]
    assert notes and all("accumulates the gradients into its own state" in n for n in notes)
    # the default (float32, not given) is not noted
    plain = poptorch.trainingModel(M(), o, poptorch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9,
                                                              use_combined_accum=True))
    plain.compile(torch.randn(12, 8), torch.zeros(12, dtype=torch.long))
    assert not [n for n in plain.executable.notes if n.startswith("gradient accumulators")]


def test_convolution_partials_follow_convolution_options():
    """PopART types a convolution's partials by convolutionOptions["partialsType"] and a matmul's by
    partialsTypeMatMuls; PopTorch's setPartialsType sets both (python/options.py)."""
    both = poptorch.Options()
    both.Precision.setPartialsType(torch.half)
    assert both.partials_type("matmul") == both.partials_type("conv2d") == "half"
    conv_only = poptorch.Options()
    conv_only._Popart.set("convolutionOptions", {"partialsType": "half"})
    assert (conv_only.partials_type("conv2d_grad_weight"), conv_only.partials_type("matmul")) == ("half", "float")
    assert not any("partialsType" in k for k in conv_only.unmodelled())
    matmul_only = poptorch.Options()
    matmul_only._Popart.set("partialsTypeMatMuls", "half")
    assert (matmul_only.partials_type("conv2d"), matmul_only.partials_type("matmul")) == ("float", "half")
    b = sim.GraphBuilder("conv", "float16")
    b.output(b.conv2d(b.input("x", (8, 64, 28, 28)), 64, 3, 1, 1))
    cycles = {name: sim.simulate(b.graph, "ipu-mk2", o.enableSyntheticData(True)).cycle_count
              for name, o in (("both", both), ("conv_only", conv_only), ("matmul_only", matmul_only))}
    assert cycles["both"] == cycles["conv_only"] != cycles["matmul_only"]


# --- parity with PopTorch 3.4's options.py (python/options.py, _options_impl.py) -------------------
def test_deepcopy_of_frozen_options_is_unfrozen():
    """PopTorch's OptionsDict.__deepcopy__ unfreezes: copy.deepcopy of the options a model froze can be
    changed for another model (PopTorch's test_copied_options_unfrozen)."""
    import copy
    o = poptorch.Options()
    poptorch.inferenceModel(Net(), o)
    c = copy.deepcopy(o)
    c.deviceIterations(5)
    c.Training.gradientAccumulation(2)
    c._Popart.set("autoRecomputation", 3)
    assert (c.device_iterations, o.device_iterations) == (5, 1)
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        o.deviceIterations(5)


def test_available_memory_proportion_replaces_the_map():
    """PopTorch's setAvailableMemoryProportion stores the new dict (createOrSet): an IPU a later call
    leaves out is back at the default proportion."""
    o = poptorch.Options().setAvailableMemoryProportion({"IPU0": 0.05})
    o.setAvailableMemoryProportion({"IPU1": 0.3})
    assert o.available_memory_proportion == {1: 0.3}
    assert o.memory_proportion(0) == 0.6
    with pytest.raises(sim.OptionsError):  # a bad value leaves the map as it was
        o.setAvailableMemoryProportion({"IPU0": 1.5})
    assert o.available_memory_proportion == {1: 0.3}


def test_max_repeat_logs_takes_poptorchs_keyword_and_default():
    o = poptorch.Options()
    assert o.max_repeat_logs == 4 and o.exists("max_repeat_logs")
    assert o.maxRepeatLogs(max_lines=10) is o and o.max_repeat_logs == 10
    assert o.maxRepeatLogs(None).max_repeat_logs == (1 << 64) - 1
    with pytest.raises(AssertionError, match="Unexpected type"):
        o.maxRepeatLogs("10")


def test_output_mode_resets_the_return_period():
    """PopTorch stores output_return_period or 1: a mode other than EveryN leaves a period of 1."""
    o = poptorch.Options().outputMode(poptorch.OutputMode.EveryN, 2)
    assert o.output_return_period == 2
    o.outputMode(poptorch.OutputMode.All, 5)
    assert (o.output_mode, o.output_return_period) == (poptorch.OutputMode.All, 1)


def test_partials_type_and_convolution_dithering_replace_convolution_options():
    """PopTorch's setPartialsType and setConvolutionDithering each set convolutionOptions to a new dict,
    so what was in the map before is gone (PopTorch's C++ emplaces the final dict's entries)."""
    o = poptorch.Options()
    o._Popart.set("convolutionOptions", {"use128BitConvUnitLoad": "true"})
    o.Precision.setPartialsType(torch.half)
    assert o._Popart.options["convolutionOptions"] == {"partialsType": "half"}
    assert o.poplin_options(convolution=True)["conv_unit_load_bits"] == 64
    assert o.partials_type("conv2d") == o.partials_type("matmul") == "half"
    o.Training.setConvolutionDithering(True)
    assert o._Popart.options["convolutionOptions"] == {"enableConvDithering": True}
    assert (o.partials_type("conv2d"), o.partials_type("matmul")) == ("float", "half")
    assert o.unmodelled() == {"Training.setConvolutionDithering": True}  # one note, not two


def test_tensor_location_settings_are_copied_when_set():
    """PopTorch stores location.toDict(): changing the settings object afterwards changes nothing."""
    loc = poptorch.TensorLocationSettings().useOnChipStorage(True)
    o = poptorch.Options()
    o.TensorLocations.setWeightLocation(loc)
    loc.useOnChipStorage(False)
    assert o.TensorLocations.locations["weight"].on_chip is True


def test_executable_caching_and_profiling_set_poparts_options():
    o = poptorch.Options().enableExecutableCaching("/tmp/cache").enableProfiling("/tmp/prof")
    popart = o._Popart.options
    assert (popart["cachePath"], popart["enableEngineCaching"]) == ("/tmp/cache", True)
    assert popart["engineOptions"] == {"debug.allowOutOfMemory": "true", "autoReport.directory": "/tmp/prof",
                                       "autoReport.all": "true"}
    assert poptorch.Options().enableExecutableCaching(None)._Popart.options["enableEngineCaching"] is False
    assert {"enableExecutableCaching", "enableProfiling"} <= set(o.unmodelled())


@pytest.mark.parametrize("setter, kind", [
    (lambda o: o.syncPattern(0), AssertionError),
    (lambda o: o.outputMode(2), AssertionError),
    (lambda o: o.setExecutionStrategy(None), AssertionError),
    (lambda o: o.deviceIterations("2"), AssertionError),
    (lambda o: o.Training.gradientAccumulation(2.0), AssertionError),
    (lambda o: o.TensorLocations.numIOTiles(33), AssertionError),
    (lambda o: o.TensorLocations.setWeightLocation({}), AssertionError),
    (lambda o: o.TensorLocations.setWeightLocation(poptorch.TensorLocationSettings().useOnChipStorage(1)),
     AssertionError),
    (lambda o: o.Precision.enableFloatingPointExceptions(1), AssertionError),
    (lambda o: o.Training.setMeanAccumulationAndReplicationReductionStrategy(1), AssertionError),
    (lambda o: o._Popart.setPatterns({}, "2"), AssertionError),
    (lambda o: o.autoRoundNumIPUs(1), AssertionError),
    (lambda o: o.broadcastBuffers(0), AssertionError),
    (lambda o: o.logDir(3), AssertionError),
    (lambda o: o.replicationFactor(2).inputReplicaGrouping(2, poptorch.CommGroupType.All), ValueError),
    (lambda o: o.replicationFactor(2).inputReplicaGrouping(4, poptorch.CommGroupType.Consecutive), ValueError),
])
def test_refused_values_raise_poptorchs_exception_type(setter, kind):
    with pytest.raises(kind):
        setter(poptorch.Options())


def test_refused_input_replica_grouping_leaves_the_options_unchanged():
    o = poptorch.Options().replicationFactor(4)
    with pytest.raises(ValueError):
        o.inputReplicaGrouping(3, poptorch.CommGroupType.Consecutive)
    assert o.input_group_size == 1 and "inputReplicaGrouping" not in o.toDict()


def test_half_float_casting_takes_any_value_with_the_deprecation_warning(caplog):
    """PopTorch 3's halfFloatCasting checks nothing: it warns and returns the group."""
    o = poptorch.Options()
    with caplog.at_level("WARNING", logger="poptorch"):
        assert o.Precision.halfFloatCasting("HalfUpcastToFloat") is o.Precision
    assert "[Deprecated] Do not call options.Precision.halfFloatCasting()" in caplog.text
    assert "Precision.halfFloatCasting" in o.unmodelled()
