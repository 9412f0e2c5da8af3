"""FedASMU's baselines (FedProx, MOON, FedDyn, PORT, ASO-Fed, FedSA): each rule on a small
hand-computable case, and the degenerate cases where a baseline equals FedAvg or FedAsync."""

import importlib.util
import math
import pathlib
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from fedsim_jax import algorithms, experiment
from fedsim_jax import config as config_lib
from fedsim_jax.algorithms.asofed import (
  AsoFedClients,
  AsoFedInputs,
  asofed_aggregator,
  asofed_client_update,
  decayed_gradient,
  step_scale,
)
from fedsim_jax.algorithms.fedasync import fedasync_delta
from fedsim_jax.algorithms.feddyn import (
  FedDynInputs,
  FedDynScheduler,
  feddyn_aggregator,
  feddyn_client_update,
  updated_client_gradient,
)
from fedsim_jax.algorithms.fedsa import fedsa_aggregator, fedsa_weights
from fedsim_jax.algorithms.moon import (
  MoonInputs,
  MoonScheduler,
  contrastive_loss,
  moon_client_update,
)
from fedsim_jax.algorithms.port import port_aggregator, port_weights, update_similarity
from fedsim_jax.client import sgd_client_update
from fedsim_jax.data import toy_federation
from fedsim_jax.executor import Executor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition, UpdateBatch
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  SynchronousScheduler,
  client_table,
  make_staleness,
  server_update,
)

FED = toy_federation(num_clients=8, min_size=4, max_size=12)
LR = 0.2


def _model():
  return get_model('mlp', FED.input_shape, FED.num_classes, hidden_sizes=(6,))


def _latency(seed=5):
  # Clients of different speeds, so that asynchronous updates arrive with varied staleness.
  return PerStepLatency(FED.num_clients, np.random.default_rng(seed), distribution='exponential')


def _simulation(scheduler, aggregator, client_update, seed=0):
  model = _model()
  return Simulation(
    executor=Executor(client_update, FED.device_arrays(), jax.random.PRNGKey(1)),
    scheduler=scheduler,
    aggregator=aggregator,
    latency=_latency(),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=FED.client_sizes,
    rng=np.random.default_rng(seed),
  )


def _run(sim, versions):
  sim.run(StopCondition(max_versions=versions))
  return sim.params


def _assert_trees_close(a, b, atol=1e-6):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def _max_difference(a, b):
  return max(
    float(jnp.abs(x - y).max())
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  )


def _batch(deltas, staleness, client_id, weights=None, client=None):
  k = len(staleness)
  return UpdateBatch(
    deltas={'w': jnp.asarray(deltas, jnp.float32)},
    weights=jnp.asarray(weights or [1.0] * k, jnp.float32),
    staleness=jnp.asarray(staleness, jnp.int32),
    num_steps=jnp.ones(k, jnp.int32),
    group=jnp.zeros(k, jnp.int32),
    client_params=None if client is None else {'w': jnp.asarray(client)},
    client_id=jnp.asarray(client_id, jnp.int32),
  )


def _sgd_update(**kwargs):
  return sgd_client_update(_model(), optax.sgd(LR), 4, **kwargs)


def _synchronous(cohort=8):
  return SynchronousScheduler(cohort, LocalWork(steps=3), 'num_examples')


# ---- Model features (the representation MOON contrasts) ---------------------------------


def test_features_are_the_input_of_the_output_layer():
  model = _model()
  params = model.init(jax.random.PRNGKey(0))
  x = jax.random.randint(jax.random.PRNGKey(2), (5, *FED.input_shape), 0, 255).astype(jnp.uint8)
  hidden = jax.nn.relu(
    x.reshape(5, -1).astype(jnp.float32) / 255 @ params['Dense_0']['kernel']
    + params['Dense_0']['bias']
  )
  np.testing.assert_allclose(model.features(params, x), hidden, rtol=1e-5, atol=1e-6)
  logits, features = jax.jit(lambda p: model.capture_features(model.apply, p, x))(params)
  np.testing.assert_allclose(logits, model.apply(params, x), rtol=1e-6)
  np.testing.assert_allclose(features, hidden, rtol=1e-5, atol=1e-6)


