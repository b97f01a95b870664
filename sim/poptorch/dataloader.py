"""``poptorch.DataLoader`` and ``poptorch.AsynchronousDataAccessor``.

``DataLoader`` is a ``torch.utils.data.DataLoader`` whose batches hold everything one call of
the model consumes: ``batch_size`` (the micro-batch) x ``deviceIterations`` x
(``replicationFactor`` / input group size) x ``gradientAccumulation`` samples
(:attr:`DataLoader.combinedBatchSize`). With several processes (``Options.Distributed``) each
process reads its own contiguous part of a map-style dataset. The asynchronous modes read the
data in this process, in the same order (``AsynchronousDataAccessor`` and
``DataLoaderMode.Async``/``AsyncRebatched`` keep PopTorch's interface, checks and batch sizes):
the host's data loading is not part of what the simulator times, and a model whose options
fed a loader says so in its run's notes (:func:`loader_modes`).
"""

from __future__ import annotations

import logging
import weakref

import torch

from . import enums
from ._errors import error
from .options import Options

logger = logging.getLogger("poptorch")

#: the user's Options object -> the modes of the DataLoaders made with it (weakly held)
_LOADERS: "weakref.WeakKeyDictionary[Options, set[str]]" = weakref.WeakKeyDictionary()


def loader_modes(options: Options) -> list[str]:
    """Names of the :class:`DataLoader` modes (``Sync``, ``Async``, ``AsyncRebatched``) made with
    ``options`` so far, sorted; empty if none."""
    return sorted(_LOADERS.get(options, ()))


