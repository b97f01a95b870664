"""popxl-addons' graphs with named inputs: :class:`GraphWithNamedArgs` (a graph and the named
inputs its module added, ``.args``) and :class:`BoundGraph` (one bound to the tensors that feed
those inputs). Calling either is a ``popxl.ops.call`` with the named inputs in its ``inputs_dict``."""

from __future__ import annotations

from collections.abc import Mapping

from .. import popxl
from ..popxl import ops
from ..popxl.errors import PopXLError
from ..popxl.transforms import autodiff as popxl_autodiff
from ..popxl.transforms import from_gradient
from .dot_tree import DotTree
from .named_tensors import NamedTensors


def _inputs_dict(named_args: NamedTensors, args, where: str) -> dict:
    """``args`` as an ``inputs_dict`` of ``ops.call``: tensors by the names of ``named_args`` (a
    :class:`DotTree`; the names both have, as popxl-addons' ``to_mapping``: others are not inputs of
    this graph), or already a mapping from the graph's inputs to tensors."""
    if args is None:
        return {}
    if isinstance(args, DotTree):
        given = args.to_dict()
        return {t: given[name] for name, t in named_args.to_dict().items() if name in given}
    if isinstance(args, Mapping):
        return dict(args)
    raise TypeError(f"{where}: args must be NamedTensors or a mapping of the graph's inputs to tensors, "
                    f"got {type(args).__name__}")


def called_grad_infos(graph: "GraphWithNamedArgs", given) -> dict:
    """The grad graphs of the graphs ``graph`` calls: those its module's ``call_module`` made, then
    ``given`` (which wins), as popxl-addons merges them."""
    return {**graph.called_graphs_grad_info, **dict(given or {})}


