"""Pieces every model family shares: parameter checking and placement on IPUs."""

from __future__ import annotations

import contextlib
import copy
import json
import numbers
from typing import Iterator

from sim.errors import GraphError
from sim.graph import GraphBuilder, canonical_dtype


#: the most layers a zoo model may have, and why
MAX_LAYERS = 1024
WHY_MAX_LAYERS = ("ten times deeper than published models (GPT-3 has 96 layers, PaLM 118) and 4 layers on "
                  "each IPU of an IPU-POD256; every layer adds tens of ops, each priced and placed on its own, "
                  "so a graph of 100,000 layers would take many minutes to compile")


class Params(dict):
    """A model's parameters: its defaults overridden by the user's, checked on access.

    Every error names the model, the parameter and the valid parameters.
    """

    def __init__(self, model: str, defaults: dict, given: dict):
        unknown = [k for k in given if k not in defaults]
        if unknown:
            raise GraphError(f"model {model!r}: unknown parameter {unknown[0]!r}; "
                             f"valid parameters: {', '.join(defaults)}")
        super().__init__(copy.deepcopy(defaults))
        self.update(given)
        self.model = model
        self.defaults, self.given = defaults, dict(given)

    def unused(self, key: str, why: str) -> None:
        """Fail if ``key`` was given a value other than its default although the model, as the other
        parameters build it, does not use it (``why``): a parameter is never silently ignored."""
        if key in self.given and _differs(self.given[key], self.defaults[key]):
            raise GraphError(f"model {self.model!r}: parameter {key}={self.given[key]!r} has no effect {why}; "
                             f"leave it out (default {self.defaults[key]!r})")

    def fail(self, key: str, why: str):
        value = self[key]
        hint = ""
        if isinstance(value, (str, numbers.Integral)) and not isinstance(value, bool) and " list " in why:
            # a bare value or a comma-separated string where a list is wanted: how --param takes a list (as JSON)
            items = [v.strip() for v in str(value).split(",")]
            items = [int(v) if v.lstrip("-").isdigit() else v for v in items]
            hint = f"; on the command line give the list as JSON: --param '{key}={json.dumps(items)}'"
        raise GraphError(f"model {self.model!r}: invalid parameter {key}={value!r}: {why}{hint} "
                         f"(valid parameters: {', '.join(self)})")

    def int(self, key: str, minimum: int = 1, optional: bool = False) -> int | None:
        v = self[key]
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
            self.fail(key, f"expected an integer >= {minimum}")
        return int(v)

    def layers(self, key: str, minimum: int = 1, optional: bool = False) -> int | None:
        """A number of layers: an integer from ``minimum`` to :data:`MAX_LAYERS`."""
        v = self.int(key, minimum, optional)
        if v is not None and v > MAX_LAYERS:
            self.fail(key, f"the simulator takes at most {MAX_LAYERS} layers: {WHY_MAX_LAYERS}")
        return v

    def ints(self, key: str, minimum: int = 1, optional: bool = False) -> list[int] | None:
        v = self[key]
        if v is None and optional:
            return None
        if not isinstance(v, (list, tuple)) or not v or any(
                isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < minimum for x in v):
            self.fail(key, f"expected a non-empty list of integers >= {minimum}")
        return [int(x) for x in v]

    def items(self, key: str, what: str) -> list:
        """A list parameter's items: an explicit empty list is none, and so is None where None is the
        default; any other value that is not a list (a falsy ``0`` or ``""`` included) is refused by name,
        ``what`` saying what the list holds."""
        v = self[key]
        if v is None and self.defaults[key] is None:
            return []
        if not isinstance(v, (list, tuple)):
            self.fail(key, f"expected a list of {what} ([] for none)")
        return list(v)

    def prob(self, key: str) -> float:
        v = self[key]
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= v < 1:
            self.fail(key, "expected a probability in [0, 1)")
        return float(v)

    def flag(self, key: str) -> bool:
        if not isinstance(self[key], bool):
            self.fail(key, "expected True or False")
        return self[key]

    def dtype(self, key: str = "dtype") -> str:
        try:
            d = canonical_dtype(self[key])
        except GraphError:
            d = None
        if d not in ("float16", "float32"):
            self.fail(key, "expected 'float16' or 'float32'")
        return d


def _differs(value, default) -> bool:
    """Whether a given value differs from the default (a list and a tuple of the same items do not)."""
    def plain(v):
        return [plain(x) for x in v] if isinstance(v, (list, tuple)) else v
    return plain(value) != plain(default) or isinstance(value, bool) != isinstance(default, bool)


def split_points(p: Params, order: list[str], spell=lambda s: s) -> list[str]:
    """The ``split_points`` parameter: the blocks of ``order`` where a new IPU starts (each name
    through ``spell`` first), distinct and in model order."""
    splits = p.items("split_points", "block names")
    if not all(isinstance(s, str) for s in splits):
        p.fail("split_points", "expected a list of block names")
    splits = [spell(s) for s in splits]
    for s in splits:
        if s not in order:
            p.fail("split_points", f"unknown block {s!r}: expected a list of block names: {', '.join(order)}")
    if [order.index(s) for s in splits] != sorted({order.index(s) for s in splits}):
        p.fail("split_points", "blocks must be distinct and in model order")
    return splits


