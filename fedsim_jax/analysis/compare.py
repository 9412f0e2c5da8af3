"""`fedsim-compare`: one table row per group of runs (a workdir, or a sweep of seeds).

  fedsim-compare runs/fedavg runs/fedbuff --baseline fedavg --markdown table.md --csv table.csv

Columns: accuracy (final and best, mean ± sample std over seeds), virtual time and client
updates to the target accuracy (means over the seeds that reached it) and the same relative to
the baseline group, wasted compute and mean staleness. Runs that have not completed (killed,
interrupted, failed, diverged, still running, or killed while `--resume` extended them) are left
out, each named in one line on stderr; `--include_unfinished` keeps them, counted in the table
as unfinished. Exit codes: 0 done; 2 a path that holds no run, no completed run, an unknown
baseline, or runs with different targets and no --target (one line on stderr).
"""

from __future__ import annotations

import argparse
import csv
import io
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedsim_jax.analysis import measures
from fedsim_jax.analysis.command import groups_of, parser_for, run_command
from fedsim_jax.analysis.run_files import RunFiles, group_label

# The keys of each row of `compare`, in the CSV's column order.
COLUMNS = (
  'label',
  'algorithm',
  'dataset',
  'seeds',
  'unfinished',
  'final_accuracy_mean',
  'final_accuracy_std',
  'best_accuracy_mean',
  'best_accuracy_std',
  'target_accuracy',
  'reached',
  'time_to_target_mean',
  'client_updates_to_target_mean',
  'baseline',
  'time_to_target_ratio',
  'client_updates_to_target_ratio',
  'wasted_fraction_mean',
  'staleness_mean',
  'client_accuracy_mean',
  'client_accuracy_p10',
  'client_accuracy_min',
  'personalized_accuracy_mean',
  'personal_model_accuracy_mean',
)
# The per-client figures of a run's last evaluation (`data.client_test`), means over seeds.
CLIENT_COLUMNS = COLUMNS[-5:]

STD_CONVENTION = 'sample standard deviation (ddof=1) over seeds; 0 for a single seed'


_CLIENT_HEADERS = {
  'client_accuracy_mean': 'client mean',
  'client_accuracy_p10': 'client p10',
  'client_accuracy_min': 'worst client',
  'personalized_accuracy_mean': 'personalized mean',
  'personal_model_accuracy_mean': 'own-model mean',
}


class CompareError(ValueError):
  """Groups that cannot be compared as asked: the message is one line."""


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
  """(mean, sample std with ddof=1) of the values that are not None; std is 0.0 for one value,
  both None for none."""
  known = np.asarray([v for v in values if v is not None], dtype=float)
  if known.size == 0:
    return None, None
  std = float(known.std(ddof=1)) if known.size > 1 else 0.0
  return float(known.mean()), std


def _mean(values: Sequence[float | None]) -> float | None:
  return mean_std(values)[0]


def _ratio(value: float | None, baseline: float | None) -> float | None:
  if value is None or baseline is None or baseline == 0:
    return None
  return value / baseline


def _group_row(group: Sequence[RunFiles], target: float | None) -> dict[str, Any]:
  first = group[0]
  final_mean, final_std = mean_std([measures.final_accuracy(run) for run in group])
  best_mean, best_std = mean_std([measures.best_accuracy(run) for run in group])
  hits = [measures.first_reaching(run, target) for run in group] if target is not None else []
  reached = [hit for hit in hits if hit is not None]
  return {
    'label': group_label(group),
    'algorithm': first.algorithm,
    'dataset': first.dataset,
    'seeds': len(group),
    'unfinished': sum(not run.finished for run in group),
    'final_accuracy_mean': final_mean,
    'final_accuracy_std': final_std,
    'best_accuracy_mean': best_mean,
    'best_accuracy_std': best_std,
    'target_accuracy': target,
    'reached': len(reached) if target is not None else None,
    'time_to_target_mean': _mean([measures.as_number(hit.get('virtual_time')) for hit in reached]),
    'client_updates_to_target_mean': _mean(
      [measures.as_number(hit.get('client_updates')) for hit in reached]
    ),
    'wasted_fraction_mean': _mean([measures.statistic(run, 'wasted_fraction') for run in group]),
    'staleness_mean': _mean([measures.mean_staleness(run) for run in group]),
    **{key: _mean([measures.final_value(run, key) for run in group]) for key in CLIENT_COLUMNS},
  }


