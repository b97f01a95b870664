"""Tile memory: what each tile of an IPU holds, and the out-of-memory check.

Per tile (numpy vectors of bytes):

* **always live**: what Poplar allocates for the program (control code, vertex code, vertex state,
  exchange code, stacks: :mod:`sim.compiler.program_memory`), weights, constants, optimizer state and
  gradient accumulators, each spread over the tiles of the op that first uses it, and the
  pipeline stashes (stage inputs and recomputation checkpoints), spread over all tiles;
* **live activations**: every activation and gradient from its producer to its last consumer
  (views alias their input), spread over the tiles of its producer;
* **temporaries** of the op running (operand blocks and partials of a matmul), on that op's tiles.

The peak over the schedule of the sum, tile by tile, must fit in the tile's SRAM.
:func:`analyse_ipu` measures one IPU; :func:`check_tile_memory` raises for the IPU short by
most once every IPU has been measured. The same walk records a :class:`Liveness` (PopVision's
liveness report): the bytes live at every op, summed over the tiles and on the fullest tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..cost import FREE, OpCost
from ..cost.rules import AMP_KINDS
from ..errors import OutOfMemoryError
from ..graph.ir import RNN_GATES, VIEW_KINDS, Graph, Op
from .program_memory import PROGRAM_CATEGORIES, rolled

ALWAYS_LIVE = ("weight", "constant", "state", "accumulator")
#: what a tile holds at its peak, in the order :attr:`IpuMemory.peak_parts` lists it
CATEGORIES = PROGRAM_CATEGORIES + ("weights", "constants", "optimizer_state", "accumulators", "stash",
              "activations", "temporaries")
_CATEGORY_OF_ROLE = {"weight": "weights", "constant": "constants", "state": "optimizer_state",
                     "accumulator": "accumulators"}


@dataclass
class Liveness:
    """Bytes live at each program point (op) of one IPU, one entry per op, like PopVision's
    liveness report.

    Ops are in the order the analysis walks them: each run (a pipeline stage's pass, a phase,
    the weight update) in turn, the ops of a run in schedule order. Always-live bytes are the
    program memory (code, vertex state, stacks), weights, constants, optimizer state, accumulators and stashes; the
    not-always-live bytes are the live activations and the temporaries of the op running.
    Two views, all in bytes (floats; :meth:`columns` gives whole bytes):

    * summed over the IPU's compute tiles: ``always_live`` (the same at every op),
      ``activations``, ``temporaries``;
    * on the fullest tile at that op (the tile holding the most bytes then, so it can change
      from op to op): ``tile``, ``tile_always_live``, ``tile_activations``,
      ``tile_temporaries``. The highest of these totals over the ops is the IPU's
      :attr:`IpuMemory.peak_tile_bytes`.
    """

    ops: list[str]  # the op running
    runs: np.ndarray  # index into run_labels of the op's run
    run_labels: list[str]  # e.g. "pipeline stage 4", "phase 2", "weight update" ("" when unnamed)
    always_live: float
    activations: np.ndarray
    temporaries: np.ndarray
    tile: np.ndarray
    tile_always_live: np.ndarray
    tile_activations: np.ndarray
    tile_temporaries: np.ndarray

    def columns(self) -> dict[str, np.ndarray | list]:
        """One entry per op: ``step``, ``op``, ``run``, then each view's parts and ``total`` in
        whole bytes. Summed over the tiles, ``always_live`` is whole bytes as
        :meth:`IpuMemory.summary` gives them and the others are rounded; on the fullest tile,
        ``tile_total`` is the level rounded up (as :attr:`IpuMemory.peak_tile_bytes`) and the
        largest part takes the rounding, so that the parts add up to it."""
        n = len(self.ops)
        always = np.full(n, int(self.always_live), dtype=np.int64)
        activations = np.round(self.activations).astype(np.int64)
        temporaries = np.round(self.temporaries).astype(np.int64)
        tile_parts = _whole_bytes([self.tile_always_live, self.tile_activations, self.tile_temporaries])
        out = {"step": np.arange(n), "op": list(self.ops), "run": [self.run_labels[k] for k in self.runs],
               "always_live": always, "activations": activations, "temporaries": temporaries,
               "total": always + activations + temporaries}
        for name, v in zip(("always_live", "activations", "temporaries", "total"), tile_parts):
            out["tile_" + name] = v
        out["tile"] = self.tile.astype(np.int64)
        return out


def _whole_bytes(parts: list[np.ndarray]) -> list[np.ndarray]:
    """``parts`` (vectors of bytes, one entry per op) in whole bytes, then their total: the sum
    rounded up, each part rounded, and the largest part of each entry changed by the one or two
    bytes that make the parts add up to the total (a part of 0 stays 0)."""
    total = np.ceil(sum(parts)).astype(np.int64)
    whole = np.round(np.stack(parts)).astype(np.int64)
    rows = np.arange(whole.shape[1])
    whole[np.stack(parts).argmax(axis=0), rows] += total - whole.sum(axis=0)
    return list(whole) + [total]


class _LivenessRecorder:
    """Collects one :class:`Liveness` entry per op while :func:`_sweep` walks the runs."""

    def __init__(self, always: np.ndarray):
        self.always = always
        self.ops: list[str] = []
        self.runs: list[int] = []
        self.sums: list[tuple[float, float]] = []
        self.tile: list[tuple[int, float, float, float]] = []

    def record(self, op: Op, run: int, level: np.ndarray, live: np.ndarray, temp: np.ndarray,
               live_sum: float, temp_sum: float) -> None:
        """Note ``op`` (of run ``run``): the tile vectors ``level`` (all bytes), ``live`` and
        ``temp`` while it runs, and the sums of the last two over the tiles (bytes)."""
        j = int(level.argmax())
        self.ops.append(op.name)
        self.runs.append(run)
        self.sums.append((live_sum, temp_sum))
        self.tile.append((j, float(self.always[j]), float(live[j]), float(temp[j])))

    def result(self, labels: list[str]) -> Liveness:
        if not self.ops:  # nothing runs: the always-live data alone, on the tile holding most
            j = int(self.always.argmax())
            self.ops, self.runs = ["(always-live data)"], [0]
            self.sums, self.tile = [(0.0, 0.0)], [(j, float(self.always[j]), 0.0, 0.0)]
            labels = labels or [""]
        sums = np.array(self.sums, dtype=float).reshape(-1, 2)
        tile = np.array(self.tile, dtype=float).reshape(-1, 4)
        return Liveness(self.ops, np.array(self.runs, dtype=np.int64), labels, float(self.always.sum()),
                        sums[:, 0], sums[:, 1], tile[:, 0].astype(np.int64), tile[:, 1], tile[:, 2], tile[:, 3])


@dataclass
class IpuMemory:
    """Memory of one IPU. Vectors have one entry per compute tile, in bytes."""

    ipu: int
    capacity_per_tile: int
    always_live: np.ndarray
    peak: np.ndarray
    peak_op: str  # op running when the fullest tile peaks
    by_role: dict  # bytes on the IPU by tensor role, plus "reserved" (all program memory) and each program category
    peak_parts: dict = field(default_factory=dict)  # CATEGORIES -> bytes on the fullest tile at its peak
    op: str | None = None  # the op running at that peak (None: the always-live data alone)
    peak_at: str = "its always-live data"  # that op, its pass and stage, for messages
    liveness: Liveness | None = None  # bytes live at each op (see Liveness)
    tile_parts: dict = field(default_factory=dict)  # CATEGORIES -> bytes on each tile at that tile's peak
    #: what the out-of-memory advice needs of the peak (see :func:`_remedies`): the op's kind and pass,
    #: the run's label ("pipeline stage 4", "phase 2", "weight update"; None: one unnamed program),
    #: whether that op's temporaries follow availableMemoryProportion (a planned matmul or convolution),
    #: whether the IPU trains, how many recomputation checkpoints its ops make and whether it recomputes any op
    op_kind: str | None = None
    op_pass: str | None = None
    run_label: str | None = None
    amp_governed: bool = False
    training: bool = False
    checkpoints: int = 0
    recomputes: bool = False

    def __post_init__(self):
        # the vectors are the analysis' result, handed out by Run.tile_memory: read-only, so that a caller
        # working on one in place (``run.tile_memory(0) /= 1024``) is told so instead of changing the run's
        # peak, fullest tile and tables behind its back
        self.peak = _frozen(self.peak)
        self.always_live = _frozen(self.always_live)
        self.tile_parts = {name: _frozen(v) for name, v in self.tile_parts.items()}

    def tile_category(self, category: str) -> np.ndarray:
        """Bytes of ``category`` (one of :data:`CATEGORIES`) on each tile at that tile's own peak, a new
        array; the categories add up to :attr:`peak` (to within rounding up to whole bytes)."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown memory category {category!r}: expected one of {', '.join(CATEGORIES)}")
        return self.tile_parts[category].copy() if category in self.tile_parts else np.zeros(len(self.peak))

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

    @property
    def shortfall_bytes(self) -> int:
        """Bytes the fullest tile needs beyond its SRAM (negative: bytes to spare)."""
        return self.peak_tile_bytes - self.capacity_per_tile

    def breakdown(self) -> dict[str, int]:
        """:attr:`peak_parts` in whole bytes that add up to :attr:`peak_tile_bytes` (each part is
        rounded by at most one byte so that the running sums round to the whole)."""
        total, out, before = 0.0, {}, 0
        for i, name in enumerate(CATEGORIES):
            total += self.peak_parts.get(name, 0.0)
            upto = self.peak_tile_bytes if i == len(CATEGORIES) - 1 else min(round(total), self.peak_tile_bytes)
            out[name], before = upto - before, upto
        return out

    def summary(self) -> dict:
        return {"peak_tile_bytes": self.peak_tile_bytes, "fullest_tile": self.fullest_tile,
                "tile_capacity_bytes": self.capacity_per_tile,
                "peak_tile_utilisation": round(self.peak_tile_bytes / self.capacity_per_tile, 4),
                "always_live_bytes": int(self.always_live.sum()), "total_peak_bytes": self.total_bytes,
                "peak_op": self.peak_op, "by_role": {k: int(v) for k, v in self.by_role.items()},
                "peak_tile_parts": self.breakdown()}

    def describe_peak(self) -> str:
        """The fullest tile's peak, category by category (non-zero ones), for messages."""
        parts = [f"{name.replace('_', ' ')} {b:,}" for name, b in self.breakdown().items() if b]
        return ", ".join(parts) + " bytes"


