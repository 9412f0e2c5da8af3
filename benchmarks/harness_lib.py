"""The benchmark harness's cases: fedsim's backends against per-client loops and a roofline.

Every case builds one synthetic federation (28x28x1 uint8 images, 10 classes, `toy_federation`)
and one model, and measures each strategy on them in this process:

  fedsim_vmap        `Simulation` + `Executor(backend='vmap')`: one program trains the cohort.
  fedsim_loop        `Executor(backend='loop')`: one jitted program per task with `lax.scan`
                     over the local steps, one task per CPU core at once (`threads`, the
                     default on CPU).
  fedsim_loop_1thread  the same, one task at a time (`threads=1`).
  fedsim_loop_host   `Executor(backend='loop', step_loop='host')`: one jitted call per step,
                     one task per CPU core at once (`fedsim_loop_host_1thread`: one at a time).
  jax_client_loop    FedJAX's default design, written directly with jax/optax: per client,
                     jitted `client_init`, one jitted `client_step` call per host-side numpy
                     batch, jitted `client_final` (the delta), then the weighted average of the
                     deltas with `jax.tree_util.tree_map` op by op on the host.
  torch_client_loop  the design of common PyTorch FL simulators: `copy.deepcopy` of the global
                     model per client, `torch.optim.SGD` over the client's batches, the state
                     dicts averaged with the example weights and loaded back. Optional: skipped
                     when `import torch` fails. The inputs are converted to one float tensor
                     once (no `DataLoader`) and glibc's allocation thresholds are raised
                     first (`raise_malloc_mmap_threshold`), so this baseline is an optimistic
                     one.
  roofline           centralized training of the same model on batches of `roofline_batch`
                     examples (one jitted step per batch, gathered inside jit, compiled with
                     fedsim's XLA options) over the same number of examples as a round: what
                     the hardware does without federation.
  fedsim_no_training `NoTrainingExecutor`: the event loop, with zero deltas stacked and
                     aggregated as real ones would be (scheduling plus aggregation plumbing).
  fedsim_timeline    `Simulation(aggregate=False)`: the event loop and the scheduler's policy
                     alone; no update is computed, stacked or applied (timeline studies).

Figures (one record per case and strategy):
  examples_per_s  client examples (local steps x batch size, padding excluded) per second in
                  the steady state, i.e. after a warm-up unit (a round, or a chunk of updates)
                  that includes compilation.
  updates_per_s   client updates (tasks) per second, steady state (None for the roofline).
  compile_s       the warm-up unit's time minus what the same work takes at the steady rate.
  programs        programs compiled: `Executor.num_compiled_programs` for fedsim (executor
                  programs only), the jitted functions' cache sizes for the JAX baselines, None
                  for PyTorch.
  peak_rss_mb     the process's maximum resident set size after the strategy ran (MB). It only
                  grows, so `rss_growth_mb` (its increase during the strategy) is given too.
  events_per_s    scheduling case only: events handled (arrivals, dropouts and timers popped
                  from the queue, plus dispatches) per second.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import functools
import gc
import json
import resource
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedsim_jax.algorithms.fedcompass import CompassScheduler, compass_aggregator
from fedsim_jax.client.local_update import sgd_client_update
from fedsim_jax.data.federated import FederatedDataset
from fedsim_jax.data.synthetic import toy_federation
from fedsim_jax.executor import Executor, NoTrainingExecutor
from fedsim_jax.executor.choice import cpu_cores, resolve_threads
from fedsim_jax.executor.choice import jit as fedsim_jit
from fedsim_jax.models import Model, get_model
from fedsim_jax.runtime import EventQueue, PerStepLatency, Simulation, StopCondition
from fedsim_jax.strategy import (
  AsynchronousScheduler,
  LocalWork,
  SynchronousScheduler,
  count_mean,
  server_update,
)

CASES = ('sync_mlp', 'sync_cnn', 'fedbuff_mlp', 'compass_mlp', 'scheduling')
IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10
CLIENT_LEARNING_RATE = 0.05
TORCH_SKIP = 'skipped: torch not installed (make bench-setup)'
FIELDS = (
  'case',
  'strategy',
  'examples_per_s',
  'updates_per_s',
  'compile_s',
  'programs',
  'peak_rss_mb',
)
# How each fedsim strategy builds its `Executor` (threads=0: one task per CPU core at once).
FEDSIM_EXECUTORS: dict[str, dict[str, Any]] = {
  'fedsim_vmap': dict(backend='vmap'),
  'fedsim_loop': dict(backend='loop', threads=0),
  'fedsim_loop_1thread': dict(backend='loop', threads=1),
  'fedsim_loop_host': dict(backend='loop', step_loop='host', threads=0),
  'fedsim_loop_host_1thread': dict(backend='loop', step_loop='host', threads=1),
}
FEDSIM_STRATEGIES = tuple(FEDSIM_EXECUTORS)


def fedsim_executor(strategy: str, client_update: Any, fed: FederatedDataset) -> Executor:
  """The `Executor` of a fedsim strategy on `fed` (task keys from PRNGKey(1))."""
  settings = dict(FEDSIM_EXECUTORS[strategy])
  if 'threads' in settings:
    settings['threads'] = resolve_threads(settings['threads'], settings['backend'])
  return Executor(client_update, fed.device_arrays(), jax.random.PRNGKey(1), **settings)


@dataclasses.dataclass(frozen=True)
class SyncSizes:
  """Synchronous FedAvg: every round `clients_per_round` clients x `local_steps` x `batch_size`.

  The measurement runs rounds until `min_seconds` have passed (at least one round, at most
  `max_rounds`) after one warm-up round.
  """

  model: str
  num_clients: int
  clients_per_round: int
  local_steps: int
  batch_size: int
  min_size: int
  max_size: int
  roofline_batch: int
  min_seconds: float
  max_rounds: int


@dataclasses.dataclass(frozen=True)
class AsyncSizes:
  """FedBuff (`AsynchronousScheduler`) or, with `training=False`, the scheduling-only run:
  `warmup_updates`, then `measure_updates` client updates in chunks of `chunk_updates`."""

  num_clients: int
  concurrency: int
  buffer_size: int
  local_steps: int
  batch_size: int
  min_size: int
  max_size: int
  warmup_updates: int
  measure_updates: int
  chunk_updates: int


@dataclasses.dataclass(frozen=True)
class CompassSizes:
  """FedCompass cross-silo: `num_clients` silos, local steps in [q_min, q_max]."""

  num_clients: int
  q_min: int
  q_max: int
  batch_size: int
  min_size: int
  max_size: int
  warmup_updates: int
  measure_updates: int
  chunk_updates: int


# Full sizes (`make bench`): about 15-60 s per strategy on 2 CPU cores, all cases well under
# 20 minutes.
FULL_SIZES: dict[str, Any] = {
  'sync_mlp': SyncSizes(
    model='mlp',
    num_clients=100,
    clients_per_round=100,
    local_steps=10,
    batch_size=32,
    min_size=320,
    max_size=640,
    roofline_batch=1024,
    min_seconds=15.0,
    max_rounds=40,
  ),
  # The CNN trains ~20x slower inside `lax.scan` on XLA:CPU (docs/results/performance.md)
  # and slower still under vmap (per-task weights make grouped convolutions): a vmap round of
  # 100 clients would take many minutes on 2 cores, so its rounds have 4 clients.
  'sync_cnn': SyncSizes(
    model='mnist_cnn',
    num_clients=8,
    clients_per_round=4,
    local_steps=10,
    batch_size=32,
    min_size=320,
    max_size=640,
    roofline_batch=1024,
    min_seconds=15.0,
    max_rounds=20,
  ),
  'fedbuff_mlp': AsyncSizes(
    num_clients=1000,
    concurrency=100,
    buffer_size=10,
    local_steps=10,
    batch_size=32,
    min_size=64,
    max_size=128,
    warmup_updates=1000,
    measure_updates=3000,
    chunk_updates=500,
  ),
  'compass_mlp': CompassSizes(
    num_clients=5,
    q_min=20,
    q_max=100,
    batch_size=32,
    min_size=2000,
    max_size=4000,
    warmup_updates=50,
    measure_updates=200,
    chunk_updates=50,
  ),
  'scheduling': AsyncSizes(
    num_clients=1000,
    concurrency=100,
    buffer_size=10,
    local_steps=10,
    batch_size=32,
    min_size=64,
    max_size=128,
    warmup_updates=5000,
    measure_updates=100_000,
    chunk_updates=10_000,
  ),
}

# Tiny sizes for the smoke test (`--quick`): every code path, a few seconds per case.
QUICK_SIZES: dict[str, Any] = {
  'sync_mlp': SyncSizes(
    model='mlp',
    num_clients=6,
    clients_per_round=4,
    local_steps=2,
    batch_size=8,
    min_size=16,
    max_size=24,
    roofline_batch=32,
    min_seconds=0.0,
    max_rounds=1,
  ),
  'sync_cnn': SyncSizes(
    model='mnist_cnn',
    num_clients=3,
    clients_per_round=2,
    local_steps=2,
    batch_size=4,
    min_size=8,
    max_size=12,
    roofline_batch=8,
    min_seconds=0.0,
    max_rounds=1,
  ),
  'fedbuff_mlp': AsyncSizes(
    num_clients=20,
    concurrency=4,
    buffer_size=2,
    local_steps=2,
    batch_size=8,
    min_size=8,
    max_size=16,
    warmup_updates=8,
    measure_updates=8,
    chunk_updates=8,
  ),
  'compass_mlp': CompassSizes(
    num_clients=3,
    q_min=2,
    q_max=3,
    batch_size=8,
    min_size=16,
    max_size=32,
    warmup_updates=6,
    measure_updates=6,
    chunk_updates=6,
  ),
  'scheduling': AsyncSizes(
    num_clients=40,
    concurrency=8,
    buffer_size=4,
    local_steps=2,
    batch_size=8,
    min_size=8,
    max_size=16,
    warmup_updates=100,
    measure_updates=2000,
    chunk_updates=1000,
  ),
}


# ---- Measurement ---------------------------------------------------------------------------


@dataclasses.dataclass
class Work:
  """What one unit of a strategy did: client examples, client updates, events."""

  examples: int = 0
  updates: int = 0
  events: int = 0

  def add(self, other: Work) -> None:
    self.examples += other.examples
    self.updates += other.updates
    self.events += other.events


@dataclasses.dataclass
class Measurement:
  """The steady-state units' total work and seconds, and the warm-up's excess time."""

  work: Work
  seconds: float
  compile_s: float
  units: int


def measure(
  unit: Callable[[], Work], *, min_seconds: float, min_units: int, max_units: int
) -> Measurement:
  """Runs `unit` once as the warm-up, then until `min_seconds` passed and `min_units` ran (or
  `max_units` ran). Each unit must block until its results are computed.

  compile_s is the warm-up's time minus the time of its work at the steady rate (examples when
  the unit trains, else updates, else events).
  """
  start = time.perf_counter()
  first = unit()
  first_seconds = time.perf_counter() - start
  total = Work()
  units = 0
  start = time.perf_counter()
  while True:
    total.add(unit())
    units += 1
    seconds = time.perf_counter() - start
    if units >= max_units or (units >= min_units and seconds >= min_seconds):
      break
  basis = 'examples' if total.examples else 'updates' if total.updates else 'events'
  rate = getattr(total, basis) / max(seconds, 1e-9)
  compile_s = first_seconds - getattr(first, basis) / rate if rate > 0 else first_seconds
  return Measurement(work=total, seconds=seconds, compile_s=max(compile_s, 0.0), units=units)


def max_rss_mb() -> float:
  """The process's maximum resident set size so far, in MB."""
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak / (1 << 20) if sys.platform == 'darwin' else peak / 1024  # bytes / KiB


