"""``ipusim script``: run an unmodified PopTorch, PopXL, PopART or PopDist script on the simulator.

    ipusim script train.py --epochs 1
    ipusim script --system bow-pod16 train.py --config b16_in1k_pretrain_lamb
    python -m sim script infer.py --batch-size 8

The script's ``import poptorch`` (and ``poptorch.*``), ``import popxl`` (and ``popxl.*``) and
``import popdist`` (and ``popdist.*``) get the simulator's front ends, ``sim.poptorch``,
``sim.popxl`` and ``sim.popdist``, whatever else is installed, and so do the libraries it imports (a
layer library built on PopTorch, say); ``import popart`` gets ``sim.popart``, PopART's builder and sessions
and its option enums, which PopTorch scripts set options with; ``import popxl_addons`` gets ``sim.popxl_addons``;
``import examples_utils`` gets ``sim.examples_utils``, whose ``load_lib`` (Graphcore's examples compile their
C++ custom ops with it) compiles nothing.
``--module NAME=MODULE`` (repeatable) makes the script's ``import NAME`` (and ``NAME.X``) get ``MODULE``
instead: a stand-in for a module the simulator cannot run, as a custom op the script compiles in C++
(Graphcore's Llama code builds its rotary embedding so: ``--module
modelling.rotary_pos_embed=sim.popxl_addons.ops.rotary_pos_embed``), with PopXL ops the simulator prices.
``--system`` sets the system (``IPUSIM_SYSTEM``) unless the script chooses one itself. Unless
``--real-clock`` is given, the ``time`` module's clocks read the simulated time of each device call
(:mod:`sim.virtual_clock`), so the throughput and step times the script prints are the simulated
ones; its host work outside the calls counts at the speed it runs here, or not at all with
``--no-host-time``; the simulator's own work (capturing, compiling and simulating a model, a PopXL
``Session``'s compile) takes none, so a compilation the script times takes 0 s: Poplar's compile time
is not simulated. After the script, one line on stderr gives the device calls simulated and their
simulated seconds, and says so.

Exit codes: the script's own (its ``sys.exit`` code, 0 when it ends; an uncaught exception, the
simulator's errors included, prints its traceback and exits 1, or 3 when it is
``sim.OutOfMemoryError``: a model does not fit in tile memory); 2 for a usage error before the script
runs (a missing script, an unknown system, ``POPDIST_*`` variables that describe no PopRun launch).
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import traceback
import types
from pathlib import Path

from .argtypes import QUIET, VERBOSE, add_verbosity, verbosity
from .. import popdist, virtual_clock
from ..errors import OptionsError, OutOfMemoryError
from ..hardware.configs import CONFIG_DIR
from ..hardware.system import SYSTEM_ENV_VAR, load_system
from ..options import CPU_OUTPUTS_ENV_VAR
from ..results.report import format_summary

#: the module names a script imports -> the simulator's module that stands for each
FRONT_ENDS = {"poptorch": "sim.poptorch", "popxl": "sim.popxl", "popdist": "sim.popdist", "popart": "sim.popart",
              "popxl_addons": "sim.popxl_addons", "examples_utils": "sim.examples_utils"}


class _FrontEnds(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of ``poptorch[.X]``, ``popxl[.X]``, ``popdist[.X]``, ``popart`` and ``popxl_addons[.X]`` as
    the simulator's modules (the same module objects, under both names), and of each name of
    ``stand_ins`` (``--module``) and its submodules as the module given for it."""

    def __init__(self, stand_ins: dict[str, str] | None = None):
        self.stand_ins = dict(stand_ins or {})

    def _target(self, name: str) -> tuple[str, str] | None:
        """(the module that stands for ``name``, the name it was given for), or None."""
        for given, module in self.stand_ins.items():
            if name == given or name.startswith(given + "."):
                return module + name[len(given):], given
        top, _, rest = name.partition(".")
        return (FRONT_ENDS[top] + ("." + rest if rest else ""), top) if top in FRONT_ENDS else None

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self) if self._target(name) else None

    def create_module(self, spec):
        target, given = self._target(spec.name)
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name != target:
                raise
            what = FRONT_ENDS.get(given) or f"stand-in for {given!r}"
            raise ModuleNotFoundError(f"No module named {spec.name!r}: the simulator's {what} has no "
                                      f"module {target!r}", name=spec.name) from None
        # its submodules the simulator has imported get their names under the alias now: imported later
        # under a new name, Python would bind each on the package over a function of the same name
        # (``popxl.ops.call`` the module over ``ops.call`` the function, as PopXL's mnist.py imports it)
        for name, sub in list(sys.modules.items()):
            if name.startswith(target + "."):
                sys.modules.setdefault(spec.name + name[len(target):], sub)
        return module

    def exec_module(self, module):
        pass  # the simulator's module is imported already


