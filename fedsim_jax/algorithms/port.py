"""PORT (Su and Li 2022): buffers of `buffer_size` asynchronous updates weighted by staleness
(B / (tau + B)) and by similarity to the global progress ((cos + 1) / 2)."""

from __future__ import annotations

import dataclasses

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  AsynchronousSettings,
  ClientTermsSettings,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.settings import ConfigError, one_of, positive, setting
from fedsim_jax.strategy.port import SIMILARITY_REFERENCES, port_aggregator


@dataclasses.dataclass(frozen=True)
class PortSettings(AsynchronousSettings, LocalWorkSettings, ClientTermsSettings, ServerEmaSettings):
  buffer_size: int = setting(10, positive(integer=True), 'arrivals per server update')
  similarity_weight: float = setting(1.0, positive(allow_zero=True), 'weight of (cos + 1) / 2')
  staleness_weight: float = setting(1.0, positive(allow_zero=True), 'weight of B / (tau + B)')
  staleness_bound: float = setting(10.0, positive(), 'B')
  similarity_reference: str = setting(
    'last_update', one_of(SIMILARITY_REFERENCES), "w_t - w_{t-1} (PLATO) or 'since_download'"
  )
  similarity_min_staleness: int = setting(
    2, positive(integer=True, allow_zero=True), 'below it cos := 1 (PLATO: staleness > 1)'
  )

  def check(self, prefix: str) -> None:
    super().check(prefix)
    if self.similarity_weight + self.staleness_weight <= 0:
      raise ConfigError(
        f'{prefix}similarity_weight / {prefix}staleness_weight: both are 0; allowed values: '
        'numbers >= 0, not both 0'
      )


@register('port', PortSettings)
def port_algorithm(settings: PortSettings, context: BuildContext) -> Algorithm:
  aggregator = port_aggregator(
    context.client_sizes,
    similarity_weight=settings.similarity_weight,
    staleness_weight=settings.staleness_weight,
    staleness_bound=settings.staleness_bound,
    similarity_reference=settings.similarity_reference,
    similarity_min_staleness=settings.similarity_min_staleness,
  )
  return Algorithm(
    scheduler=settings.asynchronous_scheduler(context, settings.buffer_size),
    aggregator=settings.with_ema(aggregator),
    make_client_update=settings.make_client_update(),
  )
