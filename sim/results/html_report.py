"""A run as one self-contained HTML page (``report.html`` of ``ipusim run --output``).

Everything is inline: the figures as base64 PNG ``data:`` images, the style in a ``<style>``
element, no script, and a Content-Security-Policy that forbids loading anything else, so the
page opens offline and never touches the network. Sections (each a ``<section id=...>``):
``summary``, ``poplar-executor`` (cycleCount, the four latencies, the perf counters' sizes),
``breakdown``, ``timeline``, ``memory``, ``liveness``, ``options`` (set, and accepted but not
modelled) and ``notes``. Times in milliseconds, memory in bytes, cycles of the IPU clock.
"""

from __future__ import annotations

import base64
from html import escape

from .run import Run, options_dict

#: the page's sections, in order: id -> heading
SECTIONS = {"summary": "Summary", "poplar-executor": "PoplarExecutor numbers",
            "breakdown": "Where the cycles went", "timeline": "Timeline",
            "memory": "Tile memory by category", "liveness": "Liveness",
            "options": "Options", "notes": "Notes"}

#: what the page may load: nothing but its own inline style and data: images
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1240px; color: #1b1b1b; line-height: 1.4; padding: 0 16px; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc;
     padding-bottom: 3px; margin-top: 1.6em; }
p.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.88em; margin: 6px 0 12px; }
th, td { border: 1px solid #d4d4d4; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
table.kv th { text-align: left; } table.kv td { text-align: left; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
div.scroll { overflow-x: auto; }
code { background: #f5f5f5; padding: 0 3px; }
ul.notes li { margin-bottom: 4px; }
"""


def _kv_table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _frame(df) -> str:
    """A DataFrame (already formatted as text) as an HTML table (pandas), its index as the
    first column."""
    return '<div class="scroll">' + df.reset_index().to_html(border=0, escape=True, index=False) + "</div>"


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def _ms(t: tuple[float, float, float]) -> list[str]:
    lo, hi, avg = t
    return [f"{lo * 1e3:.4f}", f"{avg * 1e3:.4f}", f"{hi * 1e3:.4f}"]


def _poplar_executor(run: Run) -> str:
    parts = [_kv_table([("cycleCount()", f"{run.cycle_count:,} cycles")])]
    if run.executable.options.synthetic_data:
        parts.append("<p>Latencies: not measured (synthetic data: no host transfers; PopTorch reports "
                     "(0, 0, 0)).</p>")
    else:
        head = "<tr><th class='text'>latency (ms)</th><th>min</th><th>avg</th><th>max</th></tr>"
        body = ""
        for label, name in (("getLatency() (round trip)", "latency"), ("getHostIpuLatency()", "host_ipu_latency"),
                            ("getComputeLatency()", "compute_latency"), ("getIpuHostLatency()", "ipu_host_latency")):
            cells = (_ms(getattr(run, name)) if run.latency_measured(name) else ["not measured"] * 3)
            body += f"<tr><td class='text'>{escape(label)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        parts.append(f"<table>{head}{body}</table>")
    head = "<tr><th class='text'>getPerfCounters() key</th><th>tensors</th><th>timestamps per tensor</th></tr>"
    body = ""
    for key, per_tensor in run.perf_counters.items():
        sizes = sorted({len(t) for t in per_tensor})
        body += (f"<tr><td class='text'>{escape(key)}</td><td>{len(per_tensor)}</td>"
                 f"<td>{escape(', '.join(map(str, sizes)) or '0')}</td></tr>")
    parts.append(f"<table>{head}{body}</table>")
    return "\n".join(parts)


def _breakdown(run: Run) -> str:
    table = run.breakdown.copy()
    table["total"] = table.sum(axis=1)
    share = table / (run.cycle_count or 1) * 100
    share.columns = [f"{c} %" for c in share.columns]
    return ("<p>Cycles per IPU by category (launch and exchange_setup are the fixed costs of compute sets and "
            "exchange phases; host_io and remote_io include the compute tiles' waits for copies on the IO "
            "tiles); each row adds up to the run's cycles.</p>"
            + _frame(table.map(lambda v: f"{v:,}"))
            + "<p>The same as % of the run:</p>" + _frame(share.map(lambda v: f"{v:.1f}"))
            + "<p>The same cycles by what each IPU runs (its ops by pass, each with its own syncs and exchanges; "
            "then the program's other syncs, IO, inter-IPU copies, collectives and idle):</p>"
            + _frame(_passes(run).map(lambda v: f"{v:,}")))


def _passes(run: Run):
    """:attr:`Run.pass_breakdown` without the columns that are zero on every IPU, with its total."""
    table = run.pass_breakdown
    table = table.loc[:, (table != 0).any()].copy()
    table["total"] = table.sum(axis=1)
    return table


def _memory(run: Run, png: bytes) -> str:
    table = run.memory_table()
    memory = run.memory
    table.insert(0, "fullest tile", [memory[i]["fullest_tile"] for i in table.index])
    table.insert(0, "% of tile", [f"{memory[i]['peak_tile_bytes'] / memory[i]['tile_capacity_bytes']:.1%}"
                                  for i in table.index])
    table.insert(0, "peak bytes", [memory[i]["peak_tile_bytes"] for i in table.index])
    table["op at peak"] = [memory[i]["peak_op"] for i in table.index]
    shown = table.map(lambda v: f"{v:,}" if isinstance(v, int) or hasattr(v, "dtype") else v)
    return ("<p>Bytes on the fullest tile of each IPU at its peak, by category"
            + ("; every replica holds the same" if run.executable.options.total_replicas() > 1 else "")
            + ".</p>" + _frame(shown) + _img(png, "tile memory by category"))


def _options(run: Run) -> str:
    o = run.executable.options
    used = options_dict(o)
    unmodelled = o.unmodelled()
    if used:
        rows = "".join(f"<tr><td class='text'>{escape(k)}</td><td class='text'>{escape(str(v))}</td>"
                       f"<td class='text'>{'accepted, no modelled effect' if k in unmodelled else 'modelled'}</td></tr>"
                       for k, v in used.items())
        table = ("<table><tr><th class='text'>option (PopTorch name)</th><th class='text'>value</th>"
                 f"<th class='text'>effect</th></tr>{rows}</table>")
    else:
        table = "<p>No option set: PopTorch's defaults.</p>"
    missing = (f"<p>Accepted but not modelled: {escape(', '.join(unmodelled))}.</p>" if unmodelled
               else "<p>Accepted but not modelled: none.</p>")
    return table + missing


def _notes(run: Run) -> str:
    notes = run.all_notes
    if not notes:
        return "<p>none</p>"
    return '<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>"


def html_report(run: Run, figures: dict[str, bytes], summary: list[tuple[str, str]]) -> str:
    """The page for ``run``: ``figures`` maps timeline.png, memory.png and liveness.png to their
    PNG bytes, ``summary`` holds the summary's (label, text) rows. :func:`sim.results.report.html_page`
    draws and gathers them; ``write_outputs`` reuses the figures it writes."""
    missing = [n for n in ("timeline.png", "memory.png", "liveness.png") if n not in figures]
    if missing:
        raise ValueError(f"html_report: no PNG bytes for {', '.join(missing)}; draw them with "
                         "sim.results.report (or call report.html_page(run))")
    ex = run.executable
    bodies = {
        "summary": _kv_table(summary),
        "poplar-executor": _poplar_executor(run),
        "breakdown": _breakdown(run),
        "timeline": ("<p>A lane per IPU (and its IO tiles and host side when used); compute coloured by pass. "
                     "trace.json in the same folder holds every task for Perfetto or chrome://tracing.</p>"
                     + _img(figures["timeline.png"], "timeline")),
        "memory": _memory(run, figures["memory.png"]),
        "liveness": ("<p>Bytes live at each op on the fullest tile (PopVision's liveness report).</p>"
                     + _img(figures["liveness.png"], "liveness")),
        "options": _options(run),
        "notes": _notes(run),
    }
    title = f"{ex.graph.name} on {ex.system.name}: {run.cycle_count:,} cycles"
    sections = "\n".join(f'<section id="{sid}">\n<h2>{escape(SECTIONS[sid])}</h2>\n{bodies[sid]}\n</section>'
                         for sid in SECTIONS)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f"<title>ipusim: {escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            f"<h1>ipusim: {escape(title)}</h1>\n"
            f"<p class=\"sub\">{run.seconds * 1e3:.4f} ms of simulated time; "
            f"{'training' if ex.training else 'inference'}.</p>\n{sections}\n</body>\n</html>\n")
