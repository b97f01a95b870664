"""sim.poptorch runs every operation of PopTorch's supported-operations list
(tests/data/poptorch_supported_ops.txt, from PopTorch's user guide): a tiny model using the op
gives plain torch's output through inferenceModel (and, where the op is differentiable,
trainingModel: the same loss and the same weights after one SGD step), and its simulated run
prices it (a cost > 0, or exactly 0 for a view or a constant, as on the IPU); or the op is in
UNSUPPORTED with the reason docs/poptorch.md gives.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import sim  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OPS_FILE = ROOT / "tests" / "data" / "poptorch_supported_ops.txt"
OPS = [line.strip() for line in OPS_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


# --- inputs ------------------------------------------------------------------------------------
def R(*shape):
    return lambda g: torch.randn(*shape, generator=g)


def P(*shape):  # positive
    return lambda g: torch.rand(*shape, generator=g) + 0.5


def U(*shape):  # inside (-0.9, 0.9)
    return lambda g: torch.rand(*shape, generator=g) * 1.8 - 0.9


def I(high, *shape):  # noqa: E743 - integers in [0, high)
    return lambda g: torch.randint(0, high, shape, generator=g)


def S(*shape):  # signs
    return lambda g: torch.randint(0, 2, shape, generator=g) * 2.0 - 1.0


def T(value):  # a fixed tensor
    return lambda g: value.clone()


@dataclass
class Case:
    fn: Callable  # fn(model, *inputs) -> the output; model.layer is the layer made by `layer`
    inputs: list
    layer: Callable | None = None
    train: bool = True  # differentiable: also run through trainingModel
    free: bool = False  # a view: no compute in inference, on the IPU as here
    constant: bool = False  # folded into a constant of the graph
    loss: bool = False  # the op is itself the loss


def op(fn, *inputs, **kw) -> Case:
    return Case(fn, list(inputs), **kw)


def layer(make, *inputs, **kw) -> Case:
    return Case(lambda m, *xs: m.layer(*xs), list(inputs), layer=make, **kw)


def loss(make, *inputs, **kw) -> Case:
    return Case(lambda m, *xs: m.layer(*xs), list(inputs), layer=make, loss=True, **kw)


X = R(3, 5)
IDX = T(torch.tensor([[0, 2, 1], [4, 3, 0], [1, 1, 2]]))
BOUNDS = torch.tensor([-1.0, 0.0, 1.0])
D = torch.distributions

CASES: dict[str, Case] = {
    # creation: constants of the graph (PopART folds them); the add prices the run
    "torch.arange": op(lambda m, x: x + torch.arange(5, dtype=x.dtype), X, constant=True),
    "tensor.fill": op(lambda m, x: x * torch.zeros_like(x).fill_(3.0), X, constant=True),
    "torch.full": op(lambda m, x: x + torch.full((5,), 2.0), X, constant=True),
    "torch.full_like": op(lambda m, x: x + torch.full_like(x, 2.0), X, constant=True),
    "torch.Tensor.new_ones": op(lambda m, x: x + x.new_ones(x.shape), X, constant=True),
    "torch.Tensor.new_zeros": op(lambda m, x: x - x.new_zeros(x.shape), X, constant=True),
    "torch.ones": op(lambda m, x: x + torch.ones(5), X, constant=True),
    "torch.ones_like": op(lambda m, x: x + torch.ones_like(x), X, constant=True),
    "torch.zeros": op(lambda m, x: x - torch.zeros(3, 5), X, constant=True),
    "torch.zeros_like": op(lambda m, x: x - torch.zeros_like(x), X, constant=True),
    # indexing, slicing, joining, mutating
    "torch.bincount": op(lambda m, i: torch.bincount(i.flatten(), minlength=8), I(8, 3, 4), train=False),
    "torch.bucketize": op(lambda m, x: torch.bucketize(x, BOUNDS), X, train=False),
    "torch.cat": op(lambda m, x, y: torch.cat([x, y], 1), X, R(3, 2), free=True),
    "torch.chunk": op(lambda m, x: torch.chunk(x, 2, 1), R(3, 6), free=True),
    "torch.gather": op(lambda m, x, i: torch.gather(x, 1, i), X, IDX),
    "torch.index_select": op(lambda m, x: torch.index_select(x, 1, torch.tensor([0, 3])), X),
    "torch.index_reduce": op(lambda m, x, s: x.index_reduce(0, torch.tensor([0, 2, 0]), s, "prod"), X, R(3, 5),
                             train=False),
    "torch.reshape": op(lambda m, x: torch.reshape(x, (5, 3)), X, free=True),
    "torch.roll": op(lambda m, x: torch.roll(x, 2, 1), X, free=True),
    "torch.scatter": op(lambda m, x, i, s: torch.scatter(x, 1, i, s), X, IDX, R(3, 3)),
    "torch.scatter_add": op(lambda m, x, i, s: torch.scatter_add(x, 1, i, s), X, IDX, R(3, 3)),
    "torch.scatter_reduce": op(lambda m, x, i, s: torch.scatter_reduce(x, 1, i, s, "amax"), X, IDX, R(3, 3),
                               train=False),
    "torch.stack": op(lambda m, x, y: torch.stack([x, y]), X, X, free=True),
    "torch.split": op(lambda m, x: torch.split(x, [2, 3], 1), X, free=True),
    "torch.squeeze": op(lambda m, x: torch.squeeze(x, 1), R(3, 1, 5), free=True),
    "torch.t": op(lambda m, x: torch.t(x), X),
    "torch.take_along_dim": op(lambda m, x, i: torch.take_along_dim(x, i, 1), X, IDX),
    "torch.transpose": op(lambda m, x: torch.transpose(x, 0, 1), X),
    "torch.unbind": op(lambda m, x: torch.unbind(x, 0), X, free=True),
    "torch.unsqueeze": op(lambda m, x: torch.unsqueeze(x, 1), X, free=True),
    "torch.where": op(lambda m, x, y: torch.where(x > 0, x, y), X, X),
    "tensor.expand": op(lambda m, x: x.expand(2, 3, 5), X, free=True),
    "tensor.expand_as": op(lambda m, x, y: x.expand_as(y), R(1, 5), X, free=True),
    "tensor.masked_fill": op(lambda m, x: x.masked_fill(x > 0.5, -1.0), X),
    "tensor.index_fill_": op(lambda m, x: (x * 1.0).index_fill_(1, torch.tensor([0, 2]), -1.0), X),
    # random samplers (the same draws as torch from the same seed)
    "torch.bernoulli": op(lambda m, x: torch.bernoulli(torch.sigmoid(x)), X, train=False),
    "torch.distributions.Bernoulli": op(lambda m, x: D.Bernoulli(probs=torch.sigmoid(x)).sample(), X, train=False),
    "torch.randn": op(lambda m, x: x + torch.randn(3, 5), X),
    "torch.normal": op(lambda m, x: torch.normal(x, 0.5), X, train=False),
    "torch.distributions.Normal": op(lambda m, x: D.Normal(x, 0.5).sample(), X, train=False),
    "torch.rand": op(lambda m, x: x * torch.rand(3, 5), X),
    "torch.uniform": op(lambda m, x: x * torch.empty_like(x).uniform_(-1.0, 1.0), X),
    "torch.distributions.Uniform": op(lambda m, x: D.Uniform(x, x + 1.0).sample(), X, train=False),
    "torch.exponential": op(lambda m, x: x * torch.empty_like(x).exponential_(2.0), X),
    "torch.distributions.Exponential": op(lambda m, x: D.Exponential(x).sample(), P(3, 5), train=False),
    # pointwise
    "torch.abs": op(lambda m, x: torch.abs(x), X),
    "torch.acos": op(lambda m, x: torch.acos(x), U(3, 5)),
    "torch.acosh": op(lambda m, x: torch.acosh(x + 1.0), P(3, 5)),
    "torch.add": op(lambda m, x, y: torch.add(x, y, alpha=2.0), X, X),
    "torch.addcdiv": op(lambda m, x, y, z: torch.addcdiv(x, y, z, value=0.5), X, X, P(3, 5)),
    "torch.amax": op(lambda m, x: torch.amax(x, 1), X),
    "torch.amin": op(lambda m, x: torch.amin(x, 1), X),
    "torch.asin": op(lambda m, x: torch.asin(x), U(3, 5)),
    "torch.asinh": op(lambda m, x: torch.asinh(x), X),
    "torch.atan": op(lambda m, x: torch.atan(x), X),
    "torch.atanh": op(lambda m, x: torch.atanh(x), U(3, 5)),
    "torch.bitwise_and": op(lambda m, a, b: torch.bitwise_and(a, b), I(16, 3, 5), I(16, 3, 5), train=False),
    "torch.bitwise_not": op(lambda m, a: torch.bitwise_not(a), I(16, 3, 5), train=False),
    "torch.bitwise_or": op(lambda m, a, b: torch.bitwise_or(a, b), I(16, 3, 5), I(16, 3, 5), train=False),
    "torch.bitwise_xor": op(lambda m, a, b: torch.bitwise_xor(a, b), I(16, 3, 5), I(16, 3, 5), train=False),
    "torch.cdist": op(lambda m, x, y: torch.cdist(x, y), R(2, 3, 4), R(2, 5, 4)),
    "torch.ceil": op(lambda m, x: torch.ceil(x), X),
    "torch.clamp": op(lambda m, x: torch.clamp(x, -0.5, 0.5), X),
    "torch.clamp_max": op(lambda m, x: torch.clamp_max(x, 0.5), X),
    "torch.clamp_min": op(lambda m, x: torch.clamp_min(x, -0.5), X),
    "torch.cos": op(lambda m, x: torch.cos(x), X),
    "torch.cosh": op(lambda m, x: torch.cosh(x), X),
    "torch.div": op(lambda m, x, y: torch.div(x, y), X, P(3, 5)),
    "torch.exp": op(lambda m, x: torch.exp(x), X),
    "torch.expm1": op(lambda m, x: torch.expm1(x), X),
    "torch.floor": op(lambda m, x: torch.floor(x), X),
    "torch.floor_divide": op(lambda m, x: torch.floor_divide(x, 0.7), X, train=False),
    "torch.fmod": op(lambda m, x: torch.fmod(x, 0.7), X),
    "torch.frac": op(lambda m, x: torch.frac(x), X),
    "torch.log": op(lambda m, x: torch.log(x), P(3, 5)),
    "torch.log10": op(lambda m, x: torch.log10(x), P(3, 5)),
    "torch.log1p": op(lambda m, x: torch.log1p(x), P(3, 5)),
    "torch.log2": op(lambda m, x: torch.log2(x), P(3, 5)),
    "torch.logical_and": op(lambda m, x, y: torch.logical_and(x > 0, y > 0), X, X, train=False),
    "torch.logical_or": op(lambda m, x, y: torch.logical_or(x > 0, y > 0), X, X, train=False),
    "torch.mul": op(lambda m, x, y: torch.mul(x, y), X, X),
    "torch.norm": op(lambda m, x: torch.norm(x, dim=1), X),
    "torch.neg": op(lambda m, x: torch.neg(x), X),
    "torch.pow": op(lambda m, x: torch.pow(x, 1.5), P(3, 5)),
    "torch.reciprocal": op(lambda m, x: torch.reciprocal(x), P(3, 5)),
    "torch.remainder": op(lambda m, x: torch.remainder(x, 0.7), X),
    "torch.round": op(lambda m, x: torch.round(x), X),
    "torch.rsqrt": op(lambda m, x: torch.rsqrt(x), P(3, 5)),
    "torch.sigmoid": op(lambda m, x: torch.sigmoid(x), X),
    "torch.sign": op(lambda m, x: torch.sign(x), X),
    "torch.sin": op(lambda m, x: torch.sin(x), X),
    "torch.sinh": op(lambda m, x: torch.sinh(x), X),
    "torch.sqrt": op(lambda m, x: torch.sqrt(x), P(3, 5)),
    "torch.square": op(lambda m, x: torch.square(x), X),
    "torch.sub": op(lambda m, x, y: torch.sub(x, y), X, X),
    "torch.tan": op(lambda m, x: torch.tan(x), U(3, 5)),
    "torch.tanh": op(lambda m, x: torch.tanh(x), X),
    "torch.true_divide": op(lambda m, x, y: torch.true_divide(x, y), X, P(3, 5)),
    "torch.trunc": op(lambda m, x: torch.trunc(x), X),
    # reductions
    "torch.all": op(lambda m, x: torch.all(x > -0.5, dim=1), X, train=False),
    "torch.any": op(lambda m, x: torch.any(x > 0.5, dim=1), X, train=False),
    "torch.argmax": op(lambda m, x: torch.argmax(x, 1), X, train=False),
    "torch.argmin": op(lambda m, x: torch.argmin(x, 1), X, train=False),
    "torch.count_nonzero": op(lambda m, x: torch.count_nonzero(x > 0, dim=1), X, train=False),
    "torch.mean": op(lambda m, x: torch.mean(x, 1), X),
    "torch.median": op(lambda m, x: torch.median(x, 1), X),
    "torch.prod": op(lambda m, x: torch.prod(x, 1), X),
    "torch.logsumexp": op(lambda m, x: torch.logsumexp(x, 1), X),
    "torch.std": op(lambda m, x: torch.std(x, 1), X),
    "torch.std_mean": op(lambda m, x: torch.std_mean(x, 1), X),
    "torch.sum": op(lambda m, x: torch.sum(x, 1), X),
    "torch.var": op(lambda m, x: torch.var(x, 1), X),
    "torch.var_mean": op(lambda m, x: torch.var_mean(x, 1), X),
    # comparisons
    "torch.eq": op(lambda m, x, y: torch.eq(x.round(), y.round()), X, X, train=False),
    "torch.ge": op(lambda m, x, y: torch.ge(x, y), X, X, train=False),
    "torch.gt": op(lambda m, x, y: torch.gt(x, y), X, X, train=False),
    "torch.le": op(lambda m, x, y: torch.le(x, y), X, X, train=False),
    "torch.lt": op(lambda m, x, y: torch.lt(x, y), X, X, train=False),
    "torch.max": op(lambda m, x: torch.max(x, 1), X),
    "torch.min": op(lambda m, x: torch.min(x, 1), X),
    "torch.ne": op(lambda m, x, y: torch.ne(x.round(), y.round()), X, X, train=False),
    "torch.isnan": op(lambda m, x: torch.isnan(torch.log(x)), X, train=False),
    "torch.topk": op(lambda m, x: torch.topk(x, 3, dim=1), X),
    "torch.argsort": op(lambda m, x: torch.argsort(x, 1), X, train=False),
    "torch.randperm": op(lambda m, x: x[:, torch.randperm(5)], X),
    "torch.sort": op(lambda m, x: torch.sort(x, 1), X),
    # torch.linalg
    "torch.linalg.norm": op(lambda m, x: torch.linalg.norm(x, dim=1), X),
    "torch.linalg.matrix_norm": op(lambda m, x: torch.linalg.matrix_norm(x), R(2, 3, 5)),
    "torch.linalg.vector_norm": op(lambda m, x: torch.linalg.vector_norm(x, ord=3, dim=1), X),
    # other
    "torch.cumsum": op(lambda m, x: torch.cumsum(x, 1), X),
    "torch.cumprod": op(lambda m, x: torch.cumprod(x, 1), X),
    "torch.cross": op(lambda m, x, y: torch.cross(x, y, dim=1), R(4, 3), R(4, 3)),
    "torch.meshgrid": op(lambda m, x, y: torch.meshgrid(x, y, indexing="ij"), R(3), R(4), free=True),
    "torch.cartesian_prod": op(lambda m, x, y: torch.cartesian_prod(x, y), R(3), R(4), free=True),
    "torch.tensordot": op(lambda m, x, y: torch.tensordot(x, y, dims=([1, 2], [0, 1])), R(2, 3, 4), R(3, 4, 5)),
    # BLAS
    "torch.addmm": op(lambda m, b, x, y: torch.addmm(b, x, y), R(5), R(3, 4), R(4, 5)),
    "torch.matmul": op(lambda m, x, y: torch.matmul(x, y), R(2, 3, 4), R(4, 5)),
    "torch.bmm": op(lambda m, x, y: torch.bmm(x, y), R(2, 3, 4), R(2, 4, 5)),
    # containers
    "torch.nn.Module": layer(lambda: _Tiny(), X),
    "torch.nn.Sequential": layer(lambda: nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2)), X),
    # convolutions
    "torch.nn.Conv1d": layer(lambda: nn.Conv1d(4, 6, 3), R(2, 4, 9)),
    "torch.nn.Conv2d": layer(lambda: nn.Conv2d(4, 6, 3), R(2, 4, 7, 7)),
    "torch.nn.Conv3d": layer(lambda: nn.Conv3d(2, 4, 3), R(1, 2, 5, 5, 5)),
    "torch.nn.ConvTranspose1d": layer(lambda: nn.ConvTranspose1d(4, 6, 3, stride=2), R(2, 4, 5)),
    "torch.nn.ConvTranspose2d": layer(lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), R(2, 4, 4, 4)),
    "torch.nn.ConvTranspose3d": layer(lambda: nn.ConvTranspose3d(2, 4, 3), R(1, 2, 3, 3, 3)),
    # pooling
    "torch.nn.MaxPool1d": layer(lambda: nn.MaxPool1d(2), R(2, 4, 8)),
    "torch.nn.MaxPool2d": layer(lambda: nn.MaxPool2d(2), R(2, 4, 6, 6)),
    "torch.nn.MaxPool3d": layer(lambda: nn.MaxPool3d(2), R(1, 2, 4, 4, 4)),
    "torch.nn.AvgPool1d": layer(lambda: nn.AvgPool1d(2), R(2, 4, 8)),
    "torch.nn.AvgPool2d": layer(lambda: nn.AvgPool2d(2), R(2, 4, 6, 6)),
    "torch.nn.AvgPool3d": layer(lambda: nn.AvgPool3d(2), R(1, 2, 4, 4, 4)),
    "torch.nn.AdaptiveAvgPool1d": layer(lambda: nn.AdaptiveAvgPool1d(3), R(2, 4, 9)),
    "torch.nn.AdaptiveAvgPool2d": layer(lambda: nn.AdaptiveAvgPool2d(2), R(2, 4, 6, 6)),
    "torch.nn.AdaptiveAvgPool3d": layer(lambda: nn.AdaptiveAvgPool3d(2), R(1, 2, 4, 4, 4)),
    # padding: views (popops::pad)
    "torch.nn.ReflectionPad1d": layer(lambda: nn.ReflectionPad1d(2), R(2, 3, 6), free=True),
    "torch.nn.ReflectionPad2d": layer(lambda: nn.ReflectionPad2d(1), R(1, 2, 4, 4), free=True),
    "torch.nn.ReplicationPad1d": layer(lambda: nn.ReplicationPad1d(2), R(2, 3, 6), free=True),
    "torch.nn.ReplicationPad2d": layer(lambda: nn.ReplicationPad2d(1), R(1, 2, 4, 4), free=True),
    "torch.nn.ReplicationPad3d": layer(lambda: nn.ReplicationPad3d(1), R(1, 2, 3, 3, 3), free=True),
    "torch.nn.ZeroPad2d": layer(lambda: nn.ZeroPad2d(1), R(1, 2, 4, 4), free=True),
    "torch.nn.ConstantPad1d": layer(lambda: nn.ConstantPad1d(2, 3.5), R(2, 3, 6), free=True),
    "torch.nn.ConstantPad2d": layer(lambda: nn.ConstantPad2d(1, 3.5), R(1, 2, 4, 4), free=True),
    "torch.nn.ConstantPad3d": layer(lambda: nn.ConstantPad3d(1, 3.5), R(1, 2, 3, 3, 3), free=True),
    # activations
    "torch.nn.ELU": layer(lambda: nn.ELU(), X),
    "torch.nn.CELU": layer(lambda: nn.CELU(0.5), X),
    "torch.nn.GELU": layer(lambda: nn.GELU(), X),
    "torch.nn.Hardshrink": layer(lambda: nn.Hardshrink(0.3), X),
    "torch.nn.LeakyReLU": layer(lambda: nn.LeakyReLU(0.1), X),
    "torch.nn.LogSoftmax": layer(lambda: nn.LogSoftmax(dim=1), X),
    "torch.nn.Mish": layer(lambda: nn.Mish(), X),
    "torch.nn.ReLU": layer(lambda: nn.ReLU(), X),
    "torch.nn.SELU": layer(lambda: nn.SELU(), X),
    "torch.nn.SiLU": layer(lambda: nn.SiLU(), X),
    "torch.nn.Sigmoid": layer(lambda: nn.Sigmoid(), X),
    "torch.nn.Softmax": layer(lambda: nn.Softmax(dim=1), X),
    "torch.nn.Softplus": layer(lambda: nn.Softplus(), X),
    "torch.nn.Softsign": layer(lambda: nn.Softsign(), X),
    "torch.nn.Softshrink": layer(lambda: nn.Softshrink(0.3), X),
    "torch.nn.Tanh": layer(lambda: nn.Tanh(), X),
    "torch.nn.PReLU": layer(lambda: nn.PReLU(), X),
    "torch.nn.RReLU": layer(lambda: nn.RReLU(), X),
    "torch.nn.Hardtanh": layer(lambda: nn.Hardtanh(-0.5, 0.5), X),
    "torch.nn.functional.glu": op(lambda m, x: F.glu(x, 1), R(3, 6)),
    "torch.nn.Threshold": layer(lambda: nn.Threshold(0.1, 20.0), X),
    # normalisation
    "torch.nn.BatchNorm1d": layer(lambda: nn.BatchNorm1d(5), X),
    "torch.nn.BatchNorm2d": layer(lambda: nn.BatchNorm2d(4), R(2, 4, 3, 3)),
    "torch.nn.BatchNorm3d": layer(lambda: nn.BatchNorm3d(2), R(2, 2, 3, 3, 3)),
    "torch.nn.LayerNorm": layer(lambda: nn.LayerNorm(5), X),
    "torch.nn.GroupNorm": layer(lambda: nn.GroupNorm(2, 4), R(2, 4, 3, 3)),
    "torch.nn.InstanceNorm1d": layer(lambda: nn.InstanceNorm1d(4, affine=True), R(2, 4, 6)),
    "torch.nn.InstanceNorm2d": layer(lambda: nn.InstanceNorm2d(4, affine=True), R(2, 4, 3, 3)),
    "torch.nn.InstanceNorm3d": layer(lambda: nn.InstanceNorm3d(2, affine=True), R(2, 2, 3, 3, 3)),
    "torch.nn.utils.weight_norm": layer(lambda: _weight_norm(nn.Linear(5, 3)), X),
    # recurrent
    "torch.nn.RNN": layer(lambda: nn.RNN(5, 4), R(3, 2, 5)),
    "torch.nn.GRU": layer(lambda: nn.GRU(5, 4), R(3, 2, 5)),
    "torch.nn.LSTM": layer(lambda: nn.LSTM(5, 4, batch_first=True), R(2, 3, 5)),
    # linear
    "torch.nn.Identity": layer(lambda: nn.Identity(), X, free=True, train=False),
    "torch.nn.Linear": layer(lambda: nn.Linear(5, 3), X),
    "torch.nn.Bilinear": layer(lambda: nn.Bilinear(5, 4, 3), X, R(3, 4)),
    # dropout: the identity at inference (as on the IPU), poprand dropout in training
    "torch.nn.dropout": layer(lambda: nn.Dropout(0.5), X, free=True),
    # sparse
    "torch.nn.Embedding": layer(lambda: nn.Embedding(10, 4), I(10, 2, 3)),
    "torch.nn.EmbeddingBag": layer(lambda: nn.EmbeddingBag(10, 4, mode="mean"), I(10, 2, 3)),
    "torch.nn.functional.one_hot": op(lambda m, i: F.one_hot(i, 6), I(6, 2, 3), train=False),
    # losses
    "torch.nn.L1Loss": loss(lambda: nn.L1Loss(), X, X),
    "torch.nn.MSELoss": loss(lambda: nn.MSELoss(), X, X),
    "torch.nn.CrossEntropyLoss": loss(lambda: nn.CrossEntropyLoss(), X, I(5, 3)),
    "torch.nn.NLLLoss": loss(lambda: nn.Sequential(nn.LogSoftmax(1)), X, I(5, 3)),
    "torch.nn.BCELoss": Case(lambda m, x, t: m.layer(torch.sigmoid(x), t), [X, T(torch.rand(3, 5))],
                             layer=lambda: nn.BCELoss(), loss=True),
    "torch.nn.KLDivLoss": loss(lambda: nn.KLDivLoss(reduction="batchmean"), X, T(torch.softmax(torch.ones(3, 5), 1))),
    "torch.nn.PoissonNLLLoss": loss(lambda: nn.PoissonNLLLoss(), X, P(3, 5)),
    "torch.nn.HingeEmbeddingLoss": loss(lambda: nn.HingeEmbeddingLoss(), X, S(3, 5)),
    "torch.nn.BCEWithLogitsLoss": loss(lambda: nn.BCEWithLogitsLoss(), X, T(torch.rand(3, 5))),
    "torch.nn.SmoothL1Loss": loss(lambda: nn.SmoothL1Loss(), X, X),
    "torch.nn.SoftMarginLoss": loss(lambda: nn.SoftMarginLoss(), X, S(3, 5)),
    "torch.nn.CosineEmbeddingLoss": loss(lambda: nn.CosineEmbeddingLoss(), X, X, S(3)),
    "torch.nn.MarginRankingLoss": loss(lambda: nn.MarginRankingLoss(0.1), R(4), R(4), S(4)),
    "torch.nn.TripletMarginLoss": loss(lambda: nn.TripletMarginLoss(), X, X, X),
    "torch.nn.CTCLoss": loss(lambda: nn.CTCLoss(), R(6, 2, 5), T(torch.tensor([[1, 2, 3], [2, 4, 1]])),
                             T(torch.tensor([6, 5])), T(torch.tensor([3, 2]))),
    # vision
    "torch.nn.Upsample": layer(lambda: nn.Upsample(scale_factor=2, mode="bicubic"), R(1, 2, 3, 3)),
}

# op -> the reason it is not simulated (the same words are in docs/poptorch.md, "Operations")
UNSUPPORTED = {
    "torch_scatter.scatter": "needs the torch_scatter package",
    "torch_scatter.composite.scatter_log_softmax": "needs the torch_scatter package",
    "torch_scatter.composite.scatter_softmax": "needs the torch_scatter package",
    "torch_scatter.composite.scatter_std": "needs the torch_scatter package",
    "torch_scatter.composite.scatter_logsumexp": "needs the torch_scatter package",
    "torch_spline_conv.spline_basis": "needs the torch_spline_conv package",
    "torch_spline_conv.spline_weighting": "needs the torch_spline_conv package",
}


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def _weight_norm(module):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nn.utils.weight_norm(module)


# NLLLoss takes log-probabilities: the case's layer makes them, the loss follows
CASES["torch.nn.NLLLoss"] = Case(lambda m, x, t: F.nll_loss(m.layer(x), t), [X, I(5, 3)],
                                 layer=lambda: nn.LogSoftmax(1), loss=True)


class Net(nn.Module):
    """The tiny model of a case; in training, ``w`` scales the first input (a float one, so the
    op's input is trained) and the mean of the first output is the loss (unless the op is the
    loss). ``tuple_out``: the op returns a tuple (its first element is the loss's)."""

    def __init__(self, case: Case, xs, training: bool, tuple_out: bool = False):
        super().__init__()
        self.case = case
        self.layer = case.layer() if case.layer else None
        self.training_run = training
        self.tuple_out = tuple_out
        x = xs[0]
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, x.numel()).reshape(x.shape)) \
            if training and x.is_floating_point() else None

    def forward(self, *xs):
        if self.w is not None:
            xs = (xs[0] * self.w,) + xs[1:]
        out = self.case.fn(self, *xs)
        if not self.training_run or self.case.loss:
            return out
        return poptorch.identity_loss(out[0] if self.tuple_out else out, reduction="mean")


