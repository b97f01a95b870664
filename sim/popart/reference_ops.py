"""PopART's own ops (``ai.graphcore``) for ONNX's reference evaluator, so that an InferenceSession's anchors are
computed on the CPU for models that use them (:meth:`sim.popart.session._Session._anchor_values`).

Each computes what PopART's op computes (graphcore/popart ``willow/src/op/*.cpp`` and their Opx): ``Gelu`` the
tanh approximation, ``GeluErf`` the exact GELU, ``Swish`` x sigmoid(x), ``Scale``, ``ScaledAdd``, the identities
``Detach``, ``Nop`` and ``PrintTensor``, ``Expm1``, ``Log1p``, ``Atan2``, ``Fmod`` (C's fmod), ``Remainder``
(Python's %), ``Round`` / ``NearbyInt`` (to even), ``Subsample``, ``Reverse``, ``GroupNormalization`` and the
losses ``Nll``, ``L1`` and ``IdentityLoss`` with their reductions ("Sum", "Mean", "None"). :data:`OPS` lists them;
a model with another op of the domain keeps zero anchors.
"""

from __future__ import annotations

import math

import numpy as np
from onnx.reference.op_run import OpRun


def _reduce(x: np.ndarray, reduction) -> np.ndarray:
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction == "None":
        return x
    return np.asarray(x.sum() if reduction == "Sum" else x.mean(), dtype=x.dtype)


class _GraphcoreOp(OpRun):
    op_domain = "ai.graphcore"


class Gelu(_GraphcoreOp):
    def _run(self, x, **_):
        c, v = math.sqrt(2 / math.pi), x.astype(np.float64)  # in float64: a float16 x cubed overflows
        return ((0.5 * v * (1 + np.tanh(c * (v + 0.044715 * v ** 3)))).astype(x.dtype),)


class GeluErf(_GraphcoreOp):
    def _run(self, x, **_):
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return ((0.5 * x * (1 + erf(x.astype(np.float64) / math.sqrt(2)))).astype(x.dtype),)


class Swish(_GraphcoreOp):
    def _run(self, x, **_):
        v = x.astype(np.float64)
        return ((v / (1 + np.exp(-v))).astype(x.dtype),)


class Scale(_GraphcoreOp):
    def _run(self, x, scale=1.0, **_):
        return ((x * scale).astype(x.dtype),)


class ScaledAdd(_GraphcoreOp):
    def _run(self, x, y, a=None, b=None, scale0=1.0, scale1=1.0, **_):
        s0 = scale0 if a is None else a
        s1 = scale1 if b is None else b
        return ((s0 * x + s1 * y).astype(x.dtype),)


class Detach(_GraphcoreOp):
    def _run(self, x, **_):
        return (x.copy(),)


class Nop(Detach):
    pass


class PrintTensor(Detach):
    def _run(self, x, **_):
        return (x.copy(),)


class Expm1(_GraphcoreOp):
    def _run(self, x, **_):
        return (np.expm1(x),)


class Log1p(_GraphcoreOp):
    def _run(self, x, **_):
        return (np.log1p(x),)


class Atan2(_GraphcoreOp):
    def _run(self, y, x, **_):
        return (np.arctan2(y, x),)


class Fmod(_GraphcoreOp):
    def _run(self, x, y, **_):
        return (np.fmod(x, y),)


class Remainder(_GraphcoreOp):
    def _run(self, x, y, **_):
        return (np.remainder(x, y),)


class Round(_GraphcoreOp):
    def _run(self, x, **_):
        return (np.round(x),)


class NearbyInt(Round):
    pass


class Subsample(_GraphcoreOp):
    def _run(self, x, strides=None, **_):
        strides = list(strides or [1] * x.ndim)
        return (x[tuple(slice(None, None, int(s)) for s in strides)].copy(),)


class Reverse(_GraphcoreOp):
    def _run(self, x, dimensions=None, **_):
        return (np.flip(x, axis=tuple(int(d) for d in dimensions or ())).copy(),)


class GroupNormalization(_GraphcoreOp):
    """GroupNormOp: each sample's groups of channels normalised (biased variance), then scaled and shifted per
    channel; its outputs the result and each group's mean and inverse standard deviation."""

    def _run(self, x, scale, bias, num_groups=1, epsilon=1e-5, **_):
        n, c = x.shape[:2]
        groups = x.astype(np.float64).reshape(n, int(num_groups), -1)
        mean, var = groups.mean(-1, keepdims=True), groups.var(-1, keepdims=True)
        inv = 1 / np.sqrt(var + epsilon)
        shape = (1, c) + (1,) * (x.ndim - 2)
        y = ((groups - mean) * inv).reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)
        return y.astype(x.dtype), mean.reshape(-1).astype(x.dtype), inv.reshape(-1).astype(x.dtype)


class Nll(_GraphcoreOp):
    """NllOp: minus the label's probability's log (or log-probability), rows with ``ignoreIndex`` left out
    of the sum and of the mean's count."""

    def _run(self, probs, label, reduction="Mean", ignoreIndex=None, inputIsLogProbability=0, **_):
        flat = probs.reshape(-1, probs.shape[-1]).astype(np.float64)
        idx = label.reshape(-1).astype(np.int64)
        keep = idx != ignoreIndex if ignoreIndex is not None else np.ones_like(idx, dtype=bool)
        picked = flat[np.arange(len(idx)), np.where(keep, idx, 0)]
        loss = np.where(keep, -(picked if inputIsLogProbability else np.log(picked)), 0.0)
        reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
        if reduction == "None":
            return (loss.reshape(label.shape).astype(probs.dtype),)
        total = loss.sum() / (max(int(keep.sum()), 1) if reduction == "Mean" else 1)
        return (np.asarray(total, dtype=probs.dtype),)


class L1(_GraphcoreOp):
    def _run(self, x, reduction="Mean", **kwargs):
        scale = kwargs.get("lambda", 1.0)  # a Python keyword: PopART's attribute name
        return (_reduce((np.abs(x) * scale).astype(x.dtype), reduction),)


class IdentityLoss(_GraphcoreOp):
    def _run(self, x, reduction="Mean", **_):
        return (_reduce(x, reduction),)


#: the evaluator's implementations, by op type
OPS = {cls.__name__: cls for cls in (Gelu, GeluErf, Swish, Scale, ScaledAdd, Detach, Nop, PrintTensor, Expm1, Log1p,
                                     Atan2, Fmod, Remainder, Round, NearbyInt, Subsample, Reverse, GroupNormalization,
                                     Nll, L1, IdentityLoss)}
