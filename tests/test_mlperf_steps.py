"""Time per step of the packed BERT SL512 MLPerf rows (sim/validation/step_times.py): the published step
times, the line through them against gradient accumulation, and the rows' configuration."""
from dataclasses import replace

import pytest

from sim import validation as V

ROWS = {r.id: r for r in V.PUBLISHED_ROWS}


def test_step_seconds_is_sequences_per_step_over_throughput():
    # M18: 3 packs x 2 sequences x GA 96 x 8 replicas = 4,608 sequences per step at 7,411 sequences/s
    assert V.packed_step_seconds(ROWS["M18"], 7411) == pytest.approx(4608 / 7411, rel=1e-12)
    # M20: 3 x 2 x 36 x 32 = 6,912 sequences
    assert V.packed_step_seconds(ROWS["M20"], 19071) == pytest.approx(6912 / 19071, rel=1e-12)


def test_published_line_through_the_v20_rows():
    rows = [ROWS[i] for i in V.PACKED_STEP_FIT_ROWS]
    per_step, per_micro_batch = V.packed_step_line(rows, [r.published for r in rows])
    # from the published figures alone: 207.3 ms every step, 4.321 ms per micro-batch
    assert per_step == pytest.approx(0.207300, abs=1e-6)
    assert per_micro_batch == pytest.approx(0.00432148, abs=1e-8)


def test_step_line_recovers_an_exact_line():
    rows = [ROWS[i] for i in V.PACKED_STEP_FIT_ROWS]
    # throughputs made from step = 0.1 s + 5 ms x GA: the line gives those two numbers back
    values = [V.packed_step_seconds(r, 1.0) / (0.1 + 0.005 * r.setup.accumulation) for r in rows]
    per_step, per_micro_batch = V.packed_step_line(rows, values)
    assert per_step == pytest.approx(0.1, rel=1e-9)
    assert per_micro_batch == pytest.approx(0.005, rel=1e-9)


def test_step_line_needs_two_accumulation_counts():
    r = ROWS["M18"]
    with pytest.raises(ValueError, match="two gradient accumulation counts"):
        V.packed_step_line([r, replace(r, id="copy")], [r.published, r.published])


def test_mlperf_rows_follow_the_scripts_prefetch_depth_and_say_what_the_figure_holds():
    for rid in ("M17", "M18", "M19", "M20"):  # MLPerf v2.0 bert.py: defaultPrefetchBufferingDepth = 3
        assert ROWS[rid].setup.prefetch_depth == 3
        assert ROWS[rid].setup.options().prefetch_depth() == 3
        assert "prefetch depth 3" in ROWS[rid].setup.describe()
    for rid in ("M1", "M3", "M7", "M9", "M11"):  # v1.0 / v1.1 leave it at 1
        assert ROWS[rid].setup.prefetch_depth == 1
    mlperf_bert = [r for r in V.PUBLISHED_ROWS if r.source.startswith("MLP") and r.setup.model == "bert-large"]
    assert len(mlperf_bert) == 14
    assert all("mlperf-step" in r.notes for r in mlperf_bert)
    assert "mlperf-step" in V.DEPARTURES


# --- ResNet-50 (TF1 MLPerf configs): weight updates per session.run ----------------------------

def test_tf1_steps_per_call_is_a_fifth_of_an_epoch():
    # train.py: iterations_per_epoch = 1,281,167 // GBS, log_freq = that // logs_per_epoch (5)
    assert V.tf1_steps_per_call(10240) == 25  # POD256: 125 weight updates an epoch
    assert V.tf1_steps_per_call(5120) == 50
    assert V.tf1_steps_per_call(3520) == 72  # 363 // 5
    assert V.tf1_steps_per_call(1920) == 133
    assert V.tf1_steps_per_call(10240, logs_per_epoch=1) == 125
    assert V.tf1_steps_per_call(2_000_000) == 1  # never fewer than one


def test_tf1_resnet_rows_run_one_call_of_the_scripts_steps():
    tf1 = [r for r in V.PUBLISHED_ROWS if "tf1-calls" in r.notes]
    assert sorted(r.id for r in tf1) == sorted(["M5", "M6", "M13", "M14", "M15", "M16", "M23", "M24", "M25", "M26",
                                                "B3", "B13", "B15", "B16"])
    for r in tf1:
        gbs = r.setup.replicas * r.setup.accumulation * dict(r.setup.params)["micro_batch"]
        assert r.setup.device_iterations == V.tf1_steps_per_call(gbs), r.id
        assert r.setup.options().device_iterations == r.setup.device_iterations
    assert ROWS["B14"].setup.device_iterations == 1  # PyTorch: not the TF1 script
    assert "tf1-calls" in V.DEPARTURES


