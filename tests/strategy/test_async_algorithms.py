"""FedAsync, FedBuff, FedAT and the synchronous variants: rules on hand-computable cases and
the degenerate-case equivalences of the issue."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax import algorithms
from fedsim_jax.algorithms.base import RunFacts
from fedsim_jax.algorithms.fedasync import fedasync, fedasync_delta
from fedsim_jax.algorithms.fedat import (
  TieredScheduler,
  cross_tier_weights,
  fedat_aggregator,
  speed_tiers,
)
from fedsim_jax.algorithms.fedbuff import REDUCERS
from fedsim_jax.client import sgd_client_update
from fedsim_jax.data import toy_federation
from fedsim_jax.executor import ClientTask, Executor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition, UpdateBatch
from fedsim_jax.runtime.latency.registry import make_latency
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  SynchronousScheduler,
  count_mean,
  make_staleness,
  server_update,
  staleness_scaled,
  with_ema,
)

FED = toy_federation(num_clients=8, min_size=4, max_size=12)


def _model_and_update(lr=0.2, **kwargs):
  model = get_model('mlp', FED.input_shape, FED.num_classes, hidden_sizes=(6,))
  return model, sgd_client_update(model, optax.sgd(lr), 4, **kwargs)


def _simulation(scheduler, aggregator, latency=None, update=None, seed=0):
  model, default_update = _model_and_update()
  return Simulation(
    executor=Executor(update or default_update, FED.device_arrays(), jax.random.PRNGKey(1)),
    scheduler=scheduler,
    aggregator=aggregator,
    latency=latency or PerStepLatency(FED.num_clients, np.random.default_rng(5)),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=FED.client_sizes,
    rng=np.random.default_rng(seed),
  )


def _assert_trees_close(a, b, atol=1e-6):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def _batch(deltas, client, staleness, weights=None):
  k = len(staleness)
  return UpdateBatch(
    deltas={'w': jnp.asarray(deltas, jnp.float32)},
    weights=jnp.asarray(weights or [1.0] * k, jnp.float32),
    staleness=jnp.asarray(staleness, jnp.int32),
    num_steps=jnp.ones(k, jnp.int32),
    group=jnp.zeros(k, jnp.int32),
    client_params={'w': jnp.asarray(client, jnp.float32)},
  )


class TestStalenessFunctions:
  def test_values(self):
    u = jnp.array([0, 1, 3, 8])
    np.testing.assert_allclose(make_staleness('constant')(u), [1, 1, 1, 1])
    np.testing.assert_allclose(
      make_staleness('polynomial', a=0.5)(u), [1, 2**-0.5, 0.5, 1 / 3], rtol=1e-6
    )
    np.testing.assert_allclose(
      make_staleness('hinge', a=0.5, b=2)(u), [1, 1, 1 / 1.5, 1 / 4], rtol=1e-6
    )
    np.testing.assert_allclose(make_staleness('exponential', a=0.1)(u), np.exp(-0.1 * u), rtol=1e-6)


class TestFedAsyncRule:
  def test_mixing_with_staleness(self):
    aggregator = fedasync(0.9, make_staleness('polynomial', a=0.5))
    state = aggregator.init({'w': jnp.array([1.0])})
    # a = 0.9 * (3 + 1)^-0.5 = 0.45: w = 0.55 * 1 + 0.45 * 3 = 1.9
    state = jax.jit(aggregator.apply)(state, _batch([[2.0]], [[3.0]], [3]))
    np.testing.assert_allclose(state.params['w'], [1.9], rtol=1e-6)

  def test_delta_form(self):
    # w + alpha s(u) p delta = 1 + 0.9 (3 + 1)^-0.5 0.5 2 = 1.45; the padding row counts nowhere.
    aggregator = fedasync_delta(0.9, make_staleness('polynomial', a=0.5))
    state = aggregator.init({'w': jnp.array([1.0])})
    batch = _batch([[2.0], [1e6]], [[0.0], [0.0]], [3, 0], weights=[0.5, 0.0])
    state = jax.jit(aggregator.apply)(state, batch)
    np.testing.assert_allclose(state.params['w'], [1.45], rtol=1e-6)
    assert not aggregator.needs_client_params

  def test_updates_of_one_batch_mix_in_order_and_padding_is_ignored(self):
    aggregator = fedasync(0.5, make_staleness('constant'))
    state = aggregator.init({'w': jnp.array([0.0])})
    state = aggregator.apply(
      state, _batch([[0], [0], [0]], [[4.0], [8.0], [1e9]], [0, 0, 0], weights=[1.0, 1.0, 0.0])
    )
    np.testing.assert_allclose(state.params['w'], [0.5 * (0.5 * 0 + 0.5 * 4) + 0.5 * 8])


class TestFedBuffRule:
  def test_buffer_average_over_k_scaled_by_staleness(self):
    aggregator = server_update(
      optax.sgd(2.0), staleness_scaled(count_mean(), make_staleness('polynomial', a=1.0))
    )
    state = aggregator.init({'w': jnp.array([0.0])})
    # (1 * 1/1 + 3 * 1/2) / 2 = 1.25; server lr 2 -> 2.5
    state = aggregator.apply(state, _batch([[1.0], [3.0]], [[0], [0]], [0, 1]))
    np.testing.assert_allclose(state.params['w'], [2.5])

  @pytest.mark.parametrize(
    ('normalization', 'step'),
    # c = s(u) = [1, 1/2] (uniform weights, u = [0, 1], a = 1), deltas [1, 3]: c . d = 2.5 over
    # sum w = 2 ('weights'), over K = 2 ('count'), as it is ('sum'), or FedNova's
    # tau_eff sum_k c_k d_k / Q_k with Q = [2, 4], tau_eff = 3: 3 (1 / 2 + 1.5 / 4) ('steps').
    [('weights', 1.25), ('count', 1.25), ('sum', 2.5), ('steps', 2.625)],
  )
  def test_fedbuff_algorithm_composes_its_normalization_with_staleness(self, normalization, step):
    facts = RunFacts(num_clients=4, local_steps=2)
    kwargs = {
      'normalization': normalization,
      'weighting': 'uniform',
      'staleness': 'polynomial',
      'staleness_a': 1.0,
      'server_learning_rate': 2.0,
      'concurrency': 2,
      'buffer_size': 2,
    }
    settings = algorithms.resolve_settings('fedbuff', kwargs, facts)
    context = algorithms.BuildContext('fedbuff', facts, np.array([4, 6, 8, 10]))
    aggregator = algorithms.build(settings, context).aggregator
    batch = _batch([[1.0], [3.0], [1e6]], [[0], [0], [0]], [0, 1, 0], weights=[1.0, 1.0, 0.0])
    batch = batch.replace(num_steps=jnp.array([2, 4, 0], jnp.int32))  # the last row: padding
    state = aggregator.apply(aggregator.init({'w': jnp.array([0.0])}), batch)
    np.testing.assert_allclose(state.params['w'], [2.0 * step], rtol=1e-6)  # server lr 2
    assert set(REDUCERS) == {'weights', 'count', 'sum', 'steps'}

  def test_ema_tracks_server_weights(self):
    aggregator = with_ema(server_update(optax.sgd(1.0)), decay=0.5)
    state = aggregator.init({'w': jnp.array([0.0])})
    state = aggregator.apply(state, _batch([[4.0]], [[0]], [0]))
    state = aggregator.apply(state, _batch([[4.0]], [[0]], [0]))
    np.testing.assert_allclose(state.params['w'], [8.0])
    np.testing.assert_allclose(state.eval_params['w'], [0.5 * (0.5 * 0 + 0.5 * 4) + 0.5 * 8])


class TestFedAT:
  def test_speed_tiers(self):
    times = np.array([1.0, 5.0, 1.5, 2.1, 9.0, 2.0, 4.0])
    tiers = speed_tiers(times, ratio=2.0)
    # 1.0 -> up to 2.0: {0, 2, 5}; 2.1 -> up to 4.2: {3, 6}; 5.0 -> up to 10: {1, 4}
    assert [t.tolist() for t in tiers] == [[0, 2, 5], [3, 6], [1, 4]]

  def test_cross_tier_weights_reverse_the_update_counts(self):
    # counts 6, 3, 1 -> the most-updated tier gets 1, the least-updated 6 (FedAT).
    np.testing.assert_allclose(cross_tier_weights(jnp.array([6, 3, 1])), [0.1, 0.3, 0.6])
    # Tiers that have not updated are left out.
    np.testing.assert_allclose(cross_tier_weights(jnp.array([2, 0, 1])), [1 / 3, 0, 2 / 3])
    np.testing.assert_allclose(cross_tier_weights(jnp.array([1, 0, 0])), [1, 0, 0])

  def test_tier_update_rule(self):
    aggregator = fedat_aggregator(2)
    state = aggregator.init({'w': jnp.array([0.0])})
    batch = _batch([[0], [0]], [[2.0], [4.0]], [0, 0], weights=[1.0, 3.0])
    state = aggregator.apply(state, batch.replace(group=jnp.array([1, 1])))
    # Tier 1's model = (1 * 2 + 3 * 4) / 4 = 3.5; only tier 1 has updated.
    np.testing.assert_allclose(state.tier_params['w'][:, 0], [0.0, 3.5])
    np.testing.assert_allclose(state.params['w'], [3.5])

  def test_fedat_runs_tiers_asynchronously(self):
    latency = PerStepLatency(
      FED.num_clients, np.random.default_rng(0), mean=1.0, distribution='exponential'
    )
    tiers = speed_tiers(latency.step_time, 2.0)
    sim = _simulation(
      TieredScheduler(tiers, 2, LocalWork(steps=2)), fedat_aggregator(len(tiers)), latency=latency
    )
    sim.run(StopCondition(max_versions=12))
    counts = np.asarray(sim.server_state.tier_counts)
    assert counts.sum() == 12 and len(tiers) > 1
    assert counts[0] > counts[-1]  # the fastest tier updates most often
    sim.report()


class TestEquivalences:
  @pytest.mark.parametrize('k', [3, 8])
  def test_fedbuff_with_k_equal_concurrency_equal_cohort_is_fedavg(self, k):
    local_work = LocalWork(steps=3, batch_size=4)
    fedavg = _simulation(
      SynchronousScheduler(k, local_work, 'uniform'), server_update(optax.sgd(0.7))
    )
    fedbuff = _simulation(
      AsynchronousScheduler(k, k, local_work, 'uniform'),
      server_update(
        optax.sgd(0.7), staleness_scaled(count_mean(), make_staleness('polynomial', a=0.5))
      ),
    )
    fedavg.run(StopCondition(max_versions=4))
    fedbuff.run(StopCondition(max_versions=4))
    _assert_trees_close(fedavg.params, fedbuff.params, atol=1e-6)
    assert fedavg.now == fedbuff.now == 4 * 3.0

  def test_fedasync_alpha_one_single_client_is_sequential_training(self):
    _, update = _model_and_update()
    sim = _simulation(
      AsynchronousScheduler(1, 1, LocalWork(steps=2, batch_size=4)),
      fedasync(1.0, make_staleness('polynomial', a=0.0)),
      update=update,
    )
    order = []
    original = sim.dispatch

    def spy(client, steps, **kwargs):
      order.append(client)
      return original(client, steps, **kwargs)

    sim.dispatch = spy
    init = sim.params
    sim.run(StopCondition(max_versions=5))
    # Sequential reference: each client starts from the previous client's model.
    executor = Executor(update, FED.device_arrays(), jax.random.PRNGKey(1))
    params = init
    for task_id, client in enumerate(order[:5]):
      delta = executor.run([ClientTask(client, 2, task_id, params)]).deltas
      params = jax.tree_util.tree_map(lambda p, d: p + d[0], params, delta)
    _assert_trees_close(sim.params, params, atol=1e-6)

  def test_synchronous_trajectory_does_not_depend_on_the_latency_model(self):
    kwargs = dict(
      num_clients=FED.num_clients, client_sizes=FED.client_sizes, batch_size=4, model_bytes=1000
    )
    models = {
      'homogeneous': PerStepLatency(FED.num_clients, np.random.default_rng(0)),
      'normal': PerStepLatency(
        FED.num_clients, np.random.default_rng(0), distribution='normal', jitter=0.05
      ),
      'lognormal': make_latency('lognormal', rng=np.random.default_rng(0), **kwargs),
      'fedscale': make_latency('fedscale', rng=np.random.default_rng(0), **kwargs),
      'device_ratio': make_latency(
        'device_ratio', rng=np.random.default_rng(0), fastest_step_time=0.2, **kwargs
      ),
    }
    results = {}
    for name, latency in models.items():
      sim = _simulation(
        SynchronousScheduler(3, LocalWork(steps=2, batch_size=4)),
        server_update(optax.sgd(1.0)),
        latency=latency,
      )
      sim.run(StopCondition(max_versions=3))
      results[name] = sim
    reference = results['homogeneous']
    for name, sim in results.items():
      for a, b in zip(
        jax.tree_util.tree_leaves(reference.params), jax.tree_util.tree_leaves(sim.params)
      ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    assert len({round(sim.now, 6) for sim in results.values()}) == len(results)


class TestSynchronousVariants:
  def test_over_selection_aggregates_the_fastest_and_drops_stragglers(self):
    latency = PerStepLatency(
      FED.num_clients, np.random.default_rng(0), mean=1.0, distribution='exponential'
    )
    sim = _simulation(
      SynchronousScheduler(2, LocalWork(steps=2), num_selected=4),
      server_update(optax.sgd(1.0)),
      latency=latency,
    )
    aggregated = []
    original = sim.apply_updates

    def spy(handles, weights):
      aggregated.append([h.arrival_time for h in handles])
      original(handles, weights)

    sim.apply_updates = spy
    sim.run(StopCondition(max_versions=6))
    assert all(len(times) == 2 for times in aggregated)
    report = sim.report()
    assert report['tasks']['discarded'].get('straggler', 0) > 0
    assert report['tasks']['aggregated'] == 12

  def test_deadline_closes_rounds_with_whoever_arrived(self):
    latency = PerStepLatency(
      FED.num_clients, np.random.default_rng(0), mean=1.0, distribution='exponential'
    )
    sim = _simulation(
      SynchronousScheduler(4, LocalWork(steps=2), deadline=1.5),
      server_update(optax.sgd(1.0)),
      latency=latency,
    )
    rounds = []
    original = sim.apply_updates

    def spy(handles, weights):
      rounds.append(
        (sim.now, [h.dispatch_time for h in handles], [h.arrival_time for h in handles])
      )
      original(handles, weights)

    sim.apply_updates = spy
    sim.run(StopCondition(max_virtual_time=30.0))
    report = sim.report()
    assert sim.now == 30.0 and rounds
    for closed, dispatched, arrived in rounds:
      start = dispatched[0]
      assert dispatched == [start] * len(dispatched)  # one round's tasks
      # Closed by the last arrival or by the deadline, never later; only arrivals by then count.
      assert closed <= start + 1.5 + 1e-9
      assert all(t <= closed for t in arrived)
    # Some round closed at its deadline with fewer than all 4 responses.
    assert any(closed == pytest.approx(d[0] + 1.5) and len(d) < 4 for closed, d, _ in rounds)
    assert report['tasks']['discarded'].get('straggler', 0) > 0

  def test_time_limited_clients_run_the_steps_that_fit(self):
    latency = PerStepLatency(
      FED.num_clients,
      np.random.default_rng(0),
      mean=1.0,
      distribution='exponential',
      communication_time=5.0,
    )
    sim = _simulation(
      SynchronousScheduler(3, LocalWork(time_limit=4.0, steps=50)),
      server_update(optax.sgd(1.0)),
      latency=latency,
    )
    handles = []
    original = sim.dispatch

    def spy(client, steps, **kwargs):
      handle = original(client, steps, **kwargs)
      handles.append(handle)
      return handle

    sim.dispatch = spy
    sim.run(StopCondition(max_versions=3))
    for h in handles:
      expected = min(50, int(np.floor(4.0 / h.latency.per_step + 1e-9)))
      assert h.num_steps == expected
      assert h.latency.compute_time(h.num_steps) <= 4.0 + 1e-9


def test_fedasync_regularised_objective_is_its_proximal_strength(digits_data_dir, tmp_path):
  """Xie et al.'s g(x) = f(x) + (rho / 2) ||x - x_t||^2 is `proximal_strength` = rho: it reaches
  FedAsync's client update, so the same run with rho > 0 ends at another model."""
  from fedsim_jax.experiment import run_experiment
  from fedsim_jax.saved_run import load_run
  from tests.helpers import make_tiny_config

  def final(rho):
    config = make_tiny_config('fedasync', digits_data_dir)
    config.algorithm.kwargs.proximal_strength = rho
    run_experiment(config, tmp_path / f'rho{rho}')
    return jax.tree_util.tree_leaves(load_run(tmp_path / f'rho{rho}').params['final'])

  plain, regularised = final(0.0), final(5.0)
  assert any(not np.allclose(a, b) for a, b in zip(plain, regularised))
