"""sim.poptorch's public surface against PopTorch's (tests/data/poptorch_public_api.txt), and
the behaviour of the API added with it: options from JSON and the environment, log levels,
deprecations, compilation time and hooks, wrapping rules, anchors, the optimizers' IPU state,
loss scaling and accumulator dtypes, cond / dynamic slices, custom argument types, data
loading with samplers and distributed shuffling, the module repr."""

import copy
import math
import pathlib
import re

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402
from sim.errors import UnsupportedOpError  # noqa: E402
from sim.poptorch import options as popt_options  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


# --- the API surface ------------------------------------------------------------------------
def public_names() -> list[tuple[str, str]]:
    rows = []
    for line in (ROOT / "tests/data/poptorch_public_api.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, source = line.split()
            rows.append((name, source))
    return rows


def not_provided() -> dict[str, str]:
    """name -> reason, from the "Not provided" table of docs/poptorch.md."""
    text = (ROOT / "docs/poptorch.md").read_text()
    section = text.split("### Not provided", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("name", "---"):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            table[name] = cells[1]
    return table


def resolve(name: str):
    """The sim.poptorch object for a PopTorch name; an instance's attribute when the class has
    it only per instance (Options' groups, Stage.blocks)."""
    parts = name.split(".")[1:]
    obj = poptorch
    for i, part in enumerate(parts):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        prototypes = {poptorch.Options: poptorch.Options, poptorch.Stage: lambda: poptorch.Stage("A")}
        if obj in prototypes and hasattr(prototypes[obj](), part):
            obj = getattr(prototypes[obj](), part)
            continue
        raise AttributeError(".".join(["poptorch", *parts[:i + 1]]))
    return obj


def test_the_names_come_from_poptorchs_sources():
    rows = public_names()
    assert len(rows) > 250
    assert all(source.startswith(("python/", "docs/")) for _, source in rows)
    names = {n for n, _ in rows}
    for expected in ("poptorch.Options.anchorTensor", "poptorch.PoplarExecutor.compilationTime",
                     "poptorch.options._TrainingOptions.gradientAccumulation", "poptorch.cond",
                     "poptorch.DataLoader.terminate", "poptorch.optim.LAMB", "poptorch.OutputMode.EveryN"):
        assert expected in names


def test_every_public_name_exists_or_is_listed_as_not_provided():
    missing = []
    skipped = not_provided()
    for name, source in public_names():
        if name in skipped:
            continue
        try:
            resolve(name)
        except AttributeError:
            missing.append(f"{name} ({source})")
    assert not missing, "missing from sim.poptorch and not in docs/poptorch.md's table: " + ", ".join(missing)


def test_the_not_provided_table_is_true():
    table = not_provided()
    assert table == {}  # every public name of PopTorch is provided
    for name, reason in table.items():
        assert len(reason) > 20, f"{name}: give the reason"
        if name.startswith("poptorch."):
            with pytest.raises(AttributeError):
                resolve(name)


# --- options ----------------------------------------------------------------------------------
def test_from_json_and_poptorch_default_options(monkeypatch):
    o = poptorch.Options().from_json('{"deviceIterations": 4, "outputMode": "OutputMode.Sum", '
                                     '"Training.gradientAccumulation": 2, "_Popart.set": ["foo", 1]}')
    assert (o.device_iterations, o.output_mode, o.Training.gradient_accumulation) == \
        (4, poptorch.OutputMode.Sum, 2)
    assert o.unmodelled() == {"_Popart.foo": 1}
    with pytest.raises(poptorch.ConfigFileError, match="unknown option 'Training.nope'"):
        poptorch.Options().from_json('{"Training.nope": 1}')
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS", '{"replicationFactor": 2, "randomSeed": 7}')
    o = poptorch.Options()
    assert o.replication_factor == 2 and o.random_seed == 7
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS", '{"deviceIterations": 0}')
    with pytest.raises(poptorch.ConfigFileError, match="POPTORCH_DEFAULT_OPTIONS: deviceIterations"):
        poptorch.Options()
    monkeypatch.delenv("POPTORCH_DEFAULT_OPTIONS")
    monkeypatch.setenv("POPTORCH_IPU_MODEL", "1")
    assert poptorch.Options().unmodelled() == {"useIpuModel": True}


def test_log_levels_are_poptorchs():
    import logging
    try:
        poptorch.setLogLevel("DEBUG")
        assert poptorch.logger.level == logging.DEBUG
        poptorch.setLogLevel(4)
        assert poptorch.logger.level == logging.ERROR
        with pytest.raises(ValueError, match="Invalid log level integer"):
            poptorch.setLogLevel(5)
        with pytest.raises(ValueError, match="Unknown log level: LOUD. Valid values are DEBUG, ERR, "
                                             "INFO, OFF, TRACE and WARN"):
            poptorch.setLogLevel("LOUD")
    finally:
        poptorch.setLogLevel("WARN")


def test_jit_and_precision_deprecations(caplog):
    o = poptorch.Options()
    with pytest.raises(ValueError, match=re.escape("options.Jit.traceModel(True) is no longer supported")):
        o.Jit.traceModel(True)
    o.Jit.traceModel(False)
    o.Precision.halfFloatCasting(poptorch.HalfFloatCastingBehavior.HalfUpcastToFloat)
    assert caplog.text.count("[Deprecated]") == 3
    assert {"Jit.traceModel", "Precision.halfFloatCasting"} <= set(o.unmodelled())


# --- the executor -------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        self.on_ipu = poptorch.isRunningOnIpu()
        logits = self.fc2(torch.relu(self.fc1(x)))
        return logits, self.loss(logits, y)


def batch(n=4):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g)


def test_compilation_time_hooks_and_is_running_on_ipu():
    calls = []
    pre = poptorch.registerPreCompileHook(lambda: calls.append("pre"))
    post = poptorch.registerPostCompileHook(lambda: calls.append("post"))
    try:
        net = Net()
        model = poptorch.inferenceModel(net)
        with pytest.raises(poptorch.Error, match="Please compile the model before obtaining compilation time"):
            model.compilationTime()
        model(*batch())
        assert calls == ["pre", "post"] and net.on_ipu is True  # the CPU numbers run the IPU path
        net(*batch())
        assert net.on_ipu is False
        assert 0 < model.compilationTime().total_seconds() < 60
        opts = poptorch.Options().showCompilationProgressBar(False)
        quiet = poptorch.inferenceModel(net, opts)
        quiet(*batch())
        with pytest.raises(poptorch.Error, match="Please set showCompilationProgressBar option"):
            quiet.compilationTime()
    finally:
        pre.remove()
        post.remove()
    with pytest.raises(RuntimeError, match="Pre-compile hook must be callable"):
        poptorch.registerPreCompileHook(3)


def test_training_wrap_rules_backward_and_repr():
    net = Net()
    model = poptorch.trainingModel(net)
    with pytest.raises(RuntimeError, match=re.escape("Model has already been wrapped in 'poptorch.trainingModel'")):
        poptorch.trainingModel(net)
    logits, loss = model(*batch())
    with pytest.raises(poptorch.Error, match=r"backward\(\) cannot be called explicitly on outputs"):
        loss.backward()
    inference = poptorch.inferenceModel(model)  # a PoplarExecutor: its model is used
    assert inference.model is net
    model.destroy()
    poptorch.trainingModel(net).destroy()  # wrappable again after destroy()
    net.fc2 = poptorch.BeginBlock(net.fc2, "head", ipu_id=1)
    assert "(fc2): BeginBlock(user_id=head, ipu_id=1) Linear(in_features=16" in repr(poptorch.inferenceModel(net))


def test_rng_state_and_named_buffers():
    model = poptorch.inferenceModel(Net(), poptorch.Options().randomSeed(9))
    with pytest.raises(poptorch.Error, match="Model has not been compiled or has been destroyed"):
        model.rng_state
    model(*batch())
    assert model.rng_state == [9]
    model.rng_state = [1, 2, 3]
    assert model.rng_state == [1, 2, 3]
    with pytest.raises(poptorch.Error, match="No named buffers marked as updatable"):
        model.copyNamedBuffersToDevice()


def test_anchored_gradients_and_updated_weights_are_torchs():
    torch.manual_seed(0)
    net, ref = Net(), Net()
    ref.load_state_dict(net.state_dict())
    opts = poptorch.Options().deviceIterations(2)
    opts.anchorTensor("g", "Gradient___fc2.bias")
    opts.anchorTensor("w", "UpdatedVar___model.fc2.weight", poptorch.OutputMode.All)  # PopTorch 2 name
    model = poptorch.trainingModel(net, opts, poptorch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(AssertionError, match="No tensor with name g found."):
        model.getAnchoredTensor("g")
    x, y = batch(4)
    model(x, y)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    weights = []
    for i in (0, 2):
        ref_opt.zero_grad()
        ref(x[i:i + 2], y[i:i + 2])[1].backward()
        grad = ref.fc2.bias.grad.clone()
        ref_opt.step()
        weights.append(ref.fc2.weight.detach().clone())
    torch.testing.assert_close(model.getAnchoredTensor("g"), grad)  # Final: the last update's
    # All: the copies concatenated along dim 0 as outputs are (PoplarExecutable.cpp), [2 x 4, 16]
    torch.testing.assert_close(model.getAnchoredTensor("w"), torch.cat(weights))
    assert "Gradient___fc1.weight" in model.getTensorNames()
    assert any("anchored tensors g, w" in n for n in model.executable.notes)
    bad = poptorch.Options()
    bad.anchorTensor("act", "fc1/matmul")
    with pytest.raises(poptorch.Error, match="the simulator can anchor Gradient___<parameter>"):
        poptorch.trainingModel(Net(), bad)(*batch())


# --- optimizers -------------------------------------------------------------------------------------
def test_optimizer_ipu_state_dict_and_variable_attributes():
    net = Net()
    opt = poptorch.optim.SGD(net.parameters(), lr=0.05, weight_decay=0.025, loss_scaling=0.75)
    assert opt.variable_attrs.isConstant("momentum") and not opt.variable_attrs.isConstant("lr")
    with pytest.raises(AssertionError, match="Unknown attribute nope"):
        opt.variable_attrs.markAsVariable("nope")
    state = opt.state_dict()
    assert state["ipu_state"] is None and state["ipu_param"] is None
    model = poptorch.trainingModel(net, optimizer=opt)
    model.compile(*batch())
    params = opt.state_dict()["ipu_param"]
    torch.testing.assert_close(params["scaledLearningRate0___specific___fc1.bias"], torch.tensor(0.05 / 0.75))
    torch.testing.assert_close(params["weightDecayScaleFactor0___specific___fc1.bias"],
                               torch.tensor(1 - 0.05 * 0.025))
    torch.testing.assert_close(params["lossScaling_FLOAT"], torch.tensor(0.75))
    adam_net = Net()
    adam = poptorch.optim.Adam(adam_net.parameters(), lr=0.01)
    adam_model = poptorch.trainingModel(adam_net, optimizer=adam)
    adam_model(*batch())
    s = adam.state_dict()
    torch.testing.assert_close(s["ipu_state"]["Accl1___fc2.bias"], adam.state[adam_net.fc2.bias]["exp_avg"])
    torch.testing.assert_close(s["ipu_param"]["learningRate___specific___fc2.bias"], torch.tensor(0.01))
    with pytest.raises(RuntimeError, match="Only IPU optimizer states can be loaded onto the IPU"):
        adam.load_state_dict(torch.optim.Adam(adam_net.parameters()).state_dict())
    adam.load_state_dict(s)
    with pytest.raises(AssertionError, match="Accumulation types must be either torch.float32 or torch.float16"):
        poptorch.optim.Adam(net.parameters(), accum_type=torch.int32)
    with pytest.raises(ValueError, match="Only non-amsgrad Adam/AdamW optimizers are supported"):
        poptorch.trainingModel(Net(), optimizer=torch.optim.Adam(Net().parameters(), amsgrad=True))
    assert poptorch.optim.LAMB(net.parameters()).max_weight_norm == 65500.0


class Tiny(nn.Module):
    """A float16 layer whose loss is so small that its gradients underflow in float16."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.fc(x)
        return out, self.loss(out, y) * 1e-7


def test_loss_scaling_keeps_float16_gradients():
    x, y = batch(4)
    grads = {}
    for scaling in (None, 4096.0):
        torch.manual_seed(1)
        net = Tiny().half()
        opts = poptorch.Options()
        opts.anchorTensor("g", "Gradient___fc.weight")
        model = poptorch.trainingModel(net, opts, poptorch.optim.SGD(net.parameters(), lr=1.0,
                                                                     loss_scaling=scaling))
        model(x.half(), y)
        grads[scaling] = model.getAnchoredTensor("g").float()
    assert int((grads[None] != 0).sum()) == 0  # every float16 gradient underflows to zero
    assert int((grads[4096.0] != 0).sum()) > 24  # scaled by 4096, they survive the backward pass
    with torch.no_grad():  # and come back unscaled: the float32 gradient, to float16's precision
        ref = Tiny()
        ref.load_state_dict({k: v.float() for k, v in net.state_dict().items()})
    out = ref(x, y)[1]
    out.backward()
    torch.testing.assert_close(grads[4096.0], ref.fc.weight.grad, rtol=0.05, atol=2e-10)
    # in float32 loss scaling changes nothing
    results = []
    for scaling in (None, 1024.0):
        torch.manual_seed(1)
        net = Net()
        poptorch.trainingModel(net, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1,
                                                                 loss_scaling=scaling))(*batch())
        results.append(net.fc1.weight.detach().clone())
    torch.testing.assert_close(results[0], results[1], rtol=1e-6, atol=1e-7)


def test_float16_optimizer_state_is_rounded_and_priced_as_float16():
    net = Net()
    opt = poptorch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, velocity_accum_type=torch.float16,
                             use_combined_accum=True)
    model = poptorch.trainingModel(net, optimizer=opt)
    model(*batch())
    buf = opt.state[net.fc1.weight]["momentum_buffer"]
    assert buf.dtype == torch.float32 and torch.equal(buf, buf.half().float())
    states = [t for t in model.executable.graph.tensors.values() if t.role == "state"]
    assert states and all(t.dtype == "float16" for t in states)
    # with momentum, use_combined_accum is modelled (the velocity is the accumulator), so not noted
    assert not any("use_combined_accum" in n for n in model.executable.notes)
    assert model.executable.optimizer == ("sgd_momentum (state float16; the velocity as the gradient "
                                          "accumulator; accumulators float32)")


def test_combined_accumulation_keeps_the_gradients_in_the_velocity():
    """PopTorch's SGD(use_combined_accum=True) with momentum is PopART's SGD1: with gradient
    accumulation each micro-batch's gradient is added into the velocity, so there are no
    accumulator tensors and the update reads no gradient beside the velocity; without momentum
    (SGD0) the option has nothing to act on and is listed as not modelled."""
    def compiled(**kw):
        net = Net()
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(2)
        model = poptorch.trainingModel(net, opts, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1, **kw))
        model(*batch(4))
        return model.executable
    separate, combined = compiled(momentum=0.9), compiled(momentum=0.9, use_combined_accum=True)
    roles = lambda ex: sorted({t.role for t in ex.graph.tensors.values()})  # noqa: E731
    assert "accumulator" in roles(separate) and "accumulator" not in roles(combined)
    update = next(op for op in combined.graph.ops if op.kind == "sgd_update")
    accumulate = next(op for op in combined.graph.ops
                      if op.kind == "accumulate" and op.attrs["weight"] == update.attrs["weight"])
    assert accumulate.outputs[0] in update.inputs and combined.graph.tensors[accumulate.outputs[0]].role == "state"
    assert combined.memory[0].total_bytes < separate.memory[0].total_bytes
    plain = compiled(use_combined_accum=True)
    assert any("use_combined_accum=True: accepted, no modelled effect" in n for n in plain.notes)


def test_max_grad_norm_clips_the_global_norm():
    torch.manual_seed(2)
    net, ref = Net(), Net()
    ref.load_state_dict(net.state_dict())
    poptorch.trainingModel(net, optimizer=poptorch.optim.Adam(net.parameters(), lr=0.1,
                                                              max_grad_norm=0.01))(*batch())
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.1)
    ref(*batch())[1].backward()
    torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.01)
    ref_opt.step()
    torch.testing.assert_close(net.fc1.weight, ref.fc1.weight)


# --- in-model ops ------------------------------------------------------------------------------------
class Control(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, start, flag):
        h = self.fc(x)
        piece = poptorch.dynamic_slice(h, 1, start, 3, 1)
        h = poptorch.dynamic_update(h, torch.zeros_like(piece), 1, start, 3)
        out = poptorch.cond(flag, lambda a: a * 2, [h], lambda a: a - 1, [h])[0]
        return out, piece


def test_cond_and_dynamic_slices_compute_torchs_values():
    torch.manual_seed(3)
    net = Control()
    x = torch.randn(2, 8)
    for flag in (True, False):
        start = torch.tensor([2])
        out, piece = poptorch.inferenceModel(net)(x, start, torch.tensor([flag]))
        with torch.no_grad():
            h = net.fc(x)
        torch.testing.assert_close(piece, h[:, 2:5])
        h[:, 2:5] = 0
        torch.testing.assert_close(out, h * 2 if flag else h - 1)
    model = poptorch.inferenceModel(net)
    model(x, torch.tensor([1]), torch.tensor([True]))
    kinds = {op.name: op.kind for op in model.executable.graph.ops}
    assert any(n.startswith("dynamic_slice") for n in kinds) and any(n.startswith("cond_select") for n in kinds)
    assert any("poptorch.cond: both branches are priced" in n for n in model.executable.notes)
    with pytest.raises(ValueError, match="expects then_inps and else_inps tensors to be a list"):
        poptorch.cond(torch.tensor(True), lambda: x, (), lambda: x, [])
    with pytest.raises(poptorch.Error, match="Size must be an integer"):
        poptorch.dynamic_slice(x, 0, torch.tensor(0), 1.5, 1)


def test_dynamic_slices_under_torch_export_are_priced_as_under_torch_fx():
    """A model torch.fx cannot trace (a branch on a shape) is captured by torch.export, where each dynamic slice
    and update is one node priced by its own rule (the update's CPU ops, an index_copy, have none: it failed)."""
    class Model(nn.Module):
        def forward(self, x, i):
            if x.shape[0] > 4:
                x = x * 1.0
            y = poptorch.dynamic_update(x, x[:2] * 2, 0, i, 2)
            return poptorch.dynamic_slice(y, 0, i, 2, 1)

    x, i = torch.randn(8, 4), torch.tensor([3])
    model = poptorch.inferenceModel(Model())
    torch.testing.assert_close(model(x, i), x[:2] * 2)
    ops = [(op.kind, op.name) for op in model.executable.graph.ops if op.name.startswith("dynamic_")]
    assert ops == [("copy", "dynamic_update"), ("copy", "dynamic_slice")]
    assert "graph captured with torch.export" in model.executable.notes


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


class PairParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):
        yield struct.a
        yield struct.b

    def reconstruct(self, original, tensors):
        return Pair(next(tensors), next(tensors))


def test_custom_argument_types():
    class Model(nn.Module):
        def forward(self, pair):
            return pair.a + pair.b

    with pytest.raises(poptorch.Error, match="arg_parser must inherit from ICustomArgParser"):
        poptorch.registerCustomArgParser(Pair, object())
    poptorch.registerCustomArgParser(Pair, PairParser())
    try:
        a, b = torch.randn(4, 3), torch.randn(4, 3)
        model = poptorch.inferenceModel(Model(), poptorch.Options().deviceIterations(2))
        out = model(Pair(a, b))
        assert torch.equal(out, a + b)
        # a call's objects are compared by their tensors: another object with the same shapes is fine
        model(Pair(torch.zeros(4, 3), b))
        with pytest.raises(poptorch.Error, match=r"Shape mismatch for pair\[1\]: expected \[2, 3\] but got \[1, 3\]"):
            model(Pair(a, torch.ones(2, 3)))
    finally:
        poptorch.registerCustomArgParser(Pair, None)



class _SwapHelper:
    """A substitution manager as PopTorch Geometric's: swaps a module-level function for another."""

    def replace(self):
        self.saved = _helpers.helper
        _helpers.helper = torch.tanh

    def restore(self):
        _helpers.helper = self.saved


class _helpers:
    helper = staticmethod(torch.relu)


def test_substitution_managers_entered_around_capture_and_cpu_run(monkeypatch):
    """PopTorch Geometric registers a manager through ``importlib`` as ``poptorch._poplar_executor``
    (its __init__.py); PopTorch enters it around tracing, so the captured model is the substituted one."""
    import importlib.util
    import sys
    import warnings

    from sim.poptorch import executor

    monkeypatch.setitem(sys.modules, "poptorch", poptorch)
    monkeypatch.delitem(sys.modules, "poptorch._poplar_executor", raising=False)
    spec = importlib.util.find_spec("poptorch._poplar_executor")
    with warnings.catch_warnings():  # load_module is deprecated, but it is what poptorch_geometric calls
        warnings.simplefilter("ignore", DeprecationWarning)
        module = spec.loader.load_module()  # as poptorch_geometric/__init__.py loads it
    saved = list(executor.SUBSTITUTION_MANAGERS)
    try:
        module._OverwriteContextManager.registerSubsitutionManager(_SwapHelper)
        module._OverwriteContextManager.registerSubsitutionManager(_SwapHelper)  # once only
        assert executor.SUBSTITUTION_MANAGERS.count(_SwapHelper) == 1

        class Model(nn.Module):
            def forward(self, x):
                return _helpers.helper(x) * 2

        x = torch.randn(4, 3)
        model = poptorch.inferenceModel(Model())
        out = model(x)
        assert "tanh" in [op.kind for op in model.executable.graph.ops]
        assert "relu" not in [op.kind for op in model.executable.graph.ops]
        assert torch.allclose(out, torch.tanh(x) * 2)
        assert _helpers.helper is torch.relu  # restored afterwards
    finally:
        executor.SUBSTITUTION_MANAGERS[:] = saved


def test_utils_module_for_poptorch_geometric(monkeypatch):
    """``poptorch._utils`` as PopTorch Geometric's collater imports it, under the ``poptorch`` name;
    a parser registered for a base class applies to its subclasses, as PopTorch's getCustomParser."""
    import sys

    monkeypatch.setitem(sys.modules, "poptorch", poptorch)
    monkeypatch.delitem(sys.modules, "poptorch._utils", raising=False)
    from poptorch._utils import (combine_batch_tensors_gen, flattenTensorStructure,  # noqa: E402
                                 reconstructTensorStructure)

    a = [torch.zeros(2, 3), torch.ones(1)]
    b = [torch.ones(2, 3), torch.zeros(1)]
    joined = list(combine_batch_tensors_gen([a, b]))
    assert [t.shape for t in joined] == [torch.Size([4, 3]), torch.Size([2])]
    assert torch.equal(joined[0][2:], b[0])

    class SubPair(Pair):
        pass

    poptorch.registerCustomArgParser(Pair, PairParser())
    try:
        s = SubPair(torch.zeros(1), torch.ones(2))
        flat = flattenTensorStructure({"p": s, "n": 3, "t": (torch.ones(3),)})
        assert [t.numel() for t in flat] == [1, 2, 3]
        rebuilt = reconstructTensorStructure({"p": s, "n": 3, "t": (torch.ones(3),)},
                                             [torch.full((1,), 5.0), torch.full((2,), 6.0), torch.zeros(3)])
        assert rebuilt["n"] == 3 and float(rebuilt["p"].a) == 5.0 and torch.equal(rebuilt["t"][0], torch.zeros(3))
    finally:
        poptorch.registerCustomArgParser(Pair, None)


# --- data ---------------------------------------------------------------------------------------------
def test_dataloader_batch_sampler_joins_micro_batches():
    dataset = torch.utils.data.TensorDataset(torch.arange(20.0))
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(dataset), 2, False)
    loader = poptorch.DataLoader(poptorch.Options().deviceIterations(3), dataset, batch_sampler=sampler)
    assert loader.combinedBatchSize == 6 and len(loader) == 3
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17]]
    with pytest.raises(poptorch.Error, match="mutually exclusive with batch_size, shuffle"):
        poptorch.DataLoader(poptorch.Options(), dataset, batch_size=2, batch_sampler=sampler)