def _inputs(case: Case):
    g = torch.Generator().manual_seed(1234)
    return [make(g) for make in case.inputs]


def _host(t):
    """PopTorch's output dtypes: int64 as int32, float64 as float32."""
    if isinstance(t, torch.Tensor):
        return t.int() if t.dtype == torch.int64 else (t.float() if t.dtype == torch.float64 else t)
    return t


def _same(actual, expected):
    a, e = pytree.tree_leaves(actual), [_host(t) for t in pytree.tree_leaves(expected)]
    assert len(a) == len(e)
    for x, y in zip(a, e):
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


def _forward_cycles(model) -> int:
    exe = model.executable
    return sum(exe.costs[o.name].cycles for o in exe.graph.ops if o.pass_ == "forward")


def test_every_listed_op_is_covered_once():
    assert len(OPS) == len(set(OPS)) == 227
    assert set(CASES) | set(UNSUPPORTED) == set(OPS)
    assert not set(CASES) & set(UNSUPPORTED)
    docs = " ".join((ROOT / "docs" / "poptorch.md").read_text().split())
    free = sum(c.free or c.constant for c in CASES.values())
    assert (f"Of the {len(OPS)} entries" in docs and f"{len(CASES)} run with a cost ({free} of them" in docs
            and f"{len(UNSUPPORTED)} are refused" in docs)


