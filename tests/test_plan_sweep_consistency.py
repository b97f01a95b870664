"""ipusim sweep, plan, run and bench agree: a plan's rows do not depend on the order its model parameters were
given in (so --resume finds them), and a sweep's CSV leaves a number not measured empty, as docs/cli.md says."""

import csv

from sim.cli import main as cli
from sim.cli import plan as plan_cli

#: a one-candidate inference plan of the MLP (simulated in milliseconds)
MLP_PLAN = ["plan", "-q", "--model", "mlp", "--system", "ipu-mk2", "--global-batch", "8", "--micro-batch", "8",
            "--available-memory-proportion", "0.6", "--workers", "1"]


def _ipusim(*argv) -> int:
    return cli.main([str(a) for a in argv])


def _rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_plan_writes_the_same_commands_whatever_order_its_parameters_come_in(tmp_path, capsys):
    """The same plan (same `plan` column) given its parameters in another order, or from a --config file,
    writes the same command lines, so --resume finds the rows it holds instead of simulating them again."""
    path = tmp_path / "plan.csv"
    first = ["--param", "in_features=32", "--param", "out_features=4", "--num-layers", "2", "--param", "hidden=[8,8]"]
    assert _ipusim(*MLP_PLAN, *first, "--csv", path) == 0
    rows = _rows(path)
    assert len(rows) == 1 and rows[0]["status"] == "ok"
    config = tmp_path / "plan.toml"
    config.write_text("[params]\nhidden = [8, 8]\nout_features = 4\nin_features = 32\nnum_layers = 2\n")
    for again in (["--param", "hidden=[8,8]", "--param", "out_features=4", "--param", "num_layers=2",
                   "--param", "in_features=32"], ["--config", config]):
        assert _ipusim(*MLP_PLAN, *again, "--csv", path, "--resume") == 0
        assert _rows(path) == rows  # nothing simulated again, nothing appended
    capsys.readouterr()
    assert rows[0]["command"] == ("ipusim run --system ipu-mk2 --model mlp --num-layers 2 --param 'hidden=[8,8]' "
                                  "--param in_features=32 --param out_features=4 --micro-batch 8 "
                                  "--available-memory-proportion 0.6 --device-iterations 32 --memory-margin 0.05")


def test_param_order_puts_the_flags_first_then_the_rest_by_name():
    order = plan_cli._param_order({"vocab": 30400, "mask_tokens": 20, "seq_len": 128, "dropout": 0.0})
    assert [k for k, _ in order] == ["seq_len", "vocab", "dropout", "mask_tokens"]


def test_a_sweep_csv_leaves_a_latency_not_measured_empty(tmp_path, capsys):
    """docs/cli.md: latency_avg_s is empty where not measured (synthetic data); the CSV held the text nan."""
    path = tmp_path / "sweep.csv"
    assert _ipusim(*["sweep", "-q", "--workers", "1", "--grid", "micro-batch=1,2", "--csv", path, "--",
                     "--model", "mlp", "--synthetic-data"]) == 0
    rows = _rows(path)
    assert [r["latency_avg_s"] for r in rows] == ["", ""]
    assert all(float(r["seconds"]) > 0 for r in rows)
    before = path.read_bytes()
    with open(path, "wb") as f:  # only the first row: --resume reads the empty cell back and ends as one run
        f.write(b"".join(before.splitlines(keepends=True)[:2]))
    assert _ipusim(*["sweep", "-q", "--workers", "1", "--grid", "micro-batch=1,2", "--csv", path, "--resume", "--",
                     "--model", "mlp", "--synthetic-data"]) == 0
    assert path.read_bytes() == before
    out = capsys.readouterr().out
    assert "NaN" in out.splitlines()[1]


def test_an_onnx_plan_writes_its_dimensions_in_one_order(tmp_path):
    """--dim a=.. --dim b=.. and --dim b=.. --dim a=.. are the same plan (its `plan` column sorts them), so
    their candidates' command lines, which --resume finds rows by, are the same too."""
    from types import SimpleNamespace

    from sim import planner
    space = planner.Space(["ipu-mk2"], (8, 8), training=False)
    c = planner.Candidate("ipu-mk2", 1, 1, 8, 1, 0.6, None, None, 32)
    lines = []
    for dims in ({"seq": 16, "feat": 4}, {"feat": 4, "seq": 16}):
        model = SimpleNamespace(name=None, onnx=tmp_path / "m.onnx", torch=None, dims=dims, loss=None, params={},
                                placement=lambda units, split, recompute: {})
        lines.append(plan_cli.command(SimpleNamespace(model=model, space=space, units=[], sequential=False), c))
    assert lines[0] == lines[1]
    assert lines[0][4:8] == ["--dim", "feat=4", "--dim", "seq=16"]


def test_the_plan_summary_does_not_count_inferred_rows_as_dropped_on_their_always_live_bytes():
    """An inferred out-of-memory row's reason says "[inferred, not simulated: ...]": it is not one of those dropped
    on their own always-live bytes ("(not simulated)"), which the summary line counted it as too."""
    import pandas as pd
    simulated = "out of memory on IPU 0: short by 1,000 bytes per tile at op 'x'"
    table = pd.DataFrame({"status": ["ok", "oom", "oom", "oom", "oom", "pruned"], "reason": [
        "", simulated, simulated + " [inferred, not simulated: the figures are those of a simulated configuration]",
        "out of memory on IPU 1 (not simulated): its weights ... short by at least 8 bytes per tile",
        "out of memory on IPU 1 (not simulated): its weights ... short by at least 8 bytes per tile",
        "at most 10 samples/s (the busiest IPU's op cycles), below the 1st best simulated, 20"]})
    line = plan_cli._summary(table, 3.0)
    assert "4 out of memory (1 inferred, 2 from always-live bytes)" in line, line
    assert line.startswith("6 configurations in 3 s: 1 fit, ") and line.endswith(", 0 invalid, 1 pruned by their "
                                                                                   "throughput bound")
