"""Robust aggregation: estimates of a batch's central update that outliers cannot move far.

Each estimator reads the batch's real rows (padding, weight 0, never counts) and replaces every
real row by its estimate, so the algorithm's own rule then applies to it as it would to the
mean: FedAvg's weighted mean of K equal rows is the estimate, FedBuff's server optimizer steps
along it, FedCompass scales it by its group's share. Norm bounding instead clips each row and
leaves the mean to the algorithm.

- Coordinate-wise median and trimmed mean (Yin, Chen, Ramchandran, Bartlett 2018,
  "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates", Sec. 3):
  per coordinate, the median of the K values, or the mean after removing the floor(beta K)
  largest and smallest.
- Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui, Stainer 2017, "Machine Learning with
  Adversaries: Byzantine Tolerant Gradient Descent", Sec. 4): score each update by the sum of
  squared distances to its K - f - 2 nearest other updates; Krum picks the lowest score,
  Multi-Krum averages the m lowest.
- Norm bounding (Sun, Kairouz, Suresh, McMahan 2019, "Can You Really Backdoor Federated
  Learning?", Sec. 4): each update clipped to norm M (`fedsim_jax.transforms.privacy`).
- Centered clipping (Karimireddy, He, Jaggi 2021, "Learning from History for Byzantine Robust
  Optimization", Sec. 4): starting from the previous aggregate v, L times
  v <- v + (1/K) sum_k clip_tau(delta_k - v).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import UpdateBatch
from fedsim_jax.transforms.base import (
  EmptyState,
  UpdateTransform,
  column_sums,
  flatten_rows,
  real_rows,
  replacing_rows,
  row_norms,
  scale_rows,
  stateless,
  unflatten_rows,
  with_deltas,
)
from fedsim_jax.transforms.privacy import clip_factors


def _as_update(flat: jax.Array, like: Params) -> Params:
  """`flat` (`[D]`) as one update shaped like a row of the batch `like` (leaves `[K, ...]`)."""
  one_row = jax.tree_util.tree_map(lambda leaf: leaf[:1], like)
  return jax.tree_util.tree_map(lambda leaf: leaf[0], unflatten_rows(flat[None, :], one_row))


def _estimator(estimate: Callable[[jax.Array, jax.Array], jax.Array]) -> UpdateTransform:
  """The stateless transform that replaces every real row by `estimate(values, real)` of the
  batch's flattened rows (`[K, D]`) and real-row mask."""

  def value(updates: UpdateBatch, state: EmptyState, key: jax.Array) -> tuple[Params, EmptyState]:
    flat = estimate(flatten_rows(updates.deltas), real_rows(updates))
    return _as_update(flat, updates.deltas), state

  return replacing_rows(lambda params, num_clients: EmptyState(), value)


def coordinate_median(values: jax.Array, real: jax.Array) -> jax.Array:
  """Per column of `values` (`[K, D]`), the median over the rows where `real`."""
  return jnp.nanmedian(jnp.where(real[:, None], values, jnp.nan), axis=0)


def coordinate_trimmed_mean(values: jax.Array, real: jax.Array, beta: float) -> jax.Array:
  """Per column, the mean of the real rows after removing the floor(beta n) largest and
  floor(beta n) smallest values (n: real rows; beta < 1/2 leaves at least one)."""
  n = jnp.sum(real)
  trim = jnp.floor(beta * n).astype(jnp.int32)
  ordered = jnp.sort(jnp.where(real[:, None], values, jnp.inf), axis=0)  # padding last
  rank = jnp.arange(values.shape[0])[:, None]
  kept = (rank >= trim) & (rank < n - trim)
  return column_sums(jnp.where(kept, ordered, 0.0)) / jnp.maximum(n - 2 * trim, 1)


