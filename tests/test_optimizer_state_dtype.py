"""One dtype per optimizer state tensor (``Optimizer(name, state_dtype)``): state bytes, the
update's cycles, the CLI flag, and the poptorch front end pricing the same Optimizer."""

from __future__ import annotations

import argparse

import pytest

import sim
from sim.cli.main import build_parser
from sim.cli.run import optimizer_of
from sim.cost import op_cost
from sim.errors import OptionsError
from sim.graph import GraphBuilder
from sim.graph.training import Optimizer, expand_training
from sim.hardware.system import load_system


def _graph():
    b = GraphBuilder("fc", "float16")
    x = b.input("x", (64, 1024))
    y = b.linear(x, 1024, bias=False)
    b.softmax_cross_entropy(y, b.input("labels", (64,), "int32"))
    return b.graph


def test_the_single_dtype_spelling_still_means_every_state():
    assert Optimizer("adamw").state_dtypes == ("float32", "float32")
    assert Optimizer("adamw", "float16").state_dtypes == ("float16", "float16")
    assert Optimizer("adamw", "half") == Optimizer("adamw", "float16")
    assert Optimizer("sgd").state_dtypes == () and Optimizer("rmsprop", ["fp16"]).state_dtypes == ("float16",)
    mixed = Optimizer("adamw", ["float16", "float32"])
    assert mixed.state_dtype == ("float16", "float32") and hash(mixed) == hash(Optimizer("adamw", ("half", "float")))
    assert mixed.describe() == "adamw (state: first moment float16, second moment float32)"


@pytest.mark.parametrize("given, match", [(("float16",), "1 state dtypes .* for 2 state"),
                                          ("int32", "expected float16 or float32"),
                                          (("float16", "bf16"), "expected float16 or float32")])
def test_bad_state_dtypes_are_refused(given, match):
    with pytest.raises(OptionsError, match=match):
        Optimizer("adam", given)


@pytest.mark.parametrize("dtypes, per_state", [("float32", (4, 4)), (("float16", "float32"), (2, 4)),
                                                ("float16", (2, 2))])
def test_each_state_tensor_takes_its_own_dtype(dtypes, per_state):
    g = expand_training(_graph(), Optimizer("adamw", dtypes))
    update = next(op for op in g.ops if op.kind == "adam_update")
    states = [g.tensors[t] for t in update.inputs if g.tensors[t].role == "state"]
    assert [t.nbytes for t in states] == [1024 * 1024 * b for b in per_state]
    assert Optimizer("adamw", dtypes).state_bytes(1024 * 1024) == sum(t.nbytes for t in states)


def test_memory_holds_the_state_in_its_dtypes():
    def state_bytes(dtypes):
        ex = sim.compile(_graph(), "ipu-mk2", sim.Options().enableSyntheticData(True), training=True,
                         optimizer=Optimizer("adam", dtypes))
        return ex.memory[0].by_role["state"]
    assert state_bytes("float32") == 8 * 1024 * 1024
    assert state_bytes(("float16", "float32")) == 6 * 1024 * 1024
    assert state_bytes("float16") == 4 * 1024 * 1024


def test_the_update_runs_each_moment_at_its_dtypes_rate():
    """The first moment's fused map (b1*m + (1-b1)*g: mul, mul, add) in fp16 saves 3 x 0.75 cycles an
    element, the second moment's (b2*v + (1-b2)*g*g: mul, mul, mul, add) 4 x 0.75 (the fp32 - fp16
    rates of the mul and add codelets); the updater map runs at the wider of the two, fp32."""
    ipu = load_system("ipu-mk2").ipu
    cycles = {}
    for dtypes in ("float32", ("float16", "float32"), ("float32", "float16")):
        g = expand_training(_graph(), Optimizer("adam", dtypes))
        op = next(o for o in g.ops if o.kind == "adam_update")
        cost = op_cost(op, g, ipu, ipu.tiles)
        cycles[dtypes] = cost.compute_cycles
    per_tile = -(-1024 * 1024 // ipu.tiles)  # elements on the busiest tile (every tile used)
    assert cycles["float32"] - cycles[("float16", "float32")] in (int(2.25 * per_tile), int(2.25 * per_tile) + 1)
    assert cycles["float32"] - cycles[("float32", "float16")] in (int(3.0 * per_tile), int(3.0 * per_tile) + 1)


def test_off_chip_state_moves_its_own_bytes():
    from sim.options import TensorLocationSettings
    from sim.program import RemoteCopy, leaves

    def moved(dtypes):
        o = sim.Options().enableSyntheticData(True)
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False))
        ex = sim.compile(_graph(), "ipu-mk2", o, training=True, optimizer=Optimizer("adam", dtypes))
        return {c.direction: c.nbytes for c in leaves(ex.program) if isinstance(c, RemoteCopy)}
    assert moved(("float16", "float32")) == {"load": 6 * 2**20, "store": 6 * 2**20}
    assert moved("float32") == {"load": 8 * 2**20, "store": 8 * 2**20}


