"""End to end: run directories, determinism, shipped configs, and the binary's errors."""

import json
import os
import subprocess
import sys
import time

import pytest

from fedsim_jax import algorithms, experiment
from fedsim_jax import build as build_lib
from fedsim_jax.config import ConfigError, base_config, validate
from fedsim_jax.data.errors import DatasetNotFoundError
from fedsim_jax.data.synthetic import toy_federation as make_toy_federation
from fedsim_jax.experiment import run_experiment
from tests.helpers import make_tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tiny_digits_config(data_dir, **overrides):
  return make_tiny_config(
    'fedavg',
    data_dir,
    clients=10,
    slots=4,
    **{
      'partition.name': 'iid',
      'model.kwargs.hidden_sizes': (32,),
      'client.batch_size': 32,
      'client.local_steps': 5,
      'latency.kwargs.distribution': 'exponential',
      'latency.kwargs.jitter': 0.05,
      'run.num_rounds': 6,
      'run.target_accuracy': 0.5,
      **overrides,
    },
  )


def _read_metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_run_directory_holds_config_metrics_and_summary(digits_data_dir, tmp_path):
  summary = run_experiment(_tiny_digits_config(digits_data_dir), tmp_path)
  with open(tmp_path / 'config.json') as f:
    assert json.load(f)['data']['name'] == 'digits'
  rows = _read_metrics(tmp_path)
  assert [r['version'] for r in rows] == [0, 2, 4, 6]
  for row in rows:
    assert set(row) == {
      'virtual_time',
      'version',
      'client_updates',
      'gradient_steps',
      'test_accuracy',
      'test_loss',
      *(f'staleness_{name}' for name in ('mean', 'p50', 'p95', 'max')),
      *(f'staleness_window_{name}' for name in ('mean', 'p50', 'p95', 'max')),
      'updates_per_client_min',
      'updates_per_client_median',
      'updates_per_client_max',
      'jain_fairness',
      'aggregated_share',
      'client_busy_fraction',
      'client_idle_fraction',
      'wasted_steps',
      'wasted_fraction',
    }
  assert rows[-1]['client_updates'] == 24 and rows[-1]['gradient_steps'] == 120
  times = [r['virtual_time'] for r in rows]
  assert times == sorted(times) and times[-1] > 0
  with open(tmp_path / 'summary.json') as f:
    assert json.load(f)['final_accuracy'] == summary['final_accuracy'] == rows[-1]['test_accuracy']
  assert summary['best_accuracy'] == max(r['test_accuracy'] for r in rows)
  assert rows[-1]['test_accuracy'] > 0.5  # digits is easy: learning happened
  assert summary['time_to_target'] is not None


@pytest.mark.parametrize('backend,deferred', [('vmap', True), ('loop', False)])
def test_same_config_and_seed_give_identical_metrics(digits_data_dir, tmp_path, backend, deferred):
  config = _tiny_digits_config(
    digits_data_dir, **{'executor.backend': backend, 'executor.deferred': deferred}
  )
  run_experiment(config, tmp_path / 'a')
  run_experiment(config, tmp_path / 'b')
  assert _read_metrics(tmp_path / 'a') == _read_metrics(tmp_path / 'b')
  config.seed = 1
  run_experiment(config, tmp_path / 'c')
  assert _read_metrics(tmp_path / 'a') != _read_metrics(tmp_path / 'c')


@pytest.mark.parametrize(
  'key,value,match',
  [
    ('client.learning_rate', 0.0, 'client.learning_rate'),
    ('latency.name', 'pareto', 'latency.name'),
    ('executor.backend', 'gpu', 'executor.backend'),
  ],
)
def test_invalid_settings_name_the_setting(key, value, match):
  config = base_config()
  section, _, leaf = key.rpartition('.')
  (config[section] if section else config)[leaf] = value
  with pytest.raises(ConfigError, match=match) as error:
    validate(config)
  assert '\n' not in str(error.value) and 'allowed' in str(error.value)


@pytest.mark.parametrize(
  'algorithm,key,value,match',
  [
    ('fedsgdx', None, None, 'algorithm.name'),
    ('fedavg', 'cohort_size', -1, 'algorithm.kwargs.cohort_size'),
    ('fedavg', 'cohort_size', 101, 'algorithm.kwargs.cohort_size'),
    ('fedavg', 'num_selected', 5, 'algorithm.kwargs.num_selected'),
    ('fedbuff', 'concurrency', 0, 'algorithm.kwargs.concurrency'),
    ('fedbuff', 'staleness', 'linear', 'algorithm.kwargs.staleness'),
    ('fedavg', 'b2', 1.0, 'algorithm.kwargs.b2'),
  ],
)
def test_invalid_algorithm_settings_name_the_setting(algorithm, key, value, match):
  config = base_config()
  config.algorithm.name = algorithm
  if key is not None:
    config.algorithm.kwargs[key] = value
  with pytest.raises(ConfigError, match=match) as error:
    experiment.validate(config)
  assert '\n' not in str(error.value) and 'allowed' in str(error.value)


