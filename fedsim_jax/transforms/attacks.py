"""Simulated attackers: a fixed set of malicious clients that tamper with what they send.

The malicious clients are drawn once per run from its seed (`malicious_clients`): a fraction
of the federation, the same for every task. Their updates are rewritten before they leave the
client; every other client's update is untouched.

- Sign flip: delta -> -s delta (the update pushed the other way; s = 1 by default).
- Scaling (model replacement, Bagdasaryan et al. 2020, "How To Backdoor Federated Learning",
  Sec. 4.2): delta -> gamma delta, boosting the update so that it survives averaging.
- Gaussian (Blanchard et al. 2017, Sec. 5): delta -> N(0, sigma^2 I), an update of pure noise.
- Label flipping (Tolpegin et al. 2020, "Data Poisoning Attacks Against Federated Learning
  Systems"): the malicious clients train honestly on labels y -> C - 1 - y; it changes their
  data (`flip_labels`), not their updates.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.runtime.updates import UpdateBatch
from fedsim_jax.transforms.base import (
  UpdateTransform,
  real_rows,
  select_rows,
  stateless,
  with_deltas,
)
from fedsim_jax.transforms.privacy import gaussian_like


def malicious_clients(
  num_clients: int, fraction: float, seed: int | np.random.SeedSequence
) -> np.ndarray:
  """`[num_clients]` bool: round(fraction x num_clients) clients drawn without replacement from
  a generator seeded by `seed` (the run's attacker stream)."""
  count = int(round(fraction * num_clients))
  chosen = np.random.default_rng(seed).choice(num_clients, size=count, replace=False)
  mask = np.zeros(num_clients, bool)
  mask[chosen] = True
  return mask


def _attacking(updates: UpdateBatch, malicious: jax.Array) -> jax.Array:
  """`[K]` bool: real rows sent by a malicious client."""
  assert updates.client_id is not None, 'attacks need the client of each row'
  return real_rows(updates) & malicious[updates.client_id]


def tampered(rewrite, malicious: np.ndarray) -> UpdateTransform:
  """The malicious clients' real rows replaced by `rewrite(deltas, key)` (computed for every
  row, kept where a malicious client sent it)."""
  table = jnp.asarray(malicious)

  def apply(updates: UpdateBatch, key: jax.Array) -> UpdateBatch:
    attacked = rewrite(updates.deltas, key)
    return with_deltas(updates, select_rows(_attacking(updates, table), attacked, updates.deltas))

  return stateless(apply)


def sign_flip(malicious: np.ndarray, scale: float = 1.0) -> UpdateTransform:
  """delta -> -scale x delta for the malicious clients."""
  return tampered(
    lambda deltas, key: jax.tree_util.tree_map(lambda d: -scale * d, deltas), malicious
  )


def scaling(malicious: np.ndarray, factor: float) -> UpdateTransform:
  """delta -> factor x delta for the malicious clients (model replacement's boost)."""
  return tampered(
    lambda deltas, key: jax.tree_util.tree_map(lambda d: factor * d, deltas), malicious
  )


def gaussian_updates(malicious: np.ndarray, stddev: float) -> UpdateTransform:
  """delta -> N(0, stddev^2 I) for the malicious clients."""
  return tampered(lambda deltas, key: gaussian_like(key, deltas, stddev), malicious)


def flip_labels(labels: np.ndarray, owners: np.ndarray, malicious: np.ndarray, num_classes: int):
  """`labels` with y -> num_classes - 1 - y on the examples whose owner (`owners`, the client
  of each example, -1 for none) is malicious."""
  flipped = np.asarray(labels).copy()
  poisoned = (owners >= 0) & malicious[np.maximum(owners, 0)]
  flipped[poisoned] = num_classes - 1 - flipped[poisoned]
  return flipped
