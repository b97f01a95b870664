"""A run's trace in the Chrome trace-event format, for Perfetto (ui.perfetto.dev) or chrome://tracing.

The format is Google's "Trace Event Format" (a JSON object with ``traceEvents``): here each
IPU is a process (``pid``: system IPU index + 1, named "IPU i (replica r)"), each kind of task
of :attr:`Run.trace` a thread of it (``tid``: see :data:`KINDS`; kinds whose tasks overlap in
time on one IPU get extra threads, "host IO #2", ..., so every thread's slices nest), each
trace row a complete event (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds of
simulated time (cycles / the IPU clock), and each transfer of an inter-IPU copy a flow
(``"ph": "s"`` on the source IPU, ``"ph": "f"`` on the destination, same ``id``) at the
copy's start. ``args`` of a slice hold its cycles, start cycle, bytes, kind and replica.
"""

from __future__ import annotations

import json
import math

import numpy as np

#: task kind -> (thread id, thread name); kinds not listed get ids after these, in name order
KINDS = {"compute": (1, "compute"), "sync": (2, "sync"), "inter_ipu": (3, "inter-IPU copy"),
         "collective": (4, "collective"), "host_io": (5, "host IO"),
         "host_io_overlapped": (6, "host IO on the IO tiles"), "host_prefetch": (7, "host side of host IO"),
         "remote_io": (8, "streaming memory"), "remote_io_overlapped": (9, "streaming memory on the IO tiles")}
#: threads per kind before the next kind's ids (overlapping tasks of one kind on one IPU)
LANES_PER_KIND = 100
#: expand every replica (``all_replicas=None``) only while the written-out trace has at most
#: this many rows; above it only the simulated replicas are written (each stands for others)
MAX_EXPANDED_ROWS = 100_000


def _lanes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A lane per task (tasks given sorted by start) so that tasks in one lane never overlap:
    each task goes to the first lane free by its start."""
    free_at: list[int] = []
    lane = np.empty(len(starts), dtype=np.int64)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        for j, f in enumerate(free_at):
            if f <= s:
                free_at[j] = e
                lane[i] = j
                break
        else:
            lane[i] = len(free_at)
            free_at.append(e)
    return lane


def chrome_trace(run, all_replicas: bool | None = None) -> dict:
    """``run``'s trace as a Chrome trace-event JSON object (a dict; see the module docstring).

    ``all_replicas``: True writes every replica out (:meth:`Run.trace_all_replicas`), False only
    the simulated ones (each process then says how many replicas it stands for), None (the
    default) every replica when that is at most :data:`MAX_EXPANDED_ROWS` rows, else the
    simulated ones. ``otherData`` records which, with the model, system, clock and cycle count.
    Times (``ts``, ``dur``) in microseconds of simulated time.
    """
    return json.loads(chrome_trace_json(run, all_replicas))


def chrome_trace_json(run, all_replicas: bool | None = None) -> str:
    """The text of trace.json: :func:`chrome_trace`'s object as ``json.dumps(..., separators=(",", ":"),
    allow_nan=False)`` writes it, without building a dict per slice: each slice (most of the events) is
    formatted straight from the trace's columns."""
    head, items = _chrome_trace(run, all_replicas)
    empty = json.dumps(head, separators=(",", ":"), allow_nan=False)
    prefix = '{"traceEvents":[]'
    assert empty.startswith(prefix)
    return '{"traceEvents":[' + ",".join(items) + "]" + empty[len(prefix):]


#: a slice ("ph": "X") as ``json.dumps`` writes its dict (compact separators):
#: name, cat (JSON strings), pid, tid, ts, dur (floats, by ``repr`` as json writes them), cycles,
#: start_cycle, bytes, kind (a JSON string), replica
_SLICE = ('{"ph":"X","name":%s,"cat":%s,"pid":%d,"tid":%d,"ts":%r,"dur":%r,"args":{"cycles":%d,'
          '"start_cycle":%d,"bytes":%d,"kind":%s,"replica":%d}}')

#: a flow's start and end ("ph": "s" / "f") as ``json.dumps`` writes them: name (a JSON string),
#: id, ts (microseconds, a float by ``repr``), pid, tid, then the start's bytes, src_ipu, dst_ipu
_FLOW_START = ('{"ph":"s","name":%s,"cat":"inter_ipu","id":%d,"ts":%r,"pid":%d,"tid":%d,'
               '"args":{"bytes":%d,"src_ipu":%d,"dst_ipu":%d}}')
_FLOW_END = '{"ph":"f","bp":"e","name":%s,"cat":"inter_ipu","id":%d,"ts":%r,"pid":%d,"tid":%d}'


