"""Reproduces "Learning from straggler clients" (Hard et al.): EMNIST Tables 20-21, offline.

  python experiments/stragglers/reproduce.py --data_dir=data --seeds=0,1,2 \
      --algorithms=fedavg,fedadam_overselection,fedbuff --latency=per_domain_per_example \
      --client_updates=20000 --workdir=runs/reproduce_stragglers

Runs every algorithm x latency model x seed (settings and the paper's hyperparameters in
`experiments.stragglers.tables`) into `<workdir>/<latency>/<algorithm>/seed<seed>/`,
reusing runs whose summary.json exists (the sweep is resumable; a reused run made with other
settings is flagged). EMNIST is not available offline: the runs use MNIST (`--dataset`) split
over `--num_clients` clients by a Dirichlet label split, with the paper's straggler-domain split
(the clients holding most examples of classes 0-4 become stragglers, the others lose those
classes). Where a federated-EMNIST data dir (converted from TFF's fed_emnist, with writer ids)
is prepared, `--dataset=emnist` runs the paper's task itself: one client per writer, 800
stragglers. The federation is built once and shared by all runs (the partition is fixed across
trials, as EMNIST's writer partition is). Writes `<workdir>/results.jsonl` (one record per run,
with its accuracy-against-virtual-time curve) and the markdown tables (`--output`, default
`<workdir>/tables.md`), which are also printed: Table 20/21-style straggler accuracy, total
accuracy and total virtual training time (median [5th, 95th percentile] over seeds, the paper's
beside), accuracy against virtual time, the federation's latency percentiles beside Table 7,
and the CIFAR-100-shaped round-time report.

`--round_time_only` prints and writes (`<workdir>/round_time.md`) only that report: the
synchronous round time of a 500-client x 100-example federation with cohort 20 under both
latency models, from the latency model alone (seconds, no data, no training), beside the
figure the paper implies (Tables 22-23 total time / 4,000 rounds).

The budget is in client updates (`--client_updates`, the paper's 100,000 by default; pass fewer
for a reduced run). The full sweep (12 algorithms x 2 latency models x 10 seeds, each 100,000
client updates through the EMNIST CNN) is a GPU job.

Invalid flags, settings or a missing dataset exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

# As a script, Python puts this file's folder on sys.path, not the repo root with `experiments`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags

from experiments import sweep
from experiments.stragglers import tables
from fedsim_jax import cli
from fedsim_jax.metrics import read_metrics

_ALGORITHMS = flags.DEFINE_string(
  'algorithms', ','.join(tables.ALGORITHMS), f'Comma list from {list(tables.ALGORITHMS)}.'
)
_LATENCY = flags.DEFINE_string(
  'latency',
  ','.join(tables.LATENCY_MODELS),
  f'Comma list of latency models from {list(tables.LATENCY_MODELS)} (Tables 1 and 2).',
)
_SEEDS = flags.DEFINE_string(
  'seeds', '0,1,2,3,4,5,6,7,8,9', 'Comma list of seeds (integers >= 0); the paper: 10 trials.'
)
_DATASET = flags.DEFINE_string(
  'dataset',
  'mnist',
  f"One of {list(tables.DATASETS)} (emnist: the paper's writer "
  'partition, where a data dir converted from TFF fed_emnist is '
  'prepared; digits is for smoke tests).',
)
_MODEL = flags.DEFINE_string(
  'model', 'emnist_cnn', f'One of {list(tables.MODELS)} (the paper: the EMNIST CNN).'
)
_NUM_CLIENTS = flags.DEFINE_string(
  'num_clients',
  str(tables.DEFAULT_NUM_CLIENTS),
  'Federation size (emnist: the writers decide; the default '
  f"there is the paper's {tables.PAPER_NUM_CLIENTS}, which sets "
  'the default straggler count).',
)
_NUM_STRAGGLERS = flags.DEFINE_string(
  'num_stragglers', '', "Straggler clients; empty: the paper's share 800/3,400 of --num_clients."
)
_CONCENTRATION = flags.DEFINE_string(
  'concentration', str(tables.DEFAULT_CONCENTRATION), 'Dirichlet alpha of the base split.'
)
_CLIENT_UPDATES = flags.DEFINE_string(
  'client_updates',
  str(tables.PAPER_CLIENT_UPDATES),
  'Budget in client updates (the paper: 100,000 = 2,000 rounds of 50); fewer for a reduced run.',
)
_COHORT_SIZE = flags.DEFINE_string(
  'cohort_size',
  str(tables.COHORT_SIZE),
  'B of the synchronous algorithms (the paper: 50); over-selection uses round(1.2 B).',
)
_BUFFER_SIZE = flags.DEFINE_string(
  'buffer_size', '', "FedBuff's K; empty: the paper's 20 (Tables 12-13)."
)
_CONCURRENCY = flags.DEFINE_string(
  'concurrency',
  '',
  "FedBuff's chi; empty: the paper's 100 (per-example) / 200 (per-domain per-example).",
)
_EVAL_EVERY_UPDATES = flags.DEFINE_string(
  'eval_every_updates',
  str(tables.DEFAULT_EVAL_EVERY_UPDATES),
  'Client updates between evaluations.',
)
_SET = sweep.define_overrides_flag('feast_msg:algorithm.kwargs.server_learning_rate=0.1')
_ROUND_TIME_ONLY = flags.DEFINE_bool(
  'round_time_only', False, 'Only the CIFAR-100-shaped round-time report (seconds, no training).'
)
_ROUND_TIME_ROUNDS = flags.DEFINE_string(
  'round_time_rounds', '10000', 'Simulated rounds of the round-time report.'
)
_DATA_DIR = flags.DEFINE_string(
  'data_dir', None, 'Prepared-datasets directory (default: $FEDSIM_DATA_DIR or ~/fedsim_data).'
)
_WORKDIR = flags.DEFINE_string('workdir', 'runs/reproduce_stragglers', 'Output directory.')
_ONLY_EXISTING = flags.DEFINE_bool(
  'only_existing', False, 'Write the tables from the finished runs only; run nothing.'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Markdown tables (default: <workdir>/tables.md).')

FlagError = sweep.FlagError

# Settings a reused run must share with the requested one.
_CHECKED_SETTINGS = (
  'data.name',
  'data.num_clients',
  'data.num_stragglers',
  'partition.kwargs.concentration',
  'model.name',
  'run.num_rounds',
  'run.max_client_updates',
  'run.eval_every',
  # Compared only where the run's algorithm has the setting (FedBuff has no cohort).
  'algorithm.kwargs.cohort_size',
  'algorithm.kwargs.num_selected',
  'algorithm.kwargs.buffer_size',
  'algorithm.kwargs.ema_warmup',  # FARe-DUST's default changed to Algorithm 1's reading
  'algorithm.kwargs.concurrency',
)


def _one(
  name: str, text: str, convert: Callable[[str], Any], check: Callable[[Any], bool], allowed: str
) -> Any:
  return sweep.parse_one(name, text, convert, check, allowed)


def _optional_int(name: str, text: str, minimum: int) -> int | None:
  if not text.strip():
    return None
  return _one(name, text, int, lambda v: v >= minimum, f'an integer >= {minimum} or empty')


def parse_settings() -> dict[str, Any]:
  """The sweep's settings from the flags; raises `FlagError`."""
  settings = {
    'algorithms': sweep.parse_list(
      'algorithms',
      _ALGORITHMS.value,
      str,
      lambda v: v in tables.ALGORITHMS,
      ','.join(tables.ALGORITHMS),
    ),
    'latency': sweep.parse_list(
      'latency',
      _LATENCY.value,
      str,
      lambda v: v in tables.LATENCY_MODELS,
      ','.join(tables.LATENCY_MODELS),
    ),
    'seeds': sweep.parse_list('seeds', _SEEDS.value, int, lambda v: v >= 0, 'integers >= 0'),
    'dataset': _one(
      'dataset', _DATASET.value, str, lambda v: v in tables.DATASETS, ','.join(tables.DATASETS)
    ),
    'model': _one(
      'model', _MODEL.value, str, lambda v: v in tables.MODELS, ','.join(tables.MODELS)
    ),
    'num_clients': _one(
      'num_clients', _NUM_CLIENTS.value, int, lambda v: v >= 2, 'an integer >= 2'
    ),
    'concentration': _one(
      'concentration', _CONCENTRATION.value, float, lambda v: 0 < v < float('inf'), 'a number > 0'
    ),
    'client_updates': _one(
      'client_updates', _CLIENT_UPDATES.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
    'cohort_size': _one(
      'cohort_size', _COHORT_SIZE.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
    'buffer_size': _optional_int('buffer_size', _BUFFER_SIZE.value, 1),
    'concurrency': _optional_int('concurrency', _CONCURRENCY.value, 1),
    'eval_every_updates': _one(
      'eval_every_updates', _EVAL_EVERY_UPDATES.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
    'overrides': sweep.parse_overrides('set', _SET.value, tables.ALGORITHMS),
    'round_time_rounds': _one(
      'round_time_rounds', _ROUND_TIME_ROUNDS.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
  }
  for name in ('algorithms', 'latency', 'seeds'):
    if not settings[name]:
      raise FlagError(f'--{name} is empty; give at least one value')
  if settings['dataset'] in tables.NATURAL_DATASETS and not _NUM_CLIENTS.present:
    settings['num_clients'] = tables.PAPER_NUM_CLIENTS
  num_clients = settings['num_clients']
  stragglers = _optional_int('num_stragglers', _NUM_STRAGGLERS.value, 1)
  if stragglers is None:
    stragglers = tables.default_num_stragglers(num_clients)
  if stragglers >= num_clients:
    raise FlagError(
      f'--num_stragglers={stragglers} is invalid; allowed values: '
      f'1..{num_clients - 1} (--num_clients - 1)'
    )
  settings['num_stragglers'] = stragglers
  if settings['client_updates'] < settings['cohort_size']:
    raise FlagError(
      f'--client_updates={settings["client_updates"]} is invalid; allowed values: '
      f'an integer >= --cohort_size ({settings["cohort_size"]})'
    )
  return settings


def make_config(
  settings: dict[str, Any], algorithm: str, latency: str, seed: int, data_dir: str | None
):
  """The config of one run of the sweep (the paper's settings, then `--set`)."""
  config = tables.make_config(
    algorithm,
    latency,
    seed=seed,
    data_dir=data_dir,
    dataset=settings['dataset'],
    model=settings['model'],
    num_clients=settings['num_clients'],
    num_stragglers=settings['num_stragglers'],
    concentration=settings['concentration'],
    client_updates=settings['client_updates'],
    cohort_size=settings['cohort_size'],
    buffer_size=settings['buffer_size'],
    concurrency=settings['concurrency'],
    eval_every_updates=settings['eval_every_updates'],
  )
  sweep.apply_overrides(config, algorithm, settings.get('overrides', ()))
  return config


def read_curve(run_dir: str) -> list[list[float]]:
  """The run's evaluations as rows (virtual_time, client_updates, total accuracy, straggler
  accuracy) from its `metrics.jsonl`."""
  return [
    [
      row['virtual_time'],
      row['client_updates'],
      row['test_accuracy'],
      row.get('test_accuracy/straggler'),
    ]
    for row in read_metrics(os.path.join(run_dir, 'metrics.jsonl'))
  ]


def _record(summary: dict[str, Any], run_dir: str, **keys) -> dict[str, Any]:
  curve = read_curve(run_dir)
  final = curve[-1] if curve else [None] * 4
  return dict(
    keys,
    virtual_time=final[0],
    client_updates=final[1],
    total_accuracy=final[2],
    straggler_accuracy=final[3],
    server_versions=summary.get('final_version'),
    tasks=summary.get('tasks'),
    host_seconds=sweep.host_seconds(summary),
    code=sweep.run_code(summary),
    curve=curve,
    workdir=run_dir,
  )


def run_sweep(
  settings: dict[str, Any], workdir: str, data_dir: str | None, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
  """Runs (or reuses) every run of the sweep; returns the run records. Also puts the
  federation's one-epoch latency percentiles into `settings['latency_stats']` (under
  `--only_existing` only when the data dir is there)."""
  from fedsim_jax.data.errors import CorruptDatasetError, DatasetNotFoundError
  from fedsim_jax.experiment import build_federated_dataset

  plan = [
    (seed, latency, algorithm)
    for seed in settings['seeds']
    for latency in settings['latency']
    for algorithm in settings['algorithms']
  ]
  # Every config first: an invalid setting stops the sweep before any run.
  configs = sweep.validated(
    [make_config(settings, algorithm, latency, seed, data_dir) for seed, latency, algorithm in plan]
  )
  federation = sweep.LastFederation()  # one partition for all runs (PARTITION_SEED)

  def dataset(config):
    return federation.get('federation', lambda: build_federated_dataset(config))

  # The federation's latency percentiles (Table 7) also under --only_existing, so that its
  # tables and `--export` carry them, unless the data dir is missing there (nothing else needs it).
  try:
    built = dataset(configs[0])
  except (DatasetNotFoundError, CorruptDatasetError):
    if not _ONLY_EXISTING.value:
      raise
    log('latency percentiles: not computed (no data dir; --only_existing)')
  else:
    settings['latency_stats'] = {
      latency: tables.latency_percentiles(
        built.client_sizes, built.straggler_mask, latency, seed=settings['seeds'][0]
      )
      for latency in tables.LATENCY_MODELS
    }
  records = []
  for index, ((seed, latency, algorithm), config) in enumerate(zip(plan, configs), 1):
    run_dir = os.path.join(workdir, latency, algorithm, f'seed{seed}')
    label = f'[{index}/{len(plan)}] {latency} {algorithm} seed={seed}'
    summary, status = sweep.load_or_run(
      run_dir, config, lambda: dataset(config), run_missing=not _ONLY_EXISTING.value
    )
    if summary is None:
      log(f'{label}: missing (skipped: --only_existing)')
      continue
    checked = sweep.checked_paths(_CHECKED_SETTINGS, settings.get('overrides', ()))
    stale = status == 'reused' and sweep.stale_setting(run_dir, config, checked)
    note = f' (warning: run with {stale}; delete it to rerun)' if stale else ''
    record = _record(summary, run_dir, algorithm=algorithm, latency=latency, seed=seed)
    straggler = record['straggler_accuracy']
    log(
      f'{label}: {status}  straggler {straggler if straggler is not None else float("nan"):.4f}'
      f'  total {record["total_accuracy"]:.4f}  virtual time {record["virtual_time"]:,.0f}s  '
      f'host {record["host_seconds"] or float("nan"):.1f}s{note}'
    )
    records.append(record)
  return records


def _round_time_only(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {list(argv[1:])}')
  try:
    settings = parse_settings()
  except FlagError as error:
    cli.fail(str(error))
  text = (
    '# CIFAR-100-shaped synchronous round time (latency model only)\n\n'
    + tables.round_time_report(settings['round_time_rounds'], settings['seeds'][0])
    + '\n'
  )
  path = os.path.join(_WORKDIR.value, 'round_time.md')
  sweep.write_text(path, text)
  print(text)
  print(f'round-time report: {os.path.abspath(path)}')


def main(argv: list[str]) -> None:
  if _ROUND_TIME_ONLY.value:
    _round_time_only(argv)
    return
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
