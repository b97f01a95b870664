"""popxl-addons' host-side array helpers (``popxl_addons.array_munging``): numpy reshuffles between a
model's whole tensors and the per-replica data PopXL sessions take and give (shards along an axis,
repeats for tensor-parallel replicas). Host work only: nothing here is simulated. Same names, arguments
and results as popxl-addons'; the code is the simulator's own."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["handle_negative_axis", "pad_axis", "repeat", "repeat_axis", "repeat_shard", "shard", "shard2D",
           "split2D", "squeeze_safe", "tensor_parallel_input", "tensor_parallel_output", "unshard", "unshard2D",
           "unshard_arrays"]


def handle_negative_axis(x: np.ndarray, axis: int) -> int:
    """``axis`` of ``x`` counted from the front; an axis ``x`` does not have is popxl-addons' ``IndexError``."""
    if x.ndim == 0:
        raise IndexError("Array is 0-dimensional")
    if axis > x.ndim - 1 or axis < -x.ndim:
        raise IndexError(f"Axis is out of range. Axis: {axis}. Array Rank: {x.ndim}")
    return x.ndim + axis if axis < 0 else axis


def shard(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """``x`` split into ``n`` equal parts along ``axis``, stacked on a new first axis."""
    return np.stack(np.split(x, n, axis=handle_negative_axis(x, axis)))


def unshard_arrays(xs: list[np.ndarray], axis: int) -> np.ndarray:
    """Shards of one leading axis each (``(1, ...)``) joined along ``axis`` (of the shards' own axes), that
    axis then dropped."""
    if len({x.ndim for x in xs}) > 1:
        raise ValueError(f"All arrays must be of the same rank. Ranks: {','.join(str(x.ndim) for x in xs)}")
    joined = np.concatenate(xs, axis=axis + 1 if axis >= 0 else handle_negative_axis(xs[0], axis))
    return joined.squeeze(0)


def unshard(x: np.ndarray, axis: int) -> np.ndarray:
    """The inverse of :func:`shard`: the parts along the first axis joined along ``axis``."""
    return np.concatenate(list(x), axis=handle_negative_axis(x[0], axis))


def repeat(x: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
    """``n`` copies of ``x`` along a new axis at ``axis``."""
    return np.repeat(np.expand_dims(x, axis), n, axis=axis)


def repeat_axis(x: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
    """``x`` tiled ``n`` times along its own ``axis``."""
    reps = [1] * x.ndim
    reps[axis] = n
    return np.tile(x, reps)


def split2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int) -> list[list[np.ndarray]]:
    """``x`` split into ``n_1`` parts along ``axis_1``, each into ``n_2`` along ``axis_2``."""
    return [np.split(part, n_2, axis_2) for part in np.split(x, n_1, axis_1)]


def shard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int) -> np.ndarray:
    """The ``n_1 x n_2`` parts of :func:`split2D`, outer axis first, stacked on a new first axis."""
    return np.stack([part for row in split2D(x, n_1, n_2, axis_1, axis_2) for part in row])


def unshard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int) -> np.ndarray:
    """The inverse of :func:`shard2D`."""
    if x.shape[0] != n_1 * n_2:
        raise ValueError(f"unshard2D: the first axis has {x.shape[0]} parts, not {n_1} x {n_2}")
    rows = [np.concatenate(list(x[i * n_2:(i + 1) * n_2]), axis=handle_negative_axis(x[0], axis_2))
            for i in range(n_1)]
    return np.concatenate(rows, axis=axis_1)


def repeat_shard(x: np.ndarray, n_repeats: int, n_shards: int, shard_axis: int,
                 sharded_tensor: str = "contiguous") -> np.ndarray:
    """:func:`shard` into ``n_shards``, the set of shards repeated ``n_repeats`` times (``contiguous``),
    or that array read as ``(n_shards, n_repeats)`` blocks with the two axes swapped (``strided``: each
    shard in turn when the counts are equal), as popxl-addons orders them."""
    shards = shard(x, n_shards, shard_axis)
    tiled = repeat_axis(shards, n_repeats, 0)
    if sharded_tensor == "contiguous":
        return tiled
    if sharded_tensor == "strided":
        blocks = tiled.reshape(n_shards, n_repeats, *shards.shape[1:]).swapaxes(0, 1)
        return blocks.reshape(n_shards * n_repeats, *shards.shape[1:])
    raise ValueError(f"sharded_tensor should be either 'contiguous' or 'strided'. Not: {sharded_tensor}")


def _check_tp(tp: int, rf: int) -> None:
    if tp > rf:
        raise ValueError(f"tensor parallel factor `tp` is not less than replication factor `rf`: {tp} > {rf}")
    if rf % tp:
        raise ValueError("tensor parallel factor `tp` does not equally divide replication factor `rf`: "
                         f"rf/tp={rf / tp}")


def tensor_parallel_input(input_data: np.ndarray, tp: int, rf: int,
                          repeat_fn: Callable[[np.ndarray, int], np.ndarray] | None = None) -> np.ndarray:
    """Data ``(n, *data_shape)`` as a session's input ``(host transfers, replicas, *data_shape)``: each
    item repeated for the ``tp`` tensor-parallel replicas (the ``i``-th copy through ``repeat_fn(copy,
    i)`` when given), ``rf / tp`` items a transfer; axes of one squeezed."""
    _check_tp(tp, rf)
    data = np.expand_dims(input_data, 1)
    copies = [repeat_fn(data.copy(), i) if repeat_fn else data for i in range(tp)]
    data = np.concatenate(copies, axis=1).reshape(-1, rf, *input_data.shape[1:])
    return squeeze_safe(data, [0, 1])


def tensor_parallel_output(output_data: np.ndarray, num_host_transfers: int, tp: int, rf: int,
                           data_shape: tuple[int, ...], tp_identical: bool = True,
                           true_num_host_transfers: int | None = None) -> np.ndarray:
    """A session's output ``(host transfers, replicas, *data_shape)`` as ``(samples, *data_shape)``: the
    first tensor-parallel replica's (all of them, ``(samples, tp, *data_shape)``, unless
    ``tp_identical``), the transfers past ``true_num_host_transfers`` dropped."""
    _check_tp(tp, rf)
    out = output_data.reshape(num_host_transfers, rf // tp, tp, *data_shape)
    if true_num_host_transfers is not None:
        out = out[:true_num_host_transfers]
    out = out.reshape(-1, tp, *data_shape)
    return out[:, 0] if tp_identical else out


def pad_axis(x: np.ndarray, n: int, axis: int, value=0) -> np.ndarray:
    """``x`` padded with ``value`` at the end of ``axis`` to length ``n``."""
    if x.shape[axis] > n:
        raise ValueError(f"pad_axis: axis {axis} has {x.shape[axis]} elements, more than {n}")
    padding = [(0, 0)] * x.ndim
    padding[axis] = (0, n - x.shape[axis])
    return np.pad(x, padding, constant_values=value)


def squeeze_safe(x: np.ndarray, axis: int | Sequence[int] | None = None) -> np.ndarray:
    """``x`` without those of the ``axis`` axes (all when None) that have length one; the others kept."""
    if axis is None:
        return np.squeeze(x)
    axes = sorted({handle_negative_axis(x, a) for a in ([axis] if isinstance(axis, int) else axis)}, reverse=True)
    for a in axes:
        if x.shape[a] == 1:
            x = np.squeeze(x, axis=a)
    return x
