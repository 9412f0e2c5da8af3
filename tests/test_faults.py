"""Each class of bad input or fault ends in one line and a documented exit code, with nothing in
the workdir lost: wrong types, NaN/inf, config files that do not load, unusable workdirs,
divergence and runs that cannot make progress."""

import json
import math
import os
import subprocess
import sys

import pytest

from fedsim_jax.config import ConfigError, validate
from fedsim_jax.experiment import run_experiment
from fedsim_jax.runtime import SimulationStalled
from tests.helpers import make_tiny_config

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BINARY = os.path.join(_REPO, 'experiments', 'run.py')
_DEMO = os.path.join(_REPO, 'configs', 'fedavg_fashion_mnist.py')


def _run(*flags, cwd=_REPO, timeout=180):
  return subprocess.run(
    [sys.executable, _BINARY, *flags], capture_output=True, text=True, cwd=cwd, timeout=timeout
  )


def _one_error_line(result):
  lines = [line for line in result.stderr.splitlines() if not line.startswith(('I', 'W'))]
  assert 'Traceback' not in result.stderr
  assert len(lines) == 1, result.stderr[-2000:]
  assert lines[0].startswith('error: ')
  return lines[0]


@pytest.mark.parametrize(
  'flag, message',
  [
    ('--config.run.num_rounds=abc', 'run.num_rounds=abc is invalid; allowed values: an integer'),
    ('--config.client.batch_size=1.0', 'client.batch_size=1.0 is invalid; allowed values: an'),
    ('--config.client.learning_rate=x', 'client.learning_rate=x is invalid; allowed values: a nu'),
    ('--config.data.lazy=maybe', 'data.lazy=maybe is invalid; allowed values: true or false'),
    ('--config.client.learning_rate=nan', 'client.learning_rate=nan is invalid'),
    ('--config.latency.kwargs.mean=inf', 'latency.kwargs.mean=inf is invalid'),
    ('--config.model.kwargs.hidden_sizes=(0,)', 'model.kwargs.hidden_sizes=(0,) is invalid'),
    ('--config.seed=99999999999999999999', 'seed=99999999999999999999 is invalid'),
    ('--config.executor.max_batch_tasks=-1', 'executor.max_batch_tasks=-1 is invalid'),
    ('--config.client.learning_rat=0.1', "did you mean 'learning_rate'"),
    ('--workdir=', '--workdir is empty'),
  ],
)
def test_bad_overrides_are_one_line_and_exit_2(tmp_path, flag, message):
  workdir = tmp_path / 'run'
  flags = [f'--config={_DEMO}', '--config.data.data_dir=/nonexistent']
  if not flag.startswith('--workdir'):
    flags.append(f'--workdir={workdir}')
  result = _run(*flags, flag)
  assert result.returncode == 2
  assert message in _one_error_line(result)
  assert not workdir.exists()


@pytest.mark.parametrize(
  'source, reason',
  [
    (None, 'no such file'),
    ('x = (\n', 'syntax error at line 1:'),
    ('X = 1\n', 'the module defines no get_config()'),
  ],
)
def test_config_files_that_do_not_load_are_one_line_and_exit_2(tmp_path, source, reason):
  path = tmp_path / 'config.py'
  if source is not None:
    path.write_text(source)
  result = _run(f'--config={path}', f'--workdir={tmp_path / "run"}')
  assert result.returncode == 2
  assert f'--config={path} cannot be loaded ({reason}' in _one_error_line(result)


@pytest.mark.parametrize('name', ['fedsim_jax.configs.no_such_config', 'no_such_package.config'])
def test_config_modules_that_do_not_exist_are_one_line_and_exit_2(tmp_path, name):
  result = _run(f'--config={name}', f'--workdir={tmp_path / "run"}')
  assert result.returncode == 2
  line = _one_error_line(result)
  assert f'--config={name} cannot be loaded (no such file or module)' in line
  assert 'module name (fedsim_jax.configs.<name>)' in line
  assert not (tmp_path / 'run').exists()


def test_none_can_be_set_from_the_command_line():
  from absl import flags as absl_flags
  from ml_collections import config_flags

  from fedsim_jax import cli

  values = absl_flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, 'config', flag_values=values)
  original = absl_flags.FLAGS
  absl_flags.FLAGS = values
  try:
    cli.parse_flags(['prog', f'--config={_DEMO}', '--config.client.local_steps=None'])
    assert values['config'].value.client.local_steps is None
  finally:
    absl_flags.FLAGS = original


