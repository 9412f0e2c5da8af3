"""FedASMU (Liu et al. 2024): Formulas 2 and 8 and their parameter updates (3 and 9) on
hand-computed cases, the two-segment fetch against an eager reference that blends at the same
virtual time, the staleness bound, FedASMU-0 = FedAsync with a staleness bound, and the
periodic trigger's timing and concurrency cap."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim_jax import algorithms, experiment
from fedsim_jax.algorithms.fedasmu.device import (
  blend_gradients,
  fedasmu_client_update,
  fetch_beta,
  fetch_inputs,
)
from fedsim_jax.algorithms.fedasmu.fetch import FixedFetch
from fedsim_jax.algorithms.fedasmu.scheduler import FedasmuScheduler
from fedsim_jax.algorithms.fedasmu.server import fedasmu_aggregator, weight_polynomial
from fedsim_jax.algorithms.fedasmu.settings import FedasmuSettings
from fedsim_jax.client import sgd_client_update
from fedsim_jax.config import (
  ConfigError,
  base_config,
  fedasmu_fashion_mnist_config,
  fedasmu_trigger,
  set_by_path,
)
from fedsim_jax.data import FederatedDataset, toy_federation
from fedsim_jax.data.federated import client_batch
from fedsim_jax.executor import ClientTask, Executor, NoTrainingExecutor
from fedsim_jax.models import Model, get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition, UpdateBatch
from fedsim_jax.runtime.latency import DeviceRatioLatency
from fedsim_jax.strategy import AsynchronousScheduler, LocalWork, server_update
from fedsim_jax.strategy.periodic_trigger import PeriodicTriggerScheduler


def _close(a, b, atol=1e-6):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


class RecordingFetch:
  """A fixed fetch epoch that records the rewards it is given."""

  def __init__(self, fraction):
    self.policy = FixedFetch(fraction)
    self.observed = []

  def propose(self, client, num_epochs):
    return self.policy.propose(client, num_epochs)

  def observe(self, client, fetch_epoch, reward):
    self.observed.append((client, fetch_epoch, reward))


# ---- Formula 2 (α) and Formula 3 (λ, σ, ι) ---------------------------------------------------


class TestServerWeight:
  def test_formula2_appendix_form_hand_computed(self):
    settings = FedasmuSettings(mu_alpha=2.0)
    # t = 4, t - o + 1 = 2: ξ = 2 / (sqrt(4) * 2^1) + 0.5 = 1, α = 2 * 1 / (1 + 2) = 2/3.
    xi, alpha, d_alpha, d_lambda, d_sigma = weight_polynomial(2.0, 1.0, 0.5, 4, 2, settings)
    assert float(xi) == pytest.approx(1.0)
    assert float(alpha) == pytest.approx(2 / 3)
    assert float(d_alpha) == pytest.approx(2 / 9)  # μ / (1 + μ ξ)^2
    assert float(d_lambda) == pytest.approx(1 / 4)  # 1 / (sqrt(t) s^σ)
    assert float(d_sigma) == pytest.approx(-2 * math.log(2) / 4)  # -λ ln(s) / (sqrt(t) s^σ)

  def test_formula2_printed_form_hand_computed(self):
    settings = FedasmuSettings(mu_alpha=2.0, xi_form='printed')
    xi, alpha, *_ = weight_polynomial(2.0, 1.0, 0.5, 4, 2, settings)
    expected = 2 / math.sqrt(4 * 2 * 1) + 0.5  # λ / sqrt(t s σ) + ι
    assert float(xi) == pytest.approx(expected)
    assert float(alpha) == pytest.approx(2 * expected / (1 + 2 * expected))

  def test_first_aggregation_uses_min_version(self):
    # t = 0 at the first aggregation: sqrt(max(0, 1)) = 1, ξ = 1, α = 1/2.
    _, alpha, *_ = weight_polynomial(1.0, 0.5, 0.0, 0, 1, FedasmuSettings())
    assert float(alpha) == pytest.approx(0.5)

  def test_alpha_is_projected_onto_its_range(self):
    settings = FedasmuSettings(alpha_min=0.01)
    for iota in (-0.95, -2.0):  # α < 0 and the pole 1 + μ ξ <= 0
      _, alpha, d_alpha, *_ = weight_polynomial(0.0, 0.5, iota, 3, 1, settings)
      assert float(alpha) == pytest.approx(0.01) and float(d_alpha) == 0.0

  @pytest.mark.parametrize('xi_form', ['appendix', 'printed'])
  def test_derivatives_are_the_chain_rule(self, xi_form):
    settings = FedasmuSettings(mu_alpha=1.5, xi_form=xi_form)
    args = (0.7, 0.8, 0.2, 6, 3)
    _, _, d_alpha, d_lambda, d_sigma = weight_polynomial(*args, settings)
    xi_of = lambda lam, sigma: weight_polynomial(lam, sigma, *args[2:], settings)[0]
    alpha_of_xi = lambda xi: 1.5 * xi / (1 + 1.5 * xi)
    assert float(d_lambda) == pytest.approx(float(jax.grad(xi_of, 0)(0.7, 0.8)), rel=1e-5)
    assert float(d_sigma) == pytest.approx(float(jax.grad(xi_of, 1)(0.7, 0.8)), rel=1e-5)
    xi = float(xi_of(0.7, 0.8))
    assert float(d_alpha) == pytest.approx(float(jax.grad(alpha_of_xi)(xi)), rel=1e-5)

  def test_printed_sigma_gradient_uses_ln_sigma(self):
    settings = FedasmuSettings(sigma_gradient='printed', sigma_0=2.0)
    *_, d_lambda, d_sigma = weight_polynomial(1.0, 2.0, 0.0, 4, 3, settings)
    assert float(d_sigma) == pytest.approx(-math.log(2.0) * float(d_lambda))


def _upload(client_params, client_id, staleness, num_steps, weights=None):
  k = len(client_id)
  params = jnp.asarray(client_params, jnp.float32)
  return UpdateBatch(
    deltas={'w': params},
    weights=jnp.asarray(weights or [1.0] * k),
    staleness=jnp.asarray(staleness, jnp.int32),
    num_steps=jnp.asarray(num_steps, jnp.int32),
    group=jnp.zeros(k, jnp.int32),
    client_params={'w': params},
    client_id=jnp.asarray(client_id, jnp.int32),
  )


class TestServerAggregation:
  SETTINGS = dict(
    mu_alpha=2.0,
    lambda_0=2.0,
    sigma_0=1.0,
    iota_0=0.5,
    lambda_learning_rate=0.1,
    sigma_learning_rate=0.1,
    iota_learning_rate=0.1,
  )

  def _aggregate(self, batch, dynamic=True, **overrides):
    aggregator = fedasmu_aggregator(
      3,
      FedasmuSettings(**{**self.SETTINGS, **overrides}),
      dynamic=dynamic,
      client_learning_rate=0.5,
    )
    state = aggregator.init({'w': jnp.zeros(2)}).replace(version=jnp.int32(4))
    return jax.jit(aggregator.apply)(state, batch)

  def test_formulas_1_to_3_hand_computed(self):
    # Device 1 uploads w' = (1, 2), trained 2 steps from version 3, aggregated at t = 4.
    state = self._aggregate(_upload([[1.0, 2.0]], [1], [1], [2]))
    # α = 2/3 (TestServerWeight): w = (1/3) (0, 0) + (2/3) (1, 2).
    np.testing.assert_allclose(state.params['w'], [2 / 3, 4 / 3], rtol=1e-6)
    # (w' - w_o).(w' - w_{o-1}) / (η 𝓛) = ((1/3, 2/3).(1, 2)) / 1 = 5/3; ∂α/∂ξ = 2/9.
    grad_lambda = 5 / 3 * 2 / 9 * (1 / 4)  # ∂ξ/∂λ = 1/4
    grad_sigma = 5 / 3 * 2 / 9 * (-2 * math.log(2) / 4)  # ∂ξ/∂σ = -λ ln 2 / 4
    grad_iota = 5 / 3 * 2 / 9
    np.testing.assert_allclose(state.lam, [2.0, 2.0 - 0.1 * grad_lambda, 2.0], rtol=1e-6)
    np.testing.assert_allclose(state.sigma, [1.0, 1.0 - 0.1 * grad_sigma, 1.0], rtol=1e-6)
    np.testing.assert_allclose(state.iota, [0.5, 0.5 - 0.1 * grad_iota, 0.5], rtol=1e-6)
    np.testing.assert_allclose(state.alpha, [0.0, 2 / 3, 0.0], rtol=1e-6)
    assert int(state.version) == 5 and state.aggregations.tolist() == [0, 1, 0]

  def test_next_upload_uses_the_updated_parameters(self):
    first = _upload([[1.0, 2.0]], [1], [1], [2])
    aggregator = fedasmu_aggregator(
      3, FedasmuSettings(**self.SETTINGS), dynamic=True, client_learning_rate=0.5
    )
    state = aggregator.init({'w': jnp.zeros(2)}).replace(version=jnp.int32(4))
    state = aggregator.apply(state, first)
    lam, iota = float(state.lam[1]), float(state.iota[1])
    state = aggregator.apply(state, _upload([[0.0, 0.0]], [1], [0], [2]))
    xi = lam / math.sqrt(5) + iota  # t = 5, staleness 1: s^σ = 1
    assert float(state.alpha[1]) == pytest.approx(2 * xi / (1 + 2 * xi), rel=1e-6)

  def test_descent_sign_flips_the_steps(self):
    state = self._aggregate(_upload([[1.0, 2.0]], [1], [1], [2]), gradient_sign='descent')
    np.testing.assert_allclose(state.lam[1], 2.0 + 0.1 * 5 / 54, rtol=1e-6)
    np.testing.assert_allclose(state.iota[1], 0.5 + 0.1 * 10 / 27, rtol=1e-6)

  def test_padding_rows_change_nothing(self):
    state = self._aggregate(
      _upload([[1.0, 2.0], [50.0, 50.0]], [1, 0], [1, 0], [2, 2], weights=[1.0, 0.0])
    )
    np.testing.assert_allclose(state.params['w'], [2 / 3, 4 / 3], rtol=1e-6)
    assert float(state.lam[0]) == 2.0 and int(state.version) == 5

  def test_static_fedasync_rule(self):
    # FedASMU-0: α = 0.6 (u + 1)^-0.5 with u = t - o = 3: α = 0.3; no parameter update.
    state = self._aggregate(
      _upload([[1.0, 2.0]], [1], [3], [2]),
      dynamic=False,
      alpha=0.6,
      staleness='polynomial',
      staleness_a=0.5,
    )
    np.testing.assert_allclose(state.params['w'], [0.3, 0.6], rtol=1e-6)
    assert float(state.lam[1]) == 2.0


# ---- Formula 8 (β) and Formula 9 (γ, v) ------------------------------------------------------


class TestDeviceBlend:
  def test_formula8_hand_computed(self):
    # g = 4, o = 1: φ = (2 / sqrt(4)) (1 - 1 / sqrt(4)) = 0.5, β = 0.5 / 1.5 = 1/3.
    phi, beta = fetch_beta(2.0, 1.0, 4, 1, 1.0)
    assert float(phi) == pytest.approx(0.5) and float(beta) == pytest.approx(1 / 3)
    # v > sqrt(g - o + 1): φ = -0.5, β projected to 0, no step for γ, v.
    phi, beta = fetch_beta(2.0, 3.0, 4, 1, 1.0)
    assert float(phi) == pytest.approx(-0.5) and float(beta) == 0.0
    assert [float(x) for x in blend_gradients(1.0, phi, 2.0, 3.0, 4, 1, 1.0)] == [0.0, 0.0]

  def test_formula9_gradients_hand_computed(self):
    # ∂F/∂β = 1, dβ/dφ = 1 / 1.5^2 = 4/9, dφ/dγ = (1 - 1/2) / 2, dφ/dv = -2 / (2 * 2).
    grad_gamma, grad_v = blend_gradients(1.0, 0.5, 2.0, 1.0, 4, 1, 1.0)
    assert float(grad_gamma) == pytest.approx(1 / 9)
    assert float(grad_v) == pytest.approx(-2 / 9)

  def test_formula9_gradients_are_the_chain_rule(self):
    w_b, w_g = jnp.array([0.3, -0.2]), jnp.array([1.0, 0.5])
    loss = lambda w: jnp.sum(jnp.sin(w) * jnp.array([1.0, 2.0]))

    def loss_after(gamma, v):
      _, beta = fetch_beta(gamma, v, 9, 2, 1.7)
      return loss((1 - beta) * w_b + beta * w_g)

    phi, beta = fetch_beta(1.3, 0.6, 9, 2, 1.7)
    slope = jnp.dot(jax.grad(loss)((1 - beta) * w_b + beta * w_g), w_g - w_b)
    grad_gamma, grad_v = blend_gradients(slope, phi, 1.3, 0.6, 9, 2, 1.7)
    assert float(grad_gamma) == pytest.approx(float(jax.grad(loss_after, 0)(1.3, 0.6)), rel=1e-5)
    assert float(grad_v) == pytest.approx(float(jax.grad(loss_after, 1)(1.3, 0.6)), rel=1e-5)


class _TwoWeights(nn.Module):
  """logits = (w . x, 0): a 2-parameter binary classifier."""

  @nn.compact
  def __call__(self, x):
    z = nn.Dense(1, use_bias=False)(x)
    return jnp.concatenate([z, jnp.zeros_like(z)], axis=-1)


def _two_weight_task(blend):
  model = Model('two_weights', _TwoWeights(), input_shape=(2,), num_classes=2)
  x = np.array([[1.0, 0.0]], np.float32)
  fed = FederatedDataset.from_partition(
    'one', x, np.array([0]), [np.array([0])], x, np.array([0]), num_classes=2
  )
  update = fedasmu_client_update(
    model, optax.sgd(0.5), 1, mu_beta=1.0, gamma_learning_rate=0.3, v_learning_rate=0.2
  )
  start = {'Dense_0': {'kernel': jnp.zeros((2, 1))}}
  fresh = {'Dense_0': {'kernel': jnp.full((2, 1), 2.0)}}
  inputs = fetch_inputs(fresh, blend=blend, gamma=2.0, v=1.0, fresh_version=4, download_version=1)
  result = Executor(update, fed.device_arrays(), jax.random.PRNGKey(0)).run(
    [ClientTask(0, 1, 0, start, inputs)]
  )
  return result.deltas['Dense_0']['kernel'][0, :, 0], {
    k: float(v[0]) for k, v in result.aux.items()
  }


class TestDeviceClientUpdate:
  def test_formulas_7_to_9_on_a_two_weight_model(self):
    delta, aux = _two_weight_task(blend=True)
    # β = 1/3 (g = 4, o = 1, γ = 2, v = 1): w_a = (2/3, 2/3). Loss log(1 + exp(-w_0)).
    sig = 1 / (1 + math.exp(2 / 3))  # -∂loss/∂w_0 at w_a
    assert aux['fetch_blended'] == 1.0 and aux['fetch_beta'] == pytest.approx(1 / 3)
    assert aux['fetch_loss_before'] == pytest.approx(math.log(2), rel=1e-6)
    assert aux['fetch_loss_after'] == pytest.approx(math.log(1 + math.exp(-2 / 3)), rel=1e-6)
    slope = -2 * sig  # <(-sig, 0), w_g - w_b = (2, 2)>
    assert aux['fetch_gamma'] == pytest.approx(2.0 - 0.3 * slope / 9, rel=1e-6)
    assert aux['fetch_v'] == pytest.approx(1.0 + 0.2 * 2 * slope / 9, rel=1e-6)
    # Then Formula 4 from the blend: w_0 = 2/3 + 0.5 sig, w_1 = 2/3 (x_1 = 0).
    np.testing.assert_allclose(delta, [2 / 3 + 0.5 * sig, 2 / 3], rtol=1e-6)

  def test_without_a_fresh_model_it_is_plain_sgd(self):
    delta, aux = _two_weight_task(blend=False)
    np.testing.assert_allclose(delta, [0.5 * 0.5, 0.0], rtol=1e-6)  # lr * sigmoid(0)
    assert aux['fetch_blended'] == 0.0
    assert (aux['fetch_gamma'], aux['fetch_v']) == (2.0, 1.0)


# ---- The two-segment task against an eager blend at the same virtual time --------------------

LR, BATCH, MU_BETA, ETA_GAMMA, ETA_V = 0.3, 4, 2.0, 0.5, 0.5
SERVER = FedasmuSettings(
  mu_alpha=1.0,
  lambda_0=1.0,
  sigma_0=0.5,
  iota_0=0.1,
  lambda_learning_rate=0.05,
  sigma_learning_rate=0.05,
  iota_learning_rate=0.05,
)


def _fedasmu_run(backend, deferred):
  fed = toy_federation(num_clients=6, min_size=6, max_size=14, seed=3)
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(5,))
  latency = DeviceRatioLatency(
    fed.num_clients,
    np.random.default_rng(3),
    fastest_step_time=0.7,
    ratio=3.0,
    communication_time=0.6,
  )
  policy = RecordingFetch(0.5)
  scheduler = FedasmuScheduler(
    1.5,
    2,
    3,
    LocalWork(epochs=3, batch_size=BATCH),
    tau=50,
    fetch_policy=policy,
    gamma_0=1.5,
    v_0=0.8,
  )
  update = fedasmu_client_update(
    model,
    optax.sgd(LR),
    BATCH,
    mu_beta=MU_BETA,
    gamma_learning_rate=ETA_GAMMA,
    v_learning_rate=ETA_V,
  )
  sim = Simulation(
    executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend=backend),
    scheduler=scheduler,
    aggregator=fedasmu_aggregator(fed.num_clients, SERVER, dynamic=True, client_learning_rate=LR),
    latency=latency,
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(0),
    deferred=deferred,
  )
  record = {'dispatched': [], 'aggregated': [], 'init': sim.params}
  dispatch, apply = sim.dispatch, sim.apply_update_batch

  def spy_dispatch(client, steps, **kwargs):
    handle = dispatch(client, steps, **kwargs)
    record['dispatched'].append((handle, kwargs.get('continues') is not None))
    return handle

  def spy_apply(batch, handles):
    record['aggregated'].append(
      (
        handles[0],
        handles[0].arrival_time,
        jax.tree_util.tree_map(lambda p: p[0], batch.client_params),
      )
    )
    apply(batch, handles)

  sim.dispatch, sim.apply_update_batch = spy_dispatch, spy_apply
  sim.run(StopCondition(max_versions=12))
  return fed, model, latency, policy, scheduler, sim, record


_batch = jax.jit(client_batch, static_argnums=(4,))


def _sgd(model, data, params, client, seed, steps):
  """Formula 4, one step at a time, on the executor's batches of task `seed`."""
  key = jax.random.fold_in(jax.random.PRNGKey(1), seed)
  grad_fn = jax.jit(jax.grad(model.loss))
  for step in range(steps):
    grad = grad_fn(params, *_batch(data, client, step, key, BATCH))
    params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grad)
  return params


