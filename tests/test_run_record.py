"""What a run records about itself and how the command line reports it: FLOPs over every replica,
the micro-batch a front end knows, what tells two runs apart (model parameters, the EveryN
period, overlapped streams), and the messages and exit codes of the odd cases."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import models
import sim
from sim.cli.main import main
from sim.cli.sweep import _printable
from sim.results.report import OUTPUT_FILES
from sim.results.run import UNMODELLED_CALL_SECONDS, unmodelled_call_effect

from cli_run import cli

ROOT = Path(__file__).resolve().parent.parent


def _synthetic(replicas: int) -> sim.Run:
    return sim.simulate(models.get("mlp", micro_batch=8), "ipu-pod16",
                        sim.Options().replicationFactor(replicas).enableSyntheticData(True))


def test_flops_count_every_replica_as_samples_do():
    """Replicas beyond the simulated ones run the same work: their FLOPs count, as their samples
    do (it used to stop at the 4 replicas one host link feeds)."""
    four, sixteen = _synthetic(4), _synthetic(16)
    assert len(sixteen.executable.simulated_replicas) == 4
    assert sixteen.samples == 4 * four.samples
    assert sixteen.flops == pytest.approx(4 * four.flops, rel=1e-12)


def test_micro_batch_is_what_the_front_end_knows():
    assert models.get("bert-base", micro_batch=3, num_layers=1).micro_batch_rows() == 3
    assert models.get("tut6-matvec").micro_batch_rows() == 1  # one matrix-vector product a call
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import sim.onnx
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "scale"], ["y"])], "g", [scale, x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = sim.onnx.load(model, batch_size=8)  # the scalar input first: its shape has no batch
    assert g.micro_batch_rows() == 8
    assert sim.onnx.load(model, dims={"batch": 5}).micro_batch_rows() == 5


def test_summary_tells_runs_apart(capsys):
    def summary(*argv):
        code, out, _ = cli(capsys, "run", "-q", "--model", "mlp", "--io-tiles", "32", "--device-iterations", "8",
                           "--json", *argv)
        assert code == 0
        return json.loads(out)

    every2, every4 = summary("--output-mode", "everyn:2"), summary("--output-mode", "everyn:4")
    assert (every2["options"]["outputMode"], every4["options"]["outputMode"]) == ("EveryN(2)", "EveryN(4)")
    bigger = summary("--micro-batch", "64", "--param", "hidden=[1024,1024]")
    assert bigger["model_params"] == {"micro_batch": 64, "hidden": [1024, 1024]}
    assert bigger["run"]["micro_batch"] == 64
    overlapped = summary("--overlap", "device")
    assert set(overlapped["run"]["overlap"].values()) == {"OverlapDeviceIterationLoop"}
    assert summary()["run"]["overlap"] == {} and summary()["model_params"] == {}
    assert summary()["run"]["optimizer"] is None  # inference
    adam = summary("--training", "--optimizer", "adamw", "--optimizer-state-dtype", "float16,float32",
                   "--max-grad-norm", "1")
    assert adam["run"]["optimizer"] == ("adamw (state: first moment float16, second moment float32; gradients "
                                        "clipped to global norm 1)")


def test_output_folder_summary_lists_the_files(tmp_path):
    assert main(["run", "-q", "--model", "mlp", "--output", str(tmp_path / "out")]) == 0
    written = json.loads((tmp_path / "out" / "summary.json").read_text())["outputs"]
    assert tuple(Path(p).name for p in written) == tuple(OUTPUT_FILES)
    assert all(Path(p).is_file() for p in written)


def test_sweep_table_prints_whole_numbers_whole():
    table = pd.DataFrame({"micro-batch": [0, 1], "cycle_count": [float("nan"), 954137.0],
                          "samples_per_second": [float("nan"), 111020.25], "error": ["bad", ""]})
    text = _printable(table).to_string(index=False, float_format=lambda v: f"{v:.6g}")
    assert "954137" in text and "<NA>" in text and "111020" in text


def test_notes_for_one_simulated_replica_and_idle_host_io_settings():
    run = sim.simulate(models.get("mlp"), "ipu-mk1-c2", sim.Options().replicationFactor(2))
    assert any(n.startswith("replica 0 simulated (no other replica shares its host link); the other 1 run")
               for n in run.executable.notes)
    o = sim.Options().enableSyntheticData(True)
    o._Popart.set("defaultPrefetchBufferingDepth", 4)
    run = sim.simulate(models.get("mlp"), "ipu-mk2", o)
    assert "synthetic data: no host transfers run, so a prefetch depth above 1 has no effect" in run.executable.notes
    o._Popart.set("bufferingDepthMap", {"x": 2})._Popart.set("rearrangeAnchorsOnHost", True)
    run = sim.simulate(models.get("mlp"), "ipu-mk2", o)
    assert ("synthetic data: no host transfers run, so a prefetch depth above 1 and bufferingDepthMap and streams "
            "rearranged on the host have no effect" in run.executable.notes)
    assert not [n for n in run.executable.notes if n.startswith("rearrangeAnchorsOnHost")]
    o = sim.Options().enableSyntheticData(True).replicationFactor(2).hostProcesses(2).streamCallbackThreads(4)
    run = sim.simulate(models.get("mlp"), "ipu-m2000", o)
    assert ("synthetic data: no host transfers run, so hostProcesses and streamCallbackThreads have no effect"
            in run.executable.notes)


def test_a_pipelined_training_run_states_the_per_call_time_published_runs_have_beyond_it():
    """Graphcore's pipelined PopART and PopTorch training runs take 120-580 ms more per call than
    simulated (reports/validation.md): such a run says what that would add to its own call; an
    inference run and a single-IPU training run do not."""
    g = models.get("bert-base", micro_batch=1, seq_len=128, num_layers=2, layers_per_ipu=[1, 1])
    run = sim.simulate(g, "ipu-m2000", sim.Options().Training.gradientAccumulation(8), training=True,
                       optimizer="sgd")
    [note] = [n for n in run.notes if n.startswith("not modelled: Graphcore's published pipelined")]
    low, high = UNMODELLED_CALL_SECONDS
    assert run.seconds < high  # a short call: the time it may add, and how many times the call that makes
    assert note.endswith(f"so a call of {run.seconds * 1e3:,.1f} ms may take 120-580 ms longer on hardware, "
                         f"{(run.seconds + low) / run.seconds:,.3g} to {(run.seconds + high) / run.seconds:,.3g} "
                         "times as long")
    assert unmodelled_call_effect(2.0).endswith("so a call of 2,000.0 ms may take 6%-29% longer on hardware")
    assert "take 120-580 ms more per call than the simulator gives them" in note
    inference = sim.simulate(g, "ipu-m2000", sim.Options().deviceIterations(4))
    single = sim.simulate(models.get("mlp"), "ipu-mk2", sim.Options(), training=True, optimizer="sgd")
    assert not any("published pipelined" in n for n in inference.notes + single.notes)


def test_command_line_names_the_flag_at_fault(capsys, tmp_path):
    code, _, err = cli(capsys, "run", "--model", "mlp", "--overlap", "device")
    assert code == 2 and "--overlap device needs IO tiles: add --io-tiles N" in err
    assert main(["run", "-q", "--model", "mlp", "--json"]) == 0
    run_file = tmp_path / "a.json"
    run_file.write_text(capsys.readouterr().out)
    (tmp_path / "fig.png").mkdir()
    code, _, err = cli(capsys, "compare", run_file, run_file, "--figure", tmp_path / "fig.png")
    assert code == 2 and "is a folder; give the path of a file to write" in err


def test_a_closed_pipe_stops_quietly(monkeypatch, capsys):
    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            return 1

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    monkeypatch.setattr("os.dup2", lambda fd, fd2: None)  # leave the test's own stdout alone
    assert main(["models"]) == 141


def test_readme_quotes_tutorial_6_as_simulated():
    from sim import validation
    run = validation.tut6()
    readme = (ROOT / "README.md").read_text()
    total = re.search(r"\| Poplar tutorial 6 on Mk2, total cycles \| [\d,]+ \| ([\d,]+) \|", readme).group(1)
    compute = re.search(r"\| — compute cycles per tile \| [\d,]+ \| ([\d,]+) \|", readme).group(1)
    assert (int(total.replace(",", "")), int(compute.replace(",", ""))) == (
        run.cycle_count, int(run.breakdown.loc[0, "compute"]))
