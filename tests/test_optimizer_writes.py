"""setOptimizer with new values: PopART's OptimizerFromHost engine run, one host stream copy of each
optimizer tensor (a weight's compound scalars that are not constant), priced and counted apart from
the calls (``PoplarExecutor.optimizer_writes``), and on a script's virtual clock."""

import time

import pytest
import torch

import sim
import sim.poptorch as poptorch
from sim import virtual_clock
from sim.poptorch import optim as _optim
from sim.schedule.hostio import optimizer_from_host


class TwoStage(torch.nn.Module):
    """Two linear layers (4 parameters), on IPUs 0 and 1 when ``pipelined``."""

    def __init__(self, pipelined: bool = False):
        super().__init__()
        self.pipelined = pipelined
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)

    def forward(self, x, y):
        if self.pipelined:
            with poptorch.Block(ipu_id=0):
                h = self.a(x).relu()
            with poptorch.Block(ipu_id=1):
                out = self.b(h)
        else:
            out = self.b(self.a(x).relu())
        return out, torch.nn.functional.cross_entropy(out, y)


def _counts(opt, net, auto=False):
    names = {id(p): n for n, p in net.named_parameters()}
    return _optim.optimizer_tensors(opt, names, auto)


@pytest.mark.parametrize("make, per_weight", [
    # SGD0: scaled learning rate and weight-decay scale factor both hold the (never constant) lr
    (lambda p: torch.optim.SGD(p, lr=0.1), 2),
    # SGD2: the scaled learning rate (lr) and scaled momentum (0.9 is not PopTorch's constant 0);
    # scaled weight decay and dampening factor are made of constants
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 2),
    # ... and with weight decay the scaled weight decay too
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4), 3),
    # Nesterov adds two factors (velocity scaling: constant), the momentum and the weight decay (0)
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), 3),
    # torch's Adam: only the learning rate is variable (betas always constant, eps and wd defaults)
    (lambda p: torch.optim.Adam(p, lr=1e-3), 1),
    (lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-6), 2),
    # PopTorch's optimizers: what the user gave is variable; betas are beta1 and beta2; the loss
    # scaling is the loss scaling and the gradient scaling
    (lambda p: poptorch.optim.Adam(p, lr=1e-3, betas=(0.9, 0.99), loss_scaling=128.0), 5),
    (lambda p: poptorch.optim.LAMB(p, lr=1e-3, max_weight_norm=10.0), 2),
    (lambda p: torch.optim.RMSprop(p, lr=1e-3, momentum=0.5), 2),
])
def test_optimizer_tensors_per_weight_as_popart_makes_them(make, per_weight):
    net = TwoStage()
    opt = make(net.parameters())
    assert _counts(opt, net) == {n: per_weight for n, _ in net.named_parameters()}


def test_automatic_loss_scaling_makes_the_loss_scaling_tensors_variable():
    net = TwoStage()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    assert set(_counts(opt, net, auto=True).values()) == {3}  # lr, loss scaling, gradient scaling


def test_groups_keep_their_own_values():
    net = TwoStage()
    opt = torch.optim.Adam([{"params": net.a.parameters(), "weight_decay": 0.01},
                            {"params": net.b.parameters()}], lr=1e-3)
    assert _counts(opt, net) == {"a.weight": 2, "a.bias": 2, "b.weight": 1, "b.bias": 1}


def test_the_program_is_a_host_stream_copy_per_tensor():
    system = sim.load_system("ipu-mk2")
    prog = optimizer_from_host({0: 3, 1: 2})
    assert [(c.ipu, c.host_sync) for c in prog.items] == [(0, True), (0, False), (0, False), (1, True), (1, False)]
    # the host fills the streams one after another: each costs its request and completion latency
    seconds = system.cycles_to_seconds(sim.Engine(system).run(optimizer_from_host({0: 100})).total_cycles)
    assert 100 * system.host_link.latency_s <= seconds < 100 * system.host_link.latency_s + 1e-6


def _model(opt_factory, pipelined=True):
    net = TwoStage(pipelined)
    opt = opt_factory(net.parameters())
    o = poptorch.Options()
    if pipelined:
        o.setExecutionStrategy(poptorch.PipelinedExecution())
        o.Training.gradientAccumulation(4)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    model = poptorch.trainingModel(net, o, optimizer=opt)
    model(x, y)
    return model, opt, (x, y)


def test_set_optimizer_writes_only_new_values():
    model, opt, _ = _model(lambda p: torch.optim.SGD(p, lr=0.1))
    model.setOptimizer(opt)  # the same values: nothing to write
    assert model.optimizer_writes == {"runs": 0, "tensors": 0, "seconds": 0.0}
    for g in opt.param_groups:
        g["lr"] = 0.05
    model.setOptimizer(opt)
    writes = model.optimizer_writes
    assert (writes["runs"], writes["tensors"]) == (1, 8)
    expected = sim.optimizer_write_seconds(model.executable, {0: 4, 1: 4})  # two weights a stage, 2 each
    assert writes["seconds"] == expected > 0
    model.setOptimizer(opt)
    assert model.optimizer_writes["runs"] == 1


