"""FedCompass's partitions (Li et al. 2024, Appendix D.1): the class partition (Algorithm 4) and
the dual Dirichlet partition (Algorithm 5)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fedsim_jax.data.partitioners.base import (
  PARTITIONERS,
  PartitionContext,
  check_int,
  check_labels,
  check_min_client_size,
  check_num_clients,
  check_positive_float,
  sorted_parts,
  split_classes,
)
from fedsim_jax.settings import ConfigError, Settings, positive, setting

FEDCOMPASS_NUM_CLIENTS = (5, 10, 20)
"""Client counts m for which the FedCompass paper states its partition settings."""


def fedcompass_class_partition_settings(num_clients: int) -> dict[str, object]:
  """The FedCompass paper's class-partition settings for `num_clients` = m clients.

  From Li et al. (2024), "FedCompass", Appendix D.1.1 (text after Algorithm 4):
  "the mean value of the normal distribution mu = 10, and the standard deviation
  sigma = 3 ... When the number of clients m = 5, n_min = 5 and n_max = 6, when
  m = 10 or 20, n_min = 3 and n_max = 5" (for n = 10 classes, MNIST / CIFAR-10).
  The paper states no values for other m (the authors' public code has a lookup
  table for other m; it is not used here), so other m raise.

  Returns:
    Keyword arguments for `class_partition`: `classes_per_client` = (n_min, n_max),
    `mean` = mu, `std` = sigma.

  Raises:
    ValueError: num_clients not in 5, 10, 20.
  """
  if num_clients == 5:
    classes_per_client = (5, 6)
  elif num_clients in (10, 20):
    classes_per_client = (3, 5)
  else:
    raise ValueError(
      f'num_clients={num_clients!r} has no FedCompass class-partition setting; '
      'allowed: 5, 10, 20 (or pass classes_per_client explicitly)'
    )
  return {'classes_per_client': classes_per_client, 'mean': 10.0, 'std': 3.0}


def _paper_classes_per_client(num_clients: int) -> tuple[int, int]:
  """(n_min, n_max) of `fedcompass_class_partition_settings(num_clients)`."""
  pair = fedcompass_class_partition_settings(num_clients)['classes_per_client']
  assert isinstance(pair, tuple)
  return int(pair[0]), int(pair[1])


def class_partition(
  labels: np.ndarray,
  num_clients: int,
  seed: int,
  *,
  classes_per_client: int | tuple[int, int] | None = None,
  mean: float = 10.0,
  std: float = 3.0,
  min_client_size: int = 1,
  max_attempts: int = 1000,
) -> list[np.ndarray]:
  """FedCompass class partition: each client holds examples of only a few classes.

  Algorithm 4 (CLASSPARTITION) of Li et al. (2024), "FedCompass: Efficient
  Cross-Silo Federated Learning on Heterogeneous Client Devices Using a Computing
  Power-Aware Scheduler", Appendix D.1.1. With n the number of distinct labels:

  1. (lines 2-9) Every client i draws n_i ~ randint(n_min, n_max) (both ends
     included: the paper says n_i in [n_min, n_max]) and takes the first n_i
     classes of a random permutation of the n classes. This is repeated until
     every class is held by at least one client.
  2. (lines 10-14) For every class c, held by clients i_1 < ... < i_k, draw
     k sizes s ~ Normal(mean, std), normalise them to sum to |class c| and give
     client i_j that many distinct examples of class c, chosen at random.

  Choices where the paper is silent, taken from the authors' public code
  (APPFL/FedCompass, examples/dataloader/mnist_dataloader.py): a normal draw is
  replaced by its absolute value (N(10, 3) is negative with probability ~4e-4);
  the real-valued shares are rounded by flooring the cumulative endpoints (the
  last endpoint is |class c|). Unlike that code, which cuts each class in index
  order, the examples of each class are shuffled before being cut ("distinct
  indices" at random).

  Every example is assigned to exactly one client (no duplication, no reuse).
  Each client holds between n_min and n_max classes (fewer only if a tiny class
  rounds to zero examples for it). Beyond the paper, the whole draw is repeated
  until every client has at least `min_client_size` examples (default 1, so no
  client is empty; 0 gives exactly Algorithm 4's single accepted draw); class
  coverage failures and size failures together count against `max_attempts`.

  Args:
    labels: integer class of each example, shape [N].
    num_clients: number of clients m.
    seed: seed of the random generator.
    classes_per_client: (n_min, n_max), inclusive, or an int for n_min = n_max.
      None uses the paper's values for m = 5, 10, 20
      (`fedcompass_class_partition_settings`) and raises for other m.
    mean: mean mu of the normal distribution of per-client shares (paper: 10).
    std: standard deviation sigma of that distribution (paper: 3).
    min_client_size: minimum number of examples per client.
    max_attempts: number of draws before giving up.

  Raises:
    ValueError: invalid settings, or no draw covered all classes and met
      `min_client_size` within `max_attempts` (nothing is silently clamped).
  """
  labels = check_labels(labels)
  check_num_clients(num_clients, labels.size)
  if classes_per_client is None:
    classes_per_client = _paper_classes_per_client(num_clients)
  by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
  num_classes = len(by_class)
  if isinstance(classes_per_client, (int, np.integer)) and not isinstance(classes_per_client, bool):
    classes_per_client = (int(classes_per_client), int(classes_per_client))
  if not (
    isinstance(classes_per_client, (tuple, list))
    and len(classes_per_client) == 2
    and all(
      isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in classes_per_client
    )
    and 1 <= classes_per_client[0] <= classes_per_client[1] <= num_classes
  ):
    raise ValueError(
      f'classes_per_client={classes_per_client!r} is invalid; allowed: an int or a pair '
      f'(n_min, n_max) with 1 <= n_min <= n_max <= {num_classes} (the number of classes)'
    )
  min_classes, max_classes = int(classes_per_client[0]), int(classes_per_client[1])
  if num_clients * max_classes < num_classes:
    raise ValueError(
      f'classes_per_client={classes_per_client!r} with num_clients={num_clients} cannot cover '
      f'{num_classes} classes; allowed: num_clients * n_max >= {num_classes}'
    )
  check_positive_float('mean', mean)
  check_positive_float('std', std, allow_zero=True)
  check_min_client_size(min_client_size, num_clients, labels.size)
  check_int('max_attempts', max_attempts, 1)

  rng = np.random.default_rng(seed)
  for _ in range(max_attempts):
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(num_clients):
      num_held = int(rng.integers(min_classes, max_classes + 1))
      for c in rng.permutation(num_classes)[:num_held]:
        holders[c].append(client)
    if any(not h for h in holders):
      continue
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for members, class_holders in zip(by_class, holders):
      shares = np.abs(rng.normal(mean, std, size=len(class_holders)))  # > 0 a.s. as mean > 0
      cuts = np.floor(np.cumsum(shares / shares.sum())[:-1] * members.size).astype(np.int64)
      for client, piece in zip(class_holders, np.split(rng.permutation(members), cuts)):
        parts[client].append(piece)
    clients = [np.concatenate(pieces) for pieces in parts]  # n_min >= 1 class each
    if min(c.size for c in clients) >= min_client_size:
      return sorted_parts(clients)
  raise ValueError(
    f'class partition found no split covering all classes with min_client_size='
    f'{min_client_size} in max_attempts={max_attempts} (num_clients={num_clients}, '
    f'classes_per_client={classes_per_client!r}, {labels.size} examples); '
    'lower min_client_size or raise n_max'
  )


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
  top = x.max(axis=axis, keepdims=True)
  return top + np.log(np.exp(x - top).sum(axis=axis, keepdims=True))


def _log_dirichlet(rng: np.random.Generator, concentration: np.ndarray, rows: int) -> np.ndarray:
  """Logs of `rows` draws from Dir(concentration), shape [rows, len(concentration)].

  Gamma(a) variates are drawn as log Gamma(a + 1) + log(U) / a (Marsaglia and Tsang
  2000), so tiny concentrations never underflow to all-zero weights.
  """
  shape = (rows, concentration.size)
  log_gamma = np.log(rng.standard_gamma(concentration + 1.0, size=shape))
  log_gamma += np.log1p(-rng.random(shape)) / concentration  # 1 - U lies in (0, 1]
  return log_gamma - _logsumexp(log_gamma, axis=1)


def fedcompass_dual_dirichlet_settings(num_clients: int) -> dict[str, float]:
  """The FedCompass paper's dual-Dirichlet settings for `num_clients` = m clients.

  From Li et al. (2024), "FedCompass", Appendix D.1.2 (text after Algorithm 5):
  "In the experiments, we set alpha_1 = m and alpha_2 = 0.5", with experiments at
  m = 5, 10, 20 (Section 5, "Training Settings"). For symmetry with
  `fedcompass_class_partition_settings`, other m raise; pass `alpha_1` and
  `alpha_2` explicitly there.

  Raises:
    ValueError: num_clients not in 5, 10, 20.
  """
  if num_clients not in FEDCOMPASS_NUM_CLIENTS:
    raise ValueError(
      f'num_clients={num_clients!r} has no FedCompass dual-Dirichlet setting; '
      'allowed: 5, 10, 20 (or pass alpha_1 and alpha_2 explicitly)'
    )
  return {'alpha_1': float(num_clients), 'alpha_2': 0.5}


def dual_dirichlet(
  labels: np.ndarray,
  num_clients: int,
  seed: int,
  *,
  alpha_1: float | None = None,
  alpha_2: float | None = None,
  min_client_size: int = 1,
  max_attempts: int = 1000,
) -> list[np.ndarray]:
  """FedCompass dual Dirichlet partition: Dirichlet client sizes and class mixes.

  Algorithm 5 (DUALDIRICHLETPARTITION) of Li et al. (2024), "FedCompass:
  Efficient Cross-Silo Federated Learning on Heterogeneous Client Devices Using a
  Computing Power-Aware Scheduler", Appendix D.1.2. With m clients, n classes and
  N_c examples of class c:

  1. (lines 2-7) client_wts ~ Dir(alpha_1 * p1), p1 = (1/m, ..., 1/m): the
     normalised number of examples of each client.
  2. (lines 3-4, 6, 8) class_wts[i] ~ Dir(alpha_2 * p2) independently for each
     client i, p2 = (N_c / N)_c: the normalised class mix of client i.
  3. (lines 9-14) client i receives
     client_wts[i] * class_wts[i][c] / sum_k(client_wts[k] * class_wts[k][c])
     of the N_c examples of class c, as distinct examples chosen at random.

  Lines 11-12 of the printed algorithm are garbled ("/ (sum(client_wts), c)");
  the denominator sum_k client_wts[k] * class_wts[k][c] is the reading that makes
  each class's shares sum to one, and it is what the authors' public code does
  (APPFL/FedCompass, examples/dataloader/mnist_dataloader.py). Rounding is
  unstated; as in that code, the first m - 1 clients get int(share * N_c)
  examples of class c and the last client the remainder, so the last client
  gets about (m - 1) / 2 extra examples of every class (at most m - 1), and
  thus usually holds a few examples of all classes. Each class's examples are
  shuffled before being cut, as in that code.

  The Dirichlet draws are made in log space (`_log_dirichlet`) and the shares
  normalised with a log-sum-exp, so a tiny alpha_2 cannot underflow every
  client's weight for a class to 0 (a 0/0 share in the authors' code); in
  distribution this is the same Dirichlet.

  Every example is assigned to exactly one client (no sampling with replacement,
  no reuse). Note alpha_1 multiplies the prior p1 = 1/m, so the paper's
  alpha_1 = m is a flat Dir(1, ..., 1) over client shares. Larger alpha_1 makes
  client sizes more equal (alpha_1 -> inf gives about N/m each, plus the last
  client's rounding remainders, when alpha_2 is large too: client i's size is
  sum_c share_ic * N_c, so clients competing for the same classes also vary in
  size); larger alpha_2 makes class mixes closer to the global class frequencies
  (alpha_2 -> 0 gives each client about one class, plus the last client's
  remainders; a class that no client favours goes to the client with the largest
  tiny weight). Beyond the paper, the whole draw is repeated until
  every client has at least `min_client_size` examples (default 1, so no client
  is empty; 0 gives Algorithm 5's single draw); the authors' code does not
  redraw. Redraws count against `max_attempts`.

  Args:
    labels: integer class of each example, shape [N].
    num_clients: number of clients m.
    seed: seed of the random generator.
    alpha_1: concentration of the client-size Dirichlet. None uses the paper's
      alpha_1 = m for m = 5, 10, 20 (`fedcompass_dual_dirichlet_settings`) and
      raises for other m.
    alpha_2: concentration of the per-client class Dirichlet. None uses the
      paper's 0.5 for m = 5, 10, 20 and raises for other m.
    min_client_size: minimum number of examples per client.
    max_attempts: number of draws before giving up.

  Raises:
    ValueError: invalid settings, or no draw met `min_client_size` within
      `max_attempts` (nothing is silently clamped).
  """
  labels = check_labels(labels)
  check_num_clients(num_clients, labels.size)
  if alpha_1 is None or alpha_2 is None:
    defaults = fedcompass_dual_dirichlet_settings(num_clients)
    alpha_1 = defaults['alpha_1'] if alpha_1 is None else alpha_1
    alpha_2 = defaults['alpha_2'] if alpha_2 is None else alpha_2
  check_positive_float('alpha_1', alpha_1)
  check_positive_float('alpha_2', alpha_2)
  check_min_client_size(min_client_size, num_clients, labels.size)
  check_int('max_attempts', max_attempts, 1)

  rng = np.random.default_rng(seed)
  by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
  class_sizes = np.array([members.size for members in by_class], dtype=np.float64)
  client_prior = float(alpha_1) * np.full(num_clients, 1.0 / num_clients)
  class_prior = float(alpha_2) * class_sizes / class_sizes.sum()
  for _ in range(max_attempts):
    log_client_wts = _log_dirichlet(rng, client_prior, 1)[0]  # [m]
    log_class_wts = _log_dirichlet(rng, class_prior, num_clients)  # [m, n]
    log_weights = log_client_wts[:, None] + log_class_wts
    portions = np.exp(log_weights - _logsumexp(log_weights, axis=0))  # columns sum to 1
    clients = split_classes(
      by_class,
      num_clients,
      rng,
      lambda c, members: np.cumsum((portions[:-1, c] * members.size).astype(np.int64)),
    )
    if min(c.size for c in clients) >= min_client_size:
      return sorted_parts(clients)
  raise ValueError(
    f'dual_dirichlet partition found no split with min_client_size={min_client_size} in '
    f'max_attempts={max_attempts} (num_clients={num_clients}, alpha_1={alpha_1}, '
    f'alpha_2={alpha_2}, {labels.size} examples); lower min_client_size or raise alpha_1'
  )


def _class_range(name: str, value: Any) -> None:
  """None, or a pair (n_min, n_max) of integers >= 1."""
  if value is None:
    return
  if not (
    isinstance(value, tuple)
    and len(value) == 2
    and all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in value)
  ):
    raise ConfigError(
      f'{name}={value!r} is invalid; allowed values: (n_min, n_max): integers >= 1 or None'
    )


_class_range.allowed = '(n_min, n_max): integers >= 1 or None'  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class ClassSettings(Settings):
  classes_per_client: tuple[int, int] | None = setting(
    None, _class_range, "(n_min, n_max) classes each client holds; None: the paper's per-m values"
  )


@PARTITIONERS.register('class', ClassSettings)
def class_partitioner(settings: ClassSettings, context: PartitionContext) -> list[np.ndarray]:
  """FedCompass class partition (Algorithm 4): a few classes per client, normal shares."""
  return class_partition(
    context.labels,
    context.num_clients,
    context.seed,
    classes_per_client=settings.classes_per_client,
  )


@dataclasses.dataclass(frozen=True)
class DualDirichletSettings(Settings):
  alpha_1: float | None = setting(
    None, positive(optional=True), "client-size concentration; None: the paper's m"
  )
  alpha_2: float | None = setting(
    None, positive(optional=True), "class-mix concentration; None: the paper's 0.5"
  )


@PARTITIONERS.register('dual_dirichlet', DualDirichletSettings)
def dual_dirichlet_partitioner(
  settings: DualDirichletSettings, context: PartitionContext
) -> list[np.ndarray]:
  """FedCompass dual Dirichlet partition (Algorithm 5): Dirichlet client sizes and class mixes."""
  return dual_dirichlet(
    context.labels,
    context.num_clients,
    context.seed,
    alpha_1=settings.alpha_1,
    alpha_2=settings.alpha_2,
  )
