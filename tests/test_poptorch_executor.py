"""sim.poptorch: PopTorch's PoplarExecutor contract, played back on the simulator.

* perf counters: one list per input/output tensor; inputs DI x GA x R stamps; outputs
  (x R) 1 for Final/Sum, DI x GA for All, DI/N x GA for EveryN(N); defaults All (inference),
  Final (training); synthetic data -> empty lists; before compilation every key is [[]];
* latencies: (min, max, avg) with min <= avg <= max, (0, 0, 0) without end stamps;
* cycleCount's two errors, in PopTorch's order and words;
* outputs: the CPU model's outputs, combined per output mode with PopTorch's shapes;
* training: the loss goes down, gradient accumulation with Mean matches a larger batch.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sim  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    """The tests expect the default system choice and a single process."""
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)

MB = 2  # micro-batch
MODES = {"All": (poptorch.OutputMode.All,), "Final": (poptorch.OutputMode.Final,),
         "Sum": (poptorch.OutputMode.Sum,), "EveryN(2)": (poptorch.OutputMode.EveryN, 2)}
KEYS = ("input", "input_complete", "output", "output_complete")
LATENCIES = ("getLatency", "getHostIpuLatency", "getComputeLatency", "getIpuHostLatency")
SLACK = 1e-15  # the mean of equal floats may differ from them by an ulp


class Net(torch.nn.Module):
    """Two inputs (x, labels), two outputs (logits, loss)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels):
        logits = self.fc(x)
        return logits, self.loss(logits, labels)


def make_options(di=1, mode=None, ga=1, replicas=1, synthetic=False, cycles=True):
    o = poptorch.Options().deviceIterations(di).replicationFactor(replicas)
    if mode is not None:
        o.outputMode(*MODES[mode])
    if ga > 1:
        o.Training.gradientAccumulation(ga)
    if synthetic:
        o.enableSyntheticData(True)
    return o.logCycleCount(cycles)


def batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g)


