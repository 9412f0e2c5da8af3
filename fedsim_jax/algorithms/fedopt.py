"""FedAvg and the FedOpt family (McMahan et al. 2017; Hsu et al. 2019; Reddi et al. 2021),
and FedProx (Li et al. 2020, Algorithm 2).

Synchronous rounds of B clients (optionally with over-selection, a deadline or time-limited
clients) and the FedOpt server update: the round's weighted mean delta is the pseudo-gradient
of a server optimizer, chosen by the algorithm's name. FedProx is FedAvg with every client
minimising F_k(w) + (mu / 2)||w - w^t||^2, mu = `proximal_strength` (mu = 0 is FedAvg); its
variable local work for stragglers (gamma-inexact solutions) is `time_limit`.
"""

from __future__ import annotations

import dataclasses

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  ClientTermsSettings,
  DeadlineSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  ServerOptimizerSettings,
  synchronous_scheduler,
)
from fedsim_jax.settings import positive, setting
from fedsim_jax.strategy.server_step import server_update

SERVER_OPTIMIZER_OF = {
  'fedavg': 'sgd',
  'fedprox': 'sgd',
  'fedavgm': 'momentum',
  'fedadam': 'adam',
  'fedyogi': 'yogi',
  'fedadagrad': 'adagrad',
}


@dataclasses.dataclass(frozen=True)
class FedOptSettings(
  DeadlineSettings,
  LocalWorkSettings,
  ServerOptimizerSettings,
  ClientTermsSettings,
  ServerEmaSettings,
):
  """Settings of fedavg, fedavgm and fedprox."""


ADAPTIVE = ('fedadam', 'fedyogi', 'fedadagrad')


@dataclasses.dataclass(frozen=True)
class AdaptiveFedOptSettings(FedOptSettings):
  """Settings of fedadam, fedyogi and fedadagrad: FedAvg's server learning rate of 1 makes
  adaptive server steps of size ~1 per coordinate, which destroys the model; Reddi et al. tune
  eta_g over 10^-3..10^0 and their best image-task values lie near 10^-2."""

  server_learning_rate: float = setting(0.01, positive(), 'eta_g (Reddi et al.: tuned ~10^-2)')


def fedopt_algorithm(settings: FedOptSettings, context: BuildContext) -> Algorithm:
  optimizer = settings.make_server_optimizer(SERVER_OPTIMIZER_OF[context.name])
  return Algorithm(
    scheduler=synchronous_scheduler(settings, context),
    aggregator=settings.with_ema(server_update(optimizer)),
    make_client_update=settings.make_client_update(),
  )


for _name in SERVER_OPTIMIZER_OF:
  register(_name, AdaptiveFedOptSettings if _name in ADAPTIVE else FedOptSettings)(fedopt_algorithm)
