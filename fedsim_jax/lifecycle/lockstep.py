"""Running several built runs together (a lockstep sweep over seeds): one signal handler for
all of them, their simulations advanced at once or in shared batches, and each run ended with
its own summary (`fedsim_jax.experiment.run_experiments_lockstep` builds them)."""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from fedsim_jax import interrupts
from fedsim_jax import workdir as workdir_lib
from fedsim_jax.executor import Executor
from fedsim_jax.executor.choice import Backend
from fedsim_jax.lifecycle.run_lifecycle import RunLifecycle
from fedsim_jax.run_spec import RunSpec
from fedsim_jax.runtime.lockstep import lockstep_executors, run_concurrently, run_lockstep
from fedsim_jax.settings import ConfigError


def check_sweep(
  specs: Sequence[RunSpec],
  workdirs: Sequence[str | os.PathLike],
  *,
  resume: bool,
  overwrite: bool,
) -> None:
  """Refuses (`ConfigError`) a sweep that cannot run in lockstep: specs that differ in more
  than `seed`, `data.partition_seed` and `run.eval_every`, a lazy federation, or any workdir a
  run may not write (`fedsim_jax.workdir.check`), before the first run writes its own."""
  if len(specs) != len(workdirs):
    raise ValueError('run_experiments_lockstep needs one workdir per config')
  reference = specs[0].without_seeds()
  if any(spec.without_seeds() != reference for spec in specs[1:]):
    raise ConfigError(
      'lockstep sweeps need configs that differ only in seed, '
      'data.partition_seed and run.eval_every'
    )
  if specs[0].data.lazy:
    raise ConfigError('data.lazy=True is invalid in a lockstep sweep; allowed: False')
  for workdir in workdirs:
    workdir_lib.check(workdir, resume=resume, overwrite=overwrite)


def run_together(runs: Sequence[RunLifecycle]) -> list[dict[str, Any]]:
  """Runs `runs` to their ends together; returns each run's summary, in their order.

  Each run stops as `RunLifecycle.run` does: a run that diverges or stalls ends with its own
  summary while the others run on, and SIGINT/SIGTERM stop every run with a checkpoint and an
  `interrupted` summary. With the vmap backend the simulations advance in lockstep and their
  client tasks run as one shared batch; with the loop backend (one program call per task) they
  run at once, each with its own executor, sharing the task threads.
  `summary['host']['lockstep']` says which (`execution`).
  """
  first = runs[0].simulation.executor
  start = time.perf_counter()
  for run in runs:
    run.simulation_start = start

  def pause_every_simulation() -> None:
    for run in runs:
      run.simulation.request_pause()

  # One signal handler for the sweep: SIGINT/SIGTERM pause every simulation, and each run
  # stops as `RunLifecycle.run` does (a checkpoint, then an `interrupted` summary).
  with interrupts.stop_requests(pause_every_simulation) as interrupt:
    drivers = [functools.partial(run.run_until_stopped, interrupt) for run in runs]
    if first.backend == Backend.LOOP:
      # One program call per task: nothing to gain from a shared batch, so each simulation
      # keeps its executor and they run at once (see `run_concurrently`).
      endings = run_concurrently(drivers, runs[0].simulation)
      info: dict[str, Any] = {'simulations': len(runs), 'execution': 'concurrent'}
    else:
      endings, info = _run_in_shared_batches(runs, drivers)
    # Still under the handler: a signal while the final outputs are written waits for them,
    # and a second SIGINT stops the runs not yet finished at once (as in `RunLifecycle.run`).
    summaries: list[dict[str, Any]] = []
    try:
      for run, (status, extra) in zip(runs, endings):
        run.host_extra['lockstep'] = dict(info)
        summaries.append(run.finish_stopped(status, extra))
    except KeyboardInterrupt:
      summaries += [run._stopped_at_once(signal.SIGINT) for run in runs[len(summaries) :]]
  return summaries


def executor_like(first: Executor, *, sampling: str, unroll: Any) -> Callable[[Any, Any], Executor]:
  """Builds executors like `first` (which was built with `sampling` and `unroll`) over other
  data and keys: a shared batch's (`lockstep_executors`)."""
  settings = dict(
    backend=first.backend,
    sampling=sampling,
    unroll=unroll,
    bucket_bits=first.bucket_bits,
    step_loop=first.step_loop,
    devices=first.devices,
    threads=first.threads,
    host_threads=first.host_threads,
  )
  return lambda data, keys: Executor(first.client_update, data, keys, **settings)


def _run_in_shared_batches(
  runs: Sequence[RunLifecycle], drivers: Sequence[Callable[[], Any]]
) -> tuple[list[Any], dict[str, Any]]:
  """Gives the runs' simulations one executor over the union of their federations and calls
  the drivers in lockstep; returns the drivers' results and the sharing figures."""
  shared, executors = lockstep_executors(
    runs[0].executor_like,
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
