"""Bad input gets a clear error: never a hang, never a traceback, never silent acceptance.

Three kinds of case, each of which failed before its fix:

* hangs: values that made a run take minutes (an absurd tile count, 100,000 layers, ten million
  device iterations) end in well under a second with an error naming the limit and why;
* tracebacks: values that raised OverflowError, UnicodeDecodeError or ValueError now give a
  one-line ``ipusim: error:`` naming the value and the fix, with exit status 2;
* silently accepted: values that used to run as if they meant something else are refused, or
  (synthetic-data latencies) reported as what they are.

Then two fuzz tests (hypothesis, fixed seed) over every subcommand's flags and over the fields
of a system config, each case in bounded time, asserting an exit code and no exception.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import models
import sim
from sim.cli.main import main
from sim.hardware.configs import CONFIG_DIR
from sim.options import TensorLocationSettings

SECONDS_PER_CASE = 20  # a case still running after this is a hang


class Hang(BaseException):
    """Raised by the alarm in :func:`time_limit` (a BaseException, so no handler swallows it)."""


@contextlib.contextmanager
def time_limit(seconds: float = SECONDS_PER_CASE):
    """Stop the code inside with :class:`Hang` after ``seconds`` (SIGALRM, main thread)."""
    def on_alarm(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cli(*argv: str, seconds: float = SECONDS_PER_CASE) -> tuple[int, str, str]:
    """``ipusim argv`` in-process: (exit code, stdout, stderr), within ``seconds``."""
    out, err = io.StringIO(), io.StringIO()
    with time_limit(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def one_line_error(err: str) -> str:
    """The message of an ``ipusim: error:`` that is one line and no traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ipusim: error: "), err
    return lines[0]


def write(tmp_path: Path, text: str | bytes, name: str = "system.toml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# --- hangs -----------------------------------------------------------------------------------

def test_absurd_tile_count_is_refused_naming_file_field_limit_and_why(tmp_path):
    path = write(tmp_path, 'extends = "ipu-mk2"\n[ipu]\ntiles = 2000000000\n')
    t0 = time.perf_counter()
    code, _, err = cli("run", "--system", str(path))
    assert time.perf_counter() - t0 < 5
    message = one_line_error(err)
    assert code == 2
    for words in (str(path), "ipu.tiles", "2,000,000,000", "1 to 65,536", "1472"):
        assert words in message


@pytest.mark.parametrize("argv", [
    ["run", "--num-layers", "100000"],
    ["run", "--model", "mlp", "--num-layers", "100000"],
    ["run", "--model", "io-bound", "--param", "layers=100000"],
    ["run", "--model", "roformer-v2-small", "--num-layers", "100000"],
    ["run", "--model", "clip-vit-b-32", "--param", "vision_layers=100000"],
    ["run", "--model", "clip-text-vit-l-14", "--param", "text_layers=100000"],
])
def test_100000_layers_are_refused_with_the_limit_and_why(argv):
    """Each layer adds tens of ops, each priced and placed: 100,000 layers took minutes."""
    code, _, err = cli(*argv, seconds=5)
    message = one_line_error(err)
    assert code == 2 and "100000" in message and "at most 1024 layers" in message and "GPT-3" in message


@pytest.mark.parametrize("argv, words", [
    (["--model", "bert-base", "--num-layers", "2", "--param", "fp32_ops=1"], "invalid parameter fp32_ops=1"),
    (["--model", "resnet50", "--param", "recompute_checkpoints=[0]"], "invalid parameter recompute_checkpoints=[0]"),
])
def test_a_model_parameter_of_the_wrong_kind_is_a_parameter_error(argv, words):
    """A number where a list of names goes is an error naming the parameter, not a traceback."""
    code, _, err = cli("run", *argv, seconds=10)
    assert code == 2 and words in one_line_error(err)


def test_1024_layers_still_run():
    code, _, err = cli("run", "--model", "mlp", "--param", "hidden=8", "--num-layers", "1024", seconds=10)
    assert code == 0, err


@pytest.mark.parametrize("argv, words", [
    (["run", "--model", "mlp", "--device-iterations", "10000000"], "deviceIterations = 10,000,000"),
    (["run", "--model", "mlp", "--training", "--gradient-accumulation", "10000000"],
     "Training.gradientAccumulation = 10,000,000"),
    (["run", "--model", "mlp", "--system", "ipu-pod16", "--replicas", "16", "--device-iterations", "100000"],
     "= 1,600,000 micro-batches per call"),
])
def test_ten_million_micro_batches_per_call_are_refused(argv, words):
    """Perf counters keep a stamp per micro-batch: 10^7 of them took 80 s and 10 GB."""
    code, _, err = cli(*argv, seconds=5)
    message = one_line_error(err)
    assert code == 2 and words in message and "1,000,000" in message and "perf counters" in message


def test_a_million_device_iterations_run_in_seconds():
    code, out, err = cli("run", "--model", "mlp", "--device-iterations", "1000000", "--json", seconds=15)
    assert code == 0, err
    assert json.loads(out)["run"]["device_iterations"] == 10**6


# --- tracebacks ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["run", "--model", "mlp", "--device-iterations", str(10**30)], "deviceIterations = 1.00e+30"),
    (["collective", "--system", "ipu-pod16", "--op", "all-reduce", "--bytes", str(10**30), "--replicas", "4"],
     "--bytes 1.00e+30"),
    (["run", "--model", "mlp", "--micro-batch", str(10**21)], "7.84e+23 elements"),
])
def test_huge_numbers_are_a_one_line_error_naming_the_value(argv, words):
    code, _, err = cli(*argv, seconds=5)
    message = one_line_error(err)
    assert code == 2 and words in message