def _frozen(vec) -> np.ndarray:
    """``vec`` as a read-only numpy array (a copy when it is not one already)."""
    out = np.array(vec)
    out.setflags(write=False)
    return out


def _remedies(parts: dict[str, int], margin: float = 0.0, memory: IpuMemory | None = None,
              every_ipu_short: bool = False) -> str:
    """What may bring a tile holding ``parts`` (bytes by category) under its capacity: those that
    act on what it holds (no optimizer-state advice for a tile without optimizer state, no
    recomputation for one without a stash or training state).

    With the IPU's ``memory`` the advice also follows what runs at the peak: the availableMemoryProportion
    only where that op's temporaries follow it (a planned matmul or convolution), neither the micro-batch nor
    recomputation in the weight update (its activations are the gradients, whatever the micro-batch), more
    checkpoints where the IPU has some already, in a phase the phase's size, its activations' place between
    phases (``--liveness``, not ``layers_per_ipu``, which phased execution does not take) and, unless it
    recomputes, autoRecomputation (PopART then recomputes every phase but its checkpoints), in a pipeline
    stage that recomputes nothing and stashes, the pipeline's recomputation, and, when
    ``every_ipu_short``, more IPUs rather than moving layers between them."""
    training = any(parts.get(k) for k in ("optimizer_state", "accumulators", "stash"))
    label = (memory.run_label or "") if memory is not None else ""
    update = memory is not None and memory.op_pass == "update"
    if memory is not None:
        training = training or memory.training
    if label.startswith("phase"):
        tips = [f"less of the model in {label} (smaller phases)"]
    elif every_ipu_short:
        tips = ["the model over more IPUs (every IPU of the replica is short: layers_per_ipu, split points)"]
    else:
        tips = ["less of the model on this IPU (layers_per_ipu, split points)"]
    if not update:
        tips.append("a smaller micro-batch")
    if parts.get("temporaries") and (memory is None or memory.amp_governed):
        tips.append("a lower availableMemoryProportion")
    if training and parts.get("activations") and not update and label.startswith("phase"):
        if memory is None or not memory.recomputes:  # every forward op but the checkpoints is then recomputed
            tips.append("recomputation of each phase in its backward phase (autoRecomputation Standard, "
                        "--auto-recomputation standard: in phased execution any type but None reruns every forward "
                        "op but the recomputation checkpoints there)")
    elif training and parts.get("stash") and label.startswith("pipeline") and memory is not None \
            and not memory.recomputes:  # autoRecomputation None: every activation a backward stage reads is stashed
        tips.append("recomputation of the pipeline's stages (autoRecomputation Pipeline, --auto-recomputation "
                    "pipeline: with None, PopART's default, a pipeline stashes every activation its backward stages "
                    "read)")
    elif training and parts.get("activations") and not update:
        if memory is not None and memory.checkpoints and not memory.recomputes:
            tips.append(f"recomputation between the IPU's {memory.checkpoints} recomputation checkpoints "
                        "(autoRecomputation RecomputeAll, --auto-recomputation recompute-all: with None, the default "
                        "of a model that is not pipelined, they recompute nothing)")
        else:
            tips.append(f"more recomputation checkpoints (the IPU has {memory.checkpoints})"
                        if memory is not None and memory.checkpoints else "recomputation checkpoints")
    if label.startswith("phase") and parts.get("activations"):
        tips.append("the activations off chip between phases (setTensorsLiveness, --liveness off-chip-after-fwd)")
    if parts.get("optimizer_state"):
        tips.append("the optimizer state off chip or sharded over replicas (TensorLocations, RTS)")
    if parts.get("weights", 0) > 0.25 * sum(parts.values()):
        tips.append("the weights off chip or sharded (TensorLocations)")
    if margin:
        tips.append("a smaller memoryMargin")
    return ", ".join(tips[:-1]) + " or " + tips[-1] if len(tips) > 1 else tips[0]


