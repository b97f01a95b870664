"""Sweeps: the product of grid axes, one row per point, equal to running each point alone;
rows reach the CSV as points finish, --resume finishes a sweep, signals stop it cleanly."""

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

import models
import sim
from sim.cli import main as cli
from sim.cli import sweep as sweep_module
from sim.cli.sweep import grid_points, sweep


def test_grid_is_the_product_in_order():
    assert grid_points(["micro-batch=1,2", "replicas=1,4"]) == [
        {"micro-batch": "1", "replicas": "1"}, {"micro-batch": "1", "replicas": "4"},
        {"micro-batch": "2", "replicas": "1"}, {"micro-batch": "2", "replicas": "4"}]


@pytest.mark.parametrize("workers", [1, 2])
def test_rows_equal_single_runs(workers):
    table = sweep(["micro-batch=2,4"], ["--model", "mlp", "--device-iterations", "3"], workers=workers)
    assert list(table["micro-batch"]) == ["2", "4"]
    for mb, cycles in zip((2, 4), table["cycle_count"]):
        run = sim.simulate(models.get("mlp", micro_batch=mb), "ipu-mk2", sim.Options().deviceIterations(3))
        assert cycles == run.cycle_count
    shares = table[[c for c in table if c.startswith("share_")]].sum(axis=1)
    assert shares.round(9).tolist() == [1.0, 1.0]  # the breakdown adds up at every point


def test_a_failing_point_keeps_its_row():
    table = sweep(["num-layers=1,24"], ["--model", "bert-large", "--micro-batch", "1", "--seq-len", "64",
                                        "--training", "--optimizer", "lamb", "--param", "vocab=1000"],
                  workers=1)
    assert table["error"].iloc[0] == ""
    assert "Out of memory on IPU 0" in table["error"].iloc[1]


def test_cli_sweep_and_bad_axis(capsys, tmp_path):
    out_csv = tmp_path / "sweep.csv"
    code = cli.main(["sweep", "--grid", "device-iterations=1,2", "--workers", "1", "--csv", str(out_csv),
                     "--", "--model", "mlp"])
    assert code == 0 and out_csv.read_text().count("\n") == 3
    assert cli.main(["sweep", "--grid", "device-iterations", "--", "--model", "mlp"]) == 2
    assert "FLAG=V1,V2" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--grid", "micro-batch=1,2", "--grid", "micro-batch=4"], "--grid micro-batch is given twice"),
    (["--grid", "micro-bach=1,2"], "no flag --micro-bach (did you mean micro-batch?)"),
    (["--grid", "training=true,false"], "--training takes no value"),
    (["--grid", "micro-batch=1,2", "--", "--output", "out"], "--output after -- writes one run's output"),
    (["--grid", "micro-batch=1,2", "--", "--json"], "--json after -- writes one run's output"),
    (["--grid", "output=ga,gb", "--", "--model", "mlp"], "--grid output=...: --output writes one run's output"),
    (["--grid", "micro-batch=1", "--", "--model", "mlp", "--micro-batch", "2"],
     "--micro-batch is both a --grid axis and a flag after --; give it in one place"),
    (["--grid", "micro-batch=1", "--", "--model", "mlp", "--micro", "2"],  # as ipusim run reads --micro
     "--micro-batch is both a --grid axis and a flag after --; give it in one place"),
    (["--grid", "micro-batch=1,2", "--", "--model", "mlp", "--js"], "--json after -- writes one run's output"),
    (["--grid", "param=dtype=float16,dtype=float32", "--", "--model", "mlp", "--param", "dtype=float32"],
     "--param dtype=... is both a --grid axis and a flag after --; give it in one place"),
    (["--grid", "micro-batch=1", "--", "--model", "mlp", "--bogus"],
     "the flags after --: unrecognized arguments: --bogus"),
    (["--grid", "micro-batch=1", "--", "--model", "mlp", "--replicas", "two"],
     "the flags after --: argument --replicas: expected a whole number >= 1"),
])
def test_a_grid_asked_for_wrongly_is_refused_before_any_point_runs(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(sweep_module, "run_points", lambda *a, **k: pytest.fail("a point ran"))
    if "--" not in argv:
        argv = argv + ["--", "--model", "mlp"]
    assert cli.main(["sweep"] + argv) == 2
    assert message in capsys.readouterr().err


def test_values_holding_commas_are_separated_by_semicolons():
    """A list flag's values: a semicolon separates the points when there is one."""
    assert grid_points(["layers-per-ipu=1,1,1,1;2,2"]) == [{"layers-per-ipu": "1,1,1,1"}, {"layers-per-ipu": "2,2"}]
    table = sweep(["layers-per-ipu=1,1,1,1;2,2"], ["--model", "bert-base", "--num-layers", "4", "--hidden", "64",
                                                    "--heads", "4", "--seq-len", "16", "--vocab", "1000",
                                                    "--system", "ipu-m2000", "--device-iterations", "8"], workers=1)
    assert list(table["error"]) == ["", ""] and table["cycle_count"].nunique() == 2


def test_a_dask_address_dask_cannot_parse_is_a_usage_error(capsys):
    pytest.importorskip("distributed")
    assert cli.main(["sweep", "--dask", "nonsense", "--grid", "micro-batch=1,2", "--", "--model", "mlp"]) == 2
    err = capsys.readouterr().err
    assert "--dask 'nonsense': cannot reach the Dask scheduler" in err and "Traceback" not in err


def test_an_empty_grid_value_is_the_run_default():
    table = sweep(["micro-batch=,4"], ["--model", "mlp"], workers=1)
    default = sim.simulate(models.get("mlp"), "ipu-mk2").cycle_count
    assert list(table["micro-batch"].fillna("")) == ["", "4"] and table["cycle_count"].iloc[0] == default


def test_sweep_on_a_dask_cluster():
    """The same rows when the points run on a Dask scheduler (an in-process cluster here)."""
    distributed = pytest.importorskip("distributed")
    local = sweep(["micro-batch=2,4"], ["--model", "mlp"], workers=1)
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=2,
                                  dashboard_address=None) as cluster:
        remote = sweep(["micro-batch=2,4"], ["--model", "mlp"], dask=cluster.scheduler_address)
    assert remote["cycle_count"].tolist() == local["cycle_count"].tolist()


