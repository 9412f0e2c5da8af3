"""CC-FedAvg's partitions (Zhang et al. 2024, Sec. VI): the cross-silo gamma mix and the
budget-correlated shards of the cross-device tables."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fedsim_jax.data.partitioners.base import (
  PARTITIONERS,
  PartitionContext,
  check_int,
  check_labels,
  check_num_clients,
  check_positive_float,
  sorted_parts,
)
from fedsim_jax.data.partitioners.shards import shards
from fedsim_jax.settings import Settings, number, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum


def gamma_mix(labels: np.ndarray, num_clients: int, gamma: float, seed: int) -> list[np.ndarray]:
  """CC-FedAvg's cross-silo partition: a gamma share of IID data over a sorted non-IID split.

  Zhang et al. (2024), "CC-FedAvg: Computationally Customized Federated
  Averaging", Sec. VI-A: "We construct data heterogeneity following [39] (FedCos),
  using gamma to control the degree of data heterogeneity ... gamma = 0 means
  the data cross clients is totally non-IID ... and gamma = 1 means the data is
  IID"; Table I's "x% non-IID" columns are gamma = 1 - x/100 (totally non-IID,
  90%, 80%, 50% non-IID, IID: gamma = 0, 0.1, 0.2, 0.5, 1). The paper gives no
  construction; this follows the authors' code (`cifar_noniid(iidpart=gamma)`,
  benjiachong/ccfedavg utils/sampling.py):

  1. Group the examples by label (classes in increasing label order).
  2. From each class c, move round(gamma * n_c) examples (halves up) into an IID
     pool; shuffle the pool. The rest, still grouped by class in label order,
     form the non-IID pool.
  3. Cut the non-IID pool into `num_clients` contiguous blocks and the shuffled
     IID pool into `num_clients` blocks; client i gets block i of each.

  So gamma = 0 gives each client a contiguous run of the label-sorted data
  (with C classes and N clients about C/N consecutive classes each, e.g. 1.25
  classes per client for CIFAR-10 with N = 8: labels are non-decreasing from
  client to client); gamma = 1 is a uniform random split.

  Differences from the authors' code, where it is silent or loses data: the
  examples of each class are shuffled (with `seed`) before the IID share is
  taken, so which examples are IID is random (the code takes the first ones in
  dataset order); the code uses int(N_total * gamma) // C examples per class,
  which equals round(gamma * n_c) for the paper's balanced datasets; blocks are
  cut with `np.array_split` (sizes differ by at most one) rather than floor
  sizes that drop the remainder, so every example is assigned exactly once.

  Args:
    labels: integer class of each example, shape [N_total].
    num_clients: number of clients N.
    gamma: IID share in [0, 1] (0: totally non-IID, 1: IID).
    seed: seed of the random generator.

  Raises:
    ValueError: invalid labels, num_clients or gamma.
  """
  labels = check_labels(labels)
  check_num_clients(num_clients, labels.size)
  if (
    isinstance(gamma, bool)
    or not isinstance(gamma, (int, float, np.number))
    or not math.isfinite(gamma)
    or not 0 <= gamma <= 1
  ):
    raise ValueError(f'gamma={gamma!r} is invalid; allowed: numbers in [0, 1]')
  rng = np.random.default_rng(seed)
  iid_pool, noniid_pool = [], []
  for c in np.unique(labels):
    members = rng.permutation(np.flatnonzero(labels == c))
    num_iid = int(math.floor(float(gamma) * members.size + 0.5))
    iid_pool.append(members[:num_iid])
    noniid_pool.append(members[num_iid:])
  iid_blocks = np.array_split(rng.permutation(np.concatenate(iid_pool)), num_clients)
  noniid_blocks = np.array_split(np.concatenate(noniid_pool), num_clients)
  return sorted_parts([np.concatenate(pair) for pair in zip(noniid_blocks, iid_blocks)])


class BudgetSkew(StrEnum):
  """How shards follow the clients' budgets (`partition.kwargs.skew`, docstring below)."""

  NONE = 'none'
  HIGH = 'high'
  MODERATE = 'moderate'


BUDGET_SKEWS = tuple(skew.value for skew in BudgetSkew)
"""`budget_skewed` settings: Table II (none), Table IV (high) and Table V (moderate)."""


