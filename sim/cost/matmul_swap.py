"""poplin's plan of a plain matmul (``fullyConnectedPass`` NONE: convolution pass ``NONE_MATMUL``)
or of an inference layer's (INFERENCE_FWD: ``FC_INFERENCE_FWD``, planned alike), whose operands the
planner may swap, and where its result lands on the tiles.

poplin maps ``G x [M, K] @ [K, N]`` to a 1x1 convolution of batch ``M``, ``K`` input and ``N``
output channels (``MatMul.cpp :: getConvParams``). For ``NONE_MATMUL`` the planner tries the
operands swapped first (``ConvPlan.cpp :: getSwapOperandCandidates``: ``{true, false}``): the
convolution of ``Bᵀ`` by ``Aᵀ``, batch ``N`` and ``M`` output channels. Its estimate charges the
unswapped candidate a rearrangement of the input, the weights and the output
(``ConvModel.cpp :: addTransformCycleEstimate``: ``rearrangeInput``, ``rearrangeWeights`` and
``rearrangeOutput`` are set when ``swapOperands != isMatmulOrFullyConnectedLayer``), and keeps the
unswapped plan only when strictly cheaper (``objective.lowerCost``). The operands and the result
are then created in the chosen plan's layout (``createMatMulGroupedInputLHS/RHS``), so the charge
steers the choice and is not run. Cycles are tile cycles.
"""

from __future__ import annotations

from functools import lru_cache

from ..hardware.system import IPU
from .amp import MatmulPlan, swap_or_not


@lru_cache(maxsize=256)
def plan_matmul_none_pass(G: int, M: int, K: int, N: int, itemsize: int, ipu: IPU, tiles: int,
                          memory_proportion: float, partials_bytes: int = 4) -> tuple[MatmulPlan, bool]:
    """(plan, swapped) of ``G x [M,K] @ [K,N]`` planned as poplin plans a ``NONE_MATMUL``
    convolution. A swapped plan is the product ``G x [N,K] @ [K,M]`` (its ``dims``), the same
    cycles as the matmul. Both operands are laid out by poplin for the plan (1/pm of the right
    operand already on each tile, as for a weight). A plan that fits the budget beats one that
    does not; then the planner's estimate, the unswapped plan's charged a rearrangement of its
    input (``M x K``), weights (``K x N``) and output (``M x N``) over its tiles
    (:func:`sim.cost.amp.swap_or_not`)."""
    return swap_or_not(G, M, K, N, itemsize, ipu, tiles, memory_proportion, partials_bytes)


def result_block(plan: MatmulPlan, swapped: bool, group: int) -> tuple[int, int]:
    """(regions, elements per region) of the result ``G x [M, N]`` of a :func:`plan_matmul_none_pass`
    plan on its busiest tile: the sorted contiguous regions of the row-major result there.

    Without an inner split a tile holds its block of the convolution's output positions x output
    channels, a region per row of ``C`` (``C``'s rows, M, are the positions unswapped and the output
    channels swapped), one region when the block spans whole rows. With an inner split over ``pk`` tiles, poplin's
    reduction spreads each block's output over those tiles in the partials' order, whole
    partial-channel groups (``group``, ``partialChansPerGroup``) each (``ConvReduce.cpp ::
    partialGroupedReduce``: ``splitRegions`` of the block in grains of the channel group), so a
    tile holds ``1/pk`` of the block's channels over all its positions. A serialised plan leaves
    each piece's block on the same tiles (``serial`` times the regions)."""
    pg, pm, pn, pk = plan.splits
    G, Mp, _, Np = plan.dims
    g = -(-G // pg)
    positions, channels = -(-Mp // pm), -(-Np // pn)
    if pk > 1:  # the block's channel groups shared out over the pk tiles
        groups = -(-channels // group)
        channels = min(channels, -(-groups // pk) * group)
    rows, cols = (channels, positions) if swapped else (positions, channels)
    width = Mp if swapped else Np  # the result's row length N (of one serial piece)
    if cols >= width:  # whole rows: one region per group
        return g * plan.serial, rows * cols
    return g * rows * plan.serial, cols


__all__ = ["plan_matmul_none_pass", "result_block"]
