"""Registries of named plugins, each with a frozen settings dataclass: the one form of every
research object a config selects (algorithms, datasets, partitioners, models, latency and
availability models).

A kind of plugin is a `Registry`, named after its config section. An entry is a factory
registered under a name with its `Settings` dataclass:

    PARTITIONERS = Registry('partition', 'partitioner')

    @dataclasses.dataclass(frozen=True)
    class ShardsSettings(Settings):
      shards_per_client: int = setting(2, positive(integer=True), 'shards each client holds')

    @PARTITIONERS.register('shards', ShardsSettings)
    def shards(settings: ShardsSettings, ...) -> ...:
      ...

A config selects an entry with the section's `name` and `kwargs` (fields of the settings
dataclass; missing ones take its defaults), and optionally `module`, a module imported first
that registers the entry (user code). `Registry.resolve` validates the kwargs once, at the edge,
into a `Selection`: the entry's name and its typed settings, which is all code below receives.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

from fedsim_jax.settings import ConfigError, Settings, closest

FactoryT = TypeVar('FactoryT', bound=Callable[..., Any])


class Entry(NamedTuple, Generic[FactoryT]):
  """A registered plugin: its name, its settings dataclass and its factory."""

  name: str
  settings: type[Settings]
  factory: FactoryT


@dataclasses.dataclass(frozen=True)
class Selection:
  """A config section resolved: the registered name and its validated settings."""

  name: str
  settings: Settings


class Registry(Generic[FactoryT]):
  """Plugins of one kind, found by name; `section` is the config section that selects one
  (`<section>.name`, `<section>.kwargs`, `<section>.module`) and names it in error messages."""

  def __init__(self, section: str, kind: str):
    self.section = section
    self.kind = kind
    self._entries: dict[str, Entry[FactoryT]] = {}

  def register(self, name: str, settings: type[Settings]) -> Callable[[FactoryT], FactoryT]:
    """Registers the decorated factory under `name` with its settings dataclass (stack it to
    register one factory under several names)."""

    def decorate(factory: FactoryT) -> FactoryT:
      if name in self._entries and self._entries[name].factory is not factory:
        raise ValueError(f'{self.kind} {name!r} is already registered')
      self._entries[name] = Entry(name, settings, factory)
      return factory

    return decorate

  def names(self) -> list[str]:
    """Every registered name, sorted."""
    return sorted(self._entries)

  def __contains__(self, name: object) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[Entry[FactoryT]]:
    return iter(self._entries[name] for name in self.names())

  def get(self, name: str) -> Entry[FactoryT]:
    """The entry registered as `name`; `ConfigError` naming `<section>.name` otherwise."""
    if name not in self._entries:
      raise ConfigError(
        f'{self.section}.name={name!r} is not known{closest(str(name), self._entries)}; '
        f'allowed values: {self.names()}'
      )
    return self._entries[name]

  def import_module(self, module: str | None) -> None:
    """Imports a user module that registers entries (`<section>.module`)."""
    if not module:
      return
    try:
      importlib.import_module(module)
    except ImportError as error:
      raise ConfigError(
        f'{self.section}.module={module!r} cannot be imported ({error}); allowed values: an '
        'importable module name or None'
      ) from None

  def resolve(self, name: str, kwargs: Mapping[str, Any]) -> Selection:
    """`name` with its settings validated from `kwargs` (errors name `<section>.kwargs.<f>`)."""
    entry = self.get(name)
    settings = entry.settings.from_kwargs(kwargs, f'{self.section}.kwargs.')
    return Selection(name, settings)

  def describe(self) -> str:
    """Each entry's settings with defaults, descriptions and allowed values (`--describe`)."""
    blocks = []
    for entry in self:
      doc = (entry.factory.__doc__ or '').strip().splitlines()
      title = f'{self.section}.name={entry.name!r}' + (f': {doc[0]}' if doc else '')
      body = entry.settings().describe(f'  {self.section}.kwargs.')
      blocks.append(title + ('\n' + body if body else ''))
    return '\n'.join(blocks)
