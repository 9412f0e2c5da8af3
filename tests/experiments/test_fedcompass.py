"""FedCompass reproduction: paper tables, configs, result tables and the binary's flag errors."""

import json
import math
import os
import subprocess
import sys

import pytest

from experiments import agreement
from experiments.fedcompass import tables
from experiments.sweep import table_row as _row
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import validate

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _record(
  algorithm: str,
  seed: int,
  time_to_target: float | None,
  best: float = 0.95,
  m: int = 5,
  speed: str = 'normal',
  partition: str = 'class',
  **extra,
) -> dict:
  return dict(
    algorithm=algorithm,
    partition=partition,
    m=m,
    speed=speed,
    seed=seed,
    time_to_target=time_to_target,
    best_accuracy=best,
    **extra,
  )


# ------------------------------------------------------------------------------------------------
# Paper tables.


def test_paper_tables_cover_every_cell():
  for table in (tables.PAPER_TABLE_1, tables.PAPER_TOP_ACCURACY):
    assert len(table) == 2 * 3 * 3 * 8
    for partition in tables.PARTITIONS:
      for m in tables.NUM_CLIENTS:
        for speed in tables.SPEEDS:
          for algorithm in tables.ALGORITHMS:
            assert (partition, m, speed, algorithm) in table
  assert len(tables.PAPER_Q_RATIO_TIME) == len(tables.PAPER_Q_RATIO_TOP_ACCURACY) == 2 * 9 * 7


def test_paper_table_values_spot_checks():
  t1 = tables.PAPER_TABLE_1
  assert t1[('class', 20, 'exponential', 'fedavgm')] == 13.73
  assert t1[('class', 20, 'homogeneous', 'fedat')] == 0.97
  assert t1[('class', 10, 'homogeneous', 'fedasync')] is None
  assert t1[('dual_dirichlet', 20, 'normal', 'fedasync')] is None
  assert t1[('dual_dirichlet', 5, 'homogeneous', 'fedcompass_m')] == 0.72
  assert all(
    t1[(p, m, s, 'fedcompass')] == 1.0
    for p in tables.PARTITIONS
    for m in tables.NUM_CLIENTS
    for s in tables.SPEEDS
  )
  top = tables.PAPER_TOP_ACCURACY
  assert top[('class', 5, 'homogeneous', 'fedavg')] == (92.42, 3.96)
  assert top[('dual_dirichlet', 20, 'homogeneous', 'fedasync')] == (78.49, 6.28)
  assert top[('dual_dirichlet', 20, 'exponential', 'fedcompass_n')] == (97.92, 0.50)
  assert tables.PAPER_Q_RATIO_TIME[('class', 5, 'exponential', 0.6)] == 2.64
  assert tables.PAPER_Q_RATIO_TIME[('dual_dirichlet', 20, 'normal', 1.0)] is None
  assert tables.PAPER_Q_RATIO_TOP_ACCURACY[('dual_dirichlet', 10, 'homogeneous', 0.05)] == (
    95.64,
    3.15,
  )


# ------------------------------------------------------------------------------------------------
# Configs.


