"""Constant folding: a node whose inputs are all known at import time evaluated with numpy
(:func:`_fold_numpy`; the importer falls back to onnx's reference implementation for the ops
that have no numpy rule here), as PopART folds it, so shape subgraphs cost nothing."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from ._values import _axis, _broadcast, _reshape_target, _slice_shape


def _np_dtype(elem_type: int):
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type)


def _attr_or_input(node_attrs: dict, vals: list, name: str, index: int):
    if name in node_attrs:
        return node_attrs[name]
    if len(vals) > index and vals[index] is not None:
        return [int(v) for v in np.asarray(vals[index]).reshape(-1)]
    return None


def _fold_numpy(op: str, a: dict, v: list, opset: int):
    """A node of constants evaluated with numpy, or None when there is no numpy rule."""
    x = v[0] if v else None
    if op == "Identity":
        return [x]
    if op == "Cast":
        return [np.asarray(x).astype(_np_dtype(a["to"]))]
    if op == "Gather":
        return [np.take(x, np.asarray(v[1]), axis=a.get("axis", 0))]
    if op == "Unsqueeze":
        axes = _attr_or_input(a, v, "axes", 1)
        rank = x.ndim + len(axes)
        out = x
        for ax in sorted(_axis(i, rank) for i in axes):
            out = np.expand_dims(out, ax)
        return [out]
    if op == "Squeeze":
        axes = _attr_or_input(a, v, "axes", 1)
        return [np.squeeze(x, axis=None if axes is None else tuple(_axis(i, x.ndim) for i in axes))]
    if op == "Concat":
        return [np.concatenate([np.atleast_1d(t) if t.ndim == 0 else t for t in v if t is not None],
                               axis=a.get("axis", 0))]
    if op == "Reshape":
        return [np.reshape(x, _reshape_target(x.shape, np.asarray(v[1]).reshape(-1), bool(a.get("allowzero", 0))))]
    if op == "Flatten":
        ax = _axis(a.get("axis", 1), x.ndim, upto_rank=True)
        return [x.reshape(math.prod(x.shape[:ax]), -1)]
    if op == "Slice":
        if opset < 10:
            starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
        else:
            starts, ends = np.asarray(v[1]).reshape(-1), np.asarray(v[2]).reshape(-1)
            axes = None if len(v) < 4 or v[3] is None else np.asarray(v[3]).reshape(-1)
            steps = None if len(v) < 5 or v[4] is None else np.asarray(v[4]).reshape(-1)
        _, parts = _slice_shape(x.shape, starts, ends, axes, steps)
        index = [slice(None)] * x.ndim
        for ax, s, e, st in parts:
            index[ax] = slice(s, e if e >= 0 else None, st)
        return [x[tuple(index)]]
    if op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    if op == "Expand":
        return [np.broadcast_to(x, _broadcast(x.shape, tuple(np.asarray(v[1]).reshape(-1)))).copy()]
    if op == "ConstantOfShape":
        fill = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        return [np.full(tuple(int(d) for d in np.asarray(x).reshape(-1)), fill.reshape(-1)[0], fill.dtype)]
    if op == "Range":
        return [np.arange(v[0], v[1], v[2]).astype(np.asarray(v[0]).dtype)]
    if op == "Where":
        return [np.where(v[0], v[1], v[2])]
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal, "Less": np.less,
              "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
              "And": np.logical_and, "Or": np.logical_or, "Pow": np.power, "MatMul": np.matmul,
              "Mod": np.fmod if a.get("fmod") else np.mod}
    if op in binary:
        out = binary[op](v[0], v[1])
        return [out.astype(np.asarray(v[0]).dtype) if op in ("Add", "Sub", "Mul", "Pow") else out]
    if op == "Div":
        if np.issubdtype(np.asarray(v[0]).dtype, np.integer):
            return [np.trunc(np.true_divide(v[0], v[1])).astype(np.asarray(v[0]).dtype)]
        return [np.true_divide(v[0], v[1]).astype(np.asarray(v[0]).dtype)]
    if op in ("Max", "Min"):
        f = np.maximum if op == "Max" else np.minimum
        out = v[0]
        for t in v[1:]:
            out = f(out, t)
        return [out]
    unary = {"Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt,
             "Not": np.logical_not, "Exp": np.exp, "Reciprocal": np.reciprocal, "Sign": np.sign}
    if op in unary:
        return [unary[op](x)]
    reduce = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min,
              "ReduceMean": np.mean}
    if op in reduce:
        axes = _attr_or_input(a, v, "axes", 1)
        keep = bool(a.get("keepdims", 1))
        if not axes and a.get("noop_with_empty_axes", 0):
            return [x]
        ax = None if not axes else tuple(_axis(i, x.ndim) for i in axes)
        return [np.asarray(reduce[op](x, axis=ax, keepdims=keep)).astype(x.dtype)]
    return None


#: op types whose outputs are always known at import (shapes, constants)
_ALWAYS_FOLDED = ("Shape", "Size", "Constant")
