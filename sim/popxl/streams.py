"""Host streams (PopXL ``popxl.h2d_stream`` / ``popxl.d2h_stream``).

A stream is a name, a shape and a dtype; ``ops.host_load`` turns a host-to-device stream into an
input of the simulated graph (a host stream copy every host transfer) and ``ops.host_store``
turns a tensor into an output streamed back to the host.
"""

from __future__ import annotations

import itertools

from . import dtypes
from .tensor import TensorSpec

_ids = itertools.count()


class Stream:
    """A host stream (PopXL's base class of the two kinds)."""

    _kind = "stream"

    def __init__(self, shape, dtype, name: str | None):
        self.shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in self.shape):
            raise ValueError(f"{type(self).__name__}: every dimension must be > 0, got {self.shape}")
        self.dtype = dtypes.dtype.as_dtype(dtype)
        self._id = next(_ids)
        self.name = name or f"{self._kind}_{self._id}"
        from .context import get_current_context
        graphs = get_current_context().graphs
        self._ir = graphs[-1].ir if graphs else None  # the Ir it was made in (None: outside any graph)

    @property
    def tensor_id(self) -> str:
        return self.name

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, shape={self.shape}, dtype={self.dtype.name})"

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other) -> bool:
        return self is other


class HostToDeviceStream(Stream):
    _kind = "h2d_stream"


class DeviceToHostStream(Stream):
    _kind = "d2h_stream"


def h2d_stream(shape, dtype, name: str | None = None) -> HostToDeviceStream:
    """A host-to-device stream; load from it with ``ops.host_load``."""
    return HostToDeviceStream(shape, dtype, name)


def d2h_stream(shape, dtype, name: str | None = None) -> DeviceToHostStream:
    """A device-to-host stream; store to it with ``ops.host_store``."""
    return DeviceToHostStream(shape, dtype, name)



_Stream = Stream  # the earlier private name
