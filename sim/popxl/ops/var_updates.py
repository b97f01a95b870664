"""``popxl.ops.var_updates``: in-place updates of variables (optimizers, accumulators).

On ordinary tensors each is an op of the simulated graph that writes its first argument in
place: the accumulators as ``accumulate``, ``copy_var_update_`` as ``copy``, ``adam_updater`` as
``adam_updater`` (Adam's phase 1: the updater map, sim/cost/rules.py ``adam_sets``) and
``adam_var_update`` as ``sgd_update`` (w -= lr x updater). Given an
autodiff gradient (see :mod:`sim.popxl.transforms`), an update is instead taken as the
simulator's optimizer update of that weight (``sim/graph/training.py``): it is not recorded again,
and the Adam/LAMB updaters select the ``adam``/``lamb`` optimizer. A variable an update
accumulates a gradient into (Adam's moments) is optimizer state from then on: the updates that
read it are part of the same optimizer update, and the variable leaves the simulated graph,
whose optimizer keeps that state itself.
"""

from __future__ import annotations

from ..context import get_current_context
from ..errors import not_modelled
from ..tensor import GradTensor, Tensor
from ..transforms import _gradient_update, from_gradient
from ..transforms.autodiff import _is_state
from ._core import _as_tensor, _inplace
from ._math import lamb_square  # noqa: F401 - PopXL has it as ops.lamb_square; kept here too


def _update(fn: str, kind: str, t: Tensor, others, attrs=None, new_output: bool = False) -> Tensor:
    derived = [x for x in (t, *others) if from_gradient(x)]
    if derived:  # part of the optimizer update: an autodiff gradient, or a state accumulated from one
        return _gradient_update(fn, None if new_output else t, derived[0])
    if not new_output:
        return _inplace(kind, t, others, f"ops.var_updates.{fn}", attrs)
    g = get_current_context().graph
    ins = [g._own(t, f"ops.var_updates.{fn}")] + [_as_tensor(g, x, t, f"ops.var_updates.{fn}") for x in others]
    with g._building() as b:
        out = b.op(kind, [x._sim for x in ins], [t.shape], attrs, name=g._scoped(fn))[0]
    return g._wrap(out, t.dtype)


def accumulate_(t: Tensor, X: Tensor, f=None) -> Tensor:
    """``t += f * X``."""
    return _update("accumulate_", "accumulate", t, [X])


def accumulate_square_(t: Tensor, X: Tensor, f=1.0) -> Tensor:
    """``t += f * X^2``."""
    return _update("accumulate_square_", "accumulate", t, [X])


def accumulate_mean_(t: Tensor, X: Tensor, step) -> Tensor:
    """Running mean: ``t = (step / (step + 1)) * t + X / (step + 1)``."""
    return _update("accumulate_mean_", "accumulate", t, [X])


def accumulate_moving_average_(t: Tensor, X: Tensor, f) -> Tensor:
    """``t = f * t + (1 - f) * X``."""
    return _update("accumulate_moving_average_", "accumulate", t, [X])


def accumulate_moving_average_square_(t: Tensor, X: Tensor, f) -> Tensor:
    """``t = f * t + (1 - f) * X^2``."""
    return _update("accumulate_moving_average_square_", "accumulate", t, [X])


def accumulator_scale_(t: Tensor, f) -> Tensor:
    """``t *= f`` in place (a scale of the accumulator)."""
    return _update("accumulator_scale_", "scale", t, [])


def accumulator_zero_(t: Tensor) -> Tensor:
    """``t = 0`` in place (PopXL's accumulator_scale_ by 0)."""
    return _update("accumulator_zero_", "scale", t, [])


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """``t = X`` (the same shape: no broadcasting)."""
    if isinstance(X, Tensor) and not isinstance(X, GradTensor) and X.shape != t.shape:
        raise ValueError(f"ops.var_updates.copy_var_update_: {X.id!r} of shape {X.shape} cannot be copied into "
                         f"{t.id!r} of shape {t.shape}")
    return _update("copy_var_update_", "copy", t, [X])


