"""Named algorithms: each is a client update + a scheduler + an aggregator built from a config.

Register a new algorithm by adding a builder `(config) -> Algorithm` to `ALGORITHMS`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import ml_collections

from fedsim_jax.client import sgd_client_update
from fedsim_jax.runtime.updates import Aggregator
from fedsim_jax.strategy.fedopt import fedopt
from fedsim_jax.strategy.server_optimizers import server_optimizer
from fedsim_jax.strategy.synchronous import LocalWork, SynchronousScheduler


class Algorithm(NamedTuple):
  """A runnable algorithm: `make_client_update(model, optimizer, batch_size)`, a scheduler
  object (`runtime.Scheduler`) and an aggregator."""

  name: str
  scheduler: Any
  aggregator: Aggregator
  make_client_update: Callable = sgd_client_update


def local_work_from_config(config: ml_collections.ConfigDict) -> LocalWork:
  return LocalWork(steps=config.client.get('local_steps'),
                   epochs=config.client.get('local_epochs'),
                   batch_size=config.client.batch_size)


def _synchronous_fedopt(optimizer_name: str) -> Callable[[ml_collections.ConfigDict], Algorithm]:
  """FedAvg / FedAvgM / FedAdam / FedYogi / FedAdagrad: synchronous rounds + FedOpt server."""

  def build(config: ml_collections.ConfigDict) -> Algorithm:
    server = config.server
    optimizer = server_optimizer(optimizer_name, server.learning_rate, momentum=server.momentum,
                                 b1=server.b1, b2=server.b2, eps=server.eps,
                                 adaptive_form=server.adaptive_form)
    scheduler = SynchronousScheduler(config.scheduler.cohort_size,
                                     local_work_from_config(config),
                                     config.scheduler.weighting)
    return Algorithm(name=config.algorithm, scheduler=scheduler, aggregator=fedopt(optimizer))

  return build


ALGORITHMS: dict[str, Callable[[ml_collections.ConfigDict], Algorithm]] = {
    'fedavg': _synchronous_fedopt('sgd'),
    'fedavgm': _synchronous_fedopt('momentum'),
    'fedadam': _synchronous_fedopt('adam'),
    'fedyogi': _synchronous_fedopt('yogi'),
    'fedadagrad': _synchronous_fedopt('adagrad'),
}


def get_algorithm(config: ml_collections.ConfigDict) -> Algorithm:
  if config.algorithm not in ALGORITHMS:
    raise ValueError(f'algorithm={config.algorithm!r} is not known; allowed: {sorted(ALGORITHMS)}')
  return ALGORITHMS[config.algorithm](config)
