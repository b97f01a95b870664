"""``poptorch.fps`` and ``poptorch.nearest``: PopTorch's ports of ``torch_cluster``'s farthest point sampling and
nearest-point clustering (PyTorch Geometric).

PopTorch has no vertex of its own for either: its canonicalisation handlers write each as ONNX and PopART ops
(poptorch ``popart_canonicalization/pyg_torch_cluster/FpsOp.cpp`` and ``NearestOp.cpp``), and these functions
make the same ops, in the same order, from torch ops and PopTorch's dynamic slices, so the capture prices
each with its own rule and the CPU computes what the IPU would:

* ``nearest``: 1-D inputs as columns; with batch vectors, both inputs rescaled into [0, 1] by their joint
  minimum and maximum and given their batch times ``2 D`` as one more feature (so points of different
  samples are never nearest); then ``cdist`` and an argmin over ``y``.
* ``fps``: the pairwise distances (``cdist``), the blocks between different samples zeroed; then, for each
  sample, its start point (its first, or a random one with ``random_start``) and, as many times as
  ``ceil(ratio * points)`` asks, the chosen point's column zeroed, the running minimum of the previous and
  chosen points' rows written back into the chosen row, and the farthest point (argmax of that row) taken
  next: unrolled at compile time, as the handler unrolls it, so the ops grow with the points sampled.

The argument checks are PopTorch's (``python/ops.py``) and its handlers'.
"""

from __future__ import annotations

import math

import torch

from ._errors import error
from .ops import _TENSOR, dynamic_slice, dynamic_update


def _columns(t: torch.Tensor) -> torch.Tensor:
    """A 1-D input as one column, as the handler's prepareInputTensor reshapes it."""
    return t.reshape(-1, 1) if t.dim() == 1 else t