def _net(case, xs, training, tuple_out=False):
    torch.manual_seed(0)  # the same layer weights every time
    return Net(case, xs, training, tuple_out)


@pytest.mark.filterwarnings(r"ignore:index_reduce\(\) is in beta")
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_runs_as_torch_and_is_priced(name):
    case = CASES[name]
    xs = _inputs(case)
    net = _net(case, xs, training=False).eval()
    with torch.no_grad():
        torch.manual_seed(7)
        expected = net(*xs)
        model = poptorch.inferenceModel(net)
        torch.manual_seed(7)
        got = model(*xs)
    _same(got, expected)
    cycles = _forward_cycles(model)
    if case.free:
        assert cycles == 0, f"{name} is a view here and on the IPU"
    else:
        assert cycles > 0
    if case.constant:
        assert any(t.role == "constant" for t in model.executable.graph.tensors.values())
    if not case.train:
        return

    tuple_out = isinstance(expected, tuple)
    reference = _net(case, xs, training=True, tuple_out=tuple_out).train()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    torch.manual_seed(7)
    ref_loss = reference(*xs)
    ref_loss.backward()
    opt.step()
    net = _net(case, xs, training=True, tuple_out=tuple_out).train()
    trained = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    torch.manual_seed(7)
    got_loss = trained(*xs)
    _same(got_loss, ref_loss.detach())
    for (pname, p), q in zip(net.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=0, msg=f"{name}: weight {pname}")
    backward = [o for o in trained.executable.graph.ops if o.pass_ == "backward"]
    assert backward and sum(trained.executable.costs[o.name].cycles for o in backward) > 0


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_op_is_documented_with_its_reason(name):
    docs = (ROOT / "docs" / "poptorch.md").read_text()
    section = docs[docs.index("## Operations"):]
    row = next((line for line in section.splitlines() if f"`{name}`" in line), None)
    assert row is not None, f"{name} is not in docs/poptorch.md, Operations"
    assert UNSUPPORTED[name] in row


def test_an_op_without_a_rule_says_what_to_register_its_rule_under():
    """The error names register_op's target: a function by its rule key's name, a layer by its class."""
    class Cummax(nn.Module):
        def forward(self, x):
            return torch.cummax(x, dim=-1).values

    with pytest.raises(sim.UnsupportedOpError, match=r"no cost for torch\.cummax \(node 'cummax'\): PopTorch has no "
                                                     r"handler for aten::cummax, .*\. Give it one with "
                                                     r"sim\.poptorch\.register_op\('cummax', fn\)"):
        poptorch.inferenceModel(Cummax())(torch.randn(2, 8))
    with pytest.raises(sim.UnsupportedOpError, match=r"Give it one with sim\.poptorch\.register_op\("
                                                     r"torch\.nn\.modules\.rnn\.LSTM, fn\)"):
        poptorch.inferenceModel(nn.LSTM(8, 8, 2))(torch.randn(3, 2, 8))


