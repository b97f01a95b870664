"""Softmax, its gradient and layer norm as poplibs runs them: popops reductions and element-wise
compute sets, each priced as its own popops call.

poplibs does not have one codelet for these ops; it composes them from popops calls, each with
its own compute set(s), on-chip syncs and, for a reduction, its own plan and call overhead
(poplibs commit 8dcde1ec):

* softmax (``lib/popnn/NonLinearity.cpp`` ``softmaxImpl``, SOFTMAX_STABLE, as PopART's
  ``SoftmaxOpx`` calls ``popnn::nonLinearityInPlace``): ``popops::reduce`` MAX over the row, the
  max subtracted (broadcast over the row), ``exp``, ``popops::reduce`` ADD to FLOAT, ``inv`` of
  the sums, their cast to half (half inputs), a broadcast multiply by 1/sum;
* layer norm gradient (:data:`LAYERNORM_GRAD_STEPS`: PopART's ``GroupNormGradOpx``, popnn
  ``groupNormGradients`` / ``groupNormParamGradients``, poplin ``normGradients`` /
  ``normStatisticsGradients``);
* softmax gradient (same file, ``softmaxInputGradientImpl``, PopART's ``SoftmaxGradOpx``):
  ``mul(y, g)``, ``popops::reduce`` ADD over the row, ``mul(y, sum)`` (the sum broadcast),
  ``subInPlace``;
* layer norm (PopART's ``GroupNormOpx``, which MLPerf's and Graphcore's PopART BERT use for every
  layer norm, ``aiGraphcore.groupnormalization`` with one group; ``lib/popnn/GroupNorm.cpp`` then
  ``lib/poplin/Norms.cpp``): ``normStatistics`` (two ``popops::reduceWithOutput`` to FLOAT, ADD
  and SQUARE_ADD, into one list of compute sets, then the ``InverseStdDeviation`` compute set on
  the statistics), ``normWhiten`` (the map ``x - Cast(mean)``, then ``mulInPlace`` by the inverse
  standard deviation, each broadcast over the row), ``normalise`` (``mul`` by gamma, ``addInPlace``
  beta, each broadcast over the rows).

Each element-wise step is laid out as poputil lays out a new tensor (``sim/cost/vector.py``
``spread``) and costs its codelet's fixed cycles plus cycles per element of the tensor's type
(``configs/_vector-ops.toml``); a per-row statistic broadcast to it is received by each tile for
the rows it holds a part of (a tile of ``e`` contiguous elements of rows of ``L`` spans at most
``ceil(e / L) + 1`` rows), a per-column vector (gamma, beta) for the columns it holds. The
reductions are priced by popops' reduction plan (``sim/cost/reduction.py``, through the
``reduce_cost`` the caller gives). Cycles are tile cycles of the IPU clock; bytes are bytes.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..graph.ir import DTYPE_BYTES
from ..hardware.system import IPU
from .exchange import exchange_cycles
from .opcost import OpCost, TileProfile, _counts
from .vector import codelet, spread

#: the op kinds priced here
ROW_OP_KINDS = ("softmax", "softmax_grad", "layernorm", "layernorm_grad")

# A step: ("reduce", (operations...), output bytes or None for the input's) -- popops reduce calls
# sharing compute sets; ("map", codelets) -- element-wise over the whole tensor; ("row", codelets,
# statistic bytes or None) -- element-wise with a per-row statistic broadcast; ("col", codelets) --
# with a per-column vector broadcast; ("stats", codelets, bytes) -- element-wise over the per-row
# statistics only.
#: popnn softmaxImpl, stable (NonLinearity.cpp); the inv and cast run on the row sums
SOFTMAX_STEPS = (("reduce", ("max",), None), ("row", ("sub",), None), ("map", ("exp",)),
                 ("reduce", ("add",), 4), ("stats", ("reciprocal",), 4), ("stats", ("cast",), 4),
                 ("row", ("mul",), None))
#: popnn softmaxInputGradientImpl (NonLinearity.cpp)
SOFTMAX_GRAD_STEPS = (("map", ("mul",)), ("reduce", ("add",), None), ("row", ("mul",), None),
                      ("map", ("sub",)))
#: popnn groupNormStatistics / groupNormalise -> poplin normStatistics, normWhiten, normalise (Norms.cpp);
#: the InverseStdDeviation vertex priced as the fused map of its expression (power/n - mean^2 + eps, rsqrt)
LAYERNORM_STEPS = (("reduce", ("add", "square_add"), 4), ("stats", ("mul", "mul", "sub", "add", "rsqrt"), 4),
                   ("row", ("sub",), 4), ("row", ("mul",), 4), ("col", ("mul",)), ("col", ("add",)))
#: the same with poplin's stable estimator (Norms.cpp normStatisticsImpl, stableAlgo: TensorFlow's
#: norms.use_stable_statistics): the mean's reduction on its own (to the activations' type), the mean
#: subtracted from the activations (a new tensor), then the power's reduction of that; the
#: InverseStdDeviation vertex then skips the mean's square (power/n + eps, rsqrt)
LAYERNORM_STABLE_STEPS = (("reduce", ("add",), None), ("row", ("sub",), None), ("reduce", ("square_add",), 4),
                          ("stats", ("mul", "add", "rsqrt"), 4)) + LAYERNORM_STEPS[2:]
#: PopART's GroupNormGradOpx (popart willow/src/popx/op/groupnormx.cpp): groupNormWhiten again (the row sub
#: and mul), then popnn groupNormGradients -> poplin normGradients (mul by gamma) and normStatisticsGradients
#: (Norms.cpp: normParamGradients' mul and its one reduce of the concatenated [dy * x_hat, dy] per row, the
#: Copy of dy, varGrads' mul by varDelta, meanDelta scaled, added over the row, scaledAddTo(gradient,
#: varGrads), mulInPlace by the inverse standard deviation), then groupNormParamGradients' mul of x_hat and
#: dy (its column reduction for gamma and beta is the graph's own reduce_sum ops)
LAYERNORM_GRAD_STEPS = (("row", ("sub",), 4), ("row", ("mul",), 4), ("col", ("mul",)), ("map", ("mul",)),
                        ("reduce", ("add", "add"), None), ("map", ("copy",)), ("row", ("mul",), None),
                        ("stats", ("mul",), None), ("row", ("add",), None), ("map", ("scale",)),
                        ("row", ("mul",), 4), ("map", ("mul",)))
STEPS = {"softmax": SOFTMAX_STEPS, "softmax_grad": SOFTMAX_GRAD_STEPS, "layernorm": LAYERNORM_STEPS,
         "layernorm_grad": LAYERNORM_GRAD_STEPS, "layernorm_stable": LAYERNORM_STABLE_STEPS}

#: ``reduce_cost(shape, axes, itemsize, operations, tiles)``: the OpCost of popops reductions of
#: ``shape`` over ``axes``, one per operation, sharing compute sets
ReduceCost = Callable[[tuple, tuple, int, tuple, int], OpCost]


def _elementwise_step(n: int, itemsize: int, codelets: tuple, recv_bytes: int, ipu: IPU, tiles: int):
    """(per-tile compute cycles, tiles used, launch cycles, exchange cycles, bytes per tile) of one
    element-wise compute set over ``n`` elements, one fused vertex per tile (its largest codelet's
    fixed cost, the sum of their per-element cycles), ``recv_bytes`` of a broadcast operand
    received by each working tile first."""
    used, _ = spread(n, itemsize, ipu, tiles)
    cs = [codelet(k) for k in codelets]
    fixed = max(c.fixed for c in cs)
    per_tile = np.ceil(fixed + _counts(n, used) * sum(c.per_element(itemsize) for c in cs))
    return per_tile, used, math.ceil(fixed), exchange_cycles(recv_bytes, ipu) if recv_bytes else 0, recv_bytes


def row_op_cost(kind: str, shape: tuple, dtype: str, ipu: IPU, tiles: int, reduce_cost: ReduceCost) -> OpCost:
    """The cost of ``kind`` (a key of :data:`STEPS`: one of :data:`ROW_OP_KINDS`, or
    ``layernorm_stable``) over the last dimension of ``shape`` (``dtype`` elements): the steps of
    :data:`STEPS` in order, their cycles, syncs and exchanges added (each step its own compute sets)."""
    length = shape[-1] if shape else 1
    rows = max(1, math.prod(shape[:-1]))
    n = rows * length
    itemsize = DTYPE_BYTES[dtype]
    compute = exch = sync = sets = launch = setup = moved = 0
    used_max = out_tiles = 0
    profile = np.zeros(tiles)
    recv_profile = np.zeros(tiles)
    names = []
    for step in STEPS[kind]:
        what = step[0]
        if what == "reduce":  # priced on the input type; step[2] records the output type poplibs reduces to
            ops = step[1]
            c = reduce_cost((rows, length), (1,), itemsize, ops, tiles)
            compute += c.compute_cycles
            exch += c.exchange_cycles
            sync += c.sync_cycles
            sets += c.supersteps
            launch += c.launch_cycles
            setup += c.exchange_setup_cycles
            moved += c.exchange_bytes
            used_max = max(used_max, c.tiles_used)
            if c.profile is not None:
                profile[:len(c.profile.compute)] += c.profile.compute[:tiles]
                recv_profile[:len(c.profile.bytes_in)] += c.profile.bytes_in[:tiles]
            names.append("reduce " + "+".join(ops))
            continue
        codelets = step[1]
        if what == "stats":
            size = step[2] or itemsize
            per_tile, used, fixed, ex, recv = _elementwise_step(rows, size, codelets, 0, ipu, tiles)
        else:
            used, busiest = spread(n, itemsize, ipu, tiles)
            if what == "row":
                stat = step[2] or itemsize
                recv = min(rows, math.ceil(busiest / length) + 1) * stat
            elif what == "col":
                recv = min(length, busiest) * itemsize
            else:
                recv = 0
            per_tile, used, fixed, ex, recv = _elementwise_step(n, itemsize, codelets, recv, ipu, tiles)
        compute += int(per_tile.max())
        profile[:used] += per_tile
        recv_profile[:used] += recv
        launch += fixed
        sets += 1
        sync += ipu.internal_sync_cycles * (1 + (1 if ex else 0))
        if ex:
            exch += ex
            setup += ipu.exchange_setup_cycles
            moved += recv * used
        used_max = max(used_max, used)
        out_tiles = used
        names.append(f"{what} {'+'.join(codelets)}")
    # tiles_used: the tiles of the result, as the last (element-wise) step lays it out
    return OpCost(int(compute), int(exch), int(sync), sets, float(n * 5), int(moved), int(out_tiles or used_max), 0,
                  f"{rows} rows of {length}: " + ", ".join(names),
                  TileProfile(profile, recv_profile, np.zeros(tiles)),
                  launch_cycles=int(launch), exchange_setup_cycles=int(setup))


def row_op_codelets(kind: str, dtype: str) -> list[tuple]:
    """Keys of the distinct codelets ``kind``'s steps run, for the program's vertex code: each
    element-wise step's (fused) codelet keyed as the element-wise op of that name keys its own
    (``(name, dtype, 0)``; a broadcast step's as ``"broadcast <name>"``), each reduction as a
    ``reduce_sum`` op's; a codelet appears once
    however many steps use it, and is shared with the other ops that run it."""
    keys = []
    for step in STEPS[kind]:
        if step[0] == "reduce":
            key = ("reduce_sum", dtype, 0)
        elif step[0] in ("row", "col"):  # popops' broadcast vertices, not the plain element-wise ones
            key = ("broadcast " + "+".join(step[1]), dtype, 0)
        else:
            key = ("+".join(step[1]), dtype, 0)
        if key not in keys:
            keys.append(key)
    return keys
