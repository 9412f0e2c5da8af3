"""Runs one federated experiment from a config file.

  python experiments/run.py --config=configs/fedavg_fashion_mnist.py --workdir=runs/demo \
      --config.client.learning_rate=0.1

Writes config.json, metrics.jsonl and summary.json into --workdir. An invalid setting or a
missing dataset exits with code 2 and one line on stderr.
"""

from __future__ import annotations

import os

from absl import app, flags
from ml_collections import config_flags

from fedsim_jax import cli

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Experiment config file.',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None,
                               'Run directory (default: runs/<config file name>/seed<seed>).')
flags.mark_flags_as_required(['config'])


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  # Imported here so that `--help` and flag errors stay fast.
  from fedsim_jax.config import ConfigError
  from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
  from fedsim_jax.experiment import run_experiment

  config = _CONFIG.value
  workdir = _WORKDIR.value
  if workdir is None:
    name = os.path.splitext(os.path.basename(flags.FLAGS['config'].config_filename))[0]
    workdir = os.path.join('runs', name, f'seed{config.seed}')
  cli.quiet_logging(verbose_by_default=True)  # progress lines: one per evaluation
  try:
    summary = run_experiment(config, workdir)
  except (ConfigError, DatasetNotFoundError, CorruptDatasetError) as error:
    cli.fail(str(error))
  print(f'final accuracy {summary["final_accuracy"]:.4f}  best {summary["best_accuracy"]:.4f}  '
        f'virtual time {summary["final_virtual_time"]:.1f}s  host {summary["host"]["seconds"]:.1f}s')
  print(f'outputs: {os.path.abspath(workdir)}')


if __name__ == '__main__':
  app.run(main)
