"""The task trace: one record per client task, written when its outcome is final.

A `Simulation` with a `task_log` hands it a record (a JSON-ready dict) whenever a dispatched
task is resolved: aggregated (into a server version, or folded into server state without one),
discarded (with its reason: 'stale', 'straggler', 'offline', ...), or, when the run ends,
still unresolved ('in_flight', or 'waiting': arrived and held by the scheduler). Schedulers
that select clients who then do not train (CC-FedAvg's skipping clients) add a 'skipped'
record, which has no task. Fields (docs/observability.md):

  task            the task id (its first segment's, for a task split into segments); None
                  for 'skipped'
  client          client id
  outcome         'aggregated', 'discarded', 'in_flight', 'waiting' or 'skipped'
  reason          why it was discarded (None otherwise)
  dispatch_time   virtual seconds at dispatch (of the first segment)
  end_time        arrival, or the dropout time for reason 'offline', or the planned arrival
                  of a task still in flight
  aggregation_time  when the server used it (None unless aggregated)
  version         the server version the client downloaded
  applied_version the server version that includes it (None unless aggregated)
  staleness       versions the update missed: applied_version - 1 - version for an update
                  that makes a new version, version now - version for one folded in
  planned_steps   local steps the task was dispatched to do (over all its segments)
  steps           local steps executed and delivered (0 for a task that never arrived)
  extras          the scheduler's scalar task metadata (Compass group, round, FedASMU fetch
                  time, ...), when there is any
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from fedsim_jax.runtime.tasks import TaskHandle, TaskStatus


class TaskLog(Protocol):
  """Where a simulation sends its task records (`metrics.writers.TaskTraceWriter`)."""

  def write(self, record: dict[str, Any]) -> None: ...


class AnnotatedTaskLog:
  """A task log that passes every record through `annotate` before `inner` writes it (run-wide
  facts of a task: its update's bytes, whether its client attacks). Other calls go to `inner`."""

  def __init__(self, inner: Any, annotate: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    self.inner = inner
    self.annotate = annotate

  def write(self, record: dict[str, Any]) -> None:
    self.inner.write(self.annotate(record))

  def __getattr__(self, name: str) -> Any:
    return getattr(self.inner, name)


OUTCOMES = ('aggregated', 'discarded', 'in_flight', 'waiting', 'skipped')


def _scalar(value: Any) -> Any:
  if isinstance(value, bool | str):
    return value
  if isinstance(value, numbers.Integral):
    return int(value)
  if isinstance(value, numbers.Real):
    return float(value)
  return None


def task_extras(metadata: dict[str, Any]) -> dict[str, Any]:
  """The JSON scalars of a task's metadata (objects such as latencies are left out)."""
  extras = {}
  for name, value in metadata.items():
    scalar = _scalar(value)
    if scalar is not None:
      extras[name] = scalar
  return extras


def task_record(
  handle: TaskHandle,
  outcome: str,
  *,
  steps: int,
  reason: str | None = None,
  aggregation_time: float | None = None,
  applied_version: int | None = None,
  staleness: int | None = None,
) -> dict[str, Any]:
  """The trace record of `handle` resolved as `outcome` (see the module docstring)."""
  record: dict[str, Any] = {
    'task': handle.root_id,
    'client': handle.client_id,
    'outcome': outcome,
    'reason': reason,
    'dispatch_time': handle.first_dispatch_time,
    'end_time': handle.arrival_time,
    'aggregation_time': aggregation_time,
    'version': handle.version,
    'applied_version': applied_version,
    'staleness': staleness,
    'planned_steps': handle.planned_steps,
    'steps': steps,
  }
  if handle.metadata:
    extras = task_extras(handle.metadata)
    if extras:
      record['extras'] = extras
  return record


def skipped_record(
  client_id: int, time: float, version: int, extras: dict[str, Any]
) -> dict[str, Any]:
  """The record of a client selected at `time` that does not train (no task)."""
  record: dict[str, Any] = {
    'task': None,
    'client': int(client_id),
    'outcome': 'skipped',
    'reason': None,
    'dispatch_time': time,
    'end_time': time,
    'aggregation_time': None,
    'version': version,
    'applied_version': None,
    'staleness': None,
    'planned_steps': 0,
    'steps': 0,
  }
  extras = task_extras(extras)
  if extras:
    record['extras'] = extras
  return record


def unresolved_records(handles: Iterable[TaskHandle]) -> list[dict[str, Any]]:
  """The records of tasks still in flight or waiting (at the end of a run), by task."""
  records = []
  for handle in sorted(handles, key=lambda h: h.root_id):
    arrived = handle.status == TaskStatus.ARRIVED
    steps = handle.prior_steps + (handle.num_steps if arrived else 0)
    records.append(task_record(handle, 'waiting' if arrived else 'in_flight', steps=steps))
  return records