def _run_args(*argv):
    parser = build_parser()
    return parser.parse_args(["run", *argv])


def test_the_cli_parses_one_dtype_or_one_per_state():
    parser = argparse.ArgumentParser()
    args = _run_args("--training", "--optimizer", "adamw", "--optimizer-state-dtype", "half,fp32")
    assert args.optimizer_state_dtype == ("float16", "float32")
    assert optimizer_of(args, parser) == Optimizer("adamw", ("float16", "float32"))
    args = _run_args("--training", "--optimizer", "lamb", "--optimizer-state-dtype", "float16")
    assert optimizer_of(args, parser) == Optimizer("lamb", "float16")
    assert optimizer_of(_run_args("--training"), parser) == Optimizer("sgd")
    with pytest.raises(SystemExit):
        _run_args("--optimizer-state-dtype", "bf16")


def test_the_cli_refuses_a_wrong_count(capsys):
    from sim.cli.main import main
    code = main(["run", "--model", "mlp", "--training", "--optimizer", "adam", "--optimizer-state-dtype",
                 "float16,float32,float16"])
    assert code == 2 and "2 state tensor(s) (first moment, second moment)" in capsys.readouterr().err


def test_poptorch_prices_the_same_optimizer_as_the_zoo_path():
    torch = pytest.importorskip("torch")
    from sim import poptorch
    from sim.poptorch import optim as poptorch_optim

    net = torch.nn.Linear(8, 4)
    opt = poptorch.optim.AdamW(net.parameters(), lr=1e-3, first_order_momentum_accum_type=torch.float16,
                               second_order_momentum_accum_type=torch.float32)
    assert Optimizer(poptorch_optim.sim_optimizer(opt), poptorch_optim.state_dtype(opt)) == \
        Optimizer("adamw", ("float16", "float32"))
    sgd = poptorch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, velocity_accum_type=torch.float16)
    assert Optimizer(poptorch_optim.sim_optimizer(sgd), poptorch_optim.state_dtype(sgd)) == \
        Optimizer("sgd_momentum", ("float16",))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = net

        def forward(self, x, y):
            out = self.fc(x)
            return out, torch.nn.functional.cross_entropy(out, y)

    model = poptorch.trainingModel(Model(), optimizer=opt)
    model(torch.randn(2, 8), torch.tensor([0, 1]))
    states = sorted((t.name, t.dtype) for t in model.executable.graph.tensors.values() if t.role == "state")
    assert [d for _, d in states] == ["float16", "float32"] * 2  # weight and bias: m fp16, v fp32


@pytest.mark.parametrize("optimizer, shown", [
    (Optimizer("adamw", ("float16", "float32")), "training (adamw (state: first moment float16, second moment float32))"),
    (Optimizer("lamb", "float16"), "training (lamb (state float16))"),
    (Optimizer("adamw"), "training (adamw)"),
])
def test_text_summary_names_the_optimizer_and_its_state_dtypes(optimizer, shown):
    """The run's text summary says which optimizer ran and, unless all float32, its states' dtypes,
    read back from the compiled graph's state tensors."""
    from sim.results.report import format_summary
    run = sim.simulate(_graph(), "ipu-mk2", sim.Options(), training=True, optimizer=optimizer)
    assert shown in format_summary(run).splitlines()[0]