def expected_outputs(mode, di, ga):
    return {"All": di * ga, "Final": 1, "Sum": 1, "EveryN(2)": di // 2 * ga}[mode]


def check_counters(model, n_in, n_out):
    pc = model.getPerfCounters()
    assert set(pc) == set(KEYS)
    assert len(pc["input"]) == len(pc["input_complete"]) == 2  # x, labels
    assert len(pc["output"]) == len(pc["output_complete"]) == 2  # logits, loss
    for key, n in (("input", n_in), ("input_complete", n_in), ("output", n_out), ("output_complete", n_out)):
        for stamps in pc[key]:
            assert len(stamps) == n, key
            assert all(isinstance(s, float) for s in stamps)
    for start, end in (("input", "input_complete"), ("output", "output_complete")):
        for s_list, e_list in zip(pc[start], pc[end]):
            assert all(s <= e for s, e in zip(s_list, e_list))


def check_latencies(model):
    for name in LATENCIES:
        lo, hi, avg = getattr(model, name)()
        assert 0.0 <= lo <= hi, name
        assert lo - SLACK <= avg <= hi + SLACK, name
    assert model.getLatency()[0] > 0.0


def run(training, di, mode, ga=1, replicas=1, synthetic=False):
    torch.manual_seed(0)
    wrap = poptorch.trainingModel if training else poptorch.inferenceModel
    model = wrap(Net(), make_options(di, mode, ga, replicas, synthetic))
    out = model(*batch(MB * di * ga * replicas))
    return model, out


# --- perf counter sizes ----------------------------------------------------------------------
@pytest.mark.parametrize("replicas", [1, 2, 4])
@pytest.mark.parametrize("di", [1, 2, 4, 10])
@pytest.mark.parametrize("mode", list(MODES))
def test_inference_counter_sizes(mode, di, replicas):
    if mode == "EveryN(2)" and di % 2:
        with pytest.raises(sim.OptionsError, match="multiple of the return period"):
            run(False, di, mode, replicas=replicas)
        return
    model, _ = run(False, di, mode, replicas=replicas)
    check_counters(model, di * replicas, expected_outputs(mode, di, 1) * replicas)
    check_latencies(model)


@pytest.mark.parametrize("replicas", [1, 2, 4])
@pytest.mark.parametrize("ga", [1, 2])
@pytest.mark.parametrize("di", [1, 2, 4, 10])
@pytest.mark.parametrize("mode", list(MODES))
def test_training_counter_sizes(mode, di, ga, replicas):
    if mode == "EveryN(2)" and di % 2:
        with pytest.raises(sim.OptionsError, match="multiple of the return period"):
            run(True, di, mode, ga, replicas)
        return
    model, _ = run(True, di, mode, ga, replicas)
    check_counters(model, di * ga * replicas, expected_outputs(mode, di, ga) * replicas)
    check_latencies(model)


@pytest.mark.parametrize("training, n_out", [(False, 4), (True, 1)])
def test_default_output_mode(training, n_out):
    model, _ = run(training, 4, None)
    assert model.options.output_mode == (poptorch.OutputMode.Final if training else poptorch.OutputMode.All)
    check_counters(model, 4, n_out)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_synthetic_data_empty_counters_zero_latencies(training, mode):
    model, _ = run(training, 4, mode, synthetic=True)
    pc = model.getPerfCounters()
    assert all(stamps == [] for k in KEYS for stamps in pc[k])
    for name in LATENCIES:
        assert getattr(model, name)() == (0.0, 0.0, 0.0)
    assert model.cycleCount() > 0


def test_counters_before_compilation_and_after_compile_only():
    model = poptorch.inferenceModel(Net(), make_options(2))
    assert model.getPerfCounters() == {k: [[]] for k in KEYS}
    for name in LATENCIES:
        assert getattr(model, name)() == (0.0, 0.0, 0.0)
    model.compile(*batch(4))
    assert model.getPerfCounters() == {k: [[], []] for k in KEYS}
    assert model.getLatency() == (0.0, 0.0, 0.0)


def test_counters_are_those_of_the_latest_run_and_simulated_seconds():
    model, _ = run(False, 4, "All")
    first = model.getPerfCounters()
    model(*batch(MB * 4, seed=1))
    assert model.getPerfCounters() == first  # deterministic: every call simulates the same
    assert max(max(v) for v in first["output_complete"]) <= model.simulation.seconds


# --- cycleCount ------------------------------------------------------------------------------
DISABLED = "Cycle count logging is disabled. Please set option logCycleCount to True to enable."
NOT_RUN = "Please run the model at least once before obtaining cycle count."


def test_cycle_count_disabled_is_checked_first():
    model = poptorch.inferenceModel(Net(), make_options(cycles=False))
    for _ in range(2):  # before and after a run
        with pytest.raises(poptorch.Error) as e:
            model.cycleCount()
        assert e.value.message == DISABLED
        assert str(e.value) == f"'poptorch_py_error': {DISABLED}"
        model(*batch(MB))


def test_cycle_count_before_a_run_and_after_compile_only():
    model = poptorch.inferenceModel(Net(), make_options())
    with pytest.raises(poptorch.Error, match=NOT_RUN.replace(".", r"\.")):
        model.cycleCount()
    model.compile(*batch(MB))
    assert model.isCompiled()
    with pytest.raises(poptorch.Error) as e:
        model.cycleCount()
    assert e.value.message == NOT_RUN
    model(*batch(MB))
    assert isinstance(model.cycleCount(), int) and model.cycleCount() > 0
    model.destroy()
    with pytest.raises(poptorch.Error, match="at least once"):
        model.cycleCount()


def test_cycle_count_set_through_popart_option():
    o = poptorch.Options()
    o._Popart.set("instrumentWithHardwareCycleCounter", True)
    model = poptorch.inferenceModel(Net(), o)
    model(*batch(MB))
    assert model.cycleCount() == model.simulation.cycle_count


# --- outputs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("mode", list(MODES))
def test_inference_outputs_match_the_cpu_model(mode, replicas):
    torch.manual_seed(0)
    net = Net()
    di = 4
    model = poptorch.inferenceModel(net, make_options(di, mode, replicas=replicas))
    x, y = batch(MB * di * replicas)
    logits, loss = model(x, y)
    ref = net.fc(x).view(di, replicas, MB, 4)  # [step, replica, micro-batch, ...]
    ref_loss = torch.stack([torch.nn.functional.cross_entropy(net.fc(xc), yc)
                            for xc, yc in zip(x.split(MB), y.split(MB))]).view(di, replicas)
    if mode == "All":
        torch.testing.assert_close(logits, ref.reshape(-1, 4))
        torch.testing.assert_close(loss, ref_loss.reshape(-1))
    elif mode == "Final":
        torch.testing.assert_close(logits, ref[-1].reshape(-1, 4))
        torch.testing.assert_close(loss, ref_loss[-1] if replicas > 1 else ref_loss[-1, 0])
        assert loss.shape == ((replicas,) if replicas > 1 else ())
    elif mode == "Sum":
        torch.testing.assert_close(logits, ref.sum(0).reshape(-1, 4))
        assert logits.shape == (MB * replicas, 4)
        torch.testing.assert_close(loss, ref_loss.sum(0) if replicas > 1 else ref_loss.sum())
    else:  # EveryN(2): steps 1 and 3
        torch.testing.assert_close(logits, ref[1::2].reshape(-1, 4))
        torch.testing.assert_close(loss, ref_loss[1::2].reshape(-1))


def test_poptorch_documented_inference_batching():
    """PopTorch's own example: Linear(6, 20) on a [10, 1, 5, 6] input, 10 device iterations."""
    torch.manual_seed(42)
    lin = torch.nn.Linear(6, 20)
    x = torch.randn([10, 1, 5, 6])
    native = lin(x)
    out = poptorch.inferenceModel(lin, poptorch.Options().deviceIterations(10))(x)
    assert out.shape == (10, 1, 5, 20)
    torch.testing.assert_close(out, native)
    every = poptorch.inferenceModel(lin, poptorch.Options().deviceIterations(10).outputMode(
        poptorch.OutputMode.EveryN, 5))(x)
    assert every.shape == (2, 1, 5, 20)
    torch.testing.assert_close(every[0], native[4])
    torch.testing.assert_close(every[1], native[9])


def test_int64_outputs_return_as_int32():
    class ArgMax(torch.nn.Module):
        def forward(self, x):
            return torch.argmax(x, dim=1)
    out = poptorch.inferenceModel(ArgMax())(torch.randn(3, 5))
    assert out.dtype == torch.int32 and out.shape == (3,)


# --- training ---------------------------------------------------------------------------------
def test_training_loss_decreases_and_weights_are_the_models():
    torch.manual_seed(0)
    net = Net()
    opts = make_options(4)
    opts.Training.gradientAccumulation(2)
    model = poptorch.trainingModel(net, opts, optimizer=torch.optim.SGD(net.parameters(), lr=0.5))
    x, y = batch(MB * 8)
    losses = [float(model(x, y)[1]) for _ in range(6)]
    assert losses[-1] < losses[0] * 0.5
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert model.model is net and model.fc is net.fc
    trained = net.fc.weight.detach().clone()
    inference = poptorch.inferenceModel(net)
    torch.testing.assert_close(inference(x, y)[0], torch.nn.functional.linear(x, trained, net.fc.bias))


@pytest.mark.parametrize("reduction, lrs", [(poptorch.ReductionType.Mean, (0.1, 0.1)),
                                            (poptorch.ReductionType.Sum, (0.2, 0.1))])
def test_gradient_accumulation_matches_a_larger_batch(reduction, lrs):
    """As PopTorch's own test: GA=2 with Mean (or Sum at half the learning rate) updates the
    weights as one micro-batch of twice the size does."""
    x, y = batch(4)
    weights = []
    for ga, lr in zip((1, 2), lrs):
        torch.manual_seed(0)
        net = Net()
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(ga).accumulationAndReplicationReductionType(reduction)
        model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=lr))
        for _ in range(3):
            model(x, y)
        weights.append(net.fc.weight.detach().clone())
    torch.testing.assert_close(weights[0], weights[1])


