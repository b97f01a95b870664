"""popxl-addons' ``Module``: a layer whose ``build`` adds named inputs (its variables) to the graph
being built, and ``GraphCache``.

``Module.create_graph(*inputs)`` builds a ``popxl.Graph`` from ``build`` (tensor arguments become its
inputs) and returns the factories of the named inputs ``build`` added with ``add_variable_input``
(``NamedVariableFactories``: ``init()`` makes the variables in the main graph) and the graph with
those inputs by name (``GraphWithNamedArgs``). A module called inside another's ``build`` builds
inline, its named inputs under the attribute name the parent gave it (``fc1.weight``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from .. import popxl
from ..popxl.errors import GraphContextError, PopXLError
from .named_tensors import NamedTensors
from ..popxl.transforms.autodiff import GradGraphInfo
from .graph import GraphWithNamedArgs
from .variable_factory import NamedVariableFactories, VariableFactory

_BUILDING: list["_Frame"] = []  # the create_graph calls under way, innermost last


class _Frame:
    """One ``create_graph`` under way: the named inputs and factories of its graph, and the
    attribute names of the modules being built inline (their name scope). With ``bound`` (names ->
    tensors of the calling graph) the module is built inline in the caller instead
    (:meth:`_Builder.inline`), each named input being the tensor bound to its name."""

    def __init__(self, root: "Module", bound: dict | None = None):
        self.root = root
        self.scopes: list[str] = []
        self.factories = NamedVariableFactories()
        self.args = NamedTensors()
        self.bound = bound
        self.called: dict = {}  # graphs called with call_module -> their grad graphs (called_graphs_grad_info)

    def qualified(self, name: str) -> str:
        return ".".join(self.scopes + [name])

    def add(self, factory: VariableFactory, overwrite: bool) -> popxl.Tensor:
        if factory.name in self.args and not overwrite:
            raise PopXLError(f"{type(self.root).__name__}.create_graph: the named input {factory.name!r} is added "
                             "twice; give it another name or pass overwrite=True")
        if self.bound is not None:
            if factory.name not in self.bound:
                raise PopXLError(f"{type(self.root).__name__}: its named input {factory.name!r} is not bound; bind "
                                 "the graph to tensors of every named input before calling it")
            t = self.bound[factory.name]
        else:
            t = factory.create_input()
        self.factories.insert(factory.name, factory, overwrite=True)
        self.args.insert(factory.name, t, overwrite=True)
        return t


class _Builder:
    """How a module built its graph (the module, and the ``build`` arguments that were not inputs),
    so that a call of the graph given autodiff gradients can build it again inline in the caller:
    the simulated training takes a gradient only into the variable updates it reaches directly
    (:func:`sim.popxl.transforms.autodiff`), which an optimizer module's graph hides from it."""

    always = False  # inline only when given autodiff gradients

    def __init__(self, module: "Module", args: tuple, kwargs: dict):
        self.module = module
        self.signature = inspect.signature(module.build)
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        self.arguments = dict(bound.arguments)
        self.inputs = [name for name, v in self.arguments.items() if isinstance(v, (popxl.Tensor, popxl.TensorSpec))]

    def inline(self, inputs: tuple, named: dict):
        """``build`` run in the calling graph on ``inputs`` (the graph's inputs, in order), its named
        inputs the tensors ``named`` binds to their names; returns what ``build`` returns."""
        if len(inputs) != len(self.inputs):
            raise PopXLError(f"{type(self.module).__name__}: the graph takes {len(self.inputs)} inputs "
                             f"({', '.join(self.inputs)}), {len(inputs)} given")
        arguments = dict(self.arguments, **dict(zip(self.inputs, inputs)))
        call = inspect.BoundArguments(self.signature, arguments)
        _BUILDING.append(_Frame(self.module, named))
        try:
            return self.module.build(*call.args, **call.kwargs)
        finally:
            _BUILDING.pop()


class _Aux:
    """A module's ``aux``: tensors ``build`` keeps for its ``build_grad`` (popxl-addons' stitching).
    Read inside ``build_grad`` (through :meth:`Module.create_grad_graph`), a tensor becomes an input
    of the grad graph, fed at the call by the forward tensor (added to the forward graph's outputs)."""

    def __init__(self):
        self._stored: dict = {}
        self._read: dict = {}  # key -> the grad graph's input made for it
        self.reading = False

    def __setitem__(self, key, value) -> None:
        self._stored[key] = value

    def __getitem__(self, key):
        if not self.reading:
            raise PopXLError("Module.aux can be read only inside build_grad (called by create_grad_graph or autodiff)")
        value = self._stored[key]
        if not isinstance(value, popxl.Tensor):
            return value
        if key not in self._read:
            self._read[key] = popxl.graph_input(value.shape, value.dtype, str(key), meta_shape=value.meta_shape)
        return self._read[key]

    def __contains__(self, key) -> bool:
        return key in self._stored

    def stitched(self) -> list[tuple]:
        """(forward tensor, grad graph input) of each tensor ``build_grad`` read, in the order read."""
        return [(self._stored[k], x) for k, x in self._read.items()]


