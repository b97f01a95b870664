"""``poptorch.optim``: SGD, Adam, AdamW, RMSprop and LAMB with PopTorch's extra arguments.

They are ``torch.optim`` optimizers (LAMB, which torch lacks, is implemented here), so the
weight update of a ``trainingModel`` really runs on the CPU. PopTorch's IPU arguments keep
PopTorch's defaults, checks and places (``loss_scaling``, the accumulator dtypes and
``max_grad_norm`` are attributes of the optimizer; ``velocity_scaling`` of the combined SGD
variant is a group setting):

* ``loss_scaling`` is modelled in the CPU step: the loss is multiplied by it before the
  backward pass and the gradients divided by it before the update, as on the IPU (so float16
  gradients keep their small values);
* ``max_grad_norm`` clips the global norm of all the gradients before each update, in the CPU
  step and in the priced weight update (:func:`clip_norm`: PopART's ClipNormSettings ops);
* ``first_order_momentum_accum_type`` / ``second_order_momentum_accum_type`` /
  ``velocity_accum_type`` set the dtype of each optimizer state tensor the simulator prices
  (:func:`state_dtype`: a float16 state takes half the memory and traffic, and its steps of the
  update run at the fp16 rate); ``accum_type`` sets the dtype of the gradient accumulators
  (:func:`accum_dtype`; float32 by default, as PopTorch); ``use_combined_accum``,
  ``velocity_scaling`` and ``use_tf_variant`` are accepted and listed in the run's notes as not
  modelled.

``optimizer.state_dict()`` returns PopTorch's ``{"ipu_state", "ipu_param", ...}`` (both None
before the model is compiled; afterwards the optimizer state and parameters under PopART's
names, from the CPU optimizer). :func:`sim_optimizer` names the :class:`sim.Optimizer` that
prices the update.
"""

from __future__ import annotations

import logging
import math

import torch

from ..graph.training import DECAY_PER_WEIGHT, STATES
from ._errors import Error

logger = logging.getLogger("poptorch")

_ACCUM_TYPES = (torch.float16, torch.float32)
_ACCUM_ERROR = "Accumulation types must be either torch.float32 or torch.float16"


class VariableAttributes:
    """Which optimizer attributes may change after compilation (``optimizer.variable_attrs``).

    An attribute given explicitly to the constructor is variable; the others are constant.
    """

    def __init__(self, variable_attributes: list[str], allowed_attributes: list[str]) -> None:
        self._variable_attributes = list(variable_attributes)
        self._allowed_attributes = list(allowed_attributes)

    def isConstant(self, attr: str) -> bool:
        """Is ``attr`` constant (not given explicitly, nor marked variable)?"""
        return attr not in self._variable_attributes

    def markAsConstant(self, attr: str) -> None:
        assert attr in self._allowed_attributes, (
            f"Unknown attribute {attr}, allowed values: {self._allowed_attributes}")
        self._variable_attributes = [a for a in self._variable_attributes if a != attr]

    def markAsVariable(self, attr: str) -> None:
        assert attr in self._allowed_attributes, (
            f"Unknown attribute {attr}, allowed values: {self._allowed_attributes}")
        self._variable_attributes.append(attr)


def _given(**kwargs) -> dict:
    return {k: v for k, v in kwargs.items() if v is not None}


def _accum_type(value, default=torch.float32):
    value = default if value is None else value
    assert value in _ACCUM_TYPES, _ACCUM_ERROR
    return value