def test_lenet5_features_are_its_84_dim_layer():
  model = get_model('lenet5', (28, 28, 1), 10)
  params = model.init(jax.random.PRNGKey(0))
  assert model.features(params, jnp.zeros((2, 28, 28, 1), jnp.uint8)).shape == (2, 84)


# ---- MOON --------------------------------------------------------------------------------


class TestMoon:
  def test_contrastive_loss_on_hand_computed_vectors(self):
    z = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    z_global = jnp.array([[2.0, 0.0], [1.0, 0.0]])
    z_previous = jnp.array([[0.0, 3.0], [-1.0, 0.0]])
    # Example 0: cos = 1 (positive), 0 (negative); tau = 0.5 -> -log(e^2 / (e^2 + e^0)).
    first = math.log(1 + math.exp(-2.0))
    # Example 1: cos = 1/sqrt 2 and -1/sqrt 2 -> -log(e^{s} / (e^{s} + e^{-s})), s = sqrt 2.
    second = math.log(1 + math.exp(-2 * math.sqrt(2)))
    np.testing.assert_allclose(
      contrastive_loss(z, z_global, z_previous, 0.5), (first + second) / 2, rtol=1e-6
    )
    np.testing.assert_allclose(
      contrastive_loss(z, z_global, z_previous, 0.5, jnp.array([1.0, 0.0])), first, rtol=1e-6
    )

  def test_previous_equal_to_global_gives_log2_and_no_gradient(self):
    z = jnp.array([[0.3, -1.2, 2.0]])
    other = jnp.array([[1.0, 0.5, -0.1]])
    loss, grad = jax.value_and_grad(contrastive_loss)(z, other, other, 0.5)
    np.testing.assert_allclose(loss, math.log(2), rtol=1e-6)
    np.testing.assert_allclose(grad, 0.0, atol=1e-7)

  def test_client_objective_is_cross_entropy_plus_mu_times_contrastive_loss(self):
    model = _model()
    start = model.init(jax.random.PRNGKey(0))
    previous = model.init(jax.random.PRNGKey(3))
    x = jax.random.randint(jax.random.PRNGKey(2), (4, *FED.input_shape), 0, 255)
    x = x.astype(jnp.uint8)
    batch = (x, jnp.array([0, 1, 2, 3]), jnp.ones(4))
    update = moon_client_update(model, optax.sgd(LR), 4, mu=2.0, temperature=0.5)
    state = update.step(update.init(start, MoonInputs(previous)), batch, MoonInputs(previous))

    def expected_objective(params):
      z = model.features(params, x)
      return model.loss(params, x, batch[1], batch[2]) + 2.0 * contrastive_loss(
        z, model.features(start, x), model.features(previous, x), 0.5, batch[2]
      )

    expected = jax.tree_util.tree_map(
      lambda p, g: p - LR * g, start, jax.grad(expected_objective)(start)
    )
    _assert_trees_close(state.params, expected)
    np.testing.assert_allclose(state.loss_sum, expected_objective(start), rtol=1e-6)

  def test_mu_zero_is_fedavg(self):
    fedavg = _run(_simulation(_synchronous(3), server_update(optax.sgd(1.0)), _sgd_update()), 3)
    moon = _run(
      _simulation(
        MoonScheduler(3, LocalWork(steps=3), 'num_examples', contrast=False),
        server_update(optax.sgd(1.0)),
        moon_client_update(_model(), optax.sgd(LR), 4, mu=0.0, temperature=0.5),
      ),
      3,
    )
    _assert_trees_close(moon, fedavg)

  def test_first_participation_is_fedavg_and_later_rounds_contrast(self):
    def moon_sim():
      return _simulation(
        MoonScheduler(8, LocalWork(steps=3), 'num_examples'),
        server_update(optax.sgd(1.0)),
        moon_client_update(_model(), optax.sgd(LR), 4, mu=5.0, temperature=0.5),
      )

    # Round 1: every client contrasts against previous = global, so l_con has no gradient.
    sim = moon_sim()
    fedavg = _simulation(_synchronous(), server_update(optax.sgd(1.0)), _sgd_update())
    _assert_trees_close(_run(sim, 1), _run(fedavg, 1), atol=1e-5)
    assert np.flatnonzero(sim.scheduler.previous_models.written).tolist() == list(range(8))
    # Round 2: clients now have a previous model that differs from the global one.
    assert _max_difference(_run(sim, 2), _run(fedavg, 2)) > 1e-4

  def test_previous_model_is_the_clients_last_local_model(self):
    scheduler = MoonScheduler(8, LocalWork(steps=3), 'num_examples')
    sim = _simulation(
      scheduler,
      server_update(optax.sgd(1.0)),
      moon_client_update(_model(), optax.sgd(LR), 4, mu=1.0, temperature=0.5),
    )
    start = sim.params
    recorded = {}
    # Capture every client's local model from the round's updates before they aggregate.
    closing = scheduler.rounds.round_closing

    def spy(sim_, round_):
      batch = sim_.updates(round_.aggregated, round_.weights, with_client_params=True)
      for row, handle in enumerate(round_.aggregated):
        recorded[handle.client_id] = jax.tree_util.tree_map(lambda a: a[row], batch.client_params)
      closing(sim_, round_)

    scheduler.rounds.round_closing = spy
    _run(sim, 1)
    for client, params in recorded.items():
      _assert_trees_close(client_table.read(scheduler.previous_models, client), params)
      assert _max_difference(params, start) > 0