#: the out-of-memory remedies' words (:func:`_remedies`) as a PopXL program says them (``sim.popxl.session``):
#: it places ops with ``popxl.ipu``, keeps variables in remote buffers or sharded, and sets a matmul's proportion
POPXL_REMEDIES = {
    "(every IPU of the replica is short: layers_per_ipu, split points)":
        "(every IPU of the replica is short: place ops and variables with popxl.ipu(n))",
    "less of the model on this IPU (layers_per_ipu, split points)":
        "fewer ops and variables on this IPU (place them with popxl.ipu(n))",
    "a smaller micro-batch": "fewer rows in the host streams",
    "a lower availableMemoryProportion": "a lower available_memory_proportion on the matmuls (ops.matmul)",
    "more recomputation checkpoints": "more recomputation (popxl_addons' recompute_graph)",
    "recomputation checkpoints": "recomputation (popxl_addons' recompute_graph)",
    "(TensorLocations, RTS)": "(popxl.remote_variable, popxl.replica_sharded_variable)",
    "(TensorLocations)": "(popxl.remote_variable, popxl.replica_sharded_variable)",
    "a smaller memoryMargin": "a smaller memory margin",
}


#: ... and as an ONNX model's: PopART places its nodes by their ``__ipu_number`` attributes
ONNX_REMEDIES = {
    "(every IPU of the replica is short: layers_per_ipu, split points)":
        "(every IPU of the replica is short: the nodes' __ipu_number attributes)",
    "less of the model on this IPU (layers_per_ipu, split points)":
        "fewer of the model's nodes on this IPU (their __ipu_number attributes)",
}


