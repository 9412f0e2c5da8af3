"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh 2020, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", Algorithm 1): synchronous rounds whose clients
correct every local gradient by control variates, c - c_i, against client drift.

Server state: the model x and the server control variate c (0 at the start); each client i
keeps its control variate c_i (0 before its first round). In a round with sampled clients S,
each client i starts from y_i = x and runs K local steps

    y_i <- y_i - eta_l (g_i(y_i) - c_i + c)                                  (line 10)

then updates its control variate by

    option I:  c_i+ = g_i(x)                 (a minibatch gradient at the server model)
    option II: c_i+ = c_i - c + (x - y_i) / (K eta_l)                        (line 12)

and sends (Delta y_i, Delta c_i) = (y_i - x, c_i+ - c_i). The server sets

    x <- x + eta_g (1 / |S|) sum_{i in S} Delta y_i                          (line 16)
    c <- c + (1 / N) sum_{i in S} Delta c_i                                  (line 17)

How it is computed here:
* The correction enters the client objective as the linear term <c - c_i, y>
  (`ControlVariateCorrection`), whose gradient is exactly c - c_i: with the client optimizer
  `sgd` the local step is line 10; another client optimizer sees the corrected gradient.
* c and the table of c_i are the scheduler's (`ScaffoldScheduler`), in device memory, and are
  checkpointed with it; each task receives c - c_i as its `task_inputs`. The server's model
  step is the FedOpt server update (`server_optimizer`, default SGD at eta_g), so
  `server_learning_rate` is eta_g.
* Option I's g_i(x) is the gradient of the client's first local step: that step's minibatch is
  drawn at y_i = x (Algorithm 1's g_i is a stochastic gradient); option II uses the steps the
  client actually ran as K and `client.learning_rate` as eta_l.
* A task discarded at a deadline changes neither c_i nor c (as if the client had not trained).
* The average of line 16 is 1 / |S| (`weighting='uniform'`, the default); 'num_examples'
  weights it by examples. Line 17 always divides by N, the federation's size.
* Models with state (BatchNorm) are refused: the control variates cover trainable weights.

Limits (tests/algorithms/test_scaffold.py): with c = c_i = 0 throughout (a client's first
round, before any control variate moved) the local steps are FedAvg's; with one local step and
full participation, option II's c_i+ is the client's gradient at x and SCAFFOLD's rounds equal
FedAvg's from the second round on only if the clients' gradients agree (they do not in
general). SCAFFOLD has no standard asynchronous form (control variates under staleness are not
defined by the paper): it runs on synchronous rounds only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.groups import (
  DeadlineSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
  ServerOptimizerSettings,
  synchronous_scheduler,
)
from fedsim_jax.client.local_update import local_update
from fedsim_jax.client.objective import Term, TermInputs, cross_entropy
from fedsim_jax.models import Model, Params
from fedsim_jax.models.zoo import Norm
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.settings import ConfigError, one_of, setting
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy import client_table
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.synchronous import WEIGHTINGS, AroundRounds, ClosingRound
from fedsim_jax.tree import row


class ControlVariateOption(StrEnum):
  """How a client updates its control variate (Algorithm 1, line 12)."""

  GRADIENT = 'I'  # c_i+ = g_i(x)
  DIFFERENCE = 'II'  # c_i+ = c_i - c + (x - y_i) / (K eta_l)


class ScaffoldInputs(NamedTuple):
  """A SCAFFOLD task's `task_inputs`: the correction c - c_i (the structure of the params)."""

  correction: Params


class FirstGradient(NamedTuple):
  """The carry of option I: the first local step's uncorrected gradient, and whether it is set."""

  gradient: Params
  recorded: jax.Array


def _vdot(a: Params, b: Params) -> jax.Array:
  return jnp.asarray(
    sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
  )


@dataclasses.dataclass(frozen=True)
class ControlVariateCorrection(Term):
  """SCAFFOLD's linear term <c - c_i, y>: its gradient c - c_i corrects every local gradient.
  With `record_gradient` (option I) it also keeps the first step's gradient without the
  correction, g_i(x), reported in the task's aux as `scaffold_gradient`."""

  record_gradient: bool = False

  @property
  def reads_task_inputs(self) -> bool:
    return True

  @property
  def carries_state(self) -> bool:
    return self.record_gradient

  def check(self, model: Model) -> None:
    if model.has_state:
      raise ValueError(
        f'model {model.name!r} has state (BatchNorm); scaffold allows models without state '
        "(e.g. model.kwargs.norm='group')"
      )

  def __call__(self, inputs: TermInputs) -> jax.Array:
    return _vdot(inputs.task_inputs.correction, inputs.params)

  def init_carry(self, model: Model, start_params: Params, task_inputs: Any) -> FirstGradient:
    trainable, _ = model.split(start_params)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, trainable)
    return FirstGradient(zeros, jnp.zeros((), bool))

  def correct(
    self, grads: Params, carry: FirstGradient, task_inputs: Any
  ) -> tuple[Params, FirstGradient]:
    # The objective's gradient holds the correction; g_i(x) is the gradient without it.
    plain = jax.tree_util.tree_map(jnp.subtract, grads, task_inputs.correction)
    gradient = jax.tree_util.tree_map(
      lambda old, new: jnp.where(carry.recorded, old, new), carry.gradient, plain
    )
    return grads, FirstGradient(gradient, jnp.ones((), bool))

  def carry_aux(self, model: Model, carry: FirstGradient, start_params: Params) -> dict[str, Any]:
    return {'scaffold_gradient': carry.gradient}


