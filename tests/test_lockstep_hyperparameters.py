"""Lockstep sweeps over numeric hyperparameters (client and server learning rates): the runs
give exactly the separate runs' results, and only those settings may differ."""

import jax
import numpy as np
import pytest

from fedsim_jax.config import ConfigError, set_by_path
from fedsim_jax.experiment import run_experiment, run_experiments_lockstep
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


def test_vmap_points_run_beside_each_other_and_their_seeds_share_batches(digits_data_dir, tmp_path):
  # The vmap backend: a batch runs one compiled program, so each point (its client update)
  # has batches of its own, run beside the other points'. A point alone computes exactly its
  # separate run; two seeds of a point share batches, where the last bits may differ as in any
  # seed sweep (fedsim_jax.runtime.lockstep).
  points = ((0.1, 1.0, 0), (0.1, 1.0, 1), (0.03, 0.5, 0))
  summaries = _run_both(digits_data_dir, tmp_path, points, 'vmap')
  lockstep = summaries[0]['host']['lockstep']
  alone = sum(run_outputs(tmp_path / f'alone{i}')[1]['executor_batches'] for i in range(3))
  assert lockstep['execution'] == 'shared_batches' and lockstep['batch_groups'] == 2
  assert lockstep['shared_batches'] < alone
  assert run_outputs(tmp_path / 'lockstep2') == run_outputs(tmp_path / 'alone2')
  for a, b in zip(_final_params(tmp_path / 'lockstep2'), _final_params(tmp_path / 'alone2')):
    np.testing.assert_array_equal(a, b)
  for i in (0, 1):
    (lock_rows, lock_summary), (alone_rows, alone_summary) = (
      run_outputs(tmp_path / f'lockstep{i}'),
      run_outputs(tmp_path / f'alone{i}'),
    )
    assert [r['virtual_time'] for r in lock_rows] == [r['virtual_time'] for r in alone_rows]
    for a, b in zip(lock_rows, alone_rows):
      assert a['test_loss'] == pytest.approx(b['test_loss'], rel=1e-5)
    assert lock_summary['tasks'] == alone_summary['tasks']
  assert run_outputs(tmp_path / 'alone0')[0][-1] != run_outputs(tmp_path / 'alone2')[0][-1]


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
