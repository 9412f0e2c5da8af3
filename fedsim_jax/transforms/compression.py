"""Compressed client updates: stochastic quantization and sparsification with error feedback.

- QSGD (Alistarh, Grubic, Li, Tomioka, Vojnovic 2017, "QSGD: Communication-Efficient SGD via
  Gradient Quantization and Encoding", Sec. 3.1): each coordinate v_i of an update v becomes
  ||v|| sign(v_i) xi_i / s, with xi_i = l or l + 1 for l = floor(s |v_i| / ||v||), l + 1 with
  probability s |v_i| / ||v|| - l: an unbiased estimate of v with s levels.
- Top-k and random-k sparsification: only k = ceil(fraction x D) coordinates are sent, the
  largest in magnitude or k drawn at random. With error feedback (Stich, Cordonnier, Jaggi 2018,
  "Sparsified SGD with Memory"; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD") each
  client keeps what it did not send, r, and sends the compression of delta + r next time;
  without it, random-k scales what it sends by D / k to stay unbiased.

`*_bytes` give the exact size of one compressed update in the encoding these assume: it is
what the task trace records and what a latency model's bandwidth turns into virtual time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import UpdateBatch
from fedsim_jax.transforms.base import (
  UpdateTransform,
  flatten_rows,
  real_rows,
  stateless,
  unflatten_rows,
  with_deltas,
)

FLOAT_BYTES = 4
INDEX_BYTES = 4  # int32 coordinate indices
SEED_BYTES = 4  # random-k sends the seed of its coordinates instead of their indices


def quantize(key: jax.Array, vector: jax.Array, levels: int) -> jax.Array:
  """QSGD's stochastic quantization of `vector` (`[D]`) to `levels` levels (unbiased)."""
  norm = jnp.linalg.norm(vector)
  scaled = jnp.abs(vector) / jnp.maximum(norm, 1e-30) * levels
  lower = jnp.floor(scaled)
  up = jax.random.uniform(key, vector.shape) < (scaled - lower)
  return norm * jnp.sign(vector) * (lower + up) / levels


def keep_top_k(vector: jax.Array, k: int) -> jax.Array:
  """`vector` with all but its k largest-magnitude coordinates set to 0 (ties: lower index)."""
  _, indices = jax.lax.top_k(jnp.abs(vector), k)
  return jnp.zeros_like(vector).at[indices].set(vector[indices])


def keep_random_k(key: jax.Array, vector: jax.Array, k: int) -> jax.Array:
  """`vector` with all but k coordinates drawn uniformly without replacement set to 0."""
  _, indices = jax.lax.top_k(jax.random.uniform(key, vector.shape), k)
  return jnp.zeros_like(vector).at[indices].set(vector[indices])


def num_kept(num_params: int, fraction: float) -> int:
  """k = ceil(fraction x D), at least 1 and at most D."""
  return min(num_params, max(1, math.ceil(round(fraction * num_params, 9))))


def qsgd(levels: int) -> UpdateTransform:
  """Each update stochastically quantized to `levels` levels (QSGD)."""

  def rewrite(updates: UpdateBatch, key: jax.Array) -> UpdateBatch:
    values = flatten_rows(updates.deltas)
    keys = jax.random.split(key, values.shape[0])
    quantized = jax.vmap(quantize, in_axes=(0, 0, None))(keys, values, levels)
    return with_deltas(updates, unflatten_rows(quantized, updates.deltas))

  return stateless(rewrite)


class ResidualState(NamedTuple):
  # [num_clients, D] float32: what each client has not sent yet (None without error feedback,
  # as checkpoints hold no empty arrays)
  residuals: jax.Array | None


def sparsified(
  keep: Callable[[jax.Array, jax.Array, int], jax.Array],
  fraction: float,
  *,
  error_feedback: bool,
  unbiased_scale: bool,
) -> UpdateTransform:
  """Each update sparsified by `keep(key, vector, k)`; with `error_feedback`, per-client
  residuals carried between a client's updates (rows are taken in order, so a client with two
  updates in one batch sends the second with the first's residual); `unbiased_scale`: multiply
  what is sent by D / k (without error feedback)."""

  def init(params: Params, num_clients: int) -> ResidualState:
    if not error_feedback:
      return ResidualState(None)
    size = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))
    return ResidualState(jnp.zeros((num_clients, size), jnp.float32))

  def update(
    updates: UpdateBatch, state: ResidualState, key: jax.Array
  ) -> tuple[UpdateBatch, ResidualState]:
    values = flatten_rows(updates.deltas)
    k = num_kept(values.shape[1], fraction)
    keys = jax.random.split(key, values.shape[0])
    if not error_feedback:
      sent = jax.vmap(keep, in_axes=(0, 0, None))(keys, values, k)
      if unbiased_scale:
        sent = sent * (values.shape[1] / k)
      return with_deltas(updates, unflatten_rows(sent, updates.deltas)), state
    assert updates.client_id is not None, 'error feedback needs the client of each row'

    def row(residuals, inputs):
      value, client, real, row_key = inputs
      wanted = value + residuals[client]
      sent = keep(row_key, wanted, k)
      kept = jnp.where(real, wanted - sent, residuals[client])
      return residuals.at[client].set(kept), jnp.where(real, sent, value)

    residuals, sent = jax.lax.scan(
      row, state.residuals, (values, updates.client_id, real_rows(updates), keys)
    )
    return with_deltas(updates, unflatten_rows(sent, updates.deltas)), ResidualState(residuals)

  return UpdateTransform(init, update)


def top_k(fraction: float, *, error_feedback: bool = True) -> UpdateTransform:
  """The k = ceil(fraction x D) largest-magnitude coordinates of each update."""
  return sparsified(
    lambda key, vector, k: keep_top_k(vector, k),
    fraction,
    error_feedback=error_feedback,
    unbiased_scale=False,
  )


def random_k(fraction: float, *, error_feedback: bool = True) -> UpdateTransform:
  """k = ceil(fraction x D) coordinates of each update drawn at random (scaled by D / k without
  error feedback, so that the update stays unbiased)."""
  return sparsified(
    keep_random_k, fraction, error_feedback=error_feedback, unbiased_scale=not error_feedback
  )


def dense_bytes(num_params: int) -> int:
  """Bytes of an uncompressed update: float32 values."""
  return FLOAT_BYTES * num_params


def qsgd_bytes(num_params: int, levels: int) -> int:
  """Bytes of a QSGD update: a float32 norm, and per coordinate a sign bit and
  ceil(log2(levels + 1)) bits of level (no entropy coding)."""
  bits = num_params * (1 + math.ceil(math.log2(levels + 1)))
  return FLOAT_BYTES + math.ceil(bits / 8)


def top_k_bytes(num_params: int, fraction: float) -> int:
  """Bytes of a top-k update: k float32 values and their k int32 indices."""
  return num_kept(num_params, fraction) * (FLOAT_BYTES + INDEX_BYTES)


def random_k_bytes(num_params: int, fraction: float) -> int:
  """Bytes of a random-k update: k float32 values and the seed that draws their indices."""
  return num_kept(num_params, fraction) * FLOAT_BYTES + SEED_BYTES