class Optimizer:
    """What PopTorch's optimizers add to torch's: the IPU state dictionary, ``variable_attrs``,
    loss scaling and gradient clipping."""

    #: IPU attributes that are set on the optimizer (not per group)
    _child_vars = ["loss_scaling"]

    def _ipu_init(self, variables: list[str], **attributes) -> None:
        self._state_dict = {"ipu_state": None, "ipu_param": None}
        self.ipu_state_is_dirty = False
        self.host_state_is_dirty = False
        self._ipusim_param_names: dict[int, str] | None = None  # set when a model compiles
        for name, value in attributes.items():
            setattr(self, name, value)
        self.variable_attrs = VariableAttributes(variables, list(self.defaults) + self._child_vars)

    # --- PopTorch's state dictionary ------------------------------------------------------
    def state_dict(self):
        return self.get_state_dict()

    def get_state_dict(self):
        """PopTorch's ``ipu_state``/``ipu_param`` (None before compilation) and torch's state."""
        return {**self._ipu_view(), **torch.optim.Optimizer.state_dict(self)}

    def load_state_dict(self, state):
        if not state:
            raise RuntimeError("Cannot load optimizer state dictionary because it is empty.")
        if not ("ipu_state" in state and "ipu_param" in state):
            raise RuntimeError("Only IPU optimizer states can be loaded onto the IPU.")
        torch.optim.Optimizer.load_state_dict(self, {k: state[k] for k in ("state", "param_groups")})
        self._state_dict = {"ipu_state": state["ipu_state"], "ipu_param": state["ipu_param"]}

    def set_state_dict(self, state):
        self.load_state_dict(state)

    def has_state(self) -> bool:
        return bool(self.state)

    def _ipu_view(self) -> dict:
        names = self._ipusim_param_names
        if names is None:
            return dict(self._state_dict)
        ipu_param: dict[str, torch.Tensor] = {"lossScaling_FLOAT": torch.tensor(float(self.loss_scaling))}
        ipu_state: dict[str, torch.Tensor] = {}
        sgd = isinstance(self, torch.optim.SGD)
        for group in self.param_groups:
            for p in group["params"]:
                name = names.get(id(p))
                if name is None:
                    continue
                lr, wd = float(group["lr"]), float(group.get("weight_decay", 0.0))
                if sgd:  # PopART's SGD folds dampening and loss scaling into two factors
                    dm = float(group.get("dampening", 0.0))
                    ipu_param[f"scaledLearningRate0___specific___{name}"] = torch.tensor(
                        lr * (1 - dm) / float(self.loss_scaling))
                    ipu_param[f"weightDecayScaleFactor0___specific___{name}"] = torch.tensor(
                        1 - lr * (1 - dm) * wd)
                else:
                    ipu_param[f"learningRate___specific___{name}"] = torch.tensor(lr)
                    ipu_param[f"weightDecay___specific___{name}"] = torch.tensor(wd)
                state = self.state.get(p, {})
                moments = [state[k] for k in ("exp_avg", "square_avg", "momentum_buffer", "exp_avg_sq")
                           if isinstance(state.get(k), torch.Tensor)]
                if not sgd:
                    while len(moments) < 2:  # before the first step the moments are zero
                        moments.append(torch.zeros_like(p))
                for i, m in enumerate(moments[:2], 1):
                    ipu_state[f"Accl{i}___{name}"] = m.detach().clone()
        return {"ipu_state": ipu_state, "ipu_param": ipu_param}

    # --- what the step adds to torch's -----------------------------------------------------
    def _clip(self) -> None:
        """Clip the global norm of every gradient to ``max_grad_norm`` (as PopART does)."""
        norm = getattr(self, "max_grad_norm", math.inf)
        if norm is None or not math.isfinite(norm):
            return
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        if params:
            torch.nn.utils.clip_grad_norm_(params, norm)

    _IPU_ATTRS = ("_state_dict", "ipu_state_is_dirty", "host_state_is_dirty", "variable_attrs",
                  "loss_scaling", "use_combined_accum", "accum_type", "velocity_accum_type",
                  "first_order_momentum_accum_type", "second_order_momentum_accum_type",
                  "max_grad_norm", "bias_correction", "max_weight_norm", "use_tf_variant",
                  "_ipusim_given")

    def __getstate__(self):
        """torch's state plus the IPU attributes (which torch's own pickling leaves out)."""
        state = super().__getstate__()
        state.update({k: self.__dict__[k] for k in self._IPU_ATTRS if k in self.__dict__})
        state["_ipusim_param_names"] = None
        return state


