"""SCAFFOLD (Karimireddy et al. 2020, Algorithm 1), as registered: its first round is FedAvg's,
the control variates replayed by hand after each round (option II), the corrected local step,
and options I and II equal with one local step."""

import jax
import numpy as np
import pytest

from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import validate
from fedsim_jax.runtime import StopCondition
from fedsim_jax.strategy import client_table
from tests.algorithms import registered
from tests.algorithms.registered import FED

LEARNING_RATE = 0.1  # the tiny config's client learning rate (eta_l)
COHORT = {'cohort_size': 3, 'weighting': 'uniform'}


def _config(algorithm='scaffold', local_steps=3, **kwargs):
  config = registered.config(algorithm, **{**COHORT, **kwargs})
  config.client.local_steps = local_steps
  return config


def _run(config, versions):
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  controls = []
  sim.on_version = lambda s: controls.append(
    (
      registered.to_numpy(s.scheduler.control),
      [registered.to_numpy(client_table.read(s.scheduler.client_controls, c)) for c in range(6)],
    )
  )
  sim.run(StopCondition(max_versions=versions))
  return sim, recorded, controls


def _zeros_like(tree):
  return jax.tree_util.tree_map(np.zeros_like, tree)


def _add(a, b, scale=1.0):
  return jax.tree_util.tree_map(lambda x, y: x + scale * y, a, b)


def test_the_first_round_is_fedavgs_with_the_plain_mean():
  # c = c_i = 0 in round 1: the correction term has zero gradient.
  scaffold = registered.trajectory(_config(), versions=1)
  fedavg = registered.trajectory(_config('fedavg'), versions=1)
  registered.assert_trees_close(scaffold[0], fedavg[0], atol=1e-7)


def test_option_two_control_variates_replayed_by_hand():
  sim, recorded, controls = _run(_config(), versions=2)
  control = _zeros_like(registered.to_numpy(sim.params))
  client_controls = [control] * FED.num_clients
  for aggregation, (got_control, got_clients) in zip(recorded, controls):
    batch = aggregation.batch
    change = _zeros_like(control)
    for index in np.flatnonzero(aggregation.real):
      client = int(batch.client_id[index])
      delta = registered.rows(batch.deltas, index)
      steps = int(batch.num_steps[index])
      # Line 12, option II: c_i+ = c_i - c + (x - y_i) / (K eta_l), x - y_i = -Delta y_i.
      new = _add(
        _add(client_controls[client], control, -1.0), delta, -1.0 / (steps * LEARNING_RATE)
      )
      change = _add(change, _add(new, client_controls[client], -1.0))
      client_controls[client] = new
    control = _add(control, change, 1.0 / FED.num_clients)  # line 17: 1 / N
    registered.assert_trees_close(got_control, control, atol=1e-6)
    for got, want in zip(got_clients, client_controls):
      registered.assert_trees_close(got, want, atol=1e-6)
  assert registered.max_difference(control, _zeros_like(control)) > 1e-3  # it moved


def test_the_server_step_is_eta_g_times_the_plain_mean_of_the_deltas():
  sim, recorded, _ = _run(_config(server_learning_rate=0.5), versions=2)
  for aggregation, after in zip(recorded, [recorded[1].params, registered.to_numpy(sim.params)]):
    real = np.flatnonzero(aggregation.real)
    mean = registered.weighted_sum(
      [registered.rows(aggregation.batch.deltas, i) for i in real],
      np.full(len(real), 1 / len(real)),
    )
    registered.assert_trees_close(after, registered.plus(aggregation.params, 0.5, mean), atol=1e-6)


def test_one_corrected_local_step_is_fedavgs_step_minus_eta_times_the_correction():
  # Round 1 is FedAvg's (above), so round 2 starts from the same model with the same clients
  # and batches; with one local step SCAFFOLD's delta is FedAvg's - eta_l (c - c_i).
  _, scaffold, controls = _run(_config(local_steps=1), versions=2)
  fedavg_sim = registered.simulation(_config('fedavg', local_steps=1))
  fedavg = registered.record_aggregations(fedavg_sim)
  fedavg_sim.run(StopCondition(max_versions=2))
  control, client_controls = controls[0]  # after round 1: what round 2's tasks received
  ours, theirs = scaffold[1].batch, fedavg[1].batch
  np.testing.assert_array_equal(ours.client_id, theirs.client_id)
  for index in np.flatnonzero(scaffold[1].real):
    client = int(ours.client_id[index])
    correction = _add(control, client_controls[client], -1.0)
    expected = _add(registered.rows(theirs.deltas, index), correction, -LEARNING_RATE)
    registered.assert_trees_close(registered.rows(ours.deltas, index), expected, atol=1e-6)


def test_with_one_local_step_options_one_and_two_agree():
  # Option II with K = 1: c_i - c - Delta y / eta = c_i - c + (g_i(x) + c - c_i) = g_i(x), the
  # gradient option I records on the same minibatch.
  _, _, first = _run(_config(local_steps=1, control_variate='I'), versions=3)
  _, _, second = _run(_config(local_steps=1, control_variate='II'), versions=3)
  for (c_one, clients_one), (c_two, clients_two) in zip(first, second):
    registered.assert_trees_close(c_one, c_two, atol=1e-5)
    for a, b in zip(clients_one, clients_two):
      registered.assert_trees_close(a, b, atol=1e-5)


def test_batch_norm_and_unknown_options_are_refused():
  config = _config(control_variate='III')
  with pytest.raises(ConfigError, match="control_variate='III'"):
    validate(config)
  config = _config()
  config.model.name = 'resnet20'
  config.model.kwargs = {'norm': 'batch'}
  with pytest.raises(ConfigError, match="norm='batch' is invalid with algorithm.name='scaffold'"):
    validate(config)
