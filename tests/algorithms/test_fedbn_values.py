"""FedBN (Li et al. 2021, Algorithm 1), as registered: the BatchNorm leaves it keeps local, its
first round equal to FedAvg's, every client's BatchNorm leaves replayed by hand, later rounds
starting from them, and models without BatchNorm refused."""

import jax
import numpy as np
import pytest

from fedsim_jax.algorithms.fedbn import local_leaves, local_part, with_local_part
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import build_model, validate
from fedsim_jax.runtime import StopCondition
from fedsim_jax.strategy import client_table
from tests.algorithms import registered
from tests.algorithms.registered import FED

TINY = {'channels': (2, 2, 3), 'hidden': (4, 4)}


def _config(algorithm='fedbn', **kwargs):
  config = registered.config(algorithm, **kwargs)
  config.model.kwargs.norm = 'batch'  # the MLP with BatchNorm after each hidden layer
  return config


def _names(params):
  return [
    '/'.join(str(getattr(e, 'key', e)) for e in path)
    for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]
  ]


def test_the_local_leaves_are_the_batch_norm_layers():
  config = registered.config('fedbn')
  config.model.name = 'fedbn_cnn'  # FedBN's CNN: BatchNorm after three convolutions, two FCs
  config.model.kwargs = dict(TINY)
  model = build_model(config, FED)
  params = model.init(jax.random.PRNGKey(0))
  names = _names(params)
  local = [name for name, is_local in zip(names, local_leaves(params)) if is_local]
  shared = [name for name, is_local in zip(names, local_leaves(params)) if not is_local]
  assert len(local) == 20  # 5 BatchNorm layers: scale, bias, running mean and variance
  assert all('BatchNorm' in name for name in local)
  assert sorted({name.split('/')[1] for name in shared}) == [
    'Conv_0',
    'Conv_1',
    'Conv_2',
    'Dense_0',
    'Dense_1',
    'Dense_2',
  ]
  # Replacing the local part touches only the local leaves.
  zeros = tuple(np.zeros_like(leaf) for leaf in local_part(params))
  merged = with_local_part(params, zeros)
  for is_local, got, old in zip(
    local_leaves(params), jax.tree_util.tree_leaves(merged), jax.tree_util.tree_leaves(params)
  ):
    np.testing.assert_array_equal(got, np.zeros_like(old) if is_local else old)


def test_the_first_round_is_fedavgs():
  fedbn = registered.trajectory(_config(), versions=2)
  fedavg = registered.trajectory(_config('fedavg'), versions=2)
  registered.assert_trees_close(fedbn[0], fedavg[0], atol=1e-6)
  assert registered.max_difference(fedbn[1], fedavg[1]) > 1e-4  # own BN from round 2 on


def test_each_clients_batch_norm_leaves_replayed_and_the_shared_ones_averaged():
  sim = registered.simulation(_config())
  recorded = registered.record_aggregations(sim)
  tables = []
  sim.on_version = lambda s: tables.append(
    [registered.to_numpy(client_table.read(s.scheduler.local_parts, c)) for c in range(6)]
  )
  sim.run(StopCondition(max_versions=3))
  initial = registered.to_numpy(local_part(recorded[0].params))
  own = [initial] * FED.num_clients
  for index, aggregation in enumerate(recorded):
    real = np.flatnonzero(aggregation.real)
    for i in real:
      client = int(aggregation.batch.client_id[i])
      after = jax.tree_util.tree_map(
        np.add, aggregation.params, registered.rows(aggregation.batch.deltas, i)
      )
      own[client] = local_part(after)
    for got, want in zip(tables[index], own):
      registered.assert_trees_close(got, want, atol=1e-6)
    # Every leaf of the global model: FedAvg's weighted mean of the deltas.
    weights = np.asarray(aggregation.batch.weights)[real]
    mean = registered.weighted_sum(
      [registered.rows(aggregation.batch.deltas, i) for i in real], weights / weights.sum()
    )
    after = (
      recorded[index + 1].params if index + 1 < len(recorded) else registered.to_numpy(sim.params)
    )
    registered.assert_trees_close(after, registered.plus(aggregation.params, 1.0, mean), atol=1e-6)
  # Evaluation's own models: the global model with the client's BN leaves.
  stacked = sim.scheduler.personal_models_of(sim.params, np.array([3]))
  mine = jax.tree_util.tree_map(lambda leaf: np.asarray(leaf[0]), stacked)
  registered.assert_trees_close(local_part(mine), own[3], atol=1e-6)


def test_models_without_batch_norm_are_refused():
  config = registered.config('fedbn')  # the MLP
  with pytest.raises(ConfigError, match="algorithm.name='fedbn' needs a model with BatchNorm"):
    validate(config)