def krum_scores(values: jax.Array, real: jax.Array, num_byzantine: int) -> jax.Array:
  """Krum's score of each row: the sum of its squared distances to its n - f - 2 nearest other
  real rows (at least one); inf for padding rows."""
  squares = jnp.sum(values * values, axis=1)
  distances = squares[:, None] + squares[None, :] - 2.0 * values @ values.T
  distances = jnp.maximum(distances, 0.0)
  num_rows = values.shape[0]
  pair = real[:, None] & real[None, :] & ~jnp.eye(num_rows, dtype=bool)
  ordered = jnp.sort(jnp.where(pair, distances, jnp.inf), axis=1)
  neighbours = jnp.maximum(jnp.sum(real) - num_byzantine - 2, 1)
  near = jnp.arange(num_rows)[None, :] < neighbours
  scores = jnp.sum(jnp.where(near, ordered, 0.0), axis=1)
  return jnp.where(real, scores, jnp.inf)


def multi_krum_estimate(
  values: jax.Array, real: jax.Array, num_byzantine: int, num_selected: int
) -> jax.Array:
  """The mean of the `num_selected` lowest-scoring real rows (ties: the lower row index);
  Krum when `num_selected` is 1."""
  scores = krum_scores(values, real, num_byzantine)
  order = jnp.argsort(scores, stable=True)
  rank = jnp.empty_like(order).at[order].set(jnp.arange(order.shape[0]))
  chosen = (rank < num_selected) & real
  return column_sums(values, chosen) / jnp.maximum(jnp.sum(chosen), 1)


def median() -> UpdateTransform:
  """Coordinate-wise median of the batch (Yin et al. 2018)."""
  return _estimator(coordinate_median)


def trimmed_mean(beta: float) -> UpdateTransform:
  """Coordinate-wise beta-trimmed mean of the batch (Yin et al. 2018), 0 <= beta < 1/2."""
  if not 0.0 <= beta < 0.5:
    raise ValueError(f'beta={beta!r}; allowed: 0 <= beta < 0.5')
  return _estimator(lambda values, real: coordinate_trimmed_mean(values, real, beta))


def multi_krum(num_byzantine: int, num_selected: int = 1) -> UpdateTransform:
  """Multi-Krum (Blanchard et al. 2017): the mean of the `num_selected` updates with the lowest
  Krum scores; `num_selected=1` is Krum."""
  return _estimator(
    lambda values, real: multi_krum_estimate(values, real, num_byzantine, num_selected)
  )


def norm_bounding(max_norm: float) -> UpdateTransform:
  """Every update clipped to L2 norm `max_norm` (Sun et al. 2019); the mean is the
  algorithm's."""

  def rewrite(updates: UpdateBatch, key: jax.Array) -> UpdateBatch:
    factors = clip_factors(row_norms(updates.deltas), max_norm)
    return with_deltas(updates, scale_rows(updates.deltas, factors))

  return stateless(rewrite)


class CenteredClippingState(NamedTuple):
  reference: Params  # v: the previous aggregate, where the next one starts


def centered_clipping(radius: float, iterations: int = 1) -> UpdateTransform:
  """Centered clipping (Karimireddy et al. 2021): from the previous aggregate v (zeros at
  first), `iterations` times v <- v + mean_k clip_radius(delta_k - v) over the real rows."""

  def init(params: Params, num_clients: int) -> CenteredClippingState:
    return CenteredClippingState(jax.tree_util.tree_map(jnp.zeros_like, params))

  def estimate(
    updates: UpdateBatch, state: CenteredClippingState, key: jax.Array
  ) -> tuple[Params, CenteredClippingState]:
    values, real = flatten_rows(updates.deltas), real_rows(updates)
    reference = flatten_rows(jax.tree_util.tree_map(lambda leaf: leaf[None], state.reference))[0]
    count = jnp.maximum(jnp.sum(real), 1)
    for _ in range(iterations):
      offsets = values - reference[None, :]
      factors = clip_factors(jnp.linalg.norm(offsets, axis=1), radius) * real
      reference = reference + column_sums(offsets, factors) / count
    value = _as_update(reference, updates.deltas)
    # A batch without real rows leaves the reference where it was.
    kept = jax.tree_util.tree_map(
      lambda new, old: jnp.where(jnp.any(real), new, old), value, state.reference
    )
    return value, CenteredClippingState(kept)

  return replacing_rows(init, estimate)


__all__ = [
  'centered_clipping',
  'coordinate_median',
  'coordinate_trimmed_mean',
  'krum_scores',
  'median',
  'multi_krum',
  'multi_krum_estimate',
  'norm_bounding',
  'trimmed_mean',
]