@pytest.mark.parametrize("model, param, json_list", [
    ("unet", "split_points=encoder_block_2,decoder_block_0,decoder_block_2",
     'split_points=["encoder_block_2", "decoder_block_0", "decoder_block_2"]'),
    ("vit-base-16", "mid_checkpoints=1,4", "mid_checkpoints=[1, 4]"),
    ("vit-base-16", "mid_checkpoints=4", "mid_checkpoints=[4]"),
    ("efficientnet-b0", "split_points=block4a", 'split_points=["block4a"]'),
])
def test_a_comma_separated_list_parameter_is_an_error_that_shows_the_json_list(model, param, json_list):
    """--param takes a list as JSON; a comma-separated value, or one bare item, says how to write it, and that
    works."""
    code, _, err = cli("run", "--model", model, "--param", param, seconds=30)
    message = one_line_error(err)
    assert code == 2 and f"give the list as JSON: --param '{json_list}'" in message
    code, out, err = cli("run", "-q", "--model", model, "--param", json_list, "--system", "ipu-m2000", "--device-iterations", "4", "--json",
                         seconds=120)
    assert code == 0 and json.loads(out)["samples_per_second"] > 0, err


def test_huge_collective_says_how_many_bytes_fit():
    code, _, err = cli("collective", "--system", "ipu-pod16", "--op", "all-reduce", "--bytes", str(10**30),
                       "--replicas", "4")
    assert "give at most 112,940,572,672 bytes" in one_line_error(err)


@pytest.mark.parametrize("content, words", [
    (b'extends = "ipu-mk2"\n[ipu]\ntiles = 1\xff\n', "not UTF-8 text (byte 0xff at offset 35)"),
    (b"\xff\xfe\x00\x01", "not UTF-8 text (byte 0xff at offset 0)"),
    (b'extends = "ipu-mk2"\n[ipu\n', "not valid TOML"),
    (b'extends = "ipu-mk2"\n[ipu]\ntiles = 1472\ntiles = 1472\n', "not valid TOML"),
    (b'extends = "ipu-mk2"\n[ipu]\ntiles = 1' + b"0" * 400 + b"\n", "ipu.tiles = 1.00e+400 is out of range"),
    (b'extends = "ipu-mk2"\n[ipu]\ngeneration = ["mk2"]\n', "ipu.generation = ['mk2']; expected one of"),
])
def test_a_config_that_is_not_utf8_or_not_toml_is_a_config_error(tmp_path, content, words):
    path = write(tmp_path, content)
    code, _, err = cli("run", "--model", "mlp", "--system", str(path))
    message = one_line_error(err)
    assert code == 2 and str(path) in message and words in message