def test_training_output_shapes_follow_poptorch():
    """Final (default): the last micro-batch; a scalar loss stays a scalar. All: one per micro-batch."""
    model, (logits, loss) = run(True, 10, None)
    assert logits.shape == (MB, 4) and loss.shape == ()
    model, (logits, loss) = run(True, 10, "All", ga=2)
    assert logits.shape == (MB * 20, 4) and loss.shape == (20,)
    model, (logits, loss) = run(True, 4, "Final", replicas=2)
    assert logits.shape == (MB * 2, 4) and loss.shape == (2,)


@pytest.mark.parametrize("optimizer, name", [
    (lambda p: poptorch.optim.SGD(p, lr=0.1), "sgd"),
    (lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9), "sgd_momentum"),
    (lambda p: poptorch.optim.Adam(p, lr=0.01), "adam"),
    (lambda p: poptorch.optim.AdamW(p, lr=0.01), "adamw"),
    (lambda p: poptorch.optim.RMSprop(p, lr=0.01), "rmsprop"),
    (lambda p: poptorch.optim.RMSprop(p, lr=0.01, momentum=0.9), "rmsprop_momentum"),
    (lambda p: poptorch.optim.LAMB(p, lr=0.01), "lamb"),
    (lambda p: torch.optim.Adam(p, lr=0.01), "adam"),
])
def test_optimizers_train_and_price_the_matching_update(optimizer, name):
    torch.manual_seed(0)
    net = Net()
    model = poptorch.trainingModel(net, make_options(2), optimizer(net.parameters()))
    x, y = batch(MB * 2)
    first = float(model(x, y)[1])
    for _ in range(5):
        last = float(model(x, y)[1])
    assert last < first
    updates = [op for op in model.executable.graph.ops if op.pass_ == "update"]
    assert updates and all(op.attrs["optimizer"] == name for op in updates)


