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
import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from fedsim_jax.client import ClientUpdate, sgd_client_update
from fedsim_jax.runtime.latency import LatencyModel
from fedsim_jax.runtime.updates import Aggregator
from fedsim_jax.settings import ConfigError, Settings, closest

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


class AlgorithmSpec(NamedTuple):
  name: str
  settings: type[Settings]
  factory: Factory


_REGISTRY: dict[str, AlgorithmSpec] = {}


def register(name: str, settings: type[Settings]) -> Callable[[Factory], Factory]:
  """Registers `factory` under `name` with its settings dataclass (a decorator; stack it to
  register one factory under several names: the factory reads `context.name`)."""

  def decorate(factory: Factory) -> Factory:
    if name in _REGISTRY and _REGISTRY[name].factory is not factory:
      raise ValueError(f'algorithm {name!r} is already registered')
    _REGISTRY[name] = AlgorithmSpec(name, settings, factory)
    return factory

  return decorate


def names() -> list[str]:
  """Every registered algorithm name, sorted."""
  return sorted(_REGISTRY)


def import_module(module: str | None) -> None:
  """Imports a user module that registers algorithms (`algorithm.module`)."""
  if not module:
    return
  try:
    importlib.import_module(module)
  except ImportError as error:
    raise ConfigError(
      f'algorithm.module={module!r} cannot be imported ({error}); allowed values: an importable '
      'module name or None'
    ) from None


def get_spec(name: str) -> AlgorithmSpec:
  if name not in _REGISTRY:
    raise ConfigError(
      f'algorithm.name={name!r} is not known{closest(name, _REGISTRY)}; allowed values: {names()}'
    )
  return _REGISTRY[name]


def resolve_settings(name: str, kwargs: Mapping[str, Any], run: RunFacts) -> Settings:
  """The validated settings of algorithm `name` from `kwargs`, checked against the run."""
  settings = get_spec(name).settings.from_kwargs(kwargs, KWARGS_PREFIX)
  check_run = getattr(settings, 'check_run', None)
  if check_run is not None:
    check_run(name, run, KWARGS_PREFIX)
  return settings


def build(settings: Settings, context: BuildContext) -> Algorithm:
  """Builds algorithm `context.name` from its resolved settings."""
  return get_spec(context.name).factory(settings, context)
