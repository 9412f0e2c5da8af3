"""fedsim_jax: a JAX-vectorised simulator for federated learning on heterogeneous clients.

`import fedsim_jax as fs` gives the public API, each name imported on first use (importing the
package itself loads no JAX):

  the runtime       fs.Simulation, fs.StopCondition, fs.TaskHandle, fs.Scheduler (the protocol
                    a scheduler follows), fs.SchedulerContext (what it sees and may do),
                    fs.Aggregator, fs.UpdateBatch, fs.PerStepLatency, ...
  execution         fs.Executor, fs.NoTrainingExecutor, fs.sgd_client_update, fs.local_update
  strategies        every name of `fedsim_jax.strategy`, the kit algorithms share: the
                    schedulers (fs.SynchronousScheduler, fs.AsynchronousScheduler, ...), the
                    server updates (fs.server_update, fs.server_optimizer, reducers such as
                    fs.weighted_mean, fs.staleness_scaled, ...), fs.LocalWork; and the
                    schedulers and aggregators of single papers from `fedsim_jax.algorithms`
                    (fs.CompassScheduler, fs.fedasmu_aggregator, fs.fedasync, ...)
  data and models   fs.load_dataset, fs.FederatedDataset, the partitioners of
                    `fedsim_jax.data.partitioners` (fs.iid, fs.dirichlet, fs.shards, ...),
                    fs.get_model, fs.Model
  experiments       fs.base_config, fs.RunSpec (a config resolved: what runs are built from),
                    fs.run_experiment, fs.run_experiments_lockstep, fs.load_run,
                    fs.algorithms (the registry module), fs.Settings, fs.setting, fs.ConfigError,
                    fs.RunWriter and fs.RunInfo (a tracker of one's own: docs/logging.md)

Layers, bottom to top; a layer imports only the rows below it (tests/test_import_graph.py):
  settings, str_enum, tree     (ConfigError and typed settings, option enums; pytree helpers)
  registry                     (named plugins with typed settings)
  checkpointing, distributed, interrupts, provenance, workdir   (a run's lifecycle:
                               checkpoints, processes, signals, the code it ran on, its folder)
  data, models                 (side by side: neither imports the other)
  client
  executor
  metrics
  runtime
  transforms                   (update transforms on any aggregator: privacy, robustness,
                               attackers, compression)
  strategy                     (the kit algorithms share: schedulers, server updates, reducers)
  algorithms                   (one module or package per paper: settings, scheduler,
                               aggregator, client objective, registered factory)
  moved_settings, run_settings (the config's settings classes and its moved names)
  config, compilation_cache, saved_run
  run_spec                     (a config resolved once, at the edge: what all below receive)
  memory_estimate, lifecycle   (a built run in its workdir: outputs, checkpoints, statuses)
  build                        (spec -> the parts of a run, writing nothing)
  experiment, configs          (configs: the shipped experiment configs, `get_config()` each)
  analysis
  cli
  run                          (the experiment binary, `fedsim-run`)
  fedsim_jax                   (this facade)
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = '0.1.0'

# Public name -> the module that defines it (relative to this package). The strategy names are
# listed here, not read from `strategy.__all__`, because reading it would import JAX with the
# package; tests/test_public_api.py checks that every name of `strategy.__all__` is here.
_STRATEGY = (
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
)
# The schedulers and aggregators of single papers, from their algorithm's module.
_PAPERS: dict[str, str] = {
  **dict.fromkeys(
    ('DeltaHistory', 'FareDustScheduler', 'fare_dust_client_update'),
    'algorithms.stragglers.fare_dust',
  ),
  **dict.fromkeys(
    ('FeastScheduler', 'FeastState', 'auxiliary_update', 'feast_aggregator'),
    'algorithms.stragglers.feast_msg',
  ),
  **dict.fromkeys(('MixingState', 'fedasync', 'fedasync_delta'), 'algorithms.fedasync'),
  **dict.fromkeys(
    ('ArrivalGroup', 'ClientRecord', 'CompassScheduler', 'compass_aggregator'),
    'algorithms.fedcompass',
  ),
  **dict.fromkeys(
    ('TieredScheduler', 'TierState', 'cross_tier_weights', 'fedat_aggregator', 'speed_tiers'),
    'algorithms.fedat',
  ),
  'FedasmuScheduler': 'algorithms.fedasmu.scheduler',
  **dict.fromkeys(('FetchInputs', 'fedasmu_client_update'), 'algorithms.fedasmu.device'),
  'fedasmu_aggregator': 'algorithms.fedasmu.server',
}
_PARTITIONERS = (
  'PARTITIONERS',
  'PartitionContext',
  'iid',
  'dirichlet',
  'shards',
  'class_partition',
  'fedcompass_class_partition_settings',
  'dual_dirichlet',
  'fedcompass_dual_dirichlet_settings',
  'gamma_mix',
  'two_classes_per_client',
  'budget_skewed',
  'natural',
  'straggler_domain_split',
  'partition',
  'run_partitioner',
)
_EXPORTS: dict[str, str] = {
  **dict.fromkeys(
    (
      'Simulation',
      'StopCondition',
      'TaskHandle',
      'TaskAccounting',
      'SimulationStalled',
      'Scheduler',
      'SchedulerContext',
      'Aggregator',
      'UpdateBatch',
      'weighted_mean_delta',
      'LatencyModel',
      'TaskLatency',
      'PerStepLatency',
      'Availability',
      'AlwaysAvailable',
    ),
    'runtime',
  ),
  **dict.fromkeys(('Executor', 'NoTrainingExecutor', 'ClientTask'), 'executor'),
  **dict.fromkeys(('sgd_client_update', 'local_update', 'ClientUpdate'), 'client'),
  **dict.fromkeys(_STRATEGY, 'strategy'),
  **_PAPERS,
  **dict.fromkeys(
    (
      'load_dataset',
      'default_data_dir',
      'FederatedDataset',
      'CentralizedDataset',
      'DatasetNotFoundError',
      'toy_federation',
    ),
    'data',
  ),
  **dict.fromkeys(_PARTITIONERS, 'data.partitioners'),
  **dict.fromkeys(('get_model', 'Model'), 'models'),
  **dict.fromkeys(('Settings', 'setting', 'ConfigError'), 'settings'),
  'base_config': 'config',
  'RunSpec': 'run_spec',
  **dict.fromkeys(('run_experiment', 'run_experiments_lockstep'), 'experiment'),
  'load_run': 'saved_run',
  **dict.fromkeys(('RunWriter', 'RunInfo'), 'metrics.run_writer'),
}
_SUBMODULES = ('algorithms',)

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str) -> Any:
  # Imported on first use, so that `import fedsim_jax` (and `import fedsim_jax.<layer>`) stays
  # light: no JAX until a name that needs it is used.
  if name in _SUBMODULES:
    return importlib.import_module(f'{__name__}.{name}')
  if name in _EXPORTS:
    value = getattr(importlib.import_module(f'{__name__}.{_EXPORTS[name]}'), name)
    globals()[name] = value  # later uses skip this function
    return value
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__() -> list[str]:
  return sorted({*globals(), *__all__})
