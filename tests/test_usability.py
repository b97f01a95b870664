"""Notebooks and scripts: a short ``repr(run)`` and an HTML one, the user's Matplotlib backend
left alone, ``ipusim run --json`` telling runs apart, and -q/-v on the subcommands."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import models
import sim
from sim.cli.main import main

from cli_run import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run():
    return sim.simulate(models.get("bert-base", num_layers=2, seq_len=64, micro_batch=1, layers_per_ipu=[1, 1]),
                        "ipu-m2000", sim.Options().deviceIterations(4).replicationFactor(2))


def test_repr_is_one_short_line(run):
    text = repr(run)
    assert len(text) < 200 and "\n" not in text
    assert text == (f"<sim.Run bert-base on ipu-m2000 (inference, 2 IPUs x 2 replicas): {run.cycle_count:,} cycles, "
                    f"{run.seconds * 1e3:.4f} ms, latency avg {run.latency[2] * 1e3:.4f} ms>")
    synthetic = sim.simulate(models.get("mlp"), "ipu-mk2", sim.Options().enableSyntheticData(True))
    assert repr(synthetic).endswith("latency avg not measured>") and "1 IPU x 1 replica)" in repr(synthetic)


def test_repr_html_is_a_small_table(run):
    html = run._repr_html_()
    assert html.startswith("<table") and html.endswith("</table>") and len(html) < 2000
    assert f"<td>{run.cycle_count:,}</td>" in html and "<td>ipu-m2000</td>" in html


def test_matplotlib_backend_is_never_switched(tmp_path):
    """import sim and sim.poptorch, a run with --output (figures, report), a compare figure:
    the backend the user chose stays, and pyplot is never imported."""
    pytest.importorskip("torch")
    code = textwrap.dedent(f"""
        import sys
        import matplotlib
        matplotlib.use("svg")
        import sim, sim.poptorch, models
        from sim.cli.main import main
        after_import = matplotlib.get_backend()
        assert main(["run", "--model", "mlp", "-q", "--output", {str(tmp_path / 'a')!r}]) == 0
        assert main(["compare", "-q", {str(tmp_path / 'a')!r}, {str(tmp_path / 'a')!r},
                     "--figure", {str(tmp_path / 'f.png')!r}]) == 0
        print(after_import, matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["svg", "svg", "False"]
    assert (tmp_path / "a" / "timeline.png").exists() and (tmp_path / "f.png").exists()


def test_json_tells_runs_apart_by_options_and_system(capsys):
    _, out, _ = cli(capsys, "run", "--model", "mlp", "--json", "--device-iterations", "2", "--replicas", "2",
                    "--system", "ipu-m2000")
    a = json.loads(out)
    assert a["options"] == {"replicationFactor": 2, "deviceIterations": 2}
    config = a["system_config"]
    assert config["name"] == "ipu-m2000" and config["ipus"] == 4 and config["clock_hz"] == 1.325e9
    assert config["tiles_per_ipu"] == 1472 and config["path"].endswith("ipu-m2000.toml")
    _, out, _ = cli(capsys, "run", "--model", "mlp", "--json", "--system", "bow-pod16")
    b = json.loads(out)
    assert b["options"] == {} and b["system_config"]["constants_digest"] != config["constants_digest"]
    _, out, _ = cli(capsys, "run", "--model", "mlp", "--json", "--system", "ipu-pod16")
    assert json.loads(out)["system_config"]["constants_digest"] != config["constants_digest"]  # more IPUs


def test_run_quiet_and_verbose(capsys, tmp_path):
    code, out, err = cli(capsys, "run", "--model", "mlp", "-q", "--output", tmp_path / "o")
    assert (code, out, err) == (0, "", "") and (tmp_path / "o" / "report.html").exists()
    code, out, err = cli(capsys, "run", "--model", "mlp", "-q", "--json", "--synthetic-data")
    assert code == 0 and err == "" and json.loads(out)["cycle_count"] > 0
    code, out, err = cli(capsys, "run", "--model", "mlp", "-v", "--json", "--synthetic-data")
    d = json.loads(out)  # stdout stays pure JSON
    assert "ipusim: model mlp: " in err and "ipusim: simulated " in err
    assert all(f"ipusim: note: {n}" in err for n in d["notes"]) and d["notes"]
    code, out, err = cli(capsys, "run", "--model", "mlp")
    assert "cycles" in out and err == ""
    code, _, err = cli(capsys, "run", "--model", "mlp", "-q", "-v")
    assert code == 2 and "not allowed with argument" in err


def test_other_subcommands_quiet_and_verbose(capsys):
    argv = ["collective", "--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "1MiB", "--replicas", "4"]
    assert cli(capsys, *argv, "-q") == (0, "", "")
    code, out, err = cli(capsys, *argv, "-q", "--json")
    assert json.loads(out)["op"] == "all-reduce" and err == ""
    code, out, err = cli(capsys, *argv, "-v")
    assert "bus bandwidth" in out and "ipusim: timing all-reduce of 1,048,576 bytes" in err
    _, quiet, _ = cli(capsys, "systems", "-q")
    _, normal, _ = cli(capsys, "systems")
    _, verbose, _ = cli(capsys, "systems", "-v")
    assert quiet == normal and "ipu-mk2.toml" in verbose and "ipu-mk2.toml" not in normal
    assert cli(capsys, "models", "-q")[1] == cli(capsys, "models")[1]