def compare(
  groups: Sequence[Sequence[RunFiles]], baseline: str | None = None, target: float | None = None
) -> list[dict[str, Any]]:
  """One row per group, with the keys of `COLUMNS`.

  Args:
    groups: groups of runs (the seeds of one setting), as `discover` returns them.
    baseline: the label of the group that ratios divide by; default: the first group.
    target: the test accuracy that "to target" counts up to; default: the runs' config
      run.target_accuracy (None: no to-target numbers).

  `unfinished` counts the group's runs that have not completed (`RunFiles.finished`). A run
  reaches the target at its first metrics row with test_accuracy >= target; the group's
  time and client updates to target are means over the runs that reached it (`reached` of
  `seeds`). Accuracy stds are sample stds (ddof=1), 0.0 for one seed. Ratios are the group's
  mean over the baseline group's mean (None where either is missing).

  Raises:
    CompareError: `baseline` names no group, or the runs set different targets and none is
      given.
  """
  if not groups:
    return []
  try:
    target = measures.resolve_target(groups, target)
  except ValueError as e:
    raise CompareError(str(e)) from None
  rows = [_group_row(group, target) for group in groups]
  labels = [row['label'] for row in rows]
  if baseline is not None and baseline not in labels:
    raise CompareError(f'--baseline {baseline!r} names no group; the groups: {", ".join(labels)}')
  base = rows[labels.index(baseline) if baseline is not None else 0]
  for row in rows:
    row['baseline'] = base['label']
    for key in ('time_to_target', 'client_updates_to_target'):
      row[f'{key}_ratio'] = _ratio(row[f'{key}_mean'], base[f'{key}_mean'])
  return [{key: row[key] for key in COLUMNS} for row in rows]


def _plus_minus(mean: float | None, std: float | None) -> str:
  return 'n/a' if mean is None or std is None else f'{mean:.4f} ± {std:.4f}'


def _count(value: float) -> str:
  return f'{value:.0f}' if float(value).is_integer() else f'{value:.1f}'


def _to_target(row: dict[str, Any], key: str, digits: str) -> str:
  reached, seeds, mean = row['reached'], row['seeds'], row[f'{key}_mean']
  if mean is None:
    return f'n/a ({reached}/{seeds} reached)'
  text = _count(mean) if digits == 'count' else f'{mean:{digits}}'
  return text if reached == seeds else f'{text} ({reached}/{seeds} reached)'


def _times(ratio: float | None) -> str:
  return 'n/a' if ratio is None else f'{ratio:.2f}x'


def _cell(text: str) -> str:
  return text.replace('|', '\\|')


