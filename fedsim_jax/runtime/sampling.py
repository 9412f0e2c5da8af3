"""Client sampling for schedulers, with a fast path for the one-client case."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def choose_one(rng: np.random.Generator, pool: Sequence[int] | np.ndarray) -> int:
  """`rng.choice(pool, 1, replace=False)[0]`, drawing exactly what it draws (see below); `pool`
  may be any sequence, so callers need not build an array for one draw."""
  return int(pool[int(rng.integers(len(pool)))])


def choose_without_replacement(rng: np.random.Generator, pool: np.ndarray, k: int) -> np.ndarray:
  """`rng.choice(pool, k, replace=False)`, drawing exactly what it draws.

  For k = 1, `Generator.choice` (Floyd's algorithm) makes one bounded integer draw over the
  pool, the same draw as `rng.integers(len(pool))`, at a sixth of the cost; asynchronous
  schedulers refill one freed slot per arrival, so this is on their hot path.
  `tests/runtime/test_scheduling_properties.py` checks the two agree.
  """
  if k == 1:
    return pool[rng.integers(len(pool))][None]
  return rng.choice(pool, k, replace=False)
