"""Compression: QSGD's unbiasedness and levels, top-k / random-k with error feedback by hand,
exact bytes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.transforms import compression
from tests.transforms.helpers import batch, params_like, rows_of

pytestmark = pytest.mark.timeout(120)


def test_qsgd_values_lie_on_the_levels():
  vector = jnp.asarray([3.0, -4.0])
  for seed in range(20):
    out = np.asarray(compression.quantize(jax.random.PRNGKey(seed), vector, 1))
    # norm 5, one level: each coordinate is 0 or +-5 with the coordinate's sign.
    assert set(np.abs(out).tolist()) <= {0.0, 5.0}
    assert out[0] >= 0 and out[1] <= 0


def test_qsgd_is_unbiased():
  vector = jnp.asarray([0.3, -1.2, 2.5, 0.0, 0.01])
  keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
  draws = jax.vmap(compression.quantize, in_axes=(0, None, None))(keys, vector, 4)
  standard_error = draws.std(axis=0) / np.sqrt(len(keys)) + 1e-6
  assert np.all(np.abs(draws.mean(axis=0) - vector) < 5 * standard_error)


def test_top_k_with_error_feedback_sends_the_residual_later():
  transform = compression.top_k(1 / 3, error_feedback=True)
  state = transform.init(params_like(3), 2)
  key = jax.random.PRNGKey(0)
  out, state = transform.update(batch([[3, 1, 2]], clients=[1]), state, key)
  np.testing.assert_allclose(rows_of(out), [[3, 0, 0]])
  np.testing.assert_allclose(state.residuals, [[0, 0, 0], [0, 1, 2]])
  out, state = transform.update(batch([[0, 0, 0]], clients=[1]), state, key)
  np.testing.assert_allclose(rows_of(out), [[0, 0, 2]])
  np.testing.assert_allclose(state.residuals[1], [0, 1, 0])


def test_error_feedback_takes_one_client_s_rows_in_order():
  transform = compression.top_k(1 / 3, error_feedback=True)
  state = transform.init(params_like(3), 2)
  out, state = transform.update(
    batch([[3, 1, 2], [0, 0, 0]], clients=[1, 1], padding=1), state, jax.random.PRNGKey(0)
  )
  np.testing.assert_allclose(rows_of(out)[:2], [[3, 0, 0], [0, 0, 2]])
  np.testing.assert_allclose(state.residuals[1], [0, 1, 0])
  np.testing.assert_allclose(state.residuals[0], 0)  # the padding row (client 0) kept nothing


def test_top_k_without_error_feedback_keeps_no_state():
  transform = compression.top_k(0.5, error_feedback=False)
  state = transform.init(params_like(4), 3)
  out, state = transform.update(batch([[1, -5, 2, 4]]), state, jax.random.PRNGKey(0))
  np.testing.assert_allclose(rows_of(out), [[0, -5, 0, 4]])
  assert state.residuals is None


def test_random_k_without_error_feedback_is_unbiased():
  transform = compression.random_k(0.25, error_feedback=False)
  state = transform.init(params_like(4), 1)
  vector = [1.0, -2.0, 3.0, 4.0]
  updates = batch([vector])

  def draw(key):
    out, _ = transform.update(updates, state, key)
    return jnp.concatenate([out.deltas['a'][0], out.deltas['b'][0]])

  rows = np.asarray(jax.jit(jax.vmap(draw))(jax.random.split(jax.random.PRNGKey(0), 4000)))
  assert np.all(np.count_nonzero(rows, axis=1) == 1)  # k = 1 of 4 coordinates, scaled by 4
  np.testing.assert_allclose(
    np.abs(rows).max(axis=1), 4 * np.abs(vector)[np.argmax(rows != 0, axis=1)]
  )
  np.testing.assert_allclose(rows.mean(axis=0), vector, atol=0.35)


def test_bytes_by_hand():
  assert compression.dense_bytes(1000) == 4000
  assert compression.qsgd_bytes(10, 16) == 4 + 8  # 10 x (1 sign + 5 level bits) = 60 bits
  assert compression.top_k_bytes(1000, 0.01) == 10 * 8
  assert compression.random_k_bytes(1000, 0.01) == 10 * 4 + 4
  assert compression.num_kept(7, 0.2) == 2  # ceil(1.4)
