"""8 seeds of a FedCompass cross-silo run: sequential runs against one lockstep sweep.

  .venv/bin/python benchmarks/lockstep_sweep.py [--seeds=8] [--versions=200] [--model=mlp]
  .venv/bin/python benchmarks/lockstep_sweep.py --seeds=1 --learning_rates=0.01,0.02,0.05,0.1
  .venv/bin/python benchmarks/lockstep_sweep.py --reduced  # `make bench`: 3 rates, vmap, < 1 min

With `--learning_rates`, the runs are every client learning rate with every seed (points that
differ in a numeric hyperparameter run in lockstep too; `fedsim_jax.run_spec.
LOCKSTEP_HYPERPARAMETERS`; with the vmap backend the client learning rates train as one
vmapped program, each run's rate an argument of it), and the warm-up runs each learning rate
once (and a lockstep sweep of other seeds runs first), so that each side times its own
steady work. `--reduced` is the quick case of
`make bench`: 1 seed x 3 client learning rates, vmap backend, 12 versions.

Each seed is the 5-client FedCompass setting (class partition, normal speeds, Q in [q_min,
q_max]) on synthetic 28x28 data (so the benchmark needs no prepared data dir). The sequential
runs call `run_experiment` once per seed; the sweep calls `run_experiments_lockstep` once.
Both write to a temporary directory; the script checks that the metrics are identical, or else
that the schedules (versions, virtual times, updates, steps) are and the other metrics equal
within `--rtol` (accuracies within `--accuracy_tolerance`): a larger shared batch can take other
XLA:CPU matrix-multiply paths, whose last-bit differences training amplifies over the versions
(`fedsim_jax.runtime.lockstep`); it exits 1 otherwise. It prints host seconds, the speed-up, how the sweep executed its tasks (`concurrent` for the loop
backend, `shared_batches` for vmap, with the mean shared batch size) as a JSON line and a table.
Evaluation runs every `--eval_every` versions in both.
"""

import json
import math
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
_LEARNING_RATES = flags.DEFINE_list(
  'learning_rates', [], 'Client learning rates to sweep (default: 0.05 alone).'
)
_RTOL = flags.DEFINE_float('rtol', 1e-4, 'Relative tolerance of the metrics check (losses).')
_ACCURACY_TOLERANCE = flags.DEFINE_float(
  'accuracy_tolerance', 2e-3, 'Absolute tolerance of the metrics check (accuracies).'
)
_REDUCED = flags.DEFINE_bool(
  'reduced',
  False,
  'The quick case: 1 seed x 3 client learning rates (0.02, 0.05, 0.1), vmap backend, 12 versions '
  'evaluated every 6 (overrides those flags).',
)
_OUTPUT = flags.DEFINE_string('output', None, 'Also append the JSON line to this file.')
_DEFAULT_LEARNING_RATE = 0.05
# The metrics of a run's schedule, which lockstep must reproduce exactly.
_SCHEDULE = ('version', 'virtual_time', 'client_updates', 'gradient_steps')


def _config(seed: int, learning_rate: float = _DEFAULT_LEARNING_RATE):
  from fedsim_jax.config import base_config

  config = base_config()
  config.seed = seed
  config.algorithm.name = 'fedcompass'
  config.data.num_clients = 5
  config.model.name = _MODEL.value
  config.model.kwargs.hidden_sizes = (200, 200)
  config.client.local_steps = None
  config.client.batch_size = 32
  config.client.learning_rate = learning_rate
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


