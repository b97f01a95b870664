"""Errors of the PopXL front end.

They subclass :class:`sim.errors.IpuSimError` (so ``except sim.IpuSimError`` catches them) and
the Python exception PopXL itself raises in the same situation (``RuntimeError`` for using the
API out of order, ``ValueError`` for a bad ``session.run`` buffer, ``AttributeError`` for a
name that does not exist here), so a script's own ``except`` clauses keep working.
"""

from __future__ import annotations

from ..errors import IpuSimError, UnsupportedOpError


class PopXLError(IpuSimError, RuntimeError):
    """The PopXL API was used out of order (no graph selected, a frozen Ir, a tensor of another
    graph, a subgraph called with missing inputs ...)."""


class GraphInputError(IpuSimError, ValueError):
    """A called or repeated graph was given the wrong inputs (too many, a missing one, another
    shape or dtype): PopXL's ``ValueError``."""


class ForeignTensorError(PopXLError, ValueError):
    """A tensor used in a graph it does not belong to (another graph, or another Ir's): PopXL's
    ``check_in_graph`` raises ``ValueError``."""


class GraphContextError(PopXLError, ValueError):
    """A tensor made or given where PopXL (or popxl-addons) does not allow it (a variable outside the
    main graph, a ``grads_provided`` tensor that is not an output of the forward graph): their
    ``ValueError``."""


class SessionIOError(IpuSimError, ValueError):
    """``session.run`` was given missing, unexpected or wrongly shaped buffers."""


class NotModelledError(UnsupportedOpError, AttributeError):
    """A PopXL name the simulator has no model for (an op, a helper, a variable kind)."""


def not_modelled(where: str, name: str, supported, op: bool = False) -> NotModelledError:
    listing = ", ".join(sorted(supported))
    hint = (" Build the program without it, or build the model with sim.GraphBuilder and give the "
            "op its own cost (kind='custom')" if op else "")
    return NotModelledError(f"{where}.{name} is not modelled by the simulator (ipusim's PopXL front "
                            f"end); supported here: {listing}.{hint}")


class UndefinedValue(Exception):
    """PopXL's error for a value that is not defined (a tensor's IPU or tile set outside any
    ``popxl.ipu`` / ``popxl.io_tiles`` context)."""
