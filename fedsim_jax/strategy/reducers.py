"""Reducers: how a batch of client deltas becomes the one delta a server update applies.

A reducer is a pure function `reduce(updates, scale) -> delta` returning
sum_k c_k delta_k / Z, where `scale` holds the per-row numerators c_k and the reducer chooses
the normaliser Z. `server_update` passes c = `updates.weights` (the scheduler's p_k);
`staleness_scaled` multiplies c by s(staleness) before reducing. Reducers are built by small
factories and combined by composition, as optax combines gradient transformations. Padding
rows have weight 0, hence c_k = 0, and count in no sum.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import UpdateBatch
from fedsim_jax.strategy.staleness import StalenessFn

Reducer = Callable[[UpdateBatch, jax.Array], Params]


def weighted_mean() -> Reducer:
  """sum_k c_k delta_k / sum_k w_k: FedAvg's weighted mean when c = w (McMahan et al. 2017).

  The denominator sums the unscaled weights w_k, so a staleness scale shrinks the step instead
  of being normalised away.
  """

  def reduce(updates: UpdateBatch, scale: jax.Array) -> Params:
    total = jnp.maximum(updates.weights.sum(), 1e-12)
    return jax.tree_util.tree_map(lambda d: jnp.tensordot(scale, d, axes=1) / total, updates.deltas)

  return reduce


def count_mean() -> Reducer:
  """sum_k c_k delta_k / K over the K real rows: FedBuff's mean over the buffer (Nguyen et al.
  2022, Algorithm 1), with uniform weights."""

  def reduce(updates: UpdateBatch, scale: jax.Array) -> Params:
    total = jnp.maximum(updates.mask.sum(), 1.0)
    return jax.tree_util.tree_map(lambda d: jnp.tensordot(scale, d, axes=1) / total, updates.deltas)

  return reduce


def weighted_sum() -> Reducer:
  """sum_k c_k delta_k: FedCompass's buffered update (Li et al. 2024, Algorithm 3 line 4) with
  example shares p_k = n_k / n that already sum to at most 1."""

  def reduce(updates: UpdateBatch, scale: jax.Array) -> Params:
    return jax.tree_util.tree_map(lambda d: jnp.tensordot(scale, d, axes=1), updates.deltas)

  return reduce


def fednova_mean() -> Reducer:
  """FedNova's normalised averaging (Wang et al. 2020), as FedCompass+N and CC-FedAvg's FedNova
  baseline use it: sum_k (c_k / Q_k) delta_k times tau_eff = sum_k w_k Q_k / sum_k w_k, with
  Q_k the local steps of row k (at least 1).

  The weights play FedNova's p_k: nothing divides by their sum, so it is FedNova's average
  only when they sum to 1 (CC-FedAvg's 1 / |S_t|). Otherwise it is a FedNova-normalised *sum*,
  the step-normalised counterpart of `weighted_sum`: FedCompass's example shares n_k / n over
  a buffer (FedCompass+N), or FedBuff's `normalization='steps'`, where uniform weights w_k = 1
  give K times FedNova's average over a buffer of K.
  """

  def reduce(updates: UpdateBatch, scale: jax.Array) -> Params:
    steps = jnp.maximum(updates.num_steps, 1).astype(jnp.float32)
    tau_eff = (updates.weights * steps).sum() / jnp.maximum(updates.weights.sum(), 1e-12)
    normalized = scale / steps * tau_eff
    return jax.tree_util.tree_map(lambda d: jnp.tensordot(normalized, d, axes=1), updates.deltas)

  return reduce


def staleness_scaled(reducer: Reducer, staleness: StalenessFn) -> Reducer:
  """`reducer` with every numerator multiplied by s(staleness_k): c_k -> c_k s(u_k) (FedAsync,
  FedBuff and FedCompass scale stale updates down this way)."""

  def reduce(updates: UpdateBatch, scale: jax.Array) -> Params:
    return reducer(updates, scale * staleness(updates.staleness))

  return reduce
