"""Graph capture: a ``torch.nn.Module`` and one example micro-batch -> a :class:`sim.Graph`.

The model is traced with ``torch.fx`` (a custom tracer that keeps known layers such as
``torch.nn.Linear`` whole and stamps PopTorch's annotations on the nodes); where fx cannot
trace it (Python control flow on shapes, for example) ``torch.export`` is used instead. The
traced graph is then run once on the example micro-batch by a ``torch.fx.Interpreter``, so
every node is seen with its real arguments and its real output shapes and dtypes, and
:mod:`sim.poptorch._mapping` turns each node into sim ops. When the caller needs no values (the
calls return zeros: ``computeOutputsOnCpu(False)``) that run is on tensors carrying shapes and dtypes
only (torch's ``FakeTensorMode``), the model's arithmetic skipped; a node that reads a value makes it
run with the values. The model's parameters, buffers and
RNG state are restored afterwards: capturing has no effect on the model.

Blocks: a node's block is that of the innermost open ``with poptorch.Block`` around it, else
the latest ``BeginBlock`` module entered before it (read from the node's module stack), else
none (the execution strategy places such ops with the op before them, or on IPU 0).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import itertools
import logging
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

from ..errors import GraphError, UnsupportedOpError
from ..options import OverlapMode
from ..graph.ir import Graph, GraphBuilder
from . import _mapping, _state
from ._precision import implicit_casts, in_place
from ._values import Lazy, sim_dtype, sim_shape
from ._device import ipu_device
from ._errors import Error, error
from .annotations import _BlockHook, block_hooks

@dataclass
class Captured:
    """What a capture produces."""

    graph: Graph
    method: str  # "torch.fx" or "torch.export"
    input_names: list[str]
    output_names: list[str]
    loss_output: int | None  # index (flattened outputs) of the loss, if the model returns it
    notes: list[str] = field(default_factory=list)
    example_outputs: object = None  # the model's outputs on the captured micro-batch (as it returns them)


# --- tracing --------------------------------------------------------------------------------------
#: node meta of an op the model computes under ``torch.no_grad()``: no gradient flows back through it,
#: as PopTorch detaches every traced value that does not require grad (AddDetachOperations.cpp)
NO_GRAD = "sim_no_grad"


def _user_hooks(m: torch.nn.Module) -> bool:
    """Whether ``m`` has forward (pre-)hooks other than the simulator's own block annotations: torch.fx runs a
    module's hooks when it traces through the module, and none when it keeps the module as one node."""
    hooks = list(m._forward_pre_hooks.values()) + list(m._forward_hooks.values())
    return any(not isinstance(h, _BlockHook) for h in hooks)


class _Tracer(torch.fx.Tracer):
    """An fx tracer that keeps the layers the mapper knows whole and stamps annotations."""

    def __init__(self, leaf_types: tuple):
        super().__init__()
        self._leaf_types = leaf_types
        self.proxy_buffer_attributes = True  # a buffer is read by name (a variable), not baked in as a constant

    def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
        """A layer with a rule, unless it is a subclass with a forward of its own (GPT-2's
        ``SerializedLinear(nn.Linear)`` serialises its matmul there) or a parametrized one (``spectral_norm``,
        ``orthogonal``, ``register_parametrization``: its weight is computed from the trained original on every
        call, as PopTorch's dispatcher sees it) or one with forward hooks of the model's own (the older
        ``nn.utils.spectral_norm`` and ``weight_norm`` compute the weight in one): those are traced through, their
        hooks with them."""
        if torch.nn.utils.parametrize.is_parametrized(m) or _user_hooks(m):
            return False
        if type(m) in self._leaf_types:
            return True
        return any(isinstance(m, t) and type(m).forward is t.forward for t in self._leaf_types)

    def call_module(self, m: torch.nn.Module, forward, args, kwargs):
        """A layer held outside the module tree (Graphcore's CNN LabelSmoothing keeps its NLLLoss on
        a plain object) has no path for a call_module node: trace through its forward instead."""
        try:
            self.path_of_module(m)
        except NameError:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        if not torch.is_grad_enabled():  # traced inside the model's own ``with torch.no_grad():``
            node.meta[NO_GRAD] = True
        st = _state.active()
        if st is not None:
            node.meta.update(st.node_meta())
        return node

    def trace(self, root, concrete_args=None):
        with _random_factories_traced(self):
            return super().trace(root, concrete_args)


#: torch's random factories: called without a tensor argument, torch.fx would run them once and
#: bake the draw into the graph as a constant; PopTorch draws them on the IPU at every run
_RANDOM_FACTORIES = ("rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like",
                     "randint_like", "bernoulli", "poisson", "multinomial")


@contextlib.contextmanager
def _random_factories_traced(tracer: torch.fx.Tracer):
    """While ``tracer`` traces, a call to a random factory without proxies becomes a node."""
    saved = {name: getattr(torch, name) for name in _RANDOM_FACTORIES if hasattr(torch, name)}

    def wrap(fn):
        def traced(*args, **kwargs):
            leaves = pytree.tree_leaves((args, kwargs))
            if any(isinstance(v, torch.fx.Proxy) for v in leaves):
                return fn(*args, **kwargs)
            return tracer.create_proxy("call_function", fn, args, kwargs)
        traced.__name__ = fn.__name__
        return traced

    try:
        for name, fn in saved.items():
            setattr(torch, name, wrap(fn))
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)