def test_class_metrics_the_dataset_cannot_have_are_refused_before_anything_is_written(
  digits_data_dir, tmp_path
):
  config = make_tiny_config('fedavg', digits_data_dir, **{'run.eval_top_k': (20,)})
  with pytest.raises(ConfigError, match=r'^run.eval_top_k=\(20,\) is invalid; allowed'):
    run_experiment(config, tmp_path / 'run')
  assert not (tmp_path / 'run').exists()


def test_a_diverging_run_stops_with_one_line_and_exit_3(digits_data_dir, tmp_path):
  config_path = tmp_path / 'config.py'
  config_path.write_text(
    'from tests.helpers import make_tiny_config\n'
    'def get_config():\n'
    f'  return make_tiny_config("fedavg", {str(digits_data_dir)!r}, '
    "**{'client.learning_rate': 1e30, 'run.num_rounds': 6, 'run.eval_every': 1})\n"
  )
  result = _run(f'--config={config_path}', f'--workdir={tmp_path / "run"}')
  assert result.returncode == 3
  line = _one_error_line(result)
  assert 'diverged at version ' in line and 'algorithm fedavg' in line
  assert 'client.learning_rate=1e+30' in line and "run.on_divergence='continue'" in line
  summary = json.load(open(tmp_path / 'run' / 'summary.json'))
  assert summary['status'] == 'diverged' and summary['message'] in line
  with open(tmp_path / 'run' / 'metrics.jsonl') as f:
    assert 'NaN' not in f.read()


def test_on_divergence_continue_writes_nulls_not_nan(digits_data_dir, tmp_path):
  config = make_tiny_config(
    'fedavg',
    digits_data_dir,
    **{'client.learning_rate': 1e30, 'run.on_divergence': 'continue', 'run.eval_every': 1},
  )
  summary = run_experiment(config, tmp_path)
  assert summary['status'] == 'completed'
  with open(tmp_path / 'metrics.jsonl') as f:
    text = f.read()
  assert 'NaN' not in text and 'Infinity' not in text
  rows = [json.loads(line) for line in text.splitlines()]
  assert rows[0]['test_loss'] is not None and math.isfinite(rows[0]['test_loss'])
  assert rows[-1]['test_loss'] is None


@pytest.mark.parametrize(
  'overrides',
  [
    {'algorithm.kwargs.deadline': 1e-9},  # every round closes before any update arrives
    {'algorithm.kwargs.time_limit': 1e-9, 'client.local_steps': None},  # zero-step rounds
  ],
)
def test_a_run_that_cannot_progress_stops_with_a_message(digits_data_dir, tmp_path, overrides):
  from fedsim_jax.experiment import PreparedRun

  config = make_tiny_config('fedavg', digits_data_dir, **overrides)
  prepared = PreparedRun(config, tmp_path)
  prepared.simulation.stall_events = 2000  # the default, 100000, takes seconds
  with pytest.raises(SimulationStalled, match='no server version in 2000 events'):
    prepared.simulation.run(prepared.stop)
  prepared.writer.close()
  prepared._lock.release()


def test_a_stalled_binary_run_exits_2_with_one_line(digits_data_dir, tmp_path):
  config_path = tmp_path / 'config.py'
  config_path.write_text(
    'from tests.helpers import make_tiny_config\n'
    'def get_config():\n'
    f'  return make_tiny_config("fedavg", {str(digits_data_dir)!r}, '
    "**{'algorithm.kwargs.time_limit': 1e-9, 'client.local_steps': None})\n"
  )
  result = _run(f'--config={config_path}', f'--workdir={tmp_path / "run"}')
  assert result.returncode == 2
  assert 'no server version in 100000 events' in _one_error_line(result)
  assert json.load(open(tmp_path / 'run' / 'summary.json'))['status'] == 'failed'


def test_nan_in_a_latency_model_setting_is_refused_by_validate():
  config = make_tiny_config('fedavg')
  config.latency.kwargs.spread = float('nan')
  with pytest.raises(ConfigError, match=r'latency.kwargs.spread=nan is invalid'):
    validate(config)