@pytest.mark.parametrize('algorithm', tables.ALGORITHMS)
def test_make_config_is_valid_with_paper_settings(algorithm):
  for partition in tables.PARTITIONS:
    for m, q, q_min, k in ((5, 200, 40, 3), (10, 200, 40, 3), (20, 100, 20, 5)):
      for speed in tables.SPEEDS:
        config = tables.make_config(
          algorithm,
          partition,
          m,
          speed,
          seed=3,
          data_dir='/data',
          sync_budget=100.0,
          async_budget=50.0,
          eval_every=2,
        )
        settings = validate(config)
        assert config.algorithm.name == algorithm
        assert config.seed == 3
        assert config.data.name == 'mnist'
        assert config.partition.name == partition
        assert config.data.num_clients == m
        assert config.data.data_dir == '/data'
        assert config.model.name == 'mnist_cnn'
        assert (config.client.optimizer, config.client.learning_rate, config.client.batch_size) == (
          'adam',
          0.003,
          64,
        )
        assert config.latency.kwargs.distribution == speed
        assert config.latency.kwargs.mean == 0.15
        assert config.latency.kwargs.jitter == 0.05
        assert config.run.target_accuracy == 0.9
        assert config.run.num_rounds is None
        assert config.run.eval_every == 2
        assert config.run.max_virtual_time == (100.0 if algorithm in tables.SYNCHRONOUS else 50.0)
        if algorithm in tables.COMPASS:
          assert config.client.local_steps is None
          assert (settings.q_min, settings.q_max) == (q_min, q)
          assert settings.latest_time_factor == 1.2
          assert (settings.alpha, settings.staleness_a) == (0.9, 0.5)
        else:
          assert config.client.local_steps == q
        if algorithm == 'fedbuff':
          assert settings.buffer_size == k
          assert settings.concurrency == m
          assert settings.normalization == 'sum'
          assert settings.server_learning_rate == 0.9
        if algorithm == 'fedasync':
          assert settings.concurrency == m
          assert settings.form == 'delta'
          assert settings.alpha == 0.9
        if algorithm in ('fedavg', 'fedavgm', 'fedat'):
          assert settings.cohort_size == m
  if algorithm in ('fedavgm', 'fedcompass_m'):
    assert settings.server_momentum == 0.9
  if algorithm == 'fedat':
    assert settings.tier_ratio == 2.0


@pytest.mark.parametrize(
  'q_ratio, m, expected',
  [(0.05, 5, 10), (0.05, 20, 5), (0.1, 10, 20), (0.4, 20, 40), (0.6, 5, 120), (1.0, 20, 100)],
)
def test_make_config_q_ratio(q_ratio, m, expected):
  config = tables.make_config(
    'fedcompass', 'dual_dirichlet', m, 'exponential', 0, q_ratio=q_ratio, latest_time_factor=1.5
  )
  settings = validate(config)
  assert settings.q_min == expected
  assert settings.q_max == tables.LOCAL_STEPS[m]
  assert settings.latest_time_factor == 1.5


def test_make_config_rejects_bad_settings():
  with pytest.raises(ConfigError, match='algorithm'):
    tables.make_config('fedprox', 'class', 5, 'normal', 0)
  with pytest.raises(ConfigError, match='num_clients'):
    tables.make_config('fedavg', 'class', 7, 'normal', 0)
  with pytest.raises(ConfigError, match='q_ratio'):
    tables.make_config('fedavg', 'class', 5, 'normal', 0, q_ratio=0.1)
  with pytest.raises(ConfigError, match='q_ratio'):
    tables.make_config('fedcompass', 'class', 5, 'normal', 0, q_ratio=1.5)


def test_variant_name():
  assert tables.variant_name('fedcompass') == 'fedcompass'
  assert tables.variant_name('fedcompass', 0.2, 1.2) == 'fedcompass'
  assert tables.variant_name('fedcompass_m', 0.05) == 'fedcompass_m_q0.05'
  assert tables.variant_name('fedcompass', 0.2, 1.5) == 'fedcompass_lambda1.5'


# ------------------------------------------------------------------------------------------------
# Result tables.


def _synthetic_results() -> list[dict]:
  return [
    # FedCompass: mean time 100.
    _record('fedcompass', 0, 80.0, best=0.96),
    _record('fedcompass', 1, 120.0, best=0.94),
    # FedAvg: mean 250 over both seeds -> 2.50.
    _record('fedavg', 0, 200.0, best=0.91),
    _record('fedavg', 1, 300.0, best=0.93),
    # FedBuff: 3 seeds, one miss (< half) -> mean of the two hits 150 -> 1.50.
    _record('fedbuff', 0, 100.0),
    _record('fedbuff', 1, None),
    _record('fedbuff', 2, 200.0),
    # FedAsync: 2 seeds, one miss (exactly half) -> '-'.
    _record('fedasync', 0, 50.0),
    _record('fedasync', 1, None),
    # FedCompass+M: 90 -> 0.90.
    _record('fedcompass_m', 0, 90.0),
    _record('fedcompass_m', 1, 90.0),
  ]