def _adapter(model: torch.nn.Module, args: tuple, kwargs: dict, tensor_outputs: bool = False):
    """A module whose forward takes the call's tensors flat, so both tracers see plain
    tensor placeholders; everything else in the call is baked in as a constant. ``tensor_outputs``: what the
    model returns that is neither a tensor nor a plain value (a Hugging Face ``DynamicCache``) is returned as
    None, its type recorded in ``dropped_outputs``."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensor_pos = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    names = [f"t{i}" for i in range(len(tensor_pos))]

    class Adapter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        device_reads = 0  # reads of a tensor's device by the model's code (it sees the IPU's)
        dropped_outputs: set[str] = set()  # the types of the outputs tensor_outputs drops

        def _call(self, tensors):
            filled = list(leaves)
            for pos, t in zip(tensor_pos, tensors):
                filled[pos] = t
            a, k = pytree.tree_unflatten(filled, spec)
            with ipu_device() as mode:
                try:
                    out = self.model(*a, **k)
                finally:
                    Adapter.device_reads += mode.reads
            if not tensor_outputs:
                return out
            kept, out_spec = pytree.tree_flatten(out)
            plain = (torch.Tensor, torch.fx.Proxy, bool, int, float, str, type(None))  # a Proxy: torch.fx tracing
            Adapter.dropped_outputs.update(type(leaf).__name__ for leaf in kept if not isinstance(leaf, plain))
            return pytree.tree_unflatten([leaf if isinstance(leaf, plain) else None for leaf in kept], out_spec)

    src = f"def forward(self, {', '.join(names)}):\n    return self._call(({''.join(n + ', ' for n in names)}))\n"
    scope: dict = {}
    exec(src, scope)  # noqa: S102 - a signature with one parameter per input tensor
    Adapter.forward = scope["forward"]
    flat = [leaves[i] for i in tensor_pos]
    return Adapter(), flat, _input_labels(model, args, kwargs, tensor_pos, leaves)


def _input_labels(model, args, kwargs, tensor_pos, leaves) -> list[str]:
    """A readable name per input tensor: the forward parameter it was passed as."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
        per_param = []
        for pname, value in bound.arguments.items():
            sub = pytree.tree_leaves(value)
            per_param += [pname if len(sub) == 1 else f"{pname}_{i}" for i in range(len(sub))]
        if len(per_param) == len(leaves):
            return [per_param[i] for i in tensor_pos]
    except (TypeError, ValueError):
        pass
    return [f"input{i}" for i in range(len(tensor_pos))]


def _trace(adapter, flat: list, leaf_types: tuple):
    """(GraphModule, method, notes): torch.fx first, torch.export where fx cannot trace; the
    notes are what annotations seen while tracing record (:attr:`_state.CaptureState.notes`)."""
    fx_error = None
    try:
        def fx(repeat_loops: bool):
            with _state.capturing("fx", repeat_loops) as state, _attributes_kept(adapter), torch.enable_grad():
                graph = _Tracer(leaf_types).trace(adapter)
            _write_out_loops(graph, state.loop_counts)
            return graph, state
        graph, state = _loops_repeated(fx)
        _check_no_unseen_mutation(graph)
        return torch.fx.GraphModule(adapter, graph), "torch.fx", state.notes
    except (UnsupportedOpError, Error):  # the model's own error (an annotation's check): as it is
        raise
    except Exception as e:  # noqa: BLE001 - any fx failure falls back to torch.export
        fx_error = e
    try:
        return _export(adapter, flat)
    except Error:  # the model's own error, seen only with shapes (a poptorch.CPU function's outputs): as it is
        raise
    except Exception as e:  # noqa: BLE001
        if any(_in_packed_sequences(err) for err in (fx_error, e)):
            raise UnsupportedOpError(
                "sim.poptorch does not support packed sequences (torch.nn.utils.rnn.pack_padded_sequence, "
                "pack_sequence, PackedSequence; PopTorch's sources have no rule for them either): pass the "
                "padded batch to the LSTM/GRU and mask the padding (or keep the lengths) yourself") from e
        hint = _data_dependent_hint(e)
        if not hint and "control flow" in _first_line(fx_error):
            hint = (": torch.fx stops at Python control flow over a tensor (a loop over one, or a branch on its "
                    "values), which torch.export follows, so torch.export's error is the model's own: check that "
                    "the model runs in plain PyTorch with these inputs (a forward hook that returns a tuple where "
                    "the module returned a tensor, for one)")
        raise GraphError(
            "sim.poptorch could not capture the model: torch.fx failed with "
            f"{type(fx_error).__name__}: {_first_line(fx_error)}; torch.export failed with "
            f"{type(e).__name__}: {_first_line(e)}{_model_line(e, fx_error)}{hint}") from e


@contextlib.contextmanager
def _attributes_kept(root: torch.nn.Module):
    """Trace ``root`` and put back every module's attributes after: torch.fx's proxies stand in for
    tensors while it traces, so a forward that assigns to one (``self.count += 1`` on a buffer, which
    Python runs as ``self.count = self.count + 1``) would leave a proxy in the user's module. The
    attributes the tracer adds itself (the constants it meets, ``_tensor_constant0``) stay."""
    saved = [(m, [(d, dict(d)) for d in (m.__dict__, m._buffers, m._parameters)]) for m in root.modules()]
    try:
        yield
    finally:
        for m, dicts in saved:
            for now, before in dicts:
                for key in [k for k, v in now.items() if k not in before and isinstance(v, torch.fx.Proxy)]:
                    del now[key]  # what the trace added stays (its constants, _tensor_constant0), but proxies
                now.update(before)