def test_a_model_fed_by_a_dataloader_notes_that_data_loading_is_not_timed():
    x, y = batch(8)
    opts = poptorch.Options().deviceIterations(2)
    loader = poptorch.DataLoader(opts, torch.utils.data.TensorDataset(x, y), batch_size=2,
                                 mode=poptorch.DataLoaderMode.AsyncRebatched)
    assert poptorch.dataloader.loader_modes(opts) == ["AsyncRebatched"]
    model = poptorch.inferenceModel(Net(), opts)
    for xs, ys in loader:
        model(xs, ys)
    note = "poptorch.DataLoader (AsyncRebatched) made with these options: the host's data loading"
    assert any(n.startswith(note) for n in model.executable.notes)
    # a model whose options fed no loader says nothing of one
    plain = poptorch.inferenceModel(Net(), poptorch.Options().deviceIterations(2))
    plain(*batch(4))
    assert not any("poptorch.DataLoader" in n for n in plain.executable.notes)


def test_distributed_shuffle_permutes_the_whole_dataset_first():
    dataset = torch.utils.data.TensorDataset(torch.arange(16))
    seen = []
    for pid in range(2):
        o = poptorch.Options().randomSeed(5)
        o.Distributed.configureProcessId(pid, 2)
        seen.append(torch.cat([b[0] for b in poptorch.DataLoader(o, dataset, batch_size=2, shuffle=True)]))
    order = torch.randperm(16, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.cat(seen), order)