# ---- FedDyn ------------------------------------------------------------------------------


class TestFedDyn:
  def test_client_state_update_on_scalars(self):
    # grad_k <- grad_k - alpha (theta_k - theta^{t-1}): 0.5 - 0.1 * 2 = 0.3
    new = updated_client_gradient({'w': jnp.array(0.5)}, {'w': jnp.array(2.0)}, 0.1)
    np.testing.assert_allclose(new['w'], 0.3, rtol=1e-6)

  def test_server_update_on_scalars(self):
    aggregator = feddyn_aggregator(alpha=0.5, num_clients=4)
    state = aggregator.init({'w': jnp.array([1.0])})
    # Deltas 2 and 4, equal weights: mean 3; h = 0 - 0.5 / 4 * 6 = -0.75;
    # theta = 1 + 3 - (-0.75) / 0.5 = 5.5
    state = jax.jit(aggregator.apply)(state, _batch([[2.0], [4.0]], [0, 0], [0, 1]))
    np.testing.assert_allclose(state.h['w'], [-0.75])
    np.testing.assert_allclose(state.params['w'], [5.5])
    # One real delta -1 and a padding row: h = -0.75 + 0.5 / 4 = -0.625;
    # theta = 5.5 - 1 + 1.25 = 5.75
    state = aggregator.apply(state, _batch([[-1.0], [100.0]], [0, 0], [2, 0], weights=[1.0, 0.0]))
    np.testing.assert_allclose(state.h['w'], [-0.625])
    np.testing.assert_allclose(state.params['w'], [5.75])

  def _batch_and_start(self):
    model = _model()
    x = jax.random.randint(jax.random.PRNGKey(2), (4, *FED.input_shape), 0, 255)
    return (
      model,
      model.init(jax.random.PRNGKey(0)),
      (x.astype(jnp.uint8), jnp.array([0, 1, 2, 3]), jnp.ones(4)),
    )

  def test_linear_term_shifts_the_first_step_by_lr_times_the_client_gradient(self):
    model, start, batch = self._batch_and_start()
    gradient = jax.tree_util.tree_map(lambda p: jnp.full_like(p, 0.3), start)
    update = feddyn_client_update(model, optax.sgd(LR), 4, alpha=0.1)
    inputs = FedDynInputs(gradient)
    state = update.step(update.init(start, inputs), batch, inputs)
    plain = sgd_client_update(model, optax.sgd(LR), 4)
    plain_state = plain.step(plain.init(start, None), batch, None)
    _assert_trees_close(
      state.params, jax.tree_util.tree_map(lambda p: p + LR * 0.3, plain_state.params)
    )

  def test_zero_client_gradient_is_fedprox_with_mu_alpha(self):
    model, start, batch = self._batch_and_start()
    zeros = FedDynInputs(jax.tree_util.tree_map(jnp.zeros_like, start))
    feddyn = feddyn_client_update(model, optax.sgd(LR), 4, alpha=0.7)
    fedprox = sgd_client_update(model, optax.sgd(LR), 4, proximal_strength=0.7)
    state, prox_state = feddyn.init(start, zeros), fedprox.init(start, None)
    for _ in range(4):
      state = feddyn.step(state, batch, zeros)
      prox_state = fedprox.step(prox_state, batch, None)
    _assert_trees_close(state.params, prox_state.params)

  def test_server_h_is_the_mean_of_all_client_gradients(self):
    alpha = 0.3
    scheduler = FedDynScheduler(alpha, 3, LocalWork(steps=3), 'uniform')
    sim = _simulation(
      scheduler,
      feddyn_aggregator(alpha, FED.num_clients),
      feddyn_client_update(_model(), optax.sgd(LR), 4, alpha=alpha),
    )
    _run(sim, 4)
    gradients = scheduler.client_gradients
    assert 3 <= gradients.written.sum() <= FED.num_clients
    # Clients never aggregated hold zeros: the mean over all m rows is the mean of all of them.
    unwritten = np.flatnonzero(~gradients.written)
    for client in unwritten:
      assert all(
        not np.any(leaf) for leaf in jax.tree_util.tree_leaves(client_table.read(gradients, client))
      )
    mean = jax.tree_util.tree_map(lambda g: g.sum(axis=0) / FED.num_clients, gradients.values)
    _assert_trees_close(sim.server_state.h, mean)

  def test_round_is_mean_model_minus_h_over_alpha(self):
    alpha = 0.3
    scheduler = FedDynScheduler(alpha, 3, LocalWork(steps=3), 'uniform')
    sim = _simulation(
      scheduler,
      feddyn_aggregator(alpha, FED.num_clients),
      feddyn_client_update(_model(), optax.sgd(LR), 4, alpha=alpha),
    )
    start = sim.params
    _run(sim, 1)
    # First round: every grad_k was 0, so grad_k = -alpha delta_k and h = -alpha/m sum delta_k.
    gradients = scheduler.client_gradients
    assert gradients.written.sum() == 3
    deltas = [
      jax.tree_util.tree_map(lambda g: -g / alpha, client_table.read(gradients, client))
      for client in np.flatnonzero(gradients.written)
    ]
    mean = jax.tree_util.tree_map(lambda *d: sum(d) / 3, *deltas)
    h = jax.tree_util.tree_map(lambda *d: -alpha / FED.num_clients * sum(d), *deltas)
    expected = jax.tree_util.tree_map(lambda p, d, h: p + d - h / alpha, start, mean, h)
    _assert_trees_close(sim.params, expected, atol=1e-5)

  def test_models_with_state_are_rejected(self):
    model = get_model('resnet20', (8, 8, 3), 4)
    with pytest.raises(ValueError, match='BatchNorm'):
      feddyn_client_update(model, optax.sgd(LR), 4, alpha=0.1)


