"""What kind of workload a graph is, as the held-out validation rows are grouped.

``python -m sim.validation`` stores how far the simulator came out from each published measurement
it has not been fitted to (:mod:`sim.validation.held_out`), grouped by this family, so a run can say
what the simulator's error has been on workloads of its own kind:

``transformer``    the graph has attention: a softmax over the product of two activations
``convolutional``  no attention, and convolutions do at least as many FLOPs as matmuls
``other``          everything else (MLPs, recurrent and graph networks, ...)
"""

from __future__ import annotations

from collections.abc import Mapping

from .ir import Graph

FAMILIES = ("transformer", "convolutional", "other")
#: op kinds of convolutions and their backward passes
CONV_KINDS = ("conv2d", "conv2d_grad_input", "conv2d_grad_weight")
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


def family(graph: Graph, flops_by_op: Mapping[str, float]) -> str:
    """The graph's :data:`FAMILIES` entry; ``flops_by_op``: each op's FLOPs by name (the costs')."""
    if has_attention(graph):
        return "transformer"
    conv = sum(flops_by_op.get(op.name, 0.0) for op in graph.ops if op.kind in CONV_KINDS)
    matmul = sum(flops_by_op.get(op.name, 0.0) for op in graph.ops if op.kind == "matmul")
    return "convolutional" if conv > 0 and conv >= matmul else "other"