def format_table(rows: Sequence[dict[str, Any]], label_header: str = 'algorithm') -> str:
  """`rows` of `compare` as a markdown table followed by its caption; `label_header` heads the
  column of the groups' labels."""
  if not rows:
    return ''
  target, base = rows[0]['target_accuracy'], rows[0]['baseline']
  header = [label_header, 'seeds', 'final accuracy', 'best accuracy']
  if target is not None:
    header += [
      f'time to {target:g} (s)',
      f'updates to {target:g}',
      f'time vs {base}',
      f'updates vs {base}',
    ]
  header += ['wasted compute', 'mean staleness']
  client_columns = [key for key in CLIENT_COLUMNS if any(row[key] is not None for row in rows)]
  header += [_CLIENT_HEADERS[key] for key in client_columns]
  lines = [
    '| ' + ' | '.join(_cell(h) for h in header) + ' |',
    '|' + '|'.join(['---'] + ['---:'] * (len(header) - 1)) + '|',
  ]
  for row in rows:
    unfinished = row.get('unfinished') or 0
    cells = [
      row['label'],
      f'{row["seeds"]} ({unfinished} unfinished)' if unfinished else str(row['seeds']),
      _plus_minus(row['final_accuracy_mean'], row['final_accuracy_std']),
      _plus_minus(row['best_accuracy_mean'], row['best_accuracy_std']),
    ]
    if target is not None:
      cells += [
        _to_target(row, 'time_to_target', '.1f'),
        _to_target(row, 'client_updates_to_target', 'count'),
        _times(row['time_to_target_ratio']),
        _times(row['client_updates_to_target_ratio']),
      ]
    wasted, staleness = row['wasted_fraction_mean'], row['staleness_mean']
    cells += [
      'n/a' if wasted is None else f'{100 * wasted:.1f}%',
      'n/a' if staleness is None else f'{staleness:.2f}',
    ]
    cells += ['n/a' if row[key] is None else f'{row[key]:.4f}' for key in client_columns]
    lines.append('| ' + ' | '.join(_cell(c) for c in cells) + ' |')
  caption = f'Accuracy: mean ± {STD_CONVENTION}.'
  if any(row.get('unfinished') for row in rows):
    caption += (
      ' (k unfinished): runs that had not completed (killed, interrupted, failed, diverged or'
      ' running) are included as they stand (--include_unfinished).'
    )
  if target is None:
    caption += ' No target accuracy (set run.target_accuracy or pass --target).'
  else:
    caption += (
      f' To target: the first evaluation with test accuracy >= {target:g}, averaged over the'
      f' seeds that reached it (k/n reached when not all did); "vs {base}": the ratio of these'
      f' means to the baseline group {base}.'
    )
  caption += (
    ' Wasted compute: mean wasted_fraction (local steps of discarded tasks over all local'
    ' steps); staleness: mean staleness of aggregated updates.'
  )
  if client_columns:
    caption += (
      " Per-client figures (data.client_test): the last evaluation's accuracy on each client's"
      ' own test data, mean over clients, 10th percentile and worst client, after'
      " fine-tuning (personalized), and of each client's own model where the algorithm keeps"
      ' one (Ditto, FedBN), each averaged over seeds.'
    )
  return '\n'.join(lines) + '\n\n' + caption + '\n'


def format_csv(rows: Sequence[dict[str, Any]]) -> str:
  """`rows` of `compare` as CSV with a header of `COLUMNS` (empty cells for None)."""
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator='\n')
  writer.writeheader()
  for row in rows:
    writer.writerow(
      {k: ('' if v is None else repr(v) if isinstance(v, float) else v) for k, v in row.items()}
    )
  return out.getvalue()


def build_parser() -> argparse.ArgumentParser:
  """The command line of `fedsim-compare`."""
  parser = parser_for(
    'fedsim-compare',
    'Tabulates run directories: one row per workdir or sweep root (seed*/ folders).',
    "target accuracy (the runs' config)",
  )
  parser.add_argument('--baseline', metavar='LABEL', help='the group ratios divide by (first)')
  parser.add_argument('--markdown', metavar='FILE', help='also write the table to FILE')
  parser.add_argument('--csv', metavar='FILE', help='also write the numbers as CSV to FILE')
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  """Runs `fedsim-compare` on `argv` (default: the process's arguments); returns the exit
  code."""

  def body(args: argparse.Namespace) -> None:
    groups = groups_of(args, 'fedsim-compare')
    rows = compare(groups, baseline=args.baseline, target=args.target)
    table = format_table(rows)
    if args.markdown:
      pathlib.Path(args.markdown).write_text(table, encoding='utf-8')
    if args.csv:
      pathlib.Path(args.csv).write_text(format_csv(rows), encoding='utf-8')
    print(table, end='')

  return run_command(build_parser(), argv, body, errors=(CompareError,))


if __name__ == '__main__':
  sys.exit(main())