def run_script(path: str, argv: list[str], system: str | None = None, real_clock: bool = False,
               quiet: bool = False, host_time: bool = True, stand_ins: dict[str, str] | None = None,
               summary: bool = False, verbose: bool = False, cpu_outputs: bool = True) -> int:
    """Run ``path`` as ``__main__`` with ``sys.argv = [path, *argv]`` on the simulator's front ends
    (and ``stand_ins``: module name -> the module imported for it); returns its exit code. Everything
    it changes (imports, clocks, argv, the system variable, the mpirun variables of a PopRun launch given by
    ``POPDIST_*`` alone: :func:`sim.popdist.mpirun_environment`) is put back afterwards; unless ``quiet``,
    a line on stderr gives the device calls simulated and one each model or session called (with ``verbose``
    the notes of its latest call, else what it set with no modelled effect), and with ``summary`` the
    ``ipusim run`` report of each model's or session's latest call (breakdown, memory, notes). Without
    ``cpu_outputs`` the script's PopTorch models return zeros instead of running on the CPU
    (``IPUSIM_CPU_OUTPUTS=0``)."""
    script = Path(path)
    if not script.is_file():
        raise OptionsError(f"no script {path!r}: give the path of a Python file")
    if system:
        # an unknown name is a usage error now, not in the script's first call; a file is passed on by its
        # absolute path, so a script that changes its working directory (os.chdir) still finds it
        loaded = Path(load_system(system).path).resolve()
        if loaded.parent != CONFIG_DIR.resolve():
            system = str(loaded)
    try:  # a PopRun launch described by POPDIST_* alone: its instances also have mpirun's variables
        launch = popdist.mpirun_environment()
    except ValueError as e:
        raise OptionsError(str(e)) from None
    finder = _FrontEnds(stand_ins)
    before = set(sys.modules)
    own = {CPU_OUTPUTS_ENV_VAR: "0"} if not cpu_outputs else {}
    saved = sys.argv, list(sys.path), {name: os.environ.get(name) for name in [SYSTEM_ENV_VAR, *launch, *own]}
    sys.meta_path.insert(0, finder)
    sys.argv = [str(script)] + list(argv)
    sys.path.insert(0, str(script.resolve().parent))
    os.environ.update({SYSTEM_ENV_VAR: system} if system else {}, **launch, **own)
    virtual_clock.reset()
    if not real_clock:
        virtual_clock.install(host_time)
    try:
        _run_as_main(script)
        return 0
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)  # sys.exit("message"), as Python prints it
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:  # the script's own failure: its traceback, as Python would show it
        traceback.print_exc()
        return 3 if isinstance(e, OutOfMemoryError) else 1
    finally:
        calls, seconds = virtual_clock.totals()
        each = virtual_clock.by_label()
        simulations = virtual_clock.runs()
        virtual_clock.uninstall()
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            if finder._target(name):  # the aliases only: sim's own modules and the stand-ins stay imported
                del sys.modules[name]
        sys.argv, sys.path[:] = saved[0], saved[1]
        for name, value in saved[2].items():
            if name == SYSTEM_ENV_VAR and not system:
                continue  # not set here: the script's own setting stays, as before
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if not quiet:
            host = sum(h for _, _, h in each.values())
            print(f"ipusim script: {calls} simulated device call(s), {seconds:.6g} s of simulated time"
                  + (f", {host:.6g} s of it PopTorch's or PopXL's own host work in the calls"
                     if host else "")
                  + (" (the script's clocks were real)" if real_clock else
                     " (compilation and the simulator's own work took no time on the script's clocks: Poplar's "
                     "compile time is not simulated)"), file=sys.stderr)
            for label, (n, s, h) in each.items():
                of_host = f" ({h / n * 1e3:.3g} ms of it the front end's host work)" if h else ""
                print(f"  {label}: {n} call(s), {s / n:.6g} s each{of_host}", file=sys.stderr)
                run = simulations.get(label)
                if run is None:
                    continue
                if verbose:  # -v: the latest call's notes, as ipusim run -v prints them
                    for note in run.all_notes:
                        print(f"    - {note}", file=sys.stderr)
                elif not summary and (idle := _no_modelled_effect(run)):
                    print(f"    accepted with no modelled effect: {', '.join(idle)} (-v or --summary: the notes)",
                          file=sys.stderr)
        if summary:
            for label, run in simulations.items():
                print(f"\n{label}, its latest call:\n{format_summary(run)}", file=sys.stderr)


