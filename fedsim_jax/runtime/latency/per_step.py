"""Per-step latency of FedCompass (Li et al. 2024, Section 5.4 and Appendix G.2)."""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsim_jax.runtime.latency.base import (
  LATENCY_MODELS,
  LatencyContext,
  TaskLatency,
  jittered,
  positive_normal,
)
from fedsim_jax.settings import Settings, number, one_of, positive, setting
from fedsim_jax.str_enum import StrEnum


class SpeedDistribution(StrEnum):
  """How clients' mean step times are drawn (`latency.kwargs.distribution`)."""

  HOMOGENEOUS = 'homogeneous'  # every client at `mean`
  NORMAL = 'normal'  # normal around `mean` with relative std `spread`, kept positive
  EXPONENTIAL = 'exponential'  # exponential with mean `mean`


SPEED_DISTRIBUTIONS = tuple(distribution.value for distribution in SpeedDistribution)
PREFIX = 'latency.kwargs.'


@dataclasses.dataclass(frozen=True)
class PerStepSettings(Settings):
  """Settings of `PerStepLatency` (`latency.name='per_step'`)."""

  mean: float = setting(1.0, positive(), 'mean seconds per local step')
  distribution: str = setting(
    'homogeneous', one_of(SPEED_DISTRIBUTIONS), "clients' mean step times (drawn once)"
  )
  spread: float = setting(0.3, positive(allow_zero=True), "relative std of 'normal' speeds")
  jitter: float = setting(0.0, positive(allow_zero=True), 'relative per-task std (0: none)')
  communication_time: float = setting(
    0.0, positive(allow_zero=True), 'fixed seconds added to every task (download + upload)'
  )
  redraw_probability: float = setting(
    0.0, number(minimum=0, maximum=1), "per-task probability that a client's speed is redrawn"
  )


class PerStepLatency:
  """Per-step time drawn once per client, with per-task jitter and optional speed changes.

  Client i's mean time per local step `t_i` is drawn once from `distribution`:
  `homogeneous` (all equal to `mean`), `normal` (N(mean, (spread * mean)^2); FedCompass uses
  spread 0.3) or `exponential` (mean `mean`). Each task's step time is
  `t_i^(k) ~ N(t_i, (jitter * t_i)^2)` (FedCompass: jitter 0.05), and the task lasts
  `communication_time + num_steps * t_i^(k)`. With `redraw_probability` p, before each task
  the client's `t_i` is redrawn from the distribution with probability p (FedCompass App. G.2:
  p = 0.1). Normal draws are truncated to positive values by redrawing: a documented choice,
  since the paper does not say how negative draws are handled.

  Args:
    num_clients: federation size.
    rng: this model's own generator (derive it from the run seed).
    mean: mean seconds per local step.
    distribution: one of `SPEED_DISTRIBUTIONS`.
    spread: relative standard deviation for `normal`.
    jitter: relative per-task standard deviation (0 disables jitter).
    communication_time: fixed seconds added to every task (download + upload).
    redraw_probability: per-task probability that a client's speed is redrawn.
  """

  def __init__(
    self,
    num_clients: int,
    rng: np.random.Generator,
    *,
    mean: float = 1.0,
    distribution: str = 'homogeneous',
    spread: float = 0.3,
    jitter: float = 0.0,
    communication_time: float = 0.0,
    redraw_probability: float = 0.0,
  ) -> None:
    PerStepSettings(
      mean, distribution, spread, jitter, communication_time, redraw_probability
    ).validate(PREFIX)
    self.rng = rng
    self.mean = mean
    self.distribution = distribution
    self.spread = spread
    self.jitter = jitter
    self.communication_time = communication_time
    self.redraw_probability = redraw_probability
    self.step_time = self._draw_speeds(num_clients)

  def _draw_speeds(self, count: int) -> np.ndarray:
    if self.distribution == SpeedDistribution.HOMOGENEOUS:
      return np.full(count, self.mean, np.float64)
    if self.distribution == SpeedDistribution.NORMAL:
      return positive_normal(self.rng, np.full(count, self.mean), self.spread * self.mean)
    return self.rng.exponential(self.mean, count)

  def expected_step_time(self, client_id: int) -> float:
    return float(self.step_time[client_id])

  def sample(self, client_id: int) -> TaskLatency:
    if self.redraw_probability and self.rng.random() < self.redraw_probability:
      self.step_time[client_id] = self._draw_speeds(1)[0]
    step_time = float(self.step_time[client_id])
    step_time = jittered(self.rng, step_time, self.jitter)
    return TaskLatency(communication=self.communication_time, overhead=0.0, per_step=step_time)

  def task_duration(self, client_id: int, num_steps: int) -> float:
    """Convenience: one task's total duration (draws like `sample`)."""
    return self.sample(client_id).duration(num_steps)


@LATENCY_MODELS.register('per_step', PerStepSettings)
def per_step(settings: PerStepSettings, context: LatencyContext) -> PerStepLatency:
  """Per-client step time drawn once, per-task jitter, speed redraws (FedCompass)."""
  return PerStepLatency(context.num_clients, context.rng, **settings.as_dict())
