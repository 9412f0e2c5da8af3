"""Builds and runs a whole experiment from a config: the one function binaries call.

`run_experiment(config, workdir)` loads and partitions the data, builds the model, algorithm,
executor, latency model and simulation, runs it, and writes `config.json`, `metrics.jsonl` and
`summary.json` into `workdir`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from fedsim_jax import algorithms, compilation_cache, distributed, interrupts, memory_estimate
from fedsim_jax import config as config_lib
from fedsim_jax import workdir as workdir_lib
from fedsim_jax.checkpointing import CheckpointError, Checkpoints, Restored, WriteError
from fedsim_jax.client import client_optimizer
from fedsim_jax.data import partition as partition_lib
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
from fedsim_jax.data.federated import FederatedDataset, steps_for_epochs
from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.data.loading import load_dataset
from fedsim_jax.executor import Executor, cpu_pool
from fedsim_jax.executor.choice import (
  compiler_options,
  model_has_convolution,
  resolve_execution,
  resolve_max_batch_tasks,
  resolve_threads,
)
from fedsim_jax.metrics import MetricsWriter, make_evaluator, summarize, write_json
from fedsim_jax.metrics.tensorboard import TensorBoardWriter, tensorboard_available
from fedsim_jax.metrics.writers import TaskTraceWriter
from fedsim_jax.models import Model, ModelContext
from fedsim_jax.models import build_model as build_registered_model
from fedsim_jax.provenance import code_record, code_version
from fedsim_jax.registry import Selection
from fedsim_jax.runtime import Simulation, SimulationStalled, StopCondition
from fedsim_jax.runtime.latency import (
  AvailabilityContext,
  LatencyContext,
)
from fedsim_jax.runtime.latency import build_availability as build_registered_availability
from fedsim_jax.runtime.latency import build_latency as build_registered_latency
from fedsim_jax.runtime.statistics import staleness_histogram, statistics
from fedsim_jax.saved_run import model_description, save_models
from fedsim_jax.settings import Settings


@dataclasses.dataclass(frozen=True)
class RandomStreams:
  """Independent random streams derived from one seed, so that changing one component (say,
  the latency model) never changes another's draws (say, client sampling)."""

  init_key: jax.Array
  train_key: jax.Array
  scheduler_rng: np.random.Generator
  latency_rng: np.random.Generator
  availability_rng: np.random.Generator
  probe_rng: np.random.Generator  # for estimates made before the run (e.g. time limits)

  @classmethod
  def from_seed(cls, seed: int) -> RandomStreams:
    init_key, train_key = jax.random.split(jax.random.PRNGKey(seed))
    scheduler, latency, availability, probe = np.random.SeedSequence(seed).spawn(4)
    return cls(
      init_key=init_key,
      train_key=train_key,
      scheduler_rng=np.random.default_rng(scheduler),
      latency_rng=np.random.default_rng(latency),
      availability_rng=np.random.default_rng(availability),
      probe_rng=np.random.default_rng(probe),
    )


def model_selection(config: ml_collections.ConfigDict) -> Selection:
  """`config.model` resolved: the registered model and its validated settings."""
  return config_lib.resolve_plugin(config, 'model')


def latency_selection(config: ml_collections.ConfigDict) -> Selection:
  """`config.latency` resolved: the registered latency model and its validated settings."""
  return config_lib.resolve_plugin(config, 'latency')


def availability_selection(config: ml_collections.ConfigDict) -> Selection:
  """`config.availability` resolved: the availability model and its validated settings."""
  return config_lib.resolve_plugin(config, 'availability')


def plugin_selections(config: ml_collections.ConfigDict) -> dict[str, Selection]:
  """The resolved model, latency and availability sections, by section name."""
  return {
    'model': model_selection(config),
    'latency': latency_selection(config),
    'availability': availability_selection(config),
  }


def run_facts(
  config: ml_collections.ConfigDict, model: Selection | None = None
) -> algorithms.RunFacts:
  """What the algorithm may check or read of the config's other sections (`model`: the
  resolved model section, resolved from `config` when not given)."""
  model = model_selection(config) if model is None else model
  client = config.client
  return algorithms.RunFacts(
    num_clients=config.data.num_clients,
    num_rounds=config.run.num_rounds,
    seed=config.seed,
    client_optimizer=client.optimizer,
    client_learning_rate=client.learning_rate,
    batch_size=client.batch_size,
    local_steps=client.local_steps,
    local_epochs=client.local_epochs,
    sampling=client.sampling,
    model_norm=getattr(model.settings, 'norm', None),
  )


def algorithm_settings(config: ml_collections.ConfigDict) -> Settings:
  """The validated settings of `config.algorithm` (importing `algorithm.module` first)."""
  algorithms.import_module(config.algorithm.module)
  return algorithms.resolve_settings(
    config.algorithm.name, config.algorithm.kwargs.to_dict(), run_facts(config)
  )


def validate(config: ml_collections.ConfigDict) -> Settings:
  """Checks every setting of `config` that can be checked without data, the algorithm's, the
  model's, the latency and availability models' included; returns the algorithm's settings.
  Raises `ConfigError`."""
  config_lib.validate(config)
  return algorithm_settings(config)


def client_budgets(config: ml_collections.ConfigDict, num_clients: int) -> np.ndarray:
  """The compute budgets p_i the configured algorithm draws (the budget_skewed partition
  skews data by them)."""
  settings = algorithm_settings(config)
  if not hasattr(settings, 'client_budgets'):
    raise config_lib.ConfigError(
      f"data.partition='budget_skewed' is invalid with algorithm.name={config.algorithm.name!r} "
      '(it has no compute budgets); allowed: an algorithm with budgets (ccfedavg, ...)'
    )
  return settings.client_budgets(num_clients, config.seed)


def _built(section: str, selection: Selection, build: Callable[[], Any]) -> Any:
  """`build()`, with an error of the federation's making (a trace too short, a per-client
  array of the wrong length) as a `ConfigError` naming the section's model."""
  try:
    return build()
  except config_lib.ConfigError:
    raise
  except (ValueError, TypeError, FileNotFoundError) as error:
    raise config_lib.ConfigError(f'{section}.name={selection.name!r}: {error}') from None


def build_latency(
  config: ml_collections.ConfigDict,
  dataset: FederatedDataset,
  model_bytes: int,
  rng: np.random.Generator,
  selection: Selection | None = None,
):
  """The latency model `selection` (default: `config.latency` resolved) selects, built for
  `dataset` with generator `rng`; invalid settings raise `ConfigError`."""
  selection = latency_selection(config) if selection is None else selection
  context = LatencyContext(
    num_clients=dataset.num_clients,
    rng=rng,
    client_sizes=dataset.client_sizes,
    batch_size=config.client.batch_size,
    model_bytes=model_bytes,
    straggler_mask=dataset.straggler_mask,
  )
  return _built('latency', selection, lambda: build_registered_latency(selection, context))


