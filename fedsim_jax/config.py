"""Experiment configuration: the default `ConfigDict` and its validation.

Config files in `configs/` start from `base_config()` and override fields; every field can be
overridden on the command line (`--config.client.learning_rate=0.1`). The algorithm is chosen by
`algorithm.name`; its settings are `algorithm.kwargs`, whose fields, defaults and checks belong
to the algorithm (`fedsim_jax/algorithms/<family>.py`), not to this module. `validate` checks
every other setting before any data is loaded and raises `ConfigError` with one line naming the
setting and its allowed values, including for a field that does not exist. Nothing is silently
clamped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections
from ml_collections import config_dict

from fedsim_jax.data.datasets import DATASET_SOURCES
from fedsim_jax.data.partitioners import PARTITIONERS
from fedsim_jax.models import MODELS
from fedsim_jax.moved_settings import (  # noqa: F401 - also this module's public names
  MOVED_SECTIONS,
  moved_message,
  moved_section_of,
  moved_setting,
  upgrade_layout,
)
from fedsim_jax.registry import Registry, Selection
from fedsim_jax.run_settings import (
  SECTIONS,
  SEED_CHECK,
  ClientSettings,
  DataSettings,
  ExecutorSettings,
  RunSettings,
)
from fedsim_jax.runtime.latency import AVAILABILITY_MODELS, LATENCY_MODELS
from fedsim_jax.settings import (
  Check,
  ConfigError,
  Settings,
  allowed_values,
  closest,
  text,
)
from fedsim_jax.transforms import plugins as transform_plugins


def _field_type(annotation: str) -> type | None:
  """The type ml_collections must know for a field that may be None (`int | None` -> int), so
  that `--config.<field>=3` parses; None for a field that is never None."""
  types = [t.strip() for t in annotation.split('|')]
  if 'None' not in types:
    return None
  (kind,) = [t for t in types if t != 'None']
  return {'int': int, 'float': float, 'str': str}.get(kind.split('[')[0], tuple)


def _add_fields(section: ml_collections.ConfigDict, settings: type[Settings]) -> None:
  """Adds `settings`' fields with their defaults to `section`."""
  for field in dataclasses.fields(settings):
    field_type = _field_type(str(field.type))
    if field_type is None:
      section[field.name] = field.default
    else:
      section[field.name] = config_dict.FieldReference(field.default, field_type=field_type)


def _section(settings: type[Settings]) -> ml_collections.ConfigDict:
  section = ml_collections.ConfigDict()
  _add_fields(section, settings)
  return section


def _plugin_section(name: str) -> ml_collections.ConfigDict:
  """A section that selects a registered plugin: its `name`, its settings `kwargs` (fields of
  its settings dataclass; missing ones take their defaults) and a `module` to import first
  that registers it (user code)."""
  section = ml_collections.ConfigDict()
  section.name = name
  section.kwargs = ml_collections.ConfigDict()
  section.module = config_dict.placeholder(str)
  return section


def base_config() -> ml_collections.ConfigDict:
  """Defaults shared by all experiments (FedAvg, Fashion-MNIST, MLP, 100 clients).

  Optional settings are None by default; a section's comment says which algorithms read it.
  """
  c = ml_collections.ConfigDict()
  c.seed = 0
  # The algorithm (fedsim_jax/algorithms): its name, its settings (fields of its settings
  # dataclass; missing ones take that dataclass's defaults) and, optionally, a module to import
  # first that registers it (user code).
  c.algorithm = _plugin_section('fedavg')

  # The dataset (fedsim_jax/data/datasets.py): a registered dataset source (the catalog's
  # datasets) or a prepared directory under data_dir; its settings (fields of the source's
  # settings dataclass) and, optionally, a module to import first that registers a source.
  c.data = _plugin_section('fashion_mnist')
  _add_fields(c.data, DataSettings)  # data_dir, num_clients, partition_seed, straggler split

  # How the training examples are spread over clients (fedsim_jax/data/partitioners): the
  # partitioner's name, its settings and, optionally, a module that registers one.
  c.partition = _plugin_section('dirichlet')

  # The model (fedsim_jax/models/registry.py), the latency model and the availability model
  # (fedsim_jax/runtime/latency): each a registered name, its settings (fields of its settings
  # dataclass; missing ones take that dataclass's defaults) and, optionally, a module to import
  # first that registers it (user code).
  c.model = _plugin_section('mlp')

  c.client = _section(ClientSettings)

  c.latency = _plugin_section('per_step')

  c.availability = _plugin_section('always')

  # Update transforms on every algorithm (fedsim_jax/transforms), in the order they apply:
  # malicious clients' tampering, DP clipping and noise, compression, robust aggregation.
  # Each section's default leaves updates as they are.
  for section, default in transform_plugins.DEFAULTS.items():
    c[section] = _plugin_section(default)

  c.executor = _section(ExecutorSettings)
  c.run = _section(RunSettings)
  # Extra evaluation metrics (classification models): accuracy on named class subsets, e.g.
  # `c.run.eval_class_groups.straggler = (0, 1, 2, 3, 4)` (a free section of names).
  c.run.eval_class_groups = ml_collections.ConfigDict()
  return c


