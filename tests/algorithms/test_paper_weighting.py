"""Update weights as the papers write them, on runs of the registered algorithms: FedDyn's
Algorithm 1 averages the round's models with 1 / |P_t| whatever the clients' sizes, and
FedBuff's `normalization='steps'` is a FedNova-normalised *sum* (docs/fidelity.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax import algorithms
from fedsim_jax.data import toy_federation
from fedsim_jax.executor import Executor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition, UpdateBatch
from fedsim_jax.strategy import client_table

FED = toy_federation(num_clients=4, min_size=3, max_size=30, seed=1)
LR = 0.2
ALPHA = 0.3


def _feddyn_first_round(**kwargs):
  """One FedDyn round of every client (P_t = the federation), built by the registry; returns
  the start params, the params after the round and each client's delta."""
  facts = algorithms.RunFacts(num_clients=FED.num_clients, local_steps=3, batch_size=4)
  settings = algorithms.resolve_settings(
    'feddyn', {'alpha': ALPHA, 'cohort_size': FED.num_clients, **kwargs}, facts
  )
  latency = PerStepLatency(FED.num_clients, np.random.default_rng(5), distribution='exponential')
  context = algorithms.BuildContext('feddyn', facts, FED.client_sizes, latency)
  algorithm = algorithms.build(settings, context)
  model = get_model('mlp', FED.input_shape, FED.num_classes, hidden_sizes=(6,))
  sim = Simulation(
    executor=Executor(
      algorithm.make_client_update(model, optax.sgd(LR), 4),
      FED.device_arrays(),
      jax.random.PRNGKey(1),
    ),
    scheduler=algorithm.scheduler,
    aggregator=algorithm.aggregator,
    latency=latency,
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=FED.client_sizes,
    rng=np.random.default_rng(0),
  )
  start = sim.params
  sim.run(StopCondition(max_versions=1))
  # Before its first round every grad_k is 0, so afterwards grad_k = -alpha delta_k.
  gradients = algorithm.scheduler.client_gradients
  assert gradients.written.all()
  deltas = [
    jax.tree_util.tree_map(lambda g: -g / ALPHA, client_table.read(gradients, client))
    for client in range(FED.num_clients)
  ]
  return start, sim.params, deltas


def _feddyn_round(start, deltas, shares):
  """Algorithm 1's server with the model average weighted by `shares`:
  theta = theta^{t-1} + sum_k s_k delta_k - h / alpha, h = -(alpha / m) sum_k delta_k."""
  m = len(deltas)
  mean = jax.tree_util.tree_map(lambda *d: sum(s * x for s, x in zip(shares, d)), *deltas)
  h = jax.tree_util.tree_map(lambda *d: -ALPHA / m * sum(d), *deltas)
  return jax.tree_util.tree_map(lambda p, d, h: p + d - h / ALPHA, start, mean, h)


def _max_difference(a, b):
  return max(
    float(jnp.abs(x - y).max())
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  )


def test_feddyn_round_with_unequal_clients_is_the_plain_mean_of_the_deltas():
  sizes = np.asarray(FED.client_sizes)
  assert len(set(sizes.tolist())) == len(sizes)  # every client a different size
  start, params, deltas = _feddyn_first_round()
  m = FED.num_clients
  plain = _feddyn_round(start, deltas, np.full(m, 1.0 / m))
  by_examples = _feddyn_round(start, deltas, sizes / sizes.sum())
  assert _max_difference(plain, by_examples) > 1e-3  # the two readings are told apart
  assert _max_difference(params, plain) < 1e-5
  # 'num_examples' stays available and weights the model average by the clients' examples.
  _, weighted, _ = _feddyn_first_round(weighting='num_examples')
  assert _max_difference(weighted, by_examples) < 1e-5


def _fedbuff_step(normalization, num_steps, weighting='uniform'):
  facts = algorithms.RunFacts(num_clients=4, local_steps=2)
  kwargs = {
    'normalization': normalization,
    'weighting': weighting,
    'staleness': 'constant',
    'server_learning_rate': 1.0,
    'concurrency': 3,
    'buffer_size': 3,
  }
  settings = algorithms.resolve_settings('fedbuff', kwargs, facts)
  context = algorithms.BuildContext('fedbuff', facts, np.array([4, 6, 8, 10]))
  aggregator = algorithms.build(settings, context).aggregator
  batch = UpdateBatch(
    deltas={'w': jnp.array([[1.0], [3.0], [-2.0], [1e6]])},  # the last row: padding
    weights=jnp.array([1.0, 1.0, 1.0, 0.0]),
    staleness=jnp.zeros(4, jnp.int32),
    num_steps=jnp.array([*num_steps, 0], jnp.int32),
    group=jnp.zeros(4, jnp.int32),
  )
  state = aggregator.apply(aggregator.init({'w': jnp.array([0.0])}), batch)
  return float(state.params['w'][0])


def test_fedbuff_steps_normalization_is_a_fednova_normalised_sum():
  # K = 3 uniform weights, deltas [1, 3, -2], Q = [1, 2, 4]: FedNova's average over the buffer
  # is tau_eff (1/3)(1/1 + 3/2 - 2/4) with tau_eff = 7/3; 'steps' divides by nothing, so it is
  # K = 3 times that average (as 'sum' is K times 'weights').
  fednova_average = 7 / 3 * (1 / 3) * (1.0 + 1.5 - 0.5)
  assert _fedbuff_step('steps', [1, 2, 4]) == pytest.approx(3 * fednova_average, rel=1e-6)
  # With equal local steps it equals 'sum' (the plain sum, 2), K times the mean ('weights').
  assert _fedbuff_step('steps', [2, 2, 2]) == pytest.approx(2.0, rel=1e-6)
  assert _fedbuff_step('sum', [2, 2, 2]) == pytest.approx(2.0, rel=1e-6)
  assert _fedbuff_step('weights', [2, 2, 2]) == pytest.approx(2.0 / 3, rel=1e-6)