def test_a_config_that_is_not_a_file_is_a_config_error(tmp_path):
    """A directory was an OSError (exit 1, "a file could not be written"); /dev/zero was read forever."""
    path = tmp_path / "dir.toml"
    path.mkdir()
    for system in (str(path), "/dev/zero"):
        code, _, err = cli("run", "--model", "mlp", "--system", system, seconds=5)
        assert code == 2 and f"system config {system} is not a regular file" in one_line_error(err)


def test_more_io_tiles_than_tiles_is_an_options_error(tmp_path):
    path = write(tmp_path, 'extends = "ipu-mk2"\n[ipu]\ntiles = 40\n')
    code, _, err = cli("run", "--model", "mlp", "--system", str(path), "--io-tiles", "64")
    assert code == 2 and "numIOTiles(64) leaves no compute tiles" in one_line_error(err)


def test_a_run_past_2_to_the_62_cycles_is_an_error_not_an_overflow():
    """Each op is under the per-op limit, but a million device iterations of it overflow int64."""
    code, _, err = cli("run", "--model", "tut6-matvec", "--param", "cycles_per_mac=140000000000",
                       "--device-iterations", "1000000")
    message = one_line_error(err)
    assert code == 2 and "would pass 2^62 cycles" in message and "'device iterations'" in message


def test_an_op_costing_more_than_2_to_the_50_cycles_is_refused():
    code, _, err = cli("run", "--model", "tut6-matvec", "--param", "vertex_base_cycles=" + "1" + "0" * 21)
    assert code == 2 and "op 'mulCS' (custom) costs 4.80e+22 cycles" in one_line_error(err)


def _matmul_graph(a_dtype: str, b_dtype: str):
    b = sim.GraphBuilder("mm", "float16")
    b.output(b.matmul(b.input("x", (64, 128), dtype=a_dtype), b.input("w", (128, 32), dtype=b_dtype), name="proj"))
    return b.graph


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "bool"])
def test_an_integer_matmul_is_refused_not_priced_as_a_float_one(dtype):
    # poplin's vertex types take half, float or quarter operands only (ConvVertexType.cpp): an int8 matmul
    # was once priced as a fp32 AMP matmul, cheaper than the same fp16 one
    with pytest.raises(sim.UnsupportedOpError, match=re.escape(
            f"op 'proj' (kind 'matmul'): matmul operands are {dtype} and {dtype}; poplin plans matmuls "
            "and convolutions on float16, float32, float8 only: cast the operands first")):
        sim.compile(_matmul_graph(dtype, dtype), "ipu-mk2")


def test_a_matmul_of_two_float_types_is_refused_as_poplin_refuses_it():
    with pytest.raises(sim.UnsupportedOpError, match="operands are float16 and float32; poplin needs both of one type"):
        sim.compile(_matmul_graph("float16", "float32"), "ipu-mk2")
    assert sim.simulate(_matmul_graph("float32", "float32"), "ipu-mk2").cycle_count > 0


