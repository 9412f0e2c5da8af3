"""CC-FedAvg reproduction: paper tables, configs, result tables and the binary's flag errors."""

import json
import os
import subprocess
import sys

import pytest

from experiments import agreement
from experiments.ccfedavg import tables
from experiments.sweep import table_row as _row
from fedsim_jax.config import ConfigError
from fedsim_jax.experiment import validate

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BINARY = os.path.join(_REPO, 'experiments', 'ccfedavg', 'reproduce.py')


def test_paper_tables():
  assert len(tables.PAPER_TABLE_1) == 6 * 2 * 5
  assert len(tables.PAPER_TABLE_2) == 6 * 6
  assert tables.PAPER_TABLE_1[('round_robin', 0.0, 'ccfedavg_strategy1')] == 30.79
  assert tables.PAPER_TABLE_1[('ad_hoc', 0.5, 'fedavg_dropout_best')] == 66.86
  assert tables.PAPER_TABLE_1[('ad_hoc', 1.0, 'ccfedavg')] == 72.53
  assert tables.PAPER_TABLE_2[(0.1, 'fedavg_dropout_last')] == (57.43, 10.06)
  assert tables.PAPER_TABLE_2[(0.8, 'ccfedavg')] == (83.23, 0.26)
  assert tables.PAPER_TABLE_3[('fmnist', 0.2, 'ccfedavg_c')] == (79.07, 1.34)


# Algorithms with compute budgets, and those with a skipping schedule (the others train until
# a quota is used up, or every selected client trains).
BUDGETED = tuple(a for a in tables.ALGORITHMS if a != 'fedavg')
SCHEDULED = ('ccfedavg_strategy1', 'ccfedavg_strategy2', 'ccfedavg', 'ccfedavg_c')


def _check_budgets(algorithm, config, settings, schedule, switch_round, random_assignment):
  """Each algorithm gets the settings it reads and no other (`validate` rejects a field its
  settings lack; an unread one is left unset)."""
  kwargs = config.algorithm.kwargs
  if algorithm == 'fedavg':
    assert settings.weighting == 'uniform'
    return
  assert 'weighting' not in kwargs  # the budgeted server update is an unweighted mean
  assert settings.random_assignment is random_assignment
  if algorithm in SCHEDULED:
    assert settings.budget_schedule == schedule
  else:
    assert 'budget_schedule' not in kwargs
  if algorithm == 'ccfedavg_c':
    assert settings.switch_round == switch_round
  else:
    assert 'switch_round' not in kwargs


@pytest.mark.parametrize('algorithm', tables.ALGORITHMS)
@pytest.mark.parametrize('participation', tables.PARTICIPATIONS)
def test_cross_device_configs(algorithm, participation):
  config = tables.make_config(algorithm, 'cross_device', participation=participation, seed=3)
  settings = validate(config)
  assert config.algorithm.name == algorithm
  assert settings.cohort_size == round(100 * participation)
  assert config.data.num_clients == 100 and config.partition.name == 'two_classes'
  assert config.data.name == 'fashion_mnist' and config.model.name == 'mlp'
  assert tuple(config.model.kwargs.hidden_sizes) == (200, 200)
  assert config.client.local_steps == 200 and config.client.batch_size == 32
  assert config.client.optimizer == 'sgd' and config.client.learning_rate == 0.01
  if algorithm in BUDGETED:
    assert settings.budget_rule == 'beta' and settings.budget_beta == 4
  assert config.run.num_rounds == 400 and config.seed == 3
  _check_budgets(algorithm, config, settings, 'ad_hoc', 100, True)


