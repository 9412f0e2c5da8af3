"""Numbers read off one loaded run: accuracy curves, time to a target, staleness and per-client
counts. Every measure treats keys that older runs lack as absent (None), never as zero."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedsim_jax.analysis.run_files import RunFiles


def as_number(value: Any) -> float | None:
  """`value` as a finite float, else None (null, NaN, inf, or not a number)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  return float(value) if math.isfinite(value) else None


def accuracy_curve(run: RunFiles, x: str = 'virtual_time') -> tuple[np.ndarray, np.ndarray]:
  """(x values, test accuracies) of the evaluations that have both, in row order."""
  points = [(as_number(row.get(x)), as_number(row.get('test_accuracy'))) for row in run.metrics]
  kept = [(a, b) for a, b in points if a is not None and b is not None]
  if not kept:
    return np.zeros(0), np.zeros(0)
  xs, ys = zip(*kept)
  return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)


def final_accuracy(run: RunFiles) -> float | None:
  """The test accuracy of the run's last evaluation that has one."""
  _, accuracies = accuracy_curve(run)
  return float(accuracies[-1]) if accuracies.size else None


def final_value(run: RunFiles, key: str) -> float | None:
  """`key` of the run's last metrics row that has it (None if no row has)."""
  for row in reversed(run.metrics):
    value = as_number(row.get(key))
    if value is not None:
      return value
  return None


def best_accuracy(run: RunFiles) -> float | None:
  """The highest test accuracy of any evaluation of a finite model (rows marked `diverged`,
  written under run.on_divergence='continue', do not count), as the run's summary gives it."""
  accuracies = [
    accuracy
    for row in run.metrics
    if not row.get('diverged') and (accuracy := as_number(row.get('test_accuracy'))) is not None
  ]
  return max(accuracies) if accuracies else None


def first_reaching(run: RunFiles, target: float) -> dict[str, Any] | None:
  """The first metrics row of a finite model whose test accuracy is at least `target` (None if
  none is)."""
  for row in run.metrics:
    if row.get('diverged'):
      continue
    accuracy = as_number(row.get('test_accuracy'))
    if accuracy is not None and accuracy >= target:
      return row
  return None


def statistic(run: RunFiles, key: str) -> float | None:
  """An overall statistic of the run: the summary's `statistics[key]`, else the summary's own
  `key`, else the last metrics row that has a value for it."""
  for source in (run.statistics, run.summary or {}):
    value = as_number(source.get(key))
    if value is not None:
      return value
  for row in reversed(run.metrics):
    value = as_number(row.get(key))
    if value is not None:
      return value
  return None


def aggregated_tasks(run: RunFiles) -> list[dict[str, Any]]:
  """The records of tasks.jsonl whose update the server aggregated ([] without tasks.jsonl)."""
  return [task for task in run.tasks or () if task.get('outcome') == 'aggregated']


def mean_staleness(run: RunFiles) -> float | None:
  """The mean staleness of aggregated updates: the recorded statistic, else from tasks.jsonl."""
  value = statistic(run, 'staleness_mean')
  if value is not None:
    return value
  stale = [as_number(task.get('staleness')) for task in aggregated_tasks(run)]
  known = [s for s in stale if s is not None]
  return float(np.mean(known)) if known else None


def staleness_counts(run: RunFiles) -> tuple[np.ndarray, np.ndarray] | None:
  """(aggregated, discarded): the number of updates at each staleness 0, 1, 2, ... (equal
  lengths). From tasks.jsonl when present (discarded: tasks with a recorded staleness that were
  not aggregated), else the summary's `statistics.staleness_histogram` (nothing discarded);
  None when the run records neither."""
  if run.tasks is not None:
    aggregated, discarded = [], []
    for task in run.tasks:
      staleness = task.get('staleness')
      if not isinstance(staleness, int) or staleness < 0:
        continue
      outcome = task.get('outcome')
      if outcome == 'aggregated':
        aggregated.append(staleness)
      elif outcome == 'discarded':
        discarded.append(staleness)
    length = max(aggregated + discarded, default=-1) + 1
    return (
      np.bincount(np.asarray(aggregated, dtype=int), minlength=length),
      np.bincount(np.asarray(discarded, dtype=int), minlength=length),
    )
  histogram = run.statistics.get('staleness_histogram')
  if isinstance(histogram, list):
    counts = np.asarray([as_number(c) or 0.0 for c in histogram], dtype=float)
    return counts, np.zeros_like(counts)
  return None


def client_count(run: RunFiles) -> int:
  """The number of clients: the config's data.num_clients, raised to cover every client id that
  tasks.jsonl or clients.json names."""
  count = run.num_clients or 0
  if run.tasks:
    ids = [task.get('client') for task in run.tasks]
    count = max(count, max((i + 1 for i in ids if isinstance(i, int)), default=0))
  if run.clients:
    count = max(
      count, max((len(v) for v in run.clients.values() if isinstance(v, list)), default=0)
    )
  return count


def updates_per_client(run: RunFiles) -> tuple[np.ndarray, np.ndarray] | None:
  """(aggregated, dispatched) task counts per client id: from tasks.jsonl when present, else
  from clients.json; None when the run has neither."""
  count = client_count(run)
  if run.tasks is not None:
    aggregated, dispatched = np.zeros(count, dtype=int), np.zeros(count, dtype=int)
    for task in run.tasks:
      client = task.get('client')
      if not isinstance(client, int) or task.get('task') is None:
        continue  # a 'skipped' record: the client was selected but trained nothing
      dispatched[client] += 1
      if task.get('outcome') == 'aggregated':
        aggregated[client] += 1
    return aggregated, dispatched
  if run.clients and isinstance(run.clients.get('aggregated'), list):
    aggregated = np.asarray(run.clients['aggregated'], dtype=int)
    dispatched = np.asarray(run.clients.get('dispatched') or aggregated, dtype=int)
    return aggregated, dispatched
  return None


def jain_fairness(counts: np.ndarray) -> float | None:
  """Jain's index (sum x)^2 / (n sum x^2) of per-client counts: 1 when all are equal, 1/n when
  one client has all (None when all are zero)."""
  total = float(np.square(counts, dtype=float).sum())
  if total == 0.0:
    return None
  return float(counts.sum(dtype=float) ** 2 / (counts.size * total))


def resolve_target(groups: Sequence[Sequence[RunFiles]], target: float | None) -> float | None:
  """`target` when given, else the runs' shared config run.target_accuracy (None when no run
  sets one).

  Raises:
    ValueError: runs set different targets (one line; pass a target to compare them).
  """
  if target is not None:
    return float(target)
  targets = sorted(
    {t for group in groups for run in group if (t := run.target_accuracy) is not None}
  )
  if len(targets) > 1:
    listed = ', '.join(f'{t:g}' for t in targets)
    raise ValueError(f'the runs set different run.target_accuracy ({listed}); pass --target')
  return targets[0] if targets else None
