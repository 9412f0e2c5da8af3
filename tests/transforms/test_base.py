"""Transform composition and the wrapper that puts transforms in front of any aggregator."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax.runtime.updates import Aggregator
from fedsim_jax.strategy import server_update, weighted_mean
from fedsim_jax.transforms import attacks, chain, identity, robust, with_update_transforms
from tests.transforms.helpers import batch, params_like, rows_of

pytestmark = pytest.mark.timeout(120)


def test_chain_applies_in_order():
  malicious = np.array([True, False])
  flip_then_bound = chain(attacks.scaling(malicious, 10.0), robust.norm_bounding(1.0))
  bound_then_flip = chain(robust.norm_bounding(1.0), attacks.scaling(malicious, 10.0))
  updates = batch([[0.3, 0.4], [0.3, 0.4]])
  key = jax.random.PRNGKey(0)
  first, _ = flip_then_bound.update(updates, flip_then_bound.init(params_like(2), 2), key)
  second, _ = bound_then_flip.update(updates, bound_then_flip.init(params_like(2), 2), key)
  np.testing.assert_allclose(rows_of(first), [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
  np.testing.assert_allclose(rows_of(second), [[3, 4], [0.3, 0.4]], rtol=1e-6)


def test_identity_changes_nothing():
  updates = batch([[1, 2]])
  out, _ = identity().update(updates, identity().init(params_like(2), 1), jax.random.PRNGKey(0))
  np.testing.assert_array_equal(rows_of(out), rows_of(updates))


def test_fedavg_with_a_median_moves_the_model_by_the_median():
  fedavg = server_update(optax.sgd(1.0), weighted_mean())
  wrapped = with_update_transforms(fedavg, robust.median(), 3, jax.random.PRNGKey(0))
  assert wrapped.linear is None and fedavg.linear is not None
  state = wrapped.init(params_like(2))
  state = jax.jit(wrapped.apply)(state, batch([[1, 10], [2, 20], [100, -5]], weights=[5, 1, 1]))
  np.testing.assert_allclose(np.concatenate([state.params['a'], state.params['b']]), [2, 10])
  assert int(jnp.sum(state.key)) != int(jnp.sum(jax.random.PRNGKey(0)))  # the key moved on


def test_client_models_move_with_their_transformed_deltas():
  seen = {}

  def init(params):
    return {'params': params}

  def apply(state, updates):
    seen['client_params'] = updates.client_params
    return state

  mixing = Aggregator(init=init, apply=apply, needs_client_params=True)
  wrapped = with_update_transforms(mixing, robust.norm_bounding(1.0), 2, jax.random.PRNGKey(0))
  updates = batch([[3, 4]])
  start = {'a': jnp.asarray([[10.0]]), 'b': jnp.asarray([[10.0]])}
  updates = updates.replace(client_params=jax.tree_util.tree_map(jnp.add, start, updates.deltas))
  wrapped.apply(wrapped.init(params_like(2)), updates)
  moved = seen['client_params']
  np.testing.assert_allclose([moved['a'][0, 0], moved['b'][0, 0]], [10.6, 10.8], rtol=1e-6)


def test_map_inner_reaches_the_algorithm_s_state():
  fedavg = server_update(optax.sgd(1.0), weighted_mean())
  wrapped = with_update_transforms(fedavg, identity(), 1, jax.random.PRNGKey(0))
  state = wrapped.init(params_like(2))
  moved = state.map_inner(
    lambda inner: inner.replace(params=jax.tree_util.tree_map(lambda p: p + 1, inner.params))
  )
  np.testing.assert_allclose(moved.params['a'], [1.0])
  assert moved.transform == state.transform


@pytest.mark.parametrize(
  'transform',
  [
    lambda: robust.median(),
    lambda: chain(robust.norm_bounding(1.0), robust.centered_clipping(0.5, 2)),
    lambda: __import__('fedsim_jax.transforms.privacy', fromlist=['x']).dp_gaussian(
      1.0, 1.0, central=True, denominator=3
    ),
  ],
  ids=['median', 'chain_ending_in_centered_clipping', 'central_dp'],
)
def test_a_linear_aggregator_gets_the_estimate_as_a_sum_with_the_same_result(transform):
  fedavg = server_update(optax.sgd(1.0), weighted_mean())
  key = jax.random.PRNGKey(3)
  shortcut = with_update_transforms(fedavg, transform(), 3, key)
  rows = with_update_transforms(fedavg._replace(linear=None), transform(), 3, key)
  assert transform().estimate is not None
  updates = batch([[1, 10], [2, 20], [100, -5]], weights=[5, 1, 1], padding=1)
  first = jax.jit(shortcut.apply)(shortcut.init(params_like(2)), updates)
  second = jax.jit(rows.apply)(rows.init(params_like(2)), updates)
  for a, b in zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(second)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
