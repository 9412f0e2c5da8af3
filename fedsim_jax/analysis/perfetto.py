"""A run's task timeline as a Chrome trace (Trace Event Format, JSON object form), which
ui.perfetto.dev and chrome://tracing open.

The clock is virtual time: an event's `ts` and `dur` are virtual seconds x 1e6, rounded to whole
nanoseconds, so the viewer's "microseconds" are microseconds of virtual time (the trace's
`otherData.clock` says so).

Two processes:

- 'server' (pid 1): the server versions as instant events on its 'versions' thread, one per
  distinct `applied_version` of the task trace, at the version's `aggregation_time`; and the
  test accuracy of each evaluation (`metrics.jsonl`) as the counter 'evaluation test_accuracy'.
- 'clients' (pid 2): a complete event ('X') per task record, from its dispatch to its end,
  named by its outcome ('aggregated', 'discarded: stale', 'in_flight', 'waiting', 'skipped')
  with the record itself as its args. With at most `max_client_tracks` clients, each client
  has its own track (tid = client id, named 'client <id>'); with more, clients are grouped
  into `client_groups` ranges of consecutive ids ('clients 0-99'), since a viewer with
  thousands of threads is of little use. Slices on one thread never overlap: a track whose
  tasks overlap in time (always in a group; a client re-dispatched before its previous task's
  recorded end) is split into lanes, extra threads named '<track> #2', '#3', ...
  placed right under it.

Tasks still unresolved when the run ended keep their recorded end (the planned arrival of a
task in flight) and carry `unfinished: true`; a record without an end runs to the end of the
trace and carries `open_end: true`.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

from fedsim_jax.analysis import measures
from fedsim_jax.analysis.run_files import RunFiles, load
from fedsim_jax.metrics.writers import write_text

SERVER_PID = 1
CLIENTS_PID = 2
VERSIONS_TID = 0
# Above this many clients, clients share tracks (`client_groups` ranges of consecutive ids).
MAX_CLIENT_TRACKS = 500
CLIENT_GROUPS = 100
NANOSECONDS = 1e9
UNFINISHED = ('in_flight', 'waiting')


class TraceError(ValueError):
  """The run cannot be exported (the message is one line naming the run and the setting)."""


@dataclasses.dataclass(frozen=True)
class _Slice:
  track: int  # client id, or group index
  start: int  # virtual nanoseconds
  end: int
  name: str
  record: dict[str, Any]


def _slice_name(record: dict[str, Any]) -> str:
  outcome = str(record.get('outcome'))
  reason = record.get('reason')
  return f'{outcome}: {reason}' if outcome == 'discarded' and reason else outcome


def _json_safe(value: Any) -> Any:
  """`value` with NaN and infinities as None (JSON has no such numbers; viewers reject them)."""
  if isinstance(value, float) and not math.isfinite(value):
    return None
  if isinstance(value, dict):
    return {key: _json_safe(item) for key, item in value.items()}
  if isinstance(value, list):
    return [_json_safe(item) for item in value]
  return value


def _slices(tasks: Sequence[dict[str, Any]], group_size: int) -> tuple[list[_Slice], int]:
  """The slices of the records that name a client and a dispatch time, and how many records
  were left out for lacking them."""
  number = measures.as_number
  times = [number(t.get(key)) for t in tasks for key in ('dispatch_time', 'end_time')]
  trace_end = max((t for t in times if t is not None), default=0.0)
  slices, left_out = [], 0
  for record in tasks:
    client, start = record.get('client'), number(record.get('dispatch_time'))
    if isinstance(client, bool) or not isinstance(client, int) or start is None:
      left_out += 1
      continue
    end = number(record.get('end_time'))
    args = _json_safe(record)
    if record.get('outcome') in UNFINISHED:
      args['unfinished'] = True
    if end is None:
      args['open_end'] = True
    end = max(start, trace_end if end is None else end)
    track = client // group_size
    slices.append(_Slice(track, _ns(start), _ns(end), _slice_name(record), args))
  return slices, left_out


def assign_lanes(intervals: Sequence[tuple[float, float]]) -> list[int]:
  """A lane for each interval (start, end) so that the intervals of one lane are disjoint
  (touching ends allowed), using as few lanes as any assignment can: earliest start first,
  each into the lane that freed first."""
  order = sorted(range(len(intervals)), key=lambda i: intervals[i])
  lanes = [0] * len(intervals)
  free: list[tuple[float, int]] = []  # (end of its last interval, lane)
  count = 0
  for i in order:
    start, end = intervals[i]
    if free and free[0][0] <= start:
      _, lane = heapq.heappop(free)
    else:
      lane, count = count, count + 1
    lanes[i] = lane
    heapq.heappush(free, (end, lane))
  return lanes


def _metadata(pid: int, tid: int | None, name: str, args: dict[str, Any]) -> dict[str, Any]:
  event: dict[str, Any] = {'ph': 'M', 'pid': pid, 'name': name, 'args': args}
  if tid is not None:
    event['tid'] = tid
  return event


def _ns(seconds: float) -> int:
  return round(seconds * NANOSECONDS)


def _us(nanoseconds: int) -> float:
  """Whole nanoseconds as trace microseconds: viewers read them back as whole nanoseconds, so
  slices that touch in the trace touch (never overlap by a rounding error) in the viewer."""
  return nanoseconds / 1000


def _client_events(slices: Sequence[_Slice], track_name: Any) -> list[dict[str, Any]]:
  """Thread metadata and 'X' events of the clients process, lanes as extra threads."""
  by_track: dict[int, list[_Slice]] = {}
  for piece in slices:
    by_track.setdefault(piece.track, []).append(piece)
  spare_tid = max(by_track, default=-1) + 1
  events: list[dict[str, Any]] = []
  position = 0
  for track in sorted(by_track):
    pieces = by_track[track]
    lanes = assign_lanes([(p.start, p.end) for p in pieces])
    extra = max(lanes)
    tids = [track, *range(spare_tid, spare_tid + extra)]
    spare_tid += extra
    for lane, tid in enumerate(tids):
      name = track_name(track) + (f' #{lane + 1}' if lane else '')
      events.append(_metadata(CLIENTS_PID, tid, 'thread_name', {'name': name}))
      events.append(_metadata(CLIENTS_PID, tid, 'thread_sort_index', {'sort_index': position}))
      position += 1
    for piece, lane in zip(pieces, lanes):
      events.append(
        {
          'ph': 'X',
          'name': piece.name,
          'cat': str(piece.record.get('outcome')),
          'pid': CLIENTS_PID,
          'tid': tids[lane],
          'ts': _us(piece.start),
          'dur': _us(piece.end - piece.start),
          'args': piece.record,
        }
      )
  return events


def _version_events(tasks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
  """An instant event per server version that the trace's aggregated tasks made."""
  versions: dict[int, tuple[float, int]] = {}  # version -> (time, updates)
  for record in tasks:
    version = record.get('applied_version')
    time = measures.as_number(record.get('aggregation_time'))
    if isinstance(version, bool) or not isinstance(version, int) or time is None:
      continue
    earlier, updates = versions.get(version, (time, 0))
    versions[version] = (min(earlier, time), updates + 1)
  return [
    {
      'ph': 'i',
      's': 't',
      'name': f'version {version}',
      'cat': 'aggregation',
      'pid': SERVER_PID,
      'tid': VERSIONS_TID,
      'ts': _us(_ns(time)),
      'args': {'version': version, 'updates': updates, 'virtual_time': time},
    }
    for version, (time, updates) in sorted(versions.items())
  ]


