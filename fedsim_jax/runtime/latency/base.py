"""Interfaces of latency and availability models.

A latency model turns a dispatched task into virtual seconds. It draws a `TaskLatency` per task
(before the number of local steps is fixed, so that a scheduler can fit steps into a time
limit); the task then lasts `TaskLatency.duration(num_steps)`. Durations never depend on
trained weights. Every model owns a numpy generator derived from the run seed and
draws from it once per task, in dispatch order, so runs are reproducible.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt


class TaskLatency(NamedTuple):
  """One task's latency components, in virtual seconds.

  Attributes:
    communication: download plus upload time.
    overhead: fixed on-device time independent of the work (start-up, turn-down; the
      straggler paper's C).
    per_step: on-device compute time of one local step.
  """

  communication: float
  overhead: float
  per_step: float

  def compute_time(self, num_steps: int) -> float:
    return self.overhead + self.per_step * num_steps

  def duration(self, num_steps: int) -> float:
    return self.communication + self.compute_time(num_steps)

  def steps_within(self, time_limit: float, include_overhead: bool = True) -> int:
    """Most local steps whose compute time fits in `time_limit` (communication excluded)."""
    budget = time_limit - (self.overhead if include_overhead else 0.0)
    if budget <= 0:
      return 0
    return int(math.floor(budget / self.per_step + 1e-9))


class LatencyModel(Protocol):
  """Draws task latencies for clients."""

  def sample(self, client_id: int) -> TaskLatency:
    """The latency of the next task of `client_id` (one call per dispatched task)."""
    ...

  def expected_step_time(self, client_id: int) -> float:
    """The client's mean compute seconds per local step (used to tier clients by speed)."""
    ...


class Availability(Protocol):
  """When clients are online. Answers with times, never with a boolean poll."""

  def next_available(self, client_id: int, time: float) -> float:
    """Earliest time >= `time` at which the client is online (`math.inf` if never again)."""
    ...

  def online_until(self, client_id: int, time: float) -> float:
    """End of the online window containing `time` (`math.inf` if it never ends). Only called
    for a client that is online at `time`."""
    ...


class AlwaysAvailable:
  """Every client is online at all times."""

  def next_available(self, client_id: int, time: float) -> float:
    del client_id
    return time

  def online_until(self, client_id: int, time: float) -> float:
    del client_id, time
    return math.inf


def available_clients(availability: Availability, num_clients: int, time: float) -> np.ndarray:
  """Ids of the clients online at `time`."""
  if isinstance(availability, AlwaysAvailable):
    return np.arange(num_clients)
  return np.array(
    [c for c in range(num_clients) if availability.next_available(c, time) <= time], np.int64
  )


def positive_normal(
  rng: np.random.Generator, mean: npt.ArrayLike, std: npt.ArrayLike, max_tries: int = 1000
) -> np.ndarray:
  """Normal draws truncated to (0, inf) by redrawing non-positive values."""
  mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
  draw = rng.normal(mean, std)
  for _ in range(max_tries):
    bad = draw <= 0
    if not np.any(bad):
      return draw
    draw = np.where(bad, rng.normal(mean, std), draw)
  raise ValueError('latency draws stayed non-positive; std is far larger than mean')


def jittered(rng: np.random.Generator, value: float, jitter: float) -> float:
  """`value` with relative Gaussian noise N(value, (jitter * value)^2), truncated to positive
  values (no draw when `jitter` is 0). The per-task jitter of every latency model."""
  if not jitter:
    return float(value)
  # Scalar form of `positive_normal` (the same draws, without array overhead: this runs once
  # per dispatched task).
  std = jitter * value
  for _ in range(1000):
    draw = rng.normal(value, std)
    if draw > 0:
      return float(draw)
  raise ValueError('latency draws stayed non-positive; std is far larger than mean')
