"""FedAvg, FedOpt and FedBuff's server update as one aggregator.

Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2: the server treats the
negative average of client deltas as a pseudo-gradient and applies a server optimizer to it.
With `optax.sgd(1.0)` and weights n_k this is exactly FedAvg (McMahan et al. 2017). FedBuff
(Nguyen et al. 2022, Algorithm 1) is the same update on a buffer of K asynchronous updates,
averaged over K and optionally scaled by a staleness function.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch
from fedsim_jax.strategy.staleness import StalenessFn

NORMALIZATIONS = ('weights', 'count', 'sum', 'steps')


@flax.struct.dataclass
class ServerOptState:
  params: Params
  opt_state: Any


def average_delta(
  updates: UpdateBatch, normalization: str = 'weights', staleness: StalenessFn | None = None
) -> Params:
  """sum_k c_k w_k delta_k / Z, with c_k = s(staleness_k) (1 without a staleness function) and
  Z = sum_k w_k ('weights'), the number of updates K ('count') or 1 ('sum').

  'steps' is FedNova-style normalized averaging (Wang et al. 2020) as FedCompass+N uses it:
  sum_k c_k w_k delta_k / Q_k, times tau_eff = sum_k w_k Q_k / sum_k w_k (Q_k: local steps).
  """
  if normalization not in NORMALIZATIONS:
    raise ValueError(f'normalization={normalization!r}; allowed: {NORMALIZATIONS}')
  scale = updates.weights
  if staleness is not None:
    scale = scale * staleness(updates.staleness)
  if normalization == 'steps':
    steps = jnp.maximum(updates.num_steps, 1).astype(jnp.float32)
    tau_eff = (updates.weights * steps).sum() / jnp.maximum(updates.weights.sum(), 1e-12)
    scale = scale / steps * tau_eff
    total = 1.0
  elif normalization == 'weights':
    total = jnp.maximum(updates.weights.sum(), 1e-12)
  elif normalization == 'count':
    total = jnp.maximum(updates.mask.sum(), 1.0)
  else:
    total = 1.0
  return jax.tree_util.tree_map(lambda d: jnp.tensordot(scale, d, axes=1) / total, updates.deltas)


def fedopt(
  server_optimizer: optax.GradientTransformation,
  *,
  normalization: str = 'weights',
  staleness: StalenessFn | None = None,
) -> Aggregator:
  """x_{t+1} = x_t + ServerOpt(-average_delta(updates))."""
  if normalization not in NORMALIZATIONS:
    raise ValueError(f'algorithm.kwargs.normalization={normalization!r}; allowed: {NORMALIZATIONS}')

  def init(params: Params) -> ServerOptState:
    return ServerOptState(params=params, opt_state=server_optimizer.init(params))

  def apply(state: ServerOptState, updates: UpdateBatch) -> ServerOptState:
    mean = average_delta(updates, normalization, staleness)
    pseudo_gradient = jax.tree_util.tree_map(jnp.negative, mean)
    steps, opt_state = server_optimizer.update(pseudo_gradient, state.opt_state, state.params)
    return ServerOptState(params=optax.apply_updates(state.params, steps), opt_state=opt_state)

  return Aggregator(init=init, apply=apply)
