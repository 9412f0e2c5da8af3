"""How `fedsim-sweep` groups a sweep's runs into jobs (processes), planned without running."""

import pytest

from fedsim_jax.sweep.spec import SweepSpec
from fedsim_jax.sweep.sweep import Sweep
from tests.helpers import make_tiny_config


def _jobs(tmp_path, parameters, seeds=(0, 1)):
  sweep = Sweep(
    SweepSpec(parameters, seeds=seeds),
    config=make_tiny_config('fedbuff', tmp_path / 'data'),
    config_args=[],
    root=str(tmp_path / 'sweep'),
  )
  return sweep.jobs()


@pytest.mark.parametrize(
  'parameters',
  [
    {'client.learning_rate': (0.05, 0.1)},
    {'client.learning_rate': (0.05, 0.1), 'algorithm.kwargs.server_learning_rate': (0.5, 1.0)},
    {'client.momentum': (0.0, 0.9), 'algorithm.kwargs.staleness_a': (0.5, 1.0)},
  ],
)
def test_points_that_differ_in_hyperparameters_share_one_job(tmp_path, parameters):
  (job,) = _jobs(tmp_path, parameters)
  points = 2 ** len(parameters)
  assert len(job.points) == points and len(job.runs) == points * 2
  assert job.name == f'{job.points[0]}+{points - 1}'
  assert sorted((run.point, run.seed) for run in job.runs) == sorted(
    (point, seed) for point in job.points for seed in (0, 1)
  )
  assert not (tmp_path / 'sweep').exists()  # planning writes nothing


def test_points_that_differ_in_other_settings_get_a_job_each(tmp_path):
  jobs = _jobs(
    tmp_path,
    {'client.learning_rate': (0.05, 0.1), 'client.batch_size': (4, 8)},
  )
  # One job per batch size, holding both learning rates and both seeds.
  assert [len(job.runs) for job in jobs] == [4, 4]
  assert [{dict(run.settings)['client.batch_size'] for run in job.runs} for job in jobs] == [
    {4},
    {8},
  ]
  assert all(
    {dict(run.settings)['client.learning_rate'] for run in job.runs} == {0.05, 0.1} for job in jobs
  )
