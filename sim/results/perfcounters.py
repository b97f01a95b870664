"""PopTorch's performance counters and the latencies built from them.

``getPerfCounters()`` returns host timestamps (seconds) of four events per stream transfer:
``input`` (the IPU asks for an input tensor), ``input_complete`` (it has arrived), ``output``
(the IPU offers an output tensor), ``output_complete`` (it has reached the host). Each key maps
to one list per input (or output) tensor, in the model's flattened order; an empty result is
``[[]]``. The simulator's timestamps count from the start of the run, at full precision
(hardware rounds to its clock's resolution).
"""

from __future__ import annotations

import numpy as np

KEYS = ("input", "input_complete", "output", "output_complete")


def empty_counters() -> dict[str, list[list[float]]]:
    """What PopTorch returns before the first run."""
    return {k: [[]] for k in KEYS}


def normalize(per_tensor: list[list[float]]) -> list[list[float]]:
    """PopTorch returns ``[[]]`` rather than ``[]`` when there is no tensor."""
    return per_tensor if per_tensor else [[]]


def latency(counters: dict, start_key: str, start_reduce, end_key: str, end_reduce) -> tuple[float, float, float]:
    """(min, max, avg) of the time from ``start_key`` to ``end_key`` events, in seconds.

    At each transfer index the timestamps are reduced across tensors (``start_reduce`` over
    the start lists, ``end_reduce`` over the end lists). When there are more start stamps
    than end stamps (outputs only every N steps, or once), the start stamps are taken in
    consecutive groups, one group per end stamp, and each group's earliest is the start.
    """
    starts = _reduce_steps(counters[start_key], start_reduce)
    ends = _reduce_steps(counters[end_key], end_reduce)
    if not len(ends) or not len(starts):  # nothing measured (synthetic data, no inputs or outputs)
        return (0.0, 0.0, 0.0)
    if len(starts) % len(ends):
        raise ValueError(f"{len(starts)} {start_key!r} stamps do not group into {len(ends)} {end_key!r} stamps")
    firsts = starts.reshape(len(ends), -1).min(axis=1)
    durations = (ends - firsts).tolist()
    return (min(durations), max(durations), sum(durations) / len(durations))


def _reduce_steps(per_tensor: list, reduce) -> np.ndarray:
    """One stamp per transfer index: ``reduce`` (min or max) over the tensors' stamps (lists or
    arrays, one per tensor)."""
    if not len(per_tensor) or not len(per_tensor[0]):
        return np.empty(0)
    steps = min(len(stamps) for stamps in per_tensor)
    if reduce in (min, max) and steps:  # the usual case, vectorised: one row per tensor
        stamps = np.array([s[:steps] for s in per_tensor], dtype=float)
        return stamps.min(axis=0) if reduce is min else stamps.max(axis=0)
    return np.array([reduce(col) for col in zip(*per_tensor)], dtype=float)


#: the perf-counter keys each latency runs between (see the functions below)
LATENCY_KEYS = {"round_trip": ("input", "output_complete"), "host_to_ipu": ("input", "input_complete"),
                "compute": ("input_complete", "output"), "ipu_to_host": ("output", "output_complete")}


def round_trip(counters):
    """``getLatency()``: first input requested -> last output on the host."""
    return latency(counters, "input", min, "output_complete", max)


def host_to_ipu(counters):
    """``getHostIpuLatency()``: first input requested -> last input transferred."""
    return latency(counters, "input", min, "input_complete", max)


def compute(counters):
    """``getComputeLatency()``: last input transferred -> last output offered."""
    return latency(counters, "input_complete", max, "output", max)


def ipu_to_host(counters):
    """``getIpuHostLatency()``: first output offered -> last output on the host."""
    return latency(counters, "output", min, "output_complete", max)
