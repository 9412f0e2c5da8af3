"""q-FFL's q-FedAvg (Li et al. 2020, Algorithm 2), as registered: q = 0 is FedAvg with the plain
mean, the server step replayed by hand from the clients' losses and deltas, and the weights on
hand-computed numbers."""

import jax
import numpy as np
import pytest

from fedsim_jax.algorithms.qffl import LOSS_GUARD, qffl_weights
from fedsim_jax.experiment import build_model
from fedsim_jax.metrics import make_evaluator
from fedsim_jax.runtime import StopCondition
from fedsim_jax.strategy.client_loss import ClientLoss
from tests.algorithms import registered
from tests.algorithms.registered import FED

LEARNING_RATE = 0.1  # the tiny config's client learning rate: L = 1 / eta


def test_the_weights_on_hand_computed_numbers():
  # F = (1, 4), ||delta||^2 = (1, 0.25), q = 2, L = 10:
  # h_1 = 2 * 1 * 100 * 1 + 10 * 1 = 210; h_2 = 2 * 4 * 100 * 0.25 + 10 * 16 = 360.
  weights = qffl_weights([1.0 - LOSS_GUARD, 4.0 - LOSS_GUARD], [1.0, 0.25], q=2.0, lipschitz=10.0)
  np.testing.assert_allclose(weights, [10 / 570, 160 / 570], rtol=1e-9)
  # q = 0: a_k = L / (n L) = 1 / n whatever the losses and norms.
  np.testing.assert_allclose(qffl_weights([0.3, 7.0, 2.0], [5.0, 0.1, 1.0], 0.0, 3.0), [1 / 3] * 3)


def test_q_zero_is_fedavg_with_the_plain_mean():
  qffl = registered.trajectory(registered.config('qffedavg', q=0.0), versions=3)
  fedavg = registered.trajectory(registered.config('fedavg', weighting='uniform'), versions=3)
  for ours, theirs in zip(qffl, fedavg):
    registered.assert_trees_close(ours, theirs, atol=1e-6)


def test_the_server_step_replayed_from_the_losses_and_deltas():
  config = registered.config('qffedavg', q=2.0)
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  sim.run(StopCondition(max_versions=2))
  model = build_model(config, FED)
  lipschitz = 1 / LEARNING_RATE
  for index, aggregation in enumerate(recorded):
    real = np.flatnonzero(aggregation.real)
    clients = [int(aggregation.batch.client_id[i]) for i in real]
    deltas = [registered.rows(aggregation.batch.deltas, i) for i in real]
    # F_k(w^t): the client's loss over all its training examples, evaluated independently.
    losses = []
    for client in clients:
      x, y = FED.client_examples(client)
      losses.append(make_evaluator(model, x, y, batch_size=7)(aggregation.params)['loss'])
    delta_w = [jax.tree_util.tree_map(lambda d: -lipschitz * d, d) for d in deltas]
    powered = [(f + LOSS_GUARD) ** 2 for f in losses]
    h = [
      2 * (f + LOSS_GUARD) * sum(np.vdot(leaf, leaf) for leaf in jax.tree_util.tree_leaves(dw))
      + lipschitz * p
      for f, dw, p in zip(losses, delta_w, powered)
    ]
    step = registered.weighted_sum(delta_w, np.array(powered) / sum(h))
    expected = jax.tree_util.tree_map(lambda w, s: w - s, aggregation.params, step)
    after = (
      recorded[index + 1].params if index + 1 < len(recorded) else registered.to_numpy(sim.params)
    )
    registered.assert_trees_close(after, expected, atol=1e-5)


def test_client_loss_is_the_mean_over_all_of_a_clients_examples():
  config = registered.config('fedavg')
  model = build_model(config, FED)
  params = model.init(jax.random.PRNGKey(0))
  loss = ClientLoss(model, FED, batch_size=4)
  for client in range(FED.num_clients):
    x, y = FED.client_examples(client)
    want = make_evaluator(model, x, y, batch_size=len(x))(params)['loss']
    assert loss(params, client) == pytest.approx(want, rel=1e-5)