def test_unmodelled_environment_is_noted(monkeypatch):
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": "true"}')
    model = poptorch.inferenceModel(Net())
    model(*batch())
    assert "environment variable POPLAR_ENGINE_OPTIONS is set: no modelled effect" in model.executable.notes
    assert not math.isnan(model.simulation.seconds)


def test_profiling_channel_and_print(capsys):
    channel = poptorch.profiling.Channel("app")
    obj = object()
    assert channel.instrument(obj, "x") is obj
    with channel.tracepoint("work"):
        pass
    net = nn.Sequential(nn.Linear(2, 2))
    poptorch.BeginBlock(net[0], "b", ipu_id=0)
    poptorch.print(net)
    out = capsys.readouterr().out
    assert "BeginBlock(user_id=b, ipu_id=0) Linear" in out
    assert popt_options._TrainingOptions is type(poptorch.Options().Training)


def test_an_inference_model_notes_no_optimizer():
    """inferenceModel takes no optimizer, so its run has no note about one (it said an 'sgd' optimizer
    had no effect)."""
    model = poptorch.inferenceModel(torch.nn.Linear(4, 4))
    model(torch.randn(2, 4))
    assert not [n for n in model.executable.notes if "optimizer" in n]


def test_attribute_scopes_are_accepted_and_noted():
    """poptorch.Attribute as Graphcore's BERT and GPT-2 use it (outline_attribute: entered in a forward
    pre-hook, left in a forward hook): the model runs and the run notes the attributes as having no
    modelled effect; a value that is not a dict is PopTorch's error."""
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    context = poptorch.Attribute(__outline={"layer": "A"})

    def enable(*args):
        context.__enter__()

    def disable(*args):
        context.__exit__(None, None, None)

    net[0].register_forward_pre_hook(enable)
    net[0].register_forward_hook(disable)
    model = poptorch.inferenceModel(net)
    model(torch.randn(2, 4))
    assert any(n.startswith("poptorch.Attribute __outline={'layer': 'A'}: accepted, no modelled effect")
               for n in model.executable.notes)
    with pytest.raises(TypeError, match="must be a dict"):
        poptorch.Attribute(__outline="A")


