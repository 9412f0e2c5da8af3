"""`max_pool_2x2` equals `flax.linen.max_pool(x, (2, 2), strides=(2, 2))`, gradient included."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.models.pooling import max_pool_2x2


def _reference(x):
  return nn.max_pool(x, (2, 2), strides=(2, 2))


@pytest.mark.parametrize('shape', [(3, 8, 6, 4), (2, 7, 5, 3), (2, 3, 6, 6, 2), (6, 6, 1)])
def test_values_and_gradient_equal_flax_max_pool(shape):
  rng = np.random.default_rng(0)
  # Few distinct values, so most windows hold ties: the gradient must go where flax sends it.
  x = jnp.asarray(rng.integers(0, 3, shape).astype(np.float32))
  cotangent = jnp.asarray(rng.normal(size=_reference(x).shape).astype(np.float32))
  np.testing.assert_array_equal(max_pool_2x2(x), _reference(x))
  ours = jax.vjp(max_pool_2x2, x)[1](cotangent)[0]
  flax_grad = jax.vjp(_reference, x)[1](cotangent)[0]
  np.testing.assert_array_equal(ours, flax_grad)


def test_ties_send_the_whole_gradient_to_the_first_maximum():
  x = jnp.asarray([[[[1.0], [5.0]], [[5.0], [5.0]]]])  # one 2x2 window, three maxima
  grad = jax.grad(lambda v: max_pool_2x2(v).sum())(x)
  np.testing.assert_array_equal(grad[0, :, :, 0], [[0.0, 1.0], [0.0, 0.0]])


def test_vmapped_gradient_matches_flax():
  x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 2, 6, 6, 3)).astype(np.float32))
  loss = lambda pool: lambda v: jnp.sum(jnp.tanh(pool(v)) ** 2)
  ours = jax.vmap(jax.grad(loss(max_pool_2x2)))(x)
  np.testing.assert_allclose(ours, jax.vmap(jax.grad(loss(_reference)))(x), rtol=0, atol=0)
