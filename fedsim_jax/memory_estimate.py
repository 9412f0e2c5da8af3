"""Refuse a run that cannot fit in memory before it starts, naming the setting responsible.

The estimate counts what a run holds at its peak: the server state; the start models of the
tasks in flight (one for a synchronous round, whose cohort downloads one model; for
asynchronous slots, one per server version among them, as the tasks dispatched at one version
share its model: at least `concurrency / buffer_size` once the first tasks have been replaced);
their computed updates, at most `executor.max_batch_tasks` at a time (a synchronous round holds
all of its updates only when its aggregator cannot sum them in chunks, i.e. has no linear form);
the training workspace of the tasks that train at once (parameters, gradients and optimizer
state, and each task's batch of `client.batch_size` examples with the activations its backward
pass keeps); the per-client tables or histories its algorithm keeps (`Base.tasks_in_flight`,
`Base.client_tables`); and a device copy of the training data. Everything is computed from
abstract shapes (`jax.eval_shape`), so the check runs before any parameter is allocated.

It is a lower bound on what the run needs (compiled programs and temporaries come on top), so
a refused run would certainly not have fit. The refusal names the setting to change: the part
that a smaller value of its setting would shrink the most or, when even the smallest values
cannot fit, the largest part no setting shrinks (the model's own parameters, or the data).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.executor.choice import (
  Backend,
  resolve_execution,
  resolve_max_batch_tasks,
  resolve_threads,
)
from fedsim_jax.registry import Selection
from fedsim_jax.settings import ConfigError

if TYPE_CHECKING:
  from fedsim_jax.algorithms import Algorithm
  from fedsim_jax.data.federated import FederatedDataset
  from fedsim_jax.models import Model
  from fedsim_jax.run_spec import RunSpec

_GIB = 1024**3
# cgroup v1 reports "no limit" as the largest page-aligned 64-bit value; anything this large is
# no limit on any machine.
_NO_LIMIT = 2**60


@dataclasses.dataclass(frozen=True)
class Need:
  """One part of the estimate: `nbytes`, caused by `setting`, described by `what`; `floor`:
  what it takes at the smallest value of `setting` (None: the same, nothing shrinks it)."""

  setting: str
  nbytes: float
  what: str
  floor: float | None = None

  @property
  def least(self) -> float:
    return self.nbytes if self.floor is None else self.floor


def tree_bytes(tree: Any) -> int:
  """Bytes of a pytree of arrays or `jax.ShapeDtypeStruct`s."""
  return sum(leaf.size * jnp.dtype(leaf.dtype).itemsize for leaf in jax.tree_util.tree_leaves(tree))


def model_size_setting(model: Selection) -> str:
  """The setting that sizes the resolved `model`, as a refusal names it: the field its
  settings declare as `size_setting` (e.g. 'model.kwargs.hidden_sizes=[200, 200]'), else
  its name."""
  field = getattr(model.settings, 'size_setting', None)
  if field is None:
    return f'model.name={model.name!r}'
  value = getattr(model.settings, field)
  return f'model.kwargs.{field}={list(value) if isinstance(value, tuple) else value!r}'


def abstract_params(model: Any) -> Any:
  """`model.init`'s parameters as shapes and dtypes, without allocating them."""
  return jax.eval_shape(model.init, jax.random.PRNGKey(0))


def training_bytes_per_example(model: Any, params: Any) -> int:
  """Bytes each example of a training batch adds to a local step: its input and the
  activations the backward pass keeps (the residuals of `jax.vjp` of the training loss), from
  abstract shapes (`params` may be `abstract_params(model)`)."""

  def residual_bytes(batch: int) -> int:
    x = jax.ShapeDtypeStruct((batch, *model.input_shape), model.input_dtype)
    logits = jax.eval_shape(model.apply, params, x)
    y = jax.ShapeDtypeStruct(logits.shape[:-1], jnp.int32)  # one label per prediction

    def pullback(params: Any, x: jax.Array, y: jax.Array) -> Any:
      return jax.vjp(lambda p: model.train_loss(p, x, y)[0], params)[1]

    return tree_bytes(jax.eval_shape(pullback, params, x, y)) + tree_bytes((x, y))

  # The parameters the backward pass keeps appear in both; the difference is one example.
  return max(0, residual_bytes(2) - residual_bytes(1))