def reworded(error: OutOfMemoryError, words: dict[str, str], cls: type = OutOfMemoryError) -> OutOfMemoryError:
    """``error`` with the remedies after its "Try:" said in a front end's ``words`` (old -> new phrase,
    as :data:`POPXL_REMEDIES`), as a ``cls`` (a front end's own subclass); the facts before it and the error's
    attributes unchanged."""
    head, sep, tips = str(error).partition(" Try: ")
    for old, new in words.items():
        tips = tips.replace(old, new)
    return cls(head + sep + tips, ipu=error.ipu, op=error.op, shortfall_bytes=error.shortfall_bytes,
               shortfalls=error.shortfalls, where=error.where, margin=error.margin, margin_bytes=error.margin_bytes)


def check_tile_memory(memory: dict[int, IpuMemory], margin: float = 0.0) -> None:
    """Raise :class:`OutOfMemoryError` for the IPU short by most bytes, if any IPU is short.

    With a ``margin`` (a fraction, ``Options.memoryMargin``) an IPU is short when its fullest tile,
    raised by it, does not fit; the shortfall then counts the margin's bytes. The message names that
    IPU's fullest tile, the op then running and what the tile holds, and lists every other IPU that
    does not fit with its shortfall; the error's ``ipu``, ``op`` and ``shortfall_bytes`` are the worst
    IPU's and ``shortfalls`` maps every IPU that does not fit to its shortfall in bytes.
    """
    short = {ipu: math.ceil(m.peak_tile_bytes * (1 + margin)) - m.capacity_per_tile for ipu, m in memory.items()}
    over = sorted((m for m in memory.values() if short[m.ipu] > 0), key=lambda m: (-short[m.ipu], m.ipu))
    if not over:
        return
    worst = over[0]
    tiles = len(worst.peak)
    others = "; ".join(f"IPU {m.ipu} short by {short[m.ipu]:,} bytes at {m.peak_at}" for m in over[1:])
    others = f" Also out of memory: {others}." if others else ""
    needs = f"{worst.peak_tile_bytes:,} bytes"
    if margin:
        needs += f" ({math.ceil(worst.peak_tile_bytes * (1 + margin)):,} with the memory margin of {margin * 100:g}%)"
    every = len(memory) > 1 and len(over) == len(memory)
    advice = _remedies(worst.breakdown(), margin, worst, every)
    raise OutOfMemoryError(
        f"Out of memory on IPU {worst.ipu}: tile {worst.fullest_tile} needs {needs} at "
        f"{worst.peak_at} but a tile has {worst.capacity_per_tile:,} bytes; short by {short[worst.ipu]:,} "
        f"bytes (the tile then holds {worst.describe_peak()}; "
        f"{int((worst.peak * (1 + margin) > worst.capacity_per_tile).sum())} "
        f"of {tiles} compute tiles are over).{others} Try: {advice}.",
        ipu=worst.ipu, op=worst.op, shortfall_bytes=short[worst.ipu],
        shortfalls={m.ipu: short[m.ipu] for m in over}, where=worst.peak_at, margin=margin,
        margin_bytes=short[worst.ipu] - worst.shortfall_bytes)