def _rescaled(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both inputs shifted by their joint minimum and divided by the joint maximum after it (rescaleInputs)."""
    low = torch.minimum(x.amin(), y.amin())
    x, y = x - low, y - low
    high = torch.maximum(x.amax(), y.amax())
    return x / high, y / high


def _with_batch(t: torch.Tensor, batch: torch.Tensor, features: int) -> torch.Tensor:
    """``t`` with its rows' batch times ``2 D`` as one more feature (concatFeatures)."""
    return torch.cat([t, (batch.reshape(-1, 1) * (2 * features)).to(t.dtype)], dim=1)


def _nearest_points(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each row of ``x``'s nearest row of ``y`` (vq: cdist, then argmin over ``y``)."""
    return torch.argmin(torch.cdist(x, y, 2.0), dim=1)


def _check_shapes(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.dim() > 2 or y.dim() > 2:
        raise error(f"Inputs `x` and `y` should be max 2D tensors, while `x` has {x.dim()} dims and `y` has "
                    f"{y.dim()} dims.")
    if x.shape[1] != y.shape[1]:
        raise error(f"Inputs shapes inconsistent x.shape[1]={x.shape[1]} vs. y.shape[1]={y.shape[1]}")


def _nearest_lists(x: torch.Tensor, y: torch.Tensor, batch_x: list, batch_y: list) -> torch.Tensor:
    """nearestBatchListHandler: batch vectors known at compile time, checked there."""
    for name, batch in (("batch_x", batch_x), ("batch_y", batch_y)):
        if any(a > b for a, b in zip(batch, batch[1:])):
            raise error(f"'{name}' is not sorted")
    if not batch_x and batch_y:
        batch_x = [0] * x.shape[0]
    if not batch_y and batch_x:
        batch_y = [0] * y.shape[0]
    if batch_x and batch_y:
        if [k for i, k in enumerate(batch_x) if i == 0 or batch_x[i - 1] != k] != \
                [k for i, k in enumerate(batch_y) if i == 0 or batch_y[i - 1] != k]:
            raise error("Some batch indices occur in 'batch_x' that do not occur in 'batch_y'")
        if x.shape[0] != len(batch_x):
            raise error("x.size(0) == batch_x.size(0)")
        if y.shape[0] != len(batch_y):
            raise error("y.size(0) == batch_y.size(0)")
        features = x.shape[1]
        x, y = _rescaled(x, y)
        x = _with_batch(x, torch.tensor(batch_x), features)
        y = _with_batch(y, torch.tensor(batch_y), features)
    return _nearest_points(x, y)


def _nearest_tensors(x: torch.Tensor, y: torch.Tensor, batch_x, batch_y) -> torch.Tensor:
    """nearestHandler: batch vectors as tensors, their values not checked (the IPU cannot assert them)."""
    if batch_x.shape[0] == 0 and batch_y.shape[0] != 0:
        batch_x = torch.zeros(x.shape[0], dtype=torch.int64)
    if batch_y.shape[0] == 0 and batch_x.shape[0] != 0:
        batch_y = torch.zeros(y.shape[0], dtype=torch.int64)
    if batch_x.dim() != 1 or batch_x.shape[0] != x.shape[0]:
        raise error("x.size(0) == batch_x.size(0)")
    if batch_y.dim() != 1 or batch_y.shape[0] != y.shape[0]:
        raise error("y.size(0) == batch_y.size(0)")
    features = x.shape[1]
    x, y = _rescaled(x, y)
    return _nearest_points(_with_batch(x, batch_x, features), _with_batch(y, batch_y, features))


def nearest(x: torch.Tensor, y: torch.Tensor, batch_x=None, batch_y=None) -> torch.Tensor:
    """For each point of ``x``, the index of its nearest point of ``y`` in the same sample (``batch_x`` and
    ``batch_y``: each point's sample, sorted; lists or tensors)."""
    if not isinstance(x, _TENSOR):
        raise error(f"`nearest` must take a torch.tensor `x` input. {type(x)} is not supported.")
    if not isinstance(y, _TENSOR):
        raise error(f"`nearest` must take a torch.tensor `y` input. {type(y)} is not supported.")
    batch_x = [] if batch_x is None else batch_x
    batch_y = [] if batch_y is None else batch_y
    x, y = _columns(x), _columns(y)
    _check_shapes(x, y)
    if isinstance(batch_x, list) and isinstance(batch_y, list):
        return _nearest_lists(x, y, batch_x, batch_y)
    if isinstance(batch_x, list) and isinstance(batch_y, _TENSOR):
        batch_x = torch.tensor(batch_x, dtype=batch_y.dtype)
    elif isinstance(batch_x, _TENSOR) and isinstance(batch_y, list):
        batch_y = torch.tensor(batch_y, dtype=batch_x.dtype)
    elif not (isinstance(batch_x, _TENSOR) and isinstance(batch_y, _TENSOR)):
        raise error(f"`batch_x` and `batch_y` must be torch.Tensors or lists while `batch_x` is of type "
                    f"{type(batch_x)} and `batch_y` is of type {type(batch_y)}.")
    return _nearest_tensors(x, y, batch_x, batch_y)


def _row(dists: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Row ``index`` of ``dists`` (prepareRowSlice: a dynamic slice of one row)."""
    return dynamic_slice(dists, 0, index, 1, 1).reshape(-1)


def _put(idxs: torch.Tensor, position: int, index: torch.Tensor) -> torch.Tensor:
    """``idxs`` with ``index`` at ``position`` (updateIdxs: a dynamic update at a constant offset)."""
    return dynamic_update(idxs, index.reshape(1).to(idxs.dtype), 0, torch.tensor([position]), 1)


def _zero_column(dists: torch.Tensor, index: torch.Tensor, points: int) -> torch.Tensor:
    """``dists`` (``points`` square) with column ``index`` zeroed (prepareMaskedColDists: a dynamic zero of one
    column)."""
    return dynamic_update(dists, torch.zeros(points, 1, dtype=dists.dtype), 1, index, 1)


def _farthest(dists: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The point farthest from the chosen ones, by row ``index`` (prepareArgmax)."""
    return torch.argmax(_row(dists, index), dim=0).reshape(1)


def fps(src: torch.Tensor, ptr: list, ratio: float = 0.5, random_start: bool = False) -> torch.Tensor:
    """Farthest point sampling of the points ``src`` (rows), sample ``i`` being rows ``ptr[i]`` to
    ``ptr[i + 1]``: the indices of ``ceil(ratio * points)`` points of each sample."""
    if not isinstance(src, _TENSOR):
        raise error(f"`fps` must take a torch.tensor input. {type(src)} is not supported.")
    if not isinstance(ptr, list):
        raise error("`ptr` must be a list of integers.")
    if not len(ptr) >= 2:
        raise error("`ptr` must containt at least 2 elements.")
    if not isinstance(ratio, float):
        raise error(f"`ratio` must be of float type. {type(ratio)} is not supported.")
    if not isinstance(random_start, bool):
        raise error(f"`random_start` must be of bool type. {type(random_start)} is not supported.")
    ends = [0]  # calcDeg: each sample's last output position (exclusive), running
    for a, b in zip(ptr, ptr[1:]):
        ends.append(ends[-1] + math.ceil(float(b - a) * ratio))
    total, points = ends[-1], ptr[-1]
    idxs = torch.zeros(total, dtype=torch.int32)
    dists = torch.cdist(src, src, 2.0)
    if len(ptr) > 2:  # prepareMaskedDists: the distances between points of different samples zeroed
        dists = dists.clone()
        for a, b in zip(ptr, ptr[1:]):
            if a > 0:
                dists[a:b, :a] = 0
            if b < points:
                dists[a:b, b:] = 0
    position = 0
    for b in range(1, len(ends)):
        if random_start:  # prepareStartIdx: a uniform draw in [ptr[b-1], ptr[b]-1), as an integer
            start = (torch.rand(1) * (ptr[b] - 1 - ptr[b - 1]) + ptr[b - 1]).to(torch.int32)
        else:
            start = torch.tensor([ptr[b - 1]], dtype=torch.int32)
        idxs = _put(idxs, position, start)
        position += 1
        if position in (ends[b], total):
            continue
        dists = _zero_column(dists, start, points)
        chosen, previous = _farthest(dists, start), start
        idxs = _put(idxs, position, chosen)
        position += 1
        while position < ends[b] and position < total:
            dists = _zero_column(dists, chosen, points)
            nearer = torch.minimum(_row(dists, previous), _row(dists, chosen))
            dists = dynamic_update(dists, nearer.reshape(1, -1), 0, chosen, 1)
            previous, chosen = chosen, _farthest(dists, chosen)
            idxs = _put(idxs, position, chosen)
            position += 1
    return idxs
