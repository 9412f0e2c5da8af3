"""A round of a linear aggregator applied from the sum of its updates, never their stack.

An aggregator with a linear form (`Aggregator.linear`: `server_update` with a built-in reducer,
FedAvg, FedOpt, FedBuff and their kin) reduces a round to sum_k a_k delta_k followed by one
server step. Two cases take that form instead of stacking the round's updates:

- **Summed as they train.** When the round's tasks are exactly the pending ones (deferred, no
  scheduler has read their results, and no other task is waiting to be computed: a synchronous
  round) and the executor sums tasks as it runs them (`Executor.sums_tasks`: the loop backend
  on CPU), `Executor.add_weighted_sum` trains them adding each delta to a running sum, so a
  round's deltas are never held, stacked and reduced: on CPU that memory traffic costs more
  than the round's server step. With other tasks pending (an asynchronous buffer while the
  rest are in flight), they are all computed in one batch as before, which keeps the task
  threads busy, and the buffer is stacked.
- **Chunk by chunk.** A round larger than `max_batch_tasks` is summed in chunks of at most that
  many updates, each chunk's updates computed, added to the running sum and freed before the
  next is computed, so the updates held at once stay bounded whatever the round's size.

Both add in another order than one reduction over the stacked round, so their results differ
in float rounding from it (and a chunked round's from an unbounded one's); each is
deterministic: the same round gives the same bits whatever the number of task threads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.executor import round_up_to_bucket
from fedsim_jax.models import Params
from fedsim_jax.runtime.task_table import TaskTable
from fedsim_jax.runtime.tasks import TaskHandle
from fedsim_jax.runtime.updates import Aggregator, update_scalars
from fedsim_jax.tree import add_weighted_rows


class SummedAggregation:
  """The jitted linear form of an aggregator, applied to a round from the sum of its updates.

  Args:
    linear: the aggregator's linear form (`Aggregator.linear`).
    chunk_tasks: the most updates summed (and held) at once; None: no limit.
  """

  def __init__(self, linear: Any, chunk_tasks: int | None) -> None:
    self.chunk_tasks = chunk_tasks
    self._numerators: Callable[..., Any] = jax.jit(linear.numerators)
    self._apply_sum: Callable[..., Any] = jax.jit(linear.apply_sum)

  @classmethod
  def of(cls, aggregator: Aggregator, max_batch_tasks: int | None) -> SummedAggregation | None:
    """The summed aggregation of `aggregator` (None without a linear form)."""
    if aggregator.linear is None:
      return None
    return cls(aggregator.linear, max_batch_tasks)

  def applies_to(self, handles: Sequence[TaskHandle], tasks: TaskTable) -> bool:
    """Whether a round of `handles` is applied from its sum: it exceeds one chunk, or its
    tasks are exactly the pending ones and the executor sums tasks as it runs them."""
    if self.chunk_tasks is not None and len(handles) > self.chunk_tasks:
      return True
    return _sums_tasks(tasks) and tasks.pending_are(handles)

  def apply(
    self,
    server_state: Any,
    params: Params,
    tasks: TaskTable,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    staleness: Sequence[int],
    bucket_bits: int,
  ) -> Any:
    """The server state after one server step from sum_k a_k delta_k over `handles`, chunk by
    chunk: summed by the executor as they train when they are exactly the pending tasks, else
    each chunk's results computed (or read), summed and freed in turn (`params`: the global model, whose
    shape the sum takes; `bucket_bits`: bucketing of batch sizes, as `stack_results`')."""
    weights, staleness = list(weights), list(staleness)
    scalars = update_scalars(
      weights,
      staleness,
      [h.num_steps for h in handles],
      [h.metadata.get('group', 0) for h in handles],
      [h.client_id for h in handles],
      round_up_to_bucket(len(handles), bucket_bits),
    )
    numerators = np.asarray(self._numerators(scalars), np.float32)
    total = jax.tree_util.tree_map(jnp.zeros_like, params)
    limit = self.chunk_tasks or len(handles)
    summing = _sums_tasks(tasks) and tasks.pending_are(handles)
    for start in range(0, len(handles), limit):
      part = handles[start : start + limit]
      coefficients = numerators[start : start + len(part)]
      if summing:
        total = tasks.add_weighted_sum(total, part, coefficients)
        continue
      chunk = tasks.stacked_updates(
        part,
        weights[start : start + limit],
        staleness[start : start + limit],
        with_client_params=False,
        bucket_bits=bucket_bits,
      )
      padded = np.zeros(len(chunk.weights), np.float32)
      padded[: len(part)] = coefficients
      total = add_weighted_rows(total, padded, chunk.deltas)
      del chunk
      for handle in part:  # summed: free the update before the next chunk is computed
        tasks.free_result(handle)
    return self._apply_sum(server_state, total, scalars)


def _sums_tasks(tasks: TaskTable) -> bool:
  """Whether the table's executor sums tasks as it runs them (`Executor.sums_tasks`)."""
  return bool(getattr(tasks.executor, 'sums_tasks', False))
