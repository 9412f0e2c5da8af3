"""Strategy layer: schedulers (host-side policy) and aggregators (jitted server updates)."""

from fedsim_jax.strategy.fedopt import ServerOptState, fedopt
from fedsim_jax.strategy.server_optimizers import (ADAPTIVE_FORMS, SERVER_OPTIMIZERS,
                                                  reddi_adaptive, server_optimizer)
from fedsim_jax.strategy.synchronous import WEIGHTINGS, LocalWork, SynchronousScheduler
from fedsim_jax.strategy.algorithms import ALGORITHMS, Algorithm, get_algorithm

__all__ = ['ADAPTIVE_FORMS', 'SERVER_OPTIMIZERS', 'ServerOptState', 'fedopt', 'reddi_adaptive',
           'server_optimizer', 'WEIGHTINGS',
           'LocalWork', 'SynchronousScheduler', 'ALGORITHMS', 'Algorithm', 'get_algorithm']
