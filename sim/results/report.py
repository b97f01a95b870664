"""Reports of a finished :class:`~sim.results.Run`: a text summary and files on disk.

:func:`format_summary` gives the run as readable text (what ``ipusim run`` prints);
:func:`write_outputs` writes the trace, op trace, breakdown and summary (CSV/JSON), three
figures (timeline, tile memory by category, liveness), the Chrome trace (trace.json) and the
HTML report into a directory, replacing it as a whole. Cycles are cycles of the IPU clock; the
text shows times in milliseconds and memory in bytes, the figures memory in KiB. Figures are
drawn on their own Agg canvas (:func:`new_figure`), never through pyplot, so the user's
Matplotlib backend is left as it is.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable

import numpy as np

from ..graph.training import Optimizer
from ..options import OutputMode
from ..program import CATEGORIES
from .run import Run, compute_pass

#: colours of the timeline, by task kind (anything else is grey); compute is coloured by pass
KIND_COLOURS = {"compute": "tab:blue", "host_io": "tab:orange", "sync": "tab:gray",
                "inter_ipu": "tab:green", "collective": "tab:red", "repeat": "tab:purple",
                "remote_io": "tab:brown", "host_io_overlapped": "tab:orange", "host_prefetch": "navajowhite",
                "remote_io_overlapped": "tab:brown"}
#: task kinds that run on the IO tiles (their own timeline lane)
IO_TILE_KINDS = ("host_io_overlapped", "remote_io_overlapped")
#: colours of compute tasks by what they run (from the task name, e.g. "stage 3 backward"; ``compute``: the
#: rest, such as gradient clipping), each unlike the others and unlike every kind's in :data:`KIND_COLOURS`
PASS_COLOURS = {"forward": "tab:blue", "backward": "tab:cyan", "recompute": "tab:olive",
                "stash": "slateblue", "restore": "teal", "weight update": "tab:pink", "io-tile copy": "gold",
                "compute": "darkslategray"}
#: the timeline draws at most this many tasks (the earliest ones) to stay fast
MAX_TIMELINE_TASKS = 5000

#: colours of the memory figures, one per category of :data:`~sim.compiler.memory.CATEGORIES`
MEMORY_COLOURS = {"control_code": "#9e9e9e", "vertex_code": "#bdbdbd", "vertex_state": "#636363",
                  "exchange_code": "#d9d9d9", "stack": "#525252", "weights": "#1f77b4", "constants": "#9ecae1",
                  "optimizer_state": "#9467bd", "accumulators": "#ff7f0e", "stash": "#8c564b",
                  "activations": "#2ca02c", "temporaries": "#d62728"}
#: colours of the liveness figure's layers (always live: program memory, weights, constants, optimizer
#: state, accumulators and stash)
LIVENESS_COLOURS = {"always_live": "#9e9e9e", "activations": MEMORY_COLOURS["activations"],
                    "temporaries": MEMORY_COLOURS["temporaries"]}

OUTPUT_FILES = ("trace.csv", "ops.csv", "breakdown.csv", "summary.json", "timeline.png", "memory.png",
                "liveness.png", "trace.json", "report.html")


# --- text -----------------------------------------------------------------------------------
def _optimizer(run: Run) -> str | None:
    """The optimizer of a training run, its state dtypes unless all float32, its accumulators' dtype
    where it is not their weights', its clip norm and its per-weight settings, read from its update
    ops (``adamw (state: first moment float16, second moment float32)``); None for inference."""
    g = run.executable.graph
    clip = next((op.attrs["clip_norm"] for op in g.ops if op.attrs.get("clip") == "global"), None)
    updates = [op for op in g.ops if op.pass_ == "update" and "optimizer" in op.attrs and "clip" not in op.attrs]
    if not updates:
        return None
    first = updates[0]
    dtypes = tuple(g.tensors[t].dtype for t in first.inputs if g.tensors[t].role == "state")
    name = first.attrs["optimizer"]
    no_decay = {op.attrs["weight"] for op in updates if op.attrs.get("weight_decay") is False}
    no_ratio = {op.attrs["weight"] for op in updates if name == "lamb" and op.kind == "adam_update"}
    accum = next((g.tensors[op.inputs[0]].dtype for op in g.ops if op.kind == "accumulate" and "weight" in op.attrs
                  and g.tensors[op.inputs[0]].dtype != g.tensors[op.attrs["weight"]].dtype), None)
    return Optimizer(name, dtypes or "float32", accum, clip_norm=clip, no_weight_decay=tuple(no_decay),
                     no_trust_ratio=tuple(no_ratio)).describe()


def _output_mode(run: Run) -> str:
    ex = run.executable
    mode = ex.output_mode
    if mode == OutputMode.EveryN:
        return f"EveryN({ex.options.output_return_period})"
    return mode.name


def pipeline_phases(run: Run) -> dict[str, tuple[int, int]] | None:
    """Fill, main and flush of the first pipeline (the first weight-update step in training):
    ``{"fill": (start, end), "main": ..., "flush": ...}`` in cycles, or None when the run is
    not a multi-stage pipeline.

    With P stages and G micro-batches the pipeline runs G + P - 1 cycles (in training, each of the
    device iterations runs its own), each ending in a "pipeline sync", or in one after each stage's
    copy with ``--pipeline-copies per-stage`` (the same number every cycle, so the cycle ends at the
    last of them): fill is cycles 0 .. P-2, main P-1 .. G-1, flush G .. G+P-2.
    """
    ex = run.executable
    P = len(ex.stages)
    if ex.strategy != "pipelined" or P < 2 or ex.ipus_per_replica < 2:
        return None
    o = ex.options
    G = o.Training.gradient_accumulation if ex.training else o.device_iterations
    t = run.trace
    syncs = t[(t["name"] == "pipeline sync") & (t["ipu"] == ex.ipus[0])].sort_values("start")
    ends = syncs["end"].to_numpy()
    per_cycle, rest = divmod(len(ends), (G + P - 1) * (o.device_iterations if ex.training else 1))
    if per_cycle < 1 or rest:
        return None
    ends = ends[per_cycle - 1::per_cycle]  # the last sync of each cycle
    start = int(t["start"].min())
    fill_end, main_end, flush_end = int(ends[P - 2]), int(ends[G - 1]), int(ends[G + P - 2])
    return {"fill": (start, fill_end), "main": (fill_end, main_end), "flush": (main_end, flush_end)}


def _setup_line(run: Run) -> str:
    """Strategy, IPUs, sync pattern, IO tiles, prefetch depth, partials type, optimizer-state location."""
    ex, o = run.executable, run.executable.options
    strategy = ex.strategy.replace("_", " ")
    if ex.strategy in ("pipelined", "sharded"):
        strategy += f" ({len(ex.stages)} stages on {ex.ipus_per_replica} IPUs)"
    elif ex.strategy.endswith("phased"):
        strategy += f" ({len({s.index for s in ex.stages})} phases on {ex.ipus_per_replica} IPUs)"
    line = (f"  strategy {strategy}, syncPattern {o.sync_pattern.name}, "
            f"IO tiles {o.TensorLocations.num_io_tiles}, prefetch depth {o.prefetch_depth()}")
    matmuls, convolutions = o.partials_type(), o.partials_type("conv2d")
    line += (f", partials {matmuls}" if matmuls == convolutions
             else f", partials {matmuls} (matmuls), {convolutions} (convolutions)")
    if ex.training:
        where = o.TensorLocations.locations["optimizer"]
        state = "off chip" if where.on_chip is False else "on chip"
        stride, size = o.sharding_domain("optimizer")
        if where.replicated_tensor_sharding and size > 1:
            group = "consecutive replicas" if stride == 1 else f"replicas {stride} apart"
            state += f", sharded over {size} {group}"
        line += f", optimizer state {state}"
    return line


def _samples(run: Run) -> str:
    """The run's samples; for a graph whose micro-batch rows carry several samples each (a packed
    BERT: sequences per pack), also the rows and the samples per row they are counted from."""
    if run.samples_per_row == 1:
        return f"{run.samples:,}"
    return (f"{run.samples:,.6g} = {run.rows:,} micro-batch rows x {run.samples_per_row:g} samples per row "
            "(Graph.samples_per_row)")


def _rate(run: Run) -> str:
    """The run's samples per second; when the host's data pipeline or the front end's host work in
    a call adds to the device's time, also the call period it is counted over
    (:attr:`Run.call_period_seconds`)."""
    text = f"{run.samples_per_second:,.1f} samples/s"
    if run.call_period_seconds > run.call_seconds:
        text += f" over {run.call_period_seconds * 1e3:.4f} ms a call: the host data pipeline's pace"
    elif run.call_seconds > run.seconds:
        text += (f" over {run.call_seconds * 1e3:.4f} ms a call, {(run.call_seconds - run.seconds) * 1e3:.4g} ms "
                 "of it the front end's host work")
    return text


def format_summary(run: Run) -> str:
    """The run as multi-line text: setup, PoplarExecutor numbers, breakdown, memory, notes."""
    ex, o, s = run.executable, run.executable.options, run.executable.system
    mode = "training" if ex.training else "inference"
    opt = _optimizer(run)
    if opt:
        mode += f" ({opt})"
    # availableMemoryProportion is set per IPU of a replica (IPU0 … IPU{k-1}), whatever the replica
    amp = ", ".join(f"IPU{i}={o.memory_proportion(i):g}" for i in range(ex.ipus_per_replica))
    lines = [
        f"{ex.graph.name} on {s.name} ({s.num_ipus} x {s.ipu.generation} IPU, "
        f"{s.ipu.clock_hz / 1e9:.4g} GHz, {ex.tiles} compute tiles), {mode}",
        f"  micro-batch {run.micro_batch}, deviceIterations {o.device_iterations}, "
        f"gradientAccumulation {o.Training.gradient_accumulation}, "
        f"replicationFactor {o.replication_factor}",
        f"  outputMode {_output_mode(run)}, synthetic data {'on' if o.synthetic_data else 'off'}, "
        f"availableMemoryProportion {amp}",
        _setup_line(run),
        "",
        f"cycles            {run.cycle_count:,}",
        f"time              {run.seconds * 1e3:.4f} ms",
        f"samples           {_samples(run)}  ({_rate(run)})",
        f"compute rate      {_tflops(run):.2f} TFLOP/s  ({run.flops / 1e9:,.2f} GFLOP in total)",
        "",
    ]
    phases = pipeline_phases(run)
    if phases:
        lines += ["pipeline (first " + ("weight-update step" if ex.training else "call") + "): "
                  + ", ".join(f"{k} {e - b:,}" for k, (b, e) in phases.items()) + " cycles", ""]
    lines += (_latency_table(run) + [""] + _breakdown_table(run) + [""] + _pass_table(run) + [""]
              + _memory_table(run) + [""])
    notes = run.all_notes
    lines.append("notes:" + ("" if notes else " none"))
    lines += [f"  - {n}" for n in notes]
    lines.append(f"simulated in {run.wall_seconds:.3f} s ({run.timeline.events:,} SimPy events)")
    return "\n".join(lines)


def summary_rows(run: Run) -> list[tuple[str, str]]:
    """The run's setup and headline numbers as (label, text) rows (the HTML report's summary)."""
    ex, o, s = run.executable, run.executable.options, run.executable.system
    opt = _optimizer(run)
    rows = [("model", ex.graph.name),
            ("system", f"{s.name}: {s.description} ({s.num_ipus} x {s.ipu.generation} IPU, "
                       f"{s.ipu.clock_hz / 1e9:.4g} GHz, {ex.tiles} compute tiles)"),
            ("mode", ("training" if ex.training else "inference") + (f" ({opt})" if opt else "")),
            ("micro-batch", f"{run.micro_batch}"), ("deviceIterations", f"{o.device_iterations}"),
            ("gradientAccumulation", f"{o.Training.gradient_accumulation}"),
            ("replicationFactor", f"{o.replication_factor}"), ("outputMode", _output_mode(run)),
            ("setup", _setup_line(run).strip()),
            ("cycles", f"{run.cycle_count:,}"), ("time", f"{run.seconds * 1e3:.4f} ms"),
            ("samples", f"{_samples(run)} ({_rate(run)})"),
            ("compute rate", f"{_tflops(run):.2f} TFLOP/s ({run.flops / 1e9:,.2f} GFLOP in total)")]
    phases = pipeline_phases(run)
    if phases:
        rows.append(("pipeline (first " + ("weight-update step" if ex.training else "call") + ")",
                     ", ".join(f"{k} {e - b:,}" for k, (b, e) in phases.items()) + " cycles"))
    rows.append(("simulated in", f"{run.wall_seconds:.3f} s ({run.timeline.events:,} SimPy events)"))
    return rows


def html_page(run: Run) -> str:
    """report.html of ``run`` (:func:`~sim.results.html_report.html_report`), its figures drawn here."""
    from .html_report import html_report
    figures = {name: png_bytes(draw(run)) for name, draw in (
        ("timeline.png", timeline_figure), ("memory.png", memory_figure), ("liveness.png", liveness_figure))}
    return html_report(run, figures, summary_rows(run))


def _tflops(run: Run) -> float:
    """FLOP per second of the whole run (host IO included), in TFLOP/s."""
    return run.flops / run.seconds / 1e12 if run.seconds else 0.0


def _latency_table(run: Run) -> list[str]:
    rows = [("round trip", "latency"), ("host -> IPU", "host_ipu_latency"),
            ("compute", "compute_latency"), ("IPU -> host", "ipu_host_latency")]
    if run.executable.options.synthetic_data:
        return ["latency: n/a (synthetic data: no host transfers, PopTorch reports zeros)"]
    out = [f"{'latency (ms)':<16}{'min':>12}{'avg':>12}{'max':>12}"]
    for label, name in rows:
        if not run.latency_measured(name):  # PopTorch's (0, 0, 0): no time (the notes say why)
            out.append(f"  {label:<14}" + f"{'n/a':>12}" * 3)
            continue
        lo, hi, avg = getattr(run, name)
        out.append(f"  {label:<14}{lo * 1e3:>12.4f}{avg * 1e3:>12.4f}{hi * 1e3:>12.4f}")
    return out


def _breakdown_table(run: Run) -> list[str]:
    """Cycles per category per IPU, with a second line of percentages of the total."""
    return _cycles_table("breakdown (cycles; % of the run; launch and exchange_setup are the fixed costs of compute "
                         "sets and exchange phases; host_io and remote_io include the compute tiles' waits for "
                         "copies on the IO tiles)", run.breakdown, list(CATEGORIES), run.cycle_count)


def _pass_table(run: Run) -> list[str]:
    """The same cycles by what each IPU runs (:attr:`Run.pass_breakdown`), the columns that are zero on
    every IPU left out, with a second line of percentages."""
    table = run.pass_breakdown
    return _cycles_table("by pass (cycles; % of the run; each pass's ops with their own syncs and exchanges, then "
                         "the program's other syncs, IO, copies, collectives and idle)",
                         table, [c for c in table.columns if (table[c] != 0).any()], run.cycle_count)


def _cycles_table(title: str, table, cols: list[str], cycle_count: int) -> list[str]:
    """``title``, then a line of cycles per IPU in ``table``'s columns ``cols`` and their total, and a
    line of the same as % of ``cycle_count``."""
    cols = cols + ["total"]
    widths = [max(len(c), len(f"{cycle_count:,}"), 7) + 2 for c in cols]
    out = [title, f"  {'IPU':<5}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths))]
    total = cycle_count or 1
    for ipu, row in table.iterrows():
        vals = [int(row[c]) for c in cols[:-1]]
        vals.append(sum(vals))
        out.append(f"  {ipu:<5}" + "".join(f"{v:>{w},}" for v, w in zip(vals, widths)))
        out.append(f"  {'':<5}" + "".join(f"{v / total:>{w}.1%}" for v, w in zip(vals, widths)))
    return out


def _memory_table(run: Run) -> list[str]:
    """One line per IPU of a replica: the fullest tile's peak (bytes, % of its SRAM), which
    tile, what it holds then by category (:meth:`Run.memory_table`) and the op running."""
    table = run.memory_table()
    cats = list(table.columns)
    widths = [max(len(c), max((len(f"{v:,}") for v in table[c]), default=1)) + 2 for c in cats]
    out = ["tile memory (bytes on the fullest tile of each IPU at its peak, by category)",
           f"  {'IPU':<5}{'peak bytes':>12}{'% of tile':>11}{'tile':>7}"
           + "".join(f"{c:>{w}}" for c, w in zip(cats, widths)) + "  op at peak"]
    for ipu, m in run.memory.items():
        row = table.loc[ipu]
        out.append(f"  {ipu:<5}{m['peak_tile_bytes']:>12,}{m['peak_tile_bytes'] / m['tile_capacity_bytes']:>11.1%}"
                   f"{m['fullest_tile']:>7}" + "".join(f"{int(row[c]):>{w},}" for c, w in zip(cats, widths))
                   + f"  {m['peak_op']}")
    capacity = ", ".join(f"{c:,}" for c in sorted({m["tile_capacity_bytes"] for m in run.memory.values()}))
    replicas = "; every replica holds the same" if run.executable.options.total_replicas() > 1 else ""
    out.append(f"  (a tile has {capacity} bytes{replicas})")
    return out


# --- files ----------------------------------------------------------------------------------
def _json_default(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _finite(value):
    """``value`` with NaN/inf floats replaced by None, so the JSON is standard."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(summary: dict, **kwargs) -> str:
    """``summary`` (e.g. :meth:`Run.summary`) as standard JSON (numpy values made plain)."""
    return json.dumps(_finite(summary), default=_json_default, allow_nan=False, **kwargs)