def _tree_dot(a, b):
  return sum(
    float(jnp.vdot(x, y))
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  )


@pytest.mark.parametrize(
  'backend,deferred',
  [
    # vmap with deferred batches: 27 s, in `make test-slow`; the loop case checks the same
    # equality in `make test`, and the vmap backend's batching of tasks has its own tests
    # (tests/executor).
    pytest.param('vmap', True, marks=pytest.mark.slow),
    ('loop', False),
  ],
)
def test_two_segment_tasks_equal_an_eager_blend_at_the_fetch_time(backend, deferred):
  fed, model, latency, policy, scheduler, sim, record = _fedasmu_run(backend, deferred)
  data = fed.device_arrays()
  models = [record['init']]  # the reference's global model per version
  aggregation_times = []
  lam, sigma, iota = (np.full(fed.num_clients, x) for x in (1.0, 0.5, 0.1))
  gamma, v = np.full(fed.num_clients, 1.5), np.full(fed.num_clients, 0.8)
  rewards, blends = [], 0
  for version, (final, arrival, client_params) in enumerate(record['aggregated']):
    client = final.client_id
    # Its first segment: the client's last intermediate dispatch before `final`.
    index = next(i for i, (h, _) in enumerate(record['dispatched']) if h is final)
    first = next(
      h
      for h, _ in reversed(record['dispatched'][:index])
      if h.client_id == client and h.intermediate
    )
    step_time, half_trip = latency.step_time[client], latency.communication_time[client] / 2
    n = int(fed.client_sizes[client])
    total = math.ceil(3 * n / BATCH)
    assert first.num_steps == math.ceil(2 * n / BATCH)  # l* = 2 of 3 epochs (FixedFetch(0.5))
    assert final.num_steps == total - first.num_steps
    # The request reaches the server after the download and epochs 1..l*.
    request = first.dispatch_time + half_trip + first.num_steps * step_time
    assert final.dispatch_time == pytest.approx(request)
    o = first.version
    g = sum(t <= request for t in aggregation_times)  # versions that exist at the request
    assert final.metadata['fresh_version'] == g
    local = _sgd(model, data, models[o], client, first.task_id, first.num_steps)
    if g > o:  # Formulas 7-9 on the first mini-batch of the rest of the training
      blends += 1
      phi = gamma[client] / math.sqrt(g) * (1 - v[client] / math.sqrt(g - o + 1))
      beta = MU_BETA * phi / (1 + MU_BETA * phi) if phi > 0 else 0.0
      fresh = models[g]
      blended = jax.tree_util.tree_map(lambda b, f: (1 - beta) * b + beta * f, local, fresh)
      x, y, w = _batch(
        data, client, 0, jax.random.fold_in(jax.random.PRNGKey(1), final.task_id), BATCH
      )
      before = float(model.loss(local, x, y, w))
      after, grad = jax.value_and_grad(model.loss)(blended, x, y, w)
      slope = _tree_dot(grad, jax.tree_util.tree_map(jnp.subtract, fresh, local))
      d_beta = MU_BETA / (1 + MU_BETA * phi) ** 2 if phi > 0 else 0.0
      gap = math.sqrt(g - o + 1)
      gamma[client], v[client] = (
        gamma[client] - ETA_GAMMA * slope * d_beta / math.sqrt(g) * (1 - v[client] / gap),
        v[client] + ETA_V * slope * d_beta * gamma[client] / (math.sqrt(g) * gap),
      )
      rewards.append((client, 2, before - float(after)))
      local = blended
    download = latency.extra_download_time(client) if g > o else 0.0
    assert arrival == pytest.approx(request + download + final.num_steps * step_time + half_trip)
    local = _sgd(model, data, local, client, final.task_id, final.num_steps)
    _close(client_params, local, atol=2e-5)
    # Server: Formulas 1-3 at t = version.
    s = version - o + 1
    xi = lam[client] / (math.sqrt(max(version, 1)) * s ** sigma[client]) + iota[client]
    alpha = xi / (1 + xi)
    before_model = models[-1]
    after_model = jax.tree_util.tree_map(
      lambda m, c: (1 - alpha) * m + alpha * c, before_model, local
    )
    estimate = _tree_dot(
      jax.tree_util.tree_map(jnp.subtract, local, after_model),
      jax.tree_util.tree_map(jnp.subtract, local, before_model),
    ) / (LR * total)
    scale = estimate / (1 + xi) ** 2 / (math.sqrt(max(version, 1)) * s ** sigma[client])
    lam[client], sigma[client], iota[client] = (
      lam[client] - 0.05 * scale,
      sigma[client] + 0.05 * scale * lam[client] * math.log(s),
      iota[client] - 0.05 * estimate / (1 + xi) ** 2,
    )
    models.append(after_model)
    aggregation_times.append(arrival)
  assert 0 < blends < len(record['aggregated'])  # both branches were exercised
  _close(sim.params, models[-1], atol=2e-5)
  np.testing.assert_allclose(sim.server_state.lam, lam, rtol=1e-5)
  np.testing.assert_allclose(sim.server_state.sigma, sigma, rtol=1e-5)
  np.testing.assert_allclose(sim.server_state.iota, iota, rtol=1e-5)
  np.testing.assert_allclose(scheduler.gamma, gamma, rtol=1e-5)
  np.testing.assert_allclose(scheduler.v, v, rtol=1e-5)
  assert [c for c, *_ in policy.observed] == [c for c, *_ in rewards]
  np.testing.assert_allclose([r for *_, r in policy.observed], [r for *_, r in rewards], atol=1e-5)
  # A split task is one client update: dispatched once, arrived once.
  report = sim.report()
  assert report['tasks']['dispatched'] == sum(not c for _, c in record['dispatched'])
  assert sim.client_updates == report['tasks']['aggregated'] == 12


