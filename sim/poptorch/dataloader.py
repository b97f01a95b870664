"""``poptorch.DataLoader`` and ``poptorch.AsynchronousDataAccessor``.

``DataLoader`` is a ``torch.utils.data.DataLoader`` whose batches hold everything one call of
the model consumes: ``batch_size`` (the micro-batch) x ``deviceIterations`` x
(``replicationFactor`` / input group size) x ``gradientAccumulation`` samples
(:attr:`DataLoader.combinedBatchSize`). With several processes (``Options.Distributed``) each
process reads its own contiguous part of a map-style dataset. The asynchronous modes read the
data synchronously: the host's data loading is not part of what the simulator times.
"""

from __future__ import annotations

import torch

from . import enums
from ._errors import error
from .options import Options


class _SubDataset(torch.utils.data.Dataset):
    """This process's contiguous part of a dataset, a whole number of combined batches."""

    def __init__(self, dataset, options: Options, step: int):
        n = len(dataset)
        procs = options.Distributed.numProcesses
        per_process = step * (n // (step * procs))
        self._offset = options.Distributed.processId * per_process
        self._length = min(per_process, n - self._offset)
        self._dataset = dataset

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        if not 0 <= index < self._length:
            raise IndexError(index)
        return self._dataset[index + self._offset]


class DataLoader(torch.utils.data.DataLoader):
    """A ``torch.utils.data.DataLoader`` that batches for one call of a PopTorch model."""

    def __init__(self, options: Options, dataset, batch_size: int | None = 1, shuffle: bool = False,
                 num_workers: int = 0, drop_last: bool = True, persistent_workers: bool | None = None,
                 auto_distributed_partitioning: bool = True, mode=enums.DataLoaderMode.Sync,
                 async_options: dict | None = None, rebatched_worker_size: int | None = None, **kwargs):
        if not isinstance(options, Options):
            raise AssertionError("poptorch.DataLoader expects poptorch.Options as its first argument")
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        self._options = options
        self._mode = mode
        if batch_size is None:
            self._combined_batch_size = None
        else:
            groups = options.replication_factor // options.input_group_size
            self._combined_batch_size = (batch_size * options.device_iterations * groups
                                         * options.Training.gradient_accumulation)
        procs = options.Distributed.numProcesses
        self._is_iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        if not self._is_iterable:
            n = len(dataset)
            if not drop_last and self._combined_batch_size is not None and \
                    n % (self._combined_batch_size * procs):
                raise AssertionError(
                    f"The number of elements in the dataset ({n}) is not divisible by the number of "
                    f"elements processed per step ({self._combined_batch_size * procs}) and "
                    "drop_last=False. Switch to drop_last=True.")
            if procs > 1 and auto_distributed_partitioning:
                if shuffle and options.random_seed is None:
                    raise AssertionError("When using distributed execution you must set "
                                         "poptorch.Options.randomSeed()")
                if self._combined_batch_size is None:
                    raise AssertionError("batch_size=None not allowed for distributed execution.")
                dataset = _SubDataset(dataset, options, self._combined_batch_size)
        elif procs > 1 and auto_distributed_partitioning:
            raise AssertionError("IterableDatasets are not supported for distributed execution")
        if shuffle and options.random_seed is not None and "generator" not in kwargs:
            kwargs["generator"] = torch.Generator().manual_seed(options.random_seed)
        super().__init__(dataset, batch_size=self._combined_batch_size, shuffle=shuffle,
                         num_workers=num_workers, drop_last=drop_last,
                         persistent_workers=persistent_workers and num_workers > 0, **kwargs)

    @property
    def combinedBatchSize(self) -> int | None:
        """Samples read from the dataset for one call of the model."""
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        return self._options


class AsynchronousDataAccessor:
    """PopTorch's asynchronous loader, reading synchronously (the simulator does not time the
    host's data loading): iterates ``dataset`` (any iterable, typically a DataLoader)."""

    def __init__(self, dataset, buffer_size: int = 3, miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True, early_preload: bool = False,
                 sharing_strategy=enums.SharingStrategy.FileSystem, rebatched_size: int | None = None):
        if buffer_size < 1:
            raise error("buffer_size must be at least 1")
        self._dataset = dataset
        self._iterator = None

    def terminate(self) -> None:
        self._iterator = None

    def __len__(self):
        return len(self._dataset)

    def __iter__(self):
        self._iterator = iter(self._dataset)
        return self

    def __next__(self):
        if self._iterator is None:
            self._iterator = iter(self._dataset)
        return next(self._iterator)


__all__ = ["DataLoader", "AsynchronousDataAccessor"]
