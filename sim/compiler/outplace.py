"""PopART's element-wise ops that cannot run in place: a copy of the input, then the op in place on it.

PopART grows an element-wise op that is not in place (``ElementWiseUnaryOutplaceOpx``) through its
``*Computex::outplace``, which for GELU (both forms), Swish, ReLU, Sigmoid and Softmax clones the input and copies
it (``cloneNcopy``), then runs the in-place op on the clone (popart ``popx/op/gelux.cpp``, ``geluerfx.cpp``,
``swishx.cpp``, ``relux.cpp``, ``sigmoidx.cpp``, ``softmaxx.cpp``; ``elementwisex.cpp``
``EwuComputex::outplace``). The clone keeps the input's tile mapping, so the copy runs on the tiles
that hold the input: one compute set, no exchange.

PopART's inplacing pass (on by default) turns such an op into its in-place variant unless the input
must stay unchanged for an op that can only run after it:

* in training, the op's own gradient when that gradient reads the forward input (``GeluGradOp`` and
  ``SwishGradOp`` do; ReLU's, Sigmoid's and Softmax's read the forward output instead);
* a forward op that also reads the input and needs the op's result first (it depends on one of its
  outputs), so PopART cannot schedule it before the op.

PopXL runs no inplacing pass (its ``Session`` applies only the pre-alias patterns, popart
``python/popxl/python_files/session.py``), so there the program says: ``ops.gelu`` copies, ``ops.gelu_``
does not (the op's ``in_place`` attribute, set by :mod:`sim.popxl`, decides over the rules above).

Those ops pay the copy here, priced as PopART's outlined calls price theirs
(:func:`sim.compiler.outlining.merged_copy`). TensorFlow's IPU backend (``Options.cachedGraphFunctions``)
lowers these ops itself and pays nothing here.
"""

from __future__ import annotations

from ..cost import OpCost
from ..graph.ir import Graph, Op
from ..hardware.system import IPU
from .outlining import merged_copy, with_copy

#: op kinds whose PopART outplace variant copies its input and then runs in place
CLONE_FIRST_KINDS = frozenset({"gelu", "gelu_erf", "swish", "relu", "sigmoid", "softmax"})
#: of those, the kinds whose PopART gradient op reads the forward input (GeluGradOp, GeluErfGradOp, SwishGradOp)
GRAD_READS_INPUT = frozenset({"gelu", "gelu_erf", "swish"})


def _needs_its_input(op: Op, readers: list[Op], position: dict[str, int], consumers: dict[str, list[Op]]) -> bool:
    """Whether an op other than ``op`` among ``readers`` (the ops reading ``op``'s input) keeps PopART
    from running ``op`` in place (the module docstring's two cases)."""
    later = []
    for reader in readers:
        if reader.forward_of == op.name:
            if op.kind in GRAD_READS_INPUT:
                return True
        elif reader.pass_ != "backward" and position[reader.name] > position[op.name]:
            later.append(reader)
    if not later:
        return False
    last = max(position[r.name] for r in later)
    waiting = {r.name for r in later}
    frontier, seen = list(op.outputs), set()
    while frontier:  # the forward ops that depend on op, up to the last later reader
        for consumer in consumers.get(frontier.pop(), ()):
            if consumer.name in seen or consumer.pass_ == "backward" or position[consumer.name] > last:
                continue
            if consumer.name in waiting:
                return True
            seen.add(consumer.name)
            frontier.extend(consumer.outputs)
    return False


def add_outplace_copies(g: Graph, costs: dict[str, OpCost], ipu: IPU,
                        tiles: int) -> tuple[dict[str, OpCost], dict[int, tuple[int, int]]]:
    """``costs`` with the input copy added to each op PopART runs out of place (see the module
    docstring); and, per IPU, how many such ops there are and their copies' cycles when each op of
    the graph runs once (``{ipu: (ops, cycles)}``)."""
    consumers: dict[str, list[Op]] = {}
    for op in g.ops:
        for t in set(op.inputs):
            consumers.setdefault(t, []).append(op)
    position = {op.name: i for i, op in enumerate(g.ops)}
    costs = dict(costs)
    counts: dict[int, tuple[int, int]] = {}
    # like ops share one cost: (the op's, kept so that its id stays its own; the sum)
    joined: dict[tuple, tuple[OpCost, OpCost]] = {}
    for op in g.ops:
        if op.kind not in CLONE_FIRST_KINDS or op.pass_ != "forward" or op.name not in costs or not op.inputs:
            continue
        x = op.inputs[0]
        in_place = op.attrs.get("in_place")  # PopXL's choice, where the program made it
        if in_place or (in_place is None and
                        not _needs_its_input(op, [r for r in consumers[x] if r is not op], position, consumers)):
            continue
        copy = merged_copy([x], g, ipu, tiles)
        key = (id(costs[op.name]), id(copy))
        if key not in joined:
            joined[key] = (costs[op.name], with_copy(costs[op.name], copy, g.tensors[x].nbytes, "in",
                                                     "PopART's outplace copy of the input (cloneNcopy)"))
        costs[op.name] = joined[key][1]
        n, cycles = counts.get(op.ipu, (0, 0))
        counts[op.ipu] = (n + 1, cycles + copy.cycles)
    return costs, counts


def notes(counts: dict[int, tuple[int, int]]) -> list[str]:
    """What a run's report says of the copies :func:`add_outplace_copies` added."""
    each = ", ".join(f"IPU {i}: {n} op{'s' * (n != 1)}, {cycles:,} cycles"
                     for i, (n, cycles) in sorted(counts.items()) if n)
    if not each:
        return []
    return ["PopART's outplace element-wise ops: GELU, Swish, ReLU, Sigmoid or Softmax run out of place (PopART's "
            "inplacing pass cannot modify the input, which its gradient or a later op reads, or a PopXL program "
            "asked for the out-of-place form) copy the input and run in place on the copy "
            f"(cloneNcopy): {each}, each of the graph's ops run once"]