def _record(
  case: str,
  strategy: str,
  m: Measurement | None,
  *,
  programs: int | None,
  rss_before: float,
  skipped: str | None = None,
  **extra: Any,
) -> dict[str, Any]:
  record: dict[str, Any] = {'case': case, 'strategy': strategy}
  if m is None:
    record.update(
      examples_per_s=None,
      updates_per_s=None,
      compile_s=None,
      programs=None,
      peak_rss_mb=round(max_rss_mb(), 1),
      skipped=skipped,
    )
  else:
    seconds = max(m.seconds, 1e-9)
    record.update(
      examples_per_s=round(m.work.examples / seconds, 1) if m.work.examples else None,
      updates_per_s=round(m.work.updates / seconds, 1) if m.work.updates else None,
      compile_s=round(m.compile_s, 3),
      programs=programs,
      peak_rss_mb=round(max_rss_mb(), 1),
      rss_growth_mb=round(max_rss_mb() - rss_before, 1),
      measured_seconds=round(m.seconds, 3),
      measured_examples=m.work.examples,
      measured_updates=m.work.updates,
    )
  record.update(extra)
  return record


def _cache_size(fn: Any) -> int:
  """Programs compiled for a `jax.jit` function (0 where JAX does not expose it)."""
  size = getattr(fn, '_cache_size', None)
  return int(size()) if callable(size) else 0


