"""The table of a simulation's tasks: those not yet resolved, those whose training is deferred,
and the computed results still held.

Training is deferred (docs/design-notes.md, "Deferred batched execution"): a dispatched task is
only queued here, and computed when a result is first needed, together with every other
pending task, in one executor batch of at most `max_batch_tasks` tasks. A result is a row of
its batch (`ResultRef`) until the task is resolved (aggregated, discarded, continued) or its
update has been summed.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.distributed import host_value
from fedsim_jax.executor import ClientTask
from fedsim_jax.models import Params
from fedsim_jax.runtime.tasks import (
  UNRESOLVED_STATUSES,
  TaskHandle,
  computed_result,
)
from fedsim_jax.runtime.updates import ResultRef, UpdateBatch, stack_results
from fedsim_jax.tree import row


class TaskTable:
  """Tasks not yet aggregated or discarded, the pending (not yet computed) ones, and held results.

  Args:
    executor: runs a batch of `ClientTask`s (`Executor.run`).
    max_batch_tasks: the most tasks computed in one executor batch once more are pending
      (None: no limit). It bounds the updates held at once: the tasks a result is needed for
      are computed first, the batch filled up with those that arrive soonest.

  Attributes:
    unresolved: dispatched tasks not yet aggregated or discarded, by task id (of the current
      segment).
    pending: tasks whose training has not been computed yet.
    held_results: computed tasks whose results are still held (arrived and waiting, or
      computed early), by task id.
    next_task_id: the id (and PRNG seed) of the next dispatched task.
    executor_batches, executed_tasks: executor batches run and the tasks they held.
  """

  def __init__(self, executor: Any, max_batch_tasks: int | None) -> None:
    self.executor = executor
    self.max_batch_tasks = max_batch_tasks
    self.unresolved: dict[int, TaskHandle] = {}
    self.pending: list[TaskHandle] = []
    self.held_results: dict[int, TaskHandle] = {}
    self.next_task_id = 0
    self.executor_batches = 0
    self.executed_tasks = 0

  def new_task_id(self) -> int:
    task_id = self.next_task_id
    self.next_task_id += 1
    return task_id

  def release(self, handle: TaskHandle) -> None:
    """Removes a resolved task and frees its start params and result."""
    del self.unresolved[handle.task_id]
    handle.task = None
    handle.result_ref = None
    self.held_results.pop(handle.task_id, None)

  def free_result(self, handle: TaskHandle) -> None:
    """Frees the result of a task whose update has been used (it stays unresolved)."""
    handle.result_ref = None
    self.held_results.pop(handle.task_id, None)

  def result(self, handle: TaskHandle) -> tuple[ClientTask, ResultRef]:
    """`(task, result_ref)` of `handle`, computing pending tasks first if needed."""
    if not handle.computed:
      self.compute_pending([handle])
    return computed_result(handle)

  def client_params(self, handle: TaskHandle) -> Params:
    """The client's model at the end of `handle`: its start params + its delta."""
    task, ref = self.result(handle)
    return jax.tree_util.tree_map(
      lambda start, delta: start + delta[ref.row], task.start_params, ref.batch.deltas
    )

  def aux(self, handle: TaskHandle) -> dict[str, Any]:
    """`handle`'s row of every `aux` result (an array or a pytree)."""
    _, ref = self.result(handle)
    return row(ref.batch.aux, ref.row)

  def stacked_updates(
    self,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    staleness: Sequence[int],
    *,
    with_client_params: bool,
    bucket_bits: int,
  ) -> UpdateBatch:
    """The stacked results of `handles` (computing pending tasks first if needed)."""
    if any(not h.computed for h in handles):
      self.compute_pending(handles)
    results = [computed_result(h) for h in handles]
    start = None
    if with_client_params:
      start = [task.start_params for task, _ in results]
    return stack_results(
      [ref for _, ref in results],
      weights,
      staleness,
      [h.num_steps for h in handles],
      [h.metadata.get('group', 0) for h in handles],
      start_params=start,
      bucket_bits=bucket_bits,
      client_ids=[h.client_id for h in handles],
    )

  def pending_are(self, handles: Sequence[TaskHandle]) -> bool:
    """Whether `handles` are exactly the tasks waiting to be computed."""
    waiting = {h.task_id for h in self.pending if h.status in UNRESOLVED_STATUSES}
    return not any(h.computed for h in handles) and waiting == {h.task_id for h in handles}

  def add_weighted_sum(
    self, total: Params, handles: Sequence[TaskHandle], coefficients: np.ndarray
  ) -> Params:
    """`total + sum_k coefficients[k] * delta_k` over the pending tasks `handles`, computed by
    the executor without keeping their results (`Executor.add_weighted_sum`): what a linear
    aggregation of them needs, and all it gets."""
    wanted = {h.task_id for h in handles}
    self.pending = [h for h in self.pending if h.task_id not in wanted]
    total = self.executor.add_weighted_sum(total, [h.task for h in handles], coefficients)
    self.executor_batches += 1
    self.executed_tasks += len(handles)
    return total

  def compute_pending(self, needed: Sequence[TaskHandle] = ()) -> None:
    """Computes the pending tasks: all of them at once, or, when more than `max_batch_tasks`
    are pending, those of `needed` that are, in batches of at most `max_batch_tasks` filled up
    with the other pending tasks that arrive soonest."""
    pending = [h for h in self.pending if h.status in UNRESOLVED_STATUSES]
    limit = self.max_batch_tasks
    if limit is None or len(pending) <= limit:
      self.pending = []
      if pending:
        self._run_tasks(pending)
      return
    wanted = {h.task_id for h in needed}
    first = [h for h in pending if h.task_id in wanted]
    soonest = sorted(
      (h for h in pending if h.task_id not in wanted), key=lambda h: (h.arrival_time, h.task_id)
    )
    order = first + soonest
    count = max(1, -(-len(first) // limit)) * limit  # whole batches until `needed` is computed
    for start in range(0, min(count, len(order)), limit):
      self._run_tasks(order[start : start + limit])
    self.pending = [h for h in pending if not h.computed]

  def _run_tasks(self, tasks: list[TaskHandle]) -> None:
    batch = self.executor.run([h.task for h in tasks])
    self.executor_batches += 1
    self.executed_tasks += len(tasks)
    for index, handle in enumerate(tasks):
      handle.result_ref = ResultRef(batch, batch.row_offset + index)
      self.held_results[handle.task_id] = handle

  def compact_results(self) -> None:
    """Copies the results still held out of executor batches most of whose rows are already
    used, so that a few waiting updates do not keep (or checkpoint) whole batches. Values are
    unchanged, and so is every later aggregation: a partly used batch is only ever gathered
    from, row by row."""
    by_batch: dict[int, list[TaskHandle]] = collections.defaultdict(list)
    for handle in self.held_results.values():
      _, ref = computed_result(handle)
      by_batch[id(ref.batch)].append(handle)
    for handles in by_batch.values():
      batch = computed_result(handles[0])[1].batch
      num_rows = jax.tree_util.tree_leaves(batch.deltas)[0].shape[0]
      if len(handles) == batch.num_tasks and (not batch.view or num_rows == len(handles)):
        continue  # whole (and possibly aggregated as it is), or compact already
      handles.sort(key=lambda h: computed_result(h)[1].row)
      rows = np.array([computed_result(h)[1].row for h in handles])

      def take(values: jax.Array) -> jax.Array:
        # On the host: an indexing program per batch shape would be compiled otherwise.
        return jnp.asarray(host_value(values)[rows])

      compact = dataclasses.replace(
        batch,
        deltas=jax.tree_util.tree_map(take, batch.deltas),
        aux=jax.tree_util.tree_map(take, batch.aux),  # per-task tables: pytrees (ASO-Fed)
        num_tasks=len(rows),
        row_offset=0,
        view=True,  # never taken whole: it is no executor batch
      )
      for index, handle in enumerate(handles):
        handle.result_ref = ResultRef(compact, index)
