"""A run's specification: its config resolved once, at the edge, into typed frozen settings.

`RunSpec.from_config` checks every setting that can be checked without data and resolves each
plugin section (algorithm, dataset source, partitioner, model, latency and availability model)
into its registered entry and validated settings. Everything below the edge (the build step,
the memory check, the lifecycle, lockstep sweeps) reads a `RunSpec`, never a `ConfigDict`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from fedsim_jax import algorithms
from fedsim_jax import config as config_lib
from fedsim_jax.data import datasets
from fedsim_jax.registry import Selection
from fedsim_jax.run_settings import ClientSettings, DataSettings, ExecutorSettings, RunSettings
from fedsim_jax.settings import Settings
from fedsim_jax.transforms import plugins as transform_plugins

# The sections that select a registered plugin, in the config's order; `data` selects the
# dataset source (`RunSpec.dataset`).
PLUGIN_FIELDS = {
  'algorithm': 'algorithm',
  'data': 'dataset',
  'partition': 'partition',
  'model': 'model',
  'latency': 'latency',
  'availability': 'availability',
  'attack': 'attack',
  'privacy': 'privacy',
  'compression': 'compression',
  'robust': 'robust',
}

# The numeric hyperparameters the runs of a lockstep sweep may differ in besides their seeds
# (`RunSpec.without_hyperparameters`), by section: `client.<field>`, and
# `algorithm.kwargs.<field>` of whichever algorithm has the field. Each is a float that only
# scales arithmetic: no array shape, no number of steps, tasks or versions and no setting
# resolved at build time depends on it. A run reads each one only in its own client update,
# aggregator or scheduler. With the vmap backend, a lockstep sweep trains runs whose client
# tasks compile to the same program (`RunSpec.client_program_key`) in shared batches: the
# server-side ones (`SERVER_HYPERPARAMETERS`) never reach that program, and the client
# optimizer's (`client.*`) are its arguments, one value per run (`Executor(client_update_for=
# ...)`); the algorithms' client terms (proximal and distillation strength, MOON's mu, FedDyn's
# alpha) are constants of it, so runs differing in one train in batches of their own.
LOCKSTEP_HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
  'client': ('learning_rate', 'momentum', 'weight_decay'),
  'algorithm': (
    'server_learning_rate',  # eta_g of the server optimizer
    'server_momentum',
    'b1',  # the adaptive server optimizers' decays and epsilon
    'b2',
    'eps',
    'staleness_a',  # the staleness function's exponent and hinge
    'staleness_b',
    'alpha',  # FedAsync's and FedCompass's mixing weight, FedDyn's regulariser
    'proximal_strength',  # mu of FedProx's proximal term
    'distillation_strength',
    'mu',  # MOON's contrastive weight
  ),
}


# Of `LOCKSTEP_HYPERPARAMETERS['algorithm']`, those only the server side reads (the server
# optimizer, the staleness function, FedAsync's, FedCompass's and FedASMU's mixing weight), in
# the built-in algorithms but those `CLIENT_UPDATE_READS` names.
SERVER_HYPERPARAMETERS = (
  'server_learning_rate',
  'server_momentum',
  'b1',
  'b2',
  'eps',
  'staleness_a',
  'staleness_b',
  'alpha',
)

# Built-in algorithms whose client update reads a lockstep hyperparameter as a constant beyond
# the client optimizer: FedDyn's regulariser its `alpha`, Ditto's personal step
# `client.learning_rate` (unless `personal_learning_rate` is set; kept either way).
CLIENT_UPDATE_READS: dict[str, tuple[str, ...]] = {
  'feddyn': ('algorithm.kwargs.alpha',),
  'ditto': ('client.learning_rate',),
}

_BUILT_IN_ALGORITHMS = 'fedsim_jax.algorithms.'


def lockstep_hyperparameter_names() -> tuple[str, ...]:
  """The dotted settings of `LOCKSTEP_HYPERPARAMETERS` (`client.learning_rate`, ...)."""
  prefixes = {'client': 'client.', 'algorithm': 'algorithm.kwargs.'}
  return tuple(
    prefixes[section] + field
    for section, fields in LOCKSTEP_HYPERPARAMETERS.items()
    for field in fields
  )


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """Everything a run is built from, validated: the settings of the `data` (federation),
  `client`, `executor` and `run` sections, and each plugin section as its registered name with
  validated settings (`Selection`)."""

  seed: int
  data: DataSettings
  client: ClientSettings
  executor: ExecutorSettings
  run: RunSettings
  # `run.eval_class_groups`: named class subsets reported as test_accuracy/<name>.
  eval_class_groups: tuple[tuple[str, tuple[int, ...]], ...]
  algorithm: Selection
  dataset: Selection  # the dataset source `data.name` selects
  partition: Selection
  model: Selection
  latency: Selection
  availability: Selection
  # Update transforms (fedsim_jax.transforms): each section's no-op by default.
  attack: Selection
  privacy: Selection
  compression: Selection
  robust: Selection
  # `<section>.module` of each plugin section: the user module imported to register it.
  modules: tuple[tuple[str, str | None], ...] = ()

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> RunSpec:
    """`config` checked and resolved (importing each `<section>.module` first); raises
    `ConfigError` naming the first invalid setting."""
    config_lib.check_fields(config)  # unknown and moved fields, the seed, the sections' names
    sections = config_lib.section_settings(config)
    plugins = {
      section: config_lib.resolve_plugin(config, section) for section in config_lib.PLUGIN_SECTIONS
    }
    datasets.DATASET_SOURCES.import_module(config.data.module)
    dataset = datasets.resolve(config.data.name, config.data.kwargs.to_dict())
    data, client, run = sections['data'], sections['client'], sections['run']
    facts = run_facts(config.seed, data, client, run, plugins['model'])  # type: ignore[arg-type]
    algorithms.import_module(config.algorithm.module)
    algorithm = Selection(
      config.algorithm.name,
      algorithms.resolve_settings(config.algorithm.name, config.algorithm.kwargs.to_dict(), facts),
    )
    spec = cls(
      seed=config.seed,
      data=data,  # type: ignore[arg-type]  # SECTIONS maps each section to its class
      client=client,  # type: ignore[arg-type]
      executor=sections['executor'],  # type: ignore[arg-type]
      run=run,  # type: ignore[arg-type]
      eval_class_groups=tuple(
        (name, tuple(classes)) for name, classes in config.run.eval_class_groups.items()
      ),
      algorithm=algorithm,
      dataset=dataset,
      modules=tuple((section, config[section].module) for section in PLUGIN_FIELDS),
      **plugins,
    )
    # The transforms' rules between sections and with the algorithm (Krum's batch, DP's
    # denominator, central noise after a robust aggregator), before any data is loaded.
    transform_plugins.build_transform(spec.transform_selections(), spec.transform_context())
    return spec

  @property
  def facts(self) -> algorithms.RunFacts:
    """What the algorithm may check or read of the other sections."""
    return run_facts(self.seed, self.data, self.client, self.run, self.model)

  @property
  def partition_seed(self) -> int:
    """The partition's seed: `data.partition_seed`, or the run's seed."""
    return self.seed if self.data.partition_seed is None else self.data.partition_seed

  @property
  def updates_per_aggregation(self) -> int | None:
    """Updates the algorithm aggregates at a time (its buffer_size or cohort_size), or None
    when it has neither."""
    settings = self.algorithm.settings
    return getattr(settings, 'buffer_size', None) or getattr(settings, 'cohort_size', None)

  def transform_selections(self) -> dict[str, Selection]:
    """The update-transform sections (attack, privacy, compression, robust), resolved."""
    return {section: getattr(self, section) for section in transform_plugins.SECTIONS}

  def transform_context(
    self, num_clients: int | None = None, num_params: int = 0
  ) -> transform_plugins.TransformContext:
    """What the update transforms' factories read of this run (`num_clients`: the
    federation's, when it is built; `num_params`: coordinates of one update)."""
    return transform_plugins.TransformContext(
      num_clients=self.data.num_clients if num_clients is None else num_clients,
      seed=self.seed,
      updates_per_aggregation=self.updates_per_aggregation,
      num_params=num_params,
    )

  def with_algorithm_settings(self, settings: Settings) -> RunSpec:
    """This spec with the algorithm's settings replaced (e.g. a setting given relative to the
    federation, resolved to its value)."""
    return dataclasses.replace(self, algorithm=Selection(self.algorithm.name, settings))

  def selections(self) -> dict[str, Selection]:
    """The resolved plugin sections other than the algorithm, by config section."""
    return {
      section: getattr(self, field)
      for section, field in PLUGIN_FIELDS.items()
      if section != 'algorithm'
    }

  def to_dict(self) -> dict[str, Any]:
    """The config this spec resolves, every setting with its value (each plugin's defaults
    included), laid out as the config is: what `config.json` holds, and what reruns the run."""
    modules = dict(self.modules)

    def plugin(section: str) -> dict[str, Any]:
      selection: Selection = getattr(self, PLUGIN_FIELDS[section])
      return {
        'name': selection.name,
        'kwargs': selection.settings.as_dict(),
        'module': modules.get(section),
      }

    return {
      'seed': self.seed,
      'algorithm': plugin('algorithm'),
      'data': {**plugin('data'), **self.data.as_dict()},
      'partition': plugin('partition'),
      'model': plugin('model'),
      'client': self.client.as_dict(),
      'latency': plugin('latency'),
      'availability': plugin('availability'),
      **{section: plugin(section) for section in transform_plugins.SECTIONS},
      'executor': self.executor.as_dict(),
      'run': {
        **self.run.as_dict(),
        'eval_class_groups': {name: classes for name, classes in self.eval_class_groups},
      },
    }

  def without_seeds(self) -> RunSpec:
    """This spec with the settings a lockstep sweep's runs may differ in (`seed`,
    `data.partition_seed`, `run.eval_every`) set to fixed values."""
    return dataclasses.replace(
      self,
      seed=0,
      data=self.data.replace(partition_seed=None),
      run=self.run.replace(eval_every=1),
    )

  def without_hyperparameters(self) -> RunSpec:
    """`without_seeds`, with the numeric hyperparameters of `LOCKSTEP_HYPERPARAMETERS` set to
    fixed values too: specs equal under it may run in one lockstep sweep."""
    spec = self.without_seeds()
    client_fields = LOCKSTEP_HYPERPARAMETERS['client']
    settings = spec.algorithm.settings
    algorithm_fields = set(LOCKSTEP_HYPERPARAMETERS['algorithm']) & set(settings.field_names())
    return dataclasses.replace(
      spec,
      client=spec.client.replace(**dict.fromkeys(client_fields, 0.0)),
      algorithm=Selection(
        spec.algorithm.name, settings.replace(**dict.fromkeys(algorithm_fields, 0.0))
      ),
    )

  def client_hyperparameters(self) -> dict[str, float]:
    """The client optimizer's numeric hyperparameters by name (`learning_rate`, `momentum`,
    `weight_decay`): the values a shared executor passes its programs for this run's tasks
    (`Executor(stream_hyperparameters=...)`)."""
    return {name: float(getattr(self.client, name)) for name in LOCKSTEP_HYPERPARAMETERS['client']}

  def client_program_key(self) -> RunSpec:
    """`without_seeds`, with the hyperparameters that do not change the program a client task
    compiles to set to fixed values: runs with equal keys may train in one vmapped program
    (the client optimizer's values its arguments, `client_hyperparameters`).

    Fixed: the server-side `SERVER_HYPERPARAMETERS`, and the client optimizer's values but
    for whether `client.weight_decay` is 0 (a weight decay is an optimizer chain element; the
    momentum optimizer keeps a trace for every momentum). Kept: the algorithms' client terms
    and what `CLIENT_UPDATE_READS` names. An algorithm registered outside fedsim_jax keeps
    every hyperparameter (its factory may read any of them into its client update)."""
    spec = self.without_seeds()
    algorithm = self.algorithm.name
    factory = algorithms.get_spec(algorithm).factory
    if not getattr(factory, '__module__', '').startswith(_BUILT_IN_ALGORITHMS):
      return spec
    kept = CLIENT_UPDATE_READS.get(algorithm, ())
    client = {'momentum': 0.0, 'weight_decay': float(bool(spec.client.weight_decay))}
    if 'client.learning_rate' not in kept:
      client['learning_rate'] = 0.0
    settings = spec.algorithm.settings
    server = {
      name
      for name in set(SERVER_HYPERPARAMETERS) & set(settings.field_names())
      if f'algorithm.kwargs.{name}' not in kept
    }
    return dataclasses.replace(
      spec,
      client=spec.client.replace(**client),
      algorithm=Selection(algorithm, settings.replace(**dict.fromkeys(server, 0.0))),
    )


def as_spec(config: RunSpec | ml_collections.ConfigDict) -> RunSpec:
  """`config` as a `RunSpec` (resolved from a `ConfigDict`; a `RunSpec` as it is): the public
  build functions take either."""
  return config if isinstance(config, RunSpec) else RunSpec.from_config(config)


def run_facts(
  seed: int, data: DataSettings, client: ClientSettings, run: RunSettings, model: Selection
) -> algorithms.RunFacts:
  """What the algorithm may check or read of the run's other sections."""
  return algorithms.RunFacts(
    num_clients=data.num_clients,
    num_rounds=run.num_rounds,
    seed=seed,
    client_optimizer=client.optimizer,
    client_learning_rate=client.learning_rate,
    client_momentum=client.momentum,
    client_weight_decay=client.weight_decay,
    batch_size=client.batch_size,
    local_steps=client.local_steps,
    local_epochs=client.local_epochs,
    sampling=client.sampling,
    model_norm=getattr(model.settings, 'norm', None),
  )
