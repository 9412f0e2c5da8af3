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


def _choices(name: str, text: str, allowed: Any) -> list[str]:
  values = sweep.parse_list(name, text, str, lambda v: v in allowed, ','.join(allowed))
  if not values:
    raise FlagError(f'--{name} is empty; give at least one value')
  return values


def _positive(name: str, text: str) -> int:
  return sweep.parse_one(name, text, int, lambda v: v >= 1, 'an integer >= 1')


def parse_settings() -> dict[str, Any]:
  """The sweep's settings from the flags; raises `FlagError`."""
  settings = {
    'methods': _choices('methods', _METHODS.value, tuple(setups.METHODS)),
    'partitions': _choices('partitions', _PARTITIONS.value, tuple(setups.PARTITIONS)),
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
  from fedsim_jax.experiment import build_federated_dataset

  run_missing = not (flags.FLAGS.is_parsed() and _ONLY_EXISTING.value)
  cells = setups.cells(tuple(settings['partitions']), tuple(settings['methods']))
  # Partition by partition, seed by seed: the runs of one federation are consecutive.
  runs = [(seed, cell) for seed in settings['seeds'] for cell in cells]
  runs.sort(key=lambda run: (run[1].partition, run[0]))
  configs = sweep.validated(
    [
      setups.make_config(cell, seed, data_dir, settings['rounds'], settings['eval_every'])
      for seed, cell in runs
    ]
  )
  records, federations = [], sweep.LastFederation()
  for index, ((seed, cell), config) in enumerate(zip(runs, configs, strict=True), 1):
    run_dir = os.path.join(workdir, cell.run_dir(seed))
    label = f'[{index}/{len(runs)}] {os.path.relpath(run_dir, workdir)}'
    summary, status = sweep.load_or_run(
      run_dir,
      config,
      lambda config=config, key=(cell.partition, seed): federations.get(
        key, lambda: build_federated_dataset(config)
      ),
      run_missing=run_missing,
    )
    if summary is None:
      log(f'{label}: {status}')
      continue
    clients = summary.get('client_evaluation') or {}
    log(
      f'{label}: {status}  global {summary.get("final_accuracy", float("nan")):.4f}  '
      f'client mean {clients.get("client_accuracy_mean", float("nan")):.4f}  '
      f'host {sweep.host_seconds(summary) or float("nan"):.1f}s'
    )
    records.append(tables.run_record(cell, seed, summary, run_dir))
  return records


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
