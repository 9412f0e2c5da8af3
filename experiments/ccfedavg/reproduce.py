"""Reproduces CC-FedAvg's Tables I and II and Figure 5's r x W grid.

    python experiments/ccfedavg/reproduce.py --experiment=table2 --data_dir=data \
      --participation=0.2,0.4 --seeds=0,1,2,3,4 --rounds=400

Experiments (settings in `experiments.ccfedavg.tables.make_config`):
* table2: cross-device Fashion-MNIST (Table II, plus CC-FedAvg(c) of Table III), every
  algorithm x participation x seed, into `<workdir>/table2/p<q>/<algorithm>/seed<s>/`.
* table1: cross-silo, 8 clients, every algorithm x schedule x gamma x seed, into
  `<workdir>/table1/<schedule>/gamma<g>/<algorithm>/seed<s>/`. The paper uses CIFAR-10, which
  is not available offline; these runs use the Fashion-MNIST MLP (orderings comparable only).
  FedAvg (full) ignores the schedule and runs once per gamma (directory 'any').
* figure5: two-group budgets (fraction r with p = 1/W) for every r x W, on --setting
  (cross_device at 20% participation, or cross_silo at 90% non-IID by default), into
  `<workdir>/figure5/<setting>/r<r>_w<w>/<algorithm>/seed<s>/`.

The data is loaded and partitioned once per (partition, seed) and shared by all algorithms;
runs whose summary.json exists are reused (the sweep is resumable). Writes
`<workdir>/results.jsonl` (one record per run) and the markdown tables (`--output`, default
`<workdir>/tables.md`) with ours beside the paper's, and prints the total wall time.
`--rounds` defaults to the paper's 400; a reduced run passes fewer (CC-FedAvg(c)'s tau scales).

Invalid flags, settings or a missing dataset exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

# As a script, Python puts this file's folder on sys.path, not the repo root with `experiments`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags

from experiments import sweep
from experiments.ccfedavg import tables
from fedsim_jax import cli

EXPERIMENTS = ('table2', 'table1', 'figure5')
_DEFAULT_ALGORITHMS = {
  'table2': tables.TABLE2_ALGORITHMS,
  'table1': tables.TABLE1_ALGORITHMS,
  'figure5': tables.FIGURE5_ALGORITHMS,
}

_EXPERIMENT = flags.DEFINE_string('experiment', 'table2', f'One of {list(EXPERIMENTS)}.')
_ALGORITHMS = flags.DEFINE_string(
  'algorithms',
  '',
  f"Comma list from {list(tables.ALGORITHMS)}; empty: the experiment's method set.",
)
_PARTICIPATION = flags.DEFINE_string(
  'participation',
  '',
  'Comma list of participation ratios in (0, 1] (cross-device);'
  " empty: Table II's 0.1..0.8, or 0.2 for figure5.",
)
_SEEDS = flags.DEFINE_string('seeds', '0,1,2,3,4', 'Comma list of seeds (the paper: 5).')
_ROUNDS = flags.DEFINE_string(
  'rounds', str(tables.PAPER_ROUNDS), 'Rounds T (the paper: 400); fewer for a reduced run.'
)
_DATA_DIR = flags.DEFINE_string(
  'data_dir', None, 'Prepared-datasets directory (default: $FEDSIM_DATA_DIR or ~/fedsim_data).'
)
_WORKDIR = flags.DEFINE_string('workdir', 'runs/reproduce_ccfedavg', 'Output directory.')
_GAMMA = flags.DEFINE_string(
  'gamma',
  '',
  'Comma list of gamma-mix IID shares in [0, 1] (cross-silo); empty: '
  "Table I's 0,0.1,0.2,0.5,1, or 0.1 for figure5.",
)
_SCHEDULES = flags.DEFINE_string(
  'schedules', ','.join(tables.SCHEDULES), 'table1: comma list of training schedules.'
)
_SETTING = flags.DEFINE_string(
  'setting', 'cross_device', f'figure5: one of {list(tables.SETTINGS)}.'
)
_R = flags.DEFINE_string(
  'r',
  ','.join(f'{r:g}' for r in tables.FIGURE5_R),
  'figure5: comma list of constrained fractions r in [0, 1].',
)
_W = flags.DEFINE_string(
  'w', ','.join(map(str, tables.FIGURE5_W)), 'figure5: comma list of integers W >= 1 (p = 1/W).'
)
_EVAL_EVERY = flags.DEFINE_string(
  'eval_every', str(tables.DEFAULT_EVAL_EVERY), 'Rounds between test-set evaluations.'
)
_ONLY_EXISTING = flags.DEFINE_bool(
  'only_existing', False, 'Write the tables from the finished runs only; run nothing.'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Markdown tables (default: <workdir>/tables.md).')


FlagError = sweep.FlagError
_parse_list = sweep.parse_list


def _one_int(name: str, text: str, minimum: int) -> int:
  return sweep.parse_one(name, text, int, lambda v: v >= minimum, f'an integer >= {minimum}')


def parse_settings() -> dict[str, Any]:
  """The sweep's settings from the flags; raises `FlagError`."""
  experiment = _EXPERIMENT.value
  if experiment not in EXPERIMENTS:
    raise FlagError(
      f'--experiment={experiment!r} is invalid; allowed values: {",".join(EXPERIMENTS)}'
    )
  setting = {'table2': 'cross_device', 'table1': 'cross_silo'}.get(experiment, _SETTING.value)
  if setting not in tables.SETTINGS:
    raise FlagError(
      f'--setting={setting!r} is invalid; allowed values: {",".join(tables.SETTINGS)}'
    )
  figure5 = experiment == 'figure5'
  settings = {
    'experiment': experiment,
    'setting': setting,
    'algorithms': (
      _parse_list(
        'algorithms',
        _ALGORITHMS.value,
        str,
        lambda v: v in tables.ALGORITHMS,
        ','.join(tables.ALGORITHMS),
      )
      or list(_DEFAULT_ALGORITHMS[experiment])
    ),
    'participation': (
      _parse_list(
        'participation', _PARTICIPATION.value, float, lambda v: 0 < v <= 1, 'numbers in (0, 1]'
      )
      or ([tables.FIGURE5_PARTICIPATION] if figure5 else list(tables.PARTICIPATIONS))
    ),
    'gamma': (
      _parse_list('gamma', _GAMMA.value, float, lambda v: 0 <= v <= 1, 'numbers in [0, 1]')
      or ([tables.FIGURE5_GAMMA] if figure5 else list(tables.GAMMAS))
    ),
    'schedules': _parse_list(
      'schedules',
      _SCHEDULES.value,
      str,
      lambda v: v in tables.SCHEDULES,
      ','.join(tables.SCHEDULES),
    ),
    'seeds': _parse_list('seeds', _SEEDS.value, int, lambda v: v >= 0, 'integers >= 0'),
    'r': _parse_list('r', _R.value, float, lambda v: 0 <= v <= 1, 'numbers in [0, 1]'),
    'w': _parse_list('w', _W.value, int, lambda v: v >= 1, 'integers >= 1'),
    'rounds': _one_int('rounds', _ROUNDS.value, 1),
    'eval_every': _one_int('eval_every', _EVAL_EVERY.value, 1),
  }
  required = ['seeds'] + (['schedules'] if experiment == 'table1' else [])
  required += ['r', 'w'] if figure5 else []
  for name in required:
    if not settings[name]:
      raise FlagError(f'--{name} is empty; give at least one value')
  return settings


