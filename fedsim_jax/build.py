"""The build step: a config, resolved at the edge, into the parts of a run.

Each plugin section is resolved into its `Selection` (`validate`, `*_selection`), then
`build_run` builds the dataset, model, algorithm, latency and availability models, executor,
simulation and evaluator. Building writes nothing: no workdir, no files, no signal handlers;
what a run writes is its lifecycle's (`fedsim_jax.lifecycle`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging

from fedsim_jax import algorithms, memory_estimate
from fedsim_jax import config as config_lib
from fedsim_jax.client import client_optimizer
from fedsim_jax.data import datasets
from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
from fedsim_jax.data.federated import FederatedDataset, steps_for_epochs
from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.data.partitioners import (
  PartitionContext,
  run_partitioner,
  straggler_domain_split,
)
from fedsim_jax.executor import Executor
from fedsim_jax.executor.choice import (
  model_has_convolution,
  resolve_execution,
  resolve_threads,
)
from fedsim_jax.lifecycle import RunOptions, RunParts
from fedsim_jax.lifecycle.lockstep import executor_like
from fedsim_jax.lifecycle.parts import evaluator
from fedsim_jax.models import Model, ModelContext
from fedsim_jax.models import build_model as build_registered_model
from fedsim_jax.registry import Selection
from fedsim_jax.runtime import Simulation, StopCondition
from fedsim_jax.runtime.latency import (
  AvailabilityContext,
  LatencyContext,
)
from fedsim_jax.runtime.latency import build_availability as build_registered_availability
from fedsim_jax.runtime.latency import build_latency as build_registered_latency
from fedsim_jax.saved_run import model_description
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
  dataset source's, the partitioner's, the model's, the latency and availability models'
  included; returns the algorithm's settings. Raises `ConfigError`."""
  config_lib.validate(config)  # the plugin sections included (`config.PLUGIN_SECTIONS`)
  dataset_selection(config)
  return algorithm_settings(config)


def dataset_selection(config: ml_collections.ConfigDict) -> Selection:
  """`config.data`'s dataset source with its validated settings (importing `data.module`
  first)."""
  datasets.DATASET_SOURCES.import_module(config.data.module)
  return datasets.resolve(config.data.name, config.data.kwargs.to_dict())


def partition_selection(config: ml_collections.ConfigDict) -> Selection:
  """`config.partition`'s partitioner with its validated settings (importing
  `partition.module` first)."""
  return config_lib.resolve_plugin(config, 'partition')


def client_budgets(
  config: ml_collections.ConfigDict, partitioner: Selection
) -> Callable[[], np.ndarray]:
  """The compute budgets p_i the configured algorithm draws for `data.num_clients` clients, as
  a call a partitioner makes when it needs them (budget_skewed skews data by them); the call
  raises `ConfigError` when the algorithm has no budgets."""

  def draw() -> np.ndarray:
    settings = algorithm_settings(config)
    if not hasattr(settings, 'client_budgets'):
      raise config_lib.ConfigError(
        f'partition.name={partitioner.name!r} is invalid with algorithm.name='
        f'{config.algorithm.name!r} (it has no compute budgets); allowed: an algorithm with '
        'budgets (ccfedavg, ...)'
      )
    return settings.client_budgets(config.data.num_clients, config.seed)

  return draw


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
  times: list[float] = []
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


def _load_central_dataset(source: Selection, data_dir: str | None) -> Any:
  """The dataset `source` loads, with a data dir that is a file and a file that cannot be read
  as one-line errors (`ConfigError`, `CorruptDatasetError`) rather than the OS error's
  traceback."""
  if data_dir is not None:
    path = os.path.expanduser(data_dir)
    if os.path.exists(path) and not os.path.isdir(path):
      raise config_lib.ConfigError(
        f'data.data_dir={data_dir} is a file; allowed values: a directory of prepared datasets'
      )
  try:
    return datasets.load(source, data_dir)
  except DatasetNotFoundError:  # (a FileNotFoundError): its message says how to prepare it
    raise
  except OSError as error:
    where = error.filename or data_dir or 'the data dir'
    raise CorruptDatasetError(
      f'dataset {source.name!r}: cannot read {where} ({error.strerror or error}); allowed: a '
      'prepared dataset this user can read (fix its permissions, or prepare it again)'
    ) from None


