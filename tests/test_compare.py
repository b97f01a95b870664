"""``ipusim compare``: runs side by side from output folders and --json files; exit 0 within the
tolerance, 4 beyond it, 2 on bad input."""

from __future__ import annotations

import contextlib
import json

import pytest

from sim.cli.compare import EXIT_DIFFERENT, differences, load_run
from sim.cli.main import main

from cli_run import cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An output folder and a --json file of the same MLP run, and a --json file of a bigger
    micro-batch."""
    d = tmp_path_factory.mktemp("runs")
    assert main(["run", "--model", "mlp", "-q", "--output", str(d / "base")]) == 0
    for name, argv in (("same.json", []), ("bigger.json", ["--micro-batch", "8"])):
        with open(d / name, "w") as f, contextlib.redirect_stdout(f):  # capsys is per test
            assert main(["run", "--model", "mlp", "--json", *argv]) == 0
    return d


def test_same_run_from_a_folder_and_a_json_file_is_within_tolerance(capsys, runs):
    code, out, err = cli(capsys, "compare", runs / "base", runs / "same.json")
    assert code == 0 and err == ""
    assert "all within 1 % of base" in out
    base = json.loads((runs / "base" / "summary.json").read_text())
    assert f"{base['cycle_count']:,} (+0.00 %)" in out
    for word in ("model", "system constants", "latency avg (ms)", "fullest tile peak (bytes)", "host_io", "total"):
        assert word in out


def test_different_runs_exit_4_with_the_differences(capsys, runs, tmp_path):
    figure = tmp_path / "diff.png"
    code, out, _ = cli(capsys, "compare", runs / "base", runs / "bigger.json", "--figure", figure)
    assert code == EXIT_DIFFERENT == 4
    a = json.loads((runs / "base" / "summary.json").read_text())
    b = json.loads((runs / "bigger.json").read_text())
    change = (b["cycle_count"] - a["cycle_count"]) / a["cycle_count"] * 100
    assert f"bigger.json: cycles {change:+.2f} %" in out
    assert f"{b['cycle_count']:,} ({change:+.2f} %)" in out
    host_a, host_b = a["breakdown"]["0"]["host_io"], b["breakdown"]["0"]["host_io"]
    assert f"{host_b - host_a:+,}" in out  # the breakdown's change in cycles
    assert ["options", "defaults", "defaults"] in [line.split() for line in out.splitlines()]  # micro-batch: a model parameter
    assert figure.read_bytes()[:8] == PNG_SIGNATURE
    # a wide enough tolerance accepts them; -q prints nothing but keeps the status
    assert cli(capsys, "compare", runs / "base", runs / "bigger.json", "--tolerance", "1000")[0] == 0
    code, out, err = cli(capsys, "compare", "-q", runs / "base", runs / "bigger.json")
    assert (code, out, err) == (4, "", "")


def test_the_runs_by_pass_side_by_side(capsys, runs, tmp_path):
    """With summaries that hold Run.pass_breakdown, a second table puts the same cycles by pass side by
    side (summed over the IPUs); a summary without one (written before it existed) leaves it out."""
    code, out, _ = cli(capsys, "compare", runs / "base", runs / "bigger.json")
    a = json.loads((runs / "base" / "summary.json").read_text())
    b = json.loads((runs / "bigger.json").read_text())
    assert "by pass (cycles per replica)" in out
    fwd_a, fwd_b = a["pass_breakdown"]["0"]["forward"], b["pass_breakdown"]["0"]["forward"]
    row = next(line.split() for line in out.split("by pass", 1)[1].splitlines() if line.startswith("forward"))
    assert row[:4] == ["forward", f"{fwd_a:,}", f"{fwd_b:,}", f"{fwd_b - fwd_a:+,}"]
    old = json.loads((runs / "bigger.json").read_text())
    del old["pass_breakdown"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert "by pass" not in cli(capsys, "compare", runs / "base", tmp_path / "old.json")[1]


def test_differences_use_the_tolerance_exactly(runs):
    a, b = load_run(runs / "base"), load_run(runs / "bigger.json")
    change = abs(b.summary["cycle_count"] - a.summary["cycle_count"]) / a.summary["cycle_count"] * 100
    assert any(line.startswith("bigger.json: cycles") for line in differences([a, b], change * 0.999))
    assert not any(line.startswith("bigger.json: cycles") for line in differences([a, b], change * 1.001))
    assert differences([a, load_run(runs / "same.json")], 0.0) == []


def test_breakdowns_are_per_replica_whatever_replicas_are_simulated(capsys, tmp_path):
    """Which and how many replicas are simulated is the simulator's own choice (by symmetry): two
    runs whose every IPU does the same, one simulating 1 replica, the other 2, have equal breakdowns
    (per replica: summed over its IPUs, averaged over the simulated replicas), and no category
    differs; only samples/s and TFLOP/s, which count every replica, do."""
    files = []
    for replicas in (1, 2):
        code, out, _ = cli(capsys, "run", "--model", "mlp", "--system", "ipu-m2000", "--replicas", str(replicas),
                           "--synthetic-data", "--json", "-q")
        assert code == 0
        files.append(tmp_path / f"r{replicas}.json")
        files[-1].write_text(out)
    one, two = json.loads(files[0].read_text()), json.loads(files[1].read_text())
    assert len(two["run"]["simulated_replicas"]) == 2 and len(two["breakdown"]) == 2  # the premise
    a, b = load_run(files[0]), load_run(files[1])
    assert (a.ipus, a.replicas, b.ipus, b.replicas) == (1, 1, 1, 2)
    assert b.breakdown == a.breakdown == one["breakdown"]["0"]
    found = differences([a, b], 1.0)
    assert not [line for line in found if "breakdown" in line]
    assert sorted(line.split(": ")[1].rsplit(" ", 2)[0] for line in found) == ["TFLOP/s", "samples/s"]
    code, out, _ = cli(capsys, "compare", *files)
    compute = next(line.split() for line in out.split("breakdown (cycles per replica)", 1)[1].splitlines()
                   if line.startswith("compute"))
    cycles = f"{one['breakdown']['0']['compute']:,}"
    assert code == EXIT_DIFFERENT and compute == ["compute", cycles, cycles, "+0", "+0.00", "%"]


def _folder(path, summary: str, breakdown: str):
    path.mkdir()
    (path / "summary.json").write_text(summary)
    (path / "breakdown.csv").write_text(breakdown)
    return path


@pytest.mark.parametrize("make, words", [
    (lambda d: d / "missing", ["missing: no such file or folder"]),
    (lambda d: (d / "empty").mkdir() or d / "empty", ["empty: not a run's output folder (no summary.json or "
                                                      "breakdown.csv)"]),
    (lambda d: (d / "x.json").write_text('{"a": 1}') and d / "x.json", ["x.json: not a run (no integer cycle_count)"]),
    (lambda d: (d / "t.txt").write_text("hello") and d / "t.txt", ["t.txt: not JSON"]),
    (lambda d: (d / "s.json").write_text('{"cycle_count": 5, "seconds": "abc", "breakdown": {"0": {"compute": 5}}}')
     and d / "s.json", ["s.json: not a run's summary (time (ms) is 'abc', not a number)"]),
    (lambda d: (d / "b.json").write_text('{"cycle_count": 5, "breakdown": {"0": {"compute": "x"}}}') and d / "b.json",
     ["b.json: not a run's summary (breakdown of IPU 0: compute is 'x', not a number of cycles)"]),
    (lambda d: _folder(d / "run", '{"cycle_count": 5}', "garbage\n"), ["breakdown.csv: not a run's breakdown.csv"]),
])
def test_bad_input_exits_2_naming_the_path(capsys, runs, tmp_path, make, words):
    code, out, err = cli(capsys, "compare", runs / "base", make(tmp_path))
    assert code == 2 and out == ""
    assert err.startswith("ipusim: error: ") and len(err.strip().splitlines()) == 1
    for w in words:
        assert w in err


@pytest.mark.parametrize("extra, words", [
    ([], ["at least two runs"]),
    (["x.json", "--tolerance", "-1"], ["--tolerance", "percentage >= 0"]),
])
def test_usage_errors_exit_2(capsys, runs, extra, words):
    code, _, err = cli(capsys, "compare", runs / "base", *extra)
    assert code == 2 and all(w in err for w in words)


def test_a_figure_type_matplotlib_cannot_write_exits_2(capsys, runs, tmp_path):
    code, _, err = cli(capsys, "compare", runs / "base", runs / "same.json", "--figure", tmp_path / "f.docx")
    assert code == 2 and "cannot write 'docx'" in err and not (tmp_path / "f.docx").exists()


def test_tensor_location_settings_show_only_what_was_set(capsys, tmp_path):
    """A TensorLocationSettings is recorded whole; the comparison shows the fields that differ from
    its defaults, so the options column stays readable."""
    base = ["run", "--model", "mlp", "--system", "ipu-m2000", "--replicas", "2", "--training", "--optimizer", "adam",
            "--json", "-q"]
    files = []
    for name, extra in (("rts", ["--optimizer-state", "rts"]), ("plain", [])):
        code, out, _ = cli(capsys, *base, *extra)
        assert code == 0
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(out)
    main(["compare", *map(str, files)])
    options = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("options"))
    assert 'TensorLocations.setOptimizerLocation={"on_chip": true, "replicated_tensor_sharding": true}' in options
    assert "min_elements" not in options
