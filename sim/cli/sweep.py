"""Sweeps: many configurations of ``ipusim run``, on a process pool or a Dask cluster.

A point is a list of ``ipusim run`` flags; a sweep is the product of ``--grid FLAG=V1,V2,...``
axes on top of common flags. Each point becomes one row: the grid values, cycles, seconds,
samples/s, average latency, the share of each breakdown category (over all IPUs of the run)
and the fullest tile's peak memory; a point that fails (out of memory, invalid options) keeps
its row with the error instead of the numbers::

    ipusim sweep --grid micro-batch=1,2,4 --grid replicas=1,2,4 -- --model bert-base --system ipu-pod16

Points run on a process pool (``--workers``, default: all cores), or on a Dask cluster with
``--dask ADDRESS`` (``pip install -e '.[dask]'``). With ``--csv FILE`` each row is appended to
FILE as its point finishes (completion order), with the shared flags in its last column
(``shared_flags``); ``--resume`` skips the points FILE already holds, and refuses a FILE written
with other shared flags. SIGINT or SIGTERM stops the sweep cleanly (exit 130 / 143), keeping the
rows done.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import difflib
import itertools
import math
import os
import shlex
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Iterator

import pandas as pd

from ..errors import IpuSimError
from ..program import CATEGORIES
from . import run
from .argtypes import csv_file, positive_int

#: the CSV's last column: the ``ipusim run`` flags every point shares (after ``--``), as one command line
SHARED_COLUMN = "shared_flags"

#: the columns of a row after the grid's: cycles (IPU clock), seconds, samples per second,
#: average round-trip latency (seconds; empty where not measured, e.g. synthetic data), peak bytes on the fullest tile, the error ("" if
#: none) and the share (0..1) of each breakdown category
RESULT_COLUMNS = ("cycle_count", "seconds", "samples_per_second", "latency_avg_s", "peak_tile_bytes",
                  "error") + tuple(f"share_{c}" for c in CATEGORIES)


class PointError(Exception):
    """A point whose flags ``ipusim run`` rejects (or a sweep asked for wrongly)."""


class SweepInterrupted(BaseException):
    """SIGINT or SIGTERM stopped the sweep: ``signum``, and ``done`` of ``total`` points have rows."""

    def __init__(self, signum: int, done: int = 0, total: int = 0):
        super().__init__(signum)
        self.signum, self.done, self.total = signum, done, total


def _run_parser(what: str = "") -> argparse.ArgumentParser:
    """``ipusim run``'s parser, its usage errors raised as :class:`PointError` (prefixed by ``what``)."""
    parser = run.configure(argparse.ArgumentParser(prog="ipusim run", exit_on_error=False))

    def fail(message):
        raise PointError(f"{what}: {message}" if what else message)
    parser.error = fail
    return parser


def simulate_point(argv: list[str]):
    """Parse ``ipusim run`` flags and simulate them; a usage error is a :class:`PointError`."""
    parser = _run_parser()
    return run.simulate_args(_parse(parser, argv), parser)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    try:
        return parser.parse_args(argv)
    except argparse.ArgumentError as e:
        parser.error(str(e))


def run_point(argv: list[str]) -> dict:
    """Simulate one point (``ipusim run`` flags) and return its row."""
    try:
        result = simulate_point(argv)
    except (IpuSimError, PointError) as e:
        return {"error": str(e).splitlines()[0]}
    busy = result.breakdown.sum()
    total = result.cycle_count * len(result.breakdown)
    row = {"cycle_count": result.cycle_count, "seconds": result.seconds,
           "samples_per_second": result.samples_per_second, "latency_avg_s": result.latency[2] if result.latency_measured() else float("nan"),
           "peak_tile_bytes": max(m["peak_tile_bytes"] for m in result.memory.values()), "error": ""}
    row.update({f"share_{c}": float(busy[c]) / total if total else 0.0 for c in CATEGORIES})
    return row