class SGD(Optimizer, torch.optim.SGD):
    """Stochastic gradient descent with momentum, dampening, weight decay and Nesterov, with
    PopTorch's loss scaling, velocity scaling (combined variant), accumulator dtypes and
    gradient clipping."""

    def __init__(self, params, lr: float, momentum=None, dampening=None, weight_decay=None,
                 nesterov=None, maximize=None, foreach=None, differentiable=None, fused=None,
                 loss_scaling=None, velocity_scaling=None, use_combined_accum=None,
                 accum_type=None, velocity_accum_type=None, max_grad_norm=None) -> None:
        given = _given(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                       nesterov=nesterov, maximize=maximize, foreach=foreach,
                       differentiable=differentiable, fused=fused)
        variables = list(given) + list(_given(loss_scaling=loss_scaling, velocity_scaling=velocity_scaling))
        torch.optim.SGD.__init__(self, params, **given)
        use_combined_accum = bool(use_combined_accum)
        if velocity_scaling is not None and not use_combined_accum:
            logger.warning("velocity_scaling value ignored when using the separate variant "
                           "(use_combined_accum=False).")
        if use_combined_accum:
            vs = 1.0 if velocity_scaling is None else velocity_scaling
            self.defaults["velocity_scaling"] = vs
            for group in self.param_groups:
                group.setdefault("velocity_scaling", vs)
        self._ipu_init(variables, loss_scaling=1.0 if loss_scaling is None else loss_scaling,
                       use_combined_accum=use_combined_accum, accum_type=_accum_type(accum_type),
                       velocity_accum_type=_accum_type(velocity_accum_type),
                       max_grad_norm=math.inf if max_grad_norm is None else max_grad_norm)
        self._ipusim_given = _given(use_combined_accum=use_combined_accum or None, velocity_scaling=velocity_scaling)

    def step(self, closure=None):
        self._clip()
        return torch.optim.SGD.step(self, closure)


class _AdamBase(Optimizer):
    def _adam_init(self, parent, params, kwargs, loss_scaling, accum_type, first, second,
                   max_grad_norm, extra=None):
        given = _given(**kwargs)
        variables = list(given) + list(_given(loss_scaling=loss_scaling))
        parent.__init__(self, params, **given)
        self._ipu_init(variables, loss_scaling=1.0 if loss_scaling is None else loss_scaling,
                       accum_type=_accum_type(accum_type),
                       first_order_momentum_accum_type=_accum_type(first),
                       second_order_momentum_accum_type=_accum_type(second),
                       max_grad_norm=math.inf if max_grad_norm is None else max_grad_norm,
                       **(extra or {}))
        self._ipusim_given = {}


class Adam(_AdamBase, torch.optim.Adam):
    """Adam (L2 weight decay) with loss scaling, accumulator dtypes and gradient clipping;
    ``amsgrad`` is refused when the model is wrapped, as by PopTorch."""

    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None, amsgrad=None,
                 foreach=None, maximize=None, capturable=None, differentiable=None, fused=None,
                 decoupled_weight_decay=None, loss_scaling=None, accum_type=None,
                 first_order_momentum_accum_type=None, second_order_momentum_accum_type=None,
                 max_grad_norm=None) -> None:
        self._adam_init(torch.optim.Adam, params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
            foreach=foreach, maximize=maximize, capturable=capturable,
            differentiable=differentiable, fused=fused,
            decoupled_weight_decay=decoupled_weight_decay), loss_scaling, accum_type,
            first_order_momentum_accum_type, second_order_momentum_accum_type, max_grad_norm)

    def step(self, closure=None):
        self._clip()
        return torch.optim.Adam.step(self, closure)


class AdamW(_AdamBase, torch.optim.AdamW):
    """Adam with decoupled weight decay (default 0.01), with PopTorch's extra arguments."""

    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None, amsgrad=None,
                 maximize=None, foreach=None, capturable=None, differentiable=None, fused=None,
                 loss_scaling=None, bias_correction=None, accum_type=None,
                 first_order_momentum_accum_type=None, second_order_momentum_accum_type=None,
                 max_grad_norm=None) -> None:
        self._adam_init(torch.optim.AdamW, params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
            maximize=maximize, foreach=foreach, capturable=capturable,
            differentiable=differentiable, fused=fused), loss_scaling, accum_type,
            first_order_momentum_accum_type, second_order_momentum_accum_type, max_grad_norm,
            extra={"bias_correction": True if bias_correction is None else bool(bias_correction)})
        if not self.bias_correction:
            self._ipusim_given["bias_correction"] = False

    def step(self, closure=None):
        self._clip()
        return torch.optim.AdamW.step(self, closure)


