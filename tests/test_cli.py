"""The ``ipusim`` command line, run in-process: output, JSON contract, files, errors, exit codes."""

import json

import pandas as pd
import pytest

import models
import sim
from sim.cli import main
from sim.report import OUTPUT_FILES, format_summary, write_outputs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SMALL = ["--num-layers", "2"]  # the default model (BERT-base, micro-batch 1) with 2 layers


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_default_run_prints_cycles_and_breakdown(capsys):
    code, out, err = run_cli(capsys, "run")
    assert code == 0 and err == ""
    assert "bert-base on ipu-mk2" in out and "inference" in out
    assert "cycles" in out and "samples/s" in out and "TFLOP/s" in out
    for word in ("round trip", "host -> IPU", "IPU -> host", "host_io", "idle", "op at peak"):
        assert word in out
    assert "micro-batch 1," in out  # the default run's micro-batch


def test_json_has_the_documented_keys_and_types(capsys):
    code, out, _ = run_cli(capsys, "run", *SMALL, "--json")
    assert code == 0
    d = json.loads(out)
    assert type(d["cycle_count"]) is int and d["cycle_count"] > 0
    assert isinstance(d["seconds"], float) and d["seconds"] > 0
    assert isinstance(d["samples_per_second"], float) and d["samples_per_second"] > 0
    for key in ("latency", "compute_latency", "host_ipu_latency", "ipu_host_latency"):
        lat = d[key]
        assert set(lat) == {"min", "max", "avg"}
        assert all(isinstance(v, float) for v in lat.values())
        assert lat["min"] <= lat["avg"] <= lat["max"]
    for ipu, row in d["breakdown"].items():
        assert all(type(v) is int for v in row.values())
        assert sum(row.values()) == d["cycle_count"]
    assert d["memory"]["0"]["peak_tile_bytes"] > 0


def test_options_reach_the_simulation(capsys):
    code, out, _ = run_cli(capsys, "run", "--model", "mlp", "--training", "--optimizer", "adam",
                           "--device-iterations", "2", "--gradient-accumulation", "3",
                           "--output-mode", "sum", "--available-memory-proportion", "0.3",
                           "--param", "hidden=[64, 64]", "--micro-batch", "4")
    assert code == 0
    assert "training (adam)" in out and "micro-batch 4," in out
    assert "deviceIterations 2, gradientAccumulation 3" in out
    assert "outputMode Sum" in out and "IPU0=0.3" in out
    code, out, _ = run_cli(capsys, "run", "--model", "mlp", "--synthetic-data", "--json")
    d = json.loads(out)
    assert d["latency"] == {"min": 0.0, "max": 0.0, "avg": 0.0}
    assert d["breakdown"]["0"]["host_io"] == 0


def test_output_writes_every_file(capsys, tmp_path):
    out_dir = tmp_path / "new" / "dir"
    code, out, _ = run_cli(capsys, "run", *SMALL, "--output", str(out_dir))
    assert code == 0
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(OUTPUT_FILES)  # no temporaries left
    for name in OUTPUT_FILES:
        assert str(out_dir / name) in out
    run = sim.simulate(models.get("bert-base", micro_batch=1, num_layers=2), "ipu-mk2")
    trace = pd.read_csv(out_dir / "trace.csv")
    assert len(trace) == len(run.trace) and list(trace.columns) == list(run.trace.columns)
    assert (trace["cycles"] == trace["end"] - trace["start"]).all()
    assert len(pd.read_csv(out_dir / "ops.csv")) == len(run.op_trace())
    assert pd.read_csv(out_dir / "breakdown.csv", index_col="ipu").sum(axis=1).eq(run.cycle_count).all()
    assert json.loads((out_dir / "summary.json").read_text())["cycle_count"] == run.cycle_count
    for png in ("timeline.png", "memory.png"):
        assert (out_dir / png).read_bytes()[:8] == PNG_SIGNATURE


def test_write_outputs_refuses_a_file_and_overwrites_whole_files(tmp_path):
    run = sim.simulate(models.get("mlp", micro_batch=2), "ipu-mk2")
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        write_outputs(run, a_file)
    first = write_outputs(run, tmp_path / "o")
    assert write_outputs(run, tmp_path / "o") == first  # second write replaces the first
    assert len(list((tmp_path / "o").iterdir())) == len(OUTPUT_FILES)
    assert "notes: none" in format_summary(run)


def test_output_onto_a_file_is_an_error(capsys, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    code, _, err = run_cli(capsys, "run", "--model", "mlp", "--output", str(a_file))
    assert code == 2 and "not a directory" in err


def test_systems_and_models_lists(capsys):
    code, out, _ = run_cli(capsys, "systems")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "ipu-pod16" in lines and "bow-pod64" in lines
    assert lines["ipu-pod16"].split()[1] == "16" and "1.325 GHz" in lines["ipu-pod16"]
    code, out, _ = run_cli(capsys, "models")
    assert code == 0
    large = next(line for line in out.splitlines() if line.startswith("bert-large"))
    assert "num_layers=24" in large and "hidden=1024" in large


@pytest.mark.parametrize("argv, words", [
    (["run", "--system", "ipu-nope"], ["unknown system", "ipu-nope"]),
    (["run", "--model", "bert-huge"], ["unknown model", "bert-huge"]),
    (["run", "--param", "colour=1"], ["unknown parameter", "colour"]),
    (["run", "--image-size", "32"], ["image_size"]),
    (["run", "--micro-batch", "0"], ["micro_batch"]),
    (["run", "--param", "nokey"], ["KEY=VALUE"]),
    (["run", "--output-mode", "every3"], ["--output-mode"]),
    (["run", "--gradient-accumulation", "4"], ["gradientAccumulation"]),
    (["run", "--optimizer", "adam"], ["--training"]),
    (["run", "--bogus"], ["--bogus"]),
    (["frobnicate"], ["frobnicate"]),
    ([], ["COMMAND"]),
])
def test_usage_and_simulator_errors_exit_2(capsys, argv, words):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert "error:" in err
    for w in words:
        assert w in err


def test_out_of_memory_exits_3_with_the_shortfall(capsys):
    code, out, err = run_cli(capsys, "run", "--model", "bert-large", "--training",
                             "--num-layers", "24", "--micro-batch", "8")
    assert code == 3 and out == ""
    assert err.startswith("ipusim: error: Out of memory") and "short by" in err


def test_help_exits_0(capsys):
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0 and "--device-iterations" in out
