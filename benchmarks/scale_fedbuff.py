"""FedBuff at federated-EMNIST scale: 3,400 clients, 100,000 client updates, one command.

  .venv/bin/python benchmarks/scale_fedbuff.py [--updates=100000] [--clients=3400] [--lazy]
      [--concurrency=100] [--min_size=100 --max_size=300] [--max_batch_tasks=0]

The federation is synthetic and shaped like federated EMNIST (Caldas et al. 2018; Reddi et al.
2021): 3,400 clients of 28x28x1 uint8 images over 62 classes, client sizes uniform in
[100, 300] (about 200 on average, 680k examples in all), labels learnable (each class lights
one pixel). FedBuff (Nguyen et al. 2022): concurrency 100, buffer K = 10, deltas scaled by
1/sqrt(1 + staleness) (their choice; unscaled, 10-version-stale deltas at server step 1.0 did
not learn), server SGD at 0.5, per-step latency N(1, 0.3^2) with 5% jitter, each task 10 local
steps of B = 20 (about one epoch). The model is the 784-200-200-62 MLP: on this CPU the EMNIST CNN would take hours for
100k updates. The executor uses the default backend and thread rules (`executor.choice`), or
`--backend`.

Prints one JSON line and a markdown row: host seconds (setup, simulation, evaluation), client
updates and examples per second, server versions, peak RSS (the process's maximum resident
set size: on CPU, device memory is host memory) and the final test accuracy.
"""

import json
import resource
import time

import jax
import numpy as np
import optax
from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.client.local_update import sgd_client_update
from fedsim_jax.data.federated import FederatedDataset
from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.executor import Executor
from fedsim_jax.executor.choice import resolve_execution, resolve_threads
from fedsim_jax.metrics import make_evaluator
from fedsim_jax.models import get_model
from fedsim_jax.runtime import PerStepLatency, Simulation, StopCondition
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  count_mean,
  make_staleness,
  server_update,
  staleness_scaled,
)

_UPDATES = flags.DEFINE_integer('updates', 100_000, 'Client updates to simulate.')
_CLIENTS = flags.DEFINE_integer('clients', 3400, 'Clients in the federation.')
_CONCURRENCY = flags.DEFINE_integer('concurrency', 100, 'FedBuff: tasks in flight.')
_BUFFER = flags.DEFINE_integer('buffer_size', 10, 'FedBuff: K.')
_SERVER_LR = flags.DEFINE_float('server_learning_rate', 0.5, 'FedBuff: server SGD step.')
_BACKEND = flags.DEFINE_enum('backend', 'auto', ['auto', 'vmap', 'loop'], 'Executor backend.')
_LAZY = flags.DEFINE_bool('lazy', False, 'Keep examples on the host (LazyFederation).')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of data, model and scheduling.')
_MIN_SIZE = flags.DEFINE_integer('min_size', 100, 'Fewest examples of a client.')
_MAX_SIZE = flags.DEFINE_integer('max_size', 300, 'Most examples of a client.')
_MAX_BATCH_TASKS = flags.DEFINE_integer(
  'max_batch_tasks', 0, 'Simulation(max_batch_tasks=): 0 = automatic, -1 = no limit.'
)

NUM_CLASSES, IMAGE_SHAPE, NUM_TEST = 62, (28, 28, 1), 10_000
LOCAL_STEPS, BATCH_SIZE, LEARNING_RATE = 10, 20, 0.05


