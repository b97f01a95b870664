"""popxl-addons' layers: ``Linear``, ``LayerNorm`` and ``Embedding`` modules (their variables' initial
values are random or constant numbers of the right shapes: the simulator computes no values)."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from ... import popxl
from ...popxl import ops
from ..module import Module

#: popxl-addons' Embedding pads each vocabulary shard to a multiple of this (popops' multiSlice grain)
VOCAB_GRAIN = 16


#: draws the layers' initial weights (values the simulator never reads; float32 draws are the cheap ones)
_RNG = np.random.default_rng(0)


def _normal(shape) -> np.ndarray:
    """Initial weights of ``shape``: normal, standard deviation 0.02 (float32)."""
    return _RNG.standard_normal(shape, dtype=np.float32) * np.float32(0.02)


class Linear(Module):
    """``x @ weight (+ bias)``, the weight (in_features, out_features)."""

    def __init__(self, out_features: int, bias: bool = True, replica_grouping=None):
        super().__init__()
        self.out_features, self.bias, self.replica_grouping = out_features, bias, replica_grouping

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(_normal, (x.shape[-1], self.out_features)), x.dtype,
                                    replica_grouping=self.replica_grouping)
        y = x @ w
        if self.bias:
            y = y + self.add_variable_input("bias", partial(np.zeros, self.out_features), x.dtype,
                                            replica_grouping=self.replica_grouping)
        return y


class LayerNorm(Module):
    """Layer norm of an (N, C) tensor with a weight and a bias of C."""

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        if x.rank != 2:
            raise ValueError("The input tensor must be of shape N x C. Please flatten all extra dimensions.")
        w = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, x.shape[-1]), x.dtype)
        return ops.layer_norm(x, w, b, eps=eps)


class Embedding(Module):
    """A table of ``vocab_size`` rows of ``hidden_size`` looked up at integer indices; with a replica
    grouping of several groups, each group holds one shard of the vocabulary (its rows padded to a
    multiple of 16), and the indices must be offset to the shard."""

    def __init__(self, dtype, vocab_size: int, hidden_size: int, axis: int = 0, replica_grouping=None):
        super().__init__()
        self.dtype, self.vocab_size, self.hidden_size, self.axis = dtype, vocab_size, hidden_size, axis
        self.replica_grouping = replica_grouping
        self.n_shards = replica_grouping.num_groups if replica_grouping else 1
        self.vocab_shard_size = self.get_vocab_shard_size(vocab_size, self.n_shards)
        self.offsets = self.get_offsets(vocab_size, self.n_shards)

    @staticmethod
    def get_vocab_shard_size(vocab_size: int, n_shards: int) -> int:
        return VOCAB_GRAIN * math.ceil(math.ceil(vocab_size / n_shards) / VOCAB_GRAIN)

    @staticmethod
    def get_offsets(vocab_size: int, n_shards: int) -> np.ndarray:
        return np.arange(n_shards) * Embedding.get_vocab_shard_size(vocab_size, n_shards)

    def build(self, indices: popxl.Tensor) -> popxl.Tensor:
        self.weight = self.add_variable_input("weight", partial(_normal, (self.vocab_shard_size, self.hidden_size)),
                                              self.dtype, replica_grouping=self.replica_grouping)
        return ops.gather(self.weight, indices, axis=self.axis, zero_OOR=self.n_shards > 1)
