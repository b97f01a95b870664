"""PopTorch's model annotations and in-model helpers (``poptorch.Block``, ``identity_loss``, …).

Outside a capture they are what PopTorch's are on the CPU: identities, context managers that
do nothing, and ``identity_loss`` reducing its input. While :mod:`sim.poptorch` captures a
model they record into the graph: blocks and IPUs become ``Op.block``/``Op.ipu`` (the
execution strategy then resolves stages), name scopes prefix op names, ``identity_loss`` marks
the loss, ``set_overlap_for_input``/``output`` mark host streams, and ``set_available_memory``,
``recomputationCheckpoint``, ``serializedMatMul`` are recorded on their ops.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
from collections import OrderedDict

import torch
import torch.utils.checkpoint
from torch.utils import _pytree as pytree

from . import _state, enums
from ._errors import error


def _first_proxy(args, kwargs):
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.fx.Proxy):
            return leaf
    return None


def _traceable(name: str, mark_arg: int | None = None):
    """Make ``fn`` one node of its own under torch.fx and a marked op under torch.export."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            st = _state.active()
            if st is not None and st.mode == "fx":
                proxy = _first_proxy(args, kwargs)
                if proxy is not None:
                    return proxy.tracer.create_proxy("call_function", wrapper, args, kwargs)
            if st is not None and st.mode == "export":
                value = args[mark_arg] if mark_arg is not None and len(args) > mark_arg else None
                if isinstance(value, enum_types):
                    value = value.name
                with st.mark(name, value):
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)

        wrapper._ipusim_key = name
        return wrapper

    return deco


enum_types = (enums.OverlapMode, enums.MatMulSerializationMode)


def _carrier(x: torch.Tensor) -> torch.Tensor:
    """The tensor itself; under torch.export a no-op view that carries the annotation."""
    st = _state.active()
    if st is not None and st.mode == "export":
        return x.view(x.shape)
    return x


_ON_IPU = 0  # > 0 while a PoplarExecutor runs the model (capture, or the run's CPU numbers)


def isRunningOnIpu() -> bool:
    """True while the model runs as a PopTorch model, False when it is called as plain torch.

    PopTorch returns True while it traces the model for the IPU. The simulator runs the wrapped
    model twice, once to capture the graph and once (per micro-batch) on the CPU for the
    outputs the IPU would return, and both see True, so the model's IPU code path is the one
    that is simulated and whose numbers come back.
    """
    return _ON_IPU > 0 or _state.active() is not None


_TORCH_CHECKPOINT_DEVICE = torch.utils.checkpoint._infer_device_type
_TORCH_CHECKPOINT_NOTE = ("torch.utils.checkpoint.checkpoint: its function's ops are recorded once, as PopTorch "
                          "records them; it recomputes nothing (PopTorch's recomputation is "
                          "poptorch.recomputationCheckpoint and Options._Popart autoRecomputation)")


def _checkpoint_device(*args) -> str:
    """torch's checkpoint asks its arguments' device for a device module to save the RNG with: the
    model's tensors answer ``ipu`` (:mod:`._device`), which torch has none of; they are on the CPU."""
    if _attribute_notes is not None and _TORCH_CHECKPOINT_NOTE not in _attribute_notes:
        _attribute_notes.append(_TORCH_CHECKPOINT_NOTE)
    device = _TORCH_CHECKPOINT_DEVICE(*args)
    return "cpu" if device == "ipu" else device


_TORCH_FUNCTION_APPLY = torch.autograd.Function.__dict__["apply"]


class _ForwardContext:
    """The ``ctx`` a custom autograd function's forward gets while the graph is captured: it keeps
    what the forward saves and marks, which nothing reads (no backward runs)."""

    def __init__(self, n_inputs: int):
        self.needs_input_grad = (True,) * n_inputs
        self.saved_tensors = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value


