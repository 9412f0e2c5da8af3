"""Small update batches for the transform tests."""

import jax.numpy as jnp
import numpy as np

from fedsim_jax.runtime.updates import UpdateBatch


def batch(rows, *, weights=None, clients=None, padding=0):
  """An `UpdateBatch` whose deltas are {'a': rows[:, :1], 'b': rows[:, 1:]} (two leaves, so
  that the transforms' flattening is exercised), with `padding` extra rows of weight 0 filled
  with a huge value that must never count."""
  rows = np.asarray(rows, np.float32)
  count = rows.shape[0]
  if padding:
    rows = np.concatenate([rows, np.full((padding, rows.shape[1]), 1e6, np.float32)])
  weights = np.ones(count) if weights is None else np.asarray(weights)
  weights = np.concatenate([weights, np.zeros(padding)]).astype(np.float32)
  clients = np.arange(count) if clients is None else np.asarray(clients)
  clients = np.concatenate([clients, np.zeros(padding, int)]).astype(np.int32)
  total = count + padding
  return UpdateBatch(
    deltas={'a': jnp.asarray(rows[:, :1]), 'b': jnp.asarray(rows[:, 1:])},
    weights=jnp.asarray(weights),
    staleness=jnp.zeros(total, jnp.int32),
    num_steps=jnp.ones(total, jnp.int32),
    group=jnp.zeros(total, jnp.int32),
    client_id=jnp.asarray(clients),
  )


def rows_of(updates):
  """The batch's deltas as one `[K, D]` numpy array (leaves 'a' then 'b')."""
  return np.concatenate([np.asarray(updates.deltas['a']), np.asarray(updates.deltas['b'])], axis=1)


def params_like(width):
  return {'a': jnp.zeros((1,), jnp.float32), 'b': jnp.zeros((width - 1,), jnp.float32)}
