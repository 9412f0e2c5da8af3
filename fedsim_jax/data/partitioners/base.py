"""The partitioner registry, what a partitioner receives, and the checks partitioners share.

A partitioner is a factory registered in `PARTITIONERS` with its frozen settings dataclass:
`factory(settings, context) -> list[np.ndarray]`, one sorted int64 array of example indices
per client. `settings` are the config's `partition.kwargs`, validated; `context` is a
`PartitionContext`: everything else it may read (the labels, the client count, the seed, the
natural client ids, the dataset's name, the algorithm's compute budgets).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fedsim_jax.registry import Registry, Selection

Partitioner = Callable[[Any, 'PartitionContext'], list[np.ndarray]]

PARTITIONERS: Registry[Partitioner] = Registry('partition', 'partitioner')
"""Every partitioner by name; `partition.name` selects one, `partition.module` registers more."""


@dataclasses.dataclass(frozen=True)
class PartitionContext:
  """What a partitioner receives besides its settings.

  Attributes:
    labels: the label of each training example, shape [N] (or [N, T] for next-token datasets:
      only the example count is used then).
    num_clients: clients to split the examples over (`data.num_clients`).
    seed: seed of the partition's random generator (`data.partition_seed`, default the run's).
    dataset_name: the dataset's name, for messages.
    client_ids: natural client id of each training example (writer, speaking role), or None
      when the dataset has none.
    client_budgets: the algorithm's compute budget p_i of each client, drawn when called, or
      None when the run's algorithm has none (budget-correlated partitions call it).
  """

  labels: np.ndarray
  num_clients: int
  seed: int
  dataset_name: str = ''
  client_ids: np.ndarray | None = None
  client_budgets: Callable[[], np.ndarray] | None = None

  def budgets(self, partitioner: str) -> np.ndarray:
    """The clients' compute budgets; `ValueError` naming `partitioner` when there are none."""
    if self.client_budgets is None:
      raise ValueError(
        f'{partitioner} needs the compute budgets of the algorithm; allowed: an algorithm with '
        'budgets (ccfedavg, ...)'
      )
    return self.client_budgets()


def run_partitioner(selection: Selection, context: PartitionContext) -> list[np.ndarray]:
  """The parts of the partitioner `selection` (resolved by `PARTITIONERS.resolve`)."""
  return PARTITIONERS.get(selection.name).factory(selection.settings, context)


def partition(
  name: str,
  labels: np.ndarray,
  num_clients: int,
  *,
  seed: int,
  client_ids: np.ndarray | None = None,
  budgets: np.ndarray | None = None,
  **kwargs: Any,
) -> list[np.ndarray]:
  """Partitions examples with labels `labels` by the partitioner registered as `name`, with
  settings `kwargs` (fields of its settings dataclass; missing ones take their defaults), e.g.
  `partition('dirichlet', labels, 100, seed=0, concentration=0.1)`.

  Raises:
    ConfigError: an unknown `name`, or settings its dataclass rejects.
    ValueError: a partition the data cannot give.
  """
  selection = PARTITIONERS.resolve(name, kwargs)
  given = None if budgets is None else np.asarray(budgets)
  context = PartitionContext(
    labels=np.asarray(labels),
    num_clients=num_clients,
    seed=seed,
    client_ids=client_ids,
    client_budgets=None if given is None else (lambda: given),
  )
  return run_partitioner(selection, context)


def check_int(name: str, value: int, minimum: int) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f'{name}={value!r} is invalid; allowed: integers >= {minimum}')


def check_labels(labels: np.ndarray) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or labels.size == 0:
    raise ValueError(
      f'labels with dtype {labels.dtype} and shape {labels.shape} are invalid; '
      'allowed: a non-empty 1-D integer array'
    )
  return labels


def check_num_clients(num_clients: int, num_examples: int) -> None:
  check_int('num_clients', num_clients, 1)
  if num_clients > num_examples:
    raise ValueError(
      f'num_clients={num_clients} is invalid; allowed: 1..{num_examples} (the number of examples)'
    )


def check_bool(name: str, value: bool) -> None:
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f'{name}={value!r} is invalid; allowed: True, False')


class Redraw(Exception):
  """A draw that cannot be completed; the partitioner starts a new one."""


def sorted_parts(parts: list[np.ndarray]) -> list[np.ndarray]:
  return [np.sort(part).astype(np.int64) for part in parts]


def split_classes(
  by_class: list[np.ndarray], num_clients: int, rng: np.random.Generator, cuts_for
) -> list[np.ndarray]:
  """Shuffles each class's examples and cuts them into per-client pieces at
  `cuts_for(class_index, members)` (which may draw from `rng` first); returns each client's
  examples (unsorted)."""
  parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
  for c, members in enumerate(by_class):
    cuts = cuts_for(c, members)
    for client, piece in enumerate(np.split(rng.permutation(members), cuts)):
      parts[client].append(piece)
  return [np.concatenate(pieces) for pieces in parts]


def check_positive_float(name: str, value: float, allow_zero: bool = False) -> None:
  ok = (
    not isinstance(value, bool)
    and isinstance(value, (int, float, np.number))
    and math.isfinite(value)
    and (value >= 0 if allow_zero else value > 0)
  )
  if not ok:
    bound = '>= 0' if allow_zero else '> 0'
    raise ValueError(f'{name}={value!r} is invalid; allowed: finite numbers {bound}')


def check_min_client_size(min_client_size: int, num_clients: int, num_examples: int) -> None:
  check_int('min_client_size', min_client_size, 0)
  if min_client_size * num_clients > num_examples:
    raise ValueError(
      f'min_client_size={min_client_size} is impossible with num_clients={num_clients} and '
      f'{num_examples} examples; allowed: 0..{num_examples // num_clients}'
    )