def fashion_mnist_config(algorithm: str, **kwargs: Any) -> ml_collections.ConfigDict:
  """The setting the shipped Fashion-MNIST configs share: 100 clients with Dirichlet(0.5) label
  skew, the 784-200-200-10 MLP, client SGD at 0.05 with batch 32, target accuracy 80%;
  `algorithm` with settings `kwargs`."""
  config = base_config()
  config.algorithm.name = algorithm
  config.algorithm.kwargs.update(kwargs)
  config.data.name = 'fashion_mnist'
  config.data.num_clients = 100
  config.partition.name = 'dirichlet'  # its default concentration: 0.5
  config.model.name = 'mlp'
  config.client.learning_rate = 0.05
  config.client.batch_size = 32
  config.run.target_accuracy = 0.8
  return config


FEDASMU_READINGS = ('tables', 'appendix')


def fedasmu_trigger(reading: str = 'tables') -> dict[str, Any]:
  """FedASMU's system model for asynchronous algorithms (`algorithm.kwargs`): the trigger of
  `reading`, 'tables' (Tables 5-6: up to m' = 10 idle devices every calligraphic T = 10 s) or
  'appendix' ("one idle task every 5 seconds"), with at most 10% of the devices training under
  either. That cap is the appendix's ("with a maximum parallelism constraint, i.e., 10% of the
  total device number", stated with its own trigger): Tables 5-6 give no value for Algorithm 1's
  "predefined value", so the 'tables' reading borrows it."""
  if reading not in FEDASMU_READINGS:
    raise ConfigError(
      f'reading={reading!r} is not allowed; allowed values: {list(FEDASMU_READINGS)}'
    )
  return {
    'concurrency': 10,  # the appendix's "10% of the total device number" (not in Table 5)
    'trigger_period': 5.0 if reading == 'appendix' else 10.0,  # calligraphic T
    'trigger_count': 1 if reading == 'appendix' else 10,  # m'
  }


def fedasmu_fashion_mnist_config(algorithm: str, **kwargs: Any) -> ml_collections.ConfigDict:
  """FedASMU's LeNet/Fashion-MNIST setting (Liu et al. 2024, Sec. 5, Table 5, appendix
  "Experiment details"), shared by the fedasmu* configs and their baselines; `kwargs` are the
  algorithm's settings (asynchronous ones add `fedasmu_trigger(reading)`).

  Stated: 100 devices, Dirichlet label skew, LeNet-5, eta_i = 0.005, T = 500 rounds, tau = 99,
  slowest device 5x slower than the fastest (device speeds drawn uniformly, `device_ratio`), at
  most 10% of the devices training, target accuracy 0.70 (Table 2). Not stated, chosen here:
  Dirichlet concentration 0.5, batch 32, 5 local epochs, 0.1 s per local step on the fastest
  device, 1 s of download + upload per task.
  """
  config = fashion_mnist_config(algorithm, **kwargs)
  config.model.name = 'lenet5'
  config.client.learning_rate = 0.005  # eta_i (Table 5, LeNet FMNIST)
  config.client.local_steps = None
  config.client.local_epochs = 5.0  # L^i
  config.latency.name = 'device_ratio'
  config.latency.kwargs.update(ratio=5.0, fastest_step_time=0.1, communication_time=1.0)
  config.run.num_rounds = 500  # T (Table 5)
  config.run.eval_every = 10
  config.run.target_accuracy = 0.7
  return config


def set_by_path(config: ml_collections.ConfigDict, path: str, value: Any) -> None:
  """Sets `config.<path>` (dotted, e.g. 'data.lazy') to `value`, even to a value of another
  type than the default (None placeholders included), like `--config.<path>=...` does."""
  *parents, leaf = path.split('.')
  node = config
  for part in parents:
    node = node[part]
  with node.unlocked():
    node[leaf] = value


# Sections whose keys are free: named class groups, and the settings of each selected plugin
# (checked by the settings dataclass of the one selected; `_plugin_kwargs`).
_FREE_SECTIONS = ('run.eval_class_groups',)


