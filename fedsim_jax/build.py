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
from typing import Any, TypeAlias

import jax
import ml_collections
import numpy as np
from absl import logging

from fedsim_jax import algorithms, memory_estimate
from fedsim_jax import config as config_lib
from fedsim_jax.client import ClientOptimizer, ClientUpdate, client_optimizer
from fedsim_jax.client.local_update import optimizer_of_values
from fedsim_jax.data import client_test as client_test_lib
from fedsim_jax.data import datasets
from fedsim_jax.data.client_test import ClientTestData, ClientTestSet
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
from fedsim_jax.lifecycle.parts import client_evaluator, evaluator
from fedsim_jax.models import Model, ModelContext
from fedsim_jax.models import build_model as build_registered_model
from fedsim_jax.registry import Selection
from fedsim_jax.run_settings import ClientSettings
from fedsim_jax.run_spec import RunSpec, as_spec
from fedsim_jax.runtime import Simulation, StopCondition
from fedsim_jax.runtime.latency import (
  AvailabilityContext,
  LatencyContext,
)
from fedsim_jax.runtime.latency import build_availability as build_registered_availability
from fedsim_jax.runtime.latency import build_latency as build_registered_latency
from fedsim_jax.saved_run import model_description
from fedsim_jax.settings import Settings
from fedsim_jax.str_enum import parse
from fedsim_jax.strategy.client_loss import ClientLoss
from fedsim_jax.transforms import attacks, with_update_transforms
from fedsim_jax.transforms import plugins as transform_plugins

# What the public build functions take: a resolved `RunSpec`, or a config they resolve first.
Spec: TypeAlias = RunSpec | ml_collections.ConfigDict


_TRANSFORM_STREAM = 0x7472616E  # 'tran'


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
  transform_key: jax.Array  # the update transforms' noise and sampling (`fedsim_jax.transforms`)

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
      # Folded from the seed's key rather than split with the others, so that the init and
      # train keys stay what they were before transforms existed.
      transform_key=jax.random.fold_in(jax.random.PRNGKey(seed), _TRANSFORM_STREAM),
    )


def model_selection(config: Spec) -> Selection:
  """`config.model` resolved: the registered model and its validated settings."""
  return as_spec(config).model


def latency_selection(config: Spec) -> Selection:
  """`config.latency` resolved: the registered latency model and its validated settings."""
  return as_spec(config).latency


def availability_selection(config: Spec) -> Selection:
  """`config.availability` resolved: the availability model and its validated settings."""
  return as_spec(config).availability


def plugin_selections(config: Spec) -> dict[str, Selection]:
  """The resolved model, latency and availability sections, by section name."""
  spec = as_spec(config)
  return {'model': spec.model, 'latency': spec.latency, 'availability': spec.availability}


def run_facts(config: Spec) -> algorithms.RunFacts:
  """What the algorithm may check or read of the config's other sections."""
  return as_spec(config).facts


def algorithm_settings(config: Spec) -> Settings:
  """The validated settings of `config.algorithm` (importing `algorithm.module` first)."""
  return as_spec(config).algorithm.settings


def validate(config: Spec) -> Settings:
  """Checks every setting of `config` that can be checked without data, the algorithm's, the
  dataset source's, the partitioner's, the model's, the latency and availability models'
  included (`RunSpec.from_config`); returns the algorithm's settings. Raises `ConfigError`."""
  return algorithm_settings(config)


def dataset_selection(config: Spec) -> Selection:
  """`config.data`'s dataset source with its validated settings (importing `data.module`
  first)."""
  return as_spec(config).dataset


def partition_selection(config: Spec) -> Selection:
  """`config.partition`'s partitioner with its validated settings (importing
  `partition.module` first)."""
  return as_spec(config).partition


