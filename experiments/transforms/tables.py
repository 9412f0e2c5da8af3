"""The privacy, robustness and compression study's tables and its agreement with the papers.

A run record (`run_record`) is the run's `setups.Cell` fields, its seed and what its summary
and metrics say: final and best test accuracy, epsilon spent, upload bytes, virtual time to
the target, and the evaluation curve (`curve`: [version, virtual seconds, accuracy, epsilon]).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from experiments import sweep
from experiments.transforms import setups


def _curve(run_dir: str) -> list[list[float | None]]:
  from fedsim_jax.metrics.writers import read_metrics

  path = os.path.join(run_dir, 'metrics.jsonl')
  if not os.path.exists(path):
    return []
  return [
    [row['version'], round(row['virtual_time'], 3), row['test_accuracy'], row.get('epsilon')]
    for row in read_metrics(path)
    if row.get('test_accuracy') is not None
  ]


def run_record(
  cell: setups.Cell, seed: int, summary: dict[str, Any], run_dir: str
) -> dict[str, Any]:
  """One run's record (see the module's docstring)."""
  privacy = summary.get('privacy') or {}
  transforms = summary.get('transforms') or {}
  epsilon = privacy.get('epsilon')
  return dict(
    cell.record(),
    seed=seed,
    status=summary.get('status'),
    final_accuracy=summary.get('final_accuracy'),
    best_accuracy=summary.get('best_accuracy'),
    final_version=summary.get('final_version'),
    final_virtual_time=summary.get('final_virtual_time'),
    time_to_target=summary.get('time_to_target'),
    target_accuracy=summary.get('target_accuracy'),
    client_updates=summary.get('client_updates'),
    epsilon=None if epsilon is None or epsilon == float('inf') else epsilon,
    delta=privacy.get('delta'),
    upload_bytes=transforms.get('upload_bytes'),
    download_bytes=transforms.get('download_bytes'),
    compression_ratio=transforms.get('compression_ratio'),
    malicious_clients=len(transforms.get('malicious_clients') or ()),
    curve=_curve(run_dir),
    host_seconds=sweep.host_seconds(summary),
    code=sweep.run_code(summary),
    workdir=run_dir,
  )


def write_outputs(
  records: Sequence[dict[str, Any]],
  settings: dict[str, Any],
  workdir: str,
  output: str,
  wall_seconds: float,
) -> None:
  """Writes `<workdir>/results.jsonl` and the markdown tables to `output`."""
  sweep.write_results(records, workdir)
  parts = [
    f'# Privacy, robustness and compression: {settings["experiment"]}',
    f'Seeds {",".join(map(str, settings["seeds"]))}; {len(records)} runs; wall time '
    f'{wall_seconds:.0f}s.',
  ]
  sweep.write_text(output, '\n\n'.join(parts) + '\n')