def _differences(sequential: str, lockstep: str) -> tuple[float, float] | None:
  """The largest relative difference of two runs' float metrics other than accuracies, and the
  largest absolute difference of their accuracies; None when their rows, schedules or other
  values differ."""
  rows_a = [json.loads(line) for line in sequential.splitlines()]
  rows_b = [json.loads(line) for line in lockstep.splitlines()]
  if len(rows_a) != len(rows_b):
    return None
  relative, accuracy = 0.0, 0.0
  for a, b in zip(rows_a, rows_b):
    if a.keys() != b.keys() or any(a.get(k) != b.get(k) for k in _SCHEDULE):
      return None
    for key, x in a.items():
      y = b[key]
      if isinstance(x, float) and isinstance(y, (int, float)):
        if 'accuracy' in key:
          accuracy = max(accuracy, abs(x - y))
        else:
          relative = max(relative, abs(x - y) / max(abs(x), abs(y), 1e-12))
      elif x != y:
        return None
  return relative, accuracy


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  cli.quiet_logging()
  from fedsim_jax.data.synthetic import toy_federation
  from fedsim_jax.experiment import run_experiment, run_experiments_lockstep

  if _REDUCED.value:
    for name, value in dict(
      seeds=1, learning_rates=['0.02', '0.05', '0.1'], backend='vmap', versions=12, eval_every=6
    ).items():
      flags.FLAGS[name].value = value
  try:
    rates = [float(rate) for rate in _LEARNING_RATES.value] or [_DEFAULT_LEARNING_RATE]
  except ValueError:
    rates = [math.nan]
  if not all(math.isfinite(rate) and rate > 0 for rate in rates):
    cli.fail(f'--learning_rates={",".join(_LEARNING_RATES.value)}; allowed: numbers > 0')
  for name, value, low in (('seeds', _SEEDS.value, 1), ('versions', _VERSIONS.value, 1),
                           ('eval_every', _EVAL_EVERY.value, 1)):  # fmt: skip
    if value < low:
      cli.fail(f'--{name}={value}; allowed: an integer >= {low}')
  for name, value in (('rtol', _RTOL.value), ('accuracy_tolerance', _ACCURACY_TOLERANCE.value)):
    if not (math.isfinite(value) and value >= 0):
      cli.fail(f'--{name}={value}; allowed: a finite number >= 0')
  # Every learning rate with every seed: (seed, learning rate) of each run.
  runs = [(seed, rate) for rate in rates for seed in range(_SEEDS.value)]
  # The same data for every run (like a sweep over one prepared dataset); 5 clients of
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
    for _ in runs
  ]
  with tempfile.TemporaryDirectory() as root:
    # Warm-up: compile the client programs of each learning rate once so both sides measure
    # steady work.
    for rate in rates:
      run_experiment(_config(99, rate), os.path.join(root, f'warmup{rate}'), dataset=data[0])
    # ... and the sweep's shared programs (other seeds: the same programs, whose learning rates
    # are arguments with the vmap backend), so that neither side times a compilation the other
    # does not.
    run_experiments_lockstep(
      [_config(99 + seed, rate) for seed, rate in runs],
      [os.path.join(root, f'warmup_lock{i}') for i in range(len(runs))],
      datasets=data,
    )
    start = time.perf_counter()
    for i, (seed, rate) in enumerate(runs):
      run_experiment(_config(seed, rate), os.path.join(root, f'seq{i}'), dataset=data[i])
    sequential = time.perf_counter() - start
    start = time.perf_counter()
    summaries = run_experiments_lockstep(
      [_config(seed, rate) for seed, rate in runs],
      [os.path.join(root, f'lock{i}') for i in range(len(runs))],
      datasets=data,
    )
    lockstep = time.perf_counter() - start
    pairs = [
      (_metrics(os.path.join(root, f'seq{i}')), _metrics(os.path.join(root, f'lock{i}')))
      for i in range(len(runs))
    ]
  identical = all(a == b for a, b in pairs)
  differences = [_differences(a, b) for a, b in pairs]
  relative = accuracy = None
  if None not in differences:
    relative = max(d[0] for d in differences if d is not None)
    accuracy = max(d[1] for d in differences if d is not None)
  info = summaries[0]['host']['lockstep']
  record = {
    'case': 'fedcompass_cross_silo_' + ('learning_rates' if len(rates) > 1 else 'seeds'),
    'model': _MODEL.value,
    'backend': _BACKEND.value,
    'seeds': _SEEDS.value,
    'learning_rates': rates,
    'runs': len(runs),
    'versions': _VERSIONS.value,
    'sequential_s': round(sequential, 2),
    'lockstep_s': round(lockstep, 2),
    'speedup': round(sequential / lockstep, 2),
    'execution': info['execution'],
    'batch_groups': info.get('batch_groups'),
    'mean_shared_batch_size': info.get('mean_shared_batch_size'),
    'identical_metrics': identical,
    'max_relative_difference': relative,
    'max_accuracy_difference': accuracy,
  }
  line = json.dumps(record)
  print(line)
  if _OUTPUT.value:
    try:
      os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
      with open(_OUTPUT.value, 'a', encoding='utf-8') as output:
        output.write(line + '\n')
    except OSError as error:
      cli.fail(f'--output={_OUTPUT.value}: {error.strerror or error}')
  batch = info.get('mean_shared_batch_size')
  print(
    f'| runs (seeds x rates) | model | sequential s | lockstep s | speed-up | execution '
    f'| mean shared batch | identical |\n|---:|---|---:|---:|---:|---|---:|---|\n'
    f'| {len(runs)} ({_SEEDS.value} x {len(rates)}) | {_MODEL.value} | {sequential:.1f} '
    f'| {lockstep:.1f} | {sequential / lockstep:.2f}x | {info["execution"]} '
    f'| {"-" if batch is None else f"{batch:.1f}"} | {identical} |'
  )
  if relative is None or accuracy is None:
    print('metrics differ: the lockstep runs scheduled other versions, times or updates')
    raise SystemExit(1)
  if relative > _RTOL.value or accuracy > _ACCURACY_TOLERANCE.value:
    print(
      f'metrics differ: largest relative difference {relative:.3g} (--rtol={_RTOL.value}), '
      f'largest accuracy difference {accuracy:.3g} '
      f'(--accuracy_tolerance={_ACCURACY_TOLERANCE.value})'
    )
    raise SystemExit(1)


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
