"""``popxl.create_seeds``: seed tensors made on the host from a parent seed (PopXL's random_seed.py)."""

from __future__ import annotations

import numpy as np

MAX_UINT64 = 2 ** 64 - 1


def create_seeds(seed: int, offset: int = 0, batches_per_step: int = 1, gradient_accumulation_factor: int = 1,
                 replicas: int = 1) -> np.ndarray:
    """``batches_per_step * gradient_accumulation_factor * replicas`` seeds, each a uint64 as two
    uint32 (most significant first), shaped (batches_per_step, gradient_accumulation_factor,
    replicas, 2) with the dimensions of size 1 squeezed out, as PopXL makes them."""
    seeds = np.random.default_rng(seed + offset).integers(
        0, MAX_UINT64, endpoint=True, dtype="uint64", size=batches_per_step * gradient_accumulation_factor * replicas)
    pairs = np.stack([np.array(uint64_to_two_uint32(int(s)), dtype="uint32") for s in seeds])
    return np.squeeze(pairs.reshape(batches_per_step, gradient_accumulation_factor, replicas, 2))


def uint64_to_two_uint32(num: int) -> tuple[int, int]:
    """The most and least significant 32 bits of a uint64."""
    if num < 0 or num > MAX_UINT64:
        raise ValueError(f"{num} is outside the range of a uint64 (0 to 2**64 - 1)")
    return num >> 32, num & 0xFFFFFFFF


def two_uint32_to_uint64(v: tuple[int, int]) -> int:
    return (int(v[0]) << 32) | int(v[1])


__all__ = ["create_seeds", "two_uint32_to_uint64", "uint64_to_two_uint32"]