# ---- FedProx -----------------------------------------------------------------------------


def _fields(algorithm):
  return algorithms.get_spec(algorithm).settings.field_names()


def _config(algorithm, **kwargs):
  """3 local steps of batch 4; cohorts (synchronous) or 3 tasks in flight (asynchronous) of 3;
  `kwargs`: more of the algorithm's settings."""
  config = config_lib.base_config()
  config.algorithm.name = algorithm
  config.client.local_steps = 3
  config.client.batch_size = 4
  config.client.learning_rate = LR
  size = 'cohort_size' if 'cohort_size' in _fields(algorithm) else 'concurrency'
  config.algorithm.kwargs.update({size: 3, **kwargs})
  experiment.validate(config)
  return config


def _run_registered(config, versions=3):
  context = algorithms.BuildContext(
    config.algorithm.name, experiment.run_facts(config), FED.client_sizes, _latency()
  )
  algorithm = algorithms.build(experiment.algorithm_settings(config), context)
  update = algorithm.make_client_update(
    _model(), optax.sgd(config.client.learning_rate), config.client.batch_size
  )
  return _run(_simulation(algorithm.scheduler, algorithm.aggregator, update), versions)


class TestFedProx:
  def test_mu_zero_is_fedavg_and_mu_positive_is_not(self):
    fedavg = _run_registered(_config('fedavg'))
    _assert_trees_close(_run_registered(_config('fedprox')), fedavg)
    assert (
      _max_difference(_run_registered(_config('fedprox', proximal_strength=1.0)), fedavg) > 1e-4
    )


