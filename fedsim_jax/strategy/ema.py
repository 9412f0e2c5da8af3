"""Exponential moving average of server weights, used for evaluation.

The straggler paper's `+ EMA` variant of FedBuff ("EMA post-processing of weights"): after every
server update, ema <- decay * ema + (1 - decay) * params, and the EMA is the evaluated model.
The EMA starts at the initial model (the paper does not say; documented choice).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch


@flax.struct.dataclass
class EMAState:
  inner: Any
  eval_params: Params

  @property
  def params(self) -> Params:
    return self.inner.params


def with_ema(aggregator: Aggregator, decay: float) -> Aggregator:
  """Wraps `aggregator` so that its state also tracks an EMA of the global model."""
  if not 0 <= decay < 1:
    raise ValueError(f'decay={decay}; allowed: 0 <= decay < 1')

  def init(params: Params) -> EMAState:
    return EMAState(inner=aggregator.init(params), eval_params=params)

  def apply(state: EMAState, updates: UpdateBatch) -> EMAState:
    inner = aggregator.apply(state.inner, updates)
    ema = jax.tree_util.tree_map(
      lambda e, p: decay * e + (1 - decay) * p, state.eval_params, inner.params
    )
    return EMAState(inner=inner, eval_params=ema)

  return Aggregator(init=init, apply=apply, needs_client_params=aggregator.needs_client_params)
