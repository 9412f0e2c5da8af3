"""Where the synchronous MLP round stands against what the machine can do with B=32 steps.

  .venv/bin/python benchmarks/sync_round_profile.py [--repeats=3] [--output=profile.jsonl]

`make bench`'s sync_mlp case compares fedsim's round (100 clients x 10 steps x B=32, MLP
784-200-200-10) with a centralized roofline that trains on batches of 1,024. This script
measures, in one process and interleaved (each figure the best of `--repeats`):

- `roofline_b1024`: the harness's roofline (host-driven steps of B=1024 over all cores);
- `roofline_b32`: the same with the clients' batch, B=32, one step at a time;
- `two_streams_b32`: two independent B=32 trainings at once, one per thread (each its own
  parameters): the most that one task per core (the loop backend's default) could reach
  with steps of the clients' size; `two_streams_b32_scan10` the same with each call running
  10 steps as one compiled program (`lax.scan`), as a fedsim task does;
- `fedsim_loop`, `fedsim_loop_1thread`: the harness's fedsim rounds (loop backend, one task per
  core or one at a time), with the share of the round spent inside the executor (training,
  and the running sum of the round's deltas) and outside it (scheduling, sampling, the server
  step, Python).

Prints one JSON line per figure and a table of each figure against `roofline_b1024` and
`two_streams_b32`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from typing import Any

from absl import app, flags

from fedsim_jax import cli

_REPEATS = flags.DEFINE_integer('repeats', 3, 'Measurements of each figure (best kept).')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the JSON lines to this file.')
_SECONDS = flags.DEFINE_float('seconds', 8.0, 'Host seconds each measurement runs at least.')


def _step(model: Any, batch: int) -> Any:
  """One SGD step of B=`batch` on rows of the whole training set, and its optimizer."""
  import jax
  import jax.numpy as jnp
  import optax

  from benchmarks.harness_lib import CLIENT_LEARNING_RATE

  optimizer = optax.sgd(CLIENT_LEARNING_RATE)

  def step(params, opt_state, x_all, y_all, rows):
    x, y = x_all[rows], y_all[rows]
    loss, grads = jax.value_and_grad(model.loss)(params, x, y, jnp.ones(batch))
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  return step, optimizer


def _compiled_steps(model: Any, batch: int, steps: int) -> Any:
  """A compiled program of one step, or of `steps` steps (`lax.scan`, as a fedsim task runs
  its local steps), with fedsim's XLA options."""
  import jax

  from benchmarks.harness_lib import fedsim_jit

  step, optimizer = _step(model, batch)
  if steps == 1:
    return fedsim_jit(step, donate_argnums=(0, 1)), optimizer

  def run(params, opt_state, x_all, y_all, rows):
    def body(carry, r):
      return step(carry[0], carry[1], x_all, y_all, r), None

    first = step(params, opt_state, x_all, y_all, rows[0])
    (params, opt_state, loss), _ = jax.lax.scan(body, first, rows[1:])
    return params, opt_state, loss

  return fedsim_jit(run, donate_argnums=(0, 1)), optimizer


