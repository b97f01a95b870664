"""popxl-addons' ``pipelined_execution``: a pipeline written in the main graph, stage by stage.

The ops made inside ``with pipelined_execution(steps) as pipeline:`` are one micro-batch of a
pipeline that runs ``steps`` micro-batches a pass; ``pipeline.stage(k)`` contexts say where each
stage's ops go. The Session compiles such a program as PopART's pipeline (``PipelinedExecution``,
a stage an IPU: ``AutoStage.SameAsIpu``) with ``steps`` micro-batches of gradient accumulation
when it is trained: the simulated pipeline fills, runs and flushes, stashes the activations the
backward stages read (``stash_and_restore_activations`` is that stash) and recomputes the forward
stages when the grad graphs were made with ``transforms.recompute_graph``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .. import popxl
from ..popxl.errors import PopXLError


class Pipeline:
    """The pipeline being written: its stages, and the stash of activations between them."""

    def __init__(self, steps: int):
        self.steps = steps
        self.stages: list[int] = []

    @contextlib.contextmanager
    def stage(self, index: int) -> Iterator[None]:
        """The ops of stage ``index`` (put them on their IPU with ``popxl.ipu``)."""
        if self.stages and index < self.stages[-1]:
            raise PopXLError(f"pipeline.stage({index}): stages are written in order; stage {self.stages[-1]} came "
                             "before")
        self.stages.append(index)
        yield

    def stash_and_restore_activations(self, call_info, grad_info) -> dict:
        """What a backward stage needs of ``call_info``'s forward call: the simulated pipeline stashes
        and restores the activations itself, so this is the grad graph's ``inputs_dict``."""
        return grad_info.inputs_dict(call_info)


@contextlib.contextmanager
def pipelined_execution(steps: int, *args, **kwargs) -> Iterator[Pipeline]:
    """A pipeline of ``steps`` micro-batches a pass (see the module docstring)."""
    ir = popxl.gcg().ir
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"pipelined_execution: steps must be a whole number >= 1, got {steps!r}")
    if ir._pipeline_steps is not None:
        raise PopXLError("pipelined_execution: the simulator runs one pipeline a program; this Ir has one already")
    pipeline = Pipeline(steps)
    yield pipeline
    ir._pipeline_steps = steps
    ir._note(f"pipelined_execution({steps}): compiled as PopART's pipeline of {len(set(pipeline.stages))} stages "
             f"(a stage an IPU), {steps} micro-batches a pass")
