"""Calibration against published hardware figures (../shared/calibration/hardware.csv).

The checks and their tolerances (each with its reason) live in :mod:`sim.validation`, which
also writes reports/validation.md. Figures a constant was fitted to are held tightly (they
guard the fit); figures the model predicts are held to what such a prediction can promise.
"""

import csv

import numpy as np
from pathlib import Path

import pytest

from sim import validation
from sim.results import held_out

CSV = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "hardware.csv"


@pytest.mark.parametrize("check", validation.CHECKS + validation.VERTEX_CHECKS + validation.KERNEL_CHECKS
                         + validation.MICROBENCH_CHECKS + validation.CONV_HW_CHECKS,
                         ids=lambda c: f"{c.name}:{c.what}")
def test_published_figure(check):
    assert check.simulated() == pytest.approx(check.published, rel=check.tolerance), check.why


def test_figures_match_hardware_csv():
    """The published values copied into sim.validation are those of hardware.csv."""
    if not CSV.exists():
        pytest.skip(f"{CSV} not found")
    with open(CSV) as f:
        rows = {r["name"]: r["value"] for r in csv.DictReader(f)}
    for check in validation.CHECKS:
        if check.name == "overlap_io_profile":
            published = [float(v.replace("k", "")) for v in rows[check.name].split("/")]
            assert check.published in published
        else:
            assert float(rows[check.name]) == pytest.approx(check.published), check.name


def test_io_profile_ordering():
    """Each optimisation of the host-IO profile is faster than the one before."""
    cycles = [validation.io_bound_cycles(s) for s in ("none", "prefetch", "io_tiles")]
    assert cycles == sorted(cycles, reverse=True)


def test_tut6_is_host_bound():
    """What the tutorial reports: the run waits on the host (StreamCopyBegin); compute < 1 %."""
    run = validation.tut6()
    b = run.breakdown.loc[0]
    assert b["host_io"] / run.cycle_count > 0.99
    assert b.sum() == run.cycle_count


@pytest.mark.parametrize("check", validation.END_TO_END, ids=lambda c: c.name)
def test_end_to_end_throughput(check):
    """Published training throughputs: never fitted; 30 % because they come from another
    software stack and data pipeline (the test guards against regressions of the model)."""
    assert check.simulated() == pytest.approx(check.published, rel=check.tolerance), check.why


# --- held-out published measurements (docs/reference/published-results.md) --------------------
DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "published-results.md"


@pytest.mark.parametrize("row", [r for r in validation.PUBLISHED_ROWS if r.asserted], ids=lambda r: r.id)
def test_published_measurement(row):
    """Published measurements within 30 % when they were added (or within 25 % since:
    validation.PROMOTED), held at 30 % as regression guards:
    never fitted, and measured with another software stack and data pipeline. The rows outside
    30 % are not asserted; reports/validation.md tracks them ("tracked, outside 30 %")."""
    simulated = row.simulated()
    assert simulated == pytest.approx(row.published, rel=validation.PUBLISHED_TOLERANCE), (
        f"{row.source}: {validation.PUBLISHED_WHY}")
    # the error runs quote for workloads like this one (sim.results.held_out) is the model's current one
    stored = held_out.stored().set_index("id").loc[row.id]
    assert stored.simulated == pytest.approx(simulated, rel=1e-5), (
        f"{row.id}: sim/validation/held_out.csv is stale ({stored.simulated} stored, {simulated:.6g} now): "
        "rewrite it with python -m sim.validation")


@pytest.mark.parametrize("ratio", [r for r in validation.SCALING if r.asserted], ids=lambda r: r.name)
def test_scaling_ratio(ratio):
    """Scaling between two published runs (more replicas, larger batch, Mk2 to Bow): the ratio of the
    simulated throughputs within 30 % of the published ratio, as it was when added (a regression guard)."""
    assert ratio.simulated() == pytest.approx(ratio.published, rel=validation.PUBLISHED_TOLERANCE), (
        f"{ratio.source}: {validation.PUBLISHED_WHY}")


def test_published_rows_match_doc():
    """Each row's published value is the one in the doc's row of that id (master table)."""
    lines = DOC.read_text().splitlines()
    for row in validation.PUBLISHED_ROWS:
        doc_id = row.id.split()[0]
        line = next((l for l in lines if l.startswith(f"| {doc_id} |")), None)
        assert line is not None, f"{doc_id} is not a row of {DOC.name}"
        assert f"{row.published:.0f}" in line.replace(",", ""), f"{row.id}: {row.published} not in {line}"
        assert doc_id in row.source


