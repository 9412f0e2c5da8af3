"""FedAvg (McMahan et al. 2017), FedProx (Li et al. 2020), FedAvgM (Hsu et al. 2019) and
FedAdam / FedYogi / FedAdagrad (Reddi et al. 2021), as registered: whole runs against a float64
numpy reference written from the papers, and FedAvgM's and FedProx's degenerate cases.

The reference is softmax regression (an MLP without hidden layers) trained with full-batch
gradient descent: every client holds at most 20 examples and the batch is 32, so each local step
uses all of a client's examples once; every round selects every client."""

import numpy as np
import pytest

from fedsim_jax.runtime import StopCondition, UpdateBatch
from tests.algorithms import registered
from tests.algorithms.registered import FED

ROUNDS, STEPS, LR = 3, 3, 0.5


def _config(algorithm, **kwargs):
  config = registered.config(algorithm, cohort_size=FED.num_clients, **kwargs)
  config.model.kwargs.hidden_sizes = ()
  config.client.batch_size = 32  # > every client's size: full-batch steps
  config.client.local_steps = STEPS
  config.client.learning_rate = LR
  return config


def _run(algorithm, **kwargs):
  return registered.run(_config(algorithm, **kwargs), ROUNDS)


def _client_data():
  for client in range(FED.num_clients):
    x, y = FED.client_examples(client)
    yield x.reshape(len(x), -1).astype(np.float64) / 255.0, np.eye(FED.num_classes)[y]


def _local_training(params, x, onehot, proximal):
  """STEPS full-batch gradient steps on the mean cross-entropy + (proximal / 2)||w - w_0||^2."""
  start = [p.copy() for p in params]
  w, b = (p.copy() for p in params)
  for _ in range(STEPS):
    logits = x @ w + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    grad_logits = (p - onehot) / len(x)
    w -= LR * (x.T @ grad_logits + proximal * (w - start[0]))
    b -= LR * (grad_logits.sum(0) + proximal * (b - start[1]))
  return [w - start[0], b - start[1]]


def _reference(params, server_step, proximal=0.0):
  """ROUNDS rounds of every client; the server applies `server_step(params, mean_delta)` to
  the example-weighted mean delta."""
  sizes = FED.client_sizes.astype(np.float64)
  for _ in range(ROUNDS):
    deltas = [_local_training(params, x, y, proximal) for x, y in _client_data()]
    mean = [sum(n * d[i] for n, d in zip(sizes, deltas)) / sizes.sum() for i in range(2)]
    params = server_step(params, mean)
  return params


def _start_and_final(algorithm, **kwargs):
  """The registered run's initial and final (kernel, bias)."""
  sim = registered.simulation(_config(algorithm, **kwargs))
  dense = registered.to_numpy(sim.params)['Dense_0']
  start = [dense['kernel'], dense['bias']]
  sim.run(StopCondition(max_versions=ROUNDS))
  dense = registered.to_numpy(sim.params)['Dense_0']
  return start, [dense['kernel'], dense['bias']]


def _assert_close(actual, expected, atol=1e-5):
  for a, e in zip(actual, expected, strict=True):
    np.testing.assert_allclose(a, e, atol=atol, rtol=0)


def _plain_step(learning_rate=1.0):
  return lambda params, delta: [p + learning_rate * d for p, d in zip(params, delta)]


def test_fedavg_is_the_example_weighted_mean_of_local_models():
  start, final = _start_and_final('fedavg')
  _assert_close(final, _reference(start, _plain_step()))
  assert registered.max_difference(final, start) > 0.1  # the runs did train


def test_fedprox_adds_mu_times_the_distance_to_the_download_to_every_gradient():
  start, final = _start_and_final('fedprox', proximal_strength=0.8)
  _assert_close(final, _reference(start, _plain_step(), proximal=0.8))
  # The proximal term matters at this strength: FedAvg's trajectory is far from it.
  assert registered.max_difference(final, _reference(start, _plain_step())) > 1e-3


def test_fedprox_with_mu_zero_is_fedavg_bit_for_bit():
  registered.assert_trees_equal(_run('fedprox').params, _run('fedavg').params)


