"""Trace replay of device speeds and online windows, plus a synthetic periodic availability.

Replaying measured per-device speeds and availability windows is how FedScale (Lai et al. 2022,
Section 4) drives its simulator; this module reads such data from small JSON/CSV files. The
periodic model is a simple diurnal stand-in (each device online for a fixed share of every
period, at a device-specific phase), as used when no availability trace is at hand.

File formats (times in virtual seconds):

JSON, one file::

  {"clients": [
    {"id": 0, "step_time": 0.12, "communication_time": 3.0, "overhead": 0.0,
     "windows": [[0, 3600], [7200, 9000]]},
    ...]}

  `overhead` is optional (default 0). `windows` lists [start, end) online intervals, sorted and
  separated (end < next start); absent or null means always online, [] means never online.
  `Infinity` is accepted as the last end. Unknown keys are rejected (typos).

CSV, one or two files::

  speeds:   client_id,step_time,communication_time[,overhead]
  windows:  client_id,start,end          (optional second file, one row per window)

  Window rows of a client must appear in increasing time order. A client without window rows
  (or every client, without a windows file) is always online.

Validation: client ids must be exactly 0..K-1 with no duplicates; step_time > 0,
communication_time and overhead >= 0, all finite; windows need 0 <= start < end and
end < next start. Unsorted or overlapping windows are rejected, never sorted or merged, since
they usually mean a broken export. A trace may hold MORE clients than the federation (K >=
num_clients): clients 0..num_clients-1 are used, so one device trace serves smaller runs;
fewer is an error. Every error is a one-line ValueError naming the file and the entry/row.
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import json
import math
import os
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsim_jax.runtime.latency.base import (
  AVAILABILITY_MODELS,
  LATENCY_MODELS,
  AvailabilityContext,
  LatencyContext,
  TaskLatency,
  check_federation,
  jittered,
)
from fedsim_jax.settings import ConfigError, Settings, number, positive, setting

Window = tuple[float, float]


@dataclass(frozen=True)
class ClientTrace:
  """One device: its speeds and online windows (None: always online)."""

  step_time: float
  communication_time: float
  overhead: float = 0.0
  windows: tuple[Window, ...] | None = None


@dataclass(frozen=True)
class Trace:
  """A loaded trace; `clients[i]` is client i."""

  clients: tuple[ClientTrace, ...]
  source: str = '<memory>'

  @property
  def num_clients(self) -> int:
    return len(self.clients)

  def check_covers(self, num_clients: int) -> None:
    """Raises unless the trace has at least `num_clients` clients."""
    if self.num_clients < num_clients:
      raise ValueError(
        f'{self.source}: trace has {self.num_clients} clients; the federation '
        f'needs >= {num_clients}'
      )


def _number(value: object, where: str, name: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float, str)):
    raise ValueError(f'{where}: {name}={value!r}; must be a number')
  try:
    return float(value)
  except ValueError:
    raise ValueError(f'{where}: {name}={value!r}; must be a number') from None


def _check_speeds(step_time: float, communication_time: float, overhead: float, where: str) -> None:
  if not (math.isfinite(step_time) and step_time > 0):
    raise ValueError(f'{where}: step_time={step_time}; must be finite and > 0')
  for name, value in (('communication_time', communication_time), ('overhead', overhead)):
    if not (math.isfinite(value) and value >= 0):
      raise ValueError(f'{where}: {name}={value}; must be finite and >= 0')


def check_windows(windows: Sequence[Sequence[float]], where: str) -> tuple[Window, ...]:
  """Validated [start, end) windows: 0 <= start < end, each end < the next start."""
  result: list[Window] = []
  for k, window in enumerate(windows):
    if not isinstance(window, (list, tuple)) or len(window) != 2:
      raise ValueError(f'{where}: window {k}={window!r}; must be a [start, end] pair')
    start, end = (_number(v, where, f'window {k}') for v in window)
    if not (math.isfinite(start) and start >= 0 and end > start):
      raise ValueError(f'{where}: window {k}=[{start}, {end}]; need 0 <= start < end')
    if result and start <= result[-1][1]:
      raise ValueError(
        f'{where}: window {k}=[{start}, {end}] starts before or at the previous '
        f'end {result[-1][1]}; windows must be sorted and separated'
      )
    result.append((start, end))
  return tuple(result)


def _check_ids(ids: list[int], source: str) -> None:
  expected = set(range(len(ids)))
  missing = sorted(expected - set(ids))
  if missing:
    raise ValueError(f'{source}: client ids must be 0..{len(ids) - 1}; missing {missing[:5]}')


def _load_json(path: pathlib.Path) -> Trace:
  try:
    data = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f'{path}: invalid JSON ({e})') from None
  if not isinstance(data, dict) or not isinstance(data.get('clients'), list):
    raise ValueError(f'{path}: top level must be an object with a "clients" list')
  allowed = {'id', 'step_time', 'communication_time', 'overhead', 'windows'}
  by_id: dict[int, ClientTrace] = {}
  for row, entry in enumerate(data['clients']):
    where = f'{path}: clients[{row}]'
    if not isinstance(entry, dict):
      raise ValueError(f'{where}: must be an object')
    unknown = sorted(set(entry) - allowed)
    if unknown:
      raise ValueError(f'{where}: unknown keys {unknown}; allowed: {sorted(allowed)}')
    for key in ('id', 'step_time', 'communication_time'):
      if key not in entry:
        raise ValueError(f'{where}: missing "{key}"')
    client_id = entry['id']
    if isinstance(client_id, bool) or not isinstance(client_id, int) or client_id < 0:
      raise ValueError(f'{where}: id={client_id!r}; must be an int >= 0')
    if client_id in by_id:
      raise ValueError(f'{where}: duplicate client id {client_id}')
    step_time = _number(entry['step_time'], where, 'step_time')
    comm = _number(entry['communication_time'], where, 'communication_time')
    overhead = _number(entry.get('overhead', 0.0), where, 'overhead')
    _check_speeds(step_time, comm, overhead, where)
    windows = entry.get('windows')
    if windows is not None:
      if not isinstance(windows, list):
        raise ValueError(f'{where}: windows={windows!r}; must be a list of [start, end] pairs')
      windows = check_windows(windows, where)
    by_id[client_id] = ClientTrace(step_time, comm, overhead, windows)
  _check_ids(list(by_id), str(path))
  return Trace(tuple(by_id[i] for i in range(len(by_id))), str(path))


def _csv_rows(
  path: pathlib.Path, headers: Sequence[Sequence[str]]
) -> tuple[list[str], list[tuple[int, list[str]]]]:
  """(header, [(line number, row)]) of a CSV whose header is one of `headers`."""
  with path.open(newline='') as f:
    rows = [
      (n, [cell.strip() for cell in row])
      for n, row in enumerate(csv.reader(f), 1)
      if row and any(cell.strip() for cell in row)
    ]
  if not rows or rows[0][1] not in [list(h) for h in headers]:
    got = rows[0][1] if rows else []
    raise ValueError(
      f'{path}: line 1: header {",".join(got)!r}; expected one of {[",".join(h) for h in headers]}'
    )
  header = rows[0][1]
  for n, row in rows[1:]:
    if len(row) != len(header):
      raise ValueError(f'{path}: line {n}: {len(row)} fields; header has {len(header)}')
  return header, rows[1:]


def _client_id(cell: str, where: str) -> int:
  try:
    value = int(cell)
  except ValueError:
    raise ValueError(f'{where}: client_id={cell!r}; must be an int >= 0') from None
  if value < 0:
    raise ValueError(f'{where}: client_id={cell!r}; must be an int >= 0')
  return value


def _load_csv(path: pathlib.Path, windows_path: pathlib.Path | None) -> Trace:
  _, rows = _csv_rows(
    path,
    [
      ('client_id', 'step_time', 'communication_time'),
      ('client_id', 'step_time', 'communication_time', 'overhead'),
    ],
  )
  speeds: dict[int, tuple[float, float, float]] = {}
  for n, row in rows:
    where = f'{path}: line {n}'
    client_id = _client_id(row[0], where)
    if client_id in speeds:
      raise ValueError(f'{where}: duplicate client id {client_id}')
    values = [
      _number(cell, where, name)
      for cell, name in zip(row[1:], ('step_time', 'communication_time', 'overhead'))
    ]
    values += [0.0] * (3 - len(values))
    step_time, communication_time, overhead = values
    _check_speeds(step_time, communication_time, overhead, where)
    speeds[client_id] = (step_time, communication_time, overhead)
  _check_ids(list(speeds), str(path))
  windows: dict[int, list[Window]] = {}
  if windows_path is not None:
    _, rows = _csv_rows(windows_path, [('client_id', 'start', 'end')])
    for n, row in rows:
      where = f'{windows_path}: line {n}'
      client_id = _client_id(row[0], where)
      if client_id not in speeds:
        raise ValueError(f'{where}: client_id={client_id} is not in {path}')
      ((start, end),) = check_windows(
        [(_number(row[1], where, 'start'), _number(row[2], where, 'end'))], where
      )
      previous = windows.setdefault(client_id, [])
      # Checked row by row (not after grouping) so the error names the offending row.
      if previous and start <= previous[-1][1]:
        raise ValueError(
          f'{where}: window [{start}, {end}] of client {client_id} starts before '
          f'or at its previous end {previous[-1][1]}; rows must be sorted and '
          'separated'
        )
      previous.append((start, end))
  return Trace(
    tuple(
      ClientTrace(*speeds[i], tuple(windows[i]) if i in windows else None)
      for i in range(len(speeds))
    ),
    str(path),
  )


def load_trace(path: str | pathlib.Path, windows_path: str | pathlib.Path | None = None) -> Trace:
  """Loads a trace from `.json`, or from `.csv` speeds plus an optional windows CSV.

  See the module docstring for the formats and the validation rules.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise ValueError(f'{path}: trace file not found')
  suffix = path.suffix.lower()
  if suffix == '.json':
    if windows_path is not None:
      raise ValueError(f'{path}: windows_path={windows_path}; JSON traces hold their windows')
    return _load_json(path)
  if suffix == '.csv':
    if windows_path is not None and not pathlib.Path(windows_path).is_file():
      raise ValueError(f'{windows_path}: windows file not found')
    return _load_csv(path, None if windows_path is None else pathlib.Path(windows_path))
  raise ValueError(f'{path}: unknown trace format {suffix!r}; allowed: .json, .csv')


