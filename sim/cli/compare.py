"""``ipusim compare A B [C ...]``: runs side by side, and whether they agree within a tolerance.

    ipusim run --model bert-base --output runs/a && ipusim run --model bert-base --micro-batch 2 --output runs/b
    ipusim compare runs/a runs/b                         # side by side; exit 4 if they differ by more than 1 %
    ipusim run --json > a.json; ipusim compare a.json runs/b --tolerance 5 --figure diff.png

Each input is an ``ipusim run --output`` folder (its summary.json and breakdown.csv) or a JSON
file of ``ipusim run --json``. The first is the reference. Printed: what each run is (model,
system, options set, the system config's digest), the headline numbers (cycles, time,
samples/s, the four average latencies, TFLOP/s, the fullest tile's peak bytes) with each
later run's difference in % of the first, and the breakdown by category and by pass in cycles
per replica (summed over a replica's IPUs, averaged over the replicas the run simulated: which
and how many replicas the simulator runs is its own choice, by symmetry, so a sum over them
would change with it) with the differences in cycles and %.

Tolerance (``--tolerance PCT``, default 1): a headline number differs when it is more than PCT %
away from the first run's; a breakdown category differs when it moved by more than PCT % of the
first run's IPU-cycles per replica (cycle_count x IPUs per replica), so a tiny category's large
relative change does not count. A later run of another model or system (or of a system of the same
name with other constants), or training against inference, gets a note saying so (it does not
change the exit status). Exit status: 0 all within the tolerance, 4 some differ beyond it, 2 bad
input (a missing file, a file or folder that is not a run, a figure type Matplotlib cannot write).
"""

from __future__ import annotations

import collections
import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import IpuSimError
from ..options import TensorLocationSettings
from ..program import CATEGORIES
from ..results.run import PASS_COLUMNS
from .argtypes import QUIET, VERBOSE, add_verbosity, progress, verbosity

#: exit status when the runs differ beyond the tolerance
EXIT_DIFFERENT = 4
#: headline numbers: (label, how to read it from a summary, unit scale, format)
HEADLINE = (("cycles", lambda s: s.get("cycle_count"), 1, "{:,.0f}"),
            ("time (ms)", lambda s: s.get("seconds"), 1e3, "{:,.4f}"),
            ("samples/s", lambda s: s.get("samples_per_second"), 1, "{:,.1f}"),
            ("latency avg (ms)", lambda s: _avg(s, "latency"), 1e3, "{:,.4f}"),
            ("host->IPU latency avg (ms)", lambda s: _avg(s, "host_ipu_latency"), 1e3, "{:,.4f}"),
            ("compute latency avg (ms)", lambda s: _avg(s, "compute_latency"), 1e3, "{:,.4f}"),
            ("IPU->host latency avg (ms)", lambda s: _avg(s, "ipu_host_latency"), 1e3, "{:,.4f}"),
            ("TFLOP/s", lambda s: s.get("tflops"), 1, "{:,.2f}"),
            ("fullest tile peak (bytes)", lambda s: _peak(s), 1, "{:,.0f}"))


class CompareError(IpuSimError):
    """An input of ``ipusim compare`` is missing or not a run."""


def _avg(summary: dict, key: str) -> float | None:
    value = summary.get(key)
    return value.get("avg") if isinstance(value, dict) else None


def _peak(summary: dict) -> float | None:
    memory = summary.get("memory")
    if not isinstance(memory, dict):
        return None
    peaks = [m.get("peak_tile_bytes") for m in memory.values() if isinstance(m, dict)]
    return max((p for p in peaks if isinstance(p, (int, float))), default=None)


@dataclass
class RunResult:
    """One input: its label, summary (``Run.summary()`` as JSON) and breakdown (category -> cycles
    per replica: summed over a replica's IPUs, averaged over the simulated replicas), the IPUs of
    one replica and the replicas simulated (the breakdown's IPUs are ``ipus x replicas``)."""

    label: str
    path: Path
    summary: dict
    breakdown: dict[str, float]
    ipus: int
    replicas: int = 1


def _breakdown_from_summary(summary: dict, where: str) -> tuple[dict[str, int], int]:
    rows = summary.get("breakdown")
    if not isinstance(rows, dict) or not rows or not all(isinstance(r, dict) for r in rows.values()):
        raise CompareError(f"{where}: no breakdown in it (a run's summary has one per IPU); give an "
                           "`ipusim run --output` folder or an `ipusim run --json` file")
    totals: dict[str, int] = {}
    for row in rows.values():
        for cat, cycles in row.items():
            totals[cat] = totals.get(cat, 0) + int(cycles)
    return totals, len(rows)