# ---- Staleness bound, accounting ---------------------------------------------------------------


class _OfflineFrom:
  """Device 1 goes offline for good at `time`; device 0 is always online."""

  def __init__(self, time):
    self.time = time

  def next_available(self, client, time):
    return time if client == 0 or time < self.time else math.inf

  def online_until(self, client, time):
    return math.inf if client == 0 else self.time


def _two_device_run(tau, fetch_policy, availability=None):
  """Device 0 takes 1 s per step, device 1 5 s; both start at 0 and train 2 steps."""
  fed = toy_federation(num_clients=2, min_size=4, max_size=6)
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(3,))
  if fetch_policy is None:
    update = sgd_client_update(model, optax.sgd(0.1), 2)
  else:
    update = fedasmu_client_update(
      model, optax.sgd(0.1), 2, mu_beta=1.0, gamma_learning_rate=0.1, v_learning_rate=0.1
    )
  scheduler = FedasmuScheduler(
    100.0, 2, 2, LocalWork(steps=2, batch_size=2), tau=tau, fetch_policy=fetch_policy
  )
  sim = Simulation(
    executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1)),
    scheduler=scheduler,
    aggregator=fedasmu_aggregator(2, FedasmuSettings(), dynamic=True, client_learning_rate=0.005),
    latency=DeviceRatioLatency(2, np.random.default_rng(0), fastest_step_time=1.0, ratio=5.0),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(0),
    availability=availability,
  )
  aggregated = []
  apply = sim.apply_update_batch
  sim.apply_update_batch = lambda batch, handles: (
    aggregated.extend(handles),
    apply(batch, handles),
  )
  sim.run(StopCondition(max_virtual_time=50.0))
  return sim, aggregated


