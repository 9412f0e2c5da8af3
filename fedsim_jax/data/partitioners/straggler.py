"""The straggler-domain split (Hard et al. 2024), applied after any partitioner."""

from __future__ import annotations

import numpy as np

from fedsim_jax.data.partitioners.base import check_int, check_labels, sorted_parts


def straggler_domain_split(
  labels: np.ndarray,
  parts: list[np.ndarray],
  straggler_classes: list[int] | np.ndarray,
  num_stragglers: int | None,
  *,
  min_client_size: int = 0,
) -> tuple[list[np.ndarray], np.ndarray]:
  """Straggler-domain split: stragglers own the straggler classes.

  Hard et al. (2024), "Learning from straggler clients in federated learning",
  Sec. 4.1 (Federated tasks). EMNIST: "we defined the digits 0-4 as straggler
  classes. Next, we found the 800 clients with the most examples from those
  straggler classes and defined them as the straggler clients. Finally, all
  examples from the straggler classes were removed from non-straggler clients,
  which were referred to as standard clients" (CIFAR-100 likewise: 125 of 500
  clients by the coarse classes "vehicles 1" and "vehicles 2"). StackOverflow:
  "All clients with at least one training example with one of these tags were
  labeled as straggler clients" (`num_stragglers=None` here).

  Starting from any base split `parts` (natural, Dirichlet, ...):

  1. Count each client's examples whose label is in `straggler_classes`.
  2. Stragglers are the `num_stragglers` clients with the largest counts (ties
     go to the lower client index; the paper does not say), or, for None, every
     client with a count > 0.
  3. Straggler clients keep all their examples. Standard clients lose their
     straggler-class examples: these are removed from training and NOT
     reassigned to any client (as in the paper, which removes them).

  Afterwards every straggler-class example that remains is on a straggler, and
  standard clients hold none. Clients keep their index and order; a standard
  client may be left with 0 examples (the paper keeps all 2,600 standard EMNIST
  clients); `min_client_size` turns that into an error instead.

  To split on a coarser label (CIFAR-100 coarse classes), pass those labels.

  Args:
    labels: integer class of each example, shape [N].
    parts: base split, the example indices of each client.
    straggler_classes: the straggler classes (non-empty; at least one in `labels`).
    num_stragglers: number of straggler clients n, 1..(clients holding any
      straggler-class example); None for every such client.
    min_client_size: minimum number of examples any client keeps.

  Returns:
    `(parts, straggler_mask)`: each client's remaining example indices (sorted
    int64), and a bool [num_clients] mask that is True for stragglers.

  Raises:
    ValueError: invalid settings, or fewer clients holding straggler-class
      examples than `num_stragglers`, or a client left below `min_client_size`.
  """
  labels = check_labels(labels)
  if not parts:
    raise ValueError('parts=[] is invalid; allowed: a non-empty list of index arrays')
  parts = [np.asarray(part, np.int64) for part in parts]
  if any(
    part.ndim != 1 or (part.size and (part.min() < 0 or part.max() >= labels.size))
    for part in parts
  ):
    raise ValueError(
      f'parts are invalid; allowed: 1-D arrays of example indices in 0..{labels.size - 1}'
    )
  classes = np.asarray(straggler_classes)
  present = np.unique(labels)
  if (
    classes.ndim != 1
    or classes.size == 0
    or not np.issubdtype(classes.dtype, np.integer)
    or not np.any(np.isin(classes, present))
  ):
    raise ValueError(
      f'straggler_classes={straggler_classes!r} is invalid; allowed: a non-empty list of '
      f'integer labels, at least one of them present in labels ({present.min()}..'
      f'{present.max()})'
    )
  check_int('min_client_size', min_client_size, 0)
  is_straggler_class = np.isin(labels, classes)
  counts = np.array([int(is_straggler_class[part].sum()) for part in parts])
  holders = int(np.sum(counts > 0))
  if num_stragglers is None:
    mask = counts > 0
  else:
    if (
      isinstance(num_stragglers, bool)
      or not isinstance(num_stragglers, (int, np.integer))
      or not 1 <= num_stragglers <= holders
    ):
      raise ValueError(
        f'num_stragglers={num_stragglers!r} is invalid; allowed: None or 1..{holders} '
        '(the clients holding straggler-class examples)'
      )
    mask = np.zeros(len(parts), bool)
    mask[np.argsort(-counts, kind='stable')[:num_stragglers]] = True
  split = [
    part if straggler else part[~is_straggler_class[part]] for part, straggler in zip(parts, mask)
  ]
  smallest = min(part.size for part in split)
  if smallest < min_client_size:
    raise ValueError(
      f'min_client_size={min_client_size} is not met: a client keeps {smallest} examples '
      f'after the straggler classes are removed; allowed: 0..{smallest}'
    )
  return sorted_parts(split), mask
