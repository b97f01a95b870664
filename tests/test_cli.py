"""The ``ipusim`` command line, run in-process: output, JSON contract, files, errors, exit codes."""

import json
import re

import pandas as pd
import pytest

import models
import sim
from sim.strategy import ShardedExecution
from sim.results.report import OUTPUT_FILES, format_summary, write_outputs

from cli_run import cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SMALL = ["--num-layers", "2"]  # the default model (BERT-base, micro-batch 1) with 2 layers


def test_default_run_prints_cycles_and_breakdown(capsys):
    code, out, err = cli(capsys, "run")
    assert code == 0 and err == ""
    assert "bert-base on ipu-mk2" in out and "inference" in out
    assert "cycles" in out and "samples/s" in out and "TFLOP/s" in out
    for word in ("round trip", "host -> IPU", "IPU -> host", "host_io", "idle", "op at peak"):
        assert word in out
    assert "micro-batch 1," in out  # the default run's micro-batch


def test_json_has_the_documented_keys_and_types(capsys):
    code, out, _ = cli(capsys, "run", *SMALL, "--json")
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
    code, out, _ = cli(capsys, "run", "--model", "mlp", "--training", "--optimizer", "adam",
                           "--device-iterations", "2", "--gradient-accumulation", "3",
                           "--output-mode", "sum", "--available-memory-proportion", "0.3",
                           "--param", "hidden=[64, 64]", "--micro-batch", "4")
    assert code == 0
    assert "training (adam)" in out and "micro-batch 4," in out
    assert "deviceIterations 2, gradientAccumulation 3" in out
    assert "outputMode Sum" in out and "IPU0=0.3" in out
    code, out, _ = cli(capsys, "run", "--model", "mlp", "--synthetic-data", "--json")
    d = json.loads(out)
    assert d["latency"] is None  # not measured with synthetic data, so no 0 that reads as a time
    assert any("latencies not measured" in n for n in d["notes"])
    assert d["breakdown"]["0"]["host_io"] == 0


def test_output_writes_every_file(capsys, tmp_path):
    out_dir = tmp_path / "new" / "dir"
    code, out, _ = cli(capsys, "run", *SMALL, "--output", str(out_dir))
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
    for png in ("timeline.png", "memory.png", "liveness.png"):
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
    # a run with nothing to say (a real-data run says what its host data pipeline must deliver, and this
    # one's compile that poplin copies two of its layers' inputs into their layouts)
    run.notes.clear()
    run.executable.notes.clear()
    assert "notes: none" in format_summary(run)


def test_sigterm_while_writing_output_leaves_nothing(capsys, tmp_path, monkeypatch):
    """SIGTERM arriving while the output files are written (here: while the timeline is drawn)
    stops the run with exit 143 and leaves no partial or temporary folder, as Ctrl-C does."""
    import os
    import signal
    import sim.results.report as report

    def terminated(run):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the SIGTERM handler should have stopped the write")

    monkeypatch.setattr(report, "timeline_figure", terminated)
    before = signal.getsignal(signal.SIGTERM)
    code, _, err = cli(capsys, "run", *SMALL, "--output", tmp_path / "out")
    assert code == 143 and "terminated (SIGTERM)" in err
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the command's only


def test_an_unwritable_output_folder_is_named_not_its_temporary(capsys):
    """/proc takes no new folders, even from root: the error names the folder asked for."""
    from pathlib import Path
    if not Path("/proc/self").exists():
        pytest.skip("needs Linux's /proc")
    code, _, err = cli(capsys, "run", "--model", "mlp", "--output", "/proc/ipusim-out")
    assert code == 1 and "cannot write the output folder '/proc/ipusim-out'" in err and ".tmp" not in err


