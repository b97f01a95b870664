"""Sweeps: the product of grid axes, one row per point, equal to running each point alone."""

import pytest

import models
import sim
from sim.cli import main as cli
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


def test_sweep_on_a_dask_cluster():
    """The same rows when the points run on a Dask scheduler (an in-process cluster here)."""
    distributed = pytest.importorskip("distributed")
    local = sweep(["micro-batch=2,4"], ["--model", "mlp"], workers=1)
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=2,
                                  dashboard_address=None) as cluster:
        remote = sweep(["micro-batch=2,4"], ["--model", "mlp"], dask=cluster.scheduler_address)
    assert remote["cycle_count"].tolist() == local["cycle_count"].tolist()
