"""Views of tile memory: the liveness table (PopVision's liveness report), the memory and
liveness figures, and the text summary's memory table.

The liveness rows are checked against the memory analysis they come from: the fullest-tile
total peaks at each IPU's ``peak_tile_bytes``, the parts of each row add up to its total, and
the always-live bytes are the analysis's. The figures are checked as drawn (bars, panels,
capacity lines, labels that do not overlap with 16 IPUs) and as files.
"""

from __future__ import annotations

import itertools

import pytest

import models
import sim
from sim.results import report
from sim.results.report import MEMORY_COLOURS, format_summary, liveness_figure, memory_figure, write_outputs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CATEGORIES = ["control_code", "vertex_code", "vertex_state", "exchange_code", "stack", "weights", "constants", "optimizer_state", "accumulators", "stash",
              "activations", "temporaries"]
PARTS = ["always_live", "activations", "temporaries"]


@pytest.fixture(scope="module")
def pipelined():
    """BERT-base training, 4 layers on a 4-IPU pipeline (embeddings and head on IPU 0), 2 replicas."""
    g = models.get("bert-base", num_layers=4, seq_len=128, micro_batch=2, layers_per_ipu=[0, 2, 1, 1])
    o = sim.Options().enableSyntheticData(True).replicationFactor(2)
    o.Training.gradientAccumulation(16)
    return sim.simulate(g, "ipu-pod16", o, training=True, optimizer="lamb")


@pytest.fixture(scope="module")
def sixteen():
    """BERT-base training pipelined over 16 IPUs, one layer each."""
    g = models.get("bert-base", num_layers=16, seq_len=128, micro_batch=1, layers_per_ipu=[1] * 16)
    o = sim.Options().enableSyntheticData(True)
    o.Training.gradientAccumulation(34)
    return sim.simulate(g, "ipu-pod16", o, training=True, optimizer="sgd")


@pytest.fixture(scope="module")
def one_ipu():
    return sim.simulate(models.get("mlp", micro_batch=8), "ipu-mk2", training=True, optimizer="adam")


# --- liveness ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pipelined", "one_ipu"])
def test_liveness_adds_up_to_the_memory_analysis(request, name):
    run = request.getfixturevalue(name)
    live = run.liveness()
    assert list(live.columns) == ["ipu", "step", "op", "run", *PARTS, "total", *(f"tile_{p}" for p in PARTS),
                                  "tile_total", "tile"]
    assert sorted(live["ipu"].unique()) == sorted(run.memory)
    for ipu, m in run.memory.items():
        rows = live[live["ipu"] == ipu]
        assert list(rows["step"]) == list(range(len(rows))) and len(rows) > 1
        # the fullest tile at each op peaks where the analysis says the IPU peaks
        assert rows["tile_total"].max() == m["peak_tile_bytes"]
        assert m["peak_op"] in set(rows.loc[rows["tile_total"] == m["peak_tile_bytes"], "op"])
        # the parts of each view add up, and always-live bytes are the analysis's
        assert (rows[PARTS].sum(axis=1) == rows["total"]).all()
        assert (rows[[f"tile_{p}" for p in PARTS]].sum(axis=1) == rows["tile_total"]).all()
        assert (rows["always_live"] == m["always_live_bytes"]).all()
        assert (rows[PARTS + [f"tile_{p}" for p in PARTS]] >= 0).all().all()
        # summed over tiles, no op holds more than the sum of every tile's own peak
        assert rows["total"].max() <= m["total_peak_bytes"]
        assert ((rows["tile"] >= 0) & (rows["tile"] < run.executable.tiles)).all()
    assert (live.groupby("ipu")["run"].last() == "weight update").all()