def test_output_onto_a_file_is_an_error(capsys, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    code, _, err = cli(capsys, "run", "--model", "mlp", "--output", str(a_file))
    assert code == 2 and "not a directory" in err


def test_output_onto_the_current_folder_is_refused(capsys, tmp_path, monkeypatch):
    """A run's outputs replace their folder whole: --output . (or a folder holding the current one)
    would leave the shell in a deleted folder, so it is refused and the folder kept."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    inode = (tmp_path / "here").stat().st_ino
    for target in (".", str(tmp_path)):
        code, _, err = cli(capsys, "run", "--model", "mlp", "--output", target)
        assert code == 2 and "is the current folder (or holds it)" in err
    assert (tmp_path / "here").stat().st_ino == inode


def test_output_under_a_file_is_refused_before_simulating(capsys, tmp_path, monkeypatch):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    monkeypatch.setattr(sim, "simulate", lambda *a, **k: pytest.fail("simulated before checking --output"))
    code, _, err = cli(capsys, "run", "--model", "mlp", "--output", str(a_file / "sub"))
    assert code == 2 and f"{str(a_file)!r} is a file, not a directory" in err


@pytest.mark.parametrize("argv, message", [
    (["--num-layers", "4", "--param", "num_layers=2"],
     "model parameter num_layers is given twice, as --num-layers 4 and --param num_layers=2; give it once"),
    (["--num-layers", "2", "--layers-per-ipu", "1,1", "--param", "layers_per_ipu=[2,0]"],
     "model parameter layers_per_ipu is given twice, as --param layers_per_ipu=[2,0] and --layers-per-ipu 1,1"),
])
def test_a_model_parameter_given_twice_differently_is_a_usage_error(capsys, argv, message):
    code, _, err = cli(capsys, "run", "--model", "bert-base", *argv)
    assert code == 2 and message in err
    code, _, _ = cli(capsys, "run", "--model", "bert-base", "--num-layers", "1", "--param", "num_layers=1", "-q")
    assert code == 0  # the same value twice is no conflict


def test_an_optimizer_given_to_an_inference_run_is_noted():
    run = sim.simulate(models.get("mlp"), "ipu-mk2", optimizer="adam")
    assert "optimizer 'adam': an inference run (training=False) updates no weights; no effect" in run.executable.notes
    assert run.cycle_count == sim.simulate(models.get("mlp"), "ipu-mk2").cycle_count
    assert not any("optimizer" in n for n in sim.simulate(models.get("mlp"), "ipu-mk2").executable.notes)


def test_a_custom_op_asking_for_more_tiles_than_the_ipu_has_is_noted():
    run = sim.simulate(models.get("tut6-matvec", tiles=2000), "ipu-mk2")
    assert any(n.startswith("custom op 'mulCS' asks for tiles=2000, more than the 1472 the IPU computes on")
               and "--param tiles=1472" in n for n in run.executable.notes)
    assert not any("custom op" in n for n in sim.simulate(models.get("tut6-matvec"), "ipu-mk2").executable.notes)


def test_systems_and_models_lists(capsys):
    code, out, _ = cli(capsys, "systems")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "ipu-pod16" in lines and "bow-pod64" in lines
    assert lines["ipu-pod16"].split()[1] == "16" and "1.325 GHz" in lines["ipu-pod16"]
    code, out, _ = cli(capsys, "models")
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
    (["run", "--training", "--combined-accum"], ["--combined-accum", "sgd_momentum"]),
    (["run", "--bogus"], ["--bogus"]),
    (["frobnicate"], ["frobnicate"]),
    ([], ["COMMAND"]),
])
def test_usage_and_simulator_errors_exit_2(capsys, argv, words):
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    assert "error:" in err
    for w in words:
        assert w in err


@pytest.mark.parametrize("argv, hint", [
    (["run", "--model", "mlp", "--system", "ipu-pod16", "--replicas", "3"],
     "(on the command line: --auto-round-num-ipus sets autoRoundNumIPUs)"),
    (["run", "--model", "mlp", "--training", "--gradient-accumulation", "4", "--io-tiles", "64", "--overlap", "device"],
     "(on the command line: --output-mode sets OutputMode)"),
])
def test_errors_in_poptorch_terms_name_the_flag(capsys, argv, hint):
    """The simulator's errors speak PopTorch's API; on the command line they also name the flag
    that sets the option (from the flags' help tags, sim.cli.run.api_flags)."""
    code, out, err = cli(capsys, *argv)
    assert code == 2 and err.rstrip().endswith(hint)


def test_a_mistyped_flag_is_named_with_the_nearest_flag_of_its_subcommand(capsys):
    code, out, err = cli(capsys, "run", "--model", "mlp", "--trainig")
    assert code == 2 and out == ""
    assert err.startswith("usage: ipusim run ")  # the subcommand's usage, not ipusim's
    assert err.rstrip().endswith("ipusim run: error: unrecognized arguments: --trainig (did you mean --training?)")


@pytest.mark.parametrize("command, flag, hint", [
    ("run", "--replication-factor", "(ipusim's is --replicas)"),
    ("run", "--gradient-accumulation-steps", "(ipusim's is --gradient-accumulation)"),
    ("run", "--enable-rts", "(ipusim's is --optimizer-state rts)"),
    ("run", "--ipus-per-replica", "(a replica's IPUs follow from where the model is placed: --layers-per-ipu, or "
                                  "--param 'split_points=[...]' for the CNNs)"),
    ("plan", "--batches-per-step", "(ipusim's is --device-iterations)"),
])
def test_a_flag_of_graphcores_scripts_is_named_with_ipusims_own(capsys, command, flag, hint):
    """Flags of Graphcore's example scripts and optimum's IPUConfig get ipusim's name for the same thing, where
    the subcommand has it (sim.cli.main.FOREIGN_FLAGS)."""
    code, out, err = cli(capsys, command, "--model", "mlp", flag, "2")
    assert code == 2 and out == ""
    assert err.rstrip().endswith(f"unrecognized arguments: {flag} {hint} 2")


def test_a_flag_of_graphcores_scripts_without_ipusims_counterpart_in_the_subcommand_gets_no_hint(capsys):
    code, out, err = cli(capsys, "sweep", "--replication-factor", "--", "--model", "mlp")
    assert code == 2 and err.rstrip().endswith("unrecognized arguments: --replication-factor")


def test_out_of_memory_exits_3_with_the_shortfall(capsys):
    code, out, err = cli(capsys, "run", "--model", "bert-large", "--training",
                             "--num-layers", "24", "--micro-batch", "8")
    assert code == 3 and out == ""
    assert err.startswith("ipusim: error: Out of memory") and "short by" in err


def test_help_exits_0(capsys):
    code, out, _ = cli(capsys, "run", "--help")
    assert code == 0 and "--device-iterations" in out


# --- issue 4: multi-IPU and host-IO flags ----------------------------------------------------
from sim.options import OverlapMode, TensorLocationSettings  # noqa: E402
from sim.results.report import compute_pass, pipeline_phases, timeline_figure  # noqa: E402
from sim.strategy import Liveness, ParallelPhasedExecution, Phase, SerialPhasedExecution, Stage, SyncPattern

PIPE = ["--model", "bert-base", "--num-layers", "4", "--micro-batch", "2", "--layers-per-ipu", "1,1,1,1",
        "--system", "ipu-m2000"]  # 5 forward stages (the tied head is a stage on IPU 0)


def cli_cycles(capsys, *argv) -> dict:
    code, out, err = cli(capsys, "run", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def api_run(graph, system, opts, **kw) -> sim.Run:
    return sim.simulate(graph, system, opts, **kw)


def bert4(**kw):
    return models.get("bert-base", num_layers=4, micro_batch=2, **kw)


@pytest.mark.parametrize("strategy", ["pipelined", "sharded", None])
def test_layers_per_ipu_and_pipelined_or_sharded_strategy(capsys, strategy):
    argv = PIPE + ["--device-iterations", "6"] + (["--strategy", strategy] if strategy else [])
    d = cli_cycles(capsys, *argv)
    opts = sim.Options().deviceIterations(6)
    if strategy == "sharded":  # the zoo's stages: embedding + layer0 on IPU 0, ..., the head on IPU 0
        blocks = [["embedding", "layer0"], ["layer1"], ["layer2"], ["layer3"], ["head"]]
        opts.setExecutionStrategy(ShardedExecution(*[Stage(*b).ipu(i % 4) for i, b in enumerate(blocks)]))
    run = api_run(bert4(layers_per_ipu=[1, 1, 1, 1]), "ipu-m2000", opts)
    assert run.executable.strategy == (strategy or "pipelined")
    assert d["cycle_count"] == run.cycle_count
    assert sorted(d["breakdown"]) == ["0", "1", "2", "3"]
    code, out, _ = cli(capsys, "run", *argv)
    assert f"strategy {strategy or 'pipelined'} (5 stages on 4 IPUs)" in out
    if strategy != "sharded":
        phases = pipeline_phases(run)
        assert "pipeline (first call): " + ", ".join(f"{k} {e - b:,}" for k, (b, e) in phases.items()) in out


def test_pipeline_copies_flag_runs_each_stages_copies_one_after_another(capsys):
    merged = cli_cycles(capsys, *PIPE, "--device-iterations", "6")
    per_stage = cli_cycles(capsys, *PIPE, "--device-iterations", "6", "--pipeline-copies", "per-stage")
    opts = sim.Options().deviceIterations(6).pipelineCopies(sim.PipelineCopies.PerStage)
    assert per_stage["cycle_count"] == api_run(bert4(layers_per_ipu=[1, 1, 1, 1]), "ipu-m2000", opts).cycle_count
    assert per_stage["cycle_count"] > merged["cycle_count"]


def test_graph_functions_flag_prices_tensorflows_function_copies(capsys):
    flagged = cli_cycles(capsys, *PIPE, "--device-iterations", "6", "--graph-functions")
    opts = sim.Options().deviceIterations(6).cachedGraphFunctions(True)
    run = api_run(bert4(layers_per_ipu=[1, 1, 1, 1]), "ipu-m2000", opts)
    assert flagged["cycle_count"] == run.cycle_count
    assert any(note.startswith("cachedGraphFunctions") for note in run.executable.notes)


@pytest.mark.parametrize("strategy", ["serial-phased", "parallel-phased"])
def test_phased_strategy_has_one_phase_per_block(capsys, strategy):
    argv = ["--model", "bert-base", "--num-layers", "4", "--micro-batch", "2", "--system", "ipu-m2000",
            "--synthetic-data", "--strategy", strategy]
    d = cli_cycles(capsys, *argv)
    blocks = ["embedding", "layer0", "layer1", "layer2", "layer3", "head"]
    if strategy == "serial-phased":
        st = SerialPhasedExecution(*[Phase(Stage(b).ipu(0)) for b in blocks])
    else:
        st = ParallelPhasedExecution(*[Phase(Stage(b).ipu(i % 2)) for i, b in enumerate(blocks)])
    run = api_run(bert4(), "ipu-m2000", sim.Options().enableSyntheticData(True).setExecutionStrategy(st))
    assert d["cycle_count"] == run.cycle_count
    assert len(d["breakdown"]) == (1 if strategy == "serial-phased" else 2)
    assert d["breakdown"]["0"]["remote_io"] > 0
    code, out, _ = cli(capsys, "run", *argv)
    assert f"strategy {strategy.replace('-', ' ')} (6 phases on" in out

@pytest.mark.parametrize("strategy, flag, liveness", [
    ("serial-phased", "off-chip-after-fwd", Liveness.OffChipAfterFwd),
    ("serial-phased", "off-chip-after-each-phase", Liveness.OffChipAfterEachPhase),
    ("parallel-phased", "off-chip-after-fwd", Liveness.OffChipAfterFwd)])
def test_liveness_flag_is_the_phased_strategys_liveness(capsys, strategy, flag, liveness):
    blocks = ["embedding", "layer0", "layer1", "layer2", "layer3", "head"]
    d = cli_cycles(capsys, "--model", "bert-base", "--num-layers", "4", "--micro-batch", "2", "--system",
                   "ipu-m2000", "--synthetic-data", "--training", "--strategy", strategy, "--liveness", flag)
    if strategy == "serial-phased":
        st = SerialPhasedExecution(*[Phase(Stage(b).ipu(0)) for b in blocks]).setTensorsLiveness(liveness)
    else:
        st = ParallelPhasedExecution(*[Phase(Stage(b).ipu(i % 2)) for i, b in enumerate(blocks)]
                                     ).sendTensorsOffChipAfterFwd()
    opts = sim.Options().enableSyntheticData(True).setExecutionStrategy(st)
    run = api_run(bert4(), "ipu-m2000", opts, training=True)
    assert d["cycle_count"] == run.cycle_count
    if strategy == "serial-phased":  # the activations' stores and loads add streaming-memory time
        always_live = api_run(bert4(), "ipu-m2000", sim.Options().enableSyntheticData(True).setExecutionStrategy(
            SerialPhasedExecution(*[Phase(Stage(b).ipu(0)) for b in blocks])), training=True)
        assert run.breakdown.loc[0, "remote_io"] > always_live.breakdown.loc[0, "remote_io"]


@pytest.mark.parametrize("argv, message", [
    (["--liveness", "off-chip-after-fwd"], "applies to phased execution"),
    (["--strategy", "parallel-phased", "--liveness", "off-chip-after-each-phase"], "sendTensorsOffChipAfterFwd")])
def test_liveness_flag_errors(capsys, argv, message):
    code, _, err = cli(capsys, "run", "--model", "bert-base", "--num-layers", "4", "--system", "ipu-m2000", *argv)
    assert code == 2 and message in err



@pytest.mark.parametrize("flag, pattern", [("full", SyncPattern.Full), ("single-pipeline", SyncPattern.SinglePipeline),
                                           ("replica-and-ladder", SyncPattern.ReplicaAndLadder)])
def test_sync_pattern_flag(capsys, flag, pattern):
    d = cli_cycles(capsys, *PIPE, "--device-iterations", "6", "--sync-pattern", flag)
    opts = sim.Options().deviceIterations(6).syncPattern(pattern)
    run = api_run(bert4(layers_per_ipu=[1, 1, 1, 1]), "ipu-m2000", opts)
    assert d["cycle_count"] == run.cycle_count
    code, out, _ = cli(capsys, "run", *PIPE, "--device-iterations", "6", "--sync-pattern", flag)
    assert f"syncPattern {pattern.name}," in out
    assert "accepted, no modelled effect" not in out  # the option is modelled


def test_io_tiles_overlap_and_prefetch_flags(capsys):
    argv = ["--model", "mlp", "--device-iterations", "16", "--io-tiles", "32", "--overlap", "device",
            "--prefetch-depth", "3"]
    d = cli_cycles(capsys, *argv)
    g = models.get("mlp")
    for name in g.inputs + g.outputs:
        g.overlap[name] = int(OverlapMode.OverlapDeviceIterationLoop)
    opts = sim.Options().deviceIterations(16).setExecutionStrategy(ShardedExecution())
    opts.TensorLocations.numIOTiles(32)
    opts._Popart.set("defaultPrefetchBufferingDepth", 3)
    run = api_run(g, "ipu-mk2", opts)
    assert d["cycle_count"] == run.cycle_count
    plain = cli_cycles(capsys, "--model", "mlp", "--device-iterations", "16")
    # all streams on the IO tiles: the compute tiles only wait for them, for less than the plain run's
    # copies take (this tiny model is host-bound either way)
    assert 0 < d["breakdown"]["0"]["host_io"] < 0.7 * plain["breakdown"]["0"]["host_io"]
    prefetch = cli_cycles(capsys, "--model", "mlp", "--device-iterations", "16", "--prefetch-depth", "3")
    assert prefetch["cycle_count"] < plain["cycle_count"]
    code, out, _ = cli(capsys, "run", *argv)
    assert "IO tiles 32, prefetch depth 3" in out and "1440 compute tiles" in out


def test_batch_serialize_flag(capsys):
    d = cli_cycles(capsys, "--model", "mlp", "--training", "--batch-serialize", "2")
    opts = sim.Options()
    opts._Popart.set("batchSerializationSettings.factor", 2)
    assert d["cycle_count"] == api_run(models.get("mlp"), "ipu-mk2", opts, training=True).cycle_count
    assert d["cycle_count"] != cli_cycles(capsys, "--model", "mlp", "--training")["cycle_count"]


def test_auto_recomputation_flag(capsys):
    """--auto-recomputation recompute-all on one IPU recomputes between the checkpoints, as the API's option does;
    without it (PopTorch's default, None) the checkpoints recompute nothing."""
    args = ("--model", "bert-base", "--num-layers", "2", "--micro-batch", "2", "--training",
            "--param", "recompute_checkpoint_every_layer=true")
    d = cli_cycles(capsys, *args, "--auto-recomputation", "recompute-all")
    opts = sim.Options()
    opts._Popart.set("autoRecomputation", 4)
    g = models.get("bert-base", num_layers=2, micro_batch=2, recompute_checkpoint_every_layer=True)
    assert d["cycle_count"] == api_run(g, "ipu-mk2", opts, training=True).cycle_count
    assert d["cycle_count"] > cli_cycles(capsys, *args)["cycle_count"]


def test_a_model_that_overlaps_its_own_streams_runs_sharded(capsys):
    """io-bound with overlap=true marks its streams overlapped itself: with --io-tiles and no --overlap
    the command line runs it with ShardedExecution, as PopTorch asks on one IPU, rather than refuse it."""
    code, out, _ = cli(capsys, "run", "--model", "io-bound", "--param", "overlap=true", "--io-tiles", "32",
                       "--device-iterations", "8")
    assert code == 0 and "strategy sharded (1 stages on 1 IPUs)" in out


def test_host_process_and_callback_thread_flags(capsys):
    """--host-processes and --stream-callback-threads run as the API's setters: 8 replicas' inputs
    filled by one thread of one process take longer than by two processes, or by one with 2 threads."""
    base = ["--model", "mlp", "--system", "ipu-pod16", "--replicas", "8", "--device-iterations", "4"]
    one = cli_cycles(capsys, *base)
    two = cli_cycles(capsys, *base, "--host-processes", "2")
    threads = cli_cycles(capsys, *base, "--stream-callback-threads", "2")
    opts = sim.Options().replicationFactor(8).deviceIterations(4).hostProcesses(2)
    assert two["cycle_count"] == api_run(models.get("mlp"), "ipu-pod16", opts).cycle_count
    assert two["cycle_count"] < one["cycle_count"] and threads["cycle_count"] < one["cycle_count"]
    code, out, _ = cli(capsys, "run", *base, "--host-processes", "2", "--stream-callback-threads", "2")
    assert "no modelled effect" not in out
    code, _, err = cli(capsys, "run", *base, "--host-processes", "0")
    assert code == 2 and "--host-processes" in err


def test_wide_conv_unit_loads_flag_sets_poplins_option_maps(capsys):
    """--wide-conv-unit-loads runs as the API with both option maps set, and the AMP's weight loads
    take half the cycles, so a matmul model runs faster."""
    wide = cli_cycles(capsys, "--model", "mlp", "--wide-conv-unit-loads")
    plain = cli_cycles(capsys, "--model", "mlp")
    opts = sim.Options()
    for key in ("matmulOptions", "convolutionOptions"):
        opts._Popart.set(key, {"use128BitConvUnitLoad": "true"})
    assert wide["cycle_count"] == api_run(models.get("mlp"), "ipu-mk2", opts).cycle_count < plain["cycle_count"]


def test_replicas_flag(capsys):
    d = cli_cycles(capsys, "--model", "mlp", "--system", "ipu-m2000", "--replicas", "4", "--training",
                   "--gradient-accumulation", "2")
    opts = sim.Options().replicationFactor(4)
    opts.Training.gradientAccumulation(2)
    run = api_run(models.get("mlp"), "ipu-m2000", opts, training=True)
    assert d["cycle_count"] == run.cycle_count and d["samples"] == run.samples
    assert d["breakdown"]["0"]["collective"] > 0  # gradients all-reduced over the replicas


@pytest.mark.parametrize("state", ["off-chip", "rts"])
def test_optimizer_state_flag(capsys, state):
    argv = ["--model", "mlp", "--system", "ipu-m2000", "--training", "--optimizer", "adam",
            "--gradient-accumulation", "2", "--replicas", "2", "--optimizer-state", state]
    d = cli_cycles(capsys, *argv)
    opts = sim.Options().replicationFactor(2)
    opts.Training.gradientAccumulation(2)
    where = TensorLocationSettings().useOnChipStorage(state != "off-chip")
    opts.TensorLocations.setOptimizerLocation(where.useReplicatedTensorSharding(state == "rts"))
    run = api_run(models.get("mlp"), "ipu-m2000", opts, training=True, optimizer="adam")
    assert d["cycle_count"] == run.cycle_count
    base = cli_cycles(capsys, *argv[:-2])
    assert d["memory"]["0"]["by_role"].get("state", 0) < base["memory"]["0"]["by_role"]["state"]
    code, out, _ = cli(capsys, "run", *argv)
    assert ("optimizer state off chip" if state == "off-chip" else "optimizer state on chip, sharded") in out


def test_bert_large_optimizer_state_on_chip_is_out_of_memory_off_chip_fits(capsys):
    argv = ["--model", "bert-large", "--micro-batch", "2", "--layers-per-ipu", "3,7,7,7", "--system",
            "ipu-m2000", "--training", "--optimizer", "lamb", "--gradient-accumulation", "10",
            "--synthetic-data"]
    code, out, err = cli(capsys, "run", *argv, "--optimizer-state", "on-chip")
    assert code == 3 and "IPU 0" in err and re.search(r"pipeline stage \d", err) and "short by" in err
    d = cli_cycles(capsys, *argv, "--optimizer-state", "off-chip")
    assert [d["memory"][str(i)]["peak_tile_bytes"] <= d["memory"][str(i)]["tile_capacity_bytes"]
            for i in range(4)] == [True] * 4


@pytest.mark.parametrize("argv, words", [
    (["--layers-per-ipu", "3,x"], ["--layers-per-ipu", "3,7,7,7"]),
    (["--model", "mlp", "--layers-per-ipu", "1,1"], ["layers_per_ipu"]),
    (["--strategy", "diagonal"], ["--strategy", "invalid choice"]),
    (["--model", "mlp", "--strategy", "parallel-phased"], ["blocks", "mlp"]),
    (["--model", "bert-base", "--strategy", "sharded"], ["several IPUs", "--layers-per-ipu"]),
    (["--sync-pattern", "ladder"], ["--sync-pattern"]),
    (["--io-tiles", "31"], ["numIOTiles", "even", "32", "192"]),
    (["--model", "mlp", "--overlap", "device"], ["--overlap device needs IO tiles", "--io-tiles"]),
    (["--prefetch-depth", "0"], ["--prefetch-depth", ">= 1"]),
    (["--replicas", "0"], ["--replicas"]),
    (["--model", "mlp", "--replicas", "3", "--system", "ipu-m2000"], ["not a power of two", "autoRoundNumIPUs"]),
    (["--model", "mlp", "--replicas", "8", "--system", "ipu-m2000"], ["needs 8 IPUs", "has 4"]),
    (["--model", "mlp", "--optimizer-state", "off-chip"], ["--optimizer-state", "--training"]),
    (["--model", "mlp", "--training", "--optimizer-state", "rts"], ["--replicas 2"]),
    (PIPE + ["--device-iterations", "2"], ["deviceIterations (2)", "raise deviceIterations"]),
    (PIPE + ["--training", "--gradient-accumulation", "4"], ["gradientAccumulation (4)", "9 = 2 x 5"]),
    (PIPE + ["--device-iterations", "8", "--io-tiles", "32", "--overlap", "device"],
     ["Overlapped IO is not supported with poptorch.PipelinedExecution"]),
])
def test_multi_ipu_flag_errors_exit_2(capsys, argv, words):
    code, out, err = cli(capsys, "run", *argv)
    assert code == 2 and out == "" and "error:" in err
    for w in words:
        assert w in err


def test_timeline_shows_fill_main_flush_and_passes(tmp_path):
    opts = sim.Options().enableSyntheticData(True)
    opts.Training.gradientAccumulation(12)
    run = api_run(bert4(layers_per_ipu=[1, 1, 1, 1]), "ipu-m2000", opts, training=True)
    phases = pipeline_phases(run)
    P, G = 9, 12
    syncs = run.trace[(run.trace["name"] == "pipeline sync") & (run.trace["ipu"] == 0)]["end"].to_numpy()
    assert phases["fill"][1] == syncs[P - 2] and phases["main"][1] == syncs[G - 1]
    assert phases["flush"][1] == syncs[G + P - 2]
    assert phases["flush"][1] <= run.trace.loc[run.trace["name"] == "weight update", "start"].min()
    fig = timeline_figure(run)
    try:
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.texts] == ["fill", "main", "flush"]
        legend = {t.get_text() for t in ax.get_legend().get_texts()}
        assert {"forward", "backward", "recompute", "stash", "restore", "weight update"} <= legend
        assert "compute" not in legend
        assert [t.get_text() for t in ax.get_yticklabels()] == [f"IPU {i}" for i in range(4)]
        assert "fill | main | flush of the first weight-update step" in ax.get_title()
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    assert [compute_pass(n) for n in ("stage 3 forward", "stage 6 recompute", "stage 5 backward", "stage 1 stash",
                                      "stage 5 restore", "weight update", "IO tiles -> compute tiles: x", "main")] == [
        "forward", "recompute", "backward", "stash", "restore", "weight update", "io-tile copy", "compute"]


def test_timeline_draws_io_tile_and_host_lanes(capsys, tmp_path):
    code, out, _ = cli(capsys, "run", "--model", "mlp", "--device-iterations", "8", "--io-tiles", "32",
                           "--overlap", "device", "--prefetch-depth", "2", "--output", str(tmp_path))
    assert code == 0 and (tmp_path / "timeline.png").read_bytes()[:8] == PNG_SIGNATURE
    g = models.get("mlp")
    for name in g.inputs + g.outputs:
        g.overlap[name] = int(OverlapMode.OverlapDeviceIterationLoop)
    opts = sim.Options().deviceIterations(8).setExecutionStrategy(ShardedExecution())
    opts.TensorLocations.numIOTiles(32)
    opts._Popart.set("defaultPrefetchBufferingDepth", 2)
    run = api_run(g, "ipu-mk2", opts)
    assert pipeline_phases(run) is None
    fig = timeline_figure(run)
    try:
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["IPU 0", "IPU 0 IO tiles", "IPU 0 host side"]
        assert not ax.texts
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_auto_round_num_ipus_flag(capsys):
    """Three IPUs is an error naming autoRoundNumIPUs; with the flag the run reserves four."""
    argv = ["--model", "bert-base", "--num-layers", "3", "--layers-per-ipu", "1,1,1", "--micro-batch", "1",
            "--system", "ipu-m2000", "--device-iterations", "4"]
    code, _, err = cli(capsys, "run", *argv)
    assert code == 2 and "autoRoundNumIPUs" in err
    assert cli_cycles(capsys, *argv, "--auto-round-num-ipus")["cycle_count"] > 0


def test_run_flags_for_graphcores_bert_configuration(capsys):
    """Per-IPU proportions, half partials, off-chip sharded optimizer state, the weight update's
    schedule, just-in-time call copies and the TiedGather patterns reach the options: the same run as
    sim.validation's B10 row, so the same samples per second; PopART's default schedule (serial) is slower
    than an overlapped one."""
    from sim.validation import PUBLISHED_BY_ID
    code, out, _ = cli(capsys, "run", "--model", "bert-large", "--system", "bow-pod16", "--layers-per-ipu",
                           "3,7,7,7", "--micro-batch", "8", "--training", "--optimizer", "lamb",
                           "--gradient-accumulation", "2048", "--replicas", "4", "--optimizer-state", "off-chip-rts",
                           "--partials", "half", "--available-memory-proportion", "0.15,0.25,0.25,0.25",
                           "--param", "vocab=30400", "--param", "mask_tokens=20", "--param", "attention_dropout=0",
                           "--param", "embedding_serialization=5", "--param", "split_qkv=true",
                           "--weight-update-schedule", "overlap-memory", "--weight-update-exclude", "0",
                           "--just-in-time-copies", "--tied-gather", "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["samples_per_second"] == pytest.approx(PUBLISHED_BY_ID["B10"].simulated(), rel=1e-9)
    serial = cli_cycles(capsys, "--model", "bert-base", "--num-layers", "4", "--layers-per-ipu", "1,1,1,1",
                        "--micro-batch", "1", "--system", "ipu-pod16", "--training", "--gradient-accumulation", "16",
                        "--replicas", "2", "--synthetic-data")
    overlap = cli_cycles(capsys, "--model", "bert-base", "--num-layers", "4", "--layers-per-ipu", "1,1,1,1",
                         "--micro-batch", "1", "--system", "ipu-pod16", "--training", "--gradient-accumulation", "16",
                         "--replicas", "2", "--synthetic-data", "--weight-update-schedule", "overlap-cycle")
    assert serial["cycle_count"] > overlap["cycle_count"]


def test_run_flags_for_poptransformers_gpt2_decode(capsys):
    """The flags of PopTransformer's GPT2-XL decode benchmark (sharded over 8 IPUs, 264 loop iterations on the
    device, PopART's float partials, the custom softmax non-stable, no outlining across blocks) give
    sim.validation's I16 row at batch 8."""
    from sim.validation import PUBLISHED_BY_ID
    code, out, _ = cli(capsys, "run", "--model", "gpt2-xl", "--system", "ipu-pod16", "--micro-batch", "8",
                       "--param", "decode_cache=264", "--param", "with_loss=false", "--param", "dropout=0",
                       "--layers-per-ipu", "0,6,7,7,7,7,7,7", "--strategy", "sharded", "--device-iterations", "264",
                       "--synthetic-data", "--partials", "float", "--non-stable-softmax", "--no-outlining", "--json")
    assert code == 0
    assert json.loads(out)["samples_per_second"] == pytest.approx(PUBLISHED_BY_ID["I16 bs8"].simulated(), rel=1e-9)


def test_proportions_must_match_the_ipus_of_a_replica(capsys):
    code, _, err = cli(capsys, "run", "--model", "bert-base", "--num-layers", "4", "--layers-per-ipu", "0,2,1,1",
                           "--system", "ipu-pod16", "--available-memory-proportion", "0.2,0.3")
    assert code == 2 and ("has 2 values; give one value (for every IPU) or 4, one for each IPU of a replica "
                          "(every replica takes the same)") in err


def test_unmeasured_latencies_print_as_not_available(capsys):
    """A model that streams outputs but no inputs (amp-tile) has only getIpuHostLatency() measured:
    the text report prints n/a for the other three, as --json gives null, and the note says why."""
    code, out, err = cli(capsys, "run", "--model", "amp-tile")
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[out.splitlines().index(
        next(x for x in out.splitlines() if x.startswith("latency (ms)"))) + 1:][:4]}
    assert rows["round"] == ["trip", "n/a", "n/a", "n/a"] and rows["host"] == ["->", "IPU", "n/a", "n/a", "n/a"]
    assert rows["compute"] == ["n/a", "n/a", "n/a"] and "n/a" not in rows["IPU"]
    assert ("latency, host_ipu_latency, compute_latency not measured: the model streams no inputs to the IPU"
            in out)


@pytest.mark.parametrize("argv, note", [
    (["--model", "mlp", "--weight-update-schedule", "overlap-cycle"],
     "accumulateOuterFragmentSettings: no weight update in inference; no effect"),
    (["--model", "mlp", "--tied-gather"], "TiedGather patterns: they rewrite a training graph's tied embedding "
                                          "gradient; no effect in inference"),
    (["--model", "mlp", "--training", "--tied-gather"], "TiedGather patterns: modelled with gradient accumulation"),
    (["--model", "bert-base", "--num-layers", "2", "--hidden", "64", "--heads", "4", "--layers-per-ipu", "1,1",
      "--system", "ipu-m2000", "--training", "--gradient-accumulation", "8", "--weight-update-exclude", "0,5"],
     "accumulateOuterFragmentSettings.excludedVirtualGraphs 5: not IPUs of a replica of 2 (0-1); ignored"),
    (["--model", "bert-base", "--num-layers", "2", "--hidden", "64", "--heads", "4", "--layers-per-ipu", "1,1",
      "--system", "ipu-m2000", "--training", "--gradient-accumulation", "8", "--weight-update-schedule",
      "overlap-cycle"], "with one replica and the optimizer state on chip no IPU's optimizer step syncs the replica"),
])
def test_a_weight_update_setting_with_nothing_to_act_on_says_so(capsys, argv, note):
    code, out, _ = cli(capsys, "run", *argv)
    assert code == 0 and note in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet50", "--micro-batch", "1", "--strategy", "serial-phased", "--param",
      'split_points=["layer2/0"]'], "places the model's blocks as phases itself"),
])
def test_a_phased_strategy_with_the_models_own_split_is_a_usage_error(capsys, argv, message):
    code, _, err = cli(capsys, "run", *argv)
    assert code == 2 and message in err