#: How far Poplar's fullest tile sits above its mean tile where the tiles are well filled: the lowest
#: and highest MaxTileMemory / (TotalMemory / tiles) of poplibs' IPUModel2 benchmarks whose mean tile
#: holds over 290 KB (tests/benchmark_results.csv at 8dcde1ec; sim.validation.memory.fullest_tile_rows;
#: gaps between variables and uneven tile mappings). The simulator spreads each tensor evenly over the
#: tiles it uses, so its fullest tile sits at its mean and does not carry this excess.
FULLEST_TILE_EXCESS = (0.08, 0.15)


def near_capacity_notes(memory: dict[int, IpuMemory]) -> list[str]:
    """A note for the IPUs whose fullest tile fits but is within :data:`FULLEST_TILE_EXCESS` of a
    tile's memory: on hardware, with Poplar's uneven placement, such a program may not fit."""
    near = sorted((m for m in memory.values()
                   if m.peak_tile_bytes <= m.capacity_per_tile < m.peak_tile_bytes * (1 + FULLEST_TILE_EXCESS[1])),
                  key=lambda m: -m.peak_tile_bytes)
    if not near:
        return []
    low, high = FULLEST_TILE_EXCESS
    where = ", ".join(f"IPU {m.ipu} {m.peak_tile_bytes / m.capacity_per_tile:.0%}" for m in near)
    return [f"fullest tile near capacity ({where} of a tile's {near[0].capacity_per_tile:,} bytes): Poplar's "
            f"fullest tile runs {low:.0%}-{high:.0%} above an even spread of the same bytes (poplibs' benchmarks; "
            "reports/validation.md, 'The fullest tile'), which the simulator does not model, so on hardware this "
            "may not fit; configurations that ran on hardware reach up to 94 % here ('Configurations published "
            "as fitting')"]