@pytest.mark.parametrize("method", ["torch.fx", "torch.export"])
def test_custom_op_is_priced_by_its_rule_and_remapce_is_built_in(method):
    """poptorch.custom_op as Graphcore's GPT-2 calls it (RemapCE on the attention weights): the built-in
    rule is a remap of the input, the CPU numbers keep its values; another custom op needs a
    register_op rule under "domain::name", which sees the op's inputs and outputs, and its CPU outputs
    are PopTorch's zero placeholders, as the run's notes say. The same when torch.fx cannot trace the
    model (Python control flow on a shape, as Conformer's CTC loss and Swin have) and torch.export
    captures it: the op stays one node there (ipusim::custom_op), not its CPU stand-in's ops."""
    class Net(nn.Module):
        def __init__(self, op):
            super().__init__()
            self.fc, self.op = nn.Linear(8, 8), op

        def forward(self, x):
            if method == "torch.export" and x.shape[0] > 1:  # torch.fx cannot trace this
                x = x * 1
            y = self.fc(x)
            out = poptorch.custom_op([y], self.op, "ai.graphcore", 1, example_outputs=[y],
                                     attributes={"grain_size": 8})
            return out[0] * 2

    x = torch.randn(4, 8)
    remap = poptorch.inferenceModel(Net("RemapCE"))
    assert torch.allclose(remap(x), remap.model.fc(x) * 2)
    assert [op.kind for op in remap.executable.graph.ops if op.kind == "remap"] == ["remap"]
    assert any("custom op ai.graphcore::RemapCE: a remap" in n for n in remap.executable.notes)
    assert f"graph captured with {method}" in remap.executable.notes
    with pytest.raises(UnsupportedOpError, match=r"ai.graphcore::MyOp .*: a PopART op written in C\+\+\. Give it one "
                                                 r"with sim\.poptorch\.register_op\('ai.graphcore::MyOp', fn\)"):
        poptorch.inferenceModel(Net("MyOp"))(x)
    seen = []
    poptorch.register_op("ai.graphcore::MyOp", lambda ctx: seen.append(dict(ctx.kwargs))
                         or ctx.custom(vertices=ctx.numel(), vertex_cycles=30))
    try:
        mine = poptorch.inferenceModel(Net("MyOp"))
        assert torch.equal(mine(x), torch.zeros(4, 8))
        ops = mine.executable.graph.ops
        custom = [op for op in ops if op.kind == "custom"]
        fc_out = next(op for op in ops if op.name == "fc/add").outputs[0]
        assert len(custom) == 1 and custom[0].inputs == [fc_out]  # the op's input only, not example_outputs
        assert any("zero placeholders" in n for n in mine.executable.notes)
        assert seen and seen[-1] == {"grain_size": 8}  # the rule sees the op's attributes
    finally:
        poptorch.unregister_op("ai.graphcore::MyOp")
    with pytest.raises(ValueError, match="attribute keys must be strings"):
        poptorch.custom_op([x], "RemapCE", "ai.graphcore", 1, [x], attributes={1: 2})