def test_a_model_without_host_inputs_runs_and_says_what_is_not_measured():
    code, out, err = cli("run", "--model", "amp-tile", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["latency"] is None and d["ipu_host_latency"]["avg"] > 0
    assert any("not measured" in n and "no inputs" in n for n in d["notes"])


# --- silently accepted -----------------------------------------------------------------------

@pytest.mark.parametrize("args, error, message", [
    ((None, "ipu-mk2"), sim.GraphError, "graph=NoneType: expected a sim.Graph"),
    (("GRAPH", None), sim.ConfigError, "system=None: expected a system name"),
    (("GRAPH", ""), sim.ConfigError, "system='': expected a system name"),
    (("GRAPH", "ipu-mk2", {"replicationFactor": 2}), sim.OptionsError, "options=dict: expected a sim.Options"),
])
def test_arguments_of_the_wrong_type_are_named_errors(args, error, message):
    args = tuple(models.get("mlp") if a == "GRAPH" else a for a in args)
    for call in (sim.simulate, sim.compile):
        with pytest.raises(error, match=re.escape(message)):
            call(*args)


@pytest.mark.parametrize("training", ["no", "yes", 1, 0, None])
def test_training_must_be_a_bool(training):
    graph = models.get("mlp")
    for call in (sim.simulate, sim.compile):
        with pytest.raises(sim.OptionsError, match=re.escape(f"training={training!r}: expected True or False")):
            call(graph, "ipu-mk2", None, training)


def test_an_empty_onnx_model_has_no_ops():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import sim.onnx as sim_onnx
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    for nodes, outputs in (([], [x]), ([helper.make_node("Identity", ["x"], ["y"])], [y])):
        model = helper.make_model(helper.make_graph(nodes, "empty", [x], outputs))
        with pytest.raises(sim.GraphError, match="the model has no ops"):
            sim_onnx.load(model)


def test_an_empty_graph_has_no_ops():
    with pytest.raises(sim.GraphError, match="the model has no ops"):
        sim.compile(sim.Graph("empty"), "ipu-mk2")


@pytest.mark.parametrize("clock", ["1.325", "999999.0", "1.1e10"])
def test_a_clock_outside_1_mhz_to_10_ghz_names_hz_and_the_value(tmp_path, clock):
    path = write(tmp_path, f'extends = "ipu-mk2"\n[ipu]\nclock_hz = {clock}\n')
    with pytest.raises(sim.ConfigError) as e:
        sim.load_system(path)
    message = str(e.value)
    assert str(path) in message and "ipu.clock_hz" in message and " Hz " in message
    assert "1,000,000 to 10,000,000,000 Hz" in message and "1.325e9" in message


@pytest.mark.parametrize("replicas, per, fix", [("3", "1", "use --replicas 2 or 4"),
                                                 ("3", "2", "use --replicas 2 or 4"),
                                                 ("2", "3", "power-of-two --ipus-per-replica")])
def test_collective_replicas_must_make_a_power_of_two_ipus(replicas, per, fix):
    code, _, err = cli("collective", "--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "1MiB",
                       "--replicas", replicas, "--ipus-per-replica", per)
    message = one_line_error(err)
    assert code == 2 and "not a power of two" in message and "V-IPU partition" in message and fix in message


def test_memory_proportion_for_an_ipu_the_model_does_not_use_is_noted():
    """PopTorch looks up the proportion of each op's IPU and ignores the other keys (Graphcore's
    FastPitch names one per IPU of its partition): the run says they have no effect."""
    opts = sim.Options().setAvailableMemoryProportion({"IPU0": 0.5, "IPU99": 0.3})
    exe = sim.compile(models.get("mlp"), "ipu-mk2", opts)
    assert any("names IPU99, which the model does not use (it runs on IPU0 per replica): no effect" in n
               for n in exe.notes)
    placed = models.get("bert-base", num_layers=4, layers_per_ipu=[0, 2, 2], micro_batch=1)
    opts = sim.Options().setAvailableMemoryProportion({"IPU3": 0.3}).autoRoundNumIPUs(True).deviceIterations(4)
    exe = sim.compile(placed, "ipu-m2000", opts)
    assert any("IPU3, which the model does not use (it runs on IPU0 to IPU2 per replica)" in n for n in exe.notes)


def test_the_cli_memory_proportion_covers_the_model_ipus_only(capsys):
    code, out, err = cli("run", "--model", "mlp", "--system", "ipu-pod16", "--available-memory-proportion", "0.3")
    assert code == 0, err
    assert "availableMemoryProportion IPU0=0.3" in out


def test_the_summary_lists_the_memory_proportion_per_ipu_of_a_replica(capsys):
    """Two replicas of a 2-IPU pipeline simulate 4 IPUs, but the proportions are set per IPU of a
    replica: the summary lists IPU0 and IPU1 only."""
    code, out, err = cli("run", "--model", "bert-base", "--num-layers", "2", "--layers-per-ipu", "1,1",
                         "--system", "ipu-pod16", "--replicas", "2", "--training", "--gradient-accumulation", "8",
                         "--available-memory-proportion", "0.4,0.3")
    assert code == 0, err
    assert out.splitlines()[2].endswith("availableMemoryProportion IPU0=0.4, IPU1=0.3")


@pytest.mark.parametrize("depth", [0, -1, 2.5, "3", True])
def test_prefetch_depth_below_one_is_refused_as_popart_does(depth):
    options = [sim.Options()]
    try:
        import sim.poptorch as poptorch
        options.append(poptorch.Options())
    except ImportError:
        pass
    for opts in options:
        with pytest.raises(sim.OptionsError, match=r"minimum buffering depth is 1"):
            opts._Popart.set("defaultPrefetchBufferingDepth", depth)
    assert sim.Options()._Popart.set("defaultPrefetchBufferingDepth", 3).prefetch_depth() == 3


def test_buffering_depth_under_either_popart_name():
    """SDK 3's defaultBufferingDepth (Graphcore's Swin sets it) is the depth too; the deprecated
    defaultPrefetchBufferingDepth wins when both are set, as SessionOptions::getBufferingDepth
    copies it over the other."""
    new = sim.Options()._Popart.set("defaultBufferingDepth", 3)
    assert new.prefetch_depth() == 3
    assert "_Popart.defaultBufferingDepth" not in new.unmodelled()
    both = sim.Options()._Popart.set("defaultBufferingDepth", 3)._Popart.set("defaultPrefetchBufferingDepth", 2)
    assert both.prefetch_depth() == 2
    assert sim.Options().prefetch_depth() == 1


def test_off_chip_tensors_need_streaming_memory():
    """A C2 card has none: off-chip optimizer state used to run at the placeholder bandwidth."""
    opts = sim.Options()
    opts.TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False))
    with pytest.raises(sim.OptionsError, match="'ipu-mk1-c2' has no streaming memory"):
        sim.compile(models.get("mlp"), "ipu-mk1-c2", opts, training=True, optimizer="adam")


