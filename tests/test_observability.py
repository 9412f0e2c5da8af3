"""What a run writes to be looked at: the task trace agrees exactly with summary.json and
clients.json, metrics rows and the summary carry the statistics, and the TensorBoard log (by
version and by virtual time) reads back with TensorBoard's own reader."""

import collections
import json
import os

import numpy as np
import pytest

from fedsim_jax.experiment import run_experiment
from fedsim_jax.metrics.writers import read_metrics, read_tasks
from tests.helpers import make_tiny_config

CASES = {
  # Over-selection: 5 selected, the first 3 aggregated, the 2 slowest discarded as stragglers.
  'fedavg_overselection': ('fedavg', {'algorithm.kwargs.num_selected': 5}),
  'fedbuff': ('fedbuff', {}),
  'fedcompass': ('fedcompass', {}),
  'ccfedavg': ('ccfedavg', {}),
  'fedasmu': ('fedasmu', {'algorithm.kwargs.trigger_period': 2.0}),
}


def _read_json(workdir, name):
  with open(os.path.join(workdir, name)) as f:
    return json.load(f)


@pytest.mark.parametrize('case', sorted(CASES))
def test_the_task_trace_agrees_with_the_summary(digits_data_dir, tmp_path, case):
  algorithm, overrides = CASES[case]
  config = make_tiny_config(algorithm, digits_data_dir, clients=8, **{'run.num_rounds': 8})
  for path, value in overrides.items():
    section, _, name = path.rpartition('.')
    config.algorithm.kwargs[name] = value
  summary = run_experiment(config, tmp_path)
  records = read_tasks(tmp_path / 'tasks.jsonl')
  tasks = [r for r in records if r['outcome'] != 'skipped']
  assert sorted(r['task'] for r in tasks) == sorted({r['task'] for r in tasks})
  accounting = summary['tasks']
  assert len(tasks) == accounting['dispatched']
  outcomes = collections.Counter(r['outcome'] for r in tasks)
  assert outcomes['aggregated'] == accounting['aggregated']
  assert outcomes['in_flight'] == accounting['in_flight']
  assert outcomes['waiting'] == accounting['waiting']
  discarded = collections.Counter(r['reason'] for r in tasks if r['outcome'] == 'discarded')
  assert dict(discarded) == accounting['discarded']
  clients = _read_json(tmp_path, 'clients.json')
  aggregated = [r for r in tasks if r['outcome'] == 'aggregated']
  assert (
    np.bincount([r['client'] for r in aggregated], minlength=8).tolist() == clients['aggregated']
  )
  stats = summary['statistics']
  assert np.bincount([r['staleness'] for r in aggregated]).tolist() == stats['staleness_histogram']
  assert stats['wasted_steps'] == sum(r['steps'] for r in tasks if r['outcome'] == 'discarded')
  if case == 'fedavg_overselection':
    # (the last round's two stragglers are still in flight when the run stops)
    rounds = summary['final_version']
    assert accounting['discarded'] == {'straggler': 2 * (rounds - 1)}
    assert accounting['aggregated'] == 3 * rounds
    assert stats['aggregated_share'] == pytest.approx(3 * rounds / (5 * rounds - 2))
  if case == 'ccfedavg':  # selected clients that skip are traced, without a task
    # (those of rounds that closed: the last round is still open when the run stops)
    skipped = [r for r in records if r['outcome'] == 'skipped']
    closed = [r for r in skipped if r['version'] < summary['final_version']]
    assert closed and len(closed) == summary['scheduler']['estimated_updates']
  if case == 'fedasmu':  # a task split at its fetch is traced once, with every step
    assert all(r['extras']['fetch_time'] <= r['end_time'] for r in aggregated if 'extras' in r)
    assert sum(r['steps'] for r in tasks) == summary['gradient_steps']
  rows = read_metrics(tmp_path / 'metrics.jsonl')
  assert rows[-1]['staleness_mean'] == pytest.approx(stats['staleness_mean'])
  assert rows[-1]['jain_fairness'] == pytest.approx(stats['jain_fairness'])
  assert {'staleness_window_p95', 'updates_per_client_median', 'wasted_fraction'} <= set(rows[-1])