class TestStalenessBound:
  @pytest.mark.parametrize('fetch', [False, True])
  def test_uploads_beyond_tau_are_discarded(self, fetch):
    policy = RecordingFetch(0.0) if fetch else None
    # Device 0 is aggregated at t = 2 (version 1); device 1 arrives at t = 10 with
    # staleness t - o + 1 = 1 - 0 + 1 = 2.
    sim, aggregated = _two_device_run(1, policy)
    report = sim.report()
    assert [(h.client_id, h.arrival_time) for h in aggregated] == [(0, 2.0)]
    assert report['tasks'] == {
      'dispatched': 2,
      'arrived': 2,
      'aggregated': 1,
      'discarded': {'stale': 1},
      'in_flight': 0,
      'waiting': 0,
    }
    if fetch:
      # Device 1 asked after its first step (t = 5), got version 1 and blended; its reward
      # reached the policy although the server then discarded its upload.
      assert [(c, e) for c, e, _ in policy.observed] == [(1, 1)]
      assert sim.scheduler.blends == 1 and sim.scheduler.fetches == 2
    sim, aggregated = _two_device_run(2, policy)
    assert [h.client_id for h in aggregated] == [0, 1]
    assert sim.report()['tasks']['discarded'] == {}

  @pytest.mark.parametrize('offline', [3.0, 5.0, 7.0])
  def test_a_device_going_offline_in_either_segment_drops_its_task(self, offline):
    # Device 1's first segment ends at t = 5 (the request), its second would end at t = 10.
    sim, aggregated = _two_device_run(5, RecordingFetch(0.0), _OfflineFrom(offline))
    assert [h.client_id for h in aggregated] == [0]
    report = sim.report()  # checks that every task is accounted for
    assert report['tasks']['dispatched'] == 2 and report['tasks']['discarded'] == {'offline': 1}
    assert sim.scheduler.fetches == (2 if offline > 5.0 else 1)
    assert sim.scheduler.in_flight == 0

  def test_a_segment_must_be_continued(self):
    class Abandon(PeriodicTriggerScheduler):
      def start_task(self, sim, client):
        sim.dispatch(client, 1, intermediate=True)

      def on_segment_end(self, sim, handle):
        pass

    fed = toy_federation(num_clients=2)
    sim = Simulation(
      executor=NoTrainingExecutor({'w': jnp.zeros(1)}),
      scheduler=Abandon(1.0, 1, 1, 1, LocalWork(steps=1)),
      aggregator=server_update(optax.sgd(1.0)),
      latency=PerStepLatency(2, np.random.default_rng(0)),
      init_params={'w': jnp.zeros(1)},
      client_sizes=fed.client_sizes,
      rng=np.random.default_rng(0),
    )
    with pytest.raises(RuntimeError, match='on_segment_end'):
      sim.run(StopCondition(max_versions=1))


