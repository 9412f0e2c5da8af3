"""Several simulations run together: shared batches (vmap) or side by side (loop backend).

A sweep over seeds (or over configs that share a model and client objective) runs many small
simulations whose executor batches are each too small to keep the machine busy.

Shared batches (`run_lockstep`, for the vmap backend): every simulation's event loop runs in its
own thread; whenever a simulation needs task results it submits its pending tasks and waits.
Once every unfinished simulation is waiting, the tasks of all of them run as ONE executor batch
over the union of their federations, and each simulation gets its rows back (a
`TaskBatchResult` view). A simulation paused between events (to write a checkpoint) is not
waiting: the others wait for it, so pauses never change which tasks share a batch. Results equal the sequential runs': a simulation submits exactly the
batches it would have run alone (deferred execution groups tasks by the simulation's own
dependencies, never by timing), a task's key is `fold_in(base_key of its simulation, task
seed)`, and a client's batches depend only on its own rows of the index table (with JAX's
default partitionable threefry, random draws are prefix-stable, so a wider union table samples
the same examples). The scheduling (versions, virtual times, which updates aggregate) is
identical; the arithmetic is identical for small shared batches, while large ones can take other
XLA:CPU matrix-multiply paths whose float rounding differs in the last bits (measured: 8 seeds x
5 clients, MLP, losses equal to about 1e-5 relative after 20 versions).

Simulations whose client updates differ only in the client optimizer's values (a sweep over
client learning rates) share a batch too: the shared executor takes each simulation's values as
arguments of its one program (`Executor(stream_hyperparameters=...)`), and each task trains with
its simulation's. Simulations whose client programs differ (a client term's strength, a weight
decay on or off) cannot share a batch, which runs one program: `run_lockstep_groups` gives each
group of simulations that share a client program its own `SharedExecution`, and the groups run
beside each other; a simulation alone in its group keeps its own executor, and computes exactly
its run alone.

Side by side (`run_concurrently`, for the loop backend): a task is one program call whatever
batch it is in, so a shared batch gains nothing. Each simulation keeps its own executor and all
run at once; their tasks share the process-wide task threads, and one simulation's host work
overlaps the others' training. Results are the sequential runs' bit for bit.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedsim_jax.data.federated import ClientDataArrays, FederatedDataset
from fedsim_jax.executor import ClientTask, Executor, TaskBatchResult


def union_client_arrays(datasets: Sequence[FederatedDataset]) -> tuple[ClientDataArrays, list[int]]:
  """One `ClientDataArrays` holding every federation's clients, and each one's client offset.

  Federations that share their training arrays (the same loaded dataset, partitioned by
  different seeds) share them in the union too; others are concatenated.
  """
  if not datasets:
    raise ValueError('union_client_arrays needs at least one federation')
  xs: list[np.ndarray] = []
  ys: list[np.ndarray] = []
  row_offsets: list[int] = []
  for dataset in datasets:
    for i, x in enumerate(xs):
      if dataset.train_x is x and dataset.train_y is ys[i]:
        row_offsets.append(row_offsets[i])
        break
    else:
      row_offsets.append(sum(len(x) for x in xs))
      xs.append(dataset.train_x)
      ys.append(dataset.train_y)
  width = max(d.client_indices.shape[1] for d in datasets)
  tables, client_offsets, total = [], [], 0
  for dataset, offset in zip(datasets, row_offsets):
    table = np.zeros((dataset.num_clients, width), np.int32)
    table[:, : dataset.client_indices.shape[1]] = dataset.client_indices + offset
    tables.append(table)
    client_offsets.append(total)
    total += dataset.num_clients
  arrays = ClientDataArrays(
    x=jnp.asarray(xs[0] if len(xs) == 1 else np.concatenate(xs)),
    y=jnp.asarray(ys[0] if len(ys) == 1 else np.concatenate(ys)),
    indices=jnp.asarray(np.concatenate(tables)),
    sizes=jnp.asarray(np.concatenate([d.client_sizes for d in datasets])),
  )
  return arrays, client_offsets


class SharedExecution:
  """Collects the pending tasks of several simulations and runs them as one batch."""

  def __init__(self, executor: Executor, num_simulations: int) -> None:
    self.executor = executor
    self.batches = 0
    self._condition = threading.Condition()
    self._pending: dict[int, list[ClientTask]] = {}
    self._results: dict[int, TaskBatchResult] = {}
    self._running = set(range(num_simulations))
    self._error: BaseException | None = None

  def submit(self, simulation: int, tasks: list[ClientTask]) -> TaskBatchResult:
    """Blocks until every running simulation has submitted (or finished), then returns this
    simulation's rows of the shared batch."""
    with self._condition:
      self._pending[simulation] = tasks
      self._run_when_all_wait()
      while simulation not in self._results and self._error is None:
        self._condition.wait()
      if self._error is not None:
        raise RuntimeError('another simulation of the lockstep sweep failed') from self._error
      return self._results.pop(simulation)

  def finish(self, simulation: int, error: BaseException | None = None) -> None:
    """Marks a simulation done (or failed: the others stop with an error too)."""
    with self._condition:
      self._running.discard(simulation)
      if error is not None and self._error is None:
        self._error = error
        self._condition.notify_all()
        return
      self._run_when_all_wait()

  def fail(self, error: BaseException) -> None:
    """Stops every simulation of this execution with an error (a simulation of another
    execution beside it failed)."""
    with self._condition:
      if self._error is None:
        self._error = error
      self._condition.notify_all()

  def _run_when_all_wait(self) -> None:
    if self._error is not None:
      return
    if not self._pending or set(self._pending) != self._running:
      return
    order = sorted(self._pending)
    tasks = [task for s in order for task in self._pending[s]]
    try:
      batch = self.executor.run(tasks)
    except BaseException as error:  # surface it in every waiting simulation
      self._error = error
      self._condition.notify_all()
      raise
    self.batches += 1
    offset = 0
    for s in order:
      count = len(self._pending[s])
      self._results[s] = dataclasses.replace(batch, num_tasks=count, row_offset=offset, view=True)
      offset += count
    self._pending.clear()
    self._condition.notify_all()


