"""The evaluated EMA of server weights and its three starts, on hand-computed sequences."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.runtime import UpdateBatch
from fedsim_jax.strategy import server_update
from fedsim_jax.strategy.ema import with_ema


def _batch(delta):
  return UpdateBatch(
    deltas={'w': jnp.array([[delta]], jnp.float32)},
    weights=jnp.array([1.0]),
    staleness=jnp.array([0]),
    num_steps=jnp.array([1]),
    group=jnp.array([0], jnp.int32),
  )


def _evaluated(warmup, deltas, decay=0.5, start=8.0):
  """The evaluated model after each server update w <- w + delta, from w = start."""
  aggregator = with_ema(server_update(optax.sgd(1.0)), decay, warmup)
  state = aggregator.init({'w': jnp.array([start])})
  out = []
  for delta in deltas:
    state = aggregator.apply(state, _batch(delta))
    assert float(state.params['w'][0]) == pytest.approx(start + sum(deltas[: len(out) + 1]))
    out.append(float(state.eval_params['w'][0]))
  return out


def test_no_warmup_starts_at_the_initial_model():
  # Models 10, 12; ema 0.5 x 8 + 0.5 x 10 = 9, then 0.5 x 9 + 0.5 x 12 = 10.5.
  assert _evaluated('none', [2.0, 2.0]) == pytest.approx([9.0, 10.5])


def test_bias_correction_leaves_no_share_of_the_initial_model():
  # Accumulator from 0: 5, then 0.5 x 5 + 6 = 8.5; divided by 1 - 0.5^t: 10, 8.5 / 0.75.
  assert _evaluated('bias_correction', [2.0, 2.0]) == pytest.approx([10.0, 8.5 / 0.75])
  # Constant models: the corrected EMA is exactly that model from the first update on.
  assert _evaluated('bias_correction', [2.0, 0.0, 0.0], decay=0.99) == pytest.approx(
    [10.0] * 3, rel=1e-5
  )


def test_num_updates_follows_tensorflows_decay_schedule():
  # Update t (from 0) uses min(decay, (1 + t) / (10 + t)): 0.1, then 2/11 (below 0.99).
  first = 0.1 * 8 + 0.9 * 10
  second = 2 / 11 * first + 9 / 11 * 12
  assert _evaluated('num_updates', [2.0, 2.0], decay=0.99) == pytest.approx([first, second])
  # Late in a run the configured decay applies: min(0.5, (1 + t) / (10 + t)) = 0.5 from t = 8.
  ema = _evaluated('num_updates', [0.0] * 9 + [2.0], decay=0.5)
  assert ema[-1] == pytest.approx(0.5 * 8 + 0.5 * 10)


def test_unknown_warmup_is_refused():
  with pytest.raises(ValueError, match='ema_warmup'):
    with_ema(server_update(optax.sgd(1.0)), 0.9, 'adam')


def test_the_settings_pass_the_warmup_through():
  from fedsim_jax.algorithms.groups import ServerEmaSettings
  from fedsim_jax.algorithms.stragglers.fare_dust import FareDustSettings

  # FARe-DUST's output is EMA_beta(w_1, ..., w_T) (Algorithm 1): w_0 left out by default.
  assert FareDustSettings().ema_warmup == 'bias_correction'
  assert ServerEmaSettings().ema_warmup == 'none'  # FedBuff + EMA: the start is not stated
  aggregator = ServerEmaSettings.from_kwargs(
    {'ema_decay': 0.5, 'ema_warmup': 'bias_correction'}
  ).with_ema(server_update(optax.sgd(1.0)))
  state = aggregator.apply(aggregator.init({'w': jnp.array([8.0])}), _batch(2.0))
  np.testing.assert_allclose(state.eval_params['w'], [10.0])