def build_federated_dataset(
  config: ml_collections.ConfigDict,
  source: Selection | None = None,
  partitioner: Selection | None = None,
) -> FederatedDataset:
  """Loads the dataset `source` selects and partitions its training split over clients by
  `partitioner`, then applies the straggler-domain split when `data.straggler_classes` is set
  (`source` and `partitioner` default to those `config.data` and `config.partition` select)."""
  data = config.data
  source = dataset_selection(config) if source is None else source
  partitioner = partition_selection(config) if partitioner is None else partitioner
  central = _load_central_dataset(source, data.data_dir)
  context = PartitionContext(
    labels=central.train_y,
    num_clients=data.num_clients,
    seed=config.seed if data.partition_seed is None else data.partition_seed,
    dataset_name=central.name,
    client_ids=central.train_client_ids,
    # budget_skewed's shards follow the p_i the algorithm draws (from the same seed stream).
    client_budgets=client_budgets(config, partitioner),
  )
  try:
    parts = run_partitioner(partitioner, context)
    straggler_mask = None
    if data.straggler_classes is not None:
      parts, straggler_mask = straggler_domain_split(
        central.train_y, parts, list(data.straggler_classes), data.num_stragglers
      )
  except config_lib.ConfigError:
    raise
  except ValueError as error:  # an impossible partition is a settings error
    raise config_lib.ConfigError(f'partition.name={partitioner.name!r}: {error}') from None
  federation = LazyFederation if data.lazy else FederatedDataset
  return federation.from_partition(  # type: ignore[return-value]  # a LazyFederation stands in
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
  backend, step_loop = resolve_execution(
    config.executor.backend,
    config.executor.step_loop,
    devices=config.executor.devices,
    convolutional=lambda: model_has_convolution(model, init_params),
  )
  try:
    executor = Executor(
      client_update,
      dataset if isinstance(dataset, LazyFederation) else dataset.device_arrays(),
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


@dataclasses.dataclass(frozen=True)
class BuiltRun:
  """A run built from its config (`build_run`): nothing written yet."""

  config: ml_collections.ConfigDict  # resolved (`resolve_settings`)
  model: Model
  parts: RunParts  # what the run's lifecycle (`RunLifecycle`) receives


def build_run(
  config: ml_collections.ConfigDict,
  settings: Settings,
  dataset: FederatedDataset | None = None,
  *,
  host_threads: int = 1,
) -> BuiltRun:
  """Builds the run `config` describes: its dataset (unless given), model, algorithm,
  simulation and evaluator. Writes nothing; refuses (`ConfigError`) a run that will not fit in
  memory (`run.check_memory`) before the model's parameters are allocated. `settings`: the
  algorithm's, as `validate(config)` returned them; `host_threads`: the simulations run at once
  in this process (`Executor`)."""
  if dataset is None:
    dataset = build_federated_dataset(config)
  # A settings class need not derive from the shared groups (`Settings` suffices), so the
  # federation hook is optional, like `check_run`.
  check_federation = getattr(settings, 'check_federation', None)
  if check_federation is not None:
    check_federation(dataset.num_clients, algorithms.base.KWARGS_PREFIX)
  selections = {
    'data': dataset_selection(config),
    'partition': partition_selection(config),
    **plugin_selections(config),
  }
  model = build_model(config, dataset, selections['model'])
  description = model_description(model, model_kwargs(selections['model']))
  config = resolve_settings(config, dataset, model)
  settings = algorithm_settings(config)
  # The resolved config: every setting of the algorithm and of each plugin with its value,
  # defaults included, so that config.json alone describes (and reruns) the run.
  resolved = config.to_dict()
  resolved['algorithm']['kwargs'] = settings.as_dict()
  for section, selection in selections.items():
    resolved[section]['kwargs'] = selection.settings.as_dict()

  def check_memory(algorithm: algorithms.Algorithm) -> None:
    if config.run.check_memory:
      memory_estimate.check_run(
        config,
        dataset,
        model,
        algorithm,
        settings,
        memory_estimate.model_size_setting(selections['model']),
      )

  simulation = build_simulation(
    config,
    dataset,
    model,
    settings=settings,
    before_allocation=check_memory,
    host_threads=host_threads,
  )
  parts = RunParts(
    dataset=dataset,
    model_description=description,
    algorithm_settings=settings,
    simulation=simulation,
    evaluate=evaluator(config, model, dataset),
    stop=stop_condition(config),
    resolved_config=resolved,
    selections=selections,
    options=RunOptions.from_config(config, settings),
    executor_like=executor_like(
      simulation.executor, sampling=config.client.sampling, unroll=config.executor.unroll
    ),
  )
  return BuiltRun(config=config, model=model, parts=parts)
