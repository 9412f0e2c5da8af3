"""FedSA (Chen, Mao and Ma 2021): buffers of M = `buffer_size` asynchronous updates, each
weighted by its examples and s(staleness); tau_0 is `max_staleness`."""

from __future__ import annotations

import dataclasses

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  ClientTermsSettings,
  LocalWorkSettings,
  ServerEmaSettings,
  StalenessSettings,
)
from fedsim_jax.settings import positive, setting
from fedsim_jax.strategy.fedsa import fedsa_aggregator


@dataclasses.dataclass(frozen=True)
class FedSASettings(
  AsynchronousSettings,
  LocalWorkSettings,
  StalenessSettings,
  ClientTermsSettings,
  ServerEmaSettings,
):
  buffer_size: int = setting(10, positive(integer=True), 'M: arrivals per server update')


@register('fedsa', FedSASettings)
def fedsa_algorithm(settings: FedSASettings, context: BuildContext) -> Algorithm:
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, settings.buffer_size),
    aggregator=settings.with_ema(
      fedsa_aggregator(context.client_sizes, settings.staleness_function())
    ),
    make_client_update=settings.make_client_update(),
  )