class GraphWithNamedArgs:
    """A ``popxl.Graph`` and its named inputs (``args``, by the names the module gave them); a grad
    graph made by :func:`~sim.popxl_addons.transforms.autodiff` also has its ``grad_graph_info``."""

    def __init__(self, graph: popxl.Graph, args: NamedTensors | None = None, grad_graph_info=None, builder=None,
                 accumulation=None, from_module=None, aux=None, called_graphs_grad_info=None):
        self.graph = graph
        self.args = args if args is not None else NamedTensors()
        self._grad_graph_info = grad_graph_info
        self._builder = builder  # a module's graph: how to build it again inline (module._Builder)
        self._accumulation = accumulation  # a grad graph that accumulates (transforms.Accumulation)
        self._from_module = from_module  # the module that built it (its build_grad, if it writes one)
        self._aux = aux  # the tensors its build kept for build_grad (module._Aux)
        #: graphs it calls (call_module) -> their grad graphs, used when this graph is differentiated
        self.called_graphs_grad_info = dict(called_graphs_grad_info or {})
        self.autodiff_applied = False

    @property
    def grad_graph_info(self):
        if self._grad_graph_info is None:
            raise AttributeError(f"graph {self.graph.name!r} is not a grad graph (make one with addons.autodiff)")
        return self._grad_graph_info

    def bind(self, args: NamedTensors | Mapping) -> "BoundGraph":
        """This graph with its named inputs fed by ``args`` (tensors by the same names)."""
        return BoundGraph(self, _inputs_dict(self.args, args, f"bind({self.graph.name!r})"))

    def call(self, *inputs, args=None) -> tuple:
        return self.call_with_info(*inputs, args=args).outputs

    def call_with_info(self, *inputs, args=None):
        return _call(self, inputs, _inputs_dict(self.args, args, f"call({self.graph.name!r})"))

    def copy(self) -> "GraphWithNamedArgs":
        return GraphWithNamedArgs(self.graph, self.args.copy(), self._grad_graph_info, self._builder,
                                  self._accumulation, self._from_module, self._aux, self.called_graphs_grad_info)

    def autodiff(self, grads_provided=None, grads_required=None, called_graphs_grad_info=None, method: str = "auto",
                 force: bool = False) -> "GraphWithNamedArgs":
        """The grad graph of this graph: the module's own (``build_grad``) with ``method`` "auto" or
        "build_grad" when it writes one, else :func:`~sim.popxl_addons.transforms.autodiff`'s. Once
        only (it adds outputs to this graph), unless ``force``."""
        if method not in ("auto", "build_grad", "autodiff"):
            raise ValueError(f"`method` should be one of 'auto', 'build_grad' or 'autodiff'. Not: {method}")
        if self.autodiff_applied and not force:
            raise PopXLError(f"graph {self.graph.name!r} was already differentiated (autodiff adds outputs to it); "
                             "pass force=True to do it again")
        module = self._from_module
        if method != "autodiff" and module is not None and module.implements_grad_graph:
            grad = module.create_grad_graph(self, grads_provided, grads_required)
        elif method == "build_grad":
            raise PopXLError(f"graph {self.graph.name!r}: method 'build_grad' needs a graph made by a module that "
                             "implements build_grad")
        else:
            info = popxl_autodiff(self.graph, grads_provided, grads_required,
                                  called_grad_infos(self, called_graphs_grad_info))
            grad = GraphWithNamedArgs(info.graph, grad_graph_info=info)
        self.autodiff_applied = True
        return grad

    def print_schedule(self) -> str:
        """The graph's ops in order, one a line (kind, name, input and output shapes)."""
        g = self.graph.sim_graph
        lines = [f"Graph : {self.graph.name}"]
        lines += [f"  {t.id} {t.shape} {t.dtype.name} (input)" for t in self.graph.inputs]
        for op in g.ops:
            ins = ", ".join(str(g.tensors[t].shape) for t in op.inputs)
            outs = ", ".join(str(g.tensors[t].shape) for t in op.outputs)
            lines.append(f"  {op.kind} {op.name} ({ins}) -> ({outs})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"GraphWithNamedArgs({self.graph.name!r}, args={', '.join(self.args.keys_flat())})"


class BoundGraph:
    """A :class:`GraphWithNamedArgs` whose named inputs are fed by tensors of the calling graph."""

    def __init__(self, graph: GraphWithNamedArgs | popxl.Graph, args: dict | None = None):
        self._named = graph if isinstance(graph, GraphWithNamedArgs) else GraphWithNamedArgs(graph)
        self.graph = self._named.graph
        self.args = dict(args or {})

    def call(self, *inputs, args=None) -> tuple:
        return self.call_with_info(*inputs, args=args).outputs

    def call_with_info(self, *inputs, args=None):
        given = {**self.args, **_inputs_dict(self._named.args, args, f"call({self.graph.name!r})")}
        return _call(self._named, inputs, given)

    def __repr__(self) -> str:
        return f"BoundGraph({self.graph.name!r}, {len(self.args)} bound inputs)"


class InlineBuilder:
    """How to build a helper's graph again in the caller (popxl-addons' graphs of remote loads and
    stores, of replica reductions and gathers): ``fn(inputs, named)`` makes the same ops there from
    the call's inputs and its named inputs by name, and returns the graph's outputs. Such a graph is
    always called inline (``always``), so the simulated program sees the copies and collectives
    themselves: which tensors a remote load holds (optimizer state, weights) and which gradient a
    collective reduces. A call of a graph costs nothing in the simulator, so the time is the same."""

    always = True

    def __init__(self, fn):
        self.fn = fn

    def inline(self, inputs: tuple, named: dict):
        return self.fn(inputs, named)


class InlineCallInfo:
    """What a call built inline gives back (see :func:`_call`): its outputs."""

    def __init__(self, graph: popxl.Graph, outputs, site=None):
        self.called_graph = graph
        self._site = site  # the call of ``graph`` behind it, if any (a grad graph's, before its accumulation)
        if outputs is None:
            outputs = ()
        self._outputs = (outputs,) if isinstance(outputs, popxl.Tensor) else tuple(outputs)

    @property
    def outputs(self) -> tuple:
        return self._outputs

    def parent_output(self, idx: int):
        return self._outputs[idx]

    def graph_to_parent(self, t):
        if self._site is None:
            raise KeyError(f"{t!r}: graph {self.called_graph.name!r} was built inline in the caller; only its outputs "
                           "are known")
        return self._site.graph_to_parent(t)


def _call(graph: GraphWithNamedArgs, inputs: tuple, inputs_dict: dict):
    """``ops.call_with_info`` of ``graph``; a module's graph given an autodiff gradient (an optimizer
    module called on its weight's gradient, or on an accumulator of it) is built again inline in the
    caller instead, so the simulated training sees the variable updates it makes with the gradient, and
    so is a helper's graph of remote copies or collectives always (:class:`InlineBuilder`)."""
    if graph._accumulation is not None:
        return graph._accumulation.call(graph.graph, inputs, inputs_dict)
    given = list(inputs) + list(inputs_dict.values())
    builder = graph._builder
    if builder is not None and (builder.always or any(from_gradient(t) for t in given)):
        named = {name: inputs_dict[t] for name, t in graph.args.to_dict().items() if t in inputs_dict}
        positional = len(graph.graph.inputs) - len(graph.args.keys_flat())
        if builder.always and len(inputs) != positional:
            raise PopXLError(f"call({graph.graph.name!r}): the graph takes {positional} input(s) besides its named "
                             f"ones ({', '.join(graph.args.keys_flat()) or 'none'}), {len(inputs)} given")
        if not builder.always:
            graph.graph.ir._note(f"graph {graph.graph.name!r} called with autodiff gradients: built again inline in "
                                 "the caller, so the simulated training takes the variable updates it makes")
        return InlineCallInfo(graph.graph, graph._builder.inline(tuple(inputs), named))
    return ops.call_with_info(graph.graph, *inputs, inputs_dict=inputs_dict)
