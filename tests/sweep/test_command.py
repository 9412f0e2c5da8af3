"""`fedsim-sweep` end to end: a 2 x 2 x 2-seed sweep killed mid-way and resumed, its status,
its table, runs as a DataFrame, and bad specs refused with one line before anything is written."""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

from fedsim_jax.analysis import load_runs
from fedsim_jax.metrics.writers import read_metrics
from fedsim_jax.workdir import in_use

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIG = """
from fedsim_jax.config import base_config


def get_config():
  config = base_config()
  config.algorithm.name = 'fedbuff'
  config.data.name = 'digits'
  config.data.data_dir = {data_dir!r}
  config.data.num_clients = 6
  config.model.kwargs.hidden_sizes = (16,)
  config.client.learning_rate = 0.1
  config.client.batch_size = 8
  config.client.local_steps = 3
  config.algorithm.kwargs.concurrency = 3
  config.algorithm.kwargs.buffer_size = 2
  config.run.num_rounds = 6  # the sweep's --config.run.num_rounds=4 reaches every job
  config.run.eval_every = 2
  return config
"""
SWEEP = [
  '--config.run.num_rounds=4',
  # Settings that change the compiled programs: each point is a job of its own (points that
  # differ only in a learning rate would share one, tests/sweep/test_jobs.py).
  '--sweep.client.local_steps=2,3',
  '--sweep.algorithm.kwargs.buffer_size=1,2',
  '--seeds=0,1',
]
POINTS = [
  'local_steps=2,buffer_size=1',
  'local_steps=2,buffer_size=2',
  'local_steps=3,buffer_size=1',
  'local_steps=3,buffer_size=2',
]


@pytest.fixture
def config_file(tmp_path, digits_data_dir):
  path = tmp_path / 'tiny.py'
  path.write_text(CONFIG.format(data_dir=str(digits_data_dir)))
  return path


def _command(config_file, workdir, *args):
  return [
    sys.executable,
    '-m',
    'fedsim_jax.sweep.command',
    f'--config={config_file}',
    f'--workdir={workdir}',
    *args,
  ]


def _env():
  return {**os.environ, 'PYTHONPATH': f'{REPO}{os.pathsep}{os.environ.get("PYTHONPATH", "")}'}


def _run(argv, timeout=240):
  return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env())


def _summary(run_dir):
  path = run_dir / 'summary.json'
  return json.loads(path.read_text()) if path.exists() else {}


def _wait_for(condition, timeout, what):
  deadline = time.monotonic() + timeout
  while not condition():
    if time.monotonic() > deadline:
      pytest.fail(f'timed out waiting for {what}')
    time.sleep(0.05)


