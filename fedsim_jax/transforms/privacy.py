"""Differential privacy of client updates: clipping and Gaussian noise.

Client-level DP-FedAvg (McMahan, Ramage, Talwar, Zhang 2018, "Learning Differentially Private
Recurrent Language Models", Algorithm 1): each update is clipped to L2 norm C, the clipped
updates are summed, Gaussian noise of standard deviation z C is added to the sum and the sum is
divided by a *fixed* denominator m (the expected number of updates per aggregation, not the
number that arrived), so that one client changes the result by at most C / m:

    v = (sum_k clip_C(delta_k) + N(0, (z C)^2 I)) / m

Every real row of the batch is replaced by v, so the algorithm's own rule (its server
optimizer, staleness scaling, FedCompass's group share) then applies to the private estimate
(`dp_central`). In the local model each client adds its own noise N(0, (z C)^2 I) to its clipped
update before sending it (`dp_local`).

Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy 2021, "Differentially Private Learning
with Adaptive Clipping", Algorithm 1) follows a target quantile gamma of the update norms: with
b the noised fraction of updates at most C, b = (sum_k 1[||delta_k|| <= C] + N(0, sigma_b^2)) /
m, the norm moves geometrically, C <- C exp(-eta_C (b - gamma)). The updates' noise multiplier
is then z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2), so that the two releases together cost what
one release at z does (their Theorem 1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import UpdateBatch
from fedsim_jax.transforms.base import (
  UpdateTransform,
  real_rows,
  replacing_rows,
  row_norms,
  scale_rows,
  select_rows,
  weighted_row_sum,
  with_deltas,
)


def clip_factors(norms: jax.Array, clip_norm: jax.Array | float) -> jax.Array:
  """min(1, C / ||delta_k||) per row (1 for a zero update)."""
  return jnp.minimum(1.0, clip_norm / jnp.maximum(norms, 1e-12))


def gaussian_like(key: jax.Array, tree: Params, stddev: jax.Array | float) -> Params:
  """Independent N(0, stddev^2) noise shaped like `tree`, one key per leaf."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  keys = jax.random.split(key, len(leaves))
  noise = [stddev * jax.random.normal(k, leaf.shape, leaf.dtype) for k, leaf in zip(keys, leaves)]
  return jax.tree_util.tree_unflatten(treedef, noise)


def update_noise_multiplier(noise_multiplier: float, clipped_count_stddev: float) -> float:
  """z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2): the updates' share of noise multiplier z when the
  clipped count is released with noise sigma_b (Andrew et al. 2021, Theorem 1); ValueError when
  sigma_b is too small to leave any (2 sigma_b <= z)."""
  if noise_multiplier == 0.0:
    return 0.0
  rest = noise_multiplier**-2 - (2.0 * clipped_count_stddev) ** -2
  if rest <= 0.0:
    raise ValueError(
      f'clipped_count_stddev={clipped_count_stddev!r} is too small for noise_multiplier='
      f'{noise_multiplier!r}; allowed: clipped_count_stddev > noise_multiplier / 2'
    )
  return 1.0 / math.sqrt(rest)


class ClipState(NamedTuple):
  """The clipping norm in use, and the releases the accountant composes."""

  clip_norm: jax.Array  # float32 scalar
  releases: jax.Array  # int32 scalar: aggregations that held at least one update
  # [num_clients] int32: updates each client sent (local DP; None under central DP, as
  # checkpoints hold no empty arrays)
  client_releases: jax.Array | None

  def accounted_releases(self, central: bool) -> int:
    """The accountant's count: aggregations (central), or the most updates one client sent
    (local)."""
    if central:
      return int(self.releases)
    assert self.client_releases is not None
    return int(self.client_releases.max())


class AdaptiveClipping(NamedTuple):
  """Adaptive clipping to a target quantile (Andrew et al. 2021)."""

  target_quantile: float  # gamma
  learning_rate: float  # eta_C
  clipped_count_stddev: float  # sigma_b


def _adapted_norm(
  norms: jax.Array,
  real: jax.Array,
  clip_norm: jax.Array,
  adaptive: AdaptiveClipping,
  denominator: float,
  key: jax.Array,
) -> jax.Array:
  unclipped = jnp.sum(jnp.where(real, norms <= clip_norm, False).astype(jnp.float32))
  noise = adaptive.clipped_count_stddev * jax.random.normal(key, (), jnp.float32)
  fraction = (unclipped + noise) / denominator
  return clip_norm * jnp.exp(-adaptive.learning_rate * (fraction - adaptive.target_quantile))


