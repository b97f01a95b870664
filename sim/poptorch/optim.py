"""``poptorch.optim``: SGD, Adam, AdamW, RMSprop and LAMB with PopTorch's extra arguments.

They are ``torch.optim`` optimizers (LAMB, which torch lacks, is implemented here), so the
weight update of a ``trainingModel`` really runs on the CPU. PopTorch's IPU-specific arguments
(loss scaling, accumulator dtypes, the TensorFlow variant of RMSprop) are accepted and kept in
the parameter groups; ``max_grad_norm`` clips the gradients' global norm before each step, as
on the IPU. The simulator prices the update with the matching :class:`sim.Optimizer`
(:func:`sim_optimizer`).
"""

from __future__ import annotations

import math

import torch

from ._errors import error

_IPU_ARGS = ("loss_scaling", "velocity_scaling", "use_combined_accum", "accum_type",
             "first_order_momentum_accum_type", "second_order_momentum_accum_type",
             "use_tf_variant", "max_grad_norm", "max_weight_norm", "bias_correction")


class VariableAttributes:
    """Which optimizer attributes may change after compilation (PopTorch bookkeeping)."""

    def __init__(self, variable: list[str], constant: list[str]):
        self._variable = set(variable)
        self._constant = set(constant)

    def markAsConstant(self, attr: str) -> None:
        self._variable.discard(attr)
        self._constant.add(attr)

    def markAsVariable(self, attr: str) -> None:
        self._constant.discard(attr)
        self._variable.add(attr)

    def isConstant(self, attr: str) -> bool:
        return attr in self._constant


class Optimizer:
    """Mixin of PopTorch's optimizers: IPU arguments, ``variable_attrs``, gradient clipping."""

    def _ipu_setup(self, extras: dict) -> None:
        self.variable_attrs = VariableAttributes(list(self.defaults), [])
        for key, value in extras.items():
            self.defaults[key] = value
            for group in self.param_groups:
                group.setdefault(key, value)

    def _clip(self) -> None:
        for group in self.param_groups:
            norm = group.get("max_grad_norm")
            if norm is not None and math.isfinite(norm):
                params = [p for p in group["params"] if p.grad is not None]
                if params:
                    torch.nn.utils.clip_grad_norm_(params, norm)


def _given(**kwargs) -> dict:
    return {k: v for k, v in kwargs.items() if v is not None}


class SGD(Optimizer, torch.optim.SGD):
    """Stochastic gradient descent (with momentum, dampening, weight decay, Nesterov)."""

    def __init__(self, params, lr, momentum=None, dampening=None, weight_decay=None, nesterov=None,
                 maximize=None, foreach=None, differentiable=None, loss_scaling=None,
                 velocity_scaling=None, use_combined_accum=None):
        torch.optim.SGD.__init__(self, params, lr=lr, **_given(
            momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
            maximize=maximize, foreach=foreach, differentiable=differentiable))
        self._ipu_setup(_given(loss_scaling=loss_scaling, velocity_scaling=velocity_scaling,
                               use_combined_accum=use_combined_accum))

    def step(self, closure=None):
        self._clip()
        return torch.optim.SGD.step(self, closure)


class Adam(Optimizer, torch.optim.Adam):
    """Adam (L2 weight decay); ``amsgrad`` is not supported on the IPU."""

    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None, amsgrad=None,
                 foreach=None, maximize=None, capturable=None, differentiable=None, fused=None,
                 loss_scaling=None, accum_type=None, first_order_momentum_accum_type=None,
                 second_order_momentum_accum_type=None, max_grad_norm=None):
        if amsgrad:
            raise ValueError("Only non-amsgrad Adam is supported on the IPU")
        torch.optim.Adam.__init__(self, params, **_given(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
            maximize=maximize, capturable=capturable, differentiable=differentiable, fused=fused))
        self._ipu_setup(_given(loss_scaling=loss_scaling, accum_type=accum_type,
                               first_order_momentum_accum_type=first_order_momentum_accum_type,
                               second_order_momentum_accum_type=second_order_momentum_accum_type,
                               max_grad_norm=max_grad_norm))

    def step(self, closure=None):
        self._clip()
        return torch.optim.Adam.step(self, closure)