# ---- PORT --------------------------------------------------------------------------------


class TestPort:
  def test_weights_on_given_staleness_and_similarity(self):
    # raw_0 = 1 (1 * (1 + 1) / 2 + 10 / 10) = 2; raw_1 = 3 (0 + 10 / 20) = 1.5
    p = port_weights(
      jnp.array([1.0, 3.0]),
      jnp.array([0, 10]),
      jnp.array([1.0, -1.0]),
      similarity_weight=1.0,
      staleness_weight=1.0,
      staleness_bound=10.0,
    )
    np.testing.assert_allclose(p, [2 / 3.5, 1.5 / 3.5], rtol=1e-6)
    # Padding rows (0 examples) get 0.
    p = port_weights(
      jnp.array([2.0, 0.0]),
      jnp.array([4, 0]),
      jnp.array([0.0, 1.0]),
      similarity_weight=1.0,
      staleness_weight=2.0,
      staleness_bound=4.0,
    )
    np.testing.assert_allclose(p, [1.0, 0.0])

  def test_similarity(self):
    np.testing.assert_allclose(
      update_similarity({'a': jnp.array([1.0, 1.0])}, {'a': jnp.array([2.0, 0.0])}),
      2**-0.5,
      rtol=1e-6,
    )
    # No reference yet (zero): 1.
    np.testing.assert_allclose(
      update_similarity({'a': jnp.array([1.0, 1.0])}, {'a': jnp.zeros(2)}), 1.0
    )

  def test_buffer_update_against_the_last_server_update(self):
    aggregator = port_aggregator(np.array([1.0, 1.0, 2.0]))
    state = aggregator.init({'w': jnp.zeros(2)})
    state = state.replace(last_update={'w': jnp.array([1.0, 0.0])})
    # cos = 1 and 0 (staleness 2 and 3 >= 2); raw = 1 + 10/12 and 2 (0.5 + 10/13).
    raw = np.array([1 + 10 / 12, 2 * (0.5 + 10 / 13)])
    p = raw / raw.sum()
    new = jax.jit(aggregator.apply)(state, _batch([[2.0, 0.0], [0.0, 2.0]], [2, 3], [0, 2]))
    expected = p[0] * np.array([2.0, 0.0]) + p[1] * np.array([0.0, 2.0])
    np.testing.assert_allclose(new.params['w'], expected, rtol=1e-6)
    np.testing.assert_allclose(new.last_update['w'], expected, rtol=1e-6)
    # Staleness 0 and 1 (below similarity_min_staleness = 2): cos := 1 for both.
    raw = np.array([1 + 1.0, 2 * (1 + 10 / 11)])
    p = raw / raw.sum()
    new = aggregator.apply(state, _batch([[2.0, 0.0], [0.0, 2.0]], [0, 1], [0, 2]))
    np.testing.assert_allclose(
      new.params['w'], p[0] * np.array([2.0, 0.0]) + p[1] * np.array([0.0, 2.0]), rtol=1e-6
    )

  def test_similarity_to_the_progress_since_download(self):
    aggregator = port_aggregator(
      np.array([1.0, 1.0]), staleness_weight=0.0, similarity_reference='since_download'
    )
    assert aggregator.needs_client_params
    state = aggregator.init({'w': jnp.array([3.0, 1.0])})
    # Row 0: download w_o = client - delta = [1, 1], progress since [2, 0], cos = 1/sqrt 2.
    # Row 1: download [3, 1] = w (no progress since): cos := 1.
    batch = _batch([[1.0, 1.0], [0.0, 1.0]], [2, 2], [0, 1], client=[[2.0, 2.0], [3.0, 2.0]])
    raw = np.array([(2**-0.5 + 1) / 2, 1.0])
    p = raw / raw.sum()
    new = aggregator.apply(state, batch)
    np.testing.assert_allclose(new.params['w'], [3.0 + p[0], 1.0 + p[0] + p[1]], rtol=1e-6)

  def test_no_similarity_and_equal_staleness_is_the_example_weighted_mean(self):
    aggregator = port_aggregator(np.array([1.0, 3.0]), similarity_weight=0.0)
    state = aggregator.init({'w': jnp.array([1.0])})
    new = aggregator.apply(state, _batch([[4.0], [8.0]], [5, 5], [0, 1]))
    np.testing.assert_allclose(new.params['w'], [1.0 + 0.25 * 4 + 0.75 * 8])

  def test_buffer_of_one_is_fedasync_with_alpha_one(self):
    def async_sim(aggregator):
      return _simulation(
        AsynchronousScheduler(3, 1, LocalWork(steps=3), 'uniform'), aggregator, _sgd_update()
      )

    fedasync_params = _run(async_sim(fedasync_delta(1.0, make_staleness('constant'))), 10)
    _assert_trees_close(_run(async_sim(port_aggregator(FED.client_sizes)), 10), fedasync_params)

  def test_invalid_settings(self):
    with pytest.raises(ValueError, match='not both 0'):
      port_aggregator(FED.client_sizes, similarity_weight=0.0, staleness_weight=0.0)
    with pytest.raises(ValueError, match='similarity_reference'):
      port_aggregator(FED.client_sizes, similarity_reference='download')