def _unknown_setting(
  name: str, key: str, path: str, reference: ml_collections.ConfigDict, value: Any = None
) -> str:
  """The one-line error for setting or section `name` (= path + key), which `reference` at
  `path` lacks; `value` is what the config gives it (a section's fields are named if moved)."""
  moved = moved_setting(name)
  if moved is not None:
    if isinstance(value, ml_collections.ConfigDict) and value.keys():
      fields = ', '.join(f'{name}.{k} -> {moved_setting(f"{name}.{k}")}' for k in value.keys())
      moved = f'{moved} ({fields})'
    return moved_message(name, moved)
  return (
    f'{name} is not a setting{closest(key, reference.keys())}; allowed: '
    f'{sorted(path + k for k in reference.keys())}'
  )


def _is_free(name: str) -> bool:
  """Whether `name` is a section whose keys are free (checked by what reads them): a plugin
  section's `kwargs`, or a named-groups section."""
  section, _, field = name.partition('.')
  return name in _FREE_SECTIONS or (field == 'kwargs' and section in _SELECTS)


def check_override_path(path: str, reference: ml_collections.ConfigDict | None = None) -> None:
  """Raises `ConfigError` unless `path` (of a `--config.<path>=...` override) names a setting or
  section of `reference` (default `base_config()`), or a key inside a free section
  (`algorithm.kwargs.<field>`, `run.eval_class_groups.<name>`, `latency.<model>.<field>`):
  ml_collections would otherwise fail on a missing section with a traceback."""
  node = base_config() if reference is None else reference
  parts = path.split('.')
  for depth, key in enumerate(parts):
    prefix = '.'.join(parts[:depth])
    name = f'{prefix}.{key}' if prefix else key
    if prefix and _is_free(prefix):  # the selected plugin checks its own fields
      return
    if not isinstance(node, ml_collections.ConfigDict):
      raise ConfigError(
        f'{name} is not a setting: {prefix} is a setting ({prefix}={node!r}), not a section'
      )
    if key not in node:
      moved = moved_setting(path)
      if moved is not None and moved != 'algorithm.kwargs':
        raise ConfigError(moved_message(path, moved))
      raise ConfigError(_unknown_setting(name, key, f'{prefix}.' if prefix else '', node))
    node = node[key]


def existing_sections(path: str) -> list[str]:
  """The sections of `base_config()` inside section `path` ('' for the top level), or []."""
  node: Any = base_config()
  for key in filter(None, path.split('.')):
    if not isinstance(node, ml_collections.ConfigDict) or key not in node:
      return []
    node = node[key]
  if not isinstance(node, ml_collections.ConfigDict):
    return []
  prefix = f'{path}.' if path else ''
  return sorted(prefix + k for k, v in node.items() if isinstance(v, ml_collections.ConfigDict))


def check_known_fields(
  config: ml_collections.ConfigDict, reference: ml_collections.ConfigDict, path: str = ''
) -> None:
  """Raises `ConfigError` for a field of `config` that `reference` (the base config) lacks,
  naming the closest valid one, or its new place if it moved: a misspelt override must never be
  silently ignored."""
  for key in config.keys():
    name = f'{path}{key}'
    if key not in reference:
      raise ConfigError(_unknown_setting(name, key, path, reference, config[key]))
    value, default = config[key], reference[key]
    if isinstance(default, ml_collections.ConfigDict) and not _is_free(name):
      if not isinstance(value, ml_collections.ConfigDict):
        raise ConfigError(f'{name}={value!r} is invalid; allowed values: a section of settings')
      check_known_fields(value, default, name + '.')


# What each plugin section selects, as its `name` setting describes it.
_SELECTS = {
  'algorithm': 'a registered algorithm (fedsim_jax.algorithms.names())',
  'data': 'a registered dataset source (fedsim_jax.data.datasets) or a prepared directory',
  'partition': 'a registered partitioner: how examples are spread over clients',
  'model': 'a registered model (fedsim_jax.models.MODELS)',
  'latency': 'a registered latency model (task durations)',
  'availability': 'a registered availability model (when clients are online)',
  'attack': 'a registered attack: what malicious clients do to their updates (docs/robustness.md)',
  'privacy': 'a registered privacy mechanism: clipping and noise of updates (docs/privacy.md)',
  'compression': 'a registered compressor of client updates (docs/robustness.md)',
  'robust': 'a registered robust aggregator of the collected updates (docs/robustness.md)',
}