def _folded_shard_order(num_shards: int) -> np.ndarray:
  """Shard numbers 0, S-1, 1, S-2, 2, ...: consecutive pairs take one shard from each end."""
  order = np.empty(num_shards, np.int64)
  order[0::2] = np.arange((num_shards + 1) // 2)
  order[1::2] = num_shards - 1 - np.arange(num_shards // 2)
  return order


def budget_skewed(
  labels: np.ndarray,
  num_clients: int,
  seed: int,
  *,
  budgets: np.ndarray,
  skew: str = 'high',
  shards_per_client: int = 2,
  skewed_fraction: float = 0.1,
) -> list[np.ndarray]:
  """CC-FedAvg's budget-correlated shards: classes skewed across computation-budget levels.

  Zhang et al. (2024), "CC-FedAvg: Computationally Customized Federated
  Averaging", Sec. VI-B and Appendix D (Tables II, IV, V; FMNIST, N = 100,
  beta = 4). Appendix D: in Table II "each client is randomly assigned two types
  of data ... We assign p_i at random"; in Table IV "we assign two classes of data
  [to] 20 clients randomly, and assign the same p_i to the clients with the same
  class of data. As a consequence, each class of data is either on the client
  with adequate resources or the clients with insufficient resources" ("highly
  skewed"); Table V is "a compromise between Table II and Table IV, with only 10%
  of clients using the setting of Table IV (these clients have adequate
  resources) and the rest following the setting of Table II" ("moderately
  skewed").

  The paper gives no construction beyond this. Here, as in the authors' code
  (`mnist_noniid_multi2` and `mnist_noniid_multi3`, benjiachong/ccfedavg
  utils/sampling.py), the examples are sorted by label and cut into
  S = num_clients * shards_per_client near-equal shards, and a "skewed" client
  takes its shards from both ends of the sorted order: with 2 shards per client
  the r-th skewed client gets shards r and S-1-r (the code's `pop(0), pop(-1)`),
  so consecutive skewed clients share the same two classes. `skew` selects:

  * 'none' (Table II): `shards(labels, num_clients, shards_per_client, seed)`:
    random shards, independent of `budgets`.
  * 'high' (Table IV): all clients are skewed clients, ranked by budget from the
    highest down (ties in random order). Clients of one budget level are
    consecutive, so they share a contiguous block of classes. With the paper's
    FMNIST numbers and 5 equal levels of 20 clients this is exactly "two classes
    per 20 clients, each class on one level". With beta = 4 (4 levels of 25
    clients, as in the code, where budgets follow client index) a level holds
    2.5 classes' worth of examples spread over 4 classes: the highest and the
    lowest level each hold 2 classes whole, and the other 6 classes are each
    split between two adjacent levels (never more). The paper's "20 clients"
    and "beta = 4" cannot both hold; this reading keeps the given budgets.
  * 'moderate' (Table V): floor(skewed_fraction * num_clients) skewed clients,
    chosen at random among the clients with the highest budget ("these clients
    have adequate resources"), take the first shards of the folded order (both
    ends of the sorted data); the remaining shards are dealt at random,
    `shards_per_client` each, to the other clients. The authors' code instead
    skews clients 0..9, whose budget in its capability list is the lowest
    (1/8); this follows the paper's text.

  Which classes land on which budget level is random: the class order is a
  random permutation (with `seed`) before sorting (the code sorts by the labels
  themselves, so classes 0 and 9 always go to its first clients). Every example
  is assigned exactly once; client sizes differ by at most `shards_per_client`.
  A client holds at most `shards_per_client` classes when shard boundaries fall
  on class boundaries (FMNIST with N = 100: 200 shards of 300), and at most
  `2 * shards_per_client` otherwise.

  Args:
    labels: integer class of each example, shape [N_total].
    num_clients: number of clients N.
    seed: seed of the random generator.
    budgets: per-client computation budget, shape [N] (e.g. p_i from
      `strategy.budgets.beta_levels`); larger is more resources, equal values
      form one level. Only their order matters.
    skew: 'none', 'high' or 'moderate' (above).
    shards_per_client: shards per client (paper: 2).
    skewed_fraction: fraction of skewed clients for 'moderate' (paper: 0.1).

  Raises:
    ValueError: invalid settings, fewer examples than shards, or (for 'moderate')
      fewer clients with the highest budget than skewed clients.
  """
  labels = check_labels(labels)
  check_num_clients(num_clients, labels.size)
  check_int('shards_per_client', shards_per_client, 1)
  if skew not in BUDGET_SKEWS:
    raise ValueError(f'skew={skew!r} is invalid; allowed: {", ".join(BUDGET_SKEWS)}')
  p = np.asarray(budgets)
  if (
    p.shape != (num_clients,)
    or not np.issubdtype(p.dtype, np.number)
    or np.issubdtype(p.dtype, np.complexfloating)
    or not np.all(np.isfinite(p))
  ):
    raise ValueError(
      f'budgets with dtype {p.dtype} and shape {p.shape} are invalid; allowed: '
      f'{num_clients} finite real numbers (one per client)'
    )
  num_shards = num_clients * shards_per_client
  if num_shards > labels.size:
    raise ValueError(
      f'shards_per_client={shards_per_client} with num_clients={num_clients} gives '
      f'{num_shards} shards for {labels.size} examples; allowed: '
      f'num_clients * shards_per_client <= {labels.size}'
    )
  if skew == BudgetSkew.NONE:
    return shards(labels, num_clients, shards_per_client, seed)
  num_skewed = num_clients
  if skew == BudgetSkew.MODERATE:
    check_positive_float('skewed_fraction', skewed_fraction)
    num_skewed = int(math.floor(float(skewed_fraction) * num_clients))
    num_adequate = int(np.sum(p == p.max()))
    if not 1 <= num_skewed <= num_adequate:
      raise ValueError(
        f'skewed_fraction={skewed_fraction!r} gives {num_skewed} skewed clients of '
        f'{num_clients}, but they must be 1..{num_adequate} (the clients with the highest '
        f'budget); allowed: {1 / num_clients:.6g} <= skewed_fraction < '
        f'{(num_adequate + 1) / num_clients:.6g}'
      )

  rng = np.random.default_rng(seed)
  classes = np.unique(labels)
  class_rank = rng.permutation(classes.size)[np.searchsorted(classes, labels)]
  shard_list = np.array_split(np.argsort(class_rank, kind='stable'), num_shards)
  folded = _folded_shard_order(num_shards)
  if skew == BudgetSkew.HIGH:
    skewed_clients = np.lexsort((rng.permutation(num_clients), -p.astype(np.float64)))
  else:
    skewed_clients = rng.permutation(np.flatnonzero(p == p.max()))[:num_skewed]
  assignment = np.empty((num_clients, shards_per_client), np.int64)
  assignment[skewed_clients] = folded[: num_skewed * shards_per_client].reshape(
    num_skewed, shards_per_client
  )
  others = np.setdiff1d(np.arange(num_clients), skewed_clients)
  if others.size:
    assignment[others] = rng.permutation(folded[num_skewed * shards_per_client :]).reshape(
      others.size, shards_per_client
    )
  return sorted_parts([np.concatenate([shard_list[s] for s in row]) for row in assignment])


@dataclasses.dataclass(frozen=True)
class GammaMixSettings(Settings):
  gamma: float = setting(0.0, number(minimum=0, maximum=1), 'IID share: 0 non-IID ... 1 IID')


@PARTITIONERS.register('gamma_mix', GammaMixSettings)
def gamma_mix_partitioner(
  settings: GammaMixSettings, context: PartitionContext
) -> list[np.ndarray]:
  """CC-FedAvg's cross-silo split: a gamma share of IID data over a label-sorted split."""
  return gamma_mix(context.labels, context.num_clients, settings.gamma, context.seed)


@dataclasses.dataclass(frozen=True)
class BudgetSkewedSettings(Settings):
  budget_skew: str = setting(
    'high', one_of(BUDGET_SKEWS), "CC-FedAvg's Table II 'none', IV 'high', V 'moderate'"
  )
  shards_per_client: int = setting(2, positive(integer=True), 'shards each client holds')
  skewed_fraction: float = setting(
    0.1, number(minimum=0, maximum=1), "'moderate': share of skewed clients"
  )


@PARTITIONERS.register('budget_skewed', BudgetSkewedSettings)
def budget_skewed_partitioner(
  settings: BudgetSkewedSettings, context: PartitionContext
) -> list[np.ndarray]:
  """CC-FedAvg's shards skewed across the algorithm's compute-budget levels."""
  return budget_skewed(
    context.labels,
    context.num_clients,
    context.seed,
    budgets=context.budgets('budget_skewed'),
    skew=settings.budget_skew,
    shards_per_client=settings.shards_per_client,
    skewed_fraction=settings.skewed_fraction,
  )
