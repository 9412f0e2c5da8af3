"""The sweep's jobs: how runs are grouped into jobs (processes), planned without running, and
the process pool's limits and signals (with a stand-in worker, so that no simulation runs)."""

import os
import signal
import sys
import threading
import time

import pytest

from fedsim_jax.sweep.jobs import Job, JobPool, PlannedRun, lockstep_jobs
from fedsim_jax.sweep.spec import SweepSpec
from fedsim_jax.sweep.sweep import Sweep
from tests.helpers import make_tiny_config

# Writes <job file>.started, then waits for a signal; on SIGINT writes .stopped and exits 130.
STAND_IN = """
import pathlib, signal, sys, time
job = pathlib.Path(sys.argv[1])
def stop(signum, frame):
  job.with_suffix('.stopped').write_text(str(signum))
  sys.exit(128 + signum)
signal.signal(signal.SIGINT, stop)
job.with_suffix('.started').write_text('')
for _ in range(600):
  time.sleep(0.1)
sys.exit(1)
"""


def _run(point, seed):
  return PlannedRun(point, (('client.learning_rate', 0.1),), seed, f'/tmp/{point}/seed{seed}')


def test_runs_with_equal_keys_share_a_job_in_the_order_of_their_first_run():
  runs = [_run('a', 0), _run('b', 0), _run('a', 1), _run('c', 0), _run('b', 1)]
  jobs = lockstep_jobs(runs, ['ka', 'kb', 'ka', 'ka', 'kb'])
  assert [job.name for job in jobs] == ['a+1', 'b']
  assert [[(r.point, r.seed) for r in job.runs] for job in jobs] == [
    [('a', 0), ('a', 1), ('c', 0)],
    [('b', 0), ('b', 1)],
  ]
  assert jobs[0].describe() == '2 points (a, c), seeds 0,1'
  assert jobs[1].describe() == 'b, seeds 0,1'


def test_a_signal_stops_the_running_jobs_once_and_starts_no_other(tmp_path):
  files = []
  for name in ('one', 'two', 'three'):
    files.append((Job(name, [_run(name, 0)]), str(tmp_path / f'{name}.json')))
  pool = JobPool(str(tmp_path), processes=2, worker=[sys.executable, '-c', STAND_IN])
  started = []

  def interrupt_when_two_run():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
      if all((tmp_path / f'{n}.started').exists() for n in ('one', 'two')):
        os.kill(os.getpid(), signal.SIGINT)
        return
      time.sleep(0.02)

  threading.Thread(target=interrupt_when_two_run, daemon=True).start()
  outcomes = pool.run(files, lambda job: started.append(job.name), lambda outcome: None)
  assert pool.interrupted == signal.SIGINT
  assert started == ['one', 'two']  # at most two at once, and none after the signal
  assert sorted((o.job.name, o.returncode) for o in outcomes) == [('one', 130), ('two', 130)]
  for name in ('one', 'two'):
    assert (tmp_path / f'{name}.stopped').read_text() == str(int(signal.SIGINT))
    assert 'one' in (tmp_path / 'logs' / 'one.log').read_text()  # the job's header line
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored


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
