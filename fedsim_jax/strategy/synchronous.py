"""Synchronous rounds: sample a cohort, wait for all of it, aggregate (FedAvg's schedule)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from fedsim_jax.runtime.simulation import Simulation, TaskHandle

WEIGHTINGS = ('num_examples', 'uniform')


@dataclasses.dataclass(frozen=True)
class LocalWork:
  """How much a client trains per task: fixed `steps`, or `epochs` over its own data.

  With epochs, client i runs ceil(epochs * n_i / batch_size) steps (McMahan et al.'s E).
  """

  steps: int | None = None
  epochs: float | None = None
  batch_size: int = 32

  def __post_init__(self):
    if (self.steps is None) == (self.epochs is None):
      raise ValueError('give exactly one of client.local_steps and client.local_epochs')
    if self.steps is not None and self.steps < 1:
      raise ValueError(f'client.local_steps={self.steps}; must be >= 1')
    if self.epochs is not None and self.epochs <= 0:
      raise ValueError(f'client.local_epochs={self.epochs}; must be > 0')

  def num_steps(self, num_examples: int) -> int:
    if self.steps is not None:
      return self.steps
    return max(1, math.ceil(self.epochs * num_examples / self.batch_size))


class SynchronousScheduler:
  """Each round: `cohort_size` clients sampled without replacement; the round ends when the
  slowest of them arrives; the server aggregates all of them, then starts the next round.

  Args:
    cohort_size: clients per round.
    local_work: steps per task.
    weighting: 'num_examples' (n_k / n, McMahan et al.) or 'uniform'.
  """

  def __init__(self, cohort_size: int, local_work: LocalWork, weighting: str = 'num_examples'):
    if weighting not in WEIGHTINGS:
      raise ValueError(f'scheduler.weighting={weighting!r}; allowed: {WEIGHTINGS}')
    if cohort_size < 1:
      raise ValueError(f'scheduler.cohort_size={cohort_size}; must be >= 1')
    self.cohort_size = cohort_size
    self.local_work = local_work
    self.weighting = weighting
    self._round: list[TaskHandle] = []
    self._arrived = 0

  def start(self, sim: Simulation) -> None:
    if self.cohort_size > sim.num_clients:
      raise ValueError(f'scheduler.cohort_size={self.cohort_size} exceeds the federation '
                       f'({sim.num_clients} clients)')
    self._start_round(sim)

  def _start_round(self, sim: Simulation) -> None:
    cohort = np.sort(sim.rng.choice(sim.num_clients, self.cohort_size, replace=False))
    self._round = [sim.dispatch(c, self.local_work.num_steps(int(sim.client_sizes[c])))
                   for c in cohort]
    self._arrived = 0

  def on_arrival(self, sim: Simulation, handle: TaskHandle) -> None:
    self._arrived += 1
    if self._arrived < len(self._round):
      return
    if self.weighting == 'num_examples':
      weights = [float(sim.client_sizes[h.client_id]) for h in self._round]
    else:
      weights = [1.0] * len(self._round)
    sim.apply_updates(self._round, weights)
    self._start_round(sim)

  def on_timer(self, sim: Simulation, payload: Any) -> None:
    del sim, payload  # synchronous rounds set no timers