@pytest.mark.timeout(600)
def test_a_sweep_killed_mid_way_resumes_to_every_point_completed_once(tmp_path, config_file):
  root = tmp_path / 'sweep'
  argv = _command(config_file, root, *SWEEP, '--processes=2')
  process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
  first = [root / POINTS[0] / f'seed{s}' for s in (0, 1)]
  third = [root / POINTS[2] / f'seed{s}' for s in (0, 1)]
  try:
    # Kill the sweep (SIGKILL: no handler runs) once its first job has ended and the third,
    # which starts when a job slot frees up, has evaluated its first version.
    _wait_for(
      lambda: (
        all(_summary(d).get('status') == 'completed' for d in first)
        and any((d / 'metrics.jsonl').exists() for d in third)
      ),
      300,
      'the first job to end and the third to start',
    )
    process.kill()
  finally:
    process.wait(timeout=60)
  # Its jobs are sent SIGTERM as it dies, checkpoint and exit.
  _wait_for(
    lambda: not any(in_use(root / p / f'seed{s}') for p in POINTS for s in (0, 1)),
    120,
    'the jobs to stop with their sweep',
  )
  finished_before = {d: (d / 'summary.json').stat().st_mtime_ns for d in first}

  status = _run(_command(config_file, root, *SWEEP, '--status'))
  assert status.returncode == 0, status.stderr
  assert f'| {POINTS[0]}/seed0 | done |' in status.stdout
  # The third point was killed mid-way, after its first evaluation.
  assert any(f'| {POINTS[2]}/seed{s} | resumable' in status.stdout for s in (0, 1)), status.stdout
  assert '0 running' in status.stdout

  resumed = _run(_command(config_file, root, *SWEEP, '--processes=2'))
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  ended, to_run = map(int, re.search(r'8 runs: (\d+) ended, (\d+) to run', resumed.stdout).groups())
  assert ended >= 2 and to_run >= 1 and ended + to_run == 8
  for point in POINTS:
    for seed in (0, 1):
      run_dir = root / point / f'seed{seed}'
      assert _summary(run_dir)['status'] == 'completed', run_dir
      assert [row['version'] for row in read_metrics(run_dir / 'metrics.jsonl')] == [0, 2, 4]
    assert json.loads((root / point / 'point.json').read_text()) == {
      'client.local_steps': int(point.split(',')[0].split('=')[1]),
      'algorithm.kwargs.buffer_size': int(point.split('=')[-1]),
    }
  # The runs that had finished were kept, not run again.
  assert {d: (d / 'summary.json').stat().st_mtime_ns for d in first} == finished_before

  # The table: one row per point, and the best one.
  table = (root / 'table.md').read_text()
  assert table in resumed.stdout
  assert [line.split(' | ')[0].lstrip('| ') for line in table.splitlines()[2:6]] == POINTS
  finals = {
    point: [_summary(root / point / f'seed{s}')['final_accuracy'] for s in (0, 1)]
    for point in POINTS
  }
  best = max(POINTS, key=lambda p: sum(finals[p]) / 2)
  assert f'best by final accuracy: {best} ({sum(finals[best]) / 2:.4f}' in table

  # Runs as a DataFrame: one row per metrics row, with settings and summary.
  frame = load_runs(root)
  assert len(frame) == 8 * 3
  run = root / POINTS[3] / 'seed1'
  rows = frame[frame['run'] == str(run)]
  metrics = read_metrics(run / 'metrics.jsonl')
  for column in ('version', 'virtual_time', 'client_updates', 'test_accuracy', 'test_loss'):
    assert rows[column].tolist() == [row[column] for row in metrics], column
  assert set(rows['config.client.local_steps']) == {3}
  assert set(rows['config.algorithm.kwargs.buffer_size']) == {2}
  assert set(rows['point']) == {POINTS[3]} and set(rows['seed']) == {1}
  assert set(rows['summary.final_accuracy']) == {_summary(run)['final_accuracy']}
  last = load_runs(str(root / '*' / 'seed*'), last_only=True)
  assert len(last) == 8 and set(last['version']) == {4}

  # A rerun keeps everything; one with other settings is refused before anything is written.
  again = _run(_command(config_file, root, *SWEEP))
  assert again.returncode == 0 and '8 ended, 0 to run' in again.stdout
  changed = _run(_command(config_file, root, *SWEEP, '--config.run.num_rounds=6'))
  assert changed.returncode == 2
  assert changed.stderr.count('\n') == 1
  assert 'holds a finished run made with run.num_rounds=4' in changed.stderr


@pytest.mark.parametrize(
  'args, message',
  [
    (['--sweep.client.learning_rte=0.1,0.2'], 'learning_rte'),
    (['--sweep.client.learning_rate=0.1,-1'], 'client.learning_rate'),
    (['--sweep.client.learning_rate=log_uniform(0.001,0.1)'], 'needs --search=random'),
    (['--sweep.client.learning_rate'], 'with "="'),
    (
      ['--sweep.client.learning_rate=0.1', '--config.client.learning_rate=0.2'],
      'both set it',
    ),
    (['--sweep.client.learning_rate=0.1', '--sweep_file=/nonexistent.toml'], 'cannot be read'),
    (['--sweep.client.learning_rate=0.1', '--seeds=0,-1'], 'seeds'),
    (['--sweep.client.learning_rate=0.1', '--target=nan'], '--target=nan'),
    (['--sweep.client.learning_rate=0.1', '--processes=0'], 'processes'),
    (['--sweep.client.learning_rate=0.1', '--search=random', '--num_points=-1'], 'num_points'),
  ],
)
def test_bad_sweep_specs_are_one_line_exit_2_and_write_nothing(
  tmp_path, config_file, args, message
):
  root = tmp_path / 'sweep'
  result = _run(_command(config_file, root, *args), timeout=120)
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.startswith('error: ') and result.stderr.count('\n') == 1, result.stderr
  assert message in result.stderr
  assert 'allowed' in result.stderr
  assert not root.exists()
