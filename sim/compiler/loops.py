"""PopART's Loop: what copying its loop-carried tensors costs each iteration (cycles).

``LoopOpx::grow`` (popart ``popx/op/loopx.cpp``) clones every body output once, and each iteration,
after the body, copies every body output to its clone (``copyBodyOutputsToBodyOutputClones``) and,
before the next, every clone to its body input (``copyBodyOutputsToExplicitBodyInputs``), each copy
unless ``AliasZeroCopy`` finds it not needed; that transform runs only with the session option
``aliasZeroCopy``, off by default (``aliaszerocopy.cpp`` ``nodeRequired``). So an output the body
passes through unchanged is copied too. The copies of one step follow one another and Poplar merges
copies scheduled one after another (as ``sim.compiler.outlining`` takes it), so each step is one
copy program, priced as an outlined call's merged copy: each tensor's popops copy on its tiles, one
launch and one sync for them all.

A clone has its body output's tile mapping, so the first copy stays on each tile. The second goes
to the body input, laid out for the ops that read it in the body (PopART creates a subgraph input
for its consumer) or like the loop's input: the same layout when the output is the input passed
through or made from it by ops that lay their result out like their input (element-wise ops and
views), another when an op laid the output out by its own plan (a matmul, a convolution, a gather,
a scatter, a reduction: every other kind), and then the copy crosses the exchange.

The front ends (``sim.poptorch``'s ``for_loop``, ``sim.onnx``'s Loop) emit one ``copy`` op per carried
tensor per iteration, marked ``loop_carried`` with the iteration's ``loop_group``; :func:`merge_loop_copies`
prices each group's two merged copies on its first op and nothing on the others.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..cost import FREE, OpCost, TileProfile
from ..cost.exchange import exchange_cycles
from ..cost.row_ops import ROW_OP_KINDS
from ..cost.rules import ELEMENTWISE_KINDS
from ..cost.vector import spread
from ..graph.ir import VIEW_KINDS, Graph, Op
from ..hardware.system import IPU
from .outlining import merged_copy

#: kinds whose result is laid out like their first input (popops' element-wise ops, views and pads,
#: popnn's row ops, the exit flag's map): a carried output made through them from the body's input
#: keeps the input's layout
LAYOUT_KEEPING = ELEMENTWISE_KINDS | VIEW_KINDS | set(ROW_OP_KINDS) | {"pad", "logical"}


def relaid_out(g: Graph, tensor: str, makers: dict[str, Op] | None = None) -> bool:
    """Whether the carried ``tensor`` was laid out by an op's own plan in the body, so its copy to the
    body input crosses the exchange: back through the ops that lay their result out like their input,
    it reaches an op of another kind (True), or the loop's previous carried value or a tensor no op made
    (False). ``makers``: each op by name (built from ``g`` when not given)."""
    makers = {op.name: op for op in g.ops} if makers is None else makers
    seen = set()
    while tensor not in seen:
        seen.add(tensor)
        op = makers.get(g.tensors[tensor].producer)
        if op is None or op.attrs.get("loop_carried"):
            return False
        if op.kind not in LAYOUT_KEEPING or not op.inputs:
            return True
        tensor = op.inputs[0]
    return False


def merged_loop_copies(tensors: list[str], relaid: list[bool], g: Graph, ipu: IPU, tiles: int,
                       alias_zero_copy: bool = False) -> OpCost:
    """The two copy programs of one Loop iteration over ``tensors`` (body outputs to their clones, the
    clones to the body inputs), each the outlined calls' merged copy (:func:`outlining.merged_copy`),
    ``relaid`` saying which of the second cross the exchange. With ``alias_zero_copy`` only those are
    copied (PopART then aliases the rest), once."""
    copied = [t for t, across in zip(tensors, relaid) if across or not alias_zero_copy]
    if not copied:
        return FREE
    one = merged_copy(copied, g, ipu, tiles)
    sets = 1 if alias_zero_copy else 2
    received = np.zeros(tiles)
    for name in (t for t, across in zip(tensors, relaid) if across):
        t = g.tensors[name]
        used, per_tile = spread(t.numel, t.itemsize, ipu, tiles)
        received[:used] += per_tile * t.itemsize
    exch = exchange_cycles(int(received.max()), ipu)
    phases = 1 if exch else 0
    compute = one.profile.compute * sets
    crossing = sum(relaid)
    what = (f"{len(tensors)} loop-carried tensor{'s' if len(tensors) != 1 else ''} copied to "
            + ("the body's inputs" if alias_zero_copy else "clones and back")
            + (f", {crossing} through the exchange" if crossing else ""))
    return OpCost(int(compute.max()), int(exch), int((sets + phases) * ipu.internal_sync_cycles), sets, 0.0,
                  int(received.sum()), int((compute > 0).sum()), 0, what,
                  TileProfile(compute, received, np.zeros(tiles)), launch_cycles=one.launch_cycles * sets,
                  exchange_setup_cycles=phases * ipu.exchange_setup_cycles)


def merge_loop_copies(g: Graph, costs: dict[str, OpCost], ipu: IPU, tiles: int,
                      alias_zero_copy: bool = False) -> dict[str, OpCost]:
    """``costs`` with each Loop iteration's carried copies (the ops sharing a ``loop_group``) priced as
    :func:`merged_loop_copies` on the group's first op, the others free."""
    groups: dict[tuple, list[Op]] = {}
    for op in g.ops:
        if op.attrs.get("loop_carried") and "loop_group" in op.attrs and op.name in costs:
            groups.setdefault((op.attrs["loop_group"], op.ipu), []).append(op)
    if not groups:
        return costs
    costs = dict(costs)
    makers = {op.name: op for op in g.ops}
    for ops in groups.values():
        tensors = [op.inputs[0] for op in ops]
        relaid = [relaid_out(g, t, makers) for t in tensors]
        costs[ops[0].name] = merged_loop_copies(tensors, relaid, g, ipu, tiles, alias_zero_copy)
        for op in ops[1:]:
            costs[op.name] = replace(FREE, plan=f"copied with {ops[0].name}")
    return costs
