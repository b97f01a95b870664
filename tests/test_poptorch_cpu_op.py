"""``poptorch.CPU``: a host function inside an inference model (sim/poptorch/host_function.py), run as stream
copies of its inputs to the host and its outputs back (sim.schedule.context.Context.host_call_items)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import sim.poptorch as poptorch  # noqa: E402
from sim.graph.ir import HOST_CALL  # noqa: E402

FEATURES = 256


class _Model(torch.nn.Module):
    """A linear layer, a CPU op of two outputs on its result and a scale, then a second layer."""

    def __init__(self, use_cpu: bool = True, host_seconds: float = 0.0):
        super().__init__()
        self.first = torch.nn.Linear(FEATURES, FEATURES)
        self.second = torch.nn.Linear(FEATURES, FEATURES)
        self.use_cpu = use_cpu
        self.cpu = poptorch.CPU(self.product_and_sum, "MyCPUOp", host_seconds=host_seconds)

    @staticmethod
    def product_and_sum(x, y):
        return x * y, x + y

    def forward(self, x, y):
        h = self.first(x)
        w, z = self.cpu(h, y) if self.use_cpu else self.product_and_sum(h, y)
        return self.second(w), z


def _run(model, options=None, batch: int = 16):
    o = options or poptorch.Options()
    o.logCycleCount(True)
    executor = poptorch.inferenceModel(model, o)
    torch.manual_seed(0)
    total = batch * o.device_iterations * o.replication_factor
    inputs = (torch.randn(total, FEATURES), torch.full((total, 1), 2.0))
    return executor, executor(*inputs), model(*inputs)


def test_the_outputs_are_the_functions_on_the_calls_values():
    """As PopTorch's tests/cpu_op_test.py: several outputs, and the wrappers called in turn several times."""
    _, out, expected = _run(_Model())
    assert all(torch.allclose(o, e, atol=1e-5) for o, e in zip(out, expected))

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.double = poptorch.CPU(lambda x: x * 2.0, "Double")
            self.add = poptorch.CPU(lambda x, y: x + y, "Add")

        def forward(self, x, y):
            for _ in range(3):
                x = self.add(self.double(x), y)
            return x

    x, y = torch.randn(5), torch.randn(5)
    executor = poptorch.inferenceModel(Chain())
    assert torch.allclose(executor(x, y), ((x * 2 + y) * 2 + y) * 2 + y)
    calls = [op for op in executor._executable.graph.ops if op.kind == HOST_CALL]
    assert [op.attrs["id"] for op in calls] == ["Double", "Add"] * 3


def test_the_call_streams_its_inputs_and_outputs_on_the_ipus_path():
    """The call's copies: each input to the host, then each output back, one after another on the IPU (host_io);
    the device's cycles grow by exactly the given host time; the perf counters keep only the model's streams."""
    plain, _, _ = _run(_Model(use_cpu=False))
    executor, _, _ = _run(_Model())
    slow, _, _ = _run(_Model(host_seconds=1e-3))
    system = executor._executable.system
    assert slow.cycleCount() - executor.cycleCount() == system.seconds_to_cycles(1e-3) == 1_325_000
    trace = executor.simulation.trace
    copies = trace[trace.name.str.startswith("MyCPUOp: ")].sort_values("start")
    assert list(copies.kind) == ["host_io"] * 4
    assert [n.split(" ")[1] for n in copies.name] == ["input", "input", "output", "output"]
    assert (copies.start.diff().dropna() > 0).all() and (copies.ipu == 0).all()
    # an input of 16 x 256 fp32 to the host: its host sync, the request, the tiles to the gateway, the link
    link = system.host_link
    nbytes = 16 * FEATURES * 4
    expected = (link.host_sync_cycles + system.seconds_to_cycles(link.latency_s)
                + system.seconds_to_cycles(nbytes / link.gateway_to_ipu_bytes_per_s)
                + system.seconds_to_cycles(nbytes / link.ipu_to_host_bytes_per_s))
    assert int(copies.cycles.iloc[0]) == expected
    added = int(copies.cycles.sum())
    assert executor.simulation.breakdown.loc[:, "host_io"].iloc[0] - plain.simulation.breakdown.loc[
        :, "host_io"].iloc[0] == pytest.approx(added, abs=1)
    for name in ("input", "input_complete", "output", "output_complete"):
        assert [len(v) for v in executor.getPerfCounters()[name]] == [len(v) for v in plain.getPerfCounters()[name]]
    assert any("poptorch.CPU 'MyCPUOp'" in n and "not modelled" in n for n in executor._executable.notes)


