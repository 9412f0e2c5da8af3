"""The virtual-time runtime: an event loop that schedulers drive and that defers training.

A scheduler reacts to events (`start`, `on_arrival`, `on_timer`, `on_dropout`) through the
`SchedulerContext` it is given (runtime/scheduler_context.py): it reads a view of the run and
asks for actions, which the simulation executes: `dispatch` a client task, `set_timer`,
`apply_updates`, `discard` (and, for updates the server uses without a new version, `fold_in`
and `update_server_state`). Dispatching draws the task's latency and queues its arrival (or,
if the client goes offline first, its dropout); the training itself is deferred: a task is
computed only when its result is first needed (typically at aggregation), together with every
other pending task, in one executor batch (docs/design-notes.md, "Deferred batched
execution"). A task whose inputs change during training is split into segments at that event
(`dispatch(..., intermediate=True)`, then `continues=`); schedulers read a result with
`task_params` / `task_aux`.

`Simulation` keeps the run's clock, version and server state, executes the scheduler's
actions, and composes one part per job: the event loop (`runtime.event_loop`), the task
table and its deferred results (`runtime.task_table`), the summed aggregation of rounds of a
linear aggregator (`runtime.summed_aggregation`), the clients' activity
(`runtime.client_activity`), the tasks' outcomes (`runtime.outcomes`) and what a checkpoint
holds (`runtime.simulation_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from fedsim_jax.executor import ClientTask
from fedsim_jax.executor.choice import resolve_max_batch_tasks
from fedsim_jax.models import Params
from fedsim_jax.runtime import simulation_state
from fedsim_jax.runtime.client_activity import ClientActivity
from fedsim_jax.runtime.event_loop import EventLoop, SimulationStalled, StopCondition
from fedsim_jax.runtime.events import EventKind, EventQueue
from fedsim_jax.runtime.latency import AlwaysAvailable, Availability, LatencyModel, TaskLatency
from fedsim_jax.runtime.outcomes import TaskOutcomes
from fedsim_jax.runtime.scheduler import Scheduler
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.statistics import run_report
from fedsim_jax.runtime.summed_aggregation import SummedAggregation
from fedsim_jax.runtime.task_table import TaskTable
from fedsim_jax.runtime.task_trace import TaskLog
from fedsim_jax.runtime.tasks import (
  READABLE_STATUSES,
  TaskAccounting,
  TaskHandle,
  TaskStatus,
  check_continuation,
)
from fedsim_jax.runtime.updates import Aggregator, UpdateBatch

# Re-exported: their home was this module (and checkpoints written before name it).
__all__ = ['Simulation', 'SimulationStalled', 'StopCondition', 'TaskAccounting', 'TaskHandle']

# Bound once: an enum member's attribute lookup costs more than the event it is used in.
_ARRIVED = TaskStatus.ARRIVED
_DROPPED_OUT = TaskStatus.DROPPED_OUT
_AGGREGATED = TaskStatus.AGGREGATED
_DISCARDED = TaskStatus.DISCARDED
_SEGMENT_DONE = TaskStatus.SEGMENT_DONE
_CONTINUED = TaskStatus.CONTINUED


def _part_attribute(part: str, name: str) -> Any:
  """A property reading and setting the attribute `name` of the simulation's `part`."""
  return property(
    lambda sim: getattr(getattr(sim, part), name),
    lambda sim, value: setattr(getattr(sim, part), name, value),
    doc=f'`{part}.{name}`.',
  )


