"""Lockstep sweeps over numeric hyperparameters (client and server learning rates, client
momentum and weight decay): the runs give exactly the separate runs' results, the vmap backend
trains points that share a client program in one, and only those settings may differ."""

import jax
import ml_collections
import numpy as np
import pytest

from fedsim_jax.config import ConfigError, set_by_path
from fedsim_jax.experiment import run_experiment, run_experiments_lockstep
from fedsim_jax.run_spec import RunSpec
from fedsim_jax.saved_run import load_run
from tests.helpers import make_tiny_config, run_outputs

# (client.learning_rate, algorithm.kwargs.server_learning_rate, seed) of each run.
_POINTS = ((0.1, 1.0, 0), (0.03, 1.0, 0), (0.1, 0.5, 0))


def _config(data_dir, client_lr, server_lr, seed, backend):
  return make_tiny_config(
    'fedbuff',
    data_dir,
    clients=5,
    **{
      'seed': seed,
      'client.learning_rate': client_lr,
      'algorithm.kwargs.server_learning_rate': server_lr,
      'partition.kwargs.min_client_size': 5,
      'latency.kwargs.distribution': 'exponential',
      'latency.kwargs.jitter': 0.1,
      'executor.backend': backend,
      'run.num_rounds': 6,
    },
  )


def _final_params(workdir):
  return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(load_run(workdir).params['final'])]


def _run_both(data_dir, root, points, backend):
  """Each point run alone, then all of them in one lockstep call; returns the lockstep
  summaries."""
  for i, point in enumerate(points):
    run_experiment(_config(data_dir, *point, backend), root / f'alone{i}')
  return run_experiments_lockstep(
    [_config(data_dir, *point, backend) for point in points],
    [root / f'lockstep{i}' for i in range(len(points))],
  )


def test_learning_rate_points_in_lockstep_equal_separate_runs(digits_data_dir, tmp_path):
  # The loop backend: every run keeps its own executor and programs, bit for bit.
  summaries = _run_both(digits_data_dir, tmp_path, _POINTS, 'loop')
  assert summaries[0]['host']['lockstep']['simulations'] == 3
  for i in range(len(_POINTS)):
    assert run_outputs(tmp_path / f'lockstep{i}') == run_outputs(tmp_path / f'alone{i}')
    for a, b in zip(
      _final_params(tmp_path / f'lockstep{i}'), _final_params(tmp_path / f'alone{i}')
    ):
      np.testing.assert_array_equal(a, b)
  # The points are different runs, each with its own learning rates: points 0 and 1 differ only
  # in the client's, so equal results would mean that a program compiled for one (the process's
  # compilation cache, fedsim_jax.compilation_cache) served the other.
  finals = [run_outputs(tmp_path / f'alone{i}')[0][-1]['test_loss'] for i in range(len(_POINTS))]
  assert len(set(finals)) == len(_POINTS)


def _assert_equal_runs(lockstep, alone):
  assert run_outputs(lockstep) == run_outputs(alone)
  for a, b in zip(_final_params(lockstep), _final_params(alone)):
    np.testing.assert_array_equal(a, b)


def test_vmap_client_learning_rates_and_seeds_train_in_one_program(digits_data_dir, tmp_path):
  # The vmap backend: 2 client learning rates x 2 seeds, and server learning rates, train as ONE
  # vmapped program over the union of the runs' federations (each task with its run's key
  # stream and its run's client learning rate, an argument of the program). Measured
  # bit-identical to each config run alone (metrics and final parameters): the learning rate
  # enters the same float32 multiply whether a constant or an argument, and batches this small
  # take the same XLA:CPU paths; seed sweeps allow the last bits to differ in larger batches
  # (fedsim_jax.runtime.lockstep), which these are not.
  points = [(lr, 1.0, seed) for lr in (0.1, 0.03) for seed in (0, 1)] + [(0.1, 0.5, 0)]
  summaries = _run_both(digits_data_dir, tmp_path, points, 'vmap')
  lockstep = summaries[0]['host']['lockstep']
  assert lockstep['execution'] == 'shared_batches'
  assert lockstep['batch_groups'] == 1
  alone = sum(
    run_outputs(tmp_path / f'alone{i}')[1]['executor_batches'] for i in range(len(points))
  )
  assert lockstep['shared_batches'] < alone and lockstep['mean_shared_batch_size'] > 5
  for i in range(len(points)):
    _assert_equal_runs(tmp_path / f'lockstep{i}', tmp_path / f'alone{i}')
  # Different learning rates are different runs: the shared program used each run's own.
  finals = {run_outputs(tmp_path / f'alone{i}')[0][-1]['test_loss'] for i in range(len(points))}
  assert len(finals) == len(points)


def test_vmap_server_learning_rates_share_one_client_program(digits_data_dir, tmp_path):
  # The server learning rate only reaches each run's own aggregator: one client program, the
  # same client update for both runs; bit-identical to the runs alone.
  points = ((0.1, 1.0, 0), (0.1, 0.5, 0))
  summaries = _run_both(digits_data_dir, tmp_path, points, 'vmap')
  assert summaries[0]['host']['lockstep']['batch_groups'] == 1
  for i in range(len(points)):
    _assert_equal_runs(tmp_path / f'lockstep{i}', tmp_path / f'alone{i}')
  assert run_outputs(tmp_path / 'alone0') != run_outputs(tmp_path / 'alone1')


