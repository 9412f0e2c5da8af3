"""Host time of FedAvg rounds with update transforms on, against the same rounds without.

  .venv/bin/python benchmarks/transform_overhead.py [--config=configs/fedavg_fashion_mnist.py]
      [--rounds=60] [--repeats=3] [--variants=dp,median,top_k] [--data_dir=data]
      [--output=runs/bench/transform_overhead.jsonl]

After a warm-up run of every variant (which compiles the client programs and aggregators that
later runs of the process reuse), runs the config `--repeats` times per variant, alternating
(plain, dp, median, ..., plain, dp, ...), so that drifts of this machine's speed fall on all of
them. Each run's `summary['host']['simulation_seconds']` (the simulation loop: training,
aggregation, evaluations; data loading excluded) over its rounds is the host time per round.
Reports the medians and each variant's overhead against plain as a JSON line and a table.

Variants: `dp` central DP-FedAvg (clip_norm 1, noise multiplier 1, `docs/privacy.md`);
`local_dp` the local mechanism; `median` the coordinate-wise median; `krum` Krum with f = 2;
`top_k` top-1% sparsification with error feedback; `qsgd` QSGD with 16 levels.
"""

import importlib.util
import json
import os
import statistics
import tempfile

from absl import app, flags

from fedsim_jax import cli

_CONFIG = flags.DEFINE_string('config', 'configs/fedavg_fashion_mnist.py', 'Config file.')
_ROUNDS = flags.DEFINE_integer('rounds', 60, 'Rounds per run.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Runs per variant.')
_VARIANTS = flags.DEFINE_list('variants', ['dp', 'median', 'top_k'], 'Variants beside plain.')
_DATA_DIR = flags.DEFINE_string('data_dir', 'data', 'Prepared data dir.')
_OUTPUT = flags.DEFINE_string('output', None, 'Append the JSON line to this file too.')

VARIANTS = {
  'plain': {},
  'dp': {
    'privacy.name': 'dp_gaussian',
    'privacy.kwargs': {'clip_norm': 1.0, 'noise_multiplier': 1.0},
  },
  'local_dp': {
    'privacy.name': 'dp_gaussian',
    'privacy.kwargs': {'clip_norm': 1.0, 'noise_multiplier': 1.0, 'placement': 'local'},
  },
  'median': {'robust.name': 'median'},
  'krum': {'robust.name': 'krum', 'robust.kwargs': {'num_byzantine': 2}},
  'top_k': {'compression.name': 'top_k', 'compression.kwargs': {'fraction': 0.01}},
  'qsgd': {'compression.name': 'qsgd', 'compression.kwargs': {'levels': 16}},
}


def _load_config(path: str):
  spec = importlib.util.spec_from_file_location('benchmark_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def _config(variant: str):
  from fedsim_jax.config import set_by_path

  config = _load_config(_CONFIG.value)
  config.data.data_dir = _DATA_DIR.value
  config.run.num_rounds = _ROUNDS.value
  config.run.eval_every = _ROUNDS.value  # evaluations at the start and the end only
  config.run.write_tasks = False
  config.run.tensorboard = False
  config.run.on_divergence = 'continue'  # local DP's noise may diverge; the timing holds
  for path, value in VARIANTS[variant].items():
    if isinstance(value, dict):
      for field, field_value in value.items():
        set_by_path(config, f'{path}.{field}', field_value)
    else:
      set_by_path(config, path, value)
  return config


def _seconds_per_round(variant: str) -> float:
  from fedsim_jax.experiment import run_experiment

  with tempfile.TemporaryDirectory() as workdir:
    summary = run_experiment(_config(variant), workdir)
  return summary['host']['simulation_seconds'] / summary['final_version']


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  unknown = [v for v in _VARIANTS.value if v not in VARIANTS]
  if unknown:
    cli.fail(f'--variants={",".join(unknown)} is invalid; allowed: {sorted(VARIANTS)}')
  cli.quiet_logging()
  variants = ['plain', *_VARIANTS.value]
  for variant in variants:  # warm-up: compiles what the measured runs reuse
    _seconds_per_round(variant)
  seconds: dict[str, list[float]] = {variant: [] for variant in variants}
  for _ in range(_REPEATS.value):
    for variant in variants:
      seconds[variant].append(_seconds_per_round(variant))
  medians = {variant: statistics.median(values) for variant, values in seconds.items()}
  overhead = {variant: medians[variant] / medians['plain'] - 1 for variant in variants}
  record = {
    'config': _CONFIG.value,
    'rounds': _ROUNDS.value,
    'seconds_per_round': seconds,
    'overhead': overhead,
  }
  print(json.dumps(record))
  if _OUTPUT.value:
    os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
    with open(_OUTPUT.value, 'a') as f:
      f.write(json.dumps(record) + '\n')
  print('| variant | host ms per round (each run) | median | overhead vs plain |')
  print('|---|---|---|---|')
  for variant in variants:
    each = ', '.join(f'{1000 * s:.1f}' for s in seconds[variant])
    print(
      f'| {variant} | {each} | {1000 * medians[variant]:.1f} | {100 * overhead[variant]:+.1f}% |'
    )


if __name__ == '__main__':
  app.run(main)
