"""A popxl-addons-style layer over :mod:`sim.popxl`: ``import sim.popxl_addons as addons``.

Graphcore's PopXL tutorials and models are written with popxl-addons (graphcore/popxl-addons):
modules whose ``build`` adds named inputs (``Module``, ``add_variable_input``), dotted-name
collections of tensors (``NamedTensors``, ``DotTree``), factories that make the variables those
inputs need (``NamedVariableFactories.init()``), graphs with named inputs that are bound and called
(``GraphWithNamedArgs``, ``BoundGraph``), ``autodiff`` and ``ops.cross_entropy_with_grad``. This
package gives the same names and behaviour on the simulator's PopXL, so such programs run in the
simulator (``ipusim script`` maps ``import popxl_addons`` here). What popxl-addons has beyond it
(its C++ custom ops, pipelining and phased-execution transforms, remote-buffer helpers) is
refused by name with :class:`~sim.popxl.NotModelledError`.
"""

from __future__ import annotations

from ..popxl.errors import not_modelled
from . import ops
from .dot_tree import DotTree
from .named_tensors import NamedTensors
from .graph import BoundGraph, GraphWithNamedArgs
from .module import GraphCache, Module
from .pipeline import pipelined_execution
from .transforms import autodiff, autodiff_with_accumulation
from . import transforms
from .variable_factory import NamedVariableFactories, VariableFactory

__all__ = ["BoundGraph", "DotTree", "GraphCache", "GraphWithNamedArgs", "Module", "NamedTensors",
           "NamedVariableFactories", "VariableFactory", "autodiff", "autodiff_with_accumulation", "ops",
           "pipelined_execution", "transforms"]


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl_addons", name, __all__)
