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
        centered = "_centered" if any(g.get("centered") for g in optimizer.param_groups) else ""
        momentum = "_momentum" if any(g.get("momentum", 0) for g in optimizer.param_groups) else ""
        return f"rmsprop{centered}{momentum}"
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


#: the value at which PopTorch takes a group attribute as constant for an optimizer without
#: ``variable_attrs`` (a torch.optim one): poptorch python/_optimizer_attributes.py (weight decay 0,
#: 1e-2 for AdamW; max weight norm 65500; loss scaling 1 unless automatic loss scaling is on); the
#: learning rate is never constant there, ``alpha``, ``nesterov`` and ``betas`` always are
_CONST_WHEN = {"weight_decay": 0.0, "max_weight_norm": 65500.0, "momentum": 0.0, "dampening": 0.0,
               "velocity_scaling": 1.0, "eps": 1e-08, "loss_scaling": 1.0}
_ALWAYS_CONST = ("alpha", "nesterov", "betas")


def _constant(optimizer, attr: str, value, auto_loss_scaling: bool = False) -> bool:
    """Is ``attr`` (of value ``value`` in a group) a constant of the compiled optimizer? With
    ``variable_attrs`` (PopTorch's optimizers), as they say, else equal to PopTorch's constant.
    Automatic loss scaling makes the loss scaling variable."""
    if attr == "loss_scaling" and auto_loss_scaling:
        return False
    variable_attrs = getattr(optimizer, "variable_attrs", None)
    if variable_attrs is not None:
        return variable_attrs.isConstant(attr)
    if attr == "lr":
        return False
    if attr in _ALWAYS_CONST:
        return True
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


#: PopART's optimizer tensors of one weight's update, each named by the PopTorch attributes it
#: is made of: its compound scalars (popart willow/src/sgd.cpp, adam.cpp, adaptive.cpp
#: ``getOptimizerInputs``) and what each depends on (compoundscalarhelper.cpp ``isConst``). SGD
#: without momentum is PopART's SGD0 (scaled learning rate, weight-decay scale factor); with
#: momentum SGD1 (combined) or SGD2 (separate; PopTorch glues its velocity scaling to the loss
#: scaling): scaled weight decay, scaled learning rate, scaled momentum, dampening scale factor,
#: and with Nesterov two more factors, the momentum and the weight decay; Adam, AdamW and LAMB:
#: learning rate, weight decay, beta1, beta2, epsilon, loss scaling, max weight norm, gradient
#: scaling; RMSprop: learning rate, weight decay, alpha, momentum, epsilon, loss scaling, gradient
#: scaling
_COMPOUND_SCALARS = {
    "sgd": (("lr", "loss_scaling", "dampening"), ("weight_decay", "lr", "dampening")),
    "sgd_momentum": (("dampening", "weight_decay", "velocity_scaling"), ("lr", "velocity_scaling"), ("momentum",),
                     ("dampening", "velocity_scaling", "loss_scaling")),
    "adam": (("lr",), ("weight_decay",), ("betas",), ("betas",), ("eps",), ("loss_scaling",), ("max_weight_norm",),
             ("loss_scaling",)),
    "rmsprop": (("lr",), ("weight_decay",), ("alpha",), ("momentum",), ("eps",), ("loss_scaling",), ("loss_scaling",)),
}
_SCALING_DEFAULTS = {"loss_scaling": 1.0, "velocity_scaling": 1.0}
_NESTEROV_SCALARS = (("dampening", "velocity_scaling", "loss_scaling"), ("velocity_scaling",), ("momentum",),
                     ("weight_decay",))


def optimizer_tensors(optimizer, names: dict[int, str], auto_loss_scaling: bool = False) -> dict[str, int]:
    """How many optimizer tensors PopART gives each weight's update (``names``: each parameter's
    name by ``id``): one per compound scalar not made of constants alone (:data:`_COMPOUND_SCALARS`).
    PopTorch gives every parameter its group's values (popart_compiler CompilerImpl.cpp
    ``updateGroups``: ``insertSpecific`` per tensor), so each weight has its own tensors; they are
    what PopART's OptimizerFromHost program writes to the IPUs."""
    kind = sim_optimizer(optimizer)
    family = "rmsprop" if kind.startswith("rmsprop") else {"adamw": "adam", "lamb": "adam"}.get(kind, kind)
    scalars = _COMPOUND_SCALARS[family]
    separate = kind == "sgd_momentum" and not combined_accum(optimizer)
    counts = {}
    for group in optimizer.param_groups:
        def variable(attr: str) -> bool:
            if separate and attr == "velocity_scaling":
                attr = "loss_scaling"
            # PopTorch reads a loss scaling and velocity scaling of 1 where there is none
            value = group.get(attr, getattr(optimizer, attr, _SCALING_DEFAULTS.get(attr)))
            if value is None:  # not an attribute of this optimizer: PopART's constant default
                return False
            return not _constant(optimizer, attr, value, auto_loss_scaling)

        group_scalars = scalars + (_NESTEROV_SCALARS if kind == "sgd_momentum" and group.get("nesterov") else ())
        count = sum(any(variable(a) for a in attrs) for attrs in group_scalars)
        counts.update({names[id(p)]: count for p in group["params"] if id(p) in names})
    return counts


