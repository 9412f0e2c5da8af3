"""The virtual-time runtime: an event loop that schedulers drive and that defers training.

A scheduler reacts to events (`start`, `on_arrival`, `on_timer`) by calling the simulation:
`dispatch` a client task, `set_timer`, `apply_updates`. Dispatching computes the task's duration
from the latency model and queues its arrival; the training itself is deferred: the task is
computed only when its result is first needed (typically at aggregation), together with every
other pending task, in one executor batch (DESIGN.md, "deferred batched execution").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol, Sequence

import jax
import numpy as np

from fedsim_jax.executor import ClientTask, Executor
from fedsim_jax.models import Params
from fedsim_jax.runtime.events import EventKind, EventQueue
from fedsim_jax.runtime.latency import LatencyModel
from fedsim_jax.runtime.updates import Aggregator, ResultRef, UpdateBatch, stack_results


@dataclasses.dataclass(eq=False)
class TaskHandle:
  """A dispatched client task as the scheduler sees it.

  Attributes:
    task_id: dispatch order (also the task's PRNG seed).
    client_id, num_steps: what was asked.
    version: server version of the model the client downloaded (staleness is measured
      against it).
    dispatch_time, arrival_time: virtual seconds.
    metadata: free-form scheduler bookkeeping.
  """

  task_id: int
  client_id: int
  num_steps: int
  version: int
  dispatch_time: float
  arrival_time: float
  task: ClientTask
  metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
  result_ref: ResultRef | None = None

  @property
  def computed(self) -> bool:
    return self.result_ref is not None


class Scheduler(Protocol):
  """Host-side policy: who trains, how much, and when to aggregate."""

  def start(self, sim: 'Simulation') -> None:
    ...

  def on_arrival(self, sim: 'Simulation', handle: TaskHandle) -> None:
    ...

  def on_timer(self, sim: 'Simulation', payload: Any) -> None:
    ...


@dataclasses.dataclass
class StopCondition:
  """The run stops at the first limit reached (None = no limit)."""

  max_versions: int | None = None
  max_virtual_time: float | None = None
  max_client_updates: int | None = None

  def reached(self, sim: 'Simulation') -> bool:
    return ((self.max_versions is not None and sim.version >= self.max_versions)
            or (self.max_virtual_time is not None and sim.now >= self.max_virtual_time)
            or (self.max_client_updates is not None
                and sim.client_updates >= self.max_client_updates))


EvalCallback = Callable[['Simulation'], None]


class Simulation:
  """Runs one federated simulation over virtual time.

  Args:
    executor: runs client tasks.
    scheduler: the host-side policy.
    aggregator: the jitted server update.
    latency: task durations.
    init_params: initial global model.
    client_sizes: `[num_clients]` examples per client (schedulers weight by it).
    rng: the scheduler's numpy generator (client sampling and other policy randomness).
    deferred: compute tasks lazily in batches (True) or one at a time at dispatch (False);
      both give the same results.
    on_version: called after every server update (evaluation, logging).
    bucket_bits: bucketing of aggregation batch sizes.
  """

  def __init__(self, *, executor: Executor, scheduler: Scheduler, aggregator: Aggregator,
               latency: LatencyModel, init_params: Params, client_sizes: np.ndarray,
               rng: np.random.Generator, deferred: bool = True,
               on_version: EvalCallback | None = None, bucket_bits: int = 3):
    self.executor = executor
    self.scheduler = scheduler
    self.aggregator = aggregator
    self.latency = latency
    self.client_sizes = np.asarray(client_sizes)
    self.rng = rng
    self.deferred = deferred
    self.on_version = on_version
    self.bucket_bits = bucket_bits
    self._apply = jax.jit(aggregator.apply)
    self.server_state = aggregator.init(init_params)
    self.queue = EventQueue()
    self.now = 0.0
    self.version = 0
    self.client_updates = 0   # arrived client tasks
    self.gradient_steps = 0   # local steps of arrived tasks
    self.executor_batches = 0
    self._pending: list[TaskHandle] = []
    self._next_task_id = 0
    self._started = False

  @property
  def num_clients(self) -> int:
    return int(self.client_sizes.shape[0])

  @property
  def params(self) -> Params:
    """The current global model."""
    return self.server_state.params

  # ---- Scheduler API ---------------------------------------------------------------------

  def dispatch(self, client_id: int, num_steps: int, *, start_params: Params | None = None,
               task_inputs: Any = None, metadata: dict[str, Any] | None = None) -> TaskHandle:
    """Sends the current (or given) model to a client for `num_steps` local steps."""
    if num_steps < 0:
      raise ValueError(f'num_steps must be >= 0, got {num_steps}')
    task_id = self._next_task_id
    self._next_task_id += 1
    task = ClientTask(client_id=int(client_id), num_steps=int(num_steps), seed=task_id,
                      start_params=self.params if start_params is None else start_params,
                      task_inputs=task_inputs)
    duration = self.latency.task_duration(int(client_id), int(num_steps))
    handle = TaskHandle(task_id=task_id, client_id=int(client_id), num_steps=int(num_steps),
                        version=self.version, dispatch_time=self.now,
                        arrival_time=self.now + duration, task=task,
                        metadata=dict(metadata or {}))
    self.queue.push(handle.arrival_time, EventKind.ARRIVAL, handle)
    self._pending.append(handle)
    if not self.deferred:
      self._compute_pending()
    return handle

  def set_timer(self, time: float, payload: Any = None) -> None:
    """Calls `scheduler.on_timer(sim, payload)` at virtual time `time` (>= now)."""
    if time < self.now:
      raise ValueError(f'timer at {time} is in the past (now {self.now})')
    self.queue.push(time, EventKind.TIMER, payload)

  def updates(self, handles: Sequence[TaskHandle], weights: Sequence[float]) -> UpdateBatch:
    """The stacked results of `handles` (computing pending tasks first if needed)."""
    if any(not h.computed for h in handles):
      self._compute_pending()
    staleness = [self.version - h.version for h in handles]
    return stack_results([h.result_ref for h in handles], weights, staleness,
                         [h.num_steps for h in handles], self.bucket_bits)

  def apply_updates(self, handles: Sequence[TaskHandle], weights: Sequence[float]) -> None:
    """Aggregates the updates of `handles` with `weights` into a new server version."""
    if not handles:
      raise ValueError('apply_updates needs at least one update')
    self.server_state = self._apply(self.server_state, self.updates(handles, weights))
    self.version += 1
    if self.on_version is not None:
      self.on_version(self)

  # ---- Event loop ------------------------------------------------------------------------

  def _compute_pending(self) -> None:
    pending, self._pending = self._pending, []
    if not pending:
      return
    batch = self.executor.run([h.task for h in pending])
    self.executor_batches += 1
    for row, handle in enumerate(pending):
      handle.result_ref = ResultRef(batch, row)
      handle.task = dataclasses.replace(handle.task, start_params=None, task_inputs=None)

  def run(self, stop: StopCondition) -> None:
    """Processes events until `stop` is reached or nothing is left to happen."""
    if not self._started:
      self._started = True
      self.scheduler.start(self)
    while len(self.queue) and not stop.reached(self):
      if stop.max_virtual_time is not None and self.queue.peek_time() > stop.max_virtual_time:
        self.now = stop.max_virtual_time
        break
      event = self.queue.pop()
      self.now = event.time
      if event.kind is EventKind.ARRIVAL:
        self.client_updates += 1
        self.gradient_steps += event.payload.num_steps
        self.scheduler.on_arrival(self, event.payload)
      else:
        self.scheduler.on_timer(self, event.payload)