# --- reliability: rows as points finish, --resume, clean stop on signals, --workers ------------

GRID = ["micro-batch=1,2,3,4,5,6"]
#: points slow enough (~0.3 s each) that a signal lands while some are still to run
SLOW_MLP = ["--model", "mlp", "--param", "hidden=" + str([64] * 600).replace(" ", ""), "--training"]


def _sweep_command(csv_path, *extra):
    return [sys.executable, "-m", "sim.cli.main", "sweep", "--grid", GRID[0], "--workers", "2",
            "--csv", str(csv_path), *extra, "--", *SLOW_MLP]


def _children(pid):
    """Pids of the processes whose parent is ``pid`` (psutil, or /proc without it)."""
    try:
        import psutil
    except ImportError:
        found = set()
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if entry.isdigit() and int(fields[1]) == pid:
                found.add(int(entry))
        return found
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _running(pid):
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        import psutil
    except ImportError:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _data_rows(csv_path):
    return max(0, len(csv_path.read_text().splitlines()) - 1) if csv_path.exists() else 0


def _sorted_csv(csv_path):
    return pd.read_csv(csv_path).sort_values("micro-batch").reset_index(drop=True)


def test_sigterm_then_resume_equals_an_uninterrupted_sweep(tmp_path):
    """A sweep killed with SIGTERM after its first rows keeps them, ends its workers and exits
    143; --resume runs only the rest; the CSV then equals an uninterrupted sweep's."""
    csv_path = tmp_path / "sweep.csv"
    proc = subprocess.Popen(_sweep_command(csv_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 15
    while _data_rows(csv_path) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 143, err
    assert workers, "the sweep ran no worker processes"
    assert not [pid for pid in workers if _running(pid)], "worker processes left running"
    done = _data_rows(csv_path)
    assert 1 <= done < 6
    assert err.strip().splitlines() == [
        f"ipusim: sweep stopped by SIGTERM: {done} of 6 points done, rows in {str(csv_path)!r}; "
        "run the same command with --resume to finish"]
    assert "Traceback" not in err and out == ""

    resumed = subprocess.run(_sweep_command(csv_path, "--resume"), capture_output=True, text=True, timeout=30)
    assert resumed.returncode == 0, resumed.stderr
    printed = [line.split()[0] for line in resumed.stdout.splitlines()[1:]]
    assert printed == ["1", "2", "3", "4", "5", "6"]  # the printed table is in grid order

    whole = tmp_path / "whole.csv"
    assert cli.main(["sweep", "--grid", GRID[0], "--workers", "2", "--csv", str(whole), "--", *SLOW_MLP]) == 0
    final = _sorted_csv(csv_path)
    assert final["micro-batch"].tolist() == [1, 2, 3, 4, 5, 6]  # every point once
    pd.testing.assert_frame_equal(final, _sorted_csv(whole), check_exact=True)


def test_rows_are_in_the_csv_as_points_finish(tmp_path, monkeypatch):
    csv_path = tmp_path / "sweep.csv"
    seen = []
    real = sweep_module.run_point

    def spying(argv):
        seen.append(_data_rows(csv_path))  # rows on disk when this point starts
        return real(argv)
    monkeypatch.setattr(sweep_module, "run_point", spying)
    sweep(["micro-batch=1,2,3"], ["--model", "mlp"], workers=1, csv_path=csv_path)
    assert seen == [0, 1, 2]
    assert csv_path.read_text().splitlines()[0].startswith("micro-batch,cycle_count,")  # header once
    assert _data_rows(csv_path) == 3


def test_resume_runs_only_the_missing_points(tmp_path, monkeypatch):
    csv_path = tmp_path / "sweep.csv"
    sweep(["micro-batch=2,4"], ["--model", "mlp"], workers=1, csv_path=csv_path)
    with open(csv_path, "a") as f:
        f.write("6,123")  # a row cut short by a kill: dropped, and its point run again
    ran = []
    real = sweep_module.run_point
    monkeypatch.setattr(sweep_module, "run_point", lambda argv: ran.append(argv[-1]) or real(argv))
    table = sweep(["micro-batch=1,2,4,6"], ["--model", "mlp"], workers=1, csv_path=csv_path, resume=True)
    assert ran == ["1", "6"]
    assert table["micro-batch"].tolist() == ["1", "2", "4", "6"]
    fresh = sweep(["micro-batch=1,2,4,6"], ["--model", "mlp"], workers=1)
    assert table["cycle_count"].tolist() == fresh["cycle_count"].tolist()
    on_disk = pd.read_csv(csv_path)
    assert sorted(on_disk["micro-batch"]) == [1, 2, 4, 6]
    assert on_disk.set_index("micro-batch")["cycle_count"].to_dict() == dict(zip([1, 2, 4, 6], fresh["cycle_count"]))


def test_resume_runs_again_a_point_whose_row_is_damaged(tmp_path, monkeypatch):
    """A whole line with fewer fields than the header (a damaged row) is not taken for its point's result: the
    point runs again (until 2026-12-06 the table showed it with its one number and nothing else)."""
    csv_path = tmp_path / "sweep.csv"
    sweep(["micro-batch=2"], ["--model", "mlp"], workers=1, csv_path=csv_path)
    with open(csv_path, "a") as f:
        f.write("4,123\n")
    ran = []
    real = sweep_module.run_point
    monkeypatch.setattr(sweep_module, "run_point", lambda argv: ran.append(argv[-1]) or real(argv))
    table = sweep(["micro-batch=2,4"], ["--model", "mlp"], workers=1, csv_path=csv_path, resume=True)
    assert ran == ["4"]
    fresh = sweep(["micro-batch=2,4"], ["--model", "mlp"], workers=1)
    assert table["cycle_count"].tolist() == fresh["cycle_count"].tolist()
    assert table["error"].tolist() == ["", ""]


def test_resume_refuses_the_csv_of_other_shared_flags(tmp_path, capsys):
    """The grid values alone do not identify a point: a CSV of the same grid run with other
    shared flags (another system, training instead of inference) is not reused."""
    csv_path = tmp_path / "sweep.csv"
    sweep(["micro-batch=1,2"], ["--model", "mlp", "--system", "ipu-m2000"], workers=1, csv_path=csv_path)
    assert pd.read_csv(csv_path)["shared_flags"].tolist() == ["--model mlp --system ipu-m2000"] * 2
    before = csv_path.read_text()
    code = cli.main(["sweep", "--grid", "micro-batch=1,2", "--workers", "1", "--csv", str(csv_path), "--resume",
                     "--", "--model", "mlp", "--system", "ipu-mk1-c2", "--training"])
    err = capsys.readouterr().err
    assert code == 2
    assert (f"--resume: {str(csv_path)!r} holds a sweep run with other shared flags ('--model mlp --system "
            "ipu-m2000'); this one runs '--model mlp --system ipu-mk1-c2 --training': give the same flags after "
            "--, or another --csv") in err
    assert csv_path.read_text() == before  # nothing appended


def test_sigint_stops_a_sweep_with_130_and_keeps_its_rows(capsys, tmp_path, monkeypatch):
    csv_path = tmp_path / "sweep.csv"
    real = sweep_module.run_point

    def interrupting(argv):
        if argv[-1] == "3":
            os.kill(os.getpid(), signal.SIGINT)
        return real(argv)
    monkeypatch.setattr(sweep_module, "run_point", interrupting)
    before = signal.getsignal(signal.SIGINT)
    code = cli.main(["sweep", "--grid", "micro-batch=1,2,3,4", "--workers", "1", "--csv", str(csv_path),
                     "--", "--model", "mlp"])
    out, err = capsys.readouterr()
    assert code == 130 and out == ""
    assert err.splitlines() == [f"ipusim: sweep stopped by SIGINT: 2 of 4 points done, rows in {str(csv_path)!r}; "
                                "run the same command with --resume to finish"]
    assert _data_rows(csv_path) == 2
    assert signal.getsignal(signal.SIGINT) is before  # the usual handler is back


@pytest.mark.parametrize("value", ["0", "-1"])
def test_workers_below_one_is_a_usage_error(capsys, value):
    code = cli.main(["sweep", "--grid", "micro-batch=1,2", "--workers", value, "--", "--model", "mlp"])
    err = capsys.readouterr().err
    assert code == 2
    error_lines = [line for line in err.splitlines() if "error" in line]
    assert len(error_lines) == 1 and f"'{value}'" in error_lines[0] and ">= 1" in error_lines[0]


def test_resume_needs_a_csv(capsys):
    assert cli.main(["sweep", "--grid", "micro-batch=1,2", "--resume", "--", "--model", "mlp"]) == 2
    assert "--resume needs --csv" in capsys.readouterr().err


def test_a_csv_holding_rows_is_not_overwritten_without_resume(capsys, tmp_path):
    """Nothing is lost: a second sweep (or plan) onto a CSV that holds rows is refused unless it resumes."""
    path = tmp_path / "s.csv"
    argv = ["sweep", "--grid", "micro-batch=1,2", "--workers", "1", "--csv", str(path), "--", "--model", "mlp"]
    assert cli.main(argv) == 0
    rows = path.read_text()
    capsys.readouterr()
    assert cli.main(argv) == 2
    assert "holds rows already: add --resume" in capsys.readouterr().err and path.read_text() == rows
    assert cli.main(["plan", "--model", "mlp", "--system", "ipu-mk2", "--global-batch", "4", "--csv", str(path)]) == 2
    assert "holds rows already: add --resume to finish that plan" in capsys.readouterr().err


def test_csv_onto_a_folder_is_a_usage_error(capsys, tmp_path):
    code = cli.main(["sweep", "--grid", "micro-batch=1,2", "--csv", str(tmp_path), "--", "--model", "mlp"])
    assert code == 2
    assert f"argument --csv: {str(tmp_path)!r} is a folder; give a file path" in capsys.readouterr().err


def test_a_csv_holding_only_its_header_is_written_over(capsys, tmp_path):
    """A sweep stopped before its first point finished leaves the header alone: no rows to keep, so a new sweep
    (of another grid, too) may write the file without --resume."""
    path = tmp_path / "s.csv"
    path.write_text("replicas,cycle_count,seconds\n\n")
    argv = ["sweep", "--grid", "micro-batch=1,2", "--workers", "1", "--csv", str(path), "--", "--model", "mlp"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    table = pd.read_csv(path)
    assert list(table["micro-batch"]) == [1, 2] and table.columns[0] == "micro-batch"


def test_a_repeatable_flag_may_be_an_axis_and_a_shared_flag_for_different_names():
    """Sweeping one model parameter while another is fixed: ``--param`` (repeatable in ipusim run) may be a
    grid axis and a flag after ``--`` when they name different parameters; each point gets both."""
    table = sweep(["param=dtype=float16,dtype=float32"], ["--model", "mlp", "--param", "in_features=64"], workers=1)
    assert list(table["error"]) == ["", ""]
    single = [sim.simulate(models.get("mlp", in_features=64, dtype=dtype)).cycle_count
              for dtype in ("float16", "float32")]
    assert list(table["cycle_count"]) == single and single[0] != single[1]