def test_tensorboard_scalars_read_back_with_tensorboards_reader(digits_data_dir, tmp_path):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

  run_experiment(make_tiny_config('fedbuff', digits_data_dir), tmp_path)
  rows = read_metrics(tmp_path / 'metrics.jsonl')
  log = EventAccumulator(str(tmp_path / 'tensorboard'))
  log.Reload()
  accuracy = log.Scalars('test_accuracy')
  assert [e.step for e in accuracy] == [r['version'] for r in rows]
  np.testing.assert_allclose([e.value for e in accuracy], [r['test_accuracy'] for r in rows])
  times = log.Scalars('virtual_time')
  np.testing.assert_allclose([e.value for e in times], [r['virtual_time'] for r in rows])
  assert 'staleness_mean' in log.Tags()['scalars']
  # every scalar again against virtual time, in integer milliseconds
  by_time = log.Scalars('by_virtual_time/test_accuracy')
  assert [e.step for e in by_time] == [round(r['virtual_time'] * 1000) for r in rows]
  assert len({e.step for e in by_time}) == len(rows) > 1
  np.testing.assert_allclose([e.value for e in by_time], [r['test_accuracy'] for r in rows])
  versions = log.Scalars('by_virtual_time/version')
  assert [e.value for e in versions] == [r['version'] for r in rows]
  assert 'by_virtual_time/staleness_mean' in log.Tags()['scalars']
  assert 'by_virtual_time/virtual_time' not in log.Tags()['scalars']


def test_trace_and_tensorboard_can_be_turned_off(digits_data_dir, tmp_path):
  config = make_tiny_config('fedbuff', digits_data_dir)
  config.run.write_tasks = False
  config.run.tensorboard = False
  run_experiment(config, tmp_path)
  assert not (tmp_path / 'tasks.jsonl').exists()
  assert not (tmp_path / 'tensorboard').exists()
  assert (tmp_path / 'metrics.jsonl').exists()


def test_plot_and_compare_read_a_real_two_seed_sweep(digits_data_dir, tmp_path, capsys):
  """End to end: two 2-seed sweeps from the simulator, plotted headless and compared."""
  from PIL import Image

  from fedsim_jax.analysis import compare as compare_lib
  from fedsim_jax.analysis import plot
  from fedsim_jax.analysis.run_files import discover
  from fedsim_jax.experiment import run_experiments_lockstep

  finals = {}
  for algorithm in ('fedavg', 'fedbuff'):
    configs = [make_tiny_config(algorithm, digits_data_dir, seed=s) for s in (0, 1)]
    workdirs = [tmp_path / algorithm / f'seed{s}' for s in (0, 1)]
    summaries = run_experiments_lockstep(configs, workdirs)
    finals[algorithm] = [s['final_accuracy'] for s in summaries]
  roots = [str(tmp_path / 'fedavg'), str(tmp_path / 'fedbuff')]

  assert plot.main([*roots, '--out', str(tmp_path / 'plots')]) == 0
  written = capsys.readouterr().out.split()
  kinds = {'accuracy', 'timeline_fedavg', 'staleness_fedbuff', 'updates_fedbuff'}
  assert kinds <= {os.path.splitext(os.path.basename(p))[0] for p in written}
  for path in written:
    assert os.path.getsize(path) > 1000
    with Image.open(path) as image:
      assert min(image.size) > 100

  rows = compare_lib.compare(discover(roots), baseline='fedavg')
  for row in rows:
    assert row['seeds'] == 2
    assert row['final_accuracy_mean'] == pytest.approx(np.mean(finals[row['label']]))
    assert row['final_accuracy_std'] == pytest.approx(np.std(finals[row['label']], ddof=1))


def test_progress_lines_carry_the_total_and_an_eta_and_quiet_hides_them(digits_data_dir, tmp_path):
  import subprocess
  import sys

  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  config_path = tmp_path / 'config.py'
  config_path.write_text(
    'from tests.helpers import make_tiny_config\n'
    'def get_config():\n'
    f'  return make_tiny_config("fedbuff", {str(digits_data_dir)!r})\n'
  )

  def run(*flags):
    return subprocess.run(
      [sys.executable, os.path.join(repo, 'experiments', 'run.py'), f'--config={config_path}']
      + list(flags),
      capture_output=True,
      text=True,
      cwd=repo,
      timeout=180,
    )

  loud = run(f'--workdir={tmp_path / "loud"}')
  assert loud.returncode == 0, loud.stderr[-2000:]
  progress = [line for line in loud.stderr.splitlines() if 'test accuracy' in line]
  assert ['version 0/4' in progress[0], 'version 4/4' in progress[-1]] == [True, True]
  assert 'ETA' in progress[-1] and '(100%)' in progress[-1]
  quiet = run(f'--workdir={tmp_path / "quiet"}', '--quiet')
  assert quiet.returncode == 0
  assert 'test accuracy' not in quiet.stderr
  assert quiet.stdout.startswith('final accuracy')
