"""sim.poptorch as a PopTorch user porting PyTorch code meets it (third pass): PopTorch's ``OptionsDict``
interface (``set``, ``createOrSet``, ``opts("name")``, snake_case ``toDict``), torch.optim flags PopTorch does
not pass to PopART, a ``None`` output under ``OutputMode.Sum``, and ``AutoStage.SameAsIpu`` blocks without an
IPU. Each test names the PopTorch source (graphcore/poptorch, sdk/poptorch/3.4.0) it follows."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "POPTORCH_DEFAULT_OPTIONS"):
        monkeypatch.delenv(var, raising=False)


def _notes(model) -> list[str]:
    return model.simulation.summary()["notes"]


# --- Options: PopTorch's OptionsDict (python/_options_impl.py) -------------------------------------------

def test_options_set_and_call_by_poptorch_names_go_through_the_setters():
    """``OptionsDict.set(**kw)``: an existing name only, of the default value's type (its two asserts);
    ``opts(name)`` reads a value. Here a value set by name has its setter's effect and is recorded as it."""
    o = poptorch.Options()
    assert o("device_iterations") == 1 and o("output_mode") == 4  # OutputMode.Default's value
    assert o.set(device_iterations=4, replication_factor=2) is None
    assert (o.device_iterations, o.replication_factor) == (4, 2)
    assert o.set_options == {"deviceIterations": 4, "replicationFactor": 2}
    assert o("device_iterations") == 4
    with pytest.raises(AssertionError, match="Unexpected type <class 'float'> for option device_iterations"):
        o.set(device_iterations=2.0)
    with pytest.raises(AssertionError, match="Invalid option deviceIterations, valid options are"):
        o.set(deviceIterations=2)
    with pytest.raises(AssertionError, match="Invalid option nope"):
        o("nope")
    o.set(output_mode=int(poptorch.OutputMode.EveryN), output_return_period=3)
    assert (o.output_mode, o.output_return_period) == (poptorch.OutputMode.EveryN, 3)
    o.set(available_memory_proportion={1: 0.3})
    assert o.available_memory_proportion == {1: 0.3}
    assert not o.exists("random_seed")  # created by randomSeed
    o.randomSeed(5)
    assert o.exists("random_seed") and o("random_seed") == 5


def test_create_or_set_adds_a_name_that_is_reported_as_not_modelled():
    """``OptionsDict.createOrSet``: a known name is set (``random_seed`` through ``randomSeed``), a new one is
    stored; the new one has no modelled effect, which the run's notes say."""
    o = poptorch.Options()
    o.createOrSet(random_seed=3, my_flag="on")
    assert o.random_seed == 3 and o("my_flag") == "on" and o.exists("my_flag")
    assert o.unmodelled() == {"createOrSet.my_flag": "on"}
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2), o)
    model(torch.ones(1, 2))
    assert any("createOrSet.my_flag" in n and "no modelled effect" in n for n in _notes(model))
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        o.set(device_iterations=2)
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        o.createOrSet(other=1)
    clone = o.clone()
    clone.set(device_iterations=2)
    assert clone("my_flag") == "on" and clone.device_iterations == 2


def test_training_and_distributed_groups_take_their_names():
    """``_TrainingOptions`` and ``_DistributedOptions`` are OptionsDicts too (python/options.py)."""
    o = poptorch.Options()
    o.Training.set(gradient_accumulation=4)
    assert o.Training.gradient_accumulation == 4 and o.Training("gradient_accumulation") == 4
    assert o.set_options["Training.gradientAccumulation"] == 4
    with pytest.raises(ValueError):  # through accumulationAndReplicationReductionType's own check
        o.Training.set(accumulation_and_replication_reduction_type=poptorch.ReductionType.NoReduction)
    o.Distributed.set(distributed_process_id=1, num_distributed_processes=2)  # either order
    assert (o.Distributed.processId, o.Distributed.numProcesses) == (1, 2)
    assert o.Distributed.toDict() == {"num_distributed_processes": 2, "distributed_process_id": 1}


def test_to_dict_merges_the_groups_under_poptorchs_names():
    """``Options.toDict``: the strategy's backend options, ``_Popart``'s, the options', then Training's,
    Distributed's and TensorLocations' values, by PopTorch's names (enum values as PopTorch stores them)."""
    o = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode.All)
    o.Training.gradientAccumulation(3)
    o.TensorLocations.numIOTiles(32)
    o.setExecutionStrategy(poptorch.SerialPhasedExecution(["0"], ["1"]))
    d = o.toDict()
    assert {k: d[k] for k in ("execution_mode", "serial_phases_execution", "tensors_liveness",
                              "separate_backward_phase")} == {"execution_mode": 2, "serial_phases_execution": True,
                                                              "tensors_liveness": 0, "separate_backward_phase": False}
    assert (d["device_iterations"], d["output_mode"], d["gradient_accumulation"]) == (2, 2, 3)
    assert d["numIOTiles"] == 32 and d["num_distributed_processes"] == 1
    assert d["instrumentWithHardwareCycleCounter"] is False  # a _Popart option
    assert "deviceIterations" not in d
    assert poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution()).toDict()["execution_mode"] == 1


# --- optimizers: flags PopTorch does not read (python/_optimizer_attributes.py) ------------------------

class _Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x, y):
        return F.mse_loss(self.lin(x), y)