def _chrome_trace(run, all_replicas: bool | None) -> tuple[dict, list[str]]:
    """(:func:`chrome_trace`'s object with an empty ``traceEvents``, the events' JSON texts in order)."""
    from .replicas import replica_rows

    ex = run.executable
    clock = float(ex.system.ipu.clock_hz)
    us = 1e6 / clock  # microseconds per cycle
    if not math.isfinite(us):  # as json.dumps(..., allow_nan=False) refuses it
        raise ValueError(f"Out of range float values are not JSON compliant: {us!r}")
    encode = json.encoder.encode_basestring_ascii  # a str as json.dumps writes it (ensure_ascii)
    base = run.trace
    replicas, simulated = ex.replicas, list(ex.simulated_replicas)
    if all_replicas is None:
        rows_per_simulated = len(base) / max(len(simulated), 1)
        all_replicas = replicas > len(simulated) and rows_per_simulated * replicas <= MAX_EXPANDED_ROWS
    expand = bool(all_replicas) and replicas > len(simulated)
    trace = run.trace_all_replicas() if expand else base
    k = ex.ipus_per_replica

    transfers = run.inter_ipu_transfers()
    columns = ("name", "src", "dst", "bytes", "start", "end")
    flow_rows = {c: transfers[c].tolist() for c in columns}
    if expand and len(transfers):  # replica r's copies are its source's, shifted to its own IPUs
        src = transfers["src"].to_numpy()
        index, _, shift = replica_rows(src // k, simulated, replicas)
        flow_rows = {c: transfers[c].to_numpy()[index] for c in columns}
        for c in ("src", "dst"):
            flow_rows[c] = flow_rows[c] + shift * k
        flow_rows = {c: v.tolist() for c, v in flow_rows.items()}

    others = sorted(set(trace["kind"].unique().tolist()) - set(KINDS))
    kind_tid = {kd: tid for kd, (tid, _) in KINDS.items()} | {kd: len(KINDS) + 1 + i for i, kd in enumerate(others)}
    kind_name = {kd: name for kd, (_, name) in KINDS.items()} | {kd: kd.replace("_", " ") for kd in others}

    events: list = []  # dicts (metadata, few) and JSON texts (slices and flows)
    ipus = set(ex.ipus)  # every IPU simulated has a process, busy or not
    if expand:  # replica r runs on the IPUs of its simulated source, shifted to its own
        ipus = {i + (r - simulated[r % len(simulated)]) * k for r in range(replicas)
                for i in ex.ipus if i // k == simulated[r % len(simulated)]}
    ipus = sorted(ipus | set(trace["ipu"].unique().tolist()))
    represents = dict(zip(base["replica"], base["represents"]))
    for ipu in ipus:
        r = ipu // k
        name = f"IPU {ipu} (replica {r})"
        if not expand and represents.get(r, 1) > 1:
            name = f"IPU {ipu} (replica {r}, stands for {represents[r]} replicas)"
        events.append({"ph": "M", "name": "process_name", "pid": ipu + 1, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": ipu + 1, "tid": 0,
                       "args": {"sort_index": ipu}})

    slice_tid: dict[tuple, int] = {}  # (ipu, start, end) of an inter-IPU copy -> its thread
    threads: set[tuple[int, int, str]] = set()
    order = trace.sort_values(["ipu", "kind", "start", "end"], kind="stable")
    # the (ipu, kind) groups are contiguous runs of the sorted rows: walk them by their bounds
    o_ipu, o_kind = order["ipu"].to_numpy(), order["kind"].to_numpy(dtype=object)
    o_start, o_end = order["start"].to_numpy(), order["end"].to_numpy()
    change = np.flatnonzero((o_ipu[1:] != o_ipu[:-1]) | (o_kind[1:] != o_kind[:-1])) + 1
    bounds = [0, *change.tolist(), len(order)] if len(order) else [0]
    names, starts, ends = order["name"].tolist(), o_start.tolist(), o_end.tolist()
    cycles_, bytes_, replicas_ = (order[c].tolist() for c in ("cycles", "bytes", "replica"))
    kinds, ipu_list = o_kind.tolist(), o_ipu.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        ipu, kind = ipu_list[a], kinds[a]
        pid = int(ipu) + 1
        lane = _lanes(o_start[a:b], o_end[a:b])
        tids = (kind_tid[kind] + LANES_PER_KIND * lane).tolist()
        for j in np.unique(lane).tolist():
            label = kind_name[kind] + (f" #{j + 1}" if j else "")
            threads.add((pid, int(kind_tid[kind] + LANES_PER_KIND * j), label))
        copies, kind_json = kind == "inter_ipu", encode(kind)
        for i in range(a, b):
            s, e, tid = starts[i], ends[i], tids[i - a]
            events.append(_SLICE % (encode(names[i]), kind_json, pid, tid, s * us, (e - s) * us, int(cycles_[i]),
                                    int(s), int(bytes_[i]), kind_json, int(replicas_[i])))
            if copies:
                slice_tid[int(ipu), int(s), int(e)] = tid
    for pid, tid, label in sorted(threads):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})

    flows = 0
    for name, src, dst, nbytes, s, e in zip(*(flow_rows[c] for c in columns)):
        a, b = slice_tid.get((int(src), int(s), int(e))), slice_tid.get((int(dst), int(s), int(e)))
        if a is None or b is None:  # a transfer of an IPU not written out
            continue
        flows += 1
        name_json, ts = encode(name), int(s) * us
        events.append(_FLOW_START % (name_json, flows, ts, int(src) + 1, a, int(nbytes), int(src), int(dst)))
        events.append(_FLOW_END % (name_json, flows, ts, int(dst) + 1, b))

    events = [e if isinstance(e, str) else json.dumps(e, separators=(",", ":"), allow_nan=False) for e in events]
    doc = {"traceEvents": [], "displayTimeUnit": "ns",
           "otherData": {"model": ex.graph.name, "system": ex.system.name, "clock_hz": clock,
                         "cycle_count": run.cycle_count, "time_unit": "ts and dur in microseconds",
                         "replicas": ("every replica written out" if expand or replicas == len(simulated) else
                                      f"only the simulated replicas {simulated} of {replicas}; the others "
                                      "repeat them (see each process's name)")}}
    return doc, events
