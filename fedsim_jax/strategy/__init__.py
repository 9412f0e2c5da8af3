"""Strategy layer: schedulers (host-side policy) and aggregators (jitted server updates)."""

from fedsim_jax.strategy.algorithms import ALGORITHMS, Algorithm, BuildContext, get_algorithm
from fedsim_jax.strategy.asynchronous import AsynchronousScheduler
from fedsim_jax.strategy.ema import EMAState, with_ema
from fedsim_jax.strategy.fedasync import FEDASYNC_FORMS, MixingState, fedasync
from fedsim_jax.strategy.fedcompass import (ArrivalGroup, ClientRecord, CompassScheduler,
                                            compass_aggregator)
from fedsim_jax.strategy.fedat import (TieredScheduler, TierState, cross_tier_weights,
                                       fedat_aggregator, speed_tiers)
from fedsim_jax.strategy.fedopt import NORMALIZATIONS, ServerOptState, average_delta, fedopt
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.server_optimizers import (ADAPTIVE_FORMS, SERVER_OPTIMIZERS,
                                                  reddi_adaptive, server_optimizer)
from fedsim_jax.strategy.staleness import STALENESS_FUNCTIONS, make_staleness
from fedsim_jax.strategy.synchronous import WEIGHTINGS, SynchronousScheduler

__all__ = [
    'ALGORITHMS', 'Algorithm', 'BuildContext', 'get_algorithm', 'AsynchronousScheduler',
    'EMAState', 'with_ema', 'FEDASYNC_FORMS', 'MixingState', 'fedasync', 'ArrivalGroup',
    'ClientRecord', 'CompassScheduler', 'compass_aggregator', 'TieredScheduler', 'TierState',
    'cross_tier_weights', 'fedat_aggregator', 'speed_tiers', 'NORMALIZATIONS', 'ServerOptState',
    'average_delta', 'fedopt', 'LocalWork', 'ADAPTIVE_FORMS', 'SERVER_OPTIMIZERS',
    'reddi_adaptive', 'server_optimizer', 'STALENESS_FUNCTIONS', 'make_staleness', 'WEIGHTINGS',
    'SynchronousScheduler'
]
