"""The IPU device, as the model's own code sees it while sim.poptorch runs it.

PopTorch 3 traces a model with its inputs, parameters and buffers moved to ``torch.device("ipu:0")``
(python/_poplar_executor.py: ``d = torch.device("ipu:0")``, ``self._model.to(d)``, ``t.to(d)`` for the
inputs), and Graphcore's code branches on it: PopTorch's own ``isOnIpu(x)`` is
``x.device.type == "ipu"`` (python/_utils.py), TGN's ``cos_fp16`` computes in float16 on the IPU and in
float32 elsewhere. The simulator runs the model on the CPU (to capture it, and for the real outputs),
so :class:`ipu_device` presents the IPU to the model while it runs:

* ``tensor.device`` is ``ipu:0`` and ``tensor.is_cpu`` False, for any tensor the model's Python reads
  them of (a torch function mode intercepts the getters; under torch.export, whose fake tensors
  answer ``device`` from a Python property of their own, that property answers ``ipu:0`` too, and
  the fake tensors' real device everywhere else);
* an ``ipu`` device handed to a torch function (``torch.zeros(n, device=x.device)``,
  ``t.to(x.device)``) is the CPU, where the tensors are;
* class indices given as int32 to ``F.cross_entropy`` or ``F.nll_loss`` (``nn.CrossEntropyLoss``,
  ``nn.NLLLoss``) are taken as int64, as PopTorch takes them: on the IPU every int64 tensor is int32
  (its dispatcher coerces Long to Int, RegisterAtenOverloads.cpp ``downCastIfNeeded``), and its type
  inference reads the target of ``aten::nll_loss_forward`` back as Long
  (TypeInferenceHandler.cpp ``indexArgToUpcast``), so an int32 target is a target there, where
  torch on the CPU refuses it ("expected target dtype to be Long").

torch's own functions called by the model (``F.multi_head_attention_forward``, a module's internals
below a torch function) run as they are, with the real device: only the model's code sees the IPU.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

IPU = torch.device("ipu", 0)
_CPU = torch.device("cpu")
_DEVICE = {torch.Tensor.device.__get__}
_IS_CPU = {torch.Tensor.is_cpu.__get__}
#: the losses whose target may be class indices -> the target's position (its keyword is ``target``)
_CLASS_TARGET = {torch.nn.functional.cross_entropy: 1, torch.nn.functional.nll_loss: 1}

#: the modes entered, innermost last (the fake tensors' device property reads the innermost)
_ACTIVE: list["ipu_device"] = []
_FAKE_DEVICE = None  # FakeTensor's own ``device`` property, while it is replaced


def _on_cpu(value):
    """An ``ipu`` device as the CPU."""
    if isinstance(value, torch.device) and value.type == "ipu":
        return _CPU
    return value


def _long_target(func, args, kwargs):
    """``args``, ``kwargs`` of a loss of :data:`_CLASS_TARGET` with an int32 target as int64."""
    at = _CLASS_TARGET[func]
    if len(args) > at:
        target = args[at]
        if isinstance(target, torch.Tensor) and target.dtype == torch.int32:
            args = (*args[:at], target.long(), *args[at + 1:])
    else:
        target = kwargs.get("target")
        if isinstance(target, torch.Tensor) and target.dtype == torch.int32:
            kwargs = {**kwargs, "target": target.long()}
    return args, kwargs


def _fake_device(tensor):
    """FakeTensor's ``device`` while a mode is active: ``ipu:0`` to the model's code (the fake
    tensor's own answer inside a kernel, meta, and inside any torch function)."""
    real = _FAKE_DEVICE.fget(tensor)
    mode = _ACTIVE[-1] if _ACTIVE else None
    if mode is None or mode._calling or real.type != "cpu":
        return real
    mode.reads += 1
    return IPU


def _patch_fake_tensors(on: bool) -> None:
    global _FAKE_DEVICE
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:  # pragma: no cover - torch without fake tensors: nothing to present
        return
    if on and _FAKE_DEVICE is None:
        _FAKE_DEVICE = FakeTensor.__dict__.get("device")
        if isinstance(_FAKE_DEVICE, property):
            FakeTensor.device = property(_fake_device)
        else:  # pragma: no cover - another torch: leave it
            _FAKE_DEVICE = None
    elif not on and _FAKE_DEVICE is not None:
        FakeTensor.device = _FAKE_DEVICE
        _FAKE_DEVICE = None


class ipu_device(TorchFunctionMode):
    """While inside, the model's code sees its tensors on ``ipu:0`` (see the module docstring);
    ``reads`` counts the device reads it answered."""

    def __init__(self):
        super().__init__()
        self.reads = 0
        self._calling = 0  # > 0 inside a torch function this mode passed on

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DEVICE:
            self.reads += 1
            return IPU
        if func in _IS_CPU:
            self.reads += 1
            return False
        if func is not torch.device:  # a device is an argument of its own (``device=d``, ``.to(d)``)
            if any(isinstance(a, torch.device) for a in args):
                args = tuple(_on_cpu(a) for a in args)
            if kwargs:
                kwargs = {k: _on_cpu(v) for k, v in kwargs.items()}
                if isinstance(kwargs.get("device"), str) and kwargs["device"].startswith("ipu"):
                    kwargs["device"] = _CPU
        self._calling += 1
        try:
            if func in _CLASS_TARGET:  # int32 class indices, as PopTorch takes them (module docstring)
                args, kwargs = _long_target(func, args, kwargs)
            return func(*args, **kwargs)
        finally:
            self._calling -= 1

    def __enter__(self):
        if not _ACTIVE:
            _patch_fake_tensors(True)
        _ACTIVE.append(self)
        try:
            return super().__enter__()
        except BaseException:
            self._leave()
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._leave()

    def _leave(self):
        _ACTIVE.remove(self)
        if not _ACTIVE:
            _patch_fake_tensors(False)