def _option_two(
  control: Params, client_control: Params, delta: Params, steps: jax.Array, learning_rate: float
) -> Params:
  """c_i+ = c_i - c - Delta y_i / (K eta_l)  (x - y_i = -Delta y_i)."""
  scale = 1.0 / (jnp.maximum(steps, 1).astype(jnp.float32) * learning_rate)
  return jax.tree_util.tree_map(lambda ci, c, d: ci - c - scale * d, client_control, control, delta)


_option_two_jit = jax.jit(_option_two, static_argnames=('learning_rate',))
_subtract = jax.jit(lambda a, b: jax.tree_util.tree_map(jnp.subtract, a, b))
_add_scaled = jax.jit(lambda a, b, scale: jax.tree_util.tree_map(lambda x, y: x + scale * y, a, b))


class ScaffoldScheduler(AroundRounds):
  """Synchronous rounds with SCAFFOLD's control variates (module docstring).

  Args:
    settings: the algorithm's (`control_variate` and the rounds' settings).
    context: the run (eta_l is `client.learning_rate`, option II).

  Attributes:
    control: the server control variate c (None before the run starts).
    client_controls: every client's c_i, a `ClientTable` (None before the run starts).
  """

  def __init__(self, settings: ScaffoldSettings, context: BuildContext):
    self.option = ControlVariateOption(settings.control_variate)
    self.learning_rate = float(context.run.client_learning_rate)
    self.control: Params | None = None
    self.client_controls: client_table.ClientTable | None = None
    self.rounds = synchronous_scheduler(
      settings, context, task_inputs=self._task_inputs, round_closing=self._round_closing
    )

  def start(self, sim: SchedulerContext) -> None:
    self.control = jax.tree_util.tree_map(jnp.zeros_like, sim.params)
    self.client_controls = client_table.create(sim.params, sim.num_clients)
    super().start(sim)

  def _task_inputs(self, sim: SchedulerContext, client: int) -> ScaffoldInputs:
    assert self.client_controls is not None
    return ScaffoldInputs(_subtract(self.control, client_table.read(self.client_controls, client)))

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> None:
    # Lines 12-13 for every aggregated client, then line 17 (line 16 is the aggregator's).
    assert self.client_controls is not None and self.control is not None
    batch = sim.updates(closing.aggregated, closing.weights)
    total = None
    for index, handle in enumerate(closing.aggregated):
      old = client_table.read(self.client_controls, handle.client_id)
      if self.option == ControlVariateOption.GRADIENT:
        new = sim.task_aux(handle)['scaffold_gradient']
      else:
        new = _option_two_jit(
          self.control,
          old,
          row(batch.deltas, index),
          batch.num_steps[index],
          learning_rate=self.learning_rate,
        )
      change = _subtract(new, old)
      total = change if total is None else jax.tree_util.tree_map(jnp.add, total, change)
      self.client_controls = client_table.write(self.client_controls, handle.client_id, new)
    if total is not None:
      self.control = _add_scaled(self.control, total, 1.0 / sim.num_clients)


@dataclasses.dataclass(frozen=True)
class ScaffoldSettings(
  DeadlineSettings, LocalWorkSettings, ServerOptimizerSettings, ServerEmaSettings
):
  weighting: str = setting(
    'uniform', one_of(WEIGHTINGS), 'weights of the model average (Alg. 1: 1 / |S|)'
  )
  control_variate: str = setting(
    'II',
    one_of(ControlVariateOption),
    "'I': c_i = g_i(x), a gradient at the server model; 'II': c_i - c + (x - y_i) / (K eta_l)",
  )

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.model_norm == Norm.BATCH:
      raise ConfigError(
        "model.kwargs.norm='batch' is invalid with algorithm.name='scaffold' (its control "
        "variates cover trainable weights only); allowed values: 'group', 'none'"
      )

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    return [HeldModels('data.num_clients', num_clients, "each client's control variate c_i")]


@register('scaffold', ScaffoldSettings)
def scaffold_algorithm(settings: ScaffoldSettings, context: BuildContext) -> Algorithm:
  scheduler = ScaffoldScheduler(settings, context)
  record = settings.control_variate == ControlVariateOption.GRADIENT
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(server_update(settings.make_server_optimizer('sgd'))),
    make_client_update=functools.partial(
      local_update,
      objective=(cross_entropy(), ControlVariateCorrection(record_gradient=record)),
    ),
  )