def _accuracy_events(metrics: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
  """A counter sample of test accuracy per evaluation that records one."""
  events = []
  for row in metrics:
    time = measures.as_number(row.get('virtual_time'))
    accuracy = measures.as_number(row.get('test_accuracy'))
    if time is None or accuracy is None or time < 0:
      continue
    events.append(
      {
        'ph': 'C',
        'name': 'evaluation',
        'pid': SERVER_PID,
        'ts': _us(_ns(time)),
        'args': {'test_accuracy': accuracy},
      }
    )
  return events


def trace_events(
  run: RunFiles | str | os.PathLike,
  *,
  max_client_tracks: int = MAX_CLIENT_TRACKS,
  client_groups: int = CLIENT_GROUPS,
) -> dict[str, Any]:
  """The Chrome trace (JSON object form) of a run's task timeline; see the module docstring.

  Args:
    run: a loaded run, or its workdir.
    max_client_tracks: with more clients than this, clients share tracks.
    client_groups: how many tracks of consecutive client ids they share then.

  Returns:
    {'traceEvents': [...], 'displayTimeUnit': 'ms', 'otherData': {...}}, ready for
    `json.dump`; `otherData` names the run, the clock and the track layout.

  Raises:
    TraceError: the run wrote no tasks.jsonl (`run.write_tasks` was off), or a bad argument.
    RunFilesError: `run` is a path that holds no readable run.
  """
  for name, value in (('max_client_tracks', max_client_tracks), ('client_groups', client_groups)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise TraceError(f'{name}={value!r}; allowed: an integer >= 1')
  if not isinstance(run, RunFiles):
    run = load(run)
  if run.tasks is None:
    raise TraceError(
      f'{run.workdir}: no tasks.jsonl, which the timeline is made of; run with '
      'run.write_tasks=True (the default)'
    )
  clients = [c for t in run.tasks if isinstance(c := t.get('client'), int)]
  num_clients = max(run.num_clients or 0, max(clients, default=-1) + 1)
  grouped = num_clients > max_client_tracks
  group_size = math.ceil(num_clients / client_groups) if grouped else 1
  slices, left_out = _slices(run.tasks, group_size)

  def track_name(track: int) -> str:
    if not grouped:
      return f'client {track}'
    last = min(num_clients, (track + 1) * group_size) - 1
    return f'clients {track * group_size}-{last}'

  events = [
    _metadata(SERVER_PID, None, 'process_name', {'name': 'server'}),
    _metadata(SERVER_PID, None, 'process_sort_index', {'sort_index': 0}),
    _metadata(SERVER_PID, VERSIONS_TID, 'thread_name', {'name': 'versions'}),
    _metadata(CLIENTS_PID, None, 'process_name', {'name': 'clients'}),
    _metadata(CLIENTS_PID, None, 'process_sort_index', {'sort_index': 1}),
    *_version_events(run.tasks),
    *_accuracy_events(run.metrics),
    *_client_events(slices, track_name),
  ]
  return {
    'traceEvents': events,
    'displayTimeUnit': 'ms',
    'otherData': {
      'clock': 'virtual time: ts and dur are virtual seconds x 1e6 (1 us = 1 us of virtual time)',
      'run': str(run.workdir),
      'label': run.label,
      'algorithm': run.algorithm,
      'status': run.status,
      'clients': num_clients,
      'client_tracks': 'one per client' if not grouped else f'{group_size} clients per track',
      'tasks': len(slices),
      'records_left_out': left_out,
    },
  }


def write_trace(
  run: RunFiles | str | os.PathLike,
  out_path: str | os.PathLike,
  *,
  max_client_tracks: int = MAX_CLIENT_TRACKS,
  client_groups: int = CLIENT_GROUPS,
) -> pathlib.Path:
  """Writes `trace_events(run, ...)` to `out_path` as JSON (atomically; its folder is created
  if needed) and returns the path. Raises as `trace_events` does."""
  trace = trace_events(run, max_client_tracks=max_client_tracks, client_groups=client_groups)
  path = pathlib.Path(out_path)
  path.parent.mkdir(parents=True, exist_ok=True)
  write_text(path, json.dumps(trace, separators=(',', ':'), allow_nan=False) + '\n')
  return path