def test_a_commands_flag_before_its_name_says_where_it_goes(capsys):
    code, _, err = cli(capsys, "-q", "run", "--model", "mlp")
    assert code == 2 and "-q (a flag of `ipusim run`: put it after the command's name)" in err


def test_bench_refuses_an_unknown_system_before_benchmarking(capsys):
    import time
    t0 = time.perf_counter()
    code, _, err = cli(capsys, "bench", "--system", "nosuch", "--repeats", "1")
    assert code == 2 and "unknown system 'nosuch'" in err and time.perf_counter() - t0 < 5


def test_the_summary_names_the_partials_type_of_matmuls_and_convolutions(capsys):
    """The run's setup line says which partials its matmuls and convolutions accumulate in (PopTorch's float by
    default, --partials half for both, each its own where the option maps differ)."""
    def setup_line(opts: sim.Options) -> str:
        summary = format_summary(api_run(models.get("mlp"), "ipu-mk2", opts))
        return next(line for line in summary.splitlines() if line.startswith("  strategy "))
    assert setup_line(sim.Options()).endswith(", prefetch depth 1, partials float")
    half = sim.Options()
    half.Precision.setPartialsType("half")
    assert setup_line(half).endswith(", partials half")
    mixed = sim.Options()
    mixed._Popart.set("partialsTypeMatMuls", "half")
    assert setup_line(mixed).endswith(", partials half (matmuls), float (convolutions)")
    code, out, _ = cli(capsys, "run", "--model", "mlp", "--partials", "half")
    assert code == 0 and "prefetch depth 1, partials half\n" in out
