"""trace.json: the run's trace in the Chrome trace-event format (Perfetto, chrome://tracing).

A schema check of the format (required keys per phase, times, metadata for every process and
thread, slices that nest on each thread, flow start/finish pairs inside their slices), then
the events against ``Run.trace``: the same tasks, per IPU and kind, with the same total time,
and a flow per transfer of each inter-IPU copy, from its source IPU to its destination.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import pytest

import models
import sim
from sim.options import OverlapMode
from sim.results.chrome_trace import KINDS, chrome_trace
from sim.strategy import ShardedExecution

METADATA = {"process_name": "name", "process_sort_index": "sort_index", "thread_name": "name",
            "thread_sort_index": "sort_index"}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_chrome_trace(doc: dict) -> None:
    """Raise AssertionError where ``doc`` breaks the trace-event format (JSON object form)."""
    assert set(doc) >= {"traceEvents", "displayTimeUnit"}
    assert doc["displayTimeUnit"] in ("ms", "ns")
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    processes, threads = set(), set()
    slices, flows = defaultdict(list), defaultdict(list)
    for e in events:
        assert isinstance(e.get("name"), str) and isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), e
        ph = e["ph"]
        if ph == "M":
            assert e["name"] in METADATA and METADATA[e["name"]] in e["args"], e
            if e["name"] == "process_name":
                processes.add(e["pid"])
            elif e["name"] == "thread_name":
                threads.add((e["pid"], e["tid"]))
            continue
        assert _number(e["ts"]) and e["ts"] >= 0, e
        if ph == "X":
            assert _number(e["dur"]) and e["dur"] >= 0, e
            assert isinstance(e.get("cat"), str) and isinstance(e.get("args"), dict), e
            slices[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
        elif ph in ("s", "f"):
            assert isinstance(e["id"], int) and isinstance(e.get("cat"), str), e
            assert ph == "s" or e.get("bp") == "e", e  # the finish binds to its enclosing slice
            flows[e["id"]].append(e)
        else:
            raise AssertionError(f"unexpected phase {ph!r}")
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] != "M"}
    assert {pid for pid, _ in used} <= processes
    assert used <= threads, f"threads without thread_name: {sorted(used - threads)[:5]}"
    for key, spans in slices.items():  # slices on one thread nest (here: never overlap)
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-9, f"overlapping slices on thread {key}"
    for fid, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], f"flow {fid}: {[e['ph'] for e in pair]}"
        s, f = sorted(pair, key=lambda e: e["ph"] != "s")
        assert s["ts"] <= f["ts"] and s["name"] == f["name"]
        for e in pair:  # each end lies inside a slice of its thread
            assert any(a - 1e-9 <= e["ts"] <= b + 1e-9 for a, b in slices[e["pid"], e["tid"]]), e


@pytest.fixture(scope="module")
def pipeline():
    """BERT-base, 2 layers on a 2-IPU pipeline, training: copies both ways; 4 replicas on a
    POD16, 2 of them simulated."""
    g = models.get("bert-base", num_layers=2, seq_len=64, micro_batch=1, layers_per_ipu=[1, 1])
    o = sim.Options().replicationFactor(4)
    o.Training.gradientAccumulation(6)
    run = sim.simulate(g, "ipu-pod16", o, training=True, optimizer="sgd")
    assert len(run.executable.simulated_replicas) < run.executable.replicas
    return run


def _per_ipu_kind(doc) -> tuple[Counter, Counter]:
    count, dur = Counter(), Counter()
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            count[e["pid"] - 1, e["cat"]] += 1
            dur[e["pid"] - 1, e["cat"]] += e["dur"]
    return count, dur


@pytest.mark.parametrize("all_replicas", [True, False])
def test_events_are_the_trace_per_ipu_and_kind(pipeline, all_replicas):
    doc = chrome_trace(pipeline, all_replicas=all_replicas)
    check_chrome_trace(doc)
    json.loads(json.dumps(doc, allow_nan=False))  # plain JSON
    trace = pipeline.trace_all_replicas() if all_replicas else pipeline.trace
    count, dur = _per_ipu_kind(doc)
    us = 1e6 / pipeline.executable.system.ipu.clock_hz
    expected = trace.groupby(["ipu", "kind"])["cycles"].agg(["count", "sum"])
    assert dict(count) == {k: int(v) for k, v in expected["count"].items()}
    for key, cycles in expected["sum"].items():
        assert dur[key] == pytest.approx(cycles * us, rel=1e-12)
    names = {e["pid"] - 1: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    k = pipeline.executable.ipus_per_replica
    if all_replicas:
        assert names == {i: f"IPU {i} (replica {i // k})" for i in range(pipeline.executable.replicas * k)}
    else:
        assert names == {i: f"IPU {i} (replica {i // k}, stands for 2 replicas)" for i in pipeline.executable.ipus}
    assert doc["otherData"]["cycle_count"] == pipeline.cycle_count


def test_each_slice_carries_its_cycles_bytes_and_time(pipeline):
    doc = chrome_trace(pipeline, all_replicas=False)
    us = 1e6 / pipeline.executable.system.ipu.clock_hz
    slices = sorted(((e["pid"] - 1, e["args"]["start_cycle"], e["name"], e["args"]["cycles"], e["args"]["bytes"],
                      e["cat"]) for e in doc["traceEvents"] if e["ph"] == "X"))
    rows = sorted(pipeline.trace[["ipu", "start", "name", "cycles", "bytes", "kind"]].itertuples(index=False, name=None))
    assert slices == [tuple(int(x) if not isinstance(x, str) else x for x in r) for r in rows]
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            assert e["ts"] == e["args"]["start_cycle"] * us and e["dur"] == pytest.approx(e["args"]["cycles"] * us)
            assert e["tid"] % 100 == KINDS[e["cat"]][0]


def test_a_flow_per_transfer_from_source_to_destination(pipeline):
    transfers = pipeline.inter_ipu_transfers()
    copies = pipeline.trace[pipeline.trace["kind"] == "inter_ipu"]
    # a merged copy's bytes are its transfers' (each IPU of the copy has the copy's row)
    per_copy = transfers.groupby(["start", "end"])["bytes"].sum()
    for (start, end), rows in copies.groupby(["start", "end"]):
        assert set(rows["bytes"]) == {per_copy[start, end]}
    assert {(0, 1), (1, 0)} <= set(zip(transfers["src"] % 2, transfers["dst"] % 2))  # both ways in training
    for all_replicas, factor in ((False, 1), (True, 2)):  # 4 replicas from 2 simulated
        doc = chrome_trace(pipeline, all_replicas=all_replicas)
        starts = [e for e in doc["traceEvents"] if e["ph"] == "s"]
        ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
        assert len(starts) == len(ends) == factor * len(transfers)
        pairs = Counter((s["pid"] - 1, ends[s["id"]]["pid"] - 1) for s in starts)
        assert all(s["args"]["src_ipu"] == s["pid"] - 1 and s["args"]["dst_ipu"] == ends[s["id"]]["pid"] - 1
                   for s in starts)
        expected = Counter(zip(transfers["src"], transfers["dst"]))
        if all_replicas:
            expected = expected + Counter({(s + 4, d + 4): n for (s, d), n in expected.items()})
        assert pairs == expected


def test_overlapping_tasks_of_one_kind_get_their_own_threads():
    g = models.get("mlp")
    for name in g.inputs + g.outputs:
        g.overlap[name] = int(OverlapMode.OverlapDeviceIterationLoop)
    opts = sim.Options().deviceIterations(8).setExecutionStrategy(ShardedExecution())
    opts.TensorLocations.numIOTiles(32)
    opts._Popart.set("defaultPrefetchBufferingDepth", 2)
    run = sim.simulate(g, "ipu-mk2", opts)
    doc = run.chrome_trace()
    check_chrome_trace(doc)  # slices of one thread never overlap
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"compute", "host IO on the IO tiles", "host side of host IO", "host side of host IO #2"} <= threads
    count, _ = _per_ipu_kind(doc)
    assert sum(count.values()) == len(run.trace)


def test_the_checker_rejects_broken_traces(pipeline):
    doc = chrome_trace(pipeline, all_replicas=False)
    events = doc["traceEvents"]
    broken = [
        {**doc, "traceEvents": [e for e in events if e["name"] != "thread_name"]},  # threads without names
        {**doc, "traceEvents": [e for e in events if e["ph"] != "f"]},  # flows without finish
        {**doc, "traceEvents": events + [{**next(e for e in events if e["ph"] == "X"), "dur": -1.0}]},
        {"traceEvents": events},  # no displayTimeUnit
    ]
    for bad in broken:
        with pytest.raises(AssertionError):
            check_chrome_trace(bad)