@pytest.mark.parametrize('algorithm', tables.ALGORITHMS)
@pytest.mark.parametrize('schedule', tables.SCHEDULES)
def test_cross_silo_configs(algorithm, schedule):
  for gamma in tables.GAMMAS:
    config = tables.make_config(algorithm, 'cross_silo', gamma=gamma, schedule=schedule, rounds=40)
    settings = validate(config)
    assert config.data.num_clients == 8 and settings.cohort_size == 8
    assert config.partition.name == 'gamma_mix' and config.partition.kwargs.gamma == gamma
    if algorithm in BUDGETED:
      assert settings.budget_rule == 'beta' and settings.budget_beta == 4
    assert config.run.num_rounds == 40
    _check_budgets(algorithm, config, settings, schedule, 10, False)


@pytest.mark.parametrize('setting', tables.SETTINGS)
def test_figure5_configs(setting):
  for r in tables.FIGURE5_R:
    for w in tables.FIGURE5_W:
      config = tables.make_config('ccfedavg', setting, r=r, w=w)
      settings = validate(config)
      assert (settings.budget_rule, settings.budget_r, settings.budget_w) == ('two_group', r, w)


def test_make_config_rejects_bad_values():
  with pytest.raises(ConfigError):
    tables.make_config('fedprox', 'cross_device')
  with pytest.raises(ConfigError):
    tables.make_config('ccfedavg', 'cifar')
  with pytest.raises(ConfigError):
    tables.make_config('ccfedavg', 'cross_device', participation=0.0)
  with pytest.raises(ConfigError):
    tables.make_config('ccfedavg', 'cross_device', r=0.5)


def _synthetic_records() -> list[dict]:
  records = []
  for seed, (best, final) in enumerate([(0.80, 0.70), (0.82, 0.60), (0.84, 0.50)]):
    for algorithm in ('fedavg', 'fedavg_dropout', 'ccfedavg'):
      records.append(
        dict(
          algorithm=algorithm,
          setting='cross_device',
          participation=0.2,
          seed=seed,
          best_accuracy=best,
          final_accuracy=final,
        )
      )
      for schedule in tables.SCHEDULES:
        records.append(
          dict(
            algorithm=algorithm,
            setting='cross_silo',
            gamma=0.1,
            schedule=schedule,
            seed=seed,
            best_accuracy=best,
            final_accuracy=final,
          )
        )
    records.append(
      dict(
        algorithm='ccfedavg',
        setting='cross_device',
        participation=0.2,
        r=0.5,
        w=4,
        seed=seed,
        best_accuracy=best,
        final_accuracy=final,
      )
    )
  return records


def test_table2_mean_std_and_dropout_best_last():
  markdown = tables.table2(_synthetic_records())
  assert '| Method | 20% |' in markdown
  # best 80, 82, 84 -> 82.00 ± 2.00; final 70, 60, 50 -> 60.00 ± 10.00.
  assert _row(markdown, 'FedAvg (full)') == ['82.00±2.00 (80.52±1.66)']
  assert _row(markdown, 'FedAvg (dropout, best)') == ['82.00±2.00 (77.76±3.28)']
  assert _row(markdown, 'FedAvg (dropout, last)') == ['60.00±10.00 (67.38±8.76)']
  assert _row(markdown, 'CC-FedAvg') == ['82.00±2.00 (78.40±2.50)']


def test_compute_table_ranges_over_seeds_and_counts_fedavg_by_its_client_updates():
  def run(algorithm, seed, steps, trained, estimated, client_updates):
    return dict(
      algorithm=algorithm,
      setting='cross_device',
      participation=0.1,
      seed=seed,
      gradient_steps=steps,
      trained_updates=trained,
      estimated_updates=estimated,
      client_updates=client_updates,
    )

  records = [
    run('fedavg', 0, 200_000, None, None, 1000),
    run('fedavg', 1, 200_000, None, None, 1000),
    run('ccfedavg', 0, 107_600, 538, 462, 1000),
    run('ccfedavg', 1, 104_800, 524, 476, 1000),
  ]
  markdown = tables.compute_table(records)
  assert _row(markdown, 'FedAvg (full)') == ['10%', '200,000', '1,000', '0']
  assert _row(markdown, 'CC-FedAvg') == ['10%', '104,800-107,600', '524-538', '462-476']
  assert 'Strategy 1' not in markdown  # no runs, no row


