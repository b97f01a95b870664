"""The faster paths of a run's results give exactly what the plain ones gave.

``Run.op_trace`` gathers each column once (no pandas sort, no block merge), ``Run.trace_all_replicas``
and ``chrome_trace``'s expanded flows take every replica's rows with one gather, ``chrome_trace``
walks the sorted trace by group bounds, and trace.json is written by ``chrome_trace_json`` straight
from the trace's columns. Each is checked against the plain computation (the earlier code, kept
here as the reference): the same frames (values, dtypes, index) and the same JSON text, byte for byte.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import models
import sim
from sim.options import OverlapMode
from sim.results.chrome_trace import chrome_trace, chrome_trace_json
from sim.results.report import write_outputs
from sim.results.run import OP_TRACE_COLUMNS, _op_rows
from sim.strategy import ShardedExecution


@pytest.fixture(scope="module")
def pipeline():
    """BERT-base, 2 layers on a 2-IPU pipeline, training with accumulation 6: copies both ways,
    repeated work; 4 replicas on a POD16, 2 of them simulated."""
    g = models.get("bert-base", num_layers=2, seq_len=64, micro_batch=1, layers_per_ipu=[1, 1])
    o = sim.Options().replicationFactor(4).deviceIterations(3)
    o.Training.gradientAccumulation(6)
    run = sim.simulate(g, "ipu-pod16", o, training=True, optimizer="sgd")
    assert len(run.executable.simulated_replicas) < run.executable.replicas
    return run


@pytest.fixture(scope="module")
def overlapped():
    """An MLP with its IO overlapped on IO tiles and 8 device iterations: tasks of one kind overlap."""
    g = models.get("mlp")
    for name in g.inputs + g.outputs:
        g.overlap[name] = int(OverlapMode.OverlapDeviceIterationLoop)
    opts = sim.Options().deviceIterations(8).setExecutionStrategy(ShardedExecution())
    opts.TensorLocations.numIOTiles(32)
    opts._Popart.set("defaultPrefetchBufferingDepth", 2)
    return sim.simulate(g, "ipu-mk2", opts)


def _plain_op_trace(run, expand: bool) -> pd.DataFrame:
    """The op trace as it was built before: each chunk's rows gathered, concatenated, then sorted
    by start with pandas (stable)."""
    columns = OP_TRACE_COLUMNS + ([] if expand else ["repeats"])
    pieces = []
    for r in run.timeline.records:
        got = _op_rows(r, expand)
        if got is None:
            continue
        values, index, start = got
        piece = {c: values[c][index] for c in columns if c not in ("start", "end")}
        piece["start"], piece["end"] = start, start + values["cycles"][index]
        pieces.append(piece)
    df = pd.DataFrame({c: np.concatenate([p[c] for p in pieces]) for c in columns})
    return df.sort_values("start", kind="stable").reset_index(drop=True)


def _plain_all_replicas(run) -> pd.DataFrame:
    """``trace_all_replicas`` as a frame per replica, concatenated, then sorted."""
    ex = run.executable
    simulated, base, frames = ex.simulated_replicas, run.trace, []
    for r in range(ex.replicas):
        source = simulated[r % len(simulated)]
        rows = base[base["replica"] == source].copy()
        rows["ipu"] = rows["ipu"] - source * ex.ipus_per_replica + r * ex.ipus_per_replica
        rows["replica"] = r
        frames.append(rows)
    df = pd.concat(frames, ignore_index=True)
    df["represents"] = 1
    return df.sort_values(["start", "ipu"], kind="stable").reset_index(drop=True)


def _dumps(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize("expand", [False, True])
def test_op_trace_is_the_plain_one(pipeline, overlapped, expand):
    for run in (pipeline, overlapped):
        fast = run.op_trace(expand=expand)
        pd.testing.assert_frame_equal(fast, _plain_op_trace(run, expand), check_exact=True)
        assert list(fast.columns) == OP_TRACE_COLUMNS + ([] if expand else ["repeats"])
        assert isinstance(fast.index, pd.RangeIndex)
        assert fast["start"].is_monotonic_increasing
    expanded = pipeline.op_trace(expand=True)
    assert len(expanded) == int(pipeline.op_trace()["repeats"].sum())  # every run written out


def test_an_op_trace_already_in_order_is_the_plain_one(overlapped):
    one = sim.simulate(models.get("mlp"), "ipu-mk2", sim.Options())
    for run in (one, overlapped):
        pd.testing.assert_frame_equal(run.op_trace(), _plain_op_trace(run, False), check_exact=True)


def test_trace_all_replicas_is_the_plain_one(pipeline):
    fast = pipeline.trace_all_replicas()
    pd.testing.assert_frame_equal(fast, _plain_all_replicas(pipeline), check_exact=True)
    assert len(fast) == len(pipeline.trace) * 2  # 4 replicas from 2 simulated


def test_expanded_flows_are_each_replicas_own(pipeline):
    k = pipeline.executable.ipus_per_replica
    simulated = pipeline.executable.simulated_replicas
    transfers = pipeline.inter_ipu_transfers()
    expected = []
    for r in range(pipeline.executable.replicas):
        source = simulated[r % len(simulated)]
        for src, dst, s in zip(transfers["src"], transfers["dst"], transfers["start"]):
            if src // k == source:
                expected.append((int(src) + (r - source) * k, int(dst) + (r - source) * k, int(s)))
    doc = chrome_trace(pipeline, all_replicas=True)
    us = 1e6 / pipeline.executable.system.ipu.clock_hz
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    assert [(e["args"]["src_ipu"], e["args"]["dst_ipu"], e["ts"]) for e in starts] == [
        (s, d, t * us) for s, d, t in expected]
    assert [e["id"] for e in starts] == list(range(1, len(starts) + 1))


@pytest.mark.parametrize("all_replicas", [None, True, False])
def test_trace_json_text_is_json_dumps_of_the_dict(pipeline, overlapped, all_replicas):
    for run in (pipeline, overlapped):
        text = chrome_trace_json(run, all_replicas=all_replicas)
        assert text == _dumps(chrome_trace(run, all_replicas=all_replicas))


def test_trace_json_text_escapes_names_as_json_does():
    o = sim.Options().replicationFactor(4)
    o.Training.gradientAccumulation(6)
    run = sim.simulate(models.get("bert-base", num_layers=2, seq_len=64, micro_batch=1, layers_per_ipu=[1, 1]),
                       "ipu-pod16", o, training=True, optimizer="sgd")
    odd = ['a "quoted" name', "back\\slash", "tab\there", "new\nline", "caf\u00e9 \u2192 \U0001f600", "\x01"]
    trace = run.trace.copy()
    trace["name"] = [odd[i % len(odd)] + str(n) for i, n in enumerate(trace["name"])]
    run.__dict__["trace"] = trace  # the cached property, replaced
    for all_replicas in (True, False):
        text = chrome_trace_json(run, all_replicas=all_replicas)
        assert text == _dumps(chrome_trace(run, all_replicas=all_replicas))
        assert text.isascii()
        names = {e["name"] for e in json.loads(text)["traceEvents"] if e["ph"] == "X"}
        assert names == set(trace["name"])


def test_written_trace_json_is_the_dict_dumped(pipeline, tmp_path):
    write_outputs(pipeline, tmp_path / "out")
    assert (tmp_path / "out" / "trace.json").read_text(encoding="utf-8") == _dumps(pipeline.chrome_trace())
    ops = pd.read_csv(tmp_path / "out" / "ops.csv")
    assert len(ops) == len(pipeline.op_trace())
