"""The experiment binary: runs one federated experiment from a config, or several seeds of it.

  fedsim-run --config=fedsim_jax.configs.fedavg_fashion_mnist --workdir=runs/demo \
      --config.client.learning_rate=0.1 --config.algorithm.kwargs.cohort_size=20
  fedsim-run --config=configs/fedcompass_mnist.py --seeds=0,1,2,3

`--config` is a config file (.py) or the dotted name of a module with `get_config()` (the
shipped ones: `fedsim_jax.configs.<name>`). The same command is `python -m fedsim_jax.run` and,
in a checkout, `python experiments/run.py`. User modules (a config module, or one named by
`--config.algorithm.module`) are found from the working directory too, as with `python -m`.

Writes config.json, metrics.jsonl, summary.json, checkpoints/ and models/ into --workdir (with
--seeds, into <workdir>/seed<s> for each seed, run together by `run_experiments_lockstep`: one
process, one data load, compiled programs shared). A workdir that holds a run is never
overwritten: `--resume` continues it from its newest checkpoint, `--overwrite` replaces it.

Exit codes: 0 done; 2 an invalid setting, workdir or missing dataset (one line on stderr,
nothing written), a run that stalls (no server version and no new update held for one in
100000 events, or 4 per task in flight where that is more), or one that cannot write a
checkpoint or its models (a full disk, a read-only folder: one line naming the path and the
cause; `--resume` continues once it is fixed); 3 the model diverged (NaN or inf; one line naming
the version and the learning rates, `run.on_divergence`); 130 / 143 stopped by SIGINT / SIGTERM
(after writing a checkpoint, or during start-up, before the run began; the line printed says
how to go on). With --seeds, every seed ends on its own (its summary.json and one line: its
final accuracy, or its error after its workdir; a seed that diverges or stalls leaves the others
running), and the exit code is the first that applies of 130 / 143 (interrupted), 2 (a seed
failed), 3 (a seed diverged), 0.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.flag_help import show_flags_in_help
from fedsim_jax.workdir import RunStatus


def define_config_flag() -> None:
  """Defines `--config` (a config file or module, overridable field by field with
  `--config.<section>.<field>=<value>`) in absl's global flags; `fedsim-run`'s and
  `fedsim-sweep`'s."""
  from ml_collections import config_flags

  # New attributes are accepted so that `--config.algorithm.kwargs.<field>=...` can set any
  # field of the algorithm's settings; a misspelt or foreign field anywhere is then a one-line
  # error of `validate` (naming the closest valid field), never silently ignored.
  config_flags.DEFINE_config_file(
    'config',
    None,
    'Experiment config: a file (.py) or a module name (fedsim_jax.configs.<name>) with '
    'get_config(); override any field with --config.<section>.<field>=<value>, the '
    "algorithm's settings with --config.algorithm.kwargs.<field>=<value>.",
    lock_config=False,
    accept_new_attributes=True,
  )


def define_flags() -> None:
  """Defines the binary's flags in absl's global flags: `--config`, `--workdir`, `--seeds`,
  `--resume`, `--overwrite`, `--describe`, `--quiet`. Called by `run_main`, never at import, so
  that importing this module never clashes with other programs' flags."""
  define_config_flag()
  flags.DEFINE_string('workdir', None, 'Run directory (default: runs/<config name>/seed<seed>).')
  flags.DEFINE_string(
    'seeds',
    None,
    'Comma list of seeds (integers >= 0) to run together; each seed writes '
    '<workdir>/seed<s> (default workdir: runs/<config name>). Replaces config.seed.',
  )
  flags.DEFINE_bool(
    'resume',
    False,
    'Continue the run in --workdir from its newest checkpoint (start it if it has none). The '
    'config may change only the run length and checkpoint settings, e.g. a larger '
    '--config.run.num_rounds extends a finished run.',
  )
  flags.DEFINE_bool(
    'overwrite', False, 'Replace the run that --workdir holds (its results are deleted).'
  )
  flags.DEFINE_bool(
    'describe',
    False,
    "Print every setting of the config (with the algorithm's, defaults included): its value, "
    'allowed values and a one-line description; then exit without running.',
  )
  flags.DEFINE_bool(
    'quiet',
    False,
    'No progress lines (one per evaluation: version, virtual time, accuracy, host time, ETA); '
    'warnings, errors and the final line only.',
  )
  flags.mark_flags_as_required(['config'])