def _check_no_unseen_mutation(graph: torch.fx.Graph) -> None:
    """Raise if an in-place op's result is unused (``q.transpose_(1, 2)``, ``img.mul_(s)``): torch.fx
    records no mutation, so the later uses of the tensor read the value before it, and the graph is
    not the model's (torch.export, which functionalises in-place ops, captures it instead)."""
    for n in graph.nodes:
        if n.op not in ("call_method", "call_function") or n.users:
            continue
        name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
        if in_place(name):
            raise RuntimeError(f"in-place {name} whose result is unused (node {n.name!r}): torch.fx does not "
                               "see the mutation")


def _in_packed_sequences(error: BaseException) -> bool:
    """Whether ``error`` was raised inside torch's packed-sequence helpers (torch/nn/utils/rnn.py)."""
    frames = traceback.extract_tb(error.__traceback__) if error is not None else []
    return any(f.filename.replace("\\", "/").endswith("torch/nn/utils/rnn.py") for f in frames)


def _export(adapter, flat: list):
    """(GraphModule, "torch.export", notes): the model traced by torch.export, which runs the
    Python with fake tensors, so it follows the branches a real run takes."""
    import torch.fx.traceback as fxt

    def export(repeat_loops: bool):
        with _state.capturing("export", repeat_loops) as state, fxt.preserve_node_meta(), \
                warnings.catch_warnings(), _export_quiet():
            # nn.RNN and its kind re-assign their flat weight list on every call: harmless here
            warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned during export")
            ep = torch.export.export(adapter, tuple(flat), strict=False)
        gm = _inlined(ep.module())
        _write_out_loops(gm.graph, state.loop_counts)
        gm.recompile()
        return gm, state

    gm, state = _loops_repeated(export)
    return gm, "torch.export", state.notes


#: torch's loggers that print a failed export's stack: the capture reports the failure itself
_EXPORT_LOGGERS = ("torch._subclasses.fake_tensor", "torch.fx.experimental.symbolic_shapes", "torch.export",
                   "torch._export")


@contextlib.contextmanager
def _export_quiet():
    """torch.export without its own report of a failure: its loggers held at CRITICAL (their levels
    put back after) and the partial graph it prints to stderr (once for each of its layers) left
    out, since :func:`_trace` raises the failure once, with what to do. Whatever else reaches stderr
    meanwhile (the model's own prints and warnings) is passed on when the export ends."""
    loggers = [logging.getLogger(name) for name in _EXPORT_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield
    except Exception as e:
        graph = getattr(e, "partial_fx_graph", None)
        if graph is not None:
            held = io.StringIO(held.getvalue().replace(f"{graph}\n", ""))
        raise
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        sys.stderr.write(held.getvalue())


class _BodiesDiffer(Exception):
    """A ``for_loop``'s two traced iterations are not the same ops: its iterations are traced one by one."""


def _loops_repeated(trace):
    """``trace(repeat_loops)``, each ``for_loop`` traced for two iterations; traced for all of them
    where the two differ (the body's Python changes what it does between calls)."""
    try:
        return trace(True)
    except _BodiesDiffer:
        return trace(False)


def _loop_path(n: torch.fx.Node) -> tuple:
    """The ``for_loop`` iterations ``n`` was traced in, outermost first (:data:`_state.LOOP`)."""
    return n.meta.get(_state.LOOP) or (n.meta.get("custom") or {}).get(_state.LOOP) or ()


#: nodes every iteration reads alike: torch.fx reads a parameter once (in the first iteration that uses it)
_SHARED = ("placeholder", "get_attr")


def _write_out_loops(graph: torch.fx.Graph, counts: dict[int, int]) -> None:
    """Each ``for_loop`` traced for two iterations (``counts``: loop id -> its iterations) written out
    to all of them, innermost loop first: the second iteration's nodes copied once per further
    iteration, after it, each copy reading the copy before where the second read the first (the
    carried outputs); what follows the loop reads the last copy. Raises :class:`_BodiesDiffer` if
    the two traced iterations are not the same nodes."""
    if not counts:  # no loop traced for two iterations (the usual capture): nothing to look for
        return
    depth: dict[int, int] = {}
    for n in graph.nodes:
        for level, (loop, _) in enumerate(_loop_path(n)):
            depth[loop] = level
    for loop in sorted(depth, key=depth.get, reverse=True):
        first, second = [], []
        for n in graph.nodes:
            iteration = dict(_loop_path(n)).get(loop)
            if iteration is not None and n.op not in _SHARED:
                (first if iteration == 0 else second).append(n)
        if len(first) != len(second) or any((a.op, a.target) != (b.op, b.target) for a, b in zip(first, second)):
            raise _BodiesDiffer(f"for_loop {loop}")
        if not second:  # a body without tensor work: nothing to write out
            continue
        in_first = {n: i for i, n in enumerate(first)}
        in_second = {n: i for i, n in enumerate(second)}
        after = {u: None for n in second for u in n.users if u not in in_second}  # read the last iteration
        previous, following = second, second[-1].next
        for _ in range(counts[loop] - 2):
            copies: list = []

            def arg(a, previous=previous, copies=copies):
                if a in in_first:
                    return previous[in_first[a]]
                return copies[in_second[a]] if a in in_second else a
            with graph.inserting_before(following):
                for n in second:
                    copies.append(graph.node_copy(n, arg))
            previous = copies
        for user in after:
            for n in [a for a in user.all_input_nodes if a in in_second]:
                user.replace_input_with(n, previous[in_second[n]])


def _inlined(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each ``with torch.no_grad()`` (or autocast) block of the forward, which torch.export
    wraps in a higher-order op calling a sub-module (``wrap_with_set_grad_enabled``), copied inline:
    its ops are the model's to price (Graphcore's CNN accuracy metric, DINO's teacher)."""
    wrappers = {getattr(torch.ops.higher_order, name, None) for name in ("wrap_with_set_grad_enabled",
                                                                          "wrap_with_autocast")} - {None}
    g = gm.graph
    while True:
        node = next((n for n in g.nodes if n.op == "call_function" and n.target in wrappers), None)
        if node is None:
            break
        at = next(i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node) and a.op == "get_attr")
        sub = gm.get_submodule(node.args[at].target)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        copied = dict(zip(placeholders, node.args[at + 1:]))
        with g.inserting_before(node):
            # what the block reads from its own sub-module (a nested block's sub-module, RoPE's autocast
            # inside LLaMA's no_grad) moves to the outer module under a new name
            for attr in (n for n in sub.graph.nodes if n.op == "get_attr"):
                name = _unused_attr(gm, f"{node.args[at].target}_{attr.target}".replace(".", "_"))
                value = _attr(sub, attr.target)
                if isinstance(value, torch.nn.Module):
                    gm.add_submodule(name, value)
                else:
                    setattr(gm, name, value)
                copied[attr] = g.get_attr(name)
            before = set(g.nodes)
            out = g.graph_copy(sub.graph, copied)
            grad_off = getattr(torch.ops.higher_order, "wrap_with_set_grad_enabled", None)
            if node.target is grad_off and not node.args[0]:
                for n in g.nodes:
                    if n not in before:
                        n.meta[NO_GRAD] = True
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for user in list(node.users):  # the wrapper returns a tuple: its users are getitem nodes
            user.replace_all_uses_with(outs[user.args[1]])
            g.erase_node(user)
        g.erase_node(node)
    gm.recompile()
    return gm


def _attr(module: torch.nn.Module, target: str):
    """The attribute ``target`` ("a.b.c") of ``module``."""
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _unused_attr(module: torch.nn.Module, base: str) -> str:
    """``base``, or ``base_2``, ``base_3`` ...: the first name ``module`` has no attribute of."""
    name, k = base, 1
    while hasattr(module, name):
        k += 1
        name = f"{base}_{k}"
    return name


def _copied(outputs):
    """The outputs' tensors copied: a view of a parameter must not outlive the run that made it
    (the parameters are restored in place after it)."""
    return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, outputs)


