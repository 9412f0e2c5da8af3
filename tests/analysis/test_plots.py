"""Figures render headless with the right data, and `fedsim-plot` writes them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from PIL import Image

from fedsim_jax.analysis import plots
from fedsim_jax.analysis.plot import main
from fedsim_jax.analysis.run_files import discover, load
from tests.analysis.workdirs import random_tasks, task, write_workdir

SEED0 = [(0.0, 0, 0.1), (10.0, 100, 0.5), (20.0, 200, 0.7)]
SEED1 = [(0.0, 0, 0.2), (5.0, 100, 0.4), (15.0, 200, 0.8), (25.0, 300, 0.9)]


@pytest.fixture
def sweep(tmp_path):
  """Two seeds of fedbuff over 40 clients, with tasks.jsonl and clients.json."""
  root = tmp_path / 'fedbuff'
  for seed, points in enumerate((SEED0, SEED1)):
    write_workdir(
      root / f'seed{seed}',
      points,
      algorithm='fedbuff',
      seed=seed,
      num_clients=40,
      tasks=random_tasks(40, 600, seed=seed),
      clients={'aggregated': [3] * 40, 'dispatched': [4] * 40},
    )
  return root


def test_mean_curve_interpolates_over_the_common_span():
  a = (np.array([0.0, 10.0, 20.0]), np.array([0.0, 1.0, 1.0]))
  b = (np.array([0.0, 5.0, 30.0]), np.array([0.0, 0.5, 0.5]))
  x, mean, low, high = plots.mean_curve([a, b]) or ((),) * 4
  assert list(x) == [0.0, 5.0, 10.0, 20.0]  # 30 is past the end of `a`
  np.testing.assert_allclose(mean, [0.0, 0.5, 0.75, 0.75])
  np.testing.assert_allclose(low, [0.0, 0.5, 0.5, 0.5])
  np.testing.assert_allclose(high, [0.0, 0.5, 1.0, 1.0])
  _, mean, low, high = plots.mean_curve([a, b], band='std') or ((),) * 4
  std = np.array([0.0, 0.0, 0.5, 0.5]) / math.sqrt(2.0)  # sample std of two values
  np.testing.assert_allclose(low, mean - std)
  np.testing.assert_allclose(high, mean + std)
  assert plots.mean_curve([(np.zeros(0), np.zeros(0))]) is None


def test_accuracy_figure_draws_the_mean_band_and_target(sweep):
  fig = plots.accuracy_figure(discover([sweep]))
  time_axis, updates_axis = fig.axes
  mean_line, target_line = time_axis.lines
  # Seeds interpolated on [0, 20]: at x=10, seed0 0.5 and seed1 0.6 (between 0.4 at 5 and 0.8).
  np.testing.assert_allclose(mean_line.get_xdata(), [0.0, 5.0, 10.0, 15.0, 20.0])
  np.testing.assert_allclose(mean_line.get_ydata(), [0.15, 0.35, 0.55, 0.7, 0.775])
  assert mean_line.get_label() == 'fedbuff (2 seeds)'
  assert list(target_line.get_ydata()) == [0.8, 0.8]
  assert target_line.get_linestyle() == '--'
  assert len(time_axis.collections) == 1  # the band
  np.testing.assert_allclose(updates_axis.lines[0].get_ydata(), [0.15, 0.45, 0.75])


def test_accuracy_figure_without_any_accuracy_is_missing_data(tmp_path):
  run = write_workdir(tmp_path / 'w', [(0.0, 0, None)])
  with pytest.raises(plots.MissingData, match='no run has an evaluation with a test accuracy'):
    plots.accuracy_figure(discover([run]))


def test_sampled_rows_are_even_and_deterministic():
  rows = plots.sampled_rows(1000, 100)
  assert rows.size == 100 and rows[0] == 0 and rows[-1] == 999
  assert set(np.diff(rows)) <= {10, 11}
  assert list(plots.sampled_rows(7, 100)) == list(range(7))


def _bars(fig):
  """(colour, bar count) of each PolyCollection of the timeline's rows axis."""
  ax = fig.axes[1]
  return [
    (tuple(np.round(c.get_facecolor()[0], 3)), len(c.get_paths()))
    for c in ax.collections
    if isinstance(c, PolyCollection)
  ]


