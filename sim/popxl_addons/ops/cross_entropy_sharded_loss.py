"""popxl-addons' tensor-parallel cross-entropy (``popxl_addons.ops.cross_entropy_sharded_loss``, its C++
``CrossEntropyShardedOp``): the logits of each sample are sharded over a replica group along the
classes, and every member gets the same per-sample loss.

Its opx (``crossentropyshardedx.cpp``) reduces each row of the shard to its maximum and all-reduces
the maxima (MAX), takes the exponentials of the shifted logits, sums them and all-reduces the sums,
takes the log-softmax, slices out each sample's label (``groupedMultiSlice``, zero where the label is
in another member's range) and all-reduces those (ADD). Its gradient op is one map of the shard:
the softmax less the one-hot of the labels in range, times the loss's gradient.

Here: the row maxima (a reduction) and their all-reduce; the shard's local softmax, log and label
slice as one ``softmax_cross_entropy`` of the shard (per sample), whose gradient is that one map; an
all-reduce of the per-sample sums (issued after the local passes rather than between them: the same
collective on the same bytes); and the all-reduce of the losses, whose gradient passes through
(identical on every member, as the op's gradient takes it). ``ignore_index`` and ``reduction`` are
PopXL ops, as popxl-addons applies them."""

from __future__ import annotations

from ... import popxl
from ...popxl import ops
from ...popxl.ops._core import _graph
from .replicated_all_reduce_TP import replicated_all_reduce_identical_grad_inputs

__all__ = ["cross_entropy_sharded_loss"]


def cross_entropy_sharded_loss(logits: popxl.Tensor, indices: popxl.Tensor, ignore_index=None, replica_grouping=None,
                               reduction: str = "mean", available_memory_proportion: float = 0.4) -> popxl.Tensor:
    """The cross-entropy of ``logits`` (samples, this member's classes) against ``indices`` (samples,),
    already offset to this member's range; the same on every member of ``replica_grouping`` (every
    replica by default). ``reduction``: "mean", "sum" or "none"."""
    where = "popxl_addons.ops.cross_entropy_sharded_loss"
    g = _graph(where, logits, indices)
    if logits.rank != 2 or indices.shape != logits.shape[:1]:
        raise ValueError(f"{where}: expected logits (samples, classes) and indices (samples,), got {logits.shape} "
                         f"and {indices.shape}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"`reduction` should be one of `mean`, `sum` and `none`. Passed: {reduction}")
    group = replica_grouping if replica_grouping is not None else g.ir.replica_grouping()
    ops.collectives.replicated_all_reduce(ops.max(logits, axis=1), "max", group)
    with g._building() as bld:
        local = bld.op("softmax_cross_entropy", [logits._sim, indices._sim], [indices.shape],
                       name=g._scoped("cross_entropy_sharded"), out_dtypes=[logits.dtype.sim_name])[0]
    local = g._wrap(local, logits.dtype)
    ops.collectives.replicated_all_reduce(local, "add", group)  # the denominators' all-reduce
    loss = replicated_all_reduce_identical_grad_inputs(local, "add", group)
    if ignore_index is not None:
        mask = ops.cast(ops.logical_not(ops.equal(indices, ignore_index)), loss.dtype)
        loss = loss * mask
        return ops.sum(loss) / ops.sum(mask) if reduction == "mean" else ops.sum(loss) if reduction == "sum" else loss
    return ops.mean(loss) if reduction == "mean" else ops.sum(loss) if reduction == "sum" else loss
