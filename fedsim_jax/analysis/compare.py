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
from fedsim_jax.analysis.frame import flatten, run_rows
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


def _ratio(value: float | None, baseline: float | None) -> float | None:
  if value is None or baseline is None or baseline == 0:
    return None
  return value / baseline


def _numbers(frame: Any, column: str) -> Any:
  """`frame[column]` as floats, NaN where absent, null, not a number or infinite."""
  import pandas as pd

  if column not in frame:
    return pd.Series(np.nan, index=frame.index)
  values = pd.to_numeric(frame[column].where(frame[column].map(_is_number)), errors='coerce')
  return values.where(np.isfinite(values.astype(float)))


def _is_number(value: Any) -> bool:
  return measures.as_number(value) is not None


def _last_known(frame: Any, column: str) -> Any:
  """Per run: the last non-missing value of `column` (NaN if none)."""
  return _numbers(frame, column).groupby(frame['run'], sort=False).last()


def _statistic(frame: Any, key: str) -> Any:
  """Per run, as `measures.statistic` reads it: the summary's `statistics.<key>`, else the
  summary's `<key>`, else the last metrics row that has it."""
  value = _last_known(frame, f'summary.statistics.{key}')
  for fallback in (_last_known(frame, f'summary.{key}'), _last_known(frame, key)):
    value = value.fillna(fallback)
  return value


def run_measures(frame: Any, target: float | None) -> Any:
  """One row per run of a `load_runs`-style DataFrame (metrics rows with `run`, `summary.*`
  columns): final and best accuracy, the virtual time and client updates of the first
  evaluation of a finite model at or above `target`, wasted fraction, mean staleness and the
  per-client columns (NaN where a run lacks them). Rows marked `diverged` count for the final
  accuracy but not for the best or the target."""
  import pandas as pd

  runs = frame['run']
  accuracy = _numbers(frame, 'test_accuracy')
  timed = accuracy.where(_numbers(frame, 'virtual_time').notna())
  finite = (
    ~frame['diverged'].fillna(False).astype(bool)
    if 'diverged' in frame
    else pd.Series(True, index=frame.index)
  )
  table = pd.DataFrame(
    {
      'final_accuracy': timed.groupby(runs, sort=False).last(),
      'best_accuracy': accuracy.where(finite).groupby(runs, sort=False).max(),
      'wasted_fraction': _statistic(frame, 'wasted_fraction'),
      'staleness_mean': _statistic(frame, 'staleness_mean'),
      **{key: _last_known(frame, key) for key in CLIENT_COLUMNS},
    }
  )
  table['reached'] = False
  table['time_to_target'] = np.nan
  table['client_updates_to_target'] = np.nan
  if target is not None:
    hits = frame[finite & (accuracy >= target)].groupby(runs, sort=False).head(1)
    hits = hits.set_index('run')
    table.loc[hits.index, 'reached'] = True
    table.loc[hits.index, 'time_to_target'] = _numbers(hits, 'virtual_time')
    table.loc[hits.index, 'client_updates_to_target'] = _numbers(hits, 'client_updates')
  return table


def _runs_frame(groups: Sequence[Sequence[RunFiles]]) -> Any:
  """The metrics rows of every run of `groups` (`fedsim_jax.analysis.frame.run_rows`)."""
  import pandas as pd

  rows = [row for group in groups for run in group for row in run_rows(run)]
  return pd.DataFrame.from_records(rows, columns=None if rows else ['run'])


def _tasks_staleness(run: RunFiles) -> float | None:
  """Mean staleness from tasks.jsonl, for runs whose summary and rows do not record it."""
  stale = [measures.as_number(t.get('staleness')) for t in measures.aggregated_tasks(run)]
  known = [s for s in stale if s is not None]
  return float(np.mean(known)) if known else None


def _known(value: Any) -> float | None:
  return None if value is None or (isinstance(value, float) and np.isnan(value)) else float(value)


