"""FedAvg / FedOpt: the reducers and the server update on hand-computable numbers, the
compositions the algorithms build, and FedAvg end to end against a hand-written numpy
reference."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax import algorithms
from fedsim_jax.algorithms.base import RunFacts
from fedsim_jax.client import sgd_client_update
from fedsim_jax.data.synthetic import toy_federation as make_toy_federation
from fedsim_jax.executor import Executor
from fedsim_jax.models import get_model
from fedsim_jax.runtime import (
  PerStepLatency,
  Simulation,
  StopCondition,
  UpdateBatch,
  weighted_mean_delta,
)
from fedsim_jax.strategy import (
  LocalWork,
  SynchronousScheduler,
  count_mean,
  fednova_mean,
  make_staleness,
  server_optimizer,
  server_update,
  staleness_scaled,
  weighted_mean,
  weighted_sum,
)


def _updates(deltas, weights, staleness=None, num_steps=None):
  k = len(weights)
  return UpdateBatch(
    deltas={'w': jnp.asarray(deltas, jnp.float32)},
    weights=jnp.asarray(weights, jnp.float32),
    staleness=jnp.asarray(staleness or [0] * k, jnp.int32),
    num_steps=jnp.asarray(num_steps or [1] * k, jnp.int32),
    group=jnp.zeros(k, jnp.int32),
  )


# d_1 = [1, 0] with w_1 = 1, d_2 = [3, 2] with w_2 = 3, and a padding row (weight 0, 0 steps)
# whose huge delta must count nowhere. Staleness u = [0, 3, 5], local steps Q = [2, 4, 0].
BATCH = _updates([[1, 0], [3, 2], [1e6, -1e6]], [1, 3, 0], staleness=[0, 3, 5], num_steps=[2, 4, 0])
# s(u) = 1 / (u + 1): [1, 1/4, 1/6].
INVERSE = make_staleness('polynomial', a=1.0)


def _reduce(reducer, scale=None):
  return np.asarray(reducer(BATCH, BATCH.weights if scale is None else scale)['w'])


class TestReducers:
  def test_weighted_mean(self):
    # (1 [1, 0] + 3 [3, 2]) / (1 + 3)
    np.testing.assert_array_equal(_reduce(weighted_mean()), [2.5, 1.5])

  def test_weighted_mean_divides_by_the_unscaled_weights(self):
    # Numerators c = [2, 1.5]; the denominator stays sum w = 4: (2 [1, 0] + 1.5 [3, 2]) / 4
    got = _reduce(weighted_mean(), jnp.array([2.0, 1.5, 0.0]))
    np.testing.assert_array_equal(got, [1.625, 0.75])

  def test_count_mean(self):
    # (1 [1, 0] + 3 [3, 2]) / 2 real rows
    np.testing.assert_array_equal(_reduce(count_mean()), [5.0, 3.0])

  def test_count_mean_of_padding_only_is_zero(self):
    padding = _updates([[1e6, 1e6]], [0])
    np.testing.assert_array_equal(count_mean()(padding, padding.weights)['w'], [0.0, 0.0])

  def test_weighted_sum(self):
    np.testing.assert_array_equal(_reduce(weighted_sum()), [10.0, 6.0])

  def test_fednova_mean(self):
    # tau_eff = (1 * 2 + 3 * 4) / 4 = 3.5 (the padding row's 0 steps count as 1, weight 0);
    # 3.5 (1/2 [1, 0] + 3/4 [3, 2]) = [1.75 + 7.875, 5.25]
    np.testing.assert_array_equal(_reduce(fednova_mean()), [9.625, 5.25])

  def test_staleness_scaled_multiplies_the_numerators(self):
    # c = w s(u) = [1, 3/4, 0]: c_1 d_1 + c_2 d_2 = [3.25, 1.5].
    np.testing.assert_allclose(
      _reduce(staleness_scaled(weighted_sum(), INVERSE)), [3.25, 1.5], rtol=1e-6
    )
    # weighted_mean still divides by sum w = 4, not by sum c.
    np.testing.assert_allclose(
      _reduce(staleness_scaled(weighted_mean(), INVERSE)), [0.8125, 0.375], rtol=1e-6
    )
    np.testing.assert_allclose(
      _reduce(staleness_scaled(count_mean(), INVERSE)), [1.625, 0.75], rtol=1e-6
    )
    # FedNova: c / Q tau_eff = [1/2, 3/16] 3.5 = [1.75, 0.65625], tau_eff from w alone.
    np.testing.assert_allclose(
      _reduce(staleness_scaled(fednova_mean(), INVERSE)), [3.71875, 1.3125], rtol=1e-6
    )

  def test_staleness_scaled_scales_the_given_numerators_and_nests(self):
    scale = jnp.array([2.0, 4.0, 0.0])  # c = [2, 4 / 4, 0]
    np.testing.assert_allclose(
      _reduce(staleness_scaled(weighted_sum(), INVERSE), scale), [5.0, 2.0], rtol=1e-6
    )
    double = staleness_scaled(staleness_scaled(weighted_sum(), INVERSE), lambda u: 2.0 + 0 * u)
    np.testing.assert_allclose(_reduce(double), [6.5, 3.0], rtol=1e-6)


def _apply_rounds(optimizer, rounds, x0=(1.0, 2.0)):
  aggregator = server_update(optimizer)
  state = aggregator.init({'w': jnp.asarray(x0, jnp.float32)})
  for deltas, weights in rounds:
    state = jax.jit(aggregator.apply)(state, _updates(deltas, weights))
  return np.asarray(state.params['w'])


class TestFedOptAggregator:
  def test_server_update_with_sgd_1_is_fedavg_exactly(self):
    # FedAvg (McMahan et al. 2017): x <- x + sum_k n_k delta_k / sum_k n_k, bit for bit, with
    # the weighted mean explicit or as the default reducer. Both sides are jitted, as the
    # runtime jits aggregators: inside one program XLA may fuse the final add with the division
    # and round differently from an eager x + mean.
    rng = np.random.default_rng(0)
    params = {'w': jnp.asarray(rng.normal(size=(3, 5)), jnp.float32)}
    batch = UpdateBatch(
      deltas={'w': jnp.asarray(rng.normal(size=(4, 3, 5)), jnp.float32)},
      weights=jnp.array([3.0, 1.0, 7.0, 0.0]),
      staleness=jnp.array([0, 2, 1, 0]),
      num_steps=jnp.array([5, 1, 2, 0]),
      group=jnp.zeros(4, jnp.int32),
    )
    fedavg = jax.jit(lambda x, b: jax.tree_util.tree_map(jnp.add, x, weighted_mean_delta(b)))
    want = np.asarray(fedavg(params, batch)['w'])
    for aggregator in (
      server_update(optax.sgd(1.0), weighted_mean()),
      server_update(optax.sgd(1.0)),
    ):
      state = jax.jit(aggregator.apply)(aggregator.init(params), batch)
      np.testing.assert_array_equal(np.asarray(state.params['w']), want)
    deltas = np.asarray(batch.deltas['w'], np.float64)
    reference = params['w'] + np.tensordot([3.0, 1.0, 7.0, 0.0], deltas, axes=1) / 11.0
    np.testing.assert_allclose(want, reference, rtol=1e-6, atol=1e-6)

  def test_fedavg_is_the_weighted_mean_of_deltas(self):
    # mean delta = (1*[1,0] + 3*[3,2]) / 4 = [2.5, 1.5]
    x = _apply_rounds(optax.sgd(1.0), [([[1, 0], [3, 2]], [1, 3])])
    np.testing.assert_allclose(x, [3.5, 3.5])

  def test_padding_rows_with_zero_weight_do_not_count(self):
    x = _apply_rounds(optax.sgd(1.0), [([[1, 0], [3, 2], [1e6, -1e6]], [1, 3, 0])])
    np.testing.assert_allclose(x, [3.5, 3.5])

  def test_server_learning_rate_scales_the_step(self):
    x = _apply_rounds(server_optimizer('sgd', 0.5), [([[1, 0], [3, 2]], [1, 3])])
    np.testing.assert_allclose(x, [1 + 1.25, 2 + 0.75])

  def test_fedavgm_accumulates_momentum(self):
    # v1 = D1 = [1, 1]; v2 = 0.9 v1 + D2 = [1.9, -0.1]; x = x0 + v1 + v2.
    x = _apply_rounds(
      server_optimizer('momentum', 1.0, momentum=0.9), [([[1, 1]], [1]), ([[1, -1]], [1])]
    )
    np.testing.assert_allclose(x, [1 + 1 + 1.9, 2 + 1 - 0.1], rtol=1e-6)

  @pytest.mark.parametrize('rule', ['adam', 'yogi', 'adagrad'])
  def test_adaptive_rules_follow_reddi_algorithm_2(self, rule):
    eta, b1, b2, tau = 0.1, 0.9, 0.99, 1e-2
    deltas = [0.5, -0.2, 0.3]
    x, m, v = 1.0, 0.0, tau**2
    for d in deltas:  # Algorithm 2 of Reddi et al., written out by hand
      m = b1 * m + (1 - b1) * d
      if rule == 'adagrad':
        v = v + d * d
      elif rule == 'yogi':
        v = v - (1 - b2) * d * d * np.sign(v - d * d)
      else:
        v = b2 * v + (1 - b2) * d * d
      x = x + eta * m / (np.sqrt(v) + tau)
    got = _apply_rounds(
      server_optimizer(rule, eta, b1=b1, b2=b2, eps=tau),
      [([[d]], [1.0]) for d in deltas],
      x0=(1.0,),
    )
    np.testing.assert_allclose(got, [x], rtol=1e-5)

  def test_optax_form_of_adam_is_bias_corrected(self):
    # optax.adam's first step moves each coordinate by about lr, whatever the delta's size.
    got = _apply_rounds(
      server_optimizer('adam', 0.1, eps=1e-8, adaptive_form='optax'),
      [([[5.0, -0.01]], [1.0])],
      x0=(0.0, 0.0),
    )
    np.testing.assert_allclose(got, [0.1, -0.1], rtol=1e-4)

  def test_unknown_server_optimizer(self):
    with pytest.raises(ValueError, match='allowed'):
      server_optimizer('lamb', 1.0)


def _aggregator(name, kwargs, **run):
  """The aggregator the registered algorithm `name` builds from `kwargs` for 4 clients."""
  facts = RunFacts(num_clients=4, **run)
  settings = algorithms.resolve_settings(name, kwargs, facts)
  context = algorithms.BuildContext(name, facts, np.array([4, 6, 8, 10]))
  return algorithms.build(settings, context).aggregator


def test_fednova_budget_server_update_is_fednova():
  # FedNova (Wang et al. 2020) with p = [1/2, 1/2] (CC-FedAvg's 1 / |S_t|), Q = [2, 4]:
  # x + tau_eff sum_k p_k d_k / Q_k with tau_eff = sum_k p_k Q_k = 3.
  batch = _updates([[1, 0], [3, 2]], [0.5, 0.5], num_steps=[2, 4])
  aggregator = _aggregator('fednova_budget', {'cohort_size': 2}, local_steps=4)
  state = aggregator.apply(aggregator.init({'w': jnp.array([1.0, 2.0])}), batch)
  want = np.array([1.0, 2.0]) + 3 * (0.5 * np.array([1, 0]) / 2 + 0.5 * np.array([3, 2]) / 4)
  np.testing.assert_allclose(state.params['w'], want, rtol=1e-6)
  np.testing.assert_array_equal(state.params['w'], [2.875, 2.75])


@pytest.mark.parametrize('rounding, steps', [('ceil', [10, 5, 3, 2]), ('floor', [10, 5, 2, 1])])
def test_fednova_budget_steps_follow_the_papers_example(rounding, steps):
  # CC-FedAvg Sec. VI-D: with K = 10, "the clients with p_i = 1/8 would perform local iterations
  # at most 2 times": ceil(p_i K) for p = 1, 1/2, 1/4, 1/8 (beta = 4 levels over 4 clients).
  facts = RunFacts(num_clients=4, local_steps=10)
  settings = algorithms.resolve_settings(
    'fednova_budget', {'cohort_size': 2, 'fednova_rounding': rounding}, facts
  )
  context = algorithms.BuildContext('fednova_budget', facts, np.array([4, 6, 8, 10]))
  scheduler = algorithms.build(settings, context).scheduler
  budgets = settings.client_budgets(4, context.seed)
  assert budgets.tolist() == [1.0, 0.5, 0.25, 0.125]
  assert scheduler.steps_per_client.tolist() == steps


def _numpy_fedavg_reference(fed, w0, b0, lr, local_steps, rounds):
  """FedAvg (McMahan et al. 2017, Algorithm 1) for softmax regression, full-batch clients,
  full participation, weights n_k / n, in float64 numpy."""
  w, b = w0.astype(np.float64), b0.astype(np.float64)
  for _ in range(rounds):
    new_w, new_b, total = np.zeros_like(w), np.zeros_like(b), 0
    for c in range(fed.num_clients):
      x, y = fed.client_examples(c)
      x = x.reshape(len(x), -1).astype(np.float64) / 255.0
      onehot = np.eye(fed.num_classes)[y]
      cw, cb = w.copy(), b.copy()
      for _ in range(local_steps):
        logits = x @ cw + cb
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        grad_logits = (p - onehot) / len(x)
        cw -= lr * x.T @ grad_logits
        cb -= lr * grad_logits.sum(0)
      new_w += len(x) * cw
      new_b += len(x) * cb
      total += len(x)
    w, b = new_w / total, new_b / total
  return w, b


@pytest.mark.parametrize('backend', ['vmap', 'loop'])
def test_fedavg_matches_a_hand_written_reference(backend):
  fed = make_toy_federation(num_clients=4, min_size=3, max_size=9)
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=())
  params = model.init(jax.random.PRNGKey(0))
  lr, steps, rounds = 0.5, 3, 4
  update = sgd_client_update(model, optax.sgd(lr), batch_size=16)  # >= every client: full batch
  sim = Simulation(
    executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend=backend),
    scheduler=SynchronousScheduler(fed.num_clients, LocalWork(steps=steps, batch_size=16)),
    aggregator=server_update(optax.sgd(1.0)),
    latency=PerStepLatency(fed.num_clients, np.random.default_rng(0)),
    init_params=params,
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(0),
  )
  sim.run(StopCondition(max_versions=rounds))
  dense = params['Dense_0']
  w, b = _numpy_fedavg_reference(
    fed, np.asarray(dense['kernel']), np.asarray(dense['bias']), lr, steps, rounds
  )
  np.testing.assert_allclose(np.asarray(sim.params['Dense_0']['kernel']), w, atol=1e-5)
  np.testing.assert_allclose(np.asarray(sim.params['Dense_0']['bias']), b, atol=1e-5)
  assert sim.version == rounds
  assert sim.now == pytest.approx(rounds * steps * 1.0)


def test_uniform_weighting_and_cohort_sampling():
  fed = make_toy_federation(num_clients=8)
  scheduler = SynchronousScheduler(3, LocalWork(steps=1), weighting='uniform')
  seen = []
  aggregator = server_update(optax.sgd(1.0))
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=())
  update = sgd_client_update(model, optax.sgd(0.1), 4)
  sim = Simulation(
    executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1)),
    scheduler=scheduler,
    aggregator=aggregator,
    latency=PerStepLatency(fed.num_clients, np.random.default_rng(0)),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(3),
  )
  original = sim.apply_updates

  def spy(handles, weights):
    seen.append(([h.client_id for h in handles], list(weights)))
    original(handles, weights)

  sim.apply_updates = spy
  sim.run(StopCondition(max_versions=5))
  for clients, weights in seen:
    assert len(set(clients)) == 3  # without replacement
    assert weights == [1.0, 1.0, 1.0]
  assert len({tuple(c) for c, _ in seen}) > 1