def _follows_amp(op: Op) -> bool:
    """Whether ``op``'s temporaries are planned within availableMemoryProportion (poplin's matmuls and
    convolutions, a matmul-laid-out accumulation, an RNN's matmuls: sim.cost.rules)."""
    return (op.kind in AMP_KINDS or (op.kind == "accumulate" and "layout_of_matmul" in op.attrs)
            or op.kind.removesuffix("_grad") in RNN_GATES)


class _Layout:
    """Spreads tensors over tile ranges, each starting where the previous one ended.

    Poplar balances variables over tiles rather than starting every tensor at tile 0; a
    rotating start gives the same balance without modelling its mapper.
    """

    def __init__(self, tiles: int):
        self.tiles = tiles
        self.next = 0

    def place(self, used: int) -> tuple[int, int]:
        """The next ``used`` tiles (at least 1, at most all) as ``(start, count)``; the next
        placement starts after them."""
        used = max(1, min(self.tiles, used))
        start = self.next
        self.next = (start + used) % self.tiles
        return start, used

    def add(self, vec: np.ndarray, where: tuple[int, int], nbytes: float) -> None:
        """Add ``nbytes`` to ``vec``, spread evenly over the tile range ``where``."""
        start, used = where
        share = nbytes / used
        stop = start + used
        vec[start:min(stop, self.tiles)] += share
        if stop > self.tiles:
            vec[:stop - self.tiles] += share


class _Peak:
    """The highest level of each tile so far, and what made it up then (vectors of bytes)."""

    def __init__(self, always: np.ndarray):
        self.level = always.copy()
        self.at = np.full(len(always), -1)  # index of the op running then (over all runs), -1: none
        self.live = np.zeros(len(always))
        self.temp = np.zeros(len(always))

    def raise_to(self, level: np.ndarray, live: np.ndarray, temp: np.ndarray, at: int) -> None:
        higher = level > self.level
        if not higher.any():  # no tile above its peak (most ops once the walk is under way)
            return
        self.level[higher] = level[higher]
        self.at[higher] = at
        self.live[higher] = live[higher]
        self.temp[higher] = temp[higher]


