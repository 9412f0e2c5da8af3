"""Running several built runs together (a lockstep sweep over seeds and numeric
hyperparameters): one signal handler for all of them, their simulations advanced at once or in
shared batches, and each run ended with its own summary
(`fedsim_jax.experiment.run_experiments_lockstep` builds them).

The runs of a sweep may differ in `seed`, `data.partition_seed`, `run.eval_every` and the
numeric hyperparameters of `fedsim_jax.run_spec.LOCKSTEP_HYPERPARAMETERS` (client and server
learning rates and momenta, staleness exponent, proximal strength, ...). Every run keeps its
own aggregator and scheduler, built from its own settings. With the vmap backend, runs whose
client tasks compile to the same program (equal `RunSpec.client_program_key`: differing in
seeds, server-side hyperparameters and the client optimizer's learning rate, momentum and
weight decay) share task batches: one vmapped program over the union of their federations,
each task training with its run's key stream and client optimizer values, which are
arguments of the program (`Executor(stream_hyperparameters=...)`). Runs differing in a
hyperparameter compiled into the program (FedProx's proximal strength, MOON's mu, ..., or
whether the weight decay is 0) run beside them, each group in batches of its own (a run alone
in its group with its own executor, as it would run alone).
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedsim_jax import interrupts
from fedsim_jax import workdir as workdir_lib
from fedsim_jax.executor import Executor
from fedsim_jax.executor.choice import Backend
from fedsim_jax.lifecycle.run_lifecycle import RunLifecycle
from fedsim_jax.run_spec import RunSpec, lockstep_hyperparameter_names
from fedsim_jax.runtime.lockstep import (
  SharedExecution,
  lockstep_executors,
  run_concurrently,
  run_lockstep_groups,
)
from fedsim_jax.settings import ConfigError


def check_sweep(
  specs: Sequence[RunSpec],
  workdirs: Sequence[str | os.PathLike],
  *,
  resume: bool,
  overwrite: bool,
) -> None:
  """Refuses (`ConfigError`) a sweep that cannot run in lockstep: specs that differ in more
  than `seed`, `data.partition_seed`, `run.eval_every` and the hyperparameters of
  `LOCKSTEP_HYPERPARAMETERS` (`RunSpec.without_hyperparameters`), a lazy federation, or any
  workdir a run may not write (`fedsim_jax.workdir.check`), before the first run writes its
  own."""
  if len(specs) != len(workdirs):
    raise ValueError('run_experiments_lockstep needs one workdir per config')
  reference = specs[0].without_hyperparameters()
  for index, spec in enumerate(specs[1:], start=1):
    key = spec.without_hyperparameters()
    if key != reference:
      setting = _first_difference(reference.to_dict(), key.to_dict()) or 'a plugin setting'
      raise ConfigError(
        f'lockstep sweeps need configs that differ only in seed, data.partition_seed, '
        f'run.eval_every and {", ".join(lockstep_hyperparameter_names())}; config {index} '
        f'differs from config 0 in {setting}'
      )
  if specs[0].data.lazy:
    raise ConfigError('data.lazy=True is invalid in a lockstep sweep; allowed: False')
  for workdir in workdirs:
    workdir_lib.check(workdir, resume=resume, overwrite=overwrite)


def _first_difference(a: Any, b: Any, path: str = '') -> str | None:
  """The dotted path of the first setting whose values differ in the nested dicts `a`, `b`
  (None if they are equal)."""
  if isinstance(a, dict) and isinstance(b, dict):
    for name in dict.fromkeys([*a, *b]):
      found = _first_difference(a.get(name), b.get(name), f'{path}{name}.')
      if found is not None:
        return found
    return None
  return None if a == b else path.rstrip('.')


def run_together(
  runs: Sequence[RunLifecycle],
  batch_keys: Sequence[Any] | None = None,
  hyperparameters: Sequence[Mapping[str, float]] | None = None,
) -> list[dict[str, Any]]:
  """Runs `runs` to their ends together; returns each run's summary, in their order.

  Each run stops as `RunLifecycle.run` does: a run that diverges or stalls ends with its own
  summary while the others run on, and SIGINT/SIGTERM stop every run with a checkpoint and an
  `interrupted` summary. With the vmap backend the simulations advance in lockstep and the
  client tasks of runs with equal `batch_keys` (default: all equal; e.g. each spec's
  `client_program_key()`, runs whose tasks compile to one program) run as one shared batch,
  each group beside the others; where a group's runs differ in `hyperparameters` (each run's
  client optimizer values, `RunSpec.client_hyperparameters`), each run's tasks train with its
  own, passed to the shared program. With the loop backend (one program call per task) they
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
      keys = [None] * len(runs) if batch_keys is None else list(batch_keys)
      endings, info = _run_in_shared_batches(runs, drivers, equal_key_groups(keys), hyperparameters)
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


