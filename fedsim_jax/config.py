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

import copy
from typing import Any

import ml_collections
from ml_collections import config_dict

from fedsim_jax.client.local_update import CLIENT_OPTIMIZERS
from fedsim_jax.data.datasets import DATASET_SOURCES
from fedsim_jax.data.federated import SAMPLING_MODES
from fedsim_jax.data.partitioners import PARTITIONERS
from fedsim_jax.executor.choice import BACKEND_SETTINGS, STEP_LOOP_SETTINGS
from fedsim_jax.models import MODELS
from fedsim_jax.registry import Selection
from fedsim_jax.runtime.latency import AVAILABILITY_MODELS, LATENCY_MODELS
from fedsim_jax.settings import (
  Check,
  ConfigError,
  allowed_values,
  boolean,
  closest,
  decay,
  number,
  one_of,
  positive,
  text,
)


def base_config() -> ml_collections.ConfigDict:
  """Defaults shared by all experiments (FedAvg, Fashion-MNIST, MLP, 100 clients).

  Optional settings are None by default; a section's comment says which algorithms read it.
  """
  c = ml_collections.ConfigDict()
  c.seed = 0
  # The algorithm (fedsim_jax/algorithms): its name, its settings (fields of its settings
  # dataclass; missing ones take that dataclass's defaults) and, optionally, a module to import
  # first that registers it (user code).
  c.algorithm = ml_collections.ConfigDict()
  c.algorithm.name = 'fedavg'
  c.algorithm.kwargs = ml_collections.ConfigDict()
  c.algorithm.module = config_dict.placeholder(str)

  # The dataset (fedsim_jax/data/datasets.py): a registered dataset source (the catalog's
  # datasets) or a prepared directory under data_dir; its settings (fields of the source's
  # settings dataclass) and, optionally, a module to import first that registers a source.
  c.data = ml_collections.ConfigDict()
  c.data.name = 'fashion_mnist'
  c.data.kwargs = ml_collections.ConfigDict()
  c.data.module = config_dict.placeholder(str)
  c.data.data_dir = config_dict.placeholder(str)  # default: $FEDSIM_DATA_DIR or ~/fedsim_data
  c.data.num_clients = 100
  c.data.partition_seed = config_dict.placeholder(int)  # default: the run seed
  # Straggler-domain split (Hard et al. 2024, Sec. 4.1) applied after the partition: the
  # num_stragglers clients holding most straggler-class examples become stragglers; the other
  # clients lose those classes. None: no split / every holder is a straggler.
  c.data.straggler_classes = config_dict.placeholder(tuple)
  c.data.num_stragglers = config_dict.placeholder(int)
  c.data.lazy = False  # keep examples on the host; gather active clients per batch

  # How the training examples are spread over clients (fedsim_jax/data/partitioners): the
  # partitioner's name, its settings and, optionally, a module that registers one.
  c.partition = ml_collections.ConfigDict()
  c.partition.name = 'dirichlet'
  c.partition.kwargs = ml_collections.ConfigDict()
  c.partition.module = config_dict.placeholder(str)

  # The model (fedsim_jax/models/registry.py), the latency model and the availability model
  # (fedsim_jax/runtime/latency): each a registered name, its settings (fields of its settings
  # dataclass; missing ones take that dataclass's defaults) and, optionally, a module to import
  # first that registers it (user code).
  c.model = ml_collections.ConfigDict()
  c.model.name = 'mlp'
  c.model.kwargs = ml_collections.ConfigDict()
  c.model.module = config_dict.placeholder(str)

  c.client = ml_collections.ConfigDict()
  c.client.optimizer = 'sgd'
  c.client.learning_rate = 0.05
  c.client.momentum = 0.9  # 'momentum' optimizer only
  c.client.weight_decay = 0.0
  c.client.batch_size = 32
  c.client.local_steps = config_dict.FieldReference(20, field_type=int)  # or None
  c.client.local_epochs = config_dict.placeholder(float)
  c.client.sampling = 'shuffle'

  c.latency = ml_collections.ConfigDict()
  c.latency.name = 'per_step'
  c.latency.kwargs = ml_collections.ConfigDict()
  c.latency.module = config_dict.placeholder(str)

  c.availability = ml_collections.ConfigDict()
  c.availability.name = 'always'
  c.availability.kwargs = ml_collections.ConfigDict()
  c.availability.module = config_dict.placeholder(str)

  c.executor = ml_collections.ConfigDict()
  c.executor.backend = 'auto'  # 'vmap', 'loop', or by the measured rule (executor/choice.py)
  c.executor.unroll = 1
  c.executor.bucket_bits = 3
  c.executor.step_loop = 'auto'  # 'scan', 'host' (loop backend: one jitted step per local
  # step), or by the rule in executor/choice.py
  c.executor.deferred = True
  c.executor.devices = 1  # local devices the task axis is sharded over (vmap backend)
  c.executor.threads = 0  # loop backend: tasks run at once, each from its own host
  # thread; 0 = one per CPU core on CPU, 1 on accelerators
  # Most tasks computed in one batch, hence most client updates held at once: larger rounds
  # are summed in chunks (linear aggregators). 0 = as many as fit in 1 GiB (16 to 4096).
  c.executor.max_batch_tasks = 0

  c.run = ml_collections.ConfigDict()
  c.run.num_rounds = config_dict.FieldReference(100, field_type=int)  # server versions
  c.run.max_virtual_time = config_dict.placeholder(float)
  c.run.max_client_updates = config_dict.placeholder(int)
  c.run.eval_every = 5  # server versions between evaluations
  c.run.eval_batch_size = 1000
  c.run.target_accuracy = config_dict.placeholder(float)
  # Extra evaluation metrics (classification models): accuracy on named class subsets, e.g.
  # `c.run.eval_class_groups.straggler = (0, 1, 2, 3, 4)`, balanced accuracy, top-k accuracy.
  c.run.eval_class_groups = ml_collections.ConfigDict()
  c.run.eval_balanced_accuracy = False
  c.run.eval_top_k = ()
  # Reuse of compiled programs (fedsim_jax/compilation_cache.py): 'process' shares them between
  # the runs of this process, 'off', or a directory that keeps them across processes.
  c.run.compilation_cache = 'process'
  # Checkpoints of the whole simulation in <workdir>/checkpoints (docs/checkpoints.md): every
  # `checkpoint_every` server versions and/or `checkpoint_every_minutes` of host time (None:
  # never on that count), and always at the end and on SIGINT/SIGTERM.
  c.run.checkpoint_every = config_dict.placeholder(int)
  c.run.checkpoint_every_minutes = config_dict.FieldReference(10.0, field_type=float)
  c.run.keep_checkpoints = 2
  # A non-finite test loss or evaluated parameter: 'stop' the run (summary status 'diverged',
  # exit code 3) or 'continue' it (the row's non-finite values are written as null).
  c.run.on_divergence = 'stop'
  # Refuse, before it starts, a run whose estimated memory exceeds what is available.
  c.run.check_memory = True
  # Observability (docs/observability.md): the task trace tasks.jsonl, and TensorBoard scalars
  # of every metric (written when tensorboardX is installed).
  c.run.write_tasks = True
  c.run.tensorboard = True
  # Several processes (hosts) on jax.distributed (fedsim_jax/distributed.py): each runs the same
  # command; the coordinator, process count and id come from here, else FEDSIM_* environment
  # variables, else a cluster launcher JAX detects (Slurm, Open MPI, ...).
  c.run.distributed = False
  c.run.coordinator_address = config_dict.placeholder(str)
  c.run.num_processes = config_dict.placeholder(int)
  c.run.process_id = config_dict.placeholder(int)

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


