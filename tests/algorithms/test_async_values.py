"""FedAsync (Xie et al. 2019) and FedBuff (Nguyen et al. 2022), as registered: FedAsync's mixing
and delta rules replayed by hand on the updates of a run with stale arrivals, and FedBuff with a
buffer of one update equal to FedAsync's delta form with the same staleness function."""

import numpy as np

from fedsim_jax.runtime import StopCondition
from tests.algorithms import registered
from tests.algorithms.registered import FED

STALENESS = {'staleness': 'polynomial', 'staleness_a': 0.5}


def _staleness(u):
  return (u + 1.0) ** -0.5


def _recorded_run(config, versions=10):
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  start = registered.to_numpy(sim.params)
  sim.run(StopCondition(max_versions=versions))
  return sim, start, recorded


class TestFedAsync:
  def test_mixing_rule_replayed_by_hand(self):
    # w <- (1 - a) w + a w_client, a = alpha (u + 1)^-0.5 (Xie et al., Algorithm 1).
    config = registered.config('fedasync', alpha=0.6, **STALENESS)
    sim, params, recorded = _recorded_run(config)
    staleness = []
    for aggregation in recorded:
      batch = aggregation.batch
      (row,) = np.flatnonzero(aggregation.real)  # one update per server version
      registered.assert_trees_close(aggregation.params, params, atol=1e-5)
      u = int(batch.staleness[row])
      staleness.append(u)
      rate = 0.6 * _staleness(u)
      params = registered.mix(params, rate, registered.rows(batch.client_params, row))
    assert max(staleness) >= 2  # stale updates were discounted
    registered.assert_trees_close(sim.params, params, atol=1e-5)

  def test_delta_form_replayed_by_hand(self):
    # FedCompass's baseline: w <- w + alpha s(u) (n_k / n) Delta_k.
    config = registered.config('fedasync', alpha=0.6, form='delta', **STALENESS)
    sim, params, recorded = _recorded_run(config)
    shares = FED.client_sizes / FED.client_sizes.sum()
    for aggregation in recorded:
      batch = aggregation.batch
      (row,) = np.flatnonzero(aggregation.real)
      scale = 0.6 * _staleness(int(batch.staleness[row])) * shares[int(batch.client_id[row])]
      params = registered.plus(params, scale, registered.rows(batch.deltas, row))
    registered.assert_trees_close(sim.params, params, atol=1e-6)


class TestFedBuff:
  def test_a_buffer_of_one_is_fedasyncs_delta_form_with_the_same_staleness(self):
    # FedBuff, K = 1: w + eta s(u) Delta / 1; FedAsync (delta form, p = 1): w + alpha s(u) Delta.
    common = {'concurrency': 3, 'weighting': 'uniform', **STALENESS}
    fedbuff = registered.simulation(
      registered.config('fedbuff', buffer_size=1, server_learning_rate=0.6, **common)
    )
    recorded = registered.record_aggregations(fedbuff)
    fedbuff.run(StopCondition(max_versions=10))
    fedasync = registered.run(
      registered.config('fedasync', alpha=0.6, form='delta', **common), versions=10
    )
    assert fedbuff.now == fedasync.now
    assert max(int(a.batch.staleness[a.real].max()) for a in recorded) >= 2
    registered.assert_trees_close(fedbuff.params, fedasync.params, atol=1e-6)

  def test_staleness_scaled_buffer_mean_replayed_by_hand(self):
    # w <- w + eta sum_k s(u_k) Delta_k / K with 'count' normalization, uniform weights, K = 2.
    config = registered.config(
      'fedbuff',
      buffer_size=2,
      concurrency=4,
      weighting='uniform',
      normalization='count',
      server_learning_rate=0.8,
      **STALENESS,
    )
    sim, params, recorded = _recorded_run(config, versions=6)
    for aggregation in recorded:
      batch = aggregation.batch
      real = np.flatnonzero(aggregation.real)
      assert len(real) == 2
      for row in real:
        scale = 0.8 * _staleness(int(batch.staleness[row])) / 2
        params = registered.plus(params, scale, registered.rows(batch.deltas, row))
    registered.assert_trees_close(sim.params, params, atol=1e-6)