@classmethod
def _function_apply(cls, *args, **kwargs):
    """``torch.autograd.Function.apply`` as PopTorch traces it: a custom function defined outside torch
    runs its forward's ops inline while the graph is captured (PopART differentiates them, as it
    does the rest of the model: PopTorch's autograd is PopART's, its user guide's introduction; the
    function's own backward is not used), and as torch runs it otherwise (the CPU numbers)."""
    if _state.active() is None or cls.__module__.split(".")[0] == "torch":
        return _TORCH_FUNCTION_APPLY.__get__(None, cls)(*args, **kwargs)
    note = (f"torch.autograd.Function {cls.__qualname__}: its forward's ops are recorded and differentiated "
            "by the simulator's training pass, as PopART does; its own backward is not used")
    notes = _state.active().notes
    if note not in notes:
        notes.append(note)
    if cls.setup_context is torch.autograd.Function.setup_context:  # forward(ctx, *args)
        return cls.forward(_ForwardContext(len(args)), *args, **kwargs)
    return cls.forward(*args, **kwargs)  # forward(*args) with a separate setup_context


class on_ipu:
    """While inside, :func:`isRunningOnIpu` is True (used by the executor), torch's activation
    checkpointing runs on the CPU the model's tensors are on (:func:`_checkpoint_device`), and a
    custom autograd function's forward is traced inline while the graph is captured
    (:func:`_function_apply`)."""

    def __enter__(self):
        global _ON_IPU
        if _ON_IPU == 0:
            torch.utils.checkpoint._infer_device_type = _checkpoint_device
            torch.autograd.Function.apply = _function_apply
        _ON_IPU += 1

    def __exit__(self, *exc):
        global _ON_IPU
        _ON_IPU -= 1
        if _ON_IPU == 0:
            torch.utils.checkpoint._infer_device_type = _TORCH_CHECKPOINT_DEVICE
            torch.autograd.Function.apply = _TORCH_FUNCTION_APPLY


# --- blocks -----------------------------------------------------------------------------------
class Block(torch.nn.Module):
    """A context manager that puts the layers called inside it in a block (and on an IPU).

    >>> with poptorch.Block("Encoder", ipu_id=0):
    ...     x = self.encoder(x)
    """

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None):
        super().__init__()
        self._user_id = user_id
        self._ipu_id = ipu_id

    @staticmethod
    def useAutoId() -> None:
        """Blocks without a ``user_id`` are numbered "0", "1", … from here on."""
        st = _state.active()
        if st is not None:
            st.reset_auto_id()

    @staticmethod
    def start(user_id: str | None = None, ipu_id: int | None = None) -> None:
        """Start a block that lasts until the next one starts (honoured under torch.fx)."""
        st = _state.active()
        if st is not None:
            st.start = (user_id if user_id is not None else st.auto_id(), ipu_id)

    def __enter__(self):
        st = _state.active()
        if st is not None:
            st.push_block(self._user_id, self._ipu_id)

    def __exit__(self, exc_type, value, traceback):
        st = _state.active()
        if st is not None:
            st.pop_block()


class _BlockHook:
    """The forward pre-hook ``BeginBlock`` installs; the capture reads it from the module."""

    def __init__(self, user_id, ipu_id):
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __call__(self, module, inputs):
        return None

    def __repr__(self):
        return f"BeginBlock(user_id={self._user_id}, ipu_id={self._ipu_id})"


class _LegacyBeginBlockFn(torch.nn.Module):
    """``BeginBlock`` applied to a plain function."""

    def __init__(self, layer_to_call, user_id=None, ipu_id=None):
        super().__init__()
        self._layer_to_call = layer_to_call
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __call__(self, *args, **kwargs):
        Block.start(self._user_id, self._ipu_id)
        return self._layer_to_call(*args, **kwargs)


def BeginBlock(layer_to_call, user_id: str | None = None, ipu_id: int | None = None):
    """Start a block at ``layer_to_call``: it and every layer after it, until the next block."""
    if not isinstance(layer_to_call, torch.nn.Module):
        if callable(layer_to_call):
            return _LegacyBeginBlockFn(layer_to_call, user_id, ipu_id)
        raise error("module is not an instance of torch.nn.Module or function.")
    if any(isinstance(h, _BlockHook) for h in layer_to_call._forward_pre_hooks.values()):
        raise error("module has already been assigned to a block.")
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


def BlockFunction(user_id: str | None = None, ipu_id: int | None = None):
    """Decorator: the function's layers run in a block (and on an IPU)."""

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with Block(user_id, ipu_id):
                return func(*args, **kwargs)
        return wrapper

    return decorator