@pytest.mark.parametrize("make", [
    lambda p, **kw: torch.optim.SGD(p, lr=0.1, momentum=0.9, **kw),
    lambda p, **kw: torch.optim.Adam(p, lr=0.05, **kw),
    lambda p, **kw: poptorch.optim.AdamW(p, lr=0.05, **kw),
])
@pytest.mark.parametrize("flag", ["maximize", "differentiable", "capturable"])
def test_optimizer_flags_popart_never_sees_do_not_change_the_update(make, flag):
    """PopTorch reads no ``maximize``, ``differentiable`` or ``capturable`` attribute (its attribute readers
    in ``convertOptimizerToDict``): the IPU minimises the loss with PopART's update. The CPU numbers had
    maximised the loss (maximize) or failed in torch's step (differentiable: "a leaf Variable that requires
    grad is being used in an in-place operation"; capturable: params on the CPU). Now they are torch's
    without the flag, and the notes say it was ignored."""
    if flag == "capturable" and "SGD" in repr(make(torch.nn.Linear(1, 1).parameters())):
        pytest.skip("SGD has no capturable flag")
    torch.manual_seed(0)
    net = _Regression()
    ref = copy.deepcopy(net)
    x, y = torch.randn(6, 4), torch.randn(6, 2)
    opt = make(net.parameters(), **{flag: True})
    model = poptorch.trainingModel(net, optimizer=opt)
    losses = [model(x, y) for _ in range(3)]
    model.copyWeightsToHost()
    ref_opt = make(ref.parameters())
    ref_losses = []
    for _ in range(3):
        ref_opt.zero_grad()
        loss = ref(x, y)
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.detach())
    torch.testing.assert_close(torch.stack(losses), torch.stack(ref_losses), rtol=0, atol=0)
    torch.testing.assert_close(net.lin.weight, ref.lin.weight, rtol=0, atol=0)
    assert losses[-1] < losses[0]
    assert opt.param_groups[0][flag] is True and opt.defaults[flag] is True  # the user's optimizer unchanged
    assert any(f"{flag}=True: ignored, as PopTorch does not pass it to PopART" in n for n in _notes(model))
    model.destroy()


# --- outputs ----------------------------------------------------------------------------------------------

class _WithNone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x), None


def test_sum_output_mode_returns_a_none_output_as_it_is():
    """PopTorch rebuilds the output structure (``reconstructTensorStructure``), a None included; under
    ``OutputMode.Sum`` the simulator had tried to sum the Nones (AttributeError: no attribute 'clone')."""
    torch.manual_seed(0)
    net = _WithNone()
    o = poptorch.Options().deviceIterations(4).outputMode(poptorch.OutputMode.Sum)
    x = torch.randn(8, 4)
    out, none = poptorch.inferenceModel(net, o)(x)
    assert none is None
    torch.testing.assert_close(out, net(x)[0].detach().view(4, 2, 3).sum(0))


# --- placement: AutoStage.SameAsIpu (python/options.py _DefaultStageManager) ---------------------------

class _TwoBlocks(torch.nn.Module):
    def __init__(self, ipus):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.ipus = ipus

    def forward(self, x):
        with poptorch.Block("A", ipu_id=self.ipus[0]):
            x = self.a(x)
        with poptorch.Block("B", ipu_id=self.ipus[1]):
            return self.b(x)


@pytest.mark.parametrize("strategy", [None, poptorch.PipelinedExecution(), poptorch.ShardedExecution()])
def test_same_as_ipu_needs_every_block_on_an_ipu(strategy):
    """PopTorch's default strategy (``PipelinedExecution()``, ``AutoStage.SameAsIpu``) makes a block's IPU its
    stage and asserts "poptorch.AutoStage.SameAsIpu was selected but no IPU was specified for block A"; the
    simulator had run such blocks on IPU 0 as one stage, silently."""
    o = poptorch.Options().deviceIterations(2)
    if strategy is not None:
        o.setExecutionStrategy(strategy)
    with pytest.raises(AssertionError, match="SameAsIpu was selected but no IPU was specified for block A"):
        poptorch.inferenceModel(_TwoBlocks((None, None)), o)(torch.randn(2, 4))
    ok = poptorch.inferenceModel(_TwoBlocks((0, 1)), o.clone())
    ok(torch.randn(2, 4))
    assert sorted({op.ipu for op in ok.executable.graph.ops}) == [0, 1]
    auto = o.clone().setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    # no assertion there: the blocks run on IPUs 1 and 2 (the next test), 3 IPUs, which PopTorch refuses
    # unless rounded up
    with pytest.raises(poptorch.Error, match="specifies the use of 3 IPUs"):
        poptorch.inferenceModel(_TwoBlocks((None, None)), auto)(torch.randn(2, 4))


def test_auto_increment_blocks_without_ipus_run_on_their_stage_numbers():
    """PopTorch's AutoIncrement numbers each new block's stage from 1 and runs a block without an ipu_id on
    the IPU of that number (python/_options_impl.py beginStage): blocks A and B on IPUs 1 and 2, IPU 0 idle,
    3 IPUs rounded up to 4 as PopTorch reserves them."""
    class TwoBlocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x):
            with poptorch.Block("A"):
                x = self.a(x)
            with poptorch.Block("B"):
                x = self.b(x)
            return x

    opts = poptorch.Options().autoRoundNumIPUs(True).deviceIterations(4)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    model = poptorch.inferenceModel(TwoBlocks(), opts)
    model(torch.randn(16, 8))
    ex = model.simulation.executable
    assert {op.name.split("/")[0]: op.ipu for op in ex.graph.ops} == {"a": 1, "b": 2}
    assert ex.ipus_per_replica == 3