def _declared_fields() -> dict[str, tuple[Check, str]]:
  fields: dict[str, tuple[Check, str]] = {'seed': (SEED_CHECK, 'seed of every random stream')}
  for section, selects in _SELECTS.items():
    fields[f'{section}.name'] = (text(), f'{selects}; --describe lists them')
    fields[f'{section}.module'] = (
      text(optional=True),
      f'module imported first; it registers the {section} plugin it names',
    )
  for section, settings in SECTIONS.items():
    for field in dataclasses.fields(settings):
      fields[f'{section}.{field.name}'] = (field.metadata['check'], field.metadata['doc'])
  return fields


# Every setting outside the free sections with its check and a one-line description, from the
# settings dataclasses that declare them (`SECTIONS`) and the plugin sections' `name`/`module`:
# `validate` applies the same declarations, `describe` prints these.
FIELDS: dict[str, tuple[Check, str]] = _declared_fields()
# Sections that select a registered plugin (`name`, `kwargs`, `module`) other than the
# algorithm, with their registries: `describe` lists each entry's settings.
PLUGIN_SECTIONS: dict[str, Registry[Any]] = {
  'partition': PARTITIONERS,
  'model': MODELS,
  'latency': LATENCY_MODELS,
  'availability': AVAILABILITY_MODELS,
  **transform_plugins.SECTIONS,  # attack, privacy, compression, robust
}


def _get(config: ml_collections.ConfigDict, path: str) -> Any:
  node: Any = config
  for part in path.split('.'):
    node = node[part]
  return node


def resolve_plugin(config: ml_collections.ConfigDict, section: str) -> Selection:
  """`config[section]` (partition, model, latency or availability) resolved: its registered name and
  validated settings, importing `<section>.module` first; raises `ConfigError`."""
  registry = PLUGIN_SECTIONS[section]
  registry.import_module(config[section].module)
  return registry.resolve(config[section].name, config[section].kwargs.to_dict())


def check_fields(config: ml_collections.ConfigDict) -> None:
  """Checks that `config` has only known fields (naming a moved one's new name), a valid seed
  and plugin sections' names and modules; raises `ConfigError`."""
  check_known_fields(config, base_config())
  SEED_CHECK('seed', config.seed)
  for section in _SELECTS:
    FIELDS[f'{section}.name'][0](f'{section}.name', config[section].name)
    FIELDS[f'{section}.module'][0](f'{section}.module', config[section].module)


def validate(config: ml_collections.ConfigDict) -> None:
  """Checks every setting outside `algorithm.kwargs` and `data.kwargs` that can be checked
  without data (`fedsim_jax.run_spec.RunSpec.from_config` checks every one): unknown and moved
  fields, the seed and the plugin sections' names, each section by its settings dataclass
  (fields and the rules between them), the partitioner's, model's, latency and availability
  models' settings by theirs; raises `ConfigError`."""
  check_fields(config)
  section_settings(config)
  for section in PLUGIN_SECTIONS:
    resolve_plugin(config, section)


def section_settings(config: ml_collections.ConfigDict) -> dict[str, Settings]:
  """The `data`, `client`, `executor` and `run` sections as their validated settings
  dataclasses (`SECTIONS`), by section; raises `ConfigError`."""
  return {
    section: settings.from_kwargs(
      {name: config[section][name] for name in settings.field_names()}, f'{section}.'
    )
    for section, settings in SECTIONS.items()
  }


def describe(config: ml_collections.ConfigDict | None = None) -> str:
  """Every setting of `config` (default: `base_config()`) with its value, allowed values and a
  one-line description, from `FIELDS`; the settings of the model, latency and availability
  model `config` selects, with its values; then every registered model, latency model and
  availability model with its settings (`Registry.describe`). The algorithm's settings are
  described by its settings class."""
  config = base_config() if config is None else config
  lines = []
  for path, (check, doc) in FIELDS.items():
    lines.append(f'{path} = {_get(config, path)!r}')
    lines.append(f'    {doc}; allowed: {allowed_values(check)}')
  for section, registry in PLUGIN_SECTIONS.items():
    selected = resolve_plugin(config, section)
    lines.append(f'{section}.kwargs of {section}.name={selected.name!r}, as this config sets them:')
    lines.append(selected.settings.describe(prefix=f'{section}.kwargs.'))
    lines.append(f"Every registered {registry.kind} ({section}.name) with its settings' defaults:")
    lines.append(registry.describe())
  lines.append('run.eval_class_groups: named class subsets reported as test_accuracy/<name>')
  lines.append(DATASET_SOURCES.describe())
  return '\n'.join(lines)