def test_lamb_counts_each_weight_once():
    model, opt, _ = _model(lambda p: poptorch.optim.LAMB(p, lr=1e-3, max_weight_norm=10.0))
    for g in opt.param_groups:
        g["lr"] = 5e-4
    model.setOptimizer(opt)
    assert model.optimizer_writes["tensors"] == 8  # 4 weights: learning rate and max weight norm


def test_a_detached_model_writes_before_its_next_call_inside_the_call():
    model, opt, (x, y) = _model(lambda p: torch.optim.Adam(p, lr=1e-3))
    model.detachFromDevice()
    for g in opt.param_groups:
        g["lr"] = 5e-4
    model.setOptimizer(opt)
    assert model.optimizer_writes["runs"] == 0
    virtual_clock.install(host_time=False)
    try:
        model(x, y)
        calls, seconds = virtual_clock.totals()
    finally:
        virtual_clock.uninstall()
    writes = model.optimizer_writes
    assert (writes["runs"], writes["tensors"]) == (1, 4)
    host = model._executable.system.host_link.poptorch_call_s  # PopTorch's own work in a call
    assert calls == 1 and seconds == pytest.approx(model.simulation.seconds + writes["seconds"] + host, rel=1e-12)


def test_a_script_sees_the_write_on_its_clock():
    model, opt, _ = _model(lambda p: torch.optim.SGD(p, lr=0.1), pipelined=False)
    for g in opt.param_groups:
        g["lr"] = 0.01
    virtual_clock.install(host_time=False)
    try:
        t0 = time.perf_counter()
        model.setOptimizer(opt)
        elapsed = time.perf_counter() - t0
    finally:
        virtual_clock.uninstall()
    assert elapsed == pytest.approx(model.optimizer_writes["seconds"], rel=1e-9)


def _constant_eps(opt):
    opt.variable_attrs.markAsConstant("eps")
    return opt


# --- what PopART refuses: Ir::updateOptimizer's validReplacement -------------------------------------
@pytest.mark.parametrize("first, second, message", [
    (lambda p: torch.optim.SGD(p, lr=0.1), lambda p: torch.optim.Adam(p, lr=0.1),
     "Can not replace optimizer of type SGD with new optimizer of type Adam"),
    (lambda p: poptorch.optim.LAMB(p, lr=1e-3), lambda p: poptorch.optim.AdamW(p, lr=1e-3),
     "Adam modes do not match"),
    (lambda p: torch.optim.Adam(p, lr=1e-3), lambda p: torch.optim.AdamW(p, lr=1e-3),
     "Weight decay modes do not match"),
    # torch's Adam: a weight decay of 0 is PopTorch's constant; 0.01 would be variable
    (lambda p: torch.optim.Adam(p, lr=1e-3), lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=0.01),
     r"Problem with weight decays\. OptimizerValue for tensor a\.bias is not a valid replacement\.Can not "
     r"replace a constant value with a non constant value\."),
    # eps left to its default is a constant 1e-8, and so is one marked constant
    (lambda p: poptorch.optim.AdamW(p, lr=1e-3), lambda p: _constant_eps(poptorch.optim.AdamW(p, lr=1e-3, eps=1e-7)),
     r"Problem with eps\. .*Values are constant but do not match\."),
    (lambda p: poptorch.optim.SGD(p, lr=0.1, loss_scaling=64.0),
     lambda p: poptorch.optim.SGD(p, lr=0.1),  # loss scaling left to its default: a constant 1
     r"Problem with loss scaling\. Can not replace a non constant value with a constant value\."),
    # SGD checks its values before the velocity: the momentum was the constant 0
    (lambda p: torch.optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
     r"Problem with momentums\. .*Can not replace a constant value with a non constant value\."),
    (lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9),
     lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9, use_combined_accum=True),
     "this has SGDAccumulatorAndMomentum Separate, but other has Combined"),
])
def test_popart_refuses_what_was_compiled_in(first, second, message):
    net = TwoStage()
    model = poptorch.trainingModel(net, poptorch.Options(), optimizer=first(net.parameters()))
    model(torch.randn(16, 32), torch.randint(0, 4, (16,)))
    with pytest.raises(poptorch.Error, match=message):
        model.setOptimizer(second(net.parameters()))
    assert model.optimizer_writes["runs"] == 0


def test_variable_values_may_change_and_are_written():
    net = TwoStage()
    opt = poptorch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=0.01, eps=1e-6)
    model = poptorch.trainingModel(net, poptorch.Options(), optimizer=opt)
    model(torch.randn(16, 32), torch.randint(0, 4, (16,)))
    model.setOptimizer(poptorch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=0.0, eps=1e-8))
    assert (model.optimizer_writes["runs"], model.optimizer_writes["tensors"]) == (1, 12)


def test_a_refused_optimizer_fails_the_next_call_of_a_detached_model_too():
    net = TwoStage()
    model = poptorch.trainingModel(net, poptorch.Options(), optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    model(x, y)
    model.detachFromDevice()
    model.setOptimizer(torch.optim.Adam(net.parameters(), lr=0.1))  # written (and refused) at the next call
    for _ in range(2):
        with pytest.raises(poptorch.Error, match="Can not replace optimizer of type SGD"):
            model(x, y)
