"""Client tasks as the runtime tracks them: a task's handle, its status, and where every
dispatched task ended up (`TaskAccounting`)."""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any

from fedsim_jax.executor import ClientTask
from fedsim_jax.runtime.latency import TaskLatency
from fedsim_jax.runtime.updates import ResultRef
from fedsim_jax.str_enum import StrEnum


class TaskStatus(StrEnum):
  """Where a task stands (`TaskHandle.status`). A StrEnum: it equals its string ('arrived'),
  so schedulers comparing statuses with strings keep working."""

  IN_FLIGHT = 'in_flight'
  ARRIVED = 'arrived'
  DROPPED_OUT = 'dropped_out'
  AGGREGATED = 'aggregated'
  DISCARDED = 'discarded'
  SEGMENT_DONE = 'segment_done'  # an intermediate segment that ended
  CONTINUED = 'continued'  # an ended segment whose next segment was dispatched


# Statuses whose task may still need its result computed.
UNRESOLVED_STATUSES = frozenset({TaskStatus.IN_FLIGHT, TaskStatus.ARRIVED, TaskStatus.SEGMENT_DONE})
# Statuses whose result a scheduler may read.
READABLE_STATUSES = frozenset({TaskStatus.ARRIVED, TaskStatus.SEGMENT_DONE})


@dataclasses.dataclass(eq=False)
class TaskHandle:
  """A dispatched client task as the scheduler sees it.

  Attributes:
    task_id: dispatch order (also the task's PRNG seed).
    client_id, num_steps: what was asked.
    version: server version of the model the client downloaded (staleness is measured
      against it, not against the version at upload).
    dispatch_time, arrival_time: virtual seconds (`arrival_time` is the dropout time for a
      task whose client goes offline first).
    latency: the task's drawn latency components.
    metadata: free-form scheduler bookkeeping (`group` is passed on to aggregators).
    status: a `TaskStatus`: 'in_flight', 'arrived', 'dropped_out', 'aggregated' or
      'discarded'; an intermediate segment (see `Simulation.dispatch`) ends as
      'segment_done', then 'continued' once its next segment is dispatched.
    intermediate: the task is a segment that ends mid-training (not a client update).
    root_id, first_dispatch_time: the task id and dispatch time of the task's first segment
      (its own, for a task in one piece).
    planned_steps: local steps the task was dispatched to do, over all its segments.
    prior_steps: local steps of the task's earlier segments.
  """

  task_id: int
  client_id: int
  num_steps: int
  version: int
  dispatch_time: float
  arrival_time: float
  latency: TaskLatency
  task: ClientTask | None
  metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
  result_ref: ResultRef | None = None
  status: str = TaskStatus.IN_FLIGHT
  discard_reason: str | None = None
  intermediate: bool = False
  root_id: int = -1
  first_dispatch_time: float = math.nan
  planned_steps: int = 0
  prior_steps: int = 0

  @property
  def computed(self) -> bool:
    return self.result_ref is not None

  def start_segment(self, continues: TaskHandle | None, planned_steps: int | None) -> None:
    """Sets the whole task's fields: its own for a first segment (`planned_steps`, default
    `num_steps`), else those of the segment it `continues`."""
    if continues is None:
      self.root_id = self.task_id
      self.first_dispatch_time = self.dispatch_time
      self.planned_steps = self.num_steps if planned_steps is None else int(planned_steps)
    else:
      self.root_id = continues.root_id
      self.first_dispatch_time = continues.first_dispatch_time
      self.planned_steps = continues.planned_steps
      self.prior_steps = continues.prior_steps + continues.num_steps


def check_continuation(continues: TaskHandle, client_id: int) -> None:
  """Refuses to continue `continues` with a segment of `client_id` unless it is an ended
  intermediate segment of that client."""
  if continues.status != TaskStatus.SEGMENT_DONE or continues.client_id != client_id:
    raise ValueError(
      f'continues=task {continues.task_id} ({continues.status}, client '
      f'{continues.client_id}); allowed: an ended intermediate segment of '
      f'client {client_id}'
    )


def computed_result(handle: TaskHandle) -> tuple[ClientTask, ResultRef]:
  """`(task, result_ref)` of a task whose result has been computed and not yet freed."""
  if handle.task is None or handle.result_ref is None:
    raise ValueError(f'task {handle.task_id} is {handle.status}; it has no computed result')
  return handle.task, handle.result_ref


@dataclasses.dataclass
class TaskAccounting:
  """Where every dispatched task ended up. `dispatched` always equals `aggregated +
  sum(discarded.values()) + in_flight + waiting` (checked by `check`)."""

  dispatched: int = 0
  arrived: int = 0
  aggregated: int = 0
  discarded: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  in_flight: int = 0
  waiting: int = 0  # arrived, held by the scheduler (e.g. in a buffer), not yet resolved

  def check(self) -> None:
    total = self.aggregated + sum(self.discarded.values()) + self.in_flight + self.waiting
    if total != self.dispatched:
      raise AssertionError(f'task accounting broken: {self}')

  def as_dict(self) -> dict[str, Any]:
    return {
      'dispatched': self.dispatched,
      'arrived': self.arrived,
      'aggregated': self.aggregated,
      'discarded': dict(sorted(self.discarded.items())),
      'in_flight': self.in_flight,
      'waiting': self.waiting,
    }
