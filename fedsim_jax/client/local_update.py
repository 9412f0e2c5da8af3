"""Pure client-side local training, split into init / step / final like fedjax's client work.

A `ClientUpdate` describes *what* one client computes; the executor decides *how* many clients
run together (vmap or loop) and how steps are driven (scan or unrolled). Its result depends only
on (start params, client data, task settings, PRNG key), never on virtual time, which is what
lets the runtime defer and batch tasks (DESIGN.md, "The one invariant").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.models import Model, Params

Batch = tuple[jax.Array, jax.Array, jax.Array]  # (x [B, ...], y [B], weights [B])


@flax.struct.dataclass
class ClientState:
  """Carry of local training: the client's params and optimizer state plus running totals.

  `anchor` holds the downloaded model when the objective needs it (proximal term, teacher).
  """

  params: Params
  opt_state: Any
  loss_sum: jax.Array
  steps_run: jax.Array
  anchor: Params | None = None


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


def distillation_loss(
  student_logits: jax.Array, teacher_logits: jax.Array, weights: jax.Array, temperature: float = 1.0
) -> jax.Array:
  """Weighted mean of T^2 KL(softmax(teacher / T) || softmax(student / T)) (Hinton et al.).

  `weights` has the shape of the logits without the class axis (`[B]`, or `[B, T]` per token).
  """
  teacher = jax.nn.softmax(teacher_logits / temperature)
  log_student = jax.nn.log_softmax(student_logits / temperature)
  log_teacher = jax.nn.log_softmax(teacher_logits / temperature)
  per_example = (teacher * (log_teacher - log_student)).sum(-1) * temperature**2
  return (per_example * weights).sum() / jnp.maximum(weights.sum(), 1.0)


class TeacherInputs(NamedTuple):
  """A task's own distillation teacher, passed as its `task_inputs` (FARe-DUST: every client
  of every round gets a different stale teacher; Hard et al., Algorithm 1 lines 6-8).

  Attributes:
    params: the teacher model (same structure as the start params).
    weight: scalar multiplying the distillation term of this task: 1 to distil, 0 for a task
      that has no teacher (e.g. before any historical delta exists).
  """

  params: Params
  weight: jax.Array


TEACHER_SOURCES = ('downloaded', 'task_inputs')


def sgd_client_update(
  model: Model,
  optimizer: optax.GradientTransformation,
  batch_size: int,
  *,
  proximal_strength: float = 0.0,
  distillation_strength: float = 0.0,
  distillation_temperature: float = 1.0,
  teacher: str = 'downloaded',
) -> ClientUpdate:
  """Local training with `optimizer` on the model's weighted cross-entropy, optionally
  regularised towards the downloaded model w_0 and distilled from a teacher w_T:

    loss = CE + (nu / 2) ||w - w_0||^2 + rho * T^2 KL(p_{w_T}^T || p_w^T)

  With `optax.sgd(lr)` and no regulariser this is FedAvg's ClientUpdate (McMahan et al. 2017,
  Algorithm 1). `nu = proximal_strength` is FedProx's proximal term (Li et al. 2020), the
  straggler paper's `+ L2 reg.`; `rho = distillation_strength` distils from a teacher (the
  paper states neither form; these are the standard ones, added to the task loss). The teacher
  is the downloaded model w_T = w_0 (`teacher='downloaded'`, the straggler paper's `+ KD reg.`)
  or each task's own `TeacherInputs` given as its `task_inputs` (`teacher='task_inputs'`,
  FARe-DUST's stale teachers, Algorithm 3), whose `weight` also multiplies rho. With the
  downloaded teacher `task_inputs` is unused.

  Models with state (`model.has_state`, BatchNorm) follow `models.bundle`'s rule: the objective
  runs in train mode and each step replaces the running statistics by their updated values; the
  optimizer, the proximal term and the optimizer state see only the trainable part
  (`model.split`), so statistics get no gradient step, momentum or weight decay. The delta
  returned by `final` covers the statistics too, so the server averages them like weights.
  """
  if proximal_strength < 0 or distillation_strength < 0 or distillation_temperature <= 0:
    raise ValueError(
      'algorithm.kwargs.proximal_strength and algorithm.kwargs.distillation_strength must be '
      '>= 0 and algorithm.kwargs.distillation_temperature > 0'
    )
  if teacher not in TEACHER_SOURCES:
    raise ValueError(f'teacher={teacher!r}; allowed: {TEACHER_SOURCES}')
  own_teacher = teacher == 'task_inputs'
  needs_anchor = proximal_strength > 0 or (distillation_strength > 0 and not own_teacher)
  regularised_objective = proximal_strength > 0 or distillation_strength > 0

  def objective(params, anchor, task_inputs, x, y, weights):
    if not regularised_objective:
      return model.loss(params, x, y, weights)
    logits = model.apply(params, x)
    return regularised(logits, params, anchor, task_inputs, x, y, weights)

  def regularised(logits, trainable, anchor, task_inputs, x, y, weights):
    loss = model.cross_entropy(logits, y, weights)
    if proximal_strength:
      anchor_trainable = model.split(anchor)[0]
      sq = sum(
        jnp.sum(jnp.square(p - a))
        for p, a in zip(
          jax.tree_util.tree_leaves(trainable), jax.tree_util.tree_leaves(anchor_trainable)
        )
      )
      loss = loss + 0.5 * proximal_strength * sq
    if distillation_strength:
      teacher_params, strength = anchor, distillation_strength
      if own_teacher:
        teacher_params = task_inputs.params
        strength = distillation_strength * task_inputs.weight
      teacher_logits = jax.lax.stop_gradient(model.apply(teacher_params, x))
      loss = loss + strength * distillation_loss(
        logits, teacher_logits, model.label_weights(y, weights), distillation_temperature
      )
    return loss

  def stateful_objective(trainable, model_state, anchor, task_inputs, x, y, weights):
    logits, new_state = model.apply_train(model.merge(trainable, model_state), x, weights)
    return regularised(logits, trainable, anchor, task_inputs, x, y, weights), new_state

  def init(start_params, task_inputs):
    del task_inputs
    return ClientState(
      params=start_params,
      opt_state=optimizer.init(model.split(start_params)[0]),
      loss_sum=jnp.zeros((), jnp.float32),
      steps_run=jnp.zeros((), jnp.int32),
      anchor=start_params if needs_anchor else None,
    )

  def step(state, batch, task_inputs):
    x, y, weights = batch
    if model.has_state:
      trainable, model_state = model.split(state.params)
      (loss, new_state), grads = jax.value_and_grad(stateful_objective, has_aux=True)(
        trainable, model_state, state.anchor, task_inputs, x, y, weights
      )
      updates, opt_state = optimizer.update(grads, state.opt_state, trainable)
      params = model.merge(optax.apply_updates(trainable, updates), new_state)
    else:
      loss, grads = jax.value_and_grad(objective)(
        state.params, state.anchor, task_inputs, x, y, weights
      )
      updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
      params = optax.apply_updates(state.params, updates)
    return ClientState(
      params=params,
      opt_state=opt_state,
      loss_sum=state.loss_sum + loss,
      steps_run=state.steps_run + 1,
      anchor=state.anchor,
    )

  def final(state, start_params):
    delta = jax.tree_util.tree_map(jnp.subtract, state.params, start_params)
    aux = {
      'train_loss': state.loss_sum / jnp.maximum(state.steps_run, 1),
      'steps_run': state.steps_run,
    }
    return delta, aux

  return ClientUpdate(init=init, step=step, final=final, batch_size=batch_size)


CLIENT_OPTIMIZERS = ('sgd', 'momentum', 'adam')


def client_optimizer(
  name: str, learning_rate: float, momentum: float = 0.9, weight_decay: float = 0.0
) -> optax.GradientTransformation:
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
