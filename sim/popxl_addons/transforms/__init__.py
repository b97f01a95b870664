"""popxl-addons' transforms of a :class:`~sim.popxl_addons.graph.GraphWithNamedArgs`: ``autodiff``
(PopXL's autodiff of its graph: in the simulator, the simulated training's backward pass, see
:mod:`sim.popxl.transforms.autodiff`; returned as a graph with named inputs whose ``grad_graph_info``
connects it to the forward call), ``autodiff_with_accumulation`` (the same, accumulating gradients
into named inputs), ``recompute_graph``, ``set_available_memory_proportion_by_ipu`` and
``disable_fc_pass`` / ``enable_fc_pass`` (:mod:`.use_fc_pass`), ``repeat_graph`` of the main graph
(:mod:`.repeat_graph`) and batch serialisation (:mod:`.batch_serialisation`)."""

from __future__ import annotations

from functools import partial

import numpy as np

from ... import popxl
from ...popxl import ops
from ...popxl import transforms as popxl_transforms
from ...popxl.transforms.autodiff import recompute_grad_graph
from ..graph import GraphWithNamedArgs, InlineCallInfo, called_grad_infos
from ..named_tensors import NamedTensors
from ..variable_factory import NamedVariableFactories, VariableFactory
from . import batch_serialisation, use_fc_pass
from .batch_serialisation import (RemoteHandle, batch_serial_buffer, batch_serialise,  # noqa: F401 - popxl-addons'
                                  batch_serialise_fwd_and_grad)
from .repeat_graph import repeat_graph
from .use_fc_pass import disable_fc_pass, enable_fc_pass


def autodiff(graph: GraphWithNamedArgs, grads_provided=None, grads_required=None, called_graphs_grad_info=None,
             return_all_grad_graphs: bool = False) -> GraphWithNamedArgs:
    """The grad graph of ``graph``: called with the gradient of each output (``grads_provided``, by
    default all) and ``args=grad_graph_info.inputs_dict(forward_call_info)``, it gives the gradient of
    each input in ``grads_required`` (by default all of the forward graph's inputs, named ones
    included)."""
    graph = graph if isinstance(graph, GraphWithNamedArgs) else GraphWithNamedArgs(graph)
    info = popxl_transforms.autodiff(graph.graph, grads_provided, grads_required,
                                     called_grad_infos(graph, called_graphs_grad_info))
    return GraphWithNamedArgs(info.graph, grad_graph_info=info)


class Accumulation:
    """The accumulators a grad graph made by ``autodiff_with_accumulation`` adds its gradients to:
    which outputs (``indices``, of its required gradients) go to which named input (``names``), and
    the count ``mean_accum_counter``. Its named inputs are :class:`Slot` placeholders, bound by name."""

    COUNTER = "mean_accum_counter"

    def __init__(self, indices: list[int], names: list[str]):
        self.indices, self.names = indices, names
        self._slots: dict[str, Slot] = {}

    def slot(self, name: str, shape: tuple = (), dtype=popxl.float32) -> "Slot":
        return self._slots.setdefault(name, Slot(name, shape, dtype))

    def call(self, graph: popxl.Graph, inputs: tuple, inputs_dict: dict) -> "InlineCallInfo":
        """The grad graph's call, then each accumulator's running mean of its gradient and the
        count's increment, in order (PopXL's ``accumulate_mean_`` and ``accumulate_``)."""
        bound = {slot.name: t for slot, t in inputs_dict.items() if isinstance(slot, Slot)}
        missing = [n for n in [self.COUNTER] + self.names if n not in bound]
        if missing:
            raise KeyError(f"call({graph.name!r}): bind the accumulators first (bwd_graph.bind(factories.init())); "
                           f"missing: {', '.join(missing)}")
        site = ops.call_with_info(graph, *inputs, inputs_dict={k: v for k, v in inputs_dict.items()
                                                               if not isinstance(k, Slot)})
        grads = site.outputs
        counter = bound[self.COUNTER]
        with popxl.in_sequence(True):
            for index, name in zip(self.indices, self.names):
                ops.var_updates.accumulate_mean_(bound[name], grads[index], counter)
            ops.var_updates.accumulate_(counter, popxl.constant(1, popxl.float32))
        return InlineCallInfo(graph, [g for i, g in enumerate(grads) if i not in self.indices], site)


