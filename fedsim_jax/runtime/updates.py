"""Client updates as they reach an aggregator: stacked deltas plus per-update metadata."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.executor import TaskBatchResult, round_up_to_bucket
from fedsim_jax.models import Params
from fedsim_jax.tree import stack


@flax.struct.dataclass
class UpdateBatch:
  """What an aggregator receives. Padding rows have weight 0 and must not count.

  Attributes:
    deltas: pytree, leaves `[K, ...]`: client params after local training minus start params.
    weights: `[K]` float32 aggregation weights chosen by the scheduler (0 on padding rows).
    staleness: `[K]` int32 server versions between a client's download and this aggregation.
    num_steps: `[K]` int32 local steps each client ran.
    group: `[K]` int32 scheduler-assigned group (a FedAT tier, a FedCompass arrival group).
    client_params: pytree, leaves `[K, ...]`: each client's final model (start params +
      delta), present only for aggregators with `needs_client_params`.
    client_id: `[K]` int32 client of each row (for aggregators that keep per-client state).
    estimated: `[K]` bool, rows whose delta the aggregator fills in from its own per-client
      state (CC-FedAvg's Algorithm 2: a skipping client's stored delta); None: no such rows.
  """

  deltas: Params
  weights: jax.Array
  staleness: jax.Array
  num_steps: jax.Array
  group: jax.Array
  client_params: Params | None = None
  client_id: jax.Array | None = None
  estimated: jax.Array | None = None

  @property
  def mask(self) -> jax.Array:
    return (self.weights > 0).astype(jnp.float32)


def weighted_mean_delta(updates: UpdateBatch) -> Params:
  """sum_k w_k delta_k / sum_k w_k (FedAvg's weighted average of client deltas)."""
  total = jnp.maximum(updates.weights.sum(), 1e-12)
  return jax.tree_util.tree_map(
    lambda d: jnp.tensordot(updates.weights, d, axes=1) / total, updates.deltas
  )


class Aggregator(NamedTuple):
  """How updates change the server state: a pair of pure functions (optax-style).

  - `init(params) -> state`: called once with the initial global model. The state is any
    pytree (a `flax.struct.dataclass`, a NamedTuple) that exposes the current global model as
    `state.params`, and may expose the model to evaluate as `state.eval_params` (an EMA, an
    auxiliary model). Server optimizer state, counters and per-client memory live in it too.
  - `apply(state, updates) -> state`: called each time the scheduler aggregates
    (`Simulation.apply_updates`), with an `UpdateBatch` of K rows: `updates.deltas` (the
    clients' parameter changes, leaves `[K, ...]`), `updates.weights` (`[K]`, the
    scheduler's weights), `updates.staleness`, `updates.num_steps`, `updates.group`,
    `updates.client_id`. K is rounded up to a few bucketed sizes so that `apply` compiles
    rarely: padding rows have weight 0 and must not count (`updates.mask` is 1 on real rows).

  `apply` is jitted by the runtime, so it is traced: use `jax.numpy` and `jax.tree_util` on
  the arrays, no Python branches on their values and no side effects. It never sees the
  scheduler or the simulation; everything it needs is in `state` and `updates`. Set
  `needs_client_params` when `apply` reads `updates.client_params` (each client's final
  model; mixing rules such as FedAsync's), so the runtime only stacks them when used. The
  state is saved in checkpoints (arrays with orbax, the rest pickled): define its class at
  module level.

  Most rules need no new aggregator: `fedsim_jax.strategy.server_update(optimizer, reducer)`
  applies x <- x + optimizer(-reducer(updates)) with any optax optimizer and a reducer
  (`weighted_mean()`, `count_mean()`, `staleness_scaled(...)`, ...). A minimal one written
  by hand (the server applies a fraction `rate` of the weighted mean delta)::

    import flax.struct
    import jax
    import jax.numpy as jnp

    from fedsim_jax.runtime import Aggregator, weighted_mean_delta

    @flax.struct.dataclass
    class State:
      params: dict  # the global model: the runtime reads and evaluates state.params
      rounds: jax.Array

    def damped_average(rate: float) -> Aggregator:
      def init(params):
        return State(params, jnp.zeros((), jnp.int32))

      def apply(state, updates):
        mean = weighted_mean_delta(updates)  # sum_k w_k delta_k / sum_k w_k (padding: w = 0)
        params = jax.tree_util.tree_map(lambda p, d: p + rate * d, state.params, mean)
        return State(params, state.rounds + 1)

      return Aggregator(init=init, apply=apply)

  Pass it as `Simulation(aggregator=damped_average(0.5), ...)`, or return it from a
  registered algorithm (README, "New algorithm").
  """

  init: Callable[[Params], Any]
  apply: Callable[[Any, UpdateBatch], Any]
  needs_client_params: bool = False
  linear: LinearAggregation | None = None


class LinearAggregation(NamedTuple):
  """The linear form of an aggregator whose `apply(state, updates)` depends on the deltas only
  through one weighted sum: `apply(state, updates) == apply_sum(state, sum_k a_k delta_k,
  updates)` with a = `numerators(updates)`. `numerators` and `apply_sum` read only the batch's
  scalars (weights, staleness, num_steps, group, client_id; `updates.deltas` is None there).

  An aggregator that has one lets the runtime sum a round larger than
  `Simulation(max_batch_tasks=...)` chunk by chunk, computing and freeing each chunk's tasks
  before the next, so memory holds one chunk of updates instead of the whole cohort.
  `server_update` with a linear reducer provides it; `with_ema` keeps it.
  """

  numerators: Callable[[UpdateBatch], jax.Array]
  apply_sum: Callable[[Any, Params, UpdateBatch], Any]


@dataclasses.dataclass
class ResultRef:
  """Where a computed task result lives: row `row` of a stacked `TaskBatchResult`."""

  batch: TaskBatchResult
  row: int


@jax.jit
def _select_rows(
  accumulated: Params | None, source: Params, rows: jax.Array, mask: jax.Array
) -> Params:
  """accumulated + (source[rows] where mask, else 0), leaf by leaf."""

  def select(acc, leaf):
    picked = jnp.where(mask.reshape(-1, *([1] * (leaf.ndim - 1))), leaf[rows], 0)
    return picked if acc is None else acc + picked

  if accumulated is None:
    return jax.tree_util.tree_map(lambda leaf: select(None, leaf), source)
  return jax.tree_util.tree_map(select, accumulated, source)


def stack_results(
  refs: Sequence[ResultRef],
  weights: Sequence[float],
  staleness: Sequence[int],
  num_steps: Sequence[int],
  group: Sequence[int] | None = None,
  start_params: Sequence[Params] | None = None,
  bucket_bits: int = 3,
  client_ids: Sequence[int] | None = None,
) -> UpdateBatch:
  """Assembles an `UpdateBatch` from task results, padded to a bucketed size with weight 0.

  When the updates are exactly the rows of one executor batch (a synchronous round) the
  stacked arrays are used as they are, with no gather.
  """
  count = len(refs)
  first = refs[0].batch
  whole_batch = (
    not first.view
    and all(r.batch is first for r in refs)
    and count == first.num_tasks
    and all(r.row == i for i, r in enumerate(refs))
  )
  if whole_batch:
    deltas = first.deltas
    num_rows = jax.tree_util.tree_leaves(deltas)[0].shape[0]
  else:
    # Gather the rows from each source batch with index arrays padded to the bucketed output
    # size, so the gathers compile once per (source size, output size) pair.
    num_rows = round_up_to_bucket(count, bucket_bits)
    sources: dict[int, tuple[TaskBatchResult, np.ndarray, np.ndarray]] = {}
    for position, r in enumerate(refs):
      if id(r.batch) not in sources:
        sources[id(r.batch)] = (r.batch, np.zeros(num_rows, np.int32), np.zeros(num_rows, bool))
      _, rows, mask = sources[id(r.batch)]
      rows[position] = r.row
      mask[position] = True
    deltas = None
    for batch, rows, mask in sources.values():
      deltas = _select_rows(deltas, batch.deltas, rows, mask)

  client_params = None
  if start_params is not None:
    # Padding rows repeat the first start params; their weight is 0.
    starts = list(start_params) + [start_params[0]] * (num_rows - count)
    if all(p is starts[0] for p in starts):
      client_params = jax.tree_util.tree_map(lambda s, d: s[None] + d, starts[0], deltas)
    else:
      client_params = jax.tree_util.tree_map(jnp.add, stack(starts), deltas)
  scalars = update_scalars(weights, staleness, num_steps, group, client_ids, num_rows)
  return dataclasses.replace(scalars, deltas=deltas, client_params=client_params)


def update_scalars(
  weights: Sequence[float],
  staleness: Sequence[int],
  num_steps: Sequence[int],
  group: Sequence[int] | None,
  client_ids: Sequence[int] | None,
  num_rows: int,
) -> UpdateBatch:
  """An `UpdateBatch` of the per-update scalars only (`deltas` None), padded to `num_rows`
  with weight 0: what a linear aggregator's numerators read (`LinearAggregation`)."""
  count = len(weights)

  def padded(values, dtype):
    out = np.zeros(num_rows, dtype)
    out[:count] = values
    return out

  return UpdateBatch(
    deltas=None,
    weights=padded(weights, np.float32),
    staleness=padded(staleness, np.int32),
    num_steps=padded(num_steps, np.int32),
    group=padded(group if group is not None else [0] * count, np.int32),
    client_id=None if client_ids is None else padded(client_ids, np.int32),
  )