@contextlib.contextmanager
def _without_values(flat: list, meta: bool = False):
    """Run torch on tensors that carry shapes and dtypes but no data (torch's ``FakeTensorMode``; the
    model's own parameters and buffers join as such when an op reads them): yields ``flat`` so made, on
    torch's meta device for a model whose weights are there (``meta``), so that its ops see one device.
    A read of a value (``.item()``, a shape that depends on the data) raises."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield [mode.from_tensor(x.to("meta") if meta else x) if isinstance(x, torch.Tensor) else x for x in flat]


def on_meta_device(model: torch.nn.Module) -> bool:
    """Whether any of the model's parameters or buffers is on torch's meta device (shapes and dtypes, no
    data: a model built under ``torch.device("meta")`` to plan for one too large for the host's memory)."""
    return any(t.is_meta for t in itertools.chain(model.parameters(), model.buffers()))


def _eager_outputs(adapter, flat: list, values: bool, meta: bool = False):
    """The model's own outputs on ``flat``; without ``values``, from a run without values (shapes and dtypes)
    where the model allows one (on the meta device for a model there)."""
    if not values:
        try:
            with _without_values(flat, meta) as fake:
                return adapter(*fake)
        except Exception:  # noqa: BLE001 - the model reads a value (a branch on it): run it with its values
            pass
    return _copied(adapter(*flat))


def _zeros_shaped_as(outputs):
    """``outputs`` with every tensor replaced by zeros of its shape and dtype."""
    return pytree.tree_map(lambda t: torch.zeros(t.shape, dtype=t.dtype) if isinstance(t, torch.Tensor) else t,
                           outputs)


#: how close a traced run's floats must be to the model's own: torch.testing's defaults per dtype, a
#: few units in the last place (the same ops can round differently run by the interpreter: a mean of
#: Graphcore's ResNet-50 loss differed by one float32 ulp); another branch of the model differs by far more
_CLOSE = {torch.float16: dict(rtol=1e-3, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5),
          torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7)}


def _same_values(traced, eager, values: bool = True) -> bool:
    """Whether two runs' outputs are the same structure of the same values (NaNs equal); without
    ``values``, of tensors of the same shapes and dtypes."""
    a, b = pytree.tree_leaves(traced), pytree.tree_leaves(eager)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if not isinstance(x, torch.Tensor):
            if x != y:
                return False
        elif x.shape != y.shape or x.dtype != y.dtype or values and not (
                torch.allclose(x, y, equal_nan=True, **_CLOSE.get(x.dtype, _CLOSE[torch.float32]))
                if x.is_floating_point() else torch.equal(x, y)):
            return False
    return True