def test_custom_op_operands_are_not_cast():
    """PopTorch builds a custom op with ImplicitCast::None (OpBuilder.cpp createCustomOperation): DINO's
    ExpMovAvg reads half weights and a float32 factor as they are, with no casts priced."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x, factor):
            poptorch.custom_op([self.a.weight, self.b.weight, factor], "ExpMovAvg", "com.acme", 1,
                               example_outputs=[self.a.weight], attributes={})
            return self.a(x)

    poptorch.register_op("com.acme::ExpMovAvg", lambda ctx: ctx.custom(vertices=ctx.numel(), vertex_cycles=10))
    try:
        model = poptorch.inferenceModel(Net().half())
        model(torch.randn(4, 16).half(), torch.ones(1))
    finally:
        poptorch.unregister_op("com.acme::ExpMovAvg")
    g = model.executable.graph
    (custom,) = [op for op in g.ops if op.kind == "custom"]
    assert [g.tensors[t].dtype for t in custom.inputs] == ["float16", "float16", "float32"]
    assert "cast" not in [op.kind for op in g.ops]


def test_an_in_place_op_on_an_input_changes_the_devices_copy_only():
    """The IPU computes on its stream copy of an input: forward's ``x.mul_(2)`` gives l(2x) on the
    first call as on every other, and the caller's tensor is left as it was."""
    class Doubles(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x):
            x.mul_(2)
            return self.l(x)

    torch.manual_seed(0)
    m = Doubles()
    x = torch.ones(2, 4)
    expected = m.l(torch.full((2, 4), 2.0)).detach()
    pm = poptorch.inferenceModel(m)
    for _ in range(2):
        torch.testing.assert_close(pm(x), expected)
    assert x.tolist() == [[1.0] * 4] * 2


