"""What kind of workload a graph is, as the held-out validation rows are grouped.

``python -m sim.validation`` stores how far the simulator came out from each published measurement
it has not been fitted to (:mod:`sim.results.held_out`), grouped by this family, so a run can say
what the simulator's error has been on workloads of its own kind:

``transformer``    the graph has attention: a softmax over the product of two activations
``convolutional``  no attention, and the forward convolutions do at least as many FLOPs as the matmuls
``other``          everything else (MLPs, recurrent and graph networks, ...)
"""

from __future__ import annotations

import math

from .ir import Graph

FAMILIES = ("transformer", "convolutional", "other")
#: roles of a matmul operand that is not a variable of the model: attention multiplies two of these
_ACTIVATION_ROLES = ("input", "activation", "gradient")
#: how many ops back from a softmax the product may be (a scale, a mask, a bias, a cast, views)
_STEPS_BACK = 6


def has_attention(graph: Graph) -> bool:
    """True if a softmax reads, through at most a few element-wise ops and views of its shape, a
    matmul of two activations (scores = Q Kᵀ, scaled, masked)."""
    by_name = {op.name: op for op in graph.ops}
    for op in graph.ops:
        if op.kind != "softmax":
            continue
        size = graph.tensors[op.inputs[0]].numel
        tensor = op.inputs[0]
        for _ in range(_STEPS_BACK):
            producer = by_name.get(graph.tensors[tensor].producer)
            if producer is None:
                break
            if producer.kind == "matmul":
                if all(graph.tensors[t].priced_role in _ACTIVATION_ROLES for t in producer.inputs[:2]):
                    return True
                break
            # follow the operand the result is made of element for element (the first of its size)
            tensor = next((t for t in producer.inputs if graph.tensors[t].numel == size), None)
            if tensor is None:
                break
    return False


def _forward_flops(graph: Graph, kind: str) -> float:
    """FLOPs of the forward ops of ``kind`` ("matmul" or "conv2d"), from their shapes."""
    total = 0.0
    for op in graph.ops:
        if op.kind != kind or op.pass_ != "forward":
            continue
        out = graph.tensors[op.outputs[0]].numel
        if kind == "conv2d":  # weights (out channels, in channels per group, kernel height, kernel width)
            total += 2.0 * out * math.prod(graph.tensors[op.inputs[1]].shape[1:])
        else:
            a = graph.tensors[op.inputs[0]].shape
            total += 2.0 * out * (a[-2] if op.attrs.get("transpose_a") and len(a) > 1 else a[-1])
    return total


def family(graph: Graph) -> str:
    """The graph's :data:`FAMILIES` entry."""
    if has_attention(graph):
        return "transformer"
    conv = _forward_flops(graph, "conv2d")
    return "convolutional" if conv > 0 and conv >= _forward_flops(graph, "matmul") else "other"