# Sections whose keys are free: the settings of the selected plugins (algorithm, dataset source,
# partitioner, model, latency and availability model; checked by the settings dataclass of the
# selected one), and named class groups.
_FREE_SECTIONS = (
  'algorithm.kwargs',
  'run.eval_class_groups',
  'data.kwargs',
  'partition.kwargs',
  'model.kwargs',
  'latency.kwargs',
  'availability.kwargs',
)


# Sections of earlier versions whose settings are now the algorithm's, `algorithm.kwargs.<field>`:
# each with its fields then. A field keeps its name unless renamed below (or given its section's
# prefix).
_MOVED_SECTIONS = {
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


def _moved_message(name: str, moved: str) -> str:
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
  if section not in _MOVED_SECTIONS:
    return None
  field = field.split('.')[0]
  if field not in _MOVED_SECTIONS[section].split():
    return 'algorithm.kwargs'
  name = _RENAMED.get(f'{section}.{field}', _MOVED_PREFIXES.get(section, '') + field)
  return f'algorithm.kwargs.{name}'


def upgrade_layout(stored: dict[str, Any]) -> dict[str, Any]:
  """A stored config (a run's config.json, a checkpoint's) in the current layout: the settings
  of earlier versions moved to their new place, so that runs started before a setting moved
  still resume and read. A config in the current layout comes back unchanged (a copy)."""
  config = copy.deepcopy(stored)
  _upgrade_data_layout(config)
  for section in PLUGIN_SECTIONS:
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
  registry = PLUGIN_SECTIONS[section]
  fields = registry.get(name).settings.field_names() if name in registry else ()
  for key, value in old.items():
    moved = _moved_plugin_setting(f'{section}.{key}')
    if moved == f'{section}.kwargs.{key}' and key in fields and value is not None:
      new['kwargs'][key] = value
    elif f'{section}.{key}' in _MOVED_PLUGIN_SECTIONS and key == name and isinstance(value, dict):
      new['kwargs'].update({k: v for k, v in value.items() if v is not None})
  config[section] = new


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
    return _moved_message(name, moved)
  return (
    f'{name} is not a setting{closest(key, reference.keys())}; allowed: '
    f'{sorted(path + k for k in reference.keys())}'
  )


def _is_free(name: str) -> bool:
  """Whether `name` is a section whose keys are free (checked by what reads them)."""
  return any(
    name == free or (free.endswith('.') and name.startswith(free)) for free in _FREE_SECTIONS
  )


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
        raise ConfigError(_moved_message(path, moved))
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


def _tuple_of(item: Check, allowed: str, *, length: int | None = None, optional: bool = False):
  """A tuple (or list) whose every item passes `item`."""

  def check(name: str, value: Any) -> None:
    if value is None and optional:
      return
    if not isinstance(value, (tuple, list)) or (length is not None and len(value) != length):
      raise ConfigError(f'{name}={value!r} is invalid; allowed values: {allowed}')
    for element in value:
      item(name, element)

  check.allowed = allowed + (' or None' if optional else '')  # type: ignore[attr-defined]
  return check


def _unroll(name: str, value: Any) -> None:
  if not (value is True or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)):
    raise ConfigError(f'{name}={value!r} is invalid; allowed values: an integer >= 1 or True')


