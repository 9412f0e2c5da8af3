"""Runs one federated experiment from a config file, or several seeds of it together.

  python experiments/run.py --config=configs/fedavg_fashion_mnist.py --workdir=runs/demo \
      --config.client.learning_rate=0.1 --config.algorithm.kwargs.cohort_size=20
  python experiments/run.py --config=configs/fedcompass_mnist.py --seeds=0,1,2,3

Writes config.json, metrics.jsonl and summary.json into --workdir (with --seeds, into
<workdir>/seed<s> for each seed, run together by `run_experiments_lockstep`: one process, one
data load, compiled programs shared). An invalid setting or a missing dataset exits with code 2
and one line on stderr.
"""

from __future__ import annotations

import os
import sys

# As a script, Python puts this file's folder on sys.path; user modules named by
# `--config.algorithm.module` are found from the working directory, as with `python -m`.
sys.path.insert(0, os.getcwd())

from absl import app, flags
from ml_collections import config_flags

from fedsim_jax import cli

# New attributes are accepted so that `--config.algorithm.kwargs.<field>=...` can set any field
# of the algorithm's settings; a misspelt or foreign field anywhere is then a one-line error of
# `validate` (naming the closest valid field), never silently ignored.
_CONFIG = config_flags.DEFINE_config_file(
  'config',
  None,
  'Experiment config file; override any field with --config.<section>.<field>=<value>, the '
  "algorithm's settings with --config.algorithm.kwargs.<field>=<value>.",
  lock_config=False,
  accept_new_attributes=True,
)
_WORKDIR = flags.DEFINE_string(
  'workdir', None, 'Run directory (default: runs/<config file name>/seed<seed>).'
)
_SEEDS = flags.DEFINE_string(
  'seeds',
  None,
  'Comma list of seeds (integers >= 0) to run together; each seed writes '
  '<workdir>/seed<s> (default workdir: runs/<config file name>). Replaces config.seed.',
)
flags.mark_flags_as_required(['config'])


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  # Imported here so that `--help` and flag errors stay fast.
  from fedsim_jax.cli import FlagError, parse_list
  from fedsim_jax.config import ConfigError
  from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
  from fedsim_jax.experiment import run_experiment, run_experiments_lockstep

  config = _CONFIG.value
  name = os.path.splitext(os.path.basename(flags.FLAGS['config'].config_filename))[0]
  cli.quiet_logging(verbose_by_default=True)  # progress lines: one per evaluation
  try:
    if _SEEDS.value is None:
      workdir = _WORKDIR.value or os.path.join('runs', name, f'seed{config.seed}')
      runs = [(workdir, run_experiment(config, workdir))]
    else:
      seeds = parse_list('seeds', _SEEDS.value, int, lambda v: v >= 0, 'integers >= 0')
      if not seeds:
        raise FlagError(f'--seeds={_SEEDS.value!r} lists no seed; allowed values: integers >= 0')
      configs = [config.copy_and_resolve_references() for _ in seeds]
      for seed, seed_config in zip(seeds, configs):
        seed_config.seed = seed
      root = _WORKDIR.value or os.path.join('runs', name)
      workdirs = [os.path.join(root, f'seed{seed}') for seed in seeds]
      runs = list(zip(workdirs, run_experiments_lockstep(configs, workdirs)))
  except (ConfigError, DatasetNotFoundError, CorruptDatasetError, FlagError) as error:
    cli.fail(str(error))
  for workdir, summary in runs:
    print(
      f'final accuracy {summary["final_accuracy"]:.4f}  best {summary["best_accuracy"]:.4f}  '
      f'virtual time {summary["final_virtual_time"]:.1f}s  '
      f'host {summary["host"]["seconds"]:.1f}s  outputs: {os.path.abspath(workdir)}'
    )


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
