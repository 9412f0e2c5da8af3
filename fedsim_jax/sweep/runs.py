"""Where each run of a sweep stands, read from its workdir: done, failed, running, resumable or
pending (`run_state`), and the status table of `fedsim-sweep --status` and the study kits."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from fedsim_jax import workdir as workdir_lib

FINAL_STATUSES = ('completed', 'diverged', 'failed')
STATES = ('done', 'failed', 'running', 'resumable', 'pending')


def ended(summary: dict[str, Any]) -> bool:
  """Whether a run's summary is its result: completed, diverged, or failed by the run's own
  rules (a stall); not a run that an error in the code stopped (`summary['error']`), which the
  next sweep runs again from its newest checkpoint."""
  return summary.get('status', 'completed') in FINAL_STATUSES and 'error' not in summary


@dataclasses.dataclass(frozen=True)
class RunState:
  """Where one run of a sweep stands.

  `state`: 'done' (it completed), 'failed' (it ended by its own rules without completing:
  diverged, or stalled; a result, not run again), 'running' (a process holds its workdir),
  'resumable' (interrupted, killed or stopped by an error: the next sweep continues it from its
  newest checkpoint) or 'pending' (not started)."""

  run_dir: str
  state: str
  status: str | None = None
  host_seconds: float | None = None
  version: int | None = None


def host_seconds(summary: dict[str, Any]) -> float | None:
  """The host seconds a run's result cost, over every process that ran it
  (`host.total_seconds`); for a run that predates that record, or resumed from a checkpoint
  that did, the last process's (`host.seconds`)."""
  host = summary.get('host', {})
  total = host.get('total_seconds')
  return host.get('seconds') if total is None else total


def run_code(summary: dict[str, Any]) -> dict[str, Any] | None:
  """The code a run ran on, as its summary records it (`summary['host']['code']`: the commit,
  whether the checkout had uncommitted changes, the package version; `fedsim_jax.provenance`);
  None for a run that predates the record."""
  return summary.get('host', {}).get('code')


def run_state(run_dir: str) -> RunState:
  """The `RunState` of the run in `run_dir`, read from its files (nothing is run)."""
  summary_path = os.path.join(run_dir, 'summary.json')
  summary = None
  if os.path.exists(summary_path):
    with open(summary_path, encoding='utf-8') as f:
      summary = json.load(f)
  version = None
  metrics_path = os.path.join(run_dir, 'metrics.jsonl')
  if os.path.exists(metrics_path):
    from fedsim_jax.metrics.writers import read_metrics

    rows = read_metrics(metrics_path)
    version = rows[-1]['version'] if rows else None
  seconds = None if summary is None else host_seconds(summary)
  status = None if summary is None else summary.get('status', 'completed')
  if summary is not None and ended(summary):
    state = 'done' if status == 'completed' else 'failed'
  elif os.path.isdir(run_dir) and workdir_lib.in_use(run_dir):
    state = 'running'
  elif os.path.isdir(run_dir) and workdir_lib.holds_results(run_dir):
    state = 'resumable'
  else:
    state = 'pending'
  return RunState(run_dir, state, status, seconds, version)


def status_table(states: Sequence[RunState], root: str) -> str:
  """A markdown table of `states` and a line of counts per state."""
  rows = [
    [
      os.path.relpath(s.run_dir, root),
      s.state if s.status in (None, 'completed') else f'{s.state} ({s.status})',
      '-' if s.host_seconds is None else f'{s.host_seconds:,.0f}',
      '-' if s.version is None else str(s.version),
    ]
    for s in states
  ]
  counts = {state: sum(s.state == state for s in states) for state in STATES}
  total = sum(s.host_seconds or 0.0 for s in states)
  return (
    markdown_table(['run', 'state', 'host s', 'last evaluated version'], rows)
    + '\n\n'
    + ', '.join(f'{n} {state}' for state, n in counts.items())
    + f' of {len(states)} runs; host time so far {total:,.0f} s'
  )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """A markdown table: the header row, the separator and one line per row of cells."""
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
  return '\n'.join(lines)
