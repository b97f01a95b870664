"""The state of a graph capture in progress (see :mod:`sim.poptorch._capture`).

While a model is being traced, PopTorch's annotations (``Block``, ``NameScope``, …) record
into the active :class:`CaptureState`; outside a capture they do nothing and the model runs as
plain PyTorch on the CPU.

Two tracers are used. Under ``torch.fx`` (mode ``"fx"``) the tracer stamps the state onto each
node it creates. Under ``torch.export`` (mode ``"export"``) scoped annotations enter
``torch.fx.traceback.annotate`` so that the exported nodes carry them in ``node.meta["custom"]``.
"""

from __future__ import annotations

import contextlib

BLOCK = "ipusim_block"  # (user_id, ipu_id) of the innermost open ``with Block``
START = "ipusim_start"  # (user_id, ipu_id) set by ``Block.start`` (a block from here on)
SCOPE = "ipusim_scope"  # NameScope path
MARK = "ipusim_mark"  # (annotation name, value) carried by an annotation's node
MULTICONV = "ipusim_multiconv"  # (group id, settings) of the innermost open ``with MultiConv``
#: ((loop id, iteration), ...) of the ``for_loop`` iterations open around a node, outermost first
LOOP = "ipusim_loop"
#: the flag a ``for_loop`` iteration's first output carries: the iteration's control work (exit flag,
#: iterator) goes with it; every output carries its copies back to the body's input
LOOP_CONTROL = 1


class CaptureState:
    def __init__(self, mode: str):
        self.mode = mode
        self.blocks: list[tuple[str, int | None]] = []
        self.start: tuple[str, int | None] | None = None
        self.scopes: list[str] = []
        self.multiconvs: list[tuple[str, tuple]] = []
        self._next_multiconv = 0
        self._next_auto = 0
        self._annotations: list = []
        self.notes: list[str] = []  # for the run's notes: annotations accepted without a modelled effect
        #: trace two iterations of a ``for_loop`` and let the capture write out the rest (False: trace all)
        self.repeat_loops = True
        self.loops: list[tuple[int, int]] = []  # (loop id, iteration) of each open for_loop iteration
        self.loop_counts: dict[int, int] = {}  # loop id -> iterations, of each loop traced for two

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def auto_id(self) -> str:
        uid = str(self._next_auto)
        self._next_auto += 1
        return uid

    def reset_auto_id(self) -> None:
        self._next_auto = 0

    # --- scoped annotations (Block, NameScope, annotation marks) -------------------------
    def _enter_export(self, meta: dict) -> None:
        if self.mode == "export":
            import torch.fx.traceback as fxt
            cm = fxt.annotate(meta)
            cm.__enter__()
            self._annotations.append(cm)

    def _exit_export(self) -> None:
        if self.mode == "export" and self._annotations:
            self._annotations.pop().__exit__(None, None, None)

    def push_block(self, user_id: str | None, ipu_id: int | None) -> None:
        uid = user_id if user_id is not None else self.auto_id()
        self.blocks.append((uid, ipu_id))
        self._enter_export({BLOCK: (uid, ipu_id)})

    def pop_block(self) -> None:
        if self.blocks:
            self.blocks.pop()
            self._exit_export()

    def push_scope(self, name: str) -> None:
        self.scopes.append(name)
        self._enter_export({SCOPE: "/".join(self.scopes)})

    def pop_scope(self) -> None:
        if self.scopes:
            self.scopes.pop()
            self._exit_export()

    def push_multiconv(self, settings: tuple) -> None:
        """Open a multi-convolution: the convolutions traced until :meth:`pop_multiconv` join it."""
        group = f"multiconv{self._next_multiconv}"
        self._next_multiconv += 1
        self.multiconvs.append((group, settings))
        self._enter_export({MULTICONV: (group, settings)})

    def pop_multiconv(self) -> None:
        if self.multiconvs:
            self.multiconvs.pop()
            self._exit_export()

    @contextlib.contextmanager
    def mark(self, name: str, value=None):
        """Under export, the ops created inside carry ``(name, value)`` in their metadata."""
        self._enter_export({MARK: (name, value)})
        try:
            yield
        finally:
            self._exit_export()

    @contextlib.contextmanager
    def loop_iteration(self, loop: int, iteration: int):
        """The ops traced inside are iteration ``iteration`` of ``for_loop`` ``loop`` (:data:`LOOP`)."""
        self.loops.append((loop, iteration))
        self._enter_export({LOOP: tuple(self.loops)})
        try:
            yield
        finally:
            self.loops.pop()
            self._exit_export()

    def node_meta(self) -> dict:
        """What the fx tracer stamps on a node it creates."""
        meta = {}
        if self.blocks:
            meta[BLOCK] = self.blocks[-1]
        if self.start is not None:
            meta[START] = self.start
        if self.scopes:
            meta[SCOPE] = "/".join(self.scopes)
        if self.multiconvs:
            meta[MULTICONV] = self.multiconvs[-1]
        if self.loops:
            meta[LOOP] = tuple(self.loops)
        return meta

    def close(self) -> None:
        while self._annotations:
            self._annotations.pop().__exit__(None, None, None)


_ACTIVE: CaptureState | None = None


def active() -> CaptureState | None:
    return _ACTIVE


@contextlib.contextmanager
def capturing(mode: str, repeat_loops: bool = True):
    global _ACTIVE
    saved, _ACTIVE = _ACTIVE, CaptureState(mode)
    _ACTIVE.repeat_loops = repeat_loops
    try:
        yield _ACTIVE
    finally:
        _ACTIVE.close()
        _ACTIVE = saved


_QUIET = False


def quiet() -> bool:
    """True while the capture runs the model on its example batch (no user-visible effects)."""
    return _QUIET


@contextlib.contextmanager
def quietly():
    global _QUIET
    saved, _QUIET = _QUIET, True
    try:
        yield
    finally:
        _QUIET = saved