def test_synthetic_data_latencies_are_zero_as_in_poptorch_but_never_shown_as_measured():
    opts = sim.Options().deviceIterations(4).enableSyntheticData(True)
    run = sim.simulate(models.get("mlp"), "ipu-mk2", opts)
    # PopTorch's contract: no host timestamps, so empty counters and (0, 0, 0)
    for name in ("latency", "host_ipu_latency", "compute_latency", "ipu_host_latency"):
        assert getattr(run, name) == (0.0, 0.0, 0.0) and not run.latency_measured(name)
    summary = run.summary()
    assert all(summary[k] is None for k in ("latency", "host_ipu_latency", "compute_latency", "ipu_host_latency"))
    per_call = run.seconds * 1e3
    note = next(n for n in summary["notes"] if n.startswith("latencies not measured"))
    assert "synthetic data" in note and f"simulated compute time is {per_call:.4f} ms per call" in note
    assert f"({per_call / 4:.4f} ms per device iteration)" in note
    code, out, _ = cli("run", "--model", "mlp", "--synthetic-data")
    assert code == 0 and "latency: n/a" in out and "latencies not measured" in out
    assert not re.search(r"round trip\s+0\.0000", out)
    measured = sim.simulate(models.get("mlp"), "ipu-mk2")
    assert measured.latency_measured() and measured.summary()["latency"]["avg"] > 0


# --- fuzz ------------------------------------------------------------------------------------

NASTY = ["0", "-1", "1", "2", "3", "4", "1.5", "-0.5", "nan", "inf", "-inf", "1e308", "1e-308", "2147483648",
         "9223372036854775808", "1" + "0" * 30, "0x10", "", " ", "abc", "1,2", "[1, 2]", "{}", "null", "true",
         "é", "everyn:0", "64MiB", "\x00"]
SMALL = st.integers(1, 8).map(str)
NUMBER = st.one_of(SMALL, SMALL, st.sampled_from(NASTY), st.integers(-2, 4096).map(str))  # mostly valid: get deep
SYSTEMS = st.one_of(
    st.sampled_from(["ipu-mk2", "ipu-m2000", "ipu-pod16", "bow-ipu", "bow-2000", "ipu-mk1-c2", "ipu-pod256"]),
    st.sampled_from(["no-such", "", "x.toml", "/", "/dev/zero", str(CONFIG_DIR), "a\x00b",
                     str(CONFIG_DIR / "_vector-ops.toml")]))
