"""The scheduler protocol: the host-side policy a simulation calls back as virtual time advances."""

from __future__ import annotations

from typing import Any, Protocol

from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.tasks import TaskHandle


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
    `arrival_time`, `metadata` you gave at dispatch; `handle.status` is
    `TaskStatus.ARRIVED`). Its staleness is `sim.version - handle.version`. Every arrived
    task must eventually be aggregated (`sim.apply_updates`) or discarded
    (`sim.discard(handle, reason)`); until then it is held (counted as 'waiting', e.g. in a
    buffer).
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
