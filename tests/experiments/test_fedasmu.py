"""FedASMU reproduction: the paper's numbers, configs, result tables and the binary."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import agreement, sweep
from experiments.fedasmu import tables
from experiments.sweep import table_row as _row
from fedsim_jax import algorithms, experiment
from fedsim_jax.config import ConfigError, base_config

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BINARY = os.path.join(_REPO, 'experiments', 'fedasmu', 'reproduce.py')
_FMNIST = ('lenet5', 'fashion_mnist')
_KW = 'algorithm.kwargs.'


def test_paper_tables():
  assert set(tables.PAPER_RESULTS) == set(tables.COLUMNS)
  for column in tables.COLUMNS:
    assert set(tables.PAPER_RESULTS[column]) == set(('fedasmu',) + tables.BASELINES)
  assert tables.PAPER_RESULTS[_FMNIST]['fedasmu'] == (0.829, 8250.0)
  assert tables.PAPER_RESULTS[_FMNIST]['fedsa'] == (0.783, 8553.0)
  assert tables.PAPER_RESULTS[('lenet5', 'cifar10')]['feddyn'] == (0.279, None)
  assert tables.PAPER_RESULTS[('lenet5', 'cifar10')]['fedbuff'] == (0.365, 9829.0)
  assert tables.PAPER_RESULTS[('fedasmu_cnn', 'cifar10')]['fedprox'] == (0.371, None)
  assert tables.PAPER_RESULTS[('fedasmu_cnn', 'cifar10')]['asofed'] == (0.482, 92246.0)
  # FedASMU is the most accurate in every column the paper reports.
  for column in tables.COLUMNS:
    paper = tables.PAPER_RESULTS[column]
    assert max(paper, key=lambda m: paper[m][0]) == 'fedasmu'


def test_method_settings_name_each_section_once():
  assert tables.fedasmu_settings('fedasmu_h2', ('lenet5', 'cifar10')) == {
    _KW + 'lambda_learning_rate': 0.001,
    _KW + 'sigma_learning_rate': 0.001,
    _KW + 'iota_learning_rate': 0.1,
    _KW + 'gamma_learning_rate': 0.1,
    _KW + 'v_learning_rate': 0.001,
    _KW + 'fetch_policy': 'h2',
  }
  assert tables.fedasmu_settings('fedasmu_fa', _FMNIST)[_KW + 'fetch_policy'] == 'none'
  # The static-weight ablations aggregate exactly as the FedAsync baseline does.
  fedasync = tables.method_settings('fedasync', _FMNIST)
  for method in ('fedasmu_da', 'fedasmu_0'):
    static = tables.method_settings(method, _FMNIST)
    for name in ('alpha', 'staleness', 'staleness_a'):
      assert static[_KW + name] == fedasync[_KW + name], (method, name)
    assert static[_KW + 'alpha'] == 0.6
  assert _KW + 'alpha' not in tables.method_settings('fedasmu', _FMNIST)
  # FedDyn averages 1/|P_t| (Algorithm 1), as its h update does: not by example counts.
  assert tables.method_settings('feddyn', _FMNIST)[_KW + 'weighting'] == 'uniform'
  assert set(tables.fedasmu_settings('fedasmu', _FMNIST).values()) == {0.0001, 'learned'}
  assert tables.method_settings('fedprox', _FMNIST)[_KW + 'proximal_strength'] == 0.01
  assert tables.method_settings('moon', ('fedasmu_cnn', 'cifar10'))[_KW + 'mu'] == 5.0
  assert tables.method_settings('moon', _FMNIST)[_KW + 'mu'] == 1.0
  fedbuff = tables.method_settings('fedbuff', _FMNIST)
  assert fedbuff[_KW + 'buffer_size'] == 5
  # FedBuff's unweighted mean over K (the shared system model weights by examples).
  assert (fedbuff[_KW + 'weighting'], fedbuff[_KW + 'normalization']) == ('uniform', 'count')
  assert tables.method_settings('fedsa', _FMNIST, num_clients=40)[_KW + 'buffer_size'] == 2
  assert tables.method_settings('port', _FMNIST, num_clients=10)[_KW + 'buffer_size'] == 1
  for method in tables.METHODS:  # every method has a settings function
    assert isinstance(tables.method_settings(method, _FMNIST), dict)


def test_system_model():
  sync = tables.system_settings('fedavg', 100)
  assert sync[_KW + 'cohort_size'] == 10 and _KW + 'concurrency' not in sync
  asynchronous = tables.system_settings('fedasync', 20)
  assert asynchronous[_KW + 'concurrency'] == 2
  assert asynchronous['latency.name'] == 'device_ratio'
  assert asynchronous['latency.kwargs.ratio'] == 5.0
  assert (_KW + 'trigger_period' in asynchronous) == tables.periodic_trigger_available()


@pytest.mark.parametrize('column', tables.COLUMNS)
def test_configs_of_registered_methods(column):
  methods = tables.registered_methods()
  assert {'fedavg', 'fedasync', 'fedbuff'} <= set(methods)
  for method in methods:
    config = tables.make_config(method, *column, seed=2)
    settings = experiment.validate(config)
    assert config.algorithm.name == method and config.seed == 2
    assert (config.model.name, config.data.name) == column
    assert config.partition.name == 'dirichlet' and config.partition.kwargs.concentration == 0.5
    assert config.data.num_clients == 100
    assert config.client.learning_rate == tables.CLIENT_LEARNING_RATE[column]
    assert config.client.local_epochs == 5 and config.client.local_steps is None
    assert config.run.num_rounds == 500 and config.run.max_virtual_time is None
    assert config.run.target_accuracy == tables.TARGET_ACCURACY[column]
    assert config.latency.name == 'device_ratio' and config.latency.kwargs.ratio == 5
    if method in tables.SYNCHRONOUS:
      assert settings.cohort_size == 10
    else:
      assert settings.concurrency == 10


def test_make_config_options():
  config = tables.make_config(
    'fedbuff',
    *_FMNIST,
    num_clients=20,
    concentration=0.1,
    num_rounds=None,
    max_virtual_time=300.0,
    local_epochs=2,
    batch_size=16,
    fastest_step_time=0.5,
    eval_every=3,
  )
  assert config.algorithm.kwargs.concurrency == 2 and config.partition.kwargs.concentration == 0.1
  assert config.algorithm.kwargs.buffer_size == 1
  assert config.run.num_rounds is None and config.run.max_virtual_time == 300.0
  assert config.client.local_epochs == 2 and config.client.batch_size == 16
  assert config.latency.kwargs.fastest_step_time == 0.5 and config.run.eval_every == 3


def test_make_config_rejects_bad_settings(monkeypatch):
  with pytest.raises(ConfigError, match="method='fedcompass' is not allowed"):
    tables.make_config('fedcompass', *_FMNIST)
  with pytest.raises(ConfigError, match="dataset='mnist' is not allowed"):
    tables.make_config('fedavg', 'lenet5', 'mnist')
  with pytest.raises(ConfigError, match="model='fedasmu_cnn' is not allowed"):
    tables.make_config('fedavg', 'fedasmu_cnn', 'fashion_mnist')
  with pytest.raises(ConfigError, match='give at least one budget'):
    tables.make_config('fedavg', *_FMNIST, num_rounds=None)
  monkeypatch.delitem(algorithms.base.ALGORITHMS._entries, 'fedbuff')
  with pytest.raises(
    ConfigError,
    match=r"^method='fedbuff' is not registered in this build .*"
    r"allowed values: \[.*'fedasync'.*\]$",
  ):
    tables.make_config('fedbuff', *_FMNIST)


def test_set_existing_refuses_settings_this_build_lacks():
  config = base_config()
  sweep.set_existing(config, 'client.learning_rate', 0.5)
  assert config.client.learning_rate == 0.5
  with pytest.raises(ConfigError, match='^client.learning_rte: no such setting in this build'):
    sweep.set_existing(config, 'client.learning_rte', 0.5)
  with pytest.raises(ConfigError, match='^no_section.eta: no such setting'):
    sweep.set_existing(config, 'no_section.eta', 0.5)
  assert 'learning_rte' not in config.client and 'no_section' not in config


def test_moved_statistics():
  assert sweep.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
  assert sweep.average_ranks([3.0, 1.0, 3.0]) == [2.5, 1.0, 2.5]
  assert sweep.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
  missed = {'time_to_target': None}
  assert (
    sweep.mean_time_to_target([{'time_to_target': 4.0}, missed, {'time_to_target': 2.0}]) == 3.0
  )
  assert sweep.mean_time_to_target([{'time_to_target': 4.0}, missed]) is None  # half missed
  assert sweep.mean_time_to_target([]) is None


# ------------------------------------------------------------------------------------------------
# Tables from fabricated run summaries.


def _records() -> list[dict]:
  def run(method, final, best, time, seed=0, **extra):
    return dict(
      method=method,
      model='lenet5',
      dataset='fashion_mnist',
      seed=seed,
      final_accuracy=final,
      best_accuracy=best,
      time_to_target=time,
      final_version=500,
      final_virtual_time=1000.0,
      trigger_period=None,
      **extra,
    )

  return [
    run('fedavg', 0.70, 0.71, None),
    run('fedavg', 0.72, 0.73, 500.0, seed=1),  # target missed in half the seeds: '/'
    run('fedasmu', 0.80, 0.82, 100.0),
    run('fedbuff', 0.76, 0.77, 200.0),
    run('fedasync', 0.75, 0.78, 300.0),
    run('fedasmu_da', 0.78, 0.79, 150.0),
  ]


def test_results_table_paper_beside_and_slash():
  text = tables.results_table(_records())
  assert text.startswith('**LeNet FMNIST** (target accuracy 0.70)')
  assert 'Time to 0.70 (s)' in text
  # Acc, paper Acc, best Acc, Time, paper Time, versions, virtual time, seeds.
  assert _row(text, 'FedASMU') == ['0.800', '0.829', '0.820', '100', '8,250', '500', '1,000', '1']
  assert _row(text, 'FedAvg') == [
    '0.710±0.014',
    '0.706',
    '0.720',
    '/',
    '65,000',
    '500',
    '1,000',
    '2',
  ]
  assert _row(text, 'FedASMU-DA')[:5] == ['0.780', '-', '0.790', '150', '-']
  names = [line.split('|')[1].strip() for line in text.splitlines()[4:]]
  assert names == ['FedASMU', 'FedAvg', 'FedAsync', 'FedBuff', 'FedASMU-DA']  # paper order


def test_per_seed_table_has_a_column_per_seed_and_a_dash_where_a_method_did_not_run():
  text = tables.per_seed_table(_records())
  assert '| Method | seed 0: final / best | seed 1: final / best |' in text
  assert _row(text, 'FedAvg') == ['0.700 / 0.710', '0.720 / 0.730']
  assert _row(text, 'FedASMU') == ['0.800 / 0.820', '-']


def test_ordering_spearman_against_the_paper():
  (row,) = tables.ordering(_records())
  assert row['methods'] == ['fedasmu', 'fedavg', 'fedasync', 'fedbuff']  # not the ablation
  # Ours: FedASMU > FedBuff > FedAsync > FedAvg; paper: FedASMU > FedAsync > FedBuff > FedAvg.
  assert row['ours_ranking'] == ['fedasmu', 'fedbuff', 'fedasync', 'fedavg']
  assert row['paper_ranking'] == ['fedasmu', 'fedasync', 'fedbuff', 'fedavg']
  assert row['accuracy_rho'] == pytest.approx(1 - 6 * 2 / (4 * 15))  # sum d^2 = 2
  # Times where both reached the target (FedAvg '/'): ours 100 < 200 < 300 (FedASMU, FedBuff,
  # FedAsync), paper 8250 < 12371 < 27179 (FedASMU, FedAsync, FedBuff).
  assert row['time_methods'] == 3
  assert row['time_rho'] == pytest.approx(0.5)
  assert row['fedasmu_best_ours'] is True and row['fedasmu_best_paper'] is True
  text = tables.ordering_table(_records())
  assert _row(text, 'LeNet FMNIST')[:4] == ['4', '+0.80', '+0.50', '3']
  assert 'FedASMU > FedBuff > FedAsync > FedAvg' in text


def test_ordering_needs_three_methods():
  records = [r for r in _records() if r['method'] in ('fedasmu', 'fedavg')]
  (row,) = tables.ordering(records)
  assert row['accuracy_rho'] is None and row['time_rho'] is None
  assert _row(tables.ordering_table(records), 'LeNet FMNIST')[1:4] == ['-', '-', '1']


def test_ablation_table():
  text = tables.ablation_table(_records())
  assert _row(text, 'LeNet FMNIST') == [
    'FedASMU vs FedASMU-DA',
    '+2.00',
    '1.38 to 4.32',
    '+33.3%',
    '-',
    '1',
  ]
  assert tables.ablation_table(_records()[:2]).startswith('No ablation pair')


def test_ablations_compare_only_the_seeds_both_methods_ran():
  # FedAvg ran seeds 0 and 1 (0.70, 0.72); FedASMU-0 only seed 1 (0.75): +3 points, not +4.
  records = _records() + [
    dict(_records()[0], method='fedasmu_0', seed=1, final_accuracy=0.75, time_to_target=None)
  ]
  text = tables.ablation_table(records)
  row = next(r for r in text.splitlines() if 'FedASMU-0 vs FedAvg' in r)
  assert row.split(' | ')[2:3] == ['+3.00'] and row.endswith('| 1 |')
  only_seed_2 = [dict(r, seed=2) if r['method'] == 'fedasmu_da' else r for r in _records()]
  assert 'FedASMU vs FedASMU-DA' not in tables.ablation_table(only_seed_2)  # no common seed


def test_write_outputs(tmp_path, capsys):
  records = _records()
  settings = {
    'seeds': [0, 1],
    'num_clients': 100,
    'concentration': 0.5,
    'num_rounds': 500,
    'max_virtual_time': None,
    'local_epochs': 5.0,
    'batch_size': 32,
    'fastest_step_time': 0.1,
    'eval_every': 5,
  }
  output = tmp_path / 'out' / 'tables.md'
  tables.write_outputs(records, settings, str(tmp_path), str(output), wall_seconds=2.0)
  with open(tmp_path / 'results.jsonl', encoding='utf-8') as f:
    assert [json.loads(line) for line in f] == records
  text = output.read_text(encoding='utf-8')
  assert text == capsys.readouterr().out
  assert 'concurrency-capped scheduler' in text and 'budget 500 server versions' in text
  assert '## Ablations' in text and 'Spearman ρ (accuracy)' in text


# ------------------------------------------------------------------------------------------------
# The binary.


def _run(*flags, timeout=120):
  return subprocess.run(
    [sys.executable, _BINARY, *flags], capture_output=True, text=True, cwd=_REPO, timeout=timeout
  )


@pytest.mark.parametrize(
  'flag',
  [
    '--methods=fedasmu,fedcompass',
    '--dataset=cifar100',
    '--models=fedasmu_cnn',
    '--num_rounds=0',
    '--no_such_flag=1',
  ],
)
def test_binary_rejects_bad_flags_with_one_line(flag, tmp_path):
  result = _run(flag, f'--workdir={tmp_path}')
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  assert 'Traceback' not in result.stderr and not os.listdir(tmp_path)
  if flag.startswith('--methods'):
    assert "'fedcompass' is invalid; allowed values: fedasmu,fedavg,fedprox" in lines[0]
    assert 'fedasmu_h3' in lines[0]
  if flag.startswith('--models'):
    assert 'allowed values: lenet5 (for --dataset=fashion_mnist)' in lines[0]


@pytest.fixture(scope='module')
def tiny_fashion_mnist(tmp_path_factory):
  """A data dir with a 300 + 100 example Fashion-MNIST-shaped dataset (random pixels; the
  labels are a function of the mean pixel, so that something is learnable)."""
  import tensorflow_datasets as tfds

  from fedsim_jax.data.prepare import write_data_dir

  rng = np.random.default_rng(0)
  data_dir = tmp_path_factory.mktemp('data')

  def examples(n):
    images = rng.integers(0, 256, (n, 28, 28, 1), np.uint8)
    labels = np.minimum((images.mean(axis=(1, 2, 3)) - 120) // 3 + 5, 9).clip(0).astype(int)
    return [{'image': image, 'label': int(label)} for image, label in zip(images, labels)]

  features = tfds.features.FeaturesDict(
    {
      'image': tfds.features.Tensor(shape=(28, 28, 1), dtype=np.uint8),
      'label': tfds.features.ClassLabel(num_classes=10),
    }
  )
  write_data_dir(
    data_dir,
    'fashion_mnist',
    '1.0.0',
    features,
    {'train': examples(300), 'test': examples(100)},
    ('image', 'label'),
  )
  return data_dir


def test_binary_missing_dataset_is_one_line(tiny_fashion_mnist, tmp_path):
  result = _run(
    f'--data_dir={tiny_fashion_mnist}',
    '--dataset=cifar10',
    '--methods=fedavg',
    '--num_clients=10',
    f'--workdir={tmp_path}',
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: ') and 'cifar10' in lines[0]
  assert 'Traceback' not in result.stderr


# In `make test-slow` (about 14 s); the binary's flag and dataset errors above, and the other
# kits' binaries on the same reproduction machinery, stay in `make test`.
@pytest.mark.slow
def test_binary_end_to_end_on_a_tiny_federation(tiny_fashion_mnist, tmp_path):
  flags = [
    f'--data_dir={tiny_fashion_mnist}',
    '--methods=fedasync,fedavg,fedbuff',
    '--seeds=0',
    '--num_clients=10',
    '--num_rounds=4',
    '--local_epochs=1',
    '--batch_size=16',
    '--eval_every=2',
    f'--workdir={tmp_path}',
  ]
  result = _run(*flags, timeout=300)
  assert result.returncode == 0, result.stderr
  with open(tmp_path / 'results.jsonl', encoding='utf-8') as f:
    records = [json.loads(line) for line in f]
  assert [(r['method'], r['model'], r['dataset'], r['seed']) for r in records] == [
    ('fedasync', 'lenet5', 'fashion_mnist', 0),
    ('fedavg', 'lenet5', 'fashion_mnist', 0),
    ('fedbuff', 'lenet5', 'fashion_mnist', 0),
  ]
  for record in records:
    assert 0 <= record['final_accuracy'] <= record['best_accuracy'] <= 1
    assert record['final_version'] == 4 and record['final_virtual_time'] > 0
    assert record['target_accuracy'] == 0.7
  config = json.loads(
    (tmp_path / 'fashion_mnist' / 'lenet5' / 'fedbuff' / 'seed0' / 'config.json').read_text(
      encoding='utf-8'
    )
  )
  assert config['latency']['name'] == 'device_ratio' and config['latency']['kwargs']['ratio'] == 5.0
  kwargs = config['algorithm']['kwargs']
  assert kwargs['concurrency'] == 1 and kwargs['buffer_size'] == 1
  assert config['client']['learning_rate'] == 0.005
  text = (tmp_path / 'tables.md').read_text(encoding='utf-8')
  assert text in result.stdout
  assert _row(text, 'FedAvg')[1] == '0.706' and _row(text, 'FedAvg')[4] == '65,000'
  assert _row(text, 'FedBuff')[4] == '27,179'
  # Resuming writes the same tables from the finished runs without running anything.
  again = _run(*flags, '--only_existing', timeout=120)
  assert again.returncode == 0, again.stderr
  assert again.stdout.count(': reused') == 3


def _seeded(method, finals, times, end=1000.0):
  return [
    dict(
      method=method,
      model='lenet5',
      dataset='fashion_mnist',
      seed=seed,
      final_accuracy=final,
      best_accuracy=final,
      time_to_target=time,
      final_version=500,
      final_virtual_time=end,
    )
    for seed, (final, time) in enumerate(zip(finals, times))
  ]


def test_the_papers_conclusions_paired_on_the_seeds():
  records = (
    _seeded('fedasmu', [0.80, 0.70, 0.75], [100.0, 300.0, None])
    + _seeded('fedsa', [0.78, 0.74, 0.76], [200.0, 250.0, 400.0])
    + _seeded('fedasmu_da', [0.79, 0.69, 0.74], [150.0, 250.0, 300.0])
    + _seeded('fedasmu_fa', [0.78, 0.71, 0.75], [100.0, 300.0, 300.0])
  )
  found = {c.claim: c for c in tables.claims(records)[('lenet5', 'fashion_mnist')]}
  best = found['FedASMU is the most accurate method']
  assert best.paper == 'FedASMU 0.829 vs FedSA 0.783 (+4.6 pp)'
  assert best.quantity == 'FedASMU − FedSA, final accuracy (pp)'
  assert {s: round(v.value, 6) for s, v in best.seeds.items()} == {0: 2.0, 1: -4.0, 2: -1.0}
  assert agreement.assess(best).reason == 'seeds on both sides'
  first = found['FedASMU reaches the target first']
  # Seed 2: FedASMU missed (ended at 1,000 s), FedSA reached at 400 s: later by more than 600 s.
  assert first.seeds == {
    0: agreement.Value(-100.0),
    1: agreement.Value(50.0),
    2: agreement.Value(600.0, '>'),
  }
  dynamic = found['FedASMU is more accurate than FedASMU-DA']
  assert dynamic.paper == '1.38 to 4.32 pp'
  assert {s: round(v.value, 6) for s, v in dynamic.seeds.items()} == {0: 1.0, 1: 1.0, 2: 1.0}
  assert agreement.assess(dynamic).verdict == agreement.AGREES
  # Equal times to the target are a tie, not a side (seed 1).
  sooner = found['FedASMU reaches the target sooner than FedASMU-FA']
  assert sooner.seeds[1] == agreement.Value(0.0)
  assert agreement.assess(sooner).reason == 'a tie on seed 0, 1'
  text = tables.agreement_table(records)
  assert text.startswith('**LeNet FMNIST**') and text.count(agreement.CRITERION) == 1