def test_gradient_accumulators_take_the_optimizers_accum_dtype():
    """PopART's accumType / PopTorch's accum_type: the accumulators' bytes, and the add of each
    micro-batch's fp16 gradient into them at the wider type's vector rate."""
    ipu = load_system("ipu-mk2").ipu

    def accumulators(optimizer):
        g = expand_training(_graph(), optimizer, accumulate=True)
        add = next(op for op in g.ops if op.kind == "accumulate")
        return [t for t in g.tensors.values() if t.role == "accumulator"], op_cost(add, g, ipu, ipu.tiles).cycles

    (weights_dtype,), fp16_cycles = accumulators(Optimizer("lamb"))
    (fp32,), fp32_cycles = accumulators(Optimizer("lamb", accum_dtype="float32"))
    assert (weights_dtype.dtype, fp32.dtype) == ("float16", "float32")
    assert fp32.nbytes == 2 * weights_dtype.nbytes == 4 * 1024 * 1024
    assert fp32_cycles > fp16_cycles
    assert Optimizer("lamb", accum_dtype="half") == Optimizer("lamb", accum_dtype="float16")
    assert Optimizer("adamw", ("float16", "float32"), "float32").describe() == \
        "adamw (state: first moment float16, second moment float32; accumulators float32)"
    with pytest.raises(OptionsError, match="accumulator dtype 'int8'"):
        Optimizer("sgd", accum_dtype="int8")


def test_poptorch_accumulates_in_float32_unless_told_otherwise():
    """PopTorch's optimizers default ``accum_type`` to float32 (poptorch python/optim.py), so an
    fp16 model with gradient accumulation keeps fp32 accumulators; accum_type=torch.float16 halves them."""
    torch = pytest.importorskip("torch")
    from sim import poptorch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4).half()

        def forward(self, x, y):
            out = self.fc(x)
            return out, torch.nn.functional.cross_entropy(out.float(), y)

    def accumulator_dtypes(**kwargs):
        model = Model()
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(2)
        opt = poptorch.optim.SGD(model.parameters(), lr=0.1, **kwargs)
        training = poptorch.trainingModel(model, opts, optimizer=opt)
        training(torch.randn(2, 8).half(), torch.tensor([0, 1]))
        return {t.dtype for t in training.executable.graph.tensors.values() if t.role == "accumulator"}

    assert accumulator_dtypes() == {"float32"}
    assert accumulator_dtypes(accum_type=torch.float16) == {"float16"}


def test_a_float32_model_s_float16_accumulators_feed_every_optimizer_s_update():
    """accum_type=torch.float16 on float32 weights: the gradients accumulate in float16 and each update reads
    them in float32, as PopART's update of a float32 weight casts its accumulator (Adam's and LAMB's moments
    failed on the CPU step, torch refusing a float16 gradient for a float32 moment)."""
    torch = pytest.importorskip("torch")
    from sim import poptorch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x, y):
            out = self.fc(x)
            return out, torch.nn.functional.mse_loss(out, y)

    x, y = torch.randn(4, 8), torch.randn(4, 4)
    for make in (poptorch.optim.Adam, poptorch.optim.AdamW, poptorch.optim.LAMB, poptorch.optim.RMSprop,
                 poptorch.optim.SGD):
        model = Model()
        before = model.fc.weight.detach().clone()
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(2)
        training = poptorch.trainingModel(model, opts, optimizer=make(model.parameters(), lr=0.01,
                                                                       accum_type=torch.float16))
        training(x, y)
        assert model.fc.weight.dtype == torch.float32, make.__name__
        assert not torch.equal(model.fc.weight, before), make.__name__
        assert {t.dtype for t in training.executable.graph.tensors.values() if t.role == "accumulator"} \
            == {"float16"}, make.__name__


def test_cli_accum_type_sets_the_accumulators_and_the_summary_names_it():
    """``--accum-type float32`` (PopTorch's accum_type): float32 accumulators of twice the bytes,
    named in the run's summary; without it they take the weights' dtype."""
    from sim.results.report import format_summary
    parser = build_parser()
    argv = ["run", "--training", "--optimizer", "lamb", "--gradient-accumulation", "4"]
    assert optimizer_of(parser.parse_args(argv + ["--accum-type", "float32"]), parser).accum_dtype == "float32"
    assert optimizer_of(parser.parse_args(argv), parser).accum_dtype is None
    o = sim.Options()
    o.Training.gradientAccumulation(4)
    run = sim.simulate(_graph(), "ipu-mk2", o, training=True, optimizer=Optimizer("lamb", accum_dtype="float32"))
    assert "training (lamb (accumulators float32))" in format_summary(run).splitlines()[0]
    plain = sim.simulate(_graph(), "ipu-mk2", o, training=True, optimizer=Optimizer("lamb"))
    assert format_summary(plain).splitlines()[0].endswith("training (lamb)")