MODEL_PARAMS = sorted({k for name in models.names() for k in models.describe(name)} | {"bogus"})


def flag(name: str, values=None):
    """``[--name]`` or ``[--name, value]`` with a value from ``values``."""
    return st.just([name]) if values is None else values.map(lambda v: [name, v])


def choice(*good: str):
    return st.sampled_from(list(good) + ["", "bogus"])


RUN_FLAGS = {
    "--system": flag("--system", SYSTEMS),
    "--model": flag("--model", st.sampled_from(models.names() + ["bogus", ""])),
    "--onnx": flag("--onnx", st.sampled_from(["no-such.onnx", str(CONFIG_DIR), str(CONFIG_DIR / "ipu-mk2.toml")])),
    **{f"--{p}": flag(f"--{p}", NUMBER) for p in ("micro-batch", "seq-len", "num-layers", "hidden", "heads",
                                                   "vocab", "image-size")},
    "--param": flag("--param", st.tuples(st.sampled_from(MODEL_PARAMS), st.sampled_from(NASTY + ["[0, 1]", "1e3"]))
                    .map(lambda kv: f"{kv[0]}={kv[1]}")),
    "--layers-per-ipu": flag("--layers-per-ipu", st.sampled_from(["1,1", "0,4,4,4", "3,7,7,7", "", "a", "-1",
                                                                  str(10**12)])),
    "--device-iterations": flag("--device-iterations", NUMBER),
    "--gradient-accumulation": flag("--gradient-accumulation", NUMBER),
    "--training": flag("--training"),
    "--optimizer": flag("--optimizer", choice("sgd", "adam", "lamb")),
    "--accum-type": flag("--accum-type", choice("float16", "float32")),
    "--synthetic-data": flag("--synthetic-data"),
    "--output-mode": flag("--output-mode", choice("all", "final", "sum", "everyn:2", "everyn:0")),
    "--available-memory-proportion": flag("--available-memory-proportion",
                                          st.one_of(NUMBER, st.sampled_from(["0.1", "0.3", "0.9", "1e-9"]))),
    "--strategy": flag("--strategy", choice("pipelined", "sharded", "serial-phased", "parallel-phased")),
    "--sync-pattern": flag("--sync-pattern", choice("full", "single-pipeline", "replica-and-ladder")),
    "--liveness": flag("--liveness", choice("always-live", "off-chip-after-fwd", "off-chip-after-each-phase")),
    "--replicas": flag("--replicas", NUMBER),
    "--auto-round-num-ipus": flag("--auto-round-num-ipus"),
    "--io-tiles": flag("--io-tiles", st.one_of(NUMBER, st.sampled_from(["32", "64", "192", "1472"]))),
    "--overlap": flag("--overlap", choice("none", "accumulation", "device")),
    "--prefetch-depth": flag("--prefetch-depth", NUMBER),
    "--optimizer-state": flag("--optimizer-state", choice("on-chip", "off-chip", "rts")),
    "--json": flag("--json"),
}
COLLECTIVE_FLAGS = {
    "--system": flag("--system", SYSTEMS),
    "--op": flag("--op", choice("all-reduce", "reduce-scatter", "all-gather", "all-to-all")),
    "--bytes": flag("--bytes", st.one_of(NUMBER, st.sampled_from(["1KiB", "64MiB", "1.5GB", "1TiB", "0.5", "1e3",
                                                                  "7 lots"]))),
    "--replicas": flag("--replicas", NUMBER),
    "--ipus-per-replica": flag("--ipus-per-replica", NUMBER),
    "--algorithm": flag("--algorithm", choice("auto", "ring", "bidirectional_ring", "meet_in_middle",
                                              "broadcast", "hierarchical")),
    "--json": flag("--json"),
}
BENCH_FLAGS = {"--system": flag("--system", SYSTEMS), "--repeats": flag("--repeats", NUMBER)}
REQUIRED = {"collective": ["--system", "--op", "--bytes", "--replicas"]}