def _runs(settings: dict[str, Any], seed: int) -> Iterator[tuple[dict[str, Any], str]]:
  """(make_config keyword arguments incl. algorithm and setting, run directory) per run, grouped
  so that runs sharing a federation are consecutive."""
  experiment, setting = settings['experiment'], settings['setting']
  base = os.path.join(experiment, setting) if experiment == 'figure5' else experiment
  partitions = settings['gamma'] if setting == 'cross_silo' else [None]
  for gamma in partitions:
    cells: list[tuple[dict[str, Any], str]] = []
    if experiment == 'table2':
      cells = [({'participation': q}, f'p{q:g}') for q in settings['participation']]
    elif experiment == 'table1':
      cells = [
        ({'gamma': gamma, 'schedule': s}, os.path.join(s, f'gamma{gamma:g}'))
        for s in settings['schedules']
      ]
    else:
      extra = (
        {'gamma': gamma}
        if setting == 'cross_silo'
        else {'participation': settings['participation'][0]}
      )
      cells = [
        (dict(extra, r=r, w=w), f'r{r:g}_w{w}') for r in settings['r'] for w in settings['w']
      ]
    for algorithm in settings['algorithms']:
      for kwargs, directory in cells:
        yield (
          dict(kwargs, algorithm=algorithm, setting=setting),
          os.path.join(base, directory, algorithm, f'seed{seed}'),
        )


def _record(
  summary: dict[str, Any], kwargs: dict[str, Any], seed: int, run_dir: str
) -> dict[str, Any]:
  scheduler = summary.get('scheduler') or {}
  return dict(
    kwargs,
    seed=seed,
    best_accuracy=summary.get('best_accuracy'),
    final_accuracy=summary.get('final_accuracy'),
    client_updates=summary.get('client_updates'),
    trained_updates=scheduler.get('trained_updates'),
    estimated_updates=scheduler.get('estimated_updates'),
    gradient_steps=summary.get('gradient_steps'),
    host_seconds=sweep.host_seconds(summary),
    code=sweep.run_code(summary),
    workdir=run_dir,
  )


def run_sweep(
  settings: dict[str, Any], workdir: str, data_dir: str | None, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
  """Runs (or reuses) every run of the sweep; returns the run records."""
  from fedsim_jax.experiment import build_federated_dataset

  plan = [
    (seed, kwargs, run_dir)
    for seed in settings['seeds']
    for kwargs, run_dir in _runs(settings, seed)
  ]
  records, done, federations = [], {}, sweep.LastFederation()
  for index, (seed, kwargs, run_dir) in enumerate(plan, 1):
    config = tables.make_config(
      seed=seed,
      data_dir=data_dir,
      rounds=settings['rounds'],
      eval_every=settings['eval_every'],
      **kwargs,
    )
    if kwargs['algorithm'] == 'fedavg' and 'schedule' in kwargs:  # schedule-agnostic
      parts = run_dir.split(os.sep)
      parts[1] = 'any'
      run_dir = os.sep.join(parts)
    run_dir = os.path.join(workdir, run_dir)
    label = f'[{index}/{len(plan)}] {os.path.relpath(run_dir, workdir)}'
    if run_dir in done:
      summary, status = done[run_dir], 'shared'
    else:
      summary, status = sweep.load_or_run(
        run_dir,
        config,
        lambda: federations.get(
          (config.partition.name, config.partition.kwargs.get('gamma'), seed),
          lambda: build_federated_dataset(config),
        ),
        run_missing=not _ONLY_EXISTING.value,
      )
      if summary is None:
        log(f'{label}: missing (skipped: --only_existing)')
        continue
    done[run_dir] = summary
    log(
      f'{label}: {status}  best {summary.get("best_accuracy", float("nan")):.4f}  '
      f'final {summary.get("final_accuracy", float("nan")):.4f}  '
      f'host {sweep.host_seconds(summary) or float("nan"):.1f}s'
    )
    records.append(_record(summary, kwargs, seed, run_dir))
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
