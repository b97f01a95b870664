"""The virtual clock of ``ipusim script`` (sim.virtual_clock) counts the simulated device time and the
script's own host work, and nothing of the simulator's own work: capturing and compiling a model (an
explicit ``compile()`` too), pricing, simulating, ``setOptimizer``'s re-pricing, the wrappers'
bookkeeping, a PopXL ``Session``'s compile (docs/cli.md, "ipusim script")."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from sim import virtual_clock
from sim.cli.main import main

pytest.importorskip("torch")

#: a training script that times each of PopTorch's entry points on both kinds of clock: ``perf_counter``
#: (seconds, a float) and ``perf_counter_ns`` (integer nanoseconds: each device call moves it by its
#: seconds rounded to the nanosecond, so sums of them are exact)
TIMED = '''
import json, time
import torch
import poptorch
from sim import virtual_clock

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 10)
    def forward(self, x, y):
        out = self.fc(x)
        return out, torch.nn.functional.cross_entropy(out, y)

torch.manual_seed(0)
model = Model()
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
timed = {}

def timing(name, work):
    s0, r0 = virtual_clock.totals()[1], virtual_clock.real_perf_counter()
    t0, n0 = time.perf_counter(), time.perf_counter_ns()
    work()
    timed[name] = {"s": time.perf_counter() - t0, "ns": time.perf_counter_ns() - n0,
                   "simulated": virtual_clock.totals()[1] - s0, "real": virtual_clock.real_perf_counter() - r0}

wrapped = []
timing("wrap", lambda: wrapped.append(poptorch.trainingModel(model, poptorch.Options(), optimizer=optimizer)))
training = wrapped[0]
timing("compile", lambda: training.compile(x, y))
new_lr = poptorch.optim.SGD(model.parameters(), lr=0.05)
timing("setOptimizer", lambda: training.setOptimizer(new_lr))
timing("copyWeightsToHost", training.copyWeightsToHost)
timing("copyWeightsToDevice", training.copyWeightsToDevice)
N = 5
timing("calls", lambda: [training(x, y) for _ in range(N)])
from sim import variable_copy_seconds
host = training._executable.system.host_link.poptorch_call_s  # PopTorch's own work in a call
print(json.dumps({"timed": timed, "N": N, "call": training.simulation.seconds + host, "host": host,
                  "write": training.optimizer_writes["seconds"],
                  "to_host": variable_copy_seconds(training._executable, False),
                  "to_device": variable_copy_seconds(training._executable, True),
                  "compilation": training.compilationTime().total_seconds()}))
'''

POPXL = '''
import json, time
import numpy as np
import popxl, popxl.ops as ops
from sim import virtual_clock
ir = popxl.Ir()
with ir.main_graph:
    h2d = popxl.h2d_stream((64, 256), popxl.float16, "x")
    y = ops.gelu(ops.host_load(h2d) @ popxl.variable(np.zeros((256, 256), np.float16)))
    ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
n0 = time.perf_counter_ns()
session = popxl.Session(ir, "ipu_hw")
n1 = time.perf_counter_ns()
with session:
    session.run({h2d: np.zeros((64, 256), np.float16)})
n2 = time.perf_counter_ns()
print(json.dumps({"session": n1 - n0, "run": n2 - n1, "simulated": virtual_clock.totals()[1]}))
'''


def _run(tmp_path, capsys, body: str, flags: tuple = ()) -> tuple[dict, str]:
    """``ipusim script FLAGS`` on ``body``: (the last JSON line it printed, stderr)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    code = main(["script", *flags, str(script)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1]), err


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def test_no_host_time_measures_exactly_the_simulated_seconds(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    out, err = _run(tmp_path, capsys, TIMED, flags=("--no-host-time",))
    timed, n = out["timed"], out["N"]
    # the simulator's own work, however long it took here, takes no time: wrapping, an explicit
    # compile (Poplar's compile time is not simulated, as a compile inside the first call)
    assert timed["wrap"]["ns"] == 0 and timed["wrap"]["s"] == 0.0 and timed["wrap"]["simulated"] == 0.0
    # copying the weights: exactly PopART's WeightsToHost / WeightsFromHost run; the compile attaches, and
    # attaching writes the weights (PopTorch's _on_device_attach)
    for name, seconds in (("copyWeightsToHost", out["to_host"]), ("copyWeightsToDevice", out["to_device"]),
                          ("compile", out["to_device"])):
        assert seconds > 0 and timed[name]["ns"] == _ns(seconds), name
        assert timed[name]["simulated"] == pytest.approx(seconds, rel=1e-12), name
    assert timed["compile"]["real"] > 0 and out["compilation"] == 0.0  # compilationTime() agrees with the clock
    # setOptimizer with a new learning rate: exactly PopART's OptimizerFromHost run
    assert out["write"] > 0 and timed["setOptimizer"]["simulated"] == out["write"]
    assert timed["setOptimizer"]["ns"] == _ns(out["write"])
    assert timed["setOptimizer"]["s"] == pytest.approx(out["write"], rel=1e-9, abs=1e-9)
    # N calls: each its simulated seconds and PopTorch's host work (configs: poptorch_call_s), none of the
    # simulator's work around them
    assert out["host"] == 4.68e-4
    assert timed["calls"]["ns"] == n * _ns(out["call"])
    assert timed["calls"]["simulated"] == pytest.approx(n * out["call"], rel=1e-12)
    assert timed["calls"]["s"] == pytest.approx(n * out["call"], rel=1e-9, abs=1e-9)
    assert timed["calls"]["real"] > timed["calls"]["s"]  # the simulator took longer than it counts
    # the run says compilation takes no time
    assert "Poplar's compile time is not simulated" in err.splitlines()[0]


def test_host_time_counts_no_compile_and_no_bookkeeping(tmp_path, capsys, monkeypatch):
    # with the script's host time counted: the entry points' own work still takes none; what is left is
    # the Python of the script's calls, microseconds (more on a loaded machine: slack of 20 ms)
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    out, _ = _run(tmp_path, capsys, TIMED)
    timed = out["timed"]
    assert timed["compile"]["s"] < 0.02 < timed["compile"]["real"] + 0.02
    assert timed["compile"]["s"] < timed["compile"]["real"]
    assert out["compilation"] == 0.0
    for name in ("setOptimizer", "copyWeightsToHost", "calls"):
        assert timed[name]["simulated"] <= timed[name]["s"] < timed[name]["simulated"] + 0.02, name


def test_the_simulators_work_does_not_leak_into_the_clock(tmp_path, capsys, monkeypatch):
    # each entry point of the simulator made 50 ms slower: the script's clocks, which count its host
    # time, do not see it
    import sim.poptorch.executor as executor
    import sim.poptorch.optim as poptorch_optim
    import sim.popxl.session as session

    def slowed(func):
        def slow(*args, **kwargs):
            time.sleep(0.05)
            return func(*args, **kwargs)
        return slow

    monkeypatch.setattr(executor, "sim_compile", slowed(executor.sim_compile))  # compile()
    monkeypatch.setattr(executor.PoplarExecutor, "_split", slowed(executor.PoplarExecutor._split))  # each call
    monkeypatch.setattr(poptorch_optim, "popart_view", slowed(poptorch_optim.popart_view))  # setOptimizer
    monkeypatch.setattr(executor.PoplarExecutor, "__init__", slowed(executor.PoplarExecutor.__init__))  # wrapping
    monkeypatch.setattr(session, "sim_compile", slowed(session.sim_compile))  # popxl.Session(...)
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    out, _ = _run(tmp_path, capsys, TIMED)
    timed = out["timed"]
    for name in ("wrap", "compile", "setOptimizer", "calls"):
        assert timed[name]["real"] >= 0.05  # slowed
        assert timed[name]["s"] < timed[name]["simulated"] + 0.03, name  # not seen
    out, _ = _run(tmp_path, capsys, POPXL)
    assert out["session"] < 30e6 and out["run"] < _ns(out["simulated"]) + 30e6


def test_popxl_session_compile_takes_no_time(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    out, _ = _run(tmp_path, capsys, POPXL, flags=("--no-host-time",))
    assert out["session"] == 0  # the Session compiles: no time
    assert out["simulated"] > 0 and out["run"] == _ns(out["simulated"])  # the run, PopXL's host work included


def test_frozen_holds_the_clock_and_lets_device_calls_move_it():
    @virtual_clock.frozen
    def work(seconds: float = 0.0) -> str:
        time.sleep(0.03)
        if seconds:
            with virtual_clock.device_call() as call:
                call.seconds = seconds
        return "done"

    assert work.__name__ == "work"
    virtual_clock.install()
    try:
        start, start_ns = time.perf_counter(), time.perf_counter_ns()
        assert work() == "done"
        assert time.perf_counter() - start < 0.02  # 30 ms of the simulator's work: not counted
        with virtual_clock.frozen():
            held = time.perf_counter_ns()
            time.sleep(0.01)
            assert time.perf_counter_ns() == held  # standing still, exactly
            with virtual_clock.frozen():  # re-entrant
                work(2.0)  # a device call inside: the clock moves on by it at once, then stands still again
            moved = time.perf_counter_ns()
            assert moved == held + 2_000_000_000
            time.sleep(0.01)
            assert time.perf_counter_ns() == moved
        assert virtual_clock.totals() == (1, 2.0)  # frozen() counts no call
        with pytest.raises(RuntimeError), virtual_clock.frozen():
            raise RuntimeError
        assert 2.0 <= time.perf_counter() - start < 2.05  # and runs again after an error
        assert time.perf_counter_ns() - start_ns < 2_050_000_000
    finally:
        virtual_clock.uninstall()
    assert virtual_clock._STATE.holds == 0 and virtual_clock._STATE.frozen is None
    assert work() == "done"  # without the clock installed: nothing to hold


def test_frozen_with_no_host_time_stays_still():
    virtual_clock.install(host_time=False)
    try:
        start = time.perf_counter_ns()
        with virtual_clock.frozen():
            time.sleep(0.01)
        time.sleep(0.01)
        assert time.perf_counter_ns() == start
        with virtual_clock.frozen(), virtual_clock.device_call() as call:
            call.seconds = 1e-6
        assert time.perf_counter_ns() == start + 1000
    finally:
        virtual_clock.uninstall()


def test_a_poptorch_call_adds_poptorchs_host_work():
    """A small inference call: the clock moves by the device's seconds and PopTorch's own host work
    (configs/ipu-mk2.toml poptorch_call_s, fitted to the SpMM notebook's timed call), which the cycle
    count leaves out and the run's notes name."""
    import torch

    from sim import poptorch
    options = poptorch.Options().simulatedSystem("bow-ipu").computeOutputsOnCpu(False).logCycleCount(True)
    model = poptorch.inferenceModel(torch.nn.Linear(5, 4), options)
    model(torch.ones(5, 5))
    virtual_clock.install(host_time=False)
    try:
        start = time.perf_counter_ns()
        model(torch.ones(5, 5))
        moved = time.perf_counter_ns() - start
    finally:
        virtual_clock.uninstall()
    device = model.cycleCount() / 1.85e9
    assert device == model.simulation.seconds and device < 5e-5  # microseconds of device work
    assert moved == round((device + 4.68e-4) * 1e9)
    assert any("0.468 ms of PopTorch's host work" in n for n in model.executable.notes)
