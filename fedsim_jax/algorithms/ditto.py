"""Ditto (Li, Hu, Beirami, Smith 2021, "Ditto: Fair and Robust Federated Learning Through
Personalization", Algorithm 1): FedAvg's global model, unchanged, and a personalized model v_k
per client, trained next to the global update and pulled towards the global model.

In round t each selected client k trains the global model from w^t as FedAvg does (the global
objective is unchanged) and, over the same local iterations, its personalized model

    v_k <- v_k - eta (grad F_k(v_k) + lambda (v_k - w^t))                    (line 8)

How it is computed here:
* The personal step runs at the start of every local step, on that step's minibatch
  (`DittoStep`, a step prelude), so each task makes as many personal steps as global ones
  (s = the local steps, as in the paper's experiments); its learning rate is
  `personal_learning_rate` (default: `client.learning_rate`).
* v_k lives in a client table of the scheduler (`DittoScheduler.personal_models`), starting at
  the initial model, sent with each task and written back when the task is aggregated (a task
  discarded at a deadline leaves it unchanged), checkpointed with the run.
* Per-client evaluation (`data.client_test`) scores each client's own v_k on its test data as
  `personal_model_accuracy_*` (the paper's personalized accuracy), beside the global model's.
* Models with state (BatchNorm) are refused: the prelude's personal step has no running
  statistics of its own.

Limits (tests/algorithms/test_ditto_values.py): the global trajectory is FedAvg's for every
lambda; as lambda eta -> 1 each v_k is one small step from w^t, so its accuracy approaches the
global model's.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

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
from fedsim_jax.client.objective import cross_entropy
from fedsim_jax.models import Model, Params
from fedsim_jax.models.zoo import Norm
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.settings import ConfigError, positive, setting
from fedsim_jax.strategy import client_table
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.synchronous import AroundRounds, ClosingRound


class DittoInputs(NamedTuple):
  """A Ditto task's `task_inputs`: the client's personalized model v_k."""

  personal: Params


class DittoState(NamedTuple):
  """The prelude's state: v_k as it trains, and the downloaded global model w^t."""

  personal: Params
  anchor: Params


@dataclasses.dataclass(frozen=True)
class DittoStep:
  """Ditto's personal step (line 8), run before each local step on its minibatch."""

  strength: float  # lambda
  learning_rate: float  # eta of the personal model

  def init(self, model: Model, start_params: Params, task_inputs: DittoInputs) -> DittoState:
    return DittoState(task_inputs.personal, start_params)

  def __call__(
    self,
    model: Model,
    params: Params,
    batch: Any,
    task_inputs: Any,
    state: DittoState,
    steps_run: jax.Array,
  ) -> tuple[Params, DittoState]:
    x, y, weights = batch
    grads = jax.grad(model.loss)(state.personal, x, y, weights)
    personal = jax.tree_util.tree_map(
      lambda v, g, w: v - self.learning_rate * (g + self.strength * (v - w)),
      state.personal,
      grads,
      state.anchor,
    )
    return params, DittoState(personal, state.anchor)

  def aux(self, state: DittoState) -> dict[str, Any]:
    return {'ditto_personal': state.personal}


class DittoScheduler(AroundRounds):
  """FedAvg's synchronous rounds, plus each client's personalized model (module docstring).

  Attributes:
    personal_models: every client's v_k, a `ClientTable` (None before the run starts); the
      per-client evaluation reads it.
  """

  def __init__(self, settings: DeadlineSettings, context: BuildContext):
    self.personal_models: client_table.ClientTable | None = None
    self.rounds = synchronous_scheduler(
      settings, context, task_inputs=self._task_inputs, round_closing=self._round_closing
    )

  def start(self, sim: SchedulerContext) -> None:
    self.personal_models = client_table.broadcast(sim.params, sim.num_clients)  # v_k^0 = w^0
    super().start(sim)

  def _task_inputs(self, sim: SchedulerContext, client: int) -> DittoInputs:
    assert self.personal_models is not None
    return DittoInputs(client_table.read(self.personal_models, client))

  def personal_models_of(self, params: Params, clients: np.ndarray) -> Params:
    """The v_k of `clients`, stacked (the per-client evaluation's own models); before the
    first round every v_k is the initial model, `params`."""
    if self.personal_models is None:
      return jax.tree_util.tree_map(lambda leaf: jnp.stack([leaf] * len(clients)), params)
    rows = jnp.asarray(clients)
    return jax.tree_util.tree_map(lambda column: column[rows], self.personal_models.values)

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> None:
    assert self.personal_models is not None
    for handle in closing.aggregated:
      personal = sim.task_aux(handle)['ditto_personal']
      self.personal_models = client_table.write(self.personal_models, handle.client_id, personal)


@dataclasses.dataclass(frozen=True)
class DittoSettings(
  DeadlineSettings, LocalWorkSettings, ServerOptimizerSettings, ServerEmaSettings
):
  strength: float = setting(
    0.1, positive(allow_zero=True), 'lambda, the pull of v_k towards w (the paper tunes it)'
  )
  personal_learning_rate: float | None = setting(
    None, positive(optional=True), 'eta of the personal models (None: client.learning_rate)'
  )

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.model_norm == Norm.BATCH:
      raise ConfigError(
        "model.kwargs.norm='batch' is invalid with algorithm.name='ditto' (its personal step "
        "keeps no running statistics); allowed values: 'group', 'none'"
      )

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    return [HeldModels('data.num_clients', num_clients, "each client's personalized model")]


@register('ditto', DittoSettings)
def ditto_algorithm(settings: DittoSettings, context: BuildContext) -> Algorithm:
  scheduler = DittoScheduler(settings, context)
  rate = settings.personal_learning_rate or context.run.client_learning_rate
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(server_update(settings.make_server_optimizer('sgd'))),
    make_client_update=functools.partial(
      local_update, objective=(cross_entropy(),), prelude=DittoStep(settings.strength, rate)
    ),
  )
