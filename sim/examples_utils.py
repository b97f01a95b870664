"""What ``ipusim script`` gives a script for Graphcore's ``examples_utils`` (graphcore/examples-utils): its
``load_lib``, which Graphcore's examples call to compile and load their C++ custom ops and PopART patterns
(``from examples_utils import load_lib``; ``load_lib("custom_ops/remap_tensor_ce.cpp")``). Compiling them
needs Poplar's SDK, so the stand-in compiles nothing and returns None.
The custom ops such a library defines are priced when the model calls them (``poptorch.custom_op``: a remap
of each input unless ``sim.poptorch.register_op`` gives the op a cost; the run's notes say which); a PopART
pattern it registers (a graph rewrite in C++) has no effect on the simulated program."""

from __future__ import annotations


def load_lib(path: str, *args, **kwargs) -> None:
    """None: the C++ source or shared library of custom ops at ``path`` is neither compiled nor loaded."""
    return None