def test_unsupported_optimizer_is_an_error():
    net = Net()
    with pytest.raises(AssertionError, match="Unsupported optimizer type Adagrad"):  # as PopTorch's
        poptorch.trainingModel(net, optimizer=torch.optim.Adagrad(net.parameters()))


def test_set_optimizer_before_compiling_changes_the_priced_update_after_it_is_popart_s_error():
    net = Net()
    model = poptorch.trainingModel(net, make_options(1))
    model.setOptimizer(poptorch.optim.Adam(net.parameters(), lr=0.01))
    model(*batch(MB))
    assert {op.kind for op in model.executable.graph.ops if op.pass_ == "update"} == {"adam_update"}
    with pytest.raises(poptorch.Error, match="Can not replace optimizer of type Adam with new optimizer of type SGD"):
        model.setOptimizer(torch.optim.SGD(net.parameters(), lr=0.01))


class _BigGradient(torch.nn.Module):
    """A weight whose gradient is 40,000 a micro-batch of 2 (ones in, the output summed and scaled): four of
    them sum past float16's 65,504, their mean does not."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1, bias=False)

    def forward(self, x):
        return poptorch.identity_loss(self.fc(x).sum() * 20000.0, reduction="none")


def test_float16_accumulators_keep_a_running_mean_as_poptorchs():
    """PopTorch sets MeanReductionStrategy.Running for float16 gradient accumulators (poptorch optim.py), and
    PopART keeps each gradient's running mean in them: four micro-batches whose gradients sum past float16's
    range still train, to the exact mean's weights; a float16 optimizer given after a compile with Post is
    PopTorch's ValueError."""
    torch.manual_seed(0)
    net = _BigGradient()
    start = net.fc.weight.detach().clone()
    optimizer = poptorch.optim.SGD(net.parameters(), lr=1e-6, accum_type=torch.float16)
    model = poptorch.trainingModel(net, make_options(ga=4), optimizer)
    model(torch.ones(4 * MB, 4))
    assert model.options.Training.meanAccumulationAndReplicationReductionStrategy == \
        poptorch.MeanReductionStrategy.Running
    assert torch.allclose(net.fc.weight.detach(), start - 1e-6 * 40000.0, atol=1e-4)  # the mean's step, finite
    other = _BigGradient()
    post = poptorch.trainingModel(other, make_options(ga=4), poptorch.optim.SGD(other.parameters(), lr=1e-6))
    post(torch.ones(4 * MB, 4))
    assert post.options.Training.meanAccumulationAndReplicationReductionStrategy == poptorch.MeanReductionStrategy.Post
    with pytest.raises(ValueError, match="would require changing options.Training.meanAccumulationAndReplication"):
        post.setOptimizer(poptorch.optim.SGD(other.parameters(), lr=1e-6, accum_type=torch.float16))


