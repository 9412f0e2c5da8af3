"""Strategy layer: schedulers (host-side policy) and aggregators (jitted server updates)."""

from fedsim_jax.strategy.asynchronous import AsynchronousScheduler
from fedsim_jax.strategy.ema import EMAState, with_ema
from fedsim_jax.strategy.fare_dust import DeltaHistory, FareDustScheduler, fare_dust_client_update
from fedsim_jax.strategy.feast_msg import (
  FeastScheduler,
  FeastState,
  auxiliary_update,
  feast_aggregator,
)
from fedsim_jax.strategy.fedasmu import (
  FedasmuScheduler,
  FetchInputs,
  fedasmu_aggregator,
  fedasmu_client_update,
)
from fedsim_jax.strategy.fedasync import MixingState, fedasync, fedasync_delta
from fedsim_jax.strategy.fedat import (
  TieredScheduler,
  TierState,
  cross_tier_weights,
  fedat_aggregator,
  speed_tiers,
)
from fedsim_jax.strategy.fedcompass import (
  ArrivalGroup,
  ClientRecord,
  CompassScheduler,
  compass_aggregator,
)
from fedsim_jax.strategy.fedopt import ServerOptState, server_update
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.periodic_trigger import TRIGGER_TIMINGS, PeriodicTriggerScheduler
from fedsim_jax.strategy.reducers import (
  Reducer,
  count_mean,
  fednova_mean,
  staleness_scaled,
  weighted_mean,
  weighted_sum,
)
from fedsim_jax.strategy.server_optimizers import (
  ADAPTIVE_FORMS,
  SERVER_OPTIMIZERS,
  reddi_adaptive,
  server_optimizer,
)
from fedsim_jax.strategy.staleness import STALENESS_FUNCTIONS, make_staleness
from fedsim_jax.strategy.synchronous import WEIGHTINGS, ClosingRound, SynchronousScheduler

__all__ = [
  'AsynchronousScheduler',
  'EMAState',
  'with_ema',
  'DeltaHistory',
  'FareDustScheduler',
  'fare_dust_client_update',
  'FeastScheduler',
  'FeastState',
  'auxiliary_update',
  'feast_aggregator',
  'MixingState',
  'fedasync',
  'fedasync_delta',
  'ArrivalGroup',
  'ClientRecord',
  'CompassScheduler',
  'compass_aggregator',
  'TieredScheduler',
  'TierState',
  'cross_tier_weights',
  'fedat_aggregator',
  'speed_tiers',
  'ServerOptState',
  'server_update',
  'Reducer',
  'count_mean',
  'fednova_mean',
  'staleness_scaled',
  'weighted_mean',
  'weighted_sum',
  'LocalWork',
  'ADAPTIVE_FORMS',
  'SERVER_OPTIMIZERS',
  'reddi_adaptive',
  'server_optimizer',
  'STALENESS_FUNCTIONS',
  'make_staleness',
  'WEIGHTINGS',
  'ClosingRound',
  'SynchronousScheduler',
  'FedasmuScheduler',
  'FetchInputs',
  'fedasmu_aggregator',
  'fedasmu_client_update',
  'TRIGGER_TIMINGS',
  'PeriodicTriggerScheduler',
]