# ---- Data and models -----------------------------------------------------------------------


def federation(num_clients: int, min_size: int, max_size: int, seed: int = 0) -> FederatedDataset:
  """The synthetic 28x28x1, 10-class federation every strategy of a case trains on."""
  return toy_federation(
    num_clients=num_clients,
    num_classes=NUM_CLASSES,
    image_shape=IMAGE_SHAPE,
    min_size=min_size,
    max_size=max_size,
    num_test=10,
    seed=seed,
  )


def client_orders(
  fed: FederatedDataset,
  clients: np.ndarray,
  num_steps: int,
  batch_size: int,
  rng: np.random.Generator,
) -> list[np.ndarray]:
  """Per client, the `num_steps * batch_size` example rows of its batches in order: the
  client's examples reshuffled every epoch (shuffle -> repeat -> batch, as FedJAX's
  `shuffle_repeat_batch`). Used by the host-batched baselines."""
  orders = []
  need = num_steps * batch_size
  for c in clients:
    rows = fed.client_indices[c, : fed.client_sizes[c]]
    epochs = -(-need // len(rows))
    orders.append(np.concatenate([rng.permutation(rows) for _ in range(epochs)])[:need])
  return orders


def torch_modules():
  """`(torch, make_model)` or None when PyTorch is not installed."""
  try:
    import torch
    from torch import nn
  except ImportError:
    return None

  def make_model(name: str) -> Any:
    if name == 'mlp':  # models.zoo.MLP (200, 200)
      return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 200),
        nn.ReLU(),
        nn.Linear(200, 200),
        nn.ReLU(),
        nn.Linear(200, NUM_CLASSES),
      )
    if name == 'mnist_cnn':  # models.zoo.MnistCNN: 582,026 parameters
      return nn.Sequential(
        nn.Conv2d(1, 32, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(1024, 512),
        nn.ReLU(),
        nn.Linear(512, NUM_CLASSES),
      )
    raise ValueError(f'no PyTorch twin of model {name!r}')

  return torch, make_model


def raise_malloc_mmap_threshold() -> None:
  """Give PyTorch's CPU kernels glibc's fast allocation path in every run.

  glibc serves a block above its mmap threshold (128 KB until the process frees a larger
  block, when the threshold rises) from fresh pages. The CNN's activations and gradients are
  such blocks, so without this a PyTorch step faults in zeroed pages every time and runs
  35-45 % slower, or not, depending on what the process freed earlier. Fixed thresholds
  make the PyTorch baseline its fast case, reproducibly; the JAX strategies allocate through
  XLA and measure the same either way.
  """
  if sys.platform.startswith('linux'):
    libc = ctypes.CDLL(None)
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (glibc's largest on 64-bit)
    libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: keep freed blocks instead of returning them


# ---- Synchronous FedAvg --------------------------------------------------------------------


def _rounds(sizes: SyncSizes) -> dict[str, Any]:
  return dict(min_seconds=sizes.min_seconds, min_units=1, max_units=sizes.max_rounds)


def fedavg_simulation(
  executor: Any,
  fed: FederatedDataset,
  model: Model,
  clients_per_round: int,
  local_work: LocalWork,
  seeds: tuple[int, int] = (2, 3),
) -> Simulation:
  """FedAvg's rounds over `fed` (`clients_per_round` clients, `local_work` each, server SGD at
  1.0, per-step latency), the simulation the synchronous benchmark cases time. `seeds`: of the
  latency draws and of the scheduler."""
  return Simulation(
    executor=executor,
    scheduler=SynchronousScheduler(clients_per_round, local_work),
    aggregator=server_update(optax.sgd(1.0)),
    latency=PerStepLatency(fed.num_clients, np.random.default_rng(seeds[0])),
    init_params=model.init(jax.random.PRNGKey(0)),
    client_sizes=fed.client_sizes,
    rng=np.random.default_rng(seeds[1]),
  )


def _fedsim_sync(
  case: str, strategy: str, fed: FederatedDataset, model: Model, sizes: SyncSizes
) -> dict[str, Any]:
  """fedsim itself: `Simulation` + `SynchronousScheduler` + the strategy's `Executor`
  (batches sampled on device, `sampling='shuffle'`)."""
  rss = max_rss_mb()
  client_update = sgd_client_update(model, optax.sgd(CLIENT_LEARNING_RATE), sizes.batch_size)
  executor = fedsim_executor(strategy, client_update, fed)
  sim = fedavg_simulation(
    executor,
    fed,
    model,
    sizes.clients_per_round,
    LocalWork(steps=sizes.local_steps, batch_size=sizes.batch_size),
  )

  def one_round() -> Work:
    updates, steps = sim.client_updates, sim.gradient_steps
    sim.run(StopCondition(max_versions=sim.version + 1))
    jax.block_until_ready(sim.params)
    return Work(
      examples=(sim.gradient_steps - steps) * sizes.batch_size, updates=sim.client_updates - updates
    )

  m = measure(one_round, **_rounds(sizes))
  return _record(
    case,
    strategy,
    m,
    programs=executor.num_compiled_programs,
    rss_before=rss,
    threads=executor.threads,
    computed_steps_ratio=round(executor.steps_computed / executor.steps_run, 3),
  )


def _jax_client_loop(
  case: str, fed: FederatedDataset, model: Model, sizes: SyncSizes
) -> dict[str, Any]:
  """FedJAX's default `for_each_client` design: jitted init / step / final per client, host
  batches, and the weighted average of the deltas op by op on the host."""
  rss = max_rss_mb()
  optimizer = optax.sgd(CLIENT_LEARNING_RATE)

  @jax.jit
  def client_init(server_params):
    return server_params, optimizer.init(server_params)

  @jax.jit
  def client_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(model.loss)(params, x, y, jnp.ones(x.shape[0]))
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  @jax.jit
  def client_final(server_params, params):
    return jax.tree_util.tree_map(jnp.subtract, params, server_params)

  server_params = model.init(jax.random.PRNGKey(0))
  rng = np.random.default_rng(3)
  batch = sizes.batch_size

  def one_round() -> Work:
    nonlocal server_params
    clients = np.sort(rng.choice(fed.num_clients, sizes.clients_per_round, replace=False))
    orders = client_orders(fed, clients, sizes.local_steps, batch, rng)
    total_delta, total_weight = None, 0.0
    for client, order in zip(clients, orders):
      params, opt_state = client_init(server_params)
      for s in range(sizes.local_steps):
        rows = order[s * batch : (s + 1) * batch]
        params, opt_state, _ = client_step(params, opt_state, fed.train_x[rows], fed.train_y[rows])
      delta = client_final(server_params, params)
      weight = float(fed.client_sizes[client])
      total_weight += weight
      if total_delta is None:
        total_delta = jax.tree_util.tree_map(lambda d: weight * d, delta)
      else:
        total_delta = jax.tree_util.tree_map(lambda t, d: t + weight * d, total_delta, delta)
    server_params = jax.tree_util.tree_map(
      lambda p, t: p + t / total_weight, server_params, total_delta
    )
    jax.block_until_ready(server_params)
    return Work(examples=len(clients) * sizes.local_steps * batch, updates=len(clients))

  m = measure(one_round, **_rounds(sizes))
  programs = sum(_cache_size(f) for f in (client_init, client_step, client_final))
  return _record(case, 'jax_client_loop', m, programs=programs, rss_before=rss)


def _torch_client_loop(
  case: str, fed: FederatedDataset, model_name: str, sizes: SyncSizes, threads: int | None = None
) -> dict[str, Any]:
  """A PyTorch FL simulator's loop: deepcopy the global model, SGD per client, average the
  state dicts with the example weights."""
  rss = max_rss_mb()
  modules = torch_modules()
  if modules is None:
    return _record(
      case, 'torch_client_loop', None, programs=None, rss_before=rss, skipped=TORCH_SKIP
    )
  torch, make_model = modules
  raise_malloc_mmap_threshold()
  threads = threads or cpu_cores()
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  functional = torch.nn.functional
  # Inputs converted once, NCHW float in [0, 1] (the JAX models scale uint8 inside jit).
  x_all = torch.from_numpy(fed.train_x).permute(0, 3, 1, 2).float().div_(255.0).contiguous()
  y_all = torch.from_numpy(fed.train_y.astype(np.int64))
  global_model = make_model(model_name)
  rng = np.random.default_rng(3)
  batch = sizes.batch_size

  def one_round() -> Work:
    clients = np.sort(rng.choice(fed.num_clients, sizes.clients_per_round, replace=False))
    orders = client_orders(fed, clients, sizes.local_steps, batch, rng)
    average, total_weight = None, 0.0
    for client, order in zip(clients, orders):
      local = copy.deepcopy(global_model)
      local.train()
      optimizer = torch.optim.SGD(local.parameters(), lr=CLIENT_LEARNING_RATE)
      order = torch.from_numpy(order)
      for s in range(sizes.local_steps):
        rows = order[s * batch : (s + 1) * batch]
        optimizer.zero_grad()
        loss = functional.cross_entropy(local(x_all[rows]), y_all[rows])
        loss.backward()
        optimizer.step()
      weight = float(fed.client_sizes[client])
      total_weight += weight
      state = local.state_dict()
      with torch.no_grad():
        if average is None:
          average = {k: v.detach().clone().mul_(weight) for k, v in state.items()}
        else:
          for k, v in state.items():
            average[k].add_(v, alpha=weight)
    global_model.load_state_dict({k: v / total_weight for k, v in average.items()})
    return Work(examples=len(clients) * sizes.local_steps * batch, updates=len(clients))

  m = measure(one_round, **_rounds(sizes))
  return _record(
    case,
    'torch_client_loop',
    m,
    programs=None,
    rss_before=rss,
    torch_version=torch.__version__,
    torch_threads=threads,
  )


def _roofline(case: str, fed: FederatedDataset, model: Model, sizes: SyncSizes) -> dict[str, Any]:
  """Centralized training with batches of `roofline_batch`: no federation at all."""
  rss = max_rss_mb()
  optimizer = optax.sgd(CLIENT_LEARNING_RATE)
  batch = sizes.roofline_batch

  @functools.partial(fedsim_jit, donate_argnums=(0, 1))  # fedsim's XLA options
  def train_step(params, opt_state, x_all, y_all, rows):
    x, y = x_all[rows], y_all[rows]
    loss, grads = jax.value_and_grad(model.loss)(params, x, y, jnp.ones(batch))
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  x_all, y_all = jnp.asarray(fed.train_x), jnp.asarray(fed.train_y)
  params = model.init(jax.random.PRNGKey(0))
  opt_state = optimizer.init(params)
  num_examples = len(fed.train_y)
  steps = -(-sizes.clients_per_round * sizes.local_steps * sizes.batch_size // batch)
  rng = np.random.default_rng(3)

  def one_unit() -> Work:  # the examples of one federated round
    nonlocal params, opt_state
    rows = rng.integers(0, num_examples, (steps, batch)).astype(np.int32)
    for s in range(steps):
      params, opt_state, _ = train_step(params, opt_state, x_all, y_all, rows[s])
    jax.block_until_ready(params)
    return Work(examples=steps * batch)

  m = measure(one_unit, **_rounds(sizes))
  return _record(
    case, 'roofline', m, programs=_cache_size(train_step), rss_before=rss, roofline_batch=batch
  )


def sync_case(
  case: str, sizes: SyncSizes, strategies: tuple[str, ...], torch_threads: int | None = None
) -> Iterator[dict]:
  """Synchronous FedAvg (`SynchronousScheduler` + `server_update(sgd(1))`, example weights).
  `torch_threads` defaults to the CPU cores."""
  fed = federation(sizes.num_clients, sizes.min_size, sizes.max_size)
  model = get_model(sizes.model, IMAGE_SHAPE, NUM_CLASSES)
  num_params = model.num_params(model.init(jax.random.PRNGKey(0)))
  setting = (
    f'{sizes.model} ({num_params:,} params), {sizes.clients_per_round} of '
    f'{sizes.num_clients} clients/round x {sizes.local_steps} steps x '
    f'B={sizes.batch_size}'
  )
  for strategy in strategies:
    if strategy in FEDSIM_STRATEGIES:
      record = _fedsim_sync(case, strategy, fed, model, sizes)
    elif strategy == 'jax_client_loop':
      record = _jax_client_loop(case, fed, model, sizes)
    elif strategy == 'torch_client_loop':
      record = _torch_client_loop(case, fed, sizes.model, sizes, torch_threads)
    else:
      record = _roofline(case, fed, model, sizes)
    record['setting'] = setting
    gc.collect()
    yield record


# ---- Asynchronous and scheduling-only runs -------------------------------------------------


class CountingEventQueue(EventQueue):
  """An `EventQueue` that counts the events popped (arrivals, dropouts, timers)."""

  def __init__(self):
    super().__init__()
    self.popped = 0

  def pop(self):
    self.popped += 1
    return super().pop()


def _update_chunks(sim: Simulation, batch_size: int) -> Callable[[int], Work]:
  """A unit running `n` more client updates of `sim` and reporting their work."""

  def run(n: int) -> Work:
    updates, steps = sim.client_updates, sim.gradient_steps
    popped, dispatched = sim.queue.popped, sim.accounting.dispatched
    sim.run(StopCondition(max_client_updates=sim.client_updates + n))
    jax.block_until_ready(sim.params)
    return Work(
      examples=(sim.gradient_steps - steps) * batch_size,
      updates=sim.client_updates - updates,
      events=sim.queue.popped - popped + sim.accounting.dispatched - dispatched,
    )

  return run


def _measure_updates(
  run: Callable[[int], Work],
  sizes: AsyncSizes | CompassSizes,
  programs: Callable[[], int] = lambda: 0,
) -> tuple[Measurement, int]:
  """Warm-up of `sizes.warmup_updates` updates, then `sizes.measure_updates` in chunks of
  `sizes.chunk_updates`. Returns the measurement and the programs compiled by the warm-up
  (asynchronous runs may meet new task-count or step buckets later)."""
  after_warmup = []

  def unit() -> Work:
    if not after_warmup:
      work = run(sizes.warmup_updates)
      after_warmup.append(programs())
      return work
    return run(sizes.chunk_updates)

  units = max(1, -(-sizes.measure_updates // sizes.chunk_updates))
  return measure(unit, min_seconds=0.0, min_units=units, max_units=units), after_warmup[0]


def _simulated_case(
  case: str,
  sizes: AsyncSizes | CompassSizes,
  strategies: tuple[str, ...],
  make_scheduler: Callable[[], Any],
  make_aggregator: Callable[[], Any],
  step_mean: float,
  setting: str,
) -> Iterator[dict]:
  """A `Simulation` with real training (MLP, deferred batches, per-step latency
  N(step_mean, (0.3 step_mean)^2)) under each executor strategy on the same federation."""
  fed = federation(sizes.num_clients, sizes.min_size, sizes.max_size)
  model = get_model('mlp', IMAGE_SHAPE, NUM_CLASSES)
  client_update = sgd_client_update(model, optax.sgd(CLIENT_LEARNING_RATE), sizes.batch_size)
  for strategy in strategies:
    rss = max_rss_mb()
    executor = fedsim_executor(strategy, client_update, fed)
    sim = Simulation(
      executor=executor,
      scheduler=make_scheduler(),
      aggregator=make_aggregator(),
      latency=PerStepLatency(
        fed.num_clients,
        np.random.default_rng(2),
        mean=step_mean,
        distribution='normal',
        jitter=0.05,
      ),
      init_params=model.init(jax.random.PRNGKey(0)),
      client_sizes=fed.client_sizes,
      rng=np.random.default_rng(3),
      deferred=True,
    )
    sim.queue = CountingEventQueue()
    m, warm_programs = _measure_updates(
      _update_chunks(sim, sizes.batch_size),
      sizes,
      lambda: executor.num_compiled_programs,  # noqa: F821
    )
    report = sim.report()
    yield _record(
      case,
      strategy,
      m,
      programs=executor.num_compiled_programs,
      rss_before=rss,
      setting=setting,
      threads=executor.threads,
      programs_after_warmup=warm_programs,
      mean_executed_batch_size=round(report['mean_executed_batch_size'], 2),
      computed_steps_ratio=round(executor.steps_computed / executor.steps_run, 3),
    )
    del sim, executor
    gc.collect()


ASYNC_STRATEGIES = ('fedsim_vmap', 'fedsim_loop', 'fedsim_loop_1thread')


def fedbuff_case(
  case: str, sizes: AsyncSizes, strategies: tuple[str, ...] = ASYNC_STRATEGIES
) -> Iterator[dict]:
  """FedBuff with real training: `AsynchronousScheduler` + the `Executor`, deferred."""
  yield from _simulated_case(
    case,
    sizes,
    strategies,
    lambda: AsynchronousScheduler(
      sizes.concurrency,
      sizes.buffer_size,
      LocalWork(steps=sizes.local_steps, batch_size=sizes.batch_size),
    ),
    lambda: server_update(optax.sgd(1.0), count_mean()),
    1.0,
    f'mlp, {sizes.num_clients} clients, concurrency {sizes.concurrency}, '
    f'K={sizes.buffer_size}, {sizes.local_steps} steps x B={sizes.batch_size}, per-step '
    'latency N(1, 0.3^2), deferred',
  )


def compass_case(
  case: str, sizes: CompassSizes, strategies: tuple[str, ...] = ASYNC_STRATEGIES
) -> Iterator[dict]:
  """FedCompass cross-silo (the `fedcompass` algorithm's scheduler and aggregator), MLP. The
  silos' tasks have different step counts, which the vmap backend pads to the batch's longest
  (`computed_steps_ratio`) and the loop backend does not."""
  yield from _simulated_case(
    case,
    sizes,
    strategies,
    lambda: CompassScheduler(sizes.q_min, sizes.q_max),
    compass_aggregator,
    0.15,
    f'mlp, {sizes.num_clients} silos, Q in [{sizes.q_min}, {sizes.q_max}] x '
    f'B={sizes.batch_size}, per-step latency N(0.15, 0.045^2), deferred',
  )


SCHEDULING_STRATEGIES = ('fedsim_no_training', 'fedsim_timeline')


def scheduling_case(case: str, sizes: AsyncSizes) -> Iterator[dict]:
  """FedBuff's event loop with `NoTrainingExecutor` (zero deltas; a 3-scalar model, as in
  `benchmarks/async_batch_size.py`, so the aggregator's arithmetic costs nothing), with the
  zero updates aggregated and as a timeline-only run; both make the same schedule."""
  params = {'w': jnp.zeros(3)}
  rng = np.random.default_rng(0)
  client_sizes = rng.integers(sizes.min_size, sizes.max_size + 1, sizes.num_clients)
  for strategy in SCHEDULING_STRATEGIES:
    rss = max_rss_mb()
    sim = Simulation(
      executor=NoTrainingExecutor(params),
      scheduler=AsynchronousScheduler(
        sizes.concurrency,
        sizes.buffer_size,
        LocalWork(steps=sizes.local_steps, batch_size=sizes.batch_size),
      ),
      aggregator=server_update(optax.sgd(1.0), count_mean()),
      latency=PerStepLatency(
        sizes.num_clients, np.random.default_rng(2), distribution='normal', jitter=0.05
      ),
      init_params=params,
      client_sizes=client_sizes,
      rng=np.random.default_rng(3),
      deferred=True,
      aggregate=strategy != 'fedsim_timeline',
    )
    sim.queue = CountingEventQueue()
    m, _ = _measure_updates(_update_chunks(sim, 0), sizes)
    yield _record(
      case,
      strategy,
      m,
      programs=0,
      rss_before=rss,
      setting=(
        f'FedBuff event loop, {sizes.num_clients} clients, concurrency '
        f'{sizes.concurrency}, K={sizes.buffer_size}, no training'
      ),
      events_per_s=round(m.work.events / max(m.seconds, 1e-9), 1),
      measured_events=m.work.events,
    )


# ---- Driver and report ---------------------------------------------------------------------

SYNC_STRATEGIES = {
  'sync_mlp': (
    'fedsim_vmap',
    'fedsim_loop',
    'fedsim_loop_1thread',
    'jax_client_loop',
    'torch_client_loop',
    'roofline',
  ),
  'sync_cnn': (
    'fedsim_vmap',
    'fedsim_loop',
    'fedsim_loop_host',
    'fedsim_loop_host_1thread',
    'jax_client_loop',
    'torch_client_loop',
    'roofline',
  ),
}


def run_case(
  case: str,
  quick: bool = False,
  measure_seconds: float | None = None,
  torch_threads: int | None = None,
) -> Iterator[dict[str, Any]]:
  """Yields the records of `case` (one of `CASES`), one per strategy, as each finishes.

  Args:
    quick: tiny sizes (`QUICK_SIZES`) for smoke tests.
    measure_seconds: overrides the synchronous cases' minimum measured seconds.
    torch_threads: `torch.set_num_threads` of the PyTorch loop (default: the CPU cores).
  """
  if case not in CASES:
    raise ValueError(f'case {case!r}; allowed: {CASES}')
  sizes = (QUICK_SIZES if quick else FULL_SIZES)[case]
  if case in SYNC_STRATEGIES:
    if measure_seconds is not None:
      sizes = dataclasses.replace(sizes, min_seconds=measure_seconds)
    yield from sync_case(case, sizes, SYNC_STRATEGIES[case], torch_threads)
  elif case == 'fedbuff_mlp':
    yield from fedbuff_case(case, sizes)
  elif case == 'compass_mlp':
    yield from compass_case(case, sizes)
  else:
    yield from scheduling_case(case, sizes)


def json_line(record: dict[str, Any]) -> str:
  return json.dumps(record, sort_keys=False)


def _fmt(value: Any) -> str:
  """Integers with thousands separators, floats with 3 significant digits below 100."""
  if value is None:
    return '-'
  if isinstance(value, float):
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f'{value:,.{digits}f}'
  return f'{value:,}' if isinstance(value, int) else str(value)


def _ratio(a: float | None, b: float | None) -> str:
  if not a or not b:
    return '-'
  return f'{a / b:.2f}x' if a / b >= 0.1 else f'{a / b:.2g}x'


def markdown_report(records: list[dict[str, Any]], quick: bool = False) -> str:
  """The records as a markdown table, with each strategy's examples/s relative to its case's
  roofline and PyTorch loop, and the asynchronous cases' relative to sync FedAvg (MLP, vmap).
  `quick` adds a warning that tiny sizes make the figures meaningless."""
  by_key = {(r['case'], r['strategy']): r for r in records}

  def sync_mlp(strategy: str) -> float | None:
    return by_key.get(('sync_mlp', strategy), {}).get('examples_per_s')

  lines = [
    '| case | strategy | examples/s | updates/s | compile s | programs | peak RSS MB '
    '| / roofline | / torch loop | / sync MLP, same strategy |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for r in records:
    eps = r.get('examples_per_s')
    roof = by_key.get((r['case'], 'roofline'), {}).get('examples_per_s')
    torch_eps = by_key.get((r['case'], 'torch_client_loop'), {}).get('examples_per_s')
    is_sync = r['case'] in SYNC_STRATEGIES
    vs_roof = _ratio(eps, roof) if is_sync and r['strategy'] != 'roofline' else '-'
    vs_torch = (
      _ratio(eps, torch_eps) if is_sync and r['strategy'] not in ('torch_client_loop',) else '-'
    )
    vs_sync = (
      _ratio(eps, sync_mlp(r['strategy'])) if r['case'] in ('fedbuff_mlp', 'compass_mlp') else '-'
    )
    examples = r.get('skipped') or _fmt(eps)
    lines.append(
      f'| {r["case"]} | {r["strategy"]} | {examples} | {_fmt(r.get("updates_per_s"))} '
      f'| {_fmt(r.get("compile_s"))} | {_fmt(r.get("programs"))} '
      f'| {_fmt(r.get("peak_rss_mb"))} | {vs_roof} | {vs_torch} | {vs_sync} |'
    )
  notes = ['- quick sizes (smoke test): the figures mean nothing'] if quick else []
  settings = []
  for r in records:
    if r.get('setting') and (r['case'], r['setting']) not in settings:
      settings.append((r['case'], r['setting']))
  notes += [f'- {case}: {setting}' for case, setting in settings]
  for r in records:
    if r.get('events_per_s') is not None:
      verdict = 'meets' if r['events_per_s'] >= 100_000 else 'misses'
      notes.append(
        f'- {r["case"]} ({r["strategy"]}): {_fmt(r["events_per_s"])} events/s '
        f'(arrivals, timers and dispatches); {verdict} the 100,000 events/s target'
      )
  best = {
    case: max(
      (
        r.get('examples_per_s') or 0
        for r in records
        if r['case'] == case and r['strategy'].startswith('fedsim')
      ),
      default=0,
    )
    for case in ('fedbuff_mlp', 'sync_mlp')
  }
  if best['fedbuff_mlp'] and best['sync_mlp']:
    notes.append(
      '- FedBuff / sync FedAvg (MLP), best fedsim strategy of each, examples/s: '
      f'{best["fedbuff_mlp"] / best["sync_mlp"]:.2f} (target 0.6)'
    )
  return '\n'.join(lines + [''] + notes)
