"""Synthetic run directories, written as the simulator writes them, for the analysis tests."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

# (virtual_time, client_updates, test_accuracy) of one evaluation.
Point = tuple[float, int, float | None]


def write_workdir(
  path: pathlib.Path,
  points: Sequence[Point],
  *,
  algorithm: str = 'fedavg',
  seed: int = 0,
  target: float | None = 0.8,
  num_clients: int = 10,
  statistics: dict[str, Any] | None = None,
  last_row: dict[str, Any] | None = None,
  tasks: Sequence[dict[str, Any]] | None = None,
  clients: dict[str, list[float]] | None = None,
  summary: bool = True,
) -> pathlib.Path:
  """Writes config.json, metrics.jsonl (one row per point; `last_row` merged into the last),
  summary.json (with `statistics` when given; none when `summary` is False), tasks.jsonl and
  clients.json (when given) into `path`; returns `path`."""
  path.mkdir(parents=True, exist_ok=True)
  config = {
    'algorithm': {'name': algorithm, 'kwargs': {}},
    'seed': seed,
    'run': {'target_accuracy': target, 'num_rounds': len(points)},
    'data': {'dataset': 'synthetic', 'num_clients': num_clients},
  }
  (path / 'config.json').write_text(json.dumps(config), encoding='utf-8')
  rows = []
  for index, (time, updates, accuracy) in enumerate(points):
    rows.append(
      {
        'virtual_time': time,
        'version': index,
        'client_updates': updates,
        'gradient_steps': 10 * updates,
        'test_accuracy': accuracy,
        'test_loss': None if accuracy is None else 1.0 - accuracy,
      }
    )
  if last_row:
    rows[-1].update(last_row)
  with open(path / 'metrics.jsonl', 'w', encoding='utf-8') as f:
    f.writelines(json.dumps(row) + '\n' for row in rows)
  if summary:
    accuracies = [a for _, _, a in points if a is not None]
    record: dict[str, Any] = {
      'status': 'completed',
      'final_accuracy': accuracies[-1] if accuracies else None,
      'best_accuracy': max(accuracies) if accuracies else None,
      'final_virtual_time': points[-1][0],
      'client_updates': points[-1][1],
      'target_accuracy': target,
    }
    if statistics is not None:
      record['statistics'] = statistics
    (path / 'summary.json').write_text(json.dumps(record), encoding='utf-8')
  if tasks is not None:
    with open(path / 'tasks.jsonl', 'w', encoding='utf-8') as f:
      f.writelines(json.dumps(task) + '\n' for task in tasks)
  if clients is not None:
    (path / 'clients.json').write_text(json.dumps(clients), encoding='utf-8')
  return path


def task(
  client: int,
  start: float,
  end: float,
  outcome: str = 'aggregated',
  *,
  staleness: int | None = 0,
  reason: str | None = None,
  aggregation_time: float | None = None,
  task_id: int | None = 0,
  steps: int = 5,
) -> dict[str, Any]:
  """One tasks.jsonl record."""
  aggregated = outcome == 'aggregated'
  return {
    'task': task_id,
    'client': client,
    'outcome': outcome,
    'reason': reason,
    'dispatch_time': start,
    'end_time': end,
    'aggregation_time': (end if aggregation_time is None else aggregation_time)
    if aggregated
    else None,
    'version': 0,
    'applied_version': 1 if aggregated else None,
    'staleness': staleness,
    'planned_steps': steps,
    'steps': steps,
  }


def random_tasks(clients: int, count: int, seed: int = 0) -> list[dict[str, Any]]:
  """`count` tasks over `clients` clients with every outcome: mostly aggregated, some discarded
  (stale, straggler, offline), in flight and waiting at the end, and skipped records; in the
  order their outcomes became final (not dispatch order)."""
  rng = np.random.default_rng(seed)
  client = rng.integers(0, clients, count)
  start = np.sort(rng.uniform(0.0, 1000.0, count))
  end = start + rng.exponential(20.0, count)
  kind = rng.choice(6, count, p=[0.75, 0.08, 0.05, 0.04, 0.04, 0.04])
  records = []
  for i in range(count):
    k = int(kind[i])
    if k == 0:
      records.append(
        task(int(client[i]), float(start[i]), float(end[i]), task_id=i, staleness=int(i % 7))
      )
    elif k in (1, 2, 3):
      reason = ('stale', 'straggler', 'offline')[k - 1]
      stale = 9 if reason == 'stale' else None
      records.append(
        task(
          int(client[i]),
          float(start[i]),
          float(end[i]),
          'discarded',
          reason=reason,
          staleness=stale,
          task_id=i,
        )
      )
    elif k == 4:
      outcome = 'in_flight' if i % 2 else 'waiting'
      records.append(task(int(client[i]), float(start[i]), float(end[i]), outcome, task_id=i))
    else:
      records.append(
        task(int(client[i]), float(start[i]), float(start[i]), 'skipped', task_id=None)
      )
  order = np.argsort(end, kind='stable')
  return [records[i] for i in order]