# --- memory: published tile-memory figures ----------------------------------------------------
@pytest.mark.parametrize("row", [r for r in validation.MEMORY_ROWS if r.asserted], ids=lambda r: r.name)
def test_published_memory(row):
    """poplibs' published TotalMemory of a fully connected layer, held at 30 % once a row is within
    it (the others: reports/validation.md tracks them)."""
    assert row.simulated() == pytest.approx(row.published, rel=validation.MEMORY_TOLERANCE), validation.MEMORY_WHY


@pytest.mark.parametrize("name", validation.EMBEDDING_MEMORY_ROWS)
def test_published_embedding_memory(name):
    """poplibs' published TotalMemory of an embedding layer (table, lookup, scatter-add), held at 30 %
    (+24 % for the small table, likely its output and deltas kept live to the end by the simulator)."""
    row = validation.EmbeddingMemoryRow(name)
    assert row.simulated() == pytest.approx(row.published, rel=validation.MEMORY_TOLERANCE), validation.MEMORY_WHY


@pytest.mark.parametrize("name", [n for n in validation.POOLING_MEMORY_ROWS if validation.PoolingMemoryRow(n).asserted])
def test_published_pooling_memory(name):
    """poplibs' published TotalMemory of a max pool and its input gradient (four streamed tensors, the
    vertices' worklists, the windows each pass receives), held at 30 % once within 25 % (the others:
    reports/validation.md tracks them)."""
    row = validation.PoolingMemoryRow(name)
    assert row.simulated() == pytest.approx(row.published, rel=validation.MEMORY_TOLERANCE), validation.MEMORY_WHY


@pytest.mark.parametrize("name", [n for n in validation.RECURRENT_MEMORY_ROWS
                                  if validation.RecurrentMemoryRow(n).asserted])
def test_published_recurrent_memory(name):
    """poplibs' published TotalMemory of an LSTM, GRU or CTC-loss layer, held at 30 % once within 25 % (all 12
    since the fp32 LSTM training layer holds popnn's transposed weights: -28 -> +3 %)."""
    row = validation.RecurrentMemoryRow(name)
    assert row.simulated() == pytest.approx(row.published, rel=validation.MEMORY_TOLERANCE), validation.MEMORY_WHY


@pytest.mark.parametrize("row", [r for r in validation.KERAS_DENSE_ROWS if r.asserted], ids=lambda r: r.category)
def test_keras_dense_popvision_category(row):
    """A category of the published PopVision profile of a Keras Dense layer: the three fitted to it at
    2 % (a plan change that moves them means refitting), the predicted ones at 30 % once within it."""
    assert row.simulated() == pytest.approx(row.published, rel=row.tolerance), (row.category, row.how)


def test_keras_dense_categories_are_the_program_memory_model():
    """Every figure of the profile is computed, and the program categories are their constants times
    what the plan runs: codelets per working tile, exchange phases per receiving tile, steps on
    every tile (the matmul and the bias add share no codelet)."""
    ex = validation.keras_dense_executable()
    ipu, m = ex.system.ipu, ex.memory[0]
    assert [r.category for r in validation.KERAS_DENSE_ROWS] == [
        "vertexCode", "internalExchangeCode", "vertexInstanceState", "controlCode", "maxLive", "parameter",
        "totalMemory", "cycleEst"]
    assert all(r.simulated() > 0 for r in validation.KERAS_DENSE_ROWS)
    costs = list(ex.costs.values())
    works = [int((c.profile.compute > 0).sum()) for c in costs]
    receives = [int((c.profile.bytes_in > 0).sum()) for c in costs]
    phases = [round(c.exchange_setup_cycles / ipu.exchange_setup_cycles) for c in costs]
    steps = sum(c.supersteps for c in costs) + sum(phases)
    assert m.by_role["vertex_code"] == ipu.vertex_code_bytes_per_codelet * sum(
        c.supersteps * w for c, w in zip(costs, works))
    assert m.by_role["vertex_state"] == ipu.vertex_state_bytes_per_vertex * sum(
        c.supersteps * w for c, w in zip(costs, works))
    assert m.by_role["exchange_code"] == ipu.exchange_code_bytes_per_phase * sum(p * r for p, r in zip(phases, receives))
    assert validation.keras_dense_control_code(ex) == pytest.approx(ipu.control_code_bytes_per_step * steps * ex.tiles, abs=1)  # whole bytes
    assert m.by_role["weight"] == 4 * (4096 * 1024 + 1024)  # kernel and bias, fp32
    assert m.by_role["reserved"] == sum(m.by_role[k] for k in (
        "control_code", "vertex_code", "vertex_state", "exchange_code", "stack"))
    lines = validation._keras_dense_section()
    assert "### PopVision memory report of a Keras Dense layer" in lines
    assert any(line.startswith("| vertexCode | 3,565,158 B |") for line in lines)


