"""What became of a simulation's tasks and what each client did: the task accounting, the
per-client counters and staleness histograms (`runtime.statistics` and the run summary read
them), and the task trace (`runtime.task_trace`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from fedsim_jax.runtime.task_trace import TaskLog, skipped_record, task_record, unresolved_records
from fedsim_jax.runtime.tasks import TaskAccounting, TaskHandle, TaskStatus

_ARRIVED, _DISCARDED = TaskStatus.ARRIVED, TaskStatus.DISCARDED  # bound once (hot path)


def _grown(counts: np.ndarray, size: int) -> np.ndarray:
  grown = np.zeros(size, counts.dtype)
  grown[: len(counts)] = counts
  return grown


class TaskOutcomes:
  """Counts every task's outcome as it becomes final, and traces it to `task_log`.

  Attributes:
    accounting: where every dispatched task ended up (`TaskAccounting`).
    task_log: receives a record per task as its outcome becomes final (None: no trace).
    gradient_steps: local steps of arrived tasks (and ended segments).
    dispatch_counts, aggregated_counts, discarded_counts: `[num_clients]` tasks per client
      (discarded ones include those whose client went offline).
    busy_time: `[num_clients]` virtual seconds spent on tasks.
    steps_per_client: `[num_clients]` local steps of arrived tasks.
    update_wait_time: sum over aggregated updates of (aggregation - arrival) time.
    staleness_counts, window_staleness_counts: aggregated updates by staleness (index), over
      the run and since `reset_window`.
    wasted_steps: local steps of tasks that were discarded.
  """

  def __init__(self, num_clients: int, task_log: TaskLog | None) -> None:
    self.accounting = TaskAccounting()
    self.task_log = task_log
    self.gradient_steps = 0
    self.dispatch_counts = np.zeros(num_clients, np.int64)
    self.aggregated_counts = np.zeros(num_clients, np.int64)
    self.busy_time = np.zeros(num_clients, np.float64)
    self.steps_per_client = np.zeros(num_clients, np.int64)
    self.update_wait_time = 0.0
    self.discarded_counts = np.zeros(num_clients, np.int64)
    self.staleness_counts = np.zeros(16, np.int64)
    self.window_staleness_counts = np.zeros(16, np.int64)
    self.wasted_steps = 0

  def dispatched(self, client_id: int) -> None:
    """A task's first segment was dispatched."""
    self.accounting.dispatched += 1
    self.dispatch_counts[client_id] += 1

  def ended(self, handle: TaskHandle) -> None:
    """A task (or segment) left the client: it arrived, or its client went offline."""
    self.accounting.in_flight -= 1
    self.busy_time[handle.client_id] += handle.arrival_time - handle.dispatch_time

  def trained(self, handle: TaskHandle) -> None:
    """A task (or segment) arrived: its local steps were run."""
    self.gradient_steps += handle.num_steps
    self.steps_per_client[handle.client_id] += handle.num_steps

  def arrived(self) -> None:
    """A client update reached the server, held until aggregated or discarded."""
    self.accounting.arrived += 1
    self.accounting.waiting += 1

  def resolved(self, handle: TaskHandle, status: TaskStatus, reason: str | None) -> None:
    """`handle` (still with its old status) is resolved as `status` (for `reason`)."""
    if status == _DISCARDED:
      self.accounting.discarded[reason] += 1
      handle.discard_reason = reason
      steps = handle.prior_steps + handle.num_steps
      self.discarded_counts[handle.client_id] += 1
      self.wasted_steps += steps
      if self.task_log is not None:
        self.task_log.write(task_record(handle, 'discarded', steps=steps, reason=reason))
    if handle.status == _ARRIVED:
      self.accounting.waiting -= 1

  def aggregated(self, handle: TaskHandle, staleness: int, now: float, version: int) -> None:
    """`handle`'s update was used by the server in `version` (`staleness` versions late)."""
    self.accounting.aggregated += 1
    self.aggregated_counts[handle.client_id] += 1
    self.update_wait_time += now - handle.arrival_time
    if staleness >= len(self.staleness_counts):
      size = max(2 * len(self.staleness_counts), staleness + 1)
      self.staleness_counts = _grown(self.staleness_counts, size)
      self.window_staleness_counts = _grown(self.window_staleness_counts, size)
    self.staleness_counts[staleness] += 1
    self.window_staleness_counts[staleness] += 1
    if self.task_log is not None:
      self.task_log.write(
        task_record(
          handle,
          'aggregated',
          steps=handle.prior_steps + handle.num_steps,
          aggregation_time=now,
          applied_version=version,
          staleness=staleness,
        )
      )

  def dropped_out(self, handle: TaskHandle) -> None:
    """`handle`'s client went offline before the task ended."""
    self.accounting.discarded['offline'] += 1
    handle.discard_reason = 'offline'
    self.discarded_counts[handle.client_id] += 1
    self.wasted_steps += handle.prior_steps  # its earlier segments' steps are lost
    if self.task_log is not None:
      self.task_log.write(
        task_record(handle, 'discarded', steps=handle.prior_steps, reason='offline')
      )

  def reset_window(self) -> None:
    """Starts a new statistics window (`window_staleness_counts`)."""
    self.window_staleness_counts[:] = 0

  def record_skipped(self, client_id: int, now: float, version: int, extras: Any) -> None:
    """Traces a client selected at `now` that does not train."""
    if self.task_log is not None:
      self.task_log.write(skipped_record(client_id, now, version, extras))

  def write_unresolved(self, handles: Iterable[TaskHandle]) -> None:
    """Traces the tasks still in flight or waiting (at the end of a run)."""
    if self.task_log is not None:
      for record in unresolved_records(handles):
        self.task_log.write(record)
