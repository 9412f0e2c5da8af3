"""Synchronous rounds (FedAvg's schedule) with over-selection, deadlines and time limits.

Each round the server samples `num_selected` idle, online clients without replacement (B_t),
all starting from the current model, and aggregates when `cohort_size` of them (B) have
reported: all of them by default (FedAvg, McMahan et al. 2017), the fastest B with
over-selection (Bonawitz et al. 2019). With a `deadline`, the round also closes that many
seconds after it started, with whoever has reported (at least `min_responses`, else the round
is abandoned and restarted). Updates that arrive after their round closed are stragglers: they
are discarded with reason 'straggler' unless a `late_update_handler` takes them (FARe-DUST and
FeAST-on-MSG use them). Two more hooks let such algorithms build on these rounds: `task_inputs`
gives each dispatched task its own inputs (FARe-DUST's per-client teacher) and `round_closing`
sees a round's updates just before they are aggregated, with the stragglers still training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedsim_jax.runtime.scheduler_context import SchedulerContext
from fedsim_jax.runtime.simulation import TaskHandle
from fedsim_jax.str_enum import StrEnum
from fedsim_jax.strategy.local_work import LocalWork


class Weighting(StrEnum):
  """Update weights p_k (`algorithm.kwargs.weighting`)."""

  NUM_EXAMPLES = 'num_examples'  # the client's share of the federation's examples, n_k / n
  UNIFORM = 'uniform'  # 1 per update


WEIGHTINGS = tuple(weighting.value for weighting in Weighting)

LateUpdateHandler = Callable[[SchedulerContext, TaskHandle], None]
TaskInputs = Callable[[SchedulerContext, int], Any]


@dataclasses.dataclass(frozen=True)
class ClosingRound:
  """A round at the moment its updates are about to be aggregated.

  Attributes:
    index: the round (`metadata['round']` of its tasks).
    start_time: virtual time at which its tasks were dispatched.
    aggregated: the arrived updates about to be aggregated, in dispatch order.
    weights: their aggregation weights.
    stragglers: its tasks still training (they will arrive late, or drop out).
  """

  index: int
  start_time: float
  aggregated: list[TaskHandle]
  weights: list[float]
  stragglers: list[TaskHandle]


# Called just before a round is aggregated; may return the weights to aggregate with instead.
RoundClosing = Callable[[SchedulerContext, ClosingRound], 'Sequence[float] | None']


def update_weights(
  sim: SchedulerContext, handles: Sequence[TaskHandle], weighting: str
) -> list[float]:
  """Aggregation weights p_k: the client's share of the federation's examples (n_k / n) or 1
  per update. Normalised averages do not depend on the scale; sums ('sum' normalization, as
  FedCompass's FedAsync and FedBuff use) need p_k to be shares."""
  if weighting == Weighting.NUM_EXAMPLES:
    total = float(sim.client_sizes.sum())
    return [float(sim.client_sizes[h.client_id]) / total for h in handles]
  return [1.0] * len(handles)


def check_weighting(weighting: str) -> None:
  if weighting not in WEIGHTINGS:
    raise ValueError(f'algorithm.kwargs.weighting={weighting!r}; allowed: {WEIGHTINGS}')


class SynchronousScheduler:
  """Synchronous rounds.

  Args:
    cohort_size: B, the updates aggregated per round.
    local_work: steps per task (fixed, epochs or time-limited).
    weighting: 'num_examples' (n_k, McMahan et al.) or 'uniform'.
    num_selected: B_t >= B clients sampled per round (default B: no over-selection).
    deadline: seconds after a round's start at which it closes (None: no deadline).
    min_responses: fewest updates a deadline-closed round aggregates.
    late_update_handler: receives stragglers instead of discarding them.
    task_inputs: `(sim, client) -> task_inputs` of each task dispatched (None: no inputs).
    round_closing: called with a `ClosingRound` just before a round's updates are aggregated;
      weights it returns replace the round's (q-FFL's), None keeps them.
  """

  def __init__(
    self,
    cohort_size: int,
    local_work: LocalWork,
    weighting: str = 'num_examples',
    *,
    num_selected: int | None = None,
    deadline: float | None = None,
    min_responses: int = 1,
    late_update_handler: LateUpdateHandler | None = None,
    task_inputs: TaskInputs | None = None,
    round_closing: RoundClosing | None = None,
  ):
    check_weighting(weighting)
    if cohort_size < 1:
      raise ValueError(f'algorithm.kwargs.cohort_size={cohort_size}; must be >= 1')
    num_selected = cohort_size if num_selected is None else num_selected
    if num_selected < cohort_size:
      raise ValueError(
        f'algorithm.kwargs.num_selected={num_selected}; must be >= cohort_size ({cohort_size})'
      )
    if deadline is not None and deadline <= 0:
      raise ValueError(f'algorithm.kwargs.deadline={deadline}; must be > 0')
    if not 1 <= min_responses <= cohort_size:
      raise ValueError(f'algorithm.kwargs.min_responses={min_responses}; allowed: 1..{cohort_size}')
    self.cohort_size = cohort_size
    self.num_selected = num_selected
    self.local_work = local_work
    self.weighting = weighting
    self.deadline = deadline
    self.min_responses = min_responses
    self.late_update_handler = late_update_handler
    self.task_inputs = task_inputs
    self.round_closing = round_closing
    self.round_index = -1
    self.round_start_time = 0.0
    self._outstanding: set[TaskHandle] = set()
    self._arrived: list[TaskHandle] = []
    self._round_open = False
    self._waiting_for_clients = False

  def start(self, sim: SchedulerContext) -> None:
    if self.num_selected > sim.num_clients:
      raise ValueError(
        f'algorithm.kwargs.num_selected={self.num_selected} exceeds the federation '
        f'({sim.num_clients} clients)'
      )
    self._start_round(sim)

  def _start_round(self, sim: SchedulerContext) -> None:
    idle = sim.idle_clients()
    if len(idle) < self.num_selected:
      # Too few clients online and idle: try again when a straggler finishes or another
      # client comes online.
      self._waiting_for_clients = True
      retry = sim.next_availability_time()
      if np.isfinite(retry):
        sim.set_timer(retry, ('retry', None))
      return
    self._waiting_for_clients = False
    self.round_index += 1
    cohort = np.sort(sim.rng.choice(idle, self.num_selected, replace=False))
    self._outstanding = set()
    self._arrived = []
    self._round_open = True
    self.round_start_time = sim.now
    for client in cohort:
      latency = sim.sample_latency(client)
      steps = self.local_work.num_steps(int(sim.client_sizes[client]), latency)
      inputs = None if self.task_inputs is None else self.task_inputs(sim, int(client))
      self._outstanding.add(
        sim.dispatch(
          client, steps, latency=latency, task_inputs=inputs, metadata={'round': self.round_index}
        )
      )
    if self.deadline is not None:
      sim.set_timer(sim.now + self.deadline, ('deadline', self.round_index))

  def _close_round(self, sim: SchedulerContext) -> None:
    # Aggregate in dispatch order, so that the result never depends on arrival order.
    arrived = sorted(self._arrived, key=lambda h: h.task_id)
    stragglers = sorted(self._outstanding, key=lambda h: h.task_id)
    self._arrived = []
    self._outstanding = set()  # whoever is still training is now a straggler
    self._round_open = False
    usable = [h for h in arrived if h.num_steps > 0]
    for h in arrived:
      if h.num_steps == 0:
        sim.discard(h, 'no_local_steps')
    if len(usable) >= self.min_responses:
      weights = update_weights(sim, usable, self.weighting)
      if self.round_closing is not None:
        closing = ClosingRound(self.round_index, self.round_start_time, usable, weights, stragglers)
        reweighted = self.round_closing(sim, closing)
        if reweighted is not None:
          weights = [float(w) for w in reweighted]
      sim.apply_updates(usable, weights)
    else:
      for h in usable:
        sim.discard(h, 'too_few_responses')
    self._start_round(sim)

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    if handle not in self._outstanding:
      if self.late_update_handler is not None:
        self.late_update_handler(sim, handle)
      else:
        sim.discard(handle, 'straggler')
      self._retry_if_waiting(sim)
      return
    self._outstanding.discard(handle)
    self._arrived.append(handle)
    if len(self._arrived) == self.cohort_size or not self._outstanding:
      self._close_round(sim)

  def on_dropout(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    if handle in self._outstanding:
      self._outstanding.discard(handle)
      if not self._outstanding and self.deadline is None:
        self._close_round(sim)
    else:
      self._retry_if_waiting(sim)

  def _retry_if_waiting(self, sim: SchedulerContext) -> None:
    if self._waiting_for_clients:
      self._start_round(sim)

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None:
    kind, round_index = payload
    if kind == 'retry':
      self._retry_if_waiting(sim)
    elif kind == 'deadline' and round_index == self.round_index and self._round_open:
      self._close_round(sim)


class AroundRounds:
  """Base of schedulers that keep their own state around synchronous rounds (FARe-DUST's
  history, MOON's previous models, FedDyn's client gradients): the rounds themselves are
  `self.rounds`, a `SynchronousScheduler` built with the subclass's hooks, and the scheduler
  protocol is forwarded to it."""

  rounds: SynchronousScheduler

  def start(self, sim: SchedulerContext) -> None:
    self.rounds.start(sim)

  def on_arrival(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    self.rounds.on_arrival(sim, handle)

  def on_timer(self, sim: SchedulerContext, payload: Any) -> None:
    self.rounds.on_timer(sim, payload)

  def on_dropout(self, sim: SchedulerContext, handle: TaskHandle) -> None:
    self.rounds.on_dropout(sim, handle)
