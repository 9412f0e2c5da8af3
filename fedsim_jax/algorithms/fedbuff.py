"""FedBuff (Nguyen et al. 2022): buffers of K asynchronous updates, optionally scaled by
s(staleness), normalised and applied by a server optimizer."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  ClientTermsSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  ServerOptimizerSettings,
  StalenessSettings,
)
from fedsim_jax.settings import ConfigError, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy.reducers import (
  Reducer,
  count_mean,
  fednova_mean,
  staleness_scaled,
  weighted_mean,
  weighted_sum,
)
from fedsim_jax.strategy.server_optimizers import SERVER_OPTIMIZERS
from fedsim_jax.strategy.server_step import server_update
from fedsim_jax.strategy.staleness import Staleness
from fedsim_jax.strategy.synchronous import Weighting


# The `normalization` setting: what the buffer's sum_k p_k s_k delta_k is divided by. sum_k p_k
# ('weights': the weighted mean; K under uniform weighting), K ('count': needs uniform
# weighting), 1 ('sum', FedCompass's FedBuff with example shares p_k = n_k / n). 'steps' is the
# step-normalised counterpart of 'sum', not of 'weights': a FedNova-normalised *sum*
# tau_eff sum_k p_k s_k delta_k / Q_k, tau_eff = sum_k p_k Q_k / sum_k p_k (Q_k: the update's
# local steps), with nothing dividing by sum_k p_k (`fednova_mean`, as FedCompass+N uses it).
# It is FedNova's average only when the buffer's p_k sum to 1; with uniform weights (p_k = 1) it
# is K times FedNova's average over the buffer (with the SGD server, `server_learning_rate` / K
# gives the average), and with equal Q_k it equals 'sum'. No paper defines FedBuff with it.
class Normalization(StrEnum):
  """What FedBuff's buffer sum is divided by (`algorithm.kwargs.normalization`)."""

  WEIGHTS = 'weights'
  COUNT = 'count'
  SUM = 'sum'
  STEPS = 'steps'


REDUCERS: dict[str, Callable[[], Reducer]] = {
  Normalization.WEIGHTS.value: weighted_mean,
  Normalization.COUNT.value: count_mean,
  Normalization.SUM.value: weighted_sum,
  Normalization.STEPS.value: fednova_mean,
}


@dataclasses.dataclass(frozen=True)
class FedBuffSettings(
  AsynchronousSettings,
  LocalWorkSettings,
  ServerOptimizerSettings,
  StalenessSettings,
  ClientTermsSettings,
  ServerEmaSettings,
):
  buffer_size: int = setting(10, positive(integer=True), 'K: arrivals per server update')
  server_optimizer: str = setting('sgd', one_of(SERVER_OPTIMIZERS), 'the server optimizer')
  normalization: str = setting(
    'weights',
    one_of(REDUCERS),
    "what the buffer sum is divided by: sum p_k, K, 1, or 'steps' (a FedNova-normalised sum)",
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.normalization == Normalization.COUNT and self.weighting == Weighting.NUM_EXAMPLES:
      # 'count' divides sum_k p_k delta_k by K; with example shares p_k = n_k / n that shrinks
      # every server step by about 1 / num_clients.
      raise ConfigError(
        f"{prefix}normalization='count' (FedBuff's mean over K) needs {prefix}weighting="
        "'uniform'; allowed with weighting='num_examples': normalization='weights' "
        "(example-weighted mean) or 'sum'"
      )


@register('fedbuff', FedBuffSettings)
def fedbuff_algorithm(settings: FedBuffSettings, context: BuildContext) -> Algorithm:
  reducer = REDUCERS[settings.normalization]()
  if settings.staleness != Staleness.CONSTANT:  # s(u) = 1 scales nothing
    reducer = staleness_scaled(reducer, settings.staleness_function())
  aggregator = server_update(settings.make_server_optimizer(settings.server_optimizer), reducer)
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, settings.buffer_size),
    aggregator=settings.with_ema(aggregator),
    make_client_update=settings.make_client_update(),
  )
