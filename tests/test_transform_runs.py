"""Update transforms through whole runs: epsilon in the metrics and summary, the epsilon budget,
attackers and bytes in the task trace, compression on the virtual clock, resume bit for bit with
transform state, refused combinations, and the degenerate cases that change nothing."""

import json
import os

import numpy as np
import pytest

import fedsim_jax
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import run_experiment
from fedsim_jax.run_spec import RunSpec
from tests.helpers import make_tiny_config
from tests.test_resume import _assert_same_run

pytestmark = pytest.mark.timeout(600)

DP = {
  'privacy.name': 'dp_gaussian',
  'privacy.kwargs.clip_norm': 0.5,
  'privacy.kwargs.noise_multiplier': 1.0,
}


def _config(data_dir, algorithm='fedavg', **overrides):
  return make_tiny_config(algorithm, data_dir, clients=8, slots=4, **overrides)


def _rows(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def _tasks(workdir):
  with open(os.path.join(workdir, 'tasks.jsonl')) as f:
    return [json.loads(line) for line in f]


def _final_params(workdir):
  import jax

  return [
    np.asarray(x) for x in jax.tree_util.tree_leaves(fedsim_jax.load_run(workdir).params['final'])
  ]


def test_dp_fedavg_reports_epsilon_per_row_and_in_the_summary(digits_data_dir, tmp_path):
  summary = run_experiment(_config(digits_data_dir, **DP), tmp_path)
  rows = _rows(tmp_path)
  ledger = RunSpec.from_config(_config(digits_data_dir, **DP)).privacy.settings.ledger(
    RunSpec.from_config(_config(digits_data_dir, **DP)).transform_context()
  )
  # One release per round; q = cohort 4 / 8 clients; delta = 8^-1.1.
  assert ledger.sampling_rate == 0.5 and ledger.delta == pytest.approx(8**-1.1)
  assert [row['epsilon'] for row in rows] == [ledger.epsilon(row['version']) for row in rows]
  assert rows[0]['epsilon'] == 0.0 and rows[-1]['epsilon'] > rows[1]['epsilon'] > 0
  assert all(row['clip_norm'] == 0.5 for row in rows)
  assert summary['privacy']['epsilon'] == ledger.epsilon(4)
  assert summary['privacy']['releases'] == 4


def test_an_epsilon_budget_stops_the_run_before_it_is_exceeded(digits_data_dir, tmp_path):
  spec = RunSpec.from_config(_config(digits_data_dir, **DP))
  ledger = spec.privacy.settings.ledger(spec.transform_context())
  budget = (ledger.epsilon(2) + ledger.epsilon(3)) / 2  # two rounds fit, the third does not
  config = _config(digits_data_dir, **DP, **{'privacy.kwargs.epsilon_budget': budget})
  summary = run_experiment(config, tmp_path)
  assert summary['status'] == 'budget_exhausted'
  assert summary['final_version'] == 2
  assert summary['privacy']['epsilon'] == ledger.epsilon(2) <= budget
  assert 'epsilon_budget' in summary['message']
  assert fedsim_jax.load_run(tmp_path).params['final'] is not None  # outputs of a finished run


def test_central_dp_without_noise_and_a_loose_clip_is_uniform_fedavg(digits_data_dir, tmp_path):
  uniform = {'algorithm.kwargs.weighting': 'uniform', 'algorithm.kwargs.cohort_size': 8}
  plain = _config(digits_data_dir, **uniform)
  private = _config(
    digits_data_dir,
    **uniform,
    **{**DP, 'privacy.kwargs.clip_norm': 1e6, 'privacy.kwargs.noise_multiplier': 0.0},
  )
  run_experiment(plain, tmp_path / 'plain')
  run_experiment(private, tmp_path / 'private')
  for got, want in zip(_final_params(tmp_path / 'private'), _final_params(tmp_path / 'plain')):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_robust_estimate_of_one_update_is_that_update(digits_data_dir, tmp_path):
  run_experiment(_config(digits_data_dir, 'fedasync'), tmp_path / 'plain')
  run_experiment(
    _config(digits_data_dir, 'fedasync', **{'robust.name': 'median'}), tmp_path / 'median'
  )
  for got, want in zip(_final_params(tmp_path / 'median'), _final_params(tmp_path / 'plain')):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_attackers_are_named_in_the_task_trace_and_summary(digits_data_dir, tmp_path):
  config = _config(digits_data_dir, **{'attack.name': 'sign_flip', 'attack.kwargs.fraction': 0.25})
  summary = run_experiment(config, tmp_path)
  malicious = summary['transforms']['malicious_clients']
  assert len(malicious) == 2
  tasks = _tasks(tmp_path)
  assert {t['client'] for t in tasks if t['attacker']} <= set(malicious)
  assert all(t['attacker'] == (t['client'] in malicious) for t in tasks)


def test_compression_bytes_are_in_the_trace_and_cost_less_time(digits_data_dir, tmp_path):
  bandwidth = {
    'latency.name': 'device_ratio',
    'latency.kwargs.fastest_step_time': 0.01,
    'latency.kwargs.bandwidth': 1e5,
    'latency.kwargs.communication_time': None,
  }
  dense = run_experiment(_config(digits_data_dir, 'fedbuff', **bandwidth), tmp_path / 'dense')
  sparse_config = _config(
    digits_data_dir,
    'fedbuff',
    **bandwidth,
    **{'compression.name': 'top_k', 'compression.kwargs.fraction': 0.05},
  )
  sparse = run_experiment(sparse_config, tmp_path / 'sparse')
  num_params = sparse['transforms']['download_bytes'] // 4
  expected = int(np.ceil(0.05 * num_params)) * 8
  assert sparse['transforms']['upload_bytes'] == expected
  uploads = [t['upload_bytes'] for t in _tasks(tmp_path / 'sparse') if t['outcome'] == 'aggregated']
  assert uploads and set(uploads) == {expected}
  assert sparse['final_virtual_time'] < dense['final_virtual_time']
  # A run without transforms reports its dense bytes too; its task records carry none.
  assert dense['transforms'] == {
    'upload_bytes': 4 * num_params,
    'download_bytes': 4 * num_params,
    'compression_ratio': 1.0,
  }
  assert not any('upload_bytes' in t for t in _tasks(tmp_path / 'dense'))


def test_label_flipping_poisons_the_malicious_clients_data(digits_data_dir):
  from fedsim_jax.build import build_federated_dataset

  honest = build_federated_dataset(_config(digits_data_dir))
  config = _config(digits_data_dir, **{'attack.name': 'label_flip', 'attack.kwargs.fraction': 0.25})
  poisoned = build_federated_dataset(config)
  spec = RunSpec.from_config(config)
  malicious = spec.attack.settings.malicious(spec.transform_context())
  changed = np.flatnonzero(honest.train_y != poisoned.train_y)
  assert changed.size > 0
  np.testing.assert_array_equal(poisoned.train_y[changed], 9 - honest.train_y[changed])
  for client in range(8):
    _, honest_y = honest.client_examples(client)
    _, poisoned_y = poisoned.client_examples(client)
    expected = 9 - honest_y if malicious[client] else honest_y
    np.testing.assert_array_equal(poisoned_y, expected)


@pytest.mark.parametrize(
  'transforms',
  [
    {'compression.name': 'top_k', 'compression.kwargs.fraction': 0.1},  # error-feedback residuals
    {**DP, 'privacy.kwargs.target_quantile': 0.5, 'privacy.kwargs.clipped_count_stddev': 1.0},
    {'robust.name': 'centered_clipping', 'attack.name': 'gaussian'},
  ],
  ids=['error_feedback', 'adaptive_clipping', 'centered_clipping'],
)
def test_a_run_with_transform_state_resumes_bit_for_bit(digits_data_dir, tmp_path, transforms):
  longer = _config(digits_data_dir, 'fedbuff', **{'run.num_rounds': 8, **transforms})
  run_experiment(longer, tmp_path / 'reference')
  shorter = _config(digits_data_dir, 'fedbuff', **{'run.num_rounds': 4, **transforms})
  run_experiment(shorter, tmp_path / 'run')
  run_experiment(longer, tmp_path / 'run', resume=True)
  _assert_same_run(tmp_path / 'run', tmp_path / 'reference')


@pytest.mark.parametrize(
  ('overrides', 'message'),
  [
    ({'robust.name': 'krum', 'robust.kwargs.num_byzantine': 1}, 'needs at least 2f \\+ 3 = 5'),
    ({**DP, 'robust.name': 'median'}, "placement='central' is invalid with robust.name='median'"),
    (
      {**DP, 'privacy.kwargs.target_quantile': 0.5, 'privacy.kwargs.clipped_count_stddev': 0.1},
      'too small',
    ),
    (
      {'compression.name': 'top_k', 'compression.kwargs.fraction': 0.0},
      'compression.kwargs.fraction',
    ),
    ({'attack.name': 'sign_flip', 'attack.kwargs.fractoin': 0.1}, "did you mean 'fraction'"),
    ({'privacy.name': 'dp_gausian'}, 'dp_gaussian'),
    (
      {**DP, 'privacy.kwargs.placement': 'local', 'privacy.kwargs.target_quantile': 0.5},
      "target_quantile=0.5 is invalid with privacy.kwargs.placement='local'",
    ),
  ],
)
def test_combinations_that_make_no_sense_are_refused(overrides, message):
  with pytest.raises(ConfigError, match=message):
    RunSpec.from_config(make_tiny_config('fedbuff', clients=8, slots=4, **overrides))


def test_krum_with_a_large_enough_buffer_is_accepted():
  config = make_tiny_config('fedbuff', clients=8, slots=4, **{'robust.name': 'krum'})
  config.algorithm.kwargs.buffer_size = 5
  assert RunSpec.from_config(config).robust.name == 'krum'


@pytest.mark.parametrize(
  ('config', 'overrides', 'named', 'expected'),
  [
    (
      'fedavg_fashion_mnist.py',
      ('--config.privacy.name=dp_gaussian', '--config.privacy.kwargs.noise_multiplier=nan'),
      'privacy.kwargs.noise_multiplier',
      "='nan' is invalid",
    ),
    ('fedasync_fashion_mnist.py', ('--config.robust.name=krum',), 'robust.name', '2f + 3'),
  ],
)
def test_the_binary_refuses_bad_transform_settings_with_one_line(
  config, overrides, named, expected, tmp_path
):
  from tests.test_experiment import _run_binary

  workdir = tmp_path / 'run'
  result, _ = _run_binary(*overrides, f'--workdir={workdir}', config=config)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and 'Traceback' not in result.stderr, result.stderr
  assert named in lines[0] and expected in lines[0] and 'allowed' in lines[0]
  assert not workdir.exists()