# ---- FedASMU-0 = FedAsync with a staleness bound ------------------------------------------------


def _config(algorithm, **overrides):
  config = base_config()
  config.algorithm.name = algorithm
  config.data.num_clients = 8
  config.model.kwargs.hidden_sizes = (6,)
  config.client.learning_rate = 0.2
  config.client.local_steps = 3
  config.client.batch_size = 4
  kwargs = config.algorithm.kwargs
  if 'alpha' in algorithms.get_spec(algorithm).settings.field_names():  # fedbuff has none
    kwargs.alpha = 0.7
  kwargs.staleness = 'polynomial'
  kwargs.staleness_a = 0.5
  kwargs.concurrency = 4
  config.latency.name = 'device_ratio'
  for key, value in overrides.items():
    set_by_path(config, key, value)
  experiment.validate(config)
  return config


def _context(config, client_sizes, latency=None):
  return algorithms.BuildContext(
    config.algorithm.name, experiment.run_facts(config), client_sizes, latency
  )


def _run_config(config, versions=12):
  fed = toy_federation(num_clients=8, min_size=4, max_size=12)
  latency = DeviceRatioLatency(8, np.random.default_rng(7), fastest_step_time=0.5, ratio=5.0)
  algorithm = algorithms.build(
    experiment.algorithm_settings(config), _context(config, fed.client_sizes, latency)
  )
  model = get_model('mlp', fed.input_shape, fed.num_classes, hidden_sizes=(6,))
  update = algorithm.make_client_update(model, optax.sgd(0.2), 4)
  sim = Simulation(
    executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1), backend='loop'),
    scheduler=algorithm.scheduler,
    aggregator=algorithm.aggregator,
    latency=latency,
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(0),
  )
  sim.run(StopCondition(max_versions=versions))
  return sim


