"""``popxl.ops.remote_code_load`` and ``code_copy`` (PopXL's ``ops/code_copy.py``).

PopXL's ``remote_code_load(graph, "executable")`` copies a graph's code from streaming memory into the
tiles' executable memory before it is called (code kept off chip between uses). The simulator counts
every graph's code in the tiles' program memory for the whole run, as PopXL does for a graph whose code
is never loaded, and does not price the copy: the op is accepted with PopXL's argument checks and the
run's notes say so. ``code_copy`` is not implemented in PopXL either (its ``NotImplementedError``).
"""

from __future__ import annotations

from ..graph import Graph
from ._core import _graph

#: PopXL's code locations (only "executable" is a destination remote_code_load implements)
CODE_LOCATIONS = ("executable", "compute_buffer", "io_buffer")


def remote_code_load(graph: Graph, destination: str) -> None:
    """Accepted, not priced: see the module docstring."""
    where = "ops.remote_code_load"
    g = _graph(where)
    if not isinstance(graph, Graph):
        raise TypeError(f"{where}: expected a popxl Graph (ir.create_graph), got {graph!r}")
    if g is graph:
        raise ValueError(f"The remote_code_load op cannot load the code for the graph it resides in ({g.id}).")
    if destination not in CODE_LOCATIONS:
        raise ValueError(f"Not a valid location: {destination}. Must choose from: {', '.join(CODE_LOCATIONS)}")
    if destination != "executable":
        raise NotImplementedError(f"destination == '{destination}' for remote_code_load op, graph {graph.id} not "
                                  "supported.")
    g._check_open()
    g.ir._note(f"ops.remote_code_load({graph.name!r}, 'executable'): accepted, not priced (the copy of the graph's "
               "code from streaming memory is not simulated; its code is counted in the tiles' program memory for "
               "the whole run, as for a graph whose code is never loaded)")


def code_copy(graph: Graph, source: str, destination: str) -> None:
    """Not implemented in PopXL (its ``NotImplementedError``)."""
    raise NotImplementedError(f"{__name__} op is not yet implemented.")


__all__ = ["code_copy", "remote_code_load"]
