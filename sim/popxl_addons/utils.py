"""popxl-addons' helpers: ``timer``, ``OrderedDict`` and ``WeightsDict``."""

from __future__ import annotations

import collections
import contextlib
import logging
import time

import numpy as np


@contextlib.contextmanager
def timer(title: str | None = None, log_to_wandb: bool = True):
    """Logs how long the block took (``time.perf_counter``: under ``ipusim script``, the simulated time)."""
    start = time.perf_counter()
    logging.info(f"Starting {title or ''}")
    yield
    logging.info(f"{title + ' duration' if title else 'Duration'}: {(time.perf_counter() - start) / 60:.2f} mins")


class OrderedDict(collections.OrderedDict):
    """An ordered dict whose ``idx(i)`` is its i-th value."""

    def idx(self, i: int):
        return list(self.values())[i]


class WeightsDict(dict):
    """Variables to numpy arrays of their shapes (the values a program writes to them)."""

    def __setitem__(self, variable, value) -> None:
        value = np.asarray(value)
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"WeightsDict: {variable!r} has shape {variable.shape}, the value {value.shape}")
        super().__setitem__(variable, value)

    def __init__(self, *args, **kwargs):
        super().__init__()
        for k, v in dict(*args, **kwargs).items():
            self[k] = v