def _data_dependent_hint(export_error) -> str:
    """What to do, when torch.export stopped at a branch on a tensor's values; else ""."""
    says = f"{type(export_error).__name__} {export_error}".lower()
    if not any(k in says for k in ("datadependent", "data-dependent", "data dependent", "control flow")):
        return ""
    return (": the model's Python branches on a tensor's values (data-dependent control flow, such as "
            "`if (mask == 1).all():`), which PopTorch cannot trace either, as it traces without values; "
            "compute both sides and choose with torch.where, or take the decision outside forward")


def _first_line(e) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


#: torch.export's own account of the model's line it stopped at
_EXPORT_CALL = re.compile(r'The following call raised this error:\s*File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_NOT_THE_MODEL = ("/torch/", "/sim/poptorch/", "/contextlib.py", "<string>")
#: torch's own Python a model calls (F.gaussian_nll_loss's check of its variances), as against its tracers'
_TORCH_LIBRARY = ("/torch/nn/", "/torch/functional.py", "/torch/distributions/")


def _model_line(*errors) -> str:
    """Where in the model's code a failed trace stopped, as " (at FILE:LINE in FUNCTION: `CODE`)", or
    "": the call torch.export reports, else the innermost frame of the traceback, whichever is not
    in torch, this package or the standard library's context managers; and, where the failure is
    inside a torch function the model called, that function's line too ("; inside ...")."""
    def where(frame) -> str:
        path, line, function, code = frame
        code = (code or "").strip()
        return f"{path.split('site-packages/')[-1]}:{line} in {function}" + (f": `{code}`" if code else "")

    for failure in errors:
        if failure is None:
            continue
        found = _EXPORT_CALL.search(str(failure))
        innermost_first = [(path.replace("\\", "/"), line, function, code) for path, line, function, code in
                           ([found.groups()] if found else [])
                           + [tuple(f) for f in reversed(traceback.extract_tb(failure.__traceback__))]]
        model = [f for f in innermost_first if not any(part in f[0] for part in _NOT_THE_MODEL)]
        if not model:
            continue
        library = next((f for f in innermost_first[:innermost_first.index(model[0])]
                        if any(part in f[0] for part in _TORCH_LIBRARY)), None)
        return f" (at {where(model[0])}" + (f"; inside {where(library)}" if library else "") + ")"
    return ""


@contextlib.contextmanager
def _no_distribution_checks():
    """Trace without torch.distributions' argument checks: they test the values on the host
    (a data-dependent branch no tracer can follow) and have nothing to run on the IPU; the
    model's CPU runs still make them."""
    from torch.distributions import Distribution
    saved = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(saved)


@contextlib.contextmanager
def _model_state_kept(model: torch.nn.Module):
    """Run something on ``model`` and restore its buffers, parameters and the RNGs after."""
    saved = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()
             if isinstance(v, torch.Tensor)}
    rng = torch.random.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(rng)
        with torch.no_grad():
            for k, v in model.state_dict(keep_vars=True).items():
                if k in saved and isinstance(v, torch.Tensor) and v.shape == saved[k].shape:
                    v.copy_(saved[k])


# --- running the traced graph --------------------------------------------------------------------
_ASSERT_METADATA = getattr(getattr(torch.ops.aten, "_assert_tensor_metadata", None), "default", None)


class _Run(torch.fx.Interpreter):
    def __init__(self, gm, cap: "Capture"):
        super().__init__(gm)
        self.cap = cap
        self.extra_traceback = False  # our errors name the op already

    def run_node(self, n):
        if n.op == "call_function" and n.target is _ASSERT_METADATA:
            # torch.export's check of the dtype it traced: the run applies PopTorch's implicit casts of mixed
            # float16 / float32 operands, which may give an op another dtype than eager torch's (no value, no op)
            return None
        with ipu_device():  # a device read by the model (torch.fx: a getattr node) is the IPU's
            result = super().run_node(n)
        self.cap.node(n, self, result)
        return result