def _read(path: str) -> str | None:
  try:
    with open(path, encoding='utf-8') as f:
      return f.read()
  except OSError:
    return None


def _stat(path: str, key: str) -> int:
  """A counter of a cgroup `memory.stat` file (0 where missing)."""
  for line in (_read(path) or '').splitlines():
    name, _, value = line.partition(' ')
    if name == key and value.strip().isdigit():
      return int(value)
  return 0


def _host_available(root: str) -> float | None:
  for line in (_read(os.path.join(root, 'proc/meminfo')) or '').splitlines():
    if line.startswith('MemAvailable:'):
      return float(line.split()[1]) * 1024
  return None


def _cgroup_dirs(root: str) -> list[tuple[str, str]]:
  """The memory cgroup directories that bound this process, innermost first, as (kind, dir):
  'v2' (unified hierarchy, /sys/fs/cgroup) and 'v1' (/sys/fs/cgroup/memory), from the paths in
  /proc/self/cgroup and every directory above them up to the mount point (where the cgroup
  namespace hides the path, or the process sits in the root, only the mount point exists)."""
  mounts = {
    'v2': os.path.join(root, 'sys/fs/cgroup'),
    'v1': os.path.join(root, 'sys/fs/cgroup/memory'),
  }
  paths = {'v2': '/', 'v1': '/'}
  for line in (_read(os.path.join(root, 'proc/self/cgroup')) or '').splitlines():
    parts = line.split(':', 2)
    if len(parts) != 3:
      continue
    hierarchy, controllers, path = parts
    if hierarchy == '0' and controllers == '':
      paths['v2'] = path
    elif 'memory' in controllers.split(','):
      paths['v1'] = path
  dirs = []
  for kind, mount in mounts.items():
    parts = [p for p in paths[kind].split('/') if p and p != '..']
    for depth in range(len(parts), -1, -1):
      directory = os.path.join(mount, *parts[:depth])
      if os.path.isdir(directory):
        dirs.append((kind, directory))
  return dirs


def _cgroup_room(kind: str, directory: str) -> float | None:
  """What one cgroup still allows (its limit less its usage, reclaimable page cache not
  counted as used), or None where it sets no limit."""
  limit_file, usage_file, stat_key = (
    ('memory.max', 'memory.current', 'inactive_file')
    if kind == 'v2'
    else ('memory.limit_in_bytes', 'memory.usage_in_bytes', 'total_inactive_file')
  )
  limit = (_read(os.path.join(directory, limit_file)) or '').strip()
  if not limit.isdigit() or int(limit) >= _NO_LIMIT:  # 'max', missing or unreadable
    return None
  usage = (_read(os.path.join(directory, usage_file)) or '').strip()
  used = int(usage) if usage.isdigit() else 0
  used -= min(used, _stat(os.path.join(directory, 'memory.stat'), stat_key))
  return float(max(0, int(limit) - used))


def cgroup_available(root: str = '/') -> float | None:
  """What this process's memory cgroups (v1 or v2, every level up to the root) still allow:
  the least room among those that set a limit, or None where none does."""
  rooms = [_cgroup_room(kind, directory) for kind, directory in _cgroup_dirs(root)]
  limited = [room for room in rooms if room is not None]
  return min(limited) if limited else None


def available_bytes(root: str = '/') -> float | None:
  """Memory this process can still get: the host's MemAvailable, or less under a cgroup limit
  (None where neither can be read). `root`: where /proc and /sys are found (tests)."""
  figures = [f for f in (_host_available(root), cgroup_available(root)) if f is not None]
  return min(figures) if figures else None


@dataclasses.dataclass(frozen=True)
class Execution:
  """How the executor trains, as far as memory goes.

  Attributes:
    max_batch_tasks: the most tasks computed at once (None: no limit).
    training_at_once: tasks that train at the same time (None: a whole batch, as the vmap
      backend trains one).
    training_setting: the setting that decides `training_at_once`.
    sums_in_chunks: the aggregator sums a large round in chunks (`Aggregator.linear`).
    batch_size: examples per local step (`client.batch_size`).
    example_bytes: what each example of a batch adds to a training step
      (`training_bytes_per_example`).
  """

  max_batch_tasks: int | None = None
  training_at_once: int | None = None
  training_setting: str = 'executor.threads'
  sums_in_chunks: bool = False
  batch_size: int = 1
  example_bytes: int = 0


