"""Dotted setting paths of a sweep ('client.learning_rate', 'algorithm.kwargs.buffer_size'):
set only where the config has the setting (`set_existing`), read back (`setting_value`), and
compared with a finished run's `config.json` (`stale_setting`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

KWARGS_PREFIX = 'algorithm.kwargs.'
# Settings of the selected model, latency and availability models (checked when resolved).
PLUGIN_KWARGS_PREFIXES = ('model.kwargs.', 'latency.kwargs.', 'availability.kwargs.')


def _algorithm_settings(config: Any) -> Any:
  """The settings dataclass of `config`'s algorithm (importing `algorithm.module` first)."""
  from fedsim_jax import algorithms  # Deferred: keeps this module free of JAX.

  algorithms.import_module(config.algorithm.module)
  return algorithms.get_spec(config.algorithm.name).settings


PARTITION_PREFIX = 'partition.kwargs.'


def _partition_settings(config: Any) -> Any:
  """The settings dataclass of `config`'s partitioner (importing `partition.module` first)."""
  from fedsim_jax.data.partitioners import PARTITIONERS  # Deferred: keeps this module light.

  PARTITIONERS.import_module(config.partition.module)
  return PARTITIONERS.get(config.partition.name).settings


def _entry_settings(config: Any, path: str) -> Any:
  """The settings dataclass whose field `path` names ('algorithm.kwargs.<f>',
  'partition.kwargs.<f>'), or None for another path."""
  if path.startswith(KWARGS_PREFIX):
    return _algorithm_settings(config)
  if path.startswith(PARTITION_PREFIX):
    return _partition_settings(config)
  return None


def set_existing(config: Any, path: str, value: Any) -> None:
  """Sets the dotted setting `path` (e.g. 'client.learning_rate') of `config` to `value`, like
  `fedsim_jax.config.set_by_path`, but only a setting `config` has: a misspelt name, or a
  section this build lacks, raises `ConfigError` instead of adding a new setting (naming its
  new place if it moved). An 'algorithm.kwargs.<field>' ('partition.kwargs.<field>') path must
  name a field of the algorithm's (partitioner's) settings dataclass; a 'model.kwargs.<field>'
  (latency, availability) one is checked when the config is validated."""
  import ml_collections

  from fedsim_jax.config import (  # Deferred: keeps this module JAX-free.
    ConfigError,
    moved_setting,
    set_by_path,
  )

  settings = _entry_settings(config, path)
  if settings is not None:
    from fedsim_jax.settings import closest

    section, _, field = path.rpartition('.')
    owner = section.split('.')[0]
    names = settings.field_names()
    if field not in names:
      raise ConfigError(
        f'{path} is not a setting of {settings.__name__} ({owner}.name='
        f'{config[owner].name!r}){closest(field, names)}; allowed: {sorted(names)}'
      )
    set_by_path(config, path, value)
    return
  if path.startswith(PLUGIN_KWARGS_PREFIXES):  # checked by the selected entry's settings
    set_by_path(config, path, value)
    return
  node = config
  *parents, leaf = path.split('.')
  for part in parents:
    node = node.get(part) if isinstance(node, ml_collections.ConfigDict) else None
  if not isinstance(node, ml_collections.ConfigDict) or leaf not in node:
    moved = moved_setting(path)
    if moved is not None:
      raise ConfigError(f'{path} is not a setting; it is now {moved}')
    raise ConfigError(
      f'{path}: no such setting in this build; allowed values: the settings of '
      'fedsim_jax.config.base_config'
    )
  set_by_path(config, path, value)


def setting_value(config: Any, path: str) -> Any:
  """`config`'s value at the dotted `path`; an 'algorithm.kwargs.<field>' (or
  'partition.kwargs.<field>') the config does not set takes the algorithm's (partitioner's)
  default (config.json records every field)."""
  settings = _entry_settings(config, path)
  if settings is not None:
    section, _, field = path.rpartition('.')
    kwargs = config[section.split('.')[0]].kwargs
    return kwargs[field] if field in kwargs else getattr(settings(), field)
  value = config
  for part in path.split('.'):
    value = value[part]
  return value


def stale_setting(run_dir: str, config: Any, paths: Sequence[str]) -> str | None:
  """Why the finished run in `run_dir` does not match `config`: 'path=saved value' for the first
  dotted path (e.g. 'run.eval_every') whose value in its `config.json` differs, else None (also
  when there is no readable `config.json`). An 'algorithm.kwargs.<field>' path is compared only
  when the algorithm has that field (a 'partition.kwargs.<field>' when the partitioner has it).
  Resumed sweeps warn with it instead of silently reusing a run made with other settings; a
  run's config.json of an earlier layout is read in the current one."""
  from fedsim_jax.config import upgrade_layout  # Deferred: keeps this module free of JAX.

  try:
    with open(os.path.join(run_dir, 'config.json'), encoding='utf-8') as f:
      saved = upgrade_layout(json.load(f))
  except (OSError, ValueError):
    return None
  for path in paths:
    settings = _entry_settings(config, path)
    if settings is not None and path.rpartition('.')[2] not in settings.field_names():
      continue
    value: Any = saved
    for part in path.split('.'):
      value = value.get(part) if isinstance(value, dict) else None
    if value != setting_value(config, path):
      return f'{path}={value!r}'
  return None
