"""Exponential moving average of server weights, used for evaluation.

The straggler paper's `+ EMA` variant of FedBuff ("EMA post-processing of weights"): after every
server update, ema <- decay * ema + (1 - decay) * params, and the EMA is the evaluated model.

How the EMA starts, which the paper does not say for FedBuff, is `warmup` (a named setting,
`algorithm.kwargs.ema_warmup`; FARe-DUST, whose Algorithm 1 outputs EMA_beta(w_1, ..., w_T),
defaults to 'bias_correction'):

- 'none' (`with_ema`'s default): the EMA starts at the initial model. After t updates a weight
  decay^t of it is still the random initialisation (37% after 100 updates at decay 0.99).
- 'bias_correction': the EMA accumulates from zero and is divided by 1 - decay^t (Adam's
  correction): a weighted mean of the server models so far, with no share of the initial model.
- 'num_updates': the decay of update t is min(decay, (1 + t) / (10 + t)), as TensorFlow's
  `ExponentialMovingAverage(num_updates=...)`, the usual EMA of the paper's authors' stack: the
  early updates move the EMA fast, so the initialisation's share vanishes quickly.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from fedsim_jax.models import Params
from fedsim_jax.runtime.updates import Aggregator, LinearAggregation, UpdateBatch
from fedsim_jax.str_enum import StrEnum


class EmaWarmup(StrEnum):
  """How the EMA starts (`algorithm.kwargs.ema_warmup`; the module docstring)."""

  NONE = 'none'
  BIAS_CORRECTION = 'bias_correction'
  NUM_UPDATES = 'num_updates'


WARMUPS = tuple(warmup.value for warmup in EmaWarmup)


@flax.struct.dataclass
class EMAState:
  inner: Any
  eval_params: Params
  # 'bias_correction': the uncorrected average (from zero); updates applied so far.
  accumulator: Params | None = None
  updates: Any = 0

  @property
  def params(self) -> Params:
    return self.inner.params


def with_ema(aggregator: Aggregator, decay: float, warmup: str = 'none') -> Aggregator:
  """Wraps `aggregator` so that its state also tracks an EMA of the global model (`warmup`: how
  it starts, see the module docstring)."""
  if not 0 <= decay < 1:
    raise ValueError(f'decay={decay}; allowed: 0 <= decay < 1')
  if warmup not in WARMUPS:
    raise ValueError(f'ema_warmup={warmup!r}; allowed: {WARMUPS}')
  start = EmaWarmup(warmup)

  def init(params: Params) -> EMAState:
    if start is EmaWarmup.NONE:
      return EMAState(inner=aggregator.init(params), eval_params=params)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return EMAState(
      inner=aggregator.init(params),
      eval_params=params,
      accumulator=zeros if start is EmaWarmup.BIAS_CORRECTION else None,
      updates=jnp.zeros((), jnp.int32),
    )

  def apply(state: EMAState, updates: UpdateBatch) -> EMAState:
    return follow(state, aggregator.apply(state.inner, updates))

  def follow(state: EMAState, inner: Any) -> EMAState:
    """The EMA after the wrapped aggregator moved to `inner`."""
    if start is EmaWarmup.NONE:
      ema = jax.tree_util.tree_map(
        lambda e, p: decay * e + (1 - decay) * p, state.eval_params, inner.params
      )
      return EMAState(inner=inner, eval_params=ema)
    count = state.updates + 1
    if start is EmaWarmup.BIAS_CORRECTION:
      accumulator = jax.tree_util.tree_map(
        lambda a, p: decay * a + (1 - decay) * p, state.accumulator, inner.params
      )
      correction = 1 - jnp.asarray(decay, jnp.float32) ** count
      ema = jax.tree_util.tree_map(lambda a: a / correction, accumulator)
      return EMAState(inner=inner, eval_params=ema, accumulator=accumulator, updates=count)
    rate = jnp.minimum(decay, (1.0 + state.updates) / (10.0 + state.updates))  # TF's num_updates
    ema = jax.tree_util.tree_map(
      lambda e, p: rate * e + (1 - rate) * p, state.eval_params, inner.params
    )
    return EMAState(inner=inner, eval_params=ema, updates=count)

  linear = None
  if aggregator.linear is not None:
    inner_linear = aggregator.linear

    def apply_sum(state: EMAState, summed: Params, scalars: UpdateBatch) -> EMAState:
      return follow(state, inner_linear.apply_sum(state.inner, summed, scalars))

    linear = LinearAggregation(numerators=inner_linear.numerators, apply_sum=apply_sum)
  return Aggregator(
    init=init, apply=apply, needs_client_params=aggregator.needs_client_params, linear=linear
  )