def estimate(
  settings: object,
  *,
  num_clients: int,
  model_bytes: int,
  data_bytes: int,
  execution: Execution | None = None,
  model_setting: str = 'model.name',
) -> list[Need]:
  """The parts of a run's peak memory (see the module docstring).

  Args:
    settings: the algorithm's settings (its `tasks_in_flight` and `client_tables` hooks).
    num_clients: the federation's size.
    model_bytes: one model's parameters.
    data_bytes: the training data held on the device.
    execution: how the executor trains (default: one task at a time, no batch term).
    model_setting: the setting that decides the model's size, as the refusal names it (e.g.
      'model.kwargs.hidden_sizes=[200, 200]', `model_size_setting`).
  """
  execution = execution or Execution()
  server = f'server model and optimizer state: 4 copies of {model_bytes / 2**20:,.0f} MiB'
  needs = [Need(model_setting, 4 * model_bytes, server)]
  tasks_hook = getattr(settings, 'tasks_in_flight', None)
  tasks = tasks_hook(num_clients) if tasks_hook is not None else None
  training: float = 1
  if tasks is not None:
    needs += _task_needs(tasks, model_bytes, execution)
    training, training_setting = _training_at_once(tasks, execution)
    workspace = 'training workspace (parameters, gradients, optimizer state)'
    needs.append(Need(training_setting, 3 * training * model_bytes, workspace, 3 * model_bytes))
  if execution.example_bytes:
    per_task = execution.batch_size * execution.example_bytes
    needs.append(
      Need(
        f'client.batch_size={execution.batch_size}',
        training * per_task,
        f'the training batches and activations of {training:g} tasks at once',
        training * execution.example_bytes,
      )
    )
  tables_hook = getattr(settings, 'client_tables', None)
  for table in tables_hook(num_clients) if tables_hook is not None else []:
    needs.append(
      Need(f'{table.setting}={table.copies:g}', table.copies * model_bytes, table.what, model_bytes)
    )
  needs.append(Need('data.name', data_bytes, 'training data on the device'))
  return needs


