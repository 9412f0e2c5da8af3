"""The privacy, robustness and compression study: run grid, configs, tables, the papers'
findings on hand-made records, the sweep end to end on a small federation, and flag errors."""

import json
import os
import subprocess
import sys

import pytest

from experiments import agreement
from experiments.transforms import reproduce, setups, tables
from fedsim_jax.experiment import validate
from fedsim_jax.run_spec import RunSpec

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BINARY = os.path.join(_REPO, 'experiments', 'transforms', 'reproduce.py')


def _all_cells():
  return [cell for experiment in setups.EXPERIMENTS for cell in setups.cells(experiment)]


def test_the_grid_has_every_cell_once_and_shares_only_the_plain_run():
  cells = _all_cells()
  privacy = [c for c in cells if c.experiment == 'privacy']
  attacks = [c for c in cells if c.experiment == 'attacks']
  compression = [c for c in cells if c.experiment == 'compression']
  assert len(privacy) == 2 * (1 + len(setups.NOISE_MULTIPLIERS))
  assert len(attacks) == 2 * len(setups.AGGREGATORS) * (1 + 2 * 2)
  assert len(compression) == 2 * 3
  directories = {}
  for cell in cells:
    directories.setdefault(cell.run_dir(0), []).append(cell)
  shared = {d: c for d, c in directories.items() if len(c) > 1}
  # The non-private run and the unattacked mean are the same config: one run per algorithm.
  assert sorted(shared) == [os.path.join(a, 'plain', 'seed0') for a in setups.ALGORITHMS]
  for algorithm in setups.ALGORITHMS:
    privacy_plain, attacks_plain = shared[os.path.join(algorithm, 'plain', 'seed0')]
    assert setups.make_config(privacy_plain, 0).to_dict() == (
      setups.make_config(attacks_plain, 0).to_dict()
    )
  assert setups.Cell('privacy', 'fedavg', noise_multiplier=0.5).run_dir(2) == os.path.join(
    'fedavg', 'dp_z0.5', 'seed2'
  )


@pytest.mark.parametrize('cell', _all_cells(), ids=lambda c: c.run_dir(0).replace(os.sep, '-'))
def test_every_config_is_valid(cell):
  config = setups.make_config(cell, seed=3, data_dir='/nonexistent')
  validate(config)  # Krum's f, trimmed mean's beta and DP's denominator fit the batch
  spec = RunSpec.from_config(config)
  assert spec.seed == 3 and spec.model.name == 'mlp' and spec.data.num_clients == 100
  assert spec.client.local_steps == 10 and spec.client.learning_rate == 0.1
  if cell.experiment == 'compression':
    assert spec.run.max_virtual_time == setups.COMPRESSION_SECONDS
    assert spec.run.num_rounds is None
    assert spec.latency.name == 'device_ratio'
    assert spec.latency.settings.bandwidth == setups.BANDWIDTH
    assert spec.compression.name == cell.compression
  else:
    # FedBuff runs twice FedAvg's versions: both train the same client updates.
    scale = 1 if cell.algorithm == 'fedavg' else 2
    assert spec.run.num_rounds == setups.DEFAULT_ROUNDS * scale
    assert spec.latency.name == 'per_step'
  if cell.experiment == 'privacy':
    expected = 'none' if cell.noise_multiplier is None else 'dp_gaussian'
    assert spec.privacy.name == expected
    if cell.noise_multiplier is not None:
      assert spec.privacy.settings.noise_multiplier == cell.noise_multiplier
      assert spec.privacy.settings.clip_norm == setups.CLIP_NORM
  if cell.experiment == 'attacks':
    assert spec.robust.name == cell.robust
    assert spec.attack.name == cell.attack
    if cell.attack != 'none':
      assert spec.attack.settings.fraction == cell.fraction


def test_krum_takes_the_largest_f_the_batch_allows():
  assert setups.robust_settings('krum', 'fedavg') == {'num_byzantine': 8}  # 20 >= 2 * 8 + 3
  assert setups.robust_settings('multi_krum', 'fedbuff') == {'num_byzantine': 3, 'num_selected': 7}


def _record(experiment, algorithm, seed, final, **fields):
  cell = setups.Cell(experiment, algorithm, **fields)
  record = dict(cell.record(), seed=seed, final_accuracy=final, best_accuracy=final + 0.01)
  record.update(final_version=60, final_virtual_time=90.0, client_updates=1200)
  return record


def _privacy_records():
  records = []
  for seed in range(3):
    for z, final, epsilon in ((None, 0.82, None), (0.3, 0.78, 40.0), (1.0, 0.60 + seed / 100, 4.0)):
      for algorithm in ('fedavg', 'fedbuff'):
        shift = 0.0 if algorithm == 'fedavg' else -0.2 * (z is not None)
        record = _record('privacy', algorithm, seed, final + shift, noise_multiplier=z)
        record['epsilon'] = epsilon
        records.append(record)
  return records


