"""popxl-addons' ``autodiff`` on a :class:`~sim.popxl_addons.graph.GraphWithNamedArgs`: PopXL's
autodiff of its graph (in the simulator, the simulated training's backward pass: see
:mod:`sim.popxl.transforms.autodiff`), returned as a graph with named inputs whose
``grad_graph_info`` connects it to the forward call."""

from __future__ import annotations

from ..popxl import transforms as popxl_transforms
from .graph import GraphWithNamedArgs


def autodiff(graph: GraphWithNamedArgs, grads_provided=None, grads_required=None, called_graphs_grad_info=None,
             return_all_grad_graphs: bool = False) -> GraphWithNamedArgs:
    """The grad graph of ``graph``: called with the gradient of each output (``grads_provided``, by
    default all) and ``args=grad_graph_info.inputs_dict(forward_call_info)``, it gives the gradient of
    each input in ``grads_required`` (by default all of the forward graph's inputs, named ones
    included)."""
    info = popxl_transforms.autodiff(graph.graph, grads_provided, grads_required, called_graphs_grad_info)
    return GraphWithNamedArgs(info.graph, grad_graph_info=info)
