"""Reducers: how a batch of client deltas becomes the one delta a server update applies.

A reducer returns sum_k a_k delta_k / Z, where the numerators a_k and the normaliser Z depend
only on the batch's scalars (weights, staleness, local steps, the mask), never on the deltas.
`scale` holds the per-row numerators c_k a reducer starts from: `server_update` passes
c = `updates.weights` (the scheduler's p_k); `staleness_scaled` multiplies c by s(staleness)
before reducing. Reducers are built by small factories and combined by composition, as optax
combines gradient transformations. Padding rows have weight 0, hence c_k = 0, and count in no
sum.

Because a reducer is linear in the deltas, the runtime can sum a large batch in chunks
(`Simulation(max_batch_tasks=...)`): it asks the reducer for the numerators and the normaliser
of the whole batch, which need no deltas, and adds up sum_k a_k delta_k chunk by chunk, so
memory holds one chunk of deltas, not the whole cohort. Any callable
`reduce(updates, scale) -> delta` works as a reducer; one that is not a `LinearReducer` is
always given the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import UpdateBatch
from fedsim_jax.strategy.staleness import StalenessFn


class LinearReducer(NamedTuple):
  """A reducer in linear form: `reduce(updates, scale) = sum_k a_k delta_k / Z` with
  a = `numerators(updates, scale)` (`[K]`) and Z = `normalizer(updates)` (a scalar); both read
  only the batch's scalars (`updates.deltas` may be None)."""

  numerators: Callable[[UpdateBatch, jax.Array], jax.Array]
  normalizer: Callable[[UpdateBatch], jax.Array]

  def __call__(self, updates: UpdateBatch, scale: jax.Array) -> Params:
    a, total = self.numerators(updates, scale), self.normalizer(updates)
    return jax.tree_util.tree_map(lambda d: jnp.tensordot(a, d, axes=1) / total, updates.deltas)


Reducer = LinearReducer | Callable[[UpdateBatch, jax.Array], Params]


def _scale(updates: UpdateBatch, scale: jax.Array) -> jax.Array:
  return scale


def _one(updates: UpdateBatch) -> jax.Array:
  return jnp.ones((), jnp.float32)  # dividing by 1.0 is exact: the sum is returned as it is


def weighted_mean() -> LinearReducer:
  """sum_k c_k delta_k / sum_k w_k: FedAvg's weighted mean when c = w (McMahan et al. 2017).

  The denominator sums the unscaled weights w_k, so a staleness scale shrinks the step instead
  of being normalised away.
  """
  return LinearReducer(_scale, lambda updates: jnp.maximum(updates.weights.sum(), 1e-12))


def count_mean() -> LinearReducer:
  """sum_k c_k delta_k / K over the K real rows: FedBuff's mean over the buffer (Nguyen et al.
  2022, Algorithm 1), with uniform weights."""
  return LinearReducer(_scale, lambda updates: jnp.maximum(updates.mask.sum(), 1.0))


def weighted_sum() -> LinearReducer:
  """sum_k c_k delta_k: FedCompass's buffered update (Li et al. 2024, Algorithm 3 line 4) with
  example shares p_k = n_k / n that already sum to at most 1."""
  return LinearReducer(_scale, _one)


def fednova_mean(norm: Callable[[jax.Array], jax.Array] | None = None) -> LinearReducer:
  """FedNova's normalised averaging (Wang et al. 2020), as FedCompass+N and CC-FedAvg's FedNova
  baseline use it: sum_k (c_k / Q_k) delta_k times tau_eff = sum_k w_k Q_k / sum_k w_k, with
  Q_k the local steps of row k (at least 1), or with `norm`, ||a_k||_1 = norm(steps_k): the
  local solver's accumulated coefficients (momentum and proximal solvers; `fednova_norm`).

  The weights play FedNova's p_k: nothing divides by their sum, so it is FedNova's average
  only when they sum to 1 (CC-FedAvg's 1 / |S_t|). Otherwise it is a FedNova-normalised *sum*,
  the step-normalised counterpart of `weighted_sum`: FedCompass's example shares n_k / n over
  a buffer (FedCompass+N), or FedBuff's `normalization='steps'`, where uniform weights w_k = 1
  give K times FedNova's average over a buffer of K.
  """

  def numerators(updates: UpdateBatch, scale: jax.Array) -> jax.Array:
    steps = jnp.maximum(updates.num_steps, 1).astype(jnp.float32)
    a = steps if norm is None else norm(steps)
    tau_eff = (updates.weights * a).sum() / jnp.maximum(updates.weights.sum(), 1e-12)
    return scale / a * tau_eff

  return LinearReducer(numerators, _one)


def fednova_norm(
  momentum: float = 0.0, proximal: float = 0.0, learning_rate: float = 1.0
) -> Callable[[jax.Array], jax.Array]:
  """||a||_1 of tau local steps (Wang et al. 2020, Sec. 4): tau for SGD; with momentum rho,
  [tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho); with a proximal term mu at step size eta,
  [1 - (1 - eta mu)^tau] / (eta mu). One of `momentum` and `proximal` may be non-zero."""
  if momentum and proximal:
    raise ValueError('fednova_norm: momentum and a proximal term together have no closed form')
  if momentum:
    rho = float(momentum)
    return lambda tau: (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
  if proximal:
    shrink = 1.0 - float(learning_rate) * float(proximal)
    return lambda tau: (1 - shrink**tau) / (float(learning_rate) * float(proximal))
  return lambda tau: tau


def staleness_scaled(reducer: Reducer, staleness: StalenessFn) -> Reducer:
  """`reducer` with every numerator multiplied by s(staleness_k): c_k -> c_k s(u_k) (FedAsync,
  FedBuff and FedCompass scale stale updates down this way). Linear if `reducer` is."""
  if isinstance(reducer, LinearReducer):
    inner = reducer.numerators
    return LinearReducer(
      lambda updates, scale: inner(updates, scale * staleness(updates.staleness)),
      reducer.normalizer,
    )

  def reduce(updates: UpdateBatch, scale: jax.Array) -> Params:
    return reducer(updates, scale * staleness(updates.staleness))

  return reduce