def client_budgets(config: Spec, partitioner: Selection | None = None) -> Callable[[], np.ndarray]:
  """The compute budgets p_i the configured algorithm draws for `data.num_clients` clients, as
  a call a partitioner makes when it needs them (budget_skewed skews data by them); the call
  raises `ConfigError` when the algorithm has no budgets."""
  spec = as_spec(config)
  partitioner = spec.partition if partitioner is None else partitioner

  def draw() -> np.ndarray:
    settings = spec.algorithm.settings
    if not hasattr(settings, 'client_budgets'):
      raise config_lib.ConfigError(
        f'partition.name={partitioner.name!r} is invalid with algorithm.name='
        f'{spec.algorithm.name!r} (it has no compute budgets); allowed: an algorithm with '
        'budgets (ccfedavg, ...)'
      )
    return settings.client_budgets(spec.data.num_clients, spec.seed)

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
  config: Spec,
  dataset: FederatedDataset,
  model_bytes: int,
  rng: np.random.Generator,
  selection: Selection | None = None,
):
  """The latency model `selection` (default: `config.latency` resolved) selects, built for
  `dataset` with generator `rng`; invalid settings raise `ConfigError`."""
  spec = as_spec(config)
  selection = spec.latency if selection is None else selection
  context = LatencyContext(
    num_clients=dataset.num_clients,
    rng=rng,
    client_sizes=dataset.client_sizes,
    batch_size=spec.client.batch_size,
    model_bytes=model_bytes,
    straggler_mask=dataset.straggler_mask,
    # A compressed update's upload takes its share of the download's time (with a bandwidth).
    upload_bytes=transform_plugins.upload_bytes(spec.compression, model_bytes // 4),
  )
  return _built('latency', selection, lambda: build_registered_latency(selection, context))


def epoch_compute_time_percentile(
  config: Spec,
  dataset: FederatedDataset,
  model_bytes: int,
  percentile: float,
  rng: np.random.Generator,
  draws_per_client: int = 20,
) -> float:
  """The population-wide percentile of one local epoch's on-device compute time (overhead +
  steps x step time; communication excluded), estimated from a probe copy of the latency model
  so that the run's own latency draws are untouched (the straggler paper's time limit)."""
  spec = as_spec(config)
  probe = build_latency(spec, dataset, model_bytes, rng)
  times: list[float] = []
  for client in range(dataset.num_clients):
    steps = steps_for_epochs(
      1.0, int(dataset.client_sizes[client]), spec.client.batch_size, spec.client.sampling
    )
    times.extend(probe.sample(client).compute_time(steps) for _ in range(draws_per_client))
  return float(np.percentile(times, percentile))


def resolve_settings(config: Spec, dataset: FederatedDataset, model: Model) -> RunSpec:
  """The spec with settings given relative to the federation replaced by their values (today:
  `algorithm.kwargs.time_limit_percentile` -> `algorithm.kwargs.time_limit`)."""
  spec = as_spec(config)
  percentile = getattr(spec.algorithm.settings, 'time_limit_percentile', None)
  if percentile is None:
    return spec
  streams = RandomStreams.from_seed(spec.seed)
  model_bytes = 4 * model.num_params(jax.eval_shape(model.init, streams.init_key))
  limit = epoch_compute_time_percentile(spec, dataset, model_bytes, percentile, streams.probe_rng)
  logging.info(
    'algorithm.kwargs.time_limit = %.2fs (percentile %g of one-epoch compute time)',
    limit,
    percentile,
  )
  settings = spec.algorithm.settings.replace(time_limit=limit, time_limit_percentile=None)
  return spec.with_algorithm_settings(settings)


def build_availability(
  config: Spec,
  dataset: FederatedDataset,
  rng: np.random.Generator,
  selection: Selection | None = None,
):
  """The availability model `selection` (default: `config.availability` resolved) selects,
  built for `dataset` with generator `rng`; invalid settings raise `ConfigError`."""
  selection = as_spec(config).availability if selection is None else selection
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
  config: Spec,
  source: Selection | None = None,
  partitioner: Selection | None = None,
) -> FederatedDataset:
  """Loads the dataset `source` selects and partitions its training split over clients by
  `partitioner`, then applies the straggler-domain split when `data.straggler_classes` is set
  (`source` and `partitioner` default to those `config.data` and `config.partition` select)."""
  spec = as_spec(config)
  data = spec.data
  source = spec.dataset if source is None else source
  partitioner = spec.partition if partitioner is None else partitioner
  central = _load_central_dataset(source, data.data_dir)
  context = PartitionContext(
    labels=central.train_y,
    num_clients=data.num_clients,
    seed=spec.partition_seed,
    dataset_name=central.name,
    client_ids=central.train_client_ids,
    # budget_skewed's shards follow the p_i the algorithm draws (from the same seed stream).
    client_budgets=client_budgets(spec, partitioner),
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
  parts, client_test = client_test_split(spec, central, parts)
  federation = LazyFederation if data.lazy else FederatedDataset
  return federation.from_partition(  # type: ignore[return-value]  # a LazyFederation stands in
    central.name,
    central.train_x,
    poisoned_labels(spec, central.train_y, parts, central.num_classes),
    parts,
    central.test_x,
    central.test_y,
    central.num_classes,
    straggler_mask=straggler_mask,
    client_test=client_test,
  )


def client_test_split(
  spec: RunSpec, central: Any, parts: list[np.ndarray]
) -> tuple[list[np.ndarray], ClientTestSet | None]:
  """The clients' training rows and their own test examples under `data.client_test`
  (fedsim_jax/data/client_test.py); `parts` unchanged and None when it is 'none'."""
  data = spec.data
  seed = spec.partition_seed
  if data.client_test == ClientTestData.NONE:
    return parts, None
  if data.client_test == ClientTestData.HELD_OUT:
    parts, rows = client_test_lib.hold_out(parts, data.client_test_fraction, seed)
    # Honest labels: a label-flipping attacker's test examples are scored against the truth.
    return parts, ClientTestSet.from_rows(central.train_x, central.train_y, rows, 'held_out')
  if data.client_test == ClientTestData.NATURAL:
    if central.train_client_ids is None or central.test_client_ids is None:
      raise config_lib.ConfigError(
        f"data.client_test='natural' is invalid for dataset {central.name!r}, which has no "
        "natural clients in its test split; allowed: 'held_out' or 'label_matched'"
      )
    if spec.partition.name != 'natural':
      raise config_lib.ConfigError(
        f"data.client_test='natural' needs partition.name='natural' (got "
        f"{spec.partition.name!r}); allowed: 'held_out' or 'label_matched'"
      )
    rows = client_test_lib.natural_test_rows(
      parts, central.train_client_ids, central.test_client_ids
    )
    return parts, ClientTestSet.from_rows(central.test_x, central.test_y, rows, 'natural')
  try:
    rows = client_test_lib.label_matched(
      parts,
      central.train_y,
      central.test_y,
      central.num_classes,
      data.client_test_examples,
      seed,
    )
  except ValueError as error:
    raise config_lib.ConfigError(f"data.client_test='label_matched': {error}") from None
  return parts, ClientTestSet.from_rows(central.test_x, central.test_y, rows, 'label_matched')


def poisoned_labels(
  spec: RunSpec, labels: np.ndarray, parts: list[np.ndarray], num_classes: int
) -> np.ndarray:
  """`labels` with the malicious clients' examples flipped under `attack.name='label_flip'`
  (as they are otherwise)."""
  if not getattr(spec.attack.settings, 'poisons_labels', False):
    return labels
  context = spec.transform_context(len(parts))
  malicious = transform_plugins.malicious_clients(spec.attack, context)
  assert malicious is not None
  owners = np.full(len(labels), -1, np.int64)
  for client, indices in enumerate(parts):
    owners[np.asarray(indices, np.int64)] = client
  return attacks.flip_labels(labels, owners, malicious, num_classes)


def model_kwargs(selection: Selection) -> dict[str, Any]:
  """The architecture's own settings of a resolved model section, every field with its value
  (what `get_model` takes as kwargs)."""
  return selection.settings.as_dict()


def build_model(
  config: Spec,
  dataset: FederatedDataset,
  selection: Selection | None = None,
) -> Model:
  """The model `selection` (default: `config.model` resolved) selects, for `dataset`'s inputs
  and classes."""
  selection = as_spec(config).model if selection is None else selection
  context = ModelContext(selection.name, tuple(dataset.input_shape), dataset.num_classes)
  return build_registered_model(selection, context)


def build_simulation(
  config: Spec,
  dataset: FederatedDataset,
  model: Model,
  on_version: Callable[[Simulation], None] | None = None,
  settings: Settings | None = None,
  before_allocation: Callable[[algorithms.Algorithm], None] | None = None,
  host_threads: int = 1,
) -> Simulation:
  """Wires model, algorithm, executor and latency model into a ready-to-run `Simulation`;
  `settings`: the algorithm's, when other than the spec's; `before_allocation`: called with the
  built algorithm before the model's parameters or the data's device copy are allocated (the
  memory check); `host_threads`: the simulations run at once in this process (`Executor`)."""
  spec = as_spec(config)
  streams = RandomStreams.from_seed(spec.seed)
  model_bytes = 4 * model.num_params(jax.eval_shape(model.init, streams.init_key))
  latency = build_latency(spec, dataset, model_bytes, streams.latency_rng)
  availability = build_availability(spec, dataset, streams.availability_rng)
  context = algorithms.BuildContext(spec.algorithm.name, spec.facts, dataset.client_sizes, latency)
  try:
    algorithm = algorithms.build(settings or spec.algorithm.settings, context)
  except ValueError as error:
    raise config_lib.ConfigError(str(error)) from None
  transform = transform_plugins.build_transform(
    spec.transform_selections(), spec.transform_context(dataset.num_clients, model_bytes // 4)
  )
  if transform is not None:
    aggregator = with_update_transforms(
      algorithm.aggregator, transform, dataset.num_clients, streams.transform_key
    )
    algorithm = algorithm._replace(aggregator=aggregator)
  if before_allocation is not None:
    before_allocation(algorithm)
  init_params = model.init(streams.init_key)
  client, executor_settings = spec.client, spec.executor
  optimizer = client_optimizer(
    client.optimizer,
    client.learning_rate,
    momentum=client.momentum,
    weight_decay=client.weight_decay,
  )
  client_update = algorithm.make_client_update(model, optimizer, client.batch_size)
  backend, step_loop = resolve_execution(
    executor_settings.backend,
    executor_settings.step_loop,
    devices=executor_settings.devices,
    convolutional=lambda: model_has_convolution(model, init_params),
  )
  try:
    executor = Executor(
      client_update,
      dataset if isinstance(dataset, LazyFederation) else dataset.device_arrays(),
      streams.train_key,
      backend=backend,
      sampling=client.sampling,
      unroll=executor_settings.unroll,
      bucket_bits=executor_settings.bucket_bits,
      step_loop=step_loop,
      devices=executor_settings.devices,
      threads=resolve_threads(executor_settings.threads, backend),
      host_threads=host_threads,
      client_update_for=client_update_builder(algorithm, model, client),
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
    deferred=executor_settings.deferred,
    on_version=on_version,
    bucket_bits=executor_settings.bucket_bits,
    max_batch_tasks=executor_settings.max_batch_tasks,
    client_loss=ClientLoss(model, dataset, spec.run.eval_batch_size),
  )


def client_update_builder(
  algorithm: algorithms.Algorithm, model: Model, client: ClientSettings
) -> Callable[[Any], ClientUpdate]:
  """Builds the run's client update from the client optimizer's values by name
  (`RunSpec.client_hyperparameters`), possibly traced: what a lockstep sweep's shared executor
  trains each run's tasks with (`Executor(client_update_for=...)`). The values were checked
  with the config; the optimizer's structure is this run's (`client.optimizer`, and whether
  `client.weight_decay` is 0)."""
  optimizer = parse(ClientOptimizer, client.optimizer, 'client.optimizer')
  decays = bool(client.weight_decay)

  def client_update_for(values: Any) -> ClientUpdate:
    chosen = optimizer_of_values(
      optimizer, values['learning_rate'], values['momentum'], values['weight_decay'], decays=decays
    )
    return algorithm.make_client_update(model, chosen, client.batch_size)

  return client_update_for


def stop_condition(config: Spec) -> StopCondition:
  run = as_spec(config).run
  return StopCondition(
    max_versions=run.num_rounds,
    max_virtual_time=run.max_virtual_time,
    max_client_updates=run.max_client_updates,
  )


@dataclasses.dataclass(frozen=True)
class BuiltRun:
  """A run built from its spec (`build_run`): nothing written yet."""

  spec: RunSpec  # resolved (`resolve_settings`)
  model: Model
  parts: RunParts  # what the run's lifecycle (`RunLifecycle`) receives


def build_run(
  config: Spec,
  dataset: FederatedDataset | None = None,
  *,
  host_threads: int = 1,
) -> BuiltRun:
  """Builds the run `config` describes: its dataset (unless given), model, algorithm,
  simulation and evaluator. Writes nothing; refuses (`ConfigError`) a run that will not fit in
  memory (`run.check_memory`) before the model's parameters are allocated. `host_threads`: the
  simulations run at once in this process (`Executor`)."""
  spec = as_spec(config)
  if dataset is None:
    dataset = build_federated_dataset(spec)
  # A settings class need not derive from the shared groups (`Settings` suffices), so the
  # federation hook is optional, like `check_run`.
  check_federation = getattr(spec.algorithm.settings, 'check_federation', None)
  if check_federation is not None:
    check_federation(dataset.num_clients, algorithms.base.KWARGS_PREFIX)
  model = build_model(spec, dataset)
  description = model_description(model, model_kwargs(spec.model))
  spec = resolve_settings(spec, dataset, model)
  settings = spec.algorithm.settings

  def check_memory(algorithm: algorithms.Algorithm) -> None:
    if spec.run.check_memory:
      memory_estimate.check_run(
        spec, dataset, model, algorithm, memory_estimate.model_size_setting(spec.model)
      )

  simulation = build_simulation(
    spec, dataset, model, before_allocation=check_memory, host_threads=host_threads
  )
  num_params = model.num_params(simulation.params)
  transforms = transform_reporting(spec, dataset.num_clients, num_params)
  parts = RunParts(
    dataset=dataset,
    model_description=description,
    algorithm_settings=settings,
    simulation=simulation,
    evaluate=evaluator(spec, model, dataset),
    stop=stop_condition(spec),
    # Every setting of the algorithm and of each plugin with its value, defaults included, so
    # that config.json alone describes (and reruns) the run.
    resolved_config=spec.to_dict(),
    selections=spec.selections(),
    options=RunOptions.from_spec(spec),
    executor_like=executor_like(
      simulation.executor, sampling=spec.client.sampling, unroll=spec.executor.unroll
    ),
    privacy=transform_plugins.privacy_monitor(
      spec.privacy, spec.transform_context(dataset.num_clients, num_params)
    ),
    transforms_summary=transforms.summary,
    annotate_task=transforms.annotate_task,
    client_evaluate=client_evaluator(spec, model, dataset, simulation),
  )
  return BuiltRun(spec=spec, model=model, parts=parts)


@dataclasses.dataclass(frozen=True)
class TransformReporting:
  """What a run with compression or attackers adds to its summary and task records."""

  summary: dict[str, Any] | None = None
  annotate_task: Callable[[dict[str, Any]], dict[str, Any]] | None = None


# Outcomes whose task uploaded its update (an 'offline' discard dropped out before it could).
_UPLOADED = ('aggregated', 'discarded', 'waiting')


def transform_reporting(spec: RunSpec, num_clients: int, num_params: int) -> TransformReporting:
  """The bytes each update costs (every run's summary, `transforms`) and the malicious
  clients (summary), and for each task record `upload_bytes` and `attacker`, which only a run
  with compression or an attack adds."""
  context = spec.transform_context(num_clients, num_params)
  malicious = transform_plugins.malicious_clients(spec.attack, context)
  compressed = not isinstance(spec.compression.settings, transform_plugins.NoCompressionSettings)
  upload = transform_plugins.upload_bytes(spec.compression, num_params)
  summary: dict[str, Any] = {
    'upload_bytes': upload,
    'download_bytes': 4 * num_params,
    'compression_ratio': upload / (4 * num_params),
  }
  if malicious is None and not compressed:
    return TransformReporting(summary)
  if malicious is not None:
    summary['malicious_clients'] = np.flatnonzero(malicious).tolist()

  def annotate(record: dict[str, Any]) -> dict[str, Any]:
    uploaded = record['outcome'] in _UPLOADED and record['reason'] != 'offline'
    record = {**record, 'upload_bytes': upload if uploaded and record['steps'] > 0 else 0}
    if malicious is not None:
      record['attacker'] = bool(malicious[record['client']])
    return record

  return TransformReporting(summary, annotate)