def test_resnet_step_table_holds_published_and_simulated_step_times():
    section = "\n".join(V._resnet_step_section())
    assert "### ResNet-50 MLPerf: time per step" in section
    for rid in V.RESNET_STEP_ROWS:
        r = ROWS[rid]
        gbs = r.setup.replicas * r.setup.accumulation * dict(r.setup.params)["micro_batch"]
        published, simulated = gbs / r.published * 1e3, gbs / r.simulated() * 1e3
        line = next(x for x in section.splitlines() if x.startswith(f"| {rid} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[4] == str(r.setup.device_iterations)
        assert float(cells[5].replace(",", "")) == pytest.approx(published, abs=0.051)
        assert float(cells[6].replace(",", "")) == pytest.approx(V.RESNET_CLEAN_STEP_MS[rid], abs=0.051)
        assert float(cells[7].replace(",", "")) == pytest.approx(simulated, abs=0.051)
        assert float(cells[9].replace(",", "")) == pytest.approx(published - simulated, abs=0.11)
        assert float(cells[10].replace(",", "")) == pytest.approx(V.RESNET_CLEAN_STEP_MS[rid] - simulated, abs=0.11)
        # the checkpoint-free epochs are never slower than the median of all of them
        assert V.RESNET_CLEAN_STEP_MS[rid] <= published + 0.2


def test_gradient_all_reduce_is_link_time_the_same_on_mk2_and_bow():
    # priced in seconds over the links: the same replicas take the same all-reduce time per
    # weight update whatever the IPU clock, and more replicas (more PODs) take longer
    per_step = {rid: V.update_collective_seconds(ROWS[rid].setup) for rid in ("M14", "M24", "M15", "M25", "M26")}
    assert per_step["M24"] == pytest.approx(per_step["M14"], rel=1e-3)
    assert per_step["M25"] == pytest.approx(per_step["M15"], rel=1e-3)
    assert per_step["M24"] < per_step["M25"] < per_step["M26"]


@pytest.mark.parametrize("pair", V.POD_PAIRS, ids=lambda p: "/".join(p[:2]))
def test_pod_pairs_run_the_same_work_per_replica(pair):
    """Each Pod16 / Pod64 pair runs one model, micro-batch and placement at one global batch (within the
    rounding of the accumulation: PyTorch BERT's 1,751 against 438) on one IPU generation, its accumulation
    4 x apart, so the line through its step times splits per micro-batch from per step; each runs its
    config's memory proportions."""
    small, large = (ROWS[i].setup for i in pair[:2])
    assert (small.system.endswith("pod16"), large.system.endswith("pod64")) == (True, True)
    assert small.system.split("-")[0] == large.system.split("-")[0]  # bow or ipu (Mk2)
    assert small.model == large.model and small.params == large.params
    assert small.accumulation / large.accumulation == pytest.approx(4, rel=0.001)
    assert small.accumulation * small.replicas == pytest.approx(large.accumulation * large.replicas, rel=0.001)


def test_published_lines_of_the_pod_pairs():
    """From the published throughputs alone (samples per step over samples/s): B10/B12 6.03 ms a
    micro-batch and 297 ms a step; B39/B41 (PyTorch, packed SL512) 7.56 ms and 582 ms; ViT-B/16 B22/B23
    4.07 ms and 267 ms."""
    lines = {}
    for pair in (("B10", "B12"), ("B39", "B41"), ("B22", "B23")):
        rows = [ROWS[i] for i in pair]
        lines[pair] = V.packed_step_line(rows, [r.published for r in rows])
    assert lines[("B10", "B12")] == (pytest.approx(0.297, abs=5e-4), pytest.approx(0.00603, abs=5e-6))
    assert lines[("B39", "B41")] == (pytest.approx(0.582, abs=5e-4), pytest.approx(0.00756, abs=5e-6))
    assert lines[("B22", "B23")] == (pytest.approx(0.2668, abs=5e-5), pytest.approx(0.004072, abs=5e-7))
