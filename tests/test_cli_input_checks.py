"""What the command lines make of their input: an ONNX run's file and --dim sizes recorded in its summary
and told apart by compare, a --dim or --param given twice, the batch flag an ONNX error names, and a
sweep's grid values checked before any point runs."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from sim.cli import sweep as sweep_module

from cli_run import cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import sim.onnx  # noqa: E402


def _save(path, x_shape, y_shape) -> str:
    """A MatMul of ``x`` (``x_shape``, symbolic dimensions by name or None) by a 64 x 32 weight, saved at
    ``path``."""
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "seq",
                         [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                         [h.make_tensor_value_info("y", T.FLOAT, y_shape)],
                         [nh.from_array(np.zeros((64, 32), np.float32), "w")])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.fixture
def seq_onnx(tmp_path) -> str:
    """x[batch, seq, 64] @ w[64, 32]: two symbolic dimensions."""
    return _save(tmp_path / "seq.onnx", ["batch", "seq", 64], ["batch", "seq", 32])


@pytest.fixture
def unnamed_batch_onnx(tmp_path) -> str:
    """x[?, 64] @ w[64, 32]: an unnamed dynamic batch dimension."""
    return _save(tmp_path / "tiny.onnx", [None, 64], [None, 32])


# --- 1: an ONNX run's file and --dim sizes in its summary, and compare tells them apart -------------
def test_an_onnx_runs_file_and_dims_are_recorded_and_compare_shows_them_differ(capsys, seq_onnx, tmp_path):
    summaries = {}
    for seq in (4, 16):
        code, out, _ = cli(capsys, "run", "--onnx", seq_onnx, "--micro-batch", 2, "--dim", f"seq={seq}", "--json")
        assert code == 0
        (tmp_path / f"s{seq}.json").write_text(out)
        summaries[seq] = json.loads(out)
    assert summaries[4]["model_params"] == {"onnx": seq_onnx, "batch_size": 2, "dims": {"seq": 4}}
    assert summaries[16]["model_params"] == {"onnx": seq_onnx, "batch_size": 2, "dims": {"seq": 16}}

    code, out, _ = cli(capsys, "compare", tmp_path / "s4.json", tmp_path / "s16.json")
    assert code == 4
    row = next(line for line in out.splitlines() if line.startswith("model parameters"))
    assert f'onnx="{seq_onnx}"; batch_size=2; dims={{"seq": 4}}' in row
    assert f'onnx="{seq_onnx}"; batch_size=2; dims={{"seq": 16}}' in row
    assert "defaults" not in row


def test_the_output_folders_summary_records_the_onnx_file_and_dims_too(capsys, seq_onnx, tmp_path):
    code, _, _ = cli(capsys, "run", "-q", "--onnx", seq_onnx, "--micro-batch", 2, "--dim", "seq=8",
                     "--output", tmp_path / "out")
    assert code == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["model_params"] == {"onnx": seq_onnx, "batch_size": 2, "dims": {"seq": 8}}


def test_sim_onnx_load_records_what_it_was_given(seq_onnx):
    assert sim.onnx.load(seq_onnx, batch_size=np.int64(2), dims={"seq": np.int64(4)}).params == {
        "onnx": seq_onnx, "batch_size": 2, "dims": {"seq": 4}}
    proto = onnx.load(seq_onnx)
    assert sim.onnx.load(proto, batch_size=2, dims={"seq": 4}, dtype="float16").params == {
        "batch_size": 2, "dims": {"seq": 4}, "dtype": "float16"}  # no file to name


@pytest.mark.parametrize("front_end", ["run", "sim.onnx", "plan"])
def test_a_dim_given_twice_with_different_sizes_is_a_usage_error(capsys, seq_onnx, front_end):
    message = "symbolic dimension seq is given twice, as --dim seq=4 and --dim seq=5; give it once"
    argv = {"run": ["run", "--onnx", seq_onnx, "--micro-batch", "2"],
            "sim.onnx": [seq_onnx, "--batch-size", "2"],
            "plan": ["plan", "--onnx", seq_onnx, "--system", "ipu-mk2", "--global-batch", "8"]}[front_end]
    argv += ["--dim", "seq=4", "--dim", "seq=5"]
    if front_end == "sim.onnx":
        code = sim.onnx.main(argv)
        err = capsys.readouterr().err
    else:
        code, _, err = cli(capsys, *argv)
    assert code == 2
    assert f"error: {message}" in err


def test_a_dim_given_twice_with_the_same_size_is_no_conflict(capsys, seq_onnx):
    code, out, _ = cli(capsys, "run", "--onnx", seq_onnx, "--micro-batch", 2, "--dim", "seq=4", "--dim", "seq=4",
                       "--json")
    assert code == 0 and json.loads(out)["model_params"]["dims"] == {"seq": 4}


# --- 2: the batch size's flag named as the front end in use spells it ----------------------------
def test_a_missing_batch_size_names_the_flag_of_the_front_end_in_use(capsys, unnamed_batch_onnx):
    hint = "Give load(..., batch_size=N) (command line: {}) for a leading (batch) dimension"
    code, _, err = cli(capsys, "run", "--onnx", unnamed_batch_onnx)
    assert code == 2 and hint.format("--micro-batch N") in err and "--batch-size" not in err

    assert sim.onnx.main([unnamed_batch_onnx]) == 2
    err = capsys.readouterr().err
    assert hint.format("--batch-size N") in err and "--micro-batch" not in err

    with pytest.raises(sim.GraphError, match=re.escape(hint.format(
            "--micro-batch N in ipusim run, --batch-size N in python -m sim.onnx"))):
        sim.onnx.load(unnamed_batch_onnx)  # the Python API: each front end's flag


def test_a_batch_sized_two_ways_names_the_flag_of_the_front_end_in_use(capsys, seq_onnx):
    tail = "give one of them (on the command line, --dim batch=N or {})"
    code, _, err = cli(capsys, "run", "--onnx", seq_onnx, "--micro-batch", 2, "--dim", "batch=4", "--dim", "seq=4")
    assert code == 2 and tail.format("--micro-batch") in err
    assert sim.onnx.main([seq_onnx, "--batch-size", "2", "--dim", "batch=4", "--dim", "seq=4"]) == 2
    assert tail.format("--batch-size") in capsys.readouterr().err


# --- 3: a --param given twice is quoted as typed ------------------------------------------------
@pytest.mark.parametrize("first, second", [("hidden=[64]", "hidden=[32]"), ("hidden=[64, 64]", "hidden=[32,32]"),
                                           ("dtype=float16", "dtype=float32")])
def test_a_param_given_twice_is_quoted_as_typed(capsys, first, second):
    key = first.split("=")[0]
    code, _, err = cli(capsys, "run", "--model", "mlp", "--param", first, "--param", second)
    assert code == 2
    assert f"error: model parameter {key} is given twice, as --param {first} and --param {second}; give it once" in err


# --- 4: a sweep's grid values parsed before any point runs --------------------------------------
@pytest.mark.parametrize("axis, message", [
    ("micro-batch=1,abc", "--grid micro-batch=abc: argument --micro-batch: invalid int value: 'abc'"),
    ("replicas=2,0", "--grid replicas=0: argument --replicas: expected a whole number >= 1, got '0'"),
    ("output-mode=all,sometimes", "--grid output-mode=sometimes: argument --output-mode: expected all, final, sum "
     "or everyn:N (N >= 1), got 'sometimes'"),
    ("param=hidden=[64],=3", "--grid param==3: argument --param: expected KEY=VALUE, got '=3'"),
])
def test_a_bad_grid_value_is_a_usage_error_before_any_point_runs(capsys, monkeypatch, axis, message):
    monkeypatch.setattr(sweep_module, "run_points", lambda *a, **k: pytest.fail("a point ran"))
    code, out, err = cli(capsys, "sweep", "--workers", 1, "--grid", axis, "--", "--model", "mlp")
    assert code == 2 and out == ""
    assert f"ipusim sweep: error: {message}\n" in err


def test_the_grid_values_are_checked_beside_the_shared_flags():
    """A value is parsed as its point's flags hold it, after the shared flags (which check_common checks alone)."""
    with pytest.raises(sweep_module.PointError, match=r"^--grid micro-batch=x: argument --micro-batch: invalid"):
        sweep_module.sweep(["replicas=1", "micro-batch=2,x"], ["--model", "mlp"])
    sweep_module.check_values(["--model", "mlp"], sweep_module.grid_points(["micro-batch=,2", "replicas=1,2"]))