class RMSprop(Optimizer, torch.optim.RMSprop):
    """RMSprop with loss scaling and accumulator dtypes (``use_tf_variant`` accepted)."""

    def __init__(self, params, lr=None, alpha=None, eps=None, weight_decay=None, momentum=None,
                 centered=None, capturable=None, foreach=None, maximize=None, differentiable=None,
                 loss_scaling=None, accum_type=None, first_order_momentum_accum_type=None,
                 second_order_momentum_accum_type=None, use_tf_variant=None) -> None:
        given = _given(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                       centered=centered, capturable=capturable, foreach=foreach,
                       maximize=maximize, differentiable=differentiable)
        torch.optim.RMSprop.__init__(self, params, **given)
        self._ipu_init(list(given) + list(_given(loss_scaling=loss_scaling)),
                       loss_scaling=1.0 if loss_scaling is None else loss_scaling,
                       accum_type=_accum_type(accum_type),
                       first_order_momentum_accum_type=_accum_type(first_order_momentum_accum_type),
                       second_order_momentum_accum_type=_accum_type(second_order_momentum_accum_type),
                       use_tf_variant=bool(use_tf_variant))
        self._ipusim_given = _given(use_tf_variant=use_tf_variant or None)


class LAMB(Optimizer, torch.optim.Optimizer):
    """LAMB (Layer-wise Adaptive Moments): Adam moments with a per-tensor trust ratio
    ``min(||w||, max_weight_norm) / ||update||``; PopTorch's defaults."""

    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None,
                 bias_correction=None, loss_scaling=None, max_weight_norm=None, accum_type=None,
                 first_order_momentum_accum_type=None, second_order_momentum_accum_type=None) -> None:
        variables = list(_given(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                max_weight_norm=max_weight_norm, loss_scaling=loss_scaling))
        max_weight_norm = 65500.0 if max_weight_norm is None else max_weight_norm  # float16 max
        defaults = dict(lr=1e-3 if lr is None else lr, betas=(0.9, 0.999) if betas is None else betas,
                        eps=1e-8 if eps is None else eps,
                        weight_decay=1e-2 if weight_decay is None else weight_decay,
                        max_weight_norm=max_weight_norm)
        torch.optim.Optimizer.__init__(self, params, defaults)
        self._ipu_init(variables, loss_scaling=1.0 if loss_scaling is None else loss_scaling,
                       bias_correction=True if bias_correction is None else bool(bias_correction),
                       max_weight_norm=max_weight_norm, accum_type=_accum_type(accum_type),
                       first_order_momentum_accum_type=_accum_type(first_order_momentum_accum_type),
                       second_order_momentum_accum_type=_accum_type(second_order_momentum_accum_type))
        self._ipusim_given = {}

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                c1 = 1 - beta1 ** state["step"] if self.bias_correction else 1.0
                c2 = 1 - beta2 ** state["step"] if self.bias_correction else 1.0
                update = (m / c1) / (v.sqrt() / math.sqrt(c2) + group["eps"]) + group["weight_decay"] * p
                w_norm = p.norm().clamp(max=group["max_weight_norm"])
                u_norm = update.norm()
                trust = (w_norm / u_norm).item() if w_norm > 0 and u_norm > 0 else 1.0
                p.add_(update, alpha=-group["lr"] * trust)
        return loss


#: optimizers the IPU runs (PopTorch's ``_OptimizerType``)
SUPPORTED = "SGD, Adam, AdamW, RMSprop, LAMB"


def check_supported(optimizer) -> None:
    """PopTorch's checks when an optimizer is given to a model (its errors and types)."""
    if not isinstance(optimizer, (LAMB, torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW,
                                  torch.optim.RMSprop)):
        raise AssertionError(f"Unsupported optimizer type {type(optimizer).__name__}. Types "
                             f"supported {SUPPORTED} (from torch.optim or poptorch.optim)")
    if isinstance(optimizer, torch.optim.Adam) and any(g.get("amsgrad") for g in optimizer.param_groups):
        raise ValueError("Only non-amsgrad Adam/AdamW optimizers are supported.")


def sim_optimizer(optimizer) -> str:
    """The :class:`sim.Optimizer` name that prices ``optimizer``'s weight update."""
    check_supported(optimizer)
    if isinstance(optimizer, LAMB):
        return "lamb"
    if isinstance(optimizer, torch.optim.AdamW):
        return "adamw"
    if isinstance(optimizer, torch.optim.Adam):
        return "adam"
    if isinstance(optimizer, torch.optim.RMSprop):
        return "rmsprop_momentum" if any(g.get("momentum", 0) for g in optimizer.param_groups) else "rmsprop"
    momentum = any(g.get("momentum", 0) for g in optimizer.param_groups)
    return "sgd_momentum" if momentum else "sgd"