def l2_normalised(b: GraphBuilder, x: str, name: str = "normalised") -> str:
    """``x / x.norm(dim=-1, keepdim=True)``: the square root of the last axis's sum of squares, then a divide."""
    norm = b.unary("sqrt", b.reduce(b.mul(x, x), [-1], keepdims=True, name="square_sum"))
    return b.div(x, norm, name=name)


def image_inputs(b: GraphBuilder, p: Params, size: int) -> tuple[str, str | None]:
    """A classifier's inputs: ``images`` ((B, 3, size, size); streamed as uint8 and cast on the IPU
    with ``eight_bit_io``, as Graphcore's CNN configs do) and, with ``with_loss``, the int32
    ``labels`` (None without)."""
    B = p.int("micro_batch")
    if p.flag("eight_bit_io"):
        images = b.cast(b.input("images", (B, 3, size, size), "uint8"), p.dtype(), name="normalise")
    else:
        images = b.input("images", (B, 3, size, size))
    return images, (b.input("labels", (B,), "int32") if p.flag("with_loss") else None)


def gelu_form(p: Params) -> str:
    """The ``gelu`` parameter: ``"tanh"`` (popnn's tanh approximation: PopART's Gelu, what PopTorch and
    Graphcore's PopART and TensorFlow models run) or ``"erf"`` (the exact GELU: PopART's GeluErf, popops'
    GELU_ERF vertex, as PopRT's Converter makes it of an exported model's erf GELU with its ``erf_gelu_pattern``
    pass or ``enable_erf_gelu``; :data:`sim.graph.GraphBuilder.GELU_KINDS`)."""
    if p["gelu"] not in GraphBuilder.GELU_KINDS:
        p.fail("gelu", 'expected "tanh" (popnn\'s tanh approximation, PopART\'s Gelu) or "erf" (the exact GELU, '
                       "PopART's GeluErf)")
    return p["gelu"]


def normaliser(b: GraphBuilder, p: Params, eps: float = 1e-5):
    """The ``norm`` parameter's normalisation as a function of (tensor, name): ``"batch"`` (batch
    norm), ``"group"`` (group norm of ``norm_groups`` groups, fewer where a tensor has fewer
    channels) or ``"folded"``: batch norm folded into the convolution before it, as an inference
    model exported to ONNX has it (PyTorch's ``torch.onnx.export`` of an ``eval()`` model fuses each
    Conv + BatchNormalization pair into one Conv: its scale into the weights, its shift into a
    bias), so each normalisation is that bias added per channel. Folding needs fixed statistics,
    so ``"folded"`` is refused for a model that computes a loss (``with_loss``). ``bn_span`` (where
    the model has it) > 1 spreads each batch norm's training statistics over that many adjacent
    replicas (:meth:`~sim.graph.GraphBuilder.batchnorm`'s ``replica_group_size``)."""
    if p["norm"] not in ("batch", "group", "folded"):
        p.fail("norm", 'expected "batch" (batch norm), "group" (group norm of norm_groups groups) or "folded" '
                       "(batch norm folded into the convolutions, as an exported inference model has it)")
    if p["norm"] == "folded" and p.get("with_loss", True) is not False:
        p.fail("norm", "batch norm folds into the convolutions only in an inference model with fixed statistics; "
                       "give with_loss=False, or norm=\"batch\" to train")
    groups = p.int("norm_groups")
    if p["norm"] != "group":
        p.unused("norm_groups", f"with norm={p['norm']!r}: only group norm (norm=\"group\") has groups")
    span = p.int("bn_span") if "bn_span" in p else 1
    if span > 1 and p["norm"] != "batch":
        p.fail("bn_span", f"spreads batch norm statistics over replicas; norm={p['norm']!r} has none: "
                          "give norm=\"batch\" or bn_span=1")

    def norm(x: str, name: str) -> str:
        if p["norm"] == "batch":
            return b.batchnorm(x, name=name, replica_group_size=span)
        if p["norm"] == "folded":
            with b.scope(name):
                return b.add(x, b.weight("bias", (1, b.shape(x)[1], 1, 1), b.dtype_of(x)))
        channels = b.shape(x)[1]
        if channels % min(groups, channels):
            p.fail("norm_groups", f"norm {'/'.join([*b._scopes, name])!r} normalises {channels} channels, not a "
                                  f"whole number of {groups} groups: give a divisor of {channels}")
        return b.group_norm(x, min(groups, channels), eps, name=name)
    return norm


class Placement:
    """Puts consecutive parts of a model on IPUs.

    Pipeline stages are numbered as PopART ends up with them under ``AutoStage.AutoIncrement``
    (a stage per block, then consecutive stages on one IPU merged: ``mergeConsecutivePipelineStages``,
    sim.strategy): a new stage each time the IPU changes from one block to the next, so a head
    placed back on IPU 0 after the last layer is a stage of its own. Without placement (``enabled=False``)
    ops carry only their block name (so an execution strategy can place blocks), no IPU.
    """

    def __init__(self, b: GraphBuilder, enabled: bool):
        self.b, self.enabled = b, enabled
        self._ipu: int | None = None
        self._stage = -1

    @contextlib.contextmanager
    def on(self, ipu: int, block: str) -> Iterator[None]:
        if not self.enabled:
            with self.b.ipu(None, block=block):
                yield
            return
        if ipu != self._ipu:
            self._ipu, self._stage = ipu, self._stage + 1
        with self.b.ipu(ipu, stage=self._stage, block=block):
            yield