def emnist_shaped(
  num_clients: int, seed: int, lazy: bool, min_size: int = 100, max_size: int = 300
):
  """The synthetic federation (built in uint8 throughout: 680k images are 533 MB)."""
  rng = np.random.default_rng(seed)
  sizes = rng.integers(min_size, max_size + 1, num_clients)
  total = int(sizes.sum())
  y = rng.integers(0, NUM_CLASSES, total + NUM_TEST).astype(np.int32)
  x = rng.integers(0, 60, (total + NUM_TEST, *IMAGE_SHAPE), dtype=np.uint8)
  x.reshape(len(x), -1)[np.arange(len(x)), y] = 255
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  parts = [np.arange(bounds[c], bounds[c + 1]) for c in range(num_clients)]
  cls = LazyFederation if lazy else FederatedDataset
  return cls.from_partition(
    'emnist_shaped', x[:total], y[:total], parts, x[total:], y[total:], NUM_CLASSES
  )


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv):
  cli.quiet_logging()
  if len(argv) > 1:
    cli.fail(f'unexpected arguments {argv[1:]}; allowed: flags only')
  for name, flag in (
    ('updates', _UPDATES),
    ('clients', _CLIENTS),
    ('concurrency', _CONCURRENCY),
    ('buffer_size', _BUFFER),
  ):
    if flag.value < 1:
      cli.fail(f'--{name}={flag.value}; allowed: an integer >= 1')
  if _CONCURRENCY.value > _CLIENTS.value:
    cli.fail(f'--concurrency={_CONCURRENCY.value}; allowed: at most --clients')
  if not BATCH_SIZE <= _MIN_SIZE.value <= _MAX_SIZE.value:
    cli.fail(
      f'--min_size, --max_size={_MIN_SIZE.value}, {_MAX_SIZE.value}; allowed: '
      f'{BATCH_SIZE} <= min_size <= max_size'
    )
  if _MAX_BATCH_TASKS.value < -1:
    cli.fail(f'--max_batch_tasks={_MAX_BATCH_TASKS.value}; allowed: -1, 0 or a positive integer')
  start = time.perf_counter()
  fed = emnist_shaped(_CLIENTS.value, _SEED.value, _LAZY.value, _MIN_SIZE.value, _MAX_SIZE.value)
  model = get_model('mlp', IMAGE_SHAPE, NUM_CLASSES)
  params = model.init(jax.random.PRNGKey(_SEED.value))
  backend, step_loop = resolve_execution(_BACKEND.value, 'auto')
  client_update = sgd_client_update(model, optax.sgd(LEARNING_RATE), BATCH_SIZE)
  data = fed if _LAZY.value else fed.device_arrays()  # a LazyFederation gathers per batch
  executor = Executor(
    client_update,
    data,
    jax.random.PRNGKey(_SEED.value + 1),
    backend=backend,
    step_loop=step_loop,
    threads=resolve_threads(0, backend),
  )
  sim = Simulation(
    executor=executor,
    scheduler=AsynchronousScheduler(
      _CONCURRENCY.value, _BUFFER.value, LocalWork(steps=LOCAL_STEPS, batch_size=BATCH_SIZE)
    ),
    aggregator=server_update(
      optax.sgd(_SERVER_LR.value),
      staleness_scaled(count_mean(), make_staleness('polynomial', a=0.5)),
    ),
    latency=PerStepLatency(
      fed.num_clients, np.random.default_rng(_SEED.value), distribution='normal', jitter=0.05
    ),
    init_params=params,
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(_SEED.value + 2),
    max_batch_tasks=None if _MAX_BATCH_TASKS.value == -1 else _MAX_BATCH_TASKS.value,
  )
  setup_s = time.perf_counter() - start
  setup_rss_mb = peak_rss_mb()  # the federation, its device copy and the model
  start = time.perf_counter()
  sim.run(StopCondition(max_client_updates=_UPDATES.value))
  simulate_s = time.perf_counter() - start
  start = time.perf_counter()
  accuracy = make_evaluator(model, fed.test_x, fed.test_y)(sim.params)['accuracy']
  evaluate_s = time.perf_counter() - start
  report = sim.report()
  record = {
    'clients': fed.num_clients,
    'examples': int(fed.client_sizes.sum()),
    'client_updates': sim.client_updates,
    'server_versions': sim.version,
    'virtual_time_s': round(sim.now, 1),
    'backend': backend,
    'threads': executor.threads,
    'lazy': _LAZY.value,
    'concurrency': _CONCURRENCY.value,
    'max_batch_tasks': sim.max_batch_tasks,
    'setup_s': round(setup_s, 1),
    'simulate_s': round(simulate_s, 1),
    'evaluate_s': round(evaluate_s, 1),
    'updates_per_s': round(sim.client_updates / simulate_s, 1),
    'examples_per_s': round(sim.gradient_steps * BATCH_SIZE / simulate_s, 1),
    'mean_executed_batch_size': round(report['mean_executed_batch_size'], 1),
    'setup_peak_rss_mb': round(setup_rss_mb, 1),
    'peak_rss_mb': round(peak_rss_mb(), 1),
    'test_accuracy': round(float(accuracy), 4),
  }
  print(json.dumps(record))
  print(
    '| clients | updates | backend | host s (setup + simulate) | updates/s | examples/s '
    '| peak RSS MB | test accuracy |'
  )
  print('|---:|---:|---|---:|---:|---:|---:|---:|')
  print(
    f'| {record["clients"]:,} | {record["client_updates"]:,} | {backend}'
    f'{" (lazy)" if _LAZY.value else ""} | {setup_s:.0f} + {simulate_s:.0f} '
    f'| {record["updates_per_s"]:,.0f} | {record["examples_per_s"]:,.0f} '
    f'| {record["peak_rss_mb"]:,.0f} | {record["test_accuracy"]:.3f} |'
  )


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