def removeBlocks(module: torch.nn.Module) -> None:
    """Remove every ``BeginBlock`` annotation from ``module`` and its sub-modules."""
    if not isinstance(module, torch.nn.Module):
        raise AssertionError("removeBlocks expects a torch.nn.Module")
    for m in module.modules():
        m._forward_pre_hooks = OrderedDict(
            (k, h) for k, h in m._forward_pre_hooks.items() if not isinstance(h, _BlockHook))


def block_hooks(module: torch.nn.Module) -> dict[str, _BlockHook]:
    """Qualified name -> the ``BeginBlock`` hook of each annotated sub-module."""
    found = {}
    for name, m in module.named_modules():
        for h in m._forward_pre_hooks.values():
            if isinstance(h, _BlockHook):
                found[name] = h
    return found


# --- name scopes and multi-convolutions ---------------------------------------------------------
class NameScope:
    """Prefix the names of the ops created inside with ``name``."""

    def __init__(self, name: str):
        if not isinstance(name, str):
            raise AssertionError("Parameter to NameScope must be a string")
        self.name = name

    def __enter__(self):
        st = _state.active()
        if st is not None:
            st.push_scope(self.name)

    def __exit__(self, exc_type, value, traceback):
        st = _state.active()
        if st is not None:
            st.pop_scope()


def _push_name_scope(name: str) -> None:
    """``torch.ops.poptorch.push_name_scope``: what entering a :class:`NameScope` does (PopTorch's
    C++ extension registers the op; Graphcore's CNN examples call it from forward hooks,
    vision/cnns/pytorch/models/models.py ``name_scope_hook``)."""
    st = _state.active()
    if st is not None:
        st.push_scope(name)


def _pop_name_scope() -> None:
    """``torch.ops.poptorch.pop_name_scope``: what leaving a :class:`NameScope` does."""
    st = _state.active()
    if st is not None:
        st.pop_scope()


# PopTorch's ops as its extension makes them reachable: torch.ops.poptorch.<name> (plain Python here,
# run while the model is traced, as the NameScope above)
torch.ops.poptorch.push_name_scope = _push_name_scope
torch.ops.poptorch.pop_name_scope = _pop_name_scope


_attribute_notes: list[str] | None = None  # where Attribute scopes entered while compiling are noted


@contextlib.contextmanager
def attribute_notes():
    """Collects the notes of the :class:`Attribute` scopes the model enters while it is captured."""
    global _attribute_notes
    saved, _attribute_notes = _attribute_notes, []
    try:
        yield _attribute_notes
    finally:
        _attribute_notes = saved


class Attribute:
    """``with Attribute(**attributes)``: PopART attributes set on the ops traced in its scope, each a
    dict (Graphcore's PyTorch BERT sets ``__outline={"layer": ...}`` on its embeddings' LayerNorm and
    GPT-2 on its final one, so that PopART does not outline them with the encoder's). The simulator's
    outlining (sim/compiler/outlining.py) matches a block's runs and single ops, not attributes, so
    the attributes are accepted with no modelled effect, and the run's notes say so."""

    def __init__(self, **attributes):
        for name, values in attributes.items():
            if not isinstance(values, dict):  # PopTorch iterates each one's items
                raise TypeError(f"poptorch.Attribute: {name}={values!r} must be a dict of attribute values "
                                f"(e.g. {name}={{'layer': 'A'}})")
        self.attributes = attributes

    def __enter__(self):
        # entered from a module's forward hooks, it runs when the captured graph is replayed for its
        # shapes rather than while tracing (torch.fx does not call a leaf layer's hooks)
        notes = _state.active().notes if _state.active() is not None else _attribute_notes
        if notes is not None:
            for name, values in self.attributes.items():
                text = (f"poptorch.Attribute {name}={values}: accepted, no modelled effect (PopART attributes "
                        "on the ops in its scope; the simulator's outlining does not read them)")
                if text not in notes:
                    notes.append(text)

    def __exit__(self, exc_type, value, traceback):
        return False


