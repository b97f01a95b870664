"""popnn's CTC loss against poplibs' ctc_loss benchmarks (IPUModel2 and IPUModel1 rows of
tests/data/poplibs_benchmark_results*.csv, poplibs 8dcde1ec): the tool's graph, its upload program,
and the rows.

The rows are Poplar's IPUModel estimates of 2021 poplibs (not hardware); no constant was fitted to
them. Tolerance 25 %: the simulator charges each loop step its usual sync, exchange set-up and
vertex launch (about 290 cycles beside the vertices'), where the four rows, read together, leave
IPUModel about 140 a step and a fixed part of about 180k cycles the simulator does not have
(docs/reference/poplibs-costs.md 6.7); the short rows (375 steps) come out 9-20 % under, the long
ones (1,200 steps) 0-9 % over. Before the loops were compiled once and LOG_ADD priced as popops
does, the short rows were 37 and 55 % under (with synthetic inputs) and the long ones out of memory.
"""

from __future__ import annotations

import pytest

from sim import poplibs_benchmarks as pb

CTC_ROWS = [n for n, b in pb.BENCHES.items() if b.tool == "ctc"]


def test_the_tools_rows_are_benchmarks():
    assert sorted(CTC_ROWS) == sorted(f"ctc_loss_t_{t}_l_{lab}_c_{c}_bs_{bs}_float_float"
                                      for t, lab, c in ((375, 200, 36), (1200, 480, 5)) for bs in (1, 4))
    assert pb.published()["ctc_loss_t_375_l_200_c_36_bs_4_float_float"] == (643797, 117750170)  # poplibs 8dcde1ec
    assert pb.published("IpuModel1")["ctc_loss_t_1200_l_480_c_5_bs_1_float_float"] == (855154, 31713856)


def test_the_graph_is_a_log_softmax_then_the_loss_with_nothing_downloaded():
    g = pb.graph(pb.BENCHES["ctc_loss_t_375_l_200_c_36_bs_4_float_float"])
    assert [op.kind for op in g.ops] == ["softmax", "ctc_loss"] and g.ops[0].attrs == {"axis": -1, "log": True}
    assert g.tensors["data"].shape == (375, 4, 36) and g.tensors["labels"].shape == (4, 200)
    assert g.tensors[g.loss].shape == (4,) and not g.outputs


def test_the_upload_program_runs():
    """--ignore-data keeps the tool's upload of its inputs: host-to-IPU time, which grows with the
    logits (4 x 375 x 36 floats against 1 x 375 x 36)."""
    one, four = (pb.simulated_run(pb.BENCHES[f"ctc_loss_t_375_l_200_c_36_bs_{bs}_float_float"]) for bs in (1, 4))
    assert 0 < one.breakdown.iloc[0]["host_io"] < four.breakdown.iloc[0]["host_io"]


@pytest.mark.parametrize("target", pb.TARGETS)
@pytest.mark.parametrize("name", CTC_ROWS)
def test_every_row_within_a_quarter(name, target):
    row = next(r for r in pb.rows(target) if r.name == name)
    assert row.error() == pytest.approx(0, abs=0.25)


def test_the_short_rows_are_under_and_the_long_ones_over():
    """What the tolerance covers, pinned: the simulator's steps dearer than IPUModel's, its fixed
    part cheaper."""
    errors = {r.name: r.error() for r in pb.rows() if r.bench.tool == "ctc"}
    assert all(e < 0 for n, e in errors.items() if "_t_375_" in n)
    assert all(e > 0 for n, e in errors.items() if "_t_1200_" in n)
