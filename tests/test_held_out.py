"""The held-out rows' errors a run quotes: workload families, the stored table, the spread and the note."""

import pandas as pd
import pytest

import models
import sim
from sim.graph import GraphBuilder
from sim.graph.workload import family, has_attention
from sim.results import held_out
from sim.validation import PUBLISHED_ROWS


def _family(graph, **kwargs) -> str:
    ex = sim.compile(graph, "ipu-mk2", **kwargs)
    return ex.family


@pytest.mark.parametrize("name, params, expected", [
    ("bert-base", {"num_layers": 1, "micro_batch": 1}, "transformer"),
    ("vit-base-16", {"num_layers": 1, "micro_batch": 1}, "transformer"),
    ("resnet50", {"micro_batch": 1}, "convolutional"),
    ("mlp", {}, "other"),
])
def test_zoo_families(name, params, expected):
    assert _family(models.get(name, **params)) == expected


def _scores_graph(second_operand: str) -> GraphBuilder:
    """A softmax over x @ y, y a weight or another input, through a scale (and views)."""
    b = GraphBuilder("g", "float16")
    x = b.input("x", (4, 8, 16))
    y = b.weight("w", (16, 8)) if second_operand == "weight" else b.input("y", (4, 16, 8))
    s = b.op("scale", [b.matmul(x, y)], [(4, 8, 8)], attrs={"scale": 0.125})[0]
    b.softmax(s)
    return b


def test_attention_is_a_softmax_over_a_product_of_two_activations():
    assert has_attention(_scores_graph("input").graph)
    # a classifier's softmax over x @ W is no attention; with no convolution the graph is "other"
    g = _scores_graph("weight").graph
    assert not has_attention(g)
    assert family(g) == "other"


FRAME = pd.DataFrame(
    [("A1", "m", "transformer", True, 16, 100.0, 110.0, 0.10),
     ("A2", "m", "transformer", True, 16, 100.0, 130.0, 0.30),
     ("A3", "n", "transformer", True, 16, 100.0, 90.0, -0.10),
     ("A4", "n", "transformer", True, 64, 100.0, 150.0, 0.50),
     ("A5", "n", "transformer", False, 1, 100.0, 100.0, 0.0),
     ("C1", "r", "convolutional", True, 16, 100.0, 95.0, -0.05)], columns=list(held_out.COLUMNS))


def test_like_spreads_the_rows_of_the_runs_kind():
    found = held_out.like("transformer", True, 16, "m", FRAME)
    # all four training rows of the family: median of (-0.1, 0.1, 0.3, 0.5), pandas' linear quartiles
    assert (found["rows"], found["median"], found["low"], found["high"]) == (4, pytest.approx(0.2), -0.1, 0.5)
    assert found["quartiles"] == [pytest.approx(0.05), pytest.approx(0.35)]
    # the three on 5-16 IPUs
    assert found["scale"]["ipus"] == [5, 16] and found["scale"]["rows"] == 3
    assert found["scale"]["median"] == pytest.approx(0.1)
    # model m's own rows, listed by id
    assert found["model"]["rows"] == 2 and found["model"]["first"] == {"A1": 0.1, "A2": 0.3}
    # too few rows at 64 IPUs to name that scale; no rows of this model
    found = held_out.like("transformer", True, 64, "q", FRAME)
    assert found["scale"] is None and found["model"] is None and found["rows"] == 4
    assert held_out.like("other", True, 1, "", FRAME) is None
    assert held_out.like("convolutional", False, 1, "", FRAME) is None


def test_scale_groups():
    assert [held_out.scale_of(n) for n in (1, 2, 4, 5, 16, 64, 65, 256)] == [
        (1, 1), (2, 4), (2, 4), (5, 16), (5, 16), (17, 64), (65, 2**31), (65, 2**31)]


def test_note_names_medians_and_middle_halves():
    text = held_out.describe(held_out.like("transformer", True, 16, "m", FRAME))
    assert "4 held-out published measurements of transformer training: median +20% (+5% to +35%)" in text
    assert "the 3 on 5-16 IPUs: median +10%" in text
    assert "m's 2 (A1 +10%, A2 +30%): median +20%" in text


def test_stored_table_holds_every_held_out_row():
    """held_out.csv, written by python -m sim.validation: a line per row the simulator runs, with the
    row's published value (tests/test_calibration.py checks the simulated values of the asserted rows)."""
    stored = held_out.stored().set_index("id")
    assert set(stored.index) == {r.id for r in PUBLISHED_ROWS}
    for r in PUBLISHED_ROWS:
        line = stored.loc[r.id]
        assert (line.model, bool(line.training), line.published) == (r.setup.model, r.setup.training, r.published)
        assert line.error == pytest.approx(line.simulated / line.published - 1, abs=1e-4)