class LockstepClientExecutor:
  """One simulation's executor in a lockstep sweep: renumbers its clients into the union and
  tags its tasks with its key stream, then waits for the shared batch."""

  def __init__(self, shared: SharedExecution, simulation: int, client_offset: int) -> None:
    self.shared = shared
    self.simulation = simulation
    self.client_offset = client_offset
    self.tasks_run = 0
    self.steps_run = 0

  @property
  def steps_computed(self) -> int:
    return self.shared.executor.steps_computed

  @property
  def num_compiled_programs(self) -> int:
    return self.shared.executor.num_compiled_programs

  def run(self, tasks: Sequence[ClientTask]) -> TaskBatchResult:
    self.tasks_run += len(tasks)
    self.steps_run += sum(t.num_steps for t in tasks)
    mapped = [
      dataclasses.replace(t, client_id=t.client_id + self.client_offset, stream=self.simulation)
      for t in tasks
    ]
    return self.shared.submit(self.simulation, mapped)


def lockstep_executors(
  executor_factory: Any, datasets: Sequence[FederatedDataset], base_keys: Sequence[jax.Array]
) -> tuple[SharedExecution, list[LockstepClientExecutor]]:
  """Builds the shared executor over the union of `datasets` and one client executor each.

  Args:
    executor_factory: `(data, base_key) -> Executor`, e.g. a partial of `Executor` with the
      client update and backend settings shared by all simulations.
    datasets: each simulation's federation.
    base_keys: each simulation's training key (what its own `Executor` would get).
  """
  # jax.config's options are attributes it creates at run time, unknown to type checkers.
  if not jax.config.jax_threefry_partitionable:  # type: ignore[attr-defined]
    raise ValueError(
      'lockstep sweeps need jax_threefry_partitionable=True (the default), so '
      'that union index tables sample the same examples'
    )
  data, offsets = union_client_arrays(datasets)
  shared = SharedExecution(executor_factory(data, jnp.stack(list(base_keys))), len(datasets))
  return shared, [LockstepClientExecutor(shared, i, offset) for i, offset in enumerate(offsets)]