@st.composite
def argv_for(draw, command: str, table: dict, extra: tuple[str, ...] = ()) -> list[str]:
    """``[command, flags...]``: a few of ``table``'s flags in any order (a command's required
    flags mostly present), each with a drawn value."""
    names = draw(st.lists(st.sampled_from(sorted(table)), max_size=5, unique=True))
    for required in REQUIRED.get(command, []):
        if required not in names and draw(st.integers(0, 9)):
            names.append(required)
    return [command] + [part for name in names for part in draw(table[name])] + list(extra)


@st.composite
def plausible_run(draw) -> list[str]:
    """``ipusim run`` with valid values for many flags at once, to reach deep into compile and
    simulate (small sizes, so each case is fast)."""
    def maybe(*parts: str) -> list[str]:
        return list(parts) if draw(st.booleans()) else []

    def pick(*values) -> str:
        return str(draw(st.sampled_from(values)))

    model = pick("mlp", "bert-base", "gpt2-small", "resnet50", "io-bound", "tut6-matvec", "amp-tile")
    argv = ["run", "--model", model, "--system", pick("ipu-mk2", "ipu-m2000", "ipu-pod16", "bow-2000")]
    if model in ("bert-base", "gpt2-small"):
        layers = int(pick(1, 2, 4))
        argv += ["--num-layers", str(layers), "--seq-len", pick(8, 16, 128), "--hidden", pick(64, 256),
                 "--heads", pick(1, 4), "--vocab", pick(64, 1000)]
        argv += maybe("--layers-per-ipu", pick(*{f"0,{layers}", ",".join(["1"] * layers), f"{layers},0"}))
    if model in ("mlp", "bert-base", "gpt2-small", "resnet50"):
        argv += maybe("--micro-batch", pick(1, 2, 4))
    if draw(st.booleans()):
        argv += ["--training"] + maybe("--optimizer", pick("sgd", "adam", "lamb", "sgd_momentum"))
        argv += maybe("--gradient-accumulation", pick(1, 2, 8))
        argv += maybe("--optimizer-state", pick("on-chip", "off-chip", "rts"))
    argv += maybe("--device-iterations", pick(1, 3, 16))
    argv += maybe("--replicas", pick(1, 2, 3, 4))
    argv += maybe("--auto-round-num-ipus")
    argv += maybe("--synthetic-data")
    argv += maybe("--output-mode", pick("all", "final", "sum", "everyn:2"))
    argv += maybe("--available-memory-proportion", pick(0.05, 0.3, 1))
    argv += maybe("--strategy", pick("pipelined", "sharded", "serial-phased", "parallel-phased"))
    argv += maybe("--sync-pattern", pick("full", "single-pipeline", "replica-and-ladder"))
    argv += maybe("--io-tiles", pick(32, 64))
    argv += maybe("--overlap", pick("none", "accumulation", "device"))
    argv += maybe("--prefetch-depth", pick(1, 2, 3))
    return argv + maybe("--json")


@st.composite
def plausible_collective(draw) -> list[str]:
    """``ipusim collective`` with valid values (and replica counts that may not fit)."""
    def pick(*values) -> str:
        return str(draw(st.sampled_from(values)))

    return ["collective", "--system", pick("ipu-m2000", "ipu-pod16", "ipu-pod64", "ipu-pod128", "bow-pod256"),
            "--op", pick("all-reduce", "reduce-scatter", "all-gather", "all-to-all"),
            "--bytes", pick("1", "1KiB", "64MiB", "1GiB", "100GB"), "--replicas", pick(2, 4, 8, 16, 64, 128, 256),
            "--ipus-per-replica", pick(1, 2, 4),
            "--algorithm", pick("auto", "ring", "bidirectional_ring", "meet_in_middle", "broadcast",
                                "hierarchical")]


ANY_COMMAND = st.one_of(
    argv_for("run", RUN_FLAGS),
    plausible_run(),
    plausible_run(),  # twice: run has the most flags and the deepest code
    argv_for("collective", COLLECTIVE_FLAGS),
    plausible_collective(),
    argv_for("bench", BENCH_FLAGS, extra=("--help",)),  # never a whole benchmark: it takes minutes
    st.sampled_from([["systems"], ["models"], ["systems", "--bogus"], ["models", "x"], [], ["bogus"],
                     ["--version"], ["run", "--help"], ["collective", "--help"]]),
)