def test_a_run_quotes_the_rows_of_its_kind():
    run = sim.simulate(models.get("bert-base", num_layers=1, micro_batch=1), "ipu-mk2")
    expected = held_out.like("transformer", False, 1, "bert-base")
    assert run.summary()["held_out"] == expected
    assert [n for n in run.notes if n.startswith("validation: ")] == ["validation: " + held_out.describe(expected)]
    # a workload of no held-out row's kind says nothing
    mlp = sim.simulate(models.get("mlp"), "ipu-mk2")
    assert mlp.summary()["held_out"] is None and not any(n.startswith("validation") for n in mlp.notes)


def test_report_groups_the_errors_by_kind_and_scale(monkeypatch):
    """reports/validation.md's "By workload kind": a line per family and mode, and one per scale group of at
    least MIN_SCALE_ROWS rows when the mode's rows span more than it."""
    import importlib
    from sim.validation import held_out as writer
    report = importlib.import_module("sim.validation.report")  # the package re-exports report() by that name
    monkeypatch.setattr(writer, "table", lambda: FRAME)
    lines = [line for line in report._kinds_section() if line.startswith("| ") and "---" not in line][1:]
    assert lines == [
        "| convolutional | training | all | 1 | -5.0% | -5.0% to -5.0% | -5.0% to -5.0% |",
        "| transformer | inference | all | 1 | +0.0% | +0.0% to +0.0% | +0.0% to +0.0% |",
        "| transformer | training | all | 4 | +20.0% | +5.0% to +35.0% | -10.0% to +50.0% |",
        "| transformer | training | 5-16 | 3 | +10.0% | +0.0% to +20.0% | -10.0% to +30.0% |"]


def test_device_shares_are_the_busiest_ipus():
    """Fixed costs (launch, exchange set-up, sync) and exchange over the device cycles of the IPU with the most
    of them; host IO, collectives and idle are no device work."""
    breakdown = pd.DataFrame(
        {"compute": [600, 100], "launch": [100, 50], "exchange": [200, 10], "exchange_setup": [50, 0],
         "sync": [50, 40], "host_io": [0, 5000], "remote_io": [0, 0], "inter_ipu": [0, 0], "collective": [0, 0],
         "idle": [7000, 4800]}, index=pd.Index([0, 1], name="ipu"))
    assert held_out.device_shares(breakdown) == (pytest.approx(0.2), pytest.approx(0.2))
    assert held_out.device_shares(breakdown * 0) == (0.0, 0.0)


def test_the_stored_shares_are_of_device_time():
    stored = held_out.stored()
    shares = stored[list(held_out.SHARE_COLUMNS)]
    assert len(shares) == len(stored) and shares.notna().all().all()
    assert ((shares >= 0) & (shares <= 1)).all().all()
    assert (shares.fixed_share + shares.exchange_share <= 1).all()


SHARES = pd.DataFrame(
    [("S1", "p", "transformer", True, 4, 100.0, 105.0, 0.05, 0.10, 0.30),
     ("S2", "p", "transformer", True, 4, 100.0, 110.0, 0.10, 0.20, 0.25),
     ("S3", "p", "transformer", True, 4, 100.0, 130.0, 0.30, 0.40, 0.20),
     ("S4", "p", "transformer", True, 4, 100.0, 120.0, 0.20, 0.55, 0.21),
     ("S5", "p", "transformer", True, 4, 100.0, 150.0, 0.50, 0.60, 0.22),
     ("S6", "p", "transformer", True, 4, 100.0, 90.0, -0.10, 0.61, 0.23),
     ("S7", "q", "convolutional", False, 1, 100.0, 95.0, -0.05, 0.70, 0.10)],
    columns=list(held_out.COLUMNS + held_out.SHARE_COLUMNS))


def test_report_sets_the_errors_against_the_shares(monkeypatch):
    """reports/validation.md's "What the errors follow": Spearman's rank correlation of the error with each share
    (ties at their mean rank), over all rows, each mode and each model of SHARE_MODEL_ROWS rows, a correlation
    only where the share spans SHARE_SPAN; then the rows bound by fixed costs by model and mode."""
    import importlib
    from sim.validation import held_out as writer
    report = importlib.import_module("sim.validation.report")
    monkeypatch.setattr(writer, "table", lambda: SHARES)
    tables = [line for line in report._error_shares_section() if line.startswith("| ") and "---" not in line]
    # p's errors rank 2 3 5 4 6 1; its fixed shares 1 2 3 4 5 6 (1 - 6 x 32 / 210 = +0.09), its exchange
    # shares 6 5 1 2 3 4 (1 - 6 x 58 / 210 = -0.66)
    assert tables[1:5] == [
        "| all | 7 | 0.10 to 0.70 | -0.29 | 0.10 to 0.30 | -0.18 |",
        "| inference | 1 | 0.70 to 0.70 | - | 0.10 to 0.10 | - |",
        "| training | 6 | 0.10 to 0.61 | +0.09 | 0.20 to 0.30 | -0.66 |",
        "| p, training | 6 | 0.10 to 0.61 | +0.09 | 0.20 to 0.30 | -0.66 |"]
    assert tables[6:] == [
        "| p | training | 3 (S4, S5, S6) | 0.55 to 0.61 | -10.0% to +50.0% |",
        "| q | inference | 1 (S7) | 0.70 to 0.70 | -5.0% to -5.0% |"]
