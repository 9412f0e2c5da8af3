"""Trace replay (JSON / CSV), window availability and the periodic diurnal model."""

import json
import math
import pathlib

import numpy as np
import pytest

from fedsim_jax.runtime.latency.trace import (
  PeriodicAvailability,
  TraceAvailability,
  TraceLatency,
  WindowAvailability,
  load_trace,
)

EXAMPLE = pathlib.Path(__file__).parents[3] / 'configs' / 'traces' / 'example_trace.json'


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return path


def _json(tmp_path, clients):
  return _write(tmp_path, 'trace.json', json.dumps({'clients': clients}))


def test_example_trace_loads():
  trace = load_trace(EXAMPLE)
  assert trace.num_clients == 3
  latency = TraceLatency(3, np.random.default_rng(0), trace=EXAMPLE)
  assert latency.sample(1) == (8.5, 1.5, 0.35)
  assert latency.sample(1).duration(10) == pytest.approx(8.5 + 1.5 + 3.5)
  assert latency.expected_step_time(0) == 0.12
  availability = TraceAvailability(3, trace=trace)
  assert availability.next_available(0, 4000.0) == 7200.0
  assert availability.next_available(1, 1e9) == 1e9
  assert availability.online_until(1, 5.0) == math.inf
  assert availability.next_available(2, 0.0) == 600.0


class TestWindowAvailability:
  availability = WindowAvailability([[(0.0, 10.0), (20.0, 30.0)], None, [], [(5.0, math.inf)]])

  @pytest.mark.parametrize(
    'time,expected',
    [
      (0.0, 0.0),
      (5.0, 5.0),
      (9.999, 9.999),
      (10.0, 20.0),
      (15.0, 20.0),
      (20.0, 20.0),
      (29.0, 29.0),
      (30.0, math.inf),
      (100.0, math.inf),
    ],
  )
  def test_next_available(self, time, expected):
    assert self.availability.next_available(0, time) == expected

  @pytest.mark.parametrize('time,expected', [(0.0, 10.0), (9.5, 10.0), (20.0, 30.0)])
  def test_online_until(self, time, expected):
    assert self.availability.online_until(0, time) == expected

  @pytest.mark.parametrize('time', [10.0, 15.0, 30.0])
  def test_online_until_offline_raises(self, time):
    with pytest.raises(ValueError, match='offline'):
      self.availability.online_until(0, time)

  def test_always_never_and_open_ended(self):
    a = self.availability
    assert a.next_available(1, 123.0) == 123.0 and a.online_until(1, 123.0) == math.inf
    assert a.next_available(2, 0.0) == math.inf
    assert a.next_available(3, 0.0) == 5.0 and a.online_until(3, 5.0) == math.inf

  def test_windows_before_first_start(self):
    late = WindowAvailability([[(100.0, 200.0)]])
    assert late.next_available(0, 0.0) == 100.0


def test_json_windows_and_jitter(tmp_path):
  path = _json(
    tmp_path,
    [
      {'id': 1, 'step_time': 1.0, 'communication_time': 0.0},
      {'id': 0, 'step_time': 2.0, 'communication_time': 1.0, 'windows': [[0, 5], [6, 7]]},
    ],
  )
  trace = load_trace(path)
  assert trace.clients[0].step_time == 2.0 and trace.clients[0].windows == ((0, 5), (6, 7))
  model = TraceLatency(2, np.random.default_rng(0), trace=trace, jitter=0.05)
  steps = np.array([model.sample(0).per_step for _ in range(20000)])
  assert steps.mean() == pytest.approx(2.0, rel=0.01)


def test_csv_with_windows(tmp_path):
  speeds = _write(
    tmp_path,
    's.csv',
    'client_id,step_time,communication_time,overhead\n0,0.1,2.0,0.5\n1,0.2,3.0,0\n2,0.3,1.0,0\n',
  )
  windows = _write(tmp_path, 'w.csv', 'client_id,start,end\n0,0,10\n1,5,6\n0,20,30\n')
  trace = load_trace(speeds, windows)
  assert trace.clients[0].windows == ((0, 10), (20, 30))
  assert trace.clients[2].windows is None and trace.clients[0].overhead == 0.5
  availability = TraceAvailability(2, trace=trace)  # a trace may cover more clients
  assert availability.num_clients == 2
  assert availability.next_available(0, 10.0) == 20.0
  no_overhead = _write(tmp_path, 'n.csv', 'client_id,step_time,communication_time\n0,1,1\n')
  assert load_trace(no_overhead).clients[0].overhead == 0.0


@pytest.mark.parametrize(
  'clients,match',
  [
    (
      [
        {'id': 0, 'step_time': 1, 'communication_time': 1},
        {'id': 0, 'step_time': 1, 'communication_time': 1},
      ],
      r'clients\[1\].*duplicate',
    ),
    ([{'id': 1, 'step_time': 1, 'communication_time': 1}], r'missing \[0\]'),
    ([{'id': 0, 'step_time': -1, 'communication_time': 1}], r'clients\[0\].*step_time'),
    ([{'id': 0, 'step_time': 1, 'communication_time': -1}], 'communication_time'),
    ([{'id': 0, 'step_time': 1, 'communication_time': 1, 'overhead': -2}], 'overhead'),
    ([{'id': 0, 'step_time': 1}], 'missing "communication_time"'),
    ([{'id': 0, 'step_time': 1, 'communication_time': 1, 'speed': 2}], 'unknown keys'),
    ([{'id': 0, 'step_time': 1, 'communication_time': 1, 'windows': [[5, 9], [0, 2]]}], 'sorted'),
    ([{'id': 0, 'step_time': 1, 'communication_time': 1, 'windows': [[0, 5], [4, 9]]}], 'sorted'),
    (
      [{'id': 0, 'step_time': 1, 'communication_time': 1, 'windows': [[0, 5], [5, 9]]}],
      'separated',
    ),
    ([{'id': 0, 'step_time': 1, 'communication_time': 1, 'windows': [[3, 3]]}], 'start < end'),
    ([{'id': 0, 'step_time': 1, 'communication_time': 1, 'windows': [[-1, 3]]}], 'start < end'),
    ([{'id': 'a', 'step_time': 1, 'communication_time': 1}], 'id='),
  ],
)
def test_invalid_json_rejected(tmp_path, clients, match):
  path = _json(tmp_path, clients)
  with pytest.raises(ValueError, match=match) as error:
    load_trace(path)
  assert str(path) in str(error.value) and '\n' not in str(error.value)


