"""FedASMU's asynchronous baselines as registered: FedSA (Chen, Mao and Ma 2021) and PORT (Su
and Li 2022) replayed by hand on the buffers of runs with stale arrivals, and ASO-Fed (Chen et
al. 2020) without its adaptive parts equal to FedAsync's delta form."""

import numpy as np

from fedsim_jax.runtime import StopCondition
from tests.algorithms import registered
from tests.algorithms.registered import FED

SIZES = FED.client_sizes.astype(np.float64)


def _recorded_run(config, versions):
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  start = registered.to_numpy(sim.params)
  sim.run(StopCondition(max_versions=versions))
  return sim, start, recorded


class TestFedSA:
  def test_buffer_update_replayed_by_hand(self):
    # w <- w + sum_k (n_k / sum_buffer n_j) (u_k + 1)^-a Delta_k over buffers of M = 3.
    config = registered.config(
      'fedsa', buffer_size=3, concurrency=5, staleness='polynomial', staleness_a=0.7
    )
    sim, params, recorded = _recorded_run(config, versions=5)
    stale = 0
    for aggregation in recorded:
      batch = aggregation.batch
      real = np.flatnonzero(aggregation.real)
      assert len(real) == 3
      n = SIZES[batch.client_id[real]]
      for row, share in zip(real, n / n.sum()):
        u = int(batch.staleness[row])
        stale += u > 0
        params = registered.plus(
          params, share * (u + 1.0) ** -0.7, registered.rows(batch.deltas, row)
        )
    assert stale > 0
    registered.assert_trees_close(sim.params, params, atol=1e-6)


def _cosine(a, b):
  norm = np.sqrt(registered.tree_vdot(a, a) * registered.tree_vdot(b, b))
  return registered.tree_vdot(a, b) / norm


class TestPort:
  def test_buffer_update_replayed_by_hand(self):
    # raw_k = n_k ((cos(Delta_k, w_t - w_{t-1}) + 1) / 2 + B / (tau_k + B)) with cos := 1 for
    # tau_k < 2 or before any server update; w <- w + sum_k raw_k Delta_k / sum_j raw_j.
    config = registered.config('port', buffer_size=2, concurrency=5, staleness_bound=4.0)
    sim, params, recorded = _recorded_run(config, versions=10)
    last_step, compared = None, 0
    for aggregation in recorded:
      batch = aggregation.batch
      real = np.flatnonzero(aggregation.real)
      deltas = [registered.rows(batch.deltas, row) for row in real]
      raw = []
      for row, delta in zip(real, deltas):
        tau = int(batch.staleness[row])
        cos = 1.0
        if tau >= 2 and last_step is not None:
          cos = _cosine(delta, last_step)
          compared += 1
        raw.append(SIZES[batch.client_id[row]] * ((cos + 1) / 2 + 4.0 / (tau + 4.0)))
      step = registered.weighted_sum(deltas, np.array(raw) / sum(raw))
      params = registered.plus(params, 1.0, step)
      last_step = step
    assert compared > 0  # some update was weighted by its similarity
    registered.assert_trees_close(sim.params, params, atol=1e-6)


class TestAsoFed:
  def _fedasync(self, **kwargs):
    # FedAsync's delta form with alpha = 1 and s = 1: w <- w + (n_k / n) Delta_k.
    config = registered.config(
      'fedasync', alpha=1.0, form='delta', staleness='constant', weighting='num_examples', **kwargs
    )
    return registered.run(config, versions=10)

  def test_without_its_adaptive_parts_it_is_fedasync_with_example_shares(self):
    # lambda = 0, beta = 0 ('current': h = g, so the decayed gradient is g) and r_k = 1.
    config = registered.config('asofed', proximal=0.0, decay=0.0, dynamic_step_size=False)
    asofed = registered.run(config, versions=10)
    fedasync = self._fedasync()
    assert asofed.now == fedasync.now
    registered.assert_trees_close(asofed.params, fedasync.params, atol=1e-5)

  def test_its_local_constraint_is_a_proximal_term_of_strength_lambda(self):
    config = registered.config('asofed', proximal=2.0, decay=0.0, dynamic_step_size=False)
    asofed = registered.run(config, versions=10)
    registered.assert_trees_close(
      asofed.params, self._fedasync(proximal_strength=2.0).params, atol=1e-5
    )
    assert registered.max_difference(asofed.params, self._fedasync().params) > 1e-3
