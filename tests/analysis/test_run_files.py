"""Loading workdirs and sweep roots, and the analysis layer's place in the package."""

from __future__ import annotations

import json

import pytest

from fedsim_jax.analysis import measures
from fedsim_jax.analysis.run_files import RunFilesError, discover, load, slug
from tests.analysis.workdirs import task, write_workdir
from tests.test_import_graph import PACKAGE, collect_imports, layer_of

POINTS = [(0.0, 0, 0.1), (5.0, 50, 0.6)]


def test_load_reads_every_file(tmp_path):
  tasks = [task(3, 0.0, 2.0, task_id=0), task(1, 1.0, 4.0, 'discarded', reason='stale', task_id=1)]
  clients = {
    'aggregated': [1, 2],
    'dispatched': [2, 2],
    'gradient_steps': [5, 9],
    'busy_time': [1.0, 2.0],
  }
  run = load(write_workdir(tmp_path / 'w', POINTS, seed=7, tasks=tasks, clients=clients))
  assert run.label == run.algorithm == 'fedavg'
  assert run.seed == 7
  assert run.target_accuracy == 0.8
  assert run.dataset == 'synthetic' and run.num_clients == 10
  assert [row['test_accuracy'] for row in run.metrics] == [0.1, 0.6]
  assert run.summary is not None and run.summary['status'] == 'completed'
  assert run.tasks == tasks
  assert run.clients == clients
  assert run.statistics == {}


def test_optional_files_are_none(tmp_path):
  run = load(write_workdir(tmp_path / 'w', POINTS, summary=False))
  assert run.summary is None and run.tasks is None and run.clients is None
  assert run.statistics == {}


def test_a_torn_last_task_line_is_skipped(tmp_path):
  path = write_workdir(tmp_path / 'w', POINTS, tasks=[task(0, 0.0, 1.0)])
  with open(path / 'tasks.jsonl', 'a', encoding='utf-8') as f:
    f.write('{"task": 1, "cli')
  assert len(load(path).tasks or []) == 1


def test_a_damaged_file_is_one_line(tmp_path):
  path = write_workdir(tmp_path / 'w', POINTS)
  (path / 'summary.json').write_text('{"status": ', encoding='utf-8')
  with pytest.raises(RunFilesError, match=r'summary.json: not valid JSON') as error:
    load(path)
  assert '\n' not in str(error.value)


def test_discover_groups_workdirs_and_the_seeds_of_sweep_roots(tmp_path):
  for seed in (10, 2, 0):
    write_workdir(tmp_path / 'sweep' / f'seed{seed}', POINTS, algorithm='fedbuff', seed=seed)
  (tmp_path / 'sweep' / 'seed99').mkdir()  # no metrics.jsonl: not a member
  (tmp_path / 'sweep' / 'plots').mkdir()
  single = write_workdir(tmp_path / 'single', POINTS)
  groups = discover([tmp_path / 'sweep', single])
  assert [[run.seed for run in group] for group in groups] == [[0, 2, 10], [0]]
  assert [[run.label for run in group] for group in groups] == [['fedbuff'] * 3, ['fedavg']]


def test_a_seed_comes_from_the_folder_when_the_config_has_none(tmp_path):
  path = write_workdir(tmp_path / 'sweep' / 'seed4', POINTS)
  config = json.loads((path / 'config.json').read_text(encoding='utf-8'))
  del config['seed']
  (path / 'config.json').write_text(json.dumps(config), encoding='utf-8')
  assert discover([tmp_path / 'sweep'])[0][0].seed == 4


def test_equal_labels_are_told_apart_and_labels_can_be_given(tmp_path):
  a = write_workdir(tmp_path / 'lr0.1', POINTS)
  b = write_workdir(tmp_path / 'lr1', POINTS)
  c = write_workdir(tmp_path / 'other' / 'lr1', POINTS)
  assert [g[0].label for g in discover([a, b])] == ['fedavg (lr0.1)', 'fedavg (lr1)']
  assert [g[0].label for g in discover([a, b, c])] == [
    'fedavg (lr0.1)',
    'fedavg (lr1) #1',
    'fedavg (lr1) #2',
  ]
  assert [g[0].label for g in discover([a, b], ['x', 'y'])] == ['x', 'y']
  with pytest.raises(RunFilesError, match='3 labels given for 2 run directories'):
    discover([a, b], ['x', 'y', 'z'])


def test_paths_that_hold_no_run_are_one_line_errors(tmp_path):
  (tmp_path / 'empty').mkdir()
  (tmp_path / 'file').write_text('x', encoding='utf-8')
  for name, message in (
    ('missing', 'no such directory'),
    ('file', 'no such directory'),
    (
      'empty',
      'neither a run directory (metrics.jsonl), a sweep root (seed*/metrics.jsonl) nor a '
      'fedsim-sweep folder (<point>/point.json)',
    ),
  ):
    with pytest.raises(RunFilesError) as error:
      discover([tmp_path / name])
    assert str(error.value) == f'{tmp_path / name}: {message}'


def test_slug_keeps_file_names_safe():
  assert slug('fedavg (lr0.1)') == 'fedavg_lr0.1'
  assert slug('a/b|c') == 'a_b_c'
  assert slug('///') == 'run'


def test_measures_from_tasks(tmp_path):
  tasks = [
    task(0, 0.0, 1.0, staleness=0, task_id=0),
    task(0, 1.0, 2.0, staleness=2, task_id=1),
    task(2, 0.0, 3.0, 'discarded', reason='stale', staleness=5, task_id=2),
    task(3, 0.0, 0.0, 'skipped', staleness=None, task_id=None),
  ]
  run = load(write_workdir(tmp_path / 'w', POINTS, num_clients=4, tasks=tasks))
  aggregated, discarded = measures.staleness_counts(run) or ((), ())
  assert list(aggregated) == [1, 0, 1, 0, 0, 0]
  assert list(discarded) == [0, 0, 0, 0, 0, 1]
  assert measures.mean_staleness(run) == 1.0
  aggregated, dispatched = measures.updates_per_client(run) or ((), ())
  assert list(aggregated) == [2, 0, 0, 0]
  assert list(dispatched) == [2, 0, 1, 0]  # the skipped record is no task
  assert measures.jain_fairness(aggregated) == pytest.approx(0.25)
  assert measures.jain_fairness(aggregated * 0 + 3) == pytest.approx(1.0)


def test_measures_fall_back_to_summary_and_clients_json(tmp_path):
  run = load(
    write_workdir(
      tmp_path / 'w',
      POINTS,
      statistics={'staleness_histogram': [3, 0, 1], 'staleness_mean': 0.5},
      clients={'aggregated': [4, 1, 0], 'dispatched': [5, 1, 2]},
    )
  )
  aggregated, discarded = measures.staleness_counts(run) or ((), ())
  assert list(aggregated) == [3, 0, 1] and list(discarded) == [0, 0, 0]
  assert measures.mean_staleness(run) == 0.5
  aggregated, dispatched = measures.updates_per_client(run) or ((), ())
  assert list(aggregated) == [4, 1, 0] and list(dispatched) == [5, 1, 2]


def test_analysis_imports_only_metrics_workdir_and_itself():
  imports = [imp for imp in collect_imports(PACKAGE) if layer_of(imp.module) == 'analysis']
  assert imports, 'the analysis layer imports nothing of the package?'
  # workdir: whether a run has ended (its lock and status), never how it runs
  assert {layer_of(imp.target) for imp in imports} <= {'analysis', 'metrics', 'workdir'}
