"""What `fedsim-plot` and `fedsim-compare` share: their common arguments and error handling
(a bad input is one line on stderr and exit code 2, never a traceback)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence

from fedsim_jax.analysis.run_files import RunFiles, RunFilesError, discover, finished_only


def accuracy_argument(text: str) -> float:
  """An argparse type: an accuracy within [0, 1]."""
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a number') from None
  if not (math.isfinite(value) and 0.0 <= value <= 1.0):
    raise argparse.ArgumentTypeError(f'{text} is not an accuracy within [0, 1]')
  return value


def parser_for(prog: str, description: str, target_help: str) -> argparse.ArgumentParser:
  """A parser with the arguments both commands take: DIR..., --labels, --target and
  --include_unfinished."""
  parser = argparse.ArgumentParser(prog=prog, description=description)
  parser.add_argument('dirs', nargs='+', metavar='DIR', help='a workdir or a sweep root')
  parser.add_argument('--labels', metavar='A,B', help='comma-separated group labels, in order')
  parser.add_argument('--target', metavar='ACC', type=accuracy_argument, help=target_help)
  parser.add_argument(
    '--include_unfinished',
    action='store_true',
    help='also use runs that have not completed (killed, interrupted, failed, diverged or '
    'running; left out by default), marked as unfinished',
  )
  return parser


def groups_of(args: argparse.Namespace, prog: str) -> list[list[RunFiles]]:
  """The run groups that `args.dirs` (and `args.labels`) name, without the runs that have not
  completed unless `args.include_unfinished`; each such run is named on stderr, one line each
  (`finished_only`)."""
  groups = discover(args.dirs, args.labels.split(',') if args.labels else None)
  kept, notes = finished_only(groups, args.include_unfinished)
  for note in notes:
    print(f'{prog}: unfinished run {note}', file=sys.stderr)
  return kept


def run_command(
  parser: argparse.ArgumentParser,
  argv: Sequence[str] | None,
  body: Callable[[argparse.Namespace], None],
  errors: tuple[type[Exception], ...] = (),
) -> int:
  """Parses `argv` and runs `body(args)`; returns the exit code. `RunFilesError`, `errors` and
  OSError become one line on stderr and exit code 2."""
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:
    return int(e.code or 0)
  one_line: tuple[type[Exception], ...] = (RunFilesError, *errors)
  try:
    body(args)
  except one_line as e:
    print(f'{parser.prog}: error: {e}', file=sys.stderr)
    return 2
  except OSError as e:
    print(f'{parser.prog}: error: {e.filename}: {e.strerror}', file=sys.stderr)
    return 2
  return 0
