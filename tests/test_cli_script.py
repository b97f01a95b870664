"""``ipusim script`` and the virtual clock: an unmodified PopTorch / PopXL script runs on the
simulator, and its own timings read the simulated device time (docs/cli.md, "ipusim script")."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import pytest

from sim import virtual_clock
from sim.cli.main import main

POPTORCH_CALL_S = 4.68e-4  # configs/ipu-mk2.toml poptorch_call_s (bow-2000 extends it)

POPTORCH_SCRIPT = '''
import json, sys, time
import torch
import poptorch                      # not sim.poptorch: the runner gives the simulator's
import poptorch.optim
from sim import virtual_clock

model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024))
opts = poptorch.Options().deviceIterations(8).logCycleCount(True)
runner = poptorch.inferenceModel(model, opts)
x = torch.randn(8 * 512, 1024)
runner(x)                             # compiles: adds no time on the virtual clock
before = virtual_clock.totals()[1]
r0, t0 = virtual_clock.real_perf_counter(), time.perf_counter()
runner(x)
elapsed, real = time.perf_counter() - t0, virtual_clock.real_perf_counter() - r0
print(json.dumps({"elapsed": elapsed, "real": real, "simulated": virtual_clock.totals()[1] - before,
                  "argv": sys.argv[1:], "module": poptorch.__name__, "cycles": runner.cycleCount()}))
'''


def _run(tmp_path, capsys, body: str, flags: tuple = (), script_args: tuple = ()) -> tuple[int, dict | None, str]:
    """``ipusim script FLAGS script.py SCRIPT_ARGS`` on ``body``: (exit code, the last JSON line it
    printed, stderr)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    code = main(["script", *flags, str(script), *script_args])
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return code, json.loads(lines[-1]) if lines else None, err