class MultiConv:
    """Combine the convolutions inside into one poplin multi-convolution: planned together and, with
    the default plan type ``Parallel``, run side by side on separate tile ranges
    (:mod:`sim.cost.multiconv`); their backward and weight-update passes are multi-convolutions too.
    ``availableMemoryProportions`` and ``partialsTypes`` set each convolution's (one value for all,
    or a list of one per convolution in the order they are traced); ``enableConvDithering`` is
    accepted and reported as not modelled."""

    def __init__(self):
        self._settings: dict = {}

    def _set(self, key, value) -> "MultiConv":
        self._settings[key] = value
        return self

    @staticmethod
    def _per_conv(name: str, value, kind):
        """A value for every convolution, or a non-empty list of one per convolution (PopTorch's
        checks)."""
        if value is None or isinstance(value, kind):
            return value
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, kind) for v in value):
            return value
        raise AssertionError(f"Invalid {name}!")

    def availableMemoryProportions(self, value) -> "MultiConv":
        return self._set("available_memory_proportions", self._per_conv("available memory proportion", value, float))

    def partialsTypes(self, value) -> "MultiConv":
        for dtype in value if isinstance(value, (list, tuple)) else [value]:
            if dtype not in (torch.float, torch.half):
                raise ValueError("Invalid partials types. Expecting torch.float or torch.half")
        return self._set("partials_types", value)

    def enableConvDithering(self, value) -> "MultiConv":
        if value is not None and not isinstance(value, bool) and not (
                isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value)):
            raise ValueError("value must be bool or list of bools")
        return self._set("enable_conv_dithering", value)

    def planType(self, value) -> "MultiConv":
        if value is not None and not isinstance(value, enums.MultiConvPlanType):
            raise AssertionError("Invalid plan type!")
        return self._set("plan_type", value)

    def perConvReservedTiles(self, value: int) -> "MultiConv":
        assert isinstance(value, int), "perConvReservedTiles expects an int"
        return self._set("per_conv_reserved_tiles", value)

    def cycleBackOff(self, value: float) -> "MultiConv":
        assert isinstance(value, float), "cycleBackOff expects a float"
        return self._set("cycle_back_off", value)

    def _capture_settings(self) -> tuple:
        """The settings as plain values the capture carries on each traced node."""
        out = {}
        for key, value in self._settings.items():
            if value is None:
                continue
            if key == "plan_type":
                value = "serial" if value == enums.MultiConvPlanType.Serial else "parallel"
            elif key == "partials_types":
                value = tuple("half" if v == torch.half else "float" for v in value) \
                    if isinstance(value, (list, tuple)) else ("half" if value == torch.half else "float")
            elif isinstance(value, list):
                value = tuple(value)
            out[key] = value
        return tuple(sorted(out.items()))

    def __enter__(self):
        st = _state.active()
        if st is not None:
            if self._settings.get("enable_conv_dithering") is not None:
                st.note("poptorch.MultiConv.enableConvDithering: accepted; the convolutions' tile placement is "
                        "not dithered in the simulator: no modelled effect")
            st.push_multiconv(self._capture_settings())
        return self

    def __exit__(self, exc_type, value, traceback):
        st = _state.active()
        if st is not None:
            st.pop_multiconv()
        return None