def _client_config(data_dir, backend='vmap', **client):
  overrides = {
    'client.optimizer': 'momentum',
    'partition.kwargs.min_client_size': 5,
    'executor.backend': backend,
    'run.num_rounds': 4,
  }
  overrides.update({f'client.{name}': value for name, value in client.items()})
  return make_tiny_config('fedavg', data_dir, clients=4, **overrides)


@pytest.mark.parametrize(
  ('values', 'groups'),
  [
    # The momentum optimizer keeps a trace for momentum 0 too: one program, momentum an argument.
    ((dict(momentum=0.0), dict(momentum=0.9)), 1),
    # A weight decay adds an optimizer chain element: another program.
    ((dict(weight_decay=0.0), dict(weight_decay=1e-3)), 2),
    ((dict(weight_decay=1e-3), dict(weight_decay=1e-2)), 1),
  ],
)
def test_vmap_client_optimizer_points_group_by_optimizer_structure(
  digits_data_dir, tmp_path, values, groups
):
  configs = [_client_config(digits_data_dir, **value) for value in values]
  for i, config in enumerate(configs):
    run_experiment(config, tmp_path / f'alone{i}')
  summaries = run_experiments_lockstep(
    [_client_config(digits_data_dir, **value) for value in values],
    [tmp_path / f'lockstep{i}' for i in range(len(values))],
  )
  lockstep = summaries[0]['host']['lockstep']
  assert lockstep['batch_groups'] == groups
  for i in range(len(values)):
    _assert_equal_runs(tmp_path / f'lockstep{i}', tmp_path / f'alone{i}')
  assert run_outputs(tmp_path / 'alone0') != run_outputs(tmp_path / 'alone1')


def test_vmap_points_differing_in_a_client_term_train_in_their_own_programs(
  digits_data_dir, tmp_path
):
  # FedProx's proximal strength is a constant of the client program (whether the term is
  # active is part of its structure): each strength has batches of its own; seeds share them.
  def config(strength, seed):
    return make_tiny_config(
      'fedprox',
      digits_data_dir,
      clients=4,
      **{
        'seed': seed,
        'algorithm.kwargs.proximal_strength': strength,
        'algorithm.kwargs.server_learning_rate': 1.0 + seed,
        'partition.kwargs.min_client_size': 5,
        'executor.backend': 'vmap',
        'run.num_rounds': 2,
      },
    )

  points = ((0.0, 0), (0.0, 1), (0.1, 0))
  summaries = run_experiments_lockstep(
    [config(*point) for point in points], [tmp_path / f'lockstep{i}' for i in range(3)]
  )
  assert summaries[0]['host']['lockstep']['batch_groups'] == 2


@pytest.mark.parametrize(
  ('algorithm', 'path', 'values', 'shared'),
  [
    ('fedasync', 'algorithm.kwargs.alpha', (0.5, 0.9), True),  # FedAsync's mixing: server side
    ('feddyn', 'algorithm.kwargs.alpha', (0.01, 0.1), False),  # FedDyn's client regulariser
    ('fedavg', 'client.learning_rate', (0.1, 0.03), True),
    ('ditto', 'client.learning_rate', (0.1, 0.03), False),  # its personal step's rate
    ('fedprox', 'algorithm.kwargs.proximal_strength', (0.01, 0.1), False),
    ('fedavg', 'algorithm.kwargs.server_momentum', (0.0, 0.9), True),
  ],
)
def test_client_program_key_ignores_only_what_the_client_program_takes_as_arguments(
  algorithm, path, values, shared
):
  keys = []
  for value in values:
    config = make_tiny_config(algorithm, **{path: value})
    keys.append(RunSpec.from_config(config).client_program_key())
  assert (keys[0] == keys[1]) is shared


def test_client_program_key_of_a_user_algorithm_keeps_every_hyperparameter():
  # Its factory may read a client setting into its client update: no sharing assumed.
  keys = []
  for rate in (0.1, 0.03):
    config = make_tiny_config(**{'client.learning_rate': rate})
    config.algorithm.name = 'damped_fedavg'
    config.algorithm.module = 'tests.fixtures.damped_fedavg'
    config.algorithm.kwargs = ml_collections.ConfigDict({'cohort_size': 3})
    keys.append(RunSpec.from_config(config).client_program_key())
  assert keys[0] != keys[1]


@pytest.mark.parametrize(
  ('path', 'value'),
  [('model.kwargs.hidden_sizes', (8,)), ('algorithm.kwargs.concurrency', 2)],
)
def test_lockstep_refuses_configs_differing_in_more_than_hyperparameters(
  digits_data_dir, tmp_path, path, value
):
  other = _config(digits_data_dir, 0.03, 0.5, 1, 'loop')
  set_by_path(other, path, value)
  with pytest.raises(ConfigError, match='differ only in seed') as error:
    run_experiments_lockstep(
      [_config(digits_data_dir, 0.1, 1.0, 0, 'loop'), other], [tmp_path / 'a', tmp_path / 'b']
    )
  message = str(error.value)
  assert '\n' not in message and message.endswith(f'config 1 differs from config 0 in {path}')
  assert 'client.learning_rate' in message  # the settings that may differ
  assert not (tmp_path / 'a').exists() and not (tmp_path / 'b').exists()
