"""One SGD step of the MNIST CNN, JAX against PyTorch, with nothing around it.

  .venv/bin/python benchmarks/cnn_step.py [--framework=jax|torch] [--streams=1] [--steps=300]
  XLA_FLAGS=--xla_cpu_use_onednn=true .venv/bin/python benchmarks/cnn_step.py
  taskset -c 0 .venv/bin/python benchmarks/cnn_step.py --framework=torch --torch_threads=1

The harness's sync_cnn case (`make bench`) times whole federated rounds; this times the step
alone, on one fixed batch of 32 (mnist_cnn, 582,026 parameters; its PyTorch twin from the
harness), to separate the step's cost from fedsim's path around it. `--streams=N` runs N step
loops at once from N host threads, as the loop backend runs N tasks (JAX only). Prints one line
of client examples/s.
"""

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.models import get_model

_FRAMEWORK = flags.DEFINE_enum('framework', 'jax', ['jax', 'torch'], 'Which step to time.')
_STREAMS = flags.DEFINE_integer('streams', 1, 'JAX: step loops run at once from host threads.')
_STEPS = flags.DEFINE_integer('steps', 300, 'Timed steps per stream.')
_TORCH_THREADS = flags.DEFINE_integer('torch_threads', 0, 'torch.set_num_threads (0: cores).')

BATCH, LEARNING_RATE = 32, 0.01


def _batch() -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(0)
  return rng.integers(0, 256, (BATCH, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, BATCH)


def jax_examples_per_second(streams: int, steps: int) -> float:
  model = get_model('mnist_cnn', (28, 28, 1), 10)
  optimizer = optax.sgd(LEARNING_RATE)
  x, y = (jnp.asarray(a) for a in _batch())

  @jax.jit
  def step(params, opt_state):
    grads = jax.grad(model.loss)(params, x, y.astype(jnp.int32), jnp.ones(BATCH))
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  params = model.init(jax.random.PRNGKey(0))
  jax.block_until_ready(step(params, optimizer.init(params)))  # compile

  def loop() -> None:
    state = (params, optimizer.init(params))
    for _ in range(steps):
      state = step(*state)
    jax.block_until_ready(state)

  threads = [threading.Thread(target=loop) for _ in range(streams)]
  start = time.perf_counter()
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  return streams * steps * BATCH / (time.perf_counter() - start)


def torch_examples_per_second(steps: int, threads: int) -> float:
  import torch
  from harness_lib import raise_malloc_mmap_threshold, torch_modules  # this script's directory

  from fedsim_jax.executor.choice import cpu_cores

  raise_malloc_mmap_threshold()
  torch.set_num_threads(threads or cpu_cores())
  _, make_model = torch_modules()
  model = make_model('mnist_cnn')
  optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
  x, y = _batch()
  x = torch.from_numpy(x).permute(0, 3, 1, 2).float().div_(255.0).contiguous()
  y = torch.from_numpy(y.astype(np.int64))

  def one_step() -> None:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()

  for _ in range(5):
    one_step()
  start = time.perf_counter()
  for _ in range(steps):
    one_step()
  return steps * BATCH / (time.perf_counter() - start)


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments {argv[1:]}; allowed: flags only')
  if _STREAMS.value < 1 or _STEPS.value < 1 or _TORCH_THREADS.value < 0:
    cli.fail('--streams and --steps must be >= 1, --torch_threads >= 0')
  if _FRAMEWORK.value == 'jax':
    rate = jax_examples_per_second(_STREAMS.value, _STEPS.value)
    print(f'jax, {_STREAMS.value} stream(s): {rate:,.0f} examples/s')
  else:
    rate = torch_examples_per_second(_STEPS.value, _TORCH_THREADS.value)
    print(f'torch: {rate:,.0f} examples/s')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