def _run_as_main(script: Path) -> None:
    """Run ``script`` as ``python script`` runs it: as module ``__main__`` (in ``sys.modules`` while it runs, so
    what it pickles of its own classes loads), its ``__file__`` absolute, the typed path joined to the working
    directory and not normalised, as Python makes it (``runpy.run_path`` keeps it as typed, so a script that
    changes directory would no longer find the files beside it), and ``sys.argv[0]`` as typed."""
    file = os.path.join(os.getcwd(), str(script))
    code = compile(script.read_bytes(), file, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=file, __cached__=None, __loader__=None, __package__=None, __spec__=None,
                         __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is None:
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = saved


def _no_modelled_effect(run) -> list[str]:
    """What a call's notes say was accepted with no modelled effect (an option, an optimizer argument, an
    environment variable, ...), each by its name (the note up to its value): what the script set that the
    simulation does not follow, which its own output would not show."""
    names = []
    for note in run.all_notes:
        if "no modelled effect" in note:
            name = note.split("=", 1)[0].split(": ", 1)[0].removeprefix("option ")
            names.append(name if len(name) <= 80 else name[:77] + "...")
    return list(dict.fromkeys(names))


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``script`` arguments to ``p`` (a sub-parser of ``ipusim``)."""
    p.add_argument("--system", metavar="NAME", help="the system (a config name or TOML path) unless the script "
                   "chooses one (sets IPUSIM_SYSTEM)")
    p.add_argument("--real-clock", action="store_true", help="leave the time module's clocks real (the script's "
                   "own timings then measure the simulator, not the IPU)")
    p.add_argument("--no-host-time", dest="host_time", action="store_false", help="the virtual clock moves only "
                   "by the simulated device calls: the script's host work (data loading, ...) takes no time")
    p.add_argument("--module", dest="stand_ins", action="append", default=[], metavar="NAME=MODULE",
                   help="the script's import of NAME (and NAME.X) gets MODULE instead: a stand-in for a module the "
                        "simulator cannot run, such as a custom op compiled in C++ (repeatable)")
    p.add_argument("--no-cpu-outputs", dest="cpu_outputs", action="store_false", help="the script's PopTorch "
                   "models return zeros of their outputs' shapes instead of running on the CPU (the weights do not "
                   "change; the simulated calls are the same): a large model's call then takes seconds, not hours "
                   "(sets IPUSIM_CPU_OUTPUTS=0)")
    p.add_argument("--summary", action="store_true", help="after the script, the ipusim run report (breakdown, "
                   "memory, notes) of each model's or session's latest call, on stderr")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    add_verbosity(p)
    p.set_defaults(func=_cmd_script, subparser=p)
    return p


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``script`` on ``ipusim``'s sub-parsers."""
    return configure(subparsers.add_parser(
        "script", help="run an unmodified PopTorch / PopXL / PopDist script on the simulator",
        description="Run a Python script whose poptorch, popxl and popdist imports get the simulator's "
                    "front ends, with the time module's clocks reading the simulated device time."))


def _cmd_script(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.real_clock and not args.host_time:
        raise OptionsError("--no-host-time sets how the virtual clock moves, and --real-clock leaves the clocks "
                           "real: give one or the other")
    stand_ins = {}
    for given in args.stand_ins:
        name, sep, module = given.partition("=")
        if not sep or not name or not module:
            raise OptionsError(f"--module {given!r}: expected NAME=MODULE, the module the script imports and the "
                               "one to import for it (e.g. "
                               "modelling.rotary_pos_embed=sim.popxl_addons.ops.rotary_pos_embed)")
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise OptionsError(f"--module {given!r}: cannot import {module!r} ({e}); give an importable module") \
                from None
        stand_ins[name] = module
    return run_script(args.script, _script_args(args), args.system, args.real_clock, quiet=verbosity(args) == QUIET,
                      host_time=args.host_time, stand_ins=stand_ins, summary=args.summary,
                      verbose=verbosity(args) == VERBOSE, cpu_outputs=args.cpu_outputs)


def _script_args(args: argparse.Namespace) -> list[str]:
    """The script's arguments as typed. argparse drops a ``--`` that comes right after the script's path
    (``ipusim script train.py -- --epochs 1``), which ``python train.py -- --epochs 1`` passes on: it is put
    back, so the script sees the ``sys.argv`` Python would give it."""
    typed, rest = list(getattr(args, "argv", None) or []), list(args.args)
    at = len(typed) - len(rest) - 1  # where a dropped "--" stood
    if at >= 1 and typed[at] == "--" and typed[at - 1] == args.script and typed[at + 1:] == rest:
        return ["--"] + rest
    return rest
