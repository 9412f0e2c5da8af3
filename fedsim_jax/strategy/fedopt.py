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


SERVER_OPTIMIZERS = ('sgd', 'momentum', 'adam', 'yogi', 'adagrad')


def server_optimizer(name: str, learning_rate: float, *, momentum: float = 0.9,
                     b1: float = 0.9, b2: float = 0.99, eps: float = 1e-3,
                     initial_accumulator_value: float = 0.0) -> optax.GradientTransformation:
  """Named server optimizers of FedOpt.

  `eps` is Reddi et al.'s adaptivity tau (they tune it in {1e-1, ..., 1e-5}; 1e-3 default).
  Adam/Yogi use `eps_root=0` and the given `eps`; bias correction follows optax.
  """
  if learning_rate <= 0:
    raise ValueError(f'server.learning_rate={learning_rate}; must be > 0')
  if name == 'sgd':
    return optax.sgd(learning_rate)
  if name == 'momentum':
    return optax.sgd(learning_rate, momentum=momentum)
  if name == 'adam':
    return optax.adam(learning_rate, b1=b1, b2=b2, eps=eps)
  if name == 'yogi':
    return optax.yogi(learning_rate, b1=b1, b2=b2, eps=eps)
  if name == 'adagrad':
    return optax.adagrad(learning_rate, initial_accumulator_value=initial_accumulator_value,
                         eps=eps)
  raise ValueError(f'server.optimizer={name!r}; allowed: {SERVER_OPTIMIZERS}')
