"""What Poplar allocates on each tile for the program itself, beside the tensors (bytes per tile).

The categories are PopVision Graph Analyser's memory-report categories for code and program
state (the names ``controlCode``, ``vertexCode``, ``vertexInstanceState``,
``internalExchangeCode`` are those of the report's per-tile categories, as graphcore's
ipu_tensorflow_addons ``keras/experimental/auto_pipeline/utils/pva_utils.py`` reads them):

* **control code**: every tile runs the program's control flow, one entry per program step (a
  compute set or an exchange, each preceded by a sync) whether or not the tile works in it, on
  top of a fixed part (the runtime, the host-exchange and upload/download programs):
  ``reserved_bytes_per_tile + control_code_bytes_per_step x steps`` on every tile;
* **vertex code**: the code of each distinct codelet on the tiles that run it, once per tile
  however many vertices use it (``vertex_code_bytes_per_codelet``): an op's cost names its codelets
  (a matmul's or convolution's: :func:`sim.cost.amp.plan_codelets`, so a layer's passes share their
  convolution vertex), else it has one per compute set, shared by ops of its kind and type;
* **vertex state**: each vertex's fields (edge pointers, sizes, worklists), one vertex per
  compute set on each tile that works in it (poplin's AMP and poplibs' vector codelets are
  supervisor / multi-vertices: one per tile per compute set): ``vertex_state_bytes_per_vertex``;
* **exchange code**: the send/receive instructions of each exchange, on every tile that receives
  in it (``exchange_code_bytes_per_phase``);
* **stack**: the supervisor and worker stacks, on the tiles that run vertices. Poplar sizes them
  from the codelets' call graphs at compile time (graphcore/popart commit 417a1208, "the
  supervisor and workers stack sizes are automatically determined at graph compile time"):
  ``stack_bytes_per_tile``.

Beside them, the constants a library adds for its vertices (popnn's pooling worklists:
``OpCost.constant_bytes_per_tile``) go to the tensors' ``constants`` category, on the tiles the op
works on, once however many times the op's program is called.

All of it is always live. The constants are per IPU in ``configs/*.toml`` with their sources.
Op kinds share codelets: two ops of the same kind and data type run the same codelets.

**Outlining** (PopART's ``enableOutlining``, on by default in PopART and so in PopTorch): repeated
identical op sequences (BERT's layers, their recomputation) become one subgraph that each repetition
calls, so its compute sets, their vertex state and its exchanges exist once on the IPU. Here an op
whose cost signature (:func:`sim.cost.rules.op_signature`: kind, shapes, dtypes, attributes) was
already seen on the IPU adds one program step (the call) and no vertex state or exchange code.
The copies each call makes into and out of the subgraph are priced by :mod:`sim.compiler.outlining`.

**Called programs** (PopXL's ``ops.call`` and ``ops.repeat``: a Poplar ``Call`` of the subgraph's
function, a ``Repeat`` of its body): the front end copies a subgraph's ops into its caller for every
call or iteration, each naming its origin in the :data:`~sim.cost.rules.CODE_OF` attribute; the
program has that code once, so a copy of an op already seen adds nothing to the program memory.
"""

from __future__ import annotations

import re

import numpy as np

from ..cost import FREE, OpCost
from ..cost.row_ops import ROW_OP_KINDS, batchnorm_steps, row_op_codelets, row_op_steps
from ..cost.rules import CODE_OF, Signatures, op_signature
from ..graph.ir import Graph, Op
from ..hardware.system import IPU

#: the program-memory categories, in the order :data:`sim.compiler.memory.CATEGORIES` lists them
PROGRAM_CATEGORIES = ("control_code", "vertex_code", "vertex_state", "exchange_code", "stack")
_SERIAL = re.compile(r"serialised x(\d+)")
#: the codelet key of the copies a call makes into and out of its program (bytes moved, whatever their type)
CALL_COPY_CODELET = ("copy", "", 0)


def serial_pieces(cost: OpCost) -> int:
    """Pieces a matmul or convolution is serialised into (1 when it is not)."""
    m = _SERIAL.search(cost.plan or "")
    return int(m.group(1)) if m else 1