def epoch_compute_time_percentile(
  config: ml_collections.ConfigDict,
  dataset: FederatedDataset,
  model_bytes: int,
  percentile: float,
  rng: np.random.Generator,
  draws_per_client: int = 20,
) -> float:
  """The population-wide percentile of one local epoch's on-device compute time (overhead +
  steps x step time; communication excluded), estimated from a probe copy of the latency model
  so that the run's own latency draws are untouched (the straggler paper's time limit)."""
  probe = build_latency(config, dataset, model_bytes, rng)
  times = []
  for client in range(dataset.num_clients):
    steps = steps_for_epochs(
      1.0, int(dataset.client_sizes[client]), config.client.batch_size, config.client.sampling
    )
    times.extend(probe.sample(client).compute_time(steps) for _ in range(draws_per_client))
  return float(np.percentile(times, percentile))


def resolve_settings(
  config: ml_collections.ConfigDict, dataset: FederatedDataset, model: Model
) -> ml_collections.ConfigDict:
  """Replaces settings given relative to the federation by their values (today:
  `algorithm.kwargs.time_limit_percentile` -> `algorithm.kwargs.time_limit`)."""
  percentile = getattr(algorithm_settings(config), 'time_limit_percentile', None)
  if percentile is None:
    return config
  streams = RandomStreams.from_seed(config.seed)
  model_bytes = 4 * model.num_params(jax.eval_shape(model.init, streams.init_key))
  limit = epoch_compute_time_percentile(config, dataset, model_bytes, percentile, streams.probe_rng)
  config = config.copy_and_resolve_references()
  with config.algorithm.kwargs.unlocked():
    config.algorithm.kwargs.time_limit = limit
    config.algorithm.kwargs.time_limit_percentile = None
  logging.info(
    'algorithm.kwargs.time_limit = %.2fs (percentile %g of one-epoch compute time)',
    limit,
    percentile,
  )
  return config


def build_availability(
  config: ml_collections.ConfigDict,
  dataset: FederatedDataset,
  rng: np.random.Generator,
  selection: Selection | None = None,
):
  """The availability model `selection` (default: `config.availability` resolved) selects,
  built for `dataset` with generator `rng`; invalid settings raise `ConfigError`."""
  selection = availability_selection(config) if selection is None else selection
  context = AvailabilityContext(num_clients=dataset.num_clients, rng=rng)
  return _built(
    'availability', selection, lambda: build_registered_availability(selection, context)
  )


def _load_central_dataset(name: str, data_dir: str | None) -> Any:
  """`load_dataset`, with a data dir that is a file and a file that cannot be read as one-line
  errors (`ConfigError`, `CorruptDatasetError`) rather than the OS error's traceback."""
  if data_dir is not None:
    path = os.path.expanduser(data_dir)
    if os.path.exists(path) and not os.path.isdir(path):
      raise config_lib.ConfigError(
        f'data.data_dir={data_dir} is a file; allowed values: a directory of prepared datasets'
      )
  try:
    return load_dataset(name, data_dir)
  except DatasetNotFoundError:  # (a FileNotFoundError): its message says how to prepare it
    raise
  except OSError as error:
    where = error.filename or data_dir or 'the data dir'
    raise CorruptDatasetError(
      f'dataset {name!r}: cannot read {where} ({error.strerror or error}); allowed: a prepared '
      'dataset this user can read (fix its permissions, or prepare it again)'
    ) from None


def build_federated_dataset(config: ml_collections.ConfigDict) -> FederatedDataset:
  """Loads `config.data.name` and partitions its training split over clients."""
  data = config.data
  central = _load_central_dataset(data.name, data.data_dir)
  seed = config.seed if data.partition_seed is None else data.partition_seed
  try:
    # budget_skewed's shards follow the p_i the algorithm draws (from the same seed stream).
    budgets = (
      client_budgets(config, data.num_clients) if data.partition == 'budget_skewed' else None
    )
    parts = partition_lib.partition_by_name(
      data.partition,
      central.train_y,
      data.num_clients,
      seed,
      client_ids=central.train_client_ids,
      dataset_name=central.name,
      budgets=budgets,
      concentration=data.concentration,
      min_client_size=data.min_client_size,
      balance=data.balance,
      shards_per_client=data.shards_per_client,
      classes_per_client=data.classes_per_client,
      alpha_1=data.alpha_1,
      alpha_2=data.alpha_2,
      gamma=data.gamma,
      budget_skew=data.budget_skew,
      skewed_fraction=data.skewed_fraction,
    )
    straggler_mask = None
    if data.straggler_classes is not None:
      parts, straggler_mask = partition_lib.straggler_domain_split(
        central.train_y, parts, list(data.straggler_classes), data.num_stragglers
      )
  except ValueError as error:  # an impossible partition is a settings error
    raise config_lib.ConfigError(f'data.partition={data.partition!r}: {error}') from None
  federation = LazyFederation if data.lazy else FederatedDataset
  return federation.from_partition(
    central.name,
    central.train_x,
    central.train_y,
    parts,
    central.test_x,
    central.test_y,
    central.num_classes,
    straggler_mask=straggler_mask,
  )


def model_kwargs(selection: Selection) -> dict[str, Any]:
  """The architecture's own settings of a resolved model section, every field with its value
  (what `get_model` takes as kwargs)."""
  return selection.settings.as_dict()


def build_model(
  config: ml_collections.ConfigDict,
  dataset: FederatedDataset,
  selection: Selection | None = None,
) -> Model:
  """The model `selection` (default: `config.model` resolved) selects, for `dataset`'s inputs
  and classes."""
  selection = model_selection(config) if selection is None else selection
  context = ModelContext(selection.name, tuple(dataset.input_shape), dataset.num_classes)
  return build_registered_model(selection, context)


