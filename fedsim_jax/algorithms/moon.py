"""MOON (Li, He and Song 2021, Algorithm 1): FedAvg's rounds and server average; each client
adds mu times the model-contrastive loss (positive: the downloaded global model; negative: its
own previous local model) to its objective."""

from __future__ import annotations

import dataclasses
import functools

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  DeadlineSettings,
  HeldModels,
  LocalWorkSettings,
  ServerEmaSettings,
  ServerOptimizerSettings,
)
from fedsim_jax.client import cross_entropy, local_update
from fedsim_jax.settings import one_of, positive, setting
from fedsim_jax.strategy.fedopt import server_update
from fedsim_jax.strategy.moon import REPRESENTATIONS, MoonScheduler, contrastive


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