@pytest.mark.parametrize('value', [float('nan'), float('inf'), float('-inf')])
def test_non_finite_algorithm_settings_are_one_line_errors(value):
  config = base_config()
  config.algorithm.kwargs.server_learning_rate = value
  with pytest.raises(ConfigError, match='algorithm.kwargs.server_learning_rate') as error:
    experiment.validate(config)
  assert '\n' not in str(error.value) and 'allowed' in str(error.value)


def test_a_field_foreign_to_the_algorithm_is_an_error():
  """FedCompass's q_min means nothing to FedAvg: set there, it is refused, not ignored."""
  config = base_config()
  config.algorithm.kwargs.q_min = 4
  with pytest.raises(ConfigError, match=r'algorithm\.kwargs\.q_min is not a setting') as error:
    experiment.validate(config)
  assert '\n' not in str(error.value) and 'FedOptSettings' in str(error.value)
  config.algorithm.name = 'fedcompass'
  config.client.local_steps = None
  assert experiment.validate(config).q_min == 4


def test_fedbuff_count_normalization_needs_uniform_weights():
  """'count' divides sum_k p_k delta_k by K: with example shares p_k = n_k / n every server
  step would shrink by about 1 / num_clients, so the pair is refused, not run."""
  config = base_config()
  config.algorithm.name = 'fedbuff'
  experiment.validate(config)  # the default: weighted mean
  config.algorithm.kwargs.normalization = 'count'
  with pytest.raises(
    ConfigError, match=r"algorithm.kwargs.normalization='count'.*weighting='uniform'"
  ):
    experiment.validate(config)
  config.algorithm.kwargs.weighting = 'uniform'
  experiment.validate(config)


def test_config_json_holds_the_algorithms_resolved_settings(tmp_path):
  """Every setting of the algorithm is written with its value, defaults included, so that
  config.json alone describes the run."""
  config = base_config()
  config.algorithm.name = 'fedbuff'
  config.data.num_clients = 4
  config.model.kwargs.hidden_sizes = (8,)
  config.client.local_steps = 2
  config.algorithm.kwargs.concurrency = 3
  config.algorithm.kwargs.buffer_size = 2
  config.run.num_rounds = 2
  config.run.eval_every = 1
  run_experiment(config, tmp_path, dataset=make_toy_federation(num_clients=4))
  with open(tmp_path / 'config.json') as f:
    written = json.load(f)['algorithm']
  expected = algorithms.get_spec('fedbuff').settings(concurrency=3, buffer_size=2).as_dict()
  assert written['name'] == 'fedbuff'
  assert written['kwargs'] == json.loads(json.dumps(expected))
  assert written['kwargs']['staleness'] == 'polynomial'  # a default the config did not set
  del config.algorithm.kwargs['buffer_size']
  run_experiment(config, tmp_path / 'default_buffer', dataset=make_toy_federation(num_clients=4))
  with open(tmp_path / 'default_buffer' / 'config.json') as f:
    assert json.load(f)['algorithm']['kwargs']['buffer_size'] == 10  # FedBuff's default K


def _run_binary(*args, timeout=120, config='fedavg_fashion_mnist.py'):
  start = time.perf_counter()
  result = subprocess.run(
    [
      sys.executable,
      os.path.join(ROOT, 'experiments', 'run.py'),
      f'--config={os.path.join(ROOT, "configs", config)}',
      *args,
    ],
    capture_output=True,
    text=True,
    timeout=timeout,
    cwd=ROOT,
  )
  return result, time.perf_counter() - start


@pytest.mark.parametrize(
  'override,match',
  [
    ('--config.algorithm.name=fedbogus', 'algorithm.name'),
    ('--config.algorithm.kwargs.cohort_size=-3', 'algorithm.kwargs.cohort_size'),
    ('--config.algorithm.kwargs.cohort_size=500', 'algorithm.kwargs.cohort_size'),
  ],
)
def test_binary_rejects_invalid_settings_with_one_line(override, match, tmp_path):
  result, _ = _run_binary(override, f'--workdir={tmp_path}')
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert match in lines[0] and 'allowed' in lines[0]
  assert 'Traceback' not in result.stderr