def build_simulation(
  config: ml_collections.ConfigDict,
  dataset: FederatedDataset,
  model: Model,
  on_version: Callable[[Simulation], None] | None = None,
  settings: Settings | None = None,
  before_allocation: Callable[[algorithms.Algorithm], None] | None = None,
  host_threads: int = 1,
) -> Simulation:
  """Wires model, algorithm, executor and latency model into a ready-to-run `Simulation`;
  `settings`: the algorithm's, when already resolved from `config`; `before_allocation`:
  called with the built algorithm before the model's parameters or the data's device copy
  are allocated (the memory check); `host_threads`: the simulations run at once in this
  process (`Executor`)."""
  streams = RandomStreams.from_seed(config.seed)
  model_bytes = 4 * model.num_params(jax.eval_shape(model.init, streams.init_key))
  latency = build_latency(config, dataset, model_bytes, streams.latency_rng)
  availability = build_availability(config, dataset, streams.availability_rng)
  context = algorithms.BuildContext(
    config.algorithm.name, run_facts(config), dataset.client_sizes, latency
  )
  try:
    algorithm = algorithms.build(settings or algorithm_settings(config), context)
  except ValueError as error:
    raise config_lib.ConfigError(str(error)) from None
  if before_allocation is not None:
    before_allocation(algorithm)
  init_params = model.init(streams.init_key)
  client = config.client
  optimizer = client_optimizer(
    client.optimizer,
    client.learning_rate,
    momentum=client.momentum,
    weight_decay=client.weight_decay,
  )
  client_update = algorithm.make_client_update(model, optimizer, client.batch_size)
  lazy = isinstance(dataset, LazyFederation)
  backend, step_loop = resolve_execution(
    config.executor.backend,
    config.executor.step_loop,
    devices=config.executor.devices,
    convolutional=lambda: model_has_convolution(model, init_params),
  )
  try:
    executor = Executor(
      client_update,
      dataset if lazy else dataset.device_arrays(),
      streams.train_key,
      backend=backend,
      sampling=client.sampling,
      unroll=config.executor.unroll,
      bucket_bits=config.executor.bucket_bits,
      step_loop=step_loop,
      devices=config.executor.devices,
      threads=resolve_threads(config.executor.threads, backend),
      host_threads=host_threads,
    )
  except ValueError as error:  # e.g. more devices than this host has
    raise config_lib.ConfigError(str(error)) from None
  return Simulation(
    executor=executor,
    scheduler=algorithm.scheduler,
    aggregator=algorithm.aggregator,
    latency=latency,
    availability=availability,
    init_params=init_params,
    client_sizes=dataset.client_sizes,
    rng=streams.scheduler_rng,
    deferred=config.executor.deferred,
    on_version=on_version,
    bucket_bits=config.executor.bucket_bits,
    max_batch_tasks=config.executor.max_batch_tasks,
  )


def stop_condition(config: ml_collections.ConfigDict) -> StopCondition:
  return StopCondition(
    max_versions=config.run.num_rounds,
    max_virtual_time=config.run.max_virtual_time,
    max_client_updates=config.run.max_client_updates,
  )


# Settings a resumed run may change: how long it runs, how it checkpoints, and what only its
# host side or summary reads. Anything else would make it a different run.
RESUMABLE_CHANGES = (
  'run.num_rounds',
  'run.max_virtual_time',
  'run.max_client_updates',
  'run.checkpoint_every',
  'run.checkpoint_every_minutes',
  'run.keep_checkpoints',
  'run.compilation_cache',
  'run.target_accuracy',
  'run.check_memory',
  'run.tensorboard',
  'run.write_tasks',  # turned off, or on, a run goes on without its task trace
  'run.distributed',
  'run.coordinator_address',
  'run.num_processes',
  'run.process_id',
  'executor.threads',
  'executor.devices',  # each task's key derives from its seed: results do not depend on it
)
STATUSES = ('completed', 'interrupted', 'diverged', 'failed')


class Diverged(Exception):
  """The evaluated model's test loss or parameters became NaN or infinite (the message is the
  one line the binary prints)."""


def _all_finite(tree: Any) -> bool:
  return all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree_util.tree_leaves(tree))


def _finite_or_none(value: Any) -> Any:
  return None if isinstance(value, float) and not math.isfinite(value) else value


def _flatten(tree: Any, prefix: str = '') -> dict[str, Any]:
  if isinstance(tree, dict):
    flat: dict[str, Any] = {}
    for key, value in tree.items():
      flat.update(_flatten(value, f'{prefix}{key}.'))
    return flat
  return {prefix[:-1]: list(tree) if isinstance(tree, tuple) else tree}


def config_differences(
  saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any] | None = None
) -> list[str]:
  """Dotted names of the settings in which two resolved configs differ, other than those a
  resumed run may change (`RESUMABLE_CHANGES`).

  A setting missing from `saved` (added to fedsim_jax after that run started) is no difference
  when `current` holds its value in `defaults`: settings are added with defaults that keep the
  earlier behaviour, so the checkpointed run used it."""
  old, new = _flatten(saved), _flatten(json.loads(json.dumps(current)))
  added_defaults = _flatten(json.loads(json.dumps(defaults or {})))
  missing = object()
  return sorted(
    name
    for name in set(old) | set(new)
    if old.get(name, missing) != new.get(name, missing)
    and name not in RESUMABLE_CHANGES
    and not (name not in old and name in added_defaults and new.get(name) == added_defaults[name])
  )


def default_settings(
  settings: Settings, selections: dict[str, Selection] | None = None
) -> dict[str, Any]:
  """The resolved config of `base_config()` with `settings`' algorithm defaults and the
  defaults of the model, latency and availability models `selections` name: the values a
  setting added after a run started is given by default (see `config_differences`)."""
  defaults = config_lib.base_config().to_dict()
  defaults['algorithm']['kwargs'] = type(settings)().as_dict()
  for section, selection in (selections or {}).items():
    defaults[section]['kwargs'] = type(selection.settings)().as_dict()
  return defaults