def test_mean_time_to_target_half_rule():
  assert tables.mean_time_to_target([_record('a', 0, 10.0), _record('a', 1, 20.0)]) == 15.0
  assert tables.mean_time_to_target([_record('a', 0, 10.0), _record('a', 1, None)]) is None
  assert (
    tables.mean_time_to_target(
      [_record('a', 0, 10.0), _record('a', 1, None), _record('a', 2, 30.0)]
    )
    == 20.0
  )
  assert tables.mean_time_to_target([_record('a', 0, None)]) is None


def test_relative_times():
  relative = tables.relative_times(_synthetic_results())
  cell = ('class', 5, 'normal')
  assert relative[cell + ('fedcompass',)] == 1.0
  assert relative[cell + ('fedavg',)] == pytest.approx(2.5)
  assert relative[cell + ('fedbuff',)] == pytest.approx(1.5)
  assert relative[cell + ('fedasync',)] is None
  assert relative[cell + ('fedcompass_m',)] == pytest.approx(0.9)


def test_relative_time_table_shows_ours_and_paper():
  markdown = tables.relative_time_table(_synthetic_results())
  assert 'MNIST-Class Partition' in markdown
  header = next(line for line in markdown.splitlines() if line.startswith('| Method'))
  assert header == '| Method | 5-normal |'
  assert _row(markdown, 'FedCompass') == ['1.00 (1.00)']
  assert _row(markdown, 'FedAvg') == ['2.50 (2.82)']
  assert _row(markdown, 'FedBuff') == ['1.50 (1.57)']
  assert _row(markdown, 'FedAsync') == ['- (2.34)']
  assert _row(markdown, 'FedCompass+M') == ['0.90 (1.19)']
  assert _row(markdown, 'seeds') == ['3']
  names = [line.split('|')[1].strip() for line in markdown.splitlines()[4:]]
  assert names == ['FedAvg', 'FedAsync', 'FedBuff', 'FedCompass', 'FedCompass+M', 'seeds']


def test_relative_time_table_without_fedcompass_or_when_it_misses():
  no_reference = tables.relative_time_table([_record('fedavg', 0, 10.0)])
  assert _row(no_reference, 'FedAvg') == ['n/a (2.82)']
  missed = tables.relative_time_table([_record('fedcompass', 0, None), _record('fedavg', 0, 10.0)])
  assert _row(missed, 'FedCompass') == ['- (1.00)']
  assert _row(missed, 'FedAvg') == ['- (2.82)']


def test_relative_time_table_q_ratio_rows_use_table_19():
  results = [
    _record('fedcompass', 0, 100.0, speed='exponential'),
    _record('fedcompass', 0, 50.0, speed='exponential', q_ratio=0.05),
    _record('fedcompass', 0, 70.0, speed='exponential', latest_time_factor=2.0),
  ]
  markdown = tables.relative_time_table(results)
  assert _row(markdown, 'FedCompass (1/Q=0.05)') == ['0.50 (0.92)']
  assert _row(markdown, 'FedCompass (λ=2)') == ['0.70']


def test_top_accuracy_table_mean_std():
  markdown = tables.top_accuracy_table(_synthetic_results())
  # FedCompass: 96 and 94 -> mean 95, sample std sqrt(2) = 1.41.
  assert _row(markdown, 'FedCompass') == ['95.00±1.41 (95.54±2.89)']
  # FedAvg: 91 and 93 -> 92 ± 1.41.
  assert _row(markdown, 'FedAvg') == ['92.00±1.41 (92.42±3.96)']
  single = tables.top_accuracy_table(
    [_record('fedat', 0, None, best=0.9, m=20, partition='dual_dirichlet', speed='homogeneous')]
  )
  assert 'MNIST-Dirichlet Partition' in single
  assert _row(single, 'FedAT') == ['90.00±0.00 (95.26±2.47)']