def executor_like(first: Executor, *, sampling: str, unroll: Any) -> Callable[..., Executor]:
  """Builds executors like `first` (which was built with `sampling` and `unroll`) over other
  data and keys, `(data, keys, stream_hyperparameters=None)`: a shared batch's
  (`lockstep_executors`); with `stream_hyperparameters`, each stream trains with the client
  update `first.client_update_for` builds from its values."""
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

  def build(data: Any, keys: Any, stream_hyperparameters: Any = None) -> Executor:
    return Executor(
      first.client_update,
      data,
      keys,
      client_update_for=first.client_update_for,
      stream_hyperparameters=stream_hyperparameters,
      **settings,
    )

  return build


def equal_key_groups(keys: Sequence[Any]) -> list[list[int]]:
  """The indices of equal `keys`, grouped in the order of their first index."""
  groups: list[tuple[Any, list[int]]] = []
  for index, key in enumerate(keys):
    for group_key, members in groups:
      if group_key == key:
        members.append(index)
        break
    else:
      groups.append((key, [index]))
  return [members for _, members in groups]


def stream_hyperparameters(
  values: Sequence[Mapping[str, float]],
) -> dict[str, list[float]] | None:
  """The hyperparameters of a shared executor's streams by name (`Executor`), or None when
  every stream's are equal (the group's first run's client update serves them all)."""
  if all(value == values[0] for value in values[1:]):
    return None
  return {name: [value[name] for value in values] for name in values[0]}


def _run_in_shared_batches(
  runs: Sequence[RunLifecycle],
  drivers: Sequence[Callable[[], Any]],
  groups: list[list[int]],
  hyperparameters: Sequence[Mapping[str, float]] | None = None,
) -> tuple[list[Any], dict[str, Any]]:
  """Gives the simulations of each group of several runs one executor over the union of their
  federations (built like the group's first run's, its programs taking each run's
  `hyperparameters` where they differ) and calls the drivers in lockstep; a run alone in its
  group keeps its own executor (and its compiled programs) and runs beside them. Returns the
  drivers' results and the sharing figures."""
  places: list[tuple[SharedExecution, int] | None] = [None] * len(runs)
  executions = []
  for members in groups:
    if len(members) == 1:
      continue
    build = runs[members[0]].executor_like
    if hyperparameters is not None:
      values = stream_hyperparameters([hyperparameters[i] for i in members])
      build = functools.partial(build, stream_hyperparameters=values)
    shared, executors = lockstep_executors(
      build,
      [runs[i].dataset for i in members],
      [runs[i].simulation.executor.base_key for i in members],
    )
    executions.append(shared)
    for local, (index, executor) in enumerate(zip(members, executors)):
      runs[index].simulation.executor = executor
      places[index] = (shared, local)
  endings = run_lockstep_groups(drivers, places)
  batches = sum(shared.batches for shared in executions)
  tasks = sum(shared.executor.tasks_run for shared in executions)
  info = {
    'simulations': len(runs),
    'execution': 'shared_batches' if executions else 'concurrent',
    'batch_groups': len(groups),
    'shared_batches': batches,
    'mean_shared_batch_size': tasks / batches if batches else None,
  }
  return endings, info
