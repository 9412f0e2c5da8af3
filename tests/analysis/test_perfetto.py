"""The task timeline exported as a Chrome/Perfetto trace: a well-formed trace whose events are
the run's task records, server versions and evaluations, on tracks where slices never overlap."""

from __future__ import annotations

import collections
import json
import math
import shutil

import pytest

from fedsim_jax.analysis import perfetto
from fedsim_jax.analysis.plot import main
from fedsim_jax.metrics.writers import read_metrics, read_tasks
from tests.analysis.workdirs import random_tasks, task, write_workdir
from tests.helpers import make_tiny_config

METADATA_NAMES = {
  'process_name': 'name',
  'process_sort_index': 'sort_index',
  'thread_name': 'name',
  'thread_sort_index': 'sort_index',
}


def _is_int(value):
  return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value):
  return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_event(event):
  """The keys each phase requires, with values of the right types."""
  phase = event['ph']
  assert isinstance(event['name'], str) and event['name'], event
  assert _is_int(event['pid']), event
  if phase == 'M':
    key = METADATA_NAMES[event['name']]
    assert set(event['args']) == {key}, event
    assert isinstance(event['args'][key], str if key == 'name' else int), event
    assert ('tid' in event) == event['name'].startswith('thread_'), event
    if 'tid' in event:
      assert _is_int(event['tid']), event
    return
  assert _is_time(event['ts']) and event['ts'] >= 0, event
  if phase == 'X':
    assert _is_int(event['tid']), event
    assert _is_time(event['dur']) and event['dur'] >= 0, event
    assert isinstance(event['args'], dict), event
  elif phase == 'i':
    assert _is_int(event['tid']) and event['s'] in ('g', 'p', 't'), event
  elif phase == 'C':
    assert event['args'] and all(_is_time(v) for v in event['args'].values()), event
  else:
    raise AssertionError(f'unexpected phase {phase!r}')


def _check_nesting(slices):
  """Complete events of one thread are disjoint or properly nested (compared in whole
  nanoseconds, as viewers read them)."""
  spans = sorted((round(e['ts'] * 1000), round((e['ts'] + e['dur']) * 1000)) for e in slices)
  spans.sort(key=lambda span: (span[0], -span[1]))
  open_ends: list[int] = []
  for start, end in spans:
    while open_ends and open_ends[-1] <= start:
      open_ends.pop()
    assert not open_ends or end <= open_ends[-1], (
      f'[{start}, {end}] overlaps a slice ending at {open_ends[-1]}'
    )
    open_ends.append(end)


def validate(trace):
  """Asserts that `trace` is a well-formed JSON-object trace; returns its events by phase."""
  assert set(trace) >= {'traceEvents', 'displayTimeUnit'}
  assert trace['displayTimeUnit'] in ('ms', 'ns')
  assert 'virtual' in trace['otherData']['clock']
  trace = json.loads(json.dumps(trace, allow_nan=False))  # plain JSON, no NaN
  by_phase = collections.defaultdict(list)
  for event in trace['traceEvents']:
    _check_event(event)
    by_phase[event['ph']].append(event)
  named_processes = {e['pid'] for e in by_phase['M'] if e['name'] == 'process_name'}
  named_threads = {(e['pid'], e['tid']) for e in by_phase['M'] if e['name'] == 'thread_name'}
  sorted_threads = {(e['pid'], e['tid']) for e in by_phase['M'] if e['name'] == 'thread_sort_index'}
  threads = collections.defaultdict(list)
  for event in by_phase['X'] + by_phase['i']:
    assert event['pid'] in named_processes, event
    assert (event['pid'], event['tid']) in named_threads, event
    if event['ph'] == 'X':
      assert (event['pid'], event['tid']) in sorted_threads, event
      threads[event['pid'], event['tid']].append(event)
  for slices in threads.values():
    _check_nesting(slices)
  return by_phase


def _thread_names(by_phase):
  return {
    (e['pid'], e['tid']): e['args']['name'] for e in by_phase['M'] if e['name'] == 'thread_name'
  }


def _expected_name(record):
  if record['outcome'] == 'discarded' and record['reason']:
    return f'discarded: {record["reason"]}'
  return record['outcome']