def grid_points(axes: list[str]) -> list[dict[str, str]]:
    """``["micro-batch=1,2", "replicas=1,4"]`` -> the product as dicts of flag -> value (an
    empty value leaves the flag out: the run's default). Values that hold commas themselves (a
    list flag: ``layers-per-ipu=3,3;2,4``) are separated by semicolons instead."""
    parsed, seen = [], set()
    for axis in axes:
        flag, sep, values = axis.partition("=")
        flag = flag.lstrip("-")
        if not sep or not flag or not values:
            raise PointError(f"--grid {axis!r}: expected FLAG=V1,V2,... (a flag of ipusim run, without --)")
        if flag in seen:
            raise PointError(f"--grid {flag} is given twice: put all its values in one --grid {flag}=V1,V2,...")
        seen.add(flag)
        parsed.append([(flag, v) for v in values.split(";" if ";" in values else ",")])
    _check_flags(seen)
    return [dict(p) for p in itertools.product(*parsed)]


def _check_flags(flags) -> None:
    """Every grid flag is a flag of ``ipusim run`` that takes a value."""
    actions = {s.lstrip("-"): a for a in run.configure(argparse.ArgumentParser(prog="ipusim run"))._actions
               for s in a.option_strings}
    for flag in sorted(flags):
        action = actions.get(flag)
        if flag in ("output", "json"):
            raise PointError(f"--grid {flag}=...: --{flag} writes one run's output, which a sweep does not keep; a "
                             "sweep writes its rows with --csv (run the points you want whole with ipusim run)")
        if action is None:
            near = difflib.get_close_matches(flag, actions, n=1)
            raise PointError(f"--grid {flag}=...: ipusim run has no flag --{flag}"
                             + (f" (did you mean {near[0]}?)" if near else ""))
        if action.nargs == 0:
            raise PointError(f"--grid {flag}=...: --{flag} takes no value, so it cannot be an axis; sweep it "
                             f"as two runs, one with -- --{flag}")


def check_common(common: list[str], points: list[dict[str, str]] = ()) -> None:
    """The flags after ``--`` parse as ``ipusim run``'s, set no grid axis, and hold none that belongs
    to one run's output rather than a sweep's rows (checked before any point runs). ``points``: the
    grid's points (flag -> value). A repeatable flag (``--param``, ``--dim``) may be
    both an axis and a flag after ``--`` when the two name different things (``--grid
    param=fp8_convs=true,fp8_convs=false -- --param with_loss=false``): each point then has both."""
    parser = _run_parser("the flags after --")
    given = {_long_flag(parser, c) for c in common if c.startswith("--")}  # as ipusim run reads them (--micro too)
    single = [f for f in ("--output", "--json") if f in given]
    if single:
        raise PointError(f"{single[0]} after -- writes one run's output; a sweep writes its rows with --csv")
    grid_flags = dict.fromkeys(f for p in points for f in p)
    for flag in sorted(f for f in grid_flags if f"--{f}" in given):
        if not isinstance(_action(parser, f"--{flag}"), argparse._AppendAction):
            raise PointError(f"--{flag} is both a --grid axis and a flag after --; give it in one place")
        named = {_named(p[flag]) for p in points if p.get(flag)}
        shared = {_named(v) for v in _values(parser, common, f"--{flag}")}
        if named & shared:
            raise PointError(f"--{flag} {sorted(named & shared)[0]}=... is both a --grid axis and a flag after --; "
                             "give it in one place")
    _parse(parser, common)


def point_argv(common: list[str], point: dict[str, str]) -> list[str]:
    """The ``ipusim run`` flags of one grid point: ``common`` and each grid flag with its value (an empty
    value leaves the flag out)."""
    return common + [a for flag, v in point.items() for a in (f"--{flag}", v) if v != ""]


def check_values(common: list[str], points: list[dict[str, str]]) -> None:
    """Every grid value parses as ``ipusim run`` reads it, beside the flags after ``--``, and so does
    every point (checked before any point runs): a value ``ipusim run`` rejects (``--grid
    micro-batch=1,abc``) is a :class:`PointError` naming its axis and value, not a failed row once
    the points before it have run."""
    parser = _run_parser()
    for flag, value in dict.fromkeys((f, v) for p in points for f, v in p.items() if v != ""):
        try:
            _parse(parser, common + [f"--{flag}", value])
        except PointError as e:
            raise PointError(f"--grid {flag}={value}: {e}") from None
    for p in points:
        try:
            _parse(parser, point_argv(common, p))
        except PointError as e:
            raise PointError(f"--grid point {', '.join(f'{f}={v}' for f, v in p.items())}: {e}") from None