def test_timeline_draws_every_task_in_its_row_and_colour(tmp_path):
  tasks = [
    task(0, 0.0, 4.0, task_id=0, aggregation_time=5.0),
    task(1, 1.0, 5.0, task_id=1, aggregation_time=5.0),
    task(2, 0.0, 9.0, 'discarded', reason='straggler', task_id=2),
    task(0, 5.0, 8.0, 'in_flight', task_id=3),
    task(3, 5.0, 5.0, 'skipped', task_id=None),
  ]
  run = load(write_workdir(tmp_path / 'w', SEED0, num_clients=5, tasks=tasks))
  fig = plots.timeline_figure(run)
  top, ax = fig.axes
  by_label = {text.get_text(): text for text in fig.legends[0].get_texts()}
  assert set(by_label) == {
    'aggregated (2)',
    'discarded: straggler (1)',
    'in_flight (1)',
    'skipped (1)',
    'aggregation (1)',
  }
  polys = [c for c in ax.collections if isinstance(c, PolyCollection)]
  assert [len(c.get_paths()) for c in polys] == [2, 1, 1, 1]
  aggregated = polys[0].get_paths()[1].vertices
  assert (aggregated[:, 0].min(), aggregated[:, 0].max()) == (1.0, 5.0)
  assert (aggregated[:, 1].min(), aggregated[:, 1].max()) == pytest.approx((0.6, 1.4))  # client 1
  skipped = polys[3].get_paths()[0].vertices[:, 0]
  assert skipped.max() - skipped.min() == pytest.approx(9.0 * plots.MIN_BAR_SHARE)  # still seen
  np.testing.assert_allclose(polys[0].get_facecolor()[0][:3], (44 / 255, 160 / 255, 44 / 255))
  assert ax.get_ylim() == (4.5, -0.5)  # all 5 clients, client 0 on top
  assert 'sampled' not in top.get_title()
  (ticks,) = top.collections  # one tick per aggregation instant
  assert [list(segment[:, 0]) for segment in ticks.get_segments()] == [[5.0, 5.0]]


def test_timeline_of_1000_clients_samples_rows(tmp_path):
  tasks = random_tasks(1000, 5000)
  run = load(write_workdir(tmp_path / 'w', SEED0, num_clients=1000, tasks=tasks))
  fig = plots.timeline_figure(run, max_rows=100)
  top, ax = fig.axes
  assert '100 of 1000 clients shown, sampled evenly' in top.get_title()
  assert len(top.patches) == 1 and not top.collections  # ~3750 instants: a density strip
  assert ax.get_ylim() == (99.5, -0.5)
  shown = set(plots.sampled_rows(1000, 100).tolist())
  expected = sum(1 for t in tasks if t['client'] in shown)
  assert sum(count for _, count in _bars(fig)) == expected
  assert ax.get_yticklabels()[-1].get_text() in {str(c) for c in shown}
  path = tmp_path / 'timeline.png'
  plots.save(fig, path)
  assert path.stat().st_size > 1000
  with Image.open(path) as image:
    assert image.size == (1200, 1260)  # 12 x min(1.6 + 0.11 * 100, 14) inches at 100 dpi


def test_timeline_without_tasks_is_missing_data(tmp_path):
  run = load(write_workdir(tmp_path / 'w', SEED0))
  with pytest.raises(plots.MissingData, match='no tasks.jsonl'):
    plots.timeline_figure(run)


