"""Reports of a finished :class:`~sim.results.Run`: a text summary and files on disk.

:func:`format_summary` gives the run as readable text (what ``ipusim run`` prints);
:func:`write_outputs` writes the trace, op trace, breakdown and summary (CSV/JSON) and two
figures (timeline, tile memory) into a directory, replacing it as a whole. Cycles are cycles of
the IPU clock; the text shows times in milliseconds and memory in bytes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable

import numpy as np

from ..options import OutputMode
from ..program import CATEGORIES
from .run import Run

#: colours of the timeline, by task kind (anything else is grey); compute is coloured by pass
KIND_COLOURS = {"compute": "tab:blue", "host_io": "tab:orange", "sync": "tab:gray",
                "inter_ipu": "tab:green", "collective": "tab:red", "repeat": "tab:purple",
                "remote_io": "tab:brown", "host_io_overlapped": "tab:orange", "host_prefetch": "navajowhite"}
#: colours of compute tasks by what they run (from the task name, e.g. "stage 3 backward")
PASS_COLOURS = {"forward": "tab:blue", "backward": "tab:cyan", "recompute": "tab:olive",
                "weight update": "tab:pink", "io-tile copy": "gold"}
#: the timeline draws at most this many tasks (the earliest ones) to stay fast
MAX_TIMELINE_TASKS = 5000

OUTPUT_FILES = ("trace.csv", "ops.csv", "breakdown.csv", "summary.json", "timeline.png", "memory.png")


# --- text -----------------------------------------------------------------------------------
def _optimizer(run: Run) -> str | None:
    """The optimizer of a training run, read from its update ops (None for inference)."""
    for op in run.executable.graph.ops:
        if op.pass_ == "update" and "optimizer" in op.attrs:
            return op.attrs["optimizer"]
    return None


def _output_mode(run: Run) -> str:
    ex = run.executable
    mode = ex.output_mode
    if mode == OutputMode.EveryN:
        return f"EveryN({ex.options.output_return_period})"
    return mode.name


def compute_pass(name: str) -> str:
    """What a compute task runs, from its name: forward, backward, recompute, weight update,
    io-tile copy, or compute (anything else)."""
    if name == "weight update":
        return "weight update"
    if name.startswith("IO tiles"):
        return "io-tile copy"
    last = name.rsplit(" ", 1)[-1]
    return last if last in ("forward", "backward", "recompute") else "compute"


def pipeline_phases(run: Run) -> dict[str, tuple[int, int]] | None:
    """Fill, main and flush of the first pipeline (the first weight-update step in training):
    ``{"fill": (start, end), "main": ..., "flush": ...}`` in cycles, or None when the run is
    not a multi-stage pipeline.

    With P stages and G micro-batches the pipeline runs G + P - 1 cycles, each ending in a
    "pipeline sync": fill is cycles 0 .. P-2, main P-1 .. G-1, flush G .. G+P-2.
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
    if len(ends) < G + P - 1:
        return None
    start = int(t["start"].min())
    fill_end, main_end, flush_end = int(ends[P - 2]), int(ends[G - 1]), int(ends[G + P - 2])
    return {"fill": (start, fill_end), "main": (fill_end, main_end), "flush": (main_end, flush_end)}


def _setup_line(run: Run) -> str:
    """Strategy, IPUs, sync pattern, IO tiles, prefetch depth, optimizer-state location."""
    ex, o = run.executable, run.executable.options
    strategy = ex.strategy.replace("_", " ")
    if ex.strategy in ("pipelined", "sharded"):
        strategy += f" ({len(ex.stages)} stages on {ex.ipus_per_replica} IPUs)"
    elif ex.strategy.endswith("phased"):
        strategy += f" ({len({s.index for s in ex.stages})} phases on {ex.ipus_per_replica} IPUs)"
    line = (f"  strategy {strategy}, syncPattern {o.sync_pattern.name}, "
            f"IO tiles {o.TensorLocations.num_io_tiles}, prefetch depth {o.prefetch_depth()}")
    if ex.training:
        where = o.TensorLocations.locations["optimizer"]
        state = "off chip" if where.on_chip is False else "on chip"
        if where.replicated_tensor_sharding and o.replication_factor > 1:
            state += ", sharded over replicas"
        line += f", optimizer state {state}"
    return line


