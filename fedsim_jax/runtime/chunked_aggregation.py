"""Aggregation of a round larger than `max_batch_tasks`, chunk by chunk.

An aggregator with a linear form (`Aggregator.linear`: `server_update` with a built-in reducer,
FedAvg, FedOpt, FedBuff and their kin) reduces a round to sum_k a_k delta_k followed by one
server step. Such a round is summed in chunks of at most `max_batch_tasks` updates, each
chunk's updates computed, added to the running sum and freed before the next is computed, so
the updates held at once stay bounded whatever the round's size. The chunked sum adds in
another order than one pass over the whole round, so its results differ in rounding from an
unbounded run's.
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


def _accumulate(total: Params, coefficients: jax.Array, deltas: Params) -> Params:
  return jax.tree_util.tree_map(
    lambda t, d: t + jnp.tensordot(coefficients, d, axes=1), total, deltas
  )


class ChunkedAggregation:
  """The jitted linear form of an aggregator, applied to a round chunk by chunk.

  Args:
    linear: the aggregator's linear form (`Aggregator.linear`).
    chunk_tasks: the most updates summed (and held) at once.
  """

  def __init__(self, linear: Any, chunk_tasks: int) -> None:
    self.chunk_tasks = chunk_tasks
    self._numerators: Callable[..., Any] = jax.jit(linear.numerators)
    self._accumulate: Callable[..., Params] = jax.jit(_accumulate, donate_argnums=0)
    self._apply_sum: Callable[..., Any] = jax.jit(linear.apply_sum)

  @classmethod
  def of(cls, aggregator: Aggregator, max_batch_tasks: int | None) -> ChunkedAggregation | None:
    """The chunked aggregation of `aggregator` (None without a linear form or a limit)."""
    if aggregator.linear is None or max_batch_tasks is None:
      return None
    return cls(aggregator.linear, max_batch_tasks)

  def applies_to(self, num_updates: int) -> bool:
    """Whether a round of `num_updates` is summed in chunks (it exceeds one chunk)."""
    return num_updates > self.chunk_tasks

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
    """The server state after one server step from sum_k a_k delta_k over `handles`, each
    chunk's results computed, summed and freed in turn (`params`: the global model, whose
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
    limit = self.chunk_tasks
    for start in range(0, len(handles), limit):
      part = handles[start : start + limit]
      chunk = tasks.stacked_updates(
        part,
        weights[start : start + limit],
        staleness[start : start + limit],
        with_client_params=False,
        bucket_bits=bucket_bits,
      )
      coefficients = np.zeros(len(chunk.weights), np.float32)
      coefficients[: len(part)] = numerators[start : start + len(part)]
      total = self._accumulate(total, coefficients, chunk.deltas)
      del chunk
      for handle in part:  # summed: free the update before the next chunk is computed
        tasks.free_result(handle)
    return self._apply_sum(server_state, total, scalars)