class _SubDataset(torch.utils.data.Dataset):
    """This process's contiguous part of a dataset, a whole number of combined batches (with
    ``drop_last=False``, an even share of every sample).

    With shuffling, as in PopTorch, the whole dataset is permuted by a generator seeded with
    ``Options.randomSeed`` (the same permutation in every process) before each epoch, and each
    process reads its part of the permutation; the samples left over by the division are
    swapped in every other epoch.
    """

    def __init__(self, dataset, options: Options, step: int, drop_last: bool = True):
        n = len(dataset)
        procs = options.Distributed.numProcesses
        pid = options.Distributed.processId
        if drop_last:
            per_process = step * (n // (step * procs))
            self._offset = pid * per_process
            self._length = min(per_process, n - self._offset)
            self._leftovers = n % per_process if per_process else 0
        else:
            shares = [n // procs + (n % procs > p) for p in range(procs)]
            self._offset, self._length, self._leftovers = sum(shares[:pid]), shares[pid], 0
        self._base_offset = self._offset
        self._dataset = dataset
        self._seed = options.random_seed
        self._generator_state = None
        self._permutation = None

    def shuffle_global_indices(self) -> None:
        """A new permutation of the whole dataset (the same in every process)."""
        generator = torch.Generator()
        if self._generator_state is None:
            generator.manual_seed(self._seed)
        else:
            generator.set_state(self._generator_state)
        self._permutation = torch.randperm(len(self._dataset), generator=generator)
        self._generator_state = generator.get_state()

    def swap_range(self) -> None:
        """Alternate epochs start after the leftover samples, so that they are read too."""
        if self._base_offset == self._offset:
            self._offset += self._leftovers
        else:
            self._offset = self._base_offset

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        if not 0 <= index < self._length:
            raise IndexError(index)
        index += self._offset
        if self._permutation is not None:
            index = int(self._permutation[index])
        return self._dataset[index]


class DataLoader(torch.utils.data.DataLoader):
    """A ``torch.utils.data.DataLoader`` that batches for one call of a PopTorch model."""

    def __init__(self, options: Options, dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 num_workers: int = 0, drop_last: bool = True, persistent_workers: bool | None = None,
                 auto_distributed_partitioning: bool = True, mode=enums.DataLoaderMode.Sync,
                 async_options: dict | None = None, rebatched_worker_size: int | None = None,
                 batch_sampler=None, **kwargs):
        if not isinstance(options, Options):
            raise AssertionError("poptorch.DataLoader expects poptorch.Options as its first argument")
        options._freeze()  # as PopTorch: the loader's batch is sized from them
        _LOADERS.setdefault(options, set()).add(getattr(mode, "name", str(mode)))
        self._accessor = None
        if batch_sampler is not None:
            return self._init_with_sampler(options, dataset, batch_size, shuffle, num_workers,
                                           drop_last, persistent_workers,
                                           auto_distributed_partitioning, mode, async_options,
                                           batch_sampler, kwargs)
        shuffle = bool(shuffle)
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
                step = self._combined_batch_size * procs
                logger.warning(
                    "The number of elements in the dataset (%d) is not divisible by the number of "
                    "elements processed per step (%d) and drop_last=False. The last tensor will have "
                    "a batch size of %d. To avoid having to handle this special case switch to "
                    "drop_last=True", n, step, n % step)
            if procs > 1 and auto_distributed_partitioning:
                if shuffle and options.random_seed is None:
                    raise AssertionError("When using distributed execution you must set "
                                         "poptorch.Options.randomSeed()")
                if self._combined_batch_size is None:
                    raise AssertionError("batch_size=None not allowed for distributed execution.")
                dataset = _SubDataset(dataset, options, self._combined_batch_size, drop_last)
                if shuffle:  # the whole dataset is shuffled, before it is partitioned
                    self._shuffle_distributed, shuffle = True, False
        elif procs > 1 and auto_distributed_partitioning:
            raise AssertionError("IterableDatasets are not supported for distributed execution")
        if shuffle and options.random_seed is not None and "generator" not in kwargs:
            kwargs["generator"] = torch.Generator().manual_seed(options.random_seed)
        worker_batch = self._combined_batch_size
        rebatched = None
        if mode == enums.DataLoaderMode.AsyncRebatched and self._combined_batch_size is not None:
            mode, rebatched = enums.DataLoaderMode.Async, self._combined_batch_size
            if rebatched_worker_size is not None:
                if rebatched_worker_size > self._combined_batch_size:
                    raise AssertionError(
                        f"The rebatched_worker_size ({rebatched_worker_size}) must be <= to the "
                        f"combined batch size ({self._combined_batch_size})")
                worker_batch = rebatched_worker_size
        self._rebatched_drop_last = drop_last
        if rebatched is not None:
            drop_last = False
        super().__init__(dataset, batch_size=worker_batch, shuffle=shuffle,
                         num_workers=num_workers, drop_last=drop_last,
                         persistent_workers=persistent_workers and num_workers > 0, **kwargs)
        self._make_accessor(mode, async_options, rebatched)

    def _init_with_sampler(self, options, dataset, batch_size, shuffle, num_workers, drop_last,
                           persistent_workers, auto_distributed_partitioning, mode, async_options,
                           batch_sampler, kwargs) -> None:
        """``batch_sampler`` draws micro-batches; this many make one call's batch."""
        if batch_size != 1 or shuffle:
            raise error("`batch_sampler` option is mutually exclusive with batch_size, shuffle.")
        if options.Distributed.numProcesses > 1 and auto_distributed_partitioning:
            raise error("`batch_sampler` option is mutually exclusive with "
                        "auto_distributed_partitioning=True.")
        self._options = options
        self._mode = mode
        self._is_iterable = False
        groups = options.replication_factor // options.input_group_size
        self._combine = options.device_iterations * groups * options.Training.gradient_accumulation
        micro = getattr(batch_sampler, "batch_size", None)
        self._combined_batch_size = None if micro is None else micro * self._combine
        self._sampler_drop_last = drop_last
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        super().__init__(dataset, batch_sampler=batch_sampler, num_workers=num_workers,
                         persistent_workers=persistent_workers and num_workers > 0, **kwargs)
        self._make_accessor(mode, async_options, None)

    def _make_accessor(self, mode, async_options, rebatched) -> None:
        if mode == enums.DataLoaderMode.Async:
            async_options = dict(async_options or {})
            if "rebatched_size" in async_options:
                raise AssertionError("You cannot use DataLoaderMode.AsyncRebatched and manually "
                                     "specify the rebatched_size in async_options")
            self._accessor = AsynchronousDataAccessor(self, **async_options, rebatched_size=rebatched)

    def __len__(self) -> int:
        if self._accessor is not None and self._accessor.rebatched_size:
            n = len(self.dataset)
            length = n // self._accessor.rebatched_size
            if not self._rebatched_drop_last and n % self._accessor.rebatched_size:
                length += 1
            return length
        length = super().__len__()
        if getattr(self, "_combine", None):
            drop = self._sampler_drop_last
            length = length // self._combine if drop else -(-length // self._combine)
        return length

    def __iter__(self):
        if getattr(self, "_shuffle_distributed", False):
            self.dataset.shuffle_global_indices()
            self.dataset.swap_range()
        if self._accessor is not None:
            return iter(self._accessor)
        if getattr(self, "_combine", None):
            return self._combined(super().__iter__())
        return super().__iter__()

    def _sampler_iter(self):
        return torch.utils.data.DataLoader.__iter__(self)

    def _combined(self, batches):
        """Concatenate ``deviceIterations x replicas x gradientAccumulation`` sampled batches."""
        group = []
        for batch in batches:
            group.append(batch)
            if len(group) == self._combine:
                yield _concat(group)
                group = []
        if group and not self._sampler_drop_last:
            yield _concat(group)

    def terminate(self) -> None:
        """Stop the asynchronous accessor of an ``Async`` loader (no effect otherwise)."""
        if self._accessor is not None:
            self._accessor.terminate()

    @property
    def combinedBatchSize(self) -> int | None:
        """Samples read from the dataset for one call of the model."""
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        return self._options


def _concat(batches):
    """Batches of the same structure joined along dim 0."""
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(batches)
    if isinstance(first, (list, tuple)):
        return type(first)(_concat(list(parts)) for parts in zip(*batches))
    if isinstance(first, dict):
        return {k: _concat([b[k] for b in batches]) for k in first}
    return batches


class AsynchronousDataAccessor:
    """PopTorch's asynchronous loader with its interface and checks, reading in this process
    (the simulator does not time the host's data loading): iterates ``dataset`` (any iterable,
    typically a DataLoader), rebatching to ``rebatched_size`` samples if given."""

    def __init__(self, dataset, buffer_size: int = 3, miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True, early_preload: bool = False,
                 sharing_strategy=enums.SharingStrategy.ForkServer, rebatched_size: int | None = None):
        self._worker = None
        if isinstance(dataset, DataLoader) and dataset._accessor is not None:
            raise error("The DataLoader already uses an AsynchronousDataAccessor internally. Either "
                        "use the existing one or set mode='poptorch.DataLoaderMode.Sync' in the DataLoader.")
        if buffer_size < 1:
            raise error("buffer_size must be at least 1")
        if rebatched_size is not None:
            assert rebatched_size > 1, "rebatched_size must be None or greater than 1"
        self._dataset = dataset
        self.rebatched_size = rebatched_size
        self._worker = True  # the "worker" is this process; terminate() stops iteration
        self._iterator = None

    def terminate(self) -> None:
        """Stop reading (PopTorch kills its worker process)."""
        self._worker = None
        self._iterator = None

    def __len__(self):
        n = len(self._dataset)
        if self.rebatched_size and getattr(self._dataset, "_accessor", None) is not self:
            n = n * getattr(self._dataset, "batch_size", 1) // self.rebatched_size
        return n

    def __iter__(self):
        assert self._worker is not None, "The AsynchronousDataAccessor has been terminated"
        source = self._dataset
        if isinstance(source, DataLoader) and source._accessor is self:
            source = _PlainIter(source)
        self._iterator = iter(source) if not self.rebatched_size else self._rebatch(iter(source))
        return self

    def _rebatch(self, batches):
        """Re-cut the worker batches into batches of ``rebatched_size`` samples."""
        pending, count = [], 0
        drop_last = getattr(self._dataset, "_rebatched_drop_last", True)
        for batch in batches:
            pending.append(batch)
            count += _batch_len(batch)
            while count >= self.rebatched_size:
                joined = _concat(pending)
                yield _narrow(joined, 0, self.rebatched_size)
                rest = count - self.rebatched_size
                pending = [_narrow(joined, self.rebatched_size, rest)] if rest else []
                count = rest
        if pending and not drop_last:
            yield _concat(pending)

    def __next__(self):
        assert self._worker is not None, "The AsynchronousDataAccessor has been terminated"
        if self._iterator is None:
            iter(self)
        return next(self._iterator)


class _PlainIter:
    """A DataLoader iterated as torch's (without going back through its accessor)."""

    def __init__(self, loader: DataLoader):
        self._loader = loader

    def __iter__(self):
        if getattr(self._loader, "_combine", None):
            return self._loader._combined(self._loader._sampler_iter())
        return self._loader._sampler_iter()


def _batch_len(batch) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    if isinstance(batch, (list, tuple)):
        return _batch_len(batch[0])
    if isinstance(batch, dict):
        return _batch_len(next(iter(batch.values())))
    return 1


def _narrow(batch, start: int, length: int):
    if isinstance(batch, torch.Tensor):
        return batch.narrow(0, start, length)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_narrow(b, start, length) for b in batch)
    if isinstance(batch, dict):
        return {k: _narrow(v, start, length) for k, v in batch.items()}
    return batch


__all__ = ["DataLoader", "AsynchronousDataAccessor"]
