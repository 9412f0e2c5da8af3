"""Reproduces FedASMU's comparison (Liu et al., AAAI 2024, Tables 1-2) and its ablations.

  python experiments/fedasmu/reproduce.py --data_dir=data --dataset=fashion_mnist \
      --methods=fedasmu,fedavg,fedasync,fedbuff --seeds=0 --workdir=runs/reproduce_fedasmu

Runs every method x model x seed on `--dataset` (Fashion-MNIST: the LeNet column of Table 2;
CIFAR-10, when its data dir is prepared: the LeNet and CNN columns of Table 1; `--models`
picks among them) under the paper's system model (100 devices, Dirichlet label skew, a 1:5
fastest-to-slowest training time, 10% of the devices training at once; the settings and every
choice where the paper is silent are in `experiments.fedasmu.tables`) into
`<workdir>/<dataset>/<model>/<method>/seed<seed>/`, reusing runs whose summary.json exists (the
sweep is resumable; a reused run made with other settings is flagged). The federation is built
once per seed and shared by all methods and models. Writes `<workdir>/results.jsonl` (one record
per run) and the markdown tables (`--output`, default `<workdir>/tables.md`), which are also
printed: per method the final ("convergence") accuracy, the best accuracy and the virtual time
to the column's target ('/' when never reached) with the paper's figures beside, the Spearman
correlation between our and the paper's ordering of the methods by accuracy, and the ablation
comparisons beside the ranges Sec. 5 quotes.

Methods: FedASMU and its ablations (FedASMU-DA, -FA, -0, H1-H3) and the baselines (FedAvg,
FedProx, MOON, FedDyn synchronous; FedAsync, PORT, ASO-Fed, FedBuff, FedSA asynchronous). A
method whose algorithm this build has not registered is an error before anything runs.

Budget: the paper's T = 500 server versions (`--num_rounds`) and optionally a common
virtual-time budget (`--max_virtual_time`); pass smaller values for a reduced run. The full
sweep (16 methods x 500 versions with 5 local epochs each) is a GPU job.

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
from experiments.fedasmu import tables
from fedsim_jax import cli

_METHODS = flags.DEFINE_string(
  'methods', ','.join(tables.METHODS), f'Comma list of methods from {list(tables.METHODS)}.'
)
_DATASET = flags.DEFINE_string(
  'dataset', 'fashion_mnist', f'One of {list(tables.DATASETS)} (cifar10 needs a prepared data dir).'
)
_MODELS = flags.DEFINE_string(
  'models',
  '',
  "Comma list of models of the dataset's columns (fashion_mnist: "
  'lenet5; cifar10: lenet5,fedasmu_cnn); empty: all of them.',
)
_SEEDS = flags.DEFINE_string('seeds', '0', 'Comma list of seeds (integers >= 0).')
_NUM_CLIENTS = flags.DEFINE_string(
  'num_clients',
  str(tables.PAPER_NUM_CLIENTS),
  'Devices m (the paper: 100); 10% of them train at once.',
)
_CONCENTRATION = flags.DEFINE_string(
  'concentration',
  str(tables.DEFAULT_CONCENTRATION),
  'Dirichlet alpha of the label split (not stated in the paper).',
)
_NUM_ROUNDS = flags.DEFINE_string(
  'num_rounds',
  str(tables.PAPER_NUM_ROUNDS),
  "Server versions per run (the paper's T = 500); empty: no limit (then give --max_virtual_time).",
)
_MAX_VIRTUAL_TIME = flags.DEFINE_string(
  'max_virtual_time', '', 'Virtual-seconds budget for every method; empty: none.'
)
_LOCAL_EPOCHS = flags.DEFINE_string(
  'local_epochs',
  str(tables.DEFAULT_LOCAL_EPOCHS),
  'Local epochs per task (not stated in the paper).',
)
_BATCH_SIZE = flags.DEFINE_string(
  'batch_size', str(tables.DEFAULT_BATCH_SIZE), 'Local mini-batch size (not stated in the paper).'
)
_FASTEST_STEP_TIME = flags.DEFINE_string(
  'fastest_step_time',
  str(tables.DEFAULT_FASTEST_STEP_TIME),
  'Virtual seconds per local step of the fastest device (the slowest: 5 times that).',
)
_EVAL_EVERY = flags.DEFINE_string(
  'eval_every', str(tables.DEFAULT_EVAL_EVERY), 'Server versions between test-set evaluations.'
)
_DATA_DIR = flags.DEFINE_string(
  'data_dir', None, 'Prepared-datasets directory (default: $FEDSIM_DATA_DIR or ~/fedsim_data).'
)
_WORKDIR = flags.DEFINE_string('workdir', 'runs/reproduce_fedasmu', 'Output directory.')
_ONLY_EXISTING = flags.DEFINE_bool(
  'only_existing', False, 'Write the tables from the finished runs only; run nothing.'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Markdown tables (default: <workdir>/tables.md).')

FlagError = sweep.FlagError

# Settings a reused run must share with the requested one.
_CHECKED_SETTINGS = (
  'data.num_clients',
  'partition.kwargs.concentration',
  'client.learning_rate',
  'client.local_epochs',
  'client.batch_size',
  'run.num_rounds',
  'run.max_virtual_time',
  'run.eval_every',
  'latency.kwargs.fastest_step_time',
)


def _finite_positive(value: float) -> bool:
  return 0 < value < float('inf')


def _optional(
  name: str, text: str, convert: Callable[[str], Any], check: Callable[[Any], bool], allowed: str
) -> Any:
  if not text.strip():
    return None
  return sweep.parse_one(name, text, convert, check, allowed + ' or empty')


def parse_settings() -> dict[str, Any]:
  """The sweep's settings from the flags; raises `FlagError`."""
  dataset = sweep.parse_one(
    'dataset', _DATASET.value, str, lambda v: v in tables.DATASETS, ','.join(tables.DATASETS)
  )
  allowed_models = tables.DATASET_MODELS[dataset]
  settings = {
    'methods': sweep.parse_list(
      'methods', _METHODS.value, str, lambda v: v in tables.METHODS, ','.join(tables.METHODS)
    ),
    'dataset': dataset,
    'models': (
      sweep.parse_list(
        'models',
        _MODELS.value,
        str,
        lambda v: v in allowed_models,
        f'{",".join(allowed_models)} (for --dataset={dataset})',
      )
      or list(allowed_models)
    ),
    'seeds': sweep.parse_list('seeds', _SEEDS.value, int, lambda v: v >= 0, 'integers >= 0'),
    'num_clients': sweep.parse_one(
      'num_clients', _NUM_CLIENTS.value, int, lambda v: v >= 2, 'an integer >= 2'
    ),
    'concentration': sweep.parse_one(
      'concentration', _CONCENTRATION.value, float, _finite_positive, 'a number > 0'
    ),
    'num_rounds': _optional(
      'num_rounds', _NUM_ROUNDS.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
    'max_virtual_time': _optional(
      'max_virtual_time', _MAX_VIRTUAL_TIME.value, float, _finite_positive, 'a number > 0'
    ),
    'local_epochs': sweep.parse_one(
      'local_epochs', _LOCAL_EPOCHS.value, float, _finite_positive, 'a number > 0'
    ),
    'batch_size': sweep.parse_one(
      'batch_size', _BATCH_SIZE.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
    'fastest_step_time': sweep.parse_one(
      'fastest_step_time', _FASTEST_STEP_TIME.value, float, _finite_positive, 'a number > 0'
    ),
    'eval_every': sweep.parse_one(
      'eval_every', _EVAL_EVERY.value, int, lambda v: v >= 1, 'an integer >= 1'
    ),
  }
  for name in ('methods', 'seeds'):
    if not settings[name]:
      raise FlagError(f'--{name} is empty; give at least one value')
  if settings['num_rounds'] is None and settings['max_virtual_time'] is None:
    raise FlagError('--num_rounds / --max_virtual_time: both empty; give at least one budget')
  return settings


def make_config(settings: dict[str, Any], method: str, model: str, seed: int, data_dir: str | None):
  """The config of one run of the sweep."""
  return tables.make_config(
    method,
    model,
    settings['dataset'],
    seed=seed,
    data_dir=data_dir,
    num_clients=settings['num_clients'],
    concentration=settings['concentration'],
    num_rounds=settings['num_rounds'],
    max_virtual_time=settings['max_virtual_time'],
    local_epochs=settings['local_epochs'],
    batch_size=settings['batch_size'],
    fastest_step_time=settings['fastest_step_time'],
    eval_every=settings['eval_every'],
  )


def _record(summary: dict[str, Any], config, **keys) -> dict[str, Any]:
  return dict(
    keys,
    final_accuracy=summary.get('final_accuracy'),
    best_accuracy=summary.get('best_accuracy'),
    time_to_target=summary.get('time_to_target'),
    target_accuracy=summary.get('target_accuracy'),
    final_version=summary.get('final_version'),
    final_virtual_time=summary.get('final_virtual_time'),
    client_updates=summary.get('client_updates'),
    trigger_period=config.algorithm.kwargs.get('trigger_period'),
    host_seconds=sweep.host_seconds(summary),
    code=sweep.run_code(summary),
  )


def run_sweep(
  settings: dict[str, Any], workdir: str, data_dir: str | None, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
  """Runs (or reuses) every run of the sweep; returns the run records."""
  from fedsim_jax.experiment import build_federated_dataset

  dataset = settings['dataset']
  plan = [
    (seed, model, method)
    for seed in settings['seeds']
    for model in settings['models']
    for method in settings['methods']
  ]
  # Every config first: an invalid setting or an unregistered method stops the sweep before
  # any run.
  configs = [make_config(settings, method, model, seed, data_dir) for seed, model, method in plan]
  federations = sweep.LastFederation()  # one federation per seed, shared by models and methods
  records = []
  for index, ((seed, model, method), config) in enumerate(zip(plan, configs), 1):
    run_dir = os.path.join(workdir, dataset, model, method, f'seed{seed}')
    label = f'[{index}/{len(plan)}] {dataset} {model} {method} seed={seed}'
    summary, status = sweep.load_or_run(
      run_dir,
      config,
      lambda: federations.get(seed, lambda: build_federated_dataset(config)),
      run_missing=not _ONLY_EXISTING.value,
    )
    if summary is None:
      log(f'{label}: missing (skipped: --only_existing)')
      continue
    stale = status == 'reused' and sweep.stale_setting(run_dir, config, _CHECKED_SETTINGS)
    note = f' (warning: run with {stale}; delete it to rerun)' if stale else ''
    hit = summary.get('time_to_target')
    log(
      f'{label}: {status}  final {summary.get("final_accuracy", float("nan")):.4f}  '
      f'best {summary.get("best_accuracy", float("nan")):.4f}  '
      f'target {"missed" if hit is None else f"at {hit:,.1f}s"}  '
      f'host {sweep.host_seconds(summary) or float("nan"):.1f}s{note}'
    )
    records.append(
      _record(
        summary, config, method=method, model=model, dataset=dataset, seed=seed, workdir=run_dir
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
