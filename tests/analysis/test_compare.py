"""`compare` and `fedsim-compare` on synthetic sweeps whose numbers are computed by hand."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys

import pytest

from fedsim_jax.analysis import compare as compare_module
from fedsim_jax.analysis.compare import CompareError, compare, format_table, main, mean_std
from fedsim_jax.analysis.run_files import discover
from tests.analysis.workdirs import task, write_workdir

SQRT2 = math.sqrt(2.0)


@pytest.fixture
def sweeps(tmp_path):
  """fedavg and fedbuff, two seeds each, target 0.8 (see the comments for what each reaches)."""
  fedavg, fedbuff = tmp_path / 'fedavg', tmp_path / 'fedbuff'
  # Reaches 0.8 at t=20, 200 updates; final 0.85, best 0.85.
  write_workdir(
    fedavg / 'seed0',
    [(0, 0, 0.1), (10, 100, 0.5), (20, 200, 0.8), (30, 300, 0.85)],
    statistics={'wasted_fraction': 0.1, 'staleness_mean': 0.0},
  )
  # Reaches 0.8 at t=36, 300 updates; final 0.79, best 0.82.
  write_workdir(
    fedavg / 'seed1',
    [(0, 0, 0.1), (12, 100, 0.6), (24, 200, 0.75), (36, 300, 0.82), (48, 400, 0.79)],
    seed=1,
    statistics={'wasted_fraction': 0.3, 'staleness_mean': 0.0},
  )
  # Reaches 0.8 at t=10, 100 updates; final 0.9. No statistics in the summary: wasted 0.15 from
  # the last metrics row, staleness 1.5 from tasks.jsonl (aggregated: 0, 1, 2, 3; the discarded
  # one's 9 does not count).
  write_workdir(
    fedbuff / 'seed0',
    [(0, 0, 0.1), (5, 50, 0.7), (10, 100, 0.81), (15, 150, 0.9)],
    algorithm='fedbuff',
    last_row={'wasted_fraction': 0.15},
    tasks=[task(c, 0.0, 1.0, staleness=c, task_id=c) for c in range(4)]
    + [task(4, 0.0, 2.0, 'discarded', reason='stale', staleness=9, task_id=4)],
  )
  # Reaches 0.8 (exactly) at t=6, 60 updates; final 0.86.
  write_workdir(
    fedbuff / 'seed1',
    [(0, 0, 0.1), (6, 60, 0.8), (12, 120, 0.86)],
    algorithm='fedbuff',
    seed=1,
    statistics={'wasted_fraction': 0.05, 'staleness_mean': 2.5},
  )
  return fedavg, fedbuff


def test_mean_std_is_the_sample_std_and_zero_for_one_value():
  assert mean_std([1.0, 2.0, 4.0]) == pytest.approx((7 / 3, math.sqrt(7 / 3)))
  assert mean_std([0.5]) == (0.5, 0.0)
  assert mean_std([None, 3.0, None]) == (3.0, 0.0)
  assert mean_std([]) == (None, None)


def test_two_sweeps_give_the_hand_computed_means_stds_and_ratios(sweeps):
  rows = compare(discover(sweeps))
  fedavg, fedbuff = rows
  assert [r['label'] for r in rows] == ['fedavg', 'fedbuff']
  assert fedavg['seeds'] == fedbuff['seeds'] == 2
  assert fedavg['baseline'] == fedbuff['baseline'] == 'fedavg'  # the first group by default
  assert fedavg['target_accuracy'] == 0.8
  assert fedavg['final_accuracy_mean'] == pytest.approx(0.82)
  assert fedavg['final_accuracy_std'] == pytest.approx(0.06 / SQRT2)
  assert fedavg['best_accuracy_mean'] == pytest.approx(0.835)
  assert fedavg['best_accuracy_std'] == pytest.approx(0.03 / SQRT2)
  assert fedavg['reached'] == 2
  assert fedavg['time_to_target_mean'] == pytest.approx(28.0)
  assert fedavg['client_updates_to_target_mean'] == pytest.approx(250.0)
  assert fedavg['time_to_target_ratio'] == pytest.approx(1.0)
  assert fedavg['wasted_fraction_mean'] == pytest.approx(0.2)
  assert fedavg['staleness_mean'] == pytest.approx(0.0)

  assert fedbuff['final_accuracy_mean'] == pytest.approx(0.88)
  assert fedbuff['final_accuracy_std'] == pytest.approx(0.04 / SQRT2)
  assert fedbuff['best_accuracy_mean'] == pytest.approx(0.88)
  assert fedbuff['time_to_target_mean'] == pytest.approx(8.0)
  assert fedbuff['client_updates_to_target_mean'] == pytest.approx(80.0)
  assert fedbuff['time_to_target_ratio'] == pytest.approx(8.0 / 28.0)
  assert fedbuff['client_updates_to_target_ratio'] == pytest.approx(80.0 / 250.0)
  assert fedbuff['wasted_fraction_mean'] == pytest.approx(0.1)
  assert fedbuff['staleness_mean'] == pytest.approx(2.0)  # (1.5 + 2.5) / 2

  table = format_table(rows)
  lines = table.splitlines()
  assert lines[0].startswith('| algorithm | seeds | final accuracy | best accuracy | time to 0.8')
  assert lines[2] == (
    '| fedavg | 2 | 0.8200 ± 0.0424 | 0.8350 ± 0.0212 | 28.0 | 250 | 1.00x | 1.00x | 20.0% | 0.00 |'
  )
  assert lines[3] == (
    '| fedbuff | 2 | 0.8800 ± 0.0283 | 0.8800 ± 0.0283 | 8.0 | 80 | 0.29x | 0.32x | 10.0% | 2.00 |'
  )
  assert 'sample standard deviation (ddof=1)' in table


def test_baseline_divides_the_ratios(sweeps):
  fedavg, fedbuff = compare(discover(sweeps), baseline='fedbuff')
  assert fedavg['baseline'] == 'fedbuff'
  assert fedavg['time_to_target_ratio'] == pytest.approx(28.0 / 8.0)
  assert fedavg['client_updates_to_target_ratio'] == pytest.approx(250.0 / 80.0)
  assert fedbuff['time_to_target_ratio'] == pytest.approx(1.0)


def test_target_is_computed_from_the_metrics_rows_and_can_be_overridden(sweeps):
  # At 0.85 fedavg seed 0 reaches at t=30 (seed 1 never); fedbuff at t=15 and t=12.
  fedavg, fedbuff = compare(discover(sweeps), target=0.85)
  assert fedavg['reached'] == 1
  assert fedavg['time_to_target_mean'] == pytest.approx(30.0)
  assert fedavg['client_updates_to_target_mean'] == pytest.approx(300.0)
  assert fedbuff['reached'] == 2
  assert fedbuff['time_to_target_mean'] == pytest.approx(13.5)
  assert fedbuff['time_to_target_ratio'] == pytest.approx(13.5 / 30.0)
  lines = format_table([fedavg, fedbuff]).splitlines()
  assert '| 30.0 (1/2 reached) | 300 (1/2 reached) |' in lines[2]
  assert '| 13.5 | 135 | 0.45x | 0.45x |' in lines[3]


def test_a_target_no_seed_reaches_is_not_applicable(sweeps):
  fedavg, fedbuff = compare(discover(sweeps), target=0.95)
  assert fedavg['reached'] == fedbuff['reached'] == 0
  assert fedbuff['time_to_target_mean'] is None
  assert fedbuff['time_to_target_ratio'] is None
  line = format_table([fedavg, fedbuff]).splitlines()[3]
  assert '| n/a (0/2 reached) | n/a (0/2 reached) | n/a | n/a |' in line


def test_one_seed_has_zero_std_and_older_runs_lack_statistics(tmp_path):
  run = write_workdir(tmp_path / 'old', [(0, 0, 0.2), (9, 90, 0.7)], target=None)
  (row,) = compare(discover([run]))
  assert row['final_accuracy_mean'] == 0.7
  assert row['final_accuracy_std'] == 0.0
  assert row['target_accuracy'] is None and row['reached'] is None
  assert row['wasted_fraction_mean'] is None and row['staleness_mean'] is None
  table = format_table([row])
  assert 'time to' not in table and 'No target accuracy' in table
  assert table.splitlines()[2] == '| fedavg | 1 | 0.7000 ± 0.0000 | 0.7000 ± 0.0000 | n/a | n/a |'


def test_null_accuracies_are_skipped(tmp_path):
  run = write_workdir(tmp_path / 'nan', [(0, 0, 0.2), (5, 50, 0.9), (9, 90, None)])
  (row,) = compare(discover([run]))
  assert row['final_accuracy_mean'] == 0.9
  assert row['time_to_target_mean'] == 5.0


def test_different_config_targets_need_an_explicit_target(tmp_path):
  a = write_workdir(tmp_path / 'a', [(0, 0, 0.5), (1, 10, 0.9)], target=0.8)
  b = write_workdir(tmp_path / 'b', [(0, 0, 0.5), (1, 10, 0.9)], algorithm='fedbuff', target=0.85)
  with pytest.raises(CompareError, match=r'different run.target_accuracy \(0.8, 0.85\)'):
    compare(discover([a, b]))
  assert [r['target_accuracy'] for r in compare(discover([a, b]), target=0.7)] == [0.7, 0.7]


def test_an_unknown_baseline_is_an_error(sweeps):
  with pytest.raises(CompareError, match="'fedprox' names no group; the groups: fedavg, fedbuff"):
    compare(discover(sweeps), baseline='fedprox')


def test_cli_prints_the_table_and_writes_markdown_and_csv(sweeps, tmp_path, capsys):
  markdown, table_csv = tmp_path / 'table.md', tmp_path / 'table.csv'
  code = main(
    [
      *map(str, sweeps),
      '--baseline',
      'fedbuff',
      '--markdown',
      str(markdown),
      '--csv',
      str(table_csv),
    ]
  )
  out, err = capsys.readouterr()
  assert code == 0, err
  assert out == markdown.read_text(encoding='utf-8')
  assert '| fedavg | 2 | 0.8200 ± 0.0424 |' in out and '| 3.50x | 3.12x |' in out
  records = list(csv.DictReader(io.StringIO(table_csv.read_text(encoding='utf-8'))))
  assert list(records[0]) == list(compare_module.COLUMNS)
  assert [r['label'] for r in records] == ['fedavg', 'fedbuff']
  assert float(records[1]['time_to_target_mean']) == pytest.approx(8.0)
  assert float(records[0]['time_to_target_ratio']) == pytest.approx(3.5)
  assert records[0]['baseline'] == 'fedbuff'


def test_cli_labels_and_target(sweeps, capsys):
  assert main([*map(str, sweeps), '--labels', 'sync,async', '--target', '0.85']) == 0
  out = capsys.readouterr().out
  assert '| sync | 2 |' in out and '| async | 2 |' in out and 'time to 0.85 (s)' in out


@pytest.mark.parametrize(
  'argv, message',
  [
    (['{tmp}/missing'], '/missing: no such directory'),
    (['{tmp}/empty'], '/empty: neither a run directory (metrics.jsonl), a sweep root'),
    (['{fedavg}', '--baseline', 'nope'], "--baseline 'nope' names no group"),
    (['{fedavg}', '{fedbuff}', '--labels', 'one'], '1 labels given for 2 run directories'),
  ],
)
def test_cli_errors_are_one_line_and_exit_2(sweeps, tmp_path, capsys, argv, message):
  (tmp_path / 'empty').mkdir()
  names = {'tmp': tmp_path, 'fedavg': sweeps[0], 'fedbuff': sweeps[1]}
  assert main([a.format(**names) for a in argv]) == 2
  out, err = capsys.readouterr()
  assert out == ''
  assert err.count('\n') == 1 and err.startswith('fedsim-compare: error: ')
  assert message in err


def test_cli_rejects_a_target_outside_0_1(sweeps, capsys):
  assert main([str(sweeps[0]), '--target', '80']) == 2
  assert 'not an accuracy within [0, 1]' in capsys.readouterr().err


def test_script_exits_2_without_a_traceback(tmp_path):
  result = subprocess.run(
    [sys.executable, 'experiments/compare.py', str(tmp_path / 'missing')],
    capture_output=True,
    text=True,
    check=False,
  )
  assert result.returncode == 2
  assert result.stdout == ''
  assert result.stderr.strip().splitlines() == [
    f'fedsim-compare: error: {tmp_path / "missing"}: no such directory'
  ]