def test_ctc_loss_is_popnns_planned_op_and_its_gradient_is_scaled():
    class M(nn.Module):
        def forward(self, log_probs, targets, reduction="mean"):
            return F.ctc_loss(log_probs, targets, torch.tensor([50, 40]), torch.tensor([12, 9]), reduction=reduction)

    log_probs = torch.randn(50, 2, 30).log_softmax(2)
    targets = torch.randint(1, 30, (2, 12))
    model = poptorch.inferenceModel(M())
    torch.testing.assert_close(model(log_probs, targets), M()(log_probs, targets), rtol=0, atol=0)
    (op,) = [o for o in model.executable.graph.ops if o.kind == "ctc_loss"]
    cost = model.executable.costs[op.name]
    assert cost.plan.startswith("CTC loss: batch/") and cost.cycles > 0
    assert model.executable.graph.tensors[op.outputs[1]].shape == (50, 2, 30)  # the gradient popnn makes

    class Train(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj, self.ctc = nn.Linear(8, 30), M()

        def forward(self, x, targets):
            return self.ctc(self.proj(x).log_softmax(2), targets)

    trained = poptorch.trainingModel(Train(), optimizer=torch.optim.SGD(Train().parameters(), lr=0.1))
    trained(torch.randn(50, 2, 8), targets)
    g = trained.executable.graph
    (top,) = [o for o in g.ops if o.kind == "ctc_loss"]
    # the log-probabilities' gradient is popnn's (the op's second output), scaled by the loss's
    assert [o.kind for o in g.ops if top.outputs[1] in o.inputs] == ["mul"]


def test_ctc_loss_with_concatenated_targets_is_refused_saying_why():
    class M(nn.Module):
        def forward(self, log_probs, targets):
            return F.ctc_loss(log_probs, targets, torch.tensor([4, 4]), torch.tensor([2, 2]))

    log_probs = torch.randn(4, 2, 5).log_softmax(2)
    with pytest.raises(sim.UnsupportedOpError, match=r"padded to \(batch, max target length\)"):
        poptorch.inferenceModel(M())(log_probs, torch.tensor([1, 2, 3, 4]))


def test_op_list_names_its_source():
    head = OPS_FILE.read_text().split("\n\n")[0]
    assert "docs/user_guide/supported_ops.rst" in head and re.search(r"c2a8b177", head)


# --- regressions (issue 14's gaps) ----------------------------------------------------------------
def test_linear_on_a_1d_input_is_a_row():
    torch.manual_seed(0)
    fc = nn.Linear(4, 3)
    x = torch.randn(4)
    model = poptorch.inferenceModel(fc)
    torch.testing.assert_close(model(x), fc(x), rtol=0, atol=0)
    mm = next(o for o in model.executable.graph.ops if o.kind == "matmul")
    assert [model.executable.graph.tensors[t].shape for t in mm.inputs] == [(1, 4), (4, 3)]
    assert model.executable.costs[mm.name].flops == 2 * 4 * 3

    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return poptorch.identity_loss(self.fc(x), reduction="sum")

    torch.manual_seed(0)
    net = Loss()
    trained = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    weight = net.fc.weight.detach().clone()
    trained(x)
    torch.testing.assert_close(net.fc.weight.detach(), weight - 0.1 * x.expand(3, 4), rtol=0, atol=1e-7)


class _HalfTutorialCNN(nn.Module):
    """The model of Graphcore's "Half and mixed precision in PopTorch" tutorial, smaller
    (conv, max pool, conv, GroupNorm, two linear layers, log-softmax, NLL loss)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(12 * 3 * 3, 20)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(20, 10)
        self.log_softmax = nn.LogSoftmax(dim=0)
        self.loss = nn.NLLLoss()

    def forward(self, x, labels=None):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        x = self.log_softmax(self.fc2(x))
        if self.training:
            return x, self.loss(x, labels)
        return x


@pytest.mark.parametrize("half", [False, True])
def test_group_norm_tutorial_model_trains_and_infers(half):
    torch.manual_seed(0)
    net = _HalfTutorialCNN()
    x, labels = torch.randn(4, 1, 16, 16), torch.randint(0, 10, (4,))
    if half:
        net, x = net.half(), x.half()
    reference = copy.deepcopy(net)
    opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    out, loss = reference(x, labels)
    loss.backward()
    opt.step()
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01))
    got, got_loss = model(x, labels)
    torch.testing.assert_close(got_loss, loss.detach(), rtol=0, atol=0)
    torch.testing.assert_close(net.norm.weight.detach(), reference.norm.weight.detach(), rtol=0, atol=0)
    g = model.executable.graph
    gn = next(o for o in g.ops if o.kind == "groupnorm")
    assert gn.attrs["groups"] == 3 and g.tensors[gn.outputs[0]].dtype == ("float16" if half else "float32")
    assert model.executable.costs[gn.name].cycles > 0
    assert any(o.kind == "groupnorm_grad" for o in g.ops)
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(poptorch.inferenceModel(net)(x), net(x), rtol=0, atol=0)


@pytest.mark.parametrize("field", ["values", "indices"])
@pytest.mark.parametrize("fn", ["topk", "sort", "max", "min", "median"])
def test_named_results_are_read_by_field(fn, field):
    """``torch.topk(x, k).values`` reads the same output as ``torch.topk(x, k)[0]``: a named
    result (torch.return_types) is a tuple whose fields name its positions."""
    call = {"topk": lambda x: torch.topk(x, 3, dim=1), "sort": lambda x: torch.sort(x, 1)}.get(
        fn, lambda x: getattr(torch, fn)(x, 1))
    position = ("values", "indices").index(field)

    class ByField(nn.Module):
        def forward(self, x):
            return getattr(call(x), field)

    class ByIndex(nn.Module):
        def forward(self, x):
            return call(x)[position]

    x = torch.randn(4, 5)
    by_field, by_index = poptorch.inferenceModel(ByField()), poptorch.inferenceModel(ByIndex())
    # indices come back as int32, as from PopTorch (no int64 on the IPU)
    torch.testing.assert_close(by_field(x), getattr(call(x), field), rtol=0, atol=0, check_dtype=False)
    by_index(x)
    assert _forward_cycles(by_field) == _forward_cycles(by_index) > 0


def _one_sgd_step_as_torch(make, *xs):
    """Train ``make()`` one SGD step with sim.poptorch and with torch: same loss, same weights."""
    torch.manual_seed(0)
    net, reference = make(), make()
    reference.load_state_dict(net.state_dict())
    torch_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    expected = reference(*xs)
    expected.backward()
    torch_opt.step()
    trained = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    torch.testing.assert_close(trained(*xs), expected.detach(), rtol=1e-6, atol=1e-6)
    for p, q in zip(net.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-6)
    return trained.executable.graph


class _TwoHeads(nn.Module):
    def __init__(self, combine):
        super().__init__()
        self.fc, self.nsp, self.combine = nn.Linear(8, 4), nn.Linear(8, 2), combine

    def forward(self, x, y, z):
        return self.combine(self, x, y, z)


@pytest.mark.parametrize("combine, grads", [
    (lambda m, x, y, z: poptorch.identity_loss(F.cross_entropy(m.fc(x), y) + F.cross_entropy(m.nsp(x), z), "none"),
     ["softmax_cross_entropy_grad", "softmax_cross_entropy_grad"]),
    (lambda m, x, y, z: poptorch.identity_loss(F.cross_entropy(m.fc(x), y, reduction="none"), "mean"),
     ["reduce_mean_grad", "softmax_cross_entropy_grad"]),
    (lambda m, x, y, z: poptorch.identity_loss(F.cross_entropy(m.fc(x), y) / 4.0, "none"),
     ["div", "softmax_cross_entropy_grad"]),  # PopART's DivArg0Grad: dy divided by the constant
    (lambda m, x, y, z: poptorch.identity_loss(F.mse_loss(m.fc(x)[:, :2], m.nsp(x)), "none"),
     ["mse_loss_grad", "scale"]),
], ids=["sum_of_losses", "mean_of_per_sample_loss", "scaled_loss", "mse_target_with_gradient"])
def test_a_loss_built_from_losses_trains_as_torch(combine, grads):
    """identity_loss marks any expression as the loss (PopTorch): a sum of losses, a scaled
    loss, a re-reduced per-sample loss, an MSE whose target has a gradient. The backward pass
    starts from a constant seed (or the loss op's own fused gradient) and runs through them."""
    g = torch.Generator().manual_seed(1)
    x, y, z = torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g), torch.randint(0, 2, (8,), generator=g)
    graph = _one_sgd_step_as_torch(lambda: _TwoHeads(combine), x, y, z)
    kinds = [o.kind for o in graph.ops if o.pass_ == "backward" and o.kind in ("softmax_cross_entropy_grad",
                                                                                "mse_loss_grad", "reduce_mean_grad",
                                                                                "scale", "div")]
    assert sorted(kinds) == sorted(grads)


def test_an_unmarked_combined_loss_is_named_in_the_notes():
    """A loss changed by further ops without identity_loss (which PopTorch requires) trains from
    the loss op, and the run's notes say so; a plain torch loss gets no such note."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x, y):
            return F.cross_entropy(self.fc(x), y) * 2

    class Plain(Scaled):
        def forward(self, x, y):
            return F.cross_entropy(self.fc(x), y)

    x, y = torch.randn(8, 8), torch.randint(0, 4, (8,))
    notes = {}
    for net in (Scaled(), Plain()):
        model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
        model(x, y)
        notes[type(net).__name__] = [n for n in model.executable.notes if "identity_loss" in n]
    assert len(notes["Scaled"]) == 1 and "backward starts from the last one" in notes["Scaled"][0]
    assert notes["Plain"] == []


def test_baddbmm_normalize_and_masked_attention_run_as_torch():
    """baddbmm (nn.MultiheadAttention with a mask uses it), F.normalize (a norm, a floor at eps
    and a division, as PopTorch lowers it) give torch's results and train."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

        def forward(self, x, mask):
            a = self.attn(x, x, x, key_padding_mask=mask)[0]
            b = torch.baddbmm(a, a, a.transpose(1, 2) @ a, beta=0.5, alpha=2.0)
            return F.normalize(b, dim=-1)

    g = torch.Generator().manual_seed(2)
    x, mask = torch.randn(2, 6, 16, generator=g), torch.zeros(2, 6, dtype=torch.bool)
    mask[:, -2:] = True
    torch.manual_seed(0)
    net = Net().eval()
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(x, mask), net(x, mask), rtol=1e-4, atol=1e-5)
    kinds = [o.kind for o in model.executable.graph.ops]
    assert {"scale", "maximum", "div", "sqrt"} <= set(kinds) and _forward_cycles(model) > 0

    class Loss(Net):
        def forward(self, x, mask):
            return poptorch.identity_loss(super().forward(x, mask).sum(), "none")

    _one_sgd_step_as_torch(Loss, x, mask)


@pytest.mark.parametrize("equation, shapes, matmuls", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], 1),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)], 1),
    ("ij,jk", [(3, 4), (4, 5)], 1),          # implicit output: ik
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)], 2),
    ("ijk,k->i", [(2, 3, 4), (4,)], 1),       # j summed in its operand first
    ("...ij,jk", [(2, 2, 3, 4), (4, 5)], 1),
    ("ij->ji", [(3, 4)], 0),
    ("i,j->ij", [(6,), (4,)], 0),             # nothing contracted: torch's sumproduct_pair multiplies
])
def test_einsum_runs_as_torch_and_trains(equation, shapes, matmuls):
    """einsum lowers as PopTorch's EinsumOp: one batched matmul per pair of operands."""
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(*s, generator=g) for s in shapes]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(*shapes[-1], generator=g))

        def forward(self, *xs):
            return torch.einsum(equation, *xs, self.w)

    torch.manual_seed(0)
    net = Net()
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(*xs[:-1]), net(*xs[:-1]), rtol=1e-5, atol=1e-5)
    assert sum(o.kind == "matmul" for o in model.executable.graph.ops) == matmuls

    class Loss(Net):
        def forward(self, *xs):
            return poptorch.identity_loss(super().forward(*xs), "sum")

    _one_sgd_step_as_torch(Loss, *xs[:-1])


@pytest.mark.parametrize("fn, kinds", [
    (lambda a, b: F.cosine_similarity(a, b, dim=-1), {"mul", "reduce_sum", "sqrt", "maximum", "div"}),
    (lambda a, b: torch.flip(a, [0, 1]) + b, {"copy"}),
    (lambda a, b: F.hardswish(a * 4) + F.hardsigmoid(b * 4), {"map"}),
    (lambda a, b: F.pairwise_distance(a[:, None], b, eps=0), {"sub", "add", "reduce_sum", "sqrt"}),
    (lambda a, b: F.pairwise_distance(a, b, p=1, keepdim=True), {"sub", "add", "abs", "reduce_sum"}),
], ids=["cosine_similarity", "flip", "hardswish_hardsigmoid", "pairwise_distance", "pairwise_distance_p1"])
def test_lowered_like_poptorch_run_as_torch_and_train(fn, kinds):
    """cosine_similarity and pairwise_distance (DistanceOps.cpp; SchNet's KNN graph), flip (PopART's Reverse: a copy of a reversed view),
    hardswish and hardsigmoid (ActivationOps.cpp: a where of max, abs, compare and mul; PopART's
    HardSigmoid)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, a, b):
            return fn(self.fc(a), b)

    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    torch.manual_seed(0)
    net = Net()
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(a, b), net(a, b), rtol=1e-5, atol=1e-5)
    assert kinds <= {o.kind for o in model.executable.graph.ops}

    class Loss(Net):
        def forward(self, a, b):
            return poptorch.identity_loss(super().forward(a, b), "sum")

    _one_sgd_step_as_torch(Loss, a, b)


def test_triangle_of_a_computed_tensor_is_refused_as_poptorch_refuses_it():
    class Causal(nn.Module):
        def forward(self, x):
            return torch.tril(x) + torch.ones(4, 4).triu_(1)  # the constant mask folds

    with pytest.raises(sim.UnsupportedOpError, match="only supported within constant expressions"):
        poptorch.inferenceModel(Causal())(torch.randn(4, 4))


def test_einsum_with_a_repeated_label_is_refused():
    class Diagonal(nn.Module):
        def forward(self, x):
            return torch.einsum("ii->i", x)

    with pytest.raises(sim.UnsupportedOpError, match="repeated label"):
        poptorch.inferenceModel(Diagonal())(torch.randn(3, 3))


def test_conv1d_is_priced_with_its_multiply_adds():
    torch.manual_seed(0)
    conv = nn.Conv1d(4, 6, 3, stride=2, padding=1)
    x = torch.randn(2, 4, 9)
    model = poptorch.inferenceModel(conv)
    torch.testing.assert_close(model(x), conv(x), rtol=0, atol=0)
    op = next(o for o in model.executable.graph.ops if o.kind == "conv2d")
    positions = 2 * 5  # batch x output length
    assert model.executable.costs[op.name].flops == 2 * positions * 4 * 3 * 6
    # a convolution of height 1 with a 1 x 3 kernel, whose planner weighs expandDims as poplin's does
    assert (op.attrs["kernel"], op.attrs["stride"], op.attrs["padding"]) == ([1, 3], 2, [0, 1])
    assert not any("Conv1d" in n for n in model.executable.notes)


def test_depthwise_conv1d_is_the_depthwise_conv2d_of_height_one():
    """Conformer's depthwise convolution: poplin's 1xN SLIC vertex, as the 2-D depthwise rule prices it."""
    conv = nn.Conv1d(256, 256, 15, padding=7, groups=256, bias=False).half()
    opts = poptorch.Options().enableSyntheticData(True)
    model = poptorch.inferenceModel(conv, opts)
    model(torch.zeros(4, 256, 200, dtype=torch.half))
    (op,) = [o for o in model.executable.graph.ops if o.kind == "conv2d"]
    b = sim.GraphBuilder("t", "float16")
    x = b.reshape(b.input("x", (4, 256, 200)), (4, 256, 1, 200))  # a view, as the capture's
    b.output(b.conv2d(x, 256, (1, 15), 1, (0, 7), groups=256))
    ref = sim.compile(b.graph, model.executable.system, opts)
    (ref_op,) = [o for o in ref.graph.ops if o.kind == "conv2d"]
    assert model.executable.costs[op.name].cycles == ref.costs[ref_op.name].cycles


class _ConvFn(nn.Module):
    """F.conv2d with a bias: the functional path (sim/poptorch/_mapping.py)."""

    def __init__(self):
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(6, 4, 3, 3)), nn.Parameter(torch.randn(6))

    def forward(self, x):
        return F.conv2d(x, self.w, self.b)


@pytest.mark.parametrize("layer, shape", [
    (lambda: nn.Conv2d(4, 6, 3), (2, 4, 8, 9)), (lambda: nn.Conv1d(4, 6, 3), (2, 4, 9)),
    (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2), (2, 4, 5, 7)), (lambda: nn.Conv3d(4, 6, 2), (2, 4, 3, 4, 5)),
    (_ConvFn, (2, 4, 8, 9))], ids=["Conv2d", "Conv1d", "ConvTranspose2d", "Conv3d", "F.conv2d"])
def test_convolution_bias_is_added_per_channel(layer, shape):
    """A (C,) bias broadcast over the batch and the field, as the layer adds it: priced as the zoo's
    (1, C, 1, 1) bias, not as a (C,) operand broadcast against the last axis."""
    torch.manual_seed(0)
    conv = layer()

    class Summed(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv

        def forward(self, x):
            return poptorch.identity_loss(self.conv(x), "sum")

    net = Summed()
    model = poptorch.trainingModel(net, poptorch.Options(), torch.optim.SGD(net.parameters(), lr=0.1))
    model.compile(torch.randn(*shape))
    g = model.executable.graph
    (add,) = [op for op in g.ops if op.kind == "add" and op.pass_ == "forward"]
    bias = g.tensors[add.inputs[1]].shape
    assert bias == (1, 6) + (1,) * (len(g.tensors[add.inputs[0]].shape) - 2)


@pytest.mark.parametrize("shape", [(2, 6, 5, 4), (2, 6, 7)], ids=["NCHW", "NCL"])
def test_prelu_weight_is_per_channel(shape):
    """torch's PReLU(C) weight scales dim 1: viewed as (1, C, 1, ...), so its gradient reduces over the
    batch and the field (a bare (C,) would broadcast against the last axis); PReLU() keeps one scalar."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.PReLU(6), nn.PReLU())
    model = poptorch.trainingModel(_SumLoss(net), poptorch.Options(), torch.optim.SGD(net.parameters(), lr=0.1))
    model.compile(torch.randn(*shape))
    g = model.executable.graph
    weights = [g.tensors[op.inputs[1]].shape for op in g.ops if op.kind == "map" and op.pass_ == "forward"]
    assert weights == [(1, 6) + (1,) * (len(shape) - 2), (1,)]
    grads = [g.tensors[op.outputs[0]].shape for op in g.ops if op.kind == "map" and op.name.endswith("grad1")]
    assert sorted(grads) == sorted([(1, 6) + (1,) * (len(shape) - 2), (1,)])