@pytest.fixture(scope='module')
def compass_run(digits_data_dir, tmp_path_factory):
  """A tiny FedCompass run (8 clients, 8 versions) that wrote tasks.jsonl."""
  from fedsim_jax.experiment import run_experiment

  workdir = tmp_path_factory.mktemp('fedcompass')
  config = make_tiny_config('fedcompass', digits_data_dir, clients=8, **{'run.num_rounds': 8})
  run_experiment(config, workdir)
  return workdir


def test_every_task_record_is_one_slice_with_its_times_and_args(compass_run):
  trace = perfetto.trace_events(compass_run)
  by_phase = validate(trace)
  records = read_tasks(compass_run / 'tasks.jsonl')
  slices = by_phase['X']
  assert len(slices) == len(records) > 8
  assert collections.Counter(e['name'] for e in slices) == collections.Counter(
    _expected_name(r) for r in records
  )
  assert {e['cat'] for e in slices} == {r['outcome'] for r in records}
  # Each client's own track, so (client, dispatch) identifies a task here.
  names = _thread_names(by_phase)
  by_start = {(e['args']['client'], e['args']['task']): e for e in slices}
  for record in records:
    event = by_start[record['client'], record['task']]
    assert names[event['pid'], event['tid']] == f'client {record["client"]}'
    assert event['tid'] == record['client']
    assert event['ts'] == pytest.approx(record['dispatch_time'] * 1e6, abs=1e-3)
    end = record['end_time'] * 1e6
    assert event['ts'] + event['dur'] == pytest.approx(end, abs=1e-3)
    for key in ('staleness', 'steps', 'planned_steps', 'version', 'applied_version', 'outcome'):
      assert event['args'][key] == record[key]
    assert event['args'].get('unfinished', False) == (record['outcome'] in ('in_flight', 'waiting'))


def test_server_versions_are_instants_and_evaluations_a_counter(compass_run):
  by_phase = validate(perfetto.trace_events(compass_run))
  records = read_tasks(compass_run / 'tasks.jsonl')
  metrics = read_metrics(compass_run / 'metrics.jsonl')
  aggregated = [r for r in records if r['applied_version'] is not None]
  versions = {r['applied_version'] for r in aggregated}
  instants = by_phase['i']
  assert len(instants) == len(versions) >= metrics[-1]['version']
  assert [e['args']['version'] for e in instants] == sorted(versions)
  for event in instants:
    made = [r for r in aggregated if r['applied_version'] == event['args']['version']]
    assert event['args']['updates'] == len(made)
    assert event['ts'] == pytest.approx(min(r['aggregation_time'] for r in made) * 1e6, abs=1e-3)
  assert _thread_names(by_phase)[instants[0]['pid'], instants[0]['tid']] == 'versions'
  counters = by_phase['C']
  assert [e['args']['test_accuracy'] for e in counters] == [r['test_accuracy'] for r in metrics]
  assert [e['ts'] for e in counters] == pytest.approx([r['virtual_time'] * 1e6 for r in metrics])


def test_many_clients_share_group_tracks_in_lanes(compass_run):
  trace = perfetto.trace_events(compass_run, max_client_tracks=3, client_groups=2)
  by_phase = validate(trace)
  records = read_tasks(compass_run / 'tasks.jsonl')
  names = _thread_names(by_phase)
  slices = by_phase['X']
  assert len(slices) == len(records)
  # Groups of 4 clients: every slice on a lane of its client's group, and lanes were needed.
  tracks = {names[e['pid'], e['tid']] for e in slices}
  assert {name.split(' #')[0] for name in tracks} == {'clients 0-3', 'clients 4-7'}
  assert any(' #' in name for name in tracks)
  for event in slices:
    group = names[event['pid'], event['tid']].split(' #')[0]
    low, high = map(int, group.removeprefix('clients ').split('-'))
    assert low <= event['args']['client'] <= high
  assert trace['otherData']['client_tracks'] == '4 clients per track'


