"""CC-FedAvg (Zhang et al.) and the baselines it is compared with, as registered: with full
budgets every one of them is FedAvg's plain mean; with one constrained client the trajectories
of the skip strategies, FedAvg (dropout) and FedNova worked out by hand."""

import jax.numpy as jnp
import numpy as np
import pytest

from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.runtime import StopCondition
from tests.algorithms import registered

BUDGETED = [
  'ccfedavg',
  'ccfedavg_c',
  'ccfedavg_strategy1',
  'ccfedavg_strategy2',
  'fedavg_dropout',
  'fednova_budget',
]


@pytest.mark.parametrize('algorithm', BUDGETED)
def test_full_budgets_are_fedavg_with_the_plain_mean(algorithm):
  # beta = 1 level: p_i = 1 for every client, so every selected client trains every round
  # (FedNova's K steps for all: its normalisation is then the identity).
  budgeted = registered.run(registered.config(algorithm, budget_beta=1), versions=4)
  fedavg = registered.run(registered.config('fedavg', weighting='uniform'), versions=4)
  assert budgeted.scheduler.report().get('estimated_updates', 0) == 0
  registered.assert_trees_close(budgeted.params, fedavg.params, atol=1e-6)


def test_fednova_with_equal_budgets_is_fedavg_with_the_reduced_steps():
  # p_i = 1/2 for all (uniform budgets, W = 2): every client trains ceil(6 / 2) = 3 steps, and
  # FedNova's tau_eff sum_k p_k Delta_k / Q_k with equal Q_k is the plain mean.
  config = registered.config('fednova_budget', budget_rule='uniform', budget_w=2)
  config.client.local_steps = 6
  fednova = registered.run(config, versions=4)
  fedavg = registered.run(registered.config('fedavg', weighting='uniform'), versions=4)
  registered.assert_trees_close(fednova.params, fedavg.params, atol=1e-6)


# Two clients, both selected every round. Client 0 has p = 1/2 (two_group, r = 1/2, W = 2) and,
# round-robin with phase 0, trains in rounds 0 and 2 and skips 1 and 3; client 1 (p = 1) always
# trains. Client 0's task moves the model by +1, client 1's by +3 (no training): a round where
# both train adds (1 + 3) / 2 = 2.
#   ccfedavg (Strategy 3): client 0 resends its last delta, +1: every round adds 2.
#   strategy1: it is left out: rounds 1 and 3 add 3.
#   strategy2: it resends its last model x_{t-1} + 1, a delta of x_{t-1} + 1 - x_t = -1
#     (x_t - x_{t-1} = 2 after a round where both trained): rounds 1 and 3 add (-1 + 3) / 2 = 1.
#   ccfedavg_c with tau = 2: Strategy 3 in round 1, Strategy 2 in round 3.
#   fedavg_dropout (T = 4): client 0 trains while t < p T = 2, then is left out.
#   fednova_budget (K = 6): client 0 trains ceil(6 / 2) = 3 steps, client 1 6, every round;
#     tau_eff = (3 + 6) / 2 = 4.5 and each round adds 4.5 (1/2 x 1 / 3 + 1/2 x 3 / 6) = 1.875.
WORKED = {
  'ccfedavg': [2, 4, 6, 8],
  'ccfedavg_strategy1': [2, 5, 7, 10],
  'ccfedavg_strategy2': [2, 3, 5, 6],
  'ccfedavg_c': [2, 4, 6, 7],
  'fedavg_dropout': [2, 4, 7, 10],
  'fednova_budget': [1.875, 3.75, 5.625, 7.5],
}


@pytest.mark.parametrize('algorithm', sorted(WORKED))
def test_one_constrained_client_worked_by_hand(algorithm):
  config = registered.config(
    algorithm,
    cohort_size=2,
    budget_rule='two_group',
    budget_r=0.5,
    budget_w=2,
    budget_schedule='round_robin',
    switch_round=2,
  )
  config.data.num_clients = 2
  config.client.local_steps = 6
  sim = registered.simulation(
    config,
    toy_federation(num_clients=2, min_size=8, max_size=20, seed=1),
    executor=registered.ConstantDeltaExecutor([1.0, 3.0]),
    init_params={'w': jnp.zeros(1)},
  )
  trajectory = []
  sim.on_version = lambda s: trajectory.append(float(s.params['w'][0]))
  sim.run(StopCondition(max_versions=4))
  np.testing.assert_allclose(trajectory, WORKED[algorithm], rtol=1e-6)


def test_server_storage_gives_the_client_storage_models():
  # Algorithm 2 (the server keeps each client's last delta) = Algorithm 1, on training runs
  # where clients skip (ad-hoc schedule, beta = 4 levels).
  runs = [
    registered.run(registered.config('ccfedavg', storage=storage, cohort_size=4), versions=6)
    for storage in ('client', 'server')
  ]
  assert runs[0].scheduler.report()['estimated_updates'] > 0
  registered.assert_trees_close(runs[0].params, runs[1].params, atol=1e-6)
