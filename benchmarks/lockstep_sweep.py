"""8 seeds of a FedCompass cross-silo run: sequential runs against one lockstep sweep.

  .venv/bin/python benchmarks/lockstep_sweep.py [--seeds=8] [--versions=200] [--model=mlp]

Each seed is the 5-client FedCompass setting (class partition, normal speeds, Q in [q_min,
q_max]) on synthetic 28x28 data (so the benchmark needs no prepared data dir). The sequential
runs call `run_experiment` once per seed; the sweep calls `run_experiments_lockstep` once.
Both write to a temporary directory; the script checks that the metrics are identical and
prints host seconds, the speed-up, how the sweep executed its tasks (`concurrent` for the loop
backend, `shared_batches` for vmap, with the mean shared batch size) as a JSON line and a table.
Evaluation runs every `--eval_every` versions in both.
"""

import json
import os
import tempfile
import time

from absl import app, flags

from fedsim_jax import cli

_SEEDS = flags.DEFINE_integer('seeds', 8, 'Number of seeds (simulations).')
_VERSIONS = flags.DEFINE_integer('versions', 200, 'Server versions per simulation.')
_MODEL = flags.DEFINE_string('model', 'mlp', "'mlp' or 'mnist_cnn'.")
_EVAL_EVERY = flags.DEFINE_integer('eval_every', 50, 'Versions between evaluations.')
_BACKEND = flags.DEFINE_enum('backend', 'auto', ['auto', 'vmap', 'loop'], 'Executor backend.')


def _config(seed: int):
  from fedsim_jax.config import base_config

  config = base_config()
  config.seed = seed
  config.algorithm.name = 'fedcompass'
  config.data.num_clients = 5
  config.model.name = _MODEL.value
  config.model.kwargs.hidden_sizes = (200, 200)
  config.client.local_steps = None
  config.client.batch_size = 32
  config.client.learning_rate = 0.05
  config.algorithm.kwargs.update(q_min=4, q_max=20)
  config.latency.kwargs.distribution = 'normal'
  config.latency.kwargs.jitter = 0.05
  config.executor.backend = _BACKEND.value
  config.run.num_rounds = _VERSIONS.value
  config.run.eval_every = _EVAL_EVERY.value
  config.run.eval_batch_size = 500
  return config


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return f.read()


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  cli.quiet_logging()
  from fedsim_jax.data.synthetic import toy_federation
  from fedsim_jax.experiment import run_experiment, run_experiments_lockstep

  seeds = list(range(_SEEDS.value))
  # The same data for every seed (like a seed sweep over one prepared dataset); 5 clients of
  # 600-1,200 examples, a 2,000-example test split.
  data = [
    toy_federation(
      num_clients=5,
      num_classes=10,
      image_shape=(28, 28, 1),
      min_size=600,
      max_size=1200,
      num_test=2000,
      seed=0,
    )
    for _ in seeds
  ]
  with tempfile.TemporaryDirectory() as root:
    # Warm-up: compile the client programs once so both sides measure steady work.
    run_experiment(_config(99), os.path.join(root, 'warmup'), dataset=data[0])
    start = time.perf_counter()
    for seed in seeds:
      run_experiment(_config(seed), os.path.join(root, f'seq{seed}'), dataset=data[seed])
    sequential = time.perf_counter() - start
    start = time.perf_counter()
    summaries = run_experiments_lockstep(
      [_config(s) for s in seeds], [os.path.join(root, f'lock{s}') for s in seeds], datasets=data
    )
    lockstep = time.perf_counter() - start
    identical = all(
      _metrics(os.path.join(root, f'seq{s}')) == _metrics(os.path.join(root, f'lock{s}'))
      for s in seeds
    )
  info = summaries[0]['host']['lockstep']
  record = {
    'case': 'fedcompass_cross_silo_seeds',
    'model': _MODEL.value,
    'backend': _BACKEND.value,
    'seeds': len(seeds),
    'versions': _VERSIONS.value,
    'sequential_s': round(sequential, 2),
    'lockstep_s': round(lockstep, 2),
    'speedup': round(sequential / lockstep, 2),
    'execution': info['execution'],
    'mean_shared_batch_size': info.get('mean_shared_batch_size'),
    'identical_metrics': identical,
  }
  print(json.dumps(record))
  batch = info.get('mean_shared_batch_size')
  print(
    f'| seeds | model | sequential s | lockstep s | speed-up | execution | mean shared batch '
    f'| identical |\n|---:|---|---:|---:|---:|---|---:|---|\n| {len(seeds)} | {_MODEL.value} '
    f'| {sequential:.1f} | {lockstep:.1f} | {sequential / lockstep:.2f}x | {info["execution"]} '
    f'| {"-" if batch is None else f"{batch:.1f}"} | {identical} |'
  )


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