_unroll.allowed = 'an integer >= 1 or True'  # type: ignore[attr-defined]


def _compilation_cache(name: str, value: Any) -> None:
  if not isinstance(value, str) or not value.strip():
    raise ConfigError(
      f"{name}={value!r} is invalid; allowed values: 'process', 'off' or a directory path"
    )


_compilation_cache.allowed = "'process', 'off' or a directory path"  # type: ignore[attr-defined]

_INTEGERS = positive(integer=True)
_CLASS = positive(integer=True, allow_zero=True)
_OPTIONAL_INDEX = positive(integer=True, allow_zero=True, optional=True)

# Every setting outside the free sections: its check and a one-line description. `validate`
# applies these checks and `describe` prints them with base_config()'s defaults: one source,
# so that the documentation of a setting and its validation cannot drift apart (a test checks
# that every field of base_config() is here).
FIELDS: dict[str, tuple[Check, str]] = {
  'seed': (number(integer=True, minimum=0, below=2**63), 'seed of every random stream'),
  'algorithm.name': (text(), 'a registered algorithm (fedsim_jax.algorithms.names())'),
  'algorithm.module': (text(optional=True), 'module imported first; it registers algorithms'),
  'data.name': (
    text(),
    'a registered dataset source (fedsim_jax.data.datasets) or a prepared directory',
  ),
  'data.module': (text(optional=True), 'module imported first; it registers dataset sources'),
  'data.data_dir': (
    text(optional=True),
    'root of the prepared datasets (default $FEDSIM_DATA_DIR or ~/fedsim_data)',
  ),
  'data.num_clients': (_INTEGERS, 'clients the training split is partitioned over'),
  'data.partition_seed': (
    positive(integer=True, allow_zero=True, optional=True),
    'seed of the partition (default: seed)',
  ),
  'data.straggler_classes': (
    _tuple_of(_CLASS, 'a tuple of class ids', optional=True),
    'straggler-domain split: classes that only stragglers hold (Hard et al. 2024)',
  ),
  'data.num_stragglers': (
    positive(integer=True, optional=True),
    'straggler-domain split: clients made stragglers (None: every holder)',
  ),
  'data.lazy': (boolean, 'keep examples on the host; gather active clients per batch'),
  'partition.name': (text(), 'a registered partitioner: how examples are spread over clients'),
  'partition.module': (text(optional=True), 'module imported first; it registers partitioners'),
  'model.name': (text(), 'a registered model (fedsim_jax.models.MODELS; --describe lists them)'),
  'model.module': (text(optional=True), 'module imported first; it registers models'),
  'client.optimizer': (one_of(CLIENT_OPTIMIZERS), 'local optimizer'),
  'client.learning_rate': (positive(), 'local learning rate'),
  'client.momentum': (decay(), "'momentum' optimizer only"),
  'client.weight_decay': (positive(allow_zero=True), 'local weight decay'),
  'client.batch_size': (_INTEGERS, 'local batch size'),
  'client.local_steps': (
    positive(integer=True, optional=True),
    'local steps per task (or None and client.local_epochs)',
  ),
  'client.local_epochs': (positive(optional=True), 'local epochs per task (or None)'),
  'client.sampling': (one_of(SAMPLING_MODES), 'how local batches are drawn'),
  'latency.name': (text(), 'a registered latency model (task durations; --describe lists them)'),
  'latency.module': (text(optional=True), 'module imported first; it registers latency models'),
  'availability.name': (
    text(),
    'a registered availability model (when clients are online; --describe lists them)',
  ),
  'availability.module': (
    text(optional=True),
    'module imported first; it registers availability models',
  ),
  'executor.backend': (
    one_of(BACKEND_SETTINGS),
    "'vmap', 'loop', or 'auto' (the measured rule, executor/choice.py)",
  ),
  'executor.unroll': (_unroll, 'lax.scan unroll of local steps'),
  'executor.bucket_bits': (_INTEGERS, 'bucketing of batch sizes (fewer compiled shapes)'),
  'executor.step_loop': (
    one_of(STEP_LOOP_SETTINGS),
    "'scan', 'host' (one jitted step per local step) or 'auto'",
  ),
  'executor.deferred': (boolean, 'compute tasks lazily in batches (same results)'),
  'executor.devices': (_INTEGERS, 'local devices the task axis is sharded over (vmap)'),
  'executor.threads': (
    positive(integer=True, allow_zero=True),
    'loop backend: tasks run at once; 0 = one per CPU core (1 on accelerators)',
  ),
  'executor.max_batch_tasks': (
    positive(integer=True, allow_zero=True),
    'most tasks computed at once, hence client updates held; larger rounds are summed in '
    'chunks (linear aggregators); 0 = as many as fit in 1 GiB (16 to 4096)',
  ),
  'run.num_rounds': (positive(integer=True, optional=True), 'server versions to run'),
  'run.max_virtual_time': (positive(optional=True), 'virtual seconds to run'),
  'run.max_client_updates': (
    positive(integer=True, optional=True),
    'client updates (arrived tasks) to run',
  ),
  'run.eval_every': (_INTEGERS, 'server versions between evaluations'),
  'run.eval_batch_size': (_INTEGERS, 'evaluation batch size'),
  'run.target_accuracy': (
    number(above=0, maximum=1, optional=True),
    'summary.json reports when test accuracy first reached it',
  ),
  'run.eval_balanced_accuracy': (boolean, 'also report balanced accuracy'),
  'run.eval_top_k': (_tuple_of(_INTEGERS, 'a tuple of integers >= 1'), 'also report top-k'),
  'run.compilation_cache': (
    _compilation_cache,
    "'process' shares compiled programs between runs, 'off', or a directory",
  ),
  'run.checkpoint_every': (
    positive(integer=True, optional=True),
    'checkpoint every this many server versions (docs/checkpoints.md)',
  ),
  'run.checkpoint_every_minutes': (
    positive(optional=True),
    'checkpoint when this much host time has passed',
  ),
  'run.keep_checkpoints': (_INTEGERS, 'newest checkpoints kept'),
  'run.check_memory': (
    boolean,
    'refuse a run whose estimated memory exceeds what is available (fedsim_jax/memory_estimate.py)',
  ),
  'run.on_divergence': (
    one_of(('stop', 'continue')),
    "NaN/inf loss or parameters: 'stop' (exit 3) or 'continue'",
  ),
  'run.distributed': (
    boolean,
    'run over several processes with jax.distributed; process 0 writes (docs/distributed.md)',
  ),
  'run.coordinator_address': (
    text(optional=True),
    'host:port of process 0 (None: FEDSIM_COORDINATOR_ADDRESS or the cluster launcher)',
  ),
  'run.num_processes': (
    positive(integer=True, optional=True),
    'processes of a distributed run (None: FEDSIM_NUM_PROCESSES or the launcher)',
  ),
  'run.process_id': (
    _OPTIONAL_INDEX,
    "this process's index (None: FEDSIM_PROCESS_ID or the launcher)",
  ),
  'run.write_tasks': (
    boolean,
    'write the task trace, tasks.jsonl: one record per client task (docs/observability.md)',
  ),
  'run.tensorboard': (
    boolean,
    'write TensorBoard scalars of every metric to <workdir>/tensorboard (when tensorboardX '
    'is installed)',
  ),
}
# Sections that select a registered plugin (`name`, `kwargs`, `module`) other than the
# algorithm, with their registries: `describe` lists each entry's settings.
PLUGIN_SECTIONS = {
  'model': MODELS,
  'latency': LATENCY_MODELS,
  'availability': AVAILABILITY_MODELS,
}


