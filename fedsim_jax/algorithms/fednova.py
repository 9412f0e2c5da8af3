"""FedNova (Wang, Liu, Liang, Joshi, Poor 2020, "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization"): synchronous rounds whose server normalises each
client's update by the amount of local work behind it, so that clients running more local steps
no longer pull the global objective towards their own.

A client i that ran tau_i local steps sends Delta_i = -eta sum_j a_{i,j} g_{i,j}; FedNova
averages the normalised directions d_i = Delta_i / ||a_i||_1 and rescales by the effective
number of steps:

    x^{t+1} = x^t + tau_eff sum_i p_i Delta_i / ||a_i||_1,    tau_eff = sum_i p_i ||a_i||_1

(Sec. 4, with the paper's default tau_eff). ||a_i||_1 depends on the local solver: tau_i for
SGD; [tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho) for SGD with momentum rho
(`client.optimizer='momentum'`, `client.momentum`); [1 - (1 - eta mu)^tau] / (eta mu) for
FedProx's proximal term mu (`proximal_strength`). Heterogeneous tau_i come from the local work:
local epochs over clients of different sizes (`client.local_epochs`), or the time-limited
steps of slow clients (`time_limit`). p_i are the clients' data shares over the round
(`weighting='num_examples'`, the default), or equal (`'uniform'`).

Refused with one line: Adam clients and momentum together with a proximal term (no closed
form in the paper). With every tau_i equal and plain SGD, FedNova is FedAvg
(tests/algorithms/test_fednova_values.py).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.groups import (
  ClientTermsSettings,
  DeadlineSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  ServerOptimizerSettings,
  synchronous_scheduler,
)
from fedsim_jax.settings import ConfigError
from fedsim_jax.strategy.reducers import LinearReducer, fednova_mean, fednova_norm
from fedsim_jax.strategy.server_step import server_update


@dataclasses.dataclass(frozen=True)
class FedNovaSettings(
  DeadlineSettings,
  LocalWorkSettings,
  ServerOptimizerSettings,
  ClientTermsSettings,
  ServerEmaSettings,
):
  """Settings of fednova."""

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.client_optimizer == 'adam':
      raise ConfigError(
        "client.optimizer='adam' is invalid with algorithm.name='fednova' (FedNova normalises "
        "SGD, momentum and proximal solvers); allowed values: 'sgd', 'momentum'"
      )
    if run.client_optimizer == 'momentum' and self.proximal_strength:
      raise ConfigError(
        f'{prefix}proximal_strength={self.proximal_strength!r} is invalid with '
        "client.optimizer='momentum' under fednova (no closed form for both); allowed: 0, or "
        "client.optimizer='sgd'"
      )


def local_solver_norm(settings: FedNovaSettings, run: RunFacts):
  """||a_i||_1 as a function of the local steps for the run's client solver."""
  momentum = run.client_momentum if run.client_optimizer == 'momentum' else 0.0
  return fednova_norm(momentum, settings.proximal_strength, run.client_learning_rate)


def fednova_average(norm) -> LinearReducer:
  """tau_eff sum_i p_i Delta_i / ||a_i||_1 with p_i the round's weights over their sum (the
  shared `fednova_mean` is a normalised sum, for weights that already sum to 1)."""
  base = fednova_mean(norm)
  return LinearReducer(base.numerators, lambda updates: jnp.maximum(updates.weights.sum(), 1e-12))


@register('fednova', FedNovaSettings)
def fednova_algorithm(settings: FedNovaSettings, context: BuildContext) -> Algorithm:
  reducer = fednova_average(local_solver_norm(settings, context.run))
  optimizer = settings.make_server_optimizer('sgd')
  return Algorithm(
    scheduler=synchronous_scheduler(settings, context),
    aggregator=settings.with_ema(server_update(optimizer, reducer)),
    make_client_update=settings.make_client_update(),
  )
