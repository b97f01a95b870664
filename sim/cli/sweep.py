"""Sweeps: many configurations of ``ipusim run``, on a process pool or a Dask cluster.

A point is a list of ``ipusim run`` flags; a sweep is the product of ``--grid FLAG=V1,V2,...``
axes on top of common flags. Each point becomes one row: the grid values, cycles, seconds,
samples/s, average latency, the share of each breakdown category (over all IPUs of the run)
and the fullest tile's peak memory; a point that fails (out of memory, invalid options) keeps
its row with the error instead of the numbers::

    ipusim sweep --grid micro-batch=1,2,4 --grid replicas=1,2,4 -- --model bert-base --system ipu-pod16

Points run on a process pool (``--workers``, default: all cores), or on a Dask cluster with
``--dask ADDRESS`` (``pip install -e '.[dask]'``).
"""

from __future__ import annotations

import argparse
import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from ..errors import IpuSimError
from ..program import CATEGORIES
from . import run


class PointError(Exception):
    """A point whose flags ``ipusim run`` rejects."""


def run_point(argv: list[str]) -> dict:
    """Simulate one point (``ipusim run`` flags) and return its row."""
    run_parser = run.configure(argparse.ArgumentParser(prog="ipusim run"))

    def fail(message):
        raise PointError(message)
    run_parser.error = fail
    try:
        args = run_parser.parse_args(argv)
        result = run.simulate_args(args, run_parser)
    except (IpuSimError, PointError) as e:
        return {"error": str(e).splitlines()[0]}
    busy = result.breakdown.sum()
    total = result.cycle_count * len(result.breakdown)
    row = {"cycle_count": result.cycle_count, "seconds": result.seconds,
           "samples_per_second": result.samples_per_second, "latency_avg_s": result.latency[2],
           "peak_tile_bytes": max(m["peak_tile_bytes"] for m in result.memory.values()), "error": ""}
    row.update({f"share_{c}": float(busy[c]) / total if total else 0.0 for c in CATEGORIES})
    return row


def grid_points(axes: list[str]) -> list[dict[str, str]]:
    """``["micro-batch=1,2", "replicas=1,4"]`` -> the product as dicts of flag -> value."""
    parsed = []
    for axis in axes:
        flag, sep, values = axis.partition("=")
        if not sep or not flag or not values:
            raise PointError(f"--grid {axis!r}: expected FLAG=V1,V2,... (a flag of ipusim run, without --)")
        parsed.append([(flag.lstrip("-"), v) for v in values.split(",")])
    return [dict(p) for p in itertools.product(*parsed)]


def sweep(axes: list[str], common: list[str], workers: int | None = None, dask: str | None = None) -> pd.DataFrame:
    """Run every point of the grid; one row per point, in grid order."""
    points = grid_points(axes)
    argvs = [common + [a for flag, v in p.items() for a in (f"--{flag}", v) if v != ""] for p in points]
    if dask:
        try:
            from dask.distributed import Client
        except ImportError:
            raise PointError("--dask needs Dask: pip install -e '.[dask]'") from None
        with Client(dask) as client:
            rows = client.gather(client.map(run_point, argvs, pure=False))
    elif (workers or os.cpu_count() or 1) > 1 and len(argvs) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            rows = list(pool.map(run_point, argvs))
    else:
        rows = [run_point(a) for a in argvs]
    return pd.DataFrame([{**p, **r} for p, r in zip(points, rows)])


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--grid", action="append", default=[], metavar="FLAG=V1,V2",
                        help="an axis: a flag of `ipusim run` (without --) and its values; repeatable")
    parser.add_argument("--workers", type=int, help="processes (default: all cores)")
    parser.add_argument("--dask", metavar="ADDRESS", help="run the points on this Dask scheduler")
    parser.add_argument("--csv", type=Path, help="also write the table to this CSV file")
    parser.add_argument("common", nargs=argparse.REMAINDER,
                        help="after --: `ipusim run` flags shared by every point")
    parser.set_defaults(func=_cmd_sweep, subparser=parser)
    return parser


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``sweep`` on ``ipusim``'s sub-parsers."""
    return _configure(subparsers.add_parser("sweep", help="simulate a grid of configurations",
                                            description=__doc__.split("\n\n")[0]))


def _cmd_sweep(args, parser) -> int:
    if not args.grid:
        parser.error("give at least one --grid FLAG=V1,V2,...")
    common = args.common[1:] if args.common[:1] == ["--"] else args.common
    try:
        table = sweep(args.grid, common, args.workers, args.dask)
    except PointError as e:
        parser.error(str(e))
    if args.csv:
        from ..results.report import atomic_write
        atomic_write(Path(args.csv), lambda tmp: table.to_csv(tmp, index=False))
    with pd.option_context("display.width", 220, "display.max_columns", 30):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0 if (table["error"] == "").all() else 1
