"""What a simulation gives back, and its views.

``run`` holds :class:`Run` (PoplarExecutor's numbers, trace, breakdown, memory);
``perfcounters`` builds PopTorch's perf counters and latencies; ``report`` writes the text
summary and output files; ``collective`` times one collective alone.
"""

from .run import TRACE_COLUMNS, Run

__all__ = ["Run", "TRACE_COLUMNS"]
