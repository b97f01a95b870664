"""popxl-addons' rotary positional embedding (``popxl_addons.ops.rotary_pos_embed``, its C++
``RotaryPosEmbedOp``) and its sine and cosine tables.

The op rotates the first ``rotary_dim`` features of each head of a rank-4 tensor, taken as complex
pairs (real, imaginary), by the angle of the token's position: popxl-addons' opx
(``rotary_pos_embedx.cpp``) makes the real parts in one ``popops::map`` (x_r cos - x_i sin) and the
imaginary parts in another (x_i cos + x_r sin), each over half the rotated features, concatenates
them with the features it does not rotate (views) and copies the result back into a tensor laid out
as the input. Its gradient is the same two maps with the rotation reversed and the copy.

Here: the two maps (graph ``map`` ops of three codelets, reading the rotated part and both tables),
the views, and the copy; the gradient is one map of the rotated part's size (the two halves' maps
together) reached through the first map, then the views' and the copy's gradients."""

from __future__ import annotations

import numpy as np

from ... import popxl
from ...popxl.ops._core import _graph

__all__ = ["rotary_pos_embed", "trig_table_constants", "trig_tables"]


def trig_tables(seq_len: int, rotary_dim: int, base: int = 10000, np_dtype="float32") -> tuple[np.ndarray, np.ndarray]:
    """(sin, cos) of the angles m θ_i, (seq_len, rotary_dim / 2): m the position, θ_i = base^(-2i / rotary_dim)."""
    theta = base ** (-np.arange(0, rotary_dim, 2).astype(np_dtype) / rotary_dim)
    phi = np.outer(np.arange(seq_len).astype(np_dtype), theta)
    return np.sin(phi), np.cos(phi)


def trig_table_constants(seq_len: int, rotary_dim: int, base: int = 10000, dtype=popxl.float32):
    """:func:`trig_tables` as two constants of ``dtype`` in the current graph."""
    sin, cos = trig_tables(seq_len, rotary_dim, base, dtype.as_numpy())
    return popxl.constant(sin, dtype), popxl.constant(cos, dtype)


def rotary_pos_embed(t: popxl.Tensor, sin: popxl.Tensor, cos: popxl.Tensor, rotary_dim: int | None = None):
    """``t`` (rank 4, features last) with its first ``rotary_dim`` features (all by default) rotated
    pairwise by the angles of the tables (:func:`trig_tables`)."""
    where = "popxl_addons.ops.rotary_pos_embed"
    g = _graph(where, t, sin, cos)
    features = t.shape[-1] if t.rank else 0
    rotary_dim = rotary_dim or features
    if t.rank != 4:
        raise ValueError(f"{where}: the tensor must have rank 4 (..., features), got {t.id!r} {t.shape}")
    if rotary_dim % 2 or not 0 < rotary_dim <= features:
        raise ValueError(f"{where}: rotary_dim {rotary_dim} must be even and at most the {features} features")
    if sin.rank not in (2, 3) or cos.rank not in (2, 3) or sin.shape[-1] != rotary_dim // 2:
        raise ValueError(f"{where}: the tables must be (seq_len, rotary_dim / 2 = {rotary_dim // 2}) (as trig_tables "
                         f"makes them), got {sin.shape} and {cos.shape}")
    half = (*t.shape[:3], rotary_dim // 2)
    with g._building() as b:
        rotated = b.slice(t._sim, 3, 0, rotary_dim) if rotary_dim < features else t._sim
        parts = []
        for combine, grad in (("sub", [["mul", "mul", "add"], None, None]), ("add", None)):
            parts.append(b.op("map", [rotated, sin._sim, cos._sim], [half],
                              {"steps": ["mul", "mul", combine], "op": "rotary_pos_embed", "grad": grad},
                              name=g._scoped("rotary_pos_embed"))[0])
        y = b.concat(parts, 3)
        if rotary_dim < features:
            y = b.concat([y, b.slice(t._sim, 3, rotary_dim, features)], 3)
        out = b.op("copy", [y], [t.shape], name=g._scoped("rotary_pos_embed_copy"))[0]
    return g._wrap(out, t.dtype)
