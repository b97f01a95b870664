"""popxl-addons' ``LayerNormDistributed``: a layer norm of activations sharded over a replica group along
their hidden axis (:func:`~sim.popxl_addons.ops.layer_norm_distributed.layer_norm_distributed`), with a
scale and shift per replica's features (variables grouped across the group: each member its own)."""

from __future__ import annotations

from functools import partial

import numpy as np

from ... import popxl
from ..module import Module
from ..ops.layer_norm_distributed import layer_norm_distributed

__all__ = ["LayerNormDistributed"]


class LayerNormDistributed(Module):
    def __init__(self, replica_grouping=None):
        super().__init__()
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        group = self.replica_grouping or popxl.gcg().ir.replica_grouping()
        own = group.transpose()  # each member its own features' scale and shift
        w = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype, replica_grouping=own)
        b = self.add_variable_input("bias", partial(np.zeros, x.shape[-1]), x.dtype, replica_grouping=own)
        return layer_norm_distributed(x, w, b, epsilon=eps, group=group)
