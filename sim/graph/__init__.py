"""The graph IR and the training transform.

``ir`` holds tensors, ops, the :class:`Graph` and the :class:`GraphBuilder` models are written
with; ``training`` turns an inference graph into a training one (backward ops, gradient
accumulation, the optimizer update). No costs are computed here.
"""

from .ir import DTYPE_BYTES, PASSES, ROLES, VIEW_KINDS, Graph, GraphBuilder, Op, Tensor, canonical_dtype, spatial, spatial_attr
from .training import OPTIMIZERS, Optimizer, expand_training

__all__ = ["DTYPE_BYTES", "PASSES", "ROLES", "VIEW_KINDS", "Graph", "GraphBuilder", "Op", "Tensor",
           "canonical_dtype", "spatial", "spatial_attr", "OPTIMIZERS", "Optimizer", "expand_training"]