def _as_trace(trace: Trace | str | pathlib.Path, num_clients: int) -> Trace:
  if not isinstance(trace, Trace):
    trace = load_trace(trace)
  trace.check_covers(num_clients)
  return trace


def _trace_source(name: str, value: Any) -> None:
  if not isinstance(value, (Trace, str, os.PathLike)) or (isinstance(value, str) and not value):
    raise ConfigError(
      f'{name}={value!r} is invalid; allowed values: a trace file (.json, or .csv speeds)'
    )


_trace_source.allowed = 'a trace file (.json, or .csv speeds)'  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class TraceLatencySettings(Settings):
  """Settings of `TraceLatency` (`latency.name='trace'`)."""

  trace: str | None = setting(None, _trace_source, 'the trace file (see `trace` module)')
  jitter: float = setting(0.0, positive(allow_zero=True), 'relative per-task std of step time')


@dataclasses.dataclass(frozen=True)
class TraceAvailabilitySettings(Settings):
  """Settings of `TraceAvailability` (`availability.name='trace'`)."""

  trace: str | None = setting(None, _trace_source, 'the trace file whose windows are replayed')


@dataclasses.dataclass(frozen=True)
class PeriodicSettings(Settings):
  """Settings of `PeriodicAvailability` (`availability.name='periodic'`)."""

  online_fraction: float = setting(
    0.5, number(above=0, maximum=1), 'share of each period a client is online'
  )
  period: float = setting(86400.0, positive(), 'seconds (86400: a day)')