# --- the executor's other methods ------------------------------------------------------------------
def test_host_weights_are_dirty_after_a_training_call_as_poptorchs():
    """copyWeightsToHostIfNeeded copies (True) only when a training call has changed the weights since the
    host last read them; an inference model never needs it. Each copy is PopART's WeightsToHost run."""
    net = Net()
    model = poptorch.trainingModel(net, make_options(1), torch.optim.SGD(net.parameters(), lr=0.1))
    model.compile(*batch(MB))
    assert not model.copyWeightsToHostIfNeeded()  # nothing trained yet
    model(*batch(MB))
    assert model.copyWeightsToHostIfNeeded() and not model.copyWeightsToHostIfNeeded()
    model(*batch(MB))
    model.copyWeightsToHost()
    assert not model.copyWeightsToHostIfNeeded()
    model(*batch(MB))
    model.copyWeightsToDevice()  # the host's weights are written over the device's: nothing to read back
    assert not model.copyWeightsToHostIfNeeded()
    model(*batch(MB))
    model.detachFromDevice()  # PopTorch reads a training model's weights back before it detaches
    assert not model.copyWeightsToHostIfNeeded()
    inference = poptorch.inferenceModel(Net())
    inference(*batch(MB))
    assert not inference.copyWeightsToHostIfNeeded()
    assert sim.variable_copy_seconds(model.executable, False) > 0


def test_attach_detach_destroy():
    model = poptorch.inferenceModel(Net())
    assert not model.isCompiled() and not model.isAttachedToDevice()
    with pytest.raises(poptorch.Error, match="Model has not been compiled or has been destroyed."):
        model.attachToDevice()
    with pytest.raises(poptorch.Error, match="has not been compiled"):
        model.copyWeightsToDevice()
    model(*batch(MB))
    assert model.isAttachedToDevice()
    with pytest.raises(poptorch.Error, match="Device is already attached"):
        model.attachToDevice()
    model.detachFromDevice()
    with pytest.raises(poptorch.Error, match="Device is not attached"):
        model.detachFromDevice()
    model(*batch(MB))  # re-attaches
    assert model.isAttachedToDevice()
    model.copyWeightsToHost()
    model.destroy()
    assert not model.isCompiled() and not model.isAttachedToDevice()
    model(*batch(MB))  # recompiles
    assert model.isCompiled()


def test_connection_never_compiles_but_does_not_run():
    o = poptorch.Options().connectionType(poptorch.ConnectionType.Never)
    model = poptorch.inferenceModel(Net(), o)
    model.compile(*batch(MB))
    assert model.isCompiled() and not model.isAttachedToDevice()
    with pytest.raises(AssertionError, match="offline device"):
        model(*batch(MB))


def test_compile_twice_warns_and_shape_changes_are_errors(caplog):
    model = poptorch.inferenceModel(Net(), make_options(2))
    model.compile(*batch(4))
    model.compile(*batch(4))
    assert "Call to compile() ignored" in caplog.text
    with pytest.raises(poptorch.Error, match=r"Shape mismatch for x: expected \[2, 8\] but got \[4, 8\]"):
        model(*batch(8))