# ---- ASO-Fed -----------------------------------------------------------------------------


class TestAsoFed:
  def test_step_scale(self):
    np.testing.assert_allclose(step_scale(math.e**2), 2.0)
    assert step_scale(1.5) == 1.0 and step_scale(0.0) == 1.0

  def test_decayed_gradient_on_scalars(self):
    g, g_prev, h = {'w': jnp.array(3.0)}, {'w': jnp.array(1.0)}, {'w': jnp.array(2.0)}
    zeta, new_h = decayed_gradient(g, g_prev, h, 0.5, 'current')
    np.testing.assert_allclose(zeta['w'], 3 - 1 + 2)
    np.testing.assert_allclose(new_h['w'], 0.5 * 2 + 0.5 * 3)
    _, new_h = decayed_gradient(g, g_prev, h, 0.5, 'previous')
    np.testing.assert_allclose(new_h['w'], 0.5 * 2 + 0.5 * 1)

  def test_server_update_uses_the_clients_share_of_examples(self):
    aggregator = asofed_aggregator(np.array([1.0, 3.0]))
    state = aggregator.init({'w': jnp.array([1.0])})
    state = jax.jit(aggregator.apply)(
      state, _batch([[4.0], [50.0]], [7, 0], [1, 0], weights=[1.0, 0.0])
    )
    np.testing.assert_allclose(state.params['w'], [1.0 + 0.75 * 4.0])

  def test_client_step_scales_the_corrected_step(self):
    model = _model()
    start = model.init(jax.random.PRNGKey(0))
    x = jax.random.randint(jax.random.PRNGKey(2), (4, *FED.input_shape), 0, 255)
    batch = (x.astype(jnp.uint8), jnp.array([0, 1, 2, 3]), jnp.ones(4))
    h = jax.tree_util.tree_map(lambda p: jnp.full_like(p, 0.2), start)
    g_prev = jax.tree_util.tree_map(lambda p: jnp.full_like(p, -0.1), start)
    inputs = AsoFedInputs(h=h, previous_gradient=g_prev, step_scale=np.float32(2.0))
    update = asofed_client_update(model, optax.sgd(LR), 4, proximal=0.5, decay=0.5)
    state = update.step(update.init(start, inputs), batch, inputs)
    _, aux = update.final(state, start)  # the carried (h, g_prev) after the step
    # At the start the proximal term has zero gradient: g = grad F.
    g = jax.grad(model.loss)(start, *batch)
    expected = jax.tree_util.tree_map(lambda p, g: p - 2.0 * LR * (g + 0.1 + 0.2), start, g)
    _assert_trees_close(state.params, expected)
    _assert_trees_close(aux['h'], jax.tree_util.tree_map(lambda g: 0.1 + 0.5 * g, g))
    _assert_trees_close(aux['previous_gradient'], g)

  def test_without_its_adaptive_parts_it_is_fedasync_with_example_shares(self):
    fedasync_sim = _simulation(
      AsynchronousScheduler(3, 1, LocalWork(steps=3), 'num_examples'),
      fedasync_delta(1.0, make_staleness('constant')),
      _sgd_update(),
    )
    clients = AsoFedClients(dynamic_step_size=False)
    asofed_sim = _simulation(
      AsynchronousScheduler(3, 1, LocalWork(steps=3), 'uniform', client_state=clients),
      asofed_aggregator(FED.client_sizes),
      asofed_client_update(_model(), optax.sgd(LR), 4, proximal=0.0, decay=0.0),
    )
    _assert_trees_close(_run(asofed_sim, 10), _run(fedasync_sim, 10), atol=1e-5)

  def test_clients_carry_state_and_delays_across_tasks(self):
    clients = AsoFedClients(delay_measure='training_time')
    scheduler = AsynchronousScheduler(3, 1, LocalWork(steps=3), 'uniform', client_state=clients)
    sim = _simulation(
      scheduler,
      asofed_aggregator(FED.client_sizes),
      asofed_client_update(_model(), optax.sgd(LR), 4, proximal=0.01, decay=0.5),
    )
    arrivals = []
    observe = clients.observe_arrival
    clients.observe_arrival = lambda s, h: (
      arrivals.append((h.client_id, h.arrival_time - h.dispatch_time)),
      observe(s, h),
    )
    carried = []
    original_task_inputs = clients.task_inputs

    def task_inputs(sim_, client):
      inputs = original_task_inputs(sim_, client)
      if clients.states.written[client]:
        h, previous = client_table.read(clients.states, client)
        _assert_trees_close(inputs.h, h, atol=0)
        _assert_trees_close(inputs.previous_gradient, previous, atol=0)
        carried.append(client)
      np.testing.assert_allclose(inputs.step_scale, clients.step_scale(client), rtol=1e-6)
      return inputs

    clients.task_inputs = task_inputs
    _run(sim, 15)
    assert len(arrivals) >= 15 and len({c for c, _ in arrivals}) > 1
    for client in {c for c, _ in arrivals}:
      durations = [d for c, d in arrivals if c == client]
      np.testing.assert_allclose(
        clients.step_scale(client), max(1.0, math.log(np.mean(durations))), rtol=1e-6
      )
      h, g_prev = client_table.read(clients.states, client)
      assert _max_difference(h, jax.tree_util.tree_map(jnp.zeros_like, h)) > 0
    # A redispatched client's task carries its state and step scale.
    assert carried, 'no client was dispatched again after an arrival'


