"""The small result files behind the tables of docs/results/: one JSON file per sweep.

A reproduction binary run with `--export=PATH` (`experiments/sweep.py`) writes one: the kit
(`fedasmu`, `fedcompass`, `stragglers`, `ccfedavg`, `transforms`, `heterogeneity`; `scaling`, whose records are a benchmark's points), the exact command, the sweep's settings, the
commit it was exported at, and one record per finished run as the kit's `run_sweep` returns it,
with the run's directory replaced by the time its `summary.json` was written (`finished`).
`experiments/results_docs.py` renders the docs' tables from these files through the kits' table
functions, so a table in a doc is exactly what the committed records give.

The file is JSON with one run record per line, so that a rerun shows in `git diff` run by run.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from fedsim_jax.workdir import writable_directory_problem

KITS = (
  'fedasmu',
  'fedcompass',
  'stragglers',
  'ccfedavg',
  'transforms',
  'heterogeneity',
  'scaling',
)
FORMAT = 1  # bumped when the layout changes


class ResultsDataError(ValueError):
  """A result file that cannot be written or read; its message is one line."""


def _commit(directory: str) -> str | None:
  """'<short hash>' of the checkout holding `directory`, '+ changes' when it has uncommitted
  changes; None outside a git checkout."""

  def git(*args: str) -> str:
    return subprocess.run(
      ['git', *args], cwd=directory, capture_output=True, text=True, check=True
    ).stdout.strip()

  try:
    head = git('rev-parse', '--short', 'HEAD')
    dirty = git('status', '--porcelain', '--untracked-files=no')
  except (OSError, subprocess.CalledProcessError):
    return None
  return f'{head} + changes' if dirty else head


def _finished(run_dir: str | None) -> str | None:
  """When the run in `run_dir` wrote its summary (UTC, to the minute); None without one."""
  path = os.path.join(run_dir, 'summary.json') if run_dir else None
  if not path or not os.path.exists(path):
    return None
  stamp = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
  return stamp.strftime('%Y-%m-%d %H:%M UTC')


def compact_record(record: dict[str, Any]) -> dict[str, Any]:
  """`record` without its run directory (a path on the exporting machine), with `finished`:
  when its summary was written, or, for a record of no run directory (a benchmark's point),
  its own `finished`."""
  compact = {key: value for key, value in record.items() if key != 'workdir'}
  if 'workdir' in record or 'finished' not in record:
    compact['finished'] = _finished(record.get('workdir'))
  return compact


def command_line(argv: Sequence[str]) -> str:
  """The shell command that ran this process, as `.venv/bin/python <script> <flags>` when run
  from the checkout's venv."""
  python = os.path.relpath(sys.executable)
  if python.startswith('..'):
    python = 'python'
  script = os.path.relpath(argv[0]) if os.path.isabs(argv[0]) else argv[0]
  return shlex.join([python, script, *argv[1:]])


def export(
  path: str,
  kit: str,
  records: Sequence[dict[str, Any]],
  settings: dict[str, Any],
  command: str,
) -> str:
  """Writes the result file of one sweep to `path`; returns `path`.

  Raises:
    ResultsDataError: an unknown kit, or no records (a wrong --workdir or flags would otherwise
      blank the tables rendered from the file).
  """
  if kit not in KITS:
    raise ResultsDataError(f'kit={kit!r} is not allowed; allowed values: {list(KITS)}')
  if not records:
    raise ResultsDataError(
      f'--export={path}: the sweep has no finished run to export; check --workdir and the flags'
    )
  header = {
    'format': FORMAT,
    'kit': kit,
    'command': command,
    'exported': datetime.date.today().isoformat(),
    'exported_at_commit': _commit(os.path.dirname(os.path.abspath(__file__))),
    # JSON has no tuples; anything else unexpected is kept as its repr.
    'settings': json.loads(json.dumps(settings, default=repr)),
  }
  lines = [
    f'  {json.dumps(key)}: {json.dumps(value, sort_keys=True)},' for key, value in header.items()
  ]
  body = ',\n'.join(
    '    ' + json.dumps(compact_record(dict(record)), sort_keys=True) for record in records
  )
  from fedsim_jax.metrics.writers import write_text  # Deferred: it loads JAX.

  prepare_path(path)
  text = '{\n' + '\n'.join(lines) + '\n  "records": [\n' + body + '\n  ]\n}\n'
  try:
    write_text(path, text)
  except OSError as error:
    raise ResultsDataError(f'--export={path}: cannot write it ({error.strerror})') from None
  return path


def prepare_path(path: str) -> None:
  """Checks that a result file can be written at `path`, creating its folder (a sweep calls it
  before its first run, so that a bad --export stops it then, not after hours of runs).

  Raises:
    ResultsDataError: an empty path, a folder, or a folder that cannot be created.
  """
  if not path.strip() or path.endswith(os.sep) or os.path.isdir(path):
    raise ResultsDataError(f'--export={path!r} is invalid; allowed values: a file path (.json)')
  directory = os.path.dirname(os.path.abspath(path))
  problem = writable_directory_problem(directory)
  if problem is not None:
    raise ResultsDataError(f'--export={path}: its folder {directory}: {problem}')


# The record keys that name a run of each kit (its method, setting and seed): a run of a later
# result file replaces the run of an earlier one with the same values (`merge`).
IDENTITY = {
  'fedasmu': ('method', 'model', 'dataset', 'trigger_period', 'seed'),
  'fedcompass': (
    'algorithm',
    'partition',
    'm',
    'speed',
    'q_ratio',
    'latest_time_factor',
    'variant',
    'seed',
  ),
  'stragglers': ('algorithm', 'latency', 'seed'),
  'ccfedavg': ('algorithm', 'setting', 'participation', 'schedule', 'gamma', 'r', 'w', 'seed'),
  'transforms': (
    'experiment',
    'algorithm',
    'noise_multiplier',
    'attack',
    'fraction',
    'robust',
    'compression',
    'seed',
  ),
  'heterogeneity': ('partition', 'method', 'seed'),
  'scaling': ('curve', 'series', 'size'),
}


def merge(files: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """One result file of the runs of `files` (all of one kit): the first file's header, and its
  records with each one that a later file has a run of the same `IDENTITY` for replaced by
  that run (runs only a later file has are added)."""
  keys = IDENTITY[files[0]['kit']]
  runs: dict[tuple, dict[str, Any]] = {}
  for data in files:
    for record in data['records']:
      runs[tuple(repr(record.get(key)) for key in keys)] = record
  return dict(files[0], records=list(runs.values()))


def load(path: str) -> dict[str, Any]:
  """The result file at `path` (as `export` wrote it).

  Raises:
    ResultsDataError: a missing or unreadable file, or one without a known kit and records.
  """
  try:
    with open(path, encoding='utf-8') as f:
      data = json.load(f)
  except OSError as error:
    raise ResultsDataError(f'{path}: cannot read the result file ({error.strerror})') from None
  except ValueError as error:
    raise ResultsDataError(f'{path}: not a JSON result file ({error})') from None
  if not isinstance(data, dict) or data.get('kit') not in KITS or not data.get('records'):
    raise ResultsDataError(
      f'{path}: not a result file of experiments/results_data.py (needs "kit" among '
      f'{list(KITS)} and "records")'
    )
  return data
