"""The building context, as in PopXL: which graph ops go into, on which IPU, in which name scope.

PopXL keeps one global context; so does this module. ``with ir.main_graph:`` (or a subgraph
being built by ``ir.create_graph``) selects the graph; :func:`ipu` sets the IPU of the ops made
inside it (``Op.ipu`` in the simulator's graph); :func:`name_scope` prefixes op names;
:func:`in_sequence` is accepted and has nothing to change (the simulator runs ops in the order
they were created, which is what ``in_sequence(True)`` asks for); :func:`io_tiles` puts the remote
copies made in it on the IO tiles (:mod:`sim.popxl.io_tile_placement`); other ops made in it run on
the compute tiles in the simulation, and the run's notes say so.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import PopXLError

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Graph


class Context:
    def __init__(self):
        self.graphs: list[Graph] = []
        self.ipu: int | None = None
        self.scopes: list[str] = []
        self.in_sequence: bool | None = None
        self.io_tiles = False
        self.execution_context = None

    @property
    def graph(self) -> Graph:
        if not self.graphs:
            raise PopXLError(
                "Trying to access a graph, but no graph has been selected. Hint - try performing the "
                "operations in a context manager (for example `with ir.main_graph:`) or inside a "
                "function that's called by `ir.create_graph()`")
        return self.graphs[-1]


_CONTEXT = Context()


def get_current_context() -> Context:
    return _CONTEXT


def get_current_graph() -> Graph:
    """The graph ops are being added to (PopXL ``popxl.gcg()``)."""
    return _CONTEXT.graph


def get_ir():
    """The Ir of the current graph (PopXL ``popxl.gir()``)."""
    return get_current_graph().ir


def get_main_graph() -> Graph:
    """The main graph of the Ir being built (PopXL ``popxl.gmg()``)."""
    return _CONTEXT.graph.ir.main_graph


gcg = get_current_graph
gmg = get_main_graph
gir = get_ir


@contextlib.contextmanager
def ipu(ipu: int) -> Iterator[int]:
    """Ops created in this context run on IPU ``ipu`` of the replica."""
    if isinstance(ipu, bool) or not isinstance(ipu, int) or ipu < 0:
        raise TypeError(f"popxl.ipu expects an IPU index >= 0, got {ipu!r}")
    saved, _CONTEXT.ipu = _CONTEXT.ipu, ipu
    try:
        yield ipu
    finally:
        _CONTEXT.ipu = saved


@contextlib.contextmanager
def in_sequence(mode: bool | str = True) -> Iterator[bool]:
    """Accepted (PopXL's ``mode``: True, False or ``"pass"``, which keeps the enclosing setting): the
    simulator already runs ops in the order they are created."""
    if mode is None:
        raise TypeError("None cannot be passed to 'in_sequence'. Try False instead.")
    if mode == "pass":
        mode = _CONTEXT.in_sequence
    saved, _CONTEXT.in_sequence = _CONTEXT.in_sequence, bool(mode)
    try:
        yield bool(mode)
    finally:
        _CONTEXT.in_sequence = saved


@contextlib.contextmanager
def name_scope(name: str) -> Iterator[list[str]]:
    """Prefix the names of ops created in this context with ``name/``."""
    _CONTEXT.scopes.append(str(name))
    try:
        yield list(_CONTEXT.scopes)
    finally:
        _CONTEXT.scopes.pop()


@contextlib.contextmanager
def io_tiles() -> Iterator[None]:
    """Remote copies made in this context run on the IO tiles (:mod:`sim.popxl.io_tile_placement`);
    other ops made in it are simulated on the compute tiles, which the run's notes say
    (``Graph._building``)."""
    saved, _CONTEXT.io_tiles = _CONTEXT.io_tiles, True
    try:
        yield
    finally:
        _CONTEXT.io_tiles = saved


@contextlib.contextmanager
def debug_context_frame_offset(i: int) -> Iterator[int]:
    """Accepted (PopXL's offset of the source frame its debug info names): the simulator keeps no
    debug info. A context manager, and a decorator as PopXL's ops use it."""
    yield i


def op_debug_context(name):
    """PopXL's decorator that gives an op function its own debug context (``@op_debug_context`` or
    ``@op_debug_context("name")``): the function runs as it is (the simulator keeps no debug info)."""
    def outer(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)
        return wrapper
    return outer(name) if callable(name) else outer


@contextlib.contextmanager
def _execution_context(execution_context) -> Iterator[object]:
    """PopXL's (private) choice of the program fragment ops go into (PopART's ExecutionContext:
    the normal program, the weights-from-host or weights-to-host fragment, ...). Accepted; ops made
    in it are simulated in the normal program, which the run's notes say (``Graph._building``)."""
    saved, _CONTEXT.execution_context = _CONTEXT.execution_context, execution_context
    try:
        yield execution_context
    finally:
        _CONTEXT.execution_context = saved