def _drive_in_threads(
  drivers: Sequence[Callable[[], Any]],
  on_end: Callable[[int, BaseException | None], None] | None = None,
  first_alone: threading.Event | None = None,
) -> list[Any]:
  """Calls every driver in its own thread; returns their results, or re-raises the first
  failure once every thread has ended.

  `on_end(i, error)` is called when driver i returns (error None) or fails. With
  `first_alone`, the other drivers start once it is set, or once driver 0 has ended.
  """
  results: list[Any] = [None] * len(drivers)
  errors: list[BaseException] = []

  def drive(index: int) -> None:
    error = None
    try:
      results[index] = drivers[index]()
    except BaseException as e:  # noqa: BLE001 - handed to the caller below
      errors.append(e)
      error = e
    finally:
      if on_end is not None:
        on_end(index, error)
      if index == 0 and first_alone is not None:
        first_alone.set()

  threads = [
    threading.Thread(target=drive, args=(i,), name=f'lockstep-{i}', daemon=True)
    for i in range(len(drivers))
  ]
  threads[0].start()
  if first_alone is not None:
    first_alone.wait()
  for thread in threads[1:]:
    thread.start()
  for thread in threads:
    thread.join()
  if errors:
    first = next((e for e in errors if not isinstance(e, RuntimeError)), errors[0])
    raise first
  return results


def run_lockstep(drivers: Sequence[Callable[[], Any]], shared: SharedExecution) -> list[Any]:
  """Calls every driver in its own thread; driver i runs the simulation whose executor is
  `shared`'s simulation i (one run, e.g. `PreparedRun.run_until_stopped`, which may pause
  its simulation to checkpoint: the others wait for it at the next shared batch). Returns
  the drivers' results; re-raises the first failure."""
  return run_lockstep_groups(drivers, [(shared, i) for i in range(len(drivers))])


def run_lockstep_groups(
  drivers: Sequence[Callable[[], Any]], places: Sequence[tuple[SharedExecution, int] | None]
) -> list[Any]:
  """`run_lockstep` over several shared executions at once: driver i runs the simulation
  whose executor is simulation `places[i][1]` of `places[i][0]`, or (`places[i]` None) one
  with an executor of its own. Each execution batches its own simulations' tasks; they and
  the simulations on their own run beside each other (e.g. the points of a sweep whose client
  updates differ, each point's seeds sharing batches). A failure stops the simulations of
  every execution; the first is re-raised."""
  executions = list({id(place[0]): place[0] for place in places if place is not None}.values())

  def on_end(index: int, error: BaseException | None) -> None:
    place = places[index]
    if place is not None:
      place[0].finish(place[1], error)
    if error is not None:
      for other in executions:
        if place is None or other is not place[0]:
          other.fail(error)

  return _drive_in_threads(drivers, on_end=on_end)


def run_concurrently(drivers: Sequence[Callable[[], Any]], first_simulation: Any) -> list[Any]:
  """Calls every driver at the same time, each running one simulation with its own executor;
  returns their results and re-raises the first failure.

  For the loop backend, whose tasks are one program call each: the simulations' tasks share
  the process-wide task threads (`Executor(threads=...)`) as they come, and one simulation's
  host work (scheduling, aggregation, evaluation) overlaps the others' training. Results are
  those of the sequential runs bit for bit: every simulation keeps its own executor, and a
  task's result never depends on what runs beside it. Driver 0 runs alone until its
  simulation, `first_simulation`, has made a server version (or driver 0 has ended), so that
  the others find its programs compiled (`fedsim_jax.compilation_cache`) instead of all
  compiling them at once.
  """
  first_version = threading.Event()
  on_version = first_simulation.on_version

  def on_first_version(sim: Any) -> None:
    sim.on_version = on_version
    try:
      if on_version is not None:
        on_version(sim)
    finally:
      first_version.set()

  first_simulation.on_version = on_first_version
  try:
    return _drive_in_threads(drivers, first_alone=first_version)
  finally:
    first_simulation.on_version = on_version
