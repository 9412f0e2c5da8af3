"""Runs batches of client tasks: vmap or loop backends over one pure local-update function.

The runtime hands the executor every pending task whose inputs are known; the executor pads the
batch to a bucketed number of tasks and of local steps, runs it, and returns stacked results
(`Executor.run`). For a linear aggregation it can instead return only the weighted sum of the
tasks' deltas (`Executor.add_weighted_sum`), which the loop backend computes as the tasks train.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedsim_jax.client.local_update import ClientUpdate
from fedsim_jax.client.runner import local_step, run_local_training
from fedsim_jax.data.bucketing import round_up_to_bucket
from fedsim_jax.data.federated import BatchCursor, ClientDataArrays
from fedsim_jax.data.lazy import LazyFederation
from fedsim_jax.executor import cpu_pool
from fedsim_jax.executor.choice import Backend, StepLoop, jit
from fedsim_jax.models import Params
from fedsim_jax.str_enum import parse
from fedsim_jax.tree import add_weighted_rows, stack

BACKENDS = tuple(backend.value for backend in Backend)
# Tasks per program of `Executor.add_weighted_sum` on the loop backend: enough that a program's
# call costs little against its tasks, few enough that the shares of a round balance over the
# task threads (a round of 100 is 13 shares). Results depend on it (the order of the sum), so
# it is a constant, not a setting that follows the machine.
SUM_SHARE_TASKS = 8
STEP_LOOPS = tuple(step_loop.value for step_loop in StepLoop)


@dataclasses.dataclass(frozen=True)
class ClientTask:
  """One unit of client work.

  Attributes:
    client_id: which client trains.
    num_steps: local steps to run (>= 0).
    seed: task seed; the task's PRNG key is `fold_in(base_key, seed)`, so a result depends
      only on the task, never on which batch it was run in.
    start_params: parameters the client starts from (the model it downloaded).
    task_inputs: optional per-task pytree for the client objective (e.g. a proximal anchor);
      all tasks of one batch must have the same structure.
    stream: which base key the task key derives from when the executor holds several (one per
      simulation of a lockstep sweep, `base_key` of shape `[S, 2]`); 0 otherwise.
  """

  client_id: int
  num_steps: int
  seed: int
  start_params: Params
  task_inputs: Any = None
  stream: int = 0


@dataclasses.dataclass(frozen=True)
class TaskBatchResult:
  """Stacked results of a batch: row i belongs to the i-th task given to `Executor.run`.

  Attributes:
    deltas: pytree with leaves `[num_rows, ...]` (rows past `num_tasks` are padding).
    aux: dict of `[num_rows]` arrays (`train_loss`, `steps_run`).
    num_tasks: number of real tasks.
    row_offset: row of the first task; non-zero only in a view (below).
    view: whether this is one simulation's share of a batch run for several (a lockstep
      sweep): its tasks are rows `row_offset .. row_offset + num_tasks - 1`.
  """

  deltas: Params
  aux: dict[str, jax.Array]
  num_tasks: int
  row_offset: int = 0
  view: bool = False


class _TaskRows(NamedTuple):
  """A batch's tasks as program inputs, one row per task (`Executor._task_rows`)."""

  params: Params  # the start model, or each distinct one stacked ([V, ...])
  params_index: np.ndarray  # each row's start model in `params`
  client_ids: np.ndarray
  num_steps: np.ndarray
  seeds: np.ndarray
  streams: np.ndarray
  task_inputs: Any
  shared_params: bool  # every row starts from one model: `params` is not stacked


def _stream_key(base_key: jax.Array, stream: jax.Array) -> jax.Array:
  """The base key of `stream`: `base_key` itself, or its row when it stacks several."""
  return base_key[stream] if base_key.ndim == 2 else base_key


@functools.cache
def _task_threads(threads: int) -> concurrent.futures.ThreadPoolExecutor:
  """One process-wide pool per thread count: executors (a lockstep sweep builds several)
  share it instead of each holding idle threads."""
  return concurrent.futures.ThreadPoolExecutor(
    max_workers=threads, thread_name_prefix='fedsim-task'
  )


