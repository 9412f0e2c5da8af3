"""FedBuff (Nguyen et al. 2022): buffers of K asynchronous updates, optionally scaled by
s(staleness), normalised and applied by a server optimizer."""

from __future__ import annotations

import dataclasses

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
from fedsim_jax.strategy.fedopt import NORMALIZATIONS, fedopt
from fedsim_jax.strategy.server_optimizers import SERVER_OPTIMIZERS


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
  # Divide the buffer's sum_k p_k s_k delta_k by sum_k p_k ('weights': the weighted mean; K
  # under uniform weighting), by K ('count': needs uniform weighting) or by 1 ('sum',
  # FedCompass's FedBuff with example shares p_k = n_k / n); 'steps' is FedNova-style.
  normalization: str = setting(
    'weights', one_of(NORMALIZATIONS), 'what the buffer sum is divided by'
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.normalization == 'count' and self.weighting == 'num_examples':
      # 'count' divides sum_k p_k delta_k by K; with example shares p_k = n_k / n that shrinks
      # every server step by about 1 / num_clients.
      raise ConfigError(
        f"{prefix}normalization='count' (FedBuff's mean over K) needs {prefix}weighting="
        "'uniform'; allowed with weighting='num_examples': normalization='weights' "
        "(example-weighted mean) or 'sum'"
      )


@register('fedbuff', FedBuffSettings)
def fedbuff_algorithm(settings: FedBuffSettings, context: BuildContext) -> Algorithm:
  staleness = None if settings.staleness == 'constant' else settings.staleness_function()
  aggregator = fedopt(
    settings.make_server_optimizer(settings.server_optimizer),
    normalization=settings.normalization,
    staleness=staleness,
  )
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, settings.buffer_size),
    aggregator=settings.with_ema(aggregator),
    make_client_update=settings.make_client_update(),
  )
