"""Settings of earlier versions: where each is now, and stored configs upgraded to today's layout.

`moved_setting` names the new place of a setting that moved (the one-line errors of a config
file or `--config.` flag that still uses it say where it went); `upgrade_layout` rewrites a
stored config (a run's config.json, a checkpoint's) of an earlier layout into the current one,
so that runs started before a setting moved still resume and read.
"""

from __future__ import annotations

import copy
from typing import Any

from fedsim_jax.data.partitioners import PARTITIONERS
from fedsim_jax.models import MODELS
from fedsim_jax.registry import Registry
from fedsim_jax.runtime.latency import AVAILABILITY_MODELS, LATENCY_MODELS

# The plugin sections of the model, latency and availability model, whose earlier layout
# `upgrade_layout` rewrites (their settings were fields of the section or of a sub-section).
_UPGRADED_PLUGIN_SECTIONS: dict[str, Registry[Any]] = {
  'model': MODELS,
  'latency': LATENCY_MODELS,
  'availability': AVAILABILITY_MODELS,
}


# Sections of earlier versions whose settings are now the algorithm's, `algorithm.kwargs.<field>`:
# each with its fields then. A field keeps its name unless renamed below (or given its section's
# prefix).
MOVED_SECTIONS = {
  'server': 'learning_rate optimizer momentum b1 b2 eps adaptive_form alpha fedasync_form '
  'staleness staleness_a staleness_b normalization ema_decay',
  'scheduler': 'cohort_size weighting num_selected deadline min_responses time_limit '
  'time_limit_percentile limit_includes_overhead concurrency buffer_size max_staleness '
  'trigger_period trigger_count trigger_timing tier_ratio q_min q_max latest_time_factor '
  'speed_estimator speed_momentum create_rule switch_round storage',
  'budget': 'rule beta r w random_assignment schedule first_selection_trains phase',
  'fare_dust': 'history_length rho temperature ema_decay teacher_learning_rate empty_history '
  'server_optimizer',
  'feast': 'tau_max ema_decay kappa window_close',
  'fedasmu': 'tau lambda_learning_rate sigma_learning_rate iota_learning_rate gamma_learning_rate '
  'v_learning_rate mu_alpha lambda_0 sigma_0 iota_0 mu_beta gamma_0 v_0 alpha_min min_version '
  'xi_form sigma_gradient gradient_sign sigma_min static_alpha',
  'fedasmu_fetch': 'policy hidden_size features hazard_prior pretrain_history pretrain_passes '
  'learning_rate baseline_decay baseline_init baseline_scope epsilon meta_exploit '
  'q_learning_rate q_discount q_bootstrap',
  'moon': 'mu temperature representation',
  'feddyn': 'alpha',
  'port': 'similarity_weight staleness_weight staleness_bound similarity_reference '
  'similarity_min_staleness',
  'asofed': 'proximal decay decay_gradient dynamic_step_size delay_measure',
}
_MOVED_PREFIXES = {'fedasmu_fetch': 'fetch_'}
_RENAMED = {
  'server.learning_rate': 'server_learning_rate',
  'server.optimizer': 'server_optimizer',
  'server.momentum': 'server_momentum',
  'server.fedasync_form': 'form',
  'budget.rule': 'budget_rule',
  'budget.beta': 'budget_beta',
  'budget.r': 'budget_r',
  'budget.w': 'budget_w',
  'budget.schedule': 'budget_schedule',
}

# Data settings of earlier versions that moved to the partitioner's section: old path -> new.
# `upgrade_layout` keeps a `partition.kwargs.<field>` only when the stored partitioner has it.
_MOVED_DATA = {
  'data.partition': 'partition.name',
  **{
    f'data.{field}': f'partition.kwargs.{field}'
    for field in (
      'concentration min_client_size balance shards_per_client classes_per_client alpha_1 '
      'alpha_2 gamma budget_skew skewed_fraction'
    ).split()
  },
}


# Settings of the model, latency and availability sections of earlier versions, now the
# selected plugin's name or settings: old name -> new name, and old sub-sections (a latency or
# availability model's settings) -> the section whose fields they now are.
_MOVED_PLUGIN_SETTINGS = {
  'model.hidden_sizes': 'model.kwargs.hidden_sizes',
  'model.norm': 'model.kwargs.norm',
  'latency.model': 'latency.name',
  'availability.model': 'availability.name',
}
_MOVED_PLUGIN_SECTIONS = {
  'latency.per_step': 'latency.kwargs',
  'latency.lognormal': 'latency.kwargs',
  'latency.fedscale': 'latency.kwargs',
  'latency.device_ratio': 'latency.kwargs',
  'latency.trace': 'latency.kwargs',
  'availability.periodic': 'availability.kwargs',
  'availability.trace': 'availability.kwargs',
}
# What the `kwargs` of each plugin section are the settings of (in moved-setting messages).
_PLUGIN_KINDS = {
  'algorithm': 'algorithm',
  'data': 'dataset source',
  'partition': 'partitioner',
  'model': 'model',
  'latency': 'latency model',
  'availability': 'availability model',
}


