"""A model, a latency model and an availability model of the user's own, each one file that
registers it (tests/fixtures), run by the `fedsim-run` binary from a config that selects it with
`<section>.module` / `<section>.name` / `<section>.kwargs`, the library untouched."""

import json
import os
import subprocess
import sys

import pytest

from fedsim_jax.saved_run import load_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(os.path.dirname(sys.executable), 'fedsim-run')

# A FedAvg run on 5 clients of the digits data (base_config's latency and availability models
# have no settings given, so a config may select any other).
CONFIG = """
from fedsim_jax.config import base_config


def get_config():
  c = base_config()
  c.data.name = 'digits'
  c.data.num_clients = 5
  c.client.learning_rate = 0.1
  c.client.local_steps = 10
  c.algorithm.kwargs.cohort_size = 5
  c.run.num_rounds = 6
  c.run.eval_every = 3
  return c
"""


def _run(tmp_path, data_dir, *flags):
  config = tmp_path / 'user_config.py'
  config.write_text(CONFIG)
  workdir = tmp_path / 'run'
  result = subprocess.run(
    [
      BINARY,
      f'--config={config}',
      f'--config.data.data_dir={data_dir}',
      f'--workdir={workdir}',
      *flags,
    ],
    capture_output=True,
    text=True,
    timeout=300,
    cwd=ROOT,
    env={**os.environ, 'PYTHONPATH': ROOT},
  )
  return result, workdir


def _json(path):
  with open(path) as f:
    return json.load(f)


def _metrics(workdir):
  with open(workdir / 'metrics.jsonl') as f:
    return [json.loads(line) for line in f]


def test_binary_runs_a_model_registered_by_user_code(digits_data_dir, tmp_path):
  result, workdir = _run(
    tmp_path,
    digits_data_dir,
    '--config.model.module=tests.fixtures.two_layer_model',
    '--config.model.name=two_layer',
    '--config.model.kwargs.width=12',
  )
  assert result.returncode == 0, result.stderr[-2000:]
  expected = {'width': 12, 'activation': 'relu'}  # every setting, defaults included
  assert _json(workdir / 'config.json')['model'] == {
    'name': 'two_layer',
    'module': 'tests.fixtures.two_layer_model',
    'kwargs': expected,
  }
  description = _json(workdir / 'models' / 'model.json')
  assert description['name'] == 'two_layer' and description['kwargs'] == expected
  rows = _metrics(workdir)
  assert [r['version'] for r in rows] == [0, 3, 6]
  assert rows[-1]['test_accuracy'] > rows[0]['test_accuracy'] + 0.2
  saved = load_run(workdir)  # imports the run's model.module to rebuild its model
  assert saved.model.name == 'two_layer' and saved.model.module.width == 12
  assert saved.model.num_params(saved.params['final']) == 64 * 12 + 12 + 12 * 10 + 10


def test_binary_runs_latency_and_availability_models_registered_by_user_code(
  digits_data_dir, tmp_path
):
  result, workdir = _run(
    tmp_path,
    digits_data_dir,
    '--config.latency.module=tests.fixtures.fixed_latency',
    '--config.latency.name=fixed',
    '--config.latency.kwargs.step_time=0.5',
    '--config.latency.kwargs.communication_time=2.0',
    '--config.availability.module=tests.fixtures.fixed_latency',
    '--config.availability.name=online_from',
    '--config.availability.kwargs.start=100.0',
  )
  assert result.returncode == 0, result.stderr[-2000:]
  config = _json(workdir / 'config.json')
  assert config['latency'] == {
    'name': 'fixed',
    'module': 'tests.fixtures.fixed_latency',
    'kwargs': {'step_time': 0.5, 'communication_time': 2.0},
  }
  assert config['availability']['kwargs'] == {'start': 100.0}
  # No client is online before 100 s; then every round lasts 2 + 10 x 0.5 = 7 s.
  rows = _metrics(workdir)
  assert [(r['version'], r['virtual_time']) for r in rows] == [(0, 0.0), (3, 121.0), (6, 142.0)]


@pytest.mark.parametrize(
  'flag, expected',
  [
    ('--config.model.kwargs.width=0', 'model.kwargs.width=0 is invalid; allowed values: an '),
    (
      '--config.model.kwargs.depth=2',
      'model.kwargs.depth is not a setting of TwoLayerSettings',
    ),
    ('--config.model.name=three_layer', "model.name='three_layer' is not known"),
  ],
)
def test_a_user_model_setting_is_checked_by_its_settings(digits_data_dir, tmp_path, flag, expected):
  result, workdir = _run(
    tmp_path,
    digits_data_dir,
    '--config.model.module=tests.fixtures.two_layer_model',
    '--config.model.name=two_layer',
    flag,
  )
  assert result.returncode == 2
  lines = [line for line in result.stderr.splitlines() if not line.startswith(('I', 'W'))]
  assert len(lines) == 1 and 'Traceback' not in result.stderr, result.stderr[-2000:]
  assert expected in lines[0]
  assert not workdir.exists()
