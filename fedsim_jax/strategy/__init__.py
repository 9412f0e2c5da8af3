"""The strategy kit: what two or more algorithms share. Schedulers (host-side policy:
synchronous rounds, asynchronous slots, the periodic trigger), the server update with its
reducers and server optimizers, staleness functions, the server EMA, local work and per-client
state. Each paper's own scheduler, aggregator and settings live in `fedsim_jax.algorithms`."""

from fedsim_jax.strategy.asynchronous import AsynchronousScheduler
from fedsim_jax.strategy.ema import EMAState, with_ema
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
from fedsim_jax.strategy.server_step import ServerOptState, server_update
from fedsim_jax.strategy.staleness import STALENESS_FUNCTIONS, make_staleness
from fedsim_jax.strategy.synchronous import WEIGHTINGS, ClosingRound, SynchronousScheduler

__all__ = [
  'AsynchronousScheduler',
  'EMAState',
  'with_ema',
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
  'TRIGGER_TIMINGS',
  'PeriodicTriggerScheduler',
]
