"""`fedsim-sweep`: a grid or random search over any settings and seeds, resumable, in parallel.

  fedsim-sweep --config=fedsim_jax.configs.fedbuff_fashion_mnist --workdir=runs/lr_sweep \
      --sweep.client.learning_rate=0.01,0.03,0.1 --sweep.algorithm.kwargs.buffer_size=5,10 \
      --seeds=0,1,2 --processes=2
  fedsim-sweep --sweep_file=sweeps/lr.toml --workdir=runs/lr_sweep --status

Each point (one combination of the swept settings, `fedsim_jax.sweep.spec`) gets a folder
`<workdir>/<point>/` holding `point.json` (its settings) and one workdir per seed,
`<point>/seed<s>/`, exactly as `fedsim-run` writes it. The seeds of a point (and any points
the engine can run in lockstep with it) run as one job, one process; `--processes` jobs run at
once (`fedsim_jax.sweep.jobs`). At the end, `fedsim-compare`'s table of the points, written to
`<workdir>/table.md` and `table.csv`, and the best point by `--metric`.

A rerun of the same command continues the sweep: finished runs are kept, interrupted or killed
ones resume from their newest checkpoint, the rest start; new points (more values, a larger
`--num_points`) are added. `--status` lists every run as done, failed, running, resumable or
pending and runs nothing. Every setting is checked before anything is written: a bad sweep
spec, setting or value is one line on stderr and exit code 2. Exit codes: 0 every run ended
(completed, or diverged or stalled: results too); 2 a bad spec, or runs that a job left
unfinished (their logs: `<workdir>/logs/`); 130 / 143 stopped by SIGINT / SIGTERM (jobs
checkpoint; rerun to continue).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.flag_help import show_flags_in_help
from fedsim_jax.sweep.spec import Search, SweepError, SweepSpec, parse_values, read_file
from fedsim_jax.sweep.sweep import METRICS

SWEEP_PREFIX = '--sweep.'


def define_flags() -> None:
  """Defines the command's flags in absl's global flags (called by `run_main` only)."""
  from fedsim_jax.run import define_config_flag

  define_config_flag()
  flags.DEFINE_string('workdir', None, 'The sweep folder: one subfolder per point.')
  flags.DEFINE_string(
    'sweep_file',
    None,
    'A sweep file (TOML): config, seeds, search, num_points, search_seed, [set] and [sweep] '
    'tables (see fedsim_jax.sweep.spec); flags given on the command line win.',
  )
  flags.DEFINE_string(
    'seeds', None, 'Comma list of seeds (integers >= 0) every point runs with (default 0).'
  )
  flags.DEFINE_enum('search', None, [s.value for s in Search], 'grid (default) or random.')
  flags.DEFINE_integer('num_points', None, 'Points a random search draws.')
  flags.DEFINE_integer('search_seed', None, "The random search's seed (default 0).")
  flags.DEFINE_integer('processes', 1, 'Jobs (processes) run at once (an integer >= 1).')
  flags.DEFINE_bool('status', False, 'List every run of the sweep and where it stands; run none.')
  flags.DEFINE_enum(
    'metric',
    'final_accuracy',
    list(METRICS),
    'What the best point is chosen by (mean over seeds; accuracies: highest, to target: lowest).',
  )
  flags.DEFINE_float(
    'target', None, 'Target accuracy for the to-target columns (default: run.target_accuracy).'
  )
  flags.mark_flag_as_required('workdir')


def split_sweep_args(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
  """`argv` without its `--sweep.<path>=<values>` items, and those items by path."""
  kept, swept = [], {}
  for arg in argv:
    if not arg.startswith(SWEEP_PREFIX):
      kept.append(arg)
      continue
    path, equals, values = arg[len(SWEEP_PREFIX) :].partition('=')
    if not equals or not path:
      cli.fail(f'{arg} is invalid; allowed: --sweep.<setting>=v1,v2,... (with "=")')
    if path in swept:
      cli.fail(f'--sweep.{path} is given twice; allowed: once, with every value')
    swept[path] = values
  return kept, swept


def config_args(argv: Sequence[str]) -> list[str]:
  """The `--config=...` and `--config.<path>=...` arguments of `argv` (the worker parses them
  as `fedsim-run` does; a `--config X` pair is joined)."""
  args: list[str] = []
  pending = False
  for arg in argv[1:]:
    if pending:
      args[-1] += '=' + arg
      pending = False
    elif arg == '--config':
      args.append(arg)
      pending = True
    elif arg.startswith(('--config=', '--config.', '--noconfig.')):
      args.append(arg)
  return args


def build_spec(swept: dict[str, str], file: dict[str, Any]) -> SweepSpec:
  """The sweep the flags and the sweep file describe (flags win)."""
  values = flags.FLAGS
  parameters = dict(file.get('sweep', {}))
  for path, text in swept.items():
    parameters[path] = parse_values(path, text)
  if values.seeds is not None:
    seeds = tuple(cli.parse_list('seeds', values.seeds, int, lambda v: v >= 0, 'integers >= 0'))
  else:
    seeds = tuple(file.get('seeds', (0,)))
  if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
    raise SweepError(f'seeds={list(seeds)} is invalid; allowed: distinct integers >= 0')
  search = values.search or file.get('search', 'grid')
  if search not in [s.value for s in Search]:
    raise SweepError(f'search={search!r} is invalid; allowed: {[s.value for s in Search]}')
  num_points = values.num_points if values.num_points is not None else file.get('num_points')
  search_seed = values.search_seed if values.search_seed is not None else file.get('search_seed')
  for name, number in (('num_points', num_points), ('search_seed', search_seed)):
    if number is not None and (not isinstance(number, int) or number < 0):
      raise SweepError(f'{name}={number!r} is invalid; allowed: an integer >= 0')
  overridden = set(cli.override_paths(sys.argv))
  fixed = {p: v for p, v in file.get('set', {}).items() if p not in overridden}
  for path in parameters:
    if path in overridden:
      raise SweepError(f'--sweep.{path} and --config.{path} both set it; allowed: one of the two')
  return SweepSpec(
    parameters=parameters,
    seeds=seeds,
    search=Search(search),
    num_points=num_points,
    search_seed=search_seed or 0,
    fixed={p: tuple(v) if isinstance(v, list) else v for p, v in fixed.items()},
  )


def main(argv: list[str]) -> None:
  """Runs the sweep the flags describe (absl's `app.run` main)."""
  if len(argv) > 1:
    cli.fail(f'unexpected argument {argv[1]!r}; allowed: flags only (--help lists them)')
  from fedsim_jax.sweep.sweep import Sweep  # Deferred: JAX start-up after the flag checks.

  values = flags.FLAGS
  cli.quiet_logging()
  try:
    file = read_file(values.sweep_file) if values.sweep_file else {}
    spec = build_spec(_SWEPT, file)
  except (SweepError, cli.FlagError) as error:
    cli.fail(str(error))
  if values.processes < 1:
    cli.fail(f'--processes={values.processes} is invalid; allowed values: an integer >= 1')
  target = values.target
  if target is not None and not (math.isfinite(target) and 0.0 <= target <= 1.0):
    cli.fail(f'--target={target} is invalid; allowed values: an accuracy within [0, 1]')
  sweep = Sweep(
    spec,
    config=values['config'].value,
    config_args=_CONFIG_ARGS,
    root=values.workdir,
    override_paths=cli.override_paths(sys.argv),
  )
  if values.status:
    print(sweep.status())
    return
  code = sweep.run(processes=values.processes)
  if code in (0, 2) and sweep.has_results():
    print(sweep.table(values.metric, values.target))
  sys.exit(code)


# Set by `run_main` before absl parses the rest of the command line.
_SWEPT: dict[str, str] = {}
_CONFIG_ARGS: list[str] = []


def _with_file_config(argv: list[str]) -> list[str]:
  """`argv` with the sweep file's `config` as `--config` when the command line names none."""
  if any(a == '--config' or a.startswith('--config=') for a in argv):
    return argv
  file_arg = next((a.split('=', 1)[1] for a in argv if a.startswith('--sweep_file=')), None)
  if file_arg is None:
    return argv
  try:
    config = read_file(file_arg).get('config')
  except SweepError as error:
    cli.fail(str(error))
  if config is None:
    cli.fail(f'--sweep_file={file_arg} names no config and --config is not given; allowed: either')
  return [argv[0], f'--config={config}', *argv[1:]]


def run_main() -> None:
  """Console entry point (`fedsim-sweep`, `python -m fedsim_jax.sweep.command`)."""
  global _SWEPT, _CONFIG_ARGS
  sys.path.insert(0, os.getcwd())  # user config and plugin modules, as with fedsim-run
  argv, _SWEPT = split_sweep_args(sys.argv)
  argv = _with_file_config(argv)
  sys.argv = argv
  _CONFIG_ARGS = config_args(argv)
  define_flags()
  show_flags_in_help(__name__)
  show_flags_in_help('fedsim_jax.run')
  app.run(main, argv=argv, flags_parser=cli.parse_flags)


if __name__ == '__main__':
  run_main()
