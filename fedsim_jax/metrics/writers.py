"""Run outputs: `metrics.jsonl` rows and the `summary.json` of a run."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any


class MetricsWriter:
  """Appends one JSON object per evaluation point to `<workdir>/metrics.jsonl`."""

  def __init__(self, workdir: str | os.PathLike) -> None:
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self.rows: list[dict[str, Any]] = []
    self._file = open(self.path, 'w', encoding='utf-8')

  def write(self, row: Mapping[str, Any]) -> None:
    row = dict(row)
    self.rows.append(row)
    self._file.write(json.dumps(row, sort_keys=True) + '\n')
    self._file.flush()

  def close(self) -> None:
    self._file.close()


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


def write_json(path: str | os.PathLike, obj: Any) -> None:
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(obj, f, indent=2, sort_keys=True)
    f.write('\n')
