"""Runs the privacy, robustness and compression study (`experiments.transforms.setups`).

    python experiments/transforms/reproduce.py --experiment=privacy --data_dir=data \
      --seeds=0,1,2 --export=docs/results/data/transforms_privacy.json

Experiments:
* privacy: FedAvg and FedBuff, non-private and DP at each --noise_multipliers, into
  `<workdir>/<algorithm>/dp_z<z>/seed<s>/` (the non-private run: `plain/`).
* attacks: every --attacks x --fractions, and no attack, against every --aggregators, into
  `<workdir>/<algorithm>/<attack>_<fraction>/<aggregator>/seed<s>/` (no attack with the mean
  is the plain run, shared with the privacy experiment).
* compression: every --compressors on the bandwidth-limited latency model, into
  `<workdir>/<algorithm>/compression/<compressor>/seed<s>/`.

The data is loaded and partitioned once per seed and shared by all runs of the seed; runs
whose summary.json exists are reused and interrupted runs continue from their newest
checkpoint (the sweep is resumable). Writes `<workdir>/results.jsonl` (one record per run), the
markdown tables (`--output`, default `<workdir>/tables.md`) and, with --export, the result file
that experiments/results_docs.py renders docs/results/transforms.md from.

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
from experiments.transforms import setups, tables
from fedsim_jax import cli

_EXPERIMENT = flags.DEFINE_string('experiment', 'privacy', f'One of {list(setups.EXPERIMENTS)}.')
_ALGORITHMS = flags.DEFINE_string(
  'algorithms', ','.join(setups.ALGORITHMS), f'Comma list from {list(setups.ALGORITHMS)}.'
)
_NOISE = flags.DEFINE_string(
  'noise_multipliers',
  ','.join(f'{z:g}' for z in setups.NOISE_MULTIPLIERS),
  'privacy: comma list of noise multipliers z > 0 (the non-private run always runs).',
)
_ATTACKS = flags.DEFINE_string(
  'attacks', ','.join(setups.ATTACKS), f'attacks: comma list from {list(setups.ATTACKS)}.'
)
_FRACTIONS = flags.DEFINE_string(
  'fractions',
  ','.join(f'{f:g}' for f in setups.ATTACK_FRACTIONS),
  'attacks: comma list of malicious-client fractions in (0, 1).',
)
_AGGREGATORS = flags.DEFINE_string(
  'aggregators',
  ','.join(setups.AGGREGATORS),
  f'attacks: comma list from {list(setups.AGGREGATORS)}.',
)
_COMPRESSORS = flags.DEFINE_string(
  'compressors',
  ','.join(setups.COMPRESSORS),
  f'compression: comma list from {list(setups.COMPRESSORS)}.',
)
_SEEDS = flags.DEFINE_string('seeds', '0,1,2', 'Comma list of seeds.')
_ROUNDS = flags.DEFINE_string(
  'rounds',
  str(setups.DEFAULT_ROUNDS),
  'FedAvg rounds (FedBuff runs twice as many versions); the compression runs are bounded by '
  'virtual time instead.',
)
_EVAL_EVERY = flags.DEFINE_string(
  'eval_every', str(setups.DEFAULT_EVAL_EVERY), 'FedAvg rounds between evaluations.'
)
_DATA_DIR = flags.DEFINE_string(
  'data_dir', None, 'Prepared-datasets directory (default: $FEDSIM_DATA_DIR or ~/fedsim_data).'
)
_WORKDIR = flags.DEFINE_string('workdir', 'runs/transforms', 'Output directory.')
_ONLY_EXISTING = flags.DEFINE_bool(
  'only_existing', False, 'Write the tables from the finished runs only; run nothing.'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Markdown tables (default: <workdir>/tables.md).')

FlagError = sweep.FlagError


def parse_settings() -> dict[str, Any]:
  """The sweep's settings from the flags; raises `FlagError`."""
  experiment = _EXPERIMENT.value
  if experiment not in setups.EXPERIMENTS:
    raise FlagError(
      f'--experiment={experiment!r} is invalid; allowed values: {",".join(setups.EXPERIMENTS)}'
    )
  settings = {
    'experiment': experiment,
    'algorithms': sweep.parse_choices('algorithms', _ALGORITHMS.value, setups.ALGORITHMS),
    'noise_multipliers': sweep.parse_list(
      'noise_multipliers', _NOISE.value, float, lambda v: v > 0, 'numbers > 0'
    ),
    'attacks': sweep.parse_choices('attacks', _ATTACKS.value, tuple(setups.ATTACKS)),
    'fractions': sweep.parse_list(
      'fractions', _FRACTIONS.value, float, lambda v: 0 < v < 1, 'numbers in (0, 1)'
    ),
    'aggregators': sweep.parse_choices('aggregators', _AGGREGATORS.value, setups.AGGREGATORS),
    'compressors': sweep.parse_choices(
      'compressors', _COMPRESSORS.value, tuple(setups.COMPRESSORS)
    ),
    'seeds': sweep.parse_list('seeds', _SEEDS.value, int, lambda v: v >= 0, 'integers >= 0'),
    'rounds': sweep.parse_one('rounds', _ROUNDS.value, int, lambda v: v >= 1, 'an integer >= 1'),
    'eval_every': sweep.parse_one(
      'eval_every', _EVAL_EVERY.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
  }
  for name in ('seeds', 'noise_multipliers', 'fractions'):
    if not settings[name]:
      raise FlagError(f'--{name} is empty; give at least one value')
  return settings


def plan(settings: dict[str, Any]) -> list[tuple[int, setups.Cell]]:
  """(seed, cell) of every run, seed by seed (runs of one seed share its federation)."""
  chosen = setups.cells(
    settings['experiment'],
    algorithms=tuple(settings['algorithms']),
    noise_multipliers=tuple(settings['noise_multipliers']),
    attacks=tuple(settings['attacks']),
    fractions=tuple(settings['fractions']),
    aggregators=tuple(settings['aggregators']),
    compressors=tuple(settings['compressors']),
  )
  cells = list(chosen)
  return [(seed, cell) for seed in settings['seeds'] for cell in cells]


def run_sweep(
  settings: dict[str, Any], workdir: str, data_dir: str | None, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
  """Runs (or reuses) every run of the sweep; returns the run records."""
  return sweep.run_cells(
    plan(settings),
    lambda cell, seed: setups.make_config(
      cell, seed, data_dir, settings['rounds'], settings['eval_every']
    ),
    workdir,
    tables.run_record,
    federation_key=lambda cell, seed: seed,  # every run of a seed shares its federation
    # --only_existing (unparsed when a test calls this directly: run what is missing).
    run_missing=not (flags.FLAGS.is_parsed() and _ONLY_EXISTING.value),
    log=log,
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
