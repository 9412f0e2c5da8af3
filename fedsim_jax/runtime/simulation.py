"""The virtual-time runtime: an event loop that schedulers drive and that defers training.

A scheduler reacts to events (`start`, `on_arrival`, `on_timer`, `on_dropout`) through the
`SchedulerContext` it is given (runtime/scheduler_context.py): it reads a view of the run and
asks for actions, which the simulation executes: `dispatch` a client task, `set_timer`,
`apply_updates`, `discard` (and, for updates the server uses without a new version, `fold_in`
and `update_server_state`). Dispatching draws
the task's latency and queues its arrival (or, if the client goes offline first, its dropout);
the training itself is deferred: a task is computed only when its result is first needed
(typically at aggregation), together with every other pending task, in one executor batch
(docs/design-notes.md, "Deferred batched execution"). A task whose inputs change during training is split
into segments at that event (`dispatch(..., intermediate=True)`, then `continues=`); schedulers
read a result with `task_params` / `task_aux`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from sortedcontainers import SortedList

from fedsim_jax.distributed import host_value
from fedsim_jax.executor import ClientTask, round_up_to_bucket
from fedsim_jax.executor.choice import resolve_max_batch_tasks
from fedsim_jax.models import Params
from fedsim_jax.runtime.events import EventKind, EventQueue
from fedsim_jax.runtime.latency import (
  AlwaysAvailable,
  Availability,
  LatencyModel,
  TaskLatency,
  available_clients,
)
from fedsim_jax.runtime.sampling import choose_one
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.statistics import busy_fraction
from fedsim_jax.runtime.task_trace import TaskLog, skipped_record, task_record
from fedsim_jax.runtime.updates import (
  Aggregator,
  ResultRef,
  UpdateBatch,
  stack_results,
  update_scalars,
)
from fedsim_jax.tree import row


@dataclasses.dataclass(eq=False)
class TaskHandle:
  """A dispatched client task as the scheduler sees it.

  Attributes:
    task_id: dispatch order (also the task's PRNG seed).
    client_id, num_steps: what was asked.
    version: server version of the model the client downloaded (staleness is measured
      against it, not against the version at upload).
    dispatch_time, arrival_time: virtual seconds (`arrival_time` is the dropout time for a
      task whose client goes offline first).
    latency: the task's drawn latency components.
    metadata: free-form scheduler bookkeeping (`group` is passed on to aggregators).
    status: 'in_flight', 'arrived', 'dropped_out', 'aggregated' or 'discarded'; an
      intermediate segment (see `Simulation.dispatch`) ends as 'segment_done', then
      'continued' once its next segment is dispatched.
    intermediate: the task is a segment that ends mid-training (not a client update).
    root_id, first_dispatch_time: the task id and dispatch time of the task's first segment
      (its own, for a task in one piece).
    planned_steps: local steps the task was dispatched to do, over all its segments.
    prior_steps: local steps of the task's earlier segments.
  """

  task_id: int
  client_id: int
  num_steps: int
  version: int
  dispatch_time: float
  arrival_time: float
  latency: TaskLatency
  task: ClientTask | None
  metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
  result_ref: ResultRef | None = None
  status: str = 'in_flight'
  discard_reason: str | None = None
  intermediate: bool = False
  root_id: int = -1
  first_dispatch_time: float = math.nan
  planned_steps: int = 0
  prior_steps: int = 0

  @property
  def computed(self) -> bool:
    return self.result_ref is not None


def _computed(handle: TaskHandle) -> tuple[ClientTask, ResultRef]:
  """`(task, result_ref)` of a task whose result has been computed and not yet freed."""
  if handle.task is None or handle.result_ref is None:
    raise ValueError(f'task {handle.task_id} is {handle.status}; it has no computed result')
  return handle.task, handle.result_ref


def _grown(counts: np.ndarray, size: int) -> np.ndarray:
  grown = np.zeros(size, counts.dtype)
  grown[: len(counts)] = counts
  return grown


def _jitted_linear_form(aggregator: Aggregator) -> tuple[Callable, Callable, Callable] | None:
  """The jitted (numerators, accumulate, apply_sum) of an aggregator's linear form."""
  linear = aggregator.linear
  if linear is None:
    return None

  def accumulate(total: Params, coefficients: jax.Array, deltas: Params) -> Params:
    return jax.tree_util.tree_map(
      lambda t, d: t + jnp.tensordot(coefficients, d, axes=1), total, deltas
    )

  return (
    jax.jit(linear.numerators),
    jax.jit(accumulate, donate_argnums=0),
    jax.jit(linear.apply_sum),
  )


class Scheduler(Protocol):
  """Host-side policy: who trains, how much, and when to aggregate.

  A scheduler is any object with the three methods below (no base class). The simulation
  calls them as virtual time advances, passing a `SchedulerContext` (`sim` below): a read-only
  view of the run and the actions the scheduler may take, which the simulation executes at
  once (`help(fedsim_jax.runtime.SchedulerContext)`). Schedulers run in plain Python on the
  host, never jitted; the training they ask for is computed later, in batches (the
  simulation's deferred execution), so dispatching is cheap.

  What each method receives:

  - `start(sim)`: once, at virtual time 0 (`sim.now`), when `Simulation.run` is first called.
    Dispatch the first tasks and/or set the first timers here.
  - `on_arrival(sim, handle)`: a client task came back at `sim.now` (its `TaskHandle`:
    `client_id`, `num_steps`, `version` of the model it downloaded, `dispatch_time`,
    `arrival_time`, `metadata` you gave at dispatch; `handle.status == 'arrived'`). Its
    staleness is `sim.version - handle.version`. Every arrived task must eventually be
    aggregated (`sim.apply_updates`) or discarded (`sim.discard(handle, reason)`); until then
    it is held (counted as 'waiting', e.g. in a buffer).
  - `on_timer(sim, payload)`: a timer you set with `sim.set_timer(time, payload)` fired at
    `sim.now == time` (deadlines, periodic triggers, refills; `payload` tells them apart).

  Optional: `on_dropout(sim, handle)`, called when a client goes offline before finishing (the
  runtime has already discarded the task with reason 'offline'; without the method the slot is
  simply lost), and, for schedulers that split tasks into segments,
  `on_segment_end(sim, handle)` (see `Simulation.dispatch`).

  What `sim` offers:

  - read: `sim.now` (virtual seconds), `sim.version` (server versions so far),
    `sim.num_clients`, `sim.client_sizes` (examples per client, for weights), `sim.params`
    (the global model), `sim.rng` (a numpy Generator: draw every random choice from it),
    `sim.idle_clients()` (online, not training), `sim.draw_idle_client(rng)`,
    `sim.is_busy(client)`, `sim.next_availability_time()`.
  - act: `sim.dispatch(client, num_steps, latency=None, metadata=None)` sends the current
    model to a client and returns its `TaskHandle` (`sim.sample_latency(client)` first, passed
    as `latency=`, sizes the work by the client's drawn speed, as `strategy.LocalWork` does);
    `sim.set_timer(time, payload)`; `sim.apply_updates(handles, weights)` aggregates arrived
    tasks into one new server version (the aggregator's `apply`, jitted; `on_version`
    callbacks such as evaluation run); `sim.discard(handle, reason)` drops one (the reason is
    counted in `summary.json`: 'stale', 'straggler', ...).
  - advanced: `sim.updates(...)` and `sim.apply_update_batch(batch)` (build the
    `UpdateBatch` yourself), `sim.fold_in(handles)` and `sim.update_server_state(fn)` (use
    updates without a new version), `sim.advance_version()` (a round with nothing to apply),
    `sim.task_params(handle)` / `sim.task_aux(handle)` (read one client's result),
    `sim.record_skipped(client)` (trace a selected client that does not train).

  Per-client model-valued state (a previous local model, a gradient state) belongs in a
  `fedsim_jax.strategy.client_table.ClientTable` (`[num_clients, ...]`, updated by pure
  functions), not in dicts of pytrees.

  The scheduler is saved in checkpoints with the rest of the simulation (it is pickled): keep
  its state in plain attributes (numbers, lists, numpy arrays, `TaskHandle`s), define its
  class at module level and draw randomness from `sim.rng`, and a resumed run is exactly the
  run that was never stopped.

  A minimal synchronous scheduler (FedAvg's rounds: `cohort` idle clients train `steps` local
  steps each; a round is aggregated, weighted by client size, when all of it is back)::

    class Rounds:
      def __init__(self, cohort: int, steps: int):
        self.cohort, self.steps = cohort, steps
        self.arrived: list[TaskHandle] = []
        self.outstanding = 0  # tasks of this round still training

      def start(self, sim):
        self._new_round(sim)

      def on_arrival(self, sim, handle):
        self.arrived.append(handle)
        self.outstanding -= 1
        self._close_if_done(sim)

      def on_dropout(self, sim, handle):  # optional: the client went offline mid-task
        self.outstanding -= 1
        self._close_if_done(sim)

      def on_timer(self, sim, payload):
        pass  # this scheduler sets no timers

      def _new_round(self, sim):
        idle = sim.idle_clients()
        chosen = sim.rng.choice(idle, size=min(self.cohort, len(idle)), replace=False)
        for client in chosen:
          sim.dispatch(client, self.steps)
        self.outstanding = len(chosen)

      def _close_if_done(self, sim):
        if self.outstanding:
          return
        if self.arrived:
          weights = [sim.client_sizes[h.client_id] for h in self.arrived]
          sim.apply_updates(self.arrived, weights)  # a new server version
        self.arrived = []
        self._new_round(sim)

    sim = Simulation(executor=..., scheduler=Rounds(cohort=10, steps=20), aggregator=...,
                     latency=..., init_params=..., client_sizes=..., rng=...)
    sim.run(StopCondition(max_versions=50))

  The library's schedulers (`fedsim_jax.strategy`: `SynchronousScheduler` with deadlines and
  over-selection, `AsynchronousScheduler` with a concurrency cap and buffer, ...) are complete
  examples. To select a scheduler from a config, return it from a registered algorithm
  (README, "New algorithm").
  """

  def start(self, sim: SchedulerContext) -> None: ...

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None: ...

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None: ...


@dataclasses.dataclass
class StopCondition:
  """The run stops at the first limit reached (None = no limit)."""

  max_versions: int | None = None
  max_virtual_time: float | None = None
  max_client_updates: int | None = None

  def reached(self, sim: Simulation) -> bool:
    return (
      (self.max_versions is not None and sim.version >= self.max_versions)
      or (self.max_virtual_time is not None and sim.now >= self.max_virtual_time)
      or (self.max_client_updates is not None and sim.client_updates >= self.max_client_updates)
    )


@dataclasses.dataclass
class TaskAccounting:
  """Where every dispatched task ended up. `dispatched` always equals `aggregated +
  sum(discarded.values()) + in_flight + waiting` (checked by `check`)."""

  dispatched: int = 0
  arrived: int = 0
  aggregated: int = 0
  discarded: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  in_flight: int = 0
  waiting: int = 0  # arrived, held by the scheduler (e.g. in a buffer), not yet resolved

  def check(self) -> None:
    total = self.aggregated + sum(self.discarded.values()) + self.in_flight + self.waiting
    if total != self.dispatched:
      raise AssertionError(f'task accounting broken: {self}')

  def as_dict(self) -> dict[str, Any]:
    return {
      'dispatched': self.dispatched,
      'arrived': self.arrived,
      'aggregated': self.aggregated,
      'discarded': dict(sorted(self.discarded.items())),
      'in_flight': self.in_flight,
      'waiting': self.waiting,
    }


VersionCallback = Callable[['Simulation'], None]


# Events a task in flight may take without progress: its arrival or dropout, a segment end.
STALL_EVENTS_PER_TASK = 4


class SimulationStalled(RuntimeError):
  """The run stopped making progress (see `Simulation`'s `stall_events`): its settings cannot
  complete a round or buffer (a round deadline or time limit shorter than any task, say).
  One-line message."""


class Simulation:
  """Runs one federated simulation over virtual time.

  Three parts make an algorithm: the executor's client update (what a client computes, e.g.
  `fedsim_jax.client.sgd_client_update`), a `Scheduler` (host-side policy: who trains, how
  much, when to aggregate; `help(fedsim_jax.Scheduler)` shows how to write one) and an
  `Aggregator` (the jitted server update, `(state, UpdateBatch) -> state`;
  `help(fedsim_jax.Aggregator)`). The simulation keeps a virtual clock and an event
  queue: the scheduler dispatches tasks, each task's duration is drawn from the latency model,
  arrivals and timers call the scheduler back, and the training itself is computed lazily in
  batches when results are needed. `run(StopCondition(...))` processes events until a limit;
  afterwards `now` (virtual seconds), `version` (server versions), `client_updates`, `params`
  and `report()` say where it stands. A built algorithm supplies all three
  (`fedsim_jax.algorithms.build`), and `fedsim_jax.experiment.run_experiment` builds the whole
  simulation from a config.

  Example (README, "Functional API", builds `fed`, `model` and `update`)::

    sim = Simulation(
      executor=Executor(update, fed.device_arrays(), jax.random.PRNGKey(1)),
      scheduler=SynchronousScheduler(cohort_size=10, local_work=LocalWork(steps=20)),
      aggregator=server_update(server_optimizer('adam', 0.01)),  # FedAdam
      latency=PerStepLatency(fed.num_clients, np.random.default_rng(2), mean=0.1),
      init_params=model.init(jax.random.PRNGKey(0)),
      client_sizes=fed.client_sizes,
      rng=np.random.default_rng(3),
    )
    sim.run(StopCondition(max_versions=50))

  Args:
    executor: runs client tasks (`Executor` or anything with its `run` method).
    scheduler: the host-side policy.
    aggregator: the server update, jitted here.
    latency: draws task latencies.
    init_params: initial global model.
    client_sizes: `[num_clients]` examples per client (schedulers weight by it).
    rng: the scheduler's numpy generator (client sampling and other policy randomness).
    availability: when clients are online (default: always).
    deferred: compute tasks lazily in batches (True) or one at a time at dispatch (False);
      both give the same results.
    on_version: called after every server update (evaluation, logging).
    bucket_bits: bucketing of aggregation batch sizes.
    aggregate: apply updates to the model (True), or simulate the timeline only (False):
      versions advance and updates count as aggregated when the scheduler aggregates them
      (`apply_updates`), but no task is computed and nothing is stacked or applied, so the
      model stays `init_params`. For latency and schedule studies (rounds, staleness, idle
      time) at event-loop speed; schedulers that read task results themselves (`updates`,
      `task_params`) raise.
    stall_events: the run stops with `SimulationStalled` (None: never) after this many events
      without progress, or `STALL_EVENTS_PER_TASK` per task in flight where that is more (at
      most one task per client counted), so that settings under which no round can succeed
      end with a message instead of running forever. Progress is a new server version, or an
      arrived update held for aggregation beyond the most held since the last version: a round
      or buffer of any size fills with progress at every arrival, whereas a round that can
      never close (its updates discarded as stragglers, or as empty) makes none. The per-task
      allowance covers the stragglers of a round that closed without them.
    task_log: receives a record per task as its outcome becomes final
      (`runtime.task_trace`); settable later as the `task_log` attribute.
    max_batch_tasks: the most tasks computed in one executor batch once more are pending
      (0, the default: as many as 1 GiB of this model's updates holds, within 16..4096,
      `executor.choice.resolve_max_batch_tasks`; None: no limit). It bounds the updates held
      at once: the tasks a result is needed for are computed first, the batch filled up with
      those that arrive soonest, and a round larger than this whose aggregator has a linear
      form (`Aggregator.linear`: `server_update` with a built-in reducer, FedAvg, FedOpt,
      FedBuff and their kin) is summed chunk by chunk, each chunk's updates freed before the
      next is computed. Such a sum adds in another order than one pass over the whole round,
      so its results differ in rounding from an unbounded run's.
  """

  def __init__(
    self,
    *,
    executor: Any,
    scheduler: Scheduler,
    aggregator: Aggregator,
    latency: LatencyModel,
    init_params: Params,
    client_sizes: np.ndarray,
    rng: np.random.Generator,
    availability: Availability | None = None,
    deferred: bool = True,
    on_version: VersionCallback | None = None,
    bucket_bits: int = 3,
    aggregate: bool = True,
    stall_events: int | None = 100_000,
    task_log: TaskLog | None = None,
    max_batch_tasks: int | None = 0,
  ) -> None:
    self.executor = executor
    self.scheduler = scheduler
    self.aggregator = aggregator
    self.latency = latency
    self.availability = availability or AlwaysAvailable()
    self.client_sizes = np.asarray(client_sizes)
    self.rng = rng
    self.deferred = deferred
    self.on_version = on_version
    self.bucket_bits = bucket_bits
    self.aggregate = aggregate
    self.stall_events = stall_events
    self.task_log = task_log
    # The stall rule's state (`stall_events`), reset at every server version.
    self._events_without_progress = 0
    self._most_held = 0  # most arrived updates held at once since the last version
    self._most_in_flight = 0  # most tasks in flight at once since the last version
    if max_batch_tasks is not None:
      model_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(init_params))
      max_batch_tasks = resolve_max_batch_tasks(max_batch_tasks, model_bytes)
    self.max_batch_tasks = max_batch_tasks
    self._apply = jax.jit(aggregator.apply)
    self._linear = _jitted_linear_form(aggregator)
    self.server_state = aggregator.init(init_params)
    self.queue = EventQueue()
    self.now = 0.0
    self.version = 0
    self.accounting = TaskAccounting()
    self.executor_batches = 0
    self.executed_tasks = 0
    self.gradient_steps = 0  # local steps of arrived tasks
    num_clients = self.num_clients
    self.dispatch_counts = np.zeros(num_clients, np.int64)
    self.aggregated_counts = np.zeros(num_clients, np.int64)
    self.busy_time = np.zeros(num_clients, np.float64)  # virtual seconds spent on tasks
    self.steps_per_client = np.zeros(num_clients, np.int64)  # local steps of arrived tasks
    self.update_wait_time = 0.0  # sum over aggregated updates of (aggregation - arrival) time
    self.discarded_counts = np.zeros(num_clients, np.int64)  # offline ones included
    # Aggregated updates by staleness (index), over the run and since `reset_window`.
    self.staleness_counts = np.zeros(16, np.int64)
    self.window_staleness_counts = np.zeros(16, np.int64)
    self.wasted_steps = 0  # local steps of tasks that were discarded
    # Dispatched tasks not yet aggregated or discarded, by task id (of the current segment).
    self._unresolved: dict[int, TaskHandle] = {}
    self._busy = np.zeros(num_clients, np.int64)  # tasks in flight per client
    # Clients with no task in flight, ascending, kept as events change it: asynchronous
    # refills draw one of them per arrival, and scanning `_busy` for it was a hot path. A
    # sorted list of sublists: removing or adding a client costs O(log n), so dispatching a
    # round of n clients is not quadratic in n (a plain list's deletions were).
    self._not_busy = SortedList(range(num_clients))
    self._always_available = isinstance(self.availability, AlwaysAvailable)
    self._pending: list[TaskHandle] = []
    # Computed tasks whose results are still held (arrived and waiting, or computed early).
    self._held_results: dict[int, TaskHandle] = {}
    self._next_task_id = 0
    self._started = False
    self._pause_requested = False
    self._context = SchedulerContext(self)  # what the scheduler's callbacks receive

  # ---- State -----------------------------------------------------------------------------

  @property
  def num_clients(self) -> int:
    return int(self.client_sizes.shape[0])

  @property
  def params(self) -> Params:
    """The current global model."""
    return self.server_state.params

  @property
  def eval_params(self) -> Params:
    """The model to evaluate: `server_state.eval_params` when the aggregator keeps one (an EMA
    or an auxiliary model), else the global model."""
    return getattr(self.server_state, 'eval_params', self.server_state.params)

  @property
  def client_updates(self) -> int:
    """Client tasks that reached the server (the papers' budget unit)."""
    return self.accounting.arrived

  def is_busy(self, client_id: int) -> bool:
    return self._busy[client_id] > 0

  def idle_clients(self) -> np.ndarray:
    """Ids of the clients online now and not training, ascending."""
    if self._always_available:
      return (self._busy == 0).nonzero()[0]  # np.flatnonzero without its wrappers (hot path)
    online = np.zeros(self.num_clients, bool)
    online[available_clients(self.availability, self.num_clients, self.now)] = True
    return np.flatnonzero((self._busy == 0) & online)

  def draw_idle_client(self, rng: np.random.Generator) -> int | None:
    """One client drawn uniformly from `idle_clients()` (None if there is none), with exactly
    the draw of `choose_without_replacement(rng, idle_clients(), 1)`, without building the
    array when every client is always online (the asynchronous refill's hot path)."""
    idle = self._not_busy if self._always_available else self.idle_clients()
    return choose_one(rng, idle) if len(idle) else None

  def next_availability_time(self) -> float:
    """Earliest time > now at which some offline client comes online (inf if none)."""
    times = [self.availability.next_available(c, self.now) for c in range(self.num_clients)]
    later = [t for t in times if t > self.now]
    return min(later, default=math.inf)

  # ---- Scheduler API ---------------------------------------------------------------------

  def sample_latency(self, client_id: int) -> TaskLatency:
    """Draws the latency of the client's next task (pass it to `dispatch`)."""
    return self.latency.sample(int(client_id))

  def dispatch(
    self,
    client_id: int,
    num_steps: int,
    *,
    latency: TaskLatency | None = None,
    start_params: Params | None = None,
    task_inputs: Any = None,
    metadata: dict[str, Any] | None = None,
    intermediate: bool = False,
    continues: TaskHandle | None = None,
    planned_steps: int | None = None,
  ) -> TaskHandle:
    """Sends the current (or given) model to an online client for `num_steps` local steps.

    Segments: a task whose inputs change during training (FedASMU's mid-training fetch of a
    fresh model) is split at that event. Its earlier segments are dispatched with
    `intermediate=True`; when one ends, the runtime calls `scheduler.on_segment_end(sim,
    handle)`, which must dispatch the next segment with `continues=handle` (its start params
    are usually `sim.task_params(handle)`). The segments are one client task: it counts once
    as dispatched (its first segment) and once as arrived (its last), its `version` (hence its
    staleness) is the first segment's download version, and every segment's local steps and
    busy time count. `planned_steps` (default `num_steps`): the local steps of the whole task,
    for the task trace, given with its first segment.
    """
    client_id, num_steps = int(client_id), int(num_steps)
    if num_steps < 0:
      raise ValueError(f'num_steps must be >= 0, got {num_steps}')
    if continues is not None and (
      continues.status != 'segment_done' or continues.client_id != client_id
    ):
      raise ValueError(
        f'continues=task {continues.task_id} ({continues.status}, client '
        f'{continues.client_id}); allowed: an ended intermediate segment of '
        f'client {client_id}'
      )
    if (
      not self._always_available
      and self.availability.next_available(client_id, self.now) > self.now
    ):
      raise ValueError(f'client {client_id} is offline at {self.now}')
    if latency is None:
      latency = self.sample_latency(client_id)
    task_id = self._next_task_id
    self._next_task_id += 1
    task = ClientTask(
      client_id=client_id,
      num_steps=num_steps,
      seed=task_id,
      start_params=self.params if start_params is None else start_params,
      task_inputs=task_inputs,
    )
    arrival = self.now + latency.duration(num_steps)
    offline_at = (
      math.inf if self._always_available else self.availability.online_until(client_id, self.now)
    )
    handle = TaskHandle(
      task_id=task_id,
      client_id=client_id,
      num_steps=num_steps,
      version=self.version if continues is None else continues.version,
      dispatch_time=self.now,
      arrival_time=min(arrival, offline_at),
      latency=latency,
      task=task,
      metadata=dict(metadata or {}),
      intermediate=intermediate,
    )
    if continues is None:
      handle.root_id = task_id
      handle.first_dispatch_time = self.now
      handle.planned_steps = num_steps if planned_steps is None else int(planned_steps)
    else:
      handle.root_id = continues.root_id
      handle.first_dispatch_time = continues.first_dispatch_time
      handle.planned_steps = continues.planned_steps
      handle.prior_steps = continues.prior_steps + continues.num_steps
    self._unresolved[task_id] = handle
    # A segment whose client goes offline as it ends cannot be continued: a dropout.
    if offline_at < arrival or (intermediate and offline_at == arrival):
      self.queue.push(offline_at, EventKind.DROPOUT, handle)
    else:
      self.queue.push(arrival, EventKind.ARRIVAL, handle)
      if self.aggregate:  # a timeline-only run never computes results
        self._pending.append(handle)
    if continues is None:
      self.accounting.dispatched += 1
      self.dispatch_counts[client_id] += 1
    else:
      self._resolve(continues, 'continued')
    self.accounting.in_flight += 1
    if self._busy[client_id] == 0:
      self._not_busy.remove(client_id)
    self._busy[client_id] += 1
    if not self.deferred and self.aggregate:
      self._compute_pending()
    return handle

  def task_params(self, handle: TaskHandle) -> Params:
    """The client's model at the end of `handle` (start params + delta) for an arrived task
    or an ended intermediate segment, computing pending tasks first if needed."""
    task, ref = self._result(handle)
    return jax.tree_util.tree_map(
      lambda start, delta: start + delta[ref.row], task.start_params, ref.batch.deltas
    )

  def task_aux(self, handle: TaskHandle) -> dict[str, Any]:
    """The `aux` results of `handle` (as `task_params`): its row of every aux value (an array
    or a pytree, such as ASO-Fed's decayed gradient state)."""
    _, ref = self._result(handle)
    return row(ref.batch.aux, ref.row)

  def _check_results_exist(self) -> None:
    if not self.aggregate:
      raise ValueError(
        'this simulation runs the timeline only (aggregate=False): task results '
        'are never computed; allowed: aggregate=True'
      )

  def _result(self, handle: TaskHandle) -> tuple[ClientTask, ResultRef]:
    self._check_results_exist()
    if handle.status not in ('arrived', 'segment_done'):
      raise ValueError(
        f'task {handle.task_id} is {handle.status}; only arrived tasks and '
        'ended segments have readable results'
      )
    if not handle.computed:
      self._compute_pending([handle])
    return _computed(handle)

  def set_timer(self, time: float, payload: Any = None) -> None:
    """Calls `scheduler.on_timer(sim, payload)` at virtual time `time` (>= now). At one
    instant, timers fire after every arrival and dropout of that instant (a client arriving
    exactly at a deadline is on time), and in the order they were set."""
    if time < self.now:
      raise ValueError(f'timer at {time} is in the past (now {self.now})')
    self.queue.push(time, EventKind.TIMER, payload)

  def updates(
    self,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    with_client_params: bool = False,
    staleness: Sequence[int] | None = None,
  ) -> UpdateBatch:
    """The stacked results of arrived `handles` (computing pending tasks first if needed).

    Staleness defaults to the versions since each client's download, counted now; a scheduler
    that fixes it earlier (FedCompass scales an update when it is buffered) passes its own.
    """
    self._check_results_exist()
    if any(not h.computed for h in handles):
      self._compute_pending(handles)
    results = [_computed(h) for h in handles]
    start = None
    if with_client_params:
      start = [task.start_params for task, _ in results]
    if staleness is None:
      staleness = [self.version - h.version for h in handles]
    return stack_results(
      [ref for _, ref in results],
      weights,
      staleness,
      [h.num_steps for h in handles],
      [h.metadata.get('group', 0) for h in handles],
      start_params=start,
      bucket_bits=self.bucket_bits,
      client_ids=[h.client_id for h in handles],
    )

  def apply_updates(
    self,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    staleness: Sequence[int] | None = None,
  ) -> None:
    """Aggregates the updates of arrived `handles` with `weights` into a new server version
    (`staleness` as in `updates`)."""
    if not handles:
      raise ValueError('apply_updates needs at least one update')
    if not self.aggregate:  # timeline only: the updates count, the model stays
      self._check_arrived(handles, 'aggregate')
      self._new_version(handles)
      return
    limit = self.max_batch_tasks
    if self._linear is not None and limit is not None and len(handles) > limit:
      self._apply_in_chunks(handles, weights, staleness)
      return
    self.apply_update_batch(
      self.updates(handles, weights, self.aggregator.needs_client_params, staleness), handles
    )

  def _apply_in_chunks(
    self,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    staleness: Sequence[int] | None,
  ) -> None:
    """`apply_updates` for a round larger than `max_batch_tasks` with a linear aggregator:
    sum_k a_k delta_k chunk by chunk (each chunk computed, summed and freed in turn), then
    one server step from the sum."""
    self._check_arrived(handles, 'aggregate')
    assert self._linear is not None and self.max_batch_tasks is not None
    numerators_of, accumulate, apply_sum = self._linear
    if staleness is None:
      staleness = [self.version - h.version for h in handles]
    weights, staleness = list(weights), list(staleness)
    scalars = update_scalars(
      weights,
      staleness,
      [h.num_steps for h in handles],
      [h.metadata.get('group', 0) for h in handles],
      [h.client_id for h in handles],
      round_up_to_bucket(len(handles), self.bucket_bits),
    )
    numerators = np.asarray(numerators_of(scalars), np.float32)
    total = jax.tree_util.tree_map(jnp.zeros_like, self.params)
    limit = self.max_batch_tasks
    for start in range(0, len(handles), limit):
      part = handles[start : start + limit]
      chunk = self.updates(
        part, weights[start : start + limit], False, staleness[start : start + limit]
      )
      coefficients = np.zeros(len(chunk.weights), np.float32)
      coefficients[: len(part)] = numerators[start : start + len(part)]
      total = accumulate(total, coefficients, chunk.deltas)
      del chunk
      for handle in part:  # summed: free the update before the next chunk is computed
        handle.result_ref = None
        self._held_results.pop(handle.task_id, None)
    self.server_state = apply_sum(self.server_state, total, scalars)
    self._new_version(handles)

  def apply_update_batch(self, batch: UpdateBatch, handles: Sequence[TaskHandle] = ()) -> None:
    """Applies a prepared `UpdateBatch` (which may hold rows that are not task results, e.g.
    CC-FedAvg's estimates for skipping clients) as a new server version; `handles` are the
    arrived tasks whose results it contains."""
    self._check_arrived(handles, 'aggregate')
    self.server_state = self._apply(self.server_state, batch)
    self._new_version(handles)

  @staticmethod
  def _check_arrived(handles: Sequence[TaskHandle], action: str) -> None:
    for h in handles:
      if h.status != 'arrived':
        raise ValueError(f'task {h.task_id} is {h.status}; only arrived tasks {action}')

  def _new_version(self, handles: Sequence[TaskHandle]) -> None:
    self.version += 1
    self._events_without_progress = 0
    self._most_held = 0
    self._most_in_flight = 0
    self._mark_aggregated(handles, missed=self.version - 1)
    if self.on_version is not None:
      self.on_version(self)

  def fold_in(self, handles: Sequence[TaskHandle]) -> None:
    """Records arrived `handles` as used by the server outside a server version: stragglers
    that FARe-DUST sums into its historical deltas or FeAST-on-MSG into a round's Delta^+
    (the caller has read them with `updates` first). They count as aggregated; the version,
    the model and `on_version` are untouched."""
    self._check_arrived(handles, 'fold in')
    self._mark_aggregated(handles, missed=self.version)

  def update_server_state(self, update: Callable[[Any], Any]) -> None:
    """Replaces the server state by `update(state)` without a new server version: a server-side
    change that is not a round's model update (FeAST-on-MSG's auxiliary model, updated when a
    round's straggler window closes)."""
    self.server_state = update(self.server_state)

  def _mark_aggregated(self, handles: Sequence[TaskHandle], missed: int) -> None:
    """Resolves `handles` as used in server version `self.version`; an update's staleness is
    the versions it missed, `missed - h.version`."""
    for h in handles:
      self._resolve(h, 'aggregated')
      self.accounting.aggregated += 1
      self.aggregated_counts[h.client_id] += 1
      self.update_wait_time += self.now - h.arrival_time
      staleness = missed - h.version
      if staleness >= len(self.staleness_counts):
        size = max(2 * len(self.staleness_counts), staleness + 1)
        self.staleness_counts = _grown(self.staleness_counts, size)
        self.window_staleness_counts = _grown(self.window_staleness_counts, size)
      self.staleness_counts[staleness] += 1
      self.window_staleness_counts[staleness] += 1
      if self.task_log is not None:
        self.task_log.write(
          task_record(
            h,
            'aggregated',
            steps=h.prior_steps + h.num_steps,
            aggregation_time=self.now,
            applied_version=self.version,
            staleness=staleness,
          )
        )

  def reset_window(self) -> None:
    """Starts a new statistics window (`window_staleness_counts`), e.g. at an evaluation."""
    self.window_staleness_counts[:] = 0

  def record_skipped(self, client_id: int, **extras: Any) -> None:
    """Traces a client selected now that does not train (CC-FedAvg's skipping clients);
    `extras` are scalars for the record (e.g. `estimated=True`)."""
    if self.task_log is not None:
      self.task_log.write(skipped_record(client_id, self.now, self.version, extras))

  def write_unresolved_tasks(self) -> None:
    """Traces the tasks still in flight or waiting (at the end of a run)."""
    if self.task_log is None:
      return
    for handle in sorted(self._unresolved.values(), key=lambda h: h.root_id):
      arrived = handle.status == 'arrived'
      self.task_log.write(
        task_record(
          handle,
          'waiting' if arrived else 'in_flight',
          steps=handle.prior_steps + (handle.num_steps if arrived else 0),
        )
      )

  def advance_version(self) -> None:
    """Ends a server round that has no update to apply: the version advances, the model and
    the server optimizer state stay (e.g. CC-FedAvg's Strategy 1 when nobody trains)."""
    self._new_version(())

  def discard(self, handle: TaskHandle, reason: str) -> None:
    """Drops an arrived update for `reason` (recorded in the accounting)."""
    if handle.status != 'arrived':
      raise ValueError(f'task {handle.task_id} is {handle.status}; only arrived tasks discard')
    self._resolve(handle, 'discarded', reason)

  # ---- Pausing and checkpoints -----------------------------------------------------------

  # Built from the config, never saved: code and data (the executor holds the federation).
  _BUILT = (
    'executor',
    'aggregator',
    'max_batch_tasks',
    '_apply',
    '_linear',
    'on_version',
    'task_log',
    '_pause_requested',
    '_context',
  )

  def request_pause(self) -> None:
    """Makes `run` return once the current event is processed (for a checkpoint, or an
    interrupt); safe to call from `on_version` or a signal handler. Running on afterwards
    gives exactly the run that was never paused."""
    self._pause_requested = True

  def finished(self, stop: StopCondition) -> bool:
    """Whether `run(stop)` has nothing left to do (a limit reached, or no event left)."""
    return not len(self.queue) or stop.reached(self)

  def state(self) -> dict[str, Any]:
    """Everything this simulation holds that changes as it runs, as plain data (pytrees,
    numpy arrays and generators, dataclasses, the scheduler): what a checkpoint saves. The
    rest (executor, aggregator, callbacks) is rebuilt from the run's config."""
    self.compact_results()
    return {name: value for name, value in vars(self).items() if name not in self._BUILT}

  def compact_results(self) -> None:
    """Copies the results still held out of executor batches most of whose rows are already
    used, so that a few waiting updates do not keep (or checkpoint) whole batches. Values are
    unchanged, and so is every later aggregation: a partly used batch is only ever gathered
    from, row by row."""
    by_batch: dict[int, list[TaskHandle]] = collections.defaultdict(list)
    for handle in self._held_results.values():
      _, ref = _computed(handle)
      by_batch[id(ref.batch)].append(handle)
    for handles in by_batch.values():
      batch = _computed(handles[0])[1].batch
      num_rows = jax.tree_util.tree_leaves(batch.deltas)[0].shape[0]
      if len(handles) == batch.num_tasks and (not batch.view or num_rows == len(handles)):
        continue  # whole (and possibly aggregated as it is), or compact already
      handles.sort(key=lambda h: _computed(h)[1].row)
      rows = np.array([_computed(h)[1].row for h in handles])

      def take(values: jax.Array) -> jax.Array:
        # On the host: an indexing program per batch shape would be compiled otherwise.
        return jnp.asarray(host_value(values)[rows])

      compact = dataclasses.replace(
        batch,
        deltas=jax.tree_util.tree_map(take, batch.deltas),
        aux=jax.tree_util.tree_map(take, batch.aux),  # per-task tables: pytrees (ASO-Fed)
        num_tasks=len(rows),
        row_offset=0,
        view=True,  # never taken whole: it is no executor batch
      )
      for index, handle in enumerate(handles):
        handle.result_ref = ResultRef(compact, index)

  def restore(self, state: dict[str, Any]) -> None:
    """Continues from `state()` of a simulation built from the same config."""
    unknown = sorted(set(state) - set(vars(self)) | set(state) & set(self._BUILT))
    if unknown:
      raise ValueError(f'not simulation state: {unknown}')
    vars(self).update(state)
    if not isinstance(self._not_busy, SortedList):  # checkpoints before it was one
      self._not_busy = SortedList(self._not_busy)

  # ---- Event loop ------------------------------------------------------------------------

  def _resolve(self, handle: TaskHandle, status: str, reason: str | None = None) -> None:
    if status == 'discarded':
      self.accounting.discarded[reason] += 1
      handle.discard_reason = reason
      steps = handle.prior_steps + handle.num_steps
      self.discarded_counts[handle.client_id] += 1
      self.wasted_steps += steps
      if self.task_log is not None:
        self.task_log.write(task_record(handle, 'discarded', steps=steps, reason=reason))
    del self._unresolved[handle.task_id]
    if handle.status == 'arrived':
      self.accounting.waiting -= 1
    handle.status = status
    handle.task = None  # free the start params and results
    handle.result_ref = None
    self._held_results.pop(handle.task_id, None)

  def _compute_pending(self, needed: Sequence[TaskHandle] = ()) -> None:
    """Computes the pending tasks: all of them at once, or, when more than `max_batch_tasks`
    are pending, those of `needed` that are, in batches of at most `max_batch_tasks` filled up
    with the other pending tasks that arrive soonest."""
    pending = [h for h in self._pending if h.status in ('in_flight', 'arrived', 'segment_done')]
    limit = self.max_batch_tasks
    if limit is None or len(pending) <= limit:
      self._pending = []
      if pending:
        self._run_tasks(pending)
      return
    wanted = {h.task_id for h in needed}
    first = [h for h in pending if h.task_id in wanted]
    soonest = sorted(
      (h for h in pending if h.task_id not in wanted), key=lambda h: (h.arrival_time, h.task_id)
    )
    order = first + soonest
    count = max(1, -(-len(first) // limit)) * limit  # whole batches until `needed` is computed
    for start in range(0, min(count, len(order)), limit):
      self._run_tasks(order[start : start + limit])
    self._pending = [h for h in pending if not h.computed]

  def _run_tasks(self, tasks: list[TaskHandle]) -> None:
    batch = self.executor.run([h.task for h in tasks])
    self.executor_batches += 1
    self.executed_tasks += len(tasks)
    for index, handle in enumerate(tasks):
      handle.result_ref = ResultRef(batch, batch.row_offset + index)
      self._held_results[handle.task_id] = handle

  def _finish_task(self, handle: TaskHandle) -> None:
    self.accounting.in_flight -= 1
    self._busy[handle.client_id] -= 1
    if self._busy[handle.client_id] == 0:
      self._not_busy.add(handle.client_id)
    self.busy_time[handle.client_id] += handle.arrival_time - handle.dispatch_time

  def _end_segment(self, handle: TaskHandle) -> None:
    handle.status = 'segment_done'
    # An optional hook, not part of the `Scheduler` protocol (see its docstring).
    self.scheduler.on_segment_end(self._context, handle)  # type: ignore[attr-defined]
    if handle.status != 'continued':
      raise RuntimeError(
        f'task {handle.task_id}: on_segment_end did not dispatch the next '
        'segment (dispatch(..., continues=handle))'
      )

  def run(self, stop: StopCondition) -> None:
    """Processes events until `stop` is reached, nothing is left to happen, or a pause was
    requested (`request_pause`; the request is consumed)."""
    self._pause_requested = False
    if not self._started:
      self._started = True
      self.scheduler.start(self._context)
    # `stop.reached(self)`, unrolled: this loop runs a few times per client update.
    max_versions, max_time, max_updates = (
      math.inf if limit is None else limit
      for limit in (stop.max_versions, stop.max_virtual_time, stop.max_client_updates)
    )
    queue, accounting = self.queue, self.accounting
    stall_events = math.inf if self.stall_events is None else self.stall_events
    while len(queue) and not (
      self.version >= max_versions
      or self.now >= max_time
      or accounting.arrived >= max_updates
      or self._pause_requested
    ):
      if queue.peek_time() > max_time:
        self.now = max_time  # stop.max_virtual_time (finite here)
        break
      if accounting.waiting > self._most_held:  # an update held beyond the most so far
        self._most_held = accounting.waiting
        self._events_without_progress = 0
      if accounting.in_flight > self._most_in_flight:
        self._most_in_flight = accounting.in_flight
      if self._events_without_progress >= stall_events:
        self._check_stalled(stall_events)
      self._events_without_progress += 1
      event = queue.pop()
      self.now = event.time
      if event.kind is EventKind.ARRIVAL:
        handle = event.payload
        self._finish_task(handle)
        self.gradient_steps += handle.num_steps
        self.steps_per_client[handle.client_id] += handle.num_steps
        if handle.intermediate:
          self._end_segment(handle)
          continue
        handle.status = 'arrived'
        self.accounting.arrived += 1
        self.accounting.waiting += 1
        self.scheduler.on_arrival(self._context, handle)
      elif event.kind is EventKind.DROPOUT:
        handle = event.payload
        self._finish_task(handle)
        handle.status = 'dropped_out'
        self.accounting.discarded['offline'] += 1
        handle.discard_reason = 'offline'
        handle.task = None
        del self._unresolved[handle.task_id]
        self.discarded_counts[handle.client_id] += 1
        self.wasted_steps += handle.prior_steps  # its earlier segments' steps are lost
        if self.task_log is not None:
          self.task_log.write(
            task_record(handle, 'discarded', steps=handle.prior_steps, reason='offline')
          )
        on_dropout = getattr(self.scheduler, 'on_dropout', None)
        if on_dropout is not None:
          on_dropout(self._context, handle)
      else:
        self.scheduler.on_timer(self._context, event.payload)

  def _check_stalled(self, stall_events: float) -> None:
    """Raises `SimulationStalled` once the events without progress exceed the allowance of
    the tasks in flight too (`stall_events`)."""
    tasks = min(self._most_in_flight, self.num_clients)
    if self._events_without_progress < max(stall_events, STALL_EVENTS_PER_TASK * tasks):
      return
    raise SimulationStalled(
      f'no server version in {self._events_without_progress} events, none of them holding a '
      f'new update (version {self.version}, virtual time {self.now:.6g}s, '
      f'{self._most_in_flight} tasks in flight at most): no round or buffer can complete under '
      'these settings; check the deadline, time limit, min_responses and staleness bounds '
      'against the latency model'
    )

  # ---- Reporting -------------------------------------------------------------------------

  def report(self) -> dict[str, Any]:
    """Task accounting, participation and timing figures for the run summary."""
    self.accounting.check()
    aggregated = max(self.accounting.aggregated, 1)
    return {
      'tasks': self.accounting.as_dict(),
      'participation': {
        'clients_participated': int((self.aggregated_counts > 0).sum()),
        'aggregated_per_client_min': int(self.aggregated_counts.min()),
        'aggregated_per_client_mean': float(self.aggregated_counts.mean()),
        'aggregated_per_client_max': int(self.aggregated_counts.max()),
      },
      'mean_update_wait_time': self.update_wait_time / aggregated,
      'client_busy_fraction': busy_fraction(self),
      'mean_client_idle_time': float(np.mean(self.now - self.busy_time)),
      'executor_batches': self.executor_batches,
      'mean_executed_batch_size': self.executed_tasks / max(self.executor_batches, 1),
    }
