"""End to end: run directories, determinism, shipped configs, and the binary's errors."""

import json
import os
import subprocess
import sys
import time

import pytest

from fedsim_jax.config import ConfigError, base_config, set_by_path, validate
from fedsim_jax.data.synthetic import toy_federation as make_toy_federation
from fedsim_jax.experiment import run_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tiny_digits_config(data_dir, **overrides):
  config = base_config()
  config.data.name = 'digits'
  config.data.data_dir = str(data_dir)
  config.data.num_clients = 10
  config.data.partition = 'iid'
  config.model.hidden_sizes = (32,)
  config.client.learning_rate = 0.1
  config.client.local_steps = 5
  config.scheduler.cohort_size = 4
  config.latency.per_step.distribution = 'exponential'
  config.latency.per_step.jitter = 0.05
  config.run.num_rounds = 6
  config.run.eval_every = 2
  config.run.target_accuracy = 0.5
  for key, value in overrides.items():
    set_by_path(config, key, value)
  return config


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
    ('algorithm', 'fedsgdx', 'algorithm'),
    ('scheduler.cohort_size', -1, 'scheduler.cohort_size'),
    ('scheduler.cohort_size', 101, 'scheduler.cohort_size'),
    ('client.learning_rate', 0.0, 'client.learning_rate'),
    ('latency.model', 'pareto', 'latency.model'),
    ('scheduler.num_selected', 5, 'scheduler.num_selected'),
    ('scheduler.concurrency', 0, 'scheduler.concurrency'),
    ('server.staleness', 'linear', 'server.staleness'),
    ('executor.backend', 'gpu', 'executor.backend'),
    ('server.b2', 1.0, 'server.b2'),
  ],
)
def test_invalid_settings_name_the_setting(key, value, match):
  config = base_config()
  section, _, leaf = key.rpartition('.')
  (config[section] if section else config)[leaf] = value
  with pytest.raises(ConfigError, match=match) as error:
    validate(config)
  assert '\n' not in str(error.value) and 'allowed' in str(error.value)


def test_fedbuff_count_normalization_needs_uniform_weights():
  """'count' divides sum_k p_k delta_k by K: with example shares p_k = n_k / n every server
  step would shrink by about 1 / num_clients, so the pair is refused, not run."""
  config = base_config()
  config.algorithm = 'fedbuff'
  validate(config)  # the default: weighted mean
  config.server.normalization = 'count'
  with pytest.raises(ConfigError, match=r"server.normalization='count'.*weighting='uniform'"):
    validate(config)
  config.scheduler.weighting = 'uniform'
  validate(config)


def _run_binary(*args, timeout=120):
  start = time.perf_counter()
  result = subprocess.run(
    [
      sys.executable,
      os.path.join(ROOT, 'experiments', 'run.py'),
      f'--config={os.path.join(ROOT, "configs", "fedavg_fashion_mnist.py")}',
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
    ('--config.algorithm=fedbogus', 'algorithm'),
    ('--config.scheduler.cohort_size=-3', 'scheduler.cohort_size'),
    ('--config.scheduler.cohort_size=500', 'scheduler.cohort_size'),
  ],
)
def test_binary_rejects_invalid_settings_with_one_line(override, match, tmp_path):
  result, _ = _run_binary(override, f'--workdir={tmp_path}')
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert match in lines[0] and 'allowed' in lines[0]
  assert 'Traceback' not in result.stderr


def test_binary_reports_missing_data_fast(tmp_path):
  result, seconds = _run_binary(
    f'--config.data.data_dir={tmp_path / "nowhere"}', f'--workdir={tmp_path / "run"}'
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert 'fedsim_jax.data.prepare --dataset=fashion_mnist' in lines[0]
  assert seconds < 5 + 5  # start-up (importing jax) plus the 5 s the issue allows


def test_binary_reports_unknown_dataset(tmp_path):
  result, _ = _run_binary(
    '--config.data.name=imagenet_xl',
    f'--config.data.data_dir={tmp_path}',
    f'--workdir={tmp_path / "run"}',
  )
  assert result.returncode == 2
  assert len(result.stderr.strip().splitlines()) == 1
  assert 'imagenet_xl' in result.stderr


@pytest.mark.parametrize('algorithm', ['fedbuff', 'fedavg'])
def test_trace_latency_and_availability_end_to_end(algorithm, tmp_path):
  trace = os.path.join(ROOT, 'configs', 'traces', 'example_trace.json')
  config = base_config()
  config.algorithm = algorithm
  config.data.num_clients = 3
  config.model.hidden_sizes = (8,)
  config.client.local_steps = 5
  config.scheduler.cohort_size = 2
  config.scheduler.concurrency = 2
  config.scheduler.buffer_size = 1
  config.latency.model = 'trace'
  config.latency.trace.trace = trace
  config.availability.model = 'trace'
  config.availability.trace.trace = trace
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
    '--config.model.hidden_sizes=(16,)',
    '--config.client.local_steps=3',
    '--config.scheduler.cohort_size=3',
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