class Scaled(torch.nn.Module):
    """A Python value (``k``) chooses the graph: a constant of the compiled model."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x, k):
        return self.fc(x) * k if k < 5 else torch.relu(self.fc(x)).exp()


@pytest.mark.parametrize("call, message", [
    (lambda m, x: m(x, 7), "Value mismatch for k: expected 2 but got 7"),
    (lambda m, x: m(x, 2.0), "Type mismatch for k: expected <class 'int'> but got <class 'float'>"),
    (lambda m, x: m(x.half(), 2), "Data type mismatch for x: expected torch.float32 but got torch.float16"),
    (lambda m, x: m(x, 2, 3), r"do not fit Scaled.forward\(x, k\): too many positional arguments"),
])
def test_inputs_must_match_the_compiled_call(call, message):
    """PopTorch's ``validateInputs``: a non-tensor argument is a constant of the graph, so a new
    value is an error (it used to run the old graph silently); ``m(x, k=2)`` is ``m(x, 2)``."""
    model = poptorch.inferenceModel(Scaled(), make_options())
    x = torch.ones(MB, 8)
    model(x, 2)
    model(x, k=2)
    model(k=2, x=x)
    with pytest.raises(poptorch.Error, match=message):
        call(model, x)


def test_save_and_load_recompile(tmp_path):
    net = Net()
    model = poptorch.inferenceModel(net, make_options(2))
    model.compileAndExport(str(tmp_path / "m.poptorch"), *batch(4))
    again = poptorch.load(str(tmp_path / "m.poptorch"))
    assert again.isCompiled()
    out = again(*batch(4))
    assert out[0].shape == (4, 4)


def test_non_contiguous_inputs_are_converted_with_poptorch_warning(caplog):
    """PopTorch's ArgsParser makes each non-contiguous input contiguous (warning once), so a model
    that views its input (Frozen in Time's ``x.view(-1, C, H, W)`` of an expanded video batch)
    runs; the simulator's capture and CPU run see the contiguous micro-batches too."""

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.fc(x.view(-1, 8))

    torch.manual_seed(0)
    net = Flat()
    x = torch.rand(4, 4, 2).transpose(1, 2)  # (4, 2, 4), not contiguous: view(-1, 8) fails on it
    assert not x.is_contiguous()
    m = poptorch.inferenceModel(net, poptorch.Options().deviceIterations(2))
    with caplog.at_level("WARNING", logger="poptorch"):
        out = m(x)
        m(x)
    assert torch.equal(out, net(x.contiguous()))
    warned = [r for r in caplog.records if "not contiguous" in r.getMessage()]
    assert len(warned) == 1
    assert m.simulation.cycle_count > 0


def test_out_of_memory_is_a_poptorch_error_raised_at_poplar_compilation():
    """A model that does not fit fails to compile as under PopTorch: a ``poptorch.Error`` of PopART's
    type naming the Poplar compilation stage (Graphcore's available_memory sweep.py looks for that
    stage in the output to tell an out-of-memory point from a crash), and still the simulator's
    ``sim.OutOfMemoryError`` with its shortfall."""
    model = torch.nn.Linear(8192, 4 * 8192, bias=False)  # 1 GiB of float32 weights: more than an IPU holds
    m = poptorch.inferenceModel(model)
    with pytest.raises(poptorch.Error) as info:
        m.compile(torch.ones(1, 8192))
    e = info.value
    assert isinstance(e, sim.OutOfMemoryError) and e.shortfall_bytes > 0 and e.ipu == 0
    assert e.type == "popart_exception" and e.message.startswith("Out of memory on IPU 0")
    assert "popart::Session::prepareDevice: Poplar compilation" in str(e)
    assert "popart::Session::prepareDevice: Poplar compilation" in e.location
    assert not m.isCompiled()


def test_host_converted_inputs_are_named_in_the_notes():
    """PopTorch converts int64, float64 and bfloat16 inputs on the host before every run
    (PoplarExecutable.cpp); the run's notes name them and their bytes, untimed; int32 inputs need none."""
    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(100, 8)

        def forward(self, ids, scale):
            return self.table(ids).sum(1) * scale.float()

    ids = torch.randint(0, 100, (4, 16))
    model = poptorch.inferenceModel(Lookup())
    model(ids, torch.ones(4, 1, dtype=torch.float64))
    (note,) = [n for n in model.simulation.executable.notes if "converts them on the host" in n]
    assert note.startswith("inputs ids (int64 -> int32), scale (float64 -> float32):")
    assert f"{(ids.numel() + 4) * 8:,} bytes read each call" in note
    plain = poptorch.inferenceModel(Lookup())
    plain(ids.int(), torch.ones(4, 1))
    assert not [n for n in plain.simulation.executable.notes if "converts them on the host" in n]


@pytest.mark.parametrize("training", [False, True])
def test_without_cpu_outputs_calls_return_zeros_shaped_as_the_outputs(training, monkeypatch):
    """Options.computeOutputsOnCpu(False), or IPUSIM_CPU_OUTPUTS=0 without it: the model does not run on the
    CPU for a call's outputs; they come back as zeros with the shapes and dtypes of the CPU run's (per the
    output mode), anchored tensors too, the weights stay as they are, and the simulated run is the same."""
    di, ga, replicas = 2, (2 if training else 1), 2
    monkeypatch.setenv("IPUSIM_CPU_OUTPUTS", "1")

    def call(cpu_outputs, env=None):
        if env is not None:
            monkeypatch.setenv("IPUSIM_CPU_OUTPUTS", env)
        torch.manual_seed(0)
        net = Net()
        calls = []
        net.register_forward_hook(lambda *_: calls.append(1))
        o = make_options(di, "All", ga, replicas)
        if cpu_outputs is not None:
            o.computeOutputsOnCpu(cpu_outputs)
        if training:
            o.anchorTensor("g", "Gradient___fc.bias")
        wrap = poptorch.trainingModel if training else poptorch.inferenceModel
        model = wrap(net, o)
        model.compile(*batch(MB * di * ga * replicas))
        compiled_calls, weight = len(calls), net.fc.weight.detach().clone()
        out = model(*batch(MB * di * ga * replicas))
        anchored = model.getAnchoredTensor("g") if training else None
        return model, out, anchored, len(calls) - compiled_calls, bool((net.fc.weight == weight).all())

    cpu, cpu_out, cpu_anchor, cpu_runs, cpu_kept = call(None)
    assert cpu_runs == di * ga * replicas and cpu_kept == (not training)
    for cpu_outputs, env in ((False, "1"), (None, "0")):
        model, out, anchored, runs, kept = call(cpu_outputs, env)
        assert runs == 0 and kept
        assert [(t.shape, t.dtype) for t in out] == [(t.shape, t.dtype) for t in cpu_out]
        assert all(not t.any() for t in out)
        if training:
            assert anchored.shape == cpu_anchor.shape and not anchored.any()
        assert model.cycleCount() == cpu.cycleCount()
        assert model.getPerfCounters() == cpu.getPerfCounters()
        assert any("outputs not computed on the CPU" in n for n in model.executable.notes)
        assert not any("computeOutputsOnCpu" in n and "no modelled effect" in n for n in model.executable.notes)
    assert not any("outputs not computed" in n for n in cpu.executable.notes)
    model, *_ = call(True, "0")  # the option overrides the variable
    assert not any("outputs not computed" in n for n in model.executable.notes)


@pytest.mark.parametrize("training", [False, True])
def test_a_model_on_the_meta_device_is_simulated_without_its_values(training, monkeypatch):
    """A model built under ``torch.device("meta")`` (weights with shapes and no data: one too large for the
    host's memory) is simulated as the same model with real weights, cycle for cycle, with its outputs
    zeros of their shapes, as with computeOutputsOnCpu(False), which it needs not set; its notes say so.
    Before, the capture's run of its values failed with torch's "Cannot copy out of meta tensor"."""
    monkeypatch.setenv("IPUSIM_CPU_OUTPUTS", "1")
    di, ga = 2, (2 if training else 1)
    runs = []
    for meta in (True, False):
        torch.manual_seed(0)
        with torch.device("meta" if meta else "cpu"):
            net = Net()
        o = make_options(di, "All", ga)
        model = poptorch.trainingModel(net, o) if training else poptorch.inferenceModel(net, o)
        runs.append((model, model(*batch(MB * di * ga))))
    (meta_model, meta_out), (real_model, real_out) = runs
    assert meta_model.cycleCount() == real_model.cycleCount() > 0
    assert meta_model.getPerfCounters() == real_model.getPerfCounters()
    assert [(t.shape, t.dtype) for t in meta_out] == [(t.shape, t.dtype) for t in real_out]
    assert all(t.device.type == "cpu" and not t.any() for t in meta_out)
    assert any("meta device" in n for n in meta_model.executable.notes)
    assert not any("meta device" in n for n in real_model.executable.notes)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch._dynamo's imports use torch.jit's
def test_a_torch_compiled_model_runs_as_the_module_it_wraps():
    """``torch.compile(model)`` (a script written for GPUs) is the module it wraps on the simulated IPU: the
    same cycles and torch's values, a training step, and a note that torch.compile's own compilation is not
    run. Before, capturing the wrapper ran TorchInductor, which failed on the model's ``ipu`` device."""
    torch.manual_seed(0)
    net = Net()
    x, labels = batch(MB)
    compiled = poptorch.inferenceModel(torch.compile(net))
    plain = poptorch.inferenceModel(net)
    for got, want in zip(compiled(x, labels), net(x, labels)):
        torch.testing.assert_close(got, want)
    plain(x, labels)
    assert compiled.simulation.cycle_count == plain.simulation.cycle_count > 0
    assert any("torch.compile" in n for n in compiled.executable.notes)
    assert not any("torch.compile" in n for n in plain.executable.notes)
    trained = poptorch.trainingModel(torch.compile(Net()), optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    assert float(trained(x, labels)[1]) > 0


def test_a_slow_cpu_run_of_the_outputs_says_once_how_to_skip_it(monkeypatch, caplog):
    """A call whose CPU run of the outputs takes longer than SLOW_CPU_OUTPUTS_S logs one warning a model
    naming computeOutputsOnCpu, IPUSIM_CPU_OUTPUTS and --no-cpu-outputs; none when the run is skipped."""
    from sim.poptorch import executor
    monkeypatch.setattr(executor, "SLOW_CPU_OUTPUTS_S", -1.0)  # every run counts as slow
    monkeypatch.delenv("IPUSIM_CPU_OUTPUTS", raising=False)
    for skip in (False, True):
        caplog.clear()
        model = poptorch.inferenceModel(Net(), make_options().computeOutputsOnCpu(not skip))
        with caplog.at_level("WARNING", logger="poptorch"):
            model(*batch(MB))
            model(*batch(MB))
        told = [r.getMessage() for r in caplog.records if "outputs on the CPU took" in r.getMessage()]
        assert len(told) == (0 if skip else 1)
        assert skip or all(s in told[0] for s in ("computeOutputsOnCpu(False)", "IPUSIM_CPU_OUTPUTS=0",
                                                   "--no-cpu-outputs"))


def test_a_cpu_outputs_variable_other_than_0_or_1_is_a_clear_error(monkeypatch):
    """IPUSIM_CPU_OUTPUTS=false would otherwise read as "on": the error names the variable and its values."""
    monkeypatch.setenv("IPUSIM_CPU_OUTPUTS", "false")
    with pytest.raises(sim.OptionsError, match=r"IPUSIM_CPU_OUTPUTS='false': set it to 0 .* or 1"):
        poptorch.inferenceModel(Net(), make_options())(*batch(MB))
    monkeypatch.setenv("IPUSIM_CPU_OUTPUTS", "false")
    model = poptorch.inferenceModel(Net(), make_options().computeOutputsOnCpu(True))  # the option decides
    model(*batch(MB))