class AdamW(Optimizer, torch.optim.AdamW):
    """Adam with decoupled weight decay (default 0.01)."""

    def __init__(self, params, lr=None, betas=None, eps=None, weight_decay=None, amsgrad=None,
                 foreach=None, maximize=None, capturable=None, differentiable=None, fused=None,
                 loss_scaling=None, bias_correction=None, accum_type=None,
                 first_order_momentum_accum_type=None, second_order_momentum_accum_type=None,
                 max_grad_norm=None):
        if amsgrad:
            raise ValueError("Only non-amsgrad AdamW is supported on the IPU")
        torch.optim.AdamW.__init__(self, params, **_given(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
            maximize=maximize, capturable=capturable, differentiable=differentiable, fused=fused))
        self._ipu_setup(_given(loss_scaling=loss_scaling, bias_correction=bias_correction,
                               accum_type=accum_type,
                               first_order_momentum_accum_type=first_order_momentum_accum_type,
                               second_order_momentum_accum_type=second_order_momentum_accum_type,
                               max_grad_norm=max_grad_norm))

    def step(self, closure=None):
        self._clip()
        return torch.optim.AdamW.step(self, closure)


class RMSprop(Optimizer, torch.optim.RMSprop):
    """RMSprop (``use_tf_variant`` accepted; the CPU step is torch's)."""

    def __init__(self, params, lr=None, alpha=None, eps=None, weight_decay=None, momentum=None,
                 centered=None, foreach=None, maximize=None, differentiable=None, loss_scaling=None,
                 accum_type=None, first_order_momentum_accum_type=None,
                 second_order_momentum_accum_type=None, use_tf_variant=None):
        torch.optim.RMSprop.__init__(self, params, **_given(
            lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
            centered=centered, foreach=foreach, maximize=maximize, differentiable=differentiable))
        self._ipu_setup(_given(loss_scaling=loss_scaling, accum_type=accum_type,
                               first_order_momentum_accum_type=first_order_momentum_accum_type,
                               second_order_momentum_accum_type=second_order_momentum_accum_type,
                               use_tf_variant=use_tf_variant))


class LAMB(Optimizer, torch.optim.Optimizer):
    """LAMB: Adam moments with a per-layer trust ratio ||w|| / ||update||."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 bias_correction=True, loss_scaling=None, max_weight_norm=None, accum_type=None,
                 first_order_momentum_accum_type=None, second_order_momentum_accum_type=None):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, max_weight_norm=max_weight_norm)
        torch.optim.Optimizer.__init__(self, params, defaults)
        self._ipu_setup(_given(loss_scaling=loss_scaling, accum_type=accum_type,
                               first_order_momentum_accum_type=first_order_momentum_accum_type,
                               second_order_momentum_accum_type=second_order_momentum_accum_type))

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
                c1 = 1 - beta1 ** state["step"] if group["bias_correction"] else 1.0
                c2 = 1 - beta2 ** state["step"] if group["bias_correction"] else 1.0
                update = (m / c1) / ((v / c2).sqrt() + group["eps"]) + group["weight_decay"] * p
                w_norm = p.norm()
                if group.get("max_weight_norm") is not None:
                    w_norm = w_norm.clamp(max=group["max_weight_norm"])
                u_norm = update.norm()
                trust = (w_norm / u_norm).item() if w_norm > 0 and u_norm > 0 else 1.0
                p.add_(update, alpha=-group["lr"] * trust)
        return loss


def sim_optimizer(optimizer) -> str:
    """The :class:`sim.Optimizer` name that prices ``optimizer``'s weight update."""
    if isinstance(optimizer, LAMB):
        return "lamb"
    if isinstance(optimizer, torch.optim.AdamW):
        return "adamw"
    if isinstance(optimizer, torch.optim.Adam):
        return "adam"
    if isinstance(optimizer, torch.optim.RMSprop):
        return "rmsprop"
    if isinstance(optimizer, torch.optim.SGD):
        momentum = any(g.get("momentum", 0) for g in optimizer.param_groups)
        return "sgd_momentum" if momentum else "sgd"
    raise error(f"Unsupported optimizer type {type(optimizer).__name__}: the IPU supports SGD, "
                "Adam, AdamW, RMSprop and LAMB (from torch.optim or poptorch.optim)")


__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LAMB", "Optimizer", "VariableAttributes"]
