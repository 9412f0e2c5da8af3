"""CC-FedAvg (Zhang et al.) and the skipping strategies it is compared with.

Synchronous rounds in which each selected client trains with probability p_i (its compute
budget) or skips. `ccfedavg`: a skipping client resends its last delta (Strategy 3);
`ccfedavg_c` switches to Strategy 2 after `switch_round`; `ccfedavg_strategy1` ignores skipping
clients, `ccfedavg_strategy2` resends their last local model; `fedavg_dropout` trains until the
quota p_i T is used up; `fednova_budget` lets every selected client train ceil(p_i K) steps
and averages FedNova-style (Sec. VI-D). The history lives on the clients (Alg. 1) or on the
server (Alg. 2, `storage='server'`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.ccfedavg import budgets
from fedsim_jax.algorithms.ccfedavg.scheduler import (
  STORAGES,
  BudgetedScheduler,
  Estimator,
  Storage,
  ccfedavg_server_aggregator,
)
from fedsim_jax.algorithms.groups import (
  ClientTermsSettings,
  CohortSizeSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.settings import ConfigError, boolean, number, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy.reducers import fednova_mean
from fedsim_jax.strategy.server_step import server_update


class BudgetRule(StrEnum):
  """How the budgets p_i are drawn (`algorithm.kwargs.budget_rule`)."""

  BETA = 'beta'
  TWO_GROUP = 'two_group'
  UNIFORM = 'uniform'


class BudgetSchedule(StrEnum):
  """When a selected client trains (`algorithm.kwargs.budget_schedule`)."""

  AD_HOC = 'ad_hoc'
  ROUND_ROBIN = 'round_robin'
  SYNCHRONISED = 'synchronised'


BUDGET_RULES = tuple(rule.value for rule in BudgetRule)
BUDGET_SCHEDULES = tuple(schedule.value for schedule in BudgetSchedule)
# Variant -> what its skipping clients contribute; None: FedAvg (dropout), whose clients train
# until their quota p_i T is used up and are ignored after.
ESTIMATOR_OF: dict[str, Estimator | None] = {
  'ccfedavg': Estimator.LAST_DELTA,
  'ccfedavg_c': Estimator.SWITCH,
  'ccfedavg_strategy1': Estimator.IGNORE,
  'ccfedavg_strategy2': Estimator.LAST_MODEL,
  'fedavg_dropout': None,
}


class FednovaRounding(StrEnum):
  """How fednova_budget rounds p_i K (`algorithm.kwargs.fednova_rounding`)."""

  CEIL = 'ceil'
  FLOOR = 'floor'


FEDNOVA_ROUNDINGS = tuple(rounding.value for rounding in FednovaRounding)


@dataclasses.dataclass(frozen=True)
class BudgetSettings(CohortSizeSettings, LocalWorkSettings, ClientTermsSettings, ServerEmaSettings):
  budget_rule: str = setting(
    'beta', one_of(BUDGET_RULES), "p_i = 2^-floor(beta i / N), 'two_group' or 'uniform'"
  )
  budget_beta: int = setting(4, positive(integer=True), 'beta: budget levels')
  budget_r: float = setting(0.5, number(minimum=0, maximum=1), 'two_group: constrained share')
  budget_w: int = setting(2, positive(integer=True), 'two_group / uniform: p = 1/W')
  random_assignment: bool = setting(False, boolean, 'levels to random clients (cross-device)')
  budget_schedule: str = setting('ad_hoc', one_of(BUDGET_SCHEDULES), 'when a client trains')
  first_selection_trains: bool = setting(True, boolean, 'a first selection always trains')
  phase: str = setting('zero', one_of(('zero', 'random')), 'round_robin phase')
  switch_round: int = setting(
    100, positive(integer=True, allow_zero=True), 'ccfedavg_c: tau, Strategy 3 before, 2 after'
  )
  storage: str = setting('client', one_of(STORAGES), 'where histories live')
  fednova_rounding: str = setting(
    'ceil', one_of(FEDNOVA_ROUNDINGS), 'fednova_budget: p_i K steps rounded up, or floor'
  )

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if name == 'fedavg_dropout' and run.num_rounds is None:
      raise ConfigError(
        'run.num_rounds: fedavg_dropout needs it (a client trains for p_i x num_rounds rounds); '
        'allowed values: an integer >= 1'
      )
    if name == 'fednova_budget' and run.local_steps is None:
      raise ConfigError(
        'client.local_steps=None is invalid with fednova_budget (K); allowed values: an '
        'integer >= 1'
      )

  def client_budgets(self, num_clients: int, seed: int) -> np.ndarray:
    """p_i of every client (Sec. III-B and VI), from its own stream of the run seed."""
    rng = np.random.default_rng([seed, 0xB0D6E7])
    if self.budget_rule == BudgetRule.BETA:
      return budgets.beta_levels(
        num_clients, self.budget_beta, rng if self.random_assignment else None
      )
    if self.budget_rule == BudgetRule.TWO_GROUP:
      return budgets.two_group_budgets(
        num_clients, self.budget_r, self.budget_w, rng if self.random_assignment else None
      )
    return budgets.uniform_budgets(num_clients, self.budget_w)

  def client_tables(self, num_clients: int) -> list[HeldModels]:
    per_client = 2 if self.storage == Storage.CLIENT else 1  # last delta (and model) per client
    return [HeldModels('data.num_clients', per_client * num_clients, "clients' last updates")]


def budgeted_algorithm(settings: BudgetSettings, context: BuildContext) -> Algorithm:
  estimator = ESTIMATOR_OF[context.name]
  p = settings.client_budgets(context.num_clients, context.seed)
  rng = np.random.default_rng([context.seed, 0x5C4ED])
  schedule: budgets.TrainingSchedule
  if estimator is None:  # FedAvg (dropout): train until the quota p_i T is used up
    assert context.run.num_rounds is not None  # check_run
    schedule = budgets.QuotaSchedule(p, context.run.num_rounds)
    estimator = Estimator.IGNORE
  else:
    schedule_settings: dict[str, object] = {
      'first_selection_trains': settings.first_selection_trains
    }
    if settings.budget_schedule == BudgetSchedule.ROUND_ROBIN:
      schedule_settings['phase'] = settings.phase
    schedule = budgets.make_schedule(settings.budget_schedule, p, rng, **schedule_settings)
  scheduler = BudgetedScheduler(
    settings.cohort_size,
    settings.local_work(context),
    schedule,
    estimator=estimator,
    switch_round=settings.switch_round,
    storage=settings.storage,
  )
  aggregator = (
    ccfedavg_server_aggregator(context.num_clients)
    if settings.storage == Storage.SERVER
    else server_update(optax.sgd(1.0))
  )
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(aggregator),
    make_client_update=settings.make_client_update(),
  )


for _name in ESTIMATOR_OF:
  register(_name, BudgetSettings)(budgeted_algorithm)


class _EverySelected:
  """FedNova's schedule: every selected client trains (with fewer steps)."""

  def trains(self, client: int, round_index: int, has_trained_before: bool) -> bool:
    del client, round_index, has_trained_before
    return True


@register('fednova_budget', BudgetSettings)
def fednova_budget_algorithm(settings: BudgetSettings, context: BuildContext) -> Algorithm:
  """FedNova as CC-FedAvg's 'reduce local iterations' baseline (Sec. VI-D): every selected
  client trains ceil(p_i K) steps (`fednova_rounding`; Sec. VI-D's example: "when K = 10, the
  clients with p_i = 1/8 would perform local iterations at most 2 times", a ceiling) and the
  server averages FedNova-style (normalised by each client's steps, times the mean step
  count)."""
  p = settings.client_budgets(context.num_clients, context.seed)
  # (1e-9: exact products such as 1/8 x 16 stay whole under float error)
  rounding = np.ceil(p * context.run.local_steps - 1e-9)
  if settings.fednova_rounding == FednovaRounding.FLOOR:
    rounding = np.floor(p * context.run.local_steps + 1e-9)
  per_client = np.maximum(1, rounding).astype(np.int64)
  scheduler = BudgetedScheduler(
    settings.cohort_size,
    settings.local_work(context),
    _EverySelected(),
    steps_per_client=per_client,
  )
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(server_update(optax.sgd(1.0), fednova_mean())),
    make_client_update=settings.make_client_update(),
  )