def state_dtype(optimizer) -> str | tuple[str, ...]:
    """The ``state_dtype`` of the :class:`sim.Optimizer` pricing ``optimizer``: one dtype per
    state tensor, in the order of ``sim.graph.training.STATES`` (Adam, AdamW, LAMB: the first
    moment from ``first_order_momentum_accum_type``, the second from
    ``second_order_momentum_accum_type``; RMSprop's mean square from the former, its momentum float32;
    momentum SGD's velocity from ``velocity_accum_type``); "float32" for an optimizer without state."""
    attrs = [attr for _, attr in STATES[sim_optimizer(optimizer)]]
    if not attrs:
        return "float32"
    return tuple("float16" if a is not None and getattr(optimizer, a, torch.float32) == torch.float16 else "float32"
                 for a in attrs)


def accum_dtype(optimizer) -> str:
    """The dtype of the gradient accumulators PopTorch gives ``optimizer``'s run: its
    ``accum_type``, float32 unless given (poptorch python/optim.py)."""
    return "float16" if getattr(optimizer, "accum_type", torch.float32) == torch.float16 else "float32"


def clip_norm(optimizer) -> float | None:
    """The global norm ``optimizer``'s gradients are clipped to (its ``max_grad_norm``), None
    when it is infinite, PopTorch's default; a NaN is refused as PopTorch refuses it
    (popart_compiler CompilerImpl.cpp)."""
    norm = getattr(optimizer, "max_grad_norm", math.inf)
    norm = math.inf if norm is None else float(norm)
    if math.isnan(norm):
        raise Error("Maximum norm of gradients cannot be NaN", "poptorch_cpp_error")
    return None if math.isinf(norm) else norm


#: the value PopTorch takes as constant for an optimizer without ``variable_attrs`` (a torch.optim
#: one): poptorch python/_optimizer_attributes.py (weight decay 0, 1e-2 for AdamW; max weight norm
#: 65500)
_CONST_WHEN = {"weight_decay": 0.0, "max_weight_norm": 65500.0}


def _constant(optimizer, attr: str, value) -> bool:
    """Is ``attr`` (of value ``value`` in a group) a constant of the compiled optimizer? With
    ``variable_attrs`` (PopTorch's optimizers), as they say, else equal to PopTorch's constant."""
    variable_attrs = getattr(optimizer, "variable_attrs", None)
    if variable_attrs is not None:
        return variable_attrs.isConstant(attr)
    default = 1e-2 if attr == "weight_decay" and isinstance(optimizer, torch.optim.AdamW) else _CONST_WHEN[attr]
    return value == default


def per_weight(optimizer, names: dict[int, str]) -> dict[str, tuple[str, ...]]:
    """The per-weight settings of the :class:`sim.Optimizer` pricing ``optimizer`` (``names``: each
    parameter's name by ``id``), from its parameter groups: the weights whose weight decay
    (Adam, AdamW, LAMB) or max weight norm (LAMB) is the constant 0, which PopART compiles without
    the decay term or without LAMB's norms and trust ratio."""
    kind = sim_optimizer(optimizer)
    settings = {"no_weight_decay": [], "no_trust_ratio": []}
    for group in optimizer.param_groups:
        params = [names[id(p)] for p in group["params"] if id(p) in names]
        for field, attr, applies in (("no_weight_decay", "weight_decay", kind in DECAY_PER_WEIGHT),
                                     ("no_trust_ratio", "max_weight_norm", kind == "lamb")):
            value = group.get(attr)
            if applies and value == 0 and _constant(optimizer, attr, value):
                settings[field] += params
    return {field: tuple(sorted(v)) for field, v in settings.items()}


def combined_accum(optimizer) -> bool:
    """Does ``optimizer`` keep its gradients in its velocity (``SGD(use_combined_accum=True)`` with
    momentum, PopART's SGD1)? Without momentum PopART runs SGD0 either way (no velocity)."""
    return sim_optimizer(optimizer) == "sgd_momentum" and bool(getattr(optimizer, "use_combined_accum", False))


def unmodelled(optimizer) -> dict:
    """The optimizer's IPU arguments that have no modelled effect (for the run's notes):
    ``use_combined_accum`` is modelled with momentum (:func:`combined_accum`)."""
    given = dict(getattr(optimizer, "_ipusim_given", {}))
    if combined_accum(optimizer):
        given.pop("use_combined_accum", None)
    return given


def loss_scaling(optimizer) -> float:
    return float(getattr(optimizer, "loss_scaling", 1.0) or 1.0)


__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LAMB", "Optimizer", "VariableAttributes"]
