"""``--output DIR``: replicated runs write every file, and DIR always holds one complete run."""

import json

import pytest

import models
import sim
from sim.cli.main import main
from sim.results import report
from sim.results.report import OUTPUT_FILES, memory_figure, write_outputs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _snapshot(directory):
    """{file name: bytes} of everything in ``directory``."""
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def _leftovers(parent, name):
    """Temporary or set-aside folders of ``write_outputs`` next to ``parent / name``."""
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")]


@pytest.mark.parametrize("argv", [
    ["--model", "mlp", "--system", "ipu-m2000", "--replicas", "2"],
    ["--model", "bert-base", "--num-layers", "2", "--layers-per-ipu", "1,1", "--micro-batch", "1",
     "--seq-len", "64", "--device-iterations", "4", "--system", "ipu-m2000", "--replicas", "2"],
])
def test_replicated_run_writes_every_output(capsys, tmp_path, argv):
    out_dir = tmp_path / "out"
    code = main(["run", *argv, "--output", str(out_dir)])
    _, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(OUTPUT_FILES)
    assert (out_dir / "memory.png").read_bytes()[:8] == PNG_SIGNATURE


def test_memory_figure_draws_one_bar_per_ipu_of_a_replica():
    run = sim.simulate(models.get("mlp", micro_batch=2), "ipu-m2000", sim.Options().replicationFactor(4))
    assert len(run.executable.ipus) > len(run.memory)  # more IPUs simulated than memory analyses
    fig = memory_figure(run)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["IPU 0"]
    assert [line.get_label() for line in ax.get_lines()] == ["tile capacity (624 KiB)"]
    assert "every replica holds the same" in ax.get_title()


def test_a_failed_write_leaves_the_old_set_whole(tmp_path, monkeypatch):
    out_dir = tmp_path / "out"
    old_run = sim.simulate(models.get("mlp", micro_batch=2), "ipu-mk2")
    write_outputs(old_run, out_dir)
    before = _snapshot(out_dir)

    def broken_figure(run):
        raise RuntimeError("disk full while drawing")
    monkeypatch.setattr(report, "memory_figure", broken_figure)  # the last file of the set
    new_run = sim.simulate(models.get("mlp", micro_batch=4), "ipu-mk2")
    with pytest.raises(RuntimeError, match="disk full"):
        write_outputs(new_run, out_dir)
    assert _snapshot(out_dir) == before  # exactly the old files, byte for byte
    assert _leftovers(tmp_path, "out") == []

    monkeypatch.undo()
    written = write_outputs(new_run, out_dir)  # a normal re-run replaces the set
    assert written == [out_dir / name for name in OUTPUT_FILES]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(OUTPUT_FILES)
    assert json.loads((out_dir / "summary.json").read_text())["cycle_count"] == new_run.cycle_count
    assert new_run.cycle_count != old_run.cycle_count
    assert _leftovers(tmp_path, "out") == []


def test_an_interrupted_cli_write_leaves_the_old_set_whole(capsys, tmp_path, monkeypatch):
    out_dir = tmp_path / "out"
    assert main(["run", "--model", "mlp", "--output", str(out_dir)]) == 0
    before = _snapshot(out_dir)

    def interrupted(run):
        raise KeyboardInterrupt
    monkeypatch.setattr(report, "timeline_figure", interrupted)
    assert main(["run", "--model", "mlp", "--micro-batch", "4", "--output", str(out_dir)]) == 130
    assert _snapshot(out_dir) == before
    assert _leftovers(tmp_path, "out") == []


def test_output_refuses_a_directory_with_other_files(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    code = main(["run", "--model", "mlp", "--output", str(tmp_path)])
    assert code == 2 and "other than a run's outputs (notes.txt)" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_timeline_gives_every_pass_and_kind_its_own_colour():
    """Gradient clipping runs outside the passes (pass ``compute``): in the timeline its tasks must not
    take forward's colour, and no two legend entries share one; an explicit IO-tile copy (PopXL's
    ``ops.io_tile_copy``, task "io-tile copy x") counts as io-tile copy, as the host streams' moves do."""
    from sim.graph.training import Optimizer
    from sim.results.run import compute_pass

    run = sim.simulate(models.get("mlp"), "ipu-mk2", training=True, optimizer=Optimizer("sgd", clip_norm=1.0))
    assert run.pass_breakdown.loc[0, "compute"] > 0  # the premise: the clipping's tasks
    legend = report.timeline_figure(run).axes[0].get_legend()
    colours = {t.get_text(): tuple(h.get_facecolor()) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert {"forward", "compute"} <= set(colours)
    assert len(set(colours.values())) == len(colours), colours
    passes = set(report.PASS_COLOURS.values())  # compute tasks are drawn by pass, the other kinds by kind
    kinds = {c for kind, c in report.KIND_COLOURS.items() if kind != "compute"}
    assert len(passes) == len(report.PASS_COLOURS) and not passes & kinds
    assert [compute_pass(n) for n in ("io-tile copy w0_loaded", "IO tiles -> compute tiles: x",
                                      "gradient clipping norms")] == ["io-tile copy", "io-tile copy", "compute"]
