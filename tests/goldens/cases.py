"""Golden runs: small, fixed experiments whose metrics and final parameters are committed.

Each case is a config (a shipped config file on a tiny budget, or a named small run of one
algorithm family) and a synthetic federation. `run_case` runs it and returns what is compared:
every `metrics.jsonl` row, the task accounting of `summary.json`, and a digest of the final
server and evaluated parameters. `record.py` writes the goldens; `test_goldens.py` checks them.
Refactors must leave every case bit-identical.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import platform
from collections.abc import Callable
from typing import Any

import jax
import jaxlib
import numpy as np

from fedsim_jax import algorithms
from fedsim_jax.config import set_by_path
from fedsim_jax.data.synthetic import toy_federation, toy_text_federation
from fedsim_jax.experiment import PreparedRun

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'recorded')
# `configs/` links to the package `fedsim_jax/configs`: its `__init__.py` is no config.
SHIPPED_CONFIGS = sorted(
  path
  for path in glob.glob(os.path.join(ROOT, 'configs', '*.py'))
  if not os.path.basename(path).startswith('_')
)


def load_config_file(path: str, *args: str):
  spec = importlib.util.spec_from_file_location('golden_config_module', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(*args)


def _tiny_budget(config) -> None:
  """The shipped-config budget: 6 clients, cohorts and buffers of 3, 2 local steps, 2 versions."""
  config.data.num_clients = 6
  kwargs = config.algorithm.kwargs
  settings = algorithms.get_spec(config.algorithm.name).settings()
  fields = settings.field_names()
  if 'cohort_size' in fields:
    kwargs.cohort_size = 3
  for name in ('concurrency', 'buffer_size'):
    if name in fields:
      kwargs[name] = min(kwargs.get(name, getattr(settings, name)), 3)
  if kwargs.get('num_selected') is not None:
    kwargs.num_selected = 4
  if config.client.local_steps is not None:
    config.client.local_steps = 2
  config.client.batch_size = 4
  config.run.num_rounds = 2
  config.run.eval_every = 1


def _shipped_case(path: str) -> Callable[[], tuple[Any, Any]]:
  def build():
    config = load_config_file(path)
    _tiny_budget(config)
    if config.model.name == 'char_lstm':  # next-character models get token sequences
      return config, toy_text_federation(num_clients=6)
    return config, toy_federation(num_clients=6, num_classes=10, image_shape=(28, 28, 1))

  return build


def _small_case(
  config_file: str, overrides: dict[str, Any], num_clients: int, image_shape=(28, 28, 1)
) -> Callable[[], tuple[Any, Any]]:
  def build():
    config = load_config_file(os.path.join(ROOT, 'configs', config_file))
    config.data.num_clients = num_clients
    for path, value in overrides.items():
      set_by_path(config, path, value)
    return config, toy_federation(
      num_clients=num_clients,
      num_classes=10,
      image_shape=image_shape,
      min_size=8,
      max_size=40,
      num_test=100,
      seed=1,
    )

  return build


# Small budgets of the algorithm families whose state and schedules are the most involved.
SMALL_CASES: dict[str, Callable[[], tuple[Any, Any]]] = {
  'demo': _small_case(
    'fedavg_fashion_mnist.py',
    {
      'algorithm.kwargs.cohort_size': 4,
      'client.local_steps': 5,
      'run.num_rounds': 4,
      'run.eval_every': 1,
    },
    num_clients=10,
  ),
  'fedbuff': _small_case(
    'fedbuff_fashion_mnist.py',
    {
      'algorithm.kwargs.concurrency': 5,
      'algorithm.kwargs.buffer_size': 3,
      'client.local_steps': 4,
      'run.num_rounds': 6,
      'run.eval_every': 2,
    },
    num_clients=12,
  ),
  'fedcompass_cnn': _small_case(
    'fedcompass_mnist.py',
    {
      'client.batch_size': 8,
      'algorithm.kwargs.q_min': 4,
      'algorithm.kwargs.q_max': 20,
      'latency.kwargs.mean': 1.0,
      'run.max_virtual_time': 60.0,
      'run.eval_every': 3,
    },
    num_clients=5,
  ),
  'ccfedavg': _small_case(
    'ccfedavg_fashion_mnist.py',
    {
      'algorithm.kwargs.cohort_size': 4,
      'client.local_steps': 3,
      'client.batch_size': 8,
      'run.num_rounds': 8,
      'run.eval_every': 2,
      'algorithm.kwargs.budget_beta': 2,
    },
    num_clients=10,
  ),
  'fare_dust': _small_case(
    'fare_dust_fashion_mnist.py',
    {
      'algorithm.kwargs.cohort_size': 3,
      'algorithm.kwargs.num_selected': 5,
      'client.batch_size': 8,
      'algorithm.kwargs.history_length': 3,
      'run.num_rounds': 8,
      'run.eval_every': 2,
    },
    num_clients=10,
  ),
  'feast_msg': _small_case(
    'feast_msg_fashion_mnist.py',
    {
      'algorithm.kwargs.cohort_size': 3,
      'algorithm.kwargs.num_selected': 5,
      'client.batch_size': 8,
      'run.num_rounds': 8,
      'run.eval_every': 2,
    },
    num_clients=10,
  ),
  'fedasmu': _small_case(
    'fedasmu_fashion_mnist.py',
    {
      'algorithm.kwargs.concurrency': 3,
      'client.local_epochs': 2.0,
      'client.batch_size': 8,
      'algorithm.kwargs.trigger_period': 2.0,
      'algorithm.kwargs.trigger_count': 2,
      'run.num_rounds': 8,
      'run.eval_every': 2,
    },
    num_clients=8,
  ),
}

CASES: dict[str, Callable[[], tuple[Any, Any]]] = {
  **{
    'shipped_' + os.path.splitext(os.path.basename(p))[0]: _shipped_case(p) for p in SHIPPED_CONFIGS
  },
  **SMALL_CASES,
}


def params_digest(params) -> dict[str, Any]:
  """sha256 of every leaf's bytes in tree order, plus float64 sums to read a difference by."""
  leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(params)]
  digest = hashlib.sha256()
  for leaf in leaves:
    digest.update(str(leaf.dtype).encode() + str(leaf.shape).encode())
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return {
    'sha256': digest.hexdigest(),
    'size': int(sum(leaf.size for leaf in leaves)),
    'sum': float(sum(leaf.astype(np.float64).sum() for leaf in leaves)),
    'abs_sum': float(sum(np.abs(leaf.astype(np.float64)).sum() for leaf in leaves)),
  }


def environment() -> dict[str, str]:
  """What decides whether bits can be compared: floating-point results of XLA:CPU programs
  depend on the JAX build and the CPU's instruction set."""
  flags = ''
  try:
    with open('/proc/cpuinfo') as f:
      flags = next((line for line in f if line.startswith('flags')), '')
  except OSError:
    pass
  return {
    'jax': jax.__version__,
    'jaxlib': jaxlib.__version__,
    'machine': platform.machine(),
    'cpu_flags': hashlib.sha256(flags.encode()).hexdigest()[:16],
  }


def run_case(name: str, workdir: str) -> dict[str, Any]:
  config, dataset = CASES[name]()
  prepared = PreparedRun(config, workdir, dataset)
  prepared.simulation.run(prepared.stop)
  summary = prepared.finish()
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    metrics = [json.loads(line) for line in f]
  sim = prepared.simulation
  return {
    'metrics': metrics,
    'tasks': summary['tasks'],
    'participation': summary['participation'],
    'params': params_digest(sim.params),
    'eval_params': params_digest(sim.eval_params),
  }
