"""popxl-addons' ``AdamOptimizerStep``: Adam (with decoupled weight decay) on one variable, its moments
as named inputs (replica-sharded when the variable is a shard), written as popxl-addons writes it.

Called with an autodiff gradient (or an accumulator of one) the module is built again inline and taken
as the simulator's Adam update of the variable (:mod:`sim.popxl_addons.graph`), like the Adam modules of
Graphcore's PopXL tutorials; the gradient's scaling (loss scaling, global-norm clipping) is then part
of that update, which the run's notes say."""

from __future__ import annotations

from functools import partial

import numpy as np

from ... import popxl
from ...popxl import ops
from ...popxl.transforms import from_gradient
from ..module import Module

__all__ = ["AdamOptimizerStep"]


class AdamOptimizerStep(Module):

    @popxl.in_sequence()
    def build(self, var: popxl.Tensor, grad: popxl.Tensor, replica_grouping=None, *, lr, beta1=0.9, beta2=0.999,
              eps=1e-5, weight_decay=1e-2, first_order_dtype=popxl.float16, bias_correction: bool = True,
              loss_scaling=1, global_norm: popxl.Tensor | None = None, global_norm_max=None):
        scale = 1 if loss_scaling == 1 else 1 / loss_scaling
        if global_norm is not None:
            if global_norm_max is None:
                raise ValueError("AdamOptimizerStep: global_norm_max must be given with global_norm")
            if not isinstance(global_norm_max, popxl.Tensor):
                global_norm_max = popxl.constant(global_norm_max, popxl.float32)
            scale = (scale * global_norm_max) / ops.maximum(global_norm, global_norm_max)
        if global_norm is not None or loss_scaling != 1:
            if from_gradient(grad):
                popxl.gcg().ir._note("AdamOptimizerStep: the gradient's scaling (loss scaling, global-norm clipping) "
                                     "is part of the simulated Adam update")
            else:
                grad = ops.cast(grad, popxl.float32) * scale
        if var.meta_shape:
            shard_over = int(np.prod(var.meta_shape) // np.prod(var.shape))
            moments = [self.add_replica_sharded_variable_input(name, partial(np.zeros, var.meta_shape), dtype,
                                                               by_ref=True, replica_grouping=replica_grouping,
                                                               shard_over=shard_over)
                       for name, dtype in (("first_order", first_order_dtype), ("second_order", popxl.float32))]
        else:
            moments = [self.add_variable_input(name, partial(np.zeros, var.shape), dtype, by_ref=True,
                                               replica_grouping=replica_grouping)
                       for name, dtype in (("first_order", first_order_dtype), ("second_order", popxl.float32))]
        first_order, second_order = moments
        ops.var_updates.accumulate_moving_average_(first_order, grad, f=beta1)
        ops.var_updates.accumulate_moving_average_square_(second_order, grad, f=beta2)
        step = (self.add_variable_input("step", partial(np.zeros, ()), popxl.float32, by_ref=True)
                if bias_correction else None)
        updater = ops.var_updates.adam_updater(first_order, second_order, weight=var, weight_decay=weight_decay,
                                               time_step=step, beta1=beta1, beta2=beta2, epsilon=eps)
        ops.scaled_add_(var, updater, b=-lr)
