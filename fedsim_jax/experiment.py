"""Builds and runs a whole experiment from a config: the one function binaries call.

`run_experiment(config, workdir)` loads and partitions the data, builds the model, algorithm,
executor, latency model and simulation, runs it, and writes `config.json`, `metrics.jsonl` and
`summary.json` into `workdir`. Building (`build_run`) writes nothing; everything a run writes,
from its workdir's lock to its summary, is its lifecycle's (`fedsim_jax.lifecycle`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import ml_collections
from absl import logging

from fedsim_jax import compilation_cache, distributed
from fedsim_jax import config as config_lib
from fedsim_jax.build import (  # noqa: F401 - the build step's public names, importable here too
  BuiltRun,
  RandomStreams,
  algorithm_settings,
  availability_selection,
  build_availability,
  build_federated_dataset,
  build_latency,
  build_model,
  build_run,
  build_simulation,
  client_budgets,
  dataset_selection,
  epoch_compute_time_percentile,
  latency_selection,
  model_kwargs,
  model_selection,
  partition_selection,
  plugin_selections,
  resolve_settings,
  run_facts,
  stop_condition,
  validate,
)
from fedsim_jax.data.federated import FederatedDataset
from fedsim_jax.executor import cpu_pool
from fedsim_jax.lifecycle import (  # noqa: F401 - the lifecycle's public names, importable here too
  RESUMABLE_CHANGES,
  STATUSES,
  Diverged,
  OnDivergence,
  RunLifecycle,
  RunOptions,
  RunParts,
  Workspace,
  config_differences,
  default_settings,
  progress,
)
from fedsim_jax.lifecycle.lockstep import check_sweep, run_together
from fedsim_jax.lifecycle.summary import host_facts
from fedsim_jax.metrics.run_writer import WriterFactory
from fedsim_jax.run_spec import RunSpec, as_spec


def _log_run(built: BuiltRun) -> None:
  """Logs what was built, and every algorithm setting."""
  spec, dataset, model = built.spec, built.parts.dataset, built.model
  executor, settings = built.parts.simulation.executor, built.parts.algorithm_settings
  logging.info(
    '%s on %s: %d clients, model %s (%d parameters), latency %s, backend %s '
    '(steps: %s, threads: %d)',
    spec.algorithm.name,
    dataset.name,
    dataset.num_clients,
    model.name,
    model.num_params(built.parts.simulation.params),
    spec.latency.name,
    executor.backend,
    executor.step_loop,
    executor.threads,
  )
  logging.info(
    'algorithm %s settings (defaults included): %s',
    spec.algorithm.name,
    ', '.join(f'{k}={v}' for k, v in settings.as_dict().items()),
  )


class PreparedRun(RunLifecycle):
  """An experiment ready to run: the run `build_run` builds, in its workdir (`RunLifecycle`).

  `run_experiment` is `PreparedRun(...).run()`; lockstep sweeps (`run_experiments_lockstep`)
  prepare several, run their simulations together and finish each.

  The workdir is checked, and the config validated, before anything is written: a workdir that
  holds a run is refused unless `resume` (continue it from its newest checkpoint, bit for bit
  the run that was never stopped; `docs/checkpoints.md`) or `overwrite` (replace it). The
  workdir's lock is taken before the data load and the check repeated under it
  (`Workspace.claim`), so that a run that finished in the meantime is never deleted; a start-up
  that fails (or is interrupted) releases it, and removes the workdir again if it created it.
  """

  def __init__(
    self,
    config: RunSpec | ml_collections.ConfigDict,
    workdir: str | os.PathLike,
    dataset: FederatedDataset | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    host_threads: int = 1,
    writers: Sequence[WriterFactory] = (),
  ) -> None:
    spec = as_spec(config)  # validated: nothing is written for an invalid config
    run = spec.run
    cpu_pool.reserve(spec.executor.devices, host_threads)  # before JAX starts, if it has not
    if run.distributed:  # before anything touches a device
      distributed.initialize(run.coordinator_address, run.num_processes, run.process_id)
    workspace = Workspace.claim(
      workdir, resume=resume, overwrite=overwrite, distributed_run=run.distributed
    )
    try:
      try:
        cache_dir = compilation_cache.enable(run.compilation_cache)
      except ValueError as e:
        raise config_lib.ConfigError(str(e)) from None
      host_start = time.perf_counter()
      built = build_run(spec, dataset=dataset, host_threads=host_threads)
      self.spec = built.spec
      host_extra = host_facts(built.parts.simulation, cache_dir)
      super().__init__(
        workspace,
        built.parts,
        resume=resume,
        host_start=host_start,
        host_extra=host_extra,
        writers=writers,
      )
      _log_run(built)
      self.start()
    except BaseException:
      workspace.lock.abandon()
      raise


def run_experiment(
  config: RunSpec | ml_collections.ConfigDict,
  workdir: str | os.PathLike,
  dataset: FederatedDataset | None = None,
  *,
  resume: bool = False,
  overwrite: bool = False,
  writers: Sequence[WriterFactory] = (),
) -> dict[str, Any]:
  """Runs the experiment described by `config`, writing its outputs into `workdir`.

  Args:
    config: see `fedsim_jax.config.base_config`; validated first (or a `RunSpec`, resolved).
    workdir: run directory (created if needed).
    dataset: an already built federation (skips loading and partitioning), e.g. in tests.
    resume: continue the run in `workdir` from its newest checkpoint (from the start if it
      has none); the config may differ only in `RESUMABLE_CHANGES` (e.g. a longer run).
    overwrite: replace the run in `workdir`.
    writers: where else the metrics rows and summary go, besides those `run.tensorboard` and
      `run.mlflow` ask for: each a `WriterFactory` (e.g. a `RunWriter` class) called with the
      run's `RunInfo` (`fedsim_jax.metrics.run_writer`, docs/logging.md).

  Returns:
    The summary dict also written to `summary.json`; `summary['status']` is 'completed',
    'interrupted' after SIGINT/SIGTERM, 'diverged' (`summary['message']` says where) or
    'failed' (a run that stalled: `summary['message']`).

  Raises:
    ConfigError: an invalid setting or workdir (before anything is written).
    DatasetNotFoundError / CorruptDatasetError: the dataset is not prepared or unreadable.
  """
  return PreparedRun(
    config, workdir, dataset, resume=resume, overwrite=overwrite, writers=writers
  ).run()


def run_experiments_lockstep(
  configs: Sequence[RunSpec | ml_collections.ConfigDict],
  workdirs: Sequence[str | os.PathLike],
  datasets: Sequence[FederatedDataset | None] | None = None,
  *,
  resume: bool = False,
  overwrite: bool = False,
  writers: Sequence[WriterFactory] = (),
) -> list[dict[str, Any]]:
  """Runs several experiments that differ only in their seeds and numeric hyperparameters
  (`fedsim_jax.run_spec.LOCKSTEP_HYPERPARAMETERS`: client and server learning rates, momenta,
  ...) together (`fedsim_jax.lifecycle.lockstep.run_together`); each run directory gets
  exactly what `run_experiment` would write (timings aside).

  Each run is a `PreparedRun` of its own and stops as `run_experiment` does: it checkpoints
  into its own directory (periodically, at the end and on SIGINT/SIGTERM), and `resume` and
  `overwrite` apply to every run directory as in `run_experiment`. A run that diverges or
  stalls ends with its own summary while the others run on; SIGINT/SIGTERM stop every run
  with a checkpoint and an `interrupted` summary. `writers` are opened for every run (see
  `run_experiment`). `summary['host']['lockstep']` says how the simulations ran (`execution`:
  in shared batches with the vmap backend, at once with the loop backend). With the vmap
  backend, runs that differ only in seeds, server-side hyperparameters and the client
  optimizer's values train in one vmapped program (`RunSpec.client_program_key`,
  `batch_groups`); runs differing in a client term's strength train in batches of their own.

  Returns:
    Each run's summary, in the order of `configs` (see `run_experiment`).

  Raises:
    ConfigError: the configs differ in more than `seed`, `data.partition_seed`,
      `run.eval_every` and the hyperparameters of `LOCKSTEP_HYPERPARAMETERS`, ask for a lazy federation (not supported in lockstep), or any run's
      settings or workdir are invalid (before any workdir is written).
  """
  specs = [as_spec(config) for config in configs]
  check_sweep(specs, workdirs, resume=resume, overwrite=overwrite)
  # Without `datasets`, every run loads the same dataset: `load_dataset` decodes it once and
  # hands every seed the same arrays, which a shared batch's union then holds once.
  datasets = list(datasets) if datasets is not None else [None] * len(configs)
  runs = [
    PreparedRun(
      s, w, d, resume=resume, overwrite=overwrite, host_threads=len(specs), writers=writers
    )
    for s, w, d in zip(specs, workdirs, datasets)
  ]
  # With the vmap backend, runs whose client tasks compile to one program (differing in seeds,
  # server-side hyperparameters and client optimizer values) share task batches.
  return run_together(
    runs,
    batch_keys=[spec.client_program_key() for spec in specs],
    hyperparameters=[spec.client_hyperparameters() for spec in specs],
  )
