"""FedCompass and its +M / +N variants (Li et al. 2024), as registered: Algorithm 3's group
update replayed by hand on runs whose arrival groups hold clients of different speeds, the
schedule of homogeneous clients worked out by hand, and Q_min = Q_max reducing to FedAsync."""

import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.runtime import StopCondition
from tests.algorithms import registered
from tests.algorithms.registered import FED

ALPHA, A = 0.9, 0.5
SHARES = FED.client_sizes / FED.client_sizes.sum()  # p_k = n_k / n


def _st(u):
  """st(u) = alpha (u + 1)^-a."""
  return ALPHA * (u + 1.0) ** -A


def _config(algorithm, q_min=2, q_max=10, **kwargs):
  return registered.config(algorithm, q_min=q_min, q_max=q_max, **kwargs)


@pytest.mark.parametrize('algorithm', ['fedcompass', 'fedcompass_m', 'fedcompass_n'])
def test_group_aggregation_replayed_by_hand(algorithm):
  # Six clients of 1..3 s per step. First arrivals: w <- w + st(u) p Delta. Group
  # aggregations: G = sum_k st(u_k) p_k Delta_k (+N: tau_eff sum_k st(u_k) p_k Delta_k / Q_k,
  # tau_eff = sum_k p_k Q_k / sum_k p_k), then w <- w + G (+M: m <- beta m + G; w <- w + m).
  config = _config(algorithm, server_momentum=0.5)
  latency = registered.StepTimes([1.0, 1.3, 1.7, 2.1, 2.6, 3.0])
  sim = registered.simulation(config, latency=latency)
  recorded = registered.record_aggregations(sim)
  params = registered.to_numpy(sim.params)
  sim.run(StopCondition(max_versions=16))
  momentum, groups_with_unequal_steps = None, 0
  for aggregation in recorded:
    batch = aggregation.batch
    real = np.flatnonzero(aggregation.real)
    clients = batch.client_id[real]
    np.testing.assert_allclose(batch.weights[real], SHARES[clients], rtol=1e-6)
    steps = batch.num_steps[real].astype(np.float64)
    assert np.all((steps >= 2) & (steps <= 10))
    scale = _st(batch.staleness[real].astype(np.float64)) * SHARES[clients]
    first_arrival = bool(np.all(batch.group[real] < 0))
    if algorithm == 'fedcompass_n':
      scale = scale / steps * (SHARES[clients] @ steps) / SHARES[clients].sum()
    step = registered.weighted_sum([registered.rows(batch.deltas, row) for row in real], scale)
    if algorithm == 'fedcompass_m' and not first_arrival:
      momentum = step if momentum is None else registered.plus(step, 0.5, momentum)
      step = momentum
    params = registered.plus(params, 1.0, step)
    groups_with_unequal_steps += len(set(steps.tolist())) > 1
  assert groups_with_unequal_steps > 0
  registered.assert_trees_close(sim.params, params, atol=1e-6)


def test_homogeneous_clients_worked_by_hand():
  # Every client takes 1 s per step; client k always moves the model by d_k (no training).
  # Warm-up (Alg. 1 line 8): all train Q_min = 2 steps and arrive at t = 2, each applied alone:
  # client k's is the k-th update, so its staleness is k. Each then joins the group the first
  # one created, with Q_max = 10 steps and T_a = 12; client k downloaded version k + 1, so at
  # the group aggregation (version 6) its staleness is 5 - k. Afterwards every round is one
  # group of all six, Q_max steps from the same version: staleness 0, w += alpha sum p_k d_k.
  deltas = [1.0, -2.0, 3.0, 0.5, 4.0, -1.0]
  sim = registered.simulation(
    _config('fedcompass'),
    latency=registered.StepTimes([1.0] * 6),
    executor=registered.ConstantDeltaExecutor(deltas),
    init_params={'w': jnp.zeros(1)},
  )
  recorded = registered.record_aggregations(sim)
  sim.run(StopCondition(max_versions=9))
  k = np.arange(6)
  d = np.array(deltas)
  warm_up = np.cumsum(_st(k) * SHARES * d)
  first_group = warm_up[-1] + np.sum(_st(5 - k) * SHARES * d)
  later = first_group + ALPHA * np.sum(SHARES * d) * np.arange(1, 3)
  trajectory = [float(a.params['w'][0]) for a in recorded[1:]] + [float(sim.params['w'][0])]
  np.testing.assert_allclose(trajectory, [*warm_up, first_group, *later], rtol=1e-6)
  assert [a.batch.num_steps[a.real].tolist() for a in recorded] == [[2]] * 6 + [[10] * 6] * 3
  assert sim.now == 2 + 3 * 10


def test_q_min_equal_q_max_is_fedasyncs_delta_form():
  # With these speeds no client ever fits exactly Q steps into another's group: every arrival
  # group has one member and aggregates on arrival, w += st(u) p Delta, as FedAsync's delta
  # form with the same alpha, s(u) = (u + 1)^-a and example shares.
  federation = toy_federation(num_clients=3, min_size=8, max_size=20, seed=1)
  latency = [1.0, 1.05, 1.11]
  compass_config = _config('fedcompass', q_min=8, q_max=8)
  compass_config.data.num_clients = 3
  compass = registered.simulation(compass_config, federation, latency=registered.StepTimes(latency))
  recorded = registered.record_aggregations(compass)
  compass.run(StopCondition(max_versions=15))
  assert all(a.real.sum() == 1 for a in recorded)
  fedasync_config = registered.config(
    'fedasync',
    alpha=ALPHA,
    form='delta',
    staleness='polynomial',
    staleness_a=A,
    weighting='num_examples',
    concurrency=3,
  )
  fedasync_config.data.num_clients = 3
  fedasync_config.client.local_steps = 8
  fedasync = registered.simulation(
    fedasync_config, federation, latency=registered.StepTimes(latency)
  )
  fedasync.run(StopCondition(max_versions=15))
  assert compass.now == fedasync.now
  registered.assert_trees_close(compass.params, fedasync.params, atol=1e-6)
