"""The ``ipusim`` command line: the parser of every subcommand and the exit codes.

    ipusim run ...          simulate one call of a model (sim.cli.run)
    ipusim systems|models   the system configs and the model zoo (sim.cli.catalog)
    ipusim collective ...   time one collective (sim.cli.collective)
    ipusim sweep ...        a grid of runs (sim.cli.sweep)
    ipusim bench            the simulator's own speed (sim.cli.bench)
    ipusim compare A B ...  runs side by side, within a tolerance or not (sim.cli.compare)
    ipusim plan ...         the fastest configurations for a global batch (sim.cli.plan)
    ipusim script S [ARGS]  run an unmodified PopTorch / PopXL script on the simulator (sim.cli.script)

Every subcommand takes -q/--quiet (only errors and the machine output asked for) and
-v/--verbose (also progress and the run's notes, on stderr); docs/cli.md lists every flag.

Exit codes: 0 success; 2 a usage error or an error the simulator raises (unknown system or
model, bad parameter, invalid options; for compare: a missing file, or one that is not a run);
3 out of tile memory; 1 a file could not be written; 4 (compare) the runs differ by more than
--tolerance.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import signal
import sys
import threading

import sim

from . import bench, catalog, collective, run, sweep
from . import compare
from . import plan
from . import script
from .argtypes import add_verbosity_to_subcommands


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ipusim", description="Discrete-event performance simulator "
                                "for Graphcore IPU systems.")
    p.add_argument("--version", action="version", version=f"ipusim {sim.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run.add_subcommand(sub)
    catalog.add_subcommands(sub)
    collective.add_subcommand(sub)
    sweep.add_subcommand(sub)
    bench.add_subcommand(sub)
    compare.add_subcommand(sub)
    plan.add_subcommand(sub)
    script.add_subcommand(sub)
    add_verbosity_to_subcommands(sub)  # -v/-q on every subcommand (keep this line last)
    return p


def _error(message: object) -> None:
    print(f"ipusim: error: {message}", file=sys.stderr)


#: Flags of Graphcore's example scripts and of optimum-graphcore's IPUConfig that ``ipusim run`` spells otherwise
#: (or sets another way): what to type instead, its first flag the one the subcommand must have for the hint
FOREIGN_FLAGS = {
    "--ipus-per-replica": "a replica's IPUs follow from where the model is placed: --layers-per-ipu, or "
                          "--param 'split_points=[...]' for the CNNs",
    "--replication-factor": "ipusim's is --replicas",
    "--gradient-accumulation-steps": "ipusim's is --gradient-accumulation",
    "--batches-per-step": "ipusim's is --device-iterations",
    "--batch-size": "ipusim's is --micro-batch, a replica's batch: the global batch is micro-batch x gradient "
                    "accumulation x replicas",
    "--matmul-proportion": "ipusim's is --available-memory-proportion",
    "--half-partials": "ipusim's is --partials half",
    "--enable-rts": "ipusim's is --optimizer-state rts",
}


def _unrecognized(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """Usage error (exit 2) naming the words the (sub)command does not know, with the nearest of
    its flags for each mistyped one, or what to type for a flag of Graphcore's scripts
    (:data:`FOREIGN_FLAGS`) where the subcommand has the flag the hint names."""
    flags = [f for action in parser._actions for f in action.option_strings]
    shown = []
    for word in words:
        flag = word.split("=")[0]
        if flag in flags:  # a flag of this command, typed before the command's name
            shown.append(f"{word} (a flag of `ipusim {parser.prog.split()[-1]}`: put it after the command's name)")
            continue
        hint = FOREIGN_FLAGS.get(flag, "")
        if hint and re.search(r"--[a-z-]+", hint).group() in flags:
            shown.append(f"{word} ({hint})")
            continue
        near = difflib.get_close_matches(flag, flags, n=1) if word.startswith("-") else []
        shown.append(f"{word} (did you mean {near[0]}?)" if near else word)
    parser.error("unrecognized arguments: " + " ".join(shown))


class Terminated(BaseException):
    """SIGTERM, raised where the process is, so output files are cleaned up as after Ctrl-C."""


def _terminate(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises for user errors)."""
    parser = build_parser()
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if on_main_thread else None
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            _unrecognized(getattr(args, "subparser", parser), unknown)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # what was typed (plan --config merges with it)
        return args.func(args, args.subparser)
    except SystemExit as e:  # argparse: --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except sim.OutOfMemoryError as e:
        _error(e)
        return 3
    except sim.IpuSimError as e:
        _error(f"{e}{run.flag_hints(str(e))}")  # the Python API's option names, as flags
        return 2
    except BrokenPipeError:  # the reader went away (ipusim models | head): stop quietly, as a Unix filter does
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        except OSError:
            pass
        return 141  # 128 + SIGPIPE, what the shell reports for a filter stopped by the pipe
    except OSError as e:
        _error(e)
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Terminated:
        _error("terminated (SIGTERM)")
        return 143
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
