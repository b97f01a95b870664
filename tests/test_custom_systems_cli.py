"""A user's own system descriptions, driven through ``ipusim`` (in-process) and ``sim.load_system``:
a valid one simulates and its numbers move the right way; a broken one, or a name that does not
name a system, is an error naming the file, the key, what is wrong and what to do (exit 2, no
traceback); and the command lines that take a system (run, plan, compare, bench, script) find the
file the user meant (docs/cli.md, "ipusim systems")."""

from __future__ import annotations

import json
import re

import pytest

import sim
from sim.cli import bench
from sim.cli.main import main
from sim.errors import ConfigError, OutOfMemoryError
from sim.hardware import load_system
from sim.hardware.configs import CONFIG_DIR

from cli_run import cli


def _write(folder, name: str, text: str):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _error(path_or_name) -> str:
    with pytest.raises(ConfigError) as e:
        load_system(path_or_name)
    return str(e.value)


def _run_json(capsys, *argv) -> dict:
    code, out, err = cli(capsys, "run", "--model", "mlp", "--json", "-q", *argv)
    assert code == 0, err
    return json.loads(out)


# --- valid custom systems: they simulate, and their numbers move the right way -------------------

def test_custom_systems_simulate_and_move_the_right_way(tmp_path, capsys):
    base = _run_json(capsys)
    fewer = _write(tmp_path, "half tiles/few.toml", 'extends = "ipu-mk2"\n[ipu]\ntiles = 368\n')  # a path with a space
    slower = _write(tmp_path, "slow.toml", 'extends = "ipu-mk2"\n[ipu]\nclock_hz = 0.9e9\n')
    board = _write(tmp_path, "board.toml", 'extends = "ipu-mk2"\nname = "two-ipu-board"\n[system]\n'
                   'num_ipus = 2\nipus_per_chassis = 2\ntopology = "card"\n')
    few = _run_json(capsys, "--system", fewer)
    assert few["system"] == "few" and few["system_config"]["tiles_per_ipu"] == 368
    assert few["cycle_count"] > base["cycle_count"]
    assert _run_json(capsys, "--system", slower)["seconds"] > base["seconds"]
    two = _run_json(capsys, "--system", board, "--replicas", "2")
    assert two["system"] == "two-ipu-board" and two["samples_per_second"] > base["samples_per_second"]
    code, _, err = cli(capsys, "run", "--model", "mlp", "--system", board, "--replicas", "4")
    assert code == 2 and "'two-ipu-board' has 2" in err


# --- data_path_bits below 32 divided by zero in the cost model ----------------------------------

def test_a_data_path_narrower_than_32_bits_is_a_config_error(tmp_path, capsys):
    """data_path_bits = 8 or 16 passed the loader (range 8-1024) and every run then died in the cost
    model with a ZeroDivisionError traceback (elements per load = bits // 32 = 0)."""
    narrow = _write(tmp_path, "narrow.toml", 'extends = "ipu-mk2"\n[ipu]\ndata_path_bits = 16\n')
    code, _, err = cli(capsys, "run", "--model", "mlp", "--system", narrow)
    assert code == 2 and str(narrow) in err and "ipu.data_path_bits = 16 is out of range" in err
    odd = _write(tmp_path, "odd.toml", 'extends = "ipu-mk2"\n[ipu]\ndata_path_bits = 48\n')
    assert "ipu.data_path_bits = 48; expected a multiple of 32" in _error(odd)
    wide = _write(tmp_path, "wide.toml", 'extends = "ipu-mk2"\n[ipu]\ndata_path_bits = 128\n')
    assert load_system(wide).ipu.data_path_bits == 128


# --- what --system names -------------------------------------------------------------------------

def test_a_folder_or_file_named_like_a_system_does_not_hide_it(tmp_path, monkeypatch, capsys):
    """`ipusim run --output ipu-pod16` makes a folder ipu-pod16; `--system ipu-pod16` then failed
    ("system config ipu-pod16 is not a regular file"), and a file of that name was read instead of
    the config."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ipu-pod16").mkdir()
    _write(tmp_path, "ipu-m2000", 'extends = "ipu-mk2"\nname = "mine"\n[ipu]\ntiles = 736\n')
    assert load_system("ipu-pod16").num_ipus == 16
    assert load_system("ipu-m2000").num_ipus == 4
    assert load_system("./ipu-m2000").name == "mine"  # the file, given as a path
    code, out, err = cli(capsys, "collective", "--system", "ipu-pod16", "--op", "all-reduce", "--bytes", "1MiB",
                         "--replicas", "16")
    assert code == 0 and "ipu-pod16 (16 IPUs)" in out


def test_the_cost_tables_of_configs_are_not_systems(tmp_path, capsys):
    """`--system _vector-ops` (or its path, or `extends = "_vector-ops"`) was read as a system and
    failed on "unknown key or table 'bilinear_grad'"."""
    for given in ("_vector-ops", str(CONFIG_DIR / "_conv-vertices.toml")):
        code, _, err = cli(capsys, "run", "--model", "mlp", "--system", given)
        assert code == 2 and "table of codelet costs" in err and "not a system" in err and "ipu-mk2" in err
    child = _write(tmp_path, "child.toml", 'extends = "_vector-ops"\n')
    message = _error(child)
    assert str(child) in message and "not a system" in message


def test_an_empty_system_is_named_as_such(capsys):
    """`--system ""` read the working directory (Path("") is ".") and said "system config . is not a
    regular file"."""
    code, _, err = cli(capsys, "run", "--model", "mlp", "--system", "")
    assert code == 2 and "the system is empty" in err