class TraceLatency:
  """Replays each device's traced step time, communication time and overhead.

  Deterministic unless `jitter` j > 0, which draws each task's step time from
  N(t_i, (j t_i)^2) truncated to positive values (as `per_step.PerStepLatency`).

  Args:
    num_clients: federation size (the trace must hold at least this many clients).
    rng: this model's own generator (only used for jitter).
    trace: a `Trace` or a path for `load_trace`.
    jitter: relative per-task standard deviation of the step time.
  """

  def __init__(
    self,
    num_clients: int,
    rng: np.random.Generator,
    *,
    trace: Trace | str | pathlib.Path,
    jitter: float = 0.0,
  ) -> None:
    check_federation(num_clients, rng)
    TraceLatencySettings(trace, jitter).validate('latency.kwargs.')  # type: ignore[arg-type]
    self.rng = rng
    self.jitter = float(jitter)
    self.trace = _as_trace(trace, num_clients)
    clients = self.trace.clients[:num_clients]
    self.step_time = np.array([c.step_time for c in clients])
    self.communication_time = np.array([c.communication_time for c in clients])
    self.overhead = np.array([c.overhead for c in clients])

  def expected_step_time(self, client_id: int) -> float:
    return float(self.step_time[client_id])

  def sample(self, client_id: int) -> TaskLatency:
    step_time = jittered(self.rng, self.step_time[client_id], self.jitter)
    return TaskLatency(
      communication=float(self.communication_time[client_id]),
      overhead=float(self.overhead[client_id]),
      per_step=step_time,
    )


