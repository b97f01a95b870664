"""The ``ipusim`` command line: the parser of every subcommand and the exit codes.

    ipusim run ...          simulate one call of a model (sim.cli.run)
    ipusim systems|models   the system configs and the model zoo (sim.cli.catalog)
    ipusim collective ...   time one collective (sim.cli.collective)
    ipusim sweep ...        a grid of runs (sim.cli.sweep)
    ipusim bench            the simulator's own speed (sim.cli.bench)

Exit codes: 0 success; 2 a usage error or an error the simulator raises (unknown system or
model, bad parameter, invalid options); 3 out of tile memory; 1 a file could not be written.
"""

from __future__ import annotations

import argparse
import sys

import sim

from . import bench, catalog, collective, run, sweep


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
    return p


def _error(message: object) -> None:
    print(f"ipusim: error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises for user errors)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args, args.subparser)
    except SystemExit as e:  # argparse: --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except sim.OutOfMemoryError as e:
        _error(e)
        return 3
    except sim.IpuSimError as e:
        _error(e)
        return 2
    except OSError as e:
        _error(e)
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