class _VarGrads(dict):
    """A module's ``var_grad``: inside ``build_grad``, the gradient of each named input (variable) by
    its name; it must have the variable's shape."""

    def __init__(self, variables: dict):
        super().__init__()
        self._variables = variables

    def __setitem__(self, name, t) -> None:
        if name not in self._variables:
            raise KeyError(f"var_grad[{name!r}]: not a variable whose gradient is required "
                           f"({', '.join(self._variables) or 'none'})")
        if not isinstance(t, popxl.Tensor) or t.shape != self._variables[name].shape:
            raise ValueError(f"var_grad[{name!r}]: the gradient must be a tensor of the variable's shape "
                             f"{self._variables[name].shape}, got {getattr(t, 'shape', type(t).__name__)}")
        super().__setitem__(name, t)


def _frame(where: str) -> _Frame:
    if not _BUILDING:
        raise PopXLError(f"{where}: no graph is being built; call it inside a Module's build (through "
                         "create_graph, or a parent module's build)")
    return _BUILDING[-1]


class Module(popxl.Module):
    """Subclass it and define ``build``; see the module docstring."""

    def __init__(self, cache: "GraphCache | bool | None" = None, grad_inlining_error: str = "error"):
        object.__setattr__(self, "_scope", None)
        object.__setattr__(self, "_cache", GraphCache() if cache is True else (cache or None))
        object.__setattr__(self, "_aux", _Aux())
        object.__setattr__(self, "_var_grad", _VarGrads({}))
        object.__setattr__(self, "_grad_inlining_error", grad_inlining_error)
        if self._cache is not None and self.implements_grad_graph:
            raise ValueError("You cannot use graph caching if you have implemented `build_grad`.")

    @property
    def aux(self) -> _Aux:
        return self.__dict__.setdefault("_aux", _Aux())  # a subclass may not call Module.__init__

    @property
    def var_grad(self) -> _VarGrads:
        return self.__dict__.setdefault("_var_grad", _VarGrads({}))

    @property
    def implements_grad_graph(self) -> bool:
        """Does the module write its own gradient (``build_grad``)?"""
        return type(self).build_grad is not Module.build_grad

    def build_grad(self, *grads):
        """The gradient graph's ops, written by the module (popxl-addons): given the gradients of the
        forward graph's outputs, return those of its non-variable inputs and set ``var_grad[name]``
        for each variable; ``aux[key]`` reads a tensor ``build`` kept."""
        raise NotImplementedError(f"{type(self).__name__} does not implement build_grad")

    def __setattr__(self, key: str, value) -> None:
        if isinstance(value, Module) and not key.startswith("_") and getattr(value, "_scope", None) is None:
            object.__setattr__(value, "_scope", key)  # its named inputs go under this name
        object.__setattr__(self, key, value)

    def set_name_scope(self, name: str) -> None:
        object.__setattr__(self, "_scope", name)

    def build(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define build()")

    def __call__(self, *args, **kwargs):
        """``build`` inline, in the graph being built, under this module's name scope."""
        frame = _frame(f"{type(self).__name__}(...)")
        if (self.implements_grad_graph and frame.root is not self
                and self.__dict__.get("_grad_inlining_error", "error") != "none"):
            msg = (f"{type(self).__name__} implements build_grad but is called inline, where its build_grad is not "
                   "used; call its graph (self.call_module(module)(...)) instead")
            if self.__dict__.get("_grad_inlining_error", "error") == "error":
                raise PopXLError(msg)
            popxl.gcg().ir._note(msg)
        scope = getattr(self, "_scope", None)
        if scope:
            frame.scopes.append(scope)
        try:
            return self.build(*args, **kwargs)
        finally:
            if scope:
                frame.scopes.pop()

    # --- graphs ---------------------------------------------------------------------------------
    def create_graph(self, *args, **kwargs) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        """(factories of the named inputs, the graph) built from ``build`` with ``args`` as its inputs
        (tensors or ``popxl.TensorSpec``); through the module's cache when it has one."""
        if getattr(self, "_cache", None) is not None:
            return self._cache.create_graph(self, *args, **kwargs)
        return self._create_graph(*args, **kwargs)

    def _create_graph(self, *args, **kwargs) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        ir = popxl.gcg().ir
        frame = _Frame(self)
        _BUILDING.append(frame)
        object.__setattr__(self, "_aux", _Aux())
        try:
            graph = ir.create_graph(self.build, *args, **kwargs)
        finally:
            _BUILDING.pop()
        named = GraphWithNamedArgs(graph, frame.args, builder=_Builder(self, args, kwargs), from_module=self,
                                   aux=self.aux, called_graphs_grad_info=frame.called)
        object.__setattr__(self, "_aux", _Aux())  # the graph holds what build kept, not the module
        return frame.factories, named

    def create_grad_graph(self, fwd_graph: GraphWithNamedArgs, grads_provided=None,
                          grads_required=None) -> GraphWithNamedArgs:
        """The grad graph ``build_grad`` writes for ``fwd_graph`` (this module's graph): its inputs the
        gradients of ``grads_provided`` (by default every output) then the tensors ``build_grad`` read
        from ``aux`` (added to the forward graph's outputs, so ``grad_graph_info.inputs_dict`` of the
        forward call feeds them), its outputs the gradients of ``grads_required`` (by default every
        input): ``build_grad``'s returns for the non-variable ones, then ``var_grad``'s in that order."""
        if not self.implements_grad_graph:
            raise PopXLError(f"{type(self).__name__}.create_grad_graph: the module does not implement build_grad")
        fwd = fwd_graph.graph
        provided = list(fwd.outputs if grads_provided is None else grads_provided)
        required = list(fwd.inputs if grads_required is None else grads_required)
        for t in provided:  # popxl-addons' ValueError
            if t not in fwd.outputs:
                raise GraphContextError(f"create_grad_graph: A Tensor specified in `grads_provided` is not a output of "
                                        f"`fwd_graph`: {t!r} is not an output of {fwd.name!r}")
        for t in required:
            if t not in fwd.inputs:
                raise GraphContextError(f"create_grad_graph: A Tensor specified in `grads_required` is not a input of "
                                        f"`fwd_graph`: {t!r} is not an input of {fwd.name!r}")
        name_of = {t: name for name, t in fwd_graph.args.to_dict().items()}
        variables = {name_of[t]: t for t in required if t in name_of}
        others = [t for t in required if t not in name_of]
        aux = fwd_graph._aux
        object.__setattr__(self, "_aux", aux)
        object.__setattr__(self, "_var_grad", _VarGrads(variables))
        aux.reading = True
        try:
            grad = popxl.gcg().ir.create_graph(self.build_grad, *provided)
            var_grads = dict(self.var_grad)
        finally:
            aux.reading = False
            object.__setattr__(self, "_aux", _Aux())
            object.__setattr__(self, "_var_grad", _VarGrads({}))
        missing = [name for name in variables if name not in var_grads]
        if missing:
            raise PopXLError(f"{type(self).__name__}.build_grad: no var_grad for {', '.join(missing)}; set one for "
                             "each variable whose gradient is required, or leave it out of grads_required")
        if len(grad.outputs) != len(others):
            raise PopXLError(f"{type(self).__name__}.build_grad returned {len(grad.outputs)} gradient(s); "
                             f"{len(others)} required (one per non-variable input in grads_required)")
        for i, (out, t) in enumerate(zip(grad.outputs, others)):
            if out.shape != t.shape:
                raise PopXLError(f"{type(self).__name__}.build_grad: output {i} has shape {out.shape}, the input "
                                 f"{t.id!r} it is the gradient of {t.shape}")
        with grad:
            for name in variables:
                popxl.graph_output(var_grads[name])
        stitched = aux.stitched()
        for t, _ in stitched:
            if t not in fwd.outputs:
                fwd._outputs.append(t)
        info = GradGraphInfo.of_graph(fwd, grad, provided, [t for t, _ in stitched], others + list(variables.values()))
        return GraphWithNamedArgs(grad, grad_graph_info=info)

    # --- named inputs -----------------------------------------------------------------------------
    def add_variable_input(self, name: str, data_iter: Callable[[], np.ndarray], dtype=None,
                           by_ref: bool = False, replica_grouping=None, overwrite: bool = False) -> popxl.Tensor:
        """A named input of the graph being built, and the factory of the variable that feeds it
        (``data_iter`` gives its initial value; without ``dtype``, the input has the data's, as popxl-addons)."""
        frame = _frame(f"{type(self).__name__}.add_variable_input({name!r})")
        factory = VariableFactory(data_iter, dtype, self._qualified(frame, name), by_ref, replica_grouping)
        return frame.add(factory, overwrite)

    def add_replica_sharded_variable_input(self, name: str, data_iter: Callable[[], np.ndarray], dtype=None,
                                           by_ref: bool = False, replica_grouping=None, shard_over: int | None = None,
                                           overwrite: bool = False) -> popxl.Tensor:
        """As :meth:`add_variable_input`, the input one replica's shard of the variable: flat, split over
        ``shard_over`` replicas (by default every replica of ``replica_grouping``, itself by default all
        replicas), its whole shape the meta-shape."""
        frame = _frame(f"{type(self).__name__}.add_replica_sharded_variable_input({name!r})")
        group = replica_grouping if replica_grouping is not None else popxl.gcg().ir.replica_grouping()
        factory = VariableFactory(data_iter, dtype, self._qualified(frame, name), by_ref, group,
                                  shard_over or group.group_size)
        return frame.add(factory, overwrite)

    def add_variable_factory(self, factory: VariableFactory, name: str | None = None) -> popxl.Tensor:
        """A named input made by ``factory`` (under ``name``, else the factory's)."""
        frame = _frame(f"{type(self).__name__}.add_variable_factory")
        named = VariableFactory(factory.data_fn, factory.dtype, self._qualified(frame, name or factory.name),
                                factory.by_ref, factory.replica_grouping, factory.shard_over)
        return frame.add(named, overwrite=False)

    def _qualified(self, frame: _Frame, name: str) -> str:
        """``name`` under the scopes being built; a submodule's own method called from its parent's
        ``build`` (``self.fwd.add_variable_inputs(...)``) adds under the submodule's name too, as
        popxl-addons names a submodule's inputs by its attribute."""
        scope = getattr(self, "_scope", None)
        if self is not frame.root and scope and (not frame.scopes or frame.scopes[-1] != scope):
            name = f"{scope}.{name}"
        return frame.qualified(name)

    def call_module(self, module: "Module", name: str | None = None, autodiff: str = "auto", grads_provided=None,
                    grads_required=None):
        """A callable that builds ``module``'s graph from its arguments, adds its named inputs to this
        module's under ``name`` (the module's class name by default) and calls the graph with them,
        returning its outputs (popxl-addons' outlined call). Its grad graph is made first, as popxl-addons
        does, when ``autodiff`` asks ("build_grad", "autodiff") or the module writes its own ("auto" and
        ``build_grad``): an autodiff of this module's graph then differentiates the call with it
        (``called_graphs_grad_info``). ``grads_provided`` / ``grads_required``: functions of the called
        graph giving those tensors."""
        if autodiff not in ("auto", "build_grad", "autodiff", "none"):
            raise ValueError(f"call_module: autodiff must be 'auto', 'build_grad', 'autodiff' or 'none', "
                             f"got {autodiff!r}")
        scope = name or type(module).__name__

        def call(*args, **kwargs) -> tuple:
            factories, graph = module.create_graph(*args, **kwargs)
            frame = _frame(f"call_module({type(module).__name__})")
            frame.called.update(graph.called_graphs_grad_info)
            outputs = len(graph.graph.outputs)  # an autodiff may add the activations its grad graph reads
            if autodiff in ("build_grad", "autodiff") or (autodiff == "auto" and module.implements_grad_graph):
                grad = graph.autodiff(grads_provided=grads_provided(graph) if grads_provided else None,
                                      grads_required=grads_required(graph) if grads_required else None,
                                      method=autodiff)
                frame.called[graph.graph] = grad.grad_graph_info
            return graph.bind(self.add_variable_inputs(scope, factories)).call(*args)[:outputs]
        return call

    def add_variable_inputs(self, name: str, factories: NamedVariableFactories) -> NamedTensors:
        """A named input for each of ``factories``, under ``name`` (new inputs each call: a graph made
        once can then be bound to several sets of them)."""
        return NamedTensors.from_dict({sub: self.add_variable_factory(f, f"{name}.{sub}")
                                       for sub, f in factories.to_dict().items()})


def _spec(x) -> object:
    """What of an argument of ``create_graph`` decides the graph built from it."""
    if isinstance(x, (popxl.Tensor, popxl.TensorSpec)):
        return ("tensor", tuple(x.shape), x.dtype.name)
    if isinstance(x, (list, tuple)):
        return tuple(_spec(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _spec(v)) for k, v in x.items()))
    return repr(x)


def _settings(module: Module) -> tuple:
    """A module's own settings (its attributes other than submodules, which count by theirs, and the
    tensors its builds keep)."""
    return (type(module),) + tuple(
        (k, _settings(v) if isinstance(v, Module) else repr(v))
        for k, v in sorted(vars(module).items()) if not k.startswith("_") and not isinstance(v, popxl.Tensor))


class GraphCache:
    """Builds a module's graph once for each setting of the module and inputs' shapes and dtypes;
    ``create_graph`` of an equal module on equal inputs returns the graph already built (and its
    factories), so its calls share one graph."""

    def __init__(self):
        self._graphs: dict = {}

    def create_graph(self, module: Module, *args, **kwargs) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        key = (_settings(module), _spec(args), _spec(kwargs), id(popxl.gcg().ir))
        if key not in self._graphs:
            self._graphs[key] = module._create_graph(*args, **kwargs)
        factories, graph = self._graphs[key]
        return factories.copy(), graph.copy()