@pytest.mark.parametrize("row", [r for r in validation.LAYER_MEMORY_ROWS if r.asserted], ids=lambda r: r.name)
def test_published_layer_memory(row):
    """poplibs' published TotalMemory of a convolution, octave-convolution or gemm layer (program code
    included: these tools compile it), held at 30 % once within 25 % (the others are tracked in
    reports/validation.md)."""
    assert row.simulated() == pytest.approx(row.published, rel=validation.MEMORY_TOLERANCE), validation.MEMORY_WHY


def test_layer_memory_rows_count_the_code_their_tools_compile():
    """Every gemm, convolution and octave-convolution row is compared, with the program code (its tool
    compiles it); the fully connected tool's rows without it; 36 rows more than 25 % off are tracked."""
    rows = validation.LAYER_MEMORY_ROWS
    assert len(rows) == 143 and {r.tool for r in rows} == set(validation.COMPILED_TOOLS) == {"conv", "oct", "gemm"}
    assert len(validation.LAYER_MEMORY_TRACKED) == 29 and validation.LAYER_MEMORY_TRACKED <= {r.name for r in rows}
    row = next(r for r in rows if r.name == "resnet50_tr_bs4_cnv")
    m = row.memory()
    assert row.simulated() == m.total_bytes and not validation.counted_code_bytes("conv", m).any()
    fc = validation.counted_code_bytes("fc", m)
    assert fc.sum() == pytest.approx(sum(m.tile_category(c).sum() for c in validation.UNCOMPILED_CODE))
    lines = validation._layer_memory_section()
    assert "### Convolution, octave-convolution and gemm layers" in lines
    assert any(line.startswith("| `resnet50_tr_bs4_cnv` | conv | ") for line in lines)


@pytest.mark.parametrize("row", [r for r in validation.MK1_MEMORY_ROWS if r.asserted], ids=lambda r: r.name)
def test_published_mk1_memory(row):
    """poplibs' IpuModel1 TotalMemory of a fully connected, pooling, convolution, octave-convolution or gemm layer
    on one Mk1 IPU, held at 30 % once within 25 % (the others are tracked in reports/validation.md)."""
    assert row.simulated() == pytest.approx(row.published, rel=validation.MEMORY_TOLERANCE), validation.MEMORY_WHY


def test_mk1_layers_that_do_not_fit_a_tile():
    """Six Mk1 rows whose fullest tile Poplar puts over the 256 KiB tile: the simulator fits them all
    (61-95 % of a tile; the two largest gemms near 94 %), the same leniency as on Mk2
    (reports/validation.md, "The fullest tile")."""
    rows = validation.MK1_MEMORY_ROWS
    assert len(rows) == 204 and len(validation.MK1_MEMORY_TRACKED) == 24
    over = {r.name: r.memory().peak_tile_bytes / 262144 for r in rows if r.published_max > 262144}
    assert sorted(over) == ["gemm_1000x256x30000", "gemm_1000x512x20000", "gemm_1000x512x30000",
                            "gemm_600x512x30000", "vgg16_tr_bs4_v1L1", "vgg16_tr_bs4_v2L1"]
    assert all(0.6 < share < 0.95 for share in over.values())
    lines = validation._mk1_memory_section()
    assert "### Mk1 (GC2): the same layers' memory on Poplar's IPUModel1" in lines
    assert "the simulator fits 6 of them" in lines[3]


