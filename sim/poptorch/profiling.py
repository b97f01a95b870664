"""``poptorch.profiling``: tracepoints for the PopVision System Analyser.

PopTorch writes them through ``libpvti`` when ``PVTI_OPTIONS`` is set and is a no-op otherwise.
The simulator writes no System Analyser file, so :class:`Channel` behaves as PopTorch does
without ``libpvti``: ``instrument`` returns the object unchanged and ``tracepoint`` is a context
that does nothing (the simulated timeline is ``PoplarExecutor.simulation.trace``).
"""

from __future__ import annotations

import contextlib


class Channel:
    """A named profiling channel (no tracepoints are written by the simulator)."""

    def __init__(self, name: str):
        self.name = name

    def instrument(self, obj, *methods):
        """Return ``obj`` (its ``methods`` are not wrapped: there is no trace to write)."""
        return obj

    def tracepoint(self, name: str):
        """A context manager marking ``name`` (nothing is recorded)."""
        return contextlib.nullcontext()


__all__ = ["Channel"]
