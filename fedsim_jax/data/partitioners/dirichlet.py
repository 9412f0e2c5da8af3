"""Dirichlet label skew (Yurochkin et al. 2019; Hsu et al. 2019), optionally self-balancing."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fedsim_jax.data.partitioners.base import (
  PARTITIONERS,
  PartitionContext,
  Redraw,
  check_bool,
  check_int,
  check_labels,
  check_num_clients,
  sorted_parts,
  split_classes,
)
from fedsim_jax.settings import Settings, boolean, positive, setting


def dirichlet(
  labels: np.ndarray,
  num_clients: int,
  concentration: float,
  seed: int,
  min_client_size: int = 10,
  max_attempts: int = 1000,
  *,
  balance: bool = False,
) -> list[np.ndarray]:
  """Label-skewed split: each class is divided among clients by Dirichlet proportions.

  For every class, p ~ Dir(concentration * 1_K) over the K clients is drawn and the
  class's (shuffled) examples are cut into K consecutive pieces of sizes ~ p. The
  whole draw is repeated until every client holds at least `min_client_size`
  examples. Small concentrations (e.g. 0.1) give clients few dominant classes;
  large ones (e.g. 100) approach an IID split.

  `balance=True` adds the self-balancing rule of the widely copied `partition_data`
  of Wang et al. (2020), "Federated Learning with Matched Averaging" (FedMA code),
  reused by Li et al. (2021), "Model-Contrastive Federated Learning" (MOON code)
  and by the CC-FedAvg authors (`cifar_noniid_Dirichlet`, benjiachong/ccfedavg):
  classes are split in increasing label order, and while a class is split every
  client that already holds >= N / K examples gets proportion 0; the other
  clients' proportions are renormalised to sum to 1. The cap is soft: a client
  below it may receive a piece of the current class that takes it above N / K.
  If every client still below the cap drew proportion exactly 0 (possible only
  for tiny concentrations), the whole draw is repeated and counts against
  `max_attempts`. `balance=False` (default) gives the same splits as before this
  setting existed.

  Args:
    labels: integer class of each example, shape [N].
    num_clients: number of clients K.
    concentration: Dirichlet concentration alpha > 0.
    seed: seed of the random generator.
    min_client_size: minimum number of examples per client.
    max_attempts: number of draws before giving up.
    balance: apply the FedMA/MOON self-balancing rule above.

  Raises:
    ValueError: invalid settings, or no draw met `min_client_size` within
      `max_attempts` (sizes are never silently clamped).
  """
  labels = check_labels(labels)
  check_num_clients(num_clients, labels.size)
  if not (
    isinstance(concentration, (int, float, np.number))
    and math.isfinite(concentration)
    and concentration > 0
  ):
    raise ValueError(f'concentration={concentration!r} is invalid; allowed: finite numbers > 0')
  check_int('min_client_size', min_client_size, 0)
  check_int('max_attempts', max_attempts, 1)
  if min_client_size * num_clients > labels.size:
    raise ValueError(
      f'min_client_size={min_client_size} is impossible with num_clients={num_clients} and '
      f'{labels.size} examples; allowed: 0..{labels.size // num_clients}'
    )

  check_bool('balance', balance)

  rng = np.random.default_rng(seed)
  by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
  capacity = labels.size / num_clients
  for _ in range(max_attempts):
    held = np.zeros(num_clients, np.int64)  # examples each client holds so far (balance only)

    def dirichlet_cuts(c, members):
      proportions = rng.dirichlet(np.full(num_clients, float(concentration)))
      if balance:
        proportions = np.where(held < capacity, proportions, 0.0)
        total = proportions.sum()
        if total <= 0:
          raise Redraw
        proportions = proportions / total
      cuts = (np.cumsum(proportions)[:-1] * members.size).astype(np.int64)
      if balance:
        np.add(held, np.diff(cuts, prepend=0, append=members.size), out=held)
      return cuts

    try:
      clients = split_classes(by_class, num_clients, rng, dirichlet_cuts)
    except Redraw:
      continue
    if min(c.size for c in clients) >= min_client_size:
      return sorted_parts(clients)
  raise ValueError(
    f'dirichlet partition found no split with min_client_size={min_client_size} in '
    f'max_attempts={max_attempts} (num_clients={num_clients}, concentration={concentration}, '
    f'{labels.size} examples); lower min_client_size or num_clients, or raise concentration'
  )


@dataclasses.dataclass(frozen=True)
class DirichletSettings(Settings):
  concentration: float = setting(0.5, positive(), 'Dirichlet alpha (small: few classes each)')
  min_client_size: int = setting(
    10, positive(integer=True, allow_zero=True), 'redraw until every client has this many'
  )
  balance: bool = setting(False, boolean, 'FedMA/MOON self-balancing (full clients get 0)')


@PARTITIONERS.register('dirichlet', DirichletSettings)
def dirichlet_partitioner(
  settings: DirichletSettings, context: PartitionContext
) -> list[np.ndarray]:
  """Label skew: each class divided among clients by Dirichlet proportions."""
  return dirichlet(
    context.labels,
    context.num_clients,
    settings.concentration,
    context.seed,
    min_client_size=settings.min_client_size,
    balance=settings.balance,
  )
