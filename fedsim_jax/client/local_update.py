"""Pure client-side local training, split into init / step / final like fedjax's client work.

A `ClientUpdate` describes *what* one client computes; the executor decides *how* many clients
run together (vmap or loop) and how steps are driven (scan or unrolled). Its result depends only
on (start params, client data, task settings, PRNG key), never on virtual time, which is what
lets the runtime defer and batch tasks (docs/design-notes.md, "Deferred batched execution").

Every client update is one engine, `local_update(model, optimizer, batch_size, objective,
prelude=...)`: the optimizer steps on the sum of the objective's terms (client/objective.py);
an optional prelude may replace the parameters at the start of a step (FedASMU's fresh-model
blend, algorithms/fedasmu/device.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.client.objective import Objective, TermInputs, regularised_objective
from fedsim_jax.models import Model, Params
from fedsim_jax.str_enum import StrEnum, parse

Batch = tuple[jax.Array, jax.Array, jax.Array]  # (x [B, ...], y [B], weights [B])


@flax.struct.dataclass
class ClientState:
  """Carry of local training: the client's params and optimizer state plus running totals.

  `anchor` holds the downloaded model when a term of the objective reads it (proximal term,
  downloaded teacher, MOON's global model); `carries` the state of the terms that keep one
  across steps (ASO-Fed's h and g_prev), in objective order; `prelude` the prelude's state.
  """

  params: Params
  opt_state: Any
  loss_sum: jax.Array
  steps_run: jax.Array
  anchor: Params | None = None
  carries: tuple[Any, ...] = ()
  prelude: Any = None


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


class Prelude(Protocol):
  """Work at the start of each local step, before the objective's gradient: it may replace the
  parameters the step starts from (FedASMU's blend of a fresh global model, Formulas 7-9).

  `init(model, start_params, task_inputs)` gives its state; `__call__(model, params, batch,
  task_inputs, state, steps_run)` returns `(params, state)`; `aux(state)` the entries it adds
  to the task's aux.
  """

  def init(self, model: Model, start_params: Params, task_inputs: Any) -> Any: ...

  def __call__(
    self,
    model: Model,
    params: Params,
    batch: Batch,
    task_inputs: Any,
    state: Any,
    steps_run: jax.Array,
  ) -> tuple[Params, Any]: ...

  def aux(self, state: Any) -> dict[str, jax.Array]: ...


def local_update(
  model: Model,
  optimizer: optax.GradientTransformation,
  batch_size: int,
  objective: Objective,
  *,
  prelude: Prelude | None = None,
) -> ClientUpdate:
  """Local training with `optimizer` on the sum of `objective`'s terms.

  Each step: the prelude (if any) may replace the parameters; the model runs on the batch in
  train mode (capturing its penultimate representation if a term needs it); the terms' values
  are added in objective order (a term returning several values adds them one by one); the
  terms that carry state correct the gradient, in order, before `optimizer` turns it into
  updates, which they may then scale. Inactive terms (zero strength) are dropped, and the
  downloaded model, the representation and the task inputs reach the terms only when one of
  them declares it needs them, so an absent term costs nothing. `final` returns the delta
  `params_end - start_params` and an aux of `train_loss` (the mean objective over the steps run),
  `steps_run` and whatever the carrying terms and the prelude report.

  Models with state (`model.has_state`, BatchNorm) follow `models.bundle`'s rule: the objective
  runs in train mode and each step replaces the running statistics by their updated values; the
  optimizer, the terms' parameters and the optimizer state see only the trainable part
  (`model.split`), so statistics get no gradient step, momentum or weight decay. The delta
  returned by `final` covers the statistics too, so the server averages them like weights.
  """
  terms = tuple(term for term in objective if term.active)
  if not terms:
    raise ValueError(
      'objective: no active term; allowed: a sequence with one, e.g. cross_entropy()'
    )
  for term in terms:
    term.check(model)
  needs_anchor = any(term.needs_anchor for term in terms)
  needs_features = any(term.needs_features for term in terms)
  reads_task_inputs = any(term.reads_task_inputs for term in terms)
  carriers = tuple(term for term in terms if term.carries_state)

  def loss_fn(trainable, model_state, anchor, task_inputs, x, y, weights):
    params = model.merge(trainable, model_state)
    features = None
    if needs_features:
      (logits, new_state), features = model.capture_features(model.apply_train, params, x, weights)
    else:
      logits, new_state = model.apply_train(params, x, weights)
    inputs = TermInputs(model, trainable, logits, features, anchor, task_inputs, x, y, weights)
    loss = None
    for term in terms:
      values = term(inputs)
      for value in values if isinstance(values, tuple) else (values,):
        loss = value if loss is None else loss + value
    if loss is None:
      raise ValueError('objective: no term has a loss value; allowed: one with cross_entropy()')
    return loss, new_state

  def init(start_params, task_inputs):
    return ClientState(
      params=start_params,
      opt_state=optimizer.init(model.split(start_params)[0]),
      loss_sum=jnp.zeros((), jnp.float32),
      steps_run=jnp.zeros((), jnp.int32),
      anchor=start_params if needs_anchor else None,
      carries=tuple(term.init_carry(model, start_params, task_inputs) for term in carriers),
      prelude=None if prelude is None else prelude.init(model, start_params, task_inputs),
    )

  def step(state, batch, task_inputs):
    x, y, weights = batch
    params, prelude_state = state.params, state.prelude
    if prelude is not None:
      params, prelude_state = prelude(
        model, params, batch, task_inputs, prelude_state, state.steps_run
      )
    trainable, model_state = model.split(params)
    (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      trainable,
      model_state,
      state.anchor,
      task_inputs if reads_task_inputs else None,
      x,
      y,
      weights,
    )
    carries = []
    for term, carry in zip(carriers, state.carries):
      grads, carry = term.correct(grads, carry, task_inputs)
      carries.append(carry)
    updates, opt_state = optimizer.update(grads, state.opt_state, trainable)
    for term in carriers:
      updates = term.scale_updates(updates, task_inputs)
    return ClientState(
      params=model.merge(optax.apply_updates(trainable, updates), new_state),
      opt_state=opt_state,
      loss_sum=state.loss_sum + loss,
      steps_run=state.steps_run + 1,
      anchor=state.anchor,
      carries=tuple(carries),
      prelude=prelude_state,
    )

  def final(state, start_params):
    delta = jax.tree_util.tree_map(jnp.subtract, state.params, start_params)
    aux = {
      'train_loss': state.loss_sum / jnp.maximum(state.steps_run, 1),
      'steps_run': state.steps_run,
    }
    for term, carry in zip(carriers, state.carries):
      aux.update(term.carry_aux(model, carry, start_params))
    if prelude is not None:
      aux.update(prelude.aux(state.prelude))
    return delta, aux

  return ClientUpdate(init=init, step=step, final=final, batch_size=batch_size)


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
  """`local_update` on `regularised_objective`: the weighted cross-entropy, optionally
  regularised towards the downloaded model w_0 and distilled from a teacher w_T,

    loss = CE + (nu / 2) ||w - w_0||^2 + rho * T^2 KL(p_{w_T}^T || p_w^T).

  With `optax.sgd(lr)` and no regulariser this is FedAvg's ClientUpdate (McMahan et al. 2017,
  Algorithm 1); `nu = proximal_strength` is FedProx's proximal term (Li et al. 2020), the
  straggler paper's `+ L2 reg.`; `rho = distillation_strength` distils from the downloaded model
  (`teacher='downloaded'`, `+ KD reg.`) or from each task's `TeacherInputs` (`'task_inputs'`).
  """
  objective = regularised_objective(
    proximal_strength, distillation_strength, distillation_temperature, teacher
  )
  return local_update(model, optimizer, batch_size, objective)


class ClientOptimizer(StrEnum):
  """The named client optimizers (`client.optimizer`)."""

  SGD = 'sgd'
  MOMENTUM = 'momentum'
  ADAM = 'adam'


CLIENT_OPTIMIZERS = tuple(optimizer.value for optimizer in ClientOptimizer)


def client_optimizer(
  name: str, learning_rate: float, momentum: float = 0.9, weight_decay: float = 0.0
) -> optax.GradientTransformation:
  """Named optax client optimizers (state is reset at the start of every task); `name` is a
  `ClientOptimizer` or its name."""
  if learning_rate <= 0:
    raise ValueError(f'client.learning_rate={learning_rate}; must be > 0')
  optimizer = parse(ClientOptimizer, name, 'client.optimizer')
  return optimizer_of_values(
    optimizer, learning_rate, momentum, weight_decay, decays=bool(weight_decay)
  )


def optimizer_of_values(
  optimizer: ClientOptimizer,
  learning_rate: Any,
  momentum: Any,
  weight_decay: Any,
  *,
  decays: bool,
) -> optax.GradientTransformation:
  """`client_optimizer` without its checks, its numbers possibly traced arrays (a lockstep
  sweep's per-simulation values, `Executor(client_update_for=...)`): nothing here reads them
  in Python. The state's structure depends only on `optimizer` and `decays` (whether the
  weight decay is a chain element: `weight_decay != 0`), never on the values; the momentum
  optimizer keeps a trace for every momentum, 0 included."""
  if optimizer is ClientOptimizer.SGD:
    opt = optax.sgd(learning_rate)
  elif optimizer is ClientOptimizer.MOMENTUM:
    opt = optax.sgd(learning_rate, momentum=momentum)
  else:
    opt = optax.adam(learning_rate)
  if decays:
    opt = optax.chain(optax.add_decayed_weights(weight_decay), opt)
  return opt