class PreparedRun:
  """An experiment ready to run: data, model, simulation, evaluator and output files.

  `run_experiment` is `PreparedRun(...).run()`; lockstep sweeps (`run_experiments_lockstep`)
  prepare several, run their simulations together and finish each.

  The workdir is checked, and the config validated, before anything is written: a workdir that
  holds a run is refused unless `resume` (continue it from its newest checkpoint, bit for bit
  the run that was never stopped; `docs/checkpoints.md`) or `overwrite` (replace it). The
  workdir's lock is taken before the data load and the check repeated under it, so that a run
  that finished in the meantime is never deleted; a start-up that fails (or is interrupted)
  releases it, and removes the workdir again if it created it.
  """

  def __init__(
    self,
    config: ml_collections.ConfigDict,
    workdir: str | os.PathLike,
    dataset: FederatedDataset | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    host_threads: int = 1,
  ):
    self._lock: workdir_lib.WorkdirLock | None = None
    try:
      self._prepare(
        config, workdir, dataset, resume=resume, overwrite=overwrite, host_threads=host_threads
      )
    except BaseException:
      if self._lock is not None:
        self._lock.abandon()
      raise

  def _prepare(
    self,
    config: ml_collections.ConfigDict,
    workdir: str | os.PathLike,
    dataset: FederatedDataset | None,
    *,
    resume: bool,
    overwrite: bool,
    host_threads: int,
  ) -> None:
    settings = validate(config)
    run = config.run
    cpu_pool.reserve(config.executor.devices, host_threads)  # before JAX starts, if it has not
    if run.distributed:  # before anything touches a device
      distributed.initialize(run.coordinator_address, run.num_processes, run.process_id)
    # In a multi-process run only process 0 writes the workdir; the others write their own
    # outputs into a scratch folder, deleted at the end, and read the workdir's checkpoints.
    self.primary = not run.distributed or distributed.is_primary()
    checkpoint_dir = os.path.join(os.path.abspath(workdir), 'checkpoints')
    if self.primary:
      workdir = workdir_lib.check(workdir, resume=resume, overwrite=overwrite)
    else:
      workdir = tempfile.mkdtemp(prefix=f'fedsim-process{jax.process_index()}-')
    self._lock = workdir_lib.WorkdirLock(workdir)
    if self.primary:  # again under the lock: a run may have ended there since the first check
      workdir_lib.check(workdir, resume=resume, overwrite=overwrite)
    try:
      cache_dir = compilation_cache.enable(config.run.compilation_cache)
    except ValueError as e:
      raise config_lib.ConfigError(str(e)) from None
    self.workdir = workdir
    self.host_start = time.perf_counter()
    if dataset is None:
      dataset = build_federated_dataset(config)
    # A settings class need not derive from the shared groups (`Settings` suffices), so the
    # federation hook is optional, like `check_run`.
    check_federation = getattr(settings, 'check_federation', None)
    if check_federation is not None:
      check_federation(dataset.num_clients, algorithms.base.KWARGS_PREFIX)
    self.dataset = dataset
    self.selections = plugin_selections(config)
    model = build_model(config, dataset, self.selections['model'])
    self.model_description = model_description(model, model_kwargs(self.selections['model']))
    config = resolve_settings(config, dataset, model)
    self.config = config
    self.algorithm_settings = algorithm_settings(config)
    # The resolved config: every setting of the algorithm, the model, the latency and the
    # availability model with its value, defaults included, so that config.json alone
    # describes (and reruns) the run.
    resolved = config.to_dict()
    resolved['algorithm']['kwargs'] = self.algorithm_settings.as_dict()
    for section, selection in self.selections.items():
      resolved[section]['kwargs'] = selection.settings.as_dict()

    def on_version(sim: Simulation) -> None:
      if sim.version % config.run.eval_every == 0:
        self.record(sim)
      if self._checkpoint_due(sim):
        self._checkpoint_requested = True
        sim.request_pause()  # the checkpoint is written once the current event is done

    # Built before anything is written (building writes nothing); the memory check runs
    # once the algorithm is known, before the model's parameters are allocated.
    def check_memory(algorithm: algorithms.Algorithm) -> None:
      if config.run.check_memory:
        self._check_memory(config, dataset, model, algorithm)

    self.simulation = build_simulation(
      config,
      dataset,
      model,
      on_version,
      settings=self.algorithm_settings,
      before_allocation=check_memory,
      host_threads=host_threads,
    )
    self.checkpoints = Checkpoints(checkpoint_dir, keep=config.run.keep_checkpoints)
    restored = self._checkpoint_to_resume(resolved) if resume else None
    try:  # class metrics are checked against the dataset's classes
      self._evaluate = make_evaluator(
        model,
        dataset.test_x,
        dataset.test_y,
        config.run.eval_batch_size,
        class_groups={
          name: tuple(classes) for name, classes in config.run.eval_class_groups.items()
        }
        or None,
        balanced_accuracy=config.run.eval_balanced_accuracy,
        top_k=tuple(config.run.eval_top_k),
      )
    except ValueError as error:  # its messages name the evaluator's argument
      message = str(error)
      named = message.startswith(('top_k', 'class_groups[', 'balanced_accuracy'))
      raise config_lib.ConfigError(('run.eval_' if named else 'run.eval_*: ') + message) from None
    # Everything is checked: from here on the run writes.
    if restored is None:
      workdir_lib.clear_results(workdir)  # --overwrite, or nothing to resume
    # At once, so that a run killed from here on (an extension of a finished run included)
    # never leaves an earlier end's summary beside newer metrics.
    self._write_summary({'status': workdir_lib.RUNNING})
    write_json(os.path.join(workdir, 'config.json'), resolved)
    self._resolved_config = json.loads(json.dumps(resolved))
    run_state = restored.state['run'] if restored is not None else {}
    self.writer = MetricsWriter(workdir, rows=run_state.get('rows', ()))
    self.task_trace = self._task_trace_writer(config, restored)
    self.tensorboard = None
    if config.run.tensorboard:
      if tensorboard_available():
        self.tensorboard = TensorBoardWriter(workdir, rows=self.writer.rows)
      else:
        logging.info('run.tensorboard: tensorboardX is not installed; no TensorBoard log')
    self._client_classes = (
      None
      if dataset.straggler_mask is None
      else {'straggler': dataset.straggler_mask, 'standard': ~dataset.straggler_mask}
    )
    self._last_evaluated = run_state.get('last_evaluated', -1)
    # Host time and number of the earlier processes of this run, up to the checkpoint it
    # resumed from (work done after that checkpoint was lost and is redone); None when the
    # checkpoint predates the record.
    self._earlier_host_seconds = run_state.get('host_seconds') if restored is not None else 0.0
    earlier_processes = run_state.get('processes_run') if restored is not None else 0
    self._processes_run = None if earlier_processes is None else earlier_processes + 1
    # The code of every process of this run, oldest first (None: before a checkpoint that
    # predates the record).
    self._code = [*(run_state.get('code', [None]) if restored is not None else []), code_version()]
    self._best = run_state.get('best')  # (accuracy, version, evaluated params) or None
    self.host_extra: dict[str, Any] = {}  # e.g. lockstep batching figures, for summary['host']
    self._checkpoint_requested = False
    self._last_checkpoint_time = time.perf_counter()
    self._warned_divergence = False
    self._outputs_closed = False
    self._final_summary: dict[str, Any] | None = None  # the summary `finish` wrote
    self.checkpoint_seconds = 0.0  # host time spent writing checkpoints (this process)
    self.checkpoints_written = 0

    self.simulation.task_log = self.task_trace
    self.stop = stop_condition(config)
    executor = self.simulation.executor
    self.host_extra.update(
      backend=executor.backend,
      step_loop=executor.step_loop,
      threads=executor.threads,
      max_batch_tasks=self.simulation.max_batch_tasks,
      devices=executor.devices,
      processes=jax.process_count(),
      compilation_cache=compilation_cache.in_use(cache_dir),
      xla_options=compiler_options(),
    )
    logging.info(
      '%s on %s: %d clients, model %s (%d parameters), latency %s, backend %s '
      '(steps: %s, threads: %d)',
      config.algorithm.name,
      dataset.name,
      dataset.num_clients,
      model.name,
      model.num_params(self.simulation.params),
      config.latency.name,
      executor.backend,
      executor.step_loop,
      executor.threads,
    )
    logging.info(
      'algorithm %s settings (defaults included): %s',
      config.algorithm.name,
      ', '.join(f'{k}={v}' for k, v in self.algorithm_settings.as_dict().items()),
    )
    if restored is None:
      self.record(self.simulation)
    else:
      self.simulation.restore(restored.state['simulation'])
      logging.info(
        'resumed from checkpoint %d: version %d, virtual time %.1fs',
        restored.step,
        self.simulation.version,
        self.simulation.now,
      )
    self.simulation_start = time.perf_counter()
    self._progress_start = (self.simulation_start, progress(self.stop, self.simulation) or 0.0)

  def _check_memory(
    self,
    config: ml_collections.ConfigDict,
    dataset: FederatedDataset,
    model: Model,
    algorithm: algorithms.Algorithm,
  ) -> None:
    """Refuses (`ConfigError`) a run whose estimated memory exceeds what is available, from
    abstract shapes only (`memory_estimate`)."""
    params = memory_estimate.abstract_params(model)
    model_bytes = memory_estimate.tree_bytes(params)
    executor = config.executor
    max_batch_tasks = executor.max_batch_tasks
    backend, _ = resolve_execution(executor.backend, executor.step_loop, devices=executor.devices)
    lazy = isinstance(dataset, LazyFederation) or config.data.lazy
    needs = memory_estimate.estimate(
      self.algorithm_settings,
      num_clients=dataset.num_clients,
      model_bytes=model_bytes,
      data_bytes=0 if lazy else dataset.train_x.nbytes + dataset.train_y.nbytes,
      execution=memory_estimate.Execution(
        max_batch_tasks=None
        if max_batch_tasks is None
        else resolve_max_batch_tasks(max_batch_tasks, model_bytes),
        # The vmap backend trains a whole batch at once; the loop backend `threads` tasks.
        training_at_once=None if backend == 'vmap' else resolve_threads(executor.threads, backend),
        sums_in_chunks=algorithm.aggregator.linear is not None,
        batch_size=config.client.batch_size,
        example_bytes=memory_estimate.training_bytes_per_example(model, params),
      ),
      model_setting=memory_estimate.model_size_setting(self.selections['model']),
    )
    memory_estimate.check_fits(needs, memory_estimate.available_bytes())

  def _checkpoint_to_resume(self, resolved: dict[str, Any]) -> Restored | None:
    try:
      restored = self.checkpoints.load_latest()
    except CheckpointError as error:
      raise config_lib.ConfigError(f'--resume: {error}') from None
    if restored is None:
      if workdir_lib.holds_results(self.workdir):  # a run stopped before its first checkpoint
        logging.warning('--resume: no checkpoint in %s; starting from the beginning', self.workdir)
      return None
    differing = config_differences(
      config_lib.upgrade_layout(restored.meta['config']),
      resolved,
      default_settings(self.algorithm_settings, self.selections),
    )
    if differing:
      raise config_lib.ConfigError(
        f'--resume: the config differs from the checkpointed run in {", ".join(differing)}; '
        f'allowed changes: {", ".join(RESUMABLE_CHANGES)}'
      )
    return restored

  def _task_trace_writer(
    self, config: ml_collections.ConfigDict, restored: Restored | None
  ) -> TaskTraceWriter | None:
    """The writer of `tasks.jsonl`: a new trace, or, resuming, the checkpointed trace cut back
    to its checkpointed length. A trace is whole or absent: a resumed run goes on without one,
    with a warning, where the checkpointed part is lost (the file is missing or shorter than
    the checkpoint records), the checkpointed run wrote none, or `run.write_tasks` is off now."""
    if not config.run.write_tasks:
      if restored is not None and self.primary:
        self._drop_task_trace('run.write_tasks is off')
      return None
    # (a non-primary process's scratch trace starts empty: only process 0's is kept)
    if restored is None or not self.primary:
      return TaskTraceWriter(self.workdir)
    offset = restored.state['run'].get('tasks_offset')
    if offset is None:
      self._drop_task_trace('the checkpointed run kept no task trace')
      return None
    path = os.path.join(self.workdir, 'tasks.jsonl')
    size = os.path.getsize(path) if os.path.isfile(path) else None
    if size is None or size < offset:
      lost = (
        'it is missing' if size is None else f'it has {size} of its checkpointed {offset} bytes'
      )
      self._drop_task_trace(f'{path} cannot be continued ({lost})')
      return None
    return TaskTraceWriter(self.workdir, offset=offset)

  def _drop_task_trace(self, reason: str) -> None:
    path = os.path.join(self.workdir, 'tasks.jsonl')
    if os.path.lexists(path):
      os.remove(path)  # a trace of part of the run would read as the whole run's
    logging.warning('--resume: %s; the run goes on without its task trace (tasks.jsonl)', reason)

  def _checkpoint_due(self, sim: Simulation) -> bool:
    run = self.config.run
    return (run.checkpoint_every is not None and sim.version % run.checkpoint_every == 0) or (
      run.checkpoint_every_minutes is not None
      and time.perf_counter() - self._last_checkpoint_time >= 60 * run.checkpoint_every_minutes
    )

  def save_checkpoint(self) -> None:
    """Writes the whole run's state (simulation and outputs so far) as a new checkpoint."""
    sim = self.simulation
    start = time.perf_counter()
    state = {
      'simulation': sim.state(),
      'run': {
        'rows': self.writer.rows,
        'tasks_offset': None if self.task_trace is None else self.task_trace.offset(),
        'last_evaluated': self._last_evaluated,
        'best': self._best,
        'host_seconds': self._total_host_seconds(),
        'processes_run': self._processes_run,
        'code': self._code,
      },
    }
    if self.config.run.distributed:  # every process gathers; process 0 writes
      state = distributed.to_host(state)
    if self.primary:
      self.checkpoints.save(
        state, {'version': sim.version, 'virtual_time': sim.now, 'config': self._resolved_config}
      )
    if self.tensorboard is not None:
      self.tensorboard.flush()
    self._checkpoint_requested = False
    self._last_checkpoint_time = time.perf_counter()
    self.checkpoint_seconds += self._last_checkpoint_time - start
    self.checkpoints_written += 1

  def record(self, sim: Simulation) -> None:
    """Evaluates the server model and writes a metrics row."""
    eval_params = sim.eval_params
    metrics = self._evaluate(eval_params)
    self._last_evaluated = sim.version
    diverged = not (math.isfinite(metrics['loss']) and _all_finite((eval_params, sim.params)))
    if diverged and self.config.run.on_divergence == 'stop':
      raise Diverged(self._divergence_message(sim, metrics['loss']))
    if diverged and not self._warned_divergence:
      self._warned_divergence = True
      logging.warning('%s; continuing (run.on_divergence)', self._divergence_message(sim, None))
    if not diverged and (self._best is None or metrics['accuracy'] > self._best[0]):
      self._best = (float(metrics['accuracy']), sim.version, eval_params)
    row = {
      'virtual_time': sim.now,
      'version': sim.version,
      'client_updates': sim.client_updates,
      'gradient_steps': sim.gradient_steps,
      'test_accuracy': metrics['accuracy'],
      'test_loss': metrics['loss'],
      **{
        f'test_{name}': value
        for name, value in metrics.items()
        if name not in ('accuracy', 'loss', 'num_examples')
      },
      **statistics(sim, self._client_classes, window=True),
    }
    if diverged:  # (the summary's best accuracy and the best model skip this evaluation)
      row['diverged'] = True
    sim.reset_window()
    row = {name: _finite_or_none(value) for name, value in row.items()}
    self.writer.write(row)
    if self.tensorboard is not None:
      self.tensorboard.write(row)
    logging.info(
      '%s  virtual time %.1fs  client updates %d  test accuracy %.4f  loss %.4f  host %.1fs%s',
      self._version_progress(sim),
      sim.now,
      sim.client_updates,
      metrics['accuracy'],
      metrics['loss'],
      time.perf_counter() - self.host_start,
      self._eta(sim),
    )

  def _version_progress(self, sim: Simulation) -> str:
    limit = self.stop.max_versions
    return f'version {sim.version}/{limit}' if limit else f'version {sim.version}'

  def _eta(self, sim: Simulation) -> str:
    """'  ETA 1m05s (40%)': the host time left, from this process's pace so far, towards the
    stop condition's nearest limit ('' before there is a pace to go by)."""
    done = progress(self.stop, sim)
    if done is None or not hasattr(self, '_progress_start'):  # the first row: no pace yet
      return ''
    start_time, start_done = self._progress_start
    if done <= start_done:
      return ''
    left = (time.perf_counter() - start_time) * (1 - done) / (done - start_done)
    minutes, seconds = divmod(round(left), 60)
    return f'  ETA {minutes}m{seconds:02d}s ({100 * done:.0f}%)'

  def _divergence_message(self, sim: Simulation, loss: float | None) -> str:
    rates = [f'client.learning_rate={self.config.client.learning_rate}'] + [
      f'algorithm.kwargs.{name}={value}'
      for name, value in self.algorithm_settings.as_dict().items()
      if 'learning_rate' in name
    ]
    what = 'non-finite parameters' if loss is None or math.isfinite(loss) else f'test loss {loss}'
    return (
      f'diverged at version {sim.version} (virtual time {sim.now:.1f}s): {what}; algorithm '
      f'{self.config.algorithm.name}, {", ".join(rates)}; lower the learning rates, or set '
      "run.on_divergence='continue'"
    )

  def run(self) -> dict[str, Any]:
    """Runs the simulation to its stop condition, checkpointing on the way and at the end;
    returns the summary.

    SIGINT/SIGTERM stop it cleanly: a checkpoint and an `interrupted` summary
    (`summary['signal']`) are written; one that arrives while the final outputs are written
    waits for them (the run completes), and a second signal stops the run at once (an
    `interrupted` summary; its newest checkpoint is what `--resume` continues). A checkpoint or
    output that cannot be written (a full disk, a read-only folder) ends it as `failed`, with a
    one-line `message` naming the path and the cause.
    """
    with interrupts.stop_requests(self.simulation.request_pause) as interrupt:
      try:
        status, extra = self.run_until_stopped(interrupt)
        summary = self.finish_stopped(status, extra)
      except KeyboardInterrupt:  # a second SIGINT
        return self._stopped_at_once(signal.SIGINT)
      except Exception as error:
        with contextlib.suppress(OSError):
          self._write_summary(self._summary('failed', error=f'{type(error).__name__}: {error}'))
        self._lock.release()
        raise
    if interrupt.signal is not None and summary['status'] == 'completed':
      logging.warning('the stop request came as the run ended: its outputs were completed first')
    return summary

  def run_until_stopped(self, interrupt: interrupts.Interrupt) -> tuple[str, dict[str, Any]]:
    """Runs the simulation until its stop condition, `interrupt`'s signal, a divergence, a
    stall or an output it cannot write, checkpointing on the way and (unless it diverged or
    stalled) at the end; returns the status and the summary fields for `finish_stopped`. Any
    other error writes a `failed` summary and is raised. `interrupt` is installed by the caller
    (`run`, or a lockstep sweep's, which pauses every simulation of the sweep)."""
    sim = self.simulation
    try:
      while interrupt.signal is None:
        sim.run(self.stop)
        if interrupt.signal is not None or sim.finished(self.stop):
          break
        if self._checkpoint_requested:
          self.save_checkpoint()
      self.save_checkpoint()
    except Diverged as error:
      return 'diverged', {'message': str(error)}
    except SimulationStalled as error:
      return 'failed', {'message': str(error)}
    except OSError as error:  # a checkpoint, metrics row or task record that cannot be written
      return 'failed', self._write_failure(error)
    except Exception as error:
      with contextlib.suppress(OSError):
        self._write_summary(self._summary('failed', error=f'{type(error).__name__}: {error}'))
      self._lock.release()
      raise
    if interrupt.signal is not None and not sim.finished(self.stop):
      return 'interrupted', {'signal': interrupt.signal}
    return 'completed', {}  # (a signal that came as the run reached its end waits for `finish`)

  def finish_stopped(self, status: str, extra: dict[str, Any]) -> dict[str, Any]:
    """`finish(status, **extra)` for a run that `run_until_stopped` stopped; a divergence found
    by the final evaluation ends it as `diverged` (before anything final was written)."""
    try:
      return self.finish(status, **extra)
    except Diverged as error:
      return self.finish('diverged', message=str(error))

  def _write_failure(self, error: OSError) -> dict[str, str]:
    """The summary fields of a run stopped by an output it could not write."""
    if isinstance(error, WriteError):
      what = str(error)
    else:  # (a write to an open file names none: then the workdir)
      what = f'cannot write {error.filename or f"into {self.workdir}"}: {error.strerror or error}'
    return {
      'message': f'{what}; fix that and rerun with --resume (it continues from the newest '
      'checkpoint)',
      'error': f'{type(error).__name__}: {what}',
    }

  def _stopped_at_once(self, signum: int) -> dict[str, Any]:
    """Ends a run that a second signal stopped in the middle of whatever it was doing."""
    if self._final_summary is not None:  # it had ended already
      self._lock.release()
      return self._final_summary
    self._close_outputs(unresolved_tasks=False)  # the simulation may be mid-event
    summary = self._summary(
      'interrupted',
      signal=signum,
      message='stopped at once by a second signal; --resume continues from the newest checkpoint',
    )
    with contextlib.suppress(OSError):
      self._write_summary(summary)
    self._lock.release()
    return summary

  def _summary(self, status: str, **extra: Any) -> dict[str, Any]:
    sim, config = self.simulation, self.config
    simulation_seconds = time.perf_counter() - self.simulation_start
    summary = {'status': status, **extra}
    summary.update(summarize(self.writer.rows, config.run.target_accuracy))
    summary.update(self._best_of_finite_models())
    summary.update(sim.report())
    summary['statistics'] = {
      **statistics(sim, self._client_classes),
      'staleness_histogram': staleness_histogram(sim),
    }
    scheduler_report = getattr(sim.scheduler, 'report', None)
    if scheduler_report is not None:
      summary['scheduler'] = scheduler_report()
    summary['host'] = {
      'seconds': time.perf_counter() - self.host_start,
      'total_seconds': self._total_host_seconds(),
      'processes_run': self._processes_run,
      'code': code_record(self._code),
      'simulation_seconds': simulation_seconds,
      'compiled_client_programs': sim.executor.num_compiled_programs,
      'checkpoints_written': self.checkpoints_written,
      'checkpoint_seconds': self.checkpoint_seconds,
      'client_examples_per_second': (
        sim.executor.steps_run * config.client.batch_size / max(simulation_seconds, 1e-9)
      ),
      **self.host_extra,
    }
    return summary

  def _best_of_finite_models(self) -> dict[str, Any]:
    """The summary's best accuracy and accuracy target, from the evaluations of finite models
    only (`run.on_divergence='continue'`), so that they describe the saved `best` model."""
    rows = self.writer.rows
    finite = [row for row in rows if not row.get('diverged')]
    if len(finite) == len(rows):
      return {}
    target = self.config.run.target_accuracy
    found = summarize(finite, target)
    keys = ['best_accuracy', 'best_accuracy_time']
    if target is not None:
      keys += ['time_to_target', 'version_to_target', 'client_updates_to_target']
    return {key: found.get(key) for key in keys}

  def _total_host_seconds(self) -> float | None:
    """Host seconds this run's result has cost: this process's so far plus the earlier
    processes' up to the checkpoint this one resumed from (None if they are unknown)."""
    if self._earlier_host_seconds is None:
      return None
    return self._earlier_host_seconds + time.perf_counter() - self.host_start

  def _write_summary(self, summary: dict[str, Any]) -> None:
    write_json(os.path.join(self.workdir, 'summary.json'), summary)

  def _close_outputs(self, unresolved_tasks: bool = True) -> OSError | None:
    """Closes metrics.jsonl, tasks.jsonl (after the tasks still unresolved, unless not
    `unresolved_tasks`) and the TensorBoard log, once; returns the error of one that could not
    be written out (a full disk), if any."""
    if self._outputs_closed:
      return None
    self._outputs_closed = True
    failure = None
    closes = [self.writer.close]
    if self.task_trace is not None:
      if unresolved_tasks:  # after the last checkpoint: a resumed run truncates them
        closes.append(self.simulation.write_unresolved_tasks)
      closes.append(self.task_trace.close)
    if self.tensorboard is not None:
      closes.append(self.tensorboard.close)
    for close in closes:
      try:
        close()
      except OSError as error:
        failure = failure or error
    return failure

  def _write_final_outputs(self) -> None:
    """`clients.json` and the saved models of a completed run."""
    sim = self.simulation
    write_json(
      os.path.join(self.workdir, 'clients.json'),
      {
        'dispatched': sim.dispatch_counts.tolist(),
        'aggregated': sim.aggregated_counts.tolist(),
        'gradient_steps': sim.steps_per_client.tolist(),
        'busy_time': sim.busy_time.tolist(),
      },
    )
    models = {'final': sim.params}
    if self._best is not None:
      models['best'] = self._best[2]
    if sim.eval_params is not sim.params:
      models['evaluated'] = sim.eval_params
    if self.config.run.distributed:
      models = distributed.to_host(models)
    if self.primary:
      save_models(self.workdir, self.model_description, models)

  def finish(self, status: str = 'completed', **extra: Any) -> dict[str, Any]:
    """Writes `summary.json` (and, for a completed run, the final evaluation, `clients.json`
    and the saved models); returns the summary. A completed run whose outputs cannot be written
    ends `failed` instead (`_write_failure`)."""
    if status not in STATUSES:
      raise ValueError(f'status={status!r}; allowed: {STATUSES}')
    sim = self.simulation
    if status == 'completed' and self._last_evaluated != sim.version:
      self.record(sim)
    failure = self._close_outputs()
    if status == 'completed' and failure is None:
      try:
        self._write_final_outputs()
      except OSError as error:
        failure = error
    if status == 'completed' and failure is not None:
      status, extra = 'failed', self._write_failure(failure)
    summary = self._summary(status, **extra)
    try:
      self._write_summary(summary)
    except OSError as error:  # summary.json still says 'running': the run reads as killed
      if status == 'completed':
        summary = self._summary('failed', **self._write_failure(error))
      else:
        logging.warning('cannot write %s (%s)', error.filename, error.strerror)
    self._final_summary = summary
    self._lock.release()
    if not self.primary:
      shutil.rmtree(self.workdir, ignore_errors=True)
    return summary


