"""The server update x <- x + ServerOpt(-reduce(updates)): FedAvg, FedOpt, FedBuff and their kin.

Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2: the server treats the
negative average of client deltas as a pseudo-gradient and applies a server optimizer to it.
With `optax.sgd(1.0)` and the weighted mean over weights n_k this is exactly FedAvg (McMahan et
al. 2017). FedBuff (Nguyen et al. 2022, Algorithm 1) is the same update on a buffer of K
asynchronous updates, averaged over K (`count_mean`) and optionally scaled by a staleness
function (`staleness_scaled`). How the batch is reduced is a `Reducer` (strategy/reducers.py).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, LinearAggregation, UpdateBatch
from fedsim_jax.strategy.reducers import LinearReducer, Reducer, weighted_mean


@flax.struct.dataclass
class ServerOptState:
  params: Params
  opt_state: Any


def server_update(
  optimizer: optax.GradientTransformation,
  reducer: Reducer = weighted_mean(),  # noqa: B008 (a pure function: calls share no state)
) -> Aggregator:
  """x_{t+1} = x_t + optimizer(-reducer(updates, updates.weights)).

  With a `LinearReducer` (every built-in one) the aggregator has a linear form
  (`Aggregator.linear`), so rounds larger than the simulation's `max_batch_tasks` are summed
  in chunks."""

  def init(params: Params) -> ServerOptState:
    return ServerOptState(params=params, opt_state=optimizer.init(params))

  def step(state: ServerOptState, delta: Params) -> ServerOptState:
    pseudo_gradient = jax.tree_util.tree_map(jnp.negative, delta)
    steps, opt_state = optimizer.update(pseudo_gradient, state.opt_state, state.params)
    return ServerOptState(params=optax.apply_updates(state.params, steps), opt_state=opt_state)

  def apply(state: ServerOptState, updates: UpdateBatch) -> ServerOptState:
    return step(state, reducer(updates, updates.weights))

  linear = None
  if isinstance(reducer, LinearReducer):

    def apply_sum(state: ServerOptState, summed: Params, scalars: UpdateBatch) -> ServerOptState:
      total = reducer.normalizer(scalars)
      return step(state, jax.tree_util.tree_map(lambda s: s / total, summed))

    linear = LinearAggregation(
      numerators=lambda scalars: reducer.numerators(scalars, scalars.weights),
      apply_sum=apply_sum,
    )
  return Aggregator(init=init, apply=apply, linear=linear)