def test_privacy_table_and_findings():
  records = _privacy_records()
  table = tables.privacy_table(records)
  assert '| DP-FedAvg | 1 | 4.00 | 60 | 61.0 ± 1.0 | 62.0 ± 1.0 | 3 |' in table
  assert '| FedAvg | non-private | ∞ | 60 | 82.0 ± 0.0 |' in table
  found = tables.privacy_claims(records)
  assert list(found) == ['FedAvg', 'FedBuff', 'DP-FedBuff against DP-FedAvg']
  noise_costs, more_noise = found['FedAvg']
  assert {s: round(v.value, 6) for s, v in noise_costs.seeds.items()} == {0: -22, 1: -21, 2: -20}
  assert agreement.assess(noise_costs).verdict == agreement.AGREES
  assert agreement.assess(more_noise).verdict == agreement.AGREES
  # 20 points below DP-FedAvg on every seed: the FedBuff paper's finding does not hold here.
  (buffered,) = found['DP-FedBuff against DP-FedAvg']
  assert (buffered.side, buffered.threshold) == ('>', -1.0)
  assert agreement.assess(buffered).verdict == agreement.DOES_NOT_AGREE


def _attack_records():
  finals = {  # (robust, attack): final accuracy per seed
    ('mean', 'none'): (0.82, 0.81, 0.83),
    ('mean', 'sign_flip'): (0.50, 0.55, 0.45),
    ('median', 'none'): (0.79, 0.80, 0.80),
    ('median', 'sign_flip'): (0.78, 0.77, 0.79),
    ('norm_bounding', 'sign_flip'): (0.70, 0.71, 0.72),
    ('krum', 'sign_flip'): (0.52, 0.56, 0.44),  # on both sides of the mean
  }
  records = []
  for (robust, attack), values in finals.items():
    fraction = None if attack == 'none' else 0.2
    for seed, final in enumerate(values):
      records.append(
        _record('attacks', 'fedavg', seed, final, attack=attack, fraction=fraction, robust=robust)
      )
  return records


def test_attack_table_and_findings():
  records = _attack_records()
  table = tables.attack_table(records)
  assert '| Aggregator | no attack | sign flip (s 3), 20% |' in table
  assert '| mean (no defence) | 82.0 ± 1.0 | 50.0 ± 5.0 |' in table
  assert '| Krum | n/a | 50.7 ± 6.1 |' in table
  found = tables.attack_claims(records)
  assert list(found) == ['FedAvg, sign flip (s 3), 20%']
  by_claim = {c.claim: c for c in found['FedAvg, sign flip (s 3), 20%']}
  mean = by_claim['The mean is not robust: the attack lowers its accuracy']
  assert agreement.assess(mean).verdict == agreement.AGREES
  median = by_claim['coordinate-wise median withstands the attack better than the mean']
  assert {s: round(v.value, 6) for s, v in median.seeds.items()} == {0: 28, 1: 22, 2: 34}
  assert agreement.assess(median).verdict == agreement.AGREES
  krum = by_claim['Krum withstands the attack better than the mean']
  assert agreement.assess(krum).reason == 'seeds on both sides'
  # Norm bounding is a defence against boosted updates only: no claim under sign flipping.
  assert not any(claim.startswith('norm bounding') for claim in by_claim)


def _compression_records():
  records = []
  for seed in range(3):
    dense = _record('compression', 'fedbuff', seed, 0.84, compression='none')
    dense.update(
      final_version=300,
      time_to_target=2000.0 + 10 * seed,
      final_virtual_time=3000.0,
      upload_bytes=796840,
      compression_ratio=1.0,
      curve=[[0, 0.0, 0.1, None], [150, 1500.0, 0.78, None], [300, 3000.0, 0.84, None]],
    )
    top_k = _record('compression', 'fedbuff', seed, 0.86, compression='top_k')
    top_k.update(
      final_version=600,
      time_to_target=900.0,
      final_virtual_time=3000.0,
      client_updates=6000,
      upload_bytes=15944,
      compression_ratio=0.02,
      curve=[[0, 0.0, 0.1, None], [290, 1400.0, 0.838, None], [600, 3000.0, 0.86, None]],
    )
    qsgd = _record('compression', 'fedbuff', seed, 0.70, compression='qsgd')
    qsgd.update(
      final_version=500,
      time_to_target=None,  # missed the target on every seed
      final_virtual_time=3000.0,
      client_updates=5000,
      upload_bytes=124512,
      compression_ratio=0.156,
      curve=[[0, 0.0, 0.1, None], [300, 1800.0, 0.65, None], [500, 3000.0, 0.70, None]],
    )
    records += [dense, top_k, qsgd]
  return records