VersionCallback = Callable[['Simulation'], None]


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
      without progress, or `STALL_EVENTS_PER_TASK` per task in flight where that is more, so
      that settings under which no round can succeed end with a message instead of running
      forever (the rule: `runtime.event_loop.EventLoop`).
    task_log: receives a record per task as its outcome becomes final
      (`runtime.task_trace`); settable later as the `task_log` attribute.
    max_batch_tasks: the most tasks computed in one executor batch once more are pending
      (0, the default: as many as 1 GiB of this model's updates holds, within 16..4096,
      `executor.choice.resolve_max_batch_tasks`; None: no limit). It bounds the updates held
      at once (`runtime.task_table`); a larger round whose aggregator has a linear form is
      summed chunk by chunk, in another order than one pass, so its results differ in rounding
      from an unbounded run's (`runtime.summed_aggregation`).
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
    client_loss: Callable[[Params, int], float] | None = None,
  ) -> None:
    self.scheduler = scheduler
    # A client's mean training loss at given params (q-FFL's F_k); rebuilt, not checkpointed.
    self.client_loss = client_loss
    self.aggregator = aggregator
    self.latency = latency
    self.client_sizes = np.asarray(client_sizes)
    self.clients = ClientActivity(availability or AlwaysAvailable(), self.num_clients)
    self.rng = rng
    self.deferred = deferred
    self.on_version = on_version
    self.bucket_bits = bucket_bits
    self.aggregate = aggregate
    self.loop = EventLoop(stall_events)
    if max_batch_tasks is not None:
      model_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(init_params))
      max_batch_tasks = resolve_max_batch_tasks(max_batch_tasks, model_bytes)
    self.tasks = TaskTable(executor, max_batch_tasks)
    self._apply = jax.jit(aggregator.apply)
    # How a round of a linear aggregator is applied from the sum of its updates (None: the
    # aggregator has no linear form; set it to None to have every round stacked and given to
    # `aggregator.apply`, e.g. to inspect each `UpdateBatch`).
    self.summed_aggregation = SummedAggregation.of(aggregator, max_batch_tasks)
    self.server_state = aggregator.init(init_params)
    self.now = 0.0
    self.version = 0
    self.outcomes = TaskOutcomes(self.num_clients, task_log)
    self._context = SchedulerContext(self)  # what the scheduler's callbacks receive

  # ---- Parts -----------------------------------------------------------------------------

  # The outcome counters (`TaskOutcomes`).
  accounting: TaskAccounting = _part_attribute('outcomes', 'accounting')
  task_log: TaskLog | None = _part_attribute('outcomes', 'task_log')
  gradient_steps: int = _part_attribute('outcomes', 'gradient_steps')
  dispatch_counts: np.ndarray = _part_attribute('outcomes', 'dispatch_counts')
  aggregated_counts: np.ndarray = _part_attribute('outcomes', 'aggregated_counts')
  busy_time: np.ndarray = _part_attribute('outcomes', 'busy_time')
  steps_per_client: np.ndarray = _part_attribute('outcomes', 'steps_per_client')
  update_wait_time: float = _part_attribute('outcomes', 'update_wait_time')
  discarded_counts: np.ndarray = _part_attribute('outcomes', 'discarded_counts')
  staleness_counts: np.ndarray = _part_attribute('outcomes', 'staleness_counts')
  window_staleness_counts: np.ndarray = _part_attribute('outcomes', 'window_staleness_counts')
  wasted_steps: int = _part_attribute('outcomes', 'wasted_steps')

  # The parts' attributes that were the simulation's own (settable: a lockstep sweep replaces
  # the executor, a benchmark the queue).
  executor: Any = _part_attribute('tasks', 'executor')
  max_batch_tasks: int | None = _part_attribute('tasks', 'max_batch_tasks')
  executor_batches: int = _part_attribute('tasks', 'executor_batches')
  executed_tasks: int = _part_attribute('tasks', 'executed_tasks')
  queue: EventQueue = _part_attribute('loop', 'queue')
  stall_events: int | None = _part_attribute('loop', 'stall_events')
  availability: Availability = _part_attribute('clients', 'availability')

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
    return self.outcomes.accounting.arrived

  def is_busy(self, client_id: int) -> bool:
    return self.clients.is_busy(client_id)

  def idle_clients(self) -> np.ndarray:
    """Ids of the clients online now and not training, ascending."""
    return self.clients.idle_clients(self.now)

  def draw_idle_client(self, rng: np.random.Generator) -> int | None:
    """One client drawn uniformly from `idle_clients()` (None if there is none), with exactly
    the draw of `choose_without_replacement(rng, idle_clients(), 1)`."""
    return self.clients.draw_idle_client(rng, self.now)

  def next_availability_time(self) -> float:
    """Earliest time > now at which some offline client comes online (inf if none)."""
    return self.clients.next_availability_time(self.now)

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
    if continues is not None:
      check_continuation(continues, client_id)
    if self.clients.is_offline(client_id, self.now):
      raise ValueError(f'client {client_id} is offline at {self.now}')
    if latency is None:
      latency = self.sample_latency(client_id)
    task_id = self.tasks.new_task_id()
    task = ClientTask(
      client_id=client_id,
      num_steps=num_steps,
      seed=task_id,
      start_params=self.params if start_params is None else start_params,
      task_inputs=task_inputs,
    )
    arrival = self.now + latency.duration(num_steps)
    offline_at = self.clients.online_until(client_id, self.now)
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
    handle.start_segment(continues, planned_steps)
    self.tasks.unresolved[task_id] = handle
    # A segment whose client goes offline as it ends cannot be continued: a dropout.
    if offline_at < arrival or (intermediate and offline_at == arrival):
      self.loop.queue.push(offline_at, EventKind.DROPOUT, handle)
    else:
      self.loop.queue.push(arrival, EventKind.ARRIVAL, handle)
      if self.aggregate:  # a timeline-only run never computes results
        self.tasks.pending.append(handle)
    if continues is None:
      self.outcomes.dispatched(client_id)
    else:
      self._resolve(continues, _CONTINUED)
    self.outcomes.accounting.in_flight += 1
    self.clients.start_task(client_id)
    if not self.deferred and self.aggregate:
      self.tasks.compute_pending()
    return handle

  def task_params(self, handle: TaskHandle) -> Params:
    """The client's model at the end of `handle` (start params + delta) for an arrived task
    or an ended intermediate segment, computing pending tasks first if needed."""
    self._check_readable(handle)
    return self.tasks.client_params(handle)

  def task_aux(self, handle: TaskHandle) -> dict[str, Any]:
    """The `aux` results of `handle` (as `task_params`): its row of every aux value (an array
    or a pytree, such as ASO-Fed's decayed gradient state)."""
    self._check_readable(handle)
    return self.tasks.aux(handle)

  def _check_results_exist(self) -> None:
    if not self.aggregate:
      raise ValueError(
        'this simulation runs the timeline only (aggregate=False): task results '
        'are never computed; allowed: aggregate=True'
      )

  def _check_readable(self, handle: TaskHandle) -> None:
    self._check_results_exist()
    if handle.status not in READABLE_STATUSES:
      raise ValueError(
        f'task {handle.task_id} is {handle.status}; only arrived tasks and '
        'ended segments have readable results'
      )

  def set_timer(self, time: float, payload: Any = None) -> None:
    """Calls `scheduler.on_timer(sim, payload)` at virtual time `time` (>= now). At one
    instant, timers fire after every arrival and dropout of that instant (a client arriving
    exactly at a deadline is on time), and in the order they were set."""
    if time < self.now:
      raise ValueError(f'timer at {time} is in the past (now {self.now})')
    self.loop.queue.push(time, EventKind.TIMER, payload)

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
    if staleness is None:
      staleness = [self.version - h.version for h in handles]
    return self.tasks.stacked_updates(
      handles,
      weights,
      staleness,
      with_client_params=with_client_params,
      bucket_bits=self.bucket_bits,
    )

  def apply_updates(
    self,
    handles: Sequence[TaskHandle],
    weights: Sequence[float],
    staleness: Sequence[int] | None = None,
  ) -> None:
    """Aggregates the updates of arrived `handles` with `weights` into a new server version
    (`staleness` as in `updates`). A round larger than `max_batch_tasks` whose aggregator has
    a linear form is applied from the sum of its updates when they are still pending and the
    executor sums tasks as it runs them, or when the round is larger than `max_batch_tasks`
    (chunk by chunk; `runtime.summed_aggregation`)."""
    if not handles:
      raise ValueError('apply_updates needs at least one update')
    if not self.aggregate:  # timeline only: the updates count, the model stays
      self._check_arrived(handles, 'aggregate')
      self._new_version(handles)
      return
    summed = self.summed_aggregation
    if summed is not None and summed.applies_to(handles, self.tasks):
      self._check_arrived(handles, 'aggregate')
      if staleness is None:
        staleness = [self.version - h.version for h in handles]
      self.server_state = summed.apply(
        self.server_state, self.params, self.tasks, handles, weights, staleness, self.bucket_bits
      )
      self._new_version(handles)
      return
    self.apply_update_batch(
      self.updates(handles, weights, self.aggregator.needs_client_params, staleness), handles
    )

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
      if h.status != _ARRIVED:
        raise ValueError(f'task {h.task_id} is {h.status}; only arrived tasks {action}')

  def _new_version(self, handles: Sequence[TaskHandle]) -> None:
    self.version += 1
    self.loop.progressed()
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
    round's straggler window closes). A wrapping aggregator's state (update transforms,
    `fedsim_jax.transforms`) passes `update` on to the state it wraps (`map_inner`)."""
    map_inner = getattr(self.server_state, 'map_inner', None)
    self.server_state = update(self.server_state) if map_inner is None else map_inner(update)

  def _mark_aggregated(self, handles: Sequence[TaskHandle], missed: int) -> None:
    """Resolves `handles` as used in server version `self.version`; an update's staleness is
    the versions it missed, `missed - h.version`."""
    for h in handles:
      self._resolve(h, _AGGREGATED)
      self.outcomes.aggregated(h, missed - h.version, self.now, self.version)

  def reset_window(self) -> None:
    """Starts a new statistics window (`window_staleness_counts`), e.g. at an evaluation."""
    self.outcomes.reset_window()

  def record_skipped(self, client_id: int, **extras: Any) -> None:
    """Traces a client selected now that does not train (CC-FedAvg's skipping clients);
    `extras` are scalars for the record (e.g. `estimated=True`)."""
    self.outcomes.record_skipped(client_id, self.now, self.version, extras)

  def write_unresolved_tasks(self) -> None:
    """Traces the tasks still in flight or waiting (at the end of a run)."""
    self.outcomes.write_unresolved(self.tasks.unresolved.values())

  def advance_version(self) -> None:
    """Ends a server round that has no update to apply: the version advances, the model and
    the server optimizer state stay (e.g. CC-FedAvg's Strategy 1 when nobody trains)."""
    self._new_version(())

  def discard(self, handle: TaskHandle, reason: str) -> None:
    """Drops an arrived update for `reason` (recorded in the accounting)."""
    if handle.status != _ARRIVED:
      raise ValueError(f'task {handle.task_id} is {handle.status}; only arrived tasks discard')
    self._resolve(handle, _DISCARDED, reason)

  # ---- Pausing and checkpoints -----------------------------------------------------------

  def request_pause(self) -> None:
    """Makes `run` return once the current event is processed (for a checkpoint, or an
    interrupt); safe to call from `on_version` or a signal handler. Running on afterwards
    gives exactly the run that was never paused."""
    self.loop.pause_requested = True

  def finished(self, stop: StopCondition) -> bool:
    """Whether `run(stop)` has nothing left to do (a limit reached, or no event left)."""
    return not len(self.loop.queue) or stop.reached(self)

  def state(self) -> dict[str, Any]:
    """Everything this simulation holds that changes as it runs, as plain data (pytrees,
    numpy arrays and generators, dataclasses, the scheduler): what a checkpoint saves
    (`runtime.simulation_state`). The rest (executor, aggregator, callbacks) is rebuilt from
    the run's config."""
    self.compact_results()
    return simulation_state.stored_state(self)

  def compact_results(self) -> None:
    """Copies the results still held out of executor batches most of whose rows are already
    used (`TaskTable.compact_results`); values and later aggregations are unchanged."""
    self.tasks.compact_results()

  def restore(self, state: dict[str, Any]) -> None:
    """Continues from `state()` of a simulation built from the same config."""
    simulation_state.restore_state(self, state)

  # ---- Events ----------------------------------------------------------------------------

  def _resolve(self, handle: TaskHandle, status: TaskStatus, reason: str | None = None) -> None:
    self.outcomes.resolved(handle, status, reason)
    handle.status = status
    self.tasks.release(handle)  # frees the start params and results

  def _finish_task(self, handle: TaskHandle) -> None:
    self.outcomes.ended(handle)
    self.clients.finish_task(handle.client_id)

  def _end_segment(self, handle: TaskHandle) -> None:
    handle.status = _SEGMENT_DONE
    # An optional hook, not part of the `Scheduler` protocol (see its docstring).
    self.scheduler.on_segment_end(self._context, handle)  # type: ignore[attr-defined]
    if handle.status != _CONTINUED:
      raise RuntimeError(
        f'task {handle.task_id}: on_segment_end did not dispatch the next '
        'segment (dispatch(..., continues=handle))'
      )

  def start_scheduler(self) -> None:
    """The event loop's first call: the scheduler's `start`."""
    self.scheduler.start(self._context)

  def on_arrival_event(self, handle: TaskHandle) -> None:
    """The event loop's handler of a task's arrival (or an intermediate segment's end)."""
    self._finish_task(handle)
    self.outcomes.trained(handle)
    if handle.intermediate:
      self._end_segment(handle)
      return
    handle.status = _ARRIVED
    self.outcomes.arrived()
    self.scheduler.on_arrival(self._context, handle)

  def on_dropout_event(self, handle: TaskHandle) -> None:
    """The event loop's handler of a client going offline before its task ended."""
    self._finish_task(handle)
    handle.status = _DROPPED_OUT
    self.tasks.release(handle)
    self.outcomes.dropped_out(handle)
    on_dropout = getattr(self.scheduler, 'on_dropout', None)
    if on_dropout is not None:
      on_dropout(self._context, handle)

  def on_timer_event(self, payload: Any) -> None:
    """The event loop's handler of a timer the scheduler set."""
    self.scheduler.on_timer(self._context, payload)

  def run(self, stop: StopCondition) -> None:
    """Processes events until `stop` is reached, nothing is left to happen, or a pause was
    requested (`request_pause`; the request is consumed)."""
    self.loop.run(self, stop)

  # ---- Reporting -------------------------------------------------------------------------

  def report(self) -> dict[str, Any]:
    """Task accounting, participation and timing figures for the run summary."""
    return run_report(self)
