"""What per-client evaluation costs against one central evaluation of as many examples.

  .venv/bin/python benchmarks/client_evaluation.py --data_dir=data --clients=1000

Builds the Fashion-MNIST federation of `--clients` clients (Dirichlet 0.5) with
`data.client_test='label_matched'` (10 test examples per client by default), and times, after a
warm-up call each, (1) the central evaluator on the same number of test examples and (2) the
per-client evaluator on every client, medians over `--repeats` calls; optionally (3) with
personalization (`--personalization_steps`). Prints one JSON line and a markdown table. The unit
tests assert no times; this is where the cost is measured.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags

from fedsim_jax import cli

_DATA_DIR = flags.DEFINE_string('data_dir', 'data', 'Prepared-datasets directory.')
_CLIENTS = flags.DEFINE_integer('clients', 1000, 'Clients of the federation.')
_EXAMPLES = flags.DEFINE_integer('examples', 10, 'Test examples per client (label-matched).')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed calls of each evaluator.')
_STEPS = flags.DEFINE_integer('personalization_steps', 0, 'Also time fine-tuning with k steps.')


def _median_seconds(call, repeats: int) -> float:
  call()  # warm-up: compilation
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  import jax

  from fedsim_jax.build import build_run
  from fedsim_jax.config import fashion_mnist_config
  from fedsim_jax.metrics import make_evaluator

  config = fashion_mnist_config('fedavg', cohort_size=10)
  config.data.data_dir = _DATA_DIR.value
  config.data.num_clients = _CLIENTS.value
  config.data.client_test = 'label_matched'
  config.data.client_test_examples = _EXAMPLES.value
  config.run.eval_personalization_steps = _STEPS.value
  config.run.tensorboard = False
  built = build_run(config)
  params = built.parts.simulation.params
  test = built.parts.dataset.client_test
  per_client = built.parts.client_evaluate
  count = len(test.y)
  central = make_evaluator(built.model, test.x, test.y, config.run.eval_batch_size)
  timings = {
    'central': _median_seconds(lambda: jax.block_until_ready(central(params)), _REPEATS.value),
    'per_client': _median_seconds(lambda: per_client(params, 0), _REPEATS.value),
  }
  result = {
    'clients': _CLIENTS.value,
    'examples': count,
    'personalization_steps': _STEPS.value,
    'seconds': timings,
    'ratio': timings['per_client'] / timings['central'],
  }
  print(json.dumps(result))
  label = 'per-client' + (f' with {_STEPS.value} fine-tuning steps' if _STEPS.value else '')
  print('| evaluation | examples | ms (median) |')
  print('|---|---:|---:|')
  print(f'| central | {count:,} | {1e3 * timings["central"]:.1f} |')
  print(f'| {label}, {_CLIENTS.value:,} clients | {count:,} | {1e3 * timings["per_client"]:.1f} |')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