class Slot:
    """A named input of a grad graph with accumulation: bound to a tensor by its name; it has the
    accumulator's shape and dtype (as popxl-addons' graph input has)."""

    def __init__(self, name: str, shape: tuple = (), dtype=popxl.float32):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype
        self.meta_shape = ()

    @property
    def spec(self) -> popxl.TensorSpec:
        return popxl.TensorSpec(self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


def autodiff_with_accumulation(graph: GraphWithNamedArgs, tensors_to_accumulate_grads, grads_provided=None,
                               grads_required=None, called_graphs_grad_info=None, replica_groupings=None
                               ) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    """:func:`autodiff`, and each call of the grad graph takes a running mean of the gradients of
    ``tensors_to_accumulate_grads`` into accumulators: named inputs ``accum.<name>`` (zeros, the
    tensors' shapes) and the count ``mean_accum_counter``, whose factories it returns. The
    accumulated gradients are not outputs of the call. In the simulation an accumulator is a
    gradient held across the calls: the collectives applied to it and the optimizer update reading
    it are those of the weight's gradient."""
    accumulated = list(tensors_to_accumulate_grads)
    required = list(grads_required or []) + accumulated
    info = popxl_transforms.autodiff(graph.graph, grads_provided, required,
                                     called_grad_infos(graph, called_graphs_grad_info))
    names = {t: name for name, t in graph.args.to_dict().items()}
    counter = Accumulation.COUNTER
    factories = NamedVariableFactories()
    factories.insert(counter, VariableFactory(partial(np.zeros, ()), popxl.float32, counter, by_ref=True))
    groupings = replica_groupings.to_dict() if replica_groupings is not None else {}
    accumulators = []
    for t in accumulated:
        name = names.get(t, t.id)
        accumulators.append(f"accum.{name}")
        factories.insert(accumulators[-1], VariableFactory(partial(np.zeros, t.shape), t.dtype, accumulators[-1],
                                                           by_ref=True, replica_grouping=groupings.get(name)))
    accumulation = Accumulation([required.index(t) for t in accumulated], accumulators)
    slots = NamedTensors.from_dict({name: accumulation.slot(name, f.shape, f.dtype)
                                    for name, f in factories.to_dict().items()})
    return factories, GraphWithNamedArgs(info.graph, slots, grad_graph_info=info, accumulation=accumulation)


def recompute_graph(graph: GraphWithNamedArgs) -> GraphWithNamedArgs:
    """The grad graph ``graph``, recomputing its forward graph's activations instead of reading them
    (popxl-addons' recomputation transform). Called inside another graph (a phase), it is that: the
    forward graph's ops run again in the grad graph, which reads only the forward graph's inputs
    (:func:`sim.popxl.transforms.autodiff.recompute_grad_graph`). Called from the main graph, in a
    pipeline, the simulated training recomputes its forward stages, as PopART's pipelined
    recomputation does; without a pipeline, the ops of the forward call it is given are rerun before
    the backward ops that read them (marked Recompute, :func:`sim.popxl.transforms.autodiff._recomputed_call`)."""
    ir = graph.graph.ir
    ir._recompute = True
    info = graph.grad_graph_info
    ir._note(f"transforms.recompute_graph({graph.graph.name!r}): a grad graph called inside another graph "
             "recomputes its forward ops; from the main graph, a pipelined training recomputes its forward "
             "stages (PopART's autoRecomputation Pipeline), and without a pipeline the forward call's ops are "
             "rerun before the backward ops that read them (marked Recompute, autoRecomputation None)")
    if info.explicit_error is not None:
        return graph.copy()
    r_info = recompute_grad_graph(info)
    return GraphWithNamedArgs(r_info.graph, graph.args.copy(), r_info, graph._builder, graph._accumulation)


def _set_proportions(graphs, proportions) -> None:
    by_ipu = dict(enumerate(float(p) for p in proportions))
    for graph in graphs:
        for op in graph.sim_graph.ops:
            if op.kind in ("matmul", "conv2d", "conv2d_grad_input"):
                op.attrs["available_memory_proportion"] = by_ipu.get(op.ipu or 0, by_ipu[0])


def set_available_memory_proportion_by_ipu(ir, proportions) -> None:
    """Every matmul and convolution made so far in ``ir``'s graphs plans with the proportion of its IPU
    (``proportions[n]`` for IPU n; IPU 0's where there is none), replacing the op's own."""
    _set_proportions(ir._graphs, proportions)


def set_graph_available_memory_proportion_by_ipu(graph, proportions) -> None:
    """As :func:`set_available_memory_proportion_by_ipu`, for the ops of ``graph`` (a PopXL graph or a
    ``GraphWithNamedArgs``) and of the graphs it calls, recursively, as popxl-addons walks them."""
    seen, todo = [], [getattr(graph, "graph", graph)]
    while todo:
        g = todo.pop()
        if g not in seen:
            seen.append(g)
            todo.extend(g.called_graphs)
    _set_proportions(seen, proportions)
