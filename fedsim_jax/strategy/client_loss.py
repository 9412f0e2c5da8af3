"""A client's mean loss on its whole training data at given parameters, for algorithms whose
server rule reads it (q-FFL's F_k(w^t)).

The client's examples are gathered on the host (any federation, lazy ones included) and
evaluated in fixed-size batches by one jitted program, so the federation needs no second copy
on the device and a call costs one forward pass over the client's examples.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import numpy as np

from fedsim_jax.models import Model, Params


class ClientExamples(Protocol):
  """What `ClientLoss` reads of a federation (`FederatedDataset`, `LazyFederation`)."""

  def client_examples(self, client_id: int) -> tuple[np.ndarray, np.ndarray]: ...


class ClientLoss:
  """`loss(params, client_id) -> float`: the mean training loss of `client_id` at `params`
  (`model.evaluate`'s loss over every example; 0.0 for a client without examples)."""

  def __init__(self, model: Model, federation: ClientExamples, batch_size: int = 1000) -> None:
    self.federation = federation
    self.batch_size = int(batch_size)
    self._evaluate = jax.jit(model.evaluate)

  def __call__(self, params: Params, client_id: int) -> float:
    x, y = self.federation.client_examples(int(client_id))
    if len(x) == 0:
      return 0.0
    size = min(self.batch_size, 1 << (len(x) - 1).bit_length())  # few compiled shapes
    loss_sum = count = 0.0
    for start in range(0, len(x), size):
      xb, yb = x[start : start + size], y[start : start + size]
      weights = np.zeros(size, np.float32)
      weights[: len(xb)] = 1.0
      pad = size - len(xb)
      if pad:
        xb = np.concatenate([xb, np.repeat(xb[:1], pad, 0)])
        yb = np.concatenate([yb, np.repeat(yb[:1], pad, 0)])
      metrics: Any = jax.device_get(self._evaluate(params, xb, yb.astype(np.int32), weights))
      loss_sum += float(metrics['loss_sum'])
      count += float(metrics['count'])
    return loss_sum / count
