"""FedAT (Chai et al. 2021): clients grouped into speed tiers (fastest-to-slowest ratio v per
tier), synchronous rounds inside a tier, asynchronous across tiers with FedAT's cross-tier
weights (reversed update counts)."""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsim_jax.algorithms.base import Algorithm, BuildContext, register
from fedsim_jax.algorithms.groups import (
  ClientTermsSettings,
  CohortSizeSettings,
  LocalWorkSettings,
  ServerEmaSettings,
)
from fedsim_jax.settings import number, setting
from fedsim_jax.strategy.fedat import TieredScheduler, fedat_aggregator, speed_tiers


@dataclasses.dataclass(frozen=True)
class FedATSettings(CohortSizeSettings, LocalWorkSettings, ClientTermsSettings, ServerEmaSettings):
  tier_ratio: float = setting(2.0, number(minimum=1), 'v: slowest / fastest step time in a tier')


@register('fedat', FedATSettings)
def fedat_algorithm(settings: FedATSettings, context: BuildContext) -> Algorithm:
  step_times = np.array([context.latency.expected_step_time(c) for c in range(context.num_clients)])
  tiers = speed_tiers(step_times, settings.tier_ratio)
  scheduler = TieredScheduler(tiers, settings.cohort_size, settings.local_work(context))
  return Algorithm(
    scheduler=scheduler,
    aggregator=settings.with_ema(fedat_aggregator(len(tiers))),
    make_client_update=settings.make_client_update(),
  )