class WindowAvailability:
  """Online during explicit per-client [start, end) windows (None: always online).

  A client is online at t iff start <= t < end for one of its windows: at exactly `end` it is
  offline. Lookups are a bisect over the window starts.

  Args:
    windows: per client, a sequence of sorted, separated (start, end) pairs, or None.
  """

  def __init__(self, windows: Sequence[Sequence[Sequence[float]] | None]) -> None:
    self._starts: list[list[float] | None] = []
    self._ends: list[list[float] | None] = []
    for i, client_windows in enumerate(windows):
      if client_windows is None:
        self._starts.append(None)
        self._ends.append(None)
        continue
      checked = check_windows(client_windows, f'availability.windows[{i}]')
      self._starts.append([w[0] for w in checked])
      self._ends.append([w[1] for w in checked])

  @property
  def num_clients(self) -> int:
    return len(self._starts)

  @staticmethod
  def _window(starts: list[float], time: float) -> int:
    """Index of the last window starting at or before `time` (-1 if none)."""
    return bisect.bisect_right(starts, time) - 1

  def next_available(self, client_id: int, time: float) -> float:
    starts, ends = self._starts[client_id], self._ends[client_id]
    if starts is None or ends is None:
      return time
    k = self._window(starts, time)
    if k >= 0 and time < ends[k]:
      return time
    return starts[k + 1] if k + 1 < len(starts) else math.inf

  def online_until(self, client_id: int, time: float) -> float:
    starts, ends = self._starts[client_id], self._ends[client_id]
    if starts is None or ends is None:
      return math.inf
    k = self._window(starts, time)
    if k >= 0 and time < ends[k]:
      return ends[k]
    raise ValueError(f'availability: client {client_id} is offline at t={time}')