@pytest.mark.parametrize(
  'config,override,expected',
  [
    # A misspelt field, outside or inside the algorithm's settings, names the closest one.
    ('fedavg_fashion_mnist.py', '--config.client.learning_rat=0.1', "did you mean 'learning_rate'"),
    (
      'fedbuff_fashion_mnist.py',
      '--config.algorithm.kwargs.bufer_size=3',
      "did you mean 'buffer_size'",
    ),
    # A field of another algorithm (FedCompass's q_min) is not silently ignored under FedAvg.
    ('fedavg_fashion_mnist.py', '--config.algorithm.kwargs.q_min=4', 'FedOptSettings'),
    # A float setting the config sets, overridden by a non-finite number.
    ('fedbuff_fashion_mnist.py', '--config.algorithm.kwargs.server_learning_rate=nan', '=nan'),
    ('fedbuff_fashion_mnist.py', '--config.algorithm.kwargs.server_learning_rate=inf', '=inf'),
    # A section given a value (the algorithm was once a plain name) points to its fields.
    ('fedbuff_fashion_mnist.py', '--config.algorithm=fedbuff', '--config.algorithm.name='),
  ],
)
def test_binary_rejects_unknown_fields_and_bad_values_before_writing(
  config, override, expected, tmp_path
):
  workdir = tmp_path / 'run'
  result, _ = _run_binary(override, f'--workdir={workdir}', config=config)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  name = override.removeprefix('--config.').split('=')[0]
  assert name in lines[0] and expected in lines[0] and 'allowed' in lines[0]
  assert not workdir.exists()


