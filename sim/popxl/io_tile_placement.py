"""Which tensors of a PopXL program live on the IO tiles, and the copies between them and the
compute tiles.

A remote copy made in ``popxl.io_tiles()`` runs on the IO tiles (``ir.options.numIOTiles`` of
each IPU), alongside the compute tiles, and its tensor lives there; ``ops.io_tile_copy`` moves a
tensor across. As PopART's IoComputeTileCopy transform does, an op on the compute tiles that
reads a tensor on the IO tiles gets a copy inserted before it (one per tensor), and so does a
store on the IO tiles of a tensor on the compute tiles. Tensors on the IO tiles take no compute
tile memory (``Tensor.location == "io_tiles"``); the most of them live at once must fit the IO
tiles' memory.
"""

from __future__ import annotations

from ..errors import OptionsError, OutOfMemoryError
from ..graph.ir import IO_TILE_COPY, Graph, Op


def on_io_tiles(graph, name: str) -> bool:
    """Is tensor ``name`` of the simulated ``graph`` on the IO tiles: made by a remote load on them,
    or by an IO-tile copy to them?"""
    op = graph.producer_op(name)
    return op is not None and makes_io_tensor(op)


def makes_io_tensor(op) -> bool:
    """Does ``op`` leave its outputs on the IO tiles?"""
    if op.kind == IO_TILE_COPY:
        return bool(op.attrs.get("to_io"))
    return op.kind == "remote_load" and bool(op.attrs.get("io_tiles"))


def place_on_io_tiles(graph: Graph, io_tiles: int, ipu) -> tuple[Graph, list[str]]:
    """``graph`` with its tensors on the IO tiles marked and the copies PopART would insert
    added, and the run's notes on them; ``graph`` itself when nothing runs on the IO tiles.
    ``ipu`` is the system's :class:`~sim.hardware.system.IPU` (for the IO tiles' memory)."""
    uses = [op for op in graph.ops if makes_io_tensor(op) or _stores_from_io(op)]
    if not uses:
        return graph, []
    if not io_tiles:
        raise OptionsError(f"{uses[0].name} was made in popxl.io_tiles(), so it runs on the IO tiles, but the program "
                           "has none: set ir.options.numIOTiles (an even number of tiles, 32 to 192)")
    g = graph.copy()
    ops, on_io, copied, inserted = [], set(), {}, []

    def copy(source: str, to_io: bool, before: Op) -> str:
        name = g.unique_op_name(f"{before.name}/io_tile_copy")
        t = g.tensors[source]
        out = g.add_tensor(g.unique_tensor_name(name), t.shape, t.dtype, "activation", producer=name).name
        g._op_names.add(name)
        ops.append(Op(name, IO_TILE_COPY, [source], [out], {"to_io": to_io}, before.pass_, before.ipu, before.stage,
                      before.phase, before.block, before.recompute))
        inserted.append(source)
        return out

    for op in g.ops:
        if _stores_from_io(op) and op.inputs[0] not in on_io:  # the stored tensor goes to the IO tiles first
            op.inputs[0] = copy(op.inputs[0], True, op)
        elif op.kind != IO_TILE_COPY and not makes_io_tensor(op):  # on the compute tiles
            for i, name in enumerate(op.inputs):
                if name in on_io:
                    if name not in copied:
                        copied[name] = copy(name, False, op)
                    op.inputs[i] = copied[name]
        ops.append(op)
        if makes_io_tensor(op):
            on_io.update(op.outputs)
    g.ops = ops
    for name in on_io:
        g.tensors[name].location = "io_tiles"
    _check_fits(g, on_io, io_tiles, ipu)
    remote = sum(1 for op in uses if op.kind in ("remote_load", "remote_store"))
    notes = [f"{remote} remote buffer copies run on the {io_tiles} IO tiles of their IPU, alongside the compute tiles"]
    if inserted:
        names = sorted(set(inserted))
        shown = ", ".join(names[:NOTED_COPIES]) + (f" and {len(names) - NOTED_COPIES} more" if len(names) > NOTED_COPIES
                                                   else "")
        notes.append(f"{len(names)} IO-tile copies inserted as PopART's IoComputeTileCopy does, where the compute "
                     f"tiles read a tensor on the IO tiles or a store on them writes one from the compute tiles: "
                     f"{shown}")
    return g, notes


#: how many of the inserted copies the note names (the op trace lists every one)
NOTED_COPIES = 5


def _stores_from_io(op: Op) -> bool:
    return op.kind == "remote_store" and bool(op.attrs.get("io_tiles"))


def _check_fits(g: Graph, on_io: set[str], io_tiles: int, ipu) -> None:
    """Raise :class:`OutOfMemoryError` if the tensors on the IO tiles live at once (from the op
    making each to the last op reading it) need more than the IO tiles hold (their memory less
    Poplar's reserved bytes)."""
    last = {}
    for i, op in enumerate(g.ops):
        for name in op.inputs:
            if name in on_io:
                last[name] = i
    live, peak, worst = {}, 0, None
    for i, op in enumerate(g.ops):
        live.update((name, g.tensors[name].nbytes) for name in op.outputs if name in on_io)
        if sum(live.values()) > peak:
            peak, worst = sum(live.values()), (op, sorted(live))
        for name in [n for n in live if last.get(n, i) <= i]:
            del live[name]
    room = io_tiles * (ipu.sram_bytes_per_tile - ipu.reserved_bytes_per_tile)
    if peak > room:
        op, names = worst
        raise OutOfMemoryError(
            f"out of IO-tile memory on IPU {op.ipu or 0} at {op.name}: the tensors on its IO tiles then "
            f"({', '.join(names)}) need {peak:,} bytes but {io_tiles} IO tiles hold {room:,}; "
            f"{peak - room:,} bytes over. "
            "Use more IO tiles (ir.options.numIOTiles) or copy tensors off them sooner",
            ipu=op.ipu or 0, op=op.name, shortfall_bytes=peak - room)
