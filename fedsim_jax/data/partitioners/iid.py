"""IID partition: a uniform random split into near-equal parts."""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsim_jax.data.partitioners.base import (
  PARTITIONERS,
  PartitionContext,
  check_int,
  check_num_clients,
  sorted_parts,
)
from fedsim_jax.settings import Settings


def iid(num_examples: int, num_clients: int, seed: int) -> list[np.ndarray]:
  """Splits a random permutation of `range(num_examples)` into `num_clients` parts.

  Client sizes differ by at most one.

  Raises:
    ValueError: num_examples < 1, or num_clients outside 1..num_examples.
  """
  check_int('num_examples', num_examples, 1)
  check_num_clients(num_clients, num_examples)
  permutation = np.random.default_rng(seed).permutation(num_examples)
  return sorted_parts(np.array_split(permutation, num_clients))


@dataclasses.dataclass(frozen=True)
class IidSettings(Settings):
  """No settings."""


@PARTITIONERS.register('iid', IidSettings)
def iid_partitioner(settings: IidSettings, context: PartitionContext) -> list[np.ndarray]:
  """A uniform random split into near-equal parts."""
  del settings
  # From the example count: labels may be sequences (next-token datasets).
  return iid(len(context.labels), context.num_clients, context.seed)