def _action(parser: argparse.ArgumentParser, flag: str):
    """The action of ``parser`` whose option strings hold ``flag``."""
    return next(a for a in parser._actions if flag in a.option_strings)


def _named(value: str) -> str:
    """What a repeatable flag's value sets: the name before ``=`` (``fp8_convs=true`` -> ``fp8_convs``)."""
    return value.split("=", 1)[0]


def _values(parser: argparse.ArgumentParser, common: list[str], flag: str) -> list[str]:
    """The values ``common`` gives ``flag`` (each ``--flag V`` or ``--flag=V``; abbreviated as argparse
    reads them)."""
    out = []
    for i, word in enumerate(common):
        if word.startswith("--") and _long_flag(parser, word) == flag:
            out.append(word.split("=", 1)[1] if "=" in word else (common[i + 1] if i + 1 < len(common) else ""))
    return out


def _long_flag(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The long flag of ``parser`` that ``word`` (``--micro-batch``, ``--micro-batch=4``, or an abbreviation
    argparse takes, ``--micro``) stands for; None if none or several."""
    name = word.split("=", 1)[0]
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    hits = [name] if name in flags else [f for f in flags if f.startswith(name)]
    return hits[0] if len(hits) == 1 else None


def _worker_init() -> None:
    """In a pool worker: leave SIGINT to the sweep's own process (a terminal's Ctrl-C reaches
    every process of the group) and let SIGTERM end the worker, whatever the parent installed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _end_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the points not started and end the pool's worker processes now (points still
    running are dropped), then wait until the workers are gone."""
    # ProcessPoolExecutor has no public way to stop running workers before Python 3.14
    workers = list((getattr(pool, "_processes", None) or {}).values())
    for process in workers:
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)
    for process in workers:
        process.join()


def run_points(argvs: dict[int, list[str]], workers: int | None = None,
               dask: str | None = None, point=None) -> Iterator[tuple[int, dict]]:
    """Run the points ``{index: ipusim run flags}``; yield ``(index, row)`` as each finishes.

    ``point`` turns one point's flags into its row (default :func:`run_point`; ``ipusim plan``
    passes its own, a module-level function so that it pickles).

    Points run on a Dask scheduler, a process pool (``workers`` processes, default: all cores)
    or, with one worker or one point, in this process. Closing the generator early (or an
    exception raised while it waits, e.g. :class:`SweepInterrupted`) cancels the points not
    finished and ends the pool's workers.
    """
    point = point or run_point
    if dask:
        try:
            from dask.distributed import Client
            from dask.distributed import as_completed as dask_completed
        except ImportError:
            raise PointError("--dask needs Dask: pip install -e '.[dask]'") from None
        try:
            _check_address(dask)  # before a Client: a failed one leaves Dask's event loop unusable in this process
            client = Client(dask)
        except Exception as e:  # a malformed or unreachable address: dask's ValueError, OSError, TimeoutError
            raise PointError(f"--dask {dask!r}: cannot reach the Dask scheduler ({e}); give its address as "
                             "tcp://HOST:PORT") from None
        with client:
            futures = {client.submit(point, argv, pure=False): i for i, argv in argvs.items()}
            try:
                for future in dask_completed(futures):
                    yield futures[future], future.result()
            finally:
                client.cancel(list(futures))
    elif (workers or os.cpu_count() or 1) > 1 and len(argvs) > 1:
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init)
        try:
            futures = {pool.submit(point, argv): i for i, argv in argvs.items()}
            for future in as_completed(futures):
                yield futures[future], future.result()
        except BaseException:
            _end_pool(pool)
            raise
        pool.shutdown(wait=True)
    else:
        for i, argv in argvs.items():
            yield i, point(argv)


def _check_address(address: str) -> None:
    """Dask's own parse of a scheduler address (ValueError for a malformed one); a TCP-like address
    must name a port."""
    from distributed.comm.addressing import parse_address, parse_host_port
    scheme, location = parse_address(address)
    if scheme in ("tcp", "tls", "ws", "wss"):
        parse_host_port(location)


def _read_rows(path: Path, columns: list[str]) -> list[dict[str, str]]:
    """The rows of an earlier sweep's CSV at ``path`` (values as text), for ``--resume``.

    A last line cut short (the writer killed mid-row) is cut off the file; a row with more or fewer
    fields than the header (a damaged line) is not read, so its point runs again. The header must be
    ``columns``: rows of another grid cannot be mixed with this one's (:func:`_check_shared`
    keeps out those of other shared flags).
    """
    if not path.exists() or path.stat().st_size == 0:
        return []
    with open(path, "rb+") as f:
        data = f.read()
        if not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is not None and list(reader.fieldnames) != columns:
            raise PointError(f"--resume: {str(path)!r} has the columns of another sweep "
                             f"({', '.join(reader.fieldnames[:4])}, ...); this one writes "
                             f"{', '.join(columns[:4])}, ...")
        return [row for row in reader if None not in row and None not in row.values()]


def _check_shared(path: Path, rows: list[dict[str, str]], shared: str) -> None:
    """Error unless every row of an earlier sweep's CSV was run with the shared flags ``shared``:
    its numbers belong to another configuration (another model, system or option)."""
    other = next((r[SHARED_COLUMN] for r in rows if r.get(SHARED_COLUMN) != shared), None)
    if other is not None:
        raise PointError(f"--resume: {str(path)!r} holds a sweep run with other shared flags ({other!r}); "
                         f"this one runs {shared!r}: give the same flags after --, or another --csv")


def _holds_rows(path: Path) -> bool:
    """Whether the CSV at ``path`` holds anything beyond its header line (a run stopped before its first row
    leaves the header alone, which a new run may write over)."""
    with open(path, "rb") as f:
        return any(line.strip() for line in itertools.islice(f, 1, None))


def kept_csv_error(path: Path | None, resume: bool, what: str) -> str | None:
    """The usage error for ``--csv path`` when the file holds rows and ``--resume`` is not given
    (the rows are never overwritten), else None."""
    if path is None or resume or not path.is_file() or not _holds_rows(path):
        return None
    return (f"--csv {str(path)!r} holds rows already: add --resume to finish that {what}, or give a new file "
            "(its rows are not overwritten)")


class _CsvRows:
    """Appends rows to a CSV file, one flushed line each, writing the header once.

    ``path`` None writes nothing; ``append`` keeps the rows already in the file.
    """

    def __init__(self, path: Path | None, columns: list[str], append: bool):
        self._file = None
        if path is None:
            return
        keep = append and path.exists() and path.stat().st_size > 0
        self._file = open(path, "a" if keep else "w", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, fieldnames=columns, restval="", lineterminator="\n")
        if not keep:
            self._writer.writeheader()
            self._file.flush()

    def write(self, row: dict) -> None:
        if self._file is not None:  # a number not measured (NaN: a latency without host IO) is an empty cell
            self._writer.writerow({k: "" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()})
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _progress_bar(total: int, done: int):
    """A tqdm bar counting points (``done`` of ``total`` at the start) on stderr when stderr
    is a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=done, unit="point", file=sys.stderr)


