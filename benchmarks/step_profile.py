"""Where a client task's time goes: the sync MLP case taken apart.

  .venv/bin/python benchmarks/step_profile.py [--repeats=200]

The harness's sync MLP case (`make bench`) trains 100 clients x 10 steps x B = 32 of the
784-200-200-10 MLP. This script times, on the same synthetic federation, one jitted client
task and its parts, per local step:

  task            `run_local_training`: 10 steps in `lax.scan`, batches sampled on device
                  (the loop backend's per-task program), shuffle / with-replacement sampling.
  batch sampling  `client_batch` alone (the epoch permutation and the gather).
  step, fixed     10 SGD steps on one fixed batch in `lax.scan` (no sampling, no masking).
  step, B=1024    one SGD step on 1,024 examples: the roofline's step, per 32 examples.

Prints a markdown table of microseconds per local step (per 32 examples) and examples/s.
"""

import time

import jax
import jax.numpy as jnp
import optax
from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.client.local_update import sgd_client_update
from fedsim_jax.client.runner import run_local_training
from fedsim_jax.data.federated import client_batch
from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.models import get_model

_REPEATS = flags.DEFINE_integer('repeats', 200, 'Timed calls per measurement.')

STEPS, BATCH = 10, 32


def _time_per_call(fn, *args) -> float:
  jax.block_until_ready(fn(*args))  # compile
  start = time.perf_counter()
  for _ in range(_REPEATS.value):
    out = fn(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - start) / _REPEATS.value


def main(argv):
  cli.quiet_logging()
  if len(argv) > 1:
    cli.fail(f'unexpected arguments {argv[1:]}; allowed: flags only')
  if _REPEATS.value < 1:
    cli.fail(f'--repeats={_REPEATS.value}; allowed: an integer >= 1')
  fed = toy_federation(
    num_clients=100, num_classes=10, image_shape=(28, 28, 1), min_size=64, max_size=128
  )
  data = fed.device_arrays()
  model = get_model('mlp', (28, 28, 1), 10)
  params = model.init(jax.random.PRNGKey(0))
  update = sgd_client_update(model, optax.sgd(0.05), BATCH)
  key = jax.random.PRNGKey(1)
  rows = []
  for sampling in ('shuffle', 'with_replacement'):
    task = jax.jit(
      lambda p, c, s=sampling: run_local_training(
        update, data, p, c, STEPS, key, max_steps=STEPS, sampling=s
      )
    )
    rows.append((f'task, {sampling} sampling', _time_per_call(task, params, 3) / STEPS))
  sample = jax.jit(lambda c, s: client_batch(data, c, s, key, BATCH))
  rows.append(('batch sampling alone (shuffle)', _time_per_call(sample, 3, 2)))
  x, y, w = client_batch(data, 3, 2, key, BATCH)

  def fixed_steps(p):
    def body(p, _):
      g = jax.grad(model.loss)(p, x, y, w)
      return jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g), None

    return jax.lax.scan(body, p, None, length=STEPS)[0]

  rows.append(
    ('SGD step on a fixed batch (scan)', _time_per_call(jax.jit(fixed_steps), params) / STEPS)
  )
  big = [jnp.concatenate([a] * (1024 // BATCH)) for a in (x, y, w)]
  large_step = jax.jit(lambda p: jax.grad(model.loss)(p, *big))
  rows.append(
    ('SGD step at B = 1024, per 32 examples', _time_per_call(large_step, params) * BATCH / 1024)
  )
  print('| part | us per local step (32 examples) | examples/s |')
  print('|---|---:|---:|')
  for name, seconds in rows:
    print(f'| {name} | {seconds * 1e6:,.0f} | {BATCH / seconds:,.0f} |')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