class Executor:
  """Executes client tasks in batches.

  Args:
    client_update: the pure local objective/optimizer.
    data: device arrays of the federation, or a `data.lazy.LazyFederation` whose examples stay
      on the host: each batch then runs on a block holding only its own clients, with results
      identical to the eager federation's (`block_shapes` lists the block shapes, each of which
      compiles its programs once more).
    base_key: PRNG key all task keys derive from.
    backend: a `Backend` or its name: 'vmap' (one program over all tasks) or 'loop' (a Python
      loop over tasks, each a call of one jitted per-task program). On XLA:CPU the loop is often faster for
      convolutional models; on accelerators vmap is (docs/design-notes.md, "Backends").
    sampling: client batch sampling mode (`data.federated.SAMPLING_MODES`).
    unroll: `lax.scan` unroll factor over local steps. The loop backend runs each task's exact
      step count in one program (a `lax.while_loop`) when `unroll` is 1, and a `lax.scan` over
      the bucketed step count (one program per bucket) otherwise.
    bucket_bits: significant bits kept when bucketing task counts and step counts.
    devices: number of local devices the task axis is sharded over (vmap backend): a
      `jax.sharding.Mesh` with one axis 'tasks'; the federation and start models are
      replicated, task rows are padded to a multiple of `devices`, and each device trains its
      share of the rows. Results do not depend on it (each task's key derives from its seed).
      In a multi-process run (`fedsim_jax.distributed`): 1 (each process trains every task on
      its first device) or `jax.device_count()` (the rows are sharded over every device of
      every process). On XLA:CPU the process's thread pool must hold `(host_threads + 1)` threads
      per device of the process, else `ValueError` (`fedsim_jax.executor.cpu_pool`).
    threads: loop backend: how many tasks run at once, each called from its own host thread
      and waited for there. XLA:CPU runs a small client step on about one core (a B = 32 MLP
      step gains 1.3x from a second core, a B = 1,024 one 1.9x), and calls from one thread run
      in turn, so on a 2-core CPU two tasks at once train about 1.5x more examples per second
      (docs/results/performance.md). Results do not depend on it: every task is the same
      program on the same inputs, and rows keep the order of `tasks`.
    host_threads: how many host threads launch programs on the results at once (a lockstep
      sweep's simulations; 1 otherwise): with several XLA:CPU devices, it sizes the thread pool
      the devices need.
    client_update_for: builds the client update from numeric hyperparameters given as traced
      scalars by name (e.g. the client optimizer's `learning_rate`); with
      `stream_hyperparameters`, each task trains with the update built from its stream's
      values instead of `client_update`. The values must already be valid (checked where the
      config is), and every update it builds must have the structure of `client_update`.
    stream_hyperparameters: each stream's values (arrays `[S]` by name, one row per base key of
      a lockstep sweep's shared executor): arguments of the compiled programs, never constants
      of them, so one program serves every value. Needs `client_update_for` and whole-task
      programs (not `step_loop='host'`).
  """

  def __init__(
    self,
    client_update: ClientUpdate,
    data: ClientDataArrays | LazyFederation,
    base_key: jax.Array,
    *,
    backend: str = Backend.VMAP,
    sampling: str = 'shuffle',
    unroll: int | bool = 1,
    bucket_bits: int = 3,
    step_loop: str = StepLoop.SCAN,
    devices: int = 1,
    threads: int = 1,
    host_threads: int = 1,
    client_update_for: Callable[[Mapping[str, jax.Array]], ClientUpdate] | None = None,
    stream_hyperparameters: Mapping[str, Any] | None = None,
  ) -> None:
    backend = parse(Backend, backend, 'executor.backend')
    step_loop = parse(StepLoop, step_loop, 'executor.step_loop')
    if step_loop is StepLoop.HOST and backend is not Backend.LOOP:
      raise ValueError("executor.step_loop='host' needs executor.backend='loop'")
    if jax.process_count() > 1:
      # Several processes (fedsim_jax.distributed): shard over every process's devices, or
      # have each process train every task on its own first device.
      allowed = (1, jax.device_count())
      if devices not in allowed:
        raise ValueError(
          f'executor.devices={devices!r}; allowed in a {jax.process_count()}-process run: '
          f'{allowed[0]} or {allowed[1]} (every device of every process)'
        )
    available = jax.device_count() if jax.process_count() > 1 else jax.local_device_count()
    if not isinstance(devices, int) or not 1 <= devices <= available:
      raise ValueError(f'executor.devices={devices!r}; allowed: 1..{available} (local devices)')
    if devices > 1 and backend is not Backend.VMAP:
      raise ValueError(f"executor.devices={devices} needs executor.backend='vmap'")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
      raise ValueError(f'executor.threads={threads!r}; allowed: an integer >= 1')
    if threads > 1 and backend is not Backend.LOOP:
      raise ValueError(f"executor.threads={threads} needs executor.backend='loop'")
    if isinstance(host_threads, bool) or not isinstance(host_threads, int) or host_threads < 1:
      raise ValueError(f'host_threads={host_threads!r}; allowed: an integer >= 1')
    if stream_hyperparameters is not None and client_update_for is None:
      raise ValueError('stream_hyperparameters needs client_update_for')
    if stream_hyperparameters is not None and step_loop is StepLoop.HOST:
      raise ValueError("stream_hyperparameters needs executor.step_loop='scan'")
    self.threads = threads
    self.devices = devices
    self.host_threads = host_threads
    mesh_devices = jax.devices() if jax.process_count() > 1 else jax.local_devices()
    local_mesh = [d for d in mesh_devices[:devices] if d.process_index == jax.process_index()]
    if devices > 1 and local_mesh[0].platform == 'cpu':  # too few threads deadlock XLA:CPU
      cpu_pool.check(devices, len(local_mesh), host_threads)
    self._mesh = Mesh(np.array(mesh_devices[:devices]), ('tasks',)) if devices > 1 else None
    if self._mesh is not None:
      base_key = jax.device_put(base_key, NamedSharding(self._mesh, PartitionSpec()))
    # A lazy federation keeps its examples on the host: each batch runs on a block of just its
    # own clients (`LazyFederation.gather_tasks`), which replaces `data` before the batch.
    self.federation = data if isinstance(data, LazyFederation) else None
    self.block_shapes: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    if self.federation is not None:
      data = self.federation.gather([0]).data
    if self._mesh is not None:  # replicate what every task reads
      data = jax.device_put(data, NamedSharding(self._mesh, PartitionSpec()))
    self.step_loop = step_loop
    self.client_update = client_update
    self.client_update_for = client_update_for
    # Each stream's hyperparameters, passed to the programs as an argument (None: every task
    # trains with `client_update`).
    self.stream_hyperparameters = None
    if stream_hyperparameters is not None:
      self.stream_hyperparameters = self.replicate(
        {name: jnp.asarray(values, jnp.float32) for name, values in stream_hyperparameters.items()}
      )
    self.data = data
    self.base_key = base_key
    self.backend = backend
    self.bucket_bits = bucket_bits
    # Loop backend, whole-task programs: one program for every step count unless unrolled.
    self._exact_steps = unroll == 1 and unroll is not True
    self._signatures: set[tuple] = set()
    self.tasks_run = 0
    self.steps_run = 0
    self.steps_computed = 0  # including masked padding steps: the cost actually paid

    def one_task(
      params,
      client_id,
      num_steps,
      seed,
      stream,
      task_inputs,
      data,
      base_key,
      hyperparameters,
      max_steps,
    ):
      key = jax.random.fold_in(_stream_key(base_key, stream), seed)
      update = client_update
      if hyperparameters is not None:  # the update of the task's stream's values
        assert client_update_for is not None
        update = client_update_for(
          {name: values[stream] for name, values in hyperparameters.items()}
        )
      return run_local_training(
        update,
        data,
        params,
        client_id,
        num_steps,
        key,
        task_inputs,
        max_steps=max_steps,
        sampling=sampling,
        unroll=unroll,
      )

    def many_tasks(
      params,
      params_index,
      client_ids,
      num_steps,
      seeds,
      streams,
      task_inputs,
      data,
      base_key,
      hyperparameters,
      max_steps,
      shared_params,
    ):
      if not shared_params:
        # `params` holds each distinct start model once ([V, ...]); tasks pick theirs.
        params = jax.tree_util.tree_map(lambda p: p[params_index], params)
      in_axes = (
        None if shared_params else 0,
        0,
        0,
        0,
        0,
        None if task_inputs is None else 0,
        None,
        None,
        None,
        None,
      )
      return jax.vmap(one_task, in_axes=in_axes)(
        params,
        client_ids,
        num_steps,
        seeds,
        streams,
        task_inputs,
        data,
        base_key,
        hyperparameters,
        max_steps,
      )

    def summed_share(
      total, coefficients, params, params_index, client_ids, num_steps, seeds, streams,
      task_inputs, data, base_key, hyperparameters, shared_params,
    ):  # fmt: skip
      # total + sum_k coefficients[k] * delta_k over a share of tasks run one after another in
      # one program (`add_weighted_sum`), each row computed as `one_task` alone computes it.
      def add_row(total, row):
        coefficient, index, client_id, steps, seed, stream, inputs = row
        start = params
        if not shared_params:
          start = jax.tree_util.tree_map(lambda p: p[index], params)
        delta, _ = one_task(
          start, client_id, steps, seed, stream, inputs, data, base_key, hyperparameters, None
        )
        return jax.tree_util.tree_map(lambda t, d: t + coefficient * d, total, delta), None

      rows = (coefficients, params_index, client_ids, num_steps, seeds, streams, task_inputs)
      return jax.lax.scan(add_row, total, rows)[0]

    self._one_task = jit(one_task, static_argnames=('max_steps',))
    self._summed_share = jit(summed_share, static_argnames=('shared_params',))
    self._init = jit(
      lambda start_params, task_inputs, data, client_id, key: (
        client_update.init(start_params, task_inputs),
        BatchCursor.start(data, client_id, key, client_update.batch_size, sampling),
      )
    )
    self._step = jit(
      lambda state, cursor, data, step, task_inputs: local_step(
        client_update, data, state, cursor, step, task_inputs
      )
    )
    self._final = jit(client_update.final)
    self._task_key = jit(
      lambda base_key, stream, seed: jax.random.fold_in(_stream_key(base_key, stream), seed)
    )
    self._many_tasks = jit(many_tasks, static_argnames=('max_steps', 'shared_params'))

  @property
  def num_compiled_programs(self) -> int:
    """Distinct program signatures executed so far (each compiled once)."""
    return len(self._signatures)

  def run(self, tasks: Sequence[ClientTask]) -> TaskBatchResult:
    """Runs `tasks` and returns their stacked results (row i = tasks[i])."""
    if not tasks:
      raise ValueError('Executor.run needs at least one task')
    if self.federation is not None:
      block, tasks = self.federation.gather_tasks(tasks)
      self.block_shapes.add((tuple(block.x.shape), tuple(block.indices.shape)))
      self.data = self.replicate(block)
    self.tasks_run += len(tasks)
    self.steps_run += sum(t.num_steps for t in tasks)
    if self.backend is Backend.VMAP:
      return self._run_vmap(tasks)
    return self._run_loop(tasks)

  @property
  def sums_tasks(self) -> bool:
    """Whether `add_weighted_sum` runs tasks summing as they go (the loop backend with its
    default whole-task programs of exact step counts); else it stacks `run`'s results."""
    return self.backend is Backend.LOOP and self.step_loop is StepLoop.SCAN and self._exact_steps

  def add_weighted_sum(
    self, total: Params, tasks: Sequence[ClientTask], coefficients: np.ndarray
  ) -> Params:
    """`total + sum_k coefficients[k] * delta_k` over `tasks`, without returning their results.

    What a linear aggregation of a round needs (`runtime.summed_aggregation`). With
    `sums_tasks`, the tasks run in shares of `SUM_SHARE_TASKS`, each share one program that
    trains its tasks one after another and adds each delta to a running sum, so a round's
    deltas are never held or stacked together; the shares run `threads` at a time and their
    sums are added in share order, so the result does not depend on `threads`. Otherwise the
    deltas of `run(tasks)` are summed. Either way the sum adds in another order than a
    reduction over stacked deltas: results differ from one in float rounding.
    """
    if not tasks:
      raise ValueError('Executor.add_weighted_sum needs at least one task')
    coefficients = np.asarray(coefficients, np.float32)
    if not self.sums_tasks:
      result = self.run(tasks)
      padded = np.zeros(jax.tree_util.tree_leaves(result.deltas)[0].shape[0], np.float32)
      padded[: len(tasks)] = coefficients
      return add_weighted_rows(total, padded, result.deltas)
    if self.federation is not None:
      block, tasks = self.federation.gather_tasks(tasks)
      self.block_shapes.add((tuple(block.x.shape), tuple(block.indices.shape)))
      self.data = self.replicate(block)
    self.tasks_run += len(tasks)
    self.steps_run += sum(t.num_steps for t in tasks)
    self.steps_computed += sum(t.num_steps for t in tasks)
    size = SUM_SHARE_TASKS
    zeros = jax.tree_util.tree_map(jnp.zeros_like, total)

    def run_share(start: int) -> Params:
      share = tasks[start : start + size]
      rows = self._task_rows(share, size)
      weights = np.zeros(size, np.float32)
      weights[: len(share)] = coefficients[start : start + size]
      signature = ('summed_share', size, rows.shared_params, int(rows.params_index.max()))
      self._signatures.add((*signature, jax.tree_util.tree_structure(rows.task_inputs)))
      return jax.block_until_ready(
        self._summed_share(
          zeros,
          weights,
          rows.params,
          rows.params_index,
          rows.client_ids,
          rows.num_steps,
          rows.seeds,
          rows.streams,
          rows.task_inputs,
          self.data,
          self.base_key,
          self.stream_hyperparameters,
          shared_params=rows.shared_params,
        )
      )

    starts = range(0, len(tasks), size)
    if self.threads > 1 and len(starts) > 1:
      sums = list(_task_threads(self.threads).map(run_share, starts))
    else:
      sums = [run_share(start) for start in starts]
    return _add_in_order(total, sums)

  def _shard_rows(self, tree: Any) -> Any:
    """Places per-row arrays with their leading axis split over the mesh."""
    if self._mesh is None or tree is None:
      return tree
    return jax.device_put(tree, NamedSharding(self._mesh, PartitionSpec('tasks')))

  def replicate(self, tree: Any) -> Any:
    """Places `tree` on every device of the executor's mesh (unchanged with one device)."""
    if self._mesh is None:
      return tree
    return jax.device_put(tree, NamedSharding(self._mesh, PartitionSpec()))

  def _task_rows(self, tasks: Sequence[ClientTask], num_rows: int) -> _TaskRows:
    """`tasks` as program inputs of `num_rows` rows; padding rows run client 0 for zero steps
    and their results are never read."""
    padding = num_rows - len(tasks)
    client_ids = np.array([t.client_id for t in tasks] + [0] * padding, np.int32)
    num_steps = np.array([t.num_steps for t in tasks] + [0] * padding, np.int32)
    seeds = np.array([t.seed for t in tasks] + [0] * padding, np.uint32)
    streams = np.array([t.stream for t in tasks] + [0] * padding, np.int32)
    # Tasks dispatched at the same server version share one start-params object: stack each
    # distinct one once (a few versions are in flight, not one per task).
    distinct: dict[int, int] = {}
    models: list[Params] = []
    params_index = np.zeros(num_rows, np.int32)
    for i, task in enumerate(tasks):
      key = id(task.start_params)
      if key not in distinct:
        distinct[key] = len(models)
        models.append(task.start_params)
      params_index[i] = distinct[key]
    shared = len(models) == 1
    if shared:
      params = models[0]
    else:
      num_models = round_up_to_bucket(len(models), self.bucket_bits)
      params = stack(models + [models[0]] * (num_models - len(models)))
    task_inputs = None
    if tasks[0].task_inputs is not None:
      task_inputs = stack([t.task_inputs for t in tasks] + [tasks[0].task_inputs] * padding)
    return _TaskRows(
      params, params_index, client_ids, num_steps, seeds, streams, task_inputs, shared
    )

  def _run_vmap(self, tasks: Sequence[ClientTask]) -> TaskBatchResult:
    num_rows = round_up_to_bucket(len(tasks), self.bucket_bits)
    num_rows = -(-num_rows // self.devices) * self.devices  # whole rows per device
    max_steps = round_up_to_bucket(max(t.num_steps for t in tasks), self.bucket_bits)
    rows = self._task_rows(tasks, num_rows)
    params, shared, task_inputs = rows.params, rows.shared_params, rows.task_inputs
    self._signatures.add(
      (
        'vmap',
        num_rows,
        max_steps,
        None if shared else jax.tree_util.tree_leaves(params)[0].shape[0],
        jax.tree_util.tree_structure(task_inputs),
      )
    )
    self.steps_computed += num_rows * max_steps
    params = self.replicate(params)
    params_index, client_ids, num_steps, seeds, streams, task_inputs = self._shard_rows(
      (rows.params_index, rows.client_ids, rows.num_steps, rows.seeds, rows.streams, task_inputs)
    )
    deltas, aux = self._many_tasks(
      params,
      params_index,
      client_ids,
      num_steps,
      seeds,
      streams,
      task_inputs,
      self.data,
      self.base_key,
      self.stream_hyperparameters,
      max_steps=max_steps,
      shared_params=shared,
    )
    return TaskBatchResult(deltas=deltas, aux=aux, num_tasks=len(tasks))

  def _run_host_steps(self, task: ClientTask) -> tuple[Params, dict[str, jax.Array]]:
    key = self._task_key(self.base_key, np.int32(task.stream), np.uint32(task.seed))
    state, cursor = self._init(
      task.start_params, task.task_inputs, self.data, np.int32(task.client_id), key
    )
    for step in range(task.num_steps):
      state, cursor = self._step(state, cursor, self.data, np.int32(step), task.task_inputs)
    return self._final(state, task.start_params)

  def _loop_max_steps(self, num_steps: int) -> int | None:
    return None if self._exact_steps else round_up_to_bucket(num_steps, self.bucket_bits)

  def _run_whole_task(self, task: ClientTask) -> tuple[Params, dict[str, jax.Array]]:
    return self._one_task(
      task.start_params,
      np.int32(task.client_id),
      np.int32(task.num_steps),
      np.uint32(task.seed),
      np.int32(task.stream),
      task.task_inputs,
      self.data,
      self.base_key,
      self.stream_hyperparameters,
      max_steps=self._loop_max_steps(task.num_steps),
    )

  def _run_loop(self, tasks: Sequence[ClientTask]) -> TaskBatchResult:
    if self.step_loop is StepLoop.HOST:
      self._signatures.add(('host_steps',))
      self.steps_computed += sum(t.num_steps for t in tasks)
      run_task = self._run_host_steps
    else:
      for task in tasks:
        max_steps = self._loop_max_steps(task.num_steps)
        self._signatures.add(('loop', max_steps, jax.tree_util.tree_structure(task.task_inputs)))
        self.steps_computed += task.num_steps if max_steps is None else max_steps
      run_task = self._run_whole_task
    if self.threads > 1 and len(tasks) > 1:
      # Each thread waits for its task: that is what lets XLA:CPU run two at once.
      results = list(
        _task_threads(self.threads).map(lambda task: jax.block_until_ready(run_task(task)), tasks)
      )
    else:
      results = [run_task(task) for task in tasks]
    deltas, auxes = zip(*results)
    return TaskBatchResult(deltas=stack(deltas), aux=stack(auxes), num_tasks=len(tasks))


@jax.jit
def _add_in_order(total: Params, sums: Sequence[Params]) -> Params:
  """total + sums[0] + sums[1] + ..., added in that order (one program, not one op per leaf)."""
  for part in sums:
    total = jax.tree_util.tree_map(jnp.add, total, part)
  return total


class NoTrainingExecutor:
  """Returns zero deltas without training: simulates scheduling and latency only.

  Used to measure or test the event loop alone (a scheduling-only run): results keep the shape
  of real ones, so every scheduler and aggregator runs unchanged.
  """

  def __init__(self, params_template: Params, bucket_bits: int = 3) -> None:
    self.params_template = params_template
    self.bucket_bits = bucket_bits
    self.tasks_run = 0
    self.steps_run = 0
    self.steps_computed = 0
    self.num_compiled_programs = 0
    self._zeros: dict[int, tuple[Params, dict[str, jax.Array]]] = {}

  def run(self, tasks: Sequence[ClientTask]) -> TaskBatchResult:
    self.tasks_run += len(tasks)
    self.steps_run += sum(t.num_steps for t in tasks)
    num_rows = round_up_to_bucket(len(tasks), self.bucket_bits)
    if num_rows not in self._zeros:
      deltas = jax.tree_util.tree_map(
        lambda p: jnp.zeros((num_rows, *p.shape), p.dtype), self.params_template
      )
      aux = {'train_loss': jnp.zeros(num_rows), 'steps_run': jnp.zeros(num_rows, jnp.int32)}
      self._zeros[num_rows] = (deltas, aux)
    deltas, aux = self._zeros[num_rows]
    return TaskBatchResult(deltas=deltas, aux=aux, num_tasks=len(tasks))
