"""FedAvg and adaptive federated optimisation (FedOpt) as one aggregator.

Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2: the server treats the
negative weighted average of client deltas as a pseudo-gradient and applies a server optimizer
to it. With `optax.sgd(1.0)` this is exactly FedAvg (McMahan et al. 2017): x <- x + mean delta.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import optax

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch, weighted_mean_delta


@flax.struct.dataclass
class ServerOptState:
  params: Params
  opt_state: Any


def fedopt(server_optimizer: optax.GradientTransformation) -> Aggregator:
  """x_{t+1} = x_t + ServerOpt(-sum_k w_k delta_k / sum_k w_k)."""

  def init(params: Params) -> ServerOptState:
    return ServerOptState(params=params, opt_state=server_optimizer.init(params))

  def apply(state: ServerOptState, updates: UpdateBatch) -> ServerOptState:
    pseudo_gradient = jax.tree_util.tree_map(lambda d: -d, weighted_mean_delta(updates))
    steps, opt_state = server_optimizer.update(pseudo_gradient, state.opt_state, state.params)
    return ServerOptState(params=optax.apply_updates(state.params, steps), opt_state=opt_state)

  return Aggregator(init=init, apply=apply)