def test_poptorch_script_times_the_simulated_call(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    code, out, err = _run(tmp_path, capsys, POPTORCH_SCRIPT, script_args=("--epochs", "1"))
    assert code == 0
    assert out["module"] == "sim.poptorch" and out["argv"] == ["--epochs", "1"]
    # the call reads as its simulated seconds (~12 ms), not the real time the simulator took for it
    # (its CPU run of ~70 GFLOP alone takes longer); only the Python around the call adds real time,
    # microseconds, more on a loaded machine: 50 ms of slack
    assert out["simulated"] > 5e-3 and out["real"] > out["elapsed"]
    assert out["simulated"] <= out["elapsed"] <= out["simulated"] + 0.05
    # ipu-mk2's clock, and PopTorch's own host work in a call (configs: poptorch_call_s)
    assert out["simulated"] == pytest.approx(out["cycles"] / 1.325e9 + POPTORCH_CALL_S, rel=1e-6)
    assert "2 simulated device call(s)" in err
    assert "  Sequential (inferenceModel) on ipu-mk2: 2 call(s), " in err  # what was called
    # and how much of it is PopTorch's own host work: 0.468 ms a call
    assert ", 0.000936 s of it PopTorch's or PopXL's own host work in the calls" in err
    assert " s each (0.468 ms of it the front end's host work)" in err
    # everything is put back: the aliases, the clocks, argv
    assert "poptorch" not in sys.modules and time.perf_counter is virtual_clock.real_perf_counter
    assert not virtual_clock.installed()


def test_real_clock_and_system(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    code, out, err = _run(tmp_path, capsys, POPTORCH_SCRIPT, flags=("--real-clock", "--system", "bow-2000"))
    assert code == 0 and "(the script's clocks were real)" in err
    assert out["simulated"] == pytest.approx(out["cycles"] / 1.85e9 + POPTORCH_CALL_S, rel=1e-6)  # a Bow IPU
    assert "IPUSIM_SYSTEM" not in os.environ  # put back


def test_popxl_script(tmp_path, capsys):
    body = '''
    import json, time
    import numpy as np
    import popxl, popxl.ops as ops
    ir = popxl.Ir()
    with ir.main_graph:
        h2d = popxl.h2d_stream((256, 1024), popxl.float16, "x")
        y = ops.gelu(ops.host_load(h2d) @ popxl.variable(np.zeros((1024, 1024), np.float16)))
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    session = popxl.Session(ir, "ipu_hw")
    t0 = time.time()
    session.run({h2d: np.zeros((256, 1024), np.float16)})
    print(json.dumps({"elapsed": time.time() - t0, "simulated": session.simulation.seconds}))
    '''
    code, out, err = _run(tmp_path, capsys, body)
    assert code == 0 and out["simulated"] <= out["elapsed"] <= out["simulated"] + 0.05  # as above
    assert "1 simulated device call(s)" in err and "breakdown (cycles" not in err
    # PopXL's own host work in the run: 0.585 ms and 31.2 us for each of its two streams (configs)
    assert " s each (0.647 ms of it the front end's host work)" in err
    # --summary: the ipusim run report of the session's latest call, after the script
    code, _, err = _run(tmp_path, capsys, body, flags=("--summary",))
    assert code == 0 and err.count("breakdown (cycles") == 1 and "tile memory" in err
    assert "on ipu-mk2, its latest call:" in err


def test_exit_status(tmp_path, capsys):
    assert _run(tmp_path, capsys, "import sys\nsys.exit(5)\n")[0] == 5
    code, _, err = _run(tmp_path, capsys, "raise ValueError('from the script')\n")
    assert code == 1 and "Traceback" in err and "ValueError: from the script" in err
    code, _, err = _run(tmp_path, capsys, "import poptorch.nonexistent\n")
    assert code == 1 and "the simulator's sim.poptorch has no module 'sim.poptorch.nonexistent'" in err
    assert main(["script", str(tmp_path / "missing.py")]) == 2
    assert "no script" in capsys.readouterr().err
    # sys.exit("message") prints the message and exits 1, as Python does
    code, _, err = _run(tmp_path, capsys, "import sys\nsys.exit('stopped early')\n")
    assert code == 1 and err.startswith("stopped early\n")
    # an unknown --system is a usage error before the script runs
    (tmp_path / "never.py").write_text("print('ran')\n")
    assert main(["script", "--system", "nosuch", str(tmp_path / "never.py")]) == 2
    out, err = capsys.readouterr()
    assert "unknown system 'nosuch'" in err and "ran" not in out


def test_no_host_time(tmp_path, capsys):
    # the script's host work (a 0.2 s sleep between the calls here) takes no time: what it measures
    # is exactly the simulated calls
    body = POPTORCH_SCRIPT.replace("runner(x)\nelapsed", "time.sleep(0.2)\nrunner(x)\nelapsed")
    assert "time.sleep(0.2)" in body
    code, out, _ = _run(tmp_path, capsys, body, flags=("--no-host-time",))
    # (to the rounding of subtracting two clock readings of some 1e5 s)
    assert code == 0 and out["elapsed"] == pytest.approx(out["simulated"], rel=1e-9, abs=1e-9) and out["real"] > 0.2
    assert main(["script", "--real-clock", "--no-host-time", str(tmp_path / "script.py")]) == 2
    assert "give one or the other" in capsys.readouterr().err


def test_popart_option_enums(tmp_path, capsys):
    # PopTorch scripts set PopART options with PopART's enums (ViT's ipu_options.py, say)
    body = '''
    import json
    import popart, poptorch, torch
    opts = poptorch.Options()
    opts._Popart.set("accumulateOuterFragmentSettings.schedule",
                     int(popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized))
    opts._Popart.set("autoRecomputation", int(popart.RecomputationType.RecomputeAll))
    try:
        popart.Session
    except AttributeError as e:
        refused = str(e)
    print(json.dumps({"values": [int(popart.RecomputationType.Pipeline), int(popart.SyntheticDataMode.RandomNormal),
                                 int(popart.MergeVarUpdateType.Off), int(popart.TensorStorage.OffChip)],
                      "refused": refused}))
    '''
    code, out, _ = _run(tmp_path, capsys, body)
    assert code == 0 and out["values"] == [3, 2, 0, 1]  # PopART's values (sessionoptions.hpp, tensorlocation.hpp)
    assert out["refused"].startswith("popart.Session is not modelled by the simulator; sim.popart has PopART's builder")


def test_virtual_clock_stands_still_in_a_call_then_moves_on():
    virtual_clock.install()
    try:
        start, wall = time.perf_counter(), time.time()
        with virtual_clock.device_call() as call:
            time.sleep(0.05)
            still = time.perf_counter()
            time.sleep(0.01)
            assert time.perf_counter() == still  # standing still, exactly
            with virtual_clock.device_call() as inner:  # a call inside a call counts once
                inner.seconds = 100.0
            call.seconds = 2.0
        assert time.perf_counter() - start == pytest.approx(2.0, abs=5e-3)
        assert time.time() - wall == pytest.approx(2.0, abs=5e-3)
        assert time.monotonic_ns() > 0 and virtual_clock.totals() == (1, 2.0)
        with pytest.raises(RuntimeError), virtual_clock.device_call() as failed:
            failed.seconds = 50.0
            raise RuntimeError
        assert time.perf_counter() - start == pytest.approx(2.0, abs=5e-3)  # a failed call adds nothing
        assert virtual_clock.totals() == (1, 2.0)
    finally:
        virtual_clock.uninstall()
    assert time.perf_counter is virtual_clock.real_perf_counter and time.time is virtual_clock._REAL["time"]


def test_module_stand_ins_for_custom_op_modules(tmp_path, capsys):
    # Graphcore's Llama code imports its rotary embedding from a C++ op it compiles (a package of the
    # example's own); --module gives the script popxl-addons' equivalent under that name
    (tmp_path / "modelling").mkdir()
    (tmp_path / "modelling" / "__init__.py").write_text("")
    body = """
        import json
        import modelling.rotary_pos_embed as rope
        from modelling.rotary_pos_embed import trig_tables
        print(json.dumps({"module": rope.__name__, "tables": list(trig_tables(8, 4)[0].shape)}))
    """
    stand_in = ("--module", "modelling.rotary_pos_embed=sim.popxl_addons.ops.rotary_pos_embed")
    code, out, err = _run(tmp_path, capsys, body, flags=stand_in)
    assert code == 0 and out == {"module": "sim.popxl_addons.ops.rotary_pos_embed", "tables": [8, 2]}
    assert "modelling.rotary_pos_embed" not in sys.modules  # the alias is put back
    code, _, err = _run(tmp_path, capsys, "import modelling.rotary_pos_embed.binding\n", flags=stand_in)
    assert code == 1 and "'modelling.rotary_pos_embed' is not a package" in err  # the stand-in is a module
    for bad, why in (("modelling.rope", "expected NAME=MODULE"),
                     ("x=no.such.module", "cannot import 'no.such.module'")):
        assert main(["script", "--module", bad, str(tmp_path / "script.py")]) == 2
        assert why in capsys.readouterr().err


def test_importing_a_submodule_keeps_the_function_of_its_name(tmp_path, capsys):
    """PopXL's user-guide mnist.py imports popxl.ops.call for CallSiteInfo and still calls ops.call: the
    submodule imported under the popxl name must not replace the function, during the script or after."""
    code, out, err = _run(tmp_path, capsys, textwrap.dedent("""
        import popxl, popxl.ops as ops
        from popxl.ops.call import CallSiteInfo
        from popxl.remote_buffer import RemoteBuffer
        from popxl.transforms.autodiff import GradGraphInfo
        import json
        print(json.dumps({"call": callable(ops.call), "remote_buffer": callable(popxl.remote_buffer),
                          "autodiff": callable(popxl.transforms.autodiff)}))
    """))
    assert code == 0, err
    assert out == {"call": True, "remote_buffer": True, "autodiff": True}
    import sim.popxl
    assert callable(sim.popxl.ops.call) and callable(sim.popxl.transforms.autodiff)


def test_script_argv_keeps_a_double_dash_after_the_script(tmp_path, capsys):
    # python train.py -- --x passes ['--', '--x'] on; argparse's REMAINDER drops that first '--'
    body = "import json, sys\nprint(json.dumps({'argv': sys.argv[1:]}))\n"
    for args in (("--", "--x"), ("--",), ("a", "--", "b"), ("--", "--", "b")):
        code, out, _ = _run(tmp_path, capsys, body, script_args=args)
        assert code == 0 and out["argv"] == list(args)


POPRUN_ALONE = {"POPDIST_NUM_TOTAL_REPLICAS": "8", "POPDIST_NUM_LOCAL_REPLICAS": "2",
                "POPDIST_NUM_IPUS_PER_REPLICA": "1", "POPDIST_REPLICA_INDEX_OFFSET": "2"}


def test_popdist_launch_gives_plain_options_the_mpirun_variables(tmp_path, capsys, monkeypatch):
    # a PopRun instance also has mpirun's OMPI_COMM_WORLD_* variables, which plain poptorch.Options read:
    # set by POPDIST_* alone, the script is instance 1 of 4 for PopTorch too, on a system for all 8 replicas
    for name in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "IPUSIM_SYSTEM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in POPRUN_ALONE.items():
        monkeypatch.setenv(name, value)
    body = '''
    import json, torch, poptorch, popdist
    opts = poptorch.Options().replicationFactor(popdist.getNumLocalReplicas())
    model = poptorch.inferenceModel(torch.nn.Linear(16, 16), opts)
    model(torch.randn(4, 16))
    print(json.dumps({"popdist": [popdist.getInstanceIndex(), popdist.getNumInstances()],
                      "poptorch": [opts.Distributed.processId, opts.Distributed.numProcesses],
                      "system": model.executable.system.name}))
    '''
    code, out, err = _run(tmp_path, capsys, body)
    assert code == 0, err
    assert out == {"popdist": [1, 4], "poptorch": [1, 4], "system": "ipu-pod16"}
    assert "OMPI_COMM_WORLD_RANK" not in os.environ  # put back
    # variables that describe no launch are a usage error before the script runs
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "3")
    assert main(["script", str(tmp_path / "script.py")]) == 2
    assert "must be a multiple of POPDIST_NUM_LOCAL_REPLICAS=3" in capsys.readouterr().err


def test_options_with_no_modelled_effect_are_listed(tmp_path, capsys, monkeypatch):
    # what the script set that the simulation does not follow is said after it, not only under --summary
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    body = '''
    import torch, poptorch
    opts = poptorch.Options()
    opts._Popart.set("scheduleNonWeightUpdateGradientConsumersEarly", True)
    opts.Precision.enableStochasticRounding(True)
    poptorch.inferenceModel(torch.nn.Linear(16, 16), opts)(torch.randn(1, 16))
    '''
    code, _, err = _run(tmp_path, capsys, body)
    assert code == 0
    assert ("    accepted with no modelled effect: _Popart.scheduleNonWeightUpdateGradientConsumersEarly, "
            "Precision.enableStochasticRounding (-v or --summary: the notes)") in err
    code, _, err = _run(tmp_path, capsys, body, flags=("-q",))
    assert code == 0 and "no modelled effect" not in err
    # -v ("also ... the run's notes"): each model's latest call's notes, under its line
    code, _, err = _run(tmp_path, capsys, body, flags=("-v",))
    assert code == 0 and "    - system ipu-mk2: the smallest Mk2 system with 1 IPU(s)\n" in err
    assert "    - option Precision.enableStochasticRounding=True: accepted, no modelled effect\n" in err


def test_script_file_is_absolute_as_python_makes_it(tmp_path, capsys, monkeypatch):
    # python train.py gives __main__ an absolute __file__ (sys.argv[0] as typed): a script that changes
    # directory still finds the files beside it, and pickles its own classes as __main__'s
    (tmp_path / "config.yml").write_text("lr: 0.1\n")
    body = '''
    import json, os, pickle, sys
    class Config:
        pass
    os.chdir(os.path.dirname(os.path.dirname(__file__)))
    with open(os.path.join(os.path.dirname(__file__), "config.yml")) as f:
        config = f.read().strip()
    print(json.dumps({"config": config, "argv0": sys.argv[0], "absolute": os.path.isabs(__file__),
                      "pickled": type(pickle.loads(pickle.dumps(Config()))).__name__}))
    '''
    (tmp_path / "script.py").write_text(textwrap.dedent(body))
    monkeypatch.chdir(tmp_path)
    assert main(["script", "script.py"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out == {"config": "lr: 0.1", "argv0": "script.py", "absolute": True, "pickled": "Config"}


def test_no_cpu_outputs_returns_zeros_and_the_same_calls(tmp_path, capsys, monkeypatch):
    """``--no-cpu-outputs`` (IPUSIM_CPU_OUTPUTS=0 while the script runs, put back after): the script's
    PopTorch model returns zeros of its outputs' shapes, and its call is simulated as without it."""
    monkeypatch.delenv("IPUSIM_CPU_OUTPUTS", raising=False)
    body = POPTORCH_SCRIPT.replace('"cycles": runner.cycleCount()',
                                   '"cycles": runner.cycleCount(), "sum": float(runner(x).abs().sum()), '
                                   '"shape": list(runner(x).shape)')
    code, zeros, _ = _run(tmp_path, capsys, body, flags=("--no-cpu-outputs",))
    assert code == 0 and zeros["sum"] == 0.0 and "IPUSIM_CPU_OUTPUTS" not in os.environ
    code, real, _ = _run(tmp_path, capsys, body)
    assert code == 0 and real["sum"] > 0
    assert zeros["shape"] == real["shape"] == [8 * 512, 1024]
    assert zeros["cycles"] == real["cycles"] and zeros["simulated"] == real["simulated"]


def test_examples_utils_load_lib_compiles_nothing(tmp_path, capsys):
    # Graphcore's examples load their C++ custom ops with examples_utils.load_lib (GPT-2's ipu_options.py:
    # load_lib(".../custom_ops/remap_tensor_ce.cpp")); without Poplar's SDK nothing can compile them, so the
    # script gets the simulator's stand-in, which returns None, and its custom op is priced when the model
    # calls it
    body = """
        import json
        from examples_utils import load_lib
        import examples_utils
        print(json.dumps({"returned": load_lib("custom_ops/remap_tensor_ce.cpp"), "module": examples_utils.__name__}))
    """
    code, out, _ = _run(tmp_path, capsys, body)
    assert code == 0 and out == {"returned": None, "module": "sim.examples_utils"}
