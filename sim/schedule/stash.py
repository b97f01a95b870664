"""The cycles of a pipeline's stash and restore ops, as PopART runs them.

A forward stage whose backward stage runs cycles later keeps each micro-batch's inputs (and its
recomputation checkpoints) in a stash; the backward stage takes them back (``stages.py``: which
tensors, how deep). PopART grows each stashed tensor as a ``StashOp`` in the forward stage and a
``RestoreOp`` in the backward one (graphcore/popart ``willow/src/popx/op/stashx.cpp``,
``restorex.cpp``): ``popops::dynamicUpdate`` of the stash (laid out like the tensor, so no data
moves between tiles) at a stash index, or ``popops::dynamicSlice`` of it, each followed by the
index's ``addInPlace`` and ``remInPlace`` on the tile that holds it. Every tile of the tensor reads
the index, so an exchange phase brings it there first. graphcore/tensorflow's pipelines do the same
work in one ``FifoOp`` per stashed tensor (``driver/ops/custom_ops/poputil/fifo.cc``: a
``dynamicSliceWithOutput`` pop and a ``dynamicUpdate`` push at a counter, for depths above 1), priced
here the same way.
"""

from __future__ import annotations

from ..cost import OpCost
from ..cost.exchange import exchange_cycles
from ..cost.opcost import TileProfile
from ..cost.vector import INDEX_BYTES, dynamic_slice_tile_cycles, spread, tile_cycles
from ..graph.ir import Tensor
from ..hardware.system import IPU


def stash_op_cost(tensor: Tensor, ipu: IPU, tiles: int) -> OpCost:
    """Cycles of one stash (or restore) of ``tensor`` for one micro-batch: the index exchanged to the
    tensor's tiles, the dynamic update (or slice) of its elements on each tile (popops'
    DynamicUpdateSlice1D / DynamicSlice1D estimate), then the index incremented and wrapped on one
    tile (BinaryOp1D ADD and REMAINDER on one element). Four syncs: the exchange and three compute sets."""
    itemsize = tensor.itemsize
    used, per_tile = spread(tensor.numel, itemsize, ipu, tiles)
    move = dynamic_slice_tile_cycles(per_tile, itemsize, ipu.worker_threads)
    move_fixed = dynamic_slice_tile_cycles(0, itemsize, ipu.worker_threads)
    index = tile_cycles(1, INDEX_BYTES, "add", ipu) + tile_cycles(1, INDEX_BYTES, "remainder", ipu)
    exchange = exchange_cycles(INDEX_BYTES, ipu)
    compute = move + index
    profile = TileProfile.uniform(tiles, used, move, INDEX_BYTES)
    profile.compute[0] += index  # the index is advanced on the first tile
    return OpCost(compute_cycles=compute, exchange_cycles=exchange, sync_cycles=4 * ipu.internal_sync_cycles,
                  supersteps=3, flops=0.0, exchange_bytes=INDEX_BYTES * used, tiles_used=used, temp_bytes_per_tile=0,
                  plan=f"{tensor.numel} elements on {used} tiles at the stash index", profile=profile,
                  launch_cycles=move_fixed + index, exchange_setup_cycles=ipu.exchange_setup_cycles,
                  codelets=(("dynamic_update_slice", tensor.dtype, 0), ("add", "uint32", 0),
                            ("remainder", "uint32", 0)))


def stashed_tensors(stage, stages) -> list[str]:
    """Tensors forward stage ``stage`` stashes each micro-batch: what its backward stage restores,
    when it keeps a stash at all (``stash_depth``)."""
    if stage.stash_depth == 0:
        return []
    return sorted(set().union(*[s.restored for s in stages if s.forward_stage == stage.index and s is not stage]))


def restored_tensors(stage, stages) -> list[str]:
    """Tensors backward stage ``stage`` restores from its forward stage's stash each micro-batch."""
    forward = next((s for s in stages if s.index == stage.forward_stage), None)
    if stage.forward_stage == stage.index or forward is None or forward.stash_depth == 0:
        return []
    return sorted(stage.restored)


__all__ = ["stash_op_cost", "stashed_tensors", "restored_tensors"]