def test_mean_std():
  assert tables.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
  assert tables.mean_std([5.0]) == (5.0, 0.0)


def test_spearman():
  assert tables.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
  assert tables.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
  assert tables.spearman([1, 2], [1, 2]) is None
  assert tables.spearman([1, 1, 1], [1, 2, 3]) is None
  # Ties take their average rank: ranks (1.5, 1.5, 3) vs (1, 2, 3).
  assert tables.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)


def test_ordering_ranks_the_methods_without_fedcompass():
  (row,) = tables.ordering(_synthetic_results())
  assert (row['partition'], row['m'], row['speed']) == ('class', 5, 'normal')
  assert row['fastest_baseline'] == 'fedbuff'
  assert row['paper_fastest_baseline'] == 'fedbuff'
  # FedCompass's relative time is 1 by definition in both: left out. Ours FedAvg 2.50, FedBuff
  # 1.50, +M 0.90; the paper's 2.82, 1.57, 1.19: the same order, rho = 1 over three methods.
  assert row['methods'] == ['fedavg', 'fedbuff', 'fedcompass_m']
  assert row['spearman'] == pytest.approx(1.0)
  markdown = tables.ordering_table(_synthetic_results())
  assert '| MNIST-Class Partition | 5-normal | FedBuff | FedBuff | +1.00 | 3: FedAvg,' in markdown


def test_ordering_when_a_baseline_wins():
  results = [
    _record('fedcompass', 0, 100.0, m=20, speed='homogeneous'),
    _record('fedat', 0, 90.0, m=20, speed='homogeneous'),
    _record('fedavg', 0, 150.0, m=20, speed='homogeneous'),
  ]
  (row,) = tables.ordering(results)
  assert row['fastest_baseline'] == 'fedat'
  assert row['paper_fastest_baseline'] == 'fedat'  # the paper's FedAT 0.97x in this cell
  assert tables.ordering_table([_record('fedcompass', 0, None)]).startswith('No cell')


def _cell(algorithm, times, bests, end=600.0, **extra):
  return [
    _record(algorithm, seed, time, best=best, final_virtual_time=end, **extra)
    for seed, (time, best) in enumerate(zip(times, bests))
  ]


def test_the_papers_conclusions_per_cell_with_targets_missed():
  results = (
    _cell('fedcompass', [80.0, 120.0], [0.97, 0.96])
    + _cell('fedbuff', [None, None], [0.90, 0.91])
    + _cell('fedat', [150.0, 200.0], [0.93, 0.92])
    + _cell('fedavg', [None, None], [0.91, 0.91], end=1200.0)
  )
  first, second = tables.cell_claims(
    'class', 5, 'normal', tables._cells(results)[0]['class'][(5, 'normal')]
  )
  # Before every baseline: FedCompass minus the fastest baseline (FedAT; the misses end later).
  assert first.seeds == {0: agreement.Value(-70.0), 1: agreement.Value(-80.0)}
  assert first.paper == 'FedCompass 1.00 vs FedBuff 1.57 (relative time)'
  assert agreement.assess(first).verdict == agreement.AGREES
  # Top accuracy against the best of the other asynchronous algorithms (FedAT here).
  assert {s: round(v.value, 6) for s, v in second.seeds.items()} == {0: 4.0, 1: 4.0}
  assert agreement.assess(second).verdict == agreement.AGREES
  # FedCompass missing the target on its one seed while FedAvgM reaches it: a bound, one seed.
  results = _cell('fedcompass', [None], [0.88], end=594.0, speed='exponential') + _cell(
    'fedavgm', [587.0], [0.97], end=1185.0, speed='exponential'
  )
  # (no other asynchronous algorithm ran: no top-accuracy conclusion)
  (first,) = tables.cell_claims(
    'class', 5, 'exponential', tables._cells(results)[0]['class'][(5, 'exponential')]
  )
  assert first.seeds == {0: agreement.Value(7.0, '>')}
  assessment = agreement.assess(first)
  assert (assessment.verdict, assessment.reason) == (agreement.INCONCLUSIVE, 'one seed')
  assert '| 0: > +7.0 |' in tables.agreement_table(results)