def progress(stop: StopCondition, sim: Simulation) -> float | None:
  """How far `sim` is towards `stop` (0 to 1): the nearest of its limits; None without one."""
  fractions = [
    done / limit
    for done, limit in (
      (sim.version, stop.max_versions),
      (sim.now, stop.max_virtual_time),
      (sim.client_updates, stop.max_client_updates),
    )
    if limit
  ]
  return min(max(fractions), 1.0) if fractions else None


def run_experiment(
  config: ml_collections.ConfigDict,
  workdir: str | os.PathLike,
  dataset: FederatedDataset | None = None,
  *,
  resume: bool = False,
  overwrite: bool = False,
) -> dict[str, Any]:
  """Runs the experiment described by `config`, writing its outputs into `workdir`.

  Args:
    config: see `fedsim_jax.config.base_config`; validated first.
    workdir: run directory (created if needed).
    dataset: an already built federation (skips loading and partitioning), e.g. in tests.
    resume: continue the run in `workdir` from its newest checkpoint (from the start if it
      has none); the config may differ only in `RESUMABLE_CHANGES` (e.g. a longer run).
    overwrite: replace the run in `workdir`.

  Returns:
    The summary dict also written to `summary.json`; `summary['status']` is 'completed',
    'interrupted' after SIGINT/SIGTERM, 'diverged' (`summary['message']` says where) or
    'failed' (a run that stalled: `summary['message']`).

  Raises:
    ConfigError: an invalid setting or workdir (before anything is written).
    DatasetNotFoundError / CorruptDatasetError: the dataset is not prepared or unreadable.
  """
  return PreparedRun(config, workdir, dataset, resume=resume, overwrite=overwrite).run()


