"""PopTorch's error classes.

PopTorch raises ``poptorch.Error`` (its ``RecoverableError`` and ``UnrecoverableError`` derive
from it) with the message prefixed by its type, ``'poptorch_py_error': <message>``, and keeps
the bare message in ``.message``. The simulator's errors keep that shape so scripts that match
on the text, or catch ``poptorch.Error``, behave the same. They also derive from
:class:`sim.IpuSimError`.
"""

from __future__ import annotations

from ..errors import IpuSimError


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


def error(message: str) -> Error:
    """A :class:`Error` with PopTorch's Python-side type."""
    return Error(message)


#: PopTorch's text when an executable is needed but missing
NO_EXECUTABLE = "Model has not been compiled or has been destroyed."