def test_fullest_tile_rows_read_maxtilememory_where_it_measures_bytes():
    """poplibs' MaxTileMemory of the rows whose mean tile holds over 290 KB: Poplar's fullest tile is
    8-15 % above its mean there, the simulator's within 4 % of its own (each tensor spread evenly, the
    plans' blocks in whole channel groups), so where the means agree within 5 % its fullest tile is 6-13 %
    short (reported, not asserted against
    the published figure: tracked in reports/validation.md, "The fullest tile")."""
    rows = validation.fullest_tile_rows()
    assert [r.name for r in rows] == [
        "gemm_1000x512x30000", "gemm_1000x512x20000", "gemm_1000x512x10000", "gemm_600x512x30000",
        "gemm_1000x256x30000", "vgg16_tr_bs4_v2L1", "gemm_600x256x20000", "gemm_600x512x10000",
        "vgg16_tr_bs4_v3L1"]
    first = rows[0]
    assert (first.published_max, round(first.published_mean)) == (460824, round(621_957_560 / 1472))
    assert all(0.08 <= r.published_excess <= 0.15 for r in rows)
    # the band the compiler's near-capacity note quotes is these rows' lowest and highest excess
    from sim.compiler.memory import FULLEST_TILE_EXCESS
    excess = [r.published_excess for r in rows]
    assert FULLEST_TILE_EXCESS == (round(min(excess), 2), round(max(excess), 2))
    assert all(0 <= r.simulated_excess < 0.04 for r in rows)
    agree = [r for r in rows if abs(r.simulated_mean / r.published_mean - 1) <= 0.05]
    assert len(agree) == 6 and all(-0.14 < r.error < -0.05 for r in agree)
    lines = validation._fullest_tile_section({"ran at 95 %": 0.95, "ran at 85 %": 0.85}, {"did not fit": 0.9})
    assert "### The fullest tile" in lines
    assert any(line.startswith("| `gemm_1000x512x30000` | 460,824 B |") for line in lines)
    # a 12 % margin (the median) puts 0.95 over and leaves 0.85 under, and catches 0.9
    assert "put 1 of the 2 configurations that ran on hardware out of memory (ran at 95 % 95%;" in lines[3]
    assert ("catch 1 of the 1 that did not fit (PopRT's ResNet-50 and BERT-Base points and the Mk1 layers "
            "above: did not fit 90%)") in lines[3]


def test_fc_rows_are_compared_without_the_code_they_do_not_count():
    """The fully connected tool's TotalMemory counts no program code (an IPUModel profile without
    compiled code): the simulated figure is the tiles' peaks less exactly the control code, vertex
    code, exchange code and stacks, and keeps the vertex state."""
    row = next(r for r in validation.MEMORY_ROWS if r.name == "fc_layer_1_1000_1000_half")
    m = row.memory()
    code = {c: m.tile_category(c).sum() for c in validation.UNCOMPILED_CODE}
    assert validation.UNCOMPILED_CODE == ("control_code", "vertex_code", "exchange_code", "stack")
    assert all(b > 0 for b in code.values()) and m.tile_category("vertex_state").sum() > 0
    assert row.code_bytes() == round(sum(code.values()))
    assert row.simulated() == m.total_bytes - row.code_bytes()
    # what is left is the layer's data: its weights and their gradient (2 MB each) and the rest
    assert 4_000_000 < row.simulated() < m.total_bytes - 5_000_000


def test_fc_layer_graph_holds_the_tools_tensors():
    """The fully connected layer benchmark: weights always live, the four activations counted once,
    and the total is the sum of every tile's peak (poplibs' TotalMemory)."""
    row = validation.MEMORY_ROWS[0]
    m = row.memory()
    assert m.by_role["weight"] == row.inputs * row.outputs * 2
    assert m.total_bytes == int(m.peak.sum()) > row.tensor_bytes + m.by_role["reserved"]
    assert any(f"`{row.name}`" in line and f"{row.published:,} B" in line for line in validation._memory_rows())
    line, _ = validation._fit_line(*next(entry for entry in validation.MEMORY_FITS if entry[0] == "GCN-P B10"))
    assert "fits; fullest tile" in line


