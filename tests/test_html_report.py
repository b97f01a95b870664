"""report.html: one self-contained page per run (no network references), with every section,
and (where Chromium is installed) rendered by headless Chromium with no console messages."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import models
import sim
from sim.results.html_report import CSP, SECTIONS, html_report
from sim.results.report import OUTPUT_FILES, html_page, write_outputs

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A 2-IPU pipelined training run with 2 replicas and an option with no modelled effect,
    written with --output's writer."""
    g = models.get("bert-base", num_layers=2, seq_len=64, micro_batch=1, layers_per_ipu=[1, 1])
    o = sim.Options().replicationFactor(2).randomSeed(7)
    o.Training.gradientAccumulation(6)
    o._Popart.set("enableStochasticRounding", True)  # accepted, not modelled
    run = sim.simulate(g, "ipu-m2000", o, training=True, optimizer="adam")
    out = tmp_path_factory.mktemp("report") / "out"
    write_outputs(run, out)
    return run, out


def test_output_holds_the_report_and_the_chrome_trace(written):
    run, out = written
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)
    assert {"trace.json", "report.html"} <= set(OUTPUT_FILES)
    assert json.loads((out / "trace.json").read_text()) == json.loads(json.dumps(run.chrome_trace()))


def test_the_page_is_self_contained_with_every_section(written):
    run, out = written
    page = (out / "report.html").read_text(encoding="utf-8")
    assert re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I) == []
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert f'content="{CSP}"' in page  # nothing else may load
    assert re.findall(r'<section id="([a-z-]+)">', page) == list(SECTIONS)
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    assert [alt for alt, _ in images] == ["timeline", "tile memory by category", "liveness"]
    for (_, data), name in zip(images, ("timeline.png", "memory.png", "liveness.png")):
        assert base64.b64decode(data) == (out / name).read_bytes()  # the same figures as the files
    # the numbers: cycleCount, the latencies, the perf counters' sizes, the breakdown, memory
    assert f"{run.cycle_count:,} cycles" in page
    assert f"{run.latency[2] * 1e3:.4f}" in page and "getComputeLatency()" in page
    g = run.executable.graph
    assert f"<td class='text'>input</td><td>{len(g.inputs)}</td><td>12</td>" in page  # 6 x 2 replicas
    assert f"<td>{run.breakdown.loc[1, 'inter_ipu']:,}</td>" in page
    assert f"<td>{run.memory[0]['peak_tile_bytes']:,}</td>" in page
    options = page[page.index('<section id="options">'):page.index('<section id="notes">')]
    assert "replicationFactor" in options and "randomSeed" in options
    assert "_Popart.enableStochasticRounding" in options and "accepted, no modelled effect" in options
    notes = page[page.index('<section id="notes">'):]
    assert "option _Popart.enableStochasticRounding=True: accepted, no modelled effect" in notes


def test_html_page_draws_the_figures_and_html_report_needs_them():
    run = sim.simulate(models.get("mlp", micro_batch=2), "ipu-mk2", sim.Options().enableSyntheticData(True))
    with pytest.raises(ValueError, match="no PNG bytes for memory.png, liveness.png"):
        html_report(run, {"timeline.png": b""}, [])
    page = html_page(run)
    assert page.count("data:image/png;base64,") == 3
    assert "Latencies: not measured (synthetic data" in page
    assert "<p>none</p>" not in page  # synthetic data leaves a note


def _chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None,
                    reason=f"headless Chromium not installed at {CHROMIUM} (Debian package `chromium`: "
                           "apt-get install -y chromium)")
def test_chromium_renders_the_page_without_console_messages(written, tmp_path):
    _, out = written
    url = (out / "report.html").resolve().as_uri()
    done = _chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", url], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    for sid, heading in SECTIONS.items():
        assert f'<section id="{sid}">' in done.stdout and f"<h2>{heading}</h2>" in done.stdout
    # the page has no script: any console message (an error, a blocked load) is a fault
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == []


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"headless Chromium not installed at {CHROMIUM}")
def test_the_console_check_sees_errors(tmp_path):
    """The check above would catch a script error and a blocked network load."""
    page = tmp_path / "bad.html"
    page.write_text(f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
                    '<img src="http://127.0.0.1:9/x.png"><p>x</p>', encoding="utf-8")
    done = _chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()], tmp_path)
    assert any(":CONSOLE" in line for line in done.stderr.splitlines())


def test_pipeline_phases_count_cycles_not_syncs_with_per_stage_copies():
    """With --pipeline-copies per-stage each pipeline cycle ends in a sync after every stage's copy: fill,
    main and flush (the report's "pipeline" row and the timeline's marks) still span P - 1, G - P + 1 and
    P - 1 cycles, as with merged copies, not as many syncs."""
    from sim.results.report import pipeline_phases, summary_rows
    g = models.get("bert-base", num_layers=2, seq_len=64, micro_batch=1, layers_per_ipu=[1, 1])
    o = sim.Options().enableSyntheticData(True).pipelineCopies(sim.PipelineCopies.PerStage)
    o.Training.gradientAccumulation(6)
    run = sim.simulate(g, "ipu-m2000", o, training=True)
    P, G, t = len(run.executable.stages), 6, run.trace
    syncs = t[(t["name"] == "pipeline sync") & (t["ipu"] == 0)]["end"].to_numpy()
    assert len(syncs) > G + P - 1  # the premise: several syncs a cycle
    phases = pipeline_phases(run)
    first_stage = t[(t["name"] == "stage 0 forward") & (t["ipu"] == 0)]["start"].to_numpy()
    assert len(first_stage) == G and (first_stage < phases["fill"][1]).sum() == P - 1  # cycles 0 .. P-2
    assert (first_stage < phases["main"][1]).sum() == G  # stage 0 ends its forwards with the main cycles
    assert phases["flush"][1] == syncs[-1] <= t.loc[t["name"] == "weight update", "start"].min()
    row = dict(summary_rows(run))["pipeline (first weight-update step)"]
    assert row == ", ".join(f"{k} {e - b:,}" for k, (b, e) in phases.items()) + " cycles"
