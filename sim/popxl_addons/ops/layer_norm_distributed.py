"""popxl-addons' layer norm of a tensor sharded over a replica group along its hidden axis
(``popxl_addons.ops.layer_norm_distributed``, its C++ ``LayerNormDistributedOp``), as tensor-parallel
models (Bloom) norm their activations.

Its opx takes the statistics as poplin's distributed norm does (``distributedNormStatistics`` of the
transposed input: each row's sum and sum of squares over this replica's hidden features, one
all-reduce of both over the group) and then ``popnn::ln::layerNormalise``. Here the same work from
PopXL ops the simulator prices: the squares (one map), the two sums (one reduction of both), their
all-reduce over the group, and the normalisation with the scale and shift (one map). The gradient is
those ops' (so its sums are all-reduced too, as the op's gradient all-reduces its)."""

from __future__ import annotations

from ... import popxl
from ...popxl import ops
from ...popxl.ops._core import _graph

__all__ = ["layer_norm_distributed"]


def layer_norm_distributed(t: popxl.Tensor, w: popxl.Tensor, b: popxl.Tensor, epsilon: float = 1e-5, group=None):
    """``t`` (rows, this replica's hidden features) normalised over the hidden features of every member of
    ``group`` (every replica by default), then scaled by ``w`` and shifted by ``b`` (this replica's)."""
    where = "popxl_addons.ops.layer_norm_distributed"
    g = _graph(where, t, w, b)
    if t.rank != 2 or w.rank != 1 or b.rank != 1 or not w.shape == b.shape == t.shape[1:]:
        raise ValueError(f"{where}: expected t (rows, hidden), w and b (hidden,); got {t.shape}, {w.shape}, "
                         f"{b.shape}")
    group = group if group is not None else g.ir.replica_grouping()
    with g._building() as bld:
        squares = bld.op("map", [t._sim], [t.shape], {"steps": ["square"], "grad": [["mul", "scale"]]},
                         name=g._scoped("layer_norm_distributed/squares"))[0]
    both = ops.concat([t.reshape((t.shape[0], 1, t.shape[1])),
                       g._wrap(squares, t.dtype).reshape((t.shape[0], 1, t.shape[1]))], axis=1)
    sums = ops.collectives.replicated_all_reduce(ops.sum(both, axis=2), group=group)  # (rows, 2)
    with g._building() as bld:
        out = bld.op("map", [t._sim, sums._sim, w._sim, b._sim], [t.shape],
                     {"steps": ["sub", "mul", "mul", "add"], "grad": [["sub", "mul", "mul", "mul"], None, None, None]},
                     name=g._scoped("layer_norm_distributed"))[0]
    return g._wrap(out, t.dtype)
