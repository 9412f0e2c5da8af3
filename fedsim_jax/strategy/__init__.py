"""Strategy layer: schedulers (host-side policy) and aggregators (jitted server updates)."""

from fedsim_jax.strategy.fedopt import SERVER_OPTIMIZERS, ServerOptState, fedopt, server_optimizer
from fedsim_jax.strategy.synchronous import WEIGHTINGS, LocalWork, SynchronousScheduler
from fedsim_jax.strategy.algorithms import ALGORITHMS, Algorithm, get_algorithm

__all__ = ['SERVER_OPTIMIZERS', 'ServerOptState', 'fedopt', 'server_optimizer', 'WEIGHTINGS',
           'LocalWork', 'SynchronousScheduler', 'ALGORITHMS', 'Algorithm', 'get_algorithm']
