"""TensorFlow's cached graph functions: the copies into and out of each call (``Options.cachedGraphFunctions``).

graphcore/tensorflow builds every convolution, matmul and norm as a call of a cached poputil graph
function, one per signature (``conv_graph_caching.cc`` ``DoCachedConvolution``, ``dot_graph_caching.cc``
``DoCachedDot``, ``norm_graph_caching.cc``), so like layers share one program. The function's parameters
are clones of the first call's tensors, and every call, the first included, copies its arguments in and
its results out (poplibs ``GraphFunction.cpp`` ``VoidFunction::operator()``: a ``Copy`` of each input
argument to its parameter before the call, of each output after it). A backward convolution first runs
another function that transposes and flips the weights (``CreateCachedBwdWeights``: the weights copied in,
the transposed ones out), then the convolution's, with the transposed weights among its inputs.

The copies are priced as PopART's outlined calls' are (:func:`sim.compiler.outlining.merged_copy`: each
tensor a popops copy on its tiles, a call's copies in one program and its copies out another), added to
the op's cost. TensorFlow runs no PopART outliner, so with these copies the run prices no outlined calls.

An op of any program whose attributes carry ``graph_function`` is such a call too (poplibs'
``single_conv_layer`` runs its forward convolution, and a backward one of the same canonical
parameters, through one ``graphfn::TensorFunction``: :func:`sim.poplibs_benchmarks.conv_graph`).
"""

from __future__ import annotations

from ..cost import OpCost
from ..graph.ir import Graph
from ..hardware.system import IPU
from .outlining import merged_copy, per_ipu, with_copy

#: the op kinds TensorFlow's IPU backend runs as cached graph functions
FUNCTION_KINDS = frozenset({"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "matmul", "batchnorm",
                            "batchnorm_grad", "layernorm", "layernorm_grad", "groupnorm", "groupnorm_grad"})


def add_function_copies(g: Graph, costs: dict[str, OpCost], ipu: IPU, tiles: int,
                        tensorflow: bool = True) -> tuple[dict[str, OpCost], dict[int, tuple[int, int, int]]]:
    """``costs`` with each graph-function call's copies added to its op (with ``tensorflow``, every op
    of :data:`FUNCTION_KINDS`; always, an op whose attributes carry ``graph_function``); and, per IPU,
    the calls, the tensors they copy and the copies' cycles when each op of the graph runs once
    (``{ipu: (calls, copies, cycles)}``)."""
    costs = dict(costs)
    counts: dict[int, tuple[int, int, int]] = {}
    for op in g.ops:
        cached = tensorflow and op.kind in FUNCTION_KINDS
        if not (cached or op.attrs.get("graph_function")) or op.name not in costs:
            continue
        programs = [(list(op.inputs), "in"), (list(op.outputs), "out")]
        if cached and op.kind == "conv2d_grad_input":  # the weights' transpose and flip, its own call first
            weights = op.inputs[1]
            programs = [([weights], "in to the weight transpose"), ([weights], "out of the weight transpose"),
                        *programs]
        calls, copied, cycles = counts.get(op.ipu, (0, 0, 0))
        cost = costs[op.name]
        for tensors, where in programs:
            copy = merged_copy(tensors, g, ipu, tiles)
            cost = with_copy(cost, copy, sum(g.tensors[t].nbytes for t in tensors), where, "graph function")
            copied += len(tensors)
            cycles += copy.cycles
        costs[op.name] = cost
        counts[op.ipu] = (calls + 1 + (cached and op.kind == "conv2d_grad_input"), copied, cycles)
    return costs, counts


def notes(called: dict[int, tuple[int, int, int]], tensorflow: bool = True) -> list[str]:
    """What a run's report says of the graph functions' copies (:func:`add_function_copies`'s counts)."""
    each = per_ipu(called)
    if not each:
        return []
    if not tensorflow:
        return [f"graph functions: the ops marked graph_function are calls that copy their arguments in and their "
                f"results out: {each}, each of the graph's ops run once"]
    return [f"cachedGraphFunctions (TensorFlow): each convolution, matmul and norm is a call of a cached graph "
            f"function that copies its arguments in and its results out (PopART's outlining not run): {each}, "
            f"each of the graph's ops run once"]
