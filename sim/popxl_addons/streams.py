"""popxl-addons' ``InputStreams`` / ``OutputStreams``: host streams by name, and ``host_load`` /
``host_store``, which make a stream and its load or store at once."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .. import popxl
from ..popxl import ops


class _Streams(OrderedDict):
    """Streams by name, made from ``name=(shape, dtype)`` arguments; ``streams.x`` is ``streams["x"]``,
    ``streams[0]`` the first, and iterating gives the streams."""

    make = None  # popxl.h2d_stream or popxl.d2h_stream

    def __init__(self, **streams):
        super().__init__()
        for name, (shape, dtype) in streams.items():
            self[name] = type(self).make(shape, dtype, name=name)

    @classmethod
    def from_streams(cls, streams):
        new = cls()
        for stream in streams:
            new[stream.name] = stream
        return new

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no stream {name!r} (streams: {', '.join(self.keys())})") from None

    def __getitem__(self, key):
        if isinstance(key, (int, slice)):
            return list(self.values())[key]
        return super().__getitem__(key)

    def __iter__(self):
        return iter(list(self.values()))


class InputStreams(_Streams):
    """Host-to-device streams by name."""

    make = staticmethod(popxl.h2d_stream)


class OutputStreams(_Streams):
    """Device-to-host streams by name."""

    make = staticmethod(popxl.d2h_stream)


def host_load(t, dtype, name: str):
    """(``t`` as a numpy array of ``dtype``, a new h2d stream of its shape, the tensor loaded from it)."""
    dtype = popxl.dtype.as_dtype(dtype)
    stream = popxl.h2d_stream(np.shape(t), dtype, name=f"{name}_stream")
    return np.asarray(t, dtype=dtype.as_numpy()), stream, ops.host_load(stream, name)


def host_store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    """A new d2h stream of ``t``'s shape, ``t`` stored to it."""
    stream = popxl.d2h_stream(t.shape, t.dtype, name=f"{t.name}_stream")
    ops.host_store(stream, t)
    return stream