# ---- FedSA -------------------------------------------------------------------------------


class TestFedSA:
  def test_weights(self):
    # n = (1, 3) -> shares 0.25, 0.75; s = (0 + 1)^-0.5, (3 + 1)^-0.5
    p = fedsa_weights(jnp.array([1.0, 3.0]), jnp.array([0, 3]), make_staleness('polynomial', a=0.5))
    np.testing.assert_allclose(p, [0.25, 0.375], rtol=1e-6)

  def test_buffer_update(self):
    aggregator = fedsa_aggregator(np.array([1.0, 3.0, 5.0]), make_staleness('polynomial', a=1.0))
    state = aggregator.init({'w': jnp.array([1.0])})
    # Rows: client 0 (stale 1) delta 4, client 1 (fresh) delta 8, padding.
    state = aggregator.apply(
      state, _batch([[4.0], [8.0], [99.0]], [1, 0, 0], [0, 1, 2], weights=[1.0, 1.0, 0.0])
    )
    np.testing.assert_allclose(state.params['w'], [1.0 + 0.25 * 0.5 * 4 + 0.75 * 8])

  def test_buffer_of_one_is_fedasync_with_alpha_one_and_the_same_staleness(self):
    staleness = make_staleness('polynomial', a=0.5)

    def async_sim(aggregator):
      return _simulation(
        AsynchronousScheduler(3, 1, LocalWork(steps=3), 'uniform'), aggregator, _sgd_update()
      )

    fedasync_params = _run(async_sim(fedasync_delta(1.0, staleness)), 10)
    _assert_trees_close(
      _run(async_sim(fedsa_aggregator(FED.client_sizes, staleness)), 10), fedasync_params
    )
    # Stale updates did occur: without the staleness discount the model differs.
    constant = _run(async_sim(fedsa_aggregator(FED.client_sizes, make_staleness('constant'))), 10)
    assert _max_difference(constant, fedasync_params) > 1e-4


