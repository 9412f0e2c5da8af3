"""Host-side numpy partitioners that split a dataset's examples among clients.

Every partitioner is a pure function of its arguments (randomness comes only from
`seed`) and returns `list[np.ndarray]`: one sorted int64 array of example indices
per client, which together assign every example exactly once.

* `iid`: uniform random split into near-equal parts.
* `dirichlet`: label skew drawn from a Dirichlet distribution (Yurochkin et al.
  2019, "Bayesian Nonparametric Federated Learning of Neural Networks"; Hsu et
  al. 2019, "Measuring the Effects of Non-Identical Data Distribution").
* `shards`: sort-and-shard pathological non-IID split (McMahan et al. 2017,
  "Communication-Efficient Learning of Deep Networks from Decentralized Data").

`partition(method, labels, num_clients, seed=..., **settings)` dispatches by name
through `PARTITIONERS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def _check_int(name: str, value: int, minimum: int) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f'{name}={value!r} is invalid; allowed: integers >= {minimum}')


def _check_labels(labels: np.ndarray) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or labels.size == 0:
    raise ValueError(
        f'labels with dtype {labels.dtype} and shape {labels.shape} are invalid; '
        'allowed: a non-empty 1-D integer array'
    )
  return labels


def _check_num_clients(num_clients: int, num_examples: int) -> None:
  _check_int('num_clients', num_clients, 1)
  if num_clients > num_examples:
    raise ValueError(
        f'num_clients={num_clients} is invalid; '
        f'allowed: 1..{num_examples} (the number of examples)'
    )


def _sorted_parts(parts: list[np.ndarray]) -> list[np.ndarray]:
  return [np.sort(part).astype(np.int64) for part in parts]


def iid(num_examples: int, num_clients: int, seed: int) -> list[np.ndarray]:
  """Splits a random permutation of `range(num_examples)` into `num_clients` parts.

  Client sizes differ by at most one.

  Raises:
    ValueError: num_examples < 1, or num_clients outside 1..num_examples.
  """
  _check_int('num_examples', num_examples, 1)
  _check_num_clients(num_clients, num_examples)
  permutation = np.random.default_rng(seed).permutation(num_examples)
  return _sorted_parts(np.array_split(permutation, num_clients))


def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    concentration: float,
    seed: int,
    min_client_size: int = 10,
    max_attempts: int = 1000,
) -> list[np.ndarray]:
  """Label-skewed split: each class is divided among clients by Dirichlet proportions.

  For every class, p ~ Dir(concentration * 1_K) over the K clients is drawn and the
  class's (shuffled) examples are cut into K consecutive pieces of sizes ~ p. The
  whole draw is repeated until every client holds at least `min_client_size`
  examples. Small concentrations (e.g. 0.1) give clients few dominant classes;
  large ones (e.g. 100) approach an IID split.

  Args:
    labels: integer class of each example, shape [N].
    num_clients: number of clients K.
    concentration: Dirichlet concentration alpha > 0.
    seed: seed of the random generator.
    min_client_size: minimum number of examples per client.
    max_attempts: number of draws before giving up.

  Raises:
    ValueError: invalid settings, or no draw met `min_client_size` within
      `max_attempts` (sizes are never silently clamped).
  """
  labels = _check_labels(labels)
  _check_num_clients(num_clients, labels.size)
  if not (
      isinstance(concentration, (int, float, np.number))
      and math.isfinite(concentration)
      and concentration > 0
  ):
    raise ValueError(f'concentration={concentration!r} is invalid; allowed: finite numbers > 0')
  _check_int('min_client_size', min_client_size, 0)
  _check_int('max_attempts', max_attempts, 1)
  if min_client_size * num_clients > labels.size:
    raise ValueError(
        f'min_client_size={min_client_size} is impossible with num_clients={num_clients} and '
        f'{labels.size} examples; allowed: 0..{labels.size // num_clients}'
    )

  rng = np.random.default_rng(seed)
  by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
  for _ in range(max_attempts):
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for members in by_class:
      proportions = rng.dirichlet(np.full(num_clients, float(concentration)))
      cuts = (np.cumsum(proportions)[:-1] * members.size).astype(np.int64)
      for client, piece in enumerate(np.split(rng.permutation(members), cuts)):
        parts[client].append(piece)
    clients = [np.concatenate(pieces) for pieces in parts]
    if min(c.size for c in clients) >= min_client_size:
      return _sorted_parts(clients)
  raise ValueError(
      f'dirichlet partition found no split with min_client_size={min_client_size} in '
      f'max_attempts={max_attempts} (num_clients={num_clients}, concentration={concentration}, '
      f'{labels.size} examples); lower min_client_size or num_clients, or raise concentration'
  )


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
  labels = _check_labels(labels)
  _check_num_clients(num_clients, labels.size)
  _check_int('shards_per_client', shards_per_client, 1)
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
  return _sorted_parts([np.concatenate([shard_list[s] for s in row]) for row in assignment])


PARTITIONERS: dict[str, Callable[..., list[np.ndarray]]] = {
    'iid': iid,
    'dirichlet': dirichlet,
    'shards': shards,
}
"""Partitioner name -> function; call through `partition` for a uniform signature."""


def partition(
    method: str, labels: np.ndarray, num_clients: int, *, seed: int, **settings: object
) -> list[np.ndarray]:
  """Partitions examples with labels `labels` by the partitioner named `method`.

  `settings` are the method's extra arguments: none for "iid", `concentration`
  (and optionally `min_client_size`, `max_attempts`) for "dirichlet",
  `shards_per_client` for "shards".

  Raises:
    ValueError: unknown `method` or invalid settings.
  """
  if method not in PARTITIONERS:
    raise ValueError(f"method={method!r} is invalid; allowed: {', '.join(PARTITIONERS)}")
  if method == 'iid':
    return iid(len(_check_labels(labels)), num_clients, seed, **settings)
  return PARTITIONERS[method](labels, num_clients, seed=seed, **settings)