def format_summary(run: Run) -> str:
    """The run as multi-line text: setup, PoplarExecutor numbers, breakdown, memory, notes."""
    ex, o, s = run.executable, run.executable.options, run.executable.system
    mode = "training" if ex.training else "inference"
    opt = _optimizer(run)
    if opt:
        mode += f" ({opt})"
    amp = ", ".join(f"IPU{i}={o.memory_proportion(i):g}" for i in ex.ipus)
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
        f"samples           {run.samples:,}  ({run.samples_per_second:,.1f} samples/s)",
        f"compute rate      {_tflops(run):.2f} TFLOP/s  ({run.flops / 1e9:,.2f} GFLOP in total)",
        "",
    ]
    phases = pipeline_phases(run)
    if phases:
        lines += ["pipeline (first " + ("weight-update step" if ex.training else "call") + "): "
                  + ", ".join(f"{k} {e - b:,}" for k, (b, e) in phases.items()) + " cycles", ""]
    lines += _latency_table(run) + [""] + _breakdown_table(run) + [""] + _memory_table(run) + [""]
    notes = list(ex.notes) + list(run.notes)
    lines.append("notes:" + ("" if notes else " none"))
    lines += [f"  - {n}" for n in notes]
    lines.append(f"simulated in {run.wall_seconds:.3f} s ({run.timeline.events:,} SimPy events)")
    return "\n".join(lines)


def _tflops(run: Run) -> float:
    """FLOP per second of the whole run (host IO included), in TFLOP/s."""
    return run.flops / run.seconds / 1e12 if run.seconds else 0.0


def _latency_table(run: Run) -> list[str]:
    rows = [("round trip", run.latency), ("host -> IPU", run.host_ipu_latency),
            ("compute", run.compute_latency), ("IPU -> host", run.ipu_host_latency)]
    if run.executable.options.synthetic_data:
        return ["latency: n/a (synthetic data: no host transfers, PopTorch reports zeros)"]
    out = [f"{'latency (ms)':<16}{'min':>12}{'avg':>12}{'max':>12}"]
    for label, (lo, hi, avg) in rows:
        out.append(f"  {label:<14}{lo * 1e3:>12.4f}{avg * 1e3:>12.4f}{hi * 1e3:>12.4f}")
    return out