def analyse_ipu(graph: Graph, runs: list[list[Op]], costs: dict[str, OpCost], ipu: int, tiles: int,
                sram_bytes: int, reserved_bytes: int, stash_bytes: int = 0, check: bool = True,
                run_labels: list[str | None] | None = None,
                restored: list[set[str]] | None = None, held: list[set[str]] | None = None,
                through: list[float] | None = None,
                program: dict[str, np.ndarray] | None = None) -> IpuMemory:
    """Peak memory per tile of an IPU that executes ``runs`` (op lists, each in order).

    Each run starts with no live activations (a pipeline stage, the weight update); its inputs
    that no op of the run produces are live from its start, except those in ``restored[k]``
    (tensors run ``k`` reads from the pipeline stash, already counted in it). ``stash_bytes``
    (pipeline stashes) are live throughout, spread over all tiles. A later run reads the tensors in
    ``held[k]`` (phased execution), so run ``k`` keeps them live to its end once made or received,
    and ``through[k]`` bytes of activations between earlier and later runs are live throughout it.
    ``run_labels`` name the runs (e.g. ``"pipeline stage 4"``) for the out-of-memory error; without
    them it names the op's forward stage annotation. With ``check`` an IPU that does not fit raises
    :class:`OutOfMemoryError` (:func:`check_tile_memory`). ``program`` gives the program memory
    per tile by category (:func:`sim.compiler.program_memory.program_memory`); without it every
    tile holds ``reserved_bytes`` of control code and nothing else of the program.
    """
    tensors = graph.tensors
    parts = {name: np.zeros(tiles) for name in CATEGORIES[:-2]}
    if program is None:
        parts["control_code"][:] = reserved_bytes
    else:
        for name in PROGRAM_CATEGORIES:
            parts[name][:] = program[name]
        parts["constants"] += program.get("constants", 0)  # the vertices' constants (worklists)
    parts["stash"][:] = stash_bytes / tiles
    by_role = {name: int(round(parts[name].sum())) for name in PROGRAM_CATEGORIES}
    by_role["reserved"] = sum(by_role.values())
    by_role["stash"] = stash_bytes
    first_user: dict[str, Op] = {}
    for op in (op for run in runs for op in run):
        for t in op.inputs + op.outputs:
            first_user.setdefault(t, op)
    layout = _Layout(tiles)
    for name, op in first_user.items():
        t = tensors[name]
        if t.role in ALWAYS_LIVE and t.location == "on_chip":
            nbytes = t.nbytes / t.shards
            layout.add(parts[_CATEGORY_OF_ROLE[t.role]], layout.place(costs.get(op.name, FREE).tiles_used or tiles),
                       nbytes)
            by_role[t.role] = by_role.get(t.role, 0) + int(nbytes)
    always = sum(parts.values())
    peak = _Peak(always)
    recorder = _LivenessRecorder(always)
    ops_seen: list[Op] = []
    run_of: list[int] = []  # index of the run of each op in ops_seen
    by_role["activation_peak"] = 0
    for k, run in enumerate(runs):
        _sweep(graph, run, costs, tiles, layout, always, peak, len(ops_seen), by_role,
               restored[k] if restored else set(), recorder, k,
               held[k] if held else set(), through[k] if through else 0)
        ops_seen += run
        run_of += [k] * len(run)
    fullest = int(peak.level.argmax())
    op = ops_seen[peak.at[fullest]] if peak.at[fullest] >= 0 else None
    if op is None:
        what = "its always-live data"
    elif run_labels is not None:
        label = run_labels[run_of[peak.at[fullest]]]
        what = f"op {op.name!r} ({op.kind}, {op.pass_} pass" + (f", {label})" if label else ")")
    else:
        what = f"op {op.name!r} ({op.kind}, {op.pass_} pass, pipeline stage {op.stage})"
    tile_parts = dict(parts, activations=peak.live, temporaries=peak.temp)
    peak_parts = {name: float(v[fullest]) for name, v in tile_parts.items()}
    labels = [(run_labels[k] if run_labels is not None else None) or "" for k in range(len(runs))]
    every_op = [o for run in runs for o in run]
    mem = IpuMemory(ipu, sram_bytes, always, np.ceil(peak.level).astype(np.int64),
                    op.name if op else "(always-live data)", by_role, peak_parts, op.name if op else None, what,
                    recorder.result(labels), tile_parts,
                    op_kind=op.kind if op else None, op_pass=op.pass_ if op else None,
                    run_label=(labels[run_of[peak.at[fullest]]] or None) if op else None,
                    amp_governed=op is not None and _follows_amp(op),
                    training=any(o.pass_ != "forward" for o in every_op),
                    checkpoints=len({o.name for o in every_op if o.attrs.get("recomputation_checkpoint")}),
                    recomputes=len({o.name for o in every_op}) < len(every_op))  # a recomputed op runs twice
    if check:
        check_tile_memory({ipu: mem})
    return mem


