"""Mean executed batch size of deferred execution for FedBuff, per latency model.

  .venv/bin/python benchmarks/async_batch_size.py

Training is switched off (`NoTrainingExecutor`): how tasks group into batches depends only on
scheduling, so the figures hold for any model. 1,000 clients of 60 examples, 100 in flight,
10 local steps, 20,000 client updates. Prints a markdown table.
"""

import jax.numpy as jnp
import numpy as np
import optax

from fedsim_jax.executor import NoTrainingExecutor
from fedsim_jax.runtime import Simulation, StopCondition
from fedsim_jax.runtime.latency.registry import make_latency
from fedsim_jax.strategy import AsynchronousScheduler, LocalWork, count_mean, server_update

NUM_CLIENTS, CONCURRENCY, UPDATES = 1000, 100, 20_000
CASES = [
  ('per_step', 'homogeneous, 5% jitter', dict(distribution='homogeneous', jitter=0.05)),
  ('per_step', 'normal (0.3), 5% jitter', dict(distribution='normal', jitter=0.05)),
  ('per_step', 'exponential, 5% jitter', dict(distribution='exponential', jitter=0.05)),
  ('lognormal', 'per_example', dict(model='per_example')),
  ('device_ratio', 'ratio 5', dict(fastest_step_time=0.1, ratio=5.0)),
  ('fedscale', 'synthetic profiles', {}),
]


def main():
  params = {'w': jnp.zeros(3)}
  sizes = np.full(NUM_CLIENTS, 60)
  print('| latency model | setting | K = 10 | K = 20 |')
  print('|---|---|---:|---:|')
  for name, label, settings in CASES:
    cells = []
    for buffer_size in (10, 20):
      latency = make_latency(
        name,
        num_clients=NUM_CLIENTS,
        rng=np.random.default_rng(0),
        client_sizes=sizes,
        batch_size=32,
        model_bytes=800_000,
        **settings,
      )
      sim = Simulation(
        executor=NoTrainingExecutor(params),
        scheduler=AsynchronousScheduler(CONCURRENCY, buffer_size, LocalWork(steps=10)),
        aggregator=server_update(optax.sgd(1.0), count_mean()),
        latency=latency,
        init_params=params,
        client_sizes=sizes,
        rng=np.random.default_rng(1),
      )
      sim.run(StopCondition(max_client_updates=UPDATES))
      cells.append(f'{sim.report()["mean_executed_batch_size"]:.1f}')
    print(f'| {name} | {label} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
  main()
