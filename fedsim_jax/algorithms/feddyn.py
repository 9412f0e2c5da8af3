"""FedDyn (Acar et al. 2021, Algorithm 1): synchronous rounds; clients minimise the dynamic
regulariser L_k(theta) - <g_k, theta> + (alpha / 2)||theta - theta^{t-1}||^2; the server keeps
h and corrects the average with it. The model average is Algorithm 1's unweighted
(1 / |P_t|) sum by default (`weighting='uniform'`); 'num_examples' weights it by examples.

FedDyn: federated learning based on dynamic regularization (Acar et al., ICLR 2021).

Source: the paper's Algorithm 1, as recalled (its text was not available in this environment);
a FedASMU baseline (FedASMU, Sec. 5, baselines: "dynamic regularization"; FedASMU states
no rule or value for it).

Server state: the model theta^{t-1} and h^{t-1} (h^0 = 0). Each client k keeps the gradient
state grad L_k(theta_k^{t-1}) (0 before its first round). In round t every sampled client
k in P_t:

  theta_k^t = argmin_theta L_k(theta) - <grad L_k(theta_k^{t-1}), theta>
                         + (alpha / 2) ||theta - theta^{t-1}||^2           (client objective)
  grad L_k(theta_k^t) = grad L_k(theta_k^{t-1}) - alpha (theta_k^t - theta^{t-1})  (state)

and the server sets

  h^t = h^{t-1} - alpha (1 / m) sum_{k in P_t} (theta_k^t - theta^{t-1})      (server h)
  theta^t = (1 / |P_t|) sum_{k in P_t} theta_k^t - (1 / alpha) h^t            (server model)

with m the number of clients of the federation. The argmin is approximated by the task's local
optimizer steps on that objective (the paper's experiments do the same with SGD). Since both
states start at 0 and change by the same deltas, h^t = (1 / m) sum_k grad L_k(theta_k^t) at all
times (tests check this invariant across rounds).

Choices where the paper is silent, or where this code base differs (settings: `algorithm.kwargs`
of feddyn, `FedDynSettings`):
  * Average over P_t (`algorithm.kwargs.weighting`): 'uniform' is the server model's 1 / |P_t| (the
    shipped config); 'num_examples' weights each theta_k^t by its client's examples. The h
    update always sums the deltas unweighted over 1 / m, so the invariant above holds either
    way.
  * Client state: held host side per client (`FedDynScheduler.client_gradients`, only for
    clients that have trained) and sent with each task as its `task_inputs`; it is updated when
    the client's update is aggregated. An update discarded after a deadline (a straggler) leaves
    both states untouched, as if the client had not trained.
  * Models with state (BatchNorm running statistics) are rejected: the regulariser and h are
    defined on the trainable parameters only (use `model.kwargs.norm='group'`; FedDyn's code uses
    GroupNorm as well).
  * The authors' code (as recalled) scales alpha per client by its relative data size; this is
    Algorithm 1's single alpha.
Default alpha = 0.01 (the paper tunes alpha over {0.1, 0.01, 0.001}; 0.01 is, as recalled, the
value of the authors' example scripts; FedASMU reports no value).

Limits: with g_k = 0 (a client's first round) the client objective is FedProx's with
mu = alpha. As alpha -> 0 the client objective tends to plain local training (g_k is
O(alpha) too), but FedDyn does not tend to FedAvg: the server's correction -h^t / alpha =
(1 / m) sum of every aggregated delta so far does not depend on alpha.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.groups import (
  DeadlineSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.client.local_update import ClientUpdate, local_update
from fedsim_jax.client.objective import Term, TermInputs, cross_entropy, squared_distance
from fedsim_jax.models import Model, Params
from fedsim_jax.models.zoo import Norm
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch, weighted_mean_delta
from fedsim_jax.settings import ConfigError, one_of, positive, setting
from fedsim_jax.strategy import client_table
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.synchronous import (
  WEIGHTINGS,
  AroundRounds,
  ClosingRound,
  SynchronousScheduler,
)
from fedsim_jax.tree import row


class FedDynInputs(NamedTuple):
  """A FedDyn task's `task_inputs`: the client's gradient state grad L_k(theta_k^{t-1})
  (the structure of the params; zeros before the client's first round)."""

  gradient: Params


@flax.struct.dataclass
class FedDynState:
  """Server state of Algorithm 1: the model theta and h."""

  params: Params
  h: Params


def _check_alpha(alpha: float) -> None:
  if not alpha > 0:
    raise ValueError(f'algorithm.kwargs.alpha={alpha}; allowed: a number > 0')


@dataclasses.dataclass(frozen=True)
class DynamicRegulariser(Term):
  """FedDyn's dynamic regulariser -<g_k, theta> + (alpha / 2) ||theta - theta^{t-1}||^2
  (Algorithm 1, client objective), added to the task loss in that order: g_k is
  `FedDynInputs.gradient` (the task's `task_inputs`), theta^{t-1} the downloaded model."""

  alpha: float

  def __post_init__(self):
    _check_alpha(self.alpha)

  @property
  def needs_anchor(self) -> bool:
    return True

  @property
  def reads_task_inputs(self) -> bool:
    return True

  def check(self, model: Model) -> None:
    if model.has_state:
      raise ValueError(
        f'model {model.name!r} has state (BatchNorm); feddyn allows models '
        "without state (e.g. model.kwargs.norm='group')"
      )

  def __call__(self, inputs: TermInputs) -> tuple[jax.Array, jax.Array]:
    linear = jnp.asarray(
      sum(
        jnp.vdot(g, p)
        for g, p in zip(
          jax.tree_util.tree_leaves(inputs.task_inputs.gradient),
          jax.tree_util.tree_leaves(inputs.params),
        )
      )
    )
    return -linear, 0.5 * self.alpha * squared_distance(inputs.params, inputs.anchor)


def dynamic_regulariser(alpha: float) -> DynamicRegulariser:
  return DynamicRegulariser(alpha)


def feddyn_client_update(
  model: Model, optimizer: optax.GradientTransformation, batch_size: int, *, alpha: float
) -> ClientUpdate:
  """FedDyn's local objective L_k(theta) - <g_k, theta> + (alpha / 2) ||theta - theta^{t-1}||^2
  minimised by `optimizer` steps (`local_update` on `cross_entropy()` and
  `dynamic_regulariser(alpha)`)."""
  return local_update(model, optimizer, batch_size, (cross_entropy(), dynamic_regulariser(alpha)))


def updated_client_gradient(gradient: Params, delta: Params, alpha: float) -> Params:
  """The client-state update after local training:
  grad L_k(theta_k^t) = grad L_k(theta_k^{t-1}) - alpha delta, delta = theta_k^t - theta^{t-1}."""
  return jax.tree_util.tree_map(lambda g, d: g - alpha * d, gradient, delta)


_updated_client_gradient = jax.jit(updated_client_gradient, static_argnames=('alpha',))


def feddyn_aggregator(alpha: float, num_clients: int) -> Aggregator:
  """The server of Algorithm 1 (h and model updates) over one round's updates.

  `updates.weights` weight the model average (equal weights: 1 / |P_t|); the h update sums the
  real rows (weight > 0) unweighted, over `num_clients` (m).
  """
  _check_alpha(alpha)
  if num_clients < 1:
    raise ValueError(f'num_clients={num_clients}; allowed: >= 1')

  def init(params: Params) -> FedDynState:
    return FedDynState(params=params, h=jax.tree_util.tree_map(jnp.zeros_like, params))

  def apply(state: FedDynState, updates: UpdateBatch) -> FedDynState:
    mean_delta = weighted_mean_delta(updates)
    delta_sum = jax.tree_util.tree_map(
      lambda d: jnp.tensordot(updates.mask, d, axes=1), updates.deltas
    )
    h = jax.tree_util.tree_map(lambda h, s: h - alpha / num_clients * s, state.h, delta_sum)
    params = jax.tree_util.tree_map(lambda p, d, h: p + d - h / alpha, state.params, mean_delta, h)
    return FedDynState(params=params, h=h)

  return Aggregator(init=init, apply=apply)


class FedDynScheduler(AroundRounds):
  """Synchronous rounds (Algorithm 1's sampling of P_t) plus the clients' gradient states.

  Args:
    alpha: FedDyn's alpha.
    cohort_size, local_work, weighting, num_selected, deadline, min_responses: as in
      `SynchronousScheduler`.

  Attributes:
    client_gradients: every client's grad L_k(theta_k) after its last aggregated round (zeros
      before its first), a `ClientTable` created at the run's start (None before).
  """

  def __init__(
    self,
    alpha: float,
    cohort_size: int,
    local_work: LocalWork,
    weighting: str = 'uniform',
    *,
    num_selected: int | None = None,
    deadline: float | None = None,
    min_responses: int = 1,
  ):
    _check_alpha(alpha)
    self.alpha = float(alpha)
    self.client_gradients: client_table.ClientTable | None = None
    self.rounds = SynchronousScheduler(
      cohort_size,
      local_work,
      weighting,
      num_selected=num_selected,
      deadline=deadline,
      min_responses=min_responses,
      task_inputs=self._task_inputs,
      round_closing=self._round_closing,
    )

  def start(self, sim: SchedulerContext) -> None:
    self.client_gradients = client_table.create(sim.params, sim.num_clients)
    super().start(sim)

  def _task_inputs(self, sim: SchedulerContext, client: int) -> FedDynInputs:
    assert self.client_gradients is not None
    return FedDynInputs(gradient=client_table.read(self.client_gradients, client))

  def _round_closing(self, sim: SchedulerContext, closing: ClosingRound) -> None:
    # The client-state update for the round's aggregated clients (the server's h and model
    # updates follow in the aggregator).
    assert self.client_gradients is not None
    batch = sim.updates(closing.aggregated, closing.weights)
    for index, handle in enumerate(closing.aggregated):
      gradient = client_table.read(self.client_gradients, handle.client_id)
      self.client_gradients = client_table.write(
        self.client_gradients,
        handle.client_id,
        _updated_client_gradient(gradient, row(batch.deltas, index), alpha=self.alpha),
      )


@dataclasses.dataclass(frozen=True)
class FedDynSettings(DeadlineSettings, LocalWorkSettings, ServerEmaSettings):
  weighting: str = setting(
    'uniform', one_of(WEIGHTINGS), 'weights of the model average (Alg. 1: 1 / |P_t|)'
  )
  alpha: float = setting(0.01, positive(), 'alpha (the paper tunes over {0.1, 0.01, 0.001})')

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.model_norm == Norm.BATCH:
      raise ConfigError(
        "model.kwargs.norm='batch' is invalid with algorithm.name='feddyn' (its regulariser covers "
        "trainable weights only); allowed values: 'group', 'none'"
      )

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    return [HeldModels('data.num_clients', num_clients, "each client's gradient state")]


@register('feddyn', FedDynSettings)
def feddyn_algorithm(settings: FedDynSettings, context: BuildContext) -> Algorithm:
  scheduler = FedDynScheduler(
    settings.alpha,
    settings.cohort_size,
    settings.local_work(context),
    settings.weighting,
    num_selected=settings.num_selected,
    deadline=settings.deadline,
    min_responses=settings.min_responses,
  )
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(feddyn_aggregator(settings.alpha, context.num_clients)),
    make_client_update=functools.partial(
      local_update, objective=(cross_entropy(), dynamic_regulariser(settings.alpha))
    ),
  )
