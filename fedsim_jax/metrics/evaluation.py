"""Centralised evaluation of the global model on a held-out split."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.models import Model, Params


def make_evaluator(model: Model, x: np.ndarray, y: np.ndarray,
                   batch_size: int = 1000) -> Callable[[Params], dict[str, float]]:
  """Returns `evaluate(params) -> {'accuracy', 'loss', 'num_examples'}` over `(x, y)`.

  The split is padded to whole batches (padding weighted 0) and kept on device; one jitted
  program is compiled per model. Batches run from a Python loop, which on XLA:CPU is faster for
  convolutions than a scan (DESIGN.md).
  """
  if len(x) == 0:
    raise ValueError('evaluation split is empty')
  batch_size = min(batch_size, len(x))
  num_batches = -(-len(x) // batch_size)
  padded = num_batches * batch_size
  weights = np.zeros(padded, np.float32)
  weights[:len(x)] = 1.0
  pad = padded - len(x)
  xs = jnp.asarray(np.concatenate([x, np.repeat(x[:1], pad, 0)]).reshape(
      num_batches, batch_size, *x.shape[1:]))
  ys = jnp.asarray(np.concatenate([y, np.repeat(y[:1], pad, 0)]).reshape(
      num_batches, batch_size).astype(np.int32))
  ws = jnp.asarray(weights.reshape(num_batches, batch_size))

  @jax.jit
  def batch_metrics(params, xb, yb, wb):
    return model.evaluate(params, xb, yb, wb)

  def evaluate(params: Params) -> dict[str, float]:
    totals = None
    for i in range(num_batches):
      m = batch_metrics(params, xs[i], ys[i], ws[i])
      totals = m if totals is None else jax.tree_util.tree_map(jnp.add, totals, m)
    totals = jax.device_get(totals)
    count = float(totals['count'])
    return {'accuracy': float(totals['correct']) / count,
            'loss': float(totals['loss_sum']) / count, 'num_examples': int(count)}

  return evaluate
