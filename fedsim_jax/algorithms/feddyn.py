"""FedDyn (Acar et al. 2021, Algorithm 1): synchronous rounds; clients minimise the dynamic
regulariser L_k(theta) - <g_k, theta> + (alpha / 2)||theta - theta^{t-1}||^2; the server keeps
h and corrects the average with it. The model average is Algorithm 1's unweighted
(1 / |P_t|) sum by default (`weighting='uniform'`); 'num_examples' weights it by examples."""

from __future__ import annotations

import dataclasses
import functools

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.groups import (
  DeadlineSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.client import cross_entropy, local_update
from fedsim_jax.settings import ConfigError, one_of, positive, setting
from fedsim_jax.strategy.feddyn import FedDynScheduler, dynamic_regulariser, feddyn_aggregator
from fedsim_jax.strategy.synchronous import WEIGHTINGS


@dataclasses.dataclass(frozen=True)
class FedDynSettings(DeadlineSettings, LocalWorkSettings, ServerEmaSettings):
  weighting: str = setting(
    'uniform', one_of(WEIGHTINGS), 'weights of the model average (Alg. 1: 1 / |P_t|)'
  )
  alpha: float = setting(0.01, positive(), 'alpha (the paper tunes over {0.1, 0.01, 0.001})')

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.model_norm == 'batch':
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
