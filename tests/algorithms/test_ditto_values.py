"""Ditto (Li et al. 2021, Algorithm 1), as registered: the global model is FedAvg's for any
lambda, a first personal step is the client's own FedAvg step, and with lambda eta = 1 every
personalized model is one small step from the model the client downloaded."""

import jax
import numpy as np
import pytest

from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import validate
from fedsim_jax.runtime import StopCondition
from fedsim_jax.strategy import client_table
from tests.algorithms import registered


def _config(**kwargs):
  config = registered.config('ditto', **kwargs)
  return config


@pytest.mark.parametrize('strength', [0.0, 1.0])
def test_the_global_model_is_fedavgs_for_any_lambda(strength):
  ditto = registered.trajectory(_config(strength=strength), versions=3)
  fedavg = registered.trajectory(registered.config('fedavg'), versions=3)
  for ours, theirs in zip(ditto, fedavg):
    registered.assert_trees_equal(ours, theirs)


def test_a_first_personal_step_is_the_clients_own_fedavg_step():
  # v_k^0 = w^0; with one local step, v_k = w^0 - eta (grad F_k(w^0) + lambda * 0): the same
  # step on the same minibatch as the client's global update.
  config = _config(strength=5.0)
  config.client.local_steps = 1
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  sim.run(StopCondition(max_versions=1))
  (aggregation,) = recorded
  table = sim.scheduler.personal_models
  for index in np.flatnonzero(aggregation.real):
    client = int(aggregation.batch.client_id[index])
    expected = registered.plus(
      aggregation.params, 1.0, registered.rows(aggregation.batch.deltas, index)
    )
    registered.assert_trees_close(
      registered.to_numpy(client_table.read(table, client)), expected, atol=1e-6
    )
  untouched = sorted(
    set(range(6)) - {int(c) for c in aggregation.batch.client_id[aggregation.real]}
  )
  for client in untouched:  # never trained: still the initial model
    registered.assert_trees_equal(
      registered.to_numpy(client_table.read(table, client)), aggregation.params
    )


def test_lambda_eta_one_keeps_each_personal_model_a_small_step_from_the_download():
  # v <- v - eta g - lambda eta (v - w^t) = w^t - eta g(v) when lambda eta = 1: with eta 1e-4
  # the personalized models are the global model the client downloaded, within 1e-4 |g|.
  config = _config(strength=1e4, personal_learning_rate=1e-4)
  sim = registered.simulation(config)
  recorded = registered.record_aggregations(sim)
  sim.run(StopCondition(max_versions=2))
  last = recorded[-1]
  for index in np.flatnonzero(last.real):
    client = int(last.batch.client_id[index])
    personal = registered.to_numpy(client_table.read(sim.scheduler.personal_models, client))
    assert registered.max_difference(personal, last.params) < 1e-3
  stacked = sim.scheduler.personal_models_of(sim.params, np.array([2, 0]))
  row = jax.tree_util.tree_map(lambda column: np.asarray(column[1]), stacked)
  registered.assert_trees_equal(
    row, registered.to_numpy(client_table.read(sim.scheduler.personal_models, 0))
  )


def test_batch_norm_is_refused():
  config = _config()
  config.model.name = 'resnet20'
  config.model.kwargs = {'norm': 'batch'}
  with pytest.raises(ConfigError, match="norm='batch' is invalid with algorithm.name='ditto'"):
    validate(config)