#: the values PopART's ``validReplacement`` compares when an optimizer replaces the compiled one
#: (willow/src/sgd.cpp, adam.cpp, adaptive.cpp): (PopTorch attribute, PopART's name for them)
_REPLACED_VALUES = {
    "SGD": (("lr", "learning rates"), ("weight_decay", "weight decays"), ("momentum", "momentums"),
            ("velocity_scaling", "velocity scalings"), ("nesterov", "nesterov")),
    "Adam": (("lr", "learning rates"), ("weight_decay", "weight decays"), ("beta1", "beta1s"), ("beta2", "beta2s"),
             ("eps", "eps"), ("max_weight_norm", "mwn")),
    "Adaptive": (("lr", "learning rates"), ("weight_decay", "weight decays"), ("alpha", "alphas"),
                 ("momentum", "momentums"), ("eps", "eps")),
}


def popart_view(optimizer, names: dict[int, str], auto_loss_scaling: bool = False) -> dict:
    """What PopTorch hands PopART for ``optimizer`` (popart_compiler CompilerImpl.cpp
    ``getPopartOptimizer``): PopART's optimizer class and modes, and each weight's values of the
    attributes its ``validReplacement`` compares, as ``(value, constant)``, plus the loss scaling.
    ``setOptimizer`` writes the values to the IPUs when this changes (poptorch
    python/_poplar_executor.py ``_ipu_optimizer_is_dirty``)."""
    kind = sim_optimizer(optimizer)
    popart_type = "SGD" if kind.startswith("sgd") else "Adaptive" if kind.startswith("rmsprop") else "Adam"
    bias = bool(getattr(optimizer, "bias_correction", True))
    modes: tuple = {"adam": ("Adam", "L2Regularization"), "adamw": ("Adam", "Decay"),
                    "lamb": ("Lamb" if bias else "LambNoBias", "Decay")}.get(kind, ())
    if popart_type == "Adaptive":
        modes = ("CenteredRMSProp" if any(g.get("centered") for g in optimizer.param_groups) else "RMSProp",
                 "L2Regularization")
    if popart_type == "SGD":
        default = optimizer.defaults.get("momentum", 0.0)
        velocity = default != 0 or not _constant(optimizer, "momentum", default)
        variant = ("Combined" if combined_accum(optimizer) else "Separate") if velocity else ""
        dtypes = (str(getattr(optimizer, "accum_type", torch.float32)),
                  str(getattr(optimizer, "velocity_accum_type", torch.float32))) if variant == "Separate" else ()
        modes = (velocity, variant, dtypes)

    def pair(attr, value):
        if isinstance(value, torch.Tensor):
            value = float(value)
        return value, _constant(optimizer, attr, value, auto_loss_scaling)

    weights = {}
    for group in optimizer.param_groups:
        values = {}
        for attr, _ in _REPLACED_VALUES[popart_type]:
            if attr in ("beta1", "beta2"):
                betas = group.get("betas", (0.9, 0.999))
                values[attr] = (betas[attr == "beta2"], _constant(optimizer, "betas", betas))
            elif attr in group:
                values[attr] = pair(attr, group[attr])
        weights.update({names[id(p)]: values for p in group["params"] if id(p) in names})
    return {"type": popart_type, "modes": modes, "loss_scaling": pair("loss_scaling", loss_scaling(optimizer)),
            "weights": weights}


def replacement_error(compiled: dict, new: dict) -> str | None:
    """PopART's error when the optimizer ``new`` (:func:`popart_view`) replaces ``compiled``, in the
    order ``Ir::updateOptimizer``'s ``validReplacement`` checks; None when it may. A constant is
    compiled into the program: it cannot change, nor become variable (PopTorch's user guide,
    "Constant attributes")."""
    if new["type"] != compiled["type"]:
        return f"Can not replace optimizer of type {compiled['type']} with new optimizer of type {new['type']}"
    if compiled["type"] != "SGD" and new["modes"] != compiled["modes"]:  # Adam's and Adaptive's come first
        return (f"{compiled['type']} modes do not match" if new["modes"][0] != compiled["modes"][0]
                else "Weight decay modes do not match")

    def problem(old, now) -> str | None:
        if old[1] != now[1]:
            return ("Can not replace a constant value with a non constant value." if old[1] else
                    "Can not replace a non constant value with a constant value.")
        if old[1] and old[0] != now[0]:
            return "Values are constant but do not match."
        return None

    why = problem(compiled["loss_scaling"], new["loss_scaling"])
    if why:
        return f"Problem with loss scaling. {why}"
    for attr, name in _REPLACED_VALUES[compiled["type"]]:
        for weight in sorted(compiled["weights"]):
            old, now = compiled["weights"][weight].get(attr), new["weights"].get(weight, {}).get(attr)
            why = problem(old, now) if old is not None and now is not None else None
            if why:
                return (f"Problem with {name}. OptimizerValue for tensor {weight} is not a valid replacement.{why} "
                        f"({attr} was {old[0]!r}, {'a constant' if old[1] else 'variable'}, when the model compiled; "
                        f"now {now[0]!r}, {'a constant' if now[1] else 'variable'}: an attribute given to a "
                        "poptorch.optim optimizer is variable, one left to its default constant, and a torch.optim "
                        "one is constant at PopTorch's default value; make it variable before the first call, "
                        "optimizer.variable_attrs.markAsVariable, or give it then)")
    if new["modes"] != compiled["modes"]:  # SGD's, after its values
        (velocity, variant, dtypes), (new_velocity, new_variant, new_dtypes) = compiled["modes"], new["modes"]
        if velocity != new_velocity:  # PopART's words, whichever has the velocity
            return "this does not require a velocity tensor, but other does."
        if variant != new_variant:
            return f"this has SGDAccumulatorAndMomentum {variant}, but other has {new_variant}"
        return (f"this has SGDAccumulatorAndMomentum::Separate and accumulator types {dtypes}, but other has "
                f"{new_dtypes}")
    return None


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