def dp_gaussian(
  clip_norm: float,
  noise_multiplier: float,
  *,
  central: bool = True,
  denominator: float | None = None,
  adaptive: AdaptiveClipping | None = None,
) -> UpdateTransform:
  """Clips each update to L2 norm C and adds Gaussian noise of std z C.

  Args:
    clip_norm: C (the initial norm under adaptive clipping).
    noise_multiplier: z; 0 clips without noise.
    central: True: the server's fixed-denominator noised mean replaces every real row
      (DP-FedAvg); False: each client adds N(0, (z C)^2) to its clipped update (local DP).
    denominator: m, the expected updates per aggregation (central, and adaptive clipping's
      count); required for both.
    adaptive: adapt C to a target quantile of the update norms after each aggregation.
  """
  if (central or adaptive is not None) and (denominator is None or denominator <= 0):
    raise ValueError(f'denominator={denominator!r}; allowed: the expected updates per aggregation')
  z_delta = noise_multiplier
  if adaptive is not None:
    z_delta = update_noise_multiplier(noise_multiplier, adaptive.clipped_count_stddev)

  def init(params: Params, num_clients: int) -> ClipState:
    del params
    return ClipState(
      jnp.asarray(clip_norm, jnp.float32),
      jnp.zeros((), jnp.int32),
      None if central else jnp.zeros((num_clients,), jnp.int32),
    )

  def next_state(
    updates: UpdateBatch, state: ClipState, norms: jax.Array, count_key: jax.Array
  ) -> ClipState:
    """The clipping norm for the next batch (adaptive clipping) and the release counts."""
    real = real_rows(updates)
    new_norm = state.clip_norm
    if adaptive is not None:
      assert denominator is not None
      new_norm = _adapted_norm(norms, real, state.clip_norm, adaptive, denominator, count_key)
    released = jnp.any(real).astype(jnp.int32)
    client_releases = state.client_releases
    if client_releases is not None:
      assert updates.client_id is not None, 'local DP counts the updates of each client'
      client_releases = client_releases.at[updates.client_id].add(real.astype(jnp.int32))
    return ClipState(new_norm, state.releases + released, client_releases)

  def noised_mean(
    updates: UpdateBatch, state: ClipState, key: jax.Array
  ) -> tuple[Params, ClipState]:
    """Central: (sum_k clip_C(delta_k) + N(0, (z C)^2 I)) / m."""
    noise_key, count_key = jax.random.split(key)
    norms = row_norms(updates.deltas)
    factors = clip_factors(norms, state.clip_norm) * real_rows(updates)
    total = weighted_row_sum(updates.deltas, factors)
    noise = gaussian_like(noise_key, total, z_delta * state.clip_norm)
    assert denominator is not None
    value = jax.tree_util.tree_map(lambda s, n: (s + n) / denominator, total, noise)
    return value, next_state(updates, state, norms, count_key)

  def noised_rows(
    updates: UpdateBatch, state: ClipState, key: jax.Array
  ) -> tuple[UpdateBatch, ClipState]:
    """Local: each real row clipped, then N(0, (z C)^2 I) added to it."""
    noise_key, count_key = jax.random.split(key)
    real = real_rows(updates)
    norms = row_norms(updates.deltas)
    clipped = scale_rows(updates.deltas, clip_factors(norms, state.clip_norm) * real)
    deltas = clipped
    if z_delta != 0.0:
      noise = gaussian_like(noise_key, clipped, z_delta * state.clip_norm)
      deltas = select_rows(real, jax.tree_util.tree_map(jnp.add, clipped, noise), clipped)
    return with_deltas(updates, deltas), next_state(updates, state, norms, count_key)

  if central:
    return replacing_rows(init, noised_mean)
  return UpdateTransform(init, noised_rows)


def clip_to_norm(clip_norm: float) -> UpdateTransform:
  """Each update clipped to L2 norm `clip_norm`, nothing else (norm bounding, Sun et al. 2019,
  "Can You Really Backdoor Federated Learning?": the server clips every update it receives)."""
  return dp_gaussian(clip_norm, 0.0, central=False)
