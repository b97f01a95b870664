"""A popxl-addons-style layer over :mod:`sim.popxl`: ``import sim.popxl_addons as addons``.

Graphcore's PopXL tutorials and models are written with popxl-addons (graphcore/popxl-addons):
modules whose ``build`` adds named inputs (``Module``, ``add_variable_input``), dotted-name
collections of tensors (``NamedTensors``, ``DotTree``), factories that make the variables those
inputs need (``NamedVariableFactories.init()``), graphs with named inputs that are bound and called
(``GraphWithNamedArgs``, ``BoundGraph``), ``autodiff`` and ``ops.cross_entropy_with_grad``. This
package gives the same names and behaviour on the simulator's PopXL, so such programs run in the
simulator (``ipusim script`` maps ``import popxl_addons`` here). Its replicated tensor sharding
(``rts``), remote-buffer helpers (``remote``), host-side ``array_munging``, ``TaskSession``,
``seed_variable``, batch serialisation (``transforms.batch_serialisation``: phased execution's
loops) and the custom ops of tensor-parallel models (``ops.replicated_all_reduce_TP``,
``ops.rotary_pos_embed``, ``ops.layer_norm_distributed``, ``ops.cross_entropy_sharded_loss``,
``ops.grad_reduce_square_add``) are here too. What popxl-addons has beyond it (its other C++ custom
ops, routing tensors into graphs) is refused by name with
:class:`~sim.popxl.NotModelledError`.
"""

from __future__ import annotations

from ..popxl.errors import not_modelled
from . import (array_munging, layers, named_replica_grouping, ops, optimizers, patterns, remote, rts, task_session,
               transforms, utils)
from .dot_tree import DotTree
from .graph import BoundGraph, GraphWithNamedArgs
from .module import GraphCache, Module
from .named_tensors import NamedTensorData, NamedTensors
from .ops import cross_entropy, cross_entropy_with_grad, host_load, host_store
from .pipeline import pipelined_execution
from .array_munging import *  # noqa: F401,F403 - popxl-addons exports these two modules' names at the top too
from .remote import *  # noqa: F401,F403
from .seed_variable import seed_variable
from .streams import InputStreams, OutputStreams
from .task_session import TaskSession
from .transforms import (autodiff, autodiff_with_accumulation, batch_serial_buffer, batch_serialise,
                         batch_serialise_fwd_and_grad, recompute_graph, set_available_memory_proportion_by_ipu,
                         set_graph_available_memory_proportion_by_ipu)
from .utils import OrderedDict, WeightsDict, timer
from .variable_factory import NamedVariableFactories, VariableFactory

GIT_COMMIT = None  # popxl-addons' commit (from git): none here

__all__ = ["BoundGraph", "DotTree", "GraphCache", "GraphWithNamedArgs", "InputStreams", "Module", "NamedTensorData",
           "NamedTensors", "NamedVariableFactories", "OrderedDict", "OutputStreams", "TaskSession", "VariableFactory",
           "WeightsDict", "array_munging", "autodiff", "autodiff_with_accumulation", "batch_serial_buffer",
           "batch_serialise", "batch_serialise_fwd_and_grad", "cross_entropy",
           "cross_entropy_with_grad", "host_load", "host_store", "layers", "named_replica_grouping", "ops", "patterns",
           "optimizers", "pipelined_execution", "recompute_graph", "remote", "rts", "seed_variable",
           "set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu",
           "timer", "transforms", "utils", *array_munging.__all__,
           *remote.__all__]


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl_addons", name, __all__)
