"""Runs the heterogeneity study (`experiments.heterogeneity.setups`).

    python experiments/heterogeneity/reproduce.py --data_dir=data --seeds=0,1,2 \
      --export=docs/results/data/heterogeneity.json

Every --methods x --partitions x --seeds run goes into `<workdir>/<partition>/<method>/seed<s>/`.
The data is loaded, partitioned and split (each client's held-out test data) once per
(partition, seed) and shared by its runs; runs whose summary.json exists are reused and
interrupted runs continue from their newest checkpoint. Writes `<workdir>/results.jsonl`, the
markdown tables (`--output`, default `<workdir>/tables.md`) and, with --export, the result file
docs/results/heterogeneity.md is rendered from.

Invalid flags, settings or a missing dataset exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

# As a script, Python puts this file's folder on sys.path, not the repo root with `experiments`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags

from experiments import sweep
from experiments.heterogeneity import setups, tables
from fedsim_jax import cli

_METHODS = flags.DEFINE_string(
  'methods', ','.join(setups.METHODS), f'Comma list from {list(setups.METHODS)}.'
)
_PARTITIONS = flags.DEFINE_string(
  'partitions', ','.join(setups.PARTITIONS), f'Comma list from {list(setups.PARTITIONS)}.'
)
_SEEDS = flags.DEFINE_string('seeds', '0,1,2', 'Comma list of seeds.')
_ROUNDS = flags.DEFINE_string('rounds', str(setups.DEFAULT_ROUNDS), 'Rounds of every run.')
_EVAL_EVERY = flags.DEFINE_string(
  'eval_every', str(setups.DEFAULT_EVAL_EVERY), 'Rounds between evaluations.'
)
_DATA_DIR = flags.DEFINE_string(
  'data_dir', None, 'Prepared-datasets directory (default: $FEDSIM_DATA_DIR or ~/fedsim_data).'
)
_WORKDIR = flags.DEFINE_string('workdir', 'runs/heterogeneity', 'Output directory.')
_ONLY_EXISTING = flags.DEFINE_bool(
  'only_existing', False, 'Write the tables from the finished runs only; run nothing.'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Markdown tables (default: <workdir>/tables.md).')

FlagError = sweep.FlagError


def _positive(name: str, text: str) -> int:
  return sweep.parse_one(name, text, int, lambda v: v >= 1, 'an integer >= 1')


def parse_settings() -> dict[str, Any]:
  """The sweep's settings from the flags; raises `FlagError`."""
  settings = {
    'methods': sweep.parse_choices('methods', _METHODS.value, tuple(setups.METHODS)),
    'partitions': sweep.parse_choices('partitions', _PARTITIONS.value, tuple(setups.PARTITIONS)),
    'seeds': sweep.parse_list('seeds', _SEEDS.value, int, lambda v: v >= 0, 'integers >= 0'),
    'rounds': _positive('rounds', _ROUNDS.value),
    'eval_every': _positive('eval_every', _EVAL_EVERY.value),
  }
  if not settings['seeds']:
    raise FlagError('--seeds is empty; give at least one value')
  return settings


def run_sweep(
  settings: dict[str, Any], workdir: str, data_dir: str | None, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
  """Runs (or reuses) every run of the sweep; returns the run records."""
  cells = setups.cells(tuple(settings['partitions']), tuple(settings['methods']))
  # Partition by partition, seed by seed: the runs of one federation are consecutive.
  runs = sorted(
    ((seed, cell) for seed in settings['seeds'] for cell in cells),
    key=lambda run: (run[1].partition, run[0]),
  )

  def describe(summary: dict[str, Any]) -> str:
    clients = summary.get('client_evaluation') or {}
    return f'client mean {clients.get("client_accuracy_mean", float("nan")):.4f}'

  return sweep.run_cells(
    runs,
    lambda cell, seed: setups.make_config(
      cell, seed, data_dir, settings['rounds'], settings['eval_every']
    ),
    workdir,
    tables.run_record,
    federation_key=lambda cell, seed: (cell.partition, seed),
    run_missing=not (flags.FLAGS.is_parsed() and _ONLY_EXISTING.value),
    log=log,
    describe=describe,
  )


def main(argv: list[str]) -> None:
  sweep.sweep_main(
    argv,
    parse_settings=parse_settings,
    run_sweep=run_sweep,
    write_outputs=tables.write_outputs,
    workdir=_WORKDIR.value,
    output=_OUTPUT.value,
    data_dir=_DATA_DIR.value,
  )


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