def test_overlapping_tasks_of_one_client_take_lanes_and_open_ends_run_to_the_end(tmp_path):
  tasks = [
    task(0, 0.0, 10.0, task_id=0),
    task(0, 5.0, 8.0, 'discarded', reason='straggler', task_id=1),  # inside the first
    task(0, 9.0, 12.0, 'discarded', reason='stale', task_id=2),  # crosses its end
    task(0, 12.0, 12.0, 'skipped', task_id=None),
    {**task(1, 3.0, 0.0, 'in_flight', task_id=3), 'end_time': None},
    {**task(1, 0.0, 0.1, task_id=4), 'extras': {'fetch_time': float('nan')}},
    {**task(1, 0.1, 0.3, task_id=5)},
    {'client': None, 'dispatch_time': 1.0, 'outcome': 'aggregated'},
  ]
  run = write_workdir(tmp_path / 'run', [(0.0, 0, 0.1)], num_clients=2, tasks=tasks)
  trace = perfetto.trace_events(run)
  by_phase = validate(trace)
  names = _thread_names(by_phase)
  lanes = collections.defaultdict(set)
  for event in by_phase['X']:
    lanes[event['args']['client']].add(names[event['pid'], event['tid']])
  assert lanes == {0: {'client 0', 'client 0 #2'}, 1: {'client 1'}}
  assert trace['otherData']['records_left_out'] == 1
  open_end = next(e for e in by_phase['X'] if e['args']['task'] == 3)
  assert open_end['args']['open_end'] is True and open_end['args']['unfinished'] is True
  assert open_end['ts'] + open_end['dur'] == pytest.approx(12.0e6)
  nan_extra = next(e for e in by_phase['X'] if e['args']['task'] == 4)
  assert nan_extra['args']['extras'] == {'fetch_time': None}


def test_assign_lanes_uses_the_fewest_disjoint_lanes():
  intervals = [(0, 10), (5, 8), (9, 12), (12, 12), (8, 9), (1, 2)]
  lanes = perfetto.assign_lanes(intervals)
  assert max(lanes) + 1 == 2  # at most two intervals hold at any instant
  for lane in set(lanes):
    mine = sorted(iv for iv, ln in zip(intervals, lanes) if ln == lane)
    assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:]))


def test_every_outcome_of_a_synthetic_run_is_counted(tmp_path):
  records = random_tasks(40, 600, seed=3)
  run = write_workdir(tmp_path / 'run', [(0.0, 0, 0.1), (1000.0, 10, 0.5)], tasks=records)
  by_phase = validate(perfetto.trace_events(run, max_client_tracks=10, client_groups=4))
  assert collections.Counter(e['name'] for e in by_phase['X']) == collections.Counter(
    _expected_name(r) for r in records
  )
  assert {'discarded: stale', 'discarded: offline', 'skipped', 'waiting'} <= {
    e['name'] for e in by_phase['X']
  }
  # Every aggregated record here made version 1: one instant counting them all, at the first.
  aggregated = [r for r in records if r['outcome'] == 'aggregated']
  (instant,) = by_phase['i']
  assert instant['args'] == {
    'version': 1,
    'updates': len(aggregated),
    'virtual_time': min(r['aggregation_time'] for r in aggregated),
  }


def test_cli_writes_the_trace_and_no_figures(compass_run, tmp_path, capsys):
  out = tmp_path / 'trace' / 'timeline.json'
  assert main([str(compass_run), '--perfetto', str(out)]) == 0
  assert capsys.readouterr().out.split() == [str(out)]
  with open(out, encoding='utf-8') as f:
    trace = json.load(f)
  by_phase = validate(trace)
  assert len(by_phase['X']) == len(read_tasks(compass_run / 'tasks.jsonl'))
  assert not (compass_run / 'plots').exists()


def test_cli_without_tasks_names_the_setting_and_exits_2(compass_run, tmp_path, capsys):
  run = tmp_path / 'no_tasks'
  shutil.copytree(compass_run, run, ignore=shutil.ignore_patterns('tasks.jsonl', 'checkpoints'))
  out = tmp_path / 'trace.json'
  assert main([str(run), '--perfetto', str(out)]) == 2
  err = capsys.readouterr().err
  assert (
    err
    == f'fedsim-plot: error: {run}: no tasks.jsonl, which the timeline is made of; run with run.write_tasks=True (the default)\n'
  )
  assert not out.exists()


def test_cli_refuses_several_runs_for_one_trace(compass_run, tmp_path, capsys):
  out = tmp_path / 'trace.json'
  assert main([str(compass_run), str(compass_run), '--perfetto', str(out)]) == 2
  assert capsys.readouterr().err.count('\n') == 1
  assert not out.exists()
