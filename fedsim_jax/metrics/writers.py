"""Run outputs: `metrics.jsonl` rows, the `tasks.jsonl` trace and the `summary.json` of a run."""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO


class MetricsWriter:
  """Appends one JSON object per evaluation point to `<workdir>/metrics.jsonl` (or another
  `filename`: the per-client evaluations' `clients_eval.jsonl`), one flushed line at a time.

  Args:
    workdir: the run's folder.
    rows: the rows a resumed run had written up to its checkpoint: the file is rewritten to
      exactly these (atomically) before new rows are appended.
    filename: the file's name in `workdir`.
  """

  def __init__(
    self,
    workdir: str | os.PathLike,
    rows: Sequence[Mapping[str, Any]] = (),
    filename: str = 'metrics.jsonl',
  ) -> None:
    self.path = os.path.join(workdir, filename)
    self.rows: list[dict[str, Any]] = [dict(row) for row in rows]
    temporary = self.path + '.tmp'
    with open(temporary, 'w', encoding='utf-8') as f:
      f.writelines(json.dumps(row, sort_keys=True) + '\n' for row in self.rows)
    os.replace(temporary, self.path)
    self._file = open(self.path, 'a', encoding='utf-8')  # noqa: SIM115 - closed by close()

  def write(self, row: Mapping[str, Any]) -> None:
    row = dict(row)
    self.rows.append(row)
    self._file.write(json.dumps(row, sort_keys=True) + '\n')
    self._file.flush()

  def close(self) -> None:
    self._file.close()


class TaskTraceWriter:
  """Writes the task trace, `<workdir>/tasks.jsonl`: one JSON object per line
  (`fedsim_jax.runtime.task_trace`).

  Lines are buffered; `offset()` flushes and returns the file's length, which a checkpoint
  records so that a resumed run truncates the file to it and writes on, ending with exactly the
  trace of the run that was never stopped.

  Args:
    workdir: the run's folder.
    offset: the length to truncate an existing trace to (a resumed run), or None to start a
      new one.
  """

  def __init__(self, workdir: str | os.PathLike, offset: int | None = None) -> None:
    self.path = os.path.join(workdir, 'tasks.jsonl')
    if offset is None:
      self._file = open(self.path, 'w', encoding='utf-8')  # noqa: SIM115 - closed by close()
    else:
      if not os.path.exists(self.path) or os.path.getsize(self.path) < offset:
        raise ValueError(f'{self.path} is shorter than its checkpointed {offset} bytes')
      self._file = open(self.path, 'r+', encoding='utf-8')  # noqa: SIM115
      self._file.truncate(offset)
      self._file.seek(offset)
    self._encode = json.JSONEncoder(separators=(',', ':')).encode

  def write(self, record: Mapping[str, Any]) -> None:
    self._file.write(self._encode(record) + '\n')

  def offset(self) -> int:
    """Flushes, and returns the length of the trace written so far."""
    self._file.flush()
    return self._file.tell()

  def close(self) -> None:
    self._file.close()


def read_tasks(path: str | os.PathLike) -> list[dict[str, Any]]:
  """The records of a `tasks.jsonl` (a torn last line is skipped, as in `read_metrics`)."""
  return read_metrics(path)


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
  """The rows of a `metrics.jsonl`. A torn last line (a run killed mid-write) is skipped with a
  warning; a damaged line elsewhere is an error."""
  with open(path, encoding='utf-8') as f:
    lines = f.read().split('\n')
  rows = []
  last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
  for number, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError:
      if number != last:
        raise ValueError(f'{path}: line {number + 1} is not JSON') from None
      logging.warning('%s: skipping a torn last line (the run was stopped mid-write)', path)
  return rows


def summarize(
  rows: Iterable[Mapping[str, Any]], target_accuracy: float | None = None
) -> dict[str, Any]:
  """Best and final accuracy and, when a target is given, the first virtual time (and server
  version and client updates) at which test accuracy reached it (None if never)."""
  rows = list(rows)
  if not rows:
    return {'num_evaluations': 0}
  best = max(rows, key=lambda r: r['test_accuracy'])
  final = rows[-1]
  summary: dict[str, Any] = {
    'num_evaluations': len(rows),
    'best_accuracy': best['test_accuracy'],
    'best_accuracy_time': best['virtual_time'],
    'final_accuracy': final['test_accuracy'],
    'final_loss': final['test_loss'],
    'final_virtual_time': final['virtual_time'],
    'final_version': final['version'],
    'client_updates': final['client_updates'],
    'gradient_steps': final['gradient_steps'],
  }
  if target_accuracy is not None:
    hit = next((r for r in rows if r['test_accuracy'] >= target_accuracy), None)
    summary['target_accuracy'] = target_accuracy
    summary['time_to_target'] = None if hit is None else hit['virtual_time']
    summary['version_to_target'] = None if hit is None else hit['version']
    summary['client_updates_to_target'] = None if hit is None else hit['client_updates']
  return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in summary.items()}


def _replace_atomically(path: str | os.PathLike, write: Callable[[TextIO], object]) -> None:
  """Calls `write` on a temporary file beside `path`, then renames it over `path`: readers (and
  a crash, or a full disk) only ever leave the old file or the new one, never a partial one."""
  directory = os.path.dirname(os.path.abspath(path))
  descriptor, temporary = tempfile.mkstemp(dir=directory, prefix='.tmp-')
  try:
    with os.fdopen(descriptor, 'w', encoding='utf-8') as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(temporary, path)
  except BaseException:
    if os.path.exists(temporary):
      os.remove(temporary)
    raise


def write_text(path: str | os.PathLike, text: str) -> None:
  """Writes `text` to `path` atomically."""
  _replace_atomically(path, lambda f: f.write(text))


def write_json(path: str | os.PathLike, obj: Any) -> None:
  """Writes `obj` as JSON to `path` atomically."""

  def write(f: TextIO) -> None:
    json.dump(obj, f, indent=2, sort_keys=True)
    f.write('\n')

  _replace_atomically(path, write)