# --- in-model functions -------------------------------------------------------------------------
@_traceable("identity_loss", mark_arg=1)
def _identity_loss(x, reduction):
    if reduction == "sum":
        return x.sum()
    if reduction == "mean":
        return x.mean()
    return _carrier(x)


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark ``x`` as the loss to back-propagate from, reduced by ``"sum"``, ``"mean"`` or
    ``"none"`` (for custom and combined losses)."""
    if reduction not in ("sum", "mean", "none"):
        raise AssertionError("Unsupported reduction type!")
    return _identity_loss(x, reduction)


@_traceable("set_available_memory", mark_arg=1)
def _set_available_memory(tensor, proportion):
    return _carrier(tensor)


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float) -> torch.Tensor:
    """Temporary-memory proportion for the op producing ``tensor`` (recorded on the op)."""
    if not isinstance(tensor, (torch.Tensor, torch.fx.Proxy)):
        raise error("You may only set available memory for torch.tensor values. "
                    f"{type(tensor)} is not supported.")
    proportion = float(available_memory_proportion)
    if not 0 < proportion <= 1:  # PopART's Builder::setAvailableMemoryProportion check
        raise error(f"set_available_memory: availableMemoryProportion must be in (0,1], got {proportion}")
    return _set_available_memory(tensor, proportion)


@_traceable("set_overlap_for_input", mark_arg=1)
def _overlap_input(tensor, mode):
    return _carrier(tensor)


@_traceable("set_overlap_for_output", mark_arg=1)
def _overlap_output(tensor, mode):
    return _carrier(tensor)


def _map_tensors(structure, fn, kind: str):
    leaves, spec = pytree.tree_flatten(structure)

    def one(t):
        if not isinstance(t, (torch.Tensor, torch.fx.Proxy)):
            raise error(f"You may only set overlap for torch.tensor {kind}. {type(t)} is not supported.")
        return fn(t)

    return pytree.tree_unflatten([one(t) for t in leaves], spec)


def set_overlap_for_input(input_tensors, mode: enums.OverlapMode):
    """Overlap the host->IPU copies of ``input_tensors`` (a tensor or a structure of them)
    with compute; needs IO tiles (``TensorLocations.numIOTiles``)."""
    return _map_tensors(input_tensors, lambda t: _overlap_input(t, mode), "inputs")


def set_overlap_for_output(output_tensors, mode: enums.OverlapMode):
    """Overlap the IPU->host copies of ``output_tensors`` with compute (needs IO tiles)."""
    return _map_tensors(output_tensors, lambda t: _overlap_output(t, mode), "outputs")


@_traceable("recomputation_checkpoint")
def _checkpoint(tensor):
    return _carrier(tensor)


def recomputationCheckpoint(*tensors):
    """Keep these tensors between the forward and backward passes (recorded on their ops)."""
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        return type(tensors[0])(recomputationCheckpoint(*tensors[0]))
    out = []
    for t in tensors:
        if not isinstance(t, (torch.Tensor, torch.fx.Proxy)):
            raise ValueError("All inputs must be tensors")
        out.append(_checkpoint(t))
    return out[0] if len(out) == 1 else tuple(out)


def _show(tensor, title: str, layout: dict) -> None:
    with torch._tensor_str.printoptions(**layout):
        text = str(tensor.detach())
    print(f"{title}: {text}" if title else text)


@_traceable("ipu_print_tensor", mark_arg=1)
def _print_tensor(tensor, title, layout=None, print_gradient=False):
    if not _state.quiet():
        _show(tensor, title, layout or {})
        if print_gradient and tensor.requires_grad and torch.is_grad_enabled():
            tensor.register_hook(lambda grad: _show(grad, f"{title or 'tensor'} gradient", layout or {}))
    return _carrier(tensor)


def ipu_print_tensor(tensor: torch.Tensor, title: str = "", print_gradient: bool = True,
                     summarise_threshold: int = 1000, edge_items: int = 3, max_line_width: int = 80,
                     digits: int = 4, float_format: str = "auto", separator: str = ", ",
                     open_bracket: str = "(", close_bracket: str = ")") -> torch.Tensor:
    """Print ``tensor`` each time the model runs (on the CPU), and its gradient in the backward pass
    of a training model (``print_gradient``); the graph gets an identity. The summary threshold,
    edge items, line width and digits are torch's print options; ``float_format``, ``separator``
    and the brackets are Poplar's own print format, not followed here (torch's)."""
    if not isinstance(tensor, (torch.Tensor, torch.fx.Proxy)):
        raise error(f"ipu print tensor must take a torch.tensor argument. {type(tensor)} is not supported.")
    layout = {"threshold": summarise_threshold, "edgeitems": edge_items, "linewidth": max_line_width,
              "precision": digits}
    return _print_tensor(tensor, title, layout, print_gradient)


@_traceable("nop")
def _nop(tensor):
    return _carrier(tensor)


def nop(tensor: torch.Tensor) -> torch.Tensor:
    """An identity that graph optimisations keep."""
    if not isinstance(tensor, (torch.Tensor, torch.fx.Proxy)):
        raise error(f"nop must take a torch.tensor argument. {type(tensor)} is not supported.")
    return _nop(tensor)


@_traceable("loop_carry", mark_arg=1)
def _loop_carry(tensor, work):
    """An output of a ``for_loop`` iteration carried into the next, with the Loop's ``work`` (the flag
    :data:`_state.LOOP_CONTROL` on an iteration's first output; see :func:`for_loop`)."""
    return _carrier(tensor)


