"""Update transforms: optax-style (init, update) pairs over a batch of client updates.

A transform rewrites the `UpdateBatch` an aggregator is about to receive: per update, as the
client would before sending it (clipping, local noise, quantization, sparsification with error
feedback, an attacker's tampering), or over the whole batch, as the server would before
reducing it (a robust estimate, central noise). `chain` composes them in order, and
`with_update_transforms` puts a chain in front of any `Aggregator`, so that the same
transforms apply to every algorithm: a synchronous cohort, a FedBuff buffer, a FedCompass
group and FedAsync's single update alike.

A transform's state is any pytree: tables with one row per client (error-feedback residuals)
or shared values (an adaptive clipping norm). It lives in the aggregator's state, so it is
saved in checkpoints and restored bit for bit. `update` is traced under `jit`: no Python
branches on array values. Padding rows (weight 0) must leave every state untouched and stay
out of every statistic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch

TransformState = Any


class UpdateTransform(NamedTuple):
  """A transformation of a batch of client updates (optax-style).

  - `init(params, num_clients) -> state`: the initial state for a federation of
    `num_clients` clients whose updates are shaped like `params`.
  - `update(updates, state, key) -> (updates, state)`: the batch with its `deltas`
    transformed (its scalars as they are unless the transform says otherwise), and the new
    state; `key`: a fresh PRNG key for this batch.
  - `estimate` (optional), for a transform that replaces every real row by one update (a
    robust estimate, DP's noised mean): `estimate(updates, state, key) -> (update, state)`,
    that one update (unstacked), with `update` its rows. `with_update_transforms` hands it to
    a linear aggregator as a sum without building the rows.
  """

  init: Callable[[Params, int], TransformState]
  update: Callable[[UpdateBatch, TransformState, jax.Array], tuple[UpdateBatch, TransformState]]
  estimate: Estimate | None = None


Estimate = Callable[[UpdateBatch, TransformState, jax.Array], tuple[Params, TransformState]]


class EmptyState(NamedTuple):
  """The state of a transform that keeps none."""


def stateless(rewrite: Callable[[UpdateBatch, jax.Array], UpdateBatch]) -> UpdateTransform:
  """A transform without state from `rewrite(updates, key) -> updates`."""

  def update(
    updates: UpdateBatch, state: EmptyState, key: jax.Array
  ) -> tuple[UpdateBatch, EmptyState]:
    return rewrite(updates, key), state

  return UpdateTransform(lambda params, num_clients: EmptyState(), update)


def replacing_rows(
  init: Callable[[Params, int], TransformState], estimate: Estimate
) -> UpdateTransform:
  """The transform that replaces every real row of a batch by `estimate`'s one update (padding
  rows become zeros)."""

  def update(
    updates: UpdateBatch, state: TransformState, key: jax.Array
  ) -> tuple[UpdateBatch, TransformState]:
    value, state = estimate(updates, state, key)
    rows = broadcast_rows(value, updates.weights.shape[0])
    zeros = jax.tree_util.tree_map(jnp.zeros_like, rows)
    return with_deltas(updates, select_rows(real_rows(updates), rows, zeros)), state

  return UpdateTransform(init, update, estimate)


def identity() -> UpdateTransform:
  """Leaves every update as it is."""
  return stateless(lambda updates, key: updates)


def chain(*transforms: UpdateTransform) -> UpdateTransform:
  """Applies `transforms` in order, each to what the one before produced (optax.chain's form);
  its state is the tuple of their states."""

  def init(params: Params, num_clients: int) -> tuple[TransformState, ...]:
    return tuple(t.init(params, num_clients) for t in transforms)

  def update(
    updates: UpdateBatch, state: tuple[TransformState, ...], key: jax.Array
  ) -> tuple[UpdateBatch, tuple[TransformState, ...]]:
    keys = jax.random.split(key, max(len(transforms), 1))
    new_state = []
    for transform, inner, subkey in zip(transforms, state, keys):
      updates, inner = transform.update(updates, inner, subkey)
      new_state.append(inner)
    return updates, tuple(new_state)

  last = transforms[-1].estimate if transforms else None
  if last is None:
    return UpdateTransform(init, update)

  def estimate(
    updates: UpdateBatch, state: tuple[TransformState, ...], key: jax.Array
  ) -> tuple[Params, tuple[TransformState, ...]]:
    # The same keys as `update`: a chain estimates what its rows would hold.
    keys = jax.random.split(key, len(transforms))
    new_state = []
    for transform, inner, subkey in zip(transforms[:-1], state, keys):
      updates, inner = transform.update(updates, inner, subkey)
      new_state.append(inner)
    value, inner = last(updates, state[-1], keys[-1])
    return value, (*new_state, inner)

  return UpdateTransform(init, update, estimate)


# Row helpers: a batch's deltas are pytrees whose leaves are `[K, ...]`.


def row_norms(deltas: Params) -> jax.Array:
  """`[K]` L2 norm of each row's whole update (over every leaf)."""
  squares = [
    jnp.sum(jnp.square(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in _leaves(deltas)
  ]
  return jnp.sqrt(sum(squares))


def weighted_row_sum(deltas: Params, factors: jax.Array) -> Params:
  """sum_k factors[k] x row k, one leaf at a time (a dot product: XLA:CPU reduces over the row
  axis of a `[K, ...]` array about 20x slower than it multiplies by a `[K]` vector)."""
  return jax.tree_util.tree_map(lambda leaf: jnp.tensordot(factors, leaf, axes=1), deltas)


def column_sums(values: jax.Array, factors: jax.Array | None = None) -> jax.Array:
  """`[D]`: sum_k factors[k] values[k] of a `[K, D]` array (factors default to ones), as a
  matrix-vector product (see `weighted_row_sum`)."""
  if factors is None:
    factors = jnp.ones(values.shape[0], values.dtype)
  return factors.astype(values.dtype) @ values


def scale_rows(deltas: Params, factors: jax.Array) -> Params:
  """Each row multiplied by its factor (`[K]`)."""
  return jax.tree_util.tree_map(lambda leaf: leaf * _column(factors, leaf), deltas)


def select_rows(mask: jax.Array, on_true: Params, on_false: Params) -> Params:
  """Row k of `on_true` where `mask[k]`, else of `on_false`."""
  return jax.tree_util.tree_map(lambda a, b: jnp.where(_column(mask, a), a, b), on_true, on_false)


def broadcast_rows(estimate: Params, num_rows: int) -> Params:
  """`estimate` (one update) repeated as `num_rows` rows."""
  return jax.tree_util.tree_map(
    lambda leaf: jnp.broadcast_to(leaf, (num_rows, *leaf.shape)), estimate
  )


def flatten_rows(deltas: Params) -> jax.Array:
  """`[K, D]`: each row's update as one vector (leaves in tree order)."""
  return jnp.concatenate([leaf.reshape(leaf.shape[0], -1) for leaf in _leaves(deltas)], axis=1)


def unflatten_rows(flat: jax.Array, like: Params) -> Params:
  """`flat` (`[K, D]`) as a pytree shaped like `like` (leaves `[K, ...]`)."""
  leaves, treedef = jax.tree_util.tree_flatten(like)
  out, start = [], 0
  for leaf in leaves:
    size = leaf[0].size
    out.append(flat[:, start : start + size].reshape(leaf.shape).astype(leaf.dtype))
    start += size
  return jax.tree_util.tree_unflatten(treedef, out)


def with_deltas(updates: UpdateBatch, deltas: Params) -> UpdateBatch:
  """`updates` with its deltas replaced (its scalars as they are)."""
  return dataclasses.replace(updates, deltas=deltas)


def real_rows(updates: UpdateBatch) -> jax.Array:
  """`[K]` bool: the batch's real rows (padding has weight 0)."""
  return updates.weights > 0


def _leaves(deltas: Params) -> list[jax.Array]:
  return jax.tree_util.tree_leaves(deltas)


def _column(values: jax.Array, leaf: jax.Array) -> jax.Array:
  return values.reshape(values.shape[0], *([1] * (leaf.ndim - 1)))


@flax.struct.dataclass
class TransformedState:
  """An aggregator's state with its update transforms' state and their PRNG key: the global
  model is the inner aggregator's (`params`, `eval_params`)."""

  inner: Any
  transform: Any
  key: jax.Array

  @property
  def params(self) -> Params:
    return self.inner.params

  @property
  def eval_params(self) -> Params:
    return getattr(self.inner, 'eval_params', self.inner.params)

  def map_inner(self, update: Callable[[Any], Any]) -> TransformedState:
    """This state with the inner aggregator's state replaced by `update(inner)` (a scheduler's
    `update_server_state` reaches the algorithm's own state through it)."""
    return dataclasses.replace(self, inner=update(self.inner))


def with_update_transforms(
  aggregator: Aggregator, transform: UpdateTransform, num_clients: int, key: jax.Array
) -> Aggregator:
  """`aggregator` receiving every batch after `transform` has rewritten it.

  Each client's final model (`client_params`, read by mixing rules such as FedAsync's) moves
  with its transformed delta. The result has no linear form (`Aggregator.linear`): a
  transform may read the whole batch, so the runtime hands it whole. `key`: the PRNG key the
  transforms' draws start from (a fresh subkey per batch).

  When the chain ends in a transform that replaces every row by one estimate v and the
  aggregator is linear, its sum over the rows, sum_k a_k v, is handed over as (sum_k a_k) v
  without building the rows (`LinearAggregation.apply_sum`)."""
  linear = aggregator.linear
  shortcut = (
    transform.estimate if linear is not None and not aggregator.needs_client_params else None
  )

  def init(params: Params) -> TransformedState:
    return TransformedState(
      inner=aggregator.init(params),
      transform=transform.init(params, num_clients),
      key=key,
    )

  def apply(state: TransformedState, updates: UpdateBatch) -> TransformedState:
    key, subkey = jax.random.split(state.key)
    if shortcut is not None:
      assert linear is not None
      value, transform_state = shortcut(updates, state.transform, subkey)
      total = jnp.sum(linear.numerators(updates))
      summed = jax.tree_util.tree_map(lambda leaf: total * leaf, value)
      inner = linear.apply_sum(state.inner, summed, updates)
      return TransformedState(inner=inner, transform=transform_state, key=key)
    transformed, transform_state = transform.update(updates, state.transform, subkey)
    if updates.client_params is not None:
      moved = jax.tree_util.tree_map(
        lambda p, new, old: p + (new - old),
        updates.client_params,
        transformed.deltas,
        updates.deltas,
      )
      transformed = dataclasses.replace(transformed, client_params=moved)
    return TransformedState(
      inner=aggregator.apply(state.inner, transformed), transform=transform_state, key=key
    )

  return aggregator._replace(init=init, apply=apply, linear=None)