def _moved_plugin_setting(path: str) -> str | None:
  """`_MOVED_PLUGIN_SETTINGS`' and `_MOVED_PLUGIN_SECTIONS`' new name of `path`, or None."""
  if path in _MOVED_PLUGIN_SETTINGS:
    return _MOVED_PLUGIN_SETTINGS[path]
  for old, new in _MOVED_PLUGIN_SECTIONS.items():
    if path == old or path.startswith(old + '.'):
      field = path[len(old) + 1 :].split('.')[0]
      return f'{new}.{field}' if field else new
  return None


def moved_section_of(key: str) -> str | None:
  """For `key`, the name of a latency or availability model's section of an earlier layout
  (e.g. 'per_step', which a config file reads as `c.latency.per_step.mean = ...`), the one-line
  note of where its settings are now; None for any other key."""
  notes = [
    f'{old}.<field> is now {new}.<field> (with {old.split(".")[0]}.name={key!r})'
    for old, new in _MOVED_PLUGIN_SECTIONS.items()
    if old.split('.')[1] == key
  ]
  return '; '.join(notes) or None


def moved_message(name: str, moved: str) -> str:
  """The one-line error for `name`, a setting of an earlier version that is now `moved`."""
  section = moved.split('.')[0]
  if not moved.startswith(f'{section}.kwargs'):
    return f'{name} is not a setting; it is now {moved}'
  return (
    f'{name} is not a setting; it is now {moved}: the settings of the {_PLUGIN_KINDS[section]} '
    f'that {section}.name names (--describe lists them)'
  )


def moved_setting(path: str) -> str | None:
  """The current name of a setting an earlier version had at `path` (e.g. 'scheduler.concurrency'
  -> 'algorithm.kwargs.concurrency', 'latency.per_step.mean' -> 'latency.kwargs.mean'),
  'algorithm.kwargs' for such a section itself, or None."""
  if path in _MOVED_DATA:
    return _MOVED_DATA[path]
  plugin = _moved_plugin_setting(path)
  if plugin is not None:
    return plugin
  section, _, field = path.partition('.')
  if section not in MOVED_SECTIONS:
    return None
  field = field.split('.')[0]
  if field not in MOVED_SECTIONS[section].split():
    return 'algorithm.kwargs'
  name = _RENAMED.get(f'{section}.{field}', _MOVED_PREFIXES.get(section, '') + field)
  return f'algorithm.kwargs.{name}'


def upgrade_layout(stored: dict[str, Any]) -> dict[str, Any]:
  """A stored config (a run's config.json, a checkpoint's) in the current layout: the settings
  of earlier versions moved to their new place, so that runs started before a setting moved
  still resume and read. A config in the current layout comes back unchanged (a copy)."""
  config = copy.deepcopy(stored)
  _upgrade_data_layout(config)
  for section in _UPGRADED_PLUGIN_SECTIONS:
    _upgrade_plugin_section(config, section)
  return config


def _upgrade_data_layout(config: dict[str, Any]) -> None:
  """`data.partition` and its settings -> `partition.name` and `partition.kwargs` (only the
  stored partitioner's fields), and the `data.kwargs` / `data.module` of dataset sources."""
  data = config.get('data')
  if not isinstance(data, dict) or 'partition' not in data or 'partition' in config:
    return
  name = data.pop('partition')
  fields = PARTITIONERS.get(name).settings.field_names() if name in PARTITIONERS else ()
  kwargs = {}
  for old, new in _MOVED_DATA.items():
    field = old.partition('.')[2]
    if field in data and new.startswith('partition.kwargs.'):
      value = data.pop(field)
      if field in fields:
        kwargs[field] = value
  config['partition'] = {'name': name, 'kwargs': kwargs, 'module': None}
  data.setdefault('kwargs', {})
  data.setdefault('module', None)


def _upgrade_plugin_section(config: dict[str, Any], section: str) -> None:
  """Moves `config[section]` (model, latency or availability) of the layout before plugins into
  `name` / `kwargs` / `module` by the rows of `_MOVED_PLUGIN_SETTINGS` and
  `_MOVED_PLUGIN_SECTIONS`. Settings of other entries than the selected one, and None (which
  meant 'the default'), are dropped: the old layout held every model's settings."""
  old = config.get(section)
  if not isinstance(old, dict) or 'kwargs' in old:
    return
  name = old.get('name', old.get('model'))
  new: dict[str, Any] = {'name': name, 'kwargs': {}, 'module': None}
  registry = _UPGRADED_PLUGIN_SECTIONS[section]
  fields = registry.get(str(name)).settings.field_names() if name in registry else ()
  for key, value in old.items():
    moved = _moved_plugin_setting(f'{section}.{key}')
    if moved == f'{section}.kwargs.{key}' and key in fields and value is not None:
      new['kwargs'][key] = value
    elif f'{section}.{key}' in _MOVED_PLUGIN_SECTIONS and key == name and isinstance(value, dict):
      new['kwargs'].update({k: v for k, v in value.items() if v is not None})
  config[section] = new