def test_compression_table_and_findings():
  records = _compression_records()
  for record in records:
    record['target_accuracy'] = 0.8
  table = tables.compression_table(records)
  assert '| FedBuff | dense float32 | 796,840 | 100.0% | 300-300 | 84.0 ± 0.0 | 2,010 |' in table
  assert '| FedBuff | top-1% + error feedback | 15,944 | 2.0% | 600-600 |' in table
  assert '| > 3,000 (3 missed) |' in table
  found = tables.compression_claims(records)
  by_claim = {c.claim: c for c in found['FedBuff']}
  faster = by_claim[
    'top-1% + error feedback reaches the target accuracy in less virtual time than dense uploads'
  ]
  assert agreement.assess(faster).verdict == agreement.AGREES
  # At the dense run's last version (300) top-k's last evaluation is version 290: 83.8 - 84.
  rate = by_claim[
    'top-1% + error feedback loses at most 1 point of accuracy at the same number of server versions'
  ]
  assert {s: round(v.value, 6) for s, v in rate.seeds.items()} == {0: -0.2, 1: -0.2, 2: -0.2}
  assert agreement.assess(rate).verdict == agreement.AGREES
  # QSGD missed the target: its time is a lower bound, and > 3000 - 2000 decides nothing.
  slow = by_claim[
    'QSGD, 16 levels reaches the target accuracy in less virtual time than dense uploads'
  ]
  assert slow.seeds[0] == agreement.Value(1000.0, '>')
  assert agreement.assess(slow).verdict == agreement.DOES_NOT_AGREE
  lossy = by_claim[
    'QSGD, 16 levels loses at most 1 point of accuracy at the same number of server versions'
  ]
  assert agreement.assess(lossy).verdict == agreement.DOES_NOT_AGREE


def test_write_outputs_writes_results_and_the_experiments_tables(tmp_path):
  records = _attack_records()
  settings = {'experiment': 'attacks', 'seeds': [0, 1, 2]}
  output = tmp_path / 'tables.md'
  tables.write_outputs(records, settings, str(tmp_path), str(output), wall_seconds=3.0)
  with open(tmp_path / 'results.jsonl', encoding='utf-8') as f:
    assert [json.loads(line) for line in f] == records
  text = output.read_text(encoding='utf-8')
  assert '| mean (no defence) | 82.0 ± 1.0 |' in text and agreement.CRITERION in text


def _small(make_config):
  """The kit's configs on scikit-learn digits with 40 clients and a short clock."""

  def make(cell, seed, data_dir=None, rounds=1, eval_every=1):
    config = make_config(cell, seed, data_dir, rounds, eval_every)
    config.data.name = 'digits'
    config.data.num_clients = 40
    if cell.experiment == 'compression':
      config.run.max_virtual_time = 20.0
      config.run.eval_every = 2
    return config

  return make


@pytest.mark.timeout(600)
def test_the_sweep_runs_records_and_reuses_its_runs(digits_data_dir, tmp_path, monkeypatch):
  monkeypatch.setattr(setups, 'make_config', _small(setups.make_config))
  settings = {
    'experiment': 'compression',
    'algorithms': ['fedbuff'],
    'noise_multipliers': [1.0],
    'attacks': ['sign_flip'],
    'fractions': [0.2],
    'aggregators': ['mean'],
    'compressors': ['none', 'top_k'],
    'seeds': [0],
    'rounds': 2,
    'eval_every': 1,
  }
  lines = []
  records = reproduce.run_sweep(settings, str(tmp_path), str(digits_data_dir), lines.append)
  assert [line.split(':')[1].split()[0] for line in lines] == ['ran', 'ran']
  dense, top_k = records
  assert (dense['compression'], top_k['compression']) == ('none', 'top_k')
  assert top_k['compression_ratio'] == pytest.approx(0.02, abs=0.001)
  assert top_k['upload_bytes'] < dense['upload_bytes']
  # On a 100 kB/s link the sparse uploads leave time for more server versions.
  assert top_k['final_version'] > dense['final_version']
  assert [point[0] for point in dense['curve']][:2] == [0, 2]
  assert dense['code'] and dense['workdir'].endswith(os.path.join('none', 'seed0'))
  again = []
  assert reproduce.run_sweep(settings, str(tmp_path), str(digits_data_dir), again.append) == (
    records
  )
  assert all(': reused' in line for line in again)


@pytest.mark.parametrize(
  'flag',
  [
    '--experiment=dp',
    '--aggregators=mean,bulyan',
    '--fractions=0.2,1.5',
    '--noise_multipliers=0',
    '--seeds=',
    '--rounds=0',
  ],
)
def test_binary_rejects_bad_flags_with_one_line(flag, tmp_path):
  result = subprocess.run(
    [sys.executable, _BINARY, flag, f'--workdir={tmp_path}'],
    capture_output=True,
    text=True,
    cwd=_REPO,
    timeout=120,
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith('error: ') and flag.split('=')[0] in lines[0]
  assert not os.listdir(tmp_path)