def _without_seeds(config: ml_collections.ConfigDict) -> dict[str, Any]:
  settings = config.to_dict()
  settings.pop('seed')
  settings['data'].pop('partition_seed')
  settings['run'].pop('eval_every', None)
  return settings


def run_experiments_lockstep(
  configs: Sequence[ml_collections.ConfigDict],
  workdirs: Sequence[str | os.PathLike],
  datasets: Sequence[FederatedDataset | None] | None = None,
  *,
  resume: bool = False,
  overwrite: bool = False,
) -> list[dict[str, Any]]:
  """Runs several experiments that differ only in their seeds together
  (`fedsim_jax.runtime.lockstep`); each run directory gets exactly what `run_experiment` would
  write (timings aside).

  Each run is a `PreparedRun` of its own and stops as `run_experiment` does: it checkpoints
  into its own directory (periodically, at the end and on SIGINT/SIGTERM), and `resume` and
  `overwrite` apply to every run directory as in `run_experiment`. A run that diverges or
  stalls ends with its own summary while the others run on; SIGINT/SIGTERM stop every run
  with a checkpoint and an `interrupted` summary.

  With the vmap backend the simulations advance in lockstep and their client tasks run as one
  shared batch; with the loop backend (one program call per task, the CPU default) they run at
  once, each with its own executor, sharing the task threads. `summary['host']['lockstep']`
  says which (`execution`).

  Returns:
    Each run's summary, in the order of `configs` (see `run_experiment`).

  Raises:
    ConfigError: the configs differ in more than `seed`, `data.partition_seed` and
      `run.eval_every`, ask for a lazy federation (not supported in lockstep), or any run's
      settings or workdir are invalid (before any workdir is written).
  """
  from fedsim_jax.runtime.lockstep import run_concurrently

  if len(configs) != len(workdirs):
    raise ValueError('run_experiments_lockstep needs one workdir per config')
  reference = _without_seeds(configs[0])
  for config in configs[1:]:
    if _without_seeds(config) != reference:
      raise config_lib.ConfigError(
        'lockstep sweeps need configs that differ only in seed, '
        'data.partition_seed and run.eval_every'
      )
  if configs[0].data.lazy:
    raise config_lib.ConfigError('data.lazy=True is invalid in a lockstep sweep; allowed: False')
  for workdir in workdirs:  # every workdir, before the first run writes its own
    workdir_lib.check(workdir, resume=resume, overwrite=overwrite)
  # Without `datasets`, every run loads the same dataset: `load_dataset` decodes it once and
  # hands every seed the same arrays, which a shared batch's union then holds once.
  datasets = list(datasets) if datasets is not None else [None] * len(configs)
  runs = [
    PreparedRun(c, w, d, resume=resume, overwrite=overwrite, host_threads=len(configs))
    for c, w, d in zip(configs, workdirs, datasets)
  ]
  first = runs[0].simulation.executor
  start = time.perf_counter()
  for run in runs:
    run.simulation_start = start

  def pause_every_simulation() -> None:
    for run in runs:
      run.simulation.request_pause()

  # One signal handler for the sweep: SIGINT/SIGTERM pause every simulation, and each run
  # stops as `PreparedRun.run` does (a checkpoint, then an `interrupted` summary).
  with interrupts.stop_requests(pause_every_simulation) as interrupt:
    drivers = [functools.partial(run.run_until_stopped, interrupt) for run in runs]
    if first.backend == 'loop':
      # One program call per task: nothing to gain from a shared batch, so each simulation
      # keeps its executor and they run at once (see `run_concurrently`).
      endings = run_concurrently(drivers, runs[0].simulation)
      info = {'simulations': len(runs), 'execution': 'concurrent'}
    else:
      endings, info = _run_in_shared_batches(runs, drivers)
    # Still under the handler: a signal while the final outputs are written waits for them,
    # and a second SIGINT stops the runs not yet finished at once (as in `PreparedRun.run`).
    summaries: list[dict[str, Any]] = []
    try:
      for run, (status, extra) in zip(runs, endings):
        run.host_extra['lockstep'] = dict(info)
        summaries.append(run.finish_stopped(status, extra))
    except KeyboardInterrupt:
      summaries += [run._stopped_at_once(signal.SIGINT) for run in runs[len(summaries) :]]
  return summaries


