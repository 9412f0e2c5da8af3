"""One SGD step of the MNIST CNN, JAX against PyTorch, with nothing around it.

  .venv/bin/python benchmarks/cnn_step.py [--framework=jax|torch] [--streams=1] [--steps=300]
  .venv/bin/python benchmarks/cnn_step.py --xla_options=jax     # jaxlib's default XLA options
  .venv/bin/python benchmarks/cnn_step.py --profile              # time per XLA operation
  taskset -c 0 .venv/bin/python benchmarks/cnn_step.py --framework=torch --torch_threads=1

The harness's sync_cnn case (`make bench`) times whole federated rounds; this times the step
alone, on one fixed batch of 32 (mnist_cnn, 582,026 parameters; its PyTorch twin from the
harness), to separate the step's cost from fedsim's path around it. `--streams=N` runs N step
loops at once from N host threads, as the loop backend runs N tasks (JAX only). Prints one line
of client examples/s. The JAX step is compiled with fedsim's XLA options
(`executor.choice.compiler_options`) unless `--xla_options=jax`. `--profile` traces the steps
with `jax.profiler` and prints, per XLA operation of the step, its time per step (summed over
XLA's threads) and the model operation it computes.
"""

import collections
import pathlib
import re
import tempfile
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags

from fedsim_jax import cli
from fedsim_jax.executor import choice
from fedsim_jax.models import get_model

_FRAMEWORK = flags.DEFINE_enum('framework', 'jax', ['jax', 'torch'], 'Which step to time.')
_STREAMS = flags.DEFINE_integer('streams', 1, 'JAX: step loops run at once from host threads.')
_STEPS = flags.DEFINE_integer('steps', 300, 'Timed steps per stream.')
_TORCH_THREADS = flags.DEFINE_integer('torch_threads', 0, 'torch.set_num_threads (0: cores).')
_XLA_OPTIONS = flags.DEFINE_enum(
  'xla_options', 'fedsim', ['fedsim', 'jax'], "JAX: fedsim's XLA options or jaxlib's defaults."
)
_PROFILE = flags.DEFINE_bool('profile', False, 'JAX: print the time per XLA operation.')

BATCH, LEARNING_RATE = 32, 0.01


def _batch() -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(0)
  return rng.integers(0, 256, (BATCH, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, BATCH)


def _jax_step(xla_options: str):
  """The jitted SGD step and its first state."""
  model = get_model('mnist_cnn', (28, 28, 1), 10)
  optimizer = optax.sgd(LEARNING_RATE)
  x, y = (jnp.asarray(a) for a in _batch())

  def step(params, opt_state):
    grads = jax.grad(model.loss)(params, x, y.astype(jnp.int32), jnp.ones(BATCH))
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  step = choice.jit(step) if xla_options == 'fedsim' else jax.jit(step)
  params = model.init(jax.random.PRNGKey(0))
  state = (params, optimizer.init(params))
  jax.block_until_ready(step(*state))  # compile
  return step, state


def jax_examples_per_second(streams: int, steps: int, xla_options: str) -> float:
  step, first_state = _jax_step(xla_options)

  def loop() -> None:
    state = first_state
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


def jax_profile(steps: int, xla_options: str) -> str:
  """Markdown: each XLA operation's time per step, longest first, with what it computes."""
  step, state = _jax_step(xla_options)
  # What each operation computes: the model operation named in its HLO metadata.
  computes = {}
  for line in step.lower(*state).compile().as_text().splitlines():
    found = re.match(r'\s*(?:ROOT )?%?([\w.-]+) = .*op_name="jit\(step\)/([^"]+)"', line)
    if found:
      computes[found.group(1)] = found.group(2)
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      start = time.perf_counter()
      for _ in range(steps):
        state = step(*state)
      jax.block_until_ready(state)
      wall = (time.perf_counter() - start) / steps * 1e6
    (path,) = [str(p) for p in pathlib.Path(trace_dir).rglob('*.xplane.pb')]
    profile = jax.profiler.ProfileData.from_file(path)
  per_op = collections.Counter()
  for plane in profile.planes:
    for line in plane.lines:
      if line.name.startswith('tf_XLA'):  # XLA:CPU's threads: one event per operation run
        for event in line.events:
          if event.name in computes:
            per_op[event.name] += event.duration_ns / 1e3 / steps
  rows = ['| XLA operation | computes | us per step |', '|---|---|---:|']
  for name, micros in per_op.most_common(12):
    rows.append(f'| {name} | {computes[name]} | {micros:,.0f} |')
  rows.append(f'| all operations | | {sum(per_op.values()):,.0f} |')
  rows.append(f'| wall time (profiler running) | | {wall:,.0f} |')
  return '\n'.join(rows)


def torch_examples_per_second(steps: int, threads: int) -> float:
  import torch
  from harness_lib import raise_malloc_mmap_threshold, torch_modules  # this script's directory

  raise_malloc_mmap_threshold()
  torch.set_num_threads(threads or choice.cpu_cores())
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
  if _PROFILE.value:
    print(jax_profile(_STEPS.value, _XLA_OPTIONS.value))
  elif _FRAMEWORK.value == 'jax':
    rate = jax_examples_per_second(_STREAMS.value, _STEPS.value, _XLA_OPTIONS.value)
    print(f'jax, {_STREAMS.value} stream(s): {rate:,.0f} examples/s')
  else:
    rate = torch_examples_per_second(_STEPS.value, _TORCH_THREADS.value)
    print(f'torch: {rate:,.0f} examples/s')


if __name__ == '__main__':
  app.run(main, flags_parser=cli.parse_flags)
