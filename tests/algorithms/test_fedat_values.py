"""FedAT (Chai et al. 2021), as registered: with one tier it is FedAvg; with two tiers the global
model is the tier models' average with the reversed update counts as weights, replayed by hand
on a run's tier rounds."""

import numpy as np

from fedsim_jax.runtime import StopCondition
from tests.algorithms import registered
from tests.algorithms.registered import FED


def test_one_tier_is_fedavg():
  # A tier ratio that puts every client in one tier: synchronous rounds of 3 clients whose tier
  # model, the example-weighted mean of their models, is the global model.
  fedat = registered.run(registered.config('fedat', tier_ratio=1e9), versions=4)
  assert len(fedat.scheduler.tiers) == 1
  fedavg = registered.run(registered.config('fedavg'), versions=4)
  assert fedat.now == fedavg.now
  registered.assert_trees_close(fedat.params, fedavg.params, atol=1e-6)


def test_two_tiers_average_their_models_with_reversed_update_counts():
  # Clients 0-2 take 1 s per step, clients 3-5 take 4 s: tiers {0, 1, 2} and {3, 4, 5}, each
  # round all three members of a tier. The fast tier updates about four times as often, so
  # the slow tier's model gets about four fifths of the weight once it has one.
  config = registered.config('fedat', tier_ratio=2.0, cohort_size=3)
  sim = registered.simulation(config, latency=registered.StepTimes([1, 1, 1, 4, 4, 4]))
  assert [t.tolist() for t in sim.scheduler.tiers] == [[0, 1, 2], [3, 4, 5]]
  recorded = registered.record_aggregations(sim)
  start = registered.to_numpy(sim.params)
  sim.run(StopCondition(max_versions=8))
  sizes = FED.client_sizes.astype(np.float64)
  tier_models, counts = [start, start], [0, 0]
  for aggregation in recorded:
    batch = aggregation.batch
    real = np.flatnonzero(aggregation.real)
    (tier,) = set(batch.group[real].tolist())
    clients = batch.client_id[real]
    assert sorted(clients.tolist()) == [[0, 1, 2], [3, 4, 5]][tier]
    # The tier model: the example-weighted mean of the round's client models.
    shares = sizes[clients] / sizes[clients].sum()
    models = [registered.rows(batch.client_params, row) for row in real]
    tier_models[tier] = registered.weighted_sum(models, shares)
    counts[tier] += 1
    # Tier m gets the other tier's count (the counts handed out in reverse order); before the
    # slow tier's first update the fast tier's model is the global one.
    weights = [1.0, 0.0] if counts[1] == 0 else np.array([counts[1], counts[0]]) / sum(counts)
    expected = registered.weighted_sum(tier_models, weights)
  assert counts[0] >= 3 * counts[1] > 0
  registered.assert_trees_close(sim.params, expected, atol=1e-6)