# ---- Registration, configs and settings --------------------------------------------------


@pytest.mark.parametrize('algorithm', ['fedprox', 'moon', 'feddyn', 'port', 'asofed', 'fedsa'])
def test_registered_algorithms_run(algorithm):
  # Buffers of 2 where the algorithm has them (asofed applies every update).
  config = _config(algorithm, **({'buffer_size': 2} if 'buffer_size' in _fields(algorithm) else {}))
  params = _run_registered(config, versions=2)
  assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree_util.tree_leaves(params))


@pytest.mark.parametrize(
  'algorithm,field,value,match',
  [
    ('moon', 'temperature', 0.0, 'algorithm.kwargs.temperature'),
    ('moon', 'mu', -1.0, 'algorithm.kwargs.mu'),
    ('feddyn', 'alpha', 0.0, 'algorithm.kwargs.alpha'),
    ('port', 'similarity_weight', 0.0, 'not both 0'),
    ('port', 'similarity_reference', 'nope', 'algorithm.kwargs.similarity_reference'),
    ('asofed', 'decay', 1.0, 'algorithm.kwargs.decay'),
    ('asofed', 'delay_measure', 'wall', 'algorithm.kwargs.delay_measure'),
    # FedDyn's regulariser replaces the proximal term: not one of its settings.
    ('feddyn', 'proximal_strength', 0.1, 'algorithm.kwargs.proximal_strength'),
  ],
)
def test_invalid_settings_name_the_setting(algorithm, field, value, match):
  config = config_lib.base_config()
  config.algorithm.name = algorithm
  experiment.validate(config)
  if (algorithm, field) == ('port', 'similarity_weight'):
    config.algorithm.kwargs.staleness_weight = 0.0
  config.algorithm.kwargs[field] = value
  with pytest.raises(config_lib.ConfigError, match=match) as error:
    experiment.validate(config)
  assert '\n' not in str(error.value)


@pytest.mark.parametrize('name', ['fedprox', 'moon', 'feddyn', 'port', 'asofed', 'fedsa'])
def test_shipped_configs_are_valid_and_use_lenet5(name):
  path = pathlib.Path(__file__).resolve().parents[2] / 'configs' / f'{name}_fashion_mnist.py'
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  assert isinstance(config, ml_collections.ConfigDict)
  assert config.algorithm.name == name and config.model.name == 'lenet5'
  experiment.validate(config)


class TestAsoFedDelayUnit:
  """r_k = max(1, log(mean delay / delay_unit)): the unit of virtual time is explicit."""

  @staticmethod
  def _step_scales(delay_unit, durations):
    clients = AsoFedClients(delay_unit=delay_unit)
    sim = types.SimpleNamespace(params={'w': jnp.zeros(2)}, num_clients=2, version=0)
    for client, duration in durations:
      handle = types.SimpleNamespace(
        client_id=client, dispatch_time=1.0, arrival_time=1.0 + duration, num_steps=0, version=0
      )
      clients.observe_arrival(sim, handle)
    return [clients.step_scale(client) for client in range(2)]

  def test_step_scale_is_the_log_of_the_mean_delay_in_units(self):
    durations = [(0, 20.0), (0, 40.0), (1, 2.0)]
    assert self._step_scales(1.0, durations) == pytest.approx([math.log(30.0), 1.0])
    assert self._step_scales(3.0, durations) == pytest.approx([math.log(10.0), 1.0])

  def test_scaling_time_and_its_unit_together_changes_nothing(self):
    durations = [(0, 20.0), (0, 40.0), (1, 7.0), (1, 9.0)]
    scaled = [(client, 0.01 * duration) for client, duration in durations]
    assert self._step_scales(1.0, durations) == pytest.approx(self._step_scales(0.01, scaled))
    # Without the unit, the same schedule in hundredths of the time gives r_k = 1 throughout.
    assert self._step_scales(1.0, scaled) == [1.0, 1.0]
