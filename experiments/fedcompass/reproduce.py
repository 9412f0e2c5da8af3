"""Reproduces FedCompass's MNIST experiments (Li et al., ICLR 2024): Table 1 and Tables 14-15.

  python experiments/fedcompass/reproduce.py --data_dir=data --seeds=0,1,2 \
      --num_clients=5 --speeds=normal,exponential --workdir=runs/reproduce_fedcompass

Runs every algorithm x partition x m x speed x seed combination (settings of Tables 7-9 and
Section 5.4, see `experiments.fedcompass.tables.make_config`) into
`<workdir>/<partition>/m<m>/<speed>/<algorithm>/seed<seed>/`, skipping runs whose summary.json
already exists (the sweep is resumable). The data is loaded and partitioned once per
(partition, m, seed) and shared by all algorithms and speeds. Writes `<workdir>/results.jsonl`
(one record per run) and the markdown tables (`--output`, default `<workdir>/tables.md`): the
relative time to first reach 90% test accuracy normalised by FedCompass (Table 1), the top
accuracy (Tables 14-15), each with the paper's value beside ours, and whether our ordering of the
algorithms agrees with the paper's.

Budgets: all synchronous algorithms (FedAvg, FedAvgM) run for `--sync_budget` virtual seconds
(default 3600), all asynchronous ones (FedAsync, FedBuff, FedAT, FedCompass, +M, +N) for
`--async_budget` (default 1200), as the paper equalises wall-clock time within each family
without stating the budgets (the defaults' rationale is in `tables`). The simulation
is costly on CPU: ~1.6 host seconds per virtual second for an asynchronous m=5 run on two
cores, growing with m; the paper's full grid with ten seeds is a GPU or cluster job. Ablations: `--q_ratio=0.05,0.1,0.2,0.4` (Q_min/Q_max, Tables 3 and
19-20) and `--latest_time_factor=1.0,1.2,1.5,2.0` (lambda, Table 21) run every FedCompass-family
algorithm once per value (rows 'FedCompass (1/Q=0.05)' etc., directories 'fedcompass_q0.05').

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
from experiments.fedcompass import tables
from fedsim_jax import cli

_ALGORITHMS = flags.DEFINE_string(
  'algorithms',
  ','.join(tables.ALGORITHMS),
  f'Comma list of algorithms, from {list(tables.ALGORITHMS)}.',
)
_PARTITIONS = flags.DEFINE_string(
  'partitions',
  ','.join(tables.PARTITIONS),
  f'Comma list of partitions, from {list(tables.PARTITIONS)}.',
)
_NUM_CLIENTS = flags.DEFINE_string(
  'num_clients',
  ','.join(map(str, tables.NUM_CLIENTS)),
  'Comma list of client counts m, from 5,10,20.',
)
_SPEEDS = flags.DEFINE_string(
  'speeds',
  ','.join(tables.SPEEDS),
  f'Comma list of client heterogeneity settings, from {list(tables.SPEEDS)}.',
)
_SEEDS = flags.DEFINE_string(
  'seeds', '0,1,2', 'Comma list of seeds (integers >= 0); the paper averages ten.'
)
_DATA_DIR = flags.DEFINE_string(
  'data_dir', None, 'Prepared-datasets directory (default: $FEDSIM_DATA_DIR or ~/fedsim_data).'
)
_WORKDIR = flags.DEFINE_string('workdir', 'runs/reproduce_fedcompass', 'Output directory.')
_SYNC_BUDGET = flags.DEFINE_string(
  'sync_budget', str(tables.DEFAULT_SYNC_BUDGET), 'Virtual seconds for FedAvg / FedAvgM.'
)
_ASYNC_BUDGET = flags.DEFINE_string(
  'async_budget',
  str(tables.DEFAULT_ASYNC_BUDGET),
  'Virtual seconds for the asynchronous algorithms (FedAsync, FedBuff, FedAT, FedCompass, +M, +N).',
)
_EVAL_EVERY = flags.DEFINE_string(
  'eval_every', str(tables.DEFAULT_EVAL_EVERY), 'Server versions between test-set evaluations.'
)
_Q_RATIO = flags.DEFINE_string(
  'q_ratio',
  '',
  'Comma list of Q_min/Q_max values in (0, 1] for the FedCompass '
  "family (Q_max as in Table 9); empty: the paper's 0.2.",
)
_LATEST_TIME_FACTOR = flags.DEFINE_string(
  'latest_time_factor',
  '',
  "Comma list of lambda values >= 1 for the FedCompass family; empty: the paper's 1.2.",
)
_SET = sweep.define_overrides_flag('fedasync:algorithm.kwargs.staleness=constant')
_ONLY_EXISTING = flags.DEFINE_bool(
  'only_existing', False, 'Write the tables from the finished runs only; run nothing.'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Markdown tables (default: <workdir>/tables.md).')


FlagError = sweep.FlagError
_parse_list = sweep.parse_list
_parse_number = sweep.parse_one


def _finite_positive(value: float) -> bool:
  return 0 < value < float('inf')


def parse_settings() -> dict[str, Any]:
  """The sweep's settings from the flags; raises `FlagError`."""
  settings = {
    'algorithms': _parse_list(
      'algorithms',
      _ALGORITHMS.value,
      str,
      lambda v: v in tables.ALGORITHMS,
      ','.join(tables.ALGORITHMS),
    ),
    'partitions': _parse_list(
      'partitions',
      _PARTITIONS.value,
      str,
      lambda v: v in tables.PARTITIONS,
      ','.join(tables.PARTITIONS),
    ),
    'num_clients': _parse_list(
      'num_clients', _NUM_CLIENTS.value, int, lambda v: v in tables.NUM_CLIENTS, '5,10,20'
    ),
    'speeds': _parse_list(
      'speeds', _SPEEDS.value, str, lambda v: v in tables.SPEEDS, ','.join(tables.SPEEDS)
    ),
    'seeds': _parse_list('seeds', _SEEDS.value, int, lambda v: v >= 0, 'integers >= 0'),
    'sync_budget': _parse_number(
      'sync_budget', _SYNC_BUDGET.value, float, _finite_positive, 'a number > 0'
    ),
    'async_budget': _parse_number(
      'async_budget', _ASYNC_BUDGET.value, float, _finite_positive, 'a number > 0'
    ),
    'eval_every': _parse_number(
      'eval_every', _EVAL_EVERY.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
    'q_ratios': _parse_list(
      'q_ratio', _Q_RATIO.value, float, lambda v: 0 < v <= 1, 'numbers in (0, 1]'
    )
    or [None],
    'latest_time_factors': _parse_list(
      'latest_time_factor',
      _LATEST_TIME_FACTOR.value,
      float,
      lambda v: 1 <= v < float('inf'),
      'numbers >= 1',
    )
    or [None],
    'overrides': sweep.parse_overrides('set', _SET.value, tables.ALGORITHMS),
  }
  for name in ('algorithms', 'partitions', 'num_clients', 'speeds', 'seeds'):
    if not settings[name]:
      raise FlagError(f'--{name} is empty; give at least one value')
  return settings


def _runs(settings: dict[str, Any], partition: str, m: int, seed: int):
  """(speed, algorithm, q_ratio, latest_time_factor) of every run sharing one federation."""
  for speed in settings['speeds']:
    for algorithm in settings['algorithms']:
      if algorithm in tables.COMPASS:
        for q_ratio in settings['q_ratios']:
          for factor in settings['latest_time_factors']:
            yield speed, algorithm, q_ratio, factor
      else:
        yield speed, algorithm, None, None


def _record(summary: dict[str, Any], **keys) -> dict[str, Any]:
  return dict(
    keys,
    time_to_target=summary.get('time_to_target'),
    best_accuracy=summary.get('best_accuracy'),
    final_accuracy=summary.get('final_accuracy'),
    final_virtual_time=summary.get('final_virtual_time'),
    host_seconds=sweep.host_seconds(summary),
    code=sweep.run_code(summary),
  )


# Settings a reused run must share with the requested one (budget, evaluation cadence, ablation).
_CHECKED_SETTINGS = (
  'run.max_virtual_time',
  'run.eval_every',
  'algorithm.kwargs.q_min',
  'algorithm.kwargs.latest_time_factor',
)


def run_sweep(
  settings: dict[str, Any], workdir: str, data_dir: str | None, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
  """Runs (or reuses) every run of the sweep; returns the run records."""
  from fedsim_jax.experiment import build_federated_dataset

  groups = [
    (p, m, s)
    for p in settings['partitions']
    for m in settings['num_clients']
    for s in settings['seeds']
  ]
  overrides = settings.get('overrides', ())
  plan = [
    (partition, m, seed, speed, algorithm, q_ratio, factor)
    for partition, m, seed in groups
    for speed, algorithm, q_ratio, factor in _runs(settings, partition, m, seed)
  ]
  configs = []
  for partition, m, seed, speed, algorithm, q_ratio, factor in plan:
    config = tables.make_config(
      algorithm,
      partition,
      m,
      speed,
      seed,
      data_dir=data_dir,
      sync_budget=settings['sync_budget'],
      async_budget=settings['async_budget'],
      eval_every=settings['eval_every'],
      q_ratio=q_ratio,
      latest_time_factor=factor,
    )
    sweep.apply_overrides(config, algorithm, overrides)
    configs.append(config)
  configs = sweep.validated(configs)  # an invalid value stops the sweep before its first run
  checked = sweep.checked_paths(_CHECKED_SETTINGS, overrides)
  records, federations = [], sweep.LastFederation()
  for index, (run, config) in enumerate(zip(plan, configs), start=1):
    partition, m, seed, speed, algorithm, q_ratio, factor = run
    variant = tables.variant_name(algorithm, q_ratio, factor)
    run_dir = os.path.join(workdir, partition, f'm{m}', speed, variant, f'seed{seed}')
    label = f'[{index}/{len(plan)}] {partition} m={m} {speed} {variant} seed={seed}'
    summary, status = sweep.load_or_run(
      run_dir,
      config,
      lambda: federations.get((partition, m, seed), lambda: build_federated_dataset(config)),
      run_missing=not _ONLY_EXISTING.value,
    )
    if summary is None:
      log(f'{label}: missing (skipped: --only_existing)')
      continue
    note = ''
    stale = status == 'reused' and sweep.stale_setting(run_dir, config, checked)
    if stale:
      note = f' (warning: run with {stale}; delete it to rerun)'
    hit = summary.get('time_to_target')
    log(
      f'{label}: {status}  best {summary.get("best_accuracy", float("nan")):.4f}  '
      f'target {"missed" if hit is None else f"at {hit:.1f}s"}  '
      f'host {sweep.host_seconds(summary) or float("nan"):.1f}s{note}'
    )
    records.append(
      _record(
        summary,
        algorithm=algorithm,
        variant=variant,
        q_ratio=q_ratio,
        latest_time_factor=factor,
        partition=partition,
        m=m,
        speed=speed,
        seed=seed,
        workdir=run_dir,
      )
    )
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
