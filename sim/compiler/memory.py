"""Tile memory: what each tile of an IPU holds, and the out-of-memory check.

Per tile (numpy vectors of bytes):

* **always live**: Poplar's reserved code/stack space, weights, constants, optimizer state and
  gradient accumulators, each spread over the tiles of the op that first uses it;
* **live activations**: every activation and gradient from its producer to its last consumer
  (views alias their input), spread over the tiles of its producer;
* **temporaries** of the op running (operand blocks and partials of a matmul).

The peak over the schedule of the sum, tile by tile, must fit in the tile's SRAM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost import FREE, OpCost
from ..errors import OutOfMemoryError
from ..graph.ir import Graph, Op

_VIEWS = {"reshape", "slice", "identity", "concat", "detach", "flatten", "squeeze", "unsqueeze"}
ALWAYS_LIVE = ("weight", "constant", "state", "accumulator")


@dataclass
class IpuMemory:
    """Memory of one IPU. Vectors have one entry per compute tile, in bytes."""

    ipu: int
    capacity_per_tile: int
    always_live: np.ndarray
    peak: np.ndarray
    peak_op: str  # op running when the fullest tile peaks
    by_role: dict  # bytes on the IPU by tensor role, plus "reserved"

    @property
    def peak_tile_bytes(self) -> int:
        return int(self.peak.max())

    @property
    def fullest_tile(self) -> int:
        return int(self.peak.argmax())

    @property
    def total_bytes(self) -> int:
        """Sum over tiles of each tile's peak (an upper bound on the IPU's footprint)."""
        return int(self.peak.sum())

    def summary(self) -> dict:
        return {"peak_tile_bytes": self.peak_tile_bytes, "fullest_tile": self.fullest_tile,
                "tile_capacity_bytes": self.capacity_per_tile,
                "peak_tile_utilisation": round(self.peak_tile_bytes / self.capacity_per_tile, 4),
                "always_live_bytes": int(self.always_live.sum()), "total_peak_bytes": self.total_bytes,
                "peak_op": self.peak_op, "by_role": {k: int(v) for k, v in self.by_role.items()}}


class _Layout:
    """Spreads tensors over tile ranges, each starting where the previous one ended.

    Poplar balances variables over tiles rather than starting every tensor at tile 0; a
    rotating start gives the same balance without modelling its mapper.
    """

    def __init__(self, tiles: int):
        self.tiles = tiles
        self.next = 0

    def place(self, nbytes: float, used: int) -> tuple[int, int]:
        used = max(1, min(self.tiles, used))
        start = self.next
        self.next = (start + used) % self.tiles
        return start, used

    def add(self, vec: np.ndarray, where: tuple[int, int], nbytes: float) -> None:
        start, used = where
        share = nbytes / used
        stop = start + used
        vec[start:min(stop, self.tiles)] += share
        if stop > self.tiles:
            vec[:stop - self.tiles] += share


def analyse_ipu(graph: Graph, runs: list[list[Op]], costs: dict[str, OpCost], ipu: int, tiles: int,
                sram_bytes: int, reserved_bytes: int, stash_bytes: int = 0, check: bool = True,
                run_labels: list[str | None] | None = None) -> IpuMemory:
    """Peak memory per tile of an IPU that executes ``runs`` (op lists, each in order).

    Each run starts with no live activations (a pipeline stage, the weight update); its inputs
    that no op of the run produces are live from its start. ``stash_bytes`` (pipeline stashes
    of stage inputs) are live throughout, spread over all tiles. ``run_labels`` name the runs
    (e.g. ``"pipeline stage 4"``) for the out-of-memory error; without them it names the op's
    forward stage annotation.
    """
    tensors = graph.tensors
    always = np.full(tiles, float(reserved_bytes) + stash_bytes / tiles)
    by_role = {"reserved": reserved_bytes * tiles, "stash": stash_bytes}
    first_user: dict[str, Op] = {}
    for op in (op for run in runs for op in run):
        for t in op.inputs + op.outputs:
            first_user.setdefault(t, op)
    layout = _Layout(tiles)
    for name, op in first_user.items():
        t = tensors[name]
        if t.role in ALWAYS_LIVE and t.location == "on_chip":
            nbytes = t.nbytes / t.shards
            where = layout.place(nbytes, costs.get(op.name, FREE).tiles_used or tiles)
            layout.add(always, where, nbytes)
            by_role[t.role] = by_role.get(t.role, 0) + int(nbytes)
    peak = always.copy()
    peak_at = np.full(tiles, -1)
    ops_seen: list[Op] = []
    run_of: list[int] = []  # index of the run of each op in ops_seen
    by_role["activation_peak"] = 0
    for k, run in enumerate(runs):
        _sweep(graph, run, costs, tiles, layout, always, peak, peak_at, len(ops_seen), by_role)
        ops_seen += run
        run_of += [k] * len(run)
    fullest = int(peak.argmax())
    op = ops_seen[peak_at[fullest]] if peak_at[fullest] >= 0 else None
    mem = IpuMemory(ipu, sram_bytes, always, np.ceil(peak).astype(np.int64),
                    op.name if op else "(always-live data)", by_role)
    if check and mem.peak_tile_bytes > sram_bytes:
        short = mem.peak_tile_bytes - sram_bytes
        if op is None:
            what = "its always-live data"
        elif run_labels is not None:
            label = run_labels[run_of[peak_at[fullest]]]
            what = f"op {op.name!r} ({op.kind}, {op.pass_} pass" + (f", {label})" if label else ")")
        else:
            what = f"op {op.name!r} ({op.kind}, {op.pass_} pass, pipeline stage {op.stage})"
        raise OutOfMemoryError(
            f"Out of memory on IPU {ipu}: tile {fullest} needs {mem.peak_tile_bytes:,} bytes at "
            f"{what} but a tile has {sram_bytes:,} bytes; short by {short:,} bytes "
            f"(on {tiles} compute tiles; always-live data alone takes {int(always.max()):,} bytes "
            f"on the fullest tile, of which pipeline stashes {stash_bytes // tiles:,}). Try: fewer "
            f"layers on this IPU, a smaller micro-batch, a lower availableMemoryProportion, or "
            f"moving weights/optimizer state off chip (TensorLocations) or sharding it (RTS).",
            ipu=ipu, op=op.name if op else None, shortfall_bytes=short)
    return mem


def _sweep(graph, ops, costs, tiles, layout, always, peak, peak_at, base, by_role) -> None:
    """Walk one run, raising ``peak`` (and noting when) with live activations and temporaries."""
    tensors = graph.tensors
    root = {}
    for op in ops:
        if op.kind in _VIEWS and op.inputs:
            for o in op.outputs:
                root[o] = root.get(op.inputs[0], op.inputs[0])
    last_use: dict[str, int] = {}
    produced = set()
    for i, op in enumerate(ops):
        for t in op.inputs:
            last_use[root.get(t, t)] = i
        produced.update(op.outputs)
    for out in graph.outputs:  # streamed back at the end of the step
        if out in produced:
            last_use[root.get(out, out)] = len(ops)
    live = np.zeros(tiles)
    owner: dict[str, tuple[int, int]] = {}
    frees: dict[int, list[str]] = {}
    for t, i in last_use.items():
        frees.setdefault(i, []).append(t)
    for name in last_use:  # inputs of the run: streamed in, received, or loaded from streaming memory
        t = tensors[name]
        if name not in produced and t.role not in ALWAYS_LIVE:
            owner[name] = layout.place(t.nbytes, tiles)
            layout.add(live, owner[name], t.nbytes)
    for i, op in enumerate(ops):
        cost = costs.get(op.name, FREE)
        used = cost.tiles_used or tiles
        for name in op.inputs:  # loaded from streaming memory just before its first use
            t = tensors[name]
            if t.location == "off_chip" and name not in owner:
                owner[name] = layout.place(t.nbytes / t.shards, used)
                layout.add(live, owner[name], t.nbytes / t.shards)
        if op.kind not in _VIEWS:
            for o in op.outputs:
                t = tensors[o]
                if t.role not in ALWAYS_LIVE and o in last_use and o not in owner:
                    owner[o] = layout.place(t.nbytes, used)
                    layout.add(live, owner[o], t.nbytes)
        level = always + live
        if cost.profile is not None and cost.temp_bytes_per_tile:
            start, _ = layout.place(0, used)  # the op's tiles, where the layout has got to
            level += np.roll(cost.profile.temp, start)
        elif cost.temp_bytes_per_tile:
            layout.add(level, layout.place(0, used), cost.temp_bytes_per_tile * used)
        higher = level > peak
        peak[higher] = level[higher]
        peak_at[higher] = base + i
        for t in frees.get(i, ()):
            if t in owner:
                layout.add(live, owner.pop(t), -tensors[t].nbytes / (tensors[t].shards if tensors[t].location == "off_chip" else 1))
        by_role["activation_peak"] = max(by_role["activation_peak"], int(live.sum()))
