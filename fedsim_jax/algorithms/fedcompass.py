"""FedCompass (Li et al. 2024) and its +M / +N variants: the Compass scheduler (arrival groups,
per-client local steps Q in [q_min, q_max] from estimated speeds, latest arrival time factor
lambda; Algorithms 1-2) and the buffered, staleness-scaled group update (Algorithm 3). +M adds
server momentum, +N averages each group's deltas normalised."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import optax

from fedsim_jax.algorithms.base import Algorithm, BuildContext, RunFacts, register
from fedsim_jax.algorithms.groups import ClientTermsSettings, HeldModels, ServerEmaSettings
from fedsim_jax.settings import ConfigError, boolean, decay, number, one_of, positive, setting
from fedsim_jax.strategy.fedcompass import (
  CREATE_RULES,
  SPEED_ESTIMATORS,
  CompassScheduler,
  compass_aggregator,
)
from fedsim_jax.strategy.reducers import Reducer, fednova_mean, weighted_sum
from fedsim_jax.strategy.synchronous import WEIGHTINGS


@dataclasses.dataclass(frozen=True)
class CompassSettings(ClientTermsSettings, ServerEmaSettings):
  q_min: int = setting(40, positive(integer=True), 'Q_min: fewest local steps of a task')
  q_max: int = setting(200, positive(integer=True), 'Q_max: most local steps of a task')
  latest_time_factor: float = setting(1.2, number(minimum=1), 'lambda')
  weighting: str = setting('num_examples', one_of(WEIGHTINGS), 'p_k')
  speed_estimator: str = setting('last', one_of(SPEED_ESTIMATORS), "or 'ema' (public code)")
  speed_momentum: float = setting(0.9, decay(), "'ema': the newest measurement's weight")
  create_rule: str = setting('paper', one_of(CREATE_RULES), "CREATEGROUP as printed, or 'code'")
  alpha: float = setting(0.9, number(above=0, maximum=1), 'alpha of st(u) = alpha (u + 1)^-a')
  staleness_a: float = setting(0.5, positive(allow_zero=True), 'a of st(u)')
  server_momentum: float = setting(0.9, decay(), 'fedcompass_m')
  first_arrival_momentum: bool = setting(
    False,
    boolean,
    "fedcompass_m: also apply momentum to a client's first (ungrouped) update; the paper and "
    'its code apply it in group aggregation only',
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.q_min > self.q_max:
      raise ConfigError(
        f'{prefix}q_min={self.q_min} is invalid; allowed values: 1..{prefix}q_max ({self.q_max})'
      )

  def check_run(self, name: str, run: RunFacts, prefix: str) -> None:
    super().check_run(name, run, prefix)
    if run.local_steps is not None or run.local_epochs is not None:
      raise ConfigError(
        'client.local_steps / client.local_epochs: FedCompass chooses local steps itself '
        f'({prefix}q_min..q_max); allowed values: None'
      )

  def tasks_in_flight(self, num_clients: int) -> HeldModels | None:
    return HeldModels('data.num_clients', num_clients, 'client tasks (every client trains)')


# Each variant's server optimizer and reducer of the staleness-scaled buffers (by algorithm name).
VARIANTS: dict[str, Callable[[CompassSettings], tuple[optax.GradientTransformation, Reducer]]] = {
  # Algorithm 3 line 4: the buffers' sum st(u_k) p_k Delta_k, applied as it is.
  'fedcompass': lambda settings: (optax.sgd(1.0), weighted_sum()),
  # +M: server momentum on that sum (m <- beta m + buffers; w <- w - m).
  'fedcompass_m': lambda settings: (
    optax.sgd(1.0, momentum=settings.server_momentum),
    weighted_sum(),
  ),
  # +N: FedNova-style normalized averaging (each term over its Q_k, times sum p Q / sum p).
  'fedcompass_n': lambda settings: (optax.sgd(1.0), fednova_mean()),
}


def fedcompass_algorithm(settings: CompassSettings, context: BuildContext) -> Algorithm:
  scheduler = CompassScheduler(
    settings.q_min,
    settings.q_max,
    settings.latest_time_factor,
    settings.weighting,
    settings.speed_estimator,
    settings.speed_momentum,
    settings.create_rule,
  )
  optimizer, reducer = VARIANTS[context.name](settings)
  aggregator = compass_aggregator(
    settings.alpha,
    settings.staleness_a,
    optimizer,
    reducer,
    optimize_first_arrivals=settings.first_arrival_momentum,
  )
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(aggregator),
    make_client_update=settings.make_client_update(),
  )


for _name in VARIANTS:
  register(_name, CompassSettings)(fedcompass_algorithm)