def _streams(
  model: Any, fed: Any, batch: int, streams: int, seconds: float, scan_steps: int = 1
) -> float:
  """Examples/s of `streams` independent trainings with steps of `batch`, one per thread;
  with `scan_steps` > 1, each call runs that many steps as one compiled program."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  step, optimizer = _compiled_steps(model, batch, scan_steps)
  x_all, y_all = jnp.asarray(fed.train_x), jnp.asarray(fed.train_y)
  shape = (4096, scan_steps, batch) if scan_steps > 1 else (4096, batch)
  rows = np.random.default_rng(0).integers(0, len(fed.train_y), shape).astype(np.int32)
  states = []
  for i in range(streams):
    params = model.init(jax.random.PRNGKey(i))
    states.append([params, optimizer.init(params)])
  for state in states:  # compile and warm up
    state[0], state[1], _ = step(state[0], state[1], x_all, y_all, rows[0])
  jax.block_until_ready([s[0] for s in states])
  counts = [0] * streams
  stop = time.perf_counter() + seconds

  def run(i: int) -> None:
    state = states[i]
    while time.perf_counter() < stop:
      for s in range(50):
        state[0], state[1], _ = step(state[0], state[1], x_all, y_all, rows[s % len(rows)])
      jax.block_until_ready(state[0])
      counts[i] += 50 * scan_steps

  start = time.perf_counter()
  threads = [threading.Thread(target=run, args=(i,)) for i in range(streams)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  return sum(counts) * batch / (time.perf_counter() - start)


def _fedsim_round(strategy: str, fed: Any, model: Any, sizes: Any, seconds: float) -> dict:
  """The harness's fedsim round, with the time inside the executor (`Executor.run`, or
  `Executor.add_weighted_sum`, which trains a round summing as it goes) measured."""
  import jax
  import optax

  from benchmarks import harness_lib as h
  from fedsim_jax.client.local_update import sgd_client_update
  from fedsim_jax.runtime import StopCondition
  from fedsim_jax.strategy import LocalWork

  client_update = sgd_client_update(model, optax.sgd(h.CLIENT_LEARNING_RATE), sizes.batch_size)
  executor = h.fedsim_executor(strategy, client_update, fed)
  inside = [0.0]

  def timed(method: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
      start = time.perf_counter()
      result = method(*args, **kwargs)
      jax.block_until_ready(result)
      inside[0] += time.perf_counter() - start
      return result

    return call

  executor.run = timed(executor.run)  # type: ignore[method-assign]
  executor.add_weighted_sum = timed(executor.add_weighted_sum)  # type: ignore[method-assign]
  sim = h.fedavg_simulation(
    executor,
    fed,
    model,
    sizes.clients_per_round,
    LocalWork(steps=sizes.local_steps, batch_size=sizes.batch_size),
  )
  sim.run(StopCondition(max_versions=sim.version + 1))  # warm-up (compiles)
  jax.block_until_ready(sim.params)
  inside[0] = 0.0
  steps, start = sim.gradient_steps, time.perf_counter()
  while time.perf_counter() - start < seconds:
    sim.run(StopCondition(max_versions=sim.version + 1))
    jax.block_until_ready(sim.params)
  elapsed = time.perf_counter() - start
  return {
    'examples_per_s': (sim.gradient_steps - steps) * sizes.batch_size / elapsed,
    'training_share': inside[0] / elapsed,
  }


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {argv[1:]}')
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import jax

  from benchmarks import harness_lib as h
  from fedsim_jax.models import get_model

  cli.quiet_logging()
  sizes = h.FULL_SIZES['sync_mlp']
  fed = h.federation(sizes.num_clients, sizes.min_size, sizes.max_size)
  model = get_model(sizes.model, h.IMAGE_SHAPE, h.NUM_CLASSES)
  seconds = _SECONDS.value
  b32 = dataclasses.replace(sizes, roofline_batch=sizes.batch_size, min_seconds=seconds)
  b1024 = dataclasses.replace(sizes, min_seconds=seconds)
  figures: dict[str, list[dict[str, Any]]] = {}

  def record(name: str, value: dict[str, Any]) -> None:
    figures.setdefault(name, []).append(value)

  for _ in range(_REPEATS.value):
    record(
      'roofline_b1024',
      {'examples_per_s': h._roofline('sync_mlp', fed, model, b1024)['examples_per_s']},
    )
    record(
      'roofline_b32', {'examples_per_s': h._roofline('sync_mlp', fed, model, b32)['examples_per_s']}
    )
    record(
      'two_streams_b32', {'examples_per_s': _streams(model, fed, sizes.batch_size, 2, seconds)}
    )
    scan = _streams(model, fed, sizes.batch_size, 2, seconds, scan_steps=sizes.local_steps)
    record('two_streams_b32_scan10', {'examples_per_s': scan})
    record('fedsim_loop', _fedsim_round('fedsim_loop', fed, model, sizes, seconds))
    record('fedsim_loop_1thread', _fedsim_round('fedsim_loop_1thread', fed, model, sizes, seconds))
  best = {name: max(values, key=lambda v: v['examples_per_s']) for name, values in figures.items()}
  lines = []
  for name, value in best.items():
    line = {
      'figure': name,
      **value,
      'all_examples_per_s': [round(v['examples_per_s']) for v in figures[name]],
      'device': str(jax.devices()[0]),
    }
    lines.append(json.dumps(line))
    print(lines[-1])
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w', encoding='utf-8') as f:
      f.write('\n'.join(lines) + '\n')
  roof, streams = (
    best['roofline_b1024']['examples_per_s'],
    best['two_streams_b32']['examples_per_s'],
  )
  print('\n| figure | examples/s | / roofline B=1024 | / two B=32 streams | training share |')
  print('|---|---:|---:|---:|---:|')
  for name, value in best.items():
    share = value.get('training_share')
    print(
      f'| {name} | {value["examples_per_s"]:,.0f} | {value["examples_per_s"] / roof:.2f}x | '
      f'{value["examples_per_s"] / streams:.2f}x | {"-" if share is None else f"{share:.0%}"} |'
    )


if __name__ == '__main__':
  app.run(main)
