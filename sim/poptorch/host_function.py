"""``poptorch.CPU``: a function run on the host in the middle of an inference model.

PopTorch lowers a call of a ``CPU`` wrapper to one PopART ``HostOp`` whose Opx adds a Poplar
HostFunction ``Call`` (poptorch ``popart_compiler/source/custom_operations/HostOp.cpp``): the IPU
streams the call's inputs to the host, the host runs the Python function on them, and the IPU waits
for its outputs to be streamed back (laid out linearly over the tiles) before it goes on. Every replica
makes its own call, each device iteration.

In the captured graph the call is one ``host_call`` op (:data:`sim.graph.ir.HOST_CALL`); the schedule
runs it as those stream copies, on the IPU's path, each direction opening with a host sync
(:meth:`sim.schedule.context.Context.host_call_items`). They are ``host_io`` in the breakdown and not
stamped in the perf counters, which PopTorch keeps for the model's own inputs and outputs. The host's
time in the function is not known to the simulator: it is ``host_seconds`` per call and replica (an
ipusim argument, default 0), and the run's notes say so. On the CPU, and for the simulator's outputs,
the function runs on the call's values, as PopTorch's callback runs it.

PopTorch supports CPU ops in inference models only ("CPU ops are only supported in inference
graphs", its ``poptorch.CPU`` docstring); a training model with one is refused at compile time
(:func:`refuse_in_training`).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..graph.ir import HOST_CALL
from . import _mapping, _state
from ._errors import error

#: the live ``CPU`` wrappers by ID, as PopTorch's callback map keys them (``registerCPUCallBack``)
_WRAPPERS: dict[str, "CPU"] = {}


def _outputs(name: str, returned) -> list[torch.Tensor]:
    """What the function ``name`` returned, as a list of tensors (PopTorch takes one tensor, or a list or tuple)."""
    outputs = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs):
        raise error(f"poptorch.CPU {name!r}: the function returned {type(returned).__name__} "
                    f"{_short(returned)}; a CPU op's outputs must be torch.Tensors (one, or a list or tuple of them)")
    return outputs


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _wrapper(name: str) -> "CPU":
    if name not in _WRAPPERS:
        raise error(f"poptorch.CPU: no CPU op with ID {name!r} was called in this process")
    return _WRAPPERS[name]


@torch.library.custom_op("ipusim::cpu_op", mutates_args=())
def _cpu_op(inputs: list[torch.Tensor], name: str) -> list[torch.Tensor]:
    """The outputs of the CPU op ``name`` on ``inputs``: its function run on copies of them on the CPU."""
    with torch.no_grad():
        outputs = _wrapper(name)._layer_to_call(*[x.detach().cpu().clone() for x in inputs])
    return [o.detach().clone() for o in _outputs(name, outputs)]


@_cpu_op.register_fake
def _(inputs, name):
    """Outputs shaped and typed as the wrapper's call found them (its run on zeros, as PopTorch's)."""
    wrapper = _wrapper(name)
    return [torch.empty(shape, dtype=dtype) for shape, dtype in zip(wrapper.out_shapes, wrapper.out_dtypes)]


class CPU:
    """Run ``layer_to_call`` on the host where the model calls this wrapper (inference models only).

    ``ID`` names the op (PopTorch's callbacks are keyed by it). ``host_seconds`` (an ipusim argument) is the
    host's time in the function per call and replica, which the simulator cannot know: 0 unless given.
    """

    def __init__(self, layer_to_call: Callable, ID: str, *, host_seconds: float = 0.0):
        if not callable(layer_to_call):
            raise error(f"poptorch.CPU: layer_to_call must be callable, got {type(layer_to_call).__name__}")
        if not isinstance(ID, str):
            raise error(f"poptorch.CPU: ID must be a str, got {type(ID).__name__}")
        if not host_seconds >= 0:
            raise error(f"poptorch.CPU {ID!r}: host_seconds must be a number of seconds >= 0, got {host_seconds!r}")
        self._layer_to_call = layer_to_call
        if isinstance(layer_to_call, torch.nn.Module):
            layer_to_call.requires_grad_(False)  # as PopTorch: the host's layer is not trained
        self._ID = ID
        self.host_seconds = float(host_seconds)
        self.in_shapes = self.out_shapes = self.out_dtypes = None  # as PopTorch records them at the call
        self.inputs = self.outputs = None  # the host's buffers (registerPersistentData)

    def execute(self):
        """The function on the host's input buffers, into its output buffers (PopTorch's callback)."""
        outs = _outputs(self._ID, self._layer_to_call(*self.inputs))
        for buffer, out in zip(self.outputs, outs):
            buffer.copy_(out)

    def registerPersistentData(self):
        """The host's buffers: zeros of the call's input and output shapes."""
        self.inputs = [torch.zeros(shape) for shape in self.in_shapes]
        self.outputs = [torch.zeros(shape) for shape in self.out_shapes]

    def __call__(self, *inputs):
        for i, x in enumerate(inputs):
            if not isinstance(x, (torch.Tensor, torch.fx.Proxy)):
                raise error(f"poptorch.CPU {self._ID!r}: argument {i} is a {type(x).__name__}; a CPU op takes "
                            "torch.Tensors only (PopTorch streams each to the host)")
        state = _state.active()
        if state is None:  # plain torch: the function itself
            return self._layer_to_call(*inputs)
        if state.mode == "fx":  # the outputs' number is known only from a run on the inputs' shapes
            raise _NeedsShapes(f"poptorch.CPU {self._ID!r}: its outputs are known from shaped inputs only")
        _WRAPPERS[self._ID] = self
        with unset_fake_temporarily(), torch.no_grad():  # as PopTorch, a run on zeros tells one output from several
            probe = self._layer_to_call(*[torch.zeros(tuple(x.shape), dtype=x.dtype) for x in inputs])
        single = isinstance(probe, torch.Tensor)
        self.in_shapes = [tuple(x.shape) for x in inputs]
        probed = _outputs(self._ID, probe)
        self.out_shapes, self.out_dtypes = [tuple(o.shape) for o in probed], [o.dtype for o in probed]
        outputs = _cpu_op(list(inputs), self._ID)
        return outputs[0] if single else list(outputs)


class _NeedsShapes(Exception):
    """torch.fx's proxies have no shapes: the capture falls back to torch.export, whose tensors do."""


def refuse_in_training(graph) -> None:
    """PopTorch's restriction: a training model with a CPU op is an error."""
    calls = [op.attrs["id"] for op in graph.ops if op.kind == HOST_CALL]
    if calls:
        raise error(f"poptorch.CPU {calls[0]!r}: CPU ops are only supported in inference graphs (PopTorch's "
                    "poptorch.CPU): train the model without it, or run it for inference")


def _cpu_op_rule(ctx):
    """The call as one ``host_call`` op of the function's outputs (the schedule streams them)."""
    name = ctx.arg(1)
    seconds = _wrapper(name).host_seconds
    note = (f"poptorch.CPU {name!r}: its inputs' and outputs' stream copies are priced; the host's time in the "
            + (f"function is the given host_seconds ({seconds:g} s a call and replica)" if seconds else
               "function is not modelled (0 s: give poptorch.CPU(..., host_seconds=) to add it)"))
    if note not in ctx.cap.notes:
        ctx.cap.notes.append(note)
    return ctx.op(HOST_CALL, list(ctx.sarg(0)), {"id": name, "host_seconds": seconds}, output=list(ctx.output),
                  name=f"cpu_op/{name}")


_mapping.RULES["cpu_op"] = _cpu_op_rule
