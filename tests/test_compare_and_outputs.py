"""What ``ipusim run --output`` and ``ipusim compare`` write and report (a third pass over the outputs):
compare's table by pass in ``run.pass_breakdown``'s order with its total, its note when runs are of
different work, and a failed ``--output`` write that leaves no folders behind."""

from __future__ import annotations

import json

import pytest

import models
import sim
from sim.options import OutputMode
from sim.results import report
from sim.results.run import PASS_COLUMNS

from cli_run import cli


def _summary(model: str, system: str, training: bool, passes: dict[str, int], ipus: int = 1) -> dict:
    """A minimal run summary of ``ipus`` IPUs (one replica) whose rows hold ``passes`` (pass -> cycles)."""
    cycles = sum(passes.values())
    row = {"compute": cycles - passes.get("idle", 0), "idle": passes.get("idle", 0)}
    return {"model": model, "system": system, "training": training, "cycle_count": cycles, "seconds": cycles / 1e9,
            "run": {"ipus_per_replica": ipus, "simulated_replicas": [0], "replication_factor": 1},
            "breakdown": {str(i): dict(row) for i in range(ipus)},
            "pass_breakdown": {str(i): {p: passes.get(p, 0) for p in PASS_COLUMNS} for i in range(ipus)}}


def _write(path, summary: dict):
    path.write_text(json.dumps(summary), encoding="utf-8")
    return path


def _rows(out: str, title: str) -> list[list[str]]:
    """The rows of the table headed ``title`` in compare's output, split on spaces, up to its blank line."""
    table = out.split(title, 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return [line.split() for line in table]


def test_compare_by_pass_lists_passes_in_pass_breakdown_order_with_a_total(capsys, tmp_path):
    """The pass table's rows follow ``run.pass_breakdown`` (forward ... weight update, then sync, host_io, ...,
    idle) whichever run has them; they had followed the first run's non-zero passes, so an inference run's
    host_io came before a training run's backward. Like the breakdown, it ends in a total row: cycle_count x
    IPUs per replica."""
    a = _write(tmp_path / "a.json", _summary("m", "s", True, {"forward": 100, "host_io": 30, "idle": 10}, ipus=2))
    b = _write(tmp_path / "b.json", _summary("m", "s", True, {"forward": 100, "backward": 200, "weight update": 5,
                                                              "host_io": 30, "idle": 10}, ipus=2))
    code, out, _ = cli(capsys, "compare", a, b)
    assert code == 4
    rows = _rows(out, "by pass (cycles per replica)")
    names = [r[0] for r in rows]
    assert names == ["forward", "backward", "weight", "host_io", "idle", "total"]  # "weight update": two words
    assert rows[-1][:3] == ["total", f"{2 * 140:,}", f"{2 * 345:,}"]


def test_compare_says_when_runs_are_of_another_model_system_or_mode(capsys, tmp_path):
    """Runs of another model, on another system, or training against inference compare different work: each
    such run gets a note naming what differs (none for runs of the same work, and -q prints nothing)."""
    passes = {"forward": 100, "idle": 10}
    a = _write(tmp_path / "a.json", _summary("mlp", "ipu-mk2", False, passes))
    same = _write(tmp_path / "same.json", _summary("mlp", "ipu-mk2", False, passes))
    other = _write(tmp_path / "other.json", _summary("bert-base", "ipu-pod16", True, passes))
    code, out, _ = cli(capsys, "compare", a, same, other)
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert notes == ["note: other.json is not the same work as a.json: another model (bert-base, not mlp); another "
                     "system (ipu-pod16, not ipu-mk2); training, not inference"]
    assert code == 0  # the same numbers: what differs is said, the status is the numbers'
    assert cli(capsys, "compare", "-q", a, other) == (0, "", "")
    assert "note:" not in cli(capsys, "compare", a, same)[1]


@pytest.fixture(scope="module")
def mlp_run():
    import models
    import sim
    return sim.simulate(models.get("mlp"), "ipu-mk2", sim.Options())


def test_a_failed_output_write_removes_the_folders_it_made(mlp_run, tmp_path, monkeypatch):
    """``write_outputs`` into a folder whose parents do not exist makes them; when the write then fails
    (here writing summary.json raises) it removes them again, so nothing is left (they had stayed, empty).
    Folders that were there before stay."""
    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")
    (tmp_path / "keep").mkdir()
    monkeypatch.setattr(report, "to_json", fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        report.write_outputs(mlp_run, tmp_path / "keep" / "a" / "b" / "out")
    assert [p.name for p in tmp_path.rglob("*")] == ["keep"]


def test_summary_gives_every_ns_period():
    """summary.json's run names the output mode and, for EveryN, its period (the text report's EveryN(2))."""
    o = sim.Options().deviceIterations(4).outputMode(OutputMode.EveryN, 2)
    run = sim.simulate(models.get("mlp"), "ipu-mk2", o)
    assert (run.summary()["run"]["output_mode"], run.summary()["run"]["output_return_period"]) == ("EveryN", 2)
