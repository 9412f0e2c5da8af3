"""Pure client-side local training, split into init / step / final like fedjax's client work.

A `ClientUpdate` describes *what* one client computes; the executor decides *how* many clients
run together (vmap or loop) and how steps are driven (scan or unrolled). Its result depends only
on (start params, client data, task settings, PRNG key), never on virtual time, which is what
lets the runtime defer and batch tasks (DESIGN.md, "The one invariant").
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.models import Model, Params

Batch = tuple[jax.Array, jax.Array, jax.Array]  # (x [B, ...], y [B], weights [B])


@flax.struct.dataclass
class ClientState:
  """Carry of local training: the client's params and optimizer state plus running totals."""

  params: Params
  opt_state: Any
  loss_sum: jax.Array
  steps_run: jax.Array


class ClientUpdate(NamedTuple):
  """A client's local objective and optimizer as three pure functions.

  Attributes:
    init: `(start_params, task_inputs) -> ClientState`.
    step: `(state, batch, task_inputs) -> state`, one local optimisation step.
    final: `(state, start_params) -> (delta, aux)` with `delta = params_end - start_params`.
    batch_size: examples per local step (the executor samples batches of this size).
  """

  init: Callable[[Params, Any], ClientState]
  step: Callable[[ClientState, Batch, Any], ClientState]
  final: Callable[[ClientState, Params], tuple[Params, dict[str, jax.Array]]]
  batch_size: int


def sgd_client_update(model: Model, optimizer: optax.GradientTransformation,
                      batch_size: int) -> ClientUpdate:
  """Plain local training: `optimizer` steps on the model's weighted cross-entropy.

  With `optax.sgd(lr)` this is FedAvg's ClientUpdate (McMahan et al. 2017, Algorithm 1).
  `task_inputs` is unused here; objectives with per-task inputs (a proximal anchor, a teacher)
  are built the same way and receive them through it.
  """

  def init(start_params, task_inputs):
    del task_inputs
    return ClientState(params=start_params, opt_state=optimizer.init(start_params),
                       loss_sum=jnp.zeros((), jnp.float32), steps_run=jnp.zeros((), jnp.int32))

  def step(state, batch, task_inputs):
    del task_inputs
    x, y, weights = batch
    loss, grads = jax.value_and_grad(model.loss)(state.params, x, y, weights)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    return ClientState(params=optax.apply_updates(state.params, updates), opt_state=opt_state,
                       loss_sum=state.loss_sum + loss, steps_run=state.steps_run + 1)

  def final(state, start_params):
    delta = jax.tree_util.tree_map(jnp.subtract, state.params, start_params)
    aux = {'train_loss': state.loss_sum / jnp.maximum(state.steps_run, 1),
           'steps_run': state.steps_run}
    return delta, aux

  return ClientUpdate(init=init, step=step, final=final, batch_size=batch_size)


CLIENT_OPTIMIZERS = ('sgd', 'momentum', 'adam')


def client_optimizer(name: str, learning_rate: float, momentum: float = 0.9,
                     weight_decay: float = 0.0) -> optax.GradientTransformation:
  """Named optax client optimizers (state is reset at the start of every task)."""
  if learning_rate <= 0:
    raise ValueError(f'client.learning_rate={learning_rate}; must be > 0')
  if name == 'sgd':
    opt = optax.sgd(learning_rate)
  elif name == 'momentum':
    opt = optax.sgd(learning_rate, momentum=momentum)
  elif name == 'adam':
    opt = optax.adam(learning_rate)
  else:
    raise ValueError(f'client.optimizer={name!r}; allowed: {CLIENT_OPTIMIZERS}')
  if weight_decay:
    opt = optax.chain(optax.add_decayed_weights(weight_decay), opt)
  return opt