def test_a_system_that_does_not_exist_says_what_was_meant(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "mine.toml", 'extends = "ipu-mk2"\n')
    assert "ipu-mk2 of configs/ is named without .toml" in _error("ipu-mk2.toml")
    assert "did you mean ipu-pod16?" in _error("ipu-pod-16")
    assert "did you mean ipu-mk2?" in _error("IPU-MK2")
    assert "mine.toml" in _error("mine") and load_system("mine.toml").name == "mine"


def test_a_missing_key_or_table_says_to_extend_a_config(tmp_path):
    partial = _write(tmp_path, "partial.toml", '[ipu]\ngeneration = "mk2"\ntiles = 1472\n')
    message = _error(partial)
    assert str(partial) in message and "missing key ipu.clock_hz" in message and 'extends = "ipu-mk2"' in message
    empty = _write(tmp_path, "empty.toml", "")
    assert "missing table [ipu]" in _error(empty) and 'extends = "ipu-mk2"' in _error(empty)


# --- ipusim plan ---------------------------------------------------------------------------------

PLAN = ["--model", "mlp", "--global-batch", "16", "--top", "1", "--workers", "1", "--micro-batch", "16",
        "--available-memory-proportion", "0.6"]


def test_plan_config_takes_a_system_path_relative_to_itself(tmp_path, monkeypatch, capsys):
    """A --config file's `onnx` was relative to the file, its `system` path to the working directory,
    so a plan.toml beside its system's .toml failed from anywhere else."""
    _write(tmp_path, "plans/board.toml", 'extends = "ipu-mk2"\n[system]\nnum_ipus = 2\nipus_per_chassis = 2\n'
           'topology = "card"\n')
    config = _write(tmp_path, "plans/plan.toml", 'model = "mlp"\nsystem = ["board.toml", "ipu-mk2"]\n'
                    'global_batch = 16\nworkers = 1\ntop = 1\nmicro_batch = [8]\n'
                    'available_memory_proportion = [0.6]\n')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, out, err = cli(capsys, "plan", "--config", config)
    assert code == 0, err
    assert "--system " + str(tmp_path / "plans" / "board.toml") in out  # the best: 2 replicas on the board


def test_plan_takes_a_system_file_whose_name_holds_a_comma(tmp_path, capsys):
    """--system NAME[,NAME...] split a path such as "a,b.toml" into two unknown systems."""
    board = _write(tmp_path, "mk2,copy.toml", 'extends = "ipu-mk2"\n')
    code, out, err = cli(capsys, "plan", *PLAN, "--system", board)
    assert code == 0, err
    assert f"ipusim run --system {board} " in out
    code, out, err = cli(capsys, "plan", *PLAN, "--system", "ipu-mk2, ipu-m2000")  # a space after the comma
    assert code == 0, err


# --- ipusim compare ------------------------------------------------------------------------------

def test_compare_notes_a_system_of_the_same_name_with_other_constants(tmp_path, capsys):
    """A copy of configs/ipu-mk2.toml edited but not renamed ran as "ipu-mk2": compare gave no note that
    the two runs had different hardware (only the digest row, among a dozen, differed)."""
    text = re.sub(r"(?m)^tiles = 1472", "tiles = 736 ", (CONFIG_DIR / "ipu-mk2.toml").read_text())
    copy = _write(tmp_path, "my-ipu.toml", text)
    for name, system in (("a.json", "ipu-mk2"), ("b.json", copy), ("c.json", "ipu-mk2")):
        code, out, _ = cli(capsys, "run", "--model", "mlp", "--json", "-q", "--system", system)
        assert code == 0
        (tmp_path / name).write_text(out)
    code, out, _ = cli(capsys, "compare", tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json")
    assert code == 4
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "b.json" in notes[0] and "another config of system ipu-mk2" in notes[0]
    assert str(copy) in notes[0]


# --- ipusim bench --------------------------------------------------------------------------------

def test_bench_on_a_system_too_small_for_its_workload_is_out_of_memory(tmp_path, monkeypatch, capsys):
    """A --system whose IPU cannot hold BERT-large training with one layer ended the bench, after its
    other benchmarks, with a RuntimeError traceback (exit 1)."""
    tiny = _write(tmp_path, "tiny.toml", 'extends = "ipu-mk2"\n[ipu]\ntiles = 1\n')
    monkeypatch.setattr(bench, "run_benchmarks",  # the whole-simulation workloads alone
                        lambda system, repeats: {"workloads": bench.whole_simulations(1.0, system, repeats)})
    code, _, err = cli(capsys, "bench", "--system", tiny, "--repeats", "1")
    assert code == 3 and "bench workload 'bert-large training'" in err and str(tiny) in err and "--system" in err
    with pytest.raises(OutOfMemoryError):
        bench._largest_bert_large_that_fits(load_system(tiny), sim.Options())


# --- ipusim script -------------------------------------------------------------------------------

def test_script_passes_a_system_file_on_by_its_absolute_path(tmp_path, monkeypatch, capsys):
    """IPUSIM_SYSTEM held the path as typed, relative to the working directory, so a script that
    changes its directory (os.chdir, as many training scripts do) could not find the system."""
    monkeypatch.delenv("IPUSIM_SYSTEM", raising=False)
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "board.toml", 'extends = "ipu-mk2"\nname = "board"\n')
    (tmp_path / "elsewhere").mkdir()
    script = _write(tmp_path, "train.py", 'import os, sim\nos.chdir("elsewhere")\n'
                    'print("system:", sim.load_system(os.environ["IPUSIM_SYSTEM"]).name)\n')
    code = main(["script", "-q", "--system", "board.toml", str(script)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "system: board" in out
    monkeypatch.chdir(tmp_path)  # the script's os.chdir stays in force in this process
    code = main(["script", "-q", "--system", "ipu-pod16", str(script)])  # a name stays a name
    assert code == 0 and "system: ipu-pod16" in capsys.readouterr().out