def atomic_write(path: Path, write: Callable[[str], None]) -> Path:
    """Run ``write(tmp)`` on a temporary file next to ``path``, then move it into place."""
    # a fresh name, created by ``write`` itself, so the file gets the usual (umask) permissions
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path``, whole or not at all (:func:`atomic_write`)."""
    return atomic_write(Path(path), lambda tmp: Path(tmp).write_bytes(data))


def check_output_directory(directory: str | os.PathLike) -> Path:
    """``directory`` as a Path, if :func:`write_outputs` may replace it: missing, or a
    directory holding nothing but files named in :data:`OUTPUT_FILES` (an earlier run's).

    Raises NotADirectoryError for an existing non-directory and FileExistsError for a
    directory with anything else in it, so a mistyped ``--output`` never deletes other files.
    """
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise NotADirectoryError(f"output path {str(d)!r} exists and is not a directory")
    blocked = next((p for p in d.absolute().parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise NotADirectoryError(f"output path {str(d)!r}: {str(blocked)!r} is a file, not a directory, so the "
                                 "output folder cannot be made under it; give another --output")
    if d.is_dir() and Path.cwd().resolve().is_relative_to(d.resolve()):
        raise FileExistsError(f"output directory {str(d)!r} is the current folder (or holds it): a run's outputs "
                              "replace their folder whole, which would leave the shell in a deleted folder; "
                              "give a subfolder, such as --output run1")
    if d.is_dir():
        others = sorted(p.name for p in d.iterdir() if p.name not in OUTPUT_FILES or not p.is_file())
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise FileExistsError(f"output directory {str(d)!r} holds files other than a run's outputs "
                                  f"({shown}); give a new or empty directory")
    return d


def _replace_directory(new: Path, target: Path) -> None:
    """Put directory ``new`` at ``target`` (same parent): the old ``target``, if any, is
    renamed aside, ``new`` renamed into place, then the old one deleted. If the second rename
    fails, the old directory is renamed back."""
    if not target.exists():
        os.rename(new, target)
        return
    old = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.old"
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_outputs(run: Run, directory: str | os.PathLike) -> list[Path]:
    """Write trace.csv, ops.csv, breakdown.csv, summary.json, timeline.png, memory.png,
    liveness.png, trace.json (:mod:`~sim.results.chrome_trace`, for Perfetto) and report.html
    (:mod:`~sim.results.html_report`: all of it on one self-contained page).

    The set is written whole or not at all: every file goes into a fresh temporary folder
    beside ``directory`` (same parent, so renames are atomic), which then replaces
    ``directory`` (see :func:`check_output_directory` for what may be replaced). On any error,
    interruption included, the temporary folder is removed and ``directory`` is left as it was.
    Returns the paths written, in :data:`OUTPUT_FILES` order.
    """
    from .chrome_trace import chrome_trace_json
    from .html_report import html_report
    d = check_output_directory(directory)
    target = d.resolve()  # a symlink's target is what gets replaced
    # the folders above it that this call makes, outermost first: removed again if the write fails
    made = [p for p in reversed(target.parents) if not p.exists()]
    # a fresh name made with mkdir, so the folder gets the usual (umask) permissions
    tmp = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as e:  # name the folder asked for, not the temporary one
        _remove_empty(made)
        raise OSError(e.errno, f"cannot write the output folder {str(d)!r} (in {str(target.parent)!r}): "
                               f"{e.strerror}") from None
    figures = {}  # file name -> PNG bytes, drawn once for the file and the HTML report

    def figure(name: str, draw) -> Callable[[Path], None]:
        def write(path: Path) -> None:
            figures[name] = png_bytes(draw(run))
            path.write_bytes(figures[name])
        return write
    writers = {
        "trace.csv": lambda path: run.trace.to_csv(path, index=False),
        "ops.csv": lambda path: run.op_trace().to_csv(path, index=False),
        "breakdown.csv": lambda path: run.breakdown.to_csv(path),
        "summary.json": lambda path: path.write_text(
            to_json({**run.summary(), "outputs": [str(d / name) for name in OUTPUT_FILES]}, indent=2) + "\n",
            encoding="utf-8"),
        "timeline.png": figure("timeline.png", timeline_figure),
        "memory.png": figure("memory.png", memory_figure),
        "liveness.png": figure("liveness.png", liveness_figure),
        "trace.json": lambda path: path.write_text(chrome_trace_json(run), encoding="utf-8"),
        "report.html": lambda path: path.write_text(html_report(run, figures, summary_rows(run)), encoding="utf-8"),
    }
    name = None
    try:
        for name in OUTPUT_FILES:
            writers[name](tmp / name)
        name = None
        _replace_directory(tmp, target)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(made)
        if isinstance(e, OSError) and e.errno is not None:  # a full disk, a quota: name the folder and the file
            what = f"its {name}" if name else "its files in place of the old ones"
            raise OSError(e.errno, f"cannot write the output folder {str(d)!r} ({what}): {e.strerror}; nothing "
                                   "was written (an earlier run there is as it was)") from None
        raise
    return [d / name for name in OUTPUT_FILES]


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (outermost first), innermost first, each only while it is empty: the
    parents :func:`write_outputs` made for a write that then failed."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:  # not made after all, or something else was put in it meanwhile: keep it
            return


# --- figures --------------------------------------------------------------------------------
def _pyplot():
    """matplotlib.pyplot, for callers that close figures with it; the figures here do not need
    it (they are drawn on their own Agg canvas, so the user's backend is never switched)."""
    import matplotlib.pyplot as plt
    return plt


def new_figure(figsize: tuple[float, float]):
    """A Matplotlib Figure on its own Agg canvas: drawn and saved without pyplot, so neither the
    user's backend nor pyplot's list of open figures changes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig, dpi: int = 100) -> bytes:
    """``fig`` as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _lanes(run: Run, shown):
    """Timeline lanes: one per IPU, plus its IO tiles and its host side when it has tasks there.

    Returns (lane labels, a function giving each trace row's lane index)."""
    ipus = sorted(set(run.executable.ipus) | set(shown["ipu"].unique().tolist()))
    extra = {k: set(shown.loc[shown["kind"].isin(kinds), "ipu"].tolist())
             for k, kinds in (("io", IO_TILE_KINDS), ("host", ("host_prefetch",)))}
    labels, index = [], {}
    for ipu in ipus:
        index[(ipu, "tiles")] = len(labels)
        labels.append(f"IPU {ipu}")
        if ipu in extra["io"]:
            index[(ipu, "io")] = len(labels)
            labels.append(f"IPU {ipu} IO tiles")
        if ipu in extra["host"]:
            index[(ipu, "host")] = len(labels)
            labels.append(f"IPU {ipu} host side")

    def lane_of(ipu: int, kind: str) -> int:
        where = "io" if kind in IO_TILE_KINDS else "host" if kind == "host_prefetch" else "tiles"
        return index[(ipu, where)]
    return labels, lane_of


def timeline_figure(run: Run):
    """One lane per IPU (plus its IO tiles and host side, when used), tasks coloured by kind
    and compute by pass (forward / backward / recompute / weight update); x in ms. For a
    pipeline, the fill, main and flush of the first weight-update step are marked. Draws the
    first :data:`MAX_TIMELINE_TASKS` tasks of a longer trace and says so in the title."""
    from matplotlib.patches import Patch
    trace = run.trace
    shown = trace.iloc[:MAX_TIMELINE_TASKS].copy()
    ms = 1e3 / run.executable.system.ipu.clock_hz
    labels, lane_of = _lanes(run, shown)
    fig = new_figure((12, 1.9 + 0.45 * len(labels)))
    ax = fig.subplots()
    shown["group"] = [compute_pass(n) if k == "compute" else k for k, n in zip(shown["kind"], shown["name"])]
    shown["lane"] = [lane_of(i, k) for i, k in zip(shown["ipu"], shown["kind"])]
    groups = []
    for group, rows in shown.groupby("group", sort=False):
        groups.append(group)
        colour = PASS_COLOURS.get(group) or KIND_COLOURS.get(group, "lightgray")
        for lane, r in rows.groupby("lane"):
            start = r["start"].to_numpy() * ms
            width = np.maximum(r["cycles"].to_numpy() * ms, 0)
            ax.broken_barh(list(zip(start, width)), (lane - 0.4, 0.8), facecolors=colour, edgecolor="none")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    ax.invert_yaxis()
    ax.set_xlim(0, max(run.cycle_count, 1) * ms)
    ax.set_xlabel("time (ms)")
    phases = pipeline_phases(run)
    if phases:
        step = "first weight-update step" if run.executable.training else "pipeline"
        for name, (b, e) in phases.items():
            ax.axvline(b * ms, color="black", linewidth=0.8, linestyle="--")
            ax.text((b + e) / 2 * ms, -0.55, name, ha="center", va="bottom", fontsize=8)
        ax.axvline(phases["flush"][1] * ms, color="black", linewidth=0.8, linestyle="--")
    title = f"{run.executable.graph.name} on {run.executable.system.name}: {run.cycle_count:,} cycles"
    if len(trace) > len(shown):
        title += f" (first {len(shown):,} of {len(trace):,} tasks shown)"
    if phases:
        title += f"\ndashed: fill | main | flush of the {step}"
    ax.set_title(title, pad=14 if phases else 6)
    ax.legend(handles=[Patch(color=PASS_COLOURS.get(g) or KIND_COLOURS.get(g, "lightgray"), label=g) for g in groups],
              loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def _ipu_label(run: Run, ipu: int) -> str:
    """``IPU i``; memory is analysed per IPU of a replica, so with replication the label says
    it stands for that IPU of every replica."""
    return f"IPU {ipu} of each replica" if run.executable.options.total_replicas() > 1 else f"IPU {ipu}"


def memory_figure(run: Run):
    """The fullest tile of each IPU (of a replica) at its peak: a stacked bar per IPU, one
    colour per category (:data:`MEMORY_COLOURS`, from :meth:`Run.memory_table`), in KiB, with
    the tile's capacity as a dashed line and each bar's share of it above the bar.

    Memory is analysed per IPU position within a replica (every replica holds the same), so
    with replication each bar stands for that IPU of every replica. The figure widens with the
    number of IPUs (up to 24 inches); labels turn upright when a bar's slot is too narrow for
    them, and only every k-th IPU is named when even upright names would not fit, so labels
    never overlap.
    """
    table = run.memory_table()
    memory = run.memory
    ipus = list(table.index)
    n = len(ipus)
    width = min(max(8.0, 4.0 + 0.5 * n), 24.0)
    fig = new_figure((width, 4.8))
    ax = fig.subplots()
    x = np.arange(n)
    bottom = np.zeros(n)
    for cat in [c for c in table.columns if table[c].any()]:
        kib = table[cat].to_numpy() / 1024
        ax.bar(x, kib, 0.7, bottom=bottom, color=MEMORY_COLOURS[cat], label=cat.replace("_", " "),
               edgecolor="white", linewidth=0.4)
        bottom += kib
    capacity = max((m["tile_capacity_bytes"] for m in memory.values()), default=0)
    if capacity:
        ax.axhline(capacity / 1024, color="black", linestyle="--", linewidth=1.0,
                   label=f"tile capacity ({capacity / 1024:,.0f} KiB)")
    top = max(capacity / 1024, bottom.max(initial=0.0)) * 1.18 or 1.0
    # points of width each bar's slot gets (the axes take about 3/4 of the figure's width)
    slot = 0.75 * width * 72 / max(n, 4)
    names = [f"IPU {i}" for i in ipus]
    percents = [f"{memory[i]['peak_tile_bytes'] / memory[i]['tile_capacity_bytes']:.0%}" for i in ipus]
    upright_percent = _text_points(max(percents, key=len), 7) > 0.9 * slot
    for xi, text in zip(x, percents):
        ax.text(xi, bottom[xi] + top * 0.01, text, ha="center", va="bottom", fontsize=7,
                rotation=90 if upright_percent else 0)
    longest = _text_points(max(names, key=len), 8)
    upright_names = longest > 0.9 * slot
    every = 1 if not upright_names else max(1, math.ceil(1.6 * 8 / slot))  # upright: a line's height each
    ax.set_xticks(x[::every], names[::every], fontsize=8, rotation=90 if upright_names else 0)
    pad = max(0.0, (4 - n) / 2)
    ax.set_xlim(-0.6 - pad, n - 0.4 + pad)
    ax.set_ylim(0, top)
    ax.set_ylabel("bytes on the fullest tile (KiB)")
    ex = run.executable
    same = "each IPU of a replica; every replica holds the same; " if ex.options.total_replicas() > 1 else ""
    ax.set_title(f"{ex.graph.name} on {ex.system.name}: the fullest tile of each IPU at its peak, by category\n"
                 f"({same}% of the tile's SRAM above each bar)", fontsize=10)
    handles = dict(zip(*reversed(ax.get_legend_handles_labels())))  # label -> handle
    order = sorted(handles, key=lambda label: (not label.startswith("tile capacity"),
                                               -list(handles).index(label)))  # capacity, then the stack top-down
    ax.legend([handles[k] for k in order], order, loc="upper left", bbox_to_anchor=(1.005, 1.0),
              frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def _text_points(text: str, fontsize: float) -> float:
    """Roughly how many points wide ``text`` is in Matplotlib's default font (0.62 em a character)."""
    return 0.62 * fontsize * len(text)


def liveness_figure(run: Run):
    """Bytes live at each op (:meth:`Run.liveness`), one panel per IPU of a replica, in KiB:
    stacked areas of what the fullest tile at each op holds (always live, activations,
    temporaries), the tile's capacity as a dashed line, and the average tile (the bytes summed
    over the IPU's tiles divided by the number of tiles) as a thin line. Dotted lines mark
    where a run (pipeline stage, phase, weight update) starts."""
    live = run.liveness()
    ipus = sorted(live["ipu"].unique().tolist())
    n = len(ipus)
    panel, head, foot = 1.7, 0.9, 0.55  # inches: each panel, the title and legend, the x label
    height = head + foot + panel * n
    fig = new_figure((12, height))
    axes = fig.subplots(n, 1, squeeze=False)
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - head / height, bottom=foot / height,
                        hspace=0.45 * 1.7 / panel)
    layers = list(LIVENESS_COLOURS)
    tiles = run.executable.tiles
    for ax, ipu in zip(axes[:, 0], ipus):
        d = live[live["ipu"] == ipu]
        steps = d["step"].to_numpy()
        capacity = run.memory[ipu]["tile_capacity_bytes"] / 1024
        edges = np.column_stack([steps - 0.5, steps + 0.5]).ravel()  # each op spans one step
        ax.stackplot(edges, [np.repeat(d["tile_" + k].to_numpy() / 1024, 2) for k in layers],
                     colors=[LIVENESS_COLOURS[k] for k in layers], linewidth=0,
                     labels=[f"{k.replace('_', ' ')} (fullest tile)" for k in layers])
        ax.plot(edges, np.repeat(d["total"].to_numpy() / tiles / 1024, 2), color="#1f3b73", linewidth=0.8,
                label="average tile (summed over tiles / tiles)")
        ax.axhline(capacity, color="black", linestyle="--", linewidth=1.0, label="tile capacity")
        runs = d["run"].to_numpy()
        for s in steps[np.flatnonzero(runs[1:] != runs[:-1]) + 1]:
            ax.axvline(s - 0.5, color="black", linestyle=":", linewidth=0.6)
        ax.set_xlim(steps.min() - 0.5, steps.max() + 0.5)
        ax.set_ylim(0, max(capacity, float(d["tile_total"].max()) / 1024) * 1.08)
        ax.set_ylabel("KiB", fontsize=8)
        ax.tick_params(labelsize=7)
        peak = run.memory[ipu]["peak_tile_bytes"]
        ax.set_title(f"{_ipu_label(run, ipu)}: peak {peak / 1024:,.0f} KiB on one tile "
                     f"({peak / run.memory[ipu]['tile_capacity_bytes']:.0%} of its SRAM)", fontsize=8, loc="left")
    axes[-1, 0].set_xlabel("step (op, in the order the memory analysis walks the runs)", fontsize=8)
    ex = run.executable
    fig.suptitle(f"{ex.graph.name} on {ex.system.name}: bytes live at each op on the fullest tile "
                 "(dotted: a new run starts)", fontsize=10, y=1 - 0.12 / height)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 1 - 0.42 / height))
    return fig