def _updater(fn: str, acc_first_order: Tensor, acc_second_order: Tensor, weight, time_step, weight_decay) -> Tensor:
    """The update term of Adam, LAMB or Adamax: PopART's AdamUpdaterOp in that mode, one popops map over
    the moments (its ``wd * w`` term only when the weight decay is a tensor or a non-zero number, as PopXL's
    ``weight_decay_is_required``, which then needs the weight)."""
    decay = isinstance(weight_decay, Tensor) or (weight_decay is not None and weight_decay != 0.0)
    if decay and weight is None:
        raise ValueError("Weight decay requires weight to not be None.")
    others = [x for x in (acc_second_order, weight if decay else None, time_step) if isinstance(x, Tensor)]
    if isinstance(time_step, Tensor) and any(from_gradient(x) for x in (acc_first_order, acc_second_order)):
        _is_state(time_step)  # the updater counts the step in place (PopART's AdamUpdaterOp modifies it)
    return _update(fn, "adam_updater", acc_first_order, others, None if decay else {"weight_decay": False},
                   new_output=True)


def adam_updater(acc_first_order: Tensor, acc_second_order: Tensor, weight: Tensor | None = None,
                 time_step: Tensor | None = None, weight_decay=None, beta1=None,
                 beta2=None, epsilon: float = 1e-07) -> Tensor:
    """Adam's update term from the two moment accumulators (a new tensor). Its ``wd * w`` term
    runs only when the weight decay is a tensor or a non-zero number, as in PopXL
    (``weight_decay_is_required``); it then needs the weight. Bias correction (``time_step``)
    needs both betas (PopXL's check)."""
    if time_step is not None and (beta1 is None or beta2 is None):
        raise ValueError("Bias correction requires both beta1 and beta2 to not be None.")
    return _updater("adam_updater", acc_first_order, acc_second_order, weight, time_step, weight_decay)


def lamb_updater(acc_first_order: Tensor, acc_second_order: Tensor, weight: Tensor | None = None,
                 time_step: Tensor | None = None, weight_decay=None, beta1=None,
                 beta2=None, epsilon: float = 1e-07) -> Tensor:
    """LAMB's update term (PopART's AdamUpdaterOp in Lamb mode: Adam's map, scaled later by the trust
    ratio ``r1 / r2`` in ``adam_var_update``), with PopXL's checks; of an autodiff gradient it makes the
    simulated optimizer LAMB."""
    if time_step is not None and (beta1 is None or beta2 is None):
        raise ValueError("Bias correction requires both beta1 and beta2 to not be None.")
    return _updater("lamb_updater", acc_first_order, acc_second_order, weight, time_step, weight_decay)


def adamax_updater(acc_first_order: Tensor, acc_second_order: Tensor, weight: Tensor | None = None,
                   time_step: Tensor = None, weight_decay=None, beta1=0.9, epsilon: float = 1e-07) -> Tensor:
    """Adamax's update term (PopART's AdamUpdaterOp in AdaMax mode, priced as Adam's map); it needs the
    time step, as PopXL checks; of an autodiff gradient it is the simulated Adam update."""
    if time_step is None:
        raise ValueError("AdaMax requires time_step to not be None.")
    return _updater("adamax_updater", acc_first_order, acc_second_order, weight, time_step, weight_decay)


def adam_var_update(t: Tensor, x: Tensor, r1=None, r2=None, learning_rate=None,
                    max_weight_norm=None) -> Tensor:
    """``t -= learning_rate * x`` (scaled by LAMB's trust ratio ``r1 / r2``, which PopXL requires
    for Adam too: the optimizer is LAMB only when ``lamb_square`` made them)."""
    if from_gradient(x) or isinstance(t, GradTensor):
        return _gradient_update("adam_var_update", t, x if from_gradient(x) else t)
    return _update("adam_var_update", "sgd_update", t, [x])


SUPPORTED = ("accumulate_", "accumulate_square_", "accumulate_mean_", "accumulate_moving_average_",
             "accumulate_moving_average_square_", "accumulator_scale_", "accumulator_zero_", "copy_var_update_",
             "adam_updater", "lamb_updater", "adamax_updater", "lamb_square",
             "adam_var_update")


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl.ops.var_updates", name, SUPPORTED, op=True)
