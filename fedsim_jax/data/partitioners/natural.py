"""Natural split: one client per natural id (writer, speaking role, user; LEAF)."""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsim_jax.data.partitioners.base import PARTITIONERS, PartitionContext, check_int
from fedsim_jax.settings import Settings, positive, setting


def natural(
  client_ids: np.ndarray, *, min_client_size: int = 1
) -> tuple[list[np.ndarray], np.ndarray]:
  """Natural split: one client per distinct natural id, e.g. a writer or a speaking role.

  The partition of LEAF (Caldas et al. 2018, "LEAF: A Benchmark for Federated
  Settings": FEMNIST by writer, Shakespeare by speaking role, as in McMahan et
  al. 2017) and of TensorFlow Federated's EMNIST and StackOverflow (by writer,
  by user). Client c holds every example whose id is `kept_ids[c]`; clients are
  ordered by id (`np.unique` order). No randomness.

  Clients with fewer than `min_client_size` examples are dropped, not padded or
  merged: their examples are assigned to no client (so every example is covered
  exactly once only when nothing is dropped). The dropped ids are
  `np.setdiff1d(np.unique(client_ids), kept_ids)`.

  Args:
    client_ids: natural id of each example, shape [N]; any sortable dtype
      (integers, strings).
    min_client_size: minimum number of examples of a kept client (the default 1
      keeps every id).

  Returns:
    `(parts, kept_ids)`: the sorted int64 example indices of each kept client, and
    the id of each kept client, shape [num_clients].

  Raises:
    ValueError: empty or non-1-D `client_ids`, an invalid `min_client_size`, or
      one that drops every client.
  """
  ids = np.asarray(client_ids)
  if ids.ndim != 1 or ids.size == 0:
    raise ValueError(
      f'client_ids with shape {ids.shape} are invalid; allowed: a non-empty 1-D array'
    )
  check_int('min_client_size', min_client_size, 0)
  unique_ids, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
  if counts.max() < min_client_size:
    raise ValueError(
      f'min_client_size={min_client_size} drops every client; allowed: 0..{counts.max()} '
      '(the largest client)'
    )
  order = np.argsort(inverse, kind='stable')  # stable: indices ascending within a client
  parts = np.split(order.astype(np.int64), np.cumsum(counts)[:-1])
  kept = np.flatnonzero(counts >= min_client_size)
  return [parts[c] for c in kept], unique_ids[kept]


@dataclasses.dataclass(frozen=True)
class NaturalSettings(Settings):
  min_client_size: int = setting(
    10, positive(integer=True, allow_zero=True), 'drop clients with fewer examples (0: none)'
  )


@PARTITIONERS.register('natural', NaturalSettings)
def natural_partitioner(settings: NaturalSettings, context: PartitionContext) -> list[np.ndarray]:
  """One client per natural id of the dataset (its client_id feature); small ones dropped."""
  if context.client_ids is None:
    raise ValueError(
      f'dataset {context.dataset_name!r} has no natural client ids; allowed '
      'datasets: those with a client_id feature (e.g. shakespeare)'
    )
  # natural has no empty clients to keep, so a minimum of 0 means the same as 1.
  parts, _ = natural(context.client_ids, min_client_size=max(settings.min_client_size, 1))
  return parts
