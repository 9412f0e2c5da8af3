"""What an algorithm is, and the registry that finds one by name.

An algorithm family is one module: a frozen `Settings` dataclass (its only validation site)
and a factory `(settings, context) -> Algorithm` registered under one or more names:

    @dataclasses.dataclass(frozen=True)
    class MySettings(Settings):
      rate: float = setting(0.5, number(above=0, maximum=1), 'mixing rate')

    @register('my_algorithm', MySettings)
    def my_algorithm(settings: MySettings, context: BuildContext) -> Algorithm:
      return Algorithm(scheduler=..., aggregator=..., make_client_update=...)

A run config selects it with `algorithm.name` and `algorithm.kwargs` (the fields of the
settings dataclass; missing ones take its defaults). `algorithm.module` names a module to
import first, so user code registers algorithms without touching the library.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from fedsim_jax.client import ClientUpdate, sgd_client_update
from fedsim_jax.registry import Entry, Registry
from fedsim_jax.runtime.latency import LatencyModel
from fedsim_jax.runtime.updates import Aggregator
from fedsim_jax.settings import Settings

KWARGS_PREFIX = 'algorithm.kwargs.'

MakeClientUpdate = Callable[..., ClientUpdate]  # (model, optimizer, batch_size) -> ClientUpdate


@dataclasses.dataclass(frozen=True)
class RunFacts:
  """The run's settings outside `algorithm` that algorithms may check or read (from the
  config's `data`, `client`, `model` and `run` sections)."""

  num_clients: int = 100
  num_rounds: int | None = None
  seed: int = 0
  client_optimizer: str = 'sgd'
  client_learning_rate: float = 0.05
  client_momentum: float = 0.9
  client_weight_decay: float = 0.0
  batch_size: int = 32
  local_steps: int | None = None
  local_epochs: float | None = None
  sampling: str = 'shuffle'
  model_norm: str | None = None


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """What a factory may know about the run and the federation."""

  name: str
  run: RunFacts
  client_sizes: np.ndarray
  latency: LatencyModel | None = None

  @property
  def num_clients(self) -> int:
    return int(len(self.client_sizes))

  @property
  def seed(self) -> int:
    return self.run.seed


class Algorithm(NamedTuple):
  """A runnable algorithm: a scheduler (`runtime.Scheduler`, host-side policy), an aggregator
  (the jitted server update) and `make_client_update(model, optimizer, batch_size)`."""

  scheduler: Any
  aggregator: Aggregator
  make_client_update: MakeClientUpdate = sgd_client_update


Factory = Callable[[Any, BuildContext], Algorithm]


AlgorithmSpec = Entry[Factory]

ALGORITHMS: Registry[Factory] = Registry('algorithm', 'algorithm')
register = ALGORITHMS.register
names = ALGORITHMS.names
get_spec = ALGORITHMS.get
import_module = ALGORITHMS.import_module


def resolve_settings(name: str, kwargs: Mapping[str, Any], run: RunFacts) -> Settings:
  """The validated settings of algorithm `name` from `kwargs`, checked against the run."""
  settings = ALGORITHMS.resolve(name, kwargs).settings
  check_run = getattr(settings, 'check_run', None)
  if check_run is not None:
    check_run(name, run, KWARGS_PREFIX)
  return settings


def build(settings: Settings, context: BuildContext) -> Algorithm:
  """Builds algorithm `context.name` from its resolved settings."""
  return get_spec(context.name).factory(settings, context)