@_traceable("serialized_matmul", mark_arg=2)
def _serialized_matmul(lhs, rhs, mode, factor, keep_precision):
    return torch.matmul(lhs, rhs)


@torch.library.custom_op("ipusim::serialized_matmul", mutates_args=())
def _exported_serialized_matmul(lhs: torch.Tensor, rhs: torch.Tensor, mode: str, factor: int,
                                keep_precision: bool) -> torch.Tensor:
    """serializedMatMul as one node of an exported graph, which torch.export keeps whole (a plain
    ``torch.matmul`` there would lose the serialisation); priced by the same rule as under torch.fx."""
    return torch.matmul(lhs, rhs)


@_exported_serialized_matmul.register_fake
def _(lhs, rhs, mode, factor, keep_precision):
    return torch.matmul(lhs, rhs)


def serializedMatMul(lhs: torch.Tensor, rhs: torch.Tensor, mode: enums.MatMulSerializationMode,
                     factor: int = 0, keep_precision: bool = False) -> torch.Tensor:
    """``lhs @ rhs`` computed as ``factor`` smaller matmuls (priced as one matmul)."""
    if not isinstance(keep_precision, bool) or not isinstance(factor, int) or \
            not isinstance(mode, enums.MatMulSerializationMode):
        raise AssertionError("serializedMatMul expects a MatMulSerializationMode, an int factor "
                             "and a bool keep_precision")
    st = _state.active()
    if st is not None and st.mode == "export":
        return _exported_serialized_matmul(lhs, rhs, mode.value, factor, keep_precision)
    return _serialized_matmul(lhs, rhs, mode, factor, keep_precision)


def for_loop(count: int, body, inputs: list) -> list:
    """Run ``body`` ``count`` times, each iteration's outputs feeding the next, with the Loop's own work
    each iteration: the copies of every output back to the body's input, the exit-flag map and the
    iterator's increment. The simulated graph holds every iteration (each is priced); while a model is
    captured the body is traced twice, as PopTorch traces it once, and the capture writes out the other
    iterations from the second (``sim.poptorch._capture``), unless the two traces differ."""
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
        raise ValueError(f"poptorch.for_loop expects count, the number of times the body runs, to be an int; got "
                         f"{count!r} ({type(count).__name__})")
    if count < 0:
        raise ValueError(f"poptorch.for_loop expects count, the number of times the body runs, to be 0 or more; "
                         f"got {count}")
    if not isinstance(inputs, list):
        raise ValueError("poptorch.for_loop expects input tensors (inputs) to be a list of tensors. "
                         "(Object is not list)")
    for ind, t in enumerate(inputs):
        if not isinstance(t, (torch.Tensor, torch.fx.Proxy)):
            raise ValueError("poptorch.for_loop expects input tensors (inputs) to be a list of "
                             f"tensors. (Object contained in list at index {ind} is not torch.tensor)")
    st = _state.active()
    loop = None
    if st is not None and st.repeat_loops and count > 2:
        loop = len(st.loop_counts)
        st.loop_counts[loop] = count
    outs = list(inputs)
    for i in range(count if loop is None else 2):
        with st.loop_iteration(loop, i) if loop is not None else contextlib.nullcontext():
            res = body(*outs)
            outs = list(res) if isinstance(res, (list, tuple)) else [res]
            # PopART's Loop (LoopOpx) copies every output back to the body's input each iteration, one the
            # body passes through too (sim.compiler.loops), beside its exit-flag update and iterator
            # increment (priced with the iteration's first output)
            outs = [_loop_carry(o, _state.LOOP_CONTROL if j == 0 else 0)
                    if isinstance(o, (torch.Tensor, torch.fx.Proxy)) else o for j, o in enumerate(outs)]
    return outs


__all__ = ["Block", "BeginBlock", "BlockFunction", "removeBlocks", "NameScope", "MultiConv",
           "identity_loss", "set_available_memory", "set_overlap_for_input", "set_overlap_for_output",
           "recomputationCheckpoint", "ipu_print_tensor", "nop", "serializedMatMul", "for_loop",
           "isRunningOnIpu"]