def sweep(axes: list[str], common: list[str], workers: int | None = None, dask: str | None = None,
          csv_path: Path | None = None, resume: bool = False) -> pd.DataFrame:
    """Run every point of the grid; one row per point, in grid order.

    With ``csv_path`` each row is appended to that CSV as its point finishes; with ``resume``
    the points it already holds (same grid values) are not run again and their rows are
    kept. Raises :class:`SweepInterrupted` (with the count of points done) if a signal
    handler raises it while points run.
    """
    if workers is not None and workers < 1:
        raise PointError(f"workers must be a whole number >= 1, got {workers}")
    points = grid_points(axes)
    check_common(common, points)
    check_values(common, points)
    flags = list(points[0])
    columns = flags + [c for c in RESULT_COLUMNS if c not in flags]
    shared = shlex.join(common)

    def key(row: dict) -> tuple[str, ...]:
        return tuple(str(row[f]) for f in flags)
    earlier = {}
    if resume and csv_path:
        found = _read_rows(csv_path, columns + [SHARED_COLUMN])
        _check_shared(csv_path, found, shared)
        earlier = {key(r): r for r in found}
    argvs = {i: point_argv(common, p) for i, p in enumerate(points) if key(p) not in earlier}
    rows: dict[int, dict] = {}
    out = _CsvRows(csv_path, columns + [SHARED_COLUMN], append=resume)
    bar = _progress_bar(len(points), len(points) - len(argvs))
    try:
        with contextlib.closing(run_points(argvs, workers, dask)) as finished:
            for i, row in finished:
                rows[i] = {**points[i], **row}
                out.write({**rows[i], SHARED_COLUMN: shared})
                if bar is not None:
                    bar.update()
    except SweepInterrupted as e:
        e.done, e.total = len(points) - len(argvs) + len(rows), len(points)
        raise
    finally:
        if bar is not None:
            bar.close()
        out.close()
    table = pd.DataFrame([rows[i] if i in rows else earlier[key(p)] for i, p in enumerate(points)],
                         columns=columns)
    for c in RESULT_COLUMNS:  # rows read back from the CSV hold text, "" where a point failed
        if c != "error" and c not in flags:
            table[c] = pd.to_numeric(table[c].mask(table[c] == ""))
    table["error"] = table["error"].fillna("").astype(str)
    return table