def _momentum_step(learning_rate, momentum):
  """Hsu et al.: v <- momentum v + Delta; x <- x + eta v (optax's sgd with momentum)."""
  velocity = None

  def step(params, delta):
    nonlocal velocity
    velocity = delta if velocity is None else [momentum * v + d for v, d in zip(velocity, delta)]
    return [p + learning_rate * v for p, v in zip(params, velocity)]

  return step


def test_fedavgm_accumulates_server_momentum():
  start, final = _start_and_final('fedavgm', server_momentum=0.7, server_learning_rate=0.5)
  _assert_close(final, _reference(start, _momentum_step(0.5, 0.7)))


def test_fedavgm_with_momentum_zero_is_fedavg_bit_for_bit():
  fedavgm = _run('fedavgm', server_momentum=0.0)
  registered.assert_trees_equal(fedavgm.params, _run('fedavg').params)
  assert registered.max_difference(_run('fedavgm').params, fedavgm.params) > 1e-3


def _adaptive_step(rule, eta, b1, b2, tau):
  """Reddi et al. 2021, Algorithm 2, written out per coordinate with the pseudo-gradient
  -Delta: m <- b1 m + (1 - b1) Delta; v from the rule, v_{-1} = tau^2; x <- x + eta m /
  (sqrt(v) + tau)."""
  first, second = None, None

  def step(params, delta):
    nonlocal first, second
    if first is None:
      first = [np.zeros_like(d) for d in delta]
      second = [np.full_like(d, tau**2) for d in delta]
    first = [b1 * m + (1 - b1) * d for m, d in zip(first, delta)]
    if rule == 'fedadagrad':
      second = [v + d * d for v, d in zip(second, delta)]
    elif rule == 'fedyogi':
      second = [v - (1 - b2) * d * d * np.sign(v - d * d) for v, d in zip(second, delta)]
    else:
      second = [b2 * v + (1 - b2) * d * d for v, d in zip(second, delta)]
    return [p + eta * m / (np.sqrt(v) + tau) for p, m, v in zip(params, first, second)]

  return step


@pytest.mark.parametrize('algorithm', ['fedadam', 'fedyogi', 'fedadagrad'])
def test_adaptive_server_steps_follow_reddi_algorithm_2_with_their_defaults(algorithm):
  # Defaults: eta 0.01, b1 0.9, b2 0.99, tau 1e-3 (Reddi et al.'s Section 5 initialisation).
  start, final = _start_and_final(algorithm)
  expected = _reference(start, _adaptive_step(algorithm, 0.01, 0.9, 0.99, 1e-3))
  _assert_close(final, expected, atol=2e-6)
  # Each step moves a coordinate by about eta: far from FedAvg's, which moves ~0.1 here.
  assert registered.max_difference(final, _reference(start, _plain_step())) > 0.05


def test_fedadam_first_server_step_on_a_hand_computed_pseudo_gradient():
  # Reddi et al., Algorithm 2, first round, per coordinate of the mean delta D:
  # m = (1 - b1) D, v = b2 tau^2 + (1 - b2) D^2, x = x + eta m / (sqrt(v) + tau).
  # With eta = 0.1, b1 = 0.9, b2 = 0.99, tau = 0.01 and D = 0.5: m = 0.05,
  # v = 0.000099 + 0.0025 = 0.002599, sqrt(v) = 0.0509804, step = 0.1 * 0.05 / 0.0609804.
  aggregator = registered.simulation(
    _config('fedadam', server_learning_rate=0.1, eps=0.01, b1=0.9, b2=0.99)
  ).aggregator
  batch = UpdateBatch(
    deltas={'w': np.array([[0.2], [0.6], [9.0]], np.float32)},  # the last row: padding
    weights=np.array([1.0, 3.0, 0.0], np.float32),  # D = (0.2 + 3 * 0.6) / 4 = 0.5
    staleness=np.zeros(3, np.int32),
    num_steps=np.ones(3, np.int32),
    group=np.zeros(3, np.int32),
  )
  state = aggregator.apply(aggregator.init({'w': np.array([1.0], np.float32)}), batch)
  np.testing.assert_allclose(state.params['w'], [1.0 + 0.1 * 0.05 / 0.0609804], rtol=1e-6)
