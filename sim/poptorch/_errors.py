"""PopTorch's error classes.

PopTorch raises ``poptorch.Error`` (its ``RecoverableError`` and ``UnrecoverableError`` derive
from it) with the message prefixed by its type, ``'poptorch_py_error': <message>``, and keeps
the bare message in ``.message``. The simulator's errors keep that shape so scripts that match
on the text, or catch ``poptorch.Error``, behave the same. They also derive from
:class:`sim.IpuSimError`.
"""

from __future__ import annotations

from ..errors import IpuSimError, OptionsError, OutOfMemoryError


class Error(IpuSimError, RuntimeError):
    """``poptorch.Error``: an error raised by the PopTorch front end."""

    def __init__(self, message: str, type_: str = "poptorch_py_error"):
        super().__init__(f"'{type_}': {message}")
        self.message = message
        self.type = type_
        self.location = ""


class RecoverableError(Error):
    """``poptorch.RecoverableError``: the model can be run again after it."""

    recovery_action = ""


class UnrecoverableError(Error):
    """``poptorch.UnrecoverableError``: the device is lost (never raised by the simulator)."""


class OutOfMemory(Error, OutOfMemoryError):
    """A model that does not fit in tile memory, raised as PopTorch raises Poplar's out-of-memory at
    compile time: a ``poptorch.Error`` of type ``'popart_exception'`` (PopART's memory_allocation_err
    derives from popart::error, popart_compiler/source/Compiler.cpp rethrowPopartOrPoplarException)
    whose text ends with the compile stage it was raised in (PopTorch's log context around
    ``prepareDevice``, the same file's compileAndPrepareDevice). It is also the simulator's
    :class:`sim.OutOfMemoryError`, with its ``ipu``, ``op``, ``where``, margin and shortfalls in bytes."""

    #: the stages PopTorch names (innermost first) when Poplar compilation fails
    CONTEXT = ("popart::Session::prepareDevice: Poplar compilation", "Compiler::compileAndPrepareDevice")

    def __init__(self, cause: OutOfMemoryError):
        self.location = "\n".join(f"  [{i}] {c}" for i, c in enumerate(self.CONTEXT))
        Exception.__init__(self, f"'popart_exception': {cause}\nError raised in:\n{self.location}")
        self.message = str(cause)
        self.type = "popart_exception"
        self.ipu, self.op = cause.ipu, cause.op
        self.shortfall_bytes, self.shortfalls = cause.shortfall_bytes, dict(cause.shortfalls)
        self.where, self.margin, self.margin_bytes = cause.where, cause.margin, cause.margin_bytes


class CompileError(Error, OptionsError):
    """A check the model's compilation fails (a pipeline deeper than the micro-batches that fill it,
    automatic loss scaling on a float32 model, ...), raised as PopTorch raises PopART's and its own
    compile-time checks (``ERROR_ON_MSG`` in popart_compiler Compiler.cpp): a ``poptorch.Error``.
    It is also the simulator's :class:`sim.OptionsError`, whose message it carries."""


def compile_error(e: OptionsError) -> Error:
    """``e`` as PopTorch raises a compile-time check: itself if it already is a :class:`Error`, else a
    :class:`CompileError` carrying its message."""
    return e if isinstance(e, Error) else CompileError(str(e))


def error(message: str) -> Error:
    """A :class:`Error` with PopTorch's Python-side type."""
    return Error(message)


#: PopTorch's text when an executable is needed but missing
NO_EXECUTABLE = "Model has not been compiled or has been destroyed."