def test_combined_accumulation_is_a_setting_of_momentum_sgd_only():
    """Optimizer(combined_accum=True): the velocity is the gradient accumulator (PopART's SGD1), so
    with gradient accumulation no accumulator tensor is made and the run's memory is smaller by
    exactly the accumulators' bytes; any other optimizer refuses it."""
    import models
    import sim
    o = sim.Options()
    o.Training.gradientAccumulation(4)
    runs = {c: sim.compile(models.get("mlp"), "ipu-mk2", o, training=True,
                           optimizer=sim.Optimizer("sgd_momentum", combined_accum=c)) for c in (False, True)}
    accumulators = sum(t.nbytes for t in runs[False].graph.tensors.values() if t.role == "accumulator")
    assert accumulators > 0
    assert not any(t.role == "accumulator" for t in runs[True].graph.tensors.values())
    assert runs[False].memory[0].by_role["accumulator"] == accumulators
    assert runs[True].memory[0].by_role.get("accumulator", 0) == 0
    assert runs[True].optimizer == "sgd_momentum (the velocity as the gradient accumulator)"
    for name in ("sgd", "adam", "lars"):
        with pytest.raises(sim.OptionsError, match="combined_accum .* a setting of sgd_momentum only"):
            sim.Optimizer(name, combined_accum=True)


def test_rmsprop_with_momentum_keeps_a_float32_momentum_beside_its_mean_square():
    """PopART's RMSProp (adaptivedecompose.cpp) adds Accl3, the momentum, when the momentum is not 0,
    in float32 whatever PopTorch's arguments; the mean square (Accl1) takes PopTorch's
    first_order_momentum_accum_type (popart_compiler CompilerImpl.cpp builds popart::Adaptive so)."""
    poptorch = pytest.importorskip("sim.poptorch")
    torch = pytest.importorskip("torch")
    from sim.poptorch.optim import sim_optimizer, state_dtype
    p = [torch.nn.Parameter(torch.zeros(4))]
    plain = poptorch.optim.RMSprop(p, lr=0.01, first_order_momentum_accum_type=torch.float16)
    momentum = poptorch.optim.RMSprop(p, lr=0.01, momentum=0.9, first_order_momentum_accum_type=torch.float16)
    assert (sim_optimizer(plain), state_dtype(plain)) == ("rmsprop", ("float16",))
    assert (sim_optimizer(momentum), state_dtype(momentum)) == ("rmsprop_momentum", ("float16", "float32"))
    import models
    g = models.get("mlp")
    costs = {name: sim.simulate(g, "ipu-mk2", training=True, optimizer=name) for name in ("rmsprop", "rmsprop_momentum")}
    states = {name: sum(t.role == "state" for t in run.executable.graph.tensors.values()) for name, run in costs.items()}
    assert states["rmsprop_momentum"] == 2 * states["rmsprop"] > 0
    assert costs["rmsprop_momentum"].cycle_count > costs["rmsprop"].cycle_count


def test_centered_rmsprop_keeps_the_mean_gradient_too():
    """RMSprop(centered=True) is PopART's CenteredRMSProp: adaptivedecompose.cpp adds Accl2, the mean
    gradient, typed with second_order_momentum_accum_type (PopTorch's accl2Type), so it keeps one
    state more than plain RMSprop (two more with a momentum), more memory and a dearer update."""
    poptorch = pytest.importorskip("sim.poptorch")
    torch = pytest.importorskip("torch")
    from sim.poptorch.optim import sim_optimizer, state_dtype
    p = [torch.nn.Parameter(torch.zeros(4))]
    centered = poptorch.optim.RMSprop(p, lr=0.01, centered=True, second_order_momentum_accum_type=torch.float16)
    both = poptorch.optim.RMSprop(p, lr=0.01, centered=True, momentum=0.9)
    assert (sim_optimizer(centered), state_dtype(centered)) == ("rmsprop_centered", ("float32", "float16"))
    assert (sim_optimizer(both), state_dtype(both)) == ("rmsprop_centered_momentum", ("float32",) * 3)
    import models
    g = models.get("mlp")
    runs = {name: sim.simulate(g, "ipu-mk2", training=True, optimizer=name) for name in ("rmsprop", "rmsprop_centered")}
    state = {name: run.executable.memory[0].by_role["state"] for name, run in runs.items()}
    assert state["rmsprop_centered"] == 2 * state["rmsprop"]
    assert runs["rmsprop_centered"].cycle_count > runs["rmsprop"].cycle_count