class Capture:
    """Builds the sim graph node by node (see :mod:`sim.poptorch._mapping` for the op rules)."""

    def __init__(self, model: torch.nn.Module, gm, name: str, method: str, labels: list[str]):
        self.model = model
        self.gm = gm
        self.method = method
        self.b = GraphBuilder(name, "float32")
        self.g = self.b.graph
        self.sym: dict = {}  # fx node -> sym value (tensor name, Lazy, None or a structure)
        self.labels = list(labels)
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.params: dict[int, dict[bool, str]] = {}  # id(param) -> {transposed: tensor name}
        self.variables: set[str] = set()  # graph tensors of the model's frozen parameters and buffers
        # a tensor held under several names (a tied embedding) is known by its first, as named_parameters() gives it
        self.param_names = {id(p): n for n, p in reversed(list(model.named_parameters(remove_duplicate=False)))}
        self.param_names.update({id(b): n for n, b in reversed(list(model.named_buffers(remove_duplicate=False)))})
        self.buffer_names = {n for n, _ in model.named_buffers(remove_duplicate=False)}  # (a trace may copy them)
        self.losses: list[str] = []  # loss tensors, in order
        self.multiconv_members: dict[str, int] = {}  # group id -> convolutions joined so far
        self.explicit_loss: str | None = None  # marked by identity_loss
        self.notes: list[str] = []
        self.blocks = _BlockResolver(model)
        self.overlap: dict[str, object] = {}
        self.cast_to = None  # implicit casts of mixed float16/float32 operands (see capture())
        self.partials = "float"  # matmul partials type (see capture())

    # --- per node -----------------------------------------------------------------------
    def node(self, n, interp: _Run, result) -> None:
        if n.op == "placeholder":
            self.sym[n] = self._input(n, result)
        elif n.op == "get_attr":
            self.sym[n] = self._lazy(result, str(n.target))
        elif n.op == "output":
            self._outputs(n)
        else:
            block = self.blocks.block_of(n)
            self.b._block, self.b._ipu = (block if block else (None, None))
            scope = self._scope(n)
            self.b._scopes = [scope] if scope else []
            first = len(self.g.ops)
            self.sym[n] = _mapping.map_node(self, n, interp, result)
            if n.meta.get(NO_GRAD):  # PopTorch detaches what the model computes without gradients
                for op in self.g.ops[first:]:
                    op.attrs["no_grad"] = True
            multiconv = n.meta.get(_state.MULTICONV) or (n.meta.get("custom") or {}).get(_state.MULTICONV)
            if multiconv:
                self._join_multiconv(*multiconv, self.g.ops[first:])

    def _join_multiconv(self, group: str, settings: tuple, ops) -> None:
        """The convolutions among ``ops`` join ``poptorch.MultiConv`` ``group``: its plan type and
        options, and each one's entry of the per-convolution lists (in the order traced)."""
        settings = dict(settings)
        per_conv = {"available_memory_proportions": ("available_memory_proportion", "availableMemoryProportions"),
                    "partials_types": ("partials_type", "partialsTypes")}
        for op in ops:
            if not op.kind.startswith("conv"):
                continue
            index = self.multiconv_members.get(group, 0)
            self.multiconv_members[group] = index + 1
            op.attrs.update(multiconv=group, multiconv_plan=settings.get("plan_type", "parallel"))
            if "per_conv_reserved_tiles" in settings:
                op.attrs["multiconv_reserved_tiles"] = settings["per_conv_reserved_tiles"]
            if "cycle_back_off" in settings:
                op.attrs["multiconv_cycle_back_off"] = settings["cycle_back_off"]
            for key, (attr, setter) in per_conv.items():
                value = settings.get(key)
                if isinstance(value, tuple):
                    if index >= len(value):
                        raise error(f"poptorch.MultiConv: {len(value)} value(s) given to {setter} but convolution "
                                    f"{op.name!r} is number {index + 1} of the multi-convolution: give one value per "
                                    "convolution, or one for all")
                    value = value[index]
                if value is not None:
                    op.attrs[attr] = value

    def _scope(self, n) -> str:
        scope = n.meta.get(_state.SCOPE) or (n.meta.get("custom") or {}).get(_state.SCOPE)
        path = ""
        stack = n.meta.get("nn_module_stack")
        if stack:
            path = list(stack.values())[-1][0]
            path = re.sub(r"^L\['self'\]\.?|^L__self__\.?", "", str(path))
            path = re.sub(r"^model\.?", "", path)
        return "/".join(p for p in (scope, path.replace(".", "/")) if p)

    def _input(self, n, value):
        if not isinstance(value, torch.Tensor):
            return None
        label = self.labels[len(self.inputs)] if len(self.inputs) < len(self.labels) else n.name
        name = self.g.unique_tensor_name(label)
        self.b._scopes = []
        self.b.input(name, sim_shape(value.shape), sim_dtype(value.dtype))
        self.inputs.append(name)
        return name

    def _lazy(self, value, qualname: str):
        if not isinstance(value, torch.Tensor):
            return None
        qualname = re.sub(r"^model\.", "", qualname)
        role = "weight" if isinstance(value, torch.nn.Parameter) and value.requires_grad else "constant"
        variable = id(value) in self.param_names or qualname in self.buffer_names
        return Lazy(value, self.param_names.get(id(value), qualname), role, variable=variable)

    def _outputs(self, n) -> None:
        def one(s):
            if isinstance(s, Lazy) or (isinstance(s, str) and (s in self.outputs or self.g.tensors[s].role != "activation")):
                src = self.tensor(s)
                s = self.b.op("identity", [src], [self.g.tensors[src].shape],
                              out_dtypes=[self.g.tensors[src].dtype], name="output")[0]
            return s

        self.b._scopes = []
        structure = torch.fx.node.map_arg(n.args[0], lambda a: self.sym.get(a))
        for leaf in pytree.tree_leaves(structure, is_leaf=lambda x: isinstance(x, Lazy)):
            if leaf is None or not (isinstance(leaf, (str, Lazy))):
                continue
            name = one(leaf)
            self.outputs.append(name)
            self.b.output(name)

    # --- tensors ------------------------------------------------------------------------
    def tensor(self, s) -> str:
        """The graph tensor of a sym value (materialising parameters and constants)."""
        if isinstance(s, str):
            return s
        if isinstance(s, Lazy):
            return self.weight(s, transposed=False)
        raise GraphError(f"sim.poptorch: expected a tensor, got {s!r}")

    def weight(self, s: Lazy, transposed: bool = False) -> str:
        """A parameter or constant as a graph tensor, in torch layout or transposed (last two
        dimensions swapped, as a linear layer's weight is stored for ``x @ W``)."""
        layouts = self.params.setdefault(id(s.value), {})
        if transposed in layouts:
            return layouts[transposed]
        shape = sim_shape(s.value.shape)
        if transposed:
            shape = shape[:-2] + (shape[-1], shape[-2])
        if layouts:  # the other layout exists: a real transpose on the device
            src = next(iter(layouts.values()))
            perm = list(range(len(shape)))
            perm[-2], perm[-1] = perm[-1], perm[-2]
            out = self.b.op("transpose", [src], [shape], {"perm": perm},
                            name=f"{s.name}/transpose", out_dtypes=[sim_dtype(s.value.dtype)])[0]
        else:
            saved, self.b._scopes = self.b._scopes, []
            name = self.g.unique_tensor_name(s.name)
            out = self.g.add_tensor(name, shape, sim_dtype(s.value.dtype), s.role).name
            self.b._scopes = saved
            if s.variable and s.role != "weight":
                self.variables.add(out)
        layouts[transposed] = out
        return out