def test_a_dynamic_updates_source_trains_through_it():
    """The update's gradient is a dynamic slice of the output's (PopART's DynamicUpdateToUpdateGradOp), so a weight
    that makes the update trains; the updated tensor's gradient is the output's with the slice zeroed. Before, the
    update got no gradient and the weight behind it no update."""
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.src = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x, i):
            y = poptorch.dynamic_update(self.fc(x), self.src(x[:2]), 0, i, 2)
            return poptorch.identity_loss((y ** 2).sum(), "sum")

    torch.manual_seed(5)
    model = Model()
    reference = copy.deepcopy(model)
    x = torch.randn(6, 8)
    tm = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    tm(x, torch.tensor([1]))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)  # the same step in plain torch
    y = reference.fc(x).index_copy(0, torch.tensor([1, 2]), reference.src(x[:2]))
    (y ** 2).sum().backward()
    optimizer.step()
    for name, p in reference.named_parameters():
        torch.testing.assert_close(dict(model.named_parameters())[name], p)
    ops = {op.name: op for op in tm.executable.graph.ops}
    sliced = [op for op in ops.values() if op.name.endswith("grad_slice")]
    assert len(sliced) == 1 and sliced[0].attrs == {"dynamic_slice": True}
    updated = {op.inputs[0] for op in ops.values() if op.pass_ == "update"}
    assert {"src.weight", "src.bias", "fc.weight", "fc.bias"} <= updated


def test_a_dynamic_slice_trains_as_torch_does():
    """The CPU step's gradient of a dynamic slice (its torch.library op's backward) is torch's index_select's."""
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, i):
            return poptorch.identity_loss((poptorch.dynamic_slice(self.fc(x), 0, i, 3, 1) ** 2).sum(), "sum")

    torch.manual_seed(6)
    model = Model()
    reference = copy.deepcopy(model)
    x = torch.randn(6, 8)
    poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))(x, torch.tensor([2]))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    (reference.fc(x).index_select(0, torch.tensor([2, 3, 4])) ** 2).sum().backward()
    optimizer.step()
    torch.testing.assert_close(model.fc.weight, reference.fc.weight)
    torch.testing.assert_close(model.fc.bias, reference.fc.bias)