def _task_needs(tasks: Any, model_bytes: int, execution: Execution) -> list[Need]:
  """The start models and computed updates of the tasks in flight."""
  setting = f'{tasks.setting}={tasks.copies:g}'
  batch, batch_setting = _batch(tasks, execution)
  if tasks.shared_start:  # one start model; a round's updates unless summed in chunks
    start = Need(setting, model_bytes, f'{tasks.what}: their start model')
    if execution.sums_in_chunks:
      held, held_setting = batch, batch_setting
    else:
      held, held_setting = tasks.copies, setting
  else:  # one start model per server version among them; updates a batch at a time
    versions = -(-tasks.copies // tasks.tasks_per_version)
    what = f'{tasks.what}: start models (one per server version among them, {versions:g})'
    start = Need(setting, versions * model_bytes, what, model_bytes)
    held, held_setting = batch, batch_setting
  updates = Need(held_setting, held * model_bytes, f'{tasks.what}: computed updates', model_bytes)
  return [start, updates]


def _batch(tasks: Any, execution: Execution) -> tuple[float, str]:
  """Tasks computed at once, and the setting that decides it."""
  limit = execution.max_batch_tasks
  if limit is None or tasks.copies <= limit:
    return tasks.copies, f'{tasks.setting}={tasks.copies:g}'
  return limit, f'executor.max_batch_tasks={limit}'


def _training_at_once(tasks: Any, execution: Execution) -> tuple[float, str]:
  """Tasks that train at the same time, and the setting that decides it."""
  batch, setting = _batch(tasks, execution)
  at_once = execution.training_at_once
  if at_once is None or batch <= at_once:
    return batch, setting
  return at_once, f'{execution.training_setting}={at_once}'


def culprit(needs: list[Need], available: float) -> Need:
  """The part to blame for an estimate over `available`: the one a smaller value of its
  setting shrinks the most, or, where even the smallest values do not fit, the largest part
  that nothing shrinks (the model, or the data)."""
  if sum(need.least for need in needs) > available:
    return max(needs, key=lambda need: need.least)
  return max(needs, key=lambda need: need.nbytes - need.least)


def check_fits(needs: list[Need], available: float | None) -> None:
  """ConfigError (one line) if the estimate exceeds `available`, naming the setting to blame
  (`culprit`)."""
  total = sum(need.nbytes for need in needs)
  if available is None or total <= available:
    return
  blamed = culprit(needs, available)
  raise ConfigError(
    f'this run needs at least {total / _GIB:.1f} GiB of memory, more than the '
    f'{available / _GIB:.1f} GiB available: {blamed.setting} ({blamed.what}) alone takes '
    f'{blamed.nbytes / _GIB:.1f} GiB; allowed: a smaller {blamed.setting.split("=")[0]}, or '
    'run.check_memory=False to start anyway'
  )


def describe_needs(needs: list[Need]) -> str:
  return ', '.join(f'{need.what} {need.nbytes / 2**20:.0f} MiB' for need in needs)


def check_run(
  spec: RunSpec,
  dataset: FederatedDataset,
  model: Model,
  algorithm: Algorithm,
  model_setting: str,
) -> None:
  """Refuses (`ConfigError`) the run `spec` describes, of `model` on `dataset` with the built
  `algorithm`, if its estimated memory exceeds what is available, from abstract shapes only;
  `model_setting` names the setting that sizes the model."""
  params = abstract_params(model)
  model_bytes = tree_bytes(params)
  executor, settings = spec.executor, spec.algorithm.settings
  max_batch_tasks = executor.max_batch_tasks
  backend, _ = resolve_execution(executor.backend, executor.step_loop, devices=executor.devices)
  lazy = isinstance(dataset, LazyFederation) or spec.data.lazy
  needs = estimate(
    settings,
    num_clients=dataset.num_clients,
    model_bytes=model_bytes,
    data_bytes=0 if lazy else dataset.train_x.nbytes + dataset.train_y.nbytes,
    execution=Execution(
      max_batch_tasks=None
      if max_batch_tasks is None
      else resolve_max_batch_tasks(max_batch_tasks, model_bytes),
      # The vmap backend trains a whole batch at once; the loop backend `threads` tasks.
      training_at_once=None
      if backend == Backend.VMAP
      else resolve_threads(executor.threads, backend),
      sums_in_chunks=algorithm.aggregator.linear is not None,
      batch_size=spec.client.batch_size,
      example_bytes=training_bytes_per_example(model, params),
    ),
    model_setting=model_setting,
  )
  for selection in spec.transform_selections().values():  # e.g. error-feedback residuals
    held = getattr(selection.settings, 'held_models', None)
    for setting, copies, what in held(dataset.num_clients) if held is not None else []:
      needs.append(Need(setting, copies * model_bytes, what))
  needs += client_evaluation_needs(spec, dataset, model_bytes, lazy)
  check_fits(needs, available_bytes())


def client_evaluation_needs(
  spec: RunSpec, dataset: FederatedDataset, model_bytes: int, lazy: bool
) -> list[Need]:
  """Per-client evaluation's memory: the clients' test examples, and with personalization a
  second copy of the training data on the device and the models fine-tuned at once."""
  test = getattr(dataset, 'client_test', None)
  if test is None:
    return []
  needs = [
    Need(
      f'data.client_test={spec.data.client_test!r}',
      test.x.nbytes + test.y.nbytes,
      "the clients' test examples",
    )
  ]
  steps = spec.run.eval_personalization_steps
  if steps and not lazy:
    from fedsim_jax.metrics.client_evaluation import PERSONALIZATION_CHUNK

    needs.append(
      Need(
        f'run.eval_personalization_steps={steps}',
        dataset.train_x.nbytes + dataset.train_y.nbytes + 3 * PERSONALIZATION_CHUNK * model_bytes,
        'fine-tuning: the training data again and the models fine-tuned at once',
      )
    )
  return needs