# ------------------------------------------------------------------------------------------------
# The binary.


@pytest.mark.parametrize(
  'flag', ['--algorithms=fedavg,bogus', '--sync_budget=-1', '--no_such_flag']
)
def test_binary_rejects_bad_flags_with_one_line(flag, tmp_path):
  result = subprocess.run(
    [
      sys.executable,
      os.path.join(_REPO, 'experiments', 'fedcompass', 'reproduce.py'),
      flag,
      f'--workdir={tmp_path}',
    ],
    capture_output=True,
    text=True,
    cwd=_REPO,
    timeout=120,
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith('error: ')
  assert not os.listdir(tmp_path)


def _reproduce(*flags, cwd=_REPO):
  return subprocess.run(
    [sys.executable, os.path.join(_REPO, 'experiments', 'fedcompass', 'reproduce.py'), *flags],
    capture_output=True,
    text=True,
    cwd=cwd,
    timeout=120,
  )


def test_set_changes_the_named_algorithms_runs_and_a_bad_one_stops_before_any_run(tmp_path):
  # A finished FedAsync run made with the paper's staleness factor.
  run_dir = tmp_path / 'class' / 'm5' / 'normal' / 'fedasync' / 'seed0'
  run_dir.mkdir(parents=True)
  saved = tables.make_config('fedasync', 'class', 5, 'normal', 0).to_dict()
  (run_dir / 'config.json').write_text(json.dumps(saved))
  (run_dir / 'summary.json').write_text(
    json.dumps({'status': 'completed', 'best_accuracy': 0.5, 'host': {'seconds': 1.0}})
  )
  common = [
    '--algorithms=fedasync,fedavg',
    '--num_clients=5',
    '--speeds=normal',
    '--seeds=0',
    '--only_existing',
    f'--workdir={tmp_path}',
    f'--output={tmp_path / "tables.md"}',
  ]
  # Changed for FedAsync only: the reused run is reported as made with another setting.
  result = _reproduce(*common, '--set=fedasync:algorithm.kwargs.staleness=constant')
  assert result.returncode == 0, result.stderr
  out = result.stdout + result.stderr
  assert 'fedasync seed=0: reused' in out
  assert "(warning: run with algorithm.kwargs.staleness='polynomial'" in out
  assert 'fedavg seed=0: missing' in out
  result = _reproduce(*common)
  assert result.returncode == 0 and 'warning' not in result.stdout + result.stderr
  # A misspelt field: one line, exit 2, before any run.
  result = _reproduce(*common, '--set=fedasync:algorithm.kwargs.stalenes=constant')
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "did you mean 'staleness'" in lines[0], result.stderr


def test_write_outputs_writes_results_and_tables(tmp_path):
  import json

  records = _synthetic_results()
  settings = {'seeds': [0, 1, 2], 'sync_budget': 100.0, 'async_budget': 50.0, 'eval_every': 1}
  output = tmp_path / 'out' / 'tables.md'
  tables.write_outputs(records, settings, str(tmp_path), str(output), wall_seconds=12.0)
  with open(tmp_path / 'results.jsonl', encoding='utf-8') as f:
    assert [json.loads(line) for line in f] == records
  text = output.read_text(encoding='utf-8')
  for section in (
    '## Relative time to target (Table 1)',
    '## Top accuracy (Tables 14-15)',
    "## The paper's ordering",
    "## The paper's conclusions",
    '| FedAvg | 2.50 (2.82) |',
  ):
    assert section in text
