"""MOON (Li, He and Song 2021, Algorithm 1): FedAvg's rounds and server average; each client
adds mu times the model-contrastive loss (positive: the downloaded global model; negative: its
own previous local model) to its objective.

MOON: model-contrastive federated learning (Li, He and Song, CVPR 2021).

Source: the paper's method section (local objective and model-contrastive loss) and its
Algorithm 1 (server loop and PartyLocalTraining), as recalled (the text was not available in
this environment); a FedASMU baseline (FedASMU, Sec. 5, baselines: "contrastive
learning"; FedASMU states no rule or value for it).

Server: FedAvg (synchronous rounds, the weighted average of the local models with weights
|D_i| / |D|). Client i in round t starts from the global model w^t and minimises, on each
mini-batch,

  l = l_sup(w; (x, y)) + mu * l_con(w; x)
  l_con = -log( exp(sim(z, z_glob) / tau)
                / (exp(sim(z, z_glob) / tau) + exp(sim(z, z_prev) / tau)) )

where z, z_glob and z_prev are the representations of x by the local model being trained, the
global model w^t (the positive pair) and the client's own previous local model w_i^{t-1} (the
negative pair), and sim is the cosine similarity. After training, w_i^{t-1} <- w_i^t.

Choices where the paper is silent, or where this code base differs (settings: `algorithm.kwargs`
of moon, `MoonSettings`):
  * Representation (`algorithm.kwargs.representation`, only 'penultimate'): z is the input of
    the model's
    output layer (`Model.capture_features`). The paper puts a 2-layer projection head (output
    dimension 256) between the base encoder and the output layer and contrasts its output; the
    zoo models have no such head, so z is the encoder's output (for `lenet5`: the 84-dim ReLU
    features, the base encoder of the paper's simple CNN).
  * First participation: a client that has not trained before uses the global model as its
    previous model. Then z_prev = z_glob and l_con is the
    constant log 2 with zero gradient: the first task of a client is exactly FedAvg's.
  * Partial participation: w_i^{t-1} is the client's latest local model, from the last round
    it trained in (the paper's experiments sample every client each round by default). Its
    model is recorded when its update is aggregated, and also when it arrives after a deadline
    closed its round (it trained; the update is then discarded as a straggler).
  * Frozen models: z_glob and z_prev are computed in eval mode (BatchNorm running statistics)
    with no gradient; the local model runs in train mode. One negative (the paper's default
    buffer of previous models has size 1).
  * Padding: l_con is averaged over the batch's counted examples (example weights), like l_sup.
  * mu = 0 skips the representations: the client is then FedAvg's.
Defaults: tau = 0.5 and mu = 1 (the paper's experimental settings: tau 0.5; mu tuned from
{0.1, 1, 5, 10}, best 5 on CIFAR-10 and 1 on CIFAR-100 and Tiny-ImageNet; FedASMU tunes without
reporting values).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  DeadlineSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
  ServerOptimizerSettings,
)
from fedsim_jax.client.local_update import ClientUpdate, local_update
from fedsim_jax.client.objective import Term, TermInputs, cross_entropy
from fedsim_jax.models import Model, Params
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.settings import one_of, positive, setting
from fedsim_jax.strategy import client_table
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.synchronous import AroundRounds, ClosingRound, SynchronousScheduler
from fedsim_jax.tree import row

REPRESENTATIONS = ('penultimate',)


class MoonInputs(NamedTuple):
  """A MOON task's `task_inputs`: the client's previous local model w_i^{t-1} (the global
  model on its first participation). Same structure as the start params."""

  previous: Params


def cosine_similarity(a: jax.Array, b: jax.Array, eps: float = 1e-8) -> jax.Array:
  """Cosine similarity along the last axis: a.b / max(|a| |b|, eps) (PyTorch's form)."""
  norms = jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(b, axis=-1)
  return (a * b).sum(-1) / jnp.maximum(norms, eps)


def contrastive_loss(
  z: jax.Array,
  z_global: jax.Array,
  z_previous: jax.Array,
  temperature: float,
  weights: jax.Array | None = None,
) -> jax.Array:
  """MOON's model-contrastive loss l_con, averaged over examples.

  Args:
    z, z_global, z_previous: `[B, F]` (or `[B, T, F]`) representations by the local, the global
      and the previous local model.
    temperature: tau.
    weights: `[B]` example weights (0 for padding); None counts every example once.
  """
  positive = cosine_similarity(z, z_global) / temperature
  negative = cosine_similarity(z, z_previous) / temperature
  # -log(e^p / (e^p + e^n)) = logsumexp(p, n) - p
  per_example = jnp.logaddexp(positive, negative) - positive
  if weights is None:
    return per_example.mean()
  w = jnp.broadcast_to(
    weights.reshape(weights.shape + (1,) * (per_example.ndim - 1)), per_example.shape
  )
  return (per_example * w).sum() / jnp.maximum(w.sum(), 1.0)


@dataclasses.dataclass(frozen=True)
class Contrastive(Term):
  """MOON's mu * l_con(z, z_glob, z_prev) (see the module docstring): z is the trained model's
  representation of the batch (train mode), z_glob that of the downloaded global model and
  z_prev that of `MoonInputs.previous` (the task's `task_inputs`), both in eval mode without
  gradient. Inactive at mu = 0 (FedAvg's objective: no representations are computed)."""

  mu: float
  temperature: float

  def __post_init__(self):
    if self.mu < 0 or self.temperature <= 0:
      raise ValueError(
        f'algorithm.kwargs.mu={self.mu}, algorithm.kwargs.temperature={self.temperature}; '
        'allowed: mu >= 0, temperature > 0'
      )

  @property
  def active(self) -> bool:
    return self.mu > 0

  @property
  def needs_anchor(self) -> bool:
    return True

  @property
  def needs_features(self) -> bool:
    return True

  @property
  def reads_task_inputs(self) -> bool:
    return True

  def __call__(self, inputs: TermInputs) -> jax.Array:
    model, x = inputs.model, inputs.x
    z_global = jax.lax.stop_gradient(model.features(inputs.anchor, x))
    z_previous = jax.lax.stop_gradient(model.features(inputs.task_inputs.previous, x))
    assert inputs.features is not None  # needs_features
    return self.mu * contrastive_loss(
      inputs.features, z_global, z_previous, self.temperature, inputs.weights
    )


def contrastive(mu: float, temperature: float) -> Contrastive:
  return Contrastive(mu, temperature)


def moon_client_update(
  model: Model,
  optimizer: optax.GradientTransformation,
  batch_size: int,
  *,
  mu: float,
  temperature: float,
) -> ClientUpdate:
  """MOON's local training (Algorithm 1, PartyLocalTraining): `optimizer` steps on
  l_sup + mu * l_con (`local_update` on `cross_entropy()` and `contrastive(mu, temperature)`),
  with the downloaded global model as the positive and `MoonInputs.previous` (the task's
  `task_inputs`) as the negative."""
  return local_update(model, optimizer, batch_size, (cross_entropy(), contrastive(mu, temperature)))


class MoonScheduler(AroundRounds):
  """FedAvg's synchronous rounds plus each client's previous local model (host side).

  Args:
    cohort_size, local_work, weighting, num_selected, deadline, min_responses: as in
      `SynchronousScheduler`.
    contrast: whether clients contrast (mu > 0); without it no previous models are kept or sent.

  Attributes:
    previous_models: every client's latest local model w_i (after its last training), a
      `ClientTable` created at the run's start (None before).
  """

  def __init__(
    self,
    cohort_size: int,
    local_work: LocalWork,
    weighting: str = 'num_examples',
    *,
    num_selected: int | None = None,
    deadline: float | None = None,
    min_responses: int = 1,
    contrast: bool = True,
  ):
    self.contrast = contrast
    self.previous_models: client_table.ClientTable | None = None
    self.rounds = SynchronousScheduler(
      cohort_size,
      local_work,
      weighting,
      num_selected=num_selected,
      deadline=deadline,
      min_responses=min_responses,
      late_update_handler=self._late_update if contrast else None,
      task_inputs=self._task_inputs if contrast else None,
      round_closing=self._round_closing if contrast else None,
    )

  def start(self, sim: SchedulerContext) -> None:
    if self.contrast:
      self.previous_models = client_table.create(sim.params, sim.num_clients)
    super().start(sim)

  def _task_inputs(self, sim: SchedulerContext, client: int) -> MoonInputs:
    assert self.previous_models is not None
    if not self.previous_models.written[client]:
      # First participation: the global model being sent (z_prev = z_glob, l_con constant).
      return MoonInputs(previous=sim.params)
    return MoonInputs(previous=client_table.read(self.previous_models, client))

  def _record(self, sim: SchedulerContext, handles: list[TaskHandle]) -> None:
    """w_i^{t-1} <- w_i^t for the clients of `handles` (arrived tasks)."""
    assert self.previous_models is not None
    batch = sim.updates(handles, [1.0] * len(handles), with_client_params=True)
    for index, handle in enumerate(handles):
      self.previous_models = client_table.write(
        self.previous_models, handle.client_id, row(batch.client_params, index)
      )

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> None:
    self._record(sim, closing.aggregated)

  def _late_update(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    if handle.num_steps > 0:
      self._record(sim, [handle])
    sim.discard(handle, 'straggler')


@dataclasses.dataclass(frozen=True)
class MoonSettings(DeadlineSettings, LocalWorkSettings, ServerOptimizerSettings, ServerEmaSettings):
  mu: float = setting(1.0, positive(allow_zero=True), 'weight of l_con (5 CIFAR-10, 1 CIFAR-100)')
  temperature: float = setting(0.5, positive(), 'tau')
  representation: str = setting(
    'penultimate', one_of(REPRESENTATIONS), 'z: the input of the output layer (no projection head)'
  )

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    return [HeldModels('data.num_clients', num_clients, "each client's previous local model")]


@register('moon', MoonSettings)
def moon_algorithm(settings: MoonSettings, context: BuildContext) -> Algorithm:
  scheduler = MoonScheduler(
    settings.cohort_size,
    settings.local_work(context),
    settings.weighting,
    num_selected=settings.num_selected,
    deadline=settings.deadline,
    min_responses=settings.min_responses,
    contrast=settings.mu > 0,
  )
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(server_update(settings.make_server_optimizer('sgd'))),
    make_client_update=functools.partial(
      local_update, objective=(cross_entropy(), contrastive(settings.mu, settings.temperature))
    ),
  )