def _piece_sets(cost: OpCost) -> int:
    """The op's own compute sets in one piece of it (all of them when it is not serialised; 0 for a view),
    call copies' sets left out; an op run as a loop over parts (``program_extent``) holds each part once."""
    if cost.program_extent is not None:
        return max(0, cost.program_extent[0] - cost.copy_sets)
    own = int(cost.supersteps) - cost.copy_sets
    return max(1, own // serial_pieces(cost)) if own > 0 else 0


def op_program_steps(cost: OpCost, ipu: IPU) -> tuple[int, int]:
    """``(compute sets, exchange phases)`` in the program of an op (0, 0 for a view).

    poplin runs a serialised op as a loop, ``Repeat(pieces, {slice, body, update, loopPost})``
    (``lib/poplin/Convolution.cpp``), so its program holds one piece's steps (the slice and the
    update included) and the loop counter's increment, however many pieces run.
    """
    if cost.program_extent is not None:  # a loop over parts, each compiled once (sim.cost.opcost.in_series)
        sets, setup = cost.program_extent  # and the loop counter's increment
        return sets + 1, round(setup / ipu.exchange_setup_cycles) if ipu.exchange_setup_cycles else 0
    phases = round(cost.exchange_setup_cycles / ipu.exchange_setup_cycles) if ipu.exchange_setup_cycles else 0
    pieces = serial_pieces(cost)
    if pieces > 1:
        return _piece_sets(cost) + 1, int(phases // pieces)
    return int(cost.supersteps), int(phases)


def op_codelets(op: Op, graph: Graph, cost: OpCost) -> list[tuple]:
    """Keys of the distinct codelets an op runs: its cost's ``codelets`` when it names them, else one
    per compute set of one piece of the op (a serialised matmul loops over its pieces), shared by
    ops of the same kind and dtype; and, when call copies were added to it, Poplar's copy code, one
    codelet shared by every copy."""
    copies = [CALL_COPY_CODELET] if cost.copy_sets else []
    if cost.codelets:
        return list(cost.codelets) + copies
    sets = _piece_sets(cost)
    names = op.inputs + op.outputs
    dtype = graph.tensors[names[0]].dtype if names else ""
    if op.kind in ROW_OP_KINDS and sets:  # popops calls: the codelets of their steps, shared with other ops
        return row_op_codelets(row_op_steps(op.kind, op.attrs), dtype) + copies
    if op.kind in ("batchnorm", "batchnorm_grad") and sets:  # the same calls, per channel
        return row_op_codelets(batchnorm_steps(op.kind, op.attrs), dtype) + copies
    return [(op.kind, dtype, j) for j in range(sets)] + copies


def rolled(vec: np.ndarray, start: int) -> np.ndarray:
    """A new array of ``vec`` moved ``start`` places along (tile ``i`` to ``i + start``, wrapping): ``np.roll``
    of a vector, without its generality's overhead (called once per op of every run)."""
    start %= len(vec)
    return np.concatenate((vec[len(vec) - start:], vec[:len(vec) - start]))


def program_memory(graph: Graph, ops: list[Op], costs: dict[str, OpCost], ipu: IPU,
                   tiles: int, outlining: bool = True, signatures: Signatures | None = None) -> dict[str, np.ndarray]:
    """Bytes per tile of each of :data:`PROGRAM_CATEGORIES`, and of the vertices' ``constants``, for an IPU
    that runs ``ops`` (every run of it, recomputation included), on ``tiles`` compute tiles; with ``outlining`` an op
    identical to one before it on the IPU calls that one's program (see the module docstring).

    Each op's vertices go on the tiles of its cost profile (its first ``tiles_used`` tiles when
    it has no profile), the ranges of successive ops starting where the previous one ended, as
    :class:`sim.compiler.memory._Layout` places tensors.
    """
    steps = 0
    state = np.zeros(tiles)
    constants = np.zeros(tiles)
    exchange = np.zeros(tiles)
    runs_vertices = np.zeros(tiles, dtype=bool)
    codelets: dict[tuple, np.ndarray] = {}
    outlined: set[tuple] = set()
    start = 0
    called: set = set()  # the origins of the copies of called subgraphs' ops seen so far
    for op in ops:
        cost = costs.get(op.name, FREE)
        sets, phases = op_program_steps(cost, ipu)
        if not sets and not phases:
            continue
        # a backward op may carry its forward op's attributes (and origin): the kind and pass tell them apart
        origin = op.attrs.get(CODE_OF) and (op.attrs[CODE_OF], op.kind, op.pass_)
        if origin is not None:
            if origin in called:
                continue  # the called program's code, there once
            called.add(origin)
        if outlining:
            signature = signatures(op) if signatures else op_signature(op, graph)
            if signature in outlined:
                steps += 1  # the call of the outlined program
                continue
            outlined.add(signature)
        steps += sets + phases
        used = max(1, min(tiles, cost.tiles_used or tiles))
        if cost.profile is not None and len(cost.profile.compute) == tiles:
            copied = cost.profile.copies
            works = rolled(cost.profile.compute - (0 if copied is None else copied) > 0, start)
            copy_works = works if copied is None else rolled(copied > 0, start)
            receives = rolled(cost.profile.bytes_in > 0, start)
        else:
            works = copy_works = rolled(np.arange(tiles) < used, start)
            receives = works if cost.exchange_bytes else np.zeros(tiles, dtype=bool)
        start = (start + used) % tiles
        copy_sets = min(cost.copy_sets, sets)  # call copies' compute sets run on the copied tensors' tiles
        state += (works * (sets - copy_sets) + copy_works * copy_sets) * ipu.vertex_state_bytes_per_vertex
        constants += works * cost.constant_bytes_per_tile
        exchange += receives * phases * ipu.exchange_code_bytes_per_phase
        if sets:
            runs_vertices |= works | (copy_works if copy_sets else False)
            for key in op_codelets(op, graph, cost):
                mask = codelets.setdefault(key, np.zeros(tiles, dtype=bool))
                mask |= copy_works if key == CALL_COPY_CODELET else works
    code = np.zeros(tiles)
    for mask in codelets.values():
        code += mask * ipu.vertex_code_bytes_per_codelet
    return {"control_code": np.full(tiles, float(ipu.reserved_bytes_per_tile + steps * ipu.control_code_bytes_per_step)),
            "vertex_code": code, "vertex_state": state, "exchange_code": exchange,
            "stack": runs_vertices * float(ipu.stack_bytes_per_tile), "constants": constants}
