"""The scaling curves' fitted growth and their tables (benchmarks/scaling.py's result file)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import results_docs
from experiments.scaling import tables

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SIZES = np.logspace(1, 4, 7)  # 10 to 10,000, as the cohort curve


@pytest.mark.parametrize(
  'values, growth',
  [
    (np.full(7, 0.25), 'constant'),
    (2.0 + 0.01 * _SIZES, 'linear'),
    (0.5 + 1e-3 * _SIZES * np.log(_SIZES), 'n log n'),
    (1.0 + 1e-6 * _SIZES**2, 'quadratic'),
  ],
)
def test_fit_classifies_known_growths(values, growth):
  assert tables.fit_growth(_SIZES, values).growth == growth


def test_fit_recovers_the_terms_and_their_shares_at_each_end():
  fit = tables.fit_growth(_SIZES, 1.0 + 0.01 * _SIZES)
  assert fit.fixed == pytest.approx(1.0, rel=1e-6) and fit.scale == pytest.approx(0.01, rel=1e-6)
  assert fit.error == pytest.approx(0.0, abs=1e-9)
  assert fit.fixed_share_small == pytest.approx(1 / 1.1)  # n = 10: 1 of 1.1
  assert fit.fixed_share_large == pytest.approx(1 / 101)  # n = 10,000: 1 of 101
  assert fit.end_slope == pytest.approx(
    np.polyfit(np.log(_SIZES[-3:]), np.log(1.0 + 0.01 * _SIZES[-3:]), 1)[0]
  )
  quadratic = tables.fit_growth(_SIZES, 3e-7 * _SIZES**2)
  assert quadratic.slope == pytest.approx(2.0) and quadratic.fixed_share_large == pytest.approx(0)


def test_noise_within_the_tolerance_keeps_the_simpler_growth():
  rng = np.random.default_rng(0)
  noisy = (1.0 + 0.01 * _SIZES) * rng.uniform(0.97, 1.03, len(_SIZES))
  assert tables.fit_growth(_SIZES, noisy).growth == 'linear'
  # Unsorted input is sorted by size first.
  order = rng.permutation(len(_SIZES))
  assert tables.fit_growth(_SIZES[order], noisy[order]) == tables.fit_growth(_SIZES, noisy)


@pytest.mark.parametrize(
  'sizes, values', [([10], [1.0]), ([10, 10], [1.0, 2.0]), ([10, 100], [1.0, 0.0])]
)
def test_fit_refuses_too_few_or_non_positive_points(sizes, values):
  with pytest.raises(ValueError):
    tables.fit_growth(sizes, values)


def _point(curve, series, size, seconds, rss, updates=None):
  record = {
    'curve': curve,
    'series': series,
    'size': size,
    'seconds': seconds,
    'peak_rss_mb': rss,
    'finished': '2026-11-27 12:00 UTC',
    'host_seconds': 10.0,
    'code': {'commit': 'a' * 40, 'dirty': False, 'version': '0.1.0'},
  }
  if updates is not None:
    record['updates_per_version'] = updates
  return record


def _data():
  records = [
    _point('cohort', 'fedavg', n, 0.01 + 1e-4 * n, 400 + n / 10, n) for n in (10, 100, 1000)
  ]
  records += [_point('cohort', 'fedbuff', n, 0.02, 500.0, n / 10) for n in (10, 100, 1000)]
  records += [_point('evaluation', 'client', n, 1e-3 * n, 300.0) for n in (10, 100)]
  return {
    'format': 1,
    'kit': 'scaling',
    'command': '.venv/bin/python benchmarks/scaling.py --export=x.json',
    'exported': '2026-11-27',
    'exported_at_commit': 'aaaaaaa',
    'settings': {'machine': '2 CPU cores', 'repeats': 2},
    'records': records,
  }


def test_curve_table_has_a_row_per_size_and_columns_per_series():
  text = tables.curve_table(_data()['records'], 'cohort')
  lines = text.splitlines()
  assert lines[0] == (
    '| cohort / concurrency | FedAvg: ms / version | FedAvg: updates / version '
    '| FedAvg: peak RSS MB | FedBuff: ms / version | FedBuff: updates / version '
    '| FedBuff: peak RSS MB |'
  )
  assert lines[2:] == [
    '| 10 | 11.0 | 10 | 401 | 20.0 | 1 | 500 |',
    '| 100 | 20.0 | 100 | 410 | 20.0 | 10 | 500 |',
    '| 1,000 | 110 | 1,000 | 500 | 20.0 | 100 | 500 |',
  ]


def test_growth_table_states_each_series_fit_and_skips_series_of_two_points():
  text = tables.growth_table(_data()['records'])
  rows = text.splitlines()[2:]
  assert rows == [
    '| cohort | FedAvg | 10-1,000 | 0.50 / 0.50 | linear | 91% / 9% '
    '| per-version overhead / per-task work (training, stacking, aggregation) | 0.05 | linear |',
    '| cohort | FedBuff | 10-1,000 | 0.00 / 0.00 | constant | 100% / 100% '
    '| per-version overhead / per-version overhead | 0.00 | constant |',
  ]


def test_docs_render_the_scaling_file_and_check_fails_when_a_point_changes(tmp_path):
  data_path = tmp_path / 'docs' / 'results' / 'data' / 'scaling.json'
  data_path.parent.mkdir(parents=True)
  data_path.write_text(json.dumps(_data()), 'utf-8')
  relative = 'docs/results/data/scaling.json'
  body = ''.join(
    f'<!-- table: {name} {relative} -->\n\n<!-- end table -->\n\n'
    for name in ('runs', 'scaling.setup', 'scaling.cohort', 'scaling.growth')
  )
  doc = tmp_path / 'docs' / 'results' / 'performance.md'
  doc.write_text('# Scaling\n\n' + body, 'utf-8')
  assert results_docs.check(str(tmp_path))  # the empty tables differ from the data
  assert results_docs.write(str(tmp_path)) == [str(doc)]
  text = doc.read_text('utf-8')
  assert '**Runs:** 8; finished 2026-11-27 12:00 UTC' in text
  assert '| machine | 2 CPU cores |' in text and '| measured | 2026-11-27 |' in text
  assert '| 1,000 | 110 | 1,000 | 500 | 20.0 | 100 | 500 |' in text
  assert '| cohort | FedAvg | 10-1,000 | 0.50 / 0.50 | linear |' in text
  assert results_docs.check(str(tmp_path)) == []
  data = _data()
  data['records'][2]['seconds'] = 0.5
  data_path.write_text(json.dumps(data), 'utf-8')
  diffs = results_docs.check(str(tmp_path))
  assert len(diffs) == 1 and '+| 1,000 | 500 | 1,000 | 500 |' in diffs[0]


def test_benchmark_flag_errors_are_one_line_with_exit_code_2():
  result = subprocess.run(
    [sys.executable, os.path.join(_REPO, 'benchmarks', 'scaling.py'), '--curves=cohort,speed'],
    capture_output=True,
    text=True,
    cwd=_REPO,
    timeout=120,
  )
  assert result.returncode == 2, result.stderr
  assert '--curves' in result.stderr and len(result.stderr.strip().splitlines()) == 1