def _breakdown_from_csv(path: Path) -> tuple[dict[str, int], int]:
    import pandas as pd
    try:
        frame = pd.read_csv(path, index_col="ipu")
    except (ValueError, TypeError, KeyError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise CompareError(f"{path}: not a run's breakdown.csv ({str(e).splitlines()[0]}); expected a column "
                           "`ipu` and one column of cycles per category, as `ipusim run --output` writes") from None
    if frame.empty or not all(pd.api.types.is_numeric_dtype(t) for t in frame.dtypes):
        raise CompareError(f"{path}: not a run's breakdown.csv (expected a row of cycles per IPU); write it "
                           "with `ipusim run --output DIR`")
    return {str(c): int(frame[c].sum()) for c in frame.columns}, len(frame)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        data = None
    except OSError as e:
        raise CompareError(f"{path}: cannot be read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise CompareError(f"{path}: not JSON ({e}); give the output of `ipusim run --json` or an "
                           "`ipusim run --output` folder") from None
    if not isinstance(data, dict) or not isinstance(data.get("cycle_count"), int):
        raise CompareError(f"{path}: not a run (no integer cycle_count); give the output of `ipusim run --json` "
                           "or an `ipusim run --output` folder")
    _check_numbers(data, path)
    return data


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_numbers(summary: dict, path: Path) -> None:
    """Raise :class:`CompareError` naming the first figure compare reads that is not a number."""
    for label, read, _, _ in HEADLINE:
        value = read(summary)
        if value is not None and not _is_number(value):
            raise CompareError(f"{path}: not a run's summary ({label} is {value!r}, not a number); give the "
                               "output of `ipusim run --json` or an `ipusim run --output` folder")
    for key in ("breakdown", "pass_breakdown"):
        rows = summary.get(key)
        for ipu, row in (rows.items() if isinstance(rows, dict) else ()):
            bad = next(((c, v) for c, v in (row.items() if isinstance(row, dict) else ()) if not _is_number(v)), None)
            if bad:
                raise CompareError(f"{path}: not a run's summary ({key} of IPU {ipu}: {bad[0]} is {bad[1]!r}, not "
                                   "a number of cycles); give the output of `ipusim run --json` or an "
                                   "`ipusim run --output` folder")


def _simulated_replicas(summary: dict, ipus: int) -> int:
    """How many replicas the ``ipus`` rows of a run's breakdown belong to: its simulated replicas
    (``run.simulated_replicas``), else ``ipus`` over ``run.ipus_per_replica``; 1 when the summary
    says neither or they do not divide the rows evenly."""
    run = summary.get("run") if isinstance(summary.get("run"), dict) else {}
    simulated, k = run.get("simulated_replicas"), run.get("ipus_per_replica")
    n = len(simulated) if isinstance(simulated, list) and simulated else (
        ipus // k if _is_number(k) and k >= 1 and ipus % k == 0 else 1)
    return n if n >= 1 and ipus % n == 0 else 1


def per_replica(totals: dict[str, int | float], replicas: int) -> dict[str, float]:
    """Cycles summed over ``replicas`` simulated replicas' IPUs -> cycles per replica (their mean)."""
    return {k: v / replicas if replicas > 1 else v for k, v in totals.items()}


def load_run(path: str | Path) -> RunResult:
    """An input of ``ipusim compare``: an output folder or a JSON file (raises
    :class:`CompareError` naming the path and what is wrong)."""
    p = Path(path)
    if p.is_dir():
        summary_path, csv_path = p / "summary.json", p / "breakdown.csv"
        missing = [f.name for f in (summary_path, csv_path) if not f.is_file()]
        if missing:
            raise CompareError(f"{p}: not a run's output folder (no {' or '.join(missing)}); write one with "
                               "`ipusim run --output DIR`")
        summary = _read_json(summary_path)
        breakdown, ipus = _breakdown_from_csv(csv_path)
    elif p.is_file():
        summary = _read_json(p)
        breakdown, ipus = _breakdown_from_summary(summary, str(p))
    else:
        raise CompareError(f"{p}: no such file or folder; give `ipusim run --output` folders or "
                           "`ipusim run --json` files")
    replicas = _simulated_replicas(summary, ipus)
    return RunResult(p.name or str(p), p, summary, per_replica(breakdown, replicas), ipus // replicas, replicas)


def _labels(runs: list[RunResult]) -> None:
    """Make the labels unique: the path where two names clash, then a number."""
    names = [r.label for r in runs]
    for r in runs:
        if names.count(r.label) > 1:
            r.label = str(r.path)
    seen: dict[str, int] = {}
    for i, r in enumerate(runs):
        if r.label in seen:
            r.label = f"{r.label} #{i + 1}"
        seen[r.label] = i


def _change(a: float | None, b: float | None) -> float | None:
    """(b - a) / a in %, 0 when both are 0, inf when only a is 0, None when either is missing."""
    if a is None or b is None:
        return None
    if a == 0:
        return 0.0 if b == 0 else math.inf
    return (b - a) / abs(a) * 100


def _pct(x: float | None) -> str:
    if x is None:
        return ""
    return "new" if math.isinf(x) else f"{x:+.2f} %"


def differences(runs: list[RunResult], tolerance: float) -> list[str]:
    """What differs from the first run by more than ``tolerance`` % (see the module docstring),
    as lines: ``label: what (change)``."""
    first, out = runs[0], []
    total = first.summary["cycle_count"] * first.ipus  # IPU-cycles of one replica
    for r in runs[1:]:
        for label, read, _, _ in HEADLINE:
            a, b = read(first.summary), read(r.summary)
            if (a is None) != (b is None):
                out.append(f"{r.label}: {label} {'not measured' if b is None else 'measured'} in this run only")
                continue
            change = _change(a, b)
            if change is not None and abs(change) > tolerance:
                out.append(f"{r.label}: {label} {_pct(change)}")
        for cat in dict.fromkeys(list(first.breakdown) + list(r.breakdown)):
            moved = r.breakdown.get(cat, 0) - first.breakdown.get(cat, 0)
            share = abs(moved) / total * 100 if total else (0.0 if moved == 0 else math.inf)
            if share > tolerance:
                out.append(f"{r.label}: breakdown {cat} {round(moved):+,} cycles per replica ({share:.2f} % of "
                           f"{first.label}'s IPU-cycles per replica)")
    return out


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def _set_fields(value):
    """A recorded option value as the comparison shows it: a TensorLocationSettings (recorded whole)
    by the fields that differ from its defaults, so the column stays readable; anything else as is."""
    defaults = vars(TensorLocationSettings())
    if isinstance(value, dict) and set(value) == set(defaults):
        return {k: v for k, v in value.items() if v != defaults[k]}
    return value


def _describe(s: dict) -> dict[str, str]:
    run = s.get("run") if isinstance(s.get("run"), dict) else {}
    opts = s.get("options")
    config = s.get("system_config") if isinstance(s.get("system_config"), dict) else {}
    return {"model": str(s.get("model", "?")), "system": str(s.get("system", "?")),
            "mode": (f"training ({run['optimizer']})" if run.get("optimizer") else "training") if s.get("training")
            else "inference",
            "strategy": str(run.get("strategy", "?")),
            "model parameters": "; ".join(f"{k}={json.dumps(v)}" for k, v in (s.get("model_params") or {}).items())
            or "defaults",
            "IPUs x replicas": f"{run.get('ipus_per_replica', '?')} x {run.get('replication_factor', '?')}",
            "micro-batch": str(run.get("micro_batch", "?")),
            "overlapped streams": ", ".join(f"{n} {m}" for m, n in
                                            collections.Counter((run.get("overlap") or {}).values()).items()) or "none",
            "options": ("; ".join(f"{k}={json.dumps(_set_fields(v))}" for k, v in opts.items()) or "defaults")
            if isinstance(opts, dict) else "(not recorded)",
            "system constants": str(config.get("constants_digest", "(not recorded)"))}


def format_comparison(runs: list[RunResult]) -> str:
    """The side-by-side text: what each run is, the headline numbers and the breakdown."""
    labels = [r.label for r in runs]
    described = [_describe(r.summary) for r in runs]
    out = ["runs (the first is the reference):"]
    out += [f"  {r.label}: {r.path}" for r in runs]
    out += ["", _table(["", *labels], [[k, *(d[k] for d in described)] for k in described[0]]), ""]
    rows = []
    for label, read, scale, fmt in HEADLINE:
        values = [read(r.summary) for r in runs]
        if all(v is None for v in values):
            continue
        cells = []
        for i, v in enumerate(values):
            text = "n/a" if v is None else fmt.format(v * scale)
            if i and v is not None and values[0] is not None:
                text += f" ({_pct(_change(values[0], v))})"
            cells.append(text)
        rows.append([label, *cells])
    out += [_table(["", *labels], rows), ""]
    cats = list(dict.fromkeys([c for c in CATEGORIES if any(c in r.breakdown for r in runs)]
                              + [c for r in runs for c in r.breakdown]))
    out.append(_side_by_side("breakdown (cycles per replica)", labels, [r.breakdown for r in runs], cats,
                             total=True))
    passes = [per_replica(_passes(r.summary), r.replicas) for r in runs]
    if all(passes):  # summaries written since Run.pass_breakdown: the same cycles by what the IPUs run
        used = {n for p in passes for n, v in p.items() if v}
        # in run.pass_breakdown's order (forward ... idle), whichever run has the pass; then any other
        names = [n for n in PASS_COLUMNS if n in used] + sorted(used - set(PASS_COLUMNS))
        out += ["", _side_by_side("by pass (cycles per replica)", labels, passes, names, total=True)]
    return "\n".join(out)


def _digest(summary: dict) -> str | None:
    """The digest of the constants of the system a summary ran on (None if not recorded)."""
    config = summary.get("system_config")
    return config.get("constants_digest") if isinstance(config, dict) else None


def _config_path(summary: dict) -> str:
    """The file of the system config a summary ran on ("?" if not recorded)."""
    config = summary.get("system_config")
    return str(config.get("path", "?")) if isinstance(config, dict) else "?"


def mismatches(runs: list[RunResult]) -> list[str]:
    """What tells a later run's work apart from the first's beyond its options and parameters: another
    model, training against inference, another system (by name, or a system of the same name whose
    constants' digest differs: a copy of a config edited without renaming it). Their numbers then
    compare different work or hardware, which the differences alone do not say. A line per such run."""
    first, out = runs[0].summary, []
    for r in runs[1:]:
        s, what = r.summary, []
        for key, noun in (("model", "model"), ("system", "system")):
            if s.get(key) != first.get(key):
                what.append(f"another {noun} ({s.get(key)}, not {first.get(key)})")
        digests = [_digest(x) for x in (s, first)]
        if s.get("system") == first.get("system") and None not in digests and digests[0] != digests[1]:
            # a copy of a config edited without renaming it: the same name, other hardware constants
            what.append(f"another config of system {s.get('system')} (its constants' digest {digests[0]}, not "
                        f"{digests[1]}: {_config_path(s)}, not {_config_path(first)})")
        if bool(s.get("training")) != bool(first.get("training")):
            what.append("training, not inference" if s.get("training") else "inference, not training")
        if what:
            out.append(f"{r.label} is not the same work as {runs[0].label}: {'; '.join(what)}")
    return out


def _side_by_side(title: str, labels: list[str], values: list[dict[str, float]], names: list[str],
                  total: bool = False) -> str:
    """A table of ``values[i][name]`` cycles per run (rounded to whole cycles), each later run with its
    change in cycles and % of the first's (and a ``total`` row of each run's sum)."""
    header = [title, labels[0]]
    for label in labels[1:]:
        header += [label, "change", "%"]
    rows = []
    for name in names + (["total"] if total else []):
        get = (lambda v: sum(v.values())) if name == "total" and total else (lambda v: v.get(name, 0))
        a = get(values[0])
        row = [name, f"{round(a):,}"]
        for v in values[1:]:
            b = get(v)
            row += [f"{round(b):,}", f"{round(b - a):+,}", _pct(_change(a, b))]
        rows.append(row)
    return _table(header, rows)


def _passes(summary: dict) -> dict[str, int]:
    """A summary's ``pass_breakdown`` summed over its IPUs (empty if it has none)."""
    rows = summary.get("pass_breakdown")
    totals: dict[str, int] = {}
    if isinstance(rows, dict):
        for row in rows.values():
            for name, cycles in (row.items() if isinstance(row, dict) else ()):
                totals[name] = totals.get(name, 0) + int(cycles)
    return totals


def comparison_figure(runs: list[RunResult]):
    """Grouped bars: cycles per breakdown category (per replica: summed over its IPUs), a bar per run."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    from ..results.report import new_figure
    cats = list(dict.fromkeys([c for c in CATEGORIES if any(r.breakdown.get(c, 0) for r in runs)]
                              + [c for r in runs for c, v in r.breakdown.items() if v]))
    fig = new_figure((max(8.0, 1.1 * len(cats) + 3), 4.8))
    ax = fig.subplots()
    x = np.arange(len(cats))
    width = 0.8 / len(runs)
    for i, r in enumerate(runs):
        ax.bar(x + (i - (len(runs) - 1) / 2) * width, [r.breakdown.get(c, 0) for c in cats], width,
               label=r.label)
    ax.set_xticks(x, cats, rotation=30, ha="right")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("cycles per replica (summed over its IPUs)")
    ax.set_title("breakdown by category: " + " vs ".join(r.label for r in runs), fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def write_figure(runs: list[RunResult], path: Path) -> Path:
    """Draw :func:`comparison_figure` into ``path`` (its type from the suffix: png, svg, pdf, ...),
    written whole or not at all."""
    from matplotlib.backend_bases import FigureCanvasBase

    from ..results.report import atomic_write
    kind = path.suffix.lstrip(".").lower()
    supported = FigureCanvasBase.get_supported_filetypes()
    if kind not in supported:
        raise CompareError(f"--figure {str(path)!r}: Matplotlib cannot write {kind or 'a file without a suffix'!r}; "
                           f"end the name with one of {', '.join('.' + k for k in sorted(supported))}")
    if not path.parent.is_dir():
        raise CompareError(f"--figure {str(path)!r}: no folder {str(path.parent)!r}; create it first")
    if path.is_dir():
        raise CompareError(f"--figure {str(path)!r} is a folder; give the path of a file to write")
    fig = comparison_figure(runs)
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format=kind, dpi=100))


def _tolerance(text: str) -> float:
    try:
        value = float(text.rstrip("%").strip())
    except ValueError:
        value = -1.0
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a percentage >= 0 such as 1 or 0.5, got {text!r}")
    return value


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``compare`` arguments to ``p``."""
    p.add_argument("runs", nargs="+", metavar="RUN", type=Path,
                   help="`ipusim run --output` folders or `ipusim run --json` files; the first is the reference")
    p.add_argument("--tolerance", type=_tolerance, default=1.0, metavar="PCT",
                   help="exit 4 when a number differs from the first run's by more than PCT %% (default: 1)")
    p.add_argument("--figure", type=Path, metavar="FILE",
                   help="also draw the breakdowns as grouped bars into FILE (.png, .svg, .pdf, ...)")
    add_verbosity(p)
    p.set_defaults(func=_cmd_compare, subparser=p)
    return p


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``compare`` on ``ipusim``'s sub-parsers."""
    return configure(subparsers.add_parser(
        "compare", help="compare runs side by side (exit 4 if they differ beyond --tolerance)",
        description="Compare runs (output folders or --json files) with the first: side by side, the "
                    "breakdown's differences, exit 0 within --tolerance, 4 beyond it, 2 on bad input."))


def _cmd_compare(args, parser) -> int:
    if len(args.runs) < 2:
        parser.error("give at least two runs to compare (output folders or --json files)")
    runs = [load_run(p) for p in args.runs]
    _labels(runs)
    for r in runs:
        progress(args, f"{r.label}: {r.summary.get('model')} on {r.summary.get('system')}, "
                 f"{r.summary['cycle_count']:,} cycles, breakdown of {r.replicas} simulated replica(s) "
                 f"of {r.ipus} IPU(s)")
    written = write_figure(runs, args.figure) if args.figure is not None else None
    found = differences(runs, args.tolerance)
    if verbosity(args) > QUIET:
        print(format_comparison(runs))
        print()
        for line in mismatches(runs):
            print(f"note: {line}")
        if found:
            print(f"differ from {runs[0].label} by more than {args.tolerance:g} %:")
            print("\n".join(f"  {line}" for line in found))
        else:
            print(f"all within {args.tolerance:g} % of {runs[0].label}")
        if written:
            print(f"wrote {written}")
    if verbosity(args) >= VERBOSE:
        for r in runs:
            for note in r.summary.get("notes") or []:
                print(f"ipusim: {r.label}: note: {note}", file=sys.stderr)
    return EXIT_DIFFERENT if found else 0