def test_binary_reports_missing_data_before_writing(tmp_path):
  result, _ = _run_binary(
    f'--config.data.data_dir={tmp_path / "nowhere"}', f'--workdir={tmp_path / "run"}'
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert 'fedsim_jax.data.prepare --dataset=fashion_mnist' in lines[0]
  assert not (tmp_path / 'run').exists()


def test_missing_data_is_refused_before_the_model_or_simulation_is_built(tmp_path, monkeypatch):
  # (the time the binary takes to refuse: benchmarks/data_loading.py, `make bench`)
  def build(*args, **kwargs):
    raise AssertionError('built a run whose data is missing')

  monkeypatch.setattr(build_lib, 'build_model', build)
  monkeypatch.setattr(build_lib, 'build_simulation', build)
  config = make_tiny_config('fedavg', tmp_path / 'nowhere')
  with pytest.raises(DatasetNotFoundError, match='fedsim_jax.data.prepare --dataset=digits'):
    run_experiment(config, tmp_path / 'run')
  assert not (tmp_path / 'run').exists()


def test_binary_reports_unknown_dataset(tmp_path):
  result, _ = _run_binary(
    '--config.data.name=imagenet_xl',
    f'--config.data.data_dir={tmp_path}',
    f'--workdir={tmp_path / "run"}',
  )
  assert result.returncode == 2
  assert len(result.stderr.strip().splitlines()) == 1
  assert 'imagenet_xl' in result.stderr


# FedBuff (14 s) in `make test-slow`: the trace's latency and availability reach the scheduler
# the same way for every algorithm.
@pytest.mark.parametrize('algorithm', [pytest.param('fedbuff', marks=pytest.mark.slow), 'fedavg'])
def test_trace_latency_and_availability_end_to_end(algorithm, tmp_path):
  trace = os.path.join(ROOT, 'configs', 'traces', 'example_trace.json')
  config = base_config()
  config.algorithm.name = algorithm
  config.data.num_clients = 3
  config.model.kwargs.hidden_sizes = (8,)
  config.client.local_steps = 5
  if algorithm == 'fedavg':
    config.algorithm.kwargs.cohort_size = 2
  else:
    config.algorithm.kwargs.update(concurrency=2, buffer_size=1)
  config.latency.name = 'trace'
  config.latency.kwargs.trace = trace
  config.availability.name = 'trace'
  config.availability.kwargs.trace = trace
  config.run.num_rounds = None
  config.run.max_virtual_time = 9000.0
  config.run.eval_every = 1
  summary = run_experiment(config, tmp_path, dataset=make_toy_federation(num_clients=3))
  tasks = summary['tasks']
  assert tasks['aggregated'] > 10
  times = [row['virtual_time'] for row in _read_metrics(tmp_path)]
  assert max(times) > 7200
  if algorithm == 'fedavg':
    # Between t = 4200 and 7200 only client 1 is online, fewer than the cohort of 2: rounds
    # pause and resume when client 0 comes back (the scheduler waits for the next
    # availability; it does not poll).
    assert not any(4300 < t < 7200 for t in times)
  else:
    # FedBuff keeps training the clients that are online; tasks running when their client
    # goes offline drop out.
    assert any(4300 < t < 7200 for t in times)
    assert tasks['discarded'].get('offline', 0) >= 1
  assert tasks['dispatched'] == (
    tasks['aggregated'] + sum(tasks['discarded'].values()) + tasks['in_flight'] + tasks['waiting']
  )


def test_binary_runs_several_seeds_together(digits_data_dir, tmp_path):
  common = [
    '--config.data.name=digits',
    f'--config.data.data_dir={digits_data_dir}',
    '--config.data.num_clients=5',
    '--config.model.kwargs.hidden_sizes=(16,)',
    '--config.client.local_steps=3',
    '--config.algorithm.kwargs.cohort_size=3',
    '--config.run.num_rounds=3',
    '--config.run.eval_every=1',
  ]
  result, _ = _run_binary(*common, '--seeds=0,1', f'--workdir={tmp_path / "sweep"}', timeout=300)
  assert result.returncode == 0, result.stderr
  assert result.stdout.count('final accuracy') == 2
  alone, _ = _run_binary(*common, '--config.seed=1', f'--workdir={tmp_path / "alone"}', timeout=300)
  assert alone.returncode == 0, alone.stderr
  # The sweep's seed-1 run is the single seed-1 run (CPU default: the loop backend).
  assert (tmp_path / 'sweep' / 'seed1' / 'metrics.jsonl').read_text() == (
    tmp_path / 'alone' / 'metrics.jsonl'
  ).read_text()
  assert (tmp_path / 'sweep' / 'seed0' / 'metrics.jsonl').read_text() != (
    tmp_path / 'sweep' / 'seed1' / 'metrics.jsonl'
  ).read_text()
  with open(tmp_path / 'sweep' / 'seed0' / 'summary.json') as f:
    assert json.load(f)['host']['lockstep']['simulations'] == 2


@pytest.mark.parametrize('seeds', ['0,x', '-1', ','])
def test_binary_rejects_invalid_seeds_with_one_line(seeds, tmp_path):
  result, _ = _run_binary(f'--seeds={seeds}', f'--workdir={tmp_path}')
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert '--seeds' in lines[0] and 'allowed values: integers >= 0' in lines[0]


def test_binary_runs_an_algorithm_registered_by_user_code(digits_data_dir, tmp_path):
  """`algorithm.module` imports a module that registers an algorithm (tests/fixtures): the
  binary runs it with its own settings, the library untouched."""
  common = [
    '--config.algorithm.module=tests.fixtures.damped_fedavg',
    '--config.algorithm.name=damped_fedavg',
    '--config.data.name=digits',
    f'--config.data.data_dir={digits_data_dir}',
    '--config.data.num_clients=5',
    '--config.model.kwargs.hidden_sizes=(16,)',
    '--config.client.learning_rate=0.1',
    '--config.client.local_steps=10',
    '--config.algorithm.kwargs.cohort_size=3',
    '--config.run.num_rounds=6',
    '--config.run.eval_every=3',
  ]
  runs = {}
  for rate in (0.5, 0.0):
    workdir = tmp_path / f'rate{rate}'
    result, _ = _run_binary(
      *common, f'--config.algorithm.kwargs.rate={rate}', f'--workdir={workdir}', timeout=300
    )
    assert result.returncode == 0, result.stderr
    with open(workdir / 'config.json') as f:
      assert json.load(f)['algorithm'] == {
        'name': 'damped_fedavg',
        'module': 'tests.fixtures.damped_fedavg',
        'kwargs': {'rate': rate, 'cohort_size': 3},
      }
    runs[rate] = _read_metrics(workdir)
  for rows in runs.values():
    assert [r['version'] for r in rows] == [0, 3, 6]
    assert rows[-1]['client_updates'] == 18
  trained, frozen = runs[0.5], runs[0.0]
  assert trained[-1]['test_accuracy'] > trained[0]['test_accuracy'] + 0.1
  assert trained[-1]['test_loss'] < trained[0]['test_loss']
  # rate = 0: the server never moves, so every evaluation is the initial model's.
  assert [r['test_accuracy'] for r in frozen] == [frozen[0]['test_accuracy']] * 3
  assert [r['test_loss'] for r in frozen] == [frozen[0]['test_loss']] * 3
  assert frozen[0] == trained[0]