def _get(config: ml_collections.ConfigDict, path: str) -> Any:
  node: Any = config
  for part in path.split('.'):
    node = node[part]
  return node


def resolve_plugin(config: ml_collections.ConfigDict, section: str) -> Selection:
  """`config[section]` (model, latency or availability) resolved: its registered name and
  validated settings, importing `<section>.module` first; raises `ConfigError`."""
  registry = PLUGIN_SECTIONS[section]
  registry.import_module(config[section].module)
  return registry.resolve(config[section].name, config[section].kwargs.to_dict())


def validate(config: ml_collections.ConfigDict) -> None:
  """Checks every setting outside `algorithm.kwargs` that can be checked without data (the
  algorithm's own settings are checked by `fedsim_jax.algorithms.resolve_settings`): each
  field by its `FIELDS` check, the model's, latency and availability models' settings by their
  settings dataclasses, then the rules between fields; raises `ConfigError`."""
  check_known_fields(config, base_config())
  for path, (check, _) in FIELDS.items():
    check(path, _get(config, path))
  for section in PLUGIN_SECTIONS:
    resolve_plugin(config, section)
  data, client, executor, run = config.data, config.client, config.executor, config.run
  if data.num_stragglers is not None and data.straggler_classes is None:
    raise ConfigError('data.num_stragglers needs data.straggler_classes (a tuple of classes)')
  if client.local_steps is not None and client.local_epochs is not None:
    raise ConfigError(
      'client.local_steps / client.local_epochs: set at most one of them (the other to None)'
    )
  if executor.step_loop == 'host' and executor.backend == 'vmap':
    raise ConfigError(
      "executor.step_loop='host' is invalid with executor.backend="
      f"{executor.backend!r}; allowed: step_loop 'host' with backend 'loop'"
    )
  if executor.threads > 1 and executor.backend == 'vmap':
    raise ConfigError(
      f'executor.threads={executor.threads} is invalid with executor.backend='
      "'vmap'; allowed: threads > 1 with backend 'loop' or 'auto'"
    )
  if executor.devices > 1 and executor.backend == 'loop':
    raise ConfigError(
      f'executor.devices={executor.devices} is invalid with executor.backend='
      f"{executor.backend!r}; allowed: devices > 1 with backend 'vmap'"
    )
  address = run.coordinator_address
  if address is not None:
    host, _, port = address.rpartition(':')
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
      raise ConfigError(
        f'run.coordinator_address={address!r} is invalid; allowed values: host:port with a '
        'port 1..65535, or None'
      )
  if (
    run.process_id is not None
    and run.num_processes is not None
    and run.process_id >= run.num_processes
  ):
    raise ConfigError(
      f'run.process_id={run.process_id} is invalid with run.num_processes='
      f'{run.num_processes}; allowed: 0..{run.num_processes - 1}'
    )
  if run.num_rounds is None and run.max_virtual_time is None and run.max_client_updates is None:
    raise ConfigError(
      'run.num_rounds / run.max_virtual_time / run.max_client_updates: set at least one limit'
    )


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
  lines.append(PARTITIONERS.describe())
  return '\n'.join(lines)
