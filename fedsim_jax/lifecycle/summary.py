"""What a run reports as it goes and when it ends: its progress towards the stop condition,
the fields of `summary.json`, and the message of a run stopped by an output it cannot write."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from fedsim_jax import compilation_cache
from fedsim_jax.checkpointing import WriteError
from fedsim_jax.executor.choice import compiler_options
from fedsim_jax.metrics import summarize
from fedsim_jax.runtime import Simulation, StopCondition
from fedsim_jax.runtime.statistics import staleness_histogram, statistics

# Client classes the statistics are split by (e.g. stragglers and the others): class -> mask.
ClientClasses = Mapping[str, np.ndarray] | None


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


def eta(done: float | None, start: tuple[float, float] | None, now: float) -> str:
  """'  ETA 1m05s (40%)': the host time left at host time `now`, from the pace since `start`
  (host time, progress) towards `done` (`progress`); '' before there is a pace to go by."""
  if done is None or start is None:  # the first row: no pace yet
    return ''
  start_time, start_done = start
  if done <= start_done:
    return ''
  left = (now - start_time) * (1 - done) / (done - start_done)
  minutes, seconds = divmod(round(left), 60)
  return f'  ETA {minutes}m{seconds:02d}s ({100 * done:.0f}%)'


def finite_or_none(value: Any) -> Any:
  """`value`, or None for a non-finite float (JSON has no NaN)."""
  return None if isinstance(value, float) and not math.isfinite(value) else value


def simulation_fields(
  sim: Simulation,
  rows: Sequence[Mapping[str, Any]],
  target_accuracy: float | None,
  client_classes: ClientClasses,
) -> dict[str, Any]:
  """The summary's fields on the results: the metrics rows' (`summarize`), corrected for
  evaluations of diverged models, then the simulation's own report and statistics."""
  summary: dict[str, Any] = {}
  summary.update(summarize(rows, target_accuracy))
  summary.update(best_of_finite_models(rows, target_accuracy))
  summary.update(sim.report())
  summary['statistics'] = {
    **statistics(sim, client_classes),
    'staleness_histogram': staleness_histogram(sim),
  }
  scheduler_report = getattr(sim.scheduler, 'report', None)
  if scheduler_report is not None:
    summary['scheduler'] = scheduler_report()
  return summary


def best_of_finite_models(
  rows: Sequence[Mapping[str, Any]], target: float | None
) -> dict[str, Any]:
  """The summary's best accuracy and accuracy target, from the evaluations of finite models
  only (`run.on_divergence='continue'`), so that they describe the saved `best` model."""
  finite = [row for row in rows if not row.get('diverged')]
  if len(finite) == len(rows):
    return {}
  found = summarize(finite, target)
  keys = ['best_accuracy', 'best_accuracy_time']
  if target is not None:
    keys += ['time_to_target', 'version_to_target', 'client_updates_to_target']
  return {key: found.get(key) for key in keys}


def failure_fields(error: OSError, workdir: str) -> dict[str, str]:
  """The summary fields of a run stopped by an output it could not write."""
  if isinstance(error, WriteError):
    what = str(error)
  else:  # (a write to an open file names none: then the workdir)
    what = f'cannot write {error.filename or f"into {workdir}"}: {error.strerror or error}'
  return {
    'message': f'{what}; fix that and rerun with --resume (it continues from the newest '
    'checkpoint)',
    'error': f'{type(error).__name__}: {what}',
  }


def host_facts(sim: Simulation, cache_dir: str | None) -> dict[str, Any]:
  """How `sim` runs on this host, for `summary['host']`: its executor's settings, the
  processes, the compilation cache in use (`cache_dir`, `compilation_cache.enable`'s) and the
  XLA options."""
  executor = sim.executor
  return dict(
    backend=executor.backend,
    step_loop=executor.step_loop,
    threads=executor.threads,
    max_batch_tasks=sim.max_batch_tasks,
    devices=executor.devices,
    processes=jax.process_count(),
    compilation_cache=compilation_cache.in_use(cache_dir),
    xla_options=compiler_options(),
  )
