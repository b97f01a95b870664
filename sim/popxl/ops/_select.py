"""PopXL's gathers, scatters and the other ops that pick elements: ``groupedgather``,
``tied_gather``, ``scatter``, ``scatter_reduce``, ``subsample``, ``median``, ``histogram``, ``roi_align``
and ``nll_loss``.

Each is the op PopART grows for it, priced by the cost model as sim.poptorch prices the PyTorch
ops PopART runs the same way: a gather is popops' multiSlice (``gather``, along any axis: PopART
rolls the axis to the front, popx/op/gatherx.cpp), a scatter popops' multiUpdate of elements or,
with a vector of indices along the axis, of whole slices (``scatter_elements``,
popx/op/scatterreduceutilx.cpp), the median popops' sort of each row (``sort``), the histogram
``popops::histogram``, RoIAlign popnn's experimental ROIAlign (``roi_align``). Signatures follow PopXL (graphcore/popart ``python/popxl/python_files/ops``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ...errors import GraphError
from .. import dtypes
from ..errors import NotModelledError
from ..tensor import Tensor
from ._core import _axes, _checked_proportion, _graph, _name, _out, _reduce, _set_proportion, reshape, transpose
from ._math import _broadcast, _one_hot


# --- gathers --------------------------------------------------------------------------------------

def _check_indices(where: str, indices: Tensor) -> None:
    if not indices.dtype.is_int:
        raise GraphError(f"{where}: indices {indices.id!r} must be integers, got {indices.dtype.name}")


def _gather(where: str, t: Tensor, indices: Tensor, axis: int, available_memory_proportion: float | None) -> Tensor:
    """Slices of ``t`` along ``axis`` at ``indices``: the result is ``t``'s shape with that axis
    replaced by the indices' shape (PopART's GatherOp, planned within its availableMemoryProportion)."""
    g = _graph(where, t, indices)
    _check_indices(where, indices)
    proportion = _checked_proportion(where, available_memory_proportion)
    if not -t.rank <= axis < t.rank:
        raise ValueError(f"{where}: axis {axis} is out of range for a tensor of rank {t.rank}")
    axis %= t.rank
    shape = t.shape[:axis] + indices.shape + t.shape[axis + 1:]
    with g._building() as bld:
        out = bld.op("gather", [indices._sim, t._sim], [shape or (1,)],
                     {"axis": axis} if axis else {}, name=_name(g, where.split(".")[-1]),
                     out_dtypes=[t.dtype.sim_name])[0]
    _set_proportion(g, proportion)
    y = _out(g, out, t.dtype)
    return reshape(y, ()) if not shape else y


def gather(t: Tensor, indices: Tensor, axis: int = 0, available_memory_proportion: float | None = None,
           zero_OOR: bool = False) -> Tensor:
    """Slices of ``t`` at ``indices`` along ``axis`` (an embedding lookup along axis 0)."""
    return _gather("ops.gather", t, indices, axis, available_memory_proportion)


def groupedgather(t: Tensor, indices: Tensor, axis: int = 0, group_size: int = 1,
                  available_memory_proportion: float | None = None, zero_OOR: bool = False) -> Tensor:
    """:func:`gather` of each group of ``t``'s first dimension; one group (``group_size`` 1) is the
    plain gather. Several groups (popops' groupedMultiSlice, each group planned on its own tiles)
    are not modelled."""
    if group_size != 1:
        raise NotModelledError(f"ops.groupedgather(group_size={group_size}): only one group is modelled (popops' "
                               "grouped multiSlice plans each group apart); gather each group with ops.gather")
    return _gather("ops.groupedgather", t, indices, axis, available_memory_proportion)


def tied_gather(t: Tensor, indices: Tensor, axis: int = 0, available_memory_proportion: float | None = None,
                zero_OOR: bool = False) -> Tensor:
    """:func:`gather` from a table a matmul also reads (PopART's TiedGatherOp: popops' gather on the
    table laid out as the matmul's right operand); priced as the gather."""
    return _gather("ops.tied_gather", t, indices, axis, available_memory_proportion)


# --- scatters -------------------------------------------------------------------------------------

#: PopXL's scatter reductions (ops/scatter_reduce.py ``reduction_dict``)
SCATTER_REDUCTIONS = ("sum", "max", "min", "mul", "none")


def _expanded_index_shape(where: str, indices: Tensor, data: Tensor, axis: int) -> tuple[int, ...]:
    """``indices``' shape aligned to ``data``'s rank as PopART aligns it (scatterreduce.cpp
    ``expandIndicesBcastNdShape``): a vector's leading singleton dimensions up to ``axis``, then
    trailing ones; no dimension may exceed ``data``'s."""
    shape = list(indices.shape)
    if indices.rank > data.rank:
        raise GraphError(f"{where}: Invalid rank for indices input. Indices rank {indices.rank} must be <= data input "
                         f"rank {data.rank}.")
    if indices.rank == 1:
        shape = [1] * axis + shape
    shape += [1] * (data.rank - len(shape))
    if any(i > d for i, d in zip(shape, data.shape)):
        raise GraphError(f"{where}: Failed to expand 'indices' shape {indices.shape} to match 'src' shape {data.shape} "
                         f"using reduction axis = {axis}.")
    return tuple(shape)


def _scatter(where: str, indices: Tensor, target: Tensor | None, updates: Tensor, out_shape: tuple, axis: int,
             reduction: str, slices: bool, available_memory_proportion: float | None) -> Tensor:
    """``updates`` written (reduced) into ``target`` (a new tensor of ``out_shape`` when None)."""
    g = _graph(where, indices, updates, *([target] if target is not None else []))
    proportion = _checked_proportion(where, available_memory_proportion)
    with g._building() as bld:
        into = target._sim if target is not None else g._new_tensor("initial_values", out_shape, updates.dtype,
                                                                    "constant")
        out = bld.op("scatter_elements", [indices._sim, into, updates._sim], [out_shape],
                     {"axis": axis, "reduce": reduction, "slices": slices}, name=_name(g, where.split(".")[-1]),
                     out_dtypes=[updates.dtype.sim_name])[0]
    _set_proportion(g, proportion)
    return _out(g, out, updates.dtype)


def scatter(t: Tensor, indices: Tensor, values: Tensor, axis: int = 0,
            available_memory_proportion: float | None = None) -> Tensor:
    """``t`` with ``values`` written at ``indices`` along ``axis`` (ONNX Scatter: ``indices`` and
    ``values`` of one shape, element by element), out of place: popops' multiUpdate of elements."""
    where = "ops.scatter"
    _check_indices(where, indices)
    if indices.shape != values.shape or indices.rank != t.rank:
        raise GraphError(f"{where}: indices {indices.shape} and values {values.shape} must have one shape, of the "
                         f"rank of {t.id!r} {t.shape}")
    if values.dtype != t.dtype:
        raise TypeError(f"{where}: values are {values.dtype.name}, {t.id!r} is {t.dtype.name}")
    axis = _axes(t, axis)[0]
    return _scatter(where, indices, t, values, t.shape, axis, "none", False, available_memory_proportion)


def scatter_reduce(data: Tensor, indices: Tensor, reduction: str, initial_values: Tensor | None = None,
                   axis: int = 0, axis_size: int | None = None, enable_index_broadcast: bool = True,
                   available_memory_proportion: float | None = None) -> Tensor:
    """``data`` reduced into ``axis_size`` positions along ``axis`` (PopART's ScatterReduceOp), into
    ``initial_values`` when given. ``indices`` shaped like ``data`` move one element each; a vector
    along ``axis`` (other dimensions singleton) moves whole slices, as PopART runs it with index
    broadcast enabled: popops' multiUpdateAdd (sum), multiUpdateMax (max; min on negated values) or
    multiUpdateMul (mul) of rows."""
    where = "ops.scatter_reduce"
    if initial_values is None and axis_size is None:
        raise ValueError("One of initial_values and axis_size must be specified")
    if reduction not in SCATTER_REDUCTIONS:
        raise ValueError(f"The reduction must be one of {list(SCATTER_REDUCTIONS)}")
    _check_indices(where, indices)
    axis = _axes(data, axis)[0]
    if axis_size is None:
        axis_size = initial_values.shape[axis]
    expanded = _expanded_index_shape(where, indices, data, axis)
    # PopART's checkIndexBroadcasted: indices of data's shape move one element each; otherwise, with
    # index broadcast, they must be a vector along the axis (each entry a whole slice)
    slices = indices.shape != data.shape and [d for d, n in enumerate(expanded) if n != 1] == [axis]
    if indices.shape != data.shape and not slices and enable_index_broadcast:
        raise GraphError(f"{where}: Partial broadcasting of indices is not currently supported (indices "
                         f"{indices.shape} for data {data.shape} along axis {axis}: give indices of data's shape, or "
                         "a vector along the axis)")
    base = data.shape if enable_index_broadcast else expanded  # PopART's ScatterReduceOp::setupOutputInfo
    out_shape = tuple(base[:axis]) + (int(axis_size),) + tuple(base[axis + 1:])
    if initial_values is not None and initial_values.shape != out_shape:
        raise GraphError(f"{where}: initial_values {initial_values.shape} must have the result's shape {out_shape}")
    if slices and indices.rank != 1:  # the index vector: one entry per slice of data along the axis
        indices = reshape(indices, (data.shape[axis],))
    return _scatter(where, indices, initial_values, data, out_shape, axis, reduction, slices,
                    available_memory_proportion)


# --- strides, order statistics and counts --------------------------------------------------------

def subsample(t: Tensor, strides: int | Iterable[int]) -> Tensor:
    """Every ``strides[i]``-th element along axis ``i``, from the first (PopART's SubsampleOpx: a copy
    of the strided view). As PopXL: an int is the first axis' stride, and strides for fewer axes than the
    tensor has are padded with ones (PyTorch's ``t[::s]``)."""
    strides = [int(strides)] if isinstance(strides, int) else [int(s) for s in strides]
    if len(strides) > t.rank:
        raise ValueError(f"ops.subsample: The length of subsample `strides` ({strides}) must not be greater than the "
                         f"rank of the input tensor ({t.id!r} {t.shape})")
    strides += [1] * (t.rank - len(strides))
    if min(strides, default=1) < 1:
        raise ValueError(f"ops.subsample: strides {strides} must be whole numbers >= 1 (one per axis of "
                         f"{t.id!r} {t.shape})")
    g = _graph("ops.subsample", t)
    shape = tuple(-(-d // s) for d, s in zip(t.shape, strides))
    with g._building() as bld:
        out = bld.op("copy", [t._sim], [shape], {"op": "subsample"}, name=_name(g, "subsample"))[0]
    return _out(g, out, t.dtype)


def median(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """The median over ``axis`` (every axis when None), the lower middle value of an even count, as
    PopART's ReduceMedianOpx computes it: the reduced axes moved last and flattened, each row sorted
    with its indices (popops sortKeyValue), the middle picked."""
    axes = _axes(t, axis)
    rest = [d for d in range(t.rank) if d not in axes]
    g = _graph("ops.median", t)
    moved = transpose(t, rest + axes) if rest + axes != list(range(t.rank)) else t
    row = math.prod(t.shape[a] for a in axes)
    kept = tuple(t.shape[d] for d in rest)
    rows = reshape(moved, kept + (row,))
    shape = tuple(1 if d in axes else n for d, n in enumerate(t.shape)) if keepdims else kept
    with g._building() as bld:
        values, _ = bld.op("sort", [rows._sim], [shape or (1,), shape or (1,)], {"axis": len(kept), "op": "median"},
                           name=_name(g, "median"), out_dtypes=[t.dtype.sim_name, "int32"])
    y = _out(g, values, t.dtype)
    return reshape(y, ()) if not shape else y


def histogram(t: Tensor, levels: list[float], absolute_of_input: bool) -> Tensor:
    """How many elements of ``t`` (their absolute values with ``absolute_of_input``) fall below the
    first level, between each two, and above the last: ``len(levels) + 1`` uint32 counts
    (``popops::histogram``)."""
    levels = [float(x) for x in levels]
    if any(a >= b for a, b in zip(levels, levels[1:])):
        raise ValueError(f"ops.histogram: levels {levels} must increase")
    if not t.dtype.is_floating_point:
        raise TypeError(f"ops.histogram: {t.id!r} is {t.dtype.name}; PopART's histogram takes float16 or float32")
    g = _graph("ops.histogram", t)
    with g._building() as bld:
        out = bld.op("histogram", [t._sim], [(len(levels) + 1,)],
                     {"levels": len(levels), "absolute": bool(absolute_of_input)}, name=_name(g, "histogram"),
                     out_dtypes=[dtypes.uint32.sim_name])[0]
    return _out(g, out, dtypes.uint32)


def roi_align(t: Tensor, rois: Tensor, batch_index: Tensor, output_size: tuple[int, int], spatial_scale: float,
              sampling_ratio: int) -> Tensor:
    """Each box of ``rois`` (R, 4) over its image ``batch_index`` (R,) of ``t`` (N, C, H, W) pooled into
    ``output_size`` bins, each the average of ``sampling_ratio`` x ``sampling_ratio`` bilinear samples: (R, C,
    *output_size), as PopART's RoiAlignOp (popnn's experimental ROIAlign, sim/cost/roialign.py)."""
    where = "ops.roi_align"
    if t.rank != 4 or rois.rank != 2 or rois.shape[1] != 4 or batch_index.shape != rois.shape[:1]:
        raise GraphError(f"{where}: t {t.shape}, rois {rois.shape} and batch_index {batch_index.shape} must be "
                         "(N, C, H, W), (R, 4) and (R,)")
    if not t.dtype.is_floating_point or rois.dtype != t.dtype:
        raise TypeError(f"{where}: t and rois must be one float type (float16 or float32), got {t.dtype.name} and "
                        f"{rois.dtype.name}")
    if batch_index.dtype != dtypes.int32:
        raise TypeError(f"{where}: batch_index {batch_index.id!r} must be int32 (PopART's RoiAlignOp), got "
                        f"{batch_index.dtype.name}")
    if int(sampling_ratio) <= 0 or spatial_scale <= 0:
        raise ValueError(f"{where}: sampling_ratio {sampling_ratio} and spatial_scale {spatial_scale} must be "
                         "greater than 0 (popnn's roiAlignFwd)")
    height, width = (int(d) for d in output_size)
    g = _graph(where, t, rois, batch_index)
    with g._building() as bld:
        out = bld.op("roi_align", [t._sim, rois._sim, batch_index._sim], [(rois.shape[0], t.shape[1], height, width)],
                     {"sampling_ratio": int(sampling_ratio), "spatial_scale": float(spatial_scale)},
                     name=_name(g, "roi_align"), out_dtypes=[t.dtype.sim_name])[0]
    return _out(g, out, t.dtype)


# --- loss -----------------------------------------------------------------------------------------

def nll_loss(probs: Tensor, labels: Tensor, ignore_index: int | None = None, reduction: str = "mean",
             log_prob: bool = False) -> Tensor:
    """The negative log-likelihood of ``labels`` under ``probs`` (..., classes), as PopART's NllOpx
    computes it: the labels one-hot encoded over the classes, multiplied by the probabilities, each
    row summed, the log of its maximum with a small epsilon (not with ``log_prob``), then the mean or
    sum over the rows (``reduction`` 'none': one loss a row)."""
    where = "ops.nll_loss"
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"Not a valid reduction: {reduction}. Must be one of 'mean', 'sum' or 'none'")
    _check_indices(where, labels)
    if probs.rank < 1 or labels.shape != probs.shape[:-1]:
        raise GraphError(f"{where}: labels {labels.shape} must be the shape of probs {probs.shape} without its last "
                         "(classes) dimension")
    g = _graph(where, probs, labels)
    encoded = _one_hot(g, labels, probs.shape, probs.dtype)
    picked = _reduce("reduce_sum", _broadcast("mul", [encoded, probs], where), -1, False, where)
    if not log_prob:
        with g._building() as bld:
            picked = _out(g, bld.op("map", [picked._sim], [picked.shape or (1,)], {"steps": ["maximum", "log"],
                                                                                    "op": "nll_log"},
                                    name=_name(g, "log_max"))[0], probs.dtype)
    if ignore_index is not None:  # the ignored rows masked (applyMaskInPlaceForIgnoredIndex)
        picked = _broadcast("mul", [picked, _broadcast("compare", [labels], where, probs.dtype)], where)
    if reduction == "none":
        return picked
    return _reduce("reduce_mean" if reduction == "mean" else "reduce_sum", picked, None, False, where)