def check_exit(argv: list[str]) -> None:
    """``argv`` ends in bounded time with an exit code, never an exception; a simulator error
    is one ``ipusim: error:`` line."""
    try:
        code, out, err = cli(*argv)
    except Hang:
        pytest.fail(f"ipusim {argv!r} hung (over {SECONDS_PER_CASE} s)")
    except Exception as e:  # the traceback a user would see
        raise AssertionError(f"ipusim {argv!r} raised {type(e).__name__}: {e}") from e
    event(f"{argv[0] if argv else '(none)'}: exit {code}")  # shown by pytest --hypothesis-show-statistics
    assert type(code) is int and code in (0, 2, 3), (argv, code, err)  # 1 is for writing files: none here
    assert "Traceback" not in out + err
    if err.startswith("ipusim: error:"):
        one_line_error(err)
    if code:
        assert err.strip(), (argv, code)


FUZZ = settings(derandomize=True, database=None, deadline=timedelta(seconds=SECONDS_PER_CASE),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(FUZZ, max_examples=600)
@given(argv=ANY_COMMAND)
def test_fuzz_every_subcommand_flag(argv):
    check_exit(argv)


BASE_CONFIG = (CONFIG_DIR / "ipu-mk2.toml").read_text().replace(
    "num_ipus = 1 ", "num_ipus = 4 ").replace('topology = "single"', 'topology = "ladder"')
CONFIG_KEYS = re.findall(r"(?m)^([a-z_0-9]+) = ", BASE_CONFIG)
TOML_VALUES = ["0", "-1", "-0.5", "1", "0.5", "3", "2000000000", "1" + "0" * 30, "1e308", "1e-308", "nan", "inf",
               "-inf", '"abc"', '""', "true", "[]", "[1, 2]", "{}", "1.5e9", "4097", "65537", '"mk2"', '"ladder"',
               # the edges of the loader's ranges: legal values must run in bounded time too
               "0.01", "1024", "4096", "65536", "1e6", "1e10", "1e15", "1000000000", "1073741824", "17592186044416"]


@st.composite
def mutated_config(draw) -> bytes:
    """A copy of ipu-mk2.toml (as 4 IPUs, so replicas and collectives run) with values changed
    to wrong types, zero, negative, huge, NaN/inf or strings, or the file itself damaged."""
    text = BASE_CONFIG
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), min_size=1, max_size=3, unique=True)):
        value = draw(st.sampled_from(TOML_VALUES))
        text = re.sub(rf"(?m)^{key} = [^#\n]*", lambda m: f"{key} = {value} ", text, count=1)
    data = text.encode()
    damage = draw(st.sampled_from(["none"] * 6 + ["truncate", "garbage", "drop-line", "duplicate-line",
                                                  "unknown-key"]))
    if damage == "truncate":
        data = data[:draw(st.integers(0, len(data)))]
    elif damage == "garbage":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\x00", b"[", b"=", b"\xc3("])) + data[at:]
    elif damage in ("drop-line", "duplicate-line", "unknown-key"):
        lines = data.split(b"\n")
        i = draw(st.integers(0, len(lines) - 1))
        lines[i:i + 1] = {"drop-line": [], "duplicate-line": [lines[i]] * 2,
                          "unknown-key": [lines[i], b"bogus_key = 1"]}[damage]
        data = b"\n".join(lines)
    return data


CONFIG_COMMANDS = [
    ["run", "--model", "mlp"],
    ["run", "--model", "bert-base", "--num-layers", "1", "--seq-len", "16", "--vocab", "64", "--training",
     "--replicas", "2"],
    ["collective", "--op", "all-reduce", "--bytes", "1MiB", "--replicas", "4"],
]


@pytest.fixture(scope="module")
def config_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "fuzzed.toml"


@settings(FUZZ, max_examples=300)
@given(content=mutated_config())
def test_fuzz_config_fields(config_path, content):
    config_path.write_bytes(content)
    for argv in CONFIG_COMMANDS:
        check_exit(argv + ["--system", str(config_path)])
