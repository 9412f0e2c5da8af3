"""Sort-and-shard splits: McMahan et al.'s (2017) pathological non-IID partition, and CC-FedAvg's
two classes per client (the same with two shards)."""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsim_jax.data.partitioners.base import (
  PARTITIONERS,
  PartitionContext,
  check_int,
  check_labels,
  check_num_clients,
  sorted_parts,
)
from fedsim_jax.settings import Settings, positive, setting


def shards(
  labels: np.ndarray, num_clients: int, shards_per_client: int, seed: int
) -> list[np.ndarray]:
  """McMahan et al. (2017) pathological non-IID split.

  Examples are sorted by label (stable, so ties keep index order), cut into
  `num_clients * shards_per_client` contiguous shards of near-equal size, and each
  client receives `shards_per_client` shards chosen at random. A client therefore
  holds at most `shards_per_client` classes when shard boundaries fall on class
  boundaries (e.g. MNIST-like 6,000 per class, 200 shards of 300), and at most
  `2 * shards_per_client` otherwise, since a shard may straddle two classes.

  Raises:
    ValueError: invalid settings, or fewer examples than shards (empty shards).
  """
  labels = check_labels(labels)
  check_num_clients(num_clients, labels.size)
  check_int('shards_per_client', shards_per_client, 1)
  num_shards = num_clients * shards_per_client
  if num_shards > labels.size:
    raise ValueError(
      f'shards_per_client={shards_per_client} with num_clients={num_clients} gives '
      f'{num_shards} shards for {labels.size} examples; allowed: '
      f'num_clients * shards_per_client <= {labels.size}'
    )
  shard_list = np.array_split(np.argsort(labels, kind='stable'), num_shards)
  assignment = np.random.default_rng(seed).permutation(num_shards)
  assignment = assignment.reshape(num_clients, shards_per_client)
  return sorted_parts([np.concatenate([shard_list[s] for s in row]) for row in assignment])


def two_classes_per_client(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
  """CC-FedAvg's cross-device partition: two label-sorted shards per client.

  Zhang et al. (2024), "CC-FedAvg", Sec. VI-B (Table II): "100 clients where
  each client contains two classes of training data"; Appendix D: "each client
  is randomly assigned two types of data". The authors' code
  (`mnist_noniid_multi`, benjiachong/ccfedavg utils/sampling.py) sorts by label,
  cuts 2N shards and gives each client 2 random shards: exactly McMahan et al.'s
  (2017) split with 2 shards per client, so this is `shards(labels, num_clients,
  2, seed)`. As there, a client may draw two shards of the same class (one
  class), and holds up to 4 classes when shard boundaries do not fall on class
  boundaries (they do for FMNIST with N = 100: 200 shards of 300, 20 per class;
  so each class spreads over up to 20 clients, not the "10 clients" Appendix D
  states, which is inconsistent with 100 clients x 2 classes / 10 classes).

  Raises:
    ValueError: invalid labels or num_clients, or fewer examples than 2N.
  """
  return shards(labels, num_clients, shards_per_client=2, seed=seed)


@dataclasses.dataclass(frozen=True)
class ShardsSettings(Settings):
  shards_per_client: int = setting(2, positive(integer=True), 'shards each client holds')


@PARTITIONERS.register('shards', ShardsSettings)
def shards_partitioner(settings: ShardsSettings, context: PartitionContext) -> list[np.ndarray]:
  """Label-sorted shards dealt at random (McMahan et al. 2017)."""
  return shards(context.labels, context.num_clients, settings.shards_per_client, context.seed)


@dataclasses.dataclass(frozen=True)
class TwoClassesSettings(Settings):
  """No settings."""


@PARTITIONERS.register('two_classes', TwoClassesSettings)
def two_classes_partitioner(
  settings: TwoClassesSettings, context: PartitionContext
) -> list[np.ndarray]:
  """Two label-sorted shards per client (CC-FedAvg, Table II)."""
  del settings
  return two_classes_per_client(context.labels, context.num_clients, context.seed)