def main(argv: list[str]) -> None:
  """Runs the experiment the flags of `define_flags` describe (absl's `app.run` main)."""
  if len(argv) > 1:
    cli.fail(
      f'unexpected argument {argv[1]!r}; allowed: flags only (--config=..., --workdir=..., '
      '--help lists them)'
    )
  # Imported here so that `--help` and flag errors stay fast.
  from fedsim_jax.config import ConfigError
  from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
  from fedsim_jax.experiment import run_experiment, run_experiments_lockstep

  values = flags.FLAGS
  config_flag: Any = values['config']  # config_flags' flag: its value and its file's name
  config = config_flag.value
  assert config is not None  # a required flag
  name = os.path.splitext(os.path.basename(config_flag.config_filename))[0]
  cli.quiet_logging(verbose_by_default=not values.quiet)  # progress: one line per evaluation
  if values.describe:
    from fedsim_jax.config import describe
    from fedsim_jax.experiment import validate

    try:
      settings = validate(config)
    except ConfigError as error:
      cli.fail(str(error))
    print(describe(config))
    print(settings.describe(prefix='algorithm.kwargs.'))
    return
  try:
    if values['workdir'].present and not values.workdir.strip():
      raise cli.FlagError('--workdir is empty; allowed values: a directory path (or leave it out)')
    if values.seeds is None:
      workdir = values.workdir or os.path.join('runs', name, f'seed{config.seed}')
      runs = [
        (
          workdir,
          run_experiment(config, workdir, resume=values.resume, overwrite=values.overwrite),
        )
      ]
    else:
      seeds = cli.parse_list('seeds', values.seeds, int, lambda v: v >= 0, 'integers >= 0')
      if not seeds:
        raise cli.FlagError(
          f'--seeds={values.seeds!r} lists no seed; allowed values: integers >= 0'
        )
      configs = [config.copy_and_resolve_references() for _ in seeds]
      for seed, seed_config in zip(seeds, configs):
        seed_config.seed = seed
      root = values.workdir or os.path.join('runs', name)
      workdirs = [os.path.join(root, f'seed{seed}') for seed in seeds]
      summaries = run_experiments_lockstep(
        configs, workdirs, resume=values.resume, overwrite=values.overwrite
      )
      runs = list(zip(workdirs, summaries))
  except (ConfigError, DatasetNotFoundError, CorruptDatasetError, cli.FlagError) as error:
    cli.fail(str(error))
  except OSError as error:  # e.g. a full disk as the run writes its first files
    cli.fail(f'cannot write {error.filename or "the outputs"}: {error.strerror or error}')
  sys.exit(report(runs, name_runs=values.seeds is not None))


def report(runs: list[tuple[str, dict[str, Any]]], *, name_runs: bool = False) -> int:
  """Prints one line per run, its final accuracy (stdout) or the error it ended with (stderr,
  prefixed with its workdir if `name_runs`), then how to resume if any run was interrupted;
  returns the exit code: 128 + the signal if a run was interrupted, else 2 if one failed, else
  3 if one diverged, else 0."""
  for workdir, summary in runs:
    if summary['status'] == RunStatus.BUDGET_EXHAUSTED:
      print(summary['message'])
    if summary['status'] in (RunStatus.COMPLETED, RunStatus.BUDGET_EXHAUSTED):
      print(
        f'final accuracy {_accuracy(summary["final_accuracy"])}  '
        f'best {_accuracy(summary["best_accuracy"])}  '
        f'virtual time {summary["final_virtual_time"]:.1f}s  '
        f'host {summary["host"]["seconds"]:.1f}s  outputs: {os.path.abspath(workdir)}'
      )
    elif summary['status'] in (RunStatus.DIVERGED, RunStatus.FAILED):
      where = f'{os.path.abspath(workdir)}: ' if name_runs else ''
      print(f'error: {where}{summary["message"]}', file=sys.stderr)
  interrupted = [summary for _, summary in runs if summary['status'] == RunStatus.INTERRUPTED]
  if interrupted:
    print(
      f'interrupted: checkpoint{"s" if len(runs) > 1 else ""} written; resume with the same '
      f'command and --resume (outputs: {", ".join(os.path.abspath(w) for w, _ in runs)})',
      file=sys.stderr,
    )
    return 128 + interrupted[0]['signal']
  for status, code in ((RunStatus.FAILED, 2), (RunStatus.DIVERGED, 3)):
    if any(summary['status'] == status for _, summary in runs):
      return code
  return 0


def _accuracy(value: float | None) -> str:
  return 'n/a' if value is None else f'{value:.4f}'


def run_main() -> None:
  """Console entry point (`fedsim-run`, `python -m fedsim_jax.run`, `experiments/run.py`)."""
  # User modules named by `--config` or `--config.algorithm.module` are found from the working
  # directory, as with `python -m`.
  sys.path.insert(0, os.getcwd())
  define_flags()
  show_flags_in_help(__name__)
  try:
    app.run(main, flags_parser=cli.parse_flags)
  except KeyboardInterrupt:
    # SIGINT before a run installs its handler (imports, data load, compilation): the run
    # gave its workdir up as it was (`PreparedRun`), with no checkpoint to write yet.
    print(
      'interrupted: stopped by SIGINT before the run wrote a checkpoint; rerun the same '
      'command (with --resume if the workdir already held a run)',
      file=sys.stderr,
    )
    sys.exit(128 + signal.SIGINT)


if __name__ == '__main__':
  run_main()