class _BlockResolver:
    """Which block (and IPU) each node belongs to (see the module docstring)."""

    def __init__(self, model: torch.nn.Module):
        # keyed as the capture's adapter names the modules: the model is its attribute ``model``
        self.hooks = {f"model.{k}" if k else "model": h for k, h in block_hooks(model).items()}
        self.current = None
        self.prev_keys: set = set()
        self.last_start = None
        self.auto = 0

    def _auto_id(self) -> str:
        uid = str(self.auto)
        self.auto += 1
        return uid

    def block_of(self, n):
        meta = dict(n.meta)
        meta.update(n.meta.get("custom") or {})
        stack = n.meta.get("nn_module_stack") or {}
        keys = set(stack)
        for key, value in stack.items():
            if key in self.prev_keys:
                continue
            path = re.sub(r"^L\['self'\]\.?|^L__self__\.?", "", str(value[0]))
            hook = self.hooks.get(path)
            if hook is not None:
                if hook._user_id is None:
                    hook._user_id = self._auto_id()
                self.current = (hook._user_id, hook._ipu_id)
        self.prev_keys = keys
        start = meta.get(_state.START)
        if start is not None and start != self.last_start:
            self.last_start = start
            self.current = tuple(start)
        scoped = meta.get(_state.BLOCK)
        if scoped is not None:  # layers after a `with Block` stay in it until the next block
            self.current = tuple(scoped)
        return self.current


