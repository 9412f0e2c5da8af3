"""Asynchronous training with a concurrency cap: FedAsync (buffer of 1) and FedBuff (buffer K).

The server keeps up to `concurrency` clients training (Nguyen et al. 2022's max concurrency;
FedAsync's in-flight limit). Whenever slots are free, it samples idle, online clients uniformly
without replacement, and they download the current model. Every arrival whose staleness (server
versions since its download) exceeds `max_staleness` is discarded with reason 'stale'; the others
go into a buffer, and a full buffer of `buffer_size` updates becomes one server update.

Freed slots are refilled by a timer at the current virtual time, which fires after every other
event of that instant: simultaneous arrivals are all aggregated before replacements download
the model, as a real server would process a burst of uploads.
"""

from __future__ import annotations

from typing import Any

from fedsim_jax.runtime.sampling import choose_without_replacement
from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.strategy.client_state import ClientState
from fedsim_jax.strategy.local_work import LocalWork
from fedsim_jax.strategy.synchronous import check_weighting, update_weights


class AsynchronousScheduler:
  """Concurrency-capped asynchronous scheduling with a buffer.

  Args:
    concurrency: most tasks in flight at once.
    buffer_size: arrivals per server update (1 = FedAsync, K = FedBuff).
    local_work: steps per task.
    weighting: 'uniform' (FedBuff, FedAsync) or 'num_examples'.
    max_staleness: largest accepted staleness (None: no limit).
    client_state: per-client task inputs and arrival observer of the algorithm (ASO-Fed), or
      None.
  """

  def __init__(
    self,
    concurrency: int,
    buffer_size: int,
    local_work: LocalWork,
    weighting: str = 'uniform',
    max_staleness: int | None = None,
    client_state: ClientState | None = None,
  ):
    check_weighting(weighting)
    if concurrency < 1:
      raise ValueError(f'concurrency={concurrency}; must be >= 1')
    if buffer_size < 1:
      raise ValueError(f'buffer_size={buffer_size}; must be >= 1')
    if max_staleness is not None and max_staleness < 0:
      raise ValueError(f'max_staleness={max_staleness}; must be >= 0')
    self.concurrency = concurrency
    self.buffer_size = buffer_size
    self.local_work = local_work
    self.weighting = weighting
    self.max_staleness = max_staleness
    self.client_state = client_state
    self.buffer: list[TaskHandle] = []
    self._in_flight = 0
    self._refill_at = float('inf')  # time of the earliest pending refill timer

  def start(self, sim: SchedulerContext) -> None:
    if self.concurrency > sim.num_clients:
      raise ValueError(
        f'concurrency={self.concurrency} exceeds the federation ({sim.num_clients} clients)'
      )
    self._refill(sim)

  def _schedule_refill(self, sim: SchedulerContext, time: float | None = None) -> None:
    time = sim.now if time is None else time
    if time < self._refill_at:
      self._refill_at = time
      sim.set_timer(time, ('refill', time))

  def _refill(self, sim: SchedulerContext) -> None:
    free = self.concurrency - self._in_flight
    if free <= 0:
      return
    if free == 1:  # one slot freed by an arrival: the hot path, no idle-client array
      client = sim.draw_idle_client(sim.rng)
      chosen = [] if client is None else [client]
    else:
      idle = sim.idle_clients()
      chosen = sorted(
        choose_without_replacement(sim.rng, idle, min(free, len(idle))) if len(idle) else []
      )
    if not chosen:
      retry = sim.next_availability_time()
      if retry != float('inf'):
        self._schedule_refill(sim, retry)
      return
    for client in chosen:
      latency = sim.sample_latency(client)
      steps = self.local_work.num_steps(int(sim.client_sizes[client]), latency)
      inputs = None if self.client_state is None else self.client_state.task_inputs(sim, client)
      sim.dispatch(client, steps, latency=latency, task_inputs=inputs)
      self._in_flight += 1
    if len(chosen) < free:  # some slots stay free until more clients come online
      retry = sim.next_availability_time()
      if retry != float('inf'):
        self._schedule_refill(sim, retry)

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    if self.client_state is not None:
      self.client_state.observe_arrival(sim, handle)
    self._in_flight -= 1
    self._schedule_refill(sim)
    staleness = sim.version - handle.version
    if self.max_staleness is not None and staleness > self.max_staleness:
      sim.discard(handle, 'stale')
      return
    if handle.num_steps == 0:
      sim.discard(handle, 'no_local_steps')
      return
    self.buffer.append(handle)
    if len(self.buffer) >= self.buffer_size:
      buffer, self.buffer = self.buffer, []
      sim.apply_updates(buffer, update_weights(sim, buffer, self.weighting))

  def on_dropout(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    del handle
    self._in_flight -= 1
    self._schedule_refill(sim)

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None:
    kind, time = payload
    if kind == 'refill' and time == self._refill_at:  # later timers were superseded
      self._refill_at = float('inf')
      self._refill(sim)
