"""``popxl.transforms.autodiff`` (the module, as PopXL has it), mapped to the simulator's training.

PopXL's autodiff builds a gradient graph op by op. The simulator has its own autodiff at the
level of op kinds (``sim/training.py``: a matmul's backward is two matmuls, ...) followed by
an optimizer update per weight after its gradient collectives. So here:

* ``autodiff(graph)`` returns a :class:`GradGraphInfo` whose ``.graph`` can be called with
  ``ops.call``; calling it marks the program as *trained*. The gradients it returns are
  handles (:class:`~sim.popxl.tensor.GradTensor`) with the right shapes and no tensor behind
  them.
* Handing those gradients to ``ops.var_updates.*`` / ``ops.scaled_add_`` (or a collective) is
  taken as the weight update; any other op on them is an error (it is not modelled).
* The ``Session`` then compiles the main graph with ``training=True``: backward ops from the
  loss (``ops.nll_loss_with_softmax_grad``), the optimizer update of every variable that gets a
  gradient (``sgd``; ``adam`` or ``lamb`` when their updaters were used) after the collectives
  the program applied to its gradient (recorded on the gradient handles, through moment
  variables too; ``Tensor.grad_collectives``), once per host transfer.

The backward pass is therefore the simulator's, not the one PopXL would build: ops that PopXL
would recompute or that a custom grad graph would add are not seen.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from ..context import get_current_context
from ..errors import PopXLError
from ..graph import Graph
from ..tensor import GradTensor, Tensor


class ExpectedConnectionType(enum.Enum):
    """What a grad graph's input or output connects to (PopXL's values)."""

    Fwd = "Fwd"  # a forward tensor
    FwdGrad = "FwdGrad"  # the gradient of a forward tensor


class ExpectedConnection:
    """One input or output of a grad graph: the forward tensor it belongs to."""

    def __init__(self, fwd_tensor: Tensor, connection_type: ExpectedConnectionType):
        self.fwd_tensor = fwd_tensor
        self.connection_type = connection_type

    def __repr__(self) -> str:
        return f"ExpectedConnection({self.fwd_tensor.id}, {self.connection_type.value})"


class GradGraphInfo:
    """What ``autodiff`` returns: the grad graph and how it connects to the forward graph."""

    def __init__(self, forward_graph: Graph, grads_provided: list[Tensor], grads_required: list[Tensor]):
        self.forward_graph = forward_graph
        self.graph = Graph(forward_graph.ir, forward_graph.ir._unique_graph_name(f"{forward_graph.name}_grad"))
        self.graph._grad_info = self
        self._provided = grads_provided
        self._required = grads_required

    @property
    def expected_inputs(self) -> tuple[ExpectedConnection, ...]:
        return tuple(ExpectedConnection(t, ExpectedConnectionType.FwdGrad) for t in self._provided)

    @property
    def expected_outputs(self) -> tuple[ExpectedConnection, ...]:
        return tuple(ExpectedConnection(t, ExpectedConnectionType.FwdGrad) for t in self._required)

    def inputs_dict(self, fwd_call_info) -> dict:
        """The forward tensors the grad graph needs: none here (the simulator keeps what its own
        backward pass needs)."""
        return {}

    def fwd_graph_ins_to_grad_parent_outs(self, grad_call_info) -> dict:
        """Forward-graph input -> its gradient (from the call of the grad graph)."""
        return dict(zip(self._required, grad_call_info.outputs))

    def fwd_parent_ins_to_grad_parent_outs(self, fwd_call_info, grad_call_info) -> dict:
        """Tensor given to the forward call -> its gradient (from the call of the grad graph)."""
        return {fwd_call_info.graph_to_parent(t): g for t, g in
                zip(self._required, grad_call_info.outputs) if t in fwd_call_info._parent_inputs}


def autodiff(graph: Graph, grads_provided: Iterable[Tensor] | None = None,
             grads_required: Iterable[Tensor] | None = None, called_graphs_grad_info=None,
             return_all_grad_graphs: bool = False):
    """The gradient graph of ``graph`` (see the module docstring for what the simulator does)."""
    if not isinstance(graph, Graph) or graph._main:
        raise PopXLError("popxl.transforms.autodiff expects a subgraph made with ir.create_graph")
    provided = list(graph._outputs if grads_provided is None else grads_provided)
    required = list(graph._inputs if grads_required is None else grads_required)
    for t in provided + required:
        if not isinstance(t, Tensor) or t._graph is not graph:
            raise PopXLError(f"autodiff({graph.name!r}): {t!r} is not a tensor of that graph")
    info = GradGraphInfo(graph, provided, required)
    graph.ir._note("popxl.transforms.autodiff: the backward pass and weight update are the simulator's "
                   "training expansion from the loss (sim/training.py), not the grad graph PopXL would build")
    return {graph: info} if return_all_grad_graphs else info  # PopXL: grad info by forward graph


def _call_grad_graph(g: Graph, grad_graph: Graph, inputs, inputs_dict) -> list[GradTensor]:
    """A call of a grad graph: marks the program trained; returns one gradient per required input."""
    info: GradGraphInfo = grad_graph._grad_info
    g._check_open()
    if len(inputs) > len(info._provided):
        raise PopXLError(f"ops.call({grad_graph.name!r}): {len(inputs)} inputs given but the grad graph takes "
                         f"{len(info._provided)} (one gradient per output of {info.forward_graph.name!r})")
    for i, (x, t) in enumerate(zip(inputs, info._provided)):
        if isinstance(x, Tensor) and x.shape != t.shape:
            raise PopXLError(f"ops.call({grad_graph.name!r}): gradient input {i} has shape {x.shape}, "
                             f"expected {t.shape} (the shape of {t.id!r})")
    g.ir._training = True
    return [GradTensor(g, t.shape, t.dtype, t, f"grad({t.id})") for t in info._required]


def _gradient_update(fn: str, target, grad) -> Tensor:
    """``ops.<fn>`` given an autodiff gradient: taken as the simulator's optimizer update of the
    weight (the Adam/LAMB updaters select that optimizer), not recorded. Returns ``target``, or a
    gradient handle for the update term when ``target`` is not a forward tensor."""
    g = get_current_context().graph
    ir = g.ir
    if fn.startswith("adam"):  # Adam's updater; LAMB's is told by lamb_square (its r1, r2)
        ir._optimizer = "adam" if ir._optimizer != "lamb" else "lamb"
    elif fn.startswith("lamb"):
        ir._optimizer = "lamb"
    ir._note(f"ops.{fn} of an autodiff gradient: the weight update is the simulator's optimizer update "
             "of each trained weight (sim/training.py), not recorded op by op")
    # the collectives the program applied to the gradient on its way here (ops.collectives on it, or on
    # the gradient a moment variable accumulated)
    collectives = grad._collectives if isinstance(grad, GradTensor) else ir._state_collectives.get(grad._sim, ())
    if isinstance(target, Tensor) and not isinstance(target, GradTensor):
        if fn.startswith("accumulate") and _is_state(target, collectives):
            pass
        elif target._sim is not None and target._sim not in ir._gradient_state:
            weight = target._sim
            if weight in ir._shard_of:  # a replica shard of the weight (replica_sharded_slice): its update
                weight, stride, size = ir._shard_of[weight]
                ir._sharded_updates[weight] = (stride, size)
            ir._updated.add(weight)  # a weight the program trains
            ir._grad_collectives.setdefault(weight, collectives)
        return target
    return GradTensor(g, grad.shape, grad.dtype, getattr(grad, "_grad_of", None), f"{fn}({grad.id})", collectives)


def _is_state(t: Tensor, collectives: tuple = ()) -> bool:
    """Register ``t``, a tensor an update of an autodiff gradient writes in place (a moment it
    accumulates, Adam's step count), as optimizer state when the program holds it across steps
    (:func:`_held`); whether it did."""
    g = get_current_context().graph
    if isinstance(t, GradTensor) or t._sim is None or not _held(g.sim_graph, t._sim):
        return False
    g.ir._gradient_state.add(t._sim)
    g.ir._state_collectives.setdefault(t._sim, collectives)
    return True


def from_gradient(x) -> bool:
    """An autodiff gradient, or a variable an update has accumulated one into (Adam's moments, a
    gradient accumulator); a subgraph's tensor is neither, whatever its name (names are per graph)."""
    return isinstance(x, GradTensor) or (isinstance(x, Tensor) and x._sim is not None and x._graph._main
                                         and x._sim in x._graph.ir._gradient_state)


def _held(graph, name: str) -> bool:
    """Is ``name`` a tensor the program holds across steps: a variable, or one it loads from a remote
    buffer (as phased programs keep their weights and optimizer moments)?"""
    op = graph.producer_op(name)
    return op is None or op.kind == "remote_load"


__all__ = ["ExpectedConnection", "ExpectedConnectionType", "GradGraphInfo", "autodiff"]
