"""`load_runs`: runs as a DataFrame; `fedsim-compare` on fedsim-sweep folders and `--by`."""

from __future__ import annotations

import json

import pytest

from fedsim_jax.analysis import load_runs
from fedsim_jax.analysis.compare import compare, main
from fedsim_jax.analysis.frame import flatten
from fedsim_jax.analysis.run_files import RunFilesError, discover
from tests.analysis.workdirs import write_workdir


def _point(root, name, settings, runs):
  folder = root / name
  folder.mkdir(parents=True)
  (folder / 'point.json').write_text(json.dumps(settings))
  for seed, points in enumerate(runs):
    write_workdir(folder / f'seed{seed}', points, seed=seed)
    config = json.loads((folder / f'seed{seed}' / 'config.json').read_text())
    config['client'] = {'learning_rate': settings['client.learning_rate']}
    (folder / f'seed{seed}' / 'config.json').write_text(json.dumps(config))
  return folder


@pytest.fixture
def sweep(tmp_path):
  """A fedsim-sweep folder: two points of two seeds each."""
  root = tmp_path / 'sweep'
  _point(
    root,
    'learning_rate=0.01',
    {'client.learning_rate': 0.01},
    [[(0, 0, 0.1), (10, 100, 0.5)], [(0, 0, 0.1), (10, 100, 0.7)]],
  )
  _point(
    root,
    'learning_rate=0.1',
    {'client.learning_rate': 0.1},
    [[(0, 0, 0.1), (8, 80, 0.8), (16, 160, 0.9)], [(0, 0, 0.2), (8, 80, 0.6)]],
  )
  return root


def test_flatten_gives_dotted_keys_and_hashable_lists():
  assert flatten({'a': {'b': 1, 'c': [1, [2]]}, 'd': {}}, 'x.') == {
    'x.a.b': 1,
    'x.a.c': (1, (2,)),
    'x.d': {},
  }


def test_load_runs_has_every_metrics_row_with_settings_and_summary(sweep):
  frame = load_runs(sweep)
  assert len(frame) == 2 + 2 + 3 + 2
  assert list(frame.columns[:5]) == ['run', 'point', 'seed', 'status', 'finished']
  run = sweep / 'learning_rate=0.1' / 'seed0'
  rows = frame[frame['run'] == str(run)]
  metrics = [json.loads(line) for line in (run / 'metrics.jsonl').read_text().splitlines()]
  for column in metrics[0]:
    assert rows[column].tolist() == [row[column] for row in metrics], column
  assert rows['point'].tolist() == ['learning_rate=0.1'] * 3
  assert rows['seed'].tolist() == [0, 0, 0]
  assert set(rows['config.client.learning_rate']) == {0.1}
  assert set(rows['config.algorithm.name']) == {'fedavg'}
  assert set(rows['summary.final_accuracy']) == {0.9}
  assert set(rows['status']) == {'completed'} and rows['finished'].all()


def test_load_runs_takes_globs_lists_and_one_row_per_run(sweep, tmp_path):
  lone = write_workdir(tmp_path / 'lone', [(0, 0, 0.3), (5, 50, 0.4)], algorithm='fedbuff')
  last = load_runs([str(sweep / '*0.1' / 'seed*'), lone], last_only=True)
  assert last['run'].tolist() == [
    str(sweep / 'learning_rate=0.1' / 'seed0'),
    str(sweep / 'learning_rate=0.1' / 'seed1'),
    str(lone),
  ]
  assert last['test_accuracy'].tolist() == [0.9, 0.6, 0.4]
  assert last['point'].tolist()[:2] == ['learning_rate=0.1'] * 2
  assert last['point'].isna().tolist()[2]
  by_rate = load_runs(sweep, last_only=True).groupby('config.client.learning_rate')
  assert by_rate['test_accuracy'].mean().to_dict() == pytest.approx({0.01: 0.6, 0.1: 0.75})


def test_load_runs_marks_or_drops_unfinished_runs(sweep):
  summary = sweep / 'learning_rate=0.01' / 'seed1' / 'summary.json'
  summary.write_text(json.dumps({'status': 'interrupted'}))
  frame = load_runs(sweep, last_only=True)
  assert frame['status'].tolist() == ['completed', 'interrupted', 'completed', 'completed']
  assert len(load_runs(sweep, last_only=True, finished_only=True)) == 3


def test_load_runs_names_a_path_without_runs(tmp_path):
  (tmp_path / 'empty').mkdir()
  for paths, message in [
    (tmp_path / 'missing', 'no such directory'),
    (tmp_path / 'empty', 'holds no run directory'),
    (str(tmp_path / 'nothing*'), 'matches no path'),
    ([], 'no run directories given'),
  ]:
    with pytest.raises(RunFilesError, match=message):
      load_runs(paths)


def test_compare_groups_a_fedsim_sweep_folder_by_point(sweep):
  rows = compare(discover([sweep]))
  assert [r['label'] for r in rows] == ['learning_rate=0.01', 'learning_rate=0.1']
  assert [r['final_accuracy_mean'] for r in rows] == pytest.approx([0.6, 0.75])
  with pytest.raises(RunFilesError, match='labels its points'):
    discover([sweep], labels=['a'])


def test_compare_by_a_setting_regroups_runs(sweep, tmp_path, capsys):
  other = tmp_path / 'other'
  _point(other, 'x', {'client.learning_rate': 0.01}, [[(0, 0, 0.1), (10, 100, 0.3)]])
  assert main([str(sweep), str(other / 'x'), '--by', 'client.learning_rate']) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith('| client.learning_rate | seeds |')
  assert lines[2].startswith('| client.learning_rate=0.01 | 3 | 0.5000 ± 0.2000 |')
  assert lines[3].startswith('| client.learning_rate=0.1 | 2 | 0.7500 ± 0.2121 |')
  assert main([str(sweep), '--by', 'client.momentum']) == 2
  assert 'client.momentum: ' in capsys.readouterr().err