TRIGGER = {'algorithm.kwargs.trigger_period': 0.7, 'algorithm.kwargs.trigger_count': 3}


def test_fedasmu_0_is_fedasync_with_a_staleness_bound():
  # Same system model; FedASMU's bound t - o + 1 <= tau = 2 is max_staleness = 1.
  fedasmu_0 = _run_config(_config('fedasmu_0', **{'algorithm.kwargs.tau': 2, **TRIGGER}))
  fedasync = _run_config(_config('fedasync', **{'algorithm.kwargs.max_staleness': 1, **TRIGGER}))
  assert isinstance(fedasync.scheduler, PeriodicTriggerScheduler)
  assert fedasmu_0.version == fedasync.version == 12 and fedasmu_0.now == fedasync.now
  stale = fedasmu_0.report()['tasks']['discarded']
  assert stale == fedasync.report()['tasks']['discarded'] and stale.get('stale', 0) > 0
  _close(fedasmu_0.params, fedasync.params, atol=1e-6)
  # The dynamic weights (FedASMU-FA) do change the trajectory.
  fedasmu_fa = _run_config(_config('fedasmu_fa', **{'algorithm.kwargs.tau': 2, **TRIGGER}))
  assert not np.allclose(
    jax.tree_util.tree_leaves(fedasmu_fa.params)[0],
    jax.tree_util.tree_leaves(fedasmu_0.params)[0],
    atol=1e-4,
  )