def test_liveness_of_one_ipu_and_run_labels(pipelined):
    live = pipelined.liveness()
    one = pipelined.liveness(1)
    assert one.equals(live[live["ipu"] == 1].reset_index(drop=True))
    assert set(one["run"]) == {"pipeline stage 1", "pipeline stage 7", "weight update"}
    assert set(one.loc[one["run"] == "weight update", "op"]) >= {op.name for op in pipelined.executable.graph.ops
                                                                  if op.pass_ == "update" and op.ipu == 1}
    with pytest.raises(KeyError, match="IPUs of a replica are"):
        pipelined.liveness(4)  # IPU 4 is replica 1's IPU 0: memory is per IPU of a replica


def test_activations_rise_in_the_forward_pass_and_fall_in_the_backward(one_ipu):
    """A one-IPU training step: activations pile up in the forward pass and the backward pass
    frees them (the weight update then starts from the gradients it reads)."""
    live = one_ipu.liveness(0)
    ops = {op.name: op for op in one_ipu.executable.graph.ops}
    passes = live["op"].map(lambda name: ops[name].pass_)
    forward = live.loc[passes == "forward", "activations"]
    backward = live.loc[passes == "backward", "activations"]
    assert forward.iloc[-1] > forward.iloc[0]
    assert backward.iloc[-1] < max(forward.max(), backward.max())
    assert list(passes) == sorted(passes, key=["forward", "backward", "update"].index)