def _run_in_shared_batches(
  runs: Sequence[PreparedRun], drivers: Sequence[Callable[[], Any]]
) -> tuple[list[Any], dict[str, Any]]:
  """Gives the runs' simulations one executor over the union of their federations and calls
  the drivers in lockstep; returns the drivers' results and the sharing figures."""
  from fedsim_jax.runtime.lockstep import lockstep_executors, run_lockstep

  first = runs[0].simulation.executor
  config = runs[0].config
  settings = dict(
    backend=first.backend,
    sampling=config.client.sampling,
    unroll=config.executor.unroll,
    bucket_bits=first.bucket_bits,
    step_loop=first.step_loop,
    devices=first.devices,
    threads=first.threads,
    host_threads=first.host_threads,
  )
  shared, executors = lockstep_executors(
    lambda data, keys: Executor(first.client_update, data, keys, **settings),
    [r.dataset for r in runs],
    [r.simulation.executor.base_key for r in runs],
  )
  for run, executor in zip(runs, executors):
    run.simulation.executor = executor
  endings = run_lockstep(drivers, shared)
  info = {
    'simulations': len(runs),
    'execution': 'shared_batches',
    'shared_batches': shared.batches,
    'mean_shared_batch_size': shared.executor.tasks_run / max(shared.batches, 1),
  }
  return endings, info