def test_fedasmu_variants_build_and_run():
  for algorithm in ('fedasmu_h1', 'fedasmu_da'):
    config = _config(algorithm, **{**TRIGGER, 'algorithm.kwargs.fetch_policy': 'learned'})
    sim = _run_config(config, versions=6)
    assert sim.version == 6 and sim.scheduler.fetches > 0
    sim.report()


# ---- The periodic trigger: timing and the concurrency cap -----------------------------------


def _trigger_run(timing, until):
  """6 devices, 25 s per task, 𝒯 = 10, m' = 2, cap 3."""
  fed = toy_federation(num_clients=6)
  scheduler = PeriodicTriggerScheduler(10.0, 2, 3, 1, LocalWork(steps=25), timing=timing)
  sim = Simulation(
    executor=NoTrainingExecutor({'w': jnp.zeros(1)}),
    scheduler=scheduler,
    aggregator=server_update(optax.sgd(1.0)),
    latency=PerStepLatency(6, np.random.default_rng(0), mean=1.0),
    init_params={'w': jnp.zeros(1)},
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(0),
  )
  handles = []
  dispatch = sim.dispatch
  sim.dispatch = lambda *args, **kwargs: handles.append(dispatch(*args, **kwargs)) or handles[-1]
  sim.run(StopCondition(max_virtual_time=until))
  return sim, handles


def _starts(handles):
  times = {}
  for h in handles:
    times[h.dispatch_time] = times.get(h.dispatch_time, 0) + 1
  return times


def _max_concurrency(handles):
  events = sorted(
    [(h.dispatch_time + 25.0, -1) for h in handles] + [(h.dispatch_time, 1) for h in handles]
  )  # at equal times, ends first
  running, peak = 0, 0
  for _, change in events:
    running += change
    peak = max(peak, running)
  return peak


@pytest.mark.parametrize(
  'timing,expected',
  [
    # Checks every 10 s: 2 at 0, 1 at 10 (cap 3), none at 20, 2 at 30 (the two of t = 0 ended at
    # 25), 1 at 40, none at 50, 2 at 60.
    ('periodic', {0.0: 2, 10.0: 1, 30.0: 2, 40.0: 1, 60.0: 2}),
    # Alg. 1 as printed: at the cap the thread waits for a device (25, 50) and then sleeps 𝒯.
    ('after_trigger', {0.0: 2, 10.0: 1, 25.0: 2, 35.0: 1, 50.0: 2, 60.0: 1}),
  ],
)
def test_periodic_trigger_timing_and_cap(timing, expected):
  sim, handles = _trigger_run(timing, 61.0)
  assert _starts(handles) == expected
  assert _max_concurrency(handles) == 3
  for client in range(6):  # a device never trains two tasks at once
    mine = sorted(h.dispatch_time for h in handles if h.client_id == client)
    assert all(b >= a + 25.0 for a, b in zip(mine, mine[1:]))
  assert sim.scheduler.report()['triggered_devices'] == len(handles)