def test_table1_and_figure5():
  markdown = tables.table1(_synthetic_records())
  assert '| Method | RR gamma=0.1 | AH gamma=0.1 |' in markdown
  assert _row(markdown, 'FedAvg (dropout, last)') == ['60.00±10.00 (50.63)', '60.00±10.00 (50.63)']
  assert _row(markdown, 'CC-FedAvg') == ['82.00±2.00 (65.79)', '82.00±2.00 (66.41)']
  grid = tables.figure5_table(_synthetic_records())
  assert '### cross_device, CC-FedAvg' in grid
  assert _row(grid, 'r=0.5') == ['82.00±2.00']


def test_write_outputs_writes_results_and_tables(tmp_path):
  records = _synthetic_records()
  settings = {'experiment': 'table2', 'seeds': [0, 1, 2], 'rounds': 400, 'eval_every': 1}
  output = tmp_path / 'out' / 'tables.md'
  tables.write_outputs(records, settings, str(tmp_path), str(output), wall_seconds=3.0)
  with open(tmp_path / 'results.jsonl', encoding='utf-8') as f:
    assert [json.loads(line) for line in f] == records
  text = output.read_text(encoding='utf-8')
  assert '82.00±2.00 (78.40±2.50)' in text


@pytest.mark.parametrize(
  'flag', ['--experiment=table9', '--participation=0,0.2', '--rounds=0', '--no_such_flag=1']
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
  assert lines[0].startswith('error: ')
  assert not os.listdir(tmp_path)


def _device_runs(algorithm, bests, participation=0.2):
  return [
    dict(
      algorithm=algorithm,
      setting='cross_device',
      participation=participation,
      seed=seed,
      best_accuracy=best,
      final_accuracy=best - 0.1,
    )
    for seed, best in enumerate(bests)
  ]


def test_the_papers_conclusions_on_table_2():
  records = (
    _device_runs('fedavg', [0.82, 0.83, 0.81])
    + _device_runs('ccfedavg', [0.80, 0.80, 0.77])
    + _device_runs('ccfedavg_strategy2', [0.70, 0.72, 0.71])
    + _device_runs('ccfedavg_c', [0.75, 0.76, 0.74])
    + _device_runs('fedavg', [0.82, 0.83], participation=0.1)  # no CC-FedAvg at 10%: nothing
  )
  found = tables.table2_claims(records)
  assert list(found) == [0.1, 0.2] and found[0.1] == []
  by_claim = {c.claim: c for c in found[0.2]}
  strategy2 = by_claim['CC-FedAvg is more accurate than Strategy 2']
  assert strategy2.paper == 'CC-FedAvg 78.40 vs Strategy 2 73.63 (+4.77)'
  assert agreement.assess(strategy2).verdict == agreement.AGREES
  # "a performance decline of no more than 3%": FedAvg (full) - CC-FedAvg < 3 on every seed.
  decline = by_claim['CC-FedAvg is at most 3 points below FedAvg (full)']
  assert (decline.side, decline.threshold) == ('<', 3.0)
  assert {s: round(v.value, 6) for s, v in decline.seeds.items()} == {0: 2.0, 1: 3.0, 2: 4.0}
  assert agreement.assess(decline).reason == 'a tie on seed 1'
  # Table III: CC-FedAvg(c) above CC-FedAvg at 20% in the paper (79.07 vs 78.40); here below.
  switch = by_claim['CC-FedAvg(c) is more accurate than CC-FedAvg ("in some cases")']
  assert agreement.assess(switch).verdict == agreement.DOES_NOT_AGREE
  # Strategy 1 and FedAvg (dropout) did not run: no conclusion about them.
  assert not any('Strategy 1' in c or 'dropout' in c for c in by_claim)
  assert tables.table2_agreement(records).count(agreement.CRITERION) == 1
