"""``popxl.transforms.autodiff`` (the module, as PopXL has it), mapped to the simulator's training.

PopXL's autodiff builds a gradient graph op by op. The simulator has its own autodiff at the
level of op kinds (``sim/graph/training.py``: a matmul's backward is two matmuls, ...) followed by
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

The backward pass is therefore the simulator's, not the one PopXL would build: ops that a custom grad
graph would add are not seen. A grad graph made by popxl-addons' ``recompute_graph`` runs the forward
graph again before its gradient ops; called from the main graph, the ops of the forward call it is
given are marked Recompute (:func:`_recomputed_call`), so a training that is not pipelined reruns them
before the backward ops that read them (sim/schedule/recomputation.py), as PopART reruns marked ops.

**Explicit grad graphs.** ``autodiff`` also builds the grad graph as PopXL does, as ops: the
simulator's backward rules (sim/graph/training.py ``_differentiate``) run over the forward graph's
ops from the provided gradients, and the forward tensors those ops read become the grad graph's
``Fwd`` inputs (added to the forward graph's outputs when they are neither an input nor an output,
as PopXL does; ``inputs_dict(fwd_call_info)`` finds them at the forward call). A grad graph called
inside another graph (a batch-serialised loop, a phase's graph, a forward-and-backward module) is
that graph, called like any other: its ops are priced as written, the program's var_updates and
collectives on its outputs too, and the Session compiles the program as it is, with no training
expansion. A program mixing the two kinds of call is refused. A call inside the differentiated
graph of a graph ``called_graphs_grad_info`` gives a grad graph for (a recomputed block, a module's
own ``build_grad``) is differentiated by that grad graph's ops; the simulator's training expansion
(grad graphs called from the main graph) does not use them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from ...cost.rules import CODE_OF
from ...graph.ir import GraphError, Op
from ...graph.training import _Backward, _differentiate
from ..context import get_current_context
from ..errors import NotModelledError, PopXLError
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

    # the same connection each time GradGraphInfo lists it, as PopXL's (which keeps one object a connection):
    # ``info.expected_outputs.index(ec)`` finds it
    def __eq__(self, other) -> bool:
        return (isinstance(other, ExpectedConnection) and other.fwd_tensor is self.fwd_tensor
                and other.connection_type == self.connection_type)

    def __hash__(self) -> int:
        return hash((id(self.fwd_tensor), self.connection_type))


class GradGraphInfo:
    """What ``autodiff`` returns: the grad graph and how it connects to the forward graph."""

    def __init__(self, forward_graph: Graph, grads_provided: list[Tensor], grads_required: list[Tensor],
                 called: dict[Graph, "GradGraphInfo"] | None = None):
        self.forward_graph = forward_graph
        self.graph = Graph(forward_graph.ir, forward_graph.ir._unique_graph_name(f"{forward_graph.name}_grad"))
        self.graph._grad_info = self
        self._provided = grads_provided
        self._required = grads_required
        self._fwd_inputs: list[Tensor] = []  # the forward tensors the grad graph's ops read (its Fwd inputs)
        self.explicit_error: str | None = None  # why the grad graph could not be built as ops
        self.recomputes = False  # does the grad graph run the forward graph again (recompute_grad_graph)?
        try:
            _build_grad_graph(self, called or {})
        except (GraphError, NotModelledError, KeyError, ValueError) as e:
            self.explicit_error = str(e)
            self.graph._inputs, self.graph._outputs, self._fwd_inputs = [], [], []

    @classmethod
    def of_graph(cls, forward_graph: Graph, grad_graph: Graph, grads_provided: list[Tensor],
                 fwd_inputs: list[Tensor], grads_required: list[Tensor]) -> "GradGraphInfo":
        """The info of a grad graph written by hand (popxl-addons' ``build_grad``): ``grad_graph`` takes
        the gradients of ``grads_provided`` then the forward tensors ``fwd_inputs`` (already outputs of
        ``forward_graph``), and gives the gradients of ``grads_required``, in those orders."""
        info = cls.__new__(cls)
        info.forward_graph, info.graph, info.explicit_error, info.recomputes = forward_graph, grad_graph, None, False
        info._provided, info._fwd_inputs, info._required = list(grads_provided), list(fwd_inputs), list(grads_required)
        grad_graph._grad_info = info
        return info

    @property
    def expected_inputs(self) -> tuple[ExpectedConnection, ...]:
        """The gradients of ``grads_provided`` first, in their order (``FwdGrad``), then the forward
        tensors the grad graph reads (``Fwd``), as PopXL orders them."""
        return (tuple(ExpectedConnection(t, ExpectedConnectionType.FwdGrad) for t in self._provided)
                + tuple(ExpectedConnection(t, ExpectedConnectionType.Fwd) for t in self._fwd_inputs))

    @property
    def expected_outputs(self) -> tuple[ExpectedConnection, ...]:
        return tuple(ExpectedConnection(t, ExpectedConnectionType.FwdGrad) for t in self._required)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(c.fwd_tensor for c in self.expected_inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(self._required)

    def inputs_dict(self, fwd_call_info) -> dict:
        """Each ``Fwd`` input of the grad graph -> the tensor it became at the forward call."""
        if fwd_call_info.called_graph is not self.forward_graph:
            raise TypeError("The called graph does not match the graph that was differentiated.")
        fwd_ins = self.graph._inputs[len(self._provided):]
        return {x: fwd_call_info.graph_to_parent(t) for x, t in zip(fwd_ins, self._fwd_inputs)}

    def fwd_graph_ins_to_grad_parent_outs(self, grad_call_info) -> dict:
        """Forward-graph input -> its gradient (from the call of the grad graph)."""
        return dict(zip(self._required, grad_call_info.outputs))

    def fwd_parent_ins_to_grad_parent_outs(self, fwd_call_info, grad_call_info) -> dict:
        """Tensor given to the forward call -> its gradient (from the call of the grad graph)."""
        return {fwd_call_info.graph_to_parent(t): g for t, g in
                zip(self._required, grad_call_info.outputs) if t in fwd_call_info._parent_inputs}


def _build_grad_graph(info: GradGraphInfo, called: dict[Graph, GradGraphInfo]) -> None:
    """Record the grad graph of ``info.forward_graph`` as ops in ``info.graph`` (see the module
    docstring): inputs the provided gradients then the forward tensors read, outputs the required
    gradients (a zero constant for an input no provided gradient depends on). A call of a graph
    ``called`` gives a grad graph for (``called_graphs_grad_info``) is differentiated by that grad
    graph's ops (:func:`_splice_called_grad`), not by the backward rules of the ops the call made."""
    fwd, grad = info.forward_graph, info.graph
    src = fwd.sim_graph
    scratch = src.copy()
    bw = _Backward(scratch)
    seeds = []
    for t in info._provided:
        seeds.append(scratch.add_tensor(scratch.unique_tensor_name(f"{t._sim}/grad_in"), t.shape, t.dtype.sim_name,
                                        "input").name)
        bw.grads.setdefault(t._sim, seeds[-1])
    need = {t._sim for t in info._required}
    for op in src.ops:
        if any(i in need for i in op.inputs):
            need.update(op.outputs)
    site_of = {name: site for site in fwd._call_sites if site[0] in called for name in site[2]}
    done: set[int] = set()
    forward = list(scratch.ops)
    for op in reversed(forward):
        site = site_of.get(op.name)
        if site is not None:
            if id(site) not in done:  # its last op (the first met going backwards): the whole call's gradient
                done.add(id(site))
                bw.current = op
                _splice_called_grad(bw, called[site[0]], site[1], need)
            continue
        if any(o in bw.grads for o in op.outputs) and any(i in need for i in op.inputs):
            bw.current = op
            _differentiate(bw, op, need)
    backward = scratch.ops[len(forward):]
    made = {o for op in backward for o in op.outputs}
    dst = grad.sim_graph
    mapping: dict[str, str] = {}

    for t, seed in zip(info._provided, seeds):
        mapping[seed] = _input_like(grad, t, f"grad_{t.id}")._sim
    exposed = {t._sim: t for t in (*fwd._inputs, *fwd._outputs)}
    for op in backward:
        for i in op.inputs:
            if i in mapping or i in made:
                continue
            t = scratch.tensors[i]
            if t.role == "constant":
                mapping[i] = dst.add_tensor(dst.unique_tensor_name(i), t.shape, t.dtype, "constant").name
                continue
            if i not in exposed:  # PopXL adds the forward tensor to the forward graph's outputs
                exposed[i] = fwd._wrap(i)
                producer = src.producer_op(i)
                exposed[i]._ipu = producer.ipu if producer is not None else None
                fwd._outputs.append(exposed[i])
            info._fwd_inputs.append(exposed[i])
            mapping[i] = _input_like(grad, exposed[i], i)._sim
        outs = []
        for o in op.outputs:
            t = scratch.tensors[o]
            mapping[o] = dst.add_tensor(dst.unique_tensor_name(o), t.shape, t.dtype, t.role, producer=op.name).name
            outs.append(mapping[o])
        # in program order: an explicit program's grad ops run where it calls them, not in a backward pass
        # the compiler would schedule after every forward op (so "forward", with ``forward_of`` naming the op)
        attrs = {k: v for k, v in op.attrs.items() if k != CODE_OF}  # its own program, not its forward op's
        dst.add_op(Op(dst.unique_op_name(op.name), op.kind, [mapping[i] for i in op.inputs], outs, attrs,
                      "forward", op.ipu, op.stage, op.phase, op.block, op.recompute, op.forward_of))
    for t in info._required:
        name = bw.grads.get(t._sim)
        if name is None:  # no provided gradient depends on it: zeros
            out = dst.add_tensor(dst.unique_tensor_name(f"{t.id}/zero_grad"), t.shape, t.dtype.sim_name,
                                 "constant").name
        else:
            out = mapping[name]
        w = grad._wrap(out, t.dtype)
        w._ipu = t._ipu
        grad._outputs.append(w)


def _splice_called_grad(bw: _Backward, called: GradGraphInfo, mapping: dict[str, str], need: set[str]) -> None:
    """The gradient of one call of ``called.forward_graph`` (its tensors -> the caller's: ``mapping``)
    made by the ops of ``called.graph``, copied into the backward pass being built (``bw``): its
    ``FwdGrad`` inputs the gradients so far of the call's outputs (zeros for one that has none), its
    ``Fwd`` inputs the tensors the call made, its outputs given to the call's inputs."""
    if called.explicit_error is not None:
        raise NotModelledError(f"the grad graph given for {called.forward_graph.name!r} could not be built as ops "
                               f"({called.explicit_error})")
    g, body = bw.g, called.graph.sim_graph
    if not any(mapping[t._sim] in bw.grads for t in called._provided):
        return
    if not any(mapping[t._sim] in need for t in called._required):
        return
    local: dict[str, str] = {}
    for x, t in zip(called.graph._inputs, called._provided):
        outer = mapping[t._sim]
        local[x._sim] = bw.grads.get(outer) or g.add_tensor(g.unique_tensor_name(f"{outer}/zero_grad"), t.shape,
                                                            t.dtype.sim_name, "constant").name
    for x, t in zip(called.graph._inputs[len(called._provided):], called._fwd_inputs):
        local[x._sim] = mapping[t._sim]
    for t in body.tensors.values():
        if t.name not in local and t.role in ("constant", "weight"):
            local[t.name] = g.add_tensor(g.unique_tensor_name(t.name), t.shape, t.dtype, t.role).name
    for op in body.ops:
        outs = []
        for o in op.outputs:
            if o not in local:
                t = body.tensors[o]
                local[o] = g.add_tensor(g.unique_tensor_name(f"{bw.current.name}/{o}"), t.shape, t.dtype,
                                        "gradient").name
            outs.append(local[o])
        fwd = bw.current
        g.add_op(Op(g.unique_op_name(f"{fwd.name}/{op.name}"), op.kind, [local[i] for i in op.inputs], outs,
                    dict(op.attrs), "backward", fwd.ipu if op.ipu is None else op.ipu, fwd.stage, fwd.phase,
                    fwd.block, False, fwd.name))
    for t, out in zip(called._required, called.graph._outputs):
        outer = mapping[t._sim]
        if outer in need:
            bw.give(outer, local[out._sim])


def recompute_grad_graph(info: GradGraphInfo) -> GradGraphInfo:
    """The grad graph of ``info`` recomputing the forward graph's activations instead of reading them
    (popxl-addons' ``recompute_graph``): a new graph that takes the provided gradients and the forward
    graph's inputs, calls the forward graph on them, then the grad graph on what that call made. Its
    ``Fwd`` inputs are the forward graph's inputs only, so a phase stores or keeps nothing else for
    the backward pass. ``info`` must have an explicit grad graph (``explicit_error`` None)."""
    fwd, grad = info.forward_graph, info.graph
    ir = fwd.ir
    new = GradGraphInfo.__new__(GradGraphInfo)
    new.forward_graph, new._provided, new._required, new.explicit_error = fwd, info._provided, info._required, None
    new.recomputes = True
    new.graph = Graph(ir, ir._unique_graph_name(f"{grad.name}_recomp"))
    new.graph._grad_info = new
    new._fwd_inputs = []
    with new.graph:
        seeds = [_input_like(new.graph, x) for x in grad._inputs[:len(info._provided)]]
        needed = [t for t in info._fwd_inputs if t in fwd._inputs]
        ordered = needed + sorted((t for t in fwd._inputs if t not in needed), key=lambda t: t.id)
        inputs = {t: _input_like(new.graph, t) for t in ordered}
        new._fwd_inputs = ordered
        new.graph._splice(fwd, {t._sim: x._sim for t, x in inputs.items()}, fwd.name)
        made = new.graph._last_mapping
        mapping = {x._sim: s._sim for x, s in zip(grad._inputs, seeds)}
        for x, t in zip(grad._inputs[len(info._provided):], info._fwd_inputs):
            mapping[x._sim] = made[t._sim]
        for o in new.graph._splice(grad, mapping, grad.name):
            new.graph._outputs.append(o)
    return new


def _input_like(g: Graph, t: Tensor, name: str | None = None) -> Tensor:
    """A new input of ``g`` with ``t``'s shape, dtype and IPU (named ``name``, else as ``t``)."""
    x = Tensor(g, g._new_tensor(name or t.id.split("/")[-1], t.shape, t.dtype, "input"), t.shape, t.dtype, t._ipu)
    g._inputs.append(x)
    return x


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
    called = _called_grad_infos(called_graphs_grad_info)
    info = GradGraphInfo(graph, provided, required, called)
    return {graph: info, **called} if return_all_grad_graphs else info  # PopXL: grad info by forward graph


def _called_grad_infos(given) -> dict[Graph, GradGraphInfo]:
    """``called_graphs_grad_info`` as forward graph -> :class:`GradGraphInfo` (popxl-addons passes its
    graphs with named inputs on either side)."""
    out = {}
    for fwd, grad in (given or {}).items():
        fwd = getattr(fwd, "graph", fwd)
        grad = getattr(grad, "grad_graph_info", grad)
        if not isinstance(fwd, Graph) or not isinstance(grad, GradGraphInfo):
            raise PopXLError(f"called_graphs_grad_info: expected forward graph -> grad graph info, got "
                             f"{type(fwd).__name__} -> {type(grad).__name__}")
        out[fwd] = grad
    return out


def _call_grad_graph(g: Graph, grad_graph: Graph, inputs, inputs_dict) -> list[Tensor]:
    """A call of a grad graph. Inside another graph (or once the program has made such a call), the
    grad graph's ops are called as written (explicit); in the main graph, the call marks the program
    trained and returns one gradient handle per required input (see the module docstring)."""
    info: GradGraphInfo = grad_graph._grad_info
    ir = g.ir
    g._check_open()
    where = f"ops.call({grad_graph.name!r})"
    if g._main and not ir._explicit_grads and not ir._training and _seeded_by_program(info, inputs, inputs_dict):
        # the gradients fed in are the program's own tensors (a constant seed, as the user guide's autodiff
        # example has), not a loss's gradient handle: the simulator's training expansion has nothing to start
        # from, so the grad graph runs as written, its outputs real tensors (host_store, any op)
        if info.explicit_error is None:
            ir._note(f"{where} in the main graph with gradients the program computed (no loss gradient handle "
                     "from ops.nll_loss_with_softmax_grad): the grad graph's ops are priced as written, with no "
                     "training expansion")
            ir._explicit_grads = True
    if not g._main or ir._explicit_grads:
        if info.explicit_error is not None:
            raise NotModelledError(f"{where} in graph {g.name!r}: the grad graph of {info.forward_graph.name!r} "
                                   f"could not be built as ops ({info.explicit_error}); call it from the main graph "
                                   "to train with the simulator's own backward pass")
        if ir._training:
            raise NotModelledError(f"{where} in graph {g.name!r}: the program already called a grad graph from "
                                   "the main graph (trained with the simulator's backward pass); call every grad "
                                   "graph from the main graph, or every one inside the graphs that need it")
        if not ir._explicit_grads:
            ir._note("autodiff grad graphs called inside other graphs: their ops are priced as written, with the "
                     "program's own weight updates and collectives (no training expansion)")
        ir._explicit_grads = True
        return g._call(grad_graph, inputs, inputs_dict, where)
    if len(inputs) > len(info._provided):
        raise PopXLError(f"{where}: {len(inputs)} inputs given but the grad graph takes "
                         f"{len(info._provided)} (one gradient per output of {info.forward_graph.name!r})")
    for i, (x, t) in enumerate(zip(inputs, info._provided)):
        if isinstance(x, Tensor) and x.shape != t.shape:
            raise PopXLError(f"{where}: gradient input {i} has shape {x.shape}, "
                             f"expected {t.shape} (the shape of {t.id!r})")
    if info.recomputes:
        _recomputed_call(g, info, inputs, inputs_dict, where)
    ir._training = True
    ir._note("popxl.transforms.autodiff: the backward pass and weight update are the simulator's "
             "training expansion from the loss (sim/graph/training.py), not the grad graph PopXL would build")
    return [GradTensor(g, t.shape, t.dtype, t, f"grad({t.id})") for t in info._required]


def _given(info: GradGraphInfo, inputs, inputs_dict) -> dict:
    """Each input of ``info.graph`` -> what a call gives it (positional ``inputs``, then ``inputs_dict``)."""
    flat = [x for item in inputs for x in (item if isinstance(item, (list, tuple)) else (item,))]
    given = dict(zip(info.graph._inputs, flat))
    given.update(inputs_dict or {})
    return given


def _recomputed_call(g: Graph, info: GradGraphInfo, inputs, inputs_dict, where: str) -> None:
    """Record, for the Session, the ops of the main graph's call of ``info.forward_graph`` that a call of
    its recompute_graph grad graph (``info``) recomputes: of the calls whose inputs are the ``Fwd`` inputs
    given (``inputs_dict(call_info)``; all calls when none are given), the latest not yet recomputed (a
    grad call pairs with the last forward call before it, as written-out micro-batches have them). A
    training that is not pipelined marks them Recompute; a pipeline recomputes its stages itself."""
    given = _given(info, inputs, inputs_dict)
    wanted = {t._sim: given[x]._sim for x, t in zip(info.graph._inputs[len(info._provided):], info._fwd_inputs)
              if isinstance(given.get(x), Tensor)}
    sites = [ops for sub, mapping, ops in g._call_sites
             if sub is info.forward_graph and all(mapping.get(k) == v for k, v in wanted.items())]
    if not sites:
        g.ir._note(f"{where}: a recompute_graph grad graph, but no call of {info.forward_graph.name!r} in the main "
                   "graph before it matches the forward tensors it is given: nothing is recomputed")
        return
    done = g.ir._recomputed_ops
    g.ir._recomputed_ops |= ([ops for ops in sites if not ops <= done] or sites)[-1]


def _seeded_by_program(info: GradGraphInfo, inputs, inputs_dict) -> bool:
    """Are all the gradients given to a call of ``info.graph`` (its first ``len(grads_provided)`` inputs,
    positional or in ``inputs_dict``) tensors the program made, none an autodiff gradient handle?"""
    given = _given(info, inputs, inputs_dict)
    seeds = [given.get(x) for x in info.graph._inputs[:len(info._provided)]]
    return bool(seeds) and all(isinstance(s, Tensor) and not isinstance(s, GradTensor) for s in seeds)


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
             "of each trained weight (sim/graph/training.py), not recorded op by op")
    # the collectives the program applied to the gradient on its way here (ops.collectives on it, or on
    # the gradient a moment variable accumulated)
    collectives = grad._collectives if isinstance(grad, GradTensor) else ir._state_collectives.get(grad._sim, ())
    if isinstance(target, Tensor) and not isinstance(target, GradTensor):
        if fn.startswith("accumulate") and _is_state(target, collectives):
            ir._moment_updates.setdefault(target._sim, fn)
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


__all__ = ["ExpectedConnection", "ExpectedConnectionType", "GradGraphInfo", "autodiff", "recompute_grad_graph"]