class _SumLoss(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return poptorch.identity_loss(self.body(x), "sum")


def test_float32_input_into_a_half_model_upcasts_as_poptorch_3():
    torch.manual_seed(0)
    fc = nn.Linear(4, 3).half()
    x = torch.randn(2, 4)
    with pytest.raises(RuntimeError):  # plain torch refuses the mix
        fc(x)
    model = poptorch.inferenceModel(fc)
    out = model(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, F.linear(x, fc.weight.float(), fc.bias.float()), rtol=0, atol=0)
    casts = [o for o in model.executable.graph.ops if o.kind == "cast"]
    assert {o.attrs["to"] for o in casts} == {"float32"} and len(casts) == 2  # weight and bias

    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3).half()

        def forward(self, x):
            return poptorch.identity_loss(self.fc(x), reduction="mean")

    torch.manual_seed(0)
    net = Loss()
    before = net.fc.weight.detach().clone()
    trained = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.5))
    loss = trained(x)
    assert loss.dtype == torch.float32 and net.fc.weight.dtype == torch.float16
    expected = (before.float() - 0.5 * x.mean(0).expand(3, 4) / 3).half()
    torch.testing.assert_close(net.fc.weight.detach(), expected, rtol=0, atol=1e-3)


def test_half_input_into_a_float_model_upcasts_the_input():
    torch.manual_seed(0)
    fc = nn.Linear(4, 3)
    x = torch.randn(2, 4).half()
    model = poptorch.inferenceModel(fc)
    torch.testing.assert_close(model(x), fc(x.float()), rtol=0, atol=0)
    cast = next(o for o in model.executable.graph.ops if o.kind == "cast")
    assert model.executable.graph.tensors[cast.inputs[0]].role == "input"


def test_random_factories_are_drawn_at_every_run_not_baked_in():
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.randn(3, 5)

    model = poptorch.inferenceModel(Noisy())
    x = torch.zeros(3, 5)
    first, second = model(x), model(x)
    assert not torch.equal(first, second)
    gen = next(o for o in model.executable.graph.ops if o.kind == "random_normal")
    assert gen.inputs == [] and model.executable.costs[gen.name].cycles > 0


def test_nearest_upsample_gradient_sums_each_inputs_copies():
    """PopART's ResizeOpx: a copy of the input (input-sized) and the output a view repeating it; ResizeGradOpx: a copy
    of the output gradient, then per scaled dimension the sum of each input element's copies (a reduction over the
    scale factor here), not a free copy, and nothing more for the forward's copy."""
    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.up = nn.Conv2d(4, 4, 1), nn.Upsample(scale_factor=(2, 3))

        def forward(self, x):
            return poptorch.identity_loss(self.up(self.conv(x)), reduction="mean")

    torch.manual_seed(0)
    net, ref = Up(), Up()
    ref.load_state_dict(net.state_dict())
    x = torch.randn(2, 4, 5, 6)
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    loss = model(x)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    expected = ref(x)
    expected.backward()
    opt.step()
    torch.testing.assert_close(loss, expected.detach(), rtol=0, atol=0)
    torch.testing.assert_close(net.conv.weight.detach(), ref.conv.weight.detach(), rtol=0, atol=0)
    g = model.executable.graph
    grads = [(o.kind, g.tensors[o.outputs[0]].shape) for o in g.ops if o.pass_ == "backward" and "grad_" in o.name
             and o.kind in ("copy", "reduce_sum")]
    assert grads == [("copy", (2, 4, 10, 18)), ("reduce_sum", (2, 4, 5, 18)), ("reduce_sum", (2, 4, 5, 6))]
    forward = [(o.kind, o.attrs.get("op"), g.tensors[o.outputs[0]].shape) for o in g.ops
               if o.pass_ == "forward" and o.kind in ("copy", "reshape")]
    assert forward[-2:] == [("copy", "upsample_input", (2, 4, 5, 6)), ("reshape", "upsample_nearest", (2, 4, 10, 18))]
    assert [o.kind for o in g.ops if o.pass_ == "backward" and o.kind == "copy"] == ["copy"]


def test_embedding_bag_is_one_gather_and_reduction_per_bag():
    """PopTorch's embeddingBagHandler: per bag (cut at the constant offsets) a slice of the indices,
    a gather (times its per-sample weights) and a reduction, then the bags concatenated."""
    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(20, 4, mode="sum")
            self.register_buffer("offsets", torch.tensor([0, 2, 2, 5]))

        def forward(self, ids, weights):
            return self.bag(ids, self.offsets, per_sample_weights=weights)

    torch.manual_seed(0)
    net = Bags().eval()
    ids, w = torch.randint(0, 20, (7,)), torch.rand(7)
    expected = net(ids, w)
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(ids, w), expected, rtol=0, atol=0)
    g = model.executable.graph
    gathers = [g.tensors[o.outputs[0]].shape for o in g.ops if o.kind == "gather"]
    assert gathers == [(2, 4), (3, 4), (2, 4)]  # bags [0, 2), [2, 2) empty, [2, 5), [5, 7)
    assert sum(o.kind == "mul" for o in g.ops) == 3 and sum(o.kind == "reduce_sum" for o in g.ops) == 3


def test_embedding_bag_offsets_from_the_host_are_refused_as_poptorch_refuses_them():
    net = nn.EmbeddingBag(20, 4, mode="mean")
    with pytest.raises(Exception, match="offsets tensor must be a constant"):
        poptorch.inferenceModel(net)(torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2]))


@pytest.mark.parametrize("layer", [nn.AdaptiveMaxPool1d(2), nn.AdaptiveMaxPool2d(2), nn.AdaptiveMaxPool3d(2)])
def test_adaptive_max_pooling_is_refused_as_poptorch_cannot_run_it(layer):
    """PopTorch registers adaptive average pooling only (PoolingOps.cpp; AdaptiveMaxPool is T30564
    in its tests), so a model using adaptive max pooling does not compile there."""
    x = torch.randn(2, 3, *([4] * (int(type(layer).__name__[-2]))))
    with pytest.raises(Exception, match="no handler for adaptive max pooling"):
        poptorch.inferenceModel(nn.Sequential(layer))(x)

    class Functional(nn.Module):
        def forward(self, t):
            return getattr(F, f"adaptive_max_pool{type(layer).__name__[-2]}d")(t, 2)

    with pytest.raises(Exception, match="no handler for adaptive max pooling"):
        poptorch.inferenceModel(Functional())(x)