def _breakdown_table(run: Run) -> list[str]:
    """Cycles per category per IPU, with a second line of percentages of the total."""
    cols = list(CATEGORIES) + ["total"]
    widths = [max(len(c), len(f"{run.cycle_count:,}"), 7) + 2 for c in cols]
    out = ["breakdown (cycles; % of the run; launch and exchange_setup are the fixed costs of compute "
           "sets and exchange phases)",
           f"  {'IPU':<5}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths))]
    total = run.cycle_count or 1
    for ipu, row in run.breakdown.iterrows():
        vals = [int(row[c]) for c in CATEGORIES]
        vals.append(sum(vals))
        out.append(f"  {ipu:<5}" + "".join(f"{v:>{w},}" for v, w in zip(vals, widths)))
        out.append(f"  {'':<5}" + "".join(f"{v / total:>{w}.1%}" for v, w in zip(vals, widths)))
    return out


def _memory_table(run: Run) -> list[str]:
    out = ["tile memory (peak over the program, fullest tile)",
           f"  {'IPU':<5}{'peak bytes':>12}{'of tile':>12}{'% of tile':>11}{'fullest tile':>14}  op at peak"]
    for ipu, m in run.memory.items():
        out.append(f"  {ipu:<5}{m['peak_tile_bytes']:>12,}{m['tile_capacity_bytes']:>12,}"
                   f"{m['peak_tile_bytes'] / m['tile_capacity_bytes']:>11.1%}"
                   f"{m['fullest_tile']:>14}  {m['peak_op']}")
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


def check_output_directory(directory: str | os.PathLike) -> Path:
    """``directory`` as a Path, if :func:`write_outputs` may replace it: missing, or a
    directory holding nothing but files named in :data:`OUTPUT_FILES` (an earlier run's).

    Raises NotADirectoryError for an existing non-directory and FileExistsError for a
    directory with anything else in it, so a mistyped ``--output`` never deletes other files.
    """
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise NotADirectoryError(f"output path {str(d)!r} exists and is not a directory")
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
    """Write trace.csv, ops.csv, breakdown.csv, summary.json, timeline.png and memory.png.

    The set is written whole or not at all: every file goes into a fresh temporary folder
    beside ``directory`` (same parent, so renames are atomic), which then replaces
    ``directory`` (see :func:`check_output_directory` for what may be replaced). On any error,
    interruption included, the temporary folder is removed and ``directory`` is left as it was.
    Returns the paths written, in :data:`OUTPUT_FILES` order.
    """
    d = check_output_directory(directory)
    target = d.resolve()  # a symlink's target is what gets replaced
    target.parent.mkdir(parents=True, exist_ok=True)
    # a fresh name made with mkdir, so the folder gets the usual (umask) permissions
    tmp = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    tmp.mkdir()
    writers = {
        "trace.csv": lambda path: run.trace.to_csv(path, index=False),
        "ops.csv": lambda path: run.op_trace().to_csv(path, index=False),
        "breakdown.csv": lambda path: run.breakdown.to_csv(path),
        "summary.json": lambda path: path.write_text(to_json(run.summary(), indent=2) + "\n", encoding="utf-8"),
        "timeline.png": lambda path: _save(timeline_figure(run), path),
        "memory.png": lambda path: _save(memory_figure(run), path),
    }
    try:
        for name in OUTPUT_FILES:
            writers[name](tmp / name)
        _replace_directory(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [d / name for name in OUTPUT_FILES]


# --- figures --------------------------------------------------------------------------------
def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: str | os.PathLike) -> None:
    plt = _pyplot()
    try:
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


def _lanes(run: Run, shown):
    """Timeline lanes: one per IPU, plus its IO tiles and its host side when it has tasks there.

    Returns (lane labels, a function giving each trace row's lane index)."""
    ipus = sorted(set(run.executable.ipus) | set(shown["ipu"].unique().tolist()))
    extra = {k: set(shown.loc[shown["kind"] == k, "ipu"].tolist()) for k in ("host_io_overlapped", "host_prefetch")}
    labels, index = [], {}
    for ipu in ipus:
        index[(ipu, "tiles")] = len(labels)
        labels.append(f"IPU {ipu}")
        if ipu in extra["host_io_overlapped"]:
            index[(ipu, "io")] = len(labels)
            labels.append(f"IPU {ipu} IO tiles")
        if ipu in extra["host_prefetch"]:
            index[(ipu, "host")] = len(labels)
            labels.append(f"IPU {ipu} host side")

    def lane_of(ipu: int, kind: str) -> int:
        where = {"host_io_overlapped": "io", "host_prefetch": "host"}.get(kind, "tiles")
        return index[(ipu, where)]
    return labels, lane_of


def timeline_figure(run: Run):
    """One lane per IPU (plus its IO tiles and host side, when used), tasks coloured by kind
    and compute by pass (forward / backward / recompute / weight update); x in ms. For a
    pipeline, the fill, main and flush of the first weight-update step are marked. Draws the
    first :data:`MAX_TIMELINE_TASKS` tasks of a longer trace and says so in the title."""
    plt = _pyplot()
    from matplotlib.patches import Patch
    trace = run.trace
    shown = trace.iloc[:MAX_TIMELINE_TASKS].copy()
    ms = 1e3 / run.executable.system.ipu.clock_hz
    labels, lane_of = _lanes(run, shown)
    fig, ax = plt.subplots(figsize=(12, 1.9 + 0.45 * len(labels)))
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


def memory_figure(run: Run):
    """Peak bytes (shown in KiB) on each compute tile, one line per IPU of :attr:`Run.memory`,
    with the tile's capacity.

    Memory is analysed per IPU position within a replica (every replica holds the same), so
    with replication the lines are "IPU i of each replica", not one per IPU of the system.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(12, 4))
    memory = run.memory
    replicated = run.executable.options.total_replicas() > 1
    for ipu in memory:
        peak = np.asarray(run.tile_memory(ipu))
        label = f"IPU {ipu} of each replica" if replicated else f"IPU {ipu}"
        ax.plot(np.arange(len(peak)), peak / 1024, linewidth=0.8, label=f"{label} peak")
    capacity = max((m["tile_capacity_bytes"] for m in memory.values()), default=0)
    if capacity:
        ax.axhline(capacity / 1024, color="tab:red", linestyle="--", label="tile capacity")
    ax.set_xlim(0, max(run.executable.tiles - 1, 1))
    ax.set_xlabel("compute tile")
    ax.set_ylabel("peak memory (KiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{run.executable.graph.name} on {run.executable.system.name}: peak memory per tile")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig
