"""Latency models: how long a client task takes in virtual seconds.

A duration depends only on the client, the task size and the model's own random stream, never
on trained weights (DESIGN.md), so scheduling never waits for training.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

SPEED_DISTRIBUTIONS = ('homogeneous', 'normal', 'exponential')


class LatencyModel(Protocol):
  """Anything that turns a dispatched task into a duration in virtual seconds."""

  def task_duration(self, client_id: int, num_steps: int) -> float:
    ...


def _positive_normal(rng: np.random.Generator, mean: np.ndarray, std: np.ndarray,
                     max_tries: int = 1000) -> np.ndarray:
  """Normal draws truncated to (0, inf) by redrawing non-positive values."""
  draw = rng.normal(mean, std)
  for _ in range(max_tries):
    bad = draw <= 0
    if not np.any(bad):
      return draw
    draw = np.where(bad, rng.normal(mean, std), draw)
  raise ValueError('latency draws stayed non-positive; std is far larger than mean')


class PerStepLatency:
  """Per-step time drawn once per client, optional per-task jitter (FedCompass, Sec. 5.4).

  Client i's mean time per local step `t_i` is drawn once from `distribution`:
  `homogeneous` (all equal to `mean`), `normal` (N(mean, (spread * mean)^2); FedCompass uses
  spread 0.3) or `exponential` (mean `mean`). Each task then takes
  `num_steps * t_i^(k) + communication_time` with `t_i^(k) ~ N(t_i, (jitter * t_i)^2)`
  (FedCompass: jitter 0.05). Normal draws are truncated to positive values by redrawing: a
  documented choice, since the paper does not say how negative draws are handled.

  Args:
    num_clients: federation size.
    rng: this model's own generator (derive it from the run seed).
    mean: mean seconds per local step.
    distribution: one of `SPEED_DISTRIBUTIONS`.
    spread: relative standard deviation for `normal`.
    jitter: relative per-task standard deviation (0 disables jitter).
    communication_time: fixed seconds added to every task (download + upload).
  """

  def __init__(self, num_clients: int, rng: np.random.Generator, *, mean: float = 1.0,
               distribution: str = 'homogeneous', spread: float = 0.3, jitter: float = 0.0,
               communication_time: float = 0.0):
    if distribution not in SPEED_DISTRIBUTIONS:
      raise ValueError(f'latency.distribution={distribution!r}; allowed: {SPEED_DISTRIBUTIONS}')
    for name, value in (('mean', mean), ('spread', spread), ('jitter', jitter),
                        ('communication_time', communication_time)):
      if value < 0 or (name == 'mean' and value == 0):
        raise ValueError(f'latency.{name}={value}; must be {"> 0" if name == "mean" else ">= 0"}')
    self.rng = rng
    self.jitter = jitter
    self.communication_time = communication_time
    if distribution == 'homogeneous':
      self.step_time = np.full(num_clients, mean, np.float64)
    elif distribution == 'normal':
      self.step_time = _positive_normal(rng, np.full(num_clients, mean), spread * mean)
    else:
      self.step_time = rng.exponential(mean, num_clients)

  def task_duration(self, client_id: int, num_steps: int) -> float:
    step_time = self.step_time[client_id]
    if self.jitter:
      step_time = float(_positive_normal(self.rng, np.array(step_time),
                                         np.array(self.jitter * step_time)))
    return num_steps * float(step_time) + self.communication_time
