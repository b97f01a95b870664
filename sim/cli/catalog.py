"""``ipusim systems`` and ``ipusim models``: what the simulator knows about."""

from __future__ import annotations

import json

import models
import sim

from .argtypes import VERBOSE, verbosity


def _cmd_systems(args, parser) -> int:
    rows = [("name", "IPUs", "gen", "clock", "description")]
    for name in sim.available_systems():
        try:
            s = sim.load_system(name)
            rows.append((name, str(s.num_ipus), s.ipu.generation, f"{s.ipu.clock_hz / 1e9:.4g} GHz",
                         s.description + (f" [{s.path}]" if verbosity(args) >= VERBOSE else "")))
        except sim.ConfigError as e:
            rows.append((name, "?", "?", "?", f"invalid config: {e}"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join([r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2].ljust(widths[2]),
                         r[3].rjust(widths[3]), r[4]]))
    return 0


def _cmd_models(args, parser) -> int:
    width = max(map(len, models.names()))
    for name in models.names():
        params = " ".join(f"{k}={json.dumps(v)}" for k, v in models.describe(name).items())
        print(f"{name.ljust(width)}  {params}")
    return 0


def add_subcommands(subparsers) -> None:
    """Register ``systems`` and ``models`` on ``ipusim``'s sub-parsers."""
    s = subparsers.add_parser("systems", help="list the system configs")
    s.set_defaults(func=_cmd_systems, subparser=s)
    z = subparsers.add_parser("models", help="list the zoo models with their default parameters")
    z.set_defaults(func=_cmd_models, subparser=z)