def test_gather_and_scatter_add_against_the_bow_sweep():
    """Graphcore's gather / scatter-add cycle sweep on a Bow IPU (sim.validation.gather_scatter, a
    third of its rows here). Gathers: median within 10 % and every row within 0.8-1.6 (the smallest
    loops run up to 45 % slow: fixed costs of the loop and the lookup; before the split dictionary's
    second-stage indices were priced as popops runs them, those rows reached 0.50). Scatter-adds:
    median within 10 %, every row within 0.75-1.5 (before the zeroed table was priced at the rate
    fitted on the sweep's other rows, configs/_vector-ops.toml ``table_zero``, updates into a large
    table reached 0.45; the smallest updates into several lookup groups run up to 45 % slow). The
    spread is what remains unexplained, not noise; the bounds hold it from widening."""
    bounds = {"gather": (0.10, 0.8, 1.6), "scatter_add": (0.10, 0.75, 1.5)}
    for op, ratio in validation.gather_scatter.ratios(every=3).items():
        median, low, high = bounds[op]
        assert abs(float(np.median(ratio)) - 1) <= median, (op, np.median(ratio))
        assert low <= ratio.min() and ratio.max() <= high, (op, ratio.min(), ratio.max())


def test_schnet_training_on_qm9_against_the_bow_strong_scaling_sweep():
    """hydronet-gnn's SchNet training on QM9 (sim.validation.schnet_training): the measured seconds a call
    fall as L + D / replicas over 1-16 replicas (within 3 %: the host's loading and the device's work); the
    simulator's calls fall the same way (within 6 %: its all-reduce grows with the replicas), and its device work D comes out 1.5 times the measured (the
    interaction block's forward alone is 0.89 of its measured cycles), held within 1.3-1.8 so the gap does not
    widen unseen; its time a call not shared is the weight update and the host transfers, under the
    measured 9.8 ms, which also holds the host's loading."""
    st = validation.schnet_training
    shared, device = st.line()
    for replicas, _, seconds, _ in st.rows():
        if replicas in st.LINE_REPLICAS:
            assert abs((shared + device / replicas) / (seconds / st.CALLS) - 1) < 0.035, replicas
    sim_shared, sim_device = st.simulated_line()
    assert 1.3 <= sim_device / device <= 1.8, sim_device / device
    assert 0 < sim_shared < shared
    for replicas in st.LINE_REPLICAS:
        fitted = sim_shared + sim_device / replicas
        assert abs(fitted / st.simulated_call_seconds(replicas) - 1) < 0.06, replicas


def test_schnet_block_and_a_small_memory_proportion_against_the_bow_sweeps():
    """hydronet-gnn's SchNet interaction-block sweep on a Bow IPU (sim.validation.schnet_block, a twelfth
    of its rows here, and two of the blocks measured at both proportions; the report has them all): some 40 ops an iteration, fp32, come out about 10 % fast (median 0.89, 0.86-0.99 over
    the report's rows: a fixed cost an op or an iteration the simulator lacks), held within 15 % and each
    row within 0.8-1.1. And what availableMemoryProportion 0.1, set as PopTorch sets it on every op, does
    to the cycles, against what it did on the hardware (the rows it slowed by 20 % or more), the simulated
    factor over the measured: a block's matmuls, lookups and scatters within 0.85-1.2, the scatter-adds within 0.85-1.35 (they
    come out about 1.25: their plans under the budget price dearer than measured), the gathers within
    0.5-1.05 (the largest plan's slow-down comes out at 0.57 of the measured). Before the lookups and
    scatters were planned within the op's proportion none of them moved, and a block came out 0.78 of
    its measured cycles at 0.1."""
    ratio = validation.schnet_block.block_ratios(every=12)
    assert abs(float(np.median(ratio)) - 1) <= 0.15, np.median(ratio)
    assert 0.8 <= ratio.min() and ratio.max() <= 1.1, (ratio.min(), ratio.max())
    bounds = {"gather": (0.5, 1.05), "scatter_add": (0.85, 1.35), "schnet_block": (0.85, 1.2)}
    effects = (validation.schnet_block.proportion_effects(("gather", "scatter_add"))
               + validation.schnet_block.proportion_effects(("schnet_block",), every=10))
    assert {e[0] for e in effects} == set(bounds) and len(effects) == 11
    for op, n, f, e, measured, simulated in effects:
        low, high = bounds[op]
        assert simulated > 1.1, (op, n, f, e, simulated)  # the budget does cost cycles
        assert low <= simulated / measured <= high, (op, n, f, e, measured, simulated)
