"""PopXL's ``popxl.ops``, recording into the simulator's graph.

Each op checks its inputs (they must be tensors of the graph being built; shapes must agree)
and adds the matching op of the simulator's graph, whose cost model prices it. Names,
signatures and defaults follow PopXL; arguments that change numerics only (seeds, partials
types, reduction kinds) are accepted and have no effect on the simulated time. An op PopXL has
and the simulator does not raises :class:`~sim.popxl.errors.NotModelledError` naming the ops
that are supported.

The ops are defined in :mod:`sim.popxl.ops._core`, :mod:`sim.popxl.ops._math`,
:mod:`sim.popxl.ops._select` and :mod:`sim.popxl.ops.remote` (re-exported here),
:mod:`sim.popxl.ops.collectives` and :mod:`sim.popxl.ops.var_updates`. Importing this package
registers the ops behind :class:`~sim.popxl.tensor.Tensor`'s methods and operators
(``t.reshape(...)``, ``a + b``, ``t[0]``, ...).
"""

from __future__ import annotations

from ..errors import not_modelled
from ..tensor import register_tensor_ops
from . import _core, collectives, var_updates
# popxl.ops.call, .conv and .negative_log_likelihood are modules too, as in PopXL (``from popxl.ops.call
# import CallSiteInfo``); imported before the functions of the same names, which then replace them here
from . import call as _call_module
from . import conv as _conv_module
from . import negative_log_likelihood as _nll_module
from . import utils
from .conv import PadType
from .remote import io_tile_copy, remote_load, remote_load_, remote_store
from .code_copy import remote_code_load
from ._core import (CallSiteInfo, ConditionalSiteInfo, add, add_, call, call_with_info, cast, concat, concat_,
                    conditional, conditional_with_info, conv, conv_pow2scaled, conv_transpose,
                    conv_transpose_pow2scaled, detach, detach_, div, dropout, exp, exp_, flatten, flatten_, gelu,
                    gelu_, group_norm, host_load, host_store, identity, init, ipu_copy, layer_norm, matmul,
                    matmul_pow2scaled, max, mean, mul, negate, negate_, nll_loss_with_softmax_grad,
                    pow2scale_cast_from_fp8, pow2scale_cast_to_fp8, print_tensor, reduce_mean, reduce_sum, relu,
                    relu_, rename, repeat, repeat_with_info, reshape, reshape_, scaled_add, scaled_add_, sigmoid,
                    sigmoid_, slice, slice_, softmax, split, sqrt, sub, sum, tanh, tanh_, transpose, transpose_)

from ._math import (abs, argmax, argmin, average_pool, batch_norm_inference, ceil, clamp, clip, cos, create_random_seed,
                    cumsum, dynamic_slice, dynamic_update, dynamic_update_, equal, floor, fmod, geluerf, geluerf_,
                    greater, increment_mod, increment_mod_, interpolate, isfinite, isinf, isnan, l1, l2, lamb_square,
                    log, log2, logical_and, logical_not, logical_or, logsum, logsumexp, max_pool, maximum, min, onehot,
                    pow, prod, random_normal, random_uniform, shaped_dropout, sign, sin, split_random_seed, squeeze,
                    sumsquare, swish, swish_, topk, where)
from ._select import (gather, groupedgather, histogram, median, nll_loss, roi_align, scatter, scatter_reduce,
                      subsample, tied_gather)

register_tensor_ops(add=add, add_=add_, detach=detach, div=div, ipu_copy=ipu_copy, matmul=matmul,
                    mul=mul, negate=negate, reshape=reshape, slice=slice, sub=sub, transpose=transpose,
                    pow=pow, fmod=fmod, logical_not=logical_not, logical_and=logical_and, logical_or=logical_or,
                    gather=gather, where=where)

SUPPORTED = sorted(n for n, v in dict(globals()).items() if callable(v) and n[0].islower()
                   and getattr(v, "__module__", "") in (_core.__name__, remote_load.__module__, abs.__module__,
                                                        gather.__module__, remote_code_load.__module__)) + [
                       "collectives", "var_updates"]

__all__ = ["CallSiteInfo", "ConditionalSiteInfo", "PadType", *SUPPORTED]


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl.ops", name, SUPPORTED, op=True)
