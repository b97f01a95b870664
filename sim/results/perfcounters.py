"""PopTorch's performance counters and the latencies built from them.

``getPerfCounters()`` returns host timestamps (seconds) of four events per stream transfer:
``input`` (the IPU asks for an input tensor), ``input_complete`` (it has arrived), ``output``
(the IPU offers an output tensor), ``output_complete`` (it has reached the host). Each key maps
to one list per input (or output) tensor, in the model's flattened order; an empty result is
``[[]]``. The simulator's timestamps count from the start of the run, at full precision
(hardware rounds to its clock's resolution).
"""

from __future__ import annotations

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
    starts_per_tensor = counters[start_key]
    ends_per_tensor = counters[end_key]
    starts = [start_reduce(col) for col in zip(*starts_per_tensor)] if starts_per_tensor[0] else []
    ends = [end_reduce(col) for col in zip(*ends_per_tensor)] if ends_per_tensor[0] else []
    if not ends:
        return (0.0, 0.0, 0.0)
    if len(starts) % len(ends):
        raise ValueError(f"{len(starts)} {start_key!r} stamps do not group into {len(ends)} {end_key!r} stamps")
    group = len(starts) // len(ends)
    firsts = [min(starts[i:i + group]) for i in range(0, len(starts), group)]
    durations = [e - s for s, e in zip(firsts, ends)]
    return (min(durations), max(durations), sum(durations) / len(durations))


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