def _asynchronous_scheduler(config, buffer_size):
  settings = experiment.validate(config)
  return settings.asynchronous_scheduler(_context(config, np.full(8, 10)), buffer_size)


def test_asynchronous_scheduler_uses_the_trigger_when_a_period_is_set():
  config = _config('fedbuff')
  assert isinstance(_asynchronous_scheduler(config, 3), AsynchronousScheduler)
  config = _config(
    'fedbuff',
    **{
      'algorithm.kwargs.trigger_period': 5.0,
      'algorithm.kwargs.trigger_count': 1,
      'algorithm.kwargs.trigger_timing': 'after_trigger',
    },
  )
  scheduler = _asynchronous_scheduler(config, 3)
  assert isinstance(scheduler, PeriodicTriggerScheduler)
  assert (
    scheduler.trigger_period,
    scheduler.trigger_count,
    scheduler.buffer_size,
    scheduler.timing,
  ) == (5.0, 1, 3, 'after_trigger')


# ---- Settings ----------------------------------------------------------------------------------


def _fedasmu_config(algorithm, reading='tables'):
  """The shipped FedASMU configs' setting (FedAsync's alpha = 0.6, the trigger of `reading`)."""
  return fedasmu_fashion_mnist_config(algorithm, alpha=0.6, **fedasmu_trigger(reading))


def test_fedasmu_config_readings():
  tables = _fedasmu_config('fedasmu')
  settings = experiment.validate(tables)
  assert (
    settings.trigger_period,
    settings.trigger_count,
    settings.tau,
    settings.concurrency,
    tables.run.num_rounds,
  ) == (10.0, 10, 99, 10, 500)
  assert settings.lambda_learning_rate == settings.v_learning_rate == 1e-4
  assert tables.client.learning_rate == 0.005
  appendix = experiment.validate(_fedasmu_config('fedasmu_h3', 'appendix'))
  assert (appendix.trigger_period, appendix.trigger_count) == (5.0, 1)
  with pytest.raises(ConfigError, match='reading'):
    fedasmu_trigger('both')


@pytest.mark.parametrize(
  'algorithm,key,value,match',
  [
    ('fedasmu', 'algorithm.kwargs.max_staleness', 5, 'algorithm.kwargs.max_staleness'),
    ('fedasmu', 'algorithm.kwargs.trigger_period', None, 'algorithm.kwargs.trigger_period'),
    ('fedasmu', 'client.local_epochs', 2.5, 'client.local_epochs'),
    ('fedasmu_h1', 'client.optimizer', 'momentum', 'client.optimizer'),
    ('fedasmu', 'algorithm.kwargs.proximal_strength', 0.1, 'algorithm.kwargs.proximal_strength'),
    ('fedasmu', 'algorithm.kwargs.tau', 0, 'algorithm.kwargs.tau'),
    ('fedasmu', 'algorithm.kwargs.alpha_min', 0.0, 'algorithm.kwargs.alpha_min'),
    ('fedasmu', 'algorithm.kwargs.xi_form', 'rendered', 'algorithm.kwargs.xi_form'),
    ('fedasmu', 'algorithm.kwargs.trigger_timing', 'sometimes', 'algorithm.kwargs.trigger_timing'),
    ('fedasmu', 'algorithm.kwargs.mu_beta', 0.0, 'algorithm.kwargs.mu_beta'),
    ('fedasync', 'algorithm.kwargs.trigger_period', -1.0, 'algorithm.kwargs.trigger_period'),
  ],
)
def test_invalid_fedasmu_settings_name_the_setting(algorithm, key, value, match):
  config = _fedasmu_config(algorithm)
  set_by_path(config, key, value)
  with pytest.raises(ConfigError, match=match) as error:
    experiment.validate(config)
  assert '\n' not in str(error.value) and 'allowed' in str(error.value)


def test_printed_forms_need_a_positive_sigma():
  config = _fedasmu_config('fedasmu')
  config.algorithm.kwargs.xi_form = 'printed'
  config.algorithm.kwargs.sigma_gradient = 'printed'
  with pytest.raises(ConfigError, match='algorithm.kwargs.sigma_gradient'):
    experiment.validate(config)
  config.algorithm.kwargs.sigma_gradient = 'exact'
  config.algorithm.kwargs.sigma_0 = -0.5
  with pytest.raises(ConfigError, match='algorithm.kwargs.sigma_0'):
    experiment.validate(config)
  # Without a fetch the optimizer is free (nothing is split).
  config = _fedasmu_config('fedasmu_fa')
  config.client.optimizer = 'momentum'
  experiment.validate(config)