# --- the entry point -----------------------------------------------------------------------------------
def capture(model: torch.nn.Module, args: tuple, kwargs: dict, name: str | None = None,
            cast_to: torch.dtype | None = None, partials: str = "float", values: bool = True,
            tensor_outputs: bool = False) -> Captured:
    """Capture ``model`` called as ``model(*args, **kwargs)`` on one micro-batch.

    ``cast_to`` (float16 or float32): the type mixed float16/float32 operands are cast to, as
    PopTorch's ``halfFloatCasting`` does (:mod:`sim.poptorch._precision`); None runs torch's
    own rules. ``partials``: the matmul partials type (``Options.partials_type()``), which decides
    whether ``serializedMatMul``'s ``keep_precision`` applies. ``values=False``: the caller does not
    need the outputs' values, so the traced graph runs on tensors that carry shapes and dtypes only
    (:func:`_without_values`), the outputs zeros of theirs; a model whose capture needs a value (a
    shape that depends on the data) is run with its values, as with ``values=True``. ``tensor_outputs``: outputs
    that are neither tensors nor plain values (a Hugging Face KV cache object, which PopTorch could not return
    either) are left out, and the notes say which."""
    adapter, flat, labels = _adapter(model, args, kwargs, tensor_outputs)
    meta = on_meta_device(model)

    @contextlib.contextmanager
    def running():  # no gradients, PopTorch's casts; the model's state and the RNG restored after
        with _model_state_kept(model), torch.no_grad(), _state.quietly(), implicit_casts(cast_to, model, flat):
            yield

    def interpret(gm, method, notes, shapes_only: bool):
        cap = Capture(model, gm, name or type(model).__name__, method, labels)
        cap.notes += notes
        cap.cast_to = cast_to
        cap.partials = partials
        with running():
            if not shapes_only:
                return cap, _copied(_Run(gm, cap).run(*flat))
            with _without_values(flat, meta) as fake:
                outputs = _Run(gm, cap).run(*fake)
        return cap, _zeros_shaped_as(outputs)

    def run(gm, method, notes):
        if not values:
            try:
                return interpret(gm, method, notes, shapes_only=True)
            except Exception:  # noqa: BLE001 - a value the capture needs: the run with values decides
                pass
        cap, traced = interpret(gm, method, notes, shapes_only=False)
        return cap, traced if values else _zeros_shaped_as(traced)

    with _no_distribution_checks():
        gm, method, notes = _trace(adapter, flat, _mapping.leaf_types())
        try:
            cap, traced = run(gm, method, notes)
        except (GraphError, Error):
            raise
        except Exception as e:  # the traced graph fails where the model may not: a branch on a type
            if isinstance(e, UnsupportedOpError):
                if method != "torch.fx" or not getattr(e, "fx_leaf_function", None):
                    raise
                why = f"{e.fx_leaf_function}, a Python function torch.fx kept whole"
            elif method != "torch.fx" or not _runs_eagerly(adapter, flat, running):
                raise
            else:
                why = (f"torch.fx's trace of the model fails ({type(e).__name__}: {_first_line(e)}) where the model "
                       "runs (Python control flow on a traced value's type, such as isinstance(x, torch.Tensor))")
            try:
                exported = _export(adapter, flat)
            except Exception as export_error:  # noqa: BLE001
                raise GraphError(f"sim.poptorch could not capture the model: {why}, and torch.export failed with "
                                 f"{type(export_error).__name__}: {_first_line(export_error)}"
                                 f"{_model_line(export_error)}{_data_dependent_hint(export_error)}") from export_error
            try:
                cap, traced = run(*exported)
            except UnsupportedOpError as unmapped:  # the function's body has an op without a rule too
                raise UnsupportedOpError(f"{unmapped} (reached from {why}, through torch.export)") from unmapped
            cap.notes.append(f"{why}: captured with torch.export instead")
        if cap.method == "torch.fx":
            # torch.fx traces with proxies: a branch on a value's type (isinstance(x, torch.Tensor),
            # isinstance(state, tuple)) can take another path than the model does, silently. The
            # model run as it is, from the same RNG state, must give the traced graph's outputs.
            with running():
                eager = _eager_outputs(adapter, flat, values, meta)
            if not _same_values(traced, eager, values):
                why = ("torch.fx's trace of the model computes other outputs than the model does (Python "
                       "control flow on a traced value's type, such as isinstance(x, torch.Tensor))")
                try:
                    cap, traced = run(*_export(adapter, flat))
                    cap.notes.append(f"{why}: captured with torch.export instead")
                except Exception as e:  # noqa: BLE001 - keep the fx graph, saying it may differ
                    cap.notes.append(f"{why}, and torch.export failed ({type(e).__name__}: {_first_line(e)}): "
                                     "the simulated graph may not be the model's")
    if type(adapter).dropped_outputs:
        cap.notes.append(f"outputs of type {', '.join(sorted(type(adapter).dropped_outputs))} (neither tensors nor "
                         "plain values, which PopTorch could not return) are left out: not computed unless other "
                         "outputs need them, and not streamed to the host")
    if type(adapter).device_reads:
        cap.notes.append("the model reads its tensors' device: it sees ipu:0, as when PopTorch traces it (and in "
                         "the CPU run of its outputs; the CPU stands in for it in torch calls given that device)")
    g = cap.g
    g.loss = cap.explicit_loss or (cap.losses[-1] if cap.losses else None)
    loss_output = None
    if g.loss is not None:
        if g.loss in cap.outputs:
            loss_output = cap.outputs.index(g.loss)
        else:
            consumers = _consumers_of(g, g.loss)
            for i, out in enumerate(cap.outputs):
                if out in consumers:
                    loss_output = i
    if cap.explicit_loss is None and (len(cap.losses) > 1 or (g.loss is not None and g.loss not in cap.outputs)):
        cap.notes.append(f"the model's loss is built from {len(cap.losses)} loss op(s) by further ops without "
                         "poptorch.identity_loss, which PopTorch needs for a custom or combined loss (user guide, "
                         f"'pytorch_to_poptorch'); the simulated backward starts from the last one, {g.loss!r}")
    for tname, mode in cap.overlap.items():
        if tname in g.tensors:
            g.overlap[tname] = int(OverlapMode[mode] if isinstance(mode, str) else mode)
    pruned = _prune_unused(g)
    if pruned:
        cap.notes.append(f"{len(pruned)} op(s) whose results nothing uses removed, as PopART's Prune transform "
                         f"removes them: {', '.join(pruned[:5])}{', ...' if len(pruned) > 5 else ''}")
    return Captured(g, cap.method, cap.inputs, cap.outputs, loss_output, cap.notes, traced)


#: op kinds kept though nothing reads their results (collectives synchronise the replicas; a
#: custom op may act beyond its outputs); a buffer's write-back (``buffer_write``) is kept too
_KEPT_UNUSED = ("replicated_all_reduce", "replicated_all_gather", "replicated_all_to_all",
                "replicated_reduce_scatter", "custom")


def _runs_eagerly(adapter, flat: list, running) -> bool:
    """Does the model itself run on the example (so that a failure of its fx trace is the trace's)?"""
    try:
        with running():
            adapter(*flat)
    except Exception:  # noqa: BLE001 - the model's own failure: the trace's error stands
        return False
    return True


def _prune_unused(g: Graph) -> list[str]:
    """Remove the ops none of whose results reaches an output or the loss (a value the model computes
    and drops, such as Graphcore's BERT ``OnehotGather``'s first one-hot), and the activations only
    they made; returns the removed ops' names. A ``poptorch.for_loop``'s own work (``loop_carried``
    copies, ``loop_control``) stays: PopART's Loop runs every iteration whether the next reads its
    outputs or not."""
    needed = set(g.outputs) | ({g.loss} if g.loss else set())
    kept = []
    for op in reversed(g.ops):
        if (op.kind in _KEPT_UNUSED or op.attrs.get("buffer_write") or op.attrs.get("loop_carried")
                or op.attrs.get("loop_control") or any(t in needed for t in op.outputs)):
            kept.append(op)
            needed.update(op.inputs)
    if len(kept) == len(g.ops):
        return []
    kept_ids = {id(op) for op in kept}
    removed = [op for op in g.ops if id(op) not in kept_ids]
    g.ops = kept[::-1]
    for op in removed:
        for t in op.outputs:
            if t not in needed and g.tensors[t].role == "activation":
                del g.tensors[t]
    return [op.name for op in removed]


def _consumers_of(g: Graph, tensor: str) -> set[str]:
    """Every tensor computed from ``tensor``."""
    reach = {tensor}
    for op in g.ops:
        if any(i in reach for i in op.inputs):
            reach.update(op.outputs)
    return reach