@contextlib.contextmanager
def _signals_interrupt():
    """While inside: SIGINT and SIGTERM raise :class:`SweepInterrupted` (once: a second signal
    is ignored so it cannot cut the clean-up short). Only in the main thread, where Python
    runs signal handlers; the previous handlers come back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = (signal.SIGINT, signal.SIGTERM)

    def interrupt(signum, frame):
        for s in signums:
            signal.signal(s, signal.SIG_IGN)
        raise SweepInterrupted(signum)
    previous = {s: signal.signal(s, interrupt) for s in signums}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--grid", action="append", default=[], metavar="FLAG=V1,V2",
                        help="an axis: a flag of `ipusim run` (without --) and its values, separated by commas, or "
                        "by semicolons when a value holds commas (layers-per-ipu=3,3;2,4); repeatable")
    parser.add_argument("--workers", type=positive_int, metavar="N", help="processes, >= 1 (default: all cores)")
    parser.add_argument("--dask", metavar="ADDRESS", help="run the points on this Dask scheduler")
    parser.add_argument("--csv", type=csv_file, metavar="FILE",
                        help="also write the rows to this CSV file, each as its point finishes (completion order)")
    parser.add_argument("--resume", action="store_true",
                        help="with --csv: skip the points the CSV already holds and append the others")
    parser.add_argument("common", nargs=argparse.REMAINDER,
                        help="after --: `ipusim run` flags shared by every point")
    parser.set_defaults(func=_cmd_sweep, subparser=parser)
    return parser


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``sweep`` on ``ipusim``'s sub-parsers."""
    return _configure(subparsers.add_parser("sweep", help="simulate a grid of configurations",
                                            description=__doc__.split("\n\n")[0]))


def _interrupted_message(e: SweepInterrupted, csv_path: Path | None) -> str:
    """One line: which signal, how many points are done, and how to finish the sweep."""
    head = f"ipusim: sweep stopped by {signal.Signals(e.signum).name}: {e.done} of {e.total} points done"
    if csv_path is None:
        return head + "; without --csv their rows are not kept (give --csv FILE to be able to --resume)"
    return head + f", rows in {str(csv_path)!r}; run the same command with --resume to finish"


def _printable(table: pd.DataFrame) -> pd.DataFrame:
    """The table as printed: whole-number columns (cycles, bytes) as integers, also where a failed
    point left them empty (which makes pandas hold them as floats)."""
    table = table.copy()
    for col in table.select_dtypes("float").columns:
        values = table[col].dropna()
        if len(values) and (values == values.round()).all() and values.abs().max() < 2 ** 53:
            table[col] = table[col].astype("Int64")
    return table


def _cmd_sweep(args, parser) -> int:
    if not args.grid:
        parser.error("give at least one --grid FLAG=V1,V2,...")
    if args.resume and args.csv is None:
        parser.error("--resume needs --csv FILE (the CSV of the sweep to finish)")
    kept = kept_csv_error(args.csv, args.resume, "sweep")
    if kept:
        parser.error(kept)
    common = args.common[1:] if args.common[:1] == ["--"] else args.common
    try:
        with _signals_interrupt():
            table = sweep(args.grid, common, args.workers, args.dask, args.csv, args.resume)
    except PointError as e:
        parser.error(str(e))
    except SweepInterrupted as e:
        print(_interrupted_message(e, args.csv), file=sys.stderr)
        return 128 + e.signum
    with pd.option_context("display.width", 220, "display.max_columns", 30):
        print(_printable(table).to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    return 0 if (table["error"] == "").all() else 1