@pytest.mark.parametrize(
  'speeds,windows,match',
  [
    ('client_id,step_time\n0,1\n', None, 'line 1: header'),
    ('client_id,step_time,communication_time\n0,1,1\n0,1,1\n', None, 'line 3: duplicate'),
    ('client_id,step_time,communication_time\n0,1,1\n2,1,1\n', None, r'missing \[1\]'),
    ('client_id,step_time,communication_time\n0,x,1\n', None, 'line 2: step_time'),
    ('client_id,step_time,communication_time\n0,1\n', None, 'line 2: 2 fields'),
    (
      'client_id,step_time,communication_time\n0,1,1\n',
      'client_id,start,end\n0,5,9\n0,0,2\n',
      'w.csv: line 3',
    ),
    (
      'client_id,step_time,communication_time\n0,1,1\n',
      'client_id,start,end\n3,0,2\n',
      'w.csv: line 2: client_id=3',
    ),
    (
      'client_id,step_time,communication_time\n0,1,1\n',
      'client,start,end\n0,0,2\n',
      'w.csv: line 1: header',
    ),
  ],
)
def test_invalid_csv_rejected(tmp_path, speeds, windows, match):
  speeds_path = _write(tmp_path, 's.csv', speeds)
  windows_path = None if windows is None else _write(tmp_path, 'w.csv', windows)
  with pytest.raises(ValueError, match=match):
    load_trace(speeds_path, windows_path)


def test_invalid_files(tmp_path):
  with pytest.raises(ValueError, match='not found'):
    load_trace(tmp_path / 'missing.json')
  with pytest.raises(ValueError, match='unknown trace format'):
    load_trace(_write(tmp_path, 't.txt', ''))
  with pytest.raises(ValueError, match='invalid JSON'):
    load_trace(_write(tmp_path, 'bad.json', '{'))
  with pytest.raises(ValueError, match='"clients" list'):
    load_trace(_write(tmp_path, 'bad2.json', '[]'))


def test_trace_too_small_for_federation():
  with pytest.raises(ValueError, match='needs >= 4'):
    TraceLatency(4, np.random.default_rng(0), trace=EXAMPLE)
  with pytest.raises(ValueError, match='needs >= 4'):
    TraceAvailability(4, trace=EXAMPLE)


def test_trace_latency_invalid_settings():
  with pytest.raises(ValueError, match='latency.kwargs.jitter'):
    TraceLatency(3, np.random.default_rng(0), trace=EXAMPLE, jitter=-1.0)
  with pytest.raises(ValueError, match='latency.num_clients'):
    TraceLatency(0, np.random.default_rng(0), trace=EXAMPLE)


class TestPeriodicAvailability:
  def test_online_share_and_edges(self):
    model = PeriodicAvailability(200, np.random.default_rng(0), online_fraction=0.25, period=100.0)
    times = np.arange(0.0, 1000.0, 0.5)
    online = np.array([[model.next_available(c, t) == t for t in times] for c in range(200)])
    assert online.mean() == pytest.approx(0.25, abs=0.01)
    for c in range(20):
      phase = model.phase[c]
      start = phase + 300.0
      assert model.next_available(c, start) == start
      assert model.online_until(c, start) == pytest.approx(start + 25.0)
      end = model.online_until(c, start)
      assert model.next_available(c, end) == pytest.approx(start + 100.0)
      nxt = model.next_available(c, start + 30.0)
      assert model.next_available(c, nxt) == nxt  # a returned start is itself online
      assert model.online_until(c, nxt) == pytest.approx(nxt + 25.0)
      with pytest.raises(ValueError, match='offline'):
        model.online_until(c, start + 30.0)

  def test_always_online_and_seed(self):
    model = PeriodicAvailability(3, np.random.default_rng(0), online_fraction=1.0, period=10.0)
    assert model.next_available(0, 7.0) == 7.0 and model.online_until(0, 7.0) == math.inf
    again = PeriodicAvailability(3, np.random.default_rng(0), online_fraction=1.0, period=10.0)
    np.testing.assert_array_equal(model.phase, again.phase)

  @pytest.mark.parametrize(
    'kwargs,match',
    [
      ({'online_fraction': 0.0, 'period': 1.0}, 'availability.kwargs.online_fraction'),
      ({'online_fraction': 1.5, 'period': 1.0}, 'availability.kwargs.online_fraction'),
      ({'online_fraction': 0.5, 'period': 0.0}, 'availability.kwargs.period'),
      ({'online_fraction': 0.5, 'period': math.inf}, 'availability.kwargs.period'),
    ],
  )
  def test_invalid_settings(self, kwargs, match):
    with pytest.raises(ValueError, match=match):
      PeriodicAvailability(3, np.random.default_rng(0), **kwargs)
