"""The event loop over virtual time: pops events in order, advances the clock, hands each
event to the simulation's handler, and stops at a `StopCondition`, a pause request, or a stall.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

from fedsim_jax.runtime.events import EventKind, EventQueue
from fedsim_jax.runtime.tasks import TaskAccounting, TaskHandle

# Events a task in flight may take without progress: its arrival or dropout, a segment end.
STALL_EVENTS_PER_TASK = 4


class SimulationStalled(RuntimeError):
  """The run stopped making progress (see `Simulation`'s `stall_events`): its settings cannot
  complete a round or buffer (a round deadline or time limit shorter than any task, say).
  One-line message."""


class RunPosition(Protocol):
  """Where a run stands: what a `StopCondition` reads."""

  @property
  def now(self) -> float: ...

  @property
  def version(self) -> int: ...

  @property
  def client_updates(self) -> int: ...


@dataclasses.dataclass
class StopCondition:
  """The run stops at the first limit reached (None = no limit)."""

  max_versions: int | None = None
  max_virtual_time: float | None = None
  max_client_updates: int | None = None

  def reached(self, sim: RunPosition) -> bool:
    return (
      (self.max_versions is not None and sim.version >= self.max_versions)
      or (self.max_virtual_time is not None and sim.now >= self.max_virtual_time)
      or (self.max_client_updates is not None and sim.client_updates >= self.max_client_updates)
    )


class EventHandler(Protocol):
  """What the event loop drives: the run's clock and counters, and a handler per event kind."""

  now: float
  version: int
  accounting: TaskAccounting

  @property
  def num_clients(self) -> int: ...

  def start_scheduler(self) -> None: ...

  def on_arrival_event(self, handle: TaskHandle) -> None: ...

  def on_dropout_event(self, handle: TaskHandle) -> None: ...

  def on_timer_event(self, payload: Any) -> None: ...


class EventLoop:
  """The queue of future events and the loop that processes them.

  It also applies the stall rule: the run stops with `SimulationStalled` after `stall_events`
  events without progress (None: never), or `STALL_EVENTS_PER_TASK` per task in flight where
  that is more (at most one task per client counted), so that settings under which no round
  can succeed end with a message instead of running forever. Progress is a new server version
  (`progressed`), or an arrived update held for aggregation beyond the most held since the
  last version: a round or buffer of any size fills with progress at every arrival, whereas a
  round that can never close (its updates discarded as stragglers, or as empty) makes none.
  The per-task allowance covers the stragglers of a round that closed without them.

  Attributes:
    queue: the events to come (`EventQueue`).
    stall_events: the stall rule's allowance.
    events_without_progress, most_held, most_in_flight: the stall rule's state since the last
      server version.
    started: whether the scheduler's `start` has been called.
    pause_requested: `run` returns after the current event.
  """

  def __init__(self, stall_events: int | None) -> None:
    self.queue = EventQueue()
    self.stall_events = stall_events
    self.events_without_progress = 0
    self.most_held = 0  # most arrived updates held at once since the last version
    self.most_in_flight = 0  # most tasks in flight at once since the last version
    self.started = False
    self.pause_requested = False

  def progressed(self) -> None:
    """Resets the stall rule's state at a new server version."""
    self.events_without_progress = 0
    self.most_held = 0
    self.most_in_flight = 0

  def run(self, sim: EventHandler, stop: StopCondition) -> None:
    """Processes events until `stop` is reached, nothing is left to happen, or a pause was
    requested (the request is consumed)."""
    self.pause_requested = False
    if not self.started:
      self.started = True
      sim.start_scheduler()
    # `stop.reached(sim)`, unrolled: this loop runs a few times per client update.
    max_versions, max_time, max_updates = (
      math.inf if limit is None else limit
      for limit in (stop.max_versions, stop.max_virtual_time, stop.max_client_updates)
    )
    queue, accounting = self.queue, sim.accounting
    stall_events = math.inf if self.stall_events is None else self.stall_events
    on_arrival, on_dropout, on_timer = (
      sim.on_arrival_event,
      sim.on_dropout_event,
      sim.on_timer_event,
    )
    arrival, dropout = EventKind.ARRIVAL, EventKind.DROPOUT
    while len(queue) and not (
      sim.version >= max_versions
      or sim.now >= max_time
      or accounting.arrived >= max_updates
      or self.pause_requested
    ):
      if queue.peek_time() > max_time:
        sim.now = max_time  # stop.max_virtual_time (finite here)
        break
      if accounting.waiting > self.most_held:  # an update held beyond the most so far
        self.most_held = accounting.waiting
        self.events_without_progress = 0
      if accounting.in_flight > self.most_in_flight:
        self.most_in_flight = accounting.in_flight
      if self.events_without_progress >= stall_events:
        self._check_stalled(sim, stall_events)
      self.events_without_progress += 1
      event = queue.pop()
      sim.now = event.time
      if event.kind is arrival:
        on_arrival(event.payload)
      elif event.kind is dropout:
        on_dropout(event.payload)
      else:
        on_timer(event.payload)

  def _check_stalled(self, sim: EventHandler, stall_events: float) -> None:
    """Raises `SimulationStalled` once the events without progress exceed the allowance of
    the tasks in flight too (`stall_events`)."""
    tasks = min(self.most_in_flight, sim.num_clients)
    if self.events_without_progress < max(stall_events, STALL_EVENTS_PER_TASK * tasks):
      return
    raise SimulationStalled(
      f'no server version in {self.events_without_progress} events, none of them holding a '
      f'new update (version {sim.version}, virtual time {sim.now:.6g}s, '
      f'{self.most_in_flight} tasks in flight at most): no round or buffer can complete under '
      'these settings; check the deadline, time limit, min_responses and staleness bounds '
      'against the latency model'
    )