class _CausalMask(nn.Module):
    """GPT-2's ``attn_weights -= 1e4 * (1 - causal_mask)``: half scores, a uint8 buffer made a float32
    operand, subtracted in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(8, 8, dtype=torch.uint8)).view(1, 8, 8))
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        w = self.lin(x)
        n = x.size(-2)
        w -= 1e4 * (1 - self.bias[:, :n, :n])
        return w.softmax(-1)


def test_in_place_op_on_a_half_tensor_with_a_float_constant_keeps_half():
    """The in-place op keeps its tensor's dtype, as torch and PopTorch do. torch.fx records the augmented
    assignment as an out-of-place ``sub`` (another dtype), so the capture takes torch.export, where the
    op is ATen's ``sub_.Tensor``, which the implicit casts must see as in place. The mask is a buffer: a
    variable on the IPU (PopTorch turns PopART's constantWeights off), so ``1e4 * (1 - mask)`` and its
    cast to half run there every call, folded into no constant."""
    net = _CausalMask().half()
    x = torch.randn(2, 8, 8).half()
    model = poptorch.inferenceModel(net)
    out = model(x)
    assert out.dtype == torch.float16 and "graph captured with torch.export" in model.executable.notes
    torch.testing.assert_close(out, net(x), rtol=1e-3, atol=1e-3)
    g = model.executable.graph
    (cast,) = [op for op in g.ops if op.kind == "cast"]
    assert g.tensors[cast.outputs[0]].dtype == "float16"
    one_minus_mask, scores_sub = [op for op in g.ops if op.kind == "sub"]
    assert [g.tensors[t].dtype for t in scores_sub.inputs] == ["float16", "float16"]


def test_integer_cumsum_runs_in_float32_as_poptorch_lowers_it():
    """FastPitch's length regulator takes the cumsum of integer durations: PopTorch's cumsumHandler
    casts to float32 for its convolution of ones and back (an integer matmul has no poplin plan)."""
    class Regulate(nn.Module):
        def forward(self, durations, x):
            return x * durations.long().cumsum(1).float()

    model = poptorch.inferenceModel(Regulate())
    d, x = torch.randint(1, 4, (2, 16)), torch.randn(2, 16)
    torch.testing.assert_close(model(d, x), x * d.cumsum(1).float())
    g = model.executable.graph
    (mm,) = [op for op in g.ops if op.kind == "matmul"]
    assert {g.tensors[t].dtype for t in mm.inputs} == {"float32"}
    assert [op.attrs["to"] for op in g.ops if op.kind == "cast"][:2] == ["float32", "int32"]


def test_an_unreduced_loss_is_its_element_wise_terms():
    """F.mse_loss(reduction="none"), masked and reduced by the model (FastPitch's mel loss): PopTorch
    lowers it to its element-wise terms; not a loss op, not the model's loss."""
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x, y, mask):
            e = F.mse_loss(self.lin(x), y, reduction="none")
            return poptorch.identity_loss((e * mask).sum() / mask.sum(), reduction="mean")

    net = Masked()
    model = poptorch.trainingModel(net, poptorch.Options(), poptorch.optim.SGD(net.parameters(), lr=0.1))
    model.compile(torch.randn(2, 16, 8), torch.randn(2, 16, 8), torch.ones(2, 16, 8))
    g = model.executable.graph
    assert not [op for op in g.ops if op.kind == "mse_loss"]
    (terms,) = [op for op in g.ops if op.name.endswith("unreduced_loss")]
    assert terms.kind == "map" and g.tensors[terms.outputs[0]].shape == (2, 16, 8)


@pytest.mark.parametrize("how", ["repeat", "expand", "broadcast_to"])
def test_the_gradient_of_a_repeated_or_expanded_weight_sums_the_copies(how):
    """MAE's mask token repeated over the patches and its class token expanded over the batch: the
    gradient sums the copies back into the weight (PopART's TileGradOp, and ExpandGradOp's ReduceSum),
    the same work as a broadcast add's gradient. ``torch.broadcast_to`` (ATen's composite of expand, which
    torch's F.multi_head_attention_forward calls, as WavLM's attention does) is the same expand."""
    class Token(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Parameter(torch.zeros(1, 1, 64))

        def forward(self, x):
            if how == "repeat":
                t = self.tok.repeat(x.shape[0], 20, 1)
            else:
                t = self.tok.expand(x.shape[0], 20, -1) if how == "expand" else torch.broadcast_to(self.tok, x.shape)
            return poptorch.identity_loss((x + t).pow(2).sum(), "none")

    net = Token()
    model = poptorch.trainingModel(net, poptorch.Options(), torch.optim.SGD(net.parameters(), lr=0.1))
    model.compile(torch.randn(6, 20, 64))
    g = model.executable.graph
    sums = [op for op in g.ops if op.pass_ == "backward" and op.kind == "reduce_sum"
            and g.tensors[op.inputs[0]].shape == (6, 20, 64) and g.tensors[op.outputs[0]].shape == (1, 1, 64)]
    assert sums


def test_pairwise_distance_reduces_the_last_dimension_of_the_broadcast_pairs():
    """SchNet's KNN graph: F.pairwise_distance(pos[:, None], pos) is every pair's distance, (N, N)."""
    class Net(nn.Module):
        def forward(self, pos):
            return F.pairwise_distance(pos[:, None], pos, eps=0)

    pos = torch.randn(6, 3)
    model = poptorch.inferenceModel(Net())
    torch.testing.assert_close(model(pos), torch.cdist(pos, pos), rtol=1e-5, atol=1e-5)
    ops = model.executable.graph.ops
    g = model.executable.graph
    (reduce,) = [o for o in ops if o.kind == "reduce_sum"]
    assert g.tensors[reduce.inputs[0]].shape == (6, 6, 3)
    assert g.tensors[reduce.outputs[0]].shape == (6, 6)
    (diff,) = [o for o in ops if o.kind == "sub"]
    assert g.tensors[diff.outputs[0]].shape == (6, 6, 3)


@pytest.mark.parametrize("fn, axis", [
    (torch.vstack, 0), (torch.row_stack, 0), (torch.hstack, 1), (torch.column_stack, 1), (torch.dstack, 2),
], ids=["vstack", "row_stack", "hstack", "column_stack", "dstack"])
def test_stacking_helpers_are_one_concat(fn, axis):
    """vstack & co. (SchNet's KNN graph stacks its edge index with vstack): one concat along the
    helper's axis of the output; they train as a concat does."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, a, b, c):
            return fn([self.fc(a), b]) if c is None else fn([self.fc(a)[0], c])

    a, b = torch.randn(4, 6), torch.randn(4, 6)
    torch.manual_seed(0)
    net = Net()
    model = poptorch.inferenceModel(net)
    for c in (None, torch.randn(6)):  # 2-D inputs, then 1-D ones (viewed as the helper views them)
        model = poptorch.inferenceModel(net)
        torch.testing.assert_close(model(a, b, c), net(a, b, c))
        (cat,) = [o for o in model.executable.graph.ops if o.kind == "concat"]
        assert cat.attrs["axis"] == (0 if fn is torch.hstack and c is not None else axis)
        assert model.executable.graph.tensors[cat.outputs[0]].shape == tuple(net(a, b, c).shape)

    class Loss(Net):
        def forward(self, a, b, c):
            return poptorch.identity_loss(super().forward(a, b, c), "sum")

    _one_sgd_step_as_torch(Loss, a, b, None)
    _one_sgd_step_as_torch(Loss, a, b, torch.randn(6))


def test_index_select_along_a_later_axis_is_priced_as_that_axis_rolled_to_the_front():
    """NBFNet's index_select(x, -2, idx) of a (batch, nodes, features) tensor: PopART rolls the gather
    axis to the front and flattens the rest (popx/op/gatherx.cpp), a lookup into a nodes-row table, not
    into a batch-row table of whole (nodes x features) rows; its gradient likewise."""
    from sim.cost.rules import op_cost

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32)

        def forward(self, x, idx):
            return poptorch.identity_loss(self.fc(x).index_select(-2, idx), "sum")

    x, idx = torch.randn(4, 1595, 32), torch.randint(0, 1595, (8490,))
    model = poptorch.trainingModel(Net(), optimizer=torch.optim.SGD(Net().parameters(), lr=0.1))
    model.compile(x, idx)
    exe = model.executable
    g, ipu, tiles = exe.graph, exe.system.ipu, exe.tiles
    (fwd,) = [o for o in g.ops if o.kind == "gather"]
    (bwd,) = [o for o in g.ops if o.kind == "embedding_grad"]
    rolled = poptorch.inferenceModel(nn.Embedding(1595, 4 * 32))  # the same lookup on the rolled table
    rolled.compile(idx)
    (ref,) = [o for o in rolled.executable.graph.ops if o.kind == "gather"]
    want = op_cost(ref, rolled.executable.graph, ipu, tiles).compute_cycles
    assert op_cost(fwd, g, ipu, tiles).compute_cycles == want
    assert op_cost(bwd, g, ipu, tiles).temp_bytes_per_tile < ipu.sram_bytes_per_tile


class _StateOps(nn.Module):
    """Work on a buffer, a frozen parameter and a plain tensor attribute, each then added to the input."""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.ones(64, 64))
        self.frozen = nn.Parameter(torch.ones(64, 64), requires_grad=False)
        self.plain = torch.ones(64, 64)  # neither: a constant of the traced graph

    def forward(self, x):
        return x + torch.exp(self.buf) + torch.exp(self.frozen) + torch.exp(self.plain)


def test_buffers_and_frozen_parameters_are_variables_not_folded():
    """PopTorch uploads a model's parameters and buffers as variables and sets PopART's constantWeights
    off (popart_compiler Compiler.cpp), so what is computed from a buffer or a frozen parameter runs on
    the IPU every call; only tensors that are neither (the plain attribute) fold into constants."""
    model = poptorch.inferenceModel(_StateOps())
    model(torch.randn(64, 64))
    g = model.executable.graph
    exps = [op for op in g.ops if op.kind == "exp"]
    assert len(exps) == 2  # the buffer's and the frozen parameter's; the plain tensor's is folded
    assert {g.tensors[op.inputs[0]].role for op in exps} == {"constant"}  # non-trainable, always live


def test_a_division_by_a_number_stays_a_division():
    """PopTorch lowers ``x / c`` to PopART's Div (no pattern makes it a multiply): popops divides by the
    one-element constant (BroadcastScalar1D DIVIDE, 4 cycles a half), where ``x * (1 / c)``, Graphcore's
    "reciprocal multiply for speed" in its PyTorch BERT, is a scale."""
    class Net(nn.Module):
        def __init__(self, divide):
            super().__init__()
            self.divide = divide

        def forward(self, x):
            return x / 8.0 if self.divide else x * (1 / 8.0)

    x = torch.randn(4, 64, 64).half()
    plans = {}
    for divide in (True, False):
        model = poptorch.inferenceModel(Net(divide))
        torch.testing.assert_close(model(x), x / 8.0)
        ex = model.executable
        plans[divide] = [(o.kind, ex.costs[o.name].plan) for o in ex.graph.ops if o.kind in ("div", "scale")]
    (kind, plan), = plans[True]
    assert kind == "div" and plan.endswith("broadcast_scalar_div")
    assert [k for k, _ in plans[False]] == ["scale"]


class _RMSNormNet(nn.Module):
    """A linear layer and an RMSNorm: torch's module, or the same norm spelt out as a model written for
    PopTorch (torch 2.0, which has no RMSNorm) spells it."""

    def __init__(self, by_hand: bool):
        super().__init__()
        self.fc, self.norm, self.by_hand = nn.Linear(16, 16), nn.RMSNorm(16, eps=1e-6), by_hand

    def forward(self, x):
        h = self.fc(x)
        if not self.by_hand:
            return self.norm(h)
        up = h.float()
        y = up * torch.rsqrt(up.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm.weight
        return y.to(h.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rms_norm_runs_as_torch_and_costs_its_decomposition(dtype):
    """nn.RMSNorm (F.rms_norm) is priced as the ops ATen's composite rms_norm is made of, the ones a
    hand-written RMSNorm gives: the same kinds and the same cycles; it returns torch's values and trains
    one SGD step as torch does."""
    x = torch.randn(4, 8, 16, generator=torch.Generator().manual_seed(3)).to(dtype)
    runs = {}
    for by_hand in (False, True):
        torch.manual_seed(0)
        net = _RMSNormNet(by_hand).to(dtype).eval()
        model = poptorch.inferenceModel(net)
        torch.testing.assert_close(model(x), net(x), rtol=0, atol=0)
        runs[by_hand] = model
    kinds = [[o.kind for o in m.executable.graph.ops] for m in runs.values()]
    assert kinds[0] == kinds[1]
    assert {"pow", "mul", "reduce_mean", "add", "sqrt", "div"} <= set(kinds[0])
    assert ("cast" in kinds[0]) == (dtype == torch.float16)
    assert runs[False].simulation.cycle_count == runs[True].simulation.cycle_count > 0

    if dtype == torch.float32:
        class Loss(_RMSNormNet):
            def __init__(self):
                super().__init__(by_hand=False)

            def forward(self, x):
                return poptorch.identity_loss(super().forward(x).square(), "mean")

        graph = _one_sgd_step_as_torch(Loss, x)
        assert any(o.pass_ == "backward" and o.name.startswith("norm/") for o in graph.ops)


class _Power(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.exponent = exponent

    def forward(self, x):
        return x ** self.exponent


class _Square(nn.Module):
    def forward(self, x):
        return x * x


def test_every_power_runs_popops_power_as_poptorch_lowers_it():
    """PopTorch lowers aten::pow to PopART's Pow of a constant exponent tensor, which PopART runs as
    popops::pow: the POWER vertex whatever the exponent (poplibs specialises 2, 0.5, -1 and 1 only for a
    constant written into a map expression). So x ** 2 costs what x ** 3 does, and more than x * x, the
    square it was priced as before 2026-12-06."""
    x = torch.randn(8, 4096)
    cycles = {}
    for exponent in (2, 3, 0.5, -1, 1):
        model = poptorch.inferenceModel(_Power(exponent))
        model(x)
        kinds = [op.kind for op in model.simulation.executable.graph.ops]
        assert kinds == ["pow"], (exponent, kinds)
        cycles[exponent] = model.simulation.cycle_count
    assert len(set(cycles.values())) == 1
    square = poptorch.inferenceModel(_Square())
    square(x)
    assert square.simulation.cycle_count < cycles[2]


class _IsInf(nn.Module):
    def forward(self, x):
        return torch.isinf(x)


def test_isinf_is_atens_composite_abs_equal_to_infinity():
    """torch.isinf is not on PopTorch's list and has no handler there; its ATen composite, abs(x) == inf, runs
    op by op through PopTorch's dispatcher, and so here: an abs and a compare, torch's values."""
    x = torch.tensor([1.0, float("inf"), -float("inf"), float("nan"), 3.0]).half()
    model = poptorch.inferenceModel(_IsInf())
    assert torch.equal(model(x), torch.isinf(x))
    assert [op.kind for op in model.simulation.executable.graph.ops] == ["abs", "compare"]


class _Inverses(nn.Module):
    def forward(self, x):
        return torch.rsqrt(x) + torch.reciprocal(x)


def test_rsqrt_and_reciprocal_run_as_poptorch_lowers_them():
    """PopTorch's rsqrtHandler is reciprocal(sqrt(x)), and PopART's ReciprocalOpx a popops DIVIDE of a constant
    one by x: rsqrt is a sqrt and a div, reciprocal a div, no popops RSQRT or INVERSE; torch's values."""
    x = torch.rand(4, 8) + 0.5
    net = _Inverses()
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(x), net(x))
    assert [op.kind for op in model.simulation.executable.graph.ops] == ["sqrt", "div", "div", "add"]


@pytest.mark.parametrize("fn, kinds", [
    (lambda x: F.celu(x, 0.7), ["div", "expm1", "mul", "maximum", "minimum", "add"]),
    (lambda x: F.hardshrink(x, 0.3), ["abs", "abs", "compare", "select"]),
    (lambda x: F.softshrink(x, 0.3), ["scale", "compare", "add", "compare", "sub", "select", "select"]),
    (lambda x: F.threshold(x, 0.1, 2.0), ["compare", "select"]),
    (lambda x: torch.log10(x + 2), ["add", "log", "div"]),
    (lambda x: torch.erfc(x), ["erf", "sub"]),
    (lambda x: torch.tan(x), ["sin", "cos", "div"]),
    (lambda x: torch.acosh(x + 2), ["add", "pow", "sub", "sqrt", "add", "log"]),
    (lambda x: torch.cosh(x), ["exp", "scale", "exp", "add", "scale"]),
    (lambda x: (x >= 0.2) * x, ["compare", "compare", "logical", "mul"]),
    (lambda x: (x != 0.2) * x, ["compare", "logical_not", "mul"]),
    (lambda x: F.hardswish(x * 4), ["scale", "maximum", "abs", "compare", "add", "mul", "div", "select"]),
    (lambda x: F.mish(x), ["scale", "sigmoid", "mul", "sub", "add", "div", "mul"]),
    (lambda x: torch.frac(x * 3), ["scale", "cast", "cast", "sub"]),
    (lambda x: torch.addcmul(x, x, x, value=0.5), ["mul", "scale", "add"]),
], ids=["celu", "hardshrink", "softshrink", "threshold", "log10", "erfc", "tan", "acosh", "cosh", "ge", "ne",
        "hardswish", "mish", "frac", "addcmul"])
def test_functions_poptorch_lowers_to_several_ops_are_several_ops(fn, kinds):
    """PopTorch's handlers (AtenHandlers.gen.cpp, ActivationOps.cpp, ArithmeticOps.cpp) build celu, hardshrink,
    softshrink, threshold, log10, erfc, ge, ne, hardswish, mish, frac (casts to int32 and back) and addcmul out of
    several PopART ops, PopART's ONNX pass rewrites tan and acosh (trig.cpp) and its CoshOpPattern cosh:
    each op its own popops call, not one fused map; torch's values, and they train."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return fn(self.fc(x))

    x = torch.rand(4, 8) - 0.5
    torch.manual_seed(0)
    net = Net()
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(x), net(x), rtol=1e-5, atol=1e-5)
    assert [op.kind for op in model.simulation.executable.graph.ops][2:] == kinds

    class Loss(Net):
        def forward(self, x):
            return poptorch.identity_loss(super().forward(x), "sum")

    _one_sgd_step_as_torch(Loss, x)


@pytest.mark.parametrize("layer", [nn.ELU(0.5), nn.SELU()], ids=["elu", "selu"])
def test_elu_and_selu_are_poparts_selu_map(layer):
    """PopTorch's eluHandler and seluHandler make PopART's Selu, whose SeluOpx maps gamma (max(0, x) + min(0, alpha
    (exp(x) - 1))) in one popops::map."""
    model = poptorch.inferenceModel(layer)
    x = torch.rand(4, 8) - 0.5
    torch.testing.assert_close(model(x), layer(x))
    (op,) = model.simulation.executable.graph.ops
    assert op.attrs["steps"] == ["exp", "sub", "mul", "minimum", "maximum", "add", "mul"]


class _Clamps(nn.Module):
    def forward(self, x):
        return torch.clamp(x, -0.2, 0.3) + F.hardtanh(x) + x.clone()


def test_clamp_is_a_max_then_a_min_hardtanh_a_clip_and_clone_a_view():
    """PopTorch's clampHandler is min(max(x, lo), hi) (PopART's Clip takes no integers), its hardtanhHandler a Clip,
    its cloneHandler an Identity that PopART's PostNRepl removes."""
    x = torch.randn(4, 8)
    model = poptorch.inferenceModel(_Clamps())
    torch.testing.assert_close(model(x), _Clamps()(x))
    assert [op.kind for op in model.simulation.executable.graph.ops] == ["maximum", "minimum", "clamp", "add",
                                                                          "identity", "add"]