def _sweep(graph, ops, costs, tiles, layout, always, peak: _Peak, base, by_role, restored,
           recorder: _LivenessRecorder, run: int, held: set[str] = frozenset(), through: float = 0) -> None:
    """Walk one run (number ``run``), raising ``peak`` (and noting when) with live activations
    and temporaries, and recording each op's live bytes in ``recorder``. Tensors in ``held``
    stay live to the end of the run; ``through`` bytes are live throughout it."""
    tensors = graph.tensors
    root = {}
    for op in ops:
        if op.kind in VIEW_KINDS and op.inputs:
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
    for name in held:  # a later run reads it
        if name in produced or root.get(name, name) in last_use:
            last_use[root.get(name, name)] = len(ops)
    live = np.full(tiles, through / tiles)
    live_sum = float(through)  # live.sum(), kept as bytes are added and freed
    owner: dict[str, tuple[int, int]] = {}
    frees: dict[int, list[str]] = {}
    for t, i in last_use.items():
        frees.setdefault(i, []).append(t)
    no_temp = np.zeros(tiles)  # the temporaries of an op without any (read only)
    for name in last_use:  # inputs of the run: streamed in, received, or loaded from streaming memory
        t = tensors[name]
        if name not in produced and t.role not in ALWAYS_LIVE and name not in restored:
            owner[name] = layout.place(tiles)
            layout.add(live, owner[name], t.live_bytes)
            live_sum += t.live_bytes
    for i, op in enumerate(ops):
        cost = costs.get(op.name, FREE)
        used = cost.tiles_used or tiles
        for name in op.inputs:  # loaded from streaming memory just before its first use
            t = tensors[name]
            if t.location == "off_chip" and name not in owner:
                owner[name] = layout.place(used)
                layout.add(live, owner[name], t.live_bytes / t.shards)
                live_sum += t.live_bytes / t.shards
        start = None  # first tile of the op's outputs: its temporaries go on the same tiles
        if op.kind not in VIEW_KINDS:
            for o in op.outputs:
                t = tensors[o]
                if t.role not in ALWAYS_LIVE and o in last_use and o not in owner and t.location != "io_tiles":
                    owner[o] = layout.place(used)  # a shard with RTS (LAMB's updater of a sharded state)
                    layout.add(live, owner[o], t.live_bytes / t.shards)
                    live_sum += t.live_bytes / t.shards
                    start = owner[o][0] if start is None else start
        start = layout.next if start is None else start
        temp, temp_sum = no_temp, 0.0
        if cost.profile is not None and cost.temp_bytes_per_tile:
            temp = rolled(cost.profile.temp, start)
            temp_sum = float(cost.profile.temp.sum())
        elif cost.temp_bytes_per_tile:
            temp_sum = cost.temp_bytes_per_tile * used
            temp = np.zeros(tiles)
            layout.add(temp, (start, max(1, min(tiles, used))), temp_sum)
        # adding no temporaries leaves the sum as it is (bytes are never negative zero)
        level = always + live if temp is no_temp else always + live + temp
        peak.raise_to(level, live, temp, base + i)
        recorder.record(op, run, level, live, temp, live_sum, temp_sum)
        # while the op runs, its inputs and outputs are live together: the peak is taken before its frees
        by_role["activation_peak"] = max(by_role["activation_peak"], int(round(live.sum())))
        for t in frees.get(i, ()):
            if t in owner:
                shards = tensors[t].shards if tensors[t].location == "off_chip" or t in produced else 1
                layout.add(live, owner.pop(t), -tensors[t].live_bytes / shards)
                live_sum -= tensors[t].live_bytes / shards
