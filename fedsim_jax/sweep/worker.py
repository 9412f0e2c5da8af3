"""One job of a sweep, in its own process: `python -m fedsim_jax.sweep.worker JOB_FILE`.

The job file (`fedsim_jax.sweep.jobs.write_job`) names the config as `fedsim-run` takes it
(`--config=...` and `--config.<path>=...` arguments) and each run's seed, workdir and settings.
Its runs resume from their newest checkpoints (or start), together in lockstep when there are
several, and the process ends as `fedsim-run --seeds` does: one line per run, exit code 0, 2
(a run failed), 3 (a run diverged) or 128 + the signal that interrupted it.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import sys
from typing import Any

from absl import flags

from fedsim_jax import cli
from fedsim_jax.sweep.jobs import stop_with_parent
from fedsim_jax.sweep.paths import set_existing


def load_config(config_args: list[str]) -> Any:
  """The config that `config_args` (`--config=...`, `--config.<path>=...`) describe, parsed as
  `fedsim-run` parses them (errors: one line, exit code 2)."""
  from fedsim_jax.run import define_config_flag

  define_config_flag()
  argv = ['fedsim-sweep-worker', *config_args]
  sys.argv = argv  # ml_collections finds the `--config.<path>` overrides in sys.argv
  cli.parse_flags(argv)
  return flags.FLAGS['config'].value


def job_configs(job: dict[str, Any]) -> tuple[list[Any], list[str]]:
  """The configs and workdirs of the job's runs."""
  base = load_config(job['config_args'])
  configs, workdirs = [], []
  for run in job['runs']:
    config = base.copy_and_resolve_references()
    for path, text in run['settings']:
      set_existing(config, path, ast.literal_eval(text))
    config.seed = run['seed']
    configs.append(config)
    workdirs.append(run['workdir'])
  return configs, workdirs


def main(argv: list[str]) -> int:
  """Runs the job file `argv[1]`; returns the exit code."""
  from fedsim_jax.config import ConfigError
  from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
  from fedsim_jax.experiment import run_experiment, run_experiments_lockstep
  from fedsim_jax.run import report

  with open(argv[1], encoding='utf-8') as f:
    job = json.load(f)
  sys.path.insert(0, os.getcwd())  # user config and plugin modules, as with fedsim-run
  cli.quiet_logging(verbose_by_default=True)
  try:
    configs, workdirs = job_configs(job)
    if len(configs) == 1:
      summaries = [run_experiment(configs[0], workdirs[0], resume=True)]
    else:
      summaries = run_experiments_lockstep(configs, workdirs, resume=True)
  except (ConfigError, DatasetNotFoundError, CorruptDatasetError) as error:
    cli.fail(str(error))
  except OSError as error:
    cli.fail(f'cannot write {error.filename or "the outputs"}: {error.strerror or error}')
  return report(list(zip(workdirs, summaries)), name_runs=True)


if __name__ == '__main__':
  stop_with_parent()
  try:
    sys.exit(main(sys.argv))
  except KeyboardInterrupt:  # SIGINT before a run installed its handler: nothing to save yet
    sys.exit(128 + signal.SIGINT)
