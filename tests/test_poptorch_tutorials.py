"""Runs the PopTorch tutorial-style scripts of tests/poptorch_tutorials/ end to end.

Each script follows the pattern of one of Graphcore's public PopTorch tutorials, written as a
PopTorch user writes it with only the import changed (``import sim.poptorch as poptorch``), and
ends by checking its outputs against plain PyTorch (it raises if they differ).
"""

import ast
import pathlib
import runpy

import pytest

pytest.importorskip("torch")

TUTORIALS = pathlib.Path(__file__).parent / "poptorch_tutorials"
SCRIPTS = sorted(p.name for p in TUTORIALS.glob("*.py"))
#: the only imports of the simulator a tutorial may make: the drop-in modules
ALLOWED = {"sim.poptorch", "sim.popdist", "sim.popdist.poptorch"}


def run(name: str, capsys) -> str:
    runpy.run_path(str(TUTORIALS / name), run_name="__main__")
    return capsys.readouterr().out


def test_there_are_tutorials():
    assert {"basics_mnist.py", "pipelining.py", "phased_execution.py", "efficient_data_loading.py",
            "mixed_precision.py", "replication_popdist.py", "observing_tensors.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_only_the_import_changes(name):
    tree = ast.parse((TUTORIALS / name).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for module in modules:
            if module == "sim" or module.startswith("sim."):
                assert module in ALLOWED, f"{name} imports {module}: only {sorted(ALLOWED)} may be used"


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s != "replication_popdist.py"])
def test_tutorial_runs_and_matches_pytorch(name, capsys, monkeypatch):
    for var in ("POPDIST_NUM_TOTAL_REPLICAS", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                "IPUSIM_SYSTEM", "POPTORCH_DEFAULT_OPTIONS"):
        monkeypatch.delenv(var, raising=False)
    assert run(name, capsys).rstrip().endswith("matches plain PyTorch")


def test_replication_tutorial_alone_and_as_instance_1_of_2(capsys, monkeypatch):
    for var in ("POPDIST_NUM_TOTAL_REPLICAS", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                "IPUSIM_SYSTEM", "POPTORCH_DEFAULT_OPTIONS"):
        monkeypatch.delenv(var, raising=False)
    out = run("replication_popdist.py", capsys)
    assert "instance 0 of 1: 2 replicas" in out and out.rstrip().endswith("matches plain PyTorch")
    for var, value in {"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "2",
                       "POPDIST_REPLICA_INDEX_OFFSET": "2", "OMPI_COMM_WORLD_RANK": "1",
                       "OMPI_COMM_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(var, value)
    out = run("replication_popdist.py", capsys)
    assert "instance 1 of 2: 2 replicas" in out and out.rstrip().endswith("matches plain PyTorch")
