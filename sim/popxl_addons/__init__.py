"""A popxl-addons-style layer over :mod:`sim.popxl`: ``import sim.popxl_addons as addons``.

Graphcore's PopXL tutorials and models are written with popxl-addons (graphcore/popxl-addons):
modules whose ``build`` adds named inputs (``Module``, ``add_variable_input``), dotted-name
collections of tensors (``NamedTensors``, ``DotTree``), factories that make the variables those
inputs need (``NamedVariableFactories.init()``), graphs with named inputs that are bound and called
(``GraphWithNamedArgs``, ``BoundGraph``), ``autodiff`` and ``ops.cross_entropy_with_grad``. This
package gives the same names and behaviour on the simulator's PopXL, so such programs run in the
simulator (``ipusim script`` maps ``import popxl_addons`` here). Its replicated tensor sharding
(``rts``) and remote-buffer helpers (``remote``) are here too. What popxl-addons has beyond it (its
C++ custom ops, phased-execution transforms) is refused by name with :class:`~sim.popxl.NotModelledError`.
"""

from __future__ import annotations

from ..popxl.errors import not_modelled
from . import array_munging, layers, named_replica_grouping, ops, patterns, remote, rts, task_session, transforms, utils
from .dot_tree import DotTree
from .graph import BoundGraph, GraphWithNamedArgs
from .module import GraphCache, Module
from .named_tensors import NamedTensorData, NamedTensors
from .ops import cross_entropy, cross_entropy_with_grad, host_load, host_store
from .pipeline import pipelined_execution
from .remote import load_remote_graph, named_variable_buffers, store_remote_graph
from .streams import InputStreams, OutputStreams
from .task_session import TaskSession
from .transforms import (autodiff, autodiff_with_accumulation, recompute_graph,
                         set_available_memory_proportion_by_ipu)
from .utils import OrderedDict, WeightsDict, timer
from .variable_factory import NamedVariableFactories, VariableFactory

GIT_COMMIT = None  # popxl-addons' commit (from git): none here

__all__ = ["BoundGraph", "DotTree", "GraphCache", "GraphWithNamedArgs", "InputStreams", "Module", "NamedTensorData",
           "NamedTensors", "NamedVariableFactories", "OrderedDict", "OutputStreams", "TaskSession", "VariableFactory",
           "WeightsDict",
           "autodiff", "autodiff_with_accumulation", "cross_entropy", "cross_entropy_with_grad", "host_load",
           "host_store", "layers", "load_remote_graph", "named_replica_grouping", "named_variable_buffers", "ops",
           "patterns", "pipelined_execution", "recompute_graph", "remote", "rts",
           "set_available_memory_proportion_by_ipu", "store_remote_graph", "timer", "transforms", "utils"]


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl_addons", name, __all__)