# --- memory.png ----------------------------------------------------------------------------------------
def _texts(fig):
    """The tick labels and free texts of each axes, with their boxes on the canvas."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        texts = [t for t in ax.get_xticklabels() if t.get_text()] + list(ax.texts)
        yield ax, [(t.get_text(), t.get_window_extent(renderer)) for t in texts]


def test_memory_figure_stacks_the_fullest_tiles_categories(sixteen):
    fig = memory_figure(sixteen)
    ax = fig.axes[0]
    table = sixteen.memory_table()
    shown = [c for c in CATEGORIES if table[c].any()]
    bars = {c.get_label(): c for c in ax.containers}
    assert list(bars) == [c.replace("_", " ") for c in shown]
    for cat in shown:  # a fixed colour per category, one bar per IPU, heights in KiB
        patches = bars[cat.replace("_", " ")].patches
        assert len(patches) == 16
        assert all(p.get_facecolor()[:3] == pytest.approx(_rgb(MEMORY_COLOURS[cat])) for p in patches)
        assert [p.get_height() for p in patches] == pytest.approx(list(table[cat] / 1024))
    tops = [max(p.get_y() + p.get_height() for c in ax.containers for p in c.patches if p.get_x() < i < p.get_x() + 1)
            for i in range(16)]
    assert tops == pytest.approx([m["peak_tile_bytes"] / 1024 for m in sixteen.memory.values()])
    assert [line.get_label() for line in ax.get_lines()] == ["tile capacity (624 KiB)"]
    assert ax.get_lines()[0].get_ydata()[0] == pytest.approx(638_976 / 1024)
    assert "fullest tile" in ax.get_title() and "by category" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "tile capacity (624 KiB)" and legend[1:] == [c.replace("_", " ") for c in reversed(shown)]
    report._pyplot().close(fig)


def test_memory_figure_labels_do_not_overlap_with_16_ipus(sixteen):
    fig = memory_figure(sixteen)
    (ax, texts), = list(_texts(fig))
    names = [t for t, _ in texts if t.startswith("IPU")]
    assert names == [f"IPU {i}" for i in range(16)]  # every IPU named
    assert sum(t.endswith("%") for t, _ in texts) == 16  # and its share of the tile
    overlapping = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(texts, 2) if box_a.overlaps(box_b)]
    assert overlapping == []
    report._pyplot().close(fig)


# --- liveness.png --------------------------------------------------------------------------------------
def test_liveness_figure_has_a_panel_per_ipu_with_the_capacity(pipelined):
    fig = liveness_figure(pipelined)
    assert len(fig.axes) == len(pipelined.memory) == 4
    for ax, (ipu, m) in zip(fig.axes, pipelined.memory.items()):
        assert ax.get_title(loc="left").startswith(f"IPU {ipu} of each replica: peak")
        labels = [line.get_label() for line in ax.get_lines()]
        assert "tile capacity" in labels and "average tile (summed over tiles / tiles)" in labels
        capacity = next(line for line in ax.get_lines() if line.get_label() == "tile capacity")
        assert capacity.get_ydata()[0] == pytest.approx(m["tile_capacity_bytes"] / 1024)
        assert len(ax.collections) >= 3  # the stacked areas: always live, activations, temporaries
        assert ax.get_ylim()[1] >= m["peak_tile_bytes"] / 1024
    report._pyplot().close(fig)


def test_output_writes_both_memory_figures(tmp_path, sixteen):
    written = write_outputs(sixteen, tmp_path / "out")
    for name in ("memory.png", "liveness.png"):
        path = tmp_path / "out" / name
        assert path in written and path.read_bytes()[:8] == PNG_SIGNATURE
    assert "liveness.png" in report.OUTPUT_FILES


# --- the text summary ----------------------------------------------------------------------------------
def test_summary_memory_table_has_a_line_per_ipu_with_its_categories(pipelined):
    text = format_summary(pipelined).splitlines()
    start = text.index("tile memory (bytes on the fullest tile of each IPU at its peak, by category)")
    header = text[start + 1].split()
    assert header[:5] == ["IPU", "peak", "bytes", "%", "of"] and header[-3:] == ["op", "at", "peak"]
    assert [c for c in header if c in CATEGORIES] == CATEGORIES
    table = pipelined.memory_table()
    for line, (ipu, m) in zip(text[start + 2:start + 2 + len(table)], pipelined.memory.items()):
        fields = line.split()
        assert int(fields[0]) == ipu and int(fields[1].replace(",", "")) == m["peak_tile_bytes"]
        assert [int(f.replace(",", "")) for f in fields[4:4 + len(CATEGORIES)]] == list(table.loc[ipu])
        assert fields[4 + len(CATEGORIES)] == m["peak_op"]
    assert text[start + 2 + len(table)].startswith("  (a tile has 638,976 bytes; every replica holds the same)")


def test_out_of_memory_still_lists_what_the_tile_holds():
    with pytest.raises(sim.OutOfMemoryError, match=r"the tile then holds control code [\d,]+, vertex code [\d,]+, "
                       r"vertex state [\d,]+, exchange code [\d,]+, stack 40, weights [\d,]+"):
        sim.compile(models.get("bert-large", micro_batch=8, seq_len=128), "ipu-mk2",
                    sim.Options().enableSyntheticData(True), training=True, optimizer="lamb")


def _rgb(colour: str) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb
    return to_rgb(colour)


def test_tile_memory_by_category_adds_up_to_each_tiles_peak(pipelined):
    """``run.tile_memory(ipu, category=...)``: each category's bytes on every tile at the tile's own peak;
    the categories add up to the tile's peak (rounded up to whole bytes) and, on the fullest tile, to the
    memory table's row."""
    import numpy as np
    table = pipelined.memory_table()
    for ipu in pipelined.memory:
        by_category = {c: pipelined.tile_memory(ipu, category=c) for c in CATEGORIES}
        total = sum(by_category.values())
        peak = pipelined.tile_memory(ipu)
        assert np.all(np.ceil(total - 1e-6) == peak)
        fullest = int(peak.argmax())
        for c in CATEGORIES:
            assert abs(by_category[c][fullest] - table.loc[ipu, c]) < 2  # the table rounds its running sums
    assert (pipelined.tile_memory(1, "stash") > 0).all()  # a stage's stash is spread over every tile
    weights = pipelined.memory[1]["by_role"]["weight"]  # every weight byte of IPU 1 is on one of its tiles
    assert weights > 0 and abs(pipelined.tile_memory(1, "weights").sum() - weights) < 100
    with pytest.raises(ValueError, match="unknown memory category 'code'"):
        pipelined.tile_memory(0, "code")
    with pytest.raises(ValueError, match="no IPU 9"):
        pipelined.tile_memory(9)