def _group_row(group: Sequence[RunFiles], table: Any, target: float | None) -> dict[str, Any]:
  first = group[0]
  measured = table.reindex([str(run.workdir) for run in group])
  staleness = [
    _known(value) if _known(value) is not None else _tasks_staleness(run)
    for run, value in zip(group, measured['staleness_mean'])
  ]
  reached = measured[measured['reached'].fillna(False).astype(bool)]

  def mean_of(values: Any) -> float | None:
    return mean_std([_known(v) for v in values])[0]

  final_mean, final_std = mean_std([_known(v) for v in measured['final_accuracy']])
  best_mean, best_std = mean_std([_known(v) for v in measured['best_accuracy']])
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
    'time_to_target_mean': mean_of(reached['time_to_target']),
    'client_updates_to_target_mean': mean_of(reached['client_updates_to_target']),
    'wasted_fraction_mean': mean_of(measured['wasted_fraction']),
    'staleness_mean': mean_std(staleness)[0],
    **{key: mean_of(measured[key]) for key in CLIENT_COLUMNS},
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
  table = run_measures(_runs_frame(groups), target)
  rows = [_group_row(group, table, target) for group in groups]
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


def regroup_by(groups: Sequence[Sequence[RunFiles]], setting: str) -> list[list[RunFiles]]:
  """The runs of `groups` regrouped by the value of a dotted setting of their config.json
  (`client.learning_rate`; a `config.` prefix is allowed), labelled `<setting>=<value>`, in
  order of value.

  Raises:
    CompareError: a run whose config does not have the setting.
  """
  path = setting.removeprefix('config.')
  by_value: dict[str, list[RunFiles]] = {}
  values: dict[str, Any] = {}
  for run in (run for group in groups for run in group):
    settings = flatten(run.config)
    if path not in settings:
      raise CompareError(f'--by {setting}: {run.workdir} has no such setting in its config.json')
    key = repr(settings[path])
    by_value.setdefault(key, []).append(run)
    values[key] = settings[path]
  try:
    keys = sorted(by_value, key=lambda k: values[k])
  except TypeError:  # values of different kinds: first seen first
    keys = list(by_value)
  regrouped = []
  for key in keys:
    label = f'{path}={values[key]}'
    for run in by_value[key]:
      run.label = label
    regrouped.append(by_value[key])
  return regrouped


def build_parser() -> argparse.ArgumentParser:
  """The command line of `fedsim-compare`."""
  parser = parser_for(
    'fedsim-compare',
    'Tabulates run directories: one row per workdir or sweep root (seed*/ folders).',
    "target accuracy (the runs' config)",
  )
  parser.add_argument('--baseline', metavar='LABEL', help='the group ratios divide by (first)')
  parser.add_argument(
    '--by',
    metavar='SETTING',
    help="group the runs by a setting's value (client.learning_rate, algorithm.name) instead "
    'of by DIR',
  )
  parser.add_argument('--markdown', metavar='FILE', help='also write the table to FILE')
  parser.add_argument('--csv', metavar='FILE', help='also write the numbers as CSV to FILE')
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  """Runs `fedsim-compare` on `argv` (default: the process's arguments); returns the exit
  code."""

  def body(args: argparse.Namespace) -> None:
    groups = groups_of(args, 'fedsim-compare')
    if args.by:
      groups = regroup_by(groups, args.by)
    rows = compare(groups, baseline=args.baseline, target=args.target)
    table = format_table(rows, label_header=args.by or 'algorithm')
    if args.markdown:
      pathlib.Path(args.markdown).write_text(table, encoding='utf-8')
    if args.csv:
      pathlib.Path(args.csv).write_text(format_csv(rows), encoding='utf-8')
    print(table, end='')

  return run_command(build_parser(), argv, body, errors=(CompareError,))


if __name__ == '__main__':
  sys.exit(main())