def test_staleness_and_updates_figures(tmp_path):
  tasks = [task(c % 3, 0.0, 1.0, staleness=c % 4, task_id=c) for c in range(8)] + [
    task(0, 0.0, 1.0, 'discarded', reason='stale', staleness=6, task_id=8)
  ]
  run = load(write_workdir(tmp_path / 'w', SEED0, num_clients=4, tasks=tasks))
  ax = plots.staleness_figure(run).axes[0]
  aggregated = [p.get_height() for p in ax.containers[0]]
  discarded = [p.get_height() for p in ax.containers[1]]
  assert aggregated == [2, 2, 2, 2, 0, 0, 0] and discarded == [0, 0, 0, 0, 0, 0, 1]
  assert 'mean 1.50' in [line.get_label() for line in ax.lines]
  ax = plots.updates_figure(run).axes[0]
  dispatched, aggregated_stairs = ax.patches
  assert list(aggregated_stairs.get_data().values) == [3, 3, 2, 0]  # clients 0, 1 (3 each), 2, 3
  assert list(dispatched.get_data().values) == [4, 3, 2, 0]  # client 0 also ran the discarded task
  assert 'min 0, median 2.5, max 3, Jain fairness 0.727' in ax.get_title()


def test_cli_writes_every_kind_for_a_sweep(sweep, tmp_path, capsys):
  out = tmp_path / 'plots'
  assert main([str(sweep), '--out', str(out), '--band', 'std']) == 0
  printed = capsys.readouterr().out.split()
  names = ['accuracy.png', 'timeline_fedbuff.png', 'staleness_fedbuff.png', 'updates_fedbuff.png']
  assert printed == [str(out / name) for name in names]
  sizes = {'accuracy.png': (1200, 480), 'staleness_fedbuff.png': (800, 450)}
  for name in names:
    path = out / name
    assert path.stat().st_size > 1000
    with Image.open(path) as image:
      image.verify()
      assert image.format == 'PNG'
      if name in sizes:
        assert image.size == sizes[name]


def test_cli_without_tasks_skips_the_timeline_and_falls_back(tmp_path, capsys):
  run = write_workdir(
    tmp_path / 'run',
    SEED1,
    statistics={'staleness_histogram': [5, 3, 1]},
    clients={'aggregated': [2, 1, 0], 'dispatched': [2, 2, 1]},
  )
  assert main([str(run), '--format', 'svg', '--kinds', 'timeline,staleness,updates']) == 0
  out, err = capsys.readouterr()
  written = sorted(p.name for p in (run / 'plots').iterdir())
  assert written == ['staleness_fedavg.svg', 'updates_fedavg.svg']
  assert out.split() == [str(run / 'plots' / n) for n in written]
  assert err.count('\n') == 1
  assert err.startswith('fedsim-plot: skipping timeline of fedavg: ') and 'no tasks.jsonl' in err
  assert (run / 'plots' / 'staleness_fedavg.svg').read_text(encoding='utf-8').startswith('<?xml')


def test_cli_groups_get_their_own_files(sweep, tmp_path, capsys):
  other = write_workdir(tmp_path / 'other', SEED0, tasks=random_tasks(10, 50))
  out = tmp_path / 'out'
  argv = [str(sweep), str(other), '--out', str(out), '--kinds', 'timeline', '--labels', 'a b,c']
  assert main(argv) == 0
  assert sorted(p.name for p in out.iterdir()) == ['timeline_a_b.png', 'timeline_c.png']


@pytest.mark.parametrize(
  'argv, message',
  [
    (['{tmp}/missing'], 'fedsim-plot: error: {tmp}/missing: no such directory'),
    (['{tmp}/empty'], 'fedsim-plot: error: {tmp}/empty: neither a run directory'),
  ],
)
def test_cli_bad_paths_exit_2_with_one_line(tmp_path, capsys, argv, message):
  (tmp_path / 'empty').mkdir()
  assert main([a.format(tmp=tmp_path) for a in argv]) == 2
  out, err = capsys.readouterr()
  assert out == '' and err.count('\n') == 1
  assert err.startswith(message.format(tmp=tmp_path))


def test_cli_rejects_unknown_kinds(sweep, capsys):
  assert main([str(sweep), '--kinds', 'accuracy,pie']) == 2
  assert 'kinds are accuracy,timeline,staleness,updates' in capsys.readouterr().err
