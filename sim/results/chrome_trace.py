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
    """
    import pandas as pd

    ex = run.executable
    clock = float(ex.system.ipu.clock_hz)
    us = 1e6 / clock  # microseconds per cycle
    base = run.trace
    replicas, simulated = ex.replicas, list(ex.simulated_replicas)
    if all_replicas is None:
        rows_per_simulated = len(base) / max(len(simulated), 1)
        all_replicas = replicas > len(simulated) and rows_per_simulated * replicas <= MAX_EXPANDED_ROWS
    expand = bool(all_replicas) and replicas > len(simulated)
    trace = run.trace_all_replicas() if expand else base
    k = ex.ipus_per_replica

    transfers = run.inter_ipu_transfers()
    if expand and len(transfers):
        frames = []
        for r in range(replicas):
            source = simulated[r % len(simulated)]
            rows = transfers[transfers["src"] // k == source].copy()
            rows[["src", "dst"]] += (r - source) * k
            frames.append(rows)
        transfers = pd.concat(frames, ignore_index=True)

    others = sorted(set(trace["kind"].unique().tolist()) - set(KINDS))
    kind_tid = {kd: tid for kd, (tid, _) in KINDS.items()} | {kd: len(KINDS) + 1 + i for i, kd in enumerate(others)}
    kind_name = {kd: name for kd, (_, name) in KINDS.items()} | {kd: kd.replace("_", " ") for kd in others}

    events: list[dict] = []
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
    for (ipu, kind), rows in order.groupby(["ipu", "kind"], sort=False):
        start, end = rows["start"].to_numpy(), rows["end"].to_numpy()
        lane = _lanes(start, end)
        tids = kind_tid[kind] + LANES_PER_KIND * lane
        for j in np.unique(lane).tolist():
            label = kind_name[kind] + (f" #{j + 1}" if j else "")
            threads.add((int(ipu) + 1, int(kind_tid[kind] + LANES_PER_KIND * j), label))
        for name, s, e, cycles, nbytes, replica, tid in zip(
                rows["name"].tolist(), start.tolist(), end.tolist(), rows["cycles"].tolist(),
                rows["bytes"].tolist(), rows["replica"].tolist(), tids.tolist()):
            events.append({"ph": "X", "name": name, "cat": kind, "pid": int(ipu) + 1, "tid": tid,
                           "ts": s * us, "dur": (e - s) * us,
                           "args": {"cycles": int(cycles), "start_cycle": int(s), "bytes": int(nbytes),
                                    "kind": kind, "replica": int(replica)}})
            if kind == "inter_ipu":
                slice_tid[int(ipu), int(s), int(e)] = tid
    for pid, tid, label in sorted(threads):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})

    flows = 0
    for name, src, dst, nbytes, s, e in transfers[["name", "src", "dst", "bytes", "start", "end"]].itertuples(
            index=False):
        a, b = slice_tid.get((int(src), int(s), int(e))), slice_tid.get((int(dst), int(s), int(e)))
        if a is None or b is None:  # a transfer of an IPU not written out
            continue
        flows += 1
        common = {"name": name, "cat": "inter_ipu", "id": flows, "ts": int(s) * us}
        events.append({"ph": "s", **common, "pid": int(src) + 1, "tid": a,
                       "args": {"bytes": int(nbytes), "src_ipu": int(src), "dst_ipu": int(dst)}})
        events.append({"ph": "f", "bp": "e", **common, "pid": int(dst) + 1, "tid": b})

    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"model": ex.graph.name, "system": ex.system.name, "clock_hz": clock,
                          "cycle_count": run.cycle_count, "time_unit": "ts and dur in microseconds",
                          "replicas": ("every replica written out" if expand or replicas == len(simulated) else
                                       f"only the simulated replicas {simulated} of {replicas}; the others "
                                       "repeat them (see each process's name)")}}

