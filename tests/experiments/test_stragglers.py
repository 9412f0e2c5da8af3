"""Straggler-paper reproduction: paper numbers, configs, round times, tables and the binary."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import agreement
from experiments.stragglers import tables
from experiments.sweep import table_row as _row
from fedsim_jax import algorithms
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import validate

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BINARY = os.path.join(_REPO, 'experiments', 'stragglers', 'reproduce.py')


def test_paper_tables_20_and_21():
  for latency in tables.LATENCY_MODELS:
    assert set(tables.PAPER_RESULTS[latency]) == set(tables.ALGORITHMS)
  table_20, table_21 = (tables.PAPER_RESULTS[m] for m in tables.LATENCY_MODELS)
  assert table_20['fedadam_overselection'] == ((81.3, 79.6, 82.2), (85.4, 85.2, 85.7), 221268.0)
  assert table_20['fedbuff'].straggler == (61.2, 52.5, 79.6)
  assert table_20['fedbuff_adam'].time == 90534.0
  assert table_21['feast_msg'] == ((99.2, 98.9, 99.4), (65.2, 61.8, 70.6), 184565.0)
  assert table_21['fedavg_time_limited'].total == (77.9, 77.8, 78.0)
  assert table_21['fedavg'].time == 779631.0


def test_paper_round_times_are_total_time_over_4000_rounds():
  assert tables.PAPER_ROUND_TIMES[('per_example', 20)][0] == pytest.approx(159.5095)
  assert tables.PAPER_ROUND_TIMES[('per_example', 24)][0] == pytest.approx(85.8465)
  assert tables.PAPER_ROUND_TIMES[('per_domain_per_example', 20)][0] == pytest.approx(251.188)
  assert tables.PAPER_ROUND_TIMES[('per_domain_per_example', 24)][0] == pytest.approx(110.9045)


@pytest.mark.parametrize('algorithm', tables.ALGORITHMS)
@pytest.mark.parametrize('latency', tables.LATENCY_MODELS)
def test_configs_are_valid_and_share_the_task(algorithm, latency):
  config = tables.make_config(algorithm, latency, seed=3, data_dir='/data')
  settings = validate(config)
  assert config.algorithm.name == tables.SIMULATOR_ALGORITHM[algorithm] and config.seed == 3
  assert config.data.name == 'mnist' and config.data.data_dir == '/data'
  assert config.data.num_clients == 300 and config.data.num_stragglers == 71
  assert tuple(config.data.straggler_classes) == (0, 1, 2, 3, 4)
  assert config.partition.name == 'dirichlet' and config.partition.kwargs.concentration == 1.0
  assert config.data.partition_seed == 0
  assert tuple(config.run.eval_class_groups.straggler) == (0, 1, 2, 3, 4)
  assert config.model.name == 'emnist_cnn'
  assert config.client.batch_size == 20 and config.client.optimizer == 'sgd'
  assert config.latency.name == 'lognormal' and config.latency.kwargs.model == latency
  assert settings.weighting == 'uniform'
  if algorithm in tables.ASYNCHRONOUS:
    assert config.run.num_rounds is None and config.run.max_client_updates == 100_000
    assert settings.buffer_size == 20 and config.run.eval_every == 50
    assert settings.staleness == 'constant' and settings.normalization == 'count'
    # FedBuff has no cohort and no over-selection.
    assert not hasattr(settings, 'cohort_size') and not hasattr(settings, 'num_selected')
  else:
    assert config.run.num_rounds == 2000 and config.run.max_client_updates is None
    assert settings.cohort_size == 50 and config.run.eval_every == 20
    expected_selected = 60 if algorithm in tables.OVERSELECTED else None
    assert settings.num_selected == expected_selected


def test_hyperparameters_follow_the_paper_tables():
  per_example, per_domain = tables.LATENCY_MODELS
  fedavg_config = tables.make_config('fedavg_time_limited', per_domain)
  fedavg = validate(fedavg_config)
  assert (fedavg_config.client.learning_rate, fedavg.server_learning_rate) == (0.1, 1.0)  # T. 10
  assert fedavg.time_limit_percentile == 75.0 and fedavg_config.client.local_epochs is None
  fedadam_config = tables.make_config('fedadam', per_example)  # Table 11
  fedadam = validate(fedadam_config)
  assert (fedadam_config.client.learning_rate, fedadam.server_learning_rate) == (0.03, 0.003)
  assert (fedadam.b1, fedadam.b2, fedadam.eps) == (0.9, 0.99, 1e-4)
  assert fedadam_config.client.local_epochs == 1.0
  for latency, lr, chi, rho, nu in (
    (per_example, 0.1, 100, 0.1, 0.5),  # 12, 14
    (per_domain, 0.01, 200, 0.05, 0.05),
  ):  # 13, 15
    buff_config = tables.make_config('fedbuff', latency)
    buff = validate(buff_config)
    assert (buff_config.client.learning_rate, buff.concurrency) == (lr, chi)
    assert buff.ema_decay is None and buff.server_optimizer == 'sgd'
    assert validate(tables.make_config('fedbuff_ema', latency)).ema_decay == 0.99
    assert validate(tables.make_config('fedbuff_kd', latency)).distillation_strength == rho
    assert validate(tables.make_config('fedbuff_l2', latency)).proximal_strength == nu
    adam_config = tables.make_config('fedbuff_adam', latency)
    adam = validate(adam_config)
    assert (adam.server_optimizer, adam.server_learning_rate, adam.ema_decay) == (
      'adam',
      0.003,
      0.99,
    )
    assert adam_config.client.learning_rate == lr
    fare = validate(tables.make_config('fare_dust', latency))  # 16, 17
    assert (fare.history_length, fare.ema_decay, fare.rho) == (50, 0.99, 0.1)
    assert fare.server_optimizer == 'adam' and fare.server_learning_rate == 0.003
  feast = validate(tables.make_config('feast_msg', per_example))  # Table 18
  assert (feast.server_learning_rate, feast.ema_decay, feast.kappa) == (0.006, 0.95, 0.0)
  feast = validate(tables.make_config('feast_msg', per_domain))  # Table 19
  assert (feast.ema_decay, feast.kappa, feast.tau_max) == (0.99, 0.9, 1e5)


def test_make_config_scales_budget_and_overrides():
  config = tables.make_config(
    'fedavg_overselection',
    'per_example',
    num_clients=40,
    client_updates=103,
    cohort_size=5,
    eval_every_updates=10,
  )
  assert config.data.num_stragglers == 9  # round(40 x 800 / 3400)
  assert config.run.num_rounds == 20 and config.algorithm.kwargs.num_selected == 6
  assert config.algorithm.kwargs.cohort_size == 5 and config.run.eval_every == 2
  config = tables.make_config(
    'fedbuff', 'per_example', buffer_size=4, concurrency=8, client_updates=50, eval_every_updates=10
  )
  assert (config.algorithm.kwargs.buffer_size, config.algorithm.kwargs.concurrency) == (4, 8)
  assert config.run.max_client_updates == 50 and config.run.eval_every == round(10 / 4)


def test_make_config_rejects_bad_settings():
  with pytest.raises(ConfigError, match="algorithm='fedprox' is not allowed"):
    tables.make_config('fedprox', 'per_example')
  with pytest.raises(ConfigError, match="latency='per_step' is not allowed"):
    tables.make_config('fedavg', 'per_step')
  with pytest.raises(ConfigError, match='num_stragglers=20 is invalid'):
    tables.make_config('fedavg', 'per_example', num_clients=20, num_stragglers=20)
  with pytest.raises(ConfigError, match='client_updates=10 is invalid'):
    tables.make_config('fedavg', 'per_example', client_updates=10)


def test_unknown_setting_paths_are_errors_not_new_settings(monkeypatch):
  monkeypatch.setitem(
    tables.HYPERPARAMETERS['fare_dust'], 'per_example', {'algorithm.kwargs.no_such_field': 1}
  )
  with pytest.raises(
    ConfigError, match='algorithm.kwargs.no_such_field is not a setting of FareDustSettings'
  ):
    tables.make_config('fare_dust', 'per_example')
  # A setting of another algorithm is unknown too (FedBuff has no cohort).
  monkeypatch.setitem(
    tables.HYPERPARAMETERS['fedbuff'], 'per_example', {'algorithm.kwargs.cohort_size': 50}
  )
  with pytest.raises(ConfigError, match='algorithm.kwargs.cohort_size is not a setting of FedBuff'):
    tables.make_config('fedbuff', 'per_example')
  monkeypatch.setitem(tables.HYPERPARAMETERS['fedavg'], 'per_example', {'client.no_such_field': 1})
  with pytest.raises(ConfigError, match='client.no_such_field: no such setting'):
    tables.make_config('fedavg', 'per_example')


@pytest.mark.parametrize('algorithm', tables.ALGORITHMS)
def test_hyperparameters_name_only_settings_of_their_algorithm(algorithm):
  settings = algorithms.get_spec(tables.SIMULATOR_ALGORITHM[algorithm]).settings
  for latency in tables.LATENCY_MODELS:
    for path in tables.HYPERPARAMETERS[algorithm][latency]:
      assert path == 'client.learning_rate' or (
        path.startswith('algorithm.kwargs.')
        and path.removeprefix('algorithm.kwargs.') in settings.field_names()
      ), (algorithm, latency, path)


# ------------------------------------------------------------------------------------------------
# Round times from the latency model.

# Deterministic factors (sigma = 0): standard clients 10 + 20 + 0.5 x 100 = 80 s for 100
# examples; stragglers under per-domain 30 + 40 + 1.0 x 100 = 170 s.
_FIXED = {
  'standard': {
    'communication': (math.log(10), 0),
    'overhead': (math.log(20), 0),
    'per_example': (math.log(0.5), 0),
  },
  'straggler': {
    'communication': (math.log(30), 0),
    'overhead': (math.log(40), 0),
    'per_example': (math.log(1.0), 0),
  },
}


def test_round_time_is_the_bth_fastest_of_the_cohort():
  common = dict(
    num_clients=4, examples_per_client=100, num_stragglers=1, num_rounds=50, seed=0, params=_FIXED
  )
  everyone = tables.synchronous_round_times('per_domain_per_example', cohort_size=4, **common)
  np.testing.assert_allclose(everyone, 170.0)  # the straggler is always the slowest
  fastest_three = tables.synchronous_round_times(
    'per_domain_per_example', cohort_size=3, num_selected=4, **common
  )
  np.testing.assert_allclose(fastest_three, 80.0)  # over-selection drops it
  # per_example: one parameter set (Table 1 with these overrides for 'standard' only).
  per_example = tables.synchronous_round_times(
    'per_example',
    cohort_size=4,
    num_clients=4,
    examples_per_client=100,
    num_stragglers=1,
    num_rounds=5,
    seed=0,
    params={'standard': _FIXED['standard'], 'straggler': _FIXED['standard']},
  )
  np.testing.assert_allclose(per_example, 80.0)


def test_round_time_samples_cohorts_uniformly():
  # 3 of 4 clients per round: the straggler is in the cohort with probability 3/4, so the
  # median round is 170 s and the mean 0.75 x 170 + 0.25 x 80 = 147.5 s.
  times = tables.synchronous_round_times(
    'per_domain_per_example',
    num_clients=4,
    examples_per_client=100,
    cohort_size=3,
    num_stragglers=1,
    num_rounds=4000,
    seed=1,
    params=_FIXED,
  )
  assert set(np.unique(times)) == {80.0, 170.0}
  assert np.median(times) == 170.0
  assert np.mean(times) == pytest.approx(147.5, abs=3.0)  # ~5 standard errors


def test_round_time_steps_match_the_simulation():
  # 30 examples with batch 20: 2 steps of 20 examples (the simulation's epoch), 10 + 20 + 0.5 x 40.
  times = tables.synchronous_round_times(
    'per_example',
    num_clients=2,
    examples_per_client=30,
    cohort_size=1,
    num_rounds=3,
    seed=0,
    params={'standard': _FIXED['standard']},
  )
  np.testing.assert_allclose(times, 50.0)


def test_cifar_shaped_round_times_match_the_paper_implied_means():
  for latency, selected in tables.PAPER_ROUND_TIMES:
    times = tables.synchronous_round_times(
      latency,
      num_clients=500,
      examples_per_client=100,
      cohort_size=20,
      num_selected=selected,
      num_stragglers=0 if latency == 'per_example' else 125,
      num_rounds=4000,
      seed=0,
    )
    paper = tables.PAPER_ROUND_TIMES[(latency, selected)][0]
    assert np.mean(times) == pytest.approx(paper, rel=0.04), (latency, selected)
    assert np.median(times) < np.mean(times)  # right-skewed


def test_round_time_rejects_bad_cohorts():
  with pytest.raises(ValueError, match='cohort_size=5, num_selected=4'):
    tables.synchronous_round_times(
      'per_example',
      num_clients=10,
      examples_per_client=10,
      cohort_size=5,
      num_selected=4,
      num_rounds=1,
      seed=0,
    )


def test_latency_percentiles_groups():
  stats = tables.latency_percentiles(
    np.array([100, 100, 100]),
    np.array([False, False, True]),
    'per_domain_per_example',
    seed=0,
    draws_per_client=2000,
  )
  assert set(stats) == {'standard', 'straggler'}
  assert stats['straggler'][0] > 2 * stats['standard'][0]  # Table 2: stragglers ~3x slower
  assert all(a <= b <= c for a, b, c in stats.values())


# ------------------------------------------------------------------------------------------------
# Tables.


def test_median_interval_arithmetic():
  # Linear interpolation: p5 of (80, 82, 90) = 80 + 0.1 x 2, p95 = 82 + 0.9 x 8.
  assert tables.median_interval([90.0, 80.0, 82.0]) == pytest.approx((82.0, 80.2, 89.2))
  assert tables.median_interval(list(range(1, 11))) == pytest.approx((5.5, 1.45, 9.55))
  assert tables.median_interval([7.0]) == (7.0, 7.0, 7.0)
  with pytest.raises(ValueError):
    tables.median_interval([])


def _curve(end: float, straggler: float, total: float) -> list[list[float]]:
  return [[0.0, 0, 0.1, 0.0], [end / 2, 10, total / 2, straggler / 2], [end, 20, total, straggler]]


def _records() -> list[dict]:
  records = []
  for seed, (straggler, total, time) in enumerate(
    [(0.90, 0.85, 300.0), (0.80, 0.83, 100.0), (0.82, 0.84, 200.0)]
  ):
    records.append(
      dict(
        algorithm='fedavg',
        latency='per_domain_per_example',
        seed=seed,
        straggler_accuracy=straggler,
        total_accuracy=total,
        virtual_time=time,
        curve=_curve(time, straggler, total),
      )
    )
    records.append(
      dict(
        algorithm='fedbuff',
        latency='per_domain_per_example',
        seed=seed,
        straggler_accuracy=0.5,
        total_accuracy=0.9,
        virtual_time=50.0,
        curve=_curve(50.0, 0.5, 0.9),
      )
    )
  records.append(
    dict(
      algorithm='fedavg',
      latency='per_example',
      seed=0,
      straggler_accuracy=0.1,
      total_accuracy=0.2,
      virtual_time=10.0,
      curve=_curve(10.0, 0.1, 0.2),
    )
  )
  return records


def test_results_table_median_interval_and_paper_values():
  markdown = tables.results_table(_records(), 'per_domain_per_example')
  assert markdown.splitlines()[0] == (
    '| Algorithm | Straggler acc. | paper | Total acc. | paper | Time [s] | paper | Seeds |'
  )
  assert _row(markdown, 'FedAvg') == [
    '82.0% [80.2%, 89.2%]',
    '70.8% [70.3%, 71.2%]',  # ours, Table 21's
    '84.0% [83.1%, 84.9%]',
    '83.2% [83.0%, 83.2%]',
    '200 [110, 290]',
    '779,631',
    '3',
  ]
  assert _row(markdown, 'FedBuff') == [
    '50.0% [50.0%, 50.0%]',
    '82.0% [65.2%, 88.5%]',
    '90.0% [90.0%, 90.0%]',
    '84.6% [81.6%, 85.8%]',
    '50 [50, 50]',
    '81,798',
    '3',
  ]
  # Sorted by our straggler accuracy (FedAvg 82% above FedBuff 50%), as the paper's rows.
  names = [line.split('|')[1].strip() for line in markdown.splitlines()[2:]]
  assert names == ['FedAvg', 'FedBuff']
  per_example = tables.results_table(_records(), 'per_example')
  assert _row(per_example, 'FedAvg')[:2] == ['10.0% [10.0%, 10.0%]', '71.1% [70.5%, 71.6%]']


def test_value_at_and_time_grid():
  curve = _curve(200.0, 0.8, 0.9)  # evaluations at 0, 100, 200
  assert tables.value_at(curve, 150.0, 3) == 0.4
  assert tables.value_at(curve, 200.0, 2) == 0.9
  assert tables.value_at(curve, 250.0, 3) is None  # the run ended before
  # Median total times: fedavg 200, fedbuff 50 -> doubling grid ending at 200.
  assert tables.time_grid(_records()[:6], points=3) == [50.0, 100.0, 200.0]


def test_curves_table_medians_over_seeds_that_lasted():
  markdown = tables.curves_table(_records(), 'per_domain_per_example', 'straggler', points=3)
  assert markdown.splitlines()[0] == '| Algorithm | t=50s | t=100s | t=200s |'
  # FedAvg at t=100: the runs ending at 300 s (still at its t=0 value 0.0 until 150 s), 100 s
  # (0.80 at 100 s) and 200 s (0.41 at 100 s).
  assert _row(markdown, 'FedAvg')[1] == tables._format_percent(
    tables.median_interval([0.0, 80.0, 41.0])
  )
  # At t=200 only the 300 s and 200 s runs lasted (2 of 3 seeds): 0.45 and 0.82.
  assert _row(markdown, 'FedAvg')[2] == tables._format_percent(tables.median_interval([45.0, 82.0]))
  # FedBuff's runs end at 50 s: shown there, blank afterwards.
  assert _row(markdown, 'FedBuff') == ['50.0% [50.0%, 50.0%]', '', '']
  total = tables.curves_table(_records(), 'per_domain_per_example', 'total', points=3)
  assert _row(total, 'FedBuff')[0] == '90.0% [90.0%, 90.0%]'


def test_write_outputs(tmp_path, capsys):
  records = _records()
  settings = dict(
    seeds=[0, 1, 2],
    dataset='mnist',
    num_clients=300,
    num_stragglers=71,
    concentration=1.0,
    client_updates=1000,
    cohort_size=50,
    model='emnist_cnn',
    round_time_rounds=200,
    latency_stats={'per_example': {'standard': (1.0, 2.0, 3.0), 'straggler': (4.0, 5.0, 6.0)}},
  )
  output = tmp_path / 'out' / 'tables.md'
  tables.write_outputs(records, settings, str(tmp_path), str(output), wall_seconds=1.0)
  with open(tmp_path / 'results.jsonl', encoding='utf-8') as f:
    assert [json.loads(line) for line in f] == records
  text = output.read_text(encoding='utf-8')
  assert text == capsys.readouterr().out.rstrip('\n') + '\n'
  assert '## Table 20: per-example latency' in text and '## Table 21' in text
  assert 'EMNIST is not available offline' in text
  assert '| per-example | standard | 1.0 (69.89) | 2.0 (151.7) | 3.0 (223.4) |' in text
  assert 'Table 22, FedAvg: 638,038 s / 4,000 rounds' in text


# ------------------------------------------------------------------------------------------------
# The binary.


def _run(*flags, timeout=120):
  return subprocess.run(
    [sys.executable, _BINARY, *flags], capture_output=True, text=True, cwd=_REPO, timeout=timeout
  )


@pytest.mark.parametrize(
  'flag',
  [
    '--algorithms=fedavg,fedprox',
    '--latency=per_step',
    '--seeds=',
    '--num_stragglers=20',
    '--client_updates=10',
    '--dataset=cifar100',
    '--no_such_flag=1',
  ],
)
def test_binary_rejects_bad_flags_with_one_line(flag, tmp_path):
  result = _run(flag, '--num_clients=20', f'--workdir={tmp_path}')
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  assert 'Traceback' not in result.stderr and not os.listdir(tmp_path)
  if flag.startswith('--algorithms'):
    assert "'fedprox' is invalid; allowed values: fedavg,fedavg_overselection" in lines[0]
    assert 'fare_dust,feast_msg' in lines[0]


def test_binary_round_time_only(tmp_path):
  result = _run(
    '--round_time_only', '--round_time_rounds=2000', f'--workdir={tmp_path}', timeout=60
  )
  assert result.returncode == 0, result.stderr
  report = (tmp_path / 'round_time.md').read_text(encoding='utf-8')
  assert report in result.stdout
  cells = _row(report, 'per-example')  # the first per-example row: B = B_t = 20
  assert cells[0] == '20 of 20' and cells[3] == '159.5'
  assert float(cells[2]) == pytest.approx(159.5, rel=0.06)  # simulated mean, 2,000 rounds


# In `make test-slow` (about 18 s); the binary's writer-partitioned EMNIST run below stays in
# `make test`.
@pytest.mark.slow
def test_binary_end_to_end_on_a_tiny_federation(digits_data_dir, tmp_path):
  flags = [
    f'--data_dir={digits_data_dir}',
    '--dataset=digits',
    '--model=mlp',
    '--algorithms=fedavg_overselection,fedbuff',
    '--latency=per_domain_per_example',
    '--seeds=0',
    '--num_clients=12',
    '--client_updates=12',
    '--cohort_size=3',
    '--buffer_size=2',
    '--concurrency=6',
    '--eval_every_updates=6',
    '--round_time_rounds=100',
    f'--workdir={tmp_path}',
  ]
  result = _run(*flags, timeout=300)
  assert result.returncode == 0, result.stderr
  with open(tmp_path / 'results.jsonl', encoding='utf-8') as f:
    records = [json.loads(line) for line in f]
  assert [(r['algorithm'], r['latency'], r['seed']) for r in records] == [
    ('fedavg_overselection', 'per_domain_per_example', 0),
    ('fedbuff', 'per_domain_per_example', 0),
  ]
  for record in records:
    assert 0 <= record['straggler_accuracy'] <= 1 and 0 <= record['total_accuracy'] <= 1
    times = [row[0] for row in record['curve']]
    assert times[0] == 0.0 and times == sorted(times) and record['virtual_time'] > 0
    assert all(row[3] is not None for row in record['curve'])  # test_accuracy/straggler
  sync, buff = records
  assert sync['server_versions'] == 4  # 12 updates / B = 3
  assert buff['client_updates'] >= 12
  config = json.loads(
    (
      tmp_path / 'per_domain_per_example' / 'fedavg_overselection' / 'seed0' / 'config.json'
    ).read_text(encoding='utf-8')
  )
  assert config['algorithm']['kwargs']['num_selected'] == 4
  assert config['algorithm']['kwargs']['cohort_size'] == 3 and config['data']['num_stragglers'] == 3
  text = (tmp_path / 'tables.md').read_text(encoding='utf-8')
  assert _row(text, 'FedAvg + over-sel.')[1] == '53.2% [52.0%, 54.2%]'  # Table 21 beside ours
  assert 'per-domain per-example | straggler |' in text  # latency percentiles
  # Resuming writes the same tables from the finished runs without running anything, the
  # federation's latency percentiles included, and exports them for docs/results.
  exported = tmp_path / 'data' / 'stragglers.json'
  again = _run(*flags, '--only_existing', f'--export={exported}', timeout=120)
  assert again.returncode == 0, again.stderr
  assert again.stdout.count(': reused') == 2
  assert 'per-domain per-example | straggler |' in (tmp_path / 'tables.md').read_text('utf-8')
  from experiments import results_data, results_docs

  data = results_data.load(str(exported))
  assert data['kit'] == 'stragglers' and len(data['records']) == 2
  assert set(data['settings']['latency_stats']) == {'per_example', 'per_domain_per_example'}
  rendered = results_docs.render_file(str(exported), str(tmp_path))
  assert '<!-- table: stragglers.table21 data/stragglers.json -->' in rendered
  assert '<!-- table: stragglers.latency data/stragglers.json -->' in rendered
  assert 'stragglers.table20' not in rendered  # no per-example run in the file
  # Without the data dir, --only_existing still writes the run tables.
  missing = _run(*flags, '--only_existing', f'--data_dir={tmp_path / "none"}', timeout=120)
  assert missing.returncode == 0, missing.stderr
  assert 'latency percentiles: not computed' in missing.stdout
  assert 'Not computed (--only_existing without the data dir).' in (
    tmp_path / 'tables.md'
  ).read_text('utf-8')


def _writer_emnist_dir(root, writers=24, per_writer=12):
  """A federated-EMNIST-shaped data dir: 28x28 digits and letters (62 classes) with writer ids;
  every writer holds a few examples of the straggler digits 0-4 and of other classes."""
  import tensorflow_datasets as tfds

  from fedsim_jax.data.prepare import write_data_dir

  features = tfds.features.FeaturesDict(
    {
      'image': tfds.features.Tensor(shape=(28, 28, 1), dtype=np.uint8),
      'label': tfds.features.ClassLabel(num_classes=62),
      'client_id': tfds.features.Scalar(np.int64),
    }
  )
  rng = np.random.default_rng(0)

  def examples(count):
    return [
      {
        'image': rng.integers(0, 256, (28, 28, 1), dtype=np.uint8),
        'label': int(rng.integers(0, 62)) if i % 3 else int(rng.integers(0, 5)),
        'client_id': writer,
      }
      for writer in range(writers)
      for i in range(count)
    ]

  write_data_dir(
    root, 'emnist/byclass', '3.1.0', features, {'train': examples(per_writer), 'test': examples(2)}
  )
  return root


def test_emnist_configs_use_the_writer_partition():
  config = tables.make_config(
    'fare_dust', 'per_domain_per_example', dataset='emnist', num_clients=tables.PAPER_NUM_CLIENTS
  )
  assert config.partition.name == 'natural' and config.partition.kwargs.min_client_size == 1
  assert config.data.num_stragglers == 800 and config.data.straggler_classes == (0, 1, 2, 3, 4)
  assert config.model.name == 'emnist_cnn'
  validate(config)


def test_binary_runs_the_writer_partitioned_emnist_task(tmp_path):
  data_dir = _writer_emnist_dir(tmp_path / 'data')
  workdir = tmp_path / 'runs'
  result = _run(
    f'--data_dir={data_dir}',
    '--dataset=emnist',
    '--model=mlp',
    '--algorithms=fedavg',
    '--latency=per_example',
    '--seeds=0',
    '--num_clients=24',
    '--num_stragglers=6',
    '--client_updates=8',
    '--cohort_size=4',
    '--eval_every_updates=4',
    '--round_time_rounds=10',
    f'--workdir={workdir}',
    timeout=300,
  )
  assert result.returncode == 0, result.stderr
  config = json.loads(
    (workdir / 'per_example' / 'fedavg' / 'seed0' / 'config.json').read_text(encoding='utf-8')
  )
  assert config['partition']['name'] == 'natural' and config['data']['name'] == 'emnist'
  with open(workdir / 'results.jsonl', encoding='utf-8') as f:
    (record,) = [json.loads(line) for line in f]
  assert record['server_versions'] == 2 and 0 <= record['straggler_accuracy'] <= 1
  text = (workdir / 'tables.md').read_text(encoding='utf-8')
  assert 'split by its writers' in text and 'offline stand-in' not in text


def _runs(algorithm, straggler, total, times, latency='per_domain_per_example'):
  return [
    dict(
      algorithm=algorithm,
      latency=latency,
      seed=seed,
      straggler_accuracy=s,
      total_accuracy=t,
      virtual_time=time,
    )
    for seed, (s, t, time) in enumerate(zip(straggler, total, times))
  ]


def test_the_papers_conclusions_on_table_21():
  records = (
    _runs('fare_dust', [0.90, 0.92, 0.91], [0.95, 0.96, 0.95], [100.0, 110.0, 105.0])
    + _runs('fedadam_overselection', [0.91, 0.90, 0.93], [0.94, 0.95, 0.96], [100.0, 110.0, 105.0])
    + _runs('fedadam', [0.97, 0.97, 0.98], [0.97, 0.98, 0.98], [300.0, 320.0, 310.0])
    + _runs('fedbuff', [0.80, 0.85], [0.88, 0.90], [20.0, 21.0])  # two seeds only
  )
  found = {c.claim: c for c in tables.claims(records, 'per_domain_per_example')}
  first = found[
    'FARe-DUST learns more from the stragglers than the over-selecting baselines, which run '
    'the same rounds'
  ]
  # FARe-DUST minus FedAdam + over-sel.: the one over-selecting baseline that ran.
  assert first.quantity == 'FARe-DUST − FedAdam + over-sel., straggler accuracy (pp)'
  assert first.paper == 'FARe-DUST 91.7% vs FedAdam + over-sel. 55.8% (+35.9)'
  assert {s: round(v.value, 6) for s, v in first.seeds.items()} == {0: -1.0, 1: 2.0, 2: -2.0}
  assert agreement.assess(first).verdict == agreement.INCONCLUSIVE
  # Against every baseline: FedBuff ran on two of FARe-DUST's three seeds, so it is left out.
  every = found['FARe-DUST reaches a higher straggler accuracy than every baseline']
  assert every.quantity.startswith('FARe-DUST − the best of FedAdam, FedAdam + over-sel.,')
  assert every.paper == 'FARe-DUST 91.7% vs FedAdam 79.8% (+11.9)'
  assert agreement.assess(every).verdict == agreement.DOES_NOT_AGREE  # FedAdam: 97-98%
  faster = found['FedBuff trains faster than every synchronous algorithm']
  assert faster.side == '<' and set(faster.seeds) == {0, 1}
  assert agreement.assess(faster).verdict == agreement.AGREES
  # Per-example conclusions need per-example runs.
  assert tables.claims(records, 'per_example') == []


@pytest.mark.parametrize('latency', tables.LATENCY_MODELS)
def test_the_papers_own_figures_back_every_conclusion(latency):
  # With every algorithm run, every conclusion about the table is built, and building checks
  # that the paper's Table 20 / 21 figures lie on the conclusion's side.
  records = [
    r for a in tables.ALGORITHMS for r in _runs(a, [0.5, 0.6], [0.7, 0.8], [10.0, 11.0], latency)
  ]
  found = tables.claims(records, latency)
  assert len(found) == sum(c.latency == latency for c in tables.CONCLUSIONS) > 0


def test_latency_conclusion_is_computed_from_the_latency_model():
  claims = tables.latency_claims(seeds=[0, 1])
  assert [c.quantity.split(',')[0] for c in claims] == [
    'straggler p50 − standard p50',
    'straggler p95 − standard p95',
    'straggler p99 − standard p99',
  ]
  assert claims[2].paper == 'p99: 450.6 s vs 154.6 s (2.9x)'
  assert all(v.value > 0 for c in claims for v in c.seeds.values())
  assert tables.latency_claims(seeds=[0, 1])[0].seeds == claims[0].seeds  # seeded
