"""FedNova (Wang et al. 2020), as registered: equal local steps with SGD is FedAvg, the
normalised average replayed by hand with heterogeneous steps, and ||a||_1 of the momentum and
proximal solvers on hand-computed sums."""

import numpy as np
import pytest

from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import validate
from fedsim_jax.runtime import StopCondition
from fedsim_jax.strategy.reducers import fednova_norm
from tests.algorithms import registered


def test_norms_of_the_local_solvers_on_hand_computed_sums():
  tau = np.array([1.0, 3.0])
  np.testing.assert_allclose(fednova_norm()(tau), [1, 3])
  # momentum 0.5, tau 3: a = (1 + 0.5 + 0.25, 1 + 0.5, 1), ||a||_1 = 4.25.
  np.testing.assert_allclose(fednova_norm(momentum=0.5)(tau), [1.0, 4.25])
  # proximal: eta mu = 0.1, tau 3: a = (0.81, 0.9, 1), ||a||_1 = 2.71.
  np.testing.assert_allclose(fednova_norm(proximal=1.0, learning_rate=0.1)(tau), [1.0, 2.71])
  with pytest.raises(ValueError, match='no closed form'):
    fednova_norm(momentum=0.5, proximal=0.1)


def test_equal_steps_with_sgd_is_fedavg():
  fednova = registered.trajectory(registered.config('fednova'), versions=3)
  fedavg = registered.trajectory(registered.config('fedavg'), versions=3)
  for ours, theirs in zip(fednova, fedavg):
    registered.assert_trees_close(ours, theirs, atol=1e-6)


@pytest.mark.parametrize('momentum', [False, True])
def test_heterogeneous_steps_normalised_average_replayed_by_hand(momentum):
  config = registered.config('fednova', cohort_size=4)
  config.client.local_steps = None
  config.client.local_epochs = 1.0  # clients of 8..20 examples: 1..3 steps of batch 8
  if momentum:
    config.client.optimizer = 'momentum'
    config.client.momentum = 0.5
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  sim.run(StopCondition(max_versions=2))
  norm = fednova_norm(0.5 if momentum else 0.0)
  for index, aggregation in enumerate(recorded):
    real = np.flatnonzero(aggregation.real)
    weights = np.asarray(aggregation.batch.weights)[real]
    steps = np.asarray(aggregation.batch.num_steps)[real].astype(float)
    assert len(set(steps)) > 1  # heterogeneous local work
    a = norm(steps)
    p = weights / weights.sum()
    tau_eff = (p * a).sum()
    deltas = [registered.rows(aggregation.batch.deltas, i) for i in real]
    step = registered.weighted_sum(deltas, tau_eff * p / a)
    after = (
      recorded[index + 1].params if index + 1 < len(recorded) else registered.to_numpy(sim.params)
    )
    registered.assert_trees_close(after, registered.plus(aggregation.params, 1.0, step), atol=1e-6)


def test_adam_clients_and_momentum_with_a_proximal_term_are_refused():
  config = registered.config('fednova')
  config.client.optimizer = 'adam'
  with pytest.raises(ConfigError, match="client.optimizer='adam' is invalid"):
    validate(config)
  config = registered.config('fednova', proximal_strength=0.1)
  config.client.optimizer = 'momentum'
  with pytest.raises(ConfigError, match='proximal_strength=0.1 is invalid'):
    validate(config)
