"""`fedsim-plot`: figures of run directories (workdirs, or sweep roots of seed*/ workdirs).

  fedsim-plot runs/fedavg runs/fedbuff --out plots --kinds accuracy,timeline --band std

Writes `accuracy.<format>` (every group in one figure) and, for the first seed of each group,
`timeline_<label>`, `staleness_<label>`, `updates_<label>` and `clients_<label>` (the
per-client accuracy distribution over time); prints each path written. A
figure whose data a run does not record is skipped with one line on stderr. Runs that have not
completed (killed, interrupted, failed, diverged, still running, or killed while `--resume`
extended them) are left out, each named in one line on stderr; `--include_unfinished` keeps them,
marked unfinished in legends and titles.

`--perfetto OUT.json` writes instead the task timeline of one run (the first seed of a sweep
root) as a Chrome trace that ui.perfetto.dev opens (`analysis.perfetto`); figures as well only
when `--kinds` names them. Exit codes: 0 done; 2 a path that holds no run, no completed run, an
invalid option, or `--perfetto` of a run without tasks.jsonl (one line on stderr).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable, Sequence

import matplotlib
from matplotlib.figure import Figure

from fedsim_jax.analysis import perfetto, plots
from fedsim_jax.analysis.command import groups_of, parser_for, run_command
from fedsim_jax.analysis.run_files import RunFiles, group_label, slug

KINDS = ('accuracy', 'timeline', 'staleness', 'updates', 'clients')
FORMATS = ('png', 'svg')


def _kinds(text: str) -> list[str]:
  kinds = [k.strip() for k in text.split(',') if k.strip()]
  unknown = [k for k in kinds if k not in KINDS]
  if unknown or not kinds:
    raise argparse.ArgumentTypeError(f'{text!r}: kinds are {",".join(KINDS)}')
  return kinds


def _positive(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not an integer') from None
  if value < 1:
    raise argparse.ArgumentTypeError(f'{value} is not positive')
  return value


def build_parser() -> argparse.ArgumentParser:
  """The command line of `fedsim-plot`."""
  parser = parser_for(
    'fedsim-plot',
    'Plots run directories: one group per workdir or sweep root (seed*/ folders).',
    "target line (the runs' config)",
  )
  parser.add_argument('--out', metavar='OUTDIR', help='output folder (default: DIR/plots)')
  parser.add_argument('--format', choices=FORMATS, default='png')
  parser.add_argument(
    '--kinds',
    type=_kinds,
    default=None,
    help=f'comma-separated ({",".join(KINDS)}); default: all, clients where the run has them',
  )
  parser.add_argument('--band', choices=plots.BANDS, default='minmax', help='accuracy band')
  parser.add_argument(
    '--max_rows', type=_positive, default=100, help='timeline rows; more clients are sampled'
  )
  parser.add_argument(
    '--perfetto',
    metavar='OUT.json',
    help="write the first run's task timeline as a Chrome/Perfetto trace (ui.perfetto.dev) to "
    'OUT.json; figures only with --kinds',
  )
  parser.add_argument(
    '--client_tracks',
    type=_positive,
    default=perfetto.MAX_CLIENT_TRACKS,
    help='--perfetto: one track per client up to this many clients; above, '
    f'{perfetto.CLIENT_GROUPS} tracks of consecutive client ids',
  )
  return parser


def write_plots(
  groups: Sequence[Sequence[RunFiles]],
  out: pathlib.Path,
  kinds: Sequence[str] | None = None,
  file_format: str = 'png',
  band: str = 'minmax',
  max_rows: int = 100,
  target: float | None = None,
) -> list[pathlib.Path]:
  """Writes the figures of `kinds` into `out` (created if needed): `accuracy.<file_format>` of
  all groups, and the per-run kinds of each group's first run, named after the group's label.
  Prints and returns the paths written; a figure whose data a run does not record is skipped
  with one line on stderr. `kinds` None: every kind, `clients` only for runs that evaluated
  per client (silently skipped for the others)."""
  optional = set() if kinds is not None else {'clients'}
  kinds = KINDS if kinds is None else kinds
  out.mkdir(parents=True, exist_ok=True)
  per_run: dict[str, Callable[[RunFiles], Figure]] = {
    'timeline': lambda run: plots.timeline_figure(run, max_rows=max_rows),
    'staleness': plots.staleness_figure,
    'updates': plots.updates_figure,
    'clients': plots.clients_figure,
  }
  written = []

  def emit(kind: str, name: str, make: Callable[[], Figure]) -> None:
    try:
      fig = make()
    except plots.MissingData as e:
      print(f'fedsim-plot: skipping {kind} of {name}: {e}', file=sys.stderr)
      return
    stem = kind if kind == 'accuracy' else f'{kind}_{slug(name)}'
    path = out / f'{stem}.{file_format}'
    plots.save(fig, path)
    written.append(path)
    print(path)

  if 'accuracy' in kinds:
    emit('accuracy', 'all runs', lambda: plots.accuracy_figure(groups, band, target))
  for group in groups:
    for kind in (k for k in kinds if k in per_run):
      if kind in optional and not group[0].client_evaluations:
        continue
      emit(kind, group_label(group), lambda: per_run[kind](group[0]))
  return written


def main(argv: Sequence[str] | None = None) -> int:
  """Runs `fedsim-plot` on `argv` (default: the process's arguments); returns the exit code."""
  matplotlib.use('Agg')

  def body(args: argparse.Namespace) -> None:
    if args.perfetto and len(args.dirs) > 1:
      raise perfetto.TraceError(
        f'--perfetto exports one run: name one DIR ({len(args.dirs)} given)'
      )
    groups = groups_of(args, 'fedsim-plot')
    if args.perfetto:
      path = perfetto.write_trace(groups[0][0], args.perfetto, max_client_tracks=args.client_tracks)
      print(path)
      if args.kinds is None:
        return
    out = pathlib.Path(args.out) if args.out else pathlib.Path(args.dirs[0]) / 'plots'
    write_plots(
      groups,
      out,
      args.kinds,
      args.format,
      args.band,
      args.max_rows,
      args.target,
    )

  return run_command(build_parser(), argv, body, (perfetto.TraceError,))


if __name__ == '__main__':
  sys.exit(main())