def test_every_replica_calls_its_own_function_each_iteration():
    o = poptorch.Options().replicationFactor(2).deviceIterations(3)
    executor, out, expected = _run(_Model(), o, batch=4)
    assert all(torch.allclose(a, e, atol=1e-5) for a, e in zip(out, expected))  # (the batch run in chunks)
    trace = executor.simulation.trace
    outputs = trace[trace.name == "MyCPUOp: output cpu_op/MyCPUOp:0"]
    assert sorted(outputs.groupby("ipu").size().to_dict().items()) == [(0, 3), (1, 3)]


def test_bad_use_is_popTorchs_error():
    class Train(_Model):
        def forward(self, x, y):
            return poptorch.identity_loss(super().forward(x, y)[0].sum(), "sum")

    model = Train()
    training = poptorch.trainingModel(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(poptorch.Error, match="'MyCPUOp': CPU ops are only supported in inference graphs"):
        training(torch.randn(4, FEATURES), torch.full((4, 1), 2.0))

    class Scalar(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cpu = poptorch.CPU(lambda x, k: x * k, "Scale")

        def forward(self, x):
            return self.cpu(x, 3)

    with pytest.raises(poptorch.Error, match="'Scale': argument 1 is a int; a CPU op takes torch.Tensors only"):
        poptorch.inferenceModel(Scalar())(torch.randn(4))

    class Shape(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cpu = poptorch.CPU(lambda x: x.shape, "Shape")

        def forward(self, x):
            return self.cpu(x)

    with pytest.raises(poptorch.Error, match=r"'Shape': the function returned Size torch.Size\(\[4\]\); a CPU op's "
                       "outputs must be torch.Tensors"):
        poptorch.inferenceModel(Shape())(torch.randn(4))
    with pytest.raises(poptorch.Error, match="host_seconds must be a number of seconds >= 0"):
        poptorch.CPU(lambda x: x, "Bad", host_seconds=-1.0)


def test_outside_a_poptorch_model_it_is_the_function():
    cpu = poptorch.CPU(lambda x: x + 1, "PlusOne")
    assert torch.equal(cpu(torch.zeros(3)), torch.ones(3))
    executor, _, _ = _run(_Model())
    wrapper = executor._user_model.cpu
    assert wrapper.in_shapes == [(16, FEATURES), (16, 1)] and wrapper.out_shapes == [(16, FEATURES), (16, FEATURES)]
    wrapper.registerPersistentData()
    wrapper.inputs[0].fill_(3.0)
    wrapper.inputs[1].fill_(2.0)
    wrapper.execute()
    assert float(wrapper.outputs[0][0, 0]) == 6.0 and float(wrapper.outputs[1][0, 0]) == 5.0


def test_a_torch_file_with_a_cpu_op_runs_inference_and_refuses_training(tmp_path, capsys):
    """``ipusim run --torch``: the same host call in the run; ``--training`` is PopTorch's refusal, named."""
    from sim.cli.main import main
    path = tmp_path / "cpu_model.py"
    path.write_text(
        "import torch\nimport sim.poptorch as poptorch\n\n\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.l = torch.nn.Linear(16, 16)\n"
        "        self.cpu = poptorch.CPU(torch.relu, 'Relu')\n\n"
        "    def forward(self, x):\n"
        "        return poptorch.identity_loss(self.cpu(self.l(x)).sum(), 'sum')\n\n\n"
        "def model(micro_batch):\n"
        "    return M(), (torch.randn(micro_batch, 16),), {}\n")
    assert main(["run", "--torch", str(path)]) == 0
    assert "poptorch.CPU 'Relu': its inputs' and outputs' stream copies are priced" in capsys.readouterr().out
    assert main(["run", "--torch", str(path), "--training"]) != 0
    assert ("--training, but poptorch.CPU 'Relu': CPU ops are only supported in inference graphs"
            in capsys.readouterr().err)