class TraceAvailability(WindowAvailability):
  """The traced online windows of clients 0..num_clients-1.

  Args:
    num_clients: federation size (the trace must hold at least this many clients).
    rng: unused (kept for a uniform constructor signature).
    trace: a `Trace` or a path for `load_trace`.
  """

  def __init__(
    self,
    num_clients: int,
    rng: np.random.Generator | None = None,
    *,
    trace: Trace | str | pathlib.Path,
  ) -> None:
    del rng
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
      raise ValueError(f'availability.num_clients={num_clients!r}; must be an int >= 1')
    TraceAvailabilitySettings(trace).validate('availability.kwargs.')  # type: ignore[arg-type]
    self.trace = _as_trace(trace, num_clients)
    super().__init__([c.windows for c in self.trace.clients[:num_clients]])


class PeriodicAvailability:
  """Simple diurnal model: each client is online `online_fraction * period` seconds of every
  `period`, starting at a per-client phase drawn uniformly from [0, period).

  Client i is online at t iff (t - phase_i) mod period < online_fraction * period. With
  `online_fraction` 1 every client is always online.

  Args:
    num_clients: federation size.
    rng: this model's own generator (phases are drawn at construction).
    online_fraction: share of each period a client is online, in (0, 1].
    period: seconds (e.g. 86400 for a day).
  """

  def __init__(
    self, num_clients: int, rng: np.random.Generator, *, online_fraction: float, period: float
  ) -> None:
    check_federation(num_clients, rng, 'availability')
    PeriodicSettings(online_fraction, period).validate('availability.kwargs.')
    self.online_fraction = float(online_fraction)
    self.period = float(period)
    self.online_time = self.online_fraction * self.period
    self.phase = rng.uniform(0.0, self.period, num_clients)

  def _start(self, client_id: int, k: int) -> float:
    """Start of client `client_id`'s k-th period (the one formula every method uses, so that
    a time returned by `next_available` is classified consistently when passed back)."""
    return float(self.phase[client_id]) + k * self.period

  def _period_index(self, client_id: int, time: float) -> int:
    """k with start(k) <= time < start(k + 1), robust to rounding at the edges."""
    k = math.floor((time - float(self.phase[client_id])) / self.period)
    if self._start(client_id, k + 1) <= time:
      k += 1
    elif self._start(client_id, k) > time:
      k -= 1
    return k

  def next_available(self, client_id: int, time: float) -> float:
    if self.online_fraction == 1:
      return time
    k = self._period_index(client_id, time)
    if time < self._start(client_id, k) + self.online_time:
      return time
    return self._start(client_id, k + 1)

  def online_until(self, client_id: int, time: float) -> float:
    if self.online_fraction == 1:
      return math.inf
    start = self._start(client_id, self._period_index(client_id, time))
    if time < start + self.online_time:
      return start + self.online_time
    raise ValueError(f'availability: client {client_id} is offline at t={time}')


@LATENCY_MODELS.register('trace', TraceLatencySettings)
def trace_latency(settings: TraceLatencySettings, context: LatencyContext) -> TraceLatency:
  """Per-client speeds replayed from a JSON/CSV trace file."""
  assert settings.trace is not None  # (checked by the settings)
  return TraceLatency(
    context.num_clients, context.rng, trace=settings.trace, jitter=settings.jitter
  )


@AVAILABILITY_MODELS.register('trace', TraceAvailabilitySettings)
def trace_availability(
  settings: TraceAvailabilitySettings, context: AvailabilityContext
) -> TraceAvailability:
  """Online windows replayed from a JSON trace file."""
  assert settings.trace is not None  # (checked by the settings)
  return TraceAvailability(context.num_clients, context.rng, trace=settings.trace)


@AVAILABILITY_MODELS.register('periodic', PeriodicSettings)
def periodic(settings: PeriodicSettings, context: AvailabilityContext) -> PeriodicAvailability:
  """Each client online a fixed share of every period, at a phase of its own."""
  return PeriodicAvailability(context.num_clients, context.rng, **settings.as_dict())