class _Bernoulli(nn.Module):
    def forward(self, x):
        return x * x.new_empty((x.shape[0], 1)).bernoulli_(0.8)


def test_bernoulli_is_a_uniform_a_compare_and_a_cast():
    """PopTorch's bernoulliHandler: cast(uniform < p), three PopART ops (no poprand bernoulli)."""
    model = poptorch.inferenceModel(_Bernoulli())
    model(torch.randn(4, 8))
    assert [op.kind for op in model.simulation.executable.graph.ops] == ["random_uniform", "compare", "cast", "mul"]


def test_l1_loss_is_priced_as_poparts_l1_op_not_as_mse():
    """l1LossHandler: sub, then PopART's L1 (an ABSOLUTE map and its scaled reduction); L1GradOpx a SIGNUM and two
    multiplies. No note says it is priced as MSE."""
    from sim.cost.row_ops import L1_GRAD_STEPS, L1_STEPS, loss_steps
    assert loss_steps("mse_loss", {"loss": "l1"}) == L1_STEPS
    assert loss_steps("mse_loss_grad", {"loss": "l1"}) == L1_GRAD_STEPS

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, y):
            out = self.fc(x)
            return out, F.l1_loss(out, y)

    net = Net()
    model = poptorch.trainingModel(net, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
    model(torch.randn(4, 8), torch.randn(4, 8))
    grad = next(op for op in model.simulation.executable.graph.ops if op.kind == "mse_loss_grad")
    assert grad.attrs["loss"] == "l1"
    assert not [n for n in model.simulation.notes if "L1" in n]


@pytest.mark.parametrize("fn, kinds", [
    (lambda x, t: F.binary_cross_entropy(torch.sigmoid(x), t),
     ["sigmoid", "log", "mul", "sub", "sub", "log", "mul", "add", "scale", "reduce_mean"]),
    (lambda x, t: F.smooth_l1_loss(x, t, beta=0.5),
     ["sub", "abs", "compare", "mul", "mul", "div", "sub", "select", "reduce_mean"]),
    (lambda x, t: F.kl_div(x, t, reduction="sum"), ["log", "sub", "mul", "compare", "select", "reduce_sum"]),
], ids=["bce", "smooth_l1", "kl_div"])
def test_element_wise_losses_are_the_ops_poptorchs_handlers_build(fn, kinds):
    """binaryCrossEntropyHandler (-(y log(x) + (1 - y) log(1 - x))), smoothL1LossHandler and klDivHandler build
    their losses out of single PopART ops, each its own popops call, then the IdentityLoss's reduction."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 5)

        def forward(self, x, t):
            return fn(self.fc(x), t)

    x, t = torch.randn(3, 5), torch.rand(3, 5) * 0.9 + 0.05
    torch.manual_seed(0)
    model = poptorch.inferenceModel(Net())
    model(x, t)
    assert [op.kind for op in model.simulation.executable.graph.ops][2:] == kinds


def test_huber_loss_is_refused_as_poptorch_has_no_handler():
    class Net(nn.Module):
        def forward(self, x, t):
            return F.huber_loss(x, t)

    with pytest.raises(sim.UnsupportedOpError, match="no handler for aten::huber_loss"):
        poptorch.inferenceModel(Net())(torch.randn(3, 5), torch.randn(3, 5))


@pytest.mark.parametrize("call, instead", [
    (torch.fmax, r"use torch\.maximum"), (torch.fmin, r"use torch\.minimum"),
    (torch.logical_xor, r"use a != b on booleans, or torch\.bitwise_xor")])
def test_kernels_poptorch_has_no_handler_for_are_refused(call, instead):
    """fmax, fmin and logical_xor are ATen kernels, not composites, and PopTorch registers no handler for them:
    its compiler stops at them ("Unsupported ops found in compiled model")."""
    class Net(nn.Module):
        def forward(self, x, t):
            return call(x, t)

    with pytest.raises(sim.UnsupportedOpError, match=r"no handler for aten::(fmax|fmin|logical_xor), so its "
                                                     r"compiler stops with \"Unsupported ops found in compiled "
                                                     r"model\"; " + instead):
        poptorch.inferenceModel(Net())(torch.randn(3, 5), torch.randn(3, 5))


def test_a_segmentation_cross_entropy_takes_rows_of_its_classes():
    """nllLossNdHandler: an (N, C, H, W) input's classes moved last and the rest flattened, (N H W, C) rows; the
    transposes are views, so the rows' classes stay strided where the input lies and the loss and its gradient are
    priced so (their statistics reduced and broadcast as a batch norm's per channel)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 21, 1)

        def forward(self, x, t):
            y = self.conv(x)
            return y, F.cross_entropy(y, t)

    net = Net()
    model = poptorch.trainingModel(net, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
    model(torch.randn(2, 3, 16, 16), torch.randint(0, 21, (2, 16, 16)))
    g = model.simulation.executable.graph
    loss = next(op for op in g.ops if op.kind == "softmax_cross_entropy")
    assert [g.tensors[t].shape for t in loss.inputs] == [(512, 21), (512,)]
    costs = model.simulation.executable.costs
    for op in (loss, next(op for op in g.ops if op.kind == "softmax_cross_entropy_grad")):
        assert op.attrs["classes_strided"] and costs[op.name].plan.startswith("512 channels of 21")


class _MinAlong(nn.Module):
    def forward(self, x):
        return torch.min(x, 1)


def test_max_and_min_along_a_dim_are_a_top_one():
    """minMaxWithIndicesHandler: a TopK of k 1 (min negates before and after), its indices cast to INT32."""
    model = poptorch.inferenceModel(_MinAlong())
    x = torch.randn(4, 8)
    values, indices = model(x)
    torch.testing.assert_close(values, x.min(1).values)
    ops = model.simulation.executable.graph.ops
    assert [op.kind for op in ops] == ["scale", "sort", "scale", "cast"]
    assert ops[1].attrs["k"] == 1 and ops[1].attrs["axis"] == 1


def test_a_half_average_pool_runs_in_float_after_its_padding():
    """poolingHandler: count_include_pad pads first (ConstantPad), and PopART's AveragePool takes float only, so a
    half input is cast to float and back; an adaptive pool does neither."""
    pool = nn.Sequential(nn.AvgPool2d(3, 2, 1), nn.AdaptiveAvgPool2d(1)).half()  # the modules' own rules
    model = poptorch.inferenceModel(pool)
    x = torch.randn(2, 4, 8, 8).half()
    assert model(x).dtype == torch.float16
    ops = model.simulation.executable.graph.ops
    assert [op.kind for op in ops] == ["pad", "cast", "avgpool", "cast", "avgpool"]
    pooled = model.simulation.executable.graph.tensors[ops[2].outputs[0]]
    assert ops[2].attrs["padding"] == 0 and pooled.dtype == "float32"


def test_one_and_three_dimensional_average_pools_pad_and_cast_as_the_two_dimensional():
    """poolingHandler builds avg_pool1d and avg_pool3d as avg_pool2d: the padding counted by a ConstantPad first, a half
    input through float."""
    model = poptorch.inferenceModel(nn.AvgPool1d(3, 2, padding=1).half())
    x = torch.randn(2, 4, 10).half()
    torch.testing.assert_close(model(x), nn.AvgPool1d(3, 2, padding=1)(x.float()).half())
    ops = model.simulation.executable.graph.ops
    assert [(op.kind, model.simulation.executable.graph.tensors[op.outputs[0]].shape) for op in ops] == [
        ("pad", (2, 4, 12)), ("cast", (2, 4, 12)), ("avgpool", (2, 4, 5)), ("cast", (2, 4, 5))]
    model = poptorch.inferenceModel(nn.AvgPool3d(3, 1, padding=1, count_include_pad=False))
    model(torch.randn(2, 4, 6, 6, 6))
    assert [op.kind for op in model.simulation.executable.graph.ops] == ["avgpool"]


class _Baddbmm(nn.Module):
    def forward(self, x, a, b):
        return torch.baddbmm(x, a, b) + torch.addmm(x[0], a[0], b[0])


def test_baddbmm_always_multiplies_by_its_factors_addmm_only_by_those_not_one():
    """baddbmmHandler: add(mul(matmul(a, b), alpha), mul(input, beta)), the Muls whatever the factors; addmm's Gemm
    becomes MatMul, Scale (an identity for 1, removed) and Add."""
    model = poptorch.inferenceModel(_Baddbmm())
    x, a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    torch.testing.assert_close(model(x, a, b), _Baddbmm()(x, a, b))
    kinds = [op.kind for op in model.simulation.executable.graph.ops if op.kind not in ("slice", "reshape")]
    assert kinds == ["matmul", "scale", "scale", "add", "matmul", "add", "add"]


class _LogSumExp(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x, 1)


def test_logsumexp_is_poparts_two_reductions_and_two_maps():
    """reduceHandler makes PopART's ReduceLogSumExp: MAX, map exp(x - max), ADD, map log(sum) + max."""
    model = poptorch.inferenceModel(_LogSumExp())
    x = torch.randn(4, 8)
    torch.testing.assert_close(model(x), torch.logsumexp(x, 1))
    ops = model.simulation.executable.graph.ops
    assert [op.kind for op in ops] == ["reduce_max", "map", "reduce_sum", "map", "reshape"]
    assert [op.attrs["steps"] for op in ops if op.kind == "map"] == [["sub", "exp"], ["log", "add"]]


class _Classifier(nn.Module):
    def __init__(self, **loss):
        super().__init__()
        self.fc, self.loss = nn.Linear(8, 5), loss

    def forward(self, x, t):
        return F.cross_entropy(self.fc(x), t, **self.loss)


_SMOOTHED_MEAN = ["softmax", "softmax_cross_entropy", "reduce_sum", "scale", "compare", "select", "reduce_sum",
                  "logical_not", "cast", "reduce_sum", "cast", "div", "mul", "mul", "add", "reshape"]


@pytest.mark.parametrize("loss, probabilities, kinds", [
    (dict(label_smoothing=0.1), False, _SMOOTHED_MEAN),
    (dict(label_smoothing=0.1, reduction="sum"), False,
     ["softmax", "softmax_cross_entropy", "reduce_sum", "scale", "compare", "select", "reduce_sum", "mul", "mul", "add",
      "reshape"]),
    (dict(label_smoothing=0.1, ignore_index=2), False, _SMOOTHED_MEAN),
    ({}, True, ["softmax", "mul", "reduce_sum", "scale", "div", "reshape"]),
    (dict(label_smoothing=0.2), True, ["softmax", "mul", "add", "mul", "reduce_sum", "scale", "div", "reshape"]),
], ids=["smoothed", "smoothed_sum", "smoothed_ignoring", "probabilities", "smoothed_probabilities"])
def test_smoothed_or_soft_cross_entropy_is_torchs_composite(loss, probabilities, kinds):
    """Label smoothing and class-probability targets: PopTorch intercepts neither aten::cross_entropy_loss nor its
    parts but nll_loss_forward, so it runs torch's composite (LossNLL.cpp), one PopART op each, and the loss is its
    last op: trains as torch (one SGD step), the ops in torch's order (was: the smoothing and the probabilities
    ignored, a plain cross-entropy of class indices)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 8, generator=g)
    t = torch.softmax(torch.randn(6, 5, generator=g), 1) if probabilities else torch.randint(0, 5, (6,), generator=g)
    graph = _one_sgd_step_as_torch(lambda: _Classifier(**loss), x, t)
    forward = [o.kind for o in graph.ops if o.pass_ == "forward"]
    assert forward[2:] == kinds
    assert graph.loss == graph.ops[len(forward) - 1].outputs[0]
    assert ("softmax_cross_entropy_grad" in [o.kind for o in graph.ops]) != probabilities


def test_class_weights_of_cross_entropy_and_nll_are_refused_as_poptorch_refuses_them():
    """PopTorch's nllLossNdHandler: 'Parameter "weight" is unsupported' (T42695); the simulator had ignored it."""
    for loss in (nn.CrossEntropyLoss(weight=torch.ones(5)), nn.NLLLoss(weight=torch.ones(5)),
                 lambda y, t: F.cross_entropy(y, t, torch.ones(5))):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.loss = nn.Linear(8, 5), loss

            def forward(self, x, t):
                return self.loss(self.fc(x), t)
        net = Net()
        with pytest.raises(sim.UnsupportedOpError, match='"weight" is unsupported'):
            poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))(
                torch.randn(6, 8), torch.randint(0, 5, (6,)))


@pytest.mark.parametrize("norm, forward, grad", [
    (lambda y: torch.norm(y, dim=1), ["reduce_sum", "sqrt"], ["mul", "div"]),
    (lambda y: torch.linalg.vector_norm(y, dim=-1, keepdim=True), ["reduce_sum", "sqrt"], ["mul", "div"]),
    (lambda y: torch.norm(y, p=1, dim=1), ["abs", "reduce_sum"], ["sign", "mul"]),
    (lambda y: torch.norm(y, p=3, dim=1), ["abs", "pow", "reduce_sum", "reciprocal", "pow"], None),
], ids=["l2", "vector_norm_kept", "l1", "p3"])
def test_vector_norms_are_poparts_reduce_l1_and_l2(norm, forward, grad):
    """tensorNormHandler (ReduceOps.cpp): p 2 PopART's ReduceL2 (a reduce with SQUARE_ADD, a square root in place),
    p 1 ReduceL1 (abs, a reduce), each with its grad opx's one map (dy x / y; dy sign(x)); another p the abs,
    pow, sum and pow of 1 / p, its reciprocal a run op (PopART folds no Reciprocal). Trains as torch."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 6)

        def forward(self, x):
            return poptorch.identity_loss(norm(self.fc(x)), "sum")

    graph = _one_sgd_step_as_torch(Net, torch.randn(4, 8, generator=torch.Generator().manual_seed(3)))
    ops = [o for o in graph.ops if not o.name.startswith(("fc", "identity_loss")) and o.pass_ == "forward"]
    assert [o.kind for o in ops] == forward
    if grad is not None:
        maps = [o.attrs["steps"] for o in graph.ops if o.pass_ == "backward" and o.kind == "map"]
        assert maps == [grad]
        assert ops[forward.index("reduce_sum")].attrs.get("operation") == ("square_add" if "sqrt" in forward else None)


def test_bilinear_is_poptorchs_two_broadcast_batched_matmuls():
    """bilinearHandler (BilinearOps.cpp): x1 as (rows, 1, 1, I1) times the weight (O, I1, I2) broadcast, then times x2
    as (rows, 1, I2, 1): rows x O products each. Its gradients are PopART's MatMul grads, each summed over the axes its
    operand was broadcast along (the weight's over the rows, x1's over the outputs). Trains as torch."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.bilinear = nn.Linear(8, 6), nn.Bilinear(6, 5, 4)

        def forward(self, x, z):
            return poptorch.identity_loss(self.bilinear(self.fc(x), z).square(), "sum")

    g = torch.Generator().manual_seed(5)
    graph = _one_sgd_step_as_torch(Net, torch.randn(3, 8, generator=g), torch.randn(3, 5, generator=g))
    shape = {t: graph.tensors[t].shape for t in graph.tensors}
    matmuls = [(o.pass_, [shape[i] for i in o.inputs], shape[o.outputs[0]]) for o in graph.ops
               if o.kind == "matmul" and not o.name.startswith("fc")]
    assert matmuls[:2] == [("forward", [(3, 1, 1, 6), (4, 6, 5)], (3, 4, 1, 5)),
                           ("forward", [(3, 4, 1, 5), (3, 1, 5, 1)], (3, 4, 1, 1))]
    summed = {shape[o.outputs[0]] for o in graph.ops if o.kind == "reduce_sum" and o.attrs.get("axes") == "broadcast"}
    assert {(3, 1, 1, 6), (4, 6, 5)} <= summed


@pytest.mark.parametrize("affine", [True, False])
def test_instance_norm_is_torchs_composite_a_batch_norm_of_samples_as_channels(affine):
    """PopTorch 3 intercepts native_group_norm but not instance_norm (CompositeImplicitAutograd): torch's composite views
    (N, C, H, W) as (1, N C, H, W) and batch-normalises it with batch statistics (PopTorch's batchNormHandler, PopART's
    BatchNormalization in training mode), the scale and shift repeated N times (views, their gradients summed). At
    inference it keeps the batch statistics (no running ones), where an eval BatchNorm2d scales and shifts by its
    running ones. Trains as torch."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.norm = nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=affine)

        def forward(self, x):
            return poptorch.identity_loss(self.norm(self.conv(x)).square(), "mean")

    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(6))
    graph = _one_sgd_step_as_torch(Net, x)
    (norm,) = [o for o in graph.ops if o.kind == "batchnorm"]
    assert graph.tensors[norm.inputs[0]].shape == (1, 8, 6, 6) and norm.attrs["batch_statistics"]
    assert [graph.tensors[t].shape for t in norm.inputs[1:]] == [(8,), (8,)]
    assert not [o for o in graph.ops if o.kind == "groupnorm"]

    class Eval(nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return self.norm(x)
    instance = poptorch.inferenceModel(Eval(nn.InstanceNorm2d(3, affine=affine)))
    running = poptorch.inferenceModel(Eval(nn.BatchNorm2d(6).eval()))
    instance(x), running(x.reshape(1, 6, 8, 8))
    (a,), (b,) = ([o for o in m.executable.graph.ops if o.kind == "batchnorm"] for m in (instance, running))
    assert "inference" not in a.attrs and b.attrs["inference"]
    assert instance.executable.costs[a.name].cycles > running.executable.costs[b.name].cycles


@pytest.mark.parametrize("make, refused", [
    (lambda: nn.LSTM(8, 16, bias=False), "LSTM without biases"),
    (lambda: nn.RNN(8, 16, bias=False), None),
    (lambda: nn.GRU(8, 16, bias=False), None),
])
def test_recurrent_layers_without_biases_as_poptorch_takes_them(make, refused):
    """RNNOps.cpp's lstmHandler refuses has_biases=False; PopTorch 3's dispatcher intercepts lstm.input only, so a GRU
    or a plain RNN without biases is ATen's ops and runs."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = make()

        def forward(self, x):
            return self.rnn(x)[0]
    x, net = torch.randn(5, 2, 8), Net()
    if refused is None:
        torch.testing.assert_close(poptorch.inferenceModel(net)(x), net(x))
        return
    with pytest.raises(sim.UnsupportedOpError, match=refused):
        poptorch.inferenceModel(Net())(x)


def test_ctc_loss_without_reduction_is_refused_as_poptorch_refuses_it():
    class M(nn.Module):
        def forward(self, log_probs, targets):
            return F.ctc_loss(log_probs, targets, torch.tensor([4, 4]), torch.tensor([2, 2]), reduction="none")

    log_probs = torch.randn(4, 2, 5).log_softmax(2)
    with pytest.raises(sim.UnsupportedOpError, match='reduction="none" is currently not supported'):
        poptorch.inferenceModel(M())(log_probs, torch.tensor([[1, 2], [3, 4]]))


def test_gather_adds_each_rows_offset_then_gathers_single_elements():
    """gatherHandler (TensorOps.cpp): the index plus its row's offset in the flattened input (one int32 add, the
    offsets a constant broadcast along the gathered axis), then PopART's Gather of single elements. Trains as torch."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 6)

        def forward(self, x, i):
            return poptorch.identity_loss(torch.gather(self.fc(x), 1, i), "sum")

    g = torch.Generator().manual_seed(7)
    graph = _one_sgd_step_as_torch(Net, torch.randn(4, 8, generator=g), torch.randint(0, 6, (4, 3), generator=g))
    add, gather = [o for o in graph.ops if o.pass_ == "forward" and not o.name.startswith(("fc", "identity"))][:2]
    assert (add.kind, gather.kind) == ("add", "gather_elements") and gather.inputs[0] == add.outputs[0]
    assert [graph.tensors[t].shape for t in add.inputs] == [(4, 3), (4, 1)]
    assert graph.tensors[add.outputs[0]].dtype == "int32"


def test_a_trained_exponents_gradient_is_poparts_pow_arg1_pattern():
    """PowArg1GradOp pattern (willow/src/patterns/powarg1gradoppattern.cpp): dy where(x == 0 and e >= 0, 0, y log(x))
    in ten ops, then summed over the axes the exponent was broadcast along. Trains as torch."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.e = nn.Linear(8, 6), nn.Parameter(torch.tensor([1.5]))

        def forward(self, x):
            return poptorch.identity_loss(torch.pow(self.fc(x).abs() + 0.1, self.e), "sum")

    graph = _one_sgd_step_as_torch(Net, torch.randn(4, 8, generator=torch.Generator().manual_seed(8)))
    chain = [o for o in graph.ops if "grad1" in o.name]
    assert [o.kind for o in chain] == ["log", "mul", "compare", "compare", "isnan", "logical", "logical_not", "logical",
                                       "select", "mul"]
    (summed,) = [o for o in graph.ops if chain[-1].outputs[0] in o.inputs]
    assert summed.kind == "reduce_sum" and graph.tensors[summed.outputs[0]].shape == (1,)
